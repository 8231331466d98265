"""Presets of how PyTorch computes on this CPU: ``torch_cpu_eager`` and ``inductor_cpu``.

Every field below was measured against torch 2.13.0 (CPU build) on the
project machine (2 cores, AVX-512 incl. avx512_fp16/avx512_bf16,
``torch.backends.cpu.get_cpu_capability() == "AVX512"``, 2 threads), by
constructing inputs on which the candidate rules differ and counting
bitwise-equal elements (the tests in
``tests/test_torch_faithfulness.py`` re-check them on every run).

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
  :class:`numlab.kernels.cpu_orders.AtenCascade`) with ``Vectorized<float>`` of **8** lanes: the
  sum kernel runs its AVX2 build although the capability is AVX512
  (measured: the V=8 model matches 100% of rows, V=16 about 30%).
  ``mean`` of a 16-bit tensor is ``fl16(sum32(fp32(x)) / n)`` where the sum
  runs the fp32 path (the input is converted first); fp32 ``mean`` is
  ``fl32(sum / n)`` (a true division).  ``amax``/``amin``: exact.
* Transcendental functions: vectorised code calls SLEEF's ``expf_u10``
  (sigmoid, softmax, erf's exp; ``numlab.kernels.exp(algo="sleef_u10")``,
  bit for bit) with libm in the scalar tails; the unary
  ``exp``/``tanh`` kernels are not SLEEF (measured: 90%/99% agreement) but
  ATen's VML path (MKL VML in this build, per ATen's sources), modelled as
  correctly rounded fp32 (98.9% agreement: the residual in the faithfulness
  table); ``F.gelu`` runs oneDNN's minimax gelu_erf (modelled bit for bit);
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
* ``emulate_precision_casts=True``: every value whose dtype is fp16/bf16 is
  rounded to it where eager would store it; scalars stay fp32.
* Reductions in the order :class:`numlab.kernels.cpu_orders.InductorLanes`;
  ``Vectorized<float>`` math: ``exp``/``tanh`` by SLEEF (``algo="sleef_u10"``,
  ``"sleef"``), ``erf`` and gelu by ATen's A&S formula (``"aten_vec"``); reduction results
  are stored (rounded to the node dtype) even inside a fused kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..fusion import FusionOptions
from ..kernels import KernelSpec
from ..kernels.algorithms import ERF_ALGOS, EXP_ALGOS, GELU_ALGOS, TANH_ALGOS, parse_algo
from ..kernels.cpu_orders import AtenCascade, InductorLanes
from ..kernels.reduce import reduce
from .bridge import import_torch
from .data import cancelling_rows

__all__ = [
    "TorchCpuEager",
    "InductorCpu",
    "torch_cpu_eager",
    "inductor_cpu",
    "detect_inductor_lanes",
    "detect_cpu_capability",
    "measure_aten_sum_lanes",
    "SCALAR_RULES",
    "CAPABILITIES",
]

SCALAR_RULES = (
    ("add", "storage"), ("sub", "storage"), ("rsub", "storage"), ("where", "storage"),
    ("compare", "storage"), ("mul", "opmath"), ("div", "opmath"), ("alpha", "storage"),
)
"""How eager ATen converts a Python scalar operand, per op: ``storage`` =
rounded to the tensor dtype (through fp32), ``opmath`` = kept in fp32."""


@dataclass(frozen=True)
class TorchCpuEager:
    """How ATen's CPU kernels compute (module docstring; all measured).

    Attributes
    ----------
    sum_lanes : int
        fp32 lanes of the ``cascade_sum`` kernel's ``Vectorized<float>`` (8).
    elementwise_step : int
        Elements per vectorised-loop step of elementwise kernels (32, measured
        for fp16 ``add`` with alpha and fp32 ``sigmoid``); the last ``len mod
        32`` elements of each parallel chunk run the scalar loop (libm
        ``expf``/``erff`` instead of SLEEF, two roundings in ``add(alpha)``).
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
        ``F.gelu(x)`` (erf form) runs oneDNN's minimax kernel
        (``numlab.kernels.gelu(algo="onednn")``; measured True when
        ``torch.backends.mkldnn`` is enabled, the default); False models
        ATen's own kernel (``algo="aten_vec"``, ``"aten_scalar"`` in the
        scalar tail), what runs with mkldnn off.
    vec_exp : str
        ``Vectorized<float>::exp()`` of the fused kernels (sigmoid, silu,
        softmax): ``"sleef_u10"`` (SLEEF ``expf_u10``, measured bit for bit).
    unary_algo : str
        The unary ``exp``/``tanh``/``erf`` kernels (ATen's VML path, MKL VML
        in this build): ``"exact"``, correctly rounded fp32 (measured 90-99%
        agreement; the residual is MKL's).
    tail_algo : str
        ``exp``/``tanh``/``erf`` of the scalar tail loops (libm ``expf``,
        ``tanhf``, ``erff``): ``"exact"`` (correctly rounded model).
    capability : {"AVX512", "AVX2"}
        ATen's CPU dispatch level the preset describes
        (``torch.backends.cpu.get_cpu_capability()``; :func:`torch_cpu_eager`
        detects it).  The sum and layer-norm kernels run 8 lanes under both
        (measured); ``DEFAULT`` (no vector build) is not modelled.
    """

    name: str = "torch_cpu_eager"
    sum_lanes: int = 8
    elementwise_step: int = 32
    softmax_lanes: int = 16
    layernorm_lanes: int = 8
    grain_size: int = 32768
    threads: int = 0
    scalar_rules: tuple = SCALAR_RULES
    fma_alpha: bool = True
    onednn_gelu: bool = True
    capability: str = "AVX512"
    vec_exp: str = "sleef_u10"
    unary_algo: str = "exact"
    tail_algo: str = "exact"

    def __post_init__(self):
        if self.capability not in CAPABILITIES:
            raise ValueError(f"capability={self.capability!r} is not modelled; choose one of {CAPABILITIES}")
        for k in ("sum_lanes", "softmax_lanes", "layernorm_lanes", "elementwise_step"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                raise ValueError(f"{k}={v!r} is not valid; choose a power of two >= 1 (measured: "
                                 f"{getattr(TorchCpuEager, k)})")
        if not isinstance(self.grain_size, int) or self.grain_size < 1:
            raise ValueError(f"grain_size={self.grain_size!r} is not valid; choose an int >= 1")
        if not isinstance(self.threads, int) or self.threads < 0:
            raise ValueError(f"threads={self.threads!r} is not valid; choose an int >= 0 (0 = torch's)")
        parse_algo(self.vec_exp, EXP_ALGOS, "vec_exp")
        for k in ("unary_algo", "tail_algo"):  # one name for exp, tanh and erf alike
            v = getattr(self, k)
            if v not in set(EXP_ALGOS) & set(TANH_ALGOS) & set(ERF_ALGOS):
                raise ValueError(f"{k}={v!r} is not valid; valid choices: ['exact']")
        rules = dict(self.scalar_rules)
        if set(rules) != set(dict(SCALAR_RULES)) or not set(rules.values()) <= {"storage", "opmath"}:
            raise ValueError(f"scalar_rules={self.scalar_rules!r} is not valid; give each of "
                             f"{sorted(dict(SCALAR_RULES))} one of ('storage', 'opmath')")

    def scalar_rule(self, op: str) -> str:
        return dict(self.scalar_rules)[op]

    def sum_order(self, storage: str = "fp32") -> AtenCascade:
        """ATen's ``sum`` order for a tensor of dtype ``storage`` (16-bit loads widen)."""
        return AtenCascade(self.sum_lanes, storage in _LOW)

    @property
    def gelu_algo(self) -> str:
        """``F.gelu`` (``approximate="none"``): ``"onednn"`` or ATen's ``"aten_vec"``;
        ``approximate="tanh"`` always runs ATen's kernel (``"aten_vec"``)."""
        return "onednn" if self.onednn_gelu else "aten_vec"

    def algorithms(self) -> dict:
        """The math routines of the vectorised kernels, as ``numlab.kernels`` ``algo=`` names
        (``gelu``: ``approximate="none"``; ``gelu_tanh``: ``approximate="tanh"``)."""
        return {"exp": self.vec_exp, "tanh": "sleef", "erf": "aten_vec", "gelu": self.gelu_algo,
                "gelu_tanh": "aten_vec"}

    def kernel_spec(self, storage: str = "fp32") -> KernelSpec:
        """This preset as a :class:`numlab.kernels.KernelSpec` for tensors of ``storage``:
        fp32 inside (``fp32_internal``), scalars kept fp32 (``muls``), no FMA,
        ``reduce_order=AtenCascade(sum_lanes, widen)`` and the algorithms of
        :meth:`algorithms` (for the KernelSpec fields that exist).

        Not expressible as KernelSpec fields (preset fields, used by
        :func:`numlab.torch.predict`): the per-op scalar conversion rule
        (``scalar_rules``), the FMA of ``add(alpha)`` only (``fma_alpha``), the
        scalar tail loops (``elementwise_step``, ``tail_algo``), the unary VML
        kernels (``unary_algo``), softmax's and layer norm's own loops
        (``softmax_lanes``, ``layernorm_lanes``: RowwiseMoments).
        """
        return KernelSpec(name="torch_cpu_eager", promotion="fp32_internal", scalar_mul="muls",
                          fma=False, reduce_order=self.sum_order(storage),
                          **_spec_algorithms(self.algorithms()))


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
    emulate_precision_casts : bool
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
    """

    name: str = "inductor_cpu"
    lanes: int = 16
    emulate_precision_casts: bool = False
    threads: int = 0
    min_chunk_size: int = 512

    vec_exp: str = "sleef_u10"
    vec_tanh: str = "sleef"
    vec_erf: str = "aten_vec"
    vec_gelu: str = "aten_vec"

    def __post_init__(self):
        parse_algo(self.vec_exp, EXP_ALGOS, "vec_exp")
        parse_algo(self.vec_tanh, TANH_ALGOS, "vec_tanh")
        parse_algo(self.vec_erf, ERF_ALGOS, "vec_erf")
        if parse_algo(self.vec_gelu, GELU_ALGOS, "vec_gelu") == "onednn":
            raise ValueError("vec_gelu='onednn' is not valid: Inductor's gelu is ATen's formula "
                             f"(oneDNN serves only eager F.gelu); valid choices: "
                             f"{[a for a in GELU_ALGOS if a != 'onednn']}")

    def reduce_order(self, storage: str = "fp32", threads: int = 1, n_vec: int | None = None) -> InductorLanes:
        """Inductor's row-reduction order: ``InductorLanes(lanes, n_vec, threads)`` with
        ``n_vec`` 2 for 16-bit ``storage`` (two fp32 vectors per load), else 1."""
        if n_vec is None:
            n_vec = 2 if storage in _LOW else 1
        return InductorLanes(self.lanes, n_vec, max(int(threads), 1), min_chunk=self.min_chunk_size)

    def algorithms(self) -> dict:
        """``Vectorized<float>`` math of the generated code, as ``numlab.kernels`` ``algo=`` names."""
        return {"exp": self.vec_exp, "tanh": self.vec_tanh, "erf": self.vec_erf, "gelu": self.vec_gelu,
                "gelu_tanh": self.vec_gelu}

    def kernel_spec(self, storage: str = "fp32", threads: int | None = None) -> KernelSpec:
        """This preset as a :class:`numlab.kernels.KernelSpec`: fp32 inside, scalars fp32,
        no FMA (``-ffp-contract=off``), ``reduce_order=InductorLanes(lanes, n_vec,
        threads)`` (``n_vec`` 2 for 16-bit ``storage``) and the algorithms of
        :meth:`algorithms` (for the KernelSpec fields that exist).  Not a KernelSpec
        field: ``emulate_precision_casts`` (a rounding of every 16-bit value, which
        :func:`numlab.torch.predict` applies), rsqrt as ``1/sqrt`` (two roundings).
        ``threads`` None: the preset's ``threads``, 1 when that is 0 (the spec does not
        ask torch; pass ``torch.get_num_threads()`` to model a threaded run)."""
        if threads is None:
            threads = self.threads or 1
        return KernelSpec(name="inductor_cpu", promotion="fp32_internal", scalar_mul="muls",
                          fma=False, reduce_order=self.reduce_order(storage, threads),
                          **_spec_algorithms(self.algorithms()))

    def fusion_options(self):
        return FusionOptions.inductor()


_LOW = ("fp16", "bf16")
_SPEC_FIELDS = {f.name for f in fields(KernelSpec)}


def _spec_algorithms(algos: dict) -> dict:
    """The ``{exp, tanh, erf, gelu, gelu_tanh}`` algorithm fields the installed KernelSpec has
    (``gelu``: the algorithm of ``approximate="none"``, ``gelu_tanh``: of ``"tanh"``).

    Transitional: KernelSpec gains ``tanh``/``erf``/``gelu`` fields (and accepts
    the PyTorch ``exp`` algorithms) together; until then a spec carries only the
    order, and :func:`numlab.torch.predict` reads the algorithms from the preset.
    """
    if "tanh" not in _SPEC_FIELDS:
        return {}
    return {k: v for k, v in algos.items() if k in _SPEC_FIELDS}


CAPABILITIES = ("AVX512", "AVX2")
"""ATen CPU dispatch levels :class:`TorchCpuEager` models (measured)."""
_SOFTMAX_LANES = {"AVX512": 16, "AVX2": 8}


def torch_cpu_eager(**overrides) -> TorchCpuEager:
    """The measured eager preset for the running machine (fields may be overridden).

    ``capability`` is detected from torch (when importable) and
    ``softmax_lanes`` follows it (16 for AVX512, 8 for AVX2), so the preset
    stays right under ``ATEN_CPU_CAPABILITY=avx2`` or on an AVX2-only CPU.
    """
    if "capability" not in overrides:
        try:
            overrides["capability"] = detect_cpu_capability()
        except ImportError:
            pass
    cap = overrides.get("capability", TorchCpuEager.capability)
    if "softmax_lanes" not in overrides and cap in _SOFTMAX_LANES:
        overrides["softmax_lanes"] = _SOFTMAX_LANES[cap]
    return TorchCpuEager(**overrides)


def inductor_cpu(emulate_precision_casts: bool = False, **overrides) -> InductorCpu:
    """The measured Inductor preset; ``lanes`` detected from torch when torch is importable."""
    if "lanes" not in overrides:
        try:
            overrides["lanes"] = detect_inductor_lanes()
        except ImportError:
            pass
    return InductorCpu(emulate_precision_casts=emulate_precision_casts, **overrides)


def detect_cpu_capability() -> str:
    """``torch.backends.cpu.get_cpu_capability()`` (e.g. ``"AVX512"``)."""
    torch = import_torch()

    return str(torch.backends.cpu.get_cpu_capability())


def detect_inductor_lanes() -> int:
    """fp32 lanes of the vector ISA Inductor picks, the way Inductor does (``pick_vec_isa``)."""
    torch = import_torch()
    from torch._inductor import cpu_vec_isa  # torch is optional: imported when called

    isa = cpu_vec_isa.pick_vec_isa()
    if not isa:  # no vector ISA: scalar code
        return 1
    return int(isa.nelements(torch.float32))


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
