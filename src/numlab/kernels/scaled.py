"""Block-scaled tensor formats as data: MX (MXFP8/6/4), NVFP4 and DeepSeek-V3's fp8 blocks.

A :class:`ScaledFormat` says how a high-precision tensor becomes narrow
*elements* that share one *scale* per block:

* ``elem`` -- the element format (``fp8_e4m3``, ``fp8_e5m2``, ``fp6_e2m3``,
  ``fp6_e3m2``, ``fp4_e2m1``, and AMD's ``fp8_e4m3fnuz``/``fp8_e5m2fnuz``;
  :data:`ELEMENT_FORMATS`);
* ``block`` -- the block shape over the last two axes (``(1, 32)``: 32
  consecutive elements of a row; ``(128, 128)``: a weight tile; ``(32, 1)``:
  32 consecutive elements of a column, e.g. the K axis of a matmul's right
  operand);
* ``scale_fmt`` -- ``"e8m0"`` (OCP's unsigned power of two 2**-127..2**127,
  code 0xFF = NaN), ``"fp8_e4m3"`` (NVFP4's scale, used unsigned) or
  ``"fp32"``;
* ``scale_rule`` -- how a block's scale follows from its largest magnitude
  ``amax`` (:data:`SCALE_RULES`):

  - ``"floor"``: OCP Microscaling Formats (MX) v1.0, section 6.3:
    ``X = 2**(floor(log2(amax)) - emax_elem)``; elements are ``V_i / X``
    rounded to the element format (nearest even), values beyond its largest
    normal clamped to it;
  - ``"rceil"``: NVIDIA's "round-up" MX scale (cuBLAS "1D block
    quantization", PTX ``cvt.rp.satfinite.ue8m0x2.f32``):
    ``X = 2**ceil(log2(amax / max_elem))`` with the quotient rounded to fp32
    first, so no element overflows;
  - ``"amax"``: ``s = amax / max_elem`` rounded to the scale format (NVFP4:
    e4m3; DeepSeek-V3: fp32), clamped into ``[smallest_normal, max]`` of the
    scale format (torchao's NVFP4 and the TransformerEngine recipe clamp
    the same way; an all-zero block therefore gets the smallest normal, not
    a 0 that would make ``0/0``);

* ``overflow`` -- ``"saturate"`` (elements beyond the largest finite value
  become it; a block with an infinity gets the largest scale) or ``"nan"``
  (the element format's own overflow: NaN for e4m3fn and fnuz, inf for e5m2; a block
  holding an infinity gets a NaN scale).  fp6/fp4 have neither NaN nor inf,
  so they only saturate (OCP v1.0 section 5.3.3);
* ``tensor_scale`` -- NVFP4's second-level fp32 scale
  ``ts = amax(tensor) / (max_scale * max_elem)`` (torchao's
  ``per_tensor_amax_to_scale``); block scales are then ``amax / max_elem / ts``;
* ``scale_apply`` -- how elements are scaled: ``"divide"`` (``V / s``, DeepSeek-V3's
  ``act_quant``) or ``"reciprocal"`` (``V * (1 / s)`` with the reciprocal
  rounded to fp32 first, torchao's NVFP4 and the MSLK/Triton kernels; with
  a tensor scale ``V * ((1 / ts) / s)``).  For power-of-two scales the two
  give the same bits.

Arithmetic is float32 for float32 (and narrower) inputs -- the reference
implementations take bf16/fp32 -- and float64 for float64 inputs; every
step rounds once in that precision.  Special values (all explicit):

* an all-zero block: ``floor``/``rceil`` give the smallest scale 2**-127,
  ``amax`` the scale format's smallest normal; the elements are zeros of
  the input's signs;
* NaN anywhere in a block: the scale is NaN (E8M0 code 0xFF, a NaN of the
  other scale formats) and :func:`dequantize` gives NaN for the whole block
  (OCP v1.0 section 5.3: "if X is NaN, every value of the block is NaN");
  the stored elements of such a block are zeros;
* an infinity in a block: see ``overflow``;
* amax exactly a power of two 2**k: ``floor`` gives ``2**(k - emax_elem)``,
  ``rceil`` gives ``2**ceil(k - log2 max_elem)``; nothing is rounded;
* the scale clamps at E8M0's ends, 2**-127 and 2**127; from float32 input
  the top is never reached (``floor(log2 amax) <= 127`` and every element
  format has ``emax >= 2``), from float64 input it is;
* elements below the element format's smallest normal round onto its
  subnormals (every element format here has them).

Shapes whose last two axes are not multiples of the block are refused
(ValueError naming the shape and the block) unless ``pad=True``, which pads
with zeros (a zero never changes a block's amax) and crops on dequantize.

Sources: OCP Microscaling Formats (MX) Specification v1.0 (2023), sections
5 and 6.3; NVIDIA cuBLAS documentation, "1D Block Scaling Factors Layout"
and NVFP4; torchao 0.18 ``prototype/mx_formats`` (``to_mx``, ``nvfp4_quantize``);
DeepSeek-V3 technical report (2024), section 3.3.2 "fine-grained quantization"
and its ``inference/kernel.py`` (``act_quant``: ``s = amax / 448``, ``y = x / s``).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .._repr import Compact, array_summary
from ..bound_rules import expand_block_scales
from ..formats import FP32, Format
from ..rounding import round_to
from ..scaled_formats import (
    DEEPSEEK_1X128,
    DEEPSEEK_128X128,
    E8M0_MAX_EXP,
    E8M0_MIN_EXP,
    E8M0_NAN,
    ELEMENT_FORMATS,
    MXFP4,
    MXFP6_E2M3,
    MXFP6_E3M2,
    MXFP8_E4M3,
    MXFP8_E5M2,
    NVFP4,
    OVERFLOWS,
    SCALE_APPLY,
    SCALE_FORMATS,
    SCALE_RULES,
    SCALED_PRESETS,
    ScaledFormat,
    get_scaled_format,
)
from ._common import as_values, check_choice

__all__ = [
    "ScaledFormat",
    "Scaled",
    "SCALE_RULES",
    "SCALE_FORMATS",
    "OVERFLOWS",
    "SCALE_APPLY",
    "ELEMENT_FORMATS",
    "SCALED_PRESETS",
    "MXFP8_E4M3",
    "MXFP8_E5M2",
    "MXFP6_E2M3",
    "MXFP6_E3M2",
    "MXFP4",
    "NVFP4",
    "DEEPSEEK_1X128",
    "DEEPSEEK_128X128",
    "get_scaled_format",
    "quantize",
    "dequantize",
    "block_scales",
    "element_values",
    "E8M0_MIN_EXP",
    "E8M0_MAX_EXP",
    "E8M0_NAN",
    "quantize_kernel",
    "block_scale_kernel",
    "dequantize_kernel",
    "scaled_matmul_kernel",
    "quantize_ref",
    "block_scale_ref",
    "dequantize_ref",
    "scaled_matmul_ref",
    "infer_scaled",
    "element_storage",
    "scale_storage",
]

# ---------------------------------------------------------------------------
# the quantised tensor
# ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)  # holds arrays: compare their fields, not the objects
class Scaled(Compact):
    """A quantised tensor: ``elements`` (values of the element format, in a
    float container of the padded shape), ``scales`` (one per block, shape
    ``(..., rows / bm, cols / bn)``; NaN marks a NaN scale), ``tensor_scale``
    (fp32 number or None) and the original ``shape``."""

    fmt: ScaledFormat
    elements: np.ndarray
    scales: np.ndarray
    tensor_scale: float | None
    shape: tuple

    def _repr_facts(self):
        return (f"Scaled: {self.fmt.name}, shape {tuple(self.shape)}",
                [("elements", array_summary(self.elements)), ("scales", array_summary(self.scales)),
                 ("tensor scale", self.tensor_scale)])

    def dequant_scales(self) -> np.ndarray:
        """The scale each block's elements are multiplied by: the block scale, or
        with a tensor scale ``tensor_scale * scale`` rounded once (torchao's
        ``NVFP4Tensor.get_hp_scales``)."""
        s = self.scales
        if self.tensor_scale is None:
            return s
        W = s.dtype.type
        with np.errstate(all="ignore"):
            return (W(self.tensor_scale) * s).astype(W)

    def element_codes(self) -> np.ndarray:
        """The elements' bit patterns in ml_dtypes' storage dtype (uint8 codes)."""
        return self.elements.astype(self.fmt.elem_dtype).view(np.uint8)

    def scale_codes(self) -> np.ndarray:
        """The scales' bit patterns (uint8): E8M0 biased exponents (0xFF = NaN),
        e4m3 codes, or fp32 bit patterns (uint32)."""
        s = self.scales
        if self.fmt.scale_fmt == "e8m0":
            with np.errstate(invalid="ignore", divide="ignore"):
                e = np.where(np.isnan(s), 0, np.frexp(np.where(np.isnan(s), 1, s))[1] - 1)
            return np.where(np.isnan(s), E8M0_NAN, e + 127).astype(np.uint8)
        if self.fmt.scale_fmt == "fp8_e4m3":
            return s.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        return s.astype(np.float32).view(np.uint32)


def _work(x) -> np.ndarray:
    """``x`` in its working precision (:func:`numlab.kernels._common.as_values`:
    float32/float64 kept, narrower floats widened to float32, wider to float64)."""
    return as_values(x, "x")


def _blocked(a: np.ndarray, block, pad: bool) -> np.ndarray:
    """``a`` (rank >= 1; rank 1 is one row) as (..., R/bm, bm, C/bn, bn), padded if asked."""
    if a.ndim == 0:
        raise ValueError("x must have at least one axis; got a scalar")
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    bm, bn = block
    R, C = a2.shape[-2:]
    pr, pc = -R % bm, -C % bn
    if pr or pc:
        if not pad:
            raise ValueError(f"x of shape {a.shape} does not split into blocks {block}: the last two axes "
                             f"({R}, {C}) must be multiples of them; pass pad=True to pad with zeros")
        widths = [(0, 0)] * (a2.ndim - 2) + [(0, pr), (0, pc)]
        a2 = np.pad(a2, widths)
        R, C = R + pr, C + pc
    return a2.reshape(*a2.shape[:-2], R // bm, bm, C // bn, bn)


def _pow2(e: np.ndarray, W) -> np.ndarray:
    """2**e exactly in W (e an int array within -127..127: normal or, at -127 in
    float32, subnormal, both exact)."""
    return np.ldexp(W(1.0), e.astype(np.int32)).astype(W)


def _tensor_scale(fmt: ScaledFormat, amax_all, W):
    """NVFP4's fp32 tensor scale ``amax / (max_scale * max_elem)`` (torchao's
    ``per_tensor_amax_to_scale``; 448 * 6 = 2688 exactly), an fp32 number
    whatever the working precision; 1 when that is
    below fp32's smallest normal (an all-zero tensor would otherwise divide
    by 0, and 1/ts would overflow); fp32's largest finite value when float64
    input overflows it (an inf tensor scale would dequantise to inf * 0 = NaN)."""
    with np.errstate(over="ignore"):
        ts = np.float32(np.float32(amax_all) / np.float32(fmt.scale_format.max * fmt.max_elem))
    ts = min(ts, np.float32(FP32.max))
    return W(ts) if ts >= np.float32(FP32.smallest_normal) else W(1.0)


def _scales(fmt: ScaledFormat, amax: np.ndarray, ts, W):
    """(block scale, multiplier or divisor used to quantise, "mul" or "div") per block."""
    nan = np.isnan(amax)
    inf = np.isinf(amax)
    sat = fmt.overflow == "saturate"
    if fmt.scale_rule in ("floor", "rceil"):
        if fmt.scale_rule == "floor":
            m, e = np.frexp(amax)           # amax = m 2**e, 0.5 <= m < 1: floor(log2 amax) = e - 1
            e = e.astype(np.int64) - 1 - fmt.emax_elem
        else:
            d = (amax / W(fmt.max_elem)).astype(W)  # rounded once in W, as the hardware's fp32 input
            m, e = np.frexp(d)              # ceil(log2 d) = e - 1 when d is a power of two (m = 0.5)
            e = np.where(d == 0, E8M0_MIN_EXP, e.astype(np.int64) - (m == 0.5))  # d underflowed: round up
        e = np.where(amax == 0, E8M0_MIN_EXP, e)
        e = np.clip(e, E8M0_MIN_EXP, E8M0_MAX_EXP)
        e = np.where(inf | nan, E8M0_MAX_EXP, e)
        s = _pow2(e, W)
        q = _pow2(-e, W)                    # exact reciprocal: scale by multiplying
        bad = nan | (inf & (not sat))
        s = np.where(bad, W(np.nan), s)
        q = np.where(bad, W(0), q)
        return s, q, "mul"
    sf = fmt.scale_format
    s = (amax / W(fmt.max_elem)).astype(W)
    if ts is not None:
        s = (s / W(ts)).astype(W)
    if not sat:
        s = np.where(inf, W(np.nan), s)
    s = np.clip(s, W(sf.smallest_normal), W(sf.max)).astype(W)  # clip keeps NaN
    if sf is not FP32 or W == np.float64:
        s = np.asarray(round_to(s, sf), dtype=W)
    finite = np.isfinite(s)
    if fmt.scale_apply == "reciprocal":
        one = W(1.0)
        r = (one / W(ts)).astype(W) if ts is not None else one
        q = (r / np.where(finite, s, one)).astype(W)
        q = np.where(finite, q, W(0))
        how = "mul"
    else:
        q = (s * W(ts)).astype(W) if ts is not None else s
        q = np.where(finite, q, W(1))
        how = "div"
    return s, q, how


def quantize(x, fmt, *, pad: bool = False) -> Scaled:
    """Quantise ``x`` to the block-scaled format ``fmt`` (a :class:`ScaledFormat`
    or a preset name of :data:`SCALED_PRESETS`).

    Vectorised: the last two axes are reshaped into blocks (rank 1 is one
    row); leading axes are batch axes.  ``pad=True`` zero-pads shapes that
    are not multiples of the block (see the module docstring for every rule
    and special value).  Returns a :class:`Scaled`.
    """
    fmt = get_scaled_format(fmt)
    a = _work(x)
    W = a.dtype.type
    b = _blocked(a, fmt.block, pad)
    with np.errstate(all="ignore"):
        amax = np.max(np.abs(b), axis=(-3, -1), keepdims=True)  # NaN propagates
        ts = None
        if fmt.tensor_scale:  # over the finite blocks: NaN and inf blocks follow their own rules
            finite = amax[np.isfinite(amax)]
            ts = _tensor_scale(fmt, np.max(finite) if finite.size else W(0), W)
        s, q, how = _scales(fmt, amax, ts, W)
        v = b * q if how == "mul" else b / q
        v = v.astype(W, copy=False)
        e = round_to(v, fmt.elem_format, saturate=fmt.overflow == "saturate")
        e = np.where(np.isnan(s), W(0), e)  # a NaN block stores +0 (the scale is NaN; fnuz has no -0)
    e = np.asarray(e, dtype=W)
    R, C = b.shape[-4] * b.shape[-3], b.shape[-2] * b.shape[-1]
    elements = e.reshape(*b.shape[:-4], R, C)
    scales = s.reshape(*s.shape[:-4], s.shape[-4], s.shape[-2])
    return Scaled(fmt, elements, scales, None if ts is None else float(ts), tuple(np.shape(x)))


def dequantize(q: Scaled) -> np.ndarray:
    """The values of a :class:`Scaled` tensor: ``element * scale`` per block, in
    the precision the elements are held in (one rounding; exact for power-of-two
    scales unless the product leaves the range), cropped to the original shape;
    NaN for every element of a block whose scale is NaN."""
    fmt = q.fmt
    bm, bn = fmt.block
    e = q.elements
    W = e.dtype.type
    R, C = e.shape[-2:]
    b = e.reshape(*e.shape[:-2], R // bm, bm, C // bn, bn)
    s = q.dequant_scales().astype(W)
    s = s.reshape(*s.shape[:-2], R // bm, 1, C // bn, 1)
    with np.errstate(all="ignore"):
        v = (b * s).astype(W).reshape(e.shape)
    shape = q.shape if len(q.shape) >= 2 else (1, *q.shape)
    v = v[(..., slice(0, shape[-2]), slice(0, shape[-1]))]
    return v.reshape(q.shape)


def block_scales(x, fmt, *, pad: bool = False) -> np.ndarray:
    """The dequantisation scale of each block of ``x`` (:meth:`Scaled.dequant_scales`:
    with NVFP4's tensor scale, tensor scale times block scale rounded once),
    shape ``(..., rows / bm, cols / bn)``."""
    return quantize(x, fmt, pad=pad).dequant_scales()


def element_values(fmt) -> np.ndarray:
    """Every finite non-negative value of an element format (a name of
    :data:`ELEMENT_FORMATS` or a ScaledFormat), ascending, from ml_dtypes'
    codes (independent of the rounding code)."""
    if not isinstance(fmt, ScaledFormat):
        check_choice("fmt", fmt, ELEMENT_FORMATS)
    name = fmt.elem if isinstance(fmt, ScaledFormat) else fmt
    f = ELEMENT_FORMATS[name]
    codes = np.arange(1 << (f.bits - 1), dtype=np.uint8)
    dt = f.dtype
    v = codes.view(dt).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


# ---------------------------------------------------------------------------
# graph operators: engine kernels and float64 references (registered in
# numlab.ops, "block-scaled operators" section; rules in numlab.bound_rules)
# ---------------------------------------------------------------------------
def _f32(x) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype == np.float32 else a.astype(np.float32)


def quantize_kernel(ctx, x, *, fmt):
    """Engine kernel of ``quantize``: the elements of ``x`` (values of the
    element format, float32).  The op's meaning rounds (as ``cast``);
    ``ctx`` does not change a bit."""
    return quantize(_f32(x), fmt).elements


def block_scale_kernel(ctx, x, *, fmt):
    """Engine kernel of ``block_scale``: each block's dequantisation scale (float32)."""
    return block_scales(_f32(x), fmt)


def dequantize_kernel(ctx, q, s, *, fmt):
    """Engine kernel of ``dequantize``: ``q * s`` per block, the product rounded
    to ``ctx.inner`` (fp32 in a fused block; S in a one-operator kernel under
    ``promotion=native``)."""
    return ctx.mul(_f32(q), expand_block_scales(_f32(s), np.shape(q)))


def scaled_matmul_kernel(ctx, qa, sa, qb, sb, *, fmt_a, fmt_b):
    """Engine kernel of ``scaled_matmul`` (DeepSeek-V3's fp8 GEMM): per block
    of K (the operands' common block length along K), the product of the
    elements by ``ctx.matmul`` (the spec's matmul order and accumulator, or
    its matrix unit when the spec names one: ``KernelSpec.mma``),
    then in the epilogue ``(p * sa) * sb`` added to the output, each step
    rounded to ``ctx.inner`` (their Triton kernel:
    ``acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]``).  Loops over K
    blocks only."""
    qa, sa, qb, sb = _f32(qa), _f32(sa), _f32(qb), _f32(sb)
    K = qa.shape[-1]
    kb = K // sa.shape[-1]
    sa_full = expand_block_scales(sa, (qa.shape[0], sa.shape[-1]))  # (M, K/kb): rows expanded
    sb_full = expand_block_scales(sb, (sb.shape[0], qb.shape[1]))  # (K/kb, N): columns expanded
    out = None
    for j in range(K // kb):
        p = ctx.matmul(qa[:, j * kb:(j + 1) * kb], qb[j * kb:(j + 1) * kb, :])
        t = ctx.mul(ctx.mul(p, sa_full[:, j:j + 1]), sb_full[j:j + 1, :])
        out = t if out is None else ctx.add(out, t)
    return out


def element_storage(attrs) -> Format:
    """Where a ``quantize`` node's output lives between kernels
    (``OpInfo.stored_fmt``): its element format (``fp8_e4m3`` for
    ``deepseek_1x128``, ``fp4_e2m1`` for ``nvfp4``, ...), as the fp8/fp4 tensor a
    real quantisation kernel writes, whatever the run's storage format S."""
    return get_scaled_format(attrs["fmt"]).elem_format


def scale_storage(attrs) -> Format:
    """Where a ``block_scale`` node's output lives between kernels
    (``OpInfo.stored_fmt``): fp32, for every scale format.  DeepSeek-V3's
    ``act_quant`` returns its scales as an fp32 tensor and torchao keeps
    NVFP4's ``tensor_scale * scale`` in fp32; E8M0 and e4m3 scales are exact in
    fp32 (2**-127 is an fp32 subnormal), so the stored value is the kernel's
    value for every preset.  Storing them in a bf16/fp16 S would round an fp32
    scale (DeepSeek's ``amax / 448``) and, in fp16, flush or overflow power-of-two
    scales beyond 2**-24..2**15."""
    get_scaled_format(attrs["fmt"])  # a bad name is refused here as in the operator
    return FP32


def quantize_ref(x, *, fmt):
    """float64 reference of ``quantize``: the rule evaluated on float64 values
    (exact for the E8M0 rules; for ``amax`` rules the quotient amax/max_elem
    is rounded to float64 before the scale format)."""
    return quantize(np.asarray(x, dtype=np.float64), fmt).elements


def block_scale_ref(x, *, fmt):
    """float64 reference of ``block_scale`` (as :func:`quantize_ref`)."""
    return block_scales(np.asarray(x, dtype=np.float64), fmt)


def dequantize_ref(q, s, *, fmt):
    """float64 reference of ``dequantize``: ``q * s`` (exact in float64)."""
    q = np.asarray(q, dtype=np.float64)
    return q * expand_block_scales(np.asarray(s, dtype=np.float64), q.shape)


def scaled_matmul_ref(qa, sa, qb, sb, *, fmt_a, fmt_b):
    """float64 reference of ``scaled_matmul``: ``(qa sa) @ (qb sb)`` (float64 BLAS)."""
    return dequantize_ref(qa, sa, fmt=fmt_a) @ dequantize_ref(qb, sb, fmt=fmt_b)


def infer_scaled(op, shapes, attrs):
    """Shape rule of the block-scaled operators (``op`` one of ``quantize``,
    ``block_scale``, ``dequantize``, ``scaled_matmul``): canonical attributes
    (format names) and the output shape; errors name the shapes and blocks."""
    names = ("fmt_a", "fmt_b") if op == "scaled_matmul" else ("fmt",)
    fmts = []
    for k in names:
        f = get_scaled_format(attrs[k], k)
        attrs[k] = f.name
        fmts.append(f)
    x = shapes[0]
    if len(x) < 2:
        raise ValueError(f"{op} needs a tensor of rank >= 2 (blocks span the last two axes), got shape {x}")
    bm, bn = fmts[0].block
    if op in ("quantize", "block_scale"):
        if x[-2] % bm or x[-1] % bn:
            raise ValueError(f"shape {x} does not split into blocks {fmts[0].block} of {fmts[0].name}")
        return attrs, (x if op == "quantize" else (*x[:-2], x[-2] // bm, x[-1] // bn))
    if op == "dequantize":
        want = (*x[:-2], x[-2] // bm, x[-1] // bn)
        if x[-2] % bm or x[-1] % bn or tuple(shapes[1]) != want:
            raise ValueError(f"dequantize of elements {x} in blocks {fmts[0].block} needs scales of shape {want}, "
                             f"got {tuple(shapes[1])}")
        return attrs, x
    qa, sa, qb, sb = (tuple(s) for s in shapes)
    fa, fb = fmts
    if len(qa) != 2 or len(qb) != 2 or qa[1] != qb[0]:
        raise ValueError(f"scaled_matmul needs (M, K) @ (K, N) elements, got {qa} and {qb}")
    if fa.block[1] != fb.block[0]:
        raise ValueError(f"scaled_matmul needs the same block length along K: fmt_a={fa.name} has {fa.block[1]}, "
                         f"fmt_b={fb.name} has {fb.block[0]} (use a transposed format for b)")
    for q, s, f in ((qa, sa, fa), (qb, sb, fb)):
        want = (q[0] // f.block[0], q[1] // f.block[1])
        if q[0] % f.block[0] or q[1] % f.block[1] or s != want:
            raise ValueError(f"scaled_matmul: elements {q} in blocks {f.block} ({f.name}) need scales {want}, got {s}")
    return attrs, (qa[0], qb[1])
