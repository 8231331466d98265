"""Bisection of a nondeterministic kernel by cutting it after each stage.

The method used on hardware when a batch gives different results from run to
run: cut the kernel after stage k and batch-run until the results become
nondeterministic, then make the first such stage copy each of its inputs out
(a probe) to see which one it reads inconsistently, and overwrite the writer's
output with a known per-case pattern to see *what* it read (the previous
case's value = a stale read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from .._repr import Compact
from .model import Access, Buffer, Kernel
from .sim import simulate


@dataclass(frozen=True)
class BisectStep:
    """One cut: kernel truncated after ``stage``; ``varying`` lists the
    buffers whose bits differed between batch runs."""

    k: int
    stage: str
    varying: tuple


@dataclass(repr=False)
class BisectReport(Compact):
    steps: list
    first_stage: str | None
    probes: dict          # buffer read by first_stage -> bool (read inconsistently)
    writers: dict         # buffer -> stages writing it before first_stage
    pattern: dict         # buffer -> share of probed rows that held the previous case's pattern
    runs: int
    atomic: tuple = ()    # buffers first_stage accumulates with atomic adds

    def _repr_facts(self):
        varying = [s.stage for s in self.steps if s.varying]
        culprits = [b for b, bad in self.probes.items() if bad]
        rows = [("cuts", f"{len(self.steps)}, {len(varying)} nondeterministic"),
                ("probes", ", ".join(f"{b} {'VARIES' if bad else 'stable'}" for b, bad in list(self.probes.items())[:6])
                 or None),
                ("culprits", ", ".join(culprits) or "none"),
                ("writers", "; ".join(f"{b}: {', '.join(w)}" for b, w in list(self.writers.items())[:4]) or None),
                ("atomic", ", ".join(self.atomic) or None)]
        return f"BisectReport: first nondeterministic stage {self.first_stage} ({self.runs} runs per cut)", rows

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
    """Find the first stage whose results vary between batch runs.

    The method used on hardware:

    1. For k = 0, 1, ...: cut the kernel after stage k ("comment out the
       rest"), run the whole batch ``runs`` times with different schedule
       seeds, and compare the bits of every buffer written so far across the
       runs.  The first k where some buffer differs is the first
       nondeterministic stage S.
    2. Probe: for every buffer B that S reads, replace S by a stage that just
       copies the rows of B it reads into a probe buffer (e.g. copy
       ``maskedTarget`` into ``predicted_logits_local``) and batch-run
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
