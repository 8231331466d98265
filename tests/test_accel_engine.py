"""numlab.kernels._accel.welford32 (numba) does the float32 steps of
numlab.kernels.reduction.welford bit for bit (the native fp32 branch, which the engine uses, calls
it): random rows, cancelling rows, huge/tiny values, inf/NaN, odd lengths."""

from __future__ import annotations

import numpy as np
import pytest

from numlab.kernels._common import Arith
from numlab.kernels.reduction import welford

pytest.importorskip("numba", reason="the compiled path needs numba (a default dependency; absent where no wheel exists)")
from numlab.kernels import _accel  # noqa: E402


@pytest.mark.parametrize("rows,n", [(1, 1), (3, 7), (64, 1024), (37, 129)])
def test_compiled_welford_equals_engine_loop(rows, n):
    if _accel.kernels() is None:
        pytest.skip("NUMLAB_ACCEL=0: the compiled kernels are switched off")
    rng = np.random.default_rng(rows * 1000 + n)
    x = (rng.standard_normal((rows, n)) * np.exp(rng.standard_normal((rows, n)) * 4)).astype(np.float32)
    x[0, -1] += 1e6
    if rows > 2:
        x[1] = 1e4 + rng.standard_normal(n).astype(np.float32)  # cancellation in the variance
        x[2, 0] = np.inf
    if rows > 3:
        x[3, n // 2] = np.nan
    mean, var = welford(x, Arith("fp32"), 0)  # the numpy loop (reference)
    xt = np.ascontiguousarray(x.T)
    m, m2 = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    assert _accel.welford32(xt, m, m2)
    with np.errstate(all="ignore"):
        v = m2 / np.float32(n)
    np.testing.assert_array_equal(m.view(np.uint32), mean.view(np.uint32))
    np.testing.assert_array_equal(v.view(np.uint32), np.asarray(var, np.float32).view(np.uint32))
