"""What a learner gets from an exercise besides its check: hints that climb without giving a solution line away,
and a solution written once (the notebook's solution region, pinned equal to the checker's ``solution_code``)."""

from __future__ import annotations

import importlib
import re

import nbformat
import pytest

from effitrain_helpers.teach import editions
from effitrain_helpers.teach.exercises import Exercise

NOTEBOOKS = sorted(editions.default_source().glob("*.ipynb"))
_CHECKS_IMPORT = re.compile(r"from (effitrain_helpers\.teach\.checks\.\w+) import")
_QNAME = re.compile(r"\b(q\d+)\.check\(")
MIN_HINTS = 3


def normalise(code: str) -> list[str]:
    """Code lines without blank lines, comment-only lines or trailing spaces: what must match."""
    return [line.rstrip() for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def notebook_exercises(path):
    """``(qN, Exercise, solved code, secret lines)`` of every marked exercise cell in the notebook at ``path``.

    The solved code is the cell without its marker and ``# STARTER:`` lines; the secret lines are the solution
    lines the student edition does not show (the starter's own lines are no secret)."""
    nb = nbformat.read(path, as_version=4)
    found = _CHECKS_IMPORT.search("\n".join(c.source for c in nb.cells if c.cell_type == "code"))
    if not found:
        return []
    module = importlib.import_module(found.group(1))
    out = []
    for index, regions in editions.exercise_cells(nb, path.name):
        source = nb.cells[index].source
        qname = _QNAME.search(source).group(1)
        marker_lines = {r.begin for r in regions} | {r.end for r in regions}
        solved = "\n".join(line for i, line in enumerate(source.splitlines())
                           if i not in marker_lines and not line.lstrip().startswith(editions.STARTER))
        starter = {s.strip() for r in regions for s in r.starter}
        secret = [line.strip() for r in regions for line in normalise("\n".join(r.solution))
                  if line.strip() not in starter]
        out.append((qname, getattr(module, qname), solved, secret))
    return out


CASES = [(path.stem, q, ex, solved, secret) for path in NOTEBOOKS
         for q, ex, solved, secret in notebook_exercises(path)]
IDS = [f"{stem}:{q}" for stem, q, *_ in CASES]


def leaked_lines(hints: list[str], secret: list[str]) -> list[str]:
    """The secret solution lines that some hint contains whole (spaces collapsed)."""
    squash = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731
    texts = [squash(h) for h in hints]
    return [line for line in secret if len(squash(line)) >= 6 and any(squash(line) in t for t in texts)]


def test_every_lesson_has_exercises():
    lessons = {stem for stem, *_ in CASES}
    assert lessons == {p.stem for p in NOTEBOOKS}, f"notebooks without marked exercises: {set(p.stem for p in NOTEBOOKS) - lessons}"


@pytest.mark.parametrize("stem, q, exercise, solved, secret", CASES, ids=IDS)
def test_solution_is_written_once(stem, q, exercise, solved, secret):
    """The checker's solution() shows exactly the notebook's solved cell (comments and blank lines aside)."""
    assert isinstance(exercise, Exercise)
    assert normalise(exercise.solution_code) == normalise(solved), (
        f"{stem} {q}: solution_code differs from the notebook's solved cell; make one equal to the other")


@pytest.mark.parametrize("stem, q, exercise, solved, secret", CASES, ids=IDS)
def test_hints_climb_and_never_give_a_solution_line(stem, q, exercise, solved, secret):
    assert len(exercise.hints) >= MIN_HINTS, (
        f"{stem} {q}: {len(exercise.hints)} hint(s); give {MIN_HINTS}: the idea, then the API and where it is "
        "documented, then partial code with blanks")
    leaks = leaked_lines(exercise.hints, secret)
    assert not leaks, f"{stem} {q}: hints contain whole solution lines: {leaks}"


def test_the_leak_finder_finds_a_leak():
    secret = ["model = AutoModel.from_pretrained(name)", ")"]
    assert leaked_lines(["Try   model = AutoModel.from_pretrained(name) here"], secret) == [secret[0]]
    assert leaked_lines(["model = AutoModel.from_pretrained(____)"], secret) == []
