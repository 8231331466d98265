"""``numlab check``: check a claim, run the autofusion test plan, or check determinism.

::

    numlab check CLAIM --model M --dtype D --trials N [--search adversarial] [--save DIR]
    numlab check plan [--out DIR] [--trials N] [--quick] [--force] [--fusion SPEC[,SPEC...]]...
    numlab check determinism ...        (numlab.determinism)
    numlab check list                   (the built-in claims)

Exit codes: 0 the claim holds, 1 a counterexample was found (the report names
the worst case and where it was saved), 2 bad usage.
"""

from __future__ import annotations

EXECUTORS = ("inprocess", "process", "dask")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="check a claim (or `check plan`, `check determinism`)",
        description="Check a claim about fused vs eager numerics by random and adversarial search; "
        "exit 0 when it holds, 1 when a counterexample was found, 2 on bad usage.",
    )
    csub = p.add_subparsers(dest="check_command", metavar="CLAIM|plan|determinism|list")
    from .claims import CLAIMS

    for name, claim in sorted(CLAIMS.items()):
        cp = csub.add_parser(name, help=claim.statement, description=claim.statement)
        cp.add_argument("--model", required=True, help="zoo or claims.EXTRA_MODELS model name")
        cp.add_argument("--dtype", default="fp16", help="storage format S (default fp16)")
        cp.add_argument("--trials", type=int, default=100, help="random trials (default 100)")
        cp.add_argument("--search", choices=("random", "adversarial"), default="random")
        cp.add_argument("--steps", type=int, default=200, help="adversarial mutations (default 200)")
        cp.add_argument("--fusion", default="autofuse",
                        help="autofuse | autofuse:AUTOFUSE_FLAGS | inductor | off (default autofuse)")
        cp.add_argument("--kinds", default="normal,uniform,shifted_mean,heavy_tailed,near_overflow",
                        help="comma-separated zoo input kinds cycled over the trials")
        cp.add_argument("--size", action="append", default=[], metavar="NAME=INT",
                        help="model size override, e.g. --size hidden=128 (repeatable)")
        cp.add_argument("--seed", type=int, default=0)
        cp.add_argument("--save", default="data/counterexamples", metavar="DIR",
                        help="where counterexamples go (default data/counterexamples)")
        cp.add_argument("--no-save", action="store_true", help="do not save the counterexample")
        cp.add_argument("--no-shrink", action="store_true", help="do not shrink the counterexample")
        cp.add_argument("--force", action="store_true", help="overwrite a different existing file")
        cp.add_argument("--executor", choices=EXECUTORS, default="inprocess")
        cp.add_argument("--workers", type=int, default=2)
        cp.add_argument("--progress", action="store_true", help="tqdm progress bar")
        cp.set_defaults(func=_run_claim, claim=name)

    pp = csub.add_parser("plan", help="the autofusion precision test plan (C1, C2, C3, chains)")
    pp.add_argument("--out", default="out/check_plan", help="directory for plan.csv, plan.txt and figures")
    pp.add_argument("--trials", type=int, default=1000, help="inputs per chain (default 1000)")
    pp.add_argument("--quick", action="store_true", help="smaller C1/C2/C3 sizes")
    pp.add_argument("--kinds", default="normal", help="input kinds for the chains (default normal)")
    pp.add_argument("--fusion", action="append", default=None, metavar="SPEC[,SPEC...]",
                    help="fusion configuration(s) the chains run under, repeatable or comma-separated: "
                    "autofuse | autofuse:AUTOFUSE_FLAGS | inductor | off, each optionally +nodecompose "
                    "(default: autofuse, autofuse+nodecompose, autofuse:--autofuse_enable_pass=reduce, inductor)")
    pp.add_argument("--seed", type=int, default=0)
    pp.add_argument("--force", action="store_true", help="overwrite an existing plan.csv")
    pp.add_argument("--no-figures", action="store_true")
    pp.add_argument("--executor", choices=EXECUTORS, default="inprocess")
    pp.add_argument("--workers", type=int, default=2)
    pp.add_argument("--progress", action="store_true")
    pp.set_defaults(func=_run_plan)

    lp = csub.add_parser("list", help="list the built-in claims")
    lp.set_defaults(func=_run_list)

    from .determinism import add_check_parser

    add_check_parser(csub)
    p.set_defaults(func=_no_sub(p))


def _no_sub(parser):
    def func(args) -> int:
        parser.print_help()
        return 2

    return func


def _executor(kind: str, workers: int):
    if kind == "inprocess":
        return None, None
    if workers < 1:
        raise ValueError(f"--workers={workers} must be >= 1")
    if kind == "process":
        from concurrent.futures import ProcessPoolExecutor

        ex = ProcessPoolExecutor(max_workers=workers)
        return ex, ex.shutdown
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)

    def close():
        client.close()
        cluster.close()

    return client, close


def _run_claim(args) -> int:
    from . import claims as C

    if args.trials < 1:
        raise ValueError(f"--trials={args.trials} must be >= 1")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    opts = C.SearchOptions(trials=args.trials, search=args.search, adversarial_steps=args.steps, kinds=kinds)
    ex, close = _executor(args.executor, args.workers)
    try:
        from .zoo import parse_sizes

        rep = C.check(args.claim, args.model, dtype=args.dtype, sizes=parse_sizes(args.size), fusion=args.fusion,
                      seed=args.seed, executor=ex, save=None if args.no_save else args.save, options=opts,
                      progress=args.progress, shrink_cex=not args.no_shrink, force=args.force)
    finally:
        if close:
            close()
    print(rep.summary())
    if not rep.holds:
        where = f"{rep.saved}.npz/.json" if rep.saved else "(not saved)"
        print(f"counterexample: claim {rep.claim} fails on {rep.model}; worst case trial {rep.worst_trial}, "
              f"margin {rep.worst_margin:.4g}; saved {where}")
        return 1
    return 0


def _run_plan(args) -> int:
    from . import claims as C

    ex, close = _executor(args.executor, args.workers)
    try:
        res = C.run_plan(args.out, trials=args.trials, seed=args.seed, executor=ex, progress=args.progress,
                         quick=args.quick, kinds=tuple(k for k in args.kinds.split(",") if k),
                         figures=not args.no_figures, force=args.force, fusion=args.fusion)
    finally:
        if close:
            close()
    print(res["table"])
    print(f"wrote {args.out}/plan.csv, plan.txt" + ("" if args.no_figures else " and plan_*.png"))
    fails = [f"{label} under {spec}" for label, per in res["chains"].items() for spec, r in per.items()
             if r["verdict"] != "PASS"]
    if fails:
        print(f"verdict 'fused P99 and max <= eager P99 and max' fails for: {'; '.join(fails)}")
        return 1
    print("verdict 'fused P99 and max <= eager P99 and max' holds for every chain and configuration")
    return 0


def _run_list(args) -> int:
    from .claims import CLAIMS

    for name, c in sorted(CLAIMS.items()):
        print(f"{name:<24} {c.statement}")
    return 0

