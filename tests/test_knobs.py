"""Knob liveness: every field of KernelSpec, Hardware and FusionOptions changes
output bits of ``nl.run`` in a purpose-made case, and the run equals the plain
kernel functions (``numlab.kernels.reduce``, ``scalar_mul``, ``rsqrt``,
``matmul``, ...) called directly with the same knob.

The tests are parametrized over ``dataclasses.fields(...)``: a new field
without a case here fails (a knob that changes no bit is a bug: remove it).
``name`` fields are labels and exempt.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, same_bits

from numlab import get_format, ops, round_to
from numlab import kernels as K
from numlab.execute import run
from numlab.fusion import FusionOptions
from numlab.graph import trace
from numlab.kernels.mma import mma
from numlab.kernels.mma.presets import preset as mma_preset

H = K.KernelSpec.handwritten()
C = K.KernelSpec.codegen()
SMALL = K.Hardware(ub_bytes=16 * 1024)  # fp32 eager tile (2 buffers, double buffered): 1024


def _rng(k):
    return np.random.default_rng(1000 + k)


def _to(v, S, rounding="rne"):
    """Values rounded to S in S's container (the final store of a kernel)."""
    fmt = get_format(S)
    return np.asarray(round_to(np.asarray(v, dtype=np.float64), fmt, rounding)).astype(fmt.container)


def _blocked(spec, eb):
    """The eager one-operator reduction order of ``spec`` (its live buffers,
    elements of ``eb`` bytes)."""
    return K.Blocked(K.tile_elements(spec.hardware, spec.live_buffers, eb), spec.reduce_inner, spec.reduce_outer)


# ---------------------------------------------------------------------------
# cases: field -> (mode, graph, inputs, S, value_a, value_b, build, direct)
#   build(value) -> run kwargs; direct(value, inputs) -> expected output
# ---------------------------------------------------------------------------
def _sum_graph(shape):
    return trace(lambda x: ops.sum_(x, axis=-1), x=shape)


def _eager_sum_case(field, a, b, S="fp32", shape=(32, 8192), base=None, data=None):
    base = base or H.replace(hardware=SMALL)
    x = data if data is not None else _rng(len(field)).standard_normal(shape).astype(np.float32)

    def build(v):
        return {"kernels": base.replace(**{field: v})}

    def direct(v, xs):
        sp = base.replace(**{field: v})
        eb = 4 if S == "fp32" else 2
        order = sp.reduce_order if sp.reduce_order is not None else _blocked(sp, eb)
        acc = sp.acc_format(S)
        return K.reduce(xs["x"], "sum", -1, order=order, acc=acc, out=S)

    return "eager", _sum_graph(x.shape), {"x": x}, S, a, b, build, direct


def _promotion_case():
    x = _rng(1).uniform(0, 1, (8, 4096)).astype(np.float16)
    return _eager_sum_case("promotion", "fp32_internal", "native", S="fp16", data=x)


def _acc_case():
    x = _rng(2).uniform(0, 1, (8, 4096)).astype(ml_dtypes.bfloat16)
    return _eager_sum_case("acc", K.KernelSpec().acc, "fp16", S="bf16", data=x)


def _scalar_case(field, a, b, S, base, s=0.1):
    g = trace(lambda x: ops.mul_scalar(x, s), x=(4096,))
    x = _rng(3).standard_normal(4096).astype(np.float16 if S == "fp16" else np.float32)

    def build(v):
        return {"kernels": base.replace(**{field: v})}

    def direct(v, xs):
        sp = base.replace(**{field: v})
        p = K.scalar_mul(xs["x"], s, fmt="fp32", how=sp.scalar_mul, storage=S,
                         rounding=sp.vector_rounding, scalar_rounding=sp.scalar_rounding)
        return _to(p, S, sp.vector_rounding)

    return "eager", g, {"x": x}, S, a, b, build, direct


def _unary_case(field, op, a, b, positive=True, span=8.0):
    g = trace(lambda x: getattr(ops, op)(x), x=(4096,))
    x = _rng(4).uniform(0.25, span, 4096) if positive else _rng(4).uniform(-span, span, 4096)
    x = x.astype(np.float32)

    def build(v):
        return {"kernels": H.replace(**{field: v})}

    def direct(v, xs):
        return getattr(K, op)(xs["x"], fmt="fp32", algo=v)

    return "eager", g, {"x": x}, "fp32", a, b, build, direct


def _gelu_case(field, approximate, a, b):
    g = trace(lambda x: ops.gelu(x, approximate=approximate), x=(4096,))
    x = _rng(6).uniform(-6, 6, 4096).astype(np.float32)

    def build(v):
        return {"kernels": H.replace(**{field: v})}

    def direct(v, xs):
        return K.gelu(xs["x"], fmt="fp32", approximate=approximate, algo=v)

    return "eager", g, {"x": x}, "fp32", a, b, build, direct


def _divide_case():
    g = trace(lambda x, y: ops.div(x, y), x=(4096,), y=(4096,))
    r = _rng(5)
    xs = {"x": r.uniform(-4, 4, 4096).astype(np.float32), "y": r.uniform(0.5, 4, 4096).astype(np.float32)}

    def build(v):
        return {"kernels": H.replace(divide=v)}

    def direct(v, xs):
        return K.divide(xs["x"], xs["y"], fmt="fp32", algo=v)

    return "eager", g, xs, "fp32", "exact", "newton(table8,1,fp32)", build, direct


def _variance_case():
    g = trace(lambda x: ops.var(x, axis=-1), x=(64, 512))
    x = (_rng(6).standard_normal((64, 512)) + 30.0).astype(np.float32)

    def build(v):
        return {"kernels": H.replace(variance=v)}

    def direct(v, xs):
        return K.reduce(xs["x"], "var", -1, order=_blocked(H, 4), acc="fp32", out="fp32", variance=v)

    return "eager", g, {"x": x}, "fp32", "welford", "textbook", build, direct


def _matmul_case(field, a, b):
    g = trace(lambda x, w: ops.matmul(x, w), x=(16, 1024), w=(1024, 16))
    r = _rng(7)
    xs = {"x": r.standard_normal((16, 1024)).astype(np.float32),
          "w": r.standard_normal((1024, 16)).astype(np.float32)}

    def build(v):
        return {"kernels": H.replace(**{field: v})}

    def direct(v, xs):
        sp = H.replace(**{field: v})
        return K.matmul(xs["x"], xs["w"], k_tile=sp.k_tile, acc="fp32", out="fp32", algo=sp.matmul_algo, fma=sp.fma)

    return "eager", g, xs, "fp32", a, b, build, direct


def _fma_case():
    """A code-generated block contracts ``x*y + z`` into one FMA with ``fma``."""
    g = trace(lambda x, y, z: ops.add(ops.mul(x, y), z), x=(4096,), y=(4096,), z=(4096,))
    r = _rng(8)
    xs = {k: r.standard_normal(4096).astype(np.float32) for k in "xyz"}

    def build(v):
        return {"kernels": C.replace(fma=v)}

    def direct(v, xs):
        return K.multiply_add(xs["x"], xs["y"], xs["z"], fmt="fp32", fused=v)

    return "fused", g, xs, "fp32", True, False, build, direct


def _mma_case():
    """Matmuls on two modelled matrix units (fp16 inputs, fp32 storage so that
    the unit's fp32 result is what is stored): V100 (4-term blocks, no extra
    alignment bit) vs H100 (16-term blocks, 2 extra bits)."""
    g = trace(lambda x, w: ops.matmul(x, w), x=(16, 1024), w=(1024, 16))
    r = _rng(9)
    xs = {"x": r.standard_normal((16, 1024)).astype(np.float16).astype(np.float32),
          "w": r.standard_normal((1024, 16)).astype(np.float16).astype(np.float32)}

    def build(v):
        return {"kernels": H.replace(mma=v)}

    def direct(v, xs):
        return mma(xs["x"], xs["w"], mma_preset(v))

    return "eager", g, xs, "fp32", "V100", "H100", build, direct


KERNELSPEC_CASES = {
    "promotion": _promotion_case,
    "acc": _acc_case,
    "reduce_inner": lambda: _eager_sum_case("reduce_inner", K.Lanes(64), K.Sequential()),
    "reduce_outer": lambda: _eager_sum_case("reduce_outer", K.Sequential(), K.Pairwise()),
    "reduce_order": lambda: _eager_sum_case("reduce_order", None, K.Sequential()),
    "live_buffers": lambda: _eager_sum_case("live_buffers", 2, 8),
    "hardware": lambda: _eager_sum_case("hardware", SMALL, K.Hardware()),
    "scalar_mul": lambda: _scalar_case("scalar_mul", "muls", "broadcast", "fp16", H),
    "scalar_rounding": lambda: _scalar_case("scalar_rounding", "rne", "rtz", "fp32", H),
    "vector_rounding": lambda: _scalar_case("vector_rounding", "rne", "rtz", "fp16", H),
    "fma": _fma_case,
    "rsqrt": lambda: _unary_case("rsqrt", "rsqrt", "exact", K.Newton("table8", 1, "fp32")),
    "reciprocal": lambda: _unary_case("reciprocal", "reciprocal", "exact", K.Newton("table8", 1, "fp32")),
    "divide": _divide_case,
    "exp": lambda: _unary_case("exp", "exp", "exact", K.ExpPoly(3, "fp32"), positive=False),
    "tanh": lambda: _unary_case("tanh", "tanh", "exact", "sleef", positive=False, span=1.0),
    "erf": lambda: _unary_case("erf", "erf", "exact", "aten_vec", positive=False),
    "gelu": lambda: _gelu_case("gelu", "none", "exact", "onednn"),
    "gelu_tanh": lambda: _gelu_case("gelu_tanh", "tanh", "exact", "aten_vec"),
    "variance": _variance_case,
    "matmul_algo": lambda: _matmul_case("matmul_algo", "block_fma", "sequential"),
    "k_tile": lambda: _matmul_case("k_tile", 256, 16),
    "mma": _mma_case,
}


def _hardware_case(field, a, b, ub=16000):
    base = H.replace(hardware=K.Hardware(ub_bytes=ub))

    def hw(v):
        return dataclasses.replace(base.hardware, **{field: v})

    mode, g, xs, S, _, _, _, _ = _eager_sum_case("hardware", base.hardware, base.hardware, base=base)

    def build(v):
        return {"kernels": base.replace(hardware=hw(v))}

    def direct(v, xs):
        sp = base.replace(hardware=hw(v))
        return K.reduce(xs["x"], "sum", -1, order=_blocked(sp, 4), acc="fp32", out=S)

    return mode, g, xs, S, a, b, build, direct


HARDWARE_CASES = {
    "ub_bytes": lambda: _hardware_case("ub_bytes", 16000, 12000),
    # 16000 B / (2 buffers * 4 B * 2) = 1000 elements: a multiple of 8 (32-byte
    # blocks) but not of 16 (64-byte blocks, 992)
    "align_bytes": lambda: _hardware_case("align_bytes", 32, 64),
    "double_buffer": lambda: _hardware_case("double_buffer", True, False),
}


# ---------------------------------------------------------------------------
# fusion options: the plain-kernel reconstruction of each plan
# ---------------------------------------------------------------------------
_SEQ = dict(reduce_order="sequential", exp="exact")
_GEN = C.replace(**_SEQ)
_LIB = H.replace(**_SEQ)


def _fusion_case(field, a, b, graph_fn, shape, base, direct):
    g = trace(graph_fn, x=shape)
    x = _rng(9).standard_normal(shape).astype(np.float16)

    def build(v):
        return {"kernels": _GEN, "library": _LIB, "fusion": dataclasses.replace(base, **{field: v})}

    return "fused", g, {"x": x}, "fp16", a, b, build, direct


def _x32(xs):
    return xs["x"].astype(np.float32)


def _enabled_direct(v, xs):
    """sum(exp(x) * x): reduce fused -> one fp32 block, else exp*x stored in S
    first and summed by the library."""
    x = _x32(xs)
    p = K.exp(x, fmt="fp32") * x  # fp32 multiply
    if "reduce" not in v:
        p = p.astype(np.float16)
    return K.reduce(p, "sum", -1, order="sequential", acc="fp32", out="fp16")


def _decompose_direct(v, xs):
    """softmax(x * 3): decomposed, the scale joins the softmax primitives in
    one fp32 block; kept whole, softmax is a library kernel, so the scale is
    its own block, stored in S first.  The softmax itself is the same chain
    either way (max, sub, exp, sequential sum, divide, in fp32)."""
    y = K.scalar_mul(_x32(xs), 3.0, fmt="fp32", how=_GEN.scalar_mul, storage="fp16")
    if not v:
        y = y.astype(np.float16).astype(np.float32)
    m = np.max(y, axis=-1, keepdims=True)
    e = K.exp(y - m, fmt="fp32")
    s = K.reduce(e, "sum", -1, order="sequential", acc="fp32", out="fp32", keepdims=True)
    return (e / s).astype(np.float16)


def _autofuse_direct(v, xs):
    """exp(x) * x: fused -> fp32 product of the fp32 exp; off -> exp stored
    in S first (each node a library kernel)."""
    x = _x32(xs)
    e = K.exp(x, fmt="fp32")
    if not v:
        e = e.astype(np.float16).astype(np.float32)
    return (e * x).astype(np.float16)


FUSION_CASES = {
    "enabled": lambda: _fusion_case(
        "enabled", FusionOptions.inductor().enabled, FusionOptions().enabled,
        lambda x: ops.sum_(ops.exp(x) * x, axis=-1), (16, 256), FusionOptions(), _enabled_direct),
    "decompose": lambda: _fusion_case(
        "decompose", True, False, lambda x: ops.softmax(x * 3.0, axis=-1), (16, 256),
        FusionOptions.inductor(), _decompose_direct),
    "enable_autofuse": lambda: _fusion_case(
        "enable_autofuse", True, False, lambda x: ops.exp(x) * x, (16, 256), FusionOptions(),
        _autofuse_direct),
}


def _fields(cls):
    return [f.name for f in dataclasses.fields(cls) if f.name != "name"]


def _check(case):
    mode, g, xs, S, a, b, build, direct = case
    ra = run(g, xs, mode=mode, fmt=S, **build(a)).output
    rb = run(g, xs, mode=mode, fmt=S, **build(b)).output
    assert not same_bits(ra, rb), "changing only this field changed no output bit"
    if direct is not None:
        for v, r in ((a, ra), (b, rb)):
            want = direct(v, xs)
            assert_same_bits(r, want, what=str(v))
    return ra, rb


@pytest.mark.parametrize("field", _fields(K.KernelSpec))
def test_every_kernelspec_field_changes_bits_and_matches_the_kernel(field):
    assert field in KERNELSPEC_CASES, f"KernelSpec.{field} has no liveness case: add one or remove the field"
    _check(KERNELSPEC_CASES[field]())


@pytest.mark.parametrize("field", _fields(K.Hardware))
def test_every_hardware_field_changes_bits_and_matches_the_kernel(field):
    assert field in HARDWARE_CASES, f"Hardware.{field} has no liveness case: add one or remove the field"
    _check(HARDWARE_CASES[field]())


@pytest.mark.parametrize("field", _fields(FusionOptions))
def test_every_fusion_option_changes_bits(field):
    assert field in FUSION_CASES, f"FusionOptions.{field} has no liveness case: add one or remove the field"
    _check(FUSION_CASES[field]())


def test_decompose_off_runs_the_library_kernel_as_eager():
    """FusionOptions.decompose=False keeps softmax one library kernel: the
    fused run then equals eager with the same library spec, bit for bit."""
    mode, g, xs, S, a, b, build, _ = FUSION_CASES["decompose"]()
    whole = run(g, xs, mode=mode, fmt=S, **build(False)).output
    assert_same_bits(whole, run(g, xs, mode="eager", fmt=S, kernels=_LIB).output)


def test_knob_names_follow_the_convention():
    names = set(_fields(K.KernelSpec))
    assert "matmul_algo" in names and "matmul_mode" not in names and "gelu_form" not in names
    assert "vector_bytes" not in _fields(K.Hardware)


@pytest.mark.parametrize("rounding", ["rtz", "up", "down", "odd"])
def test_vector_rounding_reaches_fused_block_stores(rounding):
    """A code-generated block computes in fp32 and rounds to S only at its
    outputs, with the code generator's vector_rounding."""
    g = trace(lambda x: ops.exp(x) * x, x=(64, 64))
    x = _rng(10).standard_normal((64, 64)).astype(np.float16)
    gen = _GEN.replace(vector_rounding=rounding)
    got = run(g, {"x": x}, mode="fused", fmt="fp16", kernels=gen, library=_LIB).output
    x32 = x.astype(np.float32)
    want = _to(K.exp(x32, fmt="fp32") * x32, "fp16", rounding)
    assert_same_bits(got, want)
    assert not same_bits(got, run(g, {"x": x}, mode="fused", fmt="fp16", kernels=_GEN, library=_LIB).output)
