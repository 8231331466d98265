"""The base class of summation orders, and Higham's ``gamma``.

An :class:`Order` is a summation tree over the last axis: :meth:`Order.depth`
(the longest chain of rounded additions), :meth:`Order.bound` (the error bound
that depth gives) and two implementations of the sum with the same bits, the
reference loops (:meth:`Order._sum_reference`) and, for the orders that have
one, the transposed-tile fast path (:meth:`Order._fast`, driven by
:func:`numlab.kernels.orders.fast._sum_fast`).
"""

from __future__ import annotations

import math

import numpy as np

from .._common import Arith
from .fast import _fast_acc, _FastAcc, _sum_fast

__all__ = ["Order", "gamma"]


def gamma(k: int, u: float) -> float:
    """Higham's ``gamma_k = k u / (1 - k u)`` (inf when ``k u >= 1``)."""
    if k * u >= 1:
        return math.inf
    return k * u / (1 - k * u)


class Order:
    """Base class of summation orders.  Subclasses are frozen dataclasses."""

    _streams = False
    """Whether :meth:`_fast` continues a ``(sum, compensation)`` state across column
    tiles (Kahan): the fast path then streams tiles of up to 4096 rows."""

    def depth(self, n: int) -> int:  # pragma: no cover - abstract
        """Largest number of rounded additions any element passes through."""
        raise NotImplementedError

    def bound(self, n: int, u: float) -> float:
        """Relative-to-``sum|x_i|`` error bound ``gamma_depth(n)`` (Higham, ASNA section 4.2)."""
        return gamma(self.depth(n), u)

    def _sum(self, x: np.ndarray, ar: Arith) -> np.ndarray:
        """Sum the last axis of ``x`` (values already in ``ar``'s format and working dtype).

        Takes the chunked fast path (:func:`~numlab.kernels.orders.fast._sum_fast`)
        when the order and the accumulator have one, else :meth:`_sum_reference`;
        both give the same bits (pinned by tests/test_kernels_reduce.py).
        """
        fa = _fast_acc(ar) if self._has_fast() else None
        if fa is not None:
            return _sum_fast(x, self, fa, ar, prepared=True)
        return self._sum_reference(x, ar)

    def _sum_reference(self, x: np.ndarray, ar: Arith) -> np.ndarray:
        """The reference implementation: the order's loops written over the last axis."""
        if type(self)._sum is Order._sum:  # pragma: no cover - abstract
            raise NotImplementedError
        return self._sum(x, ar)  # orders that override _sum (cpu, tree)

    def _has_fast(self) -> bool:
        """Whether :meth:`_fast` (the transposed-layout implementation) exists."""
        return False

    def _fast(self, t: np.ndarray, fa: _FastAcc) -> np.ndarray:  # pragma: no cover - abstract
        """Reduce axis -2 of ``t`` (shape ``(..., m, W)``, ``W >= 2``, dtype ``fa.dtype``)."""
        raise NotImplementedError

    def _rows_compiled(self, X: np.ndarray, out: np.ndarray) -> bool:
        """Row sums of fp16/bf16 ``X`` (2-D) into float32 ``out`` by a compiled row
        kernel of :mod:`numlab.kernels._accel`; False (nothing written) when the
        order has none or the kernels are unavailable."""
        return False


def _neg_zero_like(shape, dtype):
    return np.full(shape, -0.0, dtype=dtype)


def _pad_last(x: np.ndarray, total: int) -> np.ndarray:
    n = x.shape[-1]
    if n == total:
        return x
    pad = _neg_zero_like(x.shape[:-1] + (total - n,), x.dtype)
    return np.concatenate([x, pad], axis=-1)
