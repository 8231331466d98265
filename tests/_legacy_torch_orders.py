"""Frozen copy of numlab/torch/orders.py as of commit 78ec8e0 (validated bit for bit
against torch 2.13 on the project machine), kept as the reference that
numlab.kernels.cpu_orders must reproduce.  Test-only; do not import from numlab code."""
from __future__ import annotations

import numpy as np

__all__ = [
    "ceil_log2",
    "aten_sum",
    "aten_row_sum",
    "inductor_sum",
    "inductor_splits_reduction",
    "butterfly",
]


def ceil_log2(x: int) -> int:
    """ATen's ``utils::CeilLog2``: 1 for ``x <= 2``, else ``ceil(log2(x))``."""
    x = int(x)
    if x <= 2:
        return 1
    return (x - 1).bit_length()


def _f32(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.float32:
        raise TypeError(f"x must hold float32 values (the fp32 accumulator's inputs), got {a.dtype}")
    return a


def _multi_row_sum(items: np.ndarray) -> np.ndarray:
    """ATen ``multi_row_sum`` over ``items`` (axis 0 = the ``size`` loop); fp32."""
    size = items.shape[0]
    shp = items.shape[1:]
    num_levels = 4
    level_power = max(4, ceil_log2(size) // num_levels)
    level_step = 1 << level_power
    level_mask = level_step - 1
    acc = [np.zeros(shp, np.float32) for _ in range(num_levels)]
    i = 0
    with np.errstate(over="ignore", invalid="ignore"):
        while i + level_step <= size:
            # level 0 adds level_step items sequentially (loop over vectors,
            # each addition vectorised over rows and lanes)
            for j in range(level_step):
                acc[0] = acc[0] + items[i + j]
            i += level_step
            for j in range(1, num_levels):
                acc[j] = acc[j] + acc[j - 1]
                acc[j - 1] = np.zeros(shp, np.float32)
                if i & (level_mask << (j * level_power)):
                    break
        while i < size:
            acc[0] = acc[0] + items[i]
            i += 1
        for j in range(1, num_levels):
            acc[0] = acc[0] + acc[j]
    return acc[0]


def aten_row_sum(items: np.ndarray) -> np.ndarray:
    """ATen ``row_sum`` (``ilp_factor = 4``) over axis 0 of ``items`` (fp32)."""
    items = _f32(items)
    count = items.shape[0]
    ilp = 4
    size_ilp = count // ilp
    if size_ilp:
        blk = items[: size_ilp * ilp].reshape((size_ilp, ilp) + items.shape[1:])
        part = _multi_row_sum(blk)  # (ilp, ...)
        parts = [part[k] for k in range(ilp)]
    else:
        parts = [np.zeros(items.shape[1:], np.float32) for _ in range(ilp)]
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(size_ilp * ilp, count):
            parts[0] = parts[0] + items[i]
        for k in range(1, ilp):
            parts[0] = parts[0] + parts[k]
    return parts[0]


def aten_sum(x, *, vec: int = 8, widen: bool = False) -> np.ndarray:
    """ATen CPU ``sum`` of the last axis of ``x`` (float32 values), in fp32.

    Parameters
    ----------
    x : ndarray of float32
        The values (for bf16/fp16 tensors: their exact fp32 widening).
    vec : int
        fp32 lanes ``V`` of the kernel's ``Vectorized<float>`` (8 for AVX2).
    widen : bool
        True for bf16/fp16 inputs: a vector load holds ``2 V`` elements that
        are widened into two fp32 vectors and added (``first + second``).

    Returns
    -------
    ndarray of float32, shape ``x.shape[:-1]``
        The fp32 accumulator; the caller rounds it to the output dtype.
    """
    x = _f32(x)
    if vec < 1:
        raise ValueError(f"vec={vec!r} must be >= 1")
    n = x.shape[-1]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, n)
    vt = 2 * vec if widen else vec
    with np.errstate(over="ignore", invalid="ignore"):
        if n < vt:
            out = aten_row_sum(np.ascontiguousarray(x2.T))
            return out.reshape(lead)
        nv = n // vt
        blocks = x2[:, : nv * vt].reshape(x2.shape[0], nv, vt)
        items = blocks[:, :, :vec] + blocks[:, :, vec:] if widen else blocks
        vacc = aten_row_sum(np.ascontiguousarray(np.moveaxis(items, 1, 0)))  # (R, V)
        fin = np.zeros(x2.shape[0], np.float32)
        for k in range(nv * vt, n):
            fin = fin + x2[:, k]
        for k in range(vec):
            fin = fin + vacc[:, k]
    return fin.reshape(lead)


def butterfly(v: np.ndarray) -> np.ndarray:
    """``vec_reduce_all`` over the last axis (a power of two): lane i += lane i ^ h."""
    L = v.shape[-1]
    if L & (L - 1):
        raise ValueError(f"butterfly needs a power-of-two lane count, got {L}")
    idx = np.arange(L)
    h = L // 2
    with np.errstate(over="ignore", invalid="ignore"):
        while h >= 1:
            v = v + v[..., idx ^ h]
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


def _cascade_acc(items: np.ndarray, lo: int, hi: int, depth: int, chunk: int = 4096):
    """CascadeSumHelper accumulation of items[lo:hi] (cpp_prefix.h)."""
    shp = items.shape[1:]
    stk = [np.zeros(shp, np.float32) for _ in range(max(depth, 1))]
    index = 0
    num_chunks = 0
    for b in range(lo, hi):
        stk[0] = stk[0] + items[b]
        if depth > 0:
            index += 1
            if index == chunk:
                num_chunks += 1
                index = 0
                mask = num_chunks
                j = 1
                while j < depth and (mask & 1) == 0:
                    stk[j] = stk[j] + stk[j - 1]
                    stk[j - 1] = np.zeros(shp, np.float32)
                    mask >>= 1
                    j += 1
    res = stk[0]
    for i in range(1, depth):
        res = res + stk[i]
    return res


def inductor_sum(x, *, lanes: int = 16, n_vec: int = 1, threads: int = 1,
                 split: bool | None = None, fp32_sum: bool = True) -> np.ndarray:
    """Inductor C++ row sum of the last axis of ``x`` (float32 values), in fp32.

    Parameters
    ----------
    x : ndarray of float32, shape (..., n)
    lanes : int
        fp32 lanes ``V`` of the vector ISA (16 for AVX512).
    n_vec : int
        Vectors per load (1 for fp32 inputs, 2 for bf16/fp16).
    threads : int
        OpenMP threads (``torch.get_num_threads()``).
    split : bool, optional
        Whether the reduction loop is split over the threads; default from
        :func:`inductor_splits_reduction`.
    fp32_sum : bool
        The reduction's dtype is fp32 (enables the CascadeSumHelper for
        n > 4096, whose separate masked tail accumulator changes the order
        only when the loop is split).
    """
    x = _f32(x)
    n = x.shape[-1]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, n)
    R = x2.shape[0]
    W = lanes * n_vec
    with np.errstate(over="ignore", invalid="ignore"):
        if n < 8:  # unrolled: ((x0 + x1) + x2) + ... (measured: n = 8 is vectorised)
            s = x2[:, 0].copy() if n else np.zeros(R, np.float32)
            for k in range(1, n):
                s = s + x2[:, k]
            return s.reshape(lead)
        if split is None:
            split = inductor_splits_reduction(max(R, 1), n, W, threads)
        nb = n // W
        t = n - nb * W
        iters = nb + (1 if t else 0)
        items = np.ascontiguousarray(np.moveaxis(x2[:, : nb * W].reshape(R, nb, W), 1, 0))
        tail = np.zeros((R, W), np.float32)
        tail[:, :t] = x2[:, nb * W:]
        helper = fp32_sum and n > 4096
        if not split:
            depth = ceil_log2(-(-nb // 4096)) if helper and nb > 4096 else 0
            acc = _cascade_acc(items, 0, nb, depth) if depth > 1 else _seq(items, 0, nb, R, W)
            if t:
                acc[:, :t] = acc[:, :t] + tail[:, :t]
        else:
            q, r = divmod(iters, threads)
            per_thread = -(-iters // threads)
            depth = ceil_log2(-(-per_thread // 4096)) if helper and per_thread > 4096 else 0
            A = np.zeros((R, W), np.float32)
            M = np.zeros((R, W), np.float32)
            start = 0
            for k in range(threads):
                cnt = q + (1 if k < r else 0)
                lo, hi = start, start + cnt
                start = hi
                a = (_cascade_acc(items, lo, min(hi, nb), depth) if depth > 1
                     else _seq(items, lo, min(hi, nb), R, W))
                if t and lo <= nb < hi:
                    if helper:
                        M[:, :t] = M[:, :t] + tail[:, :t]
                    else:
                        a[:, :t] = a[:, :t] + tail[:, :t]
                A = A + a
            acc = A + M if helper else A
        v = acc[:, :lanes]
        for i in range(1, n_vec):
            v = v + acc[:, i * lanes:(i + 1) * lanes]
        s = np.float32(0) + butterfly(v)
    return s.reshape(lead)


def _seq(items: np.ndarray, lo: int, hi: int, R: int, W: int) -> np.ndarray:
    acc = np.zeros((R, W), np.float32)
    for b in range(lo, hi):
        acc = acc + items[b]
    return acc
