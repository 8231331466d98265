"""``numlab formats``: the formats table and a rounding demo."""

from __future__ import annotations

import numpy as np

from .formats import FORMATS
from .rounding import MODES, round_to


def formats_table() -> str:
    """The formats side by side, as plain text."""
    head = f"{'format':<9} {'p':>3} {'emin':>6} {'emax':>5} {'u':>10} {'max':>12} {'min normal':>11} {'min subnormal':>13}  inf"
    lines = [head, "-" * len(head)]
    for f in FORMATS.values():
        lines.append(
            f"{f.name:<9} {f.p:>3} {f.emin:>6} {f.emax:>5} {f.u:>10.3e} {f.max:>12.5g} "
            f"{f.smallest_normal:>11.3e} {f.smallest_subnormal:>13.3e}  {'yes' if f.inf else 'no'}"
        )
    return "\n".join(lines)


def rounding_demo(x: float = 0.1, seed: int = 0) -> str:
    """Where each mode sends ``x`` in each storage format."""
    rng = np.random.default_rng(seed)
    names = [n for n in FORMATS if n not in ("fp64", "fp32")]
    lines = [f"x = {x!r} rounded by each mode (stochastic with seed {seed})",
             f"{'mode':<11}" + "".join(f"{n:>16}" for n in names)]
    for mode in MODES:
        row = f"{mode:<11}"
        for n in names:
            v = round_to(x, n, mode, rng=rng if mode == "stochastic" else None)
            row += f"{float(v):>16.9g}"
        lines.append(row)
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("formats", help="the formats table and a rounding demo")
    p.add_argument("--x", type=float, default=0.1, help="value to round (default 0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed for stochastic rounding (default 0)")
    p.set_defaults(func=lambda a: print(formats_table() + "\n\n" + rounding_demo(a.x, a.seed)))
