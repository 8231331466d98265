"""glibc's float math models (``numlab.kernels.libm.glibc_*``, the ``algo="glibc"``
choices): what ``std::exp/tanh/erf(float)`` return in Inductor's scalar C++ and ATen's
scalar loops.

Two independent references: fp64 (``numpy`` / ``numlab.ops.erf_ref``), against which
each model must stay within glibc's stated accuracy; and, where the process runs a
glibc whose float functions are the modelled ones (2.27 .. 2.40: the new ``expf``,
fdlibm's ``erff``/``tanhf``/``expm1f``), glibc itself called element by element
through ctypes, which the models must reproduce bit for bit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

import numpy as np
import pytest
from _oracles import bits_equal, same_bits_mask

from numlab.formats import ulp
from numlab.kernels.algorithms import erf, exp, tanh
from numlab.kernels.libm import glibc_erff, glibc_expf, glibc_expm1f, glibc_tanhf
from numlab.ops import erf_ref

MODELS = {"expf": glibc_expf, "erff": glibc_erff, "tanhf": glibc_tanhf, "expm1f": glibc_expm1f}
REF64 = {"expf": np.exp, "erff": erf_ref, "tanhf": np.tanh, "expm1f": np.expm1}
# glibc's stated/known bounds: expf 0.502 ulp; fdlibm erff/tanhf/expm1f a few ulp
BOUND_ULP = {"expf": 0.51, "erff": 2.0, "tanhf": 3.0, "expm1f": 2.0}


def _inputs(seed=7):
    rng = np.random.default_rng(seed)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.84375, 1.25, 6.0, -6.0, 22.0, -22.0,
               88.0, -88.0, -103.5, 88.72, 1e-30, -1e-30, 1e-40, 2.0**-26, 0.3465736, 1.0397208]
    return np.concatenate([rng.standard_normal(60000) * 2, rng.uniform(-30, 30, 20000),
                           rng.uniform(-110, 95, 10000), rng.standard_normal(5000) * 1e-6,
                           special]).astype(np.float32)


def _glibc():
    name, ver = platform.libc_ver()
    if name != "glibc":
        return None, f"not glibc ({name or 'unknown'})"
    major, minor = (int(v) for v in ver.split(".")[:2])
    if not (2, 27) <= (major, minor) <= (2, 40):
        return None, f"glibc {ver}: its float functions are not the modelled ones (2.27 .. 2.40)"
    return ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6"), ""


@pytest.mark.parametrize("fn", sorted(MODELS))
def test_glibc_model_within_stated_accuracy(fn):
    x = _inputs()
    got = MODELS[fn](x).astype(np.float64)
    with np.errstate(all="ignore"):
        ref = REF64[fn](x.astype(np.float64))
    fin = np.isfinite(ref) & (np.abs(ref) < 3.0e38) & (np.abs(ref) > 1.2e-38)
    u = np.asarray(ulp(np.asarray(np.float32(ref[fin]), np.float64), "fp32"), np.float64)
    err = np.abs(got[fin] - ref[fin]) / u
    assert np.max(err) <= BOUND_ULP[fn], (fn, float(np.max(err)))
    assert np.mean(err > 0.5) > 0 or fn == "expf"  # fdlibm's are not correctly rounded
    assert bits_equal(np.isnan(got), np.isnan(ref))


@pytest.mark.parametrize("fn", sorted(MODELS))
def test_glibc_model_bit_for_bit(fn):
    lm, why = _glibc()
    if lm is None:
        pytest.skip(why)
    f = getattr(lm, fn)
    f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
    x = _inputs(11)
    want = np.array([f(float(v)) for v in x], np.float32)  # the reference: glibc, one call each
    got = MODELS[fn](x)
    same = same_bits_mask(got, want, nan_equal=True)
    assert same.all(), (fn, x[~same][:5], got[~same][:5], want[~same][:5])


def test_algo_glibc_routes_to_the_models():
    x = _inputs(3)[:2000]
    assert bits_equal(np.asarray(exp(x, fmt="fp32", algo="glibc"), np.float32), glibc_expf(x), equal_nan=True)
    assert bits_equal(np.asarray(tanh(x, fmt="fp32", algo="glibc"), np.float32), glibc_tanhf(x), equal_nan=True)
    assert bits_equal(np.asarray(erf(x, fmt="fp32", algo="glibc"), np.float32), glibc_erff(x), equal_nan=True)


def test_glibc_models_apply_only_to_the_glibc_versions_they_reproduce(monkeypatch):
    """Outside GLIBC_MODELLED (or without glibc) the scalar-C++ and DEFAULT eager paths
    that call libm are not modelled: NotModelled names glibc, never a guess."""
    from numlab.torch import presets as P

    assert P.glibc_math_unmodelled((2, 36)) is None
    assert "2.41" in P.glibc_math_unmodelled((2, 41))
    assert "not glibc" in P.glibc_math_unmodelled(None)
    monkeypatch.setattr(P, "detect_glibc", lambda: (2, 41))
    assert "glibc 2.41" in P.InductorCpu(vec_isa="none", lanes=1).not_modelled()
    assert P.InductorCpu().not_modelled() is None  # vector ISA: SLEEF, no libm
    eager = P.TorchCpuEager(capability="DEFAULT", softmax_lanes=8)
    assert "glibc 2.41" in eager.not_modelled("softmax")
    assert eager.not_modelled("sum") is None


@pytest.mark.parametrize("op", ["sigmoid", "gelu", "softplus", "mish"])
def test_every_eager_libm_tail_is_refused_without_a_modelled_glibc(monkeypatch, op):
    """The ops whose eager kernel runs a libm scalar tail (sigmoid, gelu with ATen's
    kernel, softplus, mish) are refused when the C library is not a modelled glibc."""
    from numlab.torch import presets as P

    eager = P.TorchCpuEager(capability="AVX512")
    kw = {"approximate": "tanh"} if op == "gelu" else {}  # tanh gelu is always ATen's kernel
    monkeypatch.setattr(P, "detect_glibc", lambda: (2, 36))
    assert eager.not_modelled(op, "bf16", **kw) is None
    monkeypatch.setattr(P, "detect_glibc", lambda: None)  # musl, macOS, ...
    why = eager.not_modelled(op, "bf16", **kw)
    assert "libm" in why and "not glibc" in why
