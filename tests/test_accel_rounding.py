"""The compiled rounding prototype (numlab.kernels._accel.round_bits, numba: extra
``fast``) is bit-identical to numlab.rounding's numpy fast path (_round_bits, itself
tested against exact references in tests/test_rounding*.py) in every deterministic
mode, with and without saturation and flush-to-zero, for float32 and float64 input:
on random bit patterns (every class of value: NaN, inf, overflow, subnormals,
zeros) and on constructed boundary values."""

from __future__ import annotations

import numpy as np
import pytest

from numlab import formats as F
from numlab.formats import BF16, FP8_E4M3, FP8_E5M2, FP16, TF32
from numlab.rounding import _consts, _round_bits

numba = pytest.importorskip("numba", reason="the compiled path needs numba (extra 'fast')")
from numlab.kernels import _accel  # noqa: E402

HANDLED = [FP16, BF16, FP8_E4M3, FP8_E5M2, TF32]
# every format numlab rounds to: the kernel either declines (None) or matches
FORMATS = list(dict.fromkeys(HANDLED + [f for f in vars(F).values()
                                        if isinstance(f, F.Format) and f.p < 24]))
MODES = ["rne", "rtz", "up", "down", "odd"]


def _boundary(fmt, dt):
    big = np.finfo(dt).max
    v = [0.0, fmt.max, np.nextafter(fmt.max, np.inf), fmt.max * (1 + 2.0 ** -fmt.p),
         fmt.max * (1 + 2.0 ** (1 - fmt.p)), fmt.smallest_normal, fmt.smallest_normal * (1 - 2.0**-10),
         fmt.smallest_normal * 2.0 ** (1 - fmt.p), fmt.smallest_normal * 2.0 ** (-fmt.p),
         fmt.smallest_normal * 2.0 ** (-fmt.p) * 1.5, fmt.smallest_normal * 2.0 ** (-fmt.p - 1),
         1 + 2.0 ** -fmt.p, 1 + 3 * 2.0 ** -fmt.p, big, np.inf, np.nan, np.finfo(dt).tiny / 4]
    a = np.array(v, dtype=np.float64)
    with np.errstate(over="ignore"):
        a = np.concatenate([a, -a]).astype(dt)
    return a


@pytest.fixture(scope="module")
def kernels():
    if _accel.kernels() is None:
        pytest.skip("NUMLAB_ACCEL=0: the compiled kernels are switched off")
    return _accel


@pytest.mark.parametrize("dt,U", [(np.float32, np.uint32), (np.float64, np.uint64)])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_compiled_rounding_bit_identical_to_numpy_path(kernels, fmt, dt, U):
    rng = np.random.default_rng(17)
    x = rng.integers(0, np.iinfo(U).max, 20000, dtype=U, endpoint=True).view(dt)
    x = np.concatenate([x, _boundary(fmt, dt)])
    c = _consts(fmt, np.dtype(dt))
    with np.errstate(all="ignore"):
        for rounding in MODES:
            for sat in (False, True):
                for ftz in (False, True):
                    got = kernels.round_bits(x, c, fmt, rounding, sat, ftz)
                    if got is None:
                        assert fmt not in HANDLED, (fmt.name, rounding)
                        continue
                    exp = _round_bits(x, fmt, rounding, None, sat, ftz)
                    bad = np.flatnonzero(got.view(U) != exp.view(U))
                    assert bad.size == 0, (rounding, sat, ftz, x[bad[:3]], got[bad[:3]], exp[bad[:3]])


def test_compiled_rounding_declines_what_it_does_not_model(kernels):
    x = np.ones(4, np.float32)
    assert kernels.round_bits(x, _consts(FP16, np.dtype(np.float32)), FP16, "stochastic", False, False) is None
