"""The option group every subcommand shares, and its coercion.

One spelling per setting across ``numlab`` subcommands::

    MODEL                 positional (``--model M`` is accepted too)
    --dtype FMT           storage format S
    --size NAME=INT       model size, repeatable (``a=1,b=2`` also works)
    --inputs KIND         input distribution (numlab.zoo.KINDS)
    --fusion SPEC         fusion spec (FusionOptions.parse), default "autofuse"
    --kernels SPEC        kernel spec (KernelSpec.parse)
    --seed N              seed
    --out DIR             where results go
    --force               overwrite existing results

:func:`add_shared` registers the ones a subcommand takes; :func:`coerce`
(called by :func:`numlab.cli.main` after parsing) replaces the strings by
the objects of the one parser of each spec (``args.fusion`` becomes a
:class:`~numlab.fusion.FusionOptions`, ``args.kernels`` a
:class:`~numlab.kernels.KernelSpec`, ``args.dtype`` a Format, ``args.size``
a dict), so every command keeps the object and every error names the CLI
option, the value and the valid choices.  :func:`join_spec_values` lets a
spec value that starts with ``--`` follow ``--fusion`` after a space.
"""

from __future__ import annotations

import argparse

from .. import zoo
from ..formats import get_format
from ..fusion import DEFAULT_SPEC, FusionOptions, split_specs
from ..kernels import KernelSpec

__all__ = ["SPEC_OPTIONS", "FUSION_HELP", "KERNELS_HELP", "add_shared", "coerce", "join_spec_values",
           "resolve_model"]

SPEC_OPTIONS = ("--fusion", "--kernels", "--library")
"""Options whose value is a spec and may start with ``--`` (joined by
:func:`join_spec_values`)."""

FUSION_HELP = (f"fusion spec (default {DEFAULT_SPEC!r}): autofuse | inductor | off, optionally "
               "autofuse:FLAGS and +decompose/+nodecompose; grammar in `numlab --help`")
KERNELS_HELP = ("kernel spec: handwritten | codegen, optionally :field=value,...; grammar in "
                "`numlab --help`")

_UNSET = object()


def join_spec_values(argv: list[str]) -> list[str]:
    """``["--fusion", "--x=y"]`` -> ``["--fusion=--x=y"]``: a spec option
    always takes the next token as its value, even when it starts with
    ``--`` (argparse would read it as an option and fail with "expected one
    argument").  Tokens after a bare ``--`` are left alone."""
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            out.extend(argv[i:])
            break
        if tok in SPEC_OPTIONS and i + 1 < len(argv):
            out.append(f"{tok}={argv[i + 1]}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def add_shared(p: argparse.ArgumentParser, *, model=_UNSET, dtype=_UNSET, size=_UNSET, inputs=_UNSET,
               fusion=_UNSET, kernels=_UNSET, seed=_UNSET, out=_UNSET, force=_UNSET) -> None:
    """Register the shared options on subparser ``p``.

    Each keyword left out is not registered; given, it is the help text's
    subject and default: ``model`` (help str; ``MODEL`` positional plus
    ``--model``), ``dtype`` / ``inputs`` / ``seed`` / ``out`` (default
    value), ``size`` / ``fusion`` / ``kernels`` / ``force`` (help suffix, or
    True).  ``inputs`` may be a tuple ``(default, extra option strings)`` to
    keep an older spelling working (e.g. ``("normal", ["--kind"])``).
    """
    if model is not _UNSET:
        p.add_argument("model", nargs="?", default=None, metavar="MODEL",
                       help=model if isinstance(model, str) else "a zoo model (numlab.zoo.MODELS)")
        p.add_argument("--model", dest="model_opt", default=None, metavar="MODEL", help=argparse.SUPPRESS)
    if dtype is not _UNSET:
        p.add_argument("--dtype", default=dtype, metavar="FMT",
                       help=f"storage format S (default {dtype})" if dtype else "storage format S")
    if size is not _UNSET:
        p.add_argument("--size", action="append", default=[], metavar="NAME=INT",
                       help="model size, e.g. --size hidden=256 (repeatable)" + _suffix(size))
    if inputs is not _UNSET:
        default, extra = inputs if isinstance(inputs, tuple) else (inputs, [])
        p.add_argument("--inputs", *extra, dest="inputs", default=default, metavar="KIND",
                       help=f"input kind: {', '.join(zoo.KINDS)} (default {default})")
    if fusion is not _UNSET:
        p.add_argument("--fusion", default=None, metavar="SPEC", help=FUSION_HELP + _suffix(fusion))
    if kernels is not _UNSET:
        p.add_argument("--kernels", default=None, metavar="SPEC", help=KERNELS_HELP + _suffix(kernels))
    if seed is not _UNSET:
        p.add_argument("--seed", type=int, default=seed, help=f"seed (default {seed})")
    if out is not _UNSET:
        p.add_argument("--out", default=out, metavar="DIR", help=f"output directory (default {out})")
    if force is not _UNSET:
        p.add_argument("--force", action="store_true", help="overwrite existing results" + _suffix(force))


def _suffix(x) -> str:
    return f" {x}" if isinstance(x, str) and x else ""


def resolve_model(args, models=None) -> str | None:
    """The model from ``MODEL`` or ``--model`` (not both, unless equal);
    None when neither is given."""
    pos, opt = getattr(args, "model", None), getattr(args, "model_opt", None)
    if pos is not None and opt is not None and pos != opt:
        raise ValueError(f"MODEL {pos!r} and --model {opt!r} disagree; give the model once")
    m = pos if pos is not None else opt
    if m is not None and models is not None and m not in models:
        raise ValueError(f"MODEL {m!r} is not known; valid models: {sorted(models)}")
    return m


def coerce(args: argparse.Namespace) -> argparse.Namespace:
    """Replace the shared options' strings by their objects, in place.

    ``fusion`` -> FusionOptions (``None`` stays None: "not given"; a
    command that needs options uses :meth:`FusionOptions.parse` (``None`` ->
    the default)); ``fusion_list`` (check plan) -> list of FusionOptions;
    ``kernels`` / ``library`` -> KernelSpec; ``dtype`` -> Format;
    ``size`` -> dict; ``inputs`` checked against :data:`numlab.zoo.KINDS`
    (a comma list where the command cycles over kinds); ``model`` merged
    with ``--model``.  ValueError names the CLI option."""
    ns = vars(args)
    if "model_opt" in ns:
        args.model = resolve_model(args)
    if ns.get("fusion") is not None:
        if isinstance(args.fusion, list):  # repeatable, each a comma list of specs
            args.fusion = [FusionOptions.parse(s, arg="--fusion") for v in args.fusion for s in split_specs(v)]
        elif isinstance(args.fusion, str):
            args.fusion = FusionOptions.parse(args.fusion, arg="--fusion")
    for opt in ("kernels", "library"):
        if isinstance(ns.get(opt), str):
            setattr(args, opt, KernelSpec.parse(ns[opt], arg=f"--{opt}"))
    if isinstance(ns.get("dtype"), str):
        try:
            args.dtype = get_format(args.dtype, "--dtype")
        except (TypeError, ValueError) as exc:
            msg = str(exc)
            raise ValueError(msg if msg.startswith("--dtype") else f"--dtype {args.dtype!r}: {msg}") from None
    if isinstance(ns.get("size"), list):
        args.size = zoo.parse_sizes(args.size, "--size")
    if isinstance(ns.get("inputs"), str):
        kinds = [k.strip() for k in args.inputs.split(",") if k.strip()]
        bad = [k for k in kinds if k not in zoo.KINDS]
        if bad or not kinds:
            raise ValueError(f"--inputs {args.inputs!r}: {bad or 'nothing'} not an input kind; valid kinds: "
                             f"{list(zoo.KINDS)}")
    return args
