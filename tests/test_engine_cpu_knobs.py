"""The engine's CPU-kernel pieces against references written here: the scalar-loop
mask of ``at::parallel_for`` chunks (``numlab.kernels.engine.tail_mask``), the
``add_alpha`` kernel (fp32 with and without FMA; ATen's reduced-float scalar loop
on fp16), the scalar loop of a ``scalar_tail`` operator on a 16-bit S, and a
node's ``storage`` meta attribute."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, same_bits

from numlab import kernels as K
from numlab.execute import run
from numlab.graph import Graph, Node
from numlab.kernels import engine as E
from numlab.kernels.libm import fma32

H = K.KernelSpec.handwritten()


def _tail_ref(numel, step, grain, threads):
    """The scalar-loop elements, element by element in plain Python: the chunks of
    ``at::parallel_for`` (one chunk if ``numel < grain`` or one thread; else ``nt =
    min(threads, ceil(numel / grain))`` chunks of ``ceil(numel / nt)`` elements, the
    last one shorter), and in each chunk its last ``len mod step`` elements."""
    out = [False] * numel
    if numel < grain or threads <= 1:
        chunks = [(0, numel)]
    else:
        nt = min(threads, (numel + grain - 1) // grain)
        size = (numel + nt - 1) // nt
        chunks = []
        lo = 0
        while lo < numel:
            chunks.append((lo, min(lo + size, numel)))
            lo += size
    for lo, hi in chunks:
        n_tail = (hi - lo) % step
        for i in range(hi - n_tail, hi):
            out[i] = True
    return out


def test_tail_mask_matches_the_chunk_rule_exhaustively():
    for numel, step, grain, threads in itertools.product(range(0, 41), (1, 2, 3, 4, 8, 16),
                                                         (1, 2, 5, 7, 16, 64), (1, 2, 3, 4, 5)):
        got = E.tail_mask(numel, step, grain, threads)
        assert got.dtype == bool and got.shape == (numel,)
        assert got.tolist() == _tail_ref(numel, step, grain, threads), (numel, step, grain, threads)


def test_tail_mask_examples_written_out():
    # one chunk of 10, step 4: the last 10 mod 4 = 2
    assert np.flatnonzero(E.tail_mask(10, 4, 32768, 8)).tolist() == [8, 9]
    # 10 elements, grain 3, 2 threads: two chunks of 5, each with a tail of 1
    assert np.flatnonzero(E.tail_mask(10, 4, 3, 2)).tolist() == [4, 9]
    # 3 threads, grain 4: ceil(10/4) = 3 chunks of 4, 4, 2 -> tails of 0, 0, 2
    assert np.flatnonzero(E.tail_mask(10, 4, 4, 3)).tolist() == [8, 9]
    # a step dividing every chunk: no scalar loop
    assert not E.tail_mask(64, 8, 16, 4).any()


@pytest.mark.parametrize("S,doubled", [("fp32", False), ("fp16", True), ("bf16", True)])
def test_ctx_tail_mask_doubles_the_step_for_16_bit_storage(S, doubled):
    sp = H.replace(loop_step=16, grain_size=100, threads=3)
    step = 32 if doubled else 16
    got = sp.ctx(S).tail_mask((7, 46))  # 322 elements, row-major flat
    n = 7 * 46
    assert got.shape == (7, 46)
    assert got.ravel().tolist() == _tail_ref(n, step, 100, 3)
    # an explicit step overrides; a shape whose chunks divide evenly runs no scalar loop
    assert sp.ctx(S).tail_mask((n,), step=5).tolist() == _tail_ref(n, 5, 100, 3)
    assert sp.ctx(S).tail_mask((4, step * 3 * 2)) is None
    assert H.ctx(S).tail_mask((n,)) is None  # loop_step 0: no scalar loop


def _rng(k):
    return np.random.default_rng(2000 + k)


@pytest.mark.parametrize("alpha", [0.7, -1.3, 3.0, 1e-3])
def test_add_alpha_fp32_kernel_fma_and_two_roundings(alpha):
    r = _rng(1)
    x = r.standard_normal(5000).astype(np.float32)
    y = (r.standard_normal(5000) * 10).astype(np.float32)
    a32 = np.float32(alpha)  # "muls": the scalar held in fp32, nearest even
    got_fma = np.asarray(E.add_alpha(H.replace(fma=True).ctx("fp32"), x, y, alpha=alpha), np.float32)
    assert_same_bits(got_fma, fma32(y, np.full_like(y, a32), x), what="fma")
    got_two = E.add_alpha(H.ctx("fp32"), x, y, alpha=alpha)
    assert_same_bits(np.asarray(got_two, np.float32), (y * a32) + x, what="two roundings")
    # the single rounding shows on these inputs
    assert not same_bits(got_fma, got_two)
    # a 16-bit alpha_step does not touch an fp32 kernel
    assert_same_bits(E.add_alpha(H.replace(alpha_step=0).ctx("fp32"), x, y, alpha=alpha), got_two)


def _add_alpha_graph(n, alpha):
    return Graph({"x": (n,), "y": (n,)}, [Node("out", "add_alpha", ("x", "y"), {"alpha": alpha})], ["out"])


@pytest.mark.parametrize("broadcast", [{"storage_scalars": ("add_alpha",)}, {"scalar_mul": "broadcast"}])
@pytest.mark.parametrize("alpha", [0.7, -0.3, 2.5])
def test_add_alpha_fp16_scalar_loop_computes_in_fp16(broadcast, alpha):
    n = 3 * 64 + 29  # alpha_step 32: the last 221 mod 32 = 29 elements run the scalar loop
    r = _rng(2)
    x = r.standard_normal(n).astype(np.float16)
    y = r.standard_normal(n).astype(np.float16)
    sp = H.replace(alpha_step=32, **broadcast)
    got = run(_add_alpha_graph(n, alpha), {"x": x, "y": y}, mode="eager", fmt="fp16", kernels=sp).output
    a16 = np.float16(alpha)
    tail = np.arange(n) >= n - 29
    # the scalar loop: fl16(x + fl16(y * fl16(alpha))), numpy's float16 operations
    assert_same_bits(got[tail], x[tail] + y[tail] * a16, what="scalar loop")
    # the vector loop: fp32 (y * fl16(alpha) is exact in fp32), one store to fp16
    vec = ((y.astype(np.float32) * np.float32(a16)) + x.astype(np.float32)).astype(np.float16)
    assert_same_bits(got[~tail], vec[~tail], what="vector loop")
    # alpha_step 0 (ATen's DEFAULT build): every element in fp16
    got0 = run(_add_alpha_graph(n, alpha), {"x": x, "y": y}, mode="eager", fmt="fp16",
               kernels=sp.replace(alpha_step=0)).output
    assert_same_bits(got0, x + y * a16, what="alpha_step=0")


def test_add_alpha_bf16_all_scalar_loop():
    n = 1000
    r = _rng(3)
    x = r.standard_normal(n).astype(ml_dtypes.bfloat16)
    y = r.standard_normal(n).astype(ml_dtypes.bfloat16)
    sp = H.replace(alpha_step=0, scalar_mul="broadcast")
    got = run(_add_alpha_graph(n, 0.7), {"x": x, "y": y}, mode="eager", fmt="bf16", kernels=sp).output
    a = np.float64(ml_dtypes.bfloat16(0.7))
    # bf16 operations: the product of two 8-bit significands and the sum of two bf16
    # values are exact in float64; one rounding each to bf16
    p = (y.astype(np.float64) * a).astype(ml_dtypes.bfloat16)
    want = (x.astype(np.float64) + p.astype(np.float64)).astype(ml_dtypes.bfloat16)
    assert_same_bits(got, want)


def _sigmoid32(x, exp_algo):
    e = np.asarray(K.exp(-x, fmt="fp32", algo=exp_algo), np.float32)
    with np.errstate(all="ignore"):
        return np.float32(1.0) / (np.float32(1.0) + e)


def test_scalar_tail_of_sigmoid_on_bf16():
    """loop_step counts 4-byte elements: on bf16 the step is doubled; the scalar loop's
    exp is tail_math, the vector loop's spec.exp; each result stored to bf16."""
    n = 2 * 1000 + 77
    x = _rng(4).uniform(-10, 10, n).astype(ml_dtypes.bfloat16)
    sp = H.replace(exp="sleef_u10", tail_math="exact", loop_step=500)  # step 1000 on bf16
    g = Graph({"x": (n,)}, [Node("out", "sigmoid", ("x",), {})], ["out"])
    got = run(g, {"x": x}, mode="eager", fmt="bf16", kernels=sp).output
    x32 = x.astype(np.float32)
    tail = np.arange(n) >= n - 77
    want = np.where(tail, _sigmoid32(x32, "exact"), _sigmoid32(x32, "sleef_u10")).astype(ml_dtypes.bfloat16)
    assert_same_bits(got, want)


@pytest.mark.parametrize("scalar_mul", ["muls", "broadcast"])
def test_storage_attribute_makes_a_node_compute_and_store_in_its_format(scalar_mul):
    """An fp32 run where one node carries ``storage="fp16"``: that node's scalar is
    held as an fp16 kernel holds it, its result is stored as fp16, and its consumer
    (fp32) reads those fp16 values."""
    n = 4096
    x = _rng(5).standard_normal(n).astype(np.float32)
    g = Graph({"x": (n,)}, [Node("a", "mul_scalar", ("x",), {"scalar": 0.1, "storage": "fp16"}),
                            Node("out", "add_scalar", ("a",), {"scalar": 1.0})], ["out"])
    sp = H.replace(scalar_mul=scalar_mul)
    res = run(g, {"x": x}, mode="eager", fmt="fp32", kernels=sp)
    s = np.float32(np.float16(0.1)) if scalar_mul == "broadcast" else np.float32(0.1)
    a16 = (x * s).astype(np.float16)  # fp32 product, stored as fp16
    want = a16.astype(np.float32) + np.float32(1.0)  # fp32 add of the fp16 values
    assert res.output.dtype == np.float32
    assert_same_bits(res.output, want)
    # without the attribute the product stays fp32 (and the bits differ)
    g32 = Graph({"x": (n,)}, [Node("a", "mul_scalar", ("x",), {"scalar": 0.1}),
                              Node("out", "add_scalar", ("a",), {"scalar": 1.0})], ["out"])
    plain = run(g32, {"x": x}, mode="eager", fmt="fp32", kernels=sp).output
    assert_same_bits(plain, (x * np.float32(0.1)) + np.float32(1.0))
    assert not same_bits(plain, res.output)


@pytest.mark.parametrize("fn, algos", [
    ("exp", ("exact", "sleef_u10", "glibc")), ("tanh", ("exact", "sleef", "glibc")),
    ("erf", ("exact", "aten_vec", "glibc")), ("log1p", ("exact", "sleef_u10", "glibc")),
    ("gelu", ("exact", "onednn", "onednn_avx2", "aten_vec", "aten_scalar", "glibc", "glibc_nofma"))])
def test_every_math_algorithm_keeps_a_0d_shape(fn, algos):
    """A 0-d value (a row sum fed to mish) stays 0-d through every routine (the libm
    models once returned shape (1,)), with the value of the 1-element array."""
    from numlab.kernels import algorithms as A

    f = getattr(A, fn)
    for algo in algos:
        x0 = np.full((), 0.7, np.float32)
        got = np.asarray(f(x0, fmt="fp32", algo=algo))
        assert got.shape == (), (fn, algo, got.shape)
        assert np.array_equal(got.reshape(1), np.asarray(f(x0.reshape(1), fmt="fp32", algo=algo))), (fn, algo)
