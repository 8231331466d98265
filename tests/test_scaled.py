"""Block-scaled formats (numlab.kernels.scaled) against independent references.

* An exact scalar reference written from the rules as the sources state them
  (OCP MX v1.0 section 6.3; NVIDIA's round-up E8M0; NVFP4 as torchao and
  TransformerEngine compute it; DeepSeek-V3's act_quant), in
  ``fractions.Fraction`` with the element grids built from the bit layouts
  (exponent bits, mantissa bits, bias, which codes are special), fp32
  rounding written out as round-half-even on Fractions.
* ml_dtypes' own casts for the element rounding.
* torchao 0.18's ``to_mx`` / ``nvfp4_quantize`` (optional: skips with the
  reason when torchao is absent; CI installs ``torchao==0.18.0``).
* Every special case of the module docstring, with values worked by hand.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import os
import subprocess
import sys
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, same_bits

from numlab.kernels import scaled as S

# ---------------------------------------------------------------------------
# the independent exact reference
# ---------------------------------------------------------------------------
# (exponent bits, mantissa bits, bias, special codes): "fn" = only the all-ones
# code is NaN (e4m3fn), "ieee" = top exponent is inf/NaN, "none" = all finite,
# "fnuz" = no negative zero, its code is the one NaN
LAYOUTS = {
    "fp8_e4m3": (4, 3, 7, "fn"),
    "fp8_e5m2": (5, 2, 15, "ieee"),
    "fp6_e2m3": (2, 3, 1, "none"),
    "fp6_e3m2": (3, 2, 3, "none"),
    "fp4_e2m1": (2, 1, 1, "none"),
    "fp8_e4m3fnuz": (4, 3, 8, "fnuz"),   # NaN is the -0 code 0x80: every positive code is finite
    "fp8_e5m2fnuz": (5, 2, 16, "fnuz"),
}
OCP_ELEMENTS = ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1")


def grid(name):
    """Non-negative finite values in code order (index = code)."""
    eb, mb, bias, special = LAYOUTS[name]
    out = []
    for code in range(1 << (eb + mb)):
        e, m = code >> mb, code & ((1 << mb) - 1)
        if special == "ieee" and e == (1 << eb) - 1:
            break
        if special == "fn" and code == (1 << (eb + mb)) - 1:
            break
        if e == 0:
            out.append(Fraction(m, 1 << mb) * Fraction(2) ** (1 - bias))
        else:
            out.append((1 + Fraction(m, 1 << mb)) * Fraction(2) ** (e - bias))
    return out


_GRIDS = {name: grid(name) for name in LAYOUTS}


def round_elem(v: Fraction, name, saturate=True):
    """Nearest value of the grid, ties to the even code; overflow (rounding past
    the largest value, to the code after it) gives +-max when saturating, else
    NaN (e4m3fn) or inf (e5m2)."""
    g = _GRIDS[name]
    ext = g + [g[-1] + (g[-1] - g[-2])]
    a = abs(v)
    k = min(bisect.bisect_left(ext, a), len(ext) - 1)
    best = min({max(k - 1, 0), k}, key=lambda i: (abs(ext[i] - a), i % 2))
    if best == len(g):
        if saturate:
            r = g[-1]
        else:
            return math.nan if LAYOUTS[name][3] in ("fn", "fnuz") else math.copysign(math.inf, v)
    else:
        r = ext[best]
    return -r if v < 0 else r


def fp32(v: Fraction) -> Fraction:
    """Round to binary32, nearest even (normal range and subnormals)."""
    if v == 0:
        return Fraction(0)
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -126)
    q = Fraction(2) ** (e - 23)
    n = a / q
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2):
        fl += 1
    r = fl * q
    return -r if v < 0 else r


def floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > a else e


def emax_of(name):
    return floor_log2(grid(name)[-1])


def ref_block(vals, fmt: S.ScaledFormat, ts=None):
    """(scale, dequantised values) of one block of Fractions, the rule as stated."""
    name = fmt.elem
    mx = grid(name)[-1]
    amax = max(abs(v) for v in vals)
    if fmt.scale_rule == "floor":  # OCP MX v1.0 6.3: X = 2^(floor(log2 amax) - emax_elem), clamped to E8M0
        e = -127 if amax == 0 else min(max(floor_log2(amax) - emax_of(name), -127), 127)
        X = Fraction(2) ** e
        return X, [round_elem(v / X, name) * X for v in vals]
    if fmt.scale_rule == "rceil":  # X = 2^ceil(log2(fp32(amax / max_elem)))
        d = fp32(amax / mx)
        if d == 0:
            e = -127
        else:
            e = floor_log2(d)
            e = e if Fraction(2) ** e == d else e + 1
            e = min(max(e, -127), 127)
        X = Fraction(2) ** e
        return X, [round_elem(v / X, name) * X for v in vals]
    # amax rule: s = fp32(amax / max_elem) [/ ts], clamped to the scale format's normals, rounded to it
    s = fp32(amax / mx)
    if ts is not None:
        s = fp32(s / ts)
    if fmt.scale_fmt == "fp8_e4m3":
        s = min(max(s, Fraction(1, 64)), Fraction(448))
        s = round_elem(s, "fp8_e4m3")
    else:
        s = max(s, Fraction(2) ** -126)
    if fmt.scale_apply == "reciprocal":
        r = fp32(fp32(1 / ts) / s) if ts is not None else fp32(1 / s)
        scaled = [fp32(v * r) for v in vals]
    else:
        d = fp32(s * ts) if ts is not None else s
        scaled = [fp32(v / d) for v in vals]
    deq_scale = fp32(ts * s) if ts is not None else s
    return s, [fp32(round_elem(w, name) * deq_scale) for w in scaled]


def ref_quantize(x: np.ndarray, fmt: S.ScaledFormat):
    """Scalar loop over the blocks of a 2-D float32 array."""
    bm, bn = fmt.block
    R, C = x.shape
    ts = None
    if fmt.tensor_scale:
        ts = fp32(Fraction(float(np.max(np.abs(x)))) / (448 * 6))
        ts = ts if ts >= Fraction(2) ** -126 else Fraction(1)
    scales = np.zeros((R // bm, C // bn))
    out = np.zeros(x.shape)
    for i in range(R // bm):
        for j in range(C // bn):
            blk = x[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            s, deq = ref_block([Fraction(float(v)) for v in blk.ravel()], fmt, ts)
            scales[i, j] = float(s)
            out[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn] = np.array([float(d) for d in deq]).reshape(blk.shape)
    return scales, out


def heavy(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, size=shape) * np.exp(rng.normal(0, 2, size=(shape[0], 1)))
    return x.astype(np.float32)


def special_rows(x, bn):
    x = x.copy()
    x[0, :bn] = 0.0                       # all-zero block
    x[1, :bn] = 1.0
    x[1, 3] = 8.0                         # amax exactly a power of two
    x[2, :bn] *= np.float32(1e-30)        # tiny block (scale near E8M0's bottom)
    x[3, bn:2 * bn] = np.float32(448 * 1.07)  # overflows under the floor rule
    return x


RULE_FORMATS = [dataclasses.replace(S.MXFP8_E4M3, name=f"{e}-{r}", elem=e, scale_rule=r)
                for e in S.ELEMENT_FORMATS for r in ("floor", "rceil")]


@pytest.mark.parametrize("fmt", RULE_FORMATS + [S.NVFP4, S.DEEPSEEK_1X128,
                                                dataclasses.replace(S.NVFP4, name="nv1", tensor_scale=False)],
                         ids=lambda f: f.name)
def test_matches_exact_reference(fmt):
    bn = fmt.block[1]
    x = special_rows(heavy((4, 2 * bn)), bn)
    q = S.quantize(x, fmt)
    scales, out = ref_quantize(x, fmt)
    np.testing.assert_array_equal(q.scales.astype(np.float64), scales)
    got = S.dequantize(q).astype(np.float64)
    assert got.dtype == np.float64 and got.shape == x.shape
    np.testing.assert_array_equal(got, out)


def test_128x128_blocks_match_reference():
    x = heavy((256, 128), seed=3)
    x[:128] *= 1000  # two blocks of very different magnitude
    q = S.quantize(x, S.DEEPSEEK_128X128)
    scales, out = ref_quantize(x, S.DEEPSEEK_128X128)
    assert q.scales.shape == (2, 1)
    np.testing.assert_array_equal(q.scales, scales)
    np.testing.assert_array_equal(S.dequantize(q), out)


@pytest.mark.parametrize("elem", list(S.ELEMENT_FORMATS))
def test_elements_are_ml_dtypes_saturating_casts(elem):
    """Elements = the scaled values clamped to +-max and cast by ml_dtypes (RNE)."""
    fmt = dataclasses.replace(S.MXFP8_E4M3, elem=elem)
    x = heavy((16, 256), seed=1)
    q = S.quantize(x, fmt)
    scaled = (x.reshape(16, 8, 32) / q.scales[..., None]).reshape(16, 256)
    want = np.clip(scaled, -fmt.max_elem, fmt.max_elem).astype(fmt.elem_dtype).astype(np.float32)
    np.testing.assert_array_equal(q.elements, want)
    assert set(np.unique(np.abs(q.elements))) <= set(S.element_values(fmt).astype(np.float32))


def test_element_grids_match_layouts():
    for name in S.ELEMENT_FORMATS:
        assert [Fraction(float(v)) for v in S.element_values(name)] == grid(name), name
        assert S.ELEMENT_FORMATS[name].max == float(grid(name)[-1])


# ---------------------------------------------------------------------------
# special values, by hand
# ---------------------------------------------------------------------------
def test_all_zero_block():
    x = np.zeros((1, 32), np.float32)
    x[0, 5] = -0.0
    q = S.quantize(x, S.MXFP8_E4M3)
    assert q.scale_codes().tolist() == [[0]]           # 2**-127, E8M0's smallest
    assert np.all(q.elements == 0) and np.signbit(q.elements[0, 5])
    assert np.all(S.dequantize(q) == 0)
    qn = S.quantize(np.zeros((1, 16), np.float32), S.NVFP4)
    assert qn.scales[0, 0] == 2.0 ** -6                # e4m3's smallest normal, not 0 (no 0/0)
    assert np.all(S.dequantize(qn) == 0)


def test_nan_block_is_nan_and_others_untouched():
    x = heavy((1, 256))
    x[0, 7] = np.nan
    for fmt in (S.MXFP8_E4M3, S.MXFP4, S.NVFP4, S.DEEPSEEK_1X128):
        q = S.quantize(x[:, :fmt.block[1] * 2], fmt)
        d = S.dequantize(q)
        bn = fmt.block[1]
        assert np.all(np.isnan(d[0, :bn])), fmt.name
        assert np.all(np.isfinite(d[0, bn:])), fmt.name
        assert np.all(q.elements[0, :bn] == 0)
    assert S.quantize(x, S.MXFP8_E4M3).scale_codes()[0, 0] == S.E8M0_NAN


def test_inf_block_saturate_and_nan():
    x = np.ones((1, 32), np.float32)
    x[0, 0] = np.inf
    q = S.quantize(x, S.MXFP8_E4M3)                    # saturate: the scale clamps at 2**127
    assert q.scale_codes()[0, 0] == 254
    assert q.elements[0, 0] == 448 and np.all(q.elements[0, 1:] == 0)
    qn = S.quantize(x, dataclasses.replace(S.MXFP8_E4M3, overflow="nan"))
    assert qn.scale_codes()[0, 0] == S.E8M0_NAN and np.all(np.isnan(S.dequantize(qn)))


def test_power_of_two_amax_and_rceil_versus_floor():
    x = np.ones((1, 32), np.float32)
    x[0, 0] = 8.0
    assert S.quantize(x, S.MXFP8_E4M3).scales[0, 0] == 2.0 ** (3 - 8)
    x[0, 0] = 7.0                                      # fp4: floor gives X = 1 and 7 saturates to 6
    assert S.quantize(x, S.MXFP4).elements[0, 0] == 6.0
    rc = dataclasses.replace(S.MXFP4, scale_rule="rceil")
    q = S.quantize(x, rc)                              # rceil: X = 2**ceil(log2(7/6)) = 2; 3.5 -> 4 (even code)
    assert q.scales[0, 0] == 2.0 and q.elements[0, 0] == 4.0
    x[0, 0] = 12.0                                     # 12/6 = 2 exactly: ceil(log2 2) = 1, not 2
    assert S.quantize(x, rc).scales[0, 0] == 2.0


def test_e8m0_ends():
    big = np.ones((1, 32))
    big[0, 0] = 2.0 ** 140                             # float64 input reaches E8M0's top
    q = S.quantize(big, S.MXFP8_E4M3)
    assert q.scale_codes()[0, 0] == 254 and q.scales[0, 0] == 2.0 ** 127
    assert q.elements[0, 0] == 448                     # 2**13 saturates
    tiny = np.full((1, 32), 2.0 ** -140, np.float32)   # fp32 subnormals: clamp at 2**-127
    tiny[0, 1] = 2.0 ** -120
    q = S.quantize(np.maximum(tiny, 0), S.MXFP8_E4M3)
    assert q.scale_codes()[0, 0] == 0
    assert q.elements[0, 1] == 128.0 and q.elements[0, 0] == 0  # 2**-13 is below e4m3's 2**-9 / 2


def test_nvfp4_tensor_scale_stays_finite_for_float64_input_beyond_fp32():
    """float64 input whose amax exceeds fp32's range: the fp32 tensor scale
    saturates at fp32's largest finite value instead of becoming inf (an inf
    tensor scale made every dequantised value inf * 0 = NaN)."""
    x = np.full((1, 16), 1e39)
    x[0, 0] = -2e39
    q = S.quantize(x, S.NVFP4)
    f32max = float(np.finfo(np.float32).max)
    assert q.tensor_scale == f32max
    d = S.dequantize(q)
    assert np.isfinite(d).all()
    # fp4 keeps 1 bit of fraction and e4m3 scales 3: each value within a factor 1.5 of the input
    assert np.all(np.sign(d) == np.sign(x)) and np.all(np.abs(d / x - 1) <= 0.5)


def test_subnormal_elements():
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 448                                      # X = 1
    x[0, 1] = 2.0 ** -8                                # e4m3 subnormal (k = 2 of 2**-9)
    x[0, 2] = 3 * 2.0 ** -10                           # tie between 2**-9 (odd) and 2**-8 (even)
    x[0, 3] = 2.0 ** -10                               # tie between 0 and 2**-9: to 0
    e = S.quantize(x, S.MXFP8_E4M3).elements[0]
    assert e[1] == 2.0 ** -8 and e[2] == 2.0 ** -8 and e[3] == 0


def test_shape_not_a_multiple_is_refused_or_padded():
    x = heavy((3, 40))
    with pytest.raises(ValueError, match=r"\(3, 40\).*pad=True"):
        S.quantize(x, S.MXFP8_E4M3)
    q = S.quantize(x, S.MXFP8_E4M3, pad=True)
    assert q.elements.shape == (3, 64) and q.scales.shape == (3, 2)
    padded = np.zeros((3, 64), np.float32)
    padded[:, :40] = x
    np.testing.assert_array_equal(S.dequantize(q), S.dequantize(S.quantize(padded, S.MXFP8_E4M3))[:, :40])


def test_batch_axes_and_rank_one():
    x = heavy((6, 64)).reshape(2, 3, 64)
    q = S.quantize(x, S.MXFP4)
    for i in range(2):
        np.testing.assert_array_equal(S.dequantize(q)[i], S.dequantize(S.quantize(x[i], S.MXFP4)))
    v = x[0, 0]
    np.testing.assert_array_equal(S.dequantize(S.quantize(v, S.MXFP4)), S.dequantize(S.quantize(v[None], S.MXFP4))[0])


@pytest.mark.parametrize("rule", ["floor", "rceil"])
def test_reciprocal_scale_apply_with_power_of_two_scales_is_refused(rule):
    """With E8M0 (power-of-two) scales V / s and V * (1 / s) are the same bits,
    so scale_apply='reciprocal' would change no bit: refused, naming the knob."""
    with pytest.raises(ValueError, match=rf"scale_apply='reciprocal' .*scale_rule='{rule}'.*'amax'"):
        S.ScaledFormat("x", scale_rule=rule, scale_apply="reciprocal")
    assert S.ScaledFormat("x", scale_rule=rule).scale_apply == "divide"
    assert S.ScaledFormat("x", scale_fmt="fp32", scale_rule="amax", scale_apply="reciprocal").scale_apply == \
        "reciprocal"


def test_wider_than_float64_input_computes_in_float64_not_float32():
    """A long double array is a float wider than float64: quantize works in
    float64 as for float64 input (it was cast to float32, where 1e39 is inf)."""
    x = np.full((1, 32), 1e39, dtype=np.longdouble)
    q = S.quantize(x, S.MXFP8_E4M3)
    # OCP floor rule: 2**129 <= 1e39 < 2**130, e4m3's emax is 8: X = 2**(129 - 8)
    assert q.scales.dtype == np.float64 and q.scales[0, 0] == 2.0 ** 121
    d = S.dequantize(q)
    assert np.all(np.abs(d / 1e39 - 1) <= 2.0 ** -4)  # e4m3 keeps 3 fraction bits
    with pytest.raises(TypeError, match=r"x must be a floating-point array.*got dtype int64"):
        S.quantize(np.ones((1, 128), np.int64), S.DEEPSEEK_1X128)


def test_bad_arguments_name_the_choices():
    with pytest.raises(ValueError, match="elem='fp7'.*fp8_e4m3"):
        S.ScaledFormat("x", elem="fp7")
    with pytest.raises(ValueError, match="overflow='nan' is impossible"):
        S.ScaledFormat("x", elem="fp4_e2m1", overflow="nan")
    with pytest.raises(ValueError, match="scale_rule='amax' does not go with scale_fmt='e8m0'"):
        S.ScaledFormat("x", scale_rule="amax")
    with pytest.raises(ValueError, match="block="):
        S.ScaledFormat("x", block=(0, 32))
    with pytest.raises(ValueError, match="valid presets"):
        S.get_scaled_format("mxfp3")
    with pytest.raises(TypeError, match="floating-point"):
        S.quantize(np.arange(32), S.MXFP4)


def test_every_field_changes_bits():
    """A knob that changes no bit is a bug: each field of ScaledFormat, moved
    from a preset, changes the dequantised bits of some input."""
    x = heavy((128, 256), seed=5) * np.float32(3)
    x[0, :32] = 1.0
    x[0, 0] = np.float32(448 * 1.07)  # overflows under floor
    # row 1: amax 3 (s = 3/448, not a power of two) and values within a few fp32
    # ulps of s times an e4m3 midpoint, where x/s and x*(1/s) may round apart
    s = np.float32(3) / np.float32(448)
    mids = (S.element_values("fp8_e4m3")[1:] + S.element_values("fp8_e4m3")[:-1]) / 2
    near = (mids[-64:] * np.float64(s)).astype(np.float32)
    cand = np.concatenate([near.ravel(), np.nextafter(near, np.float32(np.inf)).ravel(),
                           np.nextafter(near, np.float32(0)).ravel()])[:127]
    x[1, :128] = np.concatenate([[3.0], cand]).astype(np.float32)

    def deq(f):
        return S.dequantize(S.quantize(x, f))

    moves = {
        "elem": (S.MXFP8_E4M3, {"elem": "fp8_e5m2"}),
        "block": (S.MXFP8_E4M3, {"block": (1, 16)}),
        "scale_fmt": (S.DEEPSEEK_1X128, {"scale_fmt": "fp8_e4m3"}),
        "scale_rule": (S.MXFP8_E4M3, {"scale_rule": "rceil"}),
        "overflow": (S.MXFP8_E4M3, {"overflow": "nan"}),
        "tensor_scale": (S.NVFP4, {"tensor_scale": False}),
        "scale_apply": (S.DEEPSEEK_1X128, {"scale_apply": "reciprocal"}),
    }
    fields = {f.name for f in dataclasses.fields(S.ScaledFormat) if f.init} - {"name"}
    assert set(moves) == fields
    for name, (base, change) in moves.items():
        assert not same_bits(deq(base), deq(dataclasses.replace(base, **change))), name


def test_presets():
    assert S.MXFP8_E4M3.bits_per_element == 8.25 and S.NVFP4.bits_per_element == 4.5
    assert S.MXFP8_E4M3.emax_elem == 8 and S.MXFP4.emax_elem == 2 and S.MXFP6_E3M2.max_elem == 28
    assert S.MXFP4.transposed().block == (32, 1)
    assert set(S.SCALED_PRESETS) == {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4",
                              "deepseek_1x128", "deepseek_128x128"}


# ---------------------------------------------------------------------------
# torchao (optional reference)
# ---------------------------------------------------------------------------
def _torchao():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("torchao", reason="torchao is not installed (CI: pip install torchao==0.18.0)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats import constants as C
        from torchao.prototype.mx_formats import mx_tensor as M
        from torchao.prototype.mx_formats import nvfp4_tensor as N
    return torch, C, M, N


@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize("elem", OCP_ELEMENTS)
def test_mx_bit_exact_against_torchao(elem, rule):
    torch, C, M, _ = _torchao()
    tdt = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "fp6_e2m3": C.DTYPE_FP6_E2M3,
           "fp6_e3m2": C.DTYPE_FP6_E3M2, "fp4_e2m1": torch.float4_e2m1fn_x2}[elem]
    mode = {"floor": M.ScaleCalculationMode.FLOOR, "rceil": M.ScaleCalculationMode.RCEIL}[rule]
    x = special_rows(heavy((64, 256), seed=2), 32)
    x[2, :32] = 0  # torchao divides by 2**-126 where the scale is 2**-127 (its Triton workaround): not compared
    fmt = dataclasses.replace(S.MXFP8_E4M3, elem=elem, scale_rule=rule)
    q = S.quantize(x, fmt)
    sc, data = M.to_mx(torch.from_numpy(x), tdt, 32, mode)
    np.testing.assert_array_equal(q.scale_codes(), sc.view(torch.uint8).numpy().reshape(q.scales.shape))
    theirs = M.to_dtype(data, sc, tdt, 32, torch.float32).numpy()
    assert_same_bits(S.dequantize(q), theirs)


@pytest.mark.parametrize("two_level", [True, False])
def test_nvfp4_bit_exact_against_torchao(two_level):
    torch, _, _, N = _torchao()
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    x = special_rows(heavy((64, 256), seed=4), 16)
    fmt = S.NVFP4 if two_level else dataclasses.replace(S.NVFP4, tensor_scale=False)
    q = S.quantize(x, fmt)
    pts = N.per_tensor_amax_to_scale(torch.tensor(np.abs(x).max())) if two_level else None
    sc, data = N.nvfp4_quantize(torch.from_numpy(x), 16, pts)
    np.testing.assert_array_equal(q.scale_codes(), sc.view(torch.uint8).numpy().reshape(q.scales.shape))
    np.testing.assert_array_equal(q.element_codes(), unpack_uint4(data).numpy())
    if two_level:
        assert q.tensor_scale == pts.item()
        t = N.NVFP4Tensor.to_nvfp4(torch.from_numpy(x), per_tensor_scale=pts)
        assert_same_bits(S.dequantize(q), t.dequantize(torch.float32).numpy())


# ---------------------------------------------------------------------------
# the operators in graphs
# ---------------------------------------------------------------------------
from numlab import bound_rules as R  # noqa: E402
from numlab import ops, zoo  # noqa: E402
from numlab.execute import run  # noqa: E402
from numlab.kernels import KernelSpec  # noqa: E402
from numlab.kernels import engine as E  # noqa: E402


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4", "mxfp6_e3m2", "deepseek_1x128", "deepseek_128x128"])
def test_operator_kernels_match_their_float64_references(name):
    """On float32 values the E8M0 rules are exact in both precisions, and fp32's
    amax/448 equals float64's rounded to fp32 (a quotient of two fp32 numbers
    double-rounds innocuously through binary64)."""
    x = heavy((128, 256), seed=7)
    ctx = E.Ctx("fp32", KernelSpec.codegen(), fused=True)
    q = ops.get_op("quantize")
    s = ops.get_op("block_scale")
    np.testing.assert_array_equal(q.kernel(ctx, x, fmt=name), q.ref(x, fmt=name))
    np.testing.assert_array_equal(s.kernel(ctx, x, fmt=name), s.ref(x, fmt=name))
    qs, ss = q.ref(x, fmt=name), s.ref(x, fmt=name)
    d = ops.get_op("dequantize")
    exact = qs * np.repeat(np.repeat(ss, x.shape[0] // ss.shape[0], 0), x.shape[1] // ss.shape[1], 1)
    np.testing.assert_array_equal(d.ref(qs, ss, fmt=name), exact)           # exact in float64
    kern = d.kernel(ctx, qs, ss, fmt=name)                                   # one fp32 rounding
    np.testing.assert_array_equal(kern, exact.astype(np.float32))
    np.testing.assert_array_equal(kern, S.dequantize(S.quantize(x, name)))


def test_dequantize_kernel_rounds_once_to_inner():
    """Eager under promotion=native rounds q*s to S; a fused block keeps fp32."""
    x = heavy((4, 128), seed=8)
    q, s = ops.quantize(x, "deepseek_1x128"), ops.block_scale(x, "deepseek_1x128")
    exact = q * np.repeat(s, 128, axis=1)                     # exact in float64 (4 + 24 bits)
    fused = E.dequantize(E.Ctx("bf16", KernelSpec.codegen(), fused=True), q, s, fmt="deepseek_1x128")
    np.testing.assert_array_equal(fused, exact.astype(np.float32))
    native = KernelSpec.parse("handwritten:promotion=native")
    eager = E.dequantize(E.Ctx("bf16", native), q, s, fmt="deepseek_1x128")
    np.testing.assert_array_equal(eager, exact.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32))
    assert not np.array_equal(eager, fused)                   # fp32 scales: the product needs > 8 bits


def test_scaled_matmul_epilogue_per_k_block():
    """scaled_matmul = sum over K blocks of (qa_j @ qb_j) * sa_j * sb_j: the
    float64 reference is the dequantised product; the fp32 kernel is within
    the fp32 error of its K-block sums and epilogue (a bound computed here)."""
    rng = np.random.default_rng(9)
    a = heavy((16, 256), seed=10)
    b = (rng.standard_normal((256, 128)) * 0.05).astype(np.float32)
    fa, fb = "deepseek_1x128", "deepseek_128x128"
    qa, sa, qb, sb = ops.quantize(a, fa), ops.block_scale(a, fa), ops.quantize(b, fb), ops.block_scale(b, fb)
    info = ops.get_op("scaled_matmul")
    ref = info.ref(qa, sa, qb, sb, fmt_a=fa, fmt_b=fb)
    A, B = qa * np.repeat(sa, 128, axis=1), qb * np.repeat(np.repeat(sb, 128, 0), 128, 1)
    np.testing.assert_allclose(ref, A @ B, rtol=1e-14, atol=0)
    # independent per-block sum in float64, as DeepSeek's epilogue adds the scaled partial products
    blockwise = sum((qa[:, j:j + 128] @ qb[j:j + 128]) * sa[:, [j // 128]] * sb[[j // 128], 0]
                    for j in range(0, 256, 128))
    assert np.all(np.abs(ref - blockwise) <= 300 * 2.0 ** -52 * (np.abs(A) @ np.abs(B)))
    got = info.kernel(E.Ctx("fp32", KernelSpec.codegen(), fused=True), qa, sa, qb, sb, fmt_a=fa, fmt_b=fb)
    u = 2.0 ** -24
    bound = (128 + 2 * 3) * u * (np.abs(A) @ np.abs(B)) * 1.01  # gamma_{k_blk} per block + 3 epilogue roundings
    assert np.all(np.abs(got - ref) <= bound)
    assert not np.array_equal(got.astype(np.float64), ref)    # fp32 did round somewhere


def test_operator_shape_errors_name_the_blocks():
    x = np.ones((4, 100))
    with pytest.raises(ValueError, match=r"\(4, 100\).*\(1, 32\)"):
        ops.quantize(x, "mxfp8_e4m3")
    with pytest.raises(ValueError, match="valid presets"):
        ops.quantize(np.ones((4, 64)), "mxfp9")
    with pytest.raises(ValueError, match="scales of shape"):
        ops.dequantize(np.ones((4, 64)), np.ones((4, 3)), "mxfp8_e4m3")
    with pytest.raises(ValueError, match="same block length along K"):
        ops.scaled_matmul(np.ones((4, 128)), np.ones((4, 1)), np.ones((128, 32)), np.ones((4, 1)),
                          "deepseek_1x128", "mxfp8_e4m3")


def test_block_scale_bound_brackets_moved_inputs():
    """The block_scale rule's envelope contains the scale of every input moved
    within its bound (random moves), and quantize's bound 2 max_elem holds."""
    rng = np.random.default_rng(11)
    x = heavy((8, 128), seed=12)
    b = np.abs(x) * 0.05 * rng.random(x.shape)
    info = ops.get_op("block_scale")
    for name in ("mxfp8_e4m3", "mxfp4", "deepseek_1x128"):
        s = info.ref(x, fmt=name)
        bound, _ = info.propagate([x], [b], {"fmt": name}, info.ref)
        qi = ops.get_op("quantize")
        qb, _ = qi.propagate([x], [b], {"fmt": name}, qi.ref)
        for _ in range(20):
            moved = x + b * rng.uniform(-1, 1, x.shape)
            assert np.all(np.abs(info.ref(moved, fmt=name) - s) <= bound), name
            assert np.all(np.abs(qi.ref(moved, fmt=name) - qi.ref(x, fmt=name)) <= qb), name
        assert np.median(qb) < 2 * S.SCALED_PRESETS[name].max_elem / 8, name  # tighter than the range
    nv, _ = info.propagate([x[:, :16]], [b[:, :16]], {"fmt": "nvfp4"}, info.ref)
    assert np.all(np.isinf(nv))                                # the tensor scale couples the blocks
    assert R.SCALED_FORMATS["mxfp4"] == (6.0, True)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_fp8_mlp_eager_and_fused_place_the_casts_differently(fmt):
    g = zoo.get_model("fp8_mlp")
    x = zoo.make_inputs(g, "normal", seed=0)
    ref = run(g, x, mode="reference", fmt=fmt).outputs["y"]
    eager = run(g, x, mode="eager", fmt=fmt)
    fused = run(g, x, mode="fused", fmt=fmt)
    block = next(b for b in fused.plan.blocks if "quantize_2" in b.members)
    assert block.codegen and {"gelu_0", "quantize_2", "block_scale_2", "dequantize_0"} <= set(block.members)
    ye, yf = eager.outputs["y"], fused.outputs["y"]
    assert not np.array_equal(ye, yf)
    assert np.all(np.isfinite(ref)) and np.all(np.isfinite(ye.astype(np.float32)))
    # emulated casts write every node as eager does (S, or the stored formats of quantize and
    # block_scale): the same bits as eager here
    emu = run(g, x, mode="emulated_casts", fmt=fmt, align=True)
    assert_same_bits(emu.outputs["y"], ye)


def test_fnuz_elements_have_no_negative_zero_and_nan_overflow():
    fmt = S.ScaledFormat("fnuz", "fp8_e4m3fnuz", overflow="nan")
    x = np.ones((1, 32), np.float32)
    x[0, 1] = -1e-30                       # rounds to zero: +0 (fnuz has no -0)
    x[0, 2] = 255.0                        # amax 255: X = 2**(7 - 7) = 1; 255 > 240 overflows
    q = S.quantize(x, fmt)
    assert q.scales[0, 0] == 1.0 and q.elements[0, 1] == 0 and not np.signbit(q.elements[0, 1])
    assert np.isnan(q.elements[0, 2]) and q.element_codes()[0, 2] == 0x80
    assert S.quantize(x, replace_fmt := dataclasses.replace(fmt, overflow="saturate")).elements[0, 2] == 240
    assert replace_fmt.max_elem == 240 and replace_fmt.emax_elem == 7


def test_e8m0_scales_agree_with_round_to_e8m0():
    """The power-of-two scales, computed from frexp in kernels.scaled, equal
    numlab.round_to onto FP8_E8M0 (numlab.formats, its own code path): floor is
    amax rounded down to E8M0 times 2**-emax_elem; rceil is fp32(amax /
    max_elem) rounded up to E8M0 (positive, in range)."""
    from numlab.formats import FP8_E8M0
    from numlab.rounding import round_to

    x = heavy((64, 256), seed=13)
    amax = np.abs(x).reshape(64, 8, 32).max(axis=-1)
    for elem in OCP_ELEMENTS:
        f = dataclasses.replace(S.MXFP8_E4M3, elem=elem)
        down = np.asarray(round_to(amax, FP8_E8M0, "down"), np.float64) * 2.0 ** -f.emax_elem
        np.testing.assert_array_equal(S.quantize(x, f).scales, down)
        rc = dataclasses.replace(f, scale_rule="rceil")
        up = np.asarray(round_to((amax / np.float32(f.max_elem)).astype(np.float32), FP8_E8M0, "up"))
        np.testing.assert_array_equal(S.quantize(x, rc).scales, up)


def test_benchmark_rows_run_on_a_small_tensor():
    from numlab.bench import scaled as B

    rows = B.rows(n=128, repeat=1, formats=("mxfp4", "nvfp4"))
    assert [r["format"] for r in rows] == ["mxfp4", "nvfp4"]
    assert all(r["seconds"] > 0 and r["baseline_seconds"] > 0 and r["ratio"] == r["seconds"] / r["baseline_seconds"]
               for r in rows)
    assert rows[0]["target"] == B.TARGET and set(B.TARGETED) <= set(S.SCALED_PRESETS)


def test_scaled_matmul_on_a_matrix_unit_promotes_per_k_block():
    """DeepSeek-V3's reason for the per-128 epilogue: an fp8 product summed on
    H100's tensor core keeps ~14 bits, so over the whole K it loses far more
    than when each 128-long K block is promoted to fp32 and scaled.  With the
    spec's matrix unit (KernelSpec.mma), scaled_matmul computes each K block on
    the unit (the same bits as the unit's own matmul of that block) and the
    epilogue in fp32."""
    rng = np.random.default_rng(14)
    a = rng.standard_normal((16, 4096)).astype(np.float32)
    b = (rng.standard_normal((4096, 128)) * 0.05).astype(np.float32)
    fa, fb = "deepseek_1x128", "deepseek_128x128"
    qa, sa, qb, sb = ops.quantize(a, fa), ops.block_scale(a, fa), ops.quantize(b, fb), ops.block_scale(b, fb)
    info = ops.get_op("scaled_matmul")
    ref = info.ref(qa, sa, qb, sb, fmt_a=fa, fmt_b=fb)
    ctx = E.Ctx("fp32", KernelSpec.parse("codegen:mma=H100/fp8_e4m3/fp32"), fused=True)
    got = info.kernel(ctx, qa, sa, qb, sb, fmt_a=fa, fmt_b=fb)
    # block by block: the unit's own product of the block, then (p * sa) * sb added in fp32
    want = None
    for j in range(0, 4096, 128):
        p = ctx.matmul(qa[:, j:j + 128], qb[j:j + 128])
        t = (p * sa[:, [j // 128]]).astype(np.float32) * np.float32(sb[j // 128, 0])
        want = t if want is None else (want + t).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    per_block = np.abs(got - ref).max() / np.abs(ref).max()
    exact = qa.astype(np.float64) @ qb.astype(np.float64)
    whole_k = np.abs(ctx.matmul(qa, qb) - exact).max() / np.abs(exact).max()
    assert per_block < 2.0 ** -12 < whole_k, (per_block, whole_k)


def test_transposed_presets_in_graphs():
    """``NAME^T`` is the preset with its block transposed: MX blocks along K for
    a matmul's right operand (32 x 1), usable in the zoo's fp8 MLP."""
    f = S.get_scaled_format("mxfp8_e4m3^T")
    assert f.block == (32, 1) and f.name == "mxfp8_e4m3^T" and f.elem == "fp8_e4m3"
    w = heavy((64, 8), seed=15)
    np.testing.assert_array_equal(S.dequantize(S.quantize(w, f)), S.dequantize(S.quantize(w.T, S.MXFP8_E4M3)).T)
    g = zoo.fp8_mlp(act_fmt="mxfp8_e4m3", w_fmt="mxfp8_e4m3^T")
    assert {n.attrs.get("fmt_b") for n in g.nodes if n.op == "scaled_matmul"} == {"mxfp8_e4m3^T"}
    x = zoo.make_inputs(g, "normal", seed=0)
    assert np.all(np.isfinite(run(g, x, mode="fused", fmt="bf16").outputs["y"].astype(np.float32)))
    with pytest.raises(ValueError, match=r"\^T"):
        S.get_scaled_format("mxfp8^T")


def test_bound_rules_know_every_scaled_format_without_the_kernels():
    """The bound rules' format table is built where it lives, not filled by
    importing numlab.kernels.scaled: a fresh interpreter that imports only
    numlab.bound_rules already knows every preset and its transpose, with the
    constants the kernel module's formats give."""
    code = ("import json, sys; from numlab import bound_rules as R; "
            "print(json.dumps({'kernels': 'numlab.kernels' in sys.modules, "
            "'formats': {n: list(v) for n, v in R.SCALED_FORMATS.items()}}))")
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    got = json.loads(out)
    assert got["kernels"] is False
    want = {n: [f.max_elem, not f.tensor_scale] for n, f in S.SCALED_PRESETS.items()}
    want |= {f"{n}^T": v for n, v in want.items()}
    assert got["formats"] == want
    assert got["formats"]["nvfp4"] == [6.0, False] and got["formats"]["mxfp8_e4m3^T"] == [448.0, True]
