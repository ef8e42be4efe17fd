"""A generated class for the grading tests: a tiny solved lesson (two exercises, the second using the first's
answer, and a hidden check of the second on a model of its own), its student edition, and submissions written from
it (honest, blank, forged, mixed up)."""

from pathlib import Path

import nbformat

from effitrain_helpers.teach.editions import make_edition

LESSON = "9_1_tiny.ipynb"
SETUP = '''from effitrain_helpers.teach.checks.start_here import q1
from effitrain_helpers.teach.checks.lesson_1_1 import q2


class Weights:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n


class TinyModel:
    def parameters(self):
        return [Weights(1_000_000), Weights(1_000)]


model = TinyModel()'''
Q1 = "matrix_bytes = 1000 * 1000 * 4"
Q2 = "per_number = matrix_bytes // 1_000_000\ntrain_mib = sum(p.numel() for p in model.parameters()) * per_number * 4 / 2**20"
CHECK1, CHECK2 = "q1.check(matrix_bytes)", "q2.check(train_mib, model)"
HIDDEN = f"""class Bigger(TinyModel):
    def parameters(self):
        return [Weights(3_000_000)]


model = Bigger()
# ANSWER
{CHECK2}"""  # q2 on a model the student never sees: an answer that fits the visible check only fails here
FITS_VISIBLE = "per_number = 4\ntrain_mib = 1_001_000 * 16 / 2**20"  # right for the visible model only


def write_lesson(folder: Path):
    """The solved lesson in ``folder`` (the instructor's source); returns its student edition (no solutions)."""
    cells = [nbformat.v4.new_markdown_cell("# Lesson 9.1 · tiny"), nbformat.v4.new_code_cell(SETUP),
             nbformat.v4.new_code_cell(f"# BEGIN SOLUTION\n{Q1}\n# END SOLUTION\n{CHECK1}"),
             nbformat.v4.new_code_cell(f"# BEGIN SOLUTION\n{Q2}\n# END SOLUTION\n{CHECK2}"),
             nbformat.v4.new_code_cell(HIDDEN, metadata={"tags": ["hidden-check"]}),
             nbformat.v4.new_code_cell("assert model.parameters()[0].numel() == 1_000_000  # the set-up's model"),
             nbformat.v4.new_markdown_cell("Done.")]
    for cell, cell_id in zip(cells, ["title", "setup", "ex1", "ex2", "hidden", "after", "end"]):
        cell.id = cell_id
    source = nbformat.v4.new_notebook(cells=cells)
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(source, folder / LESSON)
    return make_edition(source, LESSON, "student", solutions=False)


def submit(edition, path: Path, q1: str | None = None, q2: str | None = None, setup: str = "",
           check1: str = CHECK1, check2: str = CHECK2) -> Path:
    """A student's copy of ``edition`` at ``path``: ``q1``/``q2`` in place of the blanks (None: left blank),
    ``setup`` added to the set-up cell, the check calls as given."""
    nb = nbformat.from_dict(nbformat.reads(nbformat.writes(edition), as_version=4))
    for cell in nb.cells:
        if cell.get("id") == "ex1" and q1 is not None:
            cell.source = f"{q1}\n{check1}"
        elif cell.get("id") == "ex2" and q2 is not None:
            cell.source = f"{q2}\n{check2}"
        elif cell.get("id") == "setup":
            cell.source += setup
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _needs_sandbox():
    import os

    import pytest

    from effitrain_helpers.teach import sandbox

    why = sandbox.unavailable()  # under CI (.ci/run installs bubblewrap) a missing sandbox fails instead
    return pytest.mark.skipif(why is not None and not os.environ.get("CI"), reason=f"no sandbox here: {why}")


needs_sandbox = _needs_sandbox()
