"""Which notebooks do students and instructors get? The classroom editions, built from the solved source.

The notebooks in ``notebooks/`` are the solved source. ``build_editions(out)`` (``effitrain editions --out
DIR``, ``make editions``) writes two folders of notebooks, outputs stripped:

- ``DIR/student/``: every solution region replaced by its starter code (blanks ``____``), cells tagged
  ``instructor-only`` (instructor notes, hidden self-tests) removed. An untouched exercise's ``check()``
  reports *Not attempted*, so restart-and-run-all runs to the end. ``effitrain-edition.json`` there says
  whether ``q1.solution()`` works (``--no-solutions`` turns it off for a graded class; hints always work);
- ``DIR/instructor/``: the solutions and the instructor notes, marker comments removed.

Neither holds a hidden check (a cell tagged ``hidden-check``: :func:`hidden_checks`), which only ``effitrain
grade`` runs.

Marking an exercise cell in the source (README, "Contributing"): the solution lines go between two comment
lines, ``# BEGIN SOLUTION`` and ``# END SOLUTION`` (indented like the code they enclose), and the cell's
``qN.check(...)`` call comes after them. The student gets, instead of the region, the region's ``# STARTER:``
lines (the text after the colon, at the marker's indentation) or, when it has none, a starter made from the
solution: ``return ____`` when the region returns, else ``name = ____`` for every name it assigns
(``a, b = ____, ____`` for a pair) and ``def f(args): return ____`` for a function it defines.

The build refuses, naming notebook, cell and problem: a ``qN.check(`` cell with no markers, unbalanced or
nested markers, a region with no check call after it, an empty region, a starter without ``____``, and a
``# STARTER:`` line outside a region. Used by the CLI and ``tests/test_editions.py``.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from effitrain_helpers.core import files
from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import EDITION_FILE  # written here, read by exercises.solutions_enabled

BEGIN, END, STARTER = "# BEGIN SOLUTION", "# END SOLUTION", "# STARTER:"
INSTRUCTOR_TAG = "instructor-only"
HIDDEN_TAG = "hidden-check"  # a check only effitrain grade runs: in no edition (see hidden_checks)
ANSWER = "# ANSWER"  # in a hidden check: where the grader runs the student's answer again
EDITIONS = ("student", "instructor")
_BEGIN = re.compile(r"^(\s*)#\s*BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*#\s*END SOLUTION\s*$")
_STARTER = re.compile(r"^\s*#\s*STARTER:(.*)$")
_ANSWER = re.compile(r"^\s*#\s*ANSWER\s*$")
_CHECKED = re.compile(r"^(q\d+)\.check\(", re.M)  # the exercise a top-level check call checks
CHECK_CALL = re.compile(r"\bq\d+\.check\(")
BLANK_COMMENT = msg("the blank the exercises start with")
BLANK_IMPORT = "from effitrain_helpers.teach.exercises import ____  # " + BLANK_COMMENT  # in English
_IMPORTS_BLANK = re.compile(r"^\s*from\s+effitrain_helpers\.teach\.exercises\s+import\s+.*\b____\b", re.M)
_IMPORTS_CHECKS = re.compile(r"^\s*from\s+effitrain_helpers\.teach\.checks\.\w+\s+import\b", re.M)


class MarkerError(ValueError):
    """A notebook's exercise markers are wrong: the message names the notebook, the cell and the problem."""


@dataclass
class Region:
    """One solution region of a cell: lines ``begin``..``end`` (the marker lines, 0-based)."""

    begin: int
    end: int
    indent: str
    solution: list[str]  # the lines between the markers, minus # STARTER: lines
    starter: list[str]  # what the student edition gets instead, indented

    @property
    def solution_code(self) -> str:
        return "\n".join(self.solution)


def default_source(lang: str = "en") -> Path:
    """The solved notebooks of this checkout: ``notebooks/`` next to the package, for a translation
    ``notebooks/<lang>/`` (built by ``tools/translations.py build``; see :mod:`effitrain_helpers.teach.translations`)."""
    folder = Path(__file__).resolve().parents[2] / "notebooks"
    return folder if lang == "en" else folder / lang


def _derive_starter(solution: list[str], indent: str, where: str) -> list[str]:
    """A starter made from the solution's own shape (see module docstring)."""
    code = textwrap.dedent("\n".join(solution))
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        raise MarkerError(f"{where}: the solution region is not valid Python on its own ({err.msg}, line "
                          f"{err.lineno}), so no starter can be made from it. Fix: add `{STARTER} ...` lines "
                          "with the starter code inside the region.") from None
    if any(isinstance(node, ast.Return) for node in tree.body):
        return [f"{indent}return ____"]
    lines: list[str] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Name):
                lines.append(f"{indent}{target.id} = ____")
            elif isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
                names = ", ".join(e.id for e in target.elts)
                lines.append(f"{indent}{names} = {', '.join(['____'] * len(target.elts))}")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines += [f"{indent}def {node.name}({ast.unparse(node.args)}):", f"{indent}    return ____"]
    lines = list(dict.fromkeys(lines))  # a name assigned twice gets one blank
    if not lines:
        raise MarkerError(f"{where}: the solution region assigns no name and returns nothing, so no starter can "
                          f"be made from it. Fix: add `{STARTER} ...` lines with the starter code inside the region.")
    return lines


def parse_cell(source: str, where: str) -> list[Region]:
    """The solution regions of one code cell's ``source``; :class:`MarkerError` when the markers are wrong.

    ``where`` (e.g. ``"notebooks/1_1_x.ipynb, cell 38"``) starts every error message.
    """
    lines = source.splitlines()
    regions: list[Region] = []
    open_at, indent, body, starters = None, "", [], []
    for i, line in enumerate(lines):
        if (m := _BEGIN.match(line)):
            if open_at is not None:
                raise MarkerError(f"{where}: unbalanced markers: '{BEGIN}' on line {i + 1} while the one on line "
                                  f"{open_at + 1} is still open. Fix: add '{END}' before it.")
            open_at, indent, body, starters = i, m.group(1), [], []
        elif _END.match(line):
            if open_at is None:
                raise MarkerError(f"{where}: unbalanced markers: '{END}' on line {i + 1} has no '{BEGIN}' before it.")
            if not any(b.strip() for b in body):
                raise MarkerError(f"{where}: the solution region on lines {open_at + 1}-{i + 1} is empty. "
                                  "Fix: put the solution lines between the markers.")
            starter = [indent + s for s in starters] or _derive_starter(body, indent, where)
            if not any("____" in s for s in starter):
                raise MarkerError(f"{where}: the starter of the region on lines {open_at + 1}-{i + 1} has no blank "
                                  "____, so check() could not report 'not attempted'. Fix: put ____ where the "
                                  "learner's answer goes.")
            regions.append(Region(open_at, i, indent, body, starter))
            open_at = None
        elif (m := _STARTER.match(line)):
            if open_at is None:
                raise MarkerError(f"{where}: '{STARTER}' on line {i + 1} is outside a solution region. "
                                  f"Fix: move it between '{BEGIN}' and '{END}'.")
            starters.append(m.group(1)[1:] if m.group(1).startswith(" ") else m.group(1))
        elif open_at is not None:
            body.append(line)
    if open_at is not None:
        raise MarkerError(f"{where}: unbalanced markers: '{BEGIN}' on line {open_at + 1} is never closed. "
                          f"Fix: add '{END}' after the solution lines.")
    if regions and not any(CHECK_CALL.search(line) for line in lines[regions[-1].end + 1:]):
        raise MarkerError(f"{where}: a marked exercise with no check call after its solution. Fix: end the cell "
                          "with `qN.check(...)` (the exercise's check).")
    if not regions and any(CHECK_CALL.search(line) for line in lines if not line.lstrip().startswith("#")):
        raise MarkerError(f"{where}: an exercise cell (it calls qN.check) whose solution is not marked, so the "
                          f"student edition would give the answer away. Fix: put the solution lines between "
                          f"'{BEGIN}' and '{END}' (README, Contributing).")
    return regions


def _is_instructor_only(cell) -> bool:
    """Whether ``cell`` is left out of the student edition (and the site): instructor notes, hidden self-tests and
    hidden checks."""
    tags = cell.get("metadata", {}).get("tags", [])
    return INSTRUCTOR_TAG in tags or HIDDEN_TAG in tags


def is_hidden_check(cell) -> bool:
    """Whether ``cell`` is a hidden check (:func:`hidden_checks`), which no edition contains."""
    return cell.cell_type == "code" and HIDDEN_TAG in cell.get("metadata", {}).get("tags", [])


@dataclass
class HiddenCheck:
    """A hidden check of the source: cell ``cell`` checks ``exercise`` (``"q2"``) on cases of its own, with the
    student's answer run again at line ``answer`` (0-based; None: the answer is not run again)."""

    cell: int
    exercise: str
    answer: int | None


def hidden_checks(nb, name: str) -> list[HiddenCheck]:
    """The hidden checks of a solved notebook: code cells tagged ``hidden-check``, which only ``effitrain grade``
    runs (neither edition contains them, so a student who fits the visible check cannot see them). Each calls
    ``qN.check(...)`` of one exercise marked in an earlier cell, on cases of its own; a line ``# ANSWER`` (at most
    one, not indented) is where the grader runs that exercise's answer again, after the lines that set up the new
    cases, e.g. ``model = Bigger()`` / ``# ANSWER`` / ``q2.check(train_mib, model)``. The exercise is Correct only
    when its visible check and every hidden check say so. :class:`MarkerError` naming the cell when one is wrong."""
    found, seen, errors = [], set(), []
    for i, cell in enumerate(nb.cells):
        where = f"{name}, cell {i}"
        if cell.cell_type == "code" and not _is_instructor_only(cell) and (names := _CHECKED.findall(cell.source)):
            seen.update(names)
        if not is_hidden_check(cell):
            continue
        names = set(_CHECKED.findall(cell.source))
        answers = [k for k, line in enumerate(cell.source.splitlines()) if _ANSWER.match(line)]
        problem = (
            "a hidden check calls no qN.check(...) at the start of a line" if not names else
            f"a hidden check checks {len(names)} exercises ({', '.join(sorted(names))}); one only" if len(names) > 1 else
            f"a hidden check of {min(names)} comes before the cell of that exercise" if min(names) not in seen else
            f"a hidden check has {len(answers)} '{ANSWER}' lines; one at most" if len(answers) > 1 else
            f"the '{ANSWER}' line of a hidden check is indented" if answers and
            cell.source.splitlines()[answers[0]][:1].isspace() else "")
        if problem:
            errors.append(f"{where}: {problem}. Fix: a hidden check (tag {HIDDEN_TAG}) follows its exercise's cell, "
                          f"sets up its own cases, has '{ANSWER}' where the answer runs again, and calls that one "
                          "exercise's check.")
        else:
            found.append(HiddenCheck(i, min(names), answers[0] if answers else None))
    if errors:
        raise MarkerError("\n".join(errors))
    return found


def exercise_cells(nb, name: str) -> list[tuple[int, list[Region]]]:
    """``(cell index, regions)`` of every marked exercise cell of ``nb`` (cells counted from 0, as nbformat
    does); raises one :class:`MarkerError` listing every problem found."""
    found, errors = [], []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or _is_instructor_only(cell):
            continue
        try:
            regions = parse_cell(cell.source, f"{name}, cell {i}")
        except MarkerError as err:
            errors.append(str(err))
            continue
        if regions:
            found.append((i, regions))
    if errors:  # every problem of the notebook at once
        raise MarkerError("\n".join(errors))
    return found


def _replace(source: str, regions: list[Region], keep_solution: bool) -> str:
    lines = source.splitlines()
    out: list[str] = []
    cursor = 0
    for r in regions:
        out += lines[cursor:r.begin]
        out += r.solution if keep_solution else r.starter
        cursor = r.end + 1
    out += lines[cursor:]
    return "\n".join(out)


def _import_blank(cells: list, first_exercise: int, lang: str = "en") -> None:
    """Make ``____`` defined in a student notebook: add its import to the cell that imports the lesson's
    exercises (``from effitrain_helpers.teach.checks.lesson_X_Y import ...``), else before the first exercise;
    its comment in the notebook's language ``lang``."""
    line = BLANK_IMPORT.replace(BLANK_COMMENT, tr(BLANK_COMMENT, lang=lang))
    for cell in cells:
        if cell.cell_type == "code" and _IMPORTS_CHECKS.search(cell.source):
            cell.source = cell.source.rstrip("\n") + "\n" + line
            return
    exercise = next(c for c in cells if c.cell_type == "code" and "____" in c.source)
    exercise.source = line + "\n" + exercise.source


def _strip(cell) -> None:
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    cell.metadata.pop("execution", None)


_BANNERS = {  # (edition, solutions shown): the first cell of each edition, in the notebook's language
    ("student", True): msg("*Student edition: each exercise starts with blanks `____` to fill in; `q1.check(...)` "
                           "says Correct, Incorrect or Not attempted, `q1.hint()` gives a hint, `q1.solution()` "
                           "shows an answer.*"),
    ("student", False): msg("*Student edition: each exercise starts with blanks `____` to fill in; `q1.check(...)` "
                            "says Correct, Incorrect or Not attempted, `q1.hint()` gives a hint. Solutions are "
                            "turned off for this class.*"),
    ("instructor", True): msg("*Instructor edition: solutions filled in, and instructor notes (timing, what to "
                              "show, common mistakes) in the cells marked **Instructor notes**. Students get the "
                              "student edition.*"),
}


def make_edition(nb, name: str, edition: str, solutions: bool = True):
    """A copy of notebook ``nb`` as the ``edition`` ('student' or 'instructor'), outputs stripped."""
    import copy

    import nbformat

    if edition not in EDITIONS:
        raise ValueError(tr("edition={edition!r} is not allowed; choose one of {editions}.",
                            edition=edition, editions=', '.join(EDITIONS)))
    marked = dict(exercise_cells(nb, name))
    out = copy.deepcopy(nb)
    cells = []
    for i, cell in enumerate(out.cells):
        if (edition == "student" and _is_instructor_only(cell)) or is_hidden_check(cell):
            continue
        if i in marked:
            cell.source = _replace(cell.source, marked[i], keep_solution=edition == "instructor")
        _strip(cell)
        cells.append(cell)
    lang = nb.metadata.get("effitrain", {}).get("lang", "en")  # a translated notebook's (teach.translations)
    if edition == "student" and marked and not any(_IMPORTS_BLANK.search(c.source) for c in cells
                                                   if c.cell_type == "code"):
        _import_blank(cells, min(marked), lang)
    banner = tr(_BANNERS[edition, solutions or edition == "instructor"], lang=lang)
    banner_cell = nbformat.v4.new_markdown_cell(banner, metadata={"tags": [f"{edition}-edition-banner"]})
    banner_cell.id = f"{edition}-edition-banner"  # not random: one source, one edition, byte for byte
    out.cells = [banner_cell] + cells
    out.metadata.pop("widgets", None)  # the saved state of widgets whose outputs were just stripped
    out.metadata["effitrain"] = {"edition": edition, "source": name, "solutions": solutions or edition == "instructor"}
    if lang != "en":
        out.metadata["effitrain"]["lang"] = lang
    return out


def check_out_folder(out: Path, force: bool) -> None:
    """Refuse an output folder that is a file, or holds files, unless ``force``."""
    if out.exists() and not out.is_dir():
        raise ValueError(tr("--out {out!r} is a file, not a folder. Fix: pass a folder path.", out=str(out)))
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ValueError(tr("--out folder {out!r} exists and is not empty. Fix: choose a new or empty folder, or add "
                            "--force to write the editions into its student/ and instructor/ folders: --force "
                            "replaces there only the notebooks an editions build writes (the lessons' names, and "
                            "notebooks an earlier build wrote); every other file is kept.", out=str(out)))


def check_apart(out: Path, source: Path) -> None:
    """Refuse an ``out`` folder that is the ``source`` folder, inside it or around it: a build would write over
    (or next to) the solved notebooks it reads."""
    out, source = out.resolve(), source.resolve()
    if out == source or source in out.parents or out in source.parents:
        raise ValueError(tr("--out {out!r} and --source {source!r} overlap (one is inside the other), so the build "
                            "would write over the solved notebooks. Fix: choose an --out folder outside the source "
                            "folder, and a source folder outside --out.", out=str(out), source=str(source)))


def read_notebook(path: Path):
    """The notebook in ``path`` (nbformat 4, validated); ``ValueError`` naming the file when it is not one."""
    import nbformat

    data = files.read_bytes(path)  # a FIFO, a device, a huge file: one line naming it
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as err:  # noqa: BLE001 - nbformat fails on a bad structure with TypeError, AttributeError ...
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        raise ValueError(tr("{path} is not a readable notebook ({reason}). Fix: repair it (e.g. restore it with "
                            "git) or move it out of the source folder.", path=str(path), reason=first)) from None
    return nb


def source_notebooks(source: str | Path | None, lang: str = "en") -> dict:
    """``{file name: notebook}`` of the solved notebooks in ``source`` (default: :func:`default_source`). In
    another language than English (``lang``, with no ``source``), each lesson comes from ``notebooks/<lang>/``
    when it is translated, and in English until it is."""
    source = default_source() if source is None else Path(source).expanduser()
    paths = sorted(source.glob("*.ipynb")) if source.is_dir() else []
    if not paths:
        raise ValueError(tr("source folder {source!r} holds no notebooks. Fix: pass --source with the solved "
                            "notebooks (the workbook's notebooks/ folder).", source=str(source)))
    translated = default_source(lang)
    if lang != "en" and source == default_source():
        paths = [translated / p.name if (translated / p.name).exists() else p for p in paths]
    return {p.name: read_notebook(p) for p in paths}


def check_all(notebooks: dict) -> dict[str, list]:
    """:func:`exercise_cells` of every notebook; one :class:`MarkerError` listing every problem of them all."""
    exercises, errors = {}, []
    for name, nb in notebooks.items():  # every notebook checked, every problem reported at once
        try:
            exercises[name] = exercise_cells(nb, name)
            hidden_checks(nb, name)
        except MarkerError as err:
            errors.append(str(err))
    if errors:
        raise MarkerError("cannot build the editions:\n" + "\n".join(errors))
    return exercises


def check_markers(source: str | Path | None = None) -> dict[str, int]:
    """``{notebook: number of marked exercises}`` for the notebooks in ``source``; :class:`MarkerError` if any
    marker is wrong (``effitrain editions --check``: what a contributor runs after adding a lesson)."""
    return {name: len(cells) for name, cells in check_all(source_notebooks(source)).items()}


def _written_by_build(path: Path, edition: str) -> bool:
    """Whether ``path`` is a notebook of ``edition`` that a build wrote (its metadata says so)."""
    try:
        meta = json.loads(files.read_bytes(path)).get("metadata", {}).get("effitrain", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(meta, dict) and meta.get("edition") == edition


def build_editions(out: str | Path, source: str | Path | None = None, force: bool = False,
                   solutions: bool = True, lang: str = "en") -> dict:
    """Write ``out/student`` and ``out/instructor`` from the notebooks in ``source`` (or, in language ``lang``,
    from the translated notebooks: :func:`source_notebooks`); return a summary.

    Every notebook is checked before anything is written, so a marker error leaves ``out`` untouched.
    """
    import nbformat

    out = Path(out).expanduser()
    check_apart(out, default_source() if source is None else Path(source).expanduser())
    notebooks = source_notebooks(source, lang)
    check_out_folder(out, force)
    exercises = check_all(notebooks)  # every notebook checked before anything is written
    for edition in EDITIONS:
        folder = out / edition
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.ipynb"):  # a lesson since removed: only what a build wrote
            if old.name not in notebooks and _written_by_build(old, edition):
                old.unlink()
        for name, nb in notebooks.items():
            files.write_atomically(folder / name, nbformat.writes(make_edition(nb, name, edition, solutions)) + "\n")
        files.write_atomically(folder / EDITION_FILE, json.dumps(
            {"edition": edition, "solutions": solutions or edition == "instructor"}, indent=2) + "\n")
    return {"out": str(out), "notebooks": len(notebooks), "solutions_in_student_edition": solutions, "lang": lang,
            "translated": sorted(n for n, nb in notebooks.items() if nb.metadata.get("effitrain", {}).get("lang")),
            "exercises": {name: len(cells) for name, cells in exercises.items()}}
