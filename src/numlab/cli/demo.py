"""``numlab demo``: the zoo in fp16 and bf16, eager vs fused vs emulated casts,
each against the fp64 reference.

Prints a table (max and P99 absolute and relative error, ULP statistics,
share of elements bitwise equal to eager, which mode is more accurate) and
writes figures (PNG), ``results.csv`` (header row first), its JSON sidecar
``results.json`` (the run's options and the same rows) and a self-contained
``report.html`` (images embedded) to ``--out`` (default ``out/``).  The
computation is :mod:`numlab.experiments` (shared with the notebooks); this
module writes the files and prints.

Existing results are never overwritten: when the output directory already
holds a numlab report (``report.html`` or ``results.json``) the demo writes to
a fresh subfolder ``run-NNN`` inside it and says so; ``--force`` overwrites in
place instead.
"""

from __future__ import annotations

import csv
import html
import time
from pathlib import Path

from .. import __version__, plots, report, zoo
from .. import _json as strict_json
from ..experiments import (
    CHAIN_NS,
    MATRIX_KINDS,
    MATRIX_NOTE,
    MATRIX_PRESETS,
    QUICK_MODELS,
    SCALED_MODEL,
    SOURCE_COLUMNS,
    chain_errors,
    demo_rows,
    flat_outputs,
    format_scaled_claims,
    format_source_table,
    format_verdict_matrix,
    scaled_claims,
    source_rows,
    verdict_matrix,
)
from ..fusion import FusionOptions
from ..plots import figure_to_png
from ..report import format_table, html_report
from .options import add_shared, models_type

__all__ = ["add_parser", "resolve_out_dir", "main", "notebooks_dir"]

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
    here = Path(__file__).resolve().parents[3] / "notebooks"
    return here if here.is_dir() else None


def _figures(rows, fmts, extra, chain, models_for_scatter, srows=()):

    figs = []
    for dt in fmts:
        fig = plots.figure(figsize=(9, 4))
        # P99, not max: a max relative error is set by the few outputs near zero
        # (cancellation), e.g. 9.2 for transformer_block in bf16 whatever the mode
        plots.error_bars(rows, fmt=dt, metric="rel_p99", ax=fig.subplots())
        figs.append((f"errors_{dt}.png", f"{dt}: P99 relative error of each mode against fp64 "
                     "(the max is in the table; it is set by outputs near zero)", fig))
        fig = plots.figure(figsize=(9, 4))
        plots.ulp_shares(rows, fmt=dt, ax=fig.subplots())
        figs.append((f"ulp_{dt}.png", f"{dt}: share of output elements 0, 1, >= 2 ULP from the correctly rounded result", fig))
    for dt, (errs, _b) in chain.items():
        fig = plots.figure(figsize=(6, 4))
        plots.chain_length(CHAIN_NS[: len(errs['eager'])], errs, fmt=dt, ax=fig.subplots())
        figs.append((f"chain_{dt}.png", f"{dt}: max relative error of a chain of n multiplies, with the a-priori bounds", fig))
    for (model, dt), res in extra["results"].items():
        if model not in models_for_scatter or dt != fmts[0]:
            continue
        fig = plots.figure(figsize=(4.5, 4.5))
        plots.error_scatter(flat_outputs(res["reference"]), flat_outputs(res["eager"]), flat_outputs(res["fused"]),
                            fmt=dt, ax=fig.subplots())
        figs.append((f"scatter_{model}_{dt}.png", f"{model} ({dt}): per-element error, eager vs fused", fig))
    if srows:
        fig = plots.figure(figsize=(9, 0.55 * len(srows) + 1.5))
        plots.source_shares(srows, SOURCE_COLUMNS, ax=fig.subplots())
        figs.append(("sources.png", "where the bits part: share of elements differing from eager "
                     "with only one source left at the code generator's choice", fig))
    return figs


def _matrix_html(mrows) -> str:
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
        cells = [r["case"], r["fmt"], r["kind"], r["fusion"],
                 *[f"{100 * r[c]:.1f}%" for c in SOURCE_COLUMNS], r["why"]]
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


_SCALED_TITLE = (f"block-scaled fp8 ({SCALED_MODEL}: DeepSeek-V3 1x128 / 128x128 e4m3 blocks): is fused with "
                 "per-block scaling no worse than eager with it? (numlab check, random trials on normal and "
                 "heavy-tailed inputs)")


def _scaled_html(crows) -> str:
    out = [f"<h2>Block-scaled fp8: {html.escape(SCALED_MODEL)}</h2>",
           f"<p class='note'>{html.escape(_SCALED_TITLE)}</p>",
           "<table><thead><tr><th>claim</th><th>S</th><th>verdict</th><th>violating trials</th><th>trials</th>"
           "<th>worst margin</th><th>why undecided</th></tr></thead><tbody>"]
    for r in crows:
        cells = [r["claim"], r["fmt"], r["verdict"], r["violations"], r["trials"], f"{r['worst_margin']:.3g}", r["why"]]
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def main(out="out", *, force=False, quick=False, fusion=None, kind="normal", seed=0,
         models=None, echo=print, width=None, plain=None) -> dict:
    """Run the demo; returns ``{"dir", "rows", "files", "table", "seconds"}``.

    Computes everything (numlab.experiments), writes figures, CSV, JSON and
    the HTML report, and only then prints (tables fitted to ``width``, default
    the terminal's; prose wrapped), so a closed stdout (``numlab demo | head``)
    cannot lose the results.  Longer than 100 lines because it is the demo's
    script, read top to bottom."""
    t0 = time.perf_counter()
    fmts = ("fp16", "bf16")
    if models is None:
        models = QUICK_MODELS if quick else tuple(zoo.MODELS)
    fo = FusionOptions.parse(fusion)
    outdir, note = resolve_out_dir(out, force)
    rows, extra = demo_rows(models, fmts, fusion=fo, kind=kind, seed=seed, keep_results=True)
    ns = CHAIN_NS[:5] if quick else CHAIN_NS
    chain = {dt: chain_errors(ns, dt, size=1024 if quick else 2048, seed=seed) for dt in fmts}
    mkinds = ("normal", "shifted_mean") if quick else MATRIX_KINDS
    mrows = verdict_matrix(models, fmts, MATRIX_PRESETS, mkinds, seed=seed)
    srows = source_rows(quick=quick, seed=seed)
    crows = scaled_claims(fmts, trials=4 if quick else 20, fusion=fo, seed=seed)

    fused = [r for r in rows if r["mode"] == "fused"]
    better = sum(r["verdict"].startswith("more") for r in fused)
    worse = sum(r["verdict"].startswith("less") for r in fused)
    same = sum(r["verdict"] == "same bits" for r in fused)
    summary = (f"fused vs eager (column 'mean abs': mean |error| against fp64): more accurate in "
               f"{better}, less accurate in {worse}, bitwise identical in {same} of {len(fused)} "
               "model/format pairs")
    chain_lines = []
    for dt, (errs, b) in chain.items():
        ok_e = all(e <= bb for e, bb in zip(errs["eager"], b["eager"], strict=True))
        ok_f = all(e <= bb for e, bb in zip(errs["fused"], b["fused"], strict=True))
        chain_lines.append(
            f"chain of n multiplies ({dt}): eager max rel err {errs['eager'][-1]:.3g} at n={ns[-1]} "
            f"(bound n*u_S {b['eager'][-1]:.3g}, {'holds' if ok_e else 'VIOLATED'}); fused "
            f"{errs['fused'][-1]:.3g} (bound u_S + n*u_32 {b['fused'][-1]:.3g}, "
            f"{'holds' if ok_f else 'VIOLATED'})")
    bad = [r["case"] for r in srows if r["all aligned"] != 0.0]

    # files first: a closed pipe must not lose them
    outdir.mkdir(parents=True, exist_ok=True)
    files = []
    differing = [r["model"] for r in fused if r["fmt"] == fmts[0] and r["bitwise_eq_eager"] < 1]
    figs = _figures(rows, fmts, extra, chain, tuple(differing[: 1 if quick else 2]), srows)
    embedded = []
    figdir = outdir / "figures"
    figdir.mkdir(exist_ok=True)
    for fname, caption, fig in figs:
        png = figure_to_png(fig)
        (figdir / fname).write_bytes(png)
        files.append(figdir / fname)
        embedded.append((caption, png))
    keys = ["model", "fmt", "mode", "abs_max", "abs_p99", "abs_mean", "rel_max", "rel_p99", "ulp_max",
            "ulp_p99", "ulp0", "ulp1", "ulp_ge2", "bitwise_eq_eager", "nonfinite", "verdict", "fingerprint"]
    with open(outdir / "results.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(keys)
        for r in rows:
            w.writerow([r.get(k) for k in keys])
    files.append(outdir / "results.csv")
    meta = {"numlab": __version__, "fusion": fo.canonical(), "fusion_spec": fo.spec, "kind": kind, "seed": seed,
            "models": list(models), "fmts": list(fmts),
            "chain": {dt: {"n": list(ns), "errors": e, "bounds": b} for dt, (e, b) in chain.items()},
            "sources": srows, "verdicts": mrows, "scaled_claims": crows}
    (outdir / "results.json").write_text(strict_json.dumps(
        {"file": "results.csv", "columns": keys, "row_count": len(rows), "meta": meta,
         "rows": [{k: v for k, v in r.items()} for r in rows]}, indent=1, default=str))
    files.append(outdir / "results.json")
    intro = (f"numlab {__version__}: each model of the zoo runs eager (one hand-written kernel per "
             f"operator, rounding to S after each), fused ({fo.describe()}: fp32 inside a block, one "
             "rounding to S at its outputs) and fused with emulated precision casts (rounding where "
             f"eager would), in fp16 and bf16, on '{kind}' inputs (seed {seed}); every error is against "
             "the fp64 reference on the same S-valued inputs.")
    notes = [summary, *(f"{t}: {d}" for t, d in report.LEGEND),
             "Bitwise-identical pairs are real: a composite (layer_norm, softmax, ...) computes in "
             "fp32 inside both ways, and a few fp32 ulps of difference rarely move a value "
             "rounded to fp16/bf16. The table 'Where the bits part' shows each source on cases "
             "chosen to expose it (longer rows, shifted-mean inputs, the autofuse preset, fp32 storage)."]
    (outdir / "report.html").write_text(html_report(
        title="numlab demo: eager vs fused vs emulated casts", intro=intro, rows=rows,
        figures=embedded, plans=extra["plans"], notes=notes, specs={"fusion": fo.spec},
        extra_html=_matrix_html(mrows) + "\n" + _sources_html(srows) + "\n" + _scaled_html(crows)))
    files.append(outdir / "report.html")
    secs = time.perf_counter() - t0

    # then print
    W = report.terminal_width() if width is None else width
    table = format_table(rows, width=W, plain=plain)
    say = [
        report.wrap(f"numlab {__version__} demo: {len(models)} models x {fmts} x eager / fused / emulated_casts "
             f"vs fp64; fusion {fo.spec} ({fo.describe()}); inputs {kind}, seed {seed}", W),
        table, report.wrap(summary, W), *(report.wrap(x, W) for x in chain_lines), "",
        report.wrap("is fused more or less accurate than eager (mean |error| vs fp64), per preset and input "
             f"kind, over the {len(models)} models x {len(fmts)} formats:", W),
        format_verdict_matrix(mrows, width=W, plain=plain), report.wrap(MATRIX_NOTE, W), "",
        report.wrap("where the bits part: share of output elements whose bits differ from eager", W),
        format_source_table(srows, width=W, plain=plain),
        report.wrap("all four sources aligned + no decomposition: " + (
            "bitwise identical to eager in every case" if not bad else f"DIFFERS from eager in {bad}"), W),
        "", report.wrap(_SCALED_TITLE, W), format_scaled_claims(crows, width=W, plain=plain),
    ]
    if note:
        say.append(report.wrap(note, W))
    say.append(report.wrap(f"wrote {outdir / 'report.html'} (self-contained), results.csv, results.json and "
                    f"{len(figs)} figures in {figdir} ({secs:.1f} s)", W))
    nb = notebooks_dir()
    if nb is not None:
        say.append(report.wrap(f"notebooks: {nb} -- start with `jupyter lab {nb / '00_start_here.ipynb'}`", W))
    else:
        say.append(report.wrap("notebooks: notebooks/ in the numlab repository (00_start_here.ipynb first)", W))
    for line in say:
        echo(line)
    return {"dir": outdir, "rows": rows, "files": files, "table": table, "seconds": secs}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="eager vs fused vs fp64 on the built-in models (table + figures in out/)",
        description="The zoo in fp16 and bf16, eager vs fused vs emulated casts, each against the "
        "fp64 reference: a table, figures and a self-contained HTML report in DIR. Existing "
        "results are never overwritten: a fresh run-NNN subfolder is used unless --force.",
    )
    add_shared(p, fusion="", inputs="normal", seed=0, out="out",
               force="(default: a fresh run-NNN subfolder)")
    p.add_argument("--quick", action="store_true", help="4 models and short chains (a few seconds)")
    p.add_argument("--models", default=None, metavar="A,B", type=models_type,
                   help="demo runs several models, so it takes --models where one-model commands take "
                        "a MODEL positional: a comma-separated subset of the zoo models (default all): "
                        f"{', '.join(zoo.MODELS)}")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    models = args.models  # a list (options.models_type) or None
    main(args.out, force=args.force, quick=args.quick, fusion=args.fusion, kind=args.inputs,
         seed=args.seed, models=models)
    return 0
