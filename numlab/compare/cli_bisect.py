"""``numlab bisect MODEL --dtype D [...]``: find what makes fused diverge from eager.

Prints every run it tries (fusion kinds off one at a time, the four sources
set to eager's choice, delta debugging over node ranges with golden inputs)
and what it found.  ``--workflow`` runs the graph-mode precision workflow of
the guide instead (single operators, eager vs fp64, fused vs eager by dump
compare, fusion rules off).  A precision problem can be planted with
``--codegen FIELD=VALUE`` (a :class:`numlab.kernels.KernelSpec` field of the
fused kernels), e.g. ``--codegen 'rsqrt=newton(magic,0,fp32)'``.
"""

from __future__ import annotations

import sys

from .cli_run import add_model_args, build, fusion_options, storage_format
from .compare import Thresholds


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bisect",
        help="find what causes a divergence between eager and fused",
        description="Fusion kinds off one at a time, then the four sources set to eager's "
                    "choice, then delta debugging over node ranges fed golden inputs.",
    )
    p.add_argument("model", help="zoo model name (see `numlab run --list`)")
    add_model_args(p)
    p.add_argument("--codegen", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a KernelSpec.codegen() field of the fused kernels (repeatable)")
    p.add_argument("--library", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a KernelSpec.handwritten() field of eager's kernels (repeatable)")
    p.add_argument("--stages", default="fusion,sources,ranges",
                   help="stages to run, comma-separated (default fusion,sources,ranges)")
    p.add_argument("--cosine", type=float, default=Thresholds.cosine,
                   help="cosine threshold of the accuracy rule (msprobe: 0.99)")
    p.add_argument("--max-abs-err", type=float, default=Thresholds.max_abs_err,
                   help="max abs error threshold of the accuracy rule (msprobe: 0.001)")
    p.add_argument("--max-rel-err", type=float, default=None, help="also fail above this max rel err")
    p.add_argument("--max-ulp", type=float, default=None, help="also fail above this max ULP error")
    p.add_argument("--workflow", action="store_true",
                   help="run the graph-mode precision workflow (seed 003) instead")
    p.add_argument("--dump", default=None, metavar="DIR",
                   help="--workflow: keep the eager/fused dumps in DIR")
    p.add_argument("--force", action="store_true", help="replace existing dumps in DIR")
    p.set_defaults(func=main)


def _value(v: str):
    t = v.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    try:
        return int(t)
    except ValueError:
        pass
    return t


def spec_overrides(items: list[str], option: str = "--codegen") -> dict:
    """``["rsqrt=newton(magic,0,fp32)", "fma=false"]`` -> KernelSpec field
    overrides; unknown fields are named with the valid ones."""
    import dataclasses

    from ..kernels import KernelSpec

    valid = [f.name for f in dataclasses.fields(KernelSpec)] if dataclasses.is_dataclass(KernelSpec) else None
    out = {}
    for it in items:
        if "=" not in it:
            raise ValueError(f"{option} {it!r} is not FIELD=VALUE")
        k, v = it.split("=", 1)
        k = k.strip()
        if valid is not None and k not in valid:
            raise ValueError(f"{option} {it!r}: {k!r} is not a KernelSpec field; valid: {valid}")
        out[k] = _value(v)
    return out


def main(args) -> int:
    from .. import zoo
    from ..kernels import KernelSpec
    from .bisect import bisect_run, precision_workflow

    if not args.workflow and (args.dump or args.force):
        raise ValueError("--dump/--force apply to --workflow (bisection keeps its runs in memory)")

    S = storage_format(args.dtype)
    graph = build(args.model, zoo.parse_sizes(args.size))
    inputs = zoo.make_inputs(graph, kind=args.inputs, seed=args.seed)
    opts = fusion_options(args.fusion, args.disable)
    kernels = KernelSpec.codegen(**spec_overrides(args.codegen, "--codegen")) if args.codegen else None
    library = KernelSpec.handwritten(**spec_overrides(args.library, "--library")) if args.library else None
    th = Thresholds(cosine=args.cosine, max_abs_err=args.max_abs_err,
                    max_rel_err=args.max_rel_err, max_ulp=args.max_ulp)
    if args.workflow:
        rep = precision_workflow(graph, inputs, dtype=S, fusion=opts, kernels=kernels,
                                 library=library, thresholds=th, dump_dir=args.dump,
                                 force=args.force, model=args.model)
        print(rep.text())
        sys.stdout.flush()
        return 0
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    rep = bisect_run(graph, inputs, dtype=S, fusion=opts, kernels=kernels, library=library,
                     thresholds=th, seed=args.seed, model=args.model, stages=stages, log=print)
    print()
    print(rep.text(trials=False))  # the trials were printed as they ran
    sys.stdout.flush()
    return 0
