"""Batches of cases run back to back on one GM, judged against fp64 references."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._repr import Compact, brief, mapping_summary
from .model import Kernel, _seed_sequence
from .sim import simulate


@dataclass(frozen=True)
class Tolerance:
    """Pass rule for one output element: ``|x - ref| <= atol + rtol * |ref|``
    with ``ref`` the fp64 reference; NaN/inf in ``x`` where ``ref`` is finite
    fail.  Defaults rtol = atol = 1e-4 (msprobe-style: well above the fp32
    error of a correct run, far below a wrong one).  For the fused-linear scenario
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


@dataclass(repr=False)
class CaseResult(Compact):
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

    def _repr_facts(self):
        rows = [(o, f"{'pass' if self.passed[o] else 'FAIL'}, {self.n_bad[o]} bad, "
                    f"max error/tolerance {brief(self.ratio[o])}") for o in self.passed]
        rows += [("stale reads", len(self.stale_reads)), ("lost writes", len(self.lost_writes)),
                 ("outputs", mapping_summary(self.outputs) if self.outputs else None)]
        return f"CaseResult: case {self.index}, ok {self.ok}", rows


@dataclass(repr=False)
class BatchResult(Compact):
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

    def _repr_facts(self):
        fb, mr = self.failures_by_output(), self.max_ratio()
        bad = [c.index for c in self.cases if not c.ok]
        rows = [("failed cases", f"{len(bad)}" + (": " + ", ".join(map(str, bad[:10])) + (" ..." if len(bad) > 10
                                                                                          else "") if bad else "")),
                ("out of order", f"{self.n_stale} cases had out-of-order reads/writes")]
        rows += [(o, f"failed {fb[o]}/{self.n}, max error/tolerance {mr[o]:.3g}") for o in self.outputs]
        return f"BatchResult: {self.n} cases, failure rate {self.failure_rate:.1%}", rows

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
    values -- why such failures move around between batch runs.
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
