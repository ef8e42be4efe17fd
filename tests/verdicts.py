"""What a checker says of an answer, asserted the one way the ``test_checks_*`` files need it: Correct, refused with
a message that names the mistake, or Not attempted. ``tests/`` is on the path under pytest:
``from verdicts import assert_correct, assert_refused``."""

from __future__ import annotations


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
