"""Reductions: every order bit-equal to a plain scalar loop of that order, within
its textbook bound, stagnation where theory says, shuffled reproducibility, and
bad-input errors."""

from __future__ import annotations

import importlib
import math
import tracemalloc
import zlib
from fractions import Fraction

import _scalar_orders as R
import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, bits
from hypothesis import given, settings
from hypothesis import strategies as st

from numlab import kernels as K
from numlab.formats import BF16, FP16, FP32

DT = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def _ref_for(order: K.Order):
    """Map an order object to the scalar reference loop (built from its fields)."""
    if isinstance(order, K.Sequential):
        return R.seq
    if isinstance(order, K.Pairwise):
        return R.pairwise
    if isinstance(order, K.Kahan):
        return R.kahan
    if isinstance(order, K.Lanes):
        return lambda xs, f: R.lanes(xs, f, order.L, order.combine, order.tail)
    if isinstance(order, K.Blocked):
        inner, outer = _ref_for(order.inner), _ref_for(order.outer)
        return lambda xs, f: R.blocked(xs, f, order.tile, inner, outer)
    raise AssertionError(order)


ORDERS = [
    "sequential", "pairwise", "kahan",
    "lanes(4)", "lanes(8,sequential)", "lanes(8,tree,epilogue)", "lanes(3,sequential,epilogue)",
    "lanes(5,tree)", "blocked(16)", "blocked(7,pairwise,sequential)",
    "blocked(8,lanes(4),pairwise)", "blocked(5,kahan,kahan)", "blocked(6,blocked(3,pairwise,sequential),pairwise)",
]


def _adversarial(fmt: str) -> list[np.ndarray]:
    big = {"fp32": 1e30, "fp16": 30000.0, "bf16": 1e30}[fmt]
    cases = [
        np.array([1.0, 2.0**-24, -1.0, 2.0**-24, 3.0, -3.0, 0.5, 2.0**-12] * 5),
        np.array([big, 1.0, -big, 1.0, 1.0, -1.0, big / 2, -big / 2, 0.1] * 3),
        np.array([-0.0] * 9),
        np.array([0.0, -0.0, -0.0, 0.0, -0.0]),
        np.array([1.0] * 37),
        np.array([1.0, np.inf, 2.0, -3.0, 4.0]),
        np.array([1.0, np.inf, -np.inf, 2.0]),
        np.array([np.nan, 1.0, 2.0]),
        np.array([big, big, big, -big, -big, -big]),  # overflow in the middle
        np.array([3.0]),
    ]
    return cases


def _as_fmt(x, fmt):
    return x.astype(np.float64).astype(DT[fmt]).astype(np.float32)


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("order", ORDERS)
def test_order_equals_scalar_loop(order, fmt):
    rng = np.random.default_rng(zlib.crc32(f"{order}/{fmt}".encode()))
    o = K.parse_order(order)
    ref = _ref_for(o)
    rows = [
        _as_fmt(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n), fmt)
        for n in (1, 2, 3, 7, 16, 33, 50)
    ] + [_as_fmt(c, fmt) for c in _adversarial(fmt)]
    for x in rows:
        got = K.reduce(x, "sum", order=o, acc=fmt)
        exp = ref([float(v) for v in x], fmt)
        g = float(np.float64(got))
        assert (math.isnan(g) and math.isnan(exp)) or (
            g == exp and math.copysign(1, g) == math.copysign(1, exp)
        ), (order, fmt, x, g, exp)


@pytest.mark.parametrize("order", ["sequential", "pairwise", "lanes(4)", "blocked(8,pairwise,pairwise)", "kahan",
                                   "shuffled(5)", "shuffled(2,4,pairwise)"])
def test_vectorised_rows_equal_scalar_loop_per_row(order):
    """A 2-D reduction along either axis equals the scalar loop on each row."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 21)).astype(np.float16).astype(np.float32)
    o = K.parse_order(order)
    got = K.reduce(x, "sum", axis=1, order=o, acc="fp16")
    got_t = K.reduce(x.T.copy(), "sum", axis=0, order=o, acc="fp16")
    for i in range(6):
        xs = [float(v) for v in x[i]]
        if isinstance(o, K.Shuffled):
            inner = R.pairwise if isinstance(o.inner, K.Pairwise) else R.seq
            exp = R.shuffled(xs, "fp16", o.seed, i, 6, o.tile, inner)
        else:
            exp = _ref_for(o)(xs, "fp16")
        assert float(got[i]) == exp
        assert float(got_t[i]) == exp


def test_sequential_native_accumulate_is_recursive_summation():
    """The fp32 fast path (ufunc.accumulate) equals a float32 scalar loop."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(3000) * np.exp(rng.standard_normal(3000) * 5)).astype(np.float32)
    s = np.float32(x[0])
    for v in x[1:]:
        s = np.float32(s + v)
    assert K.reduce(x, "sum", order="sequential", acc="fp32") == s


# ------------------------------------------------------------------ bounds
def _exact_sum(xs) -> Fraction:
    return sum((Fraction(float(v)) for v in xs), Fraction(0))


BOUND_ORDERS = [K.Sequential(), K.Pairwise(), K.Lanes(8), K.Lanes(4, "sequential", "epilogue"),
                K.Blocked(16, K.Pairwise(), K.Sequential()), K.Blocked(5, K.Lanes(2), K.Pairwise()),
                K.Shuffled(3), K.Kahan()]


@pytest.mark.parametrize("fmt", ["fp32", "fp16"])
@given(data=st.data())
def test_error_within_textbook_bound(fmt, data):
    """|fl(sum) - sum| <= gamma_depth * sum|x_i| (Higham 2002, eq. 4.3-4.6; Kahan 2u + O(nu^2))."""
    n = data.draw(st.integers(1, 120))
    hi = 1e4 if fmt == "fp16" else 1e30
    lo = 1e-3 if fmt == "fp16" else 1e-30
    mag = st.floats(lo, hi / (4 * n)) | st.just(0.0)
    xs = data.draw(st.lists(mag, min_size=n, max_size=n))
    signs = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    x = np.array([-v if s else v for v, s in zip(xs, signs, strict=True)], dtype=np.float64)
    x = _as_fmt(x, fmt)
    ex = _exact_sum(x)
    absum = _exact_sum(np.abs(x))
    u = {"fp32": FP32.u, "fp16": FP16.u}[fmt]
    for o in BOUND_ORDERS:
        got = Fraction(float(K.reduce(x, "sum", order=o, acc=fmt)))
        bound = o.bound(n, u)
        assert abs(got - ex) <= Fraction(bound) * absum, (str(o), n, float(got), float(ex))


def test_depths_are_the_textbook_ones():
    assert K.Sequential().depth(100) == 99
    assert K.Pairwise().depth(100) == 7 and K.Pairwise().depth(128) == 7 and K.Pairwise().depth(129) == 8
    assert K.Lanes(8).depth(64) == 7 + 3
    assert K.Lanes(8, "sequential").depth(64) == 7 + 7
    assert K.Lanes(8, "tree", "epilogue").depth(67) == 7 + 3 + 3
    assert K.Blocked(16, K.Pairwise(), K.Sequential()).depth(64) == 4 + 3
    assert K.gamma(3, 2.0**-11) == pytest.approx(3 * 2.0**-11 / (1 - 3 * 2.0**-11))


def test_depth_equals_count_of_rounded_additions_on_the_worst_path():
    """Depth counted independently: instrument the scalar loops with 'weights'."""
    def path_depths(order, n):
        # run the order on symbolic lists: each element carries its number of additions
        class V:
            def __init__(self, d):
                self.d = d

        def add(a, b):
            return V({k: v + 1 for k, v in {**a.d, **b.d}.items()})

        def seqd(vs):
            s = vs[0]
            for v in vs[1:]:
                s = add(s, v)
            return s

        def pairwised(vs):
            while len(vs) > 1:
                nv = [add(vs[i], vs[i + 1]) for i in range(0, len(vs) - 1, 2)]
                if len(vs) % 2:
                    nv.append(vs[-1])
                vs = nv
            return vs[0]

        vs = [V({i: 0}) for i in range(n)]
        if order == "seq":
            r = seqd(vs)
        elif order == "pair":
            r = pairwised(vs)
        else:  # blocked(16, pairwise, sequential)
            r = seqd([pairwised(vs[i:i + 16]) for i in range(0, n, 16)])
        return max(r.d.values())

    for n in (1, 2, 5, 16, 17, 100):
        assert path_depths("seq", n) == K.Sequential().depth(n)
        assert path_depths("pair", n) == K.Pairwise().depth(n)
        assert path_depths("blk", n) == K.Blocked(16, K.Pairwise(), K.Sequential()).depth(n)


# ------------------------------------------------------------------ stagnation
def test_fp16_sequential_sum_of_ones_stagnates_at_2048():
    """2048 + 1 = 2049 is a tie between 2048 and 2050 in fp16 (ulp 2): rne gives 2048."""
    x = np.ones((2, 5000), dtype=np.float16)
    assert np.all(K.reduce(x, "sum", order="sequential", acc="fp16") == 2048)
    # bf16 (p = 8): stops at 256
    assert K.reduce(np.ones(1000, np.float32), "sum", order="sequential", acc="bf16") == 256
    # fp32 accumulator: exact
    assert K.reduce(x, "sum", order="sequential", acc="fp32")[0] == 5000
    # a pairwise tree of 4096 ones is exact in fp16 (every partial is a power of two)
    assert K.reduce(np.ones(4096, np.float16), "sum", order="pairwise", acc="fp16") == 4096


@pytest.mark.parametrize("fmt,p", [("fp16", 11), ("bf16", 8)])
def test_stagnation_point_of_small_increment(fmt, p):
    """Adding v repeatedly to S stops once v <= ulp(S)/2 (tie to even or below half)."""
    v = 2.0**-3
    x = np.full(20000, v, dtype=np.float32)
    s = float(K.reduce(x, "sum", order="sequential", acc=fmt))
    # theory: S grows exactly until S = 2^e with ulp(S)/2 = 2^(e-p) = v (e = p - 3):
    # there S + v is a tie and rne keeps the even S.
    assert s == 2.0 ** (p - 3)


# ------------------------------------------------------------------ shuffled
def test_shuffled_reproducible_per_seed_and_varies_across_seeds():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 1000)).astype(np.float32)
    a = K.reduce(x, "sum", order=K.Shuffled(7), acc="fp32")
    b = K.reduce(x, "sum", order="shuffled(7)", acc="fp32")
    assert_same_bits(a, b)
    results = {bits(K.reduce(x, "sum", order=K.Shuffled(s), acc="fp32")).tobytes() for s in range(12)}
    assert len(results) > 1
    # a permutation of the sum order: every seed gives the same exact-arithmetic sum
    xi = np.round(x * 256).astype(np.float32)  # integers: any order is exact
    vals = {tuple(K.reduce(xi, "sum", order=K.Shuffled(s), acc="fp32")) for s in range(5)}
    assert len(vals) == 1


# ------------------------------------------------------------------ ops
def test_ops_against_references():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 40)).astype(np.float16)
    x64 = x.astype(np.float64)
    for o in ("sequential", "pairwise"):
        s = K.reduce(x, "sum", order=o, acc="fp32")
        assert np.allclose(s, x64.sum(1), rtol=1e-6)
        assert np.allclose(K.reduce(x, "mean", order=o), x64.mean(1), rtol=1e-6)
        assert np.allclose(K.reduce(x, "sumsq", order=o), (x64**2).sum(1), rtol=1e-6)
        for v in K.VARIANCE_ALGORITHMS:
            assert np.allclose(K.reduce(x, "var", order=o, variance=v), x64.var(1), rtol=1e-5)
            assert np.allclose(K.reduce(x, "var", order=o, variance=v, correction=1), x64.var(1, ddof=1), rtol=1e-5)
    assert np.array_equal(K.reduce(x, "max"), x.max(1).astype(np.float32))
    assert np.array_equal(K.reduce(x, "min", out="fp16"), x.min(1))
    # out format and container
    r = K.reduce(x, "sum", out="fp16")
    assert r.dtype == np.float16 and np.array_equal(r, x64.sum(1).astype(np.float32).astype(np.float16))
    assert K.reduce(x, "sum", out="bf16").dtype == ml_dtypes.bfloat16
    assert K.reduce(x, "sum", keepdims=True).shape == (3, 1)
    # mean is fl(fl(sum)/n) in the accumulator
    s32 = K.reduce(x, "sum", order="pairwise")
    assert np.array_equal(K.reduce(x, "mean", order="pairwise"), (s32 / np.float32(40)).astype(np.float32))


def test_variance_algorithms_differ_where_textbook_cancels():
    """One-pass textbook variance loses everything on shifted data (Chan, Golub & LeVeque 1983)."""
    rng = np.random.default_rng(5)
    x = (1000.0 + rng.standard_normal(512) * 0.01).astype(np.float32)
    exact = np.var(x.astype(np.float64))
    tp = K.reduce(x, "var", variance="two_pass", order="pairwise")
    tb = K.reduce(x, "var", variance="textbook", order="pairwise")
    wf = K.reduce(x, "var", variance="welford")
    assert abs(tp - exact) / exact < 1e-3
    assert abs(wf - exact) / exact < 1e-2
    assert abs(tb - exact) / exact > 0.1


def test_welford_equals_scalar_loop():
    rng = np.random.default_rng(6)
    x = rng.standard_normal(30).astype(np.float16).astype(np.float32)
    m = np.float32(0)
    m2 = np.float32(0)
    for k, v in enumerate(x, 1):
        d = np.float32(v - m)
        m = np.float32(m + np.float32(d / np.float32(k)))
        m2 = np.float32(m2 + np.float32(d * np.float32(v - m)))
    assert K.reduce(x, "var", variance="welford") == np.float32(m2 / np.float32(30))


def test_nan_inf_propagate():
    x = np.array([[1.0, np.nan, 2.0], [1.0, np.inf, 2.0], [np.inf, -np.inf, 0.0]], dtype=np.float32)
    for o in ("sequential", "pairwise", "lanes(2)", "blocked(2)", "shuffled(1)"):
        r = K.reduce(x, "sum", order=o)
        assert np.isnan(r[0]) and r[1] == np.inf and np.isnan(r[2])
    # Kahan's compensation c = (t - s) - y is inf - inf once an inf arrives: NaN, as in C
    r = K.reduce(x, "sum", order="kahan")
    assert np.isnan(r).all()
    assert np.isnan(K.reduce(x, "max")[0])


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bad,message", [
    ("blocked(0)", r"^tile=0 is not valid; it must be an int > 0$"),
    ("blocked(-3,pairwise)", r"^tile=-3 .*int > 0$"),
    ("blocked(x)", r"^tile='x' .*integer$"),
    ("lanes(0)", r"^lanes L=0 .*int >= 1$"),
    ("lanes(4,diagonal)", r"^combine='diagonal' .*\['tree', 'sequential'\]$"),
    ("lanes(4,tree,wrap)", r"^tail='wrap' .*\['masked', 'epilogue'\]$"),
    ("shuffled(-1)", r"^seed=-1 .*int >= 0$"),
    ("shuffled(x)", r"^seed='x' .*integer$"),
    ("shuffled(1,0)", r"^tile=0 .*int > 0$"),
    ("zigzag", r"^order='zigzag' is not valid; valid orders: 'sequential', 'pairwise', 'kahan', 'lanes\(L.*"
               r"'blocked\(tile.*'shuffled\(seed"),
])
def test_bad_orders_name_the_knob(bad, message):
    """The message names the knob, the bad value and the valid choices or range."""
    with pytest.raises(ValueError, match=message):
        K.reduce(np.ones(4, np.float32), "sum", order=bad)


def test_bad_reduce_arguments():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"op='prod'.*sum"):
        K.reduce(x, "prod")
    with pytest.raises(ValueError, match=r"variance='fast'.*two_pass"):
        K.reduce(x, "var", variance="fast")
    with pytest.raises(ValueError, match=r"^acc='fp12' is not a known format; valid names: \[.*'fp16'"):
        K.reduce(x, "sum", acc="fp12")
    with pytest.raises(ValueError, match=r"^out='fp12' is not a known format"):
        K.reduce(x, "sum", out="fp12")
    with pytest.raises(ValueError, match="axis"):
        K.reduce(x, "sum", axis=2)
    with pytest.raises(TypeError, match="dtype int64"):
        K.reduce(np.ones(3, np.int64), "sum")
    with pytest.raises(ValueError, match="L"):
        K.Lanes(0)
    with pytest.raises(ValueError, match="valid orders"):
        K.parse_order("lanes")


def test_parse_order_round_trips():
    for s in ORDERS + ["shuffled(3)", "shuffled(3,64,pairwise)"]:
        o = K.parse_order(s)
        assert K.parse_order(str(o)) == o


def test_empty_axis_sum_is_zero():
    assert K.reduce(np.zeros((3, 0), np.float32), "sum", order="pairwise").tolist() == [0, 0, 0]


def test_bf16_accumulator_order_matters():
    """bf16 has p = 8, so ulp(1) = 2^-7 and 1 + 2^-8 is a tie that rne sends back to 1."""
    x = np.array([1.0, 2.0**-8, 2.0**-8], dtype=np.float32)
    assert K.reduce(x, "sum", order="sequential", acc=BF16) == 1.0
    assert K.reduce(x, "sum", order="pairwise", acc=BF16) == 1.0
    # small ones first: 2^-8 + 2^-8 = 2^-7 exactly, then 1 + 2^-7 is representable
    assert K.reduce(x[::-1].copy(), "sum", order="sequential", acc=BF16) == 1.0 + 2.0**-7
    assert K.reduce(x, "sum", order="sequential", acc=FP32) == 1.0 + 2.0**-7


@pytest.mark.parametrize("order", ["sequential", "pairwise", "lanes(4,sequential)"])
def test_directed_accumulator_rounding_equals_scalar_loop(order):
    """acc_rounding='rtz': every addition truncated (TwoSum + round-to-odd path)."""
    rng = np.random.default_rng(12)
    x = np.abs(rng.standard_normal(45)).astype(np.float16).astype(np.float32)
    got = float(K.reduce(x, "sum", order=order, acc="fp16", acc_rounding="rtz"))
    xs = [float(v) for v in x]
    if order == "sequential":
        exp = xs[0]
        for v in xs[1:]:
            exp = R.fadd(exp, v, "fp16", "rtz")
    elif order == "pairwise":
        level = xs
        while len(level) > 1:
            nxt = [R.fadd(level[i], level[i + 1], "fp16", "rtz") for i in range(0, len(level) - 1, 2)]
            level = nxt + ([level[-1]] if len(level) % 2 else [])
        exp = level[0]
    else:
        accs = []
        m = -(-len(xs) // 4)
        padded = xs + [-0.0] * (4 * m - len(xs))
        for j in range(4):
            s_ = -0.0
            for i in range(m):
                s_ = R.fadd(s_, padded[i * 4 + j], "fp16", "rtz")
            accs.append(s_)
        exp = accs[0]
        for v in accs[1:]:
            exp = R.fadd(exp, v, "fp16", "rtz")
    assert got == exp
    assert got <= float(K.reduce(x, "sum", order=order, acc="fp16"))  # truncation never rounds up


@settings(max_examples=40)
@given(data=st.data())
def test_order_identities(data):
    """Degenerate parameters reduce to the simpler orders, bit for bit:
    blocked(T >= n, inner, *) == inner; blocked(1, *, outer) == outer;
    lanes(1) == sequential; lanes(L, sequential, epilogue) with L > n == sequential;
    shuffled(seed, tile >= n, inner) == inner."""
    n = data.draw(st.integers(1, 60))
    seed = data.draw(st.integers(0, 1000))
    x = _as_fmt(np.random.default_rng(seed).standard_normal(n) * 100, "fp16")
    def s(o):
        return float(K.reduce(x, "sum", order=o, acc="fp16"))
    for inner in (K.Sequential(), K.Pairwise(), K.Lanes(4), K.Kahan()):
        assert s(K.Blocked(n + data.draw(st.integers(0, 5)), inner, K.Pairwise())) == s(inner)
        assert s(K.Shuffled(seed, n, inner)) == s(inner)
    for outer in (K.Sequential(), K.Pairwise(), K.Lanes(3, "sequential"), K.Kahan()):
        assert s(K.Blocked(1, K.Pairwise(), outer)) == s(outer)
    assert s(K.Lanes(1)) == s(K.Sequential()) == s(K.Lanes(n + 1, "sequential", "epilogue"))


# ------------------------------------------------------------------ the fast path
# reduce() takes a chunked, transposed-tile path (numlab.kernels.orders.fast._sum_fast) for
# the numlab orders with fp32/fp64/fp16/bf16 round-to-nearest accumulators; the
# reference path (_reduce_reference: the whole array, each order's loops over the
# last axis) stays callable.  These tests prove the two bit-identical.
from numlab.kernels._common import Arith  # noqa: E402
from numlab.kernels.orders import reveal as _reveal_mod  # noqa: E402
from numlab.kernels.orders.fast import _bf16_widen_T  # noqa: E402
from numlab.kernels.orders.tree import Tree  # noqa: E402
from numlab.kernels.reduction import _reduce_reference  # noqa: E402

_fast_mod = importlib.import_module("numlab.kernels.orders.fast")


@pytest.fixture(params=["numpy", "compiled"])
def accel(request, monkeypatch):
    """Run a fast-path test on numpy's kernels and on the compiled ones
    (numlab.kernels._accel, numba) for every input size."""
    if request.param == "numpy":
        monkeypatch.setattr(_fast_mod, "_ACCEL_MIN_ELEMENTS", 1 << 62)
    else:
        pytest.importorskip("numba", reason="the compiled fast path needs numba (a default dependency; absent where no wheel exists)")
        monkeypatch.delenv("NUMLAB_ACCEL", raising=False)
        monkeypatch.setattr(_fast_mod, "_ACCEL_MIN_ELEMENTS", 0)
    return request.param

FAST_ORDERS = [
    "sequential", "pairwise", "kahan", "lanes(16)", "lanes(8,sequential)", "lanes(8,tree,epilogue)",
    "lanes(3,sequential,epilogue)", "lanes(5,tree)", "blocked(512)", "blocked(7,pairwise,sequential)",
    "blocked(8,lanes(4),pairwise)", "blocked(5,kahan,kahan)", "blocked(64,pairwise,kahan)",
]
FAST_LENGTHS = (1, 2, 7, 8, 9, 127, 128, 129, 4097)


def _rows(rng, rows, n, kind):
    x = rng.standard_normal((rows, n)) * np.exp(rng.standard_normal((rows, n)) * 3)
    if kind == "cancelling":  # each row followed by its negation reversed: sums near 0
        x = np.concatenate([x, -x[:, ::-1]], axis=1)[:, :n] * 1e3
        x[:, n // 2:] += rng.standard_normal((rows, n - n // 2)) * 1e-3
    return x


_REFERENCE_SUMS: dict = {}  # the slow reference path runs once for the numpy and compiled params


@pytest.mark.parametrize("acc", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("order", FAST_ORDERS)
def test_fast_path_bit_identical_to_reference(order, acc, accel):
    rng = np.random.default_rng(zlib.crc32(f"fast/{order}/{acc}".encode()))
    for n in FAST_LENGTHS:
        for kind in ("random", "cancelling"):
            x = _rows(rng, 3, n, kind)
            for dt in (np.float16, ml_dtypes.bfloat16, np.float32):
                with np.errstate(over="ignore"):
                    xx = x.astype(dt)
                got = K.reduce(xx, "sum", order=order, acc=acc)
                key = (order, acc, n, kind, np.dtype(dt).name)  # same data for both accel params
                if key not in _REFERENCE_SUMS:
                    _REFERENCE_SUMS[key] = _reduce_reference(xx, "sum", order=order, acc=acc)
                exp = _REFERENCE_SUMS[key]
                assert got.dtype == exp.dtype
                assert_same_bits(got, exp, what=f"{order} {acc} n={n} {kind} {dt}")


@pytest.mark.parametrize("order", ["sequential", "pairwise", "kahan", "lanes(16)", "blocked(512,pairwise,sequential)"])
def test_fast_path_many_rows_axes_ops_and_specials(order, accel):
    """More rows than one tile (several chunks and a short last one), axis=0 and 3-D
    input, mean/sumsq, and rows holding inf/NaN/-0.0/overflow: all equal the reference."""
    rng = np.random.default_rng(zlib.crc32(order.encode()))
    x = _rows(rng, 301, 600, "random").astype(np.float16)
    x[5, 3] = np.inf
    x[6, :2] = [np.inf, -np.inf]
    x[7, 9] = np.nan
    x[8] = -0.0
    x[9, :] = 60000.0  # overflows fp16 accumulators
    for acc in ("fp32", "fp16", "bf16", "fp64"):
        for op in ("sum", "mean", "sumsq"):
            for arr, axis in ((x, -1), (np.ascontiguousarray(x.T), 0), (x.reshape(7, 43, 600), 2)):
                got = K.reduce(arr, op, axis=axis, order=order, acc=acc)
                key = (order, acc, op, axis, arr.shape)
                if key not in _REFERENCE_SUMS:
                    _REFERENCE_SUMS[key] = _reduce_reference(arr, op, axis=axis, order=order, acc=acc)
                exp = _REFERENCE_SUMS[key]
                assert_same_bits(got, exp, what=f"{acc} {op} axis={axis}")


def test_fast_path_via_order_sum_matches_reference(accel):
    """Order._sum (used by the engine and split-K matmul) dispatches to the fast path."""
    rng = np.random.default_rng(5)
    ar = Arith("fp16")
    xw = ar.round(rng.standard_normal((40, 9, 33)))
    for order in FAST_ORDERS:
        o = K.parse_order(order)
        assert_same_bits(o._sum(xw, ar), o._sum_reference(xw, ar), what=order)


def test_numpy_outer_reduce_is_recursive_summation():
    """The equivalence Sequential's fast path rests on: add.reduce over a non-innermost
    axis (W >= 2 columns) adds rows in order, one rounding per add in the array's dtype
    (float32, float16, bfloat16); pinned against scalar loops on random, cancelling and
    odd-length columns."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 7, 9, 129, 1000):
        for kind in ("random", "cancelling"):
            t = np.ascontiguousarray(_rows(rng, 3, n, kind).T)  # (n, 3)
            for dt, fmt in ((np.float32, "fp32"), (np.float16, "fp16"), (ml_dtypes.bfloat16, "bf16")):
                with np.errstate(over="ignore"):
                    tt = t.astype(dt)
                got = np.add.reduce(tt, axis=0, initial=-0.0)
                for j in range(3):
                    exp = R.seq([float(v) for v in tt[:, j]], fmt)
                    assert float(got[j]) == exp or (math.isnan(exp) and math.isnan(float(got[j])))


def test_numpy_contiguous_sum_is_not_a_numlab_order():
    """Why the fast path does not call numpy's own row sum: FPRev reveals numpy's
    float32 add.reduce over a contiguous axis as its blocked, 8-way unrolled pairwise
    scheme with x0 added last, a tree different from Pairwise, Sequential and every
    Lanes(8) variant; the outer-axis reduce is exactly Sequential."""
    n = 37
    inner = _reveal_mod.reveal(lambda x: np.add.reduce(x, axis=-1), n, "fp32", check_rows=100)
    assert inner.check.ok
    for o in ("pairwise", "sequential", "lanes(8)", "lanes(8,sequential)", "lanes(8,tree,epilogue)",
              "lanes(8,sequential,epilogue)"):
        assert inner.order != Tree.from_order(K.parse_order(o), n), o
    outer = _reveal_mod.reveal(lambda x: np.add.reduce(np.ascontiguousarray(x.T), axis=0, initial=-0.0), n,
                               "fp32", check_rows=100)
    assert outer.order == Tree.from_order(K.Sequential(), n)


def test_bf16_transposed_widening_exact_for_every_bit_pattern():
    u = np.arange(1 << 16, dtype=np.uint16).reshape(64, 1024)  # every bf16 incl. NaNs, infs, -0.0
    blk = u.view(ml_dtypes.bfloat16)
    for cols in (1024, 1023, 5):  # n % 4 == 0 and a leftover tail
        dst = np.empty((cols, 64), np.float32)
        assert _bf16_widen_T(dst, blk[:, :cols])
        exp = (u[:, :cols].astype(np.uint32) << 16).view(np.float32).T
        assert_same_bits(dst, exp)


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_fast_path_peak_memory_is_below_twice_the_input(accel, dt):
    x = np.random.default_rng(0).standard_normal((512, 4096)).astype(dt)  # 4 MiB
    K.reduce(x[:8], "sum", order="kahan", acc="fp32")  # compile / load outside the measurement
    for order in ("sequential", "pairwise", "kahan", "lanes(16)", "blocked(512)"):
        tracemalloc.start()
        K.reduce(x, "sum", order=order, acc="fp32")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= 2 * x.nbytes, (order, peak / x.nbytes)


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_direct_row_sums_equal_reference_and_scalar_loop(dt, accel):
    """Sequential, Blocked(T, sequential, sequential), Pairwise and Lanes on fp16/bf16
    rows (the compiled path sums them straight from the 16-bit codes: eight rows at a
    time with the last block padded, or row by row): many rows, a row count not a
    multiple of 8, rows shorter than the lanes, strided rows, specials; equal to the
    reference path and to the scalar loop of the order."""
    rng = np.random.default_rng(zlib.crc32(f"direct/{np.dtype(dt).name}".encode()))
    for rows, n in ((37, 1), (37, 5), (21, 600)):
        with np.errstate(over="ignore"):
            x = _rows(rng, rows, n, "random").astype(dt)
        x[1, 0] = np.inf
        x[2, -1] = np.nan
        x[3] = -0.0
        for arr, axis in ((x, -1), (np.ascontiguousarray(x.T), 0)):
            for order in ("sequential", "blocked(7)", "blocked(512)", "pairwise", "lanes(16)", "lanes(3,sequential)",
                          "lanes(8,tree,epilogue)", "lanes(5,sequential,epilogue)"):
                got = K.reduce(arr, "sum", axis=axis, order=order, acc="fp32")
                exp = _reduce_reference(arr, "sum", axis=axis, order=order, acc="fp32")
                assert_same_bits(got, exp, what=f"{order} {rows}x{n} axis={axis}")
        for order in ("sequential", "pairwise", "lanes(8,tree,epilogue)"):
            o = K.parse_order(order)
            got = K.reduce(x, "sum", order=o, acc="fp32")
            for r in (0, 4, rows - 1):
                assert float(got[r]) == _ref_for(o)([float(v) for v in x[r].astype(np.float32)], "fp32"), order
