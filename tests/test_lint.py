"""The linter's rules (pyproject.toml, [tool.ruff]) hold for the package, the tests, the tools and the benchmarks."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.quick_process
def test_ruff_finds_nothing():
    from ruff.__main__ import find_ruff_bin

    paths = ["effitrain_helpers", "tests", "tools", "benchmarks", "conftest.py"]
    out = subprocess.run([find_ruff_bin(), "check", "--no-cache", "--output-format", "concise", *paths], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
