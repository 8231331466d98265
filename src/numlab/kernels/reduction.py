"""Reductions with an explicit summation order and accumulator format.

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
    see :mod:`numlab.kernels.cpu_orders`.

All of numlab's own trees start from the data (``-0.0 + x == x`` exactly, so a fresh
accumulator set to -0.0 is the same as starting from the first element).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ..formats import BF16, FP16, NARROW_DTYPES, Format, get_format
from . import _accel
from ._common import Arith, as_values, check_choice, round_to, to_container

__all__ = [
    "Order",
    "Sequential",
    "Pairwise",
    "Lanes",
    "Blocked",
    "Kahan",
    "Shuffled",
    "parse_order",
    "reduce",
    "sum_along",
    "OPS",
    "VARIANCE_ALGORITHMS",
    "ORDER_NAMES",
    "gamma",
]
# private but used by tests: _reduce_reference (the reference path of reduce)

OPS = ("sum", "mean", "max", "min", "sumsq", "var")
VARIANCE_ALGORITHMS = ("two_pass", "welford", "textbook")
ORDER_NAMES = ("sequential", "pairwise", "lanes", "blocked", "kahan", "shuffled", "aten_cascade",
               "inductor_lanes", "tree")
LANE_COMBINES = ("tree", "sequential")
LANE_TAILS = ("masked", "epilogue")


def gamma(k: int, u: float) -> float:
    """Higham's ``gamma_k = k u / (1 - k u)`` (inf when ``k u >= 1``)."""
    if k * u >= 1:
        return math.inf
    return k * u / (1 - k * u)


class Order:
    """Base class of summation orders.  Subclasses are frozen dataclasses."""

    def depth(self, n: int) -> int:  # pragma: no cover - abstract
        """Largest number of rounded additions any element passes through."""
        raise NotImplementedError

    def bound(self, n: int, u: float) -> float:
        """Relative-to-``sum|x_i|`` error bound ``gamma_depth(n)`` (Higham eq. 4.3)."""
        return gamma(self.depth(n), u)

    def _sum(self, x: np.ndarray, ar: Arith) -> np.ndarray:
        """Sum the last axis of ``x`` (values already in ``ar``'s format and working dtype).

        Takes the chunked fast path (:func:`_sum_fast`) when the order and the
        accumulator have one, else :meth:`_sum_reference`; both give the same bits
        (pinned by tests/test_kernels_reduce.py).
        """
        fa = _fast_acc(ar) if self._has_fast() else None
        if fa is not None:
            return _sum_fast(x, self, fa, ar, prepared=True)
        return self._sum_reference(x, ar)

    def _sum_reference(self, x: np.ndarray, ar: Arith) -> np.ndarray:
        """The reference implementation: the order's loops written over the last axis."""
        if type(self)._sum is Order._sum:  # pragma: no cover - abstract
            raise NotImplementedError
        return self._sum(x, ar)  # orders that override _sum (cpu_orders, tree_order)

    def _has_fast(self) -> bool:
        """Whether :meth:`_fast` (the transposed-layout implementation) exists."""
        return False

    def _fast(self, t: np.ndarray, fa: "_FastAcc") -> np.ndarray:  # pragma: no cover - abstract
        """Reduce axis -2 of ``t`` (shape ``(..., m, W)``, ``W >= 2``, dtype ``fa.dtype``)."""
        raise NotImplementedError


def _neg_zero_like(shape, dtype):
    return np.full(shape, -0.0, dtype=dtype)


def _pad_last(x: np.ndarray, total: int) -> np.ndarray:
    n = x.shape[-1]
    if n == total:
        return x
    pad = _neg_zero_like(x.shape[:-1] + (total - n,), x.dtype)
    return np.concatenate([x, pad], axis=-1)


@dataclass(frozen=True)
class Sequential(Order):
    """Recursive summation left to right (see module docstring)."""

    def __str__(self) -> str:
        return "sequential"

    def depth(self, n: int) -> int:
        return max(n - 1, 0)

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


def _as_order(o, knob="order") -> Order:
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
        object.__setattr__(self, "inner", _as_order(self.inner, "inner"))
        object.__setattr__(self, "outer", _as_order(self.outer, "outer"))

    def __str__(self) -> str:
        return f"blocked({self.tile},{self.inner},{self.outer})"

    def depth(self, n: int) -> int:
        if n <= 0:
            return 0
        T = int(self.tile)
        nt = -(-n // T)
        return self.inner.depth(min(T, n)) + self.outer.depth(nt)

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
        object.__setattr__(self, "inner", _as_order(self.inner, "inner"))

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
        return tree_order.parse_tree(t)
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
    cpu = cpu_orders.parse_cpu_order(name, args)
    if cpu is not None:
        return cpu
    raise ValueError(f"order={s!r} is not valid; valid orders: {_ORDER_HELP}")



# --------------------------------------------------------------------------
# the fast path: row chunks transposed into cache-sized (n, W) tiles
# --------------------------------------------------------------------------
# Every fast order reduces axis -2 of a tile whose last axis holds W >= 2
# independent rows, so each numpy call is one vector operation over W rows (or
# over W rows times tiles/lanes).  A tile is ~_TILE_BYTES: it stays in L2.
_TILE_BYTES = 1 << 20
_RT_SCALE = 4
_FILL_ROWS = 64  # rows transposed per copy: more thrash the cache sets (power-of-two strides)
# inputs of at least this many elements use the compiled kernels when numba is
# installed (smaller ones would pay numba's import and dispatch for nothing)
_ACCEL_MIN_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class _FastAcc:
    """The accumulator arithmetic of the fast path, on tiles of ``dtype``.

    * fp32 / fp64, round to nearest even: IEEE binary32/binary64 arithmetic
      (``rt`` None).
    * fp16 / bf16: float32 tiles; each float32 sum or difference of two 16-bit
      values is rounded by an ``astype`` round trip through ``rt`` (numpy's
      float16, ml_dtypes' bfloat16: round to nearest even, subnormals and
      overflow to inf included).  With ``2 p + 2 <= 24`` that double rounding is
      innocuous (Figueroa 1995): each result is the correctly rounded 16-bit
      value, the same as :class:`Arith`'s.  Sequential reduces in ``rt`` itself:
      numpy/ml_dtypes add two 16-bit values as one float32 sum, rounded.
    """

    dtype: np.dtype
    rt: object = None
    accel: bool = False  # use numlab.kernels._accel's compiled kernels (same bits)

    def add(self, a, b, out=None):
        r = np.add(a, b, out=out)
        if self.rt is not None:
            np.copyto(r, r.astype(self.rt), casting="unsafe")
        return r

    def sub(self, a, b, out=None):
        r = np.subtract(a, b, out=out)
        if self.rt is not None:
            np.copyto(r, r.astype(self.rt), casting="unsafe")
        return r


def _fast_acc(ar) -> "_FastAcc | None":
    """The fast arithmetic for ``ar`` (an :class:`Arith`), or None (other formats/modes)."""
    if not isinstance(ar, Arith) or ar.rounding != "rne":
        return None
    if ar.native:
        return _FastAcc(ar.dtype)
    if (ar.fmt == FP16 or ar.fmt == BF16) and ar.dtype == np.float32:
        return _FastAcc(np.dtype(np.float32), ar.fmt.container)
    return None


def _butterfly_fast(v: np.ndarray, fa: _FastAcc) -> np.ndarray:
    """The lane butterfly of :func:`_combine_lanes` over axis -2 (lane i += lane i + h)."""
    while v.shape[-2] > 1:
        m = v.shape[-2]
        h = (m + 1) // 2
        nxt = v[..., :h, :].copy()  # lanes i >= m - h have no partner: carried
        fa.add(nxt[..., : m - h, :], v[..., h:m, :], out=nxt[..., : m - h, :])
        v = nxt
    return v[..., 0, :]


def _rows_view(x: np.ndarray) -> np.ndarray:
    """``x`` (..., n) as (rows, n): a view for 1-D/2-D input of any strides."""
    if x.ndim == 1:
        return x[None]
    if x.ndim == 2:
        return x
    return x.reshape(-1, x.shape[-1])


def _bf16_widen_T(dst: np.ndarray, blk: np.ndarray, buf=None) -> bool:
    """``dst[...] = blk.T`` widened from bfloat16 to float32, by integer ops; False if
    ``blk``'s layout does not allow it (then the caller takes the generic path).

    Four bf16 values are moved at a time as one uint64 (a cheap 8-byte transpose);
    the float32 bits of the e-th of them are bits ``16 e .. 16 e + 15`` of ``w`` moved
    to the top of a uint32 (one shift or mask on each 32-bit half of ``w``): bf16
    is the upper half of a binary32, so the widening is exact for every value
    (NaN payloads included).
    """
    r, n = blk.shape
    n4 = n - n % 4
    if not np.little_endian or n4 == 0 or blk.strides[1] != 2 or blk.strides[0] % 8 or blk.ctypes.data % 8:
        return False
    buf = buf or (lambda shape, dt, key: np.empty(shape, dt))
    w = buf((n4 // 4, r), np.uint64, "w")
    np.copyto(w, blk[:, :n4].view(np.uint16).view(np.uint64).T)
    d = dst[:n4].view(np.uint32).reshape(n4 // 4, 4, r)
    # little endian: the uint32 halves of w hold values (0, 1) and (2, 3); two
    # contiguous uint64 ops put each value at the top of its half, then four
    # strided copies interleave them
    mask = np.uint64(0xFFFF0000FFFF0000)
    a = np.left_shift(w, np.uint64(16), out=buf(w.shape, np.uint64, "a"))
    np.bitwise_and(a, mask, out=a)
    np.bitwise_and(w, mask, out=w)
    a32, b32 = a.view(np.uint32).reshape(n4 // 4, r, 2), w.view(np.uint32).reshape(n4 // 4, r, 2)
    np.copyto(d[:, 0, :], a32[..., 0])
    np.copyto(d[:, 1, :], b32[..., 0])
    np.copyto(d[:, 2, :], a32[..., 1])
    np.copyto(d[:, 3, :], b32[..., 1])
    if n4 < n:
        np.copyto(dst[n4:], blk[:, n4:].T, casting="unsafe")
    return True


def _sum_rows_compiled(X: np.ndarray, order: Order, out: np.ndarray) -> bool:
    """Row sums of fp16/bf16 ``X`` into float32 ``out`` by the compiled row kernels
    (numlab.kernels._accel) when the order has one; False otherwise."""
    T = _direct_tile(order, X.shape[-1])
    if T is not None:
        return _accel.rows_direct(X, T, out)
    return type(order) in (Pairwise, Lanes) and _accel.rows_order(X, order, out)


def _direct_tile(order: Order, n: int) -> int | None:
    """For :func:`numlab.kernels._accel.rows_direct`: the tile of an order it computes
    (Sequential: ``n``; ``Blocked(T, Sequential, Sequential)``: T), else None."""
    if type(order) is Sequential:
        return max(n, 1)
    if (type(order) is Blocked and type(order.inner) is Sequential
            and type(order.outer) is Sequential):
        return int(order.tile)
    return None


def _sum_fast(x: np.ndarray, order: Order, fa: _FastAcc, ar: Arith, *, prepared: bool,
              square: bool = False) -> np.ndarray:
    """Sum the last axis of ``x`` by ``order`` in row chunks; returns ``ar.dtype`` values.

    ``prepared``: ``x`` already holds values of ``ar``'s format; otherwise ``x`` is
    the caller's container and each chunk is rounded to the accumulator as
    :meth:`Arith.round` does (``square``: then squared, ``fl(x*x)``, for sumsq).
    Rows are taken ``W`` at a time and transposed into an ``(n, W)`` tile of
    ``fa.dtype``; Kahan (one numpy call per element) and Sequential instead
    stream column tiles of up to 4096 rows, carrying each row's state, so that
    each numpy call spans many rows.
    Extra memory: one tile plus the result, whatever the input size.

    With numba (a default dependency), from ``_ACCEL_MIN_ELEMENTS`` values on, the same
    operations run compiled (:mod:`numlab.kernels._accel`, :func:`_sum_rows_compiled`,
    tile fill, Kahan/Pairwise tile steps); ``NUMLAB_ACCEL=0`` switches it off.
    """
    lead, n = x.shape[:-1], x.shape[-1]
    if n == 0:
        return np.zeros(lead, ar.dtype)
    X = _rows_view(x)
    rows = X.shape[0]
    out = np.empty(rows, fa.dtype)
    isz = fa.dtype.itemsize
    # the input's values already lie in acc's format: a plain (exact or, for native
    # fp32/fp64, the same RNE) cast replaces Arith.round
    direct = prepared or (not square and (ar.native or X.dtype == np.dtype(ar.fmt.container)))

    if x.size >= _ACCEL_MIN_ELEMENTS and not fa.accel and _accel.kernels() is not None:
        fa = _FastAcc(fa.dtype, fa.rt, accel=True)
    if fa.accel and fa.rt is None and direct and fa.dtype == np.float32 and _sum_rows_compiled(X, order, out):
        return out.reshape(lead).astype(ar.dtype, copy=False)
    scratch: dict = {}

    def buf(shape, dt, key):
        """A reused work array: fresh 1 MB arrays per chunk would cost page faults."""
        k = (key, tuple(shape), np.dtype(dt))
        if k not in scratch:
            scratch[k] = np.empty(shape, dt)
        return scratch[k]

    def fill(dst, blk):  # dst (cols, r) <- blk (r, cols), rounded to the accumulator
        if not direct:
            blk = ar.round(blk)
            if square:
                blk = ar.mul(blk, blk)
        if fa.accel and _accel.widen_t(dst, blk):
            return
        if blk.dtype == BF16.container and dst.dtype == np.float32 and _bf16_widen_T(dst, blk, buf):
            return
        if blk.dtype == dst.dtype or blk.dtype.itemsize < dst.dtype.itemsize:
            # transpose the raw bits (an unsigned-int copy: fast for any float dtype,
            # including ml_dtypes' bfloat16), then one contiguous cast if it widens
            u = np.dtype(f"u{blk.dtype.itemsize}")
            if blk.dtype == dst.dtype:
                np.copyto(dst.view(u), blk.view(u).T)
                return
            nt = buf(dst.shape, u, "nt")
            np.copyto(nt, blk.view(u).T)
            np.copyto(dst, nt.view(blk.dtype), casting="unsafe")  # exact widening
        else:
            np.copyto(dst, blk.T, casting="unsafe")  # values already on acc's grid: exact

    # numpy's Kahan is one call per element step: streamed over up to 4096 rows at a
    # time to amortise them (the compiled Kahan needs no such width)
    stream = isinstance(order, Kahan) and not (fa.accel and fa.rt is None)
    # tile (+ its transposition temporary) <= the budget and <= the input's own size
    # (rounding accumulators make three numpy calls per add: wider tiles amortise them)
    scale = (4 if stream else 1) * (_RT_SCALE if fa.rt is not None else 1)
    budget = min(scale * _TILE_BYTES, rows * n * X.dtype.itemsize * isz // (isz + X.dtype.itemsize))
    if stream:  # one sum per row carried across column tiles of up to 4096 rows each
        W = max(2, min(rows, 4096))
        C = max(1, budget // (W * isz))
    else:
        W = max(2, min(rows, budget // (n * isz)))
        W = W if W <= _FILL_ROWS else W - W % _FILL_ROWS
        C = n
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, rows, W):
            r = min(W, rows - i)
            w = max(r, 2)  # W >= 2 keeps the reduced axis an outer one (Sequential._fast)
            if stream:
                state = (np.full(w, -0.0, fa.dtype), np.zeros(w, fa.dtype))
            for j in range(0, n, C):
                cw = min(C, n - j)
                tile = buf((cw, w), fa.dtype, "tile")
                if w > r:
                    tile[:, r:] = 0
                for k in range(0, r, _FILL_ROWS):
                    kr = min(r, k + _FILL_ROWS)
                    fill(tile[:, k:kr], X[i + k:i + kr, j:j + cw])
                if stream:
                    order._fast(tile, fa, state)
                else:
                    out[i:i + r] = order._fast(tile, fa)[:r]
            if stream:
                out[i:i + r] = state[0][:r]
    return out.reshape(lead).astype(ar.dtype, copy=False)

# --------------------------------------------------------------------------
# reduce
# --------------------------------------------------------------------------
def _raw_values(x, name: str = "x") -> np.ndarray:
    """``x`` as an ndarray of its own float container, not converted (as_values' checks)."""
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype not in NARROW_DTYPES:
        as_values(a, name)  # raises the TypeError naming the dtype
    return a


def _prepare(x, axis, acc: Format, rounding: str, *, convert: bool = True):
    """Validate ``x``/``axis``; move ``axis`` last; round to ``acc`` unless ``convert=False``."""
    a = _raw_values(x)
    if a.ndim == 0:
        raise ValueError("x must have at least one dimension to reduce")
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis={axis} is out of range for an array of {a.ndim} dimensions")
    ar = Arith(acc, rounding)
    a = np.moveaxis(a, axis, -1)
    return (ar.round(a) if convert else a), ar, axis % (a.ndim)


def sum_along(xw: np.ndarray, order, ar: Arith) -> np.ndarray:
    """Sum the last axis of ``xw`` (already in ``ar``'s working dtype and format) by ``order``."""
    return _as_order(order)._sum(xw, ar)


def reduce(
    x,
    op: str,
    axis: int = -1,
    *,
    order="pairwise",
    acc="fp32",
    out=None,
    keepdims: bool = False,
    variance: str = "two_pass",
    ddof: int = 0,
    acc_rounding: str = "rne",
    out_rounding: str = "rne",
):
    """Reduce ``x`` along ``axis`` with an explicit order and accumulator format.

    Parameters
    ----------
    x : array_like
        Float container (float64/float32/float16/bfloat16/fp8) of values.
        Values are first rounded to ``acc`` (exact when ``x`` is in a storage
        format that ``acc`` contains, e.g. fp16 data with an fp32 accumulator).
    op : {"sum", "mean", "max", "min", "sumsq", "var"}
        ``mean`` = fl(sum / n); ``sumsq`` sums fl(x*x); ``var`` by ``variance``.
    axis : int
        The axis reduced.
    order : Order or str
        Summation order (module docstring); default pairwise.
    acc : Format or str
        Accumulator format; every addition rounds to it.  fp16/bf16 show
        stagnation (summing ones in fp16 stops at 2048).
    out : Format or str, optional
        Format of the result (rounded once from ``acc``); default ``acc``.
    keepdims : bool
    variance : {"two_pass", "welford", "textbook"}
        ``two_pass``: m = mean(x) (order), fl(sum(fl(fl(x-m)^2)))/(n-ddof);
        ``welford``: sequential update (Welford 1962) ``d = x-m; m += d/k;
        M2 += d*(x-m)`` (the order is not used: it is inherently sequential);
        ``textbook``: (sum(x^2) - sum(x)^2/n)/(n-ddof), each sum by ``order``.
    ddof : int
        Delta degrees of freedom of ``var``.
    acc_rounding, out_rounding : str
        Rounding modes of the accumulator operations and of the final rounding.

    Returns
    -------
    ndarray
        In ``out.container`` (float16 for fp16, bfloat16 for bf16, float32,
        float64).  NaN and inf propagate as IEEE 754 says.
    """
    return _reduce(x, op, axis, order, acc, out, keepdims, variance, ddof, acc_rounding, out_rounding,
                   reference=False)


def _reduce_reference(x, op: str, axis: int = -1, *, order="pairwise", acc="fp32", out=None,
                      keepdims: bool = False, variance: str = "two_pass", ddof: int = 0,
                      acc_rounding: str = "rne", out_rounding: str = "rne"):
    """:func:`reduce` on the reference path only: the whole array rounded to ``acc``
    at once and every order's :meth:`Order._sum_reference` (its loops over the last
    axis).  Kept callable so tests can prove the fast path bit-identical to it."""
    return _reduce(x, op, axis, order, acc, out, keepdims, variance, ddof, acc_rounding, out_rounding,
                   reference=True)


def _reduce(x, op, axis, order, acc, out, keepdims, variance, ddof, acc_rounding, out_rounding, *,
            reference: bool):
    check_choice("op", op, OPS)
    check_choice("variance", variance, VARIANCE_ALGORITHMS)
    acc = get_format(acc, "acc")
    outf = acc if out is None else get_format(out, "out")
    order = _as_order(order)
    a, ar, ax = _prepare(x, axis, acc, acc_rounding, convert=False)
    n = a.shape[-1]
    fa = None if reference or not order._has_fast() else _fast_acc(ar)
    if fa is not None and op in ("sum", "sumsq", "mean"):
        # chunked: the input is rounded to acc one row chunk at a time (no full copy)
        r = _sum_fast(a, order, fa, ar, prepared=False, square=op == "sumsq")
        if op == "mean":
            r = ar.div(r, ar.round(np.float64(n)))
    else:
        xw = ar.round(a)
        osum = order._sum_reference if reference else order._sum
        if op in ("max", "min"):
            if n == 0:
                raise ValueError(f"op={op!r} of an empty axis has no identity")
            r = np.max(xw, axis=-1) if op == "max" else np.min(xw, axis=-1)
        elif op == "sum":
            r = osum(xw, ar)
        elif op == "sumsq":
            r = osum(ar.mul(xw, xw), ar)
        elif op == "mean":
            r = ar.div(osum(xw, ar), ar.round(np.float64(n)))
        else:
            r = _variance(xw, osum, ar, variance, ddof)
    r = np.asarray(r)
    if keepdims:
        r = np.expand_dims(r, ax)

    if outf == acc and out_rounding == "rne":
        res = r
    else:
        res = round_to(r, outf, out_rounding)
    res = to_container(res, outf)
    return res[()] if res.ndim == 0 else res


def _variance(xw, osum, ar, algo, ddof):
    """Variance by ``algo``; ``osum(values, ar)`` sums the last axis in the chosen order."""
    n = xw.shape[-1]
    if not isinstance(ddof, int | np.integer) or ddof < 0:
        raise ValueError(f"ddof={ddof!r} is not valid; it must be an int >= 0")
    nd = ar.round(np.float64(n - ddof))
    if algo == "two_pass":
        m = ar.div(osum(xw, ar), ar.round(np.float64(n)))
        d = ar.sub(xw, m[..., None])
        return ar.div(osum(ar.mul(d, d), ar), nd)
    if algo == "textbook":
        s = osum(xw, ar)
        q = osum(ar.mul(xw, xw), ar)
        return ar.div(ar.sub(q, ar.div(ar.mul(s, s), ar.round(np.float64(n)))), nd)
    # welford
    m = np.zeros(xw.shape[:-1], dtype=ar.dtype)
    m2 = np.zeros(xw.shape[:-1], dtype=ar.dtype)
    for k in range(n):
        xk = xw[..., k]
        d = ar.sub(xk, m)
        m = ar.add(m, ar.div(d, ar.round(np.float64(k + 1))))
        m2 = ar.add(m2, ar.mul(d, ar.sub(xk, m)))
    return ar.div(m2, nd)



# At the end, not the top: cpu_orders and tree_order subclass Order (defined above)
# and parse_order looks their parsers up at call time.
from . import cpu_orders, tree_order  # noqa: E402
