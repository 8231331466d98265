"""numlab's own summation orders, and the order grammar.

Every order below is a *summation tree*; each addition is rounded to the
accumulator format ``acc`` (see :mod:`numlab.kernels._common` for how).  The
reduced axis is moved last; the loops run over its elements, tiles, tree levels
or lanes, and every loop body is one vectorised operation over all the other
axes (and over all tiles/lanes at once).

Orders (frozen dataclasses; :func:`parse_order` reads their string forms)
-----------------------------------------------------------------------
``Sequential()``  ``"sequential"``
    ``s = x0; s = fl(s + x_i)`` for i = 1..n-1 (recursive summation).
    Error bound ``gamma_{n-1} sum|x_i|`` (Higham, ASNA 2nd ed., eq. 4.4).
``Pairwise()``  ``"pairwise"``
    Level by level, adjacent pairs ``(x0+x1), (x2+x3), ...``; an odd element at
    the end of a level is carried up unchanged.  Depth ``ceil(log2 n)``;
    bound ``gamma_{ceil(log2 n)} sum|x_i|`` (Higham eq. 4.6).
``Lanes(L, combine="tree", tail="masked")``  ``"lanes(8)"``, ``"lanes(8,sequential,epilogue)"``
    L interleaved accumulators (lane j sums x_j, x_{j+L}, ... sequentially), as a
    SIMD loop does; then the L lanes are combined by a butterfly (``"tree"``:
    lane i += lane i + h with h = ceil(m/2), halving m) or left to right
    (``"sequential"``).  Tails: ``"masked"`` (the last vector is loaded with a
    predicate; inactive lanes read -0.0, the exact additive identity, as SVE /
    AVX-512 zero-masked loads do) or ``"epilogue"`` (the ``n mod L`` leftover
    elements are added one by one to the combined sum, as a scalar clean-up
    loop does).  Depth: ``ceil(n/L) - 1 + depth(combine)`` (+ tail count).
``Blocked(tile, inner, outer)``  ``"blocked(512,sequential,pairwise)"``
    Split into tiles of ``tile`` elements (the last may be shorter); each tile
    reduced by ``inner``, the tile partials by ``outer``.  Depth
    ``depth_inner(tile) + depth_outer(ceil(n/tile))``.
``Kahan()``  ``"kahan"``
    Compensated summation (Kahan 1965): ``y = x - c; t = s + y; c = (t - s) - y;
    s = t`` from ``s = -0.0, c = 0``, all in ``acc``.  Bound
    ``(2u + O(n u^2)) sum|x_i|`` (Higham eq. 4.8); ``Kahan.bound`` uses
    ``2u + 4 n u^2``, an empirical constant for the second-order term.
``Shuffled(seed, tile=None, inner=Sequential())``  ``"shuffled(3)"``, ``"shuffled(3,256)"``
    An atomic-add-like order: the items (elements, or with ``tile`` the tile
    partials reduced by ``inner``) are added sequentially in an order given by
    a permutation drawn per row by ``numpy.random.default_rng(seed).permuted``
    of ``arange(items)`` broadcast over the rows.  Same seed -> same bits.

``AtenCascade(vec, widen)``, ``InductorLanes(lanes, n_vec, threads, ...)``
    PyTorch's CPU orders (``"aten_cascade(8)"``, ``"inductor_lanes(16,2,2)"``):
    see :mod:`numlab.kernels.orders.cpu`.
``Tree(...)``  ``"tree([[0..3],[4..7]])"``
    Any explicit summation tree: see :mod:`numlab.kernels.orders.tree`.

:func:`parse_order` (the grammar of every order) lives here because
``Blocked`` and ``Shuffled`` read their inner orders from strings.

All of numlab's own trees start from the data (``-0.0 + x == x`` exactly, so a fresh
accumulator set to -0.0 is the same as starting from the first element).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from .. import _accel
from .._common import Arith, check_choice
from .base import Order, _neg_zero_like, _pad_last
from .cpu import parse_cpu_order
from .fast import _butterfly_fast
from .tree import parse_tree

__all__ = ["Sequential", "Pairwise", "Lanes", "Blocked", "Kahan", "Shuffled", "parse_order",
           "sum_along", "as_order", "ORDER_NAMES"]

ORDER_NAMES = ("sequential", "pairwise", "lanes", "blocked", "kahan", "shuffled", "aten_cascade",
               "inductor_lanes", "tree")
LANE_COMBINES = ("tree", "sequential")
LANE_TAILS = ("masked", "epilogue")


@dataclass(frozen=True)
class Sequential(Order):
    """Recursive summation left to right (see module docstring)."""

    def __str__(self) -> str:
        return "sequential"

    def depth(self, n: int) -> int:
        return max(n - 1, 0)

    def _rows_compiled(self, X, out):
        # numlab.kernels._accel.rows_direct: Blocked(T, sequential, sequential), T >= n
        return _accel.rows_direct(X, max(X.shape[-1], 1), out)

    def _has_fast(self):
        return True

    def _fast(self, t, fa):
        # An outer-axis add.reduce (the reduced axis is not the innermost one and
        # W >= 2) runs out[j] = out[j] + t[i, j] for i = 0, 1, ...: recursive
        # summation per column, one rounding per add in t's dtype.  initial=-0.0
        # is the exact identity (-0.0 + x == x), as the reference starts from x0.
        if fa.rt is None:
            return np.add.reduce(t, axis=-2, initial=-0.0)
        if t.shape[-1] < 512 or t.shape[-2] < 2:
            # numpy float16 / ml_dtypes bfloat16 add: RN16(float(a) + float(b)) per step
            return np.add.reduce(t.astype(fa.rt), axis=-2, initial=-0.0).astype(t.dtype)
        s = t[..., 0, :].copy()  # wide rows (lanes): a loop of float32 adds + round trips is faster
        for i in range(1, t.shape[-2]):
            fa.add(s, t[..., i, :], out=s)
        return s

    def _sum_reference(self, x, ar):
        n = x.shape[-1]
        if n == 0:
            return np.zeros(x.shape[:-1], dtype=ar.dtype)
        if ar.native:
            # ufunc.accumulate is the recurrence r_i = r_{i-1} + x_i in x's dtype
            # (native IEEE arithmetic): exactly the sequential order.
            with np.errstate(over="ignore", invalid="ignore"):
                return np.add.accumulate(x, axis=-1)[..., -1].copy()
        s = x[..., 0].copy()
        for i in range(1, n):
            s = ar.add(s, x[..., i])
        return s


@dataclass(frozen=True)
class Pairwise(Order):
    """Adjacent-pairs tree, odd element carried (see module docstring)."""

    def __str__(self) -> str:
        return "pairwise"

    def depth(self, n: int) -> int:
        return math.ceil(math.log2(n)) if n > 1 else 0

    def _rows_compiled(self, X, out):
        return _accel.rows_order(X, self, out)

    def _has_fast(self):
        return True

    def _fast(self, t, fa):
        # In place on a copy, level by level: pair k of a level is written over its
        # first element, so the next level is every second row (a view): the odd
        # element of a level, the last row, is carried up unchanged by that view.
        if fa.accel and fa.rt is None:
            r = _accel.pairwise(t)  # the same loops compiled (numlab.kernels._accel)
            if r is not None:
                return r
        t = t.copy()
        while t.shape[-2] > 1:
            h = t.shape[-2] // 2
            first = t[..., 0:2 * h:2, :]
            fa.add(first, t[..., 1:2 * h:2, :], out=first)
            t = t[..., ::2, :]
        return t[..., 0, :]

    def _sum_reference(self, x, ar):
        n = x.shape[-1]
        if n == 0:
            return np.zeros(x.shape[:-1], dtype=ar.dtype)
        while x.shape[-1] > 1:
            m = x.shape[-1]
            if m % 2:
                x = _pad_last(x, m + 1)  # carry == pair with -0.0 (exact identity)
            x = ar.add(x[..., 0::2], x[..., 1::2])
        return x[..., 0].copy()


def _combine_lanes(v: np.ndarray, combine: str, ar: Arith) -> np.ndarray:
    if combine == "sequential":
        return Sequential()._sum_reference(v, ar)
    while v.shape[-1] > 1:  # butterfly: lane i += lane i + h
        m = v.shape[-1]
        h = (m + 1) // 2
        v = _pad_last(v, 2 * h)
        v = ar.add(v[..., :h], v[..., h:])
    return v[..., 0].copy()


@dataclass(frozen=True)
class Lanes(Order):
    """``L`` interleaved accumulators, then a combine (see module docstring)."""

    L: int
    combine: str = "tree"
    tail: str = "masked"

    def __post_init__(self):
        if not isinstance(self.L, int | np.integer) or isinstance(self.L, bool) or self.L < 1:
            raise ValueError(f"lanes L={self.L!r} is not valid; it must be an int >= 1")
        check_choice("combine", self.combine, LANE_COMBINES)
        check_choice("tail", self.tail, LANE_TAILS)

    def __str__(self) -> str:
        return f"lanes({self.L},{self.combine},{self.tail})"

    def _comb_depth(self, L: int) -> int:
        if L <= 1:
            return 0
        return math.ceil(math.log2(L)) if self.combine == "tree" else L - 1

    def depth(self, n: int) -> int:
        L = self.L
        if self.tail == "masked":
            m = -(-n // L)
            return max(m - 1, 0) + self._comb_depth(min(L, n))
        m = n // L
        t = n - m * L
        if m == 0:
            return max(n - 1, 0)
        return (m - 1) + self._comb_depth(L) + t

    def _rows_compiled(self, X, out):
        return _accel.rows_order(X, self, out)

    def _has_fast(self):
        return True

    def _fast(self, t, fa):
        n, W = t.shape[-2], t.shape[-1]
        lead = t.shape[:-2]
        L = int(self.L)
        if self.tail == "masked":
            m = -(-n // L)
            if m * L != n:  # inactive lanes of the last vector read -0.0
                main = np.full(lead + (m * L, W), -0.0, t.dtype)
                main[..., :n, :] = t
            else:
                main = t
            tail = t[..., :0, :]
        else:
            m = n // L
            main, tail = t[..., : m * L, :], t[..., m * L:, :]
        if m:
            # lane j of row w sums main[i*L + j, w] over i: an outer reduce of (m, L*W)
            lanes = Sequential()._fast(main.reshape(lead + (m, L * W)), fa).reshape(lead + (L, W))
            if self.combine == "sequential":
                s = Sequential()._fast(lanes, fa)
            else:
                s = _butterfly_fast(lanes, fa)
        else:
            s = np.full(lead + (W,), -0.0, t.dtype)
        for i in range(tail.shape[-2]):  # epilogue: one add per leftover element
            s = fa.add(s, tail[..., i, :])
        return s

    def _sum_reference(self, x, ar):
        n = x.shape[-1]
        L = int(self.L)
        if n == 0:
            return np.zeros(x.shape[:-1], dtype=ar.dtype)
        if self.tail == "masked":
            m = -(-n // L)
            main = _pad_last(x, m * L)
            tail = x[..., :0]
        else:
            m = n // L
            main = x[..., : m * L]
            tail = x[..., m * L:]
        if m:
            v = main.reshape(x.shape[:-1] + (m, L))
            # lanes: sequential over the m vectors (axis -2), vectorised over lanes
            v = np.moveaxis(v, -2, -1)  # (..., L, m)
            lanes = Sequential()._sum_reference(v, ar)  # (..., L)
            s = _combine_lanes(lanes, self.combine, ar)
        else:
            s = _neg_zero_like(x.shape[:-1], ar.dtype)
        for i in range(tail.shape[-1]):
            s = ar.add(s, tail[..., i])
        return s


def as_order(o, knob="order") -> Order:
    if isinstance(o, Order):
        return o
    if isinstance(o, str):
        return parse_order(o)
    raise TypeError(f"{knob} must be an Order or an order string, got {type(o).__name__}")


@dataclass(frozen=True)
class Blocked(Order):
    """Tiles reduced by ``inner``, tile partials by ``outer``."""

    tile: int
    inner: Order = field(default_factory=Sequential)
    outer: Order = field(default_factory=Sequential)

    def __post_init__(self):
        if not isinstance(self.tile, int | np.integer) or isinstance(self.tile, bool) or self.tile <= 0:
            raise ValueError(f"tile={self.tile!r} is not valid; it must be an int > 0")
        object.__setattr__(self, "inner", as_order(self.inner, "inner"))
        object.__setattr__(self, "outer", as_order(self.outer, "outer"))

    def __str__(self) -> str:
        return f"blocked({self.tile},{self.inner},{self.outer})"

    def depth(self, n: int) -> int:
        if n <= 0:
            return 0
        T = int(self.tile)
        nt = -(-n // T)
        return self.inner.depth(min(T, n)) + self.outer.depth(nt)

    def _rows_compiled(self, X, out):
        # numlab.kernels._accel.rows_direct computes Blocked(T, sequential, sequential) only
        if type(self.inner) is Sequential and type(self.outer) is Sequential:
            return _accel.rows_direct(X, int(self.tile), out)
        return False

    def _has_fast(self):
        return self.inner._has_fast() and self.outer._has_fast()

    def _fast(self, t, fa):
        n, W = t.shape[-2], t.shape[-1]
        lead = t.shape[:-2]
        T = int(self.tile)
        nf = n // T
        parts = np.empty(lead + (-(-n // T), W), t.dtype)
        if nf:
            parts[..., :nf, :] = self.inner._fast(t[..., : nf * T, :].reshape(lead + (nf, T, W)), fa)
        if n > nf * T:
            parts[..., nf, :] = self.inner._fast(t[..., nf * T:, :], fa)
        return self.outer._fast(parts, fa)

    def _sum_reference(self, x, ar):
        n = x.shape[-1]
        T = int(self.tile)
        if n == 0:
            return np.zeros(x.shape[:-1], dtype=ar.dtype)
        parts = _tile_partials(x, T, self.inner, ar)
        return self.outer._sum_reference(parts, ar)


def _tile_partials(x, T, inner, ar):
    """Partials of consecutive tiles of T elements (last one shorter), shape (..., ntiles)."""
    n = x.shape[-1]
    nf = n // T
    parts = []
    if nf:
        full = x[..., : nf * T].reshape(x.shape[:-1] + (nf, T))
        parts.append(inner._sum_reference(full, ar))
    if n > nf * T:
        parts.append(inner._sum_reference(x[..., nf * T:], ar)[..., None])
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


@dataclass(frozen=True)
class Kahan(Order):
    """Kahan compensated summation (see module docstring)."""

    _streams = True

    def __str__(self) -> str:
        return "kahan"

    def depth(self, n: int) -> int:
        return max(n - 1, 0)

    def bound(self, n: int, u: float) -> float:
        """``2u + 4 n u^2``.

        Knuth (TAOCP vol. 2, 4.2.2) and Higham (2002, eq. 4.8) prove
        ``|E| <= (2u + O(n u^2)) sum|x_i|``; the explicit constant 4 in the
        second-order term is ours, not a published constant, and is only
        checked empirically (hypothesis tests, n u < 0.1).
        """
        if n * u >= 0.1:
            return math.inf
        return 2 * u + 4 * n * u * u

    def _has_fast(self):
        return True

    def _fast(self, t, fa, state=None):
        """One compensated step per element of axis -2 on whole (..., W) vectors.

        ``state=(s, c)`` continues a sum (the streaming driver feeds column tiles);
        then the state is updated in place and ``s`` returned.
        """
        shape = t.shape[:-2] + t.shape[-1:]
        if state is None:
            s, c = np.full(shape, -0.0, t.dtype), np.zeros(shape, t.dtype)
        else:
            s, c = state
        if fa.accel and fa.rt is None and _accel.kahan(t, s, c):
            return s  # the same steps compiled (numlab.kernels._accel)
        y, nt = np.empty(shape, t.dtype), np.empty(shape, t.dtype)
        s0 = s
        for i in range(t.shape[-2]):
            fa.sub(t[..., i, :], c, out=y)
            fa.add(s, y, out=nt)
            fa.sub(nt, s, out=c)
            fa.sub(c, y, out=c)
            s, nt = nt, s
        if s is not s0:
            s0[...] = s
        return s0

    def _sum_reference(self, x, ar):
        n = x.shape[-1]
        s = _neg_zero_like(x.shape[:-1], ar.dtype)
        c = np.zeros(x.shape[:-1], dtype=ar.dtype)
        for i in range(n):
            y = ar.sub(x[..., i], c)
            t = ar.add(s, y)
            c = ar.sub(ar.sub(t, s), y)
            s = t
        if n == 0:
            s = np.zeros(x.shape[:-1], dtype=ar.dtype)
        return s


@dataclass(frozen=True)
class Shuffled(Order):
    """Atomic-add-like order with a schedule seed (see module docstring)."""

    seed: int
    tile: int | None = None
    inner: Order = field(default_factory=Sequential)

    def __post_init__(self):
        if not isinstance(self.seed, int | np.integer) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} is not valid; it must be an int >= 0")
        if self.tile is not None and (
            not isinstance(self.tile, int | np.integer) or isinstance(self.tile, bool) or self.tile <= 0
        ):
            raise ValueError(f"tile={self.tile!r} is not valid; it must be None or an int > 0")
        object.__setattr__(self, "inner", as_order(self.inner, "inner"))

    def __str__(self) -> str:
        if self.tile is None:
            return f"shuffled({self.seed})"
        return f"shuffled({self.seed},{self.tile},{self.inner})"

    def depth(self, n: int) -> int:
        if self.tile is None:
            return max(n - 1, 0)
        T = int(self.tile)
        return self.inner.depth(min(T, n)) + max(-(-n // T) - 1, 0)

    def permutation(self, shape: tuple) -> np.ndarray:
        """The item order: ``default_rng(seed).permuted(broadcast(arange(k), shape), axis=-1)``."""
        k = shape[-1]
        base = np.broadcast_to(np.arange(k), shape).copy()
        return np.random.default_rng(int(self.seed)).permuted(base, axis=-1)

    def _sum_reference(self, x, ar):
        items = x if self.tile is None else _tile_partials(x, int(self.tile), self.inner, ar)
        if items.shape[-1] == 0:
            return np.zeros(items.shape[:-1], dtype=ar.dtype)
        perm = self.permutation(items.shape)
        return Sequential()._sum_reference(np.take_along_axis(items, perm, axis=-1), ar)


# --------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------
_ORDER_HELP = (
    "'sequential', 'pairwise', 'kahan', 'lanes(L[,tree|sequential[,masked|epilogue]])', "
    "'blocked(tile[,inner[,outer]])', 'shuffled(seed[,tile[,inner]])', "
    "'aten_cascade(vec[,widen])', 'tree([...])', "
    "'inductor_lanes(lanes[,n_vec[,threads[,split[,cascade[,unroll[,min_chunk]]]]]])'"
)


def _split_args(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _int_arg(knob, s):
    try:
        return int(s)
    except ValueError:
        raise ValueError(f"{knob}={s!r} is not valid; it must be an integer") from None


def parse_order(s: "str | Order") -> Order:
    """Parse an order string such as ``"blocked(512,lanes(8),pairwise)"``.

    Raises
    ------
    ValueError
        For an unknown order name (listing the valid forms) or a bad argument.
    """
    if isinstance(s, Order):
        return s
    if not isinstance(s, str):
        raise TypeError(f"order must be an Order or a string, got {type(s).__name__}")
    t = s.strip().lower().replace(" ", "")
    if t.startswith("tree("):  # its own grammar: brackets hold commas
        return parse_tree(t)
    m = re.fullmatch(r"([a-z_]+)(?:\((.*)\))?", t)
    if not m:
        raise ValueError(f"order={s!r} is not valid; valid orders: {_ORDER_HELP}")
    name, args = m.group(1), _split_args(m.group(2) or "")
    if name in ("sequential", "recursive") and not args:
        return Sequential()
    if name in ("pairwise", "tree") and not args:
        return Pairwise()
    if name == "kahan" and not args:
        return Kahan()
    if name == "lanes" and 1 <= len(args) <= 3:
        return Lanes(_int_arg("lanes L", args[0]), *args[1:])
    if name == "blocked" and 1 <= len(args) <= 3:
        return Blocked(_int_arg("tile", args[0]), *[parse_order(a) for a in args[1:]])
    if name == "shuffled" and 1 <= len(args) <= 3:
        tile = _int_arg("tile", args[1]) if len(args) > 1 else None
        inner = parse_order(args[2]) if len(args) > 2 else Sequential()
        return Shuffled(_int_arg("seed", args[0]), tile, inner)
    cpu = parse_cpu_order(name, args)
    if cpu is not None:
        return cpu
    raise ValueError(f"order={s!r} is not valid; valid orders: {_ORDER_HELP}")


def sum_along(xw: np.ndarray, order, ar: Arith) -> np.ndarray:
    """Sum the last axis of ``xw`` (already in ``ar``'s working dtype and format) by ``order``."""
    return as_order(order)._sum(xw, ar)
