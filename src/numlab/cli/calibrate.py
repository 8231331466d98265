"""``numlab calibrate``: detection, order revelation and faithfulness on this machine.

Examples::

    numlab calibrate                                   # native, avx2 and default
    numlab calibrate --capabilities native --quick --out out/cal
    numlab calibrate --capabilities avx2 --cases sum,softmax --dtype fp32,bf16

For each capability (one subprocess each, its own ``TORCHINDUCTOR_CACHE_DIR``;
:mod:`numlab.torch.calibrate`): the machine header, per suite case x dtype x
length the modelled path and the bitwise share of eager and compiled against
real torch, and the revealed order of ``torch.sum`` and
``torch.compile(torch.sum)`` with its bitwise check.  Writes ``report.md``,
``results.csv``, ``orders.csv`` (header row first) and their JSON sidecars
``results.json`` and ``orders.json`` to ``--out``; existing
results are never overwritten (a fresh ``run-NNN`` subfolder, as ``numlab
demo`` does) unless ``--force``.  Exit 0, or 2 on bad arguments (the message
names the option).
"""

from __future__ import annotations

import shlex
import time

from ..torch.calibrate import (
    CAPABILITIES,
    CASES,
    calibrate,
    not_modelled,
    orders_summary,
    parse_capabilities,
    parse_cases,
    summary_table,
    write_report,
)
from .demo import resolve_out_dir
from .options import add_shared, arg_type

__all__ = ["add_parser", "main"]

DTYPES = ("fp32", "bf16", "fp16")


def _dtypes(spec: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in spec.split(",") if s.strip())
    bad = [s for s in items if s not in DTYPES]
    if bad or not items:
        why = f"{bad[0]!r} is not one" if bad else "it is empty"
        raise ValueError(f"--dtype {spec!r} is not valid ({why}); give a comma-separated "
                         f"list of {list(DTYPES)}")
    return items


def main(out="out/calibrate", *, force=False, capabilities="native,avx2,default", rows=10_000,
         cases=None, dtypes="fp32,bf16,fp16", quick=False, seed=0, command="", echo=print) -> dict:
    """Run the calibration and write the report; returns ``{"dir", "files", "calibration"}``."""
    caps = parse_capabilities(capabilities, "--capabilities")
    names = parse_cases(cases, "--cases")
    dts = _dtypes(dtypes)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"--rows {rows!r} is not valid; it must be an integer >= 1")
    outdir, note = resolve_out_dir(out, force)
    t0 = time.perf_counter()
    cal = calibrate(caps, cases=names, dtypes=dts, quick=quick, rows=rows, seed=seed, command=command,
                    echo=echo)
    files = write_report(cal, outdir)
    echo("")
    for c in caps:
        res = cal.results[c]
        echo(f"[{c}] skipped: {res['skipped']}" if "skipped" in res else f"[{c}] {res['header']}")
    echo("")
    echo(summary_table(cal))
    echo("")
    echo("not modelled (NotModelled raised, never a guess):")
    for line in not_modelled(cal):
        echo(f"  {line}")
    echo("")
    echo(orders_summary(cal))
    if note:
        echo(note)
    echo(f"wrote {', '.join(str(f) for f in files)} ({time.perf_counter() - t0:.0f} s)")
    return {"dir": outdir, "files": files, "calibration": cal}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="detect, reveal and measure numlab's PyTorch model on this machine, per ATen capability",
        description="Per ATen CPU capability (each in a subprocess): the machine, the modelled path of "
        "every case of the faithfulness suite and its bitwise share against torch eager and "
        "torch.compile, and the revealed order of torch.sum / torch.compile(torch.sum). Writes "
        "report.md, results.csv, orders.csv, results.json and orders.json to DIR; existing results are never "
        "overwritten: a fresh run-NNN subfolder is used unless --force. Needs torch.",
    )
    add_shared(p, seed=0, out="out/calibrate", force="(default: a fresh run-NNN subfolder)")
    p.add_argument("--capabilities", default="native,avx2,default", metavar="LIST",
                   help=f"comma-separated, of {', '.join(CAPABILITIES)} (default native,avx2,default)")
    p.add_argument("--rows", type=int, default=10_000, metavar="N",
                   help="random rows each revealed order (and the preset's) is checked on (default 10000)")
    p.add_argument("--cases", default=None, metavar="LIST",
                   help=f"comma-separated subset of the suite: {', '.join(CASES)} (default all)")
    p.add_argument("--dtype", dest="dtype_list", default="fp32,bf16,fp16", metavar="FMT[,FMT...]",
                   type=arg_type("--dtype", lambda v: ",".join(_dtypes(v)), "dtype"),
                   help="comma-separated tensor dtypes: fp32, bf16, fp16 (default all three)")
    p.add_argument("--quick", action="store_true",
                   help="reduction lengths 64 and 100 (not 1000), orders revealed at n=100 only")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    cmd = "numlab calibrate " + " ".join(shlex.quote(a) for a in _argv(args))
    main(args.out, force=args.force, capabilities=args.capabilities, rows=args.rows, cases=args.cases,
         dtypes=args.dtype_list, quick=args.quick, seed=args.seed, command=cmd.strip())
    return 0


def _argv(args) -> list[str]:
    """The options as given (defaults left out), for the report's header."""
    out = []
    for opt, dest, default in (("--capabilities", "capabilities", "native,avx2,default"),
                               ("--rows", "rows", 10_000), ("--cases", "cases", None),
                               ("--dtype", "dtype_list", "fp32,bf16,fp16"), ("--seed", "seed", 0),
                               ("--out", "out", "out/calibrate")):
        v = getattr(args, dest)
        if v != default:
            out += [opt, str(v)]
    out += ["--quick"] if args.quick else []
    out += ["--force"] if args.force else []
    return out
