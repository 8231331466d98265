"""Draw implementations of an execution contract: the test oracle of contract bounds.

:func:`sample_outputs` runs a graph the way *some* implementation honouring a
contract (:mod:`numlab.contract`) could run it, and returns its outputs.
Every draw picks, independently per node, one of the choices the contract
leaves open; the claim of :func:`numlab.bounds.contract_bound` is that
``|y_draw - y_exact| <= B`` for every draw.  It is an independent interpreter
of the contract -- plain numpy, :func:`numlab.rounding.round_to`, the float64
references of :mod:`numlab.ops` (``OpInfo.ref``) and the decompositions of
:mod:`numlab.graph` -- that never calls :mod:`numlab.execute` or the kernel
engine.  It is a test oracle, not an engine: every value is a float64 array
holding values of the format it is in, and nothing here is tuned for speed
beyond vectorising over the elements (loops run over tree levels or
reduction lengths, never over elements).

Which node computes how comes from the contract bound's own reading of the
plan (:func:`numlab.contract_bounds.node_contracts`: the kernel class, fp32
inside code-generated blocks, the format each node is written in, library
composites); inside, a draw picks

* **reductions** (sum, mean, var, the K axis of matmuls): an order among
  :data:`ORDERS` -- sequential, reversed, pairwise, blocked(T) (T a power of
  two, sequential or pairwise inside and across blocks), 32-lane butterfly
  (lane-wise sequential, then a butterfly over the lanes), a random per-row
  permutation summed by a random binary tree -- every partial sum rounded to
  the accumulator with the class's rounding mode, the terms loaded into the
  accumulator format first or not (a no-op unless they are wider); mean as
  ``s / n`` or ``s * fl(1/n)``; where the working format is narrower than
  the accumulator (promotion ``accumulator_only``) the result rounded to it
  or kept (numlab's engine rounds it);
* **FMA**: a ``mul`` kept inside a kernel and read once by an add / subtract
  (also the scalar forms) is contracted or not (exact product, one rounding;
  or two); matmul products exact or rounded to the accumulator;
* **transcendentals**: exp, log, tanh, sigmoid, erf return a value of the
  working format within ``libm_ulps`` ulps (of the working format, at the
  float64 reference ``f``) of ``f``; gelu, silu, softplus, hardswish within
  ``libm_ulps`` ulps of ``|f(x)| + |x|``.  The value is ``f + k * budget``
  rounded *toward* ``f``, so it never leaves the budget (checked; the
  correctly rounded value where a budget below half an ulp cannot be met);
* **rsqrt, divide, sqrt** by their class: ``ieee`` correctly rounded (rsqrt
  also as ``fl(1 / fl(sqrt x))``), ``ulps(K)`` / ``rel(E)`` within the stated
  error as above, ``newton(seed, steps)`` either simulated (a seed of the
  stated relative error, then the Newton steps in the working format) or at
  the edge of :func:`numlab.contract.algo_rel_error`;
* **scalars** held as the class's ``scalar_fmt`` says (fp32 or S);
  ``x / s`` as a division or as ``x * fl(1/s)``; a ``constant`` node held in
  the working format or as a tensor of S;
* **variance** (``var`` nodes, and the variance of a library layer norm):
  two-pass or Welford (a random permutation of the elements), as the class
  allows;
* **matmul_inputs** (TF32): operands rounded before their products;
* **block-scaled operators**: quantize divides by the block scale (or
  multiplies by its reciprocal) within ``2 u`` of the working format before
  the element rounding; scaled_matmul per K block then scales (DeepSeek's
  epilogue) or dequantised operands then one dot.

Every primitive result is rounded to the working format (round-to-odd in
float64 first where the rounding mode is directed, so double rounding never
helps), every stored node to its stored format.  ``adversarial=True`` picks
the choices that push the error up: sequential sums over terms sorted by
value (partial sums grow, then cancel) or by magnitude, transcendentals and
approximate divisions at the edge of their budget with one sign per node,
the non-FMA forms, Welford where allowed.

Contract-breaking draws (for tests that the bound catches them) come from a
*different* contract passed to the sampler (``"torch_cpu:acc=fp16"``,
``"torch_cpu:libm_ulps=16"``) or from ``round_inside`` (every value kept
inside a kernel is also rounded to that format).

Not modelled (``NotImplementedError``): matrix units (``KernelClass.mma``).
"""

from __future__ import annotations

import math

import numpy as np

from . import contract_rules as CR
from .bound_rules import expand_block_scales
from .contract import Contract, _seed_rel, algo_rel_error
from .contract_bounds import BOUND_MODES, NodeContract, mode_plan, node_contracts, variance_patterns
from .formats import FP32, Format, get_format, ulp
from .graph import Graph, Node, decompose
from .ops import get_op
from .primitives import _odd_select, _two_prod, _two_sum
from .rounding import round_to

__all__ = ["sample_outputs", "ORDERS", "ADVERSARIAL_ORDERS"]

#: reduction orders a random draw picks from
ORDERS = ("sequential", "reversed", "pairwise", "blocked", "lanes32", "random_tree")
#: orders an adversarial draw picks from (sequential over sorted terms)
ADVERSARIAL_ORDERS = ("sorted_desc", "sorted_asc", "abs_desc", "abs_asc")
_ADD_LIKE = ("add", "sub", "add_scalar", "sub_scalar", "rsub_scalar")
_LIBM = ("exp", "log", "tanh", "sigmoid", "erf")
_LIBM_X = ("gelu", "silu", "softplus", "hardswish")


# ---------------------------------------------------------------------------
# exact-enough float64 arithmetic: one correct rounding to a narrower format
# ---------------------------------------------------------------------------
def _f(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _two_prod_err(a, b):
    """``a*b - fl(a*b)`` exactly (Dekker's TwoProduct with Veltkamp splitting)."""
    return _two_prod(a, b)[1]


def _odd(s, resid):
    """Round-to-odd in float64 of a value whose float64 rounding is ``s`` and
    whose exact residual ``exact - s`` has the sign of ``resid``: after it, one
    rounding to any format of at most 51 bits is correct in every mode
    (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums:
    proved algorithms using rounding to odd", IEEE TC 57(4), 2008)."""
    s = _f(s)
    resid = np.broadcast_to(_f(resid), s.shape)
    with np.errstate(invalid="ignore"):  # nextafter(s, 0 * inf) where resid == 0, not taken
        return np.where(np.isfinite(s), _odd_select(s, np.sign(resid)), s)


def _round(x, fmt: Format, mode: str) -> np.ndarray:
    """``x`` (float64) rounded to ``fmt`` with ``mode`` (float64 container)."""
    x = _f(x)
    if fmt.p >= 53:
        return x
    with np.errstate(all="ignore"):
        if mode == "rne" and fmt == FP32:
            return x.astype(np.float32).astype(np.float64)
        return _f(round_to(x, fmt, mode))


class _Arith:
    """Correctly rounded primitives into one format with one rounding mode.

    Inputs are float64 values of formats of at most 24 bits, so products are
    exact in float64; sums, quotients and square roots are computed in
    float64 and, under a directed mode, fixed by round-to-odd (the float64
    error from TwoSum / TwoProduct) before the one rounding.  Round to
    nearest even needs no fix: double rounding through float64 is innocuous
    for + - * / sqrt into formats of at most 25 bits (53 >= 2p + 2)."""

    def __init__(self, fmt: Format, mode: str):
        self.fmt, self.mode = fmt, mode
        self.directed = mode != "rne"

    def r(self, x):
        return _round(x, self.fmt, self.mode)

    def add(self, a, b):
        a, b = _f(a), _f(b)
        with np.errstate(all="ignore"):
            s = a + b
            if self.directed:
                s, e = _two_sum(a, b)
                s = _odd(s, np.where(np.isfinite(e), e, 0.0))
        return self.r(s)

    def sub(self, a, b):
        return self.add(a, -_f(b))

    def mul(self, a, b):
        with np.errstate(all="ignore"):
            return self.r(_f(a) * _f(b))

    def fma(self, a, b, c):
        """``a*b + c`` with one rounding (the product is exact in float64)."""
        with np.errstate(all="ignore"):
            return self.add(_f(a) * _f(b), c)

    def div(self, a, b):
        a, b = _f(a), _f(b)
        with np.errstate(all="ignore"):
            q = a / b
            if self.directed:
                p = q * b
                r = (a - p) - _two_prod_err(q, b)
                q = _odd(q, np.where(np.isfinite(r), r * np.sign(b), 0.0))
        return self.r(q)

    def sqrt(self, x):
        x = _f(x)
        with np.errstate(all="ignore"):
            s = np.sqrt(x)
            if self.directed:
                r = (x - s * s) - _two_prod_err(s, s)
                s = _odd(s, np.where(np.isfinite(r), r, 0.0))
        return self.r(s)


def _toward(t, f, fmt: Format):
    """``t`` rounded to ``fmt`` in the direction of ``f`` (never past it)."""
    dn, up = _round(t, fmt, "down"), _round(t, fmt, "up")
    return np.where(t > f, dn, np.where(t < f, up, _round(t, fmt, "rne")))


# ---------------------------------------------------------------------------
# one draw
# ---------------------------------------------------------------------------
class _Draw:
    """The choices of one implementation, made node by node as the walk meets them."""

    def __init__(self, rng, adversarial: bool, S: Format, round_inside: Format | None):
        self.rng, self.adv, self.S, self.inside = rng, adversarial, S, round_inside
        self.exact_products: dict = {}

    # -- choices -------------------------------------------------------------
    def coin(self, p=0.5) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def factor(self, shape, f):
        """Where in its budget an error falls: uniform in [-1, 1] per element;
        adversarial, one sign for the whole node (of the value, or of its magnitude)."""
        if not self.adv:
            return self.rng.uniform(-1.0, 1.0, shape)
        s = 1.0 if self.coin() else -1.0
        return s * np.where(np.signbit(f), -1.0, 1.0) if self.coin() else np.full(shape, s)

    def within(self, f, budget, fmt: Format):
        """A value of ``fmt`` within ``budget`` (absolute, elementwise) of ``f``."""
        f = _f(f)
        budget = np.broadcast_to(_f(budget), f.shape)
        with np.errstate(all="ignore"):
            t = f + self.factor(f.shape, f) * budget
            y = _toward(t, f, fmt)
            ok = np.abs(y - f) <= budget * (1 - 2.0**-40)
        return np.where(ok & np.isfinite(f), y, _round(f, fmt, "rne"))

    # -- reductions ------------------------------------------------------------
    def order(self, n: int) -> str:
        if n <= 1:
            return "sequential"
        return self.pick(ADVERSARIAL_ORDERS + ("sequential",)) if self.adv else self.pick(ORDERS)

    def sum_last(self, t, ar: _Arith, order: str | None = None):
        """Sum over the last axis of ``t`` (float64 terms) in ``order``, every
        partial sum rounded by ``ar``; the result rounded by ``ar``."""
        t = _f(t)
        n = t.shape[-1]
        if n == 0:
            return np.zeros(t.shape[:-1])
        order = self.order(n) if order is None else order
        if self.adv or self.coin():  # terms loaded into the accumulator format first (a no-op when they are in it)
            t = ar.r(t)
        if order in ADVERSARIAL_ORDERS:
            key = t if order.startswith("sorted") else np.abs(t)
            idx = np.argsort(np.where(np.isnan(key), np.inf, key), axis=-1, kind="stable")
            if order.endswith("desc"):
                idx = idx[..., ::-1]
            return self._sequential(np.take_along_axis(t, idx, axis=-1), ar)
        if order == "reversed":
            return self._sequential(t[..., ::-1], ar)
        if order == "pairwise":
            return self._pairwise(t, ar)
        if order == "blocked":
            T = int(2 ** self.rng.integers(1, max(2, int(math.log2(n)) + 1)))
            pad = -n % T
            tb = np.concatenate([t, np.zeros(t.shape[:-1] + (pad,))], axis=-1) if pad else t
            tb = tb.reshape(t.shape[:-1] + (tb.shape[-1] // T, T))
            inner = self._pairwise(tb, ar) if self.coin() else self._sequential(tb, ar)
            return self._pairwise(inner, ar) if self.coin() else self._sequential(inner, ar)
        if order == "lanes32":
            pad = -n % 32
            tb = np.concatenate([t, np.zeros(t.shape[:-1] + (pad,))], axis=-1) if pad else t
            tb = tb.reshape(t.shape[:-1] + (tb.shape[-1] // 32, 32))
            lanes = self._sequential(np.swapaxes(tb, -1, -2), ar)  # (..., 32): lane j sums j, j+32, ...
            while lanes.shape[-1] > 1:  # butterfly: lane j += lane j + half
                h = lanes.shape[-1] // 2
                lanes = ar.add(lanes[..., :h], lanes[..., h:])
            return ar.r(lanes[..., 0])
        if order == "random_tree":
            keys = self.rng.random(t.shape)
            return self._random_tree(np.take_along_axis(t, np.argsort(keys, axis=-1), axis=-1), ar)
        return self._sequential(t, ar)

    @staticmethod
    def _sequential(t, ar):
        s = ar.r(t[..., 0])
        for i in range(1, t.shape[-1]):
            s = ar.add(s, t[..., i])
        return s

    @staticmethod
    def _pairwise(t, ar):
        x = ar.r(t) if t.shape[-1] == 1 else t
        while x.shape[-1] > 1:
            m = x.shape[-1]
            k = m // 2
            s = ar.add(x[..., 0:2 * k:2], x[..., 1:2 * k:2])
            x = np.concatenate([s, x[..., 2 * k:]], axis=-1) if m % 2 else s
        return ar.r(x[..., 0])

    def _random_tree(self, t, ar):
        """A random binary tree: at every level a random set of disjoint
        adjacent pairs (at least one) is added (the loop runs over levels)."""
        x = t
        while x.shape[-1] > 1:
            m = x.shape[-1]
            o = int(self.rng.integers(2)) if m > 2 else 0
            left = np.arange(o, m - 1, 2)
            left = left[self.rng.random(left.size) < 0.5]
            if left.size == 0:
                left = np.array([int(self.rng.integers(m - 1))])
            survivors = np.setdiff1d(np.arange(m), left + 1)
            new = x[..., survivors].copy()
            new[..., np.isin(survivors, left)] = ar.add(x[..., left], x[..., left + 1])
            x = new
        return ar.r(x[..., 0])

    def welford(self, x, acc: _Arith):
        """Welford's mean and M2 over the last axis (elements in a random
        permutation per row; adversarial: sorted), every step rounded by ``acc``;
        ``/ k`` or ``* fl(1/k)``."""
        x = _f(x)
        n = x.shape[-1]
        if self.adv:
            idx = np.argsort(x, axis=-1, kind="stable")
            idx = idx[..., ::-1] if self.coin() else idx
        else:
            idx = np.argsort(self.rng.random(x.shape), axis=-1)
        xs = np.take_along_axis(x, idx, axis=-1)
        recip = self.coin()
        m = np.zeros(x.shape[:-1])
        m2 = np.zeros(x.shape[:-1])
        for k in range(n):
            xk = xs[..., k]
            d = acc.sub(xk, m)
            step = acc.mul(d, acc.r(1.0 / (k + 1))) if recip else acc.div(d, float(k + 1))
            m = acc.add(m, step)
            m2 = acc.add(m2, acc.mul(d, acc.sub(xk, m)))
        return m, m2

    def mean_div(self, s, n: int, acc: _Arith):
        """``s / n`` or ``s * fl(1/n)`` in the accumulator."""
        if n == 0:
            with np.errstate(all="ignore"):
                return s / 0.0
        if self.coin():
            return acc.mul(s, acc.r(1.0 / n))
        return acc.div(s, float(n))


def _axes_last(x, axis):
    """``x`` with the reduced axes moved last and merged (the others keep their order)."""
    x = _f(x)
    axes = tuple(range(x.ndim)) if axis is None else tuple(np.atleast_1d(axis).tolist())
    rest = [i for i in range(x.ndim) if i not in axes]
    n = math.prod(x.shape[a] for a in axes)
    return np.transpose(x, rest + list(axes)).reshape(tuple(x.shape[i] for i in rest) + (n,)), axes


def _reshape_reduced(r, x_shape, axes, keepdims):
    if keepdims:
        return r.reshape(tuple(1 if i in axes else d for i, d in enumerate(x_shape)))
    return r


# ---------------------------------------------------------------------------
# the interpreter
# ---------------------------------------------------------------------------
class _Interp:
    """Computes the nodes of one graph for one draw (``vals``: name -> float64)."""

    def __init__(self, draw: _Draw, S: Format, graph, ncs: dict, vals: dict, welford_ok: bool = False):
        self.d, self.S, self.g, self.ncs, self.vals = draw, S, graph, ncs, vals
        self.uses: dict = {}
        for node in graph.nodes:
            for p in node.inputs:
                self.uses[p] = self.uses.get(p, 0) + 1
        # two-pass variance patterns (a library layer norm) computed by Welford in this draw:
        # mean node -> variance node; the variance values are kept until their node
        pats = variance_patterns(graph) if welford_ok else {}
        self.wf_mean = {m: var for var, (x, m, d, sq) in pats.items() if draw.adv or draw.coin()}
        self.wf_var: dict = {}

    def run(self):
        for node in self.g.nodes:
            nc = self.ncs[node.name]
            if nc.library_composite:
                v = self.composite(node, nc)
            else:
                v = self.node(node, nc)
                if nc.stored is not None:
                    v = _round(v, nc.stored, nc.kc.rounding)
                elif self.d.inside is not None:
                    v = _round(v, self.d.inside, "rne")
            self.vals[node.name] = _f(v)

    # -- one node ----------------------------------------------------------------
    def node(self, node, nc: NodeContract):
        info = get_op(node.op)
        attrs = node.op_attrs
        kc = nc.kc
        w = _Arith(kc.working(self.S, nc.fused), kc.rounding)
        acc = _Arith(kc.accumulator(self.S, nc.fused), kc.rounding)
        xs = [self.vals[i] for i in node.inputs]
        op = node.op
        if op == "mul" and nc.stored is None and self.d.inside is None:
            with np.errstate(all="ignore"):
                self.d.exact_products[node.name] = _f(xs[0]) * _f(xs[1])
        if info.category == "data_movement" or info.local is CR.local_exact or op in ("cast", "block_scale"):
            with np.errstate(all="ignore"):
                return _f(info.ref(*xs, **attrs))
        if op in _ADD_LIKE:
            return self.add_like(node, kc, w, xs, attrs)
        if op == "mul":
            return w.mul(*xs)
        if op in ("div", "reciprocal", "div_scalar", "rdiv_scalar"):
            return self.division(op, kc, w, xs, attrs)
        if op in ("rsqrt", "sqrt"):
            return self.root(op, kc, w, xs[0])
        if op in _LIBM or op in _LIBM_X:
            with np.errstate(all="ignore"):
                f = _f(info.ref(*xs, **attrs))
                base = np.abs(f) + (np.abs(_f(xs[0])) if op in _LIBM_X else 0.0)
                budget = kc.libm_ulps * np.where(np.isfinite(base), ulp(np.where(np.isfinite(base), base, 1.0),
                                                                        w.fmt), 0.0)
            return self.d.within(f, budget, w.fmt)
        if op == "mul_scalar":
            return w.mul(xs[0], self.scalar(kc, attrs["scalar"]))
        if op == "constant":  # materialised in the working format, or as a tensor of S in memory
            v = _f(info.ref(**attrs))
            held = self.S if self.S.p < w.fmt.p and (self.d.adv or self.d.coin()) else w.fmt
            return _round(v, held, kc.rounding)
        if op in ("sum", "mean", "var"):
            return self.reduction(node, kc, w, acc, xs[0], attrs)
        if op == "matmul":
            return self.narrow(self.matmul(kc, acc, xs[0], xs[1]), w, acc)
        if op == "scaled_matmul":
            return self.narrow(self.scaled_matmul(w, acc, xs, attrs), w, acc)
        if op == "quantize":
            return self.quantize(node, w, xs[0], attrs)
        if op == "dequantize":
            return w.mul(xs[0], expand_block_scales(xs[1], np.shape(xs[0])))
        raise NotImplementedError(f"contract_sample: no sampler for op {op!r} (node {node.name!r})")

    def scalar(self, kc, s: float) -> float:
        """The scalar as the class holds it (as :meth:`numlab.contract_bounds.Local.scalar`)."""
        fmt = FP32 if kc.scalar_fmt == "fp32" else self.S
        return float(_round(np.float64(s), fmt, kc.rounding if kc.rounding != "odd" else "rne"))

    def add_like(self, node, kc, w, xs, attrs):
        """``a + b``, ``a - b`` and the scalar forms; a ``mul`` kept inside the
        kernel and read only here may be contracted into an FMA (its exact
        product, one rounding)."""
        op = node.op
        if op in ("add", "sub"):
            ops = [_f(xs[0]), _f(xs[1])]
            where = [(0, node.inputs[0]), (1, node.inputs[1])]
        else:
            h = self.scalar(kc, attrs["scalar"])
            ops = [_f(xs[0]), h] if op != "rsub_scalar" else [h, _f(xs[0])]
            where = [(0 if op != "rsub_scalar" else 1, node.inputs[0])]
        sign = -1.0 if op in ("sub", "sub_scalar", "rsub_scalar") else 1.0
        for pos, p in where:
            if (p in self.d.exact_products and self.uses.get(p) == 1 and list(node.inputs).count(p) == 1
                    and not self.d.adv and self.d.coin()):
                ops[pos] = self.d.exact_products[p]
                break
        return w.add(ops[0], sign * _f(ops[1]))

    def division(self, op, kc, w, xs, attrs):
        if op == "reciprocal":
            a, b = np.ones(np.shape(xs[0])), xs[0]
        elif op == "div":
            a, b = xs
        elif op == "div_scalar":
            h = self.scalar(kc, attrs["scalar"])
            if not self.d.adv and self.d.coin():  # x * fl(1/s): the reciprocal of the held or the exact scalar
                r = 1.0 / h if self.d.coin() else 1.0 / attrs["scalar"]
                return w.mul(xs[0], w.r(np.float64(r)))
            a, b = xs[0], np.full(np.shape(xs[0]), h)
        else:  # rdiv_scalar
            a, b = np.full(np.shape(xs[0]), self.scalar(kc, attrs["scalar"])), xs[0]
        return self.by_class(kc.divide, "divide", w, a, b)

    def by_class(self, algo: str, knob: str, w: _Arith, a, b):
        """``a / b`` (divide), ``1/sqrt(b)`` (rsqrt) or ``sqrt(b)`` (sqrt) by a class."""
        a, b = _f(a), _f(b)
        with np.errstate(all="ignore"):
            if algo == "ieee":
                if knob == "divide":
                    return w.div(a, b)
                if knob == "sqrt":
                    return w.sqrt(b)
                if self.d.adv or self.d.coin():  # 1 / fl(sqrt x): two roundings
                    return w.div(np.ones_like(b), w.sqrt(b))
                return w.r(1.0 / np.sqrt(b))  # correctly rounded rsqrt (within the class)
            f = a / b if knob == "divide" else (1.0 / np.sqrt(b) if knob == "rsqrt" else np.sqrt(b))
            if algo.startswith("newton(") and not self.d.adv and self.d.coin():
                return self.newton(algo, knob, w, a, b, f)
            if algo.startswith("ulps("):  # K ulps of f (sqrt(0) stays 0: the class is relative there)
                budget = float(algo[5:-1]) * np.where(np.isfinite(f), ulp(np.where(np.isfinite(f), f, 1.0), w.fmt), 0)
                budget = np.where((f == 0) & (knob == "sqrt"), 0.0, budget)
            else:
                budget = algo_rel_error(algo, w.fmt.u if w.mode == "rne" else w.fmt.eps, knob) * np.abs(f)
            return self.d.within(f, budget, w.fmt)

    def newton(self, algo, knob, w: _Arith, a, b, f):
        """Newton-Raphson from a seed of the stated relative error (a value of
        the working format), every step rounded to the working format."""
        seed, steps = algo[len("newton("):-1].rsplit(",", 1)
        func = "rsqrt" if knob == "rsqrt" else "reciprocal"
        e0 = _seed_rel(seed, "rsqrt" if func == "rsqrt" else "divide")
        g = 1.0 / np.sqrt(b) if func == "rsqrt" else 1.0 / b
        y = self.d.within(g, e0 * np.abs(g), w.fmt)
        for _ in range(int(steps)):
            if func == "rsqrt":  # y (3/2 - (x/2) y^2)
                t = w.mul(b, w.mul(y, y))
                y = w.mul(y, w.sub(1.5, w.mul(t, 0.5)))
            else:  # y (2 - b y)
                y = w.mul(y, w.sub(2.0, w.mul(b, y)))
        return w.mul(a, y) if knob == "divide" else y

    def root(self, op, kc, w, x):
        return self.by_class(kc.rsqrt if op == "rsqrt" else kc.sqrt, op, w, np.ones_like(_f(x)), x)

    def narrow(self, r, w: _Arith, acc: _Arith):
        """A reduction's result as a kernel whose other work is in a narrower
        working format may hold it: rounded to that format (promotion
        ``accumulator_only``; numlab's engine does this), or kept in the accumulator."""
        if w.fmt.p < acc.fmt.p and (self.d.adv or self.d.coin()):
            return w.r(r)
        return r

    def reduction(self, node, kc, w, acc, x, attrs):
        return self.narrow(self._reduction(node, kc, w, acc, x, attrs), w, acc)

    def _reduction(self, node, kc, w, acc, x, attrs):
        op = node.op
        t, axes = _axes_last(x, attrs.get("axis"))
        n = t.shape[-1]
        keep = attrs.get("keepdims", False)
        if node.name in self.wf_var:  # the variance of a Welford pass made at its mean
            return self.wf_var.pop(node.name)
        if op == "mean" and node.name in self.wf_mean:  # one Welford pass: the mean and the variance
            m, m2 = self.d.welford(t, acc)
            vnode = self.g.node(self.wf_mean[node.name])
            self.wf_var[vnode.name] = _reshape_reduced(self.d.mean_div(m2, n, acc), np.shape(x), axes, True)
            return _reshape_reduced(m, np.shape(x), axes, keep)
        if op == "var":
            N = max(n - attrs.get("correction", 0), 0)
            if "welford" in kc.variance and (self.d.adv or "two_pass" not in kc.variance or self.d.coin()):
                _, m2 = self.d.welford(t, acc)
                r = self.d.mean_div(m2, N, acc)
            else:
                m = self.d.mean_div(self.d.sum_last(t, acc), n, acc)
                dv = w.sub(t, m[..., None])
                r = self.d.mean_div(self.d.sum_last(w.mul(dv, dv), acc), N, acc)
        else:
            s = self.d.sum_last(t, acc)
            r = s if op == "sum" else self.d.mean_div(s, n, acc)
        return _reshape_reduced(_f(r), np.shape(x), axes, keep)

    def matmul(self, kc, acc: _Arith, a, b):
        if kc.mma is not None:
            raise NotImplementedError("contract_sample: matrix units (KernelClass.mma) are not modelled")
        a, b = _f(a), _f(b)
        va, vb = a.ndim == 1, b.ndim == 1
        a2, b2 = (a[None, :] if va else a), (b[:, None] if vb else b)
        ti = kc.matmul_inputs
        if ti is not None and ti.p < self.S.p:
            a2, b2 = _round(a2, ti, "rne"), _round(b2, ti, "rne")
        with np.errstate(all="ignore"):
            terms = a2[..., :, None, :] * np.swapaxes(b2, -1, -2)[..., None, :, :]  # (..., M, N, K), exact
        if self.d.adv or self.d.coin():
            terms = acc.r(terms)  # products rounded (no FMA)
        r = self.d.sum_last(terms, acc)
        if vb:
            r = r[..., 0]
        if va:
            r = r[..., 0, :] if not vb else r[..., 0]
        return r

    def scaled_matmul(self, w: _Arith, acc: _Arith, xs, attrs):
        qa, sa, qb, sb = (_f(v) for v in xs)
        K = qa.shape[-1]
        sa_e = expand_block_scales(sa, qa.shape)
        sb_e = expand_block_scales(sb, qb.shape)
        if self.d.coin():  # dequantised operands, then one dot
            A, B = w.mul(qa, sa_e), w.mul(qb, sb_e)
            terms = A[:, None, :] * B.T[None, :, :]
            if self.d.adv or self.d.coin():
                terms = acc.r(terms)
            return self.d.sum_last(terms, acc)
        kb = K // sa.shape[-1]
        parts = []
        for j in range(K // kb):  # DeepSeek's epilogue: per K block, a dot then (p * sa) * sb
            blk = slice(j * kb, (j + 1) * kb)
            terms = qa[:, None, blk] * qb[blk, :].T[None, :, :]
            if self.d.adv or self.d.coin():
                terms = acc.r(terms)
            p = self.d.sum_last(terms, acc)
            parts.append(w.mul(w.mul(p, sa_e[:, j * kb:j * kb + 1]), sb_e[j * kb:j * kb + 1, :]))
        return self.d.sum_last(np.stack(parts, axis=-1), w)

    def quantize(self, node, w: _Arith, x, attrs):
        """Elements of ``x / s`` with the quotient computed in the working
        format (within ``2 u_w`` of the exact one), then the element rounding."""
        x = _f(x)
        s = expand_block_scales(get_op("block_scale").ref(x, **attrs), x.shape)
        elem = get_op("quantize").stored_fmt(attrs)
        with np.errstate(all="ignore"):
            q = x / s
            v = self.d.within(q, 2 * w.fmt.u * np.abs(q), w.fmt)
            out = _f(round_to(v, elem, saturate=True))
        ref = _f(get_op("quantize").ref(x, **attrs))
        return np.where(np.isfinite(s) & np.isfinite(x), out, ref)

    # -- a library composite ---------------------------------------------------------
    def composite(self, node, nc: NodeContract):
        """A composite run as one library kernel: its decomposition under the
        library class, nothing rounded to S inside, the last primitive stored
        as the composite."""
        names = [f"{node.name}:in{i}" for i in range(len(node.inputs))]
        sub_g = Graph({n: tuple(np.shape(self.vals[i])) for n, i in zip(names, node.inputs, strict=True)},
                      [Node(node.name, node.op, tuple(names), dict(node.op_attrs))], [node.name])
        gd = decompose(sub_g)
        inner = NodeContract(nc.kc, False, None, False)
        ncs = {m.name: inner for m in gd.nodes}
        ncs[node.name] = NodeContract(nc.kc, False, nc.stored, False)
        vals = {n: self.vals[i] for n, i in zip(names, node.inputs, strict=True)}
        _Interp(self.d, self.S, gd, ncs, vals, welford_ok="welford" in nc.kc.variance).run()
        return vals[node.name]


def sample_outputs(graph, inputs, *, mode: str, fmt, fusion=None, contract=None, rng, n: int = 1,
                   adversarial: bool = False, kernels=None, library=None, round_inside=None) -> list:
    """``n`` implementations of ``graph`` under ``mode`` drawn from ``contract``
    (module docstring): a list of ``{output name: float64 array of its values}``.

    Arguments as :func:`numlab.bounds.contract_bound` (``contract=None``: the
    contract derived from ``kernels`` / ``library``); ``rng`` a
    ``numpy.random.Generator`` (the same state gives the same draws);
    ``adversarial``: choices that push the error up; ``round_inside``: a
    format every value kept inside a kernel is also rounded to (a
    contract-breaking implementation, for tests).  Inputs are rounded to the
    storage format first (index inputs kept), as every mode does."""
    if mode not in BOUND_MODES:
        raise ValueError(f"mode={mode!r} is not valid; valid choices: {list(BOUND_MODES)}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be an int >= 1")
    S = get_format(fmt, "fmt")
    con = Contract.parse(contract, kernels=kernels, library=library)
    inside = None if round_inside is None else get_format(round_inside, "round_inside")
    plan = mode_plan(graph, mode, S, fusion)
    g = plan.graph
    xs = g.check_inputs(inputs)
    base = {k: (_f(v) if g.role(k) == "index" else _round(_f(v), S, "rne")) for k, v in xs.items()}
    ncs = node_contracts(plan, mode, S, con)
    out = []
    for _ in range(n):
        vals = dict(base)
        _Interp(_Draw(rng, adversarial, S, inside), S, g, ncs, vals).run()
        out.append({o: np.array(vals[o], dtype=np.float64) for o in g.outputs})
    return out
