"""The matrix-unit model (numlab.kernels.mma) and its presets against published test vectors.

Sources of the vectors (each test names its origin):

* Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
  PeerJ CS 7:e330 (2021), test suite github.com/north-numerical-computing/
  tensor-cores-numerical-behavior: ``tc_test_numerics-V100.cu`` (V100, binary16),
  ``tc_test_numerics-T4-A100-binary16.cu``, ``tc_test_numerics-A100-tf32.cu`` and
  ``tc_test_numerics-A100-bf16.cu`` (A100; the binary64 suite tests fp64 tensor
  cores, which the model does not cover).  Each item of the suite checks the value the GPU returned (the suite
  prints PASS on the GPU it was written for); here the same inputs go through
  the preset and the same value is asserted.
* Khattak and Mikaitis, HPEC 2025 feature tests, github.com/faiziktk/
  IEEE_HPEC2025_block_FMA_tests (``MATLAB/HPEC_Test_File.m``); the README's
  sample output is an A30 (whose model ``A30TC.m`` is ``A100TC.m``): one extra
  alignment bit, truncation at alignment, fp32 output truncated, fp16 output
  rounded to nearest, 3 carry bits and FMA size 8 for fp16, 2 carry bits and
  FMA size 4 for tf32, late normalisation.
* github.com/north-numerical-computing/MATLAB-tensor-core
  ``model_validation/ExceptionalCasesTest.m`` (inf/NaN/overflow outcomes).

Independent reference: ``_port_gemm`` below is a scalar, exact (Fraction and
Python int) transcription of the MATLAB model's own steps (``GEMM.m``,
``Generic_BFMA_TC.m``/``fpbits_IEEE2``: shift significands held as 24-bit
integers by ``neab`` plus the product-carry bit, truncate by the exponent
difference, add, round), written without numlab's rounding; the vectorised
model must agree with it bit for bit on random data for every preset.

Measured GPU data: ``model_validation/`` publishes outputs (d_*) and
accumulators (c_*) but not the A/B inputs, so no share of measured outputs
can be computed; the presets say ``evidence="parameters only"`` (tested).
"""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits

from numlab.formats import get_format
from numlab.kernels.grammar import parse_unit
from numlab.kernels.mma import MatrixUnit, mma
from numlab.kernels.mma.presets import GPUS, UNIT_PRESETS, preset

L = math.ldexp


def dot(unit, a, b, c=0.0, k=16):
    """D = a . b + c for one row/column through ``mma`` (K padded to ``k``
    with zeros, as the 16x16x16 wmma tests do)."""
    a = list(a) + [0.0] * (k - len(a))
    b = list(b) + [0.0] * (k - len(b))
    fin = get_format(unit.in_fmt)
    A = np.array([a], dtype=np.float64)
    B = np.array(b, dtype=np.float64)[:, None]
    C = np.array([[c]], dtype=np.float64)
    for x in (A, B):
        assert fin.name == "tf32" or np.array_equal(x.astype(fin.dtype).astype(np.float64), x, equal_nan=True)
    return float(mma(A, B, unit, C)[0, 0])


# ---------------------------------------------------------------------------
# Fasi et al. 2021: V100 suite (tc_test_numerics-V100.cu), binary16 inputs
# ---------------------------------------------------------------------------
def _fasi_fp16_suite(u32, u16, a100: bool):
    """(item, got, expected) of the binary16 suite; ``a100`` selects the
    T4-A100 variant of items B3, B4, D1, D3, D5."""
    out = []
    one, sub16 = 1.0, L(1, -24)
    below16 = 1 - L(1, -11)
    # A. subnormals
    out.append(("A1 fp16 subnormal input, fp16 mode", dot(u16, [sub16], [4.0]), L(1, -22)))
    out.append(("A2 fp16 subnormal input, fp32 mode", dot(u32, [sub16], [4.0]), L(1, -22)))
    out.append(("A3 fp32 subnormal C", dot(u32, [], [], L(1, -149)), L(1, -149)))
    out.append(("A4 fp16 subnormal output (a)", dot(u16, [L(1, -14)], [0.5]), L(1, -15)))
    out.append(("A4 fp16 subnormal output (b)", dot(u16, [L(1, -14)], [1.0], -L(1, -15)), L(1, -15)))
    out.append(("A5 subnormal output fp32 mode", dot(u32, [L(1, -14)], [1.0], -L(1, -15)), L(1, -15)))
    # B. accuracy
    p = 1 - L(1, -10) + L(1, -22)
    out.append(("B1 products exact", dot(u32, [below16], [below16]), p))
    out.append(("B1 products exact x4", dot(u32, [below16] * 4, [below16] * 4), 4 * p))
    out.append(("B2 products exact, fp16 mode",
                dot(u16, [below16, below16], [below16, L(1, -11)]), 1 - L(1, -10) + L(1, -11)))
    ha = 0.5 if a100 else one
    out.append(("B3 accumulated in binary32", dot(u32, [ha] * 4, [sub16] * 4, 1.0), 1.0))
    for j in range(4):
        a, b = [ha] * 4, [sub16] * 4
        a[j], b[j] = one, one
        out.append((f"B4 sum from largest, j={j}", dot(u32, a, b, sub16), 1.0))
    # C. rounding
    out.append(("C1 round-down positive", dot(u32, [1.0] * 4, [2.0, L(1, -23) + L(1, -24)]), 2.0))
    out.append(("C2 round-up negative", dot(u32, [1.0] * 4, [-2.0, -L(1, -23) - L(1, -24)]), -2.0))
    out.append(("C3 fp16 accumulator rounded to nearest",
                dot(u16, [sub16, sub16], [0.5, 0.25]), L(1, -24)))
    # D. accumulator
    belowone = 1 - L(1, -24)
    out.append(("D1 extra alignment bits", dot(u32, [1.0], [1.0], -belowone),
                L(1, -24) if a100 else L(1, -23)))
    out.append(("D2 normalisation in addition", dot(u32, [1.0] * 4, [sub16] * 4, belowone),
                1 + L(1, -23)))
    out.append(("D3 normalisation in subtraction", dot(u32, [1.0, 1.0], [1.0, -sub16], -belowone),
                0.0 if a100 else L(1, -23)))
    for i in range(4):
        b = [1.0] * 4
        b[i] = L(1, -23)
        out.append((f"D4 carry-out bits, i={i}", dot(u32, [1.0] * 4, b, 1 + L(1, -22) + L(1, -23)),
                    4 + L(1, -21)))
    out.append(("D4 third carry bit", dot(u32, [1.0] * 4, [1.0, 1.5, 1.75, 1.875], 1.875), 8.0))
    out.append(("D4 round-down in normalisation",
                dot(u32, [1.0] * 4, [1.0] * 4, 1 + L(1, -22) + L(1, -23)), 5.0))
    out.append(("D4 round-up in normalisation (negative)",
                dot(u32, [1.0] * 4, [-1.0] * 4, -1 - L(1, -22) - L(1, -23)), -5.0))
    if a100:
        a5, b5 = [0.5] * 4, [sub16] * 3 + [L(1, -23) + L(1, -24)]
    else:
        a5, b5 = [1.0] * 4, [sub16] * 4
    partial = dot(u32, a5, b5, belowone)
    full = dot(u32, a5, b5, 1.0)
    out.append(("D5 not monotonic", full < partial, True))
    return out


@pytest.mark.parametrize("gpu, a100", [("V100", False), ("A100", True)])
def test_fasi_binary16_suite(gpu, a100):
    """Every item of Fasi et al.'s binary16 suite gives the value the GPU gave."""
    u32, u16 = preset(gpu, "fp16", "fp32"), preset(gpu, "fp16", "fp16")
    bad = [(n, g, e) for n, g, e in _fasi_fp16_suite(u32, u16, a100) if g != e]
    assert not bad, bad


def test_fasi_suite_separates_v100_from_a100():
    """The suite's V100 and A100 variants disagree on the other GPU's preset
    (so the items are not vacuous): D1 and D3 detect the extra alignment bit."""
    v = {n: g == e for n, g, e in _fasi_fp16_suite(preset("A100", "fp16", "fp32"),
                                                     preset("A100", "fp16", "fp16"), False)}
    a = {n: g == e for n, g, e in _fasi_fp16_suite(preset("V100", "fp16", "fp32"),
                                                     preset("V100", "fp16", "fp16"), True)}
    assert not v["D1 extra alignment bits"] and not v["D3 normalisation in subtraction"]
    assert not a["D1 extra alignment bits"] and not a["D3 normalisation in subtraction"]


def _tf32(x):
    """fp32 value converted to tf32 by truncation, as the A100 does on load
    (the suite expects (1-2^-24)^2 to act as (1-2^-11)^2; GEMM.m: round=4)."""
    from numlab.rounding import round_to
    return float(round_to(np.float32(x), "tf32", "rtz"))


@pytest.mark.parametrize("fmt", ["tf32", "bf16"])
def test_fasi_a100_tf32_bf16_suites(fmt):
    """tc_test_numerics-A100-tf32.cu and tc_test_numerics-A100-bf16.cu on the
    A100 tf32 and bf16 presets (same items; bf16 differs in A1 and B1)."""
    u = preset("A100", fmt, "fp32")
    belowone, sub = 1 - L(1, -24), L(1, -24)
    if fmt == "tf32":
        conv, minsub, up, below_in = _tf32, L(1, -136), L(1, 10), belowone
        prod = 1 - L(1, -10) + L(1, -22)   # (1 - 2^-11)^2: the input is truncated
    else:
        conv, minsub, up, below_in = float, L(1, -133), L(1, 7), 1 - L(1, -8)
        prod = 1 - L(1, -7) + L(1, -16)

    def d(a, b, c=0.0):
        return dot(u, [conv(x) for x in a], [conv(x) for x in b], c)
    checks = [
        ("A1 subnormal input", d([minsub], [up]), L(1, -126)),
        ("A2 fp32 subnormal C", d([], [], L(1, -149)), L(1, -149)),
        ("A3 subnormal output", d([L(1, -126)], [0.5]), L(1, -127)),
        ("A3 subnormal output (b)", d([L(1, -126)], [1.0], -L(1, -127)), L(1, -127)),
        ("B1 products exact", d([below_in], [below_in]), prod),
        ("B1 x4", d([below_in] * 4, [below_in] * 4), 4 * prod),
        ("B2 accumulated in binary32", d([0.5] * 4, [sub] * 4, 1.0), 1.0),
        ("C1 round-down", d([1.0] * 4, [2.0, L(1, -23) + L(1, -24)]), 2.0),
        ("C2 round-up negative", d([1.0] * 4, [-2.0, -L(1, -23) - L(1, -24)]), -2.0),
        ("D1 one extra alignment bit", d([1.0], [1.0], -belowone), L(1, -24)),
        ("D2 normalisation in addition", d([1.0] * 4, [sub] * 4, belowone), 1 + L(1, -23)),
        ("D3 subtraction", d([1.0, 1.0], [1.0, -sub], -1 + sub), 0.0),
        ("D4 third carry bit", d([1.0] * 4, [1.0, 1.5, 1.75, 1.875], 1.875), 8.0),
        ("D4 round-down", d([1.0] * 4, [1.0] * 4, 1 + L(1, -22) + L(1, -23)), 5.0),
        ("D4 round-up negative", d([1.0] * 4, [-1.0] * 4, -1 - L(1, -22) - L(1, -23)), -5.0),
    ]
    for i in range(4):
        b = [1.0] * 4
        b[i] = L(1, -23)
        checks.append((f"D4 carry i={i}", d([1.0] * 4, b, 1 + L(1, -22) + L(1, -23)),
                       4 + L(1, -21)))
    for j in range(4):
        a, b = [0.5] * 4, [sub] * 4
        a[j], b[j] = 1.0, 1.0
        checks.append((f"B3 sum from largest j={j}", d(a, b, sub), 1.0))
    bad = [c for c in checks if c[1] != c[2]]
    assert not bad, bad
    partial = d([0.5] * 4, [sub] * 3 + [L(1, -23) + L(1, -24)], belowone)
    assert d([0.5] * 4, [sub] * 3 + [L(1, -23) + L(1, -24)], 1.0) < partial  # D5


# ---------------------------------------------------------------------------
# HPEC 2025 feature tests (HPEC_Test_File.m), documented A30 outcome
# ---------------------------------------------------------------------------
def hpec_features(u32, u16, utf32=None) -> dict:
    """Run the HPEC test vectors on a unit pair and return the detected features."""
    f = {}
    pout = 24
    # Feature 1: extra alignment bits (0, 1 or 2 detectable)
    a = [L(1, -pout)] * 2
    f["neab"] = int(dot(u32, a, [1.0, 1.0], 1.0) == 1 + 2 * L(1, -pout))
    a3, b3 = [L(1, -pout)] * 3, [0.5, 0.5, 1.0]
    if dot(u32, a3, b3, 1.0) == 1 + 2 * L(1, -pout):
        f["neab"] = 2
    # Feature 2: rounding of aligned significands (valid for neab < 2)
    if f["neab"] < 2:
        n = f["neab"]
        bb = L(1, -n) + L(1, -n - 1)
        dp = dot(u32, [L(1, -pout)] * 2, [bb, bb], 1.0)
        dn = dot(u32, [-L(1, -pout)] * 2, [bb, bb], -1.0)
        rz, rn = 1.0, 1 + L(1, -pout - n + 2)
        f["align"] = {(rn, rn): "rne", (rz, rz): "rtz", (rn, rz): "up", (rz, rn): "down"}.get(
            (dp, abs(dn)), "?")
    # Feature 3/4: final rounding, fp32 and fp16 outputs

    def final(u, a, b, c, rz, rn):
        dp, dn = dot(u, a, b, c), dot(u, [-x for x in a], b, -c)
        return {(rn, rn): "rne", (rz, rz): "rtz", (rn, rz): "up", (rz, rn): "down"}.get(
            (dp, abs(dn)), "?")
    f["final32"] = final(u32, [1.0] * 3, [1.0] * 3, 1 + L(1, -pout + 1) + L(1, -pout + 2),
                         4.0, 4.0 + L(1, -pout + 3))
    if u16 is not None:
        f["final16"] = final(u16, [0, 0, 0, L(1, -11), L(1, -12)], [1.0] * 5, 1.0,
                             1.0, 1 + L(1, -10))

    # Feature 5/6 (7/8 for tf32): carry bits and FMA size, HPEC Algorithm 1
    def carry_and_fma(u, pin):
        k, necb = 2, 0
        while k <= 16:
            lgk = math.ceil(math.log2(k))
            a = [0.0] * 16
            a[0], a[k - 1] = 1.0, L(1, -pout + 1)
            c = 1 + L(1, -pout + 1)
            dp = dot(u, a, [1.0] * 16, c)
            dn = dot(u, [-x for x in a], [1.0] * 16, -c)
            if dp != 2 + L(1, -pout + 2) and abs(dn) != 2 + L(1, -pout + 2):
                return necb, k - 1
            a = [0.0] * 16
            a[:k - 1] = [2 - L(1, -pin + 1)] * (k - 1)
            a[k - 1] = L(1, -pout + 1)
            c = 2 - L(1, -pin + 1) + sum(L(1, e) for e in range(-pout + 1, -pout + lgk + 1))
            if dot(u, a, [1.0] * 16, c) == c + sum(a):
                necb = math.floor(math.log2(k * (2 - L(1, -pin + 1))))
            k += 1
        return necb, 16
    f["carry"], f["fma"] = carry_and_fma(u32, 11)
    if utf32 is not None:
        f["carry_tf32"], f["fma_tf32"] = carry_and_fma(utf32, 11)
    # Feature 9: rounding when two BFMAs are compiled
    nf = f["fma"]
    if 2 * nf <= 16:
        a = [0.0] * (2 * nf)
        b = [1.0] * (2 * nf)
        a[nf], b[nf] = L(1, -pout + 1), 0.75
        c = 1 + L(1, -pout + 1)
        f["compile"] = final(u32, a, b, c, c, c + L(1, -pout + 1))
    # Feature 10: normalisation pattern
    t = 3
    a = [L(1, -pout + t) + L(1, -pout)] * 2
    d = dot(u32, a, [1.0, 1.0], 1 - L(1, -pout + t))
    f["normalisation"] = ("late" if d == 1 + L(1, -pout + t) + L(1, -pout + 1) else
                          "immediate" if d == 1 + L(1, -pout + t) else "?")
    return f


def test_hpec_feature_tests_a30_documented_outcome():
    """The HPEC test vectors detect on the A100/A30 preset exactly what the
    README reports for the A30 GPU."""
    f = hpec_features(preset("A100", "fp16", "fp32"), preset("A100", "fp16", "fp16"),
                      preset("A100", "tf32", "fp32"))
    assert f == {"neab": 1, "align": "rtz", "final32": "rtz", "final16": "rne",
                 "carry": 3, "fma": 8, "carry_tf32": 2, "fma_tf32": 4,
                 "compile": "rtz", "normalisation": "late"}


@pytest.mark.parametrize("gpu", ["V100", "A100", "H100", "B200", "Ada"])
def test_hpec_feature_tests_recover_each_fp16_preset(gpu):
    """Applied to every fp16 preset, the HPEC vectors recover the preset's own
    parameters (FMA size, extra alignment bits up to the 2 the test can see,
    truncation, final rounding modes)."""
    u32, u16 = preset(gpu, "fp16", "fp32"), preset(gpu, "fp16", "fp16")
    f = hpec_features(u32, u16)
    assert f["fma"] == min(u32.fma_size, 16)
    assert f["neab"] == min(u32.align_bits, 2)
    assert f["final32"] == "rtz"
    # the fp16-output vector puts its two small terms at positions 4 and 5: with
    # fma_size 4 (V100) they fall in two blocks, each a tie rounded to even, so
    # the vector reads like truncation there; one block from fma_size 5 up
    assert f["final16"] == ("rne" if u32.fma_size >= 5 else "rtz")
    assert f.get("align", "rtz") == "rtz"
    assert f["normalisation"] == "late"


def test_hpec_detects_knobs_of_custom_units():
    """The feature tests see the knobs (so the knobs change bits): alignment
    rounding, final rounding, FMA size and extra bits of a custom unit."""
    base = MatrixUnit("fp16", "fp32", fma_size=8, align_bits=1)
    b16 = base.replace(out_fmt="fp16", final_rounding="rne")
    assert hpec_features(base.replace(align_rounding="rne"), b16)["align"] == "rne"
    assert hpec_features(base.replace(align_rounding="down"), b16)["align"] == "down"
    assert hpec_features(base.replace(final_rounding="rne"), b16)["final32"] == "rne"
    assert hpec_features(base.replace(fma_size=4), b16)["fma"] == 4
    assert hpec_features(base.replace(align_bits=0), b16)["neab"] == 0


# ---------------------------------------------------------------------------
# Exceptional cases (model_validation/ExceptionalCasesTest.m)
# ---------------------------------------------------------------------------
def test_overflow_in_an_interleaved_sub_vector_stays_infinite():
    """An infinite first sub-vector result goes through the second stage and
    the join as inf (GEMM.m: a block holding inf returns the sum), also with
    a narrow register (fmod of inf would be NaN)."""
    for carry in (None, 2):
        u = MatrixUnit("bf16", "fp16", fma_size=2, interleave=2, carry_bits=carry,
                       final_rounding="rne")
        assert dot(u, [L(1, 17), 0.0, 1.0, 0.0], [1.0] * 4, k=4) == math.inf


def test_exceptional_cases():
    u = MatrixUnit("bf16", "fp32", fma_size=16, align_bits=1, final_rounding="rne")
    big = L(1, 127)
    assert dot(u, [big], [1.0], big) == math.inf                       # 1: overflow -> +inf
    assert dot(u, [math.inf], [-math.inf]) == -math.inf               # 2: inf * -inf
    assert math.isnan(dot(u, [-math.inf, math.inf], [1.0, 1.0]))      # 3: inf - inf
    u16 = MatrixUnit("fp16", "fp16", fma_size=16, align_bits=1, final_rounding="rne")
    assert dot(u16, [32768.0, 32768.0], [1.0, 1.0]) == math.inf       # 4
    assert dot(u16, [-32768.0, -32768.0], [1.0, 1.0]) == -math.inf    # 5
    u8 = MatrixUnit("fp8_e5m2", "fp16", fma_size=16, align_bits=1, final_rounding="rne")
    assert dot(u8, [32768.0, 32768.0], [1.0, 1.0]) == math.inf        # 6
    assert dot(u8, [32768.0, 32768.0], [-1.0, -1.0]) == -math.inf     # 7
    # truncating units overflow to inf too (the model: exponent past emax)
    assert dot(preset("H100", "bf16", "fp32"), [big], [1.0], big) == math.inf
    # NaN anywhere, and inf * 0
    assert math.isnan(dot(u, [math.nan, 1.0], [1.0, 1.0]))
    assert math.isnan(dot(u, [math.inf], [0.0]))
    assert math.isnan(dot(u, [1.0], [1.0], math.nan))
    assert dot(u, [1.0], [1.0], -math.inf) == -math.inf


# ---------------------------------------------------------------------------
# independent scalar transcription of the MATLAB model (exact arithmetic)
# ---------------------------------------------------------------------------
def _exp_sig(x: Fraction, emin: int) -> tuple[int, Fraction]:
    """Exponent max(floor(log2|x|), emin) and significand x / 2**exp."""
    e = math.floor(math.log2(abs(x)))
    while Fraction(2) ** e > abs(x):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(x):
        e += 1
    e = max(e, emin)
    return e, x / Fraction(2) ** e


def _round_frac(x: Fraction, p: int, emin: int, emax: int, mode: str) -> Fraction | float:
    """Exact rounding of x to a binary format (p bits, gradual underflow);
    |result| >= 2**(emax+1) is +-inf (the MATLAB models' rule)."""
    if x == 0:
        return Fraction(0)
    s = 1 if x > 0 else -1
    e, _ = _exp_sig(abs(x), emin)
    q = Fraction(2) ** (e - p + 1)
    m = abs(x) / q
    f = m.numerator // m.denominator
    r = m - f
    if mode == "rne":
        f += 1 if r > Fraction(1, 2) or (r == Fraction(1, 2) and f % 2) else 0
    elif mode == "up":
        f += 1 if (r and s > 0) else 0
    elif mode == "down":
        f += 1 if (r and s < 0) else 0
    v = s * f * q
    if abs(v) >= Fraction(2) ** (emax + 1):
        return s * math.inf
    return v


def _port_block(prods, c: Fraction, fin, neab, stk, fmt, mode, frac=23, emin_c=-126):
    """One Generic_BFMA_TC call, transcribed from fpbits_IEEE2: significands as
    integers with 23 fraction bits, products >= 2 shifted right with exponent+1,
    neab (+1 when the largest-exponent product is >= 2 and c does not exceed
    it), truncation by the exponent difference, optional sticky bit."""
    terms = []  # (exp, int sig, sign)
    pe, ps = [], []
    for a, b in prods:
        if a == 0 or b == 0:
            continue
        ea, sa = _exp_sig(a, fin.emin)
        eb, sb = _exp_sig(b, fin.emin)
        pe.append(ea + eb)
        ps.append(sa * sb)
    if not pe and c == 0:
        return Fraction(0)
    ec = sc = None
    if c != 0:
        ec, scf = _exp_sig(c, emin_c)
        sc = abs(scf) * 2 ** frac
        assert sc.denominator == 1
    spc = 0
    if pe:
        m = max(pe)
        big = max(abs(s) for e, s in zip(pe, ps, strict=True) if e == m)
        spc = int((ec is None or m >= ec) and big >= 2)
    for e, s in zip(pe, ps, strict=True):
        v = abs(s) * 2 ** frac
        assert v.denominator == 1
        v = int(v)
        if abs(s) >= 2:
            v >>= 1
            e += 1
        terms.append((e, v, 1 if s > 0 else -1))
    if ec is not None:
        terms.append((ec, int(sc), 1 if c > 0 else -1))
    n = neab + spc
    maxe = max(t[0] for t in terms)
    total = 0
    for e, v, sgn in terms:
        v = v << n if n >= 0 else v >> -n
        sh = maxe - e
        kept = v >> sh
        if stk:
            kept = 2 * kept + int(kept << sh != v)
        total += sgn * kept
    val = Fraction(total) / Fraction(2) ** (frac + n + stk - maxe)
    return _round_frac(val, fmt.p, fmt.emin, fmt.emax, mode)


def _port_gemm(A, B, C, unit: MatrixUnit):
    """D = A B + C, one entry at a time, K blocks in order (GEMM.m)."""
    fin = get_format(unit.in_fmt)
    fmt = unit.result_format
    fout = get_format(unit.out_fmt)
    M, K = A.shape
    N = B.shape[1]
    blk = unit.block
    stk = int(unit.align_rounding == "sticky")
    assert unit.align_rounding in ("rtz", "sticky")  # what the MATLAB model has
    D = np.empty((M, N))
    for i in range(M):
        for j in range(N):
            acc = Fraction(float(C[i, j]))
            part = Fraction(0) if unit.promote_every else acc
            for k0 in range(0, K, blk):
                pr = [(Fraction(float(A[i, k])), Fraction(float(B[k, j])))
                      if k < K else (Fraction(0), Fraction(0)) for k in range(k0, k0 + blk)]
                if isinstance(part, float):  # +-inf after an overflow: stays (GEMM.m)
                    continue
                if unit.interleave == 1:
                    part = _port_block(pr, part, fin, unit.align_bits, stk, fmt, unit.final_rounding)
                else:
                    h1 = [pr[t] for t in range(blk) if t % 4 < 2]
                    h2 = [pr[t] for t in range(blk) if t % 4 >= 2]
                    d1 = _port_block(h1, Fraction(0), fin, unit.align_bits, stk, fmt,
                                     unit.final_rounding)
                    d2 = _port_block(h2, d1, fin, unit.align_bits, stk, fmt, unit.final_rounding)
                    part = _port_join(d2, part, fmt, unit.join_bits)
                if unit.promote_every and (k0 + blk) % unit.promote_every == 0:
                    acc = Fraction(float(np.float32(float(acc)) + np.float32(float(part))))
                    part = Fraction(0)
            if unit.promote_every:
                part = Fraction(float(np.float32(float(acc)) + np.float32(float(part))))
                if fout.name == "fp16":
                    part = _round_frac(part, 11, -14, 15, "rne")
            D[i, j] = float(part)
    return D


def _port_join(d: Fraction, c: Fraction, fmt, join_bits: int):
    """Final addition of an interleaved block to C: two terms aligned to the
    larger one's exponent, p-1+2 fraction bits and a sticky bit, RNE."""
    terms = [x for x in (d, c) if x != 0]
    if not terms:
        return Fraction(0)
    emin = -126 if fmt.emax > 15 else -14
    es = [_exp_sig(x, emin)[0] for x in terms]
    E = max(es)
    q = Fraction(2) ** (E - (fmt.p - 1) - join_bits)
    total = 0
    for x in terms:
        m = abs(x) / q
        kept = m.numerator // m.denominator
        total += (1 if x > 0 else -1) * (2 * kept + int(kept != m))
    return _round_frac(Fraction(total) * q / 2, fmt.p, fmt.emin, fmt.emax, "rne")


def _random_inputs(rng, fin, shape, spread):
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    x[rng.random(shape) < 0.1] = 0.0
    from numlab.rounding import round_to
    return np.asarray(round_to(x, fin, "rne", saturate=True), dtype=np.float64)


@pytest.mark.parametrize("key", sorted(UNIT_PRESETS))
def test_presets_match_scalar_transcription(key):
    """Bit for bit against the exact scalar transcription of the MATLAB model,
    with mixed signs, zeros, wide exponent spreads and a nonzero C."""
    u = UNIT_PRESETS[key]
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    fin, fout = get_format(u.in_fmt), get_format(u.out_fmt)
    K = 2 * u.block + 3
    spread = 3 if fin.emax <= 15 else 8
    A = _random_inputs(rng, fin, (4, K), spread)
    B = _random_inputs(rng, fin, (K, 3), spread)
    C = _random_inputs(rng, fout, (4, 3), 4)
    # subnormal inputs (nominal exponent clamped at emin) in row 0 / column 0
    tiny = fin.smallest_normal
    A[0, ::2] = _random_inputs(rng, fin, (1, len(A[0, ::2])), 0)[0] * tiny
    B[::3, 0] = _random_inputs(rng, fin, (len(B[::3, 0]), 1), 0)[:, 0] * tiny * 4
    A, B = (np.asarray(_round_in(x, fin), dtype=np.float64) for x in (A, B))
    if u.result_bits is not None:
        C = np.asarray(_round_c(C, u), dtype=np.float64)
    got = mma(A, B, u, C).astype(np.float64)
    ref = _port_gemm(A, B, C, u)
    np.testing.assert_array_equal(got, ref)


def _round_in(x, fin):
    from numlab.rounding import round_to
    return round_to(x, fin, "rne")


def _round_c(C, u):
    from numlab.rounding import round_to
    return round_to(C, u.result_format, "rtz")


@pytest.mark.parametrize("unit", [
    MatrixUnit("fp16", "fp32", fma_size=4, align_bits=3, align_rounding="sticky",
               final_rounding="rne"),
    MatrixUnit("bf16", "fp32", fma_size=8, align_bits=-3, final_rounding="up"),
    MatrixUnit("fp8_e4m3", "fp16", fma_size=8, align_bits=0, final_rounding="down"),
    MatrixUnit("fp8_e5m2", "fp32", fma_size=4, align_bits=2, interleave=2),
    MatrixUnit("fp16", "fp32", fma_size=4, align_bits=1, promote_every=16),
    MatrixUnit("bf16", "fp32", fma_size=8, align_bits=1),  # wide exponent range below
    MatrixUnit("fp16", "fp32", fma_size=1, interleave=2),  # empty second sub-vector
])
def test_custom_units_match_scalar_transcription(unit):
    """Knob combinations outside the presets (sticky, up/down, interleave,
    promotion; bf16 over 2**+-60 with overflow to inf) against the transcription."""
    rng = np.random.default_rng(7)
    fin, fout = get_format(unit.in_fmt), get_format(unit.out_fmt)
    K = 40
    spread = 60 if fin.emax > 15 else 5
    A = _random_inputs(rng, fin, (3, K), spread)
    B = _random_inputs(rng, fin, (K, 3), spread)
    C = _random_inputs(rng, fout, (3, 3), 4)
    if fin.emax > 15:
        A[0, :2], B[:2, 0] = 2.0 ** 70, 2.0 ** 70  # 2 * 2^140 overflows fp32
    np.testing.assert_array_equal(mma(A, B, unit, C).astype(np.float64),
                                  _port_gemm(A, B, C, unit))


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------
def test_fma1_wide_rne_is_fp32_sequential_accumulation():
    """fma_size=1, 24 extra alignment bits and RNE = c <- fl32(c + a_k b_k)
    (fp16 products are exact in fp32, so numpy float32 adds are the reference)."""
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((8, 64)) * np.exp2(rng.integers(-6, 7, (8, 64)))).astype(np.float16)
    b = (rng.standard_normal((64, 5)) * np.exp2(rng.integers(-6, 7, (64, 5)))).astype(np.float16)
    c = rng.standard_normal((8, 5)).astype(np.float32)
    u = MatrixUnit("fp16", "fp32", fma_size=1, align_bits=24, final_rounding="rne")
    acc = c.copy()
    for k in range(64):
        prod = (a[:, k:k + 1].astype(np.float32) * b[k:k + 1].astype(np.float32))
        assert np.array_equal(prod.astype(np.float64),
                              a[:, k:k + 1].astype(np.float64) * b[k:k + 1].astype(np.float64))
        acc = acc + prod
    np.testing.assert_array_equal(mma(a, b, u, c), acc)


def test_result_dtype_and_exactness_on_integers():
    """Small integers: every unit is exact; fp32 output is float32, fp16 float16."""
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (6, 33)).astype(np.float16)
    b = rng.integers(-3, 4, (33, 7)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for key in ("V100/fp16/fp32", "H100/fp16/fp16", "B200/fp16/fp32"):
        d = mma(a, b, UNIT_PRESETS[key])
        assert d.dtype == get_format(UNIT_PRESETS[key].out_fmt).dtype
        np.testing.assert_array_equal(d.astype(np.float64), ref)


def test_deepseek_promotion_reduces_h100_fp8_error():
    """DeepSeek-V3 section 3.3.2: the H100 fp8 accumulator (about 14 bits) loses
    accuracy with K; promoting to fp32 every 128 products fixes it."""
    rng = np.random.default_rng(11)
    K = 4096
    a = rng.uniform(0, 1, (4, K)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.uniform(0, 1, (K, 4)).astype(ml_dtypes.float8_e4m3fn)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    u = preset("H100", "e4m3", "fp32")
    err = np.max(np.abs(mma(a, b, u) - exact) / exact)
    err_p = np.max(np.abs(mma(a, b, u.replace(promote_every=128)) - exact) / exact)
    assert err > 0.01 and err_p < 0.002
    assert np.max(np.abs(mma(a, b, preset("B200", "e4m3", "fp32")) - exact) / exact) < 1e-5


# ---------------------------------------------------------------------------
# presets and errors
# ---------------------------------------------------------------------------
def test_presets_cite_sources_and_claim_no_measured_accuracy():
    assert set(GPUS) >= {"V100", "A100", "H100", "B200"}
    for key, u in UNIT_PRESETS.items():
        assert u.name == key and "MATLAB-tensor-core" in u.source and ".m @" in u.source
        assert u.evidence.startswith("parameters only")
        assert "bit-accurate" not in u.evidence


def test_preset_lookup_and_errors():
    assert preset("h100/fp16/fp32") is UNIT_PRESETS["H100/fp16/fp32"]
    assert preset("A100", "float16") is UNIT_PRESETS["A100/fp16/fp32"]
    with pytest.raises(ValueError, match="gpu='X1'.*valid choices"):
        preset("X1")
    with pytest.raises(ValueError, match="V100 has no preset.*bf16"):
        preset("V100", "bf16")
    with pytest.raises(ValueError, match="fma_size=0"):
        MatrixUnit(fma_size=0)
    with pytest.raises(ValueError, match="final_rounding='odd'"):
        MatrixUnit(final_rounding="odd")
    with pytest.raises(ValueError, match="promote_every=100"):
        MatrixUnit(fma_size=8, promote_every=100)
    with pytest.raises(ValueError, match="a holds .* not a fp16 value"):
        mma(np.array([[0.1]]), np.array([[1.0]]), MatrixUnit())
    with pytest.raises(ValueError, match="a must be"):
        mma(np.ones((2, 3)), np.ones((2, 3)), MatrixUnit())


# ---------------------------------------------------------------------------
# the compiled path (optional numba) gives the numpy path's bits
# ---------------------------------------------------------------------------
def test_numba_engine_matches_numpy_engine():
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    from numlab.rounding import round_to
    rng = np.random.default_rng(21)
    units = [u for u in UNIT_PRESETS.values() if u.interleave == 1] + [
        MatrixUnit(align_rounding="sticky", final_rounding="rne"),
        MatrixUnit(align_rounding="down", final_rounding="up", subnormals=False),
        MatrixUnit("bf16", align_rounding="rne", final_rounding="down", align_bits=-4),
        MatrixUnit(fma_size=4, promote_every=32, out_fmt="fp16", final_rounding="rne"),
    ]
    for u in units:
        fin = get_format(u.in_fmt)
        a = round_to(rng.standard_normal((20, 70)) * np.exp2(rng.integers(-12, 12, (20, 70))),
                     fin, saturate=True)
        b = round_to(rng.standard_normal((70, 9)) * np.exp2(rng.integers(-12, 12, (70, 9))),
                     fin, saturate=True)
        a[rng.random(a.shape) < 0.1] = 0.0
        a[0, 0], b[5, 1] = np.inf, np.nan
        c = round_to(rng.standard_normal((20, 9)), u.result_format)
        x = mma(a, b, u, c, engine="numpy")
        y = mma(a, b, u, c, engine="numba")
        assert np.array_equal(x, y, equal_nan=True), u
        assert np.array_equal(np.signbit(x), np.signbit(y)), u
    one = np.ones((2, 8))
    with pytest.raises(ValueError, match="engine='numba' needs"):
        mma(one, one.T, MatrixUnit("fp8_e5m2", fma_size=4, interleave=2), engine="numba")
    with pytest.raises(ValueError, match="engine='gpu'"):
        mma(one, one.T, units[0], engine="gpu")


def _random_unit(rng) -> MatrixUnit:
    """A random unit the compiled path takes (interleave 1, no carry_bits)."""
    from numlab.kernels.mma import ALIGN_ROUNDINGS, FINAL_ROUNDINGS, IN_FORMATS
    fin = str(rng.choice(IN_FORMATS))
    fout = str(rng.choice(["fp32", "fp16"]))
    fma = int(rng.choice([1, 2, 3, 4, 5, 8, 16, 32]))
    ab_max = min(24, 53 - 27 - fma.bit_length())
    align = int(rng.integers(-12, ab_max + 1))
    rbits = None
    if fout == "fp32" and rng.random() < 0.3:
        rbits = int(rng.choice([2, 3, *range(8, 24)]))
    promote = None
    if rng.random() < 0.3:
        promote = fma * int(rng.integers(1, 5))
    subnormals = bool(rng.random() < 0.7)
    return MatrixUnit(fin, fout, fma_size=fma, align_bits=align,
                      align_rounding=str(rng.choice(ALIGN_ROUNDINGS)),
                      final_rounding=str(rng.choice(FINAL_ROUNDINGS)),
                      subnormals=subnormals, result_bits=rbits, promote_every=promote,
                      subnormal_anchor="true" if subnormals and rng.random() < 0.5 else "clamped")


def _hard_inputs(rng, unit, M, K, N):
    """A, B, C of ``unit``'s formats with zeros, subnormals, values near the
    top of the range (overflow of block results), and a few inf/NaN."""
    from numlab.rounding import round_to
    fin, fres = get_format(unit.in_fmt), unit.result_format
    spread = 6 if fin.emax <= 15 else 40

    def draw(shape, fmt):
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
        x[rng.random(shape) < 0.15] = 0.0
        sub = rng.random(shape) < 0.1
        x[sub] = rng.standard_normal(int(sub.sum())) * fmt.smallest_normal / 4
        top = rng.random(shape) < 0.03
        x[top] = rng.choice([-1.0, 1.0], int(top.sum())) * fmt.max
        return np.asarray(round_to(x, fmt, "rne", saturate=True), dtype=np.float64)

    a, b, c = draw((M, K), fin), draw((K, N), fin), draw((M, N), fres)
    if rng.random() < 0.5:
        a[rng.integers(M), rng.integers(K)] = rng.choice([np.inf, -np.inf, np.nan])
        b[rng.integers(K), rng.integers(N)] = rng.choice([np.inf, -np.inf, np.nan])
        c[rng.integers(M), rng.integers(N)] = rng.choice([np.inf, -np.inf, np.nan])
    return a, b, c


@pytest.mark.parametrize("seed", range(6))
def test_numba_engine_random_units_and_hard_inputs(seed):
    """The compiled path against the numpy path on random units (every
    alignment/final rounding, fma sizes 1-32, align_bits, result_bits,
    promotion, flushing) and inputs with zeros, subnormals, inf/NaN and
    block results that overflow; shapes cross the kernel's row and column
    tiles and its two-thread split (M >= 128), K is not a multiple of the block."""
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    rng = np.random.default_rng(100 + seed)
    for M, K, N in ((3, 1, 2), (17, 45, 131), (130, 37, 20)):
        u = _random_unit(rng)
        a, b, c = _hard_inputs(rng, u, M, K, N)
        x = mma(a, b, u, c, engine="numpy")
        y = mma(a, b, u, c, engine="numba")
        assert np.array_equal(x, y, equal_nan=True), (u, M, K, N)
        assert np.array_equal(np.signbit(x), np.signbit(y)), (u, M, K, N)


def test_numba_engine_subnormal_and_overflowing_results():
    """Block results in fp32's subnormal range (bf16 products near 2**-140,
    subnormal C) and results that overflow (C near fp32's max): the compiled
    path's shortcut for rows whose anchors exclude both must not be taken
    (N = 128: one full column tile, where the shortcut applies)."""
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    from numlab.rounding import round_to
    rng = np.random.default_rng(31)
    u = UNIT_PRESETS["B200/bf16/fp32"]
    a = round_to(rng.standard_normal((20, 40)) * 2.0 ** -70, get_format("bf16"))
    b = round_to(rng.standard_normal((40, 128)) * 2.0 ** -70, get_format("bf16"))
    c = round_to(rng.standard_normal((20, 128)) * 2.0 ** -130, get_format("fp32"), "rtz")
    x, y = mma(a, b, u, c, engine="numpy"), mma(a, b, u, c, engine="numba")
    assert np.array_equal(x, y)
    assert np.any((x != 0) & (np.abs(x) < 2.0 ** -126))  # the case is exercised
    # bf16 products 2**126 on C = +-max: the first block of 8 overflows to
    # inf, which stays although the second block (products -1.5 2**126)
    # would bring the sum back below 2**128
    u = UNIT_PRESETS["A100/bf16/fp32"]
    a = np.full((20, 16), 2.0 ** 63)
    a[:, 8:] *= -1.5
    b = np.full((16, 128), 2.0 ** 63)
    c = np.full((20, 128), np.finfo(np.float32).max, dtype=np.float32)
    c[::2] *= -1
    x, y = mma(a, b, u, c, engine="numpy"), mma(a, b, u, c, engine="numba")
    assert np.array_equal(x, y)
    assert np.isposinf(x).all()  # the case is exercised: inf stays


def test_block_result_below_the_smallest_subnormal_is_zero():
    """A truncated block result below fp32's smallest subnormal (2**-155) is
    -0, so the next block has no C: 1 * 1 gives 1 exactly.  (The compiled
    path once cleared exponent bits there and left a tiny nonzero C, whose
    floor-aligned term took one unit off.)  Both engines."""
    u = MatrixUnit("bf16", "fp32", fma_size=1, align_bits=0, align_rounding="down")
    a = np.array([[2.0 ** -100, 1.0]])
    b = np.array([[-(2.0 ** -55)], [1.0]])
    for engine in ("numpy", "numba") if _has_numba() else ("numpy",):
        assert mma(a[:, :1], b[:1], u, engine=engine)[0, 0] == 0.0
        assert mma(a, b, u, engine=engine)[0, 0] == 1.0, engine


def _has_numba() -> bool:
    try:
        import numba  # noqa: F401  (optional)
    except ImportError:
        print("numba not installed: the compiled path is not tested here")
        return False
    return True


@pytest.mark.parametrize("key", ["A100/fp16/fp32", "H100/fp16/fp16", "H100/fp8_e4m3/fp32",
                                 "V100/fp16/fp32", "B200/bf16/fp32", "A100/tf32/fp32"])
def test_numba_engine_matches_scalar_transcription(key):
    """The compiled path against the exact scalar transcription directly
    (not only through the numpy path), with subnormal inputs and a nonzero C."""
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    u = UNIT_PRESETS[key]
    rng = np.random.default_rng(zlib.crc32(key.encode()) + 1)
    fin, fout = get_format(u.in_fmt), get_format(u.out_fmt)
    K = 2 * u.block + 5
    spread = 3 if fin.emax <= 15 else 8
    A = _random_inputs(rng, fin, (3, K), spread)
    B = _random_inputs(rng, fin, (K, 4), spread)
    A[1, ::3] = _random_inputs(rng, fin, (1, len(A[1, ::3])), 0)[0] * fin.smallest_normal
    A = np.asarray(_round_in(A, fin), dtype=np.float64)
    C = _random_inputs(rng, fout, (3, 4), 4)
    if u.result_bits is not None:
        C = np.asarray(_round_c(C, u), dtype=np.float64)
    got = mma(A, B, u, C, engine="numba").astype(np.float64)
    np.testing.assert_array_equal(got, _port_gemm(A, B, C, u))


@pytest.mark.parametrize("carry", [1, 2])
def test_hpec_carry_test_detects_carry_bits(carry):
    """A (hypothetical) register with ``carry_bits`` integer bits above the
    anchor is what the HPEC carry-bit test measures."""
    u = MatrixUnit("fp16", "fp32", fma_size=8, align_bits=1, carry_bits=carry)
    assert hpec_features(u, None)["carry"] == carry


@pytest.mark.parametrize("field,value", [("result_bits", 10.5), ("result_bits", True), ("align_bits", True),
                                         ("carry_bits", True), ("carry_bits", 1.0), ("subnormals", 0),
                                         ("promote_every", 8.0)])
def test_mistyped_fields_are_refused_at_construction(field, value):
    """A float or bool where an int is meant (or an int for the bool
    ``subnormals``) is refused when the unit is built, naming the field and
    the value (result_bits=10.5 used to fail only inside mma, as 'p must be an int')."""
    with pytest.raises(ValueError, match=rf"{field}={value!r} is not valid"):
        MatrixUnit("fp16", "fp32", fma_size=4, **{field: value})


def test_join_bits_without_interleaving_is_refused():
    """join_bits shapes only the join of an interleaved block: with
    interleave=1 a non-default value would change no bit (two spellings of
    one unit), so it is refused naming the field, its value and what it needs."""
    a = np.array([[1.0, 2.0 ** -12, 3.0, -0.5]])
    b = np.array([[1.0], [1.0], [2.0 ** -11], [1.0]])
    u = MatrixUnit("fp16", "fp32", fma_size=4)
    for jb in (0, 5):
        with pytest.raises(ValueError, match=rf"join_bits={jb} .*interleave=2.*interleave=1"):
            MatrixUnit("fp16", "fp32", fma_size=4, join_bits=jb)
    with pytest.raises(ValueError, match=r"mma='custom\(join_bits=0\)'.*join_bits=0"):
        parse_unit("custom(join_bits=0)")
    # the default value stays valid without interleaving, and interleaved units take any
    assert mma(a, b, u.replace(join_bits=2)).tobytes() == mma(a, b, u).tobytes()
    assert MatrixUnit("fp8_e5m2", "fp32", fma_size=4, interleave=2, join_bits=0).join_bits == 0


def test_every_knob_changes_bits():
    """Each numerical field of MatrixUnit changes some result (a knob that
    changes no bit would be a bug); the vectors are the published ones above
    or small constructions named in the comments."""
    base = MatrixUnit("fp16", "fp32", fma_size=8, align_bits=1)
    # alignment bits / rounding / final rounding / fma size / carry: HPEC vectors
    f0 = hpec_features(base, None)
    for change in (dict(align_bits=0), dict(align_rounding="rne"), dict(final_rounding="rne"),
                   dict(fma_size=4), dict(carry_bits=1)):
        assert hpec_features(base.replace(**change), None) != f0, change
    # subnormals: Fasi A1 (2^-24 * 4 is 2^-22 only with subnormal inputs)
    assert dot(base.replace(subnormals=False), [L(1, -24)], [4.0]) == 0.0
    # out_fmt / result_bits: 1 + 2^-20 is fp32, not fp16 nor a 14-bit result
    assert dot(base, [1.0, L(1, -20)], [1.0, 1.0]) == 1 + L(1, -20)
    assert dot(base.replace(out_fmt="fp16", final_rounding="rne"),
               [1.0, L(1, -20)], [1.0, 1.0]) == 1.0
    assert dot(base.replace(result_bits=14), [1.0, L(1, -20)], [1.0, 1.0]) == 1.0
    # in_fmt: bf16 holds 2^100, fp16 does not
    assert dot(base.replace(in_fmt="bf16"), [L(1, 100)], [1.0]) == L(1, 100)
    # interleave: {1, -1} cancel in the first sub-vector (indices 0, 1), so the
    # tiny product of the second (index 2) keeps all its bits; in one block of
    # 8 it is truncated against the anchor 2^0
    u2 = MatrixUnit("fp8_e5m2", "fp32", fma_size=4, align_bits=0, interleave=2)
    a, b = [1.0, 1.0, L(1, -15)], [1.0, -1.0, L(1, -15)]
    assert dot(u2, a, b, k=8) == L(1, -30)
    assert dot(u2.replace(interleave=1, fma_size=8), a, b, k=8) == 0.0
    # join_bits: the interleaved result 3*2^-25 joins C = 1 by RNE; with 2 guard
    # bits the sum 1 + 0.75 ulp rounds up, with none the sticky bit makes a tie
    a, b = [0.0, 0.0, 1.5 * L(1, -12)], [0.0, 0.0, L(1, -12)]
    assert dot(u2, a, b, 1.0, k=8) == 1 + L(1, -23)
    assert dot(u2.replace(join_bits=0), a, b, 1.0, k=8) == 1.0
    # promote_every: test_deepseek_promotion_reduces_h100_fp8_error


# ---------------------------------------------------------------------------
# the compiled fast path (float32 products, int32 block sums, unrolled blocks)
# ---------------------------------------------------------------------------
def test_generated_drivers_are_current():
    """src/numlab/kernels/mma/_numba_blocks.py is what its generator writes."""
    pytest.importorskip("numba", reason="the generator reads numlab.kernels.mma._numba_steps (numba)")
    from pathlib import Path

    from numlab.kernels.mma import _numba_gen
    path = Path(_numba_gen.__file__).with_name("_numba_blocks.py")
    assert path.read_text() == _numba_gen.source(), (
        "regenerate: python -m numlab.kernels.mma._numba_gen")


def _fast_units():
    """Units the fast path takes: every unrolled block length, truncation
    and rne alignment, narrowed results, promotion, flushing."""
    return [
        UNIT_PRESETS["V100/fp16/fp32"], UNIT_PRESETS["A100/fp16/fp32"], UNIT_PRESETS["H100/fp16/fp32"],
        UNIT_PRESETS["A100/tf32/fp32"], UNIT_PRESETS["H100/fp8_e4m3/fp32"], UNIT_PRESETS["Ada/fp8_e5m2/fp32"],
        MatrixUnit("fp8_e4m3", fma_size=32, align_bits=-10),
        MatrixUnit("fp16", fma_size=8, align_bits=2, align_rounding="rne"),
        MatrixUnit("fp16", fma_size=16, align_bits=1, align_rounding="rne", subnormals=False),
        MatrixUnit("bf16", fma_size=4, align_bits=0, result_bits=12, promote_every=32),
        MatrixUnit("fp16", fma_size=16, align_bits=2, promote_every=64),
        MatrixUnit("fp16", fma_size=8, align_bits=1, subnormal_anchor="true"),
    ]


def _spy_fast_ok(monkeypatch) -> list:
    """Record each decision of ``_mma_numba._fast_ok`` (per row chunk)."""
    from numlab.kernels.mma import _numba as _mma_numba
    taken: list = []
    real = _mma_numba._fast_ok
    monkeypatch.setattr(_mma_numba, "_fast_ok", lambda *args: taken.append(real(*args)) or taken[-1])
    return taken


@pytest.mark.parametrize("k", range(12))
def test_fast_path_gives_the_general_paths_bits(k, monkeypatch):
    """Each unit of ``_fast_units`` on inputs with zeros, subnormals, values
    at the top of the format (block results that overflow: an infinite C
    for later blocks), cancellation and whole zero columns and rows; N and
    K not multiples of the tile and block.  The fast path must be taken
    (``_fast_ok`` True) and give the numpy path's bits."""
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    u = _fast_units()[k]
    taken = _spy_fast_ok(monkeypatch)
    rng = np.random.default_rng(500 + k)
    fin = get_format(u.in_fmt)
    for M, K, N in ((33, 3 * u.block + 5, 200), (20, 64, 128), (130, 2 * u.block + 3, 140)):
        a, b, c = _hard_inputs(rng, u, M, K, N)
        if fin.emax > 15:  # keep bf16/tf32 products in float32's range: the fast path's data bound
            a, b = np.clip(a, -2.0 ** 60, 2.0 ** 60), np.clip(b, -2.0 ** 60, 2.0 ** 60)
            a[np.abs(a) < 2.0 ** -60], b[np.abs(b) < 2.0 ** -60] = 0.0, 0.0
        a[:, 1] = b[2] = c[3 % M] = 0.0
        a[4] = -a[5]  # cancellation between rows' products is per row; within a block:
        a[6, : u.block] = 1.0
        top = min(fin.max, 2.0 ** 60) / 4
        b[: u.block // 2, 7] = top
        b[u.block // 2: u.block, 7] = -top
        x = mma(a, b, u, c, engine="numpy")
        y = mma(a, b, u, c, engine="numba")
        assert np.array_equal(x, y, equal_nan=True), (u, M, K, N)
        assert np.array_equal(np.signbit(x), np.signbit(y)), (u, M, K, N)
    assert taken and all(taken), (u, taken)


def test_fast_path_bounds():
    """``_fast_ok`` refuses what would change bits: products outside
    float32's normal range, a block whose int32 sum could overflow (rne
    terms can reach 2**(width + 2)), final roundings other than truncation,
    block lengths without an unrolled loop."""
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    from numlab.kernels.mma._numba import _fast_ok
    f16, bf16 = get_format("fp16"), get_format("bf16")
    none = np.array([2000, -2000])
    ok = np.array([-24, 15])
    assert _fast_ok(UNIT_PRESETS["H100/fp16/fp32"], f16.p, f16.emin, ok, ok)
    assert _fast_ok(UNIT_PRESETS["H100/fp16/fp32"], f16.p, f16.emin, none, ok)
    assert not _fast_ok(UNIT_PRESETS["H100/fp16/fp16"], f16.p, f16.emin, ok, ok)  # rne final
    u = MatrixUnit("fp16", fma_size=16, align_bits=2, align_rounding="rne")
    assert not _fast_ok(u, f16.p, f16.emin, ok, ok)  # 16 * 2**27 = 2**31 with rne
    assert _fast_ok(u.replace(align_rounding="rtz"), f16.p, f16.emin, ok, ok)
    assert not _fast_ok(MatrixUnit("fp16", fma_size=5), f16.p, f16.emin, ok, ok)
    bu = UNIT_PRESETS["A100/bf16/fp32"]
    assert _fast_ok(bu, bf16.p, bf16.emin, np.array([-50, 60]), np.array([-53, 66]))
    # a product could reach 2**128
    assert not _fast_ok(bu, bf16.p, bf16.emin, np.array([-50, 60]), np.array([-53, 67]))
    # a nonzero block's scale 2**(24 - anchor) could exceed 2**127 (anchor -104)
    assert not _fast_ok(bu, bf16.p, bf16.emin, np.array([-50, 60]), np.array([-54, 60]))


@pytest.mark.parametrize("subnormals", [True, False])
def test_fast_path_subnormal_block_result(subnormals, monkeypatch):
    """A block result in fp32's subnormal range through the fast path: C =
    -(2**-104 - 2**-127) (normal) plus the product 2**-52 * 2**-52 on a bf16
    unit with width 23 (window quantum 2**-127 at anchor -104) is exactly
    2**-127; flushed to +0 without subnormals.  The plain truncation of the
    fast path alone would keep 2**-127 in both cases: the row must go to
    the general path."""
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    u = MatrixUnit("bf16", fma_size=4, align_bits=0, subnormals=subnormals)
    a = np.zeros((1, 4))
    b = np.zeros((4, 1))
    a[0, 0] = b[0, 0] = 2.0 ** -52
    c = np.array([[-(2.0 ** -104 - 2.0 ** -127)]])
    want = 2.0 ** -127 if subnormals else 0.0
    taken = _spy_fast_ok(monkeypatch)
    for engine in ("numpy", "numba"):
        got = mma(a, b, u, c, engine=engine)[0, 0]
        assert got == want and not np.signbit(got), (engine, got)
    assert taken == [True]


def test_nan_bits():
    """``nan_bits`` sets the pattern of every NaN result (fp32 and fp16
    output, both engines) and refuses what is not a NaN of out_fmt."""
    a = np.array([[np.inf, 1.0], [1.0, 1.0]])
    b = np.array([[0.0, 1.0], [1.0, np.nan]])
    for out, bits, dt in (("fp32", 0x7FFFFFFF, np.uint32), ("fp16", 0x7E01, np.uint16)):
        u = MatrixUnit(out_fmt=out, final_rounding="rne" if out == "fp16" else "rtz", nan_bits=bits)
        for engine in ("numpy", "numba") if _has_numba() else ("numpy",):
            d = mma(a, b, u, engine=engine)
            assert np.isnan(d).sum() == 3 and (d.view(dt)[np.isnan(d)] == bits).all(), engine
            assert d[1, 0] == 1.0
            plain = mma(a, b, u.replace(nan_bits=None), engine=engine)
            assert not (plain.view(dt)[np.isnan(plain)] == bits).any()
    for bad in (0x7F800000, 0x1FFFFFFFF, 1.5, -1):
        with pytest.raises(ValueError, match="nan_bits"):
            MatrixUnit(nan_bits=bad)
    with pytest.raises(ValueError, match="nan_bits"):
        MatrixUnit(out_fmt="fp16", final_rounding="rne", nan_bits=0x7FFFFFFF)


def test_fast_path_block_sum_beyond_int32(monkeypatch):
    """H100 fp16 (16 products, width 25): 16 products (2 - 2**-10)**2 and C
    just below 2 at the same anchor make a block sum above 2**31 window
    units; the fast path adds the C term in float64, so it still gives the
    numpy path's bits (an int32 sum would wrap)."""
    pytest.importorskip("numba", reason="numba is optional; the compiled mma path needs it")
    u = UNIT_PRESETS["H100/fp16/fp32"]
    top = 2.0 - 2.0 ** -10
    a = np.full((4, 32), top)
    b = np.full((32, 128), top)
    b[:, 1::2] *= -1
    c = np.full((4, 128), np.float32(2.0 - 2.0 ** -23), dtype=np.float32)
    c[:, 1::2] *= -1
    taken = _spy_fast_ok(monkeypatch)
    x = mma(a, b, u, c, engine="numpy")
    y = mma(a, b, u, c, engine="numba")
    assert np.array_equal(x, y) and taken == [True]
    s = 16 * np.floor(top * top * 2.0 ** 25) + np.floor(float(c[0, 0]) * 2.0 ** 25)
    assert s > 2 ** 31  # the case is exercised


def test_overflowed_block_result_stays_infinite_with_narrow_results():
    """An infinite C (a block that overflowed) under a final rounding other
    than truncation and result_bits=2: the compiled path scaled it by
    2**(p - 1 - 1024), a zero, and gave NaN (found by review); both engines
    keep +inf."""
    u = MatrixUnit("bf16", fma_size=4, result_bits=2, final_rounding="rne")
    a, b = np.zeros((1, 8)), np.zeros((8, 1))
    a[0, 0], b[0, 0] = 2.0 ** 63, 2.0 ** 62
    c = np.array([[1.5 * 2.0 ** 127]])
    for engine in ("numpy", "numba") if _has_numba() else ("numpy",):
        assert np.isposinf(mma(a, b, u, c, engine=engine)[0, 0]), engine


def test_float16_inputs_as_they_are():
    """fp16 inputs in a float16 array are read as they are (the numba path
    decodes their bits): the same bits as the same values in float64, on
    both engines, with subnormals, signed zeros, flushing, a float64 other
    operand and K not a multiple of the block."""
    rng = np.random.default_rng(77)
    a = (rng.standard_normal((40, 37)) * np.exp2(rng.integers(-20, 8, (40, 37)))).astype(np.float16)
    b = (rng.standard_normal((37, 150)) * np.exp2(rng.integers(-20, 8, (37, 150)))).astype(np.float16)
    a[0, :3] = [0.0, -0.0, np.float16(2.0 ** -24)]
    b[:2, 0] = [-(2.0 ** -24), -0.0]
    assert (np.abs(a) < 2.0 ** -14).any() and (a != 0).any()
    for u in (UNIT_PRESETS["A100/fp16/fp32"], UNIT_PRESETS["V100/fp16/fp16"],
              MatrixUnit("fp16", fma_size=8, subnormals=False)):
        want = mma(a.astype(np.float64), b.astype(np.float64), u, engine="numpy")
        engines = ("numpy", "numba") if _has_numba() else ("numpy",)
        for engine in engines:
            for x, y in ((a, b), (a, b.astype(np.float64)), (a.astype(np.float64), b)):
                got = mma(x, y, u, engine=engine)
                assert_same_bits(got, want, what=f"{u} {engine}")
