"""Bisection (fusion kinds, sources, ddmin over node ranges), the precision
workflow, and the run/compare/bisect CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from _oracles import assert_same_bits

import numlab
from numlab import zoo
from numlab.compare import Thresholds, compare_dumps, load_dump
from numlab.compare import bisect as B
from numlab.compare.bisect import (
    bisect_run,
    ddmin_range,
    precision_workflow,
    range_diverges,
    range_graph,
)
from numlab.kernels import KernelSpec

STRICT = Thresholds(cosine=0.9999)  # msprobe's rule with a stricter cosine
MAGIC_RSQRT = KernelSpec.codegen(rsqrt="newton(magic,0,fp32)")  # planted: bit trick, no Newton step
# the planted rsqrt is code-generated only where layer_norm / rms_norm are decomposed (the autofuse
# preset keeps them whole: eager's library kernel)
DEC = "autofuse+decompose"


# --------------------------------------------------------------------------
# ddmin on contiguous ranges, exhaustively on small sizes
# --------------------------------------------------------------------------
def test_ddmin_finds_the_exact_culprit_range_exhaustively():
    for n in range(1, 9):
        for a, b in itertools.combinations(range(n + 1), 2):
            calls = []

            def test(lo, hi, a=a, b=b, calls=calls):
                calls.append((lo, hi))
                return lo <= a and b <= hi  # diverges iff the range holds the whole culprit

            assert ddmin_range(test, n) == (a, b), (n, a, b)
            assert len(calls) == len(set(calls))  # cached: no range run twice


def test_ddmin_with_two_independent_culprits_returns_a_minimal_one():
    for n in range(2, 9):
        for c1, c2 in itertools.combinations(range(n), 2):
            def test(lo, hi, c1=c1, c2=c2):
                return lo <= c1 < hi or lo <= c2 < hi

            lo, hi = ddmin_range(test, n)
            assert (lo, hi) in ((c1, c1 + 1), (c2, c2 + 1))


def test_ddmin_no_divergence():
    assert ddmin_range(lambda lo, hi: False, 5) is None
    assert ddmin_range(lambda lo, hi: True, 0) is None


# --------------------------------------------------------------------------
# ranges fed golden inputs
# --------------------------------------------------------------------------
def test_range_graph_and_golden_inputs_reproduce_eager():
    g = zoo.MODELS["transformer_block"]()
    x = zoo.make_inputs(g, seed=1)
    e = numlab.run(g, x, mode="eager", fmt="fp16")
    golden = {**e.values, **x}
    n = len(g.nodes)
    for lo, hi in [(0, n), (0, 1), (3, 9), (n - 3, n)]:
        sub = range_graph(g, lo, hi)
        assert [nd.name for nd in sub.nodes] == [nd.name for nd in g.nodes[lo:hi]]
        assert set(sub.inputs) <= set(g.inputs) | {nd.name for nd in g.nodes[:lo]}
        xs = {k: np.asarray(golden[k], dtype=np.float64) for k in sub.inputs}
        r = numlab.run(sub, xs, mode="eager", fmt="fp16")
        for name, v in r.values.items():  # eager on golden inputs is eager, bit for bit
            assert_same_bits(v, e.values[name], what=name)
    assert range_graph(g, 0, n).outputs == g.outputs
    with pytest.raises(ValueError, match="range"):
        range_graph(g, 3, 3)
    d, rep = range_diverges(g, golden, 1, 2, fmt="fp16", fused_kw={"kernels": MAGIC_RSQRT},
                            thresholds=STRICT)
    assert not d and rep.row("matmul_0")["bitwise_equal_ratio"] == 1.0  # a library matmul alone


# --------------------------------------------------------------------------
# bisect_run on planted problems
# --------------------------------------------------------------------------
def _tb():
    g = zoo.MODELS["transformer_block"]()
    return g, zoo.make_inputs(g, seed=0)


def test_bisect_finds_planted_rsqrt():
    g, x = _tb()
    lines = []
    rep = bisect_run(g, x, fmt="fp16", fusion=DEC, kernels=MAGIC_RSQRT, thresholds=STRICT, log=lines.append)
    assert rep.diverges and rep.baseline.first_divergence["node"] == "layer_norm_0"
    # elementwise fusion off turns the decomposed rsqrt into a library call;
    # decomposition off keeps layer_norm whole -> eager's kernel
    assert {"elementwise", "decompose", "all"} <= set(rep.fixing_kinds)
    assert "broadcast" not in rep.fixing_kinds and "reshape" not in rep.fixing_kinds
    assert rep.fixing_sources == ["algorithm"]
    assert rep.culprit_range == ["layer_norm_0"]
    assert rep.more_culprits == [["rms_norm_0"]]  # the other rsqrt user, found after it
    text = rep.text()
    assert "algorithm" in text and "layer_norm_0" in text and "tried:" in text
    assert "another diverging range after it (1 nodes): rms_norm_0" in text
    assert "tried:" not in rep.text(trials=False) and "rms_norm_0" in rep.text(trials=False)
    assert any("stage 3" in s for s in lines) and any("DIVERGES" in s for s in lines)
    # the msprobe default rule misses this planted error (cos 0.9998 > 0.99)
    assert not bisect_run(g, x, fmt="fp16", fusion=DEC, kernels=MAGIC_RSQRT, log=None).diverges
    # under the default (composites whole) the planted kernel is never used: nothing diverges
    assert not bisect_run(g, x, fmt="fp16", kernels=MAGIC_RSQRT, thresholds=STRICT, log=None).diverges


def test_bisect_finds_planted_exp_in_softmax():
    g, x = _tb()
    bad = KernelSpec.codegen(exp="exp_poly(1)")
    rep = bisect_run(g, x, fmt="fp16", fusion=DEC, kernels=bad, thresholds=STRICT, log=None,
                     stages=("sources", "ranges"))
    assert rep.baseline.first_divergence["node"] == "softmax_0"
    assert rep.fixing_sources == ["algorithm"]
    assert rep.culprit_range == ["softmax_0"] and rep.more_culprits == []
    assert not any(t.stage == "fusion" for t in rep.trials)
    assert "fusion switches: not tried" in rep.text()  # not "none": the stage did not run


def test_bisect_nothing_to_do_and_bad_stage():
    g, x = _tb()
    rep = bisect_run(g, x, fmt="fp16", log=None)
    assert not rep.diverges and rep.trials == [] and "nothing to bisect" in rep.text()
    with pytest.raises(ValueError, match="stages"):
        bisect_run(g, x, fmt="fp16", stages=("fusion", "bogus"), log=None)
    with pytest.raises(ValueError, match="max_culprits"):
        bisect_run(g, x, fmt="fp16", max_culprits=0, log=None)


# --------------------------------------------------------------------------
# the graph-mode precision workflow (docs/design.md, "Compare and bisect")
# --------------------------------------------------------------------------
def test_workflow_on_planted_problem(tmp_path, monkeypatch):
    g, x = _tb()
    w = precision_workflow(g, x, fmt="fp16", fusion=DEC, kernels=MAGIC_RSQRT, thresholds=STRICT,
                           dump_dir=tmp_path)
    bad = {s["node"] for s in w.bad_single_ops}
    assert bad == {"layer_norm_0", "rms_norm_0"}  # the rsqrt users, found operator by operator
    for s in w.single_ops:
        # eager operators: correctly rounded up to their fp32-internal error
        assert s["eager_max_ulp"] <= 0.51, s
    assert not w.eager_vs_ref.failing
    assert w.fused_vs_eager.first_divergence["node"] == "layer_norm_0"
    assert "elementwise" in w.bisect.fixing_kinds
    assert "layer_norm_0" in w.conclusion
    # the dumps stay on disk, verified by checksum, and are not overwritten
    assert load_dump(tmp_path / "fused").manifest["mode"] == "fused"
    rep = compare_dumps(tmp_path / "eager", tmp_path / "fused", thresholds=STRICT)
    assert rep.first_divergence["node"] == "layer_norm_0"
    calls = []
    monkeypatch.setattr(B, "_run", lambda *a, **k: calls.append(a))
    with pytest.raises(FileExistsError):
        precision_workflow(g, x, fmt="fp16", dump_dir=tmp_path)
    assert calls == []  # refused before running anything
    assert "step 3" in w.text()


def test_workflow_clean_model():
    g = zoo.MODELS["gelu_mlp"]()
    x = zoo.make_inputs(g, seed=0)
    w = precision_workflow(g, x, fmt="bf16")
    assert not w.bad_single_ops and w.bisect is None
    assert "no graph-mode precision problem" in w.conclusion


# --------------------------------------------------------------------------
# CLI: run --dump, compare, bisect
# --------------------------------------------------------------------------
def test_cli_run_compare_bisect(tmp_path, capsys):
    from numlab.cli import main

    e, f = tmp_path / "eager", tmp_path / "fused"
    assert main(["run", "layernorm", "--fmt", "fp16", "--mode", "eager", "--seed", "2",
                 "--dump", str(e)]) == 0
    assert main(["run", "layernorm", "--fmt", "fp16", "--mode", "fused", "--seed", "2",
                 "--fusion", DEC, "--dump", str(f)]) == 0
    m = json.loads((f / "manifest.json").read_text())
    assert (m["mode"], m["dtype"], m["seed"], m["model"]) == ("fused", "fp16", 2, "layernorm")
    assert m["fingerprint"] and m["numlab_version"] == numlab.__version__
    # no overwrite without --force, refused before running (nothing printed)
    capsys.readouterr()
    assert main(["run", "layernorm", "--mode", "fused", "--dump", str(f)]) == 2
    out, err = capsys.readouterr()
    assert "--force" in err and out == ""
    assert main(["run", "layernorm", "--mode", "fused", "--fusion", DEC, "--dump", str(f), "--force"]) == 0
    # that run drew other inputs (seed 0): compare says so with exit 1
    assert main(["compare", "-gp", str(e), "-mp", str(f), "-o", str(tmp_path / "r0.csv")]) == 1
    assert main(["run", "layernorm", "--fmt", "fp16", "--mode", "fused", "--seed", "2",
                 "--fusion", DEC, "--dump", str(f), "--force"]) == 0
    assert main(["compare", "-gp", str(e), "-mp", str(f), "-o", str(tmp_path / "r.csv")]) == 0
    out = capsys.readouterr().out
    assert "decomposed" in out and (tmp_path / "r.csv").exists()
    assert main(["run", "nope"]) == 2
    assert main(["bisect", "transformer_block", "--fmt", "fp16", "--fusion", DEC, "--kernels",
                 "codegen:rsqrt=newton(magic,0,fp32)", "--cosine", "0.9999", "--stages", "sources"]) == 0
    out = capsys.readouterr().out
    assert "align=algorithm" in out and "sources whose eager choice removes it: algorithm" in out
    assert out.count("align=algorithm") == 1  # each trial printed once, not again in the summary
    assert main(["bisect", "layernorm", "--dump", str(tmp_path / "w")]) == 2
    assert "--workflow" in capsys.readouterr().err
    assert main(["bisect", "layernorm", "--workflow"]) == 0
    assert "conclusion:" in capsys.readouterr().out
    assert main(["run", "layernorm", "--mode", "eager", "--fusion", "off"]) == 2
    # bad arguments: the message names the option, the value and the choices
    for argv, words in ((["run", "layernorm", "--fmt", "fp17"], ["--fmt", "fp17", "bf16"]),
                        (["run", "layernorm", "--size", "hiden=4"], ["hiden", "hidden=64", "batch=8"]),
                        (["run", "nope"], ["nope", "transformer_block"]),
                        (["run"], ["MODEL is required", "transformer_block"]),
                        (["bisect", "layernorm", "--kernels", "codegen:rsqr=1"], ["--kernels", "rsqr", "rsqrt"])):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert all(w in err for w in words), (argv, err)
