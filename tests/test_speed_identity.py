"""The end-to-end fast paths move no bit.

Every zoo model x fp16/bf16 x eager/fused/emulated_casts (and fused with
internals dumped) runs twice: once as shipped, once through the unchanged
reference path kept here as the oracle:

* ``NUMLAB_ACCEL=0``: no compiled kernel anywhere (reduction.welford's numpy loop,
  the numpy reductions and rounding);
* ``_read_back``: the stored values widened into a new array (``c.astype``), not
  written back into the kernel's own buffer;
* ``to_storage``: inputs always rounded by ``round_to`` (no exact-cast shortcut).

The sha256 of every dumped value, output and fingerprint must agree, and so
must the inputs (a changed input would make the comparison meaningless).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from _oracles import assert_same_bits, same_bits_mask

from numlab import zoo
from numlab.execute import executor as X
from numlab.execute import run
from numlab.execute import values as V
from numlab.formats import FP32, get_format
from numlab.rounding import round_to

FMTS = ("fp16", "bf16")
RUNS = (("eager", False), ("fused", False), ("fused", True), ("emulated_casts", False))


def _to_storage_oracle(a, S):
    """to_storage before the exact-cast shortcut (the pre-change algorithm)."""
    if a.dtype.kind in "iu":
        return a
    if S.p > 24:
        return a.astype(np.float64)
    if S.dtype is not None and a.dtype == S.dtype:
        return a.astype(np.float32)
    if a.dtype != np.float64 and a.dtype != np.float32:
        a = a.astype(np.float32)
    if S == FP32:
        return a.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(round_to(a, S), dtype=np.float32)


def _digest(res) -> str:
    h = hashlib.sha256(res.fingerprint.encode() if isinstance(res.fingerprint, str)
                       else repr(res.fingerprint).encode())
    for group in (res.values, res.outputs):
        for k in sorted(group):
            a = np.ascontiguousarray(np.asarray(group[k]))
            h.update(f"{k}|{a.dtype}|{a.shape}|".encode())
            h.update(a.tobytes())
    h.update(repr(sorted(res.nonfinite.items())).encode())
    h.update(repr(list(res.internals)).encode())
    return h.hexdigest()


def _cases():
    graphs = {name: zoo.get_model(name) for name in zoo.MODELS}
    graphs["layernorm_64x1024"] = zoo.layernorm(batch=64, hidden=1024)  # the claims bench's shape
    return graphs


def _all_digests(graphs, kind):
    out = {}
    for gname, g in graphs.items():
        for fmt in FMTS:
            # raw float64 inputs (to_storage rounds) and inputs already in S (the shortcut)
            for pre in (None, fmt):
                x = zoo.make_inputs(g, kind=kind, seed=3, fmt=pre)
                for mode, internals in RUNS:
                    r = run(g, x, mode=mode, fmt=fmt, keep_internals=internals)
                    out[(gname, fmt, pre, mode, internals)] = _digest(r)
    return out


@pytest.mark.parametrize("kind", ["normal", "near_overflow"])
def test_fast_paths_are_bit_identical_to_the_reference_path(monkeypatch, kind):
    graphs = _cases()
    fast = _all_digests(graphs, kind)
    with monkeypatch.context() as mp:
        mp.setenv("NUMLAB_ACCEL", "0")
        mp.setattr(X, "_read_back", lambda v, c, node, vals: c.astype(np.float32))
        mp.setattr(X, "to_storage", _to_storage_oracle)
        slow = _all_digests(graphs, kind)
    assert len(fast) == len(graphs) * len(FMTS) * 2 * len(RUNS)
    diff = [k for k in fast if fast[k] != slow[k]]
    assert not diff, f"fast path moved bits in {diff[:5]}"


def test_to_storage_shortcut_matches_round_to_on_hard_values():
    rng = np.random.default_rng(7)
    for name in FMTS:
        S = get_format(name)
        exact = np.asarray(round_to(rng.standard_normal(4096) * 100, S), dtype=np.float64)
        specials = np.array([0.0, -0.0, np.inf, -np.inf, S.max, -S.max, S.min_subnormal if hasattr(S, "min_subnormal")
                             else 2.0 ** -24, 65504.0, 65520.0, 1e300, 5e-324, np.nan])
        for a in (exact, np.concatenate([exact, specials]), exact + 2.0 ** -40,
                  exact.astype(np.float32), np.concatenate([exact, [np.nan]])):
            got, ref = V.to_storage(a, S), _to_storage_oracle(a, S)
            assert got.dtype == ref.dtype == np.float32
            assert_same_bits(got, ref)


def test_read_back_writes_into_the_kernel_buffer_only_when_fresh():
    g = zoo.layernorm(batch=4, hidden=8)
    node = g.nodes[-1]
    v = np.arange(32, dtype=np.float32).reshape(4, 8) / 3
    c = v.astype(np.float16)
    other = {"a": np.zeros(3, np.float32)}
    r = X._read_back(v, c, node, other)
    assert r is v and np.array_equal(r, c.astype(np.float32))
    # v aliases a held value: a new array, the held value untouched
    held = np.arange(32, dtype=np.float32).reshape(4, 8) / 3
    keep = held.copy()
    r = X._read_back(held, held.astype(np.float16), node, {"x": held})
    assert r is not held and np.array_equal(held, keep)
    # a view (not owning its data) is never written
    base = np.arange(64, dtype=np.float32) / 3
    view = base[:32].reshape(4, 8)
    r = X._read_back(view, view.astype(np.float16), node, {})
    assert r is not view and np.array_equal(base, np.arange(64, dtype=np.float32) / 3)


def _fma_cases(rng):
    n = (300, 257)
    k, m = rng.integers(-4096, 4096, n), rng.integers(-4096, 4096, n)
    a = (1 + k * 2.0**-12).astype(np.float32)  # products with bits down to 2^-24:
    b = (1 + m * 2.0**-12).astype(np.float32)  # many sums sit on an fp32 midpoint
    yield "midpoints", a, b, np.zeros(n, np.float32)
    # the float64 sum lands on a midpoint the exact value is not on (TwoSum decides)
    yield "near-midpoints", a, b, (rng.choice([-1, 1], n) * 2.0**-60 * rng.integers(1, 8, n)).astype(np.float32)
    yield "broadcast c", a, b, (rng.choice([-1.0, 1.0], (1, n[1])) * 2.0**-60).astype(np.float32)
    s = (rng.standard_normal(n) * 2.0**-70).astype(np.float32)
    yield "subnormal results", s, (rng.standard_normal(n) * 2.0**-60).astype(np.float32), \
        (rng.standard_normal(n) * 2.0**-128).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    x[3, 5], x[7, 1] = np.nan, np.inf
    yield "nan/inf", x, s, (rng.standard_normal(n) * 2.0**-132).astype(np.float32)
    yield "overflow", rng.standard_normal(n).astype(np.float32) * np.float32(1e30), \
        rng.standard_normal(n).astype(np.float32) * np.float32(1e10), rng.standard_normal(n).astype(np.float32)
    yield "negated products, c = +0", a, -a, np.zeros(n, np.float32)


def test_compiled_fma_chunks_equal_the_numpy_path(monkeypatch):
    from numlab.kernels import _accel
    from numlab.kernels import scalar as S

    if _accel.kernels() is None:
        pytest.skip("numba not installed or NUMLAB_ACCEL=0: only the numpy path runs")
    calls = []
    orig = S._fma_chunk_compiled
    monkeypatch.setattr(S, "_fma_chunk_compiled", lambda *a: calls.append(1) or orig(*a))
    for name, a, b, c in _fma_cases(np.random.default_rng(1)):
        fast = S.fma_f32(a, b, c)
        with monkeypatch.context() as mp:
            mp.setenv("NUMLAB_ACCEL", "0")
            ref = S.fma_f32(a, b, c)
        assert_same_bits(fast, ref, what=name)
        # independent check away from NaN: the exact value rounded once (float64 holds
        # a*b exactly; where |a*b| dwarfs c the sum is exact too only if c is tiny,
        # so compare only where fl64(a*b + c) is exact: c == 0)
        if not np.any(c):
            np.testing.assert_array_equal(fast, (a.astype(np.float64) * b).astype(np.float32), err_msg=name)
    assert calls, "the compiled chunk path never ran"


def test_chunked_count_stored_finds_every_nan_and_inf():
    S = get_format("fp16")
    c = np.ones(3 * (1 << 16) + 5, np.float16)
    assert V.count_stored(c, S) == (0, 0)
    for pos in (0, 1 << 16, len(c) - 1):
        d = c.copy()
        d[pos] = np.inf
        assert V.count_stored(d, S) == (0, 1)
        d[pos - 1] = np.nan
        d[5] = -np.inf
        assert V.count_stored(d, S) == (1, 2)
    big = np.full((1 << 16) + 1, 65504, np.float16)  # finite codes just below the mask
    assert V.count_stored(big, S) == (0, 0)


@pytest.mark.parametrize("accel", ["1", "0"])
def test_fma_f32_subnormal_tie_is_exact_with_a_nan_in_the_chunk(monkeypatch, accel):
    """a*b + c lands exactly on an fp32-subnormal tie in float64 while the exact value
    lies just below it (A*B = 3*2^45 - 3253, hand-found): the exact path must redo it
    even when a NaN sits elsewhere in the chunk (a min() over the chunk hid it)."""
    from fractions import Fraction as F

    from numlab.kernels.scalar import fma_f32
    monkeypatch.setenv("NUMLAB_ACCEL", accel)
    A, B = 8390281, 12580403
    assert A * B == 3 * 2**45 - 3253
    a = np.float32(A * 2.0**-98)
    b = np.float32(B * 2.0**-97)
    c = np.float32(2.0**-127)
    exact = F(float(a)) * F(float(b)) + F(float(c))  # just below (2^23 + 1.5) * 2^-149
    assert exact < (2**22 + F(3, 2)) * F(2) ** -149 and float(exact) == (2**22 + 1.5) * 2.0**-149
    want = np.float32((2**22 + 1) * 2.0**-149)  # round down (a float64 sum rounds to the tie, then up)
    aa = np.full((4, 64), a, np.float32)
    aa[0, 0] = np.nan
    got = fma_f32(aa, np.full_like(aa, b), np.full_like(aa, c))
    assert np.isnan(got[0, 0])
    assert same_bits_mask(got.ravel()[1:], want).all()
