"""The matrix-unit model (numlab.kernels.mma) against the exact reference
(tests/_mma_reference.py), and the unit in the lab (KernelSpec.mma, the
engine, runs, bounds, the DeepSeek-V3 sweep).

The reference is written from MatrixUnit's parameter definitions with
Fraction arithmetic, one output element at a time; nothing here computes an
expected value with the code under test.
"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from _mma_reference import FORMATS, mma_reference
from _oracles import assert_same_bits, same_bits, same_bits_mask

from numlab import ops, round_to
from numlab.execute import run
from numlab.formats import get_format
from numlab.graph import trace
from numlab.kernels import KernelSpec
from numlab.kernels.grammar import parse_unit, unit_string
from numlab.kernels.mma import ALIGN_ROUNDINGS, FINAL_ROUNDINGS, MatrixUnit, mma
from numlab.kernels.mma.lab import (
    block_bits,
    e4m3_inputs,
    exact_matmul,
    k_sweep,
    preset_errors,
    unit_matmul,
)
from numlab.kernels.mma.presets import UNIT_PRESETS

IN_FMTS = ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16", "tf32")


# ---------------------------------------------------------------------------
# generated cases
# ---------------------------------------------------------------------------
def _values(rng, name: str, shape, lo: int, hi: int, specials: float = 0.0) -> np.ndarray:
    """Values of format ``name``: random significands, exponents uniform in
    [lo, hi] (clipped to the format's range, subnormals included), ~10% zeros,
    ~10% full-precision "tie makers" (odd last bit), some exact negatives of
    the previous element (cancellation), and NaN/inf with probability
    ``specials``."""
    p, emin, emax, inf, _ = FORMATS[name]
    hi = min(hi, emax)
    lo = min(max(lo, emin - p + 1), hi)
    e = rng.integers(lo, hi + 1, shape)
    m = 1 + rng.integers(0, 2 ** (p - 1), shape) / 2 ** (p - 1)
    v = m * np.exp2(e) * rng.choice([-1.0, 1.0], shape)
    flat = v.reshape(-1)
    cancel = rng.random(flat.size) < 0.15
    flat[1:][cancel[1:]] = -flat[:-1][cancel[1:]]
    v[rng.random(shape) < 0.1] = 0.0
    if specials:
        u = rng.random(shape)
        v[u < specials / 2] = np.nan
        v[(u >= specials / 2) & (u < specials)] = np.inf if inf else np.nan
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.asarray(round_to(v, get_format(name), "rne"), dtype=np.float64)
    return r


def _case(rng, unit: MatrixUnit, specials: float = 0.0):
    """(a, b, c) for one generated case on ``unit``: exponent windows from
    narrow (ties, exact cancellation, alignment inside the window) to wide
    (truncation, subnormal products, overflow of the output format)."""
    L = unit.block
    K = int(rng.integers(1, 3 * L + 2))
    if unit.promote_every is not None:
        K = int(rng.integers(1, 2 * unit.promote_every + L + 1))
    p, emin, emax, *_ = FORMATS[unit.in_fmt]
    kind = rng.integers(0, 4)
    if kind == 0:  # narrow: ties and cancellation
        lo = int(rng.integers(-4, 3))
        lo, hi = lo, lo + 2
    elif kind == 1:  # subnormal inputs and products
        lo, hi = emin - p, emin + 4
    elif kind == 2:  # near overflow of the output format
        lo, hi = emax - 6, emax
    else:  # wide
        lo, hi = -30, 30
    M, N = 2, 3
    a = _values(rng, unit.in_fmt, (M, K), lo, hi, specials)
    b = _values(rng, unit.in_fmt, (K, N), lo, hi, specials)
    c = None
    if rng.random() < 0.5:
        clo = int(rng.integers(lo, hi + 1)) * 2
        c = _values(rng, unit.out_fmt, (M, N), clo - 4, clo + 4, specials)
    return a, b, c


def _random_unit(rng) -> MatrixUnit:
    while True:
        out = str(rng.choice(["fp32", "fp16"]))
        fs = int(rng.choice([1, 2, 3, 4, 8, 16]))
        kw = dict(in_fmt=str(rng.choice(IN_FMTS)), out_fmt=out, fma_size=fs,
                  align_bits=int(rng.integers(-6, 5)),
                  carry_bits=None if rng.random() < 0.6 else int(rng.integers(0, 4)),
                  align_rounding=str(rng.choice(ALIGN_ROUNDINGS)),
                  final_rounding=str(rng.choice(FINAL_ROUNDINGS)),
                  subnormals=bool(rng.random() < 0.7), interleave=int(rng.choice([1, 2])),
                  join_bits=int(rng.integers(0, 4)),
                  result_bits=None if rng.random() < 0.6 else int(rng.integers(6, get_format(out).p + 1)))
        if rng.random() < 0.25:
            kw["promote_every"] = fs * kw["interleave"] * int(rng.integers(1, 3))
        try:
            return MatrixUnit(**kw)
        except ValueError:
            continue  # a combination the model rejects (checked in tests/test_mma_model.py)


def _compare(unit, a, b, c, stats) -> None:
    d = mma(a, b, unit, c).astype(np.float64)
    r = np.array(mma_reference(a.tolist(), b.tolist(), unit, None if c is None else c.tolist()),
                 dtype=np.float64).reshape(d.shape)
    ok = same_bits_mask(d, r, nan_equal=True)
    stats["elements"] += d.size
    stats["finite"] += int(np.sum(np.isfinite(r)))
    if ok.all():
        return
    i = np.flatnonzero(~ok)[0]
    raise AssertionError(f"{unit!r}\na={a.tolist()}\nb={b.tolist()}\nc={None if c is None else c.tolist()}\n"
                         f"element {np.unravel_index(i, d.shape)}: model {d.flat[i]!r}, reference {r.flat[i]!r}")


@pytest.mark.parametrize("name", list(UNIT_PRESETS))
def test_every_preset_equals_the_exact_reference(name):
    unit = UNIT_PRESETS[name]
    rng = np.random.default_rng([15, len(name), sum(map(ord, name))])
    stats = {"elements": 0, "finite": 0}
    for i in range(24):
        a, b, c = _case(rng, unit, specials=0.02 if i % 4 == 0 else 0.0)
        _compare(unit, a, b, c, stats)
    # promotion: the same preset with N_C = 2 blocks (DeepSeek-style)
    pu = unit.replace(promote_every=2 * unit.block)
    for _ in range(7):
        a, b, c = _case(rng, pu)
        _compare(pu, a, b, c, stats)
    assert stats["elements"] >= 150


def test_random_parameter_combinations_equal_the_exact_reference():
    rng = np.random.default_rng(1515)
    stats = {"elements": 0, "finite": 0}
    units = set()
    for i in range(700):
        unit = _random_unit(rng)
        units.add(unit)
        a, b, c = _case(rng, unit, specials=0.02 if i % 8 == 0 else 0.0)
        _compare(unit, a, b, c, stats)
    assert len(units) > 450 and stats["elements"] > 3800
    assert stats["finite"] > 0.6 * stats["elements"], stats  # mostly finite results, not NaN/inf


def test_compiled_engine_equals_the_exact_reference():
    """The optional numba path of mma (units without interleaving or a carry
    limit) against the same reference."""
    pytest.importorskip("numba", reason="numba is not installed: mma(engine='numba') is unavailable")
    rng = np.random.default_rng(1516)
    stats = {"elements": 0, "finite": 0}
    units = [u for u in UNIT_PRESETS.values() if u.interleave == 1]
    n = 0
    while n < 300:
        u = units[n % len(units)] if n % 2 else _random_unit(rng)
        if u.interleave != 1 or u.carry_bits is not None:
            continue
        a, b, c = _case(rng, u, specials=0.02 if n % 8 == 0 else 0.0)
        d = mma(a, b, u, c, engine="numba").astype(np.float64)
        r = np.array(mma_reference(a.tolist(), b.tolist(), u, None if c is None else c.tolist()))
        assert same_bits(d, r.reshape(d.shape), nan_equal=True), (u, a.tolist(), b.tolist(), c)
        stats["elements"] += d.size
        n += 1
    assert stats["elements"] >= 1800


def _in_both(x, f1: str, f2: str):
    """``x`` rounded to ``f1``, with the values that are not also ``f2`` values zeroed."""
    if x is None:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.asarray(round_to(x, get_format(f1), "rne"), dtype=np.float64)
        ok = np.asarray(round_to(r, get_format(f2), "rne"), dtype=np.float64) == r
    return np.where(ok | ~np.isfinite(r), r, 0.0)


def test_the_comparison_can_fail():
    """The reference is sensitive to every numerical parameter: changing one
    changes its result on some generated case (so agreement above is not
    vacuous), and the model follows."""
    rng = np.random.default_rng(7)
    base = MatrixUnit(in_fmt="fp16", out_fmt="fp32", fma_size=4, align_bits=0)
    changes = {"fma_size": 8, "align_bits": 3, "carry_bits": 0, "align_rounding": "rne",
               "final_rounding": "rne", "subnormals": False, "interleave": 2, "result_bits": 12,
               "promote_every": 4, "in_fmt": "bf16", "out_fmt": "fp16", "subnormal_anchor": "true"}
    # nan_bits sets a NaN's payload, which the reference's floats do not carry:
    # tests/test_mma_cport.py::test_measured_b200_words_reproduced shows it changes bits
    assert set(changes) | {"join_bits", "nan_bits", "name", "source", "evidence"} == {
        f.name for f in dataclasses.fields(MatrixUnit)}
    changes_join = base.replace(interleave=2), {"join_bits": 0}
    cases = [(base, f, v) for f, v in changes.items()] + [(changes_join[0], "join_bits", 0)]
    for unit, field, v in cases:
        other = unit.replace(**{field: v})
        for _ in range(400):
            a, b, c = _case(rng, unit)
            a, b = (_in_both(x, unit.in_fmt, other.in_fmt) for x in (a, b))
            c = _in_both(c, unit.out_fmt, other.out_fmt)
            cl = None if c is None else c.tolist()
            r0 = np.array(mma_reference(a.tolist(), b.tolist(), unit, cl))
            r1 = np.array(mma_reference(a.tolist(), b.tolist(), other, cl))
            if not same_bits(r0, r1, nan_equal=True):
                assert_same_bits(mma(a, b, other, c).astype(np.float64), r1, nan_equal=True, what=field)
                assert_same_bits(mma(a, b, unit, c).astype(np.float64), r0, nan_equal=True, what=field)
                break
        else:
            raise AssertionError(f"changing {field} never changed the reference's result")


# ---------------------------------------------------------------------------
# three discrepancies this reference found in the model (fixed there; kept as tests)
# ---------------------------------------------------------------------------
def test_promotion_keeps_an_overflowed_chunk_infinite():
    u = MatrixUnit(in_fmt="fp16", out_fmt="fp16", fma_size=2, final_rounding="rne", promote_every=2)
    a = np.array([[60000.0, 60000.0]])
    b = np.array([[60000.0], [60000.0]])
    assert mma_reference(a.tolist(), b.tolist(), u)[0][0] == math.inf
    assert mma(a, b, u)[0, 0] == np.inf


def test_interleaved_overflow_with_carry_bits_stays_infinite():
    u = MatrixUnit(in_fmt="bf16", out_fmt="fp16", fma_size=2, interleave=2, carry_bits=2)
    a = np.array([[1e5, 0.0, 1.0, 0.0]])
    a = np.asarray(round_to(a, get_format("bf16"), "rne"), dtype=np.float64)
    b = np.ones((4, 1))
    assert mma_reference(a.tolist(), b.tolist(), u)[0][0] == math.inf
    assert mma(a, b, u)[0, 0] == np.inf


def test_interleave_with_one_term_blocks():
    u = MatrixUnit(fma_size=1, interleave=2)
    a = np.array([[1.0, 2.0, 3.0]])
    b = np.array([[1.0], [1.0], [1.0]])
    assert mma(a, b, u)[0, 0] == mma_reference(a.tolist(), b.tolist(), u)[0][0] == 6.0


# ---------------------------------------------------------------------------
# the a-priori bound (numlab.bound_rules, section "matrix unit")
# ---------------------------------------------------------------------------
def test_a_priori_bound_holds_on_generated_cases():
    """|mma - exact| <= mma_bound on every finite-bound element of ~1300
    generated cases (every preset, random units); the exact value is a
    Fraction sum of the (exact) products."""
    from numlab.bound_rules import mma_bound

    rng = np.random.default_rng(99)
    units = list(UNIT_PRESETS.values())
    checked = tight = 0
    for i in range(1300):
        u = units[i % len(units)] if i % 2 else _random_unit(rng)
        a, b, c = _case(rng, u)
        d = mma(a, b, u, c).astype(np.float64)
        bnd = mma_bound(a, b, u, c)
        for (i_, j), bij in np.ndenumerate(bnd):
            if not np.isfinite(bij):
                continue
            ex = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[i_], b[:, j], strict=True)), Fraction(0))
            if c is not None:
                ex += Fraction(float(c[i_, j]))
            assert np.isfinite(d[i_, j]), (u, a, b, c)
            err = abs(Fraction(float(d[i_, j])) - ex)
            assert err <= Fraction(float(bij)), (u, a.tolist(), b.tolist(), c, float(err), bij)
            checked += 1
            tight += bool(err > Fraction(float(bij)) / 16)
    assert checked > 4000
    assert tight > checked // 50  # the bound is not vacuous: within 16x on > 2% of elements


def test_bound_is_infinite_where_it_cannot_decide():
    from numlab.bound_rules import mma_bound

    u = UNIT_PRESETS["H100/fp16/fp32"]
    a = np.array([[1.0, np.nan], [1.0, 2.0]])
    b = np.array([[1.0], [1.0]])
    bnd = mma_bound(a, b, u)
    assert np.isinf(bnd[0, 0]) and np.isfinite(bnd[1, 0])
    big = np.array([[65504.0, 65504.0]])
    assert np.isinf(mma_bound(big, np.full((2, 1), 65504.0), UNIT_PRESETS["H100/fp16/fp16"]))[0, 0]
    assert np.isinf(mma_bound(a[1:], b, u.replace(carry_bits=0)))[0, 0]


# ---------------------------------------------------------------------------
# KernelSpec.mma: one grammar, the engine, runs, claims, compare, bisect
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(UNIT_PRESETS))
def test_every_preset_round_trips_through_the_kernel_spec(name):
    for base in ("handwritten", "codegen"):
        k = KernelSpec.parse(f"{base}:mma={name}")
        assert k.mma == UNIT_PRESETS[name] and KernelSpec.parse(k.spec) == k
        assert f"mma={name}" in k.spec
    u = UNIT_PRESETS[name].replace(promote_every=4 * UNIT_PRESETS[name].block, align_bits=-3)
    k = KernelSpec.codegen(mma=u)
    assert KernelSpec.parse(k.spec) == k and parse_unit(unit_string(u)) == u
    assert k.spec.endswith(f"mma={name}(align_bits=-3,promote_every={4 * UNIT_PRESETS[name].block})")


def test_unit_strings_and_their_errors():
    assert parse_unit("none") is None and unit_string(None) == "none"
    assert parse_unit("h100") == UNIT_PRESETS["H100/fp16/fp32"]
    assert parse_unit("custom") == MatrixUnit()
    u = parse_unit("custom(in_fmt=bf16,fma_size=8,carry_bits=3,subnormals=false,result_bits=none)")
    assert u == MatrixUnit(in_fmt="bf16", fma_size=8, carry_bits=3, subnormals=False)
    assert unit_string(u) == "custom(in_fmt=bf16,fma_size=8,carry_bits=3,subnormals=false)"
    with pytest.raises(ValueError, match=r"mma='X100'.*valid: 'none', 'custom', a GPU \['V100'"):
        parse_unit("X100")
    with pytest.raises(ValueError, match=r"item 'fma=3'.*valid fields: \['in_fmt'"):
        KernelSpec.parse("codegen:mma=H100(fma=3)")
    with pytest.raises(ValueError, match="fma_size=0 is not valid"):
        KernelSpec.parse("codegen:mma=H100(fma_size=0)")
    with pytest.raises(ValueError, match="given twice"):
        parse_unit("custom(fma_size=2,fma_size=4)")
    with pytest.raises(ValueError, match="must end with"):
        parse_unit("custom(fma_size=2)x")
    with pytest.raises(TypeError, match="mma must be None, a MatrixUnit or a unit string"):
        KernelSpec(mma=3)
    # ints: decimal (leading zeros too), hex for bit patterns
    assert parse_unit("custom(fma_size=08,align_bits=-02)") == MatrixUnit(fma_size=8, align_bits=-2)
    assert parse_unit("custom(nan_bits=0x7FFFFFFF)").nan_bits == 0x7FFFFFFF
    with pytest.raises(ValueError, match="is not an int"):
        parse_unit("custom(fma_size=0b11)")
    # a B200 preset carries an fp32 NaN pattern: another out_fmt needs nan_bits too
    with pytest.raises(ValueError, match="needs nan_bits too"):
        parse_unit("B200(out_fmt=fp16)")
    assert parse_unit("B200(out_fmt=fp16,nan_bits=none)").nan_bits is None


def _fp16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def test_eager_matmul_runs_on_the_unit_bit_for_bit():
    """Eager library matmul with ``mma`` = the unit on S-valued inputs; S =
    fp32 keeps the unit's fp32 result; 2-D, batched and vector operands."""
    rng = np.random.default_rng(1)
    unit = UNIT_PRESETS["A100/fp16/fp32"]
    spec = KernelSpec.handwritten(mma=unit)
    x, w = _fp16(rng, (6, 200)).astype(np.float32), _fp16(rng, (200, 5)).astype(np.float32)
    g = trace(lambda x, w: ops.matmul(x, w), x=x.shape, w=w.shape)
    got = run(g, {"x": x, "w": w}, mode="eager", fmt="fp32", kernels=spec).output
    np.testing.assert_array_equal(got, mma(x, w, unit))
    plain = run(g, {"x": x, "w": w}, mode="eager", fmt="fp32", kernels="handwritten").output
    assert not np.array_equal(got, plain)
    # batched (3, 6, 200) x (3, 200, 5): one unit call per batch entry
    xb, wb = _fp16(rng, (3, 6, 200)).astype(np.float32), _fp16(rng, (3, 200, 5)).astype(np.float32)
    gb = trace(lambda x, w: ops.matmul(x, w), x=xb.shape, w=wb.shape)
    got = run(gb, {"x": xb, "w": wb}, mode="eager", fmt="fp32", kernels=spec).output
    np.testing.assert_array_equal(got, np.stack([mma(xb[i], wb[i], unit) for i in range(3)]))
    # fp32 operands are rounded to the unit's input format first
    x32 = rng.standard_normal((4, 64)).astype(np.float32)
    w32 = rng.standard_normal((64, 3)).astype(np.float32)
    got = unit_matmul(x32, w32, unit, "fp32")
    want = mma(x32.astype(np.float16), w32.astype(np.float16), unit)
    np.testing.assert_array_equal(got, want)
    # vector operand
    v = _fp16(rng, (200,)).astype(np.float32)
    gv = trace(lambda x, w: ops.matmul(x, w), x=(200,), w=w.shape)
    got = run(gv, {"x": v, "w": w}, mode="eager", fmt="fp32", kernels=spec).output
    np.testing.assert_array_equal(got, mma(v[None, :], w, unit)[0])


MATMUL_FUSION = "autofuse:--autofuse_enable_pass=elementwise,matmul"


def test_fused_block_matmul_runs_on_the_unit():
    """With matmul fusion on, the code generator's block holds the matmul and
    its epilogue; the block's matmul runs on ``codegen``'s unit and its fp32
    result feeds the epilogue (checked against mma on the block's inputs)."""
    rng = np.random.default_rng(2)
    x, w = _fp16(rng, (8, 512)), _fp16(rng, (512, 8))
    g = trace(lambda x, w: ops.mul_scalar(ops.matmul(x, w), 0.25), x=x.shape, w=w.shape)
    unit = UNIT_PRESETS["V100/fp16/fp32"]
    r = run(g, {"x": x, "w": w}, mode="fused", fmt="fp16", kernels=KernelSpec.codegen(mma=unit),
            fusion=MATMUL_FUSION, keep_internals=True)
    (blk,) = r.plan.blocks
    assert blk.codegen and blk.fused and len(blk.members) == 2
    want = (mma(x, w, unit) * np.float32(0.25)).astype(np.float16)  # * 0.25 is exact
    np.testing.assert_array_equal(r.output, want)
    (mm,) = [n for n in r.internals if n.startswith("matmul")]
    np.testing.assert_array_equal(r.values[mm], mma(x, w, unit))  # the fp32 value inside the block
    other = run(g, {"x": x, "w": w}, mode="fused", fmt="fp16", keep_internals=True,
                kernels=KernelSpec.codegen(mma=UNIT_PRESETS["H100/fp16/fp32"]), fusion=MATMUL_FUSION)
    np.testing.assert_array_equal(other.values[mm], mma(x, w, UNIT_PRESETS["H100/fp16/fp32"]))
    assert not np.array_equal(other.values[mm], r.values[mm])


def test_running_bounds_cover_matmuls_on_a_unit():
    """The running bound (measured local errors + propagation) holds for
    eager and fused runs whose matmuls run on a unit: the claim
    error_within_bound is evaluated with the unit's kernels."""
    from numlab.running_bounds import run_with_bounds

    rng = np.random.default_rng(3)
    x, w = _fp16(rng, (8, 256)), _fp16(rng, (256, 8))
    g = trace(lambda x, w: ops.relu(ops.matmul(x, w)), x=x.shape, w=w.shape)
    exact = np.array([[max(float(sum((Fraction(float(p)) * Fraction(float(q)) for p, q in zip(x[i], w[:, j], strict=True)),
                                     Fraction(0))), 0.0) for j in range(w.shape[1])] for i in range(x.shape[0])])
    for mode, kw in (("eager", {"kernels": "handwritten:mma=H100/fp8_e4m3/fp32"}),
                     ("fused", {"kernels": "codegen:mma=V100", "fusion": MATMUL_FUSION})):
        br = run_with_bounds(g, {"x": x, "w": w}, mode=mode, fmt="fp16", **kw)
        out = g.outputs[0]
        err = np.abs(np.asarray(br.result.outputs[out], dtype=np.float64) - exact)
        bound = np.asarray(br.bounds[out])
        assert np.all(err <= bound), mode
        assert np.all(np.isfinite(bound))


def test_bisect_finds_the_matmul_on_a_unit():
    """bisect finds the matmul when only the fused side runs on a unit."""
    from numlab.compare import bisect_run

    rng = np.random.default_rng(4)
    x, w = _fp16(rng, (8, 1024), 4.0), _fp16(rng, (1024, 8))
    g = trace(lambda x, w: ops.relu(ops.matmul(x, w)), x=x.shape, w=w.shape)
    rep = bisect_run(g, {"x": x, "w": w}, fmt="fp16", fusion=MATMUL_FUSION,
                     kernels="codegen:mma=H100/fp8_e4m3/fp32", library="handwritten", log=None)
    found = str(rep).split("found:")[1]
    assert "fusion switches that remove the divergence: matmul" in found
    assert "smallest diverging node range (1 nodes" in found and found.rstrip().endswith("matmul_0")


# ---------------------------------------------------------------------------
# the DeepSeek-V3 sweep, presets side by side, claims, the CLI
# ---------------------------------------------------------------------------
def test_exact_matmul_is_exact_or_refuses():
    a, b = e4m3_inputs(3, 512, 2, seed=5)
    want = [[sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[i], b[:, j], strict=True)), Fraction(0))
             for j in range(2)] for i in range(3)]
    got = exact_matmul(a, b)
    assert all(Fraction(float(got[i, j])) == want[i][j] for i in range(3) for j in range(2))
    with pytest.raises(ValueError, match="float64 holds 53"):
        exact_matmul(np.array([[1.0, 2.0**-40]]), np.array([[1.0], [2.0**-20]]))


def test_k_sweep_reproduces_the_deepseek_observation():
    """H100 fp8 (14-bit block results, truncation): the unit's error grows with
    K (swamping) to percent level at K = 4096; promotion every 128 products
    keeps it flat; every number is within the a-priori bound."""
    from numlab.bound_rules import mma_bound

    ks = (256, 1024, 4096)
    rows = k_sweep("H100/fp8_e4m3/fp32", ks=ks, M=4, N=4)
    rel = [r["rel_max"] for r in rows]
    pro = [r["rel_max_promoted"] for r in rows]
    assert rel[0] < rel[1] < rel[2] and rel[2] > 0.01
    assert max(pro) < 2 * min(pro) and rel[2] > 20 * pro[2]
    a, b = e4m3_inputs(4, 4096, 4, seed=0)
    unit = UNIT_PRESETS["H100/fp8_e4m3/fp32"]
    exact = exact_matmul(a, b)
    for u in (unit, unit.replace(promote_every=128)):
        err = np.abs(mma(a, b, u).astype(np.float64) - exact)
        assert np.all(err <= mma_bound(a, b, u))
    # B200's fp8 unit keeps fp32 block results: no swamping
    (b200,) = k_sweep("B200/fp8_e4m3/fp32", ks=(4096,), M=4, N=4, promote_every=None)
    assert b200["rel_max"] < 1e-6 and "rel_max_promoted" not in b200


def test_preset_errors_differ_across_gpus():
    a, b = e4m3_inputs(2, 1024, 2, seed=1)
    rows = {r["preset"]: r for r in preset_errors(a, b)}
    # e4m3 values are fp16/bf16/tf32 values too, not e5m2 values
    assert {n for n, u in UNIT_PRESETS.items() if u.in_fmt == "fp8_e4m3"} <= set(rows)
    assert "H100/fp16/fp32" in rows and not any("e5m2" in n for n in rows)
    assert rows["H100/fp8_e4m3/fp32"]["rel_max"] > 1000 * rows["B200/fp8_e4m3/fp32"]["rel_max"]
    assert all(r["evidence"].startswith("parameters only") for r in rows.values())


def test_block_bits_lays_out_one_block():
    unit = MatrixUnit(in_fmt="fp16", fma_size=4, align_bits=0)
    a = np.array([1.0, 2.0**-20, 3.0, -(2.0**-23) * 3])
    b = np.array([1.0, 1.0, 2.0**-12, 1.0])
    bb = block_bits(a, b, unit)
    assert bb["E"] == 0 and bb["ulp"] == -23
    kept = [t["kept"] for t in bb["terms"]]
    assert kept == [1.0, 2.0**-20, 3 * 2.0**-12, -(2.0**-23) * 3]
    assert bb["result"] == float(mma(a[None, :], b[:, None], unit)[0, 0]) == sum(kept)
    small = block_bits(np.array([1.0, 2.0**-24 * 3, 0, 0]), np.array([1.0, 1.0, 0, 0]), unit)
    t = small["terms"][1]
    assert t["kept"] == 2.0**-23 and t["dropped"] == 2.0**-24  # truncated below 2**(E - 23)
    with pytest.raises(ValueError, match="fma_size=4"):
        block_bits(a[:3], b[:3], unit)


def test_unit_claims_compare_no_unit_with_the_unit():
    from numlab.cli.mma import unit_claims

    claims = ("error_within_bound", "no_worse_elementwise")
    plain = unit_claims("gelu_mlp", None, trials=1, claims=claims)
    on = unit_claims("gelu_mlp", "H100/fp8_e4m3/fp32", trials=1, claims=claims)
    verdicts = {r["claim"]: (p["verdict"], r["verdict"]) for p, r in zip(plain, on, strict=True)}
    # the running bound is rigorous whatever the unit; "fused no worse than eager" is not
    assert verdicts["error_within_bound"] == ("holds", "holds")
    assert verdicts["no_worse_elementwise"] == ("holds", "fails")


def test_cli_mma_sweep(tmp_path, capsys):
    from numlab.cli import main

    rc = main(["mma", "sweep", "--ks", "256,1024", "--m", "4", "--n", "4", "--kind", "uniform",
               "--claims-model", "none", "--preset-k", "512", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "DeepSeek-V3" in out and "H100/fp8_e4m3/fp32" in out and "B200/fp8_e4m3/fp32" in out
    assert "1024" in out and "max rel, N_C" in out and "'fp32 inside' claims" not in out
    assert (tmp_path / "o" / "mma_k_sweep.png").stat().st_size > 1000
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [r["K"] for r in data["sweep"]["uniform"]] == [256, 1024]
    # results are never overwritten without --force: a fresh folder
    main(["mma", "sweep", "--ks", "256", "--m", "2", "--n", "2", "--kind", "uniform",
          "--claims-model", "none", "--preset-k", "256", "--out", str(tmp_path / "o")])
    assert "use --force" in capsys.readouterr().out
    for bad, msg in ((["--unit", "H100/fp16/fp32"], "takes fp16"), (["--ks", "0"], "--ks"),
                     (["--unit", "X1"], "--unit"), (["--kind", "weird"], "--kind")):
        rc = main(["mma", "sweep", "--claims-model", "none", *bad])
        assert rc == 2 and msg in capsys.readouterr().err


def test_bench_times_the_model_against_numpy(monkeypatch):
    """time_mma times mma(a, b, unit) of each unit and np.matmul of the same
    values in float64 (a timer standing in for best_of records what it ran and
    returns set times), and derives the ratio and the verdict from those times."""
    from numlab.bench import mma as bench

    n, seed = 48, 5
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    t_np, t_model = 1.0, 4 * bench.TARGET  # the model 4x slower than the target allows
    ran = []

    def fake_best_of(fn, repeat=1, warmup=True):
        out = np.asarray(fn())
        is_np = out.dtype == np.float64 and np.array_equal(out, exact)
        if not is_np:
            ran.append(out)
        return t_np if is_np else t_model

    monkeypatch.setattr(bench, "best_of", fake_best_of)
    rows = bench.time_mma(n=n, seed=seed)
    assert [r["unit"] for r in rows] == list(bench.UNITS) and len(ran) == len(rows)
    for r, out in zip(rows, ran, strict=True):
        unit = UNIT_PRESETS[r["unit"]]
        assert r["fma_size"] == unit.fma_size >= 8 and r["n"] == n and r["engine"] in ("numba", "numpy")
        assert_same_bits(out, np.asarray(mma(a, b, unit, engine=r["engine"])))
        assert (r["model_s"], r["numpy_s"]) == (t_model, t_np)
        assert r["ratio"] == 4 * bench.TARGET and r["met"] == "no"


def test_compare_finds_the_first_divergence_at_the_unit_matmul():
    """msit-style compare of two eager runs, one with its matmul on the H100
    fp8 unit: every node is compared and the first divergence is the matmul."""
    from numlab.compare import compare_dumps

    rng = np.random.default_rng(6)
    x, w = _fp16(rng, (8, 1024), 4.0), _fp16(rng, (1024, 8))
    g = trace(lambda x, w: ops.relu(ops.matmul(x, w)), x=x.shape, w=w.shape)
    golden = run(g, {"x": x, "w": w}, mode="eager", fmt="fp16", kernels="handwritten")
    mine = run(g, {"x": x, "w": w}, mode="eager", fmt="fp16", kernels="handwritten:mma=H100/fp8_e4m3/fp32")
    rep = compare_dumps(golden, mine, fmt="fp16")
    fd = rep.first_divergence
    assert fd is not None and fd["node"] == "matmul_0" and fd["error_origin"] == "introduced"
