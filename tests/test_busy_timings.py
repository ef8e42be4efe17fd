"""Every measured verdict says only what was measured, on a busy machine too (issue 44).

What a timing cell shows is read the way a learner reads it, by :func:`timing_problems`:

1. a table with a timing column (ms, GFLOP/s, time) has a reliability column, and when a row says *no* the
   cell names that row under the table, with what a spread is;
2. in the chapter table (3.3) a verdict word (as expected, differs) stands only next to a figure it judged: a
   figure marked *not judged* or *unreliable* is not in the "as expected" part of its row's verdict, and a
   figure not judged is said to be so; an unreliable time names its row under the table;
3. no line gives a negative saving ("saved -7.3 ms"), and a line that says UNRELIABLE draws no conclusion.

The fast tests feed the checker what the helpers print for fake timings (and a mutant, so it is not blind);
``test_lesson_1_1_with_one_core_busy`` (every run, about a minute) executes lesson 1.1 while a second process
burns one core; ``test_lessons_with_one_core_busy_match_a_quiet_run`` (exhaustive) executes 1.1, 3.3 and 6.2
quiet and then busy, and also checks that every timing figure the busy run calls reliable is within a factor
of :data:`QUIET_FACTOR` of the quiet run's.
"""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from effitrain_helpers.measure.bench import one_core_burnt

ROOT = Path(__file__).resolve().parents[1]
TIMING_COLUMN = re.compile(r"\bms\b|GFLOP/s|\btime\b")
RELIABLE_COLUMN = re.compile(r"reliable")
CONCLUSIONS = ("as expected", "is faster than", "is slower than", ": agree", "pays here")
QUIET_FACTOR = 2.0  # a figure the busy run calls reliable is within this factor of the quiet run's
TIMING_CELLS = {  # each lesson's timing cells (cell ids), and the budget a cell promises (seconds), if any
    "1_1_prepare_models.ipynb": {"abb0b247": 20, "e16fb8b8": None, "614e2a33": 10},
    "3_3_mixed_precision.ipynb": {"64852c67": 10, "01ee3a8d": 30, "a19cf2f7": 60},
    "6_2_data_parallelism_by_hand.ipynb": {"b7d41c26": 30, "e2722c47": None},
}  # a budget counts everything its cell does, process starts included (bench.step_budget, StepBudget)
BUDGET_MARGIN_S = 15  # a budgeted cell may overrun by the warm-ups and the last repeats started in time


# ---------------------------------------------------------------- reading what a cell shows
class _Tables(HTMLParser):
    """The tables of an HTML output, each a list of rows, each a list of cell texts (headers included)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.tables and self.tables[-1]:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_tables(html: str) -> list[list[list[str]]]:
    parser = _Tables()
    parser.feed(re.sub(r"<style.*?</style>", "", html, flags=re.S))
    return [t for t in parser.tables if t]


def cell_outputs(cell) -> tuple[str, list[str], list[str]]:
    """A code cell's text (streams, plain and Markdown results), its HTML and its Markdown outputs."""
    text, html, markdown = [], [], []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            text.append(out["text"])
        data = out.get("data", {})
        if "text/html" in data:
            html.append(data["text/html"])
        if "text/markdown" in data:
            markdown.append(data["text/markdown"])
            text.append(data["text/markdown"])
        elif "text/plain" in data and "text/html" not in data:
            text.append(data["text/plain"])
    return "\n".join(text), html, markdown


def _number(text: str) -> float | None:
    """The number a table cell holds ("1,614", "0.85", "6%"), or None for a cell of words ("float32")."""
    found = re.fullmatch(r"(-?\d[\d,]*(?:\.\d+)?)\s*%?", text.strip())
    return float(found.group(1).replace(",", "")) if found else None


def timing_rows(html: str) -> list[tuple[str, dict[str, float], bool]]:
    """Each row of each timing table: (label, {timing column: value}, reliable)."""
    rows = []
    for table in html_tables(html):
        header, *body = table
        timing = [i for i, h in enumerate(header) if TIMING_COLUMN.search(h) and not RELIABLE_COLUMN.search(h)]
        trust = [i for i, h in enumerate(header) if RELIABLE_COLUMN.search(h)]
        for row in body:
            if len(row) != len(header) or not timing:
                continue
            figures = {header[i]: v for i in timing if (v := _number(row[i])) is not None}
            names = [i for i in range(len(row)) if i not in timing + trust
                     and (_number(row[i]) is None or header[i] in ("n", "dtype", "device"))]
            label = " ".join(row[i] for i in names)  # the words that name the row (and a matrix's side)
            rows.append((label, figures, bool(trust) and row[trust[0]].lower() in ("yes", "true")))
    return rows


# ---------------------------------------------------------------- the checker
def table_problems(html: str, text: str) -> list[str]:
    """Rule 1 for one HTML output and the cell's text."""
    problems = []
    for table in html_tables(html):
        header, *body = table
        if not any(TIMING_COLUMN.search(h) for h in header):
            continue
        trust = [i for i, h in enumerate(header) if RELIABLE_COLUMN.search(h)]
        if not trust:
            problems.append(f"a timing table without a reliability column: {header}")
            continue
        doubtful = [row for row in body if len(row) == len(header) and row[trust[0]].lower() in ("no", "false")]
        if doubtful and "UNRELIABLE rows" not in text:
            problems.append(f"{len(doubtful)} unreliable rows, and no note says which and why")
        if doubtful and "spread is" not in text:
            problems.append("unreliable rows, and no word on what a spread is")
    return problems


FIGURE_CELLS = ("memory", "time", "synchronisations")


def chapter_problems(markdown: str) -> list[str]:
    """Rule 2 for the chapter table's Markdown."""
    problems = []
    lines = markdown.splitlines()
    rows = [line for line in lines if line.startswith("|") and "---" not in line][1:]
    note = "\n".join(line for line in lines if not line.startswith("|"))
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        technique, figures, verdict = cells[0], dict(zip(FIGURE_CELLS, cells[1:4])), cells[4]
        parts = verdict.split("; ")
        for figure, cell in figures.items():
            concluded = [p for p in parts if figure in p.split(":")[0] and ("as expected" in p or "differs" in p)]
            if "not judged" in cell and concluded:
                problems.append(f"{technique}: {figure} is not judged, yet the verdict says {concluded[0]!r}")
            if "not judged" in cell and not any(figure in p.split(":")[0] and "not judged" in p for p in parts):
                problems.append(f"{technique}: {figure} is not judged, and the verdict does not say so")
            if "unreliable" in cell and concluded:
                problems.append(f"{technique}: {figure} is unreliable, yet the verdict says {concluded[0]!r}")
            if "unreliable" in cell and technique not in note and "every row" not in note:
                problems.append(f"{technique}: its {figure} is unreliable, and the note under the table does not "
                                "name it")
            if cell != "—" and "not judged" not in cell and not any(figure in p.split(":")[0] for p in parts):
                problems.append(f"{technique}: the verdict neither judges {figure} nor says it is not judged")
    return problems


def line_problems(text: str) -> list[str]:
    """Rule 3 for a cell's text."""
    problems = []
    for line in text.splitlines():
        if re.search(r"saved -\d", line):
            problems.append(f"a negative saving: {line!r}")
        for part in line.split("; "):
            if "UNRELIABLE" in part.split("(")[0] and any(word in part for word in CONCLUSIONS):
                problems.append(f"a conclusion drawn from an unreliable figure: {part!r}")
    return problems


def timing_problems(cell) -> list[str]:
    """Everything rules 1 to 3 find in one executed code cell."""
    text, html, markdown = cell_outputs(cell)
    problems = [p for h in html for p in table_problems(h, text)]
    problems += [p for m in markdown if m.lstrip().startswith("|") for p in chapter_problems(m)]
    return problems + line_problems(text)


# ---------------------------------------------------------------- fast: the checker on what the helpers print
def _cell(text: str = "", html: str = "", markdown: str = "") -> dict:
    outputs = [{"output_type": "stream", "name": "stdout", "text": text}] if text else []
    if html:
        outputs.append({"output_type": "display_data", "data": {"text/html": html}})
    if markdown:
        outputs.append({"output_type": "display_data", "data": {"text/markdown": markdown}})
    return {"cell_type": "code", "outputs": outputs}


def _result(dtype: str, times: list[float], busy: str = ""):
    from effitrain_helpers.measure import bench

    return bench._result("cpu", dtype, 256, 10, times, busy)


def test_a_benchmark_table_with_an_unreliable_row_names_it_and_says_what_a_spread_is():
    from effitrain_helpers.measure import bench

    steady, jumpy = _result("float32", [1.0, 1.01, 0.99, 1.0, 1.0]), _result("bfloat16", [1.0, 3.0, 1.0, 9.0, 1.0])
    results = [steady, jumpy]
    html, note = bench.results_frame(results).to_html(), bench.results_note(results)
    assert "cpu bfloat16 n=256" in note and "cpu float32" not in note and "spread is" in note
    assert timing_problems(_cell(note, html)) == []
    assert timing_problems(_cell("", html)) == ["1 unreliable rows, and no note says which and why",
                                                "unreliable rows, and no word on what a spread is"]
    assert bench.results_note([steady]) == ""


def test_a_busy_machine_is_said_once_for_every_row():
    from effitrain_helpers.measure import bench

    busy = "only 0.5 idle cores for 2 threads: other programs are using the CPU"
    note = bench.unreliable_note({"a": busy, "b": f"{busy}; repeats spread by 50% of the median (IQR), above 10%"})
    assert note.count(busy) == 1 and "every row: " + busy in note and "b: repeats spread by 50%" in note


def test_a_saving_is_never_negative_and_never_concluded_from_unreliable_timings():
    from effitrain_helpers.measure.bench import saving_text

    assert saving_text("overlap", 11.6, 18.9, 5.0).startswith("overlap saved no time in this run")
    assert "saved 2.0 ms per step" in saving_text("overlap", 10.0, 8.0, 4.0)
    assert "50% of the 4.0 ms" in saving_text("overlap", 10.0, 8.0, 4.0)
    unsure = saving_text("overlap", 10.0, 8.0, 4.0, "its rows are unreliable")
    assert "UNRELIABLE" in unsure and "saved" not in unsure
    for line in (saving_text("overlap", 11.6, 18.9, 5.0), unsure):
        assert line_problems(line) == []
    assert line_problems("overlap saved -7.3 ms (-63%)") == ["a negative saving: 'overlap saved -7.3 ms (-63%)'"]


def _rows(time_doubt: str = ""):
    from effitrain_helpers.training import efficiency

    rows = [efficiency.ChapterRow("gradient accumulation (k=4)", 0.25, 0.25, 2.8, 1.0, 1.0, 1.0, "d",
                                  judged=("memory", "synchronisations"), time_doubt=time_doubt),
            efficiency.ChapterRow("gradient checkpointing", 0.5, 0.5, 1.3, 4 / 3, 1.0, 1.0, "d",
                                  judged=("memory", "time"), unmeasured=("synchronisations",), time_doubt=time_doubt),
            efficiency.ChapterRow("mixed precision (bf16)", 0.6, 0.55, 0.8, 0.5, 1.0, 1.0, "d", judged=("time",),
                                  unmeasured=("synchronisations",), time_doubt=time_doubt)]
    for row in rows:
        row.verdict = efficiency._verdict(row, True, "why", "why not", "not compared")
    return rows


def test_the_chapter_table_judges_only_what_it_compared():
    from effitrain_helpers.training.efficiency import chapter_table

    table = chapter_table(_rows())
    accumulation = next(line for line in table.splitlines() if "accumulation" in line)
    assert "2.80x / 1.00x (not judged)" in accumulation
    assert "memory and synchronisations: as expected (why); time: not judged (not compared)" in accumulation
    assert "| — |" in next(line for line in table.splitlines() if "checkpointing" in line)
    assert chapter_problems(table) == [] and "UNRELIABLE rows" not in table


def test_an_unreliable_time_in_the_chapter_table_is_no_conclusion_and_is_named():
    from effitrain_helpers.training.efficiency import chapter_table

    table = chapter_table(_rows("only 0.5 idle cores for 2 threads"))
    mixed = next(line for line in table.splitlines() if "mixed precision" in line)
    assert "(unreliable)" in mixed and "time: UNRELIABLE, no conclusion" in mixed and "as expected" not in mixed
    assert "memory: as expected (why); time: UNRELIABLE" in next(
        line for line in table.splitlines() if "checkpointing" in line)
    assert "UNRELIABLE rows" in table and "every row: only 0.5 idle cores" in table
    assert chapter_problems(table) == []


def test_the_chapter_checker_sees_a_verdict_next_to_a_figure_it_did_not_judge():
    """The issue's row: "time 2.80x, theory 1.00x: as expected" while the verdict looked only at bytes."""
    mutant = ("| technique | memory | time | synchronisations | verdict |\n|---|---|---|---|---|\n"
              "| gradient accumulation (k=4) | 0.25x / 0.25x | 2.80x / 1.00x (not judged) | 1.00x / 1.00x | "
              "memory, time and synchronisations: as expected (1/k) (d) |")
    assert chapter_problems(mutant) == [
        "gradient accumulation (k=4): time is not judged, yet the verdict says "
        "'memory, time and synchronisations: as expected (1/k) (d)'",
        "gradient accumulation (k=4): time is not judged, and the verdict does not say so"]


def test_the_precision_conclusion_draws_none_from_an_unreliable_time():
    from effitrain_helpers.core.devices import HardwareSummary
    from effitrain_helpers.training.efficiency import precision_conclusion

    cpu = HardwareSummary("Test CPU", 2, 2, 2, 8.0, 4.0, "SIMD AVX2", False, False, "2")
    conclusion = precision_conclusion(_rows("busy")[2:], cpu)
    assert conclusion.outcome == "unreliable" and "no conclusion on speed" in conclusion.text


def test_a_benchmark_keeps_its_time_budget_when_products_run_slow(monkeypatch):
    """Products 50x slower than the warm-up promised (one core busy): the repeats are cut, and a note says so."""
    from effitrain_helpers.measure import bench

    monkeypatch.setattr(bench, "_warm_product", lambda size, dtype, device: (lambda: None, 200))

    loops = []

    def slow(fn, device, number, limit_s=None):
        loops.append(number)
        time.sleep(0.01)
        return number * 0.005, number  # each call 5 ms: 200 calls would be a second per repeat

    monkeypatch.setattr(bench, "_time_loop", slow)
    began = time.perf_counter()
    results, notes = bench.run_benchmark([64, 128], ["float32", "bfloat16"], "cpu", repeats=100,
                                         check_load=False, budget_s=0.5)
    assert time.perf_counter() - began < 2.5
    assert all(bench.MIN_ROUNDS <= r.repeats < 100 for r in results)
    assert any("cut to keep this cell within its budget of 0 s" in n or "budget of 1 s" in n for n in notes)
    assert loops[0] == 200 and min(loops) == 20  # re-sized, a step at a time, to 20 calls of 5 ms: 0.1 s


def test_a_repeat_whose_calls_turn_slow_after_a_quiet_warm_up_stops_in_time(monkeypatch):
    """One core busy: a call can take a whole time slice (15 ms) where the warm-up saw 20 us. A loop of
    5000 calls sized on the warm-up would run 75 s; the repeat stops at LOOP_STEP x TARGET_REPEAT_S."""
    from effitrain_helpers.measure import bench

    monkeypatch.setattr(bench, "_warm_product", lambda size, dtype, device: (lambda: time.sleep(0.015), 5000))
    began = time.perf_counter()
    results, _ = bench.run_benchmark([128], ["float32"], "cpu", repeats=3, check_load=False)
    assert time.perf_counter() - began < 3 * bench.LOOP_STEP * bench.TARGET_REPEAT_S + 1.0
    assert results[0].repeats == 3 and results[0].seconds == pytest.approx(0.015, rel=0.5)


def test_a_benchmark_announces_about_how_long_it_takes():
    from effitrain_helpers.measure import bench

    seconds = bench.estimate_seconds([128, 256], ["float32", "bfloat16"], "cpu", repeats=5)
    assert seconds == pytest.approx(bench.LOAD_WINDOW_S + 4 * (bench.WARMUP_S + 5 * bench.TARGET_REPEAT_S))
    line = bench.announce([128, 256], ["float32", "bfloat16"], "cpu", repeats=5, budget_s=20)
    assert "about 2 s" in line and "within 20 s" in line
    with pytest.raises(ValueError, match="budget_s=-1"):
        bench.run_benchmark([64], budget_s=-1)


def test_training_runs_keep_their_step_budget_on_a_busy_machine():
    """3.3's precision runs: 3 runs of 30 steps of 1 s would take 90 s; busy, they are cut to fit 30 s, less
    the process starts the cell announces."""
    from effitrain_helpers.measure import bench

    busy = "only 0.5 idle cores for 2 threads: other programs are using the CPU"
    quiet = bench.step_budget(30, 1.0, runs=3, budget_s=30, busy="")
    assert quiet.steps == 30 and quiet.note() == ""  # a quiet machine runs what the lesson asked
    cut = bench.step_budget(30, 1.0, runs=3, budget_s=30, busy=busy)
    assert cut.steps == 10 and "trains 10 of its 30 steps" in cut.note() and busy in cut.note()
    assert cut.announce().endswith(cut.note())  # said before the runs: the cut is decided then
    assert "about 90 s of steps" in cut.announce() and "within 30 s" in cut.announce()
    starting = bench.step_budget(30, 1.0, runs=3, budget_s=30, busy=busy, fresh_processes=2, start_s=6)
    assert starting.steps == 6  # (30 s - 2 starts of 6 s) / 3 runs of 1 s per step
    assert "plus starting 2 fresh processes (about 6 s each" in starting.announce("fp16")
    assert "fp16 left out if need be" in starting.announce("fp16")
    assert bench.step_budget(30, 100.0, runs=3, budget_s=30, busy=busy).steps == bench.MIN_STEPS
    assert bench.step_budget(6, 0.1, runs=3, budget_s=30, busy=busy).steps == 6  # fits: nothing cut
    with pytest.raises(ValueError, match="budget_s=0"):
        bench.step_budget(6, 0.1, runs=3, budget_s=0, busy="")


def test_a_run_the_cell_can_do_without_is_left_out_when_the_budget_is_spent(monkeypatch):
    """3.3 on a busy machine: fp32's fresh process took most of the budget, so fp16's (a third precision, which a
    CPU runs as fp32 anyway) is not started, and the note says why; fp32 and the run in this process stay."""
    from effitrain_helpers.measure import bench
    from effitrain_helpers.training import precision

    def fresh(techniques):
        time.sleep(0.3)  # a fresh process: its start and its steps
        return techniques.precision

    monkeypatch.setattr(precision, "measure_techniques", fresh)
    monkeypatch.setattr(precision, "run_techniques", lambda techniques: None)
    monkeypatch.setattr(precision, "replace", lambda run, **changes: "here")
    tight = bench.step_budget(2, 0.01, runs=3, budget_s=0.5, busy="", fresh_processes=2, start_s=0.1)
    runs = precision.measure_precision(("fp32", "bf16", "fp16"), steps=2, in_this_process="bf16", budget=tight)
    assert runs == {"fp32": "fp32", "bf16": "here"} and list(tight.left_out) == ["fp16"]
    assert "so fp16 was not run, to keep this cell within 0 s (a run in a fresh process took 0 s" in tight.cuts_note()
    roomy = bench.step_budget(2, 0.01, runs=3, budget_s=30, busy="", fresh_processes=2, start_s=0.1)
    assert list(precision.measure_precision(("fp32", "bf16", "fp16"), 2, in_this_process="bf16", budget=roomy)) == [
        "fp32", "bf16", "fp16"] and roomy.cuts_note() == ""
    assert len(precision.measure_precision(("fp32", "fp16"), 2, in_this_process="fp16", budget=tight)) == 2  # needed


def test_interleaved_timed_rounds_stop_together_at_the_deadline(monkeypatch):
    """6.2's overlap timing: steps that turn slow (one core busy) stop at the cell's deadline after MIN_STEPS
    timed rounds, every way with as many steps, the ranks deciding together (an all-reduce of the flag)."""
    import torch.distributed as dist

    from effitrain_helpers.measure import bench
    from effitrain_helpers.training.ddp_by_hand import time_steps

    agreed = []
    monkeypatch.setattr(dist, "barrier", lambda: None)
    monkeypatch.setattr(dist, "get_backend", lambda: "gloo")
    monkeypatch.setattr(dist, "all_reduce", lambda flag, op=None: agreed.append(float(flag.item())))
    ways = {"a": lambda: time.sleep(0.02), "b": lambda: time.sleep(0.02)}
    began = time.perf_counter()
    seconds = time_steps(ways, steps=100, warmup=1, deadline=time.time() + 0.3)
    assert time.perf_counter() - began < 1.0
    assert bench.MIN_STEPS <= len(seconds["a"]) == len(seconds["b"]) < 100 and agreed[-1] == 1.0
    plan = bench.step_budget(100, 0.02, runs=2, budget_s=0.3, busy="")
    plan.stopped(len(seconds["a"]))
    assert f"each run timed {len(seconds['a'])} of its 100 steps" in plan.cuts_note()
    assert len(time_steps(ways, steps=3, warmup=0)["a"]) == 3  # no deadline: every step


def test_the_chapter_table_announces_its_budget_and_trains_fewer_steps_once_it_is_spent():
    """3.3's chapter table: measurements here, then N fresh processes training 3 + k micro-batches per step; when
    the measurements here left too little of the budget, the processes train fewer steps (at least k, one
    synchronisation of local SGD), and the note says so."""
    from effitrain_helpers.measure import bench
    from effitrain_helpers.training.efficiency import chapter_announce

    plan = bench.step_budget(8, 0.5, runs=7, budget_s=45, busy="", fresh_processes=2, start_s=6, here_s=5)
    line = chapter_announce(plan)
    assert "about 39 s at this size (5 s of measurements here, then 2 fresh processes, about 6 s each" in line
    assert "each training 8 steps of 7 micro-batches at about 500 ms" in line and "within 45 s" in line
    assert plan.steps_that_fit(8, least=4) == 8 and plan.cuts_note() == ""  # 2 x 6 s + 7 x 8 x 0.5 s = 40 s
    plan.started -= 20  # the measurements here took 20 s: 25 s left, 13 s after the starts, 3.5 s per step
    assert plan.steps_that_fit(8, least=4) == 4 and "each run timed 4 of its 8 steps" in plan.cuts_note()
    busy = bench.step_budget(8, 2.0, runs=7, budget_s=45, busy="busy", fresh_processes=2, start_s=6, here_s=5,
                             least=4)
    assert busy.steps == 4 and "trains 4 of its 8 steps" in chapter_announce(busy)


class _Events:
    def __init__(self):
        self.callbacks = {"pre_run_cell": [], "post_run_cell": []}

    def register(self, event, callback):
        self.callbacks[event].append(callback)

    def unregister(self, event, callback):
        self.callbacks[event].remove(callback)

    def fire(self, event):
        for callback in list(self.callbacks[event]):
            callback()


def test_a_lessons_clock_counts_cells_not_the_time_between_them(monkeypatch):
    import IPython

    from effitrain_helpers.teach.lesson_clock import LessonClock

    shell = type("Shell", (), {"events": _Events()})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    clock = LessonClock()
    time.sleep(0.05)
    shell.events.fire("post_run_cell")  # the set-up cell ends
    time.sleep(0.3)  # the learner reads
    shell.events.fire("pre_run_cell")
    time.sleep(0.05)
    shell.events.fire("post_run_cell")
    shell.events.fire("pre_run_cell")  # the closing cell
    line = clock.describe()
    assert 0.09 < clock.seconds() < 0.25 and "3 cells" in line and "counting execution only" in line
    assert shell.events.callbacks == {"pre_run_cell": [], "post_run_cell": []}


def test_outside_a_notebook_the_clock_says_it_is_the_wall_clock(monkeypatch):
    import IPython

    from effitrain_helpers.teach.lesson_clock import LessonClock

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert "wall clock" in LessonClock().describe()


# ---------------------------------------------------------------- slow: lessons run with one core busy
def run_lesson(name: str, monkeypatch) -> nbformat.NotebookNode:
    """Execute an English lesson (small size, offline, timings recorded per cell)."""
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("EFFITRAIN_SIZE", "small")
    monkeypatch.setenv("EFFITRAIN_LANG", "en")
    path = ROOT / "notebooks" / name
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def _seconds(cell) -> float:
    from datetime import datetime

    timing = cell["metadata"]["execution"]
    began, ended = (datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                    for k in ("iopub.execute_input", "shell.execute_reply"))
    return (ended - began).total_seconds()


def lesson_problems(name: str, nb) -> list[str]:
    """Rules 1 to 3 on each timing cell of lesson ``name``, and each budgeted cell within its budget."""
    problems = []
    cells = {cell.get("id"): cell for cell in nb.cells}
    for cell_id, budget in TIMING_CELLS[name].items():
        problems += [f"{name} cell {cell_id}: {p}" for p in timing_problems(cells[cell_id])]
        if budget is not None and _seconds(cells[cell_id]) > budget + BUDGET_MARGIN_S:
            problems.append(f"{name} cell {cell_id}: took {_seconds(cells[cell_id]):.0f} s, over its budget of "
                            f"{budget} s")
    return problems


def quiet_disagreements(name: str, quiet, busy) -> list[str]:
    """Rule 4: each timing figure the busy run calls reliable is within QUIET_FACTOR of the quiet run's."""
    found = []
    for cell_id in TIMING_CELLS[name]:
        quiet_cell, busy_cell = (next(c for c in run.cells if c.get("id") == cell_id) for run in (quiet, busy))
        calm = {(label, column): value for h in cell_outputs(quiet_cell)[1]
                for label, values, _ in timing_rows(h) for column, value in values.items()}
        for h in cell_outputs(busy_cell)[1]:
            for label, values, reliable in timing_rows(h):
                for column, value in values.items():
                    reference = calm.get((label, column))
                    if reliable and reference and value > 0 and not (
                            1 / QUIET_FACTOR <= value / reference <= QUIET_FACTOR):
                        found.append(f"{name} cell {cell_id}, {label}, {column}: {value} busy and called reliable, "
                                     f"{reference} quiet")
    return found


@pytest.mark.slow
def test_lesson_1_1_with_one_core_busy(monkeypatch):
    name = "1_1_prepare_models.ipynb"
    with one_core_burnt(seconds=900.0):
        nb = run_lesson(name, monkeypatch)
    assert lesson_problems(name, nb) == []


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(TIMING_CELLS))
def test_lessons_with_one_core_busy_match_a_quiet_run(name, monkeypatch):
    quiet = run_lesson(name, monkeypatch)
    with one_core_burnt(seconds=900.0):
        busy = run_lesson(name, monkeypatch)
    for run, nb in (("quiet", quiet), ("busy", busy)):  # shown with -s, and in a failure's captured output
        cells = {cell.get("id"): cell for cell in nb.cells}
        executed = sum(_seconds(cell) for cell in nb.cells if "execution" in cell.get("metadata", {}))
        print(name, run, {cell_id: round(_seconds(cells[cell_id])) for cell_id in TIMING_CELLS[name]},
              f"all cells {executed:.0f} s")
    assert lesson_problems(name, quiet) + lesson_problems(name, busy) + quiet_disagreements(name, quiet, busy) == []
