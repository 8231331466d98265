"""What ``numlab demo`` prints: the verdict first (checked against numbers
recomputed from the demo's rows and claim runs), one screen by default, every
table with ``--verbose`` and in the files, margins explained where they are
printed, and the README's demo figures generated from the same results."""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from numlab import cli, zoo
from numlab.claims.cases import make_case
from numlab.cli import demo
from numlab.cli.demo_text import README_MARKERS, replace_readme_summary
from numlab.execute import run
from numlab.experiments import demo_rows
from numlab.formats import get_format

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 80


def _run_cli(argv, mp) -> tuple[int, list[str], dict]:
    """``numlab ARGV`` at WIDTH columns, stdout captured; also what demo.main returned."""
    got = {}
    real = demo.main

    def spy(*a, **k):
        got["res"] = real(*a, **k)
        return got["res"]

    mp.setenv("COLUMNS", str(WIDTH))
    mp.setattr(demo, "main", spy)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(argv)
    return rc, buf.getvalue().splitlines(), got.get("res")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One ``numlab demo --quick`` for the whole module: (lines printed, result, out dir)."""
    # a long output path (CI's temporary directories are longer than a laptop's): the
    # screen must fit whatever the path's length
    out = tmp_path_factory.mktemp("demo_output") / ("a_long_directory_name_" * 4) / "out"
    with pytest.MonkeyPatch.context() as mp:
        rc, lines, res = _run_cli(["demo", "--quick", "--out", str(out)], mp)
    assert rc == 0
    return lines, res, out


def _pairs(rows):
    """more / less / same model-format pairs, from the numbers of the rows."""
    eager = {(r["model"], r["fmt"]): r for r in rows if r["mode"] == "eager"}
    out = {"more": {}, "less": {}, "same": set()}
    for r in rows:
        if r["mode"] != "fused":
            continue
        e = eager[(r["model"], r["fmt"])]["abs_mean"]
        key = (r["model"], r["fmt"])
        if r["bitwise_eq_eager"] == 1.0:
            out["same"].add(key)
        elif r["abs_mean"] < e:
            out["more"][key] = e / r["abs_mean"]
        elif r["abs_mean"] > e:
            out["less"][key] = r["abs_mean"] / e
    return out


def _verdict_block(lines) -> str:
    start = next(i for i, line in enumerate(lines) if line.startswith("VERDICT"))
    end = lines.index("", start)
    return " ".join(" ".join(lines[start:end]).split()), start


def test_the_first_lines_are_the_verdict(quick):
    lines, res, _ = quick
    block, start = _verdict_block(lines)
    assert start <= 4  # after the few header lines
    p = _pairs(res["rows"])
    n = len(res["config"].models) * len(res["config"].fmts)
    assert n == 8 and len(p["more"]) + len(p["less"]) + len(p["same"]) == n
    assert f"fused more accurate in {len(p['more'])} of {n} model/format pairs" in block
    assert f"fused less accurate in {len(p['less'])} of {n}" in block
    assert f"bitwise identical to eager in {len(p['same'])} of {n}" in block
    assert p["more"], "the quick demo has pairs where fused is more accurate (gelu_mlp)"
    for (model, fmt), q in p["more"].items():
        assert model in block and f"{fmt} {q:.2f}x" in block, (model, fmt, q)
    for model, _ in p["same"]:
        assert model in block
    # the claims: each failing one named with its counts, each holding one under "held"
    failed = [r for r in res["scaled_claims"] if r["verdict"] == "fails"]
    assert failed, "no_worse_tensor fails on fp8_mlp in the quick demo"
    for r in failed:
        assert f"FAILED {r['claim']} on fp8_mlp" in block
        assert f"{r['fmt']} {r['violations']}/{r['trials']}" in block
    held = block[block.index("held: "):]
    for r in res["scaled_claims"]:
        if r["verdict"] == "holds":
            assert r["claim"] in held
    # the preset losses: autofuse+decompose stores decomposed reductions in S
    less = {r["fusion"]: 0 for r in res["verdicts"]}
    for r in res["verdicts"]:
        less[r["fusion"]] += r["less"]
    for spec, k in less.items():
        named = re.search(rf"(?:under |, ){re.escape(spec)} (\d+)\b", block)
        assert (named is not None) == (k > 0), spec
        assert named is None or int(named.group(1)) == k, spec
    assert "reductions stored in S" in block


def test_fp8_note_states_the_recomputed_worst_trial(quick):
    """The note's worst trial, recomputed here from the trial's inputs: max
    |error| per output, fused above eager, and the margin in u_S*max|ref|."""
    lines, res, _ = quick
    text = " ".join(" ".join(lines).split())
    bad = [r for r in res["scaled_claims"] if r["claim"] == "no_worse_tensor" and r["verdict"] == "fails"]
    worst = max(bad, key=lambda r: r["worst_margin"])
    case = make_case("fp8_mlp", fmt=worst["fmt"], kind=worst["worst_kind"], seed=0, trial=worst["worst_trial"])
    assert worst["worst_kind"] == ("normal", "heavy_tailed")[worst["worst_trial"] % 2]
    g, S = zoo.get_model("fp8_mlp"), get_format(worst["fmt"])
    ref = run(g, case.inputs, mode="reference", fmt=S).outputs["y"]
    mx = {m: float(np.max(np.abs(run(g, case.inputs, mode=m, fmt=S).outputs["y"].astype(np.float64) - ref)))
          for m in ("eager", "fused")}
    assert mx["fused"] > mx["eager"]
    margin = (mx["fused"] - mx["eager"]) / (S.u * float(np.max(np.abs(ref))))
    assert worst["worst_margin"] == pytest.approx(margin, rel=1e-9)
    assert "Why no_worse_tensor fails" in text
    assert (f"trial {worst['worst_trial']} ({worst['worst_kind']}), {mx['fused']:.3g} fused vs "
            f"{mx['eager']:.3g} eager") in text
    assert "mean |error|" in text and "max |error| per output" in text
    assert f"each of {res['config'].trials} trials" in text


def test_margins_are_explained_where_printed(quick):
    lines, res, out = quick
    text = " ".join(" ".join(lines).split())
    for claim, what in (("no_worse_tensor", "max|fused-ref| - max|eager-ref| per output, in u_S*max|ref|"),
                        ("bound_no_worse", "max contract bound fused - eager per output, in u_S*max|ref|"),
                        ("error_within_bound", "|error| - contract bound, worst element, in that bound"),
                        ("no_worse_population", "in eager's pooled max |error|")):
        assert f"{claim}: " in text and what in text, claim
    assert "u_S*max|ref|: unit roundoff of S" in text and "1/2 to 1 ULP" in text
    assert "> 0: claim violated" in text
    page = html.unescape((out / "report.html").read_text())
    assert "max|fused-ref| - max|eager-ref| per output, in u_S*max|ref|" in page
    assert "Why no_worse_tensor fails" in page


def test_the_default_output_is_one_screen(quick):
    lines, _, _ = quick
    assert len(lines) <= 60, len(lines)
    assert max(map(len, lines)) <= WIDTH
    text = "\n".join(lines)
    assert "(part 1 of" not in text  # no table split into panels
    # the full tables and their legends are not printed, and the end says where they are
    assert "  0 ULP: " not in text and "all aligned: " not in text and "emulated_casts   " not in text
    flat = " ".join(text.split())  # the wrap may break a line anywhere (the path's length varies)
    assert "full tables: " in flat and "report.html" in flat and "--verbose" in flat


def test_verbose_prints_every_table(tmp_path):
    with pytest.MonkeyPatch.context() as mp:
        rc, lines, res = _run_cli(["demo", "--quick", "--models", "softmax", "--verbose",
                                   "--out", str(tmp_path / "o")], mp)
    assert rc == 0
    text = "\n".join(lines)
    assert _verdict_block(lines)[1] <= 4  # the verdict still comes first
    for r in res["rows"]:  # every row of the main table: model, format and mode on one line
        assert re.search(rf"^{r['model']}\s+{r['fmt']}\s+{r['mode']}\s", text, re.M), r
    for needle in ("  bits = eager: ", "  same bits: pairs", "  all aligned: ", "chain of n multiplies (fp16)"):
        assert needle in text
    for r in res["scaled_claims"]:
        assert re.search(rf"^{r['claim']}\s+{r['fmt']}\s+{r['verdict']}\s", text, re.M), r
    flat = " ".join(text.split())  # the wrap may break a line anywhere (the path's length varies)
    assert "max|fused-ref| - max|eager-ref|" in text and "printed above (--verbose)" in flat


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_files_hold_every_table(quick):
    _, res, out = quick
    assert {p.name for p in res["files"] if p.parent == out} >= {
        "results.csv", "verdicts.csv", "sources.csv", "chains.csv", "scaled_claims.csv", "results.json",
        "report.html"}
    rows = _csv(out / "results.csv")
    assert len(rows) == len(res["rows"]) == 4 * 2 * 3
    for got, want in zip(rows, res["rows"], strict=True):
        assert (got["model"], got["fmt"], got["mode"]) == (want["model"], want["fmt"], want["mode"])
        assert float(got["abs_mean"]) == want["abs_mean"] and got["verdict"] == want["verdict"]
    verdicts = _csv(out / "verdicts.csv")
    assert [(v["fusion"], v["kind"], int(v["less"])) for v in verdicts] == [
        (r["fusion"], r["kind"], r["less"]) for r in res["verdicts"]]
    assert len(_csv(out / "sources.csv")) == len(res["sources"])
    chains = _csv(out / "chains.csv")
    ns = res["config"].chain_ns
    assert len(chains) == 2 * 2 * len(ns)
    assert all(float(c["max_rel_error"]) <= float(c["bound"]) for c in chains)
    claims = _csv(out / "scaled_claims.csv")
    assert [(c["claim"], c["fmt"], c["verdict"], float(c["worst_margin"])) for c in claims] == [
        (r["claim"], r["fmt"], r["verdict"], r["worst_margin"]) for r in res["scaled_claims"]]
    assert all(c["margin_unit"] for c in claims)
    page = html.unescape((out / "report.html").read_text())
    for title in ("Errors against the fp64 reference", "Chain of n multiplies", "Fused vs eager across presets",
                  "Where the bits part", "Block-scaled fp8"):
        assert title in page
    for line in res["verdict"]:
        assert line in page  # the verdict heads the report too
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert meta["verdict"] == res["verdict"] and meta["trials"] == res["config"].trials


def test_verbose_is_a_demo_option(capsys):
    args = cli.build_parser().parse_args(["demo", "--verbose"])
    assert args.verbose is True
    assert cli.build_parser().parse_args(["demo"]).verbose is False
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    assert "--verbose" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# the README's demo figures
# ---------------------------------------------------------------------------
def _demo_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("### `numlab demo`")
    return text[start:text.index("\n### ", start + 1)]


def test_readme_demo_summary_is_what_the_demo_computes(quick):
    """The README's demo figures are demo.readme_block's output for the quick
    demo run here and the full demo's table rows; regenerate with
    ``numlab.cli.demo.update_readme("README.md")``."""
    _, res, _ = quick
    section = _demo_section()
    m = re.search(re.escape(README_MARKERS[0]) + r".*?" + re.escape(README_MARKERS[1]), section, re.S)
    assert m, "README's demo section has no generated summary"
    want = demo.readme_block(res)
    assert m.group(0) == want, "stale README demo summary; run numlab.cli.demo.update_readme('README.md')"
    # the full demo's counts, from its table rows counted here
    rows, _ = demo_rows(list(zoo.MODELS), ("fp16", "bf16"))
    p = _pairs(rows)
    flat = " ".join(want.split())
    assert f"`numlab demo` ({len(zoo.MODELS)} zoo models" in flat
    assert (f"more accurate than eager in {len(p['more'])} of {2 * len(zoo.MODELS)} model/format pairs"
            in flat)
    assert f"less accurate in {len(p['less'])} and bitwise identical in {len(p['same'])}" in flat


def test_readme_demo_section_has_no_hand_typed_figures():
    """Outside the generated block, the demo section quotes no figure of the
    demo's output (counts of pairs or models, ratios, shares, margins)."""
    section = _demo_section()
    outside = re.sub(re.escape(README_MARKERS[0]) + r".*?" + re.escape(README_MARKERS[1]), "", section,
                     flags=re.S)
    for pat in (r"\d+ of \d+", r"\d+(\.\d+)?x\b", r"\d+(\.\d+)?%", r"\b\d+ models", r"margin -?\d"):
        assert not re.search(pat, outside), (pat, re.search(pat, outside).group(0))


def test_replace_readme_summary():
    block = f"{README_MARKERS[0]}\nnew\n{README_MARKERS[1]}"
    text = f"a\n{README_MARKERS[0]}\nold\n{README_MARKERS[1]}\nb\n"
    assert replace_readme_summary(text, block) == f"a\n{block}\nb\n"
    with pytest.raises(ValueError, match="demo summary"):
        replace_readme_summary("no markers here", block)
