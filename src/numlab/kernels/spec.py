"""``KernelSpec``: every knob of the four sources of difference in one frozen dataclass.

Three presets are data: :meth:`KernelSpec.handwritten` (the eager library),
:meth:`KernelSpec.codegen` (a generic code generator's fused kernels, named
after no real compiler) and :meth:`KernelSpec.inductor_cpu` (the kernel
conventions of PyTorch Inductor's generated C++ on CPU).  The methods
``reduce``, ``mul_scalar``, ``unary``, ``div``, ``multiply_add`` and ``matmul``
apply the spec to a storage format ``S``: each is a thin call into the engine
(:mod:`numlab.kernels.engine`), the same code :func:`numlab.execute.run`
computes every node with, so a method's result is bit for bit an eager
one-node run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np

from ..formats import FP32, Format, get_format
from ..rounding import check_rounding
from . import algorithms as _alg
from . import engine as _E
from . import grammar as _grammar
from ._common import check_choice
from .hardware import Hardware, kernel_tile
from .orders import Blocked, InductorLanes, Lanes, Order, Pairwise, Sequential, as_order
from .reduction import OPS, VARIANCE_ALGORITHMS
from .scalar import SCALAR_MUL_CHOICES
from .tiled_matmul import MATMUL_ALGOS

__all__ = ["KernelSpec", "PROMOTIONS", "UNARY_OPS", "SILU_ALGOS", "SOFTMAX_ALGOS", "SCALAR_FORM_OPS", "LAYER_NORM_ALGOS", "DEFAULT_FUSED_LIVE_BUFFERS", "HANDWRITTEN", "CODEGEN",
           "INDUCTOR_CPU", "mode_specs"]

PROMOTIONS = ("native", "fp32_internal", "accumulator_only")
UNARY_OPS = ("rsqrt", "reciprocal", "sqrt", "exp", "log", "log1p", "tanh", "erf", "sigmoid", "gelu")
"""The one-input operators :meth:`KernelSpec.unary` computes: those whose engine
kernel (:mod:`numlab.kernels.engine`) is the ``Ctx`` function of the same name.
The operator registry sits above this layer, so the tuple is written here;
``tests/test_ops.py`` checks it equals that query of ``numlab.ops.CATALOGUE``."""
SCALAR_FORM_OPS = ("add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar", "rdiv_scalar",
                   "add_alpha")
"""The operators with a scalar operand (``KernelSpec.storage_scalars``)."""
SILU_ALGOS = ("sigmoid", "divide")
"""``KernelSpec.silu``: ``x * sigmoid(x)`` or ``x / (1 + exp(-x))`` (ATen's and Inductor's)."""
SOFTMAX_ALGOS = ("divide", "reciprocal")
"""``KernelSpec.softmax``: ``e / sum`` or ``e * (1 / sum)`` (ATen's ``_vec_softmax_lastdim``)."""
LAYER_NORM_ALGOS = ("generic", "aten")
"""``KernelSpec.layer_norm``: the ``variance`` knob's moments, or ATen's LayerNorm kernel
(``RowwiseMoments`` over ``moments_lanes`` lanes, its FMA forms)."""
KERNEL_ROUNDINGS = ("rne", "rtz", "up", "down", "odd")
"""Rounding modes of ``scalar_rounding`` and ``vector_rounding``."""
DEFAULT_FUSED_LIVE_BUFFERS = 4
"""Live buffers assumed for a fused block when the plan does not say (in, out, two temporaries)."""


def _storage_bytes(fmt: Format) -> int:
    return int(np.dtype(fmt.container).itemsize)


@dataclass(frozen=True)
class KernelSpec:
    """All kernel knobs (``docs/design.md``, "The four sources of difference").

    Parameters
    ----------
    name : str
        Label.
    promotion : {"native", "fp32_internal", "accumulator_only"}
        Source 1.  ``native``: every primitive rounds to S (accumulators too);
        ``fp32_internal``: promote at kernel entry, compute in fp32, round at
        exit; ``accumulator_only``: elementwise work rounds to S, reduction
        accumulators are ``acc``.  Inside a fused block computation is fp32
        whatever this says.
    acc : Format
        Accumulator of reductions and matmul (unless ``promotion="native"``).
    reduce_inner, reduce_outer : Order or str
        Source 3: order inside a tile and across tiles.
    reduce_order : Order, str or None
        If set, used as is for every reduction (overrides tiling).
    live_buffers : int or None
        Buffers on chip for the tile formula; None means "from the fusion
        plan" (``live_buffers=`` argument), falling back to
        :data:`DEFAULT_FUSED_LIVE_BUFFERS`.
    hardware : Hardware
    scalar_mul : {"muls", "broadcast"}
        Source 2, ``x * s`` instruction.
    scalar_rounding : str
        Rounding mode in which the scalar unit holds a scalar in fp32
        (``scalar_mul="muls"``).
    vector_rounding : str
        Rounding mode of a kernel's result written out (to S, or to fp32 in
        a fused block) and of the vector multiply of ``x * s``; a kernel's
        fp32 intermediates round to nearest even.
    fma : bool
        Source 2: ``a*b + c`` as one fused operation (one rounding).
    rsqrt, reciprocal, divide, exp : algorithm or str
        Source 4 (see :mod:`numlab.kernels.algorithms`).
    tanh, erf : str
        Source 4: ``"exact"`` (correctly rounded model) or a library's
        routine (tanh ``"sleef"``; erf ``"aten_vec"``, ATen's vectorised
        Abramowitz-Stegun form).
    gelu, gelu_tanh : str
        Source 4: the algorithm of ``gelu`` nodes with ``approximate="none"``
        (``gelu``: ``"exact"``, ``"onednn"``, ``"onednn_avx2"``, ``"aten_vec"``,
        ``"aten_scalar"``) and with ``approximate="tanh"`` (``gelu_tanh``:
        the same without the oneDNN ones, which model gelu's erf form only).  The node's ``approximate`` attribute
        chooses the formula; these fields choose how it is evaluated.
    variance : {"two_pass", "welford", "textbook"}
        Source 4, variance algorithm.
    log1p : str
        Source 4: ``"exact"`` (correctly rounded model), ``"sleef_u10"``
        (``Vectorized<float>::log1p``), ``"glibc"`` (``log1pf``).
    silu : {"sigmoid", "divide"}
        Source 4: ``x * sigmoid(x)``, or ``x / (1 + exp(-x))`` (ATen's and
        Inductor's CPU kernels: one division instead of a reciprocal and a product).
    softmax : {"divide", "reciprocal"}
        Source 4: softmax's last step, ``e / sum`` or ``e * (1/sum)`` (ATen's
        ``_vec_softmax_lastdim``).
    softmax_order : Order, str or None
        Source 3: the order of softmax's (and log_softmax's) sum; None: the
        reduction order.  ATen's softmax kernel sums one lane vector
        (``inductor_lanes(16,1,1,false,false,16)`` under AVX512), not its
        ``sum`` kernel's cascade.
    reduce_order_low : Order, str or None
        Source 3: the reduction order of a kernel whose S has 16 bits or fewer
        (None: ``reduce_order``): CPU kernels load a 16-bit vector into two fp32
        vectors (``aten_cascade(8,widen)``, ``inductor_lanes(16,2)``).
    layer_norm : {"generic", "aten"}
        Source 4: layer norm's moments and formula.  ``generic``: the
        ``variance`` knob, ``rsqrt``, ``y*gamma + beta``; ``aten``: ATen's
        LayerNorm kernel (``RowwiseMoments`` Welford chunks over
        ``moments_lanes`` lanes with FMA where ``fma`` is set, ``rstd`` by
        ``rsqrt`` of ``var + eps``, ``fma((x - mean) * rstd, gamma, beta)``, and
        for a 16-bit S ``fma(fma(x, rstd, -rstd*mean), gamma, beta)``).
    moments_lanes : int
        Source 3: fp32 lanes of ``layer_norm="aten"``'s ``RowwiseMoments`` (8:
        ATen's kernel runs its AVX2 build, measured).
    storage_scalars : tuple of str or None
        Source 2: per operator, where a scalar operand is held.  None (default):
        every scalar as ``scalar_mul`` says.  A tuple of scalar-form operators
        (:data:`SCALAR_FORM_OPS`): those hold their scalar in S (as
        ``"broadcast"``), every other in fp32 (as ``"muls"``).  Eager ATen rounds
        an add's or subtract's scalar to the tensor dtype but keeps a multiply's
        or divide's in fp32: ``("add_scalar", "sub_scalar", "rsub_scalar",
        "add_alpha")``.
    loop_step : int
        Source 3: elements (of 4 bytes; twice as many for a 16-bit S) per step
        of a CPU elementwise kernel's vector loop (ATen's ``cpu_kernel_vec``:
        two vectors, 32 under AVX512); the last ``n mod step`` elements of each
        parallel chunk (``grain_size``, ``threads``) run the scalar loop, whose
        math is ``tail_math``.  Read by the operators of ``tail_ops``.  0: no
        scalar loop.
    tail_ops : tuple of str or None
        Source 3: the operators whose kernels have that scalar loop; None: those
        registered with ``scalar_tail=True`` (ATen's: sigmoid, gelu, softplus,
        mish).  Inductor's C++ falls back to a scalar loop for a masked tail
        (``("exp", "log1p")`` are the ones whose scalar code differs).
    alpha_step : int or None
        Source 3: elements (not of 4 bytes: of S itself) per vector step of a
        16-bit kernel that computes in the tensor's type -- ``add_alpha`` and the
        operators registered with ``scalar_tail="storage"`` (rsqrt): ATen's
        reduced-float kernels, 32 under AVX512 and AVX2, measured; their scalar
        tail computes in S (``fl(x + fl(alpha*y))``, ``fl(1 / fl(sqrt(x)))``).
        0: no vector loop (ATen's DEFAULT build: ``add_alpha`` in that form on every
        element); None: no scalar loop.
    tail_math : str
        Source 4: exp/tanh/erf/log1p (and gelu's formula) of the scalar loops:
        ``"glibc"`` (``expf``, ``tanhf``, ``erff``, ``log1pf``) or ``"exact"``.
    grain_size, threads : int
        Source 3: an elementwise kernel of at least ``grain_size`` elements is
        split in ``threads`` chunks (``at::parallel_for``), each with its own
        scalar tail.
    matmul_algo : {"sequential", "block_fma", "split_k"}
        Matmul algorithm (:func:`numlab.kernels.matmul` ``algo=``).
    k_tile : int
        Matmul K tile.
    mma : MatrixUnit, str or None
        The matrix unit matmuls run on (default None: no unit, the K-tiled
        ``matmul_algo`` with ``k_tile`` and ``acc``).  A
        :class:`~numlab.kernels.mma.MatrixUnit`, or a unit string
        (:func:`numlab.kernels.grammar.parse_unit`: ``"H100"``,
        ``"H100/fp8_e4m3/fp32(promote_every=128)"``, ``"custom(fma_size=8)"``).
        With a unit, every matmul of this spec -- an eager library call or a
        matmul inside a fused block -- rounds its operands to the unit's
        ``in_fmt`` (nearest even; a no-op when they already are), runs
        :func:`numlab.kernels.mma.mma` and rounds the unit's ``out_fmt``
        result to the kernel's format; ``matmul_algo``, ``k_tile``, ``acc``
        and ``fma`` then do not apply to matmuls.
    """

    name: str = "custom"
    promotion: str = "fp32_internal"
    acc: Format = FP32
    reduce_inner: object = "pairwise"
    reduce_outer: object = "sequential"
    reduce_order: object = None
    live_buffers: int | None = 2
    hardware: Hardware = field(default_factory=Hardware)
    scalar_mul: str = "muls"
    scalar_rounding: str = "rne"
    vector_rounding: str = "rne"
    fma: bool = False
    rsqrt: object = "exact"
    reciprocal: object = "exact"
    divide: object = "exact"
    exp: object = "exact"
    tanh: str = "exact"
    erf: str = "exact"
    gelu: str = "exact"
    gelu_tanh: str = "exact"
    variance: str = "two_pass"
    log1p: str = "exact"
    silu: str = "sigmoid"
    softmax: str = "divide"
    softmax_order: object = None
    reduce_order_low: object = None
    layer_norm: str = "generic"
    moments_lanes: int = 8
    storage_scalars: tuple | None = None
    loop_step: int = 0
    tail_ops: tuple | None = None
    alpha_step: int | None = None
    tail_math: str = "glibc"
    grain_size: int = 32768
    threads: int = 1
    matmul_algo: str = "block_fma"
    k_tile: int = 128
    mma: object = None

    def __post_init__(self):
        check_choice("promotion", self.promotion, PROMOTIONS)
        object.__setattr__(self, "acc", get_format(self.acc, "acc"))
        object.__setattr__(self, "reduce_inner", as_order(self.reduce_inner, "reduce_inner"))
        object.__setattr__(self, "reduce_outer", as_order(self.reduce_outer, "reduce_outer"))
        for knob in ("reduce_order", "softmax_order", "reduce_order_low"):
            if getattr(self, knob) is not None:
                object.__setattr__(self, knob, as_order(getattr(self, knob), knob))
        if self.live_buffers is not None and (
            not isinstance(self.live_buffers, int) or isinstance(self.live_buffers, bool) or self.live_buffers < 1
        ):
            raise ValueError(f"live_buffers={self.live_buffers!r} is not valid; it must be None or an int >= 1")
        if not isinstance(self.hardware, Hardware):
            raise TypeError(f"hardware must be a Hardware, got {type(self.hardware).__name__}")
        check_choice("scalar_mul", self.scalar_mul, SCALAR_MUL_CHOICES)
        for knob in ("scalar_rounding", "vector_rounding"):
            check_rounding(getattr(self, knob), knob)
            # stochastic rounding needs a random stream no kernel is given
            check_choice(knob, getattr(self, knob), KERNEL_ROUNDINGS)
        if not isinstance(self.fma, bool):
            raise TypeError(f"fma must be a bool, got {self.fma!r}")
        object.__setattr__(self, "rsqrt", _alg.parse_algo(self.rsqrt, _alg.RSQRT_ALGOS, "rsqrt"))
        object.__setattr__(self, "reciprocal", _alg.parse_algo(self.reciprocal, _alg.RECIP_ALGOS, "reciprocal"))
        object.__setattr__(self, "divide", _alg.parse_algo(self.divide, _alg.DIV_ALGOS, "divide"))
        object.__setattr__(self, "exp", _alg.parse_algo(self.exp, _alg.EXP_ALGOS, "exp"))
        check_choice("tanh", self.tanh, _alg.TANH_ALGOS)
        check_choice("erf", self.erf, _alg.ERF_ALGOS)
        check_choice("gelu", self.gelu, _alg.GELU_ALGOS)
        check_choice("gelu_tanh", self.gelu_tanh, tuple(a for a in _alg.GELU_ALGOS if not a.startswith("onednn")))
        check_choice("variance", self.variance, VARIANCE_ALGORITHMS)
        check_choice("log1p", self.log1p, _alg.LOG1P_ALGOS)
        check_choice("silu", self.silu, SILU_ALGOS)
        check_choice("softmax", self.softmax, SOFTMAX_ALGOS)
        check_choice("layer_norm", self.layer_norm, LAYER_NORM_ALGOS)
        if self.storage_scalars is not None:
            if isinstance(self.storage_scalars, str):
                object.__setattr__(self, "storage_scalars", tuple(
                    t.strip() for t in self.storage_scalars.replace("+", ",").split(",") if t.strip()))
            object.__setattr__(self, "storage_scalars", tuple(sorted(set(self.storage_scalars))))
            for op in self.storage_scalars:
                check_choice("storage_scalars", op, SCALAR_FORM_OPS)
        if self.tail_ops is not None:
            ops = self.tail_ops.replace("+", ",").split(",") if isinstance(self.tail_ops, str) else self.tail_ops
            object.__setattr__(self, "tail_ops", tuple(sorted({str(o).strip() for o in ops if str(o).strip()})))
        tails = sorted(set(_alg.EXP_ALGOS) & set(_alg.TANH_ALGOS) & set(_alg.ERF_ALGOS) & set(_alg.LOG1P_ALGOS))
        check_choice("tail_math", self.tail_math, tuple(tails))
        for knob, lo in (("moments_lanes", 1), ("loop_step", 0), ("grain_size", 1), ("threads", 1)):
            v = getattr(self, knob)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{knob}={v!r} is not valid; it must be an int >= {lo}")
        if self.alpha_step is not None and (not isinstance(self.alpha_step, int) or isinstance(self.alpha_step, bool)
                                            or self.alpha_step < 0):
            raise ValueError(f"alpha_step={self.alpha_step!r} is not valid; it must be None or an int >= 0")
        check_choice("matmul_algo", self.matmul_algo, MATMUL_ALGOS)
        if not isinstance(self.k_tile, int) or isinstance(self.k_tile, bool) or self.k_tile <= 0:
            raise ValueError(f"k_tile={self.k_tile!r} is not valid; it must be an int > 0")
        object.__setattr__(self, "mma", _grammar.parse_unit(self.mma, "mma"))

    # ---------------------------------------------------------------- presets
    @classmethod
    def handwritten(cls, **changes) -> "KernelSpec":
        """The eager library's kernels (one hand-written kernel per operator)."""
        spec = cls(
            name="handwritten",
            # a library kernel loads S, upcasts once, computes in fp32, casts back at the end
            promotion="fp32_internal",
            # fp32 accumulators: what every production reduction kernel uses
            acc=FP32,
            # inside a tile the vector unit sums 64 fp32 lanes (256-byte vectors),
            # then folds them with a butterfly; tails are predicated (masked)
            reduce_inner=Lanes(64, "tree", "masked"),
            # tile partials are added into one running scalar accumulator
            reduce_outer=Sequential(),
            # single-operator kernel: one input and one output buffer -> big tiles
            live_buffers=2,
            hardware=Hardware(),
            # hand-written kernels multiply by a scalar register (Ascend Muls):
            # the scalar stays fp32
            scalar_mul="muls",
            # separate vector multiply and add instructions (two roundings)
            fma=False,
            # a 12-bit table seed (about 13.25 correct bits; RSQRTPS guarantees
            # about 11.4) plus one Newton step in fp32
            rsqrt=_alg.Newton("table12", 1, FP32),
            # the vector unit's IEEE divide / reciprocal instructions
            reciprocal="exact",
            divide="exact",
            # a libm-quality exp (correctly rounded model)
            exp="exact",
            # layer-norm style kernels use Welford's single pass over the tile
            variance="welford",
            # cube unit: exact products, one rounding per K tile into fp32
            matmul_algo="block_fma",
            # the library picks the largest K tile its L0 buffers hold
            k_tile=256,
        )
        return replace(spec, **changes) if changes else spec

    @classmethod
    def codegen(cls, **changes) -> "KernelSpec":
        """A generic code generator's fused kernels (numlab's own model, named
        after no real compiler).

        Its conventions are choices a code generator *may* make, and two of
        them are not PyTorch Inductor's on CPU: a Python scalar is
        materialised as a broadcast tensor in S (``scalar_mul="broadcast"``:
        ``x * 0.1`` multiplies by ``fl16(0.1)`` for fp16 ``x``) and ``a*b + c``
        is contracted to one FMA (``fma=True``); Inductor's C++ keeps
        scalars in fp32 and compiles with ``-ffp-contract=off``.  Its rsqrt
        (8-bit estimate + 2 Newton steps) and exp (degree-6 polynomial) are
        generic too.  :meth:`inductor_cpu` is the preset with Inductor CPU's
        conventions."""
        spec = cls(
            name="codegen",
            # fused blocks promote to fp32 and stay there until the block's outputs
            promotion="fp32_internal",
            acc=FP32,
            # generated reductions: a pairwise tree inside the tile ...
            reduce_inner=Pairwise(),
            # ... and a sequential loop over tiles
            reduce_outer=Sequential(),
            # None: the fusion plan's Block.live_buffers decides (more buffers,
            # smaller tiles); DEFAULT_FUSED_LIVE_BUFFERS if it does not say
            live_buffers=None,
            hardware=Hardware(),
            # a constant is materialised as a broadcast tensor in S, then multiplied
            scalar_mul="broadcast",
            # compilers contract a*b + c into FMA
            fma=True,
            # the generator's own rsqrt: an 8-bit estimate (FRSQRTE-like) + 2 steps
            rsqrt=_alg.Newton("table8", 2, FP32),
            reciprocal="exact",
            divide="exact",
            # fast exp: Cody-Waite reduction + degree-6 polynomial in fp32
            exp=_alg.ExpPoly(6, FP32),
            # decomposed layer norm: mean, then mean of squared deviations
            variance="two_pass",
            matmul_algo="block_fma",
            # a smaller K tile: the fused matmul epilogue takes buffer space
            k_tile=128,
        )
        return replace(spec, **changes) if changes else spec

    @classmethod
    def inductor_cpu(cls, **changes) -> "KernelSpec":
        """PyTorch Inductor's generated C++ on CPU (torch 2.13, AVX-512 build,
        fp32 tensors, one thread): the kernel conventions only; the fusion
        decisions are ``FusionOptions.inductor()``.

        Read in Inductor's sources and measured by :mod:`numlab.torch`
        (``numlab.torch.inductor_cpu()``, whose :meth:`kernel_spec` starts
        from this preset and adds the detected lanes, threads and 16-bit
        loads): loads widened to fp32, every op in fp32, one rounding at each
        store; Python scalars as ``static_cast<float>(s)`` (``scalar_mul=
        "muls"``: fp32 scalars); ``-ffp-contract=off`` (``fma=False``);
        ``Vectorized<float>::rsqrt`` is ``1 / sqrt(x)`` (``"sqrt_then_div"``);
        SLEEF ``exp``/``tanh``, ATen's vectorised erf and gelu; reductions
        over 16 fp32 lanes (``InductorLanes(16, 1, 1)``); ``var_mean`` in two
        passes.  Not covered by the preset: 16-bit storage loads two vectors
        per step (``reduce_order=InductorLanes(16, 2, 1)``), AVX2 machines
        have 8 lanes, threads split long rows, and Inductor replaces
        ``x / c`` by ``x * fl32(1/c)`` for a constant ``c``."""
        spec = cls(
            name="inductor_cpu",
            # loads converted to fp32 once; one rounding at each store
            promotion="fp32_internal",
            acc=FP32,
            # Inductor's lane-vector row reduction: 16 fp32 lanes (avx512),
            # one vector per load (fp32 storage), one thread
            reduce_order=InductorLanes(16, 1, 1),
            live_buffers=None,
            hardware=Hardware(),
            # a Python scalar is static_cast<float>(s): it stays fp32
            scalar_mul="muls",
            # cpp_builder passes -ffp-contract=off: no FMA contraction
            fma=False,
            # Vectorized<float>::rsqrt is _mm512_div_ps(1, _mm512_sqrt_ps(x))
            rsqrt="sqrt_then_div",
            reciprocal="exact",
            divide="exact",
            # Vectorized<float> math: SLEEF expf_u10 and tanhf, ATen's erf and gelu
            exp="sleef_u10",
            tanh="sleef",
            erf="aten_vec",
            gelu="aten_vec",
            gelu_tanh="aten_vec",
            # the generated var_mean: sum(x)/n, then sum((x - mean)^2)
            variance="two_pass",
            # matmul is an extern library call (aten.mm), not generated code
            matmul_algo="block_fma",
            k_tile=128,
        )
        return replace(spec, **changes) if changes else spec

    def describe(self) -> dict:
        """``{field: readable value}`` for tables and notebooks (orders and
        algorithms by their string forms)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "mma":
                out[f.name] = _grammar.unit_string(v)
                continue
            out[f.name] = v.name if isinstance(v, (Format, Hardware)) else (v if isinstance(v, (bool, int, type(None))) else str(v))
        return out

    def replace(self, **changes) -> "KernelSpec":
        """A copy with some fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)

    # ---------------------------------------------------------------- formats
    def compute_format(self, storage, fused: bool = False) -> Format:
        """Format elementwise work is rounded to: fp32 in a fused block or with
        ``fp32_internal``; S with ``native`` or ``accumulator_only``."""
        storage = get_format(storage)
        if fused or self.promotion == "fp32_internal":
            return FP32 if storage.p <= 24 else storage
        return storage

    def acc_format(self, storage, fused: bool = False) -> Format:
        """Accumulator format: S with ``native`` promotion (eager), else ``acc``."""
        storage = get_format(storage)
        if not fused and self.promotion == "native":
            return storage
        return self.acc if storage.p <= self.acc.p else storage

    def out_format(self, storage, fused: bool = False) -> Format:
        """Format a kernel returns: S (eager) or fp32 (inside a fused block)."""
        storage = get_format(storage)
        return (FP32 if storage.p <= 24 else storage) if fused else storage

    def tile(self, storage, fused: bool = False, live_buffers: int | None = None) -> int:
        """Tile elements for this kernel: :func:`tile_elements` with
        ``live_buffers`` (argument, else the spec's, else the fused default) and
        the element size (S's bytes eager; 4 (fp32) inside a fused block)."""
        eb = None if fused else _storage_bytes(get_format(storage))
        if live_buffers is not None:  # the caller's count overrides the spec's
            return kernel_tile(None, self.hardware, live_buffers, eb, fused)[1]
        return kernel_tile(self, self.hardware, DEFAULT_FUSED_LIVE_BUFFERS, eb, fused)[1]

    def order(self, storage, fused: bool = False, live_buffers: int | None = None) -> Order:
        """The reduction order: :meth:`order_at` the kernel's :meth:`tile`."""
        return self.order_at(self.tile(storage, fused, live_buffers))

    def order_at(self, tile: int) -> Order:
        """The reduction order of a kernel whose tile holds ``tile`` elements:
        ``reduce_order`` if set, else ``Blocked(tile, reduce_inner, reduce_outer)``."""
        if self.reduce_order is not None:
            return self.reduce_order
        return Blocked(tile, self.reduce_inner, self.reduce_outer)

    # ---------------------------------------------------------------- kernels
    def ctx(self, storage, fused: bool = False, live_buffers: int | None = None) -> "_E.Ctx":
        """The engine context of a kernel of this spec on storage format S
        (tile ``self.tile(S, fused, live_buffers)``)."""
        return _E.Ctx(storage, self, fused=fused, live_buffers=live_buffers)

    def reduce(self, x, op: str, axis: int | None = -1, *, storage, fused: bool = False,
               live_buffers: int | None = None, keepdims: bool = False, correction: int = 0):
        """``op`` over ``axis`` (an int, a tuple or None for all) with this
        spec's order, accumulator and variance algorithm; the result in S
        (eager) or fp32 (``fused``), rounded with ``vector_rounding``."""
        check_choice("op", op, OPS)
        c = self.ctx(storage, fused, live_buffers)
        x = _E._f32(x)
        return c.store(c.reduce(x, op, _E._axes_of(x, axis), keepdims, correction))

    def mul_scalar(self, x, s, *, storage, fused: bool = False):
        """``x * s`` by this spec's instruction (``scalar_mul``,
        ``scalar_rounding``, ``vector_rounding``); the result in S (eager) or
        fp32 (``fused``)."""
        c = self.ctx(storage, fused)
        return c.store(_E.mul_scalar(c, x, scalar=s))

    def unary(self, op: str, x, *, storage, fused: bool = False, approximate: str = "none"):
        """One of :data:`UNARY_OPS` with this spec's algorithms (``approximate``
        is gelu's: "none" or "tanh"); the result in S (eager) or fp32 (``fused``)."""
        check_choice("op", op, UNARY_OPS)
        c = self.ctx(storage, fused)
        if op == "gelu":
            return c.store(_E.gelu(c, x, approximate=approximate))
        return c.store(getattr(_E, op)(c, x))

    def div(self, a, b, *, storage, fused: bool = False):
        """``a / b`` with this spec's division algorithm."""
        c = self.ctx(storage, fused)
        return c.store(_E.div(c, a, b))

    def multiply_add(self, a, b, c, *, storage, fused: bool = False):
        """``a*b + c``: one rounding with ``fma=True``, else two (in the compute format)."""
        k = self.ctx(storage, fused)
        return k.store(k.muladd(a, b, c))

    def matmul(self, a, b, *, storage, fused: bool = False):
        """K-tiled matmul with this spec's algorithm, k_tile and accumulator."""
        c = self.ctx(storage, fused)
        return c.store(_E.matmul(c, a, b))

    # ---------------------------------------------------------------- grammar
    @classmethod
    def parse(cls, spec, *, arg: str = "kernels") -> "KernelSpec":
        """A KernelSpec from a kernel spec string (``"codegen:fma=false"``;
        grammar in :mod:`numlab.kernels.grammar`); a KernelSpec passes
        through.  Errors name ``arg``, the field, the value and the choices."""
        return _grammar.parse_kernel_spec(cls, spec, arg)

    @property
    def spec(self) -> str:
        """The canonical kernel spec string (``KernelSpec.parse(s.spec) == s``)."""
        return _grammar.kernel_spec_string(self)


HANDWRITTEN = KernelSpec.handwritten()
CODEGEN = KernelSpec.codegen()
INDUCTOR_CPU = KernelSpec.inductor_cpu()


def mode_specs(mode: str, kernels=None, library=None) -> tuple:
    """``(kernels, library)`` a run in ``mode`` computes with: the given ones
    (KernelSpecs or spec strings, :meth:`KernelSpec.parse`), else the defaults.

    ``eager`` runs ``kernels`` (default the hand-written library,
    ``KernelSpec.handwritten()``), which are its library too; the fused modes
    (``fused``, ``emulated_casts``) run ``kernels`` (default the code
    generator's, ``KernelSpec.codegen()``) with ``library`` (default the
    hand-written one) for the blocks the code generator does not take;
    ``reference`` computes in fp64 with neither: ``(None, None)``.
    """
    if mode == "reference":
        return None, None
    if mode == "eager":
        spec = KernelSpec.parse(kernels, arg="kernels") if kernels is not None else KernelSpec.handwritten()
        return spec, spec
    spec = KernelSpec.parse(kernels, arg="kernels") if kernels is not None else KernelSpec.codegen()
    lib = KernelSpec.parse(library, arg="library") if library is not None else KernelSpec.handwritten()
    return spec, lib
