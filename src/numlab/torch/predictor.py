"""Predict torch eager and ``torch.compile`` (Inductor C++) outputs bit for bit.

:func:`predict` is a frontend of the one engine.  It lowers the traced function to
a numlab :class:`~numlab.graph.Graph` (:func:`numlab.torch.lowering.lower`: the
catalogue operators of each ATen call, every node's ``storage`` dtype, ATen's type
promotion, the 16-bit ``mean``, what Inductor keeps in fp32) and runs it with
:func:`numlab.execute.run` under the preset's :class:`~numlab.kernels.KernelSpec`:

``mode="eager"``
    the ATen graph, each node its own kernel stored in its dtype, with
    :meth:`TorchCpuEager.kernel_spec() <numlab.torch.presets.TorchCpuEager.kernel_spec>`:
    fp32 opmath, per-operator scalar conversion (``storage_scalars``), ATen's
    ``cascade_sum`` (``reduce_order``/``reduce_order_low``), the softmax and
    LayerNorm kernels (``softmax``, ``softmax_order``, ``layer_norm="aten"``,
    ``moments_lanes``), the scalar tail loops of ``cpu_kernel_vec`` (``loop_step``,
    ``alpha_step``, ``tail_math``, ``grain_size``, ``threads``), SLEEF/oneDNN/ATen
    math (``exp``, ``tanh``, ``erf``, ``gelu``, ``gelu_tanh``, ``log1p``, ``silu``).
``mode="compiled"``
    Inductor's decomposition of the same function, lowered with the values its
    generated C++ holds (fp32 registers; the dtype where a reduction or an output is
    stored; every 16-bit value rounded with ``emulated_casts``) and the element
    format its loops load (``loads``: two fp32 vectors per 16-bit load, an fp32
    local buffer for a reduced value that is used again), with
    :meth:`InductorCpu.kernel_spec() <numlab.torch.presets.InductorCpu.kernel_spec>`:
    fp32 scalars, no FMA, Inductor's lane order, SLEEF math, and the scalar tail of
    a kernel whose masked tail Inductor runs as a scalar loop
    (:func:`inductor_scalar_tail`: ``loop_step``, ``tail_ops``: exp, log1p, tanh, erf).
``mode="reference"``
    the float64 reference (``numlab.execute``'s mode of that name): the ATen graph lowered to catalogue operators
    (:meth:`~numlab.torch.bridge.TorchTrace.to_graph` with ``casts=False``) and run in
    ``mode="reference"`` (each operator's float64 reference, no rounding).

numlab/torch computes no value itself: every number is the engine's
(:mod:`numlab.kernels.engine`, through ``OpInfo.kernel``).  What stays here is the
choice of preset and spec, and the refusals: a path that is not reproduced bit for
bit raises :class:`NotModelled` naming it.  Refused: the paths the presets flag
(``TorchCpuEager.not_modelled``: eager fp32 exp/tanh/erf through MKL VML,
exp/tanh/erf/silu under ATen's ``DEFAULT`` capability, oneDNN ISAs below avx2, libm
tails on a C library other than glibc 2.27-2.40), a 16-bit value Inductor stores to
a buffer that other nodes read (:func:`~numlab.torch._aten.inductor_realized_low`;
whether a user reads the rounded buffer or the fp32 register follows the loop
fusion), reductions over a dim other than the last, ATen's two-pass split of a
single row longer than ``GRAIN_SIZE`` (32768) over threads, Inductor's ``var_mean``
split over threads, ``pow`` with an exponent other than 2, eager
softplus/log1p/mish under ATen's ``DEFAULT`` capability, Inductor exp/log1p in a
kernel holding a ``where`` that is not one contiguous pointwise loop (its tail loop
kind is not decided), a function whose eager gelu runs on two dtypes of different
gelu kernels, ops outside :data:`numlab.torch.bridge.PREDICTABLE`.

:class:`Switches` mixes the two sides for :func:`numlab.torch.explain`: each source
of difference is a choice of graph (``algorithm``), of what the lowering keeps in
fp32 (``promotion``), of scalar knobs (``scalars``: ``storage_scalars``, ``fma``,
the lowering's selection constants) and of orders (``order``: the spec's reduction
orders and layer-norm moments).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field, replace

import numpy as np

from .._repr import Compact, brief
from ..execute import quiet
from ..execute import run as execute_run
from ._aten import (
    NotModelled,
    _last_dim,
    _rnd,
    _rows,
    _threads,
    inductor_realized_low,
    inductor_scalar_tail,
)
from .bridge import Ref, TorchTrace, _is_num, as_numpy, import_torch
from .lowering import LOW, lower
from .presets import (
    INDUCTOR_TAIL_OPS,
    InductorCpu,
    TorchCpuEager,
    glibc_math_unmodelled,
    inductor_cpu,
    torch_cpu_eager,
)

__all__ = ["predict", "Prediction", "NotModelled", "TORCH_MODES", "run_torch", "compile_fn", "Switches",
           "EAGER", "COMPILED", "TORCH_SOURCES", "inductor_scalar_tail"]

TORCH_MODES = ("eager", "compiled", "reference")


@dataclass(repr=False)
class Prediction(Compact):
    """Outputs of :func:`predict`: ``outputs[i]`` float32 (or float64 in the reference)
    arrays holding values of ``dtypes[i]``; ``values`` every node (when kept)."""

    mode: str
    outputs: list
    dtypes: list
    values: dict = field(default_factory=dict)

    def __getitem__(self, i):
        return self.outputs[i]

    def _repr_facts(self):
        rows = [(f"output {i}", f"{dt}: {brief(o)}") for i, (o, dt) in enumerate(zip(self.outputs, self.dtypes, strict=True))]
        rows.append(("values", f"{len(self.values)} nodes kept" if self.values else None))
        return f"Prediction: mode {self.mode}, {len(self.outputs)} output(s)", rows


# -- public entry ---------------------------------------------------------------------
def _inputs_as_arrays(trace: TorchTrace, inputs):
    torch = import_torch()
    if inputs is None:
        inputs = trace.example_inputs
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if len(inputs) != len(trace.inputs):
        raise ValueError(f"inputs: expected {len(trace.inputs)} tensors ({trace.input_names}), got {len(inputs)}")
    out = []
    for p, t in zip(trace.inputs, inputs, strict=True):
        if isinstance(t, torch.Tensor):
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"input {p.name!r}: shape {tuple(t.shape)} but the trace has {p.shape}")
            out.append(as_numpy(t))
        else:
            a = np.asarray(t, dtype=np.float32)
            if a.shape != tuple(p.shape):
                raise ValueError(f"input {p.name!r}: shape {a.shape} but the trace has {p.shape}")
            out.append(np.asarray(_rnd(a, p.dtype), np.float32))
    return out


@dataclass(frozen=True)
class Switches:
    """The four sources of an eager/compiled difference, each one switch.

    ``promotion``: ``"eager"`` (every kernel rounds its output to the tensor
    dtype) or ``"fused"`` (fp32 inside, rounding only where a buffer is stored);
    ``scalars``: ``"aten"`` (per-op scalar conversion, FMA in ``add(alpha)``) or
    ``"inductor"`` (fp32 scalars, no FMA); ``order``: ``"aten"`` (cascade sum,
    RowwiseMoments) or ``"inductor"`` (lane vectors, butterfly, thread split,
    Welford); ``algorithm``: ``"aten"`` (the eager ATen graph with its fused
    softmax/layer-norm/gelu kernels) or ``"inductor"`` (Inductor's
    decomposition).  ``reference``: the float64 reference (the lowered graph run by
    ``numlab.execute`` in ``mode="reference"``; the other switches are then unused).
    """

    promotion: str = "eager"
    scalars: str = "aten"
    order: str = "aten"
    algorithm: str = "aten"
    reference: bool = False

    def __post_init__(self):
        for k, valid in (("promotion", ("eager", "fused")), ("scalars", ("aten", "inductor")),
                         ("order", ("aten", "inductor")), ("algorithm", ("aten", "inductor"))):
            if getattr(self, k) not in valid:
                raise ValueError(f"{k}={getattr(self, k)!r} is not valid; choose one of {valid}")


EAGER = Switches()
COMPILED = Switches("fused", "inductor", "inductor", "inductor")
TORCH_SOURCES = ("promotion", "scalars", "order", "algorithm")


def predict(trace: TorchTrace, inputs=None, *, mode: str = "eager", preset=None,
            keep_values: bool = False, switches: Switches | None = None,
            eager_preset: TorchCpuEager | None = None) -> Prediction:
    """Predict the outputs of ``trace.fn(*inputs)`` in torch eager or compiled.

    Parameters
    ----------
    trace : TorchTrace
        From :func:`numlab.torch.from_torch`.
    inputs : tuple of torch.Tensor or arrays, optional
        Same shapes as the example inputs (default: the example inputs).
        Arrays are rounded to the traced dtypes.
    mode : {"eager", "compiled", "reference"}
    preset : TorchCpuEager or InductorCpu, optional
        Default ``torch_cpu_eager()`` for eager, ``inductor_cpu()`` for compiled.
    keep_values : bool
        Keep every node's value in ``Prediction.values``.
    switches : Switches, optional
        Mix the two: e.g. ``Switches(order="inductor")`` is eager with only
        the reduction order switched (used by :func:`numlab.torch.explain`);
        ``preset`` is then the InductorCpu preset and ``eager_preset`` the
        TorchCpuEager one.

    Raises
    ------
    NotModelled
        For operators or shapes numlab does not reproduce (named in the message).
    """
    if mode not in TORCH_MODES:
        raise ValueError(f"mode={mode!r} is not valid; choose one of {TORCH_MODES}")
    if switches is None:
        switches = {"eager": EAGER, "compiled": COMPILED, "reference": Switches(reference=True)}[mode]
        if mode == "compiled" and preset is not None and not isinstance(preset, InductorCpu):
            raise TypeError(f"mode='compiled' needs an InductorCpu preset, got {type(preset).__name__}")
        if mode == "eager" and preset is not None and not isinstance(preset, TorchCpuEager):
            raise TypeError(f"mode='eager' needs a TorchCpuEager preset, got {type(preset).__name__}")
        if mode == "eager":
            eager_preset, preset = preset, None
    if switches.reference:
        return _reference(trace, _inputs_as_arrays(trace, inputs), keep_values)
    pe = eager_preset if eager_preset is not None else torch_cpu_eager()
    pi = preset if preset is not None else inductor_cpu()
    return _predict_lowered(trace, _inputs_as_arrays(trace, inputs), switches, pe, pi, mode, keep_values)


_VIEWS = ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "alias", "detach", "clone",
          "permute", "t", "transpose")


def _moves_last_dim(n, shape) -> bool:
    """A permute/transpose that changes which dim is innermost (the others keep rows contiguous)."""
    base = n.op.split(".")[0].rstrip("_")
    nd = len(shape[n.args[0].name])
    if nd < 2:
        return False
    if base == "t":
        return True
    if base == "permute":
        return int(n.args[1][-1]) % nd != nd - 1
    d0, d1 = (int(n.args[1]) % nd, int(n.args[2]) % nd)
    return nd - 1 in (d0, d1) and d0 != d1


def _reduced_shape(n, shape) -> tuple:
    """The input shape of reduction ``n`` after the checks both sides share: the last dim
    only (:func:`_last_dim`), no ``dtype=`` conversion."""
    xs = shape[n.args[0].name]
    _last_dim(n, n.args[1] if len(n.args) > 1 else n.kwargs.get("dim"), len(xs))
    if n.kwargs.get("dtype") not in (None, n.dtype):
        raise NotModelled(f"{n.op} with dtype={n.kwargs.get('dtype')}")
    return xs


def _refuse_aten(trace: TorchTrace, pe: TorchCpuEager, threads: int) -> str:
    """Why the ATen graph of ``trace`` is not predicted on ``pe``'s path (raises
    :class:`NotModelled`), else the dtype whose eager gelu path the spec takes."""
    dtype = {p.name: p.dtype for p in trace.inputs}
    dtype.update({n.name: n.dtype for n in trace.nodes})
    shape = {p.name: p.shape for p in trace.inputs}
    shape.update({n.name: n.shape for n in trace.nodes})
    gelu = set()
    strided = set()  # values that are a transposed view (not contiguous)
    for n in trace.nodes:
        base = n.op.split(".")[0].rstrip("_")
        a0 = n.args[0] if n.args else None
        d0 = dtype.get(a0.name) if isinstance(a0, Ref) else n.dtype
        if base in ("permute", "t", "transpose") or (base in _VIEWS and isinstance(a0, Ref) and a0.name in strided):
            if base not in ("permute", "t", "transpose") or _moves_last_dim(n, shape):
                strided.add(n.name)
        elif base not in _VIEWS and any(r in strided for r in n.refs()):
            raise NotModelled(f"aten.{n.op} of a transposed (non-contiguous) tensor: ATen's TensorIterator "
                              "walks it in memory order (its vector loop, scalar tails and reduction order "
                              "follow the strides); not modelled")
        why = pe.not_modelled(base, d0, n.kwargs.get("approximate", "none"))
        if why:
            raise NotModelled(f"aten.{n.op}: {why}")
        alpha = n.kwargs.get("alpha", 1)
        if base in ("add", "sub") and alpha != 1:
            why = pe.not_modelled("alpha", n.dtype)
            if why:
                raise NotModelled(f"aten.{base} with alpha: {why}")
            shapes = {tuple(shape[a.name]) for a in n.args[:2] if isinstance(a, Ref) and shape[a.name] != ()}
            if len(shapes) > 1 and pe.capability != "DEFAULT":
                raise NotModelled(f"aten.{base} with alpha of broadcast operands {sorted(shapes)}: ATen's loop "
                                  "is two-dimensional, with a scalar tail per row (not modelled)")
        if base == "rsub" and alpha != 1:
            raise NotModelled("rsub with alpha")
        if base in ("mul", "div") and alpha != 1:
            raise NotModelled(f"{base} with alpha")
        if base in ("add", "sub", "mul", "div") and len(n.args) > 1 and _is_num(n.args[0]) and _is_num(n.args[1]):
            raise NotModelled(f"{n.op} of two Python scalars")
        if base in ("sum", "mean", "amax", "amin", "var_mean"):
            xs = _reduced_shape(n, shape)
            numel = int(np.prod(xs, dtype=np.int64))
            if base in ("sum", "mean") and _rows(xs) == 1 and numel >= pe.grain_size and threads > 1:
                raise NotModelled(
                    f"ATen sums a single row of {numel} >= GRAIN_SIZE={pe.grain_size} elements in "
                    "per-thread pieces (two-pass reduction); numlab does not model that split")
        if base == "var_mean":
            raise NotModelled("aten.var_mean called eagerly (ATen's WelfordOps reduction is not "
                              "modelled; it appears in Inductor's decomposition of layer_norm)")
        if base == "_softmax" and int(n.args[1]) % len(shape[a0.name]) != len(shape[a0.name]) - 1:
            raise NotModelled("softmax over a dim other than the last")
        if base == "native_layer_norm":
            if len(n.args[1]) != 1:
                raise NotModelled("layer_norm over several dims")
            if n.args[2] is None and len(n.args) > 3 and n.args[3] is not None:
                raise NotModelled("layer_norm with a bias and no weight (ATen adds it inside the kernel)")
        if base == "gelu":
            approx = n.kwargs.get("approximate", "none")
            if approx not in ("none", "tanh"):
                raise NotModelled(f"gelu with approximate={approx!r}")
            if approx == "none":
                gelu.add(d0)
        if base in ("log1p", "softplus", "mish") and pe.capability == "DEFAULT":
            raise NotModelled(f"eager aten.{base} on ATen capability DEFAULT (the generic "
                              "Vectorized<float>::exp/log1p call libm; numlab models AVX2/AVX512)")
        if base == "pow" and n.args[1] != 2:
            raise NotModelled(f"pow with exponent {n.args[1]!r} (2 is modelled)")
        if base == "rsqrt" and d0 in LOW and pe.capability == "DEFAULT":
            raise NotModelled("eager 16-bit rsqrt on ATen capability DEFAULT (the generic Vectorized "
                              "computes 1/sqrt in the 16-bit type; not modelled)")
    paths = {pe.gelu_algo_for(d) for d in gelu}
    if len(paths) > 1:
        raise NotModelled(f"eager gelu of {sorted(gelu)} tensors runs two kernels ({sorted(paths)}); "
                          "numlab predicts one gelu path per function")
    return sorted(gelu)[0] if gelu else "fp32"


def _refuse_inductor(trace: TorchTrace, pi: InductorCpu, sw: "Switches", threads: int) -> int:
    """Why Inductor's graph of ``trace`` is not predicted on ``pi``'s path (raises
    :class:`NotModelled`); else the elements of its scalar tail loop (0: none)."""
    why = pi.not_modelled()
    if why:
        raise NotModelled(why)
    ph, _, nodes, outs = trace.inductor_nodes()
    dtype = {p.name: p.dtype for p in ph}
    dtype.update({n.name: n.dtype for n in nodes})
    shape = {p.name: p.shape for p in ph}
    shape.update({n.name: n.shape for n in nodes})
    low = any(p.dtype in LOW for p in ph)
    n_vec = 2 if low else 1
    if sw.promotion == "fused" and not pi.emulated_casts:
        why = inductor_realized_low(nodes, ph, outs, dtype)
        if why:
            raise NotModelled(why)
    bases = set()
    reads = {p.name: {p.dtype} for p in ph}  # the graph inputs' dtypes each value is computed from
    consumed = {r for n in nodes for r in n.refs()}
    for n in nodes:
        base = n.op.split(".")[0].rstrip("_")
        bases.add(base)
        a0 = n.args[0] if n.args else None
        reads[n.name] = set().union(*(reads.get(r, set()) for r in n.refs())) if n.refs() else set()
        if base in ("sum", "mean", "var_mean") and reads[n.name] & set(LOW) and "fp32" in reads[n.name]:
            raise NotModelled(f"Inductor aten.{n.op} over a loop that loads both 16-bit and fp32 inputs "
                              "(its lane layout is not modelled)")
        if (base in ("_to_copy", "convert_element_type") and n.dtype in LOW and isinstance(a0, Ref)
                and dtype.get(a0.name) in LOW and dtype.get(a0.name) != n.dtype and n.name in consumed
                and sw.promotion == "fused"
                and not pi.emulated_casts):
            raise NotModelled(f"Inductor conversion from {dtype.get(a0.name)} to {n.dtype} (aten.{n.op}) used "
                              "inside the kernel: whether "
                              "it rounds there is not modelled (emulate_precision_casts=True is)")
        if base in ("softplus", "mish"):
            raise NotModelled(f"aten.{base} inside Inductor's graph (it is decomposed)")
        if base == "log":
            raise NotModelled("Inductor's log is Vectorized<float>::log (SLEEF logf_u10), whose bits numlab "
                              "does not model (the engine's log is correctly rounded)")
        if base in ("sum", "mean", "amax", "amin", "var_mean"):
            xs = _reduced_shape(n, shape)
            if base == "var_mean" and _rows(xs) == 1:
                raise NotModelled(
                    f"Inductor var_mean of a single row of {xs[-1]} (layer norm of one row): its generated "
                    "reduction differs from the two-pass model (measured 13-87%); not modelled")
            if base == "var_mean" and pi.reduce_order(threads=threads, n_vec=n_vec).splits(_rows(xs), xs[-1]):
                raise NotModelled(
                    f"Inductor var_mean of {_rows(xs)} row(s) of {xs[-1]} split over threads "
                    "(measured to differ from the two-pass model; not modelled)")
        if base in ("add", "sub", "mul", "div") and len(n.args) > 1 and _is_num(n.args[0]) and _is_num(n.args[1]):
            raise NotModelled(f"{n.op} of two Python scalars")
        if base == "rsub" and n.kwargs.get("alpha", 1) != 1:
            raise NotModelled("rsub with alpha")
        if base == "pow" and n.args[1] != 2:
            raise NotModelled(f"pow with exponent {n.args[1]!r} (2 is modelled)")
        if base == "gelu" and n.kwargs.get("approximate", "none") not in ("none", "tanh"):
            raise NotModelled(f"gelu with approximate={n.kwargs.get('approximate')!r}")
    W = pi.lanes * n_vec
    for n in nodes:
        base = n.op.split(".")[0].rstrip("_")
        if base in ("erf", "gelu", "tanh") and n.shape is not None and int(np.prod(n.shape, dtype=np.int64)) < 4 \
                and not pi.scalar:
            raise NotModelled(f"Inductor aten.{n.op} of fewer than 4 elements: its scalar loop calls libm "
                              "(not modelled)")
        if base in ("sum", "mean", "var_mean") and "where" in bases | {"masked_fill"} & bases and not pi.scalar:
            m = shape[n.args[0].name][-1] if shape[n.args[0].name] else 1
            if m > W and m % W:
                raise NotModelled(f"Inductor aten.{n.op} of rows of {m} in a kernel holding a where: its tail "
                                  "is a scalar loop into a separate accumulator (not modelled)")
    if pi.scalar:  # scalar C++ has no vector loop: every element is the scalar code's
        return 0
    tail = inductor_scalar_tail(nodes, ph, outs, pi.lanes * n_vec)
    libm = sorted(bases & set(INDUCTOR_TAIL_OPS))
    if tail is None and libm and "where" in bases:
        raise NotModelled(
            f"Inductor aten.{libm[0]} in a kernel that is not one contiguous pointwise loop and holds a where: "
            "whether its tail runs libm (scalar loop) or SLEEF (masked vector) is not modelled")
    if tail and libm:
        why = glibc_math_unmodelled()
        if why is not None:
            raise NotModelled(f"Inductor aten.{libm[0]}: its scalar tail loop calls libm: {why}")
    return tail or 0


def _switched_spec(spec, sw: "Switches", pe: TorchCpuEager, pi: InductorCpu, threads: int):
    """``spec`` (of the side ``sw.algorithm`` names) with the sources ``sw`` takes from
    either side (:func:`numlab.torch.explain`)."""
    if sw.scalars == "inductor":
        spec = spec.replace(scalar_mul="muls", storage_scalars=None, fma=False)
    else:
        spec = spec.replace(storage_scalars=pe.storage_scalars(), fma=pe.fma_alpha and pe.capability != "DEFAULT")
    if sw.order == "inductor":
        spec = spec.replace(reduce_order=pi.reduce_order("fp32", threads), reduce_order_low=pi.reduce_order("fp16", threads),
                            layer_norm="generic", variance="two_pass")
    else:
        spec = spec.replace(reduce_order=pe.sum_order("fp32"), reduce_order_low=pe.sum_order("fp16"),
                            layer_norm="aten")
    return spec


def _predict_lowered(trace: TorchTrace, arrays, sw: "Switches", pe: TorchCpuEager, pi: InductorCpu, mode: str,
                     keep_values: bool) -> Prediction:
    """The function lowered (:func:`numlab.torch.lowering.lower`) and run by
    :func:`numlab.execute.run`, each node stored in its ``storage`` (the lowering
    states what stays fp32), with the spec of the side ``sw.algorithm`` names and
    the sources ``sw`` switches (:func:`_switched_spec`)."""
    if sw.algorithm == "aten":
        threads = int(pe.threads) if pe.threads else _threads(pe)
        gelu_dt = _refuse_aten(trace, pe, threads)
        spec = replace(pe, threads=threads).kernel_spec(gelu_dt)
        side = EAGER
    else:
        threads = _threads(pi)
        tail = _refuse_inductor(trace, pi, sw, threads)
        spec = pi.kernel_spec("fp32", threads, tail=bool(tail))
        side = COMPILED
    if (sw.scalars, sw.order) != (side.scalars, side.order):
        spec = _switched_spec(spec, sw, pe, pi, threads)
    try:
        g, dts = lower(trace, graph=sw.algorithm, promotion=sw.promotion, scalars=sw.scalars,
                       emulated=pi.emulated_casts and sw.promotion == "fused", rules=pe.scalar_rules,
                       loads=sw.order == "inductor")
    except ValueError as exc:
        raise NotModelled(f"the {sw.algorithm} graph: {exc}") from None
    consts = trace.inductor_nodes()[1] if sw.algorithm == "inductor" else trace.constants
    ins = {p.name: a for p, a in zip(trace.inputs, arrays, strict=True)}
    if sw.algorithm == "inductor":  # Inductor's placeholders are named by its own trace
        ph = trace.inductor_nodes()[0]
        ins = {q.name: a for q, a in zip(ph, arrays, strict=True)}
    for name in g.inputs:
        if name not in ins:  # a module parameter or buffer
            ins[name] = as_numpy(consts[name])
    with quiet():  # a preset's knob that no node of this function reads is expected
        res = execute_run(g, ins, mode="eager", fmt="fp32", kernels=spec)
    outputs = [_as_output(res.outputs[o], d) for o, d in zip(g.outputs, dts, strict=True)]
    values = {**ins, **{k: np.asarray(v, np.float32) for k, v in res.values.items()}} if keep_values else {}
    return Prediction(mode, outputs, dts, values)


def _as_output(v, dt):
    v = np.asarray(v)
    if dt == "bool":
        return v != 0
    return v.astype(np.float32)


def _reference(trace: TorchTrace, arrays, keep_values: bool) -> Prediction:
    """``mode="reference"``: the ATen graph lowered to the catalogue (:meth:`TorchTrace.to_graph`)
    and run by :func:`numlab.execute.run` in ``mode="reference"`` (every operator's
    float64 reference, no rounding: the function's own float casts are lowered as the
    identity, ``to_graph(casts=False)``).  The inputs and module constants are values of
    fp32/fp16/bf16, exact in fp32, so ``fmt="fp32"`` leaves them as they are."""
    try:
        g = trace.to_graph(casts=False)
    except ValueError as exc:
        raise NotModelled(f"the float64 reference runs the lowered graph: {exc}") from None
    ins = {p.name: a for p, a in zip(trace.inputs, arrays, strict=True)}
    for name in g.inputs:
        if name not in ins:  # a module parameter or buffer
            ins[name] = as_numpy(trace.constants[name])
    res = execute_run(g, ins, mode="reference", fmt="fp32")
    dtypes = [trace.node(o).dtype for o in trace.outputs]
    outputs = [res.outputs[o] != 0 if d == "bool" else res.outputs[o] for o, d in zip(g.outputs, dtypes, strict=True)]
    values = {**{k: np.asarray(v, np.float64) for k, v in ins.items()}, **res.values} if keep_values else {}
    return Prediction("reference", outputs, dtypes, values)


def run_torch(trace_or_fn, inputs, *, mode: str = "eager", emulated_casts: bool = False,
              compiled=None):
    """Run the real torch function: eager, or compiled by Inductor (returns float32 arrays).

    ``compiled`` may pass an already compiled callable (to reuse its code).
    """
    torch = import_torch()
    fn = trace_or_fn.fn if isinstance(trace_or_fn, TorchTrace) else trace_or_fn
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    with torch.no_grad():
        if mode == "eager":
            out = fn(*inputs)
        elif mode == "compiled":
            cf = compiled if compiled is not None else compile_fn(fn, emulated_casts)
            out = cf(*inputs)
        else:
            raise ValueError(f"mode={mode!r} is not valid; choose 'eager' or 'compiled'")
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [as_numpy(o) for o in outs]


COMPILE_CACHE_SIZE = 64
"""How many compiled functions :func:`compile_fn` keeps (least recently used
first out)."""
_RECOMPILE_LIMITS = {"recompile_limit": 64, "accumulated_recompile_limit": 4096}
"""Dynamo's recompile limits while a function of :func:`compile_fn` runs, at
least: more shapes/dtypes per function before Dynamo silently falls back to
eager."""


@contextlib.contextmanager
def _recompile_limits():
    """Dynamo's recompile limits raised to at least :data:`_RECOMPILE_LIMITS`
    inside the block, and the process's own values back after it."""
    import torch._dynamo.config as dcfg

    with dcfg.patch(**{k: max(int(getattr(dcfg, k)), v) for k, v in _RECOMPILE_LIMITS.items()}):
        yield


def _compile(fn, emulated_casts: bool):
    torch = import_torch()
    call = torch.compile(fn, dynamic=False, options={"emulate_precision_casts": emulated_casts})

    def compiled(*args, **kwargs):
        # Dynamo compiles (and recompiles) at the call, so the limits hold around it
        with _recompile_limits():
            return call(*args, **kwargs)

    compiled.__name__ = compiled.__qualname__ = f"compiled_{getattr(fn, '__name__', type(fn).__name__)}"
    return compiled


_compile_cached = functools.lru_cache(maxsize=COMPILE_CACHE_SIZE)(_compile)


def compile_fn(fn, emulated_casts: bool = False):
    """``torch.compile(fn, options={"emulate_precision_casts": flag})``, cached
    per (function, flag) so tests and notebooks reuse generated code (the
    :data:`COMPILE_CACHE_SIZE` most recent; a callable that cannot be hashed
    is compiled afresh).  Its calls run with Dynamo's recompile limits raised
    (:data:`_RECOMPILE_LIMITS`) and leave the process's Dynamo configuration
    as it was."""
    flag = bool(emulated_casts)
    try:
        hash(fn)
    except TypeError:
        return _compile(fn, flag)
    return _compile_cached(fn, flag)
