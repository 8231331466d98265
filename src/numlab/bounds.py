"""A-priori rounding-error bounds (worst case and probabilistic).

Model (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
SIAM 2002 -- "ASNA" below -- section 2.2): every basic operation satisfies
``fl(x op y) = (x op y)(1 + d)``, ``|d| <= u`` with ``u = 2**-p`` for
round-to-nearest (``u = 2**(1-p)`` for the directed modes and round-to-odd),
as long as no overflow occurs.  Additions and subtractions satisfy it even
with gradual underflow (their results are exact when subnormal); products
that may underflow get an extra absolute term (``eta``, ASNA section 2.1),
included below where products are rounded.

``gamma_k = k u / (1 - k u)`` (ASNA Lemma 3.1) bounds ``|prod (1+d_i)^{+-1} - 1|``
over ``k`` factors.  A summation tree in which every summand passes through at
most ``h`` rounded additions satisfies ``|s_hat - s| <= gamma_h sum|x_i|``
(ASNA section 4.2); ``h`` is the *depth* of the order:

==========================  ==================================  ==============
order                       depth h(n)                          source
==========================  ==================================  ==============
recursive (sequential)      n - 1                               ASNA eq. (4.4)
pairwise                    ceil(log2 n)                        ASNA eq. (4.6)
blocked(T, inner, outer)    h_inner(T) + h_outer(ceil(n / T))   ASNA section 4.2,
                                                                Blanchard et al. 2020
lanes(L, combine)           ceil(n / L) - 1 + h_combine(L)      same tree argument
kahan                       bound 2u + 4 n u^2 (not a depth)    ASNA eq. (4.9)
==========================  ==================================  ==============

Dot products and matrix products add one rounding for each product when
products are rounded (ASNA eqs. (3.4)-(3.5) and (3.13):
``|fl(x^T y) - x^T y| <= gamma_n |x|^T |y|``); in mixed precision (values of
a low-precision format, exact products in an fp32 accumulator, fp32
accumulation, one final rounding to the storage format) the products are
exact and the final rounding adds ``u_out |s|``.  The block-FMA bound follows
Blanchard, Higham, Lopez, Mary and Pranesh, "Mixed precision block fused
multiply-add: error analysis and application to GPU tensor cores", SIAM J.
Sci. Comput. 42(3), 2020 (section 3): one rounding per block of ``b``
products.  The probabilistic bound is Higham and Mary, "A new approach to
probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019:
Theorem 2.4 (``gamma~_n(lam)``, probability ``P(lam)``) and Theorem 3.1 (inner
products and sums, probability ``Q(lam, n)``).

Every bound here returns ``inf`` when an intermediate could overflow the
accumulator (a bound that pretends overflow cannot happen would be wrong) and
when ``k u >= 1``.
"""

from __future__ import annotations

import math

import numpy as np

from . import running_bounds
from .contract_bounds import ContractBound, contract_bound
from .formats import FP32, Format, get_format
from .kernels.orders import parse_order
from .kernels.tiled_matmul import MATMUL_ALGOS

__all__ = [
    "contract_bound",
    "ContractBound",
    "unit_roundoff",
    "gamma",
    "as_order",
    "depth",
    "order_bound",
    "sum_bound",
    "dot_bound",
    "matmul_bound",
    "mixed_dot_bound",
    "block_fma_bound",
    "prob_gamma",
    "prob_probability",
    "prob_lambda",
    "prob_sum_bound",
    "plan_bounds",
    "rounding_counts",
    "chain_bound",
]

_DIRECTED = ("rtz", "up", "down", "odd", "stochastic")
_F64_SLACK = 1 + 2.0**-40  # absorbs the fp64 rounding of the bound's own arithmetic


def unit_roundoff(fmt, rounding: str = "rne") -> float:
    """``u`` of ``fmt``: ``2**-p`` for round-to-nearest, ``2**(1-p)`` for the
    directed modes, round-to-odd and stochastic rounding (ASNA section 2.1).
    A float is returned unchanged (already a unit roundoff)."""
    if isinstance(fmt, float | int) and not isinstance(fmt, bool):
        if not 0 < fmt < 1:
            raise ValueError(f"u={fmt!r} must lie in (0, 1)")
        return float(fmt)
    f = get_format(fmt)
    if rounding == "rne":
        return f.u
    if rounding in _DIRECTED:
        return f.eps
    raise ValueError(f"rounding={rounding!r} is not a rounding mode; valid: ['rne', {', '.join(map(repr, _DIRECTED))}]")


def gamma(k, u) -> float:
    """Higham's ``gamma_k = k u / (1 - k u)`` (ASNA Lemma 3.1); ``inf`` when
    ``k u >= 1``.  ``u`` is a unit roundoff or a Format (round to nearest)."""
    if k < 0:
        raise ValueError(f"k={k!r} must be >= 0")
    u = unit_roundoff(u)
    ku = k * u
    if ku >= 1:
        return math.inf
    return ku / (1 - ku) * _F64_SLACK


def as_order(order):
    """An order object with ``depth(n)`` (numlab.kernels orders): accepts the
    kernels' Order objects, their string forms (``"pairwise"``,
    ``"blocked(512,sequential,pairwise)"``, ``"lanes(8)"``, ``"kahan"``) or
    any object with a ``depth`` method."""
    if hasattr(order, "depth"):
        return order
    return parse_order(order)


def _is_kahan(o) -> bool:
    return type(o).__name__ == "Kahan"


def depth(order, n: int) -> int:
    """Largest number of rounded additions any of ``n`` summands passes through
    in ``order`` (see the module table)."""
    if n < 0:
        raise ValueError(f"n={n!r} must be >= 0")
    return int(as_order(order).depth(int(n)))


def order_bound(order, n: int, u) -> float:
    """``|s_hat - s| / sum|x_i|`` bound of summing ``n`` numbers in ``order``
    with unit roundoff ``u``: ``gamma_depth`` (ASNA section 4.2), or for Kahan
    ``2u + 4 n u^2`` (ASNA eq. (4.9) with Goldberg's explicit constant, valid
    for ``n u < 0.1``, else inf)."""
    o = as_order(order)
    u = unit_roundoff(u)
    if _is_kahan(o):
        if n * u >= 0.1:
            return math.inf
        return (2 * u + 4 * n * u * u) * _F64_SLACK
    return gamma(depth(o, n), u)


def _final(bound_rel_abs, s_abs, out_u):
    """Add the final rounding to the output format: ``|fl(t) - s| <=
    u_out (|s| + |t - s|) + |t - s|``."""
    if out_u is None:
        return bound_rel_abs
    return (out_u * s_abs + (1 + out_u) * bound_rel_abs) * _F64_SLACK


def _overflow_guard(bound, abs_sum, acc: Format):
    """inf where a partial sum could exceed the accumulator's range:
    every partial sum is at most ``sum|x_i| + bound`` in magnitude."""
    lim = acc.max
    with np.errstate(over="ignore", invalid="ignore"):
        risky = ~(np.asarray(abs_sum) + np.asarray(bound) < lim)
    return np.where(risky, np.inf, bound)


def sum_bound(abs_sum, n: int, order="sequential", acc=FP32, out=None, *,
              acc_rounding: str = "rne", out_rounding: str = "rne", s_abs=None):
    """Bound on ``|s_hat - s|`` for a sum of ``n`` values of ``acc``.

    Parameters
    ----------
    abs_sum : float or array
        ``sum |x_i|`` (per output element).
    n : int
        Number of summands.
    order : kernels Order or str
        Summation order (module table).
    acc : Format
        Accumulator format; every addition rounds to it (the summands must be
        values of ``acc``; fp16 data in an fp32 accumulator is).
    out : Format, optional
        Output format: one more rounding of the accumulated result.
    s_abs : float or array, optional
        ``|s|`` for the final rounding term (default ``abs_sum``, its upper
        bound).

    Returns
    -------
    float or ndarray
        ``gamma_h(u_acc) sum|x_i|`` (ASNA section 4.2), plus
        ``u_out |s| + u_out * that`` when ``out`` is given; ``inf`` where a
        partial sum could overflow ``acc`` or the output could overflow ``out``.
    """
    acc = get_format(acc)
    a = np.asarray(abs_sum, dtype=np.float64)
    if (a < 0).any():
        raise ValueError("abs_sum must be >= 0 (it is sum |x_i|)")
    b = order_bound(order, n, unit_roundoff(acc, acc_rounding)) * a
    b = _overflow_guard(b, a, acc)
    if out is not None:
        of = get_format(out)
        s = a if s_abs is None else np.asarray(s_abs, dtype=np.float64)
        b = _final(b, s, unit_roundoff(of, out_rounding))
        b = _overflow_guard(b, s, of)
    return b[()] if np.ndim(b) == 0 else b


def dot_bound(abs_dot, n: int, order="sequential", acc=FP32, out=None, *,
              products_exact: bool = False, fma: bool = False, acc_rounding: str = "rne",
              out_rounding: str = "rne", s_abs=None):
    """Bound on ``|fl(x^T y) - x^T y|`` given ``abs_dot = |x|^T |y|``.

    Rounded products add one to the depth: ``gamma_{h+1}`` (ASNA eq. (3.4):
    recursive order gives ``gamma_n``); with ``fma`` each product is rounded
    together with its addition, except the first, so the depth is still at most
    ``h + 1``; with ``products_exact`` (values of a format with ``2p <= p_acc``
    and no underflow, e.g. fp16 or bf16 products in fp32) the depth is ``h``.
    Rounded products in ``acc`` may underflow: ``n * eta`` with ``eta`` half
    the smallest subnormal of ``acc`` is added (ASNA section 3.1).
    """
    acc = get_format(acc)
    u = unit_roundoff(acc, acc_rounding)
    a = np.asarray(abs_dot, dtype=np.float64)
    o = as_order(order)
    if _is_kahan(o):
        rel = order_bound(o, n, u)
        if not products_exact:
            rel = (1 + rel) * (1 + u) - 1
    else:
        h = depth(o, n) + (0 if products_exact else 1)
        rel = gamma(h, u)
    b = rel * a
    if not products_exact:
        b = b + n * acc.smallest_subnormal / 2 * (1 + rel)
    b = _overflow_guard(b, a, acc)
    if out is not None:
        of = get_format(out)
        s = a if s_abs is None else np.asarray(s_abs, dtype=np.float64)
        b = _overflow_guard(_final(b, s, unit_roundoff(of, out_rounding)), s, of)
    return b[()] if np.ndim(b) == 0 else b


def mixed_dot_bound(abs_dot, n: int, fmt, order="sequential", acc=FP32, out=None, *,
                    s_abs=None):
    """Mixed precision dot product / matmul entry: inputs are values of ``fmt``
    (fp16, bf16, fp8), products are exact in ``acc`` (requires ``2 p_fmt <= p_acc``
    and no product underflow below ``acc``'s subnormals, checked), accumulation in
    ``acc`` with ``order``, one final rounding to ``out`` (default ``fmt``)::

        |s_hat - s| <= u_out |s| + (1 + u_out) gamma_h(u_acc) |x|^T |y|

    (ASNA eq. (3.4) with exact products; the fp32-accumulation model of
    Blanchard et al. 2020, section 2)."""
    fmtf, accf = get_format(fmt), get_format(acc)
    if 2 * fmtf.p > accf.p:
        raise ValueError(
            f"products of {fmtf.name} are not exact in {accf.name} (2p={2 * fmtf.p} > {accf.p}); use dot_bound"
        )
    exact = 2 * (fmtf.emin - fmtf.p + 1) >= accf.emin - accf.p + 1
    return dot_bound(abs_dot, n, order, accf, fmtf if out is None else out,
                     products_exact=exact, s_abs=s_abs)


def matmul_bound(a, b, *, k_tile: int | None = None, order="sequential", acc=FP32, out=None,
                 algo: str = "sequential", products_exact: bool | None = None,
                 block: int | None = None):
    """Elementwise bound on ``|C_hat - A B|`` (ASNA eq. (3.13): ``gamma_n |A||B|``).

    ``algo`` (the matmul algorithm, as :func:`numlab.kernels.matmul`'s):

    * ``"sequential"``: every product is added to the running fp32 sum in K
      order (``order`` inside a K-tile, tiles accumulated sequentially):
      depth ``h_order(k_tile) + ceil(K / k_tile) - 1`` (+1 for rounded products);
    * ``"split_k"``: the K-tile partials are combined by a pairwise tree:
      depth ``h_order(k_tile) + ceil(log2(ceil(K / k_tile)))``;
    * ``"block_fma"``: blocks of ``block`` (default ``k_tile``) products are
      each added to the accumulator with one rounding (Blanchard et al. 2020):
      depth ``ceil(K / block)``.

    ``products_exact`` defaults to ``2 p_in <= p_acc`` for the inputs' format
    when ``a`` is float16/bfloat16 (else False).  ``|A||B|`` is computed in
    float64 and inflated by ``(1 + 2 (K + 1) 2**-53)`` so that its own rounding
    cannot make the bound too small.
    """
    A, B = np.asarray(a), np.asarray(b)
    if A.ndim < 2 or B.ndim < 2 or A.shape[-1] != B.shape[-2]:
        raise ValueError(f"matmul_bound: shapes {A.shape} and {B.shape} do not multiply")
    if algo not in MATMUL_ALGOS:
        raise ValueError(f"algo={algo!r} is not valid; choose one of {list(MATMUL_ALGOS)}")
    K = A.shape[-1]
    kt = K if k_tile is None else int(k_tile)
    if kt <= 0:
        raise ValueError(f"k_tile={k_tile!r} must be > 0")
    accf = get_format(acc)
    if products_exact is None:
        try:
            inf_ = get_format(A.dtype)
            products_exact = 2 * inf_.p <= accf.p and inf_.name != accf.name
        except (ValueError, TypeError):
            products_exact = False
    ntiles = -(-K // kt)
    if algo == "block_fma":
        bs = kt if block is None else int(block)
        h = -(-K // bs)
        products_exact_eff = True  # inside a block FMA products and sums are exact
    else:
        inner = depth(order, min(kt, K))
        outer = ntiles - 1 if algo == "sequential" else (math.ceil(math.log2(ntiles)) if ntiles > 1 else 0)
        h = inner + outer
        products_exact_eff = products_exact
        if not products_exact:
            h += 1
    u = accf.u
    absab = (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))) * (1 + 2 * (K + 1) * 2.0**-53)
    bnd = gamma(h, u) * absab
    if not products_exact_eff:
        bnd = bnd + K * accf.smallest_subnormal / 2 * (1 + gamma(h, u))
    bnd = _overflow_guard(bnd, absab, accf)
    if out is not None:
        of = get_format(out)
        bnd = _overflow_guard(_final(bnd, absab, of.u), absab, of)
    return bnd


def block_fma_bound(abs_dot, n: int, b: int, fmt, acc=FP32, out=None, *,
                    inputs_rounded: bool = False, s_abs=None):
    """Blanchard, Higham, Lopez, Mary, Pranesh (2020), section 3: a b-FMA
    computes ``d = c + sum_{i<=b} a_i b_i`` with exact products and sum and one
    rounding to ``acc``; ``n / b`` such steps accumulate the dot product::

        |s_hat - s| <= gamma_{ceil(n/b)}(u_acc) |x|^T |y|

    plus the final rounding to ``out`` (default: none, output in ``acc``).
    With ``inputs_rounded`` the inputs were first rounded from ``acc`` to
    ``fmt`` (``(1 + u_fmt)^2`` on every product): the bound becomes
    ``(2 u_fmt + u_fmt^2 + (1 + u_fmt)^2 gamma_{ceil(n/b)}) |x|^T |y|``
    (their Theorem 3.2 structure), relative to the unrounded inputs.
    """
    if b <= 0:
        raise ValueError(f"b={b!r} must be > 0")
    fmtf, accf = get_format(fmt), get_format(acc)
    a = np.asarray(abs_dot, dtype=np.float64)
    g = gamma(-(-n // b), accf.u)
    if inputs_rounded:
        ul = fmtf.u
        rel = 2 * ul + ul * ul + (1 + ul) ** 2 * g
    else:
        rel = g
    bnd = _overflow_guard(rel * a * _F64_SLACK, a, accf)
    if out is not None:
        of = get_format(out)
        s = a if s_abs is None else np.asarray(s_abs, dtype=np.float64)
        bnd = _overflow_guard(_final(bnd, s, of.u), s, of)
    return bnd[()] if np.ndim(bnd) == 0 else bnd


# --------------------------------------------------------------------------
# probabilistic (Higham & Mary 2019)
# --------------------------------------------------------------------------
def prob_gamma(n: int, u, lam: float) -> float:
    """``gamma~_n(lam) = exp(lam sqrt(n) u + n u^2 / (1 - u)) - 1``
    (= ``lam sqrt(n) u + O(u^2)``; Higham & Mary 2019, Theorem 2.4)."""
    u = unit_roundoff(u)
    if lam <= 0:
        raise ValueError(f"lam={lam!r} must be > 0")
    return math.expm1(lam * math.sqrt(n) * u + n * u * u / (1 - u))  # contract_rules.prob_gamma_u caps it


def prob_probability(n: int, lam: float, u=FP32) -> float:
    """Probability with which the inner-product / summation bound of
    :func:`prob_sum_bound` holds: ``Q(lam, n) = 1 - n (1 - P(lam))`` with
    ``P(lam) = 1 - 2 exp(-lam^2 (1 - u)^2 / 2)`` (Higham & Mary 2019,
    Theorem 3.1, with ``P(lam)`` from Theorem 2.4), clipped at 0."""
    u = unit_roundoff(u)
    p_fail = 2 * math.exp(-(lam**2) * (1 - u) ** 2 / 2)
    return max(0.0, 1.0 - n * p_fail)


def prob_lambda(n: int, prob: float, u=FP32) -> float:
    """Smallest ``lam`` with :func:`prob_probability` ``>= prob``."""
    if not 0 < prob < 1:
        raise ValueError(f"prob={prob!r} must lie in (0, 1)")
    u = unit_roundoff(u)
    return math.sqrt(2 * math.log(2 * n / (1 - prob))) / (1 - u)


def prob_sum_bound(abs_sum, n: int, u=FP32, *, lam: float | None = None, prob: float = 0.99):
    """Probabilistic bound ``gamma~_n(lam) sum|x_i|`` for recursive summation /
    inner products of length ``n`` (Higham & Mary 2019, Theorem 3.1).

    Holds with probability at least :func:`prob_probability` ``(n, lam)``
    under their model: the rounding errors are independent, mean-zero random
    variables bounded by ``u``.  Not a guarantee for a particular input (the
    worst-case bound is :func:`sum_bound`).  Give ``lam`` or the target
    ``prob`` (default 0.99).  Returns ``(bound, probability)``.
    """
    u = unit_roundoff(u)
    if lam is None:
        lam = prob_lambda(n, prob, u)
    g = prob_gamma(n, u, lam)
    return np.asarray(abs_sum, dtype=np.float64) * g, prob_probability(n, lam, u)


# --------------------------------------------------------------------------
# a plan (eager or fused) and a model: a bound for each output
# --------------------------------------------------------------------------
def plan_bounds(graph, inputs, *, mode: str = "fused", fmt="fp16", **run_kwargs) -> dict:
    """Per-output error bounds for running ``graph`` in ``mode`` on ``inputs``.

    Runs the plan and propagates numlab's trace enclosure through it
    operation by operation (:mod:`numlab.running_bounds`): every element of
    every output of numlab's own run satisfies ``|computed - exact| <= bound``
    (``inf`` where overflow is possible, NaN flagged).  It is built from
    numlab's intermediate values, so another kernel is not held to it: the
    bound every implementation of the plan's contract meets is
    :func:`contract_bound`.  Returns ``{output name: dict(bound=
    elementwise array, max=..., units=max bound / (u_S * max|exact|))}``.
    ``fmt`` is the storage format S (default fp16); ``run_kwargs`` go to
    :func:`numlab.execute.run`.
    """
    S = get_format(fmt, "fmt")
    rb = running_bounds.run_with_bounds(graph, inputs, mode=mode, fmt=S, **run_kwargs)
    out = {}
    for name in graph.outputs:
        bnd = rb.bounds[name]
        mag = np.abs(rb.reference[name]) if rb.reference is not None else None
        mx = float(np.max(bnd)) if bnd.size else 0.0
        scale = float(np.max(mag)) if mag is not None and mag.size else math.nan
        out[name] = {
            "bound": bnd,
            "max": mx,
            "units": mx / (S.u * scale) if scale and scale > 0 else math.nan,
        }
    return out


def rounding_counts(plan) -> dict:
    """A-priori rounding counts of a plan (eager or fused), per output.

    Walks ``plan.graph`` in topological order; along every path a node adds
    one rounding to the storage format S when its value leaves its block
    (``Block.outputs``: eager, every node; fused, the block boundary) and
    one fp32 rounding when it stays inside a code-generated block (fused
    intermediates are fp32).  Returns ``{output: {"S": k_S, "fp32": k_32}}``,
    the largest counts over the paths reaching the output.  This is the
    quantity behind the autofusion note's section 3.2 argument ("eager rounds
    to fp16 at every operator boundary, a fused block only at its
    boundary").  (The counts do not depend on the format: the former
    ``dtype`` argument changed nothing and is gone.)
    """
    owner = {}
    for b in plan.blocks:
        for m in b.members:
            owner[m] = b
    cnt = {k: (0, 0) for k in plan.graph.inputs}
    for node in plan.graph.nodes:
        ks = max((cnt[i][0] for i in node.inputs), default=0)
        k32 = max((cnt[i][1] for i in node.inputs), default=0)
        b = owner.get(node.name)
        if b is None or node.name in b.outputs or not getattr(b, "codegen", False):
            ks += 1
        else:
            k32 += 1
        cnt[node.name] = (ks, k32)
    return {o: {"S": cnt[o][0], "fp32": cnt[o][1]} for o in plan.graph.outputs}


def chain_bound(counts: dict, fmt="fp16", acc=FP32) -> float:
    """Relative error bound ``(1 + u_S)^k_S (1 + u_32)^k_32 - 1`` for the
    counts of :func:`rounding_counts`.

    Rigorous (ASNA Lemma 3.1: a product of ``(1 + d_i)`` factors) for a chain
    in which every operator multiplies or divides its inputs (condition number
    1 in each input: products, quotients, scaling by constants exact in the
    compute format) and every operation is correctly rounded; then
    ``|y_hat - y| <= chain_bound * |y|``.  For other operators the relative
    error also carries their condition numbers; use the running bounds
    (:func:`plan_bounds`).  Eager with ``k`` operators: ``gamma``-like
    ``(1 + u_S)^k - 1``; fused in one block: ``(1 + u_S)(1 + u_32)^(k-1) - 1``.
    ``fmt`` is the storage format S (default fp16), ``acc`` the format of
    fused intermediates.
    """
    uS, u32 = get_format(fmt, "fmt").u, get_format(acc, "acc").u
    return math.expm1(counts["S"] * math.log1p(uS) + counts["fp32"] * math.log1p(u32)) * _F64_SLACK
