"""``numlab demo``: the zoo in fp16 and bf16, eager vs fused vs emulated casts,
each against the fp64 reference.

Prints the verdict first (which model/format pairs are more or less accurate
fused than eager, which claims failed and why), then about one screen of
summary; ``--verbose`` prints every table in full instead (max and P99
absolute and relative error, ULP statistics, share of elements bitwise equal
to eager, the preset matrix, the sources of difference, the block-scaled
claims).  The full tables always go to ``--out`` (default ``out/``):
``report.html`` (self-contained, images embedded), ``results.csv``,
``verdicts.csv``, ``sources.csv``, ``chains.csv``, ``scaled_claims.csv`` (each its header
row first), ``results.json`` (strict JSON: the run's options, every table's columns and row
count, and the rows) and figures (PNG).  The computation is
:mod:`numlab.experiments` (shared with the notebooks); the text is
:mod:`numlab.cli.demo_text`; this module writes the files and prints.

Existing results are never overwritten: when the output directory already
holds a numlab report (``report.html`` or ``results.json``) the demo writes to
a fresh subfolder ``run-NNN`` inside it and says so; ``--force`` overwrites in
place instead.
"""

from __future__ import annotations

import csv
import html
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, plots, report, zoo
from .. import _json as strict_json
from ..experiments import (
    CHAIN_NS,
    MATRIX_FUSIONS,
    MATRIX_INPUT_KINDS,
    MATRIX_NOTE,
    QUICK_MODELS,
    SCALED_MODEL,
    SOURCE_COLUMNS,
    chain_errors,
    demo_rows,
    flat_outputs,
    margin_legend,
    scaled_claims,
    source_rows,
    verdict_matrix,
)
from ..fusion import FusionOptions
from ..plots import figure_to_png
from ..report import format_table, fresh_out_dir, html_report
from .demo_text import (
    files_line,
    fp8_note,
    full_lines,
    readme_summary,
    replace_readme_summary,
    summary_lines,
    verdict_lines,
    wrapped,
)
from .options import add_shared, models_type

__all__ = ["add_parser", "resolve_out_dir", "main", "notebooks_dir", "DemoConfig", "demo_config",
           "readme_block", "update_readme"]

FMTS = ("fp16", "bf16")

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
    return fresh_out_dir(out, force, _MARKERS, "the results", "results")


def notebooks_dir() -> Path | None:
    """The repository's notebooks/ folder when numlab runs from a checkout."""
    here = Path(__file__).resolve().parents[3] / "notebooks"
    return here if here.is_dir() else None


def _figures(rows, fmts, extra, chain, models_for_scatter, srows=()):

    figs = []
    for fmt in fmts:
        fig = plots.figure(figsize=(9, 4))
        # P99, not max: a max relative error is set by the few outputs near zero
        # (cancellation), e.g. 9.2 for transformer_block in bf16 whatever the mode
        plots.error_bars(rows, fmt=fmt, metric="rel_p99", ax=fig.subplots())
        figs.append((f"errors_{fmt}.png", f"{fmt}: P99 relative error of each mode against fp64 "
                     "(the max is in the table; it is set by outputs near zero)", fig))
        fig = plots.figure(figsize=(9, 4))
        plots.ulp_shares(rows, fmt=fmt, ax=fig.subplots())
        figs.append((f"ulp_{fmt}.png", f"{fmt}: share of output elements 0, 1, >= 2 ULP from the correctly rounded result", fig))
    for fmt, (errs, _b) in chain.items():
        fig = plots.figure(figsize=(6, 4))
        plots.chain_length(CHAIN_NS[: len(errs['eager'])], errs, fmt=fmt, ax=fig.subplots())
        figs.append((f"chain_{fmt}.png", f"{fmt}: max relative error of a chain of n multiplies, with the a-priori bounds", fig))
    for (model, fmt), res in extra["results"].items():
        if model not in models_for_scatter or fmt != fmts[0]:
            continue
        fig = plots.figure(figsize=(4.5, 4.5))
        plots.error_scatter(flat_outputs(res["reference"]), flat_outputs(res["eager"]), flat_outputs(res["fused"]),
                            fmt=fmt, ax=fig.subplots())
        figs.append((f"scatter_{model}_{fmt}.png", f"{model} ({fmt}): per-element error, eager vs fused", fig))
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


def _scaled_html(crows, note: str = "") -> str:
    head = ["claim", "S", "verdict", "violating trials", "trials", "worst margin", "margin unit", "worst trial",
            "why undecided"]
    out = [f"<h2>Block-scaled fp8: {html.escape(SCALED_MODEL)}</h2>",
           f"<p class='note'>{html.escape(_SCALED_TITLE)}</p>",
           "<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in crows:
        trial = "-" if r["worst_trial"] is None else f"{r['worst_trial']} ({r['worst_kind']})"
        cells = [r["claim"], r["fmt"], r["verdict"], r["violations"], r["trials"], f"{r['worst_margin']:.3g}",
                 r["margin_unit"], trial, r["why"]]
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    out.append("<ul class='note'>" + "".join(f"<li><b>{html.escape(t)}</b>: {html.escape(d)}</li>"
                                             for t, d in margin_legend(r["claim"] for r in crows)) + "</ul>")
    if note:
        out.append(f"<p class='note'>{html.escape(note)}</p>")
    return "\n".join(out)


def _chain_html(res) -> str:
    head = ["S", "n", "eager max rel err", "bound n*u_S", "fused max rel err", "bound u_S + n*u_32"]
    out = ["<h2>Chain of n multiplies</h2>",
           "<p class='note'>Max relative error of y = x * w1 * ... * wn against fp64, with the a-priori "
           "bounds.</p>",
           "<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for fmt, (errs, b) in res["chain"].items():
        for i, n in enumerate(res["config"].chain_ns[: len(errs["eager"])]):
            cells = [fmt, n, f"{errs['eager'][i]:.3g}", f"{b['eager'][i]:.3g}", f"{errs['fused'][i]:.3g}",
                     f"{b['fused'][i]:.3g}"]
            out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


@dataclass(frozen=True)
class DemoConfig:
    """What one demo run covers: ``models``, storage formats ``fmts``, the
    chain lengths ``chain_ns`` and vector length ``chain_size``, the input
    kinds of the preset matrix ``matrix_kinds``, and the random ``trials`` of
    the block-scaled claims (cycling over ``claim_kinds``)."""

    quick: bool
    models: tuple
    fmts: tuple = FMTS
    chain_ns: tuple = CHAIN_NS
    chain_size: int = 2048
    matrix_kinds: tuple = MATRIX_INPUT_KINDS
    trials: int = 20
    claim_kinds: tuple = ("normal", "heavy_tailed")


def demo_config(quick: bool = False, models=None) -> DemoConfig:
    """The configuration of ``numlab demo`` (``--quick``, ``--models``)."""
    if models is None:
        models = QUICK_MODELS if quick else tuple(zoo.MODELS)
    if quick:
        return DemoConfig(True, tuple(models), chain_ns=CHAIN_NS[:5], chain_size=1024,
                          matrix_kinds=("normal", "shifted_mean"), trials=4)
    return DemoConfig(False, tuple(models))


def _compute(cfg: DemoConfig, fo: FusionOptions, kind: str, seed: int) -> dict:
    """Every number the demo shows (numlab.experiments)."""
    rows, extra = demo_rows(cfg.models, cfg.fmts, fusion=fo, kind=kind, seed=seed, keep_results=True)
    chain = {fmt: chain_errors(cfg.chain_ns, fmt, size=cfg.chain_size, seed=seed) for fmt in cfg.fmts}
    chain_ok = {fmt: {m: all(e <= bb for e, bb in zip(errs[m], b[m], strict=True)) for m in ("eager", "fused")}
                for fmt, (errs, b) in chain.items()}
    return {"config": cfg, "fusion": fo.spec, "kind": kind, "seed": seed, "rows": rows, "extra": extra,
            "chain": chain, "chain_ok": chain_ok,
            "verdicts": verdict_matrix(cfg.models, cfg.fmts, MATRIX_FUSIONS, cfg.matrix_kinds, seed=seed),
            "sources": source_rows(quick=cfg.quick, seed=seed),
            "scaled_claims": scaled_claims(cfg.fmts, trials=cfg.trials, fusion=fo, kinds=cfg.claim_kinds,
                                           seed=seed)}


def _write_csv(path: Path, keys, rows) -> Path:
    """``rows`` (dicts) as CSV: the header line first, then one line per row."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(keys)
        for r in rows:
            w.writerow(["; ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
                        for v in (r.get(k) for k in keys)])
    return path


_ROW_KEYS = ["model", "fmt", "mode", "abs_max", "abs_p99", "abs_mean", "rel_max", "rel_p99", "ulp_max",
             "ulp_p99", "ulp0", "ulp1", "ulp_ge2", "bitwise_eq_eager", "nonfinite", "verdict", "fingerprint"]


def _write_tables(outdir: Path, res: dict) -> list[Path]:
    """Every table of the demo as CSV (header first) and results.json (all of
    it, with the settings)."""
    cfg = res["config"]
    chain_rows = [{"fmt": fmt, "mode": m, "n": n, "max_rel_error": e, "bound": bb}
                  for fmt, (errs, b) in res["chain"].items() for m in ("eager", "fused")
                  for n, e, bb in zip(cfg.chain_ns, errs[m], b[m], strict=False)]
    tables = [
        ("results.csv", _ROW_KEYS, res["rows"]),
        ("verdicts.csv", ["fusion", "kind", "more", "less", "same", "equal", "nonfinite", "less_in"],
         res["verdicts"]),
        ("sources.csv", ["case", "fmt", "kind", "fusion", *SOURCE_COLUMNS, "n", "why"], res["sources"]),
        ("chains.csv", ["fmt", "mode", "n", "max_rel_error", "bound"], chain_rows),
        ("scaled_claims.csv", ["claim", "fmt", "verdict", "violations", "undecided", "trials", "worst_margin",
                               "margin_unit", "worst_trial", "worst_kind", "why"], res["scaled_claims"]),
    ]
    files = [_write_csv(outdir / name, keys, rows) for name, keys, rows in tables]
    meta = {"numlab": __version__, "fusion": res["fusion"], "kind": res["kind"], "seed": res["seed"],
            "models": list(cfg.models), "fmts": list(cfg.fmts), "trials": cfg.trials,
            "chain": {fmt: {"n": list(cfg.chain_ns), "errors": e, "bounds": b} for fmt, (e, b) in res["chain"].items()},
            "sources": res["sources"], "verdicts": res["verdicts"], "scaled_claims": res["scaled_claims"],
            "verdict": res["verdict"]}
    described = {name: {"columns": list(keys), "row_count": len(rows)} for name, keys, rows in tables}
    (outdir / "results.json").write_text(strict_json.dumps(
        {"file": "results.csv", "columns": _ROW_KEYS, "row_count": len(res["rows"]), "tables": described,
         "meta": meta, "rows": [dict(r) for r in res["rows"]]}, indent=1, default=str))
    return [*files, outdir / "results.json"]


def _write_report(outdir: Path, res: dict, fo: FusionOptions) -> list[Path]:
    """The figures and the self-contained report.html."""
    cfg, rows, fmts = res["config"], res["rows"], res["config"].fmts
    fused = [r for r in rows if r["mode"] == "fused"]
    differing = [r["model"] for r in fused if r["fmt"] == fmts[0] and r["bitwise_eq_eager"] < 1]
    figs = _figures(rows, fmts, res["extra"], res["chain"], tuple(differing[: 1 if cfg.quick else 2]),
                    res["sources"])
    figdir = outdir / "figures"
    figdir.mkdir(exist_ok=True)
    files, embedded = [], []
    for fname, caption, fig in figs:
        png = figure_to_png(fig)
        (figdir / fname).write_bytes(png)
        files.append(figdir / fname)
        embedded.append((caption, png))
    intro = (f"numlab {__version__}: each model of the zoo runs eager (one hand-written kernel per "
             f"operator, rounding to S after each), fused ({fo.describe()}: fp32 inside a block, one "
             "rounding to S at its outputs) and fused with emulated precision casts (rounding where "
             f"eager would), in fp16 and bf16, on '{res['kind']}' inputs (seed {res['seed']}); every error is "
             "against the fp64 reference on the same S-valued inputs.")
    notes = [*(f"{t}: {d}" for t, d in report.LEGEND),
             "Bitwise-identical pairs are real: a composite (layer_norm, softmax, ...) computes in "
             "fp32 inside both ways, and a few fp32 ulps of difference rarely move a value "
             "rounded to fp16/bf16. The table 'Where the bits part' shows each source on cases "
             "chosen to expose it (longer rows, shifted-mean inputs, the autofuse preset, fp32 storage)."]
    (outdir / "report.html").write_text(html_report(
        title="numlab demo: eager vs fused vs emulated casts", intro=intro, rows=rows,
        figures=embedded, plans=res["extra"]["plans"], notes=notes, specs={"fusion": fo.spec},
        lead=res["verdict"],
        extra_html="\n".join([_chain_html(res), _matrix_html(res["verdicts"]), _sources_html(res["sources"]),
                              _scaled_html(res["scaled_claims"], fp8_note(res))])))
    res["n_figures"] = len(figs)
    return [*files, outdir / "report.html"]


def main(out="out", *, force=False, quick=False, fusion=None, kind="normal", seed=0,
         models=None, echo=print, width=None, plain=None, verbose=False) -> dict:
    """Run the demo; returns a dict: ``dir``, ``rows``, ``files``, ``table``,
    ``seconds``, ``config`` (:class:`DemoConfig`), ``fusion``, ``kind``,
    ``seed``, ``chain``, ``chain_ok``, ``verdicts``, ``sources``,
    ``scaled_claims``, ``verdict`` (the verdict lines) and ``lines`` (every
    line printed).

    Computes everything (numlab.experiments), writes figures, CSV, JSON and
    the HTML report, and only then prints, so a closed stdout
    (``numlab demo | head``) cannot lose the results: the verdict first, then
    a summary of about one screen (``verbose``: every table in full, with
    its legend), then where the full tables are.  Tables fit ``width``
    (default the terminal's); prose is wrapped."""
    t0 = time.perf_counter()
    cfg = demo_config(quick, models)
    fo = FusionOptions.parse(fusion)
    outdir, note = resolve_out_dir(out, force)
    res = _compute(cfg, fo, kind, seed)
    res["verdict"] = verdict_lines(res)

    # files first: a closed pipe must not lose them
    outdir.mkdir(parents=True, exist_ok=True)
    res["dir"] = outdir
    files = _write_tables(outdir, res)
    files += _write_report(outdir, res, fo)
    res["files"] = files
    res["seconds"] = time.perf_counter() - t0

    # then print
    W = report.terminal_width() if width is None else width
    plain = report.is_plain() if plain is None else plain
    res["table"] = format_table(res["rows"], width=W, plain=plain)
    n = len(cfg.models)
    say = [report.wrap(f"numlab {__version__} demo{' --quick' if quick else ''}: {n} model{'s' * (n != 1)} x "
                       f"{', '.join(cfg.fmts)} x eager / fused / emulated_casts vs fp64; fusion {fo.spec} "
                       f"({fo.describe()}); inputs {kind}, seed {seed}", W),
           *wrapped(res["verdict"], W)]
    say += full_lines(res, W, plain, res["table"]) if verbose else summary_lines(res, W, plain)
    say.append("")
    if note:
        say.append(report.wrap(note, W))
    say.append(report.wrap(files_line(res, verbose) + f" ({res['seconds']:.1f} s)", W))
    nb = notebooks_dir()
    start = f"`jupyter lab {nb / '00_start_here.ipynb'}`" if nb is not None else \
        "notebooks/00_start_here.ipynb in the numlab repository"
    say.append(report.wrap(f"notebooks: start with {start}", W))
    res["lines"] = "\n".join(say).split("\n")
    for line in say:
        echo(line)
    res.pop("extra")
    return res


def readme_block(quick_result: dict | None = None) -> str:
    """The README's demo summary (:func:`numlab.cli.demo_text.readme_summary`):
    from ``quick_result`` (what ``main(quick=True)`` returned; None: run it
    here, silently, into a temporary folder) and the table rows of the full
    demo's configuration under the same fusion, inputs and seed."""
    if quick_result is None:
        with tempfile.TemporaryDirectory() as tmp:
            quick_result = main(Path(tmp) / "out", quick=True, echo=lambda _line: None, width=80, plain=True)
    full = demo_config(False)
    rows, _ = demo_rows(full.models, full.fmts, fusion=quick_result["fusion"], kind=quick_result["kind"],
                        seed=quick_result["seed"])
    return readme_summary(quick_result, rows, full.models)


def update_readme(path, quick_result: dict | None = None) -> bool:
    """Rewrite the demo summary between the markers of the README at
    ``path`` (:func:`readme_block`); True when the text changed."""
    p = Path(path)
    old = p.read_text(encoding="utf-8")
    new = replace_readme_summary(old, readme_block(quick_result))
    if new != old:
        p.write_text(new, encoding="utf-8")
    return new != old


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="eager vs fused vs fp64 on the built-in models (table + figures in out/)",
        description="The zoo in fp16 and bf16, eager vs fused vs emulated casts, each against the "
        "fp64 reference. Prints the verdict first, then a one-screen summary (--verbose: every "
        "table); the full tables, figures and a self-contained HTML report go to DIR. Existing "
        "results are never overwritten: a fresh run-NNN subfolder is used unless --force.",
    )
    add_shared(p, fusion="", inputs="normal", seed=0, out="out",
               force="(default: a fresh run-NNN subfolder)")
    p.add_argument("--quick", action="store_true",
                   help=f"{len(QUICK_MODELS)} models, short chains, few claim trials (a few seconds)")
    p.add_argument("--verbose", action="store_true",
                   help="print every table in full after the verdict (they are always in DIR/report.html "
                        "and the CSV files in DIR)")
    p.add_argument("--models", default=None, metavar="A,B", type=models_type,
                   help="demo runs several models, so it takes --models where one-model commands take "
                        "a MODEL positional: a comma-separated subset of the zoo models (default all): "
                        f"{', '.join(zoo.MODELS)}")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    models = args.models  # a list (options.models_type) or None
    main(args.out, force=args.force, quick=args.quick, fusion=args.fusion, kind=args.inputs,
         seed=args.seed, models=models, verbose=args.verbose)
    return 0
