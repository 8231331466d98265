"""msit/msprobe-style dump compare: one row per node, first divergence.

Two dumps -- a *golden* one (eager, or the fp64 reference) and *mine* (fused,
or the run under suspicion) -- are matched by node name and compared array by
array.  A fused block's output is matched to the **last member** of the block
(msit does this for fused graph operators, whose dump carries the name of the
last fused operator); the other members have no data of their own in the
fused run and are listed as ``inside_block``.

Columns and formulas
--------------------
msit (``msit llm compare``; ``components/utils/cmp_algorithm.py`` and
``msit_llm/compare/cmp_utils.py`` of Ascend/msit), with ``g`` golden, ``m``
mine, both flattened (msit's ``compare_data`` does ``reshape(-1)``) and
``eps = 2**-52`` (``np.finfo(float).eps``, as msit's numpy ``cmp_algorithm``
and :mod:`numlab.metrics`; msit's torch variant uses float32's eps):

* ``cosine_similarity`` = ``g.m / (|g| |m|)``; 1.0 when both are all zero,
  NaN (with a reason) when one is.
* ``max_relative_error`` / ``mean_relative_error``: ``|m/g - 1|`` where
  ``|g| > eps``, else 0; max / mean over **all** elements
  (:func:`numlab.metrics.msit_relative_error`).
* ``max_absolute_error`` / ``mean_absolute_error``: ``|m - g|`` where
  ``|g| > eps``, else 0 -- msit masks the absolute error too
  (:func:`numlab.metrics.msit_absolute_error`).
* ``kl_divergence`` = ``KL(softmax(g) || softmax(m))`` over the flattened
  tensor (``F.kl_div(log_softmax(m), softmax(g), reduction="sum")``),
  clamped at 0.
* ``relative_euclidean_distance`` = ``sqrt(sum (m-g)^2 / sum g^2)``; 0 when
  ``|g| <= eps``.
* ``cmp_fail_reason``: why a row could not be compared, or notes.

msprobe (``msprobe/core/compare/npy_compare.py``, ``acc_compare.py`` and
``common/const.py`` of Ascend/mstt):

* ``EucDist`` = ``|m - g|_2``; ``MaxAbsErr`` = ``max |m - g|`` (unmasked).
* ``MaxRelativeErr``, ``One Thousandth Err Ratio``,
  ``Five Thousandths Err Ratio``: relative error ``|m' - g'| / |g'|`` where
  positions with ``g == 0`` get ``eps64 = 2**-52`` added to both ``g`` and
  ``m``; the ratios are the shares of elements with relative error
  ``< 0.001`` and ``< 0.005`` (:func:`numlab.metrics.msprobe_relative_error`).
* ``Accuracy Reached or Not`` (``check_accuracy``): ``No`` if
  ``(Cosine < 0.99 and MaxAbsErr > 0.001)`` or ``Cosine < 0.9`` or
  ``MaxAbsErr > 1``; ``Unmatched`` for a shape mismatch; else ``Yes``
  (thresholds in :class:`Thresholds`).
* NaN/inf: when both sides have NaN/inf at the same positions with the same
  class (msprobe ``handle_inf_nan``), those positions are set to 0 on both
  sides and the rest is compared; the counts are reported, never dropped.  When
  positions differ, every error metric is NaN and the row fails.

numlab's own columns: ``max_ulp_error`` / ``mean_ulp_error`` =
``|m - g| / ulp(g)`` in the storage format (``ulp_format``;
:func:`numlab.metrics.ulp_error`), ``bitwise_equal_ratio``
(:func:`numlab.metrics.bitwise_equal`: same bits when the dtypes agree, else
same float64 bits, NaN equal to NaN), NaN/inf counts of each side,
``error_origin`` and ``inputs``.

Arithmetic is float64 for every dtype (msit computes in float32, msprobe in
float64), so digits beyond float32's may differ from msit's own report.

Everything is computed in one streaming pass over chunks of ``chunk_elems``
elements of the flattened (memory-mapped) arrays: the elementwise formulas
come from :mod:`numlab.metrics` and are reduced per chunk (max, sum, count);
the aggregates numlab.metrics computes on whole arrays (cosine, Euclidean
distances, KL) are accumulated here in float64 with running scales (no
overflow) and an online log-sum-exp, so two 2 GB dumps are compared with
O(chunk) memory.  The tests check every column against numlab.metrics' whole-
array functions.

First divergence
----------------
A row *fails* when :meth:`Thresholds.fails` says so (msprobe's accuracy rule,
optionally tightened).  In topological order, a failing node whose inputs
(for a block output: the block's external inputs; inputs without data of
their own are traced back to the nearest ancestors with data) all pass is
marked ``error_origin = "introduced"``; a failing node with a failing input is
``"carried"``.  The first ``introduced`` row is the first divergence -- where
the error is introduced rather than carried (msprobe's highlight rules, e.g.
"input's one-thousandth ratio > 0.9 while the output's < 0.6", compare
an API's output with its inputs in the same way).  An ``introduced`` row whose
passing inputs are not bit-identical, or one of whose inputs could not be
compared, says so in ``cmp_fail_reason``: the rule cannot tell a node that
introduces an error from one that amplifies a small one (cancellation);
feeding the node golden inputs (:mod:`numlab.compare.bisect`) can.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import metrics
from ..formats import Format, get_format
from .dump import (
    Dump,
    DumpEntry,
    DumpError,
    atomic_write_bytes,
    describe_graph,
    format_name,
    load_dump,
    natural_key,
)

__all__ = [
    "Thresholds",
    "COLUMNS",
    "MSIT_COLUMNS",
    "MSPROBE_COLUMNS",
    "DEFAULT_CHUNK",
    "compare_arrays",
    "compare_dumps",
    "CompareReport",
    "as_dump",
    "report_path",
]

EPS64 = float(np.finfo(np.float64).eps)  # msit/msprobe FLOAT_EPSILON (np.finfo(float).eps)
DEFAULT_CHUNK = 1 << 16

MSIT_COLUMNS = [
    "cosine_similarity",
    "max_relative_error",
    "mean_relative_error",
    "max_absolute_error",
    "mean_absolute_error",
    "kl_divergence",
    "relative_euclidean_distance",
]
MSPROBE_COLUMNS = [
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
    "Accuracy Reached or Not",
]
COLUMNS = [
    "index", "node", "op", "category", "block", "match",
    "golden_path", "golden_dtype", "golden_shape",
    "my_path", "my_dtype", "my_shape", "n_elements",
    "golden_max_value", "golden_min_value", "golden_mean_value",
    "my_max_value", "my_min_value", "my_mean_value",
    *MSIT_COLUMNS,
    *MSPROBE_COLUMNS,
    "ulp_format", "max_ulp_error", "mean_ulp_error", "bitwise_equal_ratio",
    "golden_nan", "golden_inf", "my_nan", "my_inf", "nonfinite_mismatch",
    "error_origin", "inputs", "cmp_fail_reason",
]


@dataclass(frozen=True)
class Thresholds:
    """When a row counts as failing.

    The defaults are msprobe's ``check_accuracy`` constants
    (``CompareConst`` in msprobe/core/common/const.py): ``No`` when
    ``(cosine < cosine and MaxAbsErr > max_abs_err)`` or
    ``cosine < cosine_min`` or ``MaxAbsErr > max_abs_err_max``.

    Parameters
    ----------
    cosine : float
        ``COS_THRESHOLD`` = 0.99.
    max_abs_err : float
        ``MAX_ABS_ERR_THRESHOLD`` = 0.001.
    cosine_min : float
        ``COS_MAX_THRESHOLD`` = 0.9.
    max_abs_err_max : float
        ``MAX_ABS_ERR_MAX_THRESHOLD`` = 1.
    max_rel_err : float or None
        Extra numlab criterion: also fail when msit's ``max_relative_error``
        exceeds this (None: off).
    max_ulp : float or None
        Extra numlab criterion: also fail when ``max_ulp_error`` exceeds this
        (None: off).
    """

    cosine: float = 0.99
    max_abs_err: float = 1e-3
    cosine_min: float = 0.9
    max_abs_err_max: float = 1.0
    max_rel_err: float | None = None
    max_ulp: float | None = None

    def __post_init__(self):
        for name in ("cosine", "max_abs_err", "cosine_min", "max_abs_err_max"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
                raise TypeError(f"{name} must be a real number, got {v!r}")
        for name in ("cosine", "cosine_min"):
            v = getattr(self, name)
            if not -1.0 <= v <= 1.0:
                raise ValueError(f"{name}={v!r} is not valid; a cosine threshold lies in [-1, 1]")
        for name in ("max_abs_err", "max_abs_err_max"):
            v = getattr(self, name)
            if not v >= 0:
                raise ValueError(f"{name}={v!r} is not valid; use a number >= 0")
        for name in ("max_rel_err", "max_ulp"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0):
                raise ValueError(f"{name}={v!r} is not valid; use None or a number >= 0")

    def accuracy(self, cosine: float, max_abs_err: float) -> str:
        """msprobe's ``Accuracy Reached or Not`` (``Yes``/``No``) from Cosine
        and MaxAbsErr; NaN in either gives ``No``."""
        if not (np.isfinite(cosine) and np.isfinite(max_abs_err)):
            return "No"
        if cosine < self.cosine and max_abs_err > self.max_abs_err:
            return "No"
        if cosine < self.cosine_min or max_abs_err > self.max_abs_err_max:
            return "No"
        return "Yes"

    def fails(self, row: Mapping) -> bool | None:
        """True/False for a compared row, None when the row has no metrics
        (missing data, inside a block, unreadable)."""
        acc = row.get("Accuracy Reached or Not", "")
        if acc == "Unmatched":
            return True
        if acc not in ("Yes", "No"):
            return None
        if acc == "No":
            return True
        if self.max_rel_err is not None and not _le(row.get("max_relative_error"), self.max_rel_err):
            return True
        if self.max_ulp is not None and not _le(row.get("max_ulp_error"), self.max_ulp):
            return True
        return False


def _le(v, bound) -> bool:
    try:
        return float(v) <= bound
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------
# array compare (streaming)
# --------------------------------------------------------------------------
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
        import mmap as _mm

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
    if g.dtype.kind == "b":
        g = g.view(np.uint8)
    if m.dtype.kind == "b":
        m = m.view(np.uint8)

    gf, mf = _flat_pair(g, m)
    a = _Acc()
    for s in range(0, n, chunk_elems):
        e = min(n, s + chunk_elems)
        gc = np.asarray(gf[s:e])
        mc = np.asarray(mf[s:e])
        a.bits_equal += int(np.count_nonzero(metrics.bitwise_equal(gc, mc)))
        g64 = gc.astype(np.float64)
        m64 = mc.astype(np.float64)
        del gc, mc
        a.update(g64, m64, fmt)
        del g64, m64
        _release(gf, s, e)
        _release(mf, s, e)
    a.finish(row, reasons, n, th)
    if no_ulp:
        row.update(ulp_format="", max_ulp_error="", mean_ulp_error="")
        reasons.append("integer/bool data: no ULP columns.")
    row["cmp_fail_reason"] = " ".join(reasons)
    return row


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Dot product by numpy's own (single-threaded, deterministic) loop, not
    a multithreaded BLAS whose summation order depends on the thread count."""
    return float(np.einsum("i,i->", a, b))


def _safe(c: float) -> bool:
    """Whether sums of squares of values up to ``c`` in magnitude can be
    formed unscaled in float64 (no overflow, no underflow)."""
    return 1e-100 < c < 1e100


def _max_sum(mx: float, sm: float, chunk: tuple[float, float], n: int) -> tuple[float, float]:
    """Combine a chunk's (max, mean) into running (max, sum)."""
    cmax, cmean = chunk
    return max(mx, cmax), sm + cmean * n




class _Acc:
    """float64 accumulators of one streaming compare."""

    def __init__(self):
        self.bits_equal = 0
        self.g_nan = self.g_inf = self.m_nan = self.m_inf = 0
        self.mismatch = 0
        self.matched_nonfinite = 0
        self.g_max = self.m_max = -np.inf
        self.g_min = self.m_min = np.inf
        self.g_sum = self.m_sum = 0.0
        self.g_nan_any = self.m_nan_any = False
        self.dot = 0.0  # sum of (g/scale_g)(m/scale_m)
        self.scale = {"g": 0.0, "m": 0.0, "d": 0.0}
        self.ssq = {"g": 0.0, "m": 0.0, "d": 0.0}
        self.maxabs = 0.0  # msprobe, unmasked
        self.msit_maxrel = self.msit_sumrel = 0.0
        self.msit_maxabs = self.msit_sumabs = 0.0
        self.mp_maxrel = 0.0
        self.cnt_1e3 = self.cnt_5e3 = 0
        self.max_ulp = self.sum_ulp = 0.0
        # online log-sum-exp for KL(softmax(g) || softmax(m))
        self.Mg = self.Mm = -np.inf
        self.Zg = self.Sg = self.Dg = self.Zm = 0.0

    def update(self, g: np.ndarray, m: np.ndarray, fmt: Format) -> None:
        with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf: NaN, as IEEE says
            sum_g, sum_m = float(np.sum(g)), float(np.sum(m))
        if math.isfinite(sum_g) and math.isfinite(sum_m):
            nonfin = None  # a finite sum means no NaN/inf in the chunk
        else:
            gn, mn = np.isnan(g), np.isnan(m)
            gi, mi = np.isinf(g), np.isinf(m)
            ng, nm = int(np.count_nonzero(gn)), int(np.count_nonzero(mn))
            self.g_nan += ng
            self.m_nan += nm
            self.g_inf += int(np.count_nonzero(gi))
            self.m_inf += int(np.count_nonzero(mi))
            self.g_nan_any |= bool(ng)
            self.m_nan_any |= bool(nm)
            nonfin = gn | mn | gi | mi
        # value statistics of each side, IEEE (a NaN makes max/min/mean NaN; finish())
        gmax, gmin = float(np.max(g)), float(np.min(g))
        mmax, mmin = float(np.max(m)), float(np.min(m))
        self.g_max, self.g_min = max(self.g_max, gmax), min(self.g_min, gmin)
        self.m_max, self.m_min = max(self.m_max, mmax), min(self.m_min, mmin)
        self.g_sum += sum_g
        self.m_sum += sum_m
        if nonfin is not None and nonfin.any():
            bad = (gn != mn) | (gi != mi) | (gi & mi & (g != m))
            nbad = int(np.count_nonzero(bad))
            self.mismatch += nbad
            self.matched_nonfinite += int(np.count_nonzero(nonfin)) - nbad
            g = np.where(nonfin, 0.0, g)
            m = np.where(nonfin, 0.0, m)
            gmax, gmin = float(np.max(g)), float(np.min(g))
            mmax, mmin = float(np.max(m)), float(np.min(m))
        # elementwise columns.  The formulas are numlab.metrics' (msit_relative_error,
        # msit_absolute_error, msprobe_relative_error, ulp_error), written here
        # as one fused pass per chunk that shares |g|, m - g and |m - g| (the
        # metrics functions copy and mask their inputs on every call, about 3x
        # slower on a 2 GB dump); test_compare checks every column against them.
        d = m - g
        ad = np.abs(d)
        ag = np.abs(g)
        dmax = float(ad.max())
        self.maxabs = max(self.maxabs, dmax)
        mask = ag > EPS64  # msit: only where |g| > eps, else 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            q = np.divide(m, g)
        q -= 1.0
        np.abs(q, out=q)
        q[~mask] = 0.0
        self.msit_maxrel = max(self.msit_maxrel, float(q.max()))
        self.msit_sumrel += float(q.sum())
        np.multiply(ad, mask, out=q)
        self.msit_maxabs = max(self.msit_maxabs, float(q.max()))
        self.msit_sumabs += float(q.sum())
        # msprobe: |(m - g) / g|, with eps added to both where g == 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            np.divide(ad, ag, out=q)
        zero = np.flatnonzero(g == 0)
        if zero.size:
            gz = g[zero] + EPS64
            q[zero] = np.abs(((m[zero] + EPS64) - gz) / gz)
        self.mp_maxrel = max(self.mp_maxrel, float(q.max()))
        self.cnt_1e3 += int(np.count_nonzero(q < 0.001))
        self.cnt_5e3 += int(np.count_nonzero(q < 0.005))
        # ULP error in the storage format: |m - g| / ulp_fmt(g), references
        # beyond fmt.max use the ulp of fmt.max (metrics.ulp_error)
        np.clip(ag, 0.0, fmt.max, out=q)
        _, ex = np.frexp(q)
        ex -= 1
        np.maximum(ex, fmt.emin, out=ex)
        ex[q == 0] = fmt.emin
        ex -= fmt.p - 1
        u = np.ldexp(1.0, ex)
        if not fmt.subnormals:
            u[q < fmt.smallest_normal] = fmt.smallest_normal
        with np.errstate(over="ignore"):
            np.divide(ad, u, out=q)  # inf when the error dwarfs a subnormal ulp
        self.max_ulp = max(self.max_ulp, float(q.max()))
        self.sum_ulp += float(q.sum())
        del q, u, ex, ag, ad, mask
        # sums of squares and the dot product with running scales (LAPACK
        # dnrm2-style), so values near the float64 range neither overflow nor
        # underflow
        cg, cm = max(gmax, -gmin), max(mmax, -mmin)
        self._ssq("g", g, cg)
        self._ssq("m", m, cm)
        self._ssq("d", d, dmax)
        sg, sm = self.scale["g"], self.scale["m"]
        if sg > 0 and sm > 0:
            if _safe(cg) and _safe(cm):
                self.dot += float(_dot(g, m)) / sg / sm
            else:
                self.dot += float(_dot(g / sg, m / sm))
        # KL(softmax(g) || softmax(m)) over the flattened tensor, online
        # log-sum-exp; with delta = m - g and p = softmax(g):
        #   KL = log E_p[exp(delta)] - E_p[delta] = log1p(E_p[expm1(delta)]) - E_p[delta]
        # (no cancellation between two log-sum-exps of nearly equal size)
        if gmax > self.Mg:
            f = math.exp(self.Mg - gmax)
            self.Zg *= f
            self.Sg *= f
            self.Dg *= f
            self.Mg = gmax
        eg = np.exp(g - self.Mg)
        self.Zg += float(eg.sum())
        self.Sg += float(_dot(eg, d))
        with np.errstate(over="ignore", invalid="ignore"):
            self.Dg += float(_dot(eg, np.expm1(d, out=d)))
        del eg, d
        # log-sum-exp of m too, for when E_p[exp(delta)] under- or overflows
        if mmax > self.Mm:
            self.Zm *= math.exp(self.Mm - mmax)
            self.Mm = mmax
        self.Zm += float(np.exp(m - self.Mm).sum())

    def _ssq(self, key: str, v: np.ndarray, cmax: float) -> None:
        """Update the scaled sum of squares ``sum (v/scale)^2`` of ``key``
        (``cmax`` = max |v| of the chunk); rescales the running dot product
        when the g or m scale grows."""
        old = self.scale[key]
        acc = self.ssq[key]
        if cmax > old:
            if old > 0:
                f = old / cmax
                acc *= f * f
                if key in ("g", "m"):
                    self.dot *= f
            self.scale[key] = old = cmax
        if old > 0 and cmax > 0:
            if _safe(cmax):
                acc += float(_dot(v, v)) / old / old
            else:
                w = v / old
                acc += float(_dot(w, w))
        self.ssq[key] = acc

    def norm(self, key: str) -> float:
        return self.scale[key] * math.sqrt(self.ssq[key])

    def finish(self, row: dict, reasons: list[str], n: int, th: Thresholds) -> None:
        gnan, mnan = self.g_nan_any, self.m_nan_any
        row.update(
            golden_max_value=np.nan if gnan else self.g_max,
            golden_min_value=np.nan if gnan else self.g_min,
            golden_mean_value=(np.nan if gnan else self.g_sum / n),
            my_max_value=np.nan if mnan else self.m_max,
            my_min_value=np.nan if mnan else self.m_min,
            my_mean_value=(np.nan if self.m_nan_any else self.m_sum / n),
            golden_nan=self.g_nan, golden_inf=self.g_inf, my_nan=self.m_nan, my_inf=self.m_inf,
            nonfinite_mismatch=self.mismatch,
            bitwise_equal_ratio=self.bits_equal / n,
        )
        gnorm, mnorm, dnorm = self.norm("g"), self.norm("m"), self.norm("d")
        if gnorm <= EPS64 and mnorm <= EPS64:
            cos = 1.0
        elif mnorm <= EPS64:
            cos = np.nan
            reasons.append("Cannot compare by Cosine Similarity, all the data is zero in my dump data.")
        elif gnorm <= EPS64:
            cos = np.nan
            reasons.append("Cannot compare by Cosine Similarity, all the data is zero in golden dump data.")
        else:
            cos = min(1.0, max(-1.0, self.dot / (math.sqrt(self.ssq["g"]) * math.sqrt(self.ssq["m"]))))
        ratio = self.Dg / self.Zg if math.isfinite(self.Dg) else math.inf
        if math.isfinite(ratio) and ratio > -0.5:
            kl = math.log1p(ratio) - self.Sg / self.Zg
        else:  # softmaxes far apart: no cancellation to avoid, use the two log-sum-exps
            kl = (self.Mm + math.log(self.Zm)) - (self.Mg + math.log(self.Zg)) - self.Sg / self.Zg
        metrics = {
            "cosine_similarity": cos,
            "max_relative_error": self.msit_maxrel,
            "mean_relative_error": self.msit_sumrel / n,
            "max_absolute_error": self.msit_maxabs,
            "mean_absolute_error": self.msit_sumabs / n,
            "kl_divergence": max(kl, 0.0),
            "relative_euclidean_distance": 0.0 if gnorm <= EPS64 else dnorm / gnorm,
            "EucDist": dnorm,
            "MaxAbsErr": self.maxabs,
            "MaxRelativeErr": self.mp_maxrel,
            "One Thousandth Err Ratio": self.cnt_1e3 / n,
            "Five Thousandths Err Ratio": self.cnt_5e3 / n,
            "max_ulp_error": self.max_ulp,
            "mean_ulp_error": self.sum_ulp / n,
        }
        if self.mismatch:
            for k in metrics:
                metrics[k] = np.nan
            reasons.append(
                f"The position of inf or nan in golden and my data do not match "
                f"({self.mismatch} of {n} elements; golden nan={self.g_nan} inf={self.g_inf}, "
                f"mine nan={self.m_nan} inf={self.m_inf})."
            )
        elif self.matched_nonfinite:
            reasons.append(
                f"{self.matched_nonfinite} nan/inf at the same positions on both sides were set to 0 "
                "before comparing (msprobe handle_inf_nan)."
            )
        row.update(metrics)
        row["Accuracy Reached or Not"] = th.accuracy(metrics["cosine_similarity"], metrics["MaxAbsErr"])


# --------------------------------------------------------------------------
# in-memory dumps
# --------------------------------------------------------------------------
class _MemoryDump(Dump):
    """A dump held in memory (a RunResult or a dict of arrays)."""

    def __init__(self, label: str, arrays: Mapping[str, np.ndarray], manifest: dict | None):
        entries = {k: DumpEntry(k, None, dict((manifest or {}).get("nodes", {}).get(k, {})))
                   for k in arrays}
        super().__init__(Path(label), manifest, entries)
        self._arrays = dict(arrays)

    def array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        if name not in self._arrays:
            raise KeyError(f"node {name!r} is not in {self.path}")
        return np.asarray(self._arrays[name])


def as_dump(obj, label: str = "<memory>") -> Dump:
    """A :class:`Dump` from a path (loaded with ``strict=False``, so bad files
    become rows), a Dump, a RunResult-like object (``.values``) or a mapping
    name -> array."""
    if isinstance(obj, Dump):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return load_dump(obj, strict=False)
    values = getattr(obj, "values", None)
    if isinstance(values, Mapping):
        node_meta, run_meta = describe_graph(getattr(obj, "graph", None), getattr(obj, "plan", None))
        dt = format_name(getattr(obj, "dtype", None))
        mode = getattr(obj, "mode", None)
        nodes = {k: v for k, v in node_meta.items() if k in values}
        graph = {k: v for k, v in node_meta.items() if k not in values}
        manifest = dict(run_meta, mode=mode, dtype=dt, nodes=nodes, graph=graph)
        return _MemoryDump(f"<{mode or 'run'} {label}>" if mode else label, values, manifest)
    if isinstance(obj, Mapping):
        return _MemoryDump(label, obj, None)
    raise TypeError(
        f"cannot compare {type(obj).__name__}; pass a dump path, a Dump, a RunResult or a dict of arrays"
    )


# --------------------------------------------------------------------------
# matching and the report
# --------------------------------------------------------------------------
def _block_maps(*dumps: Dump) -> tuple[dict[str, dict], dict[str, str]]:
    blocks: dict[str, dict] = {}
    member_of: dict[str, str] = {}
    for d in dumps:
        for bname, b in d.blocks.items():
            members = list(b.get("members") or []) if isinstance(b, Mapping) else []
            if len(members) < 2 or bname in blocks:  # only fused blocks; mine's win
                continue
            blocks[bname] = {"members": members, "kind": b.get("kind"),
                             "outputs": list(b.get("outputs") or members[-1:])}
            for mem in members:
                member_of.setdefault(mem, bname)
    return blocks, member_of


def compare_dumps(
    golden,
    mine,
    *,
    fmt: Format | str | None = None,
    thresholds: Thresholds | None = None,
    chunk_elems: int = DEFAULT_CHUNK,
    verify: bool = True,
) -> CompareReport:
    """Compare two dumps node by node (msit ``llm compare -gp GOLDEN -mp MINE``).

    Parameters
    ----------
    golden, mine : path, Dump, RunResult or mapping
        Dump directories (with or without manifest), single ``.npy`` files,
        loaded dumps, run results or dicts name -> array.
    fmt : Format or str, optional
        Storage format for the ULP columns (default: mine's manifest dtype,
        else each array's own format).
    thresholds : Thresholds, optional
        Failure rule for ``Accuracy Reached or Not`` and the first divergence.
    chunk_elems : int
        Elements per streaming chunk.
    verify : bool
        Verify SHA-256 checksums of manifest dumps (bad files become rows).

    Returns
    -------
    CompareReport
        ``rows`` in topological order (when a manifest gives it), with
        ``error_origin`` and ``first_divergence`` set.  Never raises for bad
        data; problems are rows with a ``cmp_fail_reason``.
    """
    th = thresholds or Thresholds()
    if not isinstance(th, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds or None, got {type(th).__name__}")
    if isinstance(chunk_elems, bool) or not isinstance(chunk_elems, (int, np.integer)) or chunk_elems < 1:
        raise ValueError(f"chunk_elems={chunk_elems!r} is not valid; it must be an int >= 1")
    if fmt is not None:
        fmt = get_format(fmt)  # a bad name fails here, not as one failed row per node
    gd = load_dump(golden, verify=verify, strict=False) if isinstance(golden, (str, os.PathLike)) \
        else as_dump(golden, "golden")
    md = load_dump(mine, verify=verify, strict=False) if isinstance(mine, (str, os.PathLike)) \
        else as_dump(mine, "mine")
    if _single_file(gd) and _single_file(md) and gd.names != md.names:
        # two single .npy files (msit -gp/-mp FILE): compared with each other
        # whatever their names, under mine's name
        (gname,), (mname,) = gd.names, md.names
        gd.entries = {mname: DumpEntry(mname, gd.entries[gname].path, {})}
    if fmt is None:
        fmt = md.storage_format
    blocks, member_of = _block_maps(md, gd)
    decomposed: dict[str, str] = {}
    for d in (gd, md):
        dec = (d.manifest or {}).get("decomposed") or {}
        if isinstance(dec, Mapping):
            decomposed.update({str(k): str(v) for k, v in dec.items()})

    lists = [d.order for d in (md, gd) if d.manifest and d.manifest.get("order")]
    graph_nodes = {k for lst in lists for k in lst}

    def keyed(d: Dump) -> dict[str, str]:
        # a dump named after a fused block (not after a graph node of the same
        # name, e.g. a node "b1" next to block "b1") stands for its last member
        out = {}
        for name in d.entries:
            key = blocks[name]["members"][-1] if name in blocks and name not in graph_nodes else name
            out.setdefault(key, name)
        return out

    gk, mk = keyed(gd), keyed(md)
    order = _merge_orders(lists)
    seen = set(order)
    order.extend(sorted((set(gk) | set(mk)) - seen, key=natural_key))

    def info(name: str) -> dict:
        i = gd.node_info(name) or md.node_info(name)
        return i

    rows: list[dict] = []
    notes = [*gd.notes, *md.notes]
    for side, d in (("golden", gd), ("my", md)):
        if len(d) == 0:
            rows.append(_blank_row(
                node="", match=f"empty_{side}",
                cmp_fail_reason=f"{side} path {str(d.path)!r} contains no dumped arrays (.npy files).",
                **{f"{side}_path": str(d.path)},
            ))
    for key in order:
        gname, mname = gk.get(key), mk.get(key)
        meta = info(key)
        block = member_of.get(key, "")
        base = {
            "node": key, "op": meta.get("op", ""), "category": meta.get("category") or "",
            "block": block or "",
        }
        if gname is None and mname is None:
            if key in decomposed and decomposed[key] != key and gname is None:
                comp = decomposed[key]
                rows.append(_blank_row(
                    **base, match="decomposed",
                    cmp_fail_reason=f"internal node of composite {comp} (decomposed by the fused "
                                    f"compiler); fused into block {block or '-'}; compared at {comp}.",
                ))
            elif block and key not in _block_outputs(blocks, block):
                outs = ", ".join(_block_outputs(blocks, block))
                rows.append(_blank_row(
                    **base, match="inside_block",
                    cmp_fail_reason=f"fused into block {block}; no dump of its own, the block output "
                                    f"is compared at node {outs}.",
                ))
            continue
        if gname is not None and mname is not None:
            row = _compare_pair(gd, gname, md, mname, fmt, th, chunk_elems)
            row.update(base, match="matched")
            if mname != key:
                row["cmp_fail_reason"] = (f"my {mname} (block output) matched to its last member {key}. "
                                          + row.get("cmp_fail_reason", "")).strip()
        elif gname is not None:
            b_mine = member_of.get(key)
            if b_mine and key not in _block_outputs(blocks, b_mine):
                outs = ", ".join(_block_outputs(blocks, b_mine))
                row = _blank_row(**base, match="inside_block",
                                 cmp_fail_reason=f"fused into block {b_mine}; no dump of its own in my "
                                                 f"data, the block output is compared at node {outs}.")
            else:
                row = _blank_row(**base, match="missing_mine",
                                 cmp_fail_reason="No my data matched (node missing from my dump).")
            row["golden_path"] = _path_of(gd, gname)
            _add_problem(row, gd, gname, "golden")
        elif key in decomposed and decomposed[key] != key:
            comp = decomposed[key]
            row = _blank_row(**base, match="decomposed",
                             cmp_fail_reason=f"internal node of composite {comp} (decomposed by the "
                                             f"fused compiler, not run by the golden side); compared "
                                             f"at {comp}.")
            row["my_path"] = _path_of(md, mname)
        else:
            row = _blank_row(**base, match="missing_golden",
                             cmp_fail_reason="No bench data matched (node missing from golden dump).")
            row["my_path"] = _path_of(md, mname)
            _add_problem(row, md, mname, "my")
        rows.append(row)
    for i, r in enumerate(rows):
        r["index"] = i
    report = CompareReport(rows, str(gd.path), str(md.path), th, notes)
    _mark_origins(report, gd, md, blocks, member_of, set(decomposed.values()))
    return report


def _single_file(d: Dump) -> bool:
    return d.manifest is None and d.path.is_file() and len(d.entries) == 1


def _merge_orders(lists: list[list[str]]) -> list[str]:
    """Merge topological orders: the longest first, then every name missing
    from it inserted right after its predecessor in its own list."""
    if not lists:
        return []
    lists = sorted(lists, key=len, reverse=True)
    out = list(dict.fromkeys(lists[0]))
    pos = {k: i for i, k in enumerate(out)}
    for lst in lists[1:]:
        prev = None
        for k in lst:
            if k not in pos:
                at = 0 if prev is None else out.index(prev) + 1
                out.insert(at, k)
                pos = {kk: i for i, kk in enumerate(out)}
            prev = k
    return out


def _block_outputs(blocks: dict, bname: str) -> list[str]:
    b = blocks[bname]
    return list(b.get("outputs") or b["members"][-1:])


def _path_of(d: Dump, name: str) -> str:
    p = d.entries[name].path
    return str(p) if p is not None else f"{d.path}:{name}"


def _add_problem(row: dict, d: Dump, name: str, side: str) -> None:
    prob = d.entries[name].problem
    if prob:
        row["cmp_fail_reason"] = (row["cmp_fail_reason"] + f" {side} data: {prob}").strip()


def _blank_row(**kw) -> dict:
    row = dict.fromkeys(COLUMNS, "")
    row.update(kw)
    return row


def _compare_pair(gd: Dump, gname: str, md: Dump, mname: str, fmt, th, chunk) -> dict:
    row = _blank_row(golden_path=_path_of(gd, gname), my_path=_path_of(md, mname))
    arrays = {}
    reasons = []
    for side, d, name in (("golden", gd, gname), ("my", md, mname)):
        try:
            arrays[side] = d.array(name)
        except DumpError as exc:
            reasons.append(f"{side} data: {exc.problems.get(name, str(exc))}")
        except Exception as exc:  # anything else a damaged file can raise
            reasons.append(f"{side} data unreadable: {type(exc).__name__}: {exc}")
    if reasons:
        for side in ("golden", "my"):
            if side in arrays:
                row[f"{side}_dtype"] = format_name(arrays[side].dtype)
                row[f"{side}_shape"] = list(arrays[side].shape)
        row["cmp_fail_reason"] = " ".join(reasons)
        return row
    row_fmt = fmt
    if row_fmt is None:
        dt = md.entries[mname].meta.get("dtype")
        try:
            row_fmt = get_format(dt) if dt else None
        except (TypeError, ValueError):
            row_fmt = None
    try:
        row.update(compare_arrays(arrays["golden"], arrays["my"], fmt=row_fmt, thresholds=th,
                                  chunk_elems=chunk))
    except Exception as exc:  # e.g. an I/O error while reading a truncated memory map
        row["cmp_fail_reason"] = f"compare failed: {type(exc).__name__}: {exc}"
    return row


def _mark_origins(report: CompareReport, gd: Dump, md: Dump, blocks, member_of,
                  composites: set | frozenset = frozenset()) -> None:
    """Fill ``error_origin`` / ``inputs`` and ``report.first_divergence``."""
    th = report.thresholds
    by_node = {r["node"]: r for r in report.rows if r["node"]}

    def node_inputs(name: str) -> list[str]:
        i = gd.node_info(name) or md.node_info(name)
        return list(i.get("inputs") or [])

    def direct_inputs(key: str) -> list[str]:
        if key in composites:
            # a composite the fused side decomposed: its own inputs, as the
            # side that ran it whole records them
            for d in (gd, md):
                ins = d.node_info(key).get("inputs")
                if ins and not any(composites_of(i) == key for i in ins):
                    return list(ins)
        r = by_node.get(key)
        b = r.get("block") if r else None
        if b and b in blocks and key in blocks[b]["members"]:
            # a fused block output: the block's external inputs read by the
            # members up to this one
            mem_list = blocks[b]["members"]
            upto = mem_list[: mem_list.index(key) + 1]
            members = set(mem_list)
            out = []
            for mem in upto:
                for i in node_inputs(mem):
                    if i not in members and i not in out:
                        out.append(i)
            return out
        return node_inputs(key)

    dec_map: dict[str, str] = {}
    for d in (gd, md):
        dm = (d.manifest or {}).get("decomposed") or {}
        if isinstance(dm, Mapping):
            dec_map.update({str(k): str(v) for k, v in dm.items()})

    def composites_of(name: str) -> str | None:
        return dec_map.get(name) if dec_map.get(name) != name else None

    memo: dict[str, list[str]] = {}

    def effective(name: str, depth: int = 0) -> list[str]:
        """Nearest ancestors (or itself) that have a compared row."""
        if name in memo:
            return memo[name]
        r = by_node.get(name)
        if r is not None and th.fails(r) is not None:
            memo[name] = [name]
            return memo[name]
        memo[name] = []  # cycle guard
        if depth > 10000:  # pragma: no cover
            return []
        out: list[str] = []
        for i in node_inputs(name):
            for e in effective(i, depth + 1):
                if e not in out:
                    out.append(e)
        memo[name] = out
        return out

    has_graph = any(
        (d.manifest or {}).get("order") or any((d.node_info(n) or {}).get("inputs") for n in d.entries)
        for d in (gd, md)
    )
    if not has_graph:
        # plain folders: no edges, so introduced-vs-carried cannot be told apart
        first = next((r for r in report.rows if r["node"] and th.fails(r)), None)
        if first is not None:
            first["error_origin"] = "first_failing"
            report.notes.append(
                "no graph information (no manifest with node inputs): the first failing node in "
                "name order is reported; whether its error is introduced or carried needs a manifest."
            )
        report.first_divergence = first
        return

    first = None
    for r in report.rows:
        key = r["node"]
        if not key:
            continue
        ins = direct_inputs(key)
        r["inputs"] = " ".join(ins)
        f = th.fails(r)
        if not f:
            continue
        eff: list[str] = []
        for i in ins:
            for e in effective(i):
                if e not in eff:
                    eff.append(e)
        if any(th.fails(by_node[e]) for e in eff):
            r["error_origin"] = "carried"
        else:
            r["error_origin"] = "introduced"
            unknown = [i for i in ins if by_node.get(i, {}).get("match") == "matched"
                       and th.fails(by_node[i]) is None]
            if unknown:  # an input that could not be compared may be where it started
                r["cmp_fail_reason"] = (r["cmp_fail_reason"] + f" Input(s) {', '.join(unknown)} could "
                                        "not be compared: the error may be introduced there.").strip()
            differ = [(_to_float(by_node[e].get("bitwise_equal_ratio")), e) for e in eff
                      if _to_float(by_node[e].get("bitwise_equal_ratio")) < 1.0]
            if differ:  # passing inputs that still differ: the node may only amplify their error
                share, worst = min(differ)
                r["cmp_fail_reason"] = (
                    r["cmp_fail_reason"] + f" Its inputs pass but are not bit-identical (bitwise-equal "
                    f"share {share:.3g} at {worst}): the error may be theirs, amplified here; running the "
                    "node on golden inputs (numlab bisect, stage 'ranges') tells."
                ).strip()
            if first is None:
                first = r
    report.first_divergence = first


def report_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """The CSV file a report goes to: ``path`` itself when it ends in ``.csv``,
    else ``path/numlab_cmp_report_<UTC timestamp>.csv`` (as msit's ``-o``);
    parent directories are created.

    Raises
    ------
    FileExistsError
        The file exists and ``force`` is False (checked before any compare
        runs when the CLI calls this first).
    """
    p = Path(path)
    if p.suffix.lower() != ".csv":
        if p.exists() and not p.is_dir():
            raise FileExistsError(f"output {str(p)!r} exists and is not a directory; give a .csv file "
                                  "or a directory for numlab_cmp_report_<time>.csv")
        p.mkdir(parents=True, exist_ok=True)
        p = p / f"numlab_cmp_report_{time.strftime('%Y%m%d%H%M%S', time.gmtime())}.csv"
    else:
        p.parent.mkdir(parents=True, exist_ok=True)
    if p.exists() and not force:
        raise FileExistsError(f"report {str(p)!r} already exists; pass force=True (CLI: --force)")
    return p


class CompareReport:
    """The result of :func:`compare_dumps`: rows (dicts keyed by
    :data:`COLUMNS`) in topological order, and the first divergence."""

    def __init__(self, rows: list[dict], golden: str, mine: str, thresholds: Thresholds,
                 notes: list[str] | None = None):
        self.rows = rows
        self.golden = golden
        self.mine = mine
        self.thresholds = thresholds
        self.notes = list(notes or [])
        self.first_divergence: dict | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def row(self, node: str) -> dict:
        """The row of ``node``; KeyError lists the nodes."""
        for r in self.rows:
            if r["node"] == node:
                return r
        raise KeyError(f"node {node!r} has no row; nodes: {[r['node'] for r in self.rows]}")

    @property
    def compared(self) -> list[dict]:
        """Rows with metrics."""
        return [r for r in self.rows if r.get("Accuracy Reached or Not") in ("Yes", "No")]

    @property
    def failing(self) -> list[dict]:
        return [r for r in self.rows if self.thresholds.fails(r)]

    @property
    def uncompared(self) -> list[dict]:
        """Rows matched on both sides that have no metrics: unreadable,
        corrupt or missing files, empty or unsupported data (the reason is in
        ``cmp_fail_reason``)."""
        return [r for r in self.rows if r["match"] == "matched" and self.thresholds.fails(r) is None]

    def column(self, name: str, rows: list[dict] | None = None) -> np.ndarray:
        """A numeric column as float64 (NaN where empty), over ``rows``
        (default: the compared rows)."""
        if name not in COLUMNS:
            raise ValueError(f"column={name!r} is not a report column; valid: {COLUMNS}")
        rows = self.compared if rows is None else rows
        return np.array([_to_float(r.get(name)) for r in rows], dtype=np.float64)

    # -- output ------------------------------------------------------------
    def to_csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: _cell(r.get(k, "")) for k in COLUMNS})
        return buf.getvalue()

    def to_csv(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        """Write the report as CSV (atomically).  ``path`` ending in ``.csv`` is
        the file; otherwise a directory that gets
        ``numlab_cmp_report_<UTC timestamp>.csv`` (as msit's ``-o`` does).
        An existing file is never overwritten unless ``force``."""
        p = report_path(path, force=force)
        atomic_write_bytes(p, self.to_csv_text().encode())
        return p

    def summary(self) -> str:
        n_cmp = len(self.compared)
        kinds: dict[str, int] = {}
        for r in self.rows:
            kinds[r["match"]] = kinds.get(r["match"], 0) + 1
        lines = [
            f"golden: {self.golden}",
            f"mine:   {self.mine}",
            f"{len(self.rows)} rows: " + ", ".join(f"{v} {k}" for k, v in kinds.items())
            + f"; {n_cmp} compared, {len(self.failing)} failing",
        ]
        unc = self.uncompared
        if unc:
            lines.append(f"{len(unc)} matched node(s) could not be compared (unreadable, corrupt or "
                         f"empty data; see cmp_fail_reason): " + ", ".join(r["node"] for r in unc[:8])
                         + (" ..." if len(unc) > 8 else ""))
        fd = self.first_divergence
        if fd is None:
            lines.append("first divergence: none (no node crosses the thresholds with passing inputs)")
        else:
            lines.append(
                f"first divergence: {fd['node']} (op {fd['op'] or '?'}"
                + (f", block {fd['block']}" if fd["block"] else "")
                + f"): cosine {_fmt(fd['cosine_similarity'], 8)}, max rel err "
                f"{_fmt(fd['max_relative_error'])}, max ulp {_fmt(fd['max_ulp_error'])} -- "
                + ("error introduced here, inputs pass (" + (fd['inputs'] or 'graph inputs') + ")"
                   if fd["error_origin"] == "introduced" else "first failing node (no graph edges known)")
            )
        lines.extend(self.notes)
        return "\n".join(lines)

    def table(self, max_rows: int | None = 60) -> str:
        """A readable fixed-width table of the main columns."""
        head = (f"{'#':>3} {'node':<18} {'op':<11} {'block':<9} {'cosine':>10} {'max_rel':>10} "
                f"{'max_abs':>10} {'max_ulp':>9} {'bits=':>6} {'acc':>4} {'origin':<10} reason")
        out = [head, "-" * len(head)]
        rows = self.rows if max_rows is None else self.rows[:max_rows]
        for r in rows:
            out.append(
                f"{r['index']:>3} {str(r['node'])[:18]:<18} {str(r['op'])[:11]:<11} "
                f"{str(r['block'])[:9]:<9} {_fmt(r['cosine_similarity'], 8):>10} "
                f"{_fmt(r['max_relative_error']):>10} {_fmt(r['MaxAbsErr']):>10} "
                f"{_fmt(r['max_ulp_error'], 3):>9} {_fmt(r['bitwise_equal_ratio'], 2):>6} "
                f"{str(r['Accuracy Reached or Not'] or '-')[:4]:>4} {r['error_origin'] or '':<10} "
                f"{str(r['cmp_fail_reason'])[:70]}"
            )
        if max_rows is not None and len(self.rows) > max_rows:
            out.append(f"... {len(self.rows) - max_rows} more rows (see the CSV)")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.summary() + "\n" + self.table()

    def _repr_html_(self) -> str:  # pragma: no cover - notebook display
        import html

        return "<pre>" + html.escape(str(self)) + "</pre>"


def _to_float(v) -> float:
    if v is None or v == "":
        return np.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def _fmt(v, digits: int = 3) -> str:
    if v is None or v == "":
        return "-"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if digits >= 6 and np.isfinite(f) and abs(f) <= 1:
        return f"{f:.{digits}f}"
    return f"{f:.{digits}g}"


def _cell(v):
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return str(list(v))
    return v
