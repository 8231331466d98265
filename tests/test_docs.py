"""The docs the code cites exist: every section of ``docs/design.md`` that code,
notebooks or the README name in quotes is a heading of that file, and nothing
cites documents the package does not ship."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"


def _texts():
    for p in sorted((ROOT / "src" / "numlab").rglob("*.py")):
        yield p, p.read_text()
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(p.read_text())
        yield p, "\n".join("".join(c["source"]) for c in nb["cells"])
    for p in (ROOT / "README.md", ROOT / "docs" / "layers.md"):
        yield p, p.read_text()


def _headings() -> set:
    return {m.group(1).strip() for m in re.finditer(r"^#+\s+(.*)$", DESIGN.read_text(), re.M)}


def _cited_sections(text: str) -> list:
    """Quoted phrases within a short window after each mention of design.md."""
    out = []
    flat = re.sub(r"\s+", " ", text.replace("``", "`"))
    for m in re.finditer(r"docs/design\.md", flat):
        window = flat[m.end(): m.end() + 120]
        # stop at the end of the sentence or the citation's closing parenthesis
        window = re.split(r"(?<=[.;)])\s", window, maxsplit=1)[0]
        out += [q.strip() for q in re.findall(r'"([A-Z][^"]{2,60})"', window)]
    return out


def test_cited_design_sections_exist():
    heads = _headings()
    missing = {}
    for p, text in _texts():
        bad = [s for s in _cited_sections(text) if s not in heads]
        if bad:
            missing[str(p.relative_to(ROOT))] = sorted(set(bad))
    assert not missing, f"sections cited but not headings of docs/design.md {sorted(heads)}: {missing}"


def test_the_checker_sees_a_missing_section():
    assert _cited_sections('see docs/design.md, section "No Such Part". Then') == ["No Such Part"]
    assert _cited_sections("(``docs/design.md``, \"The\nfour sources of difference\")") == [
        "The four sources of difference"]


_UNSHIPPED = re.compile(r"DESIGN\.md|seed 00\d|seed ``00\d|[Ff]ield report \d|\b[Ii]ssue \d+\b")


@pytest.mark.parametrize("where", ["src", "notebooks", "tests", "README.md", "docs"])
def test_no_citation_of_unshipped_documents(where):
    base = ROOT / where
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.suffix in (".py", ".ipynb", ".md"))
    hits = []
    for p in files:
        if p.name == "test_docs.py":
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if _UNSHIPPED.search(line) and "original contract" not in line:
                hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not hits, "cite docs/design.md or a public URL instead:\n" + "\n".join(hits)
