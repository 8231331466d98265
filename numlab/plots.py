"""Matplotlib figures for eager vs fused errors (object-oriented API only).

Every function draws on an ``ax`` it is given (or creates ``fig, ax =
plt.subplots()``) and returns the axes, so notebooks and the demo report
share them.  Error plots use logarithmic axes; bounds are dashed lines and the
unit roundoff ``u`` a horizontal dotted line, with labelled axes.
"""

from __future__ import annotations

import numpy as np

from .formats import FP32, get_format

__all__ = [
    "MODE_COLORS",
    "error_bars",
    "ulp_shares",
    "chain_length",
    "error_scatter",
    "source_shares",
    "figure_to_png",
]

MODE_COLORS = {
    "eager": "#1f77b4",
    "fused": "#d62728",
    "emulated_casts": "#2ca02c",
    "reference": "#7f7f7f",
}


def _ax(ax, figsize=(8, 4)):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=figsize)
    return ax


_METRIC_LABELS = {
    "rel_max": "max relative error",
    "rel_p99": "P99 relative error",
    "abs_max": "max absolute error",
    "abs_p99": "P99 absolute error",
}


def error_bars(rows, *, dtype, metric="rel_max", modes=("eager", "fused", "emulated_casts"),
               ax=None, u=None):
    """Grouped bars of ``metric`` per model for one storage format, log y.

    ``rows`` are the dicts of :func:`numlab.cli_demo.demo_rows`.  ``u`` (default
    the format's unit roundoff) is drawn as a dotted horizontal line.
    """
    ax = _ax(ax)
    fmt = get_format(dtype)
    sel = [r for r in rows if r["dtype"] == fmt.name]
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
    ax.legend(fontsize=8)
    return ax


def ulp_shares(rows, *, dtype, modes=("eager", "fused", "emulated_casts"), ax=None):
    """Stacked bars: share of output elements at 0, 1 and >= 2 ULP from the
    correctly rounded fp64 reference, per model and mode."""
    ax = _ax(ax)
    fmt = get_format(dtype)
    sel = [r for r in rows if r["dtype"] == fmt.name and r["mode"] in modes]
    labels = [f"{r['model']}\n{r['mode'].replace('emulated_casts', 'emul.')}" for r in sel]
    x = np.arange(len(sel))
    bottom = np.zeros(len(sel))
    for key, color, lab in (("ulp0", "#2ca02c", "0 ULP"), ("ulp1", "#ffbf00", "1 ULP"),
                            ("ulp_ge2", "#d62728", ">= 2 ULP")):
        v = np.array([r[key] for r in sel], dtype=float)
        ax.bar(x, v, bottom=bottom, color=color, label=lab)
        bottom += np.nan_to_num(v)
    ax.set_xticks(x, labels, rotation=90, fontsize=6)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of output elements")
    ax.set_title(f"{fmt.name}: distance to the correctly rounded result")
    ax.legend(fontsize=8, loc="lower right")
    return ax


def chain_length(ns, errors: dict, *, dtype, ax=None, bounds=True):
    """Max relative error against chain length ``n`` on log-log axes.

    ``errors`` maps a mode to a sequence of errors (one per ``n``).  With
    ``bounds`` the a-priori bounds are dashed: eager (every op rounds to S)
    ``gamma_n(u_S) = n u_S / (1 - n u_S)``, fused (fp32 inside, one rounding
    to S) ``u_S + gamma_n(u_fp32)(1 + u_S)`` (Higham, ASNA 2nd ed., Lemma 3.1);
    ``u_S`` is a dotted horizontal line.
    """
    ax = _ax(ax)
    fmt = get_format(dtype)
    ns = np.asarray(ns, dtype=float)
    styles = {"eager": ("o-", 7), "fused": ("s-", 6), "emulated_casts": ("x:", 9)}
    for mode, errs in errors.items():
        e = np.asarray(errs, dtype=float)
        st, ms = styles.get(mode, ("o-", 6))
        ax.plot(ns, np.where(e > 0, e, np.nan), st, ms=ms, color=MODE_COLORS.get(mode),
                label=f"{mode} (measured)")
    if bounds:
        from .kernels import gamma

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
    ax.legend(fontsize=8)
    return ax


def error_scatter(ref, eager, fused, *, dtype, ax=None, max_points=4000):
    """Per-element |error| of eager (x) against fused (y), log-log, with the
    diagonal: points below it are elements where fused is more accurate."""
    ax = _ax(ax, figsize=(4.5, 4.5))
    fmt = get_format(dtype)
    r = np.asarray(ref, dtype=np.float64).ravel()
    e = np.abs(np.asarray(eager, dtype=np.float64).ravel() - r)
    f = np.abs(np.asarray(fused, dtype=np.float64).ravel() - r)
    if r.size > max_points:  # deterministic thinning
        idx = np.linspace(0, r.size - 1, max_points).astype(np.int64)
        e, f = e[idx], f[idx]
    ok = np.isfinite(e) & np.isfinite(f)
    floor = fmt.smallest_subnormal
    ax.scatter(np.maximum(e[ok], floor), np.maximum(f[ok], floor), s=4, alpha=0.5)
    lo = floor
    hi = max(float(np.max(e[ok], initial=floor)), float(np.max(f[ok], initial=floor)), lo * 10)
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="equal error")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("|eager - fp64|")
    ax.set_ylabel("|fused - fp64|")
    ax.set_title("per element (below the line: fused closer)")
    ax.legend(fontsize=8)
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
    """Horizontal grouped bars: for each case (row of
    :func:`numlab.cli_demo.source_rows`) the share of output elements whose
    bits differ from eager, per column (fused, only one source left,
    decomposition, all aligned).  Linear axis in percent (shares, not errors)."""
    ax = _ax(ax, figsize=(9, 0.55 * len(srows) + 1.5))
    labels = [f"{r['case']} {r['dtype']}" for r in srows]
    y = np.arange(len(srows))
    h = 0.85 / max(len(columns), 1)
    for i, c in enumerate(columns):
        v = np.array([100 * r[c] for r in srows], dtype=float)
        ax.barh(y + (i - (len(columns) - 1) / 2) * h, v, h, label=c, color=SOURCE_COLORS.get(c))
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("output elements whose bits differ from eager (%)")
    ax.set_title("where the bits part: one source left at the code generator's choice")
    ax.legend(fontsize=7, loc="lower right")
    return ax


def figure_to_png(fig, dpi: int = 110) -> bytes:
    """PNG bytes of a figure (for embedding in the HTML report)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()
