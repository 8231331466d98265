"""The option group every subcommand shares, and its validation.

One spelling per setting across ``numlab`` subcommands (each takes the ones
that apply to it)::

    MODEL                 positional: a zoo model, a claims model
                          (numlab.claims.EXTRA_MODELS), or "module:function"
    --graph MODEL         the same thing as an option (one meaning, one
                          loader: :func:`load_graph`); give one of the two
    --fmt FMT             storage format S
    --size NAME=INT       model size, repeatable (NAME=INT,NAME=INT also works)
    --inputs KIND|FILE    input kind (numlab.zoo.INPUT_KINDS), or a .npz file / a
                          directory of .npy files (commands that run one graph)
    --fusion SPEC         fusion spec (FusionOptions.parse), default "autofuse"
    --kernels SPEC        kernel spec (KernelSpec.parse)
    --library SPEC        eager's library kernel spec (check CLAIM, bisect)
    --seed N              seed of the inputs (an integer >= 0)
    --out DIR             where results go
    --force               overwrite existing results

``MODEL`` (or ``--graph``) as ``module:function``: ``module`` is imported
from the current directory or ``sys.path`` (:func:`import_function`: the
current directory comes first, as under ``python -m``; the ``numlab``
console script would not have it) and ``function`` is one of (decided by
:func:`load_graph`, in this order):

* a PyTorch function or ``torch.nn.Module`` (its module uses ``torch``):
  traced by the bridge (:func:`numlab.torch.from_torch`) on the
  ``--inputs`` arrays, its placeholders renamed to the parameter names;
* a numlab-traceable function of arrays (numpy ufuncs, operators,
  comparisons, ``np.where``, :mod:`numlab.ops`) whose required parameters
  are all names in the ``--inputs`` file: traced
  (:func:`numlab.graph.trace_function`) with the shapes of those arrays;
* otherwise a graph factory, called with the ``--size`` values as keyword
  arguments and returning a numlab ``Graph``, exactly like the zoo's own
  factories (:func:`numlab.zoo.model_factory`).

``--inputs FILE.npz|DIR`` arrays are checked against the graph's inputs
(:func:`numlab.graph.load_inputs`): errors name ``--inputs``, the input,
the expected and given shape and the valid names.

:func:`add_shared` registers the ones a subcommand takes, each with an
argparse ``type=`` converter that raises ``ArgumentTypeError`` naming the
option, the value and the valid choices, so a bad value stops at parse time
(exit 2).  After parsing ``args.fusion`` is a
:class:`~numlab.fusion.FusionOptions` (None when not given), ``args.kernels`` a
:class:`~numlab.kernels.KernelSpec`, ``args.fmt`` a Format, ``args.size``
a dict, ``args.inputs`` a kind string (a comma list where the command
cycles over kinds) or a :class:`pathlib.Path`.  :func:`coerce` (called by
:func:`numlab.cli.main`) finishes the job (merges ``--size``, flattens
repeated ``--fusion`` lists) and is idempotent.  :func:`join_spec_values`
lets a spec value that starts with ``--`` follow ``--fusion`` after a space.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from pathlib import Path

import numpy as np

from .. import zoo
from ..claims import EXTRA_MODELS, all_models
from ..contract import Contract
from ..formats import FORMATS, get_format
from ..fusion import DEFAULT_SPEC, FusionOptions, split_specs
from ..graph import Graph, function_inputs, load_inputs, read_arrays, trace_function
from ..kernels import KernelSpec

__all__ = ["SPEC_OPTIONS", "FUSION_HELP", "KERNELS_HELP", "GRAMMAR", "add_shared", "coerce", "join_spec_values",
           "resolve_model", "build_model", "model_inputs", "arg_type", "nonneg_int", "seed_type", "fmt_type",
           "models_type", "fusion_type", "fusion_list_type", "kernels_type", "size_type", "model_type",
           "MODEL_HELP", "GRAPH_HELP", "load_graph", "graph_and_inputs", "is_torch_function", "import_function",
           "given_options"]

SPEC_OPTIONS = ("--fusion", "--kernels", "--library")
"""Options whose value is a spec and may start with ``--`` (joined by
:func:`join_spec_values`)."""

FUSION_HELP = (f"fusion spec (default {DEFAULT_SPEC!r}): autofuse | inductor | off, optionally "
               "autofuse:FLAGS and +decompose/+nodecompose; grammar in `numlab --help`")
KERNELS_HELP = ("kernel spec: handwritten | codegen | inductor_cpu, optionally :field=value,...; grammar in "
                "`numlab --help`")
MODEL_HELP = ("a zoo model (numlab.zoo.MODELS), a claims model (numlab.claims.EXTRA_MODELS), or "
              "module:function returning a numlab Graph, called with the --size values")

GRAPH_HELP = ("the same as MODEL, as an option: a zoo or claims model, or module:function -- a numpy/numlab "
              "function or a PyTorch function traced on the --inputs arrays (its parameters are their names), "
              "or a factory of the --size values returning a numlab Graph")

GRAMMAR = """\
MODEL              a zoo model, a claims model, or module:function: a function
                   importable from the current directory or sys.path -- a
                   numpy/numlab-traceable or
                   PyTorch function of the --inputs arrays (parameters = array
                   names), or a factory of the --size values returning a Graph
--graph MODEL      the same as MODEL, as an option (give one of the two)
--fmt FMT          storage format S: fp16, bf16, fp32, fp8 formats, ...
--size NAME=INT    a model size, repeatable (NAME=INT,NAME=INT also works)
--inputs KIND|FILE input kind: normal, uniform, shifted_mean, near_overflow,
                   heavy_tailed; or (run, bisect) a .npz of named arrays or a
                   directory of NAME.npy files, checked against the graph
--fusion SPEC      fusion spec (below); default autofuse, printed in every header
--kernels SPEC     kernel spec (below)
--library SPEC     eager's library kernel spec (check CLAIM, bisect)
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


def fmt_type(choices=None, option: str = "--fmt"):
    """``--fmt`` converter: a Format (any of numlab.formats.FORMATS), or,
    with ``choices``, the name checked against them."""
    if choices is None:
        return arg_type(option, lambda v: get_format(v, option))

    def conv(v):
        if v not in choices:
            raise ValueError(f"{option} {v!r} is not valid; valid choices: {list(choices)}")
        return v

    return arg_type(option, conv)


def _model(option: str):
    def conv(value: str) -> str:
        if value in all_models():
            return value
        if ":" not in value:
            raise ValueError(f"{option} {value!r} is not known; valid models: {sorted(all_models())}, or "
                             "module:function (a function traced on the --inputs arrays, or a factory of "
                             "the --size values returning a Graph)")
        import_function(value, option)  # import it now: a bad module or function stops here
        return value
    return conv


def import_function(spec: str, option: str = "--graph"):
    """The function ``spec`` (``"module:function"``) names, found as under
    ``python -m``: the current directory first on ``sys.path`` (the ``numlab``
    console script's ``sys.path`` lacks it, so ``--graph mymod:fn`` would
    need ``PYTHONPATH=.``); it stays there when the module was found in it
    (worker processes inherit the entry) and is taken out otherwise.
    ValueError naming ``option``, the value and the fix: where to put the
    module, what its import raised, or which functions it defines."""
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        return zoo.model_factory(spec, option)  # its messages: a model name, or both parts needed
    cwd = os.getcwd()
    try:
        mod = _import_from(mod_name, cwd)
    except ImportError as exc:
        if _not_found(exc, mod_name):
            where = mod_name.replace(".", "/") + ".py"
            raise ValueError(f"{option} {spec!r}: cannot import module {mod_name!r}: no {where} in the current "
                             f"directory ({cwd}) or on sys.path; put {where} in the current directory or on PYTHONPATH "
                             f"(e.g. PYTHONPATH=/dir/holding/it numlab ...)") from None
        raise ValueError(f"{option} {spec!r}: importing module {mod_name!r} failed ({type(exc).__name__}: {exc}); "
                         f"fix that import in {mod_name!r}" + (f" or install {exc.name!r}" if exc.name else "")
                         ) from None
    except Exception as exc:  # a user's module: a syntax error or any exception at import time
        raise ValueError(f"{option} {spec!r}: importing module {mod_name!r} raised {type(exc).__name__}: {exc}; "
                         "fix the module") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        defined = sorted(k for k, v in vars(mod).items() if not k.startswith("_") and callable(v)
                         and getattr(v, "__module__", None) == mod.__name__)
        raise ValueError(f"{option} {spec!r}: module {mod_name!r} ({getattr(mod, '__file__', '?')}) has no "
                         f"function {fn_name!r}; it defines {defined}: give {option} {mod_name}:NAME")
    return fn


def _not_found(exc: ImportError, mod_name: str) -> bool:
    """True when ``exc`` says ``mod_name`` itself (or a package above it) is missing."""
    return exc.name is not None and (mod_name == exc.name or mod_name.startswith(exc.name + "."))


def _import_from(mod_name: str, cwd: str):
    """``import mod_name`` with the current directory ``cwd`` first on ``sys.path``,
    as under ``python -m`` (a user's ``./kernels.py`` wins over an installed module
    of that name).  ``cwd`` stays there only when the module was found in it."""
    if "" in sys.path or cwd in sys.path:
        return importlib.import_module(mod_name)
    sys.path.insert(0, cwd)
    importlib.invalidate_caches()
    try:
        mod = importlib.import_module(mod_name)
    except BaseException:
        if mod_name.partition(".")[0] not in sys.modules:  # not found there either: sys.path as it was
            sys.path.remove(cwd)
        raise
    origin = getattr(mod, "__file__", None) or ""
    if not str(Path(origin).resolve()).startswith(str(Path(cwd).resolve()) + os.sep):
        sys.path.remove(cwd)  # found elsewhere (an installed module): sys.path as it was
    return mod


def given_options(argv) -> frozenset:
    """The ``--option`` spellings given on the command line ``argv`` (before
    a bare ``--``; ``--opt=value`` counts as ``--opt``): a command refuses an
    option given where it does not apply, which a default value would not
    tell apart."""
    out = set()
    for tok in argv:
        if tok == "--":
            break
        if tok.startswith("--"):
            out.add(tok.partition("=")[0])
    return frozenset(out)


model_type = arg_type("MODEL", _model("MODEL"), "MODEL")
graph_type = arg_type("--graph", _model("--graph"), "graph")


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
        if kinds and all(k in zoo.INPUT_KINDS for k in kinds) and (multi or len(kinds) == 1):
            return ",".join(kinds)
        p = Path(value)
        if files and (p.suffix == ".npz" or p.is_dir() or p.exists()):
            if not (p.is_dir() or (p.is_file() and p.suffix == ".npz")):
                raise ValueError(f"--inputs {value!r}: no such .npz file or directory of .npy files")
            return p
        bad = [k for k in kinds if k not in zoo.INPUT_KINDS] or kinds
        tail = " or a .npz file / a directory of NAME.npy files" if files else ""
        raise ValueError(f"--inputs {value!r}: {bad} not {what}; valid kinds: {list(zoo.INPUT_KINDS)}{tail}")

    return arg_type("--inputs", conv, "inputs")


def _fusion(value: str) -> FusionOptions:
    return FusionOptions.parse(value, arg="--fusion")


def _fusion_list(value: str) -> list[FusionOptions]:
    return [FusionOptions.parse(s, arg="--fusion") for s in split_specs(value)]


fusion_type = arg_type("--fusion", _fusion)
fusion_list_type = arg_type("--fusion", _fusion_list)


def kernels_type(option: str = "--kernels"):
    return arg_type(option, lambda v: KernelSpec.parse(v, arg=option))


def _contract_spec(value: str) -> str:
    Contract.parse(value, arg="--contract")  # validated now; parsed again with --kernels/--library
    return value


contract_type = arg_type("--contract", _contract_spec, "contract")


# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------
def add_shared(p: argparse.ArgumentParser, *, model=_UNSET, graph=_UNSET, fmt=_UNSET, size=_UNSET, inputs=_UNSET,
               fusion=_UNSET, kernels=_UNSET, seed=_UNSET, out=_UNSET, force=_UNSET,
               inputs_multi: bool = False, inputs_files: bool = False, model_required: bool = True) -> None:
    """Register the shared options on subparser ``p``.

    Each keyword left out is not registered; given, it is the help text's
    subject and default: ``model`` (help str, or True; ``MODEL`` positional,
    optional when not ``model_required``), ``graph`` (help str or True;
    ``--graph MODEL``, the option spelling of ``MODEL``: :func:`coerce`
    moves it to ``args.model`` and refuses both), ``fmt`` / ``inputs`` / ``seed``
    / ``out`` (default value), ``size`` / ``fusion`` / ``kernels`` /
    ``force`` (help suffix, or True).  ``inputs_multi``: ``--inputs`` takes
    a comma list of kinds (the command cycles over them); ``inputs_files``:
    it also takes a ``.npz`` file or a directory of ``.npy`` files.
    """
    if model is not _UNSET:
        p.add_argument("model", nargs=None if model_required else "?", default=None, metavar="MODEL",
                       type=model_type, help=model if isinstance(model, str) else MODEL_HELP)
    if graph is not _UNSET:
        p.add_argument("--graph", default=None, metavar="MODULE:FUNCTION", type=graph_type,
                       help=graph if isinstance(graph, str) else GRAPH_HELP)
    if fmt is not _UNSET:
        p.add_argument("--fmt", default=fmt, metavar="FMT", type=fmt_type(),
                       help=f"storage format S, one of {', '.join(FORMATS)}" + (f" (default {fmt})" if fmt else ""))
    if size is not _UNSET:
        p.add_argument("--size", action="append", default=[], metavar="NAME=INT", type=size_type,
                       help="model size, e.g. --size hidden=256 (repeatable)" + _suffix(size))
    if inputs is not _UNSET:
        metavar = ("KIND[,KIND...]" if inputs_multi else "KIND") + ("|FILE" if inputs_files else "")
        extra = (" or a .npz file of named arrays / a directory of NAME.npy files (names and shapes "
                 "checked against the graph)") if inputs_files else ""
        p.add_argument("--inputs", default=inputs, metavar=metavar, type=_inputs(inputs_multi, inputs_files),
                       help=f"input kind{'s' if inputs_multi else ''}: {', '.join(zoo.INPUT_KINDS)}{extra} "
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


def is_torch_function(obj) -> bool:
    """True for a ``torch.nn.Module`` or a function whose module uses torch
    (a global bound to the ``torch`` module or one of its submodules):
    :func:`load_graph` traces it with the PyTorch bridge.  Never imports
    torch itself (a module that uses it has imported it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if isinstance(obj, torch.nn.Module):
        return True
    fn = inspect.unwrap(obj) if callable(obj) else obj
    glb = getattr(fn, "__globals__", None) or {}
    return any(inspect.ismodule(v) and (v.__name__ == "torch" or v.__name__.startswith("torch."))
               for v in glb.values())


def _torch_graph(fn, arrays: dict, spec: str, option: str) -> Graph:
    """The bridge's graph of a PyTorch function traced on ``arrays`` (one
    per parameter, in parameter order), inputs renamed to the parameter
    names; module constants become graph inputs the bridge names."""
    from ..torch import bridge  # function-level: torch is an optional heavy dependency

    torch = bridge.import_torch()
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    names = list(arrays)
    try:
        req, opt, _ = function_inputs(target)
    except (TypeError, ValueError):  # *args or no signature: the arrays in the file's order
        req = None
    if req is not None:
        names = [k for k in req + opt if k in arrays]
        missing = [k for k in req if k not in arrays]
        extra = [k for k in arrays if k not in req + opt]
        if missing or extra:
            raise ValueError("--inputs: " + "; ".join(
                ([f"no array for parameter(s) {missing} of {spec}"] if missing else [])
                + ([f"array(s) {extra} are not parameters of {spec}"] if extra else []))
                + f"; valid names: {req + opt} (required: {req})")

    def as_tensor(k):
        a = np.asarray(arrays[k])
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
        if a.dtype in (np.float16, np.float32):
            return torch.from_numpy(np.ascontiguousarray(a))
        if a.dtype.kind in "fiub":
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        raise ValueError(f"--inputs: array {k!r} has dtype {a.dtype}; the bridge takes float arrays")

    try:
        tr = bridge.from_torch(fn, tuple(as_tensor(k) for k in names))
        g = tr.to_graph()
    except ValueError as exc:
        raise ValueError(f"{option} {spec!r}: {exc}") from None
    rename = {p.name: k for p, k in zip(tr.inputs, names, strict=True)}
    clash = [k for k in names if any(n.name == k for n in g.nodes)]
    if clash:
        raise ValueError(f"{option} {spec!r}: parameter(s) {clash} have the name of a traced node; rename them")
    nodes = [type(n)(n.name, n.op, tuple(rename.get(i, i) for i in n.inputs), n.attrs, n.shape) for n in g.nodes]
    ins = {rename.get(k, k): s for k, s in g.inputs.items()}
    return Graph(ins, nodes, g.outputs, name=getattr(fn, "__name__", type(fn).__name__))


def load_graph(spec: str, *, sizes: dict | None = None, inputs=None, option: str = "--graph") -> Graph:
    """THE loader of ``MODEL`` / ``--graph``: the :class:`~numlab.graph.Graph`
    ``spec`` names.

    Parameters
    ----------
    spec : str
        A zoo model (:data:`numlab.zoo.MODELS`), a claims model
        (:data:`numlab.claims.EXTRA_MODELS`) or ``"module:function"``.
    sizes : dict, optional
        ``--size`` values (models and factories only; refused for a traced
        function).
    inputs : path, dict or None
        The ``--inputs`` arrays (a ``.npz`` file, a directory of ``NAME.npy``
        or a dict name -> array); a kind string or None means "no arrays".
    option : str
        The option the errors name (``"--graph"`` or ``"MODEL"``).

    ``module:function`` is, in this order (module docstring): a PyTorch
    function or module (traced by the bridge on the arrays), a numlab-
    traceable function whose required parameters are all array names
    (traced with their shapes), else a factory of the ``--size`` values.
    A function to trace without arrays is a ValueError saying to give
    ``--inputs FILE.npz|DIR``.  Check the arrays against the graph with
    :func:`numlab.graph.load_inputs` (:func:`graph_and_inputs` does both).
    """
    sizes = dict(sizes or {})
    if not spec:
        raise ValueError(f"MODEL or --graph is required; valid: {sorted(all_models())} or module:function")
    arrays = None
    if inputs is not None and not isinstance(inputs, str):
        arrays = read_arrays(inputs, option="--inputs")
    if spec in all_models():
        return build_model(spec, sizes, option)
    fn = import_function(spec, option)
    if is_torch_function(fn):
        if arrays is None:
            raise ValueError(f"{option} {spec!r} is a PyTorch function: give its arrays with "
                             "--inputs FILE.npz|DIR (one array per parameter)")
        if sizes:
            raise ValueError(f"--size {sizes}: not valid for {option} {spec!r} (a traced function takes its "
                             "shapes from --inputs)")
        return _torch_graph(fn, arrays, spec, option)
    try:
        req, opt, _var = function_inputs(fn)
    except (TypeError, ValueError):
        req, opt = [], []
    if arrays is not None and req and all(k in arrays for k in req):
        if sizes:
            raise ValueError(f"--size {sizes}: not valid for {option} {spec!r} (a traced function takes its "
                             "shapes from --inputs)")
        return trace_function(fn, arrays, name=spec.partition(":")[2], option="--inputs")
    try:
        g = build_model(spec, sizes, option)
    except (TypeError, ValueError) as exc:
        if req and not any(k in sizes for k in req):
            if arrays is not None:  # a function of arrays, and the file names them otherwise
                raise ValueError(_names_mismatch(spec, option, inputs, arrays, req, opt)) from None
            raise ValueError(f"{option} {spec!r}: cannot call it with the --size values {sizes} ({exc}); "
                             f"to trace it, give --inputs FILE.npz|DIR with arrays named {req} "
                             "(no --inputs file given)") from None
        raise
    if not isinstance(g, Graph):
        raise ValueError(f"{option} {spec!r} returned a {type(g).__name__}, not a numlab Graph; a function "
                         f"to trace needs --inputs FILE.npz|DIR with arrays named {req}")
    return g


def _names_mismatch(spec, option, source, arrays, req, opt) -> str:
    """The message for ``--inputs`` arrays not named as ``spec``'s parameters."""
    missing = [k for k in req if k not in arrays]
    extra = [k for k in arrays if k not in req + list(opt)]
    fix = (f"rename array {extra[0]!r} to {missing[0]!r}" if len(missing) == 1 and len(extra) == 1
           else "name the arrays after the parameters")
    return (f"--inputs {str(source)!r}: holds arrays {sorted(arrays)}, but {option} {spec!r} expects arrays "
            f"named after its parameters {req + list(opt)} (required: {req}; missing: {missing}); {fix} "
            + (f"(one NAME.npy per parameter: {', '.join(k + '.npy' for k in req)})" if Path(str(source)).is_dir()
               else f"(e.g. np.savez({Path(str(source)).name!r}, {', '.join(f'{k}=...' for k in req)}))"))


def graph_and_inputs(args) -> tuple[Graph, dict]:
    """``(graph, inputs)`` from parsed arguments: :func:`load_graph` of
    ``args.model`` (MODEL or --graph) with ``args.size`` and ``args.inputs``,
    then the inputs: read from the file and checked against the graph
    (:func:`numlab.graph.load_inputs`, errors name ``--inputs``), or drawn
    for a kind with ``args.seed``."""
    spec = getattr(args, "model", None)
    src = getattr(args, "inputs", None)
    graph = load_graph(spec, sizes=getattr(args, "size", None) or {},
                       inputs=src if isinstance(src, Path) else None,
                       option="--graph" if getattr(args, "graph_given", False) else "MODEL")
    return graph, model_inputs(graph, args)


def build_model(model: str | None, sizes: dict, option: str = "MODEL"):
    """The graph of ``MODEL`` with the ``--size`` values: a zoo model, a
    claims model or a ``module:function`` factory.  ValueError names
    ``option`` (MODEL or --graph) or --size.  :func:`load_graph` is the
    full loader (it also traces functions on ``--inputs`` arrays)."""
    if not model:
        raise ValueError(f"MODEL is required; valid: {sorted(all_models())} or module:function")
    factory = EXTRA_MODELS[model] if model in EXTRA_MODELS and model not in zoo.MODELS else None
    try:
        if factory is not None:
            return factory(**sizes)
        return zoo.get_model(model, arg=option, **sizes)
    except TypeError as exc:
        # only the factory's own signature error is a bad --size; any other TypeError
        # (a bug inside a user's module:function, a non-Graph result) propagates as it is
        if "unexpected keyword argument" not in str(exc):
            raise
        raise ValueError(f"--size {sizes}: not valid for {option} {model!r} ({exc})") from None
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith((option, "--size")) else f"--size {sizes}: {msg}") from None


def model_inputs(graph, args) -> dict:
    """The inputs ``--inputs`` names for ``graph``: drawn with
    ``--seed`` for a kind, read (and checked) from a file or directory."""
    if isinstance(args.inputs, Path):
        if "--seed" in getattr(args, "given_options", ()):
            raise ValueError(f"--seed {args.seed} does not apply with --inputs {str(args.inputs)!r}: the seed draws "
                             "inputs of a kind, and the file gives them; drop --seed (or give --inputs KIND)")
        return load_inputs(args.inputs, graph, option="--inputs")
    return zoo.make_inputs(graph, kind=args.inputs, seed=args.seed)


def coerce(args: argparse.Namespace) -> argparse.Namespace:
    """Finish the shared options after parsing, in place (idempotent: the
    converters already ran): ``size`` list of dicts -> one dict; ``fusion``
    repeated lists (check plan) -> one flat list; a string left by a caller
    that built the Namespace itself is converted as the parser would."""
    ns = vars(args)
    if ns.get("graph") is not None:  # --graph is MODEL's option spelling
        if ns.get("model") is not None and ns["model"] != ns["graph"]:
            raise ValueError(f"give MODEL or --graph, not both (MODEL {ns['model']!r}, --graph {ns['graph']!r})")
        args.model = args.graph
        args.graph_given = True
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
    if isinstance(ns.get("fmt"), str):
        args.fmt = get_format(args.fmt, "--fmt")
    return args
