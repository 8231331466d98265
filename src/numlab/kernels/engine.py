"""The engine: the one piece of code that computes a node under a :class:`KernelSpec`.

A node is computed by calling its operator's kernel function with a
:class:`Ctx` (how the node computes: storage format S, spec, whether it is
inside a fused block, its tile, its schedule seed) and its input values::

    ctx = Ctx("fp16", KernelSpec.handwritten())
    v = layer_norm(ctx, x, gamma, beta, axis=(1,), eps=1e-5)   # fp32 values
    y = ctx.store(v)                                           # S, rounded per spec

Every operator of :mod:`numlab.ops` names its kernel function
(``OpInfo.kernel``): most live here; softplus's and hardswish's beside their
registrations in :mod:`numlab.ops`, and the block-scaled operators' in
:mod:`numlab.kernels.scaled`.  :func:`numlab.execute.run` only orchestrates (plans,
feeds blocks, stores to S) and :class:`KernelSpec`'s methods (``reduce``,
``mul_scalar``, ``unary``, ``div``, ``multiply_add``, ``matmul``) are thin
calls into the same :class:`Ctx` code, so there is exactly one code path
for every number.

Kernel functions take ``(ctx, *inputs, **attrs)`` with the node's canonical
attributes and return float32 arrays of values of ``ctx.inner`` (a kernel's
result before it is written out).  Names that would shadow Python builtins
carry a trailing underscore (``sum_``, ``max_``, ``min_``, ``abs_``), as in
:mod:`numlab.ops`.  Data-movement operators never change a value: their
kernel is :func:`data_movement` of the operator's reference.

Rounding
--------
* Primitives inside a kernel round to ``ctx.inner``
  (``spec.compute_format``) to nearest even.
* A kernel's result written to memory (:meth:`Ctx.store`; the executor's
  stores to S) rounds with ``spec.vector_rounding``; round to nearest even
  uses the storage dtype's own cast (fast path).
* Scalar operands follow ``spec.scalar_mul``: ``broadcast`` materialises the
  scalar in S (nearest even), ``muls`` holds it in fp32 rounded with
  ``spec.scalar_rounding``; the vector multiply of ``mul_scalar`` rounds
  with ``spec.vector_rounding``.
* ``cast`` rounds to its target format to nearest even (the operator's
  meaning, as ``torch.Tensor.to``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..formats import FP32, get_format
from . import algorithms as _alg
from ._common import Arith, check_choice
from ._common import round_to as _round_to
from .mma.lab import unit_matmul as _unit_matmul
from .orders import Blocked, Shuffled
from .reduction import OPS as _REDUCE_OPS
from .reduction import reduce as _kreduce
from .reduction import rowwise_moments as _rowwise_moments
from .reduction import welford as _welford
from .scalar import fma_f32 as _fma_f32
from .scalar import multiply_add as _kmultiply_add
from .scalar import scalar_mul as _kscalar_mul
from .scaled import block_scale_kernel as block_scale
from .scaled import dequantize_kernel as dequantize
from .scaled import quantize_kernel as quantize
from .scaled import scaled_matmul_kernel as scaled_matmul
from .tiled_matmul import matmul as _kmatmul

__all__ = [
    "Ctx", "store", "data_movement", "contract", "folded_muls", "compute", "tail_mask",
    "add", "sub", "add_alpha", "mul", "div", "maximum", "minimum",
    "add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar", "rdiv_scalar",
    "neg", "abs_", "relu", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
    "erf", "silu", "gelu", "where", "cast", "gt", "ge", "lt", "le", "eq", "ne", "constant",
    "sum_", "mean", "max_", "min_", "var", "matmul",
    "layer_norm", "rms_norm", "softmax", "log_softmax",
    # block-scaled operators: their kernels live in numlab.kernels.scaled, with the
    # formats they implement, and are named here so that every operator's kernel is
    # reached through this module
    "quantize", "block_scale", "dequantize", "scaled_matmul",
]

GELU_APPROXIMATE = _alg.GELU_APPROXIMATE
"""Values of gelu's ``approximate`` (torch's vocabulary)."""


def _f32(x) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype == np.float32 else a.astype(np.float32)


# ---------------------------------------------------------------------------
# stores
# ---------------------------------------------------------------------------
def store(v, fmt, rounding: str = "rne") -> np.ndarray:
    """Round fp32 values ``v`` to ``fmt`` with ``rounding`` and return them
    in ``fmt.container``.

    With ``rounding="rne"``, fp16 and bf16 use the container dtype's own cast
    from float32 (numpy's and ml_dtypes' casts are IEEE round-to-nearest-even,
    overflow to inf; tested bit for bit against :func:`numlab.round_to`),
    which rounds and converts in one pass; everything else goes through
    ``round_to``."""
    fmt = get_format(fmt, "fmt")
    v = _f32(v)
    if rounding == "rne":
        if fmt == FP32:
            return v
        if fmt.name in ("fp16", "bf16"):
            with np.errstate(over="ignore", invalid="ignore"):
                return v.astype(fmt.dtype)
    r = np.asarray(_round_to(v, fmt, rounding))
    return r if r.dtype == fmt.container else r.astype(fmt.container)


# ---------------------------------------------------------------------------
# the context
# ---------------------------------------------------------------------------
class Ctx:
    """How one node computes.

    Parameters
    ----------
    storage : Format or str
        The storage format S (what the node's inputs hold and what eager
        writes).  Must fit in fp32 (the engine computes in float32 arrays).
    spec : KernelSpec
    fused : bool
        True inside a code-generated block that keeps fp32 intermediates:
        ``inner`` is then fp32 whatever ``spec.promotion`` says and the
        kernel's output format ``out`` is fp32.  Otherwise the node is a
        one-operator kernel: ``spec.promotion`` decides ``inner``
        (``fp32_internal``: fp32, ``accumulator_only``: S with ``acc``
        accumulators, ``native``: S everywhere) and ``out`` is S.
    tile : int, optional
        Reduction tile (elements); default ``spec.tile(S, fused, live_buffers)``.
    seed : int, optional
        Schedule seed for a ``Shuffled`` order.
    name : str
        The node's name (for messages).
    live_buffers : int, optional
        Only used for the default ``tile``.

    loads : Format or str, optional
        The element format the node's loop loads (default S): a 16-bit one
        fills two fp32 vectors per load (:attr:`narrow`).

    Attributes: ``S``, ``spec``, ``fused``, ``tile``, ``seed``, ``name``, ``loads``,
    ``inner`` (format of a kernel's primitives), ``acc`` (accumulator),
    ``out`` (format of :meth:`store`), ``ar`` (``Arith(inner)``).
    """

    def __init__(self, storage, spec, *, fused: bool = False, tile: int | None = None, seed=None,
                 name: str = "", live_buffers: int | None = None, loads=None):
        S = get_format(storage, "storage")
        self.loads = None if loads is None else get_format(loads, "loads")
        if S.p > 24:
            raise ValueError(f"storage={S.name!r} does not fit in fp32; the engine computes in fp32 "
                             "(valid: fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2)")
        self.S = S
        self.spec = spec
        self.name = name
        self.fused = bool(fused)
        self.tile = int(spec.tile(S, fused, live_buffers) if tile is None else tile)
        self.seed = seed
        self.inner = spec.compute_format(S, fused)
        self.acc = spec.acc_format(S, fused)
        self.out = spec.out_format(S, fused)
        self.ar = Arith(self.inner)

    # -- rounding ----------------------------------------------------------
    def r(self, x) -> np.ndarray:
        """Round to the inner precision (float32 container), nearest even."""
        return _f32(self.ar.round(x))

    def store(self, v) -> np.ndarray:
        """The kernel's result as written out: rounded to ``out`` (S, or fp32
        in a fused block) with ``spec.vector_rounding``, in ``out.container``."""
        return store(v, self.out, self.spec.vector_rounding)

    # -- scalars (instruction choice) ----------------------------------------
    def scalar_how(self, op: str) -> str:
        """How operator ``op`` holds its scalar: ``spec.scalar_mul``, or with
        ``spec.storage_scalars`` set ``"broadcast"`` (in S) for the operators it
        names and ``"muls"`` (fp32) for the others."""
        if self.spec.storage_scalars is None:
            return self.spec.scalar_mul
        return "broadcast" if op in self.spec.storage_scalars else "muls"

    def scalar(self, s: float, op: str = "mul_scalar") -> np.float32:
        """The scalar operand of operator ``op`` as the instruction holds it
        (:meth:`scalar_how`): ``broadcast`` materialises it in S (nearest even),
        ``muls`` (a scalar register) holds it in fp32 rounded with
        ``spec.scalar_rounding``."""
        if self.scalar_how(op) == "broadcast":
            return np.float32(_round_to(float(s), self.S))
        return np.float32(_round_to(float(s), FP32, self.spec.scalar_rounding))

    def mul_scalar(self, x, s) -> np.ndarray:
        """``x * s`` by ``spec.scalar_mul`` (:func:`numlab.kernels.scalar_mul`; the
        scalar's holding by :meth:`scalar_how`), the product rounded to ``inner``
        with ``spec.vector_rounding``."""
        return _f32(_kscalar_mul(
            x, float(s), fmt=self.inner, how=self.scalar_how("mul_scalar"), storage=self.S,
            rounding=self.spec.vector_rounding, scalar_rounding=self.spec.scalar_rounding,
        ))

    # -- arithmetic ------------------------------------------------------------
    def add(self, a, b):
        return self.r(self.ar.add(_f32(a), _f32(b)))

    def sub(self, a, b):
        return self.r(self.ar.sub(_f32(a), _f32(b)))

    def mul(self, a, b):
        return self.r(self.ar.mul(_f32(a), _f32(b)))

    def _inplace_ok(self, a, b) -> bool:
        return (self.ar.native and isinstance(a, np.ndarray) and a.dtype == np.float32
                and np.asarray(b).dtype == np.float32 and a.flags.writeable
                and np.broadcast_shapes(a.shape, np.shape(b)) == a.shape)

    def mul_(self, a, b):
        """``mul`` writing into ``a`` (a temporary of this kernel) when the
        arithmetic is native fp32: the same IEEE operation, one allocation
        fewer; otherwise ``mul``."""
        b = _f32(b)
        if self._inplace_ok(a, b):
            with np.errstate(all="ignore"):
                return np.multiply(a, b, out=a)
        return self.mul(a, b)

    def add_(self, a, b):
        """``add`` into ``a`` (see :meth:`mul_`)."""
        b = _f32(b)
        if self._inplace_ok(a, b):
            with np.errstate(all="ignore"):
                return np.add(a, b, out=a)
        return self.add(a, b)

    def div(self, a, b):
        """``a / b`` by ``spec.divide``."""
        return _f32(_alg.divide(a, b, fmt=self.inner, algo=self.spec.divide))

    def muladd(self, a, b, c):
        """``a*b + c``: one rounding with ``spec.fma``, else two."""
        if self.inner == FP32 and not self.spec.fma:
            return self.add(self.mul(a, b), c)  # native fp32: two roundings
        if self.inner == FP32:
            return _fma_f32(_f32(a), _f32(b), _f32(c))
        a, b, c = np.broadcast_arrays(_f32(a), _f32(b), _f32(c))
        return _f32(_kmultiply_add(a, b, c, fmt=self.inner, fused=self.spec.fma))

    # -- functions (algorithms) ------------------------------------------------
    def rsqrt(self, x):
        return _f32(_alg.rsqrt(x, fmt=self.inner, algo=self.spec.rsqrt))

    def reciprocal(self, x):
        return _f32(_alg.reciprocal(x, fmt=self.inner, algo=self.spec.reciprocal))

    def sqrt(self, x):
        return _f32(_alg.sqrt(x, fmt=self.inner))

    def exp(self, x):
        return _f32(_alg.exp(x, fmt=self.inner, algo=self.spec.exp))

    def log(self, x):
        """float64 log rounded once to inner (correctly rounded model)."""
        with np.errstate(all="ignore"):
            return self.r(np.log(np.asarray(x, dtype=np.float64)))

    def log1p(self, x):
        """``log(1 + x)`` by ``spec.log1p`` (``"exact"``: float64 ``log1p``
        rounded once to inner, no rounding of ``1 + x``; ``"sleef_u10"``,
        ``"glibc"``: the libraries' fp32 routines)."""
        return _f32(_alg.log1p(x, fmt=self.inner, algo=self.spec.log1p))

    def tanh(self, x):
        return _f32(_alg.tanh(x, fmt=self.inner, algo=self.spec.tanh))

    def erf(self, x):
        return _f32(_alg.erf(x, fmt=self.inner, algo=self.spec.erf))

    def sigmoid(self, x):
        """``1 / (1 + exp(-x))``: exp (spec.exp), add, reciprocal
        (spec.reciprocal), each rounded to inner."""
        e = self.exp(-_f32(x))
        return self.reciprocal(self.add(np.float32(1.0), e))

    def gelu(self, x, approximate: str = "none"):
        """GELU as the op says (``approximate`` "none": erf form, "tanh"),
        evaluated by ``spec.gelu`` (erf form) or ``spec.gelu_tanh`` (tanh
        form) and rounded to inner (``kernels.gelu``)."""
        check_choice("approximate", approximate, GELU_APPROXIMATE)
        algo = self.spec.gelu if approximate == "none" else self.spec.gelu_tanh
        return _f32(_alg.gelu(x, fmt=self.inner, approximate=approximate, algo=algo))

    # -- the scalar loop of a CPU elementwise kernel --------------------------------
    @property
    def narrow(self) -> bool:
        """The loaded elements (``loads``, default S) have 16 bits or fewer: a CPU
        vector load fills two fp32 vectors."""
        return np.dtype((self.loads or self.S).container).itemsize <= 2

    def tail_mask(self, shape, step: int | None = None):
        """Where the elements of an output of ``shape`` run the kernel's scalar loop
        (:func:`tail_mask` with ``spec.loop_step``, doubled for a 16-bit S, or
        ``step``), or None when no element does."""
        if step is None:
            step = self.spec.loop_step * (2 if self.narrow else 1)
        if not step:
            return None
        mask = tail_mask(int(np.prod(shape, dtype=np.int64)), step, self.spec.grain_size, self.spec.threads)
        return mask.reshape(shape) if mask.any() else None

    def scalar_loop(self, in_storage: bool = False) -> "Ctx":
        """This node's context in the kernel's scalar loop: the spec's math routines
        replaced by ``spec.tail_math`` (exp, tanh, erf, log1p; gelu's vectorised
        formula by its scalar one), no further tail; ``in_storage``: the scalar code
        computes in the tensor's type, each operation rounded to S (ATen's scalar
        lambda of ``scalar_t``, e.g. rsqrt's ``1 / std::sqrt(a)`` on ``c10::Half``)."""
        sp = self.spec
        if in_storage:
            sp = dataclasses.replace(sp, promotion="native", fma=False)
        t = sp.tail_math
        gelu_tail = "glibc" if t == "glibc" else "aten_scalar"
        tail = dataclasses.replace(
            sp, exp=t, tanh=t, erf=t, log1p=t, loop_step=0,
            gelu=gelu_tail if sp.gelu == "aten_vec" else sp.gelu,
            gelu_tanh=gelu_tail if sp.gelu_tanh == "aten_vec" else sp.gelu_tanh)
        return Ctx(self.S, tail, fused=self.fused and not in_storage, tile=self.tile, seed=self.seed, name=self.name,
                   loads=self.loads)

    # -- reductions ------------------------------------------------------------
    def order(self):
        """``spec.reduce_order_low`` for a 16-bit S when set, else
        ``spec.reduce_order`` if set, else ``Blocked(tile, reduce_inner,
        reduce_outer)``; a Shuffled (atomic-add-like) order takes the
        schedule seed when one was given."""
        if self.spec.reduce_order_low is not None and self.narrow:
            o = self.spec.reduce_order_low
        else:
            o = self.spec.order_at(self.tile)
        if self.seed is not None:
            o = _reseed(o, self.seed)
        return o

    def reduce(self, x, op, axes, keepdims=False, correction=0, order=None):
        """``op`` (sum, mean, max, min, sumsq, var) over ``axes`` (a tuple of
        non-negative axes) by :func:`numlab.kernels.reduce` with this node's
        order (or ``order``), accumulator and variance algorithm, rounded to inner."""
        check_choice("op", op, _REDUCE_OPS)
        x = _f32(x)
        axes = tuple(int(a) for a in axes)
        flat = _axes_last(x, axes)
        n = flat.shape[-1]
        if n == 0 and op in ("sum", "mean", "var", "sumsq"):
            # empty sum is IEEE 0; mean/var are 0/0 = NaN
            with np.errstate(all="ignore"):
                fn = {"sum": np.sum, "sumsq": np.sum, "mean": np.mean, "var": np.var}[op]
                r = fn(flat.astype(np.float64), axis=-1).astype(np.float32)
        elif (op == "var" and self.spec.variance == "welford" and self.acc == FP32
              and self.inner == FP32):
            r = _welford(flat, self.ar, int(correction))[1]
        else:
            r = _kreduce(flat, op, -1, order=self.order() if order is None else order, acc=self.acc, out=self.inner,
                         variance=self.spec.variance, correction=int(correction))
        r = _f32(r)
        if keepdims:
            r = r.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return r

    def welford(self, x, axes):
        """(mean, var) by Welford in the accumulator format, keepdims."""
        x = _f32(x)
        axes = tuple(axes)
        m, v = _welford(_axes_last(x, axes), Arith(self.acc), 0)
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        return self.r(m).reshape(shape), self.r(v).reshape(shape)

    def matmul(self, a, b):
        """numpy matmul rules; K-tiled by ``spec.matmul_algo`` and
        ``spec.k_tile`` with the accumulator ``acc``, rounded to inner; on
        the matrix unit ``spec.mma`` when set
        (:func:`numlab.kernels.mma.lab.unit_matmul`)."""
        a, b = _f32(a), _f32(b)
        va, vb = a.ndim == 1, b.ndim == 1  # numpy matmul's vector rules
        a2, b2 = a[None, :] if va else a, b[:, None] if vb else b
        if self.spec.mma is not None:  # a modelled matrix unit (KernelSpec.mma)
            r = _unit_matmul(a2, b2, self.spec.mma, self.inner)
        else:
            r = _f32(_kmatmul(a2, b2, k_tile=self.spec.k_tile, acc=self.acc, out=self.inner,
                              algo=self.spec.matmul_algo, fma=self.spec.fma))
        if vb:
            r = r[..., 0]
        if va:
            r = r[..., 0, :] if not vb else r[..., 0]
        return r


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _axes_last(x: np.ndarray, axes: tuple) -> np.ndarray:
    """``x`` with the reduced ``axes`` moved last and merged into one axis of
    their total length (the other axes keep their order)."""
    rest = [i for i in range(x.ndim) if i not in axes]
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return np.transpose(x, rest + list(axes)).reshape(tuple(x.shape[i] for i in rest) + (n,))


def tail_mask(numel: int, step: int, grain_size: int, threads: int) -> np.ndarray:
    """Elements of a flat contiguous elementwise kernel of ``numel`` elements that
    its scalar loop computes: the last ``len mod step`` of every
    ``at::parallel_for`` chunk (one chunk below ``grain_size`` or with one
    thread; else ``min(threads, ceil(numel / grain_size))`` equal chunks)."""
    mask = np.zeros(numel, dtype=bool)
    if numel < grain_size or threads <= 1:
        bounds = [(0, numel)]
    else:
        nt = min(threads, -(-numel // grain_size))
        cs = -(-numel // nt)
        bounds = [(lo, min(lo + cs, numel)) for lo in range(0, numel, cs)]
    for lo, hi in bounds:
        t = (hi - lo) % step
        mask[hi - t:hi] = True
    return mask


def compute(kernel, ctx: "Ctx", ins, attrs, scalar_tail=False, op: str = "") -> np.ndarray:
    """``kernel(ctx, *ins, **attrs)``; for an operator whose CPU kernel has a scalar
    loop (``spec.tail_ops`` names ``op``, or with ``tail_ops`` None the operator is
    registered with ``scalar_tail``: ``"opmath"`` computing in fp32, ``"storage"`` in
    the tensor's type) and a spec with ``loop_step``, the elements of
    :meth:`Ctx.tail_mask` computed by :meth:`Ctx.scalar_loop`."""
    tails = ctx.spec.tail_ops
    if tails is not None:
        scalar_tail = "opmath" if op in tails else False
    with np.errstate(all="ignore"):
        v = np.asarray(kernel(ctx, *ins, **attrs))
        if scalar_tail and ctx.spec.loop_step:
            # a 16-bit kernel computing in the tensor's type steps over alpha_step elements
            # (measured: rsqrt of fp16/bf16 steps 32 under AVX512 and AVX2, as add with alpha)
            storage = scalar_tail == "storage"
            if storage and ctx.narrow and not ctx.spec.alpha_step:
                return v  # no such step (None), or no vector loop at all (0): not a tail
            mask = ctx.tail_mask(v.shape, ctx.spec.alpha_step if storage and ctx.narrow else None)
            if mask is not None:
                tail = ctx.scalar_loop(in_storage=storage)
                v = np.where(mask, np.asarray(kernel(tail, *ins, **attrs), v.dtype), v)
    return v


def _reseed(o, seed):
    if isinstance(o, Shuffled):
        return dataclasses.replace(o, seed=int(seed))
    if isinstance(o, Blocked):
        return dataclasses.replace(o, inner=_reseed(o.inner, seed), outer=_reseed(o.outer, seed))
    return o


# ---------------------------------------------------------------------------
# FMA contraction in a code-generated block
# ---------------------------------------------------------------------------
_CONTRACTIBLE = ("add", "sub", "add_scalar", "sub_scalar", "rsub_scalar")


def _folded_mul(node, g, block):
    """The ``mul`` input of ``node`` that :func:`contract` folds into an
    FMA (the same rule, in the same order), or None."""
    if node.op not in _CONTRACTIBLE:
        return None
    for p in node.inputs:
        if p not in block.members or p in block.outputs:
            continue
        pn = g.node(p)
        # the product must feed this one operand only (``t + t`` reads it twice)
        if pn.op != "mul" or len(g.consumers(p)) != 1 or node.inputs.count(p) != 1:
            continue
        return p
    return None


def folded_muls(g, block) -> set:
    """Multiplies of a code-generated block absorbed by FMA contraction."""
    out = set()
    for m in block.members:
        p = _folded_mul(g.node(m), g, block)
        if p is not None:
            out.add(p)
    return out


def contract(node, g, block, vals, ctx: Ctx):
    """FMA contraction in a code-generated block (``spec.fma``): an add or
    subtract whose operand is a ``mul`` of the same block, used only there
    and never written out, is computed as one fused multiply-add (one
    rounding), as compilers contract ``a*b + c`` (LLVM/NVPTX ``fmuladd``,
    Ascend ``vmla``).  ``g`` is the graph, ``block`` the plan's block (its
    ``members`` and ``outputs``), ``vals`` the values computed so far.
    Returns None when the pattern does not apply."""
    p = _folded_mul(node, g, block)
    if p is None:
        return None
    i = node.inputs.index(p)
    pn = g.node(p)
    a, b = _f32(vals[pn.inputs[0]]), _f32(vals[pn.inputs[1]])
    op = node.op
    if op == "add":
        return ctx.muladd(a, b, vals[node.inputs[1 - i]])
    if op == "sub":
        c = _f32(vals[node.inputs[1 - i]])
        return ctx.muladd(a, b, -c) if i == 0 else ctx.muladd(-a, b, c)
    s = ctx.scalar(node.op_attrs["scalar"], op)
    if op == "add_scalar":
        return ctx.muladd(a, b, np.float32(s))
    if op == "sub_scalar":
        return ctx.muladd(a, b, np.float32(-s))
    return ctx.muladd(-a, b, np.float32(s))  # rsub_scalar: s - a*b


# ---------------------------------------------------------------------------
# kernel functions, one per operator: (ctx, *inputs, **attrs) -> float32
# ---------------------------------------------------------------------------
def data_movement(ref):
    """The kernel of a data-movement operator: its reference ``ref``
    (dtype-preserving, never changes a value), as a contiguous array."""
    def kernel(ctx, *xs, **attrs):
        return np.ascontiguousarray(ref(*xs, **attrs))
    kernel.__name__ = getattr(ref, "__name__", "data_movement")
    kernel.__doc__ = "Data movement: the operator's reference (values unchanged)."
    return kernel


def add(ctx, a, b):
    return ctx.add(a, b)


def sub(ctx, a, b):
    return ctx.sub(a, b)


def mul(ctx, a, b):
    return ctx.mul(a, b)


def div(ctx, a, b):
    return ctx.div(a, b)


def maximum(ctx, a, b):
    return np.maximum(_f32(a), _f32(b))


def minimum(ctx, a, b):
    return np.minimum(_f32(a), _f32(b))


def add_alpha(ctx, x, y, *, alpha):
    """``x + alpha*y`` as one kernel (torch's ``add(x, y, alpha=)``): ``alpha`` held
    as ``spec.storage_scalars`` says for ``add_alpha``, ``muladd`` (one rounding with
    ``spec.fma``).  With ``spec.alpha_step`` on a 16-bit S the elements of the
    kernel's scalar loop compute in S, ``fl(x + fl(alpha*y))`` (ATen's
    reduced-float kernel; every element with ``alpha_step=0``)."""
    wrapped = np.ndim(y) == 0  # a number as the second operand (ATen's scalar specialisation)
    x, y = np.broadcast_arrays(_f32(x), _f32(y))
    a = np.float32(ctx.scalar(alpha, "add_alpha"))
    v = ctx.muladd(y, np.full_like(y, a), x)
    step = ctx.spec.alpha_step
    if step is None:
        return v
    if not ctx.narrow:
        # fp32: the scalar loop after the last vector step (``loop_step``) is fl(x + fl(alpha*y)), no FMA
        mask = ctx.tail_mask(v.shape, ctx.spec.loop_step) if step and ctx.spec.loop_step and wrapped else None
        return v if mask is None else np.where(mask, ctx.add(x, ctx.mul(y, np.full_like(y, a))), v)
    # the scalar loop computes in S: the product (exact in float64) rounded once to S, then the sum
    p = _f32(_round_to(y.astype(np.float64) * np.float64(a), ctx.S))
    t = _f32(_round_to(x.astype(np.float64) + p.astype(np.float64), ctx.S))
    if step == 0:
        return t
    mask = ctx.tail_mask(v.shape, step)
    return v if mask is None else np.where(mask, t, v)


def add_scalar(ctx, x, *, scalar):
    return ctx.add(x, np.float32(ctx.scalar(scalar, "add_scalar")))


def sub_scalar(ctx, x, *, scalar):
    return ctx.sub(x, np.float32(ctx.scalar(scalar, "sub_scalar")))


def rsub_scalar(ctx, x, *, scalar):
    return ctx.sub(np.float32(ctx.scalar(scalar, "rsub_scalar")), x)


def mul_scalar(ctx, x, *, scalar):
    return ctx.mul_scalar(x, scalar)


def div_scalar(ctx, x, *, scalar):
    return ctx.div(x, np.full_like(_f32(x), ctx.scalar(scalar, "div_scalar")))


def rdiv_scalar(ctx, x, *, scalar):
    return ctx.div(np.full_like(_f32(x), ctx.scalar(scalar, "rdiv_scalar")), x)


def neg(ctx, x):
    return -_f32(x)


def abs_(ctx, x):
    return np.abs(_f32(x))


def relu(ctx, x):
    """0 where x < 0, else x: NaN and -0.0 pass through (as torch.relu and
    the catalogue's reference)."""
    x = _f32(x)
    return np.where(x < 0, np.float32(0.0), x)


def exp(ctx, x):
    return ctx.exp(x)


def log(ctx, x):
    return ctx.log(x)


def log1p(ctx, x):
    return ctx.log1p(x)


def sqrt(ctx, x):
    return ctx.sqrt(x)


def rsqrt(ctx, x):
    return ctx.rsqrt(x)


def reciprocal(ctx, x):
    return ctx.reciprocal(x)


def tanh(ctx, x):
    return ctx.tanh(x)


def sigmoid(ctx, x):
    return ctx.sigmoid(x)


def erf(ctx, x):
    return ctx.erf(x)


def silu(ctx, x):
    """``spec.silu``: ``x * sigmoid(x)``, or ``x / (1 + exp(-x))`` (``"divide"``)."""
    if ctx.spec.silu == "divide":
        return ctx.div(x, ctx.add(np.float32(1.0), ctx.exp(-_f32(x))))
    return ctx.mul(x, ctx.sigmoid(x))


def gelu(ctx, x, *, approximate="none"):
    return ctx.gelu(x, approximate)


def where(ctx, cond, a, b):
    return np.where(np.asarray(cond) != 0, _f32(a), _f32(b))


# comparisons: exact on the values of S (IEEE: false with a NaN, except !=);
# a boolean is held as 0.0 / 1.0 (exact in every format)
def _comparison(name, ufunc):
    def kernel(ctx, a, b):
        return ufunc(_f32(a), _f32(b)).astype(np.float32)
    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"``{ufunc.__name__}`` of two values of S, held as 0.0 / 1.0."
    return kernel


gt = _comparison("gt", np.greater)
ge = _comparison("ge", np.greater_equal)
lt = _comparison("lt", np.less)
le = _comparison("le", np.less_equal)
eq = _comparison("eq", np.equal)
ne = _comparison("ne", np.not_equal)


def constant(ctx, *, value):
    """A constant tensor as it sits in memory: its float64 value rounded to
    the storage format S (nearest even), as a tensor of the model's dtype
    holds it (``torch.tensor(v, dtype=x.dtype)``): one rounding from
    float64 (not through fp32, which could round twice)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _f32(_round_to(np.asarray(value.array, dtype=np.float64), ctx.S))


def cast(ctx, x, *, to):
    """Round to the format ``to``, nearest even (the operator's meaning)."""
    return _f32(_round_to(_f32(x), to))


def _axes_of(x, axis):
    nd = np.ndim(x)
    if axis is None:
        return tuple(range(nd))
    if isinstance(axis, int | np.integer):
        return (int(axis) % nd,)
    return tuple(int(a) % nd for a in axis)


def sum_(ctx, x, *, axis=None, keepdims=False):
    return ctx.reduce(x, "sum", _axes_of(x, axis), keepdims)


def mean(ctx, x, *, axis=None, keepdims=False):
    return ctx.reduce(x, "mean", _axes_of(x, axis), keepdims)


def max_(ctx, x, *, axis=None, keepdims=False):
    return ctx.reduce(x, "max", _axes_of(x, axis), keepdims)


def min_(ctx, x, *, axis=None, keepdims=False):
    return ctx.reduce(x, "min", _axes_of(x, axis), keepdims)


def var(ctx, x, *, axis=None, keepdims=False, correction=0):
    return ctx.reduce(x, "var", _axes_of(x, axis), keepdims, correction)


def matmul(ctx, a, b):
    return ctx.matmul(a, b)


def _aten_layer_norm(ctx, x, gamma, beta, axis, eps):
    """``spec.layer_norm="aten"``: ATen's LayerNormKernel over the last axis.
    ``RowwiseMoments`` (:func:`numlab.kernels.reduction.rowwise_moments`) over
    ``spec.moments_lanes`` lanes, FMA where GCC contracted (``spec.fma``; none
    without it), a 16-bit S widening each load to two fp32 vectors; ``rstd =
    rsqrt(var + eps)`` by ``spec.rsqrt``; ``y = fma((x - mean) * rstd, gamma, beta)``
    for fp32 and ``fma(fma(x, rstd, -rstd*mean), gamma, beta)`` for a 16-bit S, a
    missing ``gamma`` taken as 1 and ``beta`` as 0 (measured bit for bit, signed zeros
    included: ``-0.0`` comes out ``+0.0``)."""
    x = _f32(x)
    if axis != (x.ndim - 1,):
        raise ValueError(f"layer_norm='aten' normalises the last axis only, got axis={axis}")
    fma = (True, True, False, True) if ctx.spec.fma else (False, False, False, False)
    mean, var_ = _rowwise_moments(x, ctx.spec.moments_lanes, fma=fma, widen=ctx.narrow)
    mean, var_ = mean[..., None], var_[..., None]
    rstd = ctx.rsqrt(ctx.add(var_, np.float32(ctx.scalar(eps))))
    # a missing weight is 1 and a missing bias 0, computed as given (-0.0 + 0 is +0.0)
    gamma = np.float32(1.0) if gamma is None else gamma
    beta = np.float32(0.0) if beta is None else beta
    if ctx.narrow:
        bias = -ctx.mul(rstd, mean)
        y = ctx.muladd(x, np.broadcast_to(rstd, x.shape), np.broadcast_to(bias, x.shape))
    else:
        y = ctx.mul(ctx.sub(x, mean), rstd)
    return ctx.muladd(y, np.broadcast_to(gamma, y.shape), np.broadcast_to(beta, y.shape))


def layer_norm(ctx, x, gamma=None, beta=None, *, axis, eps):
    """One kernel: mean and variance by ``spec.variance`` (welford: one
    pass giving both, as hand-written kernels do; two_pass: mean, then the
    mean of squared deviations; textbook: kernels.reduce "var"), centre,
    rsqrt by ``spec.rsqrt``, scale, then ``y*gamma + beta`` (FMA per spec);
    ``spec.layer_norm="aten"``: ATen's kernel (:func:`_aten_layer_norm`)."""
    axis = _axes_of(x, axis)
    if ctx.spec.layer_norm == "aten":
        return _aten_layer_norm(ctx, x, gamma, beta, axis, eps)
    if ctx.spec.variance == "welford":
        mu, var_ = ctx.welford(x, axis)
        d = ctx.sub(x, mu)
    else:
        mu = ctx.reduce(x, "mean", axis, True)
        d = ctx.sub(x, mu)
        if ctx.spec.variance == "two_pass":
            var_ = ctx.reduce(ctx.mul(d, d), "mean", axis, True)
        else:
            var_ = ctx.reduce(x, "var", axis, True)
    r = ctx.rsqrt(ctx.add(var_, np.float32(ctx.scalar(eps))))
    y = ctx.mul_(d, r)  # d is this kernel's own temporary
    if gamma is not None and beta is not None:
        if ctx.spec.fma or not ctx.ar.native:
            return ctx.muladd(y, gamma, beta)
        return ctx.add_(ctx.mul_(y, gamma), beta)  # two roundings, as muladd
    if gamma is not None:
        return ctx.mul_(y, gamma)
    return y


def rms_norm(ctx, x, weight=None, *, axis, eps):
    """One kernel: mean of squares, rsqrt by ``spec.rsqrt``, scale."""
    axis = _axes_of(x, axis)
    ms = ctx.reduce(ctx.mul(x, x), "mean", axis, True)
    r = ctx.rsqrt(ctx.add(ms, np.float32(ctx.scalar(eps))))
    y = ctx.mul(x, r)
    return ctx.mul_(y, weight) if weight is not None else y


def softmax(ctx, x, *, axis=-1):
    """One kernel: max, exp of the difference, sum (``spec.softmax_order`` when
    set), divide (``spec.softmax="reciprocal"``: multiply by ``1/sum``)."""
    axis = _axes_of(x, axis)
    m = ctx.reduce(x, "max", axis, True)
    e = ctx.exp(ctx.sub(x, m))
    s = ctx.reduce(e, "sum", axis, True, order=ctx.spec.softmax_order)
    if ctx.spec.softmax == "reciprocal":
        return ctx.mul(e, ctx.reciprocal(s))
    return ctx.div(e, s)


def log_softmax(ctx, x, *, axis=-1):
    """One kernel: ``(x - max) - log(sum(exp(x - max)))`` (the sum in
    ``spec.softmax_order`` when set)."""
    axis = _axes_of(x, axis)
    d = ctx.sub(x, ctx.reduce(x, "max", axis, True))
    s = ctx.reduce(ctx.exp(d), "sum", axis, True, order=ctx.spec.softmax_order)
    return ctx.sub(d, ctx.log(s))
