"""round_to: bit-exact against ml_dtypes/numpy casts (RNE) and against the
independent exact Fraction reference in tests/_oracles.py (every mode).

Three code paths are checked: ``round_to`` (which picks the fast path), the
integer bit path ``_round_bits`` and the readable scale-round-scale path
``_round_generic``.
"""

from __future__ import annotations

import math
import tracemalloc
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, round_exact, stochastic_split
from hypothesis import given
from hypothesis import strategies as st

import numlab as nl
from numlab.formats import Format
from numlab.rounding import _CHUNK, ROUNDINGS, _random_bits, _round_bits, _round_generic

DET_ROUNDINGS = ("rne", "rtz", "up", "down", "odd")
C5 = Format("c5", p=5, emax=10)  # emin = -9, with subnormals
C4NS = Format("c4ns", p=4, emax=7, subnormals=False)  # no gradual underflow
C3X = Format("c3x", p=3, emax=4, inf=False, nan="extended")  # e4m3fn-like top
C6W = Format("c6w", p=6, emax=127)  # emin = -126: the fp32-subnormal branch
C24 = Format("c24", p=24, emax=15)  # fp32 precision, narrow range: k = 0 bits on float32
CUSTOM = (C5, C4NS, C3X, C6W, C24)
STORAGE = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}
UINT = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


def _rt(x, fmt, mode, **kw):
    return nl.round_to(x, fmt, mode, **kw)


def _bits(x, fmt, mode, rng=None, saturate=False, ftz=False):
    with np.errstate(all="ignore"):
        return _round_bits(x, nl.get_format(fmt), mode, rng, saturate, ftz)


def _generic(x, fmt, mode, rng=None, saturate=False, ftz=False):
    with np.errstate(all="ignore"):
        return _round_generic(x, nl.get_format(fmt), mode, rng, saturate, ftz)


PATHS = {"round_to": _rt, "bits": _bits, "generic": _generic}


def reference(x, fmt, mode, **kw):
    """The exact reference applied elementwise (a test-only scalar loop)."""
    x = np.asarray(x)
    return np.array([round_exact(float(v), fmt, mode, **kw) for v in x.ravel()], dtype=x.dtype).reshape(x.shape)


# ---------------------------------------------------------------------------
# every code, and the neighbourhood of every code, of fp16 and bf16
# ---------------------------------------------------------------------------
def _codes(name):
    dt = STORAGE[name]
    bits = np.dtype(dt).itemsize * 8
    u = {8: np.uint8, 16: np.uint16}[bits]
    return np.arange(2**bits, dtype=u), dt


@pytest.mark.parametrize("name", list(STORAGE))
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_every_code_is_fixed_by_every_mode(name, wdt):
    codes, dt = _codes(name)
    with np.errstate(invalid="ignore"):
        v = codes.view(dt).astype(wdt)
    rng = np.random.default_rng(0)
    for path, f in PATHS.items():
        for mode in ROUNDINGS:
            kw = {"rng": rng} if mode == "stochastic" else {}
            assert_same_bits(f(v, name, mode, **kw), v, nan_equal=True, x=v, what=f"{path} {mode}")


def _neighbour_cases(name, wdt):
    """Inputs around every positive finite code c (value v_c) and the code
    above it, with expectations from integer code arithmetic only:
    (inputs, lower code, upper code, where) where = 0 just above v_c,
    1 just below the midpoint, 2 the midpoint, 3 just above the midpoint."""
    codes, dt = _codes(name)
    with np.errstate(invalid="ignore"):
        vals = codes.view(dt).astype(np.float64)
    half = len(codes) // 2
    pos = np.flatnonzero(np.isfinite(vals[:half]))
    lo_c = pos[:-1]  # the largest finite code has no finite upper neighbour
    lo_v, hi_v = vals[lo_c], vals[lo_c + 1]
    mid = ((lo_v + hi_v) / 2).astype(wdt)  # exact: p + 1 <= 24 bits
    assert np.all(mid.astype(np.float64) == (lo_v + hi_v) / 2)
    inf = wdt(np.inf)
    xs = [np.nextafter(lo_v.astype(wdt), inf), np.nextafter(mid, wdt(0)), mid, np.nextafter(mid, inf)]
    x = np.concatenate(xs)
    where = np.repeat(np.arange(4), len(lo_c))
    lo = np.tile(lo_c, 4)
    return x, lo, where, vals


@pytest.mark.parametrize("name", ["fp16", "bf16"])
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_neighbours_of_every_code(name, wdt):
    x, lo, where, vals = _neighbour_cases(name, wdt)
    hi = lo + 1
    even = np.where(lo % 2 == 0, lo, hi)
    odd = np.where(lo % 2 == 1, lo, hi)
    expect = {
        "rne": np.where(where <= 1, lo, np.where(where == 2, even, hi)),
        "rtz": lo,
        "down": lo,
        "up": hi,
        "odd": odd,
    }
    signbit = len(vals) // 2
    for mode, code in expect.items():
        e_pos = vals[code].astype(wdt)
        e_neg = vals[code + signbit].astype(wdt)  # same magnitude, sign set
        if mode in ("up", "down"):  # directed modes swap for negative inputs
            other = {"up": "down", "down": "up"}[mode]
            e_neg = vals[expect[other] + signbit].astype(wdt)
        for path, f in PATHS.items():
            assert_same_bits(f(x, name, mode), e_pos, nan_equal=True, x=x, what=f"{path} {mode} +")
            assert_same_bits(f(-x, name, mode), e_neg, nan_equal=True, x=-x, what=f"{path} {mode} -")
    # ml_dtypes/numpy agree with the code-arithmetic expectation (fp32 inputs;
    # from float64, ml_dtypes' bf16 cast rounds through float32 -- see below)
    if wdt is np.float32 or name == "fp16":
        ref = x.astype(STORAGE[name]).astype(wdt)
        assert_same_bits(ref, vals[expect["rne"]].astype(wdt), nan_equal=True, x=x, what="ml_dtypes rne")


ML_DTYPES = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2])


def test_ml_dtypes_float64_double_rounds_but_we_do_not():
    """ml_dtypes up to 0.6 casts float64 -> bfloat16 / fp8 through float32, which
    rounds twice (0.7 rounds directly); round_to rounds float64 directly
    (checked against Fraction) whatever ml_dtypes is installed."""
    m = 1 + 2.0**-8 + 2.0**-7  # midpoint between 1 + 2**-7 (odd code) and 1 + 2**-6
    x = np.array([np.nextafter(m, 0.0)])
    assert float(round_exact(float(x[0]), nl.BF16, "rne")) == 1 + 2.0**-7
    assert nl.round_to(x, "bf16")[0] == 1 + 2.0**-7
    # the installed ml_dtypes decides its own bits: pinned per version
    want = 1 + 2.0**-6 if ML_DTYPES < (0, 7) else 1 + 2.0**-7  # double rounding / direct
    assert float(x.astype(ml_dtypes.bfloat16)[0]) == want, ml_dtypes.__version__


# ---------------------------------------------------------------------------
# random bit patterns vs ml_dtypes (RNE)
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fp32_patterns():
    rng = np.random.default_rng(20260601)
    return rng.integers(0, 2**32, size=1_000_000, dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("name", list(STORAGE))
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_rne_random_fp32_patterns_vs_ml_dtypes(fp32_patterns, name, wdt):
    x = fp32_patterns.astype(wdt)  # exact: every float32 is a float64
    with np.errstate(all="ignore"):
        ref = x.astype(STORAGE[name]).astype(wdt)
    assert_same_bits(nl.round_to(x, name), ref, nan_equal=True, x=x, what="round_to")
    assert_same_bits(_bits(x, name, "rne"), ref, nan_equal=True, x=x, what="bits")
    assert_same_bits(_generic(x[:200_000], name, "rne"), ref[:200_000], nan_equal=True, x=x, what="generic")


@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_bits_path_equals_generic_path_all_modes(fp32_patterns, wdt):
    """The two implementations agree on 2e5 random patterns in every
    deterministic mode and format (the exact reference checks both below)."""
    x = fp32_patterns[:200_000].astype(wdt)
    for fmt in (nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2, nl.TF32, *CUSTOM):
        for mode in DET_ROUNDINGS:
            for kw in ({}, {"saturate": True, "ftz": True}):
                assert_same_bits(_bits(x, fmt, mode, **kw), _generic(x, fmt, mode, **kw), nan_equal=True, x=x, what=f"{fmt} {mode} {kw}")


# ---------------------------------------------------------------------------
# every mode vs the exact reference: edge values and random values
# ---------------------------------------------------------------------------
def _edge_values(fmt, wdt):
    """Grid points near zero, the subnormal/normal boundary, 1 and max, the
    midpoints between them, and the next input-dtype values either side;
    plus overflow thresholds, signed zeros, inf and NaN."""
    sn, mn, mx = fmt.smallest_subnormal, fmt.smallest_normal, fmt.max
    anchors = [0.0, sn, 2 * sn, 3 * sn, mn / 2, mn - sn, mn, mn + 2 * sn * (2 ** (fmt.p - 1) if not fmt.subnormals else 1),
               1.0, 1.5, 3.0, mx / 2, mx]
    g = set()
    for a in anchors:
        v = a
        for _ in range(3):
            g.add(v)
            v = float(nl.next_up(v, fmt)) if np.isfinite(v) else v
        v = a
        for _ in range(3):
            g.add(v)
            v = float(nl.next_down(v, fmt)) if v > 0 else v
    grid = np.array(sorted(v for v in g if np.isfinite(v) and 0 <= v <= mx))
    top = 2.0 ** (fmt.emax + 1)
    nxt = float(nl.next_up(grid[-1], fmt))
    grid_up = np.append(grid, top)
    mids = (grid_up[:-1] + grid_up[1:]) / 2
    quarter = (grid_up[:-1] * 3 + grid_up[1:]) / 4
    pts = np.concatenate([grid, mids, quarter, [mx + (top - mx) / 2, top, 2 * top, 1e30, sn / 2, sn / 4, sn * 0.75]]).astype(wdt)
    inf = wdt(np.inf)
    pts = np.concatenate([pts, np.nextafter(pts, inf), np.nextafter(pts, wdt(0))])
    pts = pts[np.isfinite(pts)]
    pts = np.concatenate([pts, -pts, np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=wdt)])
    del nxt
    return pts


def _random_values(fmt, wdt, n, seed):
    """Random values with full input-dtype significands spread log-uniformly
    from below the smallest subnormal to above max."""
    rng = np.random.default_rng(seed)
    lo = math.log2(fmt.smallest_subnormal) - 3
    hi = math.log2(fmt.max) + 2
    e = rng.uniform(lo, hi, n)
    sig = rng.uniform(1, 2, n)
    x = (np.sign(rng.uniform(-1, 1, n)) * sig * 2.0 ** np.floor(e)).astype(wdt)
    if wdt is np.float32:  # plus raw fp32 patterns (all exponents, NaN payloads)
        x = np.concatenate([x, rng.integers(0, 2**32, n // 4, dtype=np.uint32).view(np.float32)])
    return x


ALL_FMTS = (nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2, nl.TF32, nl.FP32, *CUSTOM)


@pytest.mark.parametrize("fmt", ALL_FMTS, ids=str)
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_every_mode_vs_exact_reference(fmt, wdt):
    x = np.concatenate([_edge_values(fmt, wdt), _random_values(fmt, wdt, 1500, 7)])
    for mode in DET_ROUNDINGS:
        for kw in ({}, {"saturate": True}, {"ftz": True}):
            ref = reference(x, fmt, mode, **kw)
            for path, f in PATHS.items():
                assert_same_bits(f(x, fmt, mode, **kw), ref, nan_equal=True, x=x, what=f"{path} {fmt} {mode} {kw}")


@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_overflow_thresholds_each_mode(wdt):
    """Spot values with hand-computed answers (IEEE 754-2019 section 7.4)."""
    inf, nan = np.inf, np.nan
    # fp16: max 65504, next grid point 65536, midpoint 65520
    cases = {
        ("fp16", "rne"): [(65519.0, 65504.0), (65520.0, inf), (-65520.0, -inf)],
        ("fp16", "rtz"): [(65535.0, 65504.0), (1e6, 65504.0), (-1e6, -65504.0)],
        ("fp16", "up"): [(65505.0, inf), (-1e6, -65504.0)],
        ("fp16", "down"): [(65505.0, 65504.0), (-65505.0, -inf)],
        ("fp16", "odd"): [(65505.0, 65504.0), (-1e9, -65504.0)],
        # e4m3fn: max 448 (significand 1110, even), 480 is NaN code; midpoint 464 ties to 448
        ("fp8_e4m3", "rne"): [(464.0, 448.0), (464.5, nan), (1e4, nan), (-464.5, nan)],
        ("fp8_e4m3", "rtz"): [(479.0, 448.0), (1e4, 448.0)],
        ("fp8_e4m3", "up"): [(448.5, nan), (-1e4, -448.0)],
        ("fp8_e4m3", "odd"): [(449.0, 448.0)],
        # bf16: max (2 - 2**-7) * 2**127
        ("bf16", "rne"): [(3.3895313892515355e38, 3.3895313892515355e38), (3.40e38, inf)],
    }
    for (name, mode), pairs in cases.items():
        x = np.array([p[0] for p in pairs], dtype=wdt)
        exp = np.array([p[1] for p in pairs], dtype=wdt)
        for path, f in PATHS.items():
            assert_same_bits(f(x, name, mode), exp, nan_equal=True, x=x, what=f"{path} {name} {mode}")
        assert_same_bits(reference(x, nl.get_format(name), mode), exp, nan_equal=True, x=x, what="reference")
    # saturation: every mode gives +-max; inf input too for e4m3fn (no inf)
    x = np.array([1e6, -1e6, 65520.0, np.inf, -np.inf, np.nan], dtype=wdt)
    for mode in DET_ROUNDINGS:
        assert_same_bits(nl.round_to(x, "fp16", mode, saturate=True), [65504, -65504, 65504, inf, -inf, nan], nan_equal=True)
        assert_same_bits(nl.round_to(x, "fp8_e4m3", mode, saturate=True), [448, -448, 448, 448, -448, nan], nan_equal=True)
        assert_same_bits(nl.round_to(x, "fp8_e4m3", mode), [*((nan, nan) if mode == "rne" else nl.round_to(x[:2], "fp8_e4m3", mode)), nan if mode in ("rne", "up") else 448, nan, nan, nan], nan_equal=True)


def test_specials_and_signed_zero():
    for mode in ROUNDINGS:
        kw = {"rng": np.random.default_rng(0)} if mode == "stochastic" else {}
        for wdt in (np.float32, np.float64):
            x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1e-30, 1e-30], dtype=wdt)
            for name in ("fp16", "bf16", "fp8_e5m2"):
                y = nl.round_to(x, name, mode, **kw)
                assert y.dtype == wdt
                assert np.signbit(y[1]) and y[1] == 0 and not np.signbit(y[0])
                assert y[2] == np.inf and y[3] == -np.inf and np.isnan(y[4])
                assert np.signbit(y[5]) and not np.signbit(y[6])  # tiny keeps its sign
            y = nl.round_to(x, "fp8_e4m3", mode, **kw)
            assert np.isnan(y[2]) and np.isnan(y[3]) and np.isnan(y[4])  # e4m3fn: no inf


def test_subnormals_and_ftz():
    # fp16 smallest subnormal 2**-24; 2**-25 is a tie -> 0 (even); just above -> 2**-24
    x = np.array([2.0**-25, np.nextafter(2.0**-25, 1), 3 * 2.0**-26, 2.0**-24 * 1023, 2.0**-14 * 0.99], np.float64)
    assert nl.round_to(x, "fp16").tolist() == [0.0, 2.0**-24, 2.0**-24, 1023 * 2.0**-24, 1014 * 2.0**-24]
    y = nl.round_to(x, "fp16", ftz=True)
    assert y.tolist() == [0.0] * 5
    assert nl.round_to(-2.0**-20, "fp16", ftz=True) == 0 and np.signbit(nl.round_to(-2.0**-20, "fp16", ftz=True))
    assert nl.round_to(2.0**-14, "fp16", ftz=True) == 2.0**-14  # smallest normal stays
    # a format without subnormals rounds onto {0, 2**emin} below 2**emin
    assert nl.round_to(np.array([0.6, 0.5, 0.4]) * 2.0**-6, C4NS).tolist() == [2.0**-6, 0.0, 0.0]
    assert nl.round_to(1e-30, C4NS, "up") == 2.0**-6


# ---------------------------------------------------------------------------
# stochastic rounding
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", [nl.FP16, nl.BF16, nl.FP8_E4M3, C5, C4NS], ids=str)
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_stochastic_picks_a_neighbour_and_is_reproducible(fmt, wdt):
    x = _random_values(fmt, wdt, 3000, 11)
    x = x[np.isfinite(x) & (np.abs(x) < fmt.max)]
    y1 = nl.round_to(x, fmt, "stochastic", rng=np.random.default_rng(123))
    y2 = nl.round_to(x, fmt, "stochastic", rng=np.random.default_rng(123))
    assert_same_bits(y1, y2, nan_equal=True, x=x, what="same seed, same bits")
    y3 = nl.round_to(x, fmt, "stochastic", rng=np.random.default_rng(124))
    assert not np.array_equal(y1, y3)
    for path, f in (("round_to", _rt), ("generic", _generic)):
        y = f(x, fmt, "stochastic", rng=np.random.default_rng(5))
        lo = np.empty_like(x)
        hi = np.empty_like(x)
        for i, v in enumerate(x):
            lo[i], hi[i], _ = stochastic_split(float(v), fmt)
        hi_r = np.array([round_exact(float(v), fmt, "stochastic", up_choice=True) for v in x], wdt)
        ok = (y == lo) | (y == hi_r)
        assert ok.all(), (path, x[~ok][:5], y[~ok][:5])
        assert np.array_equal(np.signbit(y), np.signbit(x))


@pytest.mark.parametrize("wdt", [np.float32, np.float64])
@pytest.mark.parametrize("path", ["round_to", "generic"])
def test_stochastic_probability_equals_fractional_distance(wdt, path):
    """P(round up) = fractional distance: binomial counts within 5 sigma
    (fixed seed; N = 40000 draws per value)."""
    f = PATHS[path]
    n = 40_000
    cases = []
    for fmt, base in ((nl.FP16, 1.0), (nl.BF16, -3.0), (nl.FP8_E4M3, 20.0), (nl.FP16, 2.0**-20)):
        ulp = float(nl.ulp(base, fmt))
        for frac in (1 / 16, 0.25, 0.5, 0.75, 15 / 16):
            cases.append((fmt, base + math.copysign(frac * ulp, base), frac, base))
    cases.append((nl.FP16, 2.0**-24 / 3, 1 / 3, 0.0))  # below the smallest subnormal
    pcg = np.random.default_rng(2024)
    mt = np.random.Generator(np.random.MT19937(5))  # 32-bit raw outputs: another code path
    for k, (fmt, v, frac, base) in enumerate(cases):
        x = np.full(n, v, dtype=wdt)
        y = f(x, fmt, "stochastic", rng=mt if k % 2 else pcg)
        ups = int(np.count_nonzero(y != base))
        if wdt is np.float32:  # exact fraction of the float32 input
            _, _, frac = stochastic_split(float(np.float32(v)), fmt)
        frac = float(frac)
        tol = 5 * math.sqrt(n * frac * (1 - frac)) + 1
        assert abs(ups - n * frac) <= tol, (fmt, v, frac, ups / n)


def test_stochastic_mean_is_unbiased():
    rng = np.random.default_rng(3)
    x = rng.uniform(1, 2, 20000).astype(np.float32)
    reps = 50
    acc = np.zeros(x.size)
    for _ in range(reps):
        acc += nl.round_to(x, "bf16", "stochastic", rng=rng)
    err = acc / reps - x
    # per element sd <= ulp/2/sqrt(reps); the mean over 20000 elements is ~0
    assert abs(err.mean()) < 5 * (2.0**-7 / 2) / math.sqrt(reps * x.size)


# ---------------------------------------------------------------------------
# input handling and errors
# ---------------------------------------------------------------------------
def test_dtypes_shapes_scalars():
    assert isinstance(nl.round_to(0.1, "fp16"), np.float64)
    assert nl.round_to(0.1, "fp16") == float(np.float16(0.1))
    assert nl.round_to(np.float32(0.1), "bf16").dtype == np.float32
    # Python ints and Fractions are rounded once, not through float64 RNE first
    big = 2**60 - 1  # float(big) == 2**60, but truncation to bf16 gives (2 - 2**-7) * 2**59
    assert nl.round_to(big, "bf16", "rtz") == (2 - 2.0**-7) * 2.0**59 == round_exact(big, nl.BF16, "rtz")
    f = Fraction(2**40 + 1, 2**40)  # just above 1: up must move
    assert nl.round_to(f, "fp16", "up") == 1 + 2.0**-10
    assert nl.round_to(3, "fp8_e4m3") == 3.0 and nl.round_to(2**200, "bf16") == np.inf
    assert nl.round_to(-(2**2000), "fp16", "rtz") == -65504.0 and nl.round_to(2**2000, "fp16") == np.inf
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    y = nl.round_to(x[:, ::2, ::-1], "fp8_e4m3", "up")  # non-contiguous view
    assert y.shape == (2, 2, 4)
    assert_same_bits(y, reference(x[:, ::2, ::-1], nl.FP8_E4M3, "up"), nan_equal=True)
    h = np.array([1.5, 65504], np.float16)
    assert nl.round_to(h, "fp16").dtype == np.float32  # storage dtypes widen to float32
    assert nl.round_to(np.zeros(0, np.float32), "fp16", "odd").shape == (0,)
    assert nl.round_to(x, "fp32").dtype == np.float32 and nl.round_to(x.astype(np.float64), "fp64").dtype == np.float64


@pytest.mark.parametrize(
    ("call", "exc", "pattern"),
    [
        (lambda: nl.round_to(1.0, "fp17"), ValueError, r"fmt='fp17' is not a known format; valid names: \[.*'fp16'"),
        (lambda: nl.round_to(1.0, "fp16", "nearest"), ValueError, r"rounding='nearest' is not a rounding mode; valid modes: \['rne', 'rtz'"),
        (lambda: nl.round_to(np.arange(3), "fp16"), TypeError, r"x must be a float32 or float64 array.*got dtype int64"),
        (lambda: nl.round_to(np.ones(2, complex), "fp16"), TypeError, r"x must be real floating point, got complex dtype complex128"),
        (lambda: nl.round_to(True, "fp16"), TypeError, r"x must be real floating point, got bool"),
        (lambda: nl.round_to(1.0, "fp16", "stochastic"), ValueError, r"rounding='stochastic' needs rng=np.random.default_rng\(seed\)"),
        (lambda: nl.round_to(1.0, "fp16", "stochastic", rng=42), TypeError, r"rng must be a numpy.random.Generator.*got int"),
        (lambda: nl.round_to(1.0, "fp16", rng=np.random.RandomState(0)), TypeError, r"rng must be a numpy.random.Generator.*got RandomState"),
    ],
)
def test_bad_input_messages(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# ---------------------------------------------------------------------------
# hypothesis: arbitrary floats (edge-seeking) against the exact reference
# ---------------------------------------------------------------------------


@given(
    st.lists(st.floats(width=64), min_size=1, max_size=8),
    st.lists(st.floats(width=32), min_size=1, max_size=8),
    st.sampled_from(ALL_FMTS),
    st.sampled_from(DET_ROUNDINGS),
    st.booleans(),
    st.booleans(),
)
def test_hypothesis_vs_exact(x64, x32, fmt, mode, saturate, ftz):
    for x in (np.array(x64, np.float64), np.array(x32, np.float32)):
        ref = reference(x, fmt, mode, saturate=saturate, ftz=ftz)
        assert_same_bits(nl.round_to(x, fmt, mode, saturate=saturate, ftz=ftz), ref, nan_equal=True, x=x, what=f"{fmt} {mode}")


def test_float64_to_fp32_rne_equals_numpy_cast():
    """float64 -> fp32 (used for fp32 kernels' scalars): numpy's cast is a
    direct IEEE RNE conversion; 10^6 float64 values spread over fp32's range
    and beyond, plus raw float64 bit patterns."""
    rng = np.random.default_rng(8)
    x = np.concatenate([
        rng.standard_normal(500_000) * 2.0 ** rng.integers(-160, 135, 500_000),
        rng.integers(0, 2**64, 500_000, dtype=np.uint64).view(np.float64),
    ])
    with np.errstate(all="ignore"):
        ref = x.astype(np.float32).astype(np.float64)
    assert_same_bits(nl.round_to(x, "fp32"), ref, nan_equal=True, x=x, what="fp32 rne")


def test_rounding_keyword():
    """``rounding=`` names the rounding mode; a bad one is refused with the valid choices."""
    from numlab import rounding as R

    assert nl.round_to(1 + 2.0**-11, "fp16", rounding="up") == 1 + 2.0**-10
    assert nl.round_to(1 + 2.0**-11, "fp16", rounding="down") == 1.0
    with pytest.raises(ValueError, match=r"^sr='nearest' is not a rounding mode; valid modes: \['rne'"):
        R.check_rounding("nearest", "sr")
    assert R.ROUNDINGS == ("rne", "rtz", "up", "down", "odd", "stochastic")


# ---------------------------------------------------------------------------
# the chunked bit path against the pre-chunking algorithm (kept here, slow)
# ---------------------------------------------------------------------------
def _old_round_bits(a, fmt, rounding, rng, saturate, ftz):
    """The whole-array bit path as it was before chunking: the bit trick on
    every element, then the elements outside [2**emin, max] gathered and fixed
    (overflow rule, inf/NaN) or rounded by ``_round_generic`` (below 2**emin).
    A test-only reference for the chunked ``_round_bits``."""
    w = a.dtype
    U, I = {4: (np.uint32, np.int32), 8: (np.uint64, np.int64)}[w.itemsize]
    nbits, mbits = 8 * w.itemsize, {4: 23, 8: 52}[w.itemsize]
    k = mbits + 1 - fmt.p
    low = U((1 << k) - 1)
    keep = U(((1 << nbits) - 1) ^ int(low))
    hi = int(np.array(fmt.max, dtype=w).view(U))
    sn_bits = int(np.array(fmt.smallest_normal, dtype=w).view(U))
    lo = sn_bits if (w == np.float64 or fmt.emin > -126 or not fmt.subnormals) else 0
    b = np.ascontiguousarray(a).reshape(-1).view(U)
    flat = b.view(w)
    sign, absmask = U(1 << (nbits - 1)), U((1 << (nbits - 1)) - 1)
    mag = b & absmask
    idx = np.flatnonzero(((mag < U(lo)) & (mag != 0)) | (mag > U(hi)))
    if k == 0:
        out = b.copy()
    elif rounding == "rtz":
        out = b & keep
    elif rounding == "rne":
        out = ((((b >> U(k)) & U(1)) + U((1 << (k - 1)) - 1)) + b) & keep
    elif rounding in ("up", "down"):
        neg = (b.view(I) >> I(nbits - 1)).view(U)
        out = (((~neg if rounding == "up" else neg) & low) + b) & keep
    elif rounding == "odd":
        out = ((((b & low) + low) & U(1 << k)) | b) & keep
    else:
        out = ((_random_bits(rng, b.size, U) & low) + b) & keep
    infbits = int(np.array(np.inf, dtype=w).view(U))
    nanbits = int(np.array(np.nan, dtype=w).view(U))
    bi, mi = b[idx], mag[idx]
    tiny, nonfinite = mi < U(lo), mi >= U(infbits)
    r = out[idx]
    neg = (bi & sign) != 0
    over = ~(tiny | nonfinite) & ((r & absmask) > U(hi))
    if saturate or rounding in ("rtz", "odd"):
        to_inf = np.zeros_like(over)
    elif rounding in ("rne", "stochastic"):
        to_inf = np.ones_like(over)
    else:
        to_inf = neg if rounding == "down" else ~neg
    top = U(infbits if fmt.inf else nanbits)
    np.copyto(r, np.where(to_inf, top, U(hi)) | (bi & sign), where=over)
    res = bi.copy()
    if not fmt.inf:
        isinf = nonfinite & (mi == U(infbits))
        res[isinf] = (U(hi) | (bi[isinf] & sign)) if saturate else U(nanbits)
    np.copyto(r, res, where=nonfinite)
    out[idx] = r
    t = idx[tiny]
    if t.size:
        out[t] = _round_generic(flat[t], fmt, rounding, rng, saturate, ftz).view(U)
    if ftz:
        np.bitwise_and(out, sign, out=out, where=(out << U(1)) < U(2 * sn_bits))
    return out.view(w).reshape(a.shape)


CHUNK_FMTS = (nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2, nl.TF32, *CUSTOM)
CHUNK_SIZES = (_CHUNK - 1, _CHUNK, _CHUNK + 1, 2 * _CHUNK + 3)


def _bit_patterns(wdt, n, seed):
    """Random bit patterns of the working dtype (every exponent, NaN payloads),
    with 1% zeros and infinities mixed in."""
    rng = np.random.default_rng(seed)
    u = UINT[np.dtype(wdt)]
    x = rng.integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True).view(wdt)
    x[rng.integers(0, n, n // 100)] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf], wdt), n // 100)
    return x


@pytest.mark.parametrize("n", CHUNK_SIZES)
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_chunked_bits_equal_old_algorithm_on_random_patterns(n, wdt):
    """Every deterministic mode, format, saturate/ftz, on random bit patterns
    of chunk-boundary sizes: bit-identical to the pre-chunking algorithm.
    float64 inputs also get patterns confined to the formats' range (the
    random float64 patterns are almost all far outside it)."""
    x = _bit_patterns(wdt, n, n)
    if wdt is np.float64:
        near = _bit_patterns(np.float32, n, n + 1).astype(np.float64)
        near *= np.random.default_rng(n).uniform(1, 2, n)  # bits below float32's
        x = np.where(np.arange(n) % 2 == 0, x, near)
    for fmt in CHUNK_FMTS:
        for mode in DET_ROUNDINGS:
            for kw in ({}, {"saturate": True, "ftz": True}, {"saturate": True}, {"ftz": True}):
                with np.errstate(all="ignore"):
                    exp = _old_round_bits(x, fmt, mode, None, kw.get("saturate", False), kw.get("ftz", False))
                assert_same_bits(_bits(x, fmt, mode, **kw), exp, nan_equal=True, x=x, what=f"{fmt} {mode} {kw} n={n}")
                assert_same_bits(_rt(x, fmt, mode, **kw), exp, nan_equal=True, x=x, what=f"round_to {fmt} {mode} {kw} n={n}")


@pytest.mark.parametrize("n", [_CHUNK - 1, _CHUNK + 1])
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_chunked_stochastic_on_random_patterns(n, wdt):
    """Stochastic rounding, chunked: at or above 2**emin every element equals
    the pre-chunking algorithm's (same random stream, one word per element);
    below 2**emin it rounds up exactly when the element's random word, as a
    fraction (32 bits for float32, 53 for float64), is below the exact
    fractional distance (Fraction reference).  (float32 into bf16: float32's
    subnormals lie on a fixed number of bits of bf16's grid, so every element
    takes the bit path and equals the old algorithm.)"""
    x = _bit_patterns(wdt, n, 3 * n)
    u_t = UINT[np.dtype(wdt)]
    for fmt in (nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2, C5, C4NS, C3X):
        for kw in ({}, {"saturate": True, "ftz": True}):
            sat, ftz = kw.get("saturate", False), kw.get("ftz", False)
            got = _bits(x, fmt, "stochastic", rng=np.random.default_rng(9), **kw)
            with np.errstate(all="ignore"):
                old = _old_round_bits(x, fmt, "stochastic", np.random.default_rng(9), sat, ftz)
            mag = np.abs(x.astype(np.float64))
            tiny = (mag < fmt.smallest_normal) & (mag > 0)
            if wdt is np.float32 and fmt.emin == -126 and fmt.subnormals:
                # float32 subnormals on bf16's grid: a fixed number of low
                # bits, rounded by the bit trick like every other element
                assert_same_bits(got, old, nan_equal=True, x=x, what=f"{fmt} {kw}")
                continue
            assert_same_bits(got[~tiny], old[~tiny], nan_equal=True, x=x[~tiny], what=f"{fmt} {kw} not tiny")
            words = _random_bits(np.random.default_rng(9), n, u_t)
            idx = np.flatnonzero(tiny)[:300]
            assert idx.size > 100
            for i in idx:
                v = float(x[i])
                _, _, frac = stochastic_split(v, fmt)
                w_ = int(words[i])
                u = Fraction(w_, 2**32) if wdt is np.float32 else Fraction(w_ >> 11, 2**53)
                exp = round_exact(v, fmt, "stochastic", up_choice=u < frac, saturate=sat, ftz=ftz)
                assert_same_bits(got[i:i + 1], np.array([exp], wdt), nan_equal=True, x=x[i:i + 1], what=f"{fmt} {kw} tiny")


def test_zero_d_and_empty_arrays_every_mode():
    for wdt in (np.float32, np.float64):
        for fmt in (nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2, C4NS):
            for mode in ROUNDINGS:
                kw = {"rng": np.random.default_rng(0)} if mode == "stochastic" else {}
                for v in (1 / 3, -1e-30, 1e30, -0.0):
                    y = nl.round_to(np.array(v, wdt), fmt, mode, **kw)
                    assert isinstance(y, wdt)
                    if mode != "stochastic":
                        assert_same_bits(np.array([y]), reference(np.array([v], wdt), fmt, mode), nan_equal=True, what=f"{fmt} {mode} {v}")
                for shape in ((0,), (3, 0), (0, 2, 5)):
                    e = nl.round_to(np.zeros(shape, wdt), fmt, mode, **kw)
                    assert e.shape == shape and e.dtype == wdt


def test_chunked_noncontiguous_and_multidimensional():
    x = _bit_patterns(np.float32, 3 * _CHUNK + 10, 4).reshape(-1, 2)[:, ::-1][::3]
    for mode in DET_ROUNDINGS:
        with np.errstate(all="ignore"):
            exp = _old_round_bits(np.ascontiguousarray(x), nl.FP8_E4M3, mode, None, False, False)
        y = nl.round_to(x, nl.FP8_E4M3, mode)
        assert y.shape == x.shape
        assert_same_bits(y, exp, nan_equal=True, x=x, what=mode)


@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_peak_memory_at_most_twice_the_input(wdt):
    """tracemalloc (numpy reports its buffers to it): rounding 10^6 random bit
    patterns allocates at most 2x the input, output included, in every mode."""
    x = _bit_patterns(wdt, 1_000_000, 5)
    for fmt in (nl.FP16, nl.BF16, nl.FP8_E4M3):
        for mode in ROUNDINGS:
            kw = {"rng": np.random.default_rng(0)} if mode == "stochastic" else {}
            tracemalloc.start()
            try:
                nl.round_to(x, fmt, mode, **kw)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak <= 2 * x.nbytes, (fmt, mode, peak / x.nbytes)
