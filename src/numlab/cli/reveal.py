"""``numlab reveal``: reveal the summation order of a black-box reduction.

Examples::

    numlab reveal torch.sum --n 1000 --fmt fp32
    numlab reveal numpy.sum --n 5000 --fmt fp16 --check-rows 20000
    numlab reveal 'torch.compile(torch.sum)' --n 1000

Prints the revealed tree (compact form), the probe count and the bitwise
check on random rows.  Exit code 0 when the revealed order reproduces the
function on every check row, 1 when it does not (or the probes are not those
of a summation tree), 2 on bad arguments.
"""

from __future__ import annotations

import sys

from ..kernels.orders.reveal import INPUT_FORMATS, RevealError
from ..kernels.orders.reveal import check as check_order
from ..kernels.orders.reveal import reveal as reveal_tree
from ..torch.reveal import FUNCTIONS, black_box
from .options import fmt_type, seed_type

ACCS = ("fp32", "fp64", "fp16", "bf16")


def _int_opt(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} {v!r} is not valid; it must be an integer >= {lo}")
    return v


def reveal_report(func: str, n: int, fmt: str, *, check_rows: int = 10_000, seed: int = 0,
                  acc: str = "fp32", width: int = 400) -> tuple[str, int]:
    """The text ``numlab reveal`` prints and its exit code (0 reproduced, 1 not)."""
    if func not in FUNCTIONS:
        raise ValueError(f"FUNC {func!r} is not valid; valid choices: {list(FUNCTIONS)}")
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"--fmt {fmt!r} is not valid; valid choices: {list(INPUT_FORMATS)}")
    if acc not in ACCS:
        raise ValueError(f"--acc {acc!r} is not valid; valid choices: {list(ACCS)}")
    _int_opt("--n", n, 1)
    _int_opt("--check-rows", check_rows, 1)
    _int_opt("--seed", seed, 0)
    box = black_box(func)
    head = f"numlab reveal {func} --n {n} --fmt {fmt} (accumulator {acc})"
    try:
        r = reveal_tree(box, n, fmt, check_rows=0)
    except RevealError as exc:
        return f"{head}\nnot a summation tree: {exc}", 1
    res = check_order(box, r.order, n, fmt, rows=check_rows, seed=seed, acc=acc)
    lines = [head,
             f"order  {r.order.summary(width)}",
             f"probes {r.probes} probe rows in {r.calls} calls (n log2 n = "
             f"{n * max(1, (n - 1).bit_length())})",
             f"depth  {r.order.depth(n)}; nodes by number of children {dict(sorted(r.order.arities().items()))}",
             str(res),
             "reproduced bit for bit" if res.ok else "NOT reproduced: the revealed order differs from the function"]
    return "\n".join(lines), 0 if res.ok else 1


def _main(args) -> int:
    text, rc = reveal_report(args.function, args.n, args.fmt.name, check_rows=args.check_rows,
                             seed=args.seed, acc=args.acc, width=args.width)
    print(text)
    sys.stdout.flush()
    return rc


def add_parser(sub) -> None:
    p = sub.add_parser("reveal", help="reveal the summation order of torch/numpy reductions by probing",
                       description="Reveal the summation tree of a black-box reduction by probing "
                                   "(FPRev, https://arxiv.org/abs/2411.00442) and check it bit for bit "
                                   "on random rows.  Exit code 0 when it reproduces the function, 1 "
                                   "when not, 2 on bad arguments.")
    p.add_argument("function", metavar="FUNC", help=f"one of {list(FUNCTIONS)}")
    p.add_argument("--n", type=int, required=True, help="row length (elements summed)")
    p.add_argument("--fmt", default="fp32", metavar="FMT", type=fmt_type(INPUT_FORMATS),
                   help=f"input format: {', '.join(INPUT_FORMATS)} (default fp32)")
    p.add_argument("--acc", default="fp32", help=f"accumulator of the revealed tree in the check: "
                                                 f"{', '.join(ACCS)} (default fp32)")
    p.add_argument("--check-rows", type=int, default=10_000, help="random rows checked (default 10000)")
    p.add_argument("--seed", type=seed_type, default=0, metavar="N",
                   help="seed of the check rows, an integer >= 0 (default 0)")
    p.add_argument("--width", type=int, default=400, help="characters of the printed tree (default 400)")
    p.set_defaults(func=_main)
