"""Running bounds are never violated: hypothesis-generated chains of pointwise,
reduction, composite, data-movement and matmul operators, eager and fused,
checked element by element against an exact reference evaluated with mpmath at
60 digits (test-only scalar loops over tiny tensors)."""

from __future__ import annotations

import dataclasses
import math

import mpmath
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from numlab import bound_rules as R
from numlab import ops, zoo
from numlab import running_bounds as RB
from numlab.execute import run
from numlab.formats import get_format
from numlab.fusion import FusionOptions
from numlab.graph import Graph, Node, trace
from numlab.rounding import round_to

mpmath.mp.dps = 60
SHAPE = (2, 4)

UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "erf", "gelu", "silu", "relu", "softplus", "hardswish",
         "sqrt_abs", "rsqrt_pos", "recip_pos", "log_pos", "mul_scalar", "add_scalar", "div_scalar", "cast_bf16"]
BINARY = ["add", "sub", "mul", "div_pos", "maximum"]
REDUCE = ["sum", "mean", "max", "var"]
COMPOSITE = ["softmax", "layer_norm", "log_softmax", "rms_norm"]
MOVE = ["transpose2", "reshape2"]
ALL = UNARY + BINARY + REDUCE + COMPOSITE + MOVE + ["matmul"]


# ---------------------------------------------------------------- symbolic (graph) side
def _apply_sym(op, x, y, w):
    if op == "neg":
        return -x
    if op == "abs":
        return abs(x)
    if op in ("exp", "tanh", "sigmoid", "erf", "gelu", "silu", "relu", "softplus", "hardswish"):
        return getattr(ops, op)(x)
    if op == "sqrt_abs":
        return ops.sqrt(abs(x))
    if op == "rsqrt_pos":
        return ops.rsqrt(abs(x) + 0.5)
    if op == "recip_pos":
        return ops.reciprocal(abs(x) + 0.25)
    if op == "log_pos":
        return ops.log(abs(x) + 0.125)
    if op == "mul_scalar":
        return x * 0.7
    if op == "add_scalar":
        return x + 1.5
    if op == "div_scalar":
        return x / 3.0
    if op == "cast_bf16":
        return ops.cast(x, "bf16")
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "div_pos":
        return x / (abs(y) + 0.5)
    if op == "maximum":
        return ops.maximum(x, y)
    if op == "sum":
        return x + x.sum(axis=-1, keepdims=True)
    if op == "mean":
        return x - x.mean(axis=-1, keepdims=True)
    if op == "max":
        return x - x.max(axis=-1, keepdims=True)
    if op == "var":
        return x * x.var(axis=-1, keepdims=True)
    if op == "softmax":
        return ops.softmax(x)
    if op == "log_softmax":
        return ops.log_softmax(x)
    if op == "layer_norm":
        return ops.layer_norm(x)
    if op == "rms_norm":
        return ops.rms_norm(x)
    if op == "transpose2":
        return x.transpose(1, 0).transpose(1, 0)
    if op == "reshape2":
        return x.reshape(8).reshape(*SHAPE)
    if op == "matmul":
        return x @ w
    raise AssertionError(op)


def _graph(chain):
    def model(x, y, w):
        h = x
        for op in chain:
            h = _apply_sym(op, h, y, w)
        return {"out": h}

    return trace(model, x=SHAPE, y=SHAPE, w=(SHAPE[1], SHAPE[1]))


# ---------------------------------------------------------------- exact (mpmath) side
M = mpmath.mpf


def _v(f):
    return np.frompyfunc(f, 1, 1)


def _sig(t):
    if t < -12000:
        return M(0) if t < -1e9 else mpmath.exp(t) / (1 + mpmath.exp(t))
    return 1 / (1 + mpmath.exp(-t))


def _row(fn, a):
    return np.array([fn(list(r)) for r in a], dtype=object)


def _mean(r):
    return mpmath.fsum(r) / len(r)


def _var(r):
    m = _mean(r)
    return mpmath.fsum((t - m) ** 2 for t in r) / len(r)


def _apply_exact(op, x, y, w):
    if op == "neg":
        return -x
    if op == "abs":
        return _v(abs)(x)
    if op == "exp":  # beyond e**12000 every format overflows: treat the exact value as +inf
        return _v(lambda t: mpmath.inf if t > 12000 else (M(0) if t < -1e9 else mpmath.exp(t)))(x)
    if op == "tanh":
        return _v(mpmath.tanh)(x)
    if op == "sigmoid":
        return _v(_sig)(x)
    if op == "erf":
        return _v(mpmath.erf)(x)
    if op == "gelu":
        return _v(lambda t: t * (1 + mpmath.erf(t / mpmath.sqrt(2))) / 2)(x)
    if op == "silu":
        return _v(lambda t: t * _sig(t))(x)
    if op == "relu":
        return _v(lambda t: t if t > 0 else M(0))(x)
    if op == "softplus":  # torch's threshold 20: x itself above it
        return _v(lambda t: t if t > 20 else (mpmath.exp(t) if t < -1e9 else mpmath.log1p(mpmath.exp(t))))(x)
    if op == "hardswish":
        return _v(lambda t: t * min(max(t + 3, M(0)), M(6)) / 6)(x)
    if op == "sqrt_abs":
        return _v(lambda t: mpmath.sqrt(abs(t)))(x)
    if op == "rsqrt_pos":
        return _v(lambda t: 1 / mpmath.sqrt(abs(t) + M(0.5)))(x)
    if op == "recip_pos":
        return _v(lambda t: 1 / (abs(t) + M(0.25)))(x)
    if op == "log_pos":
        return _v(lambda t: mpmath.log(abs(t) + M(0.125)))(x)
    if op == "mul_scalar":
        return x * M(0.7)
    if op == "add_scalar":
        return x + M(1.5)
    if op == "div_scalar":
        return x / M(3.0)
    if op == "cast_bf16":
        # the reference of cast keeps the rounding: RNE to bf16 of the exact value
        return _v(lambda t: M(float(round_to(np.float64(_round64(t)), "bf16"))) if mpmath.isfinite(t) else t)(x)
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "div_pos":
        return x / _v(lambda t: abs(t) + M(0.5))(y)
    if op == "maximum":
        return np.array([[max(a, b) for a, b in zip(ra, rb, strict=True)] for ra, rb in zip(x, y, strict=True)],
                        dtype=object)
    if op == "sum":
        return x + _row(mpmath.fsum, x)[:, None]
    if op == "mean":
        return x - _row(_mean, x)[:, None]
    if op == "max":
        return x - _row(max, x)[:, None]
    if op == "var":
        return x * _row(_var, x)[:, None]
    if op == "softmax":
        out = np.empty_like(x)
        for i, r in enumerate(x):
            mx = max(r)
            e = [mpmath.exp(t - mx) for t in r]
            s = mpmath.fsum(e)
            out[i] = [t / s for t in e]
        return out
    if op == "log_softmax":
        out = np.empty_like(x)
        for i, r in enumerate(x):
            mx = max(r)
            ls = mpmath.log(mpmath.fsum(mpmath.exp(t - mx) for t in r)) + mx
            out[i] = [t - ls for t in r]
        return out
    if op == "layer_norm":
        out = np.empty_like(x)
        for i, r in enumerate(x):
            m, v = _mean(r), _var(r)
            d = mpmath.sqrt(v + M(1e-5))
            out[i] = [(t - m) / d for t in r]
        return out
    if op == "rms_norm":
        out = np.empty_like(x)
        for i, r in enumerate(x):
            d = mpmath.sqrt(mpmath.fsum(t * t for t in r) / len(r) + M(1e-6))
            out[i] = [t / d for t in r]
        return out
    if op in ("transpose2", "reshape2"):
        return x
    if op == "matmul":
        return np.array([[mpmath.fsum(x[i, k] * w[k, j] for k in range(SHAPE[1])) for j in range(SHAPE[1])]
                         for i in range(SHAPE[0])], dtype=object)
    raise AssertionError(op)


def _round64(t):
    return float(t)  # the nearest double; only used for cast, whose exact rounding is checked below


def _exact(chain, xs):
    x = np.array([[M(float(v)) for v in r] for r in xs["x"]], dtype=object)
    y = np.array([[M(float(v)) for v in r] for r in xs["y"]], dtype=object)
    w = np.array([[M(float(v)) for v in r] for r in xs["w"]], dtype=object)
    h = x
    for op in chain:
        h = _apply_exact(op, h, y, w)
    return h


# ---------------------------------------------------------------- inputs
def _inputs(seed, kind, S):
    rng = np.random.default_rng(seed)
    out = {}
    for k, shp in (("x", SHAPE), ("y", SHAPE), ("w", (SHAPE[1], SHAPE[1]))):
        if kind == "normal":
            a = rng.standard_normal(shp)
        elif kind == "wide":
            a = rng.standard_normal(shp) * 10.0 ** rng.integers(-6, 4, shp)
        elif kind == "special":
            a = rng.choice([0.0, -0.0, 1.0, -1.0, S.smallest_subnormal, 3 * S.smallest_subnormal, S.max / 4,
                            -S.max / 8, 2.0**-14, 1000.0, -7.5], shp)
        else:  # shifted
            a = 32 + 0.25 * rng.standard_normal(shp)
        out[k] = np.asarray(round_to(a, S), dtype=np.float64)
    return out


def _check(chain, xs, dtype, mode, fusion=None):
    S = get_format(dtype)
    g = _graph(chain)
    kw = {}
    if mode == "fused":
        kw["fusion"] = fusion or FusionOptions()
    br = RB.run_with_bounds(g, xs, mode=mode, fmt=S, reference=False, **kw)
    got = br.result.outputs["out"].astype(np.float64)
    b = br.bounds["out"]
    ex = _exact(chain, xs)
    n_checked = 0
    for idx in np.ndindex(got.shape):
        c, yv, bb = ex[idx], got[idx], b[idx]
        if math.isnan(yv):
            assert math.isinf(bb) and br.flags[g.outputs[0]]["nan"] > 0
            continue
        if not mpmath.isfinite(c):
            assert math.isinf(bb), (chain, idx, c, yv, bb)
            continue
        if math.isinf(bb):
            continue
        err = abs(M(yv) - c)
        assert err <= M(bb), (chain, mode, idx, float(c), yv, bb, float(err))
        n_checked += 1
    return n_checked, br


@settings(max_examples=1200, phases=[Phase.explicit, Phase.generate])
@given(st.lists(st.sampled_from(ALL), min_size=1, max_size=4), st.integers(0, 2**31 - 1),
       st.sampled_from(["normal", "wide", "special", "shifted"]), st.sampled_from(["fp16", "bf16"]),
       st.sampled_from(["eager", "fused"]))
def test_running_bound_never_violated(chain, seed, kind, dtype, mode):
    xs = _inputs(seed, kind, get_format(dtype))
    _check(chain, xs, dtype, mode)


@settings(max_examples=100)
@given(st.lists(st.sampled_from(UNARY + BINARY + REDUCE + ["layer_norm", "softmax"]), min_size=2, max_size=5),
       st.integers(0, 2**31 - 1))
def test_running_bound_inductor_fusion_fp16(chain, seed):
    xs = _inputs(seed, "normal", get_format("fp16"))
    _check(chain, xs, "fp16", "fused", FusionOptions.inductor())


def test_bounds_are_not_vacuous_and_overflow_is_inf():
    S = get_format("fp16")
    xs = _inputs(1, "normal", S)
    n, br = _check(["mul", "add", "gelu", "mul_scalar"], xs, "fp16", "fused")
    assert n == 8
    b = br.bounds["out"]
    assert np.all(np.isfinite(b)) and b.max() < 0.01  # a few fp16 ulps, not a vacuous bound
    # overflow: exp of large fp16 values is inf in fp16 -> the bound is inf and counted
    xs2 = {**xs, "x": np.full(SHAPE, 20.0)}
    _, br2 = _check(["exp"], xs2, "fp16", "eager")
    assert np.all(np.isinf(br2.bounds["out"])) and br2.flags["out"]["inf_bound"] == 8
    # exact cancellation: x + y == 0 exactly (bound 0), so sqrt(|.|) stays finite
    xs3 = {**xs, "x": np.full(SHAPE, 1e-3), "y": np.full(SHAPE, -1e-3)}
    xs3 = {k: np.asarray(round_to(v, S), dtype=np.float64) for k, v in xs3.items()}
    g = _graph(["add", "sqrt_abs"])
    br3 = RB.run_with_bounds(g, xs3, mode="eager", fmt="fp16")
    assert np.all(br3.bounds["out"] == 0)
    # domain: sqrt of a value whose uncertainty interval reaches below 0 -> inf, counted as domain
    g5 = trace(lambda x, y, w: {"out": ops.sqrt(x * 0.1 - 0.05)}, x=SHAPE, y=SHAPE, w=(4, 4))
    br5 = RB.run_with_bounds(g5, {**xs, "x": np.full(SHAPE, 0.5)}, mode="eager", fmt="fp16")
    assert br5.flags["out"]["domain"] == 8 and np.all(np.isinf(br5.bounds["out"]))
    # NaN flagged: log of a negative computed value
    g4 = trace(lambda x, y, w: {"out": ops.log(x)}, x=SHAPE, y=SHAPE, w=(4, 4))
    br4 = RB.run_with_bounds(g4, {**xs, "x": np.full(SHAPE, -1.0)}, mode="eager", fmt="fp16")
    assert br4.flags["out"]["nan"] == 8 and np.all(np.isinf(br4.bounds["out"]))


def test_fused_needs_internals():
    g = _graph(["mul", "exp"])
    xs = _inputs(0, "normal", get_format("fp16"))
    res = run(g, xs, mode="fused", fmt="fp16")
    if set(n.name for n in res.graph.nodes) <= set(res.values):
        pytest.skip("this fused plan dumps every node without keep_internals")
    with pytest.raises(ValueError, match="keep_internals"):
        RB.bounds_for_result(res, xs)


# ---------------------------------------------------------------- rules table, finiteness, no_rule


def test_every_catalogue_op_has_a_bound_rule():
    # rules_for reads each operator's registration (numlab.ops refuses an operator without rules)
    missing = sorted(op for op in ops.CATALOGUE if RB.rules_for(op) is None)
    assert not missing, f"operators without running-bound rules: {missing}"
    for op, info in ops.CATALOGUE.items():
        slack, prop = RB.rules_for(op)
        assert (slack, prop) == (info.slack, info.propagate)
        assert callable(slack) and callable(prop)
        # only composites may go through their decomposition (softmax has a rule of its own)
        if R.is_decomposed((slack, prop)):
            assert info.category == "composite" and info.decompose is not None, op
    assert not hasattr(R, "RULES") and not hasattr(R, "rules_for")  # one table: the registry
    with pytest.raises(TypeError, match="composite"):
        R.propagate_decomposed([np.zeros(2)], [np.zeros(2)], {}, None)
    with pytest.raises(ValueError, match="unknown op 'conv2d'"):
        RB.rules_for("conv2d")


def _without_rule(monkeypatch, op, field="propagate"):
    """Remove one rule from ``op``'s registration for a test (registering an
    operator without rules is refused, so this is the only way to get one)."""
    monkeypatch.setitem(ops.CATALOGUE, op, dataclasses.replace(ops.CATALOGUE[op], **{field: None}))


# The one zoo case whose running bound is inf on normal inputs, and why: in bf16 the worst-case
# bound through the decomposed attention softmax (exp / sum loses their correlation) reaches the
# size of the values, so the decomposed rms_norm's rsqrt interval reaches 0 (a real domain inf,
# not a missing rule).  Claims resting on it are undecided.
KNOWN_INF = {("bf16", "fused", "transformer_block"): [("rsqrt", {"domain": 8})]}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("mode", ["eager", "fused"])
def test_bounds_finite_on_normal_zoo_inputs(dtype, mode):
    # every operator in every zoo model: share of finite bounds == 1 on the "normal" inputs
    seen = set()
    for name, build in zoo.MODELS.items():
        g = build()
        xs = zoo.make_inputs(g, kind="normal", seed=0, fmt=dtype)
        # fused with composites decomposed, so the bounds run through their primitives
        kw = {"fusion": FusionOptions.parse("autofuse+decompose")} if mode == "fused" else {}
        br = RB.run_with_bounds(g, xs, mode=mode, fmt=dtype, reference=False, **kw)
        if (dtype, mode, name) in KNOWN_INF:
            assert [(s["op"], s["causes"]) for s in br.inf_sources()] == KNOWN_INF[dtype, mode, name]
            continue
        for node in br.result.graph.nodes:
            b = br.bounds[node.name]
            share = float(np.mean(np.isfinite(b))) if b.size else 1.0
            assert share == 1.0, (name, node.name, node.op, share, br.flags[node.name])
            assert br.flags[node.name]["inf_bound"] == 0 and br.flags[node.name]["op"] == node.op
            seen.add(node.op)
        assert br.inf_sources() == []
    assert len(seen) >= 10  # the zoo exercises a real mix of operators


def test_op_without_rule_gives_inf_flagged_no_rule(monkeypatch):
    # an operator whose rule was removed from its registration: inf bounds, flagged, never silent
    _without_rule(monkeypatch, "gelu")
    g = _graph(["mul", "gelu", "mul_scalar"])
    xs = _inputs(0, "normal", get_format("fp16"))
    br = RB.run_with_bounds(g, xs, mode="eager", fmt="fp16", reference=False)
    gelu = next(n.name for n in g.nodes if n.op == "gelu")
    assert np.all(np.isinf(br.bounds[gelu])) and br.flags[gelu]["causes"] == {"no_rule": 8}
    out = g.outputs[0]
    assert np.all(np.isinf(br.bounds[out])) and br.flags[out]["causes"] == {"inherited": 8}
    src = br.inf_sources()
    assert src == [{"node": gelu, "op": "gelu", "causes": {"no_rule": 8}}]
    # a primitive inside a composite's decomposition without a rule: the composite is flagged no_rule
    _without_rule(monkeypatch, "exp", "slack")
    g2 = _graph(["log_softmax"])
    br2 = RB.run_with_bounds(g2, xs, mode="eager", fmt="fp16", reference=False)
    (s,) = br2.inf_sources()
    assert s["op"] == "log_softmax" and s["causes"] == {"no_rule": 8}


def test_inf_causes_overflow_domain_nan():
    S = get_format("fp16")
    xs = _inputs(1, "normal", S)
    _, br = _check(["exp"], {**xs, "x": np.full(SHAPE, 20.0)}, "fp16", "eager")
    (s,) = br.inf_sources()
    assert s["op"] == "exp" and s["causes"] == {"overflow": 8}
    g5 = trace(lambda x, y, w: {"out": ops.sqrt(x * 0.1 - 0.05)}, x=SHAPE, y=SHAPE, w=(4, 4))
    br5 = RB.run_with_bounds(g5, {**xs, "x": np.full(SHAPE, 0.5)}, mode="eager", fmt="fp16")
    assert [(s["op"], s["causes"]) for s in br5.inf_sources()] == [("sqrt", {"domain": 8})]
    g4 = trace(lambda x, y, w: {"out": ops.log(x)}, x=SHAPE, y=SHAPE, w=(4, 4))
    br4 = RB.run_with_bounds(g4, {**xs, "x": np.full(SHAPE, -1.0)}, mode="eager", fmt="fp16")
    assert [(s["op"], s["causes"]) for s in br4.inf_sources()] == [("log", {"nan": 8})]


# one-node graphs of every catalogue operator on ordinary inputs: (inputs, attrs); "+" marks a
# positive input (|N(0,1)| + 0.5) for operators whose domain needs it
_V = (4, 8)
OP_CASES = {
    "cast": (("x",), {"to": "bf16"}),
    "add": (("x", "y"), {}), "sub": (("x", "y"), {}), "mul": (("x", "y"), {}), "div": (("x", "+y"), {}),
    "add_alpha": (("x", "y"), {"alpha": 0.7}),
    "maximum": (("x", "y"), {}), "minimum": (("x", "y"), {}),
    "add_scalar": (("x",), {"scalar": 1.5}), "sub_scalar": (("x",), {"scalar": 1.5}),
    "rsub_scalar": (("x",), {"scalar": 1.5}), "mul_scalar": (("x",), {"scalar": 0.7}),
    "div_scalar": (("x",), {"scalar": 3.0}), "rdiv_scalar": (("+x",), {"scalar": 2.0}),
    "where": (("c", "x", "y"), {}),
    "log": (("+x",), {}), "log1p": (("+x",), {}), "sqrt": (("+x",), {}), "rsqrt": (("+x",), {}), "reciprocal": (("+x",), {}),
    "sum": (("x",), {"axis": -1}), "mean": (("x",), {"axis": -1}), "max": (("x",), {"axis": -1}),
    "min": (("x",), {"axis": -1}), "var": (("x",), {"axis": -1}),
    "reshape": (("x",), {"shape": (8, 4)}), "transpose": (("x",), {}),
    "slice": (("x",), {"begin": (1, 2), "end": (3, 7), "step": (1, 2)}),
    "concat": (("x", "y"), {"axis": 1}), "split": (("x",), {"axis": 1, "sizes": (3, 5), "index": 1}),
    "broadcast_to": (("x",), {"shape": (2, 4, 8)}), "gather": (("x",), {"axis": 1, "indices": [0, 7, 3]}),
    "matmul": (("x", "w"), {}),
    "softmax": (("x",), {}), "log_softmax": (("x",), {}),
    "layer_norm": (("x", "g", "b"), {}), "rms_norm": (("x", "g"), {}),
    # comparisons and constants (numlab.ops)
    **{c: (("x", "y"), {}) for c in ("gt", "ge", "lt", "le", "eq", "ne")},
    "constant": ((), {"value": [[0.1, -2.5, 3.0, 1e-3]] * 4}),
    # block-scaled operators (numlab.kernels.scaled presets; shapes split into their blocks)
    "quantize": (("z",), {"fmt": "deepseek_1x128"}), "block_scale": (("z",), {"fmt": "mxfp4"}),
    "dequantize": (("z", "+s"), {"fmt": "deepseek_1x128"}),
    "scaled_matmul": (("z", "+s", "u", "+t"), {"fmt_a": "deepseek_1x128", "fmt_b": "deepseek_128x128"}),
}
_SHAPES = {"x": _V, "y": _V, "c": _V, "w": (8, 8), "g": (8,), "b": (8,),
           "z": (4, 128), "s": (4, 1), "u": (128, 128), "t": (1, 1)}


def _one_node(op, dtype, seed=0):
    ins, attrs = OP_CASES.get(op, (("x",), {}))
    rng = np.random.default_rng([seed, len(op)])
    names = [i.lstrip("+") for i in ins]
    vals = {}
    for spec, name in zip(ins, names, strict=True):
        v = rng.standard_normal(_SHAPES[name])
        if name == "c":
            v = (v > 0).astype(np.float64)
        if spec.startswith("+"):
            v = np.abs(v) + 0.5
        vals[name] = np.asarray(round_to(v, get_format(dtype)), dtype=np.float64)
    g = Graph({n: _SHAPES[n] for n in names}, [Node("out", op, tuple(names), attrs)], ["out"])
    return g, vals


@pytest.mark.parametrize("op", sorted(ops.CATALOGUE))
def test_each_operator_bound_finite_on_ordinary_inputs(op):
    for dtype in ("fp16", "bf16"):
        g, xs = _one_node(op, dtype)
        for mode, kw in (("eager", {}), ("fused", {"fusion": FusionOptions()})):
            br = RB.run_with_bounds(g, xs, mode=mode, fmt=dtype, reference=True, **kw)
            b = br.bounds["out"]
            assert b.size and float(np.mean(np.isfinite(b))) == 1.0, (op, dtype, mode, br.flags)
            assert br.inf_sources() == []
            # and the bound covers the float64 reference's distance (a sanity check, the exact
            # check is test_running_bound_never_violated)
            y = br.result.outputs["out"].astype(np.float64)
            assert np.all(np.abs(y - br.reference["out"]) <= b), (op, dtype, mode)


# ---------------------------------------------------------------- softplus and hardswish (one registration each)
_EDGE = [-20.0, -3.0, -2.984375, 0.0, -0.0, 2.984375, 3.0, 19.984375, 20.0, 20.015625, 20.5, 32.0]


@settings(max_examples=600, phases=[Phase.explicit, Phase.generate])
@given(st.lists(st.one_of(st.floats(-40, 40, allow_nan=False, width=16), st.sampled_from(_EDGE)),
                min_size=8, max_size=8),
       st.sampled_from(["softplus", "hardswish"]),
       st.sampled_from([None, "mul_scalar", "add_scalar", "silu", "mul"]),
       st.sampled_from(["fp16", "bf16"]), st.sampled_from(["eager", "fused"]), st.integers(0, 2**31 - 1))
def test_softplus_hardswish_bounds_cover_the_exact_value(vals, op, pre, dtype, mode, seed):
    # the new operators alone and behind an operator that gives their input a non-zero bound,
    # against mpmath's exact value (softplus around its threshold 20, hardswish around +-3)
    S = get_format(dtype)
    xs = _inputs(seed, "normal", S)
    xs["x"] = np.asarray(round_to(np.array(vals, dtype=np.float64).reshape(SHAPE), S), dtype=np.float64)
    chain = [op] if pre is None else [pre, op]
    n, br = _check(chain, xs, dtype, mode)
    assert n == 8 or pre is not None  # alone, every element is finite and checked


def test_softplus_hardswish_bounds_finite_and_tight_on_ordinary_inputs():
    for op in ("softplus", "hardswish"):
        for dtype in ("fp16", "bf16"):
            S = get_format(dtype)
            xs = _inputs(3, "normal", S)
            for mode in ("eager", "fused"):
                n, br = _check(["mul", op], xs, dtype, mode)
                b = br.bounds["out"]
                assert n == 8 and np.all(np.isfinite(b))
                # a few S ulps of values of size ~1, not a vacuous bound
                assert b.max() < 64 * 2.0 ** (1 - S.p), (op, dtype, mode, b.max())


def test_softplus_rule_covers_the_jump_at_the_threshold():
    # softplus (torch's threshold 20) drops by log1p(exp(-20)) just above 20: with x = 20 and a bound
    # b below that jump, the sup over [20 - b, 20 + b] is the jump itself (t -> 20+), which the
    # interval ends alone miss; propagate_softplus adds it
    info = ops.CATALOGUE["softplus"]
    jump = mpmath.log1p(mpmath.exp(-20))
    x, b = np.array([20.0]), np.array([1e-9])
    p, dom = info.propagate([x], [b], {}, info.ref)
    assert dom is None or not dom.any()
    assert M(float(p[0])) >= jump
    p_ends, _ = R.propagate_monotone_ref([x], [b], {}, info.ref)
    assert M(float(p_ends[0])) < jump
    # away from the threshold the two rules agree
    for xv in (0.5, -4.0, 25.0):
        a = info.propagate([np.array([xv])], [np.array([1e-3])], {}, info.ref)[0]
        c = R.propagate_monotone_ref([np.array([xv])], [np.array([1e-3])], {}, info.ref)[0]
        assert a == c, xv


# ---------------------------------------------------------------- add_alpha and softplus's beta/threshold
_SP_ATTRS = {"beta": 2.0, "threshold": 5.0}  # the switch at x = threshold / beta = 2.5
_SP_EDGE = [2.5, 2.498046875, 2.501953125, 2.4921875, 2.5078125, 0.0, -2.5, 10.0, -10.0, 2.0, 3.0]


def _sp_exact(t, beta=2.0, threshold=5.0):
    beta, threshold = M(beta), M(threshold)
    return t if beta * t > threshold else mpmath.log1p(mpmath.exp(beta * t)) / beta


def _check_nodes(nodes, xs, dtype, mode, exact):
    """A graph of ``nodes`` (inputs x, y; output ``out``) run with bounds: every finite
    element's error against ``exact`` (mpmath values) is within its bound."""
    g = Graph({"x": SHAPE, "y": SHAPE}, nodes, ["out"])
    kw = {"fusion": FusionOptions()} if mode == "fused" else {}
    br = RB.run_with_bounds(g, xs, mode=mode, fmt=dtype, reference=False, **kw)
    got = br.result.outputs["out"].astype(np.float64)
    b = br.bounds["out"]
    n = 0
    for idx in np.ndindex(got.shape):
        c, yv, bb = exact[idx], got[idx], b[idx]
        assert not math.isnan(yv), (idx, yv)
        if not mpmath.isfinite(c) or math.isinf(bb):
            assert math.isinf(bb), (idx, c, yv, bb)
            continue
        assert abs(M(yv) - c) <= M(bb), (nodes, mode, dtype, idx, float(c), yv, bb)
        n += 1
    return n, br


def _mp(a):
    return np.array([[M(float(v)) for v in r] for r in a], dtype=object)


@settings(max_examples=300, phases=[Phase.explicit, Phase.generate])
@given(st.sampled_from([0.7, -1.0, -0.3, 2.5, 1e-3, -1.5]), st.booleans(),
       st.sampled_from(["normal", "wide", "shifted"]),
       st.sampled_from(["fp16", "bf16"]), st.sampled_from(["eager", "fused"]), st.integers(0, 2**31 - 1))
def test_add_alpha_bound_covers_the_exact_value(alpha, pre, kind, dtype, mode, seed):
    # x + alpha*y alone and behind x*y (an input with a non-zero bound), against mpmath
    S = get_format(dtype)
    xs = _inputs(seed, kind, S)
    xs = {"x": xs["x"], "y": xs["y"]}
    nodes = [Node("out", "add_alpha", ("x", "y"), {"alpha": alpha})]
    X, Y = _mp(xs["x"]), _mp(xs["y"])
    if pre:
        nodes = [Node("p", "mul", ("x", "y"), {}), Node("out", "add_alpha", ("p", "y"), {"alpha": alpha})]
        X = X * Y
    n, _ = _check_nodes(nodes, xs, dtype, mode, X + M(alpha) * Y)
    assert n == 8 or kind == "wide"  # wide inputs may overflow S


@settings(max_examples=300, phases=[Phase.explicit, Phase.generate])
@given(st.lists(st.one_of(st.floats(-12, 12, allow_nan=False, width=16), st.sampled_from(_SP_EDGE)),
                min_size=8, max_size=8),
       st.booleans(), st.sampled_from(["fp16", "bf16"]), st.sampled_from(["eager", "fused"]),
       st.integers(0, 2**31 - 1))
def test_softplus_beta_threshold_bound_covers_the_exact_value(vals, pre, dtype, mode, seed):
    # softplus(beta=2, threshold=5) around its switch at 2.5, alone and behind x*0.7
    S = get_format(dtype)
    xs = _inputs(seed, "normal", S)
    xs = {"x": np.asarray(round_to(np.array(vals, dtype=np.float64).reshape(SHAPE), S), dtype=np.float64),
          "y": xs["y"]}
    X = _mp(xs["x"])
    if pre:
        nodes = [Node("p", "mul_scalar", ("x",), {"scalar": 0.7}), Node("out", "softplus", ("p",), _SP_ATTRS)]
        X = X * M(0.7)
    else:
        nodes = [Node("out", "softplus", ("x",), _SP_ATTRS)]
    n, _ = _check_nodes(nodes, xs, dtype, mode, _v(_sp_exact)(X))
    assert n == 8


def test_softplus_rule_covers_the_jump_with_beta_and_threshold():
    # softplus(beta=2, threshold=5) drops by log1p(exp(-5)) / 2 just above x = 2.5 (about 3.4e-3,
    # larger than torch's defaults' jump): with x = 2.5 and a bound below the jump the sup over
    # [2.5 - b, 2.5 + b] is the jump itself, which the interval ends alone miss
    info = ops.CATALOGUE["softplus"]
    attrs = dict(_SP_ATTRS)
    jump = mpmath.log1p(mpmath.exp(-5)) / 2
    x, b = np.array([2.5]), np.array([1e-9])
    p, dom = info.propagate([x], [b], attrs, info.ref)
    assert dom is None or not dom.any()
    assert M(float(p[0])) >= jump
    # the jump of the exact function, seen from both sides of the switch
    lo, hi = M(2.5) - M(1e-9), M(2.5) + M(1e-9)
    assert _sp_exact(lo) - _sp_exact(hi) > jump - M(1e-8)
    p_ends, _ = R.propagate_monotone_ref([x], [b], attrs, info.ref)
    assert M(float(p_ends[0])) < jump
    # the switch is at threshold / beta, not at torch's 20: no jump term around 20 here
    for xv in (0.5, -4.0, 20.0, 25.0):
        a = info.propagate([np.array([xv])], [np.array([1e-3])], attrs, info.ref)[0]
        c = R.propagate_monotone_ref([np.array([xv])], [np.array([1e-3])], attrs, info.ref)[0]
        assert a == c, xv


def test_hardswish_rule_is_its_lipschitz_constant():
    info = ops.CATALOGUE["hardswish"]
    b = np.array([1e-3, 0.0, 2.0])
    p, dom = info.propagate([np.array([2.9, 0.0, -10.0])], [b], {}, info.ref)
    assert dom is None and np.all(p >= 1.5 * b) and np.all(p <= 1.5 * b * (1 + 2.0**-30))
    # attained: the slope just below 3 is (2*3 + 3)/6 = 1.5
    t0, t1 = M(2.999), M(2.998)
    f = lambda t: t * min(max(t + 3, M(0)), M(6)) / 6  # noqa: E731
    assert abs(f(t0) - f(t1)) / (t0 - t1) > M(1.499)
