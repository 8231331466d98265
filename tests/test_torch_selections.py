"""Comparisons, ``where``, ``maximum``/``minimum`` and the clamp family of PyTorch
functions with Python-number operands: the bridge maps them to numlab's graph
(a number becomes a 0-d ``constant`` node) and the predictor reproduces torch
eager and ``torch.compile`` bit for bit, in fp16, bf16 and fp32.

The reference is real torch (eager and Inductor) on thousands of values that
include the threshold as the tensor dtype holds it (``dtype(0.3)``) and its
neighbours, NaN, infinities and signed zeros; the float64 side is exact
(``fractions.Fraction``-free: the values compared are exact binary numbers).
Each compiled function is compiled once per dtype (``compile_fn`` caches it).
"""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import bits_equal, same_bits

from numlab.torch.data import normal

pytestmark = pytest.mark.torch

DTS = ("fp16", "bf16", "fp32")
# a double just above the fp16 midpoint 1 + 2**-11 (and the bf16 one 1 + 2**-8): rounded
# once it goes up, through fp32 (as torch converts a Python number) it ties to even, 1.0
D16 = 1 + 2**-11 + 2**-40
D_BF = 1 + 2**-8 + 2**-40


def _tdt(torch, dt):
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]


def _threshold_data(torch, dt, thr=0.3, n=4000, seed=5):
    """``n`` values of ``dt``: normal ones, then ``dtype(thr)`` with its 64 neighbours
    on each side (walked by torch.nextafter, independent of numlab), ``thr`` itself
    (rounded by the tensor), NaN, +-inf, +-0 and the double-rounding witnesses."""
    tdt = _tdt(torch, dt)
    rng = np.random.default_rng(seed)
    x = normal(rng, (n,), dt).astype(np.float32)
    t = torch.tensor([thr], dtype=tdt)
    up, dn, near = t.clone(), t.clone(), [t]
    for _ in range(64):
        up = torch.nextafter(up, torch.tensor([10.0], dtype=tdt))
        dn = torch.nextafter(dn, torch.tensor([-10.0], dtype=tdt))
        near += [up, dn]
    near = torch.cat(near).float().numpy()
    special = np.array([thr, np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1 + 2**-10, 1 + 2**-7,
                        0.7, -1.0, 1.0, -0.1], np.float32)
    x[:near.size] = near
    x[near.size:near.size + special.size] = special
    rng.shuffle(x)
    return torch.from_numpy(x).to(tdt), t.float().item()


def _graph_eager(tr, args, dt):
    """numlab's eager executor on the bridge's graph, storage format ``dt``."""
    from numlab.execute import run

    g = tr.to_graph()
    r = run(g, {k: a.float().numpy() for k, a in zip(tr.input_names, args, strict=True)}, mode="eager", fmt=dt)
    return g, [np.asarray(r.outputs[o], np.float32) for o in g.outputs]


def _check_all(torch, fn, args, dt, *, compiled=True):
    """predict eager == torch eager, numlab graph eager == torch eager, and
    (``compiled``) predict compiled == torch.compile; returns the torch eager outputs."""
    from numlab.torch import compile_fn, from_torch, predict, run_torch

    tr = from_torch(fn, args)
    te = run_torch(tr, args, mode="eager")
    pe = predict(tr, args, mode="eager").outputs
    for i, (p, t) in enumerate(zip(pe, te, strict=True)):
        assert same_bits(np.asarray(p, np.float32), np.asarray(t, np.float32), nan_equal=True), (fn.__name__, dt, "eager", i, int(np.sum(np.asarray(p, np.float32) != t)))
    g, ge = _graph_eager(tr, args, dt)
    for i, (p, t) in enumerate(zip(ge, te, strict=True)):
        assert same_bits(np.asarray(p, np.float32), np.asarray(t, np.float32), nan_equal=True), (fn.__name__, dt, "numlab graph", i)
    if compiled:
        tc = run_torch(tr, args, mode="compiled", compiled=compile_fn(fn))
        pc = predict(tr, args, mode="compiled").outputs
        for i, (p, t) in enumerate(zip(pc, tc, strict=True)):
            assert same_bits(np.asarray(p, np.float32), np.asarray(t, np.float32), nan_equal=True), (fn.__name__, dt, "compiled", i, int(np.sum(np.asarray(p, np.float32) != t)))
    return tr, g, te


def where_gt(x):
    import torch

    return torch.where(x > 0.3, x, x * 0.5)


@pytest.mark.parametrize("dt", DTS)
def test_where_gt_threshold_bit_for_bit(torch, dt):
    """``torch.where(x > 0.3, x, x * 0.5)``: eager and compiled predicted bit for bit,
    and numlab's graph (gt against a 0-d constant) run in ``dt`` equals torch eager."""
    from numlab.torch import compile_fn, inductor_cpu, predict, run_torch

    x, t = _threshold_data(torch, dt)
    tr, g, (te,) = _check_all(torch, where_gt, (x,), dt)
    if dt == "fp16":  # Inductor's emulate_precision_casts rounds every fp16 value: also bitwise
        tce = run_torch(tr, (x,), mode="compiled", compiled=compile_fn(where_gt, True))[0]
        assert same_bits(np.asarray(predict(tr, (x,), mode="compiled", preset=inductor_cpu(True)).outputs[0], np.float32),
                         np.asarray(tce, np.float32), nan_equal=True)
    assert [n.op for n in g.nodes if n.op in ("gt", "constant", "where", "mul_scalar")] == \
        ["constant", "gt", "mul_scalar", "where"]
    xs = x.float().numpy()
    # torch compares with dtype(0.3): x == dtype(0.3) is not greater, its next value up is
    at = xs == np.float32(t)
    above = xs == np.min(xs[xs > t])
    assert at.sum() >= 2 and np.all(te[at] == xs[at] * np.float32(0.5))
    assert np.all(te[above] == xs[above])
    # numlab's float64 reference keeps the user's 0.3: fp16(0.3) = 0.30004883 and
    # fp32(0.3) = 0.30000001 are > 0.3 (bf16(0.3) = 0.30078125 too), so the
    # reference selects x where torch selects x * 0.5 (a real flip at the threshold)
    from numlab.execute import run

    ref = run(g, {tr.input_names[0]: xs}, mode="reference", fmt=dt).outputs[g.outputs[0]]
    assert t > 0.3 and np.all(ref[at] == xs[at])


def comparisons(x, y):
    import torch

    return (x > y, torch.ge(x, y), x < y, torch.le(x, y), x == y, torch.ne(x, y),
            torch.where(x >= y, x, y), torch.maximum(x, y), torch.minimum(x, y))


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_comparisons_of_tensors_and_bool_outputs(torch, dt):
    """Comparisons with tensor operands on equal values, NaN and signed zeros:
    bool outputs of the function are truth values (``value_kind`` "bool") in the
    graph, 0.0/1.0 in S, equal to torch's bools; eager and compiled predicted."""
    x, _ = _threshold_data(torch, dt, n=2000, seed=6)
    xs = x.float().numpy()
    rng = np.random.default_rng(7)
    ys = np.where(rng.random(xs.size) < 0.3, xs, normal(rng, xs.shape, dt).astype(np.float32))
    ys[:4] = [np.nan, 0.0, -0.0, np.inf]
    xs[:4] = [1.0, -0.0, 0.0, np.inf]
    x = torch.from_numpy(xs).to(_tdt(torch, dt))
    y = torch.from_numpy(ys).to(_tdt(torch, dt))
    tr, g, te = _check_all(torch, comparisons, (x, y), dt, compiled=(dt == "fp16"))
    kinds = [g.value_kind(o) for o in g.outputs]
    assert kinds == ["bool"] * 6 + ["float"] * 3
    assert [tr.node(o).dtype for o in tr.outputs] == ["bool"] * 6 + [dt] * 3
    assert te[0].dtype == np.bool_ and te[4][2] and not te[5][2]  # -0 == +0
    assert not te[4][0] and te[5][0]  # NaN == is False, != is True
    assert 0 < te[4].sum() < xs.size  # equal values are really there


def test_bool_output_of_a_function(torch):
    """A function returning only a comparison: one bool output, its graph
    (constant, gt) evaluates to the same truth values as torch."""
    from numlab.torch import from_torch, predict

    x, t = _threshold_data(torch, "fp16", n=1000)

    def above(x):
        return torch.gt(x, 0.3)

    tr = from_torch(above, (x,))
    g = tr.to_graph()
    assert [n.op for n in g.nodes] == ["constant", "gt"] and g.value_kind(g.outputs[0]) == "bool"
    want = above(x).numpy()
    assert bits_equal(predict(tr, (x,)).outputs[0], want)
    _, (got,) = _graph_eager(tr, (x,), "fp16")
    assert bits_equal(got, want.astype(np.float32))


def selections(x):
    import torch
    import torch.nn.functional as F

    return (torch.clamp(x, min=0.3, max=0.7), x.clamp_min(-0.1), x.clamp(max=0.3), F.hardtanh(x),
            torch.where(x > 0.3, x, 0.1), torch.where(x <= 0.3, -0.3, x),
            torch.maximum(x, torch.tensor(0.3)), (x > 0.3).to(x.dtype) * x)


@pytest.mark.parametrize("dt", DTS)
def test_clamp_where_maximum_with_numbers(torch, dt):
    """clamp/clamp_min/clamp_max/hardtanh with Python-number bounds, where with a
    number branch, maximum with a tensor literal, a mask cast to the dtype:
    eager, compiled and numlab's graph bit for bit."""
    x, t = _threshold_data(torch, dt, n=3000, seed=8)
    # compiled once (fp16) to keep the file's compile time down; bf16 and fp32 measured bitwise too
    tr, g, te = _check_all(torch, selections, (x,), dt, compiled=(dt == "fp16"))
    ops = [n.op for n in g.nodes]
    assert "clamp" not in " ".join(ops) and ops.count("maximum") == 4 and ops.count("minimum") == 3
    consts = [n for n in g.nodes if n.op == "constant"]
    assert all(n.attrs["value"].shape == () for n in consts)
    # the tensor literal torch.tensor(0.3) is fp32: the constant holds fp32(0.3) exactly
    vals = sorted(float(n.attrs["value"].array) for n in consts)
    assert float(np.float32(0.3)) in vals and 0.3 in vals and -0.1 in vals
    assert set(g.inputs) == set(tr.input_names)  # the literal is no graph input
    xs = x.float().numpy()
    assert np.all(te[0][xs < t] == np.float32(t))  # clamped to dtype(0.3)


def doubled(x):
    import torch

    return (x >= D16, x > D_BF, x == D16, torch.where(x < 0.5, D16, x), x.clamp(max=D_BF))


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_python_number_rounds_through_float_as_torch(torch, dt):
    """torch converts a Python number to fp16/bf16 through C++ float (two
    roundings); the constant node reproduces it, one rounding of the double
    would not: x >= 1 + 2**-11 + 2**-40 is True at x == 1 in fp16."""
    import dataclasses

    from numlab.execute import run
    from numlab.ops import ConstValue
    from numlab.torch.bridge import scalar_value

    x = torch.tensor([1.0, 1 + 2**-10, 1 + 2**-7, 1 + 2**-8, 0.25, 2.0] * 50, dtype=_tdt(torch, dt))
    tr, g, te = _check_all(torch, doubled, (x,), dt, compiled=False)
    if dt == "fp16":
        assert te[0][0] and te[2][0]  # fp16 x == 1 equals the number torch holds
    assert scalar_value(D16) == float(np.float32(D16)) != D16
    assert scalar_value(D_BF) == float(np.float32(D_BF)) != D_BF
    # the same graph with the doubles themselves as constants (one rounding) is wrong
    nodes = [dataclasses.replace(n, attrs={"value": ConstValue(_raw(n))}) if n.op == "constant" else n
             for n in g.nodes]
    g1 = type(g)(g.inputs, nodes, g.outputs, name="single_rounding")
    r = run(g1, {tr.input_names[0]: x.float().numpy()}, mode="eager", fmt=dt)
    got = [np.asarray(r.outputs[o], np.float32) for o in g1.outputs]
    assert not all(same_bits(np.asarray(a, np.float32), np.asarray(b, np.float32), nan_equal=True) for a, b in zip(got, te, strict=True))


def _raw(node):
    """The double a scalar_value() constant came from (D16 or D_BF), else its value."""
    v = float(node.attrs["value"].array)
    for d in (D16, D_BF):
        if v == float(np.float32(d)):
            return d
    return v


def test_scalar_value_matches_torch_conversion(torch):
    """For doubles near every fp16/bf16 rounding midpoint of [0.5, 4), ``dtype(scalar_value(v))``
    rounded once by numlab equals torch's own conversion (torch.full), in fp16, bf16, fp32."""
    from numlab.formats import get_format
    from numlab.rounding import round_to
    from numlab.torch.bridge import scalar_value

    rng = np.random.default_rng(9)
    mids = np.concatenate([
        (np.arange(1024, 4096)[rng.integers(0, 3072, 300)] + 0.5) * 2.0**-11,  # fp16 midpoints
        (np.arange(128, 512)[rng.integers(0, 384, 300)] + 0.5) * 2.0**-8,  # bf16 midpoints
    ])
    offs = np.array([-2**-30, -2**-40, 0.0, 2**-40, 2**-30])
    vals = (mids[:, None] * (1 + offs[None, :])).ravel().tolist() + [0.3, 0.1, -0.7, 65519.99, 1e-8]
    for dt in DTS:
        want = torch.stack([torch.full((), v, dtype=_tdt(torch, dt)) for v in vals]).float().numpy()
        got = round_to(np.array([scalar_value(v) for v in vals]), get_format(dt)).astype(np.float32)
        assert bits_equal(got, want), dt
    assert scalar_value(0.3) == 0.3 and scalar_value(7) == 7.0  # the user's number when it rounds alike
    assert np.isnan(scalar_value(float("nan"))) and scalar_value(float("-inf")) == -np.inf


def test_scalar_tensor_of_another_dtype_is_unmapped(torch):
    """``torch.where(c, 1.5, 0.5)`` of an fp16 mask is fp32 (two numbers): numlab
    holds one storage format, so the graph is refused, naming the op and dtypes."""
    from numlab.torch import from_torch

    x = torch.ones(4, dtype=torch.float16)
    tr = from_torch(lambda v: torch.where(v > 0.3, 1.5, 0.5) + v, (x,))
    with pytest.raises(ValueError) as e:
        tr.to_graph()
    assert "aten.scalar_tensor.default of dtype fp32 in a fp16 function" in str(e.value)
    with pytest.raises(ValueError, match=r"aten\.gt\.Scalar of Python scalars only|scalar_tensor"):
        from_torch(lambda v: torch.where(v > 0.3, 1.5, 0.5), (x,)).to_graph()


def test_graph_option_traces_a_torch_function_with_comparisons(torch, tmp_path, monkeypatch):
    """``--graph module:function`` (cli.options.load_graph) on a torch function with a
    comparison and where: the graph's inputs are the parameter names and numlab's
    eager run in fp16 equals torch eager."""
    from numlab.cli.options import load_graph
    from numlab.execute import run

    (tmp_path / "h9_sel_mod.py").write_text(
        "import torch\n\n\ndef gate(x, y):\n    return torch.where(x > 0.3, x * y, y.clamp(min=-0.5))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rng = np.random.default_rng(10)
    xs = normal(rng, (8, 64), "fp16").astype(np.float16)
    ys = normal(rng, (8, 64), "fp16").astype(np.float16)
    xs[0, :3] = [0.3, np.float16(0.3), 0.2998]
    g = load_graph("h9_sel_mod:gate", inputs={"x": xs, "y": ys})
    assert set(g.inputs) == {"x", "y"} and {"gt", "where", "maximum", "constant"} <= {n.op for n in g.nodes}
    got = run(g, {"x": xs, "y": ys}, mode="eager", fmt="fp16").outputs[g.outputs[0]]
    tx, ty = torch.from_numpy(xs), torch.from_numpy(ys)
    want = torch.where(tx > 0.3, tx * ty, ty.clamp(min=-0.5)).float().numpy()
    assert same_bits(np.asarray(got, np.float32), np.asarray(want, np.float32), nan_equal=True)


def literals(x):
    import torch

    return (x > torch.tensor(0.3), torch.where(x >= torch.tensor(0.3), x, torch.tensor(0.1)),
            x * torch.tensor(0.3), x + torch.tensor(0.1), torch.tensor(0.7) - x, x / torch.tensor(3.3))


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_tensor_literals_promote_as_aten(torch, dt):
    """``torch.tensor(0.3)`` (a 0-d fp32 literal) with an fp16/bf16 tensor: eager ATen
    converts it to the tensor's dtype for comparisons, where, add and sub, and reads
    it as an fp32 scalar for mul and div; Inductor computes with the fp32 value.
    Both predicted bit for bit; the graph reads the literal as a scalar operand."""
    from numlab.torch import compile_fn, from_torch, predict, run_torch

    x, t = _threshold_data(torch, dt, n=2000, seed=11)
    tr = from_torch(literals, (x,))
    te = run_torch(tr, (x,))
    tc = run_torch(tr, (x,), mode="compiled", compiled=compile_fn(literals))
    for mode, want in (("eager", te), ("compiled", tc)):
        got = predict(tr, (x,), mode=mode).outputs
        for i, (p, w) in enumerate(zip(got, want, strict=True)):
            assert same_bits(np.asarray(p, np.float32), np.asarray(w, np.float32), nan_equal=True), (dt, mode, i)
    xs = x.float().numpy()
    at = xs == np.float32(t)
    assert not te[0][at].any() and tc[0][at].all()  # eager: dtype(0.3) > dtype(0.3) is False
    # mul keeps fp32(0.3): the product by dtype(0.3) rounded once differs somewhere
    alt = (x.float() * torch.tensor(0.3, dtype=x.dtype).float()).to(x.dtype).float().numpy()
    assert not same_bits(np.asarray(te[2], np.float32), np.asarray(alt, np.float32), nan_equal=True)
    g = tr.to_graph()
    ops = {n.name: n for n in g.nodes}
    muls = [n for n in g.nodes if n.op == "mul_scalar"]
    assert len(muls) == 1 and muls[0].attrs["scalar"] == float(np.float32(0.3))
    assert {n.op for n in g.nodes} >= {"gt", "ge", "where", "add_scalar", "rsub_scalar", "div_scalar"}
    assert set(g.inputs) == set(tr.input_names) and len(ops) == len(g.nodes)
    # a dimensioned fp32 literal with an fp16/bf16 tensor computes in fp32: not one storage format
    with pytest.raises(ValueError, match=r"lift_fresh_copy.default of a fp32 tensor of shape \(2000,\) in a "):
        from_torch(lambda v: v > torch.tensor([0.3] * 2000), (x,)).to_graph()


def test_explain_bool_output_and_nan(torch):
    """explain() on a function with a NaN input and a bool output: NaN pairs agree,
    a truth value's distance is 0 or inf ulp, and the eager/compiled flip of
    ``x > torch.tensor(0.3)`` at x == fp16(0.3) (eager converts the literal to fp16,
    Inductor compares with fp32(0.3)) is attributed to promotion or scalars."""
    from numlab.torch import explain

    x, t = _threshold_data(torch, "fp16", n=2000, seed=11)
    assert np.isnan(x.float().numpy()).sum() == 1
    e = explain(where_gt, (x,))
    assert (e.n_differ, e.faith_eager, e.faith_compiled) == (0, 1.0, 1.0)
    assert e.verdict() == "eager and compiled agree bit for bit: nothing to attribute"
    e = explain(literals, (x,), output=0)
    at = int(np.sum(x.float().numpy() == np.float32(t)))
    assert e.dtype == "bool" and e.n_differ == e.n_differ_pred == at >= 2
    assert (e.faith_eager, e.faith_compiled, e.max_ulp_eager) == (1.0, 1.0, 0.0)
    assert {s for s, d in e.sources.items() if d["explains"] == 1.0} == {"promotion", "scalars"}
    assert e.errors["torch eager"][1] == np.inf  # the fp64 reference (0.3 exactly) says True there
    assert "promotion or scalars alone moves every differing element" in e.verdict()


def logic(x):
    import torch

    return ((x > 0) & (x < 1), torch.logical_or(x > 0.5, x < -0.5), ~(x > 0), torch.logical_not(x > 0),
            torch.logical_and(x, x < 1), (x > 0) ^ (x < 1), torch.logical_xor(x, x > 0.3), (x > 0) | (x < 0.3),
            torch.logical_not(x), x.masked_fill(x > 0.3, 0.1),
            x.masked_fill((x < -0.2) & (x > -1), float("-inf")))


@pytest.mark.parametrize("dt", DTS)
def test_logical_ops_and_masked_fill(torch, dt):
    """&, |, ^, ~ of masks, logical_* (a float operand's truth, NaN true), masked_fill
    with a number: bool outputs stay truth values in the graph (exact comparisons of
    0/1); eager, compiled (fp16) and numlab's graph bit for bit."""
    x, t = _threshold_data(torch, dt, n=2000, seed=12)
    tr, g, te = _check_all(torch, logic, (x,), dt, compiled=(dt == "fp16"))
    assert [g.value_kind(o) for o in g.outputs] == ["bool"] * 9 + ["float"] * 2
    xs = x.float().numpy()
    nan = np.isnan(xs)
    assert nan.any() and not te[8][nan].any()  # logical_not(NaN) is False: NaN is true
    assert bits_equal(te[0], (xs > 0) & (xs < 1))  # independent numpy truth values
    # filled where x > dtype(0.3) (torch's mask), with dtype(0.1)
    assert np.all(te[9][xs > np.float32(t)] == np.float32(torch.tensor(0.1, dtype=x.dtype).float().item()))
    assert np.all(te[9][xs == np.float32(t)] == np.float32(t))
