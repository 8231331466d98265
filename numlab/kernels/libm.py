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
"""

from __future__ import annotations

import numpy as np

from ..formats import FP32
from ._common import round_sum2

__all__ = ["sleef_expf", "sleef_tanhf", "aten_vec_erf", "onednn_gelu_erf", "fma32"]

_R_LN2F = np.float32(1.442695040888963407359924681001892137426645954152985934135449406931)
_L2UF = np.float32(0.693145751953125)
_L2LF = np.float32(1.428606765330187045e-06)
_EXP_C = [np.float32(c) for c in (
    0.000198527617612853646278381, 0.00139304355252534151077271, 0.00833336077630519866943359,
    0.0416664853692054748535156, 0.166666671633720397949219, 0.5)]


def fma32(a, b, c) -> np.ndarray:
    """fl32(a*b + c) rounded once (the product is exact in float64; the sum is
    rounded to odd in float64, then to fp32 -- exact, no double rounding)."""
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
