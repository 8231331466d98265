"""numlab.testing: a kernel held to the contract bound in a test.  A correct
kernel passes, a broken one fails with a numpy.testing-style report, an
infinite bound is never a pass, and tensors are taken as arrays."""

from __future__ import annotations

import numpy as np
import pytest

import numlab
from numlab import zoo
from numlab.bounds import contract_bound
from numlab.testing import assert_within_bound, tolerance


@pytest.fixture(scope="module")
def ln():
    g = zoo.layernorm()
    xs = {k: v.astype(np.float16) for k, v in zoo.make_inputs(g, kind="normal", seed=0).items()}
    return g, xs


def _ln32(x, gamma, beta, eps=1e-5):
    """A plain fp32 layer norm (two-pass variance, 1/sqrt)."""
    x = x.astype(np.float32)
    d = x - x.mean(-1, keepdims=True, dtype=np.float32)
    v = (d * d).mean(-1, keepdims=True, dtype=np.float32)
    return d / np.sqrt(v + np.float32(eps)) * gamma.astype(np.float32) + beta.astype(np.float32)


def _ln16(x, gamma, beta, eps=1e-5):
    """Broken: every step in fp16, sums accumulated sequentially in fp16."""
    n = x.shape[-1]
    acc = np.zeros(x.shape[:-1] + (1,), np.float16)
    for j in range(n):
        acc = (acc + x[..., j:j + 1]).astype(np.float16)
    d = (x - (acc / np.float16(n)).astype(np.float16)).astype(np.float16)
    acc = np.zeros_like(acc)
    for j in range(n):
        acc = (acc + d[..., j:j + 1] * d[..., j:j + 1]).astype(np.float16)
    v = (acc / np.float16(n)).astype(np.float16)
    return (d / np.sqrt(v + np.float16(eps)) * gamma + beta).astype(np.float16)


def test_a_correct_kernel_passes(ln):
    g, xs = ln
    y = _ln32(**xs).astype(np.float16)  # fp32 throughout, rounded once to fp16
    assert_within_bound(g, xs, y, fmt="fp16")  # single-array actual, default mode fused
    assert_within_bound(g, xs, {"y": y}, fmt="fp16", mode="eager")
    assert_within_bound(g, xs, y, fmt="fp16", contract="torch_cpu")


def _message(g, xs, y, **kw):
    with pytest.raises(AssertionError) as exc:
        assert_within_bound(g, xs, y, fmt="fp16", **kw)
    return str(exc.value)


@pytest.mark.parametrize("broken", ["fp16_accumulation", "rtz_output"])
def test_a_broken_kernel_fails_with_the_report(ln, broken):
    g, xs = ln
    if broken == "fp16_accumulation":
        y = _ln16(**xs)
    else:  # right in fp32, rounded to fp16 toward zero
        y = numlab.round_to(_ln32(**xs).astype(np.float64), numlab.FP16, "rtz").astype(np.float16)
    msg = _message(g, xs, y)
    lines = msg.splitlines()
    assert lines[0].startswith("Not within the contract bound (mode fused, fmt fp16, contract derived: ")
    assert lines[1].startswith("Mismatched elements: ") and " / 512 (" in lines[1]
    assert lines[2].startswith("Worst index: (") and "output 'y'" in lines[2]
    assert all(w in lines[3] for w in ("Error: ", "Bound: ", "Actual: ", "Exact: "))
    assert lines[4].startswith("Largest contributions to the bound there: y (layer_norm)")
    # the worst index's numbers are the real ones
    idx = eval(lines[2].split("Worst index: ")[1].split("   ")[0])
    B = contract_bound(g, xs, mode="fused", fmt="fp16")["y"]
    exact = numlab.run(g, xs, mode="reference", fmt="fp16").outputs["y"]
    err = abs(float(y[idx]) - float(exact[idx]))
    assert err > B[idx]
    assert f"Error: {err:.6g}   Bound: {B[idx]:.6g}" in lines[3]
    n_bad = int(np.count_nonzero(np.abs(y.astype(np.float64) - exact) > B))
    assert lines[1].startswith(f"Mismatched elements: {n_bad} / 512 ")


def test_nan_is_a_mismatch(ln):
    g, xs = ln
    y = _ln32(**xs).astype(np.float16)
    y[3, 4] = np.nan
    msg = _message(g, xs, y)
    assert "Mismatched elements: 1 / 512 (0.195%)" in msg and "Worst index: (3, 4)" in msg


def test_tolerance_is_the_bound(ln):
    g, xs = ln
    t = tolerance(g, xs, fmt="fp16")
    assert isinstance(t, np.ndarray) and t.shape == (8, 64)
    np.testing.assert_array_equal(t, contract_bound(g, xs, mode="fused", fmt="fp16")["y"])
    te = tolerance(g, xs, fmt="fp16", mode="eager", contract="triton_cuda")
    np.testing.assert_array_equal(te, contract_bound(g, xs, mode="eager", fmt="fp16", contract="triton_cuda")["y"])
    est = tolerance(g, xs, fmt="fp16", prob=0.99)
    assert np.all(est <= t)


def two(x, w):
    h = x @ w
    return {"h": h, "y": np.tanh(h) * 0.5}


def test_a_function_and_several_outputs():
    rng = np.random.default_rng(1)
    xs = {"x": rng.standard_normal((4, 16)).astype(np.float16),
          "w": (rng.standard_normal((16, 8)) / 4).astype(np.float16)}
    h = (xs["x"].astype(np.float32) @ xs["w"].astype(np.float32))
    good = {"h": h.astype(np.float16), "y": (np.tanh(h) * np.float32(0.5)).astype(np.float16)}
    assert_within_bound(two, xs, good, fmt="fp16")
    tol = tolerance(two, xs, fmt="fp16")
    assert set(tol) == {"h", "y"} and tol["h"].shape == (4, 8)
    bad = dict(good, y=(good["y"].astype(np.float32) * np.float32(1.01)).astype(np.float16))
    msg = _message(two, xs, bad)
    assert "Per output: h 0 / 32, y " in msg and "output 'y'" in msg
    with pytest.raises(TypeError, match="dict"):
        assert_within_bound(two, xs, good["y"], fmt="fp16")
    with pytest.raises(ValueError, match=r"missing outputs \['h'\]"):
        assert_within_bound(two, xs, {"y": good["y"]}, fmt="fp16")
    with pytest.raises(AssertionError, match="shape"):
        assert_within_bound(two, xs, {**good, "h": good["h"][:2]}, fmt="fp16")


def test_an_infinite_bound_is_not_a_pass():
    xs = {"x": np.array([1.0, 12.0, 2.0], np.float16)}  # exp(12) > the largest fp16
    with np.errstate(over="ignore"):
        y = np.exp(xs["x"].astype(np.float32)).astype(np.float16)
    with pytest.raises(AssertionError) as exc:
        assert_within_bound(lambda x: np.exp(x), xs, y, fmt="fp16")
    msg = str(exc.value)
    assert "unknown (infinite) at 1 / 3 elements" in msg and "undecided" in msg
    assert "First such index: (1,)" in msg and "overflow" in msg
    assert np.isinf(tolerance(lambda x: np.exp(x), xs, fmt="fp16")[1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_tensors(ln, dtype, torch):  # the torch fixture (tests/conftest.py) skips without torch
    g, xs = ln
    fmt = "fp16" if dtype == "float16" else "bf16"
    tdt = getattr(torch, dtype)
    t = {k: torch.from_numpy(v.astype(np.float32)).to(tdt) for k, v in xs.items()}
    y = torch.nn.functional.layer_norm(t["x"], (64,), t["gamma"], t["beta"], eps=1e-5)
    assert y.dtype == tdt
    assert_within_bound(g, t, y, fmt=fmt, contract="torch_cpu")  # tensors as inputs and as actual
    assert_within_bound(g, t, {"y": y.requires_grad_(False)}, fmt=fmt)
    wrong = (y.float() * 1.01).to(tdt)
    with pytest.raises(AssertionError, match="Mismatched elements"):
        assert_within_bound(g, t, wrong, fmt=fmt)
