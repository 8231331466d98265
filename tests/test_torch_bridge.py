"""numlab.torch without torch.compile: import guard, orders vs scalar references,
libm models vs exact references, ATen eager against real torch, tracing and mapping.

Independent references used here (test-only, written from the C/C++ sources
as plain scalar Python loops over np.float32 scalars, nothing shared with the
vectorised numlab.torch.orders code): ATen ``multi_row_sum``/``row_sum``/
``vectorized_inner_sum``, Inductor's lane loop + ``vec_reduce_all``
butterfly, and exact ``fractions.Fraction`` arithmetic for the FMA.
"""

from __future__ import annotations

import subprocess
import sys
import zlib
from fractions import Fraction

import numpy as np
import pytest
from _oracles import bits_equal, same_bits_mask
from hypothesis import given
from hypothesis import strategies as st

from numlab.torch.data import cancelling_rows, normal
from numlab.torch.libm import aten_vec_erf, fma32, onednn_gelu_erf, sleef_expf, sleef_tanhf
from numlab.torch.orders import (
    aten_sum,
    butterfly,
    ceil_log2,
    inductor_splits_reduction,
    inductor_sum,
)

F32 = np.float32


# --------------------------------------------------------------------------------------
# scalar references (plain loops, transliterated from SumKernel.cpp / cpp_prefix.h)

def _ref_multi_row_sum(load, size, nrows):
    """load(i, k) -> np.float32 scalar; returns nrows partial sums (scalar loop)."""
    num_levels = 4
    level_power = max(4, (1 if size <= 2 else (size - 1).bit_length()) // num_levels)
    level_step = 1 << level_power
    level_mask = level_step - 1
    acc = [[F32(0)] * nrows for _ in range(num_levels)]
    i = 0
    while i + level_step <= size:
        for _ in range(level_step):
            for k in range(nrows):
                acc[0][k] = F32(acc[0][k] + load(i, k))
            i += 1
        for j in range(1, num_levels):
            for k in range(nrows):
                acc[j][k] = F32(acc[j][k] + acc[j - 1][k])
                acc[j - 1][k] = F32(0)
            if i & (level_mask << (j * level_power)):
                break
    while i < size:
        for k in range(nrows):
            acc[0][k] = F32(acc[0][k] + load(i, k))
        i += 1
    for j in range(1, num_levels):
        for k in range(nrows):
            acc[0][k] = F32(acc[0][k] + acc[j][k])
    return acc[0]


def _ref_row_sum(load, size):
    """ATen row_sum with ilp 4 over items load(i) (each a list of lanes)."""
    ilp = 4
    size_ilp = size // ilp
    parts = _ref_multi_row_sum(lambda i, k: load(i * ilp + k), size_ilp, ilp)
    for i in range(size_ilp * ilp, size):
        parts[0] = _vadd(parts[0], load(i))
    for k in range(1, ilp):
        parts[0] = _vadd(parts[0], parts[k])
    return parts[0]


def _vadd(a, b):
    if isinstance(a, list):
        return [F32(x + y) for x, y in zip(a, b, strict=True)]
    return F32(a + b)


def ref_aten_sum(row, V=8, widen=False):
    row = [F32(v) for v in row]
    n = len(row)
    vt = 2 * V if widen else V
    if n < vt:
        return _ref_row_sum(lambda i: row[i], n) if n else F32(0)

    def load(i):
        base = i * vt
        if widen:
            return [F32(row[base + j] + row[base + V + j]) for j in range(V)]
        return [row[base + j] for j in range(V)]

    # the multi_row_sum accumulators hold vectors: add lane-wise
    nv = n // vt
    ilp = 4
    size_ilp = nv // ilp

    def vload(i, k):
        return load(i * ilp + k)

    # vector version of _ref_multi_row_sum
    num_levels = 4
    level_power = max(4, (1 if size_ilp <= 2 else (size_ilp - 1).bit_length()) // num_levels)
    level_step = 1 << level_power
    level_mask = level_step - 1
    zero = [F32(0)] * V
    acc = [[zero] * ilp for _ in range(num_levels)]
    i = 0
    while i + level_step <= size_ilp:
        for _ in range(level_step):
            for k in range(ilp):
                acc[0][k] = _vadd(acc[0][k], vload(i, k))
            i += 1
        for j in range(1, num_levels):
            for k in range(ilp):
                acc[j][k] = _vadd(acc[j][k], acc[j - 1][k])
                acc[j - 1][k] = zero
            if i & (level_mask << (j * level_power)):
                break
    while i < size_ilp:
        for k in range(ilp):
            acc[0][k] = _vadd(acc[0][k], vload(i, k))
        i += 1
    for j in range(1, num_levels):
        for k in range(ilp):
            acc[0][k] = _vadd(acc[0][k], acc[j][k])
    parts = acc[0]
    for i in range(size_ilp * ilp, nv):
        parts[0] = _vadd(parts[0], load(i))
    for k in range(1, ilp):
        parts[0] = _vadd(parts[0], parts[k])
    fin = F32(0)
    for k in range(nv * vt, n):
        fin = F32(fin + row[k])
    for k in range(V):
        fin = F32(fin + parts[0][k])
    return fin


def ref_inductor_sum(row, lanes=16, n_vec=1):
    row = [F32(v) for v in row]
    n = len(row)
    if n < 8:
        s = row[0] if n else F32(0)
        for k in range(1, n):
            s = F32(s + row[k])
        return s
    W = lanes * n_vec
    acc = [F32(0)] * W
    for i, v in enumerate(row):
        acc[i % W] = F32(acc[i % W] + v)
    v = acc[:lanes]
    for j in range(1, n_vec):
        v = [F32(a + b) for a, b in zip(v, acc[j * lanes:(j + 1) * lanes], strict=True)]
    h = lanes // 2
    while h:
        v = [F32(v[i] + v[i ^ h]) for i in range(lanes)]
        h //= 2
    return F32(F32(0) + v[0])


# --------------------------------------------------------------------------------------
def test_import_numlab_torch_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numlab, numlab.torch\n"
        "from numlab.torch import orders, data\n"
        "import numpy as np\n"
        "x = np.ones((2, 20), np.float32)\n"
        "assert orders.aten_sum(x).tolist() == [20.0, 20.0]\n"
        "from numlab.torch.bridge import from_torch\n"
        "try:\n"
        "    from_torch(lambda x: x, ())\n"
        "except ImportError as e:\n"
        "    assert 'torch==2.13.0' in str(e)\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_import_numlab_torch_does_not_import_torch(torch):
    """With torch installed, importing numlab, numlab.torch and its numpy-only modules
    (and touching explain, which is imported eagerly) must not load torch."""
    code = (
        "import sys\n"
        "import numlab, numlab.torch\n"
        "from numlab.torch import orders, data, libm, explain, Explanation\n"
        "import numlab.torch.presets\n"
        "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not loaded, loaded\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_import_torch_inside_package_is_the_real_torch(torch):
    from numlab.torch import bridge, predictor

    assert bridge.import_torch() is sys.modules["torch"]
    assert hasattr(bridge.import_torch(), "compile")
    assert predictor.import_torch().__version__ == torch.__version__


# --------------------------------------------------------------------------------------
@given(st.integers(1, 300), st.integers(0, 2**31 - 1), st.sampled_from([(8, False), (8, True), (16, False), (4, True)]))
def test_aten_sum_equals_scalar_reference(n, seed, vw):
    V, widen = vw
    rng = np.random.default_rng(seed)
    x = cancelling_rows(rng, (2, n), "bf16" if widen else "fp32")
    got = aten_sum(x, vec=V, widen=widen)
    for r in range(2):
        want = ref_aten_sum(x[r], V, widen)
        assert got[r] == want or (np.isnan(got[r]) and np.isnan(want)), (n, V, widen, r)


def test_aten_sum_long_rows_use_cascade_levels():
    # level_power grows past 4 when ceil_log2(size) >= 20; check a long row against the reference
    rng = np.random.default_rng(5)
    x = cancelling_rows(rng, (1, 40000), "fp32")
    assert aten_sum(x)[0] == ref_aten_sum(x[0], 8, False)
    assert ceil_log2(1) == 1 and ceil_log2(2) == 1 and ceil_log2(3) == 2 and ceil_log2(1024) == 10


@given(st.integers(1, 200), st.integers(0, 2**31 - 1), st.sampled_from([(16, 1), (16, 2), (8, 1)]))
def test_inductor_sum_equals_scalar_reference(n, seed, ln):
    lanes, n_vec = ln
    rng = np.random.default_rng(seed)
    x = cancelling_rows(rng, (2, n), "fp32")
    got = inductor_sum(x, lanes=lanes, n_vec=n_vec, threads=1)
    for r in range(2):
        assert got[r] == ref_inductor_sum(x[r], lanes, n_vec), (n, lanes, n_vec)


@given(st.integers(8, 300), st.integers(0, 2**31 - 1))
def test_inductor_sum_is_numlab_lanes_tree_masked(n, seed):
    """Unsplit Inductor order == numlab.kernels Lanes(W, "tree", "masked") (+0.0)."""
    from numlab.kernels.orders import Lanes
    from numlab.kernels.reduction import reduce

    rng = np.random.default_rng(seed)
    x = cancelling_rows(rng, (3, n), "fp32")
    got = inductor_sum(x, lanes=16, threads=1)
    want = np.asarray(reduce(x, "sum", order=Lanes(16, "tree", "masked"), acc="fp32"), np.float32) + F32(0)
    assert bits_equal(got, want)


def test_inductor_split_rule_and_split_sum():
    assert not inductor_splits_reduction(1, 1000, 16, 2)  # 1000 // 2 < 512
    assert inductor_splits_reduction(1, 1100, 16, 2)
    assert inductor_splits_reduction(2, 20000, 16, 2)  # 2 * 300 < 1250
    assert not inductor_splits_reduction(8, 5000, 16, 2)
    assert not inductor_splits_reduction(1, 5000, 16, 1)
    # split by hand: thread k sums its static block of vectors, tail into its own accumulator
    rng = np.random.default_rng(3)
    x = cancelling_rows(rng, (1, 3000), "fp32")
    iters = -(-3000 // 16)
    q, r = divmod(iters, 2)
    cut = (q + (1 if r else 0)) * 16
    a0 = np.zeros(16, F32)
    a1 = np.zeros(16, F32)
    for i in range(0, cut):
        a0[i % 16] = F32(a0[i % 16] + x[0, i])
    for i in range(cut, 3000):
        a1[(i - cut) % 16] = F32(a1[(i - cut) % 16] + x[0, i])
    acc = (np.zeros(16, F32) + a0) + a1
    assert inductor_sum(x, lanes=16, threads=2)[0] == F32(0) + butterfly(acc)


# --------------------------------------------------------------------------------------
_F32S = st.floats(allow_nan=False, allow_infinity=False, width=32,
                  min_value=float(F32(-1e30)), max_value=float(F32(1e30)))


@given(_F32S, _F32S, _F32S)
def test_fma32_is_exactly_rounded(a, b, c):
    from _oracles import round_exact

    got = fma32(F32(a), F32(b), F32(c))
    exact = Fraction(float(F32(a))) * Fraction(float(F32(b))) + Fraction(float(F32(c)))
    from numlab.formats import FP32

    want = round_exact(exact, FP32, "rne")
    assert float(got) == float(want), (a, b, c)


def test_sleef_expf_within_one_ulp_and_special_values():
    from numlab.formats import ulp

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-103, 88, 200000), rng.standard_normal(20000)]).astype(F32)
    got = sleef_expf(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    err = np.abs(got - ref) / np.asarray(ulp(np.asarray(np.float32(ref), np.float64), "fp32"), np.float64)
    assert np.max(err) <= 1.0  # SLEEF's u10 promise (1.0 ulp)
    assert 0.85 < np.mean(got == np.float32(ref)) < 1.0  # ~91% correctly rounded, not all
    sp = sleef_expf(np.array([-105, 101, 0, -np.inf, np.inf, np.nan], F32))
    assert sp[0] == 0 and sp[1] == np.inf and sp[2] == 1 and sp[3] == 0 and sp[4] == np.inf and np.isnan(sp[5])


def test_aten_vec_erf_is_abramowitz_stegun_accurate():
    from numlab.ops import erf_ref

    x = np.linspace(-6, 6, 100001).astype(F32)
    err = np.abs(aten_vec_erf(x).astype(np.float64) - erf_ref(x.astype(np.float64)))
    # A&S 7.1.26 bound 1.5e-7 plus the fp32 evaluation: 1 - r*t*exp(-x^2) loses up to
    # ~5 ulp(1) = 3e-7 to the roundings of t, the Horner FMAs and the product
    assert np.max(err) < 1.5e-7 + 5 * 2.0**-23
    assert np.max(err) > 1e-8  # it is an approximation, not correctly rounded
    assert np.all(aten_vec_erf(-x) == -aten_vec_erf(x))


# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["fp32", "bf16", "fp16"])
def test_aten_sum_matches_torch_eager_all_lengths(torch, dt):
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    rng = np.random.default_rng(11)
    for n in list(range(1, 70)) + [100, 255, 256, 257, 1000, 4097]:
        x = cancelling_rows(rng, (6, n), dt)
        got = torch.from_numpy(x).to(tdt).sum(-1).float().numpy()
        pred = aten_sum(x, vec=8, widen=dt != "fp32")
        if dt != "fp32":
            from numlab.rounding import round_to

            pred = np.asarray(round_to(pred, dt), F32)
        assert bits_equal(got, pred), (dt, n)


def test_measured_sum_lanes_and_wrong_lanes_fail(torch):
    from numlab.torch.presets import detect_inductor_lanes, measure_aten_sum_lanes

    assert measure_aten_sum_lanes() == 8
    assert detect_inductor_lanes() in (8, 16)
    rng = np.random.default_rng(0)
    x = cancelling_rows(rng, (8, 100), "fp32")
    got = torch.from_numpy(x).sum(-1).numpy()
    assert not bits_equal(aten_sum(x, vec=16), got)  # the capability string's width is wrong


SCALAR_CASES = [
    ("mul", lambda x: x * 0.1), ("add", lambda x: x + 0.1), ("sub", lambda x: x - 0.3),
    ("rsub", lambda x: 0.7 - x), ("div", lambda x: x / 3.3), ("rdiv", lambda x: 2.3 / x),
    ("where", lambda x: x.where(x > 0, 0.1)),
]


@pytest.mark.parametrize("name,fn", SCALAR_CASES)
@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_eager_scalar_rules_per_op(torch, name, fn, dt):
    """numlab's eager prediction matches ATen bit for bit, and flipping the scalar
    rule of that op (storage <-> opmath) would not."""
    from dataclasses import replace

    from numlab.torch import from_torch, predict
    from numlab.torch.presets import torch_cpu_eager

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    rng = np.random.default_rng(1)
    x = torch.from_numpy(normal(rng, (4, 500), dt)).to(tdt)
    tr = from_torch(fn, (x,))
    want = fn(x).float().numpy()
    pe = torch_cpu_eager()
    got = predict(tr, (x,), mode="eager", preset=pe).outputs[0]
    assert bits_equal(got, want)
    rule = {"rdiv": "mul"}.get(name, name)
    if rule != "where":  # where's scalar is a scalar_tensor of the output dtype either way
        flipped = tuple((k, ("opmath" if v == "storage" else "storage") if k == rule else v)
                        for k, v in pe.scalar_rules)
        other = predict(tr, (x,), mode="eager", preset=replace(pe, scalar_rules=flipped)).outputs[0]
        assert not bits_equal(other, want), name


def test_eager_comparison_uses_rounded_scalar(torch):
    from numlab.torch import from_torch, predict

    x = torch.tensor([0.2998, 0.3, 0.30005, 0.3003], dtype=torch.float16)

    def f(x):
        return torch.where(x > 0.3, x, x * 0)

    tr = from_torch(f, (x,))
    assert bits_equal(predict(tr, (x,), mode="eager").outputs[0], f(x).float().numpy())
    # fp16(0.3) = 0.30005: x > 0.3 is False for x == fp16(0.3) in eager
    assert f(x).float().numpy()[2] == 0


def test_eager_add_alpha_fma_and_scalar_tail(torch):
    from numlab.torch import from_torch, predict

    rng = np.random.default_rng(2)
    for dt, tdt in (("fp32", torch.float32), ("fp16", torch.float16)):
        x = torch.from_numpy(normal(rng, (1, 1000), dt)).to(tdt)
        y = torch.from_numpy(normal(rng, (1, 1000), dt)).to(tdt)

        def f(x, y):
            return torch.add(x, y, alpha=0.3)

        tr = from_torch(f, (x, y))
        assert bits_equal(predict(tr, (x, y), mode="eager").outputs[0], f(x, y).float().numpy()), dt


@pytest.mark.parametrize("dt", ["fp32", "bf16"])
def test_eager_mean_softmax_layernorm_rmsnorm(torch, dt):
    import torch.nn.functional as F

    from numlab.torch import from_torch, predict

    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dt]
    rng = np.random.default_rng(4)
    for n in (37, 64, 300):
        x = torch.from_numpy(normal(rng, (6, n), dt, 3.0)).to(tdt)
        w = torch.from_numpy(normal(rng, (n,), dt)).to(tdt)
        b = torch.from_numpy(normal(rng, (n,), dt)).to(tdt)
        for fn, args in ((lambda x: x.mean(-1), (x,)), (lambda x: F.softmax(x, -1), (x,)),
                         (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), (x, w, b)),
                         (lambda x, w: F.rms_norm(x, (x.shape[-1],), w), (x, w))):
            tr = from_torch(fn, args)
            got = predict(tr, args, mode="eager").outputs[0]
            assert bits_equal(got, fn(*args).float().numpy()), (dt, n, tr.ops())


# --------------------------------------------------------------------------------------
def test_from_torch_lists_every_unsupported_op(torch):
    from numlab.torch import from_torch

    def f(x):
        return torch.sin(x) + torch.cumsum(x, 0) + torch.exp(x)

    with pytest.raises(ValueError) as e:
        from_torch(f, (torch.ones(4),))
    msg = str(e.value)
    # the whole missing list, exactly (exp and add are predictable), then the valid ops
    assert "uses ATen operators numlab cannot predict: ['cumsum.default', 'sin.default']; predictable: [" in msg
    assert "'exp.default'" in msg.split("; predictable: ")[1]


def test_from_torch_bad_inputs(torch):
    from numlab.torch import from_torch

    # each message names the argument, the value and the valid choices
    with pytest.raises(TypeError) as e:
        from_torch(lambda x: x, (np.ones(3),))
    assert str(e.value) == ("example_inputs[0] is a ndarray, not a torch.Tensor; "
                            "valid: torch.Tensor (e.g. torch.from_numpy(a))")
    with pytest.raises(ValueError) as e:
        from_torch(lambda x: x, (torch.ones(3), torch.ones(3, dtype=torch.float64)))
    assert str(e.value) == ("example_inputs[1] has dtype torch.float64; "
                            "valid: torch.float32, torch.float16, torch.bfloat16")
    with pytest.raises(TypeError) as e:
        from_torch(3, (torch.ones(3),))
    assert str(e.value) == "fn_or_module=3 is not callable; pass a function of tensors or a torch.nn.Module"
    with pytest.raises(TypeError) as e:
        from_torch(lambda x: x, ())
    assert str(e.value) == ("example_inputs=() (tuple) is not valid; "
                            "pass a torch.Tensor or a non-empty tuple of torch.Tensor")


def test_to_graph_maps_to_catalogue_and_evaluates(torch):
    import torch.nn.functional as F

    from numlab.torch import from_torch

    def block(x, w, b):
        h = F.layer_norm(x, (8,), w, b)
        return F.softmax(h * 0.5 - 1.0, -1).sum(-1) + torch.tanh(h).mean(-1)

    rng = np.random.default_rng(21)
    x, w, b = (torch.from_numpy(normal(rng, s, "fp32")) for s in ((3, 8), (8,), (8,)))
    tr = from_torch(block, (x, w, b))
    g = tr.to_graph()
    ops = [n.op for n in g.nodes]
    assert {"layer_norm", "softmax", "mul_scalar", "sub_scalar", "sum", "tanh", "mean", "add"} <= set(ops)
    ins = {tr.input_names[0]: x.double().numpy(), tr.input_names[1]: w.double().numpy(),
           tr.input_names[2]: b.double().numpy()}
    ref = g.evaluate(ins)[g.outputs[0]]
    want = block(x.double(), w.double(), b.double()).numpy()
    assert np.allclose(ref, want, rtol=1e-12, atol=1e-12)


def test_inductor_nodes_refuse_unsupported_ops_every_time(torch):
    """The Inductor-level graph is cached only when complete: asking twice raises twice."""
    from numlab.torch import from_torch

    def f(x):
        return torch.sin(x) * 2.0

    tr = from_torch(f, (torch.ones(4),), check=False)
    for _ in range(2):
        with pytest.raises(ValueError) as e:
            tr.inductor_nodes()
        assert "uses ATen ops numlab cannot predict: ['sin.default']; predictable: [" in str(e.value)


def test_to_graph_refuses_partial_graphs(torch):
    from numlab.torch import from_torch

    def f(x):
        return torch.where(x > 0, x, x * 2) + x.pow(3)

    x = torch.from_numpy(normal(np.random.default_rng(22), (4,), "fp32"))
    tr = from_torch(f, (x,), check=False)
    with pytest.raises(ValueError) as e:
        tr.to_graph()
    # the comparison and where map (x > 0 against a 0-d constant); pow 3 has no
    # catalogue op: no graph is returned, the message lists every unmapped op
    assert str(e.value) == ("cannot map to numlab's operator catalogue (no partial graph is built); "
                            "missing: ['aten.pow.Tensor_Scalar with exponent 3 (only 2 maps to mul)']")
    g = from_torch(lambda v: torch.where(v > 0, v, v * 2) + v.pow(2), (x,)).to_graph()
    assert [n.op for n in g.nodes] == ["constant", "gt", "mul_scalar", "where", "mul", "add"]


def test_fp64_prediction_matches_torch_double(torch):
    from numlab.torch import from_torch, predict

    def f(x, y):
        return torch.sigmoid(x * 0.3 + y).sum(-1) / 7.0

    rng = np.random.default_rng(23)
    x, y = (torch.from_numpy(normal(rng, (4, 50), "fp32")) for _ in range(2))
    tr = from_torch(f, (x, y))
    got = predict(tr, (x, y), mode="reference").outputs[0]
    assert np.allclose(got, f(x.double(), y.double()).numpy(), rtol=1e-13, atol=0)


def test_predict_validates_arguments(torch):
    from numlab.torch import from_torch, predict
    from numlab.torch.presets import inductor_cpu

    tr = from_torch(lambda x: x * 2.0, (torch.ones(3),))
    with pytest.raises(ValueError, match="mode"):
        predict(tr, mode="fused")
    with pytest.raises(TypeError, match="TorchCpuEager"):
        predict(tr, mode="eager", preset=inductor_cpu())
    with pytest.raises(ValueError, match="shape"):
        predict(tr, (torch.ones(4),))


@pytest.mark.parametrize("dt", ["fp32", "bf16", "fp16"])
def test_eager_gelu_onednn_and_aten_kernels(torch, dt):
    """F.gelu runs oneDNN's minimax gelu_erf by default; with mkldnn disabled ATen's own
    kernel (A&S erf, libm in the scalar tail) -- numlab models both for fp32
    (preset.onednn_gelu) and the default one for every dtype."""
    import torch.nn.functional as F

    from numlab.torch import from_torch, predict, torch_cpu_eager

    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    rng = np.random.default_rng(9)
    x = torch.from_numpy(normal(rng, (8, 100), dt, 3.0)).to(tdt)

    def g(x):
        return F.gelu(x)

    pe = torch_cpu_eager()
    if pe.not_modelled("gelu", dt):  # e.g. a CPU whose oneDNN runs below avx2
        pytest.skip(f"not modelled on this machine: {pe.not_modelled('gelu', dt)}")
    # the preset names the kernel this dtype runs on this CPU (detected, not assumed): oneDNN's
    # where ATen hands the dtype to oneDNN (fp16 needs avx512_core_fp16), else ATen's own
    from numlab.torch.presets import detect_onednn_dtypes, detect_onednn_isa

    want = ({"avx512_core": "onednn", "avx2": "onednn_avx2"}[detect_onednn_isa()]
            if dt in detect_onednn_dtypes() else "aten_vec")
    assert pe.gelu_algo_for(dt) == want
    tr = from_torch(g, (x,))
    on = predict(tr, (x,), mode="eager").outputs[0]
    assert bits_equal(on, g(x).float().numpy()), want

    def gt(x):
        return F.gelu(x, approximate="tanh")

    trt = from_torch(gt, (x,))  # ATen's kernel: FMA in x + kappa x^3, SLEEF tanhf, libm tail
    assert bits_equal(predict(trt, (x,), mode="eager").outputs[0], gt(x).float().numpy())
    with torch.backends.mkldnn.flags(enabled=False):
        want_off = g(x).float().numpy()
    off = predict(tr, (x,), mode="eager", preset=torch_cpu_eager(onednn_gelu=False)).outputs[0]
    assert bits_equal(off, want_off)  # ATen's kernel, its scalar tail (800 mod 64) included
    if want != "aten_vec":
        assert not bits_equal(on, off)  # the two kernels differ


def test_eager_preset_validates_knobs():
    from numlab.torch.presets import TorchCpuEager

    cases = [
        (dict(capability="SVE256"), "capability='SVE256' is not modelled; choose one of ('AVX512', 'AVX2', 'DEFAULT')"),
        (dict(onednn_isa="sse41"), "onednn_isa='sse41' is not valid; choose one of ('avx512_core', 'avx2', 'other')"),
        (dict(sum_lanes=7), "sum_lanes=7 is not valid; choose a power of two >= 1 (measured: 8)"),
        (dict(softmax_lanes=0), "softmax_lanes=0 is not valid; choose a power of two >= 1 (measured: 16)"),
        (dict(threads=-1), "threads=-1 is not valid; choose an int >= 0 (0 = torch's)"),
        (dict(grain_size=0), "grain_size=0 is not valid; choose an int >= 1"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError) as e:
            TorchCpuEager(**kw)
        assert str(e.value) == msg
    with pytest.raises(ValueError, match=r"scalar_rules=.*give each of \['add', 'alpha'.* one of \('storage', 'opmath'\)"):
        TorchCpuEager(scalar_rules=(("add", "fp64"),))


def test_switches_and_preset_specs():
    from numlab.kernels.orders import Lanes
    from numlab.kernels.orders.cpu import AtenCascade, InductorLanes
    from numlab.kernels.reduction import reduce
    from numlab.torch.predictor import COMPILED, EAGER, Switches
    from numlab.torch.presets import InductorCpu, TorchCpuEager

    with pytest.raises(ValueError, match="promotion"):
        Switches(promotion="fp32")
    assert EAGER == Switches() and COMPILED.order == "inductor" and COMPILED.promotion == "fused"
    ks = InductorCpu(lanes=16).kernel_spec("bf16")
    assert ks.reduce_order == InductorLanes(16, 2, 1) and ks.fma is False and ks.scalar_mul == "muls"
    assert InductorCpu(lanes=16).kernel_spec("fp32", threads=2).reduce_order == InductorLanes(16, 1, 2)
    # one thread, rows of 8 .. 4096: Inductor's lanes are numlab's Lanes(W, tree, masked)
    x = cancelling_rows(np.random.default_rng(5), (16, 1000), "bf16").astype(np.float32)
    assert bits_equal(ks.reduce(x, "sum", storage="fp32"),
                          reduce(x, "sum", order=Lanes(32, "tree", "masked"), acc="fp32"))
    pe = TorchCpuEager()
    assert pe.scalar_rule("add") == "storage" and pe.scalar_rule("mul") == "opmath"
    es = pe.kernel_spec("fp16")
    assert es.promotion == "fp32_internal" and es.reduce_order_low == AtenCascade(8, widen=True)
    assert es.storage_scalars == ("add_alpha", "add_scalar", "rsub_scalar", "sub_scalar")
    assert pe.kernel_spec().reduce_order == AtenCascade(8)
    assert bits_equal(pe.kernel_spec().reduce(x, "sum", storage="fp32"), aten_sum(x))
    assert pe.algorithms() == {"exp": "sleef_u10", "tanh": "sleef", "erf": "aten_vec", "gelu": "onednn",
                               "gelu_tanh": "aten_vec"}
    assert TorchCpuEager(onednn_gelu=False).gelu_algo == "aten_vec"
    with pytest.raises(ValueError, match="vec_exp='sleef'"):
        TorchCpuEager(vec_exp="sleef")
    with pytest.raises(ValueError, match="vec_gelu='nope'"):
        InductorCpu(vec_gelu="nope")


def test_not_modelled_cases_raise(torch):
    from numlab.torch import NotModelled, from_torch, predict

    tr = from_torch(lambda x: x.sum(0), (torch.ones(4, 5),))
    with pytest.raises(NotModelled, match="last"):
        predict(tr, mode="eager")


def test_not_modelled_threaded_aten_sum_raises(torch):
    from numlab.torch import NotModelled, from_torch, predict

    if torch.get_num_threads() < 2:
        pytest.skip(f"ATen splits long sums only with >= 2 threads; torch has {torch.get_num_threads()}")
    tr = from_torch(lambda x: x.sum(-1), (torch.ones(1, 40000),))
    with pytest.raises(NotModelled, match="GRAIN_SIZE"):
        predict(tr, mode="eager")


def test_sleef_tanhf_and_onednn_gelu_accuracy():
    """Independent checks of the libm models: SLEEF tanhf within 1 ulp of fp64 tanh
    (its u10 promise); oneDNN's gelu_erf = 0.5 x (1 + erf~(x/sqrt2)) with |erf~ - erf| < 1e-6."""
    from numlab.formats import ulp
    from numlab.ops import erf_ref

    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(100000) * 3, rng.standard_normal(10000) * 1e-3]).astype(F32)
    ref = np.tanh(x.astype(np.float64))
    err = np.abs(sleef_tanhf(x) - ref) / np.asarray(ulp(np.asarray(np.float32(ref), np.float64), "fp32"), np.float64)
    assert np.max(err) <= 1.0
    assert sleef_tanhf(np.array([9.0, -9.0], F32)).tolist() == [1.0, -1.0]
    assert np.isnan(sleef_tanhf(np.array([np.nan], F32))[0])
    g = onednn_gelu_erf(x).astype(np.float64)
    gref = 0.5 * x * (1 + erf_ref(x.astype(np.float64) / np.sqrt(2)))
    assert np.max(np.abs(g - gref) / np.maximum(np.abs(x), 1e-30)) < 5e-7


def test_softmax_lanes_follow_capability_sum_uses_8(torch):
    """Measured: ATen's softmax kernel sums in the lanes of the build ATen dispatches
    (16 under AVX512, 8 under AVX2), its sum kernel in 8 under both.  Asserted against
    the capability the preset detects; the other lane count mispredicts."""
    import torch.nn.functional as F

    from numlab.torch import from_torch, predict, torch_cpu_eager

    pe = torch_cpu_eager()
    if pe.not_modelled("_softmax"):
        pytest.skip(f"not modelled on this machine: {pe.not_modelled('_softmax')}")
    assert pe.softmax_lanes == {"AVX512": 16, "AVX2": 8}[pe.capability] and pe.sum_lanes == 8
    rng = np.random.default_rng(3)
    x = torch.from_numpy(normal(rng, (32, 100), "fp32", 3.0))

    def sm(x):
        return F.softmax(x, -1)

    tr = from_torch(sm, (x,))
    want = sm(x).numpy()
    assert bits_equal(predict(tr, (x,), mode="eager").outputs[0], want)
    other = 8 if pe.softmax_lanes == 16 else 16
    assert not bits_equal(predict(tr, (x,), mode="eager", preset=torch_cpu_eager(softmax_lanes=other)).outputs[0],
                              want)


def test_preset_algorithm_fields_are_live(torch):
    """The presets' algorithm names reach numlab.kernels: the measured ones reproduce torch,
    a different name changes the predicted bits (a knob that changes no bit is a bug)."""
    from numlab.torch import from_torch, inductor_cpu, predict, torch_cpu_eager

    rng = np.random.default_rng(21)
    x = torch.from_numpy(normal(rng, (4, 256), "fp32", 3.0))
    tr = from_torch(torch.sigmoid, (x,))
    want = torch.sigmoid(x).numpy()
    assert bits_equal(predict(tr, (x,), mode="eager").outputs[0], want)
    other = predict(tr, (x,), mode="eager", preset=torch_cpu_eager(vec_exp="exact")).outputs[0]
    assert not bits_equal(other, want)
    tt = from_torch(torch.tanh, (x,))
    base = predict(tt, (x,), mode="compiled").outputs[0]
    alt = predict(tt, (x,), mode="compiled", preset=inductor_cpu(vec_tanh="exact")).outputs[0]
    assert not bits_equal(base, alt)


# --------------------------------------------------------------------------------------
# softplus, hardswish, log1p (SLEEF log1pf, glibc log1pf, Inductor's scalar-tail rule)
def test_sleef_log1pf_accuracy_and_special_values():
    """SLEEF's 1.0-ulp class against float64 log1p (independent), and the special values."""
    from numlab.kernels.libm import sleef_log1pf

    rng = np.random.default_rng(40)
    x = np.concatenate([rng.uniform(-0.999, 1, 20000), np.exp(rng.uniform(-80, 85, 20000))]).astype(F32)
    got = sleef_log1pf(x).astype(np.float64)
    ref = np.log1p(x.astype(np.float64))
    ulp = np.spacing(np.abs(ref).astype(F32)).astype(np.float64)
    assert np.max(np.abs(got - ref) / ulp) <= 1.0
    sp = sleef_log1pf(np.array([-1, -2, np.inf, 3e38, np.nan, 0.0, -0.0], F32))
    assert sp[0] == -np.inf and np.isnan(sp[1]) and sp[2] == np.inf and sp[3] == np.inf and np.isnan(sp[4])
    assert sp[5] == 0 and not np.signbit(sp[5]) and sp[6] == 0 and np.signbit(sp[6])


def test_glibc_log1pf_matches_the_running_libm():
    """glibc_log1pf against libm.so.6's log1pf called element by element (ctypes)."""
    import ctypes
    import platform

    from numlab.kernels.libm import glibc_log1pf

    lib, ver = platform.libc_ver()
    if lib != "glibc" or tuple(int(v) for v in ver.split(".")[:2]) > (2, 40):
        pytest.skip(f"glibc_log1pf models glibc <= 2.40's fdlibm log1pf; this is {lib} {ver}")
    libm = ctypes.CDLL("libm.so.6")
    libm.log1pf.restype = ctypes.c_float
    libm.log1pf.argtypes = [ctypes.c_float]
    rng = np.random.default_rng(41)
    x = np.concatenate([np.abs(rng.standard_normal(3000) * 8).astype(F32), rng.uniform(-1, 1, 3000).astype(F32),
                        rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(F32),
                        np.array([0, -0.0, -1, 1, np.inf, -np.inf, np.nan, 1e-40, 2**-30, 2**-60, 3e38], F32)])
    ref = np.array([libm.log1pf(float(v)) for v in x], F32)
    got = glibc_log1pf(x)
    same = same_bits_mask(got, ref, nan_equal=True)
    assert same.all(), x[~same][:5]
    # and it is not the correctly rounded log1p (else the knob would change no bit)
    cr = np.log1p(np.abs(x[:3000]).astype(np.float64)).astype(F32)
    assert np.mean(cr != glibc_log1pf(np.abs(x[:3000]))) > 0.01


def test_kernels_log1p_algorithms():
    from numlab.kernels.algorithms import LOG1P_ALGOS, log1p
    from numlab.kernels.libm import glibc_log1pf, sleef_log1pf

    x = np.abs(np.random.default_rng(42).standard_normal(4000) * 8).astype(F32)
    assert set(LOG1P_ALGOS) == {"exact", "sleef_u10", "glibc"}
    assert bits_equal(log1p(x, fmt="fp32", algo="sleef_u10"), sleef_log1pf(x))
    assert bits_equal(log1p(x, fmt="fp32", algo="glibc"), glibc_log1pf(x))
    assert bits_equal(log1p(x, fmt="fp32"), np.log1p(x.astype(np.float64)).astype(F32))
    assert not bits_equal(log1p(x, fmt="fp32", algo="sleef_u10"), log1p(x, fmt="fp32"))
    bf = np.asarray(log1p(x, fmt="bf16"), F32)
    assert bits_equal(bf, (bf.view(np.uint32) & 0xFFFF0000).view(F32))  # bf16 values
    with pytest.raises(ValueError, match="algo='nope'.*exact"):
        log1p(x, fmt="fp32", algo="nope")


@pytest.mark.parametrize("dt", ["fp32", "bf16", "fp16"])
def test_eager_softplus_hardswish_log1p_match_torch(torch, dt):
    """Eager ATen kernels bit for bit: vector loop SLEEF expf/log1pf, scalar tail libm
    (fp32 tail: glibc expf modelled as correctly rounded), hardswish's true division."""
    import torch.nn.functional as F

    from numlab.torch import from_torch, predict, run_torch

    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    rng = np.random.default_rng(43)
    fns = (lambda x: F.softplus(x), lambda x: F.softplus(x, beta=2.0, threshold=5.0),
           lambda x: F.hardswish(x), lambda x: torch.log1p(x.abs()))
    for n in (1024, 1000):  # 1000: a 8-element scalar tail in ATen's loop
        x = torch.from_numpy((rng.standard_normal(n) * 8).astype(F32)).to(tdt)
        for fn in fns:
            tr = from_torch(fn, (x,))
            pe = predict(tr, mode="eager").outputs[0]
            te = run_torch(tr, (x,), mode="eager")[0]
            assert bits_equal(pe, te), (dt, n)
    # hardswish divides by 6: multiplying by fl32(1/6) would differ on many fp32 values
    x = (rng.standard_normal(4096) * 4).astype(F32)
    te = F.hardswish(torch.from_numpy(x)).numpy()
    c = np.clip(x + F32(3), F32(0), F32(6))
    assert bits_equal((x * c) / F32(6), te)
    assert np.mean((x * c) * F32(F32(1) / F32(6)) != te) > 0.1


def test_eager_softplus_scalar_tail_uses_glibc_log1pf(torch):
    """Inputs chosen where SLEEF and glibc log1pf differ, placed in ATen's scalar tail."""
    import torch.nn.functional as F

    from numlab.kernels.libm import glibc_log1pf, sleef_expf, sleef_log1pf
    from numlab.torch import from_torch, predict, run_torch

    rng = np.random.default_rng(44)
    cand = (rng.standard_normal(20000) * 6).astype(F32)
    e = np.exp(cand.astype(np.float64)).astype(F32)
    diff = cand[(sleef_log1pf(sleef_expf(cand)) != glibc_log1pf(e)) & (sleef_expf(cand) == e) & (cand < 20)]
    assert diff.size >= 8
    x = np.concatenate([cand[:32], diff[:8]]).astype(F32)  # 40 = 32 (vector) + 8 (scalar tail)
    tr = from_torch(lambda v: F.softplus(v), (torch.from_numpy(x),))
    te = run_torch(tr, (torch.from_numpy(x),), mode="eager")[0]
    assert bits_equal(predict(tr, mode="eager").outputs[0], te)
    assert not bits_equal(sleef_log1pf(sleef_expf(x))[32:], te[32:])


def test_softplus_log1p_not_modelled_on_default_capability(torch):
    import torch.nn.functional as F

    from numlab.torch import NotModelled, from_torch, predict, torch_cpu_eager

    x = torch.randn(64)
    for fn, name in ((lambda v: F.softplus(v), "softplus"), (lambda v: torch.log1p(v.abs()), "log1p")):
        tr = from_torch(fn, (x,))
        with pytest.raises(NotModelled, match=f"{name}.*DEFAULT"):
            predict(tr, mode="eager", preset=torch_cpu_eager(capability="DEFAULT"))
    tr = from_torch(lambda v: F.hardswish(v), (x,))  # plain IEEE ops: modelled on DEFAULT too
    predict(tr, mode="eager", preset=torch_cpu_eager(capability="DEFAULT"))


def test_inductor_scalar_tail_rule_on_traced_graphs(torch):
    """The rule read from Inductor's cpp.py (mask-op share > 0.12 and tail <= half a
    vector -> scalar tail), applied to the inlined loop-body op counts."""
    import torch.nn.functional as F

    from numlab.torch import from_torch
    from numlab.torch._aten import inductor_scalar_tail

    def tail(fn, x, lanes=16):
        ph, _, nodes, outs = from_torch(fn, (x,)).inductor_nodes()
        return inductor_scalar_tail(nodes, ph, outs, lanes)

    sp = lambda v: F.softplus(v)  # noqa: E731  load, gt, exp, log1p, where, 2 more loads, store: 1/8
    assert tail(sp, torch.randn(1000)) == 8
    assert tail(sp, torch.randn(1007)) == 0  # a 15-element tail is vectorised
    assert tail(sp, torch.randn(1024)) == 0
    assert tail(lambda v: F.softplus(v, beta=2.0, threshold=5.0), torch.randn(1000)) == 0  # 1/11
    assert tail(sp, torch.randn(1000).bfloat16(), lanes=32) == 0  # the to_dtype ops: 1/12
    assert tail(lambda v: F.hardswish(v), torch.randn(1000)) == 0  # no where
    assert tail(lambda v: F.softplus(v).sum(-1), torch.randn(4, 250)) is None  # not one pointwise loop


def test_softplus_hardswish_map_to_catalogue_ops(torch):
    import torch.nn.functional as F

    from numlab.torch import from_torch

    x = torch.randn(4, 8)
    g = from_torch(lambda v: F.softplus(v) + F.hardswish(v), (x,)).to_graph()
    assert {n.op for n in g.nodes} == {"softplus", "hardswish", "add"}
    # softplus's beta and threshold are the catalogue op's attributes (torch's defaults 1, 20)
    (n,) = from_torch(lambda v: F.softplus(v, beta=2.0, threshold=5.0), (x,)).to_graph().nodes
    assert (n.op, n.attrs["beta"], n.attrs["threshold"]) == ("softplus", 2.0, 5.0)
    # a tensor beta has no catalogue equivalent
    with pytest.raises(ValueError, match="softplus"):
        from_torch(lambda v: F.softplus(v, beta=-1.0), (x,)).to_graph()


# --------------------------------------------------------------------------------------
# the lowering: ATen graphs -> catalogue graphs, run by numlab.execute against torch in float64
def _lowered_vs_torch64(torch, fn, args):
    """(numlab's reference of the lowered graph, torch's float64 result) for ``fn``:
    the fp32 trace lowered by ``to_graph`` and run by ``execute(mode="reference")``;
    torch runs the same function on the inputs widened to float64."""
    from numlab.execute import run
    from numlab.torch import from_torch

    tr = from_torch(fn, args)
    g = tr.to_graph()
    ins = {p: a.double().numpy() for p, a in zip(tr.input_names, args, strict=True)}
    got = run(g, ins, mode="reference", fmt="fp32").outputs[g.outputs[0]]
    want = fn(*(a.double() for a in args))
    want = want.double().numpy() if want.dtype != torch.bool else want.numpy().astype(np.float64)
    return g, np.asarray(got, np.float64), want


def _same64(a, b):
    return bool(np.all((a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))))


_EXACT_LOWERINGS = {
    # clamp: a number or a tensor bound, min, max or both; clamp_min/clamp_max; hardtanh
    "clamp_min_number": (lambda x, y: x.clamp(min=-0.5), {"maximum"}),
    "clamp_max_number": (lambda x, y: x.clamp(max=0.7), {"minimum"}),
    "clamp_both_numbers": (lambda x, y: x.clamp(-0.5, 0.7), {"maximum", "minimum"}),
    "clamp_tensor_min": (lambda x, y: x.clamp(min=y), {"maximum"}),
    "clamp_tensors": (lambda x, y: x.clamp(y - 1.0, y + 1.0), {"maximum", "minimum"}),
    "clamp_min_max_tensor": (lambda x, y: x.clamp_min(y) - x.clamp_max(y), {"maximum", "minimum"}),
    "hardtanh": (lambda x, y: __import__("torch").nn.functional.hardtanh(x, -2.0, 0.5), {"maximum", "minimum"}),
    # masked_fill with a number, from a comparison with a Python scalar
    "masked_fill": (lambda x, y: x.masked_fill(y > 0.5, -1.25), {"gt", "where"}),
    # logical and bitwise operators of masks, logical operators of floats (their truth)
    "logic_masks": (lambda x, y: ((x > 0) & (y < 0.5)) | ~(x <= -0.25) ^ (y != 0.0), {"ne", "eq"}),
    "logical_floats": (lambda x, y: __import__("torch").logical_and(x, y).float()
                       + __import__("torch").logical_not(x).float() + __import__("torch").logical_xor(x, y).float(),
                       {"ne", "eq"}),
    # comparisons with Python scalars, where with a scalar branch
    "compare_scalars": (lambda x, y: (x >= 0.3).float() + (x < -0.25).float() + (x == 0.5).float()
                        + (x != 0.0).float() + __import__("torch").where(y > 0.3, x, 0.5), {"ge", "lt", "eq", "ne"}),
    # add/sub with alpha (powers of two: the float64 product is exact), rsub
    "add_sub_alpha": (lambda x, y: __import__("torch").add(x, y, alpha=0.5) - __import__("torch").sub(x, y, alpha=-2)
                      + __import__("torch").add(x, 0.75, alpha=2), {"mul_scalar", "add", "sub", "add_scalar"}),
    "rsub": (lambda x, y: __import__("torch").rsub(x, 1.5) + __import__("torch").rsub(x, 1.5, alpha=0.5),
             {"rsub_scalar", "mul_scalar"}),
}


@pytest.mark.parametrize("case", sorted(_EXACT_LOWERINGS))
def test_lowering_of_exact_ops_equals_torch_float64(torch, case):
    """clamp, masked_fill, logical ops, comparisons with Python scalars and add/sub
    with alpha lower to catalogue ops whose reference equals torch's float64 bit
    for bit (they are exact: no rounding, or one rounding of an exact product)."""
    fn, want_ops = _EXACT_LOWERINGS[case]
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    a = normal(rng, (6, 40), "fp32")
    b = normal(rng, (6, 40), "fp32")
    a[0, :4] = (0.5, 0.0, -0.0, 0.3)
    a[1, 0] = b[1, 1] = np.nan
    b[2, :3] = (0.0, 0.5, -1.0)
    x, y = torch.from_numpy(a), torch.from_numpy(b)
    g, got, want = _lowered_vs_torch64(torch, fn, (x, y))
    assert want_ops <= {n.op for n in g.nodes}, (case, [n.op for n in g.nodes])
    assert _same64(got, want), (case, got[got != want][:5], want[got != want][:5])


@pytest.mark.parametrize("case", ["log1p", "mish", "sub_alpha_3", "var_mean", "layer_norm_plain"])
def test_lowering_of_rounded_ops_within_a_few_ulps_of_torch_float64(torch, case):
    """log1p, mish, sub with alpha 3 (torch's double kernel fuses the multiply-add), var_mean
    and layer_norm without weight and bias: the lowered graph's reference is within a few
    float64 ulps of torch's float64 result (of its magnitude for the norms)."""
    import torch.nn.functional as F

    fns = {"log1p": (lambda x, y: torch.log1p(x.abs() - 0.75), {"log1p"}, 4),
           "mish": (lambda x, y: F.mish(x * 8.0), {"mish"}, 4),
           "sub_alpha_3": (lambda x, y: torch.sub(x, y, alpha=3), {"mul_scalar", "sub"}, 1),
           "var_mean": (lambda x, y: torch.var_mean(x, -1)[0] + torch.var_mean(y, -1, keepdim=True)[1].squeeze(-1),
                        {"var", "mean"}, 64),
           "layer_norm_plain": (lambda x, y: F.layer_norm(x, (40,)) + F.layer_norm(y.reshape(3, 2, 40), (2, 40),
                                                                                      bias=None).reshape(6, 40)
                                + F.layer_norm(x, (40,), None, y.mean(0)),
                                {"layer_norm"}, 64)}
    fn, want_ops, ulps = fns[case]
    rng = np.random.default_rng(31)
    x, y = (torch.from_numpy(normal(rng, (6, 40), "fp32")) for _ in range(2))
    g, got, want = _lowered_vs_torch64(torch, fn, (x, y))
    assert want_ops <= {n.op for n in g.nodes}, (case, [n.op for n in g.nodes])
    assert case != "layer_norm_plain" or [n.op for n in g.nodes].count("layer_norm") == 3
    scale = np.abs(want) if case in ("log1p", "mish", "sub_alpha_3") else np.max(np.abs(want))
    assert np.all(np.abs(got - want) <= ulps * np.spacing(scale) + 1e-300), (case, np.max(np.abs(got - want)))
    assert not bits_equal(got, np.zeros_like(got))


def test_lowered_mish_and_log1p_are_one_catalogue_node_each(torch):
    """aten.mish.default and aten.log1p.default lower to the registry's one operator each;
    the to_graph error names an ATen operator the lowering does not take."""
    import torch.nn.functional as F

    from numlab.torch import from_torch

    x = torch.randn(3, 5)
    g = from_torch(lambda v: F.mish(v) + torch.log1p(v.abs()), (x,)).to_graph()
    assert [n.op for n in g.nodes] == ["mish", "abs", "log1p", "add"]
    with pytest.raises(ValueError, match=r"missing: \['aten.sin.default'\]"):
        from_torch(lambda v: torch.sin(v), (x,), check=False).to_graph()
    # overloads the registry does not list are refused, never lowered by their base name
    with pytest.raises(ValueError, match=r"missing: \['aten.exp_.default', 'aten.sum.default'\]$"):
        from_torch(lambda v: v.sum() + v.exp_().sum(-1), (x,), check=False).to_graph()


def test_fp64_prediction_is_the_catalogue_reference(torch):
    """predict(mode="reference") runs the lowered graph in mode="reference": gelu at -10 is the
    catalogue's -7.6e-23 (not a separate fp64 formula), and a module constant, a
    comparison and a bool output come through."""
    import torch.nn.functional as F

    from numlab import ops
    from numlab.torch import from_torch, predict

    x = torch.tensor([-10.0, -3.0, -0.0, 0.5, 2.0, 6.0])
    got = predict(from_torch(lambda v: F.gelu(v), (x,)), mode="reference").outputs[0]
    want = ops.gelu(x.double().numpy())
    assert got.dtype == np.float64 and bits_equal(got, want) and got[0] == want[0] < 0
    assert abs(got[0] - (-7.619853024160527e-23)) < 1e-36
    p = predict(from_torch(lambda v: (v > 0.3, v.clamp(min=0.25) * 3.0), (x,)), mode="reference")
    assert p.dtypes == ["bool", "fp32"] and p.outputs[0].dtype == bool
    assert p.outputs[0].tolist() == [False, False, False, True, True, True]
    assert bits_equal(p.outputs[1], np.maximum(x.double().numpy(), 0.25) * 3.0)


def test_fp64_prediction_does_not_round_at_the_functions_own_casts(torch):
    """The exact reference has no rounding, not even the user's ``.half()``: the fp64
    prediction of ``exp(x).half().float() * 3`` is float64 ``exp(x) * 3``, while the lowered
    graph itself (``to_graph()``, what the engine runs) keeps the cast to fp16."""
    from numlab.torch import from_torch, predict

    x = torch.linspace(-3, 3, 101)
    tr = from_torch(lambda v: torch.exp(v).half().float() * 3.0, (x,))
    got = predict(tr, mode="reference").outputs[0]
    want = np.exp(x.double().numpy()) * 3.0
    assert np.max(np.abs(got - want) / want) < 4e-16  # fp64 exp: not fp16's 2**-11
    assert "cast" in [n.op for n in tr.to_graph().nodes]
    assert "cast" not in [n.op for n in tr.to_graph(casts=False).nodes]
