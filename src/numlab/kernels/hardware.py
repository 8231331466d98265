"""Hardware model: how many elements a kernel's tile holds.

A kernel streams its operands through an on-chip buffer (Ascend's Unified
Buffer, a GPU's shared memory).  Each *live buffer* (an input, an output, or an
intermediate a fused block keeps on chip) gets an equal slice of it; with double
buffering each slice is split again in two so that the next tile loads while the
current one computes.  Tiles are aligned to the buffer's block (32 bytes on
Ascend), so the element count is rounded *down* to a multiple of
``align_bytes / elem_bytes``.

    tile_elements = align_down( floor(ub_bytes / (live_buffers * elem_bytes * db)),
                                align_bytes / elem_bytes )          db = 2 or 1

A single-operator kernel (``live_buffers`` = 2: one input, one output) gets
large tiles; a fused block that keeps five intermediates on chip gets tiles
about 2.5x smaller, so its reduction is split at different points, and the
bits of its sums differ (``docs/design.md``, "The four sources of difference", tiling).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Hardware", "tile_elements", "kernel_tile", "ASCEND_910B", "SMALL"]


@dataclass(frozen=True)
class Hardware:
    """An on-chip buffer and vector unit.

    Parameters
    ----------
    ub_bytes : int
        Bytes of the buffer a kernel's tiles live in.  Default 196608
        (192 KiB, the Unified Buffer of an Ascend 910B AI Core).
    align_bytes : int
        Alignment of every tile (a data block); default 32 bytes (Ascend's
        32-byte block).
    double_buffer : bool
        Whether each live buffer is split in two (ping-pong) so loads overlap
        compute; default True (the norm for streaming kernels).
    name : str
        Label for tables.
    """

    ub_bytes: int = 192 * 1024
    align_bytes: int = 32
    double_buffer: bool = True
    name: str = "ascend910b"

    def __post_init__(self) -> None:
        for knob in ("ub_bytes", "align_bytes"):
            v = getattr(self, knob)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{knob}={v!r} is not valid; it must be a positive int")
        if self.align_bytes & (self.align_bytes - 1):
            raise ValueError(f"align_bytes={self.align_bytes} is not valid; it must be a power of two")
        if not isinstance(self.double_buffer, bool):
            raise TypeError(f"double_buffer must be a bool, got {self.double_buffer!r}")

    def tile(self, live_buffers: int, elem_bytes: int) -> int:
        """Same as :func:`tile_elements` (``tile_elements(self, live_buffers, elem_bytes)``)."""
        return tile_elements(self, live_buffers, elem_bytes)


ASCEND_910B = Hardware()
"""The default: 192 KiB UB, 32-byte blocks, double buffering."""

SMALL = Hardware(ub_bytes=16 * 1024, name="small16k")
"""A 16 KiB buffer: tiles short enough that a notebook can show them."""


def _check_elem_bytes(elem_bytes) -> None:
    if not isinstance(elem_bytes, int) or isinstance(elem_bytes, bool) or elem_bytes not in (1, 2, 4, 8):
        raise ValueError(f"elem_bytes={elem_bytes!r} is not valid; valid choices: [1, 2, 4, 8]")


def tile_elements(hw: Hardware, live_buffers: int, elem_bytes: int) -> int:
    """Elements per tile for a kernel with ``live_buffers`` buffers on chip.

    ``floor(ub_bytes / (live_buffers * elem_bytes * (2 if double_buffer else 1)))``
    rounded down to a multiple of ``align_bytes // elem_bytes`` (at least one
    aligned block).

    Parameters
    ----------
    hw : Hardware
    live_buffers : int
        Buffers resident at once (inputs + outputs + on-chip intermediates), >= 1.
    elem_bytes : int
        Bytes per element of the buffers (2 for fp16/bf16, 4 for fp32).

    Returns
    -------
    int
        Tile length in elements, a multiple of ``align_bytes // elem_bytes``.

    Raises
    ------
    ValueError
        When ``live_buffers < 1``, ``elem_bytes`` is not 1, 2, 4 or 8, or the
        buffers do not fit one aligned block each.

    Examples
    --------
    >>> tile_elements(Hardware(), 2, 2)      # single op, fp16: 196608 / (2*2*2)
    24576
    >>> tile_elements(Hardware(), 5, 4)      # fused block, fp32 intermediates
    4912
    """
    if not isinstance(hw, Hardware):
        raise TypeError(f"hw must be a Hardware, got {type(hw).__name__}")
    if not isinstance(live_buffers, int) or isinstance(live_buffers, bool) or live_buffers < 1:
        raise ValueError(f"live_buffers={live_buffers!r} is not valid; it must be an int >= 1")
    _check_elem_bytes(elem_bytes)
    db = 2 if hw.double_buffer else 1
    raw = hw.ub_bytes // (live_buffers * elem_bytes * db)
    block = max(1, hw.align_bytes // elem_bytes)
    t = (raw // block) * block
    if t < block:
        raise ValueError(
            f"live_buffers={live_buffers} buffers of {elem_bytes}-byte elements do not fit "
            f"ub_bytes={hw.ub_bytes} (need at least {block} elements each)"
        )
    return t


def kernel_tile(spec, hardware: Hardware, live_buffers: int, storage_bytes: int | None,
                fused: bool) -> tuple[int, int]:
    """``(live buffers, tile elements)`` of one kernel: the rule every caller
    (``KernelSpec.tile``, the fusion plan's blocks and one-operator kernels) applies.

    ``spec`` (a ``KernelSpec``, or None) decides where it says: its
    ``hardware`` replaces ``hardware`` and its ``live_buffers``, when set,
    replace ``live_buffers`` (the caller's count).  The buffers hold fp32
    elements (4 bytes) inside a fused block, else ``storage_bytes`` (the
    storage container's; unused when ``fused``); the tile is
    :func:`tile_elements` of that.
    """
    if spec is not None:
        hardware = spec.hardware
        if spec.live_buffers is not None:
            live_buffers = spec.live_buffers
    return live_buffers, tile_elements(hardware, live_buffers, 4 if fused else storage_bytes)
