"""The ``numlab`` command line.

Each subcommand lives in its own module which defines ``add_parser(sub)``
(register an ``argparse`` subparser and set ``func``) so that owners of
different layers do not edit one file.  Modules are imported only when their
subcommand is listed or run, keeping ``numlab --help`` fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("numlab.cli_demo", "eager vs fused vs fp64 on the built-in models (table + figures in out/)"),
    "formats": ("numlab.cli_formats", "the formats table and a rounding demo"),
    "run": ("numlab.compare.cli_run", "run a zoo model in one mode, optionally dumping every node"),
    "compare": ("numlab.compare.cli_compare", "msit-style dump compare: -gp GOLDEN -mp MINE -o OUT"),
    "bisect": ("numlab.compare.cli_bisect", "find what causes a divergence between eager and fused"),
    "check": ("numlab.cli_check", "check a claim (or `check plan`, `check determinism`)"),
    "race": ("numlab.cli_race", "multi-core race scenarios: run, detect, fix"),
    "bench": ("numlab.bench", "benchmarks, reported as ratios against numpy/ml_dtypes"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="numlab",
        description="numlab: why fused and eager kernels give different numbers, bit for bit.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"numlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (modname, help_) in SUBCOMMANDS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name is None or not modname.startswith(exc.name):
                raise
            p = sub.add_parser(name, help=f"{help_} (not available in this build)")
            p.set_defaults(func=_missing(name, modname))
            continue
        mod.add_parser(sub)
    return parser


def _missing(name: str, modname: str):
    def func(args) -> int:
        print(f"numlab {name}: module {modname} is not part of this build", file=sys.stderr)
        return 2

    return func


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        rc = args.func(args)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as exc:
        print(f"numlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `numlab compare ... | head`: the reader left; results were already saved.
        # Point stdout at devnull so the interpreter's final flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
