"""The report's columns and the failure rule of a row (:class:`Thresholds`).

Column formulas: :mod:`numlab.compare.compare` (module docstring) and
:class:`numlab.metrics.CompareAccumulator`, which computes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .. import metrics

__all__ = ["MSIT_COLUMNS", "MSPROBE_COLUMNS", "COLUMNS", "Thresholds"]

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

    cosine: float = metrics.MSPROBE_THRESHOLDS["cosine"]
    max_abs_err: float = metrics.MSPROBE_THRESHOLDS["max_abs_err"]
    cosine_min: float = metrics.MSPROBE_THRESHOLDS["cosine_min"]
    max_abs_err_max: float = metrics.MSPROBE_THRESHOLDS["max_abs_err_max"]
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
        and MaxAbsErr with these thresholds: the rule is
        :func:`numlab.metrics.msprobe_accuracy_reached` (NaN or inf in
        either gives ``No``)."""
        ok = metrics.msprobe_accuracy_reached(
            cosine, max_abs_err, cosine=self.cosine, max_abs_err_threshold=self.max_abs_err,
            cosine_min=self.cosine_min, max_abs_err_max=self.max_abs_err_max,
        )
        return "Yes" if ok else "No"

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
