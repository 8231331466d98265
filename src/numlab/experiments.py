"""Experiments the demo and the notebooks share (no CLI code here).

The tables behind ``numlab demo`` and notebooks 01 and 04: every zoo model
in fp16 and bf16, eager vs fused vs emulated casts against the fp64
reference (:func:`demo_rows`), the error of a chain of multiplies against
its bounds (:func:`chain_errors`), the verdict matrix per fusion preset and
input kind (:func:`verdict_matrix`), the share of bits each source of
difference moves (:func:`source_rows`) and the formats table
(:func:`formats_table`, :func:`rounding_demo`).

Statistics come from :func:`numlab.metrics.error_stats` (relative errors use
``tiny`` = the storage format's smallest normal, so exact-zero references do
not give infinite relative errors; ULP distances are to the fp64 reference
rounded to S, so 0 ULP means correctly rounded).  Fusion arguments are
fusion specs or :class:`~numlab.fusion.FusionOptions`
(:meth:`FusionOptions.parse`; default ``"autofuse"``).

Figures and files are written by :mod:`numlab.cli.demo`; this module only
computes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import claims as _claims
from . import metrics, ops, zoo
from .execute import SOURCES, quiet, run
from .formats import FORMATS, FP32, get_format
from .fusion import FusionOptions
from .graph import Graph, Node, trace
from .kernels import gamma
from .report import Column, render_table
from .rounding import ROUNDINGS, round_to

__all__ = ["DEMO_MODES", "QUICK_MODELS", "CHAIN_NS", "demo_rows", "chain_graph", "chain_errors",
           "source_cases", "MATRIX_FUSIONS", "MATRIX_INPUT_KINDS", "MATRIX_NOTE", "verdict_matrix",
           "format_verdict_matrix", "MATRIX_LEGEND", "SOURCE_COLUMNS", "SOURCE_LEGEND", "FORMATS_LEGEND", "source_rows", "format_source_table",
           "formats_table", "rounding_demo", "flat_outputs", "bits",
           "SCALED_MODEL", "SCALED_CLAIMS", "SCALED_MARGINS", "MARGIN_SIGN", "MARGIN_UNIT", "scaled_claims",
           "format_scaled_claims", "margin_legend"]

DEMO_MODES = ("eager", "fused", "emulated_casts")
QUICK_MODELS = ("layernorm", "softmax", "gelu_mlp", "residual_rmsnorm")
CHAIN_NS = (1, 2, 4, 8, 16, 32, 64, 128)


def flat_outputs(result) -> np.ndarray:
    """Every output of a run, flattened and concatenated (in output order)."""
    return np.concatenate([np.asarray(v).ravel() for v in result.outputs.values()])


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of ``a`` (an unsigned view of the same width)."""
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def demo_rows(models=None, fmts=("fp16", "bf16"), *, fusion=None, kind: str = "normal",
              seed: int = 0, keep_results: bool = False):
    """Run each model in each storage format in every mode and measure.

    ``fusion`` is a fusion spec or FusionOptions (default ``"autofuse"``).

    Returns
    -------
    rows : list of dict
        One per (model, fmt, mode in eager/fused/emulated_casts) with the
        keys of :data:`numlab.report.COLUMNS` plus every ``error_stats`` key.
    extra : dict
        ``plans`` (model -> str(fused plan)), ``fingerprints`` and, with
        ``keep_results``, ``results[(model, fmt)] = {mode: RunResult}``.
    """
    fo = FusionOptions.parse(fusion)
    models = list(zoo.MODELS) if models is None else list(models)
    for m in models:
        if m not in zoo.MODELS:
            raise ValueError(f"model {m!r} is unknown; valid models: {sorted(zoo.MODELS)}")
    rows, plans, fps, results = [], {}, {}, {}
    for name in models:
        g = zoo.MODELS[name]()
        x = zoo.make_inputs(g, kind=kind, seed=seed)
        for fmt in fmts:
            S = get_format(fmt)
            res = {}
            for mode in ("reference", *DEMO_MODES):
                kw = {"fusion": fo} if mode in ("fused", "emulated_casts") else {}
                with quiet():  # a preset swept over the zoo: it need not change every model
                    res[mode] = run(g, x, mode=mode, fmt=S, **kw)
            plans.setdefault(name, str(res["fused"].plan))
            ref = flat_outputs(res["reference"])
            eager = flat_outputs(res["eager"])
            stats_e = None
            for mode in DEMO_MODES:
                out = flat_outputs(res[mode])
                with np.errstate(all="ignore"):
                    st = metrics.error_stats(ref, out, S, tiny=S.smallest_normal)
                row = {"model": name, "fmt": S.name, "mode": mode, "fusion": fo.describe(),
                       "kind": kind, "seed": seed, "n": int(out.size),
                       "fingerprint": res[mode].fingerprint}
                row.update(st)
                row["bitwise_eq_eager"] = metrics.bitwise_equal_share(out, eager)
                row["nonfinite"] = st["nan_x"] + st["inf_x"]  # NaN/inf among the outputs
                if mode == "eager":
                    stats_e = st
                    row["verdict"] = "-"
                else:
                    row["verdict"] = _verdict(st, stats_e, row["bitwise_eq_eager"])
                rows.append(row)
                fps[(name, S.name, mode)] = res[mode].fingerprint
            if keep_results:
                results[(name, S.name)] = res
    return rows, {"plans": plans, "fingerprints": fps, "results": results, "fusion": fo}


def _verdict(st, eager_st, eq) -> str:
    if eq == 1.0:
        return "same bits"
    a, b = st["abs_mean"], eager_st["abs_mean"]
    if not (math.isfinite(a) and math.isfinite(b)):
        return "non-finite"
    if a < b:
        return f"more accurate ({b / a:.2f}x)" if a > 0 else "more accurate"
    if a > b:
        return f"less accurate ({a / b:.2f}x)" if b > 0 else "less accurate"
    return "equally accurate"


# ---------------------------------------------------------------------------
# error against chain length (also used by notebook 04)
# ---------------------------------------------------------------------------
def chain_graph(n: int, size: int = 2048):
    """``y = x * w1 * w2 * ... * wn``: a pointwise chain of n multiplies that
    a fusion planner puts in one block."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be an int >= 1")
    inputs = {"x": (size,), **{f"w{i}": (size,) for i in range(1, n + 1)}}
    nodes, prev = [], "x"
    for i in range(1, n + 1):
        name = "y" if i == n else f"p{i}"
        nodes.append(Node(name, "mul", (prev, f"w{i}")))
        prev = name
    return Graph(inputs, nodes, ["y"], name=f"chain{n}")


def chain_errors(ns=CHAIN_NS, fmt="fp16", *, size: int = 2048, seed: int = 0):
    """Max relative error (vs fp64) of eager, fused and emulated casts on
    :func:`chain_graph` for each n.  Factors are uniform in [0.9, 1.1] and
    x in [1, 2] (no overflow or underflow for n <= 128), so every product's
    relative error obeys the bounds drawn by :func:`numlab.plots.chain_length`.

    Returns dict mode -> list of errors, and the bounds dict
    ``{"eager": gamma_n(u_S), "fused": u_S + gamma_n(u32)(1 + u_S)}``.
    """
    S = get_format(fmt, "fmt")
    out = {m: [] for m in DEMO_MODES}
    bounds = {"eager": [], "fused": []}
    for n in ns:
        g = chain_graph(int(n), size)
        rng = np.random.default_rng([seed, int(n)])
        x = {k: rng.uniform(0.9, 1.1, size) for k in g.inputs}
        x["x"] = rng.uniform(1.0, 2.0, size)
        ref = run(g, x, mode="reference", fmt=S).outputs["y"]
        for m in DEMO_MODES:
            y = run(g, x, mode=m, fmt=S).outputs["y"].astype(np.float64)
            out[m].append(float(np.max(np.abs(y - ref) / np.abs(ref))))
        gs = gamma(n, S.u)
        g32 = gamma(n, FP32.u)
        bounds["eager"].append(gs)
        bounds["fused"].append(S.u + g32 * (1 + S.u))
    return out, bounds


# ---------------------------------------------------------------------------
# where the bits part: one case per source of difference
# ---------------------------------------------------------------------------
def _scaled_residual(x, r):
    return x * 0.1 + r


def _row_sum(x):
    return x.sum(-1)


def _rsqrt_scale(x, w):
    return ops.rsqrt(ops.abs(x)) * w


def source_cases(quick: bool = False) -> list:
    """The showcase of :func:`source_rows`: ``(label, graph factory, input
    kind, fusion, fmts, what it shows)``.  Each case is chosen so that one
    source of difference (``docs/design.md``, section "The four sources of difference") or the decomposition of a
    composite is visible; fp32 storage is included where fp16/bf16 hide the
    source (a few fp32 ulps rarely move a value rounded to fp16)."""
    hidden = 256 if quick else 1024
    cols = 1024 if quick else 4096
    return [
        ("gelu_mlp", lambda: zoo.gelu_mlp(), "normal", "inductor", ("fp16",),
         "promotion: the fused block keeps the matmul+bias, gelu and scale in fp32; "
         "eager rounds each to S"),
        ("x*0.1 + r", lambda: trace(_scaled_residual, x=(16, 256), r=(16, 256)), "normal", "inductor",
         ("fp16",), "instruction: 0.1 broadcast in S (0.0999755859375 in fp16) vs a "
         "scalar register in fp32 (muls), and FMA contraction of x*s + r"),
        (f"row sum (64x{cols})", lambda: trace(_row_sum, x=(64, cols)), "normal", "inductor",
         ("fp16", "fp32"), "tiling: pairwise tree in the fused tile vs 64 lanes + "
         "butterfly in the library tile; visible in fp32 storage, hidden by fp16 rounding"),
        ("rsqrt(|x|)*w", lambda: trace(_rsqrt_scale, x=(16, 256), w=(16, 256)), "normal", "inductor",
         ("fp16", "fp32"), "algorithm: codegen rsqrt (8-bit estimate + 2 Newton steps) vs "
         "library rsqrt (12-bit estimate + 1 step); in fp16 promotion dominates"),
        (f"layernorm (8x{hidden})", lambda: zoo.layernorm(batch=8, hidden=hidden), "shifted_mean",
         "inductor", ("fp16",), "decomposition: the compiler's mean / two-pass variance "
         "graph vs eager's one Welford kernel, on rows with a large mean"),
        (f"softmax (8x{hidden})", lambda: zoo.softmax(batch=8, n=hidden), "normal", "autofuse+decompose",
         ("fp16", "fp32"), "decomposition under autofuse's kinds (autofuse+decompose; the autofuse "
         "preset keeps softmax whole): reductions are library calls, so the decomposed softmax is "
         "stored in S between blocks; in fp32 storage the codegen exp polynomial (algorithm) is "
         "what remains"),
    ]


MATRIX_FUSIONS = ("inductor", "autofuse", "autofuse+decompose", "autofuse:--autofuse_enable_pass=reduce+decompose")
MATRIX_INPUT_KINDS = ("normal", "shifted_mean", "near_overflow", "heavy_tailed")


def verdict_matrix(models=None, fmts=("fp16", "bf16"), fusions=MATRIX_FUSIONS, kinds=MATRIX_INPUT_KINDS,
                   seed: int = 0) -> list:
    """Is fused more or less accurate than eager, per fusion spec and input kind?

    For every (fusion, kind) the zoo models run eager, fused and in fp64 in
    each storage format; a pair counts as ``same`` when fused has eager's bits,
    else ``more``/``less``/``equal`` by the mean absolute error against fp64
    (the demo table's verdict).  Returns one dict per (fusion, kind) with the
    counts and the model/format pairs where fused is less accurate, worst
    first, with the ratio of mean absolute errors (fused / eager) as text
    (``less_in``) and as numbers (``less_ratios``, in the same order).
    """
    models = list(zoo.MODELS) if models is None else list(models)
    out = []
    for spec in fusions:
        fo = FusionOptions.parse(spec, arg="fusions")
        for kind in kinds:
            label = fo.spec
            c = {"fusion": label, "kind": kind, "more": 0, "less": 0, "same": 0, "equal": 0,
                 "nonfinite": 0, "less_in": []}
            for name in models:
                g = zoo.MODELS[name]()
                x = zoo.make_inputs(g, kind=kind, seed=seed)
                for fmt in fmts:
                    S = get_format(fmt)
                    ref = flat_outputs(run(g, x, mode="reference", fmt=S))
                    e = flat_outputs(run(g, x, mode="eager", fmt=S))
                    with quiet():  # a preset swept over the zoo
                        f = flat_outputs(run(g, x, mode="fused", fmt=S, fusion=fo))
                    if np.array_equal(bits(e), bits(f)):
                        c["same"] += 1
                        continue
                    with np.errstate(all="ignore"):
                        se = metrics.error_stats(ref, e, S, tiny=S.smallest_normal)
                        sf = metrics.error_stats(ref, f, S, tiny=S.smallest_normal)
                    v = _verdict(sf, se, 0.0)
                    key = {"m": "more", "l": "less", "e": "equal", "n": "nonfinite"}[v[0]]
                    c[key] += 1
                    if key == "less":  # with the ratio of mean |error|, fused / eager
                        c["less_in"].append((sf["abs_mean"] / se["abs_mean"], f"{name}/{S.name}"))
            # worst first
            ranked = sorted(c["less_in"], key=lambda t: -t[0])
            c["less_in"] = [f"{m} {q:.2f}x" for q, m in ranked]
            c["less_ratios"] = [float(q) for q, _ in ranked]
            out.append(c)
    return out


MATRIX_LEGEND = (
    ("fusion", "the fusion spec the fused runs used (grammar in `numlab --help`)"),
    ("inputs", "the input kind (numlab.zoo.INPUT_KINDS)"),
    ("more, less", "model/format pairs where fused's mean |error| against fp64 is lower or higher "
                   "than eager's (the demo table's 'vs eager (mean abs)')"),
    ("same bits", "pairs where fused is bitwise identical to eager"),
    ("other", "pairs with equal mean |error| or a non-finite one"),
    ("fused less accurate in", "the 'less' pairs, worst first, with the ratio of mean |error| "
                               "fused / eager"),
)


def format_verdict_matrix(mrows, *, width=None, plain=None) -> str:
    """Terminal table of :func:`verdict_matrix` with its legend
    (:func:`numlab.report.render_table`)."""
    cols = [Column("fusion", "fusion", key_col=True), Column("kind", "inputs", key_col=True),
            Column("more", "more", "{:d}", justify="right"), Column("less", "less", "{:d}", justify="right"),
            Column("same", "same bits", "{:d}", justify="right"),
            Column(lambda r: r["equal"] + r["nonfinite"], "other", "{:d}", justify="right"),
            Column(lambda r: ", ".join(r["less_in"]) or "-", "fused less accurate in")]
    return render_table(mrows, cols, legend=MATRIX_LEGEND, width=width, plain=plain)


SOURCE_COLUMNS = ("fused", *[f"only {s}" for s in ("promotion", "instruction", "tiling", "algorithm")],
                  "decomposition", "all aligned")


def source_rows(quick: bool = False, seed: int = 0) -> list:
    """Share of output elements whose bits differ from eager, per source.

    For every case of :func:`source_cases` and storage format: ``fused``
    (nothing aligned); ``only <source>``: every other source set to eager's
    choice (``run(..., align=...)``), so only this source (and the
    decomposition, when the fusion decomposes) is left; ``decomposition``:
    all four aligned, composites still decomposed; ``all aligned``: all four
    aligned and decomposition off, which must be 0 (``docs/design.md``: with
    all four sources aligned and composites whole, fused equals eager).
    Sources interact, so the ``only`` shares need not add up to ``fused``.
    """
    rows = []
    for label, make, kind, fusion, case_fmts, why in source_cases(quick):
        g = make()
        x = zoo.make_inputs(g, kind=kind, seed=seed)
        fo = FusionOptions.parse(fusion)
        fo_nodec = dataclasses.replace(fo, decompose=False)
        for fmt in case_fmts:
            e = bits(flat_outputs(run(g, x, mode="eager", fmt=fmt)))

            def share(g=g, x=x, fmt=fmt, e=e, **kw):
                with quiet():  # sources aligned one at a time: one may change nothing here
                    return float(np.mean(bits(flat_outputs(run(g, x, mode="fused", fmt=fmt, **kw))) != e))

            row = {"case": label, "fmt": get_format(fmt).name, "kind": kind, "fusion": fo.spec,
                   "why": why, "n": int(e.size), "fused": share(fusion=fo)}
            for s in SOURCES:
                row[f"only {s}"] = share(fusion=fo, align=tuple(q for q in SOURCES if q != s))
            row["decomposition"] = share(fusion=fo, align=SOURCES) if fo.decompose else 0.0
            row["all aligned"] = share(fusion=fo_nodec, align=SOURCES)
            rows.append(row)
    return rows


SOURCE_LEGEND = (
    ("S", "storage format"),
    ("inputs, fusion", "the input kind and the fusion preset of the case"),
    ("fused", "share of output elements whose bits differ from eager, nothing aligned"),
    ("only X", "the same share with the other three sources set to eager's choice "
               "(run(..., align=...)), composites still decomposed when the preset decomposes"),
    ("decomposition", "all four sources set to eager's choice, composites still decomposed"),
    ("all aligned", "all four set and decomposition off: must be 0.0%"),
    ("", "sources interact, so the shares need not add up"),
)


def format_source_table(rows, *, width=None, plain=None) -> str:
    """Terminal table of :func:`source_rows` (shares in percent) with its legend."""
    cols = [Column("case", "case", key_col=True), Column("fmt", "S", key_col=True),
            Column("kind", "inputs"), Column("fusion", "fusion"),
            *[Column(c, c, "{:.1%}", justify="right") for c in SOURCE_COLUMNS]]
    legend = [(t, d) if t else ("note", d) for t, d in SOURCE_LEGEND]
    return render_table(rows, cols, legend=legend, width=width, plain=plain)


MATRIX_NOTE = (
    "The autofuse preset keeps composites whole (layer norm, rms norm and softmax run eager's library "
    "kernel), so there fused has eager's bits. autofuse+decompose decomposes them, as Inductor does, "
    "while autofuse's reductions stay library calls: the decomposed mean, variance or softmax sum is "
    "stored in S between blocks where eager's one kernel keeps fp32, and there 'fused is not less "
    "accurate than eager' (the autofusion precision note's claim) fails. Enabling reduce fusion "
    "(--autofuse_enable_pass=reduce+decompose) keeps the decomposition in one fp32 block; the losses "
    "left (ratio fused/eager of mean |error| shown) are small: fewer roundings do not put every "
    "element closer to fp64.")




FORMATS_LEGEND = (
    ("p", "precision: significand bits including the implicit one"),
    ("emin, emax", "smallest and largest exponent of a normal number"),
    ("u", "unit roundoff 2**-p: the largest relative error of rounding to nearest"),
    ("max", "largest finite value"),
    ("min normal, min subnormal", "smallest positive normal and subnormal values"),
    ("inf", "whether the format has infinities (else overflow gives NaN or saturates)"),
)


def formats_table(*, width=None, plain=None) -> str:
    """The formats side by side, as a terminal table with its legend."""
    rows = [{"name": f.name, "p": f.p, "emin": f.emin, "emax": f.emax, "u": f.u, "max": f.max,
             "sn": f.smallest_normal, "ss": f.smallest_subnormal, "inf": "yes" if f.inf else "no"}
            for f in FORMATS.values()]
    cols = [Column("name", "format", key_col=True), Column("p", "p", "{:d}", justify="right"),
            Column("emin", "emin", "{:d}", justify="right"), Column("emax", "emax", "{:d}", justify="right"),
            Column("u", "u", "{:.3e}"), Column("max", "max", "{:.5g}", justify="right"),
            Column("sn", "min normal", "{:.3e}"), Column("ss", "min subnormal", "{:.3e}"),
            Column("inf", "inf")]
    return render_table(rows, cols, legend=FORMATS_LEGEND, width=width, plain=plain)


def rounding_demo(x: float = 0.1, seed: int = 0, *, width=None, plain=None) -> str:
    """Where each rounding mode sends ``x`` in each storage format (a terminal table)."""
    rng = np.random.default_rng(seed)
    names = [n for n in FORMATS if n not in ("fp64", "fp32")]
    rows = []
    for rounding in ROUNDINGS:
        row = {"rounding": rounding}
        for n in names:
            row[n] = float(round_to(x, n, rounding, rng=rng if rounding == "stochastic" else None))
        rows.append(row)
    cols = [Column("rounding", "rounding", key_col=True),
            *[Column(n, n, "{:.9g}", justify="right") for n in names]]
    legend = (("rne, rtz", "round to nearest, ties to even; round toward zero"),
              ("up, down", "round toward +inf; toward -inf"),
              ("odd", "round to odd (the last bit set when inexact)"),
              ("stochastic", f"up or down with probability by distance (seeded, seed {seed})"))
    return render_table(rows, cols, legend=legend, width=width, plain=plain,
                        title=f"x = {x!r} rounded by each rounding mode in each storage format")


# ---------------------------------------------------------------------------
# block-scaled fp8: fused-with-scaling vs eager-with-scaling
# ---------------------------------------------------------------------------
SCALED_MODEL = "fp8_mlp"
SCALED_CLAIMS = ("no_worse_tensor", "no_worse_population", "bound_no_worse", "error_within_bound")
"""The claims :func:`scaled_claims` checks on :data:`SCALED_MODEL`: is fused
with per-block scaling no worse than eager with per-block scaling (per tensor,
over the trial population, by the contract bounds), and are both inside
their contract bounds."""


SCALED_MARGINS = {
    "no_worse_tensor": ("max|fused-ref| - max|eager-ref| per output", "u_S*max|ref|"),
    "no_worse_population": ("fused - eager of the P99 and of the max |error| pooled over the trials (the "
                            "larger)", "eager's pooled max |error|"),
    "bound_no_worse": ("max contract bound fused - eager per output", "u_S*max|ref|"),
    "error_within_bound": ("|error| - contract bound, worst element", "that bound"),
}
"""Per claim of :data:`SCALED_CLAIMS`: what its margin subtracts from what, and the
unit it is divided by (:mod:`numlab.claims.catalogue`); |error| is |computed - ref|
against the fp64 reference."""

MARGIN_SIGN = "A - B in the unit below, largest over outputs and trials; > 0: claim violated, <= 0: holds"
"""The sign of a (worst) claim margin."""

MARGIN_UNIT = ("u_S*max|ref|", "unit roundoff of S (fp16 2^-11, bf16 2^-8) x the largest |ref| of the "
               "output (1/2 to 1 ULP of S there)")
"""The tensor-level margin unit, as a legend entry."""


def scaled_claims(fmts=("fp16", "bf16"), claims=SCALED_CLAIMS, *, trials: int = 10, fusion=None,
                  kinds=("normal", "heavy_tailed"), seed: int = 0) -> list[dict]:
    """Verdicts of ``claims`` on the zoo's fp8 MLP (DeepSeek-V3 blocks) per
    storage format: :func:`numlab.claims.check` with ``trials`` random trials
    cycling over ``kinds`` (trial t: kind ``kinds[t % len(kinds)]``, inputs
    from the per-trial seed :func:`numlab.claims.cases.trial_seed`; no
    shrinking, nothing saved).  One row per (claim, fmt): ``claim``, ``fmt``,
    ``verdict`` (holds / fails / undecided), ``trials``, ``violations``,
    ``undecided``, ``worst_margin`` (in ``margin_unit``, :data:`SCALED_MARGINS`),
    ``worst_trial`` and ``worst_kind`` (the trial of the worst margin; None for
    the population claim, which pools the trials), ``worst_detail`` (its
    numbers, e.g. ``fused_max`` and ``eager_max``), ``why`` (the undecided
    reason, with the operators responsible)."""
    opts = _claims.SearchOptions(trials=trials, search="random", kinds=tuple(kinds))
    rows = []
    for fmt in fmts:
        for name in claims:
            rep = _claims.check(name, SCALED_MODEL, fmt=fmt, fusion=fusion, seed=seed, options=opts,
                                shrink_cex=False)
            why = ""
            if rep.verdict == "undecided" and rep.undecided_detail:
                why = str(rep.undecided_detail.get("reason", ""))
            t = rep.worst_trial
            detail = {k: float(v) for k, v in (rep.worst_detail or {}).items()
                      if isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)}
            rows.append({"claim": name, "fmt": get_format(fmt).name, "verdict": rep.verdict, "trials": rep.trials,
                         "violations": rep.violations, "undecided": rep.undecided,
                         "worst_margin": rep.worst_margin,
                         "margin_unit": SCALED_MARGINS.get(name, ("", ""))[1],
                         "worst_trial": t, "worst_kind": None if t is None else kinds[t % len(kinds)],
                         "worst_detail": detail, "why": why})
    return rows


def format_scaled_claims(rows, *, width=None, plain=None) -> str:
    """The rows of :func:`scaled_claims` as a text table, with what each
    margin measures, its unit and its sign (:func:`margin_legend`)."""
    cols = [Column("claim", "claim", key_col=True), Column("fmt", "S"), Column("verdict", "verdict"),
            Column("violations", "violating trials"), Column("trials", "trials"),
            Column("worst_margin", "worst margin", fmt="{:.3g}"), Column("why", "why undecided")]
    return render_table(rows, cols, width=width, plain=plain,
                        legend=[("worst margin", MARGIN_SIGN.replace("below", "given per claim")),
                                *margin_legend(r["claim"] for r in rows)])


def margin_legend(claims) -> list[tuple[str, str]]:
    """Legend entries ``(claim, "A - B, in U")`` for ``claims`` (each once, in
    order): the claim's margin is A - B divided by the unit U.  Then what
    ``u_S*max|ref|`` is, when a margin uses it."""
    seen = [c for c in dict.fromkeys(claims) if c in SCALED_MARGINS]
    out = [(c, f"{SCALED_MARGINS[c][0]}, in {SCALED_MARGINS[c][1]}") for c in seen]
    if any(SCALED_MARGINS[c][1] == MARGIN_UNIT[0] for c in seen):
        out.append(MARGIN_UNIT)
    return out
