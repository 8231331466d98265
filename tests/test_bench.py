"""numlab bench plumbing: the machine header, the scaling table, the markdown
section and its overwrite guard (speed itself is never asserted in tests)."""

from __future__ import annotations

import argparse

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
