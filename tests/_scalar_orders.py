"""Test-only references: plain scalar Python loops of each summation order, with
every addition rounded by an independent exact rounding (fractions.Fraction).

Nothing here imports numlab.kernels; the rounding is a from-scratch
round-to-nearest-even of a Fraction onto a (p, emin, emax) grid.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# (p, emin, emax) of the formats used in tests
GRIDS = {"fp32": (24, -126, 127), "fp16": (11, -14, 15), "bf16": (8, -126, 127),
         "fp64": (53, -1022, 1023), "tf32": (11, -126, 127)}


def round_fraction(v: Fraction | float, fmt: str, mode: str = "rne") -> float:
    """Round an exact value to the format ``fmt`` as a Python float: ``mode`` rne, rtz,
    up, down or odd (overflow -> inf where the mode rounds away from zero, else the
    largest finite value)."""
    p, emin, emax = GRIDS[fmt]
    if isinstance(v, float):
        if not math.isfinite(v):
            return v
        v = Fraction(v)
    if v == 0:
        return 0.0
    sign = -1 if v < 0 else 1
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    # now 2**e <= a < 2**(e+1)
    q = max(e, emin) - p + 1
    s = a / Fraction(2) ** q
    fl = s.numerator // s.denominator
    rem = s - fl
    if mode == "rne":
        if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
            fl += 1
    elif mode == "rtz":
        pass
    elif mode in ("up", "down"):  # toward +inf / -inf: away from zero on the matching side
        if rem > 0 and (sign > 0) == (mode == "up"):
            fl += 1
    elif mode == "odd":  # round to odd: inexact results get an odd last bit
        if rem > 0 and fl % 2 == 0:
            fl += 1
    else:
        raise ValueError(mode)
    r = Fraction(fl) * Fraction(2) ** q
    maxv = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    if r > maxv:  # IEEE 754 7.4: overflow goes to inf only when the mode rounds away
        away = mode == "rne" or (mode == "up" and sign > 0) or (mode == "down" and sign < 0)
        return sign * math.inf if away else sign * float(maxv)
    return sign * float(r)


def fadd(a: float, b: float, fmt: str, mode: str = "rne") -> float:
    """fl(a + b) in fmt (IEEE: NaN/inf handled by float arithmetic; zero signs as IEEE rne/rtz)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a + b
    s = Fraction(a) + Fraction(b)
    if s == 0:
        # IEEE 754 6.3: exact zero sum is +0 in rne/rtz unless both are -0
        return -0.0 if (math.copysign(1, a) < 0 and math.copysign(1, b) < 0) else 0.0
    return round_fraction(s, fmt, mode)


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
