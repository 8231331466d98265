"""``numlab bench [TARGET ...]``: speed reported as ratios against numpy/ml_dtypes
measured in the same run (never as timed tests).

Each target is a module ``numlab.bench.<target>`` defining
``main(quick: bool = False) -> str`` (``scaling`` also takes ``large``) that
runs its measurements and returns the table it printed.  Every run starts with
:func:`machine_header` (CPU model, the instruction-set flags that decide speed
and bits, cores, load average, library versions).  ``--markdown PATH`` writes
the whole run as the README's performance section (refusing to overwrite an
existing file without ``--force``)::

    numlab bench rounding kernels layernorm claims demo scaling --large --markdown docs/performance.md --force
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import accel as _accel

TARGETS: dict[str, str] = {
    "rounding": ("round_to on 10^7 values (in-range, mixed, random bits, float64 -> bf16), every mode, vs a "
                 "float32 copy / ml_dtypes' cast, with peak memory; gfloat and pychop side by side when installed"),
    "kernels": ("every reduction order (fp16/bf16 data) vs numpy sum, peak memory, 16-bit accumulators "
                "vs naive loops; block_fma matmul vs numpy matmul"),
    "layernorm": "eager and every fusion preset's layernorm (4096x4096 fp16) vs a numpy float32 layernorm",
    "claims": "1000 layernorm trials (64x1024 fp16) in eager, fused and reference",
    "faithfulness": "numlab's predictions vs real torch eager and torch.compile (needs torch)",
    "mma": "the matrix-unit model (A100/H100 presets) 1024^3 fp16 vs numpy float64 matmul",
    "scaled": "MX/NV/DeepSeek block-scaled quantise+dequantise 4096x4096 vs ml_dtypes' plain cast",
    "bounds": ("contract_bound vs a fused run of the same graph (target <= 3x), and the tightness "
               "max bound / max observed error of sampled contract implementations for every zoo model"),
    "bugs": ("which claim catches which bug: every contract-breaking kernel of numlab.testing.kernels "
             "against every claim that runs on outputs, detection rates over seeds"),
    "demo": "wall and CPU time of one `numlab demo` run (and --quick) in a fresh interpreter",
    "scaling": "time per element and peak memory from 10^5 to 10^7 elements (10^8 with --large)",
}
# CPU flags that decide speed (SIMD width, float16 conversion, FMA) or bits (FMA
# contraction, bf16/fp16 arithmetic instructions)
FLAG_PREFIXES = ("avx", "fma", "f16c", "amx", "sse4_2", "asimd", "sve", "fphp", "bf16")


def _cpu_info() -> tuple[str, list[str]]:
    """(CPU model name, relevant flags) from /proc/cpuinfo, or platform's answer."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, val = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "hardware") and model in ("", platform.machine(), platform.processor()):
                    model = val.strip()
                elif key in ("flags", "features") and not flags:
                    flags = sorted(f for f in val.split() if f.startswith(FLAG_PREFIXES))
    except OSError:
        pass
    return model, flags


def machine_header() -> str:
    """One paragraph naming the machine a bench ran on."""
    model, flags = _cpu_info()
    load = " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    try:  # the installed version, without importing numba (NUMLAB_ACCEL=0 never imports it)
        accel = f"numba {importlib.metadata.version('numba')}" + ("" if _accel.enabled()
                                                                   else " (disabled: NUMLAB_ACCEL=0)")
    except importlib.metadata.PackageNotFoundError:
        accel = "numba not installed (numpy kernels only)"
    blas = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "default"
    return "\n".join([
        f"machine: {model}; {os.cpu_count()} logical cpus; load average {load}",
        f"flags: {' '.join(flags) or '(none reported)'}",
        f"python {platform.python_version()}, numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
        f"{accel}; BLAS threads: {blas}",
    ])


@dataclass(frozen=True)
class Measure:
    """One measured figure with its target: ``value`` (a ratio to the baseline timed in
    the same run, or a peak-memory ratio) against ``target`` (met when ``value <= target``).
    ``what`` groups the figures of one summary row."""

    what: str
    value: float
    target: float
    unit: str = "×"


class Section(str):
    """A target's printed table, carrying the :class:`Measure` s behind its targets."""

    measures: tuple = ()

    def __new__(cls, text: str, measures=()):
        s = super().__new__(cls, text)
        s.measures = tuple(measures)
        return s


def summary_rows(measures) -> list[tuple[str, str, str]]:
    """``(what, measured, target)`` per group of :class:`Measure` s, in first-seen order:
    the range of values, and for a missed target by how much its worst value misses."""
    groups: dict = {}
    for m in measures:
        groups.setdefault(m.what, []).append(m)
    rows = []
    for what, ms in groups.items():
        lo, hi = min(m.value for m in ms), max(m.value for m in ms)
        target, u = min(m.target for m in ms), ms[0].unit
        measured = f"{lo:.2f}{u}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}{u}"
        if hi > target:
            measured += f" (missed by {100 * (hi / target - 1):.0f}%)"
        rows.append((what, measured, f"≤ {target:g}{u}"))
    return rows


SUMMARY_BEGIN = "<!-- bench summary -->"
SUMMARY_END = "<!-- /bench summary -->"


def summary_markdown(head: str, sections, argv) -> str:
    """The README's performance table: the machine, the command, one row per target group."""
    cmd = "numlab " + " ".join(argv) if argv else "numlab bench"
    machine = head.splitlines()
    lines = [SUMMARY_BEGIN, f"Measured by `{cmd}` (written by its `--readme`; do not edit by hand) on:", "",
             "```text", *machine, "```", "", "| what | measured | target |", "|---|---|---|"]
    lines += [f"| {w} | {m} | {t} |" for w, m, t in
              summary_rows([m for _, s in sections for m in getattr(s, "measures", ())])]
    return "\n".join(lines + [SUMMARY_END])


def replace_summary(text: str, block: str, path: str) -> str:
    """``text`` with its summary block (between the two markers) replaced by ``block``."""
    i, j = text.find(SUMMARY_BEGIN), text.find(SUMMARY_END)
    if i < 0 or j < i:
        raise ValueError(f"--readme {path!r} has no {SUMMARY_BEGIN} ... {SUMMARY_END} block to replace")
    return text[:i] + block + text[j + len(SUMMARY_END):]


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
    p.add_argument("--large", action="store_true",
                   help="scaling: add 10^8 elements (about 1.5 GB of memory, a minute or two)")
    p.add_argument("--markdown", metavar="PATH",
                   help="also write the run as a markdown performance section to PATH")
    p.add_argument("--readme", metavar="PATH",
                   help="replace the performance table between the bench-summary markers of PATH "
                        "(the README) by this run's (needs --force)")
    p.add_argument("--force", action="store_true",
                   help="overwrite the --markdown file if it exists; rewrite the --readme table")
    p.set_defaults(func=_run)


def _run(args) -> int:
    targets = args.targets or list(TARGETS)
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"bench target {t!r} is unknown; valid targets: {list(TARGETS)}")
    md = getattr(args, "markdown", None)
    if md and os.path.exists(md) and not getattr(args, "force", False):
        raise FileExistsError(f"--markdown {md!r} exists; pass --force to overwrite it")
    readme = getattr(args, "readme", None)
    if readme:
        if not os.path.exists(readme):
            raise FileNotFoundError(f"--readme {readme!r} does not exist")
        if not getattr(args, "force", False):
            raise FileExistsError(f"--readme {readme!r}: rewriting its performance table needs --force")
        replace_summary(Path(readme).read_text(), "", readme)  # the markers are there: fail before the run
    head = machine_header()
    print(head)
    sections = []
    for t in targets:
        try:
            mod = importlib.import_module(f"numlab.bench.{t}")
        except ModuleNotFoundError as exc:
            if exc.name != f"numlab.bench.{t}":
                raise
            print(f"== bench {t}: not available in this build")
            continue
        print(f"== bench {t}")
        kw = {"large": getattr(args, "large", False)} if "large" in inspect.signature(mod.main).parameters else {}
        sections.append((t, mod.main(quick=args.quick, **kw)))
    if md:
        with open(md, "w") as fh:
            fh.write(to_markdown(head, sections, sys.argv[1:]))
        print(f"wrote {md}")
    if readme:
        text = Path(readme).read_text()
        with open(readme, "w") as fh:
            fh.write(replace_summary(text, summary_markdown(head, sections, sys.argv[1:]), readme))
        print(f"rewrote the performance table of {readme}")
    return 0


def to_markdown(head: str, sections: list[tuple[str, str]], argv: list[str]) -> str:
    """The README performance section: the machine, then each target's table."""
    cmd = "numlab " + " ".join(argv) if argv else "numlab bench"
    out = ["## Performance", "",
           f"Measured by one run of `{cmd}`; every ratio's baseline (numpy, ml_dtypes) "
           "was timed in the same run.", "", "```text", head, "```", ""]
    for t, table in sections:
        out += [f"### {t}", "", TARGETS[t], "", "```text", (table or "").rstrip(), "```", ""]
    return "\n".join(out)
