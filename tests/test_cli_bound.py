"""``numlab bound``: the contract bound per mode and output on the command
line (src/numlab/cli/bound.py): its report lines, ``--out`` files readable by
csv and pandas, ``--force``, and bad values refused naming the option."""

from __future__ import annotations

import csv
import json
import sys
import textwrap

import numpy as np
import pytest

from numlab import cli, zoo
from numlab.bounds import contract_bound
from numlab.contract_bounds import BOUND_MODES

SMALL = ["--size", "batch=2", "--size", "hidden=16"]


def _bound(argv, capsys):
    rc = cli.main(["bound", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_bound_is_a_subcommand():
    assert "bound" in cli.SUBCOMMANDS


def test_layernorm_all_modes_report(capsys):
    rc, out, err = _bound(["layernorm", "--fmt", "fp16", "--mode", "all"], capsys)
    assert rc == 0, err
    assert err == ""
    g = zoo.layernorm()
    xs = zoo.make_inputs(g, kind="normal", seed=0)
    for mode in BOUND_MODES:
        res = contract_bound(g, xs, mode=mode, fmt="fp16")
        assert res.header() in out.splitlines()  # the contract header line, whole
        assert f"max |numlab {mode} - reference|" in out
    assert out.count("output y [8x64]:") == 3
    for words in ("max abs bound", "max rel bound", "tightness", "inf elements           0 of 512", "top at ("):
        assert out.count(words) == 3, (words, out)
    assert "estimate" not in out  # only with --prob
    assert "exceeds the bound" not in out  # numlab's run honours the derived contract


def test_gelu_mlp_prob_and_out_files(tmp_path, capsys):
    d = tmp_path / "res"
    rc, out, err = _bound(["gelu_mlp", "--mode", "fused", "--prob", "0.99", "--top", "2", "--out", str(d)],
                          capsys)
    assert rc == 0, err
    assert "estimate (not a bound)" in out and "(prob 0.99)" in out
    assert f"wrote {d / 'bound.csv'}" in out
    g = zoo.gelu_mlp()
    xs = zoo.make_inputs(g, kind="normal", seed=0)
    b = contract_bound(g, xs, mode="fused", fmt="fp16")["y"]
    e = contract_bound(g, xs, mode="fused", fmt="fp16", prob=0.99)["y"]

    with open(d / "bound.csv", newline="") as fh:
        lines = fh.read().splitlines()
    assert lines[0].split(",")[:6] == ["mode", "output", "shape", "elements", "max_abs_bound", "max_finite_bound"]
    with open(d / "bound.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["mode"] == "fused" and row["output"] == "y" and row["inf_elements"] == "0"
    assert float(row["max_abs_bound"]) == pytest.approx(float(b.max()), rel=1e-12)
    assert float(row["estimate_max_abs"]) == pytest.approx(float(e.max()), rel=1e-12)
    assert float(row["tightness"]) >= 1.0 and row["run_exceeds_bound"] == "0"
    assert row["top_contributions"].count("(") == 2  # --top 2

    meta = json.loads((d / "bound.json").read_text())
    assert meta["options"]["modes"] == ["fused"] and meta["options"]["prob"] == 0.99
    assert meta["contract"]["name"] == "derived" and meta["contract"]["header"].startswith("contract derived")
    assert {"numlab", "numpy", "python"} <= set(meta["versions"])
    assert meta["rows"][0]["max_abs_bound"] == pytest.approx(float(row["max_abs_bound"]))


def test_out_files_read_by_pandas(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    d = tmp_path / "res"
    rc, _, err = _bound(["gelu_mlp", "--mode", "all", "--prob", "0.9", "--out", str(d)], capsys)
    assert rc == 0, err
    df = pd.read_csv(d / "bound.csv")
    assert list(df["mode"]) == list(BOUND_MODES) and df["max_abs_bound"].dtype.kind == "f"
    assert df["tightness"].dtype.kind == "f" and (df["tightness"] >= 1).all()
    for col in ("max_rel_bound", "inf_elements", "estimate_max_abs", "prob", "contract"):
        assert col in df.columns
    rows = pd.DataFrame(json.loads((d / "bound.json").read_text())["rows"])
    assert rows["mode"].tolist() == list(BOUND_MODES)
    assert np.allclose(rows["max_abs_bound"], df["max_abs_bound"])


def test_out_is_never_overwritten_without_force(tmp_path, capsys):
    d = tmp_path / "res"
    base = ["layernorm", *SMALL, "--out", str(d)]
    assert _bound([*base, "--mode", "eager"], capsys)[0] == 0
    before = (d / "bound.csv").read_text()
    (d / "bound.csv").write_text("mine\n")
    rc, out, err = _bound([*base, "--mode", "fused"], capsys)
    assert rc == 2 and out == ""
    assert "--out" in err and "--force" in err and "bound.csv" in err, err
    assert (d / "bound.csv").read_text() == "mine\n"  # untouched
    rc, out, err = _bound([*base, "--mode", "fused", "--force"], capsys)
    assert rc == 0, err
    text = (d / "bound.csv").read_text()
    assert text != before and "\nfused,y," in text
    # --force alone has nothing to apply to
    rc, _, err = _bound(["layernorm", *SMALL, "--force"], capsys)
    assert rc == 2 and "--out" in err


@pytest.mark.parametrize("opt, value, words", [
    ("--mode", "fusedd", ["'fusedd'", "eager", "emulated_casts", "all"]),
    ("--contract", "torch_gpu", ["'torch_gpu'", "torch_cpu", "triton_cuda"]),
    ("--contract", "torch_cpu:rsqrt=fast", ["rsqrt", "'fast'", "newton"]),
    ("--contract", "torch_cpu:nope=1", ["'nope'", "libm_ulps"]),
    ("--prob", "1.5", ["'1.5'", "(0, 1)"]),
    ("--prob", "0", ["'0'", "(0, 1)"]),
    ("--prob", "often", ["'often'", "(0, 1)"]),
    ("--top", "-2", ["-2", ">= 0"]),
    ("--fmt", "fp17", ["'fp17'", "fp16"]),
    ("--inputs", "gaussian", ["'gaussian'", "shifted_mean"]),
    ("--kernels", "codegenn", ["'codegenn'", "handwritten"]),
    ("--library", "handwrittenn", ["'handwrittenn'", "codegen"]),
])
def test_bad_values_name_the_option(opt, value, words, tmp_path, capsys):
    rc, out, err = _bound(["layernorm", *SMALL, opt, value, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2
    assert out == ""  # refused before anything ran
    assert opt in err, err
    for w in words:
        assert w in err, (w, err)
    for internal in ("fmt=", "prob=", "mode=", "contract="):
        assert internal not in err.replace("--contract=", "").replace("--fmt=", ""), err
    assert not any(tmp_path.iterdir())  # nothing written


def test_usage_errors(capsys):
    rc, out, err = _bound(["--mode", "eager"], capsys)
    assert rc == 2 and "MODEL" in err
    rc, out, err = _bound(["layernorm", *SMALL, "--mode", "eager", "--fusion", "off"], capsys)
    assert rc == 2 and "--fusion" in err and "--mode" in err
    rc, out, err = _bound(["layernorm", "--dtype", "fp16"], capsys)  # one spelling: --fmt
    assert rc == 2 and "unrecognized arguments" in err


def test_presets_and_fusion_reach_the_bound(capsys):
    rc, out, err = _bound(["layernorm", *SMALL, "--mode", "fused", "--fusion", "autofuse+decompose",
                           "--contract", "triton_cuda", "--top", "3"], capsys)
    assert rc == 0, err
    assert "contract triton_cuda:" in out and "fusion=autofuse+decompose" in out
    top = next(line for line in out.splitlines() if "top at (" in line)
    assert top.count("%") == 3  # a decomposed layer norm: several contributing nodes


MODULE = '''
import numpy as np


def ex(x):
    return {"y": np.exp(x), "z": x * 2.0}
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    name = "user_bound_mod"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_infinite_bounds_are_reported_not_hidden(user_module, tmp_path, capsys):
    np.savez(tmp_path / "part.npz", x=np.linspace(0.0, 12.0, 8).reshape(2, 4))  # exp(12) > fp16 max
    np.savez(tmp_path / "all.npz", x=np.full((2, 4), 12.0))
    rc, out, err = _bound(["--graph", f"{user_module}:ex", "--inputs", str(tmp_path / "part.npz"),
                           "--mode", "eager"], capsys)
    assert rc == 0, err
    assert "max abs bound          inf (1 infinite; over the finite ones" in out
    assert "inf elements           1 of 8: y (exp): overflow at 1 element" in out
    assert "inf elements           0 of 8" in out  # z is bounded
    rc, out, err = _bound(["--graph", f"{user_module}:ex", "--inputs", str(tmp_path / "all.npz"),
                           "--mode", "fused", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err  # everything infinite still exits 0, saying why
    assert "every element's bound is infinite (8 elements): y (exp): overflow at 8 elements" in out
    with open(tmp_path / "o" / "bound.csv", newline="") as fh:
        rows = {r["output"]: r for r in csv.DictReader(fh)}
    assert rows["y"]["max_abs_bound"] == "inf" and rows["y"]["inf_elements"] == "8"
    assert "overflow" in rows["y"]["inf_sources"] and rows["y"]["tightness"] == "n/a"
    assert float(rows["z"]["max_abs_bound"]) < 0.1 and rows["z"]["inf_elements"] == "0"
