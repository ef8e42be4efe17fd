"""What reaches the student from the gradebook (effitrain_helpers.teach.reports and the rows grade makes): the
checker's message in ``detail``, every failed cell, points, and an offline, escaped feedback page per student.
Fast: the rows and executed cells are built by hand, no notebook runs (test_grade.py runs a class end to end)."""

import re

import nbformat
import pytest

from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.teach import grade, reports, verdicts
from effitrain_helpers.teach.checks import lesson_1_1
from effitrain_helpers.teach.grade import Row

ATTACK = '<script>alert("x")</script> & <img src=http://evil/x.png>'


def _rows(student="alice"):
    return [Row(student, "alice.ipynb", "", "", "error", "cell 3 raised NameError: name 'x' is not defined"),
            Row(student, "alice.ipynb", "", "", "error", f"cell 5 raised ValueError: {ATTACK}"),
            Row(student, "alice.ipynb", "start", "q1", "correct", "counted 4 bytes per number"),
            Row(student, "alice.ipynb", "1.1", "q2", "incorrect", ATTACK),
            Row(student, "alice.ipynb", "1.1", "q3", "not attempted", "replace ____ with your answer")]


def test_a_verdict_shown_to_the_grader_carries_the_checkers_message():
    check = nbformat.v4.new_code_cell("q2.check(train_mib, model)")
    check.outputs = [nbformat.v4.new_output("display_data", data={verdicts.VERDICT_MIME: {
        "lesson": "1.1", "exercise": "q2", "status": "incorrect", "message": "2 times too large" + "x" * 5000}})]
    after = nbformat.v4.new_code_cell("", execution_count=3)
    found = grade._verdicts(check, after, [("1.1", "q2")])
    status, message = found["1.1", "q2"]
    assert status == "incorrect" and message.startswith("2 times too large") and len(message) == grade.MAX_MESSAGE


def test_every_cell_that_raised_gets_its_own_row_with_the_errors_first_line():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a"), nbformat.v4.new_markdown_cell("m"),
                                         nbformat.v4.new_code_cell("b")])
    nb.cells[0].outputs = [nbformat.v4.new_output("error", ename="NameError", evalue="name 'a'\nmore", traceback=[])]
    nb.cells[2].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])]
    assert grade._errors(nb) == ["cell 0 raised NameError: name 'a'", "cell 2 raised ValueError: bad"]


def test_points_come_from_the_exercise_and_only_correct_earns_them(monkeypatch):
    reports.points_of.cache_clear()
    monkeypatch.setattr(lesson_1_1.q2, "points", 3)
    try:
        assert reports.points_of("1.1", "q2") == 3 and reports.points_of("start", "q1") == 1
        assert reports.points_of("9.9", "q1") == 1  # a lesson the package does not have: the default
        assert [reports.earned(r) for r in _rows()] == [0, 0, 1, 0, 0]
    finally:
        reports.points_of.cache_clear()


def test_the_feedback_page_lists_verdicts_messages_points_and_every_failed_cell_escaped(tmp_path):
    written = reports.write_feedback(_rows("<i>al&") + _rows("section2/uma"), tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == ["_i_al_.html", "section2/uma.html"]
    page = (tmp_path / "section2" / "uma.html").read_text(encoding="utf-8")
    assert not re.search(r"<(script|img|link|a|iframe)\b", page)  # offline and inert: nothing loads, nothing runs
    assert "&lt;script&gt;" in page and "cell 3 raised NameError" in page and "cell 5 raised ValueError" in page
    assert "counted 4 bytes per number" in page and "1 / 1" in page and "0 / 1" in page
    assert "Total: 1 of 3 points" in page and "&lt;i&gt;al&amp;" in (tmp_path / "_i_al_.html").read_text()


@pytest.mark.parametrize("student, name", [("alice", "alice.html"), ("section2/uma", "section2/uma.html"),
                                           ("../../etc/x", "_/_/etc/x.html"), ("Uma Lima", "Uma_Lima.html")])
def test_a_feedback_file_name_stays_inside_the_folder(student, name):
    assert reports.feedback_name(student) == name


def test_two_students_with_one_file_name_get_two_files(tmp_path):
    written = reports.write_feedback(_rows("Uma Lima") + _rows("Uma_Lima"), tmp_path)
    assert [p.name for p in written] == ["Uma_Lima.html", "Uma_Lima-2.html"]


def test_the_feedback_page_speaks_the_class_language(tmp_path, monkeypatch):
    monkeypatch.setattr(SETTINGS, "lang", "pt-BR")
    page = reports.feedback_page("ana", _rows("ana"))
    assert "Devolutiva para ana" in page and "Total: 1 de 3 pontos" in page and "Correto" in page
