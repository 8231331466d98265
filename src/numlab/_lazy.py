"""Lazy module attributes (PEP 562), shared by ``numlab`` and ``numlab.torch``."""

from __future__ import annotations

import importlib


def lazy_loader(namespace: dict, modules: dict, attrs: dict):
    """Return ``(__getattr__, __dir__)`` for a package whose ``namespace`` is
    its ``globals()``: ``modules`` maps a name to a module path, ``attrs`` a
    name to ``(module path, attribute)``; each is imported on first use and
    cached in the namespace."""
    package = namespace["__name__"]

    def __getattr__(name: str):
        if name in modules:
            value = importlib.import_module(modules[name])
        elif name in attrs:
            modname, attr = attrs[name]
            value = getattr(importlib.import_module(modname), attr)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(modules) | set(attrs))

    return __getattr__, __dir__
