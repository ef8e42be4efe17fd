"""Every exercise is judged on right answers written another way and on named mistakes (issue 41).

A test that shows a right solution written differently from the exercise's ``solution()`` (another API spelling,
``ReduceOp.AVG`` against a sum then a division, a subclass of ``torch.optim.Optimizer`` against a wrapper, a loop
against a comprehension, a number written another way) accepted as Correct carries
``@pytest.mark.judges("6.3 q2", "right")``; one that shows a likely mistake refused with a message that names it
(the test asserts on what the message says) carries ``@pytest.mark.judges("6.3 q2", "mistake")``. A parametrized
test counts once per case. This census collects the whole suite (``--judged-census``, tests/conftest.py) and asks
:data:`AT_LEAST` of each kind for every exercise of every lesson (``lesson_exercises()``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from effitrain_helpers.teach.lessons import lesson_exercises

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("right", "mistake")
AT_LEAST = 2  # right answers written another way, and named mistakes, per exercise


def census_problems(counts: dict[str, dict[str, int]], exercises: set[str]) -> list[str]:
    """What the census finds short: an exercise judged fewer than AT_LEAST times of a kind, and a mark that names
    no exercise or no kind."""
    problems = [f"a judges mark names {name!r}, which is no exercise (write it as '6.3 q2')"
                for name in sorted(set(counts) - exercises)]
    problems += [f"a judges mark for {name} has kind {kind!r}; allowed: {', '.join(KINDS)}"
                 for name, kinds in sorted(counts.items()) for kind in kinds if kind not in KINDS]
    problems += [f"{name}: {counts.get(name, {}).get(kind, 0)} test(s) of kind {kind!r}, fewer than {AT_LEAST}"
                 for name in sorted(exercises) for kind in KINDS if counts.get(name, {}).get(kind, 0) < AT_LEAST]
    return problems


def test_the_census_finds_what_is_short():
    exercises = {"6.3 q1", "6.3 q2"}
    counts = {"6.3 q1": {"right": 2, "mistake": 2}, "6.3 q2": {"right": 1, "mistake": 3}, "6.3 q9": {"right": 2},
              }
    found = census_problems(counts, exercises)
    assert any("'6.3 q9', which is no exercise" in p for p in found)
    assert "6.3 q2: 1 test(s) of kind 'right', fewer than 2" in found
    assert not any(p.startswith("6.3 q1:") for p in found)
    assert census_problems({"6.3 q1": {"right": 2, "mistake": 2, "wrong": 1}}, {"6.3 q1"}) == [
        "a judges mark for 6.3 q1 has kind 'wrong'; allowed: right, mistake"]


@pytest.mark.slow
def test_every_exercise_is_judged_on_two_right_forms_and_two_named_mistakes(tmp_path):
    out = tmp_path / "census.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests",
                           "--judged-census", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    exercises = {f"{lesson} {name}" for lesson, found in lesson_exercises().items() for name in found}
    problems = census_problems(json.loads(out.read_text()), exercises)
    assert problems == [], "\n".join(problems)
