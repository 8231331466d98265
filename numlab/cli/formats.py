"""``numlab formats``: the formats table and a rounding demo
(:func:`numlab.experiments.formats_table`, :func:`numlab.experiments.rounding_demo`)."""

from __future__ import annotations

from ..experiments import formats_table, rounding_demo
from ..rounding import ROUNDINGS
from .options import seed_type

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    p = sub.add_parser("formats", help=f"the formats table and where each rounding mode ({', '.join(ROUNDINGS)}) "
                                       "sends --x in each storage format")
    p.add_argument("--x", type=float, default=0.1, help="value to round (default 0.1)")
    p.add_argument("--seed", type=seed_type, default=0, metavar="N",
                   help="seed for stochastic rounding, an integer >= 0 (default 0)")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    print(formats_table() + "\n\n" + rounding_demo(args.x, args.seed))
    return 0
