"""Which language does the workbook speak? ``tr(text)``: the package's messages in the learner's language.

English is the source: every message is written in English in the code, as a template when it carries values
(``tr("Hint {n} of {total}: {hint}", n=2, total=3, hint=...)``, ``str.format`` fields, format specs
allowed). A translation is a catalog of ``{en: English template, pt: translated template}`` entries, one YAML
file per module of the package, in ``translations/<language>/messages/<module>.yaml`` (for example
``translations/pt-BR/messages/teach.exercises.yaml``). The English text is the key, so an English message edited
in the code no longer finds its old translation: ``tests/test_translations.py`` names it (and the entry left
behind), and ``python tools/translations.py status`` lists what is missing.

The language is ``SETTINGS.lang`` (``EFFITRAIN_LANG``, ``en`` by default; a translated notebook sets it in its
first code cell), read at each call, or the ``lang`` argument. A message with no translation is shown in
English: a missing translation never breaks a check. Used by ``teach.exercises`` (verdicts, hints, solutions),
the lessons' checkers, ``teach.progress`` and ``teach.editions``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from effitrain_helpers.core.settings import SETTINGS

TRANSLATIONS = Path(__file__).resolve().parents[2] / "translations"  # next to notebooks/, like the lessons
MESSAGES = "messages"  # translations/<language>/messages/<module>.yaml


def messages_folder(lang: str) -> Path:
    """The folder of ``lang``'s message files (one YAML file per module of the package)."""
    return TRANSLATIONS / lang / MESSAGES


def read_entries(path: Path) -> list[dict]:
    """The ``{en, pt}`` entries of one message file ([] when it does not exist); ValueError naming a bad one."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(e, dict) and isinstance(e.get("en"), str)
                                             and isinstance(e.get("pt"), str) for e in data):
        raise ValueError(f"{path}: a message file is a YAML list of entries with two texts, `en:` (the English "
                         "template, exactly as in the code) and `pt:` (its translation). Fix the entries that "
                         "are not.")
    return data


def _usable_entries(path: Path) -> list[dict]:
    """:func:`read_entries`, or [] for a file that cannot be read: a broken translation file never breaks a
    learner's check() (its messages show in English; ``tests/test_translations.py`` names the file and line)."""
    import yaml

    try:
        return read_entries(path)
    except (OSError, ValueError, yaml.YAMLError):
        return []


@lru_cache(maxsize=None)
def catalog(lang: str) -> dict[str, str]:
    """``{English template: translated template}`` of every message file of ``lang`` ({} for English)."""
    if lang == "en":
        return {}
    return {e["en"]: e["pt"] for path in sorted(messages_folder(lang).glob("*.yaml")) for e in _usable_entries(path)
            if e["pt"].strip()}  # an empty `pt:` is a message still to translate


def msg(text: str) -> str:
    """Marks an English message where it is defined, to be translated where it is shown (``tr(_ICONS[s])``):
    returns ``text`` unchanged. The translation tests collect the literals of ``msg(...)`` and ``tr(...)``."""
    return text


def tr(text: str, lang: str | None = None, **fields) -> str:
    """``text`` (an English message or template) in ``lang`` (default: ``SETTINGS.lang``), with ``fields``
    filled in by ``str.format``. Without fields the text is returned as it is (braces and all)."""
    template = catalog(lang or SETTINGS.lang).get(text, text)
    if not fields:
        return template
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError):  # a broken translation: the English never fails (a test checks)
        return text.format(**fields)
