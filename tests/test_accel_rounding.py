"""numlab.rounding's compiled path (_round_bits_compiled, numba) is
bit-identical to its numpy path (_round_bits's chunked masks, itself tested against
exact references in tests/test_rounding*.py) in every deterministic mode, with and
without saturation and flush-to-zero, for float32 and float64 input, for every
format below fp32 (or it declines the format): on random bit patterns (every class
of value: NaN, inf, overflow, subnormals, zeros) and on constructed boundary
values.  round_to takes the compiled path from _ACCEL_MIN values on."""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import assert_same_bits

from numlab import formats as F
from numlab import rounding as RD
from numlab.formats import BF16, FP8_E4M3, FP8_E5M2, FP16, TF32
from numlab.rounding import _consts, _round_bits, round_to

numba = pytest.importorskip("numba", reason="the compiled path needs numba (a default dependency; absent where no wheel exists)")

HANDLED = [FP16, BF16, FP8_E4M3, FP8_E5M2, TF32]
# every format numlab rounds to: the kernel either declines (None) or matches
FORMATS = list(dict.fromkeys(HANDLED + [f for f in vars(F).values()
                                        if isinstance(f, F.Format) and f.p < 24]))
ROUNDINGS = ["rne", "rtz", "up", "down", "odd", "stochastic"]


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


@pytest.fixture
def kernels(monkeypatch):
    """The compiled path; the numpy path stays the reference (_ACCEL_MIN out of reach)."""
    if RD._compiled_kernels() is None:
        pytest.skip("NUMLAB_ACCEL=0: the compiled kernels are switched off")
    monkeypatch.setattr(RD, "_ACCEL_MIN", 1 << 62)
    return RD


@pytest.mark.parametrize("dt,U", [(np.float32, np.uint32), (np.float64, np.uint64)])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_compiled_rounding_bit_identical_to_numpy_path(kernels, fmt, dt, U):
    rng = np.random.default_rng(17)
    x = rng.integers(0, np.iinfo(U).max, 20000, dtype=U, endpoint=True).view(dt)
    x = np.concatenate([x, _boundary(fmt, dt)])
    c = _consts(fmt, np.dtype(dt))
    with np.errstate(all="ignore"):
        for rounding in ROUNDINGS:
            for sat in (False, True):
                for ftz in (False, True):
                    # stochastic: the same seeded stream on both paths (PCG64's raw words)
                    got = kernels._round_bits_compiled(x, c, fmt, rounding, sat, ftz, np.random.default_rng(9))
                    if got is None:
                        assert fmt not in HANDLED, (fmt.name, rounding)
                        continue
                    exp = _round_bits(x, fmt, rounding, np.random.default_rng(9), sat, ftz)
                    bad = np.flatnonzero(got.view(U) != exp.view(U))
                    assert bad.size == 0, (rounding, sat, ftz, x[bad[:3]], got[bad[:3]], exp[bad[:3]])


def test_compiled_rounding_declines_what_it_does_not_model(kernels):
    x = np.ones(4, np.float32)
    e8m0 = F.get_format("fp8_e8m0")
    assert kernels._round_bits_compiled(x, _consts(e8m0, np.dtype(np.float32)), e8m0, "rne", False, False) is None


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_compiled_stochastic_draws_the_numpy_paths_stream(kernels, dt):
    """Several chunks of _CHUNK values, an odd tail, and a bit generator whose raw
    words are 32-bit (MT19937: rng.integers): the same words, used the same way."""
    x = np.random.default_rng(4).standard_normal(3 * RD._CHUNK + 7).astype(dt) * 1e-5
    c = _consts(FP16, np.dtype(dt))
    for make in (np.random.default_rng, lambda s: np.random.Generator(np.random.MT19937(s))):
        got = kernels._round_bits_compiled(x, c, FP16, "stochastic", False, False, make(3))
        exp = _round_bits(x, FP16, "stochastic", make(3), False, False)
        np.testing.assert_array_equal(got, exp)


def test_round_to_takes_the_compiled_path_on_large_inputs(monkeypatch):
    """From _ACCEL_MIN values on, round_to's result comes from the compiled kernel
    (counted) and equals the numpy path's."""
    if RD._compiled_kernels() is None:
        pytest.skip("NUMLAB_ACCEL=0: the compiled kernels are switched off")
    x = np.random.default_rng(5).integers(0, 2**32, 1 << 17, dtype=np.uint32).view(np.float32)
    calls = []
    orig = RD._round_bits_compiled

    def counting(*a):
        calls.append(a[3])
        return orig(*a)

    monkeypatch.setattr(RD, "_round_bits_compiled", counting)
    with np.errstate(all="ignore"):
        fast = round_to(x, FP8_E4M3, "odd")
        monkeypatch.setattr(RD, "_ACCEL_MIN", 1 << 62)
        slow = round_to(x, FP8_E4M3, "odd")
    assert calls == ["odd"]
    assert_same_bits(fast, slow)


def test_sample_picks_the_compiled_path_only_for_mostly_special_inputs():
    from numlab.bench.rounding import in_range_data

    c = _consts(FP16, np.dtype(np.float32))
    inr = in_range_data(FP16, 1 << 16)
    inr[::3] = 0.0  # zeros are exact on the bit path: not special
    assert not RD._mostly_special(inr.view(np.uint32), c)
    rnd = np.random.default_rng(2).integers(0, 2**32, 1 << 16, dtype=np.uint32)
    assert RD._mostly_special(rnd, c)
