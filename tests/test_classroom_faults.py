"""What a class hands in is never lost or misgraded (issue 33): ``grade``, ``workbook``, ``progress`` and the
other commands under bad input, concurrency and interrupts.

Most cases call the command line's ``main()`` in this process (fast tier); ``grade`` is stubbed there at
:func:`grade_notebook`, so a test also proves that a refusal comes before any notebook runs. The few that need
a real kernel, a signal or a fresh interpreter are marked slow.
"""

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from effitrain_helpers import cli
from effitrain_helpers.sources import kit
from effitrain_helpers.teach import grade as grade_mod
from effitrain_helpers.teach import sandbox
from effitrain_helpers.teach import verdicts
from effitrain_helpers.teach.exercises import solutions_enabled
from effitrain_helpers.teach.grade import COLUMNS, NO_EXERCISES, Row
from effitrain_helpers.teach.progress import progress_table
from effitrain_helpers.teach.workbook import MANIFEST, NEW, NOT_OURS, UNCHANGED, Workbook
from classroom import needs_sandbox, submit, write_lesson  # a generated class (tests/ is on the path under pytest)
from test_workbook import _lesson  # a tiny solved lesson

ROOT = Path(__file__).resolve().parents[1]
REAL_GRADE_NOTEBOOK = grade_mod.grade_notebook  # the fixture `graded` stubs it
LIMIT = 20  # seconds per notebook for the real runs: kernel start-up on a busy 2-core machine included


def _code(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as stop:  # argparse's own errors
        return stop.code


def _one_line(capsys, argv, words, code=2) -> str:
    """The command fails with ``code``, saying ``words`` in one line on stderr (no traceback)."""
    got = _code(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert got == code and len(err) == 1 and words in err[0], err
    return err[0]


def _notebook(path: Path, *sources: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)


def _hashes(folder: Path) -> dict:
    """Every file and folder under ``folder``: a file by its bytes' sha256, a folder as such."""
    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in folder.rglob("*")}


# ---------------------------------------------------------------- grade: --out, --timeout, a row for each

@pytest.fixture
def subs(tmp_path):
    folder = tmp_path / "subs"
    _notebook(folder / "alice.ipynb", "print('alice')")
    _notebook(folder / "bob.ipynb", "print('bob')")
    _notebook(folder / "carol" / "2_2_x.ipynb", "print('carol')")
    return folder


@pytest.fixture
def graded(monkeypatch):
    """grade_notebook stubbed: records what it was asked to grade (no kernel), one row per notebook."""
    calls = []

    def fake(sub, limit, sources, hide=(), safe=True, deadline=None, cancel=None):
        calls.append((sub.student, sub.notebook, limit))
        return [Row(sub.student, sub.notebook, "", "", NO_EXERCISES, "stub")]

    monkeypatch.setattr(grade_mod, "grade_notebook", fake)
    monkeypatch.setattr(sandbox, "unavailable", lambda: None)
    return calls


@pytest.mark.parametrize("out, says", [
    ("SUBS/bob.ipynb", "is not one of .csv"),
    ("SUBS/grades.csv", "inside SUBMISSIONS_DIR"),
    ("SUBS/carol/grades.csv", "inside SUBMISSIONS_DIR"),
    ("SUBS", "is a folder"),
    ("FOLDER", "is a folder"),
    ("", "an empty value is not allowed"),
    (" ", "an empty value is not allowed"),
    ("notes.txt", "is not one of .csv"),
    ("other.csv", "is not a gradebook this command wrote"),
    ("link.csv", "inside SUBMISSIONS_DIR"),  # a link to a submission
    ("nowhere/g.csv", "does not exist"),
])
def test_a_dangerous_out_is_refused_before_any_notebook_runs(subs, tmp_path, graded, capsys, monkeypatch, out, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FOLDER").mkdir()
    (tmp_path / "notes.txt").write_text("my notes")
    (tmp_path / "other.csv").write_text("name,mark\nalice,10\n")
    (tmp_path / "link.csv").symlink_to(subs / "bob.ipynb")
    before, around = _hashes(subs), _hashes(tmp_path)
    _one_line(capsys, ["grade", "subs", "--out", out.replace("SUBS", "subs")], says)
    assert graded == [], "a notebook ran before --out was refused"
    assert _hashes(subs) == before and _hashes(tmp_path) == around, "something was written"


def test_a_gradebook_with_rows_is_kept_unless_resumed_merged_or_replaced_on_purpose(subs, tmp_path, graded, capsys):
    out = tmp_path / "grades.csv"
    before = _hashes(subs)
    assert _code(["grade", str(subs), "--out", str(out)]) == 0
    first = out.read_text()
    assert first.splitlines()[0] == ",".join(COLUMNS) and len(first.splitlines()) == 4
    capsys.readouterr()
    _one_line(capsys, ["grade", str(subs), "--out", str(out)], "already holds 3 rows of an earlier grade run")
    assert out.read_text() == first and len(graded) == 3
    assert _code(["grade", str(subs), "--out", str(out), "--resume"]) == 0  # nothing left to grade
    assert out.read_text() == first and len(graded) == 3
    (subs / "dan.ipynb").write_text((subs / "bob.ipynb").read_text())
    assert _code(["grade", str(subs), "--out", str(out), "--resume"]) == 0  # only the new one
    assert len(graded) == 4 and out.read_text().startswith(first) and "dan.ipynb" in out.read_text()
    assert _code(["grade", str(subs / "carol"), "--out", str(out), "--merge"]) == 0  # the other rows kept
    assert len(out.read_text().splitlines()) == 6
    assert _code(["grade", str(subs / "carol"), "--out", str(out), "--replace"]) == 0
    assert len(out.read_text().splitlines()) == 2
    assert sorted(os.listdir(tmp_path)) == ["grades.csv", "subs"]  # no temp file left
    assert _hashes(subs) == {**before, Path("dan.ipynb"): before[Path("bob.ipynb")]}


def test_an_interrupted_run_keeps_the_rows_written_and_resumes(subs, tmp_path, graded, monkeypatch):
    out = tmp_path / "grades.csv"
    real = grade_mod.grade_notebook

    def stop_at_carol(sub, *args, **kwargs):
        if sub.notebook.startswith("carol/"):
            raise SystemExit(143)  # SIGTERM while carol's notebook runs
        return real(sub, *args, **kwargs)

    monkeypatch.setattr(grade_mod, "grade_notebook", stop_at_carol)
    with pytest.raises(SystemExit):
        grade_mod.grade(subs, out, progress=False)
    assert [r.student for r in grade_mod.read_gradebook(out)] == ["alice", "bob"]
    monkeypatch.setattr(grade_mod, "grade_notebook", real)
    grade_mod.grade(subs, out, progress=False, mode="resume")
    assert [r.notebook for r in grade_mod.read_gradebook(out)] == ["alice.ipynb", "bob.ipynb", "carol/2_2_x.ipynb"]
    assert [notebook for _, notebook, _ in graded] == ["alice.ipynb", "bob.ipynb", "carol/2_2_x.ipynb"]


def test_students_are_paths_sections_apart_and_duplicates_named(tmp_path, graded, monkeypatch):
    """The real rows (grade_notebook), the sandboxed run stubbed: what it was asked to run is recorded."""
    ran = []

    def run(folder, limit, env, hide=(), safe=True, cancel=None):
        ran.append(folder)
        return {"notebook": None, "outcome": "error", "detail": "stub"}

    monkeypatch.setattr(grade_mod, "grade_notebook", REAL_GRADE_NOTEBOOK)
    monkeypatch.setattr(sandbox, "run_graded", run)
    subs = tmp_path / "subs"
    for name in ["alice.ipynb", "alice/alice.ipynb", "section2/uma.ipynb", "section2/vic.ipynb",
                 "bob/00_start_here.ipynb", "bob/00_start_here-Copy1.ipynb", "carl.ipynb", "carl/00_start_here.ipynb",
                 "=cmd.ipynb"]:
        _notebook(subs / name, "from effitrain_helpers.teach.checks.start_here import q1")
    roster = tmp_path / "roster.csv"
    roster.write_text("file,student\nsection2/vic.ipynb,Victor Reis\n")
    out = tmp_path / "g.csv"
    grade_mod.grade(subs, out, progress=False, roster=roster)
    rows = {(r.student, r.notebook): r for r in grade_mod.read_gradebook(out)}
    assert ("alice", "alice.ipynb") in rows and ("alice/alice", "alice/alice.ipynb") in rows
    assert ("section2/uma", "section2/uma.ipynb") in rows and ("Victor Reis", "section2/vic.ipynb") in rows
    duplicate = rows["bob", "bob/00_start_here-Copy1.ipynb"]  # the copy, not the original
    assert duplicate.status == "duplicate" and "same student and lesson as bob/00_start_here.ipynb" in duplicate.detail
    assert rows["carl", "carl/00_start_here.ipynb"].status == "duplicate"
    assert len(ran) == 7  # 9 files, 2 duplicates not graded twice
    every = [(r.student, r.notebook, r.lesson, r.exercise) for r in grade_mod.read_gradebook(out)]
    assert len(set(every)) == len(every) and len(rows) == 9  # no two rows of one student, notebook and exercise
    assert "'=cmd,'=cmd.ipynb," in out.read_text()  # a spreadsheet shows it as text, not a formula
    assert rows["=cmd", "=cmd.ipynb"].notebook == "=cmd.ipynb"  # and it reads back as it was


def test_a_fifo_or_a_huge_file_is_never_read(tmp_path, graded, monkeypatch):
    subs = tmp_path / "subs"
    subs.mkdir()
    os.mkfifo(subs / "b.ipynb")
    (subs / "big.ipynb").write_bytes(b" " * 100)
    (subs / "link.ipynb").symlink_to(subs / "big.ipynb")
    monkeypatch.setattr(grade_mod, "MAX_NOTEBOOK_BYTES", 50)
    monkeypatch.setattr(grade_mod, "grade_notebook", REAL_GRADE_NOTEBOOK)  # none of them runs
    start = time.monotonic()
    grade_mod.grade(subs, tmp_path / "g.csv", progress=False)
    rows = {r.notebook: r for r in grade_mod.read_gradebook(tmp_path / "g.csv")}
    assert time.monotonic() - start < 10
    assert "not a regular file" in rows["b.ipynb"].detail and "larger than 50 bytes" in rows["big.ipynb"].detail
    assert "a link is not a submission" in rows["link.ipynb"].detail
    assert {r.status for r in rows.values()} == {"invalid notebook"}


@pytest.mark.parametrize("timeout, says", [
    ("inf", "must be a positive number"), ("nan", "must be a positive number"), ("0", "must be a positive number"),
    ("-1", "must be a positive number"), ("abc", "must be a positive number"), ("1e9", "more than a day"),
])
def test_a_bad_timeout_is_refused_at_once(subs, tmp_path, graded, capsys, timeout, says):
    _one_line(capsys, ["grade", str(subs), "--out", str(tmp_path / "g.csv"), "--timeout", timeout], says)
    assert graded == []


def test_a_fractional_timeout_is_what_the_help_says_it_is(subs, tmp_path, graded):
    assert _code(["grade", str(subs), "--out", str(tmp_path / "g.csv"), "--timeout", "2.5"]) == 0
    assert {limit for *_, limit in graded} == {2.5}


def test_an_empty_submissions_path_is_refused(tmp_path, graded, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _notebook(tmp_path / "here.ipynb", "print(1)")  # the current folder holds a notebook: '' must not grade it
    _one_line(capsys, ["grade", "", "--out", "g.csv"], "an empty value is not allowed")
    with pytest.raises(ValueError, match="SUBMISSIONS_DIR is empty"):
        grade_mod.grade("", tmp_path / "g.csv")
    assert graded == [] and not (tmp_path / "g.csv").exists()


def test_the_csv_is_written_aside_and_moved_so_a_failure_leaves_the_old_one(subs, tmp_path, graded, monkeypatch):
    out = tmp_path / "grades.csv"
    grade_mod.grade(subs, out, progress=False)
    old = out.read_bytes()

    def broken(rows, f):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerows", broken)
    with pytest.raises(OSError):
        grade_mod.grade(subs, out, progress=False, mode="replace")
    assert out.read_bytes() == old and sorted(os.listdir(tmp_path)) == ["grades.csv", "subs"]


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("sig, code, jobs", [(signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 1), (signal.SIGTERM, 143, 2)])
def test_ctrl_c_or_sigterm_stops_the_running_notebook_at_once_and_leaves_nothing(tmp_path, sig, code, jobs):
    """With -j 2 both notebooks running are stopped."""
    subs = tmp_path / "subs"
    marker = f"effitrain-test-{os.getpid()}-{sig}-{jobs}"
    edition = write_lesson(tmp_path / "source")  # the loop is the student's answer: only answers run
    for i in range(jobs):
        submit(edition, subs / f"loop{i}.ipynb", "import subprocess, sys, time\n"
               f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}], "
               "start_new_session=True)\nwhile True:\n    time.sleep(0.1)")
    (tmp_path / "temp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "temp"), "PYTHONFAULTHANDLER": "1"}
    before = _hashes(subs)
    # A command started in the background by a shell without job control (`cmd &`) inherits SIGINT ignored,
    # and Python keeps it so: grade is started the way a terminal starts it, with Ctrl-C's default action.
    grading = subprocess.Popen([sys.executable, "-m", "effitrain_helpers.cli", "grade", str(subs), "--out",
                                str(tmp_path / "g.csv"), "--timeout", "600", "--source",
                                str(tmp_path / "source"), "-j", str(jobs)], env=env, stderr=subprocess.PIPE,
                               text=True, restore_signals=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def started():
        return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]

    deadline = time.monotonic() + 120
    while len(started()) < jobs and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(started()) == jobs, "the notebooks never started their processes"
    stop = time.monotonic()
    grading.send_signal(sig)
    try:
        _, err = grading.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # SIGABRT makes faulthandler print where every thread of it waits
        grading.send_signal(signal.SIGABRT)
        pytest.fail(f"grade did not stop within 60 s of {sig.name}; its threads:\n{grading.communicate()[1]}")
    assert grading.returncode == code and time.monotonic() - stop < 30, err
    assert "Traceback" not in err and (sig != signal.SIGINT or "effitrain grade: interrupted" in err), err
    assert started() == [] and list((tmp_path / "temp").iterdir()) == [], "left behind"
    assert (tmp_path / "g.csv").read_text().splitlines() == [",".join(COLUMNS)] and _hashes(subs) == before


# ---------------------------------------------------------------- workbook: the manifest, concurrent runs

@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for i in range(1, 9):
        _lesson(folder / f"9_{i}_lesson.ipynb", note=f"lesson {i}")
    return folder


@pytest.mark.parametrize("runs", [2, 4])
def test_concurrent_runs_leave_a_complete_manifest(tmp_path, source, monkeypatch, runs):
    """Runs in threads of this process, each its own Workbook as each process has: the lock file serialises
    them (flock locks belong to each open file, so threads contend as processes do). Writes are slowed a
    little so that, without the lock, the runs interleave."""
    folder = tmp_path / "book"
    write = Workbook._write

    def slow_write(self, *args, **kwargs):
        time.sleep(0.01)
        write(self, *args, **kwargs)

    monkeypatch.setattr(Workbook, "_write", slow_write)
    reports, errors = [], []

    def run():
        try:
            reports.append(Workbook(folder, source).sync())
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(reports) == runs
    manifest = json.loads((folder / MANIFEST).read_text())
    assert sorted(manifest) == sorted(p.name for p in source.glob("*.ipynb"))
    assert sorted(c.action for r in reports for c in r) == sorted([NEW] * 8 + [UNCHANGED] * 8 * (runs - 1))
    assert {c.action for c in Workbook(folder, source).sync()} == {UNCHANGED}
    assert not list(folder.glob("*.tmp"))


@pytest.mark.slow
def test_four_workbook_commands_at_once_on_the_real_lessons(tmp_path):
    folder = tmp_path / "book"
    runs = [subprocess.Popen([sys.executable, "-m", "effitrain_helpers.cli", "workbook", "--dir", str(folder),
                              "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)]
    outs = [r.communicate(timeout=300) for r in runs]
    assert [r.returncode for r in runs] == [0] * 4, [err for _, err in outs]
    lessons = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(json.loads((folder / MANIFEST).read_text())) == lessons
    actions = [c["action"] for out, _ in outs for c in json.loads(out)["notebooks"]]
    assert actions.count(NEW) == len(lessons) and NOT_OURS not in actions


def test_a_lost_manifest_is_rebuilt_from_the_copies_fingerprints(tmp_path, source):
    folder = tmp_path / "book"
    Workbook(folder, source).sync()
    mine = folder / "9_1_lesson.ipynb"
    nb = nbformat.read(mine, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("my_answer = 42"))  # the learner's work
    nbformat.write(nb, mine)
    (folder / MANIFEST).unlink()
    actions = {c.notebook: c.action for c in Workbook(folder, source).sync()}
    assert actions.pop("9_1_lesson.ipynb") == NOT_OURS and set(actions.values()) == {UNCHANGED}
    _lesson(source / "9_2_lesson.ipynb", note="changed")  # an untouched copy is updated again
    assert {c.notebook: c.action for c in Workbook(folder, source).sync()}["9_2_lesson.ipynb"] == "updated"
    assert "my_answer = 42" in mine.read_text()


@pytest.mark.parametrize("args", [["--dir", ""], ["--dir", " "], ["--source", ""], ["--fresh", "9.1", "--dir", ""]])
def test_an_empty_workbook_path_is_refused(tmp_path, capsys, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    _one_line(capsys, ["workbook", *args], "an empty value is not allowed")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- progress: bad lines skipped and counted

def test_bad_lines_are_skipped_counted_and_the_good_ones_kept(tmp_path, monkeypatch, capsys):
    path = tmp_path / "progress.jsonl"
    good = json.dumps({"lesson": "start", "exercise": "q1", "status": "correct"})
    path.write_bytes(b"\n".join([good.encode(), b"\xff\xfe not utf-8", b'{"lesson": ["1.1"], "exercise": "q1", '
                                b'"status": "correct"}', b'{"lesson": "1.1", "exercise": 2, "status": "correct"}',
                                b"[1, 2]", b"", b'{"lesson": "start", "exer']) + b"\n")
    monkeypatch.setenv(verdicts.PROGRESS_ENV, str(path))
    assert verdicts.read_counted() == ([json.loads(good)], 5)
    table = progress_table()
    assert table[0].correct == 1 and table.skipped == 5
    assert cli.main(["progress"]) == 0
    assert "(5 lines of the verdicts file could not be read and were skipped)" in capsys.readouterr().out
    assert cli.main(["progress", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)[0]["correct"] == 1 and "5 lines of" in out.err


# ---------------------------------------------------------------- one line, not a traceback

@pytest.mark.parametrize("argv, says", [
    (["model", ""], "an empty value is not allowed"),
    (["train", "--model", ""], "an empty value is not allowed"),
    (["prefetch", "--dir", "", "--check"], "an empty value is not allowed"),
    (["editions", "--out", ""], "an empty value is not allowed"),
    (["efficiency", "--steps", "100000000"], "from 1 to 256"),
    (["efficiency", "--accumulation-steps", "99999999"], "from 1 to 64"),
    (["efficiency", "--local-sgd-steps", "20", "--steps", "16"], "would never average"),
    (["fsdp", "--batch-size", "100000000"], "GB of memory"),
    (["fsdp", "--steps", "100000000"], "from 1 to 1000"),
    (["optimizers", "--steps", "100000000"], "from 1 to 4000"),
    (["bench", "--repeats", "100000000"], "from 1 to 1000"),
])
def test_user_mistakes_are_one_line(capsys, argv, says):
    _one_line(capsys, argv, says)


def test_the_memory_estimate_allows_the_lesson_and_refuses_the_absurd():
    from effitrain_helpers.training.model_sharding import estimated_bytes

    assert estimated_bytes(2, 3, 8) < 10e6  # the small lesson: a few MB
    assert estimated_bytes(2, 3, 100_000_000) > 76e9  # the run: its token batches alone are 76 GB


@pytest.mark.parametrize("command", ["shards", "ddp-check"])
def test_ctrl_c_during_a_launch_is_one_line_and_exit_130(capsys, monkeypatch, command):
    from effitrain_helpers.processes import launch

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "launch", interrupted)
    _one_line(capsys, [command, "--processes", "2"], f"effitrain {command}: interrupted", code=130)


@pytest.mark.slow
@pytest.mark.parametrize("variable, value, argv", [
    ("EFFITRAIN_SIZE", "huge", ["--help"]), ("EFFITRAIN_SIZE", "huge", ["grade", "--help"]),
    ("EFFITRAIN_LANG", "xx", ["progress"]), ("EFFITRAIN_LANG", "xx", ["train", "--help"]),
])
def test_a_bad_setting_is_one_line_on_every_command(variable, value, argv):
    done = subprocess.run([sys.executable, "-m", "effitrain_helpers.cli", *argv], capture_output=True, text=True,
                          env={**os.environ, variable: value}, timeout=120)
    err = done.stderr.strip()
    assert done.returncode == 2 and done.stdout == "" and "\n" not in err and f"{variable}={value!r}" in err, err


# ---------------------------------------------------------------- accepted without a word

def test_prefetch_check_reads_the_files_it_reports_ready(tmp_path, capsys):
    item = kit.ITEMS["model"]
    folder = tmp_path / "kit" / item.folder
    folder.mkdir(parents=True)
    (tmp_path / "kit" / kit.MANIFEST).write_text(json.dumps({"format": kit.KIT_FORMAT, "items": {"model": {}}}))
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    assert cli.main(["prefetch", "--check", "--dir", str(tmp_path / "kit")]) == 1
    out = capsys.readouterr().out
    assert "BROKEN, unusable config.json (not a JSON object with settings), model.safetensors (empty (0 bytes))" in out
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (folder / "config.json").write_text('{"model_type": "distilbert"}')
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header[:-5])  # cut short
    assert kit.unusable_files(folder, item) == [
        "model.safetensors (cut short (its header says more bytes than the file has))"]
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    assert kit.unusable_files(folder, item) == []


@pytest.mark.parametrize("value, enabled", [("", True), ("on", True), ("OFF", False), ("of", False),
                                             ("maybe", False)])
def test_an_unknown_solutions_setting_is_named_and_counts_as_off(monkeypatch, tmp_path, value, enabled):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EFFITRAIN_SOLUTIONS", value)
    on, why = solutions_enabled()
    assert on is enabled
    if value.lower() not in ("", "on", "off"):
        assert f"EFFITRAIN_SOLUTIONS={value!r}" in why and "count as off" in why
