"""Test-only references: plain scalar Python loops of each summation order, with
every addition rounded by an independent exact rounding (fractions.Fraction).

Nothing here imports numlab; the rounding is the Fraction rounding of
tests/_oracles.py (``round_to_grid(v, fmt, mode)``: ``v`` rounded to the format
named ``fmt`` with ``mode`` rne, rtz, up, down or odd).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from _oracles import GRIDS, round_to_grid  # noqa: F401  (GRIDS: the formats, by name, for the tests)


def fadd(a: float, b: float, fmt: str, mode: str = "rne") -> float:
    """fl(a + b) in fmt (IEEE: NaN/inf handled by float arithmetic; zero signs as IEEE rne/rtz)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a + b
    s = Fraction(a) + Fraction(b)
    if s == 0:
        # IEEE 754 6.3: exact zero sum is +0 in rne/rtz unless both are -0
        return -0.0 if (math.copysign(1, a) < 0 and math.copysign(1, b) < 0) else 0.0
    return round_to_grid(s, fmt, mode)


def fsub(a, b, fmt):
    return fadd(a, -b, fmt)


def seq(xs, fmt):
    if not xs:
        return 0.0
    s = xs[0]
    for x in xs[1:]:
        s = fadd(s, x, fmt)
    return s


def pairwise(xs, fmt):
    if not xs:
        return 0.0
    level = list(xs)
    while len(level) > 1:
        nxt = [fadd(level[i], level[i + 1], fmt) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def butterfly(v, fmt):
    v = list(v)
    while len(v) > 1:
        h = (len(v) + 1) // 2
        nxt = []
        for i in range(h):
            nxt.append(fadd(v[i], v[i + h], fmt) if i + h < len(v) else v[i])
        v = nxt
    return v[0]


def lanes(xs, fmt, L, combine="tree", tail="masked"):
    n = len(xs)
    if n == 0:
        return 0.0
    if tail == "masked":
        m = -(-n // L)
        main, rest = list(xs) + [-0.0] * (m * L - n), []
    else:
        m = n // L
        main, rest = list(xs[: m * L]), list(xs[m * L:])
    if m:
        accs = []
        for j in range(L):
            s = -0.0
            for i in range(m):
                s = fadd(s, main[i * L + j], fmt)
            accs.append(s)
        s = butterfly(accs, fmt) if combine == "tree" else seq(accs, fmt)
    else:
        s = -0.0
    for t in rest:
        s = fadd(s, t, fmt)
    return s


def kahan(xs, fmt):
    s, c = -0.0, 0.0
    for x in xs:
        y = fsub(x, c, fmt)
        t = fadd(s, y, fmt)
        c = fsub(fsub(t, s, fmt), y, fmt)
        s = t
    return s if xs else 0.0


def blocked(xs, fmt, tile, inner, outer):
    parts = [inner(list(xs[i:i + tile]), fmt) for i in range(0, len(xs), tile)]
    return outer(parts, fmt) if parts else 0.0


def shuffled(xs, fmt, seed, row_index, n_rows, tile=None, inner=seq):
    """The permutation is drawn as documented: default_rng(seed).permuted of the
    (n_rows, items) index matrix along the last axis; this row's order."""
    items = list(xs) if tile is None else [inner(list(xs[i:i + tile]), fmt) for i in range(0, len(xs), tile)]
    k = len(items)
    base = np.broadcast_to(np.arange(k), (n_rows, k)).copy()
    perm = np.random.default_rng(seed).permuted(base, axis=-1)[row_index]
    return seq([items[i] for i in perm], fmt)


# --- PyTorch CPU orders (from SumKernel.cpp / cpp_prefix.h, one element at a time) ---
def _clog2(x):
    return 1 if x <= 2 else (x - 1).bit_length()


def _multi_row_sum(items, fmt):
    """items: list of vectors (lists); ATen multi_row_sum, 4 levels, element by element."""
    size = len(items)
    width = len(items[0]) if items else 0
    level_power = max(4, _clog2(size) // 4)
    step = 1 << level_power
    mask = step - 1
    acc = [[0.0] * width for _ in range(4)]
    i = 0
    while i + step <= size:
        for _ in range(step):
            acc[0] = [fadd(a, b, fmt) for a, b in zip(acc[0], items[i], strict=True)]
            i += 1
        for j in range(1, 4):
            acc[j] = [fadd(a, b, fmt) for a, b in zip(acc[j], acc[j - 1], strict=True)]
            acc[j - 1] = [0.0] * width
            if i & (mask << (j * level_power)):
                break
    while i < size:
        acc[0] = [fadd(a, b, fmt) for a, b in zip(acc[0], items[i], strict=True)]
        i += 1
    for j in range(1, 4):
        acc[0] = [fadd(a, b, fmt) for a, b in zip(acc[0], acc[j], strict=True)]
    return acc[0]


def _row_sum(items, fmt, width):
    """ATen row_sum: 4 interleaved multi_row_sum accumulators over vectors of ``width``."""
    count = len(items)
    size_ilp = count // 4
    if size_ilp:
        # multi_row_sum over size_ilp rows of 4 vectors = one multi_row_sum of 4*width columns
        rows = [sum((list(items[4 * i + k]) for k in range(4)), []) for i in range(size_ilp)]
        flat = _multi_row_sum(rows, fmt)
        parts = [flat[k * width:(k + 1) * width] for k in range(4)]
    else:
        parts = [[0.0] * width for _ in range(4)]
    for i in range(4 * size_ilp, count):
        parts[0] = [fadd(a, b, fmt) for a, b in zip(parts[0], items[i], strict=True)]
    for k in range(1, 4):
        parts[0] = [fadd(a, b, fmt) for a, b in zip(parts[0], parts[k], strict=True)]
    return parts[0]


def aten_cascade(xs, fmt, vec=8, widen=False):
    """ATen cascade_sum of one row (vectorized_inner_sum / scalar_inner_sum)."""
    xs = list(xs)
    n = len(xs)
    vt = 2 * vec if widen else vec
    if n < vt:
        return _row_sum([[x] for x in xs], fmt, 1)[0]
    nv = n // vt
    items = []
    for b in range(nv):
        blk = xs[b * vt:(b + 1) * vt]
        items.append([fadd(blk[j], blk[vec + j], fmt) for j in range(vec)] if widen else blk)
    vacc = _row_sum(items, fmt, vec)
    s = 0.0
    for x in xs[nv * vt:]:
        s = fadd(s, x, fmt)
    for v in vacc:
        s = fadd(s, v, fmt)
    return s


def _xor_butterfly(v, fmt):
    v = list(v)
    h = len(v) // 2
    while h >= 1:
        v = [fadd(v[i], v[i ^ h], fmt) for i in range(len(v))]
        h //= 2
    return v[0]


def inductor_lanes(xs, fmt, lanes=16, n_vec=1, threads=1, split=False, unroll=8):
    """Inductor's C++ row sum (no CascadeSumHelper: rows of at most 4096 elements)."""
    xs = list(xs)
    n = len(xs)
    assert n <= 4096
    if n < unroll:
        s = xs[0] if n else 0.0
        for x in xs[1:]:
            s = fadd(s, x, fmt)
        return s
    W = lanes * n_vec
    nb, t = divmod(n, W)
    iters = nb + (1 if t else 0)
    chunks = [(0, iters)]
    if split:
        q, r = divmod(iters, threads)
        chunks, start = [], 0
        for k in range(threads):
            cnt = q + (1 if k < r else 0)
            chunks.append((start, start + cnt))
            start += cnt
    total = [0.0] * W
    for lo, hi in chunks:
        acc = [0.0] * W
        for b in range(lo, hi):
            m = W if b < nb else t  # the last, masked iteration touches lanes 0..t-1
            for j in range(m):
                acc[j] = fadd(acc[j], xs[b * W + j], fmt)
        total = [fadd(a, b, fmt) for a, b in zip(total, acc, strict=True)] if split else acc
    v = total[:lanes]
    for i in range(1, n_vec):
        v = [fadd(a, b, fmt) for a, b in zip(v, total[i * lanes:(i + 1) * lanes], strict=True)]
    return fadd(0.0, _xor_butterfly(v, fmt), fmt)
