"""Where quantised elements and block scales live between kernels (eager vs
fused placement of the casts).

``OpInfo.stored_fmt``: ``quantize`` writes its elements in their element
format, ``block_scale`` its scales in fp32, in every mode that writes values
(eager kernels, fused block edges, emulated casts), instead of rounding them
to the run's storage format S.  Expected values are computed by hand in
numpy (ml_dtypes casts, float32 arithmetic written out) and, where torch is
installed, by torch's own DeepSeek-V3 recipe (``act_quant``:
``s = amax / 448``, ``y = (x / s).to(float8_e4m3fn)``, scale kept fp32);
never by the code under test.

"The old placement" (every node rounded to S, as before the hook) is
recovered by registering the two operators without ``stored_fmt``
(``monkeypatch`` on ``ops.CATALOGUE``), which shows that the hook changes bits
where it should (fp32 scales in bf16, e5m2 elements in an fp8_e4m3 run, tiny
MX scales in fp16) and none where it should not (MX power-of-two scales in
bf16).
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, bits

from numlab import ops, zoo
from numlab.execute import fingerprint, run
from numlab.execute.values import stored_formats
from numlab.formats import FP8_E4M3, FP8_E5M2, FP32
from numlab.fusion import FusionOptions
from numlab.graph import trace
from numlab.kernels import KernelSpec
from numlab.kernels import scaled as S
from numlab.running_bounds import run_with_bounds

BF16 = ml_dtypes.bfloat16


def fake_quant_graph(fmt, shape=(8, 256)):
    def fq(x):
        return {"y": ops.fake_quantize(x, fmt)}

    return trace(fq, x=shape)


def old_placement(monkeypatch):
    """Register quantize and block_scale as before the hook: stored in S."""
    for op in ("quantize", "block_scale"):
        monkeypatch.setitem(ops.CATALOGUE, op, dataclasses.replace(ops.CATALOGUE[op], stored_fmt=None))


def data(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def test_registration_declares_the_stored_formats():
    g = fake_quant_graph("deepseek_1x128")
    assert stored_formats(g) == {"quantize_0": FP8_E4M3, "block_scale_0": FP32}
    assert stored_formats(fake_quant_graph("mxfp8_e5m2", (8, 64)))["quantize_0"] == FP8_E5M2
    assert ops.get_op("add").stored_fmt is None and ops.get_op("dequantize").stored_fmt is None
    with pytest.raises(TypeError, match="stored_fmt"):
        ops._register("stored_fmt_probe", "elementwise", (1, 1), {}, lambda s, a: (a, s[0]), lambda x: x,
                      kernel=ops.get_op("neg").kernel, slack=ops.get_op("neg").slack,
                      propagate=ops.get_op("neg").propagate, local=ops.get_op("neg").local, aten=("neg",),
                      stored_fmt="fp32")
    assert "stored_fmt_probe" not in ops.CATALOGUE


def deepseek_by_hand(xs, dt=BF16):
    """DeepSeek-V3's act_quant + dequantisation on values of the numpy dtype dt (default bf16), in
    numpy: fp32 amax per 1x128 tile, s = fp32(amax / 448), q = e4m3(x / s)
    (RNE), y = dt(fp32(q * s)).  Returns (q, s, y) and y with the scale rounded
    to dt first (the old placement)."""
    x = xs.astype(dt).astype(np.float32)
    b = x.reshape(x.shape[0], -1, 128)
    amax = np.max(np.abs(b), axis=-1, keepdims=True)
    assert np.all(amax > 0)
    s = (amax / np.float32(448.0)).astype(np.float32)
    q = (b / s).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    y = (q.astype(np.float32) * s).astype(np.float32).astype(dt)
    s_old = s.astype(dt).astype(np.float32)
    y_old = (q.astype(np.float32) * s_old).astype(np.float32).astype(dt)
    return q.reshape(x.shape), s[..., 0], y.reshape(x.shape), y_old.reshape(x.shape)


def test_deepseek_fp32_scales_in_a_bf16_eager_run_stay_fp32(monkeypatch):
    g = fake_quant_graph("deepseek_1x128")
    xs = data((8, 256), seed=1)
    q, s, y, y_old = deepseek_by_hand(xs)
    r = run(g, {"x": xs}, mode="eager", fmt="bf16")
    assert r["block_scale_0"].dtype == np.float32 and r["quantize_0"].dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(bits(r["block_scale_0"]), bits(s))
    np.testing.assert_array_equal(bits(r["quantize_0"]), bits(q))
    np.testing.assert_array_equal(bits(r.outputs["y"]), bits(y))
    # the knob changes bits: rounding the fp32 scales to bf16 (the old placement) gives y_old
    assert np.count_nonzero(bits(y) != bits(y_old)) > y.size // 10
    old_placement(monkeypatch)
    r_old = run(g, {"x": xs}, mode="eager", fmt="bf16")
    np.testing.assert_array_equal(bits(r_old.outputs["y"]), bits(y_old))
    assert r_old.fingerprint != r.fingerprint  # the placement is part of the compile fingerprint


def test_deepseek_bf16_eager_equals_torch():
    torch = pytest.importorskip("torch", reason="torch is the reference implementation of this test")
    g = fake_quant_graph("deepseek_1x128")
    xs = data((8, 256), seed=2, scale=3.0)
    r = run(g, {"x": xs}, mode="eager", fmt="bf16")
    x = torch.from_numpy(xs).to(torch.bfloat16).float().view(8, 2, 128)
    s = x.abs().amax(dim=-1, keepdim=True) / 448.0          # fp32, as act_quant
    qt = (x / s).to(torch.float8_e4m3fn)
    yt = (qt.float() * s).to(torch.bfloat16).view(8, 256)
    assert_same_bits(r["block_scale_0"], s[..., 0].numpy())
    np.testing.assert_array_equal(bits(r["quantize_0"]), qt.view(torch.uint8).view(8, 256).numpy())
    np.testing.assert_array_equal(bits(r.outputs["y"]), yt.view(torch.int16).numpy().view(np.uint16))


def mx_by_hand(xs, dt):
    """OCP MX v1.0 (mxfp8_e4m3, 1x32, floor rule) by hand on values rounded to the numpy dtype dt:
    X = 2**(floor(log2 amax) - 8), elements clamped to +-448 and cast (RNE),
    y = dt(q * X)."""
    x = xs.astype(dt).astype(np.float32)
    b = x.reshape(x.shape[0], -1, 32)
    amax = np.max(np.abs(b), axis=-1, keepdims=True)
    e = np.floor(np.log2(amax)).astype(np.int32) - 8     # amax > 0 here
    X = np.ldexp(np.float32(1), e).astype(np.float32)
    q = np.clip(b / X, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return (q.astype(np.float32) * X).astype(np.float32).astype(dt).reshape(x.shape), X[..., 0]


def test_mx_power_of_two_scales_are_unchanged_in_bf16(monkeypatch):
    g = fake_quant_graph("mxfp8_e4m3")
    xs = data((8, 256), seed=3)
    y, X = mx_by_hand(xs, BF16)
    r = run(g, {"x": xs}, mode="eager", fmt="bf16")
    np.testing.assert_array_equal(bits(r.outputs["y"]), bits(y))
    np.testing.assert_array_equal(r["block_scale_0"], X)
    old_placement(monkeypatch)
    r_old = run(g, {"x": xs}, mode="eager", fmt="bf16")
    np.testing.assert_array_equal(bits(r_old.outputs["y"]), bits(r.outputs["y"]))  # exact in bf16: same bits


def test_tiny_mx_scales_no_longer_flush_in_fp16(monkeypatch):
    """fp16's smallest subnormal is 2**-24: an MX scale 2**-28 (amax ~ 2**-20)
    stored in fp16 flushed to 0 and the whole block dequantised to 0; kept in
    fp32 it dequantises the elements."""
    g = fake_quant_graph("mxfp8_e4m3", (2, 64))
    xs = data((2, 64), seed=4, scale=2.0 ** -21)
    y, X = mx_by_hand(xs, np.float16)
    assert np.all(X < 2.0 ** -24)
    r = run(g, {"x": xs}, mode="eager", fmt="fp16")
    np.testing.assert_array_equal(bits(r.outputs["y"]), bits(y))
    assert np.count_nonzero(r.outputs["y"]) > 100
    old_placement(monkeypatch)
    assert not np.any(run(g, {"x": xs}, mode="eager", fmt="fp16").outputs["y"])


def test_elements_stay_in_their_format_in_an_fp8_run(monkeypatch):
    """S = fp8_e4m3 with mxfp8_e5m2 elements (up to 57344): stored in e5m2
    they are exact; stored in S (the old placement) every element above 448
    overflowed to NaN."""
    g = fake_quant_graph("mxfp8_e5m2", (4, 64))
    xs = data((4, 64), seed=5)
    x = xs.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    b = x.reshape(4, 2, 32)
    X = np.ldexp(np.float32(1), np.floor(np.log2(np.abs(b).max(-1, keepdims=True))).astype(np.int32) - 15)
    q = np.clip(b / X, -57344, 57344).astype(ml_dtypes.float8_e5m2).reshape(4, 64)  # OCP clamps to max_elem
    r = run(g, {"x": xs}, mode="eager", fmt="fp8_e4m3")
    assert r["quantize_0"].dtype == ml_dtypes.float8_e5m2
    np.testing.assert_array_equal(bits(r["quantize_0"]), bits(q))
    assert np.all(np.isfinite(r.outputs["y"].astype(np.float32))) and r.nonfinite["quantize_0"] == (0, 0)
    old_placement(monkeypatch)
    r_old = run(g, {"x": xs}, mode="eager", fmt="fp8_e4m3")
    assert r_old.nonfinite["quantize_0"][0] > 0 and np.isnan(r_old.outputs["y"].astype(np.float32)).any()


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_fused_block_edges_and_emulated_casts_use_the_stored_formats(fmt):
    """fp8_mlp fused: the scales and elements of x and w1 are block outputs
    (they feed the library's scaled_matmul) and are written in fp32 / e4m3,
    equal to DeepSeek's recipe by hand on the S-rounded input; emulated casts
    (every node written as eager writes it) give eager's bits everywhere."""
    g = zoo.get_model("fp8_mlp")
    xs = zoo.make_inputs(g, "normal", seed=0)
    dt = {"bf16": BF16, "fp16": np.float16}[fmt]
    q, s, _, _ = deepseek_by_hand(xs["x"], dt)
    fused = run(g, xs, mode="fused", fmt=fmt)
    blocks = {m: b for b in fused.plan.blocks for m in b.members}
    assert "block_scale_0" in blocks["block_scale_0"].outputs
    np.testing.assert_array_equal(bits(fused["block_scale_0"]), bits(s))
    np.testing.assert_array_equal(bits(fused["quantize_0"]), bits(q))
    eager = run(g, xs, mode="eager", fmt=fmt)
    emu = run(g, xs, mode="emulated_casts", fmt=fmt, align=True)
    for name, v in eager.values.items():
        assert emu[name].dtype == v.dtype, name
        np.testing.assert_array_equal(bits(emu[name]), bits(v), err_msg=name)


def test_running_bounds_see_the_fp32_scales(monkeypatch):
    """Eager bf16 fp8_mlp: the scale of an input (x, w1: exact, bound 0) kept
    in fp32 has only the float64 slack as its bound (its fp32 quotient is the
    float64 reference rounded once); rounded to bf16 (the old placement) its
    bound is the bf16 rounding.  The output bound holds against the fp64
    reference in both."""
    g = zoo.get_model("fp8_mlp")
    xs = zoo.make_inputs(g, "normal", seed=1)
    scales = [n.name for n in g.nodes if n.op == "block_scale" and n.inputs[0] in g.inputs]
    assert len(scales) == 2
    for placement in ("new", "old"):
        if placement == "old":
            old_placement(monkeypatch)
        br = run_with_bounds(g, xs, mode="eager", fmt="bf16")
        rel = max(float(np.max(br.bounds[n] / np.abs(br.values[n]))) for n in scales)
        if placement == "new":
            assert rel < 2.0 ** -45, rel
        else:
            assert rel > 2.0 ** -12, rel
        y = br.values["y"]
        assert np.all(np.abs(y - br.reference["y"]) <= br.bounds["y"])


def test_fingerprint_names_the_stored_formats_only_where_values_are_stored(monkeypatch):
    """The placement enters the compile fingerprint of the modes that write
    values, for graphs that have such nodes; a graph without them (every
    fingerprint stored before the hook) and the reference mode are unchanged."""
    g, plain = zoo.get_model("fp8_mlp"), zoo.get_model("layernorm")
    assert stored_formats(plain) == {}
    kw = {"fusion": FusionOptions.parse("autofuse"), "kernels": KernelSpec.codegen()}
    before = {m: fingerprint(g, mode=m, fmt="bf16", **(kw if m == "fused" else {}))
              for m in ("eager", "fused", "reference")}
    before_plain = fingerprint(plain, mode="eager", fmt="bf16")
    old_placement(monkeypatch)
    after = {m: fingerprint(g, mode=m, fmt="bf16", **(kw if m == "fused" else {}))
             for m in ("eager", "fused", "reference")}
    assert after["eager"] != before["eager"] and after["fused"] != before["fused"]
    assert after["reference"] == before["reference"]
    assert fingerprint(plain, mode="eager", fmt="bf16") == before_plain


@pytest.mark.parametrize("preset", sorted(S.SCALED_PRESETS))
def test_every_preset_stores_elements_and_scales_as_quantize_gives_them(preset, monkeypatch):
    """Every preset in a bf16 eager run: the elements are written in the
    element format's ml_dtypes container and the scales in float32, with the
    bits of ``kernels.scaled.quantize`` on the bf16-rounded input (that
    function is checked against exact and torchao references in
    tests/test_scaled.py; here the placement is under test).  The old
    placement changes the output bits exactly for the presets whose scales are
    not all exact in bf16: DeepSeek's fp32 ``amax / 448`` and NVFP4's
    ``tensor_scale * e4m3`` products; never for the power-of-two MX scales."""
    shape = (128, 256)
    g = fake_quant_graph(preset, shape)
    xs = data(shape, seed=6)
    x = xs.astype(BF16).astype(np.float32)
    want = S.quantize(x, preset)
    r = run(g, {"x": xs}, mode="eager", fmt="bf16")
    fmt = S.SCALED_PRESETS[preset]
    assert r["quantize_0"].dtype == fmt.elem_dtype and r["block_scale_0"].dtype == np.float32
    np.testing.assert_array_equal(bits(r["quantize_0"]), bits(want.elements.astype(fmt.elem_dtype)))
    np.testing.assert_array_equal(bits(r["block_scale_0"]), bits(want.dequant_scales()))
    exact_in_bf16 = np.array_equal(want.dequant_scales().astype(BF16).astype(np.float32), want.dequant_scales())
    assert exact_in_bf16 == (fmt.scale_rule != "amax")
    old_placement(monkeypatch)
    same = np.array_equal(bits(run(g, {"x": xs}, mode="eager", fmt="bf16").outputs["y"]), bits(r.outputs["y"]))
    assert same == exact_in_bf16
