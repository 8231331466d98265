"""numlab.kernels' PyTorch CPU orders and math routines (orders.cpu, libm, the algo= names).

References: (1) real torch, in tests/test_torch_faithfulness.py and
tests/test_torch_capabilities.py (these orders and routines reproduce its
outputs bit for bit); (2) plain scalar loops with Fraction-exact roundings
(tests/_scalar_orders.py); (3) float64 evaluations for the error bounds.
"""

from __future__ import annotations

import math

import _scalar_orders as R
import ml_dtypes
import numpy as np
import pytest

from numlab.formats import ulp
from numlab.kernels import algorithms as A
from numlab.kernels import libm as L
from numlab.kernels.orders import ORDER_NAMES, gamma, parse_order
from numlab.kernels.orders.cpu import AtenCascade, InductorLanes, inductor_splits_reduction
from numlab.kernels.reduction import reduce
from numlab.torch.data import cancelling_rows

F32 = np.float32
SHAPES_N = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 255, 256, 257, 1000,
            4095, 4096, 4097, 5000]


def _rows(kind, rng, shape):
    if kind == "normal":
        return rng.standard_normal(shape).astype(F32)
    return cancelling_rows(rng, shape, "fp32")


# --------------------------------------------------------------------------------------
# orders


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "fp16"])
def test_cpu_orders_equal_scalar_loops(fmt):
    """Small sizes against Fraction-exact scalar loops, also with narrow accumulators
    (every addition of the order rounded to ``acc``)."""
    rng = np.random.default_rng(14)
    dt = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}[fmt]
    for n in (1, 2, 5, 8, 9, 16, 17, 33, 40, 64, 70, 130, 300):
        x = (rng.standard_normal((2, n)) * 8).astype(dt).astype(F32)
        for vec, widen in ((8, False), (4, True)):
            got = reduce(x, "sum", order=AtenCascade(vec, widen), acc=fmt)
            for r in range(2):
                want = R.aten_cascade([float(v) for v in x[r]], fmt, vec, widen)
                assert float(got[r]) == want or (math.isnan(want) and math.isnan(float(got[r]))), (n, vec, widen)
        for lanes, n_vec, threads, split in ((16, 1, 1, False), (8, 2, 1, False), (4, 1, 3, True),
                                             (8, 2, 2, True)):
            o = InductorLanes(lanes, n_vec, threads, "true" if split else "false")
            got = reduce(x, "sum", order=o, acc=fmt)
            for r in range(2):
                want = R.inductor_lanes([float(v) for v in x[r]], fmt, lanes, n_vec, threads, split)
                assert float(got[r]) == want, (n, o)


def test_softmax_lane_loop_is_an_inductor_lanes_order():
    # ATen's softmax sum: 16 lanes + butterfly, masked tail, rows shorter than a vector
    # summed sequentially; scalar loop reference
    rng = np.random.default_rng(15)
    for n in (3, 15, 16, 17, 40, 100):
        x = rng.random((2, n)).astype(F32)
        got = reduce(x, "sum", order=InductorLanes(16, 1, 1, "false", False, 16), acc="fp32")
        for r in range(2):
            assert float(got[r]) == R.inductor_lanes([float(v) for v in x[r]], "fp32", 16, 1, 1, False, 16)


def test_cpu_orders_parse_and_print():
    assert "aten_cascade" in ORDER_NAMES and "inductor_lanes" in ORDER_NAMES
    cases = {
        "aten_cascade(8)": AtenCascade(8),
        "aten_cascade(8,widen)": AtenCascade(8, True),
        "aten_cascade( 16 , false )": AtenCascade(16, False),
        "inductor_lanes(16)": InductorLanes(16),
        "inductor_lanes(16,2,2)": InductorLanes(16, 2, 2),
        "inductor_lanes(16,1,1,false,false,16)": InductorLanes(16, 1, 1, "false", False, 16),
        "inductor_lanes(8,1,4,true,true,8,256)": InductorLanes(8, 1, 4, "true", True, 8, 256),
    }
    for s, o in cases.items():
        assert parse_order(s) == o
        assert parse_order(str(o)) == o
    assert str(AtenCascade(8)) == "aten_cascade(8)"
    assert parse_order("blocked(64,aten_cascade(8),inductor_lanes(16))").inner == AtenCascade(8)
    bad = {
        "aten_cascade()": "order='aten_cascade()' is not valid",
        "aten_cascade(0)": "vec=0 is not valid",
        "aten_cascade(8,wide)": "widen='wide' is not valid",
        "inductor_lanes(12)": "lanes=12 is not valid; it must be a power of two",
        "inductor_lanes(16,1,1,sometimes)": "split='sometimes' is not valid; valid choices: ['auto', 'true', 'false']",
        "inductor_lanes(16,1,1,auto,maybe)": "cascade='maybe' is not valid",
        "inductor_lanes(x)": "lanes='x' is not valid; it must be an integer",
    }
    for s, msg in bad.items():
        with pytest.raises(ValueError) as e:
            parse_order(s)
        assert str(e.value).startswith(msg), (s, str(e.value))
    with pytest.raises(TypeError, match="widen must be a bool"):
        AtenCascade(8, "yes")


def test_inductor_lanes_split_rule():
    o = InductorLanes(16, 1, 2)
    assert o.splits(1, 2048) and not o.splits(64, 2048) and not o.splits(1, 1000)
    assert o.splits(1, 2048) == inductor_splits_reduction(1, 2048, 16, 2)
    assert not InductorLanes(16, 1, 2, "false").splits(1, 10**6) and InductorLanes(16, 1, 2, "true").splits(9, 9)
    # the knob changes bits where the rule says split
    x = cancelling_rows(np.random.default_rng(2), (1, 5000), "fp32")
    a = reduce(x, "sum", order=InductorLanes(16, 1, 2, "true"), acc="fp32")
    b = reduce(x, "sum", order=InductorLanes(16, 1, 2, "false"), acc="fp32")
    assert a.tobytes() != b.tobytes()


@pytest.mark.parametrize("order", [AtenCascade(8), AtenCascade(8, True), InductorLanes(16, 2, 2),
                                   InductorLanes(8, 1, 1)])
def test_cpu_order_depth_bounds_the_error(order):
    """|fl(sum) - sum| <= gamma_depth(n) * sum|x| with bf16 accumulators (large errors),
    exact sums in float64 from bf16 data (exactly representable, few terms)."""
    rng = np.random.default_rng(16)
    u = 2.0**-8
    for n in (5, 16, 40, 100, 333, 1000):
        x = (rng.standard_normal((50, n))).astype(ml_dtypes.bfloat16).astype(F32)
        got = reduce(x, "sum", order=order, acc="bf16").astype(np.float64)
        exact = np.sum(x.astype(np.float64), axis=-1)  # exact: bf16 values, n <= 1000
        bound = gamma(order.depth(n), u) * np.sum(np.abs(x.astype(np.float64)), axis=-1)
        assert np.all(np.abs(got - exact) <= bound), (order, n)
        assert order.depth(n) <= n + 8


def test_cpu_order_depth_values():
    # n < vec: row_sum of scalars; a single vector: 4-way ILP with level_step = 16
    assert AtenCascade(8).depth(1) == 0
    assert AtenCascade(8).depth(2) == 1
    assert InductorLanes(16).depth(3) == 2  # unrolled: sequential
    # one vector of 16 lanes: 4 butterfly levels (the final 0.0 + s is exact)
    assert InductorLanes(16).depth(16) == 4
    assert InductorLanes(16).depth(32) == 5


# --------------------------------------------------------------------------------------
# libm as algorithms
def _all_fp16():
    return np.arange(2**16, dtype=np.uint16).view(np.float16).astype(F32)


def _rand32(n=10**6, seed=17):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x = bits.view(F32)
    wide = (rng.standard_normal(n) * 6).astype(F32)
    return np.concatenate([x, wide])


def test_gelu_aten_formulas():
    """ATen's GeluKernel formulas, written out with the libm routines they call."""
    x = _rand32(2 * 10**5)
    x = x[np.isfinite(x) & (np.abs(x) < 1e15)]
    f = F32
    with np.errstate(all="ignore"):
        want_none = (x * f(0.5)) * (f(1) + L.aten_vec_erf(x * f(1 / math.sqrt(2))))
        kb = f(math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5)
        inner = kb * L.fma32(np.full_like(x, f(0.044715)), (x * x) * x, x)
        want_tanh = (f(0.5) * x) * (f(1) + L.sleef_tanhf(inner))
        want_tanh_tail = (f(0.5) * x) * (f(1) + np.tanh(inner.astype(np.float64)).astype(f))
    assert A.gelu(x, fmt="fp32", algo="aten_vec").tobytes() == want_none.tobytes()
    assert A.gelu(x, fmt="fp32", approximate="tanh", algo="aten_vec").tobytes() == want_tanh.tobytes()
    assert A.gelu(x, fmt="fp32", approximate="tanh", algo="aten_scalar").tobytes() == want_tanh_tail.tobytes()


def _ulp_err(got, ref64):
    ref32 = ref64.astype(F32).astype(np.float64)
    u = np.asarray(ulp(np.abs(ref32), "fp32"), np.float64)
    with np.errstate(all="ignore"):
        return np.abs(got.astype(np.float64) - ref64) / u


def test_libm_algorithms_error_bounds():
    x = _rand32()
    x = x[np.isfinite(x)]
    # SLEEF u10: 1 ulp (SLEEF's class; measured up to 1 + 2e-8 ulp for tanhf, hence the
    # 1e-6 slack), normal results, fp64 as the exact value
    xe = x[(x > -87) & (x < 88)]
    err = _ulp_err(A.exp(xe, fmt="fp32", algo="sleef_u10"), np.exp(xe.astype(np.float64)))
    assert np.max(err) <= 1.0 + 1e-6
    xt = x[np.abs(x) > 2.0**-60]
    err = _ulp_err(A.tanh(xt, fmt="fp32", algo="sleef"), np.tanh(xt.astype(np.float64)))
    assert np.max(err) <= 1.0 + 1e-6
    # A&S 7.1.26: absolute error < 1.5e-7, plus the fp32 evaluation of 1 - r*t*exp(-x^2):
    # up to ~5 ulp(1)
    e = A.erf(x, fmt="fp32", algo="aten_vec").astype(np.float64)
    ref = np.vectorize(math.erf)(x[:200000].astype(np.float64))
    assert 1e-8 < np.max(np.abs(e[:200000] - ref)) < 1.5e-7 + 5 * 2.0**-23
    # oneDNN gelu_erf: error below 5e-7 |x| (minimax polynomials of erf, fp32 evaluation)
    xg = x[np.abs(x) < 1e4][:200000]
    g = A.gelu(xg, fmt="fp32", algo="onednn").astype(np.float64)
    gx = xg.astype(np.float64)
    gref = 0.5 * gx * (1 + np.vectorize(math.erf)(gx / math.sqrt(2)))
    assert np.all(np.abs(g - gref) <= 5e-7 * np.maximum(np.abs(gx), 1e-30))


def test_libm_algorithms_round_to_fmt_and_parse():
    x = _all_fp16()
    for fn, algo in ((A.exp, "sleef_u10"), (A.tanh, "sleef"), (A.erf, "aten_vec"), (A.gelu, "onednn")):
        got = fn(x, fmt="fp16", algo=algo)
        assert got.dtype == np.float16
        assert got.tobytes() == fn(x, fmt="fp32", algo=algo).astype(np.float16).tobytes()
        assert A.parse_algo(algo.upper(), {A.exp: A.EXP_ALGOS, A.tanh: A.TANH_ALGOS,
                                           A.erf: A.ERF_ALGOS, A.gelu: A.GELU_ALGOS}[fn]) == algo
    with pytest.raises(ValueError, match=r"algo='sleef' is not valid; valid choices: \['exact', 'exp_poly"):
        A.exp(x, fmt="fp32", algo="sleef")
    with pytest.raises(ValueError, match=r"algo='sleef_u10' is not valid; valid choices: \['exact', 'sleef', 'glibc'\]"):
        A.tanh(x, fmt="fp32", algo="sleef_u10")
    with pytest.raises(ValueError, match=r"algo='onednn' is not valid; valid choices: \['exact', 'aten_vec', 'glibc'\]"):
        A.erf(x, fmt="fp32", algo="onednn")
    # the algorithm changes bits (a knob that changes no bit is a bug)
    y = _rand32(10**4)
    assert A.exp(y, fmt="fp32", algo="sleef_u10").tobytes() != A.exp(y, fmt="fp32").tobytes()
    assert A.tanh(y, fmt="fp32", algo="sleef").tobytes() != A.tanh(y, fmt="fp32").tobytes()
    assert A.erf(y, fmt="fp32", algo="aten_vec").tobytes() != A.erf(y, fmt="fp32").tobytes()
    assert A.gelu(y, fmt="fp32", algo="onednn").tobytes() != A.gelu(y, fmt="fp32").tobytes()


def test_gelu_vocabulary():
    x = _all_fp16()
    assert A.GELU_APPROXIMATE == ("none", "tanh")
    none = A.gelu(x, fmt="fp32")
    tanh = A.gelu(x, fmt="fp32", approximate="tanh")
    assert none.tobytes() != tanh.tobytes()
    with np.errstate(all="ignore"):
        xd = x.astype(np.float64)
        assert tanh.tobytes() == (0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)))
                                  ).astype(F32).tobytes()
    with pytest.raises(ValueError, match=r"approximate='erf' is not valid; valid choices: \['none', 'tanh'\]"):
        A.gelu(x, fmt="fp32", approximate="erf")
    with pytest.raises(ValueError, match=r"approximate='tanh' is not valid with it; valid: \['none'\]"):
        A.gelu(x, fmt="fp32", approximate="tanh", algo="onednn")
