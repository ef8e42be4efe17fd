"""The gradebook (effitrain grade) on a generated class (tests/classroom.py): honest work graded as before, and
none of issue 42's forgeries and mix-ups credits work not done or loses a file. The grader restores every
non-answer cell from the instructor's source, reviews the answers, reads verdicts only from the check cells it
restored, and runs each submission in a bubblewrap sandbox."""

import csv
import hashlib
import html
import os
import time
from collections import Counter

import nbformat
import psutil
import pytest

from classroom import CHECK2, FITS_VISIBLE, LESSON, Q1, Q2, needs_sandbox, submit, write_lesson
from effitrain_helpers.cli import main
from effitrain_helpers.teach import answers, editions, sandbox
from effitrain_helpers.teach.answers import REVIEW, graded_notebook, review
from effitrain_helpers.teach.editions import exercise_cells, source_notebooks

LIMIT = 60  # seconds per notebook: kernel start-up on a busy 2-core machine included
MARKER = f"effitrain-outlives-{os.getpid()}"
FORGERIES = {  # issue 42's credit for work not done: name -> (q1 answer, q2 answer, set-up lines, q2's check call)
    "f1_patch_evaluate": (None, None, "\nfrom effitrain_helpers.teach.exercises import Exercise, CheckResult\n"
                          "Exercise.evaluate = lambda self, *a, **k: CheckResult(self.name, 'correct')", CHECK2),
    "f2_progress_file": ("import json, os\nwith open(os.environ.get('EFFI' + 'TRAIN_PROGRESS', 'p.jsonl'), 'a') as f:\n"
                         "    f.write(json.dumps({'lesson': 'start', 'exercise': 'q1', 'status': 'correct'}) + '\\n')\n"
                         "matrix_bytes = ____", None, "", CHECK2),
    "f2b_shown_verdict": (None, "from IPython.display import display\ndisplay({'application/vnd.' + 'effi' + 'train.ver'"
                          " + 'dict+json': {'lesson': '1.1', 'exercise': 'q2', 'status': 'correct'}}, raw=True)\n"
                          "raise SystemExit", "", CHECK2),
    "f3_record": (None, "from effitrain_helpers.teach import verdicts\nverdicts.record(q2, 'correct')\ntrain_mib = 0",
                  "\nfrom effitrain_helpers.teach import verdicts\nverdicts.record(q1, 'correct')", CHECK2),
    "f4_checker": ("def anything(*a, **k):\n    pass\nanything.__module__ = q1.checker.__module__\n"
                   "q1.checker = anything\nmatrix_bytes = 1", None, "", CHECK2),
    "f5_context": (None, "train_mib = 16 / 2**20", "\nclass One:\n    def parameters(self):\n        return [Weights(1)]",
                   "q2.check(train_mib, One())"),
    "f6_solution_code": ("exec(q1.solution_code)", None, "\nexec(q1.solution_code)", CHECK2),
    "f7_solved_notebooks": ("import glob, json\nfor p in glob.glob('/**/9_1_tiny.ipynb', recursive=True):\n"
                            "    exec(json.load(open(p))['cells'][2]['source'][0])", None, "", CHECK2),
    "f8_reference": (None, "from effitrain_helpers.teach.checks.lesson_1_1 import _reference_gflops\n"
                     "train_mib = _reference_gflops", "", CHECK2),
    "f10_disguised": ("import sys as s0\nm = getattr(s0, 'mod' + 'ules')['effitrain_helpers.te' + 'ach.exercises']\n"
                      "E = getattr(m, 'Exer' + 'cise')\nE.evaluate = lambda self, *a, **k: getattr(m, 'Check' + "
                      "'Result')(self.name, 'correct')\nmatrix_bytes = ____", None, "", CHECK2),  # the review misses it
    "f9_outlives": ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
                    f"{MARKER!r}], start_new_session=True, env={{}})\nmatrix_bytes = ____", None, "", CHECK2),
}
FLAGGED = {"f3_record": "q2", "f4_checker": "q1", "f10_disguised": "q1", "f6_solution_code": "q1", "f7_solved_notebooks": "q1",
           "f8_reference": "q2"}


@pytest.fixture
def lesson(tmp_path):
    return tmp_path / "source", write_lesson(tmp_path / "source")


def _hashes(folder):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def _rows(out):
    return [(r["student"], r["exercise"] or r["status"], r["status"]) for r in csv.DictReader(out.open())]


@pytest.mark.slow
@needs_sandbox
def test_a_class_with_every_forgery(lesson, tmp_path, capsys, monkeypatch):
    source, edition = lesson
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    subs = tmp_path / "subs"
    submit(edition, subs / "honest.ipynb", Q1, Q2.replace("per_number = matrix_bytes // 1_000_000", "per_number = 4"))
    submit(edition, subs / "fits_visible.ipynb", Q1, FITS_VISIBLE)  # right on the visible check only
    submit(edition, subs / "special_case.ipynb", Q1,  # right on the visible model, raises on any other
           "train_mib = 1_001_000 * 16 / 2**20 if len(model.parameters()) == 2 else 1 / 0")
    submit(edition, subs / "blank.ipynb")
    submit(edition, subs / "wrong_q1.ipynb", "matrix_bytes = 8_000_000", Q2)  # q2 uses q1: judged with q1's reference
    for name, (q1, q2, setup, check2) in FORGERIES.items():
        submit(edition, subs / f"{name}.ipynb", q1, q2, setup, check2=check2)
    # a submission that tries to rewrite every other one it can find, then to end its grader
    submit(edition, subs / "vandal.ipynb", f"import os, signal\nfor root, _, files in os.walk({str(subs)!r}):\n"
           "    for f in files:\n        open(os.path.join(root, f), 'w').write('gone')\n"
           "os.kill(os.getppid(), signal.SIGTERM)\nmatrix_bytes = ____")
    os.utime(subs / "honest.ipynb", (1_700_000_000, 1_700_000_000))  # handed in 2023, before the deadline
    before = _hashes(subs)
    children = {p.pid for p in psutil.Process().children()}
    out, feedback, wide = tmp_path / "grades.csv", tmp_path / "feedback", tmp_path / "wide.csv"
    start = time.monotonic()
    assert main(["grade", str(subs), "--out", str(out), "--source", str(source), "--timeout", str(LIMIT),
                 "--feedback", str(feedback), "--wide", str(wide), "--deadline", "2026-01-01T00:00+00:00",
                 "--summary", "-j", "2"]) == 0
    elapsed = time.monotonic() - start
    got = _rows(out)
    assert ("honest", "q1", "correct") in got and ("honest", "q2", "correct") in got
    assert ("blank", "q1", "not attempted") in got and ("blank", "q2", "not attempted") in got
    assert ("wrong_q1", "q1", "incorrect") in got and ("wrong_q1", "q2", "correct") in got  # one mistake, one exercise
    credited = [(s, q) for s, q, status in got if status == "correct" and s not in ("honest", "wrong_q1")
                and (s, q) not in (("fits_visible", "q1"), ("special_case", "q1"))]
    assert credited == [], f"credit for work not done: {credited}"
    for name, exercise in FLAGGED.items():
        assert (name, exercise, REVIEW) in got, name
    assert ("f5_context", "q2", "incorrect") in got  # judged with the lesson's own model, not the forged one
    assert ("fits_visible", "q1", "correct") in got and ("fits_visible", "q2", "incorrect") in got
    details = {(r["student"], r["exercise"]): r["detail"] for r in csv.DictReader(out.open())}
    assert "a hidden check" in details["fits_visible", "q2"]
    assert ("special_case", "q2", "incorrect") in got and "raised an error when run again" in details["special_case", "q2"]
    raised = [r for r in got if r[1] == "error" and r[0] in ("honest", "fits_visible", "wrong_q1", "blank")]
    assert raised == [], "a lesson cell raised (the kernel's names not put back after the hidden check?)"
    errors = [(r["student"], r["detail"]) for r in csv.DictReader(out.open()) if r["status"] == "error"]
    assert ("f2b_shown_verdict", "cell 4 raised SystemExit: ") in errors  # its q2 cell, as the student numbers it
    assert ("special_case", "a hidden check of q2 raised ZeroDivisionError: division by zero") in errors
    assert "replace ____ with your answer" in details["blank", "q1"]  # the checker's message reaches the student
    assert details["wrong_q1", "q1"] and details["f5_context", "q2"]
    page = (feedback / "wrong_q1.html").read_text()
    assert html.escape(details["wrong_q1", "q1"]) in page and "Total: 1 of 2 points" in page
    assert sorted(p.name for p in feedback.iterdir()) == sorted(f"{s}.html" for s in {r[0] for r in got})
    table = {r["student"]: r for r in csv.DictReader(wide.open())}
    assert list(table["honest"])[:5] == ["student", "id", "start q1", "1.1 q2", "start total"]
    assert (table["honest"]["total"], table["wrong_q1"]["total"], table["blank"]["total"]) == ("2", "1", "0")
    assert table["honest"]["late"] == "" and table["wrong_q1"]["late"] == "start 1.1"
    lates = {r["student"]: r["late"] for r in csv.DictReader(out.open())}
    assert lates["honest"] == "no" and lates["blank"] == "yes"
    captured = capsys.readouterr()
    counts = Counter(status for _, exercise, status in got if exercise == "q1")  # the summary's line for start q1
    line = next(line.split() for line in captured.out.splitlines() if line.split()[:2] == ["start", "q1"])
    assert line[2:5] == [str(counts[s]) for s in ("correct", "incorrect", "not attempted")]
    assert _hashes(subs) == before, "a submission was changed"
    assert [p for p in psutil.process_iter(["cmdline"]) if MARKER in (p.info["cmdline"] or [])] == []
    assert [p for p in psutil.Process().children() if p.pid not in children] == []
    assert "Traceback" not in captured.err and list(temp.iterdir()) == []
    print(f"graded {len(before)} notebooks in {elapsed:.0f} s (busy machine)")


def test_no_honest_solution_of_the_workbook_is_flagged():
    """Every solution region of every lesson passes the review, so an honest answer is never flagged."""
    for name, nb in source_notebooks(None).items():
        for _, regions in exercise_cells(nb, name):
            for region in regions:
                assert review(region.solution_code) is None, (name, region.solution_code)


@pytest.mark.parametrize("code, line, says", [
    ("x = 1\nExercise.evaluate = lambda *a: 1", 2, "Exercise"),
    ("verdicts.record(q, 'correct')", 1, "verdicts"),
    ("q1.checker = f", 1, "q1"),
    ("exec(q.solution_code)", 1, "exec"),
    ("from effitrain_helpers.teach.checks.lesson_1_1 import _reference_gflops", 1, "_reference_gflops"),
    ("src = open('notebooks/1_1_prepare_models.ipynb').read()", 1, "notebook"),
    ("import sys\nsys.modules['x'].y = 1", 2, "sys.modules"),
    ("f.__globals__['q1'] = 2", 1, "__globals__"),
    ("!cat notes", 1, "get_ipython"),
    ("x = 1\ncases = In[-1]", 2, "In"),
    ("cases = _ih[-1]", 1, "_ih"),
    ("cases = _i7", 1, "_i7"),
    ("_effitrain_saved['train_mib'] = 1", 1, "_effitrain_saved"),
])
def test_the_review_names_the_line_that_reaches_the_machinery(code, line, says):
    found = review(code)
    assert found is not None and found[0] == line and says in found[1], found


def test_the_graded_notebook_is_the_source_with_only_the_answers_in_it(lesson, tmp_path):
    source, edition = lesson
    path = submit(edition, tmp_path / "s.ipynb", "matrix_bytes = 4_000_000\nq1.check(matrix_bytes, 'forged')",
                  "from effitrain_helpers.teach import verdicts\ntrain_mib = 1", setup="\nimport evil")
    sources = source_notebooks(source)
    graded = graded_notebook(nbformat.read(path, as_version=4), sources[LESSON], LESSON)
    code = [c.source for c in graded.notebook.cells if c.cell_type == "code"]
    assert "import evil" not in "\n".join(code) and "'forged'" not in "\n".join(code)
    assert [c.exercises for c in graded.checks] == [[("start", "q1")], [("1.1", "q2")]]
    cells = graded.notebook.cells  # each answer in a cell of its own, the check call in the next
    assert [cells[c.cell].source for c in graded.checks] == ["q1.check(matrix_bytes)", "q2.check(train_mib, model)"]
    first, second = (cells[c.cell - 1].source for c in graded.checks)
    assert first == "matrix_bytes = 4_000_000\n"  # its own check call blanked
    assert "verdicts" not in second and "____" in second  # flagged: the starter runs instead, never the answer
    assert graded.checks[1].flag.startswith(REVIEW) and "cell 4, line 1" in graded.checks[1].flag
    assert answers.match_source(nbformat.read(path, as_version=4), "renamed.ipynb", sources) == LESSON


def test_a_hidden_check_reruns_the_answer_on_its_own_cases_and_puts_the_names_back(lesson, tmp_path):
    source, edition = lesson
    path = submit(edition, tmp_path / "s.ipynb", Q1, FITS_VISIBLE)
    graded = graded_notebook(nbformat.read(path, as_version=4), source_notebooks(source)[LESSON], LESSON)
    cells = graded.notebook.cells
    (hidden,) = graded.hidden
    assert hidden.exercises == [("1.1", "q2")] and cells[hidden.cell].source == CHECK2
    assert cells[hidden.setup].source.endswith("model = Bigger()") and cells[hidden.answer].source == FITS_VISIBLE
    assert hidden.setup < hidden.answer < hidden.cell and "# ANSWER" not in cells[hidden.setup].source
    assert "globals()" in cells[hidden.setup - 1].source and "globals()" in cells[hidden.cell + 1].source
    assert graded.where[hidden.cell] == "a hidden check of q2"
    ex2 = next(i for i, c in enumerate(nbformat.read(path, as_version=4).cells) if c.get("id") == "ex2")
    assert graded.where[graded.checks[1].cell] == f"cell {ex2}"  # numbered as in the student's notebook
    for name in ("student", "instructor"):  # in no edition
        built = editions.make_edition(source_notebooks(source)[LESSON], LESSON, name)
        assert not any("Bigger" in c.source for c in built.cells), name


@pytest.mark.parametrize("cells, says", [
    (["q2.check(x)", "# BEGIN SOLUTION\nx = 1\n# END SOLUTION\nq2.check(x)"], "comes before the cell of that exercise"),
    (["# BEGIN SOLUTION\nx = 1\n# END SOLUTION\nq2.check(x)", "q2.check(x)\nq3.check(x)"], "checks 2 exercises"),
    (["# BEGIN SOLUTION\nx = 1\n# END SOLUTION\nq2.check(x)", "# ANSWER\n# ANSWER\nq2.check(x)"], "2 '# ANSWER' lines"),
    (["# BEGIN SOLUTION\nx = 1\n# END SOLUTION\nq2.check(x)", "if 1:\n    # ANSWER\nq2.check(x)"], "is indented"),
    (["# BEGIN SOLUTION\nx = 1\n# END SOLUTION\nq2.check(x)", "x = 2"], "calls no qN.check"),
])
def test_a_wrong_hidden_check_is_refused_naming_its_cell(cells, says):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.cells[-1 if "before" not in says else 0].metadata["tags"] = ["hidden-check"]
    with pytest.raises(editions.MarkerError, match=says) as err:
        editions.check_all({"x.ipynb": nb})
    assert "x.ipynb, cell" in str(err.value)


def test_a_wrong_hidden_check_in_the_source_stops_grade_before_any_notebook_runs(lesson, tmp_path, capsys):
    source, edition = lesson
    nb = nbformat.read(source / LESSON, as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell("q2.check(1)", metadata={"tags": ["hidden-check"]}))  # before q2
    nbformat.write(nb, source / LESSON)
    submit(edition, tmp_path / "subs" / "ana.ipynb", Q1, Q2)
    out = tmp_path / "grades.csv"
    assert _exit_code(["grade", str(tmp_path / "subs"), "--out", str(out), "--source", str(source), "--unsafe"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be graded" in err and "comes before the cell of that exercise" in err and "\n" not in err
    assert not out.exists()


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
    (["EMPTY", "--out", "g.csv", "--roster", "nothere.csv"], "--roster 'nothere.csv' cannot be read"),
    (["EMPTY", "--out", "g.csv", "-j", "0"], "-j 0 is not allowed: a whole number from 1 to 64"),
    (["EMPTY", "--out", "g.csv", "-j", "two"], "-j 'two' is not allowed"),
    (["EMPTY", "--out", "g.csv", "--deadline", "Friday"], "--deadline 'Friday' is not an ISO 8601 time"),
    (["EMPTY", "--out", "g.csv", "--wide", "g.csv"], "--wide 'g.csv' is inside SUBMISSIONS_DIR or is --out"),
    (["EMPTY", "--out", "g.csv", "--wide", "EMPTY/w.csv"], "is inside SUBMISSIONS_DIR"),
    (["EMPTY", "--out", "g.csv", "--feedback", "EMPTY/fb"], "--feedback 'EMPTY/fb' is inside SUBMISSIONS_DIR"),
    (["EMPTY", "--out", "g.csv", "--wide", "notes.csv"], "--wide 'notes.csv' exists and is not a table this command"),
    (["EMPTY", "--out", "g.csv", "--points-row"], "--points-row adds a row to the --wide table, and there is no --wide"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, says):
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "notes.csv").write_text("my own notes\n")
    monkeypatch.chdir(tmp_path)
    assert _exit_code(["grade", *args, "--unsafe"]) == 2
    assert (tmp_path / "notes.csv").read_text() == "my own notes\n"
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err


def test_without_the_sandbox_grade_refuses_in_one_line_unless_unsafe(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sandbox, "unavailable", lambda: "bubblewrap (bwrap) is not installed")
    (tmp_path / "subs").mkdir()
    assert _exit_code(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "g.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "refuses to run submissions outside a sandbox: bubblewrap (bwrap) is not installed" in err
    assert "\n" not in err and not (tmp_path / "g.csv").exists()
