"""Accuracy compare in the msit/msprobe style.

* :mod:`numlab.compare.dump` -- per-node ``.npy`` dumps with a manifest
  (atomic writes, checksums): :func:`dump_run`, :func:`write_dump`,
  :func:`load_dump`.
* :mod:`numlab.compare.compare` -- node-by-node compare of two dumps with
  msit's and msprobe's columns, fused-block matching and the first divergence
  (formulas in its docstring), re-exporting the pieces it is built from:
  :mod:`~numlab.compare.columns` (:data:`COLUMNS`, :class:`Thresholds`),
  :mod:`~numlab.compare.stream` (:func:`compare_arrays`, chunked over
  memory-mapped arrays with :class:`numlab.metrics.CompareAccumulator`),
  :mod:`~numlab.compare.match` (:func:`compare_dumps`, :func:`as_dump`) and
  :mod:`~numlab.compare.table` (:class:`CompareReport`, CSV).
* :mod:`numlab.compare.layouts` -- the dump layouts msprobe and msit read
  and write (msprobe's ``dump.json`` + ``.pt``, msit's ``model_tree.json``
  tree): :func:`write_msprobe_dump`, :func:`write_msit_dump`,
  :func:`load_any` (any layout; what :func:`compare_dumps` uses).
* :mod:`numlab.compare.flavors` -- msit 8.2.0's, mindstudio-probe 8.3.3's
  and 26.2.0's columns computed as each tool does (:data:`FLAVORS`;
  ``compare_dumps(flavor=...)``, ``numlab compare --flavor``); the
  differences are in docs/compare.md.
* :mod:`numlab.compare.bisect` -- what causes a divergence: fusion kinds off,
  the four sources switched to eager's choice, delta debugging over node
  ranges; and the graph-mode precision workflow (:func:`precision_workflow`).

CLI: ``numlab run ... --dump DIR``, ``numlab compare -gp G -mp M -o OUT``,
``numlab bisect MODEL ...``.
"""

from __future__ import annotations

from .._lazy import lazy_loader
from .compare import (
    COLUMNS,
    DEFAULT_CHUNK,
    MSIT_COLUMNS,
    MSPROBE_COLUMNS,
    CompareReport,
    Thresholds,
    as_dump,
    compare_arrays,
    compare_dumps,
    report_path,
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
from .flavors import FLAVORS
from .layouts import load_any, write_msit_dump, write_msprobe_dump

# bisect runs the executors (a higher layer): imported on first use
_LAZY = {"bisect": "numlab.compare.bisect"}
_LAZY_ATTRS = {
    "BisectReport": ("numlab.compare.bisect", "BisectReport"),
    "bisect_run": ("numlab.compare.bisect", "bisect_run"),
    "precision_workflow": ("numlab.compare.bisect", "precision_workflow"),
    "WorkflowReport": ("numlab.compare.bisect", "WorkflowReport"),
}

__all__ = [
    "COLUMNS", "MSIT_COLUMNS", "MSPROBE_COLUMNS", "DEFAULT_CHUNK", "CompareReport", "Thresholds",
    "as_dump", "compare_arrays", "compare_dumps", "report_path", "MANIFEST", "Dump", "DumpEntry",
    "DumpError", "dump_run", "file_name_for", "load_dump", "write_dump", "FLAVORS", "load_any",
    "write_msprobe_dump", "write_msit_dump", *_LAZY, *_LAZY_ATTRS,
]

__getattr__, __dir__ = lazy_loader(globals(), _LAZY, _LAZY_ATTRS)
