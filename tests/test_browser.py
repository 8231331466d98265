"""Every notebook in a real JupyterLab, driven by headless Chromium (Playwright).

Opt-in (``pytest -m browser``; deselected by default like ``slow``).
Needs ``pip install playwright`` and a Chromium: Debian's ``chromium``
(found on PATH, or ``LABCHECK_CHROMIUM=/path/to/chrome``); without them
the tests skip with the reason, and fail instead when
``NUMLAB_REQUIRE_BROWSER=1`` (as in CI).

One JupyterLab serves a temporary copy of ``notebooks/`` (so Lab's
autosave never rewrites the committed files); per notebook: open it, wait
for its kernel, Run All, then assert what a person sees:

* no error output (an error, or a traceback on stderr), per cell;
* every widget renders (no ``interactive(children=``, ``HBox(children=``,
  "Error displaying widget" or "Loading widget" text);
* moving the first control of each interactive cell (a slider two steps
  with the keyboard, another dropdown option, another toggle button, a
  checkbox click) changes that cell's figure (its text when the cell
  draws no image).

The browser steps are adapted from the course walk-through tools used to
find the issues the course fixes (lab-browser-check.py, lab-explore.py).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _browser import playwright_and_chromium

try:
    from playwright.sync_api import Error as PlaywrightError
except ImportError:  # the fixture skips (or fails under NUMLAB_REQUIRE_BROWSER=1) with the reason
    PlaywrightError = Exception

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RUN_ALL_LIMIT = 600  # seconds for one notebook's Run All
CHANGE_LIMIT = 120  # seconds for a moved control's figure to change
CONTROLS = ".widget-slider, .widget-hslider, .widget-dropdown, .widget-toggle-buttons, .widget-checkbox"
UNRENDERED = ("interactive(children=", "HBox(children=", "VBox(children=", "Error displaying widget",
              "Loading widget")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(browser, base URL with token) of a JupyterLab serving a copy of the notebooks."""
    sync_playwright, chromium = playwright_and_chromium()
    root = tmp_path_factory.mktemp("lab")
    for name in NOTEBOOKS:
        shutil.copy(REPO / "notebooks" / name, root / name)
    port, token = _free_port(), secrets.token_hex(8)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
               JUPYTER_CONFIG_DIR=str(root / ".jupyter"), JUPYTERLAB_SETTINGS_DIR=str(root / ".lab-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".lab-workspaces"))
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        for _ in range(120):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not start; see {root / 'lab.log'}")
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=chromium, headless=True,
                args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                      "--disable-background-networking", "--disable-component-update", "--disable-sync"])
            yield browser, f"http://127.0.0.1:{port}", token
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _dismiss(page) -> bool:
    """Accept a dialog (kernel choice) and answer No to the news toast; True if a dialog was there."""
    no = page.query_selector(".jp-toast-buttonBar button:text-is('No'), .Toastify button:text-is('No')")
    if no:
        _try_click(no)
    d = page.query_selector(".jp-Dialog .jp-mod-accept")
    if d and _try_click(d):
        time.sleep(1)
        return True
    return False


def _try_click(el) -> bool:
    """Click an element that may vanish or still be animating in (toasts, dialogs)."""
    try:
        el.click(timeout=3000)
        return True
    except PlaywrightError:
        return False


def _status(page) -> str:
    return " ".join(page.eval_on_selector_all(".jp-StatusBar-TextItem", "els => els.map(e => e.textContent)"))


def _wait_idle(page, limit: float) -> bool:
    """Wait until the status bar shows a kernel that is idle (not "No Kernel")."""
    t = time.time()
    while time.time() - t < limit:
        if _dismiss(page):
            continue
        st = _status(page)
        if "| Idle" in st and "No Kernel" not in st:
            return True
        time.sleep(0.3)
    return False


def _run_all(page) -> None:
    page.click("div.lm-MenuBar-itemLabel:text-is('Run')")
    page.click("li.lm-Menu-item:has-text('Run All Cells')")
    time.sleep(2)
    t = time.time()
    while time.time() - t < RUN_ALL_LIMIT:
        _dismiss(page)
        prompts = page.eval_on_selector_all(".jp-Notebook .jp-InputPrompt", "els => els.map(e => e.textContent)")
        if prompts and not any("*" in x for x in prompts) and "| Idle" in _status(page):
            return
        time.sleep(0.5)
    pytest.fail(f"Run All did not finish in {RUN_ALL_LIMIT} s")


_CELL_ERRORS = """cells => cells.flatMap((c, i) =>
    Array.from(c.querySelectorAll("[data-mime-type='application/vnd.jupyter.error'], "
                                  + "[data-mime-type='application/vnd.jupyter.stderr']"))
         .map(e => [i + 1, e.getAttribute('data-mime-type'), e.textContent.slice(0, 600)]))"""

_SIG = """c => {
    // the figure (images) and text of the cell's Output widgets; the whole output area when it has none
    const outs = Array.from(c.querySelectorAll('.widget-output'));
    const areas = outs.length ? outs : [c.querySelector('.jp-Cell-outputWrapper')].filter(Boolean);
    const imgs = areas.flatMap(a => Array.from(a.querySelectorAll('img')))
                      .map(i => i.src.length + ':' + i.src.slice(-80)).join('|');
    return [imgs, areas.map(a => a.innerText || '').join('||')];
}"""


def _move_first_control(page, cell) -> str:
    """Move the first control of a cell; a description of what was done."""
    ctl = cell.locator(CONTROLS).first
    cls = ctl.get_attribute("class") or ""
    if "widget-dropdown" in cls:
        sel = ctl.locator("select")
        options = sel.locator("option").evaluate_all("os => os.map(o => o.value)")
        current = sel.evaluate("s => s.value")
        pick = next((o for o in options if o != current), None)
        assert pick is not None, f"dropdown with one option ({options})"
        sel.select_option(pick)
        return f"dropdown {current!r} -> {pick!r}"
    if "widget-toggle-buttons" in cls:
        btn = ctl.locator("button:not(.mod-active)").first
        label = btn.inner_text()
        btn.click()
        return f"toggle -> {label!r}"
    if "widget-checkbox" in cls:
        ctl.locator("input").click()
        return "checkbox clicked"
    handle = ctl.locator(".noUi-handle").first
    now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
    key = "ArrowLeft" if now is not None and now == top else "ArrowRight"
    handle.focus()
    page.keyboard.press(key)
    page.keyboard.press(key)
    return f"slider two steps {key[5:].lower()} from {now}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_in_jupyterlab(lab, name):
    browser, base, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{base}/lab/tree/{name}?token={token}&reset")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        assert _wait_idle(page, 180), f"{name}: the kernel never became idle ({_status(page)!r})"
        _run_all(page)
        time.sleep(2)
        cells = page.locator(".jp-Notebook .jp-Cell")
        errors = [f"cell {n} {mime.rsplit('.', 1)[-1]}: {text}"
                  for n, mime, text in cells.evaluate_all(_CELL_ERRORS)
                  if mime.endswith("error") or "Traceback" in text or "Error" in text]
        assert errors == [], f"{name}: error output"
        outputs = page.eval_on_selector_all(".jp-Notebook .jp-OutputArea-output", "els => els.map(e => e.textContent)")
        unrendered = [t[:200] for t in outputs if any(u in t for u in UNRENDERED)]
        assert unrendered == [], f"{name}: widgets shown as text"
        # every interactive cell: its first control changes its figure
        moved = []
        for i in range(cells.count()):
            cell = cells.nth(i)
            if cell.locator(CONTROLS).count() == 0:
                continue
            cell.scroll_into_view_if_needed()
            before = cell.evaluate(_SIG)
            what = _move_first_control(page, cell)
            key = 0 if before[0] else 1  # the figure, or the text when the cell draws none
            t = time.time()
            after = before
            while time.time() - t < CHANGE_LIMIT:
                after = cell.evaluate(_SIG)
                if after[key] != before[key]:
                    break
                time.sleep(0.3)
            moved.append((i + 1, what, after[key] != before[key], round(time.time() - t, 1)))
        print(name, "moved:", moved)
        unchanged = [m for m in moved if not m[2]]
        assert unchanged == [], f"{name}: moving the first control did not change the figure: {moved}"
        errors = [f"cell {n}: {text[:300]}" for n, mime, text in cells.evaluate_all(_CELL_ERRORS)
                  if mime.endswith("error") or "Traceback" in text or "Error" in text]
        assert errors == [], f"{name}: error output after moving the controls"
    finally:
        page.close()
        _shutdown_kernels(base, token)


def _shutdown_kernels(base: str, token: str) -> None:
    """Delete every session (and its kernel) so notebooks do not pile up kernels."""
    def call(method, path):
        req = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    for sess in call("GET", "/api/sessions") or []:
        call("DELETE", f"/api/sessions/{sess['id']}")
