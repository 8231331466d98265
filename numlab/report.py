"""A self-contained HTML report: the demo table, figures embedded as base64
PNG, and the fusion plans, in one file with no external resources."""

from __future__ import annotations

import base64
import html
import math

__all__ = ["COLUMNS", "format_table", "html_table", "html_report"]

# (key, header, format)
COLUMNS = (
    ("model", "model", "{}"),
    ("fmt", "S", "{}"),
    ("mode", "mode", "{}"),
    ("abs_max", "max abs", "{:.3g}"),
    ("abs_p99", "P99 abs", "{:.3g}"),
    ("rel_max", "max rel", "{:.3g}"),
    ("rel_p99", "P99 rel", "{:.3g}"),
    ("ulp_max", "max ULP", "{:.0f}"),
    ("ulp_p99", "P99 ULP", "{:.0f}"),
    ("ulp0", "0 ULP", "{:.1%}"),
    ("bitwise_eq_eager", "bits = eager", "{:.1%}"),
    ("nonfinite", "NaN/inf", "{}"),
    ("verdict", "vs eager", "{}"),
)


def _cell(v, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def format_table(rows, columns=COLUMNS) -> str:
    """A fixed-width text table of the demo rows."""
    head = [h for _, h, _ in columns]
    body = [[_cell(r.get(k), f) for k, _, f in columns] for r in rows]
    widths = [max(len(head[i]), *(len(b[i]) for b in body)) if body else len(head[i])
              for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    prev = None
    for r, b in zip(rows, body, strict=True):
        key = (r.get("model"), r.get("fmt"))
        if prev is not None and key != prev:
            lines.append("")
        prev = key
        lines.append("  ".join(c.rjust(w) if i >= 3 else c.ljust(w)
                               for i, (c, w) in enumerate(zip(b, widths, strict=True))))
    return "\n".join(lines)


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
.note{color:#555;font-size:13px}
"""


def html_report(*, title: str, intro: str, rows, figures, plans=None, notes=(), extra_html: str = "",
                specs=None) -> str:
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
