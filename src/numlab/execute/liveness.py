"""Which spec computes each node of a plan, and which knobs of a run change nothing.

The executor's rule (:mod:`numlab.execute`, "Modes") in one place:

* ``eager``: every node is its own library kernel and runs with ``kernels``.
* ``fused`` / ``emulated_casts``: a code-generated block (:attr:`Block.codegen
  <numlab.fusion.Block.codegen>`) runs with ``kernels``, except the fields
  of the aligned sources of difference, which come from ``library``; every
  other block is a library call and runs with ``library``.
* ``reference``: no spec at all.

:func:`runs_codegen` and :func:`governing_arg` state it; the executor and
:func:`numlab.contract_bounds.node_contracts` ask them.  :func:`no_effect`
uses it to find the knobs of one run that change no node of its plan (each
a :class:`NoEffectWarning`): a spec field set (away from the spec's preset)
that no node reading it computes with, a spec no node computes with, a
source of ``align`` that changes nothing, ``kernels`` in the reference.  It
is conservative: a field is taken as read by a node unless the node's
operator is known not to read it (:data:`FIELD_READERS`), so a warning
means the run's output bits do not depend on the knob (tested on every zoo
model), and a knob that might matter is never reported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings

from ..kernels.grammar import SPEC_PRESETS, spec_diff, unit_string

__all__ = ["FUSED_MODES", "FIELD_READERS", "KNOWN_OPS", "NoEffectWarning", "runs_codegen",
           "governing_arg", "reads", "no_effect", "quiet"]

FUSED_MODES = ("fused", "emulated_casts")

FIELD_READERS = {
    "mma": ("matmul", "scaled_matmul"),
    "matmul_algo": ("matmul", "scaled_matmul"),
    "k_tile": ("matmul", "scaled_matmul"),
    "exp": ("exp", "sigmoid", "silu", "softmax", "log_softmax", "softplus", "mish"),
    "reciprocal": ("reciprocal", "sigmoid", "silu"),
    "divide": ("div", "div_scalar", "rdiv_scalar", "softmax", "hardswish"),
    "rsqrt": ("rsqrt", "layer_norm", "rms_norm"),
    "tanh": ("tanh", "mish"),
    "erf": ("erf",),
    "gelu": ("gelu",),
    "gelu_tanh": ("gelu",),
    "variance": ("var", "layer_norm"),
    "log1p": ("log1p", "softplus", "mish"),
    "silu": ("silu",),
    "softmax": ("softmax",),
    "softmax_order": ("softmax", "log_softmax"),
    "layer_norm": ("layer_norm",),
    "moments_lanes": ("layer_norm",),
    "storage_scalars": ("add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar", "rdiv_scalar",
                        "add_alpha"),
    "loop_step": ("sigmoid", "gelu", "softplus", "mish", "add_alpha", "exp", "log1p", "tanh", "erf", "silu", "rsqrt"),
    "alpha_step": ("add_alpha", "rsqrt"),
    "tail_ops": ("sigmoid", "gelu", "softplus", "mish", "exp", "log1p", "tanh", "erf", "silu"),
    "tail_math": ("sigmoid", "gelu", "softplus", "mish", "exp", "log1p", "tanh", "erf", "silu"),
    "grain_size": ("sigmoid", "gelu", "softplus", "mish", "add_alpha", "exp", "log1p", "tanh", "erf", "silu", "rsqrt"),
    "threads": ("sigmoid", "gelu", "softplus", "mish", "add_alpha", "exp", "log1p", "tanh", "erf", "silu", "rsqrt"),
}
"""KernelSpec field -> the operators whose engine kernel reads it
(:mod:`numlab.kernels.engine`; ``gelu`` for ``approximate="none"``,
``gelu_tanh`` for ``"tanh"``).  Fields not listed are taken as read by
every node."""

KNOWN_OPS = frozenset({
    "abs", "add", "add_alpha", "add_scalar", "block_scale", "broadcast_to", "cast", "concat", "constant",
    "dequantize", "div", "div_scalar", "eq", "erf", "exp", "gather", "ge", "gelu", "gt", "hardswish",
    "layer_norm", "le", "log", "log1p", "log_softmax", "lt", "matmul", "max", "maximum", "mean", "min",
    "minimum", "mish", "mul", "mul_scalar", "ne", "neg", "quantize", "rdiv_scalar", "reciprocal", "relu",
    "reshape", "rms_norm", "rsqrt", "rsub_scalar", "scaled_matmul", "sigmoid", "silu", "slice",
    "softmax", "softplus", "split", "sqrt", "sub", "sub_scalar", "sum", "tanh", "transpose", "var",
    "where",
})
"""Operators whose kernels were checked against :data:`FIELD_READERS`; any
other operator is taken as reading every field."""


class NoEffectWarning(UserWarning):
    """A knob of a run that changes no node of its plan (the run's output
    bits are those of the run without it).

    Attributes: ``arg`` (the argument: ``"kernels"``, ``"library"``,
    ``"align"``, ``"keep_internals"``), ``fields`` (the spec
    fields named, empty for the whole argument), ``value`` (the
    ``key=value`` items, or the argument's value as written), ``applies``
    (the argument that does apply, or None) and ``cli`` (the same message
    in the command line's option names)."""

    def __init__(self, message: str, *, arg: str, fields=(), value: str = "", applies=None, cli: str = ""):
        super().__init__(message)
        self.arg, self.fields, self.value, self.applies = arg, tuple(fields), value, applies
        self.cli = cli or message


def runs_codegen(block, mode: str) -> bool:
    """Whether ``block`` runs with the code generator's spec (``kernels``) in
    ``mode``: a code-generated block of a fused mode.  Otherwise it is a
    library kernel (eager's ``kernels``, the fused modes' ``library``)."""
    return mode in FUSED_MODES and block.codegen


def governing_arg(block, mode: str, field: str, aligned: frozenset) -> str | None:
    """The argument of :func:`numlab.execute.run` whose value of ``field``
    the members of ``block`` compute with in ``mode`` (``aligned``: the
    KernelSpec fields of the aligned sources); None in the reference."""
    if mode == "reference":
        return None
    if mode not in FUSED_MODES:
        return "kernels"
    if not runs_codegen(block, mode):
        return "library"
    return "library" if field in aligned else "kernels"


def reads(node, field: str, spec, *, fused: bool) -> bool:
    """Whether ``node`` can read ``field`` of ``spec`` (the spec it computes
    with) -- False only where that is certain: ``promotion`` inside a fused
    block (fp32 whatever it says), ``matmul_algo``/``k_tile`` when ``spec.mma``
    runs the matmuls, a field of :data:`FIELD_READERS` on an operator of
    :data:`KNOWN_OPS` that does not read it."""
    if field == "promotion" and fused:
        return False
    if node.op not in KNOWN_OPS:
        return True
    if field in ("matmul_algo", "k_tile") and spec.mma is not None:
        return False
    if field in ("gelu", "gelu_tanh") and node.op == "gelu":
        return (node.op_attrs.get("approximate", "none") == "none") == (field == "gelu")
    return node.op in FIELD_READERS.get(field, (node.op,))


# ---------------------------------------------------------------------------
# findings
# ---------------------------------------------------------------------------
def _py(arg, value=None):
    return f"{arg}=" if value is None else f"{arg}={value!r}"


def _cli(arg, value=None):
    opt = "--" + arg.replace("_", "-")
    return opt if value is None else f"{opt} {value}"


def _rows(plan, mode, gen, lib, emulate):
    """[(node, block, the spec it computes with, whether its ctx is fused)]
    for every node of ``plan.graph`` (the executor's rule)."""
    g = plan.graph
    out = []
    for block in plan.blocks:
        cg = runs_codegen(block, mode)
        for m in block.members:
            out.append((g.node(m), block, gen if cg else lib, cg and not emulate))
    return out


def _why_dead(arg, field, other, mode, rows, aligned, sources):
    """(why, why in CLI words, the argument that applies or None) when no
    node computing with ``arg`` reads ``field``; None when one does."""
    readers = [(n, b) for n, b, spec, fused in rows if reads(n, field, spec, fused=fused)]
    if arg in {governing_arg(b, mode, field, aligned) for _, b in readers}:
        return None
    if not readers:
        units = sorted({unit_string(spec.mma) for n, _, spec, _ in rows
                        if n.op in FIELD_READERS["mma"] and spec.mma is not None})
        if field in ("matmul_algo", "k_tile") and units:
            why = (f"every matmul of this plan runs on a matrix unit (mma={'/'.join(units)}), "
                   "where matmul_algo and k_tile do not apply")
        elif field == "promotion":
            why = "every node that computes with it is in a code-generated block, which computes in fp32"
        elif field in FIELD_READERS:
            why = f"no node of this plan reads it (it applies to {', '.join(FIELD_READERS[field])})"
        else:
            why = "no node of this plan computes with it"
        return why, why, None
    if field in FIELD_READERS:
        what = "/".join(sorted({n.op for n, _ in readers})) + " of this plan"
    elif len(readers) == len(rows):
        what = "node of this plan"
    else:  # promotion: a code-generated block computes in fp32 whatever it says
        what = "node of this plan that reads it"
    if other == "kernels":
        why = f"every {what} is code-generated"
        return why, why, other
    if all(not runs_codegen(b, mode) for _, b in readers):
        why = f"every {what} is a library block"
        return why, why, other
    return (f"every {what} takes it from library= (align={tuple(sources)!r})",
            f"every {what} takes it from --library (--align {','.join(sources)})", other)


def _field_findings(arg, given, default, other, mode, rows, aligned, sources):
    """NoEffectWarnings for the fields of ``given`` (argument ``arg``) that
    were set (they differ from the preset ``given`` names, else from the
    mode's ``default``) and that no node computing with ``arg`` reads: one
    per reason, naming every such field.  A spec that differs from
    ``default`` only by its preset warns as a whole when no node computes
    with it."""
    base = getattr(type(given), given.name)() if given.name in SPEC_PRESETS else default
    groups: dict = {}
    for field, item in spec_diff(given, base):
        if field == "name":
            continue
        dead = _why_dead(arg, field, other[0], mode, rows, aligned, sources)
        if dead is not None:
            groups.setdefault(dead, []).append((field, item))
    same_as_applied = other[1] is not None and dataclasses.replace(given, name=other[1].name) == other[1]
    unused = not any(governing_arg(b, mode, f.name, aligned) == arg for _, b, _, _ in rows
                     for f in dataclasses.fields(given))
    if not groups and unused and not same_as_applied and dataclasses.replace(given, name=default.name) != default:
        kind = "a library block" if other[0] == "library" else "code-generated"
        why = f"every node of this plan is {kind}"
        return [NoEffectWarning(f"{_py(arg, given.spec)} changes nothing: {why}; {_py(other[0])} applies",
                                arg=arg, value=given.spec,
                                applies=other[0], cli=f"{_cli(arg, given.spec)} changes nothing: {why}; "
                                                      f"{_cli(other[0])} applies")]
    out = []
    for (why, why_cli, fix), items in groups.items():
        fields = tuple(dict.fromkeys(f for f, _ in items))
        want = None
        if fix is not None:
            want = dataclasses.replace(other[1], **{f: getattr(given, f) for f in fields})
            if want == other[1]:
                continue  # the spec that applies has these values: what was asked for is what runs
        text = ",".join(i for _, i in items)
        verb = "changes" if len(items) == 1 else "change"
        msg = f"{arg}: {text} {verb} nothing: {why}"
        cli = f"{_cli(arg)} {text} {verb} nothing: {why_cli}"
        if want is not None:
            msg += f"; use {_py(fix, want.spec)}"
            cli += f"; use {_cli(fix, want.spec)}"
        out.append(NoEffectWarning(msg, arg=arg, fields=fields, value=text, applies=fix, cli=cli))
    return out


def _align_findings(given_align, mode, rows):
    """NoEffectWarnings for the sources of ``align`` the caller named that
    change nothing: promotion in emulated casts, every source where no block
    is code-generated."""
    out = []
    srcs = tuple(given_align)
    if mode == "emulated_casts" and "promotion" in srcs:
        out.append(NoEffectWarning("align: 'promotion' changes nothing: mode 'emulated_casts' aligns "
                                   "promotion already", arg="align", value="promotion",
                                   cli="--align promotion changes nothing: --mode emulated_casts aligns "
                                       "promotion already"))
        srcs = tuple(s for s in srcs if s != "promotion")
    if srcs and not any(runs_codegen(r[1], mode) for r in rows):
        why = "this plan has no code-generated block (every node is a library kernel)"
        text = srcs[0] if len(srcs) == 1 else srcs
        out.append(NoEffectWarning(f"align: {text!r} changes nothing: {why}", arg="align", value=",".join(srcs),
                                   cli=f"--align {','.join(srcs)} changes nothing: {why}"))
    return out


def no_effect(plan, mode: str, *, kernels=None, library=None, given_kernels=None, given_library=None,
              default_kernels=None, default_library=None, given_align=(), align=(),
              source_fields=None) -> list:
    """The :class:`NoEffectWarning` of every knob of one run that changes no
    node of ``plan``.

    ``kernels``/``library`` are the specs the run computes with (the
    aligned ``kernels`` not applied), ``given_*`` what the caller passed
    (None: not given) and ``default_*`` what the run uses without them;
    ``given_align`` the sources the caller named, ``align`` all the
    aligned ones and ``source_fields`` the KernelSpec fields of each
    (:data:`numlab.execute.SOURCE_FIELDS`).

    Nothing is reported where what was asked for is what runs: a field
    that the spec that does apply already has (``kernels`` and ``library``
    given the same unit, so every matmul is on it whatever the plan), a
    source of ``align`` on which kernels and library agree, fusion options
    that plan the graph as the default ones do."""
    if mode == "reference":
        if given_kernels is None:
            return []
        s = given_kernels.spec
        why = "mode 'reference' computes every node by its fp64 reference"
        return [NoEffectWarning(f"{_py('kernels', s)} changes nothing: {why}", arg="kernels",
                                value=s, cli=f"{_cli('kernels', s)} changes nothing: --mode reference "
                                             "computes every node by its fp64 reference")]
    aligned = frozenset(f for src in align for f in source_fields[src])
    fused_mode = mode in FUSED_MODES
    gen = kernels
    if fused_mode and aligned:
        gen = dataclasses.replace(kernels, **{f: getattr(library, f) for f in aligned})
    rows = _rows(plan, mode, gen, library if fused_mode else kernels, "promotion" in align)
    out = []
    if given_kernels is not None:
        other = ("library", library) if fused_mode else (None, None)
        out += _field_findings("kernels", given_kernels, default_kernels, other, mode, rows, aligned, align)
    if given_library is not None and fused_mode:
        out += _field_findings("library", given_library, default_library, ("kernels", kernels), mode, rows,
                               aligned, align)
    if fused_mode:
        out += _align_findings(given_align, mode, rows)
    return out


@contextlib.contextmanager
def quiet():
    """No :class:`NoEffectWarning` inside: for code that runs variants of a
    run on purpose (fusion presets swept, subgraphs bisected, a claim's
    harness runs), where a knob that changes nothing in one variant is
    expected, not the caller's mistake."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoEffectWarning)
        yield
