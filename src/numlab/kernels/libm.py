"""Bit-exact models of the vectorised math routines PyTorch's CPU code calls.

They are the numerics behind the ``algo=`` choices ``"sleef_u10"`` (exp),
``"sleef"`` (tanh), ``"aten_vec"`` (erf, gelu) and ``"onednn"`` (gelu) of
:mod:`numlab.kernels.algorithms`; every function takes and returns float32.

* :func:`sleef_expf` -- SLEEF's ``xexpf`` (``Sleef_expf8_u10`` /
  ``Sleef_expf16_u10``), the routine behind ``Vectorized<float>::exp()`` in
  ATen and in Inductor's generated C++.  A Cody-Waite reduction
  ``s = d - q ln2`` with ``q = rint(d / ln2)`` (``ln2`` split in
  ``L2U + L2L``), a degree-6 polynomial evaluated with FMAs (SLEEF's
  ``vmla`` is ``vfmadd`` on AVX2/AVX-512), ``1 + (s*s*u + s)``, then
  ``ldexp`` by ``q``; ``d < -104`` gives 0 and ``d > 100`` gives inf.
  SLEEF states a 1.0-ulp error bound for the ``_u10`` functions.
  Source: SLEEF 3.x ``src/libm/sleefsimdsp.c`` (``xexpf``) and ``misc.h``
  (constants), https://github.com/shibatch/sleef.
* :func:`aten_vec_erf` -- ``Vectorized<float>::erf()`` (ATen
  ``vec512_float.h`` / ``vec256_float.h``): Abramowitz & Stegun 7.1.26,
  ``erf(x) = sign(x) (1 - r(t) t exp(-x^2))`` with ``t = 1/(1 + p|x|)``,
  Horner in FMAs, ``exp`` by SLEEF (above).  A&S state an absolute error
  below 1.5e-7 for the formula; the fp32 evaluation of ``1 - r t exp(-x^2)``
  adds up to ~5 ulp(1) (the tests check ``|err| < 1.5e-7 + 5 * 2^-23``).  Not correctly rounded, which is why
  gelu(erf) differs from an fp64 erf.
* :func:`sleef_tanhf` -- SLEEF's ``xtanhf`` (double-float exp, reciprocal and
  division), Inductor's ``Vectorized<float>::tanh()`` (SLEEF's 1.0-ulp class;
  measured up to 1 + 2e-8 ulp against fp64 on 2e6 inputs).
* :func:`onednn_gelu_erf` -- oneDNN's avx512_core gelu_erf (25 minimax
  polynomials), what eager ``F.gelu`` runs with mkldnn enabled
  (https://github.com/oneapi-src/oneDNN, ``jit_uni_eltwise_injector``).

Every operation is one IEEE fp32 operation (numpy float32 arithmetic or an
exactly rounded FMA), so the models are bit-exact where the C code is.

The float64 section (not a PyTorch model): :func:`erf64` / :func:`erfc64`
(vectorised float64 erf and erfc), :func:`erf_dd` (double-double erf, ~2^-100)
and :func:`erf_rounded` (erf correctly rounded to a format, no loop over
elements), the numerics of ``erf(algo="exact")``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..formats import FP32, Format, get_format
from ..primitives import _two_prod, _two_sum
from ..primitives import fma as _exact_fma
from ._common import round_to

__all__ = ["sleef_expf", "sleef_tanhf", "aten_vec_erf", "onednn_gelu_erf", "fma32"]

_R_LN2F = np.float32(1.442695040888963407359924681001892137426645954152985934135449406931)
_L2UF = np.float32(0.693145751953125)
_L2LF = np.float32(1.428606765330187045e-06)
_EXP_C = [np.float32(c) for c in (
    0.000198527617612853646278381, 0.00139304355252534151077271, 0.00833336077630519866943359,
    0.0416664853692054748535156, 0.166666671633720397949219, 0.5)]


def fma32(a, b, c) -> np.ndarray:
    """fl32(a*b + c) rounded once, the operands taken as float32
    (:func:`numlab.primitives.fma` into fp32: the product is exact in float64;
    the sum is rounded to odd in float64, then to fp32 -- no double rounding)."""
    a, b, c = (np.asarray(v, np.float32) for v in (a, b, c))
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(_exact_fma(a, b, c, FP32), dtype=np.float32)


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


# oneDNN (jit_uni_eltwise_injector, avx512_core): gelu_erf by 25 piecewise minimax
# polynomials of degree 5 in |x|, indexed by the exponent and 2 mantissa bits of |x|.
# Coefficients (hex fp32, degree 0..5, polynomials 0..24) from oneDNN's table
# ``gelu_erf_minimax_polynomial``; torch 2.13's eager F.gelu (fp32/bf16/fp16, approximate
# "none") runs it when mkldnn is enabled (measured).
_ONEDNN_GELU_ERF_POL = [
    [0xa6f2cb94, 0x32827792, 0x3381cc0c, 0x34523d4a, 0x351ac44d, 0x35f36d88, 0x36ee8229,
     0x37b8a3bb, 0x3867a213, 0x3940033b, 0x3a2a5a1d, 0x3ae35863, 0x3b7828f2, 0x3c08b14b,
     0x3c515ed3, 0xbb503236, 0xbd8d8e5e, 0xbe8abcd9, 0xbf0c19a2, 0xbeccb328, 0x3e176ced,
     0x3f470d99, 0x3f7abb28, 0x3f800000, 0x00000000],
    [0x3f4c422a, 0x3f4c421f, 0x3f4c4207, 0x3f4c41cb, 0x3f4c413b, 0x3f4c3fad, 0x3f4c3a2f,
     0x3f4c2d40, 0x3f4c146a, 0x3f4bc341, 0x3f4ad08c, 0x3f48f8cf, 0x3f45fac7, 0x3f404e07,
     0x3f3b980f, 0x3f48dff3, 0x3f78b21b, 0x3fbb0704, 0x40019c32, 0x3fe536d6, 0x3f81331e,
     0x3e6c8684, 0x3c98f936, 0x00000000, 0x3f800000],
    [0xb62173f4, 0x3735e4cf, 0x37f2ff89, 0x388c23be, 0x3917535c, 0x39ab2ab0, 0x3a60fadb,
     0x3af9b960, 0x3b6e5491, 0x3c0a4ec5, 0x3ca5aa8c, 0x3d2138d9, 0x3d8737d4, 0x3ddfb660,
     0x3e0f27ab, 0x3d94004b, 0xbe0efdeb, 0xbf1d96c3, 0xbf89db58, 0xbf6d9897, 0xbef69fb8,
     0xbdc4f8a8, 0xbbde6422, 0x00000000, 0x00000000],
    [0xbe081a19, 0xbe084570, 0xbe08639b, 0xbe089837, 0xbe08f409, 0xbe09ab95, 0xbe0b66d0,
     0xbe0e400a, 0xbe124df8, 0xbe1bde02, 0xbe2f19c9, 0xbe4931bf, 0xbe685fbc, 0xbe89c95f,
     0xbe96cbca, 0xbe8044aa, 0xbe0550f2, 0x3dcfd6a1, 0x3e94c826, 0x3e79345f, 0x3decec91,
     0x3ca46568, 0x3aa1e00a, 0x00000000, 0x00000000],
    [0xba3d61db, 0x39f097a3, 0x3a5845dc, 0x3ab1fa35, 0x3b0cefb8, 0x3b653ab6, 0x3bcae527,
     0x3c221712, 0x3c6c5840, 0x3cc0a703, 0x3d1dcc19, 0x3d63656d, 0x3d955907, 0x3dbf9910,
     0x3dd53f69, 0x3db7dcef, 0x3d639ebe, 0xba6ede48, 0xbd22be69, 0xbd041cf1, 0xbc64f5ab,
     0xbb097a32, 0xb8ebf380, 0x00000000, 0x00000000],
    [0x3cb7d80c, 0x3c9b6050, 0x3c978d11, 0x3c92e850, 0x3c8d058b, 0x3c848454, 0x3c6cd623,
     0x3c4c824b, 0x3c2a7935, 0x3be0b390, 0x3b0651ac, 0xbb232f53, 0xbbd42fa0, 0xbc2c5366,
     0xbc492c9e, 0xbc2a7aa6, 0xbbd55d04, 0xba823a76, 0x3b102aa8, 0x3ae25a7e, 0x3a31f792,
     0x38b84375, 0x3689bb5a, 0x00000000, 0x00000000],
]
_ONEDNN_POL = np.array(_ONEDNN_GELU_ERF_POL, dtype=np.uint32).view(np.float32)  # (6, 25)


def onednn_gelu_erf(x) -> np.ndarray:
    """oneDNN's avx512_core ``gelu_erf`` (minimax table above), bit for bit:
    ``idx = clamp((bits|x| + 0xc21fffff) >> 21, 1, 24)`` (23 beyond |x| > 0x40b15cee),
    ``p = Horner(|x|)`` in FMAs, ``0.5 * (x * (1 + sign(x) p))``."""
    x = np.asarray(x, np.float32)
    f = np.float32
    ax = np.abs(x)
    bits = ax.view(np.int32).astype(np.int64)
    idx = ((bits + np.int64(np.int32(np.uint32(0xC21FFFFF).view(np.int32)))) & 0xFFFFFFFF)
    idx = idx.astype(np.uint32).view(np.int32) >> 21
    idx = np.clip(idx, 1, 24)
    rbound = np.uint32(0x40B15CEE).view(np.float32)
    idx = np.where(rbound < ax, 23, idx)
    with np.errstate(all="ignore"):
        p = _ONEDNN_POL[5][idx]
        for deg in range(4, -1, -1):
            p = fma32(p, ax, _ONEDNN_POL[deg][idx])
        p = np.where(np.signbit(x), -p, p)
        return ((x * (p + f(1))) * f(0.5)).astype(np.float32)


# --- SLEEF tanhf (u10): double-float (df) arithmetic of sleefsimdsp.c / df.h, FMA build ---
def _fmapn(x, y, z):  # x*y - z, one rounding
    return fma32(x, y, -np.asarray(z, np.float32))


def _fmanp(x, y, z):  # -x*y + z, one rounding
    return fma32(-np.asarray(x, np.float32), y, z)


def _dfadd2_vf2_vf(xx, xy, y):
    s = xx + y
    v = s - xx
    t = (xx - (s - v)) + (y - v)
    return s, t + xy


def _dfadd2_vf2_vf2(xx, xy, yx, yy):
    s = xx + yx
    v = s - xx
    t = (xx - (s - v)) + (yx - v)
    return s, t + (xy + yy)


def _dfadd_vf2_vf2(xx, xy, yx, yy):  # |x| >= |y|
    s = xx + yx
    return s, (((xx - s) + yx) + xy) + yy


def _dfmul_vf2_vf(xx, xy, y):
    s = xx * y
    return s, fma32(xy, y, _fmapn(xx, y, s))


def _dfmul_vf2_vf2(xx, xy, yx, yy):
    s = xx * yx
    return s, fma32(xx, yy, fma32(xy, yx, _fmapn(xx, yx, s)))


def _ldexp2(u, q):
    qi = q.astype(np.int64)
    h = qi >> 1
    u = (u.astype(np.float64) * np.exp2(h.astype(np.float64))).astype(np.float32)
    return (u.astype(np.float64) * np.exp2((qi - h).astype(np.float64))).astype(np.float32)


def _expk2f(dx, dy):
    f = np.float32
    u = (dx + dy) * _R_LN2F
    q = np.rint(u)
    q = np.where(np.isfinite(q), q, 0).astype(np.float32)
    sx, sy = _dfadd2_vf2_vf(dx, dy, q * -_L2UF)
    sx, sy = _dfadd2_vf2_vf(sx, sy, q * -_L2LF)
    u = np.full(dx.shape, f(0.1980960224e-3), np.float32)
    u = fma32(u, sx, f(0.1394256484e-2))
    u = fma32(u, sx, f(0.8333456703e-2))
    u = fma32(u, sx, f(0.4166637361e-1))
    tx, ty = _dfmul_vf2_vf(sx, sy, u)
    tx, ty = _dfadd2_vf2_vf(tx, ty, f(0.166666659414234244790680580464))
    tx, ty = _dfmul_vf2_vf2(sx, sy, tx, ty)
    tx, ty = _dfadd2_vf2_vf(tx, ty, f(0.5))
    qx = sx * sx  # dfsqu
    qy = fma32(sx + sx, sy, _fmapn(sx, sx, qx))
    mx, my = _dfmul_vf2_vf2(qx, qy, tx, ty)
    tx, ty = _dfadd2_vf2_vf2(sx, sy, mx, my)
    s = f(1) + tx  # dfadd_vf2_vf_vf2(1, t)
    ty = ((f(1) - s) + tx) + ty
    tx = s
    return _ldexp2(tx, q), _ldexp2(ty, q)


def sleef_tanhf(x) -> np.ndarray:
    """SLEEF ``xtanhf`` (``Sleef_tanhf16_u10``, Inductor's ``Vectorized<float>::tanh()``),
    bit for bit: ``d = exp(|x|)`` in double-float (``expk2f``), ``(d - 1/d) / (d + 1/d)``
    by double-float reciprocal and division (FMA variants of df.h), 1 beyond 8.664339742,
    sign of x, NaN passes.  Source: SLEEF 3.x sleefsimdsp.c / df.h."""
    x = np.asarray(x, np.float32)
    f = np.float32
    with np.errstate(all="ignore"):
        y = np.abs(x)
        dx, dy = _expk2f(y, np.zeros_like(y))
        ex = f(1) / dx  # dfrec_vf2_vf2
        ey = ex * _fmanp(dy, ex, _fmanp(dx, ex, f(1)))
        nx, ny = _dfadd_vf2_vf2(dx, dy, -ex, -ey)
        mx, my = _dfadd_vf2_vf2(dx, dy, ex, ey)
        t = f(1) / mx  # dfdiv_vf2_vf2_vf2(n, m)
        s = nx * t
        u = _fmapn(t, nx, s)
        v = _fmanp(my, t, _fmanp(mx, t, f(1)))
        qy = fma32(s, v, fma32(ny, t, u))
        r = s + qy
        r = np.where((y > f(8.664339742)) | np.isnan(r), f(1), r)
        r = np.where(np.signbit(x), -r, r)
        r = np.where(np.isnan(x), x, r)
    return r.astype(np.float32)


# --------------------------------------------------------------------------
# float64 erf / erfc (vectorised) and a correctly rounded erf
# --------------------------------------------------------------------------
_SQRT_PI = math.sqrt(math.pi)
_TWO_OVER_SQRT_PI = (1.1283791670955126, 1.533545961316588e-17)  # 2/sqrt(pi) as hi + lo
_LN2 = (0.6931471805599453, 2.3190468138462996e-17)  # ln 2 as hi + lo
ERF64_REL_ERR = 2.0**-44
"""Bound used on the relative error of :func:`erf64`: 2^-44 ~ 5.7e-14.  A
worst-case count gives ~2^-46.4 (Horner over at most 40 positive terms,
gamma_80 ~ 2^-46.7, plus exp and the products; the continued-fraction region
has erf within 4e-4 of +-1, so its relative error barely shows); measured
below 5e-16 (2^-50.9) against mpmath on 24000 dense points
(tests/test_kernels_erf.py)."""
_DD_LARGE = 6.0  # |x| >= 6: erf(x) = sign(x) (1 - erfc64(|x|)) as an exact pair (erfc(6) ~ 2e-17)


def _erf_series(z):
    """erf(z) = 2/sqrt(pi) exp(-z^2) sum_n (2z^2)^n z / (2n+1)!!  (all terms
    of one sign, Abramowitz & Stegun 7.1.6); for |z| < 1 term k is below
    2**k / (2k+1)!! times the first, so 30 terms reach 1e-25 relative."""
    z2 = z * z
    w = 2.0 * z2
    t = z.copy()
    s = z.copy()
    for k in range(1, 30):  # in place: t *= 2z^2/(2k+1); s += t
        np.multiply(t, w, out=t)
        np.divide(t, 2 * k + 1, out=t)
        np.add(s, t, out=s)
    return (2.0 / _SQRT_PI) * np.exp(-z2) * s


def _erfc_cf(z):
    """erfc(z) for z >= 1 by the continued fraction (A&S 7.1.14)
    erfc z = exp(-z^2)/sqrt(pi) / (z + 1/2/(z + 1/(z + 3/2/(z + ...)))),
    evaluated backwards with 200 terms for z < 2, 60 for z < 4, 25 beyond
    (each bucket measured against mpmath to < 1e-13 relative)."""
    out = np.empty_like(z)
    for lo, hi, terms in ((-np.inf, 2.0, 200), (2.0, 4.0, 60), (4.0, np.inf, 25)):
        m = (z >= lo) & (z < hi)
        zz = z[m]
        k = zz.copy()
        for n in range(terms, 0, -1):  # in place: k = z + (n/2) / k
            np.divide(0.5 * n, k, out=k)
            np.add(k, zz, out=k)
        out[m] = np.exp(-zz * zz) / _SQRT_PI / k
    return out


def erfc64(x) -> np.ndarray:
    """float64 erfc, vectorised; relative error below ~1e-13 (tested against
    mpmath).  Series for |x| < 1, continued fraction for |x| >= 1,
    erfc(-x) = 2 - erfc(x); NaN propagates, erfc(+-inf) = 0, 2."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    ax = np.abs(x)
    small = ax < 1.0
    big = ~small & ~np.isnan(x)
    out[small] = 1.0 - _erf_series(x[small])
    with np.errstate(all="ignore"):
        c = _erfc_cf(np.where(np.isinf(ax[big]), 30.0, ax[big]))
    out[big] = np.where(x[big] > 0, c, 2.0 - c)
    out[np.isnan(x)] = np.nan
    return out


_SERIES_COEF = tuple(float(Fraction(2**k, math.prod(range(1, 2 * k + 2, 2)))) for k in range(40))
"""``2^k / (2k+1)!!``: erf(z) = 2/sqrt(pi) z exp(-z^2) sum_k c_k z^(2k) (A&S 7.1.6)."""
# Buckets of |x|: (upper end, "series" or "cf", terms).  Series: the terms
# needed for 2^-58 relative at the upper end (all terms positive; the ratio
# 2z^2/(2k+3) is below 1/2 after them).  "cf": erf = 1 - erfc with erfc by the
# continued fraction; the terms needed for an absolute error below 2^-58 at the
# lower end (measured against mpmath; the error falls as |x| grows).
_ERF64_BUCKETS = (
    (0.5, "series", 14), (1.0, "series", 20), (1.5, "series", 26), (2.0, "series", 33),
    (2.5, "series", 39), (3.0, "cf", 32), (3.5, "cf", 22), (4.0, "cf", 15), (6.0, "cf", 10),
)


def erf64(x) -> np.ndarray:
    """float64 erf, vectorised; relative error below ~1e-15 (measured below
    5e-16 against mpmath; the bound :func:`erf_rounded` uses is
    :data:`ERF64_REL_ERR`).  |x| < 2.5: the A&S 7.1.6 series by Horner in
    z^2; 2.5 <= |x| < 6: ``1 - erfc`` with erfc by the continued fraction
    (A&S 7.1.14); the number of terms per bucket of |x| in ``_ERF64_BUCKETS``;
    |x| >= 6: +-1 (erfc(6) ~ 2e-17 < 2^-54, so 1 is the float64 value of
    1 - erfc).  erf(+-0) = +-0, erf(+-inf) = +-1, NaN propagates (payload kept)."""
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    out = np.where(np.isnan(x), x, np.sign(x))  # |x| >= 6, +-inf and NaN
    lo = 0.0
    for hi, kind, terms in _ERF64_BUCKETS:
        m = (ax >= lo) & (ax < hi)
        lo = hi
        if not m.any():
            continue
        if kind == "series":
            z = x[m]
            z2 = z * z
            p = np.full_like(z, _SERIES_COEF[terms])
            for c in _SERIES_COEF[terms - 1::-1]:  # in place: p = p z^2 + c_k
                np.multiply(p, z2, out=p)
                np.add(p, c, out=p)
            out[m] = (2.0 / _SQRT_PI) * z * np.exp(-z2) * p
        else:
            z = ax[m]
            k = z.copy()
            for n in range(terms, 0, -1):  # in place: k = z + (n/2) / k
                np.divide(0.5 * n, k, out=k)
                np.add(k, z, out=k)
            out[m] = np.sign(x[m]) * (1.0 - np.exp(-z * z) / _SQRT_PI / k)
    return out


# double-double arithmetic (value = hi + lo, |lo| <= ulp(hi)/2); Dekker/Knuth,
# no FMA needed; every operand here is far from overflow.  TwoSum, Veltkamp's split
# and TwoProd are numlab.primitives' error-free transformations.
def _fast_two_sum(a, b):  # |a| >= |b| or a == 0
    s = a + b
    return s, b - (s - a)


def _dd_add(ah, al, bh, bl):
    s, e = _two_sum(ah, bh)
    t, f = _two_sum(al, bl)
    s, e = _fast_two_sum(s, e + t)
    return _fast_two_sum(s, e + f)


def _dd_mul(ah, al, bh, bl):
    p, e = _two_prod(ah, bh)
    return _fast_two_sum(p, e + (ah * bl + al * bh))


def _dd_div_int(ah, al, n):  # (ah + al) / n, n a small integer
    q = ah / n
    p, e = _two_prod(q, np.float64(n))
    return _fast_two_sum(q, (((ah - p) - e) + al) / n)


def _dd_exp_neg(qh, ql):
    """exp(-(qh + ql)) in double-double for 0 <= q < 40: k = rint(q / ln2),
    r = k ln2 - q in double-double (|r| <= ln2/2), 27-term Taylor by Horner
    (remainder < 1e-40), scaled by 2^-k."""
    k = np.rint(qh / _LN2[0])
    ph, pl = _two_prod(k, np.full_like(k, _LN2[0]))
    rh, rl = _dd_add(ph, pl + k * _LN2[1], -qh, -ql)
    sh, sl = np.ones_like(qh), np.zeros_like(qh)
    for n in range(27, 0, -1):  # s = 1 + r s / n
        sh, sl = _dd_div_int(sh, sl, n)
        sh, sl = _dd_mul(sh, sl, rh, rl)
        sh, sl = _dd_add(sh, sl, 1.0, 0.0)
    ki = -k.astype(np.int64)
    return np.ldexp(sh, ki), np.ldexp(sl, ki)


def erf_dd(x) -> tuple[np.ndarray, np.ndarray]:
    """erf(x) as a double-double pair ``(hi, lo)``, vectorised, relative error
    below 2^-99 for |x| >= 2^-900 (tested against mpmath at 60 digits; for
    smaller |x| the ``lo`` parts are subnormal and the error grows, to ~2^-78
    at 1e-300, still far below an fp64 ulp).

    |x| < 6: the A&S 7.1.6 series (all terms positive, so no cancellation)
    times ``2/sqrt(pi) exp(-x^2)``, all in double-double; the number of terms
    is set by the largest |x| (the loop stops when every term is below 2^-110
    of its sum; ~150 terms at |x| = 6).  |x| >= 6: ``(sign(x), -sign(x)
    max(erfc64(|x|), 2^-1074))``: erfc(|x|) < 2^-55 there, so the pair's error is
    erfc's relative error times erfc, below 2^-140, and the nonzero ``lo`` keeps
    the value strictly inside (-1, 1).  ``+-0``, ``+-inf`` and NaN (payload kept) are exact.
    Slow (hundreds of vector passes): meant for the few elements
    :func:`erf_rounded` cannot decide from :func:`erf64`.
    """
    x = np.asarray(x, dtype=np.float64)
    hi = np.where(np.isnan(x), x, np.sign(x) * np.where(np.isinf(x), 1.0, 0.0))
    hi = np.where(x == 0, x, hi)  # keeps the sign of zero
    lo = np.zeros_like(x)
    ax = np.abs(x)
    big = np.isfinite(x) & (ax >= _DD_LARGE)
    if big.any():
        s = np.sign(x[big])
        hi[big] = s
        lo[big] = -s * np.maximum(erfc64(ax[big]), 5e-324)
    mid = (ax > 0) & (ax < _DD_LARGE)
    if mid.any():
        z = ax[mid]
        qh, ql = _two_prod(z, z)
        wh, wl = 2.0 * qh, 2.0 * ql  # 2 z^2 exactly
        th, tl = z.copy(), np.zeros_like(z)
        sh, sl = z.copy(), np.zeros_like(z)
        for k in range(1, 2000):  # t *= 2z^2 / (2k+1); s += t
            th, tl = _dd_div_int(*_dd_mul(th, tl, wh, wl), 2 * k + 1)
            sh, sl = _dd_add(sh, sl, th, tl)
            if np.all(th <= sh * 2.0**-110):
                break
        eh, el = _dd_exp_neg(qh, ql)
        ph, pl = _dd_mul(sh, sl, eh, el)
        ph, pl = _dd_mul(ph, pl, *_TWO_OVER_SQRT_PI)
        s = np.sign(x[mid])
        hi[mid], lo[mid] = s * ph, s * pl
    return hi, lo


def erf_bracket(x, v, fmt: Format, rounding: str = "rne") -> tuple[np.ndarray, np.ndarray]:
    """Round the ends of the interval known to hold ``erf(x)`` given
    ``v = erf64(x)``: ``[v - e, v + e]`` with ``e = |v|`` :data:`ERF64_REL_ERR`,
    for finite nonzero ``x`` clipped to ``|erf| <= 1 - 2^-53`` (``|erf(x)| < 1``,
    and no boundary of a format of at most 52 bits lies in ``(1 - 2^-53, 1)``);
    ``+-0``, ``+-inf`` and NaN inputs give ``v`` (exact) at both ends.  Where
    the two ends round to the same value, that value is the correct rounding of
    ``erf(x)`` (every deterministic rounding mode is monotone)."""
    x = np.asarray(x, dtype=np.float64)
    fin = np.isfinite(x) & (x != 0)
    lim = 1.0 - 2.0**-53
    e = np.abs(v) * ERF64_REL_ERR
    lo_v = np.where(fin, np.maximum(v - e, -lim), v)
    hi_v = np.where(fin, np.minimum(v + e, lim), v)
    return round_to(lo_v, fmt, rounding), round_to(hi_v, fmt, rounding)


def erf_undecided(x, v, fmt: Format, rounding: str = "rne") -> np.ndarray:
    """Mask of the elements whose rounding to ``fmt`` the float64 value
    ``v = erf64(x)`` cannot decide: the ends of :func:`erf_bracket` round to
    two different values.  Exact results (``+-0``, ``+-inf`` inputs) and NaN
    are never undecided.  For formats with more than 50 bits of precision every
    finite nonzero input is undecided."""
    x = np.asarray(x, dtype=np.float64)
    if fmt.p > 50:
        return np.isfinite(x) & (x != 0)
    r_lo, r_hi = erf_bracket(x, v, fmt, rounding)
    return ~np.isnan(x) & (r_lo != r_hi)


def _round_dd(hi, lo, fmt: Format, rounding: str) -> np.ndarray:
    """Round ``hi + lo`` (a double-double) to ``fmt``: when ``hi`` is itself a
    rounding boundary of ``fmt`` (a value of ``fmt`` or a midpoint of two) and
    ``lo != 0``, ``hi`` is moved one float64 ulp towards ``lo``, which puts it
    strictly on the side of the boundary where ``hi + lo`` lies (``fmt`` has at
    most 50 bits, so its boundaries are >= 2^3 float64 ulps apart) and rounding
    it gives the rounding of ``hi + lo``.  Wider formats: ``hi`` (the
    double-double's ``hi`` is ``fl(hi + lo)``, so this is correct for
    ``rounding="rne"``; directed modes may be one ulp off there)."""
    if fmt.p > 50:
        return round_to(hi, fmt, rounding)
    d = round_to(hi, fmt, "down")
    u = round_to(hi, fmt, "up")
    on = (hi == d) | (hi - d == u - hi)
    toward = np.nextafter(hi, np.where(lo > 0, np.inf, -np.inf))
    return round_to(np.where(on & (lo != 0), toward, hi), fmt, rounding)


def erf_rounded(x, fmt, rounding: str = "rne") -> np.ndarray:
    """``erf(x)`` correctly rounded to ``fmt`` (float64 array of ``fmt`` values),
    vectorised, no loop over elements.

    :func:`erf64` decides almost every element (one rounding of a float64
    value, or rather the common rounding of both ends of :func:`erf_bracket`);
    the few that :func:`erf_undecided` flags (the float64 value lies
    within its error bound of a rounding boundary of ``fmt``; measured 0 to 5
    per 10^6 random fp32 inputs for fp32, about 1 per 10^6 uniform(-6, 6)
    inputs, none on all fp16 inputs for fp16/bf16) are recomputed with :func:`erf_dd`
    (~2^-100 relative) and rounded by :func:`_round_dd`.  Correctly rounded
    for every format of at most 50 bits and every deterministic rounding mode, unless
    erf(x) is within ~2^-100 relative of a boundary (not known to occur).  For
    fp64 every finite nonzero input goes through :func:`erf_dd` (slow;
    correctly rounded for ``rne``).  ``rounding="stochastic"`` rounds the float64
    value once (``round_to`` requires its ``rng``).
    """
    fmt = get_format(fmt)
    with np.errstate(invalid="ignore"):  # signalling NaN inputs: NaN out, no warning
        x = np.asarray(x, dtype=np.float64)
    v = erf64(x)
    if rounding == "stochastic":
        return round_to(v, fmt, rounding)
    if fmt.p > 50:
        out = np.asarray(round_to(v, fmt, rounding), dtype=np.float64).copy()
        m = np.isfinite(x) & (x != 0)
    else:
        out, r_hi = erf_bracket(x, v, fmt, rounding)
        out = np.asarray(out, dtype=np.float64).copy()
        m = ~np.isnan(x) & (out != r_hi)
    if m.any():
        hi, lo = erf_dd(x[m])
        out[m] = _round_dd(hi, lo, fmt, rounding)
    return out


# --- oneDNN's gelu_erf below avx512_core (avx2, sse41): Abramowitz & Stegun 7.1.26 ---
# jit_uni_eltwise_injector.cpp (oneDNN 3.x, https://github.com/oneapi-src/oneDNN):
# gelu_erf_compute_vector_fwd takes the minimax table only for avx512_core and up;
# below it evaluates A&S with oneDNN's own exp (exp_compute_vector_fwd).  Constants are
# the kernel's hex table entries.
def _hexf(h: int) -> np.float32:
    return np.array([h], dtype=np.uint32).view(np.float32)[0]


_DNNL_LOG2EF = _hexf(0x3FB8AA3B)
_DNNL_LN2F = _hexf(0x3F317218)
_DNNL_LN_FLT_MAX = _hexf(0x42B17218)
_DNNL_LN_FLT_MIN = _hexf(0xC2AEAC50)
_DNNL_EXP_POL = [_hexf(h) for h in (0x3F7FFFFB, 0x3EFFFEE3, 0x3E2AAD40, 0x3D2B9D0D, 0x3C07CFCE)]
_DNNL_AS_P = _hexf(0x3EA7BA05)  # 0.3275911
_DNNL_AS_SQRT1_2 = _hexf(0x3F3504F3)
_DNNL_AS_POL = [_hexf(h) for h in (0x3E827906, 0xBE91A98E, 0x3FB5F0E3, 0xBFBA00E3, 0x3F87DC22)]


def onednn_expf(x) -> np.ndarray:
    """oneDNN's ``exp_compute_vector_fwd`` (its JIT exp), bit for bit: clamp to
    [ln FLT_MIN, ln FLT_MAX], ``n = floor(x log2e + 0.5)``, ``r = fma(-n, ln2, x)``,
    ``p = 1 + r (p1 + r (p2 + ...))`` by FMAs (degree 5), ``p * 2^(n-1) * 2``;
    inputs below ln FLT_MIN give 0."""
    x = np.asarray(x, np.float32)
    f = np.float32
    with np.errstate(all="ignore"):
        low = x < _DNNL_LN_FLT_MIN
        xc = np.maximum(np.minimum(x, _DNNL_LN_FLT_MAX), _DNNL_LN_FLT_MIN)
        fx = np.floor(xc * _DNNL_LOG2EF + f(0.5)).astype(f)
        r = fma32(-fx, _DNNL_LN2F, xc)
        scale = np.exp2((fx - f(1)).astype(np.float64)).astype(f)  # 2^(n-1): exact, a normal
        scale = np.where(low, f(0), scale)
        p = np.full(x.shape, _DNNL_EXP_POL[4], f)
        for c in (_DNNL_EXP_POL[3], _DNNL_EXP_POL[2], _DNNL_EXP_POL[1], _DNNL_EXP_POL[0], f(1)):
            p = fma32(p, r, c)
        return ((p * scale) * f(2)).astype(f)


def onednn_gelu_erf_avx2(x) -> np.ndarray:
    """oneDNN's gelu_erf below avx512_core (what eager ``F.gelu`` runs when oneDNN
    dispatches avx2, e.g. on AMD Zen 3 or with ``ONEDNN_MAX_CPU_ISA=AVX2``), bit for bit:
    ``z = x / sqrt 2`` (a multiply), ``t = 1 / fma(p, |z|, 1)``,
    ``e = -onednn_expf(-(z z)) t``, ``erf = sign(z) fma(e, r(t), 1)`` with ``r`` by
    FMAs, ``S = 0.5 x``, ``gelu = fma(erf, S, S)``."""
    x = np.asarray(x, np.float32)
    f = np.float32
    with np.errstate(all="ignore"):
        z = x * _DNNL_AS_SQRT1_2
        t = f(1) / fma32(_DNNL_AS_P, np.abs(z), f(1))
        e = -onednn_expf(-(z * z))
        e = e * t
        r = np.full(x.shape, _DNNL_AS_POL[4], f)
        for c in (_DNNL_AS_POL[3], _DNNL_AS_POL[2], _DNNL_AS_POL[1], _DNNL_AS_POL[0]):
            r = fma32(r, t, c)
        erf = fma32(e, r, f(1))
        erf = np.where(np.signbit(z), -erf, erf)
        s = x * f(0.5)
        return fma32(erf, s, s).astype(f)


__all__ += ["onednn_expf", "onednn_gelu_erf_avx2"]


# --- SLEEF log1pf (u10): Vectorized<float>::log1p() of ATen and Inductor -------------
_LOG1P_C = [np.float32(c) for c in (0.3027294874, 0.3996108174, 0.6666694880)]
_LN2_DF = (np.float32(0.69314718246459960938), np.float32(-1.904654323148236017e-09))


def sleef_log1pf(d) -> np.ndarray:
    """SLEEF ``xlog1pf`` (``Sleef_log1pf16_u10`` / ``Sleef_log1pf8_u10``, what
    ``Vectorized<float>::log1p()`` calls in ATen and in Inductor's generated C++),
    bit for bit.  ``e = floor(log2((1 + d) * (1/0.75)))`` (``vgetexp``; 128 when
    that product overflows), ``t = 2^-e``, ``m = fma(d, t, t - 1)`` (the reduced
    argument ``(1 + d) 2^-e - 1`` without rounding ``1 + d``), ``x = m / (2 + m)``
    in double-float (df.h ``dfdiv``, FMA build), ``s = e ln2 + 2x + x^3 P(x^2)``
    (``ln2`` split in two floats, ``P`` degree 2 by FMAs, df adds), ``s.x + s.y``;
    ``d > 1e38`` gives inf, ``d < -1`` NaN, ``d = -1`` -inf, ``-0`` stays ``-0``.
    The AVX2 build (``vilogb2k``) takes the same steps for ``1 + d >= FLT_MIN``.
    Source: SLEEF 3.x ``src/libm/sleefsimdsp.c`` (``xlog1pf``) and ``df.h``,
    https://github.com/shibatch/sleef."""
    d = np.asarray(d, np.float32)
    f = np.float32
    with np.errstate(all="ignore"):
        dp1 = d + f(1)
        g = dp1 * f(f(1) / f(0.75))
        e = np.floor(np.log2(np.abs(g).astype(np.float64)))  # vgetexp: exact for normals
        e = np.where(np.isposinf(g), 128.0, e)
        e = np.where(np.isfinite(e), e, 0.0).astype(np.float32)
        t = np.exp2(-e.astype(np.float64)).astype(np.float32)  # vldexp3(1, -e): exact
        m = fma32(d, t, t - f(1))
        # x = dfdiv((m, 0), dfadd_vf2_vf_vf(2, m))
        bx = f(2) + m
        by = (f(2) - bx) + m
        rt = f(1) / bx
        sx = m * rt
        u = _fmapn(rt, m, sx)
        v = _fmanp(by, rt, _fmanp(bx, rt, f(1)))
        xx = sx
        xy = fma32(sx, v, fma32(np.zeros_like(m), rt, u))
        x2 = xx * xx
        p = np.full(d.shape, _LOG1P_C[0], np.float32)
        p = fma32(p, x2, _LOG1P_C[1])
        p = fma32(p, x2, _LOG1P_C[2])
        s_x, s_y = _dfmul_vf2_vf(_LN2_DF[0], _LN2_DF[1], e)
        s_x, s_y = _dfadd_vf2_vf2(s_x, s_y, xx * f(2), xy * f(2))
        w = (x2 * xx) * p
        s = s_x + w  # dfadd_vf2_vf2_vf(s, w)
        s_y = ((s_x - s) + w) + s_y
        r = s + s_y
        r = np.where(d > f(1e38), f(np.inf), r)
        r = np.where(f(-1) > d, f(np.nan), r)
        r = np.where(d == f(-1), f(-np.inf), r)
        r = np.where((d == 0) & np.signbit(d), f(-0.0), r)
        r = np.where(np.isnan(d), d, r)
    return r.astype(np.float32)


__all__ += ["sleef_log1pf"]


# --- glibc log1pf (fdlibm's float log1p): libm's log1pf in ATen's and Inductor's scalar loops
_FD_LN2_HI = np.float32(6.9313812256e-01)  # 0x3f317180
_FD_LN2_LO = np.float32(9.0580006145e-06)  # 0x3717f7d1
_FD_LP = [np.float32(c) for c in (6.6666668653e-01, 4.0000000596e-01, 2.8571429849e-01, 2.2222198546e-01,
                                  1.8183572590e-01, 1.5313838422e-01, 1.4798198640e-01)]


def glibc_log1pf(x) -> np.ndarray:
    """glibc's ``log1pf`` (``sysdeps/ieee754/flt-32/s_log1pf.c``, fdlibm's float
    ``log1p``, glibc <= 2.40), bit for bit: ``1 + x = 2^k (1 + f)`` with
    ``sqrt(2)/2 <= 1 + f < sqrt(2)``, a correction ``c = (1 - (u - x)) / u`` for the
    rounded ``u = 1 + x``, ``s = f / (2 + f)``, ``R = z (Lp1 + ... + z^6 Lp7)`` with
    ``z = s^2`` (Horner in fp32, no FMA), ``k ln2_hi - ((hfsq - (s (hfsq + R) +
    (k ln2_lo + c))) - f)``.  Not correctly rounded (measured ~6% of ``|x|``
    drawn from N(0, 8) differ from the correctly rounded value by an ulp).
    What ``std::log1p(float)`` returns in the scalar tail loops of ATen's
    vectorised kernels and of Inductor's C++ on glibc 2.36 (measured 100% on
    4e5 inputs).  Source: https://sourceware.org/git/glibc.git (s_log1pf.c)."""
    x = np.asarray(x, np.float32)
    f32 = np.float32
    hx = x.view(np.int32).astype(np.int64)
    ax = hx & 0x7FFFFFFF
    with np.errstate(all="ignore"):
        # general path (k != 0): u = 1 + x (or x itself when x >= 2^53-ish)
        big = hx >= 0x5A000000
        u = np.where(big, x, f32(1) + x)
        hu = u.view(np.int32).astype(np.int64)
        k = (hu >> 23) - 127
        c = np.where(k > 0, f32(1) - (u - x), x - (u - f32(1)))
        c = np.where(big, f32(0), c / u)
        hu = hu & 0x007FFFFF
        low = hu < 0x3504F7
        un = np.where(low, hu | 0x3F800000, hu | 0x3F000000).astype(np.int32).view(np.float32)
        k = np.where(low, k, k + 1)
        hu = np.where(low, hu, (0x00800000 - hu) >> 2)
        fg = un - f32(1)
        # small path (k == 0): -0.2929 < x < 0.41422
        k0 = (hx < 0x3ED413D7) & ((hx > 0) | (hx <= np.int64(np.int32(np.uint32(0xBE95F61F).view(np.int32)))))
        f = np.where(k0, x, fg)
        k = np.where(k0, 0, k)
        c = np.where(k0, f32(0), c)
        hu = np.where(k0, 1, hu)
        kf = k.astype(np.float32)
        hfsq = f32(0.5) * f * f
        # |f| < 2^-20 (hu == 0)
        R0 = hfsq * (f32(1) - f32(0.66666666666666666) * f)
        r_hu0 = np.where(f == 0, np.where(k == 0, f32(0), kf * _FD_LN2_HI + (c + kf * _FD_LN2_LO)),
                         np.where(k == 0, f - R0, kf * _FD_LN2_HI - ((R0 - (kf * _FD_LN2_LO + c)) - f)))
        s = f / (f32(2) + f)
        z = s * s
        p = _FD_LP[6]
        for cf in reversed(_FD_LP[:6]):
            p = cf + z * p
        R = z * p
        r = np.where(k == 0, f - (hfsq - s * (hfsq + R)),
                     kf * _FD_LN2_HI - ((hfsq - (s * (hfsq + R) + (kf * _FD_LN2_LO + c))) - f))
        r = np.where(hu == 0, r_hu0, r)
        # |x| < 2^-29: x - x*x/2 (x itself below 2^-54)
        tiny = (hx < 0x3ED413D7) & (ax < 0x31000000)
        r = np.where(tiny, np.where(ax < 0x24800000, x, x - x * x * f32(0.5)), r)
        r = np.where(x == f32(-1), f32(-np.inf), r)
        r = np.where((hx < 0x3ED413D7) & (ax >= 0x3F800000) & (x != f32(-1)), f32(np.nan), r)
        r = np.where(hx >= 0x7F800000, x + x, r)  # +inf, NaN
    return r.astype(np.float32)


__all__ += ["glibc_log1pf"]


# glibc's expf (sysdeps/ieee754/flt-32/e_expf.c and e_exp2f_data.c, glibc >= 2.27):
# 2^(i/32) table entries as uint64 bit patterns minus (i << 47), and the degree-3 polynomial
_GLIBC_EXP2F_TAB = np.array([
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
], dtype=np.uint64)
_GLIBC_EXPF_N = 32
_GLIBC_EXPF_SHIFT = float.fromhex("0x1.8p+52")
_GLIBC_EXPF_INVLN2N = float.fromhex("0x1.71547652b82fep+0") * _GLIBC_EXPF_N
_GLIBC_EXPF_C = (float.fromhex("0x1.c6af84b912394p-5") / _GLIBC_EXPF_N**3,
                 float.fromhex("0x1.ebfce50fac4f3p-3") / _GLIBC_EXPF_N**2,
                 float.fromhex("0x1.62e42ff0c52d6p-1") / _GLIBC_EXPF_N)


def glibc_expf(x) -> np.ndarray:
    """glibc's ``expf`` (``sysdeps/ieee754/flt-32/e_expf.c``, glibc >= 2.27), bit for bit
    on the inputs measured: in float64, ``z = x 32/ln2``, ``k = rint(z)`` by the
    ``1.5 * 2^52`` shift, ``r = z - k``, ``s = 2^(k/32)`` from a 32-entry table and the
    exponent bits, ``y = s ((C0 r + C1) r^2 + (C2 r + 1))``, one rounding to fp32.
    glibc states 0.502 ulp (not correctly rounded: ~0.1% of N(0, 2) inputs differ by
    an ulp from the correctly rounded value).  What ``std::exp(float)`` returns in
    Inductor's scalar C++ (no vector ISA) and in ATen's scalar loops on glibc
    (measured 100%).  The x86_64 build may evaluate the polynomial with FMAs (an
    ``ifunc`` variant); a float64 rounding difference reaches the fp32 result only
    within ~2^-29 of a rounding boundary.  Source: https://sourceware.org/git/glibc.git."""
    x = np.asarray(x, np.float32)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        z = _GLIBC_EXPF_INVLN2N * xd
        kd = z + _GLIBC_EXPF_SHIFT
        ki = np.ascontiguousarray(kd).view(np.uint64)
        kd = kd - _GLIBC_EXPF_SHIFT
        r = z - kd
        t = _GLIBC_EXP2F_TAB[(ki % np.uint64(_GLIBC_EXPF_N)).astype(np.intp)] + (ki << np.uint64(47))
        s = t.view(np.float64)
        c0, c1, c2 = _GLIBC_EXPF_C
        zz = c0 * r + c1
        r2 = r * r
        y = c2 * r + 1.0
        y = zz * r2 + y
        y = (y * s).astype(np.float32)
        ax = np.abs(x)
        big = ~(ax < np.float32(88.0))  # |x| >= 88 or NaN: glibc's special cases
        special = np.where(np.isnan(x), x + x, np.where(x > np.float32(float.fromhex("0x1.62e42ep6")),
                                                        np.float32(np.inf), np.where(
            x < np.float32(float.fromhex("-0x1.9fe368p6")), np.float32(0), y)))
        y = np.where(big, special, y)
    return np.asarray(y, np.float32)


__all__ += ["glibc_expf"]


def _f32c(*vals):
    return [np.float32(v) for v in vals]


# fdlibm's s_erff.c coefficients (glibc <= 2.40, sysdeps/ieee754/flt-32/s_erff.c)
_ERFF_ERX, _ERFF_EFX = _f32c(8.4506291151e-01, 1.2837916613e-01)
_ERFF_PP = _f32c(1.2837916613e-01, -3.2504209876e-01, -2.8481749818e-02, -5.7702702470e-03, -2.3763017452e-05)
_ERFF_QQ = _f32c(3.9791721106e-01, 6.5022252500e-02, 5.0813062117e-03, 1.3249473704e-04, -3.9602282413e-06)
_ERFF_PA = _f32c(-2.3621185683e-03, 4.1485610604e-01, -3.7220788002e-01, 3.1834661961e-01, -1.1089469492e-01,
                 3.5478305072e-02, -2.1663755178e-03)
_ERFF_QA = _f32c(1.0642088205e-01, 5.4039794207e-01, 7.1828655899e-02, 1.2617121637e-01, 1.3637083583e-02,
                 1.1984500103e-02)
_ERFF_RA = _f32c(-9.8649440333e-03, -6.9385856390e-01, -1.0558626175e+01, -6.2375331879e+01, -1.6239666748e+02,
                 -1.8460508728e+02, -8.1287437439e+01, -9.8143291473e+00)
_ERFF_SA = _f32c(1.9651271820e+01, 1.3765776062e+02, 4.3456588745e+02, 6.4538726807e+02, 4.2900814819e+02,
                 1.0863500214e+02, 6.5702495575e+00, -6.0424413532e-02)
_ERFF_RB = _f32c(-9.8649431020e-03, -7.9928326607e-01, -1.7757955551e+01, -1.6063638306e+02, -6.3756646729e+02,
                 -1.0250950928e+03, -4.8351919556e+02)
_ERFF_SB = _f32c(3.0338060379e+01, 3.2579251099e+02, 1.5367296143e+03, 3.1998581543e+03, 2.5530502930e+03,
                 4.7452853394e+02, -2.2440952301e+01)


def _horner(z, c0, cs):
    """``c0 + z*(cs[0] + z*(cs[1] + ...))`` in fp32, no FMA (fdlibm's nesting)."""
    p = cs[-1]
    for c in reversed(cs[:-1]):
        p = c + z * p
    return c0 + z * p


def glibc_erff(x) -> np.ndarray:
    """glibc's ``erff`` (fdlibm's ``s_erff.c``, glibc <= 2.40), bit for bit: rational
    approximations in fp32 (Horner, no FMA) on ``|x| < 0.84375``, ``[0.84375, 1.25)``,
    ``[1.25, 1/0.35)``, ``[1/0.35, 6)``, the last two as ``1 - exp(-z^2 - 0.5625)
    exp((z - x)(z + x) + R/S) / x`` with ``z`` = ``x`` truncated to 11 bits and
    :func:`glibc_expf`; ``+-1`` from 6 on.  Not correctly rounded (about 1 in 10 of
    N(0, 2) inputs is an ulp off).  ``std::erf(float)`` of Inductor's scalar C++ (no
    vector ISA) on glibc 2.36.  Source: https://sourceware.org/git/glibc.git (s_erff.c)."""
    x = np.asarray(x, np.float32)
    f = np.float32
    one = f(1)
    hx = x.view(np.int32)
    ix = hx & np.int32(0x7FFFFFFF)
    with np.errstate(all="ignore"):
        # |x| < 0.84375
        z = x * x
        r = _horner(z, _ERFF_PP[0], _ERFF_PP[1:])
        s = _horner(z, one, _ERFF_QQ)
        y_small = x + x * (r / s)
        y_tiny = np.where(ix < 0x04000000, f(0.0625) * (f(16) * x + (f(16) * _ERFF_EFX) * x), x + _ERFF_EFX * x)
        y_small = np.where(ix < 0x31800000, y_tiny, y_small)
        # 0.84375 <= |x| < 1.25
        ax = np.abs(x)
        s1 = ax - one
        P = _horner(s1, _ERFF_PA[0], _ERFF_PA[1:])
        Q = _horner(s1, one, _ERFF_QA)
        y_mid = np.where(hx >= 0, _ERFF_ERX + P / Q, -_ERFF_ERX - P / Q)
        # 1.25 <= |x| < 6
        s2 = one / (ax * ax)
        lo = ix < 0x4036DB6E
        R = np.where(lo, _horner(s2, _ERFF_RA[0], _ERFF_RA[1:]), _horner(s2, _ERFF_RB[0], _ERFF_RB[1:]))
        S = np.where(lo, _horner(s2, one, _ERFF_SA), _horner(s2, one, _ERFF_SB))
        zt = (ax.view(np.int32) & np.int32(np.uint32(0xFFFFF000).view(np.int32))).view(np.float32)
        rr = glibc_expf(-zt * zt - f(0.5625)) * glibc_expf((zt - ax) * (zt + ax) + R / S)
        y_big = np.where(hx >= 0, one - rr / ax, rr / ax - one)
        y = np.where(ix < 0x3F580000, y_small, np.where(ix < 0x3FA00000, y_mid, y_big))
        y = np.where(ix >= 0x40C00000, np.where(hx >= 0, one, -one), y)  # one - tiny rounds to 1
        y = np.where(ix >= 0x7F800000, np.where(hx >= 0, one, -one) + one / x, y)
    return np.asarray(y, np.float32)


__all__ += ["glibc_erff"]


_EXPM1F_LN2_HI, _EXPM1F_LN2_LO, _EXPM1F_INVLN2 = _f32c(6.9313812256e-01, 9.0580006145e-06, 1.4426950216e+00)
_EXPM1F_Q = _f32c(-3.3333335072e-02, 1.5873016091e-03, -7.9365076090e-05, 4.0082177293e-06, -2.0109921195e-07)


def _add_exponent(y, k):
    """``SET_FLOAT_WORD(y, GET_FLOAT_WORD(y) + (k << 23))``: add ``k`` to ``y``'s exponent."""
    return (y.view(np.int32) + (k.astype(np.int32) << np.int32(23))).view(np.float32)


def glibc_expm1f(x) -> np.ndarray:
    """glibc's ``expm1f`` (fdlibm's ``s_expm1f.c``, glibc <= 2.40), bit for bit: ``x = k ln2
    + r`` (``ln2`` split in hi/lo, correction ``c``), a degree-5 rational-in-``r^2/2``
    polynomial in fp32 (no FMA) and the exponent added by integer arithmetic on the
    bits; ``-1`` below ``-27 ln2``.  Used by :func:`glibc_tanhf`.
    Source: https://sourceware.org/git/glibc.git (s_expm1f.c)."""
    x0 = np.asarray(x, np.float32)
    f = np.float32
    one = f(1)
    bits = x0.view(np.uint32)
    neg = (bits & np.uint32(0x80000000)) != 0
    hx = (bits & np.uint32(0x7FFFFFFF)).astype(np.int64)
    with np.errstate(all="ignore"):
        near = hx < 0x3F851592
        kf = np.trunc(_EXPM1F_INVLN2 * x0 + np.where(neg, f(-0.5), f(0.5)))
        k_far = np.clip(np.nan_to_num(kf), -1000, 1000).astype(np.int64)
        t = k_far.astype(np.float32)
        hi = np.where(near, np.where(neg, x0 + _EXPM1F_LN2_HI, x0 - _EXPM1F_LN2_HI), x0 - t * _EXPM1F_LN2_HI)
        lo = np.where(near, np.where(neg, -_EXPM1F_LN2_LO, _EXPM1F_LN2_LO), t * _EXPM1F_LN2_LO)
        k = np.where(near, np.where(neg, -1, 1), k_far)
        reduce_ = hx > 0x3EB17218
        xr = np.where(reduce_, hi - lo, x0)
        c = np.where(reduce_, (hi - xr) - lo, f(0))
        k = np.where(reduce_, k, 0)
        hfx = f(0.5) * xr
        hxs = xr * hfx
        r1 = _horner(hxs, one, _EXPM1F_Q)
        t = f(3) - r1 * hfx
        e = hxs * ((r1 - t) / (f(6) - xr * t))
        y_k0 = xr - (xr * e - hxs)
        e = xr * (e - c) - c
        e = e - hxs
        y_m1 = f(0.5) * (xr - e) - f(0.5)
        y_p1 = np.where(xr < f(-0.25), -f(2) * (e - (xr + f(0.5))), one + f(2) * (xr - e))
        y_far = _add_exponent(one - (e - xr), k) - one
        ks = np.clip(k, 0, 22)
        t_mid = (np.int32(0x3F800000) - (np.int32(0x1000000) >> ks.astype(np.int32))).view(np.float32)
        y_mid = _add_exponent(t_mid - (e - xr), k)
        kb = np.clip(k, 23, 56)
        t_hi = ((np.int32(0x7F) - kb.astype(np.int32)) << np.int32(23)).view(np.float32)
        y_hi = _add_exponent((xr - (e + t_hi)) + one, k)
        y = np.where(k == 0, y_k0, np.where(k == -1, y_m1, np.where(k == 1, y_p1, np.where(
            (k <= -2) | (k > 56), y_far, np.where(k < 23, y_mid, y_hi)))))
        y = np.where((~reduce_) & (hx < 0x33000000), x0, y)
        big = hx >= 0x4195B844
        y = np.where(big & neg, -one, y)
        y = np.where(big & ~neg & (x0 > f(8.8721679688e+01)), f(np.inf), y)
        y = np.where(hx >= 0x7F800000, np.where(hx > 0x7F800000, x0 + x0, np.where(neg, -one, x0)), y)
    return np.asarray(y, np.float32)


def glibc_tanhf(x) -> np.ndarray:
    """glibc's ``tanhf`` (fdlibm's ``s_tanhf.c``, glibc <= 2.40; 2.41 replaced it by
    CORE-MATH's correctly rounded one), bit for bit: ``|x| >= 1``: ``1 - 2/(expm1f(2|x|) +
    2)``, else ``-t/(t + 2)`` with ``t = expm1f(-2|x|)`` (:func:`glibc_expm1f`), the sign
    of ``x``; ``+-1`` from 22 on.  Not correctly rounded (about 1 in 5 of N(0, 2) inputs is
    an ulp or two off).  ``std::tanh(float)`` of Inductor's scalar C++ (no vector ISA)
    on glibc 2.36.  Source: https://sourceware.org/git/glibc.git (s_tanhf.c)."""
    x = np.asarray(x, np.float32)
    f = np.float32
    one, two = f(1), f(2)
    jx = x.view(np.int32)
    ix = jx & np.int32(0x7FFFFFFF)
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        t1 = glibc_expm1f(two * ax)
        z1 = one - two / (t1 + two)
        t0 = glibc_expm1f(-two * ax)
        z0 = -t0 / (t0 + two)
        z = np.where(ix >= 0x3F800000, z1, z0)
        z = np.where(ix < 0x41B00000, z, one)  # one - tiny rounds to 1
        r = np.where(jx >= 0, z, -z)
        r = np.where(ix < 0x24000000, x * (one + x), r)
        r = np.where(ix == 0, x, r)
        r = np.where(ix >= 0x7F800000, np.where(jx >= 0, one / x + one, one / x - one), r)
    return np.asarray(r, np.float32)


__all__ += ["glibc_expm1f", "glibc_tanhf"]
