"""Floating-point formats.

A :class:`Format` holds the raw fields of a binary floating-point format
(precision, exponent range, what it does with subnormals, infinities and NaN)
and derives the usual constants with the names :class:`numpy.finfo` uses
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
    "FORMATS",
    "get_format",
    "ulp",
    "next_up",
    "next_down",
    "encode",
    "decode",
    "format_of_dtype",
    "NARROW_DTYPES",
    "STORAGE_DTYPES",
]

_NAN_KINDS = ("ieee", "extended", "none")


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
    nan : {"ieee", "extended", "none"}
        NaN encoding: ``"ieee"`` (the top exponent code is reserved for inf and
        NaN), ``"extended"`` (only the all-ones code is NaN, as in e4m3fn, so
        the top exponent holds finite numbers except the last significand),
        ``"none"`` (no NaN).
    dtype : numpy dtype or None
        The storage dtype when numpy or ml_dtypes has one; TF32 and custom
        formats have none and are stored in float32 containers.
    bits : int or None
        Storage width in bits (None for formats without a storage dtype).
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
        builtin = self.name in ("fp64",)
        if not builtin:
            if not 2 <= self.p <= 24:
                raise ValueError(f"p={self.p} is out of range; a custom format needs 2 <= p <= 24")
            if not -126 <= self.emin <= self.emax <= 127:
                raise ValueError(
                    f"exponent range emin={self.emin}, emax={self.emax} is out of range; "
                    "it must lie inside fp32's (-126 <= emin <= emax <= 127)"
                )
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

        ``(2 - eps) * 2**emax``; with ``nan="extended"`` the all-ones
        significand at ``emax`` is NaN, so ``(2 - 2 eps) * 2**emax``
        (e4m3fn: 448).
        """
        top = 2 * (2 ** (self.p - 1)) - 1  # all-ones integer significand
        if self.nan == "extended":
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

    # --- storage layout, derived from p and bits (formats with a dtype) --
    @property
    def uint(self) -> np.dtype | None:
        """The unsigned integer dtype of the same width as the storage dtype
        (``encode`` returns codes of it); None without a storage dtype."""
        return None if self.bits is None else np.dtype(f"uint{self.bits}")

    @property
    def exponent_bits(self) -> int | None:
        """Width of the exponent field: ``bits - p`` (1 sign bit + exponent
        field + ``p - 1`` stored significand bits); None without storage."""
        return None if self.bits is None else self.bits - self.p

    @property
    def exponent_mask(self) -> int | None:
        """The exponent field's bits in a code (fp16: 0x7C00)."""
        if self.bits is None:
            return None
        return ((1 << self.exponent_bits) - 1) << (self.p - 1)

    @property
    def nonfinite_mask(self) -> int | None:
        """Bits that are all set in a code exactly when it is inf or NaN.

        IEEE formats: the exponent field (fp16 0x7C00, bf16 0x7F80, e5m2
        0x7C).  ``nan="extended"`` (e4m3fn) has no inf and one NaN code per
        sign, all exponent and significand bits set (0x7F).  None for
        ``nan="none"`` or no storage dtype.  A vectorised test:
        ``(codes & m) == m``.
        """
        if self.bits is None or self.nan == "none":
            return None
        if self.nan == "extended":
            return (1 << (self.bits - 1)) - 1
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
        }


FP64 = Format("fp64", 53, 1023, dtype=np.float64, bits=64)
FP32 = Format("fp32", 24, 127, dtype=np.float32, bits=32)
TF32 = Format("tf32", 11, 127, dtype=None, bits=None)
FP16 = Format("fp16", 11, 15, dtype=np.float16, bits=16)
BF16 = Format("bf16", 8, 127, dtype=ml_dtypes.bfloat16, bits=16)
FP8_E4M3 = Format("fp8_e4m3", 4, 8, emin=-6, inf=False, nan="extended", dtype=ml_dtypes.float8_e4m3fn, bits=8)
FP8_E5M2 = Format("fp8_e5m2", 3, 15, dtype=ml_dtypes.float8_e5m2, bits=8)

FORMATS: dict[str, Format] = {
    f.name: f for f in (FP64, FP32, TF32, FP16, BF16, FP8_E4M3, FP8_E5M2)
}
STORAGE_DTYPES: dict[np.dtype, Format] = {
    f.dtype: f for f in FORMATS.values() if f.dtype is not None
}
"""Storage dtype -> format, derived from :data:`FORMATS` (float64, float32,
float16, bfloat16, float8_e4m3fn, float8_e5m2)."""

NARROW_DTYPES: frozenset[np.dtype] = frozenset(d for d, f in STORAGE_DTYPES.items() if f.narrow)
"""Storage dtypes narrower than float32, derived from :data:`FORMATS`."""

_ALIASES = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "single": "fp32", "f32": "fp32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
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
    float64; inf and NaN give NaN.
    """
    fmt = get_format(fmt)
    a = _as_f64(x)
    e = _exponent(a, fmt)
    if not fmt.subnormals:
        e = np.where(np.abs(a) < fmt.smallest_normal, fmt.emin + fmt.p - 1, e)
    out = np.ldexp(1.0, (e - fmt.p + 1).astype(np.int32))
    out = np.where(np.isfinite(a), out, np.nan)
    return out[()] if out.ndim == 0 else out


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
    return out[()] if out.ndim == 0 else out


def _step_quiet(x, fmt: Format, direction: int) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return _step(x, fmt, direction)


def next_up(x, fmt: "Format | str") -> np.ndarray:
    """The least number of ``fmt`` greater than ``x`` (IEEE 754 nextUp), as
    float64.  ``x`` must be representable in ``fmt``.  ``next_up(max)`` is
    inf (NaN for a format without inf); ``next_up(-0.0)`` is the smallest
    subnormal."""
    return _step_quiet(x, get_format(fmt), +1)


def next_down(x, fmt: "Format | str") -> np.ndarray:
    """The greatest number of ``fmt`` less than ``x`` (IEEE 754 nextDown)."""
    return _step_quiet(x, get_format(fmt), -1)


def encode(x, fmt: "Format | str") -> np.ndarray:
    """Integer codes (bit patterns) of ``x`` in ``fmt``'s storage dtype.

    ``x`` is rounded to nearest-even directly by :func:`numlab.round_to`
    (not by ml_dtypes' float64 casts, which round through float32 and can
    double-round); for other modes round with ``round_to`` first.  Integer
    inputs are converted to float64 first.  Raises ValueError for formats
    without a storage dtype.
    """
    from .rounding import round_to  # same layer; imported late to avoid a cycle

    fmt = get_format(fmt)
    if fmt.dtype is None:
        raise ValueError(
            f"fmt={fmt.name!r} has no storage dtype to encode into; formats with one: "
            f"{sorted(n for n, f in FORMATS.items() if f.dtype is not None)}"
        )
    a = np.asarray(x)
    if a.dtype != fmt.dtype:
        if a.dtype.kind in "iub":
            a = a.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            a = np.asarray(round_to(a, fmt)).astype(fmt.dtype)  # exact: values of fmt
    return a.view(fmt.uint)


def decode(codes, fmt: "Format | str") -> np.ndarray:
    """Values (in the storage dtype) of integer codes of ``fmt``."""
    fmt = get_format(fmt)
    if fmt.dtype is None:
        raise ValueError(f"fmt={fmt.name!r} has no storage dtype to decode from")
    c = np.asarray(codes)
    if c.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got dtype {c.dtype}")
    return c.astype(fmt.uint).view(fmt.dtype)
