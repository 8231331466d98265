"""Paths a review found mispredicted: each is now bit for bit, or refused by name.

Every case runs real torch 2.13 on this CPU and asserts "100% bitwise or NotModelled"
with the refusal it must give; a case that must be modelled asserts 100%."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.torch


def _t(torch, a, dt):
    return torch.from_numpy(np.asarray(a, np.float32)).to(
        {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt])


def _share(torch, fn, args, mode="eager", emulated=False):
    from numlab.torch import from_torch, inductor_cpu, predict, run_torch

    tr = from_torch(fn, args)
    kw = {"preset": inductor_cpu(emulated_casts=True)} if emulated else {}
    got = predict(tr, args, mode=mode, **kw).outputs
    want = run_torch(tr, args, mode=mode, emulated_casts=emulated)
    def same(p, w):  # bit for bit: signed zeros distinguished, NaN equal to NaN
        p, w = np.asarray(p, np.float32), np.asarray(w, np.float32)
        return (p.view(np.uint32) == w.view(np.uint32)) | (np.isnan(p) & np.isnan(w))

    return min(float(np.mean(same(p, w))) for p, w in zip(got, want, strict=True))


def test_compiled_layer_norm_of_a_computed_16bit_value(torch):
    """var_mean's two reductions read the same loop: one lane order for both."""
    import torch.nn.functional as F

    rng = np.random.default_rng(70)
    for dt in ("fp16", "bf16"):
        x, y = _t(torch, rng.standard_normal((8, 300)), dt), _t(torch, rng.standard_normal(300), dt)
        for fn in (lambda a, b: F.layer_norm(a * b + 0.1, (300,)), lambda a, b: F.layer_norm(a + 0.1, (300,))):
            assert _share(torch, fn, (x, y), "compiled") == 1.0, dt


def test_where_of_two_numbers_in_a_16bit_function(torch):
    """torch.where(x > 0, 0.3, -0.7): fp32 scalar tensors in a bf16 function (per-node storage)."""
    x = _t(torch, np.random.default_rng(71).standard_normal((4, 97)), "bf16")
    for mode in ("eager", "compiled"):
        assert _share(torch, lambda a: torch.where(a > 0, 0.3, -0.7), (x,), mode) == 1.0, mode


def test_transposed_operands_refused_in_eager_predicted_compiled(torch):
    import torch.nn.functional as F

    from numlab.torch import NotModelled

    x = _t(torch, np.random.default_rng(72).standard_normal((5, 1029)), "fp32")
    for fn in (lambda a: (a.t() * 1.7).sum(-1), lambda a: F.gelu(a.t()), lambda a: torch.sigmoid(a.t() * 2)):
        with pytest.raises(NotModelled, match="transposed"):
            _share(torch, fn, (x,))
        assert _share(torch, fn, (x,), "compiled") == 1.0
    # a permute that keeps the innermost dim keeps rows contiguous: predicted
    y = _t(torch, np.random.default_rng(73).standard_normal((3, 4, 129)), "fp32")
    assert _share(torch, lambda a: torch.sigmoid(a.permute(1, 0, 2)), (y,)) == 1.0


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_eager_16bit_rsqrt_scalar_tail_computes_in_the_16bit_type(torch, dt):
    """ATen's reduced-float rsqrt steps over 32 elements (alpha_step) and its scalar tail is
    fl16(1 / fl16(sqrt(x))) (scalar_tail="storage"); sizes whose tails differ mod 16/32/64."""
    rng = np.random.default_rng(74)
    for n in (13, 77, 1003, 1020, 4099):
        x = _t(torch, np.abs(rng.standard_normal(n)) * 3 + 0.01, dt)
        assert _share(torch, lambda a: torch.rsqrt(a), (x,)) == 1.0, n


def test_libm_paths_refused(torch):
    """fp32 sqrt/log through MKL VML, log (SLEEF logf) eager and compiled: refused."""
    from numlab.torch import NotModelled, torch_cpu_eager

    x = _t(torch, np.abs(np.random.default_rng(75).standard_normal(1029)) + 0.01, "fp32")
    if torch_cpu_eager().unary_algo == "mkl_vml":
        with pytest.raises(NotModelled, match="MKL VML"):
            _share(torch, lambda a: torch.sqrt(a), (x,))
    with pytest.raises(NotModelled, match="log"):
        _share(torch, lambda a: torch.log(a), (x,))
    with pytest.raises(NotModelled, match="logf"):
        _share(torch, lambda a: torch.log(a) * 2, (x,), "compiled")
    with pytest.raises(NotModelled, match="log"):
        _share(torch, lambda a: torch.log(a), (x.bfloat16(),))


def test_add_alpha_tails(torch):
    """fp32 add(x, number, alpha): the last n mod 32 elements without FMA; broadcast
    tensor operands with alpha refused (ATen's two-dimensional loop)."""
    from numlab.torch import NotModelled

    rng = np.random.default_rng(76)
    for n in (335, 1003, 13):
        x = _t(torch, rng.standard_normal(n) * 3, "fp32")
        assert _share(torch, lambda a: torch.add(a, 0.3, alpha=0.37), (x,)) == 1.0, n
    x, y = _t(torch, rng.standard_normal((5, 67)), "fp16"), _t(torch, rng.standard_normal(67), "fp16")
    with pytest.raises(NotModelled, match="broadcast"):
        _share(torch, lambda a, b: torch.add(a, b, alpha=0.37), (x, y))


def test_eager_silu_scalar_tail_is_glibc(torch):
    import torch.nn.functional as F

    rng = np.random.default_rng(77)
    for dt in ("fp32", "bf16"):
        for n in range(1, 70, 4):
            x = _t(torch, rng.standard_normal(n) * 4, dt)
            assert _share(torch, lambda a: F.silu(a), (x,)) == 1.0, (dt, n)


def test_compiled_libm_in_a_where_heavy_kernel(torch):
    """Inductor's scalar tail loop calls glibc for exp, log1p, tanh and erf (tail_ops)."""
    from numlab.torch import NotModelled

    x = _t(torch, np.random.default_rng(78).standard_normal(39), "fp32")
    for fn in (lambda a: torch.where(a > 0, torch.erf(a), a), lambda a: torch.where(a > 0, torch.tanh(a), a)):
        assert _share(torch, fn, (x,), "compiled") == 1.0
    try:
        share = _share(torch, lambda a: torch.where(a > 0, torch.tanh(a), 0.0), (x,), "compiled")
    except NotModelled as e:
        assert "not one contiguous pointwise loop" in str(e)
    else:
        assert share == 1.0


def test_compiled_inputs_of_two_dtypes(torch):
    """Each node's loads follow the inputs it reads: an fp32 reduction beside bf16 work."""
    import torch.nn.functional as F

    rng = np.random.default_rng(79)
    x, y = _t(torch, rng.standard_normal((4, 1000)), "bf16"), _t(torch, rng.standard_normal((4, 1000)), "fp32")
    w = _t(torch, rng.standard_normal(1000), "fp32")
    for fn in (lambda a, b: (a.sum(-1), b.sum(-1)), lambda a, b: (b.mean(-1), a * 2),
               lambda a, b: (F.layer_norm(b, (1000,), w), a + 1)):
        assert _share(torch, fn, (x, y), "compiled") == 1.0
    m = (_t(torch, rng.standard_normal((8, 1000)), "fp16"), _t(torch, rng.standard_normal(1000), "fp16"))
    assert _share(torch, lambda a, b: (a * b) - (a * b).mean(-1, keepdim=True), m, "compiled") == 1.0


def test_0d_values_through_scalar_tail_ops(torch):
    """A 0-d row sum fed to mish/sigmoid/softplus keeps its shape and bits."""
    import torch.nn.functional as F

    from numlab.torch import from_torch, predict

    x = _t(torch, np.random.default_rng(80).standard_normal(63), "bf16")
    for fn in (lambda a: F.mish(a.float().sum(-1)), lambda a: torch.sigmoid(a.float().sum(-1)),
               lambda a: F.softplus(a.float().sum(-1) * 0.1)):
        assert predict(from_torch(fn, (x,)), (x,)).outputs[0].shape == ()
        assert _share(torch, fn, (x,)) == 1.0


def test_compiled_single_row_var_mean_refused(torch):
    """Inductor's var_mean (layer norm) of one row is not the two-pass model: refused;
    several rows, and eager, are predicted; a 0-d reduction is refused, not a crash."""
    import torch.nn.functional as F

    from numlab.torch import NotModelled

    rng = np.random.default_rng(81)
    for shape in ((31,), (1, 300)):
        x = _t(torch, rng.standard_normal(shape), "fp32")
        with pytest.raises(NotModelled, match="single row"):
            _share(torch, lambda a: F.layer_norm(a, (a.shape[-1],)), (x,), "compiled")
        assert _share(torch, lambda a: F.layer_norm(a, (a.shape[-1],)), (x,)) == 1.0
    x = _t(torch, rng.standard_normal((4, 31)), "fp32")
    assert _share(torch, lambda a: F.layer_norm(a, (31,)), (x,), "compiled") == 1.0
    with pytest.raises(NotModelled, match="0-d"):
        _share(torch, lambda a: a.sum(-1).amin(-1, keepdim=True), (_t(torch, rng.standard_normal(257), "fp32"),),
               "compiled")


def test_compiled_paths_the_fuzzer_found_are_refused(torch):
    """A narrowing conversion used inside Inductor's kernel, and a reduction over a loop
    loading both bf16 and fp32 inputs: refused (found mispredicted, 80-92%)."""
    import torch.nn.functional as F

    from numlab.torch import NotModelled

    rng = np.random.default_rng(82)
    x = _t(torch, rng.standard_normal((5, 1003)), "fp16")
    with pytest.raises(NotModelled, match="conversion from fp16 to bf16"):
        _share(torch, lambda a: F.hardtanh(a.to(torch.bfloat16).float(), 0.0, 6.0), (x,), "compiled")
    a, y = _t(torch, rng.standard_normal((5, 65)), "fp32"), _t(torch, rng.standard_normal((5, 1)), "bf16")
    with pytest.raises(NotModelled, match="both 16-bit and fp32"):
        _share(torch, lambda u, v: torch.where(v > 0.3, u, 1e4).mean(-1), (a, y), "compiled")
