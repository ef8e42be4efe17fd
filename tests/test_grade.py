"""The gradebook (effitrain grade): a folder with a correct, a blank, a broken-JSON, a raising and a hanging
submission gives one row per student and exercise, a row for each problem, submissions unchanged, and no kernel
left running. The submissions are tiny notebooks that check the start page's exercise."""

import csv
import hashlib
import time

import nbformat
import psutil
import pytest

from effitrain_helpers.cli import main

IMPORTS = "from effitrain_helpers.teach.checks.start_here import q1\nfrom effitrain_helpers.teach.exercises import ____"
LIMIT = 20  # seconds per notebook: kernel start-up on a busy 2-core machine included


def _submission(path, *sources, kernel="python3"):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in (IMPORTS, *sources)])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture
def submissions(tmp_path):
    folder = tmp_path / "submissions"
    # alice hands in a folder; her notebook also checks how it is run: offline, solutions off, in a copy
    _submission(folder / "alice" / "00_start_here.ipynb",
                "import os\nassert os.environ['HF_HUB_OFFLINE'] == '1' and os.environ['EFFITRAIN_SOLUTIONS'] == 'off'\n"
                f"assert os.getcwd() != {str(folder / 'alice')!r}",
                "matrix_bytes = 1000 * 1000 * 4\nq1.check(matrix_bytes)")
    # bob's notebook names a kernel this machine does not have: graded with this Python regardless
    _submission(folder / "bob.ipynb", "matrix_bytes = ____\nq1.check(matrix_bytes)", kernel="python3-on-bobs-laptop")
    (folder / "carol.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')
    _submission(folder / "dave.ipynb", "raise RuntimeError('my bug')", "q1.check(8_000_000)")
    _submission(folder / "erin.ipynb", "q1.check(4_000_000)", "while True:\n    pass")
    return folder


def _hashes(folder):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_grade_a_class(submissions, tmp_path, capsys):
    before = _hashes(submissions)
    # direct children only: a long-lived child of this test session (the browser tests' JupyterLab and Chromium)
    # may start processes of its own meanwhile; a kernel grade started is a direct child of this process
    children_before = {p.pid for p in psutil.Process().children()}
    out = tmp_path / "grades.csv"
    start = time.monotonic()
    assert main(["grade", str(submissions), "--out", str(out), "--timeout", str(LIMIT)]) == 0
    elapsed = time.monotonic() - start
    rows = list(csv.DictReader(out.open()))
    got = [(r["student"], r["lesson"], r["exercise"], r["status"]) for r in rows]
    assert got == [
        ("alice", "start", "q1", "correct"),
        ("bob", "start", "q1", "not attempted"),
        ("carol", "", "", "invalid notebook"),
        ("dave", "", "", "error"),
        ("dave", "start", "q1", "incorrect"),
        ("erin", "", "", "timeout"),
        ("erin", "start", "q1", "correct"),
    ]
    detail = {(r["student"], r["status"]): r["detail"] for r in rows}
    assert "RuntimeError: my bug" in detail["dave", "error"] and "NotJSONError" in detail["carol", "invalid notebook"]
    assert f"limit of {LIMIT} s" in detail["erin", "timeout"]
    assert rows[0]["notebook"] == "00_start_here.ipynb"
    assert "wrote 7 rows for 5 students" in capsys.readouterr().out
    assert _hashes(submissions) == before, "a submission was modified"
    leftover = [p for p in psutil.Process().children() if p.pid not in children_before]
    assert leftover == [], f"processes left running: {[p.cmdline() for p in leftover]}"
    assert elapsed < 5 * LIMIT, "the hanging notebook was stopped at its limit"


def _exit_code(argv) -> int:
    """``main``'s exit code, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as err:
        return err.code


@pytest.mark.parametrize("args, says", [
    (["EMPTY", "--out", "g.csv"], "holds no .ipynb notebooks"),
    (["MISSING", "--out", "g.csv"], "is not a folder"),
    (["EMPTY", "--out", "nowhere/g.csv"], "does not exist"),
    (["EMPTY", "--out", "g.csv", "--timeout", "-3"], "--timeout=-3.0 must be a positive number"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, says):
    (tmp_path / "EMPTY").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _exit_code(["grade", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
