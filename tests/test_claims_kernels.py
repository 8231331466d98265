"""Claims on given kernel specs: ``kernels=`` (the fused side's kernels) and
``library=`` (eager's library kernels) reach every run a claim makes --
eager, fused, emulated casts, running bounds, determinism re-runs -- are kept
in cases, reports and saved counterexamples, and ``numlab check`` takes them
as ``--kernels`` / ``--library``.  The matrix unit (``mma=``) is the knob
that shows it: gelu_mlp with every matmul on the H100 fp8 unit."""

from __future__ import annotations

import glob
import json
import math
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from _oracles import assert_same_bits

from numlab import claims as C
from numlab.bounds import contract_bound
from numlab.cli import main as cli_main
from numlab.execute import run
from numlab.formats import get_format
from numlab.kernels import KernelSpec

UNIT = "H100/fp8_e4m3/fp32"
GEN = f"codegen:mma={UNIT}"
LIB = f"handwritten:mma={UNIT}"
# autofusion with matmul-epilogue fusion on: each matmul is a code-generated block (numlab mma sweep's table)
MM_FUSION = "autofuse:--autofuse_enable_pass=elementwise,broadcast,reshape,matmul"
OPTS = C.SearchOptions(trials=3, kinds=("normal",))
FAMILY = ("no_worse_elementwise", "no_worse_tensor", "fp32_inside", "bound_no_worse", "error_within_bound")


def _direct(case, mode):
    """``mode``'s run of ``case`` with the case's kernels, by numlab.execute directly (not the claims)."""
    kw = {}
    if mode == "eager":
        kw = {"kernels": case.library}
    elif mode == "fused":
        kw = {"kernels": case.kernels, "library": case.library, "fusion": C.Runs(case).fusion}
    with np.errstate(all="ignore"):
        return run(case.graph(), case.inputs, mode=mode, fmt=case.fmt, **kw)


def test_the_grammar_names_the_unit_kernels():
    k, lib = KernelSpec.parse(GEN), KernelSpec.parse(LIB)
    assert k.mma is not None and k.mma == lib.mma and k.mma.in_fmt == "fp8_e4m3"
    assert (k.spec, lib.spec) == (GEN, LIB)


def test_unit_verdicts_through_the_public_api():
    """The 'fp32 inside' family on gelu_mlp with every matmul on the H100 fp8
    unit: fused no worse than eager and fp32 inside fail (the measured errors);
    the contract bounds decide bound_no_worse for the plan -- the unit's
    block roundings are in both modes' bounds and eager adds its roundings to
    S, so fused's bound is the smaller and it holds -- and the observed errors
    stay within them; with numlab's default kernels every one holds."""
    expect = {"no_worse_elementwise": "fails", "no_worse_tensor": "fails", "fp32_inside": "fails",
              "bound_no_worse": "holds", "error_within_bound": "holds"}
    for name in FAMILY:
        on = C.check(name, "gelu_mlp", fusion=MM_FUSION, options=OPTS, shrink_cex=False, kernels=GEN, library=LIB)
        plain = C.check(name, "gelu_mlp", fusion=MM_FUSION, options=OPTS, shrink_cex=False)
        assert (on.verdict, plain.verdict) == (expect[name], "holds"), (on.summary(), plain.summary())
        assert (on.kernels, on.library) == (GEN, LIB) and (plain.kernels, plain.library) == ("codegen", "handwritten")
        assert on.exit_code == {"holds": 0, "fails": 1}[expect[name]]
        assert f"fused {GEN}, eager's library {LIB}" in on.summary()
        if on.verdict == "fails":
            case, res = on.counterexample
            assert (case.kernels, case.library) == (GEN, LIB) and res.fails


def test_kernels_change_the_case_fingerprints_and_the_result():
    """kernels= and library= change no input but every run they name: the
    case's compile fingerprints and the claim's margin."""
    base = C.make_case("gelu_mlp", fusion=MM_FUSION, trial=1)
    gen = C.make_case("gelu_mlp", fusion=MM_FUSION, trial=1, kernels=KernelSpec.codegen(mma=UNIT))
    lib = C.make_case("gelu_mlp", fusion=MM_FUSION, trial=1, library=LIB)
    assert gen.kernels == GEN and gen.library == "handwritten" and lib.library == LIB and lib.kernels == "codegen"
    for c in (gen, lib):  # the inputs depend only on (model, sizes, fmt, kind, seed, trial)
        assert c.inputs.keys() == base.inputs.keys()
        assert all(np.array_equal(c.inputs[k], base.inputs[k]) for k in base.inputs)
    r0, rg, rl = (C.evaluate("no_worse_tensor", c) for c in (base, gen, lib))
    assert rg.fingerprints["fused"] != r0.fingerprints["fused"]  # the code generator's spec
    assert rg.fingerprints["eager"] == r0.fingerprints["eager"]  # eager does not run the code generator
    assert rl.fingerprints["eager"] != r0.fingerprints["eager"]  # eager's library
    assert rl.fingerprints["fused"] != r0.fingerprints["fused"]  # the fused plan calls the library too
    assert len({r0.margin, rg.margin, rl.margin}) == 3
    # the claims' runs are numlab.execute's runs with the case's kernels, bit for bit
    for case, r in ((base, r0), (gen, rg), (lib, rl)):
        for mode in ("eager", "fused"):
            got, want = r.outputs[mode]["y"], np.asarray(_direct(case, mode).outputs["y"])
            assert_same_bits(got, want, what=mode)


def test_no_worse_tensor_margin_recomputed_from_the_unit_runs():
    """no_worse_tensor's margin on the unit, recomputed by hand from
    numlab.execute runs with the unit's kernels: (max |fused - ref| -
    max |eager - ref|) / (u_S max |ref|)."""
    case = C.make_case("gelu_mlp", fusion=MM_FUSION, trial=1, kernels=GEN, library=LIB)
    r = C.evaluate("no_worse_tensor", case)
    S = get_format("fp16")
    with np.errstate(all="ignore"):
        ref = np.asarray(run(case.graph(), case.inputs, mode="reference", fmt="fp16").outputs["y"], dtype=np.float64)
    f = np.asarray(_direct(case, "fused").outputs["y"], dtype=np.float64)
    e = np.asarray(_direct(case, "eager").outputs["y"], dtype=np.float64)
    want = (np.max(np.abs(f - ref)) - np.max(np.abs(e - ref))) / (S.u * np.max(np.abs(ref)))
    assert r.fails and math.isclose(r.margin, float(want), rel_tol=1e-12)


def test_bound_claims_use_the_unit_bounds():
    """bound_no_worse and error_within_bound read the contract bounds of the
    case's kernels: recomputed with numlab.bounds.contract_bound under the
    unit's kernels they give the claims' numbers; with the default kernels
    (no unit in the contract) they would not."""
    case = C.make_case("gelu_mlp", fusion=MM_FUSION, trial=0, kernels=GEN, library=LIB)
    fusion = C.Runs(case).fusion
    S = get_format("fp16")
    b = {mode: contract_bound(case.graph(), case.inputs, mode=mode, fmt="fp16", kernels=GEN, library=LIB,
                              fusion=fusion if mode == "fused" else None)["y"] for mode in ("eager", "fused")}
    plain_fused = contract_bound(case.graph(), case.inputs, mode="fused", fmt="fp16", fusion=fusion)["y"]
    assert float(np.max(plain_fused)) != float(np.max(b["fused"]))  # the unit's bound is another bound
    r = C.evaluate("bound_no_worse", case)
    assert r.detail["fused_bound_max"] == float(np.max(b["fused"]))
    assert r.detail["eager_bound_max"] == float(np.max(b["eager"]))
    ref = np.asarray(run(case.graph(), case.inputs, mode="reference", fmt="fp16").outputs["y"], dtype=np.float64)
    want = (np.max(b["fused"]) - np.max(b["eager"])) / (S.u * np.max(np.abs(ref)))
    assert math.isclose(r.margin, float(want), rel_tol=1e-12) and r.verdict == ("fails" if want > 0 else "holds")
    w = C.evaluate("error_within_bound", case)
    assert w.verdict == "holds"


def test_determinism_claims_rerun_the_same_kernels():
    # a re-run with other kernels would differ: both determinism claims hold only if the re-runs take the case's
    case = C.make_case("gelu_mlp", fusion=MM_FUSION, kernels=GEN, library=LIB)
    for name in ("compile_determinism", "execution_determinism"):
        assert C.evaluate(name, case).verdict == "holds"
    r = C.evaluate("compile_determinism", case)
    assert r.detail["fingerprint"] == _direct(case, "fused").fingerprint


def test_counterexample_saves_and_reproduces_its_kernels(tmp_path):
    rep = C.check("no_worse_tensor", "gelu_mlp", fusion=MM_FUSION, options=OPTS, kernels=GEN, library=LIB,
                  save=str(tmp_path), shrink_cex=False)
    assert rep.verdict == "fails" and rep.saved
    meta = json.loads(open(rep.saved + ".json").read())
    assert meta["kernels"] == {"fused": GEN, "fused_library": LIB, "eager": LIB}
    case, _, _ = C.load_counterexample(rep.saved)
    assert (case.kernels, case.library) == (GEN, LIB)
    rr = C.reproduce(rep.saved)
    assert rr["bitwise"] and rr["fingerprints_equal"] and rr["verdict"] == "fails"
    assert (rr["kernels"], rr["library"]) == (GEN, LIB)
    # the same inputs under the default kernels are another file (the kernels are in the name's hash)
    plain_case = C.make_case("gelu_mlp", fusion=MM_FUSION, trial=rep.worst_trial)
    assert all(np.array_equal(plain_case.inputs[k], rep.counterexample[0].inputs[k]) for k in plain_case.inputs)
    stem = C.save_counterexample("no_worse_tensor", plain_case, C.evaluate("no_worse_tensor", plain_case),
                                 str(tmp_path))
    assert stem != rep.saved
    # the kernels matter for reproduction: the file with its kernels replaced by the defaults no longer is
    meta["kernels"] = {"fused": "codegen", "fused_library": "handwritten", "eager": "handwritten"}
    open(rep.saved + ".json", "w").write(json.dumps(meta))
    rr = C.reproduce(rep.saved)
    assert not rr["bitwise"] and not rr["fingerprints_equal"]


def test_old_counterexample_files_read_as_the_default_kernels():
    root = os.path.join(os.path.dirname(__file__), "..", "data", "counterexamples")
    paths = sorted(glob.glob(os.path.join(root, "*.json")))
    assert paths
    kinds = set()
    for p in paths:
        case, meta, _ = C.load_counterexample(p)
        kinds.add("kernels" in meta)
        # written before kernel specs were saved: no "kernels", or descriptions of the defaults
        assert meta.get("kernels") in (None, {"eager": "KernelSpec.handwritten()", "fused": "KernelSpec.codegen()",
                                              "fused_library": "KernelSpec.handwritten()"})
        assert (case.kernels, case.library) == ("codegen", "handwritten")
    assert kinds == {True, False}  # both old layouts are exercised


def test_a_saved_case_has_one_library(tmp_path):
    rep = C.check("no_worse_tensor", "gelu_mlp", fusion=MM_FUSION, options=OPTS, kernels=GEN, library=LIB,
                  save=str(tmp_path), shrink_cex=False)
    meta = json.loads(open(rep.saved + ".json").read())
    meta["kernels"]["eager"] = "handwritten"
    open(rep.saved + ".json", "w").write(json.dumps(meta))
    with pytest.raises(ValueError, match="eager's library 'handwritten' differs from the fused plan's library"):
        C.load_counterexample(rep.saved)


def test_bad_kernel_specs_name_the_argument():
    with pytest.raises(ValueError, match=r"kernels='codegen:nope=1'.*valid fields"):
        C.check("no_worse_tensor", "gelu_mlp", options=OPTS, kernels="codegen:nope=1")
    with pytest.raises(ValueError, match=r"library='fast'.*valid presets"):
        C.make_case("gelu_mlp", library="fast")
    with pytest.raises(TypeError, match="library must be a kernel spec string"):
        C.make_case("gelu_mlp", library=3)


def test_kernels_reach_executor_tasks():
    # the payload carries the specs: a process pool gives the in-process verdict and margin
    opts = C.SearchOptions(trials=2, kinds=("normal",), chunk=1)
    here = C.check("no_worse_elementwise", "gelu_mlp", fusion=MM_FUSION, options=opts, shrink_cex=False,
                   kernels=GEN, library=LIB)
    with ProcessPoolExecutor(max_workers=1) as ex:
        there = C.check("no_worse_elementwise", "gelu_mlp", fusion=MM_FUSION, options=opts, shrink_cex=False,
                        kernels=GEN, library=LIB, executor=ex)
    assert here.verdict == there.verdict == "fails"
    assert here.worst_margin == there.worst_margin and here.fingerprints == there.fingerprints


def test_given_inputs_take_the_kernels_too():
    case = C.make_case("gelu_mlp", fusion=MM_FUSION, trial=1)
    on = C.check("no_worse_tensor", "gelu_mlp", inputs=case.inputs, fusion=MM_FUSION, kernels=GEN, library=LIB,
                 shrink_cex=False)
    plain = C.check("no_worse_tensor", "gelu_mlp", inputs=case.inputs, fusion=MM_FUSION, shrink_cex=False)
    assert (on.verdict, plain.verdict) == ("fails", "holds") and on.kernels == GEN


def _check_cli(*extra):
    return cli_main(["check", "no_worse_tensor", "gelu_mlp", "--trials", "3", "--inputs", "normal", "--no-save",
                     "--no-shrink", *extra])


def test_cli_check_kernels_and_library_exit_codes(capsys):
    assert _check_cli() == 0
    out = capsys.readouterr().out
    assert "kernels=" not in out.splitlines()[0]
    assert _check_cli("--kernels", GEN, "--library", LIB) == 1  # every matmul on the unit: fails
    out = capsys.readouterr().out
    assert f"kernels={GEN} library={LIB}" in out.splitlines()[0] and "VIOLATED" in out
    # under autofuse no matmul is code-generated: the library decides (its matmuls are the unit's)
    assert _check_cli("--library", LIB) == 1
    capsys.readouterr()
    assert _check_cli("--kernels", GEN, "--fusion", MM_FUSION) == 1  # the matmul blocks generated on the unit
    capsys.readouterr()
    assert _check_cli("--kernels", "codegen:mma=X1") == 2
    err = capsys.readouterr().err
    assert "--kernels" in err and "X1" in err
    assert _check_cli("--library", "fast") == 2
    err = capsys.readouterr().err
    assert "--library" in err and "valid presets" in err


def test_shrunk_and_adversarial_cases_keep_their_kernels(tmp_path):
    # shrinking resizes the model and simplifies values: the case stays on the unit and still fails there
    opts = C.SearchOptions(trials=3, kinds=("normal",), shrink_budget=25)
    rep = C.check("no_worse_tensor", "gelu_mlp", fusion=MM_FUSION, options=opts, kernels=GEN, library=LIB,
                  save=str(tmp_path))
    case, res = rep.counterexample
    assert "shrunk" in case.origin and (case.kernels, case.library) == (GEN, LIB) and res.fails
    assert rep.shrink_stats["elements_after"] < rep.shrink_stats["elements_before"]
    assert C.reproduce(rep.saved)["bitwise"]
    # without the unit the shrunk inputs hold: the violation is the unit's
    plain = C.evaluate("no_worse_tensor", C.Case(case.model, case.sizes, case.fmt, case.fusion, case.inputs))
    assert plain.verdict == "holds"
    # the adversarial search climbs from cases made with the given kernels: the one it returns keeps them
    adv = C.SearchOptions(trials=20, kinds=("normal",), search="adversarial", adversarial_steps=150)
    rep = C.check("inductor_rule", "mul_scalar", options=adv, shrink_cex=False, kernels="codegen:fma=false",
                  library="handwritten:fma=true")
    case, res = rep.counterexample
    assert case.origin.startswith("adversarial:") and res.fails
    assert (case.kernels, case.library) == ("codegen:fma=false", "handwritten:fma=true")
