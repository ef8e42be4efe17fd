"""What a checker says of an answer, asserted the one way the ``test_checks_*`` files need it: Correct, refused with
a message that names the mistake, or Not attempted; and the ``judges`` mark of the judged census
(tests/test_judged_census.py) on a parametrized case (:func:`right`, :func:`mistake`). ``tests/`` is on the path
under pytest: ``from verdicts import assert_correct, assert_refused``."""

from __future__ import annotations

import pytest


def assert_correct(exercise, *answer) -> None:
    """``exercise`` judges ``answer`` (its ``check`` arguments) Correct; its message is shown otherwise."""
    result = exercise.evaluate(*answer)
    assert result.status == "correct", result.message


def assert_refused(exercise, *answer, words: str) -> str:
    """``exercise`` refuses ``answer`` with a message containing ``words`` (what names the mistake); returns the
    message."""
    result = exercise.evaluate(*answer)
    assert result.status == "incorrect" and words in result.message, result.message
    return result.message


def assert_verdict(exercise, *answer, words: str | None) -> None:
    """Correct when ``words`` is None, else refused naming ``words`` (a parametrized list of both kinds)."""
    if words is None:
        assert_correct(exercise, *answer)
    else:
        assert_refused(exercise, *answer, words=words)


def assert_not_attempted(exercise, *answer) -> None:
    """A starter's blank (``____``) is *Not attempted*, never judged."""
    result = exercise.evaluate(*answer)
    assert result.status == "not attempted", result.message


def speak(monkeypatch, lang: str) -> None:
    """The checkers speak ``lang`` ("en", "pt-BR") for the rest of the test."""
    from effitrain_helpers.core.settings import SETTINGS

    monkeypatch.setattr(SETTINGS, "lang", lang)


def _param(exercise: str, kind: str, values: tuple, marks, id: str | None):
    marks = list(marks) if isinstance(marks, (list, tuple)) else [marks]
    return pytest.param(*values, marks=[pytest.mark.judges(exercise, kind), *marks], id=id)


def right(exercise: str, *values, marks=(), id: str | None = None):
    """A parametrized case judging ``exercise`` ("6.3 q2") on a right answer written another way than its
    ``solution()`` (it must be Correct); ``marks`` as ``pytest.param``'s (one mark or several)."""
    return _param(exercise, "right", values, marks, id)


def mistake(exercise: str, *values, marks=(), id: str | None = None):
    """A parametrized case judging ``exercise`` on a likely mistake (refused, the test asserting the words that
    name it)."""
    return _param(exercise, "mistake", values, marks, id)
