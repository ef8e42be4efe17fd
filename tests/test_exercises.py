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
    q.hint(); q.hint(); q.hint()
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["Hint 1 of 2: think deep", "Hint 2 of 2: six times seven", "Hint 2 of 2: six times seven"]
    q.hint(5)
    assert "hints 1 to 2" in capsys.readouterr().out


def test_solution_is_shown(capsys):
    make().solution()
    assert "answer = 42" in capsys.readouterr().out


def test_markdown_view_is_coloured():
    assert "color" in make().evaluate(42)._repr_markdown_()


def test_wrong_number_of_answers_says_how_to_call(capsys):
    result = make().evaluate(1, 2)
    assert result.status == INCORRECT and "q.check(answer)" in result.message
