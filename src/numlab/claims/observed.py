"""A real kernel's outputs in place of numlab's fused run.

``claims.check(claim, graph_or_function, inputs=..., observed=...)`` checks a
claim on *given* data: the graph (or a function traced with the shapes of
``inputs``, or a registered model name), its inputs, and the outputs a real
kernel produced on them.  Eager and the fp64 reference come from numlab; the
observed outputs take the place of numlab's fused run.  This module turns what
the caller gave into checked arrays:

* :func:`resolve_graph` -- a :class:`~numlab.graph.Graph`, a traceable Python
  function (:func:`numlab.graph.as_graph`: traced with the shapes of the
  given inputs) or a registered model name (``numlab.zoo.MODELS``,
  :data:`~numlab.claims.EXTRA_MODELS`, ``"module:function"``);
* :func:`read_arrays` -- named arrays from a mapping, a ``.npz`` file or a
  directory of ``NAME.npy`` files (:func:`numlab.graph.read_arrays`, the one
  reader), or from a loaded dump (any object with ``names`` and
  ``array(name)``, such as the :class:`~numlab.compare.dump.Dump` of
  :func:`numlab.compare.layouts.load_any`, which reads numlab's, msprobe's
  and msit's layouts: ``numlab.claims`` and ``numlab.compare`` are independent
  layers, so a dump layout is read by the caller and passed in; the CLI's
  ``--observed`` does this);
* :func:`given_inputs` / :func:`observed_outputs` -- check names, shapes and
  dtypes against the graph (:func:`numlab.graph.load_inputs` for the inputs),
  with errors naming the argument, the array and what was expected.

Observed values must be values of the storage format S: an array in S's
container dtype (float16 for fp16, ``ml_dtypes.bfloat16`` for bf16, ...), or
a wider float array (a float32 copy, as msprobe and msit write) whose every
value is exactly representable in S.  Integer arrays are refused: a dump of
bf16 or fp8 bit patterns must be viewed as the format first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .. import graph as G
from ..formats import Format, get_format
from ..graph import Graph
from ..rounding import round_to
from .catalogue import all_models, get_model

__all__ = ["DUMP_MARKERS", "resolve_graph", "read_arrays", "given_inputs", "observed_outputs",
           "model_label"]

DUMP_MARKERS = {"manifest.json": "a numlab dump", "dump.json": "an msprobe dump", "model_tree.json": "an msit dump"}
"""Files that mark a dump layout :func:`read_arrays` does not read itself
(their arrays may be bit patterns, torch files or renamed): load such a
directory with ``numlab.compare.layouts.load_any(path)`` and pass the Dump."""


def _is_dump(obj) -> bool:
    return hasattr(obj, "array") and hasattr(obj, "names") and not isinstance(obj, Mapping)


def read_arrays(src, arg: str) -> dict:
    """Named arrays from ``src``: a loaded dump (``names`` + ``array(name)``),
    else :func:`numlab.graph.read_arrays` (a mapping, a ``.npz`` file, a
    directory of ``NAME.npy``).  A directory holding a dump layout's marker
    file (:data:`DUMP_MARKERS`) is refused, naming the loader to use.
    Errors name ``arg``."""
    if _is_dump(src):
        return {n: np.asarray(src.array(n)) for n in src.names}
    if isinstance(src, (str, os.PathLike)):
        p = Path(src)
        for marker, what in DUMP_MARKERS.items():
            if p.is_dir() and (p / marker).exists():
                raise ValueError(f"{arg} {str(p)!r} is {what} ({marker}); numlab.claims reads plain .npy "
                                 "directories and .npz files only: load it with "
                                 "numlab.compare.layouts.load_any(path) and pass the Dump (the CLI's --observed "
                                 "does this)")
        src = p
    return G.read_arrays(src, option=arg)


def model_label(model) -> str:
    """A printable name for ``model`` (a name, a Graph or a function)."""
    if isinstance(model, str):
        return model
    if isinstance(model, Graph):
        return model.name
    mod = getattr(model, "__module__", None)
    name = getattr(model, "__qualname__", getattr(model, "__name__", type(model).__name__))
    return f"{mod}:{name}" if mod and mod != "__main__" else name


def resolve_graph(model, inputs=None, sizes: dict | None = None) -> Graph:
    """The graph of ``model``: a registered model name (with ``sizes``), else
    :func:`numlab.graph.as_graph` (a Graph as given; a callable traced with
    the shapes of ``inputs``, which it then needs)."""
    if isinstance(model, str):
        try:
            return get_model(model, sizes)
        except TypeError as exc:
            if inputs is None or ":" not in model or "required positional argument" not in str(exc):
                raise
            raise TypeError(f"model {model!r} is not a factory of sizes returning a Graph ({exc}); to trace a "
                            "function with the shapes of inputs, pass the function itself (from module import "
                            "function), or use the CLI's --graph module:function") from None
    if sizes:
        raise ValueError(f"sizes={sizes!r}: a Graph or a traced function has fixed shapes; sizes apply to a "
                         "model name only")
    if not (isinstance(model, Graph) or callable(model)):
        raise TypeError(f"model must be a numlab Graph, a traceable function or a model name "
                        f"({sorted(all_models())} or 'module:function'), got {type(model).__name__}")
    return G.as_graph(model, inputs, option="inputs")


def given_inputs(graph: Graph, inputs, arg: str = "inputs", fmt="fp16") -> dict:
    """The inputs of ``graph`` from ``inputs`` (:func:`read_arrays`), checked
    by :func:`numlab.graph.load_inputs` (every graph input present, none
    extra, shapes equal); floating-point arrays must hold values of the
    storage format ``fmt`` (S; TypeError naming the input and a value S does
    not hold: a case is checked on exactly the given inputs, never on a
    rounded copy the kernel did not see) and are widened exactly to float64
    (a case's inputs); integer and bool arrays (indices, conditions) kept."""
    S: Format = get_format(fmt, "fmt")
    xs = G.load_inputs(read_arrays(inputs, arg), graph, option=arg)
    return {k: a if a.dtype.kind in "iub" else _as_storage(np.asarray(a), S, f"{arg}: input {k!r}",
                                                           "inputs").astype(np.float64)
            for k, a in xs.items()}


def observed_outputs(graph: Graph, observed, fmt, arg: str = "observed") -> dict:
    """The observed outputs of ``graph`` from ``observed`` (see
    :func:`read_arrays`; for a graph with one output also a bare array),
    checked against the graph's outputs and returned
    in S's container dtype, in the graph's output order.

    Every graph output must be present, with the output's shape.  A mapping,
    ``.npz`` or directory may hold graph inputs or other graph nodes too
    (a dump of a run does; they are ignored), nothing else; a loaded dump
    may hold anything (only the graph's outputs are read).  The dtype is
    S's container dtype, or a wider float whose values S represents exactly
    (a float32 copy); otherwise TypeError naming the output, its dtype and
    the first value S does not hold."""
    S: Format = get_format(fmt, "fmt")
    expect = {o: graph.shape(o) for o in graph.outputs}
    if isinstance(observed, np.ndarray):  # one array: the graph's only output, whatever its name
        if len(expect) != 1:
            raise ValueError(f"{arg}: one array given, but the graph has outputs {list(expect)}: give a dict "
                             "output -> array")
        observed = {graph.outputs[0]: observed}
    want = f"the graph's outputs (name: shape) are {expect}, stored in {S.name} ({np.dtype(S.container)})"
    if _is_dump(observed):  # read only the outputs (a dump may hold every tensor of a run)
        names = list(observed.names)
        missing = [o for o in expect if o not in set(names)]
        if missing:
            raise ValueError(f"{arg}: missing output(s) {missing} in the dump, which holds {names[:20]}"
                             f"{' ...' if len(names) > 20 else ''}; {want} (the CLI maps a tensor to an output "
                             "with --observed-name OUTPUT=TENSOR)")
        arrs = {o: np.asarray(observed.array(o)) for o in expect}
    else:
        arrs = read_arrays(observed, arg)
        known = set(graph.inputs) | {n.name for n in graph.nodes}
        missing = [o for o in expect if o not in arrs]
        extra = [k for k in arrs if k not in known]
        if missing or extra:
            raise ValueError(f"{arg}: " + "; ".join(
                ([f"missing output(s) {missing}"] if missing else [])
                + ([f"unexpected array(s) {extra} (not a node of the graph)"] if extra else [])) + f"; {want}")
    out = {}
    for o, shape in expect.items():
        a = arrs[o]
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"{arg}: output {o!r} has shape {tuple(a.shape)}; the graph's output {o!r} has "
                             f"shape {tuple(shape)}")
        out[o] = _as_storage(a, S, f"{arg}: output {o!r}")
    return out


def _as_storage(a: np.ndarray, S: Format, what: str, role: str = "outputs") -> np.ndarray:
    """``a`` in S's container dtype, refusing values S does not hold
    (``role``: "outputs" or "inputs", for the message)."""
    dt = np.dtype(S.container)
    floating = a.dtype.kind == "f" or a.dtype.name == "bfloat16" or a.dtype.name.startswith("float8")
    if not floating:
        raise TypeError(f"{what} has dtype {a.dtype}; the graph's {role} are {S.name} values ({dt})"
                        + ("; integer bit patterns? view them as the format first (e.g. a.view(ml_dtypes."
                           "bfloat16))" if a.dtype.kind in "iu" else ""))
    x = a.astype(np.float64)
    with np.errstate(all="ignore"):
        r = np.asarray(round_to(x, S), dtype=np.float64)
    bad = ~((r == x) | (np.isnan(r) & np.isnan(x)))
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise TypeError(f"{what} has dtype {a.dtype} and holds values that are not {S.name} values "
                        f"({int(bad.sum())} of {a.size}, e.g. index {list(i)}: {x[i]!r}); the graph's {role} are "
                        f"stored in {S.name}: "
                        + (f"give the kernel's {S.name} outputs, or pass fmt= (CLI: --fmt) matching the kernel's output format"
                           if role == "outputs" else
                           f"give the {S.name} inputs the kernel read (round them first, e.g. "
                           f"numlab.round_to(x, {S.name!r})), or pass fmt= (CLI: --fmt) matching the kernel's input format"))
    return x.astype(dt)
