"""Chunked compare of two arrays (memory-mapped dumps are read
``chunk_elems`` elements at a time and their pages released after use).

The metrics are :class:`numlab.metrics.CompareAccumulator`'s; this module
only checks the pair (dtype, shape, emptiness), picks the ULP format, feeds
the chunks and applies :class:`~numlab.compare.columns.Thresholds`.
"""

from __future__ import annotations

import mmap as _mm

import numpy as np

from .. import metrics
from ..formats import Format, get_format
from .columns import Thresholds
from .dump import format_name

__all__ = ["DEFAULT_CHUNK", "compare_arrays"]

DEFAULT_CHUNK = 1 << 16


def _flat_pair(g: np.ndarray, m: np.ndarray):
    """Flattened views in the same element order (no copy for contiguous or
    memory-mapped arrays)."""
    if g.flags.c_contiguous and m.flags.c_contiguous:
        return g.reshape(-1), m.reshape(-1)
    if g.flags.f_contiguous and m.flags.f_contiguous:
        return g.ravel(order="F"), m.ravel(order="F")
    return np.ascontiguousarray(g).reshape(-1), np.ascontiguousarray(m).reshape(-1)


def _numeric_ok(a: np.ndarray) -> bool:
    if a.dtype.kind in "biuf":
        return True
    try:
        return get_format(a.dtype).dtype is not None
    except (TypeError, ValueError):
        return False


def _release(a: np.ndarray, start: int, stop: int) -> None:
    """Tell the kernel the pages of a memory-mapped chunk are no longer needed
    (keeps the resident set at O(chunk); a no-op for in-memory arrays)."""
    mm = getattr(a, "_mmap", None)
    base = a
    while mm is None and isinstance(getattr(base, "base", None), np.ndarray):
        base = base.base
        mm = getattr(base, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise"):
        return
    try:
        off = getattr(base, "offset", 0) % _mm.ALLOCATIONGRANULARITY
        lo = off + start * a.itemsize
        hi = off + stop * a.itemsize
        page = _mm.PAGESIZE
        lo_p = (lo // page) * page
        length = ((hi + page - 1) // page) * page - lo_p
        length = min(length, len(mm) - lo_p)
        if length > 0:
            mm.madvise(_mm.MADV_DONTNEED, lo_p, length)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platform dependent
        pass


def compare_arrays(
    golden,
    mine,
    *,
    fmt: Format | str | None = None,
    thresholds: Thresholds | None = None,
    chunk_elems: int = DEFAULT_CHUNK,
) -> dict:
    """Compare two arrays; returns the metric columns of a report row.

    Never raises for bad data: a shape mismatch, an empty array, a
    non-numeric dtype or NaN/inf at different positions give a row whose
    ``cmp_fail_reason`` says so (see the module docstring for every formula).

    Parameters
    ----------
    golden, mine : array_like
        May be memory-mapped; they are read ``chunk_elems`` elements at a time.
    fmt : Format or str, optional
        Storage format for the ULP columns (default: ``mine``'s format when it
        has one, else fp32).
    thresholds : Thresholds, optional
        For ``Accuracy Reached or Not``.
    chunk_elems : int
        Elements per chunk (default 2**16: 512 KiB per float64 temporary, cache-sized).
    """
    th = thresholds or Thresholds()
    if not isinstance(chunk_elems, (int, np.integer)) or chunk_elems < 1:
        raise ValueError(f"chunk_elems={chunk_elems!r} is not valid; it must be an int >= 1")
    g = golden if isinstance(golden, np.ndarray) else np.asarray(golden)
    m = mine if isinstance(mine, np.ndarray) else np.asarray(mine)
    row: dict = {
        "golden_dtype": format_name(g.dtype), "golden_shape": list(g.shape),
        "my_dtype": format_name(m.dtype), "my_shape": list(m.shape),
    }
    reasons: list[str] = []
    for side, a in (("golden", g), ("my", m)):
        if not _numeric_ok(a):
            reasons.append(f"unsupported dtype {a.dtype} in {side} data, can not compare.")
    if reasons:
        row["cmp_fail_reason"] = " ".join(reasons)
        return row
    if g.shape != m.shape:
        row["cmp_fail_reason"] = (
            f"shape mismatch: golden {list(g.shape)} vs mine {list(m.shape)}"
            + (" (same number of elements)" if g.size == m.size else "")
            + ", can not compare."
        )
        row["Accuracy Reached or Not"] = "Unmatched"
        return row
    n = int(g.size)
    row["n_elements"] = n
    if n == 0:
        row["cmp_fail_reason"] = "empty data (0 elements), can not compare."
        return row
    if g.dtype != m.dtype:
        reasons.append(f"dtype mismatch: golden {format_name(g.dtype)} vs mine {format_name(m.dtype)} "
                       "(compared in float64).")
    # ULP columns need a floating-point format: the given one, else mine's,
    # else golden's; integer/bool data on both sides has none (left blank)
    no_ulp = False
    if fmt is None:
        for side in (m, g):
            if side.dtype.kind not in "iub":
                try:
                    fmt = get_format(side.dtype)
                    break
                except (TypeError, ValueError):
                    pass
        else:
            no_ulp = True
            fmt = get_format("fp32")  # computed, then blanked below
    fmt = get_format(fmt)
    row["ulp_format"] = fmt.name
    gf, mf = _flat_pair(g, m)
    acc = metrics.CompareAccumulator(fmt)
    for s in range(0, n, chunk_elems):
        e = min(n, s + chunk_elems)
        acc.update(np.asarray(gf[s:e]), np.asarray(mf[s:e]))
        _release(gf, s, e)
        _release(mf, s, e)
    cols, notes = acc.finish()
    row.update(cols)
    reasons.extend(notes)
    row["Accuracy Reached or Not"] = th.accuracy(cols["cosine_similarity"], cols["MaxAbsErr"])
    if no_ulp:
        row.update(ulp_format="", max_ulp_error="", mean_ulp_error="")
        reasons.append("integer/bool data: no ULP columns.")
    row["cmp_fail_reason"] = " ".join(reasons)
    return row
