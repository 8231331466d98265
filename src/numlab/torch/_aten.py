"""How ATen and Inductor compute the operators the torch predictor models,
as numpy over numlab's kernels: rounding to a torch dtype, the scalar tail of
Inductor's vectorised loops, ATen's sum / softmax / layer-norm kernels and
their Welford rows (the interpreter in :mod:`numlab.torch.predictor` calls
these per node).  Every rule here cites the ATen or Inductor source it
follows; ``NotModelled`` is raised where a path is not reproduced bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..formats import FP32, get_format
from ..kernels.algorithms import erf as k_erf
from ..kernels.algorithms import exp as k_exp
from ..kernels.algorithms import log1p as k_log1p
from ..kernels.algorithms import tanh as k_tanh
from ..kernels.libm import fma32
from ..kernels.orders import Lanes
from ..kernels.orders.cpu import InductorLanes, ceil_log2
from ..kernels.reduction import reduce
from ..rounding import round_to
from .bridge import import_torch
from .presets import _LOW


class NotModelled(NotImplementedError):
    """A case numlab does not model bit for bit (the message says which and why)."""




# -- helpers ---------------------------------------------------------------------
def _rnd(x, dt: str):
    """Round float32/float64 values to torch dtype ``dt`` (returned as float32)."""
    if dt == "bool":
        return np.asarray(x, dtype=bool)
    if dt == "fp32":
        return np.asarray(x, dtype=np.float32)
    if dt in _LOW:
        return np.asarray(round_to(np.asarray(x, dtype=np.float32)
                                   if np.asarray(x).dtype != np.float64 else np.asarray(x), get_format(dt)),
                          dtype=np.float32)
    raise NotModelled(f"dtype {dt!r} is not modelled (fp32, fp16, bf16, bool are)")


def _scalar(s, dt: str):
    """A Python scalar converted as a wrapped number of dtype ``dt``: double -> fp32 -> dt."""
    return np.float32(_rnd(np.float32(s), dt))


_UNARY = {"exp": k_exp, "tanh": k_tanh, "erf": k_erf, "log1p": k_log1p}
# Vectorized<float>::log1p() (ATen and Inductor's C++) is SLEEF log1pf_u10 on AVX2 and
# AVX-512 (measured 100% of 1.3e6 fp32 inputs); the presets have no knob for it yet
VEC_LOG1P = "sleef_u10"
# std::log1p(float) of the scalar loops: glibc's log1pf (fdlibm's; glibc 2.36 measured bit for bit)
TAIL_LOG1P = "glibc"
INDUCTOR_OVERHEAD_RATIO = 0.12  # torch._inductor.codegen.cpp.KernelOpStats.OVERHEAD_RATIO_THRESHOLD
_POINTWISE_MOVES = ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "alias", "detach", "clone")
_REDUCING = ("sum", "mean", "amax", "amin", "var_mean", "_softmax", "native_layer_norm", "getitem")


def _inductor_scalar_tail(nodes, inputs, outs, lanes: int):
    """Does Inductor's one pointwise kernel run its tail in a scalar loop?

    Inductor (``CppKernelProxy.codegen_loop_bodies``, torch 2.13) tiles the flat
    loop by ``lanes`` and vectorises the ``numel mod lanes`` tail with masked loads
    unless the loop body's share of mask ops (``where``) exceeds
    ``OVERHEAD_RATIO_THRESHOLD`` = 0.12 and the tail is at most half a vector; then
    the tail is a scalar loop calling libm (``std::exp``, ``std::log1p``).  The loop
    body inlines every pointwise producer at each use, so the op count is the size
    of each output's expression tree (one ``load`` per input use, scalar constants
    not counted) plus one ``store`` per output.  Returns the number of tail elements
    computed by the scalar loop (0: none), or None when the graph is not one
    contiguous pointwise kernel (reductions, permutes, broadcasts): not decided."""
    by_name = {n.name: n for n in nodes}
    names_in = {p.name for p in inputs}
    numel = None
    for p in inputs:
        k = int(np.prod(p.shape, dtype=np.int64))
        numel = k if numel is None else numel
        if k != numel:
            return None
    for n in nodes:
        base = n.op.split(".")[0].rstrip("_")
        if base in _REDUCING or base in ("permute", "transpose", "t", "expand"):
            return None
        if n.shape is not None and int(np.prod(n.shape, dtype=np.int64)) != numel and n.op != "constant":
            return None
    memo = {}

    def count(name):
        if name in names_in:
            return 1, 0  # a load
        if name in memo:
            return memo[name]
        n = by_name[name]
        if n.op == "constant":
            return None
        base = n.op.split(".")[0].rstrip("_")
        ops, masks = (0, 0) if base in _POINTWISE_MOVES else (1, int(base == "where"))
        for r in n.refs():
            c = count(r)
            if c is None:
                return None
            ops, masks = ops + c[0], masks + c[1]
        memo[name] = (ops, masks)
        return memo[name]

    ops = masks = 0
    for o in outs:
        c = count(o)
        if c is None:
            return None
        ops, masks = ops + c[0] + 1, masks + c[1]
    tail = numel % lanes
    if ops and masks / ops > INDUCTOR_OVERHEAD_RATIO and 2 * tail <= lanes:
        return tail
    return 0


INDUCTOR_HEAVY_OPS = ("exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh")
"""``StorageBox.should_realize_on_reuse`` (torch 2.13, CPU): a pointwise value with more
than one user is stored to a buffer when its inlined expression uses one of these ops,
reads more than ``realize_reads_threshold`` (4) buffers or is a large inner function."""
INDUCTOR_REALIZE_READS = 4
INDUCTOR_LARGE_INNER_FN = 30  # torch._inductor.config._realize_opcount_threshold_default


def _inductor_realized_low(nodes, inputs, outs, dtypes) -> str | None:
    """A 16-bit pointwise value Inductor stores to a buffer that other nodes of the graph
    read, or None.  Inductor realizes a graph output, and a value with several users
    whose expression is heavy (:data:`INDUCTOR_HEAVY_OPS`, more than
    :data:`INDUCTOR_REALIZE_READS` reads, a large inner function); a consumer fused in
    the loop that stores it uses the fp32 register, one in a later loop loads the value
    rounded to fp16/bf16 (generated code read: ``e = exp(x - amax(x)); e / e.sum()``
    sums the fp32 ``e`` and divides the stored bf16 ``e``).  Which consumer is which
    follows Inductor's loop fusion, not modelled: named here so that predicting
    refuses (without ``emulate_precision_casts``, which rounds every such value)."""
    by_name = {n.name: n for n in nodes}
    names_in = {p.name for p in inputs}
    users = {}
    for n in nodes:
        for r in set(n.refs()):
            users.setdefault(r, set()).add(n.name)

    def expr(name, seen):
        """(ops, reads, heavy) of the inlined expression of ``name``."""
        n = by_name.get(name)
        if name in names_in or n is None or n.op == "constant":
            return 0, 1, False
        base = n.op.split(".")[0].rstrip("_")
        if base in _REDUCING:
            return 0, 1, False  # a reduction is its own buffer: one read
        ops, reads, heavy = (0 if base in _POINTWISE_MOVES else 1), 0, base in INDUCTOR_HEAVY_OPS
        for r in n.refs():
            if r in seen:
                continue
            seen.add(r)
            o, rd, h = expr(r, seen)
            ops, reads, heavy = ops + o, reads + rd, heavy or h
        return ops, reads, heavy

    out_set = set(outs)
    for n in nodes:
        base = n.op.split(".")[0].rstrip("_")
        if dtypes.get(n.name) not in _LOW or not users.get(n.name):
            continue
        if base == "mean" and n.name in out_set:
            # the mean's buffer is the fp32 sum; the division and the 16-bit conversion are a
            # pointwise output buffer that users load rounded or recompute in fp32 (measured:
            # both, by the vector ISA)
            return (f"Inductor's {dtypes[n.name]} mean {n.name} is a graph output that other nodes read: "
                    "they load its rounded buffer or recompute it in fp32, as its loop fusion decides "
                    "(not modelled; emulate_precision_casts=True is)")
        if n.op == "constant" or base in _REDUCING or base in _POINTWISE_MOVES:
            continue
        ops, reads, heavy = expr(n.name, set())
        many = len(users[n.name]) > 1
        if n.name in out_set or (many and (heavy or reads > INDUCTOR_REALIZE_READS
                                           or ops > INDUCTOR_LARGE_INNER_FN)):
            why = "a graph output" if n.name in out_set else "used by several nodes, with a heavy expression"
            return (f"Inductor stores the {dtypes[n.name]} value aten.{n.op} ({n.name}: {why}) to a buffer "
                    "and its consumers read either the fp32 register or the rounded buffer, as its loop "
                    "fusion decides (not modelled; emulate_precision_casts=True is)")
    return None


def _unary32(name: str, x, algo: str) -> np.ndarray:
    """``numlab.kernels.<name>(x, fmt=FP32, algo=algo)`` as a float32 array."""
    return np.asarray(_UNARY[name](np.asarray(x, np.float32), fmt=FP32, algo=algo), np.float32)


def _sum32(x, order) -> np.ndarray:
    """fp32 sum of the last axis in ``order`` (:func:`numlab.kernels.reduce`)."""
    return np.asarray(reduce(np.asarray(x, np.float32), "sum", -1, order=order, acc=FP32), np.float32)


def _last_dim(node, dims, ndim):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        if ndim == 1:
            return
        raise NotModelled(f"{node.op} over all dims of a {ndim}-d tensor (numlab models the last dim)")
    dims = [int(d) % ndim for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    if dims != [ndim - 1]:
        raise NotModelled(f"{node.op} over dims {dims} of a {ndim}-d tensor: numlab models reductions "
                          "of the last (contiguous) dim only")


def _keep(r, keepdim):
    return r[..., None] if keepdim else r


def _threads(preset) -> int:
    if preset.threads:
        return int(preset.threads)
    torch = import_torch()
    return int(torch.get_num_threads())


def _rows(shape) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1


# -- ATen kernels -------------------------------------------------------------------
def _aten_sum(x, dt_in, out_dt, preset, numel):
    x = np.asarray(x, np.float32)
    if x.ndim == 0:
        return _rnd(x, out_dt)
    if _rows(x.shape) == 1 and numel >= preset.grain_size and _threads(preset) > 1:
        raise NotModelled(
            f"ATen sums a single row of {numel} >= GRAIN_SIZE={preset.grain_size} elements in "
            "per-thread pieces (two-pass reduction); numlab does not model that split")
    return _rnd(_sum32(x, preset.sum_order(dt_in)), out_dt)


def _aten_softmax(x, out_dt, preset):
    """ATen ``_vec_softmax_lastdim``: max, e = exp(x - max), sum by lanes + butterfly
    (tail lanes masked), inv = 1/sum, out = fl(e * inv)."""
    x = np.asarray(x, np.float32)
    m = np.max(x, axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        e = _unary32("exp", x - m, preset.vec_exp)
    L = preset.softmax_lanes
    if preset.capability == "DEFAULT":
        # ATen's scalar build: vec::reduce_all over the generic Vectorized<float> (8 lanes):
        # lane-wise adds, the tail into lanes 0..t-1, then lanes 1..7 added into lane 0 one
        # by one (generic vec_reduce_all); exp is std::exp (glibc) -- measured 100%
        s = _sum32(e, Lanes(L, "sequential", "masked"))
    else:
        # the lane loop of Inductor's reductions, without thread split or cascade, and
        # rows shorter than one vector summed sequentially
        s = _sum32(e, InductorLanes(L, 1, 1, "false", False, L))
    with np.errstate(all="ignore"):
        inv = np.float32(1) / s
        out = e * inv[..., None]
    return _rnd(out, out_dt)


def _welford_rows(x, L, fma=(True, True, False, True), widen: bool = False):
    """ATen ``RowwiseMoments`` (moments_utils.h) over the last axis: (mean, var) fp32.

    ``L`` lanes; chunks of 16 vectors updated by Welford with ``c = 1/(j+1)``,
    chunk moments merged by ``AddMomentsVec`` into a cascade stack, the scalar
    tail by Welford, then the ``L`` lanes merged one by one by ``AddMoments``.
    ``fma = (update, merge_vec, tail, merge_lanes)``: where GCC contracted
    ``a += b * c`` into one FMA in ATen's build -- the vector Welford update,
    the vector ``AddMomentsVec``, the scalar tail, the scalar ``AddMoments``
    merging the lanes (measured).  ``widen`` (bf16/fp16 input): a vector load holds
    ``2L`` elements whose two fp32 halves get two Welford accumulators per chunk,
    both merged into the stack (``UpdateMomentsVec`` for reduced types); the lane
    merge then counts ``2n`` elements per lane.
    """
    x = np.asarray(x, np.float32)
    N = x.shape[-1]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, N)
    R = x2.shape[0]
    kChunk = 16
    VL = 2 * L if widen else L  # elements per vector load
    n = N // VL
    m = -(-n // kChunk)
    f = np.float32

    def _ma(use):
        return fma32 if use else (lambda a, b, c: a * b + c)

    ma_upd, ma_vec, ma_tail, ma_sc = (_ma(u) for u in fma)
    depth = ceil_log2(m) if m > 0 else 0
    size = max(depth, 1)
    m0_stk = [0] * size
    m1_stk = [np.zeros((R, L), f) for _ in range(size)]
    m2_stk = [np.zeros((R, L), f) for _ in range(size)]
    c_vecs = [f(1) / f(j + 1) for j in range(kChunk)]

    def add_moments(m0_add, m1_add, m2_add, m0, m1, m2, scalar=False):
        # AddMomentsVec (vector stack merges): m1 + c*delta,
        #   fma(delta, (delta*c)*m0, m2 + m2_add);
        # AddMoments (scalar lane merges): fma(c, delta, m1), m2 + fma(t, m0, m2_add)
        # with t = delta*delta*c (the contractions GCC chose, measured: 100% of the
        # rstd of 512 rows for n = 256..5000 except one row in ~500)
        nn = m0 + m0_add
        c = f(0) if nn == 0 else f(m0_add) / f(nn)
        delta = m1_add - m1
        t = (delta * delta) * c
        if scalar:
            m1 = ma_sc(np.full_like(delta, c), delta, m1)
            m2 = m2 + ma_sc(t, f(m0), m2_add)
        else:
            m1 = m1 + c * delta
            m2 = ma_vec(delta, (delta * c) * f(m0), m2 + m2_add)
        return nn, m1, m2

    with np.errstate(all="ignore"):
        for i in range(m):
            cnt = min(kChunk, n - i * kChunk)
            halves = 2 if widen else 1
            for h in range(halves):
                m1v = np.zeros((R, L), f)
                m2v = np.zeros((R, L), f)
                for j in range(cnt):
                    base = (i * kChunk + j) * VL + h * L
                    xv = x2[:, base:base + L]
                    d = xv - m1v
                    m1v = ma_upd(d, np.full_like(d, c_vecs[j]), m1v)
                    m2v = ma_upd(d, xv - m1v, m2v)
                m0_stk[0], m1_stk[0], m2_stk[0] = add_moments(cnt, m1v, m2v, m0_stk[0], m1_stk[0],
                                                              m2_stk[0])
            mask = i + 1
            j = 1
            while j < depth and (mask & 1) == 0:
                m0_stk[j], m1_stk[j], m2_stk[j] = add_moments(
                    m0_stk[j - 1], m1_stk[j - 1], m2_stk[j - 1], m0_stk[j], m1_stk[j], m2_stk[j])
                m0_stk[j - 1] = 0
                m1_stk[j - 1] = np.zeros((R, L), f)
                m2_stk[j - 1] = np.zeros((R, L), f)
                mask >>= 1
                j += 1
        for i in range(1, depth):
            m0_stk[0], m1_stk[0], m2_stk[0] = add_moments(
                m0_stk[i], m1_stk[i], m2_stk[i], m0_stk[0], m1_stk[0], m2_stk[0])
        m1_arr, m2_arr = m1_stk[0], m2_stk[0]
        m0 = 0
        m1 = np.zeros(R, f)
        m2 = np.zeros(R, f)
        for i in range(n * VL, N):
            d = x2[:, i] - m1
            m0 += 1
            m1 = m1 + d / f(m0)
            m2 = ma_tail(d, x2[:, i] - m1, m2)
        for i in range(L):
            m0, m1, m2 = add_moments(n * VL // L, m1_arr[:, i], m2_arr[:, i], m0, m1, m2, scalar=True)
        var = m2 / f(N)
    return m1.reshape(lead), var.reshape(lead)


def _aten_layer_norm(x, w, b, eps, out_dt, preset, ind=None, widen=False):
    """ATen LayerNormKernel: RowwiseMoments, rstd = 1/sqrt(var + eps) (two fp32
    roundings), y = fma((x - mean) * rstd, gamma, beta) for fp32 and
    fma(fma(x, rstd, -rstd*mean), gamma, beta) for bf16/fp16 (measured: 100%
    given ATen's mean and rstd), one rounding to the tensor dtype.  ATen's ``DEFAULT``
    build (generic ``Vectorized``, no FMA instructions): the same steps with every FMA
    two roundings (measured 100% fp32, lengths 64..1000)."""
    use_fma = preset.capability != "DEFAULT"
    ma = fma32 if use_fma else (lambda a, b, c: a * b + c)
    if ind is None:
        mean, var = _welford_rows(x, preset.layernorm_lanes, widen=widen,
                                  **({} if use_fma else {"fma": (False, False, False, False)}))
    else:  # the order switched to Inductor's (two passes of lane sums, as its var_mean)
        n = np.float32(x.shape[-1])
        order = ind.pi.reduce_order(n_vec=ind.n_vec, threads=ind.threads)
        mean = _sum32(x, order) / n
        d = x - mean[..., None]
        var = _sum32(d * d, order) / n
    with np.errstate(all="ignore"):
        rstd = np.float32(1) / np.sqrt(var + np.float32(eps)).astype(np.float32)
        if widen and w is not None and b is not None:
            # 16-bit kernel: fma(fma(x, rstd, -rstd*mean), gamma, beta) (measured)
            bias = -(rstd * mean)
            y = ma(ma(x, np.broadcast_to(rstd[..., None], x.shape),
                      np.broadcast_to(bias[..., None], x.shape)), w, b)
            return _rnd(y, out_dt), mean[..., None], rstd[..., None]
        y = (x - mean[..., None]) * rstd[..., None]
        if w is not None and b is not None:
            y = ma(y, w, b)
        elif w is not None:
            y = y * w
        elif b is not None:
            y = y + b
    return _rnd(y, out_dt), mean[..., None], rstd[..., None]


# -- the interpreter ----------------------------------------------------------------
