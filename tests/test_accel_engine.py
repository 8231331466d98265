"""numlab.kernels._accel.welford32 (numba) does Welford's float32 steps bit for bit, and
numlab.kernels.reduction.welford (whose native fp32 branch, the engine's, calls it) returns
them: both against a float32 numpy loop written here, on random rows, cancelling rows,
huge/tiny values, inf/NaN, odd lengths."""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import assert_same_bits

from numlab.kernels._common import Arith
from numlab.kernels.reduction import welford

pytest.importorskip("numba", reason="the compiled path needs numba (a default dependency; absent where no wheel exists)")
from numlab.kernels import _accel  # noqa: E402


def _welford32_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, M2/n) along the last axis of float32 ``x``: ``d = x_k - m;
    m = m + d/(k+1); M2 = M2 + d*(x_k - m)``, every operation one float32 ufunc
    (rounded once, no FMA), vectorised over the rows."""
    n = x.shape[-1]
    m = np.zeros(x.shape[:-1], np.float32)
    m2 = np.zeros(x.shape[:-1], np.float32)
    with np.errstate(all="ignore"):
        for k in range(n):
            xk = x[..., k]
            d = np.subtract(xk, m, dtype=np.float32)
            m = np.add(m, np.divide(d, np.float32(k + 1), dtype=np.float32), dtype=np.float32)
            m2 = np.add(m2, np.multiply(d, np.subtract(xk, m, dtype=np.float32), dtype=np.float32),
                        dtype=np.float32)
        return m, np.divide(m2, np.float32(n), dtype=np.float32)


@pytest.mark.parametrize("rows,n", [(1, 1), (3, 7), (64, 1024), (37, 129)])
def test_compiled_welford_equals_a_float32_loop(rows, n):
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
    want_mean, want_var = _welford32_reference(x)
    xt = np.ascontiguousarray(x.T)
    m, m2 = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    assert _accel.welford32(xt, m, m2)
    with np.errstate(all="ignore"):
        v = m2 / np.float32(n)
    assert_same_bits(m, want_mean, what="welford32 mean")
    assert_same_bits(v, want_var, what="welford32 M2/n")
    mean, var = welford(x, Arith("fp32"), 0)
    assert_same_bits(np.asarray(mean), want_mean, what="reduction.welford mean")
    assert_same_bits(np.asarray(var), want_var, what="reduction.welford var")
