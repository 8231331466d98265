"""numlab.kernels.mma: the matrix-unit model (tensor cores, cube units).

* :mod:`.unit` -- :class:`MatrixUnit` (a unit's parameters as data) and
  :func:`mma` (``D = A B + C`` on that unit, bit for bit);
* :mod:`.presets` -- the published units (:data:`UNIT_PRESETS`, :func:`preset`),
  each with its evidence;
* :mod:`.lab` -- the model inside numlab: the engine's matmul on a unit
  (:func:`~numlab.kernels.mma.lab.unit_matmul`) and the experiments of
  ``numlab mma`` (K sweeps, per-preset errors);
* :mod:`._numba` -- the optional compiled path (numba), with its compiled steps
  (:mod:`._numba_steps`) and the drivers generated from them
  (:mod:`._numba_blocks`, written by :mod:`._numba_gen`).
"""

from __future__ import annotations

from .presets import GPUS, UNIT_PRESETS, preset, preset_names
from .unit import (
    ALIGN_ROUNDINGS,
    ENGINES,
    FINAL_ROUNDINGS,
    IN_FORMATS,
    OUT_FORMATS,
    SUBNORMAL_ANCHORS,
    MatrixUnit,
    mma,
)

__all__ = ["MatrixUnit", "mma", "UNIT_PRESETS", "GPUS", "preset", "preset_names", "IN_FORMATS",
           "OUT_FORMATS", "ALIGN_ROUNDINGS", "FINAL_ROUNDINGS", "SUBNORMAL_ANCHORS", "ENGINES"]
