"""The graph IR: :class:`Node` and :class:`Graph` (validated in the constructor, canonical
form, fingerprints), the tracer that records nodes, :func:`trace`, :func:`decompose`
and :func:`evaluate` with the float64 references."""

import inspect
import json
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import ops as _ops
from ..ops import CATALOGUE, META_ATTRS, ConstValue, get_op
from ._tensor import Tensor


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
    with _ops.tracing(tr):
        res = fn(**args)
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
