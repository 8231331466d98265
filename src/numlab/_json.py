"""Strict JSON for the files numlab writes: every reader (``jq``, JavaScript, pandas'
``read_json``) parses them.  Non-finite numbers become the strings ``"nan"``, ``"inf"``
and ``"-inf"`` (the CSVs' spelling), never the ``NaN``/``Infinity`` tokens that
Python's :mod:`json` emits by default and strict parsers refuse."""

from __future__ import annotations

import json
import math

import numpy as np

__all__ = ["plain", "dumps"]


def _float(v: float):
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def plain(obj):
    """``obj`` with numpy scalars as Python ones, tuples and sets as lists and
    non-finite floats as strings (recursively; other objects are left to ``default``)."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [plain(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _float(float(obj))
    return obj


def dumps(obj, **kw) -> str:
    """``json.dumps`` of :func:`plain` ``(obj)`` with ``allow_nan=False``."""
    return json.dumps(plain(obj), allow_nan=False, **kw)
