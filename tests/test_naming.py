"""One name per meaning (docs/design.md, "Naming"): no public function, method
or class of numlab takes a parameter under a banned name, ``dtype`` is a
parameter only where it is a numpy or torch dtype, ``mode`` never takes a
rounding mode, and no CLI option is spelled the banned way."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import numlab
from numlab import ROUNDINGS
from numlab.cli import build_parser

DESIGN = Path(__file__).resolve().parent.parent / "docs" / "design.md"

# the names the glossary replaced, and what replaced them
BANNED = {"low": "fmt", "high": "acc", "to": "fmt", "ddof": "correction", "dt": "fmt", "form": "approximate",
          "matmul_mode": "algo"}
# engine kernels take the node's attributes as keywords: the cast node's attribute is "to" (an on-disk,
# fingerprinted key), not a Python API name
NODE_ATTRIBUTES = {("numlab.kernels.engine.cast", "to")}
# where ``dtype`` is a numpy or torch dtype, not a numlab format (the glossary's exceptions)
NUMPY_DTYPE = {"numlab.formats.Format", "numlab.formats.format_of_dtype", "numlab.compare.dump.format_name",
               "numlab.races.model.Buffer", "numlab.torch.bridge.ANode", "numlab.torch.explain.Explanation"}
# the reference sums take numpy's dtype, as numpy does; calibration rows are torch tensor dtypes
NUMPY_DTYPE_MODULES = {"numlab.testing.kernels", "numlab.torch.calibrate"}
# CLI options that keep a spelling the glossary bans elsewhere: calibrate's --dtype are torch tensor dtypes
CLI_BANNED = {"--dtype", "--storage", "--low", "--high", "--to", "--ddof", "--dt"}
CLI_KEEPS = {("calibrate", "--dtype")}


def _modules():
    for info in pkgutil.walk_packages(numlab.__path__, "numlab."):
        if info.name.endswith("__main__"):
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError:  # an optional dependency (torch) missing: nothing of it to check
            continue


def _public_callables():
    """(qualified name, callable) for every function and class named in a module's
    ``__all__`` or defined in it under a public name, and every public method of
    those classes."""
    seen = set()
    for mod in _modules():
        own = [n for n, o in vars(mod).items() if not n.startswith("_") and getattr(o, "__module__", None) == mod.__name__]
        for name in (*getattr(mod, "__all__", ()), *own):
            obj = getattr(mod, name, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            qual = f"{obj.__module__}.{obj.__qualname__}"
            yield qual, obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    member = getattr(member, "__func__", member)
                    if inspect.isfunction(member) and not attr.startswith("_"):
                        yield f"{qual}.{attr}", member


def _parameters():
    for qual, obj in _public_callables():
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        for p in sig.parameters.values():
            yield qual, p


def test_no_public_parameter_has_a_banned_name():
    bad = [f"{q}({p.name}=): call it {BANNED[p.name]}" for q, p in _parameters()
           if p.name in BANNED and (q, p.name) not in NODE_ATTRIBUTES]
    assert not bad, "\n".join(bad)


def test_dtype_is_a_parameter_only_where_it_is_a_numpy_or_torch_dtype():
    bad = [q for q, p in _parameters() if p.name == "dtype" and q not in NUMPY_DTYPE
           and q.rsplit(".", 1)[0] not in NUMPY_DTYPE_MODULES]
    assert not bad, f"a numlab format is fmt=, not dtype=: {bad}"


def test_mode_never_takes_a_rounding_mode():
    bad = [q for q, p in _parameters() if p.name == "mode" and p.default in ROUNDINGS]
    assert not bad, f"rounding modes are rounding=, mode= is the execution mode: {bad}"


def test_the_checks_see_the_api():
    names = {q for q, _ in _public_callables()}
    params = {(q, p.name) for q, p in _parameters()}
    assert {"numlab.execute.executor.run", "numlab.bounds.block_fma_bound", "numlab.kernels.spec.KernelSpec.reduce"} <= names
    assert ("numlab.execute.executor.run", "fmt") in params and ("numlab.rounding.round_to", "rounding") in params


def _options(parser: argparse.ArgumentParser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        else:
            for opt in action.option_strings:
                yield " ".join(path), opt


def test_no_cli_option_has_a_banned_spelling():
    opts = list(_options(build_parser()))
    assert ("run", "--fmt") in opts and ("compare", "--fmt") in opts  # the walk reaches the subcommands
    bad = [f"numlab {cmd} {opt}" for cmd, opt in opts if opt in CLI_BANNED and (cmd, opt) not in CLI_KEEPS]
    assert not bad, f"the storage format is --fmt: {bad}"


def test_the_glossary_names_each_name_once():
    text = DESIGN.read_text()
    section = re.search(r"^## Naming\n(.*?)^## ", text, re.M | re.S)
    assert section, "docs/design.md has a Naming section"
    body = section.group(1)
    for name in ("fmt", "rounding", "mode", "algo", "correction", "MODES", "SOURCES", "ROUNDINGS",
                 "FUSION_KINDS", "FUSION_PRESETS", "INPUT_KINDS", "SPEC_PRESETS", "UNIT_PRESETS",
                 "SCALED_PRESETS", "CONTRACT_PRESETS", "TORCH_MODES", "TORCH_SOURCES", "promotion"):
        assert f"`{name}`" in body, name
    for old in BANNED:
        assert f"`{old}`" in body, f"the Names section says what replaced {old!r}"
    assert text.count("\n## Naming\n") == 1
