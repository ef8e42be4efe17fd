"""What a learner gets from an exercise besides its check: hints that climb without giving a solution line away,
and a solution written once (the notebook's solution region, pinned equal to the checker's ``solution_code``)."""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import keyword
import re
import textwrap
import tokenize

import nbformat
import pytest

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach import editions
from effitrain_helpers.teach.exercises import Exercise
from effitrain_helpers.teach.lessons import START_PAGE, exercise_census

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
        shown = editions._replace(source, regions, keep_solution=False)  # the student's cell
        out.append((qname, getattr(module, qname), solved, secret, shown))
    return out


_FOUND = [(path.stem, *found) for path in NOTEBOOKS for found in notebook_exercises(path)]
CASES = [case[:5] for case in _FOUND]
IDS = [f"{stem}:{q}" for stem, q, *_ in CASES]
SHOWN = {f"{stem}:{q}": shown for stem, q, *_, shown in _FOUND}


TRANSLATED_HINTS = ("en", "pt-BR")
_WORD = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_TRIVIAL = set(keyword.kwlist) | set(dir(builtins)) | {"self"}


def _number_or_name(text: str) -> str:
    """A number in one spelling (``1e-8`` and ``0.00000001`` are one number); a name as it is."""
    try:
        return repr(float(text))
    except ValueError:
        return text


def words(text: str) -> set[str]:
    """The identifiers and numbers written in ``text`` (prose or code; strings and comments included)."""
    return {_number_or_name(w) for w in _WORD.findall(text)}


def code_words(code: str) -> set[str]:
    """The identifiers and numbers of Python ``code`` and the words of its strings (an answer can be a list of
    names), keywords and builtins aside; comments are not code."""
    found = set()
    tokens = tokenize.generate_tokens(io.StringIO(code + "\n").readline)
    try:
        for tok in tokens:
            if tok.type in (tokenize.NAME, tokenize.NUMBER) and tok.string not in _TRIVIAL:
                found.add(_number_or_name(tok.string))
            elif tok.type == tokenize.STRING:
                found |= words(tok.string.strip("\"'"))
    except (tokenize.TokenError, IndentationError):  # a fragment of a block: what was read is enough
        pass
    return found


def left_to_find(hints: list[str], secret: list[str], shown: str) -> set[str]:
    """The solution's identifiers and numbers that neither the student's cell nor any hint writes down."""
    return code_words("\n".join(secret)) - code_words(shown) - set().union(*map(words, hints))


_ATOM = re.compile(r"[\w.]+|\"[^\"]*\"|'[^']*'")


def one_blank_lines(hints: list[str], secret: list[str]) -> list[str]:
    """The solution lines some hint writes with only one name, number or string left blank (``____``): such a
    hint gives the line away (``x = torch.finfo(____).eps`` when the question names the type)."""
    squash = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731
    given = []
    for line in map(squash, secret):
        for hint_line in (squash(h) for hint in hints for h in hint.splitlines()):
            if hint_line.count("____") != 1 or len(code_words(hint_line.replace("____", " "))) < 2:
                continue
            before, after = hint_line.split("____")
            middle = line[len(before):len(line) - len(after)] if len(line) > len(before) + len(after) else ""
            if line.startswith(before) and line.endswith(after) and _ATOM.fullmatch(middle.strip()):
                given.append(line)
                break
    return given


_LABEL = re.compile(r"^\s*[A-Za-z_]\w*:\s+(?=\S)")  # "save: folder = ..." in a hint: the code after the label


def _code_fragments(hints: list[str]) -> list[ast.AST]:
    """Every piece of Python a hint writes: each run of one to four of its lines (a label such as ``save:`` cut off),
    and each ``;``-separated part of a line, that parses (``____`` is a name to Python)."""
    found = []
    for hint in hints:
        lines = hint.splitlines()
        pieces = [part for line in lines for part in line.split(";")]
        pieces += ["\n".join(lines[i:j]) for i in range(len(lines)) for j in range(i + 1, min(i + 5, len(lines) + 1))]
        for piece in pieces:
            try:
                found.append(ast.parse(textwrap.dedent(_LABEL.sub("", piece, count=1)).strip()))
            except SyntaxError:
                continue
    return found


def _leaves(node: ast.AST) -> int:
    """The names, attributes and constants a piece of code writes itself (blanks not counted)."""
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.Constant)
               or isinstance(n, ast.Name) and n.id != "____" or isinstance(n, ast.Attribute) and n.attr != "____")


def _fills(pattern: ast.AST, node: ast.AST) -> bool:
    """Whether ``node`` is ``pattern`` with each blank (``____`` as a name or an attribute) filled in."""
    if isinstance(pattern, ast.Name) and pattern.id == "____":
        return True
    if type(pattern) is not type(node):
        return False
    for name in pattern._fields:
        if name in ("ctx", "type_comment", "kind"):
            continue
        mine, theirs = getattr(pattern, name, None), getattr(node, name, None)
        if isinstance(mine, list):
            if not isinstance(theirs, list) or len(mine) != len(theirs) or not all(map(_fills, mine, theirs)):
                return False
        elif isinstance(mine, ast.AST):
            if not isinstance(theirs, ast.AST) or not _fills(mine, theirs):
                return False
        elif mine != theirs and not (name == "attr" and mine == "____"):
            return False
    return True


def _statement(line: str) -> ast.AST | None:
    """One solution line as a statement (a block's header with ``pass`` for its body), or None."""
    for code in (line, line + "\n    pass"):
        try:
            body = ast.parse(code.strip()).body
        except SyntaxError:
            continue
        return body[0] if len(body) == 1 else None
    return None


def skeleton_lines(hints: list[str], secret: list[str], least: int = 3) -> list[str]:
    """The solution lines some hint writes as code with blanks (``lost = 1336 - (1336 // ____) * ____``): the
    answer with its values left out, once ``least`` names or numbers of the line are written. A hint that stops
    at the idea says what to do and where to look, never the line to fill in."""
    patterns = [node for tree in _code_fragments(hints) for node in ast.walk(tree)
                if isinstance(node, (ast.stmt, ast.expr)) and _leaves(node) >= least]
    given = []
    for line in secret:
        statement = _statement(line)
        if statement is None:
            continue
        if isinstance(statement, (ast.While, ast.If, ast.For, ast.With)):  # a header: compare what it tests
            statement = getattr(statement, "test", None) or getattr(statement, "iter", None) or statement
        if any(_fills(pattern, statement) for pattern in patterns):
            given.append(line)
    return given


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


@pytest.mark.parametrize("stem, q, exercise, solved, secret", CASES, ids=IDS)
def test_hints_leave_something_to_find(stem, q, exercise, solved, secret):
    """All hints read, at least one identifier or number of the solution is still to find (the name to look up,
    the number to work out, the argument to choose), and no hint is a solution line with a single blank."""
    problem = None
    for lang in TRANSLATED_HINTS:  # a translation keeps the code of a hint, and must keep its blanks too
        hints = [tr(h, lang=lang) for h in exercise.hints]
        given = one_blank_lines(hints, secret)
        missing = left_to_find(hints, secret, SHOWN[f"{stem}:{q}"])
        problem = problem or (
            f"{stem} {q} ({lang}): a hint is a solution line with one blank: {given}" if given else
            f"{stem} {q} ({lang}): the hints together write every name and number of the solution; leave one to "
            "find" if not missing else None)
    assert not problem, problem


# Exercises whose hints stop at the idea (issue 41): their last hint says what to do and where to look, and no
# hint writes a solution line with blanks to fill in; the answer is only in solution(). Every exercise of the
# start page and chapters 1-6, and these:
STOP_AT_THE_IDEA = {f"{stem}:{q}" for stem, q, *_ in CASES if stem[0] in "0123456"} | {
                    "1_1_prepare_models:q2", "1_1_prepare_models:q4", "3_3_mixed_precision:q2",
                    "5_3_checkpoint_crash_resume:q1", "5_3_checkpoint_crash_resume:q2",
                    "5_3_checkpoint_crash_resume:q3", "5_3_checkpoint_crash_resume:q4",
                    "7_1_mixed_precision_across_ranks:q1", "7_1_mixed_precision_across_ranks:q2",
                    "8_1_attention_that_fits:q1", "8_1_attention_that_fits:q2", "8_2_activation_memory:q1",
                    "8_2_activation_memory:q2", "8_3_sequence_and_context_parallelism:q1",
                    "8_3_sequence_and_context_parallelism:q2", "8_4_experts:q1",
                    "7_2_a_mesh_of_devices:q1", "7_2_a_mesh_of_devices:q2",
                    "7_3_choosing_a_configuration:q1", "7_3_choosing_a_configuration:q2",
                    "7_3_choosing_a_configuration:q3"}


@pytest.mark.parametrize("stem, q, exercise, solved, secret",
                         [c for c in CASES if f"{c[0]}:{c[1]}" in STOP_AT_THE_IDEA],
                         ids=sorted(STOP_AT_THE_IDEA, key=IDS.index))
def test_hints_stop_at_the_idea(stem, q, exercise, solved, secret):
    """No hint of these exercises, in English or Portuguese, is a solution line with its values blanked out."""
    for lang in TRANSLATED_HINTS:
        given = skeleton_lines([tr(h, lang=lang) for h in exercise.hints], secret)
        assert not given, (f"{stem} {q} ({lang}): a hint writes these solution lines with blanks to fill in: "
                           f"{given}; say what to do and where to look instead")


def test_the_skeleton_rule_finds_a_line_with_its_values_blanked_out():
    secret = ["lost = 1336 - 1336 // 50 * 50", "while torch.tensor(1e-8 * scale, dtype=torch.float16).item() == 0:",
              'steps = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]']
    assert skeleton_lines(["lost = 1336 - (1336 // ____) * ____"], secret) == secret[:1]
    assert skeleton_lines(["Start at 1, then:\nwhile torch.tensor(1e-8 * scale, dtype=____).____() == ____:\n"
                           "    scale *= ____"], secret) == secret[1:2]
    assert skeleton_lines(['steps = ["data sharding", ____, "gradient aggregation", ____]'], secret) == secret[2:]
    assert skeleton_lines(["save: folder = ____(root, step); accelerator.____(folder); a barrier"],
                          ["folder = partial_folder(root, step)"]) == ["folder = partial_folder(root, step)"]
    assert skeleton_lines(["Find the newest checkpoint's step; p.numel() counts; lost = ____"], secret) == []


def test_the_hint_rule_finds_hints_that_give_everything():
    secret = ["bf16_gap = torch.finfo(torch.bfloat16).eps"]
    assert left_to_find(["bfloat16's gap", "torch.finfo(dtype).eps"], secret, "bf16_gap = ____") == set()
    assert left_to_find(["bfloat16's gap", "a function of torch"], secret, "bf16_gap = ____") == {"finfo", "eps"}
    assert one_blank_lines(["bf16_gap = torch.finfo(____).eps"], secret) == secret
    assert one_blank_lines(["bf16_gap = torch.____(____).eps", "bf16_gap = ____"], secret) == []
    assert left_to_find(["scale 1e-8"], ["x = 0.00000001 * scale"], "") == {"x"}  # one number, two spellings


def test_the_leak_finder_finds_a_leak():
    secret = ["model = AutoModel.from_pretrained(name)", ")"]
    assert leaked_lines(["Try   model = AutoModel.from_pretrained(name) here"], secret) == [secret[0]]
    assert leaked_lines(["model = AutoModel.from_pretrained(____)"], secret) == []


README_TABLES = {"README.md": "| lesson | notebook | time on a 2-core CPU: quiet / one core busy | exercises: API + number |",
                 "README.pt-BR.md": ("| lição | notebook | tempo numa CPU de 2 núcleos: sem outra carga / um núcleo ocupado "
                                     "| exercícios: API + número |")}  # then tests/test_mutants.py's column
_START_ROW = {"README.pt-BR.md": "Comece aqui"}


@pytest.mark.parametrize("readme", README_TABLES)
def test_the_readme_prints_the_exercise_census(readme):
    """The lesson table's fourth column is ``exercise_census()`` (API + number exercises), never typed by hand;
    every lesson with exercises shows its figures."""
    text = (editions.default_source().parent / readme).read_text()
    assert README_TABLES[readme] in text, f"{readme}: the lesson table's heading changed"
    census = exercise_census()
    rows = {}
    for line in text.split(README_TABLES[readme], 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        label = line.split("|")[1].strip()
        lesson = START_PAGE if label == _START_ROW.get(readme) else label.split(" ")[0]
        if lesson in census:
            rows[lesson] = line.split("|")[4].strip()  # the fourth column (the fifth counts mutants)
    for lesson, (api, number) in census.items():
        if lesson == START_PAGE and readme not in _START_ROW:
            continue
        assert rows.get(lesson) == f"{api} + {number}", (
            f"{readme}: lesson {lesson}'s row shows {rows.get(lesson)!r} exercises; exercise_census() counts "
            f"'{api} + {number}' (API + number): write that")


def test_the_census_counts_api_and_number_exercises():
    census = exercise_census()
    assert census[START_PAGE] == (0, 1) and set(census) >= {"1.1", "4.3"}
    api_exercises = {f"{stem[:3]}:{q}" for stem, q, exercise, *_ in CASES if exercise.api}
    assert sum(api for api, _ in census.values()) == len(api_exercises)
    assert {"1_1:q1", "2_2:q1", "4_3:q4"} <= api_exercises and "3_3:q1" not in api_exercises


@pytest.mark.parametrize("stem, q, exercise, solved, secret", CASES, ids=IDS)
def test_a_correct_api_answer_says_what_was_checked(stem, q, exercise, solved, secret):
    """"Correct" means the learner's code did the right thing, not that it ran: an API exercise says what its
    checker verified, in one line (``Exercise.checked``, translated like the hints)."""
    if not exercise.api:
        return
    assert exercise.checked and "\n" not in exercise.checked, f"{stem} {q}: give checked=\"checked: ...\" (one line)"
    result = Exercise("demo", lambda answer: None, "q.check(x)", checked=exercise.checked).evaluate(1)
    assert result.status == "correct" and result.message == exercise.checked
