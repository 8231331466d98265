"""numlab bench plumbing: the machine header, the scaling table, the markdown
section and its overwrite guard (speed itself is never asserted in tests)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from numlab import bench
from numlab.bench import scaling


def test_machine_header_names_cpu_flags_cores_and_load(monkeypatch):
    monkeypatch.setattr(bench, "_cpu_info", lambda: ("Test CPU 9000", ["avx2", "avx512f", "f16c"]))
    head = bench.machine_header()
    assert "Test CPU 9000" in head
    assert "avx2 avx512f f16c" in head
    assert "logical cpus" in head and "load average" in head
    assert "numpy" in head and "ml_dtypes" in head


def test_cpu_info_keeps_only_relevant_flags():
    model, flags = bench._cpu_info()
    assert isinstance(model, str) and model
    assert all(f.startswith(bench.FLAG_PREFIXES) for f in flags)


def test_scaling_sizes_and_table(monkeypatch):
    assert scaling.sizes() == [10**5, 10**6, 10**7]
    assert scaling.sizes(large=True)[-1] == 10**8
    monkeypatch.setattr(scaling, "sizes", lambda quick, large: [4096, 8192])
    table = scaling.main(quick=True)
    lines = table.splitlines()
    assert "ns/el" in lines[2] and lines[2].count("peak x") == 2
    rows = {ln.split("  ")[0].strip(): ln for ln in lines[3:] if ln and not ln.startswith("(")}
    assert set(rows) == set(scaling._cases(scaling.ROW))
    for ln in rows.values():
        nums = [float(v) for v in ln.split()[-4:]]
        assert all(v > 0 for v in nums)  # time per element and peak memory were measured
    assert "--large" in lines[-1]


def test_markdown_section_and_overwrite_guard(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scaling, "sizes", lambda quick, large: [4096])
    path = tmp_path / "perf.md"
    ns = argparse.Namespace(targets=["scaling"], quick=True, large=False, markdown=str(path), force=False)
    assert bench._run(ns) == 0
    text = path.read_text()
    assert text.startswith("## Performance")
    assert "### scaling" in text and "machine:" in text and "round_to fp16 rne" in text
    path.write_text("mine")
    with pytest.raises(FileExistsError, match="--markdown .* --force"):
        bench._run(ns)
    assert path.read_text() == "mine"
    ns.force = True
    assert bench._run(ns) == 0 and path.read_text().startswith("## Performance")


def test_agreement_counts_values_signs_of_zero_and_nans():
    from numlab.bench.rounding import agreement

    ours = np.array([1.0, -0.0, np.nan, 2.0])
    assert agreement(ours, ours.copy()) == 1.0
    assert agreement(ours, np.array([1.0, 0.0, np.nan, 2.0])) == 0.75  # +0 vs -0
    assert agreement(ours, np.array([1.0, -0.0, 3.0, np.nan])) == 0.5


def test_gfloat_column_agrees_with_numlab_where_both_are_ieee():
    """gfloat is an independent rounding implementation: its every deterministic
    mode it offers must agree bit for bit with numlab on random bit patterns."""
    pytest.importorskip("gfloat", reason="gfloat (optional reference emulator) is not installed")
    from numlab.bench.rounding import _gfloat_fn, agreement
    from numlab.formats import BF16, FP8_E4M3, FP8_E5M2, FP16
    from numlab.rounding import round_to

    x = np.random.default_rng(0).integers(0, 2**32, 4000, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        for fmt in (FP16, BF16, FP8_E4M3, FP8_E5M2):
            for rounding in ("rne", "rtz", "up", "down"):
                f = _gfloat_fn(fmt, rounding)
                assert agreement(round_to(x, fmt, rounding), f(x)) == 1.0, (fmt.name, rounding)


def test_demo_timer_runs_numlab_in_a_fresh_interpreter():
    from numlab.bench import demo

    wall, cpu = demo.time_demo(["--help"])  # the cheapest demo invocation
    assert wall > 0 and cpu > 0
    with pytest.raises(Exception, match="returned non-zero exit status"):
        demo.time_demo(["--seed", "-1"])  # refused by demo's own argument check


def test_summary_rows_give_the_range_and_how_much_a_missed_target_misses():
    ms = [bench.Measure("a", 1.25, 2.0), bench.Measure("b", 3.3, 3.0), bench.Measure("a", 0.5, 2.0),
          bench.Measure("b", 2.0, 3.0), bench.Measure("t", 7.0, 10.0, " s")]
    rows = bench.summary_rows(ms)
    assert [r[0] for r in rows] == ["a", "b", "t"]  # first-seen order
    assert rows[0][1:] == ("0.50–1.25×", "≤ 2×")
    assert rows[1][1:] == ("2.00–3.30× (missed by 10%)", "≤ 3×")
    assert rows[2][1:] == ("7.00 s", "≤ 10 s")


README_PERF = (__import__("pathlib").Path(__file__).resolve().parents[1] / "README.md")


def test_readme_table_is_rewritten_between_its_markers_and_nowhere_else(tmp_path, monkeypatch):
    from numlab.bench import rounding

    def fake_main(quick=False):
        return bench.Section("table", [bench.Measure("`round_to` x", 2.0, 2.5),
                                       bench.Measure("`round_to` x", 2.75, 2.5)])

    monkeypatch.setattr(rounding, "main", fake_main)
    path = tmp_path / "README.md"
    path.write_text(f"intro\n{bench.SUMMARY_BEGIN}\nold | 9.99×\n{bench.SUMMARY_END}\noutro\n")
    ns = argparse.Namespace(targets=["rounding"], quick=True, large=False, markdown=None,
                            readme=str(path), force=False)
    with pytest.raises(FileExistsError, match="--readme .* --force"):
        bench._run(ns)
    ns.force = True
    assert bench._run(ns) == 0
    text = path.read_text()
    assert text.startswith("intro\n") and text.endswith("\noutro\n") and "9.99" not in text
    assert "| `round_to` x | 2.00–2.75× (missed by 10%) | ≤ 2.5× |" in text
    assert "machine:" in text and text.count(bench.SUMMARY_BEGIN) == 1
    path.write_text("no markers here\n")
    with pytest.raises(ValueError, match="--readme .* no <!-- bench summary -->"):
        bench._run(ns)
    assert path.read_text() == "no markers here\n"  # refused before the run, nothing written


def test_the_readme_performance_table_is_the_generators_output():
    """The README's table is one block written by ``--readme``: its rows have the
    generator's shape, a row whose range exceeds its target says by how much, and it
    names the machine (so no hand-typed figure can sit in it)."""
    text = README_PERF.read_text()
    i, j = text.index(bench.SUMMARY_BEGIN), text.index(bench.SUMMARY_END)
    block = text[i:j]
    assert "machine:" in block and "(written by its `--readme`" in block
    rows = [ln for ln in block.splitlines() if ln.startswith("| ") and not ln.startswith("| what")]
    assert len(rows) >= 10
    import re
    for ln in rows:
        m = re.fullmatch(r"\| (.+) \| ([\d.]+)(?:–([\d.]+))?(×| s)(?: \(missed by (\d+)%\))? \| ≤ ([\d.]+)(×| s) \|", ln)
        assert m, ln
        hi = float(m.group(3) or m.group(2))
        target = float(m.group(6))
        assert (hi > target) == (m.group(5) is not None), ln
