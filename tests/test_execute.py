"""Executors: eager / fused / emulated_casts / reference.

Independent references: numpy float16 and ml_dtypes bfloat16 arithmetic
(each ufunc is computed in float32 and rounded once, which is the correctly
rounded result for + - * /), plain float32 numpy chains, plain Python loops
for reduction orders, and the catalogue's float64 references.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _np_models import np_model
from _oracles import assert_same_bits, round_to_grid, same_bits
from hypothesis import given
from hypothesis import strategies as st

from numlab import get_format, ops, round_to, zoo
from numlab.execute import (
    MODES,
    SOURCE_FIELDS,
    SOURCES,
    fingerprint,
    run,
)
from numlab.execute.values import count as _count
from numlab.execute.values import count_stored as _count_stored
from numlab.fusion import FUSION_KINDS, FusionOptions
from numlab.graph import Graph, Node, evaluate, trace
from numlab.kernels import KernelSpec, fma
from numlab.kernels import engine as E
from numlab.kernels import reduce as kreduce
from numlab.kernels._common import Arith
from numlab.kernels.engine import store as _store
from numlab.kernels.reduction import _transpose2d, welford
from numlab.kernels.scalar import fma_f32

H = KernelSpec.handwritten()
C = KernelSpec.codegen()
BF16 = ml_dtypes.bfloat16


def all_same(r1, r2) -> bool:
    return r1.outputs.keys() == r2.outputs.keys() and all(
        same_bits(r1.outputs[k], r2.outputs[k]) for k in r1.outputs)


# ---------------------------------------------------------------------------
# eager, fused and reference against independent arithmetic
# ---------------------------------------------------------------------------


def _chain(x, w, b):
    return {"y": ((x * w) + b) * x - w}


G_CHAIN = trace(_chain, x=(6, 16), w=(6, 16), b=(6, 16))


def _fma32_exact(a, b, c) -> np.ndarray:
    """a*b + c rounded once to fp32, by exact rational arithmetic (test-only loop)."""
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                  np.asarray(c, np.float32))
    out = np.empty(a.shape, dtype=np.float32)
    for idx in np.ndindex(a.shape):
        av, bv, cv = float(a[idx]), float(b[idx]), float(c[idx])
        if not all(math.isfinite(v) for v in (av, bv, cv)):
            out[idx] = np.float32(av * bv + cv)
            continue
        out[idx] = round_to_grid(Fraction(av) * Fraction(bv) + Fraction(cv), "fp32")
    return out


@given(st.integers(0, 2**32 - 1), st.sampled_from(["fp16", "bf16"]))
def test_pointwise_chain_against_numpy_storage_arithmetic(seed, dt):
    rng = np.random.default_rng(seed)
    # float32 raw inputs: ml_dtypes' float64 -> bfloat16 cast rounds twice (through
    # float32, e.g. 0.7949218517076898 -> 0.796875 instead of 0.79296875); from
    # float32 it rounds once, so the reference below is correctly rounded
    raw = {k: (rng.standard_normal((6, 16)) * rng.choice([1e-3, 1.0, 300.0])).astype(np.float32)
           for k in "xwb"}
    np_dt = np.float16 if dt == "fp16" else BF16
    x, w, b = (raw[k].astype(np_dt) for k in "xwb")  # inputs rounded to S (RNE)
    with np.errstate(over="ignore", invalid="ignore"):
        # eager: every op rounds to S -- numpy float16 / ml_dtypes bfloat16 arithmetic
        want_eager = ((x * w) + b) * x - w
        # fused: one block, fp32 inside, one rounding at the end; the code
        # generator contracts t*x - w into one FMA (x*w + b too, but x*w is
        # exact in fp32, so that FMA equals the separate multiply and add)
        xf, wf, bf = (a.astype(np.float32) for a in (x, w, b))
        t = (xf * wf) + bf
        want_fused = _fma32_exact(t, xf, -wf).astype(np_dt)
    e = run(G_CHAIN, raw, mode="eager", fmt=dt)
    f = run(G_CHAIN, raw, mode="fused", fmt=dt)
    assert_same_bits(e.outputs["y"], want_eager)
    assert_same_bits(f.outputs["y"], want_fused)
    # reference: float64 on the same S-valued inputs
    r = run(G_CHAIN, raw, mode="reference", fmt=dt)
    x6, w6, b6 = (a.astype(np.float64) for a in (x, w, b))
    assert_same_bits(r.outputs["y"], ((x6 * w6) + b6) * x6 - w6)


def test_eager_values_are_every_node_in_storage_fused_only_block_outputs():
    g = zoo.gelu_mlp()
    x = zoo.make_inputs(g, seed=3)
    e = run(g, x, mode="eager", fmt="bf16")
    assert set(e.values) == {n.name for n in g.nodes}
    assert all(v.dtype == BF16 for v in e.values.values())
    f = run(g, x, mode="fused", fmt="bf16")
    outs = {m for b in f.plan.blocks for m in b.outputs}
    assert set(f.values) == outs and f.internals == []
    fi = run(g, x, mode="fused", fmt="bf16", keep_internals=True)
    assert set(fi.values) == {n.name for n in fi.graph.nodes}
    assert set(fi.internals) == {n.name for n in fi.graph.nodes} - outs
    assert all(fi.values[k].dtype == np.float32 for k in fi.internals)
    assert all_same(f, fi)
    r = run(g, x, mode="reference", fmt="bf16")
    assert all(v.dtype == np.float64 for v in r.values.values())
    assert r.outputs["y"].dtype == np.float64 and e.outputs["y"].dtype == BF16


def test_scalar_multiply_instruction_against_numpy():
    g = trace(lambda x: {"y": x * 0.1}, x=(64,))
    x = np.linspace(-4, 4, 64)
    xs = x.astype(np.float16).astype(np.float32)
    # eager (muls): the scalar stays fp32
    muls = (xs * np.float32(0.1)).astype(np.float16)
    # codegen (broadcast): the scalar is first materialised in fp16
    bcast = (xs * np.float32(np.float16(0.1))).astype(np.float16)
    assert not same_bits(muls, bcast)  # the instruction matters here
    assert_same_bits(run(g, {"x": x}, mode="eager", fmt="fp16").output, muls)
    assert_same_bits(run(g, {"x": x}, mode="fused", fmt="fp16").output, bcast)
    assert_same_bits(run(g, {"x": x}, mode="fused", fmt="fp16", align="instruction").output, muls)


def test_sequential_reduction_against_python_loop():
    g = trace(lambda x: {"s": x.sum(axis=-1)}, x=(5, 37))
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 37)) * 1e3).astype(np.float32)
    spec = KernelSpec.handwritten(reduce_order="sequential")
    got = run(g, {"x": x}, mode="eager", fmt="fp32", kernels=spec).output
    want = np.empty(5, dtype=np.float32)
    for i in range(5):  # test-only scalar loop, the same order
        s = np.float32(x[i, 0])
        for j in range(1, 37):
            s = np.float32(s + x[i, j])
        want[i] = s
    assert_same_bits(got, want)


def test_reference_is_the_float64_model_of_the_rounded_inputs():
    """mode="reference" computes the model in float64 on the inputs rounded to S
    (numpy's float16 cast): it agrees with an independent numpy version of the
    model on those inputs, and not with the same model on the unrounded ones."""
    for name in ("layernorm", "softmax", "transformer_block"):
        g = zoo.MODELS[name]()
        x = zoo.make_inputs(g, seed=1)
        r = run(g, x, mode="reference", fmt="fp16")
        xr = {k: (v if g.role(k) == "index" else v.astype(np.float16).astype(np.float64))
              for k, v in x.items()}
        want, unrounded = np_model(name, xr), np_model(name, x)
        for k in want:
            got = r.outputs[k]
            scale = np.max(np.abs(want[k]))
            assert got.dtype == np.float64 and got.shape == want[k].shape, (name, k)
            assert np.max(np.abs(got - want[k])) <= 1e-12 * scale, (name, k)
            assert np.max(np.abs(got - unrounded[k])) > 1e-6 * scale, (name, k)


# ---------------------------------------------------------------------------
# data movement: fused or not, bitwise identical
# ---------------------------------------------------------------------------


@st.composite
def movement_graphs(draw):
    nodes = []
    shapes = {"x": (4, 6), "y": (4, 6)}
    avail = ["x", "y"]
    for i in range(draw(st.integers(1, 8))):
        src = draw(st.sampled_from(avail))
        s = shapes[src]
        op = draw(st.sampled_from(["reshape", "transpose", "slice", "concat", "split",
                                   "broadcast_to", "gather", "neg"]))
        name = f"m{i}"
        if op == "reshape":
            node = Node(name, op, (src,), {"shape": (s[1], s[0]) if len(s) == 2 else s})
        elif op == "transpose":
            node = Node(name, op, (src,), {"perm": None})
        elif op == "slice":
            node = Node(name, op, (src,), {"begin": (0,) * len(s), "end": tuple(max(1, d - 1) for d in s),
                                          "step": (1,) * len(s)})
        elif op == "concat":
            other = draw(st.sampled_from([a for a in avail if shapes[a] == s]))
            node = Node(name, op, (src, other), {"axis": 0})
        elif op == "split":
            if s[0] < 2:
                continue
            node = Node(name, op, (src,), {"axis": 0, "sizes": (1, s[0] - 1), "index": 1})
        elif op == "broadcast_to":
            node = Node(name, op, (src,), {"shape": (2,) + s})
        elif op == "gather":
            node = Node(name, op, (src,), {"axis": 0, "indices": [s[0] - 1, 0, 0]})
        else:  # an exact elementwise op keeps the chain mixable
            node = Node(name, op, (src,))
        g = Graph({"x": (4, 6), "y": (4, 6)}, nodes + [node], [node.name])
        shapes[name] = g.shape(name)
        nodes.append(node)
        avail.append(name)
    return Graph({"x": (4, 6), "y": (4, 6)}, nodes, [nodes[-1].name])


@given(movement_graphs(), st.integers(0, 2**31), st.sampled_from(["fp16", "bf16", "fp8_e4m3"]))
def test_data_movement_is_bitwise_identical_fused_or_not(g, seed, dt):
    rng = np.random.default_rng(seed)
    x = {"x": rng.standard_normal((4, 6)) * 10, "y": rng.standard_normal((4, 6))}
    e = run(g, x, mode="eager", fmt=dt)
    every = FusionOptions(enabled=frozenset(FUSION_KINDS))
    for fo in (every, FusionOptions(), FusionOptions.inductor(), FusionOptions.off()):
        f = run(g, x, mode="fused", fmt=dt, fusion=fo)
        assert all_same(e, f)
        for k in f.values:
            assert_same_bits(f.values[k], e.values[k])
    # and equal to the exact (float64) reference cast to S: nothing was computed
    r = run(g, x, mode="reference", fmt=dt)
    for k in r.outputs:
        assert_same_bits(r.outputs[k].astype(e.outputs[k].dtype), e.outputs[k])


# ---------------------------------------------------------------------------
# emulated casts == eager on pointwise chains with the same kernels
# ---------------------------------------------------------------------------

_UN = ["exp", "tanh", "sigmoid", "silu", "neg", "abs", "relu", "rsqrt_abs", "gelu", "gelu_none",
       "sqrt_abs", "reciprocal", "log_abs", "erf"]
_BIN = ["add", "sub", "mul", "div", "maximum", "minimum"]
_SC = ["add_scalar", "mul_scalar", "sub_scalar", "rsub_scalar", "div_scalar", "rdiv_scalar"]


@st.composite
def pointwise_chains(draw):
    def f(x, y):
        vals = [x, y]
        for _ in range(draw(st.integers(2, 7))):
            kind = draw(st.sampled_from(["u", "b", "s"]))
            a = draw(st.sampled_from(vals))
            if kind == "u":
                u = draw(st.sampled_from(_UN))
                if u.endswith("_abs"):
                    v = getattr(ops, u[:-4])(ops.abs_(a) + 0.5)
                elif u == "gelu":
                    v = ops.gelu(a, "tanh")
                elif u == "gelu_none":
                    v = ops.gelu(a, "none")
                else:
                    v = getattr(ops, u)(a) if u != "abs" else ops.abs_(a)
            elif kind == "b":
                v = getattr(ops, draw(st.sampled_from(_BIN)))(a, draw(st.sampled_from(vals)))
            else:
                s = draw(st.sampled_from([0.1, 0.5, 3.0, -1.7, 1e-3, 1 / 3]))
                v = getattr(ops, draw(st.sampled_from(_SC)))(a, s)
            vals.append(v)
        return {"out": vals[-1]}

    return trace(f, x=(3, 16), y=(3, 16))


@given(pointwise_chains(), st.integers(0, 2**31), st.sampled_from(["fp16", "bf16"]),
       st.sampled_from(["handwritten", "codegen"]))
def test_emulated_casts_equals_eager_with_the_same_kernels(g, seed, dt, which):
    spec = H if which == "handwritten" else C
    rng = np.random.default_rng(seed)
    x = {"x": rng.standard_normal((3, 16)), "y": rng.standard_normal((3, 16))}
    e = run(g, x, mode="eager", fmt=dt, kernels=spec)
    m = run(g, x, mode="emulated_casts", fmt=dt, kernels=spec, library=spec)
    assert m.plan.blocks[0].codegen and len(m.plan.blocks) == 1  # really one fused block
    assert all_same(e, m)
    for k, v in m.values.items():
        assert_same_bits(v, e.values[k])


# ---------------------------------------------------------------------------
# the four sources: each one removes its part; all four give eager's bits
# ---------------------------------------------------------------------------


def test_source_fields_partition_the_kernel_spec():
    fields = {f.name for f in dataclasses.fields(KernelSpec)}
    listed = [f for src in SOURCES for f in SOURCE_FIELDS[src]]
    assert len(listed) == len(set(listed))
    assert set(listed) == fields - {"name"}


def _src_case(source):
    """A graph, inputs and storage where only ``source`` separates fused from eager."""
    rng = np.random.default_rng(11)
    if source == "promotion":
        g = trace(lambda x, w: {"y": (x * w + w) * x}, x=(8, 32), w=(8, 32))
        return g, {"x": rng.standard_normal((8, 32)), "w": rng.standard_normal((8, 32))}, "fp16"
    if source == "instruction":
        g = trace(lambda x: {"y": x * 0.1}, x=(8, 32))
        return g, {"x": rng.standard_normal((8, 32))}, "fp16"
    if source == "tiling":
        g = trace(lambda x: {"s": x.sum(axis=-1)}, x=(8, 4096))
        return g, {"x": rng.standard_normal((8, 4096))}, "fp32"
    g = trace(lambda x: {"y": ops.rsqrt(x)}, x=(8, 256))
    return g, {"x": rng.uniform(0.5, 100.0, (8, 256))}, "fp32"


@pytest.mark.parametrize("source", SOURCES)
def test_each_source_alone_and_its_removal(source):
    g, x, dt = _src_case(source)
    fo = FusionOptions.inductor()
    e = run(g, x, mode="eager", fmt=dt)
    plain = run(g, x, mode="fused", fmt=dt, fusion=fo)
    assert not all_same(plain, e), "the case must show a difference"
    others = tuple(s for s in SOURCES if s != source)
    only = run(g, x, mode="fused", fmt=dt, fusion=fo, align=others)
    assert not all_same(only, e), f"{source} alone must separate fused from eager"
    fixed = run(g, x, mode="fused", fmt=dt, fusion=fo, align=(source,))
    assert all_same(fixed, e), f"aligning {source} removes the whole difference here"
    assert all_same(run(g, x, mode="fused", fmt=dt, fusion=fo, align=SOURCES), e)


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
def test_all_four_aligned_and_no_decomposition_is_eager_bit_for_bit(model):
    g = zoo.MODELS[model]()
    n_diff = 0
    for dt, kind in (("fp16", "normal"), ("bf16", "shifted_mean"), ("fp16", "near_overflow"),
                     ("fp32", "heavy_tailed")):
        x = zoo.make_inputs(g, kind=kind, seed=5)
        e = run(g, x, mode="eager", fmt=dt)
        for fo in (FusionOptions(decompose=False), FusionOptions.inductor(decompose=False),
                   FusionOptions.inductor(decompose=False).enable("matmul")):
            f = run(g, x, mode="fused", fmt=dt, fusion=fo, align=SOURCES)
            assert all_same(f, e), (dt, kind, fo.describe())
            assert f.nonfinite == {k: v for k, v in e.nonfinite.items() if k in f.nonfinite}
        n_diff += not all_same(run(g, x, mode="fused", fmt=dt, fusion=FusionOptions.inductor()), e)
    if model != "attention_scores":
        assert n_diff > 0  # without alignment the bits part somewhere


def test_align_all_with_decomposition_still_differs_by_the_algorithm_of_the_decomposition():
    g = zoo.layernorm()
    x = zoo.make_inputs(g, seed=2, kind="shifted_mean")
    e = run(g, x, mode="eager", fmt="fp32")
    f = run(g, x, mode="fused", fmt="fp32", fusion=FusionOptions.inductor(), align=SOURCES)
    # eager's kernel (Welford) is not the decomposed algorithm (two passes)
    assert not all_same(f, e)
    f2 = run(g, x, mode="fused", fmt="fp32", fusion=FusionOptions.inductor(decompose=False),
             align=SOURCES)
    assert all_same(f2, e)


def test_emulated_casts_do_not_round_inside_a_decomposed_composite():
    g = zoo.layernorm()
    x = zoo.make_inputs(g, seed=2)
    m = run(g, x, mode="emulated_casts", fmt="fp16", fusion=FusionOptions.inductor(),
            keep_internals=True)
    inner = [k for k, v in m.plan.decomposed.items() if v != k]
    assert inner and set(inner) == set(m.internals)  # fp32, never written in S
    # the same internals rounded to S at every decomposed node would be a different program
    assert any(not np.array_equal(m.values[k], m.values[k].astype(np.float16).astype(np.float32))
               for k in inner)


# ---------------------------------------------------------------------------
# determinism and fingerprints
# ---------------------------------------------------------------------------


def test_same_run_same_bits_and_fingerprint():
    g = zoo.transformer_block()
    x = zoo.make_inputs(g, seed=4)
    for mode in MODES:
        a = run(g, x, mode=mode, fmt="fp16")
        b = run(g, x, mode=mode, fmt="fp16")
        assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64
        assert all_same(a, b)
    fps = {run(g, x, mode=m, fmt=d).fingerprint for m in MODES for d in ("fp16", "bf16")}
    assert len(fps) == 8
    base = run(g, x, mode="fused", fmt="fp16").fingerprint
    assert run(g, x, mode="fused", fmt="fp16", fusion=FusionOptions.inductor()).fingerprint != base
    assert run(g, x, mode="fused", fmt="fp16", kernels=C.replace(fma=False)).fingerprint != base
    assert run(g, x, mode="fused", fmt="fp16", align="tiling").fingerprint != base
    x2 = zoo.make_inputs(g, seed=5)
    assert run(g, x2, mode="fused", fmt="fp16", seed=9).fingerprint == base  # run-time inputs
    g2 = zoo.transformer_block(eps=1e-6)
    assert run(g2, x, mode="fused", fmt="fp16").fingerprint != base


_CHILD = r"""
import hashlib, json, sys
import numpy as np
from numlab import zoo
from numlab.execute import run
out = {}
for model in ("transformer_block", "layernorm"):
    g = zoo.MODELS[model]()
    x = zoo.make_inputs(g, seed=4)
    for mode in ("eager", "fused", "emulated_casts", "reference"):
        r = run(g, x, mode=mode, fmt="bf16")
        h = hashlib.sha256()
        for k in sorted(r.values):
            h.update(k.encode()); h.update(np.ascontiguousarray(r.values[k]).tobytes())
        out[model + "/" + mode] = [r.fingerprint, h.hexdigest()]
json.dump(out, sys.stdout)
"""


def test_fresh_processes_with_different_hash_seeds_agree():
    res = []
    for hs in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hs)
        p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, timeout=120, check=True)
        res.append(json.loads(p.stdout))
    assert res[0] == res[1]
    # and this process agrees too
    g = zoo.layernorm()
    r = run(g, zoo.make_inputs(g, seed=4), mode="fused", fmt="bf16")
    h = hashlib.sha256()
    for k in sorted(r.values):
        h.update(k.encode())
        h.update(np.ascontiguousarray(r.values[k]).tobytes())
    assert res[0]["layernorm/fused"] == [r.fingerprint, h.hexdigest()]


def test_shuffled_order_uses_the_schedule_seed():
    g = trace(lambda x: {"s": x.sum(axis=-1)}, x=(16, 512))
    x = {"x": np.random.default_rng(0).standard_normal((16, 512))}
    spec = KernelSpec.handwritten(reduce_order="shuffled(0)")
    a = run(g, x, mode="eager", fmt="fp32", kernels=spec, seed=1)
    b = run(g, x, mode="eager", fmt="fp32", kernels=spec, seed=1)
    c = run(g, x, mode="eager", fmt="fp32", kernels=spec, seed=2)
    assert all_same(a, b) and not all_same(a, c)
    assert a.fingerprint == c.fingerprint  # the seed is a run-time input


# ---------------------------------------------------------------------------
# NaN and inf
# ---------------------------------------------------------------------------


def test_nan_and_inf_propagate_and_are_counted_per_node():
    g = trace(lambda x: {"y": ops.exp(x) + 1.0}, x=(6,))
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, 20.0])
    for mode in MODES:
        r = run(g, {"x": x}, mode=mode, fmt="fp16")
        y = np.asarray(r.outputs["y"], dtype=np.float64)
        assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 1.0 and y[3] == 2.0
        if mode == "reference":
            assert np.isfinite(y[5]) and r.nonfinite["exp_0"] == (1, 1)
        elif mode == "eager":  # exp(20) = 4.85e8 overflows fp16 at the exp node
            assert y[5] == np.inf and r.nonfinite["exp_0"] == (1, 2)
        else:  # fused: exp(20) stays fp32 inside the block; y = inf only at the output
            assert y[5] == np.inf
            if mode == "fused":
                assert r.nonfinite["exp_0"] == (1, 1)
        assert r.nonfinite["y"] == (1, 2 if mode != "reference" else 1)
        assert r.input_nonfinite == {"x": (1, 2)}
        assert "'x': (1, 2)" in r.summary()


def test_fused_keeps_a_value_that_overflows_eager():
    g = trace(lambda x: {"y": (x * x) * 1e-3}, x=(4,))
    x = np.array([300.0, 1.0, -400.0, 2.0])
    e = run(g, {"x": x}, mode="eager", fmt="fp16")
    f = run(g, {"x": x}, mode="fused", fmt="fp16")
    assert np.isinf(e.output[0]) and np.isinf(e.output[2])
    assert np.all(np.isfinite(f.output))
    assert e.nonfinite["mul_0"] == (0, 2) and f.nonfinite["mul_0"] == (0, 0)


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


def test_bad_input_errors_name_the_argument():
    g = zoo.layernorm(batch=2, hidden=8)
    x = zoo.make_inputs(g)
    with pytest.raises(ValueError, match=r"missing inputs \['beta'\].*inputs are \['x', 'gamma', 'beta'\]"):
        run(g, {k: v for k, v in x.items() if k != "beta"}, mode="eager", fmt="fp16")
    with pytest.raises(ValueError, match=r"unexpected inputs \['z'\]"):
        run(g, {**x, "z": x["x"]}, mode="eager", fmt="fp16")
    with pytest.raises(ValueError, match=r"input 'gamma' has shape \(7,\); graph 'layernorm' expects \(8,\)"):
        run(g, {**x, "gamma": np.ones(7)}, mode="eager", fmt="fp16")
    with pytest.raises(TypeError, match="input 'x' has dtype complex128"):
        run(g, {**x, "x": x["x"].astype(complex)}, mode="eager", fmt="fp16")
    with pytest.raises(TypeError, match="input 'x' has dtype int64"):
        run(g, {**x, "x": np.ones((2, 8), dtype=np.int64)}, mode="eager", fmt="fp16")
    with pytest.raises(ValueError, match="mode='fast'.*valid modes"):
        run(g, x, mode="fast", fmt="fp16")
    with pytest.raises(ValueError, match="fp12.*valid names"):
        run(g, x, mode="eager", fmt="fp12")
    with pytest.raises(ValueError, match="'fp64' is not a storage format for mode 'eager'"):
        run(g, x, mode="eager", fmt="fp64")
    assert run(g, x, mode="reference", fmt="fp64").outputs["y"].dtype == np.float64
    with pytest.raises(TypeError, match="kernels must be a kernel spec string.*KernelSpec, got int"):
        run(g, x, mode="eager", fmt="fp16", kernels=3)
    with pytest.raises(TypeError, match="fusion must be a fusion spec string.*FusionOptions, got dict"):
        run(g, x, mode="fused", fmt="fp16", fusion={})
    with pytest.raises(ValueError, match="fusion= applies to modes"):
        run(g, x, mode="eager", fmt="fp16", fusion=FusionOptions())
    with pytest.raises(ValueError, match="align: 'rounding'.*valid sources"):
        run(g, x, mode="fused", fmt="fp16", align=("rounding",))
    with pytest.raises(ValueError, match="seed=-1"):
        run(g, x, mode="fused", fmt="fp16", seed=-1)
    with pytest.raises(TypeError, match="inputs must be a dict"):
        run(g, [x["x"]], mode="eager", fmt="fp16")
    with pytest.raises(TypeError, match="graph must be a numlab.graph.Graph"):
        run("layernorm", x, mode="eager", fmt="fp16")


def test_inputs_are_rounded_to_storage_first():
    g = trace(lambda x: {"y": -x}, x=(3,))
    x = np.array([1.0 + 2.0**-12, 1e-9, 70000.0])  # fp16: rounds to 1.0, 0.0, inf
    for mode in MODES:
        y = np.asarray(run(g, {"x": x}, mode=mode, fmt="fp16").output, dtype=np.float64)
        assert y[0] == -1.0 and y[1] == 0.0 and y[2] == -np.inf
        # the overflow of 70000 to inf happens at the input: counted there
        r = run(g, {"x": x}, mode=mode, fmt="fp16")
        assert r.input_nonfinite == {"x": (0, 1)} and r.nonfinite["y"] == (0, 1)


def test_gather_index_inputs_are_not_rounded():
    g = trace(lambda x, i: {"y": ops.gather(x, i, axis=0)}, x=(3000, 2), i=(4,))
    x = np.arange(6000, dtype=np.float64).reshape(3000, 2) / 8
    idx = np.array([2049.0, 2051.0, 0.0, 2999.0])  # not fp16 values
    for mode in MODES:
        y = np.asarray(run(g, {"x": x, "i": idx}, mode=mode, fmt="fp32").output, dtype=np.float64)
        assert np.array_equal(y, x[[2049, 2051, 0, 2999]])


# ---------------------------------------------------------------------------
# speed paths are the kernels' numerics
# ---------------------------------------------------------------------------


_WELFORD_DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16),
                   "bf16": np.dtype(ml_dtypes.bfloat16)}


def _welford_var_reference(x: np.ndarray, dt: np.dtype, correction: int) -> np.ndarray:
    """Welford's variance along the last axis of float32 ``x`` in the numpy dtype ``dt``:
    ``d = x_k - m; m = m + d/(k+1); M2 = M2 + d*(x_k - m)``, var ``M2/(n - correction)``,
    each operation done in float32 on ``dt`` operands and cast to ``dt`` (the counts too):
    one correct rounding, as float32 holds more than 2p+2 bits of fp16/bf16."""
    def op(f, a, b):
        return f(np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32)).astype(dt)

    n = x.shape[-1]
    xr = x.astype(dt)
    m = np.zeros(x.shape[:-1], dt)
    m2 = np.zeros(x.shape[:-1], dt)
    with np.errstate(all="ignore"):
        for k in range(n):
            xk = xr[..., k]
            d = op(np.subtract, xk, m)
            m = op(np.add, m, op(np.divide, d, np.float32(k + 1).astype(dt)))
            m2 = op(np.add, m2, op(np.multiply, d, op(np.subtract, xk, m)))
        return op(np.divide, m2, np.float32(n - correction).astype(dt))


@pytest.mark.parametrize("acc", ["fp32", "fp16", "bf16"])
def test_welford_fast_path_equals_the_kernel(acc):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((7, 300)) * 4 + 10).astype(np.float32)
    _, v = welford(x, Arith(acc), 1)
    want = kreduce(x, "var", -1, acc=acc, variance="welford", correction=1)
    ref = _welford_var_reference(x, _WELFORD_DTYPES[acc], 1)
    assert_same_bits(np.asarray(v).astype(ref.dtype), ref)
    assert_same_bits(np.asarray(want).astype(ref.dtype), ref)


def test_fma_fast_path_equals_the_kernel_including_ties():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(20000).astype(np.float32)
    b = rng.standard_normal(20000).astype(np.float32)
    c = rng.standard_normal(20000).astype(np.float32)
    # ties: a*b exactly half an fp32 ulp of c away from c, plus a tiny tail
    one = np.float32(1.0)
    # the last one: exact = 1 + 2^-23 + 2^-24 - 2^-70, which float64 rounds to the
    # fp32 midpoint 1 + 2^-23 + 2^-24; rounding that to even would give 1 + 2^-22
    # (and its negative, where the exact value is on the other side of the midpoint)
    a2 = np.array([one, one, 3.0, 1 + 2.0**-23, -(1 + 2.0**-23)], dtype=np.float32)
    b2 = np.array([2.0**-24, 2.0**-24 + 2.0**-47, -(2.0**-25), 2.0**-24 - 2.0**-47,
                   2.0**-24 - 2.0**-47], dtype=np.float32)
    c2 = np.array([1.0, 1.0, 1.0, 1 + 2.0**-23, -(1 + 2.0**-23)], dtype=np.float32)
    a3 = np.array([2.0**-70, 1e-30, -3e-39], dtype=np.float32)  # fp32 subnormal results
    b3 = np.array([2.0**-70, 1e-10, 1.0], dtype=np.float32)
    c3 = np.array([0.0, -1e-40, 1e-45], dtype=np.float32)
    # fp32 * fp16 + fp16 (a layer norm's affine step): many exact fp32 midpoints
    a4 = rng.standard_normal((64, 512)).astype(np.float32)
    b4 = rng.standard_normal(512).astype(np.float16).astype(np.float32)
    c4 = rng.standard_normal(512).astype(np.float16).astype(np.float32)
    for aa, bb, cc in ((a, b, c), (a2, b2, c2), (a3, b3, c3), (a4, b4, c4)):
        got = fma_f32(aa, bb, cc)
        assert_same_bits(got, fma(aa, bb, cc, fmt="fp32"))
        assert_same_bits(got, _fma32_exact(aa, bb, cc))
    assert fma_f32(a2, b2, c2)[3] == np.float32(1 + 2.0**-23)
    assert fma_f32(a2, b2, c2)[4] == np.float32(-(1 + 2.0**-23))


@pytest.mark.parametrize("dt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32", "fp32"])
def test_store_equals_round_to(dt):
    S = get_format(dt)
    rng = np.random.default_rng(9)
    x = np.concatenate([
        rng.standard_normal(5000) * 2.0 ** rng.integers(-30, 30, 5000),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 2.0**-24, 2.0**-25,
         3 * 2.0**-26, 448.0, 464.0, 3.4e38],
    ]).astype(np.float32)
    got = _store(x, S)
    assert got.dtype == S.container
    want = np.asarray(round_to(x, S)).astype(S.container)
    assert_same_bits(got, want, nan_equal=True)


def test_nonfinite_count_fast_path():
    assert _count(np.array([1.0, 2.0], dtype=np.float32)) == (0, 0)
    assert _count(np.array([3e38, 3e38], dtype=np.float32)) == (0, 0)  # the sum overflows, values do not
    assert _count(np.array([np.inf, -np.inf, np.nan, 1.0], dtype=np.float32)) == (1, 2)
    assert _count(np.array([65504.0, 65504.0], dtype=np.float16)) == (0, 0)


def test_fma_contraction_in_a_code_generated_block():
    g = trace(lambda x, w, b: {"y": ops.exp(x) * w + b}, x=(4, 64), w=(4, 64), b=(4, 64))
    rng = np.random.default_rng(2)
    x = {k: rng.standard_normal((4, 64)) for k in ("x", "w", "b")}
    f = run(g, x, mode="fused", fmt="fp32", keep_internals=True)
    e32 = f.values["exp_0"]  # the block's fp32 exp (the code generator's algorithm)
    w, b = (x[k].astype(np.float32) for k in "wb")
    want = _fma32_exact(e32, w, b)
    assert_same_bits(f.outputs["y"], want)
    # without contraction (eager's instruction choice): two roundings
    n = run(g, x, mode="fused", fmt="fp32", align="instruction", keep_internals=True)
    two = (n.values["exp_0"] * w) + b
    assert_same_bits(n.outputs["y"], two.astype(np.float32))
    assert not same_bits(want, (e32 * w) + b)  # the contraction is visible here
    # the folded multiply is not computed on its own unless internals are kept;
    # the bits do not depend on it
    lean = run(g, x, mode="fused", fmt="fp32")
    assert all_same(lean, f)
    assert "mul_0" not in lean.nonfinite and "mul_0" in f.nonfinite and "y" in lean.nonfinite
    # emulated casts round the product: no contraction either
    m = run(g, x, mode="emulated_casts", fmt="fp32", kernels=C, library=C)
    assert_same_bits(m.outputs["y"], run(g, x, mode="eager", fmt="fp32", kernels=C).outputs["y"])


@pytest.mark.parametrize("dt", ["fp8_e4m3", "fp8_e5m2", "tf32"])
def test_narrow_and_containerless_storage_formats(dt):
    S = get_format(dt)
    g = zoo.gelu_mlp()
    x = zoo.make_inputs(g, seed=1)
    e = run(g, x, mode="eager", fmt=dt)
    f = run(g, x, mode="fused", fmt=dt)
    for r in (e, f):
        y = r.outputs["y"]
        assert y.dtype == S.container
        y64 = np.asarray(y, dtype=np.float64)
        ok = np.isfinite(y64)
        # every stored value is a value of S
        assert np.array_equal(np.asarray(round_to(y64[ok], S), dtype=np.float64), y64[ok])
    assert all_same(e, run(g, x, mode="fused", fmt=dt,
                           fusion=FusionOptions.inductor(decompose=False), align=SOURCES))


@pytest.mark.parametrize("dt", ["fp16", "bf16", "fp8_e5m2", "fp8_e4m3", "tf32", "fp32"])
def test_nonfinite_count_of_stored_values_exhaustive_codes(dt):
    S = get_format(dt)
    if S.bits in (8, 16):  # every code of the format
        U = np.uint8 if S.bits == 8 else np.uint16
        c = np.arange(2**S.bits, dtype=np.uint32).astype(U).view(S.container)
    else:
        c = np.array([1.0, np.inf, -np.inf, np.nan, 0.0], dtype=np.float32)
    with np.errstate(invalid="ignore"):  # bf16 NaN codes cast to float64 NaN
        w = np.asarray(c, dtype=np.float64)
    want = (int(np.isnan(w).sum()), int(np.isinf(w).sum()))
    assert _count_stored(c, S) == want
    finite = c[np.isfinite(w)]
    assert _count_stored(finite, S) == (0, 0)


@given(st.integers(1, 300), st.integers(1, 300), st.sampled_from([16, 128]))
def test_blocked_transpose(r, n, block):
    a = np.arange(r * n, dtype=np.float32).reshape(r, n)
    t = _transpose2d(a, block)
    assert t.flags.c_contiguous and np.array_equal(t, a.T)


def test_matmul_vector_operands_follow_numpy():
    for sa, sb in (((8,), (8, 5)), ((4, 8), (8,)), ((8,), (8,)), ((2, 4, 8), (8, 3))):
        g = trace(lambda a, b: {"y": a @ b}, a=sa, b=sb)
        rng = np.random.default_rng(0)
        x = {"a": rng.standard_normal(sa), "b": rng.standard_normal(sb)}
        r = run(g, x, mode="reference", fmt="fp32").outputs["y"]
        e = run(g, x, mode="eager", fmt="fp32").outputs["y"]
        want = np.matmul(x["a"].astype(np.float32).astype(np.float64),
                         x["b"].astype(np.float32).astype(np.float64))  # independent fp64
        assert e.shape == r.shape == want.shape
        assert np.allclose(r, want, rtol=1e-13, atol=1e-13)
        assert np.allclose(e, want, rtol=1e-5, atol=1e-5)


def test_relu_special_values():
    g = trace(lambda x: {"y": ops.relu(x)}, x=(6,))
    x = np.array([np.nan, -np.inf, np.inf, -0.0, -2.0, 3.0])
    for mode in MODES:
        y = np.asarray(run(g, {"x": x}, mode=mode, fmt="fp16").output, dtype=np.float64)
        assert np.isnan(y[0]) and y[2] == np.inf and y[5] == 3.0
        assert y[1] == 0 and y[3] == 0 and y[4] == 0
        # -0.0 passes through (not < 0); -inf and -2 become +0.0
        assert np.signbit(y[1:]).tolist() == [False, False, True, False, False]


def test_every_catalogue_op_has_an_engine_kernel():
    """A new op in numlab.ops must name its kernel, a function (ctx, *inputs,
    **attrs) computing it with the engine's Ctx (else run() cannot compute
    it); data movement never goes through arithmetic."""
    missing = sorted(k for k, v in ops.CATALOGUE.items() if not callable(v.kernel))
    assert missing == []
    for name, info in ops.CATALOGUE.items():
        params = list(inspect.signature(info.kernel).parameters)
        assert params[0] == "ctx", name
        if info.category == "data_movement":
            assert info.kernel.__doc__.startswith("Data movement"), name
        elif hasattr(E, name) or hasattr(E, name + "_"):  # the engine's function named after the op
            assert info.kernel is getattr(E, name, None) or info.kernel is getattr(E, name + "_", None), name


def test_fmt_is_the_storage_format():
    g = zoo.softmax(batch=2, n=8)
    x = zoo.make_inputs(g)
    a = run(g, x, mode="eager", fmt="bf16")
    assert a.fmt.name == "bf16" and a.output.dtype == ml_dtypes.bfloat16
    with pytest.raises(TypeError, match="needs the storage format"):
        run(g, x, mode="eager")
    with pytest.raises(ValueError, match=r"^fmt='fp12' is not a known format"):
        run(g, x, mode="eager", fmt="fp12")
    with pytest.raises(ValueError, match=r"^fmt='fp64' is not a storage format for mode 'eager'"):
        run(g, x, mode="eager", fmt="fp64")


def test_one_input_checker_for_run_and_evaluate():
    """run() and Graph.evaluate check inputs with Graph.check_inputs: the same
    messages, integer arrays only for gather indices."""
    g = zoo.layernorm(batch=2, hidden=8)
    x = zoo.make_inputs(g)
    bad = {k: v for k, v in x.items() if k != "beta"}
    msgs = []
    for call in (lambda: run(g, bad, mode="eager", fmt="fp16"), lambda: evaluate(g, bad)):
        with pytest.raises(ValueError) as e:
            call()
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] == ("graph 'layernorm': missing inputs ['beta']; the graph's inputs are "
                                  "['x', 'gamma', 'beta']")
    with pytest.raises(TypeError, match="integer arrays are only for gather indices"):
        evaluate(g, {**x, "x": np.ones((2, 8), dtype=np.int64)})
    gi = trace(lambda x, i: ops.gather(x, i, axis=0), x=(4, 3), i=(2,))
    xi = {"x": np.arange(12.0).reshape(4, 3), "i": np.array([3, 0])}
    assert np.array_equal(run(gi, xi, mode="eager", fmt="fp32").output, xi["x"][[3, 0]])
    assert np.array_equal(evaluate(gi, xi)["gather_0"], xi["x"][[3, 0]])


def test_fingerprint_encodes_the_graph_by_its_canonical_form(monkeypatch):
    """The fingerprint hashes Graph.to_dict() (the encoding of Graph.canonical):
    a graph that differs only in an attribute value or its name changes it."""
    g1 = trace(lambda x: ops.mul_scalar(x, 0.1), x=(4,))
    g2 = trace(lambda x: ops.mul_scalar(x, 0.1000001), x=(4,))
    fps = {fingerprint(g, mode="eager", fmt="fp16", kernels=H)
           for g in (g1, g2, Graph(g1.inputs, g1.nodes, g1.outputs, name="other"))}
    assert len(fps) == 3
    calls = []
    monkeypatch.setattr(Graph, "to_dict", lambda self, _f=Graph.to_dict: calls.append(1) or _f(self))
    fingerprint(g1, mode="eager", fmt="fp16", kernels=H)
    assert calls == [1]


def test_fma_contraction_skips_a_product_read_twice():
    """``t = x*y; t + t`` in a code-generated block: the product feeds both operands,
    so it is not folded into an FMA (it used to be skipped and then missing, KeyError)."""
    def shared(x, y):
        t = ops.mul(x, y)
        return ops.add(t, t)

    g = trace(shared, x=(64,), y=(64,))
    rng = np.random.default_rng(7)
    xs = {"x": rng.standard_normal(64).astype(np.float32), "y": rng.standard_normal(64).astype(np.float32)}
    with_fma = run(g, xs, mode="fused", fmt="fp16", kernels="codegen")
    without = run(g, xs, mode="fused", fmt="fp16", kernels="codegen:fma=false")
    assert_same_bits(with_fma.output, without.output)
    S = np.float16
    x16, y16 = xs["x"].astype(S).astype(np.float32), xs["y"].astype(S).astype(np.float32)
    t = x16 * y16  # fp32 inside the block, exact doubling, one rounding to S at the edge
    assert_same_bits(with_fma.output, (t + t).astype(S))


def test_fingerprint_canonical_form_tells_the_fnuz_fields_apart():
    # fp8 e4m3fn and e4m3fnuz differ only in the fields that tell fnuz formats apart (negzero, the NaN
    # code, emin); formats equal in p/emin/emax/subnormals/inf/nan but different in
    # negzero must not share a canonical form either
    from numlab.execute.fingerprint import canonical
    from numlab.formats import Format
    a = Format("tst_a", p=4, emax=7, emin=-7)
    b = dataclasses.replace(a, negzero=False)
    assert a.negzero != b.negzero
    assert canonical(a) != canonical(b)


def test_fingerprint_names_the_matrix_unit_set_or_not():
    # KernelSpec.mma enters at None too (every field enters); set, it is another program
    from numlab.execute.fingerprint import canonical
    from numlab.kernels import KernelSpec
    plain = KernelSpec.codegen()
    unit = dataclasses.replace(plain, mma="H100")
    assert canonical(plain)["mma"] is None and canonical(unit)["mma"] is not None
    g = zoo.gelu_mlp()
    fps = {run(g, zoo.make_inputs(g, seed=0), mode="fused", fmt="fp16", kernels=k).fingerprint
           for k in (plain, unit)}
    assert len(fps) == 2
