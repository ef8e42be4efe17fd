"""The translator's command: what is missing or stale, a new lesson's file to fill in, the translated notebooks.

    python tools/translations.py status [--lang pt-BR]        # every stale or missing cell and message; exit 1 if any
    python tools/translations.py new 2.2 [--lang pt-BR]       # translations/pt-BR/2_2_....yaml, every cell `todo`
    python tools/translations.py refresh 2.2 CELL_ID ...      # after updating a stale cell: take the new fingerprint
    python tools/translations.py messages teach.checks.lesson_2_2   # add the module's untranslated messages (pt: "")
    python tools/translations.py build [2.2 ...] [--no-execute]     # notebooks/pt-BR/, executed (outputs policy)

The formats and the rules are in effitrain_helpers/teach/translations.py; the README says it in "Contributing,
Translations".
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

from effitrain_helpers.core.language import messages_folder  # noqa: E402
from effitrain_helpers.teach import translations as t  # noqa: E402
from effitrain_helpers.teach.editions import default_source  # noqa: E402
from effitrain_helpers.teach.workbook import lesson_id  # noqa: E402


def _shown(path: Path) -> str:
    """``path`` relative to the project when it is inside it (what the translator types next)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _notebook(lesson: str) -> str:
    """The English notebook of ``lesson`` (``2.2``, ``start`` or a file name)."""
    names = [p.name for p in sorted(default_source().glob("*.ipynb"))]
    found = [n for n in names if lesson in (n, Path(n).stem, lesson_id(n))]
    if not found:
        raise SystemExit(f"{lesson!r} is not a lesson of notebooks/; choose one of {', '.join(map(lesson_id, names))}")
    return found[0]


def _english(notebook: str):
    return nbformat.read(default_source() / notebook, as_version=4)


def status(lang: str) -> int:
    """Print every problem of the translated notebooks and messages, then what is not translated yet."""
    problems = []
    done = t.translated_notebooks(lang)
    for name in done:
        problems += t.notebook_problems(_english(name), name, t.Translation.read(name, lang))
        built = t.translated_folder(lang) / name
        if not built.exists() or t.built_sources(nbformat.read(built, as_version=4)) != t.built_sources(
                t.build_notebook(_english(name), name, lang)):
            problems.append(f"notebooks/{lang}/{name}: not built from the current English and translation. "
                            f"Fix: python tools/translations.py build {lesson_id(name)}")
    messages = t.message_problems(lang)
    problems += messages.problems
    for line in problems:
        print(line)
    todo = [p.name for p in sorted(default_source().glob("*.ipynb")) if p.name not in done]
    print(f"\n{lang}: {len(done)} notebooks translated ({', '.join(map(lesson_id, done)) or 'none'}), "
          f"{len(problems)} problems; not translated yet: {', '.join(map(lesson_id, todo)) or 'none'}")
    for module, texts in messages.untranslated.items():
        print(f"  {module}: {len(texts)} messages not translated yet or not routed through tr()")
    return 1 if problems else 0


def _has_reader_text(source: str) -> bool:
    """Whether a code cell holds comments or string literals with words (what a translator would look at)."""
    if "#" in source:
        return True
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and re.search(r"[A-Za-z]{2,}\s", n.value)
               for n in ast.walk(tree)) or any(isinstance(n, ast.JoinedStr) for n in ast.walk(tree))


def _block(text: str, indent: str = "    ") -> str:
    """``text`` as a YAML literal block (``|-``, ``|+`` when it ends with newlines), as the message and cell files
    hold it (entries at 2 spaces, text at 4)."""
    chomp = "+" if text.endswith("\n") else "-"
    start = "2" if text[:1].isspace() else ""  # an indentation indicator keeps leading spaces (4 = 2 + 2)
    body = "\n".join(indent + line if line else "" for line in text.splitlines())
    return f"|{start}{chomp}\n{body}"


def new(lesson: str, lang: str) -> int:
    """Write the translation file of ``lesson`` with every cell listed: ``same: true`` for code cells with no
    comment and no words in strings, ``todo: true`` with the English text to replace for all the others."""
    name = _notebook(lesson)
    path = t.translation_path(name, lang)
    if path.exists():
        raise SystemExit(f"{path} exists already; `status` lists what it still lacks")
    lines = [f"# {name} in {lang}: replace each `pt:` text and remove its `todo: true` (README, Translations).",
             f"notebook: {name}", "cells:"]
    for cell in _english(name).cells:
        # quoted: an id or a fingerprint of digits (06777667, 1234e5678901) would otherwise load as a number
        lines += [f"- id: '{cell.id}'", f"  en: '{t.fingerprint(cell.source)}'"]
        if cell.cell_type == "code" and not _has_reader_text(cell.source):
            lines.append("  same: true")
        else:
            lines += ["  todo: true", f"  pt: {_block(cell.source)}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {_shown(path)}: translate each `todo` cell, then `python tools/translations.py build "
          f"{lesson_id(name)}`")
    return 0


def refresh(lesson: str, cell_ids: list[str], lang: str) -> int:
    """Write the current English fingerprint into the entries of ``cell_ids`` (after their translation was updated)."""
    name = _notebook(lesson)
    path = t.translation_path(name, lang)
    text = path.read_text(encoding="utf-8")
    sources = {c.id: c.source for c in _english(name).cells}
    for cell_id in cell_ids:
        if cell_id not in sources:
            raise SystemExit(f"{name} has no cell with id {cell_id!r}")
        pattern = re.compile(rf"(^- id: ['\"]?{re.escape(cell_id)}['\"]?\n  en: )(\S+)", re.M)
        text, n = pattern.subn(lambda m: m.group(1) + f"'{t.fingerprint(sources[cell_id])}'", text)
        if n != 1:
            raise SystemExit(f"{path}: no entry `- id: {cell_id}` followed by `  en:`")
    path.write_text(text, encoding="utf-8")
    print(f"{_shown(path)}: {len(cell_ids)} fingerprints refreshed")
    return 0


def messages(module: str, lang: str) -> int:
    """Append the untranslated messages of ``module`` to its message file, each with an empty ``pt:``."""
    found, _ = t.package_messages()
    if module not in found:
        raise SystemExit(f"{module!r} has no messages; modules with messages: {', '.join(found)}")
    path = messages_folder(lang) / f"{module}.yaml"
    have = {e["en"] for e in t.read_entries(path)}
    missing = [m for m in found[module] if m not in have]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for text in missing:
            f.write(f"- en: {_block(text)}\n  pt: \"\"\n")
    print(f"{_shown(path)}: {len(missing)} messages to translate (empty `pt:`)")
    return 0


def build(lessons: list[str], lang: str, execute: bool) -> int:
    """Build ``notebooks/<lang>/`` for ``lessons`` (default: every translated notebook), then execute them offline
    and keep the outputs the policy keeps (tools/notebook_outputs.py)."""
    import notebook_outputs

    names = [_notebook(x) for x in lessons] or t.translated_notebooks(lang)
    folder = t.translated_folder(lang)
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        problems = t.notebook_problems(_english(name), name, t.Translation.read(name, lang))
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        path = folder / name
        previous = nbformat.read(path, as_version=4) if path.exists() else None
        nbformat.write(t.build_notebook(_english(name), name, lang, previous), path)
        if execute:
            notebook_outputs.execute(path)
        print(f"built {_shown(path)}" + (" (executed)" if execute else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lang", default="pt-BR", help="the translation (default pt-BR)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="stale or missing cells and messages")
    p = sub.add_parser("new", help="start the translation of a lesson")
    p.add_argument("lesson")
    p = sub.add_parser("refresh", help="take the current English fingerprint of updated cells")
    p.add_argument("lesson")
    p.add_argument("cells", nargs="+")
    p = sub.add_parser("messages", help="add a module's untranslated messages to its file")
    p.add_argument("module")
    p = sub.add_parser("build", help="build (and execute) the translated notebooks")
    p.add_argument("lessons", nargs="*")
    p.add_argument("--no-execute", action="store_true")
    args = parser.parse_args(argv)
    lang = t.check_lang(args.lang, "--lang")
    if args.command == "status":
        return status(lang)
    if args.command == "new":
        return new(args.lesson, lang)
    if args.command == "refresh":
        return refresh(args.lesson, args.cells, lang)
    if args.command == "messages":
        return messages(args.module, lang)
    return build(args.lessons, lang, not args.no_execute)


if __name__ == "__main__":
    sys.exit(main())
