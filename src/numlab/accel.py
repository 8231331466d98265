"""Whether numlab's compiled (numba) path runs: one switch for every module that has one.

numba ships with the default install where wheels exist; every compiled kernel
(rounding, reductions, the engine's FMA and Welford steps, the block-FMA matmul's
pass, the matrix-unit model) is tested bit-identical to its numpy twin, which stays
the reference and the fallback.  ``NUMLAB_ACCEL=0`` in the environment runs the
numpy path everywhere; any other value (or none) uses numba when it imports.
"""

from __future__ import annotations

import os

__all__ = ["enabled", "numba_module"]

_STATE: dict = {}


def enabled() -> bool:
    """False when ``NUMLAB_ACCEL=0`` (read at each call, so a test may switch it)."""
    return os.environ.get("NUMLAB_ACCEL", "1") != "0"


def numba_module():
    """The ``numba`` module, or None when it is switched off or not installed."""
    if not enabled():
        return None
    if "numba" not in _STATE:
        try:
            import numba  # optional: only where a wheel exists, and imported only when used
        except ImportError:
            _STATE["numba"] = None
        else:
            _STATE["numba"] = numba
    return _STATE["numba"]
