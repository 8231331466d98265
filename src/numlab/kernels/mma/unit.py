"""A parameterised model of a matrix unit's multiply-accumulate (tensor core, matrix core).

``mma(a, b, unit, c=None)`` computes ``D = A B + C`` the way a matrix unit
does, with the numerical features that Fasi, Higham, Mikaitis and Pranesh
("Numerical behavior of NVIDIA tensor cores", PeerJ Comput. Sci. 7:e330,
2021) and Khattak and Mikaitis ("Accurate Models of NVIDIA Tensor Cores",
arXiv:2512.07004; "Generalized Methodology for Determining Numerical Features
of Hardware Floating-Point Matrix Multipliers: Part I", IEEE HPEC 2025)
measured, as the parameters of a :class:`MatrixUnit`.

The algorithm (one *block FMA*, the unit's inner operation)
-----------------------------------------------------------
It follows the public MATLAB models of Khattak and Mikaitis
(github.com/north-numerical-computing/MATLAB-tensor-core, ``models/tools/GEMM.m``
and ``models/tools/Generic_BFMA_TC.m`` at commit 109e412; the repository
publishes no licence file, so the algorithm is reimplemented from its
description and no code is copied):

1. K is cut into blocks of ``fma_size`` (``fma_size * interleave``) terms,
   zero-padded at the end.  D starts at C and each block updates it,
   ``C <- block(A[:, k-block], B[k-block, :], C)`` (recursive summation of
   block results, ``GEMM.m``).
2. Products are exact (at most 2p bits; fp16/tf32: 22 bits).
3. Alignment.  The anchor exponent of a product is the *sum of its input
   exponents* ``e_a + e_b`` (input exponents of subnormals clamped to the
   input format's ``emin``, or their true exponents: ``subnormal_anchor``), the anchor of C its own exponent (fp32 exponent,
   clamped at -126); the block's anchor ``E`` is the largest anchor of a
   nonzero term.  Every term is rounded (by ``align_rounding``; hardware:
   truncation of the magnitude, ``"rtz"``) to a multiple of
   ``2**(E - 23 - align_bits)``: the 23 fraction bits of an fp32 significand
   plus ``align_bits`` extra alignment bits (``neab`` in the MATLAB code).  A
   product whose significand is in [2, 4) (a carry out of the multiplier) is
   *not* given fewer fraction bits: the models add one bit in that case
   (``special_case``/``spcFlag``), which is the same as anchoring at
   ``e_a + e_b``.  With ``align_rounding="sticky"`` one more bit is kept that
   is the OR of every bit shifted out of that term (``stkbitenabled``).
4. The aligned terms are added exactly (enough carry bits: ``carry_bits``
   None), normalised once, and rounded to the block's result format
   (``out_fmt``, or ``result_bits`` significand bits with out_fmt's exponent
   range) with ``final_rounding`` (``"rtz"`` on NVIDIA with fp32 output,
   ``"rne"`` with fp16 output), with gradual underflow when ``subnormals``.
   A result at or above ``2**(emax + 1)`` becomes +-inf (as the models do).
5. Interleaving (``interleave=2``, fp8 on Hopper/Blackwell, ``inter_pattern``
   in ``GEMM.m``): a block of ``2 fma_size`` products is split into two
   sub-vectors, elements ``j`` with ``j mod 4 < 2`` and the others; the first
   is summed as in 3-4 without C, the second with the first's result as its C
   term, and the result is added to C with round-to-nearest-even and
   ``join_bits`` (2) extra bits plus a sticky bit (``cOutRoundMode``).
6. Promotion (DeepSeek-V3 technical report, section 3.3.2): with
   ``promote_every = N_C`` the unit accumulates into a fresh partial sum and,
   every ``N_C`` products, the partial sum is added to an fp32 accumulator
   held in CUDA cores (IEEE fp32 add, round to nearest even) and reset.
7. Special values (``GEMM.m``): NaN in any product or C gives NaN, as do
   +inf and -inf together (including ``inf * 0``); otherwise an infinite
   product or C gives that infinity; once a block result overflows to
   +-inf it stays (a block holding inf returns the sum).  An exact zero sum
   is +0.

Where the published MATLAB code has two versions of a step, this module
follows the ``fpbits_IEEE2`` path of ``Generic_BFMA_TC.m`` (@010be9f): a product
of subnormal inputs is anchored at its nominal (clamped) exponent sum
(``subnormal_anchor="true"`` takes the true exponents, as the authors' C port
does; the older ``fpbits_IEEE`` path mixes the two), and a
block with a single nonzero term is aligned like any other (the older code
rounds a lone term directly).  The two differ only for subnormal inputs and
for lone terms under ``align_bits < 0``.  The fixed-point sum is held in
float64: every aligned term is an integer below ``2**(27 + align_bits)``,
and :class:`MatrixUnit` refuses parameters whose block sum could exceed
``2**53``, so every sum is exact.

Vectorised over M and N: per K block the products are formed for a chunk of
rows at once (``(block, rows, N)`` float64 arrays; a product of two inputs of
at most 11 bits is exact in float64).  Python loops run only over K blocks
and row chunks.  With numba installed, :mod:`numlab.kernels.mma._numba`
runs the same algorithm compiled (``engine``; the bits are the same, tested).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ... import accel
from ...formats import FP16, Format, get_format
from .._common import check_choice, round_to

__all__ = ["MatrixUnit", "mma", "IN_FORMATS", "OUT_FORMATS", "ALIGN_ROUNDINGS",
           "FINAL_ROUNDINGS", "SUBNORMAL_ANCHORS", "ENGINES"]

IN_FORMATS = ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16", "tf32")
"""Input formats of A and B."""
OUT_FORMATS = ("fp32", "fp16")
"""Formats of C and D."""
ALIGN_ROUNDINGS = ("rtz", "down", "rne", "sticky")
"""How the bits of a term shifted below the alignment window are dropped:
``rtz`` truncates the magnitude (NVIDIA, Fasi et al. 2021, section 5);
``down`` truncates the two's-complement value (toward -inf); ``rne`` rounds
each term to nearest even; ``sticky`` truncates and keeps one extra bit that
is the OR of the bits shifted out (MATLAB ``stkbitenabled``)."""
FINAL_ROUNDINGS = ("rtz", "rne", "up", "down")
"""Rounding of a block's normalised sum to the result format."""

SUBNORMAL_ANCHORS = ("clamped", "true")
"""The exponent a subnormal input contributes to a product's anchor:
``clamped`` = the input format's emin (what its exponent field encodes;
``fpbits_IEEE2`` in ``Generic_BFMA_TC.m`` @010be9f); ``true`` =
``floor(log2|x|)`` (``frexp`` in the authors' C port,
``models/tools/C/src/block_fma_nv.c``).  Normal inputs: the same either way."""

_FRAC_BITS = 23
"""Fraction bits of the alignment window before ``align_bits``: the MATLAB
models hold products and C as fp32 significands (``NoManBitsPrd = 23``)."""


def _is_int(v) -> bool:
    """An int (Python or numpy), not a bool."""
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


@dataclass(frozen=True)
class MatrixUnit:
    """The numerical features of one matrix unit for one input/output format pair.

    Parameters
    ----------
    in_fmt : {"fp8_e4m3", "fp8_e5m2", "fp16", "bf16", "tf32"}
        Format of A and B (default ``"fp16"``).  Inputs must hold values of
        this format (round them first with :func:`numlab.round_to`).
    out_fmt : {"fp32", "fp16"}
        Format of C, of every block result and of D (default ``"fp32"``).
    fma_size : int
        Products per block FMA, i.e. terms added before one normalisation
        (Khattak and Mikaitis: "FMA size"; V100 4, A100 8, H100/B200 16 for
        fp16).  Default 4.
    align_bits : int
        Extra alignment bits: terms are kept to ``23 + align_bits`` fraction
        bits below the block's anchor exponent (MATLAB ``neab``).  Fasi et
        al. (2021, section 5) and the models find 0 on V100, 1 on A100, 2 on
        H100/B200; -10 (13 bits) for fp8 on Ada/L40S/H100.  Default 0.
    carry_bits : int or None
        Integer bits above the anchor available to the aligned sum.  None
        (default): enough never to overflow, which is what every published
        model assumes and what the HPEC carry-bit test measures on the A30
        (3 bits for 8 fp16 products = all that 8 terms can need).  An int
        ``c`` is a hypothetical narrower register (no published unit has
        one): the magnitude of the sum is kept modulo ``2**(anchor + 1 + c)``,
        i.e. carries out of the register are lost; the HPEC carry test then
        detects ``c``.
    align_rounding : {"rtz", "down", "rne", "sticky"}
        How bits shifted out of the alignment window are dropped (see
        :data:`ALIGN_ROUNDINGS`).  Default ``"rtz"`` (truncation).
    final_rounding : {"rtz", "rne", "up", "down"}
        Rounding of the normalised block sum to the result format.
        Default ``"rtz"``.
    subnormals : bool
        Subnormal inputs and results are kept (True, default, every NVIDIA
        unit measured) or flushed to zero.
    subnormal_anchor : {"clamped", "true"}
        The exponent of a subnormal input in its product's anchor (see
        :data:`SUBNORMAL_ANCHORS`; the authors' MATLAB and C models differ
        here and no published measurement decides).  Default ``"clamped"``.
        Changes bits only with subnormal inputs, so ``"true"`` is refused
        with ``subnormals=False`` (inputs flushed).
    interleave : {1, 2}
        1: a block is ``fma_size`` consecutive products.  2: a block is
        ``2 fma_size`` products summed as two interleaved sub-vectors (module
        docstring, step 5; H100/B200 fp8).  Default 1.
    join_bits : int
        Extra bits (plus one sticky bit) of the round-to-nearest-even
        addition that joins an interleaved block to C (MATLAB: 2; default 2).
        Used only with ``interleave=2``; another value with ``interleave=1``
        is refused (it would change no bit).
    result_bits : int or None
        Significand bits of block results, when narrower than ``out_fmt``'s
        (fp8 on Ada/L40S/H100 with fp32 output: 14, i.e. 23 + neab = 13
        fraction bits, ``GEMM.m`` special case 2; DeepSeek-V3 section 3.3.2
        estimates "around 14 bits" on H800); None = ``out_fmt``'s.
    nan_bits : int or None
        The bit pattern of a NaN result (``out_fmt``'s width), e.g.
        ``0x7FFFFFFF``, the NaN a B200 returns (measured words of
        sf-tensor/tcgen05); None (default): numpy's quiet NaN (the models
        give NaN, not its payload).
    promote_every : int or None
        N_C: products accumulated in the unit before the partial sum is added
        to an fp32 accumulator in CUDA cores (DeepSeek-V3, section 3.3.2;
        they use 128).  Must be a multiple of the block length.  None
        (default): never, the unit accumulates all of K.
    name : str
        Label, e.g. ``"H100/fp16/fp32"`` (not a numerical feature).
    source : str
        Where the parameters come from (file and section).
    evidence : str
        ``"measured"`` when the preset reproduces outputs measured on the GPU
        (with the share matched), else ``"parameters only"``.
    """

    in_fmt: str = "fp16"
    out_fmt: str = "fp32"
    fma_size: int = 4
    align_bits: int = 0
    carry_bits: int | None = None
    align_rounding: str = "rtz"
    final_rounding: str = "rtz"
    subnormals: bool = True
    subnormal_anchor: str = "clamped"
    interleave: int = 1
    join_bits: int = 2
    result_bits: int | None = None
    nan_bits: int | None = None
    promote_every: int | None = None
    name: str = field(default="custom", compare=False)
    source: str = field(default="", compare=False)
    evidence: str = field(default="parameters only", compare=False)

    def __post_init__(self) -> None:
        check_choice("in_fmt", self.in_fmt, IN_FORMATS)
        check_choice("out_fmt", self.out_fmt, OUT_FORMATS)
        check_choice("align_rounding", self.align_rounding, ALIGN_ROUNDINGS)
        check_choice("final_rounding", self.final_rounding, FINAL_ROUNDINGS)
        check_choice("interleave", self.interleave, (1, 2))
        check_choice("subnormal_anchor", self.subnormal_anchor, SUBNORMAL_ANCHORS)
        if isinstance(self.interleave, bool):
            raise ValueError(f"interleave={self.interleave!r} is not valid; valid choices: [1, 2]")
        if not isinstance(self.subnormals, bool | np.bool_):
            raise ValueError(f"subnormals={self.subnormals!r} is not valid; it must be a bool")
        for name, lo in (("fma_size", 1), ("join_bits", 0)):
            v = getattr(self, name)
            if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name}={v!r} is not valid; it must be an int >= {lo}")
        if self.subnormal_anchor == "true" and not self.subnormals:
            raise ValueError("subnormal_anchor='true' changes no bit with subnormals=False (subnormal "
                             "inputs are flushed); leave it at its default 'clamped'")
        if self.interleave == 1 and self.join_bits != 2:
            raise ValueError(f"join_bits={self.join_bits!r} changes no bit here: it sets the join of an "
                             "interleaved block (interleave=2); with interleave=1 leave it at its default 2")
        if not _is_int(self.align_bits) or not -20 <= self.align_bits <= 24:
            raise ValueError(f"align_bits={self.align_bits!r} is not valid; "
                             "it must be an int in [-20, 24]")
        # every aligned term is an integer below 2**(23 + align_bits + 3) (sticky: one
        # bit more); their sum over the block and C must stay exact in float64
        need = 23 + self.align_bits + 4 + int(self.fma_size * self.interleave).bit_length()
        if need > 53:
            raise ValueError(f"align_bits={self.align_bits} with fma_size={self.fma_size} "
                             f"needs {need} bits of exact sum; the model holds 53 "
                             "(lower align_bits or fma_size)")
        if self.carry_bits is not None and (not _is_int(self.carry_bits) or not 0 <= self.carry_bits <= 12):
            raise ValueError(f"carry_bits={self.carry_bits!r} is not valid; "
                             "it must be None or an int in [0, 12]")
        p_out = get_format(self.out_fmt).p
        if self.result_bits is not None and (not _is_int(self.result_bits) or not 2 <= self.result_bits <= p_out):
            raise ValueError(f"result_bits={self.result_bits!r} is not valid; "
                             f"it must be None or an int in [2, {p_out}]")
        if self.nan_bits is not None:
            fo = get_format(self.out_fmt)
            frac = (1 << (fo.p - 1)) - 1
            ok = _is_int(self.nan_bits) and 0 <= self.nan_bits < (1 << fo.bits)
            if not ok or self.nan_bits & fo.exponent_mask != fo.exponent_mask or not self.nan_bits & frac:
                example = "0x7FFFFFFF" if self.out_fmt == "fp32" else "0x7E00"
                raise ValueError(f"nan_bits={self.nan_bits!r} is not valid; it must be None or the "
                                 f"{fo.bits}-bit pattern of a {self.out_fmt} NaN (exponent all ones, "
                                 f"fraction nonzero), e.g. {example}; changing out_fmt of a unit "
                                 "with nan_bits needs nan_bits too (None: numpy's NaN)")
        if self.promote_every is not None:
            blk = self.block
            if not _is_int(self.promote_every) or self.promote_every < blk or self.promote_every % blk:
                raise ValueError(f"promote_every={self.promote_every!r} is not valid; it must "
                                 f"be None or a positive multiple of the block length {blk}")

    @property
    def block(self) -> int:
        """Products consumed per block call (``fma_size * interleave``)."""
        return self.fma_size * self.interleave

    @property
    def result_format(self) -> Format:
        """The format of block results (``out_fmt``, narrowed by ``result_bits``)."""
        out = get_format(self.out_fmt)
        if self.result_bits is None or self.result_bits == out.p:
            return out
        return Format(f"{out.name}_p{self.result_bits}", self.result_bits, out.emax,
                      emin=out.emin, subnormals=out.subnormals)

    @property
    def anchor_emin(self) -> int:
        """The floor of an input exponent in a product's anchor: the input
        format's emin (``subnormal_anchor="clamped"``), or -1022, below every
        input value's exponent (``"true"``)."""
        return get_format(self.in_fmt).emin if self.subnormal_anchor == "clamped" else -1022

    def replace(self, **changes) -> "MatrixUnit":
        """A copy with some fields changed (validated)."""
        return replace(self, **changes)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def _values(x, fmt: Format, name: str, flush: bool) -> np.ndarray:
    """``x`` as float64 values of ``fmt`` (ValueError naming ``name`` if not),
    or as the float16 array it is (fp16).  An array stored in ``fmt``'s own
    dtype holds its values by construction."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "fV" or (arr.dtype.kind == "V" and arr.dtype.itemsize > 2):
        raise TypeError(f"{name} must be a floating-point array, got dtype {arr.dtype}")
    if arr.dtype == np.float16 and fmt.name == "fp16":
        # held as they are (no float64 copy of a large fp16 input): the
        # numba path reads their bits, the numpy path converts them
        v = arr
    else:
        v = arr.astype(np.float64)
    if fmt.dtype is None or arr.dtype != fmt.dtype:
        w = np.where(np.isfinite(v), v, 0.0)
        bad = np.flatnonzero(round_to(w, fmt, "rne") != w)
        if bad.size:
            raise ValueError(
                f"{name} holds {v.flat[bad[0]]!r}, which is not a {fmt.name} value; round the "
                f"input first, e.g. numlab.round_to({name}, {fmt.name!r})")
    if flush:
        v = np.where(np.abs(v) < fmt.smallest_normal, 0.0 * v, v)
    return v


def _anchor_pow2(v: np.ndarray, emin: int) -> np.ndarray:
    """``2**max(floor(log2|v|), emin)`` for nonzero finite v, 0 for zero.

    Read from the float64 exponent field (every value of the formats here is
    a normal float64), so no frexp/ldexp."""
    v = np.ascontiguousarray(v, dtype=np.float64)
    e = (v.view(np.int64) >> 52) & 0x7FF
    np.maximum(e, emin + 1023, out=e)
    out = (e << 52).view(np.float64)
    out[v == 0] = 0.0
    return out


def _align(t: np.ndarray, scale: np.ndarray, how: str) -> np.ndarray:
    """Terms ``t`` (float64) in units of the window's last bit (``t * scale``,
    exact), rounded to integers by ``how``; ``sticky`` returns twice the
    truncated value plus the sticky bit (units of half the last bit)."""
    x = t * scale
    if how == "rtz":
        return np.trunc(x, out=x)
    if how == "down":
        return np.floor(x, out=x)
    if how == "rne":
        return np.rint(x, out=x)
    tr = np.trunc(x)
    return 2.0 * tr + np.sign(x) * (x != tr)


def _finish(s: np.ndarray, unit_lsb: np.ndarray, fmt: Format, rounding: str,
            flush: bool) -> np.ndarray:
    """Round the exact sum ``s * unit_lsb`` (float64) to ``fmt`` by ``rounding``;
    at or above ``2**(emax+1)`` the result is +-inf."""
    v = s * unit_lsb + 0.0  # an exact zero sum is +0 (as in the MATLAB model)
    out = round_to(v, fmt, rounding, ftz=flush)
    big = np.abs(v) >= np.ldexp(1.0, fmt.emax + 1)
    if big.any():
        out = np.where(big, np.copysign(np.inf, v), out)
    return out


def _stage(p: np.ndarray, q: np.ndarray, c: np.ndarray | None, unit: MatrixUnit,
           fmt: Format, flush: bool) -> np.ndarray:
    """One block FMA: products ``p`` (terms, rows, N; possibly no terms) with
    anchors ``q`` (``2**(e_a + e_b)``, 0 for zero products), plus ``c``
    (rows, N) or None; returns the block result (float64 values of ``fmt``).
    An infinite or NaN ``c`` (an earlier overflow) passes through."""
    amax = q.max(axis=0, initial=0.0)
    bad = c_in = None
    if c is not None:
        bad, c_in = ~np.isfinite(c), c
        if bad.any():
            c = np.where(bad, 0.0, c)
        amax = np.maximum(amax, _anchor_pow2(c, -126))
    nz = amax > 0
    width = _FRAC_BITS + unit.align_bits
    scale = np.where(nz, np.ldexp(1.0, width) / np.where(nz, amax, 1.0), 0.0)
    t = _align(p, scale, unit.align_rounding)
    s = t.sum(axis=0)
    if c is not None:
        s += _align(c, scale, unit.align_rounding)
    lsb = np.where(nz, 1.0 / np.where(nz, scale, 1.0), 0.0)
    if unit.align_rounding == "sticky":
        lsb = lsb * 0.5
    if unit.carry_bits is not None:
        # the register holds 1 + carry_bits integer bits above the anchor: the
        # sum is kept modulo 2**(width + 1 + carry_bits) window units (sign-magnitude)
        mod = 2.0 ** (width + 1 + unit.carry_bits + (unit.align_rounding == "sticky"))
        s = np.copysign(np.fmod(np.abs(s), mod), s)
    out = _finish(s, lsb, fmt, unit.final_rounding, flush)
    if bad is not None and bad.any():
        out = np.where(bad, c_in, out)
    return out


def _join(d: np.ndarray, c: np.ndarray, unit: MatrixUnit, fmt: Format) -> np.ndarray:
    """Round-to-nearest-even addition ``d + c`` with the interleaved models'
    window (``fmt.p - 1 + join_bits`` fraction bits plus a sticky bit,
    aligned to the larger operand's exponent); inf/NaN operands give ``d + c``."""
    fin = np.isfinite(d) & np.isfinite(c)
    d0, c0 = np.where(fin, d, 0.0), np.where(fin, c, 0.0)
    amax = np.maximum(_anchor_pow2(d0, -126), _anchor_pow2(c0, -126))
    nz = amax > 0
    scale = np.where(nz, np.ldexp(1.0, fmt.p - 1 + unit.join_bits) / np.where(nz, amax, 1.0), 0.0)
    s = _align(d0, scale, "sticky") + _align(c0, scale, "sticky")
    lsb = np.where(nz, 0.5 / np.where(nz, scale, 1.0), 0.0)
    out = _finish(s, lsb, fmt, "rne", not unit.subnormals)
    return out if fin.all() else np.where(fin, out, d + c)


def _specials(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mask, value) of the entries of D decided by NaN/inf in A, B or C
    (``GEMM.m``: NaN anywhere, or +inf with -inf, gives NaN; else the inf)."""
    def ind(x):
        return x.astype(np.float64)
    an, bn = np.isnan(a), np.isnan(b)
    ai, bi = np.isinf(a), np.isinf(b)
    az, bz = (a == 0), (b == 0)
    nan = an.any(axis=1)[:, None] | bn.any(axis=0)[None, :] | np.isnan(c)
    nan |= (ind(ai) @ ind(bz) + ind(az) @ ind(bi)) > 0
    ap, am = (a > 0) & ~an, (a < 0) & ~an
    bp, bm = (b > 0) & ~bn, (b < 0) & ~bn
    api, ami, bpi, bmi = ai & ap, ai & am, bi & bp, bi & bm
    pinf = (ind(api) @ ind(bp) + ind(ami) @ ind(bm) + ind(ap) @ ind(bpi) + ind(am) @ ind(bmi)) > 0
    ninf = (ind(api) @ ind(bm) + ind(ami) @ ind(bp) + ind(ap) @ ind(bmi) + ind(am) @ ind(bpi)) > 0
    pinf |= c == np.inf
    ninf |= c == -np.inf
    nan |= pinf & ninf
    val = np.where(nan, np.nan, np.where(pinf, np.inf, -np.inf))
    return nan | pinf | ninf, val


_CHUNK_ELEMS = 1 << 18
"""Target size of one (terms, rows, N) work array (float64 elements)."""


ENGINES = ("auto", "numpy", "numba")
"""Implementations of :func:`mma`: the numpy path, the optional compiled numba
path (:mod:`numlab.kernels.mma._numba`: units with ``interleave == 1`` and
``carry_bits is None``; the same bits, tested), and ``auto`` = numba when it
is installed, applies, and ``M N K >= 2**24`` (where its one-off compilation,
about 15 s and then cached on disk, pays off), else numpy."""

_NUMBA_MIN_WORK = 1 << 24


def mma(a, b, unit: MatrixUnit, c=None, *, engine: str = "auto") -> np.ndarray:
    """``D = A B + C`` computed by the matrix unit ``unit``.

    Parameters
    ----------
    a : array_like, shape (M, K)
        Values of ``unit.in_fmt`` (any float container; ValueError if a value
        is not representable).
    b : array_like, shape (K, N)
        Values of ``unit.in_fmt``.
    unit : MatrixUnit
        The unit's parameters (see :mod:`numlab.kernels.mma.presets`).
    c : array_like, shape (M, N), optional
        Initial accumulator, values of ``unit.out_fmt``; default zeros.
    engine : {"auto", "numpy", "numba"}
        Which implementation runs (:data:`ENGINES`); the bits are the same.

    Returns
    -------
    ndarray, shape (M, N)
        float32 for ``out_fmt="fp32"``, float16 for ``"fp16"``.

    The algorithm is described in the module docstring.
    """
    if not isinstance(unit, MatrixUnit):
        raise TypeError(f"unit must be a MatrixUnit, got {type(unit).__name__}")
    check_choice("engine", engine, ENGINES)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _mma(a, b, unit, c, engine)


def _numba_module():
    """numlab.kernels.mma._numba, or None when numba is not installed or ``NUMLAB_ACCEL=0``."""
    if accel.numba_module() is None:
        return None
    try:
        from . import _numba  # optional heavy dependency (numba)
    except ImportError:
        return None
    return _numba


def _mma(a, b, unit: MatrixUnit, c, engine: str) -> np.ndarray:
    fin, fout = get_format(unit.in_fmt), get_format(unit.out_fmt)
    flush = not unit.subnormals
    a = _values(a, fin, "a", flush)
    b = _values(b, fin, "b", flush)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a must be (M, K) and b (K, N); got a{a.shape} and b{b.shape}")
    M, K = a.shape
    N = b.shape[1]
    if c is not None:
        c = _values(c, fout, "c", flush)
        if c.shape != (M, N):
            raise ValueError(f"c must have shape {(M, N)}, got {c.shape}")
    special = None
    if not (np.isfinite(a).all() and np.isfinite(b).all() and (c is None or np.isfinite(c).all())):
        c = np.zeros((M, N)) if c is None else c
        special = _specials(a, b, c)
        a = np.where(np.isfinite(a), a, 0.0)
        b = np.where(np.isfinite(b), b, 0.0)
        c = np.where(np.isfinite(c), c, 0.0)
    blk = unit.block
    kp = -(-K // blk) * blk
    if kp != K:
        a = np.concatenate([a, np.zeros((M, kp - K), a.dtype)], axis=1)
        b = np.concatenate([b, np.zeros((kp - K, N), b.dtype)], axis=0)
    if engine == "numba" or (engine == "auto" and M * N * K >= _NUMBA_MIN_WORK):
        nb = _numba_module() if unit.interleave == 1 and unit.carry_bits is None else None
        if nb is None and engine == "numba":
            raise ValueError("engine='numba' needs numba installed and a unit with "
                             "interleave=1, carry_bits=None; use engine='auto' or 'numpy'")
        if nb is not None:
            out = nb.mma_numba(np.ascontiguousarray(a), np.ascontiguousarray(b), fin,
                               None if c is None else np.ascontiguousarray(c), unit,
                               unit.result_format)
            if special is not None:
                out = np.where(special[0], special[1], out)
            return _nan_payload(out.astype(fout.dtype, copy=False), unit)
    c = np.zeros((M, N)) if c is None else c
    a, b = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    qa, qb = _anchor_pow2(a, unit.anchor_emin), _anchor_pow2(b, unit.anchor_emin)
    if unit.interleave == 2:
        j = np.arange(blk)
        halves = (np.flatnonzero(j % 4 < 2), np.flatnonzero(j % 4 >= 2))
    out = np.empty((M, N), dtype=np.float64)
    rows = max(1, _CHUNK_ELEMS // max(1, blk * N))
    for r0 in range(0, M, rows):
        r1 = min(M, r0 + rows)
        out[r0:r1] = _rows(a[r0:r1], b, qa[r0:r1], qb, c[r0:r1], unit,
                           halves if unit.interleave == 2 else None)
    if special is not None:
        out = np.where(special[0], special[1], out)
    return _nan_payload(out.astype(fout.dtype), unit)


def _nan_payload(out: np.ndarray, unit: MatrixUnit) -> np.ndarray:
    """``out`` with every NaN set to ``unit.nan_bits`` (when given)."""
    if unit.nan_bits is not None:
        nan = np.isnan(out)
        if nan.any():
            bits = out.view(get_format(unit.out_fmt).uint)
            bits[nan] = unit.nan_bits
    return out


def _rows(a, b, qa, qb, c, unit: MatrixUnit, halves) -> np.ndarray:
    """D for a chunk of rows: loop over K blocks, vectorised over rows and N."""
    fmt = unit.result_format
    flush = not unit.subnormals
    blk = unit.block
    promote = unit.promote_every
    if promote is not None:
        acc32, d = c, np.zeros_like(c)
    else:
        d = c
    for k0 in range(0, a.shape[1], blk):
        ab, bb = a[:, k0:k0 + blk].T, b[k0:k0 + blk]
        p = ab[:, :, None] * bb[:, None, :]
        q = qa[:, k0:k0 + blk].T[:, :, None] * qb[k0:k0 + blk][:, None, :]
        live = np.isfinite(d)
        if halves is None:
            new = _stage(p, q, d, unit, fmt, flush)
        else:
            h1, h2 = halves
            d1 = _stage(p[h1], q[h1], None, unit, fmt, flush)
            d2 = _stage(p[h2], q[h2], d1, unit, fmt, flush)
            new = _join(d2, d, unit, fmt)
        d = np.where(live, new, d) if not live.all() else new
        if promote is not None and (k0 + blk) % promote == 0:
            acc32 = (acc32.astype(np.float32) + d.astype(np.float32)).astype(np.float64)
            d = np.zeros_like(d)
    if promote is not None:
        d = (acc32.astype(np.float32) + d.astype(np.float32)).astype(np.float64)
        if unit.out_fmt == "fp16":
            d = round_to(d, FP16, "rne")
    return d

