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


_UNSHIPPED = re.compile(r"DESIGN\.md|seed 00\d|seed ``00\d|[Ff]ield report \d")
# tickets and the notes of parallel work: "#15", "issue 15", "Issue #15", "issues 13-16",
# helper tags "(h6)", "h1/h4", "h4's", "branch h4", and "see brief", "coordinator", "hand-off"
_TICKETS = re.compile(r"(?<![\w:&/#'\"])#\d{1,5}\b|\b[Ii]ssues? ?#?\d+|(?<!\w)\(h\d{1,2}(?:/h\d{1,2})*\)"
                      r"|\bh\d{1,2}/h\d{1,2}\b|\bh\d{1,2}'s\b|\bbranch h\d{1,2}\b"
                      r"|(?i:\bsee (?:the )?brief\b|\bcoordinator\b|\bhand-?offs?\b)")
# CSS and matplotlib colours ("color:#222", "solid #ddd", color="#555555") are not tickets
_COLOUR = re.compile(r"(?:colou?rs?|background|border|solid)[\s:=\"'(]*#[0-9a-fA-F]{3,8}\b")
_SCANNED = ("src", "tests", "notebooks", "docs", "README.md", "pyproject.toml")


def _lines(p: Path):
    """(line number, text) of a file; a notebook's cell sources only."""
    if p.suffix == ".ipynb":
        cells = json.loads(p.read_text())["cells"]
        return enumerate("".join("".join(c["source"]) + "\n" for c in cells).splitlines(), 1)
    return enumerate(p.read_text().splitlines(), 1)


def _leftovers(line: str) -> bool:
    return bool(_UNSHIPPED.search(line) and "original contract" not in line
                or _TICKETS.search(_COLOUR.sub("", line)))


@pytest.mark.parametrize("where", _SCANNED)
def test_no_citation_of_unshipped_documents(where):
    """No ticket numbers, helper tags or hand-off notes, no unshipped documents:
    the text says what the feature is, or cites docs/design.md or a public URL."""
    base = ROOT / where
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*")
                                                 if p.suffix in (".py", ".ipynb", ".md", ".toml"))
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}"
            for p in files if p.name != "test_docs.py" for i, line in _lines(p) if _leftovers(line)]
    assert not hits, "say what the thing is; cite docs/design.md or a public URL instead:\n" + "\n".join(hits)


@pytest.mark.parametrize("line", [
    "# see #15", "(#15)", "fixed in issue 15", "the issue #15 target", "Issue #15 sets it",
    "issues 13-16", "# --- matrix unit (h6) ---", "merged from h1/h4", "h4's format", "on branch h4",
    "see brief", "(section appended at the end, see the brief)", "coordinator please add", "a hand-off file",
    "DESIGN.md, seed 001"])
def test_the_leftover_check_sees_each_form(line):
    assert _leftovers(line)


@pytest.mark.parametrize("line", [
    "body{color:#222}", ".note{color: #555;font-size:13px}", "border: 1px solid #ddd", 'color="#555555"',
    "x = 1  # a comment", "import os  # noqa: E402", "#!/usr/bin/env python", "## Names", "### 1. promotion",
    "_store(_gelu64(h2), fmt)", "<h2>title</h2>", "onnxruntime#28435 reports it", "a[0] #: the first",
    "an issue with the bounds", "the 0.7 release", "H100's tensor core", "(H100)"])
def test_the_leftover_check_passes_ordinary_text(line):
    assert not _leftovers(line)


# --------------------------------------------------------------------------
# docs/glossary.md: one heading per term, every link to a term resolves
# --------------------------------------------------------------------------
GLOSSARY = ROOT / "docs" / "glossary.md"
_GLOSSARY_LINK = re.compile(r"glossary\.md#([^)\s\"'>\]`]+)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation other
    than ``-`` and ``_`` dropped (backticks too), each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _glossary_headings() -> list:
    return [m.group(1) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", GLOSSARY.read_text(), re.M)]


def _glossary_links(text: str) -> list:
    return _GLOSSARY_LINK.findall(text)


def _linking_texts():
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        yield p, "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"])
    for p in sorted((ROOT / "docs").rglob("*.md")):
        yield p, p.read_text()
    yield ROOT / "README.md", (ROOT / "README.md").read_text()


def test_glossary_headings_are_unique_terms():
    heads = _glossary_headings()
    slugs = [_slug(h) for h in heads]
    dup = sorted({s for s in slugs if slugs.count(s) > 1})
    assert not dup, f"docs/glossary.md: headings with the same anchor {dup}"
    # every term heading has a definition under it
    text = GLOSSARY.read_text()
    empty = [h for h in heads[1:] if not re.search(rf"^##\s+{re.escape(h)}\s*\n+[^#\s]", text, re.M)]
    assert not empty, f"docs/glossary.md: terms without a definition {empty}"
    assert len(heads) > 30


def test_every_glossary_link_resolves():
    anchors = {_slug(h) for h in _glossary_headings()}
    broken = {}
    for p, text in _linking_texts():
        links = _glossary_links(text)
        if p == GLOSSARY:  # the glossary's own links to its terms: ](#anchor)
            links += re.findall(r"\]\(#([^)\s]+)\)", text)
        bad = sorted({a for a in links if a not in anchors})
        if bad:
            broken[str(p.relative_to(ROOT))] = bad
    assert not broken, f"links to docs/glossary.md anchors that are no heading of it: {broken}"


@pytest.mark.parametrize("heading, slug", [
    ("unit roundoff u", "unit-roundoff-u"), ("a-priori bound", "a-priori-bound"), ("gamma_n", "gamma_n"),
    ("split-K", "split-k"), ("muls vs broadcast", "muls-vs-broadcast"), ("S", "s"),
    ("`fl(x)` and u.", "flx-and-u")])
def test_slug_is_githubs(heading, slug):
    assert _slug(heading) == slug


def test_the_glossary_check_sees_a_link():
    text = "[u](../docs/glossary.md#unit-roundoff-u), [x](glossary.md#no-such-term) and glossary.md alone"
    assert _glossary_links(text) == ["unit-roundoff-u", "no-such-term"]
    assert "no-such-term" not in {_slug(h) for h in _glossary_headings()}
