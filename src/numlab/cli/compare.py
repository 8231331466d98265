"""``numlab compare -gp GOLDEN -mp MINE -o OUT``: dump compare with msit's and
msprobe's columns (docs/compare.md).

Same options as ``msit llm compare`` (``-gp/--golden-path``,
``-mp/--my-path``, ``-o/--output``, also spelled ``--out`` as in every
numlab command; ``--fmt`` as everywhere): each path is a numlab, msprobe
(``dump.json``) or msit (``model_tree.json``) dump directory, or a single
``.npy`` file; ``-o`` is a ``.csv`` file or a directory that gets
``numlab_cmp_report_<timestamp>.csv``, header row first, with its JSON
sidecar (the same name ending ``.json``: flavour, thresholds, options,
versions; docs/files.md).  ``--graph module:function --inputs
FILE`` replaces ``-gp``: numlab runs your function (fp64 reference or eager)
on your inputs as the golden side.  ``--flavor msit|msprobe-8.3|msprobe-26``
writes a tool's own columns.  Exit status: 0 every compared row passes, 1 a
row fails, 2 nothing was compared or a file is missing/corrupt/fails its
SHA-256 check (``--allow-failures``: 0 except when nothing was compared).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..compare.compare import DEFAULT_CHUNK, Thresholds, compare_dumps, report_path
from ..compare.flavors import FLAVORS
from ..compare.layouts import load_any
from ..compare.table import format_number
from ..execute import run
from ..formats import Format, get_format
from ..report import Column, render_table, wrap_lines
from .options import add_shared, fmt_type, graph_and_inputs

ULP_WARN = 16.0
"""Default ``--ulp-warn``: a row that passes msprobe's thresholds with a
larger max ULP error is named in a warning (``--max-ulp`` makes it fail)."""

EXIT_OK, EXIT_FAIL, EXIT_UNDECIDED = 0, 1, 2
"""Exit status: every compared row passes / some row fails / nothing was
compared, or a file is missing, corrupt or fails its SHA-256 check."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="msit-style dump compare: -gp GOLDEN -mp MINE -o OUT",
        description="Compare two dumps node by node with msit's and msprobe's columns "
                    "(cosine, relative/absolute errors, KL, Euclidean distances, "
                    "one-/five-thousandths error ratios, accuracy reached or not) plus ULP "
                    "statistics, and report the first divergence.",
        epilog="Exit status: 0 every compared row passes; 1 a row fails; 2 nothing was compared, "
               "or a file is missing, corrupt or fails its SHA-256 check (--allow-failures: 0 "
               "except when nothing was compared). --flavor writes a tool's own columns; "
               "differences: docs/compare.md.",
    )
    p.add_argument("-gp", "--golden-path", default=None, dest="golden_path",
                   help="golden (bench) dump: a numlab, msprobe or msit dump directory or a .npy file "
                        "(or give --graph to compute the golden side with numlab)")
    p.add_argument("-mp", "--my-path", required=True, dest="my_path",
                   help="dump to check: a numlab, msprobe or msit dump directory or a .npy file")
    add_shared(p, graph="your function (module:function, traced on the --inputs arrays) or a model: "
                        "numlab runs it in --golden-mode on the --inputs and compares that with -mp, "
                        "node by node by name (instead of -gp)",
               size="(with --graph)", inputs="normal", inputs_files=True, seed=0)
    p.add_argument("--golden-mode", default="reference", choices=("reference", "eager"),
                   help="with --graph: the golden side is numlab's fp64 reference (default) or its "
                        "eager run in --fmt")
    p.add_argument("-o", "--out", "--output", dest="output", default=None,
                   help="report .csv file, or a directory for numlab_cmp_report_<time>.csv; the "
                        "run's description goes to the same name ending .json (default: no file, "
                        "print only)")
    p.add_argument("--force", action="store_true", help="overwrite an existing report file (and its .json)")
    p.add_argument("--fmt", default=None, metavar="FMT", type=fmt_type(),
                   help="storage format S for the ULP columns (default: my dump's dtype)")
    p.add_argument("--cosine", type=float, default=Thresholds.cosine,
                   help="msprobe COS_THRESHOLD (default 0.99)")
    p.add_argument("--max-abs-err", type=float, default=Thresholds.max_abs_err,
                   help="msprobe MAX_ABS_ERR_THRESHOLD (default 0.001)")
    p.add_argument("--max-rel-err", type=float, default=None,
                   help="also fail rows whose msit max_relative_error exceeds this")
    p.add_argument("--max-ulp", type=float, default=None,
                   help="also fail rows whose max ULP error exceeds this")
    p.add_argument("--chunk", type=int, default=DEFAULT_CHUNK,
                   help=f"elements per streaming chunk (default {DEFAULT_CHUNK})")
    p.add_argument("--flavor", default="exact", choices=FLAVORS,
                   help="columns of the CSV: exact (default: numlab's metrics exactly in float64, "
                        "said in the .json sidecar) or a tool's own header and formulas: msit "
                        "(8.2.0, torch float32), msprobe-8.3 (8.3.3), msprobe-26 (26.2.0); pass/fail "
                        "and the exit status stay numlab's exact rule (docs/compare.md)")
    p.add_argument("--no-verify", action="store_true", help="skip SHA-256 verification")
    p.add_argument("--rows", type=int, default=60, help="rows of the printed table (default 60)")
    p.add_argument("--allow-failures", action="store_true",
                   help="exit 0 even when rows fail the thresholds or files are missing, corrupt "
                        "or fail their SHA-256 check (they are still reported); a compare that "
                        "compared nothing still exits 2")
    p.add_argument("--ulp-warn", type=float, default=ULP_WARN, metavar="N",
                   help=f"warn about rows that pass the thresholds with a max ULP error above N "
                        f"(default {ULP_WARN:g}; the thresholds are absolute and miss errors on "
                        f"small values)")
    p.set_defaults(func=main)


COMPARE_LEGEND = (
    ("#", "row number (the CSV's index)"),
    ("node, op, block", "the node (full name), its operator and the fused block it is in"),
    ("cosine", "cosine similarity of golden and mine"),
    ("max rel, max abs", "largest relative and absolute difference (msit's max_relative_error, "
                         "msprobe's MaxAbsErr)"),
    ("max ULP", "largest distance in ULPs of the storage format"),
    ("bits =", "share of elements bitwise equal"),
    ("acc", "accuracy reached (msprobe): Yes, No, or Unmatched (shapes differ)"),
    ("origin", "of a failing row: introduced (its inputs pass: the error starts here), carried (an "
               "input fails too), first_failing (no graph edges known: the first failing row)"),
    ("reason", "why the row could not be compared, or notes (full text also in the CSV)"),
)


def compare_table(rows, max_rows: int | None = 60, *, width=None, plain=None) -> str:
    """The main columns of a compare report as a terminal table: full node
    names and reasons (wrapped, never cut), a legend under it."""
    shown = list(rows) if max_rows is None else list(rows)[:max_rows]
    cols = [Column("index", "#", "{}", justify="right", key_col=True), Column("node", "node", key_col=True),
            Column("op", "op"), Column("block", "block"),
            Column(lambda r: format_number(r["cosine_similarity"], 8), "cosine", justify="right", wrap=False),
            Column(lambda r: format_number(r["max_relative_error"]), "max rel", justify="right", wrap=False),
            Column(lambda r: format_number(r["MaxAbsErr"]), "max abs", justify="right", wrap=False),
            Column(lambda r: format_number(r["max_ulp_error"]), "max ULP", justify="right", wrap=False),
            Column(lambda r: format_number(r["bitwise_equal_ratio"], 2), "bits =", justify="right", wrap=False),
            Column(lambda r: r["Accuracy Reached or Not"] or "-", "acc"),
            Column(lambda r: r["error_origin"] or "", "origin"),
            Column(lambda r: r["cmp_fail_reason"] or "", "reason")]
    out = render_table(shown, cols, legend=COMPARE_LEGEND, width=width, plain=plain)
    if max_rows is not None and len(rows) > max_rows:
        out += f"\n... {len(rows) - max_rows} more rows (--rows N shows more; all are in the CSV)"
    return out


def _golden(args):
    """The golden side: -gp, or numlab's run of --graph on --inputs."""
    model = getattr(args, "model", None)
    if model is None:
        if args.golden_path is None:
            raise ValueError("give -gp/--golden-path GOLDEN, or --graph MODULE:FUNCTION (with --inputs) "
                             "to compute the golden side")
        return args.golden_path
    if args.golden_path is not None:
        raise ValueError(f"give -gp/--golden-path or --graph, not both (-gp {args.golden_path!r}, "
                         f"--graph {model!r})")
    graph, inputs = graph_and_inputs(args)
    res = run(graph, inputs, mode=args.golden_mode, fmt=args.fmt or get_format("fp32"), seed=args.seed)
    mine = load_any(args.my_path, verify=not args.no_verify, strict=False)
    outs = list(graph.outputs)
    if len(mine) == 1 and mine.names[0] not in res.values and len(outs) == 1:
        # one array from the kernel, one graph output: they are the pair, whatever the file's name
        print(f"golden: {model} output {outs[0]!r} compared with {mine.names[0]!r} of {args.my_path}")
        return {mine.names[0]: res.values[outs[0]]}
    unmatched = [n for n in mine.names if n not in res.values]
    if unmatched and len(unmatched) == len(mine.names):
        raise ValueError(f"-mp {args.my_path!r}: none of its arrays {mine.names[:8]} is a node of --graph "
                         f"{model!r}; name the files after nodes: {[n.name for n in graph.nodes][:12]}")
    return res


def main(args) -> int:
    th = Thresholds(cosine=args.cosine, max_abs_err=args.max_abs_err,
                    max_rel_err=args.max_rel_err, max_ulp=args.max_ulp)
    # refuse an existing report before spending the compare on it
    out = report_path(args.output, force=args.force) if args.output else None
    golden = _golden(args)
    report = compare_dumps(golden, args.my_path, fmt=args.fmt, thresholds=th,
                           chunk_elems=args.chunk, verify=not args.no_verify, flavor=args.flavor)
    if out is not None:  # saved before printing: a closed stdout cannot lose the report
        out = report.to_csv(out, force=args.force, options=command_options(args))
    print(wrap_lines(report.summary()))
    print()
    print(compare_table(report.rows, max_rows=args.rows))
    if out is not None:
        print(f"\nSaved comparing results: {out}")
    flagged = report.ulp_flagged(args.ulp_warn) if args.ulp_warn is not None else []
    if flagged:
        worst = max(flagged, key=lambda r: float(r["max_ulp_error"]))
        print(wrap_lines(
            f"\nWARNING: {len(flagged)} row(s) pass the thresholds but have a max ULP error above "
            f"{args.ulp_warn:g}: " + ", ".join(r["node"] for r in flagged[:8])
            + (" ..." if len(flagged) > 8 else "")
            + f" (worst {worst['node']}: {format_number(worst['max_ulp_error'])} ULP of "
            f"{worst['ulp_format']}, MaxAbsErr {format_number(worst['MaxAbsErr'])}). msprobe's rule "
            "is absolute (MaxAbsErr > 0.001) and cannot see an error on small values; "
            "--max-ulp N makes such rows fail."))
    return exit_status(report, allow_failures=args.allow_failures)


def command_options(args) -> dict:
    """The options ``numlab compare`` ran with, by destination name, for the
    report's JSON sidecar (formats by name, paths as text)."""
    return {k: v.name if isinstance(v, Format) else (str(v) if isinstance(v, Path) else v)
            for k, v in sorted(vars(args).items()) if k not in ("func", "given_options")}


def exit_status(report, *, allow_failures: bool = False) -> int:
    """The exit status of ``numlab compare`` for ``report`` (printing why to
    stderr): 2 when nothing was compared (always), 2 when a file is missing,
    corrupt, fails its SHA-256 check or a matched node could not be compared,
    1 when a row fails; 0 otherwise, and 0 for the last two when
    ``allow_failures`` (``--allow-failures``)."""
    sys.stdout.flush()
    if not report.compared:
        print("numlab compare: nothing was compared (no node has readable data on both sides); "
              "exit status 2", file=sys.stderr)
        return EXIT_UNDECIDED
    bad = len(report.problems) + len(report.uncompared)
    failing = len(report.failing)
    if allow_failures or not (bad or failing):
        return EXIT_OK
    if bad:
        print(f"numlab compare: {len(report.problems)} bad file(s) and {len(report.uncompared)} matched "
              f"node(s) without metrics; exit status 2 (--allow-failures: 0)", file=sys.stderr)
        return EXIT_UNDECIDED
    print(f"numlab compare: {failing} row(s) fail the thresholds; exit status 1 "
          "(--allow-failures: 0)", file=sys.stderr)
    return EXIT_FAIL
