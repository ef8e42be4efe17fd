"""What counts as English on a Brazilian learner's screen (issue 29), in one home: tests/test_portuguese_screens.py
tests it and the executed scans use it, and the root conftest.py applies it to every output of the pt-BR lessons in
``SCREENED`` while nbval runs them (so each CI run scans them at no extra execution).

The English words are the short labels of the message catalogs (1-4 words, no fields; letters, digits, hyphens and
commas, so "ZeRO-1 by hand" counts) whose translation differs and which never occur in any Portuguese text of the
catalogs (so "no", "batch" or "checkpoint", also Portuguese or kept in English by the glossary, are not flagged),
plus the benchmark table's column names. A Python list of floats printed as it is (``[0.533, 0.326]``) counts too:
its decimals are English, and its commas read as decimal commas on a Portuguese screen (``language.number_list``
writes ``[0,533; 0,326]``). A lone English decimal is not flagged: ``1.198`` is also how pt-BR groups thousands,
and a lesson may show a library's own table or a configuration file (torch's profiler, a model's JSON config).

Two things on screen are not the workbook's to translate: a dataset's sentences, printed quoted
(:func:`without_quoted_sentences`), and the label of a library's own progress bar (transformers'
"Loading weights" while ``from_pretrained`` reads a checkpoint), listed in ``LIBRARY_BARS`` with the file that
prints it. The scan leaves out that label only where it starts a tqdm bar (``Loading weights:  0%|``), so the
same words printed by the workbook are still flagged. A label the Portuguese lesson itself writes as code (in
backticks in its prose: 5.2's `optimizer step`, the name the learner gives a profiler range in
``record_function``) is shown as typed, so the scan of that lesson leaves it out."""

import functools
import re
from pathlib import Path

import nbformat

from effitrain_helpers.core.language import catalog

LANG = "pt-BR"
ALWAYS = ("median ms", "reliable", "spread", "min-max ms", "gradient accumulation", "mixed precision")
ENGLISH_NUMBER_LIST = re.compile(r"\[\s*-?\d+\.\d+(?:e[-+]?\d+)?(?:\s*,\s*-?\d+\.\d+(?:e[-+]?\d+)?)*\s*\]")
LIBRARY_BARS = {"Loading weights": "transformers/core_model_loading.py"}  # label: the file that prints it
# The pt-BR lessons that show no English: every one of them; nbval fails any of their cells whose output does
# (conftest.py).
SCREENED = tuple(sorted(p.name for p in (Path(__file__).resolve().parents[1] / "notebooks" / LANG).glob("*.ipynb")))
# A quoted sentence (four words or more between quotes) is data shown as it is, e.g. 1.3's English sentence pairs
# ('Dennis loaded a faster data loader in 2024.', or in double quotes when it holds an apostrophe, as repr writes
# "the company 's long-term growth"): the dataset's text, not the workbook's.
QUOTED = re.compile(r"""(?<!\w)(?:'[^'\n]*'|"[^"\n]*")(?!\w)""")  # linear: no nested repeats to backtrack on


def without_quoted_sentences(text: str) -> str:
    """``text`` less every quoted run of four words or more (three spaces or more between its quotes)."""
    return QUOTED.sub(lambda m: "" if sum(c.isspace() for c in m.group(0)) >= 3 else m.group(0), text)


@functools.cache
def english_words() -> tuple[str, ...]:
    """The workbook's English labels a pt-BR screen must not show."""
    pt_text = " ".join(catalog(LANG).values()).lower()
    words = {en for en, pt in catalog(LANG).items()
             if "{" not in en and 1 <= len(en.split()) <= 4 and len(en) > 3 and en.strip() != pt.strip()
             and re.fullmatch(r"[A-Za-z][A-Za-z0-9 ,-]*", en)
             and not re.search(rf"(?<![\w`]){re.escape(en.lower())}(?![\w`])", pt_text)}
    return tuple(sorted(words | set(ALWAYS)))


# The command line's screens (tests/test_portuguese_screens.py) are the workbook's own prose from end to end, so
# they are held to more: no common English word (below, none of them Portuguese) and no number written the
# English way (ENGLISH_NUMBER), outside the words a test lists as code (options, values, library names).
ENGLISH_PROSE = frozenset("""
    the of and with per each every from this that which what only also is are to in or for at by be not into
    than then when where while your yours its it was were has have does can cannot must should would will
    default usage options optional positional arguments argument error invalid choice choose required show help
    message exit print prints write wrote writes run runs number samples processes steps measured theory
    disjoint seen repeated differences ratio ready folder file files none yes fix allowed missing found
    students rows kept fresh copy lessons exercises checked markers note
    """.split())
# 0.5002, 3.92, 14.00 (a decimal point before 1, 2 or 4+ digits: pt-BR writes 0,5002; a point before exactly 3
# digits is how pt-BR groups thousands), 1,622,928 (English thousands groups), 99.5% (a percentage)
ENGLISH_NUMBER = re.compile(r"(?<![\w.])\d+\.\d+%|(?<![\w.])\d+\.(?:\d{1,2}|\d{4,})(?![\w.])"
                            r"|(?<![\w.,])\d{1,3}(?:,\d{3}){2,}(?![\w,])")


def english_prose_in(text: str, code: frozenset[str] = frozenset()) -> list[str]:
    """The common English words (:data:`ENGLISH_PROSE`, whole words in lower or title case, not inside an
    option, a path, code quotes or a CSV header such as ``file,student``) and English-written numbers
    (:data:`ENGLISH_NUMBER`) in ``text``, except the words and numbers in ``code`` (lower case); then what
    :func:`english_in` finds."""
    word = r"(?<![\w\-./$`'\"<=_{])(?<!\w,)[A-Za-z]+(?![\w\-/`'\"_>=(}])(?!,\w)"
    words = [m.group(0) for m in re.finditer(word, text)
             if m.group(0).lower() in ENGLISH_PROSE and m.group(0).lower() not in code
             and not m.group(0).isupper()]  # an option's METAVAR (``--processes PROCESSES``) is its name
    numbers = [n for n in ENGLISH_NUMBER.findall(text) if n not in code]
    options = re.sub(r"(?<![\w-])--?[A-Za-z][\w-]*", " ", text)  # --label-column is a name, not words
    return sorted(set(words + numbers + english_in(options, code)))


def english_in(text: str, code: frozenset[str] = frozenset()) -> list[str]:
    """The English labels found in ``text`` (whole words, any case), a library's progress bar label and the
    labels in ``code`` (what the lesson writes as code, lower case) left out, then its lists of English
    decimals (``[0.533, 0.326]``, :data:`ENGLISH_NUMBER_LIST`)."""
    for label in LIBRARY_BARS:
        text = re.sub(rf"(?m)^{re.escape(label)}(?=: *\d+%\|)", "", text)
    text = without_quoted_sentences(text)
    return [w for w in english_words()
            if w.lower() not in code and re.search(rf"(?<![\w`'\"]){re.escape(w)}(?![\w`'\"])", text, re.I)
            ] + ENGLISH_NUMBER_LIST.findall(text)


@functools.cache
def code_words(path: Path) -> frozenset[str]:
    """What the lesson at ``path`` writes as code in its prose (between backticks), lower case."""
    prose = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    return frozenset(m.lower() for text in prose for m in re.findall(r"`([^`\n]+)`", text))


def output_texts(outputs: list) -> list[str]:
    """The texts a learner reads in a cell's outputs (nbformat dicts): streams, plain text, HTML and markdown."""
    texts = []
    for out in outputs:
        if "text" in out:
            texts.append(out["text"] if isinstance(out["text"], str) else "".join(out["text"]))
        for kind in ("text/plain", "text/html", "text/markdown"):
            if kind in out.get("data", {}):
                value = out["data"][kind]
                texts.append(value if isinstance(value, str) else "".join(value))
    return texts


def screened(path: Path) -> bool:
    """Whether the notebook at ``path`` is a pt-BR lesson whose outputs must show no English."""
    return path.parent.name == LANG and path.name in SCREENED


def english_in_outputs(outputs: list, code: frozenset[str] = frozenset()) -> list[str]:
    """The English labels in a cell's outputs (``code`` as in ``english_in``), each once, sorted."""
    return sorted({word for text in output_texts(outputs) for word in english_in(text, code)})
