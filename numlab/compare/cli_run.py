"""``numlab run MODEL --dtype D --mode M --seed S [--dump DIR [--force]]``.

Runs a zoo model in one execution mode on seeded inputs, prints a per-node
summary, and with ``--dump`` writes one ``.npy`` per dumped node plus
``manifest.json`` (see :mod:`numlab.compare.dump`).  An existing dump is
never replaced without ``--force``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a zoo model in one mode, optionally dumping every node",
        description="Run a zoo model (numlab.zoo.MODELS) on seeded inputs in one execution "
                    "mode and optionally dump every node's value with a manifest.",
    )
    p.add_argument("model", help="zoo model name (see `numlab run --list`)", nargs="?")
    p.add_argument("--list", action="store_true", help="list the zoo models and exit")
    p.add_argument("--mode", default="eager",
                   help="eager, fused, emulated_casts or reference (default eager)")
    add_model_args(p, fused_only=" (fused modes)")
    p.add_argument("--align", default="",
                   help="fused modes: sources set to eager's choice "
                        "(promotion,instruction,tiling,algorithm)")
    p.add_argument("--keep-internals", action="store_true",
                   help="fused modes: also dump block-internal fp32 values")
    p.add_argument("--dump", default=None, metavar="DIR", help="write the dump to DIR")
    p.add_argument("--force", action="store_true", help="replace an existing dump directory")
    p.set_defaults(func=main)


def add_model_args(p, fused_only: str = "") -> None:
    """The options ``run`` and ``bisect`` share: --dtype, --seed, --inputs,
    --size, --fusion, --disable."""
    p.add_argument("--dtype", default="fp16", help="storage format (default fp16)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the inputs and of nondeterministic reduction orders (default 0)")
    p.add_argument("--inputs", default="normal",
                   help="input kind: normal (default), uniform, shifted_mean, near_overflow, heavy_tailed")
    p.add_argument("--size", action="append", default=[], metavar="NAME=INT",
                   help="model size argument, e.g. --size hidden=256 (repeatable)")
    p.add_argument("--fusion", default=None,
                   help=f"fusion options{fused_only}: 'autofuse' (default), 'inductor', 'off', or an "
                        "AUTOFUSE_FLAGS string such as '--autofuse_enable_pass=reduce'")
    p.add_argument("--disable", default="",
                   help=f"comma-separated fusion kinds to switch off{fused_only}")


def fusion_options(spec: str | None, disable: str = ""):
    """FusionOptions from a preset name or an AUTOFUSE_FLAGS string."""
    from ..fusion import FusionOptions

    if spec is None or spec in ("", "autofuse", "default"):
        opts = FusionOptions()
    elif spec == "inductor":
        opts = FusionOptions.inductor()
    elif spec == "off":
        opts = FusionOptions.off()
    elif spec.startswith("--"):
        opts = FusionOptions.autofuse(spec)
    else:
        raise ValueError(
            f"--fusion {spec!r} is not valid; use autofuse, inductor, off or an AUTOFUSE_FLAGS "
            "string starting with '--'"
        )
    kinds = [k.strip() for k in disable.split(",") if k.strip()]
    return opts.disable(*kinds) if kinds else opts


def build(model: str, sizes: dict):
    from .. import zoo

    if model not in zoo.MODELS:
        raise ValueError(f"model={model!r} is not a zoo model; valid: {sorted(zoo.MODELS)}")
    return zoo.get_model(model, **sizes)


def storage_format(dtype: str):
    """The Format of ``--dtype``; the error names the option."""
    from ..formats import get_format

    try:
        return get_format(dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--dtype {dtype!r}: {exc}") from None


def main(args) -> int:
    from .. import zoo
    from ..execute import run
    from .dump import check_target, dump_run

    if args.list:
        print("zoo models: " + ", ".join(sorted(zoo.MODELS)))
        return 0
    if not args.model:
        raise ValueError(f"MODEL is required; valid: {sorted(zoo.MODELS)} (or --list)")
    if args.dump:  # refuse an existing dump before running, not after
        check_target(Path(args.dump), args.force)
    S = storage_format(args.dtype)
    from ..zoo import parse_sizes

    graph = build(args.model, parse_sizes(args.size))
    inputs = zoo.make_inputs(graph, kind=args.inputs, seed=args.seed)
    kw = {}
    fused = args.mode in ("fused", "emulated_casts")
    if fused:
        kw["fusion"] = fusion_options(args.fusion, args.disable)
        kw["keep_internals"] = args.keep_internals
        align = tuple(a.strip() for a in args.align.split(",") if a.strip())
        if align:
            kw["align"] = align
    elif args.fusion or args.disable or args.align or args.keep_internals:
        raise ValueError("--fusion/--disable/--align/--keep-internals apply to --mode fused or emulated_casts")
    res = run(graph, inputs, mode=args.mode, dtype=S, seed=args.seed, **kw)
    print(f"{args.model}: mode={res.mode} dtype={res.dtype.name} seed={args.seed} "
          f"fingerprint={res.fingerprint[:16]}...")
    if fused:
        print(f"plan: {len(res.plan.blocks)} blocks ({res.plan.n_fused} fused)")
    print(f"{'node':<28} {'shape':<16} {'dtype':<8} {'min':>11} {'max':>11} {'nan':>5} {'inf':>5}")
    for name, v in res.values.items():
        a = np.asarray(v, dtype=np.float64)
        nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        fin = a[np.isfinite(a)]
        lo = f"{fin.min():.4g}" if fin.size else "-"
        hi = f"{fin.max():.4g}" if fin.size else "-"
        print(f"{name[:28]:<28} {str(tuple(a.shape))[:16]:<16} {str(np.asarray(v).dtype)[:8]:<8} "
              f"{lo:>11} {hi:>11} {nan:>5} {inf:>5}")
    if args.dump:
        path = dump_run(res, args.dump, force=args.force, model=args.model, seed=args.seed,
                        extra={"inputs": args.inputs, "sizes": parse_sizes(args.size)})
        print(f"dumped {len(res.values)} nodes to {path}")
    sys.stdout.flush()
    return 0
