"""``NUMLAB_ACCEL=0`` runs the numpy path everywhere: with it, no numlab code path
imports numba (rounding, reductions, the engine, the block-FMA matmul, the
matrix-unit model), and ``engine="numba"`` of the matrix-unit model is refused;
without it, the same calls do use the compiled path (so the test can fail both ways)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

SCRIPT = r"""
import sys
import numpy as np
import numlab as nl
from numlab.kernels.mma import presets as mma_presets
from numlab.kernels.mma import mma
rng = np.random.default_rng(0)
x = rng.standard_normal(1 << 17).astype(np.float32) * np.float32(1e6)
nl.round_to(x, "fp16")                                    # mostly out of range: compiled path when on
h = nl.round_to(rng.standard_normal((512, 1024)).astype(np.float32), "fp16")
nl.kernels.reduce(h, "sum", -1, order="sequential", acc="fp32")   # a reduction
nl.run(nl.zoo.layernorm(batch=512, hidden=1024), {"x": h, "gamma": h[0], "beta": h[1]}, mode="fused", fmt="fp16")
a = (rng.standard_normal((256, 256)) / 8).astype(np.float16)
unit = mma_presets.preset("A100/fp16/fp32")
mma(a, a, unit)                                           # 256^3 >= the numba threshold
try:
    mma(a[:8, :8], a[:8, :8], unit, engine="numba")
    refused = False
except ValueError as exc:
    refused = "numba" in str(exc)
print("numba" in sys.modules, "numlab.kernels.mma._numba" in sys.modules, refused)
"""


def _run(accel: str | None) -> list[str]:
    pytest.importorskip("numba", reason="numba is not installed here: nothing to switch off")
    env = {k: v for k, v in os.environ.items() if k != "NUMLAB_ACCEL"}
    env["PYTHONPATH"] = str(SRC)
    if accel is not None:
        env["NUMLAB_ACCEL"] = accel
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_accel_off_never_imports_numba():
    assert _run("0") == ["False", "False", "True"]


def test_accel_on_uses_the_compiled_matrix_unit():
    assert _run(None) == ["True", "True", "False"]
