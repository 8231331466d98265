"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})


def test_readme_test_command_is_what_ci_runs():
    lines = (README.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    ci = lines[lines.index("# --- the README's second command, verbatim ---") + 1]
    assert ci.startswith("pip install") and "pytest" in ci
    assert ci in README.read_text(encoding="utf-8"), "README's second command must be .ci/run's"


def _text_block(path: Path) -> str:
    block = re.search(r"```text\n(.*?)```", path.read_text(encoding="utf-8"), re.S)
    assert block, f"{path.name} has no ```text block"
    return block.group(1)


def test_readme_layers_are_docs_layers():
    """README's layer diagram is docs/layers.md's (which test_layers checks against the contract)."""
    doc = _text_block(README.parent / "docs" / "layers.md")
    assert doc.strip(), "docs/layers.md's diagram is empty"
    assert _text_block(README) == doc


def test_readme_spec_grammars_are_the_parsers():
    """The "Spec strings" section shows numlab.fusion.GRAMMAR and the kernel GRAMMAR verbatim."""
    from numlab.fusion import GRAMMAR as FUSION_GRAMMAR
    from numlab.kernels.grammar import GRAMMAR as KERNEL_GRAMMAR

    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Spec strings"):]
    blocks = re.findall(r"```text\n(.*?)\n```", section, re.S)
    assert blocks[:2] == [FUSION_GRAMMAR, KERNEL_GRAMMAR]
