"""The autofusion precision test plan (``numlab check plan``): C1 (scalar
multiply), C2 (blocked sums), C3 (rsqrt by Newton steps) and four chains
judged under several fusion configurations."""

from __future__ import annotations

import csv
import math
import os
import platform

import numpy as np

from .. import __version__, bounds, metrics
from .. import _json as strict_json
from ..formats import get_format
from ..fusion import FUSION_KINDS, FusionOptions
from ..kernels import scalar_mul
from ..kernels.algorithms import rsqrt
from ..kernels.reduction import reduce
from ..rounding import round_to
from ._fusion import fusion_options, fusion_specs
from .cases import Runs, make_case
from .catalogue import _claim_population, _population_stats, get_model, model_path, model_sizes
from .search import _submit_all

__all__ = ["PLAN_CHAINS", "PLAN_FUSIONS", "PLAN_COLUMNS", "PLAN_FILES", "plan_rows", "plan_c1", "plan_c2", "plan_c3",
           "run_plan"]

PLAN_COLUMNS = ("check", "case", "fusion", "metric", "value")
"""The columns of ``plan.csv`` (its first line): one row per metric."""
PLAN_FILES = ("plan.csv", "plan.json", "plan.txt")
"""What :func:`run_plan` writes into ``out``: the CSV (header row first), its
JSON sidecar (the options, the fusion configurations, the columns, the row
count, the versions) and the text table."""

_PLAN_VERDICTS = {"holds": "PASS", "fails": "FAIL", "undecided": "UNDECIDED"}


PLAN_CHAINS = {
    "mul->add->gelu->mul": ("mul_add_gelu_mul", {"batch": 4, "hidden": 64}),
    "layernorm": ("layernorm", {"batch": 4, "hidden": 64}),
    "softmax": ("softmax", {"batch": 4, "n": 64}),
    "matmul->add->layernorm": ("matmul_add_layernorm", {"batch": 4, "d_in": 32, "hidden": 64}),
}


def plan_c1(n: int = 1024, *, scalar: float = 0.7, seed: int = 0, fmt="fp16") -> dict:
    """C1: ``x * 0.7`` for ``x ~ U(-1, 1)`` in S ``[n, n]`` by the ``muls``
    (scalar unit keeps 0.7 in fp32) and ``broadcast`` (0.7 first rounded to S)
    instructions; shares of elements at 0, 1 and >= 2 ULP from the correctly
    rounded product (the exact product of the S value and the fp64 scalar).
    ``fmt``: S (default fp16), as in C2 and C3."""
    S = get_format(fmt, "fmt")
    rng = np.random.default_rng([seed, 1])
    x = np.asarray(round_to(rng.uniform(-1, 1, (n, n)), S), dtype=np.float64)
    ref = x * scalar  # exact enough: an fp16 value times a double, compared after rounding to S
    out = {}
    for how in ("muls", "broadcast"):
        y = scalar_mul(x.astype(S.container), scalar, fmt=S, how=how)
        d = metrics.ulp_distance(ref, y, S)
        out[how] = {**metrics.ulp_shares(d), "ulp_max": float(d.max()),
                    "rel_max": float(metrics.rel_error(ref, y).max())}
    return out


def plan_c2(n: int = 16384, tiles=(512, 1024, 2048), *, rows: int = 64, seed: int = 0, fmt="fp16",
            inner: str = "sequential", outer: str = "sequential") -> dict:
    """C2: sum of ``[rows, n]`` S values (U(-1, 1)) with an fp32 accumulator,
    ``blocked(T, inner, outer)`` for each tile T, rounded to S; errors against
    fp64 (exact fsum per row) before and after the final rounding, with the
    a-priori bound of :func:`numlab.bounds.sum_bound`."""
    S = get_format(fmt, "fmt")
    rng = np.random.default_rng([seed, 2])
    x = np.asarray(round_to(rng.uniform(-1, 1, (rows, n)), S), dtype=np.float64)
    exact = np.array([math.fsum(r) for r in x])
    out = {}
    for T in tiles:
        order = f"blocked({T},{inner},{outer})"
        acc32 = np.asarray(reduce(x, "sum", order=order, acc="fp32"), dtype=np.float64)
        outS = np.asarray(reduce(x, "sum", order=order, acc="fp32", out=S), dtype=np.float64)
        e32 = np.abs(acc32 - exact)
        eS = np.abs(outS - exact)
        bnd = bounds.sum_bound(np.abs(x).sum(1), n, order, "fp32")
        out[T] = {"order": order, "fp32_err_max": float(e32.max()), "fp32_err_mean": float(e32.mean()),
                  "out_err_max": float(eS.max()), "out_err_mean": float(eS.mean()),
                  "bound_fp32_max": float(np.max(bnd)), "bound_holds": bool(np.all(e32 <= bnd)),
                  "ulp_out_max": float(metrics.ulp_distance(exact, outS, S).max())}
    return out


def plan_c3(n: int = 100_000, *, steps=(2, 3), seed_algo: str = "magic", step_fmt: str = "fp32",
            seed: int = 0, fmt="fp16") -> dict:
    """C3: ``rsqrt`` of S values ``x ~ U(0.01, 100)`` by a ``seed_algo``
    estimate plus 2 or 3 Newton steps in ``step_fmt``, rounded to S; ULP
    shares against the correctly rounded ``1/sqrt(x)``."""
    S = get_format(fmt, "fmt")
    rng = np.random.default_rng([seed, 3])
    x = np.asarray(round_to(rng.uniform(0.01, 100, n), S), dtype=np.float64)
    ref = 1.0 / np.sqrt(x)
    out = {}
    for k in steps:
        y = rsqrt(x.astype(S.container), fmt=S, algo=f"newton({seed_algo},{k},{step_fmt})")
        d = metrics.ulp_distance(ref, y, S)
        out[k] = {**metrics.ulp_shares(d), "ulp_max": float(d.max()),
                  "ulp_err_max": float(metrics.ulp_error(ref, y, S).max())}
    return out


PLAN_FUSIONS = (
    "autofuse",
    "autofuse+decompose",
    "autofuse:--autofuse_enable_pass=reduce+decompose",
    "inductor",
)
"""Fusion configurations the plan's chains run under by default.  The
autofusion precision note fixes autofuse's fused kinds (elementwise incl.
broadcast on; reduce, concat, slice, gather, transpose off); its
GE/TensorFlow path runs composites such as LayerNorm and Softmax as library
operators, so the ``autofuse`` preset keeps them whole (``decompose=False``).
``autofuse+decompose`` is Inductor's habit of decomposing composites before
fusion under autofuse's kinds: the decomposed reductions (mean, variance,
softmax's max and sum) are then separate kernels and their results are
stored in S between them, which is where the note's "no worse than eager"
claim fails for layernorm at fp16.  The same decomposition with reduce
fusion enabled (one fp32 block) and the Inductor-like preset complete the
list."""

def _meaning(fo: FusionOptions) -> str:
    """One line saying what a fusion configuration means for the plan's
    chains: whether composites are decomposed, which kinds are fused, and
    what that implies for layer_norm / softmax (stated from the
    :class:`numlab.fusion.FusionOptions` fields, not measured)."""
    if not fo.enable_autofuse:
        fused, unfused = [], list(FUSION_KINDS)
    else:
        fused = [k for k in FUSION_KINDS if k in fo.enabled]
        unfused = [k for k in FUSION_KINDS if k not in fo.enabled]
    comp = ("composites (layer_norm, softmax) decomposed into primitives" if fo.decompose
            else "composites kept whole (eager's fp32 library kernel)")
    if fo.decompose and fo.fuses("reduce") and fo.fuses("elementwise"):
        effect = "a decomposed layer_norm/softmax is one fp32 block"
    elif fo.decompose:
        effect = ("decomposed reductions are separate kernels: mean, variance and the other values crossing "
                  "block boundaries are stored in S")
    else:
        effect = "layer_norm/softmax run exactly as in eager"
    return (f"{comp}; fused: {', '.join(fused) or 'nothing'}; separate kernels: {', '.join(unfused) or 'none'}"
            f" -> {effect}")


def _plan_task(payload: dict) -> list:
    """One executor task of the plan: trials [lo, hi) of one chain.  Each
    trial's inputs, eager and reference runs are computed once and shared by
    every fusion configuration (so every configuration sees the same inputs);
    returns per trial {spec: per-case stats of ``no_worse_population``}."""
    graph = get_model(payload["model"], payload["sizes"], payload.get("path", ()))
    out = []
    for t in range(payload["lo"], payload["hi"]):
        kind = payload["kinds"][t % len(payload["kinds"])]
        base = None
        per = {}
        for spec in payload["fusions"]:
            case = make_case(payload["model"], sizes=payload["sizes"], fmt=payload["fmt"], fusion=spec,
                             kind=kind, seed=payload["seed"], trial=t, graph=graph)
            runs = Runs(case, graph=graph)
            if base is None:
                base = runs
            else:
                runs._res.update({k: v for k, v in base._res.items() if k[0] in ("eager", "reference")})
            st = _population_stats(runs)
            e, f = runs.outputs("eager"), runs.outputs("fused")
            same = sum(int(np.count_nonzero(metrics.bitwise_equal(e[k], f[k]))) for k in st)
            per[spec] = (st, same)
        out.append(per)
    return out


def run_plan(out: str | None = "out/check_plan", *, trials: int = 1000, seed: int = 0, executor=None,
             progress: bool = False, quick: bool = False, kinds=("normal",), force: bool = False,
             fusion=None, chunk: int = 50) -> dict:
    """Run the whole test plan: C1, C2, C3 and the four chains (``trials``
    inputs each) under every fusion configuration of ``fusion`` (see
    :func:`numlab.claims._fusion.fusion_specs`: a comma-separated spec
    list, a FusionOptions or a list of either, each parsed by
    ``FusionOptions.parse``; default :data:`PLAN_FUSIONS`; the results are
    keyed by canonical spec).  Verdict per
    chain and configuration: "fused P99 and max <= eager P99 and max" over
    the pooled elementwise absolute errors against the fp64 reference
    (= claim ``no_worse_population``, same inputs for every configuration).
    Writes ``plan.csv`` (header row first, :data:`PLAN_COLUMNS`, with a
    ``fusion`` column), its sidecar ``plan.json`` and ``plan.txt`` into
    ``out`` (unless None); refuses to overwrite an existing ``plan.csv`` or
    ``plan.json`` without ``force``.  The figures are drawn from the returned dict by
    :func:`numlab.plots.plan_figures` (a layer above; ``numlab check plan``
    does it).

    Returns ``{"c1", "c2", "c3", "chains", "fusions", "trials", "table"}``:
    ``chains[label][spec]`` holds ``fused_p99``, ``eager_p99``,
    ``fused_max``, ``eager_max``, ``elements``, ``bitwise_equal_share``
    (share of output elements where fused and eager have the same bits: a
    PASS at 100% is equality, not improvement), ``fusion`` and ``verdict``
    (PASS, FAIL, or UNDECIDED when the pooled comparison rests on infinite
    errors on both sides); ``fusions[spec]`` says what the configuration
    means for the chains."""
    for f in PLAN_FILES[:2]:
        if out is not None and os.path.exists(os.path.join(out, f)) and not force:
            raise FileExistsError(f"{os.path.join(out, f)} exists; pass force=True (--force) to overwrite")
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials={trials!r} must be an int >= 1")
    fusions = fusion_specs(fusion, PLAN_FUSIONS)
    kinds = tuple(kinds)
    n1, n2, n3 = (256, 4096, 20_000) if quick else (1024, 16384, 100_000)
    c1 = plan_c1(n1, seed=seed)
    c2 = plan_c2(n2, (512, 1024, 2048), seed=seed, rows=16 if quick else 64)
    c3 = plan_c3(n3, seed=seed)
    chains: dict = {}
    for label, (model, sizes) in PLAN_CHAINS.items():
        payloads = [{"model": model, "path": model_path(model), "sizes": model_sizes(model, sizes), "fmt": "fp16",
                     "seed": seed,
                     "kinds": kinds, "fusions": tuple(fusions), "lo": lo, "hi": min(lo + chunk, trials)}
                    for lo in range(0, trials, chunk)]
        per_trial = [r for ch in _submit_all(executor, payloads, progress, f"plan {label}", fn=_plan_task)
                     for r in ch]
        chains[label] = {}
        for spec in fusions:
            res = _claim_population([r[spec][0] for r in per_trial])
            st = res.stats.get("y", next(iter(res.stats.values())))
            n_all = sum(v["elements"] for v in res.stats.values())
            same = sum(r[spec][1] for r in per_trial) / n_all if n_all else math.nan
            chains[label][spec] = {**st, "bitwise_equal_share": same, "fusion": spec,
                                   "verdict": _PLAN_VERDICTS[res.verdict]}
    rows = []
    for how, r in c1.items():
        rows.append(("C1", f"x*0.7 {how}", f"0ulp {r['ulp0']:.4f}", f"1ulp {r['ulp1']:.4f}",
                     f">=2ulp {r['ulp_ge2']:.4f}", f"max {r['ulp_max']:.0f} ulp", ""))
    for T, r in c2.items():
        rows.append(("C2", f"sum tile {T}", f"fp32 err max {r['fp32_err_max']:.3g}",
                     f"fp16 err max {r['out_err_max']:.3g}", f"bound {r['bound_fp32_max']:.3g}",
                     f"max {r['ulp_out_max']:.0f} ulp", "bound holds" if r["bound_holds"] else "BOUND VIOLATED"))
    for k, r in c3.items():
        rows.append(("C3", f"rsqrt {k} Newton", f"0ulp {r['ulp0']:.4f}", f"1ulp {r['ulp1']:.4f}",
                     f">=2ulp {r['ulp_ge2']:.4f}", f"max {r['ulp_max']:.0f} ulp", ""))
    table = "\n".join(" | ".join(f"{c:<26}" if i == 1 else f"{c:<22}" for i, c in enumerate(row)) for row in rows)
    tags = {spec: f"F{i + 1}" for i, spec in enumerate(fusions)}
    head = [f"chains: fp16, {trials} inputs each (kinds {','.join(kinds)}), the same inputs for every "
            "configuration; verdict: fused P99 and max <= eager P99 and max (|error| vs fp64, pooled)",
            "fusion configurations:"]
    for spec in fusions:
        head.append(f"  {tags[spec]} = {spec}: {_meaning(fusion_options(spec))}")
    w = max(len(lb) for lb in PLAN_CHAINS)
    crow = [f"{'chain':<{w}} | fusion | {'eager P99':>9} | {'fused P99':>9} | {'eager max':>9} | "
            f"{'fused max':>9} | fused==eager bits | verdict"]
    for label, per in chains.items():
        for spec, r in per.items():
            crow.append(f"{label:<{w}} | {tags[spec]:<6} | {r['eager_p99']:>9.3g} | {r['fused_p99']:>9.3g} | "
                        f"{r['eager_max']:>9.3g} | {r['fused_max']:>9.3g} | "
                        f"{100 * r['bitwise_equal_share']:>16.2f}% | {r['verdict']}")
    table = table + "\n\n" + "\n".join(head + crow)
    result = {"c1": c1, "c2": c2, "c3": c3, "chains": chains,
              "fusions": {spec: _meaning(fusion_options(spec)) for spec in fusions}, "trials": trials,
              "table": table}
    if out is not None:
        opts = {"trials": trials, "seed": seed, "quick": quick, "kinds": list(kinds), "fusion": list(fusions),
                "chunk": chunk}
        _write_plan(out, result, opts)
    return result


def plan_rows(res: dict) -> list[tuple]:
    """The data rows of ``plan.csv`` (:data:`PLAN_COLUMNS`) from the dict
    :func:`run_plan` returns."""
    rows = [("C1", how, "", k, v) for how, r in res["c1"].items() for k, v in r.items()]
    rows += [("C2", f"tile{T}", "", k, v) for T, r in res["c2"].items() for k, v in r.items()]
    rows += [("C3", f"newton{s}", "", k, v) for s, r in res["c3"].items() for k, v in r.items()]
    for label, per in res["chains"].items():
        for spec, r in per.items():
            rows += [("chain", label, spec, k, v) for k, v in r.items() if k != "fusion"]
            rows += [("chain", label, spec, "trials", res["trials"]),
                     ("chain", label, spec, "meaning", res["fusions"][spec])]
    return rows


def _write_plan(out: str, res: dict, options: dict) -> None:
    """``plan.csv``, its sidecar ``plan.json`` and ``plan.txt`` into ``out``."""
    os.makedirs(out, exist_ok=True)
    rows = plan_rows(res)
    with open(os.path.join(out, "plan.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(PLAN_COLUMNS)
        w.writerows(rows)
    meta = {"file": "plan.csv", "command": "numlab check plan", "columns": list(PLAN_COLUMNS), "row_count": len(rows),
            "options": options, "fusions": res["fusions"],
            "versions": {"numlab": __version__, "numpy": np.__version__, "python": platform.python_version()}}
    with open(os.path.join(out, "plan.json"), "w") as fh:
        fh.write(strict_json.dumps(meta, default=str, indent=1) + "\n")
    with open(os.path.join(out, "plan.txt"), "w") as fh:
        fh.write(res["table"] + "\n")
