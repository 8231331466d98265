"""``numlab check``: check a claim, run the autofusion test plan, or check determinism.

::

    numlab check CLAIM MODEL --fmt D --trials N [--search adversarial] [--out DIR]
                             [--kernels SPEC] [--library SPEC]
    numlab check CLAIM MODEL|--graph MODULE:FUNCTION --inputs FILE.npz|DIR [--observed DIR|FILE.npz]
    numlab check plan [--out DIR] [--trials N] [--quick] [--force] [--fusion SPEC[,SPEC...]]...
    numlab check determinism MODEL [--runs N] [--mode M] [--order O] ...   (numlab.determinism)
    numlab check list                   (the built-in claims)

Exit codes (``docs/design.md``, section "Verdicts"): 0 the claim holds; 1 it
fails (a counterexample was found: the report names the worst case and where
it was saved); 2 undecided (some case's decision rests on an infinite, NaN,
unknown or empty result: the report names the operators responsible and the
causes) or bad usage.  ``check plan``: 1 if any chain FAILs, else 2 if any is
UNDECIDED, else 0.

Your kernel: with ``--inputs FILE.npz|DIR`` the claim is checked on exactly
those inputs (no search), and with ``--observed`` a real kernel's outputs on
them take the place of numlab's fused run (eager and the fp64 reference come
from numlab; :func:`numlab.claims.check`).  ``--observed`` is a directory of
``NAME.npy`` (one per graph output), a numlab dump, an msprobe or msit dump
(:func:`numlab.compare.layouts.load_any`; ``--observed-name OUTPUT=TENSOR``
maps a tool's tensor name to a graph output), a ``.npz`` or a ``.npy`` file;
for a graph with one output, a source holding one array is that output
whatever its name (stderr says which it took).  Claims that need more of the kernel than its outputs
are undecided (exit 2) with the reason "needs a model of the fused kernel".
A violating case is saved with the real data under ``--out``.  Options that
do not apply are refused (exit 2): the search's (``--trials``, ``--steps``,
``--seed``, ``--executor``, ``--workers``, ``--progress``) with ``--inputs
FILE``, and ``--contract`` for a claim that holds no contract bound;
``--fusion`` / ``--kernels`` (for such claims) and ``--no-shrink`` with
``--observed`` get a note on stderr (they do not change the verdict).

Kernels: ``--kernels SPEC`` is the fused side's kernel spec (the code
generator, default ``codegen``) and ``--library SPEC`` eager's library
kernel spec (also called by fused plans for the blocks they do not
generate; default ``handwritten``), both in the ``KernelSpec.parse`` grammar
(``numlab --help``); e.g. ``--kernels codegen:mma=H100/fp8_e4m3/fp32
--library handwritten:mma=H100/fp8_e4m3/fp32`` puts every matmul on the
H100 fp8 matrix unit.  Every run of the claim (and its derived contract)
takes them and a saved counterexample records them.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from .. import claims as C
from .. import plots, report, zoo
from ..compare.layouts import load_any
from ..contract import CONTRACT_PRESETS
from ..determinism import INJECTIONS, check_determinism
from ..execute import MODES
from ..fusion import FusionOptions
from .options import (
    add_shared,
    contract_type,
    fusion_list_type,
    graph_and_inputs,
    kernels_type,
    nonneg_int,
)

__all__ = ["add_parser", "EXECUTORS"]

EXECUTORS = ("inprocess", "process", "dask")

NO_INPUT_FILES = (
    "--inputs takes input kinds, not a FILE: a check searches, each chain's trials drawing their own inputs "
    "(one seed per trial), so a file of fixed inputs would make every trial the same case.  To check a claim "
    "on given inputs: numlab check CLAIM MODEL --inputs FILE [--observed DIR]; to run them: numlab run MODEL "
    "--inputs FILE.")
"""Why ``check plan`` refuses ``--inputs FILE`` (its help epilog)."""

GIVEN_INPUTS = (
    "With --inputs KIND[,KIND...] the claim is searched on drawn inputs (--trials, --search).  With "
    "--inputs FILE.npz|DIR it is checked on exactly those inputs (no search), and --observed DIR|FILE.npz "
    "puts a real kernel's outputs on them in place of numlab's fused run: eager and the fp64 reference "
    "come from numlab; names, shapes and dtypes are checked against the graph's outputs.  Claims that "
    "need more of the kernel than its outputs are undecided (exit 2): 'needs a model of the fused kernel'.")
"""The help epilog of ``check CLAIM``."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="check a claim (or `check plan`, `check determinism`)",
        description="Check a claim about fused vs eager numerics by random and adversarial search; "
        "exit 0 when it holds, 1 when it fails (a counterexample was found), 2 when it is undecided "
        "(a decision rests on an infinite, NaN, unknown or empty result; the operators responsible are "
        "named) or on bad usage.",
    )
    csub = p.add_subparsers(dest="check_command", metavar="CLAIM|plan|determinism|list")
    for name, claim in sorted(C.CLAIMS.items()):
        cp = csub.add_parser(name, help=claim.statement, description=claim.statement, epilog=GIVEN_INPUTS)
        add_shared(cp, model="a zoo model (numlab.zoo.MODELS), a claims model (numlab.claims.EXTRA_MODELS) "
                   "or module:function (or give --graph)", model_required=False, graph=True,
                   fmt="fp16", fusion="(the stated plan)", size="", seed=0,
                   inputs="normal,uniform,shifted_mean,heavy_tailed,near_overflow", inputs_multi=True,
                   inputs_files=True,
                   out="data/counterexamples", force="(a different counterexample file of the same name)")
        cp.add_argument("--observed", default=None, metavar="DIR|FILE.npz|FILE.npy",
                        help="a real kernel's outputs on the --inputs FILE arrays, in place of numlab's fused "
                             "run: a directory of NAME.npy (one per graph output), a numlab, msprobe or msit "
                             "dump, a .npz or a .npy file (a graph with one output takes a single array "
                             "whatever its name)")
        cp.add_argument("--observed-name", action="append", default=[], metavar="OUTPUT=TENSOR",
                        help="the tensor of --observed holding graph output OUTPUT, when the dump names it "
                             "otherwise (e.g. y=Functional.layer_norm.0.forward.output.0); repeatable")
        add_shared(cp, kernels="(here: the fused side's kernels, default codegen; e.g. "
                                 "'codegen:mma=H100/fp8_e4m3/fp32')")
        cp.add_argument("--library", default=None, metavar="SPEC", type=kernels_type("--library"),
                        help="kernel spec of eager's library kernels, also called by fused plans for blocks "
                             "they do not generate (default handwritten), same grammar as --kernels")
        cp.add_argument("--contract", default=None, metavar="SPEC", type=contract_type,
                        help="the execution contract error_within_bound and bound_no_worse hold the outputs to "
                             f"(default: derived from --kernels/--library; presets {sorted(CONTRACT_PRESETS)}, "
                             "e.g. 'triton_cuda' or 'torch_cpu:libm_ulps=2')")
        cp.add_argument("--trials", type=int, default=100, help="random trials (default 100)")
        cp.add_argument("--search", choices=("random", "adversarial"), default="random")
        cp.add_argument("--steps", type=int, default=200, help="adversarial mutations (default 200)")
        cp.add_argument("--no-save", action="store_true", help="do not save the counterexample")
        cp.add_argument("--no-shrink", action="store_true", help="do not shrink the counterexample")
        cp.add_argument("--executor", choices=EXECUTORS, default="inprocess")
        cp.add_argument("--workers", type=int, default=2)
        cp.add_argument("--progress", action="store_true", help="tqdm progress bar")
        cp.set_defaults(func=_run_claim, claim=name)

    pp = csub.add_parser("plan", help="the autofusion precision test plan (C1, C2, C3, chains)",
                         description="The autofusion precision test plan (C1, C2, C3, chains under each "
                         "fusion configuration); exit 1 if any chain FAILs, else 2 if any is UNDECIDED "
                         "(or on bad usage), else 0.", epilog=NO_INPUT_FILES)
    add_shared(pp, out="out/check_plan", seed=0, inputs="normal", inputs_multi=True,
               force="(an existing plan.csv or plan.json)")
    pp.add_argument("--trials", type=int, default=1000, help="inputs per chain (default 1000)")
    pp.add_argument("--quick", action="store_true", help="smaller C1/C2/C3 sizes")
    pp.add_argument("--fusion", action="append", default=None, metavar="SPEC[,SPEC...]", type=fusion_list_type,
                    help="fusion spec(s) the chains run under, repeatable or comma-separated (grammar in "
                    "`numlab --help`; default: " + ", ".join(C.PLAN_FUSIONS) + ")")
    pp.add_argument("--no-figures", action="store_true")
    pp.add_argument("--executor", choices=EXECUTORS, default="inprocess")
    pp.add_argument("--workers", type=int, default=2)
    pp.add_argument("--progress", action="store_true")
    pp.set_defaults(func=_run_plan)

    lp = csub.add_parser("list", help="list the built-in claims")
    lp.set_defaults(func=_run_list)

    _add_determinism_parser(csub)
    p.set_defaults(func=_no_sub(p))


def _add_determinism_parser(csub) -> None:
    """``numlab check determinism``: :func:`numlab.determinism.check_determinism`.
    Exit code 0 when both layers are deterministic, 1 otherwise."""
    p = csub.add_parser(
        "determinism", help="compile and run MODEL in N processes; compare fingerprints and bits",
        description="Compile determinism (same fingerprint and plan in every process) and execution "
                    "determinism (same output bits), each process with its own PYTHONHASHSEED.")
    add_shared(p, model="a zoo model (numlab.zoo.MODELS) or module:function", fmt="fp16", size="",
               fusion="(fused modes)", kernels="(default: the mode's)", inputs="normal", seed=0)
    p.add_argument("--mode", default="fused", choices=MODES, help="execution mode (default fused)")
    p.add_argument("--runs", type=int, default=3, help="processes (default 3, >= 2)")
    p.add_argument("--order", default=None,
                   help="reduction order for every reduction: 'atomic' (schedule order; unseeded without "
                        "--schedule-seed) or an order string such as 'pairwise', 'shuffled(3)'")
    p.add_argument("--schedule-seed", type=nonneg_int("--schedule-seed"),
                   default=None, metavar="N", help="seed of the atomic schedule (default none: unseeded)")
    p.add_argument("--inject", default=None, choices=[i for i in INJECTIONS if i],
                   help="plant a PYTHONHASHSEED-dependent compile step to see the check catch it")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds for all worker processes together (default 300); on expiry they are killed")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_run_determinism)


def _run_determinism(args) -> int:
    if args.model in C.EXTRA_MODELS and args.model not in zoo.MODELS:
        raise ValueError(f"MODEL {args.model!r} is a claims model; check determinism takes a zoo model or "
                         f"module:function (its worker processes rebuild it), e.g. "
                         f"{C.EXTRA_MODELS[args.model].__module__}:{C.EXTRA_MODELS[args.model].__name__}")
    rep = check_determinism(args.model, fmt=args.fmt, mode=args.mode, runs=args.runs, sizes=args.size,
                            kernels=args.kernels, fusion=args.fusion, order=args.order,
                            seed=args.schedule_seed, input_kind=args.inputs, input_seed=args.seed, inject=args.inject,
                            timeout=args.timeout)
    if args.json:
        print(json.dumps({"config": rep.config, "compile_deterministic": rep.compile_deterministic,
                          "execution_deterministic": rep.execution_deterministic,
                          "ok": rep.ok, "active_hazards": [h.option for h in rep.active_hazards],
                          "records": [r.to_json() for r in rep.records],
                          "diffs": rep.diffs,
                          "plan": [h.__dict__ for h in rep.plan]}, indent=1))
    else:
        print(report.wrap_lines(str(rep)))
    return 0 if rep.ok else 1


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
        ex = ProcessPoolExecutor(max_workers=workers)
        return ex, ex.shutdown
    from dask.distributed import Client, LocalCluster  # optional heavy dependency (the dask extra)

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)

    def close():
        client.close()
        cluster.close()

    return client, close


def _observed(value: str, names: dict, outputs=()):
    """``--observed``: a ``.npz`` file as its path (numlab.claims reads it),
    anything else through :func:`numlab.compare.layouts.load_any` (plain
    ``.npy`` files and folders, numlab dumps, msprobe's and msit's layouts;
    files checked, a missing or corrupt one is an error).  ``names``
    (``--observed-name OUTPUT=TENSOR``) picks each graph output's tensor
    by the name the dump gives it (a tool's dump names tensors its own way);
    an output of ``outputs`` not named there is taken under its own name.
    A graph with one output takes a source holding one array whatever its
    name (a line on stderr says which it took)."""
    p = Path(value)
    if not p.exists():
        raise FileNotFoundError(f"--observed {value!r}: no such directory or file; give the kernel's outputs as a "
                                ".npy or .npz file, a directory of NAME.npy or a numlab/msprobe/msit dump")
    src = p if p.is_file() and p.suffix == ".npz" else load_any(p, strict=True)
    if isinstance(src, Path):
        with np.load(src, allow_pickle=False) as z:
            have = {k: z[k] for k in z.files}
        get, avail = have.__getitem__, list(have)
    else:
        get, avail = src.array, list(src.names)
    shown = f"{avail[:20]}{' ...' if len(avail) > 20 else ''}"
    outputs = list(outputs)
    if names:
        _check_observed_names(names, value, avail, outputs)
        mapped = {out: np.asarray(get(t)) for out, t in names.items()}
        # the other graph outputs under their own names (a partial mapping is not an error)
        mapped.update({o: np.asarray(get(o)) for o in outputs if o not in mapped and o in avail})
        return mapped
    missing = [o for o in outputs if o not in avail]
    if len(outputs) == 1 and len(avail) == 1 and missing:
        where = value if p.suffix == ".npy" else f"{value}[{avail[0]!r}]"
        print(f"observed: {where} taken as output {outputs[0]!r} (the graph's only output)", file=sys.stderr)
        return {outputs[0]: np.asarray(get(avail[0]))}
    if missing and avail:
        raise ValueError(f"--observed {value!r}: missing output(s) {missing}; it holds {shown} (the graph's "
                         f"outputs: {outputs}); name the tensor of each with --observed-name OUTPUT=TENSOR, e.g. "
                         f"--observed-name {missing[0]}={avail[0]}")
    return src


def _check_observed_names(names: dict, value: str, avail: list, outputs: list) -> None:
    """``--observed-name OUTPUT=TENSOR`` against the graph's outputs and the
    tensors of ``--observed``; a reversed pair (TENSOR=OUTPUT) is named as such."""
    shown = f"{avail[:20]}{' ...' if len(avail) > 20 else ''}"
    for out, t in names.items():
        if out in outputs:
            continue
        if t in outputs:
            raise ValueError(f"--observed-name {out}={t}: the syntax is OUTPUT=TENSOR (a graph output, then the "
                             f"name of its tensor in --observed {value!r}), and {t!r} is the graph's output"
                             + (f" while {out!r} is a tensor of --observed" if out in avail else "")
                             + f"; did you mean --observed-name {t}={out}?")
        raise ValueError(f"--observed-name {out}={t}: {out!r} is not an output of the graph (its outputs: {outputs}); "
                         f"give OUTPUT=TENSOR, e.g. --observed-name {outputs[0]}={avail[0] if avail else 'TENSOR'}")
    missing = [t for t in names.values() if t not in avail]
    if missing:
        raise ValueError(f"--observed-name: tensor(s) {missing} not in --observed {value!r}; it holds {shown}; "
                         "give OUTPUT=TENSOR with TENSOR one of those names")


def _observed_names(items) -> dict:
    out = {}
    for item in items or []:
        for part in item.split(","):
            k, sep, v = part.partition("=")
            if not sep or not k.strip() or not v.strip():
                raise ValueError(f"--observed-name {item!r}: give OUTPUT=TENSOR (a graph output and the name "
                                 "of its tensor in the --observed dump)")
            out[k.strip()] = v.strip()
    return out


BOUND_CLAIMS = ("bound_no_worse", "error_within_bound")
"""The claims that hold outputs to a contract bound: the only ones ``--contract``
applies to, and with ``--observed`` the only ones ``--fusion`` and ``--kernels``
enter (through the contract of the fused plan)."""

SEARCH_OPTIONS = {"--trials": "trials", "--steps": "steps", "--seed": "seed", "--executor": "executor",
                  "--workers": "workers", "--progress": "progress"}
"""Options of the search on drawn inputs (option -> attribute): refused with ``--inputs FILE``."""


def _refuse_unused(args) -> None:
    """Refuse the options given on the command line (``args.given_options``)
    that do not apply to this mode of ``check CLAIM``, naming why and the fix."""
    given = getattr(args, "given_options", frozenset())

    def shown(opt):
        v = getattr(args, SEARCH_OPTIONS.get(opt, opt.lstrip("-").replace("-", "_")), None)
        if isinstance(v, bool) or v is None:
            return opt
        return f"{opt} {getattr(v, 'spec', v)}"

    if args.contract is not None and args.claim not in BOUND_CLAIMS:
        raise ValueError(f"--contract {args.contract} does not apply to {args.claim}: only {list(BOUND_CLAIMS)} hold "
                         "outputs to a contract bound; drop --contract, or check error_within_bound")
    if not isinstance(args.inputs, Path):
        return
    mode = f"--inputs {str(args.inputs)!r}" + ("" if args.observed is None else f" and --observed {args.observed!r}")
    for opt in SEARCH_OPTIONS:
        if opt in given:
            raise ValueError(f"{shown(opt)} does not apply with {mode}: the claim is checked on exactly the arrays "
                             "of the file, with no trials drawn and no search; drop "
                             f"{opt} (or give --inputs KIND[,KIND...] without --observed to search drawn inputs)")
    if args.observed is None:
        return
    for opt in ("--fusion", "--kernels"):  # a warning: the stated plan is recorded with the case
        if opt in given and args.claim not in BOUND_CLAIMS:
            print(f"numlab check: note: {shown(opt)} does not change the verdict of {args.claim} with --observed "
                  f"{args.observed!r}: it configures numlab's fused run, which the observed outputs replace (eager "
                  f"runs --library); it is recorded with the case, and enters only the contract bound of "
                  f"{list(BOUND_CLAIMS)}", file=sys.stderr)
    if "--no-shrink" in given:
        print(f"numlab check: note: --no-shrink has no effect with --observed {args.observed!r}: a violating case "
              "with observed outputs is saved as given, never shrunk", file=sys.stderr)


def _run_given(args) -> int:
    """``check CLAIM`` on the arrays of ``--inputs FILE`` (and ``--observed``)."""
    if args.search != "random":
        raise ValueError("--search adversarial mutates inputs; with --inputs FILE the check runs exactly those "
                         "inputs (use --inputs KIND to search)")
    graph, inputs = graph_and_inputs(args)
    names = _observed_names(args.observed_name)
    if names and args.observed is None:
        raise ValueError(f"--observed-name {','.join(args.observed_name)} needs --observed DIR|FILE.npz|FILE.npy: "
                         "give the kernel's outputs it names a tensor of")
    observed = None if args.observed is None else _observed(args.observed, names, graph.outputs)
    fusion = FusionOptions.parse(args.fusion)
    what = f"observed={args.observed}" if observed is not None else "fused=numlab's model"
    print(f"numlab check {args.claim} {graph.name}: fmt={args.fmt.name} fusion={fusion.spec}"
          f"{_kernels_text(args)} inputs={args.inputs} {what}")
    rep = C.check(args.claim, graph, inputs=inputs, observed=observed, fmt=args.fmt.name, fusion=fusion.spec,
                  save=None if args.no_save else args.out, shrink_cex=not args.no_shrink, force=args.force,
                  kernels=args.kernels, library=args.library, contract=args.contract)
    return _print_verdict(args, rep)


def _run_claim(args) -> int:
    if args.model is None:
        raise ValueError("MODEL (or --graph MODULE:FUNCTION) is required; see `numlab check CLAIM --help`")
    _refuse_unused(args)
    if isinstance(args.inputs, Path):
        return _run_given(args)
    if args.observed is not None or args.observed_name:
        what = (f"--observed {args.observed!r}" if args.observed is not None
                else f"--observed-name {','.join(args.observed_name)}")
        raise ValueError(f"--observed needs the inputs the kernel ran on ({what}), and --inputs {args.inputs!r} "
                         "names input kinds (drawn inputs): give --inputs FILE.npz|DIR with the kernel's input arrays")
    if args.trials < 1:
        raise ValueError(f"--trials={args.trials} must be >= 1")
    kinds = tuple(k.strip() for k in args.inputs.split(",") if k.strip())
    fusion = FusionOptions.parse(args.fusion)
    print(f"numlab check {args.claim} {args.model}: fmt={args.fmt.name} fusion={fusion.spec}"
          f"{_kernels_text(args)} inputs={','.join(kinds)} seed={args.seed} trials={args.trials} "
          f"search={args.search}")
    opts = C.SearchOptions(trials=args.trials, search=args.search, adversarial_steps=args.steps, kinds=kinds)
    ex, close = _executor(args.executor, args.workers)
    try:
        # claims.check takes the spec string (it stores it in the case record)
        rep = C.check(args.claim, args.model, fmt=args.fmt.name, sizes=args.size, fusion=fusion.spec,
                      seed=args.seed, executor=ex, save=None if args.no_save else args.out, options=opts,
                      progress=args.progress, shrink_cex=not args.no_shrink, force=args.force,
                      kernels=args.kernels, library=args.library, contract=args.contract)
    finally:
        if close:
            close()
    return _print_verdict(args, rep)


def _kernels_text(args) -> str:
    """`` kernels=SPEC library=SPEC`` for the head line, when either is given."""
    if args.kernels is None and args.library is None:
        return ""
    k = "codegen" if args.kernels is None else args.kernels.spec
    lib = "handwritten" if args.library is None else args.library.spec
    return f" kernels={k} library={lib}"


def _print_verdict(args, rep) -> int:
    """The report, the closing lines and the exit code (0 / 1 / 2)."""
    print(report.wrap_lines(rep.summary()))
    if rep.verdict == "fails":
        if rep.worst_trial is None and rep.counterexample is None:  # a population claim
            what = (f"{rep.trials} given case(s)" if rep.search in ("given", "observed")
                    else f"all {rep.trials} trials")
            print(f"claim {rep.claim} fails on {rep.model} over the pooled outputs of {what} "
                  f"(margin {rep.worst_margin:.4g}); a population claim has no single "
                  "counterexample case to save")
        else:
            if rep.saved:
                where = f"saved to {rep.saved}.npz/.json"
            else:
                where = "not saved (--no-save)" if args.no_save else "not saved"
            trial = "" if rep.worst_trial is None else f"worst case trial {rep.worst_trial}, "
            print(f"counterexample: claim {rep.claim} fails on {rep.model}; {trial}"
                  f"margin {rep.worst_margin:.4g}; {where}")
    elif rep.verdict == "undecided":
        print(f"undecided: claim {rep.claim} on {rep.model} is neither shown to hold nor to fail; "
              f"{rep.undecided} of {rep.trials} cases rest on: {rep.undecided_detail.get('reason')}")
        for line in rep.responsible or ["(no operator named)"]:
            print(f"  responsible: {line}")
    return rep.exit_code


def _run_plan(args) -> int:
    fusion = None if args.fusion is None else list(dict.fromkeys(o.spec for o in args.fusion))
    ex, close = _executor(args.executor, args.workers)
    try:
        res = C.run_plan(args.out, trials=args.trials, seed=args.seed, executor=ex, progress=args.progress,
                         quick=args.quick, kinds=tuple(k for k in args.inputs.split(",") if k),
                         force=args.force, fusion=fusion)
    finally:
        if close:
            close()
    if not args.no_figures:
        plots.save_figures(plots.plan_figures(res), args.out)
    print(res["table"])
    print(f"wrote {args.out}/plan.csv, plan.json, plan.txt" + ("" if args.no_figures else " and plan_*.png"))
    by = {v: [f"{label} under {spec}" for label, per in res["chains"].items() for spec, r in per.items()
              if r["verdict"] == v] for v in ("FAIL", "UNDECIDED")}
    rule = "'fused P99 and max <= eager P99 and max'"
    if by["FAIL"]:
        print(f"verdict {rule} fails for: {'; '.join(by['FAIL'])}")
    if by["UNDECIDED"]:
        print(f"verdict {rule} is undecided (infinite errors on both sides, or no elements) for: "
              f"{'; '.join(by['UNDECIDED'])}")
    if by["FAIL"]:
        return 1
    if by["UNDECIDED"]:
        return 2
    print(f"verdict {rule} holds for every chain and configuration")
    return 0


def _run_list(args) -> int:
    for name, c in sorted(C.CLAIMS.items()):
        print(f"{name:<24} {c.statement}")
        if c.on_observed:
            print(f"{'':<24} [with --observed: undecided, {C.NEEDS_KERNEL_MODEL}]")
    return 0

