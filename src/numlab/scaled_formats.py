"""Block-scaled tensor formats as data: what a format is, not how it quantises.

A :class:`ScaledFormat` names an element format, a block shape over the last
two axes, a scale format and the rule that picks a block's scale from its
largest magnitude; :data:`SCALED_PRESETS` holds MX (MXFP8/6/4), NVFP4 and DeepSeek-V3's
fp8 blocks.  The arithmetic (quantise, dequantise, the graph operators'
kernels and references) is :mod:`numlab.kernels.scaled`, whose docstring gives
every rule and its sources; the operators' bound rules
(:mod:`numlab.bound_rules`) read the formats from here.  This module imports
only :mod:`numlab.formats`, so every layer above can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .formats import (
    FP4_E2M1,
    FP6_E2M3,
    FP6_E3M2,
    FP8_E4M3,
    FP8_E4M3FNUZ,
    FP8_E5M2,
    FP8_E5M2FNUZ,
    FP8_E8M0,
    FP32,
    Format,
)

__all__ = [
    "ScaledFormat",
    "SCALE_RULES",
    "SCALE_FORMATS",
    "OVERFLOWS",
    "SCALE_APPLY",
    "ELEMENT_FORMATS",
    "SCALED_PRESETS",
    "GRAPH_FORMATS",
    "MXFP8_E4M3",
    "MXFP8_E5M2",
    "MXFP6_E2M3",
    "MXFP6_E3M2",
    "MXFP4",
    "NVFP4",
    "DEEPSEEK_1X128",
    "DEEPSEEK_128X128",
    "get_scaled_format",
    "E8M0_MIN_EXP",
    "E8M0_MAX_EXP",
    "E8M0_NAN",
]


def _check_choice(name: str, value, choices) -> None:
    """Raise ValueError naming the field, its value and the valid choices."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not valid; valid choices: {list(choices)}")


SCALE_RULES = ("floor", "rceil", "amax")
SCALE_FORMATS = ("e8m0", "fp8_e4m3", "fp32")
OVERFLOWS = ("saturate", "nan")
SCALE_APPLY = ("divide", "reciprocal")
E8M0_MIN_EXP = -127
E8M0_MAX_EXP = 127
E8M0_NAN = 0xFF
"""E8M0 (OCP v1.0 section 5.4.1): 8-bit unsigned exponent, bias 127, codes
0..254 are 2**-127..2**127, 0xFF is NaN; no zero, no sign."""

ELEMENT_FORMATS: dict[str, Format] = {f.name: f for f in (
    FP8_E4M3, FP8_E5M2, FP6_E2M3, FP6_E3M2, FP4_E2M1, FP8_E4M3FNUZ, FP8_E5M2FNUZ)}
"""Element format name -> :class:`~numlab.formats.Format` (each has an ml_dtypes
storage dtype; values are held in float containers, ``Scaled.element_codes``
gives the bits).  OCP MX v1.0 defines the first five; the fnuz pair (AMD
MI300's fp8: no -0, one NaN code 0x80) takes the same per-block scaling."""


@dataclass(frozen=True)
class ScaledFormat:
    """A block-scaled tensor format (:mod:`numlab.kernels.scaled`'s docstring
    gives every rule).

    Parameters
    ----------
    name : str
        Short name (the key of :data:`SCALED_PRESETS` for the presets).
    elem : str
        Element format, one of :data:`ELEMENT_FORMATS`.  Default ``"fp8_e4m3"``.
    block : tuple of two ints
        Block shape over the last two axes.  Default ``(1, 32)`` (MX).
    scale_fmt : str
        ``"e8m0"`` (default, MX), ``"fp8_e4m3"`` or ``"fp32"``.
    scale_rule : str
        ``"floor"`` (default, OCP MX v1.0), ``"rceil"`` or ``"amax"``.
        ``floor``/``rceil`` need ``scale_fmt="e8m0"``, ``amax`` one of the others.
    overflow : str
        ``"saturate"`` (default, as OCP MX and torchao) or ``"nan"``.
    tensor_scale : bool
        Second-level fp32 tensor scale (NVFP4).  Default False.
    scale_apply : str
        ``"divide"`` (default) or ``"reciprocal"`` (``scale_rule="amax"`` only:
        with power-of-two scales both give the same bits).
    """

    name: str
    elem: str = "fp8_e4m3"
    block: tuple = (1, 32)
    scale_fmt: str = "e8m0"
    scale_rule: str = "floor"
    overflow: str = "saturate"
    tensor_scale: bool = False
    scale_apply: str = "divide"
    _elem_fmt: Format = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_choice("elem", self.elem, ELEMENT_FORMATS)
        _check_choice("scale_fmt", self.scale_fmt, SCALE_FORMATS)
        _check_choice("scale_rule", self.scale_rule, SCALE_RULES)
        _check_choice("overflow", self.overflow, OVERFLOWS)
        _check_choice("scale_apply", self.scale_apply, SCALE_APPLY)
        blk = tuple(self.block) if isinstance(self.block, (tuple, list)) else None
        if (blk is None or len(blk) != 2
                or not all(isinstance(b, int | np.integer) and not isinstance(b, bool) and b > 0 for b in blk)):
            raise ValueError(f"block={self.block!r} must be two positive ints (rows, columns), e.g. (1, 32)")
        object.__setattr__(self, "block", (int(blk[0]), int(blk[1])))
        if (self.scale_rule == "amax") == (self.scale_fmt == "e8m0"):
            raise ValueError(
                f"scale_rule={self.scale_rule!r} does not go with scale_fmt={self.scale_fmt!r}: "
                "'floor' and 'rceil' give powers of two (scale_fmt='e8m0'); "
                "'amax' gives amax/max_elem rounded to scale_fmt ('fp8_e4m3' or 'fp32')")
        if self.scale_rule != "amax" and self.scale_apply != "divide":
            raise ValueError(f"scale_apply={self.scale_apply!r} changes no bit with scale_rule={self.scale_rule!r}: "
                             "power-of-two (E8M0) scales give the same bits either way; 'reciprocal' needs "
                             "scale_rule='amax'")
        if not isinstance(self.tensor_scale, bool):
            raise TypeError(f"tensor_scale must be a bool, got {self.tensor_scale!r}")
        if self.tensor_scale and self.scale_rule != "amax":
            raise ValueError("tensor_scale=True needs scale_rule='amax' (a power-of-two block scale "
                             "has no use for an fp32 tensor scale)")
        fmt = ELEMENT_FORMATS[self.elem]
        if self.overflow == "nan" and fmt.nan == "none" and not fmt.inf:
            raise ValueError(f"overflow='nan' is impossible for elem={self.elem!r}: it has neither NaN "
                             "nor inf (OCP MX v1.0 section 5.3.3); use overflow='saturate'")
        object.__setattr__(self, "_elem_fmt", fmt)

    # -- derived -----------------------------------------------------------
    @property
    def elem_format(self) -> Format:
        """The element :class:`~numlab.formats.Format`."""
        return self._elem_fmt

    @property
    def elem_dtype(self) -> np.dtype:
        """ml_dtypes' storage dtype of the element format."""
        return self._elem_fmt.dtype

    @property
    def max_elem(self) -> float:
        """Largest finite element (e4m3: 448, e5m2: 57344, e2m3: 7.5, e3m2: 28, e2m1: 6)."""
        return self._elem_fmt.max

    @property
    def emax_elem(self) -> int:
        """Exponent of the element format's largest power of two (OCP's ``emax_elem``)."""
        return self._elem_fmt.emax

    @property
    def scale_format(self) -> Format:
        """The scale's :class:`~numlab.formats.Format` (``FP8_E8M0``, ``FP8_E4M3`` or ``FP32``)."""
        return {"e8m0": FP8_E8M0, "fp8_e4m3": FP8_E4M3, "fp32": FP32}[self.scale_fmt]

    @property
    def bits_per_element(self) -> float:
        """Storage cost: element bits plus the scale's share (MXFP8: 8.25, NVFP4: 4.5)."""
        eb = self._elem_fmt.bits
        sb = {"e8m0": 8, "fp8_e4m3": 8, "fp32": 32}[self.scale_fmt]
        return eb + sb / (self.block[0] * self.block[1])

    def transposed(self, name: str | None = None) -> "ScaledFormat":
        """The same format with the block transposed (``(1, 32)`` -> ``(32, 1)``):
        blocks along a matmul's K axis for its right operand."""
        return replace(self, name=name or f"{self.name}^T", block=self.block[::-1])


MXFP8_E4M3 = ScaledFormat("mxfp8_e4m3", "fp8_e4m3")
MXFP8_E5M2 = ScaledFormat("mxfp8_e5m2", "fp8_e5m2")
MXFP6_E2M3 = ScaledFormat("mxfp6_e2m3", "fp6_e2m3")
MXFP6_E3M2 = ScaledFormat("mxfp6_e3m2", "fp6_e3m2")
MXFP4 = ScaledFormat("mxfp4", "fp4_e2m1")
NVFP4 = ScaledFormat("nvfp4", "fp4_e2m1", (1, 16), "fp8_e4m3", "amax", tensor_scale=True,
                     scale_apply="reciprocal")
DEEPSEEK_1X128 = ScaledFormat("deepseek_1x128", "fp8_e4m3", (1, 128), "fp32", "amax")
DEEPSEEK_128X128 = ScaledFormat("deepseek_128x128", "fp8_e4m3", (128, 128), "fp32", "amax")
SCALED_PRESETS: dict[str, ScaledFormat] = {f.name: f for f in (
    MXFP8_E4M3, MXFP8_E5M2, MXFP6_E2M3, MXFP6_E3M2, MXFP4, NVFP4, DEEPSEEK_1X128, DEEPSEEK_128X128)}
"""Preset name -> ScaledFormat: OCP MX v1.0 (block 32, E8M0, floor rule),
NVFP4 (block 16, e4m3 scale, fp32 tensor scale, torchao's reciprocal),
DeepSeek-V3 (e4m3 elements, fp32 scales on 1x128 activation tiles and
128x128 weight blocks)."""


GRAPH_FORMATS: dict[str, ScaledFormat] = {
    **SCALED_PRESETS, **{f"{n}^T": f.transposed(f"{n}^T") for n, f in SCALED_PRESETS.items()}}
"""Every format name a graph operator's ``fmt`` attribute can hold (the
canonical names :func:`get_scaled_format` gives): each preset and each preset
with its block transposed (``"mxfp8_e4m3^T"``)."""


def get_scaled_format(fmt, name: str = "fmt") -> ScaledFormat:
    """The :class:`ScaledFormat` named by ``fmt``: a ScaledFormat, a preset name
    of :data:`SCALED_PRESETS`, or a preset name followed by ``^T`` (the preset with
    its block transposed, :meth:`ScaledFormat.transposed`: ``"mxfp8_e4m3^T"``
    has 32 x 1 blocks, along the K axis of a matmul's right operand)."""
    if isinstance(fmt, ScaledFormat):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip().lower()
        base, t = (key[:-2], True) if key.endswith("^t") else (key, False)
        if base in SCALED_PRESETS:
            return SCALED_PRESETS[base].transposed(f"{base}^T") if t else SCALED_PRESETS[base]
    raise ValueError(f"{name}={fmt!r} is not a scaled format; valid presets: {sorted(SCALED_PRESETS)}, each optionally "
                     "followed by ^T (block transposed)")
