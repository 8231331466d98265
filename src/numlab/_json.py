"""Strict JSON for the files numlab writes: every reader (``jq``, JavaScript, pandas'
``read_json``) parses them.  Non-finite numbers become the strings ``"nan"``, ``"inf"``
and ``"-inf"`` (the CSVs' spelling), never the ``NaN``/``Infinity`` tokens that
Python's :mod:`json` emits by default and strict parsers refuse."""

from __future__ import annotations

import json
import math

import numpy as np

__all__ = ["plain", "dumps", "revive"]

_SPELLED = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _float(v: float):
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def plain(obj, default=None):
    """``obj`` with numpy scalars and arrays as Python numbers and lists, tuples and
    sets as lists, dict keys as strings and non-finite floats as strings
    (recursively); any other object becomes ``default(obj)`` when ``default`` is
    given, else stays as it is."""
    if isinstance(obj, dict):
        return {str(k): plain(v, default) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        obj = obj.tolist()
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [plain(v, default) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _float(float(obj))
    if obj is None or isinstance(obj, str) or default is None:
        return obj
    return plain(default(obj))


def dumps(obj, default=None, **kw) -> str:
    """``json.dumps`` of :func:`plain` ``(obj, default)`` with ``allow_nan=False``."""
    return json.dumps(plain(obj, default), allow_nan=False, **kw)


def revive(obj):
    """The inverse for numbers: the strings ``"nan"``, ``"inf"`` and ``"-inf"`` back to
    floats (recursively), for reading a file :func:`dumps` wrote."""
    if isinstance(obj, dict):
        return {k: revive(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [revive(v) for v in obj]
    return _SPELLED.get(obj, obj) if isinstance(obj, str) else obj
