"""Notebook controls for numlab's knobs (the layer of experiments and plots).

Every knob in numlab is a frozen dataclass (:class:`numlab.KernelSpec`,
:class:`numlab.Hardware`, :class:`numlab.FusionOptions`, ...).  :func:`controls`
turns chosen fields of one such object into ipywidgets -- one slider,
dropdown or checkbox per field -- and gives back a function that returns a
copy of the object with the values the controls show now::

    import numlab as nl
    from IPython.display import display

    w, current = nl.widgets.controls(
        nl.KernelSpec.handwritten(),
        vector_rounding=["rne", "rtz", "odd"],
        rsqrt_newton_steps=(0, 4),
    )
    display(*w.values())
    ...
    nl.run(model, inputs, kernels=current())

A control moves exactly one field; the object is rebuilt with
:func:`dataclasses.replace`, so the dataclass's own validation runs on every
value (a bad combination raises there, never silently).  The widgets work
without a browser (they are plain Python objects until displayed), which is
how the tests drive them.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence

import ipywidgets

__all__ = ["controls"]


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _widget(name: str, value, spec):
    """One control for field ``name`` whose current value is ``value``.

    ``spec`` is ``bool`` (checkbox), a ``range`` or a tuple ``(lo, hi)`` /
    ``(lo, hi, step)`` of numbers (integer or float slider), or a list of
    choices (dropdown; choices are shown by ``str``)."""
    if spec is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name}=bool asks for a checkbox, but the field holds {value!r}")
        return ipywidgets.Checkbox(value=value, description=name)
    if isinstance(spec, range):
        spec = (spec.start, spec.stop - 1, spec.step)
    if isinstance(spec, tuple):
        if len(spec) not in (2, 3) or not all(_is_number(v) for v in spec):
            raise ValueError(
                f"{name}={spec!r} is not a slider range; give (lo, hi) or (lo, hi, step) of numbers"
            )
        lo, hi = spec[0], spec[1]
        if not _is_number(value) or not lo <= value <= hi:
            raise ValueError(f"{name}: the current value {value!r} is not in the range [{lo}, {hi}]")
        integral = all(isinstance(v, numbers.Integral) for v in (*spec, value))
        cls = ipywidgets.IntSlider if integral else ipywidgets.FloatSlider
        kw = {"step": spec[2]} if len(spec) == 3 else {}
        return cls(value=value, min=lo, max=hi, description=name, **kw)
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        choices = list(spec)
        if not choices:
            raise ValueError(f"{name}=[] has no choices")
        if value not in choices:
            raise ValueError(
                f"{name}: the current value {value!r} is not among the choices {choices!r}"
            )
        return ipywidgets.Dropdown(options=[(str(c), c) for c in choices], value=value,
                                   description=name)
    raise TypeError(
        f"{name}={spec!r} is not a control spec; give bool, a range, a (lo, hi[, step]) tuple "
        "or a list of choices"
    )


def controls(obj, *, on_change: Callable | None = None, **ranges):
    """ipywidgets controls for fields of a frozen dataclass ``obj``.

    Parameters
    ----------
    obj : dataclass instance
        The knob object whose fields the controls move (not modified).
    on_change : callable, optional
        Called with the rebuilt object whenever a control moves.
    **ranges
        ``field=spec`` for each field to control: ``bool`` (a checkbox),
        ``(lo, hi)`` / ``(lo, hi, step)`` or a ``range`` (an IntSlider when
        every number is an int, else a FloatSlider), or a list of choices
        (a Dropdown).  The field's current value must lie in its range or
        among its choices.

    Returns
    -------
    (dict, callable)
        The widgets by field name (in the order given), and a function with
        no arguments returning ``dataclasses.replace(obj, **current values)``.

    Raises
    ------
    TypeError
        ``obj`` is not a dataclass instance, or a spec is malformed.
    ValueError
        A name is not a field of ``obj`` (the message lists the fields), no
        field is named, or a current value is outside its range/choices.
    """
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"obj must be a dataclass instance, got {type(obj).__name__}")
    fields = [f.name for f in dataclasses.fields(obj) if f.init]
    if not ranges:
        raise ValueError(f"name at least one field to control; fields of "
                         f"{type(obj).__name__}: {fields}")
    for name in ranges:
        if name not in fields:
            raise ValueError(
                f"{name!r} is not a field of {type(obj).__name__}; valid fields: {fields}"
            )
    ws = {name: _widget(name, getattr(obj, name), spec) for name, spec in ranges.items()}

    def current():
        return dataclasses.replace(obj, **{name: w.value for name, w in ws.items()})

    if on_change is not None:
        def _changed(_change) -> None:
            on_change(current())

        for w in ws.values():
            w.observe(_changed, names="value")
    return ws, current
