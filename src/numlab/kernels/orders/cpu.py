"""Summation orders of PyTorch's CPU reductions, as :class:`numlab.kernels.orders.Order` types.

Both were measured bit for bit against torch 2.13 on the project machine
(``src/numlab/torch/presets.py`` has the numbers; ``tests/test_torch_faithfulness.py``
re-checks them against real torch).  Every addition is one ``ar.add`` (the
accumulator format of :func:`numlab.kernels.reduce`; fp32 for PyTorch), so
with ``acc="fp32"`` the orders are exactly ATen's / Inductor's, and with
another accumulator they are the same trees rounded to that format.  Unlike
numlab's own orders (which start from the data), the accumulators start at
``+0.0``, as the C code does: a row of ``-0.0`` sums to ``+0.0``.

``AtenCascade(vec=8, widen=False)``  ``"aten_cascade(8)"``, ``"aten_cascade(8,widen)"``
    ATen eager ``sum`` (``aten/src/ATen/native/cpu/SumKernel.cpp``,
    ``cascade_sum``; https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cpu/SumKernel.cpp).
    For a row of ``n >= vt`` elements (``vt = vec``, or ``2 vec`` with
    ``widen``), ``vectorized_inner_sum``:

    * the row is read as ``n // vt`` vector loads; with ``widen`` (bf16/fp16
      tensors) a load of ``2 vec`` elements is widened to two fp32 vectors
      which are added (lane ``j`` gets ``x[j] + x[vec + j]``);
    * those vectors are summed by ``row_sum`` with ``ilp_factor = 4``
      interleaved accumulators, each a ``multi_row_sum`` *cascade*: level 0
      adds ``level_step = 2**max(4, ceil_log2(size) // 4)`` items
      sequentially, then is added into level 1 (up to 4 levels, carrying
      when the item counter's bits say so), leftover items go to accumulator
      0, and the four accumulators are added ``((a0+a1)+a2)+a3``;
    * the ``n mod vt`` tail elements are added sequentially to a scalar
      ``0.0``, then the ``vec`` lanes of the vector accumulator one by one.

    For ``n < vt``, ``scalar_inner_sum``: the same ``row_sum`` over scalars.
    ``vec`` is 8 on the project machine although the CPU capability is
    AVX512: the sum kernel runs its AVX2 build (measured).

``InductorLanes(lanes=16, n_vec=1, threads=1, split="auto", cascade=True, unroll=8, min_chunk=512)``
    ``"inductor_lanes(16)"``, ``"inductor_lanes(16,2,2)"``,
    ``"inductor_lanes(16,1,1,false,false,16)"``.
    Inductor's C++ row reduction (``torch/_inductor/codegen/cpp.py``,
    ``cpp_prefix.h``; https://github.com/pytorch/pytorch/tree/main/torch/_inductor).
    ``W = lanes * n_vec`` lane accumulators (``n_vec = 2`` for 16-bit inputs,
    whose loads fill two fp32 vectors), one vector per ``W`` elements added
    lane-wise; the ``n mod W`` tail is added into lanes ``0 .. t-1``
    (``sum_masked_reduce``); the ``n_vec`` vectors are added, then
    ``vec_reduce_all`` reduces the ``lanes`` lanes by the butterfly ``lane i
    += lane i ^ h`` for ``h = lanes/2, ..., 1`` and the result is added to a
    scalar ``0.0``.  Rows of ``n < unroll`` are unrolled: sequential (Inductor:
    ``unroll_reductions_threshold``, measured ``n = 8`` is vectorised).
    ``split`` (``"auto"``, ``"true"``, ``"false"``): whether the reduction loop
    is split over the ``threads`` OpenMP threads (static schedule, each thread
    its own accumulator, added in thread order); ``"auto"`` applies Inductor's
    rule (:func:`inductor_splits_reduction`), which depends on the number of
    rows reduced together.  ``cascade``: the reduction is an fp32 sum, so for
    ``n > 4096`` Inductor's ``CascadeSumHelper`` is used (its cascade acts
    beyond 4096 vector iterations per thread; with a split, the tail is kept
    in a separate masked accumulator combined after the threads').
    ATen's softmax sums with the same loop without unrolling beyond ``lanes``,
    threads or cascade: ``InductorLanes(L, 1, 1, "false", False, L)``.

``depth(n)`` is computed by running the order on addition counts (an
accumulator that still holds its initial ``0.0`` counts as depth -1, so
``0 + x`` is not counted), for one row; for ``InductorLanes`` with
``split="auto"`` the larger of the split and unsplit depths.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from .._common import check_choice
from .base import Order

__all__ = [
    "AtenCascade",
    "InductorLanes",
    "ceil_log2",
    "inductor_splits_reduction",
    "butterfly",
    "SPLITS",
    "parse_cpu_order",
    "CPU_ORDER_HELP",
]

SPLITS = ("auto", "true", "false")
CPU_ORDER_HELP = ("'aten_cascade(vec[,widen])', "
                  "'inductor_lanes(lanes[,n_vec[,threads[,split[,cascade[,unroll[,min_chunk]]]]]])'")


def ceil_log2(x: int) -> int:
    """ATen's ``utils::CeilLog2``: 1 for ``x <= 2``, else ``ceil(log2(x))``."""
    x = int(x)
    if x <= 2:
        return 1
    return (x - 1).bit_length()


def _zeros(shape, ar) -> np.ndarray:
    """A fresh accumulator: ``+0.0`` (or the depth counter's 'untouched' mark)."""
    return np.full(shape, getattr(ar, "zero", 0), dtype=ar.dtype)


def _pos_int(name, v, lo=1):
    if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < lo:
        raise ValueError(f"{name}={v!r} is not valid; it must be an int >= {lo}")
    return int(v)


def _pow2(name, v):
    v = _pos_int(name, v)
    if v & (v - 1):
        raise ValueError(f"{name}={v!r} is not valid; it must be a power of two")
    return v


class _DepthArith:
    """Addition counts instead of values: ``add(a, b) = max(a, b) + 1``; -1 marks a
    fresh accumulator (``0 + x`` is exact, so it passes the other count through)."""

    dtype = np.dtype(np.int64)
    zero = -1
    native = False

    def add(self, a, b):
        a = np.asarray(a)
        b = np.asarray(b)
        return np.where(a < 0, b, np.where(b < 0, a, np.maximum(a, b) + 1))


def _depth_of(order, n: int, rows: int = 1) -> int:
    if n <= 1:
        return 0
    r = order._sum(np.zeros((rows, n), np.int64), _DepthArith())
    return max(int(np.max(r)), 0)


# --------------------------------------------------------------------------
# ATen cascade_sum
# --------------------------------------------------------------------------
def _multi_row_sum(items: np.ndarray, ar) -> np.ndarray:
    """ATen ``multi_row_sum`` over ``items`` (axis 0 = the ``size`` loop)."""
    size = items.shape[0]
    shp = items.shape[1:]
    num_levels = 4
    level_power = max(4, ceil_log2(size) // num_levels)
    level_step = 1 << level_power
    level_mask = level_step - 1
    acc = [_zeros(shp, ar) for _ in range(num_levels)]
    i = 0
    while i + level_step <= size:
        for j in range(level_step):  # level 0: level_step items sequentially
            acc[0] = ar.add(acc[0], items[i + j])
        i += level_step
        for j in range(1, num_levels):
            acc[j] = ar.add(acc[j], acc[j - 1])
            acc[j - 1] = _zeros(shp, ar)
            if i & (level_mask << (j * level_power)):
                break
    while i < size:
        acc[0] = ar.add(acc[0], items[i])
        i += 1
    for j in range(1, num_levels):
        acc[0] = ar.add(acc[0], acc[j])
    return acc[0]


def _row_sum(items: np.ndarray, ar) -> np.ndarray:
    """ATen ``row_sum`` (``ilp_factor = 4``) over axis 0 of ``items``."""
    count = items.shape[0]
    ilp = 4
    size_ilp = count // ilp
    if size_ilp:
        blk = items[: size_ilp * ilp].reshape((size_ilp, ilp) + items.shape[1:])
        part = _multi_row_sum(blk, ar)  # (ilp, ...)
        parts = [part[k] for k in range(ilp)]
    else:
        parts = [_zeros(items.shape[1:], ar) for _ in range(ilp)]
    for i in range(size_ilp * ilp, count):
        parts[0] = ar.add(parts[0], items[i])
    for k in range(1, ilp):
        parts[0] = ar.add(parts[0], parts[k])
    return parts[0]


@dataclass(frozen=True)
class AtenCascade(Order):
    """ATen eager ``sum``'s ``cascade_sum`` order (module docstring)."""

    vec: int = 8
    widen: bool = False

    def __post_init__(self):
        _pos_int("vec", self.vec)
        if not isinstance(self.widen, bool | np.bool_):
            raise TypeError(f"widen must be a bool, got {self.widen!r}")

    def __str__(self) -> str:
        return f"aten_cascade({self.vec},widen)" if self.widen else f"aten_cascade({self.vec})"

    def depth(self, n: int) -> int:
        return _cached_depth(self, int(n))

    def _sum(self, x, ar):
        n = x.shape[-1]
        lead = x.shape[:-1]
        x2 = x.reshape(-1, n)
        vec = int(self.vec)
        vt = 2 * vec if self.widen else vec
        if n < vt:
            return _row_sum(np.ascontiguousarray(x2.T), ar).reshape(lead)
        nv = n // vt
        blocks = x2[:, : nv * vt].reshape(x2.shape[0], nv, vt)
        items = ar.add(blocks[:, :, :vec], blocks[:, :, vec:]) if self.widen else blocks
        vacc = _row_sum(np.ascontiguousarray(np.moveaxis(items, 1, 0)), ar)  # (R, vec)
        fin = _zeros(x2.shape[0], ar)
        for k in range(nv * vt, n):
            fin = ar.add(fin, x2[:, k])
        for k in range(vec):
            fin = ar.add(fin, vacc[:, k])
        return fin.reshape(lead)


# --------------------------------------------------------------------------
# Inductor lanes
# --------------------------------------------------------------------------
def butterfly(v: np.ndarray, ar=None) -> np.ndarray:
    """``vec_reduce_all`` over the last axis (a power of two): lane i += lane i ^ h,
    h = L/2, ..., 1; returns lane 0.  ``ar`` None: native arithmetic of ``v``'s dtype."""
    L = v.shape[-1]
    if L & (L - 1):
        raise ValueError(f"butterfly needs a power-of-two lane count, got {L}")
    idx = np.arange(L)
    h = L // 2
    with np.errstate(over="ignore", invalid="ignore"):
        while h >= 1:
            v = v + v[..., idx ^ h] if ar is None else ar.add(v, v[..., idx ^ h])
            h //= 2
    return v[..., 0]


def inductor_splits_reduction(outer: int, n: int, lanes: int, threads: int,
                              min_chunk: int = 512) -> bool:
    """Does Inductor's C++ backend split a row reduction over the threads?

    Rule of ``CppKernelProxy.max_parallel_depth`` + ``decide_parallel_depth``
    (torch 2.13): the reduction loop becomes the parallel loop when there is
    one row, or when ``outer * 300 < n // lanes``; it is then parallel when
    ``outer * n // threads >= min_chunk`` (``cpp.min_chunk_size``).
    """
    if threads <= 1 or n < 8:
        return False
    if outer > 1 and not outer * 300 < n // lanes:
        return False
    return (outer * n) // threads >= min_chunk


def _cascade_acc(items, lo, hi, depth, ar, chunk: int = 4096):
    """``CascadeSumHelper`` accumulation of ``items[lo:hi]`` (cpp_prefix.h)."""
    shp = items.shape[1:]
    stk = [_zeros(shp, ar) for _ in range(max(depth, 1))]
    index = 0
    num_chunks = 0
    for b in range(lo, hi):
        stk[0] = ar.add(stk[0], items[b])
        if depth > 0:
            index += 1
            if index == chunk:
                num_chunks += 1
                index = 0
                mask = num_chunks
                j = 1
                while j < depth and (mask & 1) == 0:
                    stk[j] = ar.add(stk[j], stk[j - 1])
                    stk[j - 1] = _zeros(shp, ar)
                    mask >>= 1
                    j += 1
    res = stk[0]
    for i in range(1, depth):
        res = ar.add(res, stk[i])
    return res


def _seq_acc(items, lo, hi, ar):
    acc = _zeros(items.shape[1:], ar)
    for b in range(lo, hi):
        acc = ar.add(acc, items[b])
    return acc


def _add_tail(a, tail, t, ar):
    a = a.copy()
    a[:, :t] = ar.add(a[:, :t], tail[:, :t])
    return a


@dataclass(frozen=True)
class InductorLanes(Order):
    """Inductor C++'s lane-vector row reduction (module docstring)."""

    lanes: int = 16
    n_vec: int = 1
    threads: int = 1
    split: str = "auto"
    cascade: bool = True
    unroll: int = 8
    min_chunk: int = 512

    def __post_init__(self):
        _pow2("lanes", self.lanes)
        _pos_int("n_vec", self.n_vec)
        _pos_int("threads", self.threads)
        s = self.split
        if isinstance(s, bool | np.bool_):
            s = "true" if s else "false"
        check_choice("split", s, SPLITS)
        object.__setattr__(self, "split", s)
        if not isinstance(self.cascade, bool | np.bool_):
            raise TypeError(f"cascade must be a bool, got {self.cascade!r}")
        _pos_int("unroll", self.unroll)
        _pos_int("min_chunk", self.min_chunk)

    def __str__(self) -> str:
        c = "true" if self.cascade else "false"
        return (f"inductor_lanes({self.lanes},{self.n_vec},{self.threads},{self.split},{c},"
                f"{self.unroll},{self.min_chunk})")

    def splits(self, rows: int, n: int) -> bool:
        """Whether ``rows`` rows of ``n`` are reduced with the loop split over threads."""
        if self.split != "auto":
            return self.split == "true"
        return inductor_splits_reduction(max(int(rows), 1), int(n), self.lanes * self.n_vec,
                                         self.threads, self.min_chunk)

    def depth(self, n: int) -> int:
        return _cached_depth(self, int(n))

    def _sum(self, x, ar):
        n = x.shape[-1]
        lead = x.shape[:-1]
        x2 = x.reshape(-1, n)
        R = x2.shape[0]
        lanes, n_vec, threads = int(self.lanes), int(self.n_vec), int(self.threads)
        W = lanes * n_vec
        if n < self.unroll:  # unrolled: ((x0 + x1) + x2) + ...
            s = x2[:, 0].copy() if n else _zeros(R, ar)
            for k in range(1, n):
                s = ar.add(s, x2[:, k])
            return s.reshape(lead)
        split = self.splits(R, n)
        nb = n // W
        t = n - nb * W
        iters = nb + (1 if t else 0)
        items = np.ascontiguousarray(np.moveaxis(x2[:, : nb * W].reshape(R, nb, W), 1, 0))
        tail = _zeros((R, W), ar)
        tail[:, :t] = x2[:, nb * W:]
        helper = bool(self.cascade) and n > 4096
        if not split:
            depth = ceil_log2(-(-nb // 4096)) if helper and nb > 4096 else 0
            acc = _cascade_acc(items, 0, nb, depth, ar) if depth > 1 else _seq_acc(items, 0, nb, ar)
            if t:
                acc = _add_tail(acc, tail, t, ar)
        else:
            q, r = divmod(iters, threads)
            per_thread = -(-iters // threads)
            depth = ceil_log2(-(-per_thread // 4096)) if helper and per_thread > 4096 else 0
            A = _zeros((R, W), ar)
            M = _zeros((R, W), ar)
            start = 0
            for k in range(threads):
                cnt = q + (1 if k < r else 0)
                lo, hi = start, start + cnt
                start = hi
                a = (_cascade_acc(items, lo, min(hi, nb), depth, ar) if depth > 1
                     else _seq_acc(items, lo, min(hi, nb), ar))
                if t and lo <= nb < hi:
                    if helper:
                        M = _add_tail(M, tail, t, ar)
                    else:
                        a = _add_tail(a, tail, t, ar)
                A = ar.add(A, a)
            acc = ar.add(A, M) if helper else A
        v = acc[:, :lanes]
        for i in range(1, n_vec):
            v = ar.add(v, acc[:, i * lanes:(i + 1) * lanes])
        s = ar.add(_zeros(R, ar), butterfly(v, ar))
        return s.reshape(lead)


@functools.lru_cache(maxsize=256)
def _cached_depth(order: Order, n: int) -> int:
    if isinstance(order, InductorLanes) and order.split == "auto":
        return max(_depth_of(replace(order, split="true"), n), _depth_of(replace(order, split="false"), n))
    return _depth_of(order, n)


# --------------------------------------------------------------------------
# parsing (called by numlab.kernels.orders.parse_order)
# --------------------------------------------------------------------------
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _bool_arg(knob, s, true_words=(), false_words=()):
    if s in _TRUE + tuple(true_words):
        return True
    if s in _FALSE + tuple(false_words):
        return False
    raise ValueError(f"{knob}={s!r} is not valid; valid choices: "
                     f"{list(_TRUE[:1] + tuple(true_words) + _FALSE[:1] + tuple(false_words))}")


def _int(knob, s):
    try:
        return int(s)
    except ValueError:
        raise ValueError(f"{knob}={s!r} is not valid; it must be an integer") from None


def parse_cpu_order(name: str, args: list[str]) -> Order | None:
    """The CPU library order ``name(args)`` (lower-case, split), or None if ``name`` is not one."""
    if name == "aten_cascade" and 1 <= len(args) <= 2:
        widen = _bool_arg("widen", args[1], ("widen",), ("nowiden",)) if len(args) > 1 else False
        return AtenCascade(_int("vec", args[0]), widen)
    if name == "inductor_lanes" and 1 <= len(args) <= 7:
        kw = {}
        names = ("lanes", "n_vec", "threads", "split", "cascade", "unroll", "min_chunk")
        for k, a in zip(names, args, strict=False):
            if k == "split":
                kw[k] = a
            elif k == "cascade":
                kw[k] = _bool_arg("cascade", a)
            else:
                kw[k] = _int(k, a)
        return InductorLanes(**kw)
    return None
