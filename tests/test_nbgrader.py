"""effitrain editions --for nbgrader: the course folder's notebooks (fast: their cells and nbgrader's own validator)
and nbgrader's round trip on a generated class (slow: generate_assignment, three students' submissions, autograde,
export), whose points must be effitrain grade's on the same answers."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from classroom import LESSON, Q1, Q2, needs_sandbox, submit, write_lesson
from effitrain_helpers.cli import main
from effitrain_helpers.teach import reports
from effitrain_helpers.teach.checks import lesson_1_1
from effitrain_helpers.teach.nbgrader_source import CONFIG, build_nbgrader, nbgrader_notebook
from effitrain_helpers.teach.editions import source_notebooks

ASSIGNMENT = Path(LESSON).stem
ANSWERS = {"honest": (Q1, Q2), "half": (Q1, "train_mib = 1.0"), "blank": (None, None)}  # q1, q2 (None: blank)
POINTS = {"honest": 2, "half": 1, "blank": 0}


def _meta(nb):
    return [c.metadata.get("nbgrader", {}) for c in nb.cells]


def test_each_exercise_is_an_answer_cell_and_a_test_cell_worth_its_points(tmp_path, monkeypatch):
    write_lesson(tmp_path / "src")
    monkeypatch.setattr(lesson_1_1.q2, "points", 3)
    reports.points_of.cache_clear()
    try:
        nb = nbgrader_notebook(source_notebooks(tmp_path / "src")[LESSON], LESSON)
    finally:
        reports.points_of.cache_clear()
    meta = _meta(nb)
    assert all(m.get("grade_id") and m.get("schema_version") == 3 for m in meta)
    assert len({m["grade_id"] for m in meta}) == len(meta)
    answers = [c for c, m in zip(nb.cells, meta) if m["solution"]]
    tests = [(c.source, m["points"]) for c, m in zip(nb.cells, meta) if m["grade"]]
    assert [c.source.splitlines()[0] for c in answers] == ["# BEGIN SOLUTION"] * 2
    assert tests == [("q1.require(matrix_bytes)", 1), ("q2.require(train_mib, model)", 3)]
    assert all(m["locked"] for m in meta if not m["solution"])  # the rest is restored by autograde
    assert not any("Bigger" in c.source for c in nb.cells)  # the hidden check stays effitrain grade's
    assert nb.metadata["effitrain"]["source"] == LESSON


def test_every_lesson_passes_nbgraders_validator(tmp_path):
    from nbgrader.nbgraderformat import MetadataValidator

    summary = build_nbgrader(tmp_path / "course")
    assert summary["test_cells"] >= len(summary["assignments"]) > 20
    for path in sorted((tmp_path / "course" / "source").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        MetadataValidator().validate_nb(nb)
        assert all(".require(" in c.source for c, m in zip(nb.cells, _meta(nb)) if m["grade"]), path.name


def test_a_second_build_keeps_your_files_and_bad_input_is_one_line(tmp_path, capsys):
    course = tmp_path / "course"
    build_nbgrader(course, source=_source(tmp_path))
    (course / CONFIG).write_text("c = get_config()  # mine\n")
    (course / "notes.txt").write_text("mine")
    assert main(["editions", "--for", "nbgrader", "--out", str(course), "--source", str(tmp_path / "src")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert main(["editions", "--for", "nbgrader", "--out", str(course), "--source", str(tmp_path / "src"),
                 "--force"]) == 0
    assert (course / CONFIG).read_text() == "c = get_config()  # mine\n" and (course / "notes.txt").exists()
    assert main(["editions", "--for", "nbgrader", "--no-solutions", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--no-solutions does not go with --for nbgrader" in err and "\n" not in err


def _source(tmp_path):
    write_lesson(tmp_path / "src")
    return tmp_path / "src"


def _nbgrader(course: Path, *args: str) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                          text=True, timeout=600)  # nbgrader calls alembic by name: this Python's bin on PATH
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


@pytest.mark.slow
@needs_sandbox
def test_nbgrader_grades_a_class_as_effitrain_grade_does(tmp_path):
    edition = write_lesson(tmp_path / "src")
    course = tmp_path / "course"
    build_nbgrader(course, source=tmp_path / "src")
    _nbgrader(course, "generate_assignment", ASSIGNMENT)
    release = nbformat.read(course / "release" / ASSIGNMENT / LESSON, as_version=4)
    assert "1000 * 1000" not in nbformat.writes(release)  # the solutions are not released
    for student, (q1, q2) in ANSWERS.items():
        mine = nbformat.from_dict(nbformat.reads(nbformat.writes(release), as_version=4))
        for cell in mine.cells:
            answer = {"ex1-answer": q1, "ex2-answer": q2}.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
            if answer is not None:
                cell.source = answer
        path = course / "submitted" / student / ASSIGNMENT / LESSON
        path.parent.mkdir(parents=True)
        nbformat.write(mine, path)
        submit(edition, tmp_path / "subs" / f"{student}.ipynb", q1, q2)
    _nbgrader(course, "autograde", ASSIGNMENT, "--create")
    _nbgrader(course, "export", "--to", str(tmp_path / "nbgrader.csv"))
    nbgrader_points = {r["student_id"]: float(r["score"]) for r in csv.DictReader((tmp_path / "nbgrader.csv").open())}
    assert main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "grades.csv"), "--source",
                 str(tmp_path / "src"), "--wide", str(tmp_path / "wide.csv"), "--timeout", "120", "-j", "2"]) == 0
    ours = {r["student"]: float(r["total"]) for r in csv.DictReader((tmp_path / "wide.csv").open())}
    assert nbgrader_points == ours == POINTS
