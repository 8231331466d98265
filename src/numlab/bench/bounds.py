"""``numlab bench bounds``: contract bounds, their speed and their tightness.

* **Speed**: :func:`numlab.bounds.contract_bound` against a fused
  :func:`numlab.run` of the same graph and inputs (the target: at most 3x),
  timed in the same process, best of ``repeat`` round-robin rounds.
* **Tightness**: for every zoo model, fp16 / bf16 / fp32, eager and fused
  (default fusion), ``max B / max observed error`` where the observed errors
  are those of the implementations drawn from the contract
  (:func:`numlab.contract_sample.sample_outputs`, random and adversarial)
  and of numlab's own runs with several kernel specs.  The physical limit is
  1 (an implementation attains the bound); ``inf`` means the bound is
  infinite somewhere (overflow possible or an interval leaving a domain),
  ``n/a`` that every implementation was exact.
"""

from __future__ import annotations

import math

import numpy as np

from .. import zoo
from ..contract_bounds import contract_bound
from ..contract_sample import sample_outputs
from ..execute import run
from . import Measure, Section, best_of

TARGET = 3.0
#: numlab's own kernel variants whose runs join the sampled implementations
SPEC_VARIANTS = (
    {},
    {"kernels": "codegen:fma=false", "library": "handwritten:variance=two_pass"},
    {"kernels": "codegen:reduce_order=sequential", "library": "handwritten:reduce_order=sequential"},
)
FORMATS = ("fp16", "bf16", "fp32")


def speed_rows(quick: bool = False, repeat: int = 3) -> list:
    """``[(case, run s, bound s, ratio)]`` for the zoo's models (default sizes)
    and a 64x4096 layer norm (fused, fp16, default and inductor fusion)."""
    cases = [("layernorm 64x4096", zoo.layernorm(64, 4096), None),
             ("layernorm 64x4096 (inductor)", zoo.layernorm(64, 4096), "inductor")]
    if not quick:
        cases += [(name, zoo.get_model(name), None) for name in zoo.MODELS]
    rows = []
    for label, g, fusion in cases:
        x = zoo.make_inputs(g, kind="normal", seed=0)

        def fused(g=g, x=x, fusion=fusion):
            with np.errstate(all="ignore"):
                return run(g, x, mode="fused", fmt="fp16", fusion=fusion)

        def bound(g=g, x=x, fusion=fusion):
            return contract_bound(g, x, mode="fused", fmt="fp16", fusion=fusion)

        tr = tb = math.inf
        for _ in range(repeat):
            tr, tb = min(tr, best_of(fused, 1)), min(tb, best_of(bound, 1))
        rows.append((label, tr, tb, tb / tr))
    return rows


def tightness(graph, inputs, *, mode: str, fmt: str, rng, draws: int = 3) -> dict:
    """``{"bound": max B, "observed": max error, "ratio": max B / max error,
    "implementations": n, "violations": elements with error > B}`` over the
    sampled implementations and numlab's spec variants."""
    B = contract_bound(graph, inputs, mode=mode, fmt=fmt)
    with np.errstate(all="ignore"):
        ref = run(graph, inputs, mode="reference", fmt=fmt).outputs
    outs = []
    for kw in SPEC_VARIANTS:
        if mode == "eager":
            kw = {"kernels": kw["library"]} if kw else {}
        with np.errstate(all="ignore"):
            outs.append(run(graph, inputs, mode=mode, fmt=fmt, **kw).outputs)
    for adversarial in (False, True):
        outs += sample_outputs(graph, inputs, mode=mode, fmt=fmt, rng=rng, n=draws, adversarial=adversarial)
    bmax, emax, viol = 0.0, 0.0, 0
    for o in graph.outputs:
        b = np.asarray(B[o], dtype=np.float64)
        bmax = max(bmax, float(np.max(b)) if b.size else 0.0)
        for out in outs:
            with np.errstate(all="ignore"):
                e = np.abs(np.asarray(out[o], dtype=np.float64) - ref[o])
            fin = np.isfinite(e)
            if fin.any():
                emax = max(emax, float(np.max(e[fin])))
            viol += int(np.count_nonzero(fin & (e > b)))
    ratio = math.inf if math.isinf(bmax) else (bmax / emax if emax > 0 else math.nan)
    return {"bound": bmax, "observed": emax, "ratio": ratio, "implementations": len(outs), "violations": viol}


def tightness_rows(models=None, formats=FORMATS, kind: str = "normal", seed: int = 0, draws: int = 3) -> list:
    """``[(model, fmt, mode, tightness dict)]`` for every zoo model, format and
    mode eager / fused (default fusion)."""
    rows = []
    for name in models or zoo.MODELS:
        g = zoo.get_model(name)
        x = zoo.make_inputs(g, kind=kind, seed=seed)
        for fmt in formats:
            for mode in ("eager", "fused"):
                rng = np.random.default_rng([seed, len(rows)])
                rows.append((name, fmt, mode, tightness(g, x, mode=mode, fmt=fmt, rng=rng, draws=draws)))
    return rows


def _fmt_ratio(r: float) -> str:
    if math.isnan(r):
        return "n/a"
    return "inf" if math.isinf(r) else f"{r:.3g}"


def main(quick: bool = False) -> str:
    lines = ["contract_bound vs a fused numlab.run of the same graph (fp16, normal inputs; "
             f"best of {2 if quick else 3} round-robin rounds); target ratio <= {TARGET:g}",
             "", f"{'case':<32} {'run ms':>9} {'bound ms':>9} {'ratio':>7}  ok"]
    measures = []
    for label, tr, tb, r in speed_rows(quick, repeat=2 if quick else 3):
        lines.append(f"{label:<32} {tr * 1e3:9.2f} {tb * 1e3:9.2f} {r:7.2f}  {'yes' if r <= TARGET else 'NO'}")
        measures.append(Measure("`contract_bound` vs a fused `numlab.run` of the same graph (fp16)", r, TARGET))
    models = ("layernorm", "softmax") if quick else None
    lines += ["", "tightness = max contract bound / max observed error over the implementations "
              f"(numlab's {len(SPEC_VARIANTS)} spec variants + sampled random and adversarial ones; "
              "normal inputs, seed 0; 1 is the physical limit)", "",
              f"{'model':<18} {'fmt':<5} {'eager':>9} {'fused':>9}  violations"]
    rows = tightness_rows(models, draws=2 if quick else 3)
    table = {}
    for name, fmt, mode, t in rows:
        table.setdefault((name, fmt), {})[mode] = t
    for (name, fmt), d in table.items():
        viol = sum(t["violations"] for t in d.values())
        lines.append(f"{name:<18} {fmt:<5} {_fmt_ratio(d['eager']['ratio']):>9} {_fmt_ratio(d['fused']['ratio']):>9}"
                     f"  {viol}")
    text = "\n".join(lines)
    print(text)
    return Section(text, measures)
