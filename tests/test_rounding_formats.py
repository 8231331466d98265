"""The fnuz fp8, fp6, fp4 and E8M0 formats: ``round_to`` in every
mode, ``encode``/``decode``, ``next_up``/``next_down`` and ``ulp``, bit-exact
against ml_dtypes 0.6 and against an independent exact reference.

The reference (:func:`ref_round`) knows nothing of numlab: its grid is the set
of values ml_dtypes decodes from every code of the dtype, and it rounds exact
``Fraction`` values onto that grid by the rule of each mode (IEEE 754-2019
sections 4.3 and 7.4).  The only numlab choices it restates are the ones no
dtype answers:

* above ``max`` the grid continues with one more point ``max + quantum(max)``
  (rounding with unbounded exponent, then the overflow rule);
* overflow to "inf" gives inf if the dtype has one, else NaN if it has a NaN
  code, else ``max`` (fp6/fp4: the OCP MX v1.0 conversions saturate);
* a format without zero (E8M0) rounds every positive value below its least
  value up to that value, in every mode;
* an unsigned format (E8M0) gives NaN for every negative input, -0 and 0;
* a format without -0 (fnuz) gives +0 for every zero result.

RNE on float32 inputs is also checked against ml_dtypes' own casts (which are
RNE from float32; from float64 they round through float32, so float64 inputs
are checked against the reference only).  Inputs: every code, every midpoint
between adjacent codes (and the midpoint between ``max`` and the next grid
point above), and the next working-dtype value either side of each, in
float32 and float64, both signs, plus zeros, inf, NaN and values far outside
the range.
"""

from __future__ import annotations

import bisect
import functools
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, bits

import numlab as nl
from numlab import formats as F
from numlab.formats import FORMATS, get_format
from numlab.rounding import _round_bits, _round_generic

ML_DTYPES = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2])  # decides ml_dtypes' own bits

NEW = {
    "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "fp8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
    "fp8_e8m0": ml_dtypes.float8_e8m0fnu,
}
DET_ROUNDINGS = ("rne", "rtz", "up", "down", "odd")
KWARGS = ({}, {"saturate": True}, {"ftz": True})
UINT = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


# ---------------------------------------------------------------------------
# the independent reference: ml_dtypes' grid, Fraction arithmetic
# ---------------------------------------------------------------------------
class Grid:
    """Everything the reference knows about a dtype, read off ml_dtypes."""

    def __init__(self, dt):
        fi = ml_dtypes.finfo(dt)
        codes = np.arange(1 << fi.bits, dtype=np.uint8)
        with np.errstate(invalid="ignore"):
            v = codes.view(dt).astype(np.float64)
        fin = v[np.isfinite(v)]
        self.has_nan = bool(np.isnan(v).any())
        self.has_inf = bool(np.isinf(v).any())
        self.has_negzero = bool(((v == 0) & np.signbit(v)).any())
        self.signed = bool((fin < 0).any())
        self.mags = sorted({Fraction(float(a)) for a in fin if a >= 0})
        self.max = self.mags[-1]
        self.min_normal = Fraction(float(fi.smallest_normal))
        p = fi.nmant + 1
        e = math.floor(math.log2(self.max))
        assert Fraction(2) ** e <= self.max < Fraction(2) ** (e + 1)
        self.above = self.max + Fraction(2) ** (e - p + 1)  # the next grid point beyond max


@functools.cache
def _grid(name) -> Grid:
    return Grid(NEW[name])


def _overflow(g: Grid, neg: bool, to_inf: bool, saturate: bool) -> float:
    if to_inf and not saturate:
        val = math.inf if g.has_inf else math.nan if g.has_nan else float(g.max)
    else:
        val = float(g.max)
    return -val if neg else val


def ref_round(x: float, name: str, rounding: str, *, saturate=False, ftz=False, up_choice=None) -> float:
    """Round the exact value of the float ``x`` onto ml_dtypes' grid of ``name``."""
    g = _grid(name)
    if math.isnan(x):
        return math.nan
    neg = math.copysign(1.0, x) < 0
    if not g.signed and (neg or x == 0):
        return math.nan
    if math.isinf(x):
        if g.has_inf:
            return x
        return _overflow(g, neg, True, saturate or not g.has_nan)
    v = abs(Fraction(x))
    if v == 0:
        return -0.0 if neg and g.has_negzero else 0.0
    if v > g.max:
        lo, hi = g.max, g.above
    elif v < g.mags[0]:  # no zero (E8M0): the least value in every mode
        lo = hi = g.mags[0]
    else:
        i = bisect.bisect_left(g.mags, v)
        hi = g.mags[i]
        lo = hi if hi == v else g.mags[i - 1]
    if lo == hi:
        r = lo
    else:
        gap = hi - lo
        k = lo / gap
        assert k.denominator == 1
        lo_even = k.numerator % 2 == 0
        if rounding == "rne":
            d = v - lo
            r = lo if d < gap / 2 or (d == gap / 2 and lo_even) else hi
        elif rounding == "rtz":
            r = lo
        elif rounding == "up":
            r = lo if neg else hi
        elif rounding == "down":
            r = hi if neg else lo
        elif rounding == "odd":
            r = hi if lo_even else lo
        else:
            r = hi if up_choice else lo
    if r > g.max:
        to_inf = {"rne": True, "stochastic": True, "rtz": False, "odd": False, "up": not neg, "down": neg}[rounding]
        return _overflow(g, neg, to_inf, saturate)
    if ftz and r < g.min_normal and g.mags[0] == 0:
        r = Fraction(0)
    if r == 0:
        return -0.0 if neg and g.has_negzero else 0.0
    return -float(r) if neg else float(r)


def reference(x, name, rounding, **kw):
    return np.array([ref_round(float(v), name, rounding, **kw) for v in x.ravel()], dtype=x.dtype)


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------
def _values(name):
    dt = NEW[name]
    bits = ml_dtypes.finfo(dt).bits
    codes = np.arange(1 << bits, dtype=np.uint8)
    with np.errstate(invalid="ignore"):
        return codes, codes.view(dt).astype(np.float64)


@functools.cache
def _inputs(name, wdt):
    """Every code's value, every midpoint of adjacent values (and beyond max),
    the next working-dtype value either side of each; both signs; specials."""
    g = _grid(name)
    _, v = _values(name)
    fin = np.unique(v[np.isfinite(v)])
    grid = np.concatenate([fin, [float(g.above)]])
    mids = (grid[:-1] + grid[1:]) / 2
    quarters = (3 * grid[:-1] + grid[1:]) / 4
    mn = float(g.mags[1] if g.mags[0] == 0 else g.mags[0])
    extra = [2 * float(g.above), 4 * float(g.above), 1e30, mn / 2, mn / 4, 0.75 * mn, mn / 3, 1e-30, 2.0**-140]
    with np.errstate(over="ignore"):  # 4 * above is beyond float32 for E8M0: inf, dropped below
        base = np.concatenate([grid, mids, quarters, extra]).astype(wdt)
    assert np.all(mids.astype(wdt).astype(np.float64) == mids)  # midpoints exact in both dtypes
    inf = wdt(np.inf)
    x = np.concatenate([base, np.nextafter(base, inf), np.nextafter(base, wdt(0))])
    x = x[np.isfinite(x)]
    if wdt is np.float64:
        x = np.concatenate([x, [1e300, 1e-300, 2.0**-1074]])
    x = np.unique(np.abs(x))
    return np.concatenate([x, -x, np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=wdt)]).astype(wdt)


def _paths(x, fmt, mode, **kw):
    sat, ftz = kw.get("saturate", False), kw.get("ftz", False)
    with np.errstate(all="ignore"):
        yield "round_to", nl.round_to(x, fmt, mode, **kw)
        yield "bits", _round_bits(x, fmt, mode, None, sat, ftz)
        yield "generic", _round_generic(x, fmt, mode, None, sat, ftz)


# ---------------------------------------------------------------------------
# the formats themselves
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(NEW))
def test_constants_match_ml_dtypes_finfo(name):
    f, fi = FORMATS[name], ml_dtypes.finfo(NEW[name])
    assert f.dtype == np.dtype(NEW[name]) and nl.get_format(NEW[name]) is f
    assert (f.p, f.emin, f.emax) == (fi.nmant + 1, fi.minexp, fi.maxexp - 1)
    assert f.bits == fi.bits
    assert f.max == float(fi.max) and f.eps == float(fi.eps)
    assert f.smallest_normal == float(fi.smallest_normal)
    assert f.smallest_subnormal == float(fi.smallest_subnormal)
    g = _grid(name)
    assert (f.inf, f.nan != "none", f.negzero, f.signed, f.zero) == (
        g.has_inf, g.has_nan, g.has_negzero, g.signed, g.mags[0] == 0)


def test_names_and_aliases():
    for name, dt in NEW.items():
        assert nl.get_format(np.dtype(dt).name) is FORMATS[name]  # ml_dtypes' name is an alias
    assert nl.get_format("e8m0") is F.FP8_E8M0 and nl.get_format("e2m1") is F.FP4_E2M1
    assert nl.get_format("e4m3fnuz") is F.FP8_E4M3FNUZ and nl.get_format("fp6_e3m2fn") is F.FP6_E3M2


def test_validation_of_new_fields():
    from numlab.formats import Format

    with pytest.raises(ValueError, match="nan='negzero'.*negzero=False"):
        Format("x", 4, 7, nan="negzero")
    with pytest.raises(ValueError, match="zero=False.*subnormals=False and signed=False"):
        Format("x", 3, 7, zero=False)
    with pytest.raises(ValueError, match="signed=False has no -0"):
        Format("x", 3, 7, signed=False)
    with pytest.raises(TypeError, match="negzero must be a bool, got int"):
        Format("x", 3, 7, negzero=0)
    with pytest.raises(ValueError, match=r"exponent range emin=-150.*2\*\*-149 \(here 2\*\*-150\)"):
        Format("x", 1, 7, emin=-150, subnormals=False)
    Format("x", 1, 127, emin=-127, subnormals=False)  # E8M0's range is allowed


# ---------------------------------------------------------------------------
# round_to: every code, midpoints, either side; every mode and path
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(NEW))
def test_rne_float32_inputs_equal_ml_dtypes_casts(name):
    x = _inputs(name, np.float32)
    fmt = FORMATS[name]
    with np.errstate(all="ignore"):
        cast = x.astype(NEW[name]).astype(np.float32)
    keep = ~np.isnan(x) if fmt.nan == "none" else np.ones(x.shape, bool)  # ml_dtypes: NaN -> -0 there
    if name == "fp8_e8m0" and ML_DTYPES < (0, 7):
        # ml_dtypes 0.6 rounds float32 *subnormal* inputs in (2**-127, 1.5 * 2**-127)
        # up to 2**-126, although 2**-127 is nearer (onnxruntime#28435 review
        # shows the same slip; ml_dtypes 0.7 rounds them to 2**-127); round_to
        # follows the exact rule.  Pinned per installed version.
        quirk = (x > 2.0**-127) & (x < 1.5 * 2.0**-127)
        assert quirk.sum() >= 2
        assert (cast[quirk] == 2.0**-126).all() and (nl.round_to(x[quirk], fmt) == 2.0**-127).all()
        keep &= ~quirk
    for path, y in _paths(x, fmt, "rne"):
        assert_same_bits(y[keep], cast[keep], nan_equal=True, x=x[keep], what=f"{path} {name} rne vs ml_dtypes")
    if fmt.nan == "none":
        assert np.isnan(nl.round_to(x, fmt)[~keep]).all()  # NaN stays NaN in the container


@pytest.mark.parametrize("name", list(NEW))
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_every_mode_equals_exact_reference(name, wdt):
    x = _inputs(name, wdt)
    fmt = FORMATS[name]
    for mode in DET_ROUNDINGS:
        for kw in KWARGS:
            ref = reference(x, name, mode, **kw)
            for path, y in _paths(x, fmt, mode, **kw):
                assert_same_bits(y, ref, nan_equal=True, x=x, what=f"{path} {name} {mode} {kw}")


@pytest.mark.parametrize("name", list(NEW))
@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_stochastic_picks_one_of_the_two_reference_neighbours(name, wdt):
    x = _inputs(name, wdt)
    fmt = FORMATS[name]
    lo = reference(x, name, "stochastic", up_choice=False)
    hi = reference(x, name, "stochastic", up_choice=True)
    seen_lo = seen_hi = 0
    for rep in range(4):
        for path, f in (("round_to", nl.round_to), ("generic", None)):
            rng = np.random.default_rng(rep)
            with np.errstate(all="ignore"):
                y = nl.round_to(x, fmt, "stochastic", rng=rng) if f else _round_generic(x, fmt, "stochastic", rng, False, False)
            u = UINT[np.dtype(wdt)]
            is_lo = (y.view(u) == lo.view(u)) | (np.isnan(y) & np.isnan(lo))
            is_hi = (y.view(u) == hi.view(u)) | (np.isnan(y) & np.isnan(hi))
            assert (is_lo | is_hi).all(), (path, x[~(is_lo | is_hi)][:5], y[~(is_lo | is_hi)][:5])
            differ = lo.view(u) != hi.view(u)
            seen_lo += int((is_lo & differ).sum())
            seen_hi += int((is_hi & differ).sum())
        y1 = nl.round_to(x, fmt, "stochastic", rng=np.random.default_rng(rep))
        y2 = nl.round_to(x, fmt, "stochastic", rng=np.random.default_rng(rep))
        assert_same_bits(y1, y2, nan_equal=True, x=x, what="same seed, same bits")
    assert seen_lo > 50 and seen_hi > 50


def test_hand_checked_values():
    """Spot values from the OCP MX v1.0 tables and the fnuz definition."""
    r = nl.round_to
    # E8M0: a tie 1.5 * 2**e goes up (2**(e+1) is the even multiple of 2**e)
    assert r(np.array([1.5, 3.0, 0.75, 1.4], np.float32), "fp8_e8m0").tolist() == [2.0, 4.0, 1.0, 1.0]
    assert r(np.array([1.5, 3.0]), "fp8_e8m0", "odd").tolist() == [1.0, 2.0]  # p = 1: odd = truncation
    assert r(2.0**-200, "fp8_e8m0", "rtz") == 2.0**-127 and np.isnan(r(0.0, "fp8_e8m0"))
    assert np.isnan(r(-1.0, "fp8_e8m0", "up")) and np.isnan(r(1.5 * 2.0**127, "fp8_e8m0"))
    assert r(1.5 * 2.0**127, "fp8_e8m0", saturate=True) == 2.0**127
    # fp4 e2m1: {0, .5, 1, 1.5, 2, 3, 4, 6}; overflow and inf saturate in every mode
    assert r(np.array([2.5, 5.0, 0.25, 7.0, 1e9, np.inf, -np.inf]), "fp4_e2m1").tolist() == [2, 4, 0, 6, 6, 6, -6]
    assert r(100.0, "fp6_e2m3", "up") == 7.5 and r(-100.0, "fp6_e3m2", "down") == -28.0
    # fnuz: no -0; max 240 / 57344; the tie 248 goes to the even 256 -> overflow -> NaN
    y = r(np.array([-1e-9, -0.0, 240.0, 247.9, 248.0, np.inf]), "fp8_e4m3fnuz")
    assert not np.signbit(y[:2]).any() and y[2] == y[3] == 240 and np.isnan(y[4:]).all()
    assert r(-1e-9, "fp8_e5m2fnuz", "down") == -2.0**-17
    assert nl.encode(np.array([0.0, -0.0, np.nan]), "fp8_e4m3fnuz").tolist() == [0, 0, 0x80]


# ---------------------------------------------------------------------------
# encode / decode / next_up / next_down / ulp
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(NEW))
def test_encode_decode_every_code(name):
    fmt = FORMATS[name]
    codes, v = _values(name)
    n = 1 << fmt.bits
    own = codes[:n]
    assert np.array_equal(bits(nl.decode(own, fmt)), own)
    keep = ~np.isnan(v[:n])
    canon = nl.encode(v[:n][keep], fmt)
    # -0 of fnuz is not a value (0x80 is NaN): every finite value's code decodes back
    np.testing.assert_array_equal(nl.decode(canon, fmt).astype(np.float64), v[:n][keep])
    np.testing.assert_array_equal(canon, bits(v[:n][keep].astype(np.float32).astype(NEW[name])))
    if fmt.nan == "none":
        with pytest.raises(ValueError, match=rf"x holds 1 NaN, which fmt='{name}' cannot encode"):
            nl.encode(np.array([1.0, np.nan]), fmt)
    if n < 256:
        with pytest.raises(ValueError, match=rf"codes hold values outside \[0, {n}\).*{fmt.bits}-bit codes"):
            nl.decode(np.array([n]), fmt)


@pytest.mark.parametrize("name", list(NEW))
def test_next_up_down_and_ulp_walk_the_ml_dtypes_grid(name):
    fmt = FORMATS[name]
    _, v = _values(name)
    g = np.unique(v[np.isfinite(v)])  # sorted; one zero (-0 == 0)
    up = nl.next_up(g, fmt)
    dn = nl.next_down(g, fmt)
    np.testing.assert_array_equal(up[:-1], g[1:])
    np.testing.assert_array_equal(dn[1:], g[:-1])
    assert np.isnan(up[-1]) and np.isnan(dn[0])  # no inf beyond +-max, nothing below E8M0's least
    assert not np.signbit(up[:-1][g[1:] == 0]).any()  # fnuz: next_up(-tiny) is +0
    pos = g[g > 0]
    gap = np.diff(np.append(pos, float(_grid(name).above)))
    np.testing.assert_array_equal(nl.ulp(pos, fmt), gap)
    if not fmt.signed:
        assert np.isnan(nl.ulp(-1.0, fmt)) and np.isnan(nl.next_up(0.0, fmt)) and np.isnan(nl.next_up(-1.0, fmt))


@pytest.mark.parametrize("name", list(NEW))
def test_storage_layout(name):
    fmt = FORMATS[name]
    codes, v = _values(name)
    c = codes[: 1 << fmt.bits]
    v = v[: 1 << fmt.bits]
    fin = np.isfinite(v)
    if fmt.nonfinite_mask is not None:
        m = fmt.nonfinite_mask
        np.testing.assert_array_equal((c & m) == m, ~fin)
    expo = c & fmt.exponent_mask
    if fmt.zero:  # exponent field zero <=> zero or subnormal
        nan0 = ~fin & (fmt.nan == "negzero")  # fnuz: the NaN 0x80 has a zero exponent field
        np.testing.assert_array_equal(expo == 0, fin & (np.abs(v) < fmt.smallest_normal) | nan0)
    if fmt.signed:
        np.testing.assert_array_equal((c & fmt.sign_mask) != 0, np.signbit(v) & fin | (~fin & (fmt.nan == "negzero")))
    assert fmt.exponent_bits == {"fp8_e4m3fnuz": 4, "fp8_e5m2fnuz": 5, "fp6_e2m3": 2, "fp6_e3m2": 3,
                                 "fp4_e2m1": 2, "fp8_e8m0": 8}[name]
    assert get_format(name) is fmt


@pytest.fixture(scope="module")
def patterns():
    """Random float32 bit patterns (every exponent, NaN payloads, subnormals),
    more than two chunks of the bit path."""
    rng = np.random.default_rng(16)
    return rng.integers(0, 2**32, size=3 * 2**15 + 7, dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("name", list(NEW))
def test_random_fp32_patterns(patterns, name):
    """RNE equals ml_dtypes' cast (NaN inputs of NaN-less formats and the
    E8M0 subnormal quirk aside); in every mode the bit path equals the
    scale-round-scale path, from float32 and float64, with and without
    saturate/ftz; a sample equals the exact reference."""
    fmt = FORMATS[name]
    x = patterns
    with np.errstate(all="ignore"):
        cast = x.astype(NEW[name]).astype(np.float32)
    keep = ~np.isnan(x) if fmt.nan == "none" else np.ones(x.shape, bool)
    if name == "fp8_e8m0":
        keep &= ~((x > 2.0**-127) & (x < 1.5 * 2.0**-127))
    assert_same_bits(nl.round_to(x, fmt)[keep], cast[keep], nan_equal=True, x=x[keep], what=f"{name} rne vs ml_dtypes")
    for wdt in (np.float32, np.float64):
        with np.errstate(invalid="ignore"):  # NaN payloads
            xw = x.astype(wdt)
        for mode in DET_ROUNDINGS:
            for kw in ({}, {"saturate": True, "ftz": True}):
                outs = dict(_paths(xw, fmt, mode, **kw))
                assert_same_bits(outs["bits"], outs["generic"], nan_equal=True, x=xw, what=f"{name} {mode} {kw} bits vs generic")
                assert_same_bits(outs["round_to"], outs["generic"], nan_equal=True, x=xw, what=f"{name} {mode} {kw} round_to")
                s = xw[::97]
                assert_same_bits(outs["round_to"][::97], reference(s, name, mode, **kw), nan_equal=True, x=s, what=f"{name} {mode} {kw} ref")
