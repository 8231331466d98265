"""The zoo: every model traces, evaluates like an independent numpy version,
decomposes; input kinds are seeded, deterministic and have their stated
properties."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from _np_models import np_model
from hypothesis import given, settings
from hypothesis import strategies as st

import numlab as nl
from numlab import zoo
from numlab.graph import Graph, decompose, evaluate

EXPECTED_MODELS = {"layernorm", "rmsnorm", "softmax", "log_softmax", "gelu_mlp", "attention_scores",
                   "swiglu", "residual_rmsnorm", "transformer_block", "fp8_mlp"}


def test_models_are_the_expected_list():
    assert set(zoo.MODELS) == EXPECTED_MODELS


@pytest.mark.parametrize("name", sorted(EXPECTED_MODELS))
@pytest.mark.parametrize("kind", zoo.INPUT_KINDS)
def test_model_evaluates_like_independent_numpy_and_decomposes(name, kind):
    g = zoo.MODELS[name]()
    assert isinstance(g, Graph) and g.name == name
    inputs = zoo.make_inputs(g, kind, seed=3)
    assert list(inputs) == list(g.inputs)
    got = evaluate(g, inputs)
    want = np_model(name, inputs)
    assert set(got) == set(want) == set(g.outputs)
    d = decompose(g)
    got_d = evaluate(d, inputs)
    for o in g.outputs:
        assert got[o].shape == want[o].shape == g.node(o).shape
        scale = np.max(np.abs(want[o]))
        assert np.isfinite(scale) and np.all(np.isfinite(got[o])), (name, kind, o)  # else the bound is vacuous
        assert np.max(np.abs(got[o] - want[o])) <= 1e-12 * scale, (name, kind, o)
        assert np.max(np.abs(got_d[o] - got[o])) <= 1e-12 * scale, (name, kind, o)


def test_sizes_change_shapes():
    g = zoo.attention_scores(batch=2, heads=3, seq=5, head_dim=4)
    assert g.inputs == {"q": (2, 3, 5, 4), "k": (2, 3, 5, 4)} and g.node("p").shape == (2, 3, 5, 5)
    assert g.node([n.name for n in g.nodes if n.op == "mul_scalar"][0]).attrs["scalar"] == 0.5
    g = zoo.transformer_block(seq=4, d_model=12, heads=3, d_ff=7)
    assert g.node("y").shape == (4, 12)
    g = zoo.gelu_mlp(batch=3, d_in=5, d_hidden=6, approximate="none", scale=0.25)
    assert g.node("y").shape == (3, 6) and [n.attrs.get("approximate") for n in g.nodes if n.op == "gelu"] == ["none"]
    assert zoo.get_model("softmax", n=9).inputs == {"x": (8, 9)}


def test_model_ops_cover_the_categories():
    cats = {n.category for name in zoo.MODELS for n in zoo.MODELS[name]().nodes}
    assert cats == {"elementwise", "reduction", "data_movement", "matmul", "composite"} - {"reduction"}
    assert {n.category for n in decompose(zoo.transformer_block()).nodes} == set(nl.ops.CATEGORIES) - {"composite"}
    assert {n.op for n in zoo.transformer_block().nodes} >= {"split", "reshape", "transpose", "softmax", "layer_norm", "rms_norm", "gelu"}


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------
def test_make_inputs_is_deterministic_per_seed_and_per_input():
    g = zoo.swiglu()
    a, b = zoo.make_inputs(g, "normal", seed=7), zoo.make_inputs(g, "normal", seed=7)
    assert all(np.array_equal(a[k], b[k]) for k in a) and all(v.dtype == np.float64 for v in a.values())
    c = zoo.make_inputs(g, "normal", seed=8)
    assert not any(np.array_equal(a[k], c[k]) for k in a)
    # an input's stream depends on its name and the seed, not on the other inputs
    g2 = nl.graph.trace(lambda x, w_up: x @ w_up, x=(8, 32), w_up=(32, 64))
    assert np.array_equal(zoo.make_inputs(g2, seed=7)["w_up"], a["w_up"])


_SNIPPET = (
    "import json, numlab as nl\n"
    "out = {}\n"
    "for k in ('near_overflow', 'heavy_tailed'):\n"
    "    d = nl.zoo.make_inputs(nl.zoo.transformer_block(), k, seed=5)\n"
    "    out[k] = {n: v.ravel().tolist() for n, v in d.items()}\n"
    "print(json.dumps(out))\n"
)


def test_make_inputs_same_in_a_fresh_process():
    env = dict(os.environ, PYTHONHASHSEED="999")
    res = subprocess.run([sys.executable, "-c", _SNIPPET], capture_output=True, text=True, env=env, check=True)
    there = json.loads(res.stdout)
    for k in ("near_overflow", "heavy_tailed"):
        here = zoo.make_inputs(zoo.transformer_block(), k, seed=5)
        assert {n: v.ravel().tolist() for n, v in here.items()} == there[k]


def test_roles_and_their_distributions():
    g = zoo.transformer_block(seq=64, d_model=64, heads=2, d_ff=128)
    roles = {k: g.role(k) for k in g.inputs}
    assert roles == {"x": "data", "g1": "gamma", "b1": "beta", "w_qkv": "weight", "w_o": "weight",
                     "g2": "gamma", "w1": "weight", "c1": "beta", "w2": "weight"}
    i = zoo.make_inputs(g, "uniform", seed=0)
    assert np.all(np.abs(i["x"]) <= 1) and abs(i["x"].std() - 1 / math.sqrt(3)) < 0.02
    assert abs(i["w1"].std() * math.sqrt(64) - 1) < 0.05  # N(0, 1/fan_in)
    assert abs(i["g1"].mean() - 1) < 0.05 and i["g1"].std() < 0.2
    assert abs(i["c1"].mean()) < 0.05 and 0.05 < i["c1"].std() < 0.15
    assert zoo.rmsnorm().role("weight") == "gamma"
    s = zoo.make_inputs(zoo.layernorm(batch=64, hidden=64), "shifted_mean", seed=0)["x"]
    assert abs(s.mean()) / s.std() > 100
    h = zoo.make_inputs(zoo.layernorm(batch=64, hidden=64), "heavy_tailed", seed=0)["x"]
    n = zoo.make_inputs(zoo.layernorm(batch=64, hidden=64), "normal", seed=0)["x"]
    kurt = lambda v: np.mean((v - v.mean()) ** 4) / v.var() ** 2  # noqa: E731
    assert abs(kurt(n) - 3) < 0.3 and kurt(h) > 6 and abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05


def test_index_and_mask_roles():
    g = nl.graph.trace(lambda x, i, m: nl.ops.where(m, nl.ops.gather(x, i, axis=0), 0.0 * nl.ops.gather(x, i, axis=0)),
                       x=(5, 3), i=(40,), m=(40, 3))
    assert g.role("i") == "index" and g.role("m") == "mask"
    d = zoo.make_inputs(g, seed=1)
    assert set(np.unique(d["i"])) <= set(range(5)) and len(np.unique(d["i"])) > 1
    assert set(np.unique(d["m"])) == {0.0, 1.0}
    evaluate(g, d)


@pytest.mark.parametrize("name", sorted(EXPECTED_MODELS))
def test_near_overflow_brings_the_largest_intermediate_to_half_of_fp16_max(name):
    g = zoo.MODELS[name]()
    d = decompose(g)
    inputs = zoo.make_inputs(g, "near_overflow", seed=2)
    peak = max(np.max(np.abs(v)) for v in evaluate(d, inputs, all_values=True).values())
    target = zoo.NEAR_OVERFLOW_FRACTION * nl.FP16.max
    assert target * (1 - 1e-6) <= peak <= target
    # and with fmt="fp16" the inputs are fp16 values (ml_dtypes round trip is exact)
    r = zoo.make_inputs(g, "near_overflow", seed=2, fmt="fp16")
    for v in r.values():
        assert np.array_equal(v.astype(np.float16).astype(np.float64), v)


def test_fmt_rounds_to_the_format():
    r = zoo.make_inputs(zoo.softmax(), "normal", seed=0, fmt="bf16")["x"]
    raw = zoo.make_inputs(zoo.softmax(), "normal", seed=0)["x"]
    assert np.array_equal(r, raw.astype(ml_dtypes.bfloat16).astype(np.float64)) and not np.array_equal(r, raw)
    # near_overflow in bf16 targets bf16's max
    g = zoo.rmsnorm()
    peak = max(np.max(np.abs(v)) for v in evaluate(decompose(g), zoo.make_inputs(g, "near_overflow", fmt="bf16"), all_values=True).values())
    assert peak > 1e37 and np.isfinite(peak)


def test_bad_arguments():
    g = zoo.softmax()
    with pytest.raises(ValueError, match=r"kind='gaussian' is not valid; choose one of \('normal', 'uniform', 'shifted_mean', 'near_overflow', 'heavy_tailed'\)"):
        zoo.make_inputs(g, "gaussian")
    with pytest.raises(ValueError, match="seed=-1 must be a non-negative int"):
        zoo.make_inputs(g, seed=-1)
    with pytest.raises(ValueError, match=r"unknown model 'mlp'; valid models: \["):
        zoo.make_inputs("mlp")
    with pytest.raises(TypeError, match="graph must be a Graph or a model name"):
        zoo.make_inputs(3)
    with pytest.raises(ValueError, match="fmt='fp7'"):
        zoo.make_inputs(g, fmt="fp7")
    with pytest.raises(ValueError, match="batch must be a positive int, got 0"):
        zoo.layernorm(batch=0)
    with pytest.raises(ValueError, match="d_model=10 must be a multiple of heads=3"):
        zoo.transformer_block(d_model=10, heads=3)
    assert zoo.make_inputs("softmax")["x"].shape == (8, 64)
    with pytest.raises(ValueError, match=r"model 'softmax' has no size argument \['m'\]; valid \(with defaults\): batch=8, n=64"):
        zoo.get_model("softmax", m=3)


SIZE_ARGS = {
    "layernorm": ("batch", "hidden"), "rmsnorm": ("batch", "hidden"), "softmax": ("batch", "n"),
    "log_softmax": ("batch", "n"), "gelu_mlp": ("batch", "d_in", "d_hidden"),
    "attention_scores": ("batch", "heads", "seq", "head_dim"), "swiglu": ("batch", "d_model", "d_ff"),
    "residual_rmsnorm": ("batch", "hidden"), "transformer_block": ("seq", "heads", "d_ff"),
}


@settings(max_examples=40)
@given(st.sampled_from(sorted(SIZE_ARGS)), st.data())
def test_models_at_random_sizes_evaluate_like_numpy(name, data):
    sizes = {k: data.draw(st.integers(1, 6), label=k) for k in SIZE_ARGS[name]}
    if name == "transformer_block":
        sizes["d_model"] = sizes["heads"] * data.draw(st.integers(1, 4), label="d_head")
    g = zoo.MODELS[name](**sizes)
    inputs = zoo.make_inputs(g, "normal", seed=data.draw(st.integers(0, 5)))
    want = np_model(name, inputs, heads=sizes.get("heads", 2))
    got = evaluate(g, inputs)
    for o in g.outputs:
        assert got[o].shape == want[o].shape == g.node(o).shape
        np.testing.assert_allclose(got[o], want[o], rtol=1e-11, atol=1e-12 * np.max(np.abs(want[o])))


def test_parse_sizes_types_and_errors():
    from numlab.zoo import get_model, parse_sizes

    got = parse_sizes(["hidden=256", "batch=4,eps=1e-3", "approximate=erf"])
    assert got == {"hidden": 256, "batch": 4, "eps": 1e-3, "approximate": "erf"}
    assert type(got["hidden"]) is int and type(got["eps"]) is float
    assert parse_sizes(None) == {} and parse_sizes([]) == {}
    for bad in ("batch", "=4", "a=1,b"):
        with pytest.raises(ValueError, match="--size .* is not NAME=VALUE"):
            parse_sizes(bad)
    # values are validated by the model, not silently accepted
    with pytest.raises(ValueError, match="positive int"):
        get_model("layernorm", **parse_sizes("hidden=abc"))


def test_load_inputs_is_the_graph_reader(tmp_path):
    """zoo.load_inputs reads through numlab.graph.load_inputs (one reader): the
    same arrays from a .npz file and from a directory of NAME.npy, dtypes kept,
    in the graph's input order; errors name the argument."""
    g = zoo.get_model("layernorm")
    xs = zoo.make_inputs(g, "normal", seed=3)
    xs["gamma"] = xs["gamma"].astype(np.float16)
    np.savez(tmp_path / "in.npz", **{k: xs[k] for k in reversed(list(xs))})
    (tmp_path / "dir").mkdir()
    for k, v in xs.items():
        np.save(tmp_path / "dir" / f"{k}.npy", v)
    for src in (tmp_path / "in.npz", tmp_path / "dir"):
        got = zoo.load_inputs(g, src)
        assert list(got) == list(g.inputs) and got["gamma"].dtype == np.float16
        for k in xs:
            np.testing.assert_array_equal(got[k], xs[k])
    with pytest.raises(ValueError, match=r"--inputs: missing input\(s\) \['beta'\]"):
        zoo.load_inputs(g, {"x": xs["x"], "gamma": xs["gamma"]}, arg="--inputs")
    with pytest.raises(ValueError, match=r"--inputs: input 'x' has shape \(2, 2\)"):
        zoo.load_inputs(g, {**xs, "x": np.zeros((2, 2))}, arg="--inputs")
