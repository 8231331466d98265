"""``numlab demo``: the zoo in fp16 and bf16, eager vs fused vs emulated casts,
each against the fp64 reference.

Prints a table (max and P99 absolute and relative error, ULP statistics,
share of elements bitwise equal to eager, which mode is more accurate) and
writes figures (PNG), ``results.json``, ``results.csv`` and a self-contained
``report.html`` (images embedded) to ``--out`` (default ``out/``).

Existing results are never overwritten: when the output directory already
holds a numlab report (``report.html`` or ``results.json``) the demo writes to
a fresh subfolder ``run-NNN`` inside it and says so; ``--force`` overwrites in
place instead.

Statistics come from :func:`numlab.metrics.error_stats` (relative errors use
``tiny`` = the storage format's smallest normal, so exact-zero references do
not give infinite relative errors; ULP distances are to the fp64 reference
rounded to S, so 0 ULP means correctly rounded).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from . import zoo
from .execute import run
from .formats import FP32, get_format
from .fusion import FusionOptions

__all__ = ["add_parser", "demo_rows", "chain_errors", "chain_graph", "resolve_out_dir", "main",
           "notebooks_dir", "parse_fusion", "source_rows", "format_source_table", "verdict_matrix",
           "format_verdict_matrix"]

FUSED_MODES = ("eager", "fused", "emulated_casts")
QUICK_MODELS = ("layernorm", "softmax", "gelu_mlp", "residual_rmsnorm")
CHAIN_NS = (1, 2, 4, 8, 16, 32, 64, 128)


def parse_fusion(spec: str | FusionOptions | None) -> FusionOptions:
    """``"inductor"``, ``"autofuse"`` (Ascend defaults), ``"off"``, or an
    ``AUTOFUSE_FLAGS`` string (``"--autofuse_enable_pass=reduce"``)."""
    if spec is None:
        return FusionOptions.inductor()
    if isinstance(spec, FusionOptions):
        return spec
    s = str(spec).strip()
    if s == "inductor":
        return FusionOptions.inductor()
    if s == "autofuse":
        return FusionOptions.autofuse()
    if s == "off":
        return FusionOptions.off()
    if s.startswith("-") or "=" in s:
        return FusionOptions.autofuse(s)
    raise ValueError(
        f"--fusion {spec!r} is not valid; choose inductor, autofuse, off, or an AUTOFUSE_FLAGS "
        "string such as '--enable_autofuse=true;--autofuse_enable_pass=reduce'"
    )


def _flat(result) -> np.ndarray:
    return np.concatenate([np.asarray(v).ravel() for v in result.outputs.values()])


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def demo_rows(models=None, dtypes=("fp16", "bf16"), *, fusion=None, kind: str = "normal",
              seed: int = 0, keep_results: bool = False):
    """Run each model in each storage format in every mode and measure.

    Returns
    -------
    rows : list of dict
        One per (model, dtype, mode in eager/fused/emulated_casts) with the
        keys of :data:`numlab.report.COLUMNS` plus every ``error_stats`` key.
    extra : dict
        ``plans`` (model -> str(fused plan)), ``fingerprints`` and, with
        ``keep_results``, ``results[(model, dtype)] = {mode: RunResult}``.
    """
    from . import metrics

    fo = parse_fusion(fusion)
    models = list(zoo.MODELS) if models is None else list(models)
    for m in models:
        if m not in zoo.MODELS:
            raise ValueError(f"model {m!r} is unknown; valid models: {sorted(zoo.MODELS)}")
    rows, plans, fps, results = [], {}, {}, {}
    for name in models:
        g = zoo.MODELS[name]()
        x = zoo.make_inputs(g, kind=kind, seed=seed)
        for dt in dtypes:
            S = get_format(dt)
            res = {}
            for mode in ("reference", *FUSED_MODES):
                kw = {"fusion": fo} if mode in ("fused", "emulated_casts") else {}
                res[mode] = run(g, x, mode=mode, dtype=S, **kw)
            plans.setdefault(name, str(res["fused"].plan))
            ref = _flat(res["reference"])
            eager = _flat(res["eager"])
            stats_e = None
            for mode in FUSED_MODES:
                out = _flat(res[mode])
                with np.errstate(all="ignore"):
                    st = metrics.error_stats(ref, out, S, tiny=S.smallest_normal)
                row = {"model": name, "dtype": S.name, "mode": mode, "fusion": fo.describe(),
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
# error against chain length (also used by notebook 03)
# ---------------------------------------------------------------------------
def chain_graph(n: int, size: int = 2048):
    """``y = x * w1 * w2 * ... * wn``: a pointwise chain of n multiplies that
    a fusion planner puts in one block."""
    from .graph import Graph, Node

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be an int >= 1")
    inputs = {"x": (size,), **{f"w{i}": (size,) for i in range(1, n + 1)}}
    nodes, prev = [], "x"
    for i in range(1, n + 1):
        name = "y" if i == n else f"p{i}"
        nodes.append(Node(name, "mul", (prev, f"w{i}")))
        prev = name
    return Graph(inputs, nodes, ["y"], name=f"chain{n}")


def chain_errors(ns=CHAIN_NS, dtype="fp16", *, size: int = 2048, seed: int = 0):
    """Max relative error (vs fp64) of eager, fused and emulated casts on
    :func:`chain_graph` for each n.  Factors are uniform in [0.9, 1.1] and
    x in [1, 2] (no overflow or underflow for n <= 128), so every product's
    relative error obeys the bounds drawn by :func:`numlab.plots.chain_length`.

    Returns dict mode -> list of errors, and the bounds dict
    ``{"eager": gamma_n(u_S), "fused": u_S + gamma_n(u32)(1 + u_S)}``.
    """
    from .kernels import gamma

    S = get_format(dtype)
    out = {m: [] for m in FUSED_MODES}
    bounds = {"eager": [], "fused": []}
    for n in ns:
        g = chain_graph(int(n), size)
        rng = np.random.default_rng([seed, int(n)])
        x = {k: rng.uniform(0.9, 1.1, size) for k in g.inputs}
        x["x"] = rng.uniform(1.0, 2.0, size)
        ref = run(g, x, mode="reference", dtype=S).outputs["y"]
        for m in FUSED_MODES:
            y = run(g, x, mode=m, dtype=S).outputs["y"].astype(np.float64)
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
    from . import ops

    return ops.rsqrt(ops.abs(x)) * w


def source_cases(quick: bool = False) -> list:
    """The showcase of :func:`source_rows`: ``(label, graph factory, input
    kind, fusion, dtypes, what it shows)``.  Each case is chosen so that one
    source of difference (DESIGN.md section 1) or the decomposition of a
    composite is visible; fp32 storage is included where fp16/bf16 hide the
    source (a few fp32 ulps rarely move a value rounded to fp16)."""
    from .graph import trace

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
        (f"softmax (8x{hidden})", lambda: zoo.softmax(batch=8, n=hidden), "normal", "autofuse",
         ("fp16", "fp32"), "decomposition under Ascend autofusion defaults: reductions are "
         "library calls, so the decomposed softmax is stored in S between blocks; in fp32 "
         "storage the codegen exp polynomial (algorithm) is what remains"),
    ]


MATRIX_PRESETS = ("inductor", "autofuse", "--autofuse_enable_pass=reduce")
MATRIX_KINDS = ("normal", "shifted_mean", "near_overflow", "heavy_tailed")


def verdict_matrix(models=None, dtypes=("fp16", "bf16"), presets=MATRIX_PRESETS, kinds=MATRIX_KINDS,
                   seed: int = 0) -> list:
    """Is fused more or less accurate than eager, per fusion preset and input kind?

    For every (preset, kind) the zoo models run eager, fused and in fp64 in
    each storage format; a pair counts as ``same`` when fused has eager's bits,
    else ``more``/``less``/``equal`` by the mean absolute error against fp64
    (the demo table's verdict).  Returns one dict per (preset, kind) with the
    counts and the model/format pairs where fused is less accurate, worst
    first, with the ratio of mean absolute errors (fused / eager).
    """
    from . import metrics

    models = list(zoo.MODELS) if models is None else list(models)
    out = []
    for preset in presets:
        fo = parse_fusion(preset)
        for kind in kinds:
            label = preset if isinstance(preset, str) else fo.describe()
            c = {"fusion": label, "kind": kind, "more": 0, "less": 0, "same": 0, "equal": 0,
                 "nonfinite": 0, "less_in": []}
            for name in models:
                g = zoo.MODELS[name]()
                x = zoo.make_inputs(g, kind=kind, seed=seed)
                for dt in dtypes:
                    S = get_format(dt)
                    ref = _flat(run(g, x, mode="reference", dtype=S))
                    e = _flat(run(g, x, mode="eager", dtype=S))
                    f = _flat(run(g, x, mode="fused", dtype=S, fusion=fo))
                    if np.array_equal(_bits(e), _bits(f)):
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
            c["less_in"] = [f"{m} {q:.2f}x" for q, m in sorted(c["less_in"], key=lambda t: -t[0])]
            out.append(c)
    return out


def format_verdict_matrix(mrows) -> str:
    """Text of :func:`verdict_matrix`."""
    w = max([6, *(len(r["fusion"]) for r in mrows)])
    lines = [f"{'fusion':<{w}} {'inputs':<14} {'more':>5} {'less':>5} {'same bits':>9} {'other':>5}  "
             "fused less accurate than eager in"]
    for r in mrows:
        other = r["equal"] + r["nonfinite"]
        less = ", ".join(r["less_in"][:4]) + (f", ... ({len(r['less_in'])} pairs)" if len(r["less_in"]) > 4 else "")
        lines.append(f"{r['fusion']:<{w}} {r['kind']:<14} {r['more']:>5} {r['less']:>5} {r['same']:>9} "
                     f"{other:>5}  {less or '-'}")
    return "\n".join(lines)


SOURCE_COLUMNS = ("fused", *[f"only {s}" for s in ("promotion", "instruction", "tiling", "algorithm")],
                  "decomposition", "all aligned")


def source_rows(quick: bool = False, seed: int = 0) -> list:
    """Share of output elements whose bits differ from eager, per source.

    For every case of :func:`source_cases` and storage format: ``fused``
    (nothing aligned); ``only <source>``: every other source set to eager's
    choice (``run(..., align=...)``), so only this source (and the
    decomposition, when the fusion decomposes) is left; ``decomposition``:
    all four aligned, composites still decomposed; ``all aligned``: all four
    aligned and decomposition off, which must be 0 (issue 4, property 5).
    Sources interact, so the ``only`` shares need not add up to ``fused``.
    """
    from .execute import SOURCES

    rows = []
    for label, make, kind, fusion, dts, why in source_cases(quick):
        g = make()
        x = zoo.make_inputs(g, kind=kind, seed=seed)
        fo = parse_fusion(fusion)
        fo_nodec = dataclasses.replace(fo, decompose=False)
        for dt in dts:
            e = _bits(_flat(run(g, x, mode="eager", dtype=dt)))

            def share(g=g, x=x, dt=dt, e=e, **kw):
                return float(np.mean(_bits(_flat(run(g, x, mode="fused", dtype=dt, **kw))) != e))

            row = {"case": label, "dtype": get_format(dt).name, "kind": kind, "fusion": fo.name,
                   "why": why, "n": int(e.size), "fused": share(fusion=fo)}
            for s in SOURCES:
                row[f"only {s}"] = share(fusion=fo, align=tuple(q for q in SOURCES if q != s))
            row["decomposition"] = share(fusion=fo, align=SOURCES) if fo.decompose else 0.0
            row["all aligned"] = share(fusion=fo_nodec, align=SOURCES)
            rows.append(row)
    return rows


def format_source_table(rows) -> str:
    """Fixed-width text of :func:`source_rows` (shares in percent)."""
    head = ["case", "S", "inputs", "fusion", *SOURCE_COLUMNS]
    body = [[r["case"], r["dtype"], r["kind"], r["fusion"],
             *[f"{100 * r[c]:.1f}%" for c in SOURCE_COLUMNS]] for r in rows]
    w = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w[i]) if i < 4 else h.rjust(w[i]) for i, h in enumerate(head)),
             "  ".join("-" * x for x in w)]
    for b in body:
        lines.append("  ".join(c.ljust(w[i]) if i < 4 else c.rjust(w[i]) for i, c in enumerate(b)))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# output directory, files, CLI
# ---------------------------------------------------------------------------
_MARKERS = ("report.html", "results.json")


def resolve_out_dir(out, force: bool = False) -> tuple[Path, str]:
    """The directory to write to, and a note.

    A missing or result-free directory is used as is.  One that already
    holds ``report.html`` or ``results.json`` is overwritten only with
    ``force``; otherwise a fresh ``run-NNN`` subfolder is created in it.
    """
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise FileExistsError(f"--out {str(p)!r} exists and is not a directory")
    if not any((p / m).exists() for m in _MARKERS):
        return p, ""
    if force:
        return p, f"--force: overwriting the results in {p}"
    k = 1
    while (p / f"run-{k:03d}").exists():
        k += 1
    q = p / f"run-{k:03d}"
    return q, f"{p} already holds results; writing to the fresh folder {q} (use --force to overwrite)"


def notebooks_dir() -> Path | None:
    """The repository's notebooks/ folder when numlab runs from a checkout."""
    here = Path(__file__).resolve().parent.parent / "notebooks"
    return here if here.is_dir() else None


def _figures(rows, dtypes, extra, chain, models_for_scatter, srows=()):
    from matplotlib.figure import Figure

    from . import plots

    figs = []
    for dt in dtypes:
        fig = Figure(figsize=(9, 4))
        # P99, not max: a max relative error is set by the few outputs near zero
        # (cancellation), e.g. 9.2 for transformer_block in bf16 whatever the mode
        plots.error_bars(rows, dtype=dt, metric="rel_p99", ax=fig.subplots())
        figs.append((f"errors_{dt}.png", f"{dt}: P99 relative error of each mode against fp64 "
                     "(the max is in the table; it is set by outputs near zero)", fig))
        fig = Figure(figsize=(9, 4))
        plots.ulp_shares(rows, dtype=dt, ax=fig.subplots())
        figs.append((f"ulp_{dt}.png", f"{dt}: share of output elements 0, 1, >= 2 ULP from the correctly rounded result", fig))
    for dt, (errs, _b) in chain.items():
        fig = Figure(figsize=(6, 4))
        plots.chain_length(CHAIN_NS[: len(errs['eager'])], errs, dtype=dt, ax=fig.subplots())
        figs.append((f"chain_{dt}.png", f"{dt}: max relative error of a chain of n multiplies, with the a-priori bounds", fig))
    for (model, dt), res in extra["results"].items():
        if model not in models_for_scatter or dt != dtypes[0]:
            continue
        fig = Figure(figsize=(4.5, 4.5))
        plots.error_scatter(_flat(res["reference"]), _flat(res["eager"]), _flat(res["fused"]),
                            dtype=dt, ax=fig.subplots())
        figs.append((f"scatter_{model}_{dt}.png", f"{model} ({dt}): per-element error, eager vs fused", fig))
    if srows:
        fig = Figure(figsize=(9, 0.55 * len(srows) + 1.5))
        plots.source_shares(srows, SOURCE_COLUMNS, ax=fig.subplots())
        figs.append(("sources.png", "where the bits part: share of elements differing from eager "
                     "with only one source left at the code generator's choice", fig))
    return figs


MATRIX_NOTE = (
    "The autofuse preset decomposes composites (FusionOptions.decompose=True) while its reductions "
    "stay library calls, so a decomposed layer norm, rms norm or softmax is stored in S between "
    "blocks where eager's one kernel keeps fp32: there 'fused is not less accurate than eager' "
    "(seed 000, section 3.2) fails. Enabling reduce fusion (--autofuse_enable_pass=reduce) keeps "
    "the decomposition in one fp32 block; the losses left (ratio fused/eager of mean |error| "
    "shown) are small: fewer roundings do not put every element closer to fp64.")


def _matrix_html(mrows) -> str:
    import html

    head = ["fusion", "inputs", "more accurate", "less accurate", "same bits", "other",
            "fused less accurate than eager in"]
    out = ["<h2>Fused vs eager across presets and inputs</h2>",
           "<p class='note'>Per fusion preset and input kind, over every model and format: "
           "how often fused is more or less accurate than eager (mean |error| against fp64), "
           "or has eager's bits. " + html.escape(MATRIX_NOTE) + "</p>",
           "<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
           + "</tr></thead><tbody>"]
    for r in mrows:
        cells = [r["fusion"], r["kind"], r["more"], r["less"], r["same"], r["equal"] + r["nonfinite"],
                 ", ".join(r["less_in"]) or "-"]
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _sources_html(srows) -> str:
    import html

    head = ["case", "S", "inputs", "fusion", *SOURCE_COLUMNS, "what it shows"]
    out = ["<h2>Where the bits part</h2>",
           "<p class='note'>Share of output elements whose bits differ from eager. "
           "<b>only X</b>: the other three sources set to eager's choice "
           "(<code>run(..., align=...)</code>), composites still decomposed when the preset "
           "decomposes; <b>decomposition</b>: all four set; <b>all aligned</b>: all four set "
           "and decomposition off (must be 0). Sources interact, so shares need not add up.</p>",
           "<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
           + "</tr></thead><tbody>"]
    for r in srows:
        cells = [r["case"], r["dtype"], r["kind"], r["fusion"],
                 *[f"{100 * r[c]:.1f}%" for c in SOURCE_COLUMNS], r["why"]]
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def main(out="out", *, force=False, quick=False, fusion=None, kind="normal", seed=0,
         models=None, echo=print) -> dict:
    """Run the demo; returns ``{"dir", "rows", "files", "table", "seconds"}``."""
    from . import __version__
    from .plots import figure_to_png
    from .report import format_table, html_report

    t0 = time.perf_counter()
    dtypes = ("fp16", "bf16")
    if models is None:
        models = QUICK_MODELS if quick else tuple(zoo.MODELS)
    fo = parse_fusion(fusion)
    outdir, note = resolve_out_dir(out, force)
    rows, extra = demo_rows(models, dtypes, fusion=fo, kind=kind, seed=seed, keep_results=True)
    ns = CHAIN_NS[:5] if quick else CHAIN_NS
    chain = {dt: chain_errors(ns, dt, size=1024 if quick else 2048, seed=seed) for dt in dtypes}
    table = format_table(rows)
    echo(f"numlab {__version__} demo: {len(models)} models x {dtypes} x eager / fused / emulated_casts "
         f"vs fp64; fusion {fo.describe()}; inputs {kind}, seed {seed}")
    echo(table)
    better = sum(r["verdict"].startswith("more") for r in rows if r["mode"] == "fused")
    worse = sum(r["verdict"].startswith("less") for r in rows if r["mode"] == "fused")
    same = sum(r["verdict"] == "same bits" for r in rows if r["mode"] == "fused")
    summary = (f"fused vs eager (mean |error| against fp64): more accurate in {better}, less accurate in "
               f"{worse}, bitwise identical in {same} of {better + worse + same + sum(r['verdict'] in ('equally accurate', 'non-finite') for r in rows if r['mode'] == 'fused')} model/format pairs")
    echo(summary)
    for dt, (errs, b) in chain.items():
        ok_e = all(e <= bb for e, bb in zip(errs["eager"], b["eager"], strict=True))
        ok_f = all(e <= bb for e, bb in zip(errs["fused"], b["fused"], strict=True))
        echo(f"chain of n multiplies ({dt}): eager max rel err {errs['eager'][-1]:.3g} at n={ns[-1]} "
             f"(bound n*u_S {b['eager'][-1]:.3g}, {'holds' if ok_e else 'VIOLATED'}); fused "
             f"{errs['fused'][-1]:.3g} (bound u_S + n*u_32 {b['fused'][-1]:.3g}, {'holds' if ok_f else 'VIOLATED'})")

    mkinds = ("normal", "shifted_mean") if quick else MATRIX_KINDS
    mrows = verdict_matrix(models, dtypes, MATRIX_PRESETS, mkinds, seed=seed)
    echo("")
    echo("is fused more or less accurate than eager (mean |error| vs fp64), per preset and input kind, "
         f"over the {len(models)} models x {len(dtypes)} formats:")
    echo(format_verdict_matrix(mrows))
    echo(MATRIX_NOTE)

    srows = source_rows(quick=quick, seed=seed)
    echo("")
    echo("where the bits part: share of output elements whose bits differ from eager "
         "(only X: the other three sources set to eager's choice; decomposition: all four set; "
         "all aligned: all four set and no decomposition)")
    echo(format_source_table(srows))
    bad = [r["case"] for r in srows if r["all aligned"] != 0.0]
    echo("all four sources aligned + no decomposition: " + (
        "bitwise identical to eager in every case" if not bad else f"DIFFERS from eager in {bad}"))

    outdir.mkdir(parents=True, exist_ok=True)
    if note:
        echo(note)
    files = []
    differing = [r["model"] for r in rows
                 if r["mode"] == "fused" and r["dtype"] == dtypes[0] and r["bitwise_eq_eager"] < 1]
    figs = _figures(rows, dtypes, extra, chain, tuple(differing[: 1 if quick else 2]), srows)
    embedded = []
    figdir = outdir / "figures"
    figdir.mkdir(exist_ok=True)
    for fname, caption, fig in figs:
        png = figure_to_png(fig)
        (figdir / fname).write_bytes(png)
        files.append(figdir / fname)
        embedded.append((caption, png))
    keys = ["model", "dtype", "mode", "abs_max", "abs_p99", "rel_max", "rel_p99", "ulp_max", "ulp_p99",
            "ulp0", "ulp1", "ulp_ge2", "bitwise_eq_eager", "nonfinite", "verdict", "fingerprint"]
    with open(outdir / "results.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(keys)
        for r in rows:
            w.writerow([r.get(k) for k in keys])
    files.append(outdir / "results.csv")
    meta = {"numlab": __version__, "fusion": fo.canonical(), "kind": kind, "seed": seed,
            "models": list(models), "dtypes": list(dtypes),
            "chain": {dt: {"n": list(ns), "errors": e, "bounds": b} for dt, (e, b) in chain.items()},
            "sources": srows, "verdicts": mrows}
    (outdir / "results.json").write_text(json.dumps(
        {"meta": meta, "rows": [{k: v for k, v in r.items()} for r in rows]},
        indent=1, default=lambda o: None if isinstance(o, float) and not math.isfinite(o) else str(o)))
    files.append(outdir / "results.json")
    nb = notebooks_dir()
    intro = (f"numlab {__version__}: each model of the zoo runs eager (one hand-written kernel per "
             f"operator, rounding to S after each), fused ({fo.describe()}: fp32 inside a block, one "
             "rounding to S at its outputs) and fused with emulated precision casts (rounding where "
             f"eager would), in fp16 and bf16, on '{kind}' inputs (seed {seed}); every error is against "
             "the fp64 reference on the same S-valued inputs.")
    notes = [summary,
             "0 ULP: the share of elements equal to the correctly rounded fp64 result; bits = eager: "
             "the share bitwise equal to eager's output.",
             "vs eager compares the mean absolute error against fp64.",
             "Relative errors use max(|ref|, smallest normal of S) as the denominator.",
             "Bitwise-identical pairs are real: a composite (layer_norm, softmax, ...) computes in "
             "fp32 inside both ways, and a few fp32 ulps of difference rarely move a value "
             "rounded to fp16/bf16. The table 'Where the bits part' shows each source on cases "
             "chosen to expose it (longer rows, shifted-mean inputs, the autofuse preset, fp32 storage)."]
    (outdir / "report.html").write_text(html_report(
        title="numlab demo: eager vs fused vs emulated casts", intro=intro, rows=rows,
        figures=embedded, plans=extra["plans"], notes=notes,
        extra_html=_matrix_html(mrows) + "\n" + _sources_html(srows)))
    files.append(outdir / "report.html")
    secs = time.perf_counter() - t0
    echo(f"wrote {outdir / 'report.html'} (self-contained), results.csv, results.json and "
         f"{len(figs)} figures in {figdir} ({secs:.1f} s)")
    if nb is not None:
        echo(f"notebooks: {nb} -- start with `jupyter lab {nb / '00_start_here.ipynb'}`")
    else:
        echo("notebooks: notebooks/ in the numlab repository (00_start_here.ipynb first)")
    return {"dir": outdir, "rows": rows, "files": files, "table": table, "seconds": secs}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="eager vs fused vs fp64 on the built-in models (table + figures in out/)",
        description="The zoo in fp16 and bf16, eager vs fused vs emulated casts, each against the "
        "fp64 reference: a table, figures and a self-contained HTML report in DIR. Existing "
        "results are never overwritten: a fresh run-NNN subfolder is used unless --force.",
    )
    p.add_argument("--out", default="out", metavar="DIR", help="output directory (default: out/)")
    p.add_argument("--force", action="store_true", help="overwrite existing results in DIR")
    p.add_argument("--quick", action="store_true", help="4 models and short chains (a few seconds)")
    p.add_argument("--fusion", default="inductor",
                   help="inductor (default), autofuse, off, or an AUTOFUSE_FLAGS string "
                        "(write --fusion='--enable_autofuse=true;--autofuse_enable_pass=reduce')")
    p.add_argument("--kind", default="normal", choices=zoo.KINDS, help="input distribution")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--models", default=None,
                   help=f"comma-separated subset of: {', '.join(zoo.MODELS)}")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    models = None if args.models is None else [m.strip() for m in args.models.split(",") if m.strip()]
    main(args.out, force=args.force, quick=args.quick, fusion=args.fusion, kind=args.kind,
         seed=args.seed, models=models)
    return 0
