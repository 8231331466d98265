"""Contract bounds: ``|y_impl - y_exact| <= B`` for every implementation of a contract.

:func:`contract_bound` walks the executed graph of a mode's plan (eager: every
operator a library kernel; fused: the blocks of :func:`numlab.fusion.plan`;
emulated casts: fused, rounded where eager rounds) and keeps, for every node,
a float64 **centre** ``c`` (the catalogue's float64 reference at the centres of
its inputs), a **slack** ``s`` with ``|c - exact| <= s`` (the float64
evaluation error, through the operator's ``slack`` rule) and a **radius**
``R`` such that the value of *every* contract implementation, and the exact
value, lie in ``[c - R, c + R]``.  For a node ``y = f(x)``::

    R_y = L_y + P(c_x, R_x) + slack(c_y)
    s_y = P(c_x, s_x) + slack(c_y)

where ``P`` is the operator's propagation rule (``OpInfo.propagate``: ``sup
|f(t) - f(c)|`` over the input box) and ``L_y`` its local contract term
(``OpInfo.local``, :mod:`numlab.contract_rules`) at the worst point of the
input box -- the implementation's own error ``sup |impl(t) - f(t)|`` -- plus
the rounding to S (or the operator's stored format) where the plan stores the
node.  The bound of an output is ``B = R + s``.  Inputs are values of S, taken
as exact (radius 0).

Nothing here reads numlab's own computed values: the bound holds for every
implementation of the contract (:mod:`numlab.contract`), numlab's run being
one of them.  Composite operators that run as one library kernel (eager, or a
fused plan's library block) are walked through their decomposition under the
library class with no rounding to S inside; a variance written as ``mean((x -
mean(x))**2)`` gets the two-pass bound (the mean's error enters squared) and,
in a library kernel that may use Welford, the Welford bound.

Infinite bounds are never silent: :attr:`ContractBound.flags` names each node
where they originate and why (``overflow``: a value of the box may exceed the
largest finite value of the format it is rounded to; ``domain``: an input
interval leaves the operator's domain; ``nan``: the centre is NaN; a node whose
input bound is infinite inherits).

With ``prob`` the same walk replaces every accumulation constant
``gamma_k`` by Higham and Mary's ``gamma~_k(lam) ~ lam sqrt(k) u`` (SIAM J.
Sci. Comput. 41(5), 2019, Theorem 3.1), ``lam`` chosen for a probability
``prob`` over all the rounding errors of the graph: an **estimate**, not a
bound (:attr:`ContractBound.kind` is ``"estimate"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from . import bound_rules as R
from . import contract_rules as CR
from . import fusion as F
from ._repr import array_summary, facts_html
from .contract import Contract, KernelClass, algo_rel_error
from .execute.liveness import runs_codegen
from .formats import FP32, Format, get_format
from .graph import Graph, Node, decompose
from .ops import get_op
from .rounding import round_to

__all__ = ["contract_bound", "ContractBound", "Local", "node_contracts", "mode_plan", "BOUND_MODES"]

BOUND_MODES = ("eager", "fused", "emulated_casts")
INFL = R.INFL


@dataclass
class Local:
    """The local context of one node (:mod:`numlab.contract_rules`)."""

    kc: KernelClass
    w: Format
    acc: Format
    S: Format
    lam: float | None = None
    ref: object = None

    def u(self, fmt: Format) -> float:
        return fmt.u if self.kc.rounding == "rne" else fmt.eps

    def eta(self, fmt: Format) -> float:
        sub = fmt.smallest_subnormal
        return sub * (0.5 if self.kc.rounding == "rne" and fmt.subnormals else 1.0)

    def gamma(self, k, u) -> float:
        if self.lam is None:
            return CR.gamma_u(k, u)
        return CR.prob_gamma_u(k, u, self.lam) if k > 0 else 0.0

    def rel(self, knob: str) -> float:
        return algo_rel_error(getattr(self.kc, knob), self.u(self.w), knob)

    def scalar(self, s: float) -> float:
        fmt = FP32 if self.kc.scalar_fmt == "fp32" else self.S
        if fmt.p >= 53:
            return float(s)
        return float(round_to(np.float64(s), fmt, self.kc.rounding if self.kc.rounding != "odd" else "rne"))


@dataclass
class ContractBound(dict):
    """Output name -> float64 bound array (a dict), with the walk's details.

    ``kind``: ``"bound"`` (worst case, rigorous for every contract
    implementation) or ``"estimate"`` (``prob`` given); ``prob``;
    ``contract``; ``mode``; ``fmt``; ``plan``; ``centre`` / ``radius`` /
    ``local`` (node -> array); ``flags`` (node -> {"op", "causes": {cause:
    elements}}); the outputs' centres are ``centre[output]`` (the fp64 reference)."""

    kind: str = "bound"
    prob: float | None = None
    contract: Contract | None = None
    mode: str = ""
    fmt: Format | None = None
    plan: object = None
    centre: dict = field(default_factory=dict)
    radius: dict = field(default_factory=dict)
    _rewalk: object = field(default=None, repr=False)
    local: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        items = list(self.items())
        outs = ", ".join(f"{k}: max {float(np.max(v)) if np.size(v) else float('nan'):.3g}" for k, v in items[:6])
        outs += f", ... {len(items) - 6} more outputs" if len(items) > 6 else ""
        return (f"ContractBound({self.kind}, mode={self.mode}, fmt={self.fmt.name if self.fmt else None}, "
                f"contract={self.contract.name if self.contract else None}; {outs})")

    def _repr_html_(self) -> str:
        rows = [("kind", self.kind if self.prob is None else f"{self.kind} (prob {self.prob})"),
                ("mode", self.mode), ("fmt", self.fmt.name if self.fmt else None),
                ("contract", self.contract.name if self.contract else None)]
        rows += [(f"bound {k}", array_summary(v)) for k, v in self.items()]
        inf = self.inf_sources()
        rows.append(("inf sources", ", ".join(f"{s['op']} ({s['node']})" for s in inf[:6]) if inf else None))
        return facts_html(("ContractBound", rows))

    __hash__ = None

    def __eq__(self, other):
        return self is other

    def inf_sources(self) -> list:
        """Nodes where infinite bounds originate: ``[{"node", "op", "causes"}]``."""
        out = []
        for name, f in self.flags.items():
            c = {k: v for k, v in f["causes"].items() if k != "inherited" and v}
            if c:
                out.append({"node": name, "op": f["op"], "causes": c})
        return out

    def budget(self, output: str | None = None, index=None) -> list:
        """Where the error comes from at one element of ``output`` (default: the
        first output; ``index`` default: the element with the largest finite
        bound): ``[(node, op, share)]``, largest first, where a node's share is
        its local term's first-order contribution ``B - B_without(node)`` (the
        walk repeated with that node's local term left out; sensitivity times
        local bound) over the sum of all contributions."""
        output = output if output is not None else next(iter(self))
        if output not in self:
            raise ValueError(f"output={output!r} is not an output; valid: {list(self)}")
        b = self[output]
        if index is None:
            fin = np.where(np.isfinite(b), b, -np.inf)
            if b.size == 0 or not np.isfinite(fin).any():
                return []
            index = np.unravel_index(int(np.argmax(fin)), b.shape) if b.ndim else ()
        index = tuple(int(i) for i in np.atleast_1d(index)) if b.ndim else ()
        full = float(b[index])
        if not math.isfinite(full):
            return []
        names = [n.name for n in self.plan.graph.nodes]
        contrib = {}
        for name in names:
            bw = self._rewalk(frozenset([name]))[output]
            contrib[name] = max(full - float(bw[index]), 0.0)
        tot = sum(contrib.values())
        ops = {n.name: n.op for n in self.plan.graph.nodes}
        out = [(k, ops[k], v / tot if tot > 0 else 0.0) for k, v in contrib.items() if v > 0]
        return sorted(out, key=lambda t: -t[2])

    def header(self) -> str:
        what = ("rigorous contract bound" if self.kind == "bound"
                else f"probabilistic estimate (prob {self.prob}; not a bound)")
        return f"{what}; mode {self.mode}, fmt {self.fmt.name}; {self.contract.header()}"


def _f(a):
    return np.asarray(a, dtype=np.float64)


# ---------------------------------------------------------------------------
# which class and which rounding for each node
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeContract:
    """How the contract treats one node: its kernel class, whether it computes
    inside a code-generated block (fp32 working format), the format it is
    stored in (None: kept inside the kernel) and whether it is a library
    composite (walked through its decomposition)."""

    kc: KernelClass
    fused: bool
    stored: Format | None
    library_composite: bool


def mode_plan(graph, mode: str, S: Format, fusion=None):
    """The plan a mode executes (eager: every operator its own library kernel,
    composites whole; fused modes: ``fusion``, default ``FusionOptions()``),
    as :func:`numlab.execute.run` plans it."""
    if mode == "eager":
        if fusion is not None:
            raise ValueError("fusion= applies to the fused modes; mode='eager' runs every operator as a kernel")
        opts = F.FusionOptions.off(decompose=False)
    else:
        opts = F.FusionOptions.parse(fusion) if fusion is not None else F.FusionOptions()
    return F.plan(graph, opts, fmt=S)


def node_contracts(plan, mode: str, S: Format, contract: Contract) -> dict:
    """Node of ``plan.graph`` -> :class:`NodeContract` (the executor's rules:
    :mod:`numlab.execute`)."""
    g = plan.graph
    out = {}
    emulate = mode == "emulated_casts"
    for block in plan.blocks:
        codegen = runs_codegen(block, mode)
        for m in block.members:
            node = g.node(m)
            info = get_op(node.op)
            sf = info.stored_fmt(node.op_attrs) if info.stored_fmt is not None else S
            if codegen:
                inner = m in plan.decomposed and plan.decomposed[m] != m
                in_kernel = m not in block.outputs and (not emulate or inner)
                kc = contract.codegen
                if emulate:  # operators' internal promotion from the library (eager's choice)
                    kc = replace(kc, promotion=contract.library.promotion, acc=contract.library.acc)
                out[m] = NodeContract(kc, not emulate, None if in_kernel else sf, False)
            else:
                out[m] = NodeContract(contract.library, False, sf, info.category == "composite")
    return out


# ---------------------------------------------------------------------------
# the walk
# ---------------------------------------------------------------------------
class _Walk:
    def __init__(self, S: Format, lam):
        self.S, self.lam = S, lam
        self.C, self.R, self.s, self.L, self.VF = {}, {}, {}, {}, {}
        self.flags = {}
        self.zero = frozenset()  # nodes whose local term is left out (ContractBound.budget)
        self.inf = {}  # node -> whether any element of its radius is infinite

    def _node(self, node, nc: NodeContract, graph, var_pat, welford_nodes=()):
        info = get_op(node.op)
        attrs = node.op_attrs
        xs = [self.C[i] for i in node.inputs]
        bs = [self.R[i] for i in node.inputs]
        ss = [self.s[i] for i in node.inputs]
        inf_in = any(self.inf.get(i, False) for i in node.inputs)
        if info.slack is None or info.propagate is None or info.local is None:
            # an operator whose rule was removed (a test patching the registry): inf, named, never a pass
            with np.errstate(all="ignore"):
                c = _f(info.ref(*xs, **attrs))
            self.C[node.name], self.R[node.name] = c, np.full(np.shape(c), np.inf)
            self.s[node.name], self.L[node.name] = np.full(np.shape(c), np.inf), np.full(np.shape(c), np.inf)
            self.VF[node.name], self.inf[node.name] = None, True
            self.flags[node.name] = {"op": node.op, "causes": {"no_rule": int(np.size(c))}}
            return
        with np.errstate(all="ignore"):
            c = _f(info.ref(*xs, **attrs))
            shape = np.shape(c)
            slack = _f(info.slack(c, xs, attrs))
            pR, dom = info.propagate(xs, bs, attrs, info.ref)
            ps, _ = info.propagate(xs, ss, attrs, info.ref)
            pR, ps = _f(pR), _f(ps)
            M = np.abs(c)
            M += pR
            M += slack
            kc = nc.kc
            k = Local(kc, kc.working(self.S, nc.fused), kc.accumulator(self.S, nc.fused), self.S, self.lam,
                      info.ref)
            err, comp = info.local(k, xs, bs, M, attrs)
            err = _f(err)
            if node.name in self.zero:
                err = np.zeros(shape)
            if node.name in welford_nodes and node.name not in self.zero:  # a library layer norm's Welford mean
                err = np.maximum(err, self._welford_mean(k, xs, bs, attrs))
            vf = comp if comp is not None else self._value_format(node.inputs)
            top = M + err  # the largest magnitude of the computed value, before its store
            limit = comp.max if comp is not None else np.inf
            store = 0.0
            F_ = nc.stored
            if F_ is not None:
                if info.stored_fmt is None and not CR.contains(vf, F_) and node.name not in self.zero:
                    store = k.u(F_) * top + k.eta(F_)
                    limit = min(limit, F_.max)
                    top = top + store
                vf = F_
            L = (err + store) * INFL
            Rn = L + pR
            Rn += slack
            Rn *= INFL
            sn = (ps + slack) * INFL
            if node.op == "div" and _normalises(graph, node):
                # exp(.) / sum(exp(.)): where the exponentials and their sum are finite (their
                # radii are), every implementation and the exact value lie in [0, 1]
                ok = np.isfinite(self.R[node.inputs[0]]) & np.isfinite(self.R[node.inputs[1]]) & np.isfinite(c)
                Rn = np.where(ok, np.minimum(Rn, (np.maximum(c, 1 - c) + sn) * INFL), Rn)
                dom = None if dom is None else (dom & ~ok)
                x = _softmax_input(graph, node, self._ncs)
                if x is not None:
                    Rn = np.minimum(Rn, self._softmax_radius(
                        Node(node.name, "softmax", (x,), {"axis": graph.node(node.inputs[1]).op_attrs["axis"]}),
                        nc, x, nc.stored))
            if node.name in var_pat:
                Rn = self._variance(node, c, k, var_pat[node.name], Rn, slack,
                                    store, F_, welford=node.name in welford_nodes)
            # every element finite and below the formats' largest values: nothing to flag (one pass)
            clean = (dom is None or not np.any(dom)) and bool(np.all(top < limit)) and bool(np.all(Rn < np.inf)) \
                and not (node.name in var_pat and not np.all(pR < np.inf))
        Rn = Rn if np.shape(Rn) == shape else np.broadcast_to(Rn, shape).copy()
        sn = sn if np.shape(sn) == shape else np.broadcast_to(sn, shape).copy()
        L = L if np.shape(L) == shape else np.broadcast_to(L, shape).copy()
        self.C[node.name], self.L[node.name], self.VF[node.name] = c, L, vf
        if clean:
            self.R[node.name], self.s[node.name], self.inf[node.name] = Rn, sn, False
            self.flags[node.name] = {"op": node.op, "causes": {}}
            return
        nan = np.isnan(c)
        dom = np.zeros(shape, bool) if dom is None else np.broadcast_to(dom, shape)
        with np.errstate(invalid="ignore"):
            # this node's own overflow: where its inputs' bounds are finite (else inherited)
            over = np.broadcast_to(~(top < limit) & np.isfinite(pR), shape) & ~nan
        if node.name in var_pat:  # the two-pass alternative never hides an overflow of the walk
            over = over | np.broadcast_to(np.isinf(pR) & ~dom, shape)
        bad = nan | dom | over | np.isnan(Rn) | np.isinf(Rn)
        Rn = np.where(bad, np.inf, Rn)
        self.R[node.name] = Rn
        self.s[node.name] = np.where(np.isfinite(sn), sn, np.inf)
        self.inf[node.name] = bool(bad.any())
        causes = {"inherited": 0, "domain": int(np.count_nonzero(dom & ~nan)), "nan": int(np.count_nonzero(nan)),
                  "overflow": int(np.count_nonzero(over & ~dom & ~nan))}
        rest = np.isinf(Rn) & ~dom & ~nan & ~over
        if inf_in:
            causes["inherited"] = int(np.count_nonzero(rest))
        else:
            causes["overflow"] += int(np.count_nonzero(rest))
        self.flags[node.name] = {"op": node.op, "causes": {k_: v for k_, v in causes.items() if v}}

    def _softmax_radius(self, node, nc, x, stored):
        """Radius of a softmax computed as one fp32 kernel: its local error
        (:func:`numlab.contract_rules.softmax_error`) plus the tight softmax
        propagation (:func:`numlab.bound_rules.propagate_softmax`), plus the store."""
        attrs = {"axis": node.op_attrs.get("axis", -1)}
        if "axis" in node.op_attrs and isinstance(node.op_attrs["axis"], tuple):
            attrs["axis"] = node.op_attrs["axis"][0]
        info = get_op("softmax")
        cx, rx = self.C[x], self.R[x]
        if not (np.isfinite(rx).all() and np.isfinite(cx).all()):
            bad = ~(np.isfinite(rx) & np.isfinite(cx)).all(axis=attrs["axis"], keepdims=True)
        else:
            bad = None
        with np.errstate(all="ignore"):
            c = _f(info.ref(cx, **attrs))
            slack = _f(info.slack(c, [cx], attrs))
            p, _ = R.propagate_softmax([cx], [rx], attrs, info.ref)
            M = np.minimum(np.abs(c) + p + slack, 1.0 + slack)
            kc = nc.kc
            k = Local(kc, kc.working(self.S, nc.fused), kc.accumulator(self.S, nc.fused), self.S, self.lam)
            err = CR.softmax_error(k, [cx], [rx], M, attrs) * (0.0 if node.name in self.zero else 1.0)
            if stored is not None and node.name not in self.zero:
                err = err + k.u(stored) * (M + err) + k.eta(stored)
            r = (err + p + slack) * INFL
        r = np.where(np.isnan(r), np.inf, r)
        return r if bad is None else np.where(bad, np.inf, r)

    def _rms_norm_cap(self, node, nc):
        """|y_i| <= sqrt(n) |w_i| for the exact rms norm (|x_i| <= sqrt(sum x^2)), and
        for every implementation of the class up to its roundings: the sum of
        squares is at least ``(1 - gamma_(n+1))`` times the exact one (positive
        terms, any order), rsqrt within its class, two products, the store.
        So ``|impl - c| <= |c| + sqrt(n) |w| f``: finite where the walk's
        interval reaches rsqrt's pole."""
        x = node.inputs[0]
        axis = node.op_attrs["axis"]
        shape = np.shape(self.C[x])
        n = math.prod(shape[a] for a in np.atleast_1d(axis))
        kc = nc.kc
        k = Local(kc, kc.working(self.S, False), kc.accumulator(self.S, False), self.S, None)
        u, ua = k.u(k.w), k.u(k.acc)
        g = CR.gamma_u(n + 1, ua)
        if g >= 1:
            return np.full(shape, np.inf)
        cx, rx = self.C[x], self.R[x]
        with np.errstate(all="ignore"):
            # the exact sum of squares over the box is at least low; the computed one at least
            # low (1 - g) minus n underflow terms (a square in w, a sum in acc): the cap needs
            # that to stay positive (squares that underflow, an eps that rounds to 0)
            low = np.sum(np.maximum(np.abs(cx) - rx, 0.0) ** 2, axis=axis, keepdims=True)
            high = np.sum((np.abs(cx) + rx) ** 2, axis=axis, keepdims=True) * (1 + g)
            den = 1 - g - n * (k.eta(k.w) + k.eta(k.acc)) / low
            # ... and no square or partial sum may overflow (rsqrt(inf) * x may be NaN)
            ok = np.isfinite(rx).all(axis=axis, keepdims=True) & np.isfinite(cx).all(axis=axis, keepdims=True) \
                & (den > 0.5) & (high < min(k.w.max, k.acc.max) / 2)
            f = (1 + k.rel("rsqrt")) * (1 + u) ** 2 / np.sqrt(np.where(ok, den, 1.0) * (1 - max(u, ua)) ** 2)
            if nc.stored is not None:
                f = f * (1 + k.u(nc.stored))
            w = np.abs(self.C[node.inputs[1]]) + self.R[node.inputs[1]] if len(node.inputs) > 1 else 1.0
            top = math.sqrt(n) * np.broadcast_to(w, shape) * f * INFL + 4 * k.eta(k.w)
            if nc.stored is not None:
                top = top + k.eta(nc.stored)
            cap = np.abs(self.C[node.name]) + top + self.s[node.name]
        return np.where(np.broadcast_to(ok, shape) & np.isfinite(cap), cap, np.inf)

    def _value_format(self, inputs):
        fs = [self.VF.get(i) for i in inputs]
        if not fs or any(f is None for f in fs):
            return None
        return max(fs, key=lambda f: (f.p, f.emax))

    def _welford_mean(self, k, xs, bs, attrs):
        n = CR._axis_count(xs[0], attrs)
        A, W = CR._row_stats(xs, bs, attrs)
        return CR.welford_mean_error(n, k.u(k.acc), A, W)

    def _rel_of(self, name) -> tuple:
        """(relative, absolute) rounding of an elementwise node: its working
        format, then its store (the absolute part: underflow in either)."""
        nc = self._ncs[name]
        k = Local(nc.kc, nc.kc.working(self.S, nc.fused), nc.kc.accumulator(self.S, nc.fused), self.S)
        r, e = k.u(k.w), k.eta(k.w)
        if nc.stored is not None and not CR.contains(k.w, nc.stored):
            r = (1 + r) * (1 + k.u(nc.stored)) - 1
            e = e * (1 + k.u(nc.stored)) + k.eta(nc.stored)
        return r, e

    def _variance(self, node, c, k, pat, Rn, slack, store, F_, welford):
        """The variance node of a two-pass pattern: the smaller of the walk's
        radius and the two-pass bound (:func:`numlab.contract_rules.two_pass_var_error`);
        with Welford allowed (a library kernel), the larger of that and the
        Welford bound."""
        x, m, d, sq = pat
        attrs = node.op_attrs
        cx, rx = self.C[x], self.R[x]
        n = CR._axis_count(cx, attrs)
        vattrs = {"axis": attrs["axis"], "keepdims": attrs["keepdims"], "correction": 0}
        pv, _ = R.propagate_var([cx], [rx], vattrs, None)
        Vmax = np.abs(c) + pv + slack

        def radius(e):
            if k.w.p < k.acc.p or k.w.emax < k.acc.emax:  # the result read in a narrower working format
                e = e + k.u(k.w) * (Vmax + e) + k.eta(k.w)
            if F_ is not None and np.any(store):
                e = e + k.u(F_) * (Vmax + e) + k.eta(F_)
            return (e + pv + slack) * INFL

        if node.name in self.zero:  # ContractBound.budget: this node's local term left out
            return Rn
        (ud, ed), (usq, esq) = self._rel_of(d), self._rel_of(sq)
        D = np.max(cx + rx, axis=attrs["axis"], keepdims=True) - np.min(cx - rx, axis=attrs["axis"], keepdims=True)
        tp = CR.two_pass_var_error(n, n, self.L[m], ud, usq, k.u(k.acc), Vmax, k.eta(k.acc), D, ed, esq)
        r = np.minimum(Rn, radius(tp))
        if welford:
            r = np.maximum(r, radius(CR.welford_var_error(k, [cx], [rx], vattrs, Vmax)))
        return r

    def walk(self, graph, ncs: dict, *, var_pat=None, welford_nodes=()):
        self._ncs = ncs
        var_pat = variance_patterns(graph) if var_pat is None else var_pat
        for node in graph.nodes:
            nc = ncs[node.name]
            if nc.library_composite:
                self._composite(node, nc)
            else:
                self._node(node, nc, graph, var_pat, welford_nodes)

    def _composite(self, node, nc):
        """A library composite: its decomposition under the library class, no
        rounding to S inside, the last primitive stored as the composite."""
        names = [f"{node.name}:in{i}" for i in range(len(node.inputs))]
        g = Graph({n: tuple(np.shape(self.C[i])) for n, i in zip(names, node.inputs, strict=True)},
                  [Node(node.name, node.op, tuple(names), dict(node.op_attrs))], [node.name])
        gd = decompose(g)
        sub = _Walk(self.S, self.lam)
        if node.name in self.zero:
            sub.zero = frozenset(m.name for m in gd.nodes)
        for n, i in zip(names, node.inputs, strict=True):
            sub.C[n], sub.R[n], sub.s[n], sub.VF[n] = self.C[i], self.R[i], self.s[i], self.VF.get(i)
            sub.inf[n] = self.inf.get(i, False)
        inner = NodeContract(nc.kc, False, None, False)
        ncs = {m.name: inner for m in gd.nodes}
        ncs[node.name] = NodeContract(nc.kc, False, nc.stored, False)
        pats = variance_patterns(gd)
        wf = set()
        if "welford" in nc.kc.variance:
            wf = {p[1] for p in pats.values()} | set(pats)
        sub.walk(gd, ncs, var_pat=pats, welford_nodes=wf)
        for key in ("C", "R", "s", "L", "VF"):
            getattr(self, key)[node.name] = getattr(sub, key)[node.name]
        causes = {}
        for f in sub.flags.values():
            for cz, v in f["causes"].items():
                causes[cz] = max(causes.get(cz, 0), v)
        if node.op == "softmax":
            self.R[node.name] = np.minimum(self.R[node.name], self._softmax_radius(node, nc, node.inputs[0], nc.stored))
            # every contract implementation and the exact softmax lie in [0, 1]: exp >= 0, a
            # sum of non-negative terms rounds to at least each term, the quotient to at most
            # 1; so |impl - c| <= max(c, 1 - c) (+ the centre's slack) whatever the walk says
            # -- where the row's inputs are finite (an infinite or NaN input may make the output NaN)
            c = self.C[node.name]
            ax = node.op_attrs.get("axis", -1)
            ok = np.isfinite(self.R[node.inputs[0]]).all(axis=ax, keepdims=True) & np.isfinite(c)
            cap = (np.maximum(c, 1 - c) + self.s[node.name]) * INFL
            r = self.R[node.name]
            capped = ok & np.isfinite(cap) & ~(r <= cap)
            self.R[node.name] = np.where(capped, cap, r)
        elif node.op == "rms_norm":
            self.R[node.name] = np.minimum(self.R[node.name], self._rms_norm_cap(node, nc))
        if not np.isinf(self.R[node.name]).any():
            causes = {}  # a cap made every element finite
        self.inf[node.name] = bool(np.isinf(self.R[node.name]).any())
        if any(self.inf.get(i, False) for i in node.inputs) and causes:
            causes = {"inherited": sum(causes.values())}
        self.flags[node.name] = {"op": node.op, "causes": causes}


def _normalises(graph, node) -> bool:
    """Whether ``node`` is ``div(e, sum(e))`` with ``e = exp(.)`` (a decomposed softmax)."""
    nodes = {n.name: n for n in graph.nodes}
    a, b = node.inputs
    na, nb = nodes.get(a), nodes.get(b)
    return (na is not None and nb is not None and na.op == "exp" and nb.op == "sum"
            and nb.inputs[0] == a and nb.op_attrs.get("keepdims"))


def _softmax_input(graph, div, ncs):
    """``x`` of ``exp(x - max(x)) / sum(...)`` when the max, the difference, the
    exponentials and the sum all stay inside one kernel (not stored), else None."""
    nodes = {n.name: n for n in graph.nodes}
    e = nodes[div.inputs[0]]
    d = nodes.get(e.inputs[0])
    if d is None or d.op != "sub":
        return None
    x, m = d.inputs
    mx = nodes.get(m)
    if mx is None or mx.op != "max" or mx.inputs[0] != x or not mx.op_attrs.get("keepdims"):
        return None
    ax = mx.op_attrs.get("axis")
    if ax != nodes[div.inputs[1]].op_attrs.get("axis") or len(ax) != 1:
        return None
    if any(ncs[k].stored is not None for k in (m, d.name, e.name, div.inputs[1])):
        return None
    return x


def variance_patterns(graph) -> dict:
    """``{var node: (x, m, d, sq)}`` for every ``mean(sq)`` with ``sq = mul(d, d)``,
    ``d = sub(x, m)``, ``m = mean(x)`` over the same axes with keepdims (the
    two-pass variance of a decomposed layer norm)."""
    nodes = {n.name: n for n in graph.nodes}
    out = {}
    for n in graph.nodes:
        if n.op != "mean" or not n.op_attrs.get("keepdims"):
            continue
        sq = nodes.get(n.inputs[0])
        if sq is None or sq.op != "mul" or sq.inputs[0] != sq.inputs[1]:
            continue
        d = nodes.get(sq.inputs[0])
        if d is None or d.op != "sub":
            continue
        x, m = d.inputs
        mn = nodes.get(m)
        if mn is None or mn.op != "mean" or mn.inputs[0] != x or mn.op_attrs.get("axis") != n.op_attrs.get("axis") \
                or not mn.op_attrs.get("keepdims"):
            continue
        out[n.name] = (x, m, d.name, sq.name)
    return out


def _lambda(g, prob: float) -> float:
    """Higham and Mary's ``lam`` for probability ``prob`` over every rounding
    error of the graph (a union bound over ``n`` errors: ``1 - n 2 exp(-lam^2
    (1 - u)^2 / 2) >= prob``), ``n`` = the elements each node computes times
    the terms each one adds (reductions and matmuls)."""
    n = 0
    for node in g.nodes:
        out = math.prod(g.shape(node.name))
        ins = max((math.prod(g.shape(i)) for i in node.inputs), default=1)
        cat = get_op(node.op).category
        k = g.shape(node.inputs[0])[-1] if cat == "matmul" else (16 if cat == "composite" else 1)
        n += max(out, ins) * k
    return math.sqrt(2 * math.log(2 * max(n, 1) / (1 - prob))) / (1 - FP32.u)


def contract_bound(graph, inputs, *, mode: str, fmt, fusion=None, contract=None, kernels=None, library=None,
                   prob: float | None = None) -> ContractBound:
    """Per output of ``graph``, a float64 array ``B`` with ``|y_impl - y_exact| <= B``
    elementwise for every implementation honouring ``contract`` under ``mode``
    (module docstring), on these inputs (rounded to S first, as every mode
    does, and then taken as exact).

    ``mode``: ``"eager"``, ``"fused"`` or ``"emulated_casts"``; ``fmt``: the
    storage format S; ``fusion``: a fusion spec (fused modes; default
    ``FusionOptions()``); ``contract``: a :class:`numlab.contract.Contract`,
    a contract string (``"torch_cpu"``, ``"triton_cuda:libm_ulps=2"``) or
    None (derived from ``kernels`` / ``library``, numlab's KernelSpecs);
    ``prob``: return Higham and Mary's probabilistic **estimate** with this
    probability instead of the bound (``result.kind == "estimate"``).
    """
    if mode not in BOUND_MODES:
        raise ValueError(f"mode={mode!r} is not valid; valid choices: {list(BOUND_MODES)} "
                         "(mode='reference' has no rounding to bound)")
    S = get_format(fmt, "fmt")
    con = Contract.parse(contract, kernels=kernels, library=library)
    if prob is not None and not (isinstance(prob, float | int) and 0 < prob < 1):
        raise ValueError(f"prob={prob!r} is not valid; it must lie in (0, 1)")
    plan = mode_plan(graph, mode, S, fusion)
    g = plan.graph
    xs = g.check_inputs(inputs)
    w = _Walk(S, None)
    for k, v in xs.items():
        if g.role(k) == "index":
            w.C[k] = _f(v)
            w.VF[k] = None
        else:
            w.C[k] = _f(round_to(_f(v), S))
            w.VF[k] = S
        w.R[k] = np.zeros(np.shape(v))
        w.s[k] = np.zeros(np.shape(v))
    if prob is not None:
        w.lam = _lambda(g, prob)
    ncs = node_contracts(plan, mode, S, con)
    start = {k: (w.C[k], w.R[k], w.s[k], w.VF[k]) for k in g.inputs}

    def walk(zero=frozenset()):
        wz = _Walk(S, w.lam)
        wz.zero = zero
        for k, (c, r, sl, vf) in start.items():
            wz.C[k], wz.R[k], wz.s[k], wz.VF[k] = c, r, sl, vf
        wz.walk(g, ncs)
        return wz, {o: np.where(np.isfinite(b), b, np.inf) for o in g.outputs
                    for b in [(wz.R[o] + wz.s[o]) * INFL]}

    w, bounds = walk()
    out = ContractBound(kind="bound" if prob is None else "estimate", prob=prob, contract=con, mode=mode, fmt=S,
                        plan=plan, centre=w.C, radius=w.R, local=w.L, flags=w.flags,
                        _rewalk=lambda zero: walk(zero)[1])
    out.update(bounds)
    return out
