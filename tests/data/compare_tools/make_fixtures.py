"""Record the compare fixtures from the real tools (run by hand, not by the
tests; the tests read what this wrote).

    . /work/venv/bin/activate && PYTHONPATH=$PWD/src python tests/data/compare_tools/make_fixtures.py \
        --msprobe83 /tmp/msp83/bin/msprobe --msprobe26 /tmp/msp26/bin/msprobe --msit /tmp/msit/bin/msit

with three venvs made as docs/compare.md says (msit pins numpy<2).  It writes

* ``numlab_{golden,mine}_{msprobe,msit}/``: a small graph dumped by numlab in
  msprobe's and msit's layouts (golden fp32/fp16/bf16 values; mine with
  planted errors: fp16 zeros, 1e-9-scale data, all-zero outputs (NaN
  cosine, with a large and a small MaxAbsErr), matching NaN positions, bf16);
* ``tool_{golden,mine}_{msprobe83,msprobe26,msit}/``: dumps written by the
  tools themselves (mindstudio-probe's PrecisionDebugger, msit's
  register_hook) on a tiny torch model;
* ``*.csv``: what ``msprobe compare`` (8.3.3 writes .xlsx: converted with
  pandas, cells unchanged) and ``msit llm compare`` (xlsx, sheet ``api``)
  printed for each pair.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

from numlab.compare.layouts import write_msit_dump, write_msprobe_dump

HERE = Path(__file__).resolve().parent


def graph():
    rng = np.random.default_rng(20261201)
    x = rng.standard_normal(32).astype(np.float32)
    g = {
        "x": x,
        "mm": (x * 1.5 + 0.25).astype(np.float32),
        "gelu": rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16),
        "half": np.where(np.arange(24) % 4 == 0, 0, rng.standard_normal(24)).astype(np.float16),
        "tiny": (rng.standard_normal(40) * 1e-9).astype(np.float32),
        "dead": rng.standard_normal(16).astype(np.float32),
        "nanout": np.where(np.arange(12) == 3, np.nan, rng.standard_normal(12)).astype(np.float32),
        "softmax": rng.random(16).astype(np.float32),
        "zeroed": (rng.standard_normal(16) * 1e-4).astype(np.float32),
    }
    m = dict(g)
    m["mm"] = (g["mm"] * (1 + 2e-4 * rng.standard_normal(32))).astype(np.float32)
    m["gelu"] = (g["gelu"].astype(np.float32) * 1.01).astype(ml_dtypes.bfloat16)
    h = g["half"].astype(np.float32) + 1e-3 * rng.standard_normal(24)
    h[::8] = 0
    m["half"] = h.astype(np.float16)
    m["tiny"] = (g["tiny"] * 1.003).astype(np.float32)
    m["dead"] = np.zeros(16, np.float32)
    nm = g["nanout"].copy()
    nm[5] += 0.01
    m["nanout"] = nm
    m["softmax"] = (g["softmax"] + 0.002).astype(np.float32)
    m["zeroed"] = np.zeros(16, np.float32)  # NaN cosine, MaxAbsErr < 0.001: msprobe says "Yes"
    meta = {"x": {"op": "input", "inputs": []}, "mm": {"op": "mul", "inputs": ["x"]},
            "gelu": {"op": "gelu", "inputs": ["mm"]}, "half": {"op": "cast", "inputs": ["gelu"]},
            "tiny": {"op": "scale", "inputs": ["x"]}, "dead": {"op": "relu", "inputs": ["x"]},
            "nanout": {"op": "log", "inputs": ["x"]}, "softmax": {"op": "softmax", "inputs": ["mm"]},
            "zeroed": {"op": "mul", "inputs": ["x"]}}
    return g, m, meta


def rules_graph():
    """A graph whose mine side trips each of msprobe 26.2.0's tensor-mode
    rules (``Result``): cosine drop only (warning), One Thousandth drop with a
    cosine drop (error + warning on one row), dtype and shape mismatches,
    NaN/inf in mine only (on an output and, through its consumer, an input
    row), an API without inputs (the inputs' minimum defaults to 1.0), and an
    API named ``to`` (on the tool's ignore list: every rule skipped)."""
    rng = np.random.default_rng(20261202)
    a = rng.standard_normal(16).astype(np.float32)
    g = {"a": a, "warn": (a * 2).astype(np.float32), "both": (a + 1).astype(np.float32),
         "dtype": (a * 3).astype(np.float32), "shape": (a - 1).astype(np.float32),
         "inf": np.exp(a).astype(np.float32), "after_inf": (np.exp(a) * 2).astype(np.float32),
         "src": rng.standard_normal(16).astype(np.float32), "to": (a * 5).astype(np.float32)}
    m = dict(g)
    w = g["warn"].copy()
    w[::2] = -w[::2]  # half the elements exact: cosine ~0, One Thousandth ~0.5
    m["warn"] = w
    m["both"] = (g["both"] * -1.5).astype(np.float32)
    m["dtype"] = g["dtype"].astype(np.float16)
    m["shape"] = g["shape"].reshape(4, 4)
    f = g["inf"].copy()
    f[3] = np.inf
    m["inf"] = f
    m["after_inf"] = (f * 2).astype(np.float32)
    m["src"] = (g["src"] * 1.1).astype(np.float32)
    m["to"] = (g["to"] * -1).astype(np.float32)
    meta = {"a": {"op": "input", "inputs": []}, "src": {"op": "input", "inputs": []},
            **{k: {"op": "mul", "inputs": ["a"]} for k in ("warn", "both", "dtype", "shape", "inf", "to")},
            "after_inf": {"op": "mul", "inputs": ["inf"]}}
    return g, m, meta


def record_rules(msprobe26_exe: Path, msprobe83_exe: Path) -> dict:
    """Dump :func:`rules_graph` in msprobe's layout and record both msprobe
    versions' CSVs on it (``numlab_rules_msprobe{26,83}.csv``)."""
    g, m, meta = rules_graph()
    paths = {side: write_msprobe_dump(HERE / f"numlab_rules_{side}_msprobe", arrays, node_meta=meta, force=True)
             for side, arrays in (("golden", g), ("mine", m))}
    msprobe26(msprobe26_exe, paths["golden"], paths["mine"], HERE / "numlab_rules_msprobe26.csv")
    msprobe83(msprobe83_exe, paths["golden"], paths["mine"], HERE / "numlab_rules_msprobe83.csv")
    return {"msprobe/" + side: rel(p) for side, p in paths.items()}


def run(cmd, **kw):
    print("$", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, **kw)


def only(pattern_dir: Path, suffix: str) -> Path:
    (f,) = sorted(p for p in pattern_dir.iterdir() if p.suffix == suffix)
    return f


def msprobe83(exe: Path, gold: Path, mine: Path, out_csv: Path):
    py = exe.parent / "python"
    with tempfile.TemporaryDirectory() as t:
        cfg = Path(t) / "cmp.json"
        cfg.write_text(json.dumps({"npu_path": str(mine / "dump.json"), "bench_path": str(gold / "dump.json"),
                                   "is_print_compare_log": True}))
        run([exe, "-f", "pytorch", "compare", "-i", cfg, "-o", Path(t) / "out"])
        xlsx = only(Path(t) / "out", ".xlsx")
        run([py, "-c", "import pandas as pd, sys; pd.read_excel(sys.argv[1], dtype=object, keep_default_na=False)"
             ".to_csv(sys.argv[2], index=False)", xlsx, out_csv])


def msprobe26(exe: Path, gold: Path, mine: Path, out_csv: Path):
    with tempfile.TemporaryDirectory() as t:
        run([exe, "compare", "--target_path", mine / "dump.json", "--golden_path", gold / "dump.json",
             "--output_path", Path(t) / "out"])
        shutil.copy(only(Path(t) / "out", ".csv"), out_csv)


def msit(exe: Path, gold: Path, mine: Path, out_csv: Path):
    py = exe.parent / "python"
    with tempfile.TemporaryDirectory() as t:
        run([exe, "llm", "compare", "-gp", gold, "-mp", mine, "-o", Path(t) / "out"])
        out = Path(t) / "out"
        files = sorted(out.iterdir())
        (f,) = files
        if f.suffix == ".csv":
            shutil.copy(f, out_csv)
        else:
            run([py, "-c", "import pandas as pd, sys; pd.read_excel(sys.argv[1], sheet_name='api', dtype=object, "
                 "keep_default_na=False).to_csv(sys.argv[2], index=False)", f, out_csv])


def rel(p: Path) -> str:
    return str(p.relative_to(HERE))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--msprobe83", type=Path, required=True)
    ap.add_argument("--msprobe26", type=Path, required=True)
    ap.add_argument("--msit", type=Path, required=True)
    ap.add_argument("--rules-only", action="store_true",
                    help="record only the msprobe 26.2.0 rules fixture (numlab_rules_*)")
    a = ap.parse_args()
    if a.rules_only:
        index = json.loads((HERE / "index.json").read_text())
        index["rules"] = record_rules(a.msprobe26, a.msprobe83)
        (HERE / "index.json").write_text(json.dumps(index, indent=1) + "\n")
        return
    g, m, meta = graph()
    paths = {}
    for side, arrays in (("golden", g), ("mine", m)):
        d = HERE / f"numlab_{side}_msprobe"
        paths[("msprobe", side)] = write_msprobe_dump(d, arrays, node_meta=meta, force=True)
        d = HERE / f"numlab_{side}_msit"
        paths[("msit", side)] = write_msit_dump(d, arrays, node_meta=meta, force=True)
    msprobe83(a.msprobe83, paths[("msprobe", "golden")], paths[("msprobe", "mine")], HERE / "numlab_msprobe83.csv")
    msprobe26(a.msprobe26, paths[("msprobe", "golden")], paths[("msprobe", "mine")], HERE / "numlab_msprobe26.csv")
    msit(a.msit, paths[("msit", "golden")], paths[("msit", "mine")], HERE / "numlab_msit.csv")
    # dumps the tools write themselves
    script = HERE / "tool_model.py"
    tool_paths = {}
    for name, exe in (("msprobe83", a.msprobe83), ("msprobe26", a.msprobe26), ("msit", a.msit)):
        py = exe.parent / "python"
        for side, scale in (("golden", "0.0"), ("mine", "0.001")):
            d = HERE / f"tool_{side}_{name}"
            shutil.rmtree(d, ignore_errors=True)
            run([py, script, "msit" if name == "msit" else "msprobe", d, scale], cwd=tempfile.gettempdir())
            leaf = next(d.rglob("model_tree.json" if name == "msit" else "dump.json")).parent
            tool_paths[(name, side)] = leaf
    msprobe83(a.msprobe83, tool_paths[("msprobe83", "golden")], tool_paths[("msprobe83", "mine")],
              HERE / "tool_msprobe83.csv")
    msprobe26(a.msprobe26, tool_paths[("msprobe26", "golden")], tool_paths[("msprobe26", "mine")],
              HERE / "tool_msprobe26.csv")
    msit(a.msit, tool_paths[("msit", "golden")], tool_paths[("msit", "mine")], HERE / "tool_msit.csv")
    index = {"numlab": {k[0] + "/" + k[1]: rel(v) for k, v in paths.items()},
             "tool": {k[0] + "/" + k[1]: rel(v) for k, v in tool_paths.items()},
             "rules": record_rules(a.msprobe26, a.msprobe83)}
    (HERE / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
