"""The kernel-spec grammar: one parser (:func:`parse_kernel_spec`) and its
inverse (:func:`kernel_spec_string`) for :class:`numlab.kernels.KernelSpec`.

``KernelSpec.parse(spec)`` and ``KernelSpec.spec`` call these; every API and
CLI command that takes a kernel spec coerces through them.  Grammar::

    spec     := preset [":" field "=" value ("," field "=" value)*]
    preset   := "handwritten" | "codegen" | "inductor_cpu"
    field    := a KernelSpec field name, or "hardware.<field>" for a field
                of its Hardware
    value    := the field's own string form: orders
                "blocked(512,lanes(64),sequential)", algorithms
                "newton(table8,2,fp32)", formats "fp32", booleans true/false,
                ints, "none" for a field that may be None, matrix units
                (below); commas inside parentheses do not split
    unit     := "none" | unit_base ["(" ufield "=" value ("," ufield "=" value)* ")"]
    unit_base:= a preset "GPU/in_fmt/out_fmt" ("H100/fp8_e4m3/fp32"), a GPU
                alone for its fp16 -> fp32 preset ("H100"), or "custom"
                (``MatrixUnit()``'s defaults)
    ufield   := a MatrixUnit numerical field (in_fmt, fma_size, align_bits,
                promote_every, ...; not the labels name/source/evidence)

Fields are found with :func:`dataclasses.fields`, so a new field of
``KernelSpec`` or ``Hardware`` is part of the grammar with no change here;
each value is checked by the field's own parser (``KernelSpec.__post_init__``:
:func:`numlab.kernels.orders.parse_order`,
:func:`numlab.kernels.algorithms.parse_algo`,
:func:`numlab.formats.get_format`, the choice checks).
"""

from __future__ import annotations

import dataclasses

from ..formats import Format
from .hardware import Hardware
from .mma import GPUS, UNIT_PRESETS, MatrixUnit
from .mma import preset as unit_preset

__all__ = ["SPEC_PRESETS", "GRAMMAR", "parse_kernel_spec", "kernel_spec_string", "split_top_level",
           "parse_unit", "unit_string", "spec_diff"]

SPEC_PRESETS = ("handwritten", "codegen", "inductor_cpu")
"""Kernel presets of the grammar (``KernelSpec.handwritten()`` / ``.codegen()`` /
``.inductor_cpu()``)."""

GRAMMAR = """\
spec     := preset [":" field "=" value ("," field "=" value)*]
preset   := "handwritten" | "codegen" | "inductor_cpu"
field    := a KernelSpec field, or "hardware.<field>" for a Hardware field
value    := the field's own string form: orders
            "blocked(512,lanes(64),sequential)", algorithms
            "newton(table8,2,fp32)", formats "fp32", booleans true/false,
            ints, "none"; commas inside parentheses do not split
mma=UNIT   matmuls run on a modelled matrix unit (numlab.kernels.mma):
            none | GPU | GPU/in_fmt/out_fmt | custom, optionally
            (field=value,...) with MatrixUnit fields, e.g.
            mma=H100/fp8_e4m3/fp32(promote_every=128)
examples:   codegen   handwritten:fma=true,rsqrt=newton(table8,2,fp32)
            codegen:reduce_inner=lanes(64,tree,masked),hardware.ub_bytes=16384
            handwritten:mma=H100   codegen:mma=custom(fma_size=8,align_bits=3)"""
"""The kernel spec grammar (shown by ``numlab --help``)."""

_HW = "hardware."


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` outside parentheses (``"a(1,2),b"`` ->
    ``["a(1,2)", "b"]``).  Raises ValueError on unbalanced parentheses."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{text!r} has an unmatched ')' at position {i}")
        elif ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"{text!r} has an unclosed '('")
    out.append(text[start:])
    return out


def _type_text(f: dataclasses.Field) -> str:
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def _nullable(f: dataclasses.Field) -> bool:
    return "None" in _type_text(f) or f.default is None


def _parse_value(f: dataclasses.Field, key: str, value: str, arg: str):
    """The Python value of ``key=value`` for field ``f``: bools and ints are
    converted here; everything else is passed as the string the field's own
    parser (in ``__post_init__``) reads."""
    t = _type_text(f)
    v = value.strip()
    if _nullable(f) and v.lower() == "none":
        return None
    if t.split("|")[0].strip() == "bool":
        low = v.lower()
        if low in ("true", "false"):
            return low == "true"
        raise ValueError(f"{arg}: {key}={value!r} is not a boolean; valid values: ['true', 'false']")
    if t.split("|")[0].strip() == "int":
        try:
            hexa = v.lstrip("+-").lower().startswith("0x")  # bit patterns (nan_bits)
            return int(v, 16) if hexa else int(v)
        except ValueError:
            valid = "an int or 'none'" if _nullable(f) else "an int"
            raise ValueError(f"{arg}: {key}={value!r} is not an int; valid values: {valid}") from None
    return v


def _value_string(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Format | Hardware):
        return v.name
    if isinstance(v, MatrixUnit):
        return unit_string(v)
    return str(v)


# ---------------------------------------------------------------------------
# matrix units (KernelSpec.mma)
# ---------------------------------------------------------------------------
_UNIT_LABELS = ("name", "source", "evidence")
"""MatrixUnit fields that are labels, not numerical features (not in the grammar)."""
CUSTOM_UNIT = "custom"
"""The unit base that stands for ``MatrixUnit()``'s defaults."""


def _unit_fields() -> dict:
    return {f.name: f for f in dataclasses.fields(MatrixUnit) if f.name not in _UNIT_LABELS}


def _unit_base(text: str, arg: str) -> MatrixUnit:
    if text == CUSTOM_UNIT:
        return MatrixUnit(name=CUSTOM_UNIT)
    try:
        return unit_preset(text)
    except ValueError:
        raise ValueError(
            f"{arg}={text!r} is not a matrix unit; valid: 'none', {CUSTOM_UNIT!r}, a GPU "
            f"{list(GPUS)} or a preset {list(UNIT_PRESETS)}, optionally followed by "
            f"(field=value,...) with fields {list(_unit_fields())}") from None


def parse_unit(value, arg: str = "mma"):
    """The matrix unit named by ``value`` (grammar rule ``unit`` in the module
    docstring): None or ``"none"`` -> None, a :class:`MatrixUnit` unchanged,
    ``"H100"`` / ``"H100/fp8_e4m3/fp32"`` -> the preset
    (:func:`numlab.kernels.mma.presets.preset`), ``"custom"`` ->
    ``MatrixUnit()``, each optionally followed by ``(field=value,...)``
    overrides checked by ``MatrixUnit``'s own validation.  Errors name
    ``arg``, the value and the valid choices."""
    if value is None or isinstance(value, MatrixUnit):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be None, a MatrixUnit or a unit string (e.g. 'H100'), "
                        f"got {type(value).__name__}")
    text = value.strip()
    if text.lower() == "none":
        return None
    base_text, paren, rest = text.partition("(")
    unit = _unit_base(base_text.strip(), arg)
    if not paren:
        return unit
    if not rest.endswith(")"):
        raise ValueError(f"{arg}={value!r}: the overrides must end with ')'")
    flds = _unit_fields()
    changes = {}
    try:
        items = [i for i in split_top_level(rest[:-1]) if i.strip()]
    except ValueError as e:
        raise ValueError(f"{arg}={value!r}: {e}") from None
    for item in items:
        key, eq, v = item.partition("=")
        key = key.strip()
        if not eq or key not in flds:
            raise ValueError(f"{arg}={value!r}: item {item.strip()!r} is not field=value with a "
                             f"MatrixUnit field; valid fields: {list(flds)}")
        if key in changes:
            raise ValueError(f"{arg}={value!r}: field {key!r} is given twice")
        changes[key] = _parse_value(flds[key], key, v, f"{arg}={value!r}")
    try:
        return dataclasses.replace(unit, **changes)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{arg}={value!r}: {e}") from None


def unit_string(unit) -> str:
    """The canonical unit string of ``unit`` (``parse_unit(unit_string(u)) == u``):
    ``"none"`` for None; else the preset named by ``unit.name`` (or
    ``"custom"``) followed by ``(field=value,...)`` for every numerical field
    that differs from it, in field order."""
    if unit is None:
        return "none"
    base_name = unit.name if unit.name in UNIT_PRESETS else CUSTOM_UNIT
    base = UNIT_PRESETS[base_name] if base_name in UNIT_PRESETS else MatrixUnit()
    items = [f"{k}={_value_string(getattr(unit, k))}" for k in _unit_fields()
             if getattr(unit, k) != getattr(base, k)]
    return base_name + (f"({','.join(items)})" if items else "")


def parse_kernel_spec(cls, spec, arg: str = "kernels"):
    """``cls`` (KernelSpec) from a kernel spec string (grammar in the module
    docstring); an instance of ``cls`` is returned unchanged.

    ``arg`` is the argument name used in messages (the CLI passes
    ``"--kernels"``).

    Raises
    ------
    TypeError
        ``spec`` is neither a str nor a ``cls``.
    ValueError
        Unknown preset or field, a malformed ``field=value`` item, a field
        given twice, or a value the field's parser rejects; the message
        names ``arg``, the field, the value and the valid choices.
    """
    if isinstance(spec, cls):
        return spec
    if not isinstance(spec, str):
        raise TypeError(
            f"{arg} must be a kernel spec string (e.g. 'handwritten', 'codegen:fma=false') or a "
            f"{cls.__name__}, got {type(spec).__name__}"
        )
    preset, colon, body = spec.strip().partition(":")
    preset = preset.strip()
    if preset not in SPEC_PRESETS:
        raise ValueError(f"{arg}={spec!r}: preset {preset!r} is unknown; valid presets: {list(SPEC_PRESETS)}")
    base = getattr(cls, preset)()
    if not colon:
        return base
    spec_fields = {f.name: f for f in dataclasses.fields(cls)}
    hw_fields = {_HW + f.name: f for f in dataclasses.fields(Hardware)}
    valid = [k for k in spec_fields if k != "hardware"] + list(hw_fields)
    changes, hw_changes = {}, {}
    try:
        items = split_top_level(body)
    except ValueError as e:
        raise ValueError(f"{arg}={spec!r}: {e}") from None
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"{arg}={spec!r}: item {item.strip()!r} is not field=value; valid fields: {valid}")
        if key in hw_fields:
            target, f, name = hw_changes, hw_fields[key], key[len(_HW):]
        elif key in spec_fields and key != "hardware":
            target, f, name = changes, spec_fields[key], key
        else:
            raise ValueError(f"{arg}={spec!r}: field {key!r} is unknown; valid fields: {valid}")
        if name in target:
            raise ValueError(f"{arg}={spec!r}: field {key!r} is given twice")
        target[name] = (key, _parse_value(f, key, value, f"{arg}={spec!r}"))
    hardware = _apply(base.hardware, hw_changes, f"{arg}={spec!r}")
    return _apply(base, {**changes, "hardware": ("hardware", hardware)}, f"{arg}={spec!r}")


def _apply(obj, changes: dict, where: str):
    """``obj`` with ``changes`` ({field: (key, value)}) applied one at a time,
    so that a value the field's own parser rejects is reported with its key."""
    for name, (key, v) in changes.items():
        try:
            obj = dataclasses.replace(obj, **{name: v})
        except (TypeError, ValueError) as e:
            msg = str(e)
            where_key = where if msg.startswith(f"{name}=") else f"{where}: {key}={_value_string(v)!r}"
            raise type(e)(f"{where_key}: {msg}") from None
    return obj


def spec_diff(obj, base) -> list[tuple[str, str]]:
    """``(field, "key=value")`` for every field of the KernelSpec ``obj`` that
    differs from ``base``, in field order, in the grammar's spelling (one
    ``hardware.<field>=value`` item per differing Hardware field, each with
    field ``"hardware"``)."""
    items = []
    for f in dataclasses.fields(obj):
        v, b = getattr(obj, f.name), getattr(base, f.name)
        if f.name == "hardware":
            items += [(f.name, f"{_HW}{h.name}={_value_string(getattr(v, h.name))}")
                      for h in dataclasses.fields(v) if getattr(v, h.name) != getattr(b, h.name)]
        elif v != b:
            items.append((f.name, f"{f.name}={_value_string(v)}"))
    return items


def _diff(obj, base) -> list[str]:
    return [item for _, item in spec_diff(obj, base)]


def kernel_spec_string(obj) -> str:
    """The canonical spec string of a KernelSpec: the preset named by
    ``obj.name`` (else the preset with fewer differing fields, ties to
    ``handwritten``), then ``field=value`` for every field that differs from
    it, in field order (``hardware.<field>`` in place of ``hardware``).
    ``parse_kernel_spec(type(obj), kernel_spec_string(obj)) == obj``."""
    cls = type(obj)
    diffs = {p: _diff(obj, getattr(cls, p)()) for p in SPEC_PRESETS}
    preset = obj.name if obj.name in SPEC_PRESETS else min(SPEC_PRESETS, key=lambda p: len(diffs[p]))
    items = diffs[preset]
    return preset + (":" + ",".join(items) if items else "")
