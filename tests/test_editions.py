"""Classroom editions: the marker parser and its errors, the build, what the student edition holds (no
solution text, starters that check as 'not attempted', filled-in solutions that check as correct, no name
that only a solution defined), the solutions switch, and student notebooks executed top to bottom (a few
in every run, all of them in ``make test-all``)."""

import ast
import builtins
import json
import re
import time
from pathlib import Path

import nbformat
import pytest

from effitrain_helpers.teach import editions
from effitrain_helpers.cli import main
from effitrain_helpers.teach.editions import MarkerError, build_editions, exercise_cells, parse_cell
from effitrain_helpers.teach.exercises import CORRECT, NOT_ATTEMPTED, Exercise, Incorrect, ____, solutions_enabled
from effitrain_helpers.teach.lessons import SYLLABUS, lesson_table, measured_seconds

ROOT = Path(__file__).resolve().parents[1]
SOURCE = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL = "x.ipynb, cell 3"


def _nb(*sources, tags=None):
    cells = [nbformat.v4.new_code_cell(s, metadata={"tags": tags or []}) for s in sources]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Lesson 9.9 · test")] + cells)


# ---------------------------------------------------------------- the marker parser

def test_a_marked_cell_gives_its_solution_and_a_derived_starter():
    (region,) = parse_cell("x = 1\n# BEGIN SOLUTION\nanswer = x * 2\n# END SOLUTION\nq1.check(answer)", CELL)
    assert region.solution == ["answer = x * 2"] and region.starter == ["answer = ____"]


@pytest.mark.parametrize("body, starter", [
    ("a, b = 1, 2", ["a, b = ____, ____"]),
    ("p = 3\np = p + 1", ["p = ____"]),
    ("def f(n, seconds=1):\n    return n", ["def f(n, seconds=1):", "    return ____"]),
    ("    total = 0\n    return total", ["    return ____"]),
])
def test_derived_starters(body, starter):
    indent = body[: len(body) - len(body.lstrip())]
    src = f"def g():\n{indent}# BEGIN SOLUTION\n{body}\n{indent}# END SOLUTION\nq1.check(g)" if indent else \
        f"# BEGIN SOLUTION\n{body}\n# END SOLUTION\nq1.check(g)"
    assert parse_cell(src, CELL)[0].starter == starter


def test_explicit_starter_lines_win_and_keep_the_indentation():
    src = "def f(x):\n    # BEGIN SOLUTION\n    # STARTER: ____  # your code\n    x.go()\n    # END SOLUTION\nq2.check(f)"
    assert parse_cell(src, CELL)[0].starter == ["    ____  # your code"]


@pytest.mark.parametrize("src, problem", [
    ("answer = 42\nq1.check(answer)", "solution is not marked"),
    ("# BEGIN SOLUTION\nanswer = 42\nq1.check(answer)", "is never closed"),
    ("answer = 42\n# END SOLUTION\nq1.check(answer)", "has no '# BEGIN SOLUTION' before it"),
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\na = 1\n# END SOLUTION\nq1.check(a)", "still open"),
    ("# BEGIN SOLUTION\nanswer = 42\n# END SOLUTION\nprint(answer)", "no check call"),
    ("q1.check(a)\n# BEGIN SOLUTION\na = 1\n# END SOLUTION", "no check call"),
    ("# BEGIN SOLUTION\n\n# END SOLUTION\nq1.check(a)", "is empty"),
    ("# BEGIN SOLUTION\n# STARTER: a = 0\na = 1\n# END SOLUTION\nq1.check(a)", "has no blank ____"),
    ("# STARTER: a = ____\na = 1\nq1.check(a)", "outside a solution region"),
    ("# BEGIN SOLUTION\nprint(42)\n# END SOLUTION\nq1.check(a)", "assigns no name"),
    ("# BEGIN SOLUTION\nif x:\n# END SOLUTION\nq1.check(a)", "not valid Python on its own"),
])
def test_marker_errors_name_the_cell_and_the_problem(src, problem):
    with pytest.raises(MarkerError) as err:
        parse_cell(src, CELL)
    assert str(err.value).startswith(CELL) and problem in str(err.value)


def test_cells_that_only_mention_check_in_a_comment_or_call_evaluate_are_not_exercises():
    assert parse_cell("# then call q1.check(answer)\nprint(q1.evaluate(____))", CELL) == []


def test_a_bad_notebook_stops_the_build_before_anything_is_written(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(_nb("import math", "answer = 42\nq1.check(answer)"), src / "9_9_new.ipynb")
    nbformat.write(_nb("# BEGIN SOLUTION\na = 1\nq2.check(a)"), src / "9_8_other.ipynb")
    out = tmp_path / "out"
    with pytest.raises(MarkerError) as err:
        build_editions(out, source=src)
    text = str(err.value)
    assert "9_9_new.ipynb, cell 2: an exercise cell" in text and "9_8_other.ipynb, cell 1: unbalanced" in text
    assert not out.exists()
    code = main(["editions", "--out", str(out), "--source", str(src)])
    assert code == 2 and not out.exists()
    assert main(["editions", "--check", "--source", str(src)]) == 2
    assert main(["editions", "--check"]) == 0, "the workbook's own notebooks are all marked"
    assert main(["editions"]) == 2, "--out or --check is needed"


def test_instructor_only_cells_are_not_checked_and_not_in_the_student_edition(tmp_path):
    nb = _nb("# BEGIN SOLUTION\nanswer = 42\n# END SOLUTION\nq1.check(answer)")
    nb.cells.append(nbformat.v4.new_code_cell("assert q1.evaluate(answer)  # hidden test, q1.check(", metadata={"tags": ["instructor-only"]}))
    nb.cells.append(nbformat.v4.new_markdown_cell("**Instructor notes** secret", metadata={"tags": ["instructor-only"]}))
    student = editions.make_edition(nb, "t.ipynb", "student")
    teacher = editions.make_edition(nb, "t.ipynb", "instructor")
    s_text, t_text = json.dumps(student), json.dumps(teacher)
    assert "secret" not in s_text and "hidden test" not in s_text and "answer = 42" not in s_text
    assert "answer = ____" in s_text and "secret" in t_text and "answer = 42" in t_text
    first_code = next(c for c in student.cells if c.cell_type == "code")
    assert first_code.source.startswith(editions.BLANK_IMPORT), "no checks import: before the first exercise"
    assert editions.BLANK_IMPORT not in t_text
    assert "BEGIN SOLUTION" not in t_text and "BEGIN SOLUTION" not in s_text


# ---------------------------------------------------------------- the output folder

def test_a_non_empty_out_folder_is_refused_without_force(tmp_path, capsys):
    out = tmp_path / "classroom"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["editions", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "--force" in err and not (out / "student").exists()
    assert "every other file is kept" in err
    (out / "student").mkdir()
    (out / "instructor").mkdir()
    stale = nbformat.v4.new_notebook(metadata={"effitrain": {"edition": "student"}})  # a lesson since removed
    nbformat.write(stale, out / "student" / "stale.ipynb")
    (out / "instructor" / "grading-notes.md").write_text("mine too")  # the instructor's own files
    (out / "instructor" / "my-quiz.ipynb").write_text("{}")
    assert main(["editions", "--out", str(out), "--force", "--no-solutions"]) == 0
    assert (out / "notes.txt").read_text() == "mine", "--force keeps the folder's other files"
    assert (out / "instructor" / "grading-notes.md").read_text() == "mine too", "and those in the editions"
    assert (out / "instructor" / "my-quiz.ipynb").read_text() == "{}", "a notebook no build wrote is kept"
    assert not (out / "student" / "stale.ipynb").exists(), "--force replaces the editions themselves"
    names = sorted(p.name for p in (out / "student").glob("*.ipynb"))
    assert names == [p.name for p in SOURCE] == sorted(p.name for p in (out / "instructor").glob("*.ipynb")
                                                      if p.name != "my-quiz.ipynb")
    assert json.loads((out / "student" / editions.EDITION_FILE).read_text())["solutions"] is False


def test_a_file_as_out_folder_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        build_editions(tmp_path / "f")


# ---------------------------------------------------------------- the real notebooks

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("editions")
    start = time.perf_counter()
    summary = build_editions(out)
    summary["seconds"] = time.perf_counter() - start
    return out, summary


def _source_regions(path):
    nb = nbformat.read(path, as_version=4)
    return nb, exercise_cells(nb, path.name)


def test_every_source_notebook_is_marked_and_builds(built):
    out, summary = built
    assert summary["notebooks"] == len(SOURCE)
    for path in SOURCE:
        nb = nbformat.read(path, as_version=4)
        lesson = re.match(r"\d_\d_", path.name)
        exercises = summary["exercises"][path.name]
        assert exercises == sum(bool(re.search(r"\bq\d+\.check\(", c.source)) for c in nb.cells
                                if c.cell_type == "code" and "instructor-only" not in c.metadata.get("tags", []))
        if lesson:
            assert exercises >= 2, f"{path.name}: a lesson has 2-4 exercises"
            assert any("instructor-only" in c.metadata.get("tags", []) for c in nb.cells), f"{path.name}: notes"


def _solution_lines(path):
    """Non-trivial solution lines: code lines of a region that appear nowhere else in the source notebook."""
    nb, marked = _source_regions(path)
    outside = []
    for i, cell in enumerate(nb.cells):
        regions = dict(marked).get(i, [])
        lines = cell.source.splitlines()
        inside = {k for r in regions for k in range(r.begin, r.end + 1)}
        outside += [line.strip() for k, line in enumerate(lines) if k not in inside]
    outside_text = "\n".join(outside)
    found = []
    for _, regions in marked:
        for r in regions:
            starter = {s.strip() for s in r.starter}
            for line in (x.strip() for x in r.solution):
                if len(line) >= 6 and not line.startswith("#") and line not in starter and line not in outside_text:
                    found.append(line)
    return found


def _leaks(student_nb, lines):
    text = json.dumps(student_nb)
    return [line for line in lines if json.dumps(line)[1:-1] in text or line in text]


def test_no_solution_text_in_the_student_edition(built):
    out, _ = built
    searched = 0
    for path in SOURCE:
        lines = _solution_lines(path)
        searched += len(lines)
        student = nbformat.read(out / "student" / path.name, as_version=4)
        assert _leaks(student, lines) == [], path.name
        teacher = nbformat.read(out / "instructor" / path.name, as_version=4)
        assert _leaks(teacher, lines) == lines, f"{path.name}: the instructor edition keeps every solution line"
    assert searched >= 30, "the search really looks for something"


def test_the_leak_search_finds_a_leak(built):
    out, _ = built
    path = next(p for p in SOURCE if p.name.startswith("2_3_"))
    student = nbformat.read(out / "student" / path.name, as_version=4)
    line = _solution_lines(path)[0]
    student.cells[-1].source += "\n" + line
    assert _leaks(student, _solution_lines(path)) == [line]


def test_student_edition_has_starters_no_notes_no_outputs_and_says_so(built):
    out, _ = built
    for path in SOURCE:
        student = nbformat.read(out / "student" / path.name, as_version=4)
        assert student.metadata["effitrain"]["edition"] == "student" and "widgets" not in student.metadata
        assert not any("instructor-only" in c.metadata.get("tags", []) for c in student.cells)
        text = "\n".join(c.source for c in student.cells)
        assert "BEGIN SOLUTION" not in text and "STARTER:" not in text and "Instructor notes" not in text
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in student.cells if c.cell_type == "code")
        assert text.count("____") >= len(_source_regions(path)[1])
        first_blank = next(i for i, c in enumerate(student.cells) if c.cell_type == "code" and "____" in c.source)
        assert "import ____" in student.cells[first_blank].source or any(
            editions.BLANK_IMPORT in c.source for c in student.cells[:first_blank]), f"{path.name}: ____ is defined first"


# ---------------------------------------------------------------- filling in a solution

class _Recorder:
    """Stands in for an exercise ``qN`` while a cell runs: keeps the verdict instead of showing it."""

    def __init__(self, exercise):
        self.exercise, self.results = exercise, []

    def check(self, *args, **kwargs):
        self.results.append(self.exercise.evaluate(*args, **kwargs))


_ONE_5_2 = ("from effitrain_helpers.measure.step_profile import StepProfile\n"
            "one = StepProfile({'data loading': 1.0, 'forward': 2.0, 'backward': 3.0}, 7.0, 0.0, [7.0], 1)")
CHEAP = [  # (notebook prefix, checks module, exercise, set-up code the cell needs)
    ("00_", "start_here", "q1", ""),
    ("1_1_", "lesson_1_1", "q1", "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
     "from accelerate import Accelerator\nfrom effitrain_helpers.sources.models import choose_model\n"
     "choice = choose_model()"),
    ("1_1_", "lesson_1_1", "q3", "import torch"),
    ("1_1_", "lesson_1_1", "q4", ""),
    ("1_2_", "lesson_1_2", "q2", "from transformers import AutoImageProcessor\n"
     "from effitrain_helpers.sources.processors import choose_image_processor\n"
     "image_processor = AutoImageProcessor.from_pretrained(choose_image_processor().path, backend='pil')"),
    ("1_3_", "lesson_1_3", "q2", ""),
    pytest.param("2_2_", "lesson_2_2", "q2", "from transformers import get_linear_schedule_with_warmup",
                 marks=pytest.mark.slow),  # it launches 2 processes
    ("2_2_", "lesson_2_2", "q3", ""),
    pytest.param("2_3_", "lesson_2_3", "q2", "import time", marks=pytest.mark.slow),  # it launches 2 processes
    pytest.param("3_1_", "lesson_3_1", "q1", "from torch.utils.data import DataLoader",
                 marks=pytest.mark.slow),  # it launches 2 processes
    ("3_1_", "lesson_3_1", "q3", "bytes_per_sample = 1000.0"),
    ("3_2_", "lesson_3_2", "q2", "from types import SimpleNamespace as S\nmodel = S(config=S(n_layers=2, dim=8))"),
    ("3_3_", "lesson_3_3", "q1", "import torch"),
    ("3_3_", "lesson_3_3", "q2", "import torch"),
    ("4_1_", "lesson_4_1", "q1", "import torch\nfrom effitrain_helpers.teach.checks.lesson_4_1 import q1_model"),
    ("4_2_", "lesson_4_2", "q3", "import torch\nfrom transformers import Adafactor\n"
     "from effitrain_helpers.teach.checks.lesson_4_2 import Q3_BETA1, Q3_LR"),
    ("4_3_", "lesson_4_3", "q1", "import torch\nimport transformers"),
    ("4_3_", "lesson_4_3", "q2", "import math\nfrom effitrain_helpers.teach.checks.lesson_4_3 import Q3_SHAPES"),
    pytest.param("5_1_", "lesson_5_1", "q2", "", marks=pytest.mark.slow),  # it launches 2 processes
    ("5_1_", "lesson_5_1", "q3", ""),
    ("5_2_", "lesson_5_2", "q2", _ONE_5_2),
    ("5_2_", "lesson_5_2", "q3", _ONE_5_2),
    ("5_3_", "lesson_5_3", "q2", ""),
    ("5_3_", "lesson_5_3", "q3", "import math"),
    ("5_4_", "lesson_5_4", "q1", 'FIRST, PORT, INTERFACE = "10.0.0.1", 29400, "eth1"'),
    ("5_4_", "lesson_5_4", "q2", "import os\nrun = {'ranks': [{'rank': n * 2 + lr, 'node': n, 'local_rank': lr}\n"
     "                  for n in range(2) for lr in range(2)]}"),
    ("5_4_", "lesson_5_4", "q3", ""),
    ("6_3_", "lesson_6_3", "q1", ""),
    pytest.param("6_3_", "lesson_6_3", "q2", "import torch.distributed as dist\n"
                 "from effitrain_helpers.engines.zero import balanced_owners as assign_owners",
                 marks=pytest.mark.slow),  # it launches 2 then 3 processes
    ("6_4_", "lesson_6_4", "q1", "import torch\nfrom torch import nn"),
    pytest.param("6_4_", "lesson_6_4", "q2", "import torch\nimport torch.distributed as dist",
                 marks=pytest.mark.slow),  # it launches 2 processes
    pytest.param("6_4_", "lesson_6_4", "q3", "import torch\nimport torch.distributed as dist",
                 marks=pytest.mark.slow),  # it launches 2 processes
    pytest.param("6_4_", "lesson_6_4", "q4", "", marks=pytest.mark.slow),  # it launches 3 processes
    pytest.param("7_1_", "lesson_7_1", "q1", "import torch\nfrom torch.distributed.fsdp import MixedPrecisionPolicy",
                 marks=pytest.mark.slow),  # a fake world of 2 ranks in this process (seconds)
    pytest.param("7_1_", "lesson_7_1", "q2", "from torch.distributed.fsdp import fully_shard",
                 marks=pytest.mark.slow),
    pytest.param("7_2_", "lesson_7_2", "q1", "from torch.distributed.device_mesh import init_device_mesh\n"
                 "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel",
                 marks=[pytest.mark.slow, pytest.mark.exhaustive]),  # 4 processes; nbval runs it every time
    ("7_3_", "lesson_7_3", "q1", "from effitrain_helpers.measure.planner import parameters_per_rank\n"
     "from effitrain_helpers.measure.memory_estimate import layer_activation_bytes"),
    ("7_3_", "lesson_7_3", "q2", ""),
    ("7_3_", "lesson_7_3", "q3", "from effitrain_helpers.measure.planner import Cluster, Model, plan"),
    pytest.param("8_1_", "lesson_8_1", "q1", "import torch", marks=pytest.mark.slow),  # ten small attentions
    ("8_1_", "lesson_8_1", "q2", ""),
    ("8_2_", "lesson_8_2", "q1", ""),
    ("8_2_", "lesson_8_2", "q2", "import torch\nfrom effitrain_helpers.engines import recomputation as rc"),
    ("8_3_", "lesson_8_3", "q1", "import torch"),
    pytest.param("8_3_", "lesson_8_3", "q2", "import torch\nimport torch.distributed as dist",
                 marks=[pytest.mark.slow, pytest.mark.exhaustive]),  # it launches 3 processes
]


@pytest.mark.parametrize("prefix, module, name, setup", CHEAP, ids=lambda v: str(v))
def test_filling_in_the_solution_turns_the_check_correct(built, prefix, module, name, setup):
    import importlib

    out, _ = built
    path = next(p for p in SOURCE if p.name.startswith(prefix))
    nb, marked = _source_regions(path)
    index = next(i for i, _ in marked if f"{name}.check(" in nb.cells[i].source)
    (region,) = dict(marked)[index]
    student = nbformat.read(out / "student" / path.name, as_version=4)
    cell = next(c.source for c in student.cells if c.cell_type == "code" and f"{name}.check(" in c.source)
    exercise = getattr(importlib.import_module(f"effitrain_helpers.teach.checks.{module}"), name)

    def run(code):
        recorder = _Recorder(exercise)
        namespace = {name: recorder, "____": ____}
        exec(setup + "\n" + code, namespace)  # noqa: S102 - the workbook's own cell
        (result,) = recorder.results
        return result.status

    assert run(cell) == NOT_ATTEMPTED
    starter = "\n".join(region.starter)
    assert starter in cell
    assert run(cell.replace(starter, "\n".join(region.solution))) == CORRECT


# ---------------------------------------------------------------- blanks and the solutions switch

def _exercise():
    def must_be_42(x):
        if x != 42:
            raise Incorrect("no")
    return Exercise("demo", must_be_42, "q9.check(x)", hints=["think"], solution_code="x = 42")


def test_answers_that_still_hold_blanks_are_not_attempted():
    q = Exercise("fn", lambda f: None, "q1.check(f)")

    def starter(a, b):
        return ____

    def nested(a):
        return [____ for _ in a]

    def done(a):
        return a

    for answer in (starter, nested, (____, 3), [1, ____], {____}, {"a": ____}):
        assert q.evaluate(answer).status == NOT_ATTEMPTED, answer
    assert "starter() still contains ____" in q.evaluate(starter).message
    assert q.evaluate(done).status == CORRECT and q.evaluate((1, 2)).status == CORRECT


def test_solution_can_be_turned_off_by_the_edition_or_the_environment(tmp_path, monkeypatch, capsys):
    q = _exercise()
    monkeypatch.delenv("EFFITRAIN_SOLUTIONS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert solutions_enabled() == (True, "")
    q.solution()
    assert "x = 42" in capsys.readouterr().out
    (tmp_path / editions.EDITION_FILE).write_text(json.dumps({"edition": "student", "solutions": False}))
    q.solution()
    q.hint()
    out = capsys.readouterr().out
    assert "x = 42" not in out and "turned off" in out and "q9.hint()" in out and "Hint 1 of 1: think" in out
    (tmp_path / editions.EDITION_FILE).unlink()
    monkeypatch.setenv("EFFITRAIN_SOLUTIONS", "off")
    q.solution()
    assert "EFFITRAIN_SOLUTIONS" in capsys.readouterr().out


# ---------------------------------------------------------------- the lesson map

def test_the_lesson_map_knows_every_lesson_notebook_and_the_readme_lists_them(tmp_path):
    rows = lesson_table()
    assert [r.number for r in rows] == [n for n, _ in SYLLABUS] and len(rows) == 27
    lesson_files = {p.name for p in SOURCE if re.match(r"\d_\d_", p.name)}
    assert {r.notebook for r in rows if r.notebook} == lesson_files, "every N_M_ notebook is a syllabus lesson"
    readme = (ROOT / "README.md").read_text()
    assert [f for f in lesson_files if f not in readme] == [], "README's lesson table lists every lesson notebook"
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"hardware": "test CPU", "notebooks": [{"notebook": "1_1_prepare_models.ipynb",
                                                                          "seconds": 12.5, "ok": True}]}))
    assert measured_seconds(report) == ({"1_1_prepare_models.ipynb": 12.5}, "test CPU")
    assert lesson_table(report=report)[0].seconds == 12.5 and measured_seconds(tmp_path / "none.json") == ({}, None)


# ---------------------------------------------------------------- the student edition, executed

IPYTHON_NAMES = {"display", "get_ipython", "In", "Out", "_", "__", "___"}


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell defines, names it reads), from its code without IPython's ``%`` and ``!`` lines."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    defined, read = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return defined, read


def _undefined(nb) -> set[str]:
    """Names some code cell of ``nb`` reads that no cell defines (nor Python or IPython)."""
    cells = [_names(c.source) for c in nb.cells if c.cell_type == "code"]
    defined = set(dir(builtins)) | IPYTHON_NAMES
    return set().union(*(r for _, r in cells)) - defined.union(*(d for d, _ in cells))


def test_the_name_search_finds_a_name_only_a_solution_defined():
    nb = _nb("import torch\nsteps = ____", "for i in range(steps):\n    print(torch.ones(i), total)",
             "def f(x, *, y=1):\n    return [z for z in x] + y")
    assert _undefined(nb) == {"____", "total"}


def test_no_student_cell_reads_a_name_only_a_solution_defined(built):
    """The student edition replaces each solution by its starter: a later cell that reads a name only the
    solution defined would stop a learner's Run All with a NameError. Every student notebook is checked here
    (without running it); the executed test below runs a few of them for real."""
    out, _ = built
    for path in SOURCE:
        missing = _undefined(nbformat.read(out / "student" / path.name, as_version=4)) - {"____"}
        assert not missing, f"{path.name}: the student edition reads {sorted(missing)}, defined only in a solution"


# Executed in every run (``make test``): the start page and two inexpensive lessons whose exercises cover each
# kind of checker (values, a processor built in this process, a learner's function run in 2 processes).
# ``make test-all`` executes every student notebook.
EVERY_RUN = {"00_start_here.ipynb", "1_2_preprocess_images_and_audio.ipynb", "3_1_gradient_accumulation.ipynb"}


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name if p.name in EVERY_RUN else pytest.param(p.name, marks=pytest.mark.exhaustive)
                                  for p in SOURCE])
def test_student_notebook_runs_to_the_end_with_every_exercise_not_attempted(built, name):
    from nbclient import NotebookClient

    out, _ = built
    path = out / "student" / name
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    print(f"{name}: student edition executed in {time.perf_counter() - start:.1f} s")
    exercise_cells = [c for c in nb.cells if c.cell_type == "code" and re.search(r"\bq\d+\.check\(", c.source)]
    assert exercise_cells
    for cell in exercise_cells:
        shown = json.dumps(cell.outputs)
        assert "Not attempted" in shown, (name, cell.source, shown)
        assert "Incorrect" not in shown and "\\u2705 Correct" not in shown and "error" not in shown
