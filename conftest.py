"""Every notebook cell that nbval collects is ``slow``: ``pytest -m "not slow"`` runs no notebook (tests/conftest.py
refuses a process started by a test not marked slow). The tests run in English whatever the learner's
``EFFITRAIN_LANG``: the English notebooks' stored verdicts are English, and a translated notebook sets its own
language (README, Contributing, Translations)."""

import os

import pytest

os.environ["EFFITRAIN_LANG"] = "en"


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
