"""``numlab race``: batch-run a multi-core race scenario, detect, bisect, fix.

Examples::

    numlab race fused_linear_online_max_sum --runs 200
    numlab race fused_linear_online_max_sum --runs 200 --fix
    numlab race split_softmax --runs 50 --spread 0.3 --seed 1
    numlab race --list
"""

from __future__ import annotations

import math

from .. import races
from .options import seed_type


def race_report(scenario: str, *, runs: int = 200, fix: bool = False, seed: int = 0, spread: float = 0.4,
                bisect_cases: int = 12, bisect_runs: int = 4, do_bisect: bool = True) -> tuple[str, races.BatchResult]:
    """The text ``numlab race`` prints, and the batch result behind it.

    ``runs`` cases (drawn with ``seed``) are run back to back on one memory,
    each under its own schedule seed; outputs are judged against the fp64
    reference with the scenario's tolerance.
    """
    sc = races.get_scenario(scenario)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"--runs must be an integer >= 1, got {runs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {seed!r}")
    if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not (math.isfinite(spread) and spread >= 0):
        raise ValueError(f"--spread must be a finite number >= 0, got {spread!r}")
    kernel = sc.build(fix=fix, spread=spread)
    cases = sc.cases(runs, seed)
    res = races.batch_run(kernel, cases, sc.reference, seed=seed, tol=sc.tol, keep_outputs=True)
    again = races.batch_run(kernel, cases, sc.reference, seed=seed + 1, tol=sc.tol, keep_outputs=True)
    lines = [f"scenario {sc.name}" + (" (with the fix: " + sc.fix_barrier + ")" if fix else " (as shipped, no fix)"),
             sc.description, "", kernel.describe(), "",
             f"batch run: {runs} cases, seed {seed}, latency spread {spread:g}; tolerance "
             f"|x - ref| <= {sc.tol.atol:g} + {sc.tol.rtol:g} |ref| against fp64",
             res.summary()]
    failing = [o for o, n in res.failures_by_output().items() if n]
    lines.append("failing outputs: " + (", ".join(failing) if failing else "none"))
    moved = {o: sum(a.outputs[o].tobytes() != b.outputs[o].tobytes() for a, b in zip(res.cases, again.cases, strict=True))
             for o in kernel.outputs()}
    lines.append(f"same batch again with schedule seed {seed + 1}: "
                 + (", ".join(f"{o} differs in {n}/{runs} cases" for o, n in moved.items() if n)
                    or "every output bit-identical"))
    for c in res.cases:
        c.outputs = {}
    lines.append("")
    findings = races.detect_races(kernel)
    lines.append(f"static race detector: {len(findings)} finding(s)")
    lines += [f"  {f}" for f in findings]
    for buf, stages, k in races.atomic_accumulations(kernel):
        lines.append(f"  note: {buf} receives up to {k} atomic adds per row ({', '.join(stages)}): race-free, "
                     "but the bits follow the landing order")
    if do_bisect:
        lines.append("")
        bc = cases[: max(2, min(bisect_cases, runs))] if runs >= 2 else sc.cases(2, seed)
        lines.append(str(races.bisect(kernel, bc, runs=bisect_runs, seed=seed)))
    return "\n".join(lines), res


def _main(args) -> int:
    if args.list:
        for name, sc in races.SCENARIOS.items():
            print(f"{name}: {sc.description}")
        return 0
    if args.scenario is None:
        raise ValueError(f"race: give a SCENARIO (choices: {sorted(races.SCENARIOS)}) or --list")
    text, res = race_report(args.scenario, runs=args.runs, fix=args.fix, seed=args.seed, spread=args.spread,
                            do_bisect=not args.no_bisect)
    print(text)
    # like `numlab check`: 0 when every case passed and the detector found no race
    races_found = races.detect_races(races.get_scenario(args.scenario).build(fix=args.fix, spread=args.spread))
    return 1 if (res.failure_rate > 0 or races_found) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("race", help="multi-core race scenarios: run, detect, fix",
                       description="Batch-run a multi-core race scenario on the simulator: failure rate, "
                                   "failing outputs, static race findings and the field-style bisection. "
                                   "Exit code 0 when every case passes and no race is found, 1 otherwise, "
                                   "2 on bad arguments.")
    p.add_argument("scenario", nargs="?", default=None, metavar="SCENARIO",
                   help=f"one of {sorted(races.SCENARIOS)}")
    p.add_argument("--runs", type=int, default=200, help="cases in the batch (default 200)")
    p.add_argument("--fix", action="store_true", help="apply the scenario's fix (a SyncAll after TargetProcess)")
    p.add_argument("--seed", type=seed_type, default=0, metavar="N",
                   help="seed for cases and schedules, an integer >= 0 (default 0)")
    p.add_argument("--spread", type=float, default=0.4,
                   help="latency spread: sigma of log(stage duration) (default 0.4)")
    p.add_argument("--no-bisect", action="store_true", help="skip the bisection")
    p.add_argument("--list", action="store_true", help="list the scenarios")
    p.set_defaults(func=_main)
