"""Execution contracts (numlab.contract): the one parser, the presets, the
classes derived from KernelSpecs, and that every knob of a kernel class moves
a contract bound (a knob that changes nothing is a bug)."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from fractions import Fraction

import numpy as np
import pytest

import numlab as nl
from numlab.bounds import contract_bound
from numlab.contract import CONTRACT_PRESETS, Contract, KernelClass, algo_rel_error
from numlab.contract_rules import two_pass_var_error, welford_mean_error
from numlab.formats import FP32
from numlab.kernels import algorithms as alg


def test_presets_parse_and_round_trip():
    for name, c in CONTRACT_PRESETS.items():
        assert Contract.parse(name) is c and c.source, name
        assert Contract.parse(c.spec) == c
    c = Contract.parse("triton_cuda:codegen.libm_ulps=2,library.rsqrt=newton(table12,1)")
    assert c.codegen.libm_ulps == 2 and c.library.libm_ulps == CONTRACT_PRESETS["triton_cuda"].library.libm_ulps
    assert c.library.rsqrt == "newton(table12,1)" and Contract.parse(c.spec) == c
    both = Contract.parse("torch_cpu:libm_ulps=8")
    assert both.library.libm_ulps == both.codegen.libm_ulps == 8.0
    assert "torch_cpu" in both.header() and "libm_ulps=8" in both.header()


@pytest.mark.parametrize("spec, words", [
    ("nosuch", ["contract='nosuch'", "unknown contract", "torch_cpu"]),
    ("torch_cpu:libm=3", ["unknown field 'libm'", "libm_ulps"]),
    ("torch_cpu:rsqrt=fast", ["rsqrt='fast'", "newton(<seed>,<steps>)"]),
    ("torch_cpu:variance=textbook", ["variance", "two_pass", "welford"]),
    ("torch_cpu:promotion=half", ["promotion='half'", "fp32_internal"]),
    ("torch_cpu:scalar_fmt=fp16", ["scalar_fmt='fp16'", "storage"]),
    ("torch_cpu:cuda.rsqrt=ieee", ["unknown field 'cuda.rsqrt'", "library."]),
    ("torch_cpu:libm_ulps", ["is not field=value"]),
])
def test_parser_errors_name_the_argument_value_and_choices(spec, words):
    with pytest.raises(ValueError) as exc:
        Contract.parse(spec)
    for w in words:
        assert w in str(exc.value), (w, str(exc.value))


def test_derived_contract_follows_the_kernel_specs():
    c = Contract.derived()
    assert c.library.rsqrt == "newton(table12,1)" and c.codegen.rsqrt == "newton(table8,2)"
    assert c.codegen.scalar_fmt == "storage" and c.library.scalar_fmt == "fp32"
    c2 = Contract.derived("codegen:scalar_mul=muls,rsqrt=exact", "handwritten:promotion=native")
    assert c2.codegen.scalar_fmt == "fp32" and c2.codegen.rsqrt == "ieee" and c2.library.promotion == "native"
    unit = Contract.derived("codegen:mma=H100/fp8_e4m3/fp32").codegen.mma
    assert unit is not None and unit.in_fmt == "fp8_e4m3"


def test_newton_classes_follow_the_error_recurrence():
    u = FP32.u
    e0 = alg.seed_error_bound("table12", "rsqrt")
    e1 = algo_rel_error("newton(table12,1)", u, "rsqrt")
    assert 1.5 * e0 * e0 < e1 <= 1.5 * e0 * e0 + 2 * e0**3 + 9 * u
    # more steps never make the stated accuracy worse, down to the rounding floor
    assert algo_rel_error("newton(table8,3)", u, "rsqrt") <= algo_rel_error("newton(table8,2)", u, "rsqrt")
    assert algo_rel_error("ieee", u, "rsqrt") == (1 + u) ** 2 - 1 and algo_rel_error("ieee", u, "divide") == u
    assert algo_rel_error("ulps(2)", u, "divide") == 4 * u
    assert algo_rel_error("rel(2^-22.9)", u, "rsqrt") == 2.0**-22.9
    # every table seed's measured Newton error is within the class (exhaustive over the seed's entries)
    x = np.ldexp(1 + np.arange(4096) / 4096, np.arange(4096) % 7 - 3)
    y = alg.seed_estimate(x, alg.Table(12), "rsqrt").astype(np.float32)
    xf = x.astype(np.float32)
    for _ in range(1):
        y = (y * (np.float32(1.5) - np.float32(0.5) * xf * y * y)).astype(np.float32)
    rel = np.abs(y.astype(np.float64) * np.sqrt(x) - 1)
    assert rel.max() <= e1


def test_welford_mean_error_covers_a_scalar_welford_loop():
    """welford_mean_error bounds |M_hat_k - mean| for a float32 Welford loop
    (exact Fractions), on hard data (large mean, small spread)."""
    rng = np.random.default_rng(0)
    for n in (7, 64, 300):
        x = (32 + 0.25 * rng.standard_normal(n)).astype(np.float32)
        m = np.float32(0)
        worst = 0.0
        for k, xk in enumerate(x, 1):
            m = np.float32(m + np.float32(np.float32(xk - m) / np.float32(k)))
            exact = sum(Fraction(float(v)) for v in x[:k]) / k
            worst = max(worst, abs(float(Fraction(float(m)) - exact)))
        A, W = float(np.max(np.abs(x))), float(x.max() - x.min())
        assert worst <= float(welford_mean_error(n, FP32.u, A, W))


def test_two_pass_error_is_second_order_in_the_mean_error():
    v = two_pass_var_error(64, 64, 1e-3, 0.0, 0.0, 0.0, 1.0)
    assert math.isclose(float(v), 1e-6 * (1 + 1e-6), rel_tol=1e-6)


def _bound(g, x, mode, contract, fmt="fp16", fusion=None):
    b = contract_bound(g, x, mode=mode, fmt=fmt, contract=contract, fusion=fusion)
    return np.concatenate([np.ravel(v) for v in b.values()])


LIVENESS = {
    "promotion": ("native", "softmax", "eager", None),
    "acc": ("fp16", "softmax", "eager", None),
    "rounding": ("rtz", "layernorm", "eager", None),
    "libm_ulps": (16.0, "gelu_mlp", "fused", None),
    "rsqrt": ("newton(table8,1)", "rmsnorm", "eager", None),
    "divide": ("ulps(64)", "softmax", "eager", None),
    "sqrt": ("ulps(64)", "sqrt_model", "eager", None),
    "scalar_fmt": ("storage", "scale_model", "eager", None),
    "variance": (("two_pass",), "layernorm_shift", "eager", None),
    "matmul_inputs": ("tf32", "gelu_mlp", "eager", "fp32"),  # fp16 values are exact in tf32
    "mma": ("H100/fp8_e4m3/fp32", "gelu_mlp", "eager", None),
}


def _model(name):
    if name == "sqrt_model":
        g = nl.trace(lambda x: {"y": nl.ops.sqrt(x)}, x=(4, 8))
        return g, {"x": np.abs(np.random.default_rng(0).standard_normal((4, 8))) + 0.5}
    if name == "scale_model":  # 0.1 is not a value of fp16 or fp32, and differs between them
        g = nl.trace(lambda x: {"y": x * 0.1}, x=(4, 8))
        return g, {"x": np.random.default_rng(0).standard_normal((4, 8))}
    if name == "layernorm_shift":
        g = nl.zoo.layernorm()
        return g, nl.zoo.make_inputs(g, kind="shifted_mean", seed=0)
    g = nl.zoo.get_model(name)
    return g, nl.zoo.make_inputs(g, kind="normal", seed=0)


def test_every_kernel_class_knob_moves_a_bound():
    assert set(LIVENESS) == {f.name for f in fields(KernelClass)}
    base = Contract("custom", KernelClass(), KernelClass())
    for knob, (value, model, mode, fmt) in LIVENESS.items():
        g, x = _model(model)
        changed = Contract("custom", replace(base.library, **{knob: value}), replace(base.codegen, **{knob: value}))
        a, b = _bound(g, x, mode, base, fmt or "fp16"), _bound(g, x, mode, changed, fmt or "fp16")
        assert not np.array_equal(a, b), knob


def test_contract_bound_arguments_are_checked():
    g = nl.zoo.layernorm()
    x = nl.zoo.make_inputs(g, kind="normal", seed=0)
    with pytest.raises(ValueError, match="mode='reference'.*eager"):
        contract_bound(g, x, mode="reference", fmt="fp16")
    with pytest.raises(ValueError, match="fusion= applies to the fused modes"):
        contract_bound(g, x, mode="eager", fmt="fp16", fusion="inductor")
    with pytest.raises(ValueError, match=r"prob=1\.5"):
        contract_bound(g, x, mode="fused", fmt="fp16", prob=1.5)
    with pytest.raises(ValueError, match="fmt"):
        contract_bound(g, x, mode="fused", fmt="fp17")


def test_estimate_is_labelled_and_below_the_bound():
    g = nl.zoo.softmax(8, 512)
    x = nl.zoo.make_inputs(g, kind="normal", seed=1)
    b = contract_bound(g, x, mode="fused", fmt="bf16", fusion="inductor")
    e = contract_bound(g, x, mode="fused", fmt="bf16", fusion="inductor", prob=0.99)
    assert b.kind == "bound" and e.kind == "estimate" and "not a bound" in e.header()
    assert np.all(e["y"] <= b["y"]) and np.any(e["y"] < b["y"])


def test_budget_names_the_stored_mean_of_a_decomposed_layer_norm():
    """autofuse+decompose stores the mean in fp16 between kernels: on shifted-mean
    inputs that rounding is where the error comes from; in one fp32 block
    (inductor) it is not."""
    g = nl.zoo.layernorm()
    x = nl.zoo.make_inputs(g, kind="shifted_mean", seed=0)
    split = contract_bound(g, x, mode="fused", fmt="fp16", fusion="autofuse+decompose").budget("y")
    one = contract_bound(g, x, mode="fused", fmt="fp16", fusion="inductor").budget("y")
    assert split[0][1] == "mean" and split[0][2] > 0.9
    assert one[0][0] == "y" and abs(sum(s for _, _, s in one) - 1) < 1e-9


def test_infinite_bounds_are_flagged_with_the_operator():
    g = nl.zoo.layernorm()
    x = nl.zoo.make_inputs(g, kind="near_overflow", seed=0)
    b = contract_bound(g, x, mode="eager", fmt="bf16")
    src = b.inf_sources()
    if np.isinf(b["y"]).any():
        assert src and src[0]["op"] == "layer_norm" and "overflow" in src[0]["causes"]
    g2 = nl.trace(lambda x: {"y": nl.ops.log(x)}, x=(2, 3))
    b2 = contract_bound(g2, {"x": np.array([[1.0, 0.0, -1.0], [2.0, 3.0, 4.0]])}, mode="eager", fmt="fp16")
    assert np.isinf(b2["y"][0, 1:]).all() and np.isfinite(b2["y"][1]).all()
    assert b2.inf_sources()[0]["op"] == "log"
