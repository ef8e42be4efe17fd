import re

from effitrain_helpers.teach.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, Exercise, Incorrect, ____


def _must_be_42(x):
    if x != 42:
        raise Incorrect(f"{x!r} is not the answer")


def make():
    return Exercise("demo", _must_be_42, "q.check(answer)", hints=["think deep", "six times seven"], solution_code="answer = 42")


def test_statuses():
    q = make()
    assert q.evaluate(42).status == CORRECT and bool(q.evaluate(42))
    wrong = q.evaluate(41)
    assert wrong.status == INCORRECT and "41 is not the answer" in wrong.message and not wrong
    for blank in ((), (____,), (...,)):
        assert q.evaluate(*blank).status == NOT_ATTEMPTED


def test_checker_crash_becomes_incorrect_not_an_exception():
    q = Exercise("crash", lambda x: x.nope, "q.check(x)")
    result = q.evaluate(3)
    assert result.status == INCORRECT and "AttributeError" in result.message


def test_check_never_raises_and_shows_the_verdict(capsys):
    q = make()
    q.check(41)
    q.check(42)
    q.check(____)
    out = capsys.readouterr().out
    assert "Incorrect" in out and "Correct (demo)" in out and "Not attempted" in out


def test_hints_are_graded_then_stay_on_the_last(capsys):
    q = make()
    for _ in range(3):
        q.hint()
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["Hint 1 of 2: think deep", "Hint 2 of 2: six times seven", "Hint 2 of 2: six times seven"]
    q.hint(5)
    assert "hints 1 to 2" in capsys.readouterr().out


def test_solution_is_shown(capsys):
    make().solution()
    assert "answer = 42" in capsys.readouterr().out


def _rgb(markdown: str) -> tuple[int, int, int]:
    colour = re.search(r"color:#([0-9a-fA-F]{6})", markdown).group(1)
    return tuple(int(colour[i:i + 2], 16) for i in (0, 2, 4))


def test_markdown_view_colours_each_status_its_own_way():
    q = make()
    right, wrong, blank = (_rgb(q.evaluate(*a)._repr_markdown_()) for a in ((42,), (41,), (____,)))
    assert len({right, wrong, blank}) == 3
    assert right[1] > max(right[0], right[2]), f"correct should be green, got {right}"
    assert wrong[0] > max(wrong[1], wrong[2]), f"incorrect should be red, got {wrong}"


def test_wrong_number_of_answers_says_how_to_call(capsys):
    result = make().evaluate(1, 2)
    assert result.status == INCORRECT and "q.check(answer)" in result.message
