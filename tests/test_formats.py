"""Formats: derived constants against numpy.finfo / ml_dtypes.finfo, neighbours
(ulp, next_up, next_down) against np.nextafter and integer code walks, encode /
decode, lookup and validation errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _oracles import fmt_max

import numlab as nl
from numlab.formats import NARROW_DTYPES, STORAGE_DTYPES, Format, format_of_dtype

FINFO = [
    (nl.FP64, np.finfo(np.float64)),
    (nl.FP32, np.finfo(np.float32)),
    (nl.FP16, np.finfo(np.float16)),
    (nl.BF16, ml_dtypes.finfo(ml_dtypes.bfloat16)),
    (nl.FP8_E4M3, ml_dtypes.finfo(ml_dtypes.float8_e4m3fn)),
    (nl.FP8_E5M2, ml_dtypes.finfo(ml_dtypes.float8_e5m2)),
]


@pytest.mark.parametrize(("fmt", "fi"), FINFO, ids=lambda v: getattr(v, "name", ""))
def test_constants_match_finfo(fmt, fi):
    assert fmt.p == fi.nmant + 1
    assert fmt.emax == fi.maxexp - 1
    assert fmt.emin == fi.minexp
    assert fmt.eps == float(fi.eps)
    assert fmt.u == float(fi.eps) / 2
    assert fmt.max == float(fi.max)
    assert fmt.smallest_normal == float(fi.smallest_normal)
    assert fmt.smallest_subnormal == float(fi.smallest_subnormal)
    assert fmt.bits == fi.bits


def test_tf32_and_custom_constants():
    assert (nl.TF32.p, nl.TF32.emax, nl.TF32.emin) == (11, 127, -126)
    assert nl.TF32.max == float(fmt_max(11, 127))
    c = Format("c5", p=5, emax=10)
    assert c.emin == -9
    assert c.max == 31 * 2.0**6 == float(fmt_max(5, 10))
    assert c.smallest_subnormal == 2.0**-13
    ns = Format("c4ns", p=4, emax=7, subnormals=False)
    assert ns.smallest_subnormal == ns.smallest_normal == 2.0**-6


def test_formats_registry_and_lookup():
    assert set(nl.FORMATS) == {"fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2",
                               "fp8_e4m3fnuz", "fp8_e5m2fnuz", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1",
                               "fp8_e8m0"}
    assert nl.get_format("float16") is nl.FP16
    assert nl.get_format(" BF16 ") is nl.BF16
    assert nl.get_format(np.float32) is nl.FP32
    assert nl.get_format(ml_dtypes.float8_e4m3fn) is nl.FP8_E4M3
    assert nl.get_format(nl.FP16) is nl.FP16
    with pytest.raises(ValueError, match=r"fmt='fp17'.*valid names.*'bf16'.*'fp16'"):
        nl.get_format("fp17")
    with pytest.raises(ValueError, match=r"fmt=int64 has no numlab format; valid names"):
        nl.get_format(np.int64)
    with pytest.raises(TypeError, match=r"fmt must be a Format, a format name or a dtype, got"):
        nl.get_format(3.5)


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"p": 30, "emax": 10}, ValueError, r"p=30 is out of range.*1 <= p <= 24"),
        ({"p": 0, "emax": 10}, ValueError, r"p=0 is out of range.*1 <= p <= 24"),
        ({"p": 5, "emax": 200}, ValueError, r"emax=200 is out of range.*emin <= emax <= 127"),
        ({"p": 5, "emax": 10, "emin": -146}, ValueError,
         r"emin=-146.*smallest value >= 2\*\*-149 \(here 2\*\*-150\) so that every value is a float32"),
        ({"p": 5, "emax": 10, "emin": 12}, ValueError, r"emin=12, emax=10.*emin <= emax"),
        ({"p": 5.0, "emax": 10}, TypeError, r"p must be an int, got float \(5.0\)"),
        ({"p": 5, "emax": "10"}, TypeError, r"emax must be an int, got str \('10'\)"),
        ({"p": 5, "emax": 10, "nan": "x"}, ValueError, r"nan='x' is not valid; choose one of"),
    ],
)
def test_custom_format_validation(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        Format("custom", **kwargs)


def _all_codes(fmt):
    u = {8: np.uint8, 16: np.uint16}[fmt.bits]
    codes = np.arange(2**fmt.bits, dtype=u)
    return codes, nl.decode(codes, fmt).astype(np.float64)


@pytest.mark.parametrize("fmt", [nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2], ids=str)
def test_next_up_down_walk_every_code(fmt):
    """next_up of the value of code c (c >= 0 positive) is the value of code
    c + 1; for negative codes it is code c - 1 (toward -0); at the ends inf."""
    codes, v = _all_codes(fmt)
    signbit = 1 << (fmt.bits - 1)
    finite = np.isfinite(v)
    pos = finite & (codes < signbit)
    neg = finite & (codes >= signbit)
    up = nl.next_up(v, fmt)
    dn = nl.next_down(v, fmt)
    vals = v
    # positive codes walk up to the next code, negative codes toward -0 (code - 1)
    c = codes.astype(np.int64)
    exp_up = np.where(pos, vals[np.clip(c + 1, 0, len(c) - 1)], vals[np.clip(c - 1, 0, len(c) - 1)])
    exp_dn = np.where(pos, vals[np.clip(c - 1, 0, len(c) - 1)], vals[np.clip(c + 1, 0, len(c) - 1)])
    # +0 -> down is -smallest_subnormal (code signbit|1); -0 -> up is +smallest_subnormal
    exp_dn[0] = -fmt.smallest_subnormal
    exp_up[signbit] = fmt.smallest_subnormal
    exp_up[signbit + 0] = fmt.smallest_subnormal
    # -0.0 next_down: -smallest subnormal; +0.0 next_up: +smallest subnormal
    exp_dn[signbit] = -fmt.smallest_subnormal
    exp_up[0] = fmt.smallest_subnormal
    # the top of each sign overflows
    top = fmt.max
    big = np.inf if fmt.inf else np.nan
    exp_up[pos & (vals == top)] = big
    exp_dn[neg & (vals == -top)] = -big
    sel = pos | neg
    np.testing.assert_array_equal(up[sel], exp_up[sel])
    np.testing.assert_array_equal(dn[sel], exp_dn[sel])
    # independent check with numpy's nextafter where the dtype supports it
    if fmt is nl.FP16:
        h = v.astype(np.float16)[sel]
        np.testing.assert_array_equal(up[sel], np.nextafter(h, np.float16(np.inf)).astype(np.float64))
        np.testing.assert_array_equal(dn[sel], np.nextafter(h, np.float16(-np.inf)).astype(np.float64))


@pytest.mark.parametrize("fmt", [nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2], ids=str)
def test_ulp_every_code(fmt):
    """ulp(x) is the gap above |x| (below it at max) for every finite code."""
    codes, v = _all_codes(fmt)
    finite = np.isfinite(v)
    a = np.abs(v[finite])
    gap = np.where(a == fmt.max, a - nl.next_down(a, fmt), nl.next_up(a, fmt) - a)
    np.testing.assert_array_equal(nl.ulp(v[finite], fmt), gap)
    assert np.isnan(nl.ulp(np.inf, fmt)) and np.isnan(nl.ulp(np.nan, fmt))


def test_ulp_next_fp32_vs_nextafter():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, size=200_000, dtype=np.uint32).view(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) < np.finfo(np.float32).max)]
    up = np.nextafter(x, np.float32(np.inf)).astype(np.float64)
    np.testing.assert_array_equal(nl.next_up(x, nl.FP32), up)
    np.testing.assert_array_equal(nl.next_down(x, nl.FP32), np.nextafter(x, np.float32(-np.inf)).astype(np.float64))
    a = np.abs(x)
    np.testing.assert_array_equal(
        nl.ulp(a, nl.FP32), np.nextafter(a, np.float32(np.inf)).astype(np.float64) - a
    )


def _custom_grid(fmt):
    """All nonnegative finite values of a small custom format, by enumeration."""
    vals = {0.0}
    for e in range(fmt.emin, fmt.emax + 1):
        for m in range(2 ** (fmt.p - 1), 2**fmt.p):
            vals.add(m * 2.0 ** (e - fmt.p + 1))
    if fmt.subnormals:
        for m in range(1, 2 ** (fmt.p - 1)):
            vals.add(m * 2.0 ** (fmt.emin - fmt.p + 1))
    vals = sorted(v for v in vals if v <= fmt.max)
    return np.array(vals)


@pytest.mark.parametrize(
    "fmt",
    [Format("c5", p=5, emax=10), Format("c4ns", p=4, emax=7, subnormals=False),
     Format("c3x", p=3, emax=4, inf=False, nan="extended")],
    ids=str,
)
def test_next_up_down_custom_formats(fmt):
    g = _custom_grid(fmt)
    full = np.concatenate([-g[::-1], g[1:]])  # -max .. -min, 0, min .. max
    up = nl.next_up(full[:-1], fmt)
    np.testing.assert_array_equal(up[full[:-1] != 0], full[1:][full[:-1] != 0])
    dn = nl.next_down(full[1:], fmt)
    np.testing.assert_array_equal(dn[full[1:] != 0], full[:-1][full[1:] != 0])
    assert nl.next_up(0.0, fmt) == g[1] and nl.next_down(0.0, fmt) == -g[1]
    big = np.inf if fmt.inf else np.nan
    np.testing.assert_equal(nl.next_up(fmt.max, fmt), big)
    assert np.all(nl.ulp(g[:-1], fmt) == np.diff(g))


def test_encode_decode_roundtrip():
    for fmt in (nl.FP16, nl.BF16, nl.FP8_E4M3, nl.FP8_E5M2):
        codes, v = _all_codes(fmt)
        back = nl.encode(v, fmt)
        ok = (back == codes) | np.isnan(v)
        assert ok.all(), fmt
    assert nl.encode(1.0, "fp16") == 0x3C00
    # float64 just below the bf16 midpoint above 1 + 2**-7 (an odd code): one rounding
    x = np.nextafter(1 + 2.0**-8 + 2.0**-7, 0.0)
    assert nl.encode(x, "bf16") == 0x3F81
    assert nl.encode(np.array([3, -2]), "fp8_e4m3").tolist() == [0x44, 0xC0]
    assert nl.encode(np.array([1.0, -2.0], np.float32), "bf16").tolist() == [0x3F80, 0xC000]
    with pytest.raises(ValueError, match=r"fmt='tf32' has no storage dtype.*'fp16'"):
        nl.encode(1.0, "tf32")
    with pytest.raises(TypeError, match="codes must be integers, got dtype float64"):
        nl.decode(np.array([1.5]), "fp16")


def test_describe_row():
    row = nl.FP16.describe()
    assert row["max"] == 65504.0 and row["u"] == 2.0**-11 and row["p"] == 11


def test_cli_formats(capsys):
    from numlab.cli import main

    assert main(["formats", "--x", "0.3"]) in (0, None)
    out = capsys.readouterr().out
    assert "fp8_e4m3" in out and "65504" in out and "stochastic" in out
    # the special-values table: fnuz NaN in the -0 code, fp4 saturates, E8M0 unsigned without zero
    fnuz = next(ln for ln in out.splitlines() if ln.startswith("fp8_e4m3fnuz") and "code" in ln)
    assert fnuz.split()[1:6] == ["8", "the", "-0", "code", "no"]
    assert "max (saturates)" in next(ln for ln in out.splitlines() if ln.startswith("fp4_e2m1") and "none" in ln)
    assert next(ln for ln in out.splitlines() if ln.startswith("fp8_e8m0") and "all-ones" in ln).split()[-4:-1] == [
        "no", "no", "no"]
    # the rne row shows fp16(0.3) = 0.300048828
    rne = next(line for line in out.splitlines() if line.startswith("rne"))
    assert f"{float(np.float16(0.3)):.9g}" in rne


# --------------------------------------------------------------------------
# storage layout derived from FORMATS (one table instead of per-module copies)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(nl.FORMATS))
def test_storage_layout_of_every_format(name):
    """``uint``, ``exponent_mask``, ``nonfinite_mask``, ``narrow`` and
    ``format_of_dtype`` agree with the values the codes decode to: every code
    of the 8- and 16-bit formats, edge and random codes of fp32/fp64."""
    f = nl.FORMATS[name]
    if f.dtype is None:  # tf32: stored in float32 containers, no codes of its own
        assert f.uint is None and f.nonfinite_mask is None and f.exponent_mask is None
        assert not f.narrow and format_of_dtype(np.float32) is nl.FP32
        return
    assert f.uint.itemsize == f.dtype.itemsize and f.bits <= 8 * f.dtype.itemsize
    assert format_of_dtype(f.dtype) is f and STORAGE_DTYPES[f.dtype] is f
    assert format_of_dtype(f.dtype.name) is f  # "float16", "bfloat16", "float8_e4m3fn", ...
    assert f.narrow == (f.bits < 32) == (f.dtype in NARROW_DTYPES)
    if f.bits <= 16:
        codes = np.arange(1 << f.bits, dtype=np.int64).astype(f.uint)
    else:
        rng = np.random.default_rng(7)
        edge = [0, 1, f.exponent_mask, f.exponent_mask - 1, f.exponent_mask + 1,
                (1 << (f.bits - 1)) - 1, 1 << (f.bits - 1), (1 << f.bits) - 1]
        codes = np.concatenate([np.array(edge, dtype=f.uint),
                                rng.integers(0, 1 << f.bits, 100_000, dtype=f.uint)])
    with np.errstate(invalid="ignore", over="ignore"):
        v = nl.decode(codes, f).astype(np.float64)
    m, e = f.nonfinite_mask, f.exponent_mask
    fin = np.isfinite(v)
    if m is None:  # fnuz (NaN 0x80) and fp6/fp4 (no NaN): tests/test_rounding_formats.py
        assert f.nan in ("negzero", "none")
    else:
        np.testing.assert_array_equal((codes & f.uint.type(m)) == m, ~fin)
    # exponent field zero <=> zero or subnormal (or fnuz's NaN 0x80; E8M0's
    # code 0 is its least value 2**-127)
    expo = codes & f.uint.type(e)
    low = fin & (np.abs(v) < f.smallest_normal) if f.zero else fin & (v == f.smallest_normal)
    np.testing.assert_array_equal(expo == 0, low | (~fin & (f.nan == "negzero")))
    if f.nan == "ieee":
        assert m == e
    elif f.nan == "extended":  # e4m3fn: the top exponent holds finite numbers too
        assert m == (1 << (f.bits - int(f.signed))) - 1 and (((expo == e) & fin).any() or f.p == 1)
    assert f.exponent_bits == f.bits - f.p + 1 - int(f.signed)


def test_format_of_dtype_rejects_other_dtypes():
    for d in (np.int32, np.bool_, np.complex64, "int8", "nope", np.uint16):
        assert format_of_dtype(d) is None
    assert {f.name for f in (format_of_dtype(d) for d in ("float16", "bfloat16", "float32"))} == {
        "fp16", "bf16", "fp32"}
