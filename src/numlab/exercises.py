"""Checker for the course's exercises: compare a learner's answer with the solution.

Every exercise in the notebooks follows one pattern::

    my_steps = None          # your answer (the cell a learner edits)
    ...                      # the solution cell (tagged ``solution``, source hidden)
    check(my_steps, steps, name="my_steps")

:func:`check` never raises on a wrong or missing answer: a notebook run headless
(CI, ``numlab course build``) leaves every answer at ``None`` and the check says
"not answered yet"; the solution cell asserts the fact itself.  Wrong answers get
a hint but never the expected value, so a learner can try again.
"""

from __future__ import annotations

import math
from numbers import Number

__all__ = ["check"]


def _matches(answer, expected, rtol: float, atol: float) -> bool:
    if isinstance(expected, str):
        return isinstance(answer, str) and answer.strip().casefold() == expected.strip().casefold()
    if isinstance(expected, bool) or isinstance(answer, bool):
        return type(answer) is type(expected) and answer == expected
    if isinstance(expected, Number) and isinstance(answer, Number):
        a, e = float(answer), float(expected)
        if math.isnan(e):
            return math.isnan(a)
        if math.isinf(e) or math.isinf(a):
            return a == e
        return abs(a - e) <= atol + rtol * abs(e)
    if isinstance(expected, (tuple, list)) and isinstance(answer, (tuple, list)):
        return len(answer) == len(expected) and all(
            _matches(a, e, rtol, atol) for a, e in zip(answer, expected, strict=True))
    return answer == expected


def check(answer, expected, *, name: str = "answer", rtol: float = 0.0, atol: float = 0.0,
          hint: str = "") -> bool | None:
    """Print whether ``answer`` matches ``expected`` and return True/False
    (None when the learner has not answered: ``answer`` is ``None`` or ``...``).

    Numbers match within ``atol + rtol * |expected|`` (exactly by default; inf
    and NaN only themselves); strings ignoring case and surrounding spaces;
    tuples and lists element by element; anything else by ``==``.  ``name`` is
    the variable the learner sets, ``hint`` is printed after a wrong answer.
    """
    if rtol < 0 or atol < 0 or not (math.isfinite(rtol) and math.isfinite(atol)):
        raise ValueError(f"check: rtol={rtol!r} and atol={atol!r} must be finite and >= 0")
    if answer is None or answer is Ellipsis:
        print(f"not answered yet: set `{name}` above and run this cell again")
        return None
    ok = _matches(answer, expected, rtol, atol)
    if ok:
        print(f"correct: {name} = {answer!r}")
    else:
        print(f"not yet: {name} = {answer!r} is not the answer" + (f" ({hint})" if hint else ""))
    return ok
