"""The graph IR: nodes in topological order, a tracing builder, decomposition.

A :class:`Graph` has named inputs with shapes, a list of :class:`Node` in
topological order (each reads graph inputs or earlier nodes) and named
outputs.  Every node is one operator of :data:`numlab.ops.CATALOGUE` with
canonical attributes and an inferred shape; the constructor validates all of
it, so ``Graph(inputs, nodes, outputs)`` is also the importer's entry point
(``Graph.from_nodes`` is the same with shapes and attributes filled in).

:func:`trace` builds a graph by running an ordinary Python function on
symbolic :class:`Tensor` objects::

    g = trace(lambda x, w: nl.ops.gelu(x @ w) * 0.5, x=(4, 8), w=(8, 16))

numpy works on the symbolic tensors (:data:`UFUNCS` through
``__array_ufunc__``, :data:`FUNCTIONS` through ``__array_function__``), so
an ordinary numpy-written function traces as it is::

    def f(x):
        h = np.maximum(x, 0.0)
        return np.where(h > 1.0, np.sqrt(h), h * np.array([0.5, 2.0]))

Comparisons give truth values (``Node.value_kind == "bool"``, held as
0.0 / 1.0 by the executors); numbers and arrays next to a tensor become
``constant`` nodes whose float64 value (:class:`numlab.ops.ConstValue`) is
part of the graph, its canonical form and every fingerprint (the scalar of
``+ - * /`` stays the exact attribute of a scalar op).
:func:`trace_function` traces a function with the shapes of named arrays
(:func:`read_arrays`: a ``.npz``, a directory of ``NAME.npy`` or a dict),
:func:`load_inputs` checks arrays against a graph and :func:`as_graph`
takes a Graph or a function.

Node names are deterministic: ``<op>_<k>`` with ``k`` counting that op
(``matmul_0``, ``gelu_0``, ``mul_scalar_0``); return a dict to name the
outputs, or call :meth:`Tensor.named`.  Nodes no output depends on are
dropped.  :func:`decompose` rewrites the
composite operators (softmax, log_softmax, layer_norm, rms_norm) into their
primitive subgraphs; the primitives are named ``<composite>.<op>_<k>`` and
carry ``attrs["origin"] = <composite node name>``, the last one keeps the
composite's own name.  :func:`evaluate` runs the float64 references.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import ops as _ops
from .ops import CATALOGUE, META_ATTRS, ConstValue, get_op

__all__ = ["Node", "Graph", "Tensor", "trace", "decompose", "evaluate", "read_arrays", "load_inputs",
           "trace_function", "function_inputs", "as_graph", "UFUNCS", "UFUNC_REDUCE", "FUNCTIONS"]


@dataclass(frozen=True)
class Node:
    """One operator application: ``name = op(*inputs; **attrs)`` of ``shape``."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict = field(default_factory=dict)
    shape: tuple[int, ...] | None = None

    @property
    def op_attrs(self) -> dict:
        """The attributes without the meta ones (``origin``)."""
        return {k: v for k, v in self.attrs.items() if k not in META_ATTRS}

    @property
    def category(self) -> str:
        return get_op(self.op).category

    @property
    def value_kind(self) -> str:
        """``"bool"`` for a comparison's truth values, else ``"float"``
        (:data:`numlab.ops.VALUE_KINDS`)."""
        return get_op(self.op).value_kind

    @property
    def origin(self) -> str | None:
        """The composite node this primitive was decomposed from, if any."""
        return self.attrs.get("origin")

    def __str__(self) -> str:
        attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in self.attrs.items())
        shape = "[" + ", ".join(map(str, self.shape or ())) + "]"
        return f"{self.name}: {shape} = {self.op}({', '.join(self.inputs)}{'; ' + attrs if attrs else ''})"


def _fmt_attr(v):
    if isinstance(v, ConstValue):
        return repr(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        s = repr(v)
        return s if len(s) <= 40 else s[:37] + "..."
    return repr(v)


def _check_name(name, what):
    if not isinstance(name, str) or not name:
        raise TypeError(f"{what} must be a non-empty str, got {name!r}")
    return name


def _check_shape(shape, what):
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise TypeError(f"{what} must be a tuple of non-negative ints, got {shape!r}")
    return tuple(int(d) for d in shape)


class Graph:
    """A validated graph.

    Parameters
    ----------
    inputs : dict[str, tuple[int, ...]]
        Input name -> shape, in the order callers list them.
    nodes : list[Node]
        In topological order.  Attributes are normalised and shapes inferred
        (a given ``shape`` must equal the inferred one).
    outputs : list[str]
        Names of nodes that are outputs (not graph inputs).
    name : str
        A label for printing.
    roles : dict[str, str], optional
        Input name -> role hint for input generators (``"data"``,
        ``"weight"``, ``"gamma"``, ``"beta"``, ``"index"``, ``"mask"``);
        missing roles are inferred from the consumers (see :meth:`role`).

    Raises
    ------
    ValueError, TypeError
        Naming the node and the offending input, attribute or shape.
    """

    ROLES = ("data", "weight", "gamma", "beta", "index", "mask")

    def __init__(self, inputs, nodes, outputs, *, name: str = "graph", roles=None):
        if not isinstance(inputs, dict):
            raise TypeError(f"inputs must be a dict name -> shape, got {type(inputs).__name__}")
        self.name = str(name)
        self.inputs = {_check_name(k, "input name"): _check_shape(v, f"shape of input {k!r}") for k, v in inputs.items()}
        shapes = dict(self.inputs)
        self.nodes: list[Node] = []
        for node in nodes:
            if not isinstance(node, Node):
                raise TypeError(f"nodes must be Node objects, got {type(node).__name__}")
            _check_name(node.name, "node name")
            if node.name in shapes:
                raise ValueError(f"node name {node.name!r} is used twice (already an input or an earlier node)")
            info = get_op(node.op) if node.op in CATALOGUE else None
            if info is None:
                raise ValueError(f"node {node.name!r}: unknown op {node.op!r}; valid ops: {sorted(CATALOGUE)}")
            ins = tuple(node.inputs)
            for i in ins:
                if i not in shapes:
                    raise ValueError(
                        f"node {node.name!r} ({node.op}): input {i!r} is neither a graph input nor an "
                        f"earlier node (nodes must be in topological order); known: {sorted(shapes)}"
                    )
            attrs, shape = info.check([shapes[i] for i in ins], node.attrs, node=node.name)
            if node.shape is not None and tuple(node.shape) != shape:
                raise ValueError(
                    f"node {node.name!r} ({node.op}): declared shape {tuple(node.shape)} but the inputs "
                    f"{[shapes[i] for i in ins]} give {shape}"
                )
            shapes[node.name] = shape
            self.nodes.append(Node(node.name, node.op, ins, attrs, shape))
        if isinstance(outputs, str):
            outputs = [outputs]
        self.outputs = [_check_name(o, "output name") for o in outputs]
        if not self.outputs:
            raise ValueError("a graph needs at least one output")
        for o in self.outputs:
            if o in self.inputs:
                raise ValueError(f"output {o!r} is a graph input; outputs must be nodes")
            if o not in shapes:
                raise ValueError(f"output {o!r} is not a node; nodes: {[n.name for n in self.nodes]}")
        if len(set(self.outputs)) != len(self.outputs):
            raise ValueError(f"outputs {self.outputs} list a node twice")
        self._shapes = shapes
        self._by_name = {n.name: n for n in self.nodes}
        self._consumers: dict[str, list[Node]] = {k: [] for k in shapes}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):  # a node reading x twice is one consumer
                self._consumers[i].append(n)
        self.roles = {}
        for k, r in (roles or {}).items():
            if k not in self.inputs:
                raise ValueError(f"roles: {k!r} is not an input; inputs: {list(self.inputs)}")
            if r not in self.ROLES:
                raise ValueError(f"roles[{k!r}]={r!r} is not valid; choose one of {self.ROLES}")
            self.roles[k] = r

    # -- construction helpers ------------------------------------------------
    @classmethod
    def from_nodes(cls, inputs, nodes, outputs, **kw) -> "Graph":
        """Build from nodes given as :class:`Node` or tuples/dicts
        ``(name, op, inputs, attrs[, shape])``; shapes may be omitted and
        attributes non-canonical (``axis=-1``)."""
        out = []
        for n in nodes:
            if isinstance(n, Node):
                out.append(n)
            elif isinstance(n, dict):
                out.append(Node(n["name"], n["op"], tuple(n.get("inputs", ())), dict(n.get("attrs", {})), n.get("shape")))
            elif isinstance(n, (tuple, list)) and 3 <= len(n) <= 5:
                out.append(Node(n[0], n[1], tuple(n[2]), dict(n[3]) if len(n) > 3 else {}, n[4] if len(n) > 4 else None))
            else:
                raise TypeError(f"cannot make a Node from {n!r}; give Node, dict or (name, op, inputs, attrs[, shape])")
        return cls(inputs, out, outputs, **kw)

    def subgraph(self, outputs=None, *, keep_inputs: bool = False) -> "Graph":
        """The nodes needed for ``outputs`` (default: this graph's outputs),
        in the same order, with the same names.  Only the inputs they read are
        kept unless ``keep_inputs``.  ``g.subgraph()`` drops dead nodes."""
        outputs = list(self.outputs if outputs is None else ([outputs] if isinstance(outputs, str) else outputs))
        for o in outputs:
            self.node(o)
        need = set(outputs)
        for n in reversed(self.nodes):
            if n.name in need:
                need.update(n.inputs)
        ins = {k: s for k, s in self.inputs.items() if keep_inputs or k in need}
        roles = {k: r for k, r in self.roles.items() if k in ins}
        return Graph(ins, [n for n in self.nodes if n.name in need], outputs, name=self.name, roles=roles)

    def with_roles(self, **roles) -> "Graph":
        return Graph(self.inputs, self.nodes, self.outputs, name=self.name, roles={**self.roles, **roles})

    # -- queries ---------------------------------------------------------------
    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise ValueError(f"no node {name!r} in graph {self.name!r}; nodes: {list(self._by_name)}") from None

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of an input or a node."""
        try:
            return self._shapes[name]
        except KeyError:
            raise ValueError(f"{name!r} is neither an input nor a node of graph {self.name!r}") from None

    def value_kind(self, name: str) -> str:
        """``"bool"`` when ``name`` is a node holding truth values (a
        comparison), else ``"float"`` (every graph input: a bool ``where``
        condition given as input is fed as 0.0 / 1.0).  Executors hold truth
        values as 0.0 / 1.0."""
        if name in self._by_name:
            return self._by_name[name].value_kind
        self.shape(name)
        return "float"

    def consumers(self, name: str) -> list[Node]:
        """Nodes that read ``name`` (an input or a node), in order."""
        self.shape(name)
        return list(self._consumers[name])

    def role(self, name: str) -> str:
        """Role of an input: the explicit one, else inferred from consumers
        (second input of matmul with rank 2 -> weight, norm weight -> gamma,
        layer_norm shift -> beta, 1-D addend of a larger tensor -> beta,
        gather's index input -> index, where's condition -> mask, else data)."""
        if name in self.roles:
            return self.roles[name]
        if name not in self.inputs:
            raise ValueError(f"{name!r} is not an input; inputs: {list(self.inputs)}")
        for n in self.consumers(name):
            pos = n.inputs.index(name)
            if n.op == "gather" and pos == 1:
                return "index"
            if n.op == "where" and pos == 0:
                return "mask"
            if n.op in ("layer_norm", "rms_norm") and pos == 1:
                return "gamma"
            if n.op == "layer_norm" and pos == 2:
                return "beta"
            if n.op == "matmul" and pos == 1 and len(self.inputs[name]) == 2:
                return "weight"
            if n.op == "add" and len(self.inputs[name]) == 1 and len(n.shape) > 1:
                return "beta"
        return "data"

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    def __contains__(self, name) -> bool:
        return name in self._shapes

    def __eq__(self, other) -> bool:
        return isinstance(other, Graph) and self.canonical() == other.canonical()

    __hash__ = None

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, outputs {self.outputs}>"

    def __str__(self) -> str:
        ins = ", ".join(f"{k}: [{', '.join(map(str, s))}]" for k, s in self.inputs.items())
        lines = [f"graph {self.name}({ins}) -> {', '.join(self.outputs)}"]
        for n in self.nodes:
            mark = "  *" if n.name in self.outputs else "   "
            lines.append(f"{mark} {n}")
        return "\n".join(lines)

    # -- canonical form --------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-able canonical form: floats as ``float.hex`` strings, so it is
        exact and identical across processes (for fingerprints)."""
        return {
            "name": self.name,
            "inputs": [[k, list(s)] for k, s in self.inputs.items()],
            "nodes": [
                {"name": n.name, "op": n.op, "inputs": list(n.inputs),
                 "attrs": {k: _canon(n.attrs[k]) for k in sorted(n.attrs)}, "shape": list(n.shape)}
                for n in self.nodes
            ],
            "outputs": list(self.outputs),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Graph":
        """Inverse of :meth:`to_dict` (also of ``json.loads(canonical())``)."""
        try:
            nodes = [Node(n["name"], n["op"], tuple(n["inputs"]),
                          {k: _uncanon(v) for k, v in n["attrs"].items()}, tuple(n["shape"]))
                     for n in d["nodes"]]
            return cls({k: tuple(s) for k, s in d["inputs"]}, nodes, list(d["outputs"]), name=d.get("name", "graph"))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a graph dict (keys name, inputs, nodes, outputs): {exc!r}") from None

    def canonical(self) -> str:
        """``json.dumps(to_dict(), sort_keys=True)`` with fixed separators."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    # -- convenience -----------------------------------------------------------
    def decompose(self, only=None) -> "Graph":
        return decompose(self, only=only)

    def evaluate(self, inputs, *, all_values: bool = False) -> dict:
        return evaluate(self, inputs, all_values=all_values)

    def check_inputs(self, inputs) -> dict:
        """Validate an input dict (the one input checker: the executor and
        :func:`evaluate` both call it).

        Every input present, none extra, shapes equal, floating-point arrays
        (float16/bfloat16/fp8/float32/float64 containers); integer or bool
        arrays only for gather's index inputs (role ``"index"``), bool
        arrays also for ``where`` conditions (role ``"mask"``, returned as
        float32 0.0 / 1.0).  Returns ``{name: ndarray}`` in the graph's
        input order (dtype otherwise unchanged).

        Raises
        ------
        TypeError
            ``inputs`` not a mapping; an input of the wrong dtype.
        ValueError
            Missing or unexpected inputs; a wrong shape.
        """
        if not isinstance(inputs, Mapping):
            raise TypeError(
                f"inputs must be a dict name -> array for graph inputs {list(self.inputs)}, "
                f"got {type(inputs).__name__}"
            )
        missing = [k for k in self.inputs if k not in inputs]
        extra = [k for k in inputs if k not in self.inputs]
        if missing or extra:
            parts = ([f"missing inputs {missing}"] if missing else []) + (
                [f"unexpected inputs {extra}"] if extra else [])
            raise ValueError(f"graph {self.name!r}: {'; '.join(parts)}; the graph's inputs are {list(self.inputs)}")
        out = {}
        for k, shape in self.inputs.items():
            a = np.asarray(inputs[k])
            floating = a.dtype.kind == "f" or a.dtype.name == "bfloat16" or a.dtype.name.startswith("float8")
            if a.dtype.kind == "b" and self.role(k) == "mask":
                a = a.astype(np.float32)  # a where condition: truth values as 0.0 / 1.0
            elif not floating and not (a.dtype.kind in "iub" and self.role(k) == "index"):
                raise TypeError(
                    f"input {k!r} has dtype {a.dtype}; give a floating-point array "
                    "(float16/bfloat16/float32/float64; the executor rounds it to the storage format)"
                    + ("" if a.dtype.kind not in "iub" else
                       "; integer arrays are only for gather indices, bool arrays for where conditions")
                )
            if a.shape != shape:
                raise ValueError(f"input {k!r} has shape {a.shape}; graph {self.name!r} expects {shape}")
            out[k] = a
        return out


def _uncanon(v):
    if isinstance(v, dict) and set(v) == {"float"}:
        return float.fromhex(v["float"])
    if isinstance(v, dict) and set(v) == {"const"}:
        return ConstValue.from_canonical(v)
    if isinstance(v, list):
        return [_uncanon(x) for x in v]
    return v


def _canon(v):
    if isinstance(v, ConstValue):
        return v.canonical()  # every byte of the value: fingerprints tell constants apart
    if isinstance(v, float):
        return {"float": v.hex()}
    if isinstance(v, (tuple, list)):
        return [_canon(x) for x in v]
    return v


# ---------------------------------------------------------------------------
# tracing
# ---------------------------------------------------------------------------
def _is_bool(t) -> bool:
    return isinstance(t, Tensor) and t._tracer.kinds.get(t.name) == "bool"


def _add(a, b):
    """``a + b``; two truth values add as numpy's bools do (logical or):
    ``maximum`` of 0.0 / 1.0, exact."""
    if _is_bool(a) and _is_bool(b):
        return _mark_bool(_ops.maximum(a, b))
    return _ops.add(a, b)


def _mul(a, b):
    """``a * b``; of two truth values a logical and (0.0 / 1.0, still a truth value)."""
    r = _ops.mul(a, b)
    return _mark_bool(r) if _is_bool(a) and _is_bool(b) else r


def _mark_bool(t):
    t._tracer.kinds[t.name] = "bool"
    return t


def _sub(a, b):
    if _is_bool(a) and _is_bool(b):
        raise TypeError("subtracting two boolean tensors is not supported (numpy refuses it too); "
                        "use np.not_equal(a, b) or np.where")
    return _ops.sub(a, b)


def _square(x):
    return _ops.mul(x, x)


def _power(x, p):
    if isinstance(p, Tensor) or not isinstance(x, Tensor):
        raise TypeError("np.power on traced tensors takes a tensor base and a number exponent "
                        "(2, 1, 0.5, -0.5, -1)")
    return x.__pow__(p)


def _positive(x):
    return x


#: numpy ufunc name -> the catalogue function it traces to (method "__call__")
UFUNCS = {
    "add": _add, "subtract": _sub, "multiply": _mul, "divide": _ops.div,
    "negative": _ops.neg, "positive": _positive, "absolute": _ops.abs_, "fabs": _ops.abs_,
    "exp": _ops.exp, "log": _ops.log, "sqrt": _ops.sqrt, "tanh": _ops.tanh,
    "reciprocal": _ops.reciprocal, "square": _square, "power": _power,
    "maximum": _ops.maximum, "minimum": _ops.minimum, "matmul": _ops.matmul,
    "greater": _ops.gt, "greater_equal": _ops.ge, "less": _ops.lt, "less_equal": _ops.le,
    "equal": _ops.eq, "not_equal": _ops.ne,
}
#: ufunc name -> reduction for ``np.<ufunc>.reduce(x, axis, keepdims=...)``
UFUNC_REDUCE = {"add": _ops.sum_, "maximum": _ops.max_, "minimum": _ops.min_}


def _no_kwargs(fname, kwargs, allowed=()):
    bad = sorted(k for k, v in kwargs.items() if k not in allowed and v is not None
                 and not (k == "keepdims" and v is np._NoValue))
    if bad:
        raise TypeError(f"np.{fname} on traced tensors: argument(s) {bad} are not supported"
                        + (f"; supported: {list(allowed)}" if allowed else ""))


def _kw(kwargs, key, default):
    v = kwargs.get(key, default)
    return default if v is np._NoValue else v


def _np_reduce(op):
    def f(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
        _no_kwargs(op.__name__.rstrip("_"), {"dtype": dtype, "out": out, **kw})
        return op(a, axis, _kw({"k": keepdims}, "k", False))
    return f


def _np_var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    _no_kwargs("var", {"dtype": dtype, "out": out, **{k: v for k, v in kw.items() if k != "correction"}})
    corr = kw.get("correction", ddof)
    return _ops.var(a, axis, _kw({"k": keepdims}, "k", False), 0 if corr is np._NoValue else corr)


def _np_where(condition, *xy):
    if len(xy) != 2:
        raise TypeError("np.where on traced tensors needs three arguments where(cond, a, b) "
                        "(the one-argument form gives data-dependent shapes)")
    return _ops.where(condition, *xy)


def _np_reshape(a, shape=None, order="C", **kw):
    shape = kw.pop("newshape", shape)
    _no_kwargs("reshape", {"order": None if order == "C" else order, **kw})
    return _ops.reshape(a, shape)


def _np_transpose(a, axes=None):
    return _ops.transpose(a, axes)


def _np_concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _no_kwargs("concatenate", {"out": out, "dtype": dtype, "casting": casting})
    return _ops.concat(list(arrays), axis)


def _np_split(ary, indices_or_sections, axis=0):
    return _ops.split(ary, indices_or_sections, axis)


def _np_take(a, indices, axis=None, out=None, mode=None):
    _no_kwargs("take", {"out": out, "mode": mode})
    if axis is None:
        raise TypeError("np.take on traced tensors needs axis= (no flattening take)")
    return _ops.gather(a, indices, axis)


def _np_clip(a, a_min=None, a_max=None, out=None, **kw):
    _no_kwargs("clip", {"out": out, **{k: v for k, v in kw.items() if k not in ("min", "max")}})
    lo = kw.get("min", a_min)
    hi = kw.get("max", a_max)
    y = a if lo is None or lo is np._NoValue else _ops.maximum(a, lo)
    return y if hi is None or hi is np._NoValue else _ops.minimum(y, hi)


def _np_expand_dims(a, axis):
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    nd = a.ndim + len(axes)
    axes = sorted(int(x) % nd for x in axes)
    shape = list(a.shape)
    for ax in axes:
        shape.insert(ax, 1)
    return _ops.reshape(a, tuple(shape))


def _np_squeeze(a, axis=None):
    if axis is None:
        axes = [i for i, d in enumerate(a.shape) if d == 1]
    else:
        axes = [int(x) % a.ndim for x in ((axis,) if isinstance(axis, numbers.Integral) else axis)]
        bad = [x for x in axes if a.shape[x] != 1]
        if bad:
            raise ValueError(f"np.squeeze: axis {bad} of {a.name!r} {a.shape} does not have size 1")
    return _ops.reshape(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


def _np_matmul(a, b, **kw):
    _no_kwargs("matmul", kw)
    return _ops.matmul(a, b)


#: numpy function name -> its tracing (``Tensor.__array_function__``)
FUNCTIONS = {
    "where": _np_where, "sum": _np_reduce(_ops.sum_), "mean": _np_reduce(_ops.mean),
    "max": _np_reduce(_ops.max_), "amax": _np_reduce(_ops.max_), "min": _np_reduce(_ops.min_),
    "amin": _np_reduce(_ops.min_), "var": _np_var, "reshape": _np_reshape, "transpose": _np_transpose,
    "concatenate": _np_concatenate, "split": _np_split, "broadcast_to": lambda a, shape, subok=False:
    _ops.broadcast_to(a, shape), "take": _np_take, "clip": _np_clip, "expand_dims": _np_expand_dims,
    "squeeze": _np_squeeze, "matmul": _np_matmul,
    "shape": lambda a: a.shape, "ndim": lambda a: a.ndim, "size": lambda a, axis=None:
    a.size if axis is None else a.shape[axis],
}


class Tensor:
    """A symbolic tensor while tracing: a name and a shape.

    Supports ``+ - * / @``, unary ``-``, ``abs``, ``x ** 2`` (as ``x * x``),
    Python numbers on either side (scalar ops, the float kept exactly),
    comparisons ``> >= < <= == !=`` (truth values, ``value_kind`` "bool";
    two of them add as numpy's bools do, as a logical or: ``maximum``),
    ``.sum/.mean/.max/.min/.var(axis, keepdims)``, ``.reshape``, ``.T``,
    ``.mT``, ``.transpose``, ``.broadcast_to``, ``.astype`` (cast), basic
    slicing ``x[..., :4]``, ``x[0]`` and :meth:`named`.

    numpy works on it: the ufuncs of :data:`UFUNCS` (``np.exp(x)``,
    ``np.maximum(x, 0.0)``, ``np.greater(x, 0)``, ``np.add.reduce``, ...)
    through ``__array_ufunc__`` and the functions of :data:`FUNCTIONS`
    (``np.where``, ``np.sum/mean/max/min/var`` with ``axis`` and
    ``keepdims``, ``np.reshape``, ``np.concatenate``, ``np.clip``, ...)
    through ``__array_function__``.  Numbers and numpy arrays next to a
    tensor become ``constant`` nodes (float64 values stored in the graph),
    except the scalar of ``+ - * /``, which stays the exact attribute of a
    scalar op.  Anything else raises TypeError naming the ufunc or function
    and the supported list.
    """

    __slots__ = ("name", "shape", "_tracer")
    __hash__ = object.__hash__  # identity: == builds a comparison node

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        if method == "reduce" and name in UFUNC_REDUCE:
            (x,) = inputs
            _no_kwargs(f"{name}.reduce", kwargs, ("axis", "keepdims"))
            return UFUNC_REDUCE[name](x, kwargs.get("axis", 0), bool(kwargs.get("keepdims", False)))
        if method != "__call__" or name not in UFUNCS:
            what = f"np.{name}" + ("" if method == "__call__" else f".{method}")
            raise TypeError(
                f"numpy ufunc {what} is not supported on traced tensors; supported ufuncs: "
                f"{sorted(UFUNCS)} (and np.{{{','.join(sorted(UFUNC_REDUCE))}}}.reduce); "
                "numlab.ops has the rest of the catalogue (sigmoid, erf, gelu, softmax, ...)")
        _no_kwargs(name, kwargs)
        return UFUNCS[name](*inputs)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"symbolic tensor {self.name!r} has no values while tracing: np.asarray/np.array "
                        "of it is not supported (use the tensor itself, numpy ufuncs and functions work on it)")

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        f = FUNCTIONS.get(name)
        if f is None:
            raise TypeError(f"numpy function np.{name} is not supported on traced tensors; supported "
                            f"functions: {sorted(FUNCTIONS)} and the ufuncs {sorted(UFUNCS)}")
        return f(*args, **kwargs)

    def __init__(self, name, shape, tracer):
        self.name = name
        self.shape = shape
        self._tracer = tracer

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, shape={self.shape})"

    def named(self, name: str) -> "Tensor":
        """Give this node a user name (applied when tracing ends)."""
        self._tracer.rename(self, name)
        return self

    def __bool__(self):
        raise TypeError(f"symbolic tensor {self.name!r} has no truth value while tracing (data-dependent control flow)")

    # arithmetic
    def __add__(self, o):
        return _add(self, o)

    def __radd__(self, o):
        return _add(o, self)

    def __sub__(self, o):
        return _sub(self, o)

    def __rsub__(self, o):
        return _sub(o, self)

    def __mul__(self, o):
        return _mul(self, o)

    def __rmul__(self, o):
        return _mul(o, self)

    def __truediv__(self, o):
        return _ops.div(self, o)

    def __rtruediv__(self, o):
        return _ops.div(o, self)

    def __matmul__(self, o):
        return _ops.matmul(self, o)

    def __rmatmul__(self, o):
        return _ops.matmul(o, self)

    def __neg__(self):
        return _ops.neg(self)

    # comparisons: truth values (0.0 / 1.0 in the executors)
    def __gt__(self, o):
        return _ops.gt(self, o)

    def __ge__(self, o):
        return _ops.ge(self, o)

    def __lt__(self, o):
        return _ops.lt(self, o)

    def __le__(self, o):
        return _ops.le(self, o)

    def __eq__(self, o):
        return _ops.eq(self, o)

    def __ne__(self, o):
        return _ops.ne(self, o)

    def __abs__(self):
        return _ops.abs_(self)

    def __pow__(self, p):
        if p == 2:
            return _ops.mul(self, self)
        if p == 1:
            return self
        if p == 0.5:
            return _ops.sqrt(self)
        if p == -0.5:
            return _ops.rsqrt(self)
        if p == -1:
            return _ops.reciprocal(self)
        raise ValueError(f"x ** {p!r} is not supported; valid exponents: 2, 1, 0.5, -0.5, -1")

    # reductions
    def sum(self, axis=None, keepdims=False):
        return _ops.sum_(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops.mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _ops.max_(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _ops.min_(self, axis, keepdims)

    def var(self, axis=None, keepdims=False, correction=0):
        return _ops.var(self, axis, keepdims, correction)

    # data movement
    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return _ops.reshape(self, tuple(shape))

    def transpose(self, *perm):
        if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
            perm = perm[0]
        return _ops.transpose(self, tuple(perm) if perm else None)

    @property
    def T(self):
        return _ops.transpose(self, None)

    @property
    def mT(self):
        if self.ndim < 2:
            raise ValueError(f"{self.name!r}: .mT needs rank >= 2, shape is {self.shape}")
        perm = tuple(range(self.ndim - 2)) + (self.ndim - 1, self.ndim - 2)
        return _ops.transpose(self, perm)

    def broadcast_to(self, shape):
        return _ops.broadcast_to(self, shape)

    def astype(self, fmt):
        return _ops.cast(self, fmt)

    def __getitem__(self, key):
        """Basic indexing: ints, slices (positive steps), ``...`` and ``None``
        (a new axis); numpy's result shape.  A ``slice`` node, then a
        ``reshape`` node when axes are dropped or added."""
        if not isinstance(key, tuple):
            key = (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError(f"{self.name!r}: at most one ... in an index, got {key!r}")
        n_real = sum(k is not Ellipsis and k is not None for k in key)
        if n_real > self.ndim:
            raise IndexError(f"{self.name!r}: too many indices {key!r} for shape {self.shape}")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - n_real) + key[i + 1:]
        key = key + (slice(None),) * (self.ndim - sum(k is not None for k in key))
        begin, end, step, layout = [], [], [], []  # layout: ("keep", ax) | ("new",)
        ax = 0
        for k in key:
            if k is None:
                layout.append(("new",))
                continue
            d = self.shape[ax]
            if isinstance(k, slice):
                begin.append(k.start)
                end.append(k.stop)
                step.append(k.step)
                layout.append(("keep", ax))
            elif isinstance(k, numbers.Integral) and not isinstance(k, bool):
                if not -d <= k < d:
                    raise IndexError(f"{self.name!r}: index {k} is out of range for axis {ax} of size {d}")
                k = int(k) % d
                begin.append(k)
                end.append(k + 1)
                step.append(1)
            else:
                raise TypeError(
                    f"{self.name!r}: index {k!r} is not supported; use ints, slices, ... and None "
                    "(use nl.ops.gather for integer arrays)"
                )
            ax += 1
        out = self
        if any(b not in (None, 0) for b in begin) or any(e is not None for e in end) or any(s not in (None, 1) for s in step):
            out = _ops._apply("slice", [self], {"begin": tuple(begin), "end": tuple(end), "step": tuple(step)})
        shape = tuple(1 if e[0] == "new" else out.shape[e[1]] for e in layout)
        if shape != out.shape:
            out = _ops.reshape(out, shape)
        return out


class _Tracer:
    """Collects nodes while a function runs on symbolic tensors."""

    def __init__(self):
        self.inputs: dict[str, tuple] = {}
        self.nodes: list[Node] = []
        self.shapes: dict[str, tuple] = {}
        self.counts: dict[str, int] = {}
        self.renames: dict[str, str] = {}
        self.scope: str | None = None
        self.kinds: dict[str, str] = {}  # node -> value kind ("bool" for comparisons)

    def input(self, name, shape):
        _check_name(name, "input name")
        shape = _check_shape(shape, f"shape of input {name!r}")
        self.inputs[name] = shape
        self.shapes[name] = shape
        return Tensor(name, shape, self)

    def _fresh(self, op):
        base = op if self.scope is None else f"{self.scope}.{op}"
        while True:
            k = self.counts.get(base, 0)
            self.counts[base] = k + 1
            name = f"{base}_{k}"
            if name not in self.shapes:
                return name

    def emit(self, op, args, attrs, name=None):
        info = get_op(op)
        args = list(args)
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                try:
                    args[i] = self.constant(a)
                except (TypeError, ValueError) as exc:
                    raise TypeError(
                        f"{op}: argument {i} is a {type(a).__name__}, neither a symbolic tensor nor a "
                        f"constant (a real number or numeric array): {exc}") from None
            elif a._tracer is not self:
                raise ValueError(f"{op}: argument {a.name!r} belongs to another trace")
        name = name or self._fresh(op)
        attrs = dict(attrs)
        if self.scope is not None and "origin" not in attrs:
            attrs["origin"] = self.scope
        attrs, shape = info.check([a.shape for a in args], attrs, node=name)
        self.nodes.append(Node(name, op, tuple(a.name for a in args), attrs, shape))
        self.shapes[name] = shape
        self.kinds[name] = info.value_kind
        return Tensor(name, shape, self)

    def constant(self, value) -> "Tensor":
        """A ``constant`` node holding ``value`` (a number or array, stored
        as float64 in the graph: :class:`numlab.ops.ConstValue`)."""
        if isinstance(value, Tensor):
            return value
        return self.emit("constant", [], {"value": ConstValue(value)})

    def rename(self, t: Tensor, new: str):
        _check_name(new, "name")
        if t.name in self.inputs:
            raise ValueError(f"cannot rename graph input {t.name!r} to {new!r}")
        if t.name in self.renames and self.renames[t.name] != new:
            raise ValueError(f"node {t.name!r} is already named {self.renames[t.name]!r}; cannot also name it {new!r}")
        self.renames[t.name] = new

    def finish(self, outputs, name, roles=None) -> Graph:
        nodes, outs = list(self.nodes), []
        for oname, t in outputs:
            if not isinstance(t, Tensor) or t._tracer is not self:
                raise TypeError(f"output {oname!r} must be a symbolic tensor of this trace, got {t!r}")
            if oname is None:
                if t.name in self.inputs:  # fn returned an input unchanged: identity node
                    t = self.emit("reshape", [t], {"shape": t.shape})
                    nodes.append(self.nodes[-1])
                outs.append(t.name)
                continue
            if t.name in self.inputs or (t.name in self.renames and self.renames[t.name] != oname):
                # an identity node carries the second name
                self.shapes[oname] = t.shape
                nodes.append(Node(oname, "reshape", (t.name,), {"shape": t.shape}, t.shape))
            else:
                self.renames[t.name] = oname
            outs.append(oname)
        renames = self.renames
        targets = list(renames.values())
        dup = {v for v in targets if targets.count(v) > 1}
        if dup:
            raise ValueError(f"names {sorted(dup)} are given to more than one node")
        clash = [v for k, v in renames.items() if v in self.shapes and v != k and v not in renames]
        clash += [v for v in targets if v in self.inputs]
        if clash:
            raise ValueError(f"names {sorted(set(clash))} clash with inputs or auto-named nodes")

        def r(x):
            return renames.get(x, x)

        nodes = [Node(r(n.name), n.op, tuple(r(i) for i in n.inputs), n.attrs, n.shape) for n in nodes]
        g = Graph(self.inputs, nodes, [r(o) for o in outs], name=name, roles=roles)
        return g.subgraph(keep_inputs=True)  # drop dead nodes (e.g. unused split pieces)


def trace(fn, **input_shapes) -> Graph:
    """Run ``fn`` on symbolic tensors and return its :class:`Graph`.

    ``fn`` is called with one keyword argument per input (in the order given)
    and returns a Tensor (output named by its node), a tuple/list of Tensors,
    or a dict ``{output name: Tensor}``.

    Example
    -------
    >>> g = trace(lambda x, w: {"y": ops.gelu(x @ w) * 0.5}, x=(4, 8), w=(8, 16))
    """
    if not callable(fn):
        raise TypeError(f"trace needs a callable, got {type(fn).__name__}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: just call
        sig = None
    if sig is not None:
        try:
            sig.bind(**input_shapes)
        except TypeError as exc:
            raise TypeError(
                f"trace: {getattr(fn, '__name__', 'fn')}{sig} cannot take the inputs "
                f"{list(input_shapes)} ({exc}); give one shape per parameter, e.g. x=(4, 8)"
            ) from None
    tr = _Tracer()
    args = {k: tr.input(k, s) for k, s in input_shapes.items()}
    _ops._TRACERS.append(tr)
    try:
        res = fn(**args)
    finally:
        _ops._TRACERS.pop()
    if isinstance(res, Tensor):
        outs = [(None, res)]
    elif isinstance(res, dict):
        outs = list(res.items())
    elif isinstance(res, (tuple, list)):
        outs = [(None, t) for t in res]
    else:
        raise TypeError(f"the traced function must return a Tensor, a tuple or a dict of Tensors, got {type(res).__name__}")
    seen, uniq = set(), []
    for k, t in outs:
        key = (k, getattr(t, "name", None))
        if k is None and key in seen:
            continue
        seen.add(key)
        uniq.append((k, t))
    name = getattr(fn, "__name__", "graph")
    return tr.finish(uniq, "graph" if name == "<lambda>" else name)


# ---------------------------------------------------------------------------
# decomposition and reference evaluation
# ---------------------------------------------------------------------------
def decompose(graph: Graph, only=None) -> Graph:
    """Replace every composite node (or those whose op is in ``only``) by the
    primitive subgraph of its ``OpInfo.decompose``.

    The primitives are named ``<composite>.<op>_<k>`` and carry
    ``attrs["origin"] = <composite>``; the last primitive takes the
    composite's name (so consumers and outputs are unchanged).
    """
    if only is not None:
        only = {only} if isinstance(only, str) else set(only)
        bad = sorted(o for o in only if o not in CATALOGUE or CATALOGUE[o].decompose is None)
        if bad:
            comp = sorted(k for k, v in CATALOGUE.items() if v.decompose is not None)
            raise ValueError(f"only={bad} are not composite ops; valid: {comp}")
    tr = _Tracer()
    env = {k: tr.input(k, s) for k, s in graph.inputs.items()}
    for n in graph.nodes:
        info = CATALOGUE[n.op]
        args = [env[i] for i in n.inputs]
        if info.decompose is not None and (only is None or n.op in only):
            tr.scope = n.name
            start = len(tr.nodes)
            out = info.decompose(*args, **n.op_attrs)
            tr.scope = None
            last = tr.nodes[-1]
            assert out.name == last.name and len(tr.nodes) > start
            tr.nodes[-1] = Node(n.name, last.op, last.inputs, last.attrs, last.shape)
            tr.shapes[n.name] = last.shape
            out = Tensor(n.name, last.shape, tr)
        else:
            out = tr.emit(n.op, args, n.attrs, name=n.name)
        env[n.name] = out
    return Graph(tr.inputs, tr.nodes, graph.outputs, name=graph.name, roles=graph.roles)


def evaluate(graph: Graph, inputs, *, all_values: bool = False) -> dict:
    """Evaluate with the float64 references of the catalogue.

    Returns ``{output: float64 array}`` (``all_values=True``: every input and
    node; truth values of comparisons as 0.0 / 1.0).  This is the
    plain-numpy reference (no rounding to a storage format);
    ``numlab.execute.run(mode="reference")`` is the full executor.
    """
    vals = {k: np.asarray(v, dtype=np.float64) for k, v in graph.check_inputs(inputs).items()}
    for n in graph.nodes:
        vals[n.name] = np.asarray(CATALOGUE[n.op].ref(*(vals[i] for i in n.inputs), **n.op_attrs), dtype=np.float64)
    return vals if all_values else {o: vals[o] for o in graph.outputs}


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
