"""Presets of how PyTorch computes on this CPU: ``torch_cpu_eager`` and ``inductor_cpu``.

Every field below was measured against torch 2.13.0 (CPU build) by
constructing inputs on which the candidate rules differ and counting
bitwise-equal elements, on an Intel CPU with AVX-512 (capability
``AVX512``, oneDNN ``avx512_core``) and, on the same CPU, under
``ATEN_CPU_CAPABILITY=avx2`` / ``default`` and ``ONEDNN_MAX_CPU_ISA=AVX2``
(what an AVX2-only CPU such as AMD Zen 3 dispatches).  The presets are
machine-aware: :func:`torch_cpu_eager` and :func:`inductor_cpu` detect what
decides the bits in the running process (:func:`describe_machine` prints it)
and pick the modelled kernels for it; a path that is not modelled raises
``numlab.torch.NotModelled`` when predicted.  ``tests/test_torch_faithfulness.py``
and ``tests/test_torch_capabilities.py`` re-check them on every run.

What decides the bits (detected)
--------------------------------
* ATen's dispatch level ``torch.backends.cpu.get_cpu_capability()``
  (``AVX512``, ``AVX2``, ``DEFAULT``; lowered by ``ATEN_CPU_CAPABILITY``):
  softmax sums in 16 lanes under AVX512, 8 under AVX2.  ``DEFAULT`` (no vector
  build): sums, means, amax, arithmetic with scalars and rms_norm are modelled
  (fp32 ``add(alpha)`` without FMA, 16-bit ``add(alpha)`` as ``fl16(x + fl16(a' y))``
  on every element), and sigmoid with glibc ``expf`` (``vec_exp="glibc"``, bit for
  bit), softmax (8-lane generic ``reduce_all``, glibc ``expf``) and
  ATen's gelu in both approximations (the scalar formulas without FMA, glibc
  ``erff``/``tanhf`` on every element), layer norm (``RowwiseMoments`` without FMA),
  bf16/fp16 exp/tanh/erf (glibc on every element); fp32 exp/tanh/erf and silu are not
  (``NotModelled``).
* oneDNN's ISA, which eager ``F.gelu`` (``approximate="none"``) runs on, per dtype:
  oneDNN picks it from the CPU and ``ONEDNN_MAX_CPU_ISA`` (measured: it ignores
  ``ATEN_CPU_CAPABILITY``).  ``avx512_core`` and up: the minimax kernel
  (``algo="onednn"``); ``avx2``: Abramowitz & Stegun with oneDNN's own exp
  (``algo="onednn_avx2"``).  ATen hands fp32 to oneDNN always, bf16 from
  ``avx512_core``, fp16 only from ``avx512_core_fp16`` (:func:`detect_onednn_dtypes`;
  an AMD Zen 5 or ``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16`` keeps fp16 in ATen's own
  kernel, an AVX2 oneDNN bf16 and fp16); each path bit for bit.
* The BLAS (:func:`detect_blas`: MKL here; OpenBLAS's ``OPENBLAS_CORETYPE`` where
  torch uses it) and the fp32 unary math library (MKL VML): reported; no predicted
  torch op calls the BLAS, and eager fp32 exp/tanh/erf through MKL VML are refused.
* Inductor's vector ISA ``torch._inductor.cpu_vec_isa.pick_vec_isa()``
  (follows ``ATEN_CPU_CAPABILITY``): its fp32 lanes (16 avx512, 8 avx2); no
  vector ISA (``default``) means scalar C++ (:attr:`InductorCpu.scalar`): one
  sequential fp32 sum from ``+0`` per row (``max`` from ``-inf``), libm calls
  (glibc ``expf``/``tanhf``/``erff``, modelled bit for bit), ``-ffp-contract=off``.
* Threads (``torch.get_num_threads()``, read when predicting), ATen's
  ``GRAIN_SIZE`` (32768) and Inductor's ``cpp.min_chunk_size``.

ATen eager (``TorchCpuEager``)
------------------------------
* 16-bit tensors: every kernel widens to fp32 ("opmath"), computes in fp32
  and rounds once to the tensor dtype (RNE) when it stores.
* Python-scalar operands are *not* converted alike (measured, 100% of
  200 000 elements per op and scalar):

  - ``mul``, ``div``: the scalar stays fp32 (``iter.original_scalar_value
    <opmath_t>``): ``x * 0.1`` is ``fl16(x * fl32(0.1))``; ``x / s`` is a
    true division by ``fl32(s)`` (not a multiplication by ``1/s``).
  - ``add``, ``sub``, ``rsub``, comparisons (``gt``...), ``where``: the
    scalar is a wrapped number converted to the tensor dtype first, through
    fp32 (``fl16(fl32(s))``, a double rounding): ``x + 0.1`` is
    ``fl16(x + fl16(0.1))``.
  - ``s / x`` is ``reciprocal(x) * s`` (Python's ``__rtruediv__``): two
    roundings to the tensor dtype.
  - ``add(x, y, alpha=a)``: the vectorised body computes ``fma(y, a', x)``
    with ``a' = fl16(fl32(a))`` (16-bit) or ``fl32(a)`` (fp32, where the FMA
    is visible: 100% match with one rounding, 81.5% with two); the scalar
    tail of each vectorised loop (the last ``n mod 32`` elements of every
    parallel chunk for 16-bit dtypes) computes ``fl16(x + fl16(a' y))``.
* Reductions: ``sum`` by ATen's ``cascade_sum`` (the order
  :class:`numlab.kernels.orders.cpu.AtenCascade`) with ``Vectorized<float>`` of **8** lanes: the
  sum kernel runs its AVX2 build although the capability is AVX512
  (measured: the V=8 model matches 100% of rows, V=16 about 30%).
  ``mean`` of a 16-bit tensor is ``fl16(sum32(fp32(x)) / n)`` where the sum
  runs the fp32 path (the input is converted first); fp32 ``mean`` is
  ``fl32(sum / n)`` (a true division).  ``amax``/``amin``: exact.
* Transcendental functions: vectorised code calls SLEEF's ``expf_u10``
  (sigmoid, softmax, erf's exp; ``numlab.kernels.exp(algo="sleef_u10")``,
  bit for bit) with glibc's libm in the scalar tails (the last ``numel mod step``
  elements of each chunk, ``step`` two ``Vectorized<scalar_t>``: 32 fp32 / 64 16-bit
  elements under AVX512, 16 / 32 under AVX2; bit for bit); the unary fp32
  ``exp``/``tanh``/``erf`` kernels are MKL VML (measured 96.7-99.2% against correctly
  rounded fp32, 90.6% against SLEEF): refused; their 16-bit kernels map SLEEF
  ``expf``/``tanhf`` and ATen's A&S ``erf`` over every element (100% of 2^20);
  ``F.gelu`` runs oneDNN's gelu_erf where oneDNN takes the dtype, else ATen's
  kernel (A&S erf, glibc ``erff`` in the tail; bit for bit);
  ``F.gelu(approximate="tanh")`` runs ATen's kernel with
  ``x + kappa*x^3`` contracted to an FMA and SLEEF ``tanhf`` (bit for bit).
* Softmax: 16-lane sum (its AVX512 build: 100% vs 61-79% with 8 lanes;
  8 lanes when ATen dispatches AVX2, e.g. ``ATEN_CPU_CAPABILITY=avx2``),
  ``1/sum`` then a multiply; layer norm: ``RowwiseMoments`` with 8 lanes.

Inductor C++ (``InductorCpu``)
------------------------------
* Vector ISA from ``torch._inductor.cpu_vec_isa.pick_vec_isa()``: avx512,
  16 fp32 lanes; 16-bit loads fill 2 vectors (32 elements per step).
* Fused pointwise: loads converted to fp32 once, every op in fp32 with Python
  scalars as ``static_cast<float>(s)`` for *every* op (also add/sub: the
  eager rounding of the scalar to fp16/bf16 is not reproduced), one rounding
  at each store.  ``-ffp-contract=off``: no FMA (``add(x, y, alpha=a)``
  compiles to ``x + y*a``, two fp32 roundings, unlike eager's FMA).
* ``emulated_casts=True`` (Inductor's ``emulate_precision_casts``): every value whose dtype is fp16/bf16 is
  rounded to it where eager would store it; scalars stay fp32.
* Reductions in the order :class:`numlab.kernels.orders.cpu.InductorLanes`;
  ``Vectorized<float>`` math: ``exp``/``tanh`` by SLEEF (``algo="sleef_u10"``,
  ``"sleef"``), ``erf`` and gelu by ATen's A&S formula (``"aten_vec"``); reduction results
  are stored (rounded to the node dtype) even inside a fused kernel.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from ..fusion import FusionOptions
from ..kernels import KernelSpec
from ..kernels.algorithms import ERF_ALGOS, EXP_ALGOS, GELU_ALGOS, TANH_ALGOS, parse_algo
from ..kernels.orders import Lanes
from ..kernels.orders.cpu import AtenCascade, InductorLanes
from ..kernels.reduction import reduce
from .bridge import import_torch
from .data import cancelling_rows

__all__ = [
    "TorchCpuEager",
    "InductorCpu",
    "torch_cpu_eager",
    "inductor_cpu",
    "detect_inductor_lanes",
    "DEFAULT_NOT_MODELLED",
    "GLIBC_MODELLED",
    "detect_glibc",
    "glibc_math_unmodelled",
    "detect_cpu_capability",
    "measure_aten_sum_lanes",
    "detect_onednn_isa",
    "detect_onednn_dtypes",
    "detect_blas",
    "measure_onednn_isa",
    "detect_inductor_isa",
    "describe_machine",
    "Machine",
    "SCALAR_RULES",
    "CAPABILITIES",
    "ONEDNN_ISAS",
]

SCALAR_RULES = (
    ("add", "storage"), ("sub", "storage"), ("rsub", "storage"), ("where", "storage"),
    ("compare", "storage"), ("mul", "opmath"), ("div", "opmath"), ("alpha", "storage"),
)
"""How eager ATen converts a Python scalar operand, per op: ``storage`` =
rounded to the tensor dtype (through fp32), ``opmath`` = kept in fp32."""


VEC_LOG1P = "sleef_u10"
"""``Vectorized<float>::log1p()`` of ATen's and Inductor's C++: SLEEF ``log1pf_u10`` on AVX2
and AVX-512 (measured 100% of 1.3e6 fp32 inputs)."""
TAIL_LOG1P = "glibc"
"""``std::log1p(float)`` of the scalar loops: glibc's ``log1pf`` (fdlibm's; glibc 2.36 measured)."""

INDUCTOR_TAIL_OPS = ("exp", "log1p", "tanh", "erf")
"""The operators whose scalar code (``std::exp``, ``std::log1p``, ``std::tanh``, ``std::erf``:
glibc) differs from Inductor's ``Vectorized<float>`` one (SLEEF, ATen's A&S erf): in a
kernel whose masked tail Inductor runs as a scalar loop their last elements are libm's."""

LIBM_TAIL_OPS = ("sigmoid", "silu", "gelu", "softplus", "mish")
"""Eager ops whose ATen kernel leaves a scalar tail loop calling libm (the predictor's
``eager_tail``): modelled with glibc's routines, refused on another C library."""


@dataclass(frozen=True)
class TorchCpuEager:
    """How ATen's CPU kernels compute (module docstring; all measured).

    Attributes
    ----------
    sum_lanes : int
        fp32 lanes of the ``cascade_sum`` kernel's ``Vectorized<float>`` (8).
    elementwise_step : int
        fp32 elements per vectorised-loop step of ``cpu_kernel_vec`` (two
        ``Vectorized<float>``: 32 under AVX512, 16 under AVX2; :func:`torch_cpu_eager`
        sets it from ``capability``); a 16-bit kernel steps over two
        ``Vectorized<Half/BFloat16>``, twice as many elements (:meth:`loop_step`;
        measured for sigmoid and gelu, fp32/bf16/fp16, both capabilities).  The last
        ``len mod step`` elements of each parallel chunk run the scalar loop (libm
        ``expf``/``erff`` instead of SLEEF).
    alpha_step : int
        The step of the 16-bit ``add(x, y, alpha)`` kernel (32 under AVX512 and AVX2,
        measured): its scalar tail rounds twice.
    softmax_lanes : int
        fp32 lanes of the softmax kernel's sum vector: 16 where ATen
        dispatches its AVX512 build, 8 for AVX2 (both measured, the latter
        with ``ATEN_CPU_CAPABILITY=avx2``); :func:`torch_cpu_eager` sets it
        from ``capability``.
    layernorm_lanes : int
        fp32 lanes of LayerNorm's ``RowwiseMoments`` (8: AVX2 build, measured).
    grain_size : int
        ``at::internal::GRAIN_SIZE``; elementwise work above it is split in
        ``threads`` chunks.
    threads : int
        Intra-op threads; 0 = ``torch.get_num_threads()`` when predicting.
    scalar_rules : tuple
        :data:`SCALAR_RULES`.
    fma_alpha : bool
        ``add(x, y, alpha)`` uses one FMA (measured True).
    onednn_gelu : bool
        ``F.gelu(x)`` (erf form) runs oneDNN's kernel (measured True when
        ``torch.backends.mkldnn`` is enabled, the default); False models
        ATen's own kernel (``algo="aten_vec"``, glibc's ``erff`` in the
        scalar tail), what runs with mkldnn off.
    onednn_dtypes : tuple
        The dtypes whose eager ``F.gelu`` ATen hands to oneDNN
        (:func:`detect_onednn_dtypes`): fp32 always, bf16 where oneDNN runs at least
        ``avx512_core``, fp16 where it runs ``avx512_core_fp16`` (measured with
        ``ONEDNN_MAX_CPU_ISA``); the others run ATen's own kernel.
    onednn_isa : {"avx512_core", "avx2", "other"}
        oneDNN's dispatch ISA (:func:`detect_onednn_isa`): ``avx512_core`` runs
        the minimax gelu_erf (``algo="onednn"``), ``avx2`` Abramowitz & Stegun
        with oneDNN's exp (``algo="onednn_avx2"``); ``other`` (sse41, avx, or not
        known) is not modelled.
    vec_exp : str
        ``Vectorized<float>::exp()`` of the fused kernels (sigmoid, silu,
        softmax): ``"sleef_u10"`` (SLEEF ``expf_u10``, measured bit for bit).
    unary_algo : str
        The unary ``exp``/``tanh``/``erf`` kernels (ATen's ``vml`` path):
        ``"mkl_vml"`` (a build with MKL: fp32 calls MKL's ``vsExp``/``vsTanh``/``vsErf``,
        not modelled -- 96.7-99.2% agreement with correctly rounded fp32 --, so
        predicting fp32 raises ``NotModelled``; bf16/fp16 map ``Vectorized<float>``
        over every element: SLEEF exp/tanh, ATen's A&S erf, measured 100% of 2^20
        elements); ``"vec"`` (no MKL: every dtype maps ``Vectorized<float>``);
        ``"exact"``/``"glibc"``: what-if models of fp32.
    tail_algo : str
        ``exp``/``tanh``/``erf`` of the scalar tail loops (libm ``expf``,
        ``tanhf``, ``erff``): ``"glibc"`` (bit for bit on the glibc versions of
        :data:`GLIBC_MODELLED`; other C libraries are not modelled), or ``"exact"``
        (correctly rounded, a what-if).
    capability : {"AVX512", "AVX2", "DEFAULT"}
        ATen's CPU dispatch level the preset describes
        (``torch.backends.cpu.get_cpu_capability()``; :func:`torch_cpu_eager`
        detects it).  The sum and layer-norm kernels run 8 lanes under AVX512 and
        AVX2 (measured); under ``DEFAULT`` (no vector build) the ops of
        :data:`DEFAULT_NOT_MODELLED` raise ``NotModelled``.
    """

    name: str = "torch_cpu_eager"
    sum_lanes: int = 8
    elementwise_step: int = 32
    alpha_step: int = 32
    softmax_lanes: int = 16
    layernorm_lanes: int = 8
    grain_size: int = 32768
    threads: int = 0
    scalar_rules: tuple = SCALAR_RULES
    fma_alpha: bool = True
    onednn_gelu: bool = True
    onednn_isa: str = "avx512_core"
    onednn_dtypes: tuple = ("fp32", "bf16", "fp16")
    capability: str = "AVX512"
    vec_exp: str = "sleef_u10"
    unary_algo: str = "mkl_vml"
    tail_algo: str = "glibc"

    def __post_init__(self):
        if self.capability not in CAPABILITIES:
            raise ValueError(f"capability={self.capability!r} is not modelled; choose one of {CAPABILITIES}")
        if self.onednn_isa not in ONEDNN_ISAS:
            raise ValueError(f"onednn_isa={self.onednn_isa!r} is not valid; choose one of {ONEDNN_ISAS}")
        for k in ("sum_lanes", "softmax_lanes", "layernorm_lanes", "elementwise_step", "alpha_step"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"{k}={v!r} is not valid; choose a power of two >= 1 (measured: "
                                 f"{getattr(TorchCpuEager, k)})")
        if not isinstance(self.grain_size, int) or self.grain_size < 1:
            raise ValueError(f"grain_size={self.grain_size!r} is not valid; choose an int >= 1")
        if not isinstance(self.threads, int) or self.threads < 0:
            raise ValueError(f"threads={self.threads!r} is not valid; choose an int >= 0 (0 = torch's)")
        parse_algo(self.vec_exp, EXP_ALGOS, "vec_exp")
        common = sorted(set(EXP_ALGOS) & set(TANH_ALGOS) & set(ERF_ALGOS))  # exp, tanh and erf alike
        if self.tail_algo not in common:
            raise ValueError(f"tail_algo={self.tail_algo!r} is not valid; valid choices: {common}")
        if self.unary_algo not in ("mkl_vml", "vec", *common):
            raise ValueError(f"unary_algo={self.unary_algo!r} is not valid; valid choices: "
                             f"{['mkl_vml', 'vec', *common]}")
        if not set(self.onednn_dtypes) <= set(_FLOATS):
            raise ValueError(f"onednn_dtypes={self.onednn_dtypes!r} is not valid; choose a subset of {_FLOATS}")
        rules = dict(self.scalar_rules)
        if set(rules) != set(dict(SCALAR_RULES)) or not set(rules.values()) <= {"storage", "opmath"}:
            raise ValueError(f"scalar_rules={self.scalar_rules!r} is not valid; give each of "
                             f"{sorted(dict(SCALAR_RULES))} one of ('storage', 'opmath')")

    def scalar_rule(self, op: str) -> str:
        return dict(self.scalar_rules)[op]

    def storage_scalars(self) -> tuple:
        """The scalar-form operators whose scalar ATen rounds to the tensor dtype
        (``KernelSpec.storage_scalars``), from :attr:`scalar_rules` (``div``'s rule is
        also ``rdiv``'s, ``alpha``'s ``add_alpha``'s)."""
        of = {"add": ("add_scalar",), "sub": ("sub_scalar",), "rsub": ("rsub_scalar",), "mul": ("mul_scalar",),
              "div": ("div_scalar", "rdiv_scalar"), "alpha": ("add_alpha",)}
        return tuple(sorted(op for rule, ops in of.items() if self.scalar_rule(rule) == "storage" for op in ops))

    def sum_order(self, storage: str = "fp32") -> AtenCascade:
        """ATen's ``sum`` order for a tensor of dtype ``storage`` (16-bit loads widen)."""
        return AtenCascade(self.sum_lanes, storage in _LOW)

    def loop_step(self, fmt: str = "fp32") -> int:
        """Elements per step of ``cpu_kernel_vec``'s vector loop for ``fmt`` tensors
        (two ``Vectorized<scalar_t>``): ``elementwise_step``, doubled for bf16/fp16."""
        return self.elementwise_step * (2 if fmt in _LOW else 1)

    @property
    def gelu_algo(self) -> str | None:
        """``F.gelu`` (``approximate="none"``) of fp32: ``"onednn"`` (oneDNN avx512_core),
        ``"onednn_avx2"`` (oneDNN avx2) or ATen's ``"aten_vec"`` (mkldnn off); None
        when oneDNN runs an ISA numlab does not model.  ``approximate="tanh"`` always
        runs ATen's kernel (``"aten_vec"``).  Other dtypes: :meth:`gelu_algo_for`."""
        return self.gelu_algo_for("fp32")

    def gelu_algo_for(self, fmt: str) -> str | None:
        """``F.gelu`` (``approximate="none"``) of a ``fmt`` tensor: oneDNN's kernel where
        ATen hands ``fmt`` to oneDNN (``onednn_dtypes``), else ATen's ``"aten_vec"``."""
        if not self.onednn_gelu or fmt not in self.onednn_dtypes:
            return "aten_vec"
        return _ONEDNN_GELU.get(self.onednn_isa)

    def gelu_path(self, fmt: str) -> str:
        """Words for the kernel eager ``F.gelu`` runs on ``fmt`` (reports)."""
        if self.gelu_algo_for(fmt) == "aten_vec":
            why = "mkldnn off" if not self.onednn_gelu else f"oneDNN does not take {fmt} here"
            return f"ATen gelu ({why})"
        return f"oneDNN {self.onednn_isa} gelu_erf"

    def not_modelled(self, op: str, fmt: str = "fp32", approximate: str = "none") -> str | None:
        """Why eager ``aten.<op>`` on a ``fmt`` tensor is not modelled on this preset's
        path, or None when it is (``approximate``: gelu's; ``op="alpha"``: add/sub
        with ``alpha``)."""
        path = f"ATen capability {self.capability}"
        if op == "gelu" and approximate == "none" and self.gelu_algo_for(fmt) != "aten_vec":
            if self.gelu_algo_for(fmt) is None:
                return (f"eager gelu runs oneDNN's {self.onednn_isa!r} kernel (oneDNN ISA "
                        f"{self.onednn_isa}); numlab models oneDNN avx512_core and avx2")
            return None
        if op in ("exp", "tanh", "erf", "sqrt", "log") and fmt == "fp32" and self.unary_algo == "mkl_vml":
            return (f"eager fp32 {op} runs MKL VML (vs{op.capitalize()}), whose bits numlab does not "
                    "model (96.7-99.9% agree with correctly rounded fp32)")
        if op == "log":
            return ("eager log maps Vectorized<float>::log (SLEEF logf_u10) or MKL VML, whose bits numlab "
                    "does not model (the engine's log is correctly rounded)")
        if self.tail_algo == "glibc" and op in LIBM_TAIL_OPS and self.capability != "DEFAULT":
            why = glibc_math_unmodelled()
            if why is not None:
                return f"eager {op}'s scalar tail loop calls libm: {why}"
        if self.capability == "DEFAULT":
            why = glibc_math_unmodelled()
            if why is not None and op in ("sigmoid", "softmax", "gelu", "exp", "tanh", "erf"):
                return f"eager {op} on {path} calls libm: {why}"
            if op in ("exp", "tanh", "erf") and fmt in _LOW:
                # the 16-bit kernels map the generic Vectorized<float>, std::exp/tanh/erf on
                # every element: glibc (measured on every bf16 and fp16 input)
                return None
            if op == "gelu":
                # ATen's scalar formulas, no FMA, glibc tanhf / erff on every element (the
                # generic Vectorized<float> maps std::tanh / std::erf; measured 100%)
                return None
            if op in DEFAULT_NOT_MODELLED:
                return (f"eager {op} on {path} (ATen's scalar build: libm calls and "
                        "the generic Vectorized loops are not modelled)")
        return None

    def algorithms(self) -> dict:
        """The math routines of the vectorised kernels, as ``numlab.kernels`` ``algo=`` names
        (``gelu``: ``approximate="none"``; ``gelu_tanh``: ``approximate="tanh"``)."""
        if self.capability == "DEFAULT":  # the generic Vectorized<float> calls libm per element
            return {"exp": self.vec_exp, "tanh": "glibc", "erf": "glibc", "gelu": self.gelu_algo,
                    "gelu_tanh": "aten_vec"}
        return {"exp": self.vec_exp, "tanh": "sleef", "erf": "aten_vec", "gelu": self.gelu_algo,
                "gelu_tanh": "aten_vec"}

    def kernel_spec(self, gelu_dtype: str = "fp32") -> KernelSpec:
        """This preset as the :class:`numlab.kernels.KernelSpec` :func:`numlab.torch.predict`
        runs the ATen graph with (``numlab.execute.run(mode="eager")``): fp32 inside
        (``fp32_internal``); a multiply's or divide's scalar kept fp32 (``scalar_mul="muls"``)
        and an add's rounded to the tensor dtype (``storage_scalars``, from
        :data:`SCALAR_RULES`); FMA where ATen's build contracts (``add(alpha)``, layer
        norm; none under ``DEFAULT``); ``AtenCascade(sum_lanes)`` sums, widened for 16-bit
        tensors (``reduce_order_low``); rsqrt as ``1/sqrt``; the math of
        :meth:`algorithms` (gelu's for tensors of ``gelu_dtype``: :meth:`gelu_algo_for`),
        SLEEF ``log1pf``, silu as ``x / (1 + exp(-x))``; softmax's kernel (one lane
        vector, ``e * (1/sum)``); LayerNorm's ``RowwiseMoments``; the scalar tail loops
        (``loop_step``, ``alpha_step``, ``tail_math``, ``grain_size``, ``threads``).
        ``threads`` 0 is taken as 1 (pass the preset with ``torch.get_num_threads()``).
        A ``unary_algo`` what-if (``"exact"``, ``"glibc"``) sets ``exp``/``tanh``/``erf``
        of every kernel of the graph."""
        alg = self.algorithms()
        if self.unary_algo not in ("mkl_vml", "vec"):
            alg.update(exp=self.unary_algo, tanh=self.unary_algo, erf=self.unary_algo)
        gelu = self.gelu_algo_for(gelu_dtype)
        default = self.capability == "DEFAULT"
        if default:
            # ATen's scalar build: the generic Vectorized<float> maps std::erf/tanh (glibc) over
            # every element, and gelu's formulas are compiled without FMA (measured 100%)
            gelu = "glibc" if gelu == "aten_vec" else gelu
            alg["gelu_tanh"] = "glibc_nofma"
        L = self.softmax_lanes
        return KernelSpec(
            name="torch_cpu_eager", promotion="fp32_internal", scalar_mul="muls",
            storage_scalars=self.storage_scalars(),
            fma=self.fma_alpha and not default,
            reduce_order=self.sum_order("fp32"), reduce_order_low=self.sum_order("fp16"),
            rsqrt="sqrt_then_div", exp=alg["exp"], tanh=alg["tanh"], erf=alg["erf"],
            gelu=gelu or "exact", gelu_tanh=alg["gelu_tanh"], log1p=VEC_LOG1P, silu="divide",
            softmax="reciprocal",
            # ATen's DEFAULT build: vec::reduce_all over the generic 8-lane Vectorized<float>
            softmax_order=Lanes(8, "sequential", "masked") if default else InductorLanes(L, 1, 1, "false", False, L),
            layer_norm="aten", moments_lanes=self.layernorm_lanes,
            loop_step=0 if default else self.elementwise_step, alpha_step=0 if default else self.alpha_step,
            tail_math=self.tail_algo, grain_size=self.grain_size, threads=max(int(self.threads), 1))


@dataclass(frozen=True)
class InductorCpu:
    """How Inductor's generated C++ computes (module docstring; all measured).

    Attributes
    ----------
    lanes : int
        fp32 lanes of the picked vector ISA (16 for avx512); 0 = detect.
        Caveat (measured, torch 2.13): Inductor's FX graph cache key does not
        include ``ATEN_CPU_CAPABILITY``, so a kernel compiled under
        ``avx2`` (8 lanes) is reused by a later avx512 run sharing
        ``TORCHINDUCTOR_CACHE_DIR``; the detected lanes then mispredict.
    vec_isa : str
        Inductor's vector ISA name (``str(pick_vec_isa())``, e.g. ``"avx512"``,
        ``"avx2"``); ``"none"``: no vector ISA (``ATEN_CPU_CAPABILITY=default``),
        scalar C++ that numlab does not model (predicting raises ``NotModelled``).
    emulated_casts : bool
        ``torch._inductor.config.emulate_precision_casts``.
    threads : int
        OpenMP threads; 0 = ``torch.get_num_threads()`` when predicting.
    min_chunk_size : int
        ``torch._inductor.config.cpp.min_chunk_size`` (parallel threshold).
    vec_exp, vec_tanh, vec_erf, vec_gelu : str
        ``numlab.kernels`` algorithms of the generated code's ``Vectorized<float>``
        math: ``"sleef_u10"`` (exp), ``"sleef"`` (tanh), ``"aten_vec"`` (erf, and
        gelu in both approximations; ``"onednn"`` is not valid here), all measured
        bit for bit; ``"exact"`` (correctly rounded fp32) for what-if predictions.
        Without a vector ISA (``vec_isa="none"``) :func:`inductor_cpu` sets them to
        ``"glibc"``: the scalar C++ calls ``std::exp/tanh/erf`` (glibc, bit for bit).
    """

    name: str = "inductor_cpu"
    lanes: int = 16
    vec_isa: str = "avx512"
    emulated_casts: bool = False
    threads: int = 0
    min_chunk_size: int = 512

    vec_exp: str = "sleef_u10"
    vec_tanh: str = "sleef"
    vec_erf: str = "aten_vec"
    vec_gelu: str = "aten_vec"

    def __post_init__(self):
        if not isinstance(self.lanes, int) or self.lanes < 1 or self.lanes & (self.lanes - 1):
            raise ValueError(f"lanes={self.lanes!r} is not valid; choose a power of two >= 1")
        if not isinstance(self.min_chunk_size, int) or self.min_chunk_size < 1:
            raise ValueError(f"min_chunk_size={self.min_chunk_size!r} is not valid; choose an int >= 1")
        parse_algo(self.vec_exp, EXP_ALGOS, "vec_exp")
        parse_algo(self.vec_tanh, TANH_ALGOS, "vec_tanh")
        parse_algo(self.vec_erf, ERF_ALGOS, "vec_erf")
        if parse_algo(self.vec_gelu, GELU_ALGOS, "vec_gelu") in ("onednn", "onednn_avx2"):
            raise ValueError("vec_gelu='onednn' is not valid: Inductor's gelu is ATen's formula "
                             f"(oneDNN serves only eager F.gelu); valid choices: "
                             f"{[a for a in GELU_ALGOS if not a.startswith('onednn')]}")

    def not_modelled(self) -> str | None:
        """Why this Inductor setting is not modelled, or None when it is (every vector ISA
        and ``"none"``, Inductor's scalar C++, are modelled; what stays unmodelled inside
        them is raised per op by :func:`numlab.torch.predict`); the scalar C++ calls
        glibc's libm, modelled only for the glibc versions in :data:`GLIBC_MODELLED`."""
        if self.scalar:
            why = glibc_math_unmodelled()
            if why is not None:
                return f"Inductor's scalar C++ calls libm: {why}"
        return None

    @property
    def scalar(self) -> bool:
        """No vector ISA (``vec_isa="none"``, e.g. ``ATEN_CPU_CAPABILITY=default``): the
        generated C++ is scalar loops -- reductions one sequential fp32 accumulator from
        ``+0`` (``amax`` from ``-inf``), 16-bit values converted one by one, libm calls
        (``std::exp``...) for the math (read in the generated code, measured)."""
        return self.vec_isa == "none"

    def reduce_order(self, storage: str = "fp32", threads: int = 1, n_vec: int | None = None) -> InductorLanes:
        """Inductor's row-reduction order: ``InductorLanes(lanes, n_vec, threads)`` with
        ``n_vec`` 2 for 16-bit ``storage`` (two fp32 vectors per load), else 1.  Scalar
        C++ (:attr:`scalar`): ``InductorLanes(1, 1, threads, unroll=1)``, one sequential
        fp32 sum from ``+0`` (``tree(+0:[0..n-1])``, revealed by probing)."""
        if self.scalar:
            return InductorLanes(1, 1, max(int(threads), 1), unroll=1, min_chunk=self.min_chunk_size)
        if n_vec is None:
            n_vec = 2 if storage in _LOW else 1
        return InductorLanes(self.lanes, n_vec, max(int(threads), 1), min_chunk=self.min_chunk_size)

    def algorithms(self) -> dict:
        """``Vectorized<float>`` math of the generated code, as ``numlab.kernels`` ``algo=`` names."""
        return {"exp": self.vec_exp, "tanh": self.vec_tanh, "erf": self.vec_erf, "gelu": self.vec_gelu,
                "gelu_tanh": self.vec_gelu}

    def kernel_spec(self, storage: str = "fp32", threads: int | None = None, tail: bool = False) -> KernelSpec:
        """This preset as a :class:`numlab.kernels.KernelSpec`: ``KernelSpec.inductor_cpu()``
        (fp32 inside, scalars fp32, no FMA (``-ffp-contract=off``), rsqrt as ``1/sqrt``,
        silu as ``x / (1 + exp(-x))``) with ``reduce_order=InductorLanes(lanes, n_vec,
        threads)`` (``n_vec`` 2 for 16-bit ``storage``), ``reduce_order_low`` the
        16-bit loads' order (``n_vec`` 2), the algorithms of :meth:`algorithms` and
        SLEEF ``log1pf`` (glibc's in scalar C++).  ``tail``: the kernel runs its
        masked tail as a scalar loop (:func:`numlab.torch._aten.inductor_scalar_tail`),
        whose :data:`INDUCTOR_TAIL_OPS` are glibc's (``loop_step`` one vector of fp32 lanes,
        twice that for 16-bit loads).  ``emulated_casts`` is the lowering's
        (:func:`numlab.torch.lowering.lower`), not a spec field.
        ``threads`` None: the preset's ``threads``, 1 when that is 0 (the spec does not
        ask torch; pass ``torch.get_num_threads()`` to model a threaded run)."""
        if threads is None:
            threads = self.threads or 1
        alg = self.algorithms()
        if self.scalar:  # -ffp-contract=off scalar C++: gelu tanh's formula without FMA
            alg["gelu_tanh"] = "glibc_nofma"
        return KernelSpec.inductor_cpu(
            reduce_order=self.reduce_order(storage, threads), reduce_order_low=self.reduce_order("fp16", threads),
            silu="divide", log1p=TAIL_LOG1P if self.scalar else VEC_LOG1P,
            loop_step=self.lanes if tail and not self.scalar else 0,
            tail_ops=INDUCTOR_TAIL_OPS if tail and not self.scalar else None, tail_math="glibc", **alg)

    def fusion_options(self):
        return FusionOptions.inductor()


_LOW = ("fp16", "bf16")


_SCALAR_MATH = {"vec_exp": "glibc", "vec_tanh": "glibc", "vec_erf": "glibc", "vec_gelu": "glibc"}
"""The math of Inductor's scalar C++ (no vector ISA): ``std::exp/tanh/erf`` of glibc
(``expf``, fdlibm's ``tanhf``/``erff``; glibc 2.36 measured bit for bit), gelu as
``(0.5x)(1 + erff(x/sqrt 2))`` (``approximate="tanh"``: the predictor's decomposition)."""

CAPABILITIES = ("AVX512", "AVX2", "DEFAULT")
"""ATen CPU dispatch levels :class:`TorchCpuEager` models (measured)."""
ONEDNN_ISAS = ("avx512_core", "avx2", "other")
"""oneDNN dispatch classes :class:`TorchCpuEager` distinguishes (``other``: not modelled)."""
GLIBC_MODELLED = ((2, 27), (2, 40))
"""glibc versions whose ``expf``/``tanhf``/``erff``/``expm1f``/``log1pf`` the
``"glibc"`` models of :mod:`numlab.kernels.libm` reproduce (ported from glibc 2.36,
checked against it; glibc 2.41 replaced ``tanhf``/``erff`` by correctly rounded
versions)."""


def detect_glibc() -> tuple[int, int] | None:
    """The running C library's glibc version ``(major, minor)``, or None (not glibc)."""
    lib, ver = platform.libc_ver()
    if lib != "glibc":
        return None
    m = re.match(r"(\d+)\.(\d+)", ver)
    return (int(m.group(1)), int(m.group(2))) if m else None


def glibc_math_unmodelled(version="detect") -> str | None:
    """Why the ``"glibc"`` math models do not apply to this process, or None when
    they do (``version``: a ``(major, minor)`` tuple, None for "not glibc", or
    ``"detect"``)."""
    v = detect_glibc() if version == "detect" else version
    lo, hi = GLIBC_MODELLED
    if v is None:
        return "the C library is not glibc; numlab models glibc's libm only"
    if not lo <= tuple(v) <= hi:
        return (f"glibc {v[0]}.{v[1]}'s libm is not modelled (numlab models glibc "
                f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]})")
    return None


DEFAULT_NOT_MODELLED = ("exp", "tanh", "erf", "silu", "log")
"""Eager ops not modelled under ATen's ``DEFAULT`` capability (measured 40-99% with the
vector-build models, 87-99% with glibc's), except exp/tanh/erf of bf16/fp16 tensors: glibc's
``expf``/``tanhf``/``erff`` on every element, bit for bit on every 16-bit input.  ATen's own gelu is modelled there in both
approximations: the scalar formulas without FMA, glibc ``erff``/``tanhf``."""
_SOFTMAX_LANES = {"AVX512": 16, "AVX2": 8, "DEFAULT": 8}
_LOOP_STEP = {"AVX512": 32, "AVX2": 16, "DEFAULT": 16}  # two Vectorized<float> (generic: 32 bytes)
_FLOATS = ("fp32", "bf16", "fp16")
_ONEDNN_GELU = {"avx512_core": "onednn", "avx2": "onednn_avx2"}
# oneDNN's ONEDNN_MAX_CPU_ISA values in increasing order (oneDNN's dnnl_cpu_isa_t names)
_ONEDNN_ORDER = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
                 "AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16", "AVX10_1_512_AMX",
                 "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16", "ALL", "DEFAULT")
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_fp16",
             "amx_bf16", "amx_fp16", "amx_tile")
"""The /proc/cpuinfo flags :func:`describe_machine` reports (those that change a kernel)."""


def torch_cpu_eager(**overrides) -> TorchCpuEager:
    """The measured eager preset for the running process (fields may be overridden).

    Detected unless given: ``capability`` (ATen's dispatch level, which
    ``ATEN_CPU_CAPABILITY`` lowers), ``softmax_lanes`` from it (16 AVX512, 8 AVX2),
    ``onednn_isa`` (:func:`detect_onednn_isa`; oneDNN ignores
    ``ATEN_CPU_CAPABILITY``), ``onednn_gelu`` (mkldnn available and enabled),
    ``onednn_dtypes`` (:func:`detect_onednn_dtypes`), ``unary_algo`` (``"mkl_vml"`` in a
    build with MKL), ``elementwise_step`` (32 AVX512, 16 AVX2),
    ``fma_alpha`` (False under ``DEFAULT``: the scalar build has no FMA), ``vec_exp``
    (``"glibc"`` under ``DEFAULT``: the generic ``Vectorized<float>::exp()`` calls
    ``std::exp`` on every element).
    Without torch the fields keep their defaults (the AVX-512 machine's).
    """
    try:
        torch = import_torch()
    except ImportError:
        torch = None
    if torch is not None:
        overrides.setdefault("capability", detect_cpu_capability())
        if "onednn_isa" not in overrides:
            overrides["onednn_isa"] = detect_onednn_isa()
        if "onednn_gelu" not in overrides:
            mk = torch.backends.mkldnn
            overrides["onednn_gelu"] = bool(mk.is_available() and mk.enabled)
        overrides.setdefault("onednn_dtypes", detect_onednn_dtypes())
        overrides.setdefault("unary_algo", "mkl_vml" if torch.backends.mkl.is_available() else "vec")
    cap = overrides.get("capability", TorchCpuEager.capability)
    if "elementwise_step" not in overrides and cap in _LOOP_STEP:
        overrides["elementwise_step"] = _LOOP_STEP[cap]
    if "softmax_lanes" not in overrides and cap in _SOFTMAX_LANES:
        overrides["softmax_lanes"] = _SOFTMAX_LANES[cap]
    if "fma_alpha" not in overrides and cap == "DEFAULT":
        overrides["fma_alpha"] = False
    if "vec_exp" not in overrides and cap == "DEFAULT":
        # the generic Vectorized<float>::exp() maps std::exp: glibc expf (sigmoid measured 100%)
        overrides["vec_exp"] = "glibc"
    return TorchCpuEager(**overrides)


def inductor_cpu(emulated_casts: bool = False, **overrides) -> InductorCpu:
    """The measured Inductor preset for the running process: ``vec_isa`` and ``lanes``
    from Inductor's ``pick_vec_isa()`` and ``min_chunk_size`` from
    ``torch._inductor.config.cpp`` (when torch is importable and they are not given)."""
    try:
        import_torch()
        have_torch = True
    except ImportError:
        have_torch = False
    if have_torch:
        if "lanes" not in overrides or "vec_isa" not in overrides:
            isa, lanes = detect_inductor_isa()
            overrides.setdefault("vec_isa", isa)
            overrides.setdefault("lanes", lanes)
        if overrides.get("vec_isa") == "none":  # scalar C++: libm calls, not Vectorized<float>
            for k, v in _SCALAR_MATH.items():
                overrides.setdefault(k, v)
        if "min_chunk_size" not in overrides:
            from torch._inductor import config as icfg  # torch is optional: imported when called

            overrides["min_chunk_size"] = int(icfg.cpp.min_chunk_size)
    return InductorCpu(emulated_casts=emulated_casts, **overrides)


def detect_cpu_capability() -> str:
    """``torch.backends.cpu.get_cpu_capability()`` (e.g. ``"AVX512"``)."""
    torch = import_torch()

    return str(torch.backends.cpu.get_cpu_capability())


def detect_inductor_isa() -> tuple[str, int]:
    """Inductor's vector ISA and its fp32 lanes, the way Inductor picks them
    (``pick_vec_isa``): e.g. ``("avx512", 16)``, ``("avx2", 8)``; ``("none", 1)``
    without a vector ISA (``ATEN_CPU_CAPABILITY=default``)."""
    torch = import_torch()
    from torch._inductor import cpu_vec_isa  # torch is optional: imported when called

    isa = cpu_vec_isa.pick_vec_isa()
    if not isa:  # no vector ISA: scalar code
        return "none", 1
    return str(isa).split()[0], int(isa.nelements(torch.float32))


def detect_inductor_lanes() -> int:
    """fp32 lanes of the vector ISA Inductor picks (1: none), :func:`detect_inductor_isa`."""
    return detect_inductor_isa()[1]


def _cpu_flags() -> set | None:
    """The CPU's flags from /proc/cpuinfo (Linux), None where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _onednn_limit() -> str | None:
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        v = os.environ.get(var)
        if v:
            return v.strip().upper()
    return None


def detect_onednn_isa(flags: set | None = None, limit: str | None = None) -> str:
    """The ISA class oneDNN dispatches in this process: ``"avx512_core"``, ``"avx2"``
    or ``"other"`` -- oneDNN's own rule (it ignores ``ATEN_CPU_CAPABILITY``): the best
    ISA the CPU has (``avx512_core`` = avx512f+bw+vl+dq; ``avx2`` = avx2+fma), capped by
    ``ONEDNN_MAX_CPU_ISA`` (or ``DNNL_MAX_CPU_ISA``).  ``flags``/``limit`` default to
    /proc/cpuinfo and the environment; without cpuinfo the answer is ``"other"``
    (unknown, so not modelled).  :func:`measure_onednn_isa` checks it by running oneDNN.
    """
    flags = _cpu_flags() if flags is None else set(flags)
    limit = _onednn_limit() if limit is None else limit.upper()
    if not flags:
        return "other"
    rank = _onednn_rank(limit)
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags and rank >= _ONEDNN_ORDER.index("AVX512_CORE"):
        return "avx512_core"
    if {"avx2", "fma"} <= flags and rank >= _ONEDNN_ORDER.index("AVX2"):
        return "avx2"
    return "other"


def _onednn_rank(limit: str | None) -> int:
    return _ONEDNN_ORDER.index(limit) if limit in _ONEDNN_ORDER else len(_ONEDNN_ORDER)


def detect_onednn_dtypes(flags: set | None = None, limit: str | None = None,
                         mkldnn: bool | None = None) -> tuple:
    """The dtypes whose eager ``F.gelu`` ATen hands to oneDNN in this process (ATen's
    ``use_mkldnn``): fp32 whenever mkldnn is enabled; bf16 where oneDNN runs at least
    ``avx512_core`` (``mkldnn_bf16_device_check``); fp16 where it runs
    ``avx512_core_fp16`` (``mkldnn_fp16_device_check``: the CPU's avx512_fp16 and
    ``ONEDNN_MAX_CPU_ISA`` at least ``AVX512_CORE_FP16``; measured: under
    ``AVX512_CORE_BF16`` fp16 gelu is ATen's kernel bit for bit).  ``mkldnn`` None:
    ``torch.backends.mkldnn`` when torch is importable, else True."""
    flags = _cpu_flags() if flags is None else set(flags)
    limit = _onednn_limit() if limit is None else limit.upper()
    if mkldnn is None:
        try:
            mk = import_torch().backends.mkldnn
            mkldnn = bool(mk.is_available() and mk.enabled)
        except ImportError:
            mkldnn = True
    if not mkldnn:
        return ()
    out = ["fp32"]
    if detect_onednn_isa(flags, limit) == "avx512_core":
        out.append("bf16")
        if "avx512_fp16" in (flags or set()) and _onednn_rank(limit) >= _ONEDNN_ORDER.index("AVX512_CORE_FP16"):
            out.append("fp16")
    return tuple(out)


def detect_blas() -> dict:
    """The BLAS torch was built with and what selects its kernels: ``{"library":
    "mkl"|"openblas"|..., "detail": str}`` -- MKL's version and its
    ``MKL_ENABLE_INSTRUCTIONS``/``MKL_CBWR`` settings, or OpenBLAS's
    ``OPENBLAS_CORETYPE`` and threads (from ``torch.__config__.show()``)."""
    torch = import_torch()
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=([a-z0-9_]+)", cfg)
    lib = m.group(1) if m else "unknown"
    if lib == "mkl" or "Math Kernel Library" in cfg:
        v = re.search(r"Math Kernel Library Version ([0-9.]+)", cfg)
        env = {k: os.environ[k] for k in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR") if os.environ.get(k)}
        detail = f"MKL {v.group(1) if v else '?'}" + "".join(f", {k}={v}" for k, v in env.items())
        return {"library": "mkl", "detail": detail, "coretype": ""}
    if lib == "open":
        lib = "openblas"
    core = os.environ.get("OPENBLAS_CORETYPE", "")
    th = os.environ.get("OPENBLAS_NUM_THREADS", "")
    detail = f"{lib}, OPENBLAS_CORETYPE={core or '(CPU default)'}" + (f", {th} threads" if th else "")
    return {"library": lib, "detail": detail, "coretype": core}


def measure_onednn_isa(env: dict | None = None, timeout: float = 120) -> tuple[str, str]:
    """Run ``F.gelu`` in a subprocess with ``ONEDNN_VERBOSE=1`` and read the ISA oneDNN's
    eltwise kernel reports (``jit:<isa>``): returns ``(class, raw)``, the class as
    :func:`detect_onednn_isa` names it.  ``env``: extra environment variables."""
    code = ("import torch, torch.nn.functional as F\n"
            "F.gelu(torch.linspace(-3, 3, 64).reshape(4, 16))\n")
    e = dict(os.environ, ONEDNN_VERBOSE="1", **(env or {}))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=e)
    m = re.search(r"eltwise,(?:jit|brg)[^:,]*:([a-z0-9_]+)", r.stdout)
    if r.returncode != 0 or m is None:
        raise RuntimeError(f"oneDNN did not report an eltwise ISA (rc={r.returncode}): "
                           f"{(r.stdout + r.stderr)[-500:]}")
    raw = m.group(1)
    cls = "avx512_core" if raw.startswith(("avx512", "avx10")) else ("avx2" if raw.startswith("avx2") else "other")
    return cls, raw


@dataclass(frozen=True)
class Machine:
    """What decides PyTorch's CPU bits in this process (:func:`describe_machine`)."""

    cpu: str
    flags: tuple
    torch_version: str
    threads: int
    capability: str
    inductor_isa: str
    inductor_lanes: int
    onednn_isa: str
    onednn_limit: str
    mkldnn: bool
    onednn_dtypes: tuple = ()
    blas: str = ""
    vml: str = ""
    aten_limit: str = ""

    def header(self) -> str:
        """Three lines: the machine; what torch dispatches on it (ATen, Inductor,
        oneDNN per dtype); the BLAS and the unary math library."""
        lim = f" (ATEN_CPU_CAPABILITY={self.aten_limit})" if self.aten_limit else ""
        if self.mkldnn:
            per = ", ".join(f"{d} {'oneDNN' if d in self.onednn_dtypes else 'ATen'}"
                            for d in ("fp32", "bf16", "fp16"))
            dnn = f"{self.onednn_isa} (F.gelu: {per})"
        else:
            dnn = "off"
        return (f"machine: {self.cpu} | flags {' '.join(self.flags) or '(none of ' + ','.join(CPU_FLAGS) + ')'}\n"
                f"torch {self.torch_version}, {self.threads} threads | ATen capability {self.capability}{lim} | "
                f"Inductor {self.inductor_isa} ({self.inductor_lanes} fp32 lanes) | oneDNN {dnn}"
                f"{' (ONEDNN_MAX_CPU_ISA=' + self.onednn_limit + ')' if self.onednn_limit else ''}\n"
                f"BLAS {self.blas or 'unknown'} | fp32 unary exp/tanh/erf: {self.vml or 'unknown'}")

    def __str__(self) -> str:
        return self.header()


def describe_machine() -> Machine:
    """The CPU model, the flags that change a kernel (:data:`CPU_FLAGS`), torch's
    version and threads, ATen's capability (and ``ATEN_CPU_CAPABILITY``), Inductor's
    vector ISA and lanes, oneDNN's ISA and the dtypes it takes (``ONEDNN_MAX_CPU_ISA``
    honoured), the BLAS (:func:`detect_blas`) and the fp32 unary math library
    (detected as the presets do).  Needs torch."""
    torch = import_torch()
    flags = _cpu_flags() or set()
    isa, lanes = detect_inductor_isa()
    mk = torch.backends.mkldnn
    vml = "MKL VML (not modelled)" if torch.backends.mkl.is_available() else "Vectorized<float> (SLEEF)"
    return Machine(cpu=_cpu_model(), flags=tuple(f for f in CPU_FLAGS if f in flags),
                   torch_version=str(torch.__version__), threads=int(torch.get_num_threads()),
                   capability=detect_cpu_capability(), inductor_isa=isa, inductor_lanes=lanes,
                   onednn_isa=detect_onednn_isa(), onednn_limit=_onednn_limit() or "",
                   mkldnn=bool(mk.is_available() and mk.enabled), onednn_dtypes=detect_onednn_dtypes(),
                   blas=detect_blas()["detail"], vml=vml,
                   aten_limit=os.environ.get("ATEN_CPU_CAPABILITY", ""))


def measure_aten_sum_lanes(candidates=(4, 8, 16), seed: int = 0) -> int:
    """Find the lane count of ATen's sum kernel by running it (the capability
    string says AVX512 but the kernel runs its AVX2 build: measure, don't guess).

    Sums 8 rows of cancelling fp32 data of length 100 and returns the candidate
    whose cascade order reproduces every row; ValueError if none does.
    """
    torch = import_torch()
    rng = np.random.default_rng(seed)
    x = cancelling_rows(rng, (8, 100), "fp32")
    got = torch.from_numpy(x).sum(-1).numpy()
    for v in candidates:
        if np.array_equal(reduce(x, "sum", -1, order=AtenCascade(v), acc="fp32"), got):
            return int(v)
    raise ValueError(f"no lane count in {candidates} reproduces ATen's sum on this machine")
