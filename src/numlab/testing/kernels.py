"""Independently written kernels for the zoo graphs, in plain numpy.

Nothing here uses numlab's engine (``numlab.kernels``, ``numlab.execute``,
``numlab.ops``): only :mod:`numlab.formats` and :mod:`numlab.rounding`, for
the storage formats and for rounding.  The library has two halves:

* :data:`CORRECT`: kernels that honour an execution contract (see below), in
  many legal variations: summation orders (sequential, reversed, pairwise
  halving, 32-lane butterfly, tiles of 16, numpy's own, ``cumsum``), FMA or
  not, two-pass or Welford variance, ``x / sqrt(v)`` or ``x * (1 / sqrt(v))``,
  different associations of the scale and shift, softmax by division or by
  the reciprocal, gelu through ``tanh`` or through the sigmoid identity, and
  fp64 inside (more accurate than the contract asks).  A contract bound must
  hold for every one of them.
* :data:`BROKEN`: kernels that each break the contract in one realistic way
  (:data:`BUG_KINDS`): a narrow intermediate, a narrow accumulator, double
  rounding, a bit-trick or under-iterated rsqrt, a dropped reduction tail,
  truncation at the output, a scale held in the storage format, textbook
  variance, a bit-trick exp.  A contract bound should catch them (where the
  bug is large enough to show in the formats listed in ``Kernel.formats``).

The contracts
-------------
Inputs are values of the storage format S (``"fp16"``, ``"bf16"``,
``"fp32"``), given as float32/float64 or S-dtype arrays.  *Eager* (one library
kernel per operator): read S, compute in fp32, reductions in any order with an
fp32 accumulator, FMA or not, transcendentals within a few fp32 ulps, rsqrt
as ``1/sqrt`` in fp32, IEEE fp32 division, variance two-pass or Welford
(sequential updates in any permutation), scalars held in fp32, and every
operator's output rounded once to S (round to nearest even).  A composite
operator (``layer_norm``, ``rms_norm``, ``softmax``) is one kernel: fp32
inside, its output rounded once.  *Fused*: the same, but a whole chain
(``gelu_mlp``: matmul, ``+ b``, gelu, ``* 0.5``; ``attention_scores``:
matmul, ``* scale``, softmax) stays in fp32 and only its output is rounded to
S.  ``Kernel.mode`` is the contract a kernel honours (correct kernels) or
claims to honour (broken ones): ``"eager"``, ``"fused"``, or ``"both"`` for a
single-composite graph, where the two contracts coincide.

Every kernel is ``fn(inputs, fmt) -> {output_name: array}``; outputs are
arrays of S's container dtype (float16, ml_dtypes.bfloat16, float32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..formats import get_format
from ..rounding import round_to

__all__ = [
    "Kernel",
    "CORRECT",
    "BROKEN",
    "GRAPHS",
    "OUTPUTS",
    "FORMATS",
    "BUG_KINDS",
    "kernels_for",
    "SIZES",
    "STATED_FUSION",
    "stated_fusion",
]

F32 = np.float32
F64 = np.float64
FORMATS = ("fp16", "bf16", "fp32")
GRAPHS = ("layernorm", "rmsnorm", "softmax", "gelu_mlp", "attention_scores")
#: model sizes at which every bug of :data:`BROKEN` shows (a reduction length that is not
#: a multiple of 32, so a dropped tail drops something; head_dim 12, so 1/sqrt(head_dim)
#: is not a value of S)
SIZES = {
    "layernorm": {"batch": 8, "hidden": 200},
    "rmsnorm": {"batch": 8, "hidden": 200},
    "softmax": {"batch": 8, "n": 200},
    "gelu_mlp": {"batch": 8, "d_in": 72, "d_hidden": 64},
    "attention_scores": {"batch": 1, "heads": 2, "seq": 32, "head_dim": 12},
}
#: the plan whose contract a kernel honours (or pretends to), by its ``mode``: eager-style
#: kernels round every operator (fusion ``off``); a one-composite graph's kernel is one
#: library kernel in either mode (the default ``autofuse``); a fused kernel keeps the whole
#: graph in one fp32 block (the matmul fused in, for gelu_mlp and attention_scores)
STATED_FUSION = {
    "eager": "off",
    "both": "autofuse",
    "fused": {"gelu_mlp": "autofuse:--autofuse_enable_pass=matmul",
              "attention_scores": "autofuse:--autofuse_enable_pass=matmul,reduce+decompose"},
}


def stated_fusion(kernel) -> str:
    """The fusion spec of the plan ``kernel`` honours (:data:`STATED_FUSION`)."""
    f = STATED_FUSION[kernel.mode]
    return f[kernel.graph] if isinstance(f, dict) else f


OUTPUTS = {"layernorm": "y", "rmsnorm": "y", "softmax": "y", "gelu_mlp": "y",
           "attention_scores": "p"}
BUG_KINDS = {
    "fp16_intermediate": "a value rounded to fp16 (or S) inside what should be one fp32 block",
    "fp16_accumulator": "a reduction accumulated in float16",
    "double_rounding": "the output rounded through another narrow format before S",
    "bit_trick_rsqrt": "rsqrt by the 0x5f3759df bit trick with no Newton step",
    "missing_newton_step": "rsqrt from a rough seed with too few Newton steps",
    "dropped_tail": "a reduction that skips its last elements",
    "rtz_output": "the output truncated (round toward zero) to S instead of RNE",
    "scale_in_storage": "a scale or normalised value held in S instead of fp32",
    "textbook_variance": "variance as E[x^2] - E[x]^2 in fp32 (cancellation)",
    "approx_exp": "exp by Schraudolph's bit trick (a few percent off)",
}

LN_EPS = 1e-5
RMS_EPS = 1e-6
GELU_SCALE = 0.5
_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


@dataclass(frozen=True)
class Kernel:
    """One kernel of the library.

    ``fn(inputs, fmt)`` takes the graph's inputs (values of S) and the
    storage format name and returns ``{output_name: array of S's dtype}``.
    ``mode`` is the contract it honours (or, broken, claims to honour);
    ``bug`` a :data:`BUG_KINDS` key for broken kernels; ``formats`` the
    formats it applies to (for a broken kernel: those where its bug is large
    enough to show against correct kernels).
    """

    name: str
    graph: str
    fn: Callable
    mode: str
    correct: bool
    bug: str = ""
    doc: str = ""
    formats: tuple = FORMATS

    def __call__(self, inputs, fmt):
        return self.fn(inputs, fmt)


# ---------------------------------------------------------------------------
# storage and exact helpers
# ---------------------------------------------------------------------------
def _fmt(fmt):
    name = get_format(fmt).name
    if name not in FORMATS:
        raise ValueError(f"fmt={fmt!r}: the kernel library covers {FORMATS}")
    return name


def _f32(a) -> np.ndarray:
    """Values of S as float32 (exact: every value of fp16/bf16/fp32 is one)."""
    return np.asarray(a).astype(F32)


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(F64)


def _store(v, fmt, rounding="rne") -> np.ndarray:
    """``v`` (float32 or float64) rounded once to ``fmt``, in its container
    dtype (``round_to`` rounds float64 directly, never through float32)."""
    f = get_format(fmt)
    a = np.asarray(v)
    if a.dtype != F32 and a.dtype != F64:
        a = a.astype(F32)
    return np.asarray(round_to(a, f, rounding)).astype(f.dtype)


def _through(v, fmt) -> np.ndarray:
    """``v`` rounded to ``fmt`` (RNE) and widened back to float32."""
    return _f32(_store(v, fmt))


def _fma32(a, b, c) -> np.ndarray:
    """fp32 fused multiply-add ``round32(a*b + c)`` with one rounding.

    ``a*b`` is exact in float64 (24 + 24 bits); ``p + c`` is formed in float64
    with its exact error (TwoSum), made round-to-odd (Boldo & Melquiond: an
    odd last bit when inexact) and rounded once to fp32, which is then the
    correctly rounded ``a*b + c`` (53 >= 24 + 2)."""
    p = _f64(a) * _f64(b)
    cc = np.broadcast_to(_f64(c), p.shape)
    s = p + cc
    bv = s - p
    err = (p - (s - bv)) + (cc - bv)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    fix = (err != 0) & even & np.isfinite(s)
    s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return np.asarray(round_to(s, "fp32")).astype(F32)


# ---------------------------------------------------------------------------
# reductions over the last axis (float32 accumulator unless told otherwise)
# ---------------------------------------------------------------------------
def _pad(x, m):
    r = (-x.shape[-1]) % m
    if r == 0:
        return x
    pad = np.zeros(x.shape[:-1] + (r,), x.dtype)
    return np.concatenate([x, pad], axis=-1)


def sum_seq(x, dtype=F32):
    """Sequential left-to-right accumulation in ``dtype``."""
    x = np.asarray(x).astype(dtype)
    acc = np.zeros(x.shape[:-1], dtype)
    for i in range(x.shape[-1]):
        acc = (acc + x[..., i]).astype(dtype)
    return acc


def sum_rev(x, dtype=F32):
    """Sequential accumulation from the last element to the first."""
    x = np.asarray(x).astype(dtype)
    acc = np.zeros(x.shape[:-1], dtype)
    for i in range(x.shape[-1] - 1, -1, -1):
        acc = (acc + x[..., i]).astype(dtype)
    return acc


def sum_pairwise(x, dtype=F32):
    """Recursive halving: ``x[:h] + x[h:2h]`` per level (an odd element
    carried to the next level)."""
    x = np.asarray(x).astype(dtype)
    while x.shape[-1] > 1:
        n = x.shape[-1]
        h = n // 2
        y = (x[..., :h] + x[..., h:2 * h]).astype(dtype)
        x = np.concatenate([y, x[..., 2 * h:]], axis=-1) if n % 2 else y
    return x[..., 0]


def sum_lanes32(x, dtype=F32):
    """32 lanes (lane ``j`` takes elements ``j, j+32, ...``, sequentially),
    then a butterfly across the lanes (16, 8, 4, 2, 1), as a warp reduce."""
    x = _pad(np.asarray(x).astype(dtype), 32)
    x = x.reshape(x.shape[:-1] + (-1, 32))
    acc = np.zeros(x.shape[:-2] + (32,), dtype)
    for c in range(x.shape[-2]):
        acc = (acc + x[..., c, :]).astype(dtype)
    while acc.shape[-1] > 1:
        h = acc.shape[-1] // 2
        acc = (acc[..., :h] + acc[..., h:]).astype(dtype)
    return acc[..., 0]


def sum_blocked16(x, dtype=F32):
    """Tiles of 16 summed sequentially, then the tile sums sequentially."""
    x = _pad(np.asarray(x).astype(dtype), 16)
    x = x.reshape(x.shape[:-1] + (-1, 16))
    return sum_seq(sum_seq(x, dtype), dtype)


def sum_numpy(x, dtype=F32):
    """numpy's own float32 reduction (pairwise blocks of 8 lanes)."""
    return np.add.reduce(np.asarray(x).astype(dtype), axis=-1, dtype=dtype)


def sum_cumsum(x, dtype=F32):
    """Sequential accumulation by ``np.cumsum`` in float32 (loop-free)."""
    return np.cumsum(np.asarray(x).astype(dtype), axis=-1, dtype=dtype)[..., -1]


def sum_fma_squares(d):
    """``sum(d*d)`` sequentially with ``acc = fma(d_i, d_i, acc)``."""
    acc = np.zeros(d.shape[:-1], F32)
    for i in range(d.shape[-1]):
        acc = _fma32(d[..., i], d[..., i], acc)
    return acc


REDUCERS = {
    "seq": sum_seq, "reversed": sum_rev, "pairwise": sum_pairwise, "lanes32": sum_lanes32,
    "blocked16": sum_blocked16, "numpy": sum_numpy, "cumsum": sum_cumsum,
}


# ---------------------------------------------------------------------------
# matmul over the last axis of a and bt: (..., M, K) x (..., N, K) -> (..., M, N)
# ---------------------------------------------------------------------------
def _mm(a, bt, how):
    a, bt = _f32(a), _f32(bt)
    if how == "np":
        return np.matmul(a, np.swapaxes(bt, -1, -2)).astype(F32)  # BLAS sgemm: fp32 accumulation
    if how == "fp64":
        return np.matmul(_f64(a), np.swapaxes(_f64(bt), -1, -2))
    if how == "fma":
        acc = np.zeros(a.shape[:-1] + (bt.shape[-2],), F32)
        for k in range(a.shape[-1]):
            acc = _fma32(a[..., :, None, k], bt[..., None, :, k], acc)
        return acc
    prods = a[..., :, None, :] * bt[..., None, :, :]  # rounded to fp32 (exact for fp16/bf16)
    return REDUCERS[how](prods)


# ---------------------------------------------------------------------------
# layernorm
# ---------------------------------------------------------------------------
def _welford(x, perm=None):
    """Welford's sequential update over the last axis (vectorised over rows),
    elements visited in ``perm`` order; returns (mean, M2) in fp32."""
    n = x.shape[-1]
    order = range(n) if perm is None else perm
    mean = np.zeros(x.shape[:-1], F32)
    m2 = np.zeros(x.shape[:-1], F32)
    for k, i in enumerate(order):
        xi = x[..., i]
        delta = xi - mean
        mean = mean + delta / F32(k + 1)
        m2 = m2 + delta * (xi - mean)
    return mean, m2


def _ln_moments(x, red, var):
    n = F32(x.shape[-1])
    if var.startswith("welford"):
        perm = np.random.default_rng(1234).permutation(x.shape[-1]) if var == "welford_perm" else None
        mean, m2 = _welford(x, perm)
        return mean, x - mean[..., None], m2 / n
    mean = red(x) / n
    d = x - mean[..., None]
    if var == "twopass_fma":
        return mean, d, sum_fma_squares(d) / n
    return mean, d, red(d * d) / n


def _affine(d, inv_or_sqrt, g, b, norm, assoc):
    """``d`` normalised by the per-row ``1/sqrt(v)`` (norm "rsqrt") or
    ``sqrt(v)`` (norm "div"), times ``g`` plus ``b`` (``b`` may be None)."""
    s = inv_or_sqrt[..., None]
    if assoc == "right":  # d * (r * g)
        if norm != "rsqrt":
            raise ValueError("assoc='right' needs norm='rsqrt'")
        t = d * (s * g)
        return t if b is None else t + b
    t = d * s if norm == "rsqrt" else d / s
    if assoc == "fma" and b is not None:
        return _fma32(t, g, b)
    t = t * g
    return t if b is None else t + b


def _layernorm32(red="seq", var="twopass", norm="rsqrt", assoc="left"):
    red_fn = REDUCERS[red]

    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x, g, b = _f32(inputs["x"]), _f32(inputs["gamma"]), _f32(inputs["beta"])
        _, d, v = _ln_moments(x, red_fn, var)
        ve = v + F32(LN_EPS)
        s = F32(1) / np.sqrt(ve) if norm == "rsqrt" else np.sqrt(ve)
        return {"y": _store(_affine(d, s, g, b, norm, assoc), fmt)}

    return fn


def _layernorm64(inputs, fmt):
    fmt = _fmt(fmt)
    x, g, b = _f64(inputs["x"]), _f64(inputs["gamma"]), _f64(inputs["beta"])
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    v = (d * d).mean(axis=-1, keepdims=True)
    return {"y": _store(d / np.sqrt(v + LN_EPS) * g + b, fmt)}


# ---------------------------------------------------------------------------
# rmsnorm
# ---------------------------------------------------------------------------
def _rmsnorm32(red="seq", norm="rsqrt", assoc="left", fma=False):
    red_fn = REDUCERS[red]

    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x, w = _f32(inputs["x"]), _f32(inputs["weight"])
        ss = sum_fma_squares(x) if fma else red_fn(x * x)
        ve = ss / F32(x.shape[-1]) + F32(RMS_EPS)
        s = F32(1) / np.sqrt(ve) if norm == "rsqrt" else np.sqrt(ve)
        return {"y": _store(_affine(x, s, w, None, norm, assoc), fmt)}

    return fn


def _rmsnorm64(inputs, fmt):
    fmt = _fmt(fmt)
    x, w = _f64(inputs["x"]), _f64(inputs["weight"])
    ms = (x * x).mean(axis=-1, keepdims=True)
    return {"y": _store(x / np.sqrt(ms + RMS_EPS) * w, fmt)}


# ---------------------------------------------------------------------------
# softmax (fp32 inside, over the last axis)
# ---------------------------------------------------------------------------
def _softmax32(x, red="seq", div="div", submax=True):
    x = _f32(x)
    t = x - np.max(x, axis=-1, keepdims=True) if submax else x
    e = np.exp(t).astype(F32)
    s = REDUCERS[red](e)[..., None]
    return e / s if div == "div" else e * (F32(1) / s)


def _softmax64(x):
    x = _f64(x)
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_kernel(red="seq", div="div", submax=True):
    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        return {"y": _store(_softmax32(inputs["x"], red, div, submax), fmt)}

    return fn


def _softmax_kernel64(inputs, fmt):
    return {"y": _store(_softmax64(inputs["x"]), _fmt(fmt))}


# ---------------------------------------------------------------------------
# gelu_mlp: y = gelu_tanh(x @ w + b) * 0.5
# ---------------------------------------------------------------------------
def _gelu32(z, form="tanh"):
    z = _f32(z)
    u = F32(_GELU_C) * (z + F32(_GELU_A) * z * z * z)
    if form == "tanh":
        return F32(0.5) * z * (F32(1) + np.tanh(u))
    with np.errstate(over="ignore"):  # exp(-2u) -> inf for very negative z: z / inf = -0
        return z / (F32(1) + np.exp(F32(-2) * u))


def _gelu64(z):
    z = _f64(z)
    return 0.5 * z * (1.0 + np.tanh(_GELU_C * (z + _GELU_A * z ** 3)))


def _gelu_mlp_eager(mm="np", form="tanh"):
    """Eager: four operator kernels, each output rounded to S."""

    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x, w, b = _f32(inputs["x"]), _f32(inputs["w"]), _f32(inputs["b"])
        if mm == "fp64":
            h = _store(_mm(x, w.T, "fp64"), fmt)
            h2 = _store(_f64(h) + _f64(b), fmt)
            g = _store(_gelu64(h2), fmt)
            return {"y": _store(_f64(g) * GELU_SCALE, fmt)}
        h = _store(_mm(x, w.T, mm), fmt)
        h2 = _store(_f32(h) + b, fmt)
        g = _store(_gelu32(h2, form), fmt)
        return {"y": _store(_f32(g) * F32(GELU_SCALE), fmt)}

    return fn


def _gelu_mlp_fused(mm="np", form="tanh"):
    """Fused: matmul, bias, gelu and the scale in fp32, one rounding."""

    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x, w, b = _f32(inputs["x"]), _f32(inputs["w"]), _f32(inputs["b"])
        if mm == "fp64":
            return {"y": _store(_gelu64(_mm(x, w.T, "fp64") + _f64(b)) * GELU_SCALE, fmt)}
        z = _mm(x, w.T, mm) + b
        return {"y": _store(_gelu32(z, form) * F32(GELU_SCALE), fmt)}

    return fn


# ---------------------------------------------------------------------------
# attention_scores: p = softmax((q @ k^T) * (1/sqrt(head_dim)))
# ---------------------------------------------------------------------------
def _scale(head_dim):
    return 1.0 / math.sqrt(head_dim)


def _attention_eager(mm="np", red="seq", div="div"):
    """Eager: matmul -> S, * scale -> S, softmax -> S."""

    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        q, k = _f32(inputs["q"]), _f32(inputs["k"])
        sc = _scale(q.shape[-1])
        if mm == "fp64":
            s1 = _store(_mm(q, k, "fp64"), fmt)
            s2 = _store(_f64(s1) * sc, fmt)
            return {"p": _store(_softmax64(s2), fmt)}
        s1 = _store(_mm(q, k, mm), fmt)
        s2 = _store(_f32(s1) * F32(sc), fmt)
        return {"p": _store(_softmax32(s2, red, div), fmt)}

    return fn


def _attention_fused(mm="np", red="seq", div="div"):
    """Fused: scores, scale and softmax in fp32, one rounding."""

    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        q, k = _f32(inputs["q"]), _f32(inputs["k"])
        sc = _scale(q.shape[-1])
        if mm == "fp64":
            return {"p": _store(_softmax64(_mm(q, k, "fp64") * sc), fmt)}
        return {"p": _store(_softmax32(_mm(q, k, mm) * F32(sc), red, div), fmt)}

    return fn


# ---------------------------------------------------------------------------
# the correct kernels
# ---------------------------------------------------------------------------
def _k(graph, variant, fn, mode, doc, *, correct=True, bug="", formats=FORMATS):
    return Kernel(f"{graph}.{variant}", graph, fn, mode, correct, bug, doc, tuple(formats))


def _correct_kernels():
    ks = [
        _k("layernorm", "fp64_inside", _layernorm64, "both",
           "everything in fp64, one rounding to S"),
        _k("layernorm", "fp32_seq_twopass_rsqrt", _layernorm32("seq", "twopass", "rsqrt"), "both",
           "sequential sums, two-pass variance, (x-m)*(1/sqrt(v+eps))*g+b"),
        _k("layernorm", "fp32_pairwise_twopass_div", _layernorm32("pairwise", "twopass", "div"),
           "both", "pairwise-halving sums, two-pass variance, (x-m)/sqrt(v+eps)*g+b"),
        _k("layernorm", "fp32_lanes32_twopass_rsqrt", _layernorm32("lanes32", "twopass", "rsqrt"),
           "both", "32-lane butterfly sums, two-pass variance, rsqrt multiply"),
        _k("layernorm", "fp32_reversed_twopass_div", _layernorm32("reversed", "twopass", "div"),
           "both", "reversed sequential sums, two-pass variance, divide by sqrt"),
        _k("layernorm", "fp32_blocked16_twopass_gamma_first",
           _layernorm32("blocked16", "twopass", "rsqrt", "right"), "both",
           "tiles of 16 then sequential, two-pass, (x-m)*(r*g)+b"),
        _k("layernorm", "fp32_numpy_twopass_fma", _layernorm32("numpy", "twopass_fma", "rsqrt", "fma"),
           "both", "numpy mean, variance by fma accumulation, fma((x-m)*r, g, b)"),
        _k("layernorm", "fp32_welford", _layernorm32("seq", "welford", "rsqrt"), "both",
           "Welford's sequential update, rsqrt multiply"),
        _k("layernorm", "fp32_welford_permuted_div", _layernorm32("seq", "welford_perm", "div"),
           "both", "Welford over a fixed permutation of the row, divide by sqrt"),
        _k("layernorm", "fp32_cumsum_twopass_gamma_first",
           _layernorm32("cumsum", "twopass", "rsqrt", "right"), "both",
           "np.cumsum (sequential) sums, two-pass, (x-m)*(r*g)+b"),
        # rmsnorm
        _k("rmsnorm", "fp64_inside", _rmsnorm64, "both", "everything in fp64, one rounding to S"),
        _k("rmsnorm", "fp32_seq_rsqrt", _rmsnorm32("seq", "rsqrt"), "both",
           "sequential sum of squares, x*(1/sqrt(ms+eps))*w"),
        _k("rmsnorm", "fp32_pairwise_div", _rmsnorm32("pairwise", "div"), "both",
           "pairwise sum of squares, x/sqrt(ms+eps)*w"),
        _k("rmsnorm", "fp32_lanes32_weight_first", _rmsnorm32("lanes32", "rsqrt", "right"), "both",
           "32-lane butterfly sum, x*(r*w)"),
        _k("rmsnorm", "fp32_reversed_div", _rmsnorm32("reversed", "div"), "both",
           "reversed sequential sum, divide by sqrt"),
        _k("rmsnorm", "fp32_blocked16_rsqrt", _rmsnorm32("blocked16", "rsqrt"), "both",
           "tiles of 16 then sequential, rsqrt multiply"),
        _k("rmsnorm", "fp32_numpy_weight_first", _rmsnorm32("numpy", "rsqrt", "right"), "both",
           "numpy's float32 sum, x*(r*w)"),
        _k("rmsnorm", "fp32_fma_div", _rmsnorm32("seq", "div", fma=True), "both",
           "sum of squares by fma accumulation, divide by sqrt"),
        _k("rmsnorm", "fp32_cumsum_rsqrt", _rmsnorm32("cumsum", "rsqrt"), "both",
           "np.cumsum sum of squares, rsqrt multiply"),
        # softmax
        _k("softmax", "fp64_inside", _softmax_kernel64, "both", "fp64 inside, one rounding to S"),
        _k("softmax", "fp32_seq_div", _softmax_kernel("seq", "div"), "both",
           "max-subtracted exp, sequential sum, divide"),
        _k("softmax", "fp32_pairwise_div", _softmax_kernel("pairwise", "div"), "both",
           "max-subtracted exp, pairwise sum, divide"),
        _k("softmax", "fp32_lanes32_recip", _softmax_kernel("lanes32", "recip"), "both",
           "max-subtracted exp, 32-lane butterfly sum, multiply by 1/sum"),
        _k("softmax", "fp32_reversed_div", _softmax_kernel("reversed", "div"), "both",
           "max-subtracted exp, reversed sum, divide"),
        _k("softmax", "fp32_blocked16_recip", _softmax_kernel("blocked16", "recip"), "both",
           "max-subtracted exp, tiles of 16, multiply by 1/sum"),
        _k("softmax", "fp32_numpy_div", _softmax_kernel("numpy", "div"), "both",
           "max-subtracted exp, numpy's float32 sum, divide"),
        _k("softmax", "fp32_nomax_div", _softmax_kernel("seq", "div", submax=False), "both",
           "exp(x) without max subtraction (valid while max x < 88), divide"),
        _k("softmax", "fp32_cumsum_recip", _softmax_kernel("cumsum", "recip"), "both",
           "max-subtracted exp, np.cumsum sum, multiply by 1/sum"),
    ]
    mlp = [("fp64_ops", "fp64", "tanh"), ("np_tanh", "np", "tanh"), ("seq_tanh", "seq", "tanh"),
           ("pairwise_sigmoid", "pairwise", "sigmoid"), ("lanes32_tanh", "lanes32", "tanh"),
           ("reversed_sigmoid", "reversed", "sigmoid"), ("blocked16_tanh", "blocked16", "tanh"),
           ("fma_sigmoid", "fma", "sigmoid")]
    for v, mm, form in mlp:
        what = "fp64 per operator" if mm == "fp64" else f"{mm} matmul, gelu by {form}"
        ks.append(_k("gelu_mlp", f"eager_{v}", _gelu_mlp_eager(mm, form), "eager",
                     f"eager: {what}; matmul, +b, gelu, *0.5 each rounded to S"))
        fused_v = "fp64_inside" if mm == "fp64" else v
        ks.append(_k("gelu_mlp", f"fused_{fused_v}", _gelu_mlp_fused(mm, form), "fused",
                     "fused: the whole chain in fp64, one rounding" if mm == "fp64"
                     else f"fused: {what}; one fp32 block, one rounding"))
    att = [("fp64_ops", "fp64", "seq", "div"), ("np_div", "np", "numpy", "div"),
           ("seq_div", "seq", "seq", "div"), ("pairwise_recip", "pairwise", "pairwise", "recip"),
           ("lanes32_div", "lanes32", "lanes32", "div"),
           ("reversed_recip", "reversed", "reversed", "recip"),
           ("blocked16_div", "blocked16", "blocked16", "div"), ("fma_recip", "fma", "seq", "recip")]
    for v, mm, red, div in att:
        what = ("fp64 per operator" if mm == "fp64"
                else f"{mm} dot products, {red} softmax sum, {'divide' if div == 'div' else '1/sum'}")
        ks.append(_k("attention_scores", f"eager_{v}", _attention_eager(mm, red, div), "eager",
                     f"eager: {what}; scores, *scale, softmax each rounded to S"))
        fused_v = "fp64_inside" if mm == "fp64" else v
        ks.append(_k("attention_scores", f"fused_{fused_v}", _attention_fused(mm, red, div), "fused",
                     "fused: the whole chain in fp64, one rounding" if mm == "fp64"
                     else f"fused: {what}; one fp32 block, one rounding"))
    return ks


# ---------------------------------------------------------------------------
# broken kernels
# ---------------------------------------------------------------------------
def _quake(v, newton=0):
    """0x5f3759df bit-trick rsqrt on fp32 bits, ``newton`` Newton steps."""
    v = _f32(v)
    y = (np.int32(0x5F3759DF) - (v.view(np.int32) >> 1)).astype(np.int32).view(F32)
    for _ in range(newton):
        y = y * (F32(1.5) - F32(0.5) * v * y * y)
    return y


def _rsqrte8(v):
    """An 8-bit rsqrt estimate (1/sqrt truncated to 8 significant bits, as a
    hardware seed instruction), with no refinement."""
    r = F32(1) / np.sqrt(_f32(v))
    return (r.view(np.uint32) & np.uint32(0xFFFF0000)).view(F32)


def _schraudolph_exp(t):
    """exp(t) for t <= 0 by writing ``t/ln2`` into the fp32 exponent field
    (Schraudolph 1999), clamped below; a few percent off."""
    t = np.maximum(_f32(t), F32(-87))
    i = (F32(2**23 / math.log(2)) * t + F32(127 * 2**23 - 486411)).astype(np.int32)
    return i.view(F32)


def _other_narrow(fmt):
    return "fp16" if fmt == "bf16" else "bf16"


def _ln_broken(bug):
    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x, g, b = _f32(inputs["x"]), _f32(inputs["gamma"]), _f32(inputs["beta"])
        n = F32(x.shape[-1])
        eps = F32(LN_EPS)
        rnd = "rne"
        if bug == "fp16_mean":
            mean = _through(sum_seq(x) / n, "fp16")
            d = x - mean[..., None]
            r = F32(1) / np.sqrt(sum_seq(d * d) / n + eps)
        elif bug == "fp16_accumulator":
            mean = _f32(sum_seq(x, np.float16)) / n
            d = x - mean[..., None]
            r = F32(1) / np.sqrt(_f32(sum_seq(d * d, np.float16)) / n + eps)
        elif bug == "textbook_variance":
            mean = sum_seq(x) / n
            v = np.maximum(sum_seq(x * x) / n - mean * mean, F32(0))
            d = x - mean[..., None]
            r = F32(1) / np.sqrt(v + eps)
        else:
            mean = sum_seq(x) / n
            d = x - mean[..., None]
            ve = sum_seq(d * d) / n + eps
            r = _quake(ve) if bug == "quake_rsqrt" else F32(1) / np.sqrt(ve)
        if bug == "gamma_in_storage":
            t = _through(d * r[..., None], fmt)
            return {"y": _store(_through(t * g, fmt) + b, fmt)}
        y = d * r[..., None] * g + b
        if bug == "double_rounding":
            y = _through(y, _other_narrow(fmt))
        if bug == "rtz_output":
            rnd = "rtz"
        return {"y": _store(y, fmt, rnd)}

    return fn


def _rms_broken(bug):
    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x, w = _f32(inputs["x"]), _f32(inputs["weight"])
        n = x.shape[-1]
        if bug == "fp16_accumulator":
            ss = _f32(sum_seq(x * x, np.float16))
        elif bug == "fp16_squares":
            ss = sum_seq(_through(x * x, "fp16"))
        elif bug == "dropped_tail32":
            ss = sum_lanes32(x[..., : n - n % 32] * x[..., : n - n % 32])
        else:
            ss = sum_seq(x * x)
        ve = ss / F32(n) + F32(RMS_EPS)
        r = {
            "quake_rsqrt": lambda: _quake(ve, 0),
            "quake_one_newton": lambda: _quake(ve, 1),
            "quake_two_newton": lambda: _quake(ve, 2),
            "rsqrte8_no_step": lambda: _rsqrte8(ve),
        }.get(bug, lambda: F32(1) / np.sqrt(ve))()
        return {"y": _store(x * r[..., None] * w, fmt)}

    return fn


def _softmax_broken(bug):
    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x = _f32(inputs["x"])
        t = x - np.max(x, axis=-1, keepdims=True)
        e = _schraudolph_exp(t) if bug == "approx_exp" else np.exp(t).astype(F32)
        if bug == "fp16_exp":
            e = _through(e, "fp16")
        if bug == "fp16_accumulator":
            s = _f32(sum_seq(e, np.float16))
        elif bug == "dropped_last":
            s = sum_seq(e[..., :-1])
        else:
            s = sum_seq(e)
        y = e / s[..., None]
        if bug == "double_rounding":
            y = _through(y, _other_narrow(fmt))
        return {"y": _store(y, fmt, "rtz" if bug == "rtz_output" else "rne")}

    return fn


def _mlp_broken(bug):
    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        x, w, b = _f32(inputs["x"]), _f32(inputs["w"]), _f32(inputs["b"])
        if bug == "eager_fp16_accumulator":
            prods = x[:, None, :] * w.T[None, :, :]
            h = _store(_f32(sum_seq(prods, np.float16)), fmt)
        elif bug == "eager_dropped_tail32":
            kk = x.shape[-1] - x.shape[-1] % 32
            h = _store(_mm(x[:, :kk], w[:kk].T, "lanes32"), fmt)
        else:
            z = _mm(x, w.T, "seq")
            if bug == "fused_fp16_matmul":
                z = _through(z, "fp16" if fmt == "fp32" else fmt)
            y = _gelu32(z + b) * F32(GELU_SCALE)
            if bug == "fused_double_rounding":
                y = _through(y, _other_narrow(fmt))
            return {"y": _store(y, fmt, "rtz" if bug == "fused_rtz_output" else "rne")}
        h2 = _store(_f32(h) + b, fmt)
        g = _store(_gelu32(h2), fmt)
        return {"y": _store(_f32(g) * F32(GELU_SCALE), fmt)}

    return fn


def _att_broken(bug):
    def fn(inputs, fmt):
        fmt = _fmt(fmt)
        q, k = _f32(inputs["q"]), _f32(inputs["k"])
        sc = _scale(q.shape[-1])
        if bug.startswith("eager"):
            if bug == "eager_dropped_last":
                s1 = _store(_mm(q[..., :-1], k[..., :-1], "seq"), fmt)
            else:
                s1 = _store(_mm(q, k, "seq"), fmt)
            scale = _through(sc, fmt) if bug == "eager_scale_in_storage" else F32(sc)
            s2 = _store(_f32(s1) * scale, fmt)
            p = _softmax32(s2, "seq", "div")
            return {"p": _store(p, fmt, "rtz" if bug == "eager_rtz_output" else "rne")}
        s = _mm(q, k, "seq")
        if bug == "fused_fp16_scores":
            s = _through(s, "fp16" if fmt == "fp32" else fmt)
        scale = _through(sc, fmt) if bug == "fused_scale_in_storage" else F32(sc)
        s = s * scale
        if bug == "fused_fp16_accumulator":
            t = s - np.max(s, axis=-1, keepdims=True)
            e = np.exp(t).astype(F32)
            return {"p": _store(e / _f32(sum_seq(e, np.float16))[..., None], fmt)}
        return {"p": _store(_softmax32(s, "seq", "div"), fmt)}

    return fn


_NARROW = ("fp16", "bf16")


def _broken_kernels():
    B = []

    def add(graph, variant, fn, mode, bug, doc, formats=FORMATS):
        B.append(_k(graph, variant, fn, mode, doc, correct=False, bug=bug, formats=formats))

    add("layernorm", "fp16_mean", _ln_broken("fp16_mean"), "both", "fp16_intermediate",
        "the row mean stored in fp16 before x - mean (catastrophic on shifted means)")
    add("layernorm", "fp16_accumulator", _ln_broken("fp16_accumulator"), "both", "fp16_accumulator",
        "mean and variance sums accumulated in float16")
    add("layernorm", "textbook_variance", _ln_broken("textbook_variance"), "both",
        "textbook_variance", "var = E[x^2] - E[x]^2 in fp32, clamped at 0 (bf16's output "
        "rounding mostly hides it)", ("fp16", "fp32"))
    add("layernorm", "quake_rsqrt", _ln_broken("quake_rsqrt"), "both", "bit_trick_rsqrt",
        "rsqrt by 0x5f3759df with no Newton step (~3% off)")
    add("layernorm", "double_rounding", _ln_broken("double_rounding"), "both", "double_rounding",
        "output rounded to bf16 (fp16 when S is bf16) and then to S")
    add("layernorm", "rtz_output", _ln_broken("rtz_output"), "both", "rtz_output",
        "fp32 result truncated to S (round toward zero)", _NARROW)
    add("layernorm", "gamma_in_storage", _ln_broken("gamma_in_storage"), "both", "scale_in_storage",
        "(x-m)*r rounded to S, times gamma rounded to S, plus beta", _NARROW)
    add("rmsnorm", "fp16_accumulator", _rms_broken("fp16_accumulator"), "both", "fp16_accumulator",
        "sum of squares accumulated in float16 (overflows on shifted means)")
    add("rmsnorm", "fp16_squares", _rms_broken("fp16_squares"), "both", "fp16_intermediate",
        "squares x*x stored in fp16 before an fp32 sum", ("fp32",))
    add("rmsnorm", "dropped_tail32", _rms_broken("dropped_tail32"), "both", "dropped_tail",
        "sum of squares over the first n - n%32 elements only (n%32 != 0 matters)")
    add("rmsnorm", "quake_rsqrt", _rms_broken("quake_rsqrt"), "both", "bit_trick_rsqrt",
        "rsqrt by 0x5f3759df with no Newton step")
    add("rmsnorm", "quake_one_newton", _rms_broken("quake_one_newton"), "both",
        "missing_newton_step", "0x5f3759df seed and one Newton step (~1.7e-3 off)")
    add("rmsnorm", "quake_two_newton", _rms_broken("quake_two_newton"), "both",
        "missing_newton_step", "0x5f3759df seed and two Newton steps (~5e-6 off: fp32 only)",
        ("fp32",))
    add("rmsnorm", "rsqrte8_no_step", _rms_broken("rsqrte8_no_step"), "both",
        "missing_newton_step", "8-bit rsqrt estimate used without a Newton step")
    add("softmax", "fp16_accumulator", _softmax_broken("fp16_accumulator"), "both",
        "fp16_accumulator", "sum of exps accumulated in float16")
    add("softmax", "fp16_exp", _softmax_broken("fp16_exp"), "both", "fp16_intermediate",
        "exp(x - m) stored in fp16 before the sum and the divide")
    add("softmax", "dropped_last", _softmax_broken("dropped_last"), "both", "dropped_tail",
        "the denominator's sum skips the last element (off by one)")
    add("softmax", "double_rounding", _softmax_broken("double_rounding"), "both", "double_rounding",
        "output rounded to bf16 (fp16 when S is bf16) and then to S")
    add("softmax", "rtz_output", _softmax_broken("rtz_output"), "both", "rtz_output",
        "fp32 result truncated to S", _NARROW)
    add("softmax", "approx_exp", _softmax_broken("approx_exp"), "both", "approx_exp",
        "exp by Schraudolph's exponent-field trick")
    add("gelu_mlp", "fused_fp16_matmul", _mlp_broken("fused_fp16_matmul"), "fused",
        "fp16_intermediate", "fused block that stores the matmul result in S (fp16 for fp32)")
    add("gelu_mlp", "eager_fp16_accumulator", _mlp_broken("eager_fp16_accumulator"), "eager",
        "fp16_accumulator", "matmul accumulated in float16")
    add("gelu_mlp", "eager_dropped_tail32", _mlp_broken("eager_dropped_tail32"), "eager",
        "dropped_tail", "matmul over the first d_in - d_in%32 terms only")
    add("gelu_mlp", "fused_double_rounding", _mlp_broken("fused_double_rounding"), "fused",
        "double_rounding", "output rounded to bf16 (fp16 when S is bf16) and then to S")
    add("gelu_mlp", "fused_rtz_output", _mlp_broken("fused_rtz_output"), "fused", "rtz_output",
        "fused result truncated to S", _NARROW)
    add("attention_scores", "eager_dropped_last", _att_broken("eager_dropped_last"), "eager",
        "dropped_tail", "dot products skip the last head_dim element")
    add("attention_scores", "eager_scale_in_storage", _att_broken("eager_scale_in_storage"), "eager",
        "scale_in_storage", "1/sqrt(head_dim) rounded to S before the multiply (shows "
        "where 1/sqrt(head_dim) is far from fp16's grid, head_dim 12; bf16: hidden by eager)",
        ("fp16",))
    add("attention_scores", "eager_rtz_output", _att_broken("eager_rtz_output"), "eager",
        "rtz_output", "softmax output truncated to S", _NARROW)
    add("attention_scores", "fused_fp16_scores", _att_broken("fused_fp16_scores"), "fused",
        "fp16_intermediate", "fused block that stores the scores in S (fp16 for fp32)")
    add("attention_scores", "fused_scale_in_storage", _att_broken("fused_scale_in_storage"), "fused",
        "scale_in_storage", "1/sqrt(head_dim) rounded to S inside the fused block "
        "(head_dim not a power of 4)", _NARROW)
    add("attention_scores", "fused_fp16_accumulator", _att_broken("fused_fp16_accumulator"),
        "fused", "fp16_accumulator", "softmax denominator accumulated in float16")
    return B


CORRECT: dict[str, Kernel] = {k.name: k for k in _correct_kernels()}
BROKEN: dict[str, Kernel] = {k.name: k for k in _broken_kernels()}


def kernels_for(graph: str, *, correct: bool | None = None) -> list[Kernel]:
    """The kernels of ``graph`` (a :data:`GRAPHS` name): correct ones, broken
    ones, or (``correct=None``) both, correct first, in definition order."""
    if graph not in GRAPHS:
        raise ValueError(f"graph={graph!r}: the kernel library covers {GRAPHS}")
    pools = [CORRECT, BROKEN] if correct is None else [CORRECT if correct else BROKEN]
    return [k for pool in pools for k in pool.values() if k.graph == graph]
