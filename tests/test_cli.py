"""One command-line grammar: every subcommand takes the shared options by the
same names (src/numlab/cli/options.py), refuses each bad value at parse time
with a message naming the CLI option (never the Python argument)."""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

from numlab import claims as C
from numlab import cli, zoo
from numlab import determinism as D
from numlab.claims import catalogue, search
from numlab.execute import run

# the quickest run of every subcommand, with every shared option it takes
# ({tmp} is replaced by a fresh directory)
GOOD = {
    "bound": ["bound", "layernorm", "--fmt", "fp16", "--size", "batch=2", "--size", "hidden=16",
              "--inputs", "uniform", "--fusion", "inductor", "--kernels", "codegen", "--seed", "1",
              "--mode", "fused", "--out", "{tmp}/bound", "--force"],
    "mma sweep": ["mma", "sweep", "--ks", "256", "--m", "2", "--n", "2", "--kind", "uniform", "--claims-model",
                  "none", "--preset-k", "256", "--seed", "1", "--out", "{tmp}/mma", "--force"],
    "demo": ["demo", "--quick", "--models", "softmax", "--inputs", "uniform", "--seed", "1",
             "--fusion", "inductor", "--out", "{tmp}/demo", "--force"],
    "run": ["run", "layernorm", "--fmt", "bf16", "--size", "batch=2", "--size", "hidden=16",
            "--inputs", "uniform", "--fusion", "off", "--kernels", "codegen", "--seed", "3",
            "--mode", "fused", "--dump", "{tmp}/dump", "--force"],
    "compare": ["compare", "-gp", "{tmp}/dump", "-mp", "{tmp}/dump", "--fmt", "bf16",
                "--out", "{tmp}/cmp.csv", "--force"],
    "bisect": ["bisect", "layernorm", "--fmt", "fp16", "--size", "batch=2,hidden=16", "--inputs",
               "shifted_mean", "--fusion", "autofuse", "--kernels", "codegen", "--seed", "1",
               "--stages", "fusion"],
    "check CLAIM": ["check", "no_worse_tensor", "softmax", "--fmt", "fp16", "--size", "batch=2",
                    "--inputs", "normal,uniform", "--fusion", "inductor", "--seed", "1", "--trials", "2",
                    "--out", "{tmp}/cex", "--force"],
    "check plan": ["check", "plan", "--quick", "--trials", "2", "--no-figures", "--inputs", "normal",
                   "--fusion", "off", "--seed", "0", "--out", "{tmp}/plan", "--force"],
    "check determinism": ["check", "determinism", "softmax", "--runs", "2", "--fmt", "fp32",
                          "--size", "batch=2", "--inputs", "uniform", "--seed", "1", "--fusion", "inductor",
                          "--kernels", "codegen"],
    "race": ["race", "atomic_rowsum", "--runs", "4", "--no-bisect", "--seed", "1"],
    "formats": ["formats", "--seed", "1"],
    "reveal": ["reveal", "numpy.sum", "--n", "8", "--fmt", "fp32", "--check-rows", "20", "--seed", "1"],
    "calibrate": ["calibrate", "--capabilities", "default", "--cases", "sum", "--dtype", "fp32", "--quick",
                  "--rows", "10", "--seed", "1", "--out", "{tmp}/cal", "--force"],
    "bench": ["bench", "rounding", "--quick"],
    "course": ["course", "build", "--out", "{tmp}/course", "--force"],
}
# commands that run slowly or need extras are parsed, not run, here (their own tests run
# them: tests/test_calibrate.py, tests/test_course.py); course takes only --out and --force
# of the shared options
PARSE_ONLY = {"calibrate", "bench", "course"}


def _argv(argv, tmp_path):
    return [a.replace("{tmp}", str(tmp_path)) for a in argv]


def test_every_subcommand_is_covered():
    covered = {k.split()[0] for k in GOOD}
    assert covered == set(cli.SUBCOMMANDS), covered ^ set(cli.SUBCOMMANDS)


@pytest.mark.parametrize("cmd", list(GOOD))
def test_every_subcommand_takes_the_shared_options(cmd, tmp_path, capsys):
    if cmd == "compare":  # needs a dump to compare
        assert cli.main(_argv(GOOD["run"], tmp_path)) == 0
        capsys.readouterr()
    argv = _argv(GOOD[cmd], tmp_path)
    if cmd in PARSE_ONLY:
        args = cli.build_parser().parse_args(argv)
        assert args.func is not None
        return
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert "error" not in err, err
    # exit codes: 0 fine; check/race/reveal may report 1 (claim fails / race / not reproduced)
    assert rc in ((0, 1) if cmd.startswith(("check", "race", "reveal")) else (0,)), (rc, out, err)
    assert out


def test_shared_options_reach_the_command(tmp_path, capsys):
    """run's header shows what the options said: the format, the fusion spec,
    the kernel spec, the seed; the dumped graph has the --size shapes."""
    assert cli.main(_argv(GOOD["run"], tmp_path)) == 0
    out = capsys.readouterr().out
    assert "fmt=bf16" in out and "fusion=off" in out and "kernels=codegen" in out and "seed=3" in out
    g = zoo.layernorm(batch=2, hidden=16)
    r = run(g, zoo.make_inputs(g, kind="uniform", seed=3), mode="fused", fmt="bf16", fusion="off",
            kernels="codegen", seed=3)
    assert f"fingerprint={r.fingerprint[:16]}" in out
    assert np.load(tmp_path / "dump" / "y.npy").shape == (2, 16)  # --size reached the model


# (option, bad value, words the message must hold besides the option)
BAD = {
    "MODEL": ("nope", ["'nope'", "layernorm", "module:function"]),
    "--fmt": ("fp17", ["'fp17'", "fp16"]),
    "--dtype": ("fp17", ["'fp17'", "fp16"]),  # calibrate's tensor dtypes
    "--size": ("hidden", ["'hidden'", "NAME="]),
    "--inputs": ("gaussian", ["'gaussian'", "shifted_mean"]),
    "--fusion": ("autofusee", ["'autofusee'", "inductor"]),
    "--kernels": ("codegenn", ["'codegenn'", "handwritten"]),
    "--seed": ("-1", ["-1", ">= 0"]),
    "--models": ("softmax,nope", ["'nope'", "layernorm"]),
}
# which shared options each command takes, and where its argv puts MODEL
TAKES = {
    "bound": ["MODEL", "--fmt", "--size", "--inputs", "--fusion", "--kernels", "--seed"],
    "mma sweep": ["--seed"],
    "demo": ["--inputs", "--fusion", "--seed", "--models"],
    "run": ["MODEL", "--fmt", "--size", "--inputs", "--fusion", "--kernels", "--seed"],
    "compare": ["--fmt"],
    "bisect": ["MODEL", "--fmt", "--size", "--inputs", "--fusion", "--kernels", "--seed"],
    "check CLAIM": ["MODEL", "--fmt", "--size", "--inputs", "--fusion", "--kernels", "--seed"],
    "check plan": ["--inputs", "--fusion", "--seed"],
    "check determinism": ["MODEL", "--fmt", "--size", "--inputs", "--fusion", "--kernels", "--seed"],
    "race": ["--seed"],
    "formats": ["--seed"],
    "reveal": ["--fmt", "--seed"],
    "calibrate": ["--dtype", "--seed"],
}
MODEL_AT = {"bound": 1, "run": 1, "bisect": 1, "check CLAIM": 2, "check determinism": 2}
CASES = [(cmd, opt) for cmd, opts in TAKES.items() for opt in opts]


@pytest.mark.parametrize("cmd, opt", CASES, ids=[f"{c}-{o}" for c, o in CASES])
def test_each_bad_value_names_the_cli_option(cmd, opt, tmp_path, capsys):
    argv = _argv(GOOD[cmd], tmp_path)
    value, words = BAD[opt]
    if opt == "MODEL":
        argv[MODEL_AT[cmd]] = value
    else:
        argv += [opt, value]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before anything ran
    assert opt in err, err
    for w in words:
        if not (cmd == "reveal" and opt == "--fmt" and w == "fp16") and not (
                cmd == "calibrate" and opt == "--dtype" and w == "fp16"):
            assert w in err, (w, err)
    # the Python argument names never leak into a CLI message
    for internal in ("fmt=", "kind=", "input_kind", "sizes=", "force=True", "fusion=", "kernels="):
        assert internal not in err.replace("--fusion=", "").replace("--kernels=", "").replace("--fmt=", ""), err
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("argv", [
    ["run", "layernorm", "--inp", "uniform"],
    ["run", "layernorm", "--fm", "fp16"],
    ["check", "determinism", "softmax", "--input", "uniform"],
])
def test_no_abbreviations(argv, capsys):
    """One spelling per option: a prefix of an option is not taken for it."""
    assert cli.main(argv) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_help_shows_the_grammar_once(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert out.count("--inputs KIND|FILE") == 1 and out.count("--size NAME=INT") == 1
    assert out.count("module:function") == 1 and out.count("--models A,B") == 1
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    out = capsys.readouterr().out
    assert "--models" in out and "MODEL positional" in out.replace("\n", " ").replace("  ", " ")


# ---------------------------------------------------------------------------
# MODEL as module:function
# ---------------------------------------------------------------------------
MODULE = '''
from numlab.graph import trace

def tiny(n=4, m=3):
    def tiny(x, w):
        return {"y": (x @ w).sum(axis=-1)}
    return trace(tiny, x=(n, m), w=(m, 5))

def not_a_graph(n=4):
    return [n]
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "nl_user_models.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nl_user_models", raising=False)  # each test imports its own file
    yield "nl_user_models"


def test_model_module_function_runs_with_sizes(user_module, capsys):
    assert cli.main(["run", f"{user_module}:tiny", "--size", "n=6", "--mode", "eager", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "nl_user_models:tiny: mode=eager" in out
    assert "(6,)" in out  # y's shape follows --size n=6
    import nl_user_models

    g = nl_user_models.tiny(n=6)
    r = run(g, zoo.make_inputs(g, seed=2), mode="eager", fmt="fp16", seed=2)
    assert f"fingerprint={r.fingerprint[:16]}" in out
    assert cli.main(["bisect", f"{user_module}:tiny", "--stages", "fusion"]) == 0


@pytest.mark.parametrize("model, words", [
    ("nl_user_models:nope", ["MODEL", "'nl_user_models:nope'", "no function 'nope'"]),
    ("nl_no_such_module:tiny", ["MODEL", "cannot import module 'nl_no_such_module'"]),
    (":tiny", ["MODEL", "module:function"]),
])
def test_model_module_function_bad(user_module, model, words, capsys):
    assert cli.main(["run", model]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err, (w, err)


def test_model_module_function_errors_name_model_and_size(user_module, capsys):
    assert cli.main(["run", f"{user_module}:not_a_graph"]) == 2
    assert "MODEL 'nl_user_models:not_a_graph' returned list, not a numlab Graph" in capsys.readouterr().err
    assert cli.main(["run", f"{user_module}:tiny", "--size", "k=3"]) == 2
    err = capsys.readouterr().err
    assert "--size" in err and "'k'" in err and "n=4" in err  # valid sizes with their defaults
    for cmd in (["check", "determinism"], ["check", "no_worse_tensor"]):
        assert cli.main([*cmd, f"{user_module}:not_a_graph"]) == 2
        assert "'nl_user_models:not_a_graph' returned list, not a numlab Graph" in capsys.readouterr().err


def _check_lines(out):
    """The report lines of `numlab check CLAIM` (verdict and worst case)."""
    return [ln for ln in out.splitlines() if ln.startswith(("claim ", "  worst margin"))]


def test_check_claim_takes_module_function(user_module, capsys):
    """`check CLAIM module:function`: the same trials as the model's graph
    built by hand, in process and in worker processes."""
    argv = ["check", "no_worse_tensor", f"{user_module}:tiny", "--size", "n=6", "--trials", "6",
            "--no-save", "--seed", "3"]
    assert cli.main(argv) == 0
    inproc = capsys.readouterr().out
    assert "claim no_worse_tensor on nl_user_models:tiny (fp16)" in inproc and "6 trials" in inproc
    assert "HOLDS" in inproc
    # the same verdict and worst case as the claim evaluated on hand-made cases of the graph
    import nl_user_models

    g = nl_user_models.tiny(n=6)
    kinds = ("normal", "uniform", "shifted_mean", "heavy_tailed", "near_overflow")  # the CLI default
    margins = []
    for t in range(6):
        case = C.make_case(f"{user_module}:tiny", sizes={"n": 6}, fusion="autofuse", seed=3, trial=t,
                           kind=kinds[t % len(kinds)])
        assert case.graph().inputs == g.inputs  # built from the module's function with n=6
        margins.append(C.evaluate("no_worse_tensor", case).margin)
    assert f"worst margin {max(margins):.4g}" in inproc
    assert cli.main([*argv, "--executor", "process", "--workers", "2"]) == 0
    assert _check_lines(capsys.readouterr().out) == _check_lines(inproc)


def test_claims_workers_import_module_function_from_the_task_path(user_module, tmp_path, monkeypatch):
    """A worker that did not start with the caller's sys.path (a dask worker,
    another machine) imports the model from the path its task carries."""
    name = f"{user_module}:tiny"
    assert catalogue.model_path(name) == (str(tmp_path.resolve()),)
    assert catalogue.model_path("softmax") == () == catalogue.model_path("mul_scalar")
    payload = {"claim": "no_worse_tensor", "model": name, "path": catalogue.model_path(name),
               "sizes": catalogue.model_sizes(name, {"n": 5}), "fmt": "fp16", "fusion": "autofuse", "seed": 0,
               "kinds": ("normal",), "lo": 0, "hi": 2}
    assert payload["sizes"] == {"n": 5, "m": 3}  # defaults filled in
    want = search._task(payload)
    # the worker's view: the module is neither imported nor on sys.path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    monkeypatch.delitem(sys.modules, user_module)
    with pytest.raises(ValueError, match="cannot import module 'nl_user_models'"):
        catalogue.get_model(name, {"n": 5})
    got = search._task(payload)
    assert [(t, k, r[:2]) for t, k, r, _ in got] == [(t, k, r[:2]) for t, k, r, _ in want]
    assert catalogue.get_model(name, {"n": 5}).inputs == {"x": (5, 3), "w": (3, 5)}
    with pytest.raises(ValueError, match="size 'k' is not a parameter of model 'nl_user_models:tiny'"):
        catalogue.model_sizes(name, {"k": 1})
    with pytest.raises(ValueError, match="valid models: .*mul_scalar.*softmax.*module:function"):
        catalogue.get_model("nope")


def test_check_determinism_takes_module_function(user_module, capsys):
    """The worker processes import the module from the caller's sys.path
    (here a test's sys.path entry, not PYTHONPATH)."""
    argv = ["check", "determinism", f"{user_module}:tiny", "--runs", "2", "--size", "n=5", "--json"]
    assert cli.main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["compile_deterministic"] and rep["execution_deterministic"]
    assert rep["config"]["model"] == "nl_user_models:tiny" and rep["config"]["sizes"] == {"n": 5}
    here = D.run_once(D._config("nl_user_models:tiny", "fp16", "fused", sizes={"n": 5}))
    assert {r["fingerprint"] for r in rep["records"]} == {here.fingerprint}
    assert {r["outputs"]["y"] for r in rep["records"]} == {here.outputs["y"]}
    # a claims model is not importable by name in the workers: the error names the module:function form
    assert cli.main(["check", "determinism", "mul_scalar", "--runs", "2"]) == 2
    err = capsys.readouterr().err
    assert "MODEL 'mul_scalar' is a claims model" in err
    suggested = err.split("e.g. ")[1].strip()
    assert zoo.get_model(suggested).inputs == C.EXTRA_MODELS["mul_scalar"]().inputs


def test_claims_models_run(capsys):
    # `numlab run mul_scalar` works because `numlab check` accepts it
    assert cli.main(["run", "mul_scalar", "--size", "batch=2", "--mode", "fused"]) == 0
    assert "mul_scalar: mode=fused" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# --inputs FILE
# ---------------------------------------------------------------------------
def _header_fp(out):
    return out.split("fingerprint=")[1].split("...")[0]


def test_inputs_from_npz_and_npy_dir(tmp_path, capsys):
    g = zoo.layernorm(batch=2, hidden=8)
    arrays = zoo.make_inputs(g, kind="heavy_tailed", seed=5)
    np.savez(tmp_path / "in.npz", **arrays)
    (tmp_path / "dir").mkdir()
    for k, v in arrays.items():
        np.save(tmp_path / "dir" / f"{k}.npy", v.astype(np.float32))
    base = ["run", "layernorm", "--size", "batch=2,hidden=8", "--mode", "fused"]
    assert cli.main([*base, "--inputs", "heavy_tailed", "--seed", "5", "--dump", str(tmp_path / "d0")]) == 0
    ref = capsys.readouterr().out
    assert cli.main([*base, "--inputs", str(tmp_path / "in.npz"), "--dump", str(tmp_path / "d1")]) == 0
    got = capsys.readouterr().out
    y0, y1 = np.load(tmp_path / "d0" / "y.npy"), np.load(tmp_path / "d1" / "y.npy")
    assert y0.tobytes() == y1.tobytes()  # same arrays, same bits
    assert cli.main([*base, "--inputs", str(tmp_path / "dir")]) == 0
    r = run(g, {k: v.astype(np.float32).astype(np.float64) for k, v in arrays.items()}, mode="fused", fmt="fp16")
    assert _header_fp(capsys.readouterr().out) == r.fingerprint[:16] == _header_fp(got) == _header_fp(ref)


def test_inputs_file_checked_against_the_graph(tmp_path, capsys):
    g = zoo.layernorm(batch=2, hidden=8)
    a = zoo.make_inputs(g)
    base = ["run", "layernorm", "--size", "batch=2,hidden=8"]
    cases = [
        ({k: v for k, v in a.items() if k != "gamma"}, ["--inputs", "missing input(s) ['gamma']", "(8,)"]),
        ({**a, "bias": a["beta"]}, ["--inputs", "unexpected array(s) ['bias']"]),
        ({**a, "x": a["x"][:1]}, ["--inputs", "input 'x' has shape (1, 8)", "expects (2, 8)"]),
        ({**a, "x": np.array(["a"] * 16).reshape(2, 8)}, ["--inputs", "input 'x'", "not a number type"]),
    ]
    for i, (arrays, words) in enumerate(cases):
        f = tmp_path / f"bad{i}.npz"
        np.savez(f, **arrays)
        assert cli.main([*base, "--inputs", str(f)]) == 2
        out, err = capsys.readouterr()
        assert out == "" or "fingerprint" not in out
        for w in words:
            assert w in err, (w, err)
    # a file where only kinds make sense (check cycles over kinds), or a missing file
    for cmd in (["check", "no_worse_tensor", "softmax"], ["check", "plan"]):
        assert cli.main([*cmd, "--inputs", str(tmp_path / "bad0.npz")]) == 2
        assert "--inputs" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            cli.main([*cmd, "--help"])
        helptext = " ".join(capsys.readouterr().out.split())
        # `check CLAIM` takes a file of inputs (with --observed: a real kernel's outputs on
        # them); `check plan` runs its own searches and says why it refuses one
        assert ("--observed" in helptext) if cmd[1] != "plan" else ("not a FILE: a check searches" in helptext)
    assert cli.main([*base, "--inputs", str(tmp_path / "none.npz")]) == 2
    assert "no such .npz file" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# --graph module:function (one loader with MODEL) and --inputs FILE.npz|DIR
# ---------------------------------------------------------------------------
USER_MODULE = '''
import numpy as np

C = np.array([0.5, -1.0, 2.0])


def layer(x, w, b):
    h = np.maximum(x @ w + b, 0.0)
    return {"y": np.where(h > 0.25, np.sqrt(h), h * C), "m": h > 0.25}


def factory(n=3):
    from numlab.graph import trace
    return trace(lambda x: np.exp(x) * 0.5, x=(2, n))


def not_a_graph(n=3):
    return n
'''

TORCH_MODULE = '''
import torch


def tfn(x, w):
    return torch.tanh(x * w) * 0.5 + x
'''


def _user_files(tmp_path, monkeypatch):
    (tmp_path / "user_fn13.py").write_text(USER_MODULE)
    (tmp_path / "user_torch13.py").write_text(TORCH_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    rng = np.random.default_rng(13)
    arrays = {"x": rng.standard_normal((4, 5)).astype(np.float16), "w": rng.standard_normal((5, 3)),
              "b": rng.standard_normal(3).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **arrays)
    (tmp_path / "dir").mkdir()
    for k, v in arrays.items():
        np.save(tmp_path / "dir" / f"{k}.npy", v)
    return arrays


def test_graph_option_traces_a_numpy_function_on_the_input_arrays(tmp_path, monkeypatch, capsys):
    arrays = _user_files(tmp_path, monkeypatch)
    import user_fn13

    from numlab.graph import trace_function
    g = trace_function(user_fn13.layer, arrays)
    want = run(g, arrays, mode="eager", fmt="fp16")
    for src in ("in.npz", "dir"):
        for spelling in (["--graph", "user_fn13:layer"], ["user_fn13:layer"]):  # one meaning, two spellings
            d = tmp_path / f"d_{src}_{len(spelling)}"
            assert cli.main(["run", *spelling, "--inputs", str(tmp_path / src), "--dump", str(d)]) == 0
            out = capsys.readouterr().out
            assert out.startswith("user_fn13:layer: mode=eager fmt=fp16")
            assert _header_fp(out) == want.fingerprint[:16]
            for k in ("y", "m"):
                assert np.load(d / f"{k}.npy").tobytes() == want.outputs[k].tobytes(), (src, k)
    # bisect takes the same options
    assert cli.main(["bisect", "--graph", "user_fn13:layer", "--inputs", str(tmp_path / "in.npz"),
                     "--stages", "fusion"]) == 0
    assert "numlab bisect user_fn13:layer" in capsys.readouterr().out


def test_graph_option_takes_a_factory_and_a_torch_function(tmp_path, monkeypatch, capsys):
    _user_files(tmp_path, monkeypatch)
    assert cli.main(["run", "--graph", "user_fn13:factory", "--size", "n=4"]) == 0
    assert "(2, 4)" in capsys.readouterr().out
    pytest.importorskip("torch", reason="the PyTorch bridge path needs torch")
    xw = {"x": np.linspace(-2, 2, 6).reshape(2, 3), "w": np.full((2, 3), 0.75)}
    np.savez(tmp_path / "t.npz", **xw)
    assert cli.main(["run", "--graph", "user_torch13:tfn", "--inputs", str(tmp_path / "t.npz"),
                     "--fmt", "fp32", "--dump", str(tmp_path / "td")]) == 0
    assert capsys.readouterr().out.startswith("user_torch13:tfn: mode=eager fmt=fp32")
    assert (tmp_path / "td" / "manifest.json").is_file()
    # the bridge graph, renamed to the function's parameters, computes torch's own fp32 result
    import torch
    import user_torch13

    from numlab.cli.options import load_graph
    g = load_graph("user_torch13:tfn", inputs=xw)
    assert list(g.inputs) == ["x", "w"]
    y = run(g, xw, mode="eager", fmt="fp32").outputs[g.outputs[0]]
    t = user_torch13.tfn(*(torch.from_numpy(v.astype(np.float32)) for v in xw.values())).numpy()
    assert np.max(np.abs(y - t)) <= 2 * np.finfo(np.float32).eps  # SLEEF's tanh vs the engine's: ulps


GRAPH_ERRORS = [
    # (argv after "run", words the error must hold)
    (["--graph", "user_fn13:layer"], ["--graph 'user_fn13:layer'", "--inputs FILE.npz|DIR",
                                      "['x', 'w', 'b']"]),
    (["--graph", "user_fn13:layer", "--inputs", "{tmp}/in.npz", "--size", "n=3"],
     ["--size {'n': 3}", "a traced function takes its shapes from --inputs"]),
    (["user_fn13:layer", "--graph", "user_fn13:factory"], ["MODEL or --graph, not both"]),
    (["--graph", "user_fn13:nope"], ["--graph 'user_fn13:nope'", "no function 'nope'"]),
    (["--graph", "no_such_mod13:f"], ["--graph 'no_such_mod13:f'", "cannot import module"]),
    (["--graph", "nope"], ["--graph 'nope' is not known", "layernorm", "module:function"]),
    (["--graph", "user_fn13:not_a_graph"], ["--graph 'user_fn13:not_a_graph'"]),
    (["--graph", "user_fn13:layer", "--inputs", "{tmp}/extra.npz"],
     ["--inputs", "array(s) ['z'] are not parameters of layer", "valid names: ['x', 'w', 'b']"]),
    (["--graph", "user_fn13:layer", "--inputs", "{tmp}/badshape.npz"],
     ["inner dimensions differ"]),
    (["--graph", "user_fn13:factory", "--inputs", "{tmp}/in.npz"],
     ["--inputs", "unexpected array(s) ['w', 'b']", "valid names (with shapes)", "x: (2, 3)"]),
    (["--graph", "user_fn13:factory", "--inputs", "{tmp}/fshape.npz"],
     ["--inputs: input 'x' has shape (2, 5)", "expects (2, 3)"]),
    (["--graph", "user_torch13:tfn"], ["PyTorch function", "--inputs FILE.npz|DIR"]),
    (["--graph", "user_torch13:tfn", "--inputs", "{tmp}/in.npz"],
     ["--inputs", "array(s) ['b'] are not parameters of user_torch13:tfn", "valid names: ['x', 'w']"]),
    (["--graph", "user_fn13:layer", "--inputs", "{tmp}/nothing.npz"], ["--inputs", "no such .npz file"]),
]


@pytest.mark.parametrize("argv,words", GRAPH_ERRORS, ids=[" ".join(a[:2]) + str(i) for i, (a, _) in enumerate(GRAPH_ERRORS)])
def test_graph_and_inputs_errors_name_the_option_and_the_value(tmp_path, monkeypatch, capsys, argv, words):
    arrays = _user_files(tmp_path, monkeypatch)
    np.savez(tmp_path / "extra.npz", **arrays, z=np.zeros(2))
    np.savez(tmp_path / "badshape.npz", **{**arrays, "w": np.zeros((4, 3))})
    np.savez(tmp_path / "fshape.npz", x=np.zeros((2, 5)))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc = cli.main(["run", *argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    for w in words:
        assert w in err, (w, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("layout", ["msprobe", "msit"])
def test_run_dump_layout_is_read_back_by_compare(tmp_path, capsys, layout):
    # numlab run --dump-layout writes a foreign tool's layout; compare reads it and finds
    # the same values as the native dump (exit 0: identical runs, every row compared)
    base = ["run", "layernorm", "--fmt", "bf16", "--size", "batch=2,hidden=16", "--seed", "3"]
    assert cli.main([*base, "--dump", str(tmp_path / "native")]) == 0
    assert cli.main([*base, "--dump", str(tmp_path / layout), "--dump-layout", layout]) == 0
    capsys.readouterr()
    assert cli.main(["compare", "-gp", str(tmp_path / "native"), "-mp", str(tmp_path / layout),
                     "-o", str(tmp_path / "r.csv")]) == 0
    out = capsys.readouterr().out
    assert "0 failing" in out
    # existing target: refused without --force, before running
    assert cli.main([*base, "--dump", str(tmp_path / layout), "--dump-layout", layout]) == 2
    assert "--force" in capsys.readouterr().err
    assert cli.main([*base, "--dump-layout", layout]) == 2
    assert "--dump-layout" in capsys.readouterr().err
    assert cli.main([*base, "--dump", str(tmp_path / "x"), "--dump-layout", "onnx"]) == 2
    assert "onnx" in capsys.readouterr().err
