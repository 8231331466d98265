"""Per-operator rules of the running error bounds (numlab.running_bounds).

Every operator has two rules, each a named function of this module:

* a **slack** rule ``slack(v, ins, attrs) -> array``: a bound on
  ``|float64 reference of op at ins - exact op at ins|`` where ``v`` is the
  float64 reference value and ``ins`` the (float64) inputs;
* a **propagation** rule ``propagate(xs, bs, attrs, ref) -> (p, domain)``:
  ``p`` bounds ``sup |f(t) - f(x)|`` over ``|t_i - x_i| <= b_i`` (plus the
  evaluation slack of that sup where it is computed in float64), ``domain``
  is a boolean mask of the elements whose uncertainty interval leaves the
  operator's domain (bound inf there) or None.  ``ref`` is the operator's
  float64 reference (``OpInfo.ref``): the data-movement rules move the bounds
  with it, the monotone rules evaluate it at the interval ends.

softmax has a rule of its own (:func:`propagate_softmax`: the ratio of
outputs at two inputs within ``B`` of each other lies in ``[e**-2B, e**2B]``;
much tighter than the walk through exp / sum, which loses their
correlation).  The other composites (log_softmax, layer_norm, rms_norm)
have the pair :data:`DECOMPOSED`: :func:`slack_decomposed` / :func:`propagate_decomposed`
mark "propagate through the operator's decomposition, with float64 slack at
every primitive"; running_bounds does that walk (it needs the graph layer)
and these two functions raise when called directly.

The operator registry (:mod:`numlab.ops`) holds the pair of every operator:
each registration names its ``slack=`` and ``propagate=`` functions of this
module (``OpInfo.slack`` / ``OpInfo.propagate``), and registering an operator
without them is an error.  This module keeps only the functions (and the
composite marker :data:`DECOMPOSED`); :func:`numlab.running_bounds.rules_for`
reads the pair from the registry.

This module sits below ops/graph (it imports only formats, rounding,
scaled_formats and numpy), so the registry can import it.
"""

from __future__ import annotations

import math

import numpy as np

from .formats import get_format
from .rounding import round_to
from .scaled_formats import GRAPH_FORMATS

__all__ = [
    "GELU_LIPSCHITZ", "SILU_LIPSCHITZ", "HARDSWISH_LIPSCHITZ", "SOFTPLUS_THRESHOLD", "SOFTPLUS_JUMP", "softplus_jump", "slack_add_alpha", "propagate_add_alpha",
    "DECOMPOSED", "is_decomposed",
    "slack_exact", "slack_correct", "slack_correct_underflow", "slack_two_roundings",
    "slack_three_roundings", "slack_sum",
    "slack_mean", "slack_var", "slack_matmul", "slack_transcendental", "slack_transcendental_x",
    "slack_decomposed", "slack_softmax", "propagate_softmax",
    "propagate_moved", "propagate_gathered", "propagate_add", "propagate_maximum", "propagate_mul",
    "propagate_div", "propagate_identity", "propagate_mul_scalar", "propagate_div_scalar",
    "propagate_rdiv_scalar", "propagate_reciprocal", "propagate_where", "propagate_compare",
    "propagate_constant", "propagate_gelu",
    "propagate_silu", "propagate_lipschitz", "propagate_hardswish", "propagate_monotone_ref",
    "propagate_softplus", "propagate_log", "propagate_sqrt", "propagate_rsqrt",
    "propagate_cast", "propagate_sum", "propagate_mean", "propagate_max", "propagate_var",
    "propagate_matmul", "propagate_decomposed",
]

GELU_LIPSCHITZ = 1.13  # max |gelu'| = 1.1289 (erf and tanh forms)
SILU_LIPSCHITZ = 1.1  # max |silu'| = 1.0998
HARDSWISH_LIPSCHITZ = 1.5  # hardswish' = (2x + 3)/6 on (-3, 3): in [-0.5, 1.5]; 0 below, 1 above
SOFTPLUS_THRESHOLD = 20.0  # torch's default: softplus(x) = x for x > 20
# softplus's downward jump at the threshold: log1p(exp(20)) - 20 = log1p(exp(-20)) = 2.0612e-9
SOFTPLUS_JUMP = 2.0613e-9
U64 = 2.0**-53
TRANS = 2.0**-40  # relative slack of the float64 transcendental references
TINY = 2.0**-1000  # absolute slack floor of transcendental evaluations
INFL = 1 + 2.0**-40  # inflation of bound arithmetic done in float64
_DENORM = 2.0**-1074


def _f(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _absfinite(v) -> np.ndarray:
    return np.abs(np.where(np.isfinite(v), v, 0.0))


def _count(shape, axis) -> int:
    return math.prod(shape) if axis is None else math.prod(shape[a] for a in np.atleast_1d(axis))


# ---------------------------------------------------------------------------
# slack rules: |float64 reference - exact| at the computed inputs
# ---------------------------------------------------------------------------
def slack_exact(v, ins, attrs):
    """The float64 reference is exact (selection, sign change, data movement,
    cast: the reference keeps the rounding)."""
    return np.zeros(np.shape(v))


def slack_correct(v, ins, attrs):
    """Correctly rounded in float64 without an underflow term (+, -, sqrt:
    exact when the result is subnormal): ``2**-52 |v|``."""
    return 2 * U64 * _absfinite(v)


def slack_correct_underflow(v, ins, attrs):
    """Correctly rounded in float64, may underflow (*, /): ``2**-52 |v| + 2**-1074``."""
    return 2 * U64 * _absfinite(v) + _DENORM


def slack_two_roundings(v, ins, attrs):
    """Two float64 roundings (rsqrt = 1/sqrt, reciprocal as 1/x with a
    margin): ``2**-51 |v| + 2**-1074``."""
    return 4 * U64 * _absfinite(v) + _DENORM


def slack_three_roundings(v, ins, attrs):
    """Three float64 roundings, each relative to the exact result of its
    operation (hardswish's ``x * (x + 3) / 6``: the sum's rounding is
    relative to ``x + 3`` itself, so there is no cancellation term):
    ``((1 + 2**-53)**3 - 1) |v| < 2**-51 |v|``, plus one denormal for the
    product's and the quotient's underflow (each at most half a denormal)."""
    return 4 * U64 * _absfinite(v) + _DENORM


def _sum_abs(ins, attrs):
    x = np.abs(_f(ins[0]))
    axis = attrs.get("axis")
    n = _count(x.shape, axis)
    return np.sum(x, axis=axis, keepdims=attrs.get("keepdims", False)), n


def slack_sum(v, ins, attrs):
    """float64 sum of n terms: ``(n + 2) 2**-52 sum |x|`` (plus one denormal)."""
    s, n = _sum_abs(ins, attrs)
    return (n + 2) * 2 * U64 * s * INFL + _DENORM


def slack_mean(v, ins, attrs):
    """float64 mean of n terms: ``(n + 2) 2**-52 sum |x| / n`` (plus one denormal)."""
    s, n = _sum_abs(ins, attrs)
    return (n + 2) * 2 * U64 * (s / max(n, 1)) * INFL + _DENORM


def slack_var(v, ins, attrs):
    """float64 two-pass variance: ``(4n + 16) 2**-52 4 n max|x|^2 / N``."""
    x = _f(ins[0])
    axis = attrs.get("axis")
    n = _count(x.shape, axis)
    N = max(n - attrs.get("correction", 0), 1)
    m = np.max(np.abs(x), axis=axis, keepdims=attrs.get("keepdims", False)) if x.size else 0.0
    return (4 * n + 16) * 2 * U64 * 4 * n * m * m / N + _DENORM


def slack_matmul(v, ins, attrs):
    """float64 BLAS product with inner size k: ``(k + 2) 2**-52 |A| |B|``."""
    a, b = np.abs(_f(ins[0])), np.abs(_f(ins[1]))
    k = a.shape[-1]
    return (k + 2) * 2 * U64 * (a @ b) * INFL + _DENORM


def slack_transcendental(v, ins, attrs):
    """Transcendental references (tanh, sigmoid, erf, exp, log): ``2**-40 |v|
    + 2**-1000`` (the catalogue documents erf to 1e-13)."""
    return TRANS * _absfinite(v) + TINY


def slack_transcendental_x(v, ins, attrs):
    """``x * g(x)`` references (gelu, silu): ``2**-40 (|v| + |x|) + 2**-1000``."""
    return TRANS * (_absfinite(v) + np.abs(_f(ins[0]))) + TINY


def slack_decomposed(v, ins, attrs):
    """Marker of composites: the slack is accumulated primitive by primitive
    along the decomposition (running_bounds does that walk)."""
    raise TypeError("slack_decomposed marks a composite operator; running_bounds propagates through its "
                    "decomposition instead of calling it")


# ---------------------------------------------------------------------------
# propagation rules: sup |f(t) - f(x)| over |t - x| <= b
# ---------------------------------------------------------------------------
def propagate_moved(xs, bs, attrs, ref):
    """Data movement: the bounds move with the data (``ref`` applied to the bounds)."""
    return _f(ref(*bs, **attrs)), None


def propagate_gathered(xs, bs, attrs, ref):
    """gather: the bounds of the gathered input move with it; indices are exact."""
    return _f(ref(bs[0], *xs[1:], **attrs)), None


def propagate_add(xs, bs, attrs, ref):
    """``a +- b``: ``b_a + b_b``."""
    return bs[0] + bs[1], None


def slack_add_alpha(v, ins, attrs):
    """``x + alpha*y`` in float64: the product's rounding and the sum's,
    ``2**-52 (|v| + |alpha y|) + 2**-1074``."""
    return 2 * U64 * (_absfinite(v) + np.abs(attrs["alpha"] * _f(ins[1]))) * INFL + _DENORM


def propagate_add_alpha(xs, bs, attrs, ref):
    """``x + alpha*y``: ``b_x + |alpha| b_y``."""
    return (bs[0] + abs(attrs["alpha"]) * bs[1]) * INFL, None


def propagate_maximum(xs, bs, attrs, ref):
    """maximum / minimum (1-Lipschitz in each input): ``max(b_a, b_b)``."""
    return np.maximum(bs[0], bs[1]), None


def propagate_mul(xs, bs, attrs, ref):
    """``a * b``: ``|a| b_b + |b| b_a + b_a b_b``."""
    return (np.abs(xs[0]) * bs[1] + np.abs(xs[1]) * bs[0] + bs[0] * bs[1]) * INFL, None


def propagate_div(xs, bs, attrs, ref):
    """``a / b``: ``(b_a |b| + |a| b_b) / (|b| (|b| - b_b))``; inf (domain)
    when the interval of b contains 0."""
    a, b = xs
    ba, bb = bs
    den = np.abs(b) * (np.abs(b) - bb)
    dom = (np.abs(b) <= bb) & ((ba > 0) | (bb > 0))
    r = np.where(dom, np.inf, (ba * np.abs(b) + np.abs(a) * bb) / np.where(den > 0, den, 1.0))
    return np.where((ba == 0) & (bb == 0), 0.0, r) * INFL, dom


def propagate_identity(xs, bs, attrs, ref):
    """1-Lipschitz with constant 1 in the one input (x + s, x - s, s - x, -x,
    |x|, relu): the input bound."""
    return bs[0], None


def propagate_mul_scalar(xs, bs, attrs, ref):
    """``x * s``: ``|s| b``."""
    return abs(attrs["scalar"]) * bs[0] * INFL, None


def propagate_div_scalar(xs, bs, attrs, ref):
    """``x / s``: ``b / |s|``."""
    return bs[0] / abs(attrs["scalar"]) * INFL, None


def _recip(s, x, b):
    dom = (np.abs(x) <= b) & (b > 0)
    r = abs(s) * b / np.where(dom, 1.0, np.abs(x) * (np.abs(x) - b))
    return np.where(dom, np.inf, np.where(b == 0, 0.0, r * INFL)), dom


def propagate_rdiv_scalar(xs, bs, attrs, ref):
    """``s / x``: ``|s| b / (|x| (|x| - b))``; inf (domain) when the interval contains 0."""
    return _recip(attrs["scalar"], xs[0], bs[0])


def propagate_reciprocal(xs, bs, attrs, ref):
    """``1 / x``: ``b / (|x| (|x| - b))``; inf (domain) when the interval contains 0."""
    return _recip(1.0, xs[0], bs[0])


def _may_flip(c, bc) -> np.ndarray:
    """Where a condition value ``c`` (true iff ``c != 0``) with bound ``bc``
    may have the other truth value exactly: ``bc > 0`` and the interval
    ``[c - bc, c + bc]`` holds both zero and non-zero values (NaN: always)."""
    c, bc = _f(c), _f(bc)
    with np.errstate(invalid="ignore"):
        return (bc > 0) & ~(np.abs(c) > bc)


def propagate_where(xs, bs, attrs, ref):
    """``where(c, a, b)`` is an exact selection (slack 0).  Where the
    condition is exact (its bound is 0, or its interval keeps one truth
    value): the bound of the selected input.  Where the condition may flip
    (a comparison whose inputs carry error, see :func:`propagate_compare`):
    the exact result may be the other branch, so the bound is
    ``max(b_sel, |other - sel| + b_other)`` -- finite and rigorous, inf only
    when the other branch is not finite."""
    c, a, b = (_f(x) for x in xs)
    bc, ba, bb = (_f(x) for x in bs)
    pick = c != 0
    sel = np.where(pick, ba, bb)
    if not np.any(bc):
        return sel, None
    flip = _may_flip(c, bc)
    with np.errstate(all="ignore"):
        other = np.where(pick, np.abs(b - a) + bb, np.abs(a - b) + ba) * INFL
        other = np.where(np.isnan(other), np.inf, other)
    return np.where(flip, np.maximum(sel, other), sel), None


def propagate_compare(xs, bs, attrs, ref):
    """Comparisons (``a > b``, ``>=``, ``<``, ``<=``, ``==``, ``!=``) give 0
    or 1 and are exact selections (slack 0).  When the inputs carry error
    the exact comparison can differ from the computed one: wherever
    ``|a - b| <= b_a + b_b`` (intervals that overlap, NaN included) the
    bound is 1 (the value may flip), elsewhere 0.  A ``where`` reading such
    a condition takes both branches into account (:func:`propagate_where`)."""
    a, b = _f(xs[0]), _f(xs[1])
    s = (_f(bs[0]) + _f(bs[1])) * INFL
    with np.errstate(invalid="ignore"):
        flip = (s > 0) & ~(np.abs(a - b) > s)
    return flip.astype(np.float64), None


def propagate_constant(xs, bs, attrs, ref):
    """A constant has no input: bound 0 (its value is exact in float64; the
    kernel's rounding to S is the node's own local error)."""
    return np.zeros(np.shape(ref(**attrs))), None


def propagate_gelu(xs, bs, attrs, ref):
    """gelu: Lipschitz constant :data:`GELU_LIPSCHITZ`."""
    return GELU_LIPSCHITZ * bs[0], None


def propagate_silu(xs, bs, attrs, ref):
    """silu: Lipschitz constant :data:`SILU_LIPSCHITZ`."""
    return SILU_LIPSCHITZ * bs[0], None


def propagate_lipschitz(L: float):
    """A propagation rule for an operator that is ``L``-Lipschitz in its one
    input: ``L b`` (inflated for its float64 evaluation)."""
    def rule(xs, bs, attrs, ref):
        return L * bs[0] * INFL, None
    rule.__name__ = rule.__qualname__ = f"propagate_lipschitz_{L:g}"
    rule.__doc__ = f"{L:g}-Lipschitz in the one input: ``{L:g} b``."
    return rule


propagate_hardswish = propagate_lipschitz(HARDSWISH_LIPSCHITZ)
propagate_hardswish.__doc__ = (
    "hardswish ``x relu6(x + 3) / 6``: Lipschitz constant :data:`HARDSWISH_LIPSCHITZ` = 1.5 "
    "(its slope ``(2x + 3)/6`` on (-3, 3) lies in [-0.5, 1.5]; 0 below -3, 1 above 3).")


def _monotone(fn, x, b, lo_ok=None):
    """sup |f(t) - f(x)| over |t - x| <= b for monotone f: the endpoints,
    widened outward by one fp64 ulp, plus their evaluation slack."""
    lo = np.nextafter(x - b, -np.inf)
    hi = np.nextafter(x + b, np.inf)
    fx, flo, fhi = fn(x), fn(lo), fn(hi)
    d = np.maximum(np.abs(flo - fx), np.abs(fhi - fx))
    d = np.where(b == 0, 0.0, d)
    dom = np.zeros(np.shape(x), bool) if lo_ok is None else (~lo_ok(lo, hi) & (b > 0))
    # an infinite input bound stays infinite even where f is bounded (tanh, erf, sigmoid): the
    # input may be inf, and inf - inf or exp(inf - inf) is NaN in every implementation
    d = np.where(dom | np.isnan(d) | np.isinf(b), np.inf, d)
    sl = TRANS * (_absfinite(flo) + _absfinite(fhi) + _absfinite(fx))
    return d + np.where(b == 0, 0.0, sl), dom


def propagate_monotone_ref(xs, bs, attrs, ref):
    """Monotone on the whole line (exp, tanh, sigmoid, erf): the operator's
    reference at the interval ends."""
    return _monotone(lambda t: _f(ref(t, **attrs)), xs[0], bs[0])


def softplus_jump(beta: float = 1.0, threshold: float = SOFTPLUS_THRESHOLD) -> float:
    """softplus's downward jump at ``x = threshold / beta``: ``log1p(exp(-threshold)) / beta``
    (:data:`SOFTPLUS_JUMP` for torch's defaults), with a float64 margin."""
    if beta == 1.0 and threshold == SOFTPLUS_THRESHOLD:
        return SOFTPLUS_JUMP
    return float(np.log1p(np.exp(-threshold)) / beta) * (1 + 2.0**-40)


def propagate_softplus(xs, bs, attrs, ref):
    """softplus (``x`` for ``beta x > threshold``, else ``log1p(exp(beta x)) / beta``;
    torch's defaults ``beta=1``, ``threshold=20``): increasing on each side of
    ``threshold / beta`` with a downward jump of :func:`softplus_jump` there, so the
    reference at the interval ends (:func:`propagate_monotone_ref`) plus twice the
    jump where the interval contains the switch point and a point above it (a value
    on either side of the jump may sit up to one jump outside the ends' range)."""
    x, b = xs[0], bs[0]
    beta, t = float(attrs.get("beta", 1.0)), float(attrs.get("threshold", SOFTPLUS_THRESHOLD))
    d, dom = _monotone(lambda v: _f(ref(v, **attrs)), x, b)
    lo = np.nextafter(x - b, -np.inf)
    hi = np.nextafter(x + b, np.inf)
    x0 = t / beta
    straddle = (lo <= x0) & (hi > x0) & (b > 0)
    return d + np.where(straddle, 2 * softplus_jump(beta, t), 0.0), dom


def propagate_log(xs, bs, attrs, ref):
    """log: monotone on x > 0; inf (domain) when the interval reaches <= 0."""
    return _monotone(np.log, xs[0], bs[0], lambda lo, hi: lo > 0)


def propagate_sqrt(xs, bs, attrs, ref):
    """sqrt: monotone on x >= 0; inf (domain) when the interval reaches < 0."""
    return _monotone(np.sqrt, xs[0], bs[0], lambda lo, hi: lo >= 0)


def propagate_rsqrt(xs, bs, attrs, ref):
    """rsqrt: monotone on x > 0; inf (domain) when the interval reaches <= 0."""
    return _monotone(lambda t: 1.0 / np.sqrt(t), xs[0], bs[0], lambda lo, hi: lo > 0)


def propagate_cast(xs, bs, attrs, ref):
    """cast (round to ``to``, monotone): the rounded interval ends."""
    to = get_format(attrs["to"])
    return _monotone(lambda t: _f(round_to(_f(t), to)), xs[0], bs[0])


def propagate_sum(xs, bs, attrs, ref):
    """sum: the sum of the bounds."""
    return np.sum(bs[0], axis=attrs.get("axis"), keepdims=attrs.get("keepdims", False)) * INFL, None


def propagate_mean(xs, bs, attrs, ref):
    """mean: the mean of the bounds."""
    return np.mean(bs[0], axis=attrs.get("axis"), keepdims=attrs.get("keepdims", False)) * INFL, None


def propagate_max(xs, bs, attrs, ref):
    """max / min (1-Lipschitz in the sup norm): the largest bound."""
    b = _f(bs[0])
    return np.max(b, axis=attrs.get("axis"), keepdims=attrs.get("keepdims", False)) * INFL, None


def propagate_var(xs, bs, attrs, ref):
    """var: ``(2/N) sum |x - mean| b + (1/N) sum b^2`` (plus the float64
    rounding of the mean); inf when N = n - correction <= 0."""
    x, b = xs[0], bs[0]
    axis, keep, corr = attrs.get("axis"), attrs.get("keepdims", False), attrs.get("correction", 0)
    n = _count(x.shape, axis)
    N = n - corr
    if N <= 0:
        return np.full(np.shape(ref(x, **attrs)), np.inf), None
    mu = np.mean(x, axis=axis, keepdims=True)
    t1 = np.sum(np.abs(x - mu) * b, axis=axis, keepdims=keep)
    t2 = np.sum(b * b, axis=axis, keepdims=keep)
    # |mean| rounding in fp64 shifts |x - mu| by at most n 2**-52 max|x|
    mx = np.max(np.abs(x), axis=axis, keepdims=keep) if x.size else 0.0
    t1 = t1 + np.sum(b, axis=axis, keepdims=keep) * (n + 2) * 2 * U64 * mx
    return (2 * t1 + t2) / N * (1 + 2.0**-30), None


def propagate_matmul(xs, bs, attrs, ref):
    """matmul: ``|A| b_B + b_A |B| + b_A b_B`` (inflated for its float64 evaluation)."""
    A, B = xs
    bA, bB = bs
    k = A.shape[-1]
    r = np.abs(A) @ bB + bA @ np.abs(B) + bA @ bB
    return r * (1 + (k + 4) * 2 * U64), None


def slack_softmax(v, ins, attrs):
    """float64 softmax ``exp(x - max) / sum``: relative ``2**-39 + (n + 4 + 2
    max|x - max|) 2**-51`` of ``|v|`` (the difference, exp, the n-term sum and
    the division), plus two denormals (exp and the division may each lose
    half a denormal when the result underflows)."""
    x = _f(ins[0])
    axis = attrs["axis"]
    n = x.shape[axis]
    spread = np.max(x, axis=axis, keepdims=True) - np.min(x, axis=axis, keepdims=True)
    rel = 2 * TRANS + (n + 4 + 2 * spread) * 4 * U64
    return (_absfinite(v) * rel) * INFL + 2 * _DENORM


def propagate_softmax(xs, bs, attrs, ref):
    """softmax: moving every input of a row by at most ``B`` (the row's
    largest bound) scales each output by a factor in ``[e**-2B, e**2B]``, so
    ``|softmax(t) - softmax(x)| <= min(softmax(x) expm1(2B), 1)``; softmax(x)
    is bounded by its float64 reference plus :func:`slack_softmax`."""
    x, b = xs[0], bs[0]
    axis = attrs["axis"]
    v = _f(ref(x, **attrs))
    s = v + slack_softmax(v, xs, attrs)
    B = np.max(b, axis=axis, keepdims=True)
    r = np.minimum(s * np.expm1(2 * B) * INFL, 1.0)
    return np.where(B == 0, 0.0, r), None


def propagate_decomposed(xs, bs, attrs, ref):
    """Marker of composites: propagated through the decomposition evaluated
    in float64 (running_bounds does that walk)."""
    raise TypeError("propagate_decomposed marks a composite operator; running_bounds propagates through its "
                    "decomposition instead of calling it")


# ---------------------------------------------------------------------------
# the composite marker
# ---------------------------------------------------------------------------
DECOMPOSED = (slack_decomposed, propagate_decomposed)
"""The (slack, propagate) pair of a composite bounded through its decomposition."""


def is_decomposed(rule) -> bool:
    """Whether a (slack, propagate) pair (or a propagation rule alone) is the
    composite marker :data:`DECOMPOSED`."""
    if rule is None:
        return False
    prop = rule[1] if isinstance(rule, tuple) else rule
    return prop is propagate_decomposed


# --- matrix unit ---
__all__ += ["mma_block_constants", "mma_bound"]

# A-priori bound of a matrix unit's D = A B + C (numlab.kernels.mma.mma; the unit's
# parameters are read from the object, so this layer-1 module needs no kernels import).
# Running bounds need no rule of their own: numlab.running_bounds measures every node's
# local error |computed - float64 reference| whatever kernel computed it, so a matmul on
# a unit is covered by the matmul rules above (tests/test_mma_lab.py checks it).
def _mma_fmt(name: str):
    f = get_format(name)
    return f.p, f.emin, f.emax, float(f.max)


def mma_block_constants(unit) -> tuple[float, float]:
    """``(delta, eta)`` of one block of ``unit``: a block that adds the terms
    ``t`` to the running value ``d`` returns ``d'`` with

        ``|d' - (d + sum t)| <= delta (sum_k hat_t_k + |d|) + eta``

    where ``hat_t_k = max(|a_k|, 2**emin_in) max(|b_k|, 2**emin_in)``
    (``>= |a_k b_k|``, and ``>=`` the product's alignment anchor).

    Derivation (the algorithm of numlab.kernels.mma, Fasi et al. 2021
    section 5 / Khattak and Mikaitis' block FMA): every nonzero term (at most
    ``n + 1`` with the accumulator) is rounded to a multiple of
    ``u = 2**(E - 23 - align_bits)`` with an error below ``u`` (truncation,
    floor, sticky) or ``u/2`` (rne); ``2**E`` is the largest anchor, at most
    ``max(hat_t_k, |d|, 2**-126)``, so the alignment error is at most
    ``(n + 1) 2**-(23 + align_bits) (sum hat_t + |d| + 2**-126)`` (Fasi,
    Higham, Mikaitis and Pranesh, PeerJ CS 7:e330, 2021, section 5, for the
    truncation per term).  The aligned sum is rounded once to the result
    format: relative error ``u_r = 2**(1 - p_r)`` (directed modes) or
    ``2**-p_r`` (rne), plus ``eta``: half or one subnormal spacing of the
    result format, or ``2**emin`` when subnormals are flushed (the standard
    model, Higham, ASNA eq. (2.4)/(2.8)).  With ``interleave=2`` the two
    sub-vector blocks and the round-to-nearest-even join (``join_bits`` extra
    bits and a sticky bit: error below ``2**-(p_r - 1 + join_bits)`` per
    operand) compose the same way.  Accumulating blocks is the block-FMA
    recursion of Blanchard, Higham, Lopez, Mary and Pranesh, "Mixed precision
    block fused multiply-add: error analysis and application to GPU tensor
    cores", SISC 42(3), 2020, with this per-block ``delta``
    (:func:`mma_bound`)."""
    p_out, emin_out, _, _ = _mma_fmt(unit.out_fmt)
    p_r = unit.result_bits if unit.result_bits is not None else p_out
    directed = unit.final_rounding != "rne"
    u_r = 2.0 ** (1 - p_r) if directed else 2.0 ** -p_r
    if unit.subnormals:
        eta = 2.0 ** (emin_out - p_r + 1) * (1.0 if directed else 0.5)
    else:
        eta = 2.0 ** emin_out
    n = unit.fma_size * unit.interleave  # terms per stage, at most (a safe count)
    d_a = (n + 1) * 2.0 ** -(23 + unit.align_bits)
    delta = (1 + u_r) * d_a + u_r
    eta_s = eta + (1 + u_r) * d_a * 2.0**-126
    if unit.interleave == 1:
        return delta * INFL, eta_s * INFL
    # two stages (the second takes the first's result as its accumulator) ...
    g2 = (1 + delta) ** 2 - 1
    e_r = (2 + delta) * eta_s
    # ... then the rne join with join_bits extra bits and a sticky bit
    d_j = 2.0 ** -(p_r - 1 + unit.join_bits)
    u_n = 2.0 ** -p_r
    eta_n = 2.0 ** (emin_out - p_r) if unit.subnormals else 2.0 ** emin_out
    delta_i = (1 + u_n) * (1 + d_j) * g2 + (1 + u_n) * d_j + u_n
    eta_i = (1 + u_n) * (1 + d_j) * e_r + (1 + u_n) * d_j * 2.0**-126 + eta_n
    return delta_i * INFL, eta_i * INFL


def mma_bound(a, b, unit, c=None) -> np.ndarray:
    """Elementwise a-priori bound on ``|mma(a, b, unit, c) - (A B + C)|``.

    ``a`` (M, K) and ``b`` (K, N) hold values of ``unit.in_fmt``, ``c``
    (M, N) values of ``unit.out_fmt`` (default 0).  With ``(delta, eta)``
    from :func:`mma_block_constants`, ``nb = ceil(K / block)`` blocks and
    ``hat_A = |C| + sum_k hat_t_k``, the block recursion
    ``E_j <= (1 + delta) E_(j-1) + delta hat_A_j + eta`` gives

        ``|D - (A B + C)| <= ((1 + delta)**nb - 1) (hat_A + eta / delta)``

    (Blanchard et al. 2020's block-FMA bound with the unit's per-block
    ``delta``).  With ``promote_every`` the unit's chunks of ``m`` blocks
    (error ``g = (1 + delta)**m - 1`` relative to the chunk's ``hat_A``) are
    added to an fp32 accumulator (``u = 2**-24``, nearest even):
    ``(1 + u)**nc g (hat_A + nc eta / delta) + ((1 + u)**nc - 1) hat_A``
    for ``nc`` chunks (plus a final rounding to fp16 when ``out_fmt`` is
    fp16).  Inputs flushed by ``subnormals=False`` add the products they
    remove.  The bound is ``inf`` where an input is NaN/inf, where
    ``hat_A`` plus the bound reaches the result format's largest value
    (overflow possible), and where ``carry_bits`` is too small to rule out a
    wrap of the aligned sum (``carry_bits < 2 + floor(log2(n + 1))``).
    Evaluated in float64 and inflated (``INFL``).
    """
    p_in, emin_in, _, _ = _mma_fmt(unit.in_fmt)
    p_out, emin_out, _, max_out = _mma_fmt(unit.out_fmt)
    A, B = _f(a), _f(b)
    M, K = A.shape
    N = B.shape[1]
    C = np.zeros((M, N)) if c is None else _f(c)
    bad = ~(np.isfinite(A).all(axis=1)[:, None] & np.isfinite(B).all(axis=0)[None, :] & np.isfinite(C))
    A, B, C = (np.where(np.isfinite(x), x, 0.0) for x in (A, B, C))
    lost = np.zeros((M, N))
    if not unit.subnormals:
        tiny_in, tiny_out = 2.0**emin_in, 2.0**emin_out
        sa, sb = np.abs(A) < tiny_in, np.abs(B) < tiny_in
        lost = (np.abs(A) * sa) @ np.abs(B) + np.abs(A) @ (np.abs(B) * sb)
        lost = lost + np.abs(C) * (np.abs(C) < tiny_out)
        A, B = np.where(sa, 0.0, A), np.where(sb, 0.0, B)
        C = np.where(np.abs(C) < tiny_out, 0.0, C)
    ha = np.where(A != 0, np.maximum(np.abs(A), 2.0**emin_in), 0.0)
    hb = np.where(B != 0, np.maximum(np.abs(B), 2.0**emin_in), 0.0)
    hat = (np.abs(C) + ha @ hb) * (1 + 2 * (K + 2) * U64)
    delta, eta = mma_block_constants(unit)
    blk = unit.fma_size * unit.interleave
    nb = -(-K // blk)
    if unit.promote_every is None:
        bnd = ((1 + delta) ** nb - 1) * (hat + eta / delta)
        top = max_out
    else:
        m = unit.promote_every // blk
        nc = max(1, -(-nb // m))
        g = (1 + delta) ** min(m, max(nb, 1)) - 1
        u32 = 2.0**-24
        bnd = (1 + u32) ** nc * g * (hat + nc * eta / delta) + ((1 + u32) ** nc - 1) * hat
        if unit.out_fmt == "fp16":
            bnd = bnd + 2.0 ** -p_out * (hat + bnd) + 2.0 ** (emin_out - p_out)
        top = min(max_out, float(get_format("fp32").max))
    bnd = (bnd + lost) * INFL
    p_r = unit.result_bits if unit.result_bits is not None else p_out
    top = min(top, (2 - 2.0 ** (1 - p_r)) * 2.0 ** get_format(unit.out_fmt).emax)
    if unit.carry_bits is not None and unit.carry_bits < 2 + math.floor(math.log2(blk + 1)):
        bnd = np.full_like(bnd, np.inf)
    return np.where(bad | (hat + bnd >= top), np.inf, bnd)


# --- block-scaled operators ---
# Rules of quantize / block_scale / dequantize / scaled_matmul
# (numlab.kernels.scaled); the formats are numlab.scaled_formats'.  A block's
# shape follows from the shapes of a tensor and of its scales.
def expand_block_scales(s, shape) -> np.ndarray:
    """Per-block scales ``s`` of shape ``(..., R/bm, C/bn)`` repeated to ``shape``
    ``(..., R, C)`` (each scale over its bm x bn block)."""
    s = np.asarray(s)
    R, C = shape[-2:]
    bm, bn = R // s.shape[-2], C // s.shape[-1]
    return np.repeat(np.repeat(s, bm, axis=-2), bn, axis=-1)


SCALED_FORMATS: dict = {n: (f.max_elem, not f.tensor_scale) for n, f in GRAPH_FORMATS.items()}
"""Block-scaled format name (:data:`numlab.scaled_formats.GRAPH_FORMATS`) ->
(largest element, whether a block's scale depends only on its own block)."""


def _scaled_format(attrs):
    name = attrs["fmt"]
    if name not in SCALED_FORMATS:
        raise ValueError(f"fmt={name!r} has no bound constants; known: {sorted(SCALED_FORMATS)}")
    return SCALED_FORMATS[name]


_WIDEN = 2.0**-50  # the float64 reference divides (one rounding) before it rounds to the element


def propagate_quantize(xs, bs, attrs, ref, *, block_scale):
    """quantize, elements ``q = round(x / s)``: for a format whose scale depends
    only on its own block, a moved input ``x'`` in ``[x - b, x + b]`` has a scale
    ``s'`` between the scales of its block's amax envelope (see
    :func:`propagate_block_scale`), so ``x' / s'`` lies between the extreme
    quotients of those endpoints (widened by 2**-50 for the reference's
    division) and, rounding being monotone, ``q'`` between their roundings.
    Never more than ``2 max_elem`` (elements lie in ``[-max_elem, max_elem]``),
    which is the bound when a tensor scale couples the blocks (NVFP4); 0 when
    no input moves.  ``block_scale(x, fmt=...)`` is block_scale's float64
    reference (the operator registry passes it: the scale rule is a kernel's)."""
    max_elem, local = _scaled_format(attrs)
    x, b = _f(xs[0]), _f(bs[0])
    if not np.any(b > 0):
        return np.zeros(x.shape), None
    if not local:
        return np.full(x.shape, 2 * max_elem), None
    fmt = GRAPH_FORMATS[attrs["fmt"]]

    def scale_of(a):
        return expand_block_scales(block_scale(a, fmt=attrs["fmt"]), a.shape)

    def elem_round(v):
        v = np.asarray(v, dtype=np.float64)
        return np.asarray(round_to(v, fmt.elem_format, saturate=fmt.overflow == "saturate"), dtype=np.float64)

    s_lo, s_hi = scale_of(np.maximum(np.abs(x) - b, 0.0)), scale_of(np.abs(x) + b)
    lo = np.minimum((x - b) / s_lo, (x - b) / s_hi)
    hi = np.maximum((x + b) / s_lo, (x + b) / s_hi)
    lo, hi = lo - np.abs(lo) * _WIDEN, hi + np.abs(hi) * _WIDEN
    q = _f(ref(x, **attrs))
    bound = np.maximum(_f(elem_round(hi)) - q, q - _f(elem_round(lo)))
    return np.minimum(bound, 2 * max_elem), None


def propagate_block_scale(xs, bs, attrs, ref):
    """block_scale: for a format whose scale is a non-decreasing function of
    its own block's amax (every rule without a tensor scale), the moved scale
    lies between the scales of ``max(|x| - b, 0)`` and ``|x| + b`` (the amax
    envelope), evaluated by the reference; a tensor scale couples every block
    (NVFP4), so then inf for every scale once any input moves."""
    _, local = _scaled_format(attrs)
    x, b = _f(xs[0]), _f(bs[0])
    s = _f(ref(x, **attrs))
    if not np.any(b > 0):
        return np.zeros(s.shape), None
    if not local:
        return np.full(s.shape, np.inf), None
    lo = _f(ref(np.maximum(np.abs(x) - b, 0.0), **attrs))
    hi = _f(ref(np.abs(x) + b, **attrs))
    return np.maximum(hi - s, s - lo) * INFL, None


def propagate_dequantize(xs, bs, attrs, ref):
    """dequantize ``q * s`` (s per block): ``|q| b_s + |s| b_q + b_q b_s``."""
    q, s = _f(xs[0]), expand_block_scales(_f(xs[1]), np.shape(xs[0]))
    bq, bsc = _f(bs[0]), expand_block_scales(_f(bs[1]), np.shape(xs[0]))
    return (np.abs(q) * bsc + np.abs(s) * bq + bq * bsc) * INFL, None


def _dequantised(q, s, bq=None, bsc=None):
    q = _f(q)
    s = expand_block_scales(_f(s), q.shape)
    if bq is None:
        return q * s
    bsc = expand_block_scales(_f(bsc), q.shape)
    return q * s, (np.abs(q) * bsc + np.abs(s) * _f(bq) + _f(bq) * bsc) * INFL


def slack_scaled_matmul(v, ins, attrs):
    """scaled_matmul's float64 reference ``(qa sa) @ (qb sb)``: the dequantised
    operands are exact in float64 (<= 4 + 24 significant bits), then
    :func:`slack_matmul`."""
    return slack_matmul(v, [_dequantised(ins[0], ins[1]), _dequantised(ins[2], ins[3])], attrs)


def propagate_scaled_matmul(xs, bs, attrs, ref):
    """scaled_matmul: bounds of the dequantised operands (as
    :func:`propagate_dequantize`), then :func:`propagate_matmul`."""
    A, bA = _dequantised(xs[0], xs[1], bs[0], bs[1])
    B, bB = _dequantised(xs[2], xs[3], bs[2], bs[3])
    return propagate_matmul([A, B], [bA, bB], attrs, ref)
