"""Seeded schedules and the event-driven simulator of one run.

:func:`schedule` draws each (stage, core) duration from the stage's
:class:`~numlab.races.model.Latency`; :func:`simulate` executes the kernel
under it: a stage reads its inputs when it starts, computes with numpy on
whole slices, and each write (or each of ``chunks`` parts of it) becomes
visible when it completes.  Reads that saw an older version than program
order promises are :class:`StaleRead`; writes overwritten out of order are
:class:`LostWrite`.  Same seed -> same schedule -> same bits.
"""

from __future__ import annotations

import heapq
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from .._repr import Compact, brief, mapping_summary
from .model import Flag, Kernel, Stage, StageContext, SyncAll, _rng

_FILLS = ("zeros", "garbage")


@dataclass(repr=False)
class Schedule(Compact):
    """Start and end times of every (stage, core): ``start[stage]`` and
    ``end[stage]`` are float64 arrays over the stage's cores."""

    start: dict
    end: dict
    seed: object

    @property
    def makespan(self) -> float:
        return max((float(e.max()) for e in self.end.values() if e.size), default=0.0)

    def _repr_facts(self):
        return (f"Schedule: {len(self.start)} stages, makespan {self.makespan:.4g}, seed {brief(self.seed)}",
                [("start", mapping_summary(self.start)), ("end", mapping_summary(self.end))])


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


@dataclass(repr=False)
class SimResult(Compact):
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

    def _repr_facts(self):
        s = self.stale_reads[0] if self.stale_reads else None
        rows = [("outputs", mapping_summary(self.outputs)),
                ("memory", f"{len(self.memory)} buffers"),
                ("schedule", f"{sum(len(v) for v in self.schedule.start.values())} (stage, core) runs, "
                             f"makespan {self.schedule.makespan:.4g}"),
                ("stale reads", f"{len(self.stale_reads)}" + (
                    f", e.g. {s.stage} core {s.core} read {s.buffer} ({s.n_rows} rows) before {s.expected}"
                    if s is not None else "")),
                ("lost writes", len(self.lost_writes)), ("writes", len(self.write_times))]
        return f"SimResult: kernel {self.kernel.name}, in order {self.ok_order}", rows


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


PLAN_CACHE_SIZE = 256
"""How many kernels' static plans :func:`simulate` keeps (least recently used
first out)."""
_PLAN_CACHE: OrderedDict = OrderedDict()
"""``id(kernel) -> (weak reference to the kernel, plan)``.  A Kernel holds
dicts, so it cannot be a key itself; the weak reference drops the entry when
the kernel is collected (before its id can be reused), and a hit must be the
very kernel asked for."""


def _forget_plan(key: int, ref: weakref.ref) -> None:
    hit = _PLAN_CACHE.get(key)
    if hit is not None and hit[0] is ref:
        del _PLAN_CACHE[key]


def _static_plan(kernel: Kernel):
    """Per-kernel static data of :func:`simulate` (cached by identity, the
    :data:`PLAN_CACHE_SIZE` most recent kernels): the stages, row counts, the
    version each read is promised (last writer listed before it, per row), the
    final promised versions, and how many core writes each stage makes to each
    row."""
    key = id(kernel)
    hit = _PLAN_CACHE.get(key)
    if hit is not None and hit[0]() is kernel:
        _PLAN_CACHE.move_to_end(key)
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
    _PLAN_CACHE[key] = (weakref.ref(kernel, lambda ref: _forget_plan(key, ref)), plan)
    _PLAN_CACHE.move_to_end(key)
    while len(_PLAN_CACHE) > PLAN_CACHE_SIZE:
        _PLAN_CACHE.popitem(last=False)
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
    mem = _initial_memory(kernel, inputs, memory, fill, rng)
    run = _Run(kernel, sched, mem)
    while run.events:
        t, kind, _, payload = heapq.heappop(run.events)
        if kind == 1:
            run.read(t, *payload)
        else:
            run.land(t, *payload)
    outputs = {b: mem[b].copy() for b in kernel.outputs()}
    return SimResult(outputs=outputs, memory=mem, schedule=sched, stale_reads=run.stale_with_lateness(),
                     lost_writes=run.lost_writes(), write_times=run.write_times, kernel=kernel)


def _initial_memory(kernel: Kernel, inputs: dict, memory: dict | None, fill: str,
                    rng: np.random.Generator) -> dict:
    """GM before the run: fresh memory per ``fill``, overlaid with ``memory``
    (copied), with the host's copies of the inputs."""
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
    return mem


def _writer_names(stages, versions) -> str:
    return ", ".join("<before run>" if v < 0 else stages[v].name for v in np.unique(versions))


class _Run:
    """The mutable state of one :func:`simulate` run: GM contents, the version
    (stage index) of every row, how many core writes of each stage have landed,
    the event queue, and what went wrong."""

    def __init__(self, kernel: Kernel, sched: Schedule, mem: dict):
        self.kernel, self.sched, self.mem = kernel, sched, mem
        (self.stages, self.sidx, self.nrows, self.promised_before, self.promised,
         self.expected_count) = _static_plan(kernel)
        nrows = self.nrows
        # actual row versions: -1 = contents before the run
        self.version = {b: np.full(nrows[b], -1, dtype=np.int64) for b in kernel.buffers}
        self.landed = {key: np.zeros_like(v) for key, v in self.expected_count.items()}
        # atomic adds of each atomic stage landed since the last plain write of the row
        self.since_plain = {(i, b): np.zeros(nrows[b], dtype=np.int64)
                            for i, s in enumerate(self.stages) for b in s.atomic}
        self.visible_at: dict = {}  # (stage idx, buffer) -> per-row time the promised write lands
        self.write_times: list = []
        self.stale: list = []
        # events: (time, kind 0=write 1=read, seq, payload)
        self.events: list = []
        self.seq = 0
        for st in self.stages:
            start = sched.start[st.name]
            for c in range(int(kernel.cores[st.group])):
                self._push(float(start[c]), 1, (st.name, c))

    def _push(self, t: float, kind: int, payload: tuple) -> None:
        heapq.heappush(self.events, (t, kind, self.seq, payload))
        self.seq += 1

    def read(self, t: float, name: str, c: int) -> None:
        """Core ``c`` starts stage ``name``: read its regions, record stale
        rows, compute, and queue its writes (one event per chunk)."""
        s = self.stages[self.sidx[name]]
        n = int(self.kernel.cores[s.group])
        rows = {a.buffer: a.region(c, n, self.nrows[a.buffer]) for a in s.reads + s.writes}
        seen = {}
        for a in s.reads:
            lo, hi = a.region(c, n, self.nrows[a.buffer])
            seen[a.buffer] = self.mem[a.buffer][lo:hi].copy()
            self._check_read(t, s, c, a.buffer, lo, hi)
        ctx = StageContext(stage=name, core=c, ncores=n, rows=rows, params=dict(self.kernel.params))
        out = s.fn(ctx, seen) if s.fn is not None else {}
        for a in s.writes:
            lo, hi = rows[a.buffer]
            if a.buffer not in out:
                raise ValueError(f"stage {name!r} did not return buffer {a.buffer!r}")
            val = np.asarray(out[a.buffer])
            want_shape = (hi - lo,) + self.kernel.buffers[a.buffer].shape[1:]
            if val.shape != want_shape:
                raise ValueError(f"stage {name!r} core {c}: {a.buffer!r} has shape {val.shape}, expected {want_shape}")
            st_, en_ = float(self.sched.start[name][c]), float(self.sched.end[name][c])
            for k, (clo, chi) in enumerate(_chunk_bounds(lo, hi, s.chunks)):
                tk = st_ + (en_ - st_) * (k + 1) / s.chunks
                self._push(tk, 0, (name, c, k, a.buffer, clo, chi, val[clo - lo:chi - lo]))

    def _check_read(self, t: float, s: Stage, c: int, buf: str, lo: int, hi: int) -> None:
        """Record a :class:`StaleRead` if rows ``[lo, hi)`` of ``buf`` are not
        (all core writes of) the version program order promises."""
        got = self.version[buf][lo:hi]
        want = self.promised_before[s.name][buf][lo:hi]
        bad = got != want
        partial = np.zeros_like(bad)
        for w in np.unique(want[want >= 0]):  # every core's write of the promised writer landed?
            sel = (want == w) & ~bad
            partial |= sel & (self.landed[(w, buf)][lo:hi] < self.expected_count[(w, buf)][lo:hi])
        bad = bad | partial
        if not bad.any():
            return
        idx = np.nonzero(bad)[0] + lo
        saw = tuple("<before run>" if v < 0 else self.stages[v].name for v in np.unique(got[bad & ~partial]))
        saw += tuple(f"{self.stages[v].name} (partial)" for v in np.unique(got[partial]))
        self.stale.append(StaleRead(stage=s.name, group=s.group, core=c, buffer=buf,
                                    rows=(int(idx[0]), int(idx[-1]) + 1), n_rows=int(idx.size),
                                    time=t, saw=saw, expected=_writer_names(self.stages, want[bad]),
                                    late_by=np.nan))

    def land(self, t: float, name: str, c: int, k: int, buf: str, lo: int, hi: int, val) -> None:
        """Chunk ``k`` of core ``c``'s write of ``buf`` rows ``[lo, hi)`` lands."""
        i = self.sidx[name]
        mem = self.mem
        if buf in self.stages[i].atomic:
            dt = mem[buf].dtype
            mem[buf][lo:hi] = (mem[buf][lo:hi] + val.astype(dt)).astype(dt)
            self.since_plain[(i, buf)][lo:hi] += 1
        else:
            mem[buf][lo:hi] = val
            for (_, b2), arr in self.since_plain.items():
                if b2 == buf:
                    arr[lo:hi] = 0
        self.version[buf][lo:hi] = i
        self.landed[(i, buf)][lo:hi] += 1
        self.write_times.append((name, c, k, buf, (lo, hi), t))
        if (i, buf) not in self.visible_at:
            self.visible_at[(i, buf)] = np.full(self.nrows[buf], np.nan)
        self.visible_at[(i, buf)][lo:hi] = t

    def stale_with_lateness(self) -> list:
        """The stale reads with ``late_by``: how long after the read the
        promised write landed."""
        fixed = []
        for r in self.stale:
            ws = [self.sidx[x] for x in r.expected.split(", ") if x != "<before run>"]
            late = np.nan
            for w in ws:
                va = self.visible_at.get((w, r.buffer))
                if va is not None:
                    late = np.nanmax([late, float(np.nanmax(va[r.rows[0]:r.rows[1]])) - r.time])
            fixed.append(replace(r, late_by=float(late)))
        return fixed

    def lost_writes(self) -> list:
        """Rows whose final version is not the promised one, or whose promised
        atomic adds a later plain write wiped."""
        lost = []
        for b in self.kernel.buffers:
            bad = self.version[b] != self.promised[b]
            for (i, b2), arr in self.since_plain.items():
                if b2 == b:  # a plain write wiped some of the promised atomic adds
                    bad |= (self.promised[b] == i) & (arr < self.expected_count[(i, b)])
            if bad.any():
                idx = np.nonzero(bad)[0]
                lost.append(LostWrite(buffer=b, rows=(int(idx[0]), int(idx[-1]) + 1), n_rows=int(idx.size),
                                      final_writer=_writer_names(self.stages, self.version[b][bad]),
                                      expected=_writer_names(self.stages, self.promised[b][bad])))
        return lost
