"""``numlab mma sweep``: what a matrix unit does to a GEMM, with numbers.

Three tables (and, with ``--out``, the figure ``mma_k_sweep.png`` plus the
tables as ``results.json``; an --out that already holds results gets a fresh
``run-NNN`` folder unless ``--force``):

1. **The DeepSeek-V3 observation** (technical report, section 3.3.2): FP8
   e4m3 GEMM accumulated inside a unit of limited precision (default the
   ``H100/fp8_e4m3/fp32`` preset: block results keep 14 significand bits) vs
   K up to 16384, without and with promotion of the partial sums to an fp32
   accumulator every ``N_C = 128`` products; errors against the exact
   product (:func:`numlab.kernels.mma.lab.k_sweep`), for two input kinds:
   ``uniform`` in [0, 1) (no cancellation: truncation errors add up) and
   ``normal``.
2. **Across GPU presets**: the same e4m3 matrices (K = ``--preset-k``) on
   every preset that takes e4m3 (:func:`numlab.kernels.mma.lab.preset_errors`).
3. **Which "fp32 inside" claims survive** when matmuls run on the unit:
   the built-in claims (:data:`numlab.claims.CLAIMS`) evaluated on a zoo
   model whose eager library matmul (``handwritten:mma=UNIT``) and fused
   block matmul (``codegen:mma=UNIT`` with matmul-epilogue fusion on) both run
   on the unit (:func:`numlab.claims.check` with ``kernels=`` / ``library=``);
   one verdict per claim over ``--trials`` random cases.

Examples::

    numlab mma sweep
    numlab mma sweep --unit B200/fp8_e4m3/fp32 --ks 1024,4096,16384 --out out/mma
    numlab mma sweep --claims-model none --kind normal
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import plots
from ..claims import SearchOptions, check, get_claim, model_sizes
from ..kernels import KernelSpec
from ..kernels.grammar import parse_unit, unit_string
from ..kernels.mma.lab import DEEPSEEK_NC, SWEEP_KS, e4m3_inputs, k_sweep, preset_errors
from ..kernels.mma.presets import UNIT_PRESETS
from ..report import render_table
from .demo import resolve_out_dir
from .options import add_shared, arg_type, model_type

__all__ = ["add_parser", "sweep_report", "unit_claims", "unit_kernels", "UNIT_FUSION", "UNIT_CLAIMS"]

UNIT_FUSION = "autofuse:--autofuse_enable_pass=elementwise,broadcast,reshape,matmul"
"""Fusion spec of the claims table: autofusion with matmul-epilogue fusion on,
so that a matmul and its epilogue form one code-generated block (fp32 inside)."""
UNIT_CLAIMS = ("no_worse_elementwise", "no_worse_tensor", "fp32_inside", "bound_no_worse",
               "error_within_bound")
"""The claims of the third table (the autofusion note's "fp32 inside" family)."""


def unit_kernels(unit) -> dict:
    """The kernel specs that put every matmul on ``unit`` (None: numlab's
    defaults), as :func:`numlab.claims.check`'s keyword arguments: the fused
    side's kernels ``codegen:mma=UNIT`` and eager's library
    ``handwritten:mma=UNIT`` (which fused plans also call for the blocks they
    do not generate)."""
    unit = parse_unit(unit, "unit")
    if unit is None:
        return {"kernels": None, "library": None}
    return {"kernels": KernelSpec.codegen(mma=unit), "library": KernelSpec.handwritten(mma=unit)}


def unit_claims(model: str, unit, *, fmt="fp16", trials: int = 3, seed: int = 0, claims=UNIT_CLAIMS,
                fusion: str = UNIT_FUSION, sizes=None) -> list[dict]:
    """The built-in ``claims`` on ``model`` with every matmul on ``unit``
    (eager and fused alike, :func:`unit_kernels`; None: the default
    kernels), each checked by :func:`numlab.claims.check` over ``trials``
    random cases of input kind ``normal`` (per-trial seeds from ``seed``;
    nothing shrunk or saved).  One row per claim: ``{"claim", "verdict",
    "fails", "undecided", "margin", "statement"}``; the verdict is "fails"
    if a case violates it, else "undecided" if a case rests on an
    infinite/NaN/empty result, else "holds"."""
    ks = unit_kernels(unit)
    sizes = model_sizes(model, sizes)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials={trials!r} must be an integer >= 1")
    opts = SearchOptions(trials=trials, kinds=("normal",))
    rows = []
    for name in claims:
        rep = check(name, model, fmt=fmt, sizes=sizes, fusion=fusion, seed=seed, options=opts,
                    shrink_cex=False, **ks)
        rows.append({"claim": rep.claim, "verdict": rep.verdict, "fails": rep.violations,
                     "undecided": rep.undecided, "margin": rep.worst_margin,
                     "statement": get_claim(name).statement})
    return rows


_SWEEP_COLS = (("K", "K", "{}"), ("rel_max", "max rel", "{:.3g}"), ("normwise", "normwise", "{:.3g}"),
               ("rel_max_promoted", "max rel, N_C", "{:.3g}"), ("normwise_promoted", "normwise, N_C", "{:.3g}"))
_PRESET_COLS = (("preset", "preset", "{}"), ("fma_size", "fma", "{}"), ("interleave", "inter", "{}"),
                ("align_bits", "align", "{}"), ("result_bits", "bits", "{}"), ("final_rounding", "final", "{}"),
                ("rel_max", "max rel", "{:.3g}"), ("rel_max_promoted", "max rel, N_C", "{:.3g}"))
_CLAIM_COLS = (("claim", "claim", "{}"), ("verdict_plain", "no unit", "{}"), ("verdict", "on the unit", "{}"),
               ("fails", "fails", "{}"),
               ("undecided", "undecided", "{}"), ("margin", "worst margin", "{:.3g}"))
_LEGEND = (
    ("max rel", "max over output elements of |D - AB| / |AB| (AB exact)"),
    ("normwise", "max |D - AB| / max |AB|"),
    ("N_C", "with promotion: the unit's partial sum is added to an fp32 accumulator every N_C products "
            "(DeepSeek-V3 section 3.3.2) and restarts from zero"),
    ("fma, inter, align, bits, final", "the preset's fma_size, interleave, align_bits (extra alignment bits "
                                       "beyond fp32's 23), significand bits of block results, final rounding"),
)
_CLAIM_LEGEND = (
    ("no unit, on the unit", "verdict (holds / fails / undecided over the trials; undecided: rests on an "
                             "infinite or NaN result) with numlab's default kernels (matmul: exact "
                             "products, one fp32 rounding per K tile) and with every matmul on the unit; "
                             "fails, undecided, worst margin: on the unit"),
    ("worst margin", "the claim's margin, > 0 means violated (ULPs of S at the reference scale, or a count)"),
)


def sweep_report(unit="H100/fp8_e4m3/fp32", *, ks=SWEEP_KS, M: int = 16, N: int = 16,
                 nc: int = DEEPSEEK_NC, kinds=("uniform", "normal"), seed: int = 0, preset_k: int = 4096,
                 claims_model: str | None = "gelu_mlp", trials: int = 3, width: int | None = None):
    """The text ``numlab mma sweep`` prints and the data behind it
    (``{"sweep": {kind: rows}, "presets": rows, "claims": rows}``)."""
    unit = parse_unit(unit, "--unit")
    if unit is None:
        raise ValueError("--unit 'none' names no matrix unit; give a preset (e.g. H100/fp8_e4m3/fp32)")
    data: dict = {"unit": unit_string(unit), "nc": nc, "M": M, "N": N, "seed": seed, "sweep": {}}
    parts = []
    for i, kind in enumerate(kinds):
        rows = k_sweep(unit, ks=ks, M=M, N=N, promote_every=-(-nc // unit.block) * unit.block,
                       seed=seed, kind=kind)
        data["sweep"][kind] = rows
        parts.append(render_table(
            rows, _SWEEP_COLS, width=width,
            title=f"1{'abcdefgh'[i]}. DeepSeek-V3 3.3.2: e4m3 GEMM ({M} x K) x (K x {N}) on {unit_string(unit)}, "
                  f"inputs {kind} (seed {seed}); errors against the exact product, without and with "
                  f"promotion to fp32 every N_C = {nc}"))
    a, b = e4m3_inputs(M, preset_k, N, seed, "uniform")
    names = [n for n, u in UNIT_PRESETS.items() if u.in_fmt == "fp8_e4m3"]
    plain = {r["preset"]: r for r in preset_errors(a, b, names)}
    promoted = {r["preset"]: r for r in preset_errors(a, b, names, promote_every=nc)}
    prow = [{**plain[n], "rel_max_promoted": promoted[n]["rel_max"]} for n in plain]
    data["presets"] = prow
    parts.append(render_table(
        prow, _PRESET_COLS, width=width, legend=_LEGEND,
        title=f"2. The same e4m3 matrices (uniform, K = {preset_k}) on every preset that takes e4m3 "
              "(parameters only: no preset is backed by measured GPU outputs; see "
              "numlab.kernels.mma.presets)"))
    if claims_model:
        plain = {r["claim"]: r for r in unit_claims(claims_model, None, trials=trials, seed=seed)}
        crow = [{**r, "verdict_plain": plain[r["claim"]]["verdict"]}
                for r in unit_claims(claims_model, unit, trials=trials, seed=seed)]
        data["claims"] = crow
        parts.append(render_table(
            crow, _CLAIM_COLS, width=width, legend=_CLAIM_LEGEND,
            title=f"3. 'fp32 inside' claims on {claims_model} (fp16) with every matmul on "
                  f"{unit_string(unit)} (eager: handwritten:mma=UNIT; fused: codegen:mma=UNIT, "
                  f"fusion {UNIT_FUSION}); {trials} trials"))
    return "\n\n".join(parts), data


def sweep_figure(data: dict):
    """The K sweep as a log-log figure (one line per input kind, solid
    without promotion, dashed with)."""
    fig = plots.figure((8, 4))
    ax = fig.subplots()
    for kind, rows in data["sweep"].items():
        ks = [r["K"] for r in rows]
        line = ax.loglog(ks, [max(r["rel_max"], 1e-12) for r in rows], marker="o",
                         label=f"{kind}: unit only")[0]
        if "rel_max_promoted" in rows[0]:
            ax.loglog(ks, [max(r["rel_max_promoted"], 1e-12) for r in rows], marker="s", linestyle="--",
                      color=line.get_color(), label=f"{kind}: promoted every {data['nc']}")
    ax.set_xlabel("K")
    ax.set_ylabel("max relative error")
    ax.set_title(f"e4m3 GEMM on {data['unit']}")
    plots.legend_outside(ax)
    fig.tight_layout()
    return fig


def _ks(value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"--ks {value!r} must be a comma list of integers >= 1 (e.g. 1024,4096)") from None
    if not ks or min(ks) < 1:
        raise ValueError(f"--ks {value!r} must be a comma list of integers >= 1 (e.g. 1024,4096)")
    return ks


def _pos(option: str):
    def f(v):
        n = int(v)
        if n < 1:
            raise ValueError(f"{option} {v!r} must be an integer >= 1")
        return n
    return arg_type(option, f)


def _kinds(value: str) -> tuple[str, ...]:
    kinds = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [k for k in kinds if k not in ("uniform", "normal")]
    if not kinds or bad:
        raise ValueError(f"--kind {value!r}: valid kinds are uniform and normal (a comma list)")
    return kinds


def _claims_model(value: str):
    return None if value.lower() == "none" else model_type(value)


def add_parser(sub) -> None:
    p = sub.add_parser("mma", help="matrix units (tensor cores): the DeepSeek-V3 K sweep, presets, claims")
    acts = p.add_subparsers(dest="mma_action", metavar="ACTION")
    s = acts.add_parser("sweep", help="error of e4m3 GEMM on a unit vs K, with and without promotion; "
                                      "presets side by side; which 'fp32 inside' claims survive",
                        description=__doc__.split("\n\n")[0])
    s.add_argument("--unit", default="H100/fp8_e4m3/fp32", metavar="UNIT",
                   type=arg_type("--unit", lambda v: parse_unit(v, "--unit")),
                   help="the unit: a preset (GPU/in_fmt/out_fmt), optionally with (field=value,...) "
                        "overrides; it must take fp8_e4m3 (default H100/fp8_e4m3/fp32)")
    s.add_argument("--ks", default=",".join(map(str, SWEEP_KS)), metavar="K,K,...", type=arg_type("--ks", _ks),
                   help=f"K values (default {','.join(map(str, SWEEP_KS))})")
    s.add_argument("--m", type=_pos("--m"), default=16, metavar="M", help="rows of A (default 16)")
    s.add_argument("--n", type=_pos("--n"), default=16, metavar="N", help="columns of B (default 16)")
    s.add_argument("--nc", type=_pos("--nc"), default=DEEPSEEK_NC, metavar="N_C",
                   help=f"promotion interval in products, rounded up to the unit's block (default {DEEPSEEK_NC})")
    s.add_argument("--kind", default="uniform,normal", type=arg_type("--kind", _kinds), metavar="KIND[,KIND]",
                   help="input kinds: uniform (in [0, 1)) and/or normal (default both)")
    s.add_argument("--preset-k", type=_pos("--preset-k"), default=4096, metavar="K",
                   help="K of the preset comparison (default 4096)")
    s.add_argument("--claims-model", default="gelu_mlp", type=arg_type("--claims-model", _claims_model),
                   metavar="MODEL", help="zoo model of the claims table, or 'none' to skip it (default gelu_mlp)")
    s.add_argument("--trials", type=_pos("--trials"), default=3, metavar="N",
                   help="random cases per claim (default 3)")
    add_shared(s, seed=0, out=None, force=True)
    s.set_defaults(func=_sweep)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _sweep(args) -> int:
    if args.unit is None:
        raise ValueError("--unit 'none' names no matrix unit; give a preset (e.g. H100/fp8_e4m3/fp32)")
    if args.unit.in_fmt != "fp8_e4m3":
        raise ValueError(f"--unit {unit_string(args.unit)!r} takes {args.unit.in_fmt}; the sweep multiplies "
                         f"e4m3 data: choose a unit with in_fmt fp8_e4m3, e.g. "
                         f"{[n for n, u in UNIT_PRESETS.items() if u.in_fmt == 'fp8_e4m3'][:4]}")
    text, data = sweep_report(args.unit, ks=args.ks, M=args.m, N=args.n, nc=args.nc, kinds=args.kind,
                              seed=args.seed, preset_k=args.preset_k, claims_model=args.claims_model,
                              trials=args.trials)
    if args.out is not None:
        outdir, note = resolve_out_dir(args.out, args.force)
        paths = plots.save_figures({"mma_k_sweep.png": sweep_figure(data)}, str(outdir))
        jpath = Path(outdir) / "results.json"  # the marker resolve_out_dir protects
        jpath.write_text(json.dumps(data, indent=1, default=float))
        text += "\n\n" + (note + "\n" if note else "") + "wrote " + ", ".join([*paths, str(jpath)])
    print(text)
    return 0
