"""numlab's primitives and ``round_to`` against Berkeley SoftFloat 3e
(optional reference: ``pip install softfloatpy``; skipped with the reason
when it is absent).

SoftFloat is an independent, exhaustively tested IEEE 754 implementation.
Each case is one SoftFloat call in a scalar loop, with operands built from
their bit patterns (``from_bytes``: SoftFloat's ``from_float`` rounds with
the current mode) and results compared bit for bit (any NaN equals any NaN:
SoftFloat returns its default NaN, numlab propagates fp64's).

* ``add, sub, mul, div, sqrt, fma`` of fp16 operands into fp16 and of fp32
  operands into fp32, in every mode both have: rne (NEAR_EVEN), rtz
  (MIN_MAG), down (MIN), up (MAX), and odd where the binding was built with
  SoftFloat's round-to-odd (checked on a known case; otherwise that test
  skips with the reason).  SoftFloat's ties-away mode (NEAR_MAX_MAG) has no
  numlab counterpart; stochastic rounding has no reference here.
* ``round_to`` from float32 to fp16 and bf16, and from float64 to fp16 and
  fp32 (SoftFloat's conversions), every mode.

Operands: every pair (and a cube of triples for fma) of edge values -- signed
zeros, the smallest and largest subnormals, the smallest normal, 1 and its
neighbours, max, inf, NaN, and values whose sums and products tie -- plus
random bit patterns and random short-significand values (which make exact
ties in products and sums frequent).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

sf = pytest.importorskip("softfloatpy", reason="softfloatpy (Berkeley SoftFloat binding) is not installed; "
                                              "pip install softfloatpy")

import numlab as nl  # noqa: E402
from numlab import primitives as P  # noqa: E402

SF_ROUNDINGS = {"rne": sf.RoundingMode.NEAR_EVEN, "rtz": sf.RoundingMode.MIN_MAG,
         "down": sf.RoundingMode.MIN, "up": sf.RoundingMode.MAX}
ROUND_ODD = 6  # softfloat_round_odd in SoftFloat 3e (compiled in with SOFTFLOAT_ROUND_ODD)

# width -> (numpy float dtype, uint dtype, SoftFloat class, ops by name)
TYPES = {
    16: (np.float16, np.uint16, sf.Float16,
         {"add": sf.f16_add, "sub": sf.f16_sub, "mul": sf.f16_mul, "div": sf.f16_div,
          "sqrt": sf.f16_sqrt, "fma": sf.f16_mul_add}),
    32: (np.float32, np.uint32, sf.Float32,
         {"add": sf.f32_add, "sub": sf.f32_sub, "mul": sf.f32_mul, "div": sf.f32_div,
          "sqrt": sf.f32_sqrt, "fma": sf.f32_mul_add}),
}
FMT = {16: "fp16", 32: "fp32"}
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}
PRIM = {"add": P.add, "sub": P.sub, "mul": P.mul, "div": P.div, "sqrt": P.sqrt, "fma": P.fma}


def _odd_supported() -> bool:
    """Whether SoftFloat rounds to odd: fp16(1 + 3 * 2**-12) is 1 + 2**-10
    (code 0x3C01) when rounded to odd, 0x3C00 when truncated."""
    try:
        sf.set_rounding_mode(ROUND_ODD)
    except (ValueError, TypeError, OverflowError):
        return False
    try:
        x = sf.Float32.from_bytes(np.array(1 + 3 * 2.0**-12, ">f4").tobytes())
        return sf.f32_to_f16(x).to_bytes() == b"\x3c\x01"
    finally:
        sf.set_rounding_mode(sf.RoundingMode.NEAR_EVEN)


ODD = _odd_supported()


def _edges(width) -> np.ndarray:
    """Edge values of the format, both signs, as its own dtype."""
    dt, u = TYPES[width][:2]
    fi = np.finfo(dt)
    one = dt(1)
    vals = [0.0, fi.smallest_subnormal, 2 * fi.smallest_subnormal, 3 * fi.smallest_subnormal,
            fi.smallest_normal - fi.smallest_subnormal, fi.smallest_normal, 2 * fi.smallest_normal,
            1.0, np.nextafter(one, dt(2)), np.nextafter(one, dt(0)), 1.5, 3.0, fi.eps, fi.eps / 2,
            fi.epsneg, fi.eps * 1.5, fi.max, np.nextafter(fi.max, dt(0)), fi.max / 2, 2.0 ** (fi.maxexp // 2)]
    x = np.array(vals, dt)
    x = np.concatenate([x, -x, np.array([np.inf, -np.inf, np.nan], dt)])
    return x.view(u).astype(u).view(dt)


def _random(width, n, seed) -> np.ndarray:
    """Random bit patterns (every exponent) and random values with a short
    significand (at most 4 bits) over a narrow exponent range, mixed."""
    dt, u = TYPES[width][:2]
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << width, n // 2, dtype=np.uint64).astype(u).view(dt)
    fi = np.finfo(dt)
    e = rng.integers(fi.minexp - fi.nmant, 12, n - n // 2)
    short = (rng.integers(1, 16, e.size) * np.exp2(e.astype(np.float64)) * rng.choice([-1, 1], e.size))
    with np.errstate(over="ignore"):
        short = short.astype(dt)  # exact: 4 significant bits inside the range
    return rng.permutation(np.concatenate([bits, short]))


def _sf_value(cls, code: int, width: int):
    return cls.from_bytes(int(code).to_bytes(width // 8, "big"))


def _softfloat(op, operands, width, mode) -> np.ndarray:
    """SoftFloat's results (codes) of ``op`` elementwise, in ``mode``."""
    dt, u, cls, ops = TYPES[width]
    f = ops[op]
    codes = [np.asarray(a, dt).view(u) for a in operands]
    sf.set_rounding_mode(mode)
    try:
        out = [int.from_bytes(f(*[_sf_value(cls, c, width) for c in cs]).to_bytes(), "big")
               for cs in zip(*codes, strict=True)]
    finally:
        sf.set_rounding_mode(sf.RoundingMode.NEAR_EVEN)
    return np.array(out, dtype=np.uint64).astype(u)


def _assert_codes(got_vals, exp_codes, width, operands, what):
    dt, u = TYPES[width][:2]
    got = np.asarray(got_vals).astype(dt)  # exact: values of the format
    exp = exp_codes.view(dt)
    ok = (got.view(u) == exp_codes) | (np.isnan(got) & np.isnan(exp))
    if not ok.all():
        i = np.flatnonzero(~ok)[:5]
        ops = [np.asarray(a)[i] for a in operands]
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} differ; operands={ops!r} "
                             f"numlab={got[i]!r} softfloat={exp[i]!r}")


def _cases(op, width, n_random, seed):
    e = _edges(width)
    k = ARITY[op]
    if k == 3:  # a cube of the edges would be 64000 triples: a third of them, plus randoms
        combos = list(itertools.product(e, repeat=3))[::3]
    else:
        combos = list(itertools.product(e, repeat=k))
    edge = [np.array(c, TYPES[width][0]) for c in zip(*combos, strict=True)]
    rnd = [_random(width, n_random, seed + i) for i in range(k)]
    return [np.concatenate([a, b]) for a, b in zip(edge, rnd, strict=True)]


def _check_op(op, width, rounding, mode, n_random):
    operands = _cases(op, width, n_random, seed=width * 10 + list(ARITY).index(op))
    exp = _softfloat(op, operands, width, mode)
    args = [a.astype(np.float32) for a in operands]  # exact widening
    with np.errstate(all="ignore"):
        got = PRIM[op](*args, fmt=FMT[width], rounding=rounding)
    _assert_codes(got, exp, width, operands, f"{op} {FMT[width]} {rounding}")


@pytest.mark.parametrize("rounding", list(SF_ROUNDINGS))
@pytest.mark.parametrize("op", list(ARITY))
@pytest.mark.parametrize("width", [16, 32])
def test_primitives_equal_softfloat(width, op, rounding):
    _check_op(op, width, rounding, SF_ROUNDINGS[rounding], n_random=3000)


@pytest.mark.parametrize("op", list(ARITY))
@pytest.mark.parametrize("width", [16, 32])
def test_primitives_round_to_odd_equal_softfloat(width, op):
    if not ODD:
        pytest.skip("this softfloatpy build has no round-to-odd (SoftFloat compiled without "
                    "SOFTFLOAT_ROUND_ODD: mode 6 truncates); odd is checked against MPFR instead")
    _check_op(op, width, "odd", ROUND_ODD, n_random=3000)


CONVERSIONS = {  # (source dtype, target format) -> SoftFloat conversion
    (np.float32, "fp16"): (sf.Float32, 32, sf.f32_to_f16, 16),
    (np.float32, "bf16"): (sf.Float32, 32, sf.f32_to_bf16, 16),
    (np.float64, "fp16"): (sf.Float64, 64, sf.f64_to_f16, 16),
    (np.float64, "fp32"): (sf.Float64, 64, sf.f64_to_f32, 32),
}


@pytest.mark.parametrize("rounding", list(SF_ROUNDINGS) + ["odd"])
@pytest.mark.parametrize(("src", "fmt"), list(CONVERSIONS), ids=lambda v: getattr(v, "__name__", v))
def test_round_to_equals_softfloat_conversions(src, fmt, rounding):
    if rounding == "odd" and not ODD:
        pytest.skip("this softfloatpy build has no round-to-odd (mode 6 truncates); "
                    "odd is checked against MPFR instead")
    cls, w_in, conv, w_out = CONVERSIONS[(src, fmt)]
    mode = ROUND_ODD if rounding == "odd" else SF_ROUNDINGS[rounding]
    rng = np.random.default_rng(w_in + w_out)
    u_in = {32: np.uint32, 64: np.uint64}[w_in]
    x = rng.integers(0, np.iinfo(u_in).max, 20_000, dtype=u_in, endpoint=True).view(src)
    if src is np.float64:  # mostly near the target's range (random fp64 exponents are far outside)
        x[: 15_000] = (rng.standard_normal(15_000) * np.exp2(rng.uniform(-40, 40, 15_000))).astype(src)
    fi = nl.get_format(fmt)
    anchors = np.array([0.0, fi.smallest_subnormal, fi.smallest_normal, 1.0, fi.max], np.float64)
    near = np.concatenate([anchors * 1.5, (anchors + np.array([fi.smallest_subnormal, fi.smallest_subnormal,
                                                               fi.smallest_normal * fi.u, fi.u, fi.max * fi.u]))])
    with np.errstate(over="ignore"):
        near = near.astype(src)
    x = np.concatenate([x, near, -near, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], src)])
    codes = x.view(u_in)
    sf.set_rounding_mode(mode)
    try:
        out = [int.from_bytes(conv(cls.from_bytes(int(c).to_bytes(w_in // 8, "big"))).to_bytes(), "big")
               for c in codes]
    finally:
        sf.set_rounding_mode(sf.RoundingMode.NEAR_EVEN)
    exp_codes = np.array(out, np.uint64).astype({16: np.uint16, 32: np.uint32}[w_out])
    with np.errstate(all="ignore"):
        got = nl.round_to(x, fmt, rounding)
    if w_out == 32:
        exp = exp_codes.view(np.float32).astype(np.float64)
    else:
        exp = (exp_codes.view(np.float16) if fmt == "fp16" else exp_codes.view(fi.dtype)).astype(np.float64)
    with np.errstate(invalid="ignore"):  # NaN payloads
        g = np.asarray(got, np.float64)
    ok = ((g == exp) & (np.signbit(g) == np.signbit(exp))) | (np.isnan(g) & np.isnan(exp))
    assert ok.all(), (fmt, rounding, x[~ok][:5], g[~ok][:5], exp[~ok][:5])
