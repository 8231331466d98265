"""Compact reprs for result objects that hold arrays or long lists.

A result type that can hold big arrays (a check report, a run, a bound)
derives from :class:`Compact` and lists its key facts in
:meth:`Compact._repr_facts`: a title line and ``(label, value)`` rows.
``repr()`` prints them as at most :data:`MAX_LINES` lines of at most
:data:`WIDTH` characters, and ``_repr_html_`` (Jupyter) as a small HTML
table with every text escaped, whatever the size of the arrays: values are
summarised (:func:`array_summary`: shape, dtype, finite count, min / max),
never printed whole.  A dataclass that derives from :class:`Compact` needs
``@dataclass(repr=False)``, or the generated ``__repr__`` replaces this one.
"""

from __future__ import annotations

import html
import math
import reprlib

import numpy as np

__all__ = ["Compact", "array_summary", "brief", "mapping_summary", "facts_text", "facts_html",
           "text_table", "MAX_LINES", "WIDTH"]

#: most lines of a compact repr (title included)
MAX_LINES = 20
#: most characters of one line of a compact repr
WIDTH = 96
#: most items of a mapping or sequence shown before "... N more"
MAX_ITEMS = 6

_brief = reprlib.Repr()
_brief.maxstring = 60
_brief.maxother = 60
_brief.maxlist = _brief.maxtuple = _brief.maxset = _brief.maxfrozenset = MAX_ITEMS
_brief.maxdict = MAX_ITEMS
_brief.maxlevel = 3


def _num(v) -> str:
    return f"{float(v):.4g}"


def array_summary(a) -> str:
    """``dtype[shape]`` with the finite count and the finite min / max, e.g.
    ``float16[32, 256] finite 8192/8192 in [-3.1, 4.2]``; bool arrays give
    the number of True elements.  Never the elements themselves."""
    try:
        x = np.asarray(a)
    except Exception:  # an array-like (a torch tensor on a device) numpy cannot read: name it only
        return f"{type(a).__name__} of shape {tuple(getattr(a, 'shape', ()))}"
    head = f"{x.dtype}[{', '.join(str(int(s)) for s in x.shape)}]"
    if x.size == 0:
        return head + " empty"
    if x.dtype == bool:
        return head + f" {int(np.count_nonzero(x))} True"
    if x.dtype.kind in "iu":
        return head + f" in [{int(x.min())}, {int(x.max())}]"
    if x.dtype.kind not in "fc":
        try:  # bfloat16 / fp8 containers (ml_dtypes) are numeric but not of kind "f"
            x = x.astype(np.float64)
        except (TypeError, ValueError):
            return head
    if x.dtype.kind == "c":
        x = np.abs(x)
    fin = np.isfinite(x)
    n_fin = int(np.count_nonzero(fin))
    out = head + f" finite {n_fin}/{x.size}"
    if n_fin:
        f = x[fin]
        out += f" in [{_num(f.min())}, {_num(f.max())}]"
    return out


def brief(v) -> str:
    """A short text for any value: arrays summarised, long containers and
    strings cut (reprlib), floats to 4 significant digits."""
    if isinstance(v, np.ndarray) or (hasattr(v, "shape") and hasattr(v, "dtype") and not np.isscalar(v)):
        return array_summary(v)
    if isinstance(v, float | np.floating):
        return _num(v) if math.isfinite(v) else str(float(v))
    if isinstance(v, dict):
        return mapping_summary(v)
    if isinstance(v, list | tuple) and any(isinstance(x, np.ndarray) for x in v[:MAX_ITEMS]):
        shown = ", ".join(brief(x) for x in v[:2])
        return f"{len(v)} items: {shown}" + (", ..." if len(v) > 2 else "")
    return _brief.repr(v)


def mapping_summary(d: dict, limit: int = MAX_ITEMS) -> str:
    """``{key: brief(value), ...}`` over the first ``limit`` items, then the
    number left out."""
    items = list(d.items())
    body = ", ".join(f"{k}: {brief(v)}" for k, v in items[:limit])
    more = f", ... {len(items) - limit} more" if len(items) > limit else ""
    return "{" + body + more + "}"


def _clip(s: str, width: int) -> str:
    s = str(s).replace("\r", " ").replace("\n", " ")  # one line
    return s if len(s) <= width else s[:width - 3] + "..."


def _rows(facts) -> tuple[str, list]:
    title, rows = facts
    rows = [(str(k), str(v)) for k, v in rows if v is not None]
    if len(rows) > MAX_LINES - 1:
        n = len(rows) - (MAX_LINES - 2)
        rows = rows[:MAX_LINES - 2] + [("...", f"{n} more rows")]
    return str(title), rows


def facts_text(facts) -> str:
    """The title and ``label: value`` rows, at most :data:`MAX_LINES` lines
    of at most :data:`WIDTH` characters."""
    title, rows = _rows(facts)
    w = min(max((len(k) for k, _ in rows), default=0), 24)
    lines = [_clip(title, WIDTH)]
    lines += [_clip(f"  {k:<{w}}  {v}", WIDTH) for k, v in rows]
    return "\n".join(lines)


def text_table(header, rows, align=None, *, rule: bool = True) -> list[str]:
    """The lines of a plain-text table: every column as wide as its widest
    cell, columns two spaces apart, each line right-stripped; ``align`` gives
    "left" or "right" per column (default all left); ``rule``: a dashed line
    under the header.  ``header`` and ``rows`` hold strings."""
    align = ["left"] * len(header) if align is None else list(align)
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.rjust(w) if a == "right" else c.ljust(w)
                         for c, w, a in zip(cells, widths, align, strict=True)).rstrip()

    return [line(header), *(["  ".join("-" * w for w in widths)] if rule else []), *(line(r) for r in rows)]


def facts_html(facts, extra: str = "") -> str:
    """The facts as a small HTML table (every text escaped); ``extra`` is
    HTML appended after it (already escaped by the caller)."""
    title, rows = _rows(facts)
    cell = 2 * WIDTH
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(_clip(k, cell))}</th>"
                   f"<td style='text-align:left'>{html.escape(_clip(v, cell))}</td></tr>" for k, v in rows)
    return (f"<table><caption style='text-align:left'><b>{html.escape(_clip(title, cell))}</b></caption>"
            f"{body}</table>{extra}")


class Compact:
    """Mixin: ``repr()`` and ``_repr_html_`` from :meth:`_repr_facts`."""

    def _repr_facts(self) -> tuple[str, list]:  # pragma: no cover - every user defines it
        raise NotImplementedError

    def __repr__(self) -> str:
        return facts_text(self._repr_facts())

    def _repr_html_(self) -> str:
        return facts_html(self._repr_facts())
