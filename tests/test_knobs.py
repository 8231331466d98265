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
from numlab.graph import Graph, Node, trace
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


def _log1p_case():
    g = trace(lambda x: ops.log1p(x), x=(4096,))
    x = _rng(11).uniform(-0.9, 8.0, 4096).astype(np.float32)

    def build(v):
        return {"kernels": H.replace(log1p=v)}

    def direct(v, xs):
        return K.algorithms.log1p(xs["x"], fmt="fp32", algo=v)

    return "eager", g, {"x": x}, "fp32", "exact", "glibc", build, direct


def _fp32_exp(x, algo):
    return np.asarray(K.exp(np.asarray(x, np.float32), fmt="fp32", algo=algo), dtype=np.float32)


def _fp32_sigmoid(x, algo):
    """``1 / (1 + exp(-x))`` in fp32 with exp by ``algo`` (IEEE fp32 add and divide:
    the handwritten spec's exact reciprocal)."""
    with np.errstate(all="ignore"):
        return np.float32(1.0) / (np.float32(1.0) + _fp32_exp(-np.asarray(x, np.float32), algo))


def _silu_case():
    g = trace(lambda x: ops.silu(x), x=(4096,))
    x = _rng(12).uniform(-8.0, 8.0, 4096).astype(np.float32)

    def build(v):
        return {"kernels": H.replace(silu=v)}

    def direct(v, xs):
        x = xs["x"]
        if v == "divide":  # x / (1 + exp(-x)): one division
            with np.errstate(all="ignore"):
                return x / (np.float32(1.0) + _fp32_exp(-x, H.exp))
        return x * _fp32_sigmoid(x, H.exp)  # x * sigmoid(x): reciprocal, then a product

    return "eager", g, {"x": x}, "fp32", "sigmoid", "divide", build, direct


def _softmax_direct(sp, x, log=False):
    """softmax / log_softmax of the last axis in fp32 with the sum in ``sp``'s
    softmax order (else the eager reduction order)."""
    order = sp.softmax_order if sp.softmax_order is not None else _blocked(sp, 4)
    d = x - np.max(x, axis=-1, keepdims=True)
    e = _fp32_exp(d, sp.exp)
    s = K.reduce(e, "sum", -1, order=order, acc="fp32", out="fp32", keepdims=True)
    if log:
        return d - np.log(s.astype(np.float64)).astype(np.float32)
    if sp.softmax == "reciprocal":
        return e * (np.float32(1.0) / s)
    return e / s


def _softmax_case(field, a, b, op="softmax", shape=(16, 512)):
    g = trace(lambda x: getattr(ops, op)(x, axis=-1), x=shape)
    x = _rng(13).standard_normal(shape).astype(np.float32)

    def build(v):
        return {"kernels": H.replace(**{field: v})}

    def direct(v, xs):
        return _softmax_direct(H.replace(**{field: v}), xs["x"], log=op == "log_softmax")

    return "eager", g, {"x": x}, "fp32", a, b, build, direct


def _reduce_order_low_case():
    """A 16-bit sum reads its own order; rows that cancel (pairs +-a around 1000 and
    a few small terms) so that the fp32 accumulation error shows in fp16."""
    r = _rng(14)
    big = (r.standard_normal((32, 2016)) * 1000).astype(np.float16)
    small = (r.standard_normal((32, 64)) * 0.01).astype(np.float16)
    x = r.permuted(np.concatenate([big, -big, small], axis=1), axis=1)
    g = _sum_graph(x.shape)

    def build(v):
        return {"kernels": H.replace(reduce_order_low=v)}

    def direct(v, xs):
        return K.reduce(xs["x"], "sum", -1, order=v, acc="fp32", out="fp16")

    return "eager", g, {"x": x}, "fp16", "aten_cascade(8,widen)", "aten_cascade(8)", build, direct


def _layer_norm_case(field, a, b, base):
    shape = (32, 1000)
    g = trace(lambda x, gm, bt: ops.layer_norm(x, gm, bt, axis=-1), x=shape, gm=shape[-1:], bt=shape[-1:])
    r = _rng(15)
    xs = {"x": (r.standard_normal(shape) + 3.0).astype(np.float32),
          "gm": r.uniform(0.5, 1.5, shape[-1]).astype(np.float32),
          "bt": r.standard_normal(shape[-1]).astype(np.float32)}
    eps = np.float32(1e-5)  # fp32 scalar ("muls")

    def build(v):
        return {"kernels": base.replace(**{field: v})}

    def direct(v, xs):
        sp = base.replace(**{field: v})
        x, gm, bt = xs["x"], xs["gm"], xs["bt"]
        if sp.layer_norm == "generic":  # two-pass moments, rsqrt, y*gamma + beta (no FMA)
            order = _blocked(sp, 4)
            mu = K.reduce(x, "mean", -1, order=order, acc="fp32", out="fp32", keepdims=True)
            d = x - mu
            var = K.reduce(d * d, "mean", -1, order=order, acc="fp32", out="fp32", keepdims=True)
            return d * K.rsqrt(var + eps, fmt="fp32", algo=sp.rsqrt) * gm + bt
        # ATen's kernel: the moments are RowwiseMoments (numlab.kernels.reduction.rowwise_moments,
        # the engine's own function: an independent re-implementation of ATen's chunked
        # Welford cascade is impractical here, so only the formula around it is checked
        # independently); fp32, no FMA: ((x - mean) * rstd) * gamma + beta
        mean, var = K.reduction.rowwise_moments(x, sp.moments_lanes, fma=(False,) * 4, widen=False)
        rstd = K.rsqrt(var[:, None] + eps, fmt="fp32", algo=sp.rsqrt)
        return (x - mean[:, None]) * rstd * gm + bt

    return "eager", g, xs, "fp32", a, b, build, direct


# eager ATen's rule: an add's or subtract's scalar in the tensor dtype, a multiply's in fp32
_ATEN_STORAGE_SCALARS = ("add_alpha", "add_scalar", "rsub_scalar", "sub_scalar")


def _storage_scalars_case():
    """``x + 0.1`` on fp16: the add's scalar in fp32 (None: as scalar_mul="muls") or
    rounded to fp16 (named in storage_scalars), the sum in fp32, stored to fp16."""
    g = trace(lambda x: x + 0.1, x=(4096,))
    x = _rng(16).standard_normal(4096).astype(np.float16)

    def build(v):
        return {"kernels": H.replace(storage_scalars=v)}

    def direct(v, xs):
        s = np.float32(np.float16(0.1)) if v and "add_scalar" in v else np.float32(0.1)
        return (xs["x"].astype(np.float32) + s).astype(np.float16)

    return "eager", g, {"x": x}, "fp16", None, _ATEN_STORAGE_SCALARS, build, direct


def _np_tail(numel, step, grain, threads):
    """Which of ``numel`` elements are in a scalar loop (numpy, from the chunk rule):
    one chunk below ``grain`` or with one thread, else ``nt = min(threads,
    ceil(numel/grain))`` chunks of ``ceil(numel/nt)``; the last ``len % step`` of each."""
    if step == 0:
        return np.zeros(numel, bool)
    nt = 1 if numel < grain or threads <= 1 else min(threads, -(-numel // grain))
    cs = -(-numel // nt)
    i = np.arange(numel)
    start = (i // cs) * cs
    length = np.minimum(start + cs, numel) - start
    return (i - start) >= length - length % step


# sigmoid with SLEEF's vector exp: the scalar loop's exp (tail_math) differs from it
_TAIL_BASE = H.replace(exp="sleef_u10", loop_step=1024, tail_math="exact")


def _tail_data(n, tail_math_pair=None):
    x = _rng(17).uniform(-12.0, 12.0, n).astype(np.float32)
    if tail_math_pair is not None:
        # glibc's expf and the correctly rounded exp differ rarely: put inputs where the
        # two sigmoids differ (found with the two exp models) at the end, in the tail
        pool = _rng(18).uniform(-12.0, 12.0, 400000).astype(np.float32)
        hit = pool[_fp32_sigmoid(pool, tail_math_pair[0]) != _fp32_sigmoid(pool, tail_math_pair[1])]
        assert hit.size >= 20
        x[-hit.size:] = hit[: min(hit.size, n)]
    return x


def _tail_case(field, a, b, n=4096 + 1000, base=_TAIL_BASE, data=None):
    g = trace(lambda x: ops.sigmoid(x), x=(n,))
    x = data if data is not None else _tail_data(n)

    def build(v):
        return {"kernels": base.replace(**{field: v})}

    def direct(v, xs):
        sp = base.replace(**{field: v})
        tail = _np_tail(n, sp.loop_step, sp.grain_size, sp.threads)
        return np.where(tail, _fp32_sigmoid(xs["x"], sp.tail_math), _fp32_sigmoid(xs["x"], sp.exp))

    return "eager", g, {"x": x}, "fp32", a, b, build, direct


def _tail_ops_case():
    """``tail_ops``: None (the registered scalar-tail operators: sigmoid has one) or
    ``("exp",)`` (only exp nodes; sigmoid then has no scalar loop)."""
    n = 4096 + 1000
    g = trace(lambda x: ops.sigmoid(x), x=(n,))
    x = _tail_data(n)

    def build(v):
        return {"kernels": _TAIL_BASE.replace(tail_ops=v)}

    def direct(v, xs):
        sp = _TAIL_BASE
        if v is not None and "sigmoid" not in v:
            return _fp32_sigmoid(xs["x"], sp.exp)
        tail = _np_tail(n, sp.loop_step, sp.grain_size, sp.threads)
        return np.where(tail, _fp32_sigmoid(xs["x"], sp.tail_math), _fp32_sigmoid(xs["x"], sp.exp))

    return "eager", g, {"x": x}, "fp32", None, ("exp",), build, direct


def _alpha_step_case():
    """``x + 0.7*y`` on fp16 (ATen's reduced-float add, whose alpha is held in the
    tensor's dtype: ``storage_scalars``): the scalar loop after the last
    vector step of ``alpha_step`` computes in fp16; None: no scalar loop."""
    n = 4096 + 255
    g = Graph({"x": (n,), "y": (n,)}, [Node("out", "add_alpha", ("x", "y"), {"alpha": 0.7})], ["out"])
    r = _rng(19)
    xs = {"x": r.standard_normal(n).astype(np.float16), "y": r.standard_normal(n).astype(np.float16)}
    base = H.replace(storage_scalars=("add_alpha",))
    a16 = np.float16(0.7)

    def build(v):
        return {"kernels": base.replace(alpha_step=v)}

    def direct(v, xs):
        x32, y32 = xs["x"].astype(np.float32), xs["y"].astype(np.float32)
        # the vector loop: fp32 product (exact: two 11-bit significands) and sum (no FMA), stored
        vec = ((y32 * np.float32(a16)) + x32).astype(np.float16)
        if v is None:
            return vec
        # the scalar loop in fp16 (numpy's float16 arithmetic: one rounding per operation)
        t = xs["x"] + xs["y"] * a16
        tail = np.zeros(n, bool)
        tail[n - (n % v if v else n):] = True  # one chunk (n < grain_size): the last n mod step
        return np.where(tail, t, vec)

    return "eager", g, xs, "fp16", None, 256, build, direct


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
    "log1p": _log1p_case,
    "silu": _silu_case,
    "softmax": lambda: _softmax_case("softmax", "divide", "reciprocal"),
    "softmax_order": lambda: _softmax_case("softmax_order", None, K.Sequential(), op="log_softmax",
                                           shape=(16, 4096)),
    "reduce_order_low": _reduce_order_low_case,
    "layer_norm": lambda: _layer_norm_case("layer_norm", "generic", "aten", H.replace(variance="two_pass")),
    "moments_lanes": lambda: _layer_norm_case("moments_lanes", 8, 16, H.replace(layer_norm="aten")),
    "storage_scalars": _storage_scalars_case,
    # numel not a multiple of the step: 1000 elements of the scalar loop
    "loop_step": lambda: _tail_case("loop_step", 0, 1024),
    "tail_ops": _tail_ops_case,
    "tail_math": lambda: _tail_case("tail_math", "glibc", "exact",
                                    data=_tail_data(4096 + 1000, ("glibc", "exact"))),
    # 4 threads: ceil(5096 / 1024) = 5 > 4 chunks -> 4 chunks of 1274, each with a tail of 250
    "grain_size": lambda: _tail_case("grain_size", 32768, 1024, base=_TAIL_BASE.replace(loop_step=256, threads=4)),
    "threads": lambda: _tail_case("threads", 1, 3, base=_TAIL_BASE.replace(loop_step=256, grain_size=1000)),
    "alpha_step": _alpha_step_case,
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
