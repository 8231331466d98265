"""numlab.kernels.orders: summation orders, the trees every reduction follows.

An order is a frozen dataclass, a subclass of :class:`Order`, with a string
form that :func:`parse_order` reads:

* :mod:`.base` -- :class:`Order` (depth, error bound, the two sums with the
  same bits) and Higham's :func:`gamma`;
* :mod:`.classic` -- numlab's own orders (:class:`Sequential`,
  :class:`Pairwise`, :class:`Lanes`, :class:`Blocked`, :class:`Kahan`,
  :class:`Shuffled`) and the grammar of every order (:func:`parse_order`);
* :mod:`.cpu` -- PyTorch's CPU orders (:class:`AtenCascade`,
  :class:`InductorLanes`);
* :mod:`.tree` -- any explicit summation tree (:class:`Tree`);
* :mod:`.fast` -- the fast path of the orders (row chunks in cache-sized
  transposed tiles; the same bits as their reference loops);
* :mod:`.reveal` -- order revelation: recover the :class:`Tree` of a
  black-box sum by probing, and check an order against one.

Orders sit below the reduction kernels: :mod:`numlab.kernels.reduction`
(:func:`numlab.kernels.reduce`) and :mod:`numlab.kernels.tiled_matmul` import
them, never the other way (pyproject.toml's ``kernels`` layers contract).
"""

from __future__ import annotations

from .base import Order, gamma
from .classic import (
    ORDER_NAMES,
    Blocked,
    Kahan,
    Lanes,
    Pairwise,
    Sequential,
    Shuffled,
    as_order,
    parse_order,
    sum_along,
)
from .cpu import AtenCascade, InductorLanes
from .tree import Tree, parse_tree

__all__ = [
    "Order", "gamma", "parse_order", "as_order", "sum_along", "ORDER_NAMES",
    "Sequential", "Pairwise", "Lanes", "Blocked", "Kahan", "Shuffled",
    "AtenCascade", "InductorLanes", "Tree", "parse_tree",
]
