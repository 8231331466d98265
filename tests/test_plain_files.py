"""Every file numlab writes is plain and standard (docs/files.md).

Each CSV is written through the command line (``numlab compare`` in every flavour, ``check
plan``, ``bound --out``, ``demo --quick``, ``calibrate``) and read back with ``csv.DictReader``
and ``pandas.read_csv`` without options: the header is the first row, the column names are the
expected ones, and the rows hold what the Python API returns for the same run.  Each CSV's JSON
sidecar (the same name ending ``.json``) is read with ``json.load``.  The checksums of dumps and
counterexamples still catch a changed file.
"""

from __future__ import annotations

import csv
import json
import math
import shutil

import numpy as np
import pytest

import numlab.cli.calibrate as cli_calibrate
from numlab import zoo
from numlab.claims import load_counterexample, reproduce
from numlab.claims import run_plan as api_run_plan
from numlab.claims.plan import plan_rows
from numlab.cli import main as cli_main
from numlab.cli.bound import COLUMNS as BOUND_COLUMNS
from numlab.compare import COLUMNS as COMPARE_COLUMNS
from numlab.compare import compare_dumps
from numlab.compare.flavors import FLAVOR_HEADERS, flavor_rows
from numlab.contract_bounds import contract_bound
from numlab.experiments import demo_rows
from numlab.torch.calibrate import COLUMNS as CAL_COLUMNS
from numlab.torch.calibrate import ORDER_COLUMNS, Calibration

DEMO_COLUMNS = ["model", "fmt", "mode", "abs_max", "abs_p99", "abs_mean", "rel_max", "rel_p99", "ulp_max",
                "ulp_p99", "ulp0", "ulp1", "ulp_ge2", "bitwise_eq_eager", "nonfinite", "verdict", "fingerprint"]
PLAN_COLUMNS = ["check", "case", "fusion", "metric", "value"]
PLAN_ARGS = ["--trials", "2", "--quick", "--no-figures", "--fusion", "autofuse", "--seed", "3"]


def _dict_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _first_row(path):
    with open(path, newline="") as fh:
        return next(csv.reader(fh))


def _refuse_constant(token):
    raise ValueError(f"non-standard JSON token {token!r} (strict parsers refuse NaN/Infinity)")


def _sidecar(path):
    with open(path.with_suffix(".json")) as fh:
        return json.load(fh, parse_constant=_refuse_constant)


def _num(cell):
    return math.nan if cell in ("", None) else float(cell)


def _same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


# ---------------------------------------------------------------------------
# the files, each written once through the command line
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("dumps")
    for mode in ("eager", "fused"):
        assert cli_main(["run", "layernorm", "--fmt", "fp16", "--mode", mode, "--seed", "0",
                         "--dump", str(d / mode)]) == 0
    return d / "eager", d / "fused"


def _flavors():
    out = []
    for f in FLAVOR_HEADERS:
        marks = [pytest.mark.torch] if f == "msit" else []
        out.append(pytest.param(f, marks=marks))
    return ["exact", *out]


@pytest.fixture(scope="module", params=_flavors())
def compared(request, dumps, tmp_path_factory):
    flavor = request.param
    if flavor == "msit":
        pytest.importorskip("torch", reason="the msit flavour computes with torch; install numlab[torch]")
    g, m = dumps
    out = tmp_path_factory.mktemp("cmp") / f"{flavor}.csv"
    code = cli_main(["compare", "-gp", str(g), "-mp", str(m), "-o", str(out), "--flavor", flavor,
                     "--allow-failures"])
    assert code == 0
    return flavor, out, compare_dumps(g, m, flavor=flavor)


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "p"
    assert cli_main(["check", "plan", "--out", str(out), *PLAN_ARGS]) in (0, 1)
    return out


@pytest.fixture(scope="module")
def bound_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bound") / "b"
    assert cli_main(["bound", "layernorm", "--fmt", "fp16", "--mode", "eager", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "d"
    assert cli_main(["demo", "--quick", "--models", "layernorm", "--out", str(out)]) == 0
    return out


# a calibration measured by hand (the measurement needs torch and half a minute; the files
# are what is tested here): one modelled row, one not modelled, one revealed order
CAL_RESULTS = {"native": {
    "capability": "native", "aten_capability": "AVX2", "header": "machine: test", "env": {},
    "machine": {"cpu": "test"}, "seconds": 1.5,
    "rows": [{"capability": "native", "aten_capability": "AVX2", "case": "row sum", "dtype": "fp32",
              "shape": "8x64", "mode": "eager", "path": "ATen cascade_sum aten_cascade(8)", "share": 0.75,
              "max_ulp": 2.0, "cause": ""},
             {"capability": "native", "aten_capability": "AVX2", "case": "row sum", "dtype": "fp32",
              "shape": "8x64", "mode": "compiled", "path": "not modelled: no lanes, here", "share": None,
              "max_ulp": None, "cause": "a cause, with a comma"}],
    "orders": [{"capability": "native", "function": "torch.sum", "dtype": "fp32", "n": 100,
                "tree": "tree(+0:[[0..64:32],[8..72:32]])", "probes": 369, "calls": 6, "check_rows": 50,
                "reproduced": 50, "model": "aten_cascade(8)", "same_tree": True, "model_reproduced": 50}]}}


@pytest.fixture(scope="module")
def calibrate_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "c"
    cal = Calibration(("native",), CAL_RESULTS, "numlab calibrate --quick", {"quick": True})
    mp = pytest.MonkeyPatch()
    mp.setattr(cli_calibrate, "calibrate", lambda *a, **k: cal)
    try:
        assert cli_main(["calibrate", "--capabilities", "native", "--quick", "--out", str(out)]) == 0
    finally:
        mp.undo()
    return out


# ---------------------------------------------------------------------------
# csv: header first, the expected columns, the API's rows
# ---------------------------------------------------------------------------
def test_compare_csv_header_first_and_rows_are_the_api_rows(compared):
    flavor, out, rep = compared
    header = COMPARE_COLUMNS if flavor == "exact" else FLAVOR_HEADERS[flavor]
    assert _first_row(out) == header
    rows = _dict_rows(out)
    assert list(rows[0]) == header
    if flavor == "exact":
        assert [r["node"] for r in rows] == [r["node"] for r in rep.rows]
        for got, want in zip(rows, rep.rows, strict=True):
            for k in ("cosine_similarity", "MaxAbsErr", "max_ulp_error", "max_relative_error"):
                assert _same(_num(got[k]), _num(want[k])), (got["node"], k)
    else:
        want = flavor_rows(rep.rows, flavor)
        assert len(rows) == len(want) > 0
        name = header[0]
        assert [r[name] for r in rows] == [str(w[name]) for w in want]
    side = _sidecar(out)
    assert side["file"] == out.name and side["flavor"] == flavor and side["columns"] == header
    assert side["row_count"] == len(rows)
    assert side["flavor_note"].startswith(f"flavor={flavor}:")
    assert side["options"]["flavor"] == flavor and side["options"]["output"] == str(out)
    assert side["versions"]["numlab"] and side["thresholds"]["cosine"] == rep.thresholds.cosine


def test_plan_csv_is_the_api_plan(plan_dir):
    path = plan_dir / "plan.csv"
    assert _first_row(path) == PLAN_COLUMNS
    rows = _dict_rows(path)
    res = api_run_plan(None, trials=2, quick=True, fusion="autofuse", seed=3)
    want = plan_rows(res)
    assert len(rows) == len(want) > 20
    for got, w in zip(rows, want, strict=True):
        assert [got[k] for k in PLAN_COLUMNS[:4]] == [str(x) for x in w[:4]]
        v = w[4]
        if isinstance(v, (float, np.floating)) and not isinstance(v, bool):
            assert _same(float(got["value"]), float(v)), got
        else:
            assert got["value"] == str(v), got
    side = _sidecar(path)
    assert side["file"] == "plan.csv" and side["columns"] == PLAN_COLUMNS and side["row_count"] == len(rows)
    assert side["options"]["trials"] == 2 and side["options"]["seed"] == 3 and side["options"]["fusion"] == ["autofuse"]
    assert (plan_dir / "plan.txt").read_text().strip() == res["table"].strip()


def test_bound_csv_is_the_api_bound(bound_dir):
    path = bound_dir / "bound.csv"
    assert _first_row(path) == list(BOUND_COLUMNS)
    rows = _dict_rows(path)
    g = zoo.get_model("layernorm")
    inputs = zoo.make_inputs(g, kind="normal", seed=0)
    b = contract_bound(g, inputs, mode="eager", fmt="fp16")
    assert [r["output"] for r in rows] == list(b) and {r["mode"] for r in rows} == {"eager"}
    for r in rows:
        arr = np.asarray(b[r["output"]], dtype=np.float64)
        assert float(r["max_abs_bound"]) == float(arr.max())
        assert int(r["elements"]) == arr.size
    side = _sidecar(path)
    assert side["file"] == "bound.csv" and side["columns"] == list(BOUND_COLUMNS)
    assert side["row_count"] == len(rows) == len(side["rows"])


def test_demo_csv_is_the_api_rows(demo_dir):
    path = demo_dir / "results.csv"
    assert _first_row(path) == DEMO_COLUMNS
    rows = _dict_rows(path)
    want, _ = demo_rows(("layernorm",), ("fp16", "bf16"), fusion="autofuse", kind="normal", seed=0)
    assert len(rows) == len(want) > 0
    for got, w in zip(rows, want, strict=True):
        assert (got["model"], got["fmt"], got["mode"], got["verdict"], got["fingerprint"]) == \
            (w["model"], w["fmt"], w["mode"], w["verdict"], w["fingerprint"])
        for k in ("abs_max", "rel_p99", "ulp_max", "bitwise_eq_eager"):
            assert _same(_num(got[k]), float(w[k])), (got["model"], got["mode"], k)
    side = _sidecar(path)
    assert side["file"] == "results.csv" and side["columns"] == DEMO_COLUMNS
    assert side["row_count"] == len(rows) == len(side["rows"]) and side["meta"]["seed"] == 0


def test_calibrate_csvs_are_the_calibration(calibrate_dir):
    res = CAL_RESULTS["native"]
    for name, cols, want in (("results.csv", CAL_COLUMNS, res["rows"]),
                             ("orders.csv", ORDER_COLUMNS, res["orders"])):
        path = calibrate_dir / name
        assert _first_row(path) == list(cols)
        rows = _dict_rows(path)
        assert rows == [{k: "" if w[k] is None else str(w[k]) for k in cols} for w in want]
        side = _sidecar(path)
        assert side["file"] == name and side["columns"] == list(cols) and side["row_count"] == len(want)
        assert side["command"] == "numlab calibrate --quick" and side["capabilities"] == ["native"]
    assert Calibration.load(calibrate_dir).results == CAL_RESULTS  # results.json still loads


# ---------------------------------------------------------------------------
# pandas reads every CSV as is
# ---------------------------------------------------------------------------
def _pandas():
    return pytest.importorskip("pandas", reason="pandas is not installed (pip install -e '.[dev]'); "
                                                "the csv-module tests above still ran")


def test_pandas_reads_compare_csv(compared):
    pd = _pandas()
    flavor, out, rep = compared
    df = pd.read_csv(out)
    header = COMPARE_COLUMNS if flavor == "exact" else FLAVOR_HEADERS[flavor]
    assert list(df.columns) == header and len(df) == _sidecar(out)["row_count"]
    if flavor == "exact":
        assert list(df["node"]) == [r["node"] for r in rep.rows]
        want = np.array([_num(r["MaxAbsErr"]) for r in rep.rows])
        np.testing.assert_array_equal(df["MaxAbsErr"].to_numpy(dtype=np.float64), want)


@pytest.mark.parametrize("fixture, name, columns", [
    ("plan_dir", "plan.csv", PLAN_COLUMNS),
    ("bound_dir", "bound.csv", list(BOUND_COLUMNS)),
    ("demo_dir", "results.csv", DEMO_COLUMNS),
    ("calibrate_dir", "results.csv", list(CAL_COLUMNS)),
    ("calibrate_dir", "orders.csv", list(ORDER_COLUMNS)),
])
def test_pandas_reads_every_other_csv(request, fixture, name, columns):
    pd = _pandas()
    path = request.getfixturevalue(fixture) / name
    df = pd.read_csv(path)
    assert list(df.columns) == columns
    assert len(df) == len(_dict_rows(path)) == _sidecar(path)["row_count"] > 0


# ---------------------------------------------------------------------------
# checksums: a changed dump or counterexample is caught
# ---------------------------------------------------------------------------
def test_a_changed_dump_file_fails_its_checksum(dumps, tmp_path):
    g, m = dumps
    bad = tmp_path / "fused"
    shutil.copytree(m, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    node, meta = next(iter(manifest["nodes"].items()))
    f = bad / meta["file"]
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0x01  # one bit of the last value
    f.write_bytes(bytes(raw))
    rep = compare_dumps(g, bad)
    assert any("sha256" in why for why in rep.problems.values()), rep.problems
    out = tmp_path / "r.csv"
    assert cli_main(["compare", "-gp", str(g), "-mp", str(bad), "-o", str(out)]) == 2
    assert _sidecar(out)["problems"] == rep.problems
    assert compare_dumps(g, bad, verify=False).problems == {}  # only the checksum saw it


def test_a_changed_counterexample_fails_its_checksum(tmp_path):
    out = tmp_path / "cex"
    code = cli_main(["check", "no_worse_tensor", "layernorm", "--fmt", "fp16", "--trials", "10",
                     "--fusion", "autofuse+decompose", "--out", str(out)])
    assert code == 1
    (npz,) = out.glob("*.npz")
    case, meta, arrs = load_counterexample(npz)
    assert reproduce(npz)["bitwise"]
    changed = dict(arrs)
    key = next(k for k in arrs if k.startswith("input/"))
    changed[key] = arrs[key].copy()
    changed[key].flat[0] += 1.0
    np.savez(npz, **changed)
    with pytest.raises(ValueError, match=r"SHA-256.*inputs_sha256.*verify=False"):
        load_counterexample(npz)
    with pytest.raises(ValueError, match="SHA-256"):
        reproduce(npz)
    assert load_counterexample(npz, verify=False)[0].inputs[key.split("/", 1)[1]].flat[0] == \
        arrs[key].flat[0] + 1.0


def test_strict_json_spells_non_finite_numbers_as_the_csvs_do():
    from numlab import _json

    doc = {"a": np.float32("inf"), "b": [-np.inf, np.nan, 1.5], "c": (np.int64(3), np.bool_(True))}
    text = _json.dumps(doc)
    assert json.loads(text, parse_constant=_refuse_constant) == {"a": "inf", "b": ["-inf", "nan", 1.5],
                                                                 "c": [3, True]}
    with pytest.raises(ValueError):  # the default json output is what strict parsers refuse
        json.loads(json.dumps({"a": float("inf")}), parse_constant=_refuse_constant)
