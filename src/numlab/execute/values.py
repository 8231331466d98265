"""Values at the executor's boundaries: graph inputs rounded to S, outputs in
S's container, the formats node outputs are written in (S, or what their
operator declares), NaN/inf counts and per-node schedule seeds."""

from __future__ import annotations

import zlib

import numpy as np

from ..formats import FP32, FP64, Format, get_format
from ..ops import get_op
from ..rounding import round_to

__all__ = ["to_storage", "container", "count", "count_stored", "node_seed", "stored_formats", "node_format"]


def _f32(x) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype == np.float32 else a.astype(np.float32)


def to_storage(a: np.ndarray, S: Format) -> np.ndarray:
    """Round an input array to S (RNE), held in float32 (float64 for FP64).
    Integer arrays (gather indices) are returned as given."""
    if a.dtype.kind in "iu":
        return a
    if S is FP64 or S.p > 24:
        return a.astype(np.float64)
    if S.dtype is not None and a.dtype == S.dtype:
        return a.astype(np.float32)  # already S values: exact widening
    if a.dtype != np.float64 and a.dtype != np.float32:
        a = a.astype(np.float32)  # fp16/bf16/fp8 widen exactly
    if S == FP32:
        return a.astype(np.float32)  # IEEE RNE (numpy cast)
    if S.name in ("fp16", "bf16"):
        # values already in S (e.g. inputs drawn with make_inputs(fmt=S)):
        # a cast that widens back to every value exactly (no NaN: == fails)
        # moved no bit, and RNE leaves a representable value unchanged
        with np.errstate(over="ignore", invalid="ignore"):
            h = a.astype(S.dtype)
        if np.array_equal(h.astype(a.dtype), a):
            return h.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return _f32(round_to(a, S))  # round once from the given values; exact in fp32


def container(v: np.ndarray, S: Format) -> np.ndarray:
    """``v`` (values of S) in S's container; integer arrays unchanged."""
    if v.dtype.kind in "iub":
        return v
    return v.astype(S.container)


def count(v: np.ndarray) -> tuple[int, int]:
    """(number of NaN, number of inf) in ``v``.  Fast path: a finite sum
    (accumulated in at least float32) means there is neither -- any NaN or
    inf makes the sum NaN or inf; a sum that overflows from finite values
    only sends us to the exact count."""
    if v.dtype.kind not in "fV" and str(v.dtype) not in ("bfloat16",):
        return (0, 0)
    if v.size == 0:
        return (0, 0)
    acc = np.float64 if v.dtype == np.float64 else np.float32
    with np.errstate(all="ignore"):
        if np.isfinite(np.sum(v, dtype=acc)):
            return (0, 0)
    return (int(np.count_nonzero(np.isnan(v))), int(np.count_nonzero(np.isinf(v))))


def count_stored(c: np.ndarray, S: Format) -> tuple[int, int]:
    """:func:`count` for an array in a narrow S's container (fp16, bf16,
    fp8): a bit test on the codes (:attr:`Format.nonfinite_mask`, two cheap
    integer passes) before the exact count."""
    mask = S.nonfinite_mask  # a code is NaN or inf iff (code & mask) == mask
    if not S.narrow or mask is None or c.dtype != S.container or c.size == 0:
        return count(c)
    U = S.uint.type
    u = c.reshape(-1).view(U)
    step = 1 << 16  # chunks: the masked codes stay in cache (no full-size temporary)
    buf = np.empty(min(step, u.size), dtype=U)
    for i in range(0, u.size, step):
        t = buf[:min(step, u.size - i)]
        np.bitwise_and(u[i:i + step], U(mask), out=t)
        if t.max() == mask:
            break
    else:
        return (0, 0)
    w = c.astype(np.float32)
    return (int(np.count_nonzero(np.isnan(w))), int(np.count_nonzero(np.isinf(w))))


def node_seed(seed, name: str):
    """Per-node schedule seed: crc32 of the node name mixed with the run seed
    (independent of PYTHONHASHSEED)."""
    if seed is None:
        return None
    return int(np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))]).integers(2**31))


def node_format(node, S: Format) -> Format:
    """The storage format node ``node`` computes in (its kernel's S: the format its
    scalars and constants are held in, the tile's element size) and is written in:
    its ``storage`` meta attribute (a graph of several dtypes, such as a traced torch
    function mixing bf16 and fp32 tensors), else the run's ``S``."""
    f = node.attrs.get("storage")
    return S if f is None else get_format(f, f"attribute storage of node {node.name!r}")


def stored_formats(graph) -> dict:
    """Node name -> the :class:`Format` its output is written in between
    kernels, for the nodes whose operator declares one
    (``OpInfo.stored_fmt``: ``quantize`` -> its element format,
    ``block_scale`` -> fp32) or that carry a ``storage`` attribute
    (:func:`node_format`); every other node is written in S.  The one
    place the executor and the fingerprint read the placement from."""
    out = {}
    for node in graph.nodes:
        info = get_op(node.op)
        if info.stored_fmt is not None:
            out[node.name] = get_format(info.stored_fmt(node.op_attrs), f"stored_fmt of op {node.op!r}")
        elif node.attrs.get("storage") is not None:
            out[node.name] = node_format(node, None)
    return out
