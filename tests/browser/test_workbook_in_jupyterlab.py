"""The workbook as a learner sees it in JupyterLab (issue 14): each scenario on its own copy of the notebooks.

1. The start page, Run All: no error, nothing on stderr, the course map and the hardware summary shown.
2. Lesson 1.1 as a graded class's student gets it: Run All reaches the end with every exercise *Not
   attempted*; a wrong answer typed into an exercise reads *Incorrect* with its reason, the right one
   *Correct*; ``hint()`` shows a hint; the benchmark widget renders and its Run button draws a new table;
   every figure is a loaded image.
3. Lesson 2.2, several processes: every rank's line appears and the self-check cell prints its verdict.
4. Every HTML table the pages of 1-3 render (the start page's course map, 1.1's Markdown table, 2.2's code
   view): body cells left-aligned, read from the computed style. The 2.2 code view is right-aligned today
   (issue 13), so its check is an expected failure until that lesson is rewritten.

No JupyterLab news or update notification appears in any of them.
"""

from __future__ import annotations

import re
import shutil

import pytest
from lab_page import LabPage

from effitrain_helpers.teach.editions import build_editions, default_source

NOTEBOOKS = default_source()
RUN_ALL_SECONDS = 600  # generous: a busy 2-core machine runs lesson 2.2 several times slower than a quiet one


def copy_notebooks(lab, folder: str, names: list[str], source=NOTEBOOKS) -> str:
    """Copy ``names`` (and the edition file, if any) from ``source`` into ``folder`` of the server's root."""
    target = lab.root / folder
    target.mkdir()
    for name in names + [n.name for n in source.glob("effitrain-edition.json")]:
        shutil.copy(source / name, target / name)
    return folder


def stream(cells: list[dict], name: str) -> list[tuple[int, str]]:
    """(cell index, text) of every ``name`` stream output (stdout or stderr)."""
    return [(c["index"], o["text"]) for c in cells for o in c["outputs"]
            if o["output_type"] == "stream" and o["name"] == name]


def assert_tables_left_aligned(page, notebook: str) -> None:
    """Scenario 4 on the page shown: every body cell of every rendered table is left-aligned."""
    assert page.table_count() > 0, f"{notebook}: no table rendered"
    wrong = page.table_cells_not_left()
    assert not wrong, (f"{notebook}: {len(wrong)} table body cells not left-aligned, in cells "
                       f"{sorted({w['cell'] for w in wrong})}; e.g. {wrong[:2]}")


def assert_no_news(page) -> None:
    assert not page.news_notifications(), (
        "JupyterLab shows a news/update notification; `make env` installs tools/jupyterlab-overrides.json "
        "to turn them off")


@pytest.fixture(scope="module")
def lesson_2_2(lab, browser):
    """Lesson 2.2 run once in its own page, shared by scenario 3 and scenario 4 (its code view)."""
    page = LabPage.new(browser, lab)
    folder = copy_notebooks(lab, "lesson-2-2", ["2_2_train_with_accelerator.ipynb"])
    try:
        page.open_notebook(f"{folder}/2_2_train_with_accelerator.ipynb")
        cells = page.run_all(RUN_ALL_SECONDS)
    except Exception as err:
        raise AssertionError(f"{err}\n{page.save_failure('lesson_2_2')}") from err
    yield page, cells
    page.close()


def test_start_page_runs_clean(page, lab):
    folder = copy_notebooks(lab, "start", ["00_start_here.ipynb"])
    page.open_notebook(f"{folder}/00_start_here.ipynb")
    cells = page.run_all(RUN_ALL_SECONDS)

    assert not stream(cells, "stderr"), f"the start page writes to stderr: {stream(cells, 'stderr')}"
    course_map = page.page.locator(".jp-OutputArea-output table").filter(has_text="1.1").first
    rows = course_map.locator("tbody tr").all_inner_texts()
    lessons = [row.split()[0] for row in rows if re.match(r"\d\.\d\s", row)]
    assert lessons[:1] == ["1.1"] and lessons[-1:] == ["4.3"] and len(lessons) == 12, rows
    summary = "\n".join(text for _, text in stream(cells, "stdout"))
    assert re.search(r"CPU\s*:.*cores", summary) and "GPU" in summary, summary
    assert_tables_left_aligned(page, "00_start_here.ipynb")
    assert_no_news(page)


def test_lesson_1_1_as_a_student(page, lab, tmp_path):
    build_editions(tmp_path / "editions", solutions=False)
    student = tmp_path / "editions" / "student"
    folder = copy_notebooks(lab, "student", ["1_1_prepare_models.ipynb"], source=student)
    page.open_notebook(f"{folder}/1_1_prepare_models.ipynb")
    cells = page.run_all(RUN_ALL_SECONDS)

    exercises = [c for c in cells if c["type"] == "code" and re.search(r"\bq\d\.check\(", c["source"])]
    assert len(exercises) == 4 and all("Not attempted" in c["text"] for c in exercises), \
        [(c["index"], c["text"]) for c in exercises]
    assert [c for c in cells if c["type"] == "code"][-1]["executionCount"], "Run All reached the last cell"

    q1 = next(c for c in exercises if "q1.check(" in c["source"])
    check_line = next(line for line in q1["source"].splitlines() if "q1.check(" in line)
    page.type_into_cell(q1["index"], f"head_width = model.config.num_attention_heads\n{check_line}")
    assert re.search(r"Incorrect.*number of heads", page.output_text(q1["index"])), page.output_text(q1["index"])
    page.type_into_cell(q1["index"], "head_width = model.config.hidden_size // model.config.num_attention_heads"
                                     f"\n{check_line}")
    assert "Correct" in page.output_text(q1["index"]) and "Incorrect" not in page.output_text(q1["index"])
    hint = page.add_cell_below(q1["index"], "q1.hint()")
    assert re.match(r"Hint 1 of \d+: \S", page.output_text(hint)), page.output_text(hint)

    widget_cell = next(c for c in cells if c["source"].strip() == "benchmark_widget()")
    widget = page.cell_locator(widget_cell["index"]).locator(".jp-OutputArea").first
    run_button = widget.locator("button", has_text="Run")
    run_button.wait_for(state="visible")
    assert not re.search(r"Loading widget|Error displaying widget", widget.inner_text())
    before = widget.inner_text()
    # the learner picks the two smallest sizes (on a busy machine the default three take minutes)
    widget.locator(".widget-select-multiple select").first.select_option(["128", "256"])
    run_button.click()
    done = "() => { const out = document.querySelectorAll('.jp-Notebook .jp-Cell')[%d]" \
           "?.querySelector('.widget-output'); return out && (out.querySelector('img')" \
           " || /Error|Traceback|Cannot run/.test(out.innerText)); }" % widget_cell["index"]
    page.page.wait_for_function(done, timeout=300_000, polling=1000)  # the figure comes after the table
    table = widget.inner_text()
    assert not re.search(r"Error|Traceback|Cannot run", table), table
    assert widget.locator("img").count() == 1 and table != before, table
    assert re.search(r"GFLOP/s\s+cpu\s+float32\s+128\s", table), table

    figures = sum("image/png" in o.get("data", {}) for c in cells for o in c["outputs"])
    assert figures >= 2 and page.image_count() == figures + 1, "every figure (cells' and widget's) shown"
    assert not page.broken_images()
    assert_tables_left_aligned(page, "1_1_prepare_models.ipynb (student)")
    assert_no_news(page)


def test_lesson_2_2_every_rank_reports(lesson_2_2):
    page, cells = lesson_2_2
    stdout = "\n".join(text for _, text in stream(cells, "stdout"))
    n = int(re.search(r"(\d+) processes later", stdout).group(1))
    ranks = re.findall(rf"rank (\d+) of {n}: accuracy", stdout)
    assert sorted(map(int, ranks)) == list(range(n)), stdout
    verdict = [c for c in cells if "All self-checks passed" in c["text"]]
    assert verdict and verdict[-1]["source"].lstrip().startswith("assert"), [c["text"] for c in cells][-5:]
    assert_no_news(page)


@pytest.mark.xfail(strict=True, reason="issue 13: 2.2 code view")
def test_code_view_left_aligned(lesson_2_2):
    page, _ = lesson_2_2
    assert_tables_left_aligned(page, "2_2_train_with_accelerator.ipynb")
