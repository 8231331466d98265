"""Summaries of a pair of tensors: every msit/msprobe column in one streaming pass
(:class:`CompareAccumulator`, :func:`compare_columns`) and the bundle of all metrics
(:func:`error_stats`)."""

from __future__ import annotations

import math

import numpy as np

from ..formats import Format, get_format
from ._errors import (
    _EPS64,
    _EXTRA_FLOATS,
    _expm1_minus_x,
    _log1p_minus_x,
    _masks,
    _msit_abs,
    _msit_mask,
    _msit_rel,
    _msprobe_rel,
    _pair,
    abs_error,
    bitwise_equal,
    bitwise_equal_share,
    cosine_similarity,
    error_ratio,
    euclidean,
    kl_divergence,
    percentile,
    ref_ulp,
    rel_error,
    relative_euclidean,
    rmse,
    ulp_distance,
    ulp_error,
    ulp_shares,
)


# --------------------------------------------------------------------------
# all msit/msprobe columns in one streaming pass
# --------------------------------------------------------------------------
def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Dot product by numpy's own (single-threaded, deterministic) loop, not
    a multithreaded BLAS whose summation order depends on the thread count."""
    return float(np.einsum("i,i->", a, b))


def _safe(c: float) -> bool:
    """Whether sums of squares of values up to ``c`` in magnitude can be
    formed unscaled in float64 (no overflow, no underflow)."""
    return 1e-100 < c < 1e100


class CompareAccumulator:
    """The msit/msprobe/ULP columns of two tensors, fed in chunks.

    Feed equal-length 1-d chunks of the flattened golden (``g``) and mine
    (``m``) arrays with :meth:`update` (any numeric dtype; widened exactly to
    float64), then :meth:`finish` returns the columns.  This is what
    :func:`numlab.compare.compare_arrays` streams memory-mapped dumps
    through (O(chunk) memory); :func:`compare_columns` is the one-shot form.

    * Elementwise columns use this module's formulas (``_msit_rel``,
      ``_msit_abs``, ``_msprobe_rel``, the ulp of :func:`ref_ulp`): max and
      counts do not depend on the chunking; a mean is a sum of per-chunk
      sums (so it can differ in the last bits between chunkings).  With one
      chunk every elementwise column equals the one-shot function
      (:func:`msit_relative_error`, :func:`msit_absolute_error`,
      :func:`msprobe_relative_error`, :func:`error_ratio`, :func:`ulp_error`)
      bit for bit (tested).
    * Aggregates (cosine, Euclidean distances, KL over the flattened tensor)
      are accumulated in float64 with running scales (LAPACK ``dnrm2``
      style, no overflow or underflow) and an online log-sum-exp; they agree
      with :func:`cosine_similarity`, :func:`euclidean`,
      :func:`relative_euclidean` and :func:`kl_divergence` (of the flattened
      tensors, ``nonfinite="zero_matching"``) to rounding.
    * NaN/inf follow msprobe's ``handle_inf_nan``: pairs with the same class
      at the same position are set to 0 on both sides (counted); any other
      non-finite pair is a mismatch and makes every error column NaN.

    Parameters
    ----------
    fmt : Format or str
        Format of the ULP columns (``|m - g| / ulp_fmt(g)``).
    """

    def __init__(self, fmt: Format | str = "fp32"):
        self.fmt = get_format(fmt)
        self.n = 0
        self.bits_equal = 0
        self.g_nan = self.g_inf = self.m_nan = self.m_inf = 0
        self.mismatch = 0
        self.matched_nonfinite = 0
        self.g_max = self.m_max = -np.inf
        self.g_min = self.m_min = np.inf
        self.g_sum = self.m_sum = 0.0
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
        self.Zg = self.Sg = self.Zm = 0.0
        # KL's stable form on d - c (c: the first chunk's p-weighted mean of
        # d = m - g; KL is shift invariant): Sg = sum e^(g-Mg) (d - c),
        # Bg = sum e^(g-Mg) (expm1(d - c) - (d - c)), without cancellation
        self.c: float | None = None
        self.Bg = 0.0
        # sum of exp(g - Mg) * ((g - Mg) - (m - Mm)): KL's first term relative to
        # the running maxima, for when the two softmaxes are far apart
        self.T = 0.0

    def update(self, g, m) -> CompareAccumulator:
        """Add one chunk (1-d arrays of equal length); returns ``self``."""
        g, m = np.asarray(g), np.asarray(m)
        if g.shape != m.shape or g.ndim != 1:
            raise ValueError(f"chunks must be 1-d of equal length, got {g.shape} and {m.shape}")
        if g.size == 0:
            return self
        for side, a in (("golden", g), ("mine", m)):
            if a.dtype.kind not in "biuf" and a.dtype not in _EXTRA_FLOATS:
                raise TypeError(f"{side} chunk has dtype {a.dtype}; valid: floats, fp8, "
                                "integers, bool")
        g = g.view(np.uint8) if g.dtype.kind == "b" else g
        m = m.view(np.uint8) if m.dtype.kind == "b" else m
        self.n += g.size
        self.bits_equal += int(np.count_nonzero(bitwise_equal(g, m)))
        # plain widening (integers beyond 2**53 round, as msprobe's float64 does)
        self._update(g.astype(np.float64), m.astype(np.float64))
        return self

    def _update(self, g: np.ndarray, m: np.ndarray) -> None:
        """One chunk in float64: value statistics, NaN/inf classes, the
        elementwise columns, then the aggregates (``_aggregates``)."""
        with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf: NaN, as IEEE says
            sum_g, sum_m = float(np.sum(g)), float(np.sum(m))
        if math.isfinite(sum_g) and math.isfinite(sum_m):
            nonfin = None  # a finite sum means no NaN/inf in the chunk
        else:
            gn, mn = np.isnan(g), np.isnan(m)
            gi, mi = np.isinf(g), np.isinf(m)
            self.g_nan += int(np.count_nonzero(gn))
            self.m_nan += int(np.count_nonzero(mn))
            self.g_inf += int(np.count_nonzero(gi))
            self.m_inf += int(np.count_nonzero(mi))
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
        # elementwise columns: this module's formulas
        d = m - g
        ad = np.abs(d)
        ag = np.abs(g)
        dmax = float(ad.max())
        self.maxabs = max(self.maxabs, dmax)
        mask = _msit_mask(g)
        q = _msit_rel(g, m, mask)
        self.msit_maxrel = max(self.msit_maxrel, float(q.max()))
        self.msit_sumrel += float(q.sum())
        q = _msit_abs(ad, mask)
        self.msit_maxabs = max(self.msit_maxabs, float(q.max()))
        self.msit_sumabs += float(q.sum())
        q = _msprobe_rel(g, m, ad, ag)
        self.mp_maxrel = max(self.mp_maxrel, float(q.max()))
        self.cnt_1e3 += int(np.count_nonzero(q < 0.001))
        self.cnt_5e3 += int(np.count_nonzero(q < 0.005))
        with np.errstate(over="ignore"):  # inf when the error dwarfs a subnormal ulp
            q = ad / ref_ulp(ag, self.fmt)
        self.max_ulp = max(self.max_ulp, float(q.max()))
        self.sum_ulp += float(q.sum())
        del q, ag, ad, mask
        self._aggregates(g, m, d, max(gmax, -gmin), max(mmax, -mmin), dmax)

    def _aggregates(self, g, m, d, cg: float, cm: float, dmax: float) -> None:
        """Sums of squares, the dot product and the KL sums of one chunk
        (``cg``, ``cm``, ``dmax``: the chunk's max |g|, |m|, |m - g|)."""
        self._ssq("g", g, cg)
        self._ssq("m", m, cm)
        self._ssq("d", d, dmax)
        sg, sm = self.scale["g"], self.scale["m"]
        if sg > 0 and sm > 0:
            if _safe(cg) and _safe(cm):
                self.dot += _dot(g, m) / sg / sm
            else:
                self.dot += _dot(g / sg, m / sm)
        # KL(softmax(g) || softmax(m)) over the flattened tensor, online
        # log-sum-exp; with delta = m - g and p = softmax(g):
        #   KL = log E_p[exp(delta)] - E_p[delta] = log1p(E_p[expm1(delta)]) - E_p[delta]
        # (no cancellation between two log-sum-exps of nearly equal size)
        gmax = float(np.max(g))
        if gmax > self.Mg:
            f = math.exp(self.Mg - gmax)
            if self.Zg > 0:  # (g - Mg_new) = (g - Mg_old) + (Mg_old - Mg_new)
                self.T = f * (self.T + (self.Mg - gmax) * self.Zg)
            self.Zg *= f
            self.Sg *= f
            self.Bg *= f
            self.Mg = gmax
        # log-sum-exp of m too, for when E_p[exp(delta)] under- or overflows
        mmax = float(np.max(m))
        if mmax > self.Mm:
            if self.Zg > 0:  # -(m - Mm_new) = -(m - Mm_old) + (Mm_new - Mm_old)
                self.T += (mmax - self.Mm) * self.Zg
            self.Zm *= math.exp(self.Mm - mmax)
            self.Mm = mmax
        eg = np.exp(g - self.Mg)
        self.Zg += float(eg.sum())
        if self.c is None:
            self.c = _dot(eg, d) / float(eg.sum())
        with np.errstate(over="ignore", invalid="ignore"):
            t = d - m  # TwoDiff: d + e == m - g exactly (no overflow)
            e = (m - (d - t)) - (g + t)
        dc = (d - self.c) + np.where(np.isfinite(e), e, 0.0)  # d - c exact where d ~ c
        self.Sg += _dot(eg, dc)
        with np.errstate(over="ignore", invalid="ignore"):
            self.Bg += _dot(eg, _expm1_minus_x(dc))
        self.T += _dot(eg, (g - self.Mg) - (m - self.Mm))
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
                acc += _dot(v, v) / old / old
            else:
                w = v / old
                acc += _dot(w, w)
        self.ssq[key] = acc

    def _norm(self, key: str) -> float:
        return self.scale[key] * math.sqrt(self.ssq[key])

    def _cosine(self, notes: list[str]) -> float:
        gnorm, mnorm = self._norm("g"), self._norm("m")
        if gnorm <= _EPS64 and mnorm <= _EPS64:
            return 1.0
        if mnorm <= _EPS64:
            notes.append("Cannot compare by Cosine Similarity, all the data is zero in my dump data.")
            return math.nan
        if gnorm <= _EPS64:
            notes.append("Cannot compare by Cosine Similarity, all the data is zero in golden dump data.")
            return math.nan
        return min(1.0, max(-1.0, self.dot / (math.sqrt(self.ssq["g"]) * math.sqrt(self.ssq["m"]))))

    def _kl(self) -> float:
        a, b = self.Sg / self.Zg, self.Bg / self.Zg
        s = a + b  # E_p[expm1(d - c)]
        if math.isfinite(s) and s > -0.5:
            # log1p(s) - a, = b + (log1p(s) - s) where the two would cancel
            kl = b + float(_log1p_minus_x(s)) if abs(s) < 0.25 else math.log1p(s) - a
        else:  # softmaxes far apart: KL = E_p[log p - log q] with both log-softmaxes
            # taken relative to their own maxima (no terms of the size of max|g|)
            kl = self.T / self.Zg + (math.log(self.Zm) - math.log(self.Zg))
        return max(kl, 0.0)

    def finish(self) -> tuple[dict, list[str]]:
        """``(columns, notes)``: the columns by their report names (msit's,
        msprobe's, ``max_ulp_error``/``mean_ulp_error``, value statistics,
        NaN/inf counts, ``bitwise_equal_ratio``) and the notes explaining
        NaN columns or zeroed NaN/inf.  Raises ValueError when nothing was fed."""
        n = self.n
        if n == 0:
            raise ValueError("CompareAccumulator.finish: no elements were fed (empty data)")
        gnan, mnan = bool(self.g_nan), bool(self.m_nan)
        notes: list[str] = []
        row = {
            "golden_max_value": np.nan if gnan else self.g_max,
            "golden_min_value": np.nan if gnan else self.g_min,
            "golden_mean_value": np.nan if gnan else self.g_sum / n,
            "my_max_value": np.nan if mnan else self.m_max,
            "my_min_value": np.nan if mnan else self.m_min,
            "my_mean_value": np.nan if mnan else self.m_sum / n,
            "golden_nan": self.g_nan, "golden_inf": self.g_inf,
            "my_nan": self.m_nan, "my_inf": self.m_inf,
            "nonfinite_mismatch": self.mismatch,
            "bitwise_equal_ratio": self.bits_equal / n,
        }
        gnorm, dnorm = self._norm("g"), self._norm("d")
        cols = {
            "cosine_similarity": self._cosine(notes),
            "max_relative_error": self.msit_maxrel,
            "mean_relative_error": self.msit_sumrel / n,
            "max_absolute_error": self.msit_maxabs,
            "mean_absolute_error": self.msit_sumabs / n,
            "kl_divergence": self._kl(),
            "relative_euclidean_distance": 0.0 if gnorm <= _EPS64 else dnorm / gnorm,
            "EucDist": dnorm,
            "MaxAbsErr": self.maxabs,
            "MaxRelativeErr": self.mp_maxrel,
            "One Thousandth Err Ratio": self.cnt_1e3 / n,
            "Five Thousandths Err Ratio": self.cnt_5e3 / n,
            "max_ulp_error": self.max_ulp,
            "mean_ulp_error": self.sum_ulp / n,
        }
        if self.mismatch:
            cols = dict.fromkeys(cols, np.nan)
            notes.append(
                f"The position of inf or nan in golden and my data do not match "
                f"({self.mismatch} of {n} elements; golden nan={self.g_nan} inf={self.g_inf}, "
                f"mine nan={self.m_nan} inf={self.m_inf})."
            )
        elif self.matched_nonfinite:
            notes.append(
                f"{self.matched_nonfinite} nan/inf at the same positions on both sides were set to 0 "
                "before comparing (msprobe handle_inf_nan)."
            )
        row.update(cols)
        return row, notes


def compare_columns(golden, mine, fmt: Format | str = "fp32") -> tuple[dict, list[str]]:
    """All columns of :class:`CompareAccumulator` for two whole arrays (one
    chunk; shapes must be equal, flattened in C order)."""
    g, m = np.asarray(golden), np.asarray(mine)
    if g.shape != m.shape:
        raise ValueError(f"golden and mine must have the same shape, got {g.shape} and {m.shape}")
    return CompareAccumulator(fmt).update(g.reshape(-1), m.reshape(-1)).finish()


# --------------------------------------------------------------------------
# the bundle
# --------------------------------------------------------------------------
def error_stats(ref, x, fmt: Format | str | None = None, *, tiny: float = 0.0) -> dict:
    """All metrics of ``x`` against ``ref`` in one dict.

    Keys
    ----
    ``n``; counts ``nan_ref``, ``nan_x``, ``inf_ref``, ``inf_x``,
    ``nonfinite_match``, ``nonfinite_mismatch``, ``n_finite``;
    ``abs_max``, ``abs_mean``, ``abs_p50``, ``abs_p99`` and the same for
    ``rel_`` (:func:`abs_error`, :func:`rel_error` with ``tiny``, nearest-rank
    percentiles, over all elements following the NaN/inf policy);
    ``bitwise_equal`` (share, :func:`bitwise_equal`); ``cosine``,
    ``kl_divergence``, ``relative_euclidean``, ``euclidean``, ``rmse``
    (``nonfinite="propagate"``); ``err_ratio_0.001`` and ``err_ratio_0.005``
    (msprobe's one-thousandth / five-thousandths ratios); and when ``fmt`` is
    given ``ulp_max``, ``ulp_mean``, ``ulp_p50``, ``ulp_p99`` (:func:`ulp_distance`
    to ``ref`` rounded to ``fmt``), ``ulp0``, ``ulp1``, ``ulp_ge2`` (shares),
    ``ulp_err_max`` (:func:`ulp_error`, fractional).
    Empty input gives NaN statistics and zero counts.
    """
    r, y = _pair(ref, x)
    m = _masks(r, y)
    n = r.size
    out: dict = {
        "n": n,
        "nan_ref": int(np.count_nonzero(np.isnan(r))),
        "nan_x": int(np.count_nonzero(np.isnan(y))),
        "inf_ref": int(np.count_nonzero(np.isinf(r))),
        "inf_x": int(np.count_nonzero(np.isinf(y))),
        "nonfinite_match": int(np.count_nonzero(m["match"])),
        "nonfinite_mismatch": int(np.count_nonzero(m["mismatch"])),
        "n_finite": int(np.count_nonzero(m["finite"])),
    }
    ae = abs_error(r, y)
    re_ = rel_error(r, y, tiny=tiny)
    for name, e in (("abs", ae), ("rel", re_)):
        out[f"{name}_max"] = float(e.max()) if n else math.nan
        out[f"{name}_mean"] = float(e.mean()) if n else math.nan
        out[f"{name}_p50"] = percentile(e, 50)
        out[f"{name}_p99"] = percentile(e, 99)
    out["bitwise_equal"] = bitwise_equal_share(r, y)
    out["cosine"] = cosine_similarity(r, y)
    out["kl_divergence"] = kl_divergence(r, y) if n else math.nan
    out["relative_euclidean"] = relative_euclidean(r, y)
    out["euclidean"] = euclidean(r, y)
    out["rmse"] = rmse(r, y)
    out["err_ratio_0.001"] = error_ratio(r, y, 1e-3) if n else math.nan
    out["err_ratio_0.005"] = error_ratio(r, y, 5e-3) if n else math.nan
    if fmt is not None:
        f = get_format(fmt)
        d = ulp_distance(r, y, f)
        out["ulp_max"] = float(d.max()) if n else math.nan
        out["ulp_mean"] = float(d.mean()) if n else math.nan
        out["ulp_p50"] = percentile(d, 50)
        out["ulp_p99"] = percentile(d, 99)
        out.update(ulp_shares(d))
        ue = ulp_error(r, y, f)
        out["ulp_err_max"] = float(ue.max()) if n else math.nan
    return out
