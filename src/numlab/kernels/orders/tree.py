"""An explicit summation tree as a :class:`numlab.kernels.orders.Order`.

``Tree(n, nodes, zero=False)`` is any summation tree over ``n`` leaves (the
elements ``x_0 .. x_{n-1}`` of a row), such as the tree that
:func:`numlab.kernels.orders.reveal.reveal` recovers from a black-box reduction.

* Leaves are the ids ``0 .. n-1``; internal node ``k`` has id ``n + k`` and
  its children in ``nodes[k]`` (ids of leaves or of earlier nodes); the last
  node is the root.  Every leaf is used exactly once.
* A node with two children is one rounded addition ``fl(a + b)`` in the
  accumulator format (addition is commutative, so the children's order does
  not matter).  A node with ``k >= 3`` children is a *k-term fused adder*:
  the exact sum of its children rounded once to the accumulator format (as a
  multi-term adder of a matrix unit does; computed here by an fp64 expansion
  and round-to-odd, :func:`numlab.primitives._rto_of_sum`, so it needs an
  accumulator of precision ``p <= 51``).
* ``wide``: ids of binary nodes computed in fp64 (a C loop with a ``double``
  accumulator, as OpenBLAS's ``sdot`` scalar loop on this machine): their sum
  is kept in fp64 until a non-wide node or the end rounds it to the
  accumulator format.  Written ``d[...]`` in the string form.
* ``zero=True``: the result is finally added to ``+0.0`` (a C accumulator that
  starts at ``0.0``, as ATen and Inductor do): only a row of ``-0.0`` sees the
  difference (it sums to ``+0.0``).

The nodes are kept in a canonical form (children sorted by their smallest
leaf, nodes numbered in post-order), so two equal trees compare equal
whatever order they were built in.

String form (:func:`parse_tree`; ``parse_order`` reads ``"tree(...)"``)::

    tree    := "tree(" ["+0:"] expr ")"
    expr    := "[" item ("," item)* "]"     left-to-right chain ((a+b)+c)+...
             | "d[" item ("," item)* "]"    the same chain computed in fp64 ("wide" nodes)
             | "{" item ("," item)+ "}"     fused adder (exact sum, one rounding)
    item    := expr | INT | INT ".." INT [":" INT]   (a leaf run start..stop:step,
                                                      stop included, chained)

e.g. ``tree([0..7])`` is sequential over 8 elements, ``tree([[0,1],[2,3]])``
pairwise over 4 and ``tree([0..12:4,1..13:4,...])`` would be lanes.

Execution (:meth:`Tree._sum`) is vectorised over the rows: one loop over the
tree's levels (nodes of equal height are computed together, grouped by their
number of children), rows processed in chunks to bound memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...primitives import _rto_of_sum, signed_exact_zero  # fp64 round-to-odd of an exact sum
from .._common import Arith, round_to
from .base import Order

__all__ = ["Tree", "parse_tree", "TREE_GRAMMAR"]

TREE_GRAMMAR = ('tree([chain]) with chains "[a,b,...]" (fp64 chains "d[a,b,...]"), fused adders "{a,b,...}", '
                'leaf runs "i..j" or "i..j:step", optional "+0:" prefix; e.g. "tree([[0..3],[4..7]])"')
_CHUNK_VALUES = 1 << 23  # values held at once while executing (rows per chunk = this / nodes)


def _canonical(n: int, nodes) -> tuple[tuple[tuple[int, ...], ...], dict]:
    """Validate ``nodes`` and return them in canonical form, plus the renumbering."""
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n={n!r} is not valid; it must be an int >= 1")
    n = int(n)
    m = len(nodes)
    if n == 1 and m == 0:
        return (), {0: 0}
    if m == 0:
        raise ValueError(f"a tree over n={n} leaves needs nodes; got none")
    used = np.zeros(n + m, dtype=bool)
    minleaf = list(range(n)) + [0] * m
    kids: list[tuple[int, ...]] = []
    for k, ch in enumerate(nodes):
        ch = tuple(int(c) for c in ch)
        if len(ch) < 2:
            raise ValueError(f"node {n + k} has children {ch}; a node needs at least 2")
        for c in ch:
            if not 0 <= c < n + k:
                raise ValueError(f"node {n + k} has child {c}; children must be leaves 0..{n - 1} "
                                 f"or earlier nodes {n}..{n + k - 1}")
            if used[c]:
                raise ValueError(f"id {c} is used twice (node {n + k}); every id is used once")
            used[c] = True
        kids.append(ch)
        minleaf[n + k] = min(minleaf[c] for c in ch)
    if not used[: n + m - 1].all():
        unused = np.flatnonzero(~used[: n + m - 1])[:5].tolist()
        raise ValueError(f"ids {unused} are never used; every leaf and node except the root "
                         "must be a child once")
    # post-order renumbering, children sorted by min leaf (iterative: chains can be deep)
    new_id = {i: i for i in range(n)}
    out: list[tuple[int, ...]] = []
    stack = [(n + m - 1, False)]
    while stack:
        v, done = stack.pop()
        if v < n:
            continue
        ch = sorted(kids[v - n], key=lambda c: minleaf[c])
        if done:
            new_id[v] = n + len(out)
            out.append(tuple(new_id[c] for c in ch))
            continue
        stack.append((v, True))
        stack.extend((c, False) for c in reversed(ch))
    return tuple(out), new_id


@dataclass(frozen=True, eq=True)
class Tree(Order):
    """An explicit summation tree (module docstring).

    Parameters
    ----------
    n : int
        Number of leaves (the row length this tree sums).
    nodes : sequence of sequences of int
        ``nodes[k]`` = children of internal node ``n + k``; the last is the root.
    zero : bool
        Add the result to ``+0.0`` at the end (default False).
    wide : sequence of int
        Ids of binary nodes computed in fp64 (their children converted exactly,
        the result kept in fp64 until a non-wide node or the end rounds it to
        the accumulator format), as a C loop with a ``double`` accumulator does.
    """

    n: int
    nodes: tuple
    zero: bool = False
    wide: tuple = ()

    def __post_init__(self):
        nodes, new_id = _canonical(self.n, self.nodes)
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "nodes", nodes)
        wide = tuple(sorted({int(w) for w in self.wide}))
        for w in wide:
            if w not in new_id or w < self.n:
                raise ValueError(f"wide={list(self.wide)!r}: {w} is not an internal node id "
                                 f"({self.n}..{self.n + len(nodes) - 1})")
        wide = tuple(sorted(new_id[w] for w in wide))
        if any(len(nodes[w - self.n]) > 2 for w in wide):
            raise ValueError("wide nodes must be binary additions (a fused adder rounds once)")
        object.__setattr__(self, "wide", wide)
        if not isinstance(self.zero, bool | np.bool_):
            raise TypeError(f"zero must be a bool, got {self.zero!r}")
        object.__setattr__(self, "zero", bool(self.zero))

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_order(cls, order, n: int) -> Tree:
        """The tree of any numlab order at length ``n``, recorded by running the order
        on symbolic node ids (each ``add`` makes a node).  Orders that add ``+0.0``
        accumulators (ATen/Inductor) record those additions as identities."""
        n = int(n)
        rec = _Recorder(n)
        root = rec._sum_root(order, n)
        zrow = np.full((1, n), -0.0, dtype=np.float32)
        z = order._sum(zrow, Arith("fp32"))  # does the order end on a +0.0 accumulator?
        zero = not bool(np.signbit(z).item())
        return rec.tree(n, root, zero)

    # ------------------------------------------------------------------ queries
    def heights(self) -> np.ndarray:
        """Height of every id (leaves 0; a node 1 + its highest child)."""
        h = np.zeros(self.n + len(self.nodes), dtype=np.int64)
        for k, ch in enumerate(self.nodes):
            h[self.n + k] = 1 + max(h[c] for c in ch)
        return h

    def depth(self, n: int) -> int:
        if int(n) != self.n:
            raise ValueError(f"n={n} does not match this tree's n={self.n}")
        return int(self.heights()[-1]) if self.nodes else 0

    def arities(self) -> dict[int, int]:
        """How many nodes have each number of children."""
        out: dict[int, int] = {}
        for ch in self.nodes:
            out[len(ch)] = out.get(len(ch), 0) + 1
        return out

    def leaves_of(self, i: int) -> list[int]:
        """The leaves under id ``i`` in left-to-right order."""
        out, stack = [], [i]
        while stack:
            v = stack.pop()
            if v < self.n:
                out.append(v)
            else:
                stack.extend(reversed(self.nodes[v - self.n]))
        return out

    # ------------------------------------------------------------------ strings
    def expr(self, i: int | None = None) -> str:
        """The tree (or the subtree at id ``i``) in the compact grammar."""
        root = self.n + len(self.nodes) - 1 if i is None else i
        memo: dict[int, str] = {}
        order = []
        stack = [root]
        while stack:  # collect the subtree's nodes, children first
            v = stack.pop()
            if v >= self.n:
                order.append(v)
                stack.extend(self.nodes[v - self.n])
        for v in reversed(order):
            memo[v] = self._node_str(v, memo)
        return memo.get(root, str(root))

    def _chain_items(self, v: int) -> list[int]:
        """A left chain ((a+b)+c)+d flattened to [a, b, c, d] (binary nodes only)."""
        items = []
        first = True
        wide = set(self.wide)
        kind = v in wide
        while v >= self.n and len(self.nodes[v - self.n]) == 2 and (v in wide) == kind:
            a, b = self.nodes[v - self.n]
            # the chain continues into the child holding the smaller leaves while the
            # other child is a single leaf (the root node always starts a chain)
            if not first and b >= self.n:
                break
            items.append(b)
            v = a
            first = False
            if b >= self.n:
                break
        items.append(v)
        return items[::-1]

    def _node_str(self, v: int, memo: dict) -> str:
        ch = self.nodes[v - self.n]
        if len(ch) > 2:
            return "{" + ",".join(_runs([c if c < self.n else memo[c] for c in ch])) + "}"
        items = self._chain_items(v)
        parts = []
        for it in items:
            if it < self.n:
                parts.append(it)
            else:
                parts.append(memo[it] if it in memo else self._node_str(it, memo))
        return ("d[" if v in set(self.wide) else "[") + ",".join(_runs(parts)) + "]"

    def __str__(self) -> str:
        body = self.expr() if self.nodes else "[0]"
        return f"tree({'+0:' if self.zero else ''}{body})"

    def __repr__(self) -> str:
        """The fields for a small tree; for one of more than 16 internal nodes
        their number and :meth:`summary` (the tuple of nodes grows with ``n``)."""
        if len(self.nodes) <= 16:
            return f"Tree(n={self.n}, nodes={self.nodes!r}, zero={self.zero}, wide={self.wide!r})"
        return (f"Tree(n={self.n}, {len(self.nodes)} internal nodes, zero={self.zero}, {len(self.wide)} wide: "
                f"{self.summary(100)})")

    def summary(self, width: int = 120) -> str:
        """``str(self)`` shortened to ``width`` characters (middle elided)."""
        s = str(self)
        if len(s) <= width:
            return s
        half = (width - 5) // 2
        return s[:half] + " ... " + s[-half:]

    # ------------------------------------------------------------------ execution
    def _levels(self):
        """Per height: list of (ids, children matrix) grouped by arity."""
        h = self.heights()
        n = self.n
        levels: dict[int, dict[int, list]] = {}
        for k, ch in enumerate(self.nodes):
            levels.setdefault(int(h[n + k]), {}).setdefault(len(ch), []).append((n + k, ch))
        out = []
        for lev in sorted(levels):
            groups = []
            for _arity, items in sorted(levels[lev].items()):
                ids = np.array([i for i, _ in items], dtype=np.int64)
                kids = np.array([c for _, c in items], dtype=np.int64)
                groups.append((ids, kids))
            out.append(groups)
        return out

    def _sum(self, x, ar):
        n = x.shape[-1]
        if n != self.n:
            raise ValueError(f"order {self.summary(60)} sums rows of n={self.n}; got rows of {n}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, n)
        R = x2.shape[0]
        total = n + len(self.nodes)
        fused = any(len(ch) > 2 for ch in self.nodes)
        if fused and getattr(ar, "fmt", None) is not None and ar.fmt.p > 51:
            raise ValueError(f"acc={ar.fmt.name!r}: fused adders (nodes of >= 3 children) need an "
                             "accumulator of precision p <= 51")
        levels = self._levels()
        wide = np.zeros(total, dtype=bool)
        wide[list(self.wide)] = True
        vdt = np.float64 if self.wide else ar.dtype
        res = np.empty(R, dtype=vdt)
        step = max(1, _CHUNK_VALUES // total)
        for r0 in range(0, R, step):  # loop over row chunks; inside, over tree levels
            r1 = min(R, r0 + step)
            vals = np.empty((total, r1 - r0), dtype=vdt)
            vals[:n] = x2[r0:r1].T
            for groups in levels:
                for ids, kids in groups:
                    if kids.shape[1] > 2:
                        vals[ids] = _fused(_narrow(vals[kids], kids, wide, ar), ar)
                        continue
                    w = wide[ids]
                    if w.any():  # fp64 additions of the (exact) child values
                        vals[ids[w]] = vals[kids[w, 0]] + vals[kids[w, 1]]
                    if not w.all():
                        k = kids[~w]
                        vals[ids[~w]] = ar.add(_narrow(vals[k[:, 0]], k[:, 0], wide, ar),
                                               _narrow(vals[k[:, 1]], k[:, 1], wide, ar))
            res[r0:r1] = vals[total - 1]
        if self.wide:
            res = ar.round(res) if wide[total - 1] else res.astype(ar.dtype)
        if self.zero:
            res = ar.add(np.zeros_like(res), res)
        return res.reshape(lead)


def _narrow(v: np.ndarray, ids: np.ndarray, wide: np.ndarray, ar) -> np.ndarray:
    """Values entering a non-wide node: wide children rounded to the accumulator format."""
    if not wide[ids].any():
        return v.astype(ar.dtype, copy=False)
    return np.where(wide[ids], ar.round(v), v).astype(ar.dtype)


def _fused(terms: np.ndarray, ar) -> np.ndarray:
    """Exact sum over axis 1 of ``terms`` (m, k, R) rounded once to ``ar``'s format."""
    t64 = terms.astype(np.float64)
    k = t64.shape[1]
    cols = [t64[:, j] for j in range(k)]
    finite = np.isfinite(t64).all(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = t64.sum(axis=1)  # inf/nan propagation for non-finite rows
    safe = [np.where(finite, c, 0.0) for c in cols]
    with np.errstate(invalid="ignore"):  # nextafter(x, 0 * inf) on exact sums, discarded
        rto = _rto_of_sum(safe)
    r = np.where(finite, signed_exact_zero(rto, safe, getattr(ar, "mode", "rne")), naive)
    if getattr(ar, "native", False) and ar.dtype == np.float64:
        return r
    return round_to(r, ar.fmt, ar.rounding).astype(ar.dtype)


def _runs(items: list) -> list[str]:
    """Compress runs of leaf ints in arithmetic progression (length >= 3) to 'a..b:s'."""
    out: list[str] = []
    i = 0
    while i < len(items):
        a = items[i]
        if isinstance(a, str):
            out.append(a)
            i += 1
            continue
        j = i + 1
        if j < len(items) and not isinstance(items[j], str):
            d = items[j] - a
            while j + 1 < len(items) and not isinstance(items[j + 1], str) and items[j + 1] - items[j] == d:
                j += 1
            if j - i >= 2 and d > 0:
                out.append(f"{a}..{items[j]}" + (f":{d}" if d != 1 else ""))
                i = j + 1
                continue
        out.append(str(a))
        i += 1
    return out


class _Recorder:
    """An ``Arith`` stand-in whose values are node ids + 1 (float64): ``add`` creates
    nodes.  A value <= 0 (a fresh ``0.0`` accumulator of the ATen/Inductor orders,
    the ``-0.0`` padding of numlab's) is the exact identity: adding it creates no
    node."""

    dtype = np.dtype(np.float64)
    zero = 0.0
    native = False

    def __init__(self, n: int):
        self.n = n
        self.nodes: list[tuple[int, int]] = []

    def add(self, a, b):
        a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
        out = np.where(a <= 0, b, a).copy()
        both = ((a > 0) & (b > 0)).ravel()
        idx = np.flatnonzero(both)
        if idx.size:
            start = self.n + len(self.nodes)
            ia = (a.ravel()[idx] - 1).astype(np.int64).tolist()
            ib = (b.ravel()[idx] - 1).astype(np.int64).tolist()
            self.nodes.extend(zip(ia, ib, strict=True))
            flat = out.reshape(-1)
            flat[idx] = np.arange(start, start + idx.size) + 1.0
            out = flat.reshape(a.shape)
        return out

    def round(self, x):
        return np.asarray(x, dtype=np.float64)

    def _sum_root(self, order, n: int) -> int:
        r = order._sum(np.arange(1, n + 1, dtype=np.float64)[None, :], self)
        return int(np.asarray(r).reshape(-1)[0]) - 1

    def tree(self, n: int, root: int, zero: bool) -> Tree:
        """The tree below ``root`` (a butterfly also makes nodes the result never uses)."""
        if root < n:
            return Tree(1, (), zero) if n == 1 else Tree(n, (), zero)
        keep, stack = [], [root]
        while stack:
            v = stack.pop()
            if v >= n:
                keep.append(v)
                stack.extend(self.nodes[v - n])
        keep.sort()
        new = {v: n + k for k, v in enumerate(keep)}
        nodes = tuple(tuple(c if c < n else new[c] for c in self.nodes[v - n]) for v in keep)
        return Tree(n, nodes, zero)


# --------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(\d+\.\.\d+(?::\d+)?|\d+|d\[|[\[\]{},])")


def parse_tree(s: str) -> Tree:
    """Parse ``"tree([...])"`` (grammar in the module docstring).

    Raises ValueError naming the text and the grammar on any malformed input."""
    t = s.strip().replace(" ", "")
    m = re.fullmatch(r"tree\((\+0:)?(.*)\)", t, flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"order={s!r} is not a tree; valid: {TREE_GRAMMAR}")
    zero, body = bool(m.group(1)), m.group(2)
    toks, pos = [], 0
    while pos < len(body):
        mt = _TOKEN.match(body, pos)
        if not mt:
            raise ValueError(f"order={s!r}: unexpected text {body[pos:pos + 10]!r} at {pos}; "
                             f"valid: {TREE_GRAMMAR}")
        toks.append(mt.group(1))
        pos = mt.end()
    nodes: list[tuple[int, int] | tuple[int, ...]] = []
    wide: list[int] = []
    leaves: list[int] = []
    # ids are provisional: leaves get their own index, nodes a negative placeholder
    # resolved once n (= number of leaves) is known
    i = 0

    def item_list(close):
        nonlocal i
        items = []
        while True:
            if i >= len(toks):
                raise ValueError(f"order={s!r}: missing {close!r}; valid: {TREE_GRAMMAR}")
            tok = toks[i]
            if tok in ("[", "{", "d["):
                i += 1
                items.append(group(tok))
            elif tok[0].isdigit():
                i += 1
                if ".." in tok:
                    a, rest = tok.split("..")
                    b, _, st = rest.partition(":")
                    a, b, st = int(a), int(b), int(st or 1)
                    if st < 1 or b < a:
                        raise ValueError(f"order={s!r}: leaf run {tok!r} must have start <= stop "
                                         "and step >= 1")
                    run = list(range(a, b + 1, st))
                    leaves.extend(run)
                    items.extend(("leaf", v) for v in run)
                else:
                    leaves.append(int(tok))
                    items.append(("leaf", int(tok)))
            else:
                raise ValueError(f"order={s!r}: unexpected {tok!r}; valid: {TREE_GRAMMAR}")
            if i >= len(toks):
                raise ValueError(f"order={s!r}: missing {close!r}; valid: {TREE_GRAMMAR}")
            if toks[i] == ",":
                i += 1
                continue
            if toks[i] == close:
                i += 1
                return items
            raise ValueError(f"order={s!r}: expected ',' or {close!r}, got {toks[i]!r}")

    def group(open_):
        items = item_list("}" if open_ == "{" else "]")
        if open_ == "{":
            if len(items) < 3:
                raise ValueError(f"order={s!r}: a fused adder {{...}} needs >= 3 items")
            nodes.append(tuple(items))
            return ("node", len(nodes) - 1)
        cur = items[0]
        for it in items[1:]:
            nodes.append((cur, it))
            if open_ == "d[":
                wide.append(len(nodes) - 1)
            cur = ("node", len(nodes) - 1)
        return cur

    if not toks or toks[0] not in ("[", "{", "d["):
        raise ValueError(f"order={s!r}: a tree body starts with '[' or '{{'; valid: {TREE_GRAMMAR}")
    i = 1
    root = group(toks[0])
    if i != len(toks):
        raise ValueError(f"order={s!r}: trailing text after the tree; valid: {TREE_GRAMMAR}")
    n = len(leaves)
    if sorted(leaves) != list(range(n)):
        raise ValueError(f"order={s!r}: the leaves must be 0..n-1, each once (got {n} leaves)")
    if root[0] == "leaf":
        return Tree(1, (), zero)

    def rid(it):
        return it[1] if it[0] == "leaf" else n + it[1]

    return Tree(n, tuple(tuple(rid(c) for c in ch) for ch in nodes), zero,
                tuple(n + k for k in wide))
