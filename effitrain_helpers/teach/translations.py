"""Is the translation of each lesson complete and in step with the English? And the translated notebooks, built.

English is the source. A notebook's translation is one YAML file, ``translations/<lang>/<notebook stem>.yaml``
(for example ``translations/pt-BR/1_1_prepare_models.yaml``); its presence declares the notebook translated, and
then every cell of the English notebook must be accounted for, by its cell id::

    notebook: 1_1_prepare_models.ipynb
    cells:
    - id: e9f3178f          # the English cell's id
      en: 3f0c2a9d81b7      # fingerprint: the first 12 hex digits of the sha256 of the English source
      pt: |-                # the translation (a markdown cell whole; a code cell: only comments and strings)
        # Lição 1.1 · ...
    - id: abb0b247
      en: 9be1c0aa4e10
      same: true            # nothing for the reader to translate: the English cell is used as it is
    - id: 02387832
      en: 51d2f0c3b9a4
      todo: true            # written by `tools/translations.py new`: still English, reported as untranslated

So a cell left out is *forgotten*, never silently English: :func:`notebook_problems` names notebook, cell
(index and id) and problem when an English cell changed after it was translated (fingerprint), a cell has no
entry or is still ``todo``, a code translation changes anything but comments and string literals (compared with
``ast``) or has a line longer than :data:`MAX_CODE_LINE` characters, or an entry names a cell id that no longer exists.

The translated notebooks live in ``notebooks/<lang>/`` (:func:`build_notebook`): the English notebook with the
translated cells substituted, ``metadata.effitrain.lang`` set, and a two-line code cell of its own before the
first code cell (id ``LANG_CELL_ID``) that sets the kernel's language (``SETTINGS.set_lang("pt-BR")``), so ``check()`` answers in that language
wherever the notebook runs (a student copy, a grader's temporary folder). A test compares them with what this
module builds. The package's own messages are translated in ``translations/<lang>/messages/``
(:mod:`effitrain_helpers.core.language`); :func:`message_problems` says which are missing or stale.
``tools/translations.py`` is the translator's command (status, new, build, refresh).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib
import io
import pkgutil
import string
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from effitrain_helpers.core.language import TRANSLATIONS, catalog, messages_folder, msg, read_entries, tr
from effitrain_helpers.core.settings import check_lang
from effitrain_helpers.teach.editions import default_source
from effitrain_helpers.teach.exercises import Exercise
from effitrain_helpers.teach.verdicts import CHECKS_PACKAGE, lesson_of
from effitrain_helpers.teach.workbook import lesson_id

PACKAGE = Path(__file__).resolve().parents[1]  # effitrain_helpers/
FINGERPRINT = 12  # hex digits of sha256 kept in the translation files
MAX_CODE_LINE = 100  # characters: the English notebooks' code lines keep to it, and so must their translations
SET_LANG = 'from effitrain_helpers.core.settings import SETTINGS\nSETTINGS.set_lang("{lang}")  # {why}'
LANG_CELL_ID = "set-lang"  # the id of that cell (no English notebook's cell has it)
SET_LANG_WHY = msg("check(), hint() and the workbook's messages in this notebook's language")


def fingerprint(source: str) -> str:
    """The fingerprint of an English cell's source: the first 12 hex digits of its sha256."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:FINGERPRINT]


def translation_path(notebook: str, lang: str) -> Path:
    """``translations/<lang>/<notebook stem>.yaml``."""
    return TRANSLATIONS / lang / f"{Path(notebook).stem}.yaml"


def translated_folder(lang: str) -> Path:
    """``notebooks/<lang>/``: the built translated notebooks (``notebooks/`` itself for English)."""
    return default_source(lang)


def translated_notebooks(lang: str) -> list[str]:
    """The English notebooks that ``lang`` declares translated (those with a translation file), in order."""
    if lang == "en":
        return []
    return sorted(p.name for p in default_source().glob("*.ipynb") if translation_path(p.name, lang).exists())


@dataclass
class Translation:
    """One notebook's translation file: ``cells`` maps cell id to its entry (``en``, and ``pt``/``same``/``todo``)."""

    notebook: str
    lang: str
    cells: dict[str, dict] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, notebook: str, lang: str) -> "Translation":
        import yaml

        path = translation_path(notebook, lang)
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        entries = data.get("cells") or [] if isinstance(data, dict) else None
        if not isinstance(entries, list) or not all(isinstance(e, dict) and "id" in e for e in entries):
            raise ValueError(f"{path}: a translation file holds `notebook:` and `cells:`, a list of entries with "
                             "`id`, `en` and one of `pt`, `same: true`, `todo: true` (see tools/translations.py new).")
        unquoted = [e[k] for e in entries for k in ("id", "en") if k in e and not isinstance(e[k], str)]
        if unquoted:  # YAML reads 12345678 as a number and 06777667 as octal: the id would not match
            raise ValueError(f"{path}: {unquoted[0]!r} was read as a number, not as a cell id or fingerprint. "
                             "Fix: quote it, e.g. id: '06777667' (tools/translations.py new writes them quoted)")
        found = cls(notebook, lang)
        for entry in entries:
            key = entry["id"]
            if key in found.cells:
                found.duplicates.append(key)
            found.cells[key] = entry
        return found

    def text(self, cell_id: str) -> str | None:
        """The translated source of a cell, or None when the English is used (``same``, ``todo``, absent)."""
        entry = self.cells.get(cell_id, {})
        return None if entry.get("todo") or entry.get("same") or not isinstance(entry.get("pt"), str) \
            else entry["pt"]


class _Strings(ast.NodeTransformer):
    """Blanks the text of string literals (f-strings keep their fields, in any order): what translating may change."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant("") if isinstance(node.value, str) else node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        fields = [v for v in node.values if isinstance(v, ast.FormattedValue)]
        for v in fields:  # strings inside a field's expression are text too; its format spec is not
            v.value = self.visit(v.value)
        fields = sorted(ast.dump(v) for v in fields)
        return ast.Constant(("f-string", *fields))


def _cell_magic(source: str) -> tuple[str, str]:
    """``(magic line, body)`` of a cell that starts with an IPython cell magic (``%%writefile script.py``: 2.2's
    script, Python below it), else ``("", source)``; the body keeps its line numbers (the magic becomes a blank
    line)."""
    first, _, rest = source.partition("\n")
    return (first, "\n" + rest) if first.startswith("%%") else ("", source)


def code_change(english: str, translated: str) -> str | None:
    """Why ``translated`` is not ``english`` with only comments and string literals changed; None when it is.
    A cell magic's line must stay the same; the code below it is compared as Python."""
    (magic, english), (translated_magic, translated) = _cell_magic(english), _cell_magic(translated)
    if magic != translated_magic:
        return f"the translation changes the cell magic line ({magic or 'none'} in English)"
    try:
        trees = [ast.parse(src) for src in (english, translated)]
    except SyntaxError as err:
        return f"the translation is not valid Python ({err.msg}, line {err.lineno})"
    shapes = [[ast.dump(_Strings().visit(stmt)) for stmt in tree.body] for tree in trees]
    for i, (a, b) in enumerate(zip(*shapes)):
        if a != b:
            return (f"the translation changes code, not only comments and strings: the statement on line "
                    f"{trees[1].body[i].lineno} differs from the English one on line {trees[0].body[i].lineno}")
    if len(shapes[0]) != len(shapes[1]):
        return f"the translation has {len(shapes[1])} statements, the English {len(shapes[0])}"
    return None


def long_lines(source: str) -> list[tuple[int, int]]:
    """``(line number, length)`` of each line of ``source`` longer than :data:`MAX_CODE_LINE` characters."""
    return [(n, len(line)) for n, line in enumerate(source.splitlines(), 1) if len(line) > MAX_CODE_LINE]


def notebook_problems(english, notebook: str, translation: Translation) -> list[str]:
    """Every way ``translation`` is incomplete or stale against the ``english`` notebook, one line each, naming
    notebook, cell (index and id) and problem; [] when it is complete and in step."""
    where = f"translations/{translation.lang}/{Path(notebook).stem}.yaml"
    found = [f"{where}: cell id {key} is listed twice" for key in translation.duplicates]
    ids = set()
    for i, cell in enumerate(english.cells):
        cell_id = cell.get("id")
        ids.add(cell_id)
        here = f"{notebook}, cell {i} (id {cell_id}, {cell.cell_type})"
        entry = translation.cells.get(cell_id)
        if entry is None:
            found.append(f"{here}: no translation. Fix: add it to {where} (`pt:` with the translation, or "
                         "`same: true` when there is nothing to translate)")
            continue
        if str(entry.get("en")) != fingerprint(cell.source):
            found.append(f"{here}: the English changed since it was translated (fingerprint {entry.get('en')}, now "
                         f"{fingerprint(cell.source)}). Fix: update the translation, then `python tools/"
                         f"translations.py refresh {lesson_id(notebook)} {cell_id}`")
        if entry.get("todo"):
            found.append(f"{here}: not translated yet (`todo: true` in {where})")
        elif not entry.get("same") and not (isinstance(entry.get("pt"), str) and entry["pt"].strip()):
            found.append(f"{here}: the entry has neither a `pt:` text nor `same: true`")
        elif cell.cell_type == "code" and translation.text(cell_id) is not None:
            why = code_change(cell.source, entry["pt"])
            if why:
                found.append(f"{here}: {why}")
            found += [f"{here}: line {n} of the translation is {length} characters long (code lines keep to "
                      f"{MAX_CODE_LINE}). Fix: rewrap it in {where}: a long comment as two comment lines, a long "
                      "string as adjacent literals inside parentheses, or the arguments over two lines (same "
                      "statements, same text)" for n, length in long_lines(entry["pt"])]
    found += [f"{where}: cell id {key} is not in {notebook} any more (the cell was removed or its id changed). "
              "Fix: remove the entry, or move its translation to the new id" for key in translation.cells
              if key not in ids]
    return found


def set_lang_line(lang: str) -> str:
    """The source of a translated notebook's first code cell, its own (it sets the kernel's language)."""
    return SET_LANG.format(lang=lang, why=tr(SET_LANG_WHY, lang=lang))


def build_notebook(english, notebook: str, lang: str, previous=None):
    """The ``lang`` edition of the ``english`` notebook: translated cells substituted, outputs dropped (kept from
    ``previous``, the notebook built before, for a cell whose source did not change), the language set in the
    metadata and by a code cell of its own before the first code cell (so the lesson's cells keep their length)."""
    import nbformat

    translation = Translation.read(notebook, lang)
    old = {c.get("id"): c for c in previous.cells} if previous is not None else {}
    nb = copy.deepcopy(english)
    if LANG_CELL_ID in {c.get("id") for c in nb.cells}:
        raise ValueError(f"{notebook} has a cell with id {LANG_CELL_ID!r}, the id the translation's language cell "
                         "takes: give that cell another id")
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, nbformat.v4.new_code_cell(set_lang_line(lang), id=LANG_CELL_ID))
    for cell in nb.cells:
        text = translation.text(cell.get("id"))
        if text is not None:
            cell.source = text
        if cell.cell_type != "code":
            continue
        before = old.get(cell.get("id"))
        keep = before is not None and before.source == cell.source
        cell.outputs = copy.deepcopy(before.outputs) if keep else []
        cell.execution_count = before.execution_count if keep else None
    nb.metadata["effitrain"] = {**nb.metadata.get("effitrain", {}), "lang": lang, "translated_from": f"../{notebook}"}
    return nb


def built_sources(nb) -> list:
    """What a built notebook must share with :func:`build_notebook`'s result (outputs aside, which executing
    stores): its language metadata and each cell's id, type, tags and source."""
    return [nb.metadata.get("effitrain")] + [(c.get("id"), c.cell_type, c.metadata.get("tags", []), c.source)
                                             for c in nb.cells]


# ---------------------------------------------------------------- the package's messages

# The keywords of argparse's calls (``add_argument``, ``add_parser``, a parser's constructor) whose text the
# command line shows in the learner's language (core.arguments.TranslatedHelpFormatter): messages like tr's.
HELP_KEYWORDS = ("help", "description", "title", "epilog")


def _literal_calls(path: Path) -> tuple[list[str], list[str]]:
    """The English literals passed to ``tr(...)``/``msg(...)`` in a module, and to the :data:`HELP_KEYWORDS` of
    any call (``add_argument(..., help="...")``), and the lines of calls of ``msg`` whose first argument is not a
    literal, or whose help text is an f-string (they could never be collected)."""
    literals, bad = [], []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg in HELP_KEYWORDS and isinstance(keyword.value, ast.Constant) \
                    and isinstance(keyword.value.value, str):
                literals.append(keyword.value.value)
            elif keyword.arg in HELP_KEYWORDS and isinstance(keyword.value, ast.JoinedStr):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
        if not node.args:
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name not in ("tr", "msg"):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            literals.append(first.value)
        elif name == "msg" or isinstance(first, ast.JoinedStr):
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return literals, bad


def unrouted_verdicts(module: str) -> list[str]:
    """The lines of ``module`` (``"teach.checks.lesson_2_2"``) that raise :class:`Incorrect` with a message not
    written as ``tr("...")``: messages a translation cannot reach yet."""
    path = PACKAGE.joinpath(*module.split(".")).with_suffix(".py")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Incorrect" and node.args:
            first = node.args[0]
            routed = isinstance(first, ast.Call) and getattr(first.func, "id", None) == "tr"
            if not routed:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: Incorrect(...) without tr()")
    return found


def has_comment(code: str) -> bool:
    """Whether ``code`` (a solution) holds a ``#`` comment: then it is a message, its comments translated (the code
    itself reads the same in every language, so a solution without comments needs no entry)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return "#" in code
    return any(t.type == tokenize.COMMENT for t in tokens)


def package_messages() -> tuple[dict[str, list[str]], list[str]]:
    """``{module: English messages}`` of the package (``"teach.checks.lesson_1_1"``: the literals of its
    ``tr``/``msg`` calls, and for a checks module its exercises' names, hints and "checked" lines), and the calls that pass
    ``tr`` an f-string or ``msg`` a non-literal (a test fails on them)."""
    found, bad = {}, []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "language.py" and path.parent.name == "core":
            continue  # defines tr and msg
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        literals, wrong = _literal_calls(path)
        bad += wrong
        if literals:
            found[module] = literals
    package = importlib.import_module(CHECKS_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        exercises = [v for v in vars(importlib.import_module(f"{CHECKS_PACKAGE}.{info.name}")).values()
                     if isinstance(v, Exercise)]
        texts = [t for ex in exercises for t in (ex.name, *ex.hints, *([ex.checked] if ex.checked else []),
                                                 *([ex.solution_code] if has_comment(ex.solution_code) else []))]
        if texts:
            key = f"teach.checks.{info.name}"
            found[key] = found.get(key, []) + texts
    return {m: list(dict.fromkeys(texts)) for m, texts in found.items()}, bad


def strict_modules(lang: str, modules) -> list[str]:
    """The modules whose messages must all be translated: every module that is not a lesson's checks, and the
    checks of each lesson whose notebook is declared translated (has a translation file)."""
    lessons = {lesson_id(n) for n in translated_notebooks(lang)}
    strict = []
    for module in modules:
        lesson = lesson_of(f"effitrain_helpers.{module}")
        if lesson is None or lesson in lessons:
            strict.append(module)
    return strict


def reserved_fields(template: str) -> list[str]:
    """The fields of ``template`` that ``tr(text, lang=None, **fields)`` cannot be given (``text``, ``lang``)."""
    return sorted({f.split("!")[0] for f in _fields(template)} & {"text", "lang"})


def _fields(template: str) -> set[str]:
    try:
        return {f"{name}!{conv}" if conv else name for _, name, _, conv in string.Formatter().parse(template)
                if name is not None}
    except ValueError as err:
        return {f"<not a template: {err}>"}


@dataclass
class MessageReport:
    """What :func:`message_problems` found: ``problems`` fail a test, ``untranslated`` only lists, for the lessons
    not declared translated yet, their untranslated messages and their checker messages not routed through tr."""

    problems: list[str]
    untranslated: dict[str, list[str]]


def message_problems(lang: str) -> MessageReport:
    """Missing, stale and broken message translations of ``lang`` (see :class:`MessageReport`)."""
    lang = check_lang(lang, "lang")
    messages, bad = package_messages()
    problems = [f"{where}: tr() needs the English template as a literal (fields as keyword arguments), and msg() "
                "and a command-line help text a literal" for where in bad]
    checks = [f"teach.checks.{i.name}" for i in pkgutil.iter_modules(importlib.import_module(CHECKS_PACKAGE).__path__)]
    modules = list(dict.fromkeys([*messages, *checks]))
    strict = set(strict_modules(lang, modules))
    known = catalog.__wrapped__(lang)
    untranslated = {}
    for module in modules:
        problems += [f"{module}: {t!r} has a field named {name!r}, which tr() takes as its own argument. Fix: "
                     "rename the field" for t in messages.get(module, []) for name in reserved_fields(t)]
        missing = [t for t in messages.get(module, []) if not known.get(t)]
        unrouted = unrouted_verdicts(module) if module in checks else []
        if module in strict:
            problems += [f"{module}: no {lang} translation of {t!r}. Fix: add it to translations/{lang}/messages/"
                         f"{module}.yaml (`python tools/translations.py messages {module}`)" for t in missing]
            problems += [f"{where}: a translated lesson's checker message must be tr(\"English template\", ...)"
                         for where in unrouted]
        elif missing or unrouted:
            untranslated[module] = missing + unrouted
    folder = messages_folder(lang)
    first = {}  # English -> (file, translation) where it was first met: one English text, one translation
    for path in sorted(folder.glob("*.yaml")):
        module = path.stem
        current = set(messages.get(module, []))
        for entry in read_entries(path):
            seen = first.setdefault(entry["en"], (path.name, entry["pt"]))
            if entry["pt"].strip() and seen[1].strip() and seen[1] != entry["pt"]:
                problems.append(f"{path.relative_to(TRANSLATIONS.parent)}: {entry['en']!r} is translated "
                                f"differently in {seen[0]} (only one is shown). Fix: use one translation in both")
            if entry["en"] not in current:
                problems.append(f"{path.relative_to(TRANSLATIONS.parent)}: {entry['en']!r} is not a message of "
                                f"{module} any more (its English changed or it was removed). Fix: translate the "
                                "new English and remove this entry")
            elif entry["pt"].strip() and _fields(entry["en"]) != _fields(entry["pt"]):
                problems.append(f"{path.relative_to(TRANSLATIONS.parent)}: the translation of {entry['en']!r} has "
                                f"the fields {sorted(_fields(entry['pt']))}, the English {sorted(_fields(entry['en']))}")
    return MessageReport(problems, untranslated)
