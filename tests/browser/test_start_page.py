"""Scenario 1: the start page, Run All: no error, nothing on stderr, the course map and the hardware
summary shown; its tables left-aligned (scenario 4); no JupyterLab news pop-up."""

from __future__ import annotations

import re

from effitrain_helpers.teach.lessons import SYLLABUS
from lab_page import RUN_ALL_SECONDS, assert_no_news, assert_tables_left_aligned, copy_notebooks, stream


def test_start_page_runs_clean(page, lab):
    folder = copy_notebooks(lab, "start", ["00_start_here.ipynb"])
    page.open_notebook(f"{folder}/00_start_here.ipynb")
    cells = page.run_all(RUN_ALL_SECONDS)

    assert not stream(cells, "stderr"), f"the start page writes to stderr: {stream(cells, 'stderr')}"
    course_map = page.page.locator(".jp-OutputArea-output table").filter(has_text="1.1").first
    rows = course_map.locator("tbody tr").all_inner_texts()
    lessons = [row.split()[0] for row in rows if re.match(r"\d\.\d\s", row)]
    assert lessons == [number for number, _ in SYLLABUS], rows  # every lesson of the syllabus, coming ones too
    summary = "\n".join(text for _, text in stream(cells, "stdout"))
    assert re.search(r"CPU\s*:.*cores", summary) and "GPU" in summary, summary
    assert_tables_left_aligned(page, "00_start_here.ipynb")
    assert_no_news(page)
