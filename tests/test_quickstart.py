"""README's "Check your kernel in ten lines" works verbatim: its shell lines run one by one in
an empty directory with ``numlab`` a console-script-like launcher outside it (so the working
directory is not on its ``sys.path``) and ``PYTHONPATH`` naming only numlab's own source; each
``numlab`` line exits 0 and prints HOLDS, and the same lines on a broken kernel's output exit 1
with VIOLATED.  Its Python block runs too."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

import numlab

README = Path(__file__).resolve().parents[1] / "README.md"
SRC = str(Path(numlab.__file__).resolve().parents[1])
HEAD = "## Check your kernel in ten lines"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    assert text.count(HEAD) == 1, f"README has no single {HEAD!r} section"
    start = text.index(HEAD)
    assert text.index("## Two commands on a fresh machine") < start, "the quickstart follows the install section"
    end = text.index("\n## ", start + len(HEAD))
    return text[start:end]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", _section(), re.S)


def _env(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "numlab"
    launcher.write_text(f"#!{sys.executable}\nimport sys\nfrom numlab.cli import main\nsys.exit(main())\n")
    launcher.chmod(0o755)
    for name in ("python", "python3"):
        (bin_dir / name).symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=SRC)
    return env


def _sh(line: str, cwd: Path, env: dict):
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_quickstart_shell_lines_run_verbatim(tmp_path):
    blocks = _blocks("bash")
    assert len(blocks) == 1, "the quickstart has one shell block"
    lines = [ln for ln in blocks[0].splitlines() if ln.strip()]
    assert len(lines) <= 10
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path)
    checks = []
    for line in lines:
        r = _sh(line, work, env)
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
        if line.startswith("numlab check"):
            assert "HOLDS" in r.stdout, (line, r.stdout[-2000:])
            checks.append(line)
    assert {shlex.split(c)[2] for c in checks} == {"error_within_bound", "no_worse_tensor"}
    assert (work / "mykernel.py").is_file() and (work / "in.npz").is_file() and (work / "out.npy").is_file()
    # a broken kernel (every output 0.4% too large, about 4 fp16 ulps): the same lines fail
    with np.load(work / "in.npz") as z:
        x, w = z["x"], z["w"]
    y = np.exp(x.astype(np.float32)) * w + 1
    np.save(work / "out.npy", (y * np.float32(1 + 2 ** -8)).astype(np.float16))
    for line in checks:
        r = _sh(line, work, env)
        assert r.returncode == 1, (line, r.stdout[-2000:], r.stderr[-2000:])
        assert "VIOLATED" in r.stdout and "counterexample:" in r.stdout


def test_the_quickstart_python_block_runs(tmp_path, monkeypatch):
    blocks = _blocks("python")
    assert len(blocks) == 1, "the quickstart has one Python block"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], f"{README}:{HEAD}", "exec"), {})
    assert not list(tmp_path.iterdir()), "the Python quickstart writes no files"


def test_the_quickstart_names_claims_that_exist_and_links_the_bug_table():
    section = _section()
    rows = [r for r in section.splitlines() if r.startswith("| ") and "---" not in r][1:]
    assert len(rows) >= 4
    named = {c for r in rows for c in re.findall(r"`([a-z_]+)`", r.split("|")[2])}
    assert {"error_within_bound", "no_worse_tensor"} <= named
    assert named - {"torch_cpu", "triton_cuda"} <= set(numlab.claims.CLAIMS), named
    link = re.search(r"\(docs/bounds\.md#([a-z0-9-]+)\)", section)
    assert link, "the quickstart links the bug table of docs/bounds.md"
    heads = re.findall(r"^## (.*)$", (README.parent / "docs" / "bounds.md").read_text(encoding="utf-8"), re.M)
    slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in heads}
    assert link.group(1) in slugs, (link.group(1), slugs)
