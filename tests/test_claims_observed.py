"""A real kernel's outputs in place of numlab's fused run: claims.check(claim,
graph_or_function, inputs=..., observed=...) and ``numlab check CLAIM --graph
... --inputs FILE --observed DIR``."""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits

from numlab import claims as C
from numlab.cli import main as cli_main
from numlab.compare import load_dump
from numlab.execute import run
from numlab.graph import trace
from numlab.ops import layer_norm

# claims that need more of the kernel than one set of its outputs
NEED_MODEL = {"trace_enclosure", "fp32_inside", "compile_determinism", "execution_determinism",
              "emulated_casts_match_eager"}


def ln_model(x, gamma, beta):
    return {"y": layer_norm(x, gamma, beta)}


def fast_rsqrt(v):
    """The bit trick 0x5f3759df and one Newton step, in float32 (relative error up to ~1.75e-3)."""
    v = v.astype(np.float32)
    y = (np.int32(0x5F3759DF) - (v.view(np.int32) >> 1)).view(np.float32)
    return y * (np.float32(1.5) - np.float32(0.5) * v * y * y)


def exact_rsqrt(v):
    return np.float32(1) / np.sqrt(v.astype(np.float32))


def vendor_layernorm(x, gamma, beta, rsqrt=fast_rsqrt, eps=1e-5):
    """A hand-written fused layer norm: fp16 in, fp32 inside, fp16 out."""
    x32 = x.astype(np.float32)
    mu = x32.mean(-1, keepdims=True, dtype=np.float32)
    d = x32 - mu
    var = (d * d).mean(-1, keepdims=True, dtype=np.float32)
    y = d * rsqrt(var + np.float32(eps)) * gamma.astype(np.float32) + beta.astype(np.float32)
    return y.astype(np.float16)


def ln_fp64(x, gamma, beta, eps=1e-5):
    """Independent fp64 reference of the layer norm (plain numpy in float64)."""
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma.astype(np.float64) + beta.astype(np.float64)


def ln_inputs(seed=0, batch=8, hidden=64):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, hidden)).astype(np.float16),
            "gamma": (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float16),
            "beta": (0.1 * rng.standard_normal(hidden)).astype(np.float16)}


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN (margins and details)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# ---------------------------------------------------------------- the property: observed == model's fused
@pytest.mark.parametrize("model,fusion", [("layernorm", "autofuse"), ("layernorm", "autofuse+decompose"),
                                          ("softmax", "autofuse+decompose"), ("mul_add_gelu_mul", "inductor"),
                                          ("movement", "autofuse")])
def test_observed_equal_to_numlab_fused_decides_like_the_model(model, fusion):
    """Handing numlab's own fused outputs in as "observed" must give every
    value-based claim the same verdict, margin and detail as the model path
    (so the observed path compares what the model path compares); claims that
    need the kernel itself are undecided, naming why."""
    kinds_seen = set()
    for trial, kind in enumerate(("normal", "shifted_mean", "near_overflow")):
        case = C.make_case(model, fusion=fusion, kind=kind, trial=trial)
        g = case.graph()
        fused = run(g, case.inputs, mode="fused", fmt=case.fmt, fusion=fusion).outputs
        obs = C.Case(**{**case.__dict__, "observed": {k: np.asarray(v) for k, v in fused.items()}})
        for name, claim in C.CLAIMS.items():
            if claim.scope != "case" or (name == "data_movement_bitexact") != (model == "movement"):
                continue
            a, b = C.evaluate(name, case), C.evaluate(name, obs)
            if name in NEED_MODEL:
                assert b.verdict == "undecided" and b.undecided["reason"].startswith(C.NEEDS_KERNEL_MODEL), name
                continue
            assert a.verdict == b.verdict and _same(a.margin, b.margin) and _same(a.detail, b.detail), \
                (name, kind, a.verdict, b.verdict, a.margin, b.margin)
            kinds_seen.add(a.verdict)
            # the observed side is saved under its own name, bit for bit what was given
            assert_same_bits(b.outputs["observed"]["y"], fused["y"])
            assert "fused" not in b.outputs  # numlab's fused model never ran
    assert kinds_seen  # something was decided
    # the population claim over the given cases: same statistics as the model's given-inputs check
    cases = [C.make_case(model, fusion=fusion, trial=t) for t in range(3)]
    g = cases[0].graph()
    ins = [c.inputs for c in cases]
    outs = [run(g, c.inputs, mode="fused", fmt="fp16", fusion=fusion).outputs for c in cases]
    pa = C.check("no_worse_population", g, inputs=ins, fusion=fusion)
    pb = C.check("no_worse_population", g, inputs=ins, observed=outs, fusion=fusion)
    assert pa.verdict == pb.verdict and pa.population == pb.population and pa.trials == pb.trials == 3


def test_a_graph_or_a_function_is_accepted_where_a_model_name_was():
    # claims.check("no_worse_tensor", my_graph) used to raise TypeError: unhashable type: 'Graph'
    g = C.get_model("layernorm")
    a = C.check("no_worse_tensor", g, trials=6)
    b = C.check("no_worse_tensor", "layernorm", trials=6)
    assert a.verdict == b.verdict and a.worst_margin == b.worst_margin and a.worst_detail == b.worst_detail
    assert a.model == g.name
    ins = ln_inputs()
    # a traceable function, traced with the shapes of the inputs; a Graph; a model name: one answer
    r1 = C.check("no_worse_tensor", ln_model, inputs=ins)
    r2 = C.check("no_worse_tensor", trace(ln_model, x=(8, 64), gamma=(64,), beta=(64,)), inputs=ins)
    assert (r1.verdict, r1.worst_margin) == (r2.verdict, r2.worst_margin) and r1.trials == 1
    with pytest.raises(TypeError, match="inputs"):
        C.check("no_worse_tensor", ln_model)  # a function needs inputs to be traced
    with pytest.raises(TypeError, match="pass the function itself"):  # a name is a factory of sizes
        C.check("no_worse_tensor", f"{__name__}:ln_model", inputs=ins)
    with pytest.raises(ValueError, match="pass inputs= too"):
        C.check("no_worse_tensor", g, observed={"y": np.zeros((4, 64), np.float16)})
    with pytest.raises(ValueError, match="adversarial"):
        C.check("no_worse_tensor", ln_model, inputs=ins, search="adversarial")


# ---------------------------------------------------------------- a planted bad kernel
def test_planted_bad_kernel_fails_with_a_saved_counterexample(tmp_path):
    ins = ln_inputs(seed=1)
    y = vendor_layernorm(**ins)
    ref = ln_fp64(**ins)
    rep = C.check("no_worse_tensor", ln_model, inputs=ins, observed={"y": y}, save=str(tmp_path))
    assert rep.verdict == "fails" and rep.exit_code == 1 and rep.search == "observed"
    # the observed max error is the one an independent fp64 numpy layer norm gives
    assert rep.worst_detail["fused_max"] == pytest.approx(np.max(np.abs(y.astype(np.float64) - ref)), rel=1e-9)
    # the file holds the real data: inputs, observed (bit for bit), eager and the fp64 reference
    with np.load(rep.saved + ".npz") as z:
        assert_same_bits(z["output/observed/y"], y)
        for k, v in ins.items():
            assert np.array_equal(z[f"input/{k}"], v.astype(np.float64))
        np.testing.assert_allclose(z["output/reference/y"], ref, rtol=1e-12, atol=1e-15)
        assert z["output/eager/y"].dtype == np.float16
    meta = json.load(open(rep.saved + ".json"))
    assert meta["observed"] is True and meta["graph"]["outputs"] == ["y"] and meta["verdict"] == "fails"
    # reproduce rebuilds the graph from the file (no user code) and re-evaluates on the saved outputs
    rr = C.reproduce(rep.saved)
    assert rr["violated"] and rr["bitwise"] and rr["verdict"] == "fails"
    # every value-based claim but msprobe's accuracy check catches it; msprobe's default thresholds pass it
    verdicts = {n: C.check(n, ln_model, inputs=ins, observed={"y": y}).verdict
                for n in ("no_worse_elementwise", "no_worse_population", "error_within_bound", "inductor_rule",
                          "msprobe_accuracy")}
    assert verdicts == {"no_worse_elementwise": "fails", "no_worse_population": "fails",
                        "error_within_bound": "fails", "inductor_rule": "fails", "msprobe_accuracy": "holds"}
    e = run(trace(ln_model, x=(8, 64), gamma=(64,), beta=(64,)), ins, mode="eager", fmt="fp16").outputs["y"]
    e64, y64 = e.astype(np.float64), y.astype(np.float64)
    cos = float(e64.ravel() @ y64.ravel() / np.linalg.norm(e64) / np.linalg.norm(y64))
    assert cos >= 0.99 and np.max(np.abs(y64 - e64)) <= 1.0  # msprobe's "Yes", computed independently
    # the honest kernel (exact rsqrt in fp32) passes the same claims
    good = vendor_layernorm(**ins, rsqrt=exact_rsqrt)
    for n in ("no_worse_tensor", "no_worse_population", "error_within_bound", "inductor_rule", "msprobe_accuracy"):
        assert C.check(n, ln_model, inputs=ins, observed={"y": good}).verdict == "holds", n


@pytest.mark.parametrize("fmt,dt", [("bf16", ml_dtypes.bfloat16), ("fp8_e4m3", ml_dtypes.float8_e4m3fn)])
def test_saved_counterexample_in_an_ml_dtypes_format_reproduces(tmp_path, fmt, dt):
    """np.savez keeps bfloat16/fp8 arrays as raw void bytes (|V2, |V1): loading
    must view them as the storage format again, or the observed outputs are no
    numbers and no saved output compares bit for bit."""
    def f(x):
        return np.exp(x)
    x = np.linspace(-1, 1, 8).reshape(2, 4).astype(dt)
    obs = {"exp_0": (np.exp(x.astype(np.float64)) * 1.25).astype(np.float32).astype(dt)}  # 25% too large
    rep = C.check("no_worse_tensor", f, inputs={"x": x}, observed=obs, fmt=fmt, save=str(tmp_path))
    assert rep.verdict == "fails" and rep.saved
    case, _, arrs = C.load_counterexample(rep.saved)
    assert case.observed["exp_0"].dtype == dt and arrs["output/eager/exp_0"].dtype == dt
    assert case.observed["exp_0"].tobytes() == obs["exp_0"].tobytes()
    again = C.reproduce(rep.saved)
    assert again["bitwise"] and again["violated"]


def test_store_never_overwrites_without_force(tmp_path):
    ins = ln_inputs(seed=2)
    bad = vendor_layernorm(**ins)
    rep = C.check("no_worse_tensor", ln_model, inputs=ins, observed={"y": bad}, save=str(tmp_path))
    case, res = rep.counterexample
    assert C.save_counterexample("no_worse_tensor", case, res, str(tmp_path)) == rep.saved  # same: a no-op
    # another kernel's outputs on the same inputs are another counterexample (the name hashes them too)
    worse = (bad.astype(np.float32) * np.float32(1.01)).astype(np.float16)
    rep2 = C.check("no_worse_tensor", ln_model, inputs=ins, observed={"y": worse}, save=str(tmp_path))
    assert rep2.saved != rep.saved and len(os.listdir(tmp_path)) == 4
    m = json.load(open(rep.saved + ".json"))
    m["outputs_sha256"] = "0" * 64
    json.dump(m, open(rep.saved + ".json", "w"))
    before = open(rep.saved + ".npz", "rb").read()
    with pytest.raises(FileExistsError, match="force"):
        C.save_counterexample("no_worse_tensor", case, res, str(tmp_path))
    assert open(rep.saved + ".npz", "rb").read() == before
    C.check("no_worse_tensor", ln_model, inputs=ins, observed={"y": bad}, save=str(tmp_path), force=True)
    assert json.load(open(rep.saved + ".json"))["outputs_sha256"] != "0" * 64


# ---------------------------------------------------------------- bad observed data: clear errors
def test_observed_names_shapes_and_dtypes_are_checked(tmp_path):
    ins = ln_inputs()
    y = vendor_layernorm(**ins)
    chk = lambda obs, **kw: C.check("no_worse_tensor", ln_model, inputs=ins, observed=obs, **kw)  # noqa: E731
    with pytest.raises(ValueError, match=r"missing output\(s\) \['y'\].*'y': \(8, 64\)"):
        chk({"out": y})
    with pytest.raises(ValueError, match=r"unexpected array\(s\) \['z'\]"):
        chk({"y": y, "z": y})
    with pytest.raises(ValueError, match=r"output 'y' has shape \(8, 63\); the graph's output 'y' has shape \(8, 64\)"):
        chk({"y": y[:, :63]})
    with pytest.raises(TypeError, match="uint16.*bit patterns"):
        chk({"y": y.view(np.uint16)})
    # a float32 copy of fp16 values is accepted (msprobe/msit dump fp16 that way) ...
    assert chk({"y": y.astype(np.float32)}).verdict == chk({"y": y}).verdict == "fails"
    # ... values fp16 does not hold are refused, naming one
    with pytest.raises(TypeError, match="not fp16 values"):
        chk({"y": y.astype(np.float32) + np.float32(1e-4)})
    # in bf16 the observed outputs are bf16 values
    ins_b = {k: v.astype(np.float32).astype(ml_dtypes.bfloat16) for k, v in ins.items()}  # bf16 inputs
    yb = vendor_layernorm(**ins_b).astype(np.float32).astype(ml_dtypes.bfloat16)
    assert C.check("no_worse_tensor", ln_model, inputs=ins_b, observed={"y": yb}, fmt="bf16").verdict in (
        "holds", "fails")
    with pytest.raises(ValueError, match=r"observed holds 2 set\(s\) of outputs for 1"):
        chk([{"y": y}, {"y": y}])
    with pytest.raises(ValueError, match=r"inputs: missing input\(s\) \['beta'\]"):
        C.check("no_worse_tensor", trace(ln_model, x=(8, 64), gamma=(64,), beta=(64,)),
                inputs={"x": ins["x"], "gamma": ins["gamma"]}, observed={"y": y})
    # files: a directory of NAME.npy and an .npz file; a dump directory goes through numlab.compare
    d = tmp_path / "plain"
    d.mkdir()
    np.save(d / "y.npy", y)
    np.savez(tmp_path / "obs.npz", y=y)
    assert chk(str(d)).verdict == chk(tmp_path / "obs.npz").verdict == "fails"
    assert chk(load_dump(d)).verdict == "fails"
    (d / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="numlab dump.*load_any"):
        chk(str(d))


def test_given_inputs_that_s_does_not_hold_are_refused_not_rounded():
    """A kernel computed its outputs on the inputs it was given: numlab must not
    judge them against eager and a reference run on other (rounded) inputs."""
    x = np.array([[1.0, 1 + 2.0**-12, 0.5, -3.0]], dtype=np.float32)  # 1 + 2**-12 needs 13 significand bits
    def f(x):
        return np.exp(x)
    obs = {"exp_0": np.exp(x.astype(np.float64)).astype(np.float16)}
    with pytest.raises(TypeError, match=r"inputs: input 'x' has dtype float32 .*not fp16 values.*index \[0, 1\]"):
        C.check("no_worse_tensor", f, inputs={"x": x}, observed=obs)
    with pytest.raises(TypeError, match=r"inputs: input 'x'.*not fp16 values"):
        C.check("no_worse_tensor", f, inputs={"x": x})
    # values fp16 holds, in any float container, are accepted (fp32 has every fp16 value)
    x16 = np.array([[1.0, 1 + 2.0**-10, 0.5, -3.0]], dtype=np.float32)
    assert C.check("no_worse_tensor", f, inputs={"x": x16}).verdict in ("holds", "fails")
    assert C.check("no_worse_tensor", f, inputs={"x": x}, fmt="fp32").verdict in ("holds", "fails")


def test_empty_or_infinite_basis_is_undecided():
    g = C.get_model("mul_scalar", {"batch": 0})
    empty = {"x": np.zeros((0, 64))}
    for name, claim in C.CLAIMS.items():
        if claim.scope != "case" or name == "data_movement_bitexact":
            continue
        rep = C.check(name, g, inputs=empty, observed={"y": np.zeros((0, 64), np.float16)})
        assert rep.verdict == "undecided" and rep.exit_code == 2, name
    rep = C.check("no_worse_population", g, inputs=empty, observed={"y": np.zeros((0, 64), np.float16)})
    assert rep.verdict == "undecided"
    # eager overflows to inf; an observed inf there too: the tensor claim rests on inf vs inf
    big = {"x": np.full((2, 64), 60000.0)}
    g2 = C.get_model("mul_scalar", {"batch": 2})
    times = C.check("no_worse_tensor", lambda x: {"y": x * 2.0}, inputs=big,
                    observed={"y": np.full((2, 64), np.inf, np.float16)})
    assert times.verdict == "undecided" and "infinite" in times.undecided_detail["reason"]
    # an observed inf where eager is finite is a decided failure; a NaN too
    small = {"x": np.full((2, 64), 1.5)}
    for bad in (np.inf, np.nan):
        y = np.full((2, 64), 1.5 * 0.7, np.float16)
        y[1, 3] = bad
        assert C.check("no_worse_tensor", g2, inputs=small, observed={"y": y}).verdict == "fails"


# ---------------------------------------------------------------- the CLI
@pytest.fixture
def kernel_files(tmp_path, monkeypatch):
    (tmp_path / "usermodel.py").write_text(textwrap.dedent("""
        from numlab.ops import layer_norm

        def model(x, gamma, beta):
            return {"y": layer_norm(x, gamma, beta)}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    ins = ln_inputs(seed=3)
    np.savez(tmp_path / "inputs.npz", **ins)
    for name, rs in (("bad", fast_rsqrt), ("good", exact_rsqrt)):
        (tmp_path / name).mkdir()
        np.save(tmp_path / name / "y.npy", vendor_layernorm(**ins, rsqrt=rs))
    yield tmp_path
    sys.modules.pop("usermodel", None)


def test_cli_exit_codes(kernel_files, capsys):
    t = kernel_files
    base = ["--graph", "usermodel:model", "--inputs", str(t / "inputs.npz"), "--out", str(t / "cex")]
    assert cli_main(["check", "no_worse_tensor", *base, "--observed", str(t / "good")]) == 0
    assert "HOLDS" in capsys.readouterr().out
    assert cli_main(["check", "no_worse_tensor", *base, "--observed", str(t / "bad")]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED" in out and "observed outputs in place of numlab's fused run" in out
    saved = [f for f in os.listdir(t / "cex") if f.endswith(".npz")]
    assert len(saved) == 1 and C.reproduce(t / "cex" / saved[0])["violated"]
    assert cli_main(["check", "fp32_inside", *base, "--observed", str(t / "bad")]) == 2
    assert C.NEEDS_KERNEL_MODEL in capsys.readouterr().out
    # the model path on the given inputs (no --observed): numlab's fused run on exactly those inputs
    assert cli_main(["check", "no_worse_tensor", *base]) == 0
    # usage errors: exit 2 with the reason
    np.save(t / "bad" / "y.npy", np.zeros((8, 63), np.float16))
    assert cli_main(["check", "no_worse_tensor", *base, "--observed", str(t / "bad")]) == 2
    assert "shape (8, 63)" in capsys.readouterr().err
    assert cli_main(["check", "no_worse_tensor", "layernorm", "--observed", str(t / "good")]) == 2
    assert "--observed needs" in capsys.readouterr().err
    assert cli_main(["check", "no_worse_tensor", *base, "--observed", str(t / "nope")]) == 2
    assert "--observed" in capsys.readouterr().err


def test_cli_reads_numlab_dumps_and_renamed_tensors(kernel_files, capsys):
    """numlab's own fused run, dumped by ``numlab run --dump`` (every block output, a manifest),
    as --observed: the same verdict as the model path on the same inputs; a dump that names the
    output otherwise is mapped with --observed-name."""
    t = kernel_files
    base = ["--graph", "usermodel:model", "--inputs", str(t / "inputs.npz"), "--no-save"]
    for fusion, code in (("autofuse", 0), ("autofuse+decompose", 1)):
        d = t / f"dump_{code}"
        assert cli_main(["run", *base[:4], "--mode", "fused", "--fusion", fusion, "--dump", str(d)]) == 0
        assert (d / "manifest.json").is_file()
        assert cli_main(["check", "no_worse_tensor", *base, "--fusion", fusion]) == code
        assert cli_main(["check", "no_worse_tensor", *base, "--fusion", fusion, "--observed", str(d)]) == code
    capsys.readouterr()
    d = t / "renamed"
    d.mkdir()
    np.save(d / "Functional.layer_norm.0.forward.output.0.npy", np.load(t / "bad" / "y.npy"))
    args = ["check", "no_worse_tensor", *base, "--observed", str(d)]
    # the graph's one output: the dump's one tensor is taken, whatever its name, and the choice named
    assert cli_main(args) == 1
    assert "'Functional.layer_norm.0.forward.output.0'] taken as output 'y'" in capsys.readouterr().err
    np.save(d / "other.npy", np.load(t / "bad" / "y.npy"))  # two tensors: which one is the output?
    assert cli_main(args) == 2 and "missing output(s) ['y']" in capsys.readouterr().err
    assert cli_main([*args, "--observed-name", "y=Functional.layer_norm.0.forward.output.0"]) == 1
    assert cli_main([*args, "--observed-name", "y=nope"]) == 2
    assert "Functional.layer_norm.0.forward.output.0" in capsys.readouterr().err


def _msprobe_rule(cos, mae):
    """msprobe's check_accuracy, written out: "No" when (cos < 0.99 and mae > 0.001), cos < 0.9 or mae > 1."""
    return not ((cos < 0.99 and mae > 0.001) or cos < 0.9 or mae > 1.0)


def test_msprobe_accuracy_claim_follows_msprobes_rule():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 256)).astype(np.float16)
    ident = lambda x: {"y": x * 1.0}  # noqa: E731  eager is x itself (exact product by one)
    noise = rng.standard_normal(x.shape)
    seen = set()
    # (input scale, noise scale, spike): every branch of the rule, each side of each threshold
    for xs, scale, spike in ((1, 1e-4, 0), (1, 0.3, 0), (1, 0.6, 0), (1, 0.02, 0), (1, 0, 3.0), (1, 1.5, 0),
                             (1, 0, 0), (1e-3, 0.2, 0), (1e-3, 0.5, 0)):
        xi = (x.astype(np.float64) * xs).astype(np.float16)
        y64 = xi.astype(np.float64) + scale * xs * noise
        y64[1, 7] += spike
        y = y64.astype(np.float16)
        e, f = xi.astype(np.float64).ravel(), y.astype(np.float64).ravel()
        cos = float(e @ f / np.sqrt(e @ e) / np.sqrt(f @ f))
        mae = float(np.max(np.abs(f - e)))
        rep = C.check("msprobe_accuracy", ident, inputs={"x": xi}, observed={"y": y})
        assert rep.verdict == ("holds" if _msprobe_rule(cos, mae) else "fails"), (xs, scale, spike, cos, mae)
        assert rep.worst_detail["cosine"] == pytest.approx(cos, abs=1e-12)
        assert rep.worst_detail["max_abs_err"] == mae
        seen.add((rep.verdict, cos < 0.99, mae > 0.001))
    assert seen >= {("holds", False, True), ("holds", True, False), ("fails", True, True), ("fails", False, True)}
    # NaN where eager is finite: msprobe's metrics are N/A, so undecided (exit 2), never "holds"
    y = x.copy()
    y[0, 0] = np.nan
    rep = C.check("msprobe_accuracy", ident, inputs={"x": x}, observed={"y": y})
    assert rep.verdict == "undecided" and "N/A" in rep.undecided_detail["reason"]


def test_cli_reads_msprobe_and_msit_dumps(kernel_files, capsys):
    """A kernel's output dumped in msprobe's and msit's layouts (numlab's writers, the tools'
    file types): --observed reads them; without numlab's sidecar the tool's own tensor names
    are mapped with --observed-name."""
    pytest.importorskip("torch", reason="msprobe/msit dumps hold torch tensor files")
    from numlab.compare.layouts import SIDECAR, write_msit_dump, write_msprobe_dump

    t = kernel_files
    bad = np.load(t / "bad" / "y.npy")
    base = ["check", "no_worse_tensor", "--graph", "usermodel:model", "--inputs", str(t / "inputs.npz"), "--no-save"]
    for layout, write in (("msprobe", write_msprobe_dump), ("msit", write_msit_dump)):
        root = write(t / layout, {"y": bad})
        assert cli_main([*base, "--observed", str(root)]) == 1, layout
        for side in root.rglob(SIDECAR):
            side.unlink()  # a dump as the tool itself writes it: its own tensor names
        capsys.readouterr()
        # the graph's one output and the dump's one tensor: taken under the tool's name, and said so
        name = {"msprobe": "Numlab.y.0.forward.output.0", "msit": "root.y"}[layout]
        assert cli_main([*base, "--observed", str(root)]) == 1
        assert f"{name!r}] taken as output 'y'" in capsys.readouterr().err
        assert cli_main([*base, "--observed", str(root), "--observed-name", f"y={name}"]) == 1, layout


def test_a_numpy_function_is_the_specification():
    """The specification written with numpy ufuncs (traced through __array_ufunc__): an fp32
    softmax kernel computes what it says; one scaled by 1.004 does not."""
    def softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return {"y": e / e.sum(axis=-1, keepdims=True)}

    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float16)
    x32 = x.astype(np.float32)
    e = np.exp(x32 - x32.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    good, bad = p.astype(np.float16), (p * np.float32(1.004)).astype(np.float16)
    for claim in ("no_worse_tensor", "error_within_bound", "inductor_rule"):
        assert C.check(claim, softmax, inputs={"x": x}, observed={"y": good}).verdict == "holds", claim
        assert C.check(claim, softmax, inputs={"x": x}, observed={"y": bad}).verdict == "fails", claim


def test_cli_partial_observed_name_mapping_takes_the_rest_by_name(tmp_path, monkeypatch, capsys):
    """--observed-name maps one output of a two-output graph; the other is read under
    its own name (a partial mapping used to drop it: "missing output(s)")."""
    (tmp_path / "twoout.py").write_text(textwrap.dedent('''
        import numpy as np

        def model(x):
            return {"a": np.exp(x), "b": x * 0.5}
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float16)
    np.savez(tmp_path / "inputs.npz", x=x)
    from numlab.graph import trace_function
    g = trace_function(__import__("twoout").model, {"x": x})
    eager = run(g, {"x": x}, mode="eager", fmt="fp16").outputs
    d = tmp_path / "dump"
    d.mkdir()
    np.save(d / "a.npy", eager["a"])
    np.save(d / "tensorB.npy", eager["b"])
    base = ["check", "no_worse_tensor", "--graph", "twoout:model", "--inputs", str(tmp_path / "inputs.npz"),
            "--fmt", "fp16", "--no-save", "--observed", str(d)]
    capsys.readouterr()
    assert cli_main(base) == 2 and "missing output(s) ['b']" in capsys.readouterr().err
    assert cli_main([*base, "--observed-name", "b=tensorB"]) == 0  # eager's own outputs: no worse than eager
