"""Floating-point formats.

A :class:`Format` holds the raw fields of a binary floating-point format
(precision, exponent range, what it does with subnormals, infinities, NaN,
negative zero and the sign, in the style of gfloat's ``FormatInfo``;
graphcore-research/gfloat) and derives the usual constants with the names :class:`numpy.finfo` uses
(``eps``, ``max``, ``smallest_normal``, ``smallest_subnormal``) plus the unit
roundoff ``u``.

Conventions (IEEE 754-2019, section 3.3): a finite nonzero number is
``(-1)**s * m * 2**(e - p + 1)`` with integer significand ``0 <= m < 2**p`` and
``emin <= e <= emax``; ``p`` counts the implicit bit.  ``u = 2**-p`` is the unit
roundoff of round-to-nearest (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., section 2.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = [
    "Format",
    "FP64",
    "FP32",
    "TF32",
    "FP16",
    "BF16",
    "FP8_E4M3",
    "FP8_E5M2",
    "FP8_E4M3FNUZ",
    "FP8_E5M2FNUZ",
    "FP6_E2M3",
    "FP6_E3M2",
    "FP4_E2M1",
    "FP8_E8M0",
    "FORMATS",
    "get_format",
    "ulp",
    "next_up",
    "next_down",
    "decode",
    "format_of_dtype",
    "NARROW_DTYPES",
    "STORAGE_DTYPES",
]

_NAN_KINDS = ("ieee", "extended", "negzero", "none")

_F32_MIN_EXP = -149  # every value of a Format is a float32: 2**-149 ..
_F32_MAX_EXP = 127  # .. (2 - 2**-23) * 2**127


@dataclass(frozen=True)
class Format:
    """A binary floating-point format.

    Parameters
    ----------
    name : str
        Short name, also the lookup key of :func:`get_format`.
    p : int
        Precision in bits, including the implicit leading bit (fp16: 11).
    emax : int
        Largest exponent of a finite number.
    emin : int, optional
        Smallest exponent of a normal number; default ``1 - emax`` (IEEE).
    subnormals : bool
        Whether the format has gradual underflow.  Without it, values below
        ``smallest_normal`` round onto ``{0, smallest_normal}``.
    inf : bool
        Whether the format has infinities.  Formats without them
        (fp8 e4m3fn) turn overflow into NaN, or into ``max`` when saturating.
    nan : {"ieee", "extended", "negzero", "none"}
        NaN encoding: ``"ieee"`` (the top exponent code is reserved for inf and
        NaN), ``"extended"`` (only the all-ones code is NaN, as in e4m3fn, so
        the top exponent holds finite numbers except the last significand;
        with ``p = 1`` (E8M0) the all-ones code is a whole exponent field, and
        ``emax`` is the exponent below it), ``"negzero"`` (the single NaN is
        the code of negative zero, 0x80 in AMD's fnuz fp8; needs
        ``negzero=False``), ``"none"`` (no NaN: fp6, fp4).
    dtype : numpy dtype or None
        The storage dtype when numpy or ml_dtypes has one; TF32 and custom
        formats have none and are stored in float32 containers.
    bits : int or None
        Width of a code in bits (fp6: 6, although ml_dtypes stores it in a
        byte); None for formats without a storage dtype.
    negzero : bool
        Whether -0 is a value distinct from +0 (gfloat's ``has_nz``).  Without
        it (fnuz, E8M0) a zero result is +0 whatever the sign of the input.
    signed : bool
        Whether codes have a sign bit (gfloat's ``is_signed``).  E8M0 has none:
        every negative input, -0 included, gives NaN.
    zero : bool
        Whether 0 is a value.  E8M0 has no zero: a positive value below
        ``smallest_normal`` rounds to ``smallest_normal`` in every mode (there
        is nothing below it to go to), and an input 0 gives NaN, as in
        ml_dtypes.  Needs ``subnormals=False`` and ``signed=False``.

    Notes
    -----
    Overflow: a format with infinities gives inf (IEEE 754-2019 section 7.4,
    per mode); one without infinities but with NaN (e4m3fn, fnuz, E8M0) gives
    NaN where IEEE gives inf, or ``max`` with ``saturate=True``; one with
    neither (fp6 e2m3/e3m2, fp4 e2m1) saturates to ``±max`` in every mode, as
    the OCP Microscaling spec v1.0 prescribes for its FP6/FP4 conversions
    (and as ml_dtypes does; an inf input gives ``±max`` too).  A NaN input
    stays NaN in the float32/float64 container of :func:`numlab.round_to`;
    :func:`numlab.encode` refuses it for a format without a NaN code.

    Every value of a format is a float32 value (``emax <= 127`` and
    ``smallest_subnormal >= 2**-149``), so E8M0's ``2**-127`` fits; ``p`` is
    1 (E8M0) to 24.
    """

    name: str
    p: int
    emax: int
    emin: int | None = None
    subnormals: bool = True
    inf: bool = True
    nan: str = "ieee"
    dtype: np.dtype | None = field(default=None, compare=False)
    bits: int | None = None
    negzero: bool = True
    signed: bool = True
    zero: bool = True

    def __post_init__(self) -> None:
        for arg in ("p", "emax", "emin"):
            v = getattr(self, arg)
            if arg == "emin" and v is None:
                v = 1 - self.emax  # IEEE: emin = 1 - emax
            if not isinstance(v, int | np.integer) or isinstance(v, bool):
                raise TypeError(f"{arg} must be an int, got {type(v).__name__} ({v!r})")
            object.__setattr__(self, arg, int(v))
        if self.nan not in _NAN_KINDS:
            raise ValueError(f"nan={self.nan!r} is not valid; choose one of {_NAN_KINDS}")
        for arg in ("subnormals", "inf", "negzero", "signed", "zero"):
            v = getattr(self, arg)
            if not isinstance(v, bool | np.bool_):
                raise TypeError(f"{arg} must be a bool, got {type(v).__name__} ({v!r})")
            object.__setattr__(self, arg, bool(v))
        builtin = self.name in ("fp64",)
        if not builtin:
            if not 1 <= self.p <= 24:
                raise ValueError(f"p={self.p} is out of range; a custom format needs 1 <= p <= 24")
            low = self.emin - self.p + 1 if self.subnormals else self.emin
            if not (self.emin <= self.emax <= _F32_MAX_EXP and low >= _F32_MIN_EXP):
                raise ValueError(
                    f"exponent range emin={self.emin}, emax={self.emax} is out of range; it needs "
                    f"emin <= emax <= {_F32_MAX_EXP} and a smallest value >= 2**{_F32_MIN_EXP} "
                    f"(here 2**{low}) so that every value is a float32"
                )
        if self.nan == "negzero" and (self.negzero or not self.signed):
            raise ValueError("nan='negzero' puts the NaN in the code of -0: it needs negzero=False "
                             "and signed=True")
        if not self.signed and self.negzero:
            raise ValueError("signed=False has no -0: it needs negzero=False")
        if not self.zero and (self.subnormals or self.signed):
            raise ValueError("zero=False (E8M0) needs subnormals=False and signed=False")
        if self.dtype is not None:
            object.__setattr__(self, "dtype", np.dtype(self.dtype))

    # --- derived constants, named as numpy.finfo names them -------------
    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next larger number, ``2**(1 - p)``."""
        return math.ldexp(1.0, 1 - self.p)

    @property
    def u(self) -> float:
        """Unit roundoff of round-to-nearest, ``2**-p`` (= eps / 2)."""
        return math.ldexp(1.0, -self.p)

    @property
    def max(self) -> float:
        """Largest finite value.

        ``(2 - eps) * 2**emax``; with ``nan="extended"`` and ``p >= 2`` the
        all-ones significand at ``emax`` is NaN, so ``(2 - 2 eps) * 2**emax``
        (e4m3fn: 448).  With ``p = 1`` (E8M0) the all-ones code lies above
        ``emax``: ``2**emax``.
        """
        top = 2 * (2 ** (self.p - 1)) - 1  # all-ones integer significand
        if self.nan == "extended" and self.p > 1:
            top -= 1
        return math.ldexp(float(top), self.emax - self.p + 1)

    @property
    def smallest_normal(self) -> float:
        """``2**emin``."""
        return math.ldexp(1.0, self.emin)

    @property
    def smallest_subnormal(self) -> float:
        """``2**(emin - p + 1)``, or ``smallest_normal`` without subnormals."""
        if not self.subnormals:
            return self.smallest_normal
        return math.ldexp(1.0, self.emin - self.p + 1)

    @property
    def tiny(self) -> float:
        """Alias of ``smallest_normal`` (numpy.finfo's older name)."""
        return self.smallest_normal

    @property
    def has_storage(self) -> bool:
        """Whether values of this format can be stored in their own dtype."""
        return self.dtype is not None

    @property
    def container(self) -> np.dtype:
        """The numpy dtype numlab keeps values of this format in (its own
        storage dtype when it has one, else float32; FP64 in float64)."""
        if self.dtype is not None:
            return self.dtype
        return np.dtype(np.float64) if self.p > 24 else np.dtype(np.float32)

    # --- storage layout, derived from p, bits and signed (formats with a dtype)
    @property
    def uint(self) -> np.dtype | None:
        """The unsigned integer dtype of the storage (:func:`numlab.encode` returns codes
        of it): as wide as the storage dtype (one byte for fp6/fp4, whose
        codes use the low ``bits`` bits); None without a storage dtype."""
        if self.bits is None:
            return None
        width = self.dtype.itemsize * 8 if self.dtype is not None else max(8, 1 << (self.bits - 1).bit_length())
        return np.dtype(f"uint{width}")

    @property
    def exponent_bits(self) -> int | None:
        """Width of the exponent field: ``bits - p + 1`` minus the sign bit
        (sign bit, if any + exponent field + ``p - 1`` stored significand
        bits); None without storage."""
        return None if self.bits is None else self.bits - self.p + 1 - int(self.signed)

    @property
    def exponent_mask(self) -> int | None:
        """The exponent field's bits in a code (fp16: 0x7C00)."""
        if self.bits is None:
            return None
        return ((1 << self.exponent_bits) - 1) << (self.p - 1)

    @property
    def sign_mask(self) -> int | None:
        """The sign bit of a code (fp16: 0x8000, fp6: 0x20); None for an
        unsigned format or without storage."""
        if self.bits is None or not self.signed:
            return None
        return 1 << (self.bits - 1)

    @property
    def nonfinite_mask(self) -> int | None:
        """Bits that are all set in a code exactly when it is inf or NaN.

        IEEE formats: the exponent field (fp16 0x7C00, bf16 0x7F80, e5m2
        0x7C).  ``nan="extended"`` (e4m3fn, E8M0) has no inf and one NaN code
        per sign, all bits but the sign set (0x7F; E8M0 0xFF).  None for
        ``nan="none"``, for ``nan="negzero"`` (fnuz: the NaN is 0x80, which no
        single mask singles out) or without a storage dtype.  A vectorised
        test: ``(codes & m) == m``.
        """
        if self.bits is None or self.nan in ("none", "negzero"):
            return None
        if self.nan == "extended":
            return (1 << (self.bits - int(self.signed))) - 1
        return self.exponent_mask

    @property
    def narrow(self) -> bool:
        """Whether the storage dtype is narrower than float32 (values are
        widened to float32 exactly for arithmetic)."""
        return self.bits is not None and self.bits < 32

    def __str__(self) -> str:
        return self.name

    def describe(self) -> dict:
        """A row for a formats table."""
        return {
            "name": self.name,
            "bits": self.bits,
            "p": self.p,
            "emin": self.emin,
            "emax": self.emax,
            "u": self.u,
            "eps": self.eps,
            "max": self.max,
            "smallest_normal": self.smallest_normal,
            "smallest_subnormal": self.smallest_subnormal,
            "inf": self.inf,
            "nan": self.nan,
            "negzero": self.negzero,
            "signed": self.signed,
            "zero": self.zero,
        }


FP64 = Format("fp64", 53, 1023, dtype=np.float64, bits=64)
FP32 = Format("fp32", 24, 127, dtype=np.float32, bits=32)
TF32 = Format("tf32", 11, 127, dtype=None, bits=None)
FP16 = Format("fp16", 11, 15, dtype=np.float16, bits=16)
BF16 = Format("bf16", 8, 127, dtype=ml_dtypes.bfloat16, bits=16)
FP8_E4M3 = Format("fp8_e4m3", 4, 8, emin=-6, inf=False, nan="extended", dtype=ml_dtypes.float8_e4m3fn, bits=8)
FP8_E5M2 = Format("fp8_e5m2", 3, 15, dtype=ml_dtypes.float8_e5m2, bits=8)
# AMD/Graphcore fnuz fp8: bias one more than OCP's, no inf, no -0, the -0 code
# 0x80 is the single NaN; overflow gives NaN (or max when saturating).
FP8_E4M3FNUZ = Format("fp8_e4m3fnuz", 4, 7, emin=-7, inf=False, nan="negzero", negzero=False,
                      dtype=ml_dtypes.float8_e4m3fnuz, bits=8)
FP8_E5M2FNUZ = Format("fp8_e5m2fnuz", 3, 15, emin=-15, inf=False, nan="negzero", negzero=False,
                      dtype=ml_dtypes.float8_e5m2fnuz, bits=8)
# OCP Microscaling v1.0 element types: no inf, no NaN; overflow saturates.
FP6_E2M3 = Format("fp6_e2m3", 4, 2, emin=0, inf=False, nan="none", dtype=ml_dtypes.float6_e2m3fn, bits=6)
FP6_E3M2 = Format("fp6_e3m2", 3, 4, emin=-2, inf=False, nan="none", dtype=ml_dtypes.float6_e3m2fn, bits=6)
FP4_E2M1 = Format("fp4_e2m1", 2, 2, emin=0, inf=False, nan="none", dtype=ml_dtypes.float4_e2m1fn, bits=4)
# OCP Microscaling v1.0 scale type E8M0: unsigned powers of two 2**-127 ..
# 2**127, no zero, 0xFF is NaN.
FP8_E8M0 = Format("fp8_e8m0", 1, 127, emin=-127, subnormals=False, inf=False, nan="extended",
                  negzero=False, signed=False, zero=False, dtype=ml_dtypes.float8_e8m0fnu, bits=8)

FORMATS: dict[str, Format] = {
    f.name: f for f in (FP64, FP32, TF32, FP16, BF16, FP8_E4M3, FP8_E5M2, FP8_E4M3FNUZ,
                        FP8_E5M2FNUZ, FP6_E2M3, FP6_E3M2, FP4_E2M1, FP8_E8M0)
}
STORAGE_DTYPES: dict[np.dtype, Format] = {
    f.dtype: f for f in FORMATS.values() if f.dtype is not None
}
"""Storage dtype -> format, derived from :data:`FORMATS` (float64, float32,
float16, bfloat16, float8_e4m3fn, float8_e5m2, float8_e4m3fnuz,
float8_e5m2fnuz, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn,
float8_e8m0fnu)."""

NARROW_DTYPES: frozenset[np.dtype] = frozenset(d for d, f in STORAGE_DTYPES.items() if f.narrow)
"""Storage dtypes narrower than float32, derived from :data:`FORMATS`."""

_ALIASES = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "single": "fp32", "f32": "fp32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "e4m3fnuz": "fp8_e4m3fnuz", "float8_e4m3fnuz": "fp8_e4m3fnuz",
    "e5m2fnuz": "fp8_e5m2fnuz", "float8_e5m2fnuz": "fp8_e5m2fnuz",
    "e2m3": "fp6_e2m3", "float6_e2m3fn": "fp6_e2m3", "fp6_e2m3fn": "fp6_e2m3",
    "e3m2": "fp6_e3m2", "float6_e3m2fn": "fp6_e3m2", "fp6_e3m2fn": "fp6_e3m2",
    "e2m1": "fp4_e2m1", "float4_e2m1fn": "fp4_e2m1", "fp4_e2m1fn": "fp4_e2m1",
    "e8m0": "fp8_e8m0", "float8_e8m0fnu": "fp8_e8m0", "fp8_e8m0fnu": "fp8_e8m0",
}


def get_format(fmt: "Format | str | np.dtype | type", name: str = "fmt") -> Format:
    """Return the :class:`Format` named by ``fmt``.

    Accepts a Format, a name (``"fp16"``, ``"bf16"``, aliases such as
    ``"float16"``), or a numpy/ml_dtypes dtype.  ``name`` is the argument
    the error messages name (e.g. ``acc='fp7' is not a known format; ...``).

    Raises
    ------
    ValueError
        For an unknown name, listing the valid names.
    TypeError
        For anything else.
    """
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip().lower()
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        raise ValueError(
            f"{name}={fmt!r} is not a known format; valid names: {sorted(FORMATS)}"
            f" (aliases: {sorted(_ALIASES)})"
        )
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise TypeError(
            f"{name} must be a Format, a format name or a dtype, got {type(fmt).__name__}"
        ) from None
    except ValueError as e:  # a malformed dtype spec, e.g. ("f4", -1)
        raise ValueError(f"{name}: {e}") from None
    f = STORAGE_DTYPES.get(dt)
    if f is not None:
        return f
    raise ValueError(f"{name}={dt} has no numlab format; valid names: {sorted(FORMATS)}")


def format_of_dtype(dtype) -> Format | None:
    """The format whose storage dtype is ``dtype`` (a numpy/ml_dtypes dtype,
    or a dtype name such as ``"float16"``/``"bfloat16"``, which is also the
    spelling of torch's dtypes after ``str(t.dtype).removeprefix("torch.")``);
    None for any other dtype (integers, bool, complex, unknown names)."""
    if isinstance(dtype, str):
        try:
            dtype = np.dtype(getattr(ml_dtypes, dtype, dtype))
        except TypeError:
            return None
    try:
        return STORAGE_DTYPES.get(np.dtype(dtype))
    except TypeError:
        return None


# --------------------------------------------------------------------------
# ulp and neighbours (values held in float64)
# --------------------------------------------------------------------------
def _as_f64(x) -> np.ndarray:
    a = np.asarray(x)
    # floats, ml_dtypes' bfloat16/fp8 (kind "V" or "f"), and integers/bools
    if a.dtype.kind not in "fViub":
        raise TypeError(f"x must be real floating point, got dtype {a.dtype}")
    return a.astype(np.float64)


def _exponent(a: np.ndarray, fmt: Format) -> np.ndarray:
    """floor(log2|a|) clamped below at emin (so subnormals share emin)."""
    _, e = np.frexp(a)
    e = np.maximum(e.astype(np.int64) - 1, fmt.emin)
    return np.where(a == 0, fmt.emin, e)  # frexp(0) has exponent 0


def ulp(x, fmt: "Format | str") -> np.ndarray:
    """Unit in the last place of ``x`` in ``fmt``: ``2**(max(e, emin) - p + 1)``
    where ``2**e <= |x| < 2**(e+1)`` (Goldberg's definition; ``ulp(0)`` is the
    smallest subnormal).  ``x`` should be representable in ``fmt``.  Returns
    float64; inf and NaN give NaN, and so do the values a format does not
    have (negative values and 0 in E8M0).
    """
    fmt = get_format(fmt)
    a = _as_f64(x)
    e = _exponent(a, fmt)
    if not fmt.subnormals:
        e = np.where(np.abs(a) < fmt.smallest_normal, fmt.emin + fmt.p - 1, e)
    out = np.ldexp(1.0, (e - fmt.p + 1).astype(np.int32))
    out = np.where(np.isfinite(a) & ~_not_a_value(a, fmt), out, np.nan)
    return out[()] if out.ndim == 0 else out


def _not_a_value(a: np.ndarray, fmt: Format) -> np.ndarray:
    """Where ``a`` (float64) is a number ``fmt`` cannot hold whatever the
    rounding: negative values (and -0) of an unsigned format, 0 of a format
    without zero."""
    bad = np.zeros(a.shape, bool)
    if not fmt.signed:
        bad |= np.signbit(a)
    if not fmt.zero:
        bad |= a == 0
    return bad


def _step(x, fmt: Format, direction: int) -> np.ndarray:
    a = _as_f64(x)
    e = _exponent(a, fmt)
    q = np.ldexp(1.0, (e - fmt.p + 1).astype(np.int32))
    if not fmt.subnormals:
        tiny = np.abs(a) < fmt.smallest_normal
        q = np.where(tiny, fmt.smallest_normal, q)
    # Moving toward zero across a power of two uses the smaller ulp below it.
    toward_zero = (np.sign(a) * direction) < 0
    at_pow2 = (np.abs(a) == np.ldexp(1.0, e.astype(np.int32))) & (e > fmt.emin)
    q = np.where(toward_zero & at_pow2, q / 2, q)
    if not fmt.subnormals:
        # from +-smallest_normal toward zero lands on zero
        q = np.where(toward_zero & (np.abs(a) == fmt.smallest_normal), fmt.smallest_normal, q)
    out = a + direction * q
    out = np.where(a == 0, direction * fmt.smallest_subnormal, out)
    big = np.abs(out) > fmt.max
    out = np.where(big, np.copysign(np.inf if fmt.inf else np.nan, out), out)
    # from -inf/inf
    if fmt.inf:
        out = np.where(a == -direction * np.inf, -direction * fmt.max, out)
        out = np.where(a == direction * np.inf, a, out)
    out = np.where(np.isnan(a), np.nan, out)
    if not fmt.negzero:  # fnuz, E8M0: the zero is +0
        out = np.where(out == 0, 0.0, out)
    # below the smallest value of an unsigned format, or from a non-value: none
    out = np.where(_not_a_value(a, fmt) | _not_a_value(out, fmt), np.nan, out)
    return out[()] if out.ndim == 0 else out


def _step_quiet(x, fmt: Format, direction: int) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return _step(x, fmt, direction)


def next_up(x, fmt: "Format | str") -> np.ndarray:
    """The least number of ``fmt`` greater than ``x`` (IEEE 754 nextUp), as
    float64.  ``x`` must be representable in ``fmt``.  ``next_up(max)`` is
    inf (NaN for a format without inf); ``next_up(-0.0)`` is the smallest
    subnormal; where no such number exists, or ``x`` is not a value of an
    unsigned format (negative, or 0 without zero), NaN.  A format without
    -0 (fnuz) gives +0 for ``next_up(-smallest_subnormal)``."""
    return _step_quiet(x, get_format(fmt), +1)


def next_down(x, fmt: "Format | str") -> np.ndarray:
    """The greatest number of ``fmt`` less than ``x`` (IEEE 754 nextDown);
    NaN where none exists (below E8M0's ``2**-127``, below ``-max`` of a
    format without inf)."""
    return _step_quiet(x, get_format(fmt), -1)


def decode(codes, fmt: "Format | str") -> np.ndarray:
    """Values (in the storage dtype) of integer codes of ``fmt``; codes must
    lie in ``[0, 2**bits)`` (ValueError otherwise: fp6/fp4 codes fill only
    the low bits of a byte)."""
    fmt = get_format(fmt)
    if fmt.dtype is None:
        raise ValueError(f"fmt={fmt.name!r} has no storage dtype to decode from")
    c = np.asarray(codes)
    if c.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got dtype {c.dtype}")
    if fmt.bits < 8 * fmt.uint.itemsize and c.size and (c.min() < 0 or c.max() >= 1 << fmt.bits):
        raise ValueError(
            f"codes hold values outside [0, {1 << fmt.bits}) (min {c.min()}, max {c.max()}); "
            f"fmt={fmt.name!r} has {fmt.bits}-bit codes"
        )
    return c.astype(fmt.uint).view(fmt.dtype)
