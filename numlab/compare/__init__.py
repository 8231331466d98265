"""Accuracy compare in the msit/msprobe style.

* :mod:`numlab.compare.dump` -- per-node ``.npy`` dumps with a manifest
  (atomic writes, checksums): :func:`dump_run`, :func:`write_dump`,
  :func:`load_dump`.
* :mod:`numlab.compare.compare` -- node-by-node compare of two dumps with
  msit's and msprobe's columns, fused-block matching and the first divergence:
  :func:`compare_dumps`, :func:`compare_arrays`, :class:`Thresholds`.
* :mod:`numlab.compare.bisect` -- what causes a divergence: fusion kinds off,
  the four sources switched to eager's choice, delta debugging over node
  ranges; and the graph-mode precision workflow (:func:`precision_workflow`).

CLI: ``numlab run ... --dump DIR``, ``numlab compare -gp G -mp M -o OUT``,
``numlab bisect MODEL ...``.
"""

from __future__ import annotations

import importlib

from .compare import (
    COLUMNS,
    MSIT_COLUMNS,
    MSPROBE_COLUMNS,
    CompareReport,
    Thresholds,
    as_dump,
    compare_arrays,
    compare_dumps,
)
from .dump import (
    MANIFEST,
    Dump,
    DumpEntry,
    DumpError,
    dump_run,
    file_name_for,
    load_dump,
    write_dump,
)

_LAZY = {
    "bisect": "numlab.compare.bisect",
    "BisectReport": ("numlab.compare.bisect", "BisectReport"),
    "bisect_run": ("numlab.compare.bisect", "bisect_run"),
    "precision_workflow": ("numlab.compare.bisect", "precision_workflow"),
    "WorkflowReport": ("numlab.compare.bisect", "WorkflowReport"),
}

__all__ = [
    "COLUMNS", "MSIT_COLUMNS", "MSPROBE_COLUMNS", "CompareReport", "Thresholds", "as_dump",
    "compare_arrays", "compare_dumps", "MANIFEST", "Dump", "DumpEntry", "DumpError", "dump_run",
    "file_name_for", "load_dump", "write_dump", *_LAZY,
]


def __getattr__(name: str):
    # bisect needs the executors (a higher layer's dependency); import it lazily
    if name in _LAZY:
        target = _LAZY[name]
        if isinstance(target, str):
            val = importlib.import_module(target)
        else:
            val = getattr(importlib.import_module(target[0]), target[1])
        globals()[name] = val
        return val
    raise AttributeError(f"module 'numlab.compare' has no attribute {name!r}")
