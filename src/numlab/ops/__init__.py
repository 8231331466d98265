"""The operator catalogue: every operator numlab graphs may contain.

Each operator has an :class:`OpInfo` in :data:`CATALOGUE` with

* ``category`` -- one of :data:`CATEGORIES` (``"elementwise"``,
  ``"reduction"``, ``"data_movement"``, ``"matmul"``, ``"composite"``); the
  fusion planner groups nodes by it;
* ``arity`` and ``attrs`` (attribute name -> default, :data:`REQUIRED` when
  there is none);
* ``check(shapes, attrs, node=...)`` -> ``(canonical attrs, output shape)``:
  attribute validation, normalisation (axes become sorted tuples of
  non-negative ints, scalars Python floats, ...) and shape inference with
  numpy broadcasting.  Errors are ValueError/TypeError naming the node, the
  op, the shapes and the valid choices;
* ``ref(*arrays, **attrs)`` -- the float64 reference implementation (plain
  numpy; what the reference executor uses).  Elementwise, reduction, matmul
  and composite refs convert their inputs to float64 and return float64;
  ``accumulator`` states the accumulator (``"float64"``: numpy's pairwise
  float64 sum / float64 BLAS).  Data-movement refs never change a value and
  keep their input's dtype, so an executor may call them on storage-format
  arrays directly;
* ``kernel(ctx, *arrays, **attrs)`` -- the operator's function in the engine
  (:mod:`numlab.kernels.engine`): how a kernel computes it under a
  ``KernelSpec`` (``ctx`` is an ``engine.Ctx``).  The executor computes a
  node only through it.  Data movement: ``engine.data_movement(ref)``;
* ``slack`` and ``propagate`` -- the operator's running-bound rules, named
  functions of :mod:`numlab.bound_rules`: ``slack(v, ins, attrs)`` bounds
  the float64 reference's own error, ``propagate(xs, bs, attrs, ref)``
  bounds how far the exact result moves when the inputs move within their
  bounds (:mod:`numlab.running_bounds` reads them through
  :func:`numlab.running_bounds.rules_for`).  Composites bounded through
  their decomposition carry the marker pair ``bound_rules.DECOMPOSED``;
* for composites, ``decompose(*tensors, **attrs)``: the primitive subgraph a
  compiler fuses instead, written with the functions of this module (see
  :func:`numlab.graph.decompose`); None for every other category;
* ``value_kind`` -- :data:`VALUE_KINDS`: ``"bool"`` for the comparisons
  (``gt ge lt le eq ne``: their references return numpy bool arrays, their
  kernels 0.0 / 1.0), ``"float"`` for every other operator;
* ``stored_fmt`` -- where the node's output lives between kernels: None (every
  operator but two) means the storage format S, as the executors always did;
  otherwise ``stored_fmt(attrs) -> Format``, the format the output is written
  in instead, at every point where S would be written (an eager kernel's
  output, a fused block's edge, an emulated cast;
  :func:`numlab.execute.values.stored_formats` reads it).
  ``quantize`` stores its elements in their element format (fp8/fp6/fp4,
  as a real fp8 tensor) and ``block_scale`` its scales in fp32 (as DeepSeek-V3's
  ``act_quant`` and torchao keep them), so a bf16/fp16 run never rounds a
  scale to S between kernels;
* ``scalar_tail`` -- for the operators whose CPU kernel (ATen's
  ``cpu_kernel_vec``) runs the last elements of each parallel chunk in a scalar
  loop whose result differs: ``"opmath"`` (it computes in fp32 and calls libm:
  sigmoid, silu, gelu, softplus, mish) or ``"storage"`` (it computes in the tensor's
  type, each operation rounded: rsqrt's ``1 / std::sqrt(a)``); with a spec's
  ``loop_step`` those elements are computed by the spec's ``tail_math``
  (:func:`numlab.kernels.engine.compute`); False for the others;
* ``aten`` -- the PyTorch ATen operators of this op, the one table of them:
  ``"name.overload"`` (namespace dropped: ``"gelu.default"``, ``"add.Tensor"``,
  ``"add.Scalar"``) for each ATen operator :meth:`numlab.torch.TorchTrace.to_graph`
  lowers to this op (directly, or through an argument rewrite: a Python-scalar
  operand, a view, a dtype conversion) and :mod:`numlab.torch` predicts; an ATen
  operator lowered to a few catalogue ops is registered with the op its result
  is (``clamp.default`` with ``minimum``, ``logical_not.default`` with ``eq``,
  ``masked_fill.Scalar`` with ``where``).  :data:`numlab.torch.bridge.PREDICTABLE`
  and :data:`numlab.torch.bridge.CATALOGUE_MAP` are derived from these names
  (:func:`aten_lowered`).  A bare base name (``"cat"``, ``"mm"``) is the
  op's ATen counterpart that the bridge does not lower yet.  ``()`` only for
  :data:`NO_ATEN` (no ATen counterpart).

:func:`_register` takes every field as a required keyword (a missing rule,
kernel or ATen list is a registration error, never a silent default), so an
operator lives in one registration (see ``softplus``, ``hardswish`` and ``mish`` at
the end of the elementwise section, and ``docs/design.md``, "Adding an
operator, order, format or fusion preset").  Adding one takes its
registration here (reference, kernel, ``slack``/``propagate`` bound rules,
``local`` contract term, ATen names) and, where no existing one fits, a
shape rule in ``_shapes``, a reference in ``_refs``, a kernel in
:mod:`numlab.kernels.engine` (or beside the registration), bound rules in
:mod:`numlab.bound_rules` and a local term in :mod:`numlab.contract_rules`;
then its tests in ``tests/test_ops.py`` and ``tests/test_running_bounds.py``
(an ``OP_CASES`` entry unless it is a unary elementwise operator).

The package: this module holds the catalogue (:data:`CATALOGUE`, built here
by the registrations), the registrations by family and the functions below;
``_info`` defines :class:`OpInfo` and the constants, ``_shapes`` the shape
rules, ``_refs`` the float64 references.  Import from ``numlab.ops``.

The functions of this module (``add``, ``rsqrt``, ``softmax``, ``concat``,
...) work on symbolic tensors while tracing (``numlab.graph.trace``) and on
plain arrays, where they evaluate the float64 reference.

Sources: numpy broadcasting and matmul rules (NumPy reference, "Broadcasting"
and ``numpy.matmul``); GELU forms from Hendrycks & Gimpel, "Gaussian Error
Linear Units" (2016) (erf form; tanh form with 0.044715), as in
``torch.nn.functional.gelu(approximate="none"|"tanh")``; layer norm
(Ba et al. 2016) and RMS norm (Zhang & Sennrich 2019) with biased variance.
"""

from __future__ import annotations

import contextlib
import functools
import numbers

import numpy as np

from .. import bound_rules as R
from .. import contract_rules as CR
from .._repr import text_table
from ..kernels import engine as E
from ..rounding import round_to
from ._info import CATEGORIES, COMPARISONS, META_ATTRS, REQUIRED, VALUE_KINDS, OpInfo
from ._refs import (
    ConstValue,
    _broadcast_ref,
    _concat_ref,
    _f64,
    _gather_ref,
    _gelu,
    _hardswish_ref,
    _layer_norm_ref,
    _log_softmax_ref,
    _mish_ref,
    _reshape_ref,
    _rms_norm_ref,
    _sigmoid,
    _slice_ref,
    _softmax_ref,
    _softplus_ref,
    _split_ref,
    _transpose_ref,
    _var_ref,
    erf_ref,
    erfc_ref,
)
from ._shapes import (
    _axes,
    _axis1,
    _infer_alpha,
    _infer_bcast,
    _infer_broadcast,
    _infer_cast,
    _infer_concat,
    _infer_constant,
    _infer_gather,
    _infer_gelu,
    _infer_matmul,
    _infer_norm,
    _infer_reduce,
    _infer_reshape,
    _infer_same,
    _infer_scalar,
    _infer_slice,
    _infer_softmax,
    _infer_softplus,
    _infer_split,
    _infer_transpose,
    _shape_tuple,
    broadcast_shapes,
)

__all__ = [
    "CATEGORIES",
    "CATALOGUE",
    "REQUIRED",
    "META_ATTRS",
    "OpInfo",
    "get_op",
    "broadcast_shapes",
    "erf_ref",
    "erfc_ref",
    "ops_in",
    "aten_lowered",
    "describe",
    "NO_ATEN",
    "VALUE_KINDS",
    "COMPARISONS",
    "ConstValue",
]


CATALOGUE: dict[str, OpInfo] = {}

#: operators without an ATen counterpart (registered with ``aten=()``):
#: torch computes ``s / x`` as ``reciprocal`` then ``mul`` (there is no
#: reversed-division ATen operator; the bridge maps ``div`` with a number
#: first to ``rdiv_scalar``).
NO_ATEN = ("rdiv_scalar", "add_alpha")
"""``add_alpha`` is reached by ``add.Tensor``/``sub.Tensor`` with ``alpha`` (registered
with ``add``/``sub``; the bridge rewrites the call)."""


def _register(name, category, arity, attrs, infer, ref, *, kernel, slack, propagate, aten, local,
              decompose=None, accumulator="none", doc="", value_kind="float", stored_fmt=None,
              scalar_tail=False):
    """Add one operator to :data:`CATALOGUE`.  ``kernel``, ``slack``,
    ``propagate`` and ``aten`` are required (module docstring); errors name
    the operator and the missing or invalid field."""
    if category not in CATEGORIES:
        raise ValueError(f"op {name!r}: category={category!r} is not valid; choose one of {CATEGORIES}")
    if name in CATALOGUE:
        raise ValueError(f"op {name!r} is already registered (one registration per operator)")
    if kernel is None or not callable(kernel):
        raise TypeError(f"op {name!r}: kernel must be the engine function that computes it, got {kernel!r}")
    for what, rule in (("slack", slack), ("propagate", propagate)):
        if not callable(rule):
            raise TypeError(f"op {name!r}: {what} must be a {what} rule of numlab.bound_rules "
                            f"(every operator has running-bound rules), got {rule!r}")
    if not callable(local):
        raise TypeError(f"op {name!r}: local must be a local contract term of numlab.contract_rules "
                        f"(every operator has one), got {local!r}")
    if (slack is R.slack_decomposed) != (propagate is R.propagate_decomposed):
        raise TypeError(f"op {name!r}: slack_decomposed and propagate_decomposed go together "
                        "(bound_rules.DECOMPOSED)")
    if (decompose is not None) != (category == "composite"):
        raise TypeError(f"op {name!r}: a decomposition is required for composites and only for them "
                        f"(category {category!r}, decompose={decompose!r})")
    if R.is_decomposed(propagate) and decompose is None:
        raise TypeError(f"op {name!r}: bound_rules.DECOMPOSED needs a decomposition")
    if not isinstance(aten, tuple) or not all(isinstance(a, str) and a for a in aten):
        raise TypeError(f"op {name!r}: aten must be a tuple of ATen operator names, got {aten!r}")
    if not aten and name not in NO_ATEN:
        raise TypeError(f"op {name!r}: aten=() is only for operators without an ATen counterpart "
                        f"({list(NO_ATEN)}); give the ATen names it maps from")
    if scalar_tail not in (False, True, "opmath", "storage"):
        raise ValueError(f"op {name!r}: scalar_tail={scalar_tail!r} is not valid; choose False, 'opmath' or 'storage'")
    if value_kind not in VALUE_KINDS:
        raise ValueError(f"op {name!r}: value_kind={value_kind!r} is not valid; choose one of {VALUE_KINDS}")
    if stored_fmt is not None and not callable(stored_fmt):
        raise TypeError(f"op {name!r}: stored_fmt must be None (stored in S) or a function attrs -> Format, "
                        f"got {stored_fmt!r}")
    if CR.is_composite(local) != (category == "composite"):
        raise TypeError(f"op {name!r}: contract_rules.local_composite is the local term of composites, and only of "
                        f"them (category {category!r})")
    CATALOGUE[name] = OpInfo(name, category, arity, dict(attrs), infer, ref, decompose, accumulator, doc,
                             kernel=kernel, slack=slack, propagate=propagate, aten=aten, value_kind=value_kind,
                             stored_fmt=stored_fmt, local=local,
                             scalar_tail="opmath" if scalar_tail is True else scalar_tail)


def get_op(name: str) -> OpInfo:
    """The :class:`OpInfo` of ``name``; ValueError listing the valid ops."""
    if not isinstance(name, str):
        raise TypeError(f"op must be a str, got {type(name).__name__}")
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown op {name!r}; valid ops: {sorted(CATALOGUE)}") from None


def aten_lowered() -> dict[str, str]:
    """ATen operator (``"name.overload"``) -> the catalogue op it is registered
    with, for every ATen operator the torch bridge lowers (the dotted entries
    of ``OpInfo.aten``; module docstring)."""
    return {a: name for name, info in CATALOGUE.items() for a in info.aten if "." in a}


def ops_in(category: str) -> list[str]:
    """Names of the ops of one category, sorted."""
    if category not in CATEGORIES:
        raise ValueError(f"category={category!r} is not valid; choose one of {CATEGORIES}")
    return sorted(k for k, v in CATALOGUE.items() if v.category == category)


def describe(category: str | None = None) -> str:
    """The catalogue as a text table (op, category, arity, attributes with
    defaults, accumulator, what it computes), optionally one category."""
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"category={category!r} is not valid; choose one of {CATEGORIES}")
    rows = []
    for cat in CATEGORIES if category is None else (category,):
        for name in ops_in(cat):
            info = CATALOGUE[name]
            lo, hi = info.arity
            arity = str(lo) if lo == hi else f"{lo}+" if hi is None else f"{lo}-{hi}"
            attrs = ", ".join(f"{k}={v!r}" for k, v in info.attrs.items()) or "-"
            rows.append((name, cat, arity, attrs, info.accumulator, info.doc))
    head = ("op", "category", "inputs", "attributes", "accumulator", "computes")
    return "\n".join(text_table(head, rows, rule=False))


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------
def _unary(name, fn, kernel, slack, propagate, local, doc, scalar_tail=False):
    """Register a one-input elementwise op whose ATen counterpart has its name
    (``aten.<name>.default``)."""
    _register(name, "elementwise", (1, 1), {}, _infer_same, lambda x: fn(_f64(x)), kernel=kernel,
              slack=slack, propagate=propagate, local=local, aten=(f"{name}.default",), doc=doc,
              scalar_tail=scalar_tail)


_unary("neg", np.negative, E.neg, R.slack_exact, R.propagate_identity, CR.local_exact, "-x")
_unary("abs", np.abs, E.abs_, R.slack_exact, R.propagate_identity, CR.local_exact, "|x|")
_unary("exp", np.exp, E.exp, R.slack_transcendental, R.propagate_monotone_ref, CR.local_libm, "e**x")
_unary("log", np.log, E.log, R.slack_transcendental, R.propagate_log, CR.local_libm,
       "natural log (log 0 = -inf, log x<0 = NaN)")
_unary("sqrt", np.sqrt, E.sqrt, R.slack_correct, R.propagate_sqrt, CR.local_sqrt, "square root (sqrt x<0 = NaN)")
_unary("rsqrt", lambda x: 1.0 / np.sqrt(x), E.rsqrt, R.slack_two_roundings, R.propagate_rsqrt, CR.local_rsqrt,
       "1/sqrt(x) (float64: two roundings)", scalar_tail="storage")
_unary("reciprocal", lambda x: 1.0 / x, E.reciprocal, R.slack_two_roundings, R.propagate_reciprocal, CR.local_reciprocal, "1/x")
_unary("tanh", np.tanh, E.tanh, R.slack_transcendental, R.propagate_monotone_ref, CR.local_libm, "tanh x")
_unary("sigmoid", _sigmoid, E.sigmoid, R.slack_transcendental, R.propagate_monotone_ref, CR.local_libm,
       "1/(1+e**-x), evaluated without overflow", scalar_tail=True)
_unary("erf", erf_ref, E.erf, R.slack_transcendental, R.propagate_monotone_ref, CR.local_libm,
       "error function (kernels.libm.erf64, vectorised, rel err < 2^-44)")
_unary("silu", lambda x: x * _sigmoid(x), E.silu, R.slack_transcendental_x, R.propagate_silu, CR.local_libm_x,
       "x * sigmoid(x); silu(-inf) = NaN (-inf * 0, as torch)", scalar_tail=True)
_unary("relu", lambda x: np.where(x < 0, 0.0, x), E.relu, R.slack_exact, R.propagate_identity, CR.local_exact,
       "0 where x < 0, else x (NaN and -0.0 pass through, as torch.relu)")
# log1p: increasing; an interval reaching below -1 gives NaN ends, hence an infinite bound
_unary("log1p", np.log1p, E.log1p, R.slack_transcendental, R.propagate_monotone_ref, CR.local_libm,
       "log(1 + x) without rounding 1 + x (log1p(-1) = -inf, log1p x<-1 = NaN)")


_register(
    "gelu", "elementwise", (1, 1), {"approximate": "none"}, _infer_gelu,
    lambda x, approximate: _gelu(_f64(x), approximate), kernel=E.gelu,
    slack=R.slack_transcendental_x, propagate=R.propagate_gelu, local=CR.local_libm_x, aten=("gelu.default",),
    scalar_tail=True,
    doc="GELU: approximate='none' 0.5x(1+erf(x/sqrt2)); 'tanh' 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))); "
        "gelu(-inf) = NaN (-inf * 0, as torch)",
)


_register(
    "cast", "elementwise", (1, 1), {"to": REQUIRED}, _infer_cast,
    lambda x, to: _f64(round_to(_f64(x), to)), kernel=E.cast,
    slack=R.slack_exact, propagate=R.propagate_cast, local=CR.local_cast,
    # a copy (clone, alias, detach) is a cast to its own dtype: the identity, lowered to no node
    aten=("_to_copy.default", "convert_element_type.default", "clone.default", "alias.default",
          "detach.default"),
    doc="round to format `to` (round-to-nearest-even); the reference keeps the rounding",
)

# ATen: add/sub with alpha lower to a mul_scalar then add/sub; pow(x, 2) to mul(x, x);
# clamp_min to maximum; clamp, clamp_max and hardtanh to maximum then minimum (a
# number bound a 0-d constant), registered with the operator their result is
for _name, _fn, _kernel, _slack, _prop, _local, _aten, _doc in (
    ("add", np.add, E.add, R.slack_correct, R.propagate_add, CR.local_add, ("add.Tensor", "add_.Tensor"),
     "a + b"),
    ("sub", np.subtract, E.sub, R.slack_correct, R.propagate_add, CR.local_add, ("sub.Tensor",), "a - b"),
    ("mul", np.multiply, E.mul, R.slack_correct_underflow, R.propagate_mul, CR.local_mul,
     ("mul.Tensor", "pow.Tensor_Scalar"), "a * b"),
    ("div", np.divide, E.div, R.slack_correct_underflow, R.propagate_div, CR.local_div, ("div.Tensor",), "a / b"),
    ("maximum", np.maximum, E.maximum, R.slack_exact, R.propagate_maximum, CR.local_exact,
     ("maximum.default", "clamp_min.default", "clamp_min.Tensor"), "IEEE 754-2019 maximum (NaN propagates)"),
    ("minimum", np.minimum, E.minimum, R.slack_exact, R.propagate_maximum, CR.local_exact,
     ("minimum.default", "clamp_max.default", "clamp_max.Tensor", "clamp.default", "clamp.Tensor",
      "hardtanh.default"),
     "IEEE 754-2019 minimum (NaN propagates)"),
):
    _register(_name, "elementwise", (2, 2), {}, _infer_bcast,
              (lambda f: lambda a, b: f(_f64(a), _f64(b)))(_fn), kernel=_kernel,
              slack=_slack, propagate=_prop, local=_local, aten=_aten, doc=_doc)


_register("add_alpha", "elementwise", (2, 2), {"alpha": REQUIRED}, _infer_alpha,
          lambda x, y, alpha: _f64(x) + alpha * _f64(y), kernel=E.add_alpha,
          slack=R.slack_add_alpha, propagate=R.propagate_add_alpha, local=CR.local_add_alpha, aten=(),
          doc="x + alpha*y as one kernel (torch.add(x, y, alpha=...); sub: alpha negated)")


#: scalar forms: op -> (function of (x, s), expression)
SCALAR_OPS = {
    "add_scalar": (lambda x, s: x + s, "x + s"),
    "sub_scalar": (lambda x, s: x - s, "x - s"),
    "rsub_scalar": (lambda x, s: s - x, "s - x"),
    "mul_scalar": (lambda x, s: x * s, "x * s"),
    "div_scalar": (lambda x, s: x / s, "x / s"),
    "rdiv_scalar": (lambda x, s: s / x, "s / x"),
}
# running-bound rules and ATen operators of the scalar forms (the bridge rewrites
# aten.add.Tensor(x, 0.5) and aten.add.Scalar to add_scalar, ...)
_SCALAR_RULES = {
    "add_scalar": (R.slack_correct, R.propagate_identity, CR.local_add_scalar, ("add.Scalar", "add_.Scalar")),
    "sub_scalar": (R.slack_correct, R.propagate_identity, CR.local_add_scalar, ("sub.Scalar",)),
    "rsub_scalar": (R.slack_correct, R.propagate_identity, CR.local_add_scalar, ("rsub.Scalar",)),
    "mul_scalar": (R.slack_correct_underflow, R.propagate_mul_scalar, CR.local_mul_scalar, ("mul.Scalar",)),
    "div_scalar": (R.slack_correct_underflow, R.propagate_div_scalar, CR.local_div_scalar, ("div.Scalar",)),
    "rdiv_scalar": (R.slack_correct_underflow, R.propagate_rdiv_scalar, CR.local_rdiv_scalar, ()),
}
for _name, (_fn, _doc) in SCALAR_OPS.items():
    _slack, _prop, _local, _aten = _SCALAR_RULES[_name]
    _register(_name, "elementwise", (1, 1), {"scalar": REQUIRED}, _infer_scalar,
              (lambda f: lambda x, scalar: f(_f64(x), scalar))(_fn), kernel=getattr(E, _name),
              slack=_slack, propagate=_prop, local=_local, aten=_aten,
              doc=f"{_doc} with a Python-float scalar s (attr 'scalar', kept exactly)")

_register("where", "elementwise", (3, 3), {}, _infer_bcast,
          lambda c, a, b: np.where(np.asarray(c) != 0, _f64(a), _f64(b)), kernel=E.where,
          slack=R.slack_exact, propagate=R.propagate_where, local=CR.local_exact,
          aten=("where.self", "masked_fill.Scalar"),  # x.masked_fill(mask, v) = where(mask, v, x)
          doc="where(cond, a, b): a where cond != 0 else b (broadcast)")

# -- comparisons: exact selections giving truth values (value_kind "bool") ----------------------
# ATen's logical operators lower to comparisons of truth values 0.0 / 1.0: and/or/xor to
# ne (of minimum/maximum for and/or), not to eq with 0
_LOGICAL_ATEN = {"ne": ("logical_and.default", "logical_or.default", "logical_xor.default",
                        "bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor"),
                 "eq": ("logical_not.default", "bitwise_not.default")}
for _name, (_fn, _sym) in COMPARISONS.items():
    _register(_name, "elementwise", (2, 2), {}, _infer_bcast,
              (lambda f: lambda a, b: f(_f64(a), _f64(b)))(_fn), kernel=getattr(E, _name),
              slack=R.slack_exact, propagate=R.propagate_compare, local=CR.local_exact,
              aten=(f"{_name}.Tensor", f"{_name}.Scalar") + _LOGICAL_ATEN.get(_name, ()),
              value_kind="bool",
              doc=f"a {_sym} b (bool; IEEE: false with a NaN{', except !=' if _name == 'ne' else ''}; broadcast)")


# -- constants: a tensor whose value the graph holds ----------------------------------------------


_register("constant", "elementwise", (0, 0), {"value": REQUIRED}, _infer_constant,
          lambda value: value.array.copy(), kernel=E.constant, slack=R.slack_exact,
          propagate=R.propagate_constant, local=CR.local_constant, aten=("lift_fresh_copy.default", "scalar_tensor.default"),
          doc="a tensor held by the graph (attr 'value', float64, every byte in the fingerprint); "
              "kernels hold it in S")


# -- softplus and hardswish: each operator in one place (reference, kernel, rules, ATen) -------


def _softplus_kernel(ctx, x, *, beta=1.0, threshold=R.SOFTPLUS_THRESHOLD):
    """softplus as torch's CPU kernel computes it (``softplus_kernel``): ``xb =
    x*fl32(beta)`` rounded to ``ctx.inner`` (``x`` itself for beta 1); ``x`` itself
    where ``xb > fl32(threshold)`` (no rounding), else ``log1p(exp(xb)) / beta``
    with ``exp`` by ``spec.exp`` and ``log1p`` by ``spec.log1p``, each rounded to
    ``ctx.inner``, the division by ``spec.divide``.  NaN propagates."""
    x = np.asarray(x, dtype=np.float32)
    b, t = np.float32(beta), np.float32(threshold)
    xb = x if beta == 1.0 else ctx.mul(x, b)
    v = ctx.log1p(ctx.exp(np.minimum(xb, t)))
    if beta != 1.0:
        v = ctx.div(v, np.full(v.shape, b, dtype=np.float32))
    return np.where(xb > t, x, v)


_register("softplus", "elementwise", (1, 1), {"beta": 1.0, "threshold": R.SOFTPLUS_THRESHOLD}, _infer_softplus,
          _softplus_ref, kernel=_softplus_kernel, scalar_tail=True,
          slack=R.slack_transcendental, propagate=R.propagate_softplus, local=CR.local_libm_x, aten=("softplus.default",),
          doc="log(1 + e**(beta x)) / beta, x itself for beta x > threshold (torch's defaults beta=1, threshold=20)")


def _hardswish_kernel(ctx, x):
    """hardswish as torch's CPU kernel computes it, ``x * min(max(x + 3, 0), 6) / 6``:
    ``x + 3`` rounded to ``ctx.inner``, the clamp exact, the product rounded
    to ``ctx.inner``, the division by ``spec.divide`` (3 and 6 are exact in
    every format)."""
    x = np.asarray(x, dtype=np.float32)
    t = np.clip(ctx.add(x, np.float32(3.0)), np.float32(0.0), np.float32(6.0))
    return ctx.div(ctx.mul(x, t), np.full(x.shape, 6.0, dtype=np.float32))


_register("hardswish", "elementwise", (1, 1), {}, _infer_same, _hardswish_ref, kernel=_hardswish_kernel,
          slack=R.slack_three_roundings, propagate=R.propagate_hardswish, local=CR.local_libm_x,
          aten=("hardswish.default",),
          doc="x * relu6(x + 3) / 6 (0 below -3, x above 3)")


#: a Lipschitz constant of mish: max |mish'| = 1.08850 (at x = 1.4906; tests/test_ops.py checks it)
MISH_LIPSCHITZ = 1.09


def _mish_kernel(ctx, x):
    """mish ``x * tanh(log1p(exp(x)))`` as torch's CPU kernel writes it (no
    threshold): ``exp`` by ``spec.exp``, ``log1p`` (``ctx.log1p``) and ``tanh``
    (``spec.tanh``) each rounded to ``ctx.inner``, the product rounded to
    ``ctx.inner``.  ``exp`` overflowing to inf gives ``tanh(inf) = 1``, so
    ``x`` itself; ``mish(-inf) = -inf * 0 = NaN``, as torch."""
    x = np.asarray(x, dtype=np.float32)
    return ctx.mul(x, ctx.tanh(ctx.log1p(ctx.exp(x))))


_register("mish", "elementwise", (1, 1), {}, _infer_same, _mish_ref, kernel=_mish_kernel, scalar_tail=True,
          slack=R.slack_transcendental_x, propagate=R.propagate_lipschitz(MISH_LIPSCHITZ),
          local=CR.local_libm_x, aten=("mish.default",),
          doc="x * tanh(softplus(x)) (Misra 2019; torch.nn.functional.mish); mish(-inf) = NaN")


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------
_register("sum", "reduction", (1, 1), {"axis": None, "keepdims": False}, _infer_reduce,
          lambda x, axis, keepdims: np.sum(_f64(x), axis=axis, keepdims=keepdims), kernel=E.sum_,
          slack=R.slack_sum, propagate=R.propagate_sum, local=CR.local_sum, aten=("sum.dim_IntList",),
          accumulator="float64", doc="sum over axis (numpy pairwise float64)")
_register("mean", "reduction", (1, 1), {"axis": None, "keepdims": False}, _infer_reduce,
          lambda x, axis, keepdims: np.mean(_f64(x), axis=axis, keepdims=keepdims), kernel=E.mean,
          slack=R.slack_mean, propagate=R.propagate_mean, local=CR.local_mean, aten=("mean.dim",),
          accumulator="float64", doc="sum / n (numpy pairwise float64)")
for _name, _fn, _kernel, _aten in (("max", np.max, E.max_, "amax.default"), ("min", np.min, E.min_, "amin.default")):
    def _inf(shapes, attrs, _n=_name):
        (shape,) = shapes
        axes = _axes(attrs["axis"], len(shape))
        if any(shape[a] == 0 for a in axes):
            raise ValueError(f"cannot take the {_n} over an empty axis (shape {shape}, axis {axes})")
        return _infer_reduce(shapes, attrs)
    _register(_name, "reduction", (1, 1), {"axis": None, "keepdims": False}, _inf,
              (lambda f: lambda x, axis, keepdims: f(_f64(x), axis=axis, keepdims=keepdims))(_fn),
              kernel=_kernel, slack=R.slack_exact, propagate=R.propagate_max, local=CR.local_exact,
              aten=(_aten,),
              accumulator="float64", doc=f"{_name} over axis (exact; NaN propagates)")
_register("var", "reduction", (1, 1), {"axis": None, "keepdims": False, "correction": 0},
          _infer_reduce, _var_ref, kernel=E.var, slack=R.slack_var, propagate=R.propagate_var,
          local=CR.local_var,
          # var_mean (Inductor's decomposition of layer_norm) lowers to var and mean
          aten=("var", "var_mean.correction"), accumulator="float64",
          doc="variance sum((x-mean)^2)/(n-correction), two-pass in float64")


# ---------------------------------------------------------------------------
# data movement (dtype-preserving refs)
# ---------------------------------------------------------------------------
def _move(name, arity, attrs, infer, ref, aten, doc, propagate=R.propagate_moved):
    """Register a data-movement op: its kernel is its (dtype-preserving)
    reference, its float64 reference is exact and the bounds move with the
    data (``propagate``)."""
    _register(name, "data_movement", arity, attrs, infer, ref, kernel=E.data_movement(ref),
              slack=R.slack_exact, propagate=propagate, local=CR.local_exact, aten=aten, doc=doc)


_move("reshape", (1, 1), {"shape": REQUIRED}, _infer_reshape, _reshape_ref,
      ("view.default", "_unsafe_view.default", "reshape.default", "unsqueeze.default", "squeeze.dim",
       "squeeze.default"), "reshape (one -1 allowed)")
_move("transpose", (1, 1), {"perm": None}, _infer_transpose, _transpose_ref,
      ("permute.default", "transpose.int", "t.default"), "permute axes (default: reverse)")
_move("slice", (1, 1), {"begin": None, "end": None, "step": None}, _infer_slice, _slice_ref,
      ("slice",), "basic slice x[b0:e0:s0, ...], positive steps")
_move("concat", (1, None), {"axis": 0}, _infer_concat, _concat_ref, ("cat",), "concatenate along axis")
_move("split", (1, 1), {"axis": 0, "sizes": REQUIRED, "index": REQUIRED}, _infer_split, _split_ref,
      ("split", "split_with_sizes"),
      "piece `index` of x cut along axis into pieces of `sizes` (one node per piece)")
_move("broadcast_to", (1, 1), {"shape": REQUIRED}, _infer_broadcast, _broadcast_ref, ("expand.default",),
      "numpy broadcast_to")
_move("gather", (1, 2), {"axis": 0, "indices": None}, _infer_gather, _gather_ref, ("index_select",),
      "np.take(x, indices, axis); indices an attribute or an integer-valued second input",
      propagate=R.propagate_gathered)


# ---------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------
_register("matmul", "matmul", (2, 2), {}, _infer_matmul,
          lambda a, b: np.matmul(_f64(a), _f64(b)), kernel=E.matmul,
          slack=R.slack_matmul, propagate=R.propagate_matmul, local=CR.local_matmul, aten=("matmul", "mm", "bmm"),
          accumulator="float64",
          doc="numpy matmul semantics (batch broadcasting), float64 BLAS")


# ---------------------------------------------------------------------------
# composites (ref: float64 formula; decompose: the primitives a compiler fuses)
# ---------------------------------------------------------------------------
def _softmax_dec(x, *, axis):
    m = max_(x, axis=axis, keepdims=True)
    e = exp(sub(x, m))
    return div(e, sum_(e, axis=axis, keepdims=True))


def _log_softmax_dec(x, *, axis):
    d = sub(x, max_(x, axis=axis, keepdims=True))
    return sub(d, log(sum_(exp(d), axis=axis, keepdims=True)))


def _layer_norm_dec(x, gamma=None, beta=None, *, axis, eps):
    mu = mean(x, axis=axis, keepdims=True)
    d = sub(x, mu)
    var = mean(mul(d, d), axis=axis, keepdims=True)
    r = rsqrt(add_scalar(var, eps))
    y = mul(d, r)
    if gamma is not None:
        y = mul(y, gamma)
    if beta is not None:
        y = add(y, beta)
    return y


def _rms_norm_dec(x, weight=None, *, axis, eps):
    ms = mean(mul(x, x), axis=axis, keepdims=True)
    r = rsqrt(add_scalar(ms, eps))
    y = mul(x, r)
    if weight is not None:
        y = mul(y, weight)
    return y


_register("softmax", "composite", (1, 1), {"axis": -1}, _infer_softmax, _softmax_ref,
          kernel=E.softmax, slack=R.slack_softmax, propagate=R.propagate_softmax,
          local=CR.local_composite, aten=("_softmax.default",),
          decompose=_softmax_dec, accumulator="float64",
          doc="exp(x - max) / sum(exp(x - max)); decomposes to max, sub, exp, sum, div")
_register("log_softmax", "composite", (1, 1), {"axis": -1}, _infer_softmax, _log_softmax_ref,
          kernel=E.log_softmax, slack=R.slack_decomposed, propagate=R.propagate_decomposed,
          local=CR.local_composite,
          aten=("_log_softmax",), decompose=_log_softmax_dec, accumulator="float64",
          doc="(x - max) - log(sum(exp(x - max))); decomposes to max, sub, exp, sum, log, sub")
_register("layer_norm", "composite", (1, 3), {"axis": -1, "eps": 1e-5}, _infer_norm, _layer_norm_ref,
          kernel=E.layer_norm, slack=R.slack_decomposed, propagate=R.propagate_decomposed,
          local=CR.local_composite,
          aten=("native_layer_norm.default",), decompose=_layer_norm_dec, accumulator="float64",
          doc="(x - mean) / sqrt(var + eps) * gamma + beta (biased var, two-pass); inputs x[, gamma[, beta]]")
_register("rms_norm", "composite", (1, 2), {"axis": -1, "eps": 1e-6}, _infer_norm, _rms_norm_ref,
          kernel=E.rms_norm, slack=R.slack_decomposed, propagate=R.propagate_decomposed,
          local=CR.local_composite,
          aten=("rms_norm",), decompose=_rms_norm_dec, accumulator="float64",
          doc="x / sqrt(mean(x^2) + eps) * weight; inputs x[, weight]")


# ---------------------------------------------------------------------------
# user-facing functions: symbolic while tracing, float64 reference on arrays
# ---------------------------------------------------------------------------
#: the tracers running now (innermost last), kept by :func:`tracing` only;
#: ``constant()`` outside any tensor operation needs to know whether it is
#: being traced
_TRACERS: list = []


@contextlib.contextmanager
def tracing(tracer):
    """Make ``tracer`` the current tracer while the block runs (``constant()``
    then emits a node into it); nested blocks stack, the innermost wins."""
    _TRACERS.append(tracer)
    try:
        yield tracer
    finally:
        _TRACERS.pop()


def _current_tracer():
    return _TRACERS[-1] if _TRACERS else None


def _apply(op: str, args, attrs=None):
    """Emit ``op`` on symbolic tensors, or evaluate its reference on arrays.
    While tracing, numbers and arrays among ``args`` become constant nodes."""
    attrs = attrs or {}
    tracer = next((a._tracer for a in args if hasattr(a, "_tracer")), None)
    if tracer is not None:
        return tracer.emit(op, list(args), attrs)
    arrays = [np.asarray(a) for a in args]
    for i, a in enumerate(arrays):
        if a.dtype.kind not in "fiub":
            raise TypeError(f"{op}: input {i} must be a numeric array, got dtype {a.dtype}")
    info = get_op(op)
    attrs, _ = info.check([a.shape for a in arrays], attrs)
    return info.ref(*arrays, **attrs)


def _is_scalar(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and np.ndim(v) == 0 and not hasattr(v, "_tracer")


def _binary(op, rop):
    def f(a, b):
        if _is_scalar(b) and not _is_scalar(a):
            return _apply(f"{op}_scalar", [a], {"scalar": b})
        if _is_scalar(a) and not _is_scalar(b):
            return _apply(f"{rop}_scalar", [b], {"scalar": a})
        return _apply(op, [a, b])
    f.__name__ = op
    f.__doc__ = f"{CATALOGUE[op].doc} (a Python number on either side gives the scalar form)"
    return f


add = _binary("add", "add")
sub = _binary("sub", "rsub")
mul = _binary("mul", "mul")
div = _binary("div", "rdiv")


def _scalar_fn(op):
    def f(x, scalar):
        return _apply(op, [x], {"scalar": scalar})
    f.__name__ = op
    f.__doc__ = CATALOGUE[op].doc
    return f


add_scalar = _scalar_fn("add_scalar")
sub_scalar = _scalar_fn("sub_scalar")
rsub_scalar = _scalar_fn("rsub_scalar")
mul_scalar = _scalar_fn("mul_scalar")
div_scalar = _scalar_fn("div_scalar")
rdiv_scalar = _scalar_fn("rdiv_scalar")


def _unary_fn(op):
    def f(x):
        return _apply(op, [x])
    f.__name__ = op
    f.__doc__ = CATALOGUE[op].doc
    return f


neg = _unary_fn("neg")
abs_ = _unary_fn("abs")
exp = _unary_fn("exp")
log = _unary_fn("log")
sqrt = _unary_fn("sqrt")
rsqrt = _unary_fn("rsqrt")
reciprocal = _unary_fn("reciprocal")
tanh = _unary_fn("tanh")
sigmoid = _unary_fn("sigmoid")
erf = _unary_fn("erf")
silu = _unary_fn("silu")
relu = _unary_fn("relu")
softplus = _unary_fn("softplus")
hardswish = _unary_fn("hardswish")
log1p = _unary_fn("log1p")
mish = _unary_fn("mish")


def gelu(x, approximate: str = "none"):
    """GELU, ``approximate`` in {"none" (erf form), "tanh"} (torch's vocabulary)."""
    return _apply("gelu", [x], {"approximate": approximate})


def maximum(a, b):
    """Elementwise maximum (NaN propagates)."""
    return _apply("maximum", [a, b])


def minimum(a, b):
    """Elementwise minimum (NaN propagates)."""
    return _apply("minimum", [a, b])


def where(cond, a, b):
    """``a`` where ``cond != 0`` else ``b`` (numbers and arrays become constants while tracing)."""
    return _apply("where", [cond, a, b])


def _compare_fn(op):
    def f(a, b):
        return _apply(op, [a, b])
    f.__name__ = op
    f.__doc__ = CATALOGUE[op].doc + " (numbers and arrays become constants while tracing)"
    return f


gt = _compare_fn("gt")
ge = _compare_fn("ge")
lt = _compare_fn("lt")
le = _compare_fn("le")
eq = _compare_fn("eq")
ne = _compare_fn("ne")


def constant(value):
    """A constant tensor (``value``: a number or array, stored as float64 in
    the graph); while tracing, a ``constant`` node."""
    tracer = _current_tracer()
    if tracer is not None:
        return tracer.constant(value)
    return _apply("constant", [], {"value": value})


def cast(x, fmt):
    """Round ``x`` to the format ``fmt`` (name or Format), RNE."""
    return _apply("cast", [x], {"to": getattr(fmt, "name", fmt)})


def sum_(x, axis=None, keepdims=False):
    """Sum over ``axis`` (None: all; int or tuple), as ``numpy.sum``."""
    return _apply("sum", [x], {"axis": axis, "keepdims": keepdims})


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis``, as ``numpy.mean``."""
    return _apply("mean", [x], {"axis": axis, "keepdims": keepdims})


def max_(x, axis=None, keepdims=False):
    """Maximum over ``axis`` (NaN propagates), as ``numpy.max``."""
    return _apply("max", [x], {"axis": axis, "keepdims": keepdims})


def min_(x, axis=None, keepdims=False):
    """Minimum over ``axis`` (NaN propagates), as ``numpy.min``."""
    return _apply("min", [x], {"axis": axis, "keepdims": keepdims})


def var(x, axis=None, keepdims=False, correction=0):
    """Variance ``sum((x - mean)^2) / (n - correction)`` (two-pass reference)."""
    return _apply("var", [x], {"axis": axis, "keepdims": keepdims, "correction": correction})


def reshape(x, shape):
    """Reshape (one ``-1`` allowed)."""
    return _apply("reshape", [x], {"shape": shape})


def transpose(x, perm=None):
    """Permute axes; ``perm=None`` reverses them (``x.T``)."""
    return _apply("transpose", [x], {"perm": perm})


def broadcast_to(x, shape):
    """Broadcast to ``shape`` with numpy's rules."""
    return _apply("broadcast_to", [x], {"shape": shape})


def concat(xs, axis=0):
    """Concatenate a sequence of tensors along ``axis``."""
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f"concat takes a list or tuple of tensors, got {type(xs).__name__}")
    return _apply("concat", list(xs), {"axis": axis})


def split(x, sections, axis=0):
    """Split ``x`` along ``axis``.

    ``sections`` is an int n (n equal pieces, as ``numpy.split``) or a list of
    piece sizes (as ``torch.split``).  Returns a tuple; each piece is its own
    ``split`` node with attributes ``sizes`` and ``index``.
    """
    shape = _shape_of(x)
    ax = _axis1(axis, len(shape))
    if isinstance(sections, numbers.Integral) and not isinstance(sections, bool):
        n = int(sections)
        if n <= 0 or shape[ax] % n:
            raise ValueError(
                f"split of {getattr(x, 'name', 'x')!r} {shape}: sections={n} does not divide axis {ax} "
                f"of size {shape[ax]}; give a divisor of {shape[ax]} or a list of sizes summing to it"
            )
        sizes = (shape[ax] // n,) * n
    else:
        sizes = _shape_tuple(sections, "sections")
    return tuple(_apply("split", [x], {"axis": ax, "sizes": sizes, "index": i}) for i in range(len(sizes)))


def gather(x, indices, axis=0):
    """``np.take(x, indices, axis)``: ``indices`` a constant int array
    (stored as the attribute ``indices``) or a symbolic tensor of
    integer values (second input)."""
    if hasattr(indices, "_tracer"):
        return _apply("gather", [x, indices], {"axis": axis})
    return _apply("gather", [x], {"axis": axis, "indices": np.asarray(indices).tolist()})


def matmul(a, b):
    """``a @ b`` with numpy's matmul rules (batch dims broadcast)."""
    return _apply("matmul", [a, b])


def softmax(x, axis=-1):
    """Softmax along ``axis`` (composite; see CATALOGUE["softmax"].decompose)."""
    return _apply("softmax", [x], {"axis": axis})


def log_softmax(x, axis=-1):
    """Log-softmax along ``axis`` (composite)."""
    return _apply("log_softmax", [x], {"axis": axis})


def layer_norm(x, gamma=None, beta=None, axis=-1, eps=1e-5):
    """Layer norm over ``axis`` (int or tuple); ``beta`` needs ``gamma``."""
    if beta is not None and gamma is None:
        raise ValueError("layer_norm: beta given without gamma")
    args = [a for a in (x, gamma, beta) if a is not None]
    return _apply("layer_norm", args, {"axis": axis, "eps": eps})


def rms_norm(x, weight=None, axis=-1, eps=1e-6):
    """RMS norm over ``axis`` (int or tuple), times ``weight`` if given."""
    args = [x] if weight is None else [x, weight]
    return _apply("rms_norm", args, {"axis": axis, "eps": eps})


def _shape_of(x):
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


_ALIASES = {"sum": sum_, "max": max_, "min": min_, "abs": abs_}


def __getattr__(name):
    # numpy-like names ``ops.sum``/``max``/``min``/``abs`` without shadowing
    # the builtins inside this module
    if name in _ALIASES:
        return _ALIASES[name]
    raise AttributeError(f"module 'numlab.ops' has no attribute {name!r}")


# --- block-scaled operators ---
# quantize / block_scale / dequantize / scaled_matmul: numlab.kernels.scaled
# (formats, kernels, float64 references, shape rule); bound rules in
# numlab.bound_rules' block-scaled section.  ATen: torchao's mx/nvfp4 casts are
# not ATen operators; ``aten`` names the nearest ATen operators (per-channel
# quantisation, scale choice, dequantisation, ``_scaled_mm``), none of which
# the torch bridge maps.  Storage between kernels (``stored_fmt``): elements in
# their element format, scales in fp32, never rounded to S.
from ..kernels import scaled as _scaled  # noqa: E402  (section appended at the end)

_register("quantize", "elementwise", (1, 1), {"fmt": REQUIRED},
          lambda shapes, attrs: _scaled.infer_scaled("quantize", shapes, attrs), _scaled.quantize_ref,
          kernel=E.quantize, slack=R.slack_exact,
          propagate=functools.partial(R.propagate_quantize, block_scale=_scaled.block_scale_ref),
          local=functools.partial(CR.local_quantize, block_scale=_scaled.block_scale_ref),
          aten=("quantize_per_channel",), stored_fmt=_scaled.element_storage,
          doc="elements of x in the block-scaled format fmt (kernels.scaled presets: mxfp8_e4m3, nvfp4, "
              "deepseek_1x128, ...); each output depends on its block's amax")
_register("block_scale", "elementwise", (1, 1), {"fmt": REQUIRED},
          lambda shapes, attrs: _scaled.infer_scaled("block_scale", shapes, attrs), _scaled.block_scale_ref,
          kernel=E.block_scale, slack=R.slack_exact, propagate=R.propagate_block_scale,
          local=CR.local_block_scale,
          aten=("choose_qparams_optimized",), stored_fmt=_scaled.scale_storage,
          doc="per-block dequantisation scale of x in fmt, shape (..., R/bm, C/bn)")
_register("dequantize", "elementwise", (2, 2), {"fmt": REQUIRED},
          lambda shapes, attrs: _scaled.infer_scaled("dequantize", shapes, attrs), _scaled.dequantize_ref,
          kernel=E.dequantize, slack=R.slack_exact, propagate=R.propagate_dequantize,
          local=CR.local_dequantize,
          aten=("dequantize",),
          doc="elements q times their block's scale s (one rounding)")
_register("scaled_matmul", "matmul", (4, 4), {"fmt_a": REQUIRED, "fmt_b": REQUIRED},
          lambda shapes, attrs: _scaled.infer_scaled("scaled_matmul", shapes, attrs), _scaled.scaled_matmul_ref,
          kernel=E.scaled_matmul, slack=R.slack_scaled_matmul, propagate=R.propagate_scaled_matmul,
          local=CR.local_scaled_matmul,
          aten=("_scaled_mm",), accumulator="float64",
          doc="(qa sa) @ (qb sb) with the scales applied per K block in the epilogue (DeepSeek-V3)")


def quantize(x, fmt):
    """The elements of ``x`` in the block-scaled format ``fmt`` (a preset name of
    :data:`numlab.kernels.scaled.SCALED_PRESETS` or a ScaledFormat preset)."""
    return _apply("quantize", [x], {"fmt": getattr(fmt, "name", fmt)})


def block_scale(x, fmt):
    """Per-block dequantisation scales of ``x`` in ``fmt``."""
    return _apply("block_scale", [x], {"fmt": getattr(fmt, "name", fmt)})


def dequantize(q, s, fmt):
    """``q * s`` with one scale per block of ``fmt``."""
    return _apply("dequantize", [q, s], {"fmt": getattr(fmt, "name", fmt)})


def fake_quantize(x, fmt):
    """``dequantize(quantize(x), block_scale(x))``: three nodes."""
    return dequantize(quantize(x, fmt), block_scale(x, fmt), fmt)


def scaled_matmul(qa, sa, qb, sb, fmt_a, fmt_b):
    """``(qa sa) @ (qb sb)``, scales applied per block of K in the epilogue."""
    return _apply("scaled_matmul", [qa, sa, qb, sb],
                  {"fmt_a": getattr(fmt_a, "name", fmt_a), "fmt_b": getattr(fmt_b, "name", fmt_b)})
