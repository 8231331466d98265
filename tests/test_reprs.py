"""Result objects print compactly: ``repr()`` fits a screen (at most 20
lines, 2000 characters) whatever the sizes of the arrays they hold, names
the key facts, never prints an array, and ``_repr_html_`` is a small HTML
table.  Each type is built on a real case of its producer (a 32x256 layer
norm, two dumps compared, a contract bound, a race batch, ...)."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

import numlab as nl
from numlab import claims as C
from numlab import races as R
from numlab import zoo
from numlab._repr import array_summary, brief, facts_html, facts_text
from numlab.compare import compare_dumps, dump_run, load_dump
from numlab.compare.bisect import bisect_run, precision_workflow
from numlab.compare.columns import Thresholds
from numlab.contract_bounds import contract_bound
from numlab.kernels import KernelSpec, Pairwise
from numlab.kernels.orders.reveal import check as check_order
from numlab.kernels.orders.reveal import reveal
from numlab.kernels.orders.tree import Tree
from numlab.kernels.scaled import quantize
from numlab.metrics import inductor_check
from numlab.running_bounds import run_with_bounds

MAX_CHARS, MAX_LINES, MAX_HTML = 2000, 20, 8000
# eight or more numbers in a row: how a printed array looks ("[0.1 0.2 ...", "array([1, 2, ...")
NUMBER_RUN = re.compile(r"(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?[,\s]+){8,}")


def _ln_case(batch: int, hidden: int = 256, seed: int = 0):
    """A layer norm, its fp16 inputs and a planted bad kernel's outputs (every
    third row 1% too large), checked against numlab's eager and fp64."""
    g = C.get_model("layernorm", {"batch": batch, "hidden": hidden})
    ins = {k: np.asarray(nl.round_to(v, "fp16"), np.float16) for k, v in zoo.make_inputs(g, seed=seed).items()}
    y = nl.run(g, ins, mode="eager", fmt="fp16").output.copy()
    y[::3] = (y[::3].astype(np.float64) * 1.01).astype(np.float16)
    return g, ins, y


def assert_compact(obj, *facts: str) -> str:
    """``repr(obj)`` within the limits, naming every fact, printing no array;
    the HTML (where defined) a bounded table with the same facts escaped."""
    with np.printoptions(threshold=10**9):  # a leaked array would print whole
        r = repr(obj)
        h = obj._repr_html_() if hasattr(obj, "_repr_html_") else None
    assert len(r) <= MAX_CHARS, (len(r), r[:3000])
    assert r.count("\n") + 1 <= MAX_LINES, r
    assert not NUMBER_RUN.search(r), r
    assert "array(" not in r and "\n [" not in r, r
    for f in facts:
        assert f in r, (f, r)
    if h is not None:
        assert h.startswith("<") and len(h) <= MAX_HTML, (len(h), h[:500])
        assert not NUMBER_RUN.search(h), h[:3000]
        for f in facts:
            assert html.escape(f) in h, (f, h[:3000])
    return r


def assert_does_not_grow(make, small: int, large: int, slack: int = 40):
    """repr of ``make(large)`` (10x the elements, all under numpy's print
    threshold, so a leaked array would print in full) is about as long as
    that of ``make(small)``."""
    a, b = repr(make(small)), repr(make(large))
    assert len(b) <= len(a) + slack, (len(a), len(b), b)


# ---------------------------------------------------------------- the helper
def test_array_summary_names_shape_dtype_finite_count_and_range():
    a = np.array([[1.0, np.nan, -2.5], [np.inf, 4.0, 0.0]], np.float16)
    assert array_summary(a) == "float16[2, 3] finite 4/6 in [-2.5, 4]"
    assert array_summary(np.zeros((0, 3))) == "float64[0, 3] empty"
    assert array_summary(np.array([True, False, True])) == "bool[3] 2 True"
    assert array_summary(np.arange(5, dtype=np.int32)) == "int32[5] in [0, 4]"
    assert array_summary(np.full(3, np.nan)) == "float64[3] finite 0/3"
    bf = nl.round_to(np.array([1.5, -3.0]), "bf16")
    assert array_summary(np.asarray(bf, nl.BF16.dtype)).endswith("finite 2/2 in [-3, 1.5]")
    assert len(brief(list(range(10**5)))) < 100 and len(brief("x" * 10**5)) < 100


def test_facts_are_capped_and_escaped():
    rows = [(f"k{i}", "v" * 500) for i in range(100)]
    t = facts_text(("T", rows))
    assert t.count("\n") + 1 == MAX_LINES and len(t) <= MAX_CHARS and "more rows" in t
    h = facts_html(("<b>&", [("<x>", "a<b")]))
    assert "&lt;b&gt;&amp;" in h and "&lt;x&gt;" in h and "a&lt;b" in h and "<x>" not in h


# ---------------------------------------------------------------- claims
@pytest.fixture(scope="module")
def failing_check():
    g, ins, y = _ln_case(32)
    return C.check("no_worse_tensor", g, inputs=ins, observed={"y": y})


def test_check_report_counterexample_and_case(failing_check):
    rep = failing_check
    assert rep.verdict == "fails" and rep.counterexample is not None
    r = assert_compact(rep, "no_worse_tensor", "fails", "layernorm", "fp16", "counterexample", "8704 input elements")
    assert f"{rep.worst_margin:.4g}" in r
    case, res = rep.counterexample
    assert_compact(case, "layernorm", "fp16", "float16[32, 256]", "float64[32, 256]", "8704 elements")
    assert_compact(res, "fails", f"{res.margin:.4g}", "reference outputs", "float64[32, 256]")


def test_check_report_does_not_grow_with_the_data():
    def make(batch):
        g, ins, y = _ln_case(batch, hidden=16)
        return C.check("no_worse_tensor", g, inputs=ins, observed={"y": y})

    assert_does_not_grow(make, 4, 40)
    assert_does_not_grow(lambda b: make(b).counterexample[0], 4, 40)
    assert_does_not_grow(lambda b: make(b).counterexample[1], 4, 40)


def test_random_check_report():
    rep = C.check("no_worse_population", "layernorm", sizes={"batch": 32, "hidden": 256}, trials=3)
    assert_compact(rep, "no_worse_population", rep.verdict, "3 trial(s)", "random")


# ---------------------------------------------------------------- runs, bounds, plans
def test_run_result_bounded_run_contract_bound_and_plan():
    g, ins, _ = _ln_case(32)
    res = nl.run(g, ins, mode="fused", fmt="fp16", keep_internals=True)
    assert_compact(res, "fused", "fp16", res.fingerprint[:12], "y: float16[32, 256]")
    br = run_with_bounds(g, ins, mode="fused", fmt="fp16")
    assert_compact(br, "fused", "fp16", "y: float64[32, 256]")
    cb = contract_bound(g, ins, mode="fused", fmt="fp16")
    assert_compact(cb, "fused", "fp16", "derived")
    assert f"y: max {float(cb['y'].max()):.3g}" in repr(cb) and "float64[32, 256]" in cb._repr_html_()
    tb = zoo.MODELS["transformer_block"]()
    plan = nl.fusion.plan(tb, nl.FusionOptions.parse("autofuse+decompose"))
    r = assert_compact(plan, f"{len(plan.blocks)} blocks", f"{plan.n_fused} fused")
    assert plan.blocks[0].name in r


def test_run_result_does_not_grow_with_the_data():
    def make(batch):
        g, ins, _ = _ln_case(batch, hidden=16)
        return nl.run(g, ins, mode="fused", fmt="fp16")

    assert_does_not_grow(make, 4, 40)
    assert_does_not_grow(lambda b: run_with_bounds(*_ln_case(b, hidden=16)[:2], mode="fused"), 4, 40)


def test_scaled_tensor_and_tree_order():
    rng = np.random.default_rng(0)
    q = quantize(rng.standard_normal((32, 256)), "mxfp8_e4m3")
    assert_compact(q, "mxfp8_e4m3", "(32, 256)", "[32, 256]", "[32, 8]")
    t = Tree.from_order(Pairwise(), 4096)
    r = assert_compact(t, "n=4096", "4095 internal nodes")
    assert len(r) < 300
    small = Tree(3, ((0, 1), (2, 3)))
    assert repr(small) == "Tree(n=3, nodes=((0, 1), (3, 2)), zero=False, wide=())"  # the fields (canonical)
    assert_compact(KernelSpec.handwritten(reduce_order=t), "4095 internal nodes")


def test_reveal_and_inductor_results():
    rng = np.random.default_rng(1)
    r = reveal(lambda x: np.sum(x, axis=-1, dtype=np.float32), 256, "fp32", check_rows=200)
    assert_compact(r, "probes=", "check=CheckResult(")
    assert_compact(check_order(lambda x: np.sum(x, axis=-1, dtype=np.float32), r.order, 256, rows=50),
                   "matches=50")
    ref = rng.standard_normal((32, 256))
    ir = inductor_check(ref, ref.astype(np.float16), (ref * 1.001).astype(np.float16))
    assert_compact(ir, "InductorResult(passed=")


# ---------------------------------------------------------------- compare
@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("dumps")
    g = zoo.MODELS["transformer_block"]()
    x = zoo.make_inputs(g, seed=0)
    spec = KernelSpec.codegen(rsqrt="newton(magic,0,fp32)")
    dump_run(nl.run(g, x, mode="eager", fmt="fp16"), d / "eager")
    dump_run(nl.run(g, x, mode="fused", fmt="fp16", fusion="autofuse+decompose", kernels=spec), d / "fused")
    return g, x, spec, d


def test_compare_report_and_dumps(dumps):
    _, _, _, d = dumps
    rep = compare_dumps(d / "eager", d / "fused", thresholds=Thresholds(cosine=0.9999))
    fd = rep.first_divergence
    assert fd is not None
    r = assert_compact(rep, "CompareReport", f"{len(rep.rows)}", fd["node"], "failing")
    assert str(d / "eager") in r or "eager" in r
    assert "<table>" in rep._repr_html_() and fd["node"] in rep._repr_html_()
    dump = load_dump(d / "fused")
    assert_compact(dump, f"{len(dump)} nodes")
    entry = next(iter(dump.entries.values()))
    assert_compact(entry, entry.name)


def test_bisect_and_workflow_reports(dumps, tmp_path):
    g, x, spec, _ = dumps
    strict = Thresholds(cosine=0.9999)
    rep = bisect_run(g, x, fmt="fp16", fusion="autofuse+decompose", kernels=spec, thresholds=strict,
                     log=None)
    assert rep.diverges
    assert_compact(rep, "transformer_block", "fp16", f"{len(rep.trials)} runs", "layer_norm_0")
    w = precision_workflow(g, x, fmt="fp16", fusion="autofuse+decompose", kernels=spec,
                           thresholds=strict, dump_dir=tmp_path)
    assert_compact(w, "transformer_block", f"{len(w.single_ops)} operators", "layer_norm_0")


# ---------------------------------------------------------------- determinism
def test_determinism_report():
    rep = nl.determinism.check_determinism("softmax", fmt="fp16", mode="fused", runs=2)
    assert_compact(rep, "softmax", "fused", "2 processes", f"ok {rep.ok}")


# ---------------------------------------------------------------- races
def test_race_results():
    sc = R.get_scenario("fused_linear_online_max_sum")
    k = sc.build(fix=False, spread=0.6)
    cases = sc.cases(12, seed=0)
    sim = R.simulate(k, cases[0], seed=0)
    assert_compact(sim, k.name, "stale reads", "outputs")
    assert_compact(sim.schedule, "makespan")
    batch = R.batch_run(k, cases, sc.reference, seed=0, tol=sc.tol, keep_outputs=True)
    assert batch.n == 12
    assert_compact(batch, "12 cases", f"{batch.failure_rate:.1%}", *batch.outputs)
    assert_compact(batch.cases[0], "case 0", *batch.outputs)
    bis = R.bisect(k, cases[:6], runs=3, seed=0)
    assert_compact(bis, f"first nondeterministic stage {bis.first_stage}")
    # a batch of 10x the cases prints the same lines
    big = R.batch_run(k, sc.cases(120, seed=0), sc.reference, seed=0, tol=sc.tol, keep_outputs=True)
    assert repr(big).count("\n") == repr(batch).count("\n") and len(repr(big)) <= len(repr(batch)) + 40


# ---------------------------------------------------------------- torch
def test_torch_results():
    torch = pytest.importorskip("torch", reason="the torch bridge needs PyTorch")
    from numlab.torch import from_torch, predict
    from numlab.torch.explain import Explanation
    from numlab.torch.predictor import run_torch

    def fn(x, w):
        return torch.softmax(x * w, dim=-1) + x.sum(-1, keepdim=True) * 0.5

    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((32, 256)), dtype=torch.float32)
    w = torch.tensor(rng.standard_normal(256), dtype=torch.float32)
    tr = from_torch(fn, (x, w))
    assert_compact(tr, "TorchTrace", "fn", "%x_1: fp32[32, 256]", "_softmax.default")
    p = predict(tr, (x, w), mode="eager")
    assert_compact(p, "eager", "fp32: float32[32, 256]")
    te = run_torch(tr, (x, w), mode="eager")[0]
    f64 = predict(tr, (x, w), mode="reference").outputs[0]
    e = Explanation("fn", "fp32", (32, 256), te, te, p.outputs[0], p.outputs[0], f64, 0.0, 1.0, 1.0, 0.0, 0.0,
                    sources={"order": {"explains": 0.0, "needed": 0.0}}, errors={"eager": (1e-7, 1.0)})
    assert_compact(e, "fn", "fp32[32, 256]", "float32[32, 256]", e.verdict())


def test_calibration_repr_counts_rows_per_capability_not_the_rows():
    from numlab.torch.calibrate import Calibration

    def make(n):
        row = {"case": "sum", "dtype": "fp16", "eager": 1.0, "values": list(range(8))}
        return Calibration(("native", "avx2"), {"native": {"rows": [row] * n, "orders": []},
                                                "avx2": {"rows": [row] * 3, "orders": [{"n": 100}]}},
                           "numlab calibrate --quick")

    r = assert_compact(make(500), "Calibration", "native", "500 rows", "numlab calibrate --quick")
    assert "'case'" not in r
    assert_does_not_grow(make, 50, 500)
