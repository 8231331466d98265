"""Claims, search, shrinking, counterexample files, executors and the check CLI."""

from __future__ import annotations

import csv
import dataclasses
import glob
import inspect
import json
import math
import os
import re
import shutil
from concurrent.futures import ProcessPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, same_bits_mask

from numlab import claims as C
from numlab import metrics, ops, plots
from numlab.bounds import contract_bound
from numlab.cli import main as cli_main
from numlab.execute import run
from numlab.formats import get_format
from numlab.fusion import FusionOptions

P = FusionOptions.parse


def test_builtin_claims_cover_the_note():
    # the autofusion note's claims: data movement, fp32 inside, no worse (element/tensor/population/bound),
    # compile + execution determinism, Inductor's rule, and the rigorous bound claim
    for name in ("data_movement_bitexact", "fp32_inside", "no_worse_elementwise", "no_worse_tensor",
                 "no_worse_population", "bound_no_worse", "compile_determinism", "execution_determinism",
                 "inductor_rule", "error_within_bound"):
        assert name in C.CLAIMS and C.CLAIMS[name].statement
    with pytest.raises(ValueError, match="valid claims"):
        C.get_claim("no_such_claim")


def test_inputs_depend_only_on_seed_and_trial():
    a = C.make_case("layernorm", seed=3, trial=7)
    b = C.make_case("layernorm", seed=3, trial=7)
    c = C.make_case("layernorm", seed=3, trial=8)
    assert all(np.array_equal(a.inputs[k], b.inputs[k]) for k in a.inputs)
    assert not np.array_equal(a.inputs["x"], c.inputs["x"])
    # the inputs are fp16 values
    x = a.inputs["x"]
    assert np.array_equal(x, x.astype(np.float16).astype(np.float64))


def test_elementwise_claim_margin_matches_independent_errors():
    case = C.make_case("mul_add_gelu_mul", trial=1)
    r = C.evaluate("no_worse_elementwise", case)
    out = r.outputs
    ref, e, f = out["reference"]["y"], out["eager"]["y"].astype(np.float64), out["fused"]["y"].astype(np.float64)
    viol = np.abs(f - ref) > np.abs(e - ref)
    assert r.holds == (not viol.any())
    assert r.detail["violations"] == int(viol.sum())
    i = tuple(r.detail["index"])
    assert r.detail["fused_err"] == abs(f[i] - ref[i]) and r.detail["eager_err"] == abs(e[i] - ref[i])


def test_counterexample_found_shrunk_saved_and_reproduced(tmp_path):
    # the decomposed layer norm (mean and variance stored in fp16 between unfused reduction kernels)
    rep = C.check("no_worse_tensor", "layernorm", trials=10, save=str(tmp_path), fusion="autofuse+decompose")
    assert not rep.holds and rep.violations > 0
    case, res = rep.counterexample
    st = rep.shrink_stats
    assert st["elements_after"] < st["elements_before"] and st["complexity_after"] < st["complexity_before"]
    assert not res.holds
    # files: npz + json with the metadata needed to reproduce the case (numlab.claims.store)
    meta = json.load(open(rep.saved + ".json"))
    assert "dtype" not in meta  # the storage format's key is "fmt"
    assert meta["fusion"] == "autofuse+decompose" and meta["fusion_options"]["decompose"] is True
    for key in ("claim", "model", "sizes", "fmt", "fusion", "fusion_options", "seed", "trial", "fingerprints",
                "inputs_sha256", "outputs_sha256", "margin"):
        assert key in meta
    assert os.path.exists(rep.saved + ".npz")
    # reload reproduces bit for bit, and the claim is still violated
    rr = C.reproduce(rep.saved)
    assert rr["bitwise"] and rr["violated"] and rr["verdict"] == "fails" and rr["fingerprints_equal"]
    case2, meta2, arrs = C.load_counterexample(rep.saved + ".npz")
    assert all(np.array_equal(case2.inputs[k], case.inputs[k]) for k in case.inputs)
    assert case2.fmt == case.fmt == meta["fmt"] == "fp16"
    # a file written before the rename names the format "dtype": it still loads
    old = dict(meta, dtype="bf16")
    del old["fmt"]
    json.dump(old, open(str(tmp_path / "old.json"), "w"))
    shutil.copy(rep.saved + ".npz", tmp_path / "old.npz")
    assert C.load_counterexample(tmp_path / "old")[0].fmt == "bf16"
    # a file saved when the autofuse preset decomposed composites says "autofuse": the saved options
    # (decompose=True) decide what it reruns, not today's meaning of the spec
    json.dump(dict(meta, fusion="autofuse"), open(str(tmp_path / "old.json"), "w"))
    assert C.load_counterexample(tmp_path / "old")[0].fusion == "autofuse+decompose"
    # saving the same counterexample again is a no-op; different content is refused without force
    assert C.save_counterexample("no_worse_tensor", case, res, str(tmp_path)) == rep.saved
    with open(rep.saved + ".json") as fh:
        m = json.load(fh)
    m["outputs_sha256"] = "0" * 64
    with open(rep.saved + ".json", "w") as fh:
        json.dump(m, fh)
    with pytest.raises(FileExistsError, match="force"):
        C.save_counterexample("no_worse_tensor", case, res, str(tmp_path))
    C.save_counterexample("no_worse_tensor", case, res, str(tmp_path), force=True)


def test_adversarial_search_finds_what_random_misses():
    opts = C.SearchOptions(trials=20, kinds=("normal",))
    assert C.check("inductor_rule", "mul_scalar", options=opts).holds
    adv = C.SearchOptions(trials=20, kinds=("normal",), search="adversarial", adversarial_steps=150)
    rep = C.check("inductor_rule", "mul_scalar", options=adv, shrink_cex=False)
    assert not rep.holds
    case, res = rep.counterexample
    assert case.origin.startswith("adversarial:") and not res.holds


def test_data_movement_is_bitexact_and_precondition():
    rep = C.check("data_movement_bitexact", "movement", trials=10)
    assert rep.holds
    case = C.make_case("movement", trial=0)
    r = C.evaluate("data_movement_bitexact", case)
    x = case.inputs["x"].astype(np.float16)
    expect = np.concatenate([x.T, x.T], axis=0).reshape(-1)  # independent numpy rearrangement
    assert_same_bits(r.outputs["fused"]["y"], expect)
    with pytest.raises(ValueError, match="pure data-movement"):
        C.check("data_movement_bitexact", "layernorm", trials=1)


def test_determinism_claims_hold():
    for name in ("compile_determinism", "execution_determinism"):
        rep = C.check(name, "softmax", trials=3)
        assert rep.holds, rep.summary()
        assert len(rep.fingerprints) == 1


def _bound_no_worse_by_hand(model, opts, fusion):
    """bound_no_worse recomputed from contract_bound per trial: the margin of a
    case is max over outputs of (max fused bound - max eager bound) /
    (u_S * max|reference|); the claim fails when a margin is positive."""
    margins = []
    for t in range(opts.trials):
        case = C.make_case(model, kind=opts.kinds[t % len(opts.kinds)], trial=t, fusion=fusion)
        g = C.get_model(model, case.sizes)
        ref = run(g, case.inputs, mode="reference", fmt=case.fmt).outputs
        common = dict(fmt=case.fmt, kernels=case.kernels, library=case.library)
        be = contract_bound(g, case.inputs, mode="eager", **common)
        bf = contract_bound(g, case.inputs, mode="fused", fusion=case.fusion, **common)
        u = 2.0 ** -get_format(case.fmt).p
        margins.append(max((float(np.max(bf[k])) - float(np.max(be[k]))) / (u * float(np.max(np.abs(ref[k]))))
                           for k in g.outputs))
    return margins


def test_error_within_bound_holds_for_numlab():
    normal = C.SearchOptions(trials=4, kinds=("normal", "uniform", "shifted_mean", "heavy_tailed"))
    rep = C.check("error_within_bound", "layernorm", options=normal)
    assert rep.verdict == "holds" and rep.holds and rep.exit_code == 0 and rep.undecided == 0


@pytest.mark.parametrize("model,fusion,verdict", [
    ("softmax", None, "holds"),                  # composites kept whole: the same bound (margin 0)
    ("softmax", "autofuse+decompose", "fails"),  # decomposed softmax: a larger fused bound
    ("gelu_mlp", None, "holds"),                 # a smaller fused bound
])
def test_bound_no_worse_vs_contract_bounds_by_hand(model, fusion, verdict):
    opts = C.SearchOptions(trials=4, kinds=("normal", "uniform", "shifted_mean", "heavy_tailed"))
    rep = C.check("bound_no_worse", model, options=opts, fusion=fusion, shrink_cex=False)
    margins = _bound_no_worse_by_hand(model, opts, fusion)
    assert all(map(math.isfinite, margins))
    assert rep.verdict == verdict == ("fails" if max(margins) > 0 else "holds")
    assert rep.violations == sum(m > 0 for m in margins)
    assert rep.worst_margin == pytest.approx(max(margins), rel=1e-12)
    assert rep.worst_trial == int(np.argmax(margins))
    assert rep.exit_code == (0 if rep.holds else 1)


def test_population_claim_vs_independent_pooled_percentiles():
    rep = C.check("no_worse_population", "softmax", trials=6,
                  options=C.SearchOptions(trials=6, kinds=("normal",)))
    ef, ee = [], []
    for t in range(6):
        r = C.evaluate("no_worse_elementwise", C.make_case("softmax", kind="normal", trial=t))
        ref = r.outputs["reference"]["y"]
        ef.append(np.abs(r.outputs["fused"]["y"].astype(np.float64) - ref).ravel())
        ee.append(np.abs(r.outputs["eager"]["y"].astype(np.float64) - ref).ravel())
    ef, ee = np.sort(np.concatenate(ef)), np.sort(np.concatenate(ee))
    k = math.ceil(0.99 * ef.size) - 1
    st = rep.population["y"]
    assert st["fused_p99"] == ef[k] and st["eager_p99"] == ee[k]
    assert st["fused_max"] == ef[-1] and st["eager_max"] == ee[-1]
    assert rep.holds == (ef[k] <= ee[k] and ef[-1] <= ee[-1])


def _margins(rep):
    return (rep.holds, rep.violations, rep.worst_margin, rep.worst_trial, json.dumps(rep.worst_detail))


def test_results_identical_across_executors():
    opts = C.SearchOptions(trials=12, chunk=4)
    base = C.check("no_worse_tensor", "softmax", options=opts, shrink_cex=False)
    with ProcessPoolExecutor(max_workers=2) as ex:
        pp = C.check("no_worse_tensor", "softmax", options=opts, executor=ex, shrink_cex=False)
        cd = C.check("compile_determinism", "softmax", options=opts, executor=ex)
    assert _margins(base) == _margins(pp)
    assert cd.holds and len(cd.fingerprints) == 1  # same fingerprint in every worker process


def test_results_identical_with_dask_local_cluster():
    distributed = pytest.importorskip("dask.distributed", reason="dask.distributed is not installed")
    opts = C.SearchOptions(trials=8, chunk=4)
    base = C.check("no_worse_tensor", "softmax", options=opts, shrink_cex=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        dk = C.check("no_worse_tensor", "softmax", options=opts, executor=client, shrink_cex=False)
        sw = C.sweep(_square, [1, 2, 3], executor=client)
    assert _margins(base) == _margins(dk)
    assert sw == [1, 4, 9]


def _square(v):
    return v * v


def test_plan_numbers_vs_independent(tmp_path):
    c1 = C.plan_c1(128)
    # independent: ml_dtypes rounding of the exact products; broadcast rounds 0.7 to fp16 first
    rng = np.random.default_rng([0, 1])
    x = rng.uniform(-1, 1, (128, 128)).astype(np.float16).astype(np.float64)
    ref = x * 0.7
    muls = (x * float(np.float32(0.7))).astype(np.float16)
    bc = (x * float(np.float16(0.7))).astype(np.float16)
    for how, y in (("muls", muls), ("broadcast", bc)):
        d = metrics.ulp_distance(ref, y, "fp16")
        assert c1[how]["ulp0"] == np.mean(d == 0) and c1[how]["ulp1"] == np.mean(d == 1)
        assert c1[how]["ulp0"] + c1[how]["ulp1"] + c1[how]["ulp_ge2"] == pytest.approx(1.0)
    assert c1["muls"]["ulp0"] > c1["broadcast"]["ulp0"]
    c2 = C.plan_c2(2048, (256, 512), rows=4)
    assert all(r["bound_holds"] for r in c2.values())
    c3 = C.plan_c3(5000)
    assert c3[3]["ulp_ge2"] <= c3[2]["ulp_ge2"] and c3[3]["ulp0"] >= c3[2]["ulp0"]
    res = C.run_plan(str(tmp_path / "plan"), trials=5, quick=True)
    for f in ("plan.csv", "plan.txt"):
        assert (tmp_path / "plan" / f).exists()
    assert not list((tmp_path / "plan").glob("*.png"))  # claims draw nothing; the CLI draws the figures
    assert set(res["chains"]) == set(C.PLAN_CHAINS)
    with pytest.raises(FileExistsError, match="force"):
        C.run_plan(str(tmp_path / "plan"), trials=5, quick=True)
    rc = cli_main(["check", "plan", "--out", str(tmp_path / "cli"), "--trials", "2", "--quick"])
    for f in ("plan.csv", "plan.txt", "plan_c1.png", "plan_c2.png", "plan_c3.png", "plan_chains.png"):
        assert (tmp_path / "cli" / f).exists()
    rows = list(csv.DictReader(open(tmp_path / "cli" / "plan.csv")))
    verdicts = {r["value"] for r in rows if r["check"] == "chain" and r["metric"] == "verdict"}
    assert rc == (1 if "FAIL" in verdicts else 2 if "UNDECIDED" in verdicts else 0)
    # the chains figure marks each verdict by its first letter: P, F and U (UNDECIDED is not an F)
    spec = next(iter(res["fusions"]))
    labels = list(res["chains"])
    want = {labels[0]: "PASS", labels[1]: "FAIL", labels[2]: "UNDECIDED"}
    for lb, v in want.items():
        res["chains"][lb][spec]["verdict"] = v
    figs = plots.plan_figures(res)
    title = figs["plan_chains.png"].axes[0].get_title()
    assert title.endswith("verdicts PFU" + res["chains"][labels[3]][spec]["verdict"][0]), title


@pytest.mark.parametrize("verdicts, code", [(("PASS", "PASS"), 0), (("PASS", "UNDECIDED"), 2),
                                            (("FAIL", "UNDECIDED"), 1), (("FAIL", "PASS"), 1)])
def test_cli_plan_exit_codes(monkeypatch, capsys, tmp_path, verdicts, code):
    # the plan's exit code from its verdicts: any FAIL -> 1, else any UNDECIDED -> 2, else 0
    chains = {"a": {"autofuse": {"verdict": verdicts[0]}}, "b": {"autofuse": {"verdict": verdicts[1]}}}
    monkeypatch.setattr(C, "run_plan", lambda *a, **k: {"chains": chains, "table": "T"})
    assert cli_main(["check", "plan", "--out", str(tmp_path), "--no-figures"]) == code
    out = capsys.readouterr().out
    assert ("undecided" in out) == ("UNDECIDED" in verdicts) and ("fails for: a" in out) == ("FAIL" in verdicts)


def test_plan_reports_every_requested_fusion_configuration(tmp_path):
    # default: the four configurations, each chain judged under each, in the table, text and CSV
    assert C.PLAN_FUSIONS == ("autofuse", "autofuse+decompose", "autofuse:--autofuse_enable_pass=reduce+decompose",
                              "inductor")
    res = C.run_plan(str(tmp_path / "d"), trials=3, quick=True)
    assert list(res["fusions"]) == list(C.PLAN_FUSIONS)
    for label in C.PLAN_CHAINS:
        assert list(res["chains"][label]) == list(C.PLAN_FUSIONS)
        assert all(r["verdict"] in ("PASS", "FAIL") and r["fusion"] == spec
                   for spec, r in res["chains"][label].items())
    text = (tmp_path / "d" / "plan.txt").read_text()
    for i, spec in enumerate(C.PLAN_FUSIONS):
        assert f"F{i + 1} = {spec}: " in text
    # the header says what each configuration means (decomposed or not, what is fused)
    assert "F1 = autofuse: composites kept whole" in text
    assert "F2 = autofuse+decompose: composites (layer_norm, softmax) decomposed" in text
    assert "fused: elementwise, broadcast, reshape, reduce;" in res["fusions"][
        "autofuse:--autofuse_enable_pass=reduce+decompose"]
    assert "separate kernels: reduce," in res["fusions"]["autofuse"]
    assert "mean, variance" in res["fusions"]["autofuse+decompose"]
    rows = list(csv.DictReader(open(tmp_path / "d" / "plan.csv")))
    assert {"check", "case", "fusion", "metric", "value"} <= set(rows[0])
    verdicts = {(r["case"], r["fusion"]): r["value"] for r in rows if r["check"] == "chain" and r["metric"] == "verdict"}
    assert set(verdicts) == {(lb, sp) for lb in C.PLAN_CHAINS for sp in C.PLAN_FUSIONS}
    assert all(verdicts[lb, sp] == res["chains"][lb][sp]["verdict"] for lb, sp in verdicts)
    # CLI: --fusion repeatable and comma-separated; a comma inside an AUTOFUSE_FLAGS pass list stays
    out = tmp_path / "cli"
    rc = cli_main(["check", "plan", "--out", str(out), "--trials", "2", "--quick", "--no-figures",
                   "--fusion", "off,autofuse:--autofuse_enable_pass=concat,reduce", "--fusion", "inductor"])
    rows = list(csv.DictReader(open(out / "plan.csv")))
    got = {r["fusion"] for r in rows if r["check"] == "chain"}
    assert got == {"off", "autofuse:--autofuse_enable_pass=concat,reduce", "inductor"}
    fails = [r for r in rows if r["check"] == "chain" and r["metric"] == "verdict" and r["value"] == "FAIL"]
    assert rc == (1 if fails else 0)
    # API: specs and objects, split with the fusion module's rule, parsed by FusionOptions.parse,
    # keyed by canonical spec, duplicates dropped
    res = C.run_plan(None, trials=1, quick=True, fusion=["autofuse, inductor,autofuse",
                                                         FusionOptions.inductor(decompose=False)])
    assert list(res["fusions"]) == ["autofuse", "inductor", "inductor+nodecompose"]
    with pytest.raises(ValueError, match="fancy"):
        C.run_plan(None, trials=1, quick=True, fusion="autofuse,fancy")
    with pytest.raises(ValueError, match="no configuration"):
        C.run_plan(None, trials=1, quick=True, fusion=" , ")
    with pytest.raises(TypeError, match="fusion"):
        C.run_plan(None, trials=1, quick=True, fusion=["autofuse", 3])


def test_nodecompose_layernorm_is_eager_bit_for_bit():
    # with composites kept whole (the autofuse default), the fused plan runs layer_norm as the same library
    # kernel as eager: outputs are bitwise equal; decomposed (autofuse+decompose) they are not (fp16
    # mean/variance in between)
    g = C.get_model("layernorm", {"batch": 4, "hidden": 64})
    whole, dec = P("autofuse"), P("autofuse+decompose")
    assert whole == P(None) == P("autofuse+nodecompose") and not whole.decompose and dec.decompose
    differs = 0
    for t in range(20):
        xin = C.make_case("layernorm", sizes={"batch": 4, "hidden": 64}, trial=t).inputs
        e = run(g, xin, mode="eager", fmt="fp16").outputs["y"]
        r = run(g, xin, mode="fused", fmt="fp16", fusion=whole)
        f = r.outputs["y"]
        assert e.dtype == f.dtype == np.float16
        assert_same_bits(e, f)
        fd = run(g, xin, mode="fused", fmt="fp16", fusion=dec).outputs["y"]
        differs += int(np.count_nonzero(~same_bits_mask(e, fd)))
    assert not r.plan.decomposed and len(r.plan.blocks) == 1
    assert differs > 0


def _nearest_rank(v, q):
    s = np.sort(v)
    k = -(-q * s.size // 100)  # ceil(q n / 100) with integers (q an int)
    return float(s[max(k, 1) - 1])


def test_plan_verdicts_recomputed_from_raw_errors():
    # P99 (nearest rank), max and the verdict of each chain/configuration, recomputed from numlab.run outputs
    specs = ["autofuse", "autofuse+decompose", "inductor"]
    trials = 4
    res = C.run_plan(None, trials=trials, quick=True, fusion=specs, seed=5)
    seen = set()
    for label in ("layernorm", "softmax"):
        model, sizes = C.PLAN_CHAINS[label]
        g = C.get_model(model, sizes)
        for spec in specs:
            ef, ee, same = [], [], 0
            for t in range(trials):
                xin = C.make_case(model, sizes=sizes, trial=t, seed=5).inputs
                ref = run(g, xin, mode="reference", fmt="fp16").outputs["y"].astype(np.float64)
                e = np.asarray(run(g, xin, mode="eager", fmt="fp16").outputs["y"])
                f = np.asarray(run(g, xin, mode="fused", fmt="fp16", fusion=P(spec)).outputs["y"])
                ee.append(np.abs(e.astype(np.float64) - ref).ravel())
                ef.append(np.abs(f.astype(np.float64) - ref).ravel())
                same += int(np.count_nonzero(same_bits_mask(e, f)))
            ef, ee = np.concatenate(ef), np.concatenate(ee)
            got = res["chains"][label][spec]
            assert got["fused_p99"] == _nearest_rank(ef, 99) and got["eager_p99"] == _nearest_rank(ee, 99)
            assert got["fused_max"] == ef.max() and got["eager_max"] == ee.max()
            assert got["elements"] == ef.size and got["bitwise_equal_share"] == same / ef.size
            ok = _nearest_rank(ef, 99) <= _nearest_rank(ee, 99) and ef.max() <= ee.max()
            assert got["verdict"] == ("PASS" if ok else "FAIL")
            seen.add((label, spec, ok))
    # decomposed with reductions as separate kernels fails; composites whole or one fp32 block passes
    assert ("layernorm", "autofuse+decompose", False) in seen and ("softmax", "autofuse+decompose", False) in seen
    for label in ("layernorm", "softmax"):
        assert (label, "autofuse", True) in seen and (label, "inductor", True) in seen


def test_cli_exit_codes(tmp_path, capsys):
    assert cli_main(["check", "execution_determinism", "softmax", "--trials", "3"]) == 0
    rc = cli_main(["check", "no_worse_tensor", "layernorm", "--trials", "10", "--out", str(tmp_path),
                   "--fusion", "autofuse+decompose"])
    out = capsys.readouterr().out
    assert rc == 1 and "worst case trial" in out and str(tmp_path) in out
    assert cli_main(["check", "no_worse_tensor", "nope"]) == 2
    assert "argument MODEL: MODEL 'nope' is not known" in capsys.readouterr().err
    assert cli_main(["check", "not_a_claim", "layernorm"]) == 2
    assert "invalid choice: 'not_a_claim'" in capsys.readouterr().err
    assert cli_main(["check", "list"]) == 0


def test_bfloat16_case_runs():
    case = C.make_case("softmax", fmt="bf16", trial=0)
    r = C.evaluate("no_worse_tensor", case)
    assert r.outputs["eager"]["y"].dtype == np.dtype(ml_dtypes.bfloat16)


def test_emulated_casts_claim_needs_decomposition_off():
    # the note's emulated-casts patch: emulate precision casts + eager's instructions/tiling/algorithms -> bitwise eager,
    # with composites kept whole (the autofuse default; execute documents fused == eager in that configuration)
    for model in ("layernorm", "softmax", "mul_add_gelu_mul"):
        assert C.check("emulated_casts_match_eager", model, trials=4).holds
    # decomposed, the composite's internals are a different program: the claim fails
    rep = C.check("emulated_casts_match_eager", "layernorm", fusion="autofuse+decompose", trials=4, shrink_cex=False)
    assert not rep.holds and rep.worst_detail["mismatches"] > 0
    with pytest.raises(ValueError, match="fancy"):
        C.check("emulated_casts_match_eager", "layernorm", fusion="fancy", trials=1)


def test_committed_counterexamples_are_intact():
    root = os.path.join(os.path.dirname(__file__), "..", "data", "counterexamples")
    paths = sorted(glob.glob(os.path.join(root, "*.json")))
    assert paths, "data/counterexamples holds the shipped counterexamples"
    for p in paths:
        case, meta, arrs = C.load_counterexample(p)
        assert meta["claim"] in C.CLAIMS and meta["model"] == case.model
        assert case.fmt == (meta["fmt"] if "fmt" in meta else meta["dtype"])  # "dtype": saved before the rename
        ins = {k: v for k, v in arrs.items() if k.startswith("input/")}
        assert C.sha256_arrays(ins) == meta["inputs_sha256"]  # the files were not altered
        assert os.path.basename(p).split("__")[-1][:12] == meta["inputs_sha256"][:12]
        assert case.fusion == FusionOptions.parse(meta["fusion"]).spec  # the spec names what ran
        rr = C.reproduce(p)  # still reproduced bit for bit, and still a decided violation
        assert rr["bitwise"] and rr["fingerprints_equal"] and rr["verdict"] == "fails"


# ---------------------------------------------------------------- verdicts: never a vacuous "holds"
def test_ordinary_zoo_inputs_are_decided():
    # every zoo model's normal inputs, both storage formats: the bound claims decide (no inf bound)
    for model in ("layernorm", "softmax", "mul_add_gelu_mul", "matmul_add_layernorm"):
        for fmt in ("fp16", "bf16"):
            opts = C.SearchOptions(trials=2, kinds=("normal",))
            for claim in ("error_within_bound", "bound_no_worse", "no_worse_tensor"):
                rep = C.check(claim, model, fmt=fmt, options=opts, shrink_cex=False)
                assert rep.verdict in ("holds", "fails") and rep.undecided == 0, rep.summary()
                assert rep.exit_code == {"holds": 0, "fails": 1}[rep.verdict]


def test_op_without_bound_rule_is_undecided_and_named(monkeypatch):
    # an operator the bound rules do not know: inf bounds; the bound claims must not hold
    # (a registered operator always has rules: remove gelu's from its registration for this test)
    monkeypatch.setitem(ops.CATALOGUE, "gelu", dataclasses.replace(ops.CATALOGUE["gelu"], propagate=None))
    opts = C.SearchOptions(trials=2, kinds=("normal",))
    for claim in ("error_within_bound", "bound_no_worse"):
        rep = C.check(claim, "mul_add_gelu_mul", options=opts, shrink_cex=False)
        assert rep.verdict == "undecided" and not rep.holds and rep.exit_code == 2, rep.summary()
        assert rep.undecided == 2 and rep.violations == 0 and rep.counterexample is None
        ops_named = {s["op"] for s in rep.undecided_detail["responsible"]}
        assert ops_named == {"gelu"}
        assert all(s["causes"] == {"no_rule": s["causes"]["no_rule"]} for s in rep.undecided_detail["responsible"])
        text = rep.summary()
        assert "UNDECIDED" in text and "gelu" in text and "no_rule" in text
    # the same with the rule present decides
    monkeypatch.undo()
    assert C.check("error_within_bound", "mul_add_gelu_mul", options=opts).verdict == "holds"


def test_overflow_is_undecided_not_holds():
    # x * 0.7 of values near the fp16 maximum, then multiplied by a large w: the computed outputs
    # overflow to inf in both modes, so the running bounds are inf and both errors inf
    case = C.make_case("mul_add_gelu_mul", kind="normal", trial=0)
    x = np.full_like(case.inputs["x"], 60000.0)
    w = np.full_like(case.inputs["w"], 60000.0)
    big = C.Case(case.model, case.sizes, case.fmt, case.fusion, {**case.inputs, "x": x, "w": w})
    for claim in ("error_within_bound", "bound_no_worse", "no_worse_tensor", "no_worse_elementwise"):
        r = C.evaluate(claim, big)
        assert r.verdict == "undecided" and not r.holds and not r.fails, (claim, r.detail, r.undecided)
        assert r.undecided["reason"]
    r = C.evaluate("error_within_bound", big)
    causes = {(s["mode"], s["op"]): s["causes"] for s in r.undecided["responsible"]}
    assert any("overflow" in c for c in causes.values()), causes
    # an undecided case is not a violation: nothing to shrink
    with pytest.raises(ValueError, match="undecided"):
        C.shrink("error_within_bound", big)


def test_population_undecided_when_both_infinite():
    inf = np.full(4, np.inf)
    r = C.CLAIMS["no_worse_population"].fn([{"y": (inf, inf)}])
    assert r.verdict == "undecided" and "y" in r.undecided["reason"]
    fin = np.ones(4)
    assert C.CLAIMS["no_worse_population"].fn([{"y": (fin, inf)}]).verdict == "holds"
    assert C.CLAIMS["no_worse_population"].fn([{"y": (inf, fin)}]).verdict == "fails"
    assert C.CLAIMS["no_worse_population"].fn([]).verdict == "undecided"


def test_fusion_object_is_kept_not_replaced_by_default():
    # an object given is parsed, stored as its canonical spec and run: never silently autofuse
    ind = FusionOptions.inductor()
    case = C.make_case("layernorm", fusion=ind)
    assert case.fusion == ind.spec == "inductor" and P(case.fusion) == ind
    assert C.make_case("layernorm").fusion == "autofuse"
    rep_obj = C.check("no_worse_tensor", "layernorm", trials=2, fusion=ind, shrink_cex=False)
    rep_str = C.check("no_worse_tensor", "layernorm", trials=2, fusion="inductor", shrink_cex=False)
    rep_auto = C.check("no_worse_tensor", "layernorm", trials=2, fusion="autofuse", shrink_cex=False)
    assert rep_obj.fusion == "inductor" and rep_obj.fingerprints == rep_str.fingerprints
    assert rep_obj.fingerprints != rep_auto.fingerprints
    flags = FusionOptions.autofuse("--autofuse_enable_pass=reduce")
    assert C.make_case("softmax", fusion=flags).fusion == "autofuse:--autofuse_enable_pass=reduce"
    for bad in ("fancy", "inductor:--x=1", "autofuse+sideways"):
        with pytest.raises(ValueError, match="fusion"):
            C.make_case("layernorm", fusion=bad)
    with pytest.raises(TypeError, match="fusion"):
        C.check("no_worse_tensor", "layernorm", trials=1, fusion=3)


def test_claims_draw_no_figures():
    for mod in (C.catalogue, C.cases, C.search, C.shrink, C.store, C.plan):
        src = inspect.getsource(mod)
        assert "matplotlib.use" not in src and "pyplot" not in src and "savefig" not in src, mod.__name__


def test_public_names_resolve():
    for name in C.__all__:
        assert getattr(C, name) is not None, name
    assert C.EXIT_CODES == {"holds": 0, "fails": 1, "undecided": 2} and C.VERDICTS == ("holds", "fails", "undecided")


def test_cli_exit_code_2_for_undecided(capsys):
    # bf16 near_overflow inputs (trial 4) overflow in both modes: the running bound is inf there
    rc = cli_main(["check", "error_within_bound", "layernorm", "--fmt", "bf16", "--trials", "5",
                   "--no-save"])
    out = capsys.readouterr().out
    assert "UNDECIDED" in out and "responsible operators" in out
    assert rc == 2 and "counterexample" not in out
    # the CLI's own closing lines: the verdict and each responsible operator with its causes
    tail = out[out.index("\nundecided: "):]
    assert "1 of 5 cases" in tail and "contract bound infinite" in tail
    assert re.search(r"responsible: \w+ \((eager|fused) node [\w.]+: \w+ \d+", tail), tail


def test_population_worse_fused_p99_fails_when_eager_max_is_inf():
    # hand-built population: eager has 2 of 200 errors infinite (so its max is inf) and 1e-3 elsewhere;
    # fused is finite everywhere but 5e-3, i.e. its P99 (nearest rank: the 198th of 200 sorted) is 5x
    # worse.  The old rule scaled both margins by max(eager P99, eager max) = inf and called it 0:
    # "holds".  fused P99 <= eager P99 is false and decided from finite numbers, so the claim fails.
    ee = np.full(200, 1e-3)
    ee[[7, 150]] = np.inf
    ef = np.full(200, 5e-3)
    assert _nearest_rank(ee, 99) == 1e-3 and _nearest_rank(ef, 99) == 5e-3
    r = C.CLAIMS["no_worse_population"].fn([{"y": (ef[:120], ee[:120])}, {"y": (ef[120:], ee[120:])}])
    assert r.verdict == "fails" and r.margin == pytest.approx((5e-3 - 1e-3) / 1e-3)
    assert r.stats["y"] == {"fused_p99": 5e-3, "eager_p99": 1e-3, "fused_max": 5e-3, "eager_max": np.inf,
                            "elements": 200}
    # fused P99 no worse (1e-3) and fused max finite against an infinite eager max: decided, holds
    r = C.CLAIMS["no_worse_population"].fn([{"y": (np.full(200, 1e-3), ee)}])
    assert r.verdict == "holds"
    # max infinite on both sides: the P99s still decide a violation ...
    ef2 = ef.copy()
    ef2[3] = np.inf
    assert C.CLAIMS["no_worse_population"].fn([{"y": (ef2, ee)}]).verdict == "fails"
    # ... but when they do not violate, the max comparison is missing: undecided, with the reason
    ok = np.full(200, 1e-3)
    ok[3] = np.inf
    r = C.CLAIMS["no_worse_population"].fn([{"y": (ok, ee)}])
    assert r.verdict == "undecided" and "y" in r.undecided["reason"] and "infinite" in r.undecided["reason"]


def test_fmt_is_the_storage_format():
    a = C.make_case("softmax", fmt="bf16", trial=1)
    assert a.fmt == "bf16" and C.make_case("softmax").fmt == "fp16"
    assert all(v.dtype == np.float64 and np.array_equal(v, v.astype(ml_dtypes.bfloat16).astype(np.float64))
               for v in a.inputs.values())  # the inputs are bf16 values
    rep = C.check("no_worse_tensor", "softmax", fmt="bf16", trials=1, shrink_cex=False)
    assert rep.fmt == "bf16"


def test_empty_outputs_decide_nothing():
    """A case whose outputs have no elements: every value-based claim is undecided
    (it used to say holds for inductor_rule, execution_determinism and
    emulated_casts_match_eager, and to crash on a max over no elements for
    no_worse_tensor, bound_no_worse and fp32_inside); compile determinism, decided by
    fingerprints, still decides."""
    case = C.make_case("mul_scalar", sizes={"batch": 0})
    for name, claim in C.CLAIMS.items():
        if claim.scope != "case":
            continue
        r = C.evaluate(name, case)
        if name == "compile_determinism":
            assert r.holds
        else:
            assert not r.holds and r.undecided and "no output elements" in r.undecided["reason"], name
