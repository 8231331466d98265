"""``numlab bench [TARGET ...]``: speed reported as ratios against numpy/ml_dtypes
measured in the same run (never as timed tests).

Each target is a module ``numlab.bench.<target>`` defining
``main(quick: bool = False) -> str`` that runs its measurements and returns
the table it printed.
"""

from __future__ import annotations

import argparse
import importlib
import time

TARGETS: dict[str, str] = {
    "rounding": "round_to for 10^7 float32 values vs ml_dtypes/numpy round trips",
    "kernels": ("every reduction order (fp16/bf16 data) vs numpy sum, peak memory, 16-bit accumulators "
                "vs naive loops; block_fma matmul vs numpy matmul"),
    "layernorm": "eager and fused layernorm (4096x4096 fp16) vs a numpy float32 layernorm",
    "claims": "1000 layernorm trials (64x1024 fp16) in eager, fused and reference",
    "faithfulness": "numlab's predictions vs real torch eager and torch.compile (needs torch)",
}


def best_of(fn, repeat: int = 5, warmup: bool = True) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` in seconds (after one warm-up
    call unless ``warmup`` is False: for reference paths too slow to run twice)."""
    if warmup:
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _target(t: str) -> str:
    if t not in TARGETS:
        raise argparse.ArgumentTypeError(f"TARGET {t!r} is not a bench target; valid targets: {list(TARGETS)}")
    return t


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmarks, reported as ratios against numpy/ml_dtypes",
        description="Targets: " + "; ".join(f"{k}: {v}" for k, v in TARGETS.items()),
    )
    p.add_argument("targets", nargs="*", metavar="TARGET", type=_target,
                   help=f"what to benchmark (default: all): {', '.join(TARGETS)}")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    p.set_defaults(func=_run)


def _run(args) -> int:
    targets = args.targets or list(TARGETS)
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"bench target {t!r} is unknown; valid targets: {list(TARGETS)}")
    for t in targets:
        try:
            mod = importlib.import_module(f"numlab.bench.{t}")
        except ModuleNotFoundError as exc:
            if exc.name != f"numlab.bench.{t}":
                raise
            print(f"== bench {t}: not available in this build")
            continue
        print(f"== bench {t}")
        mod.main(quick=args.quick)
    return 0
