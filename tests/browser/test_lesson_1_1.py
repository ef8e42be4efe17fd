"""Scenario 2: lesson 1.1 as a graded class's student gets it (and scenario 4 on its tables)."""

from __future__ import annotations

import re

import pytest
from lab_page import assert_no_news, assert_tables_left_aligned, copy_notebooks, run_in_page

from effitrain_helpers.teach.editions import build_editions


@pytest.fixture(scope="module")
def lesson_1_1(lab, browser, tmp_path_factory):
    """Lesson 1.1's student edition of a graded class (no solutions), Run All once in its own page."""
    editions = tmp_path_factory.mktemp("editions")
    build_editions(editions, solutions=False, force=True)
    folder = copy_notebooks(lab, "student", ["1_1_prepare_models.ipynb"], source=editions / "student")
    yield from run_in_page(lab, browser, f"{folder}/1_1_prepare_models.ipynb")


def test_lesson_1_1_as_a_student(lesson_1_1):
    page, cells = lesson_1_1
    exercises = [c for c in cells if c["type"] == "code" and re.search(r"\bq\d\.check\(", c["source"])]
    assert len(exercises) == 4 and all("Not attempted" in c["text"] for c in exercises), \
        [(c["index"], c["text"]) for c in exercises]
    assert [c for c in cells if c["type"] == "code"][-1]["executionCount"], "Run All reached the last cell"

    q1 = next(c for c in exercises if "q1.check(" in c["source"])
    check_line = next(line for line in q1["source"].splitlines() if "q1.check(" in line)
    answer = ("def load_and_prepare(path):\n"
              "    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)\n"
              "    tokenizer = AutoTokenizer.from_pretrained(path)\n"
              "    accelerator = Accelerator()\n"
              "    {prepare}\n"
              "    return accelerator, model, tokenizer\n\n" + check_line)
    # a classic slip: the Accelerator made, the model never prepared
    page.type_into_cell(q1["index"], answer.format(prepare="pass"))
    assert re.search(r"Incorrect.*not returned by accelerator.prepare", page.output_text(q1["index"])), \
        page.output_text(q1["index"])
    page.type_into_cell(q1["index"], answer.format(prepare="model = accelerator.prepare(model)"))
    assert "Correct" in page.output_text(q1["index"]) and "Incorrect" not in page.output_text(q1["index"])
    hint = page.add_cell_below(q1["index"], "q1.hint()")
    assert re.match(r"Hint 1 of \d+: \S", page.output_text(hint)), page.output_text(hint)

    figures = sum("image/png" in o.get("data", {}) for c in cells for o in c["outputs"])
    assert figures >= 2 and page.image_count() == figures, "every figure of the lesson shown as an image"
    assert not page.broken_images()
    assert_tables_left_aligned(page, "1_1_prepare_models.ipynb (student)")
    assert_no_news(page)


# make test-all only: while it is a known failure (xfail) it cannot fail a CI run, and it costs a minute there
@pytest.mark.exhaustive
@pytest.mark.xfail(strict=False, reason="found by this test: after Run, the widget's plot raises a matplotlib "
                   "mathtext ParseException in JupyterLab (not under nbclient); remove once fixed")
def test_lesson_1_1_benchmark_widget(lesson_1_1):
    """The widget renders as a widget, and its Run button draws a new table and figure."""
    page, cells = lesson_1_1
    index = next(c["index"] for c in cells if c["source"].strip() == "benchmark_widget()")
    widget = page.cell_locator(index).locator(".jp-OutputArea").first
    run_button = widget.locator("button", has_text="Run")
    run_button.wait_for(state="visible")
    assert not re.search(r"Loading widget|Error displaying widget", widget.inner_text())
    before = widget.inner_text()
    # the learner picks the two smallest sizes (on a busy machine the default three take minutes)
    widget.locator(".widget-select-multiple select").first.select_option(["128", "256"])
    run_button.click()
    output = widget.locator(".widget-output")
    output.locator("img").or_(output.get_by_text(re.compile("Error|Traceback|Cannot run"))).first.wait_for(
        timeout=300_000)  # the figure comes after the table
    table = widget.inner_text()
    assert not re.search(r"Error|Traceback|Cannot run", table), table
    assert table != before and re.search(r"GFLOP/s\s+cpu\s+float32\s+128\s", table), table
    assert output.locator("img").count() == 1 and not page.broken_images()
