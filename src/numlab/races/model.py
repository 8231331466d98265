"""The kernel model: stages on core groups, GM buffers, barriers, latencies.

A :class:`Kernel` is a list of :class:`Stage` (a computation on one core
group; each core reads and writes its own rows of named GM buffers,
optionally with atomic adds) and barriers: :class:`SyncAll` (every core of
every group waits for all the others) and :class:`Flag` (cross-core
set/wait).  Everything here is a frozen dataclass; mutations return new
kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

GROUPS_ORDER = ("vector", "cube")
_DISTS = ("lognormal", "uniform", "fixed")
_ROLES = ("input", "output", "workspace")


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
