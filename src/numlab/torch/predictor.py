"""Predict torch eager and ``torch.compile`` (Inductor C++) outputs bit for bit.

:func:`predict` interprets a :class:`~numlab.torch.bridge.TorchTrace`:

``mode="eager"``
    the ATen graph, operator by operator, each as ATen's CPU kernel computes
    it (:class:`~numlab.torch.presets.TorchCpuEager`): fp32 opmath, one
    rounding to the tensor dtype per kernel, Python scalars converted per op,
    ``cascade_sum`` reductions, the softmax and layer-norm kernels'
    own algorithms.
``mode="compiled"``
    Inductor's decomposition of the same function
    (:class:`~numlab.torch.presets.InductorCpu`): every value fp32, scalars
    fp32 (except a comparison's, in the compared tensor's dtype as in eager:
    measured), no FMA, roundings only where a buffer is stored (graph outputs and
    reduction results), or at every fp16/bf16 value with
    ``emulated_casts`` (Inductor's ``emulate_precision_casts``); reductions in Inductor's lane order.
``mode="fp64"``
    the reference: the eager ATen graph lowered to catalogue operators
    (:meth:`~numlab.torch.bridge.TorchTrace.to_graph`) and run by
    :func:`numlab.execute.run` in ``mode="reference"`` (each operator's float64
    reference, no rounding; the predictor has no float64 formulas of its own).

Values are float32 arrays holding values of their dtype (bool for masks).
The numerics are :mod:`numlab.kernels`' (one engine): sums are
:func:`numlab.kernels.reduce` with the presets' orders
(:class:`~numlab.kernels.orders.cpu.AtenCascade`,
:class:`~numlab.kernels.orders.cpu.InductorLanes`), math routines are
``numlab.kernels.exp/tanh/erf/gelu`` with the presets' ``algo=`` names: SLEEF
``expf`` (``"sleef_u10"``: sigmoid, softmax, compiled ``exp``), SLEEF ``tanhf``
(``"sleef"``: compiled ``tanh``), ATen's vectorised A&S ``erf``
(``"aten_vec"``: compiled gelu/erf) and oneDNN's gelu_erf (``"onednn"`` on
oneDNN avx512_core, ``"onednn_avx2"`` on avx2: eager ``F.gelu`` of the dtypes oneDNN
takes) bit for bit, and glibc's ``expf``/``erff``/``log1pf`` in the scalar tail loops
(``"glibc"``); eager unary fp32 ``exp``/``tanh``/``erf`` call MKL VML and are refused.
softplus (eager: ATen's ``softplus_kernel``; compiled: exp/log1p/where), ``log1p``,
mish (eager: ATen's ``mish_kernel``, its scalar tail by glibc ``expf``/``log1pf``/``tanhf``;
compiled: Inductor's decomposition) and hardswish (a true division by 6, eager and compiled) are bit for bit:
``Vectorized<float>::log1p()`` is SLEEF ``log1pf_u10`` (``numlab.kernels.algorithms.log1p``
``algo="sleef_u10"``), ``std::log1p`` of the scalar loops glibc's ``log1pf``
(``algo="glibc"``); Inductor runs a kernel's tail in such a scalar loop when its
``where`` share exceeds 0.12 and the tail is at most half a vector
(:func:`_inductor_scalar_tail`), with glibc ``expf`` there.
Inductor without a vector ISA (``InductorCpu.scalar``, e.g. under
``ATEN_CPU_CAPABILITY=default``) generates scalar C++ (read in the generated code):
the same fp32 expressions, reductions as one sequential fp32 sum from ``+0``
(``InductorLanes(1, ...)``), glibc's ``expf``/``tanhf``/``erff`` (``algo="glibc"``,
bit for bit), gelu tanh as its decomposition without FMA; no scalar tail.
What stays here is what a KernelSpec does not express: the ATen graph walk,
per-op scalar conversion rules, the scalar tails of vectorised loops, ATen's
``RowwiseMoments`` (layer norm).

Inductor keeps a 16-bit ``mean`` inside a kernel as its fp32 sum divided in fp32 (the
conversion to the dtype is a pointwise op of its users, generated code read).

Not modelled (raise :class:`NotModelled` rather than guess): the paths the
presets flag (``TorchCpuEager.not_modelled``: eager fp32 exp/tanh/erf through MKL VML,
exp/tanh/erf/silu under ATen's ``DEFAULT`` capability, oneDNN ISAs below avx2,
libm tails on a C library other than glibc 2.27-2.40), a 16-bit value Inductor
stores to a buffer that other nodes read (a graph output, or a heavy value with
several users: :func:`~numlab.torch._aten._inductor_realized_low`; whether a user
reads the rounded buffer or the fp32 register follows the loop fusion),
reductions over
a dim other than the last, ATen's two-pass split of a single row longer than
``GRAIN_SIZE`` (32768) over threads, Inductor's ``var_mean`` split over
threads, ``pow`` with an exponent other than 2, eager softplus/log1p under ATen's
``DEFAULT`` capability, Inductor log1p in a kernel holding a ``where`` that is not
one contiguous pointwise loop (its tail loop kind is not decided), ops outside
:data:`numlab.torch.bridge.PREDICTABLE`.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import numpy as np

from .._repr import Compact, brief
from ..execute import run as execute_run
from ..formats import FP32
from ..kernels.algorithms import gelu as k_gelu
from ..kernels.libm import fma32
from ..ops import COMPARISONS
from ._aten import (
    _UNARY,
    TAIL_LOG1P,
    VEC_LOG1P,
    NotModelled,
    _aten_layer_norm,
    _aten_softmax,
    _aten_sum,
    _inductor_realized_low,
    _inductor_scalar_tail,
    _keep,
    _last_dim,
    _rnd,
    _rows,
    _scalar,
    _sum32,
    _threads,
    _unary32,
    _welford_rows,
)
from .bridge import _CLAMP, _LOGIC, Ref, TorchTrace, _is_num, as_numpy, import_torch
from .presets import (
    _LOW,
    InductorCpu,
    TorchCpuEager,
    glibc_math_unmodelled,
    inductor_cpu,
    torch_cpu_eager,
)

__all__ = ["predict", "Prediction", "NotModelled", "TORCH_MODES", "run_torch", "compile_fn", "Switches",
           "EAGER", "COMPILED", "TORCH_SOURCES"]

TORCH_MODES = ("eager", "compiled", "fp64")
LOCAL_BUFFER_MIN = 0  # row length from which the local-buffer rule applies (0: measured for n = 16..2000)
@dataclass(repr=False)
class Prediction(Compact):
    """Outputs of :func:`predict`: ``outputs[i]`` float32 (or float64 in fp64 mode)
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


_MATH = ("exp", "log", "tanh", "erf", "sqrt", "rsqrt", "reciprocal", "sigmoid", "silu", "gelu",
         "log1p", "softplus", "hardswish", "mish")
_FLOATS = ("fp32", "fp16", "bf16")
# binary ATen ops whose tensor operands TensorIterator converts to the common dtype
_PROMOTING = ("add", "sub", "mul", "div", "where", "maximum", "minimum",
              "gt", "lt", "ge", "le", "eq", "ne")
_CMP = {k: f for k, (f, _) in COMPARISONS.items()}


class _Interp:
    def __init__(self, sw: "Switches", eager: TorchCpuEager, ind: InductorCpu, dtypes, n_vec=1, threads=1):
        self.sw = sw
        self.pe = eager
        self.pi = ind
        self.dt = dtypes  # node name -> dtype
        self.n_vec = n_vec
        self.threads = threads
        self.users = {}
        self.inputs = set()  # graph inputs: loaded from memory, never an fp32 local buffer
        self.local_buffer_min = LOCAL_BUFFER_MIN
        self.scalar_tail = 0  # Inductor: elements of the scalar tail loop (None: undecided)
        self.has_where = False

    # scalar conversion
    def sc(self, s, rule_op, dt):
        if self.sw.scalars == "inductor" or dt == "fp32" or dt not in _LOW:
            return np.float32(s)
        rule = self.pe.scalar_rule(rule_op)
        return _scalar(s, dt) if rule == "storage" else np.float32(s)

    def out(self, v, dt):
        """Eager: every kernel rounds its output; compiled: only with emulated casts."""
        if self.sw.promotion == "eager":
            return _rnd(v, dt)
        if dt == "bool":
            return v
        v = np.asarray(v, np.float32)
        if self.pi.emulated_casts and dt in _LOW:
            return _rnd(v, dt)
        return v

    def store(self, v, dt):
        """A buffer store (reduction result / graph output)."""
        if dt == "bool":
            return v
        return _rnd(v, dt)

    def tdt(self, arg, node):
        return self.dt[arg.name] if isinstance(arg, Ref) else node.dtype

    def run(self, node, a, kw):
        op = node.op
        base = op.split(".")[0]
        base_ = base.rstrip("_")
        dt = node.dtype
        if self.sw.algorithm == "aten":
            why = self.pe.not_modelled(base_, self.dt_of(node, 0) if node.args else dt,
                                       kw.get("approximate", "none"))
            if why:
                raise NotModelled(f"aten.{op}: {why}")
        ft = np.float32
        if self.sw.promotion == "eager" and base_ in _PROMOTING:
            a = self.promote(node, a)
        with np.errstate(all="ignore"):
            if base_ in ("add", "sub", "mul", "div"):
                x, y = a[0], a[1]
                alpha = kw.get("alpha", 1)
                rule = base_
                if _is_num(x) and _is_num(y):
                    raise NotModelled(f"{op} of two Python scalars")
                if _is_num(x):
                    x = self.sc(x, "rsub" if base_ == "sub" else rule, dt)
                if _is_num(y):
                    y = self.sc(y, rule, dt)
                if alpha != 1:
                    return self.alpha_op(base_, x, y, alpha, dt)
                r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[base_](
                    np.asarray(x, ft), np.asarray(y, ft))
                return self.out(r, dt)
            if base == "rsub":
                s = self.sc(a[1], "rsub", dt)
                if kw.get("alpha", 1) != 1:
                    raise NotModelled("rsub with alpha")
                return self.out(np.asarray(s, ft) - np.asarray(a[0], ft), dt)
            if base in _CMP:
                return self.compare(node, base, a, ft)
            if base_ in _LOGIC:
                return self.logic(node, base_, a)
            if base == "masked_fill":  # value converted to the tensor dtype (double -> float -> dtype)
                x, mask, v = a
                v = self.sc(v, "where", dt) if _is_num(v) else v
                return self.out(np.where(mask, np.asarray(v, ft), np.asarray(x, ft)), dt)
            if base == "where":
                c, x, y = a
                x = self.sc(x, "where", dt) if _is_num(x) else x
                y = self.sc(y, "where", dt) if _is_num(y) else y
                return self.out(np.where(c, np.asarray(x, ft), np.asarray(y, ft)), dt)
            if base in ("maximum", "minimum"):
                f = np.maximum if base == "maximum" else np.minimum
                return self.out(f(np.asarray(a[0], ft), np.asarray(a[1], ft)), dt)
            if base in ("neg", "abs", "relu"):
                x = np.asarray(a[0], ft)
                r = -x if base == "neg" else (np.abs(x) if base == "abs" else np.where(x > 0, x, ft(0)) + ft(0))
                return self.out(r, dt)
            if base in _MATH:
                return self.math(node, base, a, kw)
            if base in _CLAMP:
                return self.clamp(node, base, a, kw)
            if base == "pow":
                if a[1] != 2:
                    raise NotModelled(f"pow with exponent {a[1]!r} (2 is modelled)")
                x = np.asarray(a[0], ft)
                return self.out(x * x, dt)
            if base in ("_to_copy", "convert_element_type", "clone", "alias", "detach", "lift_fresh_copy"):
                return self.out(np.asarray(a[0]), dt)
            if base == "expand":  # torch's expand broadcasts like numpy (trailing dims)
                return np.broadcast_to(np.asarray(a[0]), node.shape).copy()
            if base in ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze"):
                return np.asarray(a[0]).reshape(node.shape)
            if base == "permute":
                return np.transpose(np.asarray(a[0]), [int(p) for p in a[1]])
            if base in ("t", "transpose"):
                x = np.asarray(a[0])
                if base == "t":
                    return x.T
                return np.swapaxes(x, int(a[1]), int(a[2]))
            if base == "scalar_tensor":  # a 0-d tensor of the node dtype: its value is stored
                return _rnd(np.float32(a[0]), dt)
            if base == "getitem":
                return a[0][a[1]]
            if base in ("sum", "mean", "amax", "amin"):
                return self.reduction(node, base, a, kw)
            if base == "var_mean":
                return self.var_mean(node, a, kw)
            if base == "_softmax":
                return self.softmax(node, a)
            if base == "native_layer_norm":
                return self.layer_norm(node, a)
        raise NotModelled(f"aten.{op} is not modelled ({self.sw})")

    def math(self, node, base, a, kw):
        """Transcendental and math pointwise ops: exp, log, tanh, erf, sqrt, rsqrt,
        reciprocal, sigmoid, silu, gelu."""
        dt = node.dtype
        ft = np.float32
        with np.errstate(all="ignore"):
            if base in ("exp", "log", "tanh", "erf", "sqrt"):
                fn = {"log": np.log, "sqrt": np.sqrt}.get(base)
                x = np.asarray(a[0])
                if self.sw.algorithm == "inductor" and base in ("exp", "erf", "tanh"):
                    # Inductor's Vectorized<float>: exp() = SLEEF expf_u10, tanh() = SLEEF
                    # tanhf_u10, erf() = ATen's A&S 7.1.26
                    r = _unary32(base, x, self.pi.algorithms()[base])
                    if base == "exp" and self.scalar_tail:  # the scalar tail's std::exp (libm expf)
                        r = self.inductor_tail(node, r, lambda: _unary32("exp", x, self.pe.tail_algo))
                elif base in _UNARY:
                    # eager unary kernels: ATen's vml maps Vectorized<float> over every element
                    # (16-bit tensors; fp32 without MKL); fp32 with MKL calls MKL VML, refused
                    # by the preset's not_modelled unless a what-if algo is given
                    algo = self.pe.unary_algo
                    if algo in ("mkl_vml", "vec") or self.dt_of(node, 0) in _LOW:
                        algo = self.pe.algorithms()[base]
                    r = _unary32(base, x, algo)
                else:  # log, sqrt: correctly rounded fp32
                    r = fn(x.astype(np.float64)).astype(np.float32)
                return self.out(r, dt)
            if base == "rsqrt":
                x = np.asarray(a[0], ft)
                return self.out(np.float32(1) / np.sqrt(x), dt)  # 1/sqrt: two fp32 roundings
            if base == "reciprocal":
                return self.out(ft(1) / np.asarray(a[0], ft), dt)
            if base == "sigmoid":  # ATen and Inductor: 1 / (1 + exp(-x)), exp by SLEEF
                x = np.asarray(a[0], ft)
                r = np.float32(1) / (np.float32(1) + _unary32("exp", -x, self.vec_exp()))
                if self.sw.algorithm == "aten" and self.pe.capability != "DEFAULT":
                    # eager's scalar tail loop calls libm expf (DEFAULT: every element does)
                    r = self.eager_tail(r, np.float32(1) / (np.float32(1)
                                                            + _unary32("exp", -x, self.pe.tail_algo)),
                                        self.dt_of(node, 0))
                return self.out(r, dt)
            if base == "silu":
                x = np.asarray(a[0], ft)
                e = _unary32("exp", -x, self.vec_exp())
                return self.out(x / (np.float32(1) + e), dt)
            if base == "gelu":
                return self.gelu(np.asarray(a[0], ft), kw.get("approximate", "none"), dt)
            if base == "log1p":
                return self.log1p(node, np.asarray(a[0], ft), dt)
            if base == "softplus":
                beta = a[1] if len(a) > 1 else kw.get("beta", 1)
                threshold = a[2] if len(a) > 2 else kw.get("threshold", 20)
                return self.softplus(node, np.asarray(a[0], ft), beta, threshold, dt)
            if base == "hardswish":
                return self.hardswish(np.asarray(a[0], ft), dt)
            if base == "mish":
                return self.mish(np.asarray(a[0], ft), dt)
        raise NotModelled(f"aten.{node.op} is not modelled ({self.sw})")

    def promote(self, node, a):
        """ATen's TensorIterator converts tensor operands of different float dtypes to
        their common dtype before the kernel runs (``torch.result_type``: a 0-d tensor
        yields to a dimensioned one of the same category, fp16 with bf16 is fp32):
        ``x16 > torch.tensor(0.3)`` compares with fp16(0.3) (measured torch 2.13).
        Inductor computes such operands in fp32 unconverted (measured): applied under
        ``Switches.promotion == "eager"`` only, 0-d operands under ``scalars == "aten"``."""
        first = 1 if node.op.split(".")[0] == "where" else 0  # where's condition is bool
        idx = [i for i in range(first, len(a)) if isinstance(node.args[i], Ref)
               and self.dt.get(node.args[i].name) in _FLOATS]
        if len(idx) < 2:
            return a
        dims = [i for i in idx if np.ndim(a[i]) > 0] or idx
        dts = {self.dt[node.args[i].name] for i in dims}
        common = dts.pop() if len(dts) == 1 else "fp32"
        if common == "fp32":
            return a  # fp16/bf16 values are exact in fp32: nothing to convert
        out = list(a)
        for i in idx:
            if self.dt[node.args[i].name] == common:
                continue
            if i not in dims and (self.sw.scalars == "inductor"
                                  or self.pe.scalar_rule(self._rule(node, i)) == "opmath"):
                # a 0-d CPU tensor is read as the kernel's scalar, like a Python number:
                # mul/div keep its fp32 value (measured: x16 * torch.tensor(0.3));
                # Inductor's scalars stay fp32
                continue
            out[i] = _rnd(a[i], common)
        return tuple(out)

    @staticmethod
    def _rule(node, i) -> str:
        """The scalar rule (``TorchCpuEager.scalar_rules``) of operand ``i`` of ``node``."""
        base = node.op.split(".")[0].rstrip("_")
        if base in _CMP:
            return "compare"
        if base == "sub" and i == 0:
            return "rsub"
        return base if base in ("add", "sub", "mul", "div", "where") else "where"

    def compare(self, node, base, a, ft):
        """gt/ge/lt/le/eq/ne: exact, bool results; a Python-scalar operand in the
        compared tensor's dtype (the preset's "compare" rule in eager)."""
        x, y = a[0], a[1]
        if _is_num(y):
            dti = self.dt_of(node, 0)
            if self.sw.scalars == "inductor" and dti in _LOW:
                # Inductor too compares with the scalar in the compared tensor's dtype,
                # double -> float -> dtype (ops.constant(s, dtype); measured torch 2.13:
                # an fp16 x == fp16(0.3) is not > 0.3, compiled as in eager)
                y = _scalar(y, dti)
            else:
                y = self.sc(y, "compare", dti)
        return _CMP[base](np.asarray(x, ft), y)

    def logic(self, node, base, a):
        """bitwise_* of bool tensors and logical_* (a float operand's truth: x != 0,
        NaN is true, as C++ ``bool(x)``): exact, bool results."""
        vals = []
        for i, v in enumerate(a):
            d = self.dt_of(node, i)
            if base.startswith("bitwise") and d != "bool":
                raise NotModelled(f"aten.{node.op} of {d} tensors (integers are not modelled)")
            vals.append(np.asarray(v) != 0)
        kind = base.split("_")[1]
        if kind == "not":
            return ~vals[0]
        return {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[kind](*vals)

    def dt_of(self, node, i):
        arg = node.args[i]
        return self.dt[arg.name] if isinstance(arg, Ref) else node.dtype

    def alpha_op(self, base, x, y, alpha, dt):
        """add/sub with alpha: eager = fma(y, a', x) (+ scalar tail for 16-bit); compiled = x + y*a."""
        sgn = -1.0 if base == "sub" else 1.0
        if base not in ("add", "sub"):
            raise NotModelled(f"{base} with alpha")
        if self.sw.scalars == "inductor":
            # Inductor lowers it as x + y*alpha: fp32, no FMA; the product is a value of
            # the node dtype, so emulated_casts rounds it (measured)
            prod = self.out(np.asarray(y, np.float32) * np.float32(sgn * alpha), dt)
            return self.out(np.asarray(x, np.float32) + prod, dt)
        why = self.pe.not_modelled("alpha", dt)
        if why:
            raise NotModelled(f"aten.{base} with alpha: {why}")
        al = self.sc(sgn * alpha, "alpha", dt)
        x = np.asarray(x, np.float32)
        y = np.asarray(y, np.float32)
        shape = np.broadcast_shapes(x.shape, y.shape)
        if self.pe.fma_alpha:
            body = fma32(np.broadcast_to(y, shape), al, np.broadcast_to(x, shape))
        else:  # no FMA (ATen's DEFAULT build): fl32(x + fl32(y * a))
            body = np.broadcast_to(x, shape) + np.broadcast_to(y, shape) * al
        if dt not in _LOW:
            return _rnd(body, dt)
        tail = _rnd(np.broadcast_to(x, shape) + _rnd(np.broadcast_to(y, shape) * al, dt), dt)
        if self.pe.capability == "DEFAULT":
            # ATen's scalar build: the generic Vectorized<BFloat16/Half> fmadd computes in the
            # 16-bit type, fl16(x + fl16(a' y)) on every element, as the scalar tail (measured
            # 100% of bf16/fp16 rows of 100..100003 elements, 1 and 2 threads)
            return tail
        r = _rnd(body, dt)
        mask = _scalar_tail_mask(int(np.prod(shape)), self.pe, self.threads,
                                 self.pe.alpha_step).reshape(shape)
        return np.where(mask, tail, r)

    def eager_tail(self, vec, scalar, fmt):
        """ATen's vectorised loop leaves the last ``numel mod step`` elements of each
        parallel chunk to a scalar loop (``TorchCpuEager.loop_step(fmt)``: 32 fp32 and
        64 bf16/fp16 elements under AVX512, 16 and 32 under AVX2, measured)."""
        vec = np.asarray(vec)
        mask = _scalar_tail_mask(vec.size, self.pe, self.threads, self.pe.loop_step(fmt)).reshape(vec.shape)
        return np.where(mask, scalar, vec)

    def gelu(self, x, approximate, dt):
        if approximate not in ("none", "tanh"):
            raise NotModelled(f"gelu with approximate={approximate!r}")
        if self.sw.algorithm == "aten":
            # eager: F.gelu runs oneDNN's kernel (mkldnn enabled) for approximate="none";
            # else ATen's GeluKernel (SLEEF tanhf / A&S erf, FMA in x + kappa x^3), whose
            # scalar tail loop calls libm tanhf / erff
            if approximate == "tanh" and self.pe.capability == "DEFAULT":
                # ATen's scalar build: every element runs the scalar formula, compiled without
                # FMA, with glibc tanhf: (0.5x)(1 + tanhf(kBeta (x + kKappa x^3))) (measured 100%)
                f = np.float32
                inner = f(0.7978845608028654) * (x + f(0.044715) * ((x * x) * x))
                return self.out((f(0.5) * x) * (f(1) + _unary32("tanh", inner, "glibc")), dt)
            algo = self.pe.gelu_algo_for(dt) if approximate == "none" else "aten_vec"
            if algo is None:
                raise NotModelled(f"eager gelu on oneDNN ISA {self.pe.onednn_isa!r}")
            tail = "glibc" if self.pe.tail_algo == "glibc" else "aten_scalar"
            if algo == "aten_vec" and approximate == "none" and self.pe.capability == "DEFAULT":
                # ATen's scalar build: the generic Vectorized<float>::erf() calls std::erf on
                # every element, the formula of the scalar loop (glibc erff, no FMA)
                algo = tail
            r = np.asarray(k_gelu(x, fmt=FP32, approximate=approximate, algo=algo), np.float32)
            if algo == "aten_vec":
                r = self.eager_tail(r, np.asarray(k_gelu(x, fmt=FP32, approximate=approximate,
                                                         algo=tail), np.float32), dt)
        elif self.pi.scalar and approximate == "tanh":
            # Inductor's scalar C++ (generated code read): its decomposition without FMA
            # (-ffp-contract=off), (0.5x) * (tanhf(((x*x)*x*0.044715 + x) * 0.7978845608) + 1),
            # std::tanh = libm tanhf (the preset's vec_tanh model)
            f = np.float32
            inner = (x + ((x * x) * x) * f(0.044715)) * f(0.7978845608028654)
            r = (x * f(0.5)) * (_unary32("tanh", inner, self.pi.vec_tanh) + f(1))
        else:  # Inductor: ATen's vectorised formulas (Vectorized<float>::erf / SLEEF tanhf)
            algo = self.pi.algorithms()["gelu" if approximate == "none" else "gelu_tanh"]
            r = np.asarray(k_gelu(x, fmt=FP32, approximate=approximate, algo=algo), np.float32)
        return self.out(r, dt)

    def _default_capability(self, op):
        """ATen's DEFAULT build computes ``Vectorized<float>::exp/log1p`` by libm calls."""
        if self.sw.algorithm == "aten" and self.pe.capability == "DEFAULT":
            raise NotModelled(f"eager aten.{op} on ATen capability DEFAULT (the generic "
                              "Vectorized<float>::exp/log1p call libm; numlab models AVX2/AVX512)")

    def log1p(self, node, x, dt):
        """``torch.log1p``: ``Vectorized<float>::log1p()`` (SLEEF ``log1pf_u10``) on every
        element in eager (ATen's unary ``vml::vlog1p`` maps whole and partial vectors:
        measured 100% of fp32 sizes 24..100003, no libm tail) and in Inductor's vector
        loop; Inductor's scalar tail loop (:func:`_inductor_scalar_tail`) calls glibc
        ``log1pf`` (:data:`TAIL_LOG1P`)."""
        self._default_capability("log1p")
        if self.sw.algorithm != "aten" and self.pi.scalar:  # Inductor's scalar C++: std::log1p
            return self.out(_unary32("log1p", x, TAIL_LOG1P), dt)
        r = _unary32("log1p", x, VEC_LOG1P)
        if self.sw.algorithm != "aten":
            r = self.inductor_tail(node, r, lambda: _unary32("log1p", x, TAIL_LOG1P))
        return self.out(r, dt)

    def inductor_tail(self, node, vec, scalar):
        """Inductor's scalar tail loop (:func:`_inductor_scalar_tail`): the last
        ``tail`` elements take ``scalar()`` (libm); undecided graphs containing a
        ``where`` are not modelled."""
        tail = self.scalar_tail
        if tail is None:
            if self.has_where:
                raise NotModelled(
                    f"Inductor aten.{node.op} in a kernel that is not one contiguous pointwise loop "
                    "and holds a where: whether its tail runs libm (scalar loop) or SLEEF (masked "
                    "vector) is not modelled")
            return vec
        if tail == 0:
            return vec
        why = glibc_math_unmodelled()
        if why is not None:
            raise NotModelled(f"Inductor aten.{node.op}: its scalar tail loop calls libm: {why}")
        vec = np.array(vec, copy=True)
        flat = vec.reshape(-1)
        flat[flat.size - tail:] = np.asarray(scalar(), np.float32).reshape(-1)[flat.size - tail:]
        return flat.reshape(vec.shape)

    def softplus(self, node, x, beta, threshold, dt):
        """Eager ATen ``softplus_kernel`` (Activation.cpp): ``x*beta > threshold ? x :
        log1p(exp(x*beta)) / beta`` in fp32 (``beta``, ``threshold`` converted to
        float), ``exp``/``log1p`` by SLEEF in the vector loop (``vec_exp``,
        :data:`VEC_LOG1P`) and by libm ``expf``/``log1pf`` in the scalar tail
        (``tail_algo``); one rounding to the tensor dtype.  Measured on torch 2.13
        AVX512: 100% of the vector loop's elements (fp32/bf16/fp16); the fp32 tail
        97.4% (glibc 2.36 ``log1pf`` is not correctly rounded).  Inductor decomposes
        softplus into mul/exp/log1p/div/gt/where (handled op by op)."""
        if not (_is_num(beta) and _is_num(threshold)):
            raise NotModelled("softplus with tensor beta/threshold")
        if self.sw.algorithm != "aten":  # a softplus node left in Inductor's graph
            raise NotModelled("aten.softplus inside Inductor's graph (it is decomposed)")
        self._default_capability("softplus")
        b, t = np.float32(beta), np.float32(threshold)
        xb = x * b
        with np.errstate(all="ignore"):
            vec = _unary32("log1p", _unary32("exp", xb, self.vec_exp()), VEC_LOG1P) / b
            tail = _unary32("log1p", _unary32("exp", xb, self.pe.tail_algo), TAIL_LOG1P) / b
        r = self.eager_tail(vec, tail, dt)
        return self.out(np.where(xb > t, x, r), dt)

    def mish(self, x, dt):
        """Eager ATen ``mish_kernel`` (Activation.cpp): ``x * tanh(log1p(exp(x)))`` in fp32
        (16-bit inputs converted), one rounding to the tensor dtype.  The vector loop
        (``cpu_kernel_vec``, two ``Vectorized<scalar_t>`` per step: 32 fp32 or 64
        fp16/bf16 elements under AVX512, half that under AVX2) calls ``Vectorized<float>::exp/log1p/tanh``
        (SLEEF: ``vec_exp``, :data:`VEC_LOG1P`, ``"sleef"``); the scalar loop of the last
        ``numel mod step`` elements of each chunk libm ``expf``/``log1pf``/``tanhf``
        (glibc, ``TorchCpuEager.tail_algo``).  Inductor decomposes mish (exp/log1p/gt/where/tanh/mul,
        op by op)."""
        if self.sw.algorithm != "aten":
            raise NotModelled("aten.mish inside Inductor's graph (it is decomposed)")
        self._default_capability("mish")
        with np.errstate(all="ignore"):
            vec = x * _unary32("tanh", _unary32("log1p", _unary32("exp", x, self.vec_exp()), VEC_LOG1P), "sleef")
            lib = self.pe.tail_algo
            tail = x * _unary32("tanh", _unary32("log1p", _unary32("exp", x, lib), TAIL_LOG1P), lib)
        return self.out(self.eager_tail(vec, tail, dt), dt)

    def hardswish(self, x, dt):
        """ATen ``hardswish_kernel``: ``x * min(max(x + 3, 0), 6) / 6`` in fp32 with a true
        division by 6 (vector and scalar loops alike; multiplying by fl(1/6) instead
        differs on ~21% of fp32 inputs), one rounding to the tensor dtype (measured 100%)."""
        f = np.float32
        with np.errstate(all="ignore"):
            c = np.minimum(np.maximum(x + f(3), f(0)), f(6))
            return self.out((x * c) / f(6), dt)

    def clamp(self, node, base, a, kw):
        """``clamp``/``clamp_min``/``clamp_max``/``hardtanh`` (NaN propagates, as ATen's
        and Inductor's ``maximum``/``minimum``), Python-scalar bounds of any value
        (measured bit for bit in eager and compiled, fp32/bf16/fp16)."""
        x = a[0]
        dt = node.dtype
        if base == "clamp_min":
            lo, hi = a[1], None
        elif base == "clamp_max":
            lo, hi = None, a[1]
        else:
            dflt = (-1.0, 1.0) if base == "hardtanh" else (None, None)
            lo = a[1] if len(a) > 1 else kw.get("min", kw.get("min_val", dflt[0]))
            hi = a[2] if len(a) > 2 else kw.get("max", kw.get("max_val", dflt[1]))
        ft = np.float32
        r = np.asarray(x, ft)
        for bound, fn in ((lo, np.maximum), (hi, np.minimum)):
            if bound is None:
                continue
            if _is_num(bound):
                # ATen converts the bound to the tensor dtype (double -> float -> dtype) and
                # clamps in it; Inductor clamps the fp32 value by fp32(bound) and rounds once.
                # Rounding is monotone and x is a value of dt, so both equal
                # round_dt(clamp(x, fp32(bound))): the bound's rounding commutes with the clamp
                bound = ft(bound)
            else:
                bound = np.asarray(bound, ft)
            r = fn(r, bound)
        return self.out(r, dt)

    def vec_exp(self) -> str:
        """``Vectorized<float>::exp()`` of the kernel being modelled (eager or Inductor)."""
        return self.pe.vec_exp if self.sw.algorithm == "aten" else self.pi.vec_exp

    def reduction(self, node, base, a, kw):
        x = np.asarray(a[0])
        dims = a[1] if len(a) > 1 else kw.get("dim")
        keep = bool(a[2]) if len(a) > 2 else bool(kw.get("keepdim", False))
        dt_in = self.dt_of(node, 0)
        if kw.get("dtype") not in (None, node.dtype):
            raise NotModelled(f"{node.op} with dtype={kw.get('dtype')}")
        _last_dim(node, dims, x.ndim)
        n = x.shape[-1]
        if base in ("amax", "amin"):
            r = np.max(x, axis=-1) if base == "amax" else np.min(x, axis=-1)
            return _keep(self.store(r, node.dtype), keep)
        if self.sw.order == "aten":
            if base == "sum":
                return _keep(_aten_sum(x, dt_in, node.dtype, self.pe, x.size), keep)
            # mean: fp32 sum (16-bit inputs converted first), true division, one rounding
            s = _aten_sum(x, "fp32", "fp32", self.pe, x.size)
            return _keep(_rnd(s / np.float32(n), node.dtype), keep)
        n_vec = self.n_vec
        src = node.args[0]
        if (isinstance(src, Ref) and src.name not in self.inputs and self.users.get(src.name, 0) > 1
                and n >= self.local_buffer_min):
            # the reduced value is also used later: Inductor keeps it in an fp32 local
            # buffer and that loop is tiled by fp32 (16 lanes), measured for softmax
            n_vec = 1
        s = _sum32(x, self.pi.reduce_order(n_vec=n_vec, threads=self.threads))
        if base == "sum":
            return _keep(self.store(s, node.dtype), keep)
        # Inductor lowers mean as an fp32 sum buffer; the division and the conversion to
        # the node dtype are pointwise, inlined at each use (generated code read: a 16-bit
        # mean feeding a broadcast op is never rounded unless emulated_casts;
        # a graph output is rounded at its store)
        return _keep(self.out(s / np.float32(n), node.dtype), keep)

    def var_mean(self, node, a, kw):
        x = np.asarray(a[0])
        dims = a[1] if len(a) > 1 else kw.get("dim")
        _last_dim(node, dims, x.ndim)
        corr = kw.get("correction", 1)
        keep = bool(kw.get("keepdim", False))
        n = x.shape[-1]
        if self.sw.algorithm == "aten":
            raise NotModelled("aten.var_mean called eagerly (ATen's WelfordOps reduction is not "
                              "modelled; it appears in Inductor's decomposition of layer_norm)")
        if self.sw.order == "aten":  # hypothetical: Inductor's graph with ATen's moments order
            m, v = _welford_rows(np.asarray(x, np.float32), self.pe.layernorm_lanes)
            v = v * np.float32(n) / np.float32(n - corr) if corr else v
        else:  # Inductor (generated code read): two passes, sum(x)/n then sum((x-mean)^2)
            xf = np.asarray(x, np.float32)
            order = self.pi.reduce_order(n_vec=self.n_vec, threads=self.threads)
            if order.splits(_rows(xf.shape), n):
                raise NotModelled(
                    f"Inductor var_mean of {_rows(xf.shape)} row(s) of {n} split over threads "
                    "(measured to differ from the two-pass model; not modelled)")
            m = _sum32(xf, order) / np.float32(n)
            d = xf - m[..., None]
            m2 = _sum32(d * d, order)
            v = m2 / np.float32(n - corr)
        return (_keep(self.store(v, "fp32"), keep), _keep(self.store(m, "fp32"), keep))

    def softmax(self, node, a):
        x, dim = np.asarray(a[0]), int(a[1])
        if dim % x.ndim != x.ndim - 1:
            raise NotModelled("softmax over a dim other than the last")
        return _aten_softmax(x, node.dtype, self.pe)

    def layer_norm(self, node, a):
        x, shape, w, b, eps = a[:5]
        x = np.asarray(x)
        if len(shape) != 1:
            raise NotModelled("layer_norm over several dims")
        return _aten_layer_norm(np.asarray(x, np.float32), None if w is None else np.asarray(w, np.float32),
                                None if b is None else np.asarray(b, np.float32), float(eps),
                                self.dt_of(node, 0), self.pe,
                                None if self.sw.order == "aten" else self,
                                widen=self.dt_of(node, 0) in _LOW)


def _scalar_tail_mask(numel: int, preset: TorchCpuEager, threads: int, step: int) -> np.ndarray:
    """Elements of a flat contiguous elementwise op that ATen computes in the scalar loop:
    the last ``len mod step`` of every ``at::parallel_for`` chunk."""
    mask = np.zeros(numel, dtype=bool)
    if numel < preset.grain_size or threads <= 1:
        bounds = [(0, numel)]
    else:
        nt = min(threads, -(-numel // preset.grain_size))
        cs = -(-numel // nt)
        bounds = [(s, min(s + cs, numel)) for s in range(0, numel, cs)]
    for lo, hi in bounds:
        t = (hi - lo) % step
        mask[hi - t:hi] = True
    return mask


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
    decomposition).  ``fp64``: the reference (the lowered graph run by
    ``numlab.execute`` in ``mode="reference"``; the other switches are then unused).
    """

    promotion: str = "eager"
    scalars: str = "aten"
    order: str = "aten"
    algorithm: str = "aten"
    fp64: bool = False

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
    mode : {"eager", "compiled", "fp64"}
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
        switches = {"eager": EAGER, "compiled": COMPILED, "fp64": Switches(fp64=True)}[mode]
        if mode == "compiled" and preset is not None and not isinstance(preset, InductorCpu):
            raise TypeError(f"mode='compiled' needs an InductorCpu preset, got {type(preset).__name__}")
        if mode == "eager" and preset is not None and not isinstance(preset, TorchCpuEager):
            raise TypeError(f"mode='eager' needs a TorchCpuEager preset, got {type(preset).__name__}")
        if mode == "eager":
            eager_preset, preset = preset, None
    if switches.fp64:
        return _reference(trace, _inputs_as_arrays(trace, inputs), keep_values)
    pe = eager_preset if eager_preset is not None else torch_cpu_eager()
    pi = preset if preset is not None else inductor_cpu()
    if COMPILED.algorithm in (switches.algorithm, switches.order) and pi.not_modelled():
        raise NotModelled(pi.not_modelled())
    arrays = _inputs_as_arrays(trace, inputs)
    if switches.algorithm == "inductor":
        ph, consts, nodes, outs = trace.inductor_nodes()
    else:
        ph, consts, nodes, outs = trace.inputs, trace.constants, trace.nodes, trace.outputs
    env = {}
    dts = {}
    for p, a in zip(ph, arrays, strict=True):
        env[p.name] = a
        dts[p.name] = p.dtype
    low = any(p.dtype in _LOW for p in ph)
    threads = _threads(pi)
    it = _Interp(switches, pe, pi, dts, n_vec=2 if low else 1, threads=threads)
    if switches.algorithm == "inductor" and not switches.fp64:
        if switches.promotion == "fused" and not pi.emulated_casts:
            why = _inductor_realized_low(nodes, ph, outs, {**{p.name: p.dtype for p in ph},
                                                           **{n.name: n.dtype for n in nodes}})
            if why:
                raise NotModelled(why)
        # scalar C++ (no vector ISA) has no vector loop: every element is the scalar code's
        it.scalar_tail = 0 if pi.scalar else _inductor_scalar_tail(nodes, ph, outs, pi.lanes * it.n_vec)
        it.has_where = any(n.op.startswith("where") for n in nodes)
    it.users = {}
    it.inputs = {p.name for p in ph}
    for n in nodes:
        for r in n.refs():
            it.users[r] = it.users.get(r, 0) + 1
    for n in nodes:
        dts[n.name] = n.dtype
        if n.op == "constant":
            v = as_numpy(consts[n.name])
            env[n.name] = v
            continue
        args = tuple(_resolve(x, env) for x in n.args)
        kw = {k: _resolve(v, env) for k, v in n.kwargs.items()}
        env[n.name] = it.run(n, args, kw)
    outputs, odt = [], []
    for o in outs:
        v = env[o]
        d = dts[o]
        v = it.store(v, d)
        outputs.append(np.asarray(v))
        odt.append(d)
    return Prediction(mode, outputs, odt, env if keep_values else {})


def _reference(trace: TorchTrace, arrays, keep_values: bool) -> Prediction:
    """``mode="fp64"``: the ATen graph lowered to the catalogue (:meth:`TorchTrace.to_graph`)
    and run by :func:`numlab.execute.run` in ``mode="reference"`` (every operator's
    float64 reference, no rounding: the function's own float casts are lowered as the
    identity, ``to_graph(casts=False)``).  The inputs and module constants are values of
    fp32/fp16/bf16, exact in fp32, so ``fmt="fp32"`` leaves them as they are."""
    try:
        g = trace.to_graph(casts=False)
    except ValueError as exc:
        raise NotModelled(f"the fp64 reference runs the lowered graph: {exc}") from None
    ins = {p.name: a for p, a in zip(trace.inputs, arrays, strict=True)}
    for name in g.inputs:
        if name not in ins:  # a module parameter or buffer
            ins[name] = as_numpy(trace.constants[name])
    res = execute_run(g, ins, mode="reference", fmt="fp32")
    dtypes = [trace.node(o).dtype for o in trace.outputs]
    outputs = [res.outputs[o] != 0 if d == "bool" else res.outputs[o] for o, d in zip(g.outputs, dtypes, strict=True)]
    values = {**{k: np.asarray(v, np.float64) for k, v in ins.items()}, **res.values} if keep_values else {}
    return Prediction("fp64", outputs, dtypes, values)


def _resolve(x, env):
    if isinstance(x, Ref):
        return env[x.name]
    if isinstance(x, (list, tuple)):
        return type(x)(_resolve(y, env) for y in x)
    return x


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
