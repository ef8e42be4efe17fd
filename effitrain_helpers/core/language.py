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

Numbers are written the language's way: a numeric field of ``tr`` (``{n:,}``, ``{x:.3f}``, ``{p:.1%}``) is
formatted by Python's format spec, then its separators are those of the language's locale (Babel's CLDR data):
in pt-BR ``28.996``, ``0,016``, ``12,5%``; English stays exactly ``str.format``. Code that shows a number outside
a message (a table cell) calls :func:`number`, a list of numbers :func:`number_list`. So a number a learner
reads goes into ``tr`` as a field with a format spec, never pre-formatted into an f-string.
"""

from __future__ import annotations

import numbers
import string
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


@lru_cache(maxsize=None)
def separators(lang: str) -> tuple[str, str]:
    """``(decimal, group)`` separators of ``lang`` from Babel's locale data (``("," , ".")`` for pt-BR);
    English's ``(".", ",")`` for a language Babel does not know."""
    if lang == "en":
        return ".", ","
    from babel import Locale, UnknownLocaleError
    from babel.numbers import get_decimal_symbol, get_group_symbol

    try:
        locale = Locale.parse(lang, sep="-" if "-" in lang else "_")
    except (ValueError, UnknownLocaleError):
        return ".", ","
    return get_decimal_symbol(locale), get_group_symbol(locale)


def _is_number(value) -> bool:
    """A real number to write the language's way (a bool is a word, not a number)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(value, spec: str = "", lang: str | None = None) -> str:
    """``format(value, spec)`` with ``lang``'s (default: ``SETTINGS.lang``) decimal and group separators:
    ``number(28996, ",", "pt-BR") == "28.996"``, ``number(0.0164, ".3f", "pt-BR") == "0,016"``. A value that is
    not a number is formatted as it is. The one home of the workbook's number formatting (``tr`` uses it)."""
    text = format(value, spec)
    if not _is_number(value):
        return text
    decimal, group = separators(lang or SETTINGS.lang)
    if (decimal, group) == (".", ","):
        return text
    return text.translate(str.maketrans({".": decimal, ",": group}))


def number_list(values, spec: str = "", lang: str | None = None) -> str:
    """``values`` each written by :func:`number`, joined the language's way: ``", "`` where the decimal
    separator is a point, ``"; "`` where it is a comma (``number_list([0.5, 1.25], ".2f", "pt-BR")`` is
    ``"0,50; 1,25"``, never ``"0,50, 1,25"``). What a lesson prints instead of a Python list (``[0.5, 1.25]``)."""
    lang = lang or SETTINGS.lang
    return ("; " if separators(lang)[0] == "," else ", ").join(number(v, spec, lang) for v in values)


class _LanguageFormatter(string.Formatter):
    """``str.format`` whose numeric fields go through :func:`number` in the formatter's language."""

    def __init__(self, lang: str):
        super().__init__()
        self.lang = lang

    def format_field(self, value, format_spec: str) -> str:
        return number(value, format_spec, self.lang)


def tr(text: str, lang: str | None = None, **fields) -> str:
    """``text`` (an English message or template) in ``lang`` (default: ``SETTINGS.lang``), with ``fields``
    filled in by ``str.format``, numbers with the language's separators (:func:`number`). Without fields the
    text is returned as it is (braces and all)."""
    lang = lang or SETTINGS.lang
    template = catalog(lang).get(text, text)
    if not fields:
        return template
    if lang == "en":
        return template.format(**fields)
    formatter = _LanguageFormatter(lang)
    try:
        return formatter.format(template, **fields)
    except (KeyError, IndexError, ValueError):  # a broken translation: the English never fails (a test checks)
        return formatter.format(text, **fields)


def term(label, terms) -> str:
    """``label`` with the English term of ``terms`` it is, starts or ends with (a key the checks compare:
    ``"optimizer state (bytes)"``, ``"sem data position"``) in the learner's language (``tr`` of the term),
    the longest term first; a label with none of them (or not a string) comes back as it is."""
    if not isinstance(label, str):
        return label
    for word in sorted(terms, key=len, reverse=True):
        if label == word or label.startswith(word + " "):
            return tr(word) + label[len(word):]
        if label.endswith(" " + word):
            return label[: -len(word)] + tr(word)
    return label


def _shortest(value, grouped: bool):
    """A table cell without a format of its own: a float as ``repr`` would write it (``0.25``, not pandas'
    ``0.250000``), an integer (or a float that is one: a byte count in a float column) grouped where the
    language groups digits (pandas then swaps the separators); True/False as yes/no in the language (a column
    that mixes them with numbers, as a transposed table does)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # numpy's bool too
        return tr("yes") if value else tr("no")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, float):
        return format(value, "g")
    if grouped and _is_number(value):
        return format(value, ",")
    return str(value)


def styled(frame, formats=None, terms=(), **options):
    """``frame.style.format(formats, **options)`` as the learner reads it (lessons 1.1, 3.3, 5.1 and 5.3): numbers
    with the language's decimal and group separators (a cell with no format as short as it can be written),
    and the row and column labels and index names that are (or
    start or end with) one of ``terms`` in the learner's language (:func:`term`), a True/False column as
    yes/no in that language, drawn as JupyterLab draws a DataFrame (its ``dataframe`` class: numbers
    right-aligned, as in any table of figures). The frame and its keys stay English: the self-checks compare them."""
    decimal, group = separators(SETTINGS.lang)
    names = [term(n, terms) for n in frame.index.names]
    if formats is None and "precision" not in options:
        formats = lambda value: _shortest(value, group != ",")  # noqa: E731
    styler = frame.rename_axis(index=names).style.format(
        formats, decimal=decimal, thousands=None if group == "," else group, **options
    ).set_table_attributes('class="dataframe"')
    yes_no = [c for c in frame.columns if frame[c].dtype == bool]
    if yes_no:
        styler = styler.format(lambda v: tr("yes") if v else tr("no"), subset=yes_no)
    return styler.format_index(lambda x: term(x, terms), axis=0).format_index(lambda x: term(x, terms), axis=1)
