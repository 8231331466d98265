"""Reveal the summation order of real PyTorch and NumPy reductions.

:func:`reveal_order` wraps the generic prober :func:`numlab.kernels.orders.reveal.reveal`
(numpy only) for the functions numlab knows by name (:data:`FUNCTIONS`) and for
torch callables::

    from numlab.torch import reveal_order
    r = reveal_order("torch.sum", 1000, "fp32")      # or a callable, see below
    print(r)                                         # tree, probe count, check
    r.order                                          # a numlab.kernels Tree order
    numlab.kernels.reduce(x, "sum", order=r.order, acc="fp32")

Named functions (each reduces the last axis of a (rows, n) array, one value per row):

``torch.sum``                 ``torch.sum(t, dim=-1)`` (ATen eager)
``torch.compile(torch.sum)``  the same compiled by Inductor (``dynamic=False``)
``numpy.sum``                 ``np.sum(x, axis=-1)``
``numpy.dot``                 ``np.dot(row, ones(n))`` row by row (the K loop of a dot)
``numpy.matmul``              ``row[None, :] @ ones((n, 1))`` row by row (the K loop of a 1 x K x 1 matmul)

A callable ``fn`` is called as ``fn(t)`` with a torch tensor ``t`` of shape
(rows, n) when ``torch=True`` (default) and must return one value per row,
e.g. ``lambda t: t.sum(-1)``; with ``torch=False`` it receives a numpy array.

Probe calls always have the same number of rows (padded), so a compiled
function sees one shape for the probes and one for the check.
torch is imported only when a torch function is revealed.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..kernels.orders.reveal import INPUT_FORMATS, Revealed, reveal, rowwise
from .predictor import compile_fn

__all__ = ["reveal_order", "FUNCTIONS", "black_box"]

FUNCTIONS = ("torch.sum", "torch.compile(torch.sum)", "numpy.sum", "numpy.dot", "numpy.matmul")


def _torch():
    import torch  # optional heavy dependency

    return torch


def _to_torch(x: np.ndarray):
    torch = _torch()
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def _from_torch(t) -> np.ndarray:
    torch = _torch()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.detach().numpy()


def torch_rows(fn):
    """A numpy (rows, n) -> (rows,) black box around a torch function of a tensor."""

    def box(x):
        return _from_torch(fn(_to_torch(x)))

    return box


def black_box(name: str):
    """The numpy (rows, n) -> (rows,) function behind a name of :data:`FUNCTIONS`."""
    if name == "torch.sum":
        torch = _torch()
        return torch_rows(lambda t: torch.sum(t, dim=-1))
    if name == "torch.compile(torch.sum)":
        torch = _torch()
        # compile_fn raises Dynamo's recompile limits around each call (compilations for other
        # n count as recompilations of the same frame) and restores them; no process-wide reset
        return torch_rows(compile_fn(lambda t: torch.sum(t, dim=-1)))
    if name == "numpy.sum":
        return lambda x: np.sum(x, axis=-1)
    if name == "numpy.dot":
        return lambda x: rowwise(lambda r: np.dot(r, np.ones(r.shape[-1], dtype=r.dtype)))(x).astype(x.dtype)
    if name == "numpy.matmul":
        # row by row: OpenBLAS's gemv sums a row differently depending on how many rows
        # share the call and where the row sits (measured), so a batch has no one tree
        return lambda x: rowwise(
            lambda r: np.matmul(r[None, :], np.ones((r.shape[-1], 1), dtype=r.dtype)))(x).astype(x.dtype)
    raise ValueError(f"fn={name!r} is not valid; valid choices: {list(FUNCTIONS)} or a callable")


def reveal_order(fn, n: int, fmt="fp32", *, check_rows: int = 10_000, seed: int = 0,
                 acc="fp32", torch: bool = True) -> Revealed:
    """Reveal the summation tree of ``fn`` on rows of ``n`` values of ``fmt``.

    Parameters
    ----------
    fn : str or callable
        A name of :data:`FUNCTIONS`, or a callable (module docstring).
    n : int
        Row length.
    fmt : {"fp32", "fp16", "bf16"}
        Input format.
    check_rows, seed, acc
        See :func:`numlab.kernels.orders.reveal.reveal`: the revealed order must
        reproduce ``fn`` bit for bit on ``check_rows`` random rows.
    torch : bool
        A callable ``fn`` receives torch tensors (True) or numpy arrays.

    Returns
    -------
    Revealed
        ``.order`` (a :class:`numlab.kernels.orders.tree.Tree`), ``.probes``,
        ``.calls`` and ``.check`` (``.check.ok``: bit for bit on every row).
    """
    if isinstance(fmt, str) and fmt not in INPUT_FORMATS:
        raise ValueError(f"fmt={fmt!r} is not valid; valid choices: {list(INPUT_FORMATS)}")
    if isinstance(fn, str):
        box = black_box(fn)
    elif callable(fn):
        box = torch_rows(fn) if torch else fn
    else:
        raise TypeError(f"fn must be a callable or one of {list(FUNCTIONS)}, got {type(fn).__name__}")
    return reveal(box, n, fmt, check_rows=check_rows, seed=seed, acc=acc)
