"""Your function, your inputs: named arrays from files (:func:`read_arrays`,
:func:`load_inputs`) and tracing a function with their shapes (:func:`trace_function`,
:func:`as_graph`)."""

import inspect
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ._ir import Graph, _check_shape, trace


# ---------------------------------------------------------------------------
# your function, your inputs: named arrays from files, tracing with their shapes
# ---------------------------------------------------------------------------
def _is_number_array(a: np.ndarray) -> bool:
    return a.dtype.kind in "biuf" or a.dtype.name == "bfloat16" or a.dtype.name.startswith("float8")


def read_arrays(source, *, option: str = "inputs") -> dict:
    """Named arrays from ``source``: a ``.npz`` file (its names), a directory
    holding one ``NAME.npy`` per array, or a mapping name -> array-like.

    Arrays keep their dtype (float16/bfloat16/float32/float64, bool for
    ``where`` conditions, integers for gather indices).  No pickles are read.
    Errors are ValueError naming ``option`` (the CLI passes ``"--inputs"``),
    the path or array and what is valid.
    """
    if isinstance(source, Mapping):
        items = dict(source)
        where = "mapping"
    else:
        if not isinstance(source, (str, Path)):
            raise TypeError(f"{option} must be a .npz file, a directory of NAME.npy files or a dict "
                            f"name -> array, got {type(source).__name__}")
        p = Path(source)
        if p.is_dir():
            files = sorted(p.glob("*.npy"))
            if not files:
                raise ValueError(f"{option} {str(p)!r}: the directory holds no NAME.npy files")
            items = {f.stem: f for f in files}
            where = f"directory {str(p)!r}"
        elif p.is_file() and p.suffix == ".npz":
            items = None
            where = f"file {str(p)!r}"
        elif not p.exists():
            raise ValueError(f"{option} {str(p)!r}: no such .npz file or directory of NAME.npy files")
        else:
            raise ValueError(f"{option} {str(p)!r} is neither a .npz file nor a directory of NAME.npy files")
    out = {}
    try:
        if items is None:
            with np.load(p, allow_pickle=False) as npz:
                out = {k: np.asarray(npz[k]) for k in npz.files}
            if not out:
                raise ValueError(f"{option} {where} holds no arrays")
        else:
            out = {k: np.load(v, allow_pickle=False) if isinstance(v, Path) else np.asarray(v)
                   for k, v in items.items()}
    except (OSError, EOFError, zipfile.BadZipFile) as exc:  # a corrupt or truncated file
        raise ValueError(f"{option} {where}: cannot read it ({exc})") from None
    except ValueError as exc:
        if str(exc).startswith(option):
            raise
        raise ValueError(f"{option} {where}: cannot read it ({exc}; object arrays/pickles are refused)") from None
    for k, a in out.items():
        if not _is_number_array(a):
            raise ValueError(f"{option}: input {k!r} in {where} has dtype {a.dtype}, not a number type "
                             "(valid: float16/bfloat16/float32/float64, bool, integers)")
    return out


def _fmt_shapes(d) -> str:
    return "{" + ", ".join(f"{k}: {tuple(s)}" for k, s in d.items()) + "}"


def load_inputs(source, graph: Graph | None = None, *, option: str = "inputs") -> dict:
    """The inputs of ``graph`` from ``source`` (see :func:`read_arrays`:
    a ``.npz`` file, a directory of ``NAME.npy`` or a mapping).

    With ``graph``: every graph input present, none extra, shapes equal,
    returned in the graph's input order (dtypes unchanged; the executor
    rounds them to its storage format).  Errors are ValueError naming
    ``option``, the input, the expected and the given shape and the valid
    names.  Without ``graph``: the arrays as read.

    Example
    -------
    >>> xs = load_inputs("inputs.npz", g, option="--inputs")
    """
    arrays = read_arrays(source, option=option)
    if graph is None:
        return arrays
    expected = dict(graph.inputs)
    missing = [k for k in expected if k not in arrays]
    extra = [k for k in arrays if k not in expected]
    if missing or extra:
        raise ValueError(f"{option}: " + "; ".join(
            ([f"missing input(s) {missing}"] if missing else [])
            + ([f"unexpected array(s) {extra}"] if extra else []))
            + f"; valid names (with shapes) for graph {graph.name!r}: {_fmt_shapes(expected)}")
    for k, shape in expected.items():
        if tuple(arrays[k].shape) != tuple(shape):
            raise ValueError(f"{option}: input {k!r} has shape {tuple(arrays[k].shape)}; graph {graph.name!r} "
                             f"expects {tuple(shape)} (valid names with shapes: {_fmt_shapes(expected)})")
    return {k: arrays[k] for k in expected}


def function_inputs(fn) -> tuple[list, list, bool]:
    """``(required names, optional names, takes **kwargs)`` of ``fn``'s
    parameters: the names its inputs go by (:func:`trace_function`,
    ``numlab.cli.options.load_graph``).  TypeError for ``*args`` or
    positional-only parameters (inputs are named); ValueError when ``fn``
    has no signature (some builtins)."""
    sig = inspect.signature(fn)
    req, opt, var_kw = [], [], False
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise TypeError(f"{getattr(fn, '__name__', 'fn')}{sig}: parameter {p.name!r} cannot take a named "
                            "input (no *args or positional-only parameters)")
        elif p.default is inspect.Parameter.empty:
            req.append(p.name)
        else:
            opt.append(p.name)
    return req, opt, var_kw


def trace_function(fn, inputs, *, name: str | None = None, option: str = "inputs") -> Graph:
    """Trace ``fn`` with the input shapes taken from ``inputs``.

    ``fn`` is a numlab-traceable function (numpy ufuncs and functions,
    operators, comparisons, ``np.where``, :mod:`numlab.ops`; see
    :class:`Tensor`) whose parameters are the input names.  ``inputs`` maps
    name -> array (or shape tuple), or is a path read by :func:`read_arrays`.
    Every parameter without a default needs an array; a parameter with a
    default that has no array keeps its default (traced as a constant if it
    is a number or an array).  Errors name ``option``, the input, the
    expected parameters and the given names.

    Returns the :class:`Graph` (its inputs in ``fn``'s parameter order; the
    graph is named after ``fn`` unless ``name`` is given).  Use
    :func:`load_inputs` (or ``g.check_inputs``) for the values.

    Example
    -------
    >>> g = trace_function(lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True),
    ...                    {"x": np.zeros((2, 8))})
    """
    if not callable(fn):
        raise TypeError(f"trace_function needs a callable, got {type(fn).__name__}")
    if isinstance(inputs, (str, Path)):
        inputs = read_arrays(inputs, option=option)
    if not isinstance(inputs, Mapping):
        raise TypeError(f"{option} must be a dict name -> array or shape, or a .npz file / directory, "
                        f"got {type(inputs).__name__}")
    shapes = {}
    for k, v in inputs.items():
        shapes[k] = _check_shape(v, f"shape of input {k!r}") if isinstance(v, (tuple, list)) else tuple(np.shape(v))
    fname = getattr(fn, "__name__", "fn")
    try:
        req, opt, var_kw = function_inputs(fn)
    except ValueError:  # no signature (a builtin): take the inputs as given
        req, opt, var_kw = list(shapes), [], False
    missing = [k for k in req if k not in shapes]
    extra = [k for k in shapes if k not in req and k not in opt and not var_kw]
    if missing or extra:
        raise ValueError(f"{option}: " + "; ".join(
            ([f"no array for parameter(s) {missing} of {fname}"] if missing else [])
            + ([f"array(s) {extra} are not parameters of {fname}"] if extra else []))
            + f"; valid names: {req + opt} (required: {req}); given: {_fmt_shapes(shapes)}")
    order = [k for k in req + opt if k in shapes] + [k for k in shapes if k not in req and k not in opt]
    g = trace(fn, **{k: shapes[k] for k in order})
    if name is not None:
        g = Graph(g.inputs, g.nodes, g.outputs, name=name, roles=g.roles)
    return g


def as_graph(obj, inputs=None, *, option: str = "inputs") -> Graph:
    """``obj`` as a :class:`Graph`: a Graph is returned as it is; a callable
    is traced with :func:`trace_function` on ``inputs`` (arrays or shapes,
    needed then).  TypeError for anything else, naming what is valid."""
    if isinstance(obj, Graph):
        return obj
    if callable(obj):
        if inputs is None:
            raise TypeError(f"{getattr(obj, '__name__', 'the function')} is a function: give its inputs "
                            f"({option}=dict name -> array) so it can be traced")
        return trace_function(obj, inputs, option=option)
    raise TypeError(f"expected a numlab Graph or a traceable function, got {type(obj).__name__}")
