"""Every notebook cell that nbval collects is ``slow``: ``pytest -m "not slow"`` runs no notebook (tests/conftest.py
refuses a process started by a test not marked slow). The tests run in English whatever the learner's
``EFFITRAIN_LANG``: the English notebooks' stored verdicts are English, and a translated notebook sets its own
language (README, Contributing, Translations).

While nbval runs a pt-BR lesson listed in ``tests/screen_language.SCREENED``, each cell's outputs are scanned for
the workbook's English labels and lists of English decimals, and a cell that shows any fails, naming them (issue 29: no English on a Brazilian
learner's screen, checked in every run without executing the lessons a second time)."""

import os
import sys
from pathlib import Path

import pytest

os.environ["EFFITRAIN_LANG"] = "en"
ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))  # screen_language, the scan's one home

import screen_language  # noqa: E402


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    outputs = getattr(item, "test_outputs", None)  # what nbval's IPyNbCell.runtest received from the kernel
    if outputs and screen_language.screened(item.path):
        words = screen_language.english_in_outputs(outputs, screen_language.code_words(item.path))
        if words:
            raise AssertionError(f"English on a pt-BR screen: {item.path.name} cell {getattr(item, 'cell_num', '?')} "
                                 f"shows {words}; translate it through the language layer (core/language.py)")
    return result
