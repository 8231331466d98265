"""What ``numlab demo`` says: the verdict first, then one screen of summary
(or, with ``--verbose``, every table), then where the full tables are; and
the README's demo paragraph, generated from the same results.

Every function here reads the result of :func:`numlab.cli.demo.main` (a
dict: ``rows``, ``verdicts``, ``sources``, ``scaled_claims``, ``chain``,
``config``, ...) and computes nothing new, so what is printed, written to
the report and quoted in the README are the same numbers.
"""

from __future__ import annotations

import re
import textwrap

from ..experiments import (
    MARGIN_SIGN,
    MATRIX_NOTE,
    SCALED_MODEL,
    format_scaled_claims,
    format_source_table,
    format_verdict_matrix,
    margin_legend,
)
from ..fusion import FusionOptions
from ..report import Column, render_table, wrap, wrap_lines

__all__ = ["fused_pairs", "verdict_lines", "summary_lines", "full_lines", "fp8_note", "files_line",
           "readme_summary", "README_MARKERS", "replace_readme_summary"]

README_MARKERS = ("<!-- demo summary -->", "<!-- /demo summary -->")

_WHY_FAILED = {
    "no_worse_tensor": "fused's max |error| exceeds eager's there ('Why' below)",
    "no_worse_population": "fused's P99 or max |error|, pooled over the trials, exceeds eager's",
    "bound_no_worse": "the fused plan's contract bound exceeds eager's for an output",
    "error_within_bound": "an element's error exceeds its contract bound: the run breaks the contract",
}


# ---------------------------------------------------------------------------
# the pairs of the demo table
# ---------------------------------------------------------------------------
def fused_pairs(rows) -> dict[str, list]:
    """The (model, format) pairs of the demo table by fused's verdict against
    eager: ``more`` / ``less`` (fused more / less accurate by mean |error|
    against fp64), ``same`` (eager's bits), ``other`` (equal or non-finite).
    Each entry is ``(model, fmt, ratio)``: the larger mean |error| over the
    smaller (None for ``same`` and ``other``), in the table's order."""
    eager = {(r["model"], r["fmt"]): r["abs_mean"] for r in rows if r["mode"] == "eager"}
    out = {"more": [], "less": [], "same": [], "other": []}
    for r in rows:
        if r["mode"] != "fused":
            continue
        word = r["verdict"].split()[0]
        key = "same" if r["verdict"] == "same bits" else word if word in ("more", "less") else "other"
        a, b = r["abs_mean"], eager[(r["model"], r["fmt"])]
        ratio = max(a, b) / min(a, b) if key in ("more", "less") and min(a, b) > 0 else None
        out[key].append((r["model"], r["fmt"], ratio))
    return out


def _by_model(pairs, with_ratio: bool) -> str:
    """``gelu_mlp (fp16 1.10x, bf16 1.41x)``; without ratios, models with the
    same formats are listed together: ``layernorm, softmax in fp16 and bf16``."""
    models: dict[str, list] = {}
    for m, f, q in pairs:
        models.setdefault(m, []).append(f"{f} {q:.2f}x" if with_ratio and q is not None else f)
    if with_ratio:
        return ", ".join(f"{m} ({', '.join(v)})" for m, v in models.items())
    groups: dict[tuple, list] = {}
    for m, v in models.items():
        groups.setdefault(tuple(v), []).append(m)
    return "; ".join(f"{', '.join(ms)} in {' and '.join(fs)}" for fs, ms in groups.items())


# ---------------------------------------------------------------------------
# the verdict
# ---------------------------------------------------------------------------
def _claims_failed(res) -> tuple[list[str], list[str], list[str]]:
    """(failed, undecided, held) claim sentences of the block-scaled checks."""
    by_claim: dict[str, list] = {}
    for r in res["scaled_claims"]:
        by_claim.setdefault(r["claim"], []).append(r)
    failed, undecided, held = [], [], []
    for claim, rs in by_claim.items():
        bad = [r for r in rs if r["verdict"] == "fails"]
        und = [r for r in rs if r["verdict"] == "undecided"]
        if bad:
            where = "; ".join(f"{r['fmt']} {r['violations']}/{r['trials']} trials, margin "
                              f"{r['worst_margin']:.3g}" if i == 0 else
                              f"{r['fmt']} {r['violations']}/{r['trials']}, {r['worst_margin']:.3g}"
                              for i, r in enumerate(bad))
            failed.append(f"FAILED {claim} on {SCALED_MODEL} ({where}): "
                          f"{_WHY_FAILED.get(claim, 'a case violates the claim')}")
        if und:
            undecided.append(f"UNDECIDED {claim} on {SCALED_MODEL} in " + "; ".join(
                f"{r['fmt']}: {r['why'] or 'a case rests on an infinite or unknown result'}" for r in und))
        ok = tuple(r["fmt"] for r in rs if r["verdict"] == "holds")
        if ok:
            held.append((claim, ok))
    groups: dict[tuple, list] = {}
    for claim, ok in held:
        groups.setdefault(ok, []).append(claim)
    return failed, undecided, [f"{', '.join(cs)} ({', '.join(ok)})" for ok, cs in groups.items()]


def _preset_losses(mrows) -> str:
    """The fusion presets with a 'less accurate' pair, grouped by why: the
    count per preset (of the pairs over every input kind), the worst pair."""
    groups: dict[str, list] = {}
    total = 0
    for spec in dict.fromkeys(r["fusion"] for r in mrows):
        rs = [r for r in mrows if r["fusion"] == spec]
        total = sum(r["more"] + r["less"] + r["same"] + r["equal"] + r["nonfinite"] for r in rs)
        less = sum(r["less"] for r in rs)
        if not less:
            continue
        worst = max((r["less_ratios"][0], r["less_in"][0].split()[0], r["kind"]) for r in rs if r["less"])
        fo = FusionOptions.parse(spec)
        why = ("reductions stored in S between kernels" if fo.decompose and "reduce" not in fo.enabled
               else "fewer roundings do not put every element closer to fp64")
        groups.setdefault(why, []).append((less, spec, worst))
    parts = []
    for why, ps in sorted(groups.items(), key=lambda kv: -max(p[0] for p in kv[1])):
        ps.sort(key=lambda p: -p[0])
        q, pair, kind = max(p[2] for p in ps)
        parts.append(", ".join(f"{spec} {less}" for less, spec, _ in ps)
                     + f" of {total} pairs (worst {pair} {q:.2f}x, {kind}): {why}")
    return "; ".join(parts)


def verdict_lines(res) -> list[str]:
    """The verdict, one unwrapped line each: which (model, format) pairs are
    more / less accurate fused than eager, which are bitwise identical, which
    claims failed and why, which held."""
    pairs = fused_pairs(res["rows"])
    n = sum(len(v) for v in pairs.values())
    lines = ["VERDICT (fused vs eager, mean |error| against fp64 over all output elements):",
             f"  fused more accurate in {len(pairs['more'])} of {n} model/format pairs"
             + (f": {_by_model(pairs['more'], True)}" if pairs["more"] else ""),
             f"  fused less accurate in {len(pairs['less'])} of {n}"
             + (f": {_by_model(pairs['less'], True)}" if pairs["less"] else ""),
             f"  bitwise identical to eager in {len(pairs['same'])} of {n}"
             + (f": {_by_model(pairs['same'], False)}" if pairs["same"] else "")]
    if pairs["other"]:
        lines.append(f"  equal mean |error| or non-finite in {len(pairs['other'])}: "
                     f"{_by_model(pairs['other'], False)}")
    failed, undecided, held = _claims_failed(res)
    losses = _preset_losses(res["verdicts"])
    if losses:
        failed.append("FAILED 'fused no less accurate than eager' under " + losses)
    chain_bad = [f"{dt} {m}" for dt, ok in res["chain_ok"].items() for m, good in ok.items() if not good]
    if chain_bad:
        failed.append("FAILED chain of n multiplies within its a-priori bound: " + ", ".join(chain_bad))
    else:
        held.insert(0, "chain bounds")
    off = [r["case"] for r in res["sources"] if r["all aligned"] != 0.0]
    if off:
        failed.append(f"FAILED eager's bits with all four sources aligned: differs in {off}")
    else:
        held.insert(1, "all sources aligned = eager's bits")
    lines += [f"  {x}" for x in failed + undecided]
    lines.append("  held: " + "; ".join(held))
    return lines


# ---------------------------------------------------------------------------
# the summary (default) and the full tables (--verbose)
# ---------------------------------------------------------------------------
def _differing_table(res, W, plain) -> str:
    rows = [r for r in res["rows"] if r["mode"] == "fused" and r["verdict"] != "same bits"]
    if not rows:
        return wrap("fused has eager's bits in every model/format pair", W)
    eager = {(r["model"], r["fmt"]): r for r in res["rows"] if r["mode"] == "eager"}
    body = [{"model": r["model"], "fmt": r["fmt"],
             "vs": r["verdict"].replace(" accurate", "").replace("(", "").replace(")", ""),
             "eq": r["bitwise_eq_eager"], "emax": eager[(r["model"], r["fmt"])]["abs_max"],
             "fmax": r["abs_max"]} for r in rows]
    cols = [Column("model", "model", key_col=True), Column("fmt", "S", key_col=True),
            Column("vs", "vs eager"), Column("eq", "bits = eager", "{:.1%}", justify="right"),
            Column("emax", "max eager", "{:.3g}"), Column("fmax", "max fused", "{:.3g}")]
    head = wrap("SUMMARY. Pairs where fused and eager differ (the others have eager's bits): ratio of mean "
                "|error|, share of elements bitwise equal to eager, max |error|:", W)
    return head + "\n" + render_table(body, cols, width=W, plain=plain)


def _preset_table(res, W, plain) -> str:
    mrows = res["verdicts"]
    kinds = list(dict.fromkeys(r["kind"] for r in mrows))
    body = []
    for spec in dict.fromkeys(r["fusion"] for r in mrows):
        row = {"fusion": spec}
        for r in mrows:
            if r["fusion"] == spec:
                other = r["equal"] + r["nonfinite"]
                row[r["kind"]] = f"{r['more']}/{r['less']}/{r['same']}" + (f" +{other}" if other else "")
        body.append(row)
    n = len(res["config"].models) * len(res["config"].fmts)
    cols = [Column("fusion", "fusion", key_col=True), *[Column(k, k.replace("_", " ")) for k in kinds]]
    head = wrap(f"fused more/less accurate/same bits of {n} pairs per preset and inputs (+k other):", W)
    return head + "\n" + render_table(body, cols, width=W, plain=plain)


def _scaled_table(res, W, plain) -> str:
    crows, cfg = res["scaled_claims"], res["config"]
    body = []
    for claim in dict.fromkeys(r["claim"] for r in crows):
        row = {"claim": claim}
        for r in crows:
            if r["claim"] == claim:
                row[r["fmt"]] = f"{r['verdict']} {r['violations']}/{r['trials']}, {r['worst_margin']:.3g}"
        body.append(row)
    fmts = list(dict.fromkeys(r["fmt"] for r in crows))
    cols = [Column("claim", "claim", key_col=True), *[Column(f, f) for f in fmts]]
    legend = margin_legend(r["claim"] for r in crows)
    head = wrap(f"block-scaled fp8: {SCALED_MODEL} (DeepSeek-V3 e4m3 blocks), {cfg.trials} random trials "
                f"({', '.join(cfg.claim_kinds)}); cells: verdict, violating/trials, worst margin ({MARGIN_SIGN}):",
                W)
    return head + "\n" + render_table(body, cols, legend=legend, width=W, plain=plain)


def fp8_note(res) -> str:
    """Why ``no_worse_tensor`` can fail on the fp8 MLP while a table calls it
    more accurate ('' when it does not fail)."""
    crows, cfg = res["scaled_claims"], res["config"]
    bad = [r for r in crows if r["claim"] == "no_worse_tensor" and r["verdict"] == "fails"]
    if not bad:
        return ""
    worst = max(bad, key=lambda r: r["worst_margin"])
    d = worst["worst_detail"]
    fp8 = [(f, q) for m, f, q in fused_pairs(res["rows"])["more"] if m == SCALED_MODEL]
    if fp8:
        lead = "while the table calls fp8_mlp more accurate (" + ", ".join(f"{f} {q:.2f}x" for f, q in fp8) + ")"
    else:
        lead = "though a mean-|error| table can call fp8_mlp more accurate"
    pop = [r["fmt"] for r in crows if r["claim"] == "no_worse_population" and r["verdict"] == "holds"]
    text = (f"Why no_worse_tensor fails {lead}: the table is the mean |error| over one input set's elements "
            f"({res['kind']}, seed {res['seed']}); the claim, the max |error| per output on each of {cfg.trials} "
            f"trials (own seeds), fails if fused's is larger on any: worst {worst['fmt']} trial "
            f"{worst['worst_trial']} ({worst['worst_kind']}), {d.get('fused_max', float('nan')):.3g} fused vs "
            f"{d.get('eager_max', float('nan')):.3g} eager.")
    if pop:
        text += f" Pooled over the trials fused is no worse (no_worse_population holds: {', '.join(pop)})."
    return text


def summary_lines(res, W: int, plain: bool) -> list[str]:
    """At most about one screen: the pairs that differ, the presets table,
    the block-scaled claims with what a margin is, and the fp8 note."""
    out = ["", _differing_table(res, W, plain), "", _preset_table(res, W, plain), "",
           _scaled_table(res, W, plain)]
    note = fp8_note(res)
    if note:
        out.append(wrap(note, W))
    return out


def full_lines(res, W: int, plain: bool, table: str) -> list[str]:
    """Every table in full with its legend (``--verbose``)."""
    cfg = res["config"]
    chain = [
        f"chain of n multiplies ({dt}): eager max rel err {errs['eager'][-1]:.3g} at n={cfg.chain_ns[-1]} "
        f"(bound n*u_S {b['eager'][-1]:.3g}, {'holds' if res['chain_ok'][dt]['eager'] else 'VIOLATED'}); "
        f"fused {errs['fused'][-1]:.3g} (bound u_S + n*u_32 {b['fused'][-1]:.3g}, "
        f"{'holds' if res['chain_ok'][dt]['fused'] else 'VIOLATED'})"
        for dt, (errs, b) in res["chain"].items()]
    off = [r["case"] for r in res["sources"] if r["all aligned"] != 0.0]
    out = ["", table, *(wrap(x, W) for x in chain), "",
           wrap("is fused more or less accurate than eager (mean |error| vs fp64), per preset and input kind, "
                f"over the {len(cfg.models)} models x {len(cfg.fmts)} formats:", W),
           format_verdict_matrix(res["verdicts"], width=W, plain=plain), wrap(MATRIX_NOTE, W), "",
           wrap("where the bits part: share of output elements whose bits differ from eager", W),
           format_source_table(res["sources"], width=W, plain=plain),
           wrap("all four sources aligned + no decomposition: " + (
               "bitwise identical to eager in every case" if not off else f"DIFFERS from eager in {off}"), W),
           "", wrap(f"block-scaled fp8 ({SCALED_MODEL}: DeepSeek-V3 1x128 / 128x128 e4m3 blocks): is fused with "
                    f"per-block scaling no worse than eager with it? ({cfg.trials} random trials, "
                    f"{', '.join(cfg.claim_kinds)} inputs in turn)", W),
           format_scaled_claims(res["scaled_claims"], width=W, plain=plain)]
    note = fp8_note(res)
    if note:
        out.append(wrap(note, W))
    return out


def files_line(res, verbose: bool = False) -> str:
    """Where the full tables are."""
    d = res["dir"]
    n_csv = sum(p.suffix == ".csv" for p in res["files"])
    return (f"full tables: report.html, {n_csv} CSV files and results.json in {d}; "
            + ("printed above (--verbose)" if verbose else "--verbose prints them"))


def wrapped(lines, W: int) -> list[str]:
    """Verdict lines wrapped to ``W``, continuation lines indented."""
    return [wrap_lines(x, W, hang=4) for x in lines]


# ---------------------------------------------------------------------------
# the README's demo paragraph
# ---------------------------------------------------------------------------
def _md_more(pairs, eq) -> str:
    """``gelu_mlp: fp16 1.10x lower mean |error| with 74.4% of elements
    bitwise equal to eager, bf16 1.41x with 70.7%``."""
    models: dict[str, list] = {}
    for m, f, q in pairs:
        first = not models.get(m) and m == pairs[0][0]
        models.setdefault(m, []).append(
            f"{f} {q:.2f}x lower mean |error| with {eq[(m, f)]:.1%} of elements bitwise equal to eager"
            if first else f"{f} {q:.2f}x with {eq[(m, f)]:.1%}")
    return "; ".join(f"{m}: {', '.join(v)}" for m, v in models.items())


def _md_claims(crows) -> str:
    """Failed and undecided claims with their counts and margins, then the held ones by format."""
    parts, held = [], {}
    for claim in dict.fromkeys(r["claim"] for r in crows):
        rs = [r for r in crows if r["claim"] == claim]
        bad = [r for r in rs if r["verdict"] != "holds"]
        if bad:
            parts.append(f"{claim} " + "; ".join(
                f"{r['verdict']} in {r['fmt']} ({r['violations']} of {r['trials']} trials, worst margin "
                f"{r['worst_margin']:.3g} in {r['margin_unit']})" for r in bad))
        ok = tuple(r["fmt"] for r in rs if r["verdict"] == "holds")
        if ok:
            held.setdefault(ok, []).append(claim)
    for ok, cs in held.items():
        parts.append(f"{', '.join(cs)} hold{'s' if len(cs) == 1 else ''} in {' and '.join(ok)}")
    return "; ".join(parts)


def readme_summary(quick: dict, full_rows, full_models, *, width: int = 78) -> str:
    """The README's demo summary (the text between :data:`README_MARKERS`),
    from a ``numlab demo --quick`` result (:func:`numlab.cli.demo.main`) and
    the table rows of the full demo's configuration (``full_rows``, over
    ``full_models``; :func:`numlab.experiments.demo_rows`)."""
    cfg = quick["config"]
    full, q = fused_pairs(full_rows), fused_pairs(quick["rows"])
    nf, nq = sum(map(len, full.values())), sum(map(len, q.values()))
    eq = {(r["model"], r["fmt"]): r["bitwise_eq_eager"] for r in quick["rows"] if r["mode"] == "fused"}
    setting = f"fusion `{quick['fusion']}`, {quick['kind']} inputs, seed {quick['seed']}"

    def counts(p, n, more: str) -> str:
        return (f"more accurate than eager in {len(p['more'])} of {n} model/format pairs{more}, less accurate "
                f"in {len(p['less'])}" + (f" ({_by_model(p['less'], True)})" if p["less"] else "")
                + f" and bitwise identical in {len(p['same'])}"
                + (f" ({_by_model(p['same'], False)})" if p["same"] else ""))

    full_more = f" ({', '.join(dict.fromkeys(m for m, _, _ in full['more']))})" if full["more"] else ""
    items = [f"`numlab demo` ({len(full_models)} zoo models in {' and '.join(cfg.fmts)}, {setting}): fused is "
             + counts(full, nf, full_more) + ".",
             f"`numlab demo --quick` ({len(cfg.models)} models): fused is "
             + counts(q, nq, f" ({_md_more(q['more'], eq)})" if q["more"] else "") + "."]
    worse, none = [], []
    for spec in dict.fromkeys(r["fusion"] for r in quick["verdicts"]):
        rs = [r for r in quick["verdicts"] if r["fusion"] == spec]
        if any(r["less"] for r in rs):
            worse.append(f"`{spec}` in " + " and ".join(
                f"{r['less']} of {nq} on {r['kind']} inputs" + (f" ({', '.join(r['less_in'])})" if r["less"] else "")
                for r in rs))
        else:
            none.append(f"`{spec}`")
    items.append("`--quick`, per fusion preset: fused is less accurate than eager (mean |error|) under "
                 + ("; under ".join(worse) if worse else "no preset")
                 + (f"; under {', '.join(none)} in none." if none else "."))
    items.append(f"`--quick`, block-scaled fp8 ({SCALED_MODEL}, {cfg.trials} random trials): "
                 + _md_claims(quick["scaled_claims"]) + ".")
    body = "\n".join(textwrap.fill(x, width, initial_indent="- ", subsequent_indent="  ",
                                   break_long_words=False, break_on_hyphens=False) for x in items)
    return f"{README_MARKERS[0]}\n{body}\n{README_MARKERS[1]}"


def replace_readme_summary(text: str, block: str) -> str:
    """``text`` (a README) with its demo summary block replaced by ``block``;
    ValueError when the markers are missing."""
    pat = re.compile(re.escape(README_MARKERS[0]) + r".*?" + re.escape(README_MARKERS[1]), re.S)
    if not pat.search(text):
        raise ValueError(f"the README has no {README_MARKERS[0]} ... {README_MARKERS[1]} block")
    return pat.sub(lambda _m: block, text, count=1)
