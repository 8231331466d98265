"""``numlab bisect MODEL|--graph MODULE:FUNCTION --fmt D [--inputs KIND|FILE] [...]``: find what makes fused diverge from eager.

Prints every run it tries (fusion kinds off one at a time, the four sources
set to eager's choice, delta debugging over node ranges with golden inputs)
and what it found.  ``--workflow`` runs the graph-mode precision workflow of
the guide instead (single operators, eager vs fp64, fused vs eager by dump
compare, fusion rules off).  A precision problem can be planted with a
kernel spec for the fused kernels, e.g.
``--kernels 'codegen:rsqrt=newton(magic,0,fp32)'`` (``--library SPEC`` does
the same for eager's kernels).
"""

from __future__ import annotations

import sys

from ..compare.bisect import bisect_run, precision_workflow
from ..compare.compare import Thresholds
from ..fusion import FusionOptions
from .options import MODEL_HELP, add_shared, graph_and_inputs, kernels_type
from .run import add_model_args

__all__ = ["add_parser", "main"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bisect",
        help="find what causes a divergence between eager and fused",
        description="Fusion kinds off one at a time, then the four sources set to eager's "
                    "choice, then delta debugging over node ranges fed golden inputs.",
    )
    add_shared(p, model=MODEL_HELP + " (see `numlab run --list`)", model_required=False, graph=True)
    add_model_args(p)
    add_shared(p, kernels="of the fused kernels (default codegen), e.g. 'codegen:rsqrt=newton(magic,0,fp32)'",
               force="(--workflow: replace existing dumps in DIR)")
    p.add_argument("--library", default=None, metavar="SPEC", type=kernels_type("--library"),
                   help="kernel spec of eager's kernels (default handwritten), same grammar as --kernels")
    p.add_argument("--stages", default="fusion,sources,ranges",
                   help="stages to run, comma-separated (default fusion,sources,ranges)")
    p.add_argument("--cosine", type=float, default=Thresholds.cosine,
                   help="cosine threshold of the accuracy rule (msprobe: 0.99)")
    p.add_argument("--max-abs-err", type=float, default=Thresholds.max_abs_err,
                   help="max abs error threshold of the accuracy rule (msprobe: 0.001)")
    p.add_argument("--max-rel-err", type=float, default=None, help="also fail above this max rel err")
    p.add_argument("--max-ulp", type=float, default=None, help="also fail above this max ULP error")
    p.add_argument("--workflow", action="store_true",
                   help="run the graph-mode precision workflow (see docs/design.md) instead")
    p.add_argument("--dump", default=None, metavar="DIR",
                   help="--workflow: keep the eager/fused dumps in DIR")
    p.set_defaults(func=main)


def main(args) -> int:
    if not args.workflow and (args.dump or args.force):
        raise ValueError("--dump/--force apply to --workflow (bisection keeps its runs in memory)")

    S = args.fmt
    model = args.model
    if not model:
        raise ValueError("MODEL is required (or --graph MODULE:FUNCTION); see `numlab run --list`")
    graph, inputs = graph_and_inputs(args)
    opts = FusionOptions.parse(args.fusion)
    kernels, library = args.kernels, args.library
    print(f"numlab bisect {model}: fmt={S.name} seed={args.seed} inputs={args.inputs} fusion={opts.spec} "
          f"kernels={'codegen' if kernels is None else kernels.spec} "
          f"library={'handwritten' if library is None else library.spec}")
    th = Thresholds(cosine=args.cosine, max_abs_err=args.max_abs_err,
                    max_rel_err=args.max_rel_err, max_ulp=args.max_ulp)
    if args.workflow:
        rep = precision_workflow(graph, inputs, fmt=S, fusion=opts, kernels=kernels,
                                 library=library, thresholds=th, dump_dir=args.dump,
                                 force=args.force, model=model)
        print(rep.text())
        sys.stdout.flush()
        return 0
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    rep = bisect_run(graph, inputs, fmt=S, fusion=opts, kernels=kernels, library=library,
                     thresholds=th, seed=args.seed, model=model, stages=stages, log=print)
    print()
    print(rep.text(trials=False))  # the trials were printed as they ran
    sys.stdout.flush()
    return 0
