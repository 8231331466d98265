"""The option group every subcommand shares, and its validation.

One spelling per setting across ``numlab`` subcommands (each takes the ones
that apply to it)::

    MODEL                 positional: a zoo model, a claims model
                          (numlab.claims.EXTRA_MODELS), or "module:function"
    --dtype FMT           storage format S
    --size NAME=INT       model size, repeatable (NAME=INT,NAME=INT also works)
    --inputs KIND|FILE    input kind (numlab.zoo.KINDS), or a .npz file / a
                          directory of .npy files (commands that run one graph)
    --fusion SPEC         fusion spec (FusionOptions.parse), default "autofuse"
    --kernels SPEC        kernel spec (KernelSpec.parse)
    --seed N              seed of the inputs (an integer >= 0)
    --out DIR             where results go
    --force               overwrite existing results

``MODEL`` as ``module:function``: ``module`` is imported (it must be on
``sys.path``, e.g. via ``PYTHONPATH``) and ``function`` is called with the
``--size`` values as keyword arguments; it must return a numlab ``Graph``
(e.g. built with :func:`numlab.graph.trace`), exactly like the zoo's own
factories (:func:`numlab.zoo.model_factory`).

:func:`add_shared` registers the ones a subcommand takes, each with an
argparse ``type=`` converter that raises ``ArgumentTypeError`` naming the
option, the value and the valid choices, so a bad value stops at parse time
(exit 2).  After parsing ``args.fusion`` is a
:class:`~numlab.fusion.FusionOptions` (None when not given), ``args.kernels`` a
:class:`~numlab.kernels.KernelSpec`, ``args.dtype`` a Format, ``args.size``
a dict, ``args.inputs`` a kind string (a comma list where the command
cycles over kinds) or a :class:`pathlib.Path`.  :func:`coerce` (called by
:func:`numlab.cli.main`) finishes the job (merges ``--size``, flattens
repeated ``--fusion`` lists) and is idempotent.  :func:`join_spec_values`
lets a spec value that starts with ``--`` follow ``--fusion`` after a space.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import zoo
from ..claims import EXTRA_MODELS, all_models
from ..formats import FORMATS, get_format
from ..fusion import DEFAULT_SPEC, FusionOptions, split_specs
from ..kernels import KernelSpec

__all__ = ["SPEC_OPTIONS", "FUSION_HELP", "KERNELS_HELP", "GRAMMAR", "add_shared", "coerce", "join_spec_values",
           "resolve_model", "build_model", "model_inputs", "arg_type", "nonneg_int", "seed_type", "dtype_type",
           "models_type", "fusion_type", "fusion_list_type", "kernels_type", "size_type", "model_type",
           "MODEL_HELP"]

SPEC_OPTIONS = ("--fusion", "--kernels", "--library")
"""Options whose value is a spec and may start with ``--`` (joined by
:func:`join_spec_values`)."""

FUSION_HELP = (f"fusion spec (default {DEFAULT_SPEC!r}): autofuse | inductor | off, optionally "
               "autofuse:FLAGS and +decompose/+nodecompose; grammar in `numlab --help`")
KERNELS_HELP = ("kernel spec: handwritten | codegen, optionally :field=value,...; grammar in "
                "`numlab --help`")
MODEL_HELP = ("a zoo model (numlab.zoo.MODELS), a claims model (numlab.claims.EXTRA_MODELS), or "
              "module:function returning a numlab Graph, called with the --size values")

GRAMMAR = """\
MODEL              a zoo model, a claims model, or module:function (a function
                   importable from sys.path, called with the --size values as
                   keyword arguments, returning a numlab Graph)
--dtype FMT        storage format S: fp16, bf16, fp32, fp8 formats, ...
--size NAME=INT    a model size, repeatable (NAME=INT,NAME=INT also works)
--inputs KIND|FILE input kind: normal, uniform, shifted_mean, near_overflow,
                   heavy_tailed; or (run, bisect) a .npz of named arrays or a
                   directory of NAME.npy files, checked against the graph
--fusion SPEC      fusion spec (below); default autofuse, printed in every header
--kernels SPEC     kernel spec (below)
--seed N           seed of the inputs, an integer >= 0
--out DIR          where results go
--force            overwrite existing results (never replaced otherwise)
--models A,B       (demo only: it runs several models) comma list of models
A spec value may start with '--' after a space (--fusion --autofuse_enable_pass=reduce)."""

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


# ---------------------------------------------------------------------------
# argparse type= converters: each raises ArgumentTypeError naming the option
# ---------------------------------------------------------------------------
def arg_type(option: str, fn, name: str | None = None):
    """An argparse ``type=`` converter calling ``fn(value)``; a ValueError or
    TypeError becomes ArgumentTypeError whose message names ``option`` (and
    the value) even when ``fn``'s message does not."""

    def convert(value):
        try:
            return fn(value)
        except (ValueError, TypeError) as exc:
            msg = str(exc)
            if option not in msg:
                msg = f"{option} {value!r}: {msg}"
            raise argparse.ArgumentTypeError(msg) from None

    convert.__name__ = name or option.lstrip("-")
    return convert


def _nonneg_int(option: str):
    def conv(value):
        try:
            v = int(value)
        except ValueError:
            v = -1
        if v < 0:
            raise ValueError(f"{option} must be an integer >= 0, got {value}")
        return v

    return conv


def nonneg_int(option: str):
    """A ``type=`` converter for an integer option >= 0 (``--seed``, ...)."""
    return arg_type(option, _nonneg_int(option))


seed_type = nonneg_int("--seed")


def dtype_type(choices=None, option: str = "--dtype"):
    """``--dtype`` converter: a Format (any of numlab.formats.FORMATS), or,
    with ``choices``, the name checked against them."""
    if choices is None:
        return arg_type(option, lambda v: get_format(v, option))

    def conv(v):
        if v not in choices:
            raise ValueError(f"{option} {v!r} is not valid; valid choices: {list(choices)}")
        return v

    return arg_type(option, conv)


def _model(value: str) -> str:
    if value in all_models():
        return value
    if ":" not in value:
        raise ValueError(f"MODEL {value!r} is not known; valid models: {sorted(all_models())}, or "
                         "module:function (a function of the --size values returning a Graph)")
    zoo.model_factory(value, "MODEL")  # import it now: a bad module or function stops here
    return value


model_type = arg_type("MODEL", _model, "MODEL")


def models_type(value: str) -> list[str]:
    """``--models a,b`` (commands that take several models): zoo names."""
    items = [m.strip() for m in value.split(",") if m.strip()]
    bad = [m for m in items if m not in zoo.MODELS]
    if bad or not items:
        raise argparse.ArgumentTypeError(
            f"--models {value!r}: {bad or 'nothing'} not a zoo model; valid: {sorted(zoo.MODELS)}")
    return items


def _size(value: str) -> dict:
    sizes = zoo.parse_sizes(value, "--size")
    for k in sizes:
        if not k.isidentifier():
            raise ValueError(f"--size {value!r}: {k!r} is not a size name (NAME=INT, e.g. --size hidden=64)")
    return sizes


size_type = arg_type("--size", _size)


def _inputs(multi: bool, files: bool):
    what = "a comma list of input kinds" if multi else "an input kind"

    def conv(value: str):
        kinds = [k.strip() for k in value.split(",") if k.strip()]
        if kinds and all(k in zoo.KINDS for k in kinds) and (multi or len(kinds) == 1):
            return ",".join(kinds)
        p = Path(value)
        if files and (p.suffix == ".npz" or p.is_dir() or p.exists()):
            if not (p.is_dir() or (p.is_file() and p.suffix == ".npz")):
                raise ValueError(f"--inputs {value!r}: no such .npz file or directory of .npy files")
            return p
        bad = [k for k in kinds if k not in zoo.KINDS] or kinds
        tail = " or a .npz file / a directory of NAME.npy files" if files else ""
        raise ValueError(f"--inputs {value!r}: {bad} not {what}; valid kinds: {list(zoo.KINDS)}{tail}")

    return arg_type("--inputs", conv, "inputs")


def _fusion(value: str) -> FusionOptions:
    return FusionOptions.parse(value, arg="--fusion")


def _fusion_list(value: str) -> list[FusionOptions]:
    return [FusionOptions.parse(s, arg="--fusion") for s in split_specs(value)]


fusion_type = arg_type("--fusion", _fusion)
fusion_list_type = arg_type("--fusion", _fusion_list)


def kernels_type(option: str = "--kernels"):
    return arg_type(option, lambda v: KernelSpec.parse(v, arg=option))


# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------
def add_shared(p: argparse.ArgumentParser, *, model=_UNSET, dtype=_UNSET, size=_UNSET, inputs=_UNSET,
               fusion=_UNSET, kernels=_UNSET, seed=_UNSET, out=_UNSET, force=_UNSET,
               inputs_multi: bool = False, inputs_files: bool = False, model_required: bool = True) -> None:
    """Register the shared options on subparser ``p``.

    Each keyword left out is not registered; given, it is the help text's
    subject and default: ``model`` (help str, or True; ``MODEL`` positional,
    optional when not ``model_required``), ``dtype`` / ``inputs`` / ``seed``
    / ``out`` (default value), ``size`` / ``fusion`` / ``kernels`` /
    ``force`` (help suffix, or True).  ``inputs_multi``: ``--inputs`` takes
    a comma list of kinds (the command cycles over them); ``inputs_files``:
    it also takes a ``.npz`` file or a directory of ``.npy`` files.
    """
    if model is not _UNSET:
        p.add_argument("model", nargs=None if model_required else "?", default=None, metavar="MODEL",
                       type=model_type, help=model if isinstance(model, str) else MODEL_HELP)
    if dtype is not _UNSET:
        p.add_argument("--dtype", default=dtype, metavar="FMT", type=dtype_type(),
                       help=f"storage format S, one of {', '.join(FORMATS)}" + (f" (default {dtype})" if dtype else ""))
    if size is not _UNSET:
        p.add_argument("--size", action="append", default=[], metavar="NAME=INT", type=size_type,
                       help="model size, e.g. --size hidden=256 (repeatable)" + _suffix(size))
    if inputs is not _UNSET:
        metavar = ("KIND[,KIND...]" if inputs_multi else "KIND") + ("|FILE" if inputs_files else "")
        extra = (" or a .npz file of named arrays / a directory of NAME.npy files (names and shapes "
                 "checked against the graph)") if inputs_files else ""
        p.add_argument("--inputs", default=inputs, metavar=metavar, type=_inputs(inputs_multi, inputs_files),
                       help=f"input kind{'s' if inputs_multi else ''}: {', '.join(zoo.KINDS)}{extra} "
                            f"(default {inputs})")
    if fusion is not _UNSET:
        p.add_argument("--fusion", default=None, metavar="SPEC", type=fusion_type,
                       help=FUSION_HELP + _suffix(fusion))
    if kernels is not _UNSET:
        p.add_argument("--kernels", default=None, metavar="SPEC", type=kernels_type(),
                       help=KERNELS_HELP + _suffix(kernels))
    if seed is not _UNSET:
        p.add_argument("--seed", type=seed_type, default=seed, metavar="N",
                       help=seed if isinstance(seed, str) and not seed.isdigit()
                       else f"seed of the inputs, an integer >= 0 (default {seed})")
    if out is not _UNSET:
        p.add_argument("--out", default=out, metavar="DIR", help=f"output directory (default {out})")
    if force is not _UNSET:
        p.add_argument("--force", action="store_true", help="overwrite existing results" + _suffix(force))


def _suffix(x) -> str:
    return f" {x}" if isinstance(x, str) and x else ""


# ---------------------------------------------------------------------------
# after parsing
# ---------------------------------------------------------------------------
def resolve_model(args, models=None) -> str | None:
    """The ``MODEL`` positional (None when not given), checked against
    ``models`` when given."""
    m = getattr(args, "model", None)
    if m is not None and models is not None and m not in models:
        raise ValueError(f"MODEL {m!r} is not known; valid models: {sorted(models)}")
    return m


def build_model(model: str | None, sizes: dict):
    """The graph of ``MODEL`` with the ``--size`` values: a zoo model, a
    claims model or ``module:function``.  ValueError names MODEL or --size."""
    if not model:
        raise ValueError(f"MODEL is required; valid: {sorted(all_models())} or module:function")
    factory = EXTRA_MODELS[model] if model in EXTRA_MODELS and model not in zoo.MODELS else None
    try:
        if factory is not None:
            return factory(**sizes)
        return zoo.get_model(model, arg="MODEL", **sizes)
    except TypeError as exc:
        # only the factory's own signature error is a bad --size; any other TypeError
        # (a bug inside a user's module:function, a non-Graph result) propagates as it is
        if "unexpected keyword argument" not in str(exc):
            raise
        raise ValueError(f"--size {sizes}: not valid for MODEL {model!r} ({exc})") from None
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(("MODEL", "--size")) else f"--size {sizes}: {msg}") from None


def model_inputs(graph, args) -> dict:
    """The inputs ``--inputs`` names for ``graph``: drawn with
    ``--seed`` for a kind, read (and checked) from a file or directory."""
    if isinstance(args.inputs, Path):
        return zoo.load_inputs(graph, args.inputs, "--inputs")
    return zoo.make_inputs(graph, kind=args.inputs, seed=args.seed)


def coerce(args: argparse.Namespace) -> argparse.Namespace:
    """Finish the shared options after parsing, in place (idempotent: the
    converters already ran): ``size`` list of dicts -> one dict; ``fusion``
    repeated lists (check plan) -> one flat list; a string left by a caller
    that built the Namespace itself is converted as the parser would."""
    ns = vars(args)
    if isinstance(ns.get("size"), list):
        merged = {}
        for d in args.size:
            merged.update(d if isinstance(d, dict) else size_type(d))
        args.size = merged
    f = ns.get("fusion")
    if isinstance(f, list):
        args.fusion = [o for v in f for o in (v if isinstance(v, list) else _fusion_list(v)
                                                if isinstance(v, str) else [v])]
    elif isinstance(f, str):
        args.fusion = _fusion(f)
    for opt in ("kernels", "library"):
        if isinstance(ns.get(opt), str):
            setattr(args, opt, KernelSpec.parse(ns[opt], arg=f"--{opt}"))
    if isinstance(ns.get("dtype"), str):
        args.dtype = get_format(args.dtype, "--dtype")
    return args
