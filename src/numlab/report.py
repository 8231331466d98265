"""Reports: the terminal tables every command prints, and a self-contained
HTML report (the demo table, figures embedded as base64 PNG, the fusion
plans, in one file with no external resources).

Terminal tables go through :func:`render_table` (built on ``rich``): they fit
the terminal width (``COLUMNS``, else the terminal's size, else 80), wrap
long cells instead of cutting them (node names and reasons are never
truncated), split into several panels that repeat the key columns when even
wrapped they do not fit, and end with a legend that defines every column.
When stdout is not a terminal (piped, redirected, a notebook) the table is
plain ASCII text without colour.  :func:`wrap` wraps prose to the same width.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import math
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from rich import box as _box
from rich.console import Console
from rich.table import Table

__all__ = ["COLUMNS", "LEGEND", "Column", "terminal_width", "is_plain", "wrap", "wrap_lines", "render_table",
           "format_legend", "format_table", "html_table", "html_report", "fresh_out_dir"]

# (key, header, format)
COLUMNS = (
    ("model", "model", "{}"),
    ("fmt", "S", "{}"),
    ("mode", "mode", "{}"),
    ("abs_mean", "mean abs", "{:.3g}"),
    ("verdict", "vs eager (mean abs)", "{}"),
    ("abs_max", "max abs", "{:.3g}"),
    ("abs_p99", "P99 abs", "{:.3g}"),
    ("rel_max", "max rel", "{:.3g}"),
    ("rel_p99", "P99 rel", "{:.3g}"),
    ("ulp_max", "max ULP", "{:.0f}"),
    ("ulp_p99", "P99 ULP", "{:.0f}"),
    ("ulp0", "0 ULP", "{:.1%}"),
    ("bitwise_eq_eager", "bits = eager", "{:.1%}"),
    ("nonfinite", "NaN/inf", "{}"),
)

LEGEND = (
    ("S", "storage format: inputs, eager's intermediates and every output are rounded to it"),
    ("mode", "eager: one kernel per operator, rounding to S after each; fused: fp32 inside a "
             "fused block, one rounding to S at its outputs; emulated_casts: fused with a rounding "
             "to S wherever eager rounds"),
    ("abs, rel", "absolute and relative error against the fp64 reference on the same S-valued "
                 "inputs (relative: divided by max(|ref|, smallest normal of S)); max, P99 "
                 "(99th percentile) and mean over all output elements"),
    ("ULP", "distance in units in the last place of S from the fp64 result rounded to S"),
    ("0 ULP", "share of elements equal to the correctly rounded result"),
    ("bits = eager", "share of elements bitwise equal to eager's output"),
    ("NaN/inf", "number of non-finite outputs"),
    ("vs eager (mean abs)", "the mode's mean abs against eager's: more/less accurate by the ratio "
                            "of the two (shown), 'same bits' when bitwise identical to eager"),
)


def terminal_width(default: int = 80) -> int:
    """Columns to fit: ``COLUMNS`` if set, else the terminal's width, else ``default``."""
    return max(20, shutil.get_terminal_size((default, 24)).columns)


def is_plain(stream=None) -> bool:
    """True when ``stream`` (default stdout) is not a terminal: print plain text."""
    stream = sys.stdout if stream is None else stream
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):
        return True


def wrap(text: str, width: int | None = None, indent: str = "") -> str:
    """``text`` wrapped to ``width`` (default :func:`terminal_width`), each
    paragraph (separated by a newline) on its own."""
    width = terminal_width() if width is None else width
    return "\n".join(textwrap.fill(par, width, initial_indent=indent, subsequent_indent=indent,
                                   break_long_words=True, break_on_hyphens=False) if par.strip() else ""
                     for par in text.split("\n"))


def wrap_lines(text: str, width: int | None = None, hang: int = 4) -> str:
    """Each line of ``text`` wrapped to ``width`` (default
    :func:`terminal_width`), keeping its indentation and indenting its
    continuation lines by ``hang`` more spaces (for indented reports)."""
    width = terminal_width() if width is None else width
    out = []
    for line in text.split("\n"):
        ind = line[: len(line) - len(line.lstrip(" "))]
        out.append(textwrap.fill(line.strip(), width, initial_indent=ind,
                                 subsequent_indent=ind + " " * hang, break_on_hyphens=False)
                   if line.strip() and len(line) > width else line)
    return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of :func:`render_table`.

    ``key`` (row dict key, or a callable row -> value), ``header``, ``fmt``
    (a format string for the value, default ``"{}"``), ``justify`` ("left"
    or "right"; default right for a format with a precision, else left),
    ``key_col`` (repeated in every panel when the table is split; default
    False), ``wrap`` (text may wrap between words; numbers keep one line when
    there is room; default True)."""

    key: str | Callable
    header: str
    fmt: str = "{}"
    justify: str | None = None
    key_col: bool = False
    wrap: bool = True


def _cell(v, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def _as_column(c) -> Column:
    if isinstance(c, Column):
        return c
    key, header, fmt = c
    return Column(key, header, fmt)


def _value(row, col: Column) -> str:
    v = col.key(row) if callable(col.key) else row.get(col.key)
    return _cell(v, col.fmt)


# plain text: a dashed line under the header, no vertical rules, ASCII only
_PLAIN_BOX = _box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def _table(cols: Sequence[Column], body, sections, plain: bool, widths: Sequence[int]) -> Table:
    t = Table(box=_PLAIN_BOX if plain else _box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, 1), header_style="" if plain else "bold", expand=False)
    for c, w in zip(cols, widths, strict=True):
        just = c.justify or ("right" if any(ch in c.fmt for ch in ".%") and c.fmt != "{}" else "left")
        t.add_column(c.header, justify=just, overflow="fold", no_wrap=False, width=w)
    for i, cells in enumerate(body):
        if i and sections[i] != sections[i - 1]:
            t.add_section()
        t.add_row(*cells)
    return t


def _min_widths(cols: Sequence[Column], body) -> list[int]:
    """Each column's narrowest width: its longest header word, and its
    longest cell (a column that does not wrap: numbers stay on one line) or
    cell word, a word longer than ``_FOLD`` counting as ``_FOLD`` (such a
    word, e.g. a long fusion spec, is folded across lines, never cut)."""
    out = []
    for j, c in enumerate(cols):
        w = max(len(x) for x in c.header.split() or [""])
        for cells in body:
            if c.wrap:
                w = max(w, *(min(len(x), _FOLD) for x in cells[j].split() or [""]))
            else:
                w = max(w, len(cells[j]))
        out.append(w)
    return out


_FOLD = 24


_GAP = 3  # one space of padding each side and the (blank) column rule


def _widths(mins: Sequence[int], maxs: Sequence[int], width: int) -> list[int]:
    """Column widths for one panel: each column's unbroken minimum, then the
    room left handed out to the columns closest to their full width first
    (headers such as "P99 ULP" stay on one line); a column wider than the
    whole table is folded to fit."""
    room = width - _GAP * (len(mins) - 1)
    w = [min(m, max(1, room)) for m in mins]
    while sum(w) > room and max(w) > 1:  # even unbroken it does not fit: fold the widest
        w[w.index(max(w))] -= 1
    left = room - sum(w)
    for i in sorted(range(len(w)), key=lambda i: maxs[i] - w[i]):
        mx = maxs[i]
        add = max(0, min(left, mx - w[i]))
        w[i] += add
        left -= add
    return w


def _key_widths(cols, body, width) -> list[int]:
    """:func:`_min_widths`, except that a key column (e.g. full node names)
    asks for its whole width, up to half the table: names stay whole and the
    other columns move to further panels instead."""
    mins = _min_widths(cols, body)
    for j, c in enumerate(cols):
        if c.key_col:
            full = max([len(x) for x in c.header.split()] + [len(b[j]) for b in body])
            mins[j] = max(mins[j], min(full, width // 2))
    return mins


def _panels(cols, body, width) -> list[list[int]]:
    """Column indices of each panel: greedy, each panel repeating the key
    columns and as many other columns as fit in ``width`` unbroken."""
    mins = _key_widths(cols, body, width)
    keys = [i for i, c in enumerate(cols) if c.key_col]

    def need(idx):
        return sum(mins[i] for i in idx) + _GAP * (len(idx) - 1)

    panels, cur = [], []
    for i in (i for i, c in enumerate(cols) if not c.key_col):
        if cur and need(keys + cur + [i]) > width:
            panels.append(sorted(keys + cur))
            cur = [i]
        else:
            cur.append(i)
    panels.append(sorted(keys + cur))
    return panels


def format_legend(legend, width: int | None = None) -> str:
    """``legend`` (pairs term, definition) as wrapped lines ``term: definition``."""
    width = terminal_width() if width is None else width
    return "\n".join(textwrap.fill(f"{term}: {text}", width, initial_indent="  ",
                                   subsequent_indent="      ", break_on_hyphens=False)
                     for term, text in legend)


def render_table(rows, columns, *, legend=(), title: str | None = None, group=None,
                 width: int | None = None, plain: bool | None = None) -> str:
    """A table of ``rows`` (dicts) for the terminal, as a string.

    Parameters
    ----------
    rows : sequence of dict
    columns : sequence of :class:`Column` or ``(key, header, fmt)`` tuples
    legend : sequence of (term, definition)
        Printed under the table, wrapped (every column and term the table uses).
    title : str, optional
        A line above the table, wrapped.
    group : callable, optional
        row -> key; a blank line separates consecutive rows with different keys.
    width : int, optional
        Default :func:`terminal_width`.  Every line is at most this wide.
    plain : bool, optional
        Plain ASCII text without colour; default :func:`is_plain` (stdout is
        not a terminal).
    """
    width = terminal_width() if width is None else int(width)
    plain = is_plain() if plain is None else bool(plain)
    cols = [_as_column(c) for c in columns]
    rows = list(rows)
    body = [[_value(r, c) for c in cols] for r in rows]
    sections = [group(r) if group else None for r in rows]
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=not plain, no_color=plain,
                      color_system=None if plain else "standard", highlight=False, soft_wrap=False,
                      legacy_windows=False)
    parts = [wrap(title, width)] if title else []
    panels = _panels(cols, body, width)
    mins = _key_widths(cols, body, width)
    maxs = [max(m, len(c.header), *(len(b[j]) for b in body)) for j, (c, m) in enumerate(zip(cols, mins, strict=True))]
    for k, idx in enumerate(panels):
        if len(panels) > 1:
            parts.append(wrap(f"(part {k + 1} of {len(panels)}: the table is split to fit {width} "
                              "columns)", width))
        t = _table([cols[j] for j in idx], [[b[j] for j in idx] for b in body], sections, plain,
                   _widths([mins[j] for j in idx], [maxs[j] for j in idx], width))
        console.print(t)
        parts.append("\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").split("\n")))
        buf.seek(0)
        buf.truncate()
    if legend:
        parts.append(format_legend(legend, width))
    return "\n".join(parts)


def format_table(rows, columns=COLUMNS, *, width: int | None = None, plain: bool | None = None,
                 legend=LEGEND) -> str:
    """The demo rows as a terminal table (:func:`render_table`) with its legend;
    a blank line between model/format groups."""
    cols = [Column(k, h, f, key_col=k in ("model", "fmt", "mode")) for k, h, f in columns]
    used = {h for _, h, _ in columns}
    leg = [(t, d) for t, d in legend if t in used or t in ("abs, rel", "ULP")]
    return render_table(rows, cols, legend=leg, group=lambda r: (r.get("model"), r.get("fmt")),
                        width=width, plain=plain)


def html_table(rows, columns=COLUMNS) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    out = [f"<table><thead><tr>{head}</tr></thead><tbody>"]
    for r in rows:
        cls = {"fused": "fused", "eager": "eager", "emulated_casts": "emul"}.get(r.get("mode"), "")
        cells = "".join(f"<td>{html.escape(_cell(r.get(k), f))}</td>" for k, _, f in columns)
        out.append(f'<tr class="{cls}">{cells}</tr>')
    out.append("</tbody></table>")
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:12px;margin:1em 0}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f0f0f0} td:nth-child(-n+3){text-align:left}
tr.eager td:nth-child(3){color:#1f77b4} tr.fused td:nth-child(3){color:#d62728}
tr.emul td:nth-child(3){color:#2ca02c}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
pre{background:#f7f7f7;padding:0.6em;font-size:11px;overflow-x:auto}
pre.lead{white-space:pre-wrap;font-size:13px}
.note{color:#555;font-size:13px}
"""


def html_report(*, title: str, intro: str, rows, figures, plans=None, notes=(), extra_html: str = "",
                specs=None, lead=()) -> str:
    """The whole report as one HTML string.

    Parameters
    ----------
    title, intro : str
        Heading and an introductory paragraph (plain text, escaped).
    rows : list of dict
        Demo rows (see :data:`COLUMNS`).
    figures : list of (caption, png bytes)
        Embedded as ``data:image/png;base64`` images.
    plans : dict, optional
        Model -> ``str(plan)`` shown in ``<pre>`` blocks.
    notes : sequence of str
        Bullet points under the table.
    extra_html : str
        Trusted HTML (built by the caller with escaped text) inserted after
        the notes, before the figures.
    specs : mapping of str to str, optional
        The specs the numbers were computed under, shown under the title,
        e.g. ``{"fusion": options.spec, "kernels": kernel_spec.spec}`` (each
        the canonical string that parses back to the same object).
    lead : sequence of str
        Lines shown right after the intro, before the tables (e.g. the
        verdict; plain text, escaped; leading spaces indent).
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if specs:
        parts.append("<p class='note'>" + "<br>".join(
            f"{html.escape(str(k))}: <code>{html.escape(str(v))}</code>" for k, v in specs.items()) + "</p>")
    parts += [
        f"<p>{html.escape(intro)}</p>",
    ]
    if lead:
        parts.append("<pre class='lead'>" + "\n".join(html.escape(x) for x in lead) + "</pre>")
    parts += [
        "<h2>Errors against the fp64 reference</h2>",
        html_table(rows),
    ]
    if notes:
        parts.append("<ul class='note'>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    if extra_html:
        parts.append(extra_html)
    parts.append("<h2>Figures</h2>")
    for caption, png in figures:
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{b64}'>"
                     f"<figcaption class='note'>{html.escape(caption)}</figcaption></figure>")
    if plans:
        parts.append("<h2>Fusion plans</h2>")
        for model, text in plans.items():
            parts.append(f"<h3>{html.escape(model)}</h3><pre>{html.escape(text)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def fresh_out_dir(out, force: bool, markers, what: str, held: str):
    """The directory a command writes ``what`` to, and a note (empty when
    nothing to say): ``out`` as is when it is missing or holds none of the
    ``markers`` (file names); one that holds them is overwritten only with
    ``force``, otherwise a fresh ``run-NNN`` subfolder is made in it.
    ``what`` ("the results") and ``held`` ("results") word the notes."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise FileExistsError(f"--out {str(p)!r} exists and is not a directory")
    if not any((p / m).exists() for m in markers):
        return p, ""
    if force:
        return p, f"--force: overwriting {what} in {p}"
    k = 1
    while (p / f"run-{k:03d}").exists():
        k += 1
    q = p / f"run-{k:03d}"
    return q, f"{p} already holds {held}; writing to the fresh folder {q} (use --force to overwrite)"
