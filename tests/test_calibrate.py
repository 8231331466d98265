"""``numlab calibrate``: the report (markdown, CSV, JSON) per capability.

One small calibration (native capability, two cases, fp32, quick lengths, 300 check
rows) runs once in its subprocess through the command line; the tests read what it
wrote.  The rerun tests replace the measurement by the first run's result: they
check the output folders, not the numbers again.
"""

from __future__ import annotations

import csv
import json
import os

import pytest

import numlab.cli.calibrate as cli_calibrate
from numlab.cli import main as cli_main
from numlab.torch.calibrate import COLUMNS, ORDER_COLUMNS, REVEALED, Calibration

pytestmark = pytest.mark.torch

ARGS = ["--capabilities", "native", "--cases", "sum,exp", "--dtype", "fp32", "--quick", "--rows", "300"]
FILES = ("report.md", "results.csv", "orders.csv", "results.json", "orders.json")


def _require_torch():
    """Import torch, or skip (fail when NUMLAB_REQUIRE_TORCH=1), as tests/conftest.py's
    ``torch`` fixture does (a module-scoped fixture cannot use that function-scoped one,
    and ``from conftest import`` is ambiguous when notebooks/conftest.py is collected)."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("NUMLAB_REQUIRE_TORCH") == "1":
            pytest.fail(f"NUMLAB_REQUIRE_TORCH=1 but torch cannot be imported: {exc}")
        pytest.skip(f"torch is not installed ({exc}); install numlab[torch]")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    _require_torch()
    out = tmp_path_factory.mktemp("cal") / "cal"
    assert cli_main(["calibrate", *ARGS, "--out", str(out)]) == 0
    return out


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_report_has_every_column_and_shares_are_fractions(run):
    assert all((run / f).is_file() for f in FILES)
    rows = _csv(run / "results.csv")
    assert tuple(rows[0]) == COLUMNS
    recs = [dict(zip(COLUMNS, r, strict=True)) for r in rows[1:]]
    # 2 cases: row sum at lengths 64 and 100, exp on one shape; 3 modes each
    assert len(recs) == (2 + 1) * 3
    assert {r["mode"] for r in recs} == {"eager", "compiled", "compiled+emulate"}
    for r in recs:
        assert r["capability"] == "native" and r["aten_capability"] and r["path"], r
        if r["path"].startswith("not modelled"):
            assert r["share"] == "" and r["max_ulp"] == "", r
            continue
        share, ulp = float(r["share"]), float(r["max_ulp"])
        assert 0.0 <= share <= 1.0 and ulp >= 0.0, r
        assert (share == 1.0) == (ulp == 0.0), r
        assert (r["cause"] == "") == (share == 1.0), r  # a residual always names its cause
    sums = [r for r in recs if r["case"] == "row sum" and not r["path"].startswith("not modelled")]
    assert sums and all(float(r["share"]) == 1.0 for r in sums)  # reductions are bit for bit
    eager = [r for r in recs if r["case"] == "row sum" and r["mode"] == "eager"]
    assert all("aten_cascade(" in r["path"] for r in eager)


def test_orders_are_revealed_and_checked(run):
    rows = _csv(run / "orders.csv")
    assert tuple(rows[0]) == ORDER_COLUMNS
    recs = [dict(zip(ORDER_COLUMNS, r, strict=True)) for r in rows[1:]]
    assert [r["function"] for r in recs] == list(REVEALED)  # fp32 at n=100 (quick)
    for r in recs:
        assert r["n"] == "100" and r["check_rows"] == "300" and r["tree"].startswith("tree(")
        assert int(r["reproduced"]) == 300, r  # the revealed tree reproduces torch bit for bit
        assert 0 < int(r["probes"]) <= 100 * 7 and int(r["calls"]) >= 1, r
    eager = recs[0]
    assert eager["model"].startswith("aten_cascade(") and eager["same_tree"] == "True"
    assert int(eager["model_reproduced"]) == 300
    side = json.loads((run / "orders.json").read_text())  # the CSV's sidecar describes it
    assert side["file"] == "orders.csv" and tuple(side["columns"]) == ORDER_COLUMNS
    assert side["row_count"] == len(recs) and side["command"].startswith("numlab calibrate")


def test_json_and_markdown_name_the_machine(run):
    import torch

    data = json.loads((run / "results.json").read_text())
    res = data["results"]["native"]
    assert data["capabilities"] == ["native"] and data["settings"]["rows"] == 300
    assert res["machine"]["torch_version"] == str(torch.__version__)
    assert res["machine"]["threads"] == torch.get_num_threads()
    assert all(0.0 <= r["share"] <= 1.0 for r in res["rows"] if r["share"] is not None)
    md = (run / "report.md").read_text()
    for s in (res["machine"]["cpu"], f"torch {torch.__version__}", "ATen capability",
              "numlab calibrate --capabilities native", "| row sum |", "`torch.compile(torch.sum)`"):
        assert s in md, s


def test_rerun_writes_a_fresh_folder_unless_force(run, monkeypatch):
    cal = json.loads((run / "results.json").read_text())
    before = {f: (run / f).read_bytes() for f in FILES}
    again = Calibration(tuple(cal["capabilities"]), cal["results"], "again", cal["settings"])
    monkeypatch.setattr(cli_calibrate, "calibrate", lambda *a, **k: again)
    assert cli_main(["calibrate", *ARGS, "--out", str(run)]) == 0
    assert {f: (run / f).read_bytes() for f in FILES} == before  # nothing overwritten
    fresh = run / "run-001"
    assert all((fresh / f).is_file() for f in FILES)
    assert json.loads((fresh / "results.json").read_text())["command"] == "again"
    assert cli_main(["calibrate", *ARGS, "--out", str(run), "--force"]) == 0
    assert not (run / "run-002").exists()
    assert json.loads((run / "results.json").read_text())["command"] == "again"


@pytest.mark.parametrize("opt, value, named", [
    ("--capabilities", "native,avx3", "'avx3'"),
    ("--capabilities", "native,native", "repeats"),
    ("--capabilities", "", "empty"),
    ("--cases", "sum,cumsum", "'cumsum'"),
    ("--dtype", "fp32,fp8", "'fp8'"),
    ("--dtype", ",", "empty"),
    ("--cases", "", "empty"),
    ("--rows", "0", ">= 1"),
])
def test_bad_option_exits_2_naming_it(tmp_path, capsys, opt, value, named):
    assert cli_main(["calibrate", opt, value, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert opt in err and named in err, err
    assert not (tmp_path / "x").exists()


def test_bench_faithfulness_shares_the_suite():
    import numlab.bench.faithfulness as bench
    import numlab.torch.calibrate as cal

    assert bench.measure_case is cal.measure_case and bench.SUITE == cal.SUITE == tuple(cal.CASES.values())
