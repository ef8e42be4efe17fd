"""The English and the Brazilian Portuguese READMEs say the same things (issue 29): the same sections, in the same
order and at the same levels; the same commands in their code blocks; and the Portuguese lesson table names each
lesson as its Portuguese notebook does."""

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE_FLAGS = (" EFFITRAIN_LANG=pt-BR", " --lang pt-BR")  # what the Portuguese commands may add


def _readme(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of each fenced code block."""
    return [(m.group(1), m.group(2).splitlines()) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def _prose(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def sections(text: str) -> list[str]:
    """The heading levels (``##``, ``###``) outside code blocks, in order."""
    return re.findall(r"^(#{2,3}) ", _prose(text), re.M)


def commands(text: str) -> list[str]:
    """Every command of the code blocks: a shell or Python line without its comment (a line that is only a
    comment is prose), and the first word of each unindented line of the other blocks (paths of a layout)."""
    found = []
    for language, lines in _blocks(text):
        for line in lines:
            if language in ("bash", "python"):
                if line.lstrip().startswith("#") and not line.startswith(("# BEGIN", "# END")):
                    continue  # a comment line is prose
                code = re.split(r"\s#\s", line, maxsplit=1)[0].rstrip()
                if code.strip():
                    found.append(code)
            elif line and not line[0].isspace():
                found.append(line.split()[0])
    return found


def _in_english(command: str) -> str:
    for flag in LANGUAGE_FLAGS:
        command = command.replace(flag, "")
    return command


def test_the_two_readmes_have_the_same_sections():
    english, portuguese = sections(_readme("README.md")), sections(_readme("README.pt-BR.md"))
    assert portuguese == english, (f"README.md has {len(english)} sections, README.pt-BR.md {len(portuguese)}: "
                                   "give each English ## or ### section its Portuguese one, in the same order")


def test_every_command_of_the_english_readme_is_in_the_portuguese_one():
    portuguese = {_in_english(c).strip() for c in commands(_readme("README.pt-BR.md"))}
    missing = [c for c in commands(_readme("README.md")) if c.strip() not in portuguese]
    assert missing == [], "commands of README.md missing from README.pt-BR.md's code blocks:\n" + "\n".join(missing)


def test_a_command_left_out_or_a_section_merged_is_found():
    english = "## A\n\n```bash\nmake lab    # opens it\nmake test\n```\n\n### B\n\ntext\n"
    portuguese = "## A\n\n```bash\nmake lab EFFITRAIN_LANG=pt-BR   # abre\n```\n\ntexto\n"
    assert sections(english) == ["##", "###"] and sections(portuguese) == ["##"]
    assert [c for c in commands(english) if c not in {_in_english(p) for p in commands(portuguese)}] == ["make test"]


def test_the_portuguese_lesson_table_uses_the_notebooks_titles():
    rows = dict(re.findall(r"^\| (\d\.\d) (.+?) \| `notebooks/pt-BR/", _readme("README.pt-BR.md"), re.M))
    wrong = []
    for path in sorted((ROOT / "notebooks" / "pt-BR").glob("[0-9]_[0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        title = next(line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines()
                     if line.startswith("# "))
        lesson, name = re.fullmatch(r"# Lição (\d\.\d) · (.+)", title).groups()
        if rows.get(lesson) != name:
            wrong.append(f"{lesson}: README {rows.get(lesson)!r}, notebook {name!r}")
    assert wrong == [], "README.pt-BR.md's lesson titles differ from the notebooks':\n" + "\n".join(wrong)
