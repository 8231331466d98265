"""Bit-exact models of the vectorised math routines PyTorch's CPU code calls.

* :func:`sleef_expf` -- SLEEF's ``xexpf`` (``Sleef_expf8_u10`` /
  ``Sleef_expf16_u10``), the routine behind ``Vectorized<float>::exp()`` in
  ATen and in Inductor's generated C++.  A Cody-Waite reduction
  ``s = d - q ln2`` with ``q = rint(d / ln2)`` (``ln2`` split in
  ``L2U + L2L``), a degree-6 polynomial evaluated with FMAs (SLEEF's
  ``vmla`` is ``vfmadd`` on AVX2/AVX-512), ``1 + (s*s*u + s)``, then
  ``ldexp`` by ``q``; ``d < -104`` gives 0 and ``d > 100`` gives inf.
  Source: SLEEF 3.x ``src/libm/sleefsimdsp.c`` (``xexpf``) and
  ``misc.h`` (constants).
* :func:`aten_vec_erf` -- ``Vectorized<float>::erf()`` (ATen
  ``vec512_float.h`` / ``vec256_float.h``): Abramowitz & Stegun 7.1.26,
  ``erf(x) = sign(x) (1 - r(t) t exp(-x^2))`` with ``t = 1/(1 + p|x|)``,
  Horner in FMAs, ``exp`` by SLEEF (above).  Not correctly rounded (error
  up to ~1e-7 absolute), which is why gelu(erf) differs from an fp64 erf.

Every operation is one IEEE fp32 operation (numpy float32 arithmetic or an
exactly rounded FMA), so the models are bit-exact where the C code is.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sleef_expf", "aten_vec_erf", "fma32"]

_R_LN2F = np.float32(1.442695040888963407359924681001892137426645954152985934135449406931)
_L2UF = np.float32(0.693145751953125)
_L2LF = np.float32(1.428606765330187045e-06)
_EXP_C = [np.float32(c) for c in (
    0.000198527617612853646278381, 0.00139304355252534151077271, 0.00833336077630519866943359,
    0.0416664853692054748535156, 0.166666671633720397949219, 0.5)]


def fma32(a, b, c) -> np.ndarray:
    """fl32(a*b + c) rounded once (the product is exact in float64; the sum is
    rounded to odd in float64, then to fp32 -- exact, no double rounding)."""
    from ..formats import FP32
    from ..kernels._common import round_sum2

    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    p = a.astype(np.float64) * b.astype(np.float64)
    c = np.broadcast_to(np.asarray(c, np.float32).astype(np.float64), p.shape)
    p, c = np.broadcast_arrays(p, c)
    return np.asarray(round_sum2(p, c, FP32), dtype=np.float32)


def sleef_expf(d) -> np.ndarray:
    """SLEEF ``xexpf`` on float32 values (module docstring), bit for bit."""
    d = np.asarray(d, np.float32)
    f = np.float32
    with np.errstate(all="ignore"):
        q = np.rint(d * _R_LN2F)  # vrint_vi2_vf: round half even
        q = np.where(np.isfinite(q), q, 0).astype(np.float32)
        s = fma32(q, -_L2UF, d)
        s = fma32(q, -_L2LF, s)
        u = np.full(d.shape, _EXP_C[0], np.float32)
        for c in _EXP_C[1:]:
            u = fma32(u, s, c)
        u = f(1) + fma32(s * s, u, s)
        qi = q.astype(np.int64)
        h = qi >> 1
        # vldexp2: u * 2^(q>>1) * 2^(q - (q>>1)); exact scalings in float64, one final rounding
        # (at most one rounding happens, in the second step, when the result is subnormal)
        u = (u.astype(np.float64) * np.exp2(h.astype(np.float64))).astype(np.float32)
        u = (u.astype(np.float64) * np.exp2((qi - h).astype(np.float64))).astype(np.float32)
        u = np.where(d < f(-104), f(0), u)
        u = np.where(f(100) < d, f(np.inf), u)
        u = np.where(np.isnan(d), d, u)
    return u.astype(np.float32)


def aten_vec_erf(x) -> np.ndarray:
    """ATen ``Vectorized<float>::erf()`` (module docstring), bit for bit."""
    x = np.asarray(x, np.float32)
    f = np.float32
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        t = f(1) / fma32(f(0.3275911), ax, f(1))
        r = fma32(f(1.061405429), t, f(-1.453152027))
        r = fma32(r, t, f(1.421413741))
        r = fma32(r, t, f(-0.284496736))
        r = fma32(r, t, f(0.254829592))
        e = sleef_expf(-(x * x))
        tmp6 = (-e) * t
        y = fma32(tmp6, r, f(1))
        return np.where(np.signbit(x), -y, y).astype(np.float32)
