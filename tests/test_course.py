"""``numlab course build``: the static HTML course (numlab.course), and the
course's structure.

The main test builds the real course (every notebook executed, two at a
time) into tmp_path and reads the pages as a reader would: every page
exists, shows no error output, has one ``<img>`` per figure the executed
notebook holds (counted from the notebook's outputs and its widgets'
Output state, independently of the HTML export), no widget's
``interactive(children=...)`` text, nothing fetched from the network, and
the sidebar and previous/next links.  Small synthetic notebooks check the
offline math bundle, the navigation and titles, the glossary page and its
links, collapsed solutions, a notebook whose extra is missing (a page that
says what to install, exit 0), the failure path (exit 1 naming the
notebook and the cell) and the ``--out``/``--force`` rules.

The structure test reads every ``notebooks/NN_*.ipynb`` after 00 against
the course conventions: a first heading ``# NN: finding`` with the file's
number, at least two exercises (headings starting "Exercise" or
"Predict"), at least one "Predict", each followed by its solution (a cell
tagged ``solution``, hidden in JupyterLab, or a ``<details>`` block)
before the next exercise, and a last cell "What to remember" with 3-5
bullet lines.  The checker itself is tested on synthetic notebooks.
"""

from __future__ import annotations

import importlib.util
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _browser import playwright_and_chromium

nbformat = pytest.importorskip("nbformat", reason="the course needs the lab extra (nbformat)")
pytest.importorskip("nbclient", reason="the course needs the lab extra (nbclient)")
pytest.importorskip("nbconvert", reason="the course needs the lab extra (nbconvert)")

from numlab import course  # noqa: E402
from numlab.cli import main  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# building a course bundles MathJax from jupyter-server-mathjax (the lab extra); the structure tests need only nbformat
builds = pytest.mark.skipif(importlib.util.find_spec("jupyter_server_mathjax") is None,
                            reason="building the course needs the lab extra (jupyter-server-mathjax)")
STDERR_BLOCK = re.compile(r'data-mime-type="application/vnd\.jupyter\.stderr"[^>]*>(.*?)</div>', re.S)


class _Links(HTMLParser):
    """Every ``<a>`` of a page: (the class of the ``<nav>`` it is in, or "",
    its attributes, its text), whatever the quoting and attribute order."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.links, self._nav, self._a = [], [], None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "nav":
            self._nav.append(dict(attrs).get("class", ""))
        elif tag == "a":
            self._a = (self._nav[-1] if self._nav else "", dict(attrs), [])

    def handle_data(self, data):
        if self._a is not None:
            self._a[2].append(data)

    def handle_endtag(self, tag):
        if tag == "nav" and self._nav:
            self._nav.pop()
        elif tag == "a" and self._a is not None:
            self.links.append((self._a[0], self._a[1], "".join(self._a[2])))
            self._a = None

    def sidebar(self):
        return [(a, t) for nav, a, t in self.links if "nl-sidebar" in nav.split()]

    def rel(self, rel: str) -> list[str]:
        return [a.get("href") for nav, a, _t in self.links if "nl-prevnext" in nav.split() and a.get("rel") == rel]


def _stems():
    return sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _check_page(out: Path, stem: str) -> list[str]:
    """What is wrong with one page of a built course (empty: nothing)."""
    bad = []
    html = (out / f"{stem}.html").read_text(encoding="utf-8")
    executed = nbformat.read(out / "notebooks" / f"{stem}.ipynb", as_version=4)
    bad += [f"{stem}: {e}" for e in course.find_errors(executed)]
    bad += [f"{stem}: error output on the page: {b[:300]}" for b in STDERR_BLOCK.findall(html)
            if "Traceback" in b or "Error" in b]
    # every figure, those drawn inside interact/Output widgets included
    figures, imgs = course.figure_count(executed), len(re.findall(r"<img\b", html))
    if imgs != figures:
        bad.append(f"{stem}: {imgs} <img> on the page, {figures} figures in the executed notebook")
    bad += [f"{stem}: {t!r} on the page" for t in ("interactive(children=", "HBox(children=", "VBox(children=")
            if t in html]
    # a notebook with widgets keeps their state in the executed file; the page draws their controls
    state = executed.metadata.get("widgets", {}).get(course.WIDGET_STATE, {}).get("state", {})
    views = sum(1 for c in executed.cells for o in c.get("outputs", []) if course.WIDGET_VIEW in o.get("data", {}))
    if views and not state:
        bad.append(f"{stem}: {views} widget views but no stored widget state")
    if views and "nl-static-widget" not in html:
        bad.append(f"{stem}: widget views but no static controls on the page")
    bad += [f"{stem}: {p}" for p in _offline_problems(out, html)]
    links = _Links(html)
    current = [a.get("href") for a, _t in links.sidebar() if "nl-current" in a.get("class", "").split()]
    if current != [f"{stem}.html"]:
        bad.append(f"{stem}: the sidebar marks {current} as the current page")
    if not links.rel("prev"):
        bad.append(f"{stem}: no previous link")
    return bad


SRC_RE = re.compile(r"<(?:script|img|iframe)\b[^>]*\bsrc\s*=\s*['\"]([^'\"]*)['\"]", re.I)
HREF_RE = re.compile(r"<link\b[^>]*\bhref\s*=\s*['\"]([^'\"]*)['\"]", re.I)
IMPORT_RE = re.compile(r"(?:@import\s+(?:url\()?|\bimport\s*\(\s*)['\"]?(https?://[^'\")\s]+)")


def _ids(page: str) -> set[str]:
    """Every ``id`` attribute of a page, unescaped as a browser reads it (a
    heading's id may hold quotes: ``fp32's``)."""
    found: set[str] = set()

    class _P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.update(v for k, v in attrs if k == "id" and v)

    _P().feed(page)
    return found


def _dangling_links(out: Path) -> list[str]:
    """Links between the course's pages (``page.html#anchor``) whose page or
    anchor does not exist."""
    ids = {p.name: _ids(p.read_text(encoding="utf-8")) for p in out.glob("*.html")}
    bad = []
    for name in sorted(ids):
        for _nav, a, _t in _Links((out / name).read_text(encoding="utf-8")).links:
            href = a.get("href") or ""
            m = re.fullmatch(r"([\w.-]+\.html)?(?:#(.+))?", href)
            target = (m.group(1) or name) if m else None
            if m and (target not in ids or (m.group(2) and m.group(2) not in ids[target])):
                bad.append(f"{name}: link to {href}, which is not in the course")
    return bad


def _offline_problems(out: Path, html: str) -> list[str]:
    """What a page would fetch from the network, or load from a file that
    is not in the course folder."""
    bad = []
    for url in SRC_RE.findall(html) + HREF_RE.findall(html):
        if re.match(r"(?i)(https?:)?//", url):
            bad.append(f"fetches {url} from the network")
        elif not url.startswith("data:") and not (out / url.split("?")[0].split("#")[0]).is_file():
            bad.append(f"loads {url}, which is not in the course folder")
    bad += [f"imports {u} from the network" for u in IMPORT_RE.findall(html)]
    return bad


@builds
def test_course_builds_and_reads_statically(tmp_path):
    """The real course, built as CI builds it (one test: under pytest-xdist a
    shared fixture would build it once per worker)."""
    out = tmp_path / "site"
    assert main(["course", "build", "--out", str(out), "--jobs", "2", "--timeout", "300"]) == 0
    index = (out / "index.html").read_text(encoding="utf-8")
    stems = _stems()
    assert len(stems) >= 8
    bad = []
    for stem in stems:
        info = course.notebook_info(NOTEBOOKS / f"{stem}.ipynb")
        if not (out / f"{stem}.html").is_file() or not (out / "notebooks" / f"{stem}.ipynb").is_file():
            bad.append(f"{stem}: page or executed notebook missing")
            continue
        listed = [a.get("href") for nav, a, _t in _Links(index).links if not nav]
        if f"{stem}.html" not in listed or f"numlab[{', '.join(info.extras)}]" not in index:
            bad.append(f"{stem}: not listed in index.html with its extras {info.extras}")
        bad += _check_page(out, stem)
    bad += _dangling_links(out)
    assert bad == []


def test_course_extras_from_imports():
    infos = {p.stem: course.notebook_info(p) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))}
    torchy = {s for s, i in infos.items()
              if re.search(r"^\s*(import|from)\s+(torch|numlab\.torch)\b",
                           "\n".join(c.source for c in course._read(i.path).cells if c.cell_type == "code"),
                           re.M)}
    assert torchy, "the PyTorch notebook imports torch"
    for s, i in infos.items():
        assert i.extras[0] == "lab"
        assert ("torch" in i.extras) == (s in torchy)


def _tiny(folder: Path, name: str, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {name}")] + [nbformat.v4.new_code_cell(s) for s in sources]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


WIDGET_CELL = (
    "import ipywidgets as W\n"
    "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n%matplotlib inline\n"
    "def f(n=3, kind='a'):\n    plt.plot(range(n)); plt.show()\n"
    "W.interact(f, n=W.IntSlider(value=3, min=1, max=9, description='n'), kind=['a', 'b']);"
)


@builds
def test_course_error_exit_names_notebook_and_cell(tmp_path, capsys):
    src = tmp_path / "nbs"
    _tiny(src, "00_fine", "x = 1")
    _tiny(src, "01_broken", "x = 1", "1 / 0")
    out = tmp_path / "site"
    rc = main(["course", "build", "--notebooks", str(src), "--out", str(out), "--jobs", "2"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "01_broken.ipynb: cell 3: ZeroDivisionError" in err
    assert "00_fine" not in err
    assert (out / "01_broken.html").is_file()  # written, so the failure can be read


@builds
def test_course_error_inside_widget_is_caught(tmp_path):
    src = tmp_path / "nbs"
    _tiny(src, "00_w", "import ipywidgets as W\nW.interact(lambda n=1: 1 / (n - 1), n=(1, 3));")
    with pytest.raises(course.CourseError, match=r"00_w.ipynb: cell 2 \(inside a widget's output\): "
                                                 r"ZeroDivisionError"):
        course.build(tmp_path / "site", notebooks=src, jobs=1, echo=lambda *a: None)


@builds
def test_course_static_widgets(tmp_path):
    src = tmp_path / "nbs"
    _tiny(src, "00_w", WIDGET_CELL, "plt.plot([1, 2]); plt.show()")
    out = tmp_path / "site"
    assert main(["course", "build", "--notebooks", str(src), "--out", str(out)]) == 0
    html = (out / "00_w.html").read_text(encoding="utf-8")
    # the interact's figure and the plain figure; the slider at 3 of 1..9, the dropdown on 'a'
    assert len(re.findall(r"<img\b", html)) == 2
    assert re.search(r"<input[^>]*type=.range[^>]*>", html)
    assert re.search(r"value=.3.", html) and "<option selected" in html
    assert "interactive(children=" not in html
    assert _offline_problems(out, html) == []
    meta = json.loads((out / "course.json").read_text())
    assert meta["notebooks"][0]["figures"] == 2


@pytest.mark.parametrize("argv, needle", [
    (["--jobs", "0"], "--jobs 0"),
    (["--timeout", "-1"], "--timeout -1"),
])
def test_course_bad_options_name_the_option(tmp_path, capsys, argv, needle):
    src = tmp_path / "nbs"
    _tiny(src, "00_x", "x = 1")
    rc = main(["course", "build", "--notebooks", str(src), "--out", str(tmp_path / "s"), *argv])
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_course_empty_notebooks_folder(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["course", "build", "--notebooks", str(tmp_path / "empty"), "--out", str(tmp_path / "s")]) == 2
    assert "no NN_*.ipynb notebooks" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# a synthetic course: offline math, navigation, titles, glossary, solutions, a missing extra
# ---------------------------------------------------------------------------
M, C = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
FAKE_MODULE = "nl_course_test_absent_module"  # importable nowhere: its notebook needs the "fake" extra
GLOSSARY_MD = ("# Glossary\n\n## S\n\nThe scalar in `x*S`.\n\n## Unit roundoff `u`\n\n"
               "$u = 2^{-p}$ (see [the exercises](../notebooks/01_ex.ipynb)).\n")


def _solution_cell(source: str):
    cell = C(source)
    cell.metadata = {"tags": ["solution"], "jupyter": {"source_hidden": True}}
    return cell


def _write(folder: Path, stem: str, cells) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{stem}.ipynb")
    return folder / f"{stem}.ipynb"


def _good_exercise_notebook(number: str = "01"):
    """A notebook that follows every course convention."""
    return [M(f"# {number}: Newton steps double the correct bits"),
            M("## Exercise 1: count the Newton steps\n\nHow many steps from 12 bits to fp32?"),
            C("my_steps = None  # your answer"),
            _solution_cell("# Solution\nsteps = 1\nassert 12 * 2 ** steps >= 24"),
            C("print(my_steps)"),
            M("## Predict: does `x*S` round?\n\nWrite your prediction first.\n\n"
              "<details><summary>Solution</summary>\n\nIt rounds **twice**.\n\n</details>"),
            M("## What to remember\n\n* one\n* two\n* three")]


def _synthetic_course(root: Path) -> Path:
    """notebooks/ (00 with math and links, 01 with exercises, 02 needing a fake extra) and docs/glossary.md."""
    nbs = root / "notebooks"
    _write(nbs, "00_start", [M("# 00 · Start `here`\n\nThe model $|\\delta| \\le u$ and\n\n"
                               "$$\\gamma_n = \\frac{nu}{1 - nu}$$\n\nSee [S](../docs/glossary.md#s), "
                               "[u](../docs/glossary.md#unit-roundoff-u) and [the exercises](01_ex.ipynb)."),
                             C("x = 1\nx")])
    _write(nbs, "01_ex", _good_exercise_notebook())
    _write(nbs, "02_fake", [M("# 02 — Needs a **fake** extra"), C(f"import {FAKE_MODULE}\n{FAKE_MODULE}.go()"),
                            C(f"y = {FAKE_MODULE}.x")])
    (root / "docs").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "glossary.md").write_text(GLOSSARY_MD, encoding="utf-8")
    return nbs


@pytest.fixture()
def fake_extra(monkeypatch):
    monkeypatch.setitem(course.EXTRA_OF_IMPORT, FAKE_MODULE, "fake")


@builds
def test_course_synthetic_reads_offline_and_navigates(tmp_path, capsys, fake_extra):
    nbs = _synthetic_course(tmp_path)
    out = tmp_path / "site"
    # exit 0 although 02 imports a module that is not installed: it is built as a "needs" page
    assert main(["course", "build", "--notebooks", str(nbs), "--out", str(out), "--jobs", "2"]) == 0
    said = capsys.readouterr().out
    assert "02_fake: not run (needs: pip install numlab[fake])" in said
    order = ["index.html", "00_start.html", "01_ex.html", "02_fake.html", "glossary.html"]
    labels = {"00_start.html": "00 · Start here", "01_ex.html": "01 · Newton steps double the correct bits",
              "02_fake.html": "02 · Needs a fake extra", "glossary.html": "Glossary"}
    pages = {name: (out / name).read_text(encoding="utf-8") for name in order}
    for k, (name, html) in enumerate(pages.items()):
        # nothing from the network; the MathJax every page loads is in the course folder
        assert _offline_problems(out, html) == [], name
        assert "_static/mathjax/MathJax.js?config=" in html, name
        assert not re.search(r"cdnjs|unpkg|jsdelivr|require\.min\.js|mermaid", html), name
        # the sidebar: every page, in order, clean labels, the current page marked once
        links = _Links(html)
        side = links.sidebar()
        assert [a["href"] for a, _t in side] == order, (name, side)
        assert [a["href"] for a, _t in side if "nl-current" in a.get("class", "").split()] == [name]
        assert [t.split("needs:")[0] for _a, t in side[1:]] == [labels[n] for n in order[1:]], side
        assert [t for a, t in side if a["href"] == "02_fake.html"] == [
            "02 · Needs a fake extraneeds: pip install numlab[fake]"]  # marked on every page
        # previous / next in reading order, at the top and the bottom
        assert links.rel("prev") == ([order[k - 1]] * 2 if k else []), name
        assert links.rel("next") == ([order[k + 1]] * 2 if k + 1 < len(order) else []), name
    index = pages["index.html"]
    assert [(a["href"], t) for nav, a, t in _Links(index).links if not nav and a["href"].startswith("0")] == [
        ("00_start.html", "Start here"), ("01_ex.html", "Newton steps double the correct bits"),
        ("02_fake.html", "Needs a fake extra")]
    assert "`" not in re.sub(r"<script.*?</script>", "", index, flags=re.S)
    assert index.count("needs: pip install numlab[fake]") == 2  # sidebar and table
    # math: the bundle holds the config, the TeX input, the HTML-CSS output and its web fonts
    mj = out / "_static" / "mathjax"
    for f in ("config/TeX-AMS-MML_HTMLorMML-full.js", "config/Safe.js", "extensions/Safe.js",
              "jax/input/TeX/config.js", "jax/output/HTML-CSS/autoload/mtable.js",
              "jax/output/HTML-CSS/fonts/STIX-Web/fontdata.js", "fonts/HTML-CSS/STIX-Web/woff/STIXMathJax_Main-Regular.woff"):
        assert (mj / f).is_file(), f
    assert sum(f.stat().st_size for f in mj.rglob("*") if f.is_file()) < 4_000_000
    assert "\\gamma_n" in pages["00_start.html"] and '"HTML-CSS"' in pages["00_start.html"]
    # links: the glossary and the other notebooks' pages
    start = pages["00_start.html"]
    in_text = [a.get("href") for nav, a, _t in _Links(start).links if not nav]
    assert in_text[-3:] == ["glossary.html#s", "glossary.html#unit-roundoff-u", "01_ex.html"], in_text
    assert "glossary.md" not in start
    glossary = pages["glossary.html"]
    assert re.findall(r"<h2 id=.([\w-]+).>", glossary) == ["s", "unit-roundoff-u"]
    assert "01_ex.html" in [a.get("href") for nav, a, _t in _Links(glossary).links if not nav]
    assert _dangling_links(out) == []
    (out / "glossary.html").write_text(glossary.replace("id='s'", "id='x'").replace('id="s"', 'id="x"'))
    assert _dangling_links(out) == ["00_start.html: link to glossary.html#s, which is not in the course",
                                    "glossary.html: link to #s, which is not in the course"]
    meta = json.loads((out / "course.json").read_text())
    assert [(n["stem"], n["ran"], n["needs"]) for n in meta["notebooks"]] == [
        ("00_start", True, []), ("01_ex", True, []), ("02_fake", False, ["fake"])]


def _between(html: str, start: str, end: str) -> list[str]:
    return re.findall(re.escape(start) + r"(.*?)" + re.escape(end), html, re.S)


@builds
def test_course_solutions_collapsed_and_missing_extra_page(tmp_path, fake_extra):
    nbs = _synthetic_course(tmp_path)
    out = tmp_path / "site"
    # 03 imports the module where the import scan does not see it: the run stops there, the page says why
    late = _write(nbs, "03_late", [M("# 03: Late"), C(f"mod = __import__({FAKE_MODULE!r})"), C("mod.go()")])
    res = course.build(out, notebooks=[nbs / "01_ex.ipynb", nbs / "02_fake.ipynb", late], jobs=2,
                       echo=lambda *a: None)
    assert res["skipped"] == {"02_fake": ("fake",), "03_late": ("fake",)}
    html = (out / "01_ex.html").read_text(encoding="utf-8")
    # the solution cell, closed, under "Solution"; the answer cell outside it
    folded = _between(html, '<details class="nl-solution"><summary>Solution</summary>', "</details>")
    assert len(folded) == 1 and "assert" in re.sub(r"<[^>]+>", "", folded[0])
    assert "my_steps" not in re.sub(r"<[^>]+>", "", folded[0])
    assert "my_steps" in re.sub(r"<[^>]+>", "", html.replace(folded[0], ""))
    assert not re.search(r"<details[^>]*\bopen\b", html)
    # the markdown <details> still renders its markdown inside
    md = _between(html, "<details><summary>Solution</summary>", "</details>")
    assert len(md) == 1 and "<strong>twice</strong>" in md[0]
    # the page of the notebook whose extra is missing: what to install, its code, no error output
    fake = (out / "02_fake.html").read_text(encoding="utf-8")
    assert "needs: <code>pip install numlab[fake]</code>" in fake
    assert FAKE_MODULE in fake and "go" in fake
    assert not re.search(r"NameError|ModuleNotFoundError|Traceback", fake)
    assert course.find_errors(nbformat.read(out / "notebooks" / "02_fake.ipynb", as_version=4)) == []
    late_page = (out / "03_late.html").read_text(encoding="utf-8")
    assert "needs: <code>pip install numlab[fake]</code>" in late_page
    assert not re.search(r"NameError|ModuleNotFoundError|Traceback", late_page)


@builds
def test_course_out_and_force_rules(tmp_path, capsys):
    src = tmp_path / "nbs"
    _tiny(src, "00_a", "x = 1")
    _tiny(src, "01_b", "x = 1", "1 / 0")
    out = tmp_path / "site"
    argv = ["course", "build", "--notebooks", str(src), "--out", str(out), "--jobs", "2"]
    assert main(argv) == 1  # a broken course: its pages written
    capsys.readouterr()
    stamp = (out / "index.html").stat().st_mtime_ns
    # a rebuild into it is refused, naming --force, before running anything; nothing nested in it
    (src / "01_b.ipynb").unlink()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a course" in err and "--force" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["_static", "notebooks"]
    assert (out / "index.html").stat().st_mtime_ns == stamp
    # nor a course inside a course, even with --force
    assert main(["course", "build", "--notebooks", str(src), "--out", str(out / "run-001"), "--force"]) == 2
    assert "inside the course" in capsys.readouterr().err and not (out / "run-001").exists()
    # --force replaces it: the broken notebook's page is gone from the folder and the sidebar
    assert main([*argv, "--force"]) == 0
    assert "--force: replacing the course" in capsys.readouterr().out
    assert (out / "index.html").stat().st_mtime_ns != stamp
    assert not (out / "01_b.html").exists() and not (out / "notebooks" / "01_b.ipynb").exists()
    assert "01_b" not in (out / "00_a.html").read_text(encoding="utf-8")
    # --out naming a file
    (tmp_path / "f").write_text("x")
    assert main(["course", "build", "--notebooks", str(src), "--out", str(tmp_path / "f")]) == 2
    assert "not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("heading, title", [
    ("04: Fusing keeps `fp32` inside a block", "Fusing keeps fp32 inside a block"),
    ("02 — The four sources, one switch at a time", "The four sources, one switch at a time"),
    ("00 · Start here", "Start here"),
    ("07 - Real PyTorch: eager vs `torch.compile`", "Real PyTorch: eager vs torch.compile"),
    ("Bounds for [every](x.md) **model**", "Bounds for every model"),
])
def test_clean_title(heading, title):
    assert course.clean_title(heading) == title


@pytest.mark.parametrize("heading, slug", [
    ("S", "s"), ("Unit roundoff `u`", "unit-roundoff-u"), ("`gamma_n`", "gamma_n"),
    ("a-priori bound", "a-priori-bound"), ("Muls vs broadcast (Ascend)", "muls-vs-broadcast-ascend"),
])
def test_github_slug(heading, slug):
    assert course.github_slug(heading) == slug


def test_extra_of_import_names_the_extras():
    assert course.EXTRA_OF_IMPORT["jax"] == "jax" and course.EXTRA_OF_IMPORT["torch"] == "torch"


@builds
@pytest.mark.browser
def test_course_math_renders_offline_in_chromium(tmp_path, fake_extra):
    """The synthetic course's pages in headless Chromium with every network
    request refused: MathJax typesets the math, no request leaves."""
    sync_playwright, chromium = playwright_and_chromium()
    nbs = _synthetic_course(tmp_path)
    out = tmp_path / "site"
    course.build(out, notebooks=nbs, jobs=2, echo=lambda *a: None)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"])
        ctx = browser.new_context()
        sent = []

        def refuse(route):
            if route.request.url.startswith(("http:", "https:")):
                sent.append(route.request.url)
                return route.abort()
            return route.continue_()

        ctx.route("**/*", refuse)
        page = ctx.new_page()
        for name, n_math in (("00_start.html", 2), ("glossary.html", 1)):
            page.goto((out / name).as_uri())
            page.wait_for_function("() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 "
                                   "&& document.querySelectorAll('.MathJax, .MathJax_Display').length > 0",
                                   timeout=30000)
            typeset = page.evaluate("() => document.querySelectorAll('span.MathJax, div.MathJax_Display').length")
            raw = page.evaluate("() => [...document.querySelectorAll('.jp-RenderedMarkdown, .nl-content')]"
                                ".map(e => e.innerText).join(' ')")
            assert typeset >= n_math and "$" not in raw and "\\gamma" not in raw, (name, typeset, raw[:200])
            assert page.evaluate("() => document.querySelectorAll('.MathJax_Error, merror').length") == 0
        browser.close()
    assert sent == []


# ---------------------------------------------------------------------------
# the course's structure (every notebook after 00)
# ---------------------------------------------------------------------------
EXERCISE_RE = re.compile(r"^#{1,6}\s+(Exercise|Predict)\b(.*)$")
BULLET_RE = re.compile(r"^\s{0,3}[*-]\s+\S")


def structure_problems(nb, stem: str) -> list[str]:
    """How a notebook breaks the course conventions (empty: it follows them)."""
    bad, number = [], stem.split("_", 1)[0]
    cells = nb.cells
    first = cells[0] if cells else None
    head = first.source.strip().splitlines()[0] if first is not None and first.source.strip() else ""
    if first is None or first.cell_type != "markdown" or not re.match(rf"# {number}: \S", head):
        bad.append(f"first cell is not a markdown heading '# {number}: <finding>' (found {head[:60]!r})")
    # exercises in order, each with the solutions that follow it before the next exercise
    exercises: list[list] = []  # [heading, solutions seen]
    for cell in cells:
        if "solution" in cell.get("metadata", {}).get("tags", []):
            if exercises:
                exercises[-1][1] += 1
            if cell.cell_type == "code" and not cell.metadata.get("jupyter", {}).get("source_hidden"):
                bad.append(f"solution cell {cell.source[:40]!r} is not hidden in JupyterLab "
                           "(metadata jupyter.source_hidden)")
            continue
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            m = EXERCISE_RE.match(line.strip())
            if m:
                exercises.append([line.strip(), 0])
            elif "<details" in line and exercises:
                exercises[-1][1] += 1
    kinds = [EXERCISE_RE.match(h).group(1) for h, _ in exercises]
    if len(exercises) < 2:
        bad.append(f"{len(exercises)} exercise headings ('## Exercise ...' / '## Predict ...'); at least 2")
    if "Predict" not in kinds:
        bad.append("no '## Predict ...' exercise (predict before you run)")
    bad += [f"exercise {h!r} has no solution (a 'solution'-tagged cell or a <details> block) before the next "
            "exercise" for h, n in exercises if n == 0]
    last = cells[-1] if cells else None
    lines = [ln for ln in (last.source.strip().splitlines() if last is not None else []) if ln.strip()]
    if (last is None or last.cell_type != "markdown" or not lines
            or not re.match(r"#{1,6}\s+What to remember\b", lines[0])):
        bad.append("the last cell is not a markdown '## What to remember' cell")
    elif not 3 <= sum(1 for ln in lines[1:] if BULLET_RE.match(ln)) <= 5:
        bad.append(f"'What to remember' has {sum(1 for ln in lines[1:] if BULLET_RE.match(ln))} bullet lines; "
                   "3-5 wanted")
    return bad


@pytest.mark.parametrize("stem", [s for s in _stems() if not s.startswith("00_")])
def test_notebook_follows_the_course_structure(stem):
    bad = structure_problems(course._read(NOTEBOOKS / f"{stem}.ipynb"), stem)
    assert not bad, f"{stem}.ipynb:\n  " + "\n  ".join(bad)


def _nb(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    return nb


def test_structure_checker_accepts_a_conforming_notebook():
    assert structure_problems(_nb(_good_exercise_notebook("04")), "04_x") == []
    # a prose-only exercise whose <details> is in its own cell; an exercise with a solution cell
    cells = _good_exercise_notebook("04")
    cells[5] = M("## Predict: does `x*S` round?")
    cells.insert(6, M("<details><summary>Solution</summary>\n\nTwice.\n\n</details>"))
    assert structure_problems(_nb(cells), "04_x") == []


def _variant(change) -> list[str]:
    cells = _good_exercise_notebook("04")
    change(cells)
    return structure_problems(_nb(cells), "04_x")


@pytest.mark.parametrize("change, words", [
    (lambda c: c.__setitem__(0, M("# Newton steps")), "first cell"),
    (lambda c: c.__setitem__(0, M("# 03: Newton steps")), "'# 04: <finding>'"),
    (lambda c: c.__setitem__(0, C("x = 1")), "first cell"),
    (lambda c: c.__setitem__(5, M("Predict: no heading.\n\n<details>x</details>")),
     ("1 exercise headings", "no '## Predict")),
    (lambda c: c.__setitem__(5, M("## Exercise 2: more\n\n<details>x</details>")), "no '## Predict"),
    (lambda c: c.__delitem__(3), "'## Exercise 1: count the Newton steps' has no solution"),
    (lambda c: c.__setitem__(5, M("## Predict: does `x*S` round?\n\nWrite it down.")), "'## Predict: does"),
    (lambda c: c[3].metadata.pop("jupyter"), "not hidden"),
    (lambda c: c.pop(), "last cell"),
    (lambda c: c.__setitem__(-1, M("## Summary\n\n* a\n* b\n* c")), "last cell"),
    (lambda c: c.__setitem__(-1, M("## What to remember\n\n* a\n* b")), "2 bullet lines"),
    (lambda c: c.__setitem__(-1, M("## What to remember\n\n" + "\n".join(f"- {k}" for k in range(6)))),
     "6 bullet lines"),
])
def test_structure_checker_names_what_is_missing(change, words):
    bad, words = _variant(change), (words,) if isinstance(words, str) else words
    assert len(bad) == len(words) and all(w in b for w, b in zip(words, bad, strict=True)), bad


@pytest.mark.parametrize("evalue,extras", [("No module named 'jax'", ("jax",)),
                                           ("No module named 'jax.experimental.foo'", ()),
                                           ("No module named 'numpy'", ())])
def test_only_a_missing_top_level_package_of_an_extra_counts_as_missing(evalue, extras):
    """A run stopped by ``import jax`` without jax needs the extra; one stopped by a
    missing submodule of an installed package (renamed, moved) is the notebook's own
    error: ``build`` must fail on it, not turn it into a "needs" page."""
    nbformat = pytest.importorskip("nbformat")
    from numlab.course import _missing_in_run

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import jax", outputs=[
        nbformat.v4.new_output("error", ename="ModuleNotFoundError", evalue=evalue, traceback=[])])])
    assert _missing_in_run(nb, {"jax": "jax"}) == extras
