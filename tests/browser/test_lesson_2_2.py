"""Scenario 3: lesson 2.2 in several processes, and scenario 4 on the tables it renders."""

from __future__ import annotations

import re

import pytest
from lab_page import assert_no_news, assert_tables_left_aligned, copy_notebooks, run_in_page, stream


@pytest.fixture(scope="module")
def lesson_2_2(lab, browser):
    """Lesson 2.2, Run All once: shared by scenario 3 and scenario 4 (its tables)."""
    folder = copy_notebooks(lab, "lesson-2-2", ["2_2_train_with_accelerator.ipynb"])
    yield from run_in_page(lab, browser, f"{folder}/2_2_train_with_accelerator.ipynb")


def test_lesson_2_2_every_rank_reports(lesson_2_2):
    page, cells = lesson_2_2
    stdout = "\n".join(text for _, text in stream(cells, "stdout"))
    # every rank's own line, as printed by the script that torchrun and `accelerate launch --multi_gpu` ran
    for launcher in ("$ torchrun", "$ accelerate launch --multi_gpu"):
        block = stdout[stdout.index(launcher):].split("\n$ ")[0]
        ranks = re.findall(r"rank (\d+) of world size 2: trained on", block)
        assert sorted(map(int, ranks)) == [0, 1], block
    verdict = [c for c in cells if "All self-checks passed" in c["text"]]
    assert verdict and verdict[-1]["source"].lstrip().startswith("assert"), [c["text"] for c in cells][-5:]
    assert_no_news(page)


def test_tables_left_aligned(lesson_2_2):
    page, _ = lesson_2_2
    assert_tables_left_aligned(page, "2_2_train_with_accelerator.ipynb")
