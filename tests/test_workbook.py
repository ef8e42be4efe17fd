"""The learner's own copy (effitrain workbook): blank exercises on the first build, a learner's notebook never
overwritten on a second run nor when its lesson changes, the one command for a fresh copy, new lessons added."""

import json
from pathlib import Path

import nbformat
import pytest

from effitrain_helpers.cli import main
from effitrain_helpers.teach import workbook
from effitrain_helpers.teach.editions import CHECK_CALL, INSTRUCTOR_TAG
from effitrain_helpers.teach.exercises import solutions_enabled
from effitrain_helpers.teach.workbook import (CHANGED, FRESH, KEPT, MANIFEST, NEW, NOT_OURS, UNCHANGED, UPDATED,
                                              Workbook, describe)

ROOT = Path(__file__).resolve().parents[1]


def _lesson(path: Path, note: str = "Read this first.") -> None:
    """A tiny solved lesson: one marked exercise (the start page's q1) and one markdown cell, ``note``."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Lesson 9.9 · test"),
        nbformat.v4.new_code_cell("from effitrain_helpers.teach.checks.start_here import q1"),
        nbformat.v4.new_code_cell("# BEGIN SOLUTION\nmatrix_bytes = 4_000_000\n# END SOLUTION\nq1.check(matrix_bytes)"),
        nbformat.v4.new_markdown_cell(note),
    ])
    nbformat.write(nb, path)


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _lesson(folder / "9_1_first.ipynb")
    _lesson(folder / "9_2_second.ipynb")
    return folder


def _actions(report) -> dict[str, str]:
    return {c.notebook: c.action for c in report}


def test_first_build_gives_blank_exercises_and_a_second_run_changes_nothing(tmp_path, capsys, monkeypatch):
    book = tmp_path / "my-workbook"
    assert main(["workbook", "--dir", str(book)]) == 0
    solved = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(p.name for p in book.glob("*.ipynb")) == solved
    for name in solved:
        nb = nbformat.read(book / name, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert not any(c.outputs for c in code), f"{name}: a stored output (a verdict) in the learner's copy"
        assert not any(INSTRUCTOR_TAG in c.metadata.get("tags", []) for c in nb.cells), f"{name}: instructor cell"
        assert "BEGIN SOLUTION" not in "".join(c.source for c in code), f"{name}: solution markers"
        exercises = [c for c in code if CHECK_CALL.search(c.source)]
        assert exercises and all("____" in c.source for c in exercises), f"{name}: an exercise is not blank"
    start = nbformat.read(book / "00_start_here.ipynb", as_version=4)
    assert any(c.source.startswith("matrix_bytes = ____") for c in start.cells)
    monkeypatch.chdir(book)
    assert solutions_enabled()[0], "a self-paced learner's solution() works"
    assert set(json.loads((book / MANIFEST).read_text())) == set(solved)
    capsys.readouterr()
    assert main(["workbook", "--dir", str(book), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["notebooks"]
    assert {c["action"] for c in again} == {UNCHANGED}, "the same lessons give the same copies, byte for byte"


def test_an_edited_copy_survives_the_command_run_again(tmp_path, source):
    folder = tmp_path / "book"
    Workbook(folder, source).sync()
    mine = folder / "9_1_first.ipynb"
    edited = mine.read_bytes().replace(b"matrix_bytes = ____", b"matrix_bytes = 1000 * 1000 * 4")
    mine.write_bytes(edited)
    assert _actions(Workbook(folder, source).sync()) == {"9_1_first.ipynb": KEPT, "9_2_second.ipynb": UNCHANGED}
    assert mine.read_bytes() == edited


def test_a_changed_lesson_updates_an_untouched_copy_and_reports_a_touched_one(tmp_path, source):
    folder = tmp_path / "book"
    Workbook(folder, source).sync()
    mine = folder / "9_1_first.ipynb"
    edited = mine.read_bytes().replace(b"matrix_bytes = ____", b"matrix_bytes = 42")
    mine.write_bytes(edited)
    _lesson(source / "9_1_first.ipynb", note="Read this first, now with a new paragraph.")
    _lesson(source / "9_2_second.ipynb", note="The second lesson, rewritten.")
    _lesson(source / "9_3_new.ipynb")  # a new lesson (git pull)
    report = Workbook(folder, source).sync()
    assert _actions(report) == {"9_1_first.ipynb": CHANGED, "9_2_second.ipynb": UPDATED, "9_3_new.ipynb": NEW}
    assert mine.read_bytes() == edited, "the learner's copy is never overwritten"
    assert "The second lesson, rewritten." in (folder / "9_2_second.ipynb").read_text()
    text = describe(report, folder)
    assert "9_1_first.ipynb: the lesson changed" in text and "workbook --dir" in text and "--fresh 9.1" in text

    fresh = Workbook(folder, source).fresh("9.1")
    assert fresh.action == FRESH and fresh.kept_as.startswith("9_1_first_mine-")
    assert (folder / fresh.kept_as).read_bytes() == edited, "their work is kept, renamed"
    assert "now with a new paragraph" in mine.read_text() and "matrix_bytes = ____" in mine.read_text()
    assert _actions(Workbook(folder, source).sync())["9_1_first.ipynb"] == UNCHANGED


def test_a_notebook_the_workbook_did_not_write_is_left_alone(tmp_path, source):
    folder = tmp_path / "book"
    folder.mkdir()
    theirs = folder / "9_1_first.ipynb"
    theirs.write_text("my own notes, not even a notebook")
    report = Workbook(folder, source).sync()
    assert _actions(report)["9_1_first.ipynb"] == NOT_OURS and theirs.read_text().startswith("my own notes")
    assert "--fresh 9.1" in describe(report, folder)


def test_a_deleted_copy_comes_back(tmp_path, source):
    folder = tmp_path / "book"
    Workbook(folder, source).sync()
    (folder / "9_2_second.ipynb").unlink()
    assert _actions(Workbook(folder, source).sync())["9_2_second.ipynb"] == NEW


def test_the_default_folder_is_my_workbook_or_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(workbook.WORKBOOK_ENV, raising=False)
    assert workbook.default_folder() == ROOT / "my-workbook"
    monkeypatch.setenv(workbook.WORKBOOK_ENV, str(tmp_path / "elsewhere"))
    assert workbook.default_folder() == tmp_path / "elsewhere"
    assert "my-workbook/" in (ROOT / ".gitignore").read_text().split()


def test_make_lab_opens_the_learners_copy_and_lab_instructor_the_solved_notebooks():
    make = (ROOT / "Makefile").read_text()
    lab = make.split("\nlab: env\n", 1)[1].split("\n\n", 1)[0]
    assert "effitrain workbook --dir $(WORKBOOK)" in lab and "jupyter lab $(WORKBOOK)" in lab
    assert "jupyter lab notebooks/" in make.split("\nlab-instructor: env\n", 1)[1].split("\n\n", 1)[0]


@pytest.mark.parametrize("args, says", [
    (["--fresh", "9.7"], "'9.7' is not a lesson of this workbook"),
    (["--dir", "FILE"], "is a file, not a folder"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, says):
    (tmp_path / "FILE").write_text("x")
    args = [str(tmp_path / a) if a == "FILE" else a for a in args]
    if "--dir" not in args:
        args += ["--dir", str(tmp_path / "book")]
    assert main(["workbook", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err


def test_a_broken_manifest_keeps_every_copy_that_may_be_the_learners(tmp_path, source):
    """Lost entries are rebuilt only for copies whose bytes are the lesson's edition now; any other copy (here an
    older edition, which the learner may have edited) counts as the learner's own and is left as it is."""
    folder = tmp_path / "book"
    Workbook(folder, source).sync()
    (folder / MANIFEST).write_text("[not, json")
    before = (folder / "9_1_first.ipynb").read_bytes()
    _lesson(source / "9_1_first.ipynb", note="changed")
    assert _actions(Workbook(folder, source).sync()) == {"9_1_first.ipynb": NOT_OURS, "9_2_second.ipynb": UNCHANGED}
    assert (folder / "9_1_first.ipynb").read_bytes() == before
