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
