"""The ``numlab`` command line (the top layer: may import every other layer).

Each subcommand lives in its own module of this package which defines
``add_parser(sub)`` (register an ``argparse`` subparser and set ``func``);
the options they share (model, ``--fmt``, ``--size``, ``--inputs``,
``--fusion``, ``--kernels``, ``--seed``, ``--out``, ``--force``) come from
:mod:`numlab.cli.options`, which also turns every spec into its object
before the subcommand runs.  ``numlab --help`` shows the fusion and kernel
spec grammars once.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings

from .. import __version__
from ..execute.liveness import NoEffectWarning
from ..fusion import GRAMMAR as FUSION_GRAMMAR
from ..kernels.grammar import GRAMMAR as KERNEL_GRAMMAR
from .options import GRAMMAR as OPTIONS_GRAMMAR
from .options import coerce, given_options, join_spec_values

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("numlab.cli.demo", "eager vs fused vs fp64 on the built-in models (table + figures in out/)"),
    "formats": ("numlab.cli.formats", "the formats table and a rounding demo"),
    "run": ("numlab.cli.run", "run one model in one mode, optionally dumping every node"),
    "compare": ("numlab.cli.compare", "msit-style dump compare: -gp GOLDEN -mp MINE -o OUT"),
    "bisect": ("numlab.cli.bisect", "find what causes a divergence between eager and fused"),
    "check": ("numlab.cli.check", "check a claim (or `check plan`, `check determinism`)"),
    "bound": ("numlab.cli.bound", "rigorous contract bounds |y_impl - y_exact| <= B per mode and output"),
    "race": ("numlab.cli.race", "multi-core race scenarios: run, detect, fix"),
    "reveal": ("numlab.cli.reveal", "reveal the summation order of a torch/numpy reduction by probing"),
    "calibrate": ("numlab.cli.calibrate", "detect, reveal and measure numlab's PyTorch model per ATen capability"),
    "bench": ("numlab.bench", "benchmarks, reported as ratios against numpy/ml_dtypes"),
    "mma": ("numlab.cli.mma", "matrix units (tensor cores): `mma sweep`, the DeepSeek-V3 K sweep, presets, claims"),
    "course": ("numlab.cli.course", "build the course: the notebooks executed, as static HTML pages with an index"),
}


EPILOG = (
    "options shared by the subcommands (each takes those that apply; `numlab COMMAND --help`):\n"
    + "\n".join("  " + line for line in OPTIONS_GRAMMAR.splitlines())
    + "\n\nfusion spec (--fusion; FusionOptions.parse):\n"
    + "\n".join("  " + line for line in FUSION_GRAMMAR.splitlines())
    + "\n\nkernel spec (--kernels; KernelSpec.parse):\n"
    + "\n".join("  " + line for line in KERNEL_GRAMMAR.splitlines())
)


class Parser(argparse.ArgumentParser):
    """argparse without prefix abbreviations (``--inp`` is not ``--inputs``):
    one spelling per option.  Subparsers (and theirs) are of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="numlab",
        description="numlab: why fused and eager kernels give different numbers, bit for bit.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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


@contextlib.contextmanager
def _no_effect_warnings():
    """Print each :class:`numlab.NoEffectWarning` of a command once on stderr,
    in the command line's words (``numlab: warning: --kernels mma=H100
    changes nothing: ...; use --library ...``); other warnings as usual."""
    seen = set()
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not isinstance(message, NoEffectWarning):
            return show(message, category, filename, lineno, file, line)
        if message.cli not in seen:
            seen.add(message.cli)
            print(f"numlab: warning: {message.cli}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always", NoEffectWarning)
        warnings.showwarning = showwarning
        yield


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    joined = join_spec_values(argv)
    try:
        args = parser.parse_args(joined)
    except SystemExit as exc:  # argparse: usage and "argument --fmt: ..." already on stderr
        if exc.code in (0, None):  # --help, --version
            raise
        return int(exc.code) if isinstance(exc.code, int) else 2
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    args.given_options = given_options(joined)  # a command refuses options given where they do not apply
    try:
        coerce(args)
        with _no_effect_warnings():
            rc = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as exc:
        print(f"numlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `numlab demo | head -1`: the reader left.  Every command writes its files before
        # printing, so nothing is lost: exit quietly (0, as `head` asked for no more), with
        # stdout pointed at devnull so the interpreter's final flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
