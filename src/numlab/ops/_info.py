"""What an operator is: :class:`OpInfo` (the fields :mod:`numlab.ops` describes), the
categories, value kinds, comparisons and :data:`REQUIRED`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

CATEGORIES = ("elementwise", "reduction", "data_movement", "matmul", "composite")


#: kinds of value a node holds (``OpInfo.value_kind``): ``"float"`` numbers, or
#: ``"bool"`` truth values (the comparisons), held by the executors as 0.0 / 1.0
#: in the storage format (exact in every format) and read by ``where`` as ``!= 0``
VALUE_KINDS = ("float", "bool")


#: the comparison operators: op -> (numpy ufunc, symbol)
COMPARISONS = {"gt": (np.greater, ">"), "ge": (np.greater_equal, ">="), "lt": (np.less, "<"),
               "le": (np.less_equal, "<="), "eq": (np.equal, "=="), "ne": (np.not_equal, "!=")}


#: attributes any node may carry that are not the operator's own: ``origin``
#: (the composite node a decomposed primitive came from; changes no value) and
#: ``storage`` (the storage format this node computes in and is written in, in place of
#: the run's S: a graph of several dtypes, such as a traced torch function that
#: mixes bf16 and fp32 tensors; :func:`numlab.execute.values.node_format`) and
#: ``loads`` (the element format the node's loop loads from memory when it differs
#: from its storage: a CPU kernel fills two fp32 vectors per 16-bit load, which sets
#: its reduction's lane order (``KernelSpec.reduce_order_low``) and its scalar tail)
META_ATTRS = ("origin", "storage", "loads")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: marks an attribute without a default
REQUIRED = _Required()


@dataclass(frozen=True)
class OpInfo:
    """One operator of the catalogue (see the module docstring).

    ``infer(shapes, attrs) -> (attrs, shape)`` is the raw shape rule;
    use :meth:`check`, which also validates arity and attribute names and
    prefixes errors with the node.
    """

    name: str
    category: str
    arity: tuple[int, int | None]
    attrs: dict
    infer: Callable = field(repr=False)
    _ref: Callable = field(repr=False)
    decompose: Callable | None = field(default=None, repr=False)
    accumulator: str = "none"
    doc: str = ""
    kernel: Callable | None = field(default=None, repr=False)
    slack: Callable | None = field(default=None, repr=False)
    propagate: Callable | None = field(default=None, repr=False)
    aten: tuple = ()
    value_kind: str = "float"
    stored_fmt: Callable | None = field(default=None, repr=False)
    local: Callable | None = field(default=None, repr=False)
    scalar_tail: bool | str = False

    def ref(self, *arrays, **attrs):
        """float64 reference (data movement: dtype-preserving).  Meta
        attributes (``origin``) are ignored."""
        for k in META_ATTRS:
            attrs.pop(k, None)
        with np.errstate(all="ignore"):
            return self._ref(*arrays, **attrs)

    def check(self, shapes, attrs=None, node: str | None = None):
        """Validate ``attrs`` against the input ``shapes``.

        Returns ``(attrs, shape)``: canonical attributes (defaults filled,
        normalised; meta attributes kept) and the output shape.
        """
        where = f"node {node!r} (op {self.name!r})" if node else f"op {self.name!r}"
        attrs = dict(attrs or {})
        shapes = [tuple(s) for s in shapes]
        lo, hi = self.arity
        n = len(shapes)
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else (f"{lo} or more" if hi is None else f"{lo} to {hi}")
            raise TypeError(f"{where}: takes {want} inputs, got {n} (input shapes {shapes})")
        meta = {k: attrs.pop(k) for k in META_ATTRS if k in attrs}
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise TypeError(
                f"{where}: unknown attribute(s) {unknown}; valid attributes: "
                f"{sorted(self.attrs) + list(META_ATTRS)}"
            )
        full = {}
        for k, default in self.attrs.items():
            if k in attrs:
                full[k] = attrs[k]
            elif default is REQUIRED:
                raise TypeError(f"{where}: missing required attribute {k!r}")
            else:
                full[k] = default
        try:
            out_attrs, shape = self.infer(shapes, full)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"{where}: {exc}") from None
        out_attrs.update(meta)
        return out_attrs, tuple(int(d) for d in shape)
