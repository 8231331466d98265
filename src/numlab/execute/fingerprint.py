"""Canonical form of run knobs and the compile fingerprint of a run."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping

import numpy as np

from .. import __version__
from .._digest import sha256_hex
from ..formats import Format, get_format
from .values import stored_formats

__all__ = ["SCHEMA", "canonical", "fingerprint"]

SCHEMA = 3
"""Version of the fingerprint's contents, part of every fingerprint: raised when
what enters changes, so a fingerprint of one schema never equals one of another
(fingerprints saved under an earlier schema are recomputed, not compared)."""


def canonical(obj):
    """A JSON-able canonical form of ``obj`` that does not depend on the
    process, memory addresses or ``PYTHONHASHSEED``: dicts with sorted string
    keys, sets sorted, floats as ``float.hex`` (exact), arrays as dtype, shape
    and the sha256 of their bytes, dataclasses (formats included) as their
    type name and every field whose name does not start with ``_``.

    Raises
    ------
    TypeError
        For an object with no canonical form (its ``repr`` could hold an
        address).
    """
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return {"f": float(obj).hex()}
    if isinstance(obj, Format):
        return {"format": obj.name, **{f.name: canonical(getattr(obj, f.name))
                                       for f in dataclasses.fields(obj) if f.name != "name"}}
    if isinstance(obj, enum.Enum):
        return {"enum": type(obj).__name__, "value": canonical(obj.value)}
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        return {"array": str(a.dtype), "shape": list(a.shape), "sha256": sha256_hex(a)}
    if isinstance(obj, np.dtype):
        return {"dtype": str(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"__type__": type(obj).__name__}
        out.update((f.name, canonical(getattr(obj, f.name))) for f in dataclasses.fields(obj)
                   if not f.name.startswith("_"))
        return out
    if isinstance(obj, Mapping):
        return {"__map__": sorted([str(k), canonical(v)] for k, v in obj.items())}
    if isinstance(obj, set | frozenset):
        return {"__set__": sorted(json.dumps(canonical(v), sort_keys=True) for v in obj)}
    if isinstance(obj, list | tuple):
        return [canonical(v) for v in obj]
    if callable(obj) and hasattr(obj, "__qualname__"):
        return {"callable": f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"}
    raise TypeError(f"no canonical form for {type(obj).__name__} {obj!r}")


def fingerprint(graph, *, mode, fmt, kernels=None, library=None, fusion=None, align=()) -> str:
    """Compile fingerprint: sha256 (hex) of the canonical JSON of the graph
    (:meth:`numlab.graph.Graph.to_dict`, the graph's one canonical encoding:
    name, inputs, nodes with ops, attributes and shapes, outputs), the
    storage format, the mode, the kernel specs, the fusion options,
    ``align``, the numlab version and the schema (:data:`SCHEMA`); in the
    modes that store values, also the formats of the nodes written in a
    format other than S (:func:`numlab.execute.values.stored_formats`;
    empty when there are none, and in the reference mode).

    Input values and the schedule seed are run-time inputs and are not
    included (compile determinism vs execution determinism).
    """
    doc = {
        "schema": SCHEMA,
        "numlab": __version__,
        "graph": graph.to_dict(),
        "fmt": canonical(get_format(fmt, "fmt")),
        "mode": mode,
        "kernels": canonical(kernels),
        "library": canonical(library),
        "fusion": None if fusion is None else fusion.canonical(),
        "align": sorted(align),
        "stored": {k: canonical(v) for k, v in (stored_formats(graph) if mode != "reference" else {}).items()},
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()
