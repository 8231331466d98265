"""K-tiled matmul: each mode against an exact-rational (Fraction) reference of what
it models, including entries that need the exact fallback."""

from __future__ import annotations

import sys
from fractions import Fraction

import _scalar_orders as R
import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

from numlab import kernels as K

DT = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32}


_matmul_mod = sys.modules["numlab.kernels.tiled_matmul"]


@pytest.fixture(params=["numpy", "compiled"])
def accel(request, monkeypatch):
    """Run a block_fma test with the numpy post-BLAS pass and with the compiled one
    (numlab.kernels._accel.add_round32, numba) for every size."""
    if request.param == "numpy":
        monkeypatch.setattr(_matmul_mod, "_ACCEL_MIN_ENTRIES", 1 << 62)
    else:
        pytest.importorskip("numba", reason="the compiled fast path needs numba (a default dependency; absent where no wheel exists)")
        monkeypatch.delenv("NUMLAB_ACCEL", raising=False)
        monkeypatch.setattr(_matmul_mod, "_ACCEL_MIN_ENTRIES", 0)
    return request.param


def _rnd(v: Fraction, fmt):
    return R.round_to_grid(v, fmt) if v != 0 else 0.0


def ref_block_fma(a, b, k_tile, acc="fp32"):
    M, Kd = a.shape
    N = b.shape[1]
    out = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            c = Fraction(0)
            for s in range(0, Kd, k_tile):
                t = sum((Fraction(float(a[i, k])) * Fraction(float(b[k, j])) for k in range(s, min(s + k_tile, Kd))),
                        Fraction(0))
                c = Fraction(_rnd(c + t, acc))
            out[i, j] = float(c)
    return out


def ref_sequential(a, b, k_tile, acc="fp32", fma=False):
    M, Kd = a.shape
    N = b.shape[1]
    out = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            c = 0.0
            for s in range(0, Kd, k_tile):
                t = 0.0
                for k in range(s, min(s + k_tile, Kd)):
                    p = Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                    t = _rnd(Fraction(t) + p, acc) if fma else R.fadd(t, _rnd(p, acc), acc)
                c = R.fadd(c, t, acc)
            out[i, j] = c
    return out


def ref_split_k(a, b, k_tile, acc="fp32"):
    M, Kd = a.shape
    N = b.shape[1]
    out = np.zeros((M, N))
    for i in range(M):
        for j in range(N):
            parts = []
            for s in range(0, Kd, k_tile):
                t = sum((Fraction(float(a[i, k])) * Fraction(float(b[k, j])) for k in range(s, min(s + k_tile, Kd))),
                        Fraction(0))
                parts.append(_rnd(t, acc))
            out[i, j] = R.pairwise(parts, acc)
    return out


def _data(rng, fmt, M, Kd, N, spread=0):
    a = rng.standard_normal((M, Kd)) * np.exp2(rng.integers(-spread, spread + 1, (M, Kd)))
    b = rng.standard_normal((Kd, N)) * np.exp2(rng.integers(-spread, spread + 1, (Kd, N)))
    return a.astype(DT[fmt]), b.astype(DT[fmt])


@pytest.mark.parametrize("fmt,spread", [("fp16", 0), ("fp16", 6), ("bf16", 30), ("fp32", 3)])
@pytest.mark.parametrize("k_tile", [1, 4, 16, 64])
def test_block_fma_equals_exact_rational_reference(fmt, spread, k_tile, accel):
    rng = np.random.default_rng(k_tile + spread)
    a, b = _data(rng, fmt, 4, 37, 3, spread)
    got = K.matmul(a, b, k_tile=k_tile, algo="block_fma")
    assert got.dtype == np.float32
    assert np.array_equal(got.astype(np.float64), ref_block_fma(a, b, k_tile))


@pytest.mark.parametrize("acc", ["fp16", "bf16"])
def test_block_fma_narrow_accumulator(acc):
    rng = np.random.default_rng(7)
    a, b = _data(rng, "fp16", 3, 40, 3)
    got = K.matmul(a, b, k_tile=8, acc=acc, algo="block_fma")
    assert np.array_equal(got.astype(np.float64), ref_block_fma(a, b, 8, acc))


def test_block_fma_exact_fallback_is_exercised_and_right(accel):
    """Ties and huge dynamic range defeat the fast certificates; the exact path decides."""
    # 1 + 2^-24 is an exact fp32 tie; products of 2^-20 * 2^-4 make it
    a = np.array([[1.0, 2.0**-20, 2.0**-20, 2.0**-40, 2.0**20]], dtype=np.float32)
    b = np.array([[1.0], [2.0**-4], [2.0**-60], [2.0**-90], [2.0**-130]], dtype=np.float32)
    # bf16-range values in fp32 containers: products span ~2^-150 .. 1
    st = {}
    got = K.matmul(a, b, k_tile=5, algo="block_fma", stats=st)
    assert got[0, 0] == ref_block_fma(a, b, 5)[0, 0]
    rng = np.random.default_rng(3)
    a, b = _data(rng, "bf16", 6, 32, 6, spread=60)
    st = {}
    got = K.matmul(a, b, k_tile=32, algo="block_fma", stats=st)
    assert np.array_equal(got.astype(np.float64), ref_block_fma(a, b, 32))
    # construct certain ties: sum = 1 + 2^-24 exactly (a midpoint of fp32)
    a = np.array([[1.0, 2.0**-12, 2.0**-100]], dtype=np.float32)
    b = np.array([[1.0], [2.0**-12], [2.0**-100]], dtype=np.float32)
    st = {}
    got = K.matmul(a, b, k_tile=3, algo="block_fma", stats=st)
    # exact value 1 + 2^-24 + 2^-200 is just above the tie: rounds up
    assert got[0, 0] == np.float32(1 + 2.0**-23)
    assert st["uncertified"] >= 1  # decided by the exact Python path


@pytest.mark.parametrize("fma", [False, True])
@pytest.mark.parametrize("k_tile", [1, 5, 64])
def test_sequential_equals_scalar_loop(k_tile, fma):
    rng = np.random.default_rng(11)
    a, b = _data(rng, "fp16", 3, 23, 4, 4)
    got = K.matmul(a, b, k_tile=k_tile, algo="sequential", fma=fma)
    assert np.array_equal(got.astype(np.float64), ref_sequential(a, b, k_tile, fma=fma))
    got16 = K.matmul(a, b, k_tile=k_tile, acc="fp16", algo="sequential", fma=fma)
    assert np.array_equal(got16.astype(np.float64), ref_sequential(a, b, k_tile, "fp16", fma=fma))


@pytest.mark.parametrize("k_tile", [3, 8])
def test_split_k_equals_reference(k_tile):
    rng = np.random.default_rng(5)
    a, b = _data(rng, "fp16", 3, 29, 3, 3)
    got = K.matmul(a, b, k_tile=k_tile, algo="split_k")
    assert np.array_equal(got.astype(np.float64), ref_split_k(a, b, k_tile))


def test_default_mode_is_sequential_per_contract():
    rng = np.random.default_rng(9)
    a, b = _data(rng, "fp16", 3, 20, 3)
    assert np.array_equal(K.matmul(a, b, k_tile=8), K.matmul(a, b, k_tile=8, algo="sequential"))


def test_modes_differ_and_out_format():
    rng = np.random.default_rng(6)
    a, b = _data(rng, "fp16", 16, 256, 16)
    r = {m: K.matmul(a, b, k_tile=32, algo=m) for m in K.MATMUL_ALGOS}
    assert not np.array_equal(r["sequential"], r["block_fma"])
    o = K.matmul(a, b, k_tile=32, out="fp16", algo="block_fma")
    assert o.dtype == np.float16 and np.array_equal(o, r["block_fma"].astype(np.float16))
    # one K tile covering K: block_fma is the correctly rounded dot product
    full = K.matmul(a[:2], b[:, :2], k_tile=256, algo="block_fma")
    assert np.array_equal(full.astype(np.float64), ref_block_fma(a[:2], b[:, :2], 256))


def test_batched_matmul():
    rng = np.random.default_rng(8)
    a = rng.standard_normal((2, 3, 10)).astype(np.float16)
    b = rng.standard_normal((10, 4)).astype(np.float16)
    for mode in K.MATMUL_ALGOS:
        got = K.matmul(a, b, k_tile=4, algo=mode)
        for i in range(2):
            assert np.array_equal(got[i], K.matmul(a[i], b, k_tile=4, algo=mode))


def test_nonfinite_inputs_follow_ieee():
    a = np.array([[1.0, np.inf], [np.nan, 1.0], [65504.0, 65504.0]], dtype=np.float16)
    b = np.array([[1.0, 0.0], [1.0, 1.0]], dtype=np.float16)
    for m in K.MATMUL_ALGOS:
        r = K.matmul(a, b, k_tile=1, algo=m)
        assert r[0, 0] == np.inf and np.isnan(r[1]).all()
        r16 = K.matmul(a, b, k_tile=2, algo=m, out="fp16")
        assert r16[2, 0] == np.inf  # overflow of fp16 storage


def test_bad_matmul_arguments():
    a = np.ones((2, 3), np.float16)
    b = np.ones((3, 2), np.float16)
    with pytest.raises(ValueError, match=r"k_tile=0.*> 0"):
        K.matmul(a, b, k_tile=0)
    with pytest.raises(ValueError, match=r"algo='tensor'.*sequential.*block_fma.*split_k"):
        K.matmul(a, b, k_tile=2, algo="tensor")
    with pytest.raises(ValueError, match="inner dimensions"):
        K.matmul(a, a, k_tile=2)
    with pytest.raises(ValueError, match=r"^acc='fp12' is not a known format"):
        K.matmul(a, b, k_tile=2, acc="fp12")
    with pytest.raises(TypeError, match=r"^out must be a Format"):
        K.matmul(a, b, k_tile=2, out=3.5)
    with pytest.raises(ValueError, match="24 significant bits"):
        K.matmul(a.astype(np.float64) / 3, b, k_tile=2)


@settings(max_examples=80)
@given(data=st.data())
def test_block_fma_and_split_k_vs_fraction_hypothesis(data):
    """Random shapes, tiles and exponent spreads (ties, cancellation, huge range): the
    certificates never accept a wrong rounding."""
    fmt = data.draw(st.sampled_from(["fp16", "bf16", "fp32"]))
    M, Kd, N = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 24)), data.draw(st.integers(1, 8))
    spread = {"fp16": 5, "bf16": 40, "fp32": 40}[fmt]
    k_tile = data.draw(st.integers(1, 24))
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    a, b = _data(rng, fmt, M, Kd, N, spread)
    if data.draw(st.booleans()) and Kd > 1:  # plant exact cancellation and short values (ties)
        a[:, 1] = -a[:, 0]
        b[1] = b[0]
        b = (np.round(b.astype(np.float32) * 4) / 4).astype(b.dtype)
    acc = data.draw(st.sampled_from(["fp32", "fp16"])) if fmt == "fp16" else "fp32"
    got = K.matmul(a, b, k_tile=k_tile, acc=acc, algo="block_fma")
    assert np.array_equal(got.astype(np.float64), ref_block_fma(a, b, k_tile, acc))
    if acc == "fp32":
        got = K.matmul(a, b, k_tile=k_tile, algo="split_k")
        assert np.array_equal(got.astype(np.float64), ref_split_k(a, b, k_tile))


def test_block_fma_large_shapes_chunked_path(accel):
    """Shapes big enough for several row chunks per K tile: sampled entries equal the
    Fraction reference, and the transposed problem gives the same bits."""
    rng = np.random.default_rng(21)
    a, b = _data(rng, "fp16", 70, 96, 1024, 2)
    got = K.matmul(a, b, k_tile=32, algo="block_fma")
    got_t = K.matmul(np.ascontiguousarray(b.T), np.ascontiguousarray(a.T), k_tile=32, algo="block_fma").T
    assert np.array_equal(got, got_t)
    idx = rng.integers(0, [70, 1024], size=(25, 2))
    for i, j in idx:
        assert got[i, j] == ref_block_fma(a[i:i + 1], b[:, j:j + 1], 32)[0, 0]
    assert np.array_equal(got[7:9], K.matmul(a[7:9], b, k_tile=32, algo="block_fma"))


def test_lowest_set_bit_helpers_agree():
    """The float32 lowest-set-bit helper equals the float64 one and the definition x = odd * 2**e."""
    M = sys.modules["numlab.kernels.tiled_matmul"]
    rng = np.random.default_rng(4)
    codes = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    x = codes.view(np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1.0, 3.0, 2.0**-149, 1.5 * 2.0**-140, np.inf, np.nan])])
    e32 = M._lsb_exp32(x).astype(np.int64)
    with np.errstate(invalid="ignore"):  # signalling-NaN codes among the random bits
        e64 = M._lsb_exp(x.astype(np.float64))
    assert np.array_equal(e32, e64)
    fin = np.isfinite(x) & (x != 0)
    odd = np.ldexp(x[fin].astype(np.float64), -e64[fin])
    assert np.all(np.mod(odd, 2) == 1)
    for dt in (np.float16, ml_dtypes.bfloat16):  # the 16-bit lookup tables, every code
        codes = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
        v = codes.view(dt)
        assert np.array_equal(M._lsb_of_input(v, v.astype(np.float32)), M._lsb_exp32(v.astype(np.float32)))


def _matmul_module():
    return sys.modules["numlab.kernels.tiled_matmul"]


def _count_tile_paths(monkeypatch):
    """Count which per-tile path ran: the certified-exact one or the interval fallback."""
    M = _matmul_module()
    seen = {"exact": 0, "interval": 0}
    orig_exact, orig_interval = M._tile_certified_exact, M._tile_exact_plus

    def exact(*args, **kw):
        r = orig_exact(*args, **kw)
        seen["exact"] += r is not None
        return r

    def interval(*args, **kw):
        seen["interval"] += 1
        return orig_interval(*args, **kw)

    monkeypatch.setattr(M, "_tile_certified_exact", exact)
    monkeypatch.setattr(M, "_tile_exact_plus", interval)
    return seen


def test_block_fma_fp32_midpoint_after_exact_tile_sum(monkeypatch, accel):
    """The tile sum S is exact in float64 but c + S is not, and fl64(c + S) lands on an
    fp32 midpoint: a plain float64 add then cast rounds the wrong way (double
    rounding); the kernel must follow the exact value, up and down, also at the
    overflow threshold (2^128 - 2^103)."""
    seen = _count_tile_paths(monkeypatch)
    u = 2.0**-23
    a = np.array([[1, 0, 2.0**-12, 2.0**-35],           # c = 1,      S = 2^-24 + 2^-70 -> up
                  [1, 2.0**-12, 2.0**-12, -2.0**-35],   # c = 1 + u,  S = 2^-24 - 2^-70 -> down
                  [-1, 0, -2.0**-12, -2.0**-35],        # mirrored signs
                  [-1, -2.0**-12, -2.0**-12, 2.0**-35]], dtype=np.float32)
    b = np.array([[1], [2.0**-11], [2.0**-12], [2.0**-35]], dtype=np.float32)
    got = K.matmul(a, b, k_tile=2, algo="block_fma")[:, 0].astype(np.float64)
    want = np.array([1 + u, 1 + u, -(1 + u), -(1 + u)])
    assert np.array_equal(got, want)
    assert np.array_equal(got, ref_block_fma(a, b, 2)[:, 0])
    c = np.array([1.0, 1 + u, -1.0, -1 - u])
    s = np.array([2.0**-24 + 2.0**-70, 2.0**-24 - 2.0**-70, -(2.0**-24 + 2.0**-70), -(2.0**-24 - 2.0**-70)])
    naive = (c + s).astype(np.float32).astype(np.float64)
    assert not np.any(naive == want)  # the case bites: double rounding is wrong on every row
    fmax = float(np.finfo(np.float32).max)
    a = np.array([[fmax, 0, 2.0**64, -2.0**40], [fmax, 0, 2.0**64, 2.0**40]], dtype=np.float32)
    b = np.array([[1], [0], [2.0**39], [2.0**20]], dtype=np.float32)
    with np.errstate(over="ignore"):
        got = K.matmul(a, b, k_tile=2, algo="block_fma")[:, 0]
        naive = np.float32(np.float64(fmax) + (2.0**103 - 2.0**60))
    assert got[0] == np.float32(fmax) and naive == np.inf  # just below the threshold: stays finite
    assert got[1] == np.inf
    assert seen["interval"] == 0 and seen["exact"] == 4  # all on the certified path


@pytest.mark.parametrize("fmt,spread,acc,n_certified", [
    ("fp16", 3, "fp32", 3), ("fp16", 6, "fp32", 3), ("fp16", 12, "fp32", 0), ("bf16", 2, "fp32", 2),
    ("bf16", 20, "fp32", 0), ("fp32", 8, "fp32", 0), ("fp16", 3, "fp16", 3), ("bf16", 4, "bf16", 3)])
def test_block_fma_certified_path_equals_interval_path(fmt, spread, acc, n_certified, monkeypatch):
    """Two independent certifications give the same bits: the exact-sum certificate
    (with its gathered fallback entries) and the interval/grid one it replaced;
    sampled entries also equal the Fraction reference.  ``n_certified`` of the 3 K
    tiles take the exact-sum path (wide exponent spreads and 24-bit fp32 values
    cannot be certified exact and use the interval path)."""
    M = _matmul_module()
    rng = np.random.default_rng(spread)
    a, b = _data(rng, fmt, 40, 48, 36, spread)
    a[3, 5] = b[7, 2] = 2.0**-24 if fmt == "fp16" else 2.0**-100  # a tiny value in one row and column
    for mode in ("block_fma", "split_k"):
        with monkeypatch.context() as mp:
            seen = _count_tile_paths(mp)
            got = K.matmul(a, b, k_tile=16, acc=acc, algo=mode)
            assert seen["exact"] == n_certified and seen["interval"] == 3 - n_certified
        with monkeypatch.context() as mp:
            mp.setattr(M, "_tile_certified_exact", lambda *args, **kw: None)
            old = K.matmul(a, b, k_tile=16, acc=acc, algo=mode)
        assert np.array_equal(got, old, equal_nan=True)
    got = K.matmul(a, b, k_tile=16, acc=acc, algo="block_fma")
    for i, j in [(3, 2), (0, 0)] + [tuple(x) for x in rng.integers(0, [40, 36], size=(6, 2))]:
        assert got[i, j] == ref_block_fma(a[i:i + 1], b[:, j:j + 1], 16, acc)[0, 0]


def test_block_fma_uncertified_entries_are_gathered_and_right():
    """A row and a column holding an fp16 subnormal (lowest set bit 2^-24) next to
    values near 1: their pair is not certified exact (kt max|a| max|b| 2^48 > 2^52)
    and goes through the gathered interval certificate; every entry equals the
    Fraction reference."""
    M = _matmul_module()
    rng = np.random.default_rng(12)
    a = (1 + rng.integers(0, 1024, (6, 16)) / 1024).astype(np.float16)
    b = (1 + rng.integers(0, 1024, (16, 5)) / 1024).astype(np.float16)
    a[2, 3] = b[9, 4] = 2.0**-24
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    la = M._lsb_of_input(a, a.astype(np.float32))
    lb = M._lsb_of_input(b, b.astype(np.float32))
    ra, rb, *_ = M._exact_tile_factors(a64, b64, la, lb)
    fails = ~(np.multiply.outer(ra, rb) <= 2.0**52)
    assert fails[2, 4] and fails.sum() == 1
    got = K.matmul(a, b, k_tile=16, algo="block_fma")
    assert np.array_equal(got.astype(np.float64), ref_block_fma(a, b, 16))
    # an uncertified sum whose float64 value is wrong where it matters:
    # 64 + 2^-18 + 2^-48 rounds in float64 to the fp32 midpoint 64 + 2^-18 (whose tie
    # goes to 64), while the exact sum rounds up to 64 + 2^-17
    # (embedded in an 8 x 8 product of short values, so only entry (0, 0) is uncertified)
    a = rng.integers(-4, 5, (8, 3)).astype(np.float16) / 2
    b = rng.integers(-4, 5, (3, 8)).astype(np.float16) / 2
    a[0] = b[:, 0] = [8, 2.0**-9, 2.0**-24]
    assert np.float32(64 + 2.0**-18 + 2.0**-48) == 64  # the float64 route is wrong here
    for dt in (np.float16, np.float32):
        got = K.matmul(a.astype(dt), b.astype(dt), k_tile=3, algo="block_fma")
        assert got[0, 0] == np.float32(64 + 2.0**-17)
        assert np.array_equal(got.astype(np.float64), ref_block_fma(a, b, 3))


def test_batched_b_uses_the_interval_path_and_agrees():
    """A batched right operand (..., K, N) takes the whole-tile path; each batch equals
    the 2-D certified-path result."""
    rng = np.random.default_rng(13)
    a = rng.standard_normal((2, 5, 20)).astype(np.float16)
    b = rng.standard_normal((2, 20, 3)).astype(np.float16)
    for mode in ("block_fma", "split_k"):
        got = K.matmul(a, b, k_tile=8, algo=mode)
        for i in range(2):
            assert np.array_equal(got[i], K.matmul(a[i], b[i], k_tile=8, algo=mode))


@pytest.mark.parametrize("mode", K.MATMUL_ALGOS)
@pytest.mark.parametrize("sa,sb", [((0, 4), (4, 3)), ((3, 4), (4, 0)), ((3, 0), (0, 2)), ((2, 0, 4), (4, 3))])
def test_empty_shapes(sa, sb, mode):
    """Empty products: numpy's shape, +0 where K = 0 (an empty sum), the out container."""
    a, b = np.ones(sa, np.float16), np.ones(sb, np.float16)
    r = K.matmul(a, b, k_tile=2, algo=mode, out="fp16")
    assert r.shape == np.matmul(a, b).shape and r.dtype == np.float16
    assert np.all(r == 0) and not np.any(np.signbit(r))


@pytest.mark.parametrize("acc_rounding", ["rtz", "up", "down", "odd"])
def test_block_fma_directed_accumulator_modes(acc_rounding, monkeypatch):
    """Directed rounding of the accumulator: certified path = interval path, and a
    small case equals the Fraction reference rounded in that mode."""
    rng = np.random.default_rng(17)
    a, b = _data(rng, "fp16", 24, 40, 20, 2)
    got = {}
    for mode in ("block_fma", "split_k"):
        got[mode] = K.matmul(a, b, k_tile=8, algo=mode, acc_rounding=acc_rounding)
        with monkeypatch.context() as mp:
            mp.setattr(_matmul_module(), "_tile_certified_exact", lambda *args, **kw: None)
            assert np.array_equal(got[mode], K.matmul(a, b, k_tile=8, algo=mode, acc_rounding=acc_rounding))
    for i, j in [(0, 0), (5, 7), (23, 19)]:
        c = Fraction(0)
        for s in range(0, 40, 8):
            t = sum((Fraction(float(a[i, k])) * Fraction(float(b[k, j])) for k in range(s, s + 8)), Fraction(0))
            c = Fraction(R.round_to_grid(c + t, "fp32", acc_rounding)) if c + t != 0 else Fraction(0)
        assert float(got["block_fma"][i, j]) == float(c)


def test_compiled_post_blas_pass_equals_numpy_ops():
    """numlab.kernels._accel.add_round32 against the numpy operations it replaces
    (float64 add, float32 cast, midpoint bit test) on random sums, constructed fp32
    midpoints, the overflow threshold, inf and NaN; and block_fma really uses it."""
    pytest.importorskip("numba", reason="the compiled fast path needs numba (a default dependency; absent where no wheel exists)")
    from numlab.kernels import _accel

    rng = np.random.default_rng(11)
    sm = rng.standard_normal((64, 33)) * np.exp2(rng.integers(-40, 40, (64, 33)))
    c = rng.standard_normal((64, 33)).astype(np.float32)
    mid = np.float64(1 + 2.0**-24)  # an fp32 midpoint
    sm[0, :4] = [mid - 1, -(mid - 1), 2.0**-24, 2.0**-24 + 2.0**-40]
    c[0, :4] = [1, -1, 1, 1]
    fmax = float(np.finfo(np.float32).max)
    sm[1, :4] = [fmax + 2.0**103, fmax + 2.0**102, np.inf, np.nan]
    c[1, :4] = 0
    out, flag = np.empty((64, 33), np.float32), np.empty((64, 33), bool)
    if _accel.kernels() is None:
        pytest.skip("NUMLAB_ACCEL=0: the compiled kernels are switched off")
    n = _accel.add_round32(sm, c, out, flag)
    with np.errstate(over="ignore", invalid="ignore"):
        v = sm + c.astype(np.float64)
        exp = v.astype(np.float32)
    assert_same_bits(out, exp)
    want_flag = (v.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    np.testing.assert_array_equal(flag, want_flag)
    assert n == int(want_flag.sum()) >= 2 and flag[0, 0] and flag[0, 1] and not flag[0, 3]

    calls = []
    orig = _accel.add_round32

    def counting(*a):
        calls.append(1)
        return orig(*a)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_accel, "add_round32", counting)
        a, b = _data(rng, "fp16", 300, 64, 300)
        got = K.matmul(a, b, k_tile=16, algo="block_fma")
    assert len(calls) == 3  # tiles 2..4 (the first adds to zero: a plain cast)
    i, j = rng.integers(0, 300, 2)
    assert got[i, j] == ref_block_fma(a[i:i + 1], b[:, j:j + 1], 16)[0, 0]
