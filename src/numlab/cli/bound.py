"""``numlab bound``: the contract bound of a model, per mode and per output.

::

    numlab bound MODEL|--graph MODULE:FUNCTION [--inputs KIND|FILE] [--seed N] [--size NAME=INT ...]
                 [--fmt FMT] [--mode eager|fused|emulated_casts|all] [--fusion SPEC]
                 [--kernels SPEC] [--library SPEC] [--contract SPEC] [--prob P]
                 [--top K] [--out DIR [--force]]

:func:`numlab.bounds.contract_bound` of the graph on its inputs: ``B`` with
``|y_impl - y_exact| <= B`` elementwise for every implementation of the
contract (``--contract``: a preset such as ``torch_cpu`` or
``triton_cuda:libm_ulps=2``; default: derived from ``--kernels`` /
``--library``, the contract numlab's own kernels honour).  For each mode and
output it prints the contract header, the largest absolute bound, the largest
relative bound (``B / max(|reference|, smallest normal of S)``), the tightness
against numlab's own run of that mode (``max B / max |run - reference|``,
over the elements whose bound is finite; ``inf`` when the run is exact, ``n/a``
when nothing can be compared), the infinite-bound elements with the nodes
where they originate and why, and the nodes contributing most to the bound at
the element where it is largest (:meth:`ContractBound.budget`).  With
``--prob P`` Higham and Mary's probabilistic estimate is printed beside the
bound, labelled "estimate (not a bound)".

``--out DIR`` writes ``bound.csv`` (first line: the column names) and its
JSON sidecar ``bound.json`` (the same rows plus the contract, the options and
the versions);
existing files are never replaced without ``--force``.  Exit code 0 (also when
every bound of a mode is infinite: the report says why), 2 on bad usage.
"""

from __future__ import annotations

import csv
import math
import platform
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import __version__
from .. import _json as strict_json
from ..contract import CONTRACT_PRESETS, Contract
from ..contract_bounds import BOUND_MODES, contract_bound
from ..execute import NoEffectWarning, run
from .options import (
    MODEL_HELP,
    add_shared,
    arg_type,
    contract_type,
    graph_and_inputs,
    kernels_type,
    nonneg_int,
)

__all__ = ["add_parser", "main", "COLUMNS", "MODE_CHOICES"]

MODE_CHOICES = (*BOUND_MODES, "all")
FILES = ("bound.csv", "bound.json")

COLUMNS = ("mode", "output", "shape", "elements", "max_abs_bound", "max_finite_bound", "max_rel_bound",
           "tightness", "max_run_error", "run_exceeds_bound", "inf_elements", "inf_sources", "worst_index",
           "top_contributions", "estimate_max_abs", "estimate_max_rel", "prob", "fmt", "contract")
"""The columns of ``bound.csv`` (and the keys of each row of ``bound.json``)."""

LEGEND = """\
max abs bound: the largest B (inf when any element's bound is infinite); max rel bound: the
largest B / max(|reference|, smallest normal of S); tightness: max B / max |numlab run - reference|
over the elements with a finite bound (how loose the bound is on numlab's own run; 'inf': the run
is exact there, 'n/a': nothing to compare); top: each node's share of the bound at the element
where it is largest."""


def _modes(value: str) -> tuple:
    if value == "all":
        return BOUND_MODES
    if value in BOUND_MODES:
        return (value,)
    raise ValueError(f"--mode {value!r} is not valid; valid choices: {list(MODE_CHOICES)}")


def _prob(value: str) -> float:
    try:
        p = float(value)
    except ValueError:
        p = math.nan
    if not 0 < p < 1:  # NaN fails too
        raise ValueError(f"--prob {value!r} is not valid; it must be a number in (0, 1), e.g. 0.99")
    return p




mode_type = arg_type("--mode", _modes, "mode")
prob_type = arg_type("--prob", _prob, "prob")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bound", help="rigorous contract bounds |y_impl - y_exact| <= B per mode and output",
        description="The contract bound (numlab.bounds.contract_bound) of a model on its inputs: for each "
                    "mode and output the largest absolute and relative bound, its tightness against "
                    "numlab's own run, infinite-bound elements and why, and the nodes contributing most. "
                    "Exit 0, or 2 on bad usage.", epilog=LEGEND)
    add_shared(p, model=MODEL_HELP, model_required=False, graph=True, fmt="fp16", size="", seed=0,
               inputs="normal", inputs_files=True, fusion="(fused modes; default autofuse)",
               kernels="(the code generator's, default codegen; the derived contract's codegen class)")
    p.add_argument("--library", default=None, metavar="SPEC", type=kernels_type("--library"),
                   help="kernel spec of the library kernels (default handwritten; the derived contract's "
                        "library class), same grammar as --kernels")
    p.add_argument("--mode", default=MODE_CHOICES[-1], type=mode_type, metavar="MODE",
                   help=f"one of {', '.join(MODE_CHOICES)} (default all)")
    p.add_argument("--contract", default=None, metavar="SPEC", type=contract_type,
                   help="contract: derived (default: from --kernels/--library), custom, or a preset "
                        f"({', '.join(sorted(CONTRACT_PRESETS))}), optionally :field=value,... "
                        "(library.field / codegen.field for one class)")
    p.add_argument("--prob", default=None, metavar="P", type=prob_type,
                   help="also print Higham and Mary's probabilistic estimate holding with probability P "
                        "(an estimate, not a bound)")
    p.add_argument("--top", default=3, metavar="K", type=nonneg_int("--top"),
                   help="contributing nodes shown at the element with the largest bound (default 3)")
    add_shared(p, out=None, force="(bound.csv and bound.json in --out)")
    p.set_defaults(func=main)


# ---------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------
def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return "inf" if math.isinf(x) else ("nan" if math.isnan(x) else f"{x:.4g}")


def _ancestors(graph, name: str) -> set:
    nodes = {n.name: n for n in graph.nodes}
    seen, todo = set(), [name]
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        if k in nodes:
            todo.extend(nodes[k].inputs)
    return seen


def _inf_sources(res, output: str) -> list:
    """The nodes behind ``output`` where infinite bounds originate."""
    up = _ancestors(res.plan.graph, output)
    return [s for s in res.inf_sources() if s["node"] in up]


def _inf_text(sources) -> str:
    if not sources:
        return "(no originating node flagged)"
    return "; ".join(f"{s['node']} ({s['op']}): " + ", ".join(f"{c} at {n} element{'s' if n != 1 else ''}" for c, n in s["causes"].items())
                     for s in sources)


def _top(res, output: str, index, k: int):
    """``[(node, op, share)]``, the ``k`` largest shares of the bound at ``index``
    (None when this build's ContractBound has no ``budget``)."""
    if not hasattr(res, "budget"):
        return None
    items = sorted(res.budget(output, index), key=lambda t: -float(t[2]))
    return [(str(n), str(op), float(s)) for n, op, s in items[:k]]


def _tightness(b, err):
    ok = np.isfinite(b) & np.isfinite(err)
    if not ok.any():
        return "n/a", None
    e, bb = float(err[ok].max()), float(b[ok].max())
    if e == 0:
        return ("inf" if bb > 0 else "n/a"), 0.0
    return bb / e, e


def _summary(mode, output, res, est, y, ref, S, top_k) -> dict:
    """One row: the bound of ``output`` under ``mode`` against numlab's run ``y``."""
    b = np.asarray(res[output], dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    fin = np.isfinite(b)
    n_inf = int(b.size - np.count_nonzero(fin))
    scale = np.maximum(np.abs(ref), S.smallest_normal)
    with np.errstate(all="ignore"):
        rel = np.where(fin, b / scale, np.inf)
        err = np.abs(np.asarray(y, dtype=np.float64) - ref)
    tight, max_err = _tightness(b, err)
    row = {"mode": mode, "output": output, "shape": "x".join(map(str, b.shape)) or "scalar",
           "elements": int(b.size),
           "max_abs_bound": float(b.max()) if b.size else math.nan,
           "max_finite_bound": float(b[fin].max()) if fin.any() else math.nan,
           "max_rel_bound": float(rel.max()) if b.size else math.nan,
           "tightness": tight, "max_run_error": max_err,
           "run_exceeds_bound": int(np.count_nonzero(fin & ~(err <= b))),
           "inf_elements": n_inf, "inf_sources": _inf_sources(res, output),
           "worst_index": None, "top_contributions": None,
           "estimate_max_abs": None, "estimate_max_rel": None, "prob": None,
           "fmt": S.name, "contract": res.contract.spec}
    if fin.any():
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(fin, b, -np.inf))), b.shape))
        row["worst_index"] = list(idx)
        row["top_contributions"] = _top(res, output, idx, top_k) if top_k else []
    if est is not None:
        e = np.asarray(est[output], dtype=np.float64)
        with np.errstate(all="ignore"):
            row["estimate_max_abs"] = float(e.max()) if e.size else math.nan
            row["estimate_max_rel"] = float(np.where(np.isfinite(e), e / scale, np.inf).max()) if e.size \
                else math.nan
        row["prob"] = est.prob
    return row


# ---------------------------------------------------------------------------
# text and files
# ---------------------------------------------------------------------------
def _share(s: float) -> str:
    return "<1%" if 0 < s < 0.005 else f"{s:.0%}"


def _top_text(top) -> str:
    return ", ".join(f"{n} ({op}) {_share(s)}" for n, op, s in top) or "(none)"


def _row_lines(row, S) -> list:
    out = [f"  output {row['output']} [{row['shape']}]:"]
    if row["inf_elements"] == row["elements"] and row["elements"]:
        out.append(f"    every element's bound is infinite ({row['elements']} elements): "
                   f"{_inf_text(row['inf_sources'])}")
        return out
    inf_note = (f" ({row['inf_elements']} infinite; over the finite ones {_fmt(row['max_finite_bound'])})"
                if row["inf_elements"] else "")
    out.append(f"    max abs bound          {_fmt(row['max_abs_bound'])}{inf_note}")
    out.append(f"    max rel bound          {_fmt(row['max_rel_bound'])}"
               f"   (B / max(|reference|, {S.smallest_normal:.4g}))")
    if row["prob"] is not None:
        out.append(f"    estimate (not a bound) {_fmt(row['estimate_max_abs'])} abs, "
                   f"{_fmt(row['estimate_max_rel'])} rel   (prob {row['prob']:g})")
    t = row["tightness"]
    if isinstance(t, str):
        why = "numlab's run is exact there" if t == "inf" else "no finite bound and error to compare"
        out.append(f"    tightness              {t}   ({why})")
    else:
        out.append(f"    tightness              {t:.3g}   (max B / max |numlab {row['mode']} - reference| = "
                   f"{_fmt(row['max_finite_bound'] if row['inf_elements'] else row['max_abs_bound'])} / "
                   f"{_fmt(row['max_run_error'])})")
    if row["run_exceeds_bound"]:
        out.append(f"    numlab's run exceeds the bound at {row['run_exceeds_bound']} elements "
                   f"(contract {row['contract']}: numlab's kernels may not honour it)")
    out.append(f"    inf elements           {row['inf_elements']} of {row['elements']}"
               + (f": {_inf_text(row['inf_sources'])}" if row["inf_elements"] else ""))
    top = row["top_contributions"]
    if top is None:
        out.append("    top contributions      n/a (ContractBound.budget() is not in this build)")
    elif row["worst_index"] is not None and top:
        out.append(f"    top at {tuple(row['worst_index'])}: {_top_text(top)}")
    return out


def _csv_value(key, v):
    if key == "inf_sources":
        return _inf_text(v) if v else ""
    if key == "top_contributions":
        return "" if v is None else "; ".join(f"{n} ({op}) {s:.4f}" for n, op, s in v)
    if key == "worst_index":
        return "" if v is None else str(tuple(v))
    if v is None:
        return ""
    if isinstance(v, float):
        return "inf" if math.isinf(v) else ("nan" if math.isnan(v) else repr(v))
    return v


def _check_out(args):
    if args.out is None:
        if args.force:
            raise ValueError("--force applies to --out DIR (bound.csv and bound.json); give --out")
        return None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {str(out)!r} exists and is not a directory")
    there = [f for f in FILES if (out / f).exists()]
    if there and not args.force:
        raise FileExistsError(f"--out {str(out)!r} already holds {there}; use --force to overwrite them")
    return out


def _versions() -> dict:
    return {"numlab": __version__, "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
            "python": platform.python_version()}


def _write(out: Path, rows, meta) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "bound.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([_csv_value(k, r[k]) for k in COLUMNS])
    with open(out / "bound.json", "w") as fh:
        fh.write(strict_json.dumps({"file": "bound.csv", **meta, "columns": list(COLUMNS), "row_count": len(rows),
                                    "rows": rows}, indent=1) + "\n")


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------
def _run_mode(graph, inputs, mode, args, ref):
    """(bound, estimate or None, numlab's run) of one mode."""
    fusion = args.fusion if mode != "eager" else None
    kw = dict(fusion=fusion, contract=args.contract, kernels=args.kernels, library=args.library)
    res = contract_bound(graph, inputs, mode=mode, fmt=args.fmt, **kw)
    est = None if args.prob is None else contract_bound(graph, inputs, mode=mode, fmt=args.fmt, prob=args.prob,
                                                        **kw)
    if mode == "eager":  # eager's kernels are the library's: a warning about them names --library
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NoEffectWarning)
            mine = run(graph, inputs, mode=mode, fmt=args.fmt, kernels=args.library)
        for w in caught:
            m = w.message
            if isinstance(m, NoEffectWarning) and m.arg == "kernels":
                m = NoEffectWarning(str(m).replace("kernels:", "library:", 1), arg="library", fields=m.fields,
                                    value=m.value, cli=m.cli.replace("--kernels", "--library", 1))
            warnings.warn(m, stacklevel=1)
    else:
        mine = run(graph, inputs, mode=mode, fmt=args.fmt, kernels=args.kernels, library=args.library,
                   fusion=fusion)
    return res, est, mine


def main(args) -> int:
    if args.model is None:
        raise ValueError("MODEL (or --graph MODULE:FUNCTION) is required; see `numlab bound --help`")
    modes = args.mode
    if args.fusion is not None and modes == ("eager",):
        raise ValueError(f"--fusion {args.fusion.spec!r} applies to --mode fused, emulated_casts or all "
                         "(eager runs every operator as a library kernel)")
    out = _check_out(args)  # refuse existing files before computing
    contract = Contract.parse(args.contract, kernels=args.kernels, library=args.library, arg="--contract")
    graph, inputs = graph_and_inputs(args)
    S = args.fmt
    ref = run(graph, inputs, mode="reference", fmt=S).outputs
    lines, rows = [], []
    head = (f"numlab bound {args.model}: fmt={S.name} mode={','.join(modes)} inputs={args.inputs} "
            f"seed={args.seed}")
    if args.fusion is not None:
        head += f" fusion={args.fusion.spec}"
    if args.prob is not None:
        head += f" prob={args.prob:g}"
    lines.append(head)
    for mode in modes:
        res, est, mine = _run_mode(graph, inputs, mode, args, ref)
        lines.append(res.header())
        mine_rows = [_summary(mode, o, res, est, mine.outputs[o], ref[o], S, args.top) for o in res]
        for row in mine_rows:
            lines.extend(_row_lines(row, S))
        if len(mine_rows) > 1 and all(r["elements"] and r["inf_elements"] == r["elements"] for r in mine_rows):
            lines.append(f"  mode {mode}: every bound is infinite, so nothing is bounded here: "
                         f"{_inf_text(res.inf_sources())}")
        rows.extend(mine_rows)
    if out is not None:  # written before printing: a closed stdout cannot lose them
        meta = {"command": "numlab bound", "model": args.model,
                "contract": {"name": contract.name, "spec": contract.spec, "header": contract.header(),
                             "source": contract.source},
                "options": {"fmt": S.name, "modes": list(modes), "inputs": str(args.inputs), "seed": args.seed,
                            "sizes": args.size, "fusion": None if args.fusion is None else args.fusion.spec,
                            "kernels": None if args.kernels is None else args.kernels.spec,
                            "library": None if args.library is None else args.library.spec,
                            "contract": args.contract, "prob": args.prob, "top": args.top},
                "versions": _versions()}
        _write(out, rows, meta)
    print("\n".join(lines))
    if out is not None:
        print(f"wrote {out / FILES[0]} and {out / FILES[1]}")
    return 0
