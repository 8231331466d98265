"""Lower a traced torch function to a numlab :class:`~numlab.graph.Graph` that
:func:`numlab.execute.run` computes as torch does.

:meth:`TorchTrace.to_graph() <numlab.torch.bridge.TorchTrace.to_graph>` maps each
ATen operator onto catalogue operators (:func:`numlab.torch.bridge._map_node`).
:func:`lower` starts from that mapping and adds what the *dtypes* of a torch
function decide, as graph facts only (no arithmetic here):

* every node's ``storage`` meta attribute (:func:`numlab.execute.values.node_format`):
  the torch dtype its value has, so a function mixing bf16 and fp32 tensors runs in
  one ``fmt="fp32"`` run with each node computing in and stored in its own dtype;
* ATen's type promotion (``TensorIterator``): a tensor operand of another float
  dtype than the common one is converted first (a ``cast``), except a 0-d tensor
  read as a multiply's or divide's scalar (kept fp32, measured);
* a Python scalar of a comparison or a selection is a 0-d ``constant`` in the dtype
  torch converts it to (the compared tensor's for a comparison, eager and compiled;
  the result's for ``where``/``masked_fill`` in eager, fp32 in Inductor's code);
* ``add``/``sub`` with ``alpha`` of two tensors is one ``add_alpha`` kernel in the
  ATen graph (ATen's one FMA; its knobs are the spec's ``storage_scalars``, ``fma`` and
  ``alpha_step``), ``mul_scalar`` then ``add`` in Inductor's graph (its
  decomposition);
* ATen's ``mean`` of a 16-bit tensor is an fp32 mean of the widened values and one
  conversion (``cast``); Inductor keeps a 16-bit ``mean`` as its fp32 quotient, the
  conversion left to the graph's outputs (``emulated=True``: rounded at once, as
  ``emulate_precision_casts``);
* the graph's outputs are converted to their torch dtype where a node's storage is
  wider (Inductor's fp32 ``mean``, ``var_mean``).

How each node then computes (scalar conversion, FMA, orders, tails, the math
routines, softmax's and layer norm's kernels) is the ``KernelSpec`` the presets
give (:meth:`TorchCpuEager.kernel_spec`, :meth:`InductorCpu.kernel_spec`), and
which values stay fp32 inside a kernel is the execution mode.
"""

from __future__ import annotations

from ..graph import Graph, Node
from ..ops import ConstValue as _ops_const
from .bridge import (
    _CLAMP,
    ANode,
    Ref,
    TorchTrace,
    _const,
    _is_num,
    _literal,
    _map_node,
    _Unmapped,
    scalar_value,
)

__all__ = ["lower", "FLOATS", "LOW"]

FLOATS = ("fp32", "fp16", "bf16")
LOW = ("fp16", "bf16")
_CMP = ("gt", "ge", "lt", "le", "eq", "ne")
_ARITH = ("add", "sub", "mul", "div", "rsub")
_SCALAR_OPS = ("add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar", "rdiv_scalar")


def _base(op: str) -> str:
    return op.split(".")[0].rstrip("_")


def _common(dts) -> str:
    """torch's common float dtype of tensor operands of the same category."""
    dts = set(dts)
    return dts.pop() if len(dts) == 1 else "fp32"


def lower(trace: TorchTrace, *, graph: str = "aten", promotion: str = "eager", scalars: str = "aten",
          emulated: bool = False, rules=None, loads: bool | None = None) -> tuple[Graph, list[str]]:
    """``(graph, dtypes)``: the function as a numlab Graph with per-node ``storage``
    (module docstring) and its outputs' torch dtypes.

    ``graph``: ``"aten"`` (the eager ATen graph) or ``"inductor"`` (Inductor's
    decomposition, :meth:`TorchTrace.inductor_nodes`).  ``promotion``: ``"eager"``
    (ATen's type promotion casts, ATen's 16-bit ``mean``) or ``"fused"``
    (Inductor's: operands computed in fp32 unconverted, the 16-bit ``mean`` kept
    fp32 unless ``emulated``).  ``scalars``: ``"aten"`` (a selection's scalar in the
    result dtype, a 0-d tensor converted to the common dtype unless a multiply's or
    divide's) or ``"inductor"`` (fp32).  ``rules``: the eager preset's
    ``scalar_rules`` (``"where"`` and ``"compare"``: ``"storage"``, the default, or
    ``"opmath"`` for an fp32 constant).  ``loads``: every node's ``loads`` is the
    format of the graph's 16-bit inputs (fp32 for a reduction over a value kept in a
    local buffer), as Inductor's fused loops read them (default: for ``graph="inductor"``
    with ``promotion="fused"``).

    Raises ValueError listing every ATen operator without a catalogue equivalent.
    """
    if graph == "inductor":
        ph, consts, nodes, outs = trace.inductor_nodes()
        tr = TorchTrace(trace.fn, trace.example_inputs, ph, nodes, outs, consts)
    else:
        tr = trace
    dtype = {p.name: p.dtype for p in tr.inputs}
    dtype.update({n.name: n.dtype for n in tr.nodes})
    live = set(tr.outputs)
    for n in reversed(tr.nodes):
        if n.name in live:
            live.update(n.refs())
    gnodes: list[Node] = []
    alias: dict[str, str] = {}
    missing = []
    fused = promotion == "fused"
    # the fused kernels' loops load the graph's inputs: 16-bit ones fill two fp32 vectors
    if loads is None:
        loads = fused and graph == "inductor"
    # the 16-bit format of the graph inputs each node's loop reads (through its producers)
    load_fmt = {p.name: p.dtype for p in tr.inputs if p.dtype in LOW}
    for n in tr.nodes:
        low_in = sorted({load_fmt[r] for r in n.refs() if r in load_fmt})
        if low_in:
            load_fmt[n.name] = low_in[0]
    users: dict[str, int] = {}
    for n in tr.nodes:
        for r in n.refs():
            users[r] = users.get(r, 0) + 1
    inputs_in = {p.name for p in tr.inputs}
    for n in tr.nodes:
        if n.name not in live or n.op == "constant":
            continue
        try:
            out = _lower_node(n, alias, tr, dtype, graph, promotion, scalars, emulated, dict(rules or ()))
        except _Unmapped as exc:
            missing.append(str(exc))
            continue
        if isinstance(out, str):
            alias[n.name] = out
            continue
        for name, op, ins, attrs, storage in out:
            if fused:
                storage = _fused_storage(op, storage, n, emulated)
            if loads:
                src = n.args[0] if n.args else None
                local = (op in ("sum", "mean") and not n.op.startswith("var_mean") and isinstance(src, Ref)
                         and src.name not in inputs_in and users.get(src.name, 0) > 1)
                # a reduced value that is also used later sits in an fp32 local buffer, which
                # its reduction loop reads as fp32 (generated code read; measured for softmax)
                attrs = {**attrs, "loads": "fp32" if local else load_fmt.get(n.name, "fp32")}
            if storage in FLOATS:
                attrs = {**attrs, "storage": storage}
            gnodes.append(Node(name, op, tuple(ins), attrs))
    if missing:
        raise ValueError("cannot map to numlab's operator catalogue (no partial graph is built); "
                         f"missing: {sorted(set(missing))}")
    outs, dts = [], []
    stored = {g.name: g.attrs.get("storage") for g in gnodes}
    for o in tr.outputs:
        name = alias.get(o, o)
        want = dtype[o]
        have = stored.get(name, dtype.get(name))
        if want in FLOATS and have in FLOATS and have != want:
            gnodes.append(Node(f"{name}.out", "cast", (name,), {"to": want, "storage": want}))
            name = f"{name}.out"
        outs.append(name)
        dts.append(want)
    inputs = {p.name: tuple(p.shape) for p in tr.inputs}
    used = {i for g in gnodes for i in g.inputs} | set(outs)
    for n in tr.nodes:
        if n.op == "constant" and n.name in used:
            inputs[n.name] = tuple(n.shape)
    return Graph(inputs, gnodes, outs, name=getattr(trace.fn, "__name__", "torch_fn")), dts


_STORED = ("sum", "max", "min", "softmax", "log_softmax", "layer_norm")


def _fused_storage(op: str, storage, n: ANode, emulated: bool):
    """Where a fused kernel holds a node's value: a reduction's result and a library
    kernel's (softmax, layer norm) are stored in their dtype; a ``mean`` or ``var``
    stays an fp32 quotient; every pointwise value (and a view of it) is an fp32
    register, or with ``emulated`` (``emulate_precision_casts``) rounded to its dtype;
    constants and truth values as lowered."""
    if op == "constant" or storage is None:
        return storage
    if op in _STORED:
        return storage
    if op in ("mean", "var"):
        return storage if emulated and op == "mean" else "fp32"
    return storage if emulated else "fp32"


def _lower_node(n: ANode, alias, tr, dtype, graph, promotion, scalars, emulated, rules):
    """One ATen node -> ``[(name, op, inputs, attrs, storage)]`` or an alias name."""
    base = _base(n.op)
    dt = n.dtype
    if dt is None and n.args and isinstance(n.args[0], Ref):  # a tuple (layer norm): its input's dtype
        dt = dtype.get(n.args[0].name)
    nm = n.name
    eager = promotion == "eager"
    # a fused kernel keeps fp32: a float-to-float conversion inside it is no rounding
    casts = eager or emulated
    ref_dt = [dtype.get(a.name) if isinstance(a, Ref) else None for a in n.args]

    def name_of(a):
        return alias.get(a.name, a.name) if isinstance(a, Ref) else a

    alpha = n.kwargs.get("alpha", 1)
    if graph == "aten" and base in ("add", "sub") and alpha != 1 and isinstance(n.args[0], Ref):
        # ATen's add/sub with alpha: one kernel x + alpha*y (a number y: a 0-d tensor of the dtype)
        a = float(alpha) * (-1.0 if base == "sub" else 1.0)
        y = n.args[1]
        if _is_num(y):
            return [(*_const(f"{nm}.c1", y), dt),
                    (nm, "add_alpha", (name_of(n.args[0]), f"{nm}.c1"), {"alpha": scalar_value(a)}, dt)]
        if _literal(tr, n.args[0]) is None and _literal(tr, y) is None:
            pre, (x, y) = _promote(nm, [name_of(n.args[0]), name_of(y)], n, ref_dt, dt, eager, scalars, tr)
            return pre + [(nm, "add_alpha", (x, y), {"alpha": scalar_value(a)}, dt)]
    if base == "mean" and dtype.get(n.args[0].name) in LOW and dt in LOW:
        out = _map_node(n, alias, tr, casts, per_node=True)
        ((name, op, ins, attrs),) = out
        if eager:
            # ATen: an fp32 sum of the widened values divided in fp32, one rounding
            return [(f"{nm}.fp32", op, ins, attrs, "fp32"), (nm, "cast", (f"{nm}.fp32",), {"to": dt}, dt)]
        return [(name, op, ins, attrs, dt if emulated else "fp32")]
    if base == "var_mean":
        out = _map_node(n, alias, tr, casts, per_node=True)
        return [(*item, "fp32") for item in out]
    out = _map_node(n, alias, tr, casts, per_node=True)
    if out is None or isinstance(out, str):
        return out
    items = []
    if base in _CMP or base in ("where", "maximum", "minimum", "masked_fill") or base in _CLAMP:
        # the 0-d constants a Python number became: in the dtype torch converts it to
        if base in _CMP:
            # Inductor too converts a comparison's number to the compared dtype (measured)
            cdt = _common([d for d in ref_dt if d in FLOATS]) if any(d in FLOATS for d in ref_dt) else dt
            if scalars == "aten" and rules.get("compare", "storage") == "opmath":
                cdt = "fp32"
        elif base in ("where", "masked_fill"):
            cdt = dt if scalars == "aten" and rules.get("where", "storage") == "storage" else "fp32"
        else:
            cdt = dt
        for item in out:
            name, op, ins, attrs = item
            if op == "constant":
                items.append((name, op, ins, attrs, cdt))
            else:
                items.append((name, op, ins, attrs, None if op in _CMP else dt))
        if base in _CMP or base in ("where", "maximum", "minimum"):
            last = items[-1]
            pre, ins = _promote(nm, list(last[2]), n, ref_dt, dt, eager, scalars, tr, skip_first=base == "where")
            items = items[:-1] + pre + [(last[0], last[1], tuple(ins), last[3], last[4])]
        return items
    for name, op, ins, attrs in out:
        storage = dt if dt in FLOATS else None
        if op in _SCALAR_OPS:
            attrs = {**attrs, "scalar": scalar_value(attrs["scalar"])}
            rule = {"add_scalar": "add", "sub_scalar": "sub", "rsub_scalar": "rsub"}.get(op)
            if not eager and scalars == "aten" and rule and rules.get(rule, "storage") == "storage" and dt in LOW:
                # ATen's rule in a kernel that holds fp32: the scalar a 0-d tensor of the dtype
                c = f"{name}.c"
                x = ins[0]
                items.append((c, "constant", (), {"value": _ops_const(attrs["scalar"])}, dt))
                binop = "add" if op == "add_scalar" else "sub"
                items.append((name, binop, (c, x) if op == "rsub_scalar" else (x, c), {}, storage))
                continue
        items.append((name, op, ins, attrs, storage))
    if base in ("add", "sub", "mul", "div") and len(items) == 1 and len(items[0][2]) == 2:
        name, op, ins, attrs, storage = items[0]
        pre, ins = _promote(nm, list(ins), n, ref_dt, dt, eager, scalars, tr)
        items = pre + [(name, op, tuple(ins), attrs, storage)]
    return items


def _promote(nm, ins, n, ref_dt, dt, eager, scalars, tr, skip_first=False):
    """TensorIterator's conversion of tensor operands to their common dtype (eager
    only): ``(cast nodes, operand names)``."""
    if not eager:
        return [], ins
    tensors = [i for i, a in enumerate(n.args[:len(ins)]) if isinstance(a, Ref) and ref_dt[i] in FLOATS
               and not (skip_first and i == 0)]
    if len(tensors) < 2:
        return [], ins
    dims = [i for i in tensors if tr.node(n.args[i].name).shape not in ((), None)] or tensors
    common = _common(ref_dt[i] for i in dims)
    if common == "fp32":
        return [], ins  # fp16/bf16 values are exact in fp32
    base = _base(n.op)
    pre, out = [], list(ins)
    for i in tensors:
        if ref_dt[i] == common:
            continue
        if i not in dims and (scalars == "inductor" or base in ("mul", "div")):
            continue  # a 0-d tensor read as a multiply's or divide's scalar keeps its fp32 value
        pre.append((f"{nm}.in{i}", "cast", (out[i],), {"to": common}, common))
        out[i] = f"{nm}.in{i}"
    return pre, out
