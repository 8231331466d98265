"""``numlab formats``: the formats table, how each format encodes its special
values, and a rounding demo (:func:`numlab.experiments.formats_table`,
:func:`encodings_table`, :func:`numlab.experiments.rounding_demo`)."""

from __future__ import annotations

from ..experiments import formats_table, rounding_demo
from ..formats import FORMATS
from ..report import Column, render_table
from ..rounding import ROUNDINGS
from .options import seed_type

__all__ = ["add_parser", "encodings_table"]

_NAN = {"ieee": "top exponent", "extended": "all-ones code", "negzero": "the -0 code", "none": "none"}

ENCODINGS_LEGEND = (
    ("bits", "width of a code (fp6/fp4 codes fill the low bits of a byte)"),
    ("NaN", "where NaN is encoded: the top exponent field (IEEE), only the all-ones code, "
            "the code of -0 (fnuz), or none"),
    ("-0", "whether -0 is a value (else a zero result is +0)"),
    ("signed", "whether codes have a sign bit (E8M0 has none: negative inputs give NaN)"),
    ("zero", "whether 0 is a value (E8M0: values below 2**-127 round to it, 0 gives NaN)"),
    ("overflow", "what rounding to nearest gives above max (saturate=True gives max)"),
)


def encodings_table(*, width=None, plain=None) -> str:
    """How each format encodes inf, NaN, -0 and the sign, and what overflow
    gives (a terminal table with its legend)."""
    rows = []
    for f in FORMATS.values():
        over = "inf" if f.inf else "NaN" if f.nan != "none" else "max (saturates)"
        rows.append({"name": f.name, "bits": "-" if f.bits is None else str(f.bits), "nan": _NAN[f.nan],
                     "negzero": "yes" if f.negzero else "no", "signed": "yes" if f.signed else "no",
                     "zero": "yes" if f.zero else "no", "over": over})
    cols = [Column("name", "format", key_col=True), Column("bits", "bits", justify="right"),
            Column("nan", "NaN"), Column("negzero", "-0"), Column("signed", "signed"),
            Column("zero", "zero"), Column("over", "overflow")]
    return render_table(rows, cols, legend=ENCODINGS_LEGEND, width=width, plain=plain,
                        title="special values of each format")


def add_parser(sub) -> None:
    p = sub.add_parser("formats", help=f"the formats table, their special values and where each rounding "
                                       f"mode ({', '.join(ROUNDINGS)}) sends --x in each storage format")
    p.add_argument("--x", type=float, default=0.1, help="value to round (default 0.1)")
    p.add_argument("--seed", type=seed_type, default=0, metavar="N",
                   help="seed for stochastic rounding, an integer >= 0 (default 0)")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    print(formats_table() + "\n\n" + encodings_table() + "\n\n" + rounding_demo(args.x, args.seed))
    return 0
