"""Running (a-posteriori) error bounds propagated through an executed plan.

For every node ``y = f(x_1, ..., x_k)`` of the executed graph we know the
computed values ``y_hat`` and ``x_hat`` (eager: every node; fused: every block
output and, with ``keep_internals``, every block-internal fp32 value) and, by
induction, bounds ``b_i`` with ``|x_hat_i - x_i| <= b_i`` elementwise, where
``x_i`` is the exact value (exact real arithmetic on the S-valued inputs, whose
bounds are 0).  Then, by the triangle inequality,

``|y_hat - y| <= |y_hat - f(x_hat)| + sup_{|t_i - x_hat_i| <= b_i} |f(t) - f(x_hat)|``

* the **local** term is measured: ``f(x_hat)`` is the catalogue's float64
  reference (numlab.ops) on the computed inputs, and the float64 evaluation
  error is accounted for by an explicit slack per operator (correctly rounded
  operations: ``2**-52 |v|``; sums and matrix products: ``(n + 2) 2**-52``
  times the sum of magnitudes; erf/gelu/tanh/sigmoid/silu/exp/log: ``2**-40``
  relative plus an absolute term -- the catalogue documents erf to 1e-13);
* the **propagated** term is bounded by an exact rule per operator:
  ``a +- b``: ``b_a + b_b``; ``a * b``: ``|a| b_b + |b| b_a + b_a b_b``;
  ``a / b``: ``(b_a |b| + |a| b_b) / (|b| (|b| - b_b))`` (inf when
  ``b_b >= |b|``); monotone functions (exp, log, sqrt, rsqrt, reciprocal on
  one side of 0, tanh, sigmoid, erf, cast): the larger change at the two
  endpoints of ``[x - b, x + b]`` (widened outward by one fp64 ulp), inf when
  the interval leaves the domain; gelu and silu: Lipschitz constants 1.13 and
  1.1 (max |gelu'| = 1.1289, max |silu'| = 1.0998); relu, abs, neg, max, min,
  maximum, minimum, data movement: 1-Lipschitz (the bound moves with the
  data); sum/mean: the sum/mean of the bounds; var:
  ``(2/N) sum |x - mean| b + (1/N) sum b^2``; matmul:
  ``|A| b_B + b_A |B| + b_A b_B``; composites (softmax, layer_norm, ...):
  propagated through their decomposition evaluated in float64, with float64
  slack at every primitive.

Overflow and NaN are explicit: a computed ``inf`` (or any sup that overflows)
gives a bound of ``inf`` ("overflow possible"), a computed NaN gives ``inf``
and is counted in ``flags[node]["nan"]``, and an interval that leaves an
operator's domain (log/sqrt/rsqrt of values that may be <= 0, division by an
interval containing 0) gives ``inf`` counted in ``flags[node]["domain"]``.
Every element with a non-NaN computed value satisfies
``|computed - exact| <= bound`` (tested on thousands of hypothesis-generated
models against exact fractions/mpmath references).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .formats import get_format
from .rounding import round_to

__all__ = ["BoundedRun", "run_with_bounds", "bounds_for_result", "propagate", "GELU_LIPSCHITZ",
           "SILU_LIPSCHITZ"]

GELU_LIPSCHITZ = 1.13
SILU_LIPSCHITZ = 1.1
_U64 = 2.0**-53
_TRANS = 2.0**-40  # relative slack of the float64 transcendental references
_TINY = 2.0**-1000  # absolute slack floor of transcendental evaluations
_INFL = 1 + 2.0**-40  # inflation of bound arithmetic done in float64

# float64 reference of these is exact (a selection, sign change or data movement)
_EXACT = {"neg", "abs", "relu", "maximum", "minimum", "where", "max", "min", "cast",
          "reshape", "transpose", "slice", "concat", "split", "broadcast_to", "gather"}
# correctly rounded in float64, no underflow error (exact when subnormal)
_CORRECT_NO_UNDERFLOW = {"add", "sub", "add_scalar", "sub_scalar", "rsub_scalar", "sqrt"}
# correctly rounded in float64, may underflow
_CORRECT_UNDERFLOW = {"mul", "div", "mul_scalar", "div_scalar", "rdiv_scalar"}


@dataclass
class BoundedRun:
    """A run plus its running bounds.

    ``result`` (numlab.execute.RunResult), ``bounds`` (node or input name ->
    float64 bound array), ``values`` (name -> computed float64 values used),
    ``flags`` (node -> {"nan": n, "inf_bound": n, "domain": n}),
    ``reference`` (output -> float64 reference, when computed)."""

    result: object
    bounds: dict
    values: dict
    flags: dict = field(default_factory=dict)
    reference: dict | None = None

    def output_bounds(self) -> dict:
        return {k: self.bounds[k] for k in self.result.graph.outputs}


def _f(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _slack(op: str, v: np.ndarray, ins: list, attrs: dict) -> np.ndarray:
    """Bound on |float64 reference of op at ins - exact op at ins|."""
    av = np.abs(np.where(np.isfinite(v), v, 0.0))
    if op in _EXACT:
        return np.zeros_like(av)
    if op in _CORRECT_NO_UNDERFLOW:
        return 2 * _U64 * av  # fp64 +, -, sqrt: no underflow term (exact when subnormal)
    if op in _CORRECT_UNDERFLOW:
        return 2 * _U64 * av + 2.0**-1074
    if op in ("rsqrt", "reciprocal"):
        return 4 * _U64 * av + 2.0**-1074
    if op in ("sum", "mean"):
        x = np.abs(_f(ins[0]))
        axis = attrs.get("axis")
        n = x.size if axis is None else math.prod(x.shape[a] for a in np.atleast_1d(axis))
        s = np.sum(x, axis=axis, keepdims=attrs.get("keepdims", False))
        if op == "mean":
            s = s / max(n, 1)
        return (n + 2) * 2 * _U64 * s * _INFL + 2.0**-1074
    if op == "var":
        x = _f(ins[0])
        axis = attrs.get("axis")
        n = x.size if axis is None else math.prod(x.shape[a] for a in np.atleast_1d(axis))
        N = max(n - attrs.get("correction", 0), 1)
        m = np.max(np.abs(x), axis=axis, keepdims=attrs.get("keepdims", False)) if x.size else 0.0
        return (4 * n + 16) * 2 * _U64 * 4 * n * m * m / N + 2.0**-1074
    if op == "matmul":
        a, b = np.abs(_f(ins[0])), np.abs(_f(ins[1]))
        k = a.shape[-1]
        return (k + 2) * 2 * _U64 * (a @ b) * _INFL + 2.0**-1074
    if op in ("gelu", "silu", "tanh", "sigmoid", "erf", "exp", "log"):
        extra = np.abs(_f(ins[0])) if op in ("gelu", "silu") else 0.0
        return _TRANS * (av + extra) + _TINY
    return np.full(av.shape, np.inf)  # unknown operator: no claim


def _monotone(fn, x: np.ndarray, b: np.ndarray, lo_ok=None):
    """sup |f(t) - f(x)| over |t - x| <= b for monotone f: the endpoints,
    widened outward by one fp64 ulp; plus evaluation slack by the caller."""
    with np.errstate(all="ignore"):
        lo = np.nextafter(x - b, -np.inf)
        hi = np.nextafter(x + b, np.inf)
        fx, flo, fhi = fn(x), fn(lo), fn(hi)
        d = np.maximum(np.abs(flo - fx), np.abs(fhi - fx))
        d = np.where(b == 0, 0.0, d)
        dom = np.zeros(x.shape, bool) if lo_ok is None else (~lo_ok(lo, hi) & (b > 0))
        d = np.where(dom | np.isnan(d), np.inf, d)
        sl = _TRANS * (np.abs(np.where(np.isfinite(flo), flo, 0)) + np.abs(np.where(np.isfinite(fhi), fhi, 0))
                       + np.abs(np.where(np.isfinite(fx), fx, 0)))
    return d + np.where(b == 0, 0.0, sl), dom


def _prop(op: str, attrs: dict, xs: list, bs: list):
    """Propagated term and domain mask for one primitive operator."""
    from .ops import get_op

    info = get_op(op)
    with np.errstate(all="ignore"):
        if info.category == "data_movement":
            if op == "gather":
                return _f(info.ref(bs[0], *xs[1:], **attrs)), None
            return _f(info.ref(*bs, **attrs)), None
        if op in ("add", "sub"):
            return bs[0] + bs[1], None
        if op in ("maximum", "minimum"):
            return np.maximum(bs[0], bs[1]), None
        if op == "mul":
            return (np.abs(xs[0]) * bs[1] + np.abs(xs[1]) * bs[0] + bs[0] * bs[1]) * _INFL, None
        if op == "div":
            a, b = xs
            ba, bb = bs
            den = np.abs(b) * (np.abs(b) - bb)
            dom = (np.abs(b) <= bb) & ((ba > 0) | (bb > 0))
            r = np.where(dom, np.inf, (ba * np.abs(b) + np.abs(a) * bb) / np.where(den > 0, den, 1.0))
            return np.where((ba == 0) & (bb == 0), 0.0, r) * _INFL, dom
        if op in ("add_scalar", "sub_scalar", "rsub_scalar", "neg", "abs", "relu"):
            return bs[0], None
        if op == "mul_scalar":
            return abs(attrs["scalar"]) * bs[0] * _INFL, None
        if op == "div_scalar":
            return bs[0] / abs(attrs["scalar"]) * _INFL, None
        if op in ("rdiv_scalar", "reciprocal"):
            s = attrs.get("scalar", 1.0)
            x, b = xs[0], bs[0]
            dom = (np.abs(x) <= b) & (b > 0)
            r = abs(s) * b / np.where(dom, 1.0, np.abs(x) * (np.abs(x) - b))
            return np.where(dom, np.inf, np.where(b == 0, 0.0, r * _INFL)), dom
        if op == "where":
            return np.where(_f(xs[0]) != 0, bs[1], bs[2]), None
        if op == "gelu":
            return GELU_LIPSCHITZ * bs[0], None
        if op == "silu":
            return SILU_LIPSCHITZ * bs[0], None
        if op in ("exp", "tanh", "sigmoid", "erf"):
            return _monotone(lambda t: _f(info.ref(t)), xs[0], bs[0])
        if op == "log":
            return _monotone(np.log, xs[0], bs[0], lambda lo, hi: lo > 0)
        if op == "sqrt":
            return _monotone(np.sqrt, xs[0], bs[0], lambda lo, hi: lo >= 0)
        if op == "rsqrt":
            return _monotone(lambda t: 1.0 / np.sqrt(t), xs[0], bs[0], lambda lo, hi: lo > 0)
        if op == "cast":
            to = get_format(attrs["to"])
            return _monotone(lambda t: _f(round_to(_f(t), to)), xs[0], bs[0])
        if op in ("sum", "mean", "max", "min"):
            red = "sum" if op == "sum" else ("mean" if op == "mean" else "max")
            return _f(get_op(red).ref(bs[0], **attrs)) * _INFL, None
        if op == "var":
            x, b = xs[0], bs[0]
            axis, keep, corr = attrs.get("axis"), attrs.get("keepdims", False), attrs.get("correction", 0)
            n = x.size if axis is None else math.prod(x.shape[a] for a in np.atleast_1d(axis))
            N = n - corr
            if N <= 0:
                return np.full(np.shape(info.ref(x, **attrs)), np.inf), None
            mu = np.mean(x, axis=axis, keepdims=True)
            t1 = np.sum(np.abs(x - mu) * b, axis=axis, keepdims=keep)
            t2 = np.sum(b * b, axis=axis, keepdims=keep)
            # |mean| rounding in fp64 shifts |x - mu| by at most n 2**-52 max|x|
            mx = np.max(np.abs(x), axis=axis, keepdims=keep) if x.size else 0.0
            t1 = t1 + np.sum(b, axis=axis, keepdims=keep) * (n + 2) * 2 * _U64 * mx
            return (2 * t1 + t2) / N * (1 + 2.0**-30), None
        if op == "matmul":
            A, B = xs
            bA, bB = bs
            k = A.shape[-1]
            r = np.abs(A) @ bB + bA @ np.abs(B) + bA @ bB
            return r * (1 + (k + 4) * 2 * _U64), None
    return np.full(np.shape(xs[0]), np.inf), None


def _composite_prop(node, xs: list, bs: list):
    """Propagation through a composite's decomposition in float64: returns
    (bound on |f64 chain value - exact f(t)| for |t - x_hat| <= b, f64 value,
    domain count)."""
    from .graph import Graph, Node, decompose, evaluate

    names = [f"in{i}" for i in range(len(xs))]
    g = Graph({n: tuple(np.shape(x)) for n, x in zip(names, xs, strict=True)},
              [Node("out", node.op, tuple(names), dict(node.op_attrs))], ["out"])
    gd = decompose(g)
    with np.errstate(all="ignore"):
        vals = evaluate(gd, dict(zip(names, xs, strict=True)), all_values=True)
    vals = {k: _f(v) for k, v in vals.items()}
    bnd = dict(zip(names, [_f(b) for b in bs], strict=True))
    ndom = 0
    for n in gd.nodes:
        ins = [vals[i] for i in n.inputs]
        ib = [bnd[i] for i in n.inputs]
        p, dom = _prop(n.op, n.op_attrs, ins, ib)
        if dom is not None:
            ndom += int(np.count_nonzero(dom))
        loc = _slack(n.op, vals[n.name], ins, n.op_attrs)
        b = (np.asarray(p) + loc) * _INFL
        bnd[n.name] = np.where(np.isfinite(vals[n.name]), b, np.inf)
    return bnd["out"], vals["out"], ndom


def propagate(graph, values: dict, inputs: dict) -> tuple[dict, dict]:
    """Bounds for every node of ``graph`` given computed ``values`` (node ->
    array) and the exact S-valued ``inputs`` (bound 0).  Returns
    ``(bounds, flags)`` (module docstring)."""
    from .ops import get_op

    vals = {k: _f(v) for k, v in inputs.items()}
    bounds = {k: np.zeros(np.shape(v)) for k, v in inputs.items()}
    flags = {}
    for node in graph.nodes:
        if node.name not in values:
            raise ValueError(
                f"node {node.name!r} has no computed value; run fused modes with keep_internals=True"
            )
        y = _f(values[node.name])
        xs = [vals[i] for i in node.inputs]
        bs = [bounds[i] for i in node.inputs]
        info = get_op(node.op)
        attrs = node.op_attrs
        ndom = 0
        if info.category == "composite":
            p, f64, ndom = _composite_prop(node, xs, bs)
            local = np.abs(y - f64)
        else:
            with np.errstate(all="ignore"):
                f64 = _f(info.ref(*xs, **attrs))
            p, dom = _prop(node.op, attrs, xs, bs)
            if dom is not None:
                ndom = int(np.count_nonzero(dom))
            with np.errstate(all="ignore"):
                local = np.abs(y - f64) + _slack(node.op, f64, xs, attrs)
        with np.errstate(all="ignore"):
            b = (local + np.asarray(p)) * _INFL
        nan = np.isnan(y)
        b = np.where(np.isfinite(y) & np.isfinite(f64) & ~np.isnan(b), b, np.inf)
        b = np.broadcast_to(b, y.shape).copy()
        bounds[node.name] = b
        vals[node.name] = y
        flags[node.name] = {"nan": int(np.count_nonzero(nan)), "inf_bound": int(np.count_nonzero(np.isinf(b))),
                            "domain": ndom}
    return bounds, flags


def bounds_for_result(result, inputs: dict) -> BoundedRun:
    """Running bounds of an executed :class:`numlab.execute.RunResult` (eager:
    values of every node; fused: run with ``keep_internals=True``).  ``inputs``
    are the inputs given to ``run`` (rounded to S here exactly as ``run`` does)."""
    S = result.dtype
    g = result.graph
    ex = {}
    for k in g.inputs:
        v = inputs[k]
        if g.role(k) == "index":
            ex[k] = _f(v)
        else:
            ex[k] = _f(round_to(_f(v), S))
    bounds, flags = propagate(g, result.values, ex)
    return BoundedRun(result, bounds, {**ex, **{k: _f(v) for k, v in result.values.items()}}, flags)


def run_with_bounds(graph, inputs, *, mode: str = "fused", dtype="fp16", reference: bool = True,
                    **kw) -> BoundedRun:
    """Run ``graph`` (``numlab.execute.run``; fused modes keep internals) and
    propagate running bounds.  With ``reference`` also attach the fp64
    reference outputs."""
    from .execute import run

    if mode == "reference":
        raise ValueError("mode='reference' has no rounding to bound; use 'eager', 'fused' or 'emulated_casts'")
    if mode in ("fused", "emulated_casts"):
        kw = {**kw, "keep_internals": True}
    with np.errstate(all="ignore"):
        res = run(graph, inputs, mode=mode, dtype=dtype, **kw)
    br = bounds_for_result(res, inputs)
    if reference:
        with np.errstate(all="ignore"):
            ref = run(graph, inputs, mode="reference", dtype=dtype)
        br.reference = {k: _f(v) for k, v in ref.outputs.items()}
    return br
