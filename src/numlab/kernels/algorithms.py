"""Algorithms: rsqrt, reciprocal and division by estimate + Newton steps; exp,
tanh, erf and gelu correctly rounded or by a stated approximation.

Seeds (initial estimates)
-------------------------
``Table(bits)``
    A lookup table with ``bits`` correct bits, modelled as: write ``x = m 2^e``
    with ``m`` in [1, 2); the table is indexed by the top ``bits`` fraction
    bits of ``m`` (truncation; for rsqrt also by the parity of ``e``, i.e. the
    input is first scaled to [1, 4) by an even power of two); each entry is the
    exact function at the midpoint of its input interval, rounded to
    ``bits + 2`` significant bits.  The worst relative error is below
    ``2^-bits`` (checked exhaustively over all entries by
    :func:`seed_error_bound`); measured, it is about ``2^-(bits + 1.25)``, so
    a table seed is somewhat better than the hardware estimate of the same
    nominal width: 8 bits stands for Arm FRSQRTE/FRECPE, 12 bits for x86
    RSQRTPS/RCPPS (``|e| <= 1.5 * 2^-12``, about 11.4 bits: two Newton steps
    for full fp32 accuracy where ``table12`` needs one), 14 bits for AVX-512
    VRSQRT14PS.
``Magic()``
    The bit trick: ``i = 0x5f3759df - (bits(x) >> 1)`` for rsqrt (Quake III;
    worst relative error about 3.4%), ``i = 0x7ef311c7 - bits(x)`` for the
    reciprocal; on the fp32 bit pattern of ``x``.

Newton steps (``Newton(seed, steps, step_fmt)``), each operation rounded to
``step_fmt``:

* rsqrt: ``r = y*y; t = x*r; h = 1.5 - 0.5*t; y = y*h``.  With
  ``y = (1+e)/sqrt(x)`` the exact-arithmetic error recurrence is
  ``e' = -(3/2) e^2 - (1/2) e^3``.
* reciprocal: ``t = x*y; h = 2 - t; y = y*h``; ``e' = -e^2``.

The result is then rounded to ``fmt``.  :func:`steps_needed` turns the seed's
worst error and the recurrence into the number of steps a format needs.

Transcendentals (``exp``, ``tanh``, ``erf``, ``gelu``): ``algo="exact"``
evaluates in float64 (numpy; erf by :func:`numlab.kernels.libm.erf64`, relative
error below 2^-44) and rounds once to ``fmt``: correctly rounded except for
inputs whose value is within the float64 error of a rounding boundary of
``fmt``.  ``erf`` resolves those: :func:`numlab.kernels.libm.erf_rounded`
re-evaluates them in double-double, so ``erf(algo="exact")`` is correctly
rounded (checked against mpmath on all fp16 inputs and fp32 samples).  For fp16 and bf16
results of fp16/bf16 inputs this is checked exhaustively in the tests (exp,
tanh, erf against mpmath where float64 cannot decide; rsqrt by exact midpoint
squares); for fp32 it is not proven.  ``ExpPoly(degree)`` is the
stated approximation for exp: ``k = rint(x log2 e)``, ``r = (x - k ln2_hi) -
k ln2_lo`` (Cody-Waite, ``ln2_hi`` with 12 trailing zero bits so ``k ln2_hi`` is
exact for ``|k| < 2^12``), ``p(r) = sum_{i<=degree} r^i / i!`` by Horner, and
``ldexp(p, k)``, every operation in ``step_fmt`` (fp32 by default).

PyTorch's CPU routines, bit for bit (:mod:`numlab.kernels.libm`; fp32 in,
fp32 out, then rounded to ``fmt``): ``exp(algo="sleef_u10")`` (SLEEF
``expf_u10``, 1 ulp), ``tanh(algo="sleef")`` (SLEEF ``tanhf_u10``, 1 ulp),
``erf(algo="aten_vec")`` (ATen's A&S 7.1.26, absolute error < 1.5e-7 + 5 * 2^-23),
``gelu(algo="onednn")`` (oneDNN's gelu_erf), ``gelu(algo="aten_vec")`` and
``gelu(algo="aten_scalar")`` (ATen's GeluKernel, vectorised loop / scalar
loop).  ``gelu`` takes torch's ``approximate="none"|"tanh"``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..formats import FP32, Format, get_format
from . import libm
from ._common import Arith, as_values, check_choice, round_to, to_container

__all__ = [
    "Table",
    "Magic",
    "Newton",
    "ExpPoly",
    "parse_algo",
    "rsqrt",
    "reciprocal",
    "divide",
    "sqrt",
    "exp",
    "tanh",
    "erf",
    "gelu",
    "seed_estimate",
    "seed_error_bound",
    "newton_recurrence",
    "steps_needed",
    "steps_table",
    "RSQRT_ALGOS",
    "RECIP_ALGOS",
    "DIV_ALGOS",
    "EXP_ALGOS",
    "TANH_ALGOS",
    "LOG1P_ALGOS",
    "log1p",
    "ERF_ALGOS",
    "GELU_ALGOS",
    "GELU_APPROXIMATE",
]

RSQRT_ALGOS = ("exact", "sqrt_then_div", "newton(<seed>,<steps>[,<step_fmt>])")
RECIP_ALGOS = ("exact", "newton(<seed>,<steps>[,<step_fmt>])")
DIV_ALGOS = ("exact", "recip_mul", "newton(<seed>,<steps>[,<step_fmt>])")
SEEDS = ("table8", "table12", "table14", "table<bits>", "magic")
EXP_ALGOS = ("exact", "exp_poly(<degree>[,<step_fmt>])", "sleef_u10", "glibc")
TANH_ALGOS = ("exact", "sleef", "glibc")
LOG1P_ALGOS = ("exact", "sleef_u10", "glibc")
ERF_ALGOS = ("exact", "aten_vec", "glibc")
GELU_ALGOS = ("exact", "onednn", "onednn_avx2", "aten_vec", "aten_scalar", "glibc", "glibc_nofma")
GELU_APPROXIMATE = ("none", "tanh")
FUNCS = ("rsqrt", "reciprocal")


@dataclass(frozen=True)
class Table:
    """Table estimate with ``bits`` correct bits (module docstring)."""

    bits: int = 12

    def __post_init__(self):
        if not isinstance(self.bits, int | np.integer) or isinstance(self.bits, bool) or not 1 <= self.bits <= 23:
            raise ValueError(f"seed bits={self.bits!r} is not valid; it must be an int in [1, 23]")

    def __str__(self):
        return f"table{self.bits}"


@dataclass(frozen=True)
class Magic:
    """The 0x5f3759df bit trick (rsqrt) / 0x7ef311c7 (reciprocal)."""

    rsqrt_constant: int = 0x5F3759DF
    recip_constant: int = 0x7EF311C7

    def __str__(self):
        return "magic"


def _parse_seed(s):
    if isinstance(s, Table | Magic):
        return s
    if isinstance(s, str):
        t = s.strip().lower()
        if t == "magic":
            return Magic()
        if t.startswith("table") and t[5:].isdigit():
            return Table(int(t[5:]))
    raise ValueError(f"seed={s!r} is not valid; valid seeds: {list(SEEDS)}")


@dataclass(frozen=True)
class Newton:
    """Estimate ``seed`` refined by ``steps`` Newton-Raphson steps in ``step_fmt``."""

    seed: object = "table12"
    steps: int = 1
    step_fmt: Format = FP32

    def __post_init__(self):
        object.__setattr__(self, "seed", _parse_seed(self.seed))
        if not isinstance(self.steps, int | np.integer) or isinstance(self.steps, bool) or self.steps < 0:
            raise ValueError(f"steps={self.steps!r} is not valid; it must be an int >= 0")
        object.__setattr__(self, "step_fmt", get_format(self.step_fmt, "step_fmt"))

    def __str__(self):
        return f"newton({self.seed},{self.steps},{self.step_fmt.name})"


@dataclass(frozen=True)
class ExpPoly:
    """exp by Cody-Waite range reduction and a degree-``degree`` Taylor polynomial."""

    degree: int = 5
    step_fmt: Format = FP32

    def __post_init__(self):
        if not isinstance(self.degree, int | np.integer) or isinstance(self.degree, bool) or not 1 <= self.degree <= 12:
            raise ValueError(f"degree={self.degree!r} is not valid; it must be an int in [1, 12]")
        object.__setattr__(self, "step_fmt", get_format(self.step_fmt, "step_fmt"))

    def __str__(self):
        return f"exp_poly({self.degree},{self.step_fmt.name})"


def parse_algo(a, valid=RSQRT_ALGOS, knob: str = "algo"):
    """Parse an algorithm: a plain name listed in ``valid`` (``"exact"``,
    ``"sqrt_then_div"``, ``"recip_mul"``, ``"sleef_u10"``, ``"aten_vec"``, ...),
    ``"newton(table12,1,fp32)"``, ``"exp_poly(5)"``, or pass an algorithm object through."""
    if isinstance(a, Newton | ExpPoly):
        return a
    if isinstance(a, str):
        t = a.strip().lower().replace(" ", "")
        if t in valid and "(" not in t:
            return t
        if t.startswith("newton(") and t.endswith(")") and any(v.startswith("newton") for v in valid):
            args = [p for p in t[7:-1].split(",") if p]
            if 2 <= len(args) <= 3:
                try:
                    steps = int(args[1])
                except ValueError:
                    raise ValueError(f"steps={args[1]!r} is not valid; it must be an int >= 0") from None
                return Newton(args[0], steps, *(args[2:]))
        if t.startswith("exp_poly(") and t.endswith(")") and any(v.startswith("exp_poly") for v in valid):
            args = [p for p in t[9:-1].split(",") if p]
            if 1 <= len(args) <= 2:
                try:
                    degree = int(args[0])
                except ValueError:
                    raise ValueError(f"{knob}={a!r}: degree={args[0]!r} is not valid; it must be an int "
                                     "(e.g. 'exp_poly(5)')") from None
                return ExpPoly(degree, *(args[1:]))
    raise ValueError(f"{knob}={a!r} is not valid; valid choices: {list(valid)}")


# --------------------------------------------------------------------------
# seeds
# --------------------------------------------------------------------------
def _round_sig(v: np.ndarray, bits: int) -> np.ndarray:
    m, e = np.frexp(v)
    return np.ldexp(np.rint(np.ldexp(m, bits)), e - bits)


def seed_estimate(x, seed, func: str = "rsqrt") -> np.ndarray:
    """The seed's estimate of ``rsqrt(x)`` or ``1/x`` (float64 values).

    Zero gives ±inf, negative input to rsqrt NaN, inf gives 0, NaN stays NaN.
    """
    check_choice("func", func, FUNCS)
    seed = _parse_seed(seed)
    x = as_values(x).astype(np.float64)
    ax = np.abs(x)
    with np.errstate(all="ignore"):
        if isinstance(seed, Magic):
            xf = ax.astype(np.float32)  # the trick reads the fp32 bit pattern
            i = xf.view(np.int32).astype(np.int64)
            if func == "rsqrt":
                j = seed.rsqrt_constant - (i >> 1)
            else:
                j = seed.recip_constant - i
            y = j.astype(np.int32).view(np.float32).astype(np.float64)
        else:
            b = int(seed.bits)
            m, e = np.frexp(ax)  # ax = m 2^e, m in [0.5, 1)
            m = m * 2.0
            e = e - 1  # m in [1, 2)
            idx = np.floor(np.ldexp(m - 1.0, b))
            mid = 1.0 + np.ldexp(idx + 0.5, -b)
            if func == "rsqrt":
                odd = (e % 2) != 0
                mid = np.where(odd, 2 * mid, mid)
                ee = np.where(odd, e - 1, e)
                y = np.ldexp(_round_sig(1.0 / np.sqrt(mid), b + 2), -(ee // 2))
            else:
                y = np.ldexp(_round_sig(1.0 / mid, b + 2), -e)
        if func == "rsqrt":
            y = np.where(ax == 0, np.inf, y)
            y = np.where(np.isinf(ax), 0.0, y)
            y = np.where(x < 0, np.nan, y)
            y = np.copysign(y, np.where(x == 0, x, 1.0))
        else:
            y = np.where(ax == 0, np.inf, y)
            y = np.where(np.isinf(ax), 0.0, y)
            y = np.copysign(y, x)
        y = np.where(np.isnan(x), np.nan, y)
    return y


def seed_error_bound(seed, func: str = "rsqrt") -> float:
    """Worst relative error ``max |y0 * f(x)^-1 - 1|`` of the seed over all inputs.

    Table seeds: exhaustive over entries.  On an entry's input interval
    ``[a, a + w)`` the estimate is constant and the relative error is
    monotone in x, so its supremum is reached at an end point.  Magic seed:
    the error depends only on the significand and the exponent's parity; a
    sweep of every 64th significand at both parities, refined exhaustively
    (+-256 codes) around the 32 worst (checked against the full 2^24 sweep).
    """
    return _seed_error_bound(_parse_seed(seed), func)


@functools.lru_cache(maxsize=64)
def _seed_error_bound(seed, func: str) -> float:
    check_choice("func", func, FUNCS)
    seed = _parse_seed(seed)
    if isinstance(seed, Magic):
        def err(codes):
            xs = codes.astype(np.int32).view(np.float32).astype(np.float64)
            y = seed_estimate(xs, seed, func)
            ref = 1 / np.sqrt(xs) if func == "rsqrt" else 1 / xs
            return np.abs(y / ref - 1)

        base = np.concatenate([np.arange(0, 2**23, 64) | (127 << 23), np.arange(0, 2**23, 64) | (128 << 23)])
        e = err(base)
        top = base[np.argsort(e)[-32:]]
        near = (top[:, None] + np.arange(-256, 257)[None, :]).ravel()
        near = near[((near >> 23) == 127) | ((near >> 23) == 128)]
        return float(max(e.max(), err(near).max()))
    b = int(seed.bits)
    idx = np.arange(2**b, dtype=np.float64)
    lo = 1.0 + np.ldexp(idx, -b)
    hi = 1.0 + np.ldexp(idx + 1, -b)
    worst = 0.0
    for scale in ((1.0, 2.0) if func == "rsqrt" else (1.0,)):
        y = seed_estimate(lo * scale, seed, func)
        for end in (lo * scale, hi * scale):
            ref = 1 / np.sqrt(end) if func == "rsqrt" else 1 / end
            worst = max(worst, float(np.max(np.abs(y / ref - 1))))
    return worst


def newton_recurrence(e: float, func: str = "rsqrt") -> float:
    """One exact-arithmetic Newton step on the relative error ``e``.

    rsqrt: ``-(3/2) e^2 - (1/2) e^3``; reciprocal: ``-e^2``.
    """
    check_choice("func", func, FUNCS)
    if func == "rsqrt":
        return -1.5 * e * e - 0.5 * e**3
    return -e * e


def steps_needed(seed, fmt, func: str = "rsqrt") -> int:
    """Fewest Newton steps after which the exact-arithmetic error bound, started
    from :func:`seed_error_bound` and propagated by :func:`newton_recurrence`
    (worst case: ``|e'| <= (3/2)|e|^2 + (1/2)|e|^3`` resp. ``|e|^2``), is at
    most ``u`` of ``fmt``."""
    fmt = get_format(fmt)
    e = seed_error_bound(seed, func)
    k = 0
    while e > fmt.u:
        e = abs(newton_recurrence(abs(e), func)) if func == "reciprocal" else 1.5 * e * e + 0.5 * e**3
        k += 1
        if k > 20:
            raise ValueError(f"seed={seed} does not converge for {func}")
    return k


def steps_table(seeds=("table8", "table12", "table14", "magic"), fmts=("fp8_e4m3", "bf16", "fp16", "tf32", "fp32"), func="rsqrt") -> dict:
    """``{seed: {fmt: steps_needed}}`` for the given seeds and formats."""
    return {str(_parse_seed(s)): {get_format(f).name: steps_needed(s, f, func) for f in fmts} for s in seeds}


# --------------------------------------------------------------------------
# rsqrt / reciprocal / division
# --------------------------------------------------------------------------
def _newton(x64: np.ndarray, algo: Newton, func: str) -> np.ndarray:
    ar = Arith(algo.step_fmt)
    xs = ar.round(x64)
    y = ar.round(seed_estimate(x64, algo.seed, func))
    one5 = ar.dtype.type(1.5)
    half = ar.dtype.type(0.5)
    two = ar.dtype.type(2.0)
    for _ in range(int(algo.steps)):
        if func == "rsqrt":
            r = ar.mul(y, y)
            t = ar.mul(xs, r)
            h = ar.sub(one5, ar.mul(half, t))
            y = ar.mul(y, h)
        else:
            t = ar.mul(xs, y)
            h = ar.sub(two, t)
            y = ar.mul(y, h)
    return y


def _finish(v, fmt: Format, rounding: str):
    return to_container(np.asarray(round_to(v, fmt, rounding)), fmt)


def rsqrt(x, *, fmt, algo="exact", rounding: str = "rne"):
    """``1/sqrt(x)`` rounded to ``fmt``.

    algo : ``"exact"`` (float64 then one rounding; see module docstring),
        ``"sqrt_then_div"`` (``fl(1 / fl(sqrt(x)))`` in ``fmt``: two
        roundings), or ``Newton(seed, steps, step_fmt)`` / its string.
    Returns ``fmt.container``.
    """
    fmt = get_format(fmt)
    algo = parse_algo(algo, RSQRT_ALGOS)
    x64 = as_values(x).astype(np.float64)
    with np.errstate(all="ignore"):
        if algo == "exact":
            v = 1.0 / np.sqrt(x64)
        elif algo == "sqrt_then_div":
            ar = Arith(fmt)
            s = ar.round(np.sqrt(ar.round(x64).astype(np.float64)))  # sqrt correctly rounded
            v = ar.div(ar.dtype.type(1.0), s)
        else:
            v = _newton(x64, algo, "rsqrt")
    return _finish(v, fmt, rounding)


def sqrt(x, *, fmt, rounding: str = "rne"):
    """Correctly rounded square root in ``fmt`` (float64 sqrt then one rounding;
    double rounding is innocuous for sqrt when ``2p+2 <= 53``)."""
    fmt = get_format(fmt)
    with np.errstate(all="ignore"):
        return _finish(np.sqrt(as_values(x).astype(np.float64)), fmt, rounding)


def reciprocal(x, *, fmt, algo="exact", rounding: str = "rne"):
    """``1/x`` rounded to ``fmt``: ``"exact"`` or ``Newton(seed, steps, step_fmt)``."""
    fmt = get_format(fmt)
    algo = parse_algo(algo, RECIP_ALGOS)
    x64 = as_values(x).astype(np.float64)
    with np.errstate(all="ignore"):
        v = 1.0 / x64 if algo == "exact" else _newton(x64, algo, "reciprocal")
    return _finish(v, fmt, rounding)


def divide(a, b, *, fmt, algo="exact", rounding: str = "rne"):
    """``a / b`` rounded to ``fmt``.

    algo : ``"exact"`` (true division, one rounding), ``"recip_mul"``
        (``fl(a * fl(1/b))``, two roundings) or ``Newton(...)``
        (``fl(a * y)`` with ``y`` the Newton reciprocal in ``step_fmt``).
    """
    fmt = get_format(fmt)
    algo = parse_algo(algo, DIV_ALGOS)
    a64 = as_values(a, "a").astype(np.float64)
    b64 = as_values(b, "b").astype(np.float64)
    with np.errstate(all="ignore"):
        if algo == "exact":
            v = a64 / b64
        elif algo == "recip_mul":
            r = round_to(1.0 / b64, fmt, rounding).astype(np.float64)
            v = a64 * r
        else:
            y = _newton(b64, algo, "reciprocal")
            v = a64 * y.astype(np.float64)
    return _finish(v, fmt, rounding)


# --------------------------------------------------------------------------
# transcendentals
# --------------------------------------------------------------------------
_LN2_HI = float(np.float32(0.693145751953125))  # 0x3f317200: 12 trailing zero bits
_LN2_LO = float(np.float32(math.log(2) - 0.693145751953125))


def _exp_poly(x64: np.ndarray, algo: ExpPoly) -> np.ndarray:
    ar = Arith(algo.step_fmt)
    xs = ar.round(x64)
    with np.errstate(all="ignore"):
        k = np.rint(ar.mul(xs, ar.dtype.type(1.4426950408889634)))
        k = np.where(np.isfinite(k), k, 0.0).astype(ar.dtype)
        kc = np.clip(k, -4000, 4000)
        r = ar.sub(ar.sub(xs, ar.mul(kc, ar.dtype.type(_LN2_HI))), ar.mul(kc, ar.dtype.type(_LN2_LO)))
        coeffs = [ar.round(np.float64(1.0 / math.factorial(i))) for i in range(algo.degree + 1)]
        p = np.broadcast_to(coeffs[-1], r.shape).astype(ar.dtype)
        for c in reversed(coeffs[:-1]):
            p = ar.add(ar.mul(p, r), c)
        v = np.ldexp(p.astype(np.float64), kc.astype(np.int64))
        v = np.where(np.isposinf(xs), np.inf, v)
        v = np.where(np.isneginf(xs), 0.0, v)
        v = np.where(np.isnan(xs), np.nan, v)
    return v


def _fp32_in(x) -> np.ndarray:
    """Values as the fp32 inputs of a vectorised fp32 routine (float64 rounded once, RNE)."""
    return as_values(x).astype(np.float32)


def exp(x, *, fmt, algo="exact", rounding: str = "rne"):
    """``exp(x)`` rounded to ``fmt``.

    algo : ``"exact"`` (float64 then one rounding), ``ExpPoly(degree, step_fmt)``
        / ``"exp_poly(5)"``, or ``"sleef_u10"`` (SLEEF ``expf_u10`` in fp32, bit
        for bit, :func:`numlab.kernels.libm.sleef_expf`; ATen's and Inductor's
        ``Vectorized<float>::exp()``), or ``"glibc"`` (glibc's ``expf`` in fp32, bit for
        bit, :func:`numlab.kernels.libm.glibc_expf`; ``std::exp(float)`` of scalar C++),
        whose fp32 result is then rounded to ``fmt``.
    """
    fmt = get_format(fmt)
    algo = parse_algo(algo, EXP_ALGOS)
    if algo == "sleef_u10":
        return _finish(libm.sleef_expf(_fp32_in(x)), fmt, rounding)
    if algo == "glibc":
        return _finish(_shaped(libm.glibc_expf, x), fmt, rounding)
    x64 = as_values(x).astype(np.float64)
    with np.errstate(all="ignore"):
        v = np.exp(x64) if algo == "exact" else _exp_poly(x64, algo)
    return _finish(v, fmt, rounding)


def tanh(x, *, fmt, algo="exact", rounding: str = "rne"):
    """``tanh(x)`` rounded to ``fmt``.

    algo : ``"exact"`` (float64 then one rounding), ``"sleef"`` (SLEEF
        ``tanhf_u10`` in fp32, bit for bit; Inductor's ``Vectorized<float>::tanh()``) or
        ``"glibc"`` (glibc's fdlibm ``tanhf`` in fp32, bit for bit,
        :func:`numlab.kernels.libm.glibc_tanhf`; ``std::tanh(float)`` of scalar C++).
    """
    fmt = get_format(fmt)
    algo = parse_algo(algo, TANH_ALGOS)
    if algo == "sleef":
        return _finish(libm.sleef_tanhf(_fp32_in(x)), fmt, rounding)
    if algo == "glibc":
        return _finish(_shaped(libm.glibc_tanhf, x), fmt, rounding)
    return _finish(np.tanh(as_values(x).astype(np.float64)), fmt, rounding)


def erf(x, *, fmt, algo="exact", rounding: str = "rne"):
    """``erf(x)`` rounded to ``fmt``.

    algo : ``"exact"`` (correctly rounded to ``fmt`` for every format of at most
        50 bits and every deterministic ``rounding``, vectorised:
        :func:`numlab.kernels.libm.erf_rounded`) or ``"aten_vec"`` (ATen's ``Vectorized<float>::erf()``,
        Abramowitz & Stegun 7.1.26 in fp32, bit for bit) or ``"glibc"`` (glibc's fdlibm
        ``erff`` in fp32, bit for bit, :func:`numlab.kernels.libm.glibc_erff`;
        ``std::erf(float)`` of scalar C++).
    """
    fmt = get_format(fmt)
    algo = parse_algo(algo, ERF_ALGOS)
    if algo == "aten_vec":
        return _finish(libm.aten_vec_erf(_fp32_in(x)), fmt, rounding)
    if algo == "glibc":
        return _finish(_shaped(libm.glibc_erff, x), fmt, rounding)
    return to_container(np.asarray(libm.erf_rounded(as_values(x), fmt, rounding)), fmt)


_KAPPA = np.float32(0.044715)
_KBETA = np.float32(math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5)
_SQRT1_2 = np.float32(1 / math.sqrt(2))


def _shaped(routine, x):
    """``routine`` (a libm model) on ``x`` in fp32, in ``x``'s shape (a 0-d input too)."""
    x32 = _fp32_in(x)
    return np.asarray(routine(x32)).reshape(np.shape(x32))


def _aten_gelu(x32: np.ndarray, approximate: str, libm_vec: bool, glibc: bool = False,
               fma: bool = True) -> np.ndarray:
    """ATen's GeluKernel formulas in fp32 (``libm_vec``: SLEEF tanhf / A&S erf as the
    vectorised loop calls them; else libm: glibc's ``tanhf``/``erff`` bit for bit with
    ``glibc``, or modelled as correctly rounded fp32).  ``fma=False`` (glibc only):
    ``x + kKappa x^3`` in two roundings, as a build without FMA contraction computes it
    (ATen's scalar DEFAULT build, Inductor's scalar C++ under ``-ffp-contract=off``)."""
    f = np.float32
    if glibc and not libm_vec:
        with np.errstate(all="ignore"):
            if approximate == "tanh":
                x3 = (x32 * x32) * x32
                if not fma:
                    return (f(0.5) * x32) * (f(1) + _shaped(libm.glibc_tanhf, _KBETA * (x32 + _KAPPA * x3)))
                inner = _KBETA * libm.fma32(np.full_like(x3, _KAPPA), x3, x32)
                return (f(0.5) * x32) * (f(1) + _shaped(libm.glibc_tanhf, inner))
            return (x32 * f(0.5)) * (f(1) + _shaped(libm.glibc_erff, x32 * _SQRT1_2))
    with np.errstate(all="ignore"):
        if approximate == "tanh":
            # kBeta * (x + kKappa * x^3), the add contracted to an FMA by GCC (measured)
            x3 = (x32 * x32) * x32
            inner = _KBETA * libm.fma32(np.full_like(x3, _KAPPA), x3, x32)
            t = libm.sleef_tanhf(inner) if libm_vec else np.tanh(inner.astype(np.float64)).astype(f)
            return (f(0.5) * x32) * (f(1) + t)
        z = x32 * _SQRT1_2
        e = libm.aten_vec_erf(z) if libm_vec else libm.erf_rounded(z, FP32).astype(f)
        return (x32 * f(0.5)) * (f(1) + e)


def gelu(x, *, fmt, approximate: str = "none", algo="exact", rounding: str = "rne"):
    """GELU rounded to ``fmt`` (torch's vocabulary).

    approximate : ``"none"``: ``x/2 (1 + erf(x/sqrt 2))`` (Hendrycks & Gimpel 2016);
        ``"tanh"``: ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
    algo : ``"exact"`` (float64 then one rounding); ``"onednn"`` (oneDNN's
        avx512 gelu_erf minimax kernel in fp32, bit for bit; ``approximate="none"``
        only; eager ``F.gelu`` with mkldnn); ``"onednn_avx2"`` (oneDNN's gelu_erf
        below avx512_core: A&S 7.1.26 with oneDNN's exp, bit for bit); ``"aten_vec"`` (ATen's vectorised
        GeluKernel in fp32: ``(x*0.5)*(1 + erf_A&S(x*M_SQRT1_2))``, or
        ``(0.5x)*(1 + tanhf_SLEEF(kBeta*fma(kKappa, x^3, x)))``); ``"aten_scalar"``
        (the same formulas in ATen's scalar loop, libm ``erff``/``tanhf`` modelled
        as correctly rounded fp32); ``"glibc"`` (the scalar formulas with glibc's
        ``erff``/``tanhf``, bit for bit: Inductor's scalar C++ for ``"none"``); ``"glibc_nofma"``
        (``"glibc"`` without the FMA in ``x + kKappa x^3``: ATen's DEFAULT build and
        Inductor's scalar C++ for ``"tanh"``; ``"none"`` has no FMA to drop).  The fp32
        algorithms' results are rounded to ``fmt``.
    """
    fmt = get_format(fmt)
    check_choice("approximate", approximate, GELU_APPROXIMATE)
    algo = parse_algo(algo, GELU_ALGOS)
    if algo == "onednn":
        if approximate != "none":
            raise ValueError(f"algo='onednn' models oneDNN's gelu_erf only; approximate={approximate!r} "
                             "is not valid with it; valid: ['none']")
        return _finish(libm.onednn_gelu_erf(_fp32_in(x)), fmt, rounding)
    if algo == "onednn_avx2":  # oneDNN below avx512_core: A&S with oneDNN's exp
        if approximate != "none":
            raise ValueError(f"algo='onednn_avx2' models oneDNN's gelu_erf only; approximate={approximate!r} "
                             "is not valid with it; valid: ['none']")
        return _finish(libm.onednn_gelu_erf_avx2(_fp32_in(x)), fmt, rounding)
    if algo in ("aten_vec", "aten_scalar", "glibc", "glibc_nofma"):
        return _finish(_aten_gelu(_fp32_in(x), approximate, algo == "aten_vec", algo.startswith("glibc"),
                                  fma=algo != "glibc_nofma"), fmt, rounding)
    x64 = as_values(x).astype(np.float64)
    with np.errstate(all="ignore"):
        if approximate == "none":
            v = 0.5 * x64 * (1.0 + libm.erf64(x64 / math.sqrt(2.0)))
        else:
            v = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64**3)))
    return _finish(v, fmt, rounding)


def log1p(x, *, fmt, algo="exact", rounding: str = "rne"):
    """``log(1 + x)`` rounded to ``fmt``.

    algo : ``"exact"`` (float64 ``log1p`` then one rounding) or ``"sleef_u10"``
        (SLEEF ``log1pf_u10`` in fp32, bit for bit,
        :func:`numlab.kernels.libm.sleef_log1pf`; ``Vectorized<float>::log1p()``
        of ATen's vectorised kernels and of Inductor's generated C++), whose
        fp32 result is then rounded to ``fmt``; or ``"glibc"`` (glibc's fdlibm
        ``log1pf`` in fp32, bit for bit, :func:`numlab.kernels.libm.glibc_log1pf`;
        ``std::log1p(float)`` in the scalar loops on glibc <= 2.40).
    """
    fmt = get_format(fmt)
    algo = parse_algo(algo, LOG1P_ALGOS)
    if algo == "sleef_u10":
        return _finish(libm.sleef_log1pf(_fp32_in(x)), fmt, rounding)
    if algo == "glibc":
        return _finish(_shaped(libm.glibc_log1pf, x), fmt, rounding)
    with np.errstate(all="ignore"):
        return _finish(np.log1p(as_values(x).astype(np.float64)), fmt, rounding)
