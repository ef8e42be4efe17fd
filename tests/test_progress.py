"""Progress: each check() records its verdict in a local file (never crashing the notebook when it cannot), and
`effitrain progress` counts, per lesson, exercises correct / attempted / not attempted. Every test writes to a
file of its own (EFFITRAIN_PROGRESS)."""

import json

import pytest

from effitrain_helpers.cli import main
from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.teach import verdicts
from effitrain_helpers.teach.checks import lesson_1_1, start_here
from effitrain_helpers.teach.exercises import Exercise, ____
from effitrain_helpers.teach.progress import lesson_exercises, progress, progress_table

STEPS = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]


@pytest.fixture
def record_file(tmp_path, monkeypatch):
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv(verdicts.PROGRESS_ENV, str(path))
    return path


def test_the_default_file_is_in_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(verdicts.PROGRESS_ENV, raising=False)
    monkeypatch.setattr(SETTINGS, "cache_dir", tmp_path)
    assert verdicts.verdicts_file() == tmp_path / "progress.jsonl"


def test_lessons_and_their_exercises_come_from_the_checks_modules():
    found = lesson_exercises()
    assert list(found)[:2] == ["start", "1.1"] and found["start"] == {"q1": start_here.q1.name}
    assert list(found["1.1"]) == ["q1", "q2", "q3", "q4"]


def test_progress_after_a_few_checks(record_file, capsys):
    start_here.q1.check(____)         # not attempted
    start_here.q1.check(5)            # attempted
    lesson_1_1.q4.check(STEPS[::-1])  # attempted
    lesson_1_1.q3.check(____)         # still not attempted
    start_here.q1.evaluate(4_000_000)  # evaluate() judges without recording
    shown = capsys.readouterr().out
    assert "Not attempted" in shown and "Incorrect" in shown
    rows = {r.lesson: r for r in progress()}
    assert (rows["start"].correct, rows["start"].attempted, rows["start"].not_attempted) == (0, 1, 0)
    assert (rows["1.1"].correct, rows["1.1"].attempted, rows["1.1"].not_attempted) == (0, 1, 3)

    start_here.q1.check(4_000_000)  # correct ...
    start_here.q1.check(7)          # ... stays correct: a later wrong try does not undo it
    lesson_1_1.q4.check(STEPS)
    rows = {r.lesson: r for r in progress()}
    assert (rows["start"].correct, rows["start"].attempted) == (1, 0)
    assert (rows["1.1"].correct, rows["1.1"].attempted, rows["1.1"].not_attempted) == (1, 0, 3)
    assert all(r.correct == r.attempted == 0 for r in rows.values() if r.lesson not in ("start", "1.1"))
    lines = [json.loads(line) for line in record_file.read_text().splitlines()]
    assert len(lines) == 7 and lines[-1]["lesson"] == "1.1" and lines[-1]["exercise"] == "q4"
    assert lines[-1]["status"] == "correct" and lines[-1]["time"].endswith("+00:00")

    capsys.readouterr()
    assert main(["progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == progress_table().to_records()
    assert main(["progress"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["lesson", "exercises", "correct", "attempted", "not", "attempted"]
    assert str(record_file) in text
    html = progress_table()._repr_html_()
    assert html.startswith("<table>") and "<td>" not in html and "<th>" not in html  # every cell left-aligned
    assert "<td>1.1</td><td>4</td><td>1</td><td>0</td><td>3</td>" in html.replace(' style="text-align:left"', "")


def test_an_exercise_outside_the_lessons_is_not_recorded(record_file):
    Exercise("a test's own", lambda answer: None, usage="q.check(answer)").check(1)
    assert not record_file.exists()


def test_an_unwritable_progress_file_never_breaks_the_check(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(verdicts.PROGRESS_ENV, str(tmp_path))  # a folder: appending to it fails
    start_here.q1.check(4_000_000)
    assert "Correct" in capsys.readouterr().out
    with pytest.raises(ValueError, match="is a folder, not a regular file"):  # reading it says what is wrong
        progress()


def test_a_broken_line_is_skipped(record_file):
    start_here.q1.check(4_000_000)
    with open(record_file, "a") as f:
        f.write('{"lesson": "start", "exerc')  # a write cut short
    assert len(verdicts.read()) == 1 and progress()[0].correct == 1


def test_a_verdict_of_a_renumbered_exercise_is_not_credited_to_the_new_one(record_file):
    """4.3's exercises were renumbered (q1, the byte count, became q2): an old 'q1' Correct whose name is the old
    exercise's counts for nothing; a record with no name (an older format) still counts."""
    old = {"lesson": "4.3", "exercise": "q1", "name": "4.3 q1: 8-bit state bytes of one tensor", "status": "correct"}
    record_file.write_text(json.dumps(old) + "\n")
    assert {r.lesson: r for r in progress()}["4.3"].correct == 0
    record_file.write_text(json.dumps({k: v for k, v in old.items() if k != "name"}) + "\n")
    assert {r.lesson: r for r in progress()}["4.3"].correct == 1
