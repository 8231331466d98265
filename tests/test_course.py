"""``numlab course build``: the static HTML course (numlab.course).

The main test builds the real course (every notebook executed, two at a
time) into tmp_path and reads the pages as a reader would: every page
exists, shows no error output, has one ``<img>`` per figure the executed
notebook holds (counted from the notebook's outputs and its widgets'
Output state, independently of the HTML export) and no widget's
``interactive(children=...)`` text.  Small synthetic notebooks check the
failure path (exit 1 naming the notebook and the cell) and the
never-overwrite rule.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the course needs the lab extra (nbformat)")
pytest.importorskip("nbclient", reason="the course needs the lab extra (nbclient)")
pytest.importorskip("nbconvert", reason="the course needs the lab extra (nbconvert)")

from numlab import course  # noqa: E402
from numlab.cli import main  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
STDERR_BLOCK = re.compile(r'data-mime-type="application/vnd\.jupyter\.stderr"[^>]*>(.*?)</div>', re.S)


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
    return bad


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
        if f"href='{stem}.html'" not in index or f"numlab[{', '.join(info.extras)}]" not in index:
            bad.append(f"{stem}: not listed in index.html with its extras {info.extras}")
        bad += _check_page(out, stem)
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


def test_course_error_inside_widget_is_caught(tmp_path):
    src = tmp_path / "nbs"
    _tiny(src, "00_w", "import ipywidgets as W\nW.interact(lambda n=1: 1 / (n - 1), n=(1, 3));")
    with pytest.raises(course.CourseError, match=r"00_w.ipynb: cell 2 \(inside a widget's output\): "
                                                 r"ZeroDivisionError"):
        course.build(tmp_path / "site", notebooks=src, jobs=1, echo=lambda *a: None)


def test_course_static_widgets_and_no_overwrite(tmp_path, capsys):
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
    meta = json.loads((out / "course.json").read_text())
    assert meta["notebooks"][0]["figures"] == 2
    # a second build never overwrites: a fresh run-001, then --force writes in place
    stamp = (out / "index.html").stat().st_mtime_ns
    assert main(["course", "build", "--notebooks", str(src), "--out", str(out)]) == 0
    assert (out / "run-001" / "index.html").is_file()
    assert (out / "index.html").stat().st_mtime_ns == stamp
    assert "already holds a course" in capsys.readouterr().out
    assert main(["course", "build", "--notebooks", str(src), "--out", str(out), "--force"]) == 0
    assert not (out / "run-002").exists()
    assert (out / "index.html").stat().st_mtime_ns != stamp


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
