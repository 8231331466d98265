"""What the torch frontend knows about ATen and Inductor that is not a node's
arithmetic: rounding a user's input to its torch dtype, the checks that refuse a
path (:class:`NotModelled`), and Inductor's scheduling decisions that the lowering
and the refusals read -- whether a kernel's masked tail runs as a scalar loop
(:func:`inductor_scalar_tail`) and which 16-bit values Inductor stores to a buffer
other nodes read (:func:`inductor_realized_low`).  Every number is computed by the
engine (:mod:`numlab.kernels.engine`); each rule cites the source it follows.
"""

from __future__ import annotations

import numpy as np

from ..formats import get_format
from ..rounding import round_to
from .bridge import import_torch
from .presets import _LOW


class NotModelled(NotImplementedError):
    """A case numlab does not model bit for bit (the message says which and why)."""


def _rnd(x, dt: str):
    """Round float32/float64 values to torch dtype ``dt`` (returned as float32): a
    user's input array given as values to predict on."""
    if dt == "bool":
        return np.asarray(x, dtype=bool)
    if dt == "fp32":
        return np.asarray(x, dtype=np.float32)
    if dt in _LOW:
        return np.asarray(round_to(np.asarray(x, dtype=np.float32)
                                   if np.asarray(x).dtype != np.float64 else np.asarray(x), get_format(dt)),
                          dtype=np.float32)
    raise NotModelled(f"dtype {dt!r} is not modelled (fp32, fp16, bf16, bool are)")


INDUCTOR_OVERHEAD_RATIO = 0.12  # torch._inductor.codegen.cpp.KernelOpStats.OVERHEAD_RATIO_THRESHOLD
_POINTWISE_MOVES = ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "alias", "detach", "clone")
_REDUCING = ("sum", "mean", "amax", "amin", "var_mean", "_softmax", "native_layer_norm", "getitem")


def inductor_scalar_tail(nodes, inputs, outs, lanes: int):
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


def inductor_realized_low(nodes, inputs, outs, dtypes) -> str | None:
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


def _last_dim(node, dims, ndim):
    if ndim == 0:
        raise NotModelled(f"{node.op} of a 0-d tensor (numlab models reductions of the last dim)")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        if ndim == 1:
            return
        raise NotModelled(f"{node.op} over all dims of a {ndim}-d tensor (numlab models the last dim)")
    dims = [int(d) % ndim for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    if dims != [ndim - 1]:
        raise NotModelled(f"{node.op} over dims {dims} of a {ndim}-d tensor: numlab models reductions "
                          "of the last (contiguous) dim only")


def _threads(preset) -> int:
    if preset.threads:
        return int(preset.threads)
    torch = import_torch()
    return int(torch.get_num_threads())


def _rows(shape) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1


