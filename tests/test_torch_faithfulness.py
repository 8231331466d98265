"""numlab's predictions against real torch eager and torch.compile (Inductor C++).

Every case is 100% bitwise, or predicting raises ``NotModelled`` naming the path
(and the test says which paths it expects refused: never a share below 100%
passed as good).  Shapes are small and each
compiled function is compiled once (``compile_fn`` caches it) to keep the
file around a minute on one core.
"""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import bits_equal

from numlab.torch.data import cancelling_rows, normal

pytestmark = pytest.mark.torch


def _t(torch, a, dt):
    return torch.from_numpy(a).to({"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt])


def _check(torch, fn, args, *, emulate=(False,), eager_refused: str | None = None):
    """Predict eager and compiled (each ``emulate`` flag) and assert 100% bitwise; with
    ``eager_refused`` the eager prediction must raise ``NotModelled`` containing those
    words instead (its ``pe`` is then None)."""
    from numlab.torch import NotModelled, compile_fn, from_torch, inductor_cpu, predict, run_torch

    tr = from_torch(fn, args)
    te = run_torch(tr, args, mode="eager")[0]
    if eager_refused:
        with pytest.raises(NotModelled) as e:
            predict(tr, args, mode="eager")
        assert eager_refused in str(e.value), str(e.value)
        pe, share_e = None, None
    else:
        pe = predict(tr, args, mode="eager").outputs[0]
        share_e = float(np.mean(_bitwise(pe, te)))
        assert share_e == 1.0, (fn.__name__, "eager", share_e)
    out = {"eager": share_e}
    for emu in emulate:
        tc = run_torch(tr, args, mode="compiled", compiled=compile_fn(fn, emu))[0]
        pc = predict(tr, args, mode="compiled", preset=inductor_cpu(emu)).outputs[0]
        share_c = float(np.mean(_bitwise(pc, tc)))
        assert share_c == 1.0, (fn.__name__, "compiled", emu, share_c)
        out[emu] = (share_c, te, tc, pe, pc)
    return out


def _vml(torch) -> str | None:
    """Eager fp32 exp/tanh are refused in a build with MKL (MKL VML): the words of the
    NotModelled message, or None without MKL (then modelled, SLEEF)."""
    return "MKL VML" if torch.backends.mkl.is_available() else None


def chain(x, y):
    return (x * 0.1 + y) / 3.0 - x * y


def scalars_where(x, y):
    import torch

    return torch.where(x > 0.3, x * 2.5, y - 0.3) + (1.5 - x) + 2.3 / x + torch.add(x, y, alpha=0.7)


def add_scalar(x):
    return x + 0.3


def row_sum(x):
    return x.sum(-1)


def row_mean(x):
    return x.mean(-1)


def exp(x):
    import torch

    return torch.exp(x)


def tanh(x):
    import torch

    return torch.tanh(x)


def softmax(x):
    import torch.nn.functional as F

    return F.softmax(x, -1)


def gelu(x):
    import torch.nn.functional as F

    return F.gelu(x)


def layernorm(x, w, b):
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), w, b)


def test_pointwise_chain_fp16_eager_compiled_and_emulated(torch):
    rng = np.random.default_rng(0)
    x, y = (_t(torch, normal(rng, (8, 100), "fp16"), "fp16") for _ in range(2))
    r = _check(torch, chain, (x, y), emulate=(False, True))
    _, te, tc, _, _ = r[False]
    assert np.mean(te != tc) > 0.2  # eager and compiled really differ
    # with emulate_precision_casts the compiled chain rounds where eager does: identical
    assert bits_equal(r[True][2], te)


def test_scalars_where_alpha_bf16(torch):
    rng = np.random.default_rng(1)
    x, y = (_t(torch, normal(rng, (8, 100), "bf16"), "bf16") for _ in range(2))
    _check(torch, scalars_where, (x, y))


def test_emulate_casts_do_not_reproduce_eager_scalar_add(torch):
    """Measured: eager rounds the scalar of add to fp16 first; Inductor keeps it fp32,
    even with emulate_precision_casts -- numlab predicts both sides bit for bit."""
    rng = np.random.default_rng(2)
    x = _t(torch, normal(rng, (8, 100), "fp16"), "fp16")
    r = _check(torch, add_scalar, (x,), emulate=(True,))
    _, te, tc, pe, pc = r[True]
    assert np.mean(te != tc) > 0.05
    assert bits_equal(pe, te) and bits_equal(pc, tc)


@pytest.mark.parametrize("n", [64, 100])
def test_fp32_row_sum_mean_bitwise(torch, n):
    rng = np.random.default_rng(n)
    x = _t(torch, cancelling_rows(rng, (8, n), "fp32"), "fp32")
    r = _check(torch, row_sum, (x,))
    assert np.mean(r[False][1] != r[False][2]) > 0.3  # ATen and Inductor orders differ
    if n == 100:
        _check(torch, row_mean, (x,))


def test_fp32_row_sum_split_over_threads(torch):
    """One long row: Inductor splits the reduction loop over the OpenMP threads."""
    from numlab.torch.orders import inductor_splits_reduction

    if torch.get_num_threads() < 2:
        pytest.skip(f"needs 2 threads to split, torch has {torch.get_num_threads()}")
    assert inductor_splits_reduction(1, 3000, 16, torch.get_num_threads())
    rng = np.random.default_rng(7)
    x = _t(torch, cancelling_rows(rng, (1, 3000), "fp32"), "fp32")
    _check(torch, row_sum, (x,))


def test_exp_softmax_gelu_layernorm(torch):
    rng = np.random.default_rng(3)
    x = _t(torch, normal(rng, (8, 100), "fp32", 2.0), "fp32")
    # compiled exp is SLEEF's expf, modelled bit for bit; eager fp32 goes through MKL VML
    # (not modelled: refused); 16-bit eager exp maps SLEEF over every element
    _check(torch, exp, (x,), eager_refused=_vml(torch))
    _check(torch, exp, (_t(torch, normal(rng, (8, 100), "fp16", 2.0), "fp16"),))
    xb = _t(torch, normal(rng, (8, 100), "bf16", 2.0), "bf16")
    _check(torch, softmax, (xb,))
    # eager F.gelu runs oneDNN's minimax kernel, compiled ATen's A&S erf: both bitwise
    _check(torch, gelu, (x,))
    # compiled tanh is SLEEF tanhf (bitwise); eager fp32 goes through MKL VML (refused)
    _check(torch, tanh, (x,), eager_refused=_vml(torch))
    w = _t(torch, normal(rng, (64,), "fp32"), "fp32")
    b = _t(torch, normal(rng, (64,), "fp32"), "fp32")
    xl = _t(torch, normal(rng, (8, 64), "fp32", 3.0), "fp32")
    _check(torch, layernorm, (xl, w, b))


def row_amax(x):
    return x.amax(-1)


def sigmoid(x):
    import torch

    return torch.sigmoid(x)


def rmsnorm(x, w):
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), w)


def test_16bit_reductions_rmsnorm_sigmoid_compiled(torch):
    """Paths the tests above do not compile: 16-bit row sum (Inductor's 32 fp32 lanes, a
    masked tail at n = 100, one rounding at the store), fp16 amax, fp16 rms_norm, fp32
    sigmoid -- all bitwise in eager and compiled (the faithfulness table's rows)."""
    rng = np.random.default_rng(12)
    xb = _t(torch, cancelling_rows(rng, (8, 100), "bf16"), "bf16")
    r = _check(torch, row_sum, (xb,))
    assert np.mean(r[False][1] != r[False][2]) > 0.1  # ATen's and Inductor's bf16 sums differ
    xh = _t(torch, normal(rng, (8, 100), "fp16", 2.0), "fp16")
    _check(torch, row_amax, (xh,))
    wh = _t(torch, normal(rng, (100,), "fp16"), "fp16")
    _check(torch, rmsnorm, (xh, wh))
    _check(torch, sigmoid, (_t(torch, normal(rng, (8, 100), "fp32", 3.0), "fp32"),))


def centre_tanh(x):
    import torch

    y = torch.tanh((x - x.mean(-1, keepdim=True)) * 0.7)
    return y * x.amax(-1, keepdim=True)


def softmax_by_hand(x):
    import torch

    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("dt, n", [("bf16", 37), ("fp16", 1003), ("fp32", 100)])
def test_row_reduction_feeding_broadcast_ops(torch, dt, n):
    """A row reduction feeding broadcast pointwise ops, rows not a multiple of the vector
    width: Inductor fuses both into one kernel, keeps the 16-bit mean as its fp32 sum
    divided in fp32 (never rounded to the dtype inside the kernel) and loads the input
    with two fp32 vectors per step -- bit for bit; eager fp32 tanh runs MKL VML (refused)."""
    rng = np.random.default_rng(n)
    x = _t(torch, normal(rng, (16, n), dt, 2.0), dt)
    _check(torch, centre_tanh, (x,), eager_refused=_vml(torch) if dt == "fp32" else None)


def test_realized_16bit_value_read_by_fused_and_later_loops_is_refused(torch):
    """``e = exp(x - amax)`` used by a sum and a division: Inductor stores e as a bf16 buffer,
    sums the fp32 register and divides the rounded buffer (generated code read): refused
    without emulate_precision_casts, bit for bit with it (every 16-bit value rounded)."""
    from numlab.torch import NotModelled, from_torch, predict

    rng = np.random.default_rng(8)
    x = _t(torch, normal(rng, (8, 37), "bf16", 2.0), "bf16")
    with pytest.raises(NotModelled, match=r"stores the bf16 value aten\.exp.*loop fusion"):
        predict(from_torch(softmax_by_hand, (x,)), (x,), mode="compiled")
    _check(torch, softmax_by_hand, (x,), emulate=(True,))


def test_explain_attributes_row_sum_to_order_and_chain_to_promotion(torch):
    from numlab.torch import explain

    rng = np.random.default_rng(64)
    x = _t(torch, cancelling_rows(rng, (8, 64), "fp32"), "fp32")
    e = explain(row_sum, (x,))
    assert e.faith_eager == 1.0 and e.faith_compiled == 1.0
    assert e.differ > 0.3
    assert e.sources["order"]["explains"] == 1.0 and e.sources["order"]["needed"] == 1.0
    for s in ("promotion", "scalars", "algorithm"):
        assert e.sources[s]["explains"] == 0.0
    # an fp32 row sum has no rounding to a storage dtype, no scalar, no composite op
    assert e.verdict() == "order alone accounts for the whole difference; no effect: promotion, scalars, algorithm"
    assert e.n_differ == int(np.sum(e.torch_eager != e.torch_compiled)) == e.n_differ_pred
    assert f"differ on {e.n_differ} of 8 elements" in str(e) and f"verdict: {e.verdict()}" in str(e)
    rng = np.random.default_rng(0)
    x, y = (_t(torch, normal(rng, (8, 100), "fp16"), "fp16") for _ in range(2))
    e = explain(chain, (x, y))
    assert e.faith_eager == 1.0 and e.faith_compiled == 1.0
    # mul/div keep their scalars fp32 in ATen (measured), no reduction: only promotion
    assert e.sources["promotion"] == {"explains": 1.0, "needed": 1.0}
    assert e.verdict() == "promotion alone accounts for the whole difference; no effect: scalars, order, algorithm"
    # the fused compiled chain is closer to fp64 than eager
    assert e.errors["torch.compile"][0] <= e.errors["torch eager"][0]


def test_bench_case_runs(torch):
    from numlab.bench.faithfulness import measure_case

    row = measure_case("row sum", "fp32", (8, 64), emulate=(False,))
    assert row["eager"] == (1.0, 0.0) and row["compiled"] == (1.0, 0.0)


def test_numlab_executor_with_preset_kernel_specs_reproduces_torch(torch):
    """The presets expressed as numlab KernelSpec/FusionOptions drive numlab.run on the
    mapped graph: fused fp32 row sum == torch.compile, fp16 chain fused == torch.compile
    and eager == torch eager (knobs that exist in numlab.kernels suffice here)."""
    import numlab as nl
    from numlab.torch import compile_fn, from_torch, inductor_cpu, run_torch, torch_cpu_eager

    rng = np.random.default_rng(100)
    x = cancelling_rows(rng, (8, 100), "fp32")
    tr = from_torch(row_sum, (_t(torch, x, "fp32"),))
    g = tr.to_graph()
    tc = run_torch(tr, (_t(torch, x, "fp32"),), mode="compiled", compiled=compile_fn(row_sum))[0]
    ind = inductor_cpu()
    r = nl.run(g, {tr.input_names[0]: x}, mode="fused", fmt="fp32", kernels=ind.kernel_spec("fp32"),
               fusion=ind.fusion_options())
    assert bits_equal(np.asarray(r.outputs[g.outputs[0]], np.float32), tc)

    rng = np.random.default_rng(0)
    a, b = normal(rng, (8, 100), "fp16"), normal(rng, (8, 100), "fp16")
    ta, tb = _t(torch, a, "fp16"), _t(torch, b, "fp16")
    tr = from_torch(chain, (ta, tb))
    g = tr.to_graph()
    ins = dict(zip(tr.input_names, (a, b), strict=True))
    tc = run_torch(tr, (ta, tb), mode="compiled", compiled=compile_fn(chain))[0]
    r = nl.run(g, ins, mode="fused", fmt="fp16", kernels=ind.kernel_spec("fp16"), fusion=ind.fusion_options())
    assert bits_equal(np.asarray(r.outputs[g.outputs[0]], np.float32), tc)
    with nl.execute.quiet():  # the preset's softmax/layer-norm/tail knobs read by no node of chain
        r = nl.run(g, ins, mode="eager", fmt="fp16", kernels=torch_cpu_eager().kernel_spec())
    assert bits_equal(np.asarray(r.outputs[g.outputs[0]], np.float32), chain(ta, tb).float().numpy())


def test_explanation_verdict_cases():
    """The verdict sentence for the cases explain can meet (built by hand, no torch)."""
    from numlab.torch.explain import Explanation

    z = np.zeros(4, np.float32)

    def ex(n_differ, n_pred, faith=1.0, **src):
        sources = {s: dict(zip(("explains", "needed"), src.get(s, (0.0, 0.0)), strict=True))
                   for s in ("promotion", "scalars", "order", "algorithm")}
        return Explanation("f", "fp16", (4,), z, z, z, z, z.astype(np.float64), n_differ / 4, faith, 1.0,
                           0.0, 0.0, sources, {}, n_differ, n_pred)

    assert ex(0, 0).verdict() == "eager and compiled agree bit for bit: nothing to attribute"
    assert ex(1, 0, faith=0.75).verdict().startswith("numlab predicts no eager/compiled difference")
    assert ex(2, 2, promotion=(1.0, 0.5), scalars=(0.5, 0.0)).verdict() == (
        "promotion alone accounts for the whole difference; alone moves part of them: scalars 50%; "
        "no effect: order, algorithm")
    assert ex(2, 2, promotion=(1.0, 0.5), scalars=(1.0, 0.0)).verdict() == (
        "promotion or scalars alone moves every differing element; needed on some elements: promotion; "
        "no effect: order, algorithm")
    assert ex(2, 2, promotion=(0.0, 0.5), order=(0.5, 0.5)).verdict() == (
        "no single source accounts for it: promotion and order combine (each needed on some elements); "
        "alone moves part of them: order 50%; no effect: scalars, algorithm")
    assert ex(2, 2, faith=0.5, scalars=(1.0, 1.0)).verdict().endswith(
        "(attribution of numlab's predictions, which are not bitwise here)")


def test_explain_validates_output(torch):
    from numlab.torch import explain

    with pytest.raises(ValueError) as e:
        explain(row_sum, (torch.ones(2, 8),), output=1)  # fails before anything is compiled
    assert str(e.value) == "output=1 is not valid; the function returns 1 tensor(s): choose one of [0]"


# -- softplus, hardswish, log1p (eager ATen kernels; Inductor's decomposition) -------------
def softplus(x):
    import torch.nn.functional as F

    return F.softplus(x)


def softplus_beta(x):
    import torch.nn.functional as F

    return F.softplus(x, beta=2.0, threshold=5.0)


def hardswish(x):
    import torch.nn.functional as F

    return F.hardswish(x)


def log1p_abs(x):
    import torch

    return torch.log1p(x.abs())


@pytest.mark.parametrize("dt", ["fp32", "bf16", "fp16"])
def test_softplus_hardswish_log1p_eager_and_compiled(torch, dt):
    """Shapes whose flat size leaves no vector tail: every element bit for bit, eager
    and compiled, with and without emulate_precision_casts (the decompositions
    compute in fp32, so emulation changes nothing)."""
    rng = np.random.default_rng(50)
    x = _t(torch, (rng.standard_normal((8, 128)) * 8).astype(np.float32), dt)
    for fn in (softplus, softplus_beta, hardswish, log1p_abs):
        _check(torch, fn, (x,), emulate=(False, True))


def test_softplus_compiled_scalar_tail_runs_libm(torch):
    """Inductor's softplus kernel (where share 1/8 > 0.12) runs the last ``numel mod W``
    elements (W = the detected fp32 lanes; a tail of at most half a vector) in a scalar
    loop (std::exp, std::log1p = glibc log1pf); inputs chosen where SLEEF and glibc
    disagree are placed there."""
    from numlab.kernels.libm import glibc_log1pf, sleef_expf, sleef_log1pf
    from numlab.torch import inductor_cpu

    W = inductor_cpu().lanes
    if W < 2:
        pytest.skip(f"Inductor has no vector ISA here (lanes={W}): every element runs the scalar loop")
    tail = W // 2
    body = 992  # a multiple of 8, 16 and 32
    rng = np.random.default_rng(51)
    cand = (rng.standard_normal(20000) * 6).astype(np.float32)
    e = np.exp(cand.astype(np.float64)).astype(np.float32)
    diff = cand[(sleef_log1pf(sleef_expf(cand)) != glibc_log1pf(e)) & (sleef_expf(cand) == e)
                & (cand < 20)]
    xs = np.concatenate([cand[:body], diff[:tail]]).astype(np.float32)
    r = _check(torch, softplus, (_t(torch, xs, "fp32"),))
    _, _, tc, _, pc = r[False]
    assert bits_equal(pc, tc)
    assert not bits_equal(sleef_log1pf(sleef_expf(xs))[body:], tc[body:])  # the tail is not SLEEF
    assert bits_equal(sleef_log1pf(sleef_expf(xs))[:body], tc[:body])  # the vector loop is


def test_softplus_fp32_tails_run_glibc_expf(torch):
    """Random fp32 inputs with tails (eager: numel mod the loop step, compiled: the
    scalar-tail rule): the tails call glibc ``expf``/``log1pf``, modelled bit for bit."""
    rng = np.random.default_rng(52)
    x = _t(torch, (rng.standard_normal(1000) * 8).astype(np.float32), "fp32")
    _check(torch, softplus, (x,))


def test_compile_fn_leaves_the_dynamo_config_as_it_was(torch):
    """compile_fn raises Dynamo's recompile limits only around its calls: after
    compiling and calling, the process's values are the ones read before."""
    import torch._dynamo.config as dcfg

    from numlab.torch import compile_fn, run_torch
    from numlab.torch.predictor import _RECOMPILE_LIMITS, _recompile_limits

    names = sorted(_RECOMPILE_LIMITS)
    before = {k: getattr(dcfg, k) for k in names}
    assert any(before[k] < v for k, v in _RECOMPILE_LIMITS.items()), "the test needs lower defaults"

    def plus_half(t):
        return t + 0.5

    x = torch.arange(4, dtype=torch.float32)
    cf = compile_fn(plus_half)
    assert {k: getattr(dcfg, k) for k in names} == before        # compiling changes nothing
    got = run_torch(plus_half, (x,), mode="compiled", compiled=cf)[0]
    assert bits_equal(got, np.arange(4, dtype=np.float32) + 0.5)
    assert {k: getattr(dcfg, k) for k in names} == before        # nor does calling
    with _recompile_limits():
        assert all(getattr(dcfg, k) >= v for k, v in _RECOMPILE_LIMITS.items())
    assert {k: getattr(dcfg, k) for k in names} == before


def test_compile_fn_cache_is_bounded_and_per_function(torch):
    """The same function (and flag) gives the same compiled callable; the
    cache keeps the COMPILE_CACHE_SIZE most recent and compiles an evicted one
    afresh."""
    from numlab.torch import compile_fn
    from numlab.torch.predictor import COMPILE_CACHE_SIZE

    def first(t):
        return t * 2

    a = compile_fn(first)
    assert compile_fn(first) is a and compile_fn(first, True) is not a
    fns = [lambda t, i=i: t - i for i in range(COMPILE_CACHE_SIZE)]  # distinct functions
    for f in fns:
        compile_fn(f)
    assert compile_fn(fns[-1]) is compile_fn(fns[-1])
    assert compile_fn(first) is not a                            # evicted, compiled again


# ---------------------------------------------------------------- mish: one registration, predicted bit for bit
def mish(x):
    import torch.nn.functional as F

    return F.mish(x)


def _bitwise(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("dt", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", [37, 3100, 40003])
def test_mish_eager_and_compiled_bitwise_or_not_modelled(torch, dt, n):
    """F.mish, eager (ATen's mish_kernel: SLEEF vector loop, glibc scalar tail) and
    compiled (Inductor's exp/log1p/where/tanh/mul decomposition, with and without
    emulated casts): 100% bitwise, or NotModelled naming the path -- never a share
    below 100%.  The inputs cover the overflow of exp (x >= 89), -inf, inf, NaN
    and signed zeros; 40003 elements are split over threads when torch runs several."""
    from numlab.torch import NotModelled, compile_fn, from_torch, inductor_cpu, predict, run_torch

    rng = np.random.default_rng([41, n])
    edges = np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, 89.0, -90.0, 20.0, -20.0, 1e-30], np.float32)
    a = np.concatenate([(rng.standard_normal(n - edges.size) * 6).astype(np.float32), edges])
    x = _t(torch, a, dt)
    tr = from_torch(mish, (x,))
    runs = [("eager", None, lambda: run_torch(tr, (x,), mode="eager")[0])]
    runs += [("compiled", emu, lambda emu=emu: run_torch(tr, (x,), mode="compiled", compiled=compile_fn(mish, emu))[0])
             for emu in (False, True)]
    checked = 0
    for mode, emu, real in runs:
        try:
            p = predict(tr, (x,), mode=mode, preset=None if emu is None else inductor_cpu(emu)).outputs[0]
        except NotModelled as exc:
            assert "mish" in str(exc) or "log1p" in str(exc) or "exp" in str(exc), str(exc)
            continue
        same = _bitwise(p, real())
        assert same.all(), (dt, n, mode, emu, float(same.mean()), a[~same][:6])
        checked += 1
    assert checked == len(runs) or torch.backends.cpu.get_cpu_capability() == "DEFAULT"


def test_mish_eager_scalar_tail_is_libm(torch):
    """The eager model's scalar tail is live: the SLEEF formula on every element
    mispredicts fp32 tail elements that glibc's expf/log1pf/tanhf get right."""
    from numlab.kernels.algorithms import exp, log1p, tanh
    from numlab.torch import from_torch, predict, run_torch

    def _unary32(name, v, algo):
        return np.asarray({"exp": exp, "log1p": log1p, "tanh": tanh}[name](v, fmt="fp32", algo=algo), np.float32)

    a = (np.random.default_rng(43).standard_normal((100, 31)) * 4).astype(np.float32)  # 3100: a 28-element tail
    x = _t(torch, a, "fp32")
    tr = from_torch(mish, (x,))
    te = run_torch(tr, (x,), mode="eager")[0]
    assert _bitwise(predict(tr, (x,), mode="eager").outputs[0], te).all()
    vec_only = a * _unary32("tanh", _unary32("log1p", _unary32("exp", a, "sleef_u10"), "sleef_u10"), "sleef")
    wrong = ~_bitwise(vec_only, te)
    assert wrong.any() and wrong.reshape(-1)[:-28].sum() == 0  # only the tail differs


_MISH_SCRIPT = r'''
import json
import numpy as np, torch, torch.nn.functional as F
from numlab.torch import NotModelled, compile_fn, from_torch, predict, run_torch

def mish(x):
    return F.mish(x)

rng = np.random.default_rng(44)
rows = {}
for n in (37, 3100):
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.from_numpy((rng.standard_normal(n) * 6).astype(np.float32)).to(dt)
        tr = from_torch(mish, (x,))
        for mode in ("eager", "compiled"):
            try:
                p = np.asarray(predict(tr, (x,), mode=mode).outputs[0], np.float32)
            except NotModelled as e:
                rows[f"{n}/{dt}/{mode}"] = str(e)
                continue
            t = run_torch(tr, (x,), mode=mode, compiled=compile_fn(mish) if mode == "compiled" else None)[0]
            rows[f"{n}/{dt}/{mode}"] = float(np.mean((p.view(np.uint32) == t.view(np.uint32))
                                                     | (np.isnan(p) & np.isnan(t))))
print("RESULT " + json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "rows": rows}))
'''


@pytest.mark.parametrize("cap", ["avx2", "default"])
def test_mish_under_other_aten_capabilities(torch, cap, tmp_path):
    """Under ATEN_CPU_CAPABILITY=avx2 (an AVX2-only CPU's kernels: a 16-element fp32
    vector step) and =default (ATen's scalar build), in a subprocess with its own
    Inductor cache: each mish case is 100% bitwise or NotModelled naming the path."""
    import json
    import os
    import subprocess
    import sys

    from numlab.torch.presets import detect_onednn_isa

    if cap == "avx2" and detect_onednn_isa(limit="ALL") not in ("avx2", "avx512_core"):
        pytest.skip("this CPU has no AVX2+FMA: ATen cannot dispatch avx2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "ATEN_CPU_CAPABILITY": cap, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.path.join(root, "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _MISH_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and line, proc.stderr[-2000:]
    out = json.loads(line[-1][len("RESULT "):])
    assert out["capability"] == cap.upper()
    for case, r in out["rows"].items():
        if isinstance(r, str):
            assert cap == "default" and case.endswith("/eager") and "aten.mish" in r and "DEFAULT" in r, (case, r)
        else:
            assert r == 1.0, (cap, case, r)
    assert sum(isinstance(r, float) for r in out["rows"].values()) >= 6


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_16bit_unary_exp_tanh_erf_on_every_input(torch, dt):
    """Eager bf16/fp16 exp/tanh/erf (ATen's vml maps Vectorized<float> over every element,
    partial vectors included): every 16-bit input, plus a 37-element tail, bit for bit."""
    from numlab.torch import from_torch, predict

    bits = np.arange(65536, dtype=np.uint16)
    xs = bits.view(np.float16).astype(np.float32) if dt == "fp16" else (bits.astype(np.uint32) << 16).view(np.float32)
    x = _t(torch, np.concatenate([xs, xs[:37]]), dt)
    for fn in (torch.exp, torch.tanh, torch.erf):
        got = fn(x).float().numpy()
        p = predict(from_torch(fn, (x,)), (x,), mode="eager").outputs[0]
        assert bits_equal(p, got, equal_nan=True), (fn.__name__, int(np.sum(p != got)))


def test_eager_scalar_tails_of_threaded_chunks(torch):
    """Above ATen's GRAIN_SIZE (32768) an elementwise kernel runs in one chunk per thread,
    each with its own scalar tail (``KernelSpec.grain_size``, ``threads``): predicted bit for
    bit with 2 threads on a 1-D tensor whose chunks end inside a vector step; modelling one
    chunk instead (``threads=1``) mispredicts the first chunk's tail, so the rule is live."""
    import torch.nn.functional as F

    from numlab.torch import from_torch, predict, run_torch, torch_cpu_eager

    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rng = np.random.default_rng(65)
        a = (rng.standard_normal(70001) * 4).astype(np.float32)
        for dt in ("fp32", "bf16"):
            x = _t(torch, a, dt)
            for fn in (torch.sigmoid, lambda v: F.gelu(v, approximate="tanh"), lambda v: F.mish(v)):
                tr = from_torch(fn, (x,))
                want = run_torch(tr, (x,), mode="eager")[0]
                assert _bitwise(predict(tr, (x,), mode="eager", preset=torch_cpu_eager(threads=2)).outputs[0],
                                want).all()
            if dt == "fp32":  # (bf16 rounds the libm/SLEEF differences of mish away)
                one = predict(tr, (x,), mode="eager", preset=torch_cpu_eager(threads=1)).outputs[0]
                wrong = ~_bitwise(one, want)
                # the first chunk's tail (34976..35000) is the scalar loop's only with two chunks
                assert (wrong.nonzero()[0] < 35001).any()
    finally:
        torch.set_num_threads(old)
