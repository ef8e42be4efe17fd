"""Argument checks shared by every module: one home for "is this a whole number >= 1?" and its kin.

Each check returns the value (converted to ``int`` or ``float``) or raises ``ValueError`` with one line that
names the value, says what is allowed and how to fix it::

    whole_number("batch_size", 0)               # batch_size=0 must be a whole number >= 1. Fix: e.g. batch_size=1.
    whole_number("seed", -1, minimum=0)         # seed=-1 must be a whole number >= 0. Fix: e.g. seed=0.
    positive_number("timeout", 0, example="timeout=120")     # ... Fix: e.g. timeout=120.
    positive_int("world", 0, hint=msg("e.g. world=2 (the number of processes)"))

``example`` is a call shown after "e.g." (in the learner's language); ``hint`` replaces the whole fix, and is
translated where it is shown, so a fixed hint is marked with ``msg()`` where it is written.

A ``bool`` is refused even though Python counts it as an ``int`` (``True`` is not a batch size); NumPy
integers are accepted as whole numbers, and any finite int or float as a number.
"""

from __future__ import annotations

import math
import numbers

from effitrain_helpers.core.language import tr


def _is_whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def whole_number(name: str, value, *, minimum: int = 1, maximum: int | None = None, hint: str | None = None,
                 example: str | None = None) -> int:
    """``value`` as an ``int`` if it is a whole number in ``minimum..maximum`` (no upper bound when ``None``).

    ``name`` is how the caller spells the argument (``batch_size``, ``samples``); ``example`` replaces the call
    of the default fix (``e.g. name=minimum``), for example with the command-line flag to use; ``hint`` the
    whole fix (an English text, translated here: mark it with ``msg()`` where it is written).
    """
    if _is_whole(value) and minimum <= value and (maximum is None or value <= maximum):
        return int(value)
    fix = _fix(hint, example or f"{name}={minimum}")
    if maximum is None:
        raise ValueError(tr("{name}={value!r} must be a whole number >= {minimum}. Fix: {fix}.", name=name,
                            value=value, minimum=minimum, fix=fix))
    raise ValueError(tr("{name}={value!r} must be a whole number from {minimum} to {maximum}. Fix: {fix}.",
                        name=name, value=value, minimum=minimum, maximum=maximum, fix=fix))


def _fix(hint: str | None, example: str) -> str:
    """The fix a check's error ends with: ``hint`` in the learner's language, else "e.g. ``example``"."""
    return tr(hint) if hint else tr("e.g. {call}", call=example)


def positive_int(name: str, value, *, maximum: int | None = None, hint: str | None = None,
                 example: str | None = None) -> int:
    """``value`` as an ``int`` if it is a whole number >= 1 (and <= ``maximum``): a count, a size, a step."""
    return whole_number(name, value, minimum=1, maximum=maximum, hint=hint, example=example)


def positive_number(name: str, value, *, hint: str | None = None, example: str | None = None) -> float:
    """``value`` as a ``float`` if it is a finite number > 0: a learning rate, a timeout in seconds."""
    if _is_real(value) and value > 0:
        return float(value)
    raise ValueError(tr("{name}={value!r} must be a positive number (finite, > 0). Fix: {fix}.", name=name,
                        value=value, fix=_fix(hint, example or f"{name}=1")))


def non_negative_number(name: str, value, *, hint: str | None = None, example: str | None = None) -> float:
    """``value`` as a ``float`` if it is a finite number >= 0: a weight decay, a tolerance."""
    if _is_real(value) and value >= 0:
        return float(value)
    raise ValueError(tr("{name}={value!r} must be a number >= 0 (finite). Fix: {fix}.", name=name, value=value,
                        fix=_fix(hint, example or f"{name}=0")))
