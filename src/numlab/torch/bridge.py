"""Trace a torch function or module into an ATen-level graph and into numlab's IR.

:func:`from_torch` runs ``torch.fx.experimental.proxy_tensor.make_fx`` on the
example inputs, which records the ATen operators eager PyTorch dispatches
(``aten.mul.Tensor(x, 0.1)``, ``aten._softmax``, ``aten.native_layer_norm``,
...) with their Python-scalar operands and the dtype and shape of every value.
That ATen graph is what :func:`numlab.torch.predict` lowers
(:func:`numlab.torch.lowering.lower`) and runs with :func:`numlab.execute.run` to
predict torch eager; :meth:`TorchTrace.inductor_nodes` re-traces with Inductor's
decomposition table (what ``torch.compile`` lowers) to predict the compiled
function.  :meth:`TorchTrace.to_graph` maps the ATen graph onto
:data:`numlab.ops.CATALOGUE` (``mul_scalar``, ``softmax``, ``layer_norm``...)
so every numlab tool (executors, fusion planner, compare) can run it.

Unsupported operators never give a partial result: :func:`from_torch` raises
a ValueError listing *every* ATen operator of the function that numlab cannot
predict, and :meth:`TorchTrace.to_graph` one listing every operator that has
no catalogue equivalent.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from .. import ops as _ops
from .._repr import Compact
from ..formats import BF16, FP16
from ..graph import Graph, Node
from ..rounding import round_to

__all__ = [
    "Ref",
    "ANode",
    "TorchTrace",
    "from_torch",
    "PREDICTABLE",
    "CATALOGUE_MAP",
    "DTYPES",
    "import_torch",
    "scalar_value",
]

# torch dtype name -> numlab format name (None: not a float storage format)
DTYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "bool": "bool",
    "int64": "int64",
    "int32": "int32",
}

CATALOGUE_MAP = _ops.aten_lowered()
"""ATen operator (``name.overload``, namespace dropped) -> the catalogue op it is
registered with (:func:`numlab.ops.aten_lowered`, from the ``OpInfo.aten``
entries): what :meth:`TorchTrace.to_graph` lowers it to (``add.Scalar`` ->
``add_scalar``; ``clamp.default`` -> maximum then ``minimum``)."""

PREDICTABLE = frozenset(CATALOGUE_MAP) | {"getitem"}
"""ATen operators (``name.overload``, namespace dropped) numlab can predict: every
ATen operator of the registry's lowering table, and ``getitem`` (Python's, picking
one output of a tuple-valued operator)."""


def _bases_of(*ops: str) -> tuple:
    """ATen base names lowered to ``ops`` (the registrations), other than the ops' own."""
    return tuple(sorted({a.split(".")[0] for a, op in CATALOGUE_MAP.items() if op in ops} - set(ops)))


#: ATen operators lowered to maximum/minimum (clamp, clamp_min, clamp_max, hardtanh) and to
#: comparisons of truth values (logical_*, bitwise_* of masks), from the registry
_CLAMP = _bases_of("maximum", "minimum")
_LOGIC = _bases_of("ne", "eq")


def import_torch():
    """Import the real PyTorch (absolute import), or raise ImportError saying how to get it."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ImportError(
            "numlab.torch needs PyTorch: pip install torch==2.13.0 "
            "(the CPU build; an unpinned torch pulls a multi-GB GPU build)"
        ) from exc
    return torch


@dataclass(frozen=True)
class Ref:
    """A reference to another node's value inside :attr:`ANode.args`."""

    name: str

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class ANode:
    """One ATen operator call of a traced function.

    ``op`` is ``name.overload`` without the namespace (``mul.Tensor``,
    ``_softmax.default``, ``getitem``); ``args``/``kwargs`` hold
    :class:`Ref` for tensor operands and plain Python values otherwise;
    ``dtype`` is the numlab name of the result's dtype (``fp16``, ``bool``,
    ...; None for tuples) and ``shape`` its shape.
    """

    name: str
    op: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    dtype: str | None = None
    shape: tuple | None = None

    def refs(self) -> list[str]:
        out = []
        for a in list(self.args) + list(self.kwargs.values()):
            if isinstance(a, Ref):
                out.append(a.name)
            elif isinstance(a, (list, tuple)):
                out.extend(x.name for x in a if isinstance(x, Ref))
        return out

    def __str__(self) -> str:
        kw = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        args = ", ".join(repr(a) for a in self.args)
        return f"%{self.name}: {self.dtype}{list(self.shape) if self.shape is not None else ''} = {self.op}({args}{kw})"


def _dtype_name(t) -> str | None:
    if t is None:
        return None
    name = str(t).replace("torch.", "")
    return DTYPES.get(name, name)


def _op_name(target) -> str:
    if target is operator.getitem:
        return "getitem"
    s = str(target)  # "aten.mul.Tensor" / "prims.convert_element_type.default"
    parts = s.split(".")
    return ".".join(parts[1:]) if len(parts) >= 3 else s


def _convert_arg(a, torch):
    import torch.fx as fx

    if isinstance(a, fx.Node):
        return Ref(a.name)
    if isinstance(a, (list, tuple)):
        return type(a)(_convert_arg(x, torch) for x in a)
    if isinstance(a, torch.dtype):
        return _dtype_name(a)
    if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
        return str(a)
    return a


def _fx_to_nodes(gm, torch):
    """(placeholders, constants, nodes, outputs) of an fx GraphModule."""
    placeholders, constants, nodes, outputs = [], {}, [], []
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        dtype = _dtype_name(getattr(val, "dtype", None))
        shape = tuple(int(s) for s in val.shape) if hasattr(val, "shape") else None
        if n.op == "placeholder":
            placeholders.append(ANode(n.name, "placeholder", (), {}, dtype, shape))
        elif n.op == "get_attr":
            t = getattr(gm, n.target)
            constants[n.name] = t.detach()
            nodes.append(ANode(n.name, "constant", (), {}, _dtype_name(t.dtype), tuple(t.shape)))
        elif n.op == "call_function":
            args = tuple(_convert_arg(a, torch) for a in n.args)
            kwargs = {k: _convert_arg(v, torch) for k, v in n.kwargs.items()}
            nodes.append(ANode(n.name, _op_name(n.target), args, kwargs, dtype, shape))
        elif n.op == "output":
            out = n.args[0]
            outs = out if isinstance(out, (list, tuple)) else (out,)
            outputs = [o.name for o in outs]
        else:
            raise ValueError(f"unsupported fx node kind {n.op!r} ({n.name}); only functions of tensors are supported")
    return placeholders, constants, nodes, outputs


class TorchTrace(Compact):
    """A traced torch function: the ATen graph, its inputs, outputs and constants.

    Attributes
    ----------
    fn : callable
        The original function or module (called for torch eager / compiled).
    inputs : list[ANode]
        Placeholders (``dtype``, ``shape`` of each example input).
    nodes : list[ANode]
        ATen operator calls in topological order (eager level).
    outputs : list[str]
        Names of the output nodes.
    constants : dict[str, torch.Tensor]
        Module parameters and buffers (``get_attr`` nodes).
    """

    def __init__(self, fn, example_inputs, inputs, nodes, outputs, constants):
        self.fn = fn
        self.example_inputs = tuple(example_inputs)
        self.inputs = inputs
        self.nodes = nodes
        self.outputs = outputs
        self.constants = constants
        self._inductor = None

    @property
    def input_names(self) -> list[str]:
        return [p.name for p in self.inputs]

    @property
    def storage(self) -> str:
        """The lowest-precision float dtype among the inputs (``fp16``, ``bf16`` or ``fp32``)."""
        dts = [p.dtype for p in self.inputs] + [self.node(o).dtype for o in self.outputs]
        for d in ("fp16", "bf16"):
            if d in dts:
                return d
        return "fp32"

    def node(self, name: str) -> ANode:
        for n in self.inputs + self.nodes:
            if n.name == name:
                return n
        raise ValueError(f"no node {name!r}; nodes: {[n.name for n in self.inputs + self.nodes]}")

    def ops(self) -> list[str]:
        return sorted({n.op for n in self.nodes})

    def __str__(self) -> str:
        lines = [f"TorchTrace({getattr(self.fn, '__name__', type(self.fn).__name__)})"]
        lines += [f"  input %{p.name}: {p.dtype}{list(p.shape)}" for p in self.inputs]
        lines += [f"  {n}" for n in self.nodes]
        lines.append(f"  return {', '.join('%' + o for o in self.outputs)}")
        return "\n".join(lines)

    def _repr_facts(self):
        ops = self.ops()
        rows = [("inputs", ", ".join(f"%{p.name}: {p.dtype}{list(p.shape or ())}" for p in self.inputs[:6])
                 + (" ..." if len(self.inputs) > 6 else "")),
                ("nodes", f"{len(self.nodes)} ATen calls, ops " + ", ".join(ops[:10]) + (" ..." if len(ops) > 10 else "")),
                ("outputs", ", ".join("%" + o for o in self.outputs[:6]) + (" ..." if len(self.outputs) > 6 else "")),
                ("constants", ", ".join(f"{k}{list(getattr(v, 'shape', ()))}" for k, v in list(self.constants.items())[:6])
                 + (" ..." if len(self.constants) > 6 else "") if self.constants else None)]
        return f"TorchTrace: {getattr(self.fn, '__name__', type(self.fn).__name__)} (str() lists the nodes)", rows

    def inductor_nodes(self) -> list[ANode]:
        """The graph after Inductor's decompositions (what torch.compile lowers)."""
        if self._inductor is None:
            torch = import_torch()
            from torch._inductor.decomposition import select_decomp_table
            from torch.fx.experimental.proxy_tensor import make_fx

            gm = make_fx(self.fn, decomposition_table=select_decomp_table(), tracing_mode="real")(
                *self.example_inputs)
            ph, consts, nodes, outs = _fx_to_nodes(gm, torch)
            missing = sorted({n.op for n in nodes if n.op not in PREDICTABLE and n.op != "constant"})
            if missing:  # checked before caching: a later call must raise again, not return a partial graph
                raise ValueError(
                    f"Inductor's decomposition of {getattr(self.fn, '__name__', self.fn)!r} uses ATen ops "
                    f"numlab cannot predict: {missing}; predictable: {sorted(PREDICTABLE)}")
            self._inductor = (ph, consts, nodes, outs)
        return self._inductor

    # -- numlab IR ----------------------------------------------------------------
    def to_graph(self, *, casts: bool = True):
        """The function as a :class:`numlab.graph.Graph` over the op catalogue.

        ``casts=False`` lowers a float-to-float dtype conversion (``.half()``,
        ``.to(torch.bfloat16)``) as the identity: the exact reference of a function
        (``predict(mode="reference")``) has no rounding at all, not even the user's own casts.

        Raises ValueError listing every ATen operator without a catalogue
        equivalent (never a partial graph).
        """
        gnodes, missing = [], []
        alias = {}  # fx name -> graph name (for no-op nodes)
        consts = {}
        live = set(self.outputs)  # dead nodes (e.g. layer_norm's unused mean/rstd) are dropped
        for n in reversed(self.nodes):
            if n.name in live:
                live.update(n.refs())
        for n in self.nodes:
            if n.name not in live:
                continue
            try:
                out = _map_node(n, alias, self, casts)
            except _Unmapped as exc:
                missing.append(str(exc))
                continue
            if out is None:
                continue
            if isinstance(out, str):
                alias[n.name] = out
                continue
            for item in out:
                gnodes.append(Node(*item))
        if missing:
            raise ValueError(
                "cannot map to numlab's operator catalogue (no partial graph is built); "
                f"missing: {sorted(set(missing))}")
        inputs = {p.name: tuple(p.shape) for p in self.inputs}
        outs = [alias.get(o, o) for o in self.outputs]
        used = {i for g in gnodes for i in g.inputs} | set(outs)
        # a literal read as an arithmetic op's scalar leaves its constant node unused
        gnodes = [g for g in gnodes if g.op != "constant" or g.name in used]
        for n in self.nodes:
            # a module's parameter or buffer is a graph input; a literal tensor made inside
            # the function (lift_fresh_copy) became a constant node and is no input
            if n.op == "constant" and n.name in used:
                inputs[n.name] = tuple(n.shape)
                consts[n.name] = True
        return Graph(inputs, gnodes, outs, name=getattr(self.fn, "__name__", "torch_fn"))


class _Unmapped(Exception):
    pass


def _is_num(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def scalar_value(s) -> float:
    """The float64 value of a ``constant`` node standing for the Python number ``s``
    of a torch function (``x > 0.3``, ``torch.where(c, x, 0.5)``, ``x.clamp(min=0.3)``).

    ATen converts a Python number to a tensor's dtype through C++ ``float``:
    ``c10::Half(float)`` / ``c10::BFloat16(float)`` take a float, so the double
    ``s`` is rounded to fp32 and then to fp16/bf16 (two roundings; measured on
    torch 2.13: ``x >= 1 + 2**-11 + 2**-40`` is True for an fp16 ``x == 1``,
    which one rounding would make False).  A numlab kernel rounds a constant's
    float64 value once into the storage format S.  So this returns ``s`` itself
    when rounding it once gives the same fp16, bf16 and fp32 value as torch's
    double -> float -> dtype path (nearly every number: the float64 reference
    keeps the user's 0.3), else fp32(``s``), the value torch holds, whose one
    rounding into fp16/bf16 is torch's.
    """
    v = float(s)
    if not np.isfinite(v):
        return v
    with np.errstate(over="ignore"):
        v32 = float(np.float32(v))
    for fmt in (FP16, BF16):
        once, twice = round_to(np.array([v, v32], dtype=np.float64), fmt)
        if once != twice:
            return v32
    return v


def _literal(tr: "TorchTrace", ref: Ref):
    """The value of a 0-d float tensor literal (``torch.tensor(0.3)`` in the function:
    ``lift_fresh_copy`` of a constant) as a Python float, else None."""
    if not isinstance(ref, Ref):
        return None
    n = tr.node(ref.name)
    if n.op.startswith("lift_fresh_copy") and n.shape == () and n.args[0].name in tr.constants \
            and n.dtype in ("fp32", "fp16", "bf16"):
        return float(tr.constants[n.args[0].name].double().item())
    return None


def _const(name: str, s) -> tuple:
    """A 0-d ``constant`` graph node holding the Python number ``s`` (:func:`scalar_value`)."""
    return (name, "constant", (), {"value": _ops.ConstValue(scalar_value(s))})


def _tensorise(nm: str, vals) -> tuple[list, list]:
    """Operands with each Python number replaced by a 0-d constant node named
    ``<nm>.c<i>``: (constant nodes, operand names)."""
    pre, names = [], []
    for i, v in enumerate(vals):
        if _is_num(v):
            pre.append(_const(f"{nm}.c{i}", v))
            names.append(f"{nm}.c{i}")
        else:
            names.append(v)
    return pre, names


def _map_node(n: ANode, alias: dict, tr: TorchTrace, casts: bool = True, per_node: bool = False):
    """ANode -> list of graph node tuples, an alias name (str), or None (skip).
    ``per_node``: the graph gives every node its own storage format
    (:func:`numlab.torch.lowering.lower`), so a literal of another dtype than the
    function's is no obstacle."""
    base = n.op.split(".")[0].rstrip("_")
    r = [alias.get(x.name, x.name) if isinstance(x, Ref) else x for x in n.args]
    nm = n.name
    if n.op == "constant":
        return None
    if base in ("clone", "alias", "detach") or (base in ("_to_copy", "convert_element_type") and (
            tr.node(n.args[0].name).dtype == n.dtype
            or (not casts and "bool" not in (tr.node(n.args[0].name).dtype, n.dtype)))):
        return r[0]
    if base in ("_to_copy", "convert_element_type"):
        return [(nm, "cast", (r[0],), {"to": n.dtype})]
    if base in ("add", "sub", "mul", "div", "rsub"):
        return _map_arith(n, base, r, tr)
    if base == "pow":
        if r[1] == 2:
            return [(nm, "mul", (r[0], r[0]), {})]
        raise _Unmapped(f"aten.{n.op} with exponent {r[1]!r} (only 2 maps to mul)")
    if base == "gelu":
        return [(nm, "gelu", (r[0],), {"approximate": n.kwargs.get("approximate", "none")})]
    if base == "softplus":
        beta = r[1] if len(r) > 1 else n.kwargs.get("beta", 1.0)
        threshold = r[2] if len(r) > 2 else n.kwargs.get("threshold", 20.0)
        if not (_is_num(beta) and _is_num(threshold)) or not beta > 0:
            raise _Unmapped(f"aten.{n.op} with beta={beta!r}, threshold={threshold!r} (numbers, beta > 0, map)")
        return [(nm, "softplus", (r[0],), {"beta": float(beta), "threshold": float(threshold)})]
    if base in ("sum", "mean", "amax", "amin", "var_mean"):
        return _map_reduction(n, base, r)
    if base == "_softmax":
        return [(nm, "softmax", (r[0],), {"axis": int(r[1])})]
    if base == "native_layer_norm":
        return _map_layer_norm(n, r, tr)
    if base == "getitem":
        src = tr.node(n.args[0].name)
        if src.op.startswith("native_layer_norm") and r[1] == 0:
            return r[0]
        if src.op.startswith("var_mean") and r[1] in (0, 1):
            return f"{r[0]}.{('var', 'mean')[r[1]]}"
        raise _Unmapped(f"output {r[1]} of aten.{src.op}")
    if base in ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze"):
        return [(nm, "reshape", (r[0],), {"shape": tuple(n.shape)})]
    if base in ("permute",):
        return [(nm, "transpose", (r[0],), {"perm": tuple(int(p) for p in r[1])})]
    if base in ("t", "transpose"):
        nd = len(n.shape)
        d0, d1 = (0, 1) if base == "t" else (int(r[1]) % nd, int(r[2]) % nd)
        perm = list(range(nd))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return [(nm, "transpose", (r[0],), {"perm": tuple(perm)})]
    if base == "expand":
        return [(nm, "broadcast_to", (r[0],), {"shape": tuple(n.shape)})]
    if base in _ops.COMPARISONS or base in ("where", "maximum", "minimum"):
        # truth values (comparisons) and selections: a Python number becomes a 0-d constant
        if all(_is_num(x) for x in r):
            raise _Unmapped(f"aten.{n.op} of Python scalars only")
        pre, names = _tensorise(nm, r)
        return pre + [(nm, base, tuple(names), {})]
    if base in _CLAMP:
        return _map_clamp(n, base, r, alias)
    if base in _LOGIC:
        return _map_logic(n, base, r, tr)
    if base == "masked_fill":  # x.masked_fill(mask, v) = where(mask, v, x)
        pre, (v,) = _tensorise(nm, [r[2]])
        return pre + [(nm, "where", (r[1], v, r[0]), {})]
    if base in ("scalar_tensor", "lift_fresh_copy"):
        return _map_literal(n, base, r, tr, per_node)
    op = CATALOGUE_MAP.get(n.op)
    if op is not None and len(n.args) == 1 and not n.kwargs and _ops.CATALOGUE[op].arity == (1, 1) \
            and not _ops.CATALOGUE[op].attrs:
        return [(nm, op, (r[0],), {})]  # a one-input operator without attributes (exp, log1p, mish, ...)
    raise _Unmapped(f"aten.{n.op}" + (f" with arguments {n.args[1:]} {n.kwargs}" if op is not None else ""))


def _map_arith(n: ANode, base: str, r: list, tr: "TorchTrace"):
    """add/sub/mul/div (``.Tensor``/``.Scalar``, in place or not) and rsub: a Python
    number (or 0-d tensor literal) operand gives the scalar form; ``alpha`` scales
    the second operand first (a number: folded into it; a tensor: a ``mul_scalar``)."""
    nm = n.name
    alpha = n.kwargs.get("alpha", r[2] if len(r) > 2 else 1)
    if base == "rsub":  # rsub(x, s, alpha) = s - alpha * x
        a, b = r[1], r[0]
        base = "sub"
    else:
        # a 0-d tensor literal is read by ATen's kernel as its scalar, like a Python number
        a, b = (v if (lit := _literal(tr, x)) is None else lit for x, v in zip(n.args[:2], r[:2], strict=True))
    if _is_num(a) and _is_num(b):
        raise _Unmapped(f"aten.{n.op} of two scalars")
    pre = []
    if alpha != 1:
        if base not in ("add", "sub"):
            raise _Unmapped(f"aten.{n.op} with alpha")
        if _is_num(b):
            b = float(b) * float(alpha)
        else:
            pre = [(nm + ".alpha", "mul_scalar", (b,), {"scalar": float(alpha)})]
            b = nm + ".alpha"
    if _is_num(b):
        return pre + [(nm, f"{base}_scalar", (a,), {"scalar": float(b)})]
    if _is_num(a):
        op = {"add": "add_scalar", "mul": "mul_scalar", "sub": "rsub_scalar", "div": "rdiv_scalar"}[base]
        return pre + [(nm, op, (b,), {"scalar": float(a)})]
    return pre + [(nm, base, (a, b), {})]


def _map_reduction(n: ANode, base: str, r: list):
    """sum/mean/amax/amin over ``dim`` (None or [] = all) and var_mean (two nodes,
    ``<name>.var`` and ``<name>.mean``, picked by its getitems)."""
    nm = n.name
    dims = r[1] if len(r) > 1 else n.kwargs.get("dim")
    keep = bool(r[2] if len(r) > 2 and base != "var_mean" else n.kwargs.get("keepdim", False))
    if n.kwargs.get("dtype") not in (None, n.dtype):
        raise _Unmapped(f"aten.{n.op} with dtype=")
    axis = None if dims in (None, []) else tuple(int(d) for d in dims)
    if base == "var_mean":
        corr = n.kwargs.get("correction", 1)
        if not _is_num(corr) or int(corr) != corr:
            raise _Unmapped(f"aten.{n.op} with correction={corr!r}")
        return [(f"{nm}.var", "var", (r[0],), {"axis": axis, "keepdims": keep, "correction": int(corr)}),
                (f"{nm}.mean", "mean", (r[0],), {"axis": axis, "keepdims": keep})]
    if n.op not in CATALOGUE_MAP:  # e.g. sum.default (every dim): not a registered lowering
        raise _Unmapped(f"aten.{n.op}")
    return [(nm, CATALOGUE_MAP[n.op], (r[0],), {"axis": axis, "keepdims": keep})]


def _map_layer_norm(n: ANode, r: list, tr: "TorchTrace"):
    """native_layer_norm over the last ``len(normalized_shape)`` dims, with or
    without weight and bias (a bias alone: layer_norm, then add)."""
    nm = n.name
    x, shape, w, b, eps = r[:5]
    nd = len(tr.node(n.args[0].name).shape)
    axis = -1 if len(shape) == 1 else tuple(range(nd - len(shape), nd))
    attrs = {"axis": axis, "eps": float(eps)}
    if w is None and b is not None:
        return [(nm + ".norm", "layer_norm", (x,), attrs), (nm, "add", (nm + ".norm", b), {})]
    return [(nm, "layer_norm", tuple(v for v in (x, w, b) if v is not None), attrs)]


def _map_clamp(n: ANode, base: str, r: list, alias: dict):
    """clamp / clamp_min / clamp_max / hardtanh -> min(max(x, lo), hi) as ATen computes
    it (lo first, NaN propagates); a number bound becomes a 0-d constant."""
    nm = n.name
    if base == "clamp_min":
        lo, hi = r[1], None
    elif base == "clamp_max":
        lo, hi = None, r[1]
    else:
        dflt = (-1.0, 1.0) if base == "hardtanh" else (None, None)
        lo = r[1] if len(r) > 1 else n.kwargs.get("min", n.kwargs.get("min_val", dflt[0]))
        hi = r[2] if len(r) > 2 else n.kwargs.get("max", n.kwargs.get("max_val", dflt[1]))
        lo = alias.get(lo.name, lo.name) if isinstance(lo, Ref) else lo
        hi = alias.get(hi.name, hi.name) if isinstance(hi, Ref) else hi
    steps = [(op, b) for op, b in (("maximum", lo), ("minimum", hi)) if b is not None]
    if not steps:
        return r[0]
    out, src = [], r[0]
    for k, (op, b) in enumerate(steps):
        name = nm if k == len(steps) - 1 else f"{nm}.{op}"
        pre, (b_name,) = _tensorise(name, [b])
        out += pre + [(name, op, (src, b_name), {})]
        src = name
    return out


def _map_logic(n: ANode, base: str, r: list, tr: "TorchTrace"):
    """Logical operators as exact comparisons of 0.0 / 1.0 (truth values, value_kind
    "bool"): and = ne(minimum(a, b), 0), or = ne(maximum(a, b), 0), xor = ne(a, b),
    not = eq(a, 0); a float operand of a logical_* op is first its truth (x != 0,
    NaN is true).  bitwise_* of integers has no catalogue equivalent."""
    nm = n.name
    out, names = [], []
    for i, (arg, v) in enumerate(zip(n.args, r, strict=False)):
        if not isinstance(arg, Ref):
            raise _Unmapped(f"aten.{n.op} with a Python scalar operand")
        if tr.node(arg.name).dtype != "bool":
            if base.startswith("bitwise"):
                raise _Unmapped(f"aten.{n.op} of a {tr.node(arg.name).dtype} tensor (integers)")
            out += [_const(f"{nm}.z{i}", 0.0), (f"{nm}.t{i}", "ne", (v, f"{nm}.z{i}"), {})]
            v = f"{nm}.t{i}"
        names.append(v)
    kind = base.split("_")[1]
    if kind == "not":
        return out + [_const(f"{nm}.z", 0.0), (nm, "eq", (names[0], f"{nm}.z"), {})]
    if kind == "xor":
        return out + [(nm, "ne", tuple(names), {})]
    sel = "minimum" if kind == "and" else "maximum"
    return out + [(f"{nm}.{sel}", sel, tuple(names), {}), _const(f"{nm}.z", 0.0),
                  (nm, "ne", (f"{nm}.{sel}", f"{nm}.z"), {})]


def _map_literal(n: ANode, base: str, r: list, tr: "TorchTrace", per_node: bool = False):
    """scalar_tensor (a number as a 0-d tensor) and lift_fresh_copy (a tensor literal
    made in the function) -> a ``constant`` node (of another dtype than the function's
    only with ``per_node`` storage formats)."""
    nm = n.name
    if base == "scalar_tensor":
        if n.dtype != tr.storage and not per_node:
            raise _Unmapped(f"aten.{n.op} of dtype {n.dtype} in a {tr.storage} function (numlab holds "
                            "every value in one storage format)")
        return [_const(nm, r[0])]
    if base == "lift_fresh_copy":  # a tensor literal made in the function: its exact values
        src = n.args[0].name
        if src not in tr.constants:
            raise _Unmapped(f"aten.{n.op} of a computed tensor")
        t = tr.constants[src]
        dt = _dtype_name(t.dtype)
        if t.dim() and dt != tr.storage and not per_node:
            raise _Unmapped(f"aten.{n.op} of a {dt} tensor of shape {tuple(t.shape)} in a {tr.storage} "
                            "function (numlab holds every value in one storage format)")
        vals = t.numpy() if str(t.dtype) == "torch.bool" else t.double().numpy()
        return [(nm, "constant", (), {"value": _ops.ConstValue(vals)})]
    raise _Unmapped(f"aten.{n.op}")


def from_torch(fn_or_module, example_inputs, *, check: bool = True) -> TorchTrace:
    """Trace ``fn_or_module(*example_inputs)`` to ATen operators.

    Parameters
    ----------
    fn_or_module : callable or torch.nn.Module
        A function of tensors returning a tensor or a tuple of tensors.
    example_inputs : tuple of torch.Tensor (or one tensor)
        Inputs that fix dtypes and shapes (CPU, float32/float16/bfloat16).
    check : bool
        Raise ValueError listing every ATen operator numlab cannot predict
        (default).  With False the trace is returned anyway (for printing).

    Returns
    -------
    TorchTrace
        ``.nodes`` (eager ATen graph), ``.inductor_nodes()``, ``.to_graph()``.
    """
    torch = import_torch()
    from torch.fx.experimental.proxy_tensor import make_fx

    if not callable(fn_or_module):
        raise TypeError(f"fn_or_module={fn_or_module!r} is not callable; pass a function of tensors "
                        "or a torch.nn.Module")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)) or not example_inputs:
        raise TypeError(f"example_inputs={example_inputs!r} ({type(example_inputs).__name__}) is not valid; "
                        "pass a torch.Tensor or a non-empty tuple of torch.Tensor")
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"example_inputs[{i}] is a {type(t).__name__}, not a torch.Tensor; "
                            "valid: torch.Tensor (e.g. torch.from_numpy(a))")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(
                f"example_inputs[{i}] has dtype {t.dtype}; valid: torch.float32, torch.float16, torch.bfloat16")
        if t.device.type != "cpu":
            raise ValueError(f"example_inputs[{i}] is on device {str(t.device)!r}; valid: 'cpu' "
                             "(numlab predicts the CPU backends)")
    with torch.no_grad():
        gm = make_fx(fn_or_module, tracing_mode="real")(*example_inputs)
    ph, consts, nodes, outs = _fx_to_nodes(gm, torch)
    tr = TorchTrace(fn_or_module, example_inputs, ph, nodes, outs, consts)
    if check:
        missing = sorted({n.op for n in nodes if n.op not in PREDICTABLE and n.op != "constant"})
        if missing:
            raise ValueError(
                f"{getattr(fn_or_module, '__name__', type(fn_or_module).__name__)!r} uses ATen operators "
                f"numlab cannot predict: {missing}; predictable: {sorted(PREDICTABLE)}")
    return tr


def as_numpy(t) -> np.ndarray:
    """A CPU tensor's values as float32 (bf16/fp16 widened exactly) or bool."""
    torch = import_torch()
    t = t.detach()
    if t.dtype == torch.bool:
        return t.numpy().copy()
    return t.to(torch.float32).numpy().copy()
