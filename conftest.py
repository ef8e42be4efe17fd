"""Every notebook cell that nbval collects is ``slow``: ``pytest -m "not slow"`` runs no notebook (tests/conftest.py
refuses a process started by a test not marked slow)."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
