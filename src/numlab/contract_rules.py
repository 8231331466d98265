"""Per-operator local terms of the contract bounds (numlab.bounds.contract_bound).

Every operator's registration (:mod:`numlab.ops`, ``OpInfo.local``) names one
function of this module: ``local(k, xs, bs, M, attrs) -> (err, fmt)``, a
bound on ``sup |impl(t) - f(t)|`` over the input box ``|t_i - xs_i| <= bs_i``
for every implementation of the operator that honours its kernel class, and
the format the implementation's result is rounded to (None: an exact
function of its inputs, such as a selection).  ``M`` bounds ``sup |f(t)|``
over the box (elementwise, the output's shape).  ``k`` is the local context
(:class:`numlab.contract_bounds.Local`): ``k.w`` the working format, ``k.acc``
the accumulator, ``k.kc`` the :class:`numlab.contract.KernelClass`,
``k.u(fmt)`` the unit roundoff under the class's rounding mode, ``k.eta(fmt)``
the absolute underflow term, ``k.rel(knob)`` the relative error of the
``rsqrt`` / ``divide`` / ``sqrt`` class, ``k.scalar(s)`` the value a scalar is
held as.  Rounding the result to S (where the plan stores it) is added by the
walker, not here.

Sources: the standard model ``fl(x op y) = (x op y)(1 + d)``, ``|d| <= u``,
with an absolute term for underflowing products (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, section 2.2);
summation in any order, ``|s_hat - s| <= gamma_(n-1) sum |t_i|`` (ibid.
section 4.2: the depth of any tree is at most n - 1); dot products with
rounded products, ``gamma_n |a|^T |b|`` (ibid. eq. (3.5)); the two-pass and
Welford variance analyses are derived in :func:`local_var` (Chan, Golub and
LeVeque, "Algorithms for computing the sample variance", Amer. Statist.
37(3), 1983, for the methods).

This module imports only numpy and math (layer 1).
"""

from __future__ import annotations

import math

import numpy as np

from . import bound_rules as R
from .formats import get_format

__all__ = [
    "gamma_u", "prob_gamma_u", "contains", "local_exact", "local_add", "local_mul", "local_div", "local_reciprocal", "local_sqrt",
    "local_rsqrt", "local_libm", "local_libm_x", "local_add_scalar", "local_add_alpha", "local_mul_scalar",
    "local_div_scalar", "local_rdiv_scalar", "local_constant", "local_cast", "local_sum", "local_mean",
    "local_var", "local_matmul", "local_quantize", "local_block_scale", "local_dequantize",
    "local_scaled_matmul", "local_composite", "softmax_error", "is_composite", "welford_mean_error", "welford_var_error", "two_pass_var_error",
]

INFL = R.INFL


def gamma_u(k, u) -> float:
    """``gamma_k = k u / (1 - k u)``, inf when ``k u >= 1`` (inflated for float64)."""
    ku = k * u
    return math.inf if ku >= 1 else ku / (1 - ku) * INFL


def prob_gamma_u(k, u, lam: float) -> float:
    """Higham and Mary's ``gamma~_k(lam) = exp(lam sqrt(k) u + k u^2 / (1 - u)) - 1``
    ("A new approach to probabilistic rounding error analysis", SIAM J. Sci.
    Comput. 41(5), 2019, Theorem 3.1), never above :func:`gamma_u`."""
    if lam <= 0:
        raise ValueError(f"lam={lam!r} must be > 0")
    return min(gamma_u(k, u), math.expm1(lam * math.sqrt(k) * u + k * u * u / (1 - u)) * INFL)


def _f(a):
    return np.asarray(a, dtype=np.float64)


def _mag(xs, bs, i=0):
    return np.abs(_f(xs[i])) + _f(bs[i])


def _guard(err, partial, fmt):
    """inf where an intermediate of size up to ``partial`` (a partial sum, in any
    order, or a block sum) may exceed the largest finite value of ``fmt``
    (overflow possible: the bound is unknown there, never silently finite)."""
    with np.errstate(invalid="ignore"):
        return np.where(_f(partial) * (1 + 2.0**-20) >= fmt.max, np.inf, err)


def contains(inner, outer) -> bool:
    """Whether every value of Format ``inner`` is a value of Format ``outer``
    (converting one to the other rounds nothing); False for ``inner`` None."""
    return (inner is not None and inner.p <= outer.p and inner.emin >= outer.emin and inner.emax <= outer.emax
            and inner.subnormals <= outer.subnormals)


def _to_working(k, err, M, comp):
    """A reduction's (or matmul's) result in the accumulator, then rounded to the
    working format when that is narrower (``accumulator_only``: elementwise
    work in S reads it), as numlab's engine does."""
    w = k.w
    if comp is None or contains(comp, w):
        return err, comp
    return _guard((err + k.u(w) * (M + err) + k.eta(w)) * INFL, M + err, w), w


def _round(k, fmt, M):
    return (k.u(fmt) * M + k.eta(fmt)) * INFL


def local_exact(k, xs, bs, M, attrs):
    """Exact functions of the inputs (selection, sign, data movement, comparisons,
    max/min): no error of their own."""
    return np.zeros(np.shape(M)), None


def local_add(k, xs, bs, M, attrs):
    """``a +- b`` rounded to the working format: ``u_w M`` plus one underflow
    term (a sum is exact when subnormal only if both operands lie on the
    working format's grid; an accumulator value read by a native kernel need
    not)."""
    return (k.u(k.w) * M + k.eta(k.w)) * INFL, k.w


def local_mul(k, xs, bs, M, attrs):
    """``a * b`` rounded to the working format: ``u_w M + eta_w`` (with or
    without FMA: a contracted product is exact, which this covers)."""
    return _round(k, k.w, M), k.w


def local_div(k, xs, bs, M, attrs):
    """``a / b`` by the class's ``divide`` (ieee, ulps, rel or Newton on the
    reciprocal then a product): ``rel_divide M + eta_w`` (a few denormals for
    the approximate forms)."""
    return (k.rel("divide") * M + 4 * k.eta(k.w)) * INFL, k.w


def local_reciprocal(k, xs, bs, M, attrs):
    """``1 / x`` by the class's ``divide``."""
    return local_div(k, xs, bs, M, attrs)


def local_sqrt(k, xs, bs, M, attrs):
    """sqrt by the class's ``sqrt`` (never underflows)."""
    return k.rel("sqrt") * M * INFL, k.w


def local_rsqrt(k, xs, bs, M, attrs):
    """rsqrt by the class's ``rsqrt``: ``rel_rsqrt M`` (plus a denormal)."""
    return (k.rel("rsqrt") * M + k.eta(k.w)) * INFL, k.w


def _ulp_rel(k):
    """One ulp of the working format is at most ``2**(1-p) |f|`` (normal range)."""
    return 2.0 ** (1 - k.w.p)


def local_libm(k, xs, bs, M, attrs):
    """exp, log, tanh, sigmoid, erf: within ``libm_ulps`` ulps of the working format."""
    K = k.kc.libm_ulps
    return (K * _ulp_rel(k) * M + max(K, 1) * k.w.smallest_subnormal) * INFL, k.w


def local_libm_x(k, xs, bs, M, attrs):
    """gelu, silu, softplus, hardswish (``x g(x)`` forms): within ``libm_ulps``
    ulps of ``|f(x)| + |x|``."""
    K = k.kc.libm_ulps
    X = _mag(xs, bs)
    return (K * _ulp_rel(k) * (M + X) + max(K, 1) * k.w.smallest_subnormal) * INFL, k.w


def _scalar_err(k, s):
    """(held scalar, |held - s|)."""
    h = k.scalar(s)
    return h, abs(h - s)


def local_add_scalar(k, xs, bs, M, attrs):
    """``x + s``, ``x - s``, ``s - x`` with the scalar held in the class's
    ``scalar_fmt``: its rounding ``|s_held - s|`` plus the sum's rounding."""
    _, e = _scalar_err(k, attrs["scalar"])
    return (e + k.u(k.w) * (M + e) + k.eta(k.w)) * INFL, k.w


def local_add_alpha(k, xs, bs, M, attrs):
    """``x + alpha*y`` (one kernel, with or without FMA): ``|y| |alpha_held - alpha|``
    plus the product's rounding (none with FMA, which this covers) and the sum's."""
    a = attrs["alpha"]
    h, e = _scalar_err(k, a)
    Y = _mag(xs, bs, 1)
    d = Y * e
    p = Y * abs(h)
    u = k.u(k.w)
    return (d + u * p + u * (M + d + u * p + k.eta(k.w)) + 2 * k.eta(k.w)) * INFL, k.w


def local_mul_scalar(k, xs, bs, M, attrs):
    """``x * s``: ``|x| |s_held - s|`` plus the product's rounding."""
    _, e = _scalar_err(k, attrs["scalar"])
    d = _mag(xs, bs) * e
    return (d + k.u(k.w) * (M + d) + k.eta(k.w)) * INFL, k.w


def local_div_scalar(k, xs, bs, M, attrs):
    """``x / s`` as a division or as ``x * (1/s)``: ``|x| |1/s_held - 1/s|``
    plus two roundings."""
    s = attrs["scalar"]
    h, _ = _scalar_err(k, s)
    d = _mag(xs, bs) * abs(1.0 / h - 1.0 / s) if h != 0 else np.inf
    g2 = (1 + k.rel("divide")) * (1 + k.u(k.w)) - 1  # a division, or fl(1/s) of the class then a product
    return (d + g2 * (M + d) + 2 * k.eta(k.w)) * INFL, k.w


def local_rdiv_scalar(k, xs, bs, M, attrs):
    """``s / x``: ``|s_held - s| / |x|min`` plus the division's error."""
    s = attrs["scalar"]
    h, e = _scalar_err(k, s)
    xmin = np.maximum(np.abs(_f(xs[0])) - _f(bs[0]), 0.0)
    with np.errstate(divide="ignore"):
        d = np.where(e == 0, 0.0, e / xmin)
    return (d + k.rel("divide") * (M + d) + 4 * k.eta(k.w)) * INFL, k.w


def local_constant(k, xs, bs, M, attrs):
    """A constant materialised in the working format, or held as a tensor of S
    in memory (as numlab's engine and a model's ``torch.tensor(v, dtype=S)``
    hold it, also inside a fused block): the rounding to the narrower of the
    two (its range too)."""
    fmt = k.S if k.S.p < k.w.p or k.S.emax < k.w.emax else k.w
    return _round(k, fmt, M), fmt


def local_cast(k, xs, bs, M, attrs):
    """cast: the rounding is the operator itself (its reference rounds); the
    implementation's value is the rounding of its input, covered by the
    propagation rule."""
    return np.zeros(np.shape(M)), None


def _axis_count(x, attrs):
    axis = attrs.get("axis")
    shape = np.shape(x)
    return math.prod(shape) if axis is None else math.prod(shape[a] for a in np.atleast_1d(axis))


def _rsum(a, attrs):
    return np.sum(a, axis=attrs.get("axis"), keepdims=attrs.get("keepdims", False))


def local_sum(k, xs, bs, M, attrs):
    """sum in any order in the accumulator: ``gamma_(n-1)(u_acc) sum (|x| + b)``."""
    n = _axis_count(xs[0], attrs)
    g = k.gamma(max(n - 1, 0), k.u(k.acc))
    tot = _rsum(_mag(xs, bs), attrs)
    # n underflow terms: inputs converted into an accumulator of smaller range may underflow
    return _to_working(k, _guard((g * tot + n * k.eta(k.acc)) * INFL, tot * (1 + g), k.acc), M, k.acc)


def _mean_error(k, xs, bs, attrs, M):
    n = _axis_count(xs[0], attrs)
    u = k.u(k.acc)
    tot = _rsum(_mag(xs, bs), attrs)
    g = k.gamma(max(n - 1, 0), u)
    es = g * tot / max(n, 1)
    g2 = gamma_u(2, u)  # s / n, or s * fl(1/n)
    return _guard((es * (1 + g2) + g2 * M + (2 + n) * k.eta(k.acc)) * INFL, tot * (1 + g), k.acc)


def local_mean(k, xs, bs, M, attrs):
    """mean: the sum in any order, then ``/ n`` or ``* fl(1/n)``:
    ``gamma_(n-1) sum(|x| + b) / n (1 + gamma_2) + gamma_2 M``; with Welford
    allowed inside a library composite the walker widens it to
    :func:`welford_mean_error`."""
    return _to_working(k, _mean_error(k, xs, bs, attrs, M), M, k.acc)


def _row_stats(xs, bs, attrs):
    x, b = _f(xs[0]), _f(bs[0])
    axis, keep = attrs.get("axis"), attrs.get("keepdims", False)
    A = np.max(np.abs(x) + b, axis=axis, keepdims=keep)
    W = np.max(x + b, axis=axis, keepdims=keep) - np.min(x - b, axis=axis, keepdims=keep)
    return A, W


def welford_mean_error(n: int, u: float, A, W, eta: float = 0.0):
    """Bound on ``|M_hat_k - mean_k|`` for every k of Welford's update
    ``M_k = M_(k-1) + (x_k - M_(k-1)) / k`` over n elements with
    ``|x| <= A`` and range ``W``, each step with three roundings (the
    difference, ``/ k`` or ``* fl(1/k)``) and the sum's: ``e_k (1 - u) <=
    e_(k-1) (1 + gamma_3) + gamma_3 W / k + u A``, so ``e <= q**n (gamma_3 W
    H_n + n u A) / (1 - u)`` with ``q = (1 + gamma_3) / (1 - u)``; with
    underflow each step adds at most four absolute terms ``eta`` (the
    difference, the quotient, the sum, and ``1/k``'s product), ``+ 4 n eta``."""
    g3 = gamma_u(3, u)
    q = (1 + g3) / (1 - u)
    H = math.fsum(1.0 / i for i in range(1, n + 1)) if n < 10**6 else math.log(n) + 1
    return q**n * (g3 * _f(W) * H + n * u * _f(A) + 4 * n * eta) / (1 - u) * INFL


def welford_var_error(k, xs, bs, attrs, Vmax):
    """Welford's variance over the box (:func:`local_var`'s derivation), with
    E of :func:`welford_mean_error` and ``5 n eta`` for the underflow of each
    update's difference, product and sum; then ``/ N``."""
    x = _f(xs[0])
    n = _axis_count(x, attrs)
    N = max(n - attrs.get("correction", 0), 1)
    u, eta = k.u(k.acc), k.eta(k.acc)
    A, W = _row_stats(xs, bs, attrs)
    E = welford_mean_error(n, u, A, W, eta)
    g3, gn = gamma_u(3, u), gamma_u(max(n - 1, 0), u)
    Smax = N * Vmax
    dS = (1 + gn) * (1 + g3) * n * (2 * W * E + E * E + 5 * eta) + (g3 + gn * (1 + g3)) * Smax
    return (dS / N * (1 + u) + u * Vmax + 2 * eta) * INFL


def two_pass_var_error(n: int, N: int, E, u_d: float, u_sq: float, u_acc: float, Vmax, eta=0.0, D=0.0,
                       eta_d: float = 0.0, eta_sq: float = 0.0):
    """Two-pass variance ``sum fl(d_i^2) / N`` with ``d_i = fl(x_i - m_hat)``,
    ``|m_hat - mean| <= E``: since ``sum (x_i - m_hat)^2 = sum (x_i - mean)^2 +
    n (mean - m_hat)^2`` the mean's error enters squared:
    ``|v_hat - v| <= (n/N) E^2 + ((1 + u_d)^2 (1 + u_sq) (1 + gamma_(n-1))
    (1 + gamma_2) - 1) (Vmax + (n/N) E^2)`` (sum in any order in the
    accumulator, then ``/ N`` or ``* fl(1/N)``).  Underflow: a difference
    ``|d| <= D`` may carry an absolute error ``eta_d`` beside its relative one
    and a square ``eta_sq``, so each term moves by at most ``2 D eta_d +
    eta_d^2 + eta_sq`` more, and the sum takes ``n`` underflow terms of the
    accumulator (``eta``)."""
    E2 = (n / N) * _f(E) ** 2
    g = (1 + gamma_u(max(n - 1, 0), u_acc)) * (1 + gamma_u(2, u_acc))
    f = (1 + u_d) ** 2 * (1 + u_sq) * g - 1
    under = (n / N) * (2 * (_f(D) + _f(E)) * (1 + u_d) * eta_d + eta_d**2 + eta_sq) * (1 + u_sq) * g
    return (E2 + f * (_f(Vmax) + E2) + under + (2 + n) * eta) * INFL


def local_var(k, xs, bs, M, attrs):
    """var by any allowed algorithm (``kc.variance``): two-pass
    (:func:`two_pass_var_error` with the mean's error of :func:`local_mean`
    and differences and squares in the working format) and Welford
    (``|S_hat - S| <= (1 + gamma_(n-1)) (1 + gamma_3) n (2 W E + E^2) +
    (gamma_3 + gamma_(n-1) (1 + gamma_3)) S``, with E of
    :func:`welford_mean_error`: each update's product ``(x_k - M_(k-1))
    (x_k - M_k)`` differs from the exact one by at most ``2 W E + E^2`` and
    three roundings; then the n-term recursive sum and ``/ N``); the largest."""
    x = _f(xs[0])
    n = _axis_count(x, attrs)
    N = max(n - attrs.get("correction", 0), 1)
    Vmax = M
    out = np.zeros(np.shape(M))
    if "two_pass" in k.kc.variance:
        mean_attrs = {"axis": attrs.get("axis"), "keepdims": attrs.get("keepdims", False)}
        mag = np.mean(_mag(xs, bs), axis=mean_attrs["axis"], keepdims=mean_attrs["keepdims"])
        E = _mean_error(k, xs, bs, mean_attrs, mag)
        uw = k.u(k.w)
        out = np.maximum(out, two_pass_var_error(n, N, E, uw, uw, k.u(k.acc), Vmax, k.eta(k.acc)))
    if "welford" in k.kc.variance:
        out = np.maximum(out, welford_var_error(k, xs, bs, attrs, Vmax))
    A, W = _row_stats(xs, bs, attrs)
    # partial sums: of the elements (the mean) and of the squared deviations (<= n W^2)
    return _to_working(k, _guard(_guard(out, n * _f(A) * 1.01, k.acc), n * _f(W) ** 2 * 1.01, k.acc), M, k.acc)


def local_matmul(k, xs, bs, M, attrs):
    """matmul with inner size K: on the class's matrix unit
    (:func:`numlab.bound_rules.mma_bound` at the operands' magnitudes, after
    rounding them to its input format), else operands rounded to
    ``matmul_inputs`` (TF32) when set and ``gamma_K(u_acc) |A| |B|`` (products
    rounded or exact, any order, any K tiling or split)."""
    A, B = _mag(xs, bs, 0), _mag(xs, bs, 1)
    K = np.shape(xs[0])[-1]
    AB = A @ B
    unit = k.kc.mma
    if unit is not None:
        fin = get_format(unit.in_fmt)
        pre, (Ai, Bi) = _operand_rounding(k, fin, A, B, AB)
        err = R.mma_bound(Ai, Bi, unit) + pre
        return _guard(err * INFL, np.maximum(Ai.max(initial=0.0), Bi.max(initial=0.0)), fin), get_format(unit.out_fmt)
    ti = k.kc.matmul_inputs
    pre, (Ai, Bi) = _operand_rounding(k, ti, A, B, AB)
    g = k.gamma(K, k.u(k.acc))
    ABi = Ai @ Bi
    err = pre + g * ABi + K * k.eta(k.acc)
    err = _guard(err * INFL, ABi * (1 + g), k.acc)
    if ti is not None:
        err = _guard(err, np.maximum(A.max(initial=0.0), B.max(initial=0.0)), ti)
    return _to_working(k, err, M, k.acc)


def _operand_rounding(k, fmt, A, B, AB):
    """Operands rounded (nearest) to ``fmt`` before their products (a matrix
    unit's input format, TF32): ``|a~ - a| <= u |a| + eta``, so the products
    move by at most ``((1 + u)^2 - 1) |A| |B| + eta (1 + u) (rowsum |A| +
    colsum |B|) + K eta^2``; returns that and the rounded magnitudes' bounds.
    Nothing when every value of S is a value of ``fmt``."""
    if fmt is None or contains(k.S, fmt):
        return np.zeros(np.shape(AB)), (A, B)
    u, eta = fmt.u, (fmt.smallest_subnormal * 0.5 if fmt.subnormals else fmt.smallest_normal)
    K = np.shape(A)[-1]
    rows, cols = A.sum(axis=-1, keepdims=True), B.sum(axis=-2, keepdims=True)
    pre = ((1 + u) ** 2 - 1) * AB + eta * (1 + u) * (rows + cols) + K * eta * eta
    return pre * INFL, (A * (1 + u) + eta, B * (1 + u) + eta)


def local_quantize(k, xs, bs, M, attrs, *, block_scale):
    """quantize (``round(x / s)`` to the element format): an implementation
    that divides in the working format may round a quotient within
    ``2 u_w`` of a tie the other way; the propagation rule at the box widened
    by that relative amount bounds it (this local term then also holds the
    propagated part).  ``block_scale``: as for
    :func:`numlab.bound_rules.propagate_quantize`."""
    x, b = _f(xs[0]), _f(bs[0])
    wid = b + 3 * k.u(k.w) * (np.abs(x) + b)
    p, _ = R.propagate_quantize([x], [wid], attrs, k.ref, block_scale=block_scale)
    return _f(p), None


def local_block_scale(k, xs, bs, M, attrs):
    """block_scale (amax over the block, a division by the element format's
    largest value): one rounding in the working format."""
    return _round(k, k.w, M) * 2, k.w


def local_dequantize(k, xs, bs, M, attrs):
    """dequantize ``q * s``: one product in the working format."""
    return _round(k, k.w, M), k.w


def local_scaled_matmul(k, xs, bs, M, attrs):
    """scaled_matmul: dequantised operands (products of elements and scales,
    one rounding each) then a K-term dot in the accumulator, or (DeepSeek-V3's
    kernel, numlab's engine) per K block of length kb the dot of the raw
    elements, rounded to the working format, times both scales, the block
    results added: at most ``kb + K/kb + 1 <= K + 2`` roundings on any path,
    each in the accumulator or the working format, so ``gamma_(K+2)(u) |A| |B|``
    with u of the coarser of the two; overflow wherever a partial sum of
    ``|A| |B|`` or of a block's raw element products may leave either format."""
    qa, sa, qb, sb = xs
    A, bA = R._dequantised(qa, sa, bs[0], bs[1])
    B, bB = R._dequantised(qb, sb, bs[2], bs[3])
    Am, Bm = np.abs(A) + bA, np.abs(B) + bB
    K = np.shape(qa)[-1]
    AB = Am @ Bm
    coarse = k.w if k.u(k.w) > k.u(k.acc) or k.w.emax < k.acc.emax else k.acc
    g = k.gamma(K + 2, max(k.u(k.acc), k.u(k.w)))
    err = _guard((g * AB + K * max(k.eta(k.acc), k.eta(k.w))) * INFL, AB * (1 + g), coarse)
    kb = K // max(np.shape(sa)[-1], 1)
    qam, qbm = np.abs(_f(qa)) + _f(bs[0]), np.abs(_f(qb)) + _f(bs[2])
    raw = np.max([qam[:, j:j + kb] @ qbm[j:j + kb, :] for j in range(0, K, kb)], axis=0) if K else AB
    for fmt in (k.acc, coarse):
        err = _guard(err, raw * (1 + g), fmt)
    return err, coarse


def softmax_error(k, xs, bs, M, attrs):
    """One softmax kernel in the working format (max exact; ``d = t - max``
    rounded, ``|d| <= D`` the row's range over the box; exp within
    ``libm_ulps``; the row sum in any order; the division by the class's
    ``divide``): every ``e_j`` carries a relative error ``theta <= e**(u D)
    (1 + kappa) - 1`` (kappa = libm_ulps ulps), so the quotient's relative
    error is at most ``rho = (1 + theta) (1 + rel_div) / ((1 - theta) (1 -
    gamma_(n-1))) - 1``, plus the underflow of n exponentials in a sum that
    is at least 1 - theta (its largest term is exp(0)): ``rho M + n eta``."""
    x, b = _f(xs[0]), _f(bs[0])
    axis = attrs["axis"]
    n = np.shape(x)[axis]
    D = np.max(x + b, axis=axis, keepdims=True) - np.min(x - b, axis=axis, keepdims=True)
    u = k.u(k.w)
    kappa = k.kc.libm_ulps * _ulp_rel(k)
    theta = np.expm1(u * (1 + u) * D) * (1 + kappa) + kappa
    g = k.gamma(max(n - 1, 0), k.u(k.acc))
    rel_div = (1 + k.rel("divide")) * (1 + u) - 1  # a division, or fl(1/sum) of the class then a product
    with np.errstate(all="ignore"):
        rho = (1 + theta) * (1 + rel_div) / ((1 - theta) * (1 - g)) - 1
        eta = n * (max(k.kc.libm_ulps, 1) * k.w.smallest_subnormal + k.eta(k.w)) / (1 - theta)
    rho = np.where(theta < 0.5, rho, np.inf)
    return (rho * M + eta + 4 * k.eta(k.w)) * INFL


def local_composite(k, xs, bs, M, attrs):
    """Marker of composites: the walker bounds them through their
    decomposition, every primitive under the library class, no rounding to S
    inside."""
    raise TypeError("local_composite marks a composite operator; the contract walker decomposes it")


def is_composite(rule) -> bool:
    return rule is local_composite
