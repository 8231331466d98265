"""``numlab bench rounding``: round_to on 10^7 values, every rounding mode, for
FP16, BF16, FP8_E4M3 and FP8_E5M2, as ratios to a float32 copy timed in the
same run, with the peak memory of one call.

Inputs (float32 unless said):

* ``in-range``: per format, magnitudes log-uniform in
  [2 * smallest_normal, max / 2] with random signs and full float32
  significands (only the bit path runs);
* ``mixed``: the same with 1% of the values log-uniform in
  [2**-149, 2**-14] (fp32 and fp16 subnormals, below e4m3's smallest normal)
  and 1% uniform in +-[6e4, 7e4] (around fp16's overflow threshold; all of
  them overflow e4m3): every chunk holds values the in-range bit trick does
  not cover;
* ``random bits``: uniformly random float32 bit patterns (88% of them
  outside fp16's and e4m3's normal range, 0.4% NaN);
* ``float64``: the ``mixed`` values times (1 + 2**-30) in float64, rounded
  directly (no double rounding); the ratio is to ml_dtypes' float64 ->
  bfloat16 cast (which rounds through float32 and so double-rounds).

Every timing is the best of ``repeat`` runs after a warm-up, each run of
``round_to`` timed alternately with its baseline (``x.copy()`` or the
ml_dtypes cast) so that both see the same machine load.  ``peak x`` is
tracemalloc's peak of one call (numpy reports its buffers to tracemalloc)
divided by the input's size; the output is part of it.

Targets (issue "near the memory floor"): in-range RNE <= 2.5x a copy, other
deterministic modes <= 3x, stochastic <= 4x; random bits every mode <= 5x;
float64 -> bf16 <= 2x ml_dtypes' cast; peak <= 2x the input everywhere.
The ``mixed`` rows have no target of their own (they show the cost of
out-of-range values in every chunk).

Other emulators (when installed): gfloat (``round_ndarray``, OCP e4m3/e5m2,
binary16, bfloat16; sat=False) and pychop (``Chop(exp_bits, sig_bits, rmode)``,
IEEE-like formats only: not OCP e4m3, whose top binade holds numbers and no
inf) on 10^5 values (``--quick``: 10^4) of the in-range and random-bit inputs,
every deterministic mode they offer: time as a multiple of numlab's on the same
values, and their agreement with numlab (values equal, signs of zeros equal,
NaN where numlab has NaN).  qtorch needs a matching torch build and is only
reported as installed or not.
"""

from __future__ import annotations

import importlib.util
import time
import tracemalloc

import ml_dtypes
import numpy as np

from ..formats import BF16, FP8_E4M3, FP8_E5M2, FP16
from ..rounding import ROUNDINGS, round_to
from . import Measure, Section, best_of

TARGET_IN_RANGE = {"rne": 2.5, "rtz": 3.0, "up": 3.0, "down": 3.0, "odd": 3.0, "stochastic": 4.0}
TARGET_RANDOM = 5.0
TARGET_FLOAT64 = 2.0
TARGET_PEAK = 2.0
OTHER_EMULATORS = ("gfloat", "pychop", "qtorch")


def make_data(n: int, seed: int = 0) -> np.ndarray:
    """The ``mixed`` input (float32), see the module docstring."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 100
    k = n // 100
    i = rng.permutation(n)
    sign = rng.choice([-1.0, 1.0], size=2 * k)
    x[i[:k]] = sign[:k] * 2.0 ** rng.uniform(-149, -14, k)
    x[i[k:2 * k]] = sign[k:] * rng.uniform(6e4, 7e4, k)
    return x.astype(np.float32)


def make_inputs(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Every input of the bench by name (see the module docstring)."""
    rng = np.random.default_rng(seed + 1)
    return {
        "in-range": None,  # per format: in_range_data(fmt, n)
        "mixed": make_data(n, seed),
        "random bits": rng.integers(0, 2**32, n, dtype=np.uint32).view(np.float32),
    }


def in_range_data(fmt, n: int, seed: int = 2) -> np.ndarray:
    """float32 values inside ``fmt``'s normal range (see the module docstring)."""
    rng = np.random.default_rng(seed)
    lo, hi = np.log2(2 * fmt.smallest_normal), np.log2(fmt.max / 2)
    x = np.exp2(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)
    return x.astype(np.float32)


def _paired_best(f, g, repeat: int) -> tuple[float, float]:
    """Best times of ``f`` and ``g`` run alternately ``repeat`` times each."""
    f()
    g()
    bf = bg = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        t1 = time.perf_counter()
        g()
        t2 = time.perf_counter()
        bf, bg = min(bf, t1 - t0), min(bg, t2 - t1)
    return bf, bg


def peak_ratio(f, nbytes: int) -> float:
    """tracemalloc's peak during ``f()`` divided by ``nbytes``."""
    tracemalloc.start()
    try:
        f()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / nbytes


def _target(data: str, rounding: str) -> float | None:
    if data == "in-range":
        return TARGET_IN_RANGE[rounding]
    if data == "random bits":
        return TARGET_RANDOM
    return None


def _row(label, rounding, t, tb, target, peak) -> str:
    ratio = t / tb
    ok = "—" if target is None else ("yes" if ratio <= target and peak <= TARGET_PEAK else "NO")
    tgt = "" if target is None else f"{target:.1f}x"
    return (f"{label:<22} {rounding:<11} {t * 1e3:8.1f} {tb * 1e3:8.1f} {ratio:7.2f} {tgt:>7}"
            f" {peak:7.2f}  {ok}")


def _gfloat_fn(fmt, rounding):
    """``f(x)`` rounding float32 ``x`` with gfloat, or None (format/mode not offered)."""
    import gfloat  # optional reference emulator
    import gfloat.formats as gf  # optional reference emulator

    fi = {FP16.name: gf.format_info_binary16, BF16.name: gf.format_info_bfloat16,
          FP8_E4M3.name: gf.format_info_ocp_e4m3, FP8_E5M2.name: gf.format_info_ocp_e5m2}.get(fmt.name)
    mode = {"rne": gfloat.RoundMode.TiesToEven, "rtz": gfloat.RoundMode.TowardZero,
            "up": gfloat.RoundMode.TowardPositive, "down": gfloat.RoundMode.TowardNegative}.get(rounding)
    if fi is None or mode is None:
        return None
    return lambda x: gfloat.round_ndarray(fi, x.astype(np.float64), mode, sat=False)


def _pychop_fn(fmt, rounding):
    """``f(x)`` rounding float32 ``x`` with pychop, or None (format/mode not offered)."""
    from pychop import Chop  # optional reference emulator

    bits = {FP16.name: (5, 10), BF16.name: (8, 7), FP8_E5M2.name: (5, 2)}.get(fmt.name)
    rmode = {"rne": 1, "up": 2, "down": 3, "rtz": 4, "odd": 9}.get(rounding)
    if bits is None or rmode is None:
        return None
    ch = Chop(exp_bits=bits[0], sig_bits=bits[1], rmode=rmode, subnormal=True)
    return lambda x: np.asarray(ch(x.astype(np.float64)))


def agreement(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Share of values where ``theirs`` equals ``ours``: same value and sign bit, or
    both NaN."""
    a = np.asarray(ours, dtype=np.float64)
    b = np.asarray(theirs, dtype=np.float64)
    same = ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))
    return float(np.mean(same)) if a.size else 1.0


def _others_table(n: int, repeat: int) -> list[str]:
    """Side by side with gfloat and pychop (see the module docstring)."""
    makers = {}
    if importlib.util.find_spec("gfloat") is not None:
        makers["gfloat"] = _gfloat_fn
    if importlib.util.find_spec("pychop") is not None:
        makers["pychop"] = _pychop_fn
    if not makers:
        return []
    rng = np.random.default_rng(3)
    data = {"random bits": rng.integers(0, 2**32, n, dtype=np.uint32).view(np.float32)}
    lines = ["", f"other emulators on {n:.0e} values: time / numlab's time, agreement with numlab",
             f"{'input / format':<22} {'rounding':<9}" + "".join(f" {m + ' x':>10} {'agree':>8}" for m in makers)]
    with np.errstate(all="ignore"):
        for label in ("in-range", "random bits"):
            for fmt in (FP16, BF16, FP8_E4M3, FP8_E5M2):
                x = in_range_data(fmt, n) if label == "in-range" else data[label]
                for rounding in ("rne", "rtz", "up", "down", "odd"):
                    fns = {m: mk(fmt, rounding) for m, mk in makers.items()}
                    if all(f is None for f in fns.values()):
                        continue
                    ours = round_to(x, fmt, rounding)
                    t_ours = best_of(lambda x=x, fmt=fmt, rounding=rounding: round_to(x, fmt, rounding), repeat)
                    cells = ""
                    for _name, f in fns.items():
                        if f is None:
                            cells += f" {'-':>10} {'-':>8}"
                            continue
                        try:
                            theirs = f(x)
                            t = best_of(lambda f=f, x=x: f(x), 1, warmup=False)  # slow: one timed call
                            cells += f" {t / t_ours:10.1f} {100 * agreement(ours, theirs):7.3f}%"
                        except Exception as exc:  # report, do not stop the bench
                            cells += f" {'error':>10} {type(exc).__name__[:8]:>8}"
                    lines.append(f"{label + ' ' + fmt.name:<22} {rounding:<9}{cells}")
    return lines


def _others_line() -> str:
    missing = [m for m in OTHER_EMULATORS if importlib.util.find_spec(m) is None]
    found = [m for m in OTHER_EMULATORS if m not in missing]
    parts = []
    if missing:
        parts.append(f"skipped {', '.join(missing)}: not installed")
    if found:
        shown = [m for m in found if m in ("gfloat", "pychop")]
        if shown:
            parts.append(f"compared {', '.join(shown)} (table above)")
        if "qtorch" in found:
            parts.append("found qtorch: not compared (its CPU kernels need a matching torch build)")
    return "; ".join(parts)


def _measures(data: str, rounding: str, ratio: float, target, peak: float) -> list:
    """The summary figures of one row (see :class:`numlab.bench.Measure`)."""
    if target is None:
        return []
    if data == "float64":
        what = "`round_to` float64 → bf16, RNE (no double rounding) vs ml_dtypes' cast"
    elif data == "random bits":
        kind = "stochastic" if rounding == "stochastic" else "deterministic modes"
        what = f"`round_to`, random float32 bit patterns, fp16/bf16/fp8 e4m3/e5m2, {kind}"
    else:
        kind = {"rne": "RNE", "stochastic": "stochastic"}.get(rounding, "rtz/up/down/odd")
        what = f"`round_to`, in-range values, fp16/bf16/fp8 e4m3/e5m2, {kind}"
    return [Measure(what + " (vs a float32 copy)" if data != "float64" else what, ratio, target),
            Measure("peak memory of one `round_to` call / input bytes", peak, TARGET_PEAK)]


def main(quick: bool = False) -> str:
    n = 10**6 if quick else 10**7
    repeat = 2 if quick else 5
    inputs = make_inputs(n)
    with open("/proc/loadavg") as fh:
        load = " ".join(fh.read().split()[:3])
    head = f"{'input / format':<22} {'rounding':<11} {'ms':>8} {'base ms':>8} {'ratio':>7} {'target':>7} {'peak x':>7}  ok"
    lines = [
        f"round_to on {n:.0e} values; best of {repeat}, each run paired with its baseline; "
        f"load average {load}",
        "base = float32 copy (float64 rows: ml_dtypes' float64 -> bfloat16 cast); "
        "peak x = tracemalloc peak / input bytes",
        "",
        head,
    ]
    rng = np.random.default_rng(1)
    measures: list = []
    with np.errstate(all="ignore"):
        for data, x_all in inputs.items():
            for fmt in (FP16, BF16, FP8_E4M3, FP8_E5M2):
                x = in_range_data(fmt, n) if x_all is None else x_all
                for rounding in ROUNDINGS:
                    kw = {"rng": rng} if rounding == "stochastic" else {}
                    f = lambda fmt=fmt, rounding=rounding, kw=kw, x=x: round_to(x, fmt, rounding, **kw)  # noqa: E731
                    t, tb = _paired_best(f, lambda x=x: x.copy(), repeat)
                    peak = peak_ratio(f, x.nbytes)
                    lines.append(_row(f"{data} {fmt.name}", rounding, t, tb, _target(data, rounding), peak))
                    measures += _measures(data, rounding, t / tb, _target(data, rounding), peak)
        x64 = inputs["mixed"].astype(np.float64) * (1 + 2.0**-30)
        for rounding in ROUNDINGS:
            kw = {"rng": rng} if rounding == "stochastic" else {}
            f = lambda rounding=rounding, kw=kw: round_to(x64, BF16, rounding, **kw)  # noqa: E731
            t, tb = _paired_best(f, lambda: x64.astype(ml_dtypes.bfloat16), repeat)
            peak = peak_ratio(f, x64.nbytes)
            lines.append(_row("float64 bf16", rounding, t, tb,
                              TARGET_FLOAT64 if rounding == "rne" else None, peak))
            measures += _measures("float64", rounding, t / tb, TARGET_FLOAT64 if rounding == "rne" else None,
                                  peak)
        tc64 = best_of(lambda: x64.copy(), repeat)
    lines.append(f"(float64 copy: {tc64 * 1e3:.1f} ms)")
    lines += _others_table(10**4 if quick else 10**5, repeat)
    other = _others_line()
    if other:
        lines.append(other)
    table = "\n".join(lines)
    print(table)
    return Section(table, measures)
