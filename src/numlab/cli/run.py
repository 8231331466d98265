"""``numlab run MODEL|--graph MODULE:FUNCTION --fmt D --mode M --seed S [--size N=I] [--inputs KIND|FILE] [--fusion SPEC] [--kernels SPEC] [--library SPEC] [--dump DIR [--dump-layout numlab|msprobe|msit] [--force]]``.

Runs a model (a zoo model, a claims model, or your own ``module:function``:
a numpy/numlab or PyTorch function traced on the ``--inputs`` arrays, or a
factory returning a Graph; :func:`numlab.cli.options.load_graph`) in one
execution mode on seeded inputs or the arrays of ``--inputs FILE.npz|DIR``,
prints a per-node summary, and with ``--dump`` writes one ``.npy`` per dumped node plus
``manifest.json`` (see :mod:`numlab.compare.dump`).  An existing dump is
never replaced without ``--force``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from .. import zoo
from ..claims import EXTRA_MODELS
from ..compare.dump import check_target, dump_run
from ..compare.layouts import LAYOUTS, dump_run_as
from ..execute import run
from ..fusion import FusionOptions
from ..report import Column, render_table
from .options import MODEL_HELP, add_shared, build_model, graph_and_inputs, kernels_type

__all__ = ["add_parser", "add_model_args", "build", "main", "node_table"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run one model in one mode, optionally dumping every node",
        description="Run a model (a zoo model, a claims model, or module:function) on seeded "
                    "inputs (or inputs read from a .npz file or a directory of .npy files) in one "
                    "execution mode and optionally dump every node's value with a manifest.",
    )
    add_shared(p, model=MODEL_HELP + " (see `numlab run --list`)", model_required=False, graph=True)
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--mode", default="eager",
                   help="eager, fused, emulated_casts or reference (default eager)")
    add_model_args(p, fused_only="(fused modes)")
    add_shared(p, kernels="(default: the mode's, handwritten eager, codegen fused)",
               force="(replace an existing dump directory)")
    p.add_argument("--library", default=None, metavar="SPEC", type=kernels_type("--library"),
                   help="fused modes: kernel spec of the library blocks (those the code generator "
                        "does not take, e.g. every matmul under autofuse; default handwritten), same "
                        "grammar as --kernels; eager's library is --kernels")
    p.add_argument("--align", default="",
                   help="fused modes: sources set to eager's choice "
                        "(promotion,instruction,tiling,algorithm)")
    p.add_argument("--keep-internals", action="store_true",
                   help="fused modes: also dump block-internal fp32 values")
    p.add_argument("--dump", default=None, metavar="DIR", help="write the dump to DIR")
    p.add_argument("--dump-layout", default="numlab", choices=list(LAYOUTS), metavar="LAYOUT",
                   help="with --dump: numlab (one .npy per node + manifest.json, the default), "
                        "msprobe (dump.json + .pt files, for `msprobe compare`) or msit "
                        "(model_tree.json + .pth tree, for `msit llm compare`)")
    p.set_defaults(func=main)


def add_model_args(p, fused_only: str = "") -> None:
    """The shared options ``run`` and ``bisect`` take: --fmt, --seed,
    --inputs KIND|FILE, --size, --fusion."""
    add_shared(p, fmt="fp16", seed=0, inputs="normal", size="", fusion=fused_only, inputs_files=True)


def build(model: str | None, sizes: dict):
    """The graph of ``MODEL`` with ``sizes`` (:func:`numlab.cli.options.build_model`)."""
    return build_model(model, sizes)


NODE_LEGEND = (("node", "every node of the run, in execution order (full names)"),
               ("shape", "the shape of its value"),
               ("dtype", "the numpy dtype the value is held in"),
               ("min, max", "smallest and largest finite value ('-': none)"),
               ("nan, inf", "number of NaN and infinite elements"))


def node_table(values, *, width=None, plain=None) -> str:
    """The per-node summary of a run as a terminal table with its legend."""
    rows = []
    for name, v in values.items():
        a = np.asarray(v, dtype=np.float64)
        fin = a[np.isfinite(a)]
        rows.append({"node": name, "shape": str(tuple(a.shape)), "dtype": str(np.asarray(v).dtype),
                     "min": float(fin.min()) if fin.size else None,
                     "max": float(fin.max()) if fin.size else None,
                     "nan": int(np.isnan(a).sum()), "inf": int(np.isinf(a).sum())})
    cols = [Column("node", "node", key_col=True), Column("shape", "shape"), Column("dtype", "dtype"),
            Column("min", "min", "{:.4g}", justify="right", wrap=False),
            Column("max", "max", "{:.4g}", justify="right", wrap=False),
            Column("nan", "nan", "{:d}", justify="right"), Column("inf", "inf", "{:d}", justify="right")]
    return render_table(rows, cols, legend=NODE_LEGEND, width=width, plain=plain)


def main(args) -> int:
    if args.list:
        print("zoo models: " + ", ".join(sorted(zoo.MODELS)))
        print("claims models: " + ", ".join(sorted(EXTRA_MODELS)))
        print("or module:function (--graph, or as MODEL): a numpy/numlab or PyTorch function traced on the "
              "--inputs FILE.npz|DIR arrays, or a function of the --size values returning a numlab Graph")
        return 0
    model = args.model
    if not model:
        raise ValueError("MODEL is required (or --graph MODULE:FUNCTION); valid: "
                         f"{sorted({**zoo.MODELS, **EXTRA_MODELS})}, module:function, or --list")
    if args.dump_layout != "numlab" and not args.dump:
        raise ValueError(f"--dump-layout {args.dump_layout} needs --dump DIR")
    if args.dump:  # refuse an existing dump before running, not after
        check_target(Path(args.dump), args.force)
    S = args.fmt
    graph, inputs = graph_and_inputs(args)
    kw = {}
    fused = args.mode in ("fused", "emulated_casts")
    if fused:
        kw["fusion"] = FusionOptions.parse(args.fusion)
        kw["keep_internals"] = args.keep_internals
        align = tuple(a.strip() for a in args.align.split(",") if a.strip())
        if align:
            kw["align"] = align
        if args.library is not None:
            kw["library"] = args.library
    elif args.library is not None:
        raise ValueError(f"--library {args.library.spec} applies to --mode fused or emulated_casts; "
                         f"--mode {args.mode} " + ("runs every operator as its own library kernel with "
                                                   f"--kernels: use --kernels {args.library.spec}"
                                                   if args.mode == "eager" else "uses no kernels"))
    elif args.fusion is not None or args.align or args.keep_internals:
        raise ValueError("--fusion/--align/--keep-internals apply to --mode fused or emulated_casts")
    if args.kernels is not None:
        kw["kernels"] = args.kernels
    res = run(graph, inputs, mode=args.mode, fmt=S, seed=args.seed, **kw)
    head = f"{model}: mode={res.mode} fmt={res.fmt.name} seed={args.seed}"
    if fused:
        head += f" fusion={kw['fusion'].spec}"
    if res.kernels is not None:
        head += f" kernels={res.kernels.spec}"
    if args.library is not None:
        head += f" library={res.library.spec}"
    print(f"{head} fingerprint={res.fingerprint[:16]}...")  # one key=value line, kept whole for grep
    if fused:
        print(f"plan: {len(res.plan.blocks)} blocks ({res.plan.n_fused} fused)")
    print(node_table(res.values))
    if args.dump:
        extra = {"inputs": str(args.inputs), "sizes": args.size}
        if fused:
            extra["fusion"] = kw["fusion"].spec
        if args.dump_layout == "numlab":
            path = dump_run(res, args.dump, force=args.force, model=model, seed=args.seed, extra=extra)
        else:  # a foreign tool's layout (numlab.compare.layouts; a sidecar keeps numlab's manifest)
            path = dump_run_as(res, args.dump, args.dump_layout, force=args.force)
        print(f"dumped {len(res.values)} nodes to {path}")
    sys.stdout.flush()
    return 0
