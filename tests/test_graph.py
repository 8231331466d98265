"""The IR: tracing, shape checks, names, printing, validation of hand-built
graphs, decomposition, canonical form, reference evaluation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numlab as nl
from numlab import ops
from numlab.graph import Graph, Node, Tensor, decompose, evaluate, trace


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ---------------------------------------------------------------------------
# tracing: each form builds the right op and evaluates like numpy
# ---------------------------------------------------------------------------
def test_every_tensor_form_traces_to_its_op_and_evaluates_like_numpy():
    def f(x, y, w, m):
        return {
            "add": x + y, "sub": x - y, "mul": x * y, "div": x / y,
            "adds": x + 1.5, "radds": 1.5 + x, "subs": x - 0.25, "rsubs": 2.0 - x,
            "muls": x * 0.5, "rmuls": 0.5 * x, "divs": x / 3.0, "rdivs": 3.0 / x,
            "neg": -x, "abs": abs(x), "sq": x**2, "mm": x @ w,
            "rs": ops.rsqrt(abs(x)), "sum": x.sum(-1, keepdims=True), "mean": x.mean(0),
            "max": x.max(), "min": x.min(1), "var": x.var(-1, correction=1),
            "resh": x.reshape(4, 3), "resh2": x.reshape((-1,)), "T": x.T, "tr": x.transpose(1, 0),
            "sl": x[..., :4], "sl2": x[1:, ::2], "idx": x[1], "cat": ops.concat([x, y], axis=1),
            "sp": ops.split(x, [1, 2], axis=0)[1], "ga": ops.gather(x, [2, 0, 2], axis=1),
            "bc": ops.broadcast_to(x[0], (5, 4)), "wh": ops.where(m, x, y), "ca": x.astype("fp16"),
            "mx": ops.maximum(x, y), "gl": ops.gelu(x, "tanh"),
        }

    g = trace(f, x=(3, 4), y=(3, 4), w=(4, 2), m=(3, 4))
    ops_of = {o: g.node(o).op for o in g.outputs}
    assert ops_of == {
        "add": "add", "sub": "sub", "mul": "mul", "div": "div", "adds": "add_scalar",
        "radds": "add_scalar", "subs": "sub_scalar", "rsubs": "rsub_scalar", "muls": "mul_scalar",
        "rmuls": "mul_scalar", "divs": "div_scalar", "rdivs": "rdiv_scalar", "neg": "neg",
        "abs": "abs", "sq": "mul", "mm": "matmul", "rs": "rsqrt", "sum": "sum", "mean": "mean",
        "max": "max", "min": "min", "var": "var", "resh": "reshape", "resh2": "reshape",
        "T": "transpose", "tr": "transpose", "sl": "slice", "sl2": "slice", "idx": "reshape",
        "cat": "concat", "sp": "split", "ga": "gather", "bc": "broadcast_to", "wh": "where",
        "ca": "cast", "mx": "maximum", "gl": "gelu",
    }
    x, y, w = _rand((3, 4), 1), _rand((3, 4), 2), _rand((4, 2), 3)
    m = (_rand((3, 4), 4) > 0).astype(np.float64)
    r = evaluate(g, {"x": x, "y": y, "w": w, "m": m})
    want = {
        "add": x + y, "sub": x - y, "mul": x * y, "div": x / y, "adds": x + 1.5, "radds": 1.5 + x,
        "subs": x - 0.25, "rsubs": 2.0 - x, "muls": x * 0.5, "rmuls": 0.5 * x, "divs": x / 3.0,
        "rdivs": 3.0 / x, "neg": -x, "abs": np.abs(x), "sq": x * x, "mm": x @ w,
        "rs": 1 / np.sqrt(np.abs(x)), "sum": x.sum(-1, keepdims=True), "mean": x.mean(0),
        "max": x.max(), "min": x.min(1), "var": x.var(-1, ddof=1), "resh": x.reshape(4, 3),
        "resh2": x.reshape(-1), "T": x.T, "tr": x.T, "sl": x[..., :4], "sl2": x[1:, ::2],
        "idx": x[1], "cat": np.concatenate([x, y], 1), "sp": x[1:3], "ga": x[:, [2, 0, 2]],
        "bc": np.broadcast_to(x[0], (5, 4)), "wh": np.where(m != 0, x, y),
        "ca": x.astype(np.float16).astype(np.float64), "mx": np.maximum(x, y),
        "gl": 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    }
    for k, v in want.items():
        if v is None:
            continue
        assert r[k].shape == np.shape(v) == g.shape(k), k
        np.testing.assert_allclose(r[k], v, rtol=1e-14, atol=1e-15, err_msg=k)


def test_broadcast_to_traces_and_checks():
    g = trace(lambda x: ops.broadcast_to(x, (5, 4)), x=(4,))
    x = _rand(4)
    out = evaluate(g, {"x": x})[g.outputs[0]]
    assert out.shape == (5, 4) and np.array_equal(out, np.tile(x, (5, 1)))


def test_scalar_attribute_is_the_exact_python_float():
    s32 = np.float32(0.1)
    g = trace(lambda x: {"a": x * 0.1, "b": x * s32, "c": x + 3, "d": np.float64(0.3) * x}, x=(2,))
    assert g.node("a").attrs["scalar"] == 0.1 and type(g.node("a").attrs["scalar"]) is float
    assert g.node("b").attrs["scalar"] == float(s32) != 0.1  # the float32 value, exactly
    assert g.node("c").attrs["scalar"] == 3.0 and type(g.node("c").attrs["scalar"]) is float
    assert g.node("d").op == "mul_scalar" and g.node("d").attrs["scalar"] == 0.3
    assert g.canonical().count((0.1).hex()) == 1


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3))
def test_traced_broadcasting_matches_numpy(bs):
    a, b = bs.input_shapes
    g = trace(lambda x, y: x * y - y, x=a, y=b)
    assert g.node(g.outputs[0]).shape == bs.result_shape
    xa, ya = _rand(a, 1), _rand(b, 2)
    np.testing.assert_array_equal(evaluate(g, {"x": xa, "y": ya})[g.outputs[0]], xa * ya - ya)


@given(st.lists(st.integers(2, 4), min_size=1, max_size=3), st.lists(st.integers(5, 6), min_size=1, max_size=3))
def test_broadcast_error_names_node_and_shapes(a, b):
    a, b = tuple(a), tuple(b)
    with pytest.raises(ValueError) as e:
        trace(lambda x, y: x + y, x=a, y=b)
    msg = str(e.value)
    assert "node 'add_0'" in msg and str(a) in msg and str(b) in msg and "broadcast" in msg


@given(hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), st.data())
def test_traced_slicing_matches_numpy(shape, data):
    key = list(
        data.draw(st.one_of(
            st.integers(-d, d - 1),
            st.builds(slice, st.one_of(st.none(), st.integers(-d - 1, d + 1)),
                      st.one_of(st.none(), st.integers(-d - 1, d + 1)),
                      st.one_of(st.none(), st.integers(1, 3))),
        )) for d in shape[: data.draw(st.integers(1, len(shape)))]
    )
    for extra in data.draw(st.lists(st.sampled_from([None, Ellipsis]), max_size=2, unique=True)):
        key.insert(data.draw(st.integers(0, len(key))), extra)  # a new axis / one ellipsis
    if Ellipsis in key:  # ... stands for the axes not indexed
        key = key[: key.index(Ellipsis) + 1] + [k for k in key[key.index(Ellipsis) + 1:] if k is None]
    key = tuple(key)
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    g = trace(lambda x: x[key].reshape(-1) if x[key].shape == () else x[key], x=shape)
    out = evaluate(g, {"x": x})[g.outputs[0]]
    assert np.array_equal(out.reshape(np.shape(x[key])), x[key])
    if x[key].shape != ():
        assert g.node(g.outputs[0]).shape == x[key].shape


def test_names_are_deterministic_and_counted_per_op():
    def f(x, w):
        h = x @ w
        return ops.softmax(h * 0.5 + h * 0.25)

    g1, g2 = trace(f, x=(2, 3), w=(3, 4)), trace(f, x=(2, 3), w=(3, 4))
    assert [n.name for n in g1.nodes] == ["matmul_0", "mul_scalar_0", "mul_scalar_1", "add_0", "softmax_0"]
    assert g1.canonical() == g2.canonical() and g1 == g2
    assert g1.outputs == ["softmax_0"] and g1.name == "f"


def test_user_names_for_outputs_and_intermediates():
    def f(x):
        h = (x + 1.0).named("h")
        y = h * 2.0
        return {"y": y, "y_again": y, "x_out": x}

    g = trace(f, x=(3,))
    assert g.outputs == ["y", "y_again", "x_out"]
    assert g.node("h").op == "add_scalar" and g.node("y").inputs == ("h",)
    # a second name for the same node, and an input as output, become identity reshapes
    assert g.node("y_again").op == "reshape" and g.node("y_again").inputs == ("y",)
    assert g.node("x_out").inputs == ("x",)
    r = evaluate(g, {"x": np.array([1.0, 2, 3])})
    assert r["y"].tolist() == r["y_again"].tolist() == [4.0, 6.0, 8.0] and r["x_out"].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="clash"):
        trace(lambda x: {"x": x + 1.0}, x=(2,))
    with pytest.raises(ValueError, match="more than one node"):
        trace(lambda x: {"a": (x + 1.0).named("z"), "b": (x * 2.0).named("z")}, x=(2,))


def test_str_lists_inputs_every_node_and_outputs():
    g = nl.zoo.layernorm(batch=2, hidden=8)
    s = str(g)
    assert s.splitlines()[0] == "graph layernorm(x: [2, 8], gamma: [8], beta: [8]) -> y"
    assert "  * y: [2, 8] = layer_norm(x, gamma, beta; axis=(1,), eps=1e-05)" in s
    assert len(s.splitlines()) == 1 + len(g.nodes)
    assert "y" in repr(g)


def test_tracing_errors_are_helpful():
    with pytest.raises(ValueError, match=r"node 'matmul_0' \(op 'matmul'\): inner dimensions differ: \(2, 3\) @ \(4, 5\)"):
        trace(lambda x, w: x @ w, x=(2, 3), w=(4, 5))
    with pytest.raises(TypeError, match=r"add: argument 1 is a str, neither a symbolic tensor nor a constant"):
        trace(lambda x: ops.add(x, "1"), x=(3,))
    with pytest.raises(TypeError, match=r"numpy ufunc np.sin is not supported on traced tensors; supported ufuncs: \['absolute'"):
        trace(lambda x: np.sin(x), x=(3,))
    with pytest.raises(TypeError, match=r"numpy function np.cumsum is not supported on traced tensors; supported functions: \["):
        trace(lambda x: np.cumsum(x), x=(3,))
    with pytest.raises(TypeError, match=r"np.sum on traced tensors: argument\(s\) \['dtype'\] are not supported"):
        trace(lambda x: np.sum(x, dtype=np.float32), x=(3,))
    with pytest.raises(TypeError, match=r"symbolic tensor 'x' has no values while tracing: np.asarray"):
        trace(lambda x: np.asarray(x) + 1.0, x=(3,))
    with pytest.raises(TypeError, match=r"np.where on traced tensors needs three arguments"):
        trace(lambda x: np.where(x), x=(3,))
    with pytest.raises(ValueError, match=r"node 'sum_0' \(op 'sum'\): axis=2 is out of range for rank 2"):
        trace(lambda x: x.sum(2), x=(2, 3))
    with pytest.raises(TypeError, match="no truth value"):
        trace(lambda x: x if x else x, x=(2,))
    with pytest.raises(IndexError, match="too many indices"):
        trace(lambda x: x[0, 0], x=(2,))
    with pytest.raises(TypeError, match="use nl.ops.gather"):
        trace(lambda x: x[[0, 1]], x=(2,))
    with pytest.raises(ValueError, match="valid exponents"):
        trace(lambda x: x**3, x=(2,))
    with pytest.raises(TypeError, match="must return a Tensor"):
        trace(lambda x: 3, x=(2,))
    with pytest.raises(TypeError, match=r"trace: <lambda>\(x, w\) cannot take the inputs \['x'\] \(missing a required argument: 'w'\)"):
        trace(lambda x, w: x @ w, x=(2, 3))
    with pytest.raises(TypeError, match="cannot take the inputs"):
        trace(lambda x: x, x=(2,), y=(3,))
    with pytest.raises(TypeError, match=r"shape of input 'x' must be a tuple of non-negative ints, got \(2, -1\)"):
        trace(lambda x: x + 1.0, x=(2, -1))


# ---------------------------------------------------------------------------
# hand-built graphs (importers)
# ---------------------------------------------------------------------------
def test_from_nodes_fills_shapes_and_normalises_attrs():
    g = Graph.from_nodes(
        {"x": (2, 5), "w": (5,)},
        [("m", "mul", ("x", "w")), ("s", "softmax", ["m"], {"axis": -1}),
         {"name": "r", "op": "sum", "inputs": ["s"], "attrs": {"axis": -1}}],
        ["s", "r"],
    )
    assert g.node("s").attrs == {"axis": 1} and g.node("r").attrs == {"axis": (1,), "keepdims": False}
    assert g.node("m").shape == (2, 5) and g.node("r").shape == (2,)
    assert [n.name for n in g.consumers("m")] == ["s"] and g.consumers("r") == []
    out = evaluate(g, {"x": np.ones((2, 5)), "w": np.arange(5.0)})
    np.testing.assert_allclose(out["r"], 1.0, rtol=1e-15)
    assert Graph(g.inputs, g.nodes, g.outputs) == g


def test_graph_validation_errors():
    ins = {"x": (2, 3)}
    with pytest.raises(ValueError, match=r"node 'b' \(add\): input 'c' is neither a graph input nor an earlier node"):
        Graph(ins, [Node("b", "add", ("x", "c")), Node("c", "neg", ("x",))], ["b"])
    with pytest.raises(ValueError, match="'a' is used twice"):
        Graph(ins, [Node("a", "neg", ("x",)), Node("a", "neg", ("x",))], ["a"])
    with pytest.raises(ValueError, match=r"declared shape \(3, 2\) but the inputs \[\(2, 3\)\] give \(2, 3\)"):
        Graph(ins, [Node("a", "neg", ("x",), {}, (3, 2))], ["a"])
    with pytest.raises(TypeError, match=r"node 'a' \(op 'neg'\): takes 1 inputs, got 2"):
        Graph(ins, [Node("a", "neg", ("x", "x"))], ["a"])
    with pytest.raises(ValueError, match="output 'x' is a graph input"):
        Graph(ins, [Node("a", "neg", ("x",))], ["x"])
    with pytest.raises(ValueError, match="output 'zz' is not a node"):
        Graph(ins, [Node("a", "neg", ("x",))], ["zz"])
    with pytest.raises(ValueError, match="at least one output"):
        Graph(ins, [Node("a", "neg", ("x",))], [])
    with pytest.raises(TypeError, match="cannot make a Node"):
        Graph.from_nodes(ins, [("a",)], ["a"])
    with pytest.raises(ValueError, match=r"roles\['x'\]='bias' is not valid; choose one of"):
        Graph(ins, [Node("a", "neg", ("x",))], ["a"], roles={"x": "bias"})
    g = Graph(ins, [Node("a", "neg", ("x",))], ["a"])
    with pytest.raises(ValueError, match=r"no node 'q' in graph"):
        g.node("q")


def test_check_inputs_names_missing_extra_and_shape():
    g = trace(lambda x, y: x + y, x=(2,), y=(2,))
    with pytest.raises(ValueError, match=r"graph 'graph': missing inputs \['y'\]; unexpected inputs \['z'\]; the graph's inputs are \['x', 'y'\]"):
        g.check_inputs({"x": np.ones(2), "z": np.ones(2)})
    with pytest.raises(ValueError, match=r"input 'y' has shape \(3,\); graph 'graph' expects \(2,\)"):
        evaluate(g, {"x": np.ones(2), "y": np.ones(3)})
    with pytest.raises(TypeError, match="input 'x' has dtype <U1"):
        g.check_inputs({"x": np.array(["a", "b"]), "y": np.ones(2)})
    with pytest.raises(TypeError, match="inputs must be a dict"):
        g.check_inputs([np.ones(2)])


def test_nan_and_inf_propagate_in_evaluate():
    g = trace(lambda x: ops.softmax(x * 2.0), x=(2, 3))
    out = evaluate(g, {"x": np.array([[np.nan, 0, 1], [np.inf, 0, 1]])})["softmax_0"]
    assert np.isnan(out).all()  # inf - inf in the max subtraction -> NaN, as IEEE 754 says


# ---------------------------------------------------------------------------
# decomposition
# ---------------------------------------------------------------------------
def test_decompose_names_origins_and_keeps_interface():
    g = nl.zoo.transformer_block()
    d = decompose(g)
    assert d.inputs == g.inputs and d.outputs == g.outputs
    comps = [n for n in g.nodes if n.category == "composite"]
    assert {n.op for n in comps} == {"layer_norm", "rms_norm", "softmax"}
    assert not [n for n in d.nodes if n.category == "composite"]
    for c in comps:
        members = [n for n in d.nodes if n.origin == c.name]
        assert members[-1].name == c.name and all(m.name.startswith(c.name + ".") for m in members[:-1])
        assert d.node(c.name).shape == c.shape
    # non-composite nodes are unchanged
    for n in g.nodes:
        if n.category != "composite":
            assert d.node(n.name) == n
    # only=
    d2 = g.decompose(only="softmax")
    assert {n.op for n in d2.nodes if n.category == "composite"} == {"layer_norm", "rms_norm"}
    with pytest.raises(ValueError, match=r"only=\['gelu'\] are not composite ops; valid: \['layer_norm'"):
        g.decompose(only=["gelu"])
    assert decompose(d) == d  # idempotent


# ---------------------------------------------------------------------------
# canonical form, identical in a fresh process with another hash seed
# ---------------------------------------------------------------------------
_SNIPPET = (
    "import json, numlab as nl\n"
    "print(json.dumps({k: nl.zoo.MODELS[k]().canonical() for k in sorted(nl.zoo.MODELS)}))\n"
)


def test_canonical_form_is_exact_and_process_independent():
    here = {k: nl.zoo.MODELS[k]().canonical() for k in sorted(nl.zoo.MODELS)}
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", _SNIPPET], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == here
    d = json.loads(here["attention_scores"])
    scal = [n for n in d["nodes"] if n["op"] == "mul_scalar"][0]["attrs"]["scalar"]
    assert float.fromhex(scal["float"]) == 0.25


def test_tensor_repr_and_properties():
    seen = {}

    def f(x):
        seen["t"] = x
        return x.mT

    g = trace(f, x=(2, 3, 4))
    t = seen["t"]
    assert isinstance(t, Tensor) and t.ndim == 3 and t.size == 24 and "x" in repr(t)
    assert g.node(g.outputs[0]).attrs["perm"] == (0, 2, 1)


def test_dead_nodes_are_dropped_and_subgraph_cuts():
    g = trace(lambda x: {"y": ops.split(x, 2, axis=0)[1] * 2.0, "z": x.sum()}, x=(4, 3))
    assert [n.name for n in g.nodes] == ["split_1", "y", "z"]  # split_0 is unused
    s = g.subgraph("y")
    assert [n.name for n in s.nodes] == ["split_1", "y"] and s.outputs == ["y"] and s.inputs == {"x": (4, 3)}
    t = nl.zoo.transformer_block()
    sub = t.subgraph(["softmax_0"])
    assert set(sub.inputs) == {"x", "g1", "b1", "w_qkv"} and sub.nodes[-1].name == "softmax_0"
    x = nl.zoo.make_inputs(t, seed=0)
    full = evaluate(t, x, all_values=True)
    part = evaluate(sub, {k: x[k] for k in sub.inputs})
    assert np.array_equal(part["softmax_0"], full["softmax_0"])
    assert t.subgraph(keep_inputs=True) == t
    with pytest.raises(ValueError, match="no node 'nope'"):
        t.subgraph(["nope"])


def test_consumers_in_order_once_each():
    g = trace(lambda x, y: {"a": x * x, "b": x + y, "c": (x * x).sum()}, x=(3,), y=(3,))
    assert [n.name for n in g.consumers("x")] == ["a", "b", "mul_1"]
    assert [n.name for n in g.consumers("y")] == ["b"] and g.consumers("c") == []
    with pytest.raises(ValueError, match="'q' is neither an input nor a node"):
        g.consumers("q")


def test_dict_round_trip_is_exact():
    for name, f in nl.zoo.MODELS.items():
        for g in (f(), decompose(f())):
            back = Graph.from_dict(json.loads(g.canonical()))
            assert back == g and back.name == name
            assert [n.attrs for n in back.nodes] == [n.attrs for n in g.nodes]
    g = trace(lambda x: {"y": ops.gather(x * 0.1, [[1, 0]], axis=0)[..., 1:]}, x=(3, 4))
    assert Graph.from_dict(g.to_dict()).node("mul_scalar_0").attrs["scalar"] == 0.1
    assert Graph.from_dict(g.to_dict()) == g
    with pytest.raises(ValueError, match="not a graph dict"):
        Graph.from_dict({"nodes": []})


# ---------------------------------------------------------------------------
# random programs: the traced graph evaluates like the same program in numpy
# ---------------------------------------------------------------------------
_UNARY = {
    "neg": (lambda t: -t, np.negative), "abs": (abs, np.abs), "tanh": (ops.tanh, np.tanh),
    "exp_tanh": (lambda t: ops.exp(ops.tanh(t)), lambda a: np.exp(np.tanh(a))),
    "sigmoid": (ops.sigmoid, lambda a: 1 / (1 + np.exp(-a))),
    "muls": (lambda t: t * 0.75, lambda a: a * 0.75), "rsubs": (lambda t: 1.5 - t, lambda a: 1.5 - a),
    "sumk": (lambda t: t.sum(-1, keepdims=True), lambda a: a.sum(-1, keepdims=True)),
    "maxk": (lambda t: t.max(0, keepdims=True), lambda a: a.max(0, keepdims=True)),
    "T": (lambda t: t.T.T, lambda a: a), "flipflat": (lambda t: t.reshape(-1).reshape(t.shape), lambda a: a),
    "softmax": (ops.softmax, lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "slice": (lambda t: ops.concat([t[..., :1], t[..., 1:]], axis=-1), lambda a: a),
}
_BINARY = {
    "add": (lambda a, b: a + b), "sub": (lambda a, b: a - b), "mul": (lambda a, b: a * b),
    "max": (lambda a, b: ops.maximum(a, b) if not isinstance(a, np.ndarray) else np.maximum(a, b)),
}


@given(st.lists(st.tuples(st.sampled_from(sorted(_UNARY) + sorted(_BINARY)), st.integers(0, 99), st.integers(0, 99)),
                min_size=1, max_size=12))
def test_random_programs_trace_and_evaluate_like_numpy(plan):
    shape = (3, 4)

    def run(x, y, unary, binary):
        vals = [x, y]
        for op, i, j in plan:
            a, b = vals[i % len(vals)], vals[j % len(vals)]
            vals.append(unary[op](a) if op in unary else binary[op](a, b))
        return vals[2:]

    g = trace(lambda x, y: {f"v{k}": v for k, v in enumerate(run(x, y, {k: f[0] for k, f in _UNARY.items()}, _BINARY))},
              x=shape, y=(1, 4))
    rng = np.random.default_rng(len(plan))
    x, y = rng.standard_normal(shape), rng.standard_normal((1, 4))
    want = run(x, y, {k: f[1] for k, f in _UNARY.items()}, _BINARY)
    got = evaluate(g, {"x": x, "y": y})
    got_d = evaluate(decompose(g), {"x": x, "y": y})
    for k, w in enumerate(want):
        assert got[f"v{k}"].shape == w.shape
        np.testing.assert_allclose(got[f"v{k}"], w, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(got_d[f"v{k}"], w, rtol=1e-12, atol=1e-300)
    assert Graph.from_dict(g.to_dict()) == g
