"""Figures of the autofusion precision test plan (``numlab check plan``):
moved out of numlab.claims so that claims draws nothing; to be folded into
numlab.plots.

:func:`plan_figures` writes ``plan_c1.png``, ``plan_c2.png``,
``plan_c3.png`` and ``plan_chains.png``.  It uses ``matplotlib.pyplot``
with the backend the process already has (no ``matplotlib.use`` here: a
headless process selects Agg by itself, or the caller chooses)."""

from __future__ import annotations

import os

import numpy as np

__all__ = ["plan_figures"]


def plan_figures(res: dict, out: str, trials: int) -> None:
    """The four plan figures of ``res`` (:func:`numlab.claims.run_plan`'s result) into ``out``."""
    import matplotlib.pyplot as plt  # optional heavy dependency

    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = ["0 ulp", "1 ulp", ">=2 ulp"]
    xs = np.arange(3)
    for i, (how, r) in enumerate(res["c1"].items()):
        ax.bar(xs + 0.4 * i, [r["ulp0"], r["ulp1"], r["ulp_ge2"]], 0.4, label=how)
    ax.set_xticks(xs + 0.2, labels)
    ax.set_ylabel("share of elements")
    ax.set_title("C1: fp16 x*0.7, muls vs broadcast")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_c1.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    T = list(res["c2"])
    ax.loglog(T, [res["c2"][t]["fp32_err_max"] for t in T], "o-", label="fp32 accumulator error (max)")
    ax.loglog(T, [res["c2"][t]["out_err_max"] for t in T], "s-", label="after rounding to fp16 (max)")
    ax.loglog(T, [res["c2"][t]["bound_fp32_max"] for t in T], "k--", label="a-priori bound (fp32 acc)")
    ax.axhline(2.0**-11, color="grey", lw=0.8, label="u (fp16)")
    ax.set_xlabel("tile T (elements)")
    ax.set_ylabel("|sum error| vs fp64")
    ax.set_title("C2: fp16 [1,16384] sum, blocked tiles")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_c2.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, (s, r) in enumerate(res["c3"].items()):
        ax.bar(xs + 0.4 * i, [r["ulp0"], r["ulp1"], r["ulp_ge2"]], 0.4, label=f"{s} Newton steps")
    ax.set_xticks(xs + 0.2, labels)
    ax.set_ylabel("share of elements")
    ax.set_title("C3: fp16 rsqrt on U(0.01, 100)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_c3.png"), dpi=100)
    plt.close(fig)

    names = list(res["chains"])
    specs = list(res["fusions"])
    fig, axes = plt.subplots(1, len(specs), figsize=(3.2 * len(specs) + 1, 3.8), sharey=True, squeeze=False)
    xs = np.arange(len(names))
    for j, (ax, spec) in enumerate(zip(axes[0], specs, strict=True)):
        for i, (key, lab) in enumerate([("eager_p99", "eager P99"), ("fused_p99", "fused P99"),
                                        ("eager_max", "eager max"), ("fused_max", "fused max")]):
            ax.bar(xs + 0.2 * i, [max(res["chains"][n][spec][key], 1e-12) for n in names], 0.2, label=lab)
        ax.set_yscale("log")
        ax.set_xticks(xs + 0.3, names, fontsize=6, rotation=30, ha="right")
        ax.axhline(2.0**-11, color="grey", lw=0.8, label="u (fp16)")
        verdicts = "".join(res["chains"][n][spec]["verdict"][0] for n in names)  # P, F or U
        ax.set_title(f"F{j + 1} {spec}\nverdicts {verdicts}", fontsize=7)
        if j == 0:
            ax.set_ylabel("|error| vs fp64 reference")
            ax.legend(fontsize=6)
    fig.suptitle(f"chains over {trials} inputs: fused vs eager per fusion configuration", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plan_chains.png"), dpi=100)
    plt.close(fig)
