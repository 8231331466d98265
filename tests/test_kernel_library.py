"""The independent kernel library (numlab.testing.kernels).

* every correct kernel stays within a generous first-order error bound of the
  fp64 reference (``numlab.run(..., mode="reference")``): about an ulp of S
  at the output plus 4x a worst-case fp32 (and, in eager chains, per-operator
  S) propagation term, in fp16/bf16/fp32 on normal, shifted-mean and uniform
  inputs, at two sizes per graph;
* every broken kernel is worse than every correct kernel of its mode (the
  largest error measured in units of that bound) on some input kind, in each
  format it lists: its bug is real;
* outputs have S's dtype and the graph's shape; names are unique; the
  library has >= 8 correct kernels per graph and >= 8 bug kinds.
"""

from __future__ import annotations

import ast
import functools
import math

import numpy as np
import pytest
from _oracles import assert_same_bits

import numlab
from numlab import zoo
from numlab.formats import get_format, ulp
from numlab.rounding import round_to
from numlab.testing import kernels as K

FMTS = ("fp16", "bf16", "fp32")
INPUT_KINDS = ("normal", "shifted_mean", "uniform")
U32 = 2.0**-24
# the first size is the one the broken kernels are checked at: reductions not a
# multiple of 32 (dropped tails, padded lanes), head_dim not a power of 4
# (1/sqrt(12) is 0.7 fp16 half-ulps from the fp16 grid); the second is the zoo's default shape family
SIZES = {
    "layernorm": [dict(batch=8, hidden=200), dict(batch=8, hidden=256)],
    "rmsnorm": [dict(batch=8, hidden=200), dict(batch=8, hidden=256)],
    "softmax": [dict(batch=8, n=200), dict(batch=8, n=256)],
    "gelu_mlp": [dict(batch=8, d_in=72, d_hidden=64), dict()],
    "attention_scores": [dict(batch=1, heads=2, seq=32, head_dim=12), dict()],
}


# ---------------------------------------------------------------------------
# cases: inputs (values of S), the fp64 reference and a per-element tolerance
# ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _case(graph, size_idx, fmt, kind, seed=0):
    g = zoo.get_model(graph, **SIZES[graph][size_idx])
    raw = zoo.make_inputs(g, kind=kind, seed=seed)
    xs = {k: np.asarray(round_to(v, fmt), dtype=np.float64) for k, v in raw.items()}
    out = K.OUTPUTS[graph]
    ref = numlab.run(g, xs, mode="reference", fmt=fmt).outputs[out]
    tol = {m: _tolerance(graph, xs, ref, fmt, m) for m in ("eager", "fused")}
    dt = get_format(fmt).dtype
    return g, {k: v.astype(dt) for k, v in xs.items()}, np.asarray(ref, np.float64), tol


def _h(v, fmt):
    """Half an ulp of S at v (the RNE rounding error), float64."""
    return 0.5 * ulp(np.abs(v), fmt)


def _softmax64(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _tolerance(graph, xs, ref, fmt, mode):
    """A generous first-order bound of |y - ref| for any kernel of the
    contract: ``ulp_S(ref)`` (output rounding, with room for a crossed binade)
    plus 4x the worst-case fp32 error (any summation order: gamma_n) and, in
    eager chains, the propagated S roundings of the intermediates."""
    out = ulp(np.abs(ref), fmt)
    if graph == "layernorm":
        x, gm, bt = xs["x"], xs["gamma"], xs["beta"]
        n = x.shape[-1]
        sd = x.std(-1, keepdims=True)
        amax = np.abs(x).max(-1, keepdims=True)
        e32 = (n + 10) * U32 * (np.abs(gm) * amax / sd + np.abs(ref - bt) + np.abs(bt))
        return out + 4 * e32
    if graph == "rmsnorm":
        n = xs["x"].shape[-1]
        return out + 4 * (n + 10) * U32 * np.abs(ref)
    if graph == "softmax":
        x = xs["x"]
        n = x.shape[-1]
        spread = (x.max(-1, keepdims=True) - x.min(-1, keepdims=True))
        return out + 4 * (n + 10 + spread) * U32 * np.abs(ref)
    if graph == "gelu_mlp":
        x, w, b = xs["x"], xs["w"], xs["b"]
        kdim = x.shape[-1]
        mm = x @ w
        z = mm + b
        az = np.abs(z)
        dz = (kdim + 2) * U32 * (np.abs(x) @ np.abs(w) + np.abs(b))
        eg = 8 * U32 * az * (1 + az + 0.05 * az**3)  # fp32 gelu (tanh or sigmoid form)
        if mode == "eager":
            g = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
            dz = dz + 2 * (_h(mm, fmt) + _h(z, fmt))
            eg = eg + 2 * _h(g, fmt)
        return out + 4 * (0.5 * (1.13 * dz + eg) + U32 * np.abs(ref))
    if graph == "attention_scores":
        q, k = xs["q"], xs["k"]
        d = q.shape[-1]
        sc = 1 / math.sqrt(d)
        qk = q @ np.swapaxes(k, -1, -2)
        s = qk * sc
        n = s.shape[-1]
        spread = s.max(-1, keepdims=True) - s.min(-1, keepdims=True)
        ds = 4 * (sc * (d + 2) * U32 * (np.abs(q) @ np.abs(np.swapaxes(k, -1, -2)))
                  + 2 * U32 * np.abs(s))
        if mode == "eager":  # a full ulp of S for each rounded score (twice the RNE error)
            ds = ds + 2 * (sc * _h(qk, fmt) + _h(s, fmt))
        rel = ds.max(-1, keepdims=True) + ds + 4 * (n + 10 + spread) * U32
        # p_i' / p_i lies within exp(+-(ds_i + max_j ds_j)): not first order
        # where eager's rounded scores are off by more than 1 (shifted means,
        # fp16/bf16: scores ~5000); a probability is never off by more than 1
        return np.minimum(out + np.expm1(rel) * np.abs(ref), 1.0)
    raise AssertionError(graph)


def _contract(kernel):
    return "fused" if kernel.mode == "fused" else "eager"  # "both": the two coincide


@functools.lru_cache(maxsize=None)
def _score(name, size_idx, fmt, kind):
    """max |y - ref| / tol of one kernel on one case (inf for NaN/inf)."""
    kern = K.CORRECT.get(name) or K.BROKEN[name]
    _, xs, ref, tol = _case(kern.graph, size_idx, fmt, kind)
    with np.errstate(all="ignore"):
        y = kern(xs, fmt)[K.OUTPUTS[kern.graph]]
        err = np.abs(np.asarray(y, np.float64) - ref) / tol[_contract(kern)]
    return float(np.max(np.where(np.isfinite(err), err, np.inf)))


# ---------------------------------------------------------------------------
# the library's shape
# ---------------------------------------------------------------------------
def test_inventory():
    assert not set(K.CORRECT) & set(K.BROKEN)
    for pool, correct in ((K.CORRECT, True), (K.BROKEN, False)):
        for name, k in pool.items():
            assert k.name == name and k.correct is correct
            assert k.graph in K.GRAPHS and name.startswith(k.graph + ".")
            assert k.mode in ("eager", "fused", "both")
            assert k.doc and set(k.formats) <= set(FMTS) and k.formats
            assert (k.bug in K.BUG_KINDS) if not correct else k.bug == ""
    for graph in K.GRAPHS:
        ks = K.kernels_for(graph, correct=True)
        assert len(ks) >= 8, graph
        if graph in ("gelu_mlp", "attention_scores"):  # both contracts, >= 8 each
            for mode in ("eager", "fused"):
                assert sum(k.mode == mode for k in ks) >= 8, (graph, mode)
        assert K.kernels_for(graph, correct=False), graph
        assert K.kernels_for(graph) == ks + K.kernels_for(graph, correct=False)
    assert len({k.bug for k in K.BROKEN.values()}) >= 8
    with pytest.raises(ValueError, match="graph"):
        K.kernels_for("swiglu")


def test_no_engine_imports():
    """Only numpy, the standard library and numlab's formats/rounding: the
    kernels are independent of the engine they are used to check."""
    tree = ast.parse(open(K.__file__).read())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mods.add("." * node.level + (node.module or ""))
    assert mods <= {"__future__", "math", "collections.abc", "dataclasses", "numpy",
                    "..formats", "..rounding"}, mods


@pytest.mark.parametrize("graph", K.GRAPHS)
def test_fp32_kernels_store_float32(graph, monkeypatch):
    """No silent float64 promotion: every value an fp32-inside kernel rounds
    to S is a float32 array (fp64 variants hand over float64)."""
    seen = []
    store = K._store

    def spy(v, fmt, rounding="rne"):
        seen.append(np.asarray(v).dtype)
        return store(v, fmt, rounding)

    monkeypatch.setattr(K, "_store", spy)
    _, xs, _, _ = _case(graph, 0, "fp16", "normal")
    for k in K.kernels_for(graph, correct=True):
        seen.clear()
        k(xs, "fp16")
        assert seen, k.name
        want = np.float64 if "fp64" in k.name else np.float32
        assert all(d == want for d in seen), (k.name, seen)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("graph", K.GRAPHS)
def test_dtype_and_shape(graph, fmt):
    g, xs, ref, _ = _case(graph, 0, fmt, "normal")
    out = K.OUTPUTS[graph]
    dt = get_format(fmt).dtype
    xs32 = {k: v.astype(np.float32) for k, v in xs.items()}
    for k in K.kernels_for(graph):
        for inputs in (xs, xs32):  # S-dtype and float32 inputs alike
            y = k(inputs, fmt)
            assert set(y) == {out}, k.name
            assert y[out].dtype == dt and y[out].shape == ref.shape == g.shape(out), k.name
    with pytest.raises(ValueError, match="fmt"):
        K.kernels_for(graph)[0](xs32, "fp8_e4m3")


def test_float32_and_s_inputs_agree():
    _, xs, _, _ = _case("layernorm", 0, "bf16", "normal")
    k = K.CORRECT["layernorm.fp32_welford"]
    a = k(xs, "bf16")["y"]
    b = k({n: v.astype(np.float32) for n, v in xs.items()}, "bf16")["y"]
    assert_same_bits(a, b)


# ---------------------------------------------------------------------------
# correct kernels: within the bound; broken ones: worse than every correct one
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("graph", K.GRAPHS)
def test_correct_kernels_close_to_reference(graph, fmt):
    bad = []
    for size_idx in range(len(SIZES[graph])):
        for kind in INPUT_KINDS:
            for k in K.kernels_for(graph, correct=True):
                q = _score(k.name, size_idx, fmt, kind)
                if not q <= 1.0:
                    bad.append((k.name, SIZES[graph][size_idx], kind, round(q, 3)))
    assert not bad, bad


def _honours(correct_kernel, broken_kernel):
    return broken_kernel.mode == "both" or correct_kernel.mode in (broken_kernel.mode, "both")


@pytest.mark.parametrize("name", sorted(K.BROKEN))
def test_broken_kernel_is_worse_than_every_correct_one(name):
    b = K.BROKEN[name]
    peers = [k for k in K.kernels_for(b.graph, correct=True) if _honours(k, b)]
    assert peers
    missing = []
    for fmt in b.formats:
        worse = []
        for kind in INPUT_KINDS:
            best_correct = max(_score(k.name, 0, fmt, kind) for k in peers)
            if _score(name, 0, fmt, kind) > 1.1 * best_correct:
                worse.append(kind)
        if not worse:
            missing.append(fmt)
    assert not missing, f"{name}: no worse than the correct kernels in {missing}"


def test_fma_is_one_rounding():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    from fractions import Fraction
    got = K._fma32(a, b, c)
    for i in range(0, 4096, 97):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        lo = np.float32(float(exact))  # candidate, then check it is the nearest
        cands = [lo, np.nextafter(lo, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf))]
        best = min(cands, key=lambda v: (abs(Fraction(float(v)) - exact),
                                         int(np.asarray(v).view(np.uint32)) & 1))
        assert got[i] == best, i


@pytest.mark.parametrize("red", sorted(K.REDUCERS))
def test_reducers_sum(red):
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 31, 32, 33, 200):
        x = rng.standard_normal((3, n)).astype(np.float32)
        s = K.REDUCERS[red](x)
        assert s.dtype == np.float32 and s.shape == (3,)
        np.testing.assert_allclose(s, x.astype(np.float64).sum(-1), rtol=0, atol=n * 1e-6 * 4)
