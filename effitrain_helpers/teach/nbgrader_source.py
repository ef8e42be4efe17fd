"""What does nbgrader get? An nbgrader course folder whose source assignments are the workbook's solved lessons.

``effitrain editions --for nbgrader --out DIR`` (:func:`build_nbgrader`) writes ``DIR/nbgrader_config.py`` and, per
lesson, one nbgrader assignment named after its notebook: ``DIR/source/1_1_prepare_models/1_1_prepare_models.ipynb``.
nbgrader's own commands then run in ``DIR`` (``nbgrader generate_assignment``, ``autograde``, ``export``). In each
notebook (:func:`nbgrader_notebook`):

- every cell of the lesson is a *read-only* cell (nbgrader's ``locked``, restored from the source by ``autograde``,
  as ``effitrain grade`` restores them); instructor-only cells and hidden checks are left out;
- each exercise cell becomes two: an *autograded answer* cell (``solution``) with the cell's lines before its check
  call, whose ``# BEGIN SOLUTION`` .. ``# END SOLUTION`` regions nbgrader replaces with its stub (``# YOUR CODE
  HERE`` / ``raise NotImplementedError()``) in the release (``# STARTER:`` lines dropped), and an *autograder tests*
  cell (``grade``, read-only) worth the points of the exercises it checks (``Exercise.points``), in which each
  ``qN.check(...)`` is ``qN.require(...)``: the same verdict shown, then an AssertionError with the checker's
  message unless Correct, which nbgrader counts as no points.

What nbgrader does not do as ``effitrain grade`` does (README, "Classroom"): a wrong answer is not replaced by the
lesson's reference for the exercises after it, so one mistake can cost several; answers are not reviewed; nothing
runs in a sandbox; the hidden checks are not there (nbgrader's own ``### BEGIN HIDDEN TESTS`` regions can be added
to the test cells by hand).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from effitrain_helpers.core import files
from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.editions import (_STARTER, _is_instructor_only, check_all, check_apart, default_source,
                                              exercise_cells, source_notebooks)
from effitrain_helpers.teach.reports import points_of

EDITION = "nbgrader"  # the notebooks' metadata: what this build wrote (and --force may replace)
CONFIG = "nbgrader_config.py"
_CHECK = re.compile(r"^(q\d+)\.check\(", re.M)  # a top-level check call
CONFIG_TEXT = '''# nbgrader's settings for this course folder, written by `effitrain editions --for nbgrader`.
c = get_config()  # noqa: F821 - nbgrader defines it
c.CourseDirectory.course_id = "effitrain"
c.Execute.timeout = 600  # seconds per cell: a lesson's training cells take longer than nbgrader's default 30
'''


def _id(text: str) -> str:
    """An nbgrader ``grade_id`` (letters, digits, ``_``, ``-``) made from a cell id."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", text) or "cell"


def _meta(grade_id: str, *, solution=False, grade=False, locked=True, points=None) -> dict:
    meta = {"grade": grade, "solution": solution, "locked": locked, "grade_id": grade_id, "schema_version": 3}
    if points is not None:
        meta["points"] = points
    return meta


def nbgrader_notebook(nb, name: str):
    """``nb`` (a solved lesson named ``name``) as an nbgrader source notebook (module docstring)."""
    import nbformat

    from effitrain_helpers.teach.answers import exercise_lessons

    check_all({name: nb})  # the markers and hidden checks, one MarkerError naming every problem
    marked, lessons = dict(exercise_cells(nb, name)), exercise_lessons(nb)
    out = copy.deepcopy(nb)
    cells = []
    for i, cell in enumerate(nb.cells):
        if _is_instructor_only(cell):
            continue
        here = copy.deepcopy(cell)
        if here.cell_type == "code":
            here.outputs, here.execution_count = [], None
        here.metadata.pop("execution", None)
        ident = _id(cell.get("id") or f"cell-{i}")
        if i not in marked:
            here.metadata["nbgrader"] = _meta(f"cell-{ident}")
            cells.append(here)
            continue
        lines = cell.source.splitlines()
        end = marked[i][-1].end + 1
        split = end + next((k for k, line in enumerate(lines[end:]) if _CHECK.match(line)), len(lines) - end)
        here.source = "\n".join(line for line in lines[:split] if not _STARTER.match(line))
        here.metadata["nbgrader"] = _meta(f"{ident}-answer", solution=True, locked=False)
        names = list(dict.fromkeys(_CHECK.findall("\n".join(lines[split:]))))
        points = sum(points_of(lessons.get(n, ""), n) for n in names)
        test = nbformat.v4.new_code_cell(_CHECK.sub(r"\1.require(", "\n".join(lines[split:])), metadata={
            "nbgrader": _meta(f"{ident}-test", grade=True, points=int(points) if points == int(points) else points)})
        test.id = f"{ident}-test"
        cells += [here, test]
    out.cells = cells
    out.metadata.pop("widgets", None)
    out.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    out.metadata["effitrain"] = {"edition": EDITION, "source": name}
    return out


def _written_by_build(path: Path) -> bool:
    try:
        meta = json.loads(files.read_bytes(path)).get("metadata", {}).get("effitrain", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(meta, dict) and meta.get("edition") == EDITION


def build_nbgrader(out: str | Path, source: str | Path | None = None, force: bool = False, lang: str = "en") -> dict:
    """Write the nbgrader course folder ``out`` (module docstring) from the solved notebooks in ``source`` (or, in
    language ``lang``, the translated ones); return a summary. Every notebook is checked before anything is
    written. An ``out`` that holds files is refused unless ``force``, which replaces only the notebooks and the
    a build wrote (nbgrader's own folders, its database, ``nbgrader_config.py`` once written and your files are
    kept)."""
    import nbformat

    out = Path(out).expanduser()
    check_apart(out, default_source() if source is None else Path(source).expanduser())
    if out.exists() and not out.is_dir():
        raise ValueError(tr("--out {out!r} is a file, not a folder. Fix: pass a folder path.", out=str(out)))
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ValueError(tr("--out folder {out!r} exists and is not empty. Fix: choose a new or empty folder, or add "
                            "--force to write the nbgrader source there: --force replaces only the notebooks an "
                            "earlier build wrote under source/; every other file is kept.", out=str(out)))
    notebooks = source_notebooks(source, lang)
    built = {name: nbgrader_notebook(nb, name) for name, nb in notebooks.items()}  # all checked first
    writes = []
    for name, nb in built.items():
        path = out / "source" / Path(name).stem / name
        if path.exists() and not _written_by_build(path):
            raise ValueError(tr("{path} exists and was not written by this command; it is left as it is. Fix: move "
                                "it away, or choose another --out.", path=str(path)))
        writes.append((path, nbformat.writes(nb) + "\n"))
    for path, text in writes:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomically(path, text)
    config = out / CONFIG
    if not config.exists():  # one you edited is yours
        files.write_atomically(config, CONFIG_TEXT)
    tests = [c for nb in built.values() for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    return {"out": str(out), "assignments": sorted(Path(n).stem for n in built), "lang": lang,
            "test_cells": len(tests), "points": sum(c.metadata["nbgrader"]["points"] for c in tests)}
