"""Multi-core kernels, seeded schedules, races and how to find them.

A fused operator on an accelerator runs on several *core groups* at once (on
Ascend: AIV vector cores and AIC cube cores).  They talk through global memory
(GM).  If a consumer core reads a GM region before the producer core's write of
it has landed, it reads whatever the region held before: zeros, garbage, or the
values a *previous* case of a batch left there.  The result is right most of
the time and wrong now and then, only on the outputs that depend on the region.

This module models exactly that, small enough to reason about and fast enough
to batch-run thousands of cases:

* :class:`Kernel` -- a list of :class:`Stage` (a computation on one core group;
  each core reads and writes its own *rows* of named GM buffers, optionally
  with atomic adds) and barriers: :class:`SyncAll` (every core of every group
  waits for all the others) and :class:`Flag` (cross-core set/wait: a core of
  the consumer stage waits for all, or for its paired, cores of the producer
  stage).
* :func:`schedule` -- a seeded scheduler: each (stage, core) draws a duration
  from the stage's :class:`Latency`; a core starts a stage when it has finished
  its previous stage and every barrier in front of it has been released.
* :func:`simulate` -- event-driven execution: a stage reads its inputs when it
  starts, computes with numpy on whole slices, and each write (or each of
  ``chunks`` parts of it) becomes visible when it completes.  A read sees, row
  by row, the last write visible at the time of the read.  Every read that saw
  an older version than program order promises is recorded as a
  :class:`StaleRead`; every write that a program-order-earlier write overwrote
  last as a lost write.  Same seed -> same schedule -> same bits.
* :func:`detect_races` -- a static detector: from stages and barriers alone,
  every pair of accesses by different cores to overlapping rows, at least one
  a write, that no happens-before path orders (RAW, WAR, WAW), with a barrier
  that would order them.
* :func:`batch_run` -- run many cases back to back on the same memory (as a
  test harness does, with the caching allocator handing back the same blocks),
  judge each output against an fp64 reference with a stated tolerance.
* :func:`bisect` -- the field method: cut the kernel after stage k and
  batch-run until the results become nondeterministic, then make the first
  such stage copy each of its inputs out (a probe) to see which one it reads
  inconsistently, and overwrite the writer's output with a known pattern to
  see *what* it read (the previous case's value = a stale read).
* :data:`SCENARIOS` -- ready-made kernels; ``fused_linear_online_max_sum``
  reproduces the field report (a missing SyncAll between ``TargetProcess`` on
  the vector cores and the cube-core matmul stage that reads ``maskedTarget``);
  ``split_softmax`` is a vector-vector race on partial sums; ``atomic_rowsum``
  is race-free but accumulates with atomic adds, so its bits follow the
  schedule (``fix=True``: the deterministic two-phase reduction).

Layering: numpy only; nothing here imports the executors.  Time is in arbitrary units.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = [
    "Latency",
    "Access",
    "Stage",
    "SyncAll",
    "Flag",
    "Buffer",
    "Kernel",
    "StageContext",
    "Schedule",
    "StaleRead",
    "LostWrite",
    "SimResult",
    "simulate",
    "schedule",
    "Finding",
    "detect_races",
    "atomic_accumulations",
    "Tolerance",
    "CaseResult",
    "BatchResult",
    "batch_run",
    "BisectStep",
    "BisectReport",
    "bisect",
    "Scenario",
    "SCENARIOS",
    "get_scenario",
    "failure_rate_curve",
    "draw_timeline",
]

GROUPS_ORDER = ("vector", "cube")
_DISTS = ("lognormal", "uniform", "fixed")
_ROLES = ("input", "output", "workspace")
_FILLS = ("zeros", "garbage")


def _rng(seed, what: str = "seed") -> np.random.Generator:
    """``numpy.random.default_rng(seed)``, with a ValueError naming the argument."""
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={seed!r} must be None, a non-negative int (or a sequence of them) "
                         "or a numpy SeedSequence") from None


def _seed_sequence(seed, what: str = "seed") -> np.random.SeedSequence:
    try:
        return np.random.SeedSequence(seed)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={seed!r} must be None, a non-negative int or a sequence of them") from None


# --------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class Latency:
    """Distribution of one (stage, core) duration.

    Parameters
    ----------
    mean : float
        Mean duration (> 0), arbitrary time units.  Default 1.
    spread : float
        ``"lognormal"``: sigma of ``log(duration)``; the duration is
        ``mean * exp(spread * z - spread**2 / 2)`` with ``z ~ N(0, 1)``, so its
        mean stays ``mean`` for every spread.  ``"uniform"``: half-width
        relative to the mean: the duration is
        ``mean * (1 + spread * tanh(z))``, on the open interval
        ``(mean * (1 - spread), mean * (1 + spread))`` (spread < 1) with mean
        ``mean`` (tanh(z) is odd), drawn from the same normal stream as the
        other kinds -- bounded and symmetric, but peaked at the mean, not
        flat.  ``"fixed"`` ignores it.  Default 0 (every core takes ``mean``).
    dist : {"lognormal", "uniform", "fixed"}
        Default ``"lognormal"``: positive, right-skewed, like a core that is
        occasionally held up (cache misses, MTE queueing, a preempting task).
    """

    mean: float = 1.0
    spread: float = 0.0
    dist: str = "lognormal"

    def __post_init__(self):
        if not (isinstance(self.mean, (int, float)) and self.mean > 0 and math.isfinite(self.mean)):
            raise ValueError(f"Latency: mean must be a finite number > 0, got {self.mean!r}")
        if not (isinstance(self.spread, (int, float)) and self.spread >= 0 and math.isfinite(self.spread)):
            raise ValueError(f"Latency: spread must be a finite number >= 0, got {self.spread!r}")
        if self.dist not in _DISTS:
            raise ValueError(f"Latency: dist must be one of {_DISTS}, got {self.dist!r}")
        if self.dist == "uniform" and self.spread >= 1:
            raise ValueError(f"Latency: uniform spread must be < 1 (durations > 0), got {self.spread!r}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` durations (float64, all > 0) drawn from ``rng``."""
        if self.dist == "fixed" or self.spread == 0:
            # still consume the same number of draws so that schedules of
            # kernels differing only in spread stay aligned
            rng.standard_normal(n)
            return np.full(n, float(self.mean))
        z = rng.standard_normal(n)
        if self.dist == "lognormal":
            return self.mean * np.exp(self.spread * z - 0.5 * self.spread**2)
        # bounded, symmetric, from the same normal stream (not a flat distribution)
        return self.mean * (1.0 + self.spread * np.tanh(z))

    def with_spread(self, spread: float) -> Latency:
        return replace(self, spread=spread)


@dataclass(frozen=True)
class Access:
    """Which rows of a GM buffer each core of a stage touches.

    Parameters
    ----------
    buffer : str
        Buffer name.
    rows : "shard", "all" or callable
        ``"shard"`` (default): core ``i`` of ``n`` gets rows
        ``[i * R // n, (i + 1) * R // n)`` of the buffer's first axis (``R``
        rows); ``"all"``: every core the whole buffer; a callable
        ``rows(core, ncores, R) -> (start, stop)`` for anything else.
    """

    buffer: str
    rows: object = "shard"

    def region(self, core: int, ncores: int, nrows: int) -> tuple[int, int]:
        if self.rows == "shard":
            return (core * nrows) // ncores, ((core + 1) * nrows) // ncores
        if self.rows == "all":
            return 0, nrows
        if callable(self.rows):
            a, b = self.rows(core, ncores, nrows)
            a, b = int(a), int(b)
            if not 0 <= a <= b <= nrows:
                raise ValueError(f"Access({self.buffer!r}): rows callable gave ({a}, {b}) outside [0, {nrows}]")
            return a, b
        raise ValueError(f"Access({self.buffer!r}): rows must be 'shard', 'all' or a callable, got {self.rows!r}")


def _as_access(a) -> Access:
    if isinstance(a, Access):
        return a
    if isinstance(a, str):
        return Access(a)
    raise TypeError(f"access must be an Access or a buffer name, got {a!r}")


@dataclass(frozen=True)
class StageContext:
    """What a stage function is told about the core it runs on.

    ``rows[buffer] = (start, stop)`` for every buffer the stage reads or writes;
    ``params`` are the kernel's scalar parameters (e.g. ``vocab_start``).
    """

    stage: str
    core: int
    ncores: int
    rows: dict
    params: dict


@dataclass(frozen=True)
class Stage:
    """One phase of a kernel on one core group.

    Parameters
    ----------
    name : str
        Unique within the kernel.
    group : str
        Core group it runs on (a key of ``Kernel.cores``, e.g. "vector", "cube").
    reads, writes : tuple of Access or str
        GM regions read (all at the start of the stage) and written.
    fn : callable
        ``fn(ctx: StageContext, inputs: dict[buffer -> rows seen]) ->
        dict[buffer -> rows written]``; vectorised over the core's slice.
    latency : Latency
        Duration distribution of this stage on one core.
    chunks : int
        The write is split into ``chunks`` equal row parts becoming visible at
        ``start + (c + 1) / chunks * duration`` (default 1: all at the end).
    atomic : tuple of str
        Written buffers accumulated with atomic adds (AscendC
        ``SetAtomicAdd`` + copy to GM): when a part lands, GM rows become
        ``old + value`` rounded to the buffer dtype.  Atomic adds of different
        cores to the same rows do not race with each other, but their order is
        the order they land, and floating-point addition is not associative:
        the bits depend on the schedule.
    """

    name: str
    group: str
    reads: tuple = ()
    writes: tuple = ()
    fn: Callable | None = None
    latency: Latency = Latency()
    chunks: int = 1
    atomic: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "reads", tuple(_as_access(a) for a in self.reads))
        object.__setattr__(self, "writes", tuple(_as_access(a) for a in self.writes))
        if not isinstance(self.chunks, int) or self.chunks < 1:
            raise ValueError(f"Stage {self.name!r}: chunks must be an int >= 1, got {self.chunks!r}")
        if not isinstance(self.latency, Latency):
            raise TypeError(f"Stage {self.name!r}: latency must be a Latency, got {self.latency!r}")
        object.__setattr__(self, "atomic", tuple(self.atomic))
        wb = {a.buffer for a in self.writes}
        for b in self.atomic:
            if b not in wb:
                raise ValueError(f"Stage {self.name!r}: atomic buffer {b!r} is not written; writes: {sorted(wb)}")


@dataclass(frozen=True)
class SyncAll:
    """Full-core barrier (``SyncAll()`` in AscendC): no core of any group starts
    a stage listed after it before every core has finished every stage listed
    before it."""

    name: str = "SyncAll"


@dataclass(frozen=True)
class Flag:
    """Cross-core flag (``CrossCoreSetFlag`` / ``CrossCoreWaitFlag``): a core
    of stage ``consumer`` waits until its producer cores have finished stage
    ``producer`` (and their writes are visible).

    ``cores`` says which producer cores each consumer core waits for:
    ``"all"`` (default, every producer core), ``"overlap"`` (the producer
    cores whose written rows overlap the rows the consumer core reads, in any
    buffer -- the AIC/AIV pairing of a CV-fused kernel), or a callable
    ``cores(consumer_core, n_producer_cores, n_consumer_cores) -> iterable of
    producer cores``.  Its position in the item list does not matter;
    ``producer`` must be listed before ``consumer``."""

    producer: str
    consumer: str
    name: str = ""
    cores: object = "all"

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", f"flag({self.producer}->{self.consumer})")
        if not (self.cores in ("all", "overlap") or callable(self.cores)):
            raise ValueError(f"{self.name}: cores must be 'all', 'overlap' or a callable, got {self.cores!r}")


@dataclass(frozen=True)
class Buffer:
    """A GM buffer: shape (first axis = rows), numpy dtype name, role."""

    shape: tuple
    dtype: str = "float32"
    role: str = "workspace"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if self.role not in _ROLES:
            raise ValueError(f"Buffer: role must be one of {_ROLES}, got {self.role!r}")
        np.dtype(self.dtype)


@dataclass(frozen=True)
class Kernel:
    """A multi-core kernel: core counts, GM buffers, and the item list.

    ``items`` holds :class:`Stage`, :class:`SyncAll` and :class:`Flag` in
    program order.  Each core of a group runs that group's stages in list
    order.
    """

    name: str
    cores: dict
    buffers: dict
    items: tuple
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "items", tuple(self.items))
        names = set()
        for it in self.items:
            if not isinstance(it, (Stage, SyncAll, Flag)):
                raise TypeError(f"Kernel {self.name!r}: items must be Stage/SyncAll/Flag, got {it!r}")
            if it.name in names:
                raise ValueError(f"Kernel {self.name!r}: duplicate item name {it.name!r}")
            names.add(it.name)
        pos = {it.name: i for i, it in enumerate(self.items) if isinstance(it, Stage)}
        for it in self.items:
            if isinstance(it, Stage):
                if it.group not in self.cores:
                    raise ValueError(f"Stage {it.name!r}: group {it.group!r} not in cores {sorted(self.cores)}")
                for a in it.reads + it.writes:
                    if a.buffer not in self.buffers:
                        raise ValueError(f"Stage {it.name!r}: unknown buffer {a.buffer!r}; buffers: {sorted(self.buffers)}")
                    if a.buffer in {w.buffer for w in it.writes} and self.buffers[a.buffer].role == "input":
                        raise ValueError(f"Stage {it.name!r} writes input buffer {a.buffer!r}")
            if isinstance(it, Flag):
                for s in (it.producer, it.consumer):
                    if s not in pos:
                        raise ValueError(f"{it.name}: unknown stage {s!r}; stages: {list(pos)}")
                if pos[it.producer] >= pos[it.consumer]:
                    raise ValueError(f"{it.name}: producer must be listed before consumer")

    # -- views
    @property
    def stages(self) -> list[Stage]:
        return [it for it in self.items if isinstance(it, Stage)]

    @property
    def barriers(self) -> list:
        return [it for it in self.items if not isinstance(it, Stage)]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ValueError(f"kernel {self.name!r} has no stage {name!r}; stages: {[s.name for s in self.stages]}")

    def outputs(self) -> list[str]:
        return [b for b, v in self.buffers.items() if v.role == "output"]

    def inputs(self) -> list[str]:
        return [b for b, v in self.buffers.items() if v.role == "input"]

    # -- mutations (return new kernels)
    def without(self, *names: str) -> Kernel:
        """The kernel with the named barriers (or stages) removed."""
        known = {it.name for it in self.items}
        for n in names:
            if n not in known:
                raise ValueError(f"kernel {self.name!r} has no item {n!r}; items: {sorted(known)}")
        items = [it for it in self.items if it.name not in names]
        gone = set(names)
        items = [it for it in items if not (isinstance(it, Flag) and ({it.producer, it.consumer} & gone))]
        return replace(self, items=tuple(items))

    def with_item(self, item, before: str | None = None, after: str | None = None) -> Kernel:
        """The kernel with ``item`` inserted before the item named ``before``
        or after the item named ``after`` (appended when both are None)."""
        items = list(self.items)
        ref = before if before is not None else after
        if ref is None:
            items.append(item)
        else:
            idx = [i for i, it in enumerate(items) if it.name == ref]
            if not idx:
                raise ValueError(f"kernel {self.name!r} has no item {ref!r}")
            items.insert(idx[0] + (after is not None and before is None), item)
        return replace(self, items=tuple(items))

    def cut_after(self, stage: str | int) -> Kernel:
        """Only the stages up to and including ``stage`` (a name or 0-based
        stage index), with the barriers between them -- "comment out the rest"."""
        stages = self.stages
        k = stage if isinstance(stage, int) else [s.name for s in stages].index(self.stage(stage).name)
        if not 0 <= k < len(stages):
            raise ValueError(f"cut_after: stage index must be in [0, {len(stages)}), got {k}")
        keep = {s.name for s in stages[: k + 1]}
        last = [i for i, it in enumerate(self.items) if it.name == stages[k].name][0]
        items = [it for it in self.items[: last + 1]
                 if not (isinstance(it, Flag) and not {it.producer, it.consumer} <= keep)]
        return replace(self, items=tuple(items))

    def replace_stage(self, name: str, **changes) -> Kernel:
        """The kernel with stage ``name`` replaced by ``replace(stage, **changes)``."""
        self.stage(name)
        items = tuple(replace(it, **changes) if isinstance(it, Stage) and it.name == name else it
                      for it in self.items)
        return replace(self, items=items)

    def flag_pairs(self, flag: Flag) -> dict:
        """consumer core -> sorted list of the producer cores it waits for."""
        p, c = self.stage(flag.producer), self.stage(flag.consumer)
        n_p, n_c = int(self.cores[p.group]), int(self.cores[c.group])
        out = {}
        for j in range(n_c):
            if flag.cores == "all":
                out[j] = list(range(n_p))
            elif flag.cores == "overlap":
                waits = []
                for i in range(n_p):
                    hit = False
                    for w in p.writes:
                        for r in c.reads:
                            if w.buffer != r.buffer:
                                continue
                            nr = self.buffers[w.buffer].shape[0]
                            a0, a1 = w.region(i, n_p, nr)
                            b0, b1 = r.region(j, n_c, nr)
                            hit |= a0 < b1 and b0 < a1
                    if hit:
                        waits.append(i)
                out[j] = waits
            else:
                cs = sorted({int(i) for i in flag.cores(j, n_p, n_c)})
                if cs and not (0 <= cs[0] and cs[-1] < n_p):
                    raise ValueError(f"{flag.name}: cores callable gave {cs} outside [0, {n_p})")
                out[j] = cs
        return out

    def with_spread(self, spread: float) -> Kernel:
        """Every stage's latency with ``spread`` replaced."""
        items = tuple(replace(it, latency=it.latency.with_spread(spread)) if isinstance(it, Stage) else it
                      for it in self.items)
        return replace(self, items=items)

    def describe(self) -> str:
        lines = [f"kernel {self.name}: cores {dict(self.cores)}"]
        for it in self.items:
            if isinstance(it, Stage):
                r = ", ".join(f"{a.buffer}[{a.rows if isinstance(a.rows, str) else 'custom'}]" for a in it.reads)
                w = ", ".join(f"{a.buffer}[{a.rows if isinstance(a.rows, str) else 'custom'}]" for a in it.writes)
                lines.append(f"  {it.name:<24} on {it.group:<6} reads {r or '-'}; writes {w or '-'}"
                             f"  (latency mean {it.latency.mean:g}, spread {it.latency.spread:g})")
            elif isinstance(it, SyncAll):
                lines.append(f"  --- {it.name} (SyncAll) ---")
            else:
                pairs = "" if it.cores == "all" else f", {it.cores if isinstance(it.cores, str) else 'custom'} cores"
                lines.append(f"  ~~~ {it.name}: {it.producer} -> {it.consumer} (flag{pairs}) ~~~")
        return "\n".join(lines)


# --------------------------------------------------------------------------- scheduling


@dataclass
class Schedule:
    """Start and end times of every (stage, core): ``start[stage]`` and
    ``end[stage]`` are float64 arrays over the stage's cores."""

    start: dict
    end: dict
    seed: object

    @property
    def makespan(self) -> float:
        return max((float(e.max()) for e in self.end.values() if e.size), default=0.0)


def schedule(kernel: Kernel, seed=None, rng: np.random.Generator | None = None) -> Schedule:
    """A seeded schedule of ``kernel``.

    Rule: a core of group g starts stage s at
    ``max(end of its previous stage, release of the last SyncAll before s,
    end of every producer stage flagged into s)``; its duration is drawn from
    ``s.latency``.  Durations are drawn stage by stage in list order from
    ``numpy.random.default_rng(seed)``, so the same seed gives the same
    schedule.  Vectorised over the cores of a stage.
    """
    if rng is None:
        rng = _rng(seed)
    free = {g: np.zeros(int(n)) for g, n in kernel.cores.items()}
    flags_into: dict[str, list] = {}
    for it in kernel.items:
        if isinstance(it, Flag):
            flags_into.setdefault(it.consumer, []).append((it.producer, kernel.flag_pairs(it)))
    start, end = {}, {}
    for it in kernel.items:
        if isinstance(it, SyncAll):
            t = max((float(f.max()) for f in free.values() if f.size), default=0.0)
            for f in free.values():
                f[:] = t
        elif isinstance(it, Stage):
            n = int(kernel.cores[it.group])
            dur = it.latency.sample(rng, n)
            s = free[it.group].copy()
            for p, pairs in flags_into.get(it.name, ()):
                waits = np.array([end[p][pairs[j]].max() if pairs[j] else -np.inf for j in range(n)])
                s = np.maximum(s, waits)
            start[it.name] = s
            end[it.name] = s + dur
            free[it.group] = end[it.name].copy()
    return Schedule(start=start, end=end, seed=seed)


# --------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class StaleRead:
    """A read that saw an older version of some rows than program order promises.

    ``saw``: names of the writers whose values were read ("<before run>" = what
    the buffer held before the run); ``expected``: the writer program order
    says it should have seen; ``late_by``: how long after the read that write
    became visible.
    """

    stage: str
    group: str
    core: int
    buffer: str
    rows: tuple
    n_rows: int
    time: float
    saw: tuple
    expected: str
    late_by: float


@dataclass(frozen=True)
class LostWrite:
    """Rows whose final contents come from a program-order-earlier writer
    (write-after-write reordered)."""

    buffer: str
    rows: tuple
    n_rows: int
    final_writer: str
    expected: str


@dataclass
class SimResult:
    """One simulated run: ``outputs`` (copies of the output buffers),
    ``memory`` (all GM after the run, to feed into the next run of a batch),
    ``schedule``, ``stale_reads``, ``lost_writes`` and ``write_times``
    (list of (stage, core, chunk, buffer, (row_lo, row_hi), landing time))."""

    outputs: dict
    memory: dict
    schedule: Schedule
    stale_reads: list
    lost_writes: list
    write_times: list
    kernel: Kernel

    @property
    def ok_order(self) -> bool:
        return not self.stale_reads and not self.lost_writes


def _fresh_memory(kernel: Kernel, fill: str, rng: np.random.Generator) -> dict:
    if fill not in _FILLS:
        raise ValueError(f"fill must be one of {_FILLS}, got {fill!r}")
    mem = {}
    for name, b in kernel.buffers.items():
        dt = np.dtype(b.dtype)
        if fill == "zeros":
            mem[name] = np.zeros(b.shape, dtype=dt)
        elif dt.kind == "f":
            mem[name] = rng.standard_normal(b.shape).astype(dt) * dt.type(1e3)
        else:
            mem[name] = rng.integers(-(2**15), 2**15, size=b.shape).astype(dt)
    return mem


def _chunk_bounds(a: int, b: int, chunks: int) -> list[tuple[int, int]]:
    n = b - a
    cuts = [a + (c * n) // chunks for c in range(chunks + 1)]
    return [(cuts[c], cuts[c + 1]) for c in range(chunks)]


_PLAN_CACHE: dict = {}


def _static_plan(kernel: Kernel):
    """Per-kernel static data of :func:`simulate` (cached by identity): the
    stages, row counts, the version each read is promised (last writer listed
    before it, per row), the final promised versions, and how many core writes
    each stage makes to each row."""
    hit = _PLAN_CACHE.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    stages = kernel.stages
    sidx = {s.name: i for i, s in enumerate(stages)}
    nrows = {b: v.shape[0] for b, v in kernel.buffers.items()}
    promised_before = {}
    promised = {b: np.full(nrows[b], -1, dtype=np.int64) for b in kernel.buffers}
    expected_count: dict = {}  # (stage idx, buffer) -> per-row number of core writes
    for i, s in enumerate(stages):
        promised_before[s.name] = {a.buffer: promised[a.buffer].copy() for a in s.reads}
        n = int(kernel.cores[s.group])
        for a in s.writes:
            cnt = expected_count.setdefault((i, a.buffer), np.zeros(nrows[a.buffer], dtype=np.int64))
            for c in range(n):
                lo, hi = a.region(c, n, nrows[a.buffer])
                promised[a.buffer][lo:hi] = i
                cnt[lo:hi] += 1
    plan = (stages, sidx, nrows, promised_before, promised, expected_count)
    if len(_PLAN_CACHE) > 256:
        _PLAN_CACHE.clear()
    _PLAN_CACHE[id(kernel)] = (kernel, plan)
    return plan


def simulate(kernel: Kernel, inputs: dict, *, seed=None, memory: dict | None = None,
             fill: str = "zeros", sched: Schedule | None = None) -> SimResult:
    """Run ``kernel`` once on ``inputs`` under the seeded schedule.

    Parameters
    ----------
    kernel : Kernel
    inputs : dict
        Values of every ``role="input"`` buffer (the host copies them in
        before launch, so they are complete when any core starts).
    seed : int or None
        Schedule seed (:func:`schedule`).  The memory fill for ``fill="garbage"``
        uses the same seed.
    memory : dict or None
        GM contents before the run (e.g. ``previous.memory`` in a batch: what
        the last case left in the workspace and output blocks).  Not modified.
        Buffers it does not hold (or None) start as fresh memory per ``fill``.
    fill : {"zeros", "garbage"}
        Contents of fresh memory.
    sched : Schedule, optional
        Use this schedule instead of drawing one.

    Returns
    -------
    SimResult

    Notes
    -----
    Events are processed in time order; at equal times a write lands before
    a read (a barrier releases its waiters at the instant the last write
    lands).  A (stage, core) reads all its regions at its start, computes once
    with numpy on whole slices, and its writes land per chunk.  Row versions
    (which stage last wrote each row) are tracked beside the values and
    compared with what list order promises.
    """
    rng = _rng(seed)
    for name in kernel.inputs():
        if name not in inputs:
            raise ValueError(f"simulate: missing input {name!r}; inputs needed: {kernel.inputs()}")
    if sched is None:
        sched = schedule(kernel, rng=rng)
    mem = _fresh_memory(kernel, fill, rng)
    for k, v in (memory or {}).items():
        if k in mem:
            if np.shape(v) != mem[k].shape:
                raise ValueError(f"simulate: memory[{k!r}] has shape {np.shape(v)}, buffer is {mem[k].shape}")
            mem[k] = np.array(v, dtype=mem[k].dtype, copy=True)
    for name in kernel.inputs():
        b = kernel.buffers[name]
        arr = np.asarray(inputs[name])
        if arr.shape != b.shape:
            raise ValueError(f"simulate: input {name!r} has shape {arr.shape}, buffer is {b.shape}")
        mem[name] = arr.astype(b.dtype, copy=True)
    stages, sidx, nrows, promised_before, promised, expected_count = _static_plan(kernel)
    # actual row versions: -1 = contents before the run
    version = {b: np.full(nrows[b], -1, dtype=np.int64) for b in kernel.buffers}
    landed = {key: np.zeros_like(v) for key, v in expected_count.items()}
    # atomic adds of each atomic stage landed since the last plain write of the row
    since_plain = {(i, b): np.zeros(nrows[b], dtype=np.int64) for i, s in enumerate(stages) for b in s.atomic}
    # events: (time, kind 0=write 1=read, seq, payload)
    events = []
    seq = 0
    for s in stages:
        n = int(kernel.cores[s.group])
        st = sched.start[s.name]
        for c in range(n):
            heapq.heappush(events, (float(st[c]), 1, seq, (s.name, c)))
            seq += 1
    write_times = []
    stale = []
    visible_at = {}  # (stage idx, buffer) -> per-row time the promised write lands
    while events:
        t, kind, _, payload = heapq.heappop(events)
        if kind == 1:
            name, c = payload
            s = stages[sidx[name]]
            n = int(kernel.cores[s.group])
            rows = {a.buffer: a.region(c, n, nrows[a.buffer]) for a in s.reads + s.writes}
            seen = {}
            for a in s.reads:
                lo, hi = a.region(c, n, nrows[a.buffer])
                seen[a.buffer] = mem[a.buffer][lo:hi].copy()
                got = version[a.buffer][lo:hi]
                want = promised_before[name][a.buffer][lo:hi]
                bad = got != want
                partial = np.zeros_like(bad)
                for w in np.unique(want[want >= 0]):  # every core's write of the promised writer landed?
                    sel = (want == w) & ~bad
                    partial |= sel & (landed[(w, a.buffer)][lo:hi] < expected_count[(w, a.buffer)][lo:hi])
                bad = bad | partial
                if bad.any():
                    idx = np.nonzero(bad)[0] + lo
                    exp_writers = np.unique(want[bad])
                    saw = tuple("<before run>" if v < 0 else stages[v].name for v in np.unique(got[bad & ~partial]))
                    saw += tuple(f"{stages[v].name} (partial)" for v in np.unique(got[partial]))
                    exp = ", ".join("<before run>" if v < 0 else stages[v].name for v in exp_writers)
                    stale.append(StaleRead(stage=name, group=s.group, core=c, buffer=a.buffer,
                                           rows=(int(idx[0]), int(idx[-1]) + 1), n_rows=int(idx.size),
                                           time=t, saw=saw, expected=exp, late_by=np.nan))
            ctx = StageContext(stage=name, core=c, ncores=n, rows=rows, params=dict(kernel.params))
            out = s.fn(ctx, seen) if s.fn is not None else {}
            for a in s.writes:
                lo, hi = rows[a.buffer]
                if a.buffer not in out:
                    raise ValueError(f"stage {name!r} did not return buffer {a.buffer!r}")
                val = np.asarray(out[a.buffer])
                want_shape = (hi - lo,) + kernel.buffers[a.buffer].shape[1:]
                if val.shape != want_shape:
                    raise ValueError(f"stage {name!r} core {c}: {a.buffer!r} has shape {val.shape}, expected {want_shape}")
                st_, en_ = float(sched.start[name][c]), float(sched.end[name][c])
                for k, (clo, chi) in enumerate(_chunk_bounds(lo, hi, s.chunks)):
                    tk = st_ + (en_ - st_) * (k + 1) / s.chunks
                    heapq.heappush(events, (tk, 0, seq, (name, c, k, a.buffer, clo, chi, val[clo - lo:chi - lo])))
                    seq += 1
        else:
            name, c, k, buf, lo, hi, val = payload
            if buf in stages[sidx[name]].atomic:
                dt = mem[buf].dtype
                mem[buf][lo:hi] = (mem[buf][lo:hi] + val.astype(dt)).astype(dt)
                since_plain[(sidx[name], buf)][lo:hi] += 1
            else:
                mem[buf][lo:hi] = val
                for (_, b2), arr in since_plain.items():
                    if b2 == buf:
                        arr[lo:hi] = 0
            version[buf][lo:hi] = sidx[name]
            landed[(sidx[name], buf)][lo:hi] += 1
            write_times.append((name, c, k, buf, (lo, hi), t))
            key = (sidx[name], buf)
            if key not in visible_at:
                visible_at[key] = np.full(nrows[buf], np.nan)
            visible_at[key][lo:hi] = t
    # how late the promised writes were
    fixed = []
    for r in stale:
        ws = [sidx[x] for x in r.expected.split(", ") if x != "<before run>"]
        late = np.nan
        for w in ws:
            va = visible_at.get((w, r.buffer))
            if va is not None:
                late = np.nanmax([late, float(np.nanmax(va[r.rows[0]:r.rows[1]])) - r.time])
        fixed.append(replace(r, late_by=float(late)))
    lost = []
    for b in kernel.buffers:
        bad = version[b] != promised[b]
        for (i, b2), arr in since_plain.items():
            if b2 == b:  # a plain write wiped some of the promised atomic adds
                bad |= (promised[b] == i) & (arr < expected_count[(i, b)])
        if bad.any():
            idx = np.nonzero(bad)[0]
            fw = ", ".join("<before run>" if v < 0 else stages[v].name for v in np.unique(version[b][bad]))
            ex = ", ".join("<before run>" if v < 0 else stages[v].name for v in np.unique(promised[b][bad]))
            lost.append(LostWrite(buffer=b, rows=(int(idx[0]), int(idx[-1]) + 1), n_rows=int(idx.size),
                                  final_writer=fw, expected=ex))
    outputs = {b: mem[b].copy() for b in kernel.outputs()}
    return SimResult(outputs=outputs, memory=mem, schedule=sched, stale_reads=fixed,
                     lost_writes=lost, write_times=write_times, kernel=kernel)


# --------------------------------------------------------------------------- static detection


@dataclass(frozen=True)
class Finding:
    """A data race found statically.

    ``kind`` in {"RAW", "WAR", "WAW"} read in list order: ``first`` is the
    access listed first (stage, "read"/"write"), ``second`` the later one.
    ``core_pairs`` counts the unordered (core, core) pairs; ``example`` is one
    ((group, core), (group, core), (row_lo, row_hi)) overlap.  ``fix`` names a
    barrier that orders every such pair (checked by re-running the detector).
    """

    kind: str
    buffer: str
    first: tuple
    second: tuple
    core_pairs: int
    example: tuple
    fix: str

    def __str__(self) -> str:
        (ga, ca), (gb, cb), (lo, hi) = self.example
        return (f"{self.kind} on {self.buffer}: {self.first[0]} ({self.first[1]}) vs "
                f"{self.second[0]} ({self.second[1]}), {self.core_pairs} unordered core pair(s), "
                f"e.g. {ga}[{ca}] and {gb}[{cb}] on rows [{lo}, {hi}); fix: {self.fix}")


def _happens_before(kernel: Kernel):
    """Nodes (stage, core) and the transitive happens-before matrix."""
    nodes = []  # (stage idx, stage name, group, core)
    stages = kernel.stages
    for i, s in enumerate(stages):
        for c in range(int(kernel.cores[s.group])):
            nodes.append((i, s.name, s.group, c))
    # barrier nodes appended after stage nodes
    nid = {(n[1], n[3]): k for k, n in enumerate(nodes)}
    nb = len(kernel.barriers)
    N = len(nodes) + nb
    edge = np.zeros((N, N), dtype=bool)
    last_on_core: dict = {}
    seen_nodes: list[int] = []
    bi = len(nodes)
    for it in kernel.items:
        if isinstance(it, Stage):
            for c in range(int(kernel.cores[it.group])):
                k = nid[(it.name, c)]
                prev = last_on_core.get((it.group, c))
                if prev is not None:
                    edge[prev, k] = True
                last_on_core[(it.group, c)] = k
                seen_nodes.append(k)
        elif isinstance(it, SyncAll):
            edge[seen_nodes, bi] = True
            # every later stage node gets an edge from the barrier (filled below)
            bi += 1
        else:
            bi += 1
    # barrier -> later nodes
    bi = len(nodes)
    order = {it.name: i for i, it in enumerate(kernel.items)}
    for it in kernel.items:
        if isinstance(it, SyncAll):
            p = order[it.name]
            later = [k for k, n in enumerate(nodes) if order[n[1]] > p]
            edge[bi, later] = True
            bi += 1
        elif isinstance(it, Flag):
            nid2 = {(n[1], n[3]): k for k, n in enumerate(nodes)}
            for j, waits in kernel.flag_pairs(it).items():
                for i in waits:
                    edge[nid2[(it.producer, i)], nid2[(it.consumer, j)]] = True
            bi += 1
    reach = edge.copy()
    for k in range(N):  # Warshall, vectorised over rows and columns
        reach |= reach[:, k:k + 1] & reach[k:k + 1, :]
    return nodes, reach[: len(nodes), : len(nodes)]


def _races_raw(kernel: Kernel):
    nodes, reach = _happens_before(kernel)
    nid = {(n[1], n[3]): k for k, n in enumerate(nodes)}
    nrows = {b: v.shape[0] for b, v in kernel.buffers.items()}
    acc = {}  # buffer -> lists
    for s in kernel.stages:
        n = int(kernel.cores[s.group])
        for is_w, lst in ((False, s.reads), (True, s.writes)):
            for a in lst:
                for c in range(n):
                    lo, hi = a.region(c, n, nrows[a.buffer])
                    if hi > lo:
                        at = is_w and a.buffer in s.atomic
                        acc.setdefault(a.buffer, []).append((nid[(s.name, c)], is_w, lo, hi, at))
    groups = {}
    for buf, lst in acc.items():
        arr = np.array(lst, dtype=np.int64)
        node, w, lo, hi, at = arr.T
        w = w.astype(bool)
        at = at.astype(bool)
        ga = np.array([nodes[k][2] for k in node])
        ca = np.array([nodes[k][3] for k in node])
        si = np.array([nodes[k][0] for k in node])
        diffcore = (ga[:, None] != ga[None, :]) | (ca[:, None] != ca[None, :])
        overlap = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
        anyw = w[:, None] | w[None, :]
        unordered = ~reach[node[:, None], node[None, :]] & ~reach[node[None, :], node[:, None]]
        # keep each unordered pair once, first = earlier-listed stage
        first = (si[:, None] < si[None, :]) | ((si[:, None] == si[None, :]) & (np.arange(len(node))[:, None] < np.arange(len(node))[None, :]))
        # two atomic adds commute as far as races go (their order only changes rounding)
        m = diffcore & overlap & anyw & unordered & first & ~(at[:, None] & at[None, :])
        for i, j in zip(*np.nonzero(m), strict=True):
            kind = "WAW" if w[i] and w[j] else ("RAW" if w[i] else "WAR")
            key = (kind, buf, nodes[node[i]][1], "write" if w[i] else "read",
                   nodes[node[j]][1], "write" if w[j] else "read")
            ex = ((ga[i], int(ca[i])), (ga[j], int(ca[j])),
                  (int(max(lo[i], lo[j])), int(min(hi[i], hi[j]))))
            g = groups.setdefault(key, [0, ex])
            g[0] += 1
    return groups


def atomic_accumulations(kernel: Kernel) -> list[tuple]:
    """Buffers whose rows receive more than one atomic add in one run:
    ``(buffer, stages, max adds per row)``.  Race-free, but the sum is formed
    in the order the adds land, so its bits depend on the schedule unless
    the additions happen to be exact."""
    nrows = {b: v.shape[0] for b, v in kernel.buffers.items()}
    count: dict = {}
    who: dict = {}
    for s in kernel.stages:
        n = int(kernel.cores[s.group])
        for a in s.writes:
            if a.buffer not in s.atomic:
                continue
            cnt = count.setdefault(a.buffer, np.zeros(nrows[a.buffer], dtype=np.int64))
            for c in range(n):
                lo, hi = a.region(c, n, nrows[a.buffer])
                cnt[lo:hi] += 1
            who.setdefault(a.buffer, []).append(s.name)
    return [(b, tuple(who[b]), int(c.max())) for b, c in count.items() if c.size and c.max() > 1]


def detect_races(kernel: Kernel, *, suggest: bool = True) -> list[Finding]:
    """Every data race of ``kernel``, from its stages and barriers alone.

    A race is a pair of accesses to overlapping rows of one buffer, by two
    different cores, at least one a write, such that neither happens before
    the other.  Happens-before is the transitive closure of: program order on
    each core; every stage before a SyncAll -> the SyncAll -> every stage after
    it (all cores); every core of a flag's producer stage -> the flag -> every
    core of its consumer stage.  Accesses of one core never race with each
    other (program order), so a pair is always cross-core.

    Returns findings grouped by (kind, buffer, stage pair), listed in kernel
    order.  With ``suggest``, each finding names a barrier that orders every
    pair of the group -- ``SyncAll before '<second stage>'`` or
    ``Flag('<first>' -> '<second>')`` -- checked by re-running the analysis on
    the kernel with that barrier added; two accesses of the same stage cannot
    be ordered by any barrier and get the advice to split the rows.
    """
    groups = _races_raw(kernel)
    out = []
    for (kind, buf, sa, ma, sb, mb), (count, ex) in groups.items():
        fix = ""
        if suggest:
            if sa == sb:
                fix = f"none: two cores of '{sa}' touch the same rows; give each core its own rows"
            else:
                cands = [(f"SyncAll after '{sa}'", SyncAll(name=f"SyncAll<{sa}>"), None, sa),
                         (f"Flag('{sa}' -> '{sb}')", Flag(sa, sb), None, None),
                         (f"SyncAll before '{sb}'", SyncAll(name=f"SyncAll<<{sb}>"), sb, None)]
                for label, item, before, after in cands:
                    k2 = kernel.with_item(item, before=before, after=after)
                    if not any(key[:2] == (kind, buf) and key[2] == sa and key[4] == sb for key in _races_raw(k2)):
                        fix = label
                        break
                if not fix:
                    fix = f"SyncAll before '{sb}' does not suffice; reorder the stages"
        out.append(Finding(kind=kind, buffer=buf, first=(sa, ma), second=(sb, mb), core_pairs=count,
                           example=ex, fix=fix))
    order = {s.name: i for i, s in enumerate(kernel.stages)}
    out.sort(key=lambda f: (order[f.second[0]], order[f.first[0]], f.buffer, f.kind))
    return out


# --------------------------------------------------------------------------- batches and judging


@dataclass(frozen=True)
class Tolerance:
    """Pass rule for one output element: ``|x - ref| <= atol + rtol * |ref|``
    with ``ref`` the fp64 reference; NaN/inf in ``x`` where ``ref`` is finite
    fail.  Defaults rtol = atol = 1e-4 (msprobe-style: well above the fp32
    error of a correct run, far below a wrong one).  For the field scenario
    the predicted logits of a correct run are within Higham's dot-product
    bound ``gamma_H * sum_h |x_h w_h| + u |ref|`` (H = 32, u = 2**-24), which
    stays below atol / 2 (tested on every case); a stale read picks the logit
    of another vocabulary entry and is off by O(1)."""

    rtol: float = 1e-4
    atol: float = 1e-4

    def passes(self, x: np.ndarray, ref: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            ok = np.abs(x - ref) <= self.atol + self.rtol * np.abs(ref)
        return ok | (np.isnan(x) & np.isnan(ref)) | (np.isinf(x) & (x == ref))


@dataclass
class CaseResult:
    """One case of a batch: per-output pass flag, number of failing elements
    and max |x - ref| / (atol + rtol |ref|) (the tolerance ratio; > 1 fails)."""

    index: int
    passed: dict
    n_bad: dict
    ratio: dict
    stale_reads: list
    lost_writes: list
    outputs: dict

    @property
    def ok(self) -> bool:
        return all(self.passed.values())


@dataclass
class BatchResult:
    cases: list
    outputs: list

    @property
    def n(self) -> int:
        return len(self.cases)

    @property
    def failure_rate(self) -> float:
        return sum(not c.ok for c in self.cases) / max(1, self.n)

    def failures_by_output(self) -> dict:
        return {o: sum(not c.passed[o] for c in self.cases) for o in self.outputs}

    def max_ratio(self) -> dict:
        return {o: max((c.ratio[o] for c in self.cases), default=0.0) for o in self.outputs}

    @property
    def n_stale(self) -> int:
        return sum(bool(c.stale_reads or c.lost_writes) for c in self.cases)

    def summary(self) -> str:
        fb = self.failures_by_output()
        mr = self.max_ratio()
        lines = [f"{self.n} cases, {self.n - sum(c.ok for c in self.cases)} failed "
                 f"(failure rate {self.failure_rate:.1%}); {self.n_stale} had out-of-order reads/writes"]
        for o in self.outputs:
            lines.append(f"  {o:<24} failed {fb[o]:>5}/{self.n}   max error/tolerance {mr[o]:.3g}")
        return "\n".join(lines)


def batch_run(kernel: Kernel, cases: Sequence[dict], reference: Callable, *, seed=0,
              tol: Tolerance = Tolerance(), fill: str = "zeros", memory: dict | None = None,
              keep_outputs: bool = False) -> BatchResult:
    """Run ``cases`` back to back on one GM, each with its own schedule seed.

    Case ``i`` starts from the memory case ``i - 1`` left behind (the first
    from ``memory`` or fresh memory), so a stale read sees the previous case's
    values -- why the field failures moved around between batch runs.
    Schedule seeds come from ``numpy.random.SeedSequence(seed).spawn``.
    Each output is judged against ``reference(case) -> dict[output -> fp64]``
    with ``tol``.
    """
    if len(cases) < 1:
        raise ValueError("batch_run: cases must hold at least one case, got none")
    ss = _seed_sequence(seed)
    seeds = ss.spawn(len(cases))
    outs = kernel.outputs()
    res = []
    mem = memory
    for i, case in enumerate(cases):
        r = simulate(kernel, case, seed=seeds[i], memory=mem, fill=fill)
        mem = r.memory
        ref = reference(case)
        passed, nbad, ratio = {}, {}, {}
        for o in outs:
            x = r.outputs[o].astype(np.float64)
            rf = np.asarray(ref[o], dtype=np.float64)
            ok = tol.passes(x, rf)
            passed[o] = bool(ok.all())
            nbad[o] = int((~ok).sum())
            with np.errstate(invalid="ignore"):
                q = np.abs(x - rf) / (tol.atol + tol.rtol * np.abs(rf))
            q = np.where(ok, np.minimum(q, 1.0), np.where(np.isnan(q), np.inf, q))
            ratio[o] = float(q.max()) if q.size else 0.0
        res.append(CaseResult(index=i, passed=passed, n_bad=nbad, ratio=ratio,
                              stale_reads=r.stale_reads, lost_writes=r.lost_writes,
                              outputs=r.outputs if keep_outputs else {}))
    return BatchResult(cases=res, outputs=outs)


# --------------------------------------------------------------------------- bisection


@dataclass(frozen=True)
class BisectStep:
    """One cut: kernel truncated after ``stage``; ``varying`` lists the
    buffers whose bits differed between batch runs."""

    k: int
    stage: str
    varying: tuple


@dataclass
class BisectReport:
    steps: list
    first_stage: str | None
    probes: dict          # buffer read by first_stage -> bool (read inconsistently)
    writers: dict         # buffer -> stages writing it before first_stage
    pattern: dict         # buffer -> share of probed rows that held the previous case's pattern
    runs: int
    atomic: tuple = ()    # buffers first_stage accumulates with atomic adds

    def __str__(self) -> str:
        lines = [f"bisection ({self.runs} batch runs per cut):"]
        for s in self.steps:
            lines.append(f"  cut after {s.k}:{s.stage:<22} "
                         + ("deterministic" if not s.varying else "NONDETERMINISTIC in " + ", ".join(s.varying)))
        if self.first_stage is None:
            lines.append("  every cut is deterministic: no race reached the results")
            return "\n".join(lines)
        lines.append(f"  first nondeterministic stage: {self.first_stage}")
        for b, bad in self.probes.items():
            w = ", ".join(self.writers.get(b, ())) or "(kernel input)"
            line = f"    probe (copy {b} out as read by {self.first_stage}): " + ("VARIES" if bad else "stable")
            line += f"; written by {w}"
            if b in self.pattern:
                line += f"; known pattern: {self.pattern[b]:.0%} of the varying reads held the previous case's pattern"
            lines.append(line)
        culprits = [b for b, bad in self.probes.items() if bad]
        if not culprits and self.atomic:
            lines.append(f"  => every input of {self.first_stage} is read consistently; it accumulates "
                         f"{', '.join(self.atomic)} with atomic adds, whose landing order changes the rounding: "
                         "use a fixed-order (two-phase) reduction for reproducible bits")
        elif not culprits:
            lines.append(f"  => every input of {self.first_stage} is read consistently; look inside the stage")
        if culprits:
            lines.append(f"  => {self.first_stage} reads {', '.join(culprits)} before "
                         f"{', '.join(sorted({w for b in culprits for w in self.writers.get(b, ())}))} "
                         "finished writing it: add a cross-core barrier between them")
        return "\n".join(lines)


def _batch_bits(kernel: Kernel, cases, seed, fill, buffers) -> dict:
    ss = np.random.SeedSequence(seed)
    seeds = ss.spawn(len(cases))
    mem = None
    got = {b: [] for b in buffers}
    for i, case in enumerate(cases):
        r = simulate(kernel, case, seed=seeds[i], memory=mem, fill=fill)
        mem = r.memory
        for b in buffers:
            got[b].append(np.ascontiguousarray(r.memory[b]).view(np.uint8).copy())
    return {b: np.stack(v) for b, v in got.items()}


def _varying(kernel, cases, runs, seed, fill, buffers):
    base = None
    varying = set()
    for r in range(runs):
        bits = _batch_bits(kernel, cases, (seed, r), fill, buffers)
        if base is None:
            base = bits
            continue
        for b in buffers:
            if not np.array_equal(bits[b], base[b]):
                varying.add(b)
    return varying


def bisect(kernel: Kernel, cases: Sequence[dict], *, runs: int = 6, seed=0, fill: str = "zeros",
           pattern: bool = True) -> BisectReport:
    """Find the first stage whose results vary between batch runs (field method).

    1. For k = 0, 1, ...: cut the kernel after stage k ("comment out the
       rest"), run the whole batch ``runs`` times with different schedule
       seeds, and compare the bits of every buffer written so far across the
       runs.  The first k where some buffer differs is the first
       nondeterministic stage S.
    2. Probe: for every buffer B that S reads, replace S by a stage that just
       copies the rows of B it reads into a probe buffer (as the field report
       copied ``maskedTarget`` into ``predicted_logits_local``) and batch-run
       again: the probes that vary are what S reads inconsistently.
    3. Known pattern (``pattern=True``): make each writer of a varying B write
       a per-case pattern (case number ``i + 1`` in every element) instead of
       its result; the share of varying probe rows that then hold the
       *previous* case's number shows the reads are stale (the write had not
       landed), not trampled by another buffer.

    Cases must differ from each other for stale reads to show (as in a real
    batch); ``runs`` >= 2.
    """
    if runs < 2:
        raise ValueError(f"bisect: runs must be >= 2, got {runs}")
    stages = kernel.stages
    steps = []
    first = None
    for k, s in enumerate(stages):
        cut = kernel.cut_after(k)
        written = sorted({a.buffer for st in cut.stages for a in st.writes})
        var = _varying(cut, cases, runs, seed, fill, written)
        steps.append(BisectStep(k=k, stage=s.name, varying=tuple(sorted(var))))
        if var:
            first = s.name
            break
    probes, writers, pat = {}, {}, {}
    if first is None:
        return BisectReport(steps=steps, first_stage=None, probes={}, writers={}, pattern={}, runs=runs)
    k = [s.name for s in stages].index(first)
    S = stages[k]
    for a in S.reads:
        b = a.buffer
        writers[b] = [st.name for st in stages[:k] if any(w.buffer == b for w in st.writes)]
        probe_name = f"probe:{b}"
        buffers = dict(kernel.buffers)
        buffers[probe_name] = Buffer(kernel.buffers[b].shape, kernel.buffers[b].dtype, "output")
        pk = replace(kernel.cut_after(k), buffers=buffers)
        pk = pk.replace_stage(first, reads=(a,), writes=(Access(probe_name, a.rows),), fn=_copy_fn(b, probe_name),
                              chunks=1, atomic=())
        probes[b] = bool(_varying(pk, cases, runs, seed, fill, [probe_name]))
        if pattern and probes[b] and writers[b]:
            pat[b] = _pattern_share(pk, writers[b], b, probe_name, cases, runs, seed, fill)
    return BisectReport(steps=steps, first_stage=first, probes=probes, writers=writers, pattern=pat, runs=runs,
                        atomic=tuple(S.atomic))


def _copy_fn(src, dst):
    def fn(ctx, inp):
        return {dst: inp[src]}
    return fn


def _pattern_fn(buf, writes):
    def fn(ctx, inp):
        v = ctx.params["__case__"]
        out = {}
        for a in writes:
            lo, hi = ctx.rows[a.buffer]
            out[a.buffer] = np.full((hi - lo,) + ctx.params["__shapes__"][a.buffer][1:], v,
                                    dtype=ctx.params["__dtypes__"][a.buffer])
        return out
    return fn


def _pattern_share(pk: Kernel, writer_names, buf, probe_name, cases, runs, seed, fill) -> float:
    """Share of probe rows holding the previous case's pattern among rows that
    did not hold the current case's pattern, over ``runs`` batch runs."""
    k = pk
    shapes = {b: v.shape for b, v in pk.buffers.items()}
    dtypes = {b: v.dtype for b, v in pk.buffers.items()}
    for w in writer_names:
        st = pk.stage(w)
        k = k.replace_stage(w, fn=_pattern_fn(buf, st.writes), atomic=())
    prev_hits = total = 0
    for r in range(runs):
        ss = np.random.SeedSequence((seed, r))
        seeds = ss.spawn(len(cases))
        mem = None
        for i, case in enumerate(cases):
            ki = replace(k, params={**k.params, "__case__": i + 1, "__shapes__": shapes, "__dtypes__": dtypes})
            res = simulate(ki, case, seed=seeds[i], memory=mem, fill=fill)
            mem = res.memory
            got = res.memory[probe_name]
            wrong = got != i + 1
            total += int(wrong.sum())
            prev_hits += int((wrong & (got == i)).sum())
    return prev_hits / total if total else 0.0


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """A ready-made race scenario.

    ``build(fix, spread)`` gives the kernel (``fix=True`` with the barrier the
    field report added); ``make_case(rng)`` one input case; ``reference(case)``
    the fp64 outputs; ``dependent`` the outputs a stale read can corrupt;
    ``essential(fix)`` the barriers whose removal creates a race (hand-checked
    from the data flow, verified by tests against the detector and the
    simulator); ``fix_barrier`` the name of the barrier ``fix`` adds.
    """

    name: str
    description: str
    build: Callable
    make_case: Callable
    reference: Callable
    dependent: tuple
    essential: Callable
    fix_barrier: str
    tol: Tolerance = Tolerance()

    def cases(self, n: int, seed=0) -> list[dict]:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"cases: n={n!r} must be an int >= 0")
        rng = _rng(seed)
        return [self.make_case(rng) for _ in range(n)]


# ---- fused_linear_online_max_sum (field report 004)

_FL = dict(T=64, H=32, V=48, vocab_start=96, n_vector=8, n_cube=4, vtile=16)


def _fl_build(fix: bool = False, spread: float = 0.5, *, T=_FL["T"], H=_FL["H"], V=_FL["V"],
              vocab_start=_FL["vocab_start"], n_vector=_FL["n_vector"], n_cube=_FL["n_cube"],
              vtile=_FL["vtile"]) -> Kernel:
    nt = -(-V // vtile)

    def init(ctx, inp):
        lo, hi = ctx.rows["predicted_logits_local"]
        return {"predicted_logits_local": np.zeros(hi - lo, np.float32)}

    def target_process(ctx, inp):
        t = inp["target"]
        vs = ctx.params["vocab_start"]
        inside = (t >= vs) & (t < vs + ctx.params["V"])
        return {"masked_target": np.where(inside, t - vs, 0).astype(np.int64),
                "target_mask": inside.astype(np.float32)}

    def matmul(ctx, inp):
        # cube: logits tile = x @ W^T in fp32 (K = H in one tile)
        return {"logits": np.matmul(inp["x"], inp["weight"].T).astype(np.float32)}

    def gather(ctx, inp):
        # cube-side epilogue: predicted logit of each token at its masked target
        lg = inp["logits"]
        mt = np.clip(inp["masked_target"], 0, lg.shape[1] - 1)  # hardware gathers stay in range
        picked = np.take_along_axis(lg, mt[:, None], axis=1)[:, 0]
        return {"predicted_logits_local": (picked * inp["target_mask"]).astype(np.float32)}

    def tile_reduce(ctx, inp):
        lg = inp["logits"]
        pad = nt * vtile - lg.shape[1]
        tiles = np.pad(lg, ((0, 0), (0, pad)), constant_values=-np.inf).reshape(lg.shape[0], nt, vtile)
        m = tiles.max(axis=2)
        s = np.exp(tiles - m[:, :, None]).sum(axis=2, dtype=np.float32)
        return {"tile_max": m.astype(np.float32), "tile_sum": s.astype(np.float32)}

    def online_combine(ctx, inp):
        m, s = inp["tile_max"], inp["tile_sum"]
        run_m = m[:, 0].copy()
        run_s = s[:, 0].copy()
        for j in range(1, m.shape[1]):  # loop over vocab tiles, vectorised over tokens
            new_m = np.maximum(run_m, m[:, j])
            run_s = run_s * np.exp(run_m - new_m) + s[:, j] * np.exp(m[:, j] - new_m)
            run_m = new_m
        return {"logits_max_local": run_m.astype(np.float32), "sum_exp_logits_local": run_s.astype(np.float32)}

    L = Latency  # means: vector phases short, the cube matmul long
    items = [
        Stage("InitOutputAndWorkspace", "vector", writes=("predicted_logits_local",), fn=init,
              latency=L(0.5, spread)),
        SyncAll("sync_init"),
        Stage("TargetProcess", "vector", reads=("target",), writes=("masked_target", "target_mask"),
              fn=target_process, latency=L(1.0, spread), chunks=2),
    ]
    if fix:
        items.append(SyncAll("sync_target"))
    items += [
        Stage("CVProcess.matmul", "cube", reads=("x", Access("weight", "all")), writes=("logits",),
              fn=matmul, latency=L(3.0, spread)),
        Stage("CVProcess.gather", "cube", reads=("logits", "masked_target", "target_mask"),
              writes=("predicted_logits_local",), fn=gather, latency=L(0.3, spread)),
        Flag("CVProcess.matmul", "CVProcess.reduce", name="flag_logits", cores="overlap"),
        Stage("CVProcess.reduce", "vector", reads=("logits",), writes=("tile_max", "tile_sum"),
              fn=tile_reduce, latency=L(0.8, spread)),
        SyncAll("sync_final"),
        Stage("AllReduceProcess", "vector", reads=("tile_max", "tile_sum"),
              writes=("logits_max_local", "sum_exp_logits_local"), fn=online_combine,
              latency=L(0.4, spread)),
    ]
    buffers = {
        "x": Buffer((T, H), "float32", "input"),
        "weight": Buffer((V, H), "float32", "input"),
        "target": Buffer((T,), "int64", "input"),
        "masked_target": Buffer((T,), "int64", "output"),
        "target_mask": Buffer((T,), "float32", "output"),
        "logits": Buffer((T, V), "float32", "workspace"),
        "tile_max": Buffer((T, nt), "float32", "workspace"),
        "tile_sum": Buffer((T, nt), "float32", "workspace"),
        "predicted_logits_local": Buffer((T,), "float32", "output"),
        "logits_max_local": Buffer((T,), "float32", "output"),
        "sum_exp_logits_local": Buffer((T,), "float32", "output"),
    }
    return Kernel("fused_linear_online_max_sum" + ("" if fix else " (no SyncAll after TargetProcess)"),
                  cores={"vector": n_vector, "cube": n_cube}, buffers=buffers, items=tuple(items),
                  params={"vocab_start": vocab_start, "V": V})


def _fl_case(rng: np.random.Generator, *, T=_FL["T"], H=_FL["H"], V=_FL["V"],
             vocab_start=_FL["vocab_start"]) -> dict:
    x = rng.standard_normal((T, H)).astype(np.float32)
    w = (rng.standard_normal((V, H)) / np.sqrt(H)).astype(np.float32)
    # global vocabulary of 4 shards; about a quarter of targets land in this shard
    target = rng.integers(0, 4 * V, size=T).astype(np.int64) + max(0, vocab_start - V)
    return {"x": x, "weight": w, "target": target}


def _fl_reference(case, *, vocab_start=_FL["vocab_start"]) -> dict:
    x = case["x"].astype(np.float64)
    w = case["weight"].astype(np.float64)
    V = w.shape[0]
    t = case["target"]
    inside = (t >= vocab_start) & (t < vocab_start + V)
    mt = np.where(inside, t - vocab_start, 0)
    logits = x @ w.T
    m = logits.max(axis=1)
    return {
        "masked_target": mt.astype(np.float64),
        "target_mask": inside.astype(np.float64),
        "predicted_logits_local": np.where(inside, logits[np.arange(len(t)), mt], 0.0),
        "logits_max_local": m,
        "sum_exp_logits_local": np.exp(logits - m[:, None]).sum(axis=1),
    }


def _fl_essential(fix: bool) -> set:
    # without the fix, sync_init is the only thing ordering Init (vector) before
    # the cube gather's write of predicted_logits_local; with it, sync_target
    # orders both.  flag_logits orders the cube matmul before the vector reduce.
    # sync_final separates two vector stages that touch only their own rows.
    return {"sync_target", "flag_logits"} if fix else {"sync_init", "flag_logits"}


FUSED_LINEAR = Scenario(
    name="fused_linear_online_max_sum",
    description=("Field report 004: vector cores compute maskedTarget (TargetProcess); cube cores run "
                 "the matmul and gather predicted_logits_local at maskedTarget (CVProcess). Without a "
                 "SyncAll between them the cube side can read maskedTarget rows the vector cores have "
                 "not written yet, seeing the previous case's values."),
    build=_fl_build,
    make_case=_fl_case,
    reference=_fl_reference,
    dependent=("predicted_logits_local",),
    essential=_fl_essential,
    fix_barrier="sync_target",
)


# ---- split softmax across vector cores (a pure vector-vector race)

_SM = dict(R=16, C=64, n_vector=8)



def _sm_build(fix: bool = False, spread: float = 0.5, *, R=_SM["R"], C=_SM["C"], n_vector=_SM["n_vector"]) -> Kernel:
    """Softmax over the columns of x (R x C) split column-wise over the vector
    cores: x is stored transposed (C x R) so each core's rows are its columns."""

    def partial_max(ctx, inp):
        return {"pmax": inp["xT"].max(axis=0, keepdims=True)}

    def exp_sum(ctx, inp):
        m = inp["pmax"].max(axis=0)
        e = np.exp(inp["xT"] - m[None, :]).astype(np.float32)
        return {"eT": e, "psum": e.sum(axis=0, keepdims=True, dtype=np.float32)}

    def normalise(ctx, inp):
        s = inp["psum"].sum(axis=0, dtype=np.float32)
        return {"yT": (inp["eT"] / s[None, :]).astype(np.float32)}

    def copy_out(ctx, inp):
        return {"y": inp["yT"].copy()}

    L = Latency
    items = [
        Stage("PartialMax", "vector", reads=("xT",), writes=("pmax",), fn=partial_max, latency=L(1.0, spread)),
        SyncAll("sync_max"),
        Stage("ExpSum", "vector", reads=("xT", Access("pmax", "all")), writes=("eT", "psum"), fn=exp_sum,
              latency=L(1.0, spread)),
    ]
    if fix:
        items.append(SyncAll("sync_sum"))
    items += [
        Stage("Normalise", "vector", reads=("eT", Access("psum", "all")), writes=("yT",), fn=normalise,
              latency=L(0.5, spread)),
        SyncAll("sync_out"),
        Stage("CopyOut", "vector", reads=("yT",), writes=("y",), fn=copy_out, latency=L(0.3, spread)),
    ]
    buffers = {
        "xT": Buffer((C, R), "float32", "input"),
        "pmax": Buffer((n_vector, R), "float32", "workspace"),
        "psum": Buffer((n_vector, R), "float32", "workspace"),
        "eT": Buffer((C, R), "float32", "workspace"),
        "yT": Buffer((C, R), "float32", "workspace"),
        "y": Buffer((C, R), "float32", "output"),
    }
    return Kernel("split_softmax" + ("" if fix else " (no SyncAll after ExpSum)"),
                  cores={"vector": n_vector}, buffers=buffers, items=tuple(items))


def _sm_case(rng, *, R=_SM["R"], C=_SM["C"]):
    return {"xT": (rng.standard_normal((C, R)) * 3).astype(np.float32)}


def _sm_reference(case):
    x = case["xT"].astype(np.float64)
    e = np.exp(x - x.max(axis=0))
    return {"y": e / e.sum(axis=0)}


SPLIT_SOFTMAX = Scenario(
    name="split_softmax",
    description=("Softmax split column-wise over 8 vector cores: partial maxima and partial sums go "
                 "through GM and every core reads all of them. Without a SyncAll after ExpSum a core "
                 "normalises with partial sums other cores have not written yet."),
    build=_sm_build,
    make_case=_sm_case,
    reference=_sm_reference,
    dependent=("y",),
    essential=lambda fix: {"sync_max", "sync_sum"} if fix else {"sync_max"},
    fix_barrier="sync_sum",
)

# ---- row sums by atomic adds (race-free, yet schedule-dependent bits)

_AT = dict(R=16, C=256, n_vector=8)


def _core0_all(core, ncores, nrows):
    return (0, nrows) if core == 0 else (0, 0)


def _at_build(fix: bool = False, spread: float = 0.5, *, R=_AT["R"], C=_AT["C"], n_vector=_AT["n_vector"]) -> Kernel:
    """Column sums of x (R x C, stored transposed as xT, C x R) over 8 vector
    cores.  As shipped: each core adds its partial sums into ``out`` with
    atomic adds.  ``fix=True``: the deterministic two-phase form -- partials to
    a workspace, SyncAll, core 0 adds them in core order."""

    def zero(ctx, inp):
        lo, hi = ctx.rows["out"]
        return {"out": np.zeros(hi - lo, np.float32)}

    def partial(ctx, inp):
        p = inp["xT"].sum(axis=0, dtype=np.float32)
        return {"partials": p[None, :]} if "partials" in ctx.rows else {"out": p}

    def combine(ctx, inp):
        p = inp["partials"]
        if p.shape[0] == 0:
            return {"out": np.zeros(0, np.float32)}
        acc = p[0].copy()
        for k in range(1, p.shape[0]):  # fixed order over cores, vectorised over rows
            acc = (acc + p[k]).astype(np.float32)
        return {"out": acc}

    L = Latency
    if not fix:
        items = [
            Stage("InitOutput", "vector", writes=("out",), fn=zero, latency=L(0.5, spread)),
            SyncAll("sync_zero"),
            Stage("PartialSum", "vector", reads=("xT",), writes=(Access("out", "all"),), fn=partial,
                  latency=L(1.0, spread), atomic=("out",)),
        ]
        bufs = {"xT": Buffer((C, R), "float32", "input"), "out": Buffer((R,), "float32", "output")}
    else:
        items = [
            Stage("PartialSum", "vector", reads=("xT",), writes=("partials",), fn=partial, latency=L(1.0, spread)),
            SyncAll("sync_partials"),
            Stage("Combine", "vector", reads=(Access("partials", _core0_all),), writes=(Access("out", _core0_all),),
                  fn=combine, latency=L(0.5, spread)),
        ]
        bufs = {"xT": Buffer((C, R), "float32", "input"), "partials": Buffer((n_vector, R), "float32", "workspace"),
                "out": Buffer((R,), "float32", "output")}
    return Kernel("atomic_rowsum" + (" (two-phase, deterministic)" if fix else " (atomic adds)"),
                  cores={"vector": n_vector}, buffers=bufs, items=tuple(items))


def _at_case(rng, *, R=_AT["R"], C=_AT["C"]):
    return {"xT": (rng.standard_normal((C, R)) * 3 + 1).astype(np.float32)}


def _at_reference(case):
    return {"out": case["xT"].astype(np.float64).sum(axis=0)}


ATOMIC_ROWSUM = Scenario(
    name="atomic_rowsum",
    description=("Column sums over 8 vector cores accumulated with atomic adds into one output: no race "
                 "and always within tolerance, but the sum is formed in the order the adds land, so the "
                 "bits change from run to run. --fix uses the deterministic two-phase reduction."),
    build=_at_build,
    make_case=_at_case,
    reference=_at_reference,
    dependent=(),
    essential=lambda fix: {"sync_partials"} if fix else {"sync_zero"},
    fix_barrier="sync_partials",
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (FUSED_LINEAR, SPLIT_SOFTMAX, ATOMIC_ROWSUM)}


def get_scenario(name) -> Scenario:
    if isinstance(name, Scenario):
        return name
    if name not in SCENARIOS:
        raise ValueError(f"unknown race scenario {name!r}; choices: {sorted(SCENARIOS)}")
    return SCENARIOS[name]


def failure_rate_curve(scenario, spreads, *, n_cases: int = 200, fix: bool = False, seed=0) -> np.ndarray:
    """Failure rate of a batch of ``n_cases`` for each latency spread (same
    cases and schedule seeds at every spread)."""
    if isinstance(n_cases, bool) or not isinstance(n_cases, (int, np.integer)) or n_cases < 1:
        raise ValueError(f"failure_rate_curve: n_cases={n_cases!r} must be an int >= 1")
    sc = get_scenario(scenario)
    cases = sc.cases(n_cases, seed)
    out = []
    for sp in spreads:
        k = sc.build(fix=fix, spread=float(sp))
        out.append(batch_run(k, cases, sc.reference, seed=seed, tol=sc.tol).failure_rate)
    return np.array(out)


# --------------------------------------------------------------------------- timeline drawing


def draw_timeline(ax, result: SimResult, *, mark_stale: bool = True):
    """Gantt chart of one run on a matplotlib ``ax``: one row per core, one bar
    per (stage, core); barriers as vertical lines; each stale read marked with
    a red cross at its read time and an arrow to when the promised write
    landed.  Returns ``ax``.  (Only uses the ``ax`` methods; no pyplot.)"""
    k = result.kernel
    sched = result.schedule
    rows = []
    for g in (*[g for g in GROUPS_ORDER if g in k.cores], *[g for g in k.cores if g not in GROUPS_ORDER]):
        rows += [(g, c) for c in range(int(k.cores[g]))]
    ypos = {r: i for i, r in enumerate(rows)}
    names = [s.name for s in k.stages]
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for s in k.stages:
        st, en = sched.start[s.name], sched.end[s.name]
        for c in range(len(st)):
            ax.barh(ypos[(s.group, c)], en[c] - st[c], left=st[c], color=colors[s.name], edgecolor="k",
                    linewidth=0.3, height=0.8, label=s.name if c == 0 else None)
    # barriers: a SyncAll releases at the start of the next stage's earliest core
    order = list(k.items)
    for i, it in enumerate(order):
        if isinstance(it, SyncAll):
            before = [s.name for s in order[:i] if isinstance(s, Stage)]
            if before:
                t = max(float(sched.end[n].max()) for n in before)
                ax.axvline(t, color="k", ls="--", lw=1)
                # name at the top of the line, inside the axes (clear of the time tick labels)
                ax.text(t, -0.45, it.name, rotation=90, va="top", ha="right", fontsize=7,
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    if mark_stale:
        for j, r in enumerate(result.stale_reads):
            y = ypos[(r.group, r.core)]
            ax.plot([r.time], [y], "rx", ms=10, mew=2, label="stale read" if j == 0 else None)
            if np.isfinite(r.late_by):
                ax.annotate("", xy=(r.time + r.late_by, y), xytext=(r.time, y),
                            arrowprops=dict(arrowstyle="->", color="r"))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{g}[{c}]" for g, c in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (arbitrary units)")
    ax.set_ylabel("core")
    ax.legend(loc="lower right", fontsize=7)
    return ax
