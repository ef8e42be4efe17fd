"""What reaches the student from the gradebook (effitrain_helpers.teach.reports and the rows grade makes): the
checker's message in ``detail``, every failed cell, points, and an offline, escaped feedback page per student.
Fast: the rows and executed cells are built by hand, no notebook runs (test_grade.py runs a class end to end)."""

import os
import re
from datetime import datetime, timezone

import nbformat
import pytest

from classroom import LESSON, submit, write_lesson
from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.teach import exercises, grade, reports, sandbox, verdicts
from effitrain_helpers.teach.editions import source_notebooks
from effitrain_helpers.teach.answers import REVIEW
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
        "lesson": "1.1", "exercise": "q2", "status": "incorrect", "message": "2 times too large" + "x" * 5000,
        "seal": exercises.seal(lesson_1_1.q2)}})]
    after = nbformat.v4.new_code_cell("", execution_count=3)
    found = grade._verdicts(check, after, [("1.1", "q2")])
    status, message = found["1.1", "q2"]
    assert status == "incorrect" and message.startswith("2 times too large") and len(message) == grade.MAX_MESSAGE


def test_a_verdict_decided_by_changed_machinery_is_flagged_not_credited(monkeypatch):
    honest = exercises.seal(lesson_1_1.q2)
    monkeypatch.setattr(exercises.Exercise, "evaluate", lambda self, *a, **k: exercises.CheckResult("q2", "correct"))
    forged = exercises.seal(lesson_1_1.q2)
    assert [k for k in honest if honest[k] != forged[k]] == ["Exercise.evaluate"]
    monkeypatch.undo()
    for seal in (forged, {}, None):
        check = nbformat.v4.new_code_cell("q2.check(train_mib, model)")
        check.outputs = [nbformat.v4.new_output("display_data", data={verdicts.VERDICT_MIME: {
            "lesson": "1.1", "exercise": "q2", "status": "correct", "message": "", "seal": seal}})]
        status, message = grade._verdicts(check, nbformat.v4.new_code_cell("", execution_count=3), [("1.1", "q2")])[
            "1.1", "q2"]
        assert status == REVIEW and "was changed before its check" in message, seal


def test_every_cell_that_raised_gets_its_own_row_with_the_errors_first_line():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a"), nbformat.v4.new_markdown_cell("m"),
                                         nbformat.v4.new_code_cell("b")])
    nb.cells[0].outputs = [nbformat.v4.new_output("error", ename="NameError", evalue="name 'a'\nmore", traceback=[])]
    nb.cells[2].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])]
    assert grade._errors(nb) == ["cell 0 raised NameError: name 'a'", "cell 2 raised ValueError: bad"]


def test_the_rows_about_a_whole_notebook_speak_the_class_language(monkeypatch, tmp_path):
    monkeypatch.setattr(SETTINGS, "lang", "pt-BR")
    edition = write_lesson(tmp_path / "src")
    sources = source_notebooks(tmp_path / "src")
    nb = nbformat.read(submit(edition, tmp_path / "s.ipynb"), as_version=4)
    copy = grade.Submission("ana", "ana/9_1_tiny-Copy1.ipynb", tmp_path / "s.ipynb", nb, source=LESSON,
                            duplicate_of="ana/9_1_tiny.ipynb")
    (row,) = grade.grade_notebook(copy, 1.0, sources)
    assert row.status == "duplicate" and row.detail.startswith("mesmo aluno e mesma lição que ana/9_1_tiny.ipynb")
    monkeypatch.setattr(sandbox, "run_graded", lambda *a, **k: {"notebook": None, "outcome": "timeout", "detail": ""})
    late = grade.Submission("ana", "ana.ipynb", tmp_path / "s.ipynb", nb, source=LESSON)
    rows = grade.grade_notebook(late, 0.5, sources)
    assert rows[0].status == "timeout" and rows[0].detail.startswith("passou do limite de 0,5 s")
    assert {r.status for r in rows[1:]} == {"not checked"}


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


def _class_rows():
    ana = [Row("ana", "ana/0.ipynb", "start", "q1", "correct", late="no"),
           Row("ana", "ana/1.ipynb", "1.1", "q2", "correct", late="yes"),
           Row("ana", "ana/1.ipynb", "1.1", "q10", "incorrect", late="yes")]
    bob = [Row("=bob", "bob.ipynb", "1.1", "q2", "not attempted"), Row("=bob", "bob.ipynb", "1.1", "q10", REVIEW)]
    late = [Row("ana", "ana/x.ipynb", "", "", "no exercises", late="yes")]  # late, and no lesson: its path
    return ana + bob + late


def test_the_wide_table_has_a_column_per_exercise_lesson_totals_total_and_late(tmp_path, monkeypatch):
    reports.points_of.cache_clear()
    monkeypatch.setattr(lesson_1_1.q2, "points", 2.5)
    try:
        header, records = reports.wide_table(_class_rows(), {"ana": "A17"})
    finally:
        reports.points_of.cache_clear()
    assert header == ["student", "id", "start q1", "1.1 q2", "1.1 q10", "start total", "1.1 total", "total", "late"]
    bob, ana = records  # "=bob" sorts first
    assert ana == {"student": "ana", "id": "A17", "start q1": "1", "1.1 q2": "2.5", "1.1 q10": "0", "start total": "1",
                   "1.1 total": "2.5", "total": "3.5", "late": "1.1 ana/x.ipynb"}
    assert bob["start q1"] == "" and bob["total"] == "0" and bob["id"] == "" and bob["late"] == ""
    out = tmp_path / "wide.csv"
    grade.write_table(header, records, out)
    assert out.read_text().splitlines()[0] == ",".join(header) and "\n'=bob," in out.read_text()  # no formula


def test_the_points_possible_row_says_what_each_column_is_worth(monkeypatch):
    reports.points_of.cache_clear()
    monkeypatch.setattr(lesson_1_1.q2, "points", 2.5)
    try:
        header, records = reports.wide_table(_class_rows(), points_row=True)
    finally:
        reports.points_of.cache_clear()
    possible = records[0]
    assert possible["student"] == "Points Possible" and len(records) == 3  # then the two students
    assert [possible[c] for c in header[2:-1]] == ["1", "2.5", "1", "1", "3.5", "4.5"] and possible["late"] == ""


def test_the_instructors_start_page_draws_the_gradebook_or_says_how_to_make_one(tmp_path, capsys):
    import matplotlib.pyplot as plt

    assert grade.plot_gradebook(tmp_path / "grades.csv") is None
    assert "effitrain grade SUBMISSIONS_DIR --out" in capsys.readouterr().out
    grade._write_csv(_class_rows(), tmp_path / "grades.csv")
    fig = grade.plot_gradebook(tmp_path / "grades.csv")
    bars = [(round(p.get_width()), round(p.get_y() + p.get_height() / 2)) for p in fig.axes[0].patches]
    assert [label.get_text() for label in fig.axes[0].get_yticklabels()] == ["start q1", "1.1 q2", "1.1 q10"]
    assert sum(width for width, _ in bars) == 5  # five exercise rows drawn, each once
    plt.close(fig)


def test_the_summary_counts_each_exercise_in_the_class_language(monkeypatch):
    table = reports.summary_table(_class_rows()).splitlines()
    assert table[0].split() == ["exercise", "correct", "incorrect", "not", "attempted", "other"]
    assert [line.split() for line in table[1:]] == [
        ["start", "q1", "1", "0", "0", "0"], ["1.1", "q2", "1", "0", "1", "0"], ["1.1", "q10", "0", "1", "0", "1"]]
    monkeypatch.setattr(SETTINGS, "lang", "pt-BR")
    assert reports.summary_table(_class_rows()).split()[:3] == ["exercício", "corretos", "incorretos"]


def test_the_submission_time_is_nbgraders_timestamp_else_the_files_time(tmp_path):
    nb = tmp_path / "ana" / "1_1.ipynb"
    nb.parent.mkdir()
    nb.write_text("{}")
    os.utime(nb, (1_700_000_000, 1_700_000_000))
    assert grade.submission_time(nb, tmp_path) == datetime.fromtimestamp(1_700_000_000, timezone.utc)
    (nb.parent / "timestamp.txt").write_text("2026-12-01 13:04:22.123456 UTC\n")
    assert grade.submission_time(nb, tmp_path) == datetime(2026, 12, 1, 13, 4, 22, 123456, timezone.utc)
    (nb.parent / "timestamp.txt").write_text("yesterday")  # unreadable: the file's time
    assert grade.submission_time(nb, tmp_path).year == 2023
    flat = tmp_path / "bob.ipynb"  # a timestamp.txt in SUBMISSIONS_DIR itself is no one's
    flat.write_text("{}")
    os.utime(flat, (1_700_000_000, 1_700_000_000))
    (tmp_path / "timestamp.txt").write_text("2026-12-01 13:04:22 UTC")
    assert grade.submission_time(flat, tmp_path).year == 2023


def test_a_deadline_marks_every_row_of_a_later_submission_late(tmp_path):
    due = grade.check_deadline("2026-12-01T12:00+00:00")
    sub = grade.Submission("ana", "ana.ipynb", tmp_path / "ana.ipynb", problem="not JSON",
                           submitted=datetime(2026, 12, 1, 13, 0, tzinfo=timezone.utc))
    [row] = grade.grade_notebook(sub, 10, {}, deadline=due)
    assert (row.submitted, row.late) == ("2026-12-01T13:00:00+00:00", "yes")
    sub.submitted = datetime(2026, 12, 1, 11, 0, tzinfo=timezone.utc)
    assert grade.grade_notebook(sub, 10, {}, deadline=due)[0].late == "no"
    assert grade.grade_notebook(sub, 10, {})[0].late == ""
    with pytest.raises(ValueError, match="--deadline 'Friday' is not an ISO 8601 time"):
        grade.check_deadline("Friday")


def test_a_gradebook_written_before_submission_times_is_still_read(tmp_path):
    old = tmp_path / "g.csv"
    old.write_text("student,notebook,lesson,exercise,status,detail\nana,ana.ipynb,1.1,q2,correct,\n")
    assert grade._is_gradebook(old)
    assert grade.read_gradebook(old) == [Row("ana", "ana.ipynb", "1.1", "q2", "correct", "", "", "")]


def test_the_roster_gives_lms_ids(tmp_path):
    roster = tmp_path / "r.csv"
    roster.write_text("file,student,id\nana.ipynb,Ana Lima,A17\nbob.ipynb,Bob,\n")
    assert grade.roster_ids(roster) == {"Ana Lima": "A17"}
    assert grade.read_roster(roster) == {"ana.ipynb": "Ana Lima", "bob.ipynb": "Bob"}
