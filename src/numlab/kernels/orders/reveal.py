"""Order revelation: recover the summation tree of a black-box sum by probing.

The method is FPRev's (Xie, Gao, Xue, "FPRev: Revealing the Order of
Floating-Point Summation by Numerical Testing", https://arxiv.org/abs/2411.00442;
code https://github.com/microsoft/RepDL/tree/main/tools/FPRev).  A probe row
holds a large ``M`` at element ``i``, ``-M`` at element ``j`` and a small unit
``e`` everywhere else.  ``M`` swamps every partial sum of units it meets, so
the units that reach ``M`` or ``-M`` before the two cancel are lost; the
others are summed exactly.  With ``c_i``, ``c_j`` the children of the lowest
common ancestor of ``i`` and ``j`` that hold them,

    output / e = n - |c_i| - |c_j|,   i.e.  a(i, j) = n - output / e = |c_i| + |c_j|,

which for a binary node is the size of the common ancestor.  A node with
``k >= 3`` children (a multi-term adder: exact sum, one rounding) shows as
children whose leaves all give the same ``a`` from another child.

Reconstruction (a pivot recursion, O(n log n) probes for balanced trees and
O(n) for chains): for a set ``S`` known to be one subtree, probe a pivot ``p``
against the rest.  Sorted by ``a``, the groups of equal ``a`` walk up the
path from ``p`` to the subtree's root: a group of ``a - cur`` leaves (``cur``
the size of the path so far) is the other child of a binary node and is one
subtree (recursed into); otherwise the groups form the other children of a
fused node (a group at ``a = cur + s`` holds children of ``s`` leaves each,
separated by probing one leaf against the others).  Every set of a round of
the recursion is probed in the same batch of calls.  A binary reading is
preferred when both fit the pivot's probes; the check then decides.

Two more kinds of probe complete the tree: a row of ``-0.0`` (does the sum
end on a ``+0.0`` accumulator?) and, per binary node ``v`` under a binary
parent, ``1`` / ``t`` in ``v``'s children and ``-1`` beside ``v``: ``t``
survives only if ``v`` and its parent add in fp64 (``Tree.wide``), which is
how a BLAS dot with a ``double`` scalar loop is reproduced.  Counts that an
fp16/bf16 output cannot hold exactly (above 2048 / 256) are probed in windows
of units and added.

The black box ``fn`` takes a 2-D array (rows, n) in the input format's
container (float32, float16, ml_dtypes.bfloat16) and returns one value per
row (use :func:`rowwise` for a function of one 1-D row).  The revealed order
is a :class:`numlab.kernels.orders.tree.Tree`; :func:`check` runs it (as
:func:`numlab.kernels.reduce` with ``op="sum"`` does) against ``fn`` on random rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from ...formats import get_format
from .._common import Arith, round_to, to_container
from .classic import sum_along
from .tree import Tree

__all__ = ["reveal", "check", "rowwise", "Revealed", "CheckResult", "RevealError", "probe_values",
           "INPUT_FORMATS"]

INPUT_FORMATS = ("fp32", "fp16", "bf16")
_CONTAINER = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
_PROBE_VALUES_PER_CALL = 1 << 22
_COUNT_CAP = {"bf16": 256, "fp16": 2048}  # unit counts exact in the format's outputs


class RevealError(RuntimeError):
    """The outputs are not those of a summation tree (the probes contradict each other,
    or the function does not swamp / count exactly with the chosen M and unit)."""


def probe_values(fmt: str) -> tuple[float, float]:
    """``(M, e)`` of the probes for an input format.

    fp32 and bf16: ``M = 2**100``, ``e = 1`` (units are absorbed by ``M`` in
    fp32 and fp64 accumulators for ``n < 2**47``).  fp16: ``M = 2**15`` (its
    largest power of two), ``e = 2**-24`` (fp16's smallest subnormal, a
    normal fp32 number): absorbed by ``M`` in fp16 and fp32 accumulators for
    ``n < 2**15``; counts are exact while they fit the accumulator (fp16: 2048).
    """
    if fmt == "fp16":
        return 2.0 ** 15, 2.0 ** -24
    return 2.0 ** 100, 1.0


@dataclass(frozen=True)
class CheckResult:
    """Result of running the revealed order against the function on random rows."""

    rows: int
    n: int
    fmt: str
    acc: str
    matches: int
    seed: int
    first_mismatch: int | None = None

    @property
    def ok(self) -> bool:
        return self.matches == self.rows

    def __str__(self) -> str:
        s = (f"check: {self.matches}/{self.rows} random rows ({self.fmt} input, {self.acc} "
             f"accumulator, seed {self.seed}) bit for bit")
        if not self.ok:
            s += f"; first mismatch at row {self.first_mismatch}"
        return s


@dataclass(frozen=True)
class Revealed:
    """A revealed order: the tree, the probe count and the check (None if not run)."""

    order: Tree
    n: int
    fmt: str
    probes: int
    calls: int
    check: CheckResult | None = field(default=None)

    def __str__(self) -> str:
        lines = [f"order  {self.order.summary(200)}",
                 f"probes {self.probes} rows in {self.calls} calls (n = {self.n}, "
                 f"n log2 n = {self.n * max(1, int(np.ceil(np.log2(max(self.n, 2)))))})",
                 f"depth  {self.order.depth(self.n)}; nodes by number of children "
                 f"{dict(sorted(self.order.arities().items()))}"]
        if self.check is not None:
            lines.append(str(self.check))
        return "\n".join(lines)


def rowwise(fn1d):
    """Turn a function of one 1-D row into the 2-D form ``reveal`` calls (a loop over rows)."""

    def fn(x):
        return np.array([np.asarray(fn1d(r), dtype=np.float64).reshape(()) for r in x])

    return fn


def _check_fmt(fmt) -> str:
    name = get_format(fmt, "fmt").name
    if name not in INPUT_FORMATS:
        raise ValueError(f"fmt={name!r} is not valid; valid choices: {list(INPUT_FORMATS)}")
    return name


def _call(fn, x: np.ndarray) -> np.ndarray:
    y = np.asarray(fn(x))
    if y.shape != (x.shape[0],) and y.size == x.shape[0]:
        y = y.reshape(x.shape[0])
    if y.shape != (x.shape[0],):
        raise ValueError(f"fn returned shape {y.shape} for input of shape {x.shape}; it must "
                         f"return one value per row, shape ({x.shape[0]},)")
    return y.astype(np.float64)


class _Prober:
    def __init__(self, fn, n, fmt):
        self.fn, self.n, self.fmt = fn, n, fmt
        self.M, self.e = probe_values(fmt)
        self.dtype = _CONTAINER[fmt]
        self.probes = 0
        self.calls = 0
        self.rows_per_call = max(8, min(1024, _PROBE_VALUES_PER_CALL // n))

    def run(self, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
        """``a(i, j)`` for the pairs ``(pi[k], pj[k])``.

        When a count could exceed what the output format holds exactly (``cap``:
        256 for bf16, 2048 for fp16), each pair is probed once per window of
        ``cap`` leaves, units only inside the window (``+0.0`` elsewhere), and the
        window counts are added."""
        n = self.n
        cap = _COUNT_CAP.get(self.fmt, n)
        windows = [(w, min(n, w + cap)) for w in range(0, n, cap)]
        surv = np.zeros(pi.size, dtype=np.int64)
        step = self.rows_per_call
        for lo, hi in windows:
            for s in range(0, pi.size, step):
                i, j = pi[s:s + step], pj[s:s + step]
                # every call has `step` rows (the rest are plain unit rows), so a function whose
                # order depends on the number of rows (Inductor's split rule) sees one shape
                x = np.zeros((step, n), dtype=self.dtype)
                x[:, lo:hi] = self.e
                r = np.arange(i.size)
                x[r, i] = self.M
                x[r, j] = -self.M
                y = _call(self.fn, x)[: i.size] / self.e
                self.calls += 1
                self.probes += i.size
                cnt = np.rint(y)
                bad = ~np.isfinite(y) | (cnt != y) | (cnt < 0) | (cnt > hi - lo)
                if bad.any():
                    k = int(np.flatnonzero(bad)[0])
                    raise RevealError(
                        f"probe (M at {int(i[k])}, -M at {int(j[k])}, units at {lo}..{hi - 1}) gave "
                        f"{y[k] * self.e!r}, not a count of units in [0, {hi - lo}] x {self.e}: the "
                        "function does not add its inputs in one summation tree that swamps (e.g. "
                        "it accumulates in a wider format, reorders by magnitude or is not a sum)")
                surv[s:s + step] += cnt.astype(np.int64)
        return n - surv


def reveal(fn, n: int, fmt="fp32", *, check_rows: int = 10_000, seed: int = 0,
           acc="fp32") -> Revealed:
    """Reveal the summation tree of ``fn`` over rows of ``n`` elements (module docstring).

    Parameters
    ----------
    fn : callable
        ``fn(x)`` with ``x`` of shape (rows, n) in the container of ``fmt``;
        returns one value per row.
    n : int
        Row length (>= 1).
    fmt : {"fp32", "fp16", "bf16"}
        Input format of the probes and of the check rows.
    check_rows : int
        Random rows (standard normal, rounded to ``fmt``) on which the revealed
        order must reproduce ``fn`` bit for bit; 0 skips the check.
    seed : int
        Seed of the check rows (``numpy.random.default_rng(seed)``).
    acc : str
        Accumulator format in which the revealed tree is executed for the check
        (fp32 for numpy and PyTorch sums of fp32/fp16/bf16).

    Returns
    -------
    Revealed
        ``.order`` (a :class:`Tree`), ``.probes`` (probe rows), ``.calls``, ``.check``.

    Raises
    ------
    RevealError
        When the probe outputs are not those of a summation tree.
    """
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n={n!r} is not valid; it must be an int >= 1")
    n = int(n)
    fmt = _check_fmt(fmt)
    if not isinstance(check_rows, int | np.integer) or check_rows < 0:
        raise ValueError(f"check_rows={check_rows!r} is not valid; it must be an int >= 0")
    prober = _Prober(fn, n, fmt)
    tree = _reconstruct(prober, n)
    wide = _wide_nodes(prober, tree)
    tree = Tree(n, tree.nodes, zero=_ends_on_plus_zero(fn, n, fmt), wide=wide)
    res = Revealed(tree, n, fmt, prober.probes, prober.calls)
    if check_rows:
        res = Revealed(tree, n, fmt, prober.probes, prober.calls,
                       check(fn, tree, n, fmt, rows=int(check_rows), seed=seed, acc=acc))
    return res


def _wide_nodes(prober: _Prober, tree: Tree) -> tuple[int, ...]:
    """Binary nodes computed in fp64: one probe per binary node ``v`` under a binary
    parent ``u``: ``1`` in one child of ``v``, ``t`` (2**-40; fp16: 2**-24) in the
    other, ``-1`` in ``u``'s other child, zeros elsewhere.  The output is ``t`` iff
    ``v`` and ``u`` both keep ``1 + t`` (fp64), else 0.  A wide node under a
    narrow parent with narrow children rounds like a narrow one (the double
    rounding of one fp32 addition through fp64 is innocuous), so it is not needed."""
    n = tree.n
    parent = {}
    for k, ch in enumerate(tree.nodes):
        for c in ch:
            parent[c] = n + k
    vs = [n + k for k, ch in enumerate(tree.nodes)
          if len(ch) == 2 and n + k in parent and len(tree.nodes[parent[n + k] - n]) == 2]
    if not vs:
        return ()
    t = 2.0 ** -24 if prober.fmt == "fp16" else 2.0 ** -40
    first = _first_leaves(tree)
    step = prober.rows_per_call
    x = np.zeros((-(-len(vs) // step) * step, n), dtype=prober.dtype)  # padded: one shape per call
    r = np.arange(len(vs))
    a = [first[tree.nodes[v - n][0]] for v in vs]
    b = [first[tree.nodes[v - n][1]] for v in vs]
    c = [first[next(w for w in tree.nodes[parent[v] - n] if w != v)] for v in vs]
    x[r, a] = 1.0
    x[r, b] = t
    x[r, c] = -1.0
    y = np.concatenate([_call(prober.fn, x[s:s + step]) for s in range(0, len(vs), step)])[: len(vs)]
    prober.calls += -(-len(vs) // step)
    prober.probes += len(vs)
    bad = (y != 0) & (y != t)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise RevealError(f"precision probe of node {vs[k]} gave {y[k]!r}, expected 0 or {t}")
    hit = [v for v, yy in zip(vs, y, strict=True) if yy == t]
    return tuple(sorted(set(hit) | {parent[v] for v in hit}))


def _first_leaves(tree: Tree) -> list[int]:
    first = list(range(tree.n)) + [0] * len(tree.nodes)
    for k, ch in enumerate(tree.nodes):
        first[tree.n + k] = min(first[c] for c in ch)
    return first


def _ends_on_plus_zero(fn, n, fmt) -> bool:
    """Does a row of ``-0.0`` sum to ``+0.0`` (an accumulator starting at ``0.0``)?"""
    y = _call(fn, np.full((1, n), -0.0, dtype=_CONTAINER[fmt]))
    return not bool(np.signbit(y[0]))


def check(fn, order, n: int, fmt="fp32", *, rows: int = 10_000, seed: int = 0,
          acc="fp32") -> CheckResult:
    """Run ``order`` (reduce with ``acc``, result rounded to ``fmt``) and ``fn`` on
    ``rows`` random standard-normal rows of ``n`` values of ``fmt``; count the
    rows whose results agree bit for bit."""
    fmt = _check_fmt(fmt)
    acc = get_format(acc, "acc").name
    if not isinstance(rows, int | np.integer) or isinstance(rows, bool) or rows < 1:
        raise ValueError(f"rows={rows!r} is not valid; it must be an int >= 1")
    rng = np.random.default_rng(seed)
    step = max(1, _PROBE_VALUES_PER_CALL // n)
    matches, first = 0, None
    for r0 in range(0, rows, step):  # rows drawn and checked chunk by chunk
        x = rng.standard_normal((min(step, rows - r0), n)).astype(_CONTAINER[fmt])
        want = np.asarray(fn(x)).reshape(x.shape[0])
        got = _order_sum(x, order, acc, fmt)
        want = want.astype(got.dtype) if want.dtype != got.dtype else want
        same = _bits(want) == _bits(got)
        same |= np.isnan(want.astype(np.float64)) & np.isnan(got.astype(np.float64))
        matches += int(same.sum())
        bad = np.flatnonzero(~same)
        if first is None and bad.size:
            first = r0 + int(bad[0])
    return CheckResult(int(rows), n, fmt, acc, matches, int(seed), first)


def _order_sum(x: np.ndarray, order, acc: str, fmt: str) -> np.ndarray:
    """Row sums of ``x`` by ``order``: ``x`` rounded to ``acc``, every addition
    rounded to ``acc``, the sum rounded once to ``fmt`` (the steps, and the bits,
    of ``numlab.kernels.reduce(x, "sum", order=order, acc=acc, out=fmt)``)."""
    ar, out = Arith(get_format(acc)), get_format(fmt)
    s = np.asarray(sum_along(ar.round(x), order, ar))
    return to_container(s if out == ar.fmt else round_to(s, out), out)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# --------------------------------------------------------------------------
# reconstruction
# --------------------------------------------------------------------------
class _Builder:
    """Nodes under construction: slots (placeholders) filled by children lists or leaves."""

    def __init__(self, n):
        self.n = n
        self.kids: dict[int, list[int]] = {}
        self.alias: dict[int, int] = {}
        self.next = n

    def slot(self) -> int:
        self.next += 1
        return self.next - 1

    def tree(self, root: int) -> Tree:
        n = self.n

        def res(v):
            while v in self.alias:
                v = self.alias[v]
            return v

        root = res(root)
        if root < n:
            return Tree(n, ())
        order, stack = [], [(root, False)]
        while stack:  # post-order, iterative
            v, done = stack.pop()
            if done:
                order.append(v)
                continue
            stack.append((v, True))
            stack.extend((c, False) for c in (res(c) for c in self.kids[v]) if c >= n)
        new = {v: n + k for k, v in enumerate(order)}
        nodes = tuple(tuple(res(c) if res(c) < n else new[res(c)] for c in self.kids[v])
                      for v in order)
        return Tree(n, nodes)


def _reconstruct(prober: _Prober, n: int) -> Tree:
    b = _Builder(n)
    root = b.slot()
    if n == 1:
        b.alias[root] = 0
        return b.tree(root)
    # tasks: ("sub", leaves, slot) = leaves form one subtree at slot;
    #        ("split", leaves, size, slots) = leaves form len(slots) subtrees of `size` leaves
    tasks = [("sub", np.arange(n), root)]
    while tasks:
        pairs_i, pairs_j, plan = [], [], []
        nxt = []
        for t in tasks:
            S = t[1]
            if t[0] == "sub" and S.size == 1:
                b.alias[t[2]] = int(S[0])
                continue
            if t[0] == "split" and len(t[3]) == 1:
                nxt.append(("sub", S, t[3][0]))
                continue
            p = int(S[S.size // 2]) if t[0] == "sub" else int(S[0])
            rest = S[S != p]
            pairs_i.append(np.full(rest.size, p))
            pairs_j.append(rest)
            plan.append((t, p, rest))
        if plan:
            a_all = prober.run(np.concatenate(pairs_i), np.concatenate(pairs_j))
            k = 0
            for t, p, rest in plan:
                a = a_all[k:k + rest.size]
                k += rest.size
                if t[0] == "sub":
                    nxt.extend(_path(b, t[2], p, rest, a, S_size=rest.size + 1))
                else:
                    _, S, size, slots = t
                    mine = rest[a <= size]
                    if mine.size != size - 1 or not np.all(a[a > size] == 2 * size):
                        raise RevealError(f"leaves {S[:8].tolist()}...: expected children of "
                                          f"{size} leaves each; the probes disagree")
                    nxt.append(("sub", np.sort(np.append(mine, p)), slots[0]))
                    nxt.append(("split", rest[a > size], size, slots[1:]))
        tasks = nxt
    return b.tree(root)


def _path(b: _Builder, slot: int, p: int, rest: np.ndarray, a: np.ndarray, S_size: int):
    """Fill ``slot`` with the path from leaf ``p`` up through the groups of ``a``;
    return the sub-tasks (module docstring)."""
    if a.max() > S_size or a.min() < 2:
        raise RevealError(f"pivot {p}: probe sizes range {a.min()}..{a.max()}, expected 2..{S_size}")
    vals, inv = np.unique(a, return_inverse=True)
    groups = [np.sort(rest[inv == g]) for g in range(vals.size)]
    tasks = []
    cur, cur_id = 1, p
    idx = 0
    while idx < vals.size:
        v, G = int(vals[idx]), groups[idx]
        if G.size == v - cur:  # binary node: (path, subtree of G)
            child = b.slot()
            tasks.append(("sub", G, child))
            node = b.slot()
            b.kids[node] = [cur_id, child]
            cur, cur_id = v, node
            idx += 1
            continue
        members, sigma = [], cur
        while idx < vals.size:
            v, G = int(vals[idx]), groups[idx]
            s = v - cur
            if members and G.size == v - sigma:
                break  # reads as the next binary level
            if members and G.size % s and v > sigma and G.size % (v - sigma) == 0:
                break  # children of the next (fused) level
            if G.size % s:
                raise RevealError(f"pivot {p}: {G.size} leaves at a={v} do not form children "
                                  f"of {s} leaves")
            members.append((s, G))
            sigma += G.size
            idx += 1
        kids = [cur_id]
        for s, G in members:
            slots = [b.slot() for _ in range(G.size // s)]
            kids.extend(slots)
            tasks.append(("split", G, s, slots) if len(slots) > 1 else ("sub", G, slots[0]))
        node = b.slot()
        b.kids[node] = kids
        cur, cur_id = sigma, node
    if cur != S_size:
        raise RevealError(f"pivot {p}: the path accounts for {cur} of {S_size} leaves")
    b.alias[slot] = cur_id
    return tasks
