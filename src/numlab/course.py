"""The course as static HTML: execute the notebooks and export one page each.

:func:`build` runs every ``NN_*.ipynb`` of the notebooks folder (each in
its own worker process and kernel, ``jobs`` at a time), keeps the widget
state the run produced (nbclient's ``store_widget_state``), and writes

* ``NN_name.html``: the notebook with its outputs (nbconvert's lab
  template, figures embedded as data URIs);
* ``notebooks/NN_name.ipynb``: the executed notebook, widget state
  included, for readers who want the file;
* ``index.html``: the numbered notebooks with their titles and the
  ``pip`` extra each needs.

Widgets show their initial state without any JavaScript: each widget view
is replaced, in the exported copy only, by its controls drawn as disabled
HTML inputs (slider position, dropdown choice, ...) followed by the
outputs its ``Output`` widgets hold (the figure the first call drew).  No
widget JavaScript is needed, so figures and controls read offline.  Any error
output (a cell's, or one inside a widget's output) makes :func:`build`
raise :class:`CourseError` naming the notebook and the cell, after the
pages are written so they can be inspected.

Results are never overwritten: a folder that already holds a course
(``index.html``) gets a fresh ``run-NNN`` subfolder unless ``force``.
"""

from __future__ import annotations

import copy
import html
import importlib
import json
import multiprocessing
import os
import re
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

from .report import fresh_out_dir

__all__ = ["CourseError", "NotebookInfo", "build", "default_notebooks_dir", "figure_count",
           "find_errors", "notebook_info", "resolve_out_dir", "static_copy"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")

# module imported by a notebook -> the numlab extra that installs it
EXTRA_OF_IMPORT = {"torch": "torch", "numlab.torch": "torch", "dask": "dask", "distributed": "dask"}
_IMPORT_RE = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_][\w.]*)", re.MULTILINE)
_MARKER = "index.html"


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
    ("00_start_here"), ``title`` (its first heading) and ``extras`` (the
    ``pip install numlab[...]`` extras it needs; ``lab`` always)."""

    path: Path
    number: str
    stem: str
    title: str
    extras: tuple[str, ...] = field(default=("lab",))


def default_notebooks_dir() -> Path:
    """The repository's ``notebooks/`` folder (numlab run from a checkout)."""
    here = Path(__file__).resolve().parents[2] / "notebooks"
    if not here.is_dir():
        raise FileNotFoundError(f"no notebooks folder at {here}; pass --notebooks DIR (a numlab checkout's "
                                "notebooks/)")
    return here


def notebook_info(path: str | os.PathLike) -> NotebookInfo:
    """Number, title and extras of one notebook (extras from its imports:
    :data:`EXTRA_OF_IMPORT`)."""
    p = Path(path)
    nb = _read(p)
    title = p.stem
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^#+\s+(.+)$", cell.source, re.MULTILINE)
            if m:
                title = m.group(1).strip()
                break
    extras = {"lab"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            for mod in _IMPORT_RE.findall(cell.source):
                for name, extra in EXTRA_OF_IMPORT.items():
                    if mod == name or mod.startswith(name + "."):
                        extras.add(extra)
    number = p.stem.split("_", 1)[0]
    return NotebookInfo(p, number, p.stem, title, tuple(sorted(extras, key=lambda e: (e != "lab", e))))


def resolve_out_dir(out, force: bool = False) -> tuple[Path, str]:
    """The directory to write to, and a note (empty when nothing to say).

    A missing or course-free directory is used as is; one that holds a
    course (``index.html``) is overwritten only with ``force``, otherwise a
    fresh ``run-NNN`` subfolder is created in it."""
    return fresh_out_dir(out, force, (_MARKER,), "the course", "a course")


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
def _page(nb, info: NotebookInfo, prev: NotebookInfo | None, nxt: NotebookInfo | None) -> str:
    body, _ = _lab("nbconvert").HTMLExporter(template_name="lab").from_notebook_node(
        static_copy(nb), resources={"metadata": {"name": f"{info.number} · {info.title}"}})
    links = ["<a href='index.html'>course index</a>"]
    if prev:
        links.insert(0, f"<a href='{prev.stem}.html'>&larr; {html.escape(prev.number)}</a>")
    if nxt:
        links.append(f"<a href='{nxt.stem}.html'>{html.escape(nxt.number)} &rarr;</a>")
    extras = ", ".join(info.extras)
    nav = (f"<nav style='font:14px sans-serif;padding:0.5em 1em;border-bottom:1px solid #ddd'>"
           f"{' · '.join(links)} <span style='color:#777'>&nbsp; needs <code>pip install "
           f"numlab[{extras}]</code>; download <a href='notebooks/{info.stem}.ipynb'>"
           f"{info.stem}.ipynb</a></span></nav>")
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav, body, count=1)


def _index(infos: list[NotebookInfo]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(i.number)}</td><td><a href='{i.stem}.html'>{html.escape(i.title)}</a></td>"
        f"<td><code>numlab[{', '.join(i.extras)}]</code></td>"
        f"<td><a href='notebooks/{i.stem}.ipynb'>.ipynb</a></td></tr>" for i in infos)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>numlab course</title>"
        "<style>body{font:16px/1.5 sans-serif;max-width:50em;margin:2em auto;padding:0 1em}"
        "td,th{padding:0.3em 0.8em;text-align:left;border-bottom:1px solid #eee}</style></head><body>"
        "<h1>numlab course</h1>"
        "<p>Why fused and eager kernels give different numbers, bit for bit. Each page is a notebook "
        "executed with its outputs; widgets show their initial state (run the notebook in JupyterLab "
        "to move them). Start with 00.</p>"
        "<table><tr><th>#</th><th>notebook</th><th>needs <code>pip install</code></th><th>file</th></tr>"
        f"{rows}</table></body></html>")


def build(out, *, notebooks=None, force: bool = False, jobs: int | None = None, timeout: int = 600,
          echo=print) -> dict:
    """Execute the notebooks and write the static HTML course to ``out``.

    ``notebooks``: a folder (its ``NN_*.ipynb``) or a list of files
    (default: the repository's notebooks folder).  ``jobs``: notebooks run
    at once, each in its own process and kernel (default: the CPU count).
    ``timeout``: seconds per cell.  Returns ``{"dir", "pages", "index",
    "figures"}``; raises :class:`CourseError` naming each notebook and
    cell with error output (after writing the pages)."""
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
    _lab("nbclient"), _lab("nbconvert")  # fail before running anything when Jupyter is missing
    outdir, note = resolve_out_dir(out, force)
    if note:
        echo(note)
    infos = [notebook_info(p) for p in paths]
    echo(f"running {len(paths)} notebooks, {min(jobs, len(paths))} at a time ...")
    executed, problems = {}, []
    # fork: `python -m numlab` has no __main__ guard, so spawn/forkserver must not re-import it
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)), mp_context=ctx) as pool:
        futures = {i.stem: pool.submit(_execute, str(i.path.resolve()), timeout) for i in infos}
        for info in infos:
            try:
                executed[info.stem] = nbformat.reads(futures[info.stem].result(), as_version=4)
            except Exception as exc:  # a cell timed out, the kernel died: name the notebook
                problems.append(f"{info.path.name}: did not run: {type(exc).__name__}: {exc}")
    (outdir / "notebooks").mkdir(parents=True, exist_ok=True)
    pages, figures = [], {}
    done = [i for i in infos if i.stem in executed]
    for k, info in enumerate(done):
        nb = executed[info.stem]
        problems += [f"{info.path.name}: {e}" for e in find_errors(nb)]
        figures[info.stem] = figure_count(nb)
        nbformat.write(nb, outdir / "notebooks" / f"{info.stem}.ipynb")
        page = outdir / f"{info.stem}.html"
        page.write_text(_page(nb, info, done[k - 1] if k else None, done[k + 1] if k + 1 < len(done) else None),
                        encoding="utf-8")
        pages.append(page)
    index = outdir / "index.html"
    index.write_text(_index(infos), encoding="utf-8")
    (outdir / "course.json").write_text(json.dumps(
        {"notebooks": [{"stem": i.stem, "title": i.title, "extras": list(i.extras),
                        "figures": figures.get(i.stem)} for i in infos]}, indent=1))
    echo(f"wrote {index} and {len(pages)} pages")
    if problems:
        raise CourseError("error output in the course (pages written to "
                          f"{outdir}):\n  " + "\n  ".join(problems))
    return {"dir": outdir, "pages": pages, "index": index, "figures": figures}
