"""numlab's trace enclosure: running (a-posteriori) error bounds of numlab's own executed plan.

This is a self-check of numlab's run, not a bound other kernels must meet:
the local terms are measured on numlab's intermediate values, so a correct
kernel that rounds differently can exceed it.  The bound every implementation
of a contract meets is :func:`numlab.bounds.contract_bound`
(:mod:`numlab.contract_bounds`); the claim ``trace_enclosure`` checks this one.

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
  times the sum of magnitudes; erf/gelu/tanh/sigmoid/silu/exp/log/softplus: ``2**-40``
  relative plus an absolute term -- the catalogue documents erf to 1e-13);
* the **propagated** term is bounded by an exact rule per operator:
  ``a +- b``: ``b_a + b_b``; ``a * b``: ``|a| b_b + |b| b_a + b_a b_b``;
  ``a / b``: ``(b_a |b| + |a| b_b) / (|b| (|b| - b_b))`` (inf when
  ``b_b >= |b|``); monotone functions (exp, log, sqrt, rsqrt, reciprocal on
  one side of 0, tanh, sigmoid, erf, cast): the larger change at the two
  endpoints of ``[x - b, x + b]`` (widened outward by one fp64 ulp), inf when
  the interval leaves the domain; softplus: the same plus twice its jump at
  torch's threshold 20 (``log1p(exp(-20))``) when the interval contains 20
  and a point above; gelu, silu and hardswish: Lipschitz constants 1.13,
  1.1 and 1.5 (max |gelu'| = 1.1289, max |silu'| = 1.0998, max
  |hardswish'| = 1.5); relu, abs, neg, max, min,
  maximum, minimum, data movement: 1-Lipschitz (the bound moves with the
  data); sum/mean: the sum/mean of the bounds; var:
  ``(2/N) sum |x - mean| b + (1/N) sum b^2``; matmul:
  ``|A| b_B + b_A |B| + b_A b_B``; softmax: each output moves by at most
  ``softmax(x) expm1(2B)`` (``B`` the row's largest input bound, capped at
  1); the other composites (log_softmax, layer_norm, rms_norm): propagated
  through their decomposition evaluated in float64, with float64 slack at
  every primitive.

The per-operator rules are named functions of :mod:`numlab.bound_rules`;
each operator's registration in :mod:`numlab.ops` names its pair
(``OpInfo.slack`` / ``OpInfo.propagate``) and :func:`rules_for` reads it
from there.

Overflow and NaN are explicit: a computed ``inf`` (or any sup that overflows)
gives a bound of ``inf`` ("overflow possible"), a computed NaN gives ``inf``
and is counted in ``flags[node]["nan"]``, an interval that leaves an
operator's domain (log/sqrt/rsqrt of values that may be <= 0, division by an
interval containing 0) gives ``inf`` counted in ``flags[node]["domain"]``,
and an operator without a rule gives ``inf`` counted in
``flags[node]["causes"]["no_rule"]``; :func:`inf_sources` names the nodes where inf
bounds originate and why (claims report runs that rest on them as
undecided).
Every element with a non-NaN computed value satisfies
``|computed - exact| <= bound`` (tested on thousands of hypothesis-generated
models against exact fractions/mpmath references).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import bound_rules as R
from ._repr import Compact, mapping_summary
from .execute import run as _run
from .formats import get_format
from .graph import Graph, Node, decompose, evaluate
from .ops import get_op
from .rounding import round_to

__all__ = ["BoundedRun", "run_with_bounds", "bounds_for_result", "propagate", "rules_for", "inf_sources",
           "GELU_LIPSCHITZ", "SILU_LIPSCHITZ", "CAUSES"]

GELU_LIPSCHITZ = R.GELU_LIPSCHITZ
SILU_LIPSCHITZ = R.SILU_LIPSCHITZ
_INFL = R.INFL

#: why a node has inf bounds: the operator (or a primitive of its
#: decomposition) has no bound rule; an input interval leaves the operator's
#: domain; an input's bound is already inf (not this node's doing); the
#: computed value is NaN; the computed value, the float64 reference or the
#: bound overflows.
CAUSES = ("no_rule", "domain", "inherited", "nan", "overflow")


@dataclass(repr=False)
class BoundedRun(Compact):
    """A run plus its running bounds.

    ``result`` (numlab.execute.RunResult), ``bounds`` (node or input name ->
    float64 bound array), ``values`` (name -> computed float64 values used),
    ``flags`` (node -> {"op", "nan": NaN elements, "inf_bound": inf
    elements, "domain": interval failures, "causes": {cause: inf elements}}
    (:data:`CAUSES`)),
    ``reference`` (output -> float64 reference, when computed)."""

    result: object
    bounds: dict
    values: dict
    flags: dict = field(default_factory=dict)
    reference: dict | None = None

    def output_bounds(self) -> dict:
        return {k: self.bounds[k] for k in self.result.graph.outputs}

    def inf_sources(self) -> list:
        """The nodes where inf bounds originate (:func:`inf_sources`)."""
        return inf_sources(self.flags)

    def _repr_facts(self):
        r = self.result
        inf = self.inf_sources()
        rows = [("output bounds", mapping_summary(self.output_bounds())),
                ("bounds", f"{len(self.bounds)} nodes and inputs"), ("values", f"{len(self.values)} arrays"),
                ("inf sources", f"{len(inf)}: " + ", ".join(f"{s['op']} ({s['node']})" for s in inf[:6])
                 if inf else "none"),
                ("reference", mapping_summary(self.reference) if self.reference is not None else None)]
        return f"BoundedRun: mode {r.mode}, fmt {r.fmt.name}", rows


def inf_sources(flags: dict) -> list:
    """From running-bound ``flags``: one dict per node whose inf bounds are its
    own doing (any cause but ``inherited``), in graph order: ``{"node", "op",
    "causes": {cause: elements}}``."""
    out = []
    for name, f in flags.items():
        causes = {c: n for c, n in f.get("causes", {}).items() if c != "inherited"}
        if causes:
            out.append({"node": name, "op": f.get("op"), "causes": causes})
    return out


def _f(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def rules_for(op: str):
    """The (slack, propagate) rules of ``op``: its registration's
    ``OpInfo.slack`` / ``OpInfo.propagate`` (functions of numlab.bound_rules).
    None when either is missing -- impossible for a registered operator
    (numlab.ops refuses one without rules) but kept so that an operator whose
    rule was removed (a test patching ``ops.CATALOGUE``) gives flagged inf
    bounds (``no_rule``), never a silent pass.  The one place running_bounds
    looks rules up."""
    info = get_op(op)
    if info.slack is None or info.propagate is None:
        return None
    return info.slack, info.propagate


def _primitive(op: str, attrs: dict, xs: list, bs: list, v=None):
    """(propagated term, domain mask, slack at the float64 reference ``v``)
    of a primitive op; (inf, None, inf) and no_rule when ``op`` has no rule."""
    rule = rules_for(op)
    if rule is None or R.is_decomposed(rule):
        shape = np.shape(v) if v is not None else np.shape(xs[0])
        return np.full(shape, np.inf), None, np.full(shape, np.inf), True
    slack, prop = rule
    info = get_op(op)
    with np.errstate(all="ignore"):
        p, dom = prop(xs, bs, attrs, info.ref)
        loc = None if v is None else slack(v, xs, attrs)
    return p, dom, loc, False


def _composite_prop(node, xs: list, bs: list):
    """Propagation through a composite's decomposition in float64: returns
    (bound on |f64 chain value - exact f(t)| for |t - x_hat| <= b, f64 value,
    domain count, ops of the decomposition without a rule)."""
    names = [f"in{i}" for i in range(len(xs))]
    g = Graph({n: tuple(np.shape(x)) for n, x in zip(names, xs, strict=True)},
              [Node("out", node.op, tuple(names), dict(node.op_attrs))], ["out"])
    gd = decompose(g)
    with np.errstate(all="ignore"):
        vals = evaluate(gd, dict(zip(names, xs, strict=True)), all_values=True)
    vals = {k: _f(v) for k, v in vals.items()}
    bnd = dict(zip(names, [_f(b) for b in bs], strict=True))
    ndom, missing = 0, []
    for n in gd.nodes:
        ins = [vals[i] for i in n.inputs]
        ib = [bnd[i] for i in n.inputs]
        p, dom, loc, no_rule = _primitive(n.op, n.op_attrs, ins, ib, vals[n.name])
        if no_rule:
            missing.append(n.op)
        if dom is not None:
            ndom += int(np.count_nonzero(dom))
        with np.errstate(all="ignore"):
            b = (np.asarray(p) + loc) * _INFL
        bnd[n.name] = np.where(np.isfinite(vals[n.name]), b, np.inf)
    return bnd["out"], vals["out"], ndom, missing


def _node_bound(node, xs: list, bs: list, y: np.ndarray):
    """Bound of one node: (bound array, f64 value, domain mask or count,
    no_rule: bool, propagated term)."""
    info = get_op(node.op)
    attrs = node.op_attrs
    rule = rules_for(node.op)
    if info.category == "composite" and R.is_decomposed(rule) and info.decompose is not None:
        p, f64, ndom, missing = _composite_prop(node, xs, bs)
        with np.errstate(all="ignore"):
            local = np.abs(y - f64)
        return local, f64, ndom, bool(missing), p
    with np.errstate(all="ignore"):
        f64 = _f(info.ref(*xs, **attrs))
    p, dom, loc, no_rule = _primitive(node.op, attrs, xs, bs, f64)
    with np.errstate(all="ignore"):
        local = np.abs(y - f64) + loc
    return local, f64, dom, no_rule, p


def propagate(graph, values: dict, inputs: dict) -> tuple[dict, dict]:
    """Bounds for every node of ``graph`` given computed ``values`` (node ->
    array) and the exact S-valued ``inputs`` (bound 0).  Returns
    ``(bounds, flags)`` (module docstring; ``flags`` per :class:`BoundedRun`).
    An operator without a rule gives inf bounds and ``flags[node]["causes"]["no_rule"]``
    (never silently)."""
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
        local, f64, dom, no_rule, p = _node_bound(node, xs, bs, y)
        with np.errstate(all="ignore"):
            b = (local + np.asarray(p)) * _INFL
        nan = np.isnan(y)
        b = np.where(np.isfinite(y) & np.isfinite(f64) & ~np.isnan(b), b, np.inf)
        b = np.broadcast_to(b, y.shape).copy()
        bounds[node.name] = b
        vals[node.name] = y
        flags[node.name] = _flags(node.op, b, nan, dom, no_rule, any(np.isinf(x).any() for x in bs))
    return bounds, flags


def _flags(op, b, nan, dom, no_rule, inf_in) -> dict:
    """Per-node counts: ``nan`` (NaN computed values), ``inf_bound``,
    ``domain`` (elements whose input interval leaves the domain; for a
    composite, the failures inside its decomposition) and ``causes``: every
    inf element counted once, under the first of :data:`CAUSES` (in the order
    no_rule, domain, then inherited when some input bound is inf, else nan
    or overflow) that explains it."""
    inf = np.isinf(b)
    ndom = dom if isinstance(dom, int) else (0 if dom is None else int(np.count_nonzero(dom)))
    causes = dict.fromkeys(CAUSES, 0)
    left = inf
    if no_rule:
        causes["no_rule"], left = int(np.count_nonzero(left)), np.zeros_like(left)
    elif isinstance(dom, int):  # composite: any failure inside explains its inf elements
        if dom > 0:
            causes["domain"], left = int(np.count_nonzero(left)), np.zeros_like(left)
    elif dom is not None:
        dm = np.broadcast_to(dom, left.shape)
        causes["domain"], left = int(np.count_nonzero(left & dm)), left & ~dm
    if inf_in:
        causes["inherited"] = int(np.count_nonzero(left))
    else:
        causes["nan"] = int(np.count_nonzero(left & nan))
        causes["overflow"] = int(np.count_nonzero(left & ~nan))
    return {"op": op, "nan": int(np.count_nonzero(nan)), "inf_bound": int(np.count_nonzero(inf)),
            "domain": ndom, "causes": {k: v for k, v in causes.items() if v}}


def bounds_for_result(result, inputs: dict) -> BoundedRun:
    """Running bounds of an executed :class:`numlab.execute.RunResult` (eager:
    values of every node; fused: run with ``keep_internals=True``).  ``inputs``
    are the inputs given to ``run`` (rounded to S here exactly as ``run`` does)."""
    S = result.fmt
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


def run_with_bounds(graph, inputs, *, mode: str = "fused", fmt="fp16", reference: bool = True,
                    **kw) -> BoundedRun:
    """Run ``graph`` (``numlab.execute.run``; fused modes keep internals) and
    propagate running bounds.  ``fmt`` is the storage format S (default
    fp16).  With ``reference`` also attach
    the fp64 reference outputs."""
    fmt = get_format(fmt, "fmt")
    if mode == "reference":
        raise ValueError("mode='reference' has no rounding to bound; use 'eager', 'fused' or 'emulated_casts'")
    if mode in ("fused", "emulated_casts"):
        kw = {**kw, "keep_internals": True}
    with np.errstate(all="ignore"):
        res = _run(graph, inputs, mode=mode, fmt=fmt, **kw)
    br = bounds_for_result(res, inputs)
    if reference:
        with np.errstate(all="ignore"):
            ref = _run(graph, inputs, mode="reference", fmt=fmt)
        br.reference = {k: _f(v) for k, v in ref.outputs.items()}
    return br
