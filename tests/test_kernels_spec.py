"""Hardware tile formula and KernelSpec: presets, formats per promotion, methods an
executor calls, and bad-input errors."""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, round_exact, same_bits

from numlab import kernels as K
from numlab import ops, round_to
from numlab.execute import run
from numlab.formats import BF16, FP16, FP32, get_format
from numlab.graph import trace


# ------------------------------------------------------------------ hardware
def test_tile_elements_formula_by_hand():
    hw = K.Hardware(ub_bytes=196608, align_bytes=32, double_buffer=True)
    # 196608 / (2 * 2 * 2) = 24576, already a multiple of 16 fp16 elements
    assert K.tile_elements(hw, 2, 2) == 24576
    # 196608 / (5 * 4 * 2) = 4915.2 -> 4915 -> aligned down to 8 fp32 elements: 4912
    assert K.tile_elements(hw, 5, 4) == 4912
    # no double buffering doubles the tile
    assert K.tile_elements(dataclasses.replace(hw, double_buffer=False), 5, 4) == 9824
    # 1000-byte buffer, 3 fp16 buffers, db: 1000 // 12 = 83 -> 80 (multiple of 16)
    assert K.tile_elements(K.Hardware(ub_bytes=1000), 3, 2) == 80


@pytest.mark.parametrize("ub", [4096, 16384, 196608, 262144, 100000])
@pytest.mark.parametrize("eb", [1, 2, 4, 8])
def test_tile_elements_properties(ub, eb):
    for db in (True, False):
        hw = K.Hardware(ub_bytes=ub, double_buffer=db)
        prev = None
        for live in range(1, 12):
            t = K.tile_elements(hw, live, eb)
            assert t % (32 // eb if eb < 32 else 1) == 0
            assert t * live * eb * (2 if db else 1) <= ub  # fits
            # maximal: one more aligned block would not fit
            assert (t + 32 // eb) * live * eb * (2 if db else 1) > ub
            if prev is not None:
                assert t <= prev  # more live buffers, smaller tiles
            prev = t


def test_single_op_kernel_gets_bigger_tiles_than_fused_block():
    hw = K.Hardware()
    single = K.tile_elements(hw, 2, 2)
    fused = K.tile_elements(hw, 5, 4)
    assert single > 4 * fused
    hand, cg = K.KernelSpec.handwritten(), K.KernelSpec.codegen()
    assert hand.tile("fp16") == single
    assert cg.tile("fp16", fused=True, live_buffers=5) == fused
    assert cg.tile("fp16", fused=True) == K.tile_elements(hw, K.DEFAULT_FUSED_LIVE_BUFFERS, 4)


def test_hardware_bad_input():
    with pytest.raises(ValueError, match=r"live_buffers=0"):
        K.tile_elements(K.Hardware(), 0, 2)
    with pytest.raises(ValueError, match=r"elem_bytes=3.*\[1, 2, 4, 8\]"):
        K.tile_elements(K.Hardware(), 2, 3)
    with pytest.raises(ValueError, match="ub_bytes"):
        K.Hardware(ub_bytes=0)
    with pytest.raises(ValueError, match="align_bytes"):
        K.Hardware(align_bytes=24)
    with pytest.raises(ValueError, match="do not fit"):
        K.tile_elements(K.Hardware(ub_bytes=64), 4, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        K.Hardware().ub_bytes = 1


# ------------------------------------------------------------------ spec
def test_presets_are_data_and_differ_on_every_source():
    h, c = K.KernelSpec.handwritten(), K.KernelSpec.codegen()
    assert h == K.HANDWRITTEN and c == K.CODEGEN
    assert h.promotion == c.promotion == "fp32_internal"
    assert (h.scalar_mul, c.scalar_mul) == ("muls", "broadcast")
    assert h.fma is False and c.fma is True
    assert h.rsqrt != c.rsqrt and isinstance(h.rsqrt, K.Newton)
    assert h.live_buffers == 2 and c.live_buffers is None
    assert h.variance != c.variance
    assert h.reduce_inner != c.reduce_inner
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.fma = True
    assert K.KernelSpec.handwritten(fma=True).fma is True
    assert h.replace(scalar_mul="broadcast").scalar_mul == "broadcast"


def test_inductor_cpu_preset_differs_from_codegen_in_exactly_the_documented_fields():
    from fractions import Fraction

    from numlab.kernels.grammar import spec_diff

    ind, cg = K.KernelSpec.inductor_cpu(), K.KernelSpec.codegen()
    assert ind == K.INDUCTOR_CPU and K.KernelSpec.parse("inductor_cpu") == ind
    assert {f for f, _ in spec_diff(ind, cg)} == {
        "name", "reduce_order", "scalar_mul", "fma", "rsqrt", "exp", "tanh", "erf", "gelu", "gelu_tanh"}
    assert (ind.scalar_mul, ind.fma, ind.rsqrt) == ("muls", False, "sqrt_then_div")
    assert ind.reduce_order == K.InductorLanes(16, 1, 1)
    # x * 0.1 on fp16: Inductor keeps the scalar fp32 (static_cast<float>), codegen rounds it to fp16
    x = (np.arange(-4096, 4096) / 64).astype(np.float16)
    ind_ref = (x.astype(np.float32) * np.float32(0.1)).astype(np.float16)
    cg_ref = (x.astype(np.float32) * np.float32(np.float16(0.1))).astype(np.float16)
    got_ind, got_cg = ind.mul_scalar(x, 0.1, storage="fp16"), cg.mul_scalar(x, 0.1, storage="fp16")
    assert_same_bits(got_ind, ind_ref)
    assert_same_bits(got_cg, cg_ref)
    assert 0.05 < np.mean(got_ind != got_cg) < 0.95
    # a*b + c in fp32: two roundings (-ffp-contract=off) against codegen's one (Fractions)
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
    assert_same_bits(ind.multiply_add(a, b, c, storage="fp32"), a * b + c)
    one = np.array([round_exact(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r)), FP32)
                    for p, q, r in zip(a, b, c, strict=True)], dtype=np.float32)
    assert_same_bits(cg.multiply_add(a, b, c, storage="fp32"), one)
    assert np.any(one != a * b + c)
    # rsqrt as 1 / sqrt(x): two correctly rounded fp32 operations
    y = rng.uniform(0.01, 100, 4096).astype(np.float32)
    assert_same_bits(ind.unary("rsqrt", y, storage="fp32"), np.float32(1) / np.sqrt(y))


def test_formats_per_promotion():
    s = K.KernelSpec(promotion="native")
    assert s.compute_format("fp16") == FP16 and s.acc_format("fp16") == FP16
    assert s.acc_format("fp16", fused=True) == FP32 and s.compute_format("fp16", fused=True) == FP32
    s = K.KernelSpec(promotion="accumulator_only")
    assert s.compute_format("bf16") == BF16 and s.acc_format("bf16") == FP32
    s = K.KernelSpec(promotion="fp32_internal")
    assert s.compute_format("bf16") == FP32 and s.out_format("bf16") == BF16
    assert s.out_format("bf16", fused=True) == FP32


def test_spec_reduce_uses_blocked_order_from_tiles():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5000)).astype(np.float16)
    hw = K.Hardware(ub_bytes=8192)  # fp16 eager tile: 8192/(2*2*2) = 1024
    h = K.KernelSpec.handwritten(hardware=hw)
    assert h.order("fp16") == K.Blocked(1024, K.Lanes(64), K.Sequential())
    got = h.reduce(x, "sum", storage="fp16")
    assert got.dtype == np.float16
    exp = K.reduce(x, "sum", order=K.Blocked(1024, K.Lanes(64), K.Sequential()), acc="fp32", out="fp16")
    assert np.array_equal(got, exp)
    c = K.KernelSpec.codegen(hardware=hw)
    f = c.reduce(x.astype(np.float32), "sum", storage="fp16", fused=True, live_buffers=4)
    assert f.dtype == np.float32
    assert c.order("fp16", fused=True, live_buffers=4) == K.Blocked(256, K.Pairwise(), K.Sequential())
    # native promotion accumulates in fp16: stagnation
    n = K.KernelSpec(promotion="native", reduce_order="sequential")
    assert n.reduce(np.ones(4000, np.float16), "sum", storage="fp16") == 2048
    assert K.KernelSpec(reduce_order="sequential").reduce(np.ones(4000, np.float16), "sum", storage="fp16") == 4000


def test_spec_methods_return_storage_or_fp32():
    rng = np.random.default_rng(1)
    x = np.abs(rng.standard_normal((4, 64))).astype(ml_dtypes.bfloat16) + ml_dtypes.bfloat16(0.5)
    for spec in (K.HANDWRITTEN, K.CODEGEN):
        for fused, dt in ((False, ml_dtypes.bfloat16), (True, np.float32)):
            assert spec.mul_scalar(x, 0.1, storage="bf16", fused=fused).dtype == dt
            for op in K.UNARY_OPS:
                assert spec.unary(op, x, storage="bf16", fused=fused).dtype == dt
            assert spec.div(x, x, storage="bf16", fused=fused).dtype == dt
            assert spec.multiply_add(x, x, x, storage="bf16", fused=fused).dtype == dt
            assert spec.matmul(x, x.T, storage="bf16", fused=fused).dtype == dt
            assert spec.reduce(x, "var", storage="bf16", fused=fused).dtype == dt


def test_spec_scalar_mul_models_instruction_and_promotion():
    x = np.arange(1, 200, dtype=np.float16)
    s = 0.1
    # eager handwritten: muls with fp32 scalar, product rounded to fp32 then to fp16
    got = K.HANDWRITTEN.mul_scalar(x, s, storage="fp16")
    exp = (x.astype(np.float32) * np.float32(s)).astype(np.float16)
    assert np.array_equal(got, exp)
    # fused codegen: broadcast constant in fp16, fp32 product
    got = K.CODEGEN.mul_scalar(x.astype(np.float32), s, storage="fp16", fused=True)
    assert np.array_equal(got, x.astype(np.float32) * np.float32(np.float16(s)))
    # native promotion: one rounding from the exact product to fp16
    got = K.KernelSpec(promotion="native").mul_scalar(x, s, storage="fp16")
    assert np.array_equal(got, (x.astype(np.float64) * float(np.float32(s))).astype(np.float16))


def test_spec_unary_uses_its_algorithms():
    x = np.linspace(0.5, 4, 200).astype(np.float32)
    h = K.HANDWRITTEN.unary("rsqrt", x, storage="fp32")
    assert np.array_equal(h, K.rsqrt(x, fmt="fp32", algo=K.HANDWRITTEN.rsqrt))
    c = K.CODEGEN.unary("rsqrt", x, storage="fp32")
    assert np.array_equal(c, K.rsqrt(x, fmt="fp32", algo=K.CODEGEN.rsqrt))
    assert not np.array_equal(h, c)
    e = K.CODEGEN.unary("exp", x, storage="fp32")
    assert np.array_equal(e, K.exp(x, fmt="fp32", algo=K.ExpPoly(6)))


@pytest.mark.parametrize("field,value,needle", [
    ("promotion", "fp16_internal", r"promotion='fp16_internal'.*native.*fp32_internal.*accumulator_only"),
    ("scalar_mul", "vmul", r"scalar_mul='vmul'.*muls.*broadcast"),
    ("rsqrt", "newton(table8,-2)", r"steps=-2"),
    ("rsqrt", "newton(nope,1)", r"seed='nope'"),
    ("variance", "online", r"variance='online'.*two_pass.*welford.*textbook"),
    ("matmul_algo", "tf32", r"matmul_algo='tf32'.*sequential.*block_fma.*split_k"),
    ("k_tile", 0, r"k_tile=0"),
    ("live_buffers", 0, r"live_buffers=0"),
    ("reduce_inner", "lanes(0)", r"lanes L=0"),
    ("reduce_outer", "blocked(-1)", r"tile=-1"),
    ("reduce_order", "shuffled(x)", r"seed='x'"),
    ("scalar_rounding", "nearest", r"^scalar_rounding='nearest' is not a rounding mode; valid modes: \['rne'"),
    ("vector_rounding", 1, r"^vector_rounding=1 is not a rounding mode"),
    ("acc", "fp12", r"^acc='fp12' is not a known format"),
    ("exp", "exp_poly(0)", r"degree=0"),
])
def test_spec_bad_knobs_name_themselves(field, value, needle):
    with pytest.raises(ValueError, match=needle):
        K.KernelSpec(**{field: value})


def test_spec_bad_unary_op():
    with pytest.raises(ValueError, match=r"op='gelu_erf'.*rsqrt"):
        K.HANDWRITTEN.unary("gelu_erf", np.ones(2, np.float32), storage="fp16")
    with pytest.raises(ValueError, match=r"approximate='erf'.*\['none', 'tanh'\]"):
        K.HANDWRITTEN.unary("gelu", np.ones(2, np.float32), storage="fp16", approximate="erf")


def test_describe_lists_every_knob_readably():
    d = K.HANDWRITTEN.describe()
    assert set(d) == {f.name for f in dataclasses.fields(K.KernelSpec)}
    assert d["rsqrt"] == "newton(table12,1,fp32)" and d["reduce_inner"] == "lanes(64,tree,masked)"
    assert d["acc"] == "fp32" and d["hardware"] == "ascend910b" and d["fma"] is False
    assert K.CODEGEN.describe()["exp"] == "exp_poly(6,fp32)" and K.CODEGEN.describe()["live_buffers"] is None


@pytest.mark.parametrize("bad", ["exp_poly()", "exp_poly(x)", "exp_poly(1,fp32,3)"])
def test_malformed_exp_poly_names_the_knob(bad):
    with pytest.raises(ValueError, match=r"exp='exp_poly\("):
        K.KernelSpec(exp=bad)


# ------------------------------------------------------------------ one code path
def _eager(spec, fn, S, **inputs):
    g = trace(fn, **{k: v.shape for k, v in inputs.items()})
    return run(g, inputs, mode="eager", fmt=S, kernels=spec).output


_ERF = np.frompyfunc(math.erf, 1, 1)
_UNARY_F64 = {
    "rsqrt": lambda v: 1 / np.sqrt(v), "reciprocal": lambda v: 1 / v, "sqrt": np.sqrt, "exp": np.exp,
    "log": np.log, "log1p": np.log1p, "tanh": np.tanh, "erf": lambda v: _ERF(v).astype(np.float64),
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "gelu": lambda v: 0.5 * v * (1 + _ERF(v / math.sqrt(2)).astype(np.float64)),
}


def _near(got, want, tol, S, spec, what):
    """``got`` (in S) is ``want`` rounded to S with ``spec.vector_rounding``, give or
    take ``tol`` (the error of the arithmetic before that rounding)."""
    F = get_format(S)
    assert got.dtype == F.container and got.shape == want.shape, what
    g = got.astype(np.float64)
    e = np.frexp(np.abs(want))[1] - 1  # |want| in [2**e, 2**(e+1))
    ulp = np.ldexp(1.0, np.maximum(e, F.emin) - F.p + 1)
    if spec.vector_rounding == "rtz":
        assert np.all(np.abs(g) <= np.abs(want) + tol), what
        assert np.all(np.abs(g - want) <= ulp + tol), what
    else:
        assert np.all(np.abs(g - want) <= ulp / 2 + tol), what


ROUNDINGS = ("rne", "rtz", "up", "down", "odd")


@pytest.mark.parametrize("S", ["fp16", "bf16"])
@pytest.mark.parametrize("how", ["muls", "broadcast"])
@pytest.mark.parametrize("vr", ROUNDINGS)
@pytest.mark.parametrize("sr", ROUNDINGS)
def test_spec_mul_scalar_is_the_eager_run(S, how, vr, sr):
    """KernelSpec.mul_scalar and an eager one-node run are one code path: same
    bits for every vector_rounding and scalar_rounding (the stores round with
    vector_rounding too)."""
    spec = K.KernelSpec.handwritten(scalar_mul=how, vector_rounding=vr, scalar_rounding=sr)
    x = np.random.default_rng(3).standard_normal(4096).astype(get_format(S).container)
    got = spec.mul_scalar(x, 0.1, storage=S)
    assert_same_bits(got, _eager(spec, lambda x: ops.mul_scalar(x, 0.1), S, x=x))
    # and the plain kernel with the same knobs, then the store in vector_rounding
    p = K.scalar_mul(x, 0.1, fmt="fp32", how=how, storage=S, rounding=vr, scalar_rounding=sr)
    want = np.asarray(round_to(p.astype(np.float64), S, vr)).astype(got.dtype)
    assert_same_bits(got, want)


def test_vector_rounding_reaches_the_eager_store():
    """Was: eager stores rounded to nearest even whatever vector_rounding said
    (1676 of 4096 fp16 elements of x*0.1 differed from spec.mul_scalar)."""
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float16)
    rne = _eager(K.HANDWRITTEN, lambda x: ops.mul_scalar(x, 0.1), "fp16", x=x)
    rtz = _eager(K.HANDWRITTEN.replace(vector_rounding="rtz"), lambda x: ops.mul_scalar(x, 0.1), "fp16", x=x)
    assert not same_bits(rne, rtz)
    assert np.all(np.abs(rtz.astype(np.float64)) <= np.abs(rne.astype(np.float64)))


@pytest.mark.parametrize("S", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("spec", [K.HANDWRITTEN, K.CODEGEN, K.KernelSpec(promotion="native"),
                                  K.KernelSpec(promotion="accumulator_only", variance="textbook"),
                                  K.HANDWRITTEN.replace(vector_rounding="rtz")],
                         ids=["handwritten", "codegen", "native", "acc_only", "rtz"])
def test_spec_methods_against_float64(S, spec):
    """reduce / unary / div / multiply_add / matmul of a KernelSpec against float64
    (numpy, math.erf): max is exact; every other result lies within the rounding
    to S (half an ulp, a whole one toward zero with vector_rounding="rtz") plus
    the error bound of its arithmetic in the spec's compute and accumulator
    formats; with "rtz" no result is larger in magnitude than that bound allows."""
    rng = np.random.default_rng(11)
    dt = get_format(S).container
    x = (rng.standard_normal((6, 300)) + 2.0).astype(dt)
    y = (rng.uniform(0.5, 3.0, (6, 300))).astype(dt)
    w = rng.standard_normal((300, 5)).astype(dt)
    x64, y64, w64 = (v.astype(np.float64) for v in (x, y, w))
    n = x.shape[-1]
    uc, ua = 2.0 ** -spec.compute_format(S).p, 2.0 ** -spec.acc_format(S).p
    assert_same_bits(spec.reduce(x, "max", axis=-1, storage=S), x.max(axis=-1))
    sum_abs, mean_sq = np.abs(x64).sum(-1), (x64 * x64).mean(-1)
    _near(spec.reduce(x, "sum", axis=-1, storage=S), x64.sum(-1), 2 * n * ua * sum_abs, S, spec, "sum")
    _near(spec.reduce(x, "mean", axis=-1, storage=S), x64.mean(-1), 2 * (n + 1) * ua * sum_abs / n, S, spec,
          "mean")
    _near(spec.reduce(x, "var", axis=-1, storage=S), x64.var(-1), 4 * (n + 3) * ua * mean_sq, S, spec, "var")
    for op in K.UNARY_OPS:
        arg = y if op in ("rsqrt", "sqrt", "log", "log1p", "reciprocal") else x
        want = _UNARY_F64[op](arg.astype(np.float64))
        _near(spec.unary(op, arg, storage=S), want, 4 * uc * np.abs(want), S, spec, op)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    _near(spec.unary("gelu", x, storage=S, approximate="tanh"), want, 8 * uc * np.abs(x64), S, spec, "gelu tanh")
    want = x64 / y64
    _near(spec.div(x, y, storage=S), want, 4 * uc * np.abs(want), S, spec, "div")
    _near(spec.multiply_add(x, y, x, storage=S), x64 * y64 + x64, 2 * uc * (np.abs(x64 * y64) + np.abs(x64)),
          S, spec, "multiply_add")
    _near(spec.matmul(x, w, storage=S), x64 @ w64, 2 * (n + 1) * max(ua, uc) * (np.abs(x64) @ np.abs(w64)),
          S, spec, "matmul")
