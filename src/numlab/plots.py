"""Matplotlib figures: every figure numlab draws is drawn here.

Every function draws on an ``ax`` it is given and returns the axes, so
notebooks, the demo report and the claims report share them.  Without an
``ax`` a new :class:`matplotlib.figure.Figure` is made (:func:`figure`): it
needs no pyplot and no backend, so nothing here calls ``matplotlib.use``;
show it in a notebook with ``ax.figure`` or save it with
``ax.figure.savefig(...)`` / :func:`figure_to_png`.  Error plots use
logarithmic axes; bounds are dashed lines and the unit roundoff ``u`` a
horizontal dotted line, with labelled axes.

Format arguments are ``fmt`` (a :class:`numlab.formats.Format` or its name).

Legibility rules every figure here follows (and notebooks get through
:func:`style`, :func:`legend_outside` and :func:`exact_floor`): no font under
9 pt, no legend over data (legends sit outside the axes), markers at least
a few pixels wide, and an error of exactly zero is drawn in a marked "exact"
band at the bottom of a log axis, never at an unexplained floor such as 1e-12.

Tables for notebooks (:func:`table`, :func:`plan_table`) are HTML
(``_repr_html_``) so the output area never wraps them mid-word; their
``str`` is a plain-text version.
"""

from __future__ import annotations

import html
import io
import os
import textwrap

import matplotlib
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from ._repr import text_table
from .formats import FP16, FP32, get_format
from .kernels import gamma
from .kernels.orders.tree import Tree
from .races import GROUPS_ORDER, SimResult, Stage, SyncAll

__all__ = [
    "MODE_COLORS",
    "figure",
    "error_bars",
    "ulp_shares",
    "chain_length",
    "error_scatter",
    "source_shares",
    "draw_timeline",
    "plan_figures",
    "save_figures",
    "figure_to_png",
    "draw_tree",
    "STYLE",
    "style",
    "legend_outside",
    "exact_floor",
    "mark_infinite",
    "ulp_hist",
    "Table",
    "table",
    "plan_table",
    "wrap",
]

MODE_COLORS = {
    "eager": "#1f77b4",
    "fused": "#d62728",
    "emulated_casts": "#2ca02c",
    "reference": "#7f7f7f",
}


# Font sizes in points; nothing numlab draws goes below 9 pt.
STYLE = {
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "figure.titlesize": 11,
    "lines.markersize": 5,
}


def style() -> dict:
    """Apply :data:`STYLE` to matplotlib's global ``rcParams`` (pyplot figures in
    a notebook pick it up); returns the previous values, so
    ``matplotlib.rcParams.update(old)`` undoes it."""
    old = {k: matplotlib.rcParams[k] for k in STYLE}
    matplotlib.rcParams.update(STYLE)
    return old


def legend_outside(ax, where: str = "right", ncols: int = 1, **kwargs):
    """A legend outside the axes, so it never covers data: ``where="right"``
    (beside the axes, top-aligned) or ``"below"`` (under the x label, in
    ``ncols`` columns).  ``tight_layout`` and ``bbox_inches="tight"`` make
    room for it.  Returns the legend (None when nothing is labelled)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    if where == "right":
        place = dict(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    elif where == "below":
        # clear of the tick labels and the x label: 3.6 font sizes (about 32 pt) below the axes
        place = dict(loc="upper center", bbox_to_anchor=(0.5, 0.0), borderaxespad=3.6)
    else:
        raise ValueError(f"where={where!r}: expected 'right' or 'below'")
    place.update(kwargs)
    return ax.legend(handles, labels, ncols=ncols, **place)


def exact_floor(ax, *series, label: str = "exact (error 0)"):
    """Reserve a marked band at the bottom of a log y axis for values that are
    exactly zero, and return the height to draw them at.

    The band sits one decade below the smallest positive value of ``series``
    (each an array of errors), is shaded grey and labelled ``label``; plot
    ``np.where(v > 0, v, floor)`` so an exact result is visibly "exact", not
    a tiny error.  The band is part of the data limits (autoscaling keeps it
    in view)."""
    pos = [np.asarray(v, dtype=float).ravel() for v in series]
    pos = np.concatenate(pos) if pos else np.array([])
    pos = pos[np.isfinite(pos) & (pos > 0)]
    lo = float(pos.min()) if pos.size else 1e-8
    floor = 10.0 ** (np.floor(np.log10(lo)) - 1)
    ax.set_yscale("log")
    ax.axhspan(floor / 2.5, floor * 2.5, color="#e6e6e6", zorder=0)
    ax.text(0.005, floor * 2.4, label, transform=blended_transform_factory(ax.transAxes, ax.transData),
            va="top", ha="left", fontsize=9, color="#555555")
    return floor


def mark_infinite(ax, xs, values, *, color="k", label: str = "bound = inf"):
    """Draw the infinite entries of ``values`` (one per ``xs``) as ``^`` markers
    at the top edge of ``ax``, each with the text "inf", and return how many
    there are.  An infinite bound is never drawn as a finite line (clipped at 1,
    say): plot the finite entries (``np.where(np.isinf(v), np.nan, v)``) and mark
    the rest with this.  ``label`` goes into the legend once."""
    xs = np.asarray(xs, dtype=float).ravel()
    v = np.asarray(values, dtype=float).ravel()
    if xs.shape != v.shape:
        raise ValueError(f"mark_infinite: xs has {xs.size} entries and values {v.size}; they must match")
    at = xs[np.isinf(v)]
    if at.size:
        top = blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(at, np.full(at.size, 0.97), "^", ms=8, color=color, transform=top, clip_on=False, label=label)
        for x in at:
            ax.text(x, 0.92, "inf", transform=top, ha="center", va="top", fontsize=9, color=color)
    return int(at.size)


def ulp_hist(ax, d, title: str, *, xlabel: str = "ULP difference (choice B - choice A)"):
    """Histogram of signed ULP differences ``d`` (integers) with one bin per
    integer.  Long tails (rows that nearly cancel have tiny ulps) are clipped
    into the two edge bins, and the title says how many were, so the bulk stays
    readable.  Returns the number of clipped values."""
    d = np.asarray(d).ravel()
    lim = int(max(np.percentile(np.abs(d), 99), 1)) if d.size else 1
    lim = min(lim, 30) if np.abs(d).max(initial=0) > 60 else max(lim, int(np.abs(d).max(initial=1)))
    n_out = int(np.sum(np.abs(d) > lim))
    ax.hist(np.clip(d, -lim, lim), bins=np.arange(-lim - 0.5, lim + 1.5), color="tab:blue", edgecolor="k")
    if n_out:
        title += f"\n({n_out} beyond ±{lim} ulp, counted in the edge bins)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.set_title(title)
    return n_out


class Table:
    """A small table for notebooks: HTML in Jupyter (cells wrap at spaces,
    never mid-word), plain text from ``str``.  ``rows`` are sequences of
    already formatted cells; ``legend`` is a line of text shown under it."""

    def __init__(self, header, rows, *, caption: str | None = None, legend: str | None = None,
                 align=None):
        self.header = [str(h) for h in header]
        self.rows = [[str(c) for c in r] for r in rows]
        for r in self.rows:
            if len(r) != len(self.header):
                raise ValueError(f"a row has {len(r)} cells, the header {len(self.header)}: {r}")
        self.caption, self.legend = caption, legend
        self.align = list(align) if align is not None else ["left"] * len(self.header)

    def _repr_html_(self) -> str:
        th = "".join(f'<th style="text-align:{a}">{html.escape(h)}</th>'
                     for h, a in zip(self.header, self.align, strict=True))
        body = "".join(
            "<tr>" + "".join(f'<td style="text-align:{a}">{html.escape(c)}</td>'
                             for c, a in zip(r, self.align, strict=True)) + "</tr>"
            for r in self.rows)
        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        leg = f'<p style="font-size:90%">{html.escape(self.legend)}</p>' if self.legend else ""
        return (f'<table style="border-collapse:collapse">{cap}<thead><tr>{th}</tr></thead>'
                f"<tbody>{body}</tbody></table>{leg}")

    def __str__(self) -> str:
        out = [self.caption] if self.caption else []
        out += text_table(self.header, self.rows, self.align)
        if self.legend:
            out.append(wrap(self.legend))
        return "\n".join(out)

    def __repr__(self) -> str:
        return str(self)


def _cell_text(v, fmt) -> str:
    if v is None:
        return "-"
    if callable(fmt):
        return fmt(v)
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def table(rows, columns=None, *, caption: str | None = None, legend: str | None = None) -> Table:
    """A :class:`Table` of ``rows`` (dicts).  ``columns`` is a sequence of
    keys, or of ``(key, header, format)`` triples (format a ``str.format``
    pattern such as ``"{:.3g}"`` or a callable); default: every key of the
    first row.  Numeric columns are right-aligned."""
    rows = list(rows)
    if columns is None:
        columns = list(rows[0]) if rows else []
    cols = [(c, c, "{}") if isinstance(c, str) else tuple(c) for c in columns]
    body = [[_cell_text(r.get(k), f) for k, _, f in cols] for r in rows]
    numeric = [bool(rows) and all(isinstance(r.get(k), (int, float, np.number)) and not isinstance(r.get(k), bool)
                                  for r in rows if r.get(k) is not None)
               and any(r.get(k) is not None for r in rows) for k, _, _ in cols]
    return Table([h for _, h, _ in cols], body, caption=caption, legend=legend,
                 align=["right" if n else "left" for n in numeric])


def plan_table(plan) -> Table:
    """A fusion plan (:class:`numlab.fusion.Plan`) as a :class:`Table`: one row
    per block (kernel kind, fused operator kinds, tile, live buffers, members,
    what it reads and writes); the caption is the plan's header."""
    n = len(plan.graph.nodes)
    cap = (f"{len(plan.blocks)} block(s), {plan.n_fused} fused, for {n} node(s); "
           f"fusion {plan.options.spec}")
    rows = [[b.name, "codegen" if b.codegen else "library", b.kind, str(b.tile), str(b.live_buffers),
             ", ".join(b.members), ", ".join(b.inputs) or "-", ", ".join(b.outputs) or "-"]
            for b in plan.blocks]
    legend = ("tile = elements per on-chip buffer; live = buffers held at once; codegen = a generated "
              "kernel, library = a hand-written one")
    if plan.decomposed:
        legend = "decomposed composites: " + ", ".join(sorted(set(plan.decomposed.values()))) + ". " + legend
    return Table(["block", "kernel", "kinds", "tile", "live", "members", "reads", "writes"], rows,
                 caption=cap, legend=legend,
                 align=["left", "left", "left", "right", "right", "left", "left", "left"])


def wrap(text: str, width: int = 100) -> str:
    """``text`` with every line longer than ``width`` wrapped at spaces, the
    continuation indented under the line's own indent plus two spaces."""
    out = []
    for line in str(text).splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.extend(textwrap.wrap(line.strip(), width=width, initial_indent=indent,
                                 subsequent_indent=indent + "  ", break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)


def figure(figsize=(8, 4), **kwargs) -> Figure:
    """A new :class:`matplotlib.figure.Figure` (no pyplot, no backend needed);
    ``fig.subplots(...)`` gives its axes."""
    return Figure(figsize=figsize, **kwargs)


def _ax(ax, figsize=(8, 4)):
    return figure(figsize).subplots() if ax is None else ax


def _fmt(fmt):
    """The format given as ``fmt=`` (required)."""
    if fmt is None:
        raise TypeError("missing the format argument fmt= (e.g. fmt='fp16')")
    return get_format(fmt, "fmt")


_METRIC_LABELS = {
    "rel_max": "max relative error",
    "rel_p99": "P99 relative error",
    "abs_max": "max absolute error",
    "abs_p99": "P99 absolute error",
}


def error_bars(rows, *, fmt=None, metric="rel_max", modes=("eager", "fused", "emulated_casts"),
               ax=None, u=None):
    """Grouped bars of ``metric`` per model for one storage format, log y.

    ``rows`` are the demo's per-(model, format, mode) metric dicts
    (keys ``model``, ``fmt``, ``mode`` and the metric names).  ``u`` (default
    the format's unit roundoff) is drawn as a dotted horizontal line.
    """
    ax = _ax(ax)
    fmt = _fmt(fmt)
    sel = [r for r in rows if r["fmt"] == fmt.name]
    models = list(dict.fromkeys(r["model"] for r in sel))
    width = 0.8 / max(len(modes), 1)
    x = np.arange(len(models))
    for i, mode in enumerate(modes):
        vals = []
        for m in models:
            hit = [r[metric] for r in sel if r["model"] == m and r["mode"] == mode]
            v = hit[0] if hit else np.nan
            vals.append(v if v > 0 else np.nan)  # 0 error has no place on a log axis
        ax.bar(x + (i - (len(modes) - 1) / 2) * width, vals, width, label=mode,
               color=MODE_COLORS.get(mode))
    uu = fmt.u if u is None else u
    ax.axhline(uu, color="k", ls=":", lw=1, label=f"u({fmt.name}) = {uu:.2g}")
    ax.set_yscale("log")
    ax.set_xticks(x, models, rotation=30, ha="right")
    what = _METRIC_LABELS.get(metric, metric.replace("_", " "))
    ax.set_ylabel(f"{what} vs fp64 (log scale)")
    ax.set_title(f"{fmt.name}: {what} of each model's outputs against the fp64 reference")
    legend_outside(ax)
    return ax


def ulp_shares(rows, *, fmt=None, modes=("eager", "fused", "emulated_casts"), ax=None):
    """Stacked bars: share of output elements at 0, 1 and >= 2 ULP from the
    correctly rounded fp64 reference, per model and mode."""
    ax = _ax(ax)
    fmt = _fmt(fmt)
    sel = [r for r in rows if r["fmt"] == fmt.name and r["mode"] in modes]
    models = list(dict.fromkeys(r["model"] for r in sel))
    # one group of bars per model (a gap between groups), each bar marked by its mode's letter
    letter = {"eager": "e", "fused": "f", "emulated_casts": "c", "reference": "r"}
    x = np.array([models.index(r["model"]) * (len(modes) + 1) + list(modes).index(r["mode"]) for r in sel],
                 dtype=float)
    bottom = np.zeros(len(sel))
    for key, color, lab in (("ulp0", "#2ca02c", "0 ULP"), ("ulp1", "#ffbf00", "1 ULP"),
                            ("ulp_ge2", "#d62728", ">= 2 ULP")):
        v = np.array([r[key] for r in sel], dtype=float)
        ax.bar(x, v, bottom=bottom, color=color, label=lab)
        bottom += np.nan_to_num(v)
    ax.set_xticks(x, [letter.get(r["mode"], r["mode"][:1]) for r in sel], fontsize=9)
    centers = [models.index(m) * (len(modes) + 1) + (len(modes) - 1) / 2 for m in models]
    sec = ax.secondary_xaxis("bottom")
    sec.set_xticks(centers, models, rotation=30, ha="right", fontsize=9)
    sec.tick_params(length=0, pad=16)
    ax.plot([], [], " ", label="e eager, f fused,\nc emulated casts")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of output elements")
    ax.set_title(f"{fmt.name}: distance to the correctly rounded result")
    legend_outside(ax)
    return ax


def chain_length(ns, errors: dict, *, fmt=None, ax=None, bounds=True):
    """Max relative error against chain length ``n`` on log-log axes.

    ``errors`` maps a mode to a sequence of errors (one per ``n``).  With
    ``bounds`` the a-priori bounds are dashed: eager (every op rounds to S)
    ``gamma_n(u_S) = n u_S / (1 - n u_S)``, fused (fp32 inside, one rounding
    to S) ``u_S + gamma_n(u_fp32)(1 + u_S)`` (Higham, ASNA 2nd ed., Lemma 3.1);
    ``u_S`` is a dotted horizontal line.
    """
    ax = _ax(ax)
    fmt = _fmt(fmt)
    ns = np.asarray(ns, dtype=float)
    styles = {"eager": ("o-", 7), "fused": ("s-", 6), "emulated_casts": ("x:", 9)}
    for mode, errs in errors.items():
        e = np.asarray(errs, dtype=float)
        st, ms = styles.get(mode, ("o-", 6))
        ax.plot(ns, np.where(e > 0, e, np.nan), st, ms=ms, color=MODE_COLORS.get(mode),
                label=f"{mode} (measured)")
    if bounds:
        us, u32 = fmt.u, FP32.u
        g_s = np.array([gamma(n, us) for n in ns])
        g_32 = np.array([gamma(n, u32) for n in ns])
        ax.plot(ns, g_s, "--", color=MODE_COLORS["eager"], label=r"eager bound $\gamma_n(u_S)$")
        ax.plot(ns, us + g_32 * (1 + us), "--", color=MODE_COLORS["fused"],
                label=r"fused bound $u_S + \gamma_n(u_{32})(1+u_S)$")
        ax.axhline(us, color="k", ls=":", lw=1, label=f"u({fmt.name})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chain length n (operations)")
    ax.set_ylabel("max relative error vs fp64")
    ax.set_title(f"{fmt.name}: error against chain length")
    legend_outside(ax, "below", ncols=2)
    return ax


def error_scatter(ref, eager, fused, *, fmt=None, ax=None, max_points=4000):
    """Per-element |error| of eager (x) against fused (y), log-log, with the
    diagonal: points below it are elements where fused is more accurate.
    Elements with no error sit in the grey "exact" band of their axis."""
    ax = _ax(ax, figsize=(4.5, 4.5))
    fmt = _fmt(fmt)
    r = np.asarray(ref, dtype=np.float64).ravel()
    e = np.abs(np.asarray(eager, dtype=np.float64).ravel() - r)
    f = np.abs(np.asarray(fused, dtype=np.float64).ravel() - r)
    if r.size > max_points:  # deterministic thinning
        idx = np.linspace(0, r.size - 1, max_points).astype(np.int64)
        e, f = e[idx], f[idx]
    ok = np.isfinite(e) & np.isfinite(f)
    e, f = e[ok], f[ok]
    # an exact element (error 0) sits in the grey "exact" band of its axis, not at a floor
    floor = exact_floor(ax, e, f, label="exact (0)")
    ax.set_xscale("log")
    ax.axvspan(floor / 2.5, floor * 2.5, color="#e6e6e6", zorder=0)
    ax.scatter(np.where(e > 0, e, floor), np.where(f > 0, f, floor), s=4, alpha=0.5)
    lo = floor
    hi = max(float(np.max(e, initial=floor)), float(np.max(f, initial=floor)), lo * 10)
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="equal error")
    ax.set_xlabel("|eager - fp64|")
    ax.set_ylabel("|fused - fp64|")
    ax.set_title("per element (below the line: fused closer)")
    legend_outside(ax, "below")
    return ax


SOURCE_COLORS = {
    "fused": "#d62728",
    "only promotion": "#9467bd",
    "only instruction": "#8c564b",
    "only tiling": "#17becf",
    "only algorithm": "#ff7f0e",
    "decomposition": "#7f7f7f",
    "all aligned": "#2ca02c",
}


def source_shares(srows, columns, *, ax=None):
    """Horizontal grouped bars: for each case (a row of the demo's source
    table, keys ``case``, ``fmt`` and the columns) the share of output
    elements whose bits differ from eager, per column (fused, only one source
    left, decomposition, all aligned).  Linear axis in percent (shares, not errors)."""
    ax = _ax(ax, figsize=(9, 0.55 * len(srows) + 1.5))
    labels = [f"{r['case']} {r['fmt']}" for r in srows]
    y = np.arange(len(srows))
    h = 0.85 / max(len(columns), 1)
    for i, c in enumerate(columns):
        v = np.array([100 * r[c] for r in srows], dtype=float)
        ax.barh(y + (i - (len(columns) - 1) / 2) * h, v, h, label=c, color=SOURCE_COLORS.get(c))
    ax.set_yticks(y, labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("output elements whose bits differ from eager (%)")
    ax.set_title("where the bits part: one source left at the code generator's choice")
    legend_outside(ax)
    return ax


def draw_timeline(ax, result: SimResult, *, mark_stale: bool = True):
    """Gantt chart of one simulated multi-core run (:func:`numlab.races.simulate`)
    on ``ax`` (None: a new figure): one row per core, one bar per (stage,
    core); SyncAll barriers as vertical lines; each stale read marked with a
    red cross at its read time and an arrow to when the promised write
    landed.  Returns ``ax``."""
    ax = _ax(ax, figsize=(8, 4))
    k = result.kernel
    sched = result.schedule
    rows = []
    for g in (*[g for g in GROUPS_ORDER if g in k.cores], *[g for g in k.cores if g not in GROUPS_ORDER]):
        rows += [(g, c) for c in range(int(k.cores[g]))]
    ypos = {r: i for i, r in enumerate(rows)}
    names = [s.name for s in k.stages]
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for s in k.stages:
        st, en = sched.start[s.name], sched.end[s.name]
        for c in range(len(st)):
            ax.barh(ypos[(s.group, c)], en[c] - st[c], left=st[c], color=colors[s.name], edgecolor="k",
                    linewidth=0.3, height=0.8, label=s.name if c == 0 else None)
    # barriers: a SyncAll releases at the start of the next stage's earliest core
    order = list(k.items)
    for i, it in enumerate(order):
        if isinstance(it, SyncAll):
            before = [s.name for s in order[:i] if isinstance(s, Stage)]
            if before:
                t = max(float(sched.end[n].max()) for n in before)
                ax.axvline(t, color="k", ls="--", lw=1)
                # name at the top of the line, inside the axes (clear of the time tick labels)
                ax.text(t, -0.45, it.name, rotation=90, va="top", ha="right", fontsize=9,
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    if mark_stale:
        for j, r in enumerate(result.stale_reads):
            y = ypos[(r.group, r.core)]
            ax.plot([r.time], [y], "rx", ms=10, mew=2, label="stale read" if j == 0 else None)
            if np.isfinite(r.late_by):
                ax.annotate("", xy=(r.time + r.late_by, y), xytext=(r.time, y),
                            arrowprops=dict(arrowstyle="->", color="r"))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{g}[{c}]" for g, c in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (arbitrary units)")
    ax.set_ylabel("core")
    legend_outside(ax)
    return ax


def _ulp_share_bars(ax, groups: dict, label) -> None:
    """Bars of the 0 / 1 / >= 2 ulp shares, one colour per group."""
    xs = np.arange(3)
    for i, (key, r) in enumerate(groups.items()):
        ax.bar(xs + 0.4 * i, [r["ulp0"], r["ulp1"], r["ulp_ge2"]], 0.4, label=label(key))
    ax.set_xticks(xs + 0.2, ["0 ulp", "1 ulp", ">=2 ulp"])
    ax.set_ylabel("share of elements")
    legend_outside(ax)


def plan_figures(result: dict) -> dict:
    """The figures of a claims check plan (the dict ``numlab.claims`` returns
    for the plan: keys ``c1``, ``c2``, ``c3``, ``chains``, ``fusions``,
    ``trials``), as ``{file name: Figure}``: ``plan_c1.png`` (fp16 ``x*0.7``,
    separate muls vs broadcast: ulp shares), ``plan_c2.png`` (blocked fp16
    sum: error against tile size, log-log, with the a-priori bound),
    ``plan_c3.png`` (fp16 rsqrt: ulp shares per Newton step count) and
    ``plan_chains.png`` (chains: eager and fused P99/max error per fusion
    configuration).  Save them with :func:`save_figures`."""
    u16 = FP16.u
    figs = {}
    fig = figure((6, 3.5))
    ax = fig.subplots()
    _ulp_share_bars(ax, result["c1"], str)
    ax.set_title("C1: fp16 x*0.7, muls vs broadcast")
    figs["plan_c1.png"] = fig

    fig = figure((6, 3.5))
    ax = fig.subplots()
    c2 = result["c2"]
    tiles = list(c2)
    ax.loglog(tiles, [c2[t]["fp32_err_max"] for t in tiles], "o-", label="fp32 accumulator error (max)")
    ax.loglog(tiles, [c2[t]["out_err_max"] for t in tiles], "s-", label="after rounding to fp16 (max)")
    ax.loglog(tiles, [c2[t]["bound_fp32_max"] for t in tiles], "k--", label="a-priori bound (fp32 acc)")
    ax.axhline(u16, color="grey", lw=0.8, label="u (fp16)")
    ax.set_xlabel("tile T (elements)")
    ax.set_ylabel("|sum error| vs fp64")
    ax.set_title("C2: fp16 [1,16384] sum, blocked tiles")
    legend_outside(ax)
    figs["plan_c2.png"] = fig

    fig = figure((6, 3.5))
    ax = fig.subplots()
    _ulp_share_bars(ax, result["c3"], lambda s: f"{s} Newton steps")
    ax.set_title("C3: fp16 rsqrt on U(0.01, 100)")
    figs["plan_c3.png"] = fig

    chains = result["chains"]
    names, specs = list(chains), list(result["fusions"])
    fig = figure((3.4 * len(specs) + 2.5, 4.6))
    axes = fig.subplots(1, len(specs), sharey=True, squeeze=False)
    xs = np.arange(len(names))
    keys = [("eager_p99", "eager P99"), ("fused_p99", "fused P99"), ("eager_max", "eager max"),
            ("fused_max", "fused max")]
    vals = {(n, s, k): chains[n][s][k] for n in names for s in specs for k, _ in keys}
    for j, (ax, spec) in enumerate(zip(axes[0], specs, strict=True)):
        floor = exact_floor(ax, list(vals.values()))  # an error of 0 drawn in the "exact" band
        for i, (key, lab) in enumerate(keys):
            v = np.array([vals[n, spec, key] for n in names], dtype=float)
            ax.bar(xs + 0.2 * i, np.where(v > 0, v, floor), 0.2, label=lab)
        ax.set_xticks(xs + 0.3, names, fontsize=9, rotation=30, ha="right")
        ax.axhline(u16, color="grey", lw=0.8, label="u (fp16)")
        verdicts = "".join(chains[n][spec]["verdict"][0] for n in names)  # P(ASS), F(AIL), U(NDECIDED)
        ax.set_title(f"F{j + 1} {spec}\nverdicts {verdicts}", fontsize=9)
        if j == 0:
            ax.set_ylabel("|error| vs fp64 reference")
    legend_outside(axes[0][-1])
    fig.suptitle(f"chains over {result['trials']} inputs: fused vs eager per fusion configuration")
    figs["plan_chains.png"] = fig
    for f in figs.values():
        f.tight_layout()
    return figs


def save_figures(figs: dict, out: str, dpi: int = 100) -> list[str]:
    """Write ``{file name: Figure}`` into directory ``out`` (created if
    needed); returns the paths written."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for name, fig in figs.items():
        path = os.path.join(out, name)
        fig.savefig(path, dpi=dpi)
        paths.append(path)
    return paths


def figure_to_png(fig, dpi: int = 110) -> bytes:
    """PNG bytes of a figure (for embedding in the HTML report)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def draw_tree(tree: Tree, *, ax=None, title: str | None = None, leaf_labels: bool | None = None):
    """Draw a summation tree (:class:`numlab.kernels.orders.tree.Tree`, e.g. a revealed
    order ``reveal_order(...).order``): leaves on the x axis in element order, each
    addition at the height of its longest chain of roundings above the leaves, x at
    the mean of its children.  Binary additions are dots (green diamonds when
    computed in fp64, ``tree.wide``); fused k-term adders (exact sum, one rounding)
    are red squares.  Returns the axes."""
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be a numlab.kernels.orders.tree.Tree, got {type(tree).__name__}")
    n = tree.n
    ax = _ax(ax, (min(16, 4 + n / 16), 4))
    h = tree.heights()
    x = np.zeros(h.size)
    x[:n] = np.arange(n)
    segs = []
    for k, ch in enumerate(tree.nodes):
        v = n + k
        x[v] = float(np.mean(x[list(ch)]))
        segs.extend([[(x[v], h[v]), (x[c], h[c])] for c in ch])
    ax.add_collection(LineCollection(segs, colors="#555555", linewidths=0.6))
    ids = np.arange(n, h.size)
    fused = np.array([len(ch) > 2 for ch in tree.nodes], dtype=bool)
    ax.scatter(x[:n], h[:n], s=8, color=MODE_COLORS["eager"], zorder=3, label="element")
    wide = np.isin(ids, np.array(tree.wide, dtype=np.int64))
    plain = ~fused & ~wide
    ax.scatter(x[ids[plain]], h[ids[plain]], s=10, color="#333333", zorder=3, label="rounded addition")
    if wide.any():
        ax.scatter(x[ids[wide]], h[ids[wide]], s=16, marker="D", color=MODE_COLORS["emulated_casts"],
                   zorder=3, label="fp64 addition")
    if fused.any():
        ax.scatter(x[ids[fused]], h[ids[fused]], s=30, marker="s", color=MODE_COLORS["fused"], zorder=4,
                   label="fused k-term adder")
    if leaf_labels if leaf_labels is not None else n <= 32:
        for i in range(n):
            ax.annotate(str(i), (x[i], 0), textcoords="offset points", xytext=(0, -10), ha="center",
                        fontsize=9)
    ax.set_xlim(-1, n)
    ax.set_ylim(-1, max(1, int(h.max())) + 1)
    ax.set_xlabel("element index")
    ax.set_ylabel("additions above the elements (height)")
    ax.set_title(title or tree.summary(80), fontsize=9)
    legend_outside(ax)
    return ax
