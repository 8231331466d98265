"""The course as static HTML: execute the notebooks and export one page each.

:func:`build` runs every ``NN_*.ipynb`` of the notebooks folder (each in
its own worker process and kernel, ``jobs`` at a time), keeps the widget
state the run produced (nbclient's ``store_widget_state``), and writes

* ``NN_name.html``: the notebook with its outputs (nbconvert's lab
  template, figures embedded as data URIs);
* ``notebooks/NN_name.ipynb``: the executed notebook, widget state
  included, for readers who want the file;
* ``index.html``: the numbered notebooks with their titles and the
  ``pip`` extra each needs;
* ``glossary.html``: ``docs/glossary.md`` (next to the notebooks folder)
  when it exists, one anchor per ``## term`` (GitHub's slugs, so the
  notebooks' ``../docs/glossary.md#term`` links point into it);
* ``_static/mathjax/``: the part of MathJax 2.7 the pages use (from the
  ``jupyter-server-mathjax`` package), so math renders offline.

Every page reads offline: no script, stylesheet or font is fetched from
the network (nbconvert's require.js and mermaid loaders are left out, its
CSS is inlined, MathJax is the bundled copy).  Every page has a sidebar
listing all pages (the current one marked) and previous/next links, in
the order index, notebooks, glossary.  Titles are the notebook's first
heading without its ``NN:`` prefix, markdown stripped, shown as
``NN · title``.  Code cells tagged ``solution`` are collapsed under a
"Solution" ``<details>``; links to other notebooks and to the glossary
are rewritten to their pages.

Widgets show their initial state without any JavaScript: each widget view
is replaced, in the exported copy only, by its controls drawn as disabled
HTML inputs (slider position, dropdown choice, ...) followed by the
outputs its ``Output`` widgets hold (the figure the first call drew).  No
widget JavaScript is needed, so figures and controls read offline.  Any error
output (a cell's, or one inside a widget's output) makes :func:`build`
raise :class:`CourseError` naming the notebook and the cell, after the
pages are written so they can be inspected.

A notebook that imports a module of an extra that is not installed here
(:data:`EXTRA_OF_IMPORT`) is not run: its page shows the notebook's text
and code without outputs under a note saying what to install, and the
index and sidebar mark it "needs: pip install numlab[EXTRA]".  So is a
notebook whose run stops first at a ``ModuleNotFoundError`` for such a
module (the kernel's environment lacks it): never a page of knock-on
NameErrors.

An existing course is never overwritten and a course is never built
inside another: a folder that holds a course (``index.html`` or
``course.json``) is refused, naming ``--force``; ``force`` replaces it
(the pages of notebooks no longer built are removed).
"""

from __future__ import annotations

import copy
import html
import importlib
import importlib.util
import json
import multiprocessing
import os
import re
import shutil
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

__all__ = ["EXTRA_OF_IMPORT", "CourseError", "NotebookInfo", "build", "clean_title", "default_notebooks_dir",
           "figure_count", "find_errors", "github_slug", "missing_extras", "notebook_info", "resolve_out_dir",
           "static_copy"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")

# module imported by a notebook -> the numlab extra that installs it
EXTRA_OF_IMPORT = {"torch": "torch", "numlab.torch": "torch", "dask": "dask", "distributed": "dask",
                   "jax": "jax"}
_IMPORT_RE = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_][\w.]*)", re.MULTILINE)
_MARKERS = ("index.html", "course.json")


def _lab(module: str):
    """Import a Jupyter module of the ``lab`` extra (nbformat, nbclient,
    nbconvert).  Imported on use, not at the top: the base install has no
    Jupyter and ``numlab --help`` must work there."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"building the course needs {module} (the lab extra): "
                                  'pip install "numlab[lab]"', name=exc.name) from exc


def _read(path):
    """A notebook (nbformat 4).  Cells without ids get ids (nbformat does
    that on read anyway; its warning about it would only be noise here)."""
    nbformat = _lab("nbformat")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _lab("nbformat.validator").MissingIDFieldWarning)
        return nbformat.read(path, as_version=4)


class CourseError(RuntimeError):
    """A notebook produced error output (or failed to run); the message
    names the notebook and the cell."""


@dataclass(frozen=True)
class NotebookInfo:
    """One notebook of the course: ``number`` ("00"), ``stem``
    ("00_start_here"), ``title`` (its first heading, cleaned:
    :func:`clean_title`) and ``extras`` (the ``pip install numlab[...]``
    extras it needs; ``lab`` always)."""

    path: Path
    number: str
    stem: str
    title: str
    extras: tuple[str, ...] = field(default=("lab",))

    @property
    def label(self) -> str:
        """``NN · title``, as the index, the sidebar and the links show it."""
        return f"{self.number} · {self.title}"


def default_notebooks_dir() -> Path:
    """The repository's ``notebooks/`` folder (numlab run from a checkout)."""
    here = Path(__file__).resolve().parents[2] / "notebooks"
    if not here.is_dir():
        raise FileNotFoundError(f"no notebooks folder at {here}; pass --notebooks DIR (a numlab checkout's "
                                "notebooks/)")
    return here


def clean_title(heading: str) -> str:
    """A heading as plain text for the index and the sidebar: a leading
    number and its separator (``"04: "``, ``"04 · "``, ``"04 — "``)
    dropped, markdown links reduced to their text, backticks and bold or
    underscore emphasis removed, whitespace collapsed."""
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    t = t.replace("`", "")
    t = re.sub(r"\*\*|__", "", t)
    t = re.sub(r"^\s*\d+\s*(?:[:·—–.]|-+)\s*", "", t)
    return " ".join(t.split())


def github_slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading: markdown links reduced to
    their text, backticks and emphasis markers dropped, lowercase,
    punctuation other than ``-`` and ``_`` dropped, each space a ``-``
    (``"Unit roundoff u"`` -> ``unit-roundoff-u``; ``"`gamma_n`"`` ->
    ``gamma_n``; ``"a-priori bound"`` -> ``a-priori-bound``)."""
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    t = re.sub(r"`|\*\*|__", "", t).strip().lower()
    return re.sub(r"[^\w\- ]", "", t).replace(" ", "-")


def notebook_info(path: str | os.PathLike, extra_of_import: dict[str, str] | None = None) -> NotebookInfo:
    """Number, title and extras of one notebook (extras from its imports:
    ``extra_of_import``, default :data:`EXTRA_OF_IMPORT`)."""
    mapping = EXTRA_OF_IMPORT if extra_of_import is None else extra_of_import
    p = Path(path)
    nb = _read(p)
    title = p.stem
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^#+\s+(.+)$", cell.source, re.MULTILINE)
            if m:
                title = clean_title(m.group(1)) or p.stem
                break
    extras = {"lab"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            for mod in _IMPORT_RE.findall(cell.source):
                for name, extra in mapping.items():
                    if mod == name or mod.startswith(name + "."):
                        extras.add(extra)
    number = p.stem.split("_", 1)[0]
    return NotebookInfo(p, number, p.stem, title, tuple(sorted(extras, key=lambda e: (e != "lab", e))))


def missing_extras(info: NotebookInfo, extra_of_import: dict[str, str] | None = None) -> tuple[str, ...]:
    """The extras ``info`` needs that are not installed here.  An extra is
    installed when every module outside numlab that ``extra_of_import``
    maps to it can be found (``importlib.util.find_spec``; nothing is
    imported)."""
    mapping = EXTRA_OF_IMPORT if extra_of_import is None else extra_of_import
    missing = []
    for extra in info.extras:
        mods = {m.split(".")[0] for m, e in mapping.items() if e == extra and not m.startswith("numlab")}
        if any(importlib.util.find_spec(m) is None for m in sorted(mods)):
            missing.append(extra)
    return tuple(missing)


def resolve_out_dir(out, force: bool = False) -> tuple[Path, str]:
    """The directory to write the course to, and a note (empty when
    nothing to say).

    A missing or course-free directory is used as is.  One that holds a
    course (``index.html`` or ``course.json``, also a broken one) is
    refused without ``force`` (:class:`FileExistsError` naming
    ``--force``); with it the course there is replaced.  A directory inside
    a course is refused either way: a course is never nested in another."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise FileExistsError(f"--out {str(p)!r} exists and is not a directory")
    for parent in p.resolve().parents:
        if (parent / "course.json").is_file() and (parent / "index.html").is_file():
            raise FileExistsError(f"--out {str(p)!r} is inside the course in {str(parent)!r}; a course is "
                                  "never built inside another: give a folder outside it")
    there = [m for m in _MARKERS if (p / m).exists()]
    if not there:
        return p, ""
    if not force:
        raise FileExistsError(f"--out {str(p)!r} already holds a course ({', '.join(there)}); use --force to "
                              "replace it, or give another --out folder")
    return p, f"--force: replacing the course in {p}"


# ---------------------------------------------------------------------------
# execution (one worker process per notebook)
# ---------------------------------------------------------------------------
def _execute(path: str, timeout: int) -> str:
    """Run one notebook in a fresh kernel (cwd: its folder); the executed
    notebook as JSON.  Errors are kept as outputs (``allow_errors``) so the
    caller can name every failing cell."""
    nbformat = _lab("nbformat")
    _poll_in_slices()
    nb = _read(path)
    client = _lab("nbclient").NotebookClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=True, store_widget_state=True,
        resources={"metadata": {"path": str(Path(path).parent)}})
    client.execute()
    return nbformat.writes(nb)


def _poll_in_slices(slice_s: float = 1.0) -> None:
    """In this worker process, wait for kernel replies in 1 s slices.

    On a busy machine nbclient now and then waited minutes for an
    ``execute_reply`` the kernel had already sent (a missed wake-up in the
    client's zmq/asyncio poll; notebooks/conftest.py patches nbmake runs
    the same way).  Re-polling in slices makes such a miss cost a second; a
    reply that never comes still fails after the cell timeout."""
    channel = _lab("jupyter_client.channels").AsyncZMQSocketChannel
    get_msg = getattr(channel.get_msg, "_numlab_original", channel.get_msg)

    async def sliced(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = slice_s if deadline is None else max(0.0, min(slice_s, deadline - time.monotonic()))
            try:
                return await get_msg(self, timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    sliced._numlab_original = get_msg
    channel.get_msg = sliced


def _widget_state(nb) -> dict:
    return nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def _iter_outputs(nb):
    """(cell number 1-based over all cells, where, output) for every output,
    including those held by Output widgets (where = "widget")."""
    state = _widget_state(nb)
    for i, cell in enumerate(nb.cells, start=1):
        for out in cell.get("outputs", []):
            yield i, "cell", out
            view = out.get("data", {}).get(WIDGET_VIEW) if out.get("output_type") in ("display_data",
                                                                                        "execute_result") else None
            if view:
                for _mid, model in _walk(state, view.get("model_id")):
                    for wout in model.get("state", {}).get("outputs", []) or []:
                        yield i, "widget", wout


def _walk(state: dict, model_id: str | None, seen=None):
    """(model id, model) of a widget and every widget it holds, depth first."""
    seen = set() if seen is None else seen
    if not model_id or model_id in seen or model_id not in state:
        return
    seen.add(model_id)
    model = state[model_id]
    yield model_id, model
    for child in model.get("state", {}).get("children", []) or []:
        yield from _walk(state, _ref(child), seen)


def _ref(x) -> str | None:
    return x[len("IPY_MODEL_"):] if isinstance(x, str) and x.startswith("IPY_MODEL_") else None


def find_errors(nb) -> list[str]:
    """Every error output of an executed notebook, as "cell N: Name: value"
    (N counts all cells from 1, as JupyterLab's cell order)."""
    found = []
    for i, where, out in _iter_outputs(nb):
        if out.get("output_type") == "error":
            inside = " (inside a widget's output)" if where == "widget" else ""
            found.append(f"cell {i}{inside}: {out.get('ename')}: {out.get('evalue')}")
    return found


def figure_count(nb) -> int:
    """Image outputs of an executed notebook, those inside widgets included."""
    return sum(1 for _i, _w, out in _iter_outputs(nb)
               if out.get("output_type") in ("display_data", "execute_result")
               and any(m in out.get("data", {}) for m in IMAGE_MIMES))


# ---------------------------------------------------------------------------
# static widgets
# ---------------------------------------------------------------------------
def _controls_html(state: dict, model_id: str) -> str:
    """The controls of a widget tree as disabled HTML inputs in their
    initial state (no JavaScript)."""
    parts = []
    for _mid, model in _walk(state, model_id):
        name, s = model.get("model_name", ""), model.get("state", {})
        desc = html.escape(str(s.get("description", "")))
        label = f"<span class='nl-label'>{desc}</span> " if desc else ""
        if name in ("IntSliderModel", "FloatSliderModel", "FloatLogSliderModel"):
            lo, hi, v = s.get("min", 0), s.get("max", 100), s.get("value", 0)
            shown = s.get("value", 0) if name != "FloatLogSliderModel" else s.get("base", 10) ** v
            parts.append(f"{label}<input type='range' disabled min='{lo}' max='{hi}' step='any' value='{v}'>"
                         f" <code>{html.escape(_fmt_num(shown))}</code>")
        elif name in ("SelectionSliderModel", "DropdownModel", "ToggleButtonsModel", "RadioButtonsModel",
                      "SelectModel"):
            labels, idx = s.get("_options_labels", []) or [], s.get("index")
            chosen = labels[idx] if isinstance(idx, int) and 0 <= idx < len(labels) else ""
            opts = "".join(f"<option{' selected' if j == idx else ''}>{html.escape(str(o))}</option>"
                           for j, o in enumerate(labels))
            parts.append(f"{label}<select disabled title='{html.escape(str(chosen))}'>{opts}</select>")
        elif name in ("CheckboxModel", "ToggleButtonModel"):
            on = " checked" if s.get("value") else ""
            parts.append(f"<label><input type='checkbox' disabled{on}> {desc}</label>")
        elif name in ("IntTextModel", "FloatTextModel", "TextModel", "BoundedIntTextModel",
                      "BoundedFloatTextModel"):
            parts.append(f"{label}<input type='text' disabled value='{html.escape(str(s.get('value', '')))}'>")
        elif name in ("LabelModel", "HTMLModel", "HTMLMathModel"):
            v = s.get("value", "")
            parts.append(str(v) if name != "LabelModel" else html.escape(str(v)))
        elif name == "ButtonModel":
            parts.append(f"<button disabled>{desc}</button>")
    if not parts:
        return ""
    return ("<div class='nl-static-widget' style='display:flex;flex-wrap:wrap;gap:0.4em 1.5em;"
            "align-items:center;margin:0.3em 0'>"
            + "".join(f"<span>{p}</span>" for p in parts)
            + "<span style='color:#777;font-size:85%'>(initial state; the controls are live in JupyterLab)"
            "</span></div>")


def _fmt_num(x) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def static_copy(nb):
    """A copy of an executed notebook for static export: each widget view
    replaced by its controls (disabled HTML) and the outputs its Output
    widgets hold; the widget state dropped (nothing for a CDN script to
    render)."""
    nbformat = _lab("nbformat")
    nb = copy.deepcopy(nb)
    state = _widget_state(nb)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        new = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if not view:
                new.append(out)
                continue
            mid = view.get("model_id")
            controls = _controls_html(state, mid)
            if controls:
                new.append(nbformat.v4.new_output("display_data", data={"text/html": controls}))
            for _mid, model in _walk(state, mid):
                for wout in model.get("state", {}).get("outputs", []) or []:
                    new.append(nbformat.from_dict(wout))
        cell.outputs = new
    nb.metadata.pop("widgets", None)
    return nb


# ---------------------------------------------------------------------------
# pages
# ---------------------------------------------------------------------------
# the part of MathJax 2.7 (jupyter-server-mathjax's static folder) the pages load: TeX input, HTML-CSS
# output with the STIX-Web web fonts, the extensions the combined config asks for
_MATHJAX_FILES = ("MathJax.js", "LICENSE", "config/TeX-AMS-MML_HTMLorMML-full.js", "config/Safe.js")
_MATHJAX_DIRS = ("extensions/TeX", "extensions/HTML-CSS", "jax/input/TeX", "jax/element",
                 "jax/output/HTML-CSS", "fonts/HTML-CSS/STIX-Web/woff")
MATHJAX_URL = "_static/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
_MATHJAX_CONFIG = """MathJax.Hub.Config({
  TeX: {equationNumbers: {autoNumber: "AMS", useLabelIds: true}},
  tex2jax: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
            processEscapes: true, processEnvironments: true},
  MMLorHTML: {prefer: "HTML"},
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null,
               linebreaks: {automatic: true}},
  displayAlign: "center", messageStyle: "none", showMathMenu: false
});"""

_CSS = """
.nl-sidebar{position:fixed;top:0;left:0;bottom:0;width:17rem;box-sizing:border-box;overflow-y:auto;
 padding:0.8rem 0.6rem;background:#f6f7f9;border-right:1px solid #dde;font:14px/1.35 system-ui,sans-serif;z-index:10}
.nl-sidebar .nl-home{font-weight:700;font-size:15px;display:block;padding:0.2rem 0.4rem;color:#111;
 text-decoration:none;border-radius:4px}
.nl-sidebar .nl-home.nl-current{background:#d9e6f6}
.nl-sidebar ol{list-style:none;margin:0.6rem 0;padding:0}
.nl-sidebar li a{display:block;padding:0.25rem 0.4rem;border-radius:4px;color:#1a4f8b;text-decoration:none}
.nl-sidebar li a:hover{background:#e8eef6}
.nl-sidebar li a.nl-current{background:#d9e6f6;color:#000;font-weight:600}
.nl-needs{display:block;font-size:12px;color:#8a4b00;font-weight:400}
body.nl-page{margin:0 0 0 17rem !important}
.nl-prevnext{display:flex;justify-content:space-between;gap:1rem;font:14px system-ui,sans-serif;
 padding:0.6rem 1.2rem;border-bottom:1px solid #dde;background:#fff}
.nl-prevnext.nl-bottom{border-top:1px solid #dde;border-bottom:0;margin-top:2rem}
.nl-prevnext a{color:#1a4f8b;text-decoration:none}
.nl-meta{font:13px system-ui,sans-serif;color:#666;padding:0.3rem 1.2rem}
.nl-banner{margin:1rem 1.2rem;padding:0.8rem 1rem;border:1px solid #e0b060;background:#fff8e6;border-radius:4px;
 font:15px/1.4 system-ui,sans-serif}
details.nl-solution{margin:0.4rem 0;border:1px solid #cfdcec;border-radius:4px;padding:0.2rem 0}
details.nl-solution>summary,.jp-RenderedMarkdown details>summary{cursor:pointer;font:600 14px system-ui,sans-serif;
 color:#1a4f8b;padding:0.2rem 0}
details.nl-solution>summary{padding-left:calc(var(--jp-cell-prompt-width, 64px) + 8px)}
.jp-RenderedMarkdown details{border:1px solid #cfdcec;border-radius:4px;padding:0.2rem 0.6rem;margin:0.4rem 0}
.nl-content{max-width:52rem;padding:1rem 2rem;font:16px/1.55 system-ui,sans-serif}
.nl-content code{font:0.9em ui-monospace,SFMono-Regular,Menlo,monospace;background:#f2f3f5;padding:0 0.2em;
 border-radius:3px}
.nl-content a.anchor-link{visibility:hidden;text-decoration:none;margin-left:0.3em;font-size:70%;color:#999}
.nl-content :is(h1,h2,h3,h4):hover a.anchor-link{visibility:visible}
.nl-content td,.nl-content th{padding:0.3rem 0.8rem;text-align:left;border-bottom:1px solid #eee;vertical-align:top}
@media (max-width:60rem){.nl-sidebar{position:static;width:auto;border-right:0;border-bottom:1px solid #dde}
 body.nl-page{margin-left:0 !important}}
"""

# the lab template with nothing fetched from the network: no require.js (no output here needs it),
# no mermaid loader, the bundled MathJax; solution cells collapsed; the course's sidebar and links
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
<script type="text/x-mathjax-config">{{ resources.numlab.mathjax_config }}</script>
<script src="{{ resources.numlab.mathjax_url }}"></script>
{%- endblock html_head_js_mathjax -%}
{%- block extra_css -%}<style type="text/css">{{ resources.numlab.css }}</style>{%- endblock extra_css -%}
{%- block body_header -%}
<body class="jp-Notebook nl-page" data-jp-theme-light="true" data-jp-theme-name="JupyterLab Light">
{{ resources.numlab.sidebar }}
<main>
{{ resources.numlab.top }}
{%- endblock body_header -%}
{% block body_footer %}
{{ resources.numlab.bottom }}
</main>
</body>
{% endblock body_footer %}
{%- block any_cell scoped -%}
{%- if 'solution' in cell.metadata.get('tags', []) -%}
<details class="nl-solution"><summary>Solution</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock any_cell -%}
"""


def _mathjax_static() -> Path:
    """jupyter-server-mathjax's static folder (MathJax 2.7)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("building the course needs jupyter-server-mathjax (the lab extra; MathJax "
                                  'for offline math): pip install "numlab[lab]"', name="jupyter_server_mathjax")
    return Path(spec.origin).parent / "static"


def _bundle_mathjax(outdir: Path) -> None:
    """Copy the MathJax files the pages load into ``outdir/_static/mathjax``."""
    src, dst = _mathjax_static(), outdir / "_static" / "mathjax"
    files = [*_MATHJAX_FILES, *(p.relative_to(src).as_posix() for p in sorted((src / "extensions").glob("*.js")))]
    for f in files:
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / f, dst / f)
    for d in _MATHJAX_DIRS:
        shutil.copytree(src / d, dst / d, dirs_exist_ok=True)


@dataclass(frozen=True)
class _Site:
    """What every page links to: the pages in reading order (index,
    notebooks, glossary) as (file, label), and the extras missing per
    notebook stem."""

    infos: tuple[NotebookInfo, ...]
    glossary: bool
    missing: dict = field(default_factory=dict)

    def order(self) -> list[tuple[str, str]]:
        pages = [("index.html", "Course index")] + [(f"{i.stem}.html", i.label) for i in self.infos]
        return pages + ([("glossary.html", "Glossary")] if self.glossary else [])

    def sidebar(self, current: str) -> str:
        items = []
        for href, label in self.order():
            cur = " class='nl-current' aria-current='page'" if href == current else ""
            stem = href[:-len(".html")]
            needs = "".join(f"<span class='nl-needs'>needs: pip install numlab[{html.escape(e)}]</span>"
                            for e in self.missing.get(stem, ()))
            if href != "index.html":
                items.append(f"<li><a href='{href}'{cur}>{html.escape(label)}{needs}</a></li>")
        home_cur = " nl-current" if current == "index.html" else ""
        return (f"<nav class='nl-sidebar' aria-label='course contents'><a href='index.html' "
                f"class='nl-home{home_cur}'>numlab course</a><ol>{''.join(items)}</ol></nav>")

    def prevnext(self, current: str, where: str = "top") -> str:
        order = self.order()
        k = [h for h, _ in order].index(current)
        prev = (f"<a rel='prev' href='{order[k - 1][0]}'>&larr; {html.escape(order[k - 1][1])}</a>" if k
                else "<span></span>")
        nxt = (f"<a rel='next' href='{order[k + 1][0]}'>{html.escape(order[k + 1][1])} &rarr;</a>"
               if k + 1 < len(order) else "<span></span>")
        return f"<nav class='nl-prevnext nl-{where}' aria-label='previous and next'>{prev}{nxt}</nav>"

    def shell(self, current: str, title: str, body: str) -> str:
        """A page of the course that is not a notebook (index, glossary)."""
        return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
                "<meta name='viewport' content='width=device-width, initial-scale=1.0'>"
                f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
                f"<script type='text/x-mathjax-config'>{_MATHJAX_CONFIG}</script>"
                f"<script src='{MATHJAX_URL}'></script></head><body class='nl-page'>"
                f"{self.sidebar(current)}<main>{self.prevnext(current)}<div class='nl-content'>{body}</div>"
                f"{self.prevnext(current, 'bottom')}</main></body></html>")


_LINK_RE = re.compile(r"\]\((?:\./)?(?:\.\./notebooks/)?(\d\d_[\w.-]+?)\.ipynb(#[^)\s]*)?\)")
_GLOSSARY_LINK_RE = re.compile(r"\]\((?:\.\./docs/|docs/)?glossary\.md(#[^)\s]*)?\)")


def _rewrite_links(nb, stems: set[str], glossary: bool):
    """Markdown links to another notebook of the course -> its page; links
    to ``../docs/glossary.md#x`` -> ``glossary.html#x`` (when the course has
    the glossary page)."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        src = _LINK_RE.sub(lambda m: f"]({m.group(1)}.html{m.group(2) or ''})" if m.group(1) in stems
                           else m.group(0), cell.source)
        if glossary:
            src = _GLOSSARY_LINK_RE.sub(lambda m: f"](glossary.html{m.group(1) or ''})", src)
        cell.source = src
    return nb


def _page(nb, info: NotebookInfo, site: _Site, banner: str = "") -> str:
    """One notebook's page: nbconvert's lab template (offline: :data:`_TEMPLATE`)."""
    jinja2 = _lab("jinja2")
    exporter = _lab("nbconvert").HTMLExporter(
        template_name="lab", template_file="numlab_course.html.j2",
        extra_loaders=[jinja2.DictLoader({"numlab_course.html.j2": _TEMPLATE})])
    current = f"{info.stem}.html"
    meta = (f"<div class='nl-meta'>needs <code>pip install numlab[{', '.join(info.extras)}]</code>; download "
            f"<a href='notebooks/{info.stem}.ipynb'>{info.stem}.ipynb</a></div>")
    numlab = {"mathjax_config": _MATHJAX_CONFIG, "mathjax_url": MATHJAX_URL, "css": _CSS,
              "sidebar": site.sidebar(current), "top": site.prevnext(current) + meta + banner,
              "bottom": site.prevnext(current, "bottom")}
    nb = _rewrite_links(static_copy(nb), {i.stem for i in site.infos}, site.glossary)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": info.label}, "numlab": numlab})
    return body


def _index(site: _Site) -> str:
    rows = []
    for i in site.infos:
        needs = "".join(f"<br><span class='nl-needs'>needs: pip install numlab[{html.escape(e)}]</span>"
                        for e in site.missing.get(i.stem, ()))
        rows.append(f"<tr><td>{html.escape(i.number)}</td><td><a href='{i.stem}.html'>{html.escape(i.title)}</a>"
                    f"{needs}</td><td><code>numlab[{', '.join(i.extras)}]</code></td>"
                    f"<td><a href='notebooks/{i.stem}.ipynb'>.ipynb</a></td></tr>")
    glossary = ("<p>Terms are defined in the <a href='glossary.html'>glossary</a>.</p>" if site.glossary else "")
    body = ("<h1>numlab course</h1>"
            "<p>Why fused and eager kernels give different numbers, bit for bit. Each page is a notebook "
            "executed with its outputs; widgets show their initial state (run the notebook in JupyterLab "
            "to move them); solutions are folded under <em>Solution</em>. Start with 00.</p>"
            f"{glossary}<table><tr><th>#</th><th>notebook</th><th>needs <code>pip install</code></th>"
            f"<th>file</th></tr>{''.join(rows)}</table>")
    return site.shell("index.html", "numlab course", body)


def _glossary(site: _Site, md_path: Path) -> str:
    """``docs/glossary.md`` as a page, each heading's id its GitHub slug."""
    stems = {i.stem for i in site.infos}
    text = _LINK_RE.sub(lambda m: f"]({m.group(1)}.html{m.group(2) or ''})" if m.group(1) in stems
                        else m.group(0), md_path.read_text(encoding="utf-8"))
    body = _lab("nbconvert.filters").markdown2html(text)

    def anchor(m):
        inner = re.sub(r"<a class=.anchor-link.[^>]*>.*?</a>", "", m.group(3), flags=re.S)
        slug = html.escape(github_slug(html.unescape(re.sub(r"<[^>]+>", "", inner))))
        return (f"<h{m.group(1)} id='{slug}'>{inner}<a class='anchor-link' href='#{slug}'>&#182;</a>"
                f"</h{m.group(1)}>")

    body = re.sub(r"<h([1-6])([^>]*)>(.*?)</h\1>", anchor, body, flags=re.S)
    return site.shell("glossary.html", "numlab course · glossary", body)


def _needs_banner(missing: tuple[str, ...]) -> str:
    cmds = " and ".join(f"<code>pip install numlab[{html.escape(e)}]</code>" for e in missing)
    return (f"<div class='nl-banner' role='note'><strong>needs: {cmds}</strong>. The course was built "
            "without that extra, so this page shows the notebook's text and code without outputs. Install it "
            "and run the notebook in JupyterLab (or rebuild the course).</div>")


def _failed_banner(problem: str) -> str:
    return (f"<div class='nl-banner' role='alert'><strong>This notebook did not run</strong> when the course "
            f"was built: <code>{html.escape(problem)}</code>. The page shows its text and code only.</div>")


def _glossary_source(paths: list[Path]) -> Path | None:
    """``docs/glossary.md`` beside the notebooks folder (where the
    notebooks' ``../docs/glossary.md`` links point), when it exists."""
    p = paths[0].resolve().parent.parent / "docs" / "glossary.md"
    return p if p.is_file() else None


def _run_all(infos: list[NotebookInfo], jobs: int, timeout: int) -> tuple[dict, dict]:
    """Execute ``infos`` (``jobs`` at a time): the executed notebooks by
    stem, and for those that did not run, the reason by stem."""
    nbformat = _lab("nbformat")
    executed, failed = {}, {}
    if not infos:
        return executed, failed
    # fork: `python -m numlab` has no __main__ guard, so spawn/forkserver must not re-import it
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ProcessPoolExecutor(max_workers=min(jobs, len(infos)), mp_context=ctx) as pool:
        futures = {i.stem: pool.submit(_execute, str(i.path.resolve()), timeout) for i in infos}
        for info in infos:
            try:
                executed[info.stem] = nbformat.reads(futures[info.stem].result(), as_version=4)
            except Exception as exc:  # a cell timed out, the kernel died: name the notebook
                failed[info.stem] = f"{type(exc).__name__}: {exc}"
    return executed, failed


def _missing_in_run(nb, extra_of_import: dict[str, str] | None) -> tuple[str, ...]:
    """The extras a run found missing: its first error is a
    ``ModuleNotFoundError`` for a top-level package ``extra_of_import`` maps to an
    extra (the kernel's environment lacks it although the build's has it,
    or the notebook imports it in a way the import scan does not see)."""
    mapping = EXTRA_OF_IMPORT if extra_of_import is None else extra_of_import
    first = next((out for _i, _w, out in _iter_outputs(nb) if out.get("output_type") == "error"), None)
    if first is None or first.get("ename") != "ModuleNotFoundError":
        return ()
    m = re.search(r"No module named '([\w.]+)'", str(first.get("evalue", "")))
    if m is None or "." in m.group(1):
        # a missing submodule (``jax.experimental.foo``) of an installed package is the
        # notebook's own error, never an extra to install: the run fails
        return ()
    top = m.group(1)
    return tuple(sorted({e for mod, e in mapping.items() if not mod.startswith("numlab") and mod.split(".")[0] == top}))


def _remove_stale(outdir: Path, infos: list[NotebookInfo], glossary: bool) -> None:
    """With ``--force``: the pages of the course being replaced whose
    notebooks are not in this build (so its sidebar is the whole course)."""
    try:
        old = json.loads((outdir / "course.json").read_text(encoding="utf-8")).get("notebooks", [])
    except (OSError, ValueError, AttributeError):
        return
    keep = {i.stem for i in infos}
    for entry in old:
        stem = str(entry.get("stem", "")) if isinstance(entry, dict) else ""
        if re.fullmatch(r"\d\d_[\w.-]+", stem) and stem not in keep:
            (outdir / f"{stem}.html").unlink(missing_ok=True)
            (outdir / "notebooks" / f"{stem}.ipynb").unlink(missing_ok=True)
    if not glossary:
        (outdir / "glossary.html").unlink(missing_ok=True)


def build(out, *, notebooks=None, force: bool = False, jobs: int | None = None, timeout: int = 600,
          echo=print, extra_of_import: dict[str, str] | None = None) -> dict:
    """Execute the notebooks and write the static HTML course to ``out``.

    ``notebooks``: a folder (its ``NN_*.ipynb``) or a list of files
    (default: the repository's notebooks folder).  ``jobs``: notebooks run
    at once, each in its own process and kernel (default: the CPU count).
    ``timeout``: seconds per cell.  ``extra_of_import``: module -> numlab
    extra (default :data:`EXTRA_OF_IMPORT`); a notebook needing an extra
    that is not installed is not run, its page says what to install.
    Returns ``{"dir", "pages", "index", "figures", "skipped"}`` (skipped:
    stem -> the missing extras); raises :class:`CourseError` naming each
    notebook and cell with error output (after writing the pages), and
    :class:`FileExistsError` (before running anything) when ``out`` holds
    a course and ``force`` is false."""
    src = default_notebooks_dir() if notebooks is None else notebooks
    paths = (sorted(Path(src).glob("[0-9][0-9]_*.ipynb")) if isinstance(src, (str, os.PathLike))
             else [Path(p) for p in src])
    if not paths:
        raise FileNotFoundError(f"--notebooks {str(src)!r}: no NN_*.ipynb notebooks there")
    if not isinstance(timeout, int) or timeout <= 0:
        raise ValueError(f"--timeout {timeout!r}: must be a positive number of seconds")
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs {jobs!r}: must be a positive integer")
    nbformat = _lab("nbformat")
    _lab("nbclient"), _lab("nbconvert"), _mathjax_static()  # fail before running anything when missing
    outdir, note = resolve_out_dir(out, force)
    if note:
        echo(note)
    infos = [notebook_info(p, extra_of_import) for p in paths]
    missing = {i.stem: m for i in infos if (m := missing_extras(i, extra_of_import))}
    for stem, extras in missing.items():
        echo(f"{stem}: not run (needs: pip install numlab[{','.join(extras)}]); its page shows the notebook "
             "without outputs")
    to_run = [i for i in infos if i.stem not in missing]
    echo(f"running {len(to_run)} notebooks, {max(1, min(jobs, len(to_run)))} at a time ...")
    executed, failed = _run_all(to_run, jobs, timeout)
    for stem in list(executed):
        if late := _missing_in_run(executed[stem], extra_of_import):
            missing[stem] = late
            del executed[stem]
            echo(f"{stem}: stopped at an import of numlab[{','.join(late)}], which the kernel lacks; its page "
                 "shows the notebook without outputs")
    glossary_md = _glossary_source(paths)
    site = _Site(tuple(infos), glossary_md is not None, missing)
    outdir.mkdir(parents=True, exist_ok=True)
    if force:
        _remove_stale(outdir, infos, site.glossary)
    _bundle_mathjax(outdir)
    (outdir / "notebooks").mkdir(parents=True, exist_ok=True)
    pages, figures, problems = [], {}, []
    for info in infos:
        nb, banner = executed.get(info.stem), ""
        if info.stem in missing:
            banner = _needs_banner(missing[info.stem])
        elif nb is None:
            problems.append(f"{info.path.name}: did not run: {failed[info.stem]}")
            banner = _failed_banner(failed[info.stem])
        else:
            problems += [f"{info.path.name}: {e}" for e in find_errors(nb)]
            figures[info.stem] = figure_count(nb)
        nb = nb if nb is not None else _read(info.path)
        nbformat.write(nb, outdir / "notebooks" / f"{info.stem}.ipynb")
        page = outdir / f"{info.stem}.html"
        page.write_text(_page(nb, info, site, banner), encoding="utf-8")
        pages.append(page)
    if glossary_md is not None:
        (outdir / "glossary.html").write_text(_glossary(site, glossary_md), encoding="utf-8")
    index = outdir / "index.html"
    index.write_text(_index(site), encoding="utf-8")
    (outdir / "course.json").write_text(json.dumps(
        {"notebooks": [{"stem": i.stem, "title": i.title, "extras": list(i.extras),
                        "needs": list(missing.get(i.stem, ())), "ran": i.stem in executed,
                        "figures": figures.get(i.stem)} for i in infos],
         "glossary": site.glossary}, indent=1))
    echo(f"wrote {index} and {len(pages)} pages")
    if problems:
        raise CourseError("error output in the course (pages written to "
                          f"{outdir}):\n  " + "\n  ".join(problems))
    return {"dir": outdir, "pages": pages, "index": index, "figures": figures, "skipped": dict(missing)}
