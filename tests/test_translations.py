"""Translations (README, Contributing, Translations): every translated notebook complete and in step with the English
(fingerprints, cell ids, code untouched but for comments and strings), the committed translated notebooks what the
builder makes, the package's messages translated for every lesson declared translated, check() answering in the
learner's language, and the language setting. Fast tier: nothing here starts a process, except the one `slow` test
that executes the Portuguese student editions."""

import copy
import json
import re
import sys
import warnings
from pathlib import Path

import nbformat
import pytest

from effitrain_helpers.cli import main
from effitrain_helpers.core import language
from effitrain_helpers.core.language import tr
from effitrain_helpers.core.settings import SETTINGS, Settings, check_lang
from effitrain_helpers.teach import translations as t
from effitrain_helpers.teach.editions import make_edition
from effitrain_helpers.teach.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, ____

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import notebook_outputs  # noqa: E402

LANG = "pt-BR"
TRANSLATED = t.translated_notebooks(LANG)
PILOT = ["00_start_here.ipynb", "1_1_prepare_models.ipynb"]


def _english(name):
    return nbformat.read(ROOT / "notebooks" / name, as_version=4)


def _built(name):
    return nbformat.read(ROOT / "notebooks" / LANG / name, as_version=4)


@pytest.fixture
def portuguese(monkeypatch):
    """This process answers in Brazilian Portuguese for one test (and in English again after it)."""
    monkeypatch.setattr(SETTINGS, "lang", LANG)
    monkeypatch.setenv("EFFITRAIN_LANG", LANG)


# ---------------------------------------------------------------- the translated notebooks

def test_the_pilot_is_declared_translated():
    assert set(PILOT) <= set(TRANSLATED)


@pytest.mark.parametrize("name", TRANSLATED)
def test_every_cell_is_translated_and_in_step_with_the_english(name):
    assert t.notebook_problems(_english(name), name, t.Translation.read(name, LANG)) == []


@pytest.mark.parametrize("name", TRANSLATED)
def test_the_committed_notebook_is_what_the_builder_makes(name):
    path = ROOT / "notebooks" / LANG / name
    assert path.exists(), f"notebooks/{LANG}/{name} is missing: python tools/translations.py build"
    assert t.built_sources(_built(name)) == t.built_sources(t.build_notebook(_english(name), name, LANG)), (
        f"notebooks/{LANG}/{name} is stale: python tools/translations.py build {name}")


@pytest.mark.parametrize("name", TRANSLATED)
def test_the_translated_notebook_follows_the_outputs_policy_and_sets_its_language(name):
    nb = _built(name)
    assert notebook_outputs.problems(nb, f"{LANG}/{name}") == []
    assert nb.metadata["effitrain"]["lang"] == LANG
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.get("id") == t.LANG_CELL_ID and first_code.source == t.set_lang_line(LANG)
    assert sum("set_lang(" in c.source for c in nb.cells if c.cell_type == "code") == 1
    english = [c.source for c in _english(name).cells if c.cell_type == "code"]
    assert len([c for c in nb.cells if c.cell_type == "code"]) == len(english) + 1  # the lesson's own cells kept


def _stale_copy(name, edit):
    english = _english(name)
    changed = copy.deepcopy(english)
    edit(changed)
    return t.notebook_problems(changed, name, t.Translation.read(name, LANG))


def test_an_edited_english_cell_makes_its_translation_fail_naming_notebook_and_cell():
    name = "1_1_prepare_models.ipynb"
    index = next(i for i, c in enumerate(_english(name).cells) if c.id == "b3a26147")

    def edit(nb):
        nb.cells[index].source = nb.cells[index].source.replace("a handful of", "a few")

    (problem,) = _stale_copy(name, edit)
    assert problem.startswith(f"{name}, cell {index} (id b3a26147, markdown): the English changed")
    assert "refresh 1.1 b3a26147" in problem


def test_an_edited_same_cell_a_new_cell_and_a_removed_cell_are_all_named():
    name = "1_1_prepare_models.ipynb"

    def edit(nb):
        same = next(c for c in nb.cells if c.id == "d23ffc29")  # `same: true`: a code edit must be looked at too
        same.source += "\nprint(hw)"
        new = nbformat.v4.new_markdown_cell("A new paragraph.")
        new.id = "brand-new"
        nb.cells.insert(3, new)
        nb.cells = [c for c in nb.cells if c.id != "3f38439b"]

    problems = "\n".join(_stale_copy(name, edit))
    assert "(id d23ffc29, code): the English changed" in problems
    assert "cell 3 (id brand-new, markdown): no translation" in problems
    assert "cell id 3f38439b is not in 1_1_prepare_models.ipynb any more" in problems


def test_a_translation_that_changes_code_or_is_still_todo_is_refused(monkeypatch):
    name = "00_start_here.ipynb"
    translation = t.Translation.read(name, LANG)
    entry = translation.cells["704cf6bb"]
    entry["pt"] = entry["pt"].replace("SETTINGS.size", "SETTINGS.cache_dir", 1)
    translation.cells["a7b66619"]["todo"] = True
    problems = "\n".join(t.notebook_problems(_english(name), name, translation))
    assert "(id 704cf6bb, code): the translation changes code" in problems
    assert "(id a7b66619, markdown): not translated yet" in problems


def test_an_unquoted_id_that_yaml_reads_as_a_number_is_refused(monkeypatch, tmp_path):
    path = tmp_path / "1_1_prepare_models.yaml"
    path.write_text("notebook: 1_1_prepare_models.ipynb\ncells:\n- id: 06777667\n  en: 'abc'\n  same: true\n")
    monkeypatch.setattr(t, "translation_path", lambda notebook, lang: path)
    with pytest.raises(ValueError, match=r"1834935 was read as a number.*Fix: quote it"):
        t.Translation.read("1_1_prepare_models.ipynb", "pt-BR")
    path.write_text(path.read_text().replace("06777667", "'06777667'"))
    assert list(t.Translation.read("1_1_prepare_models.ipynb", "pt-BR").cells) == ["06777667"]


def test_a_translated_code_line_longer_than_the_english_allows_is_named():
    """Translated comments and strings run longer than the English: a code line over 100 characters is a problem
    (naming lesson, cell and length), as it is in the English notebooks."""
    name, cell_id = "2_1_train_with_trainer.ipynb", "b846ed5a"
    english = _english(name)
    index = next(i for i, c in enumerate(english.cells) if c.id == cell_id)
    translation = t.Translation.read(name, LANG)
    assert t.notebook_problems(english, name, translation) == []
    lines = translation.cells[cell_id]["pt"].splitlines()
    translation.cells[cell_id]["pt"] += "\n# " + "x" * 98  # a comment: code unchanged, 100 characters
    assert t.notebook_problems(english, name, translation) == []
    translation.cells[cell_id]["pt"] += "x"
    (problem,) = t.notebook_problems(english, name, translation)
    assert problem.startswith(f"{name}, cell {index} (id {cell_id}, code): line {len(lines) + 1} of the translation "
                              "is 101 characters long (code lines keep to 100). Fix: rewrap it in "
                              "translations/pt-BR/2_1_train_with_trainer.yaml")

    for english in sorted((ROOT / "notebooks").glob("*.ipynb")):  # the English keeps to the same limit
        cells = nbformat.read(english, as_version=4).cells
        assert [(english.name, c.id, n) for c in cells if c.cell_type == "code"
                for n, _ in t.long_lines(c.source)] == []


@pytest.mark.parametrize("translated, allowed", [
    ('print("hello")  # greet', True),
    ('print("olá")  # cumprimenta', True),
    ('x = 1\nprint(f"{x:.1f} units of {x!r}")', True),
    ('x = 1\nprint(f"{x!r} vezes, {x:.1f} unidades")', True),  # fields may move in the sentence
    ('print("hello", end="")', False),
    ('x = 2\nprint(f"{x:.1f} units of {x!r}")', False),
    ('x = 1\nprint(f"{x:.2f} units of {x!r}")', False),  # a format spec is code
    ('y = 1\nprint(f"{y:.1f} units of {y!r}")', False),
    ('print("hello"', False),
])
def test_code_may_change_only_in_comments_and_strings(translated, allowed):
    english = 'print("hello")' if "x" not in translated and "y" not in translated else \
        'x = 1\nprint(f"{x:.1f} units of {x!r}")'
    assert (t.code_change(english, translated) is None) == allowed


def test_exercise_markers_survive_translation():
    for name in TRANSLATED:
        student = make_edition(_built(name), name, "student")
        text = "\n".join(c.source for c in student.cells)
        assert "BEGIN SOLUTION" not in text and "____" in text and student.metadata["effitrain"]["lang"] == LANG
        assert student.cells[0].source.startswith("*Edição do aluno")


def test_a_new_translation_file_lists_every_cell_and_refresh_takes_the_new_fingerprint(monkeypatch, tmp_path):
    import translations as tool

    monkeypatch.setattr(t, "TRANSLATIONS", tmp_path)
    name = "1_2_preprocess_images_and_audio.ipynb"
    assert tool.new("1.2", LANG) == 0
    english = _english(name)
    translation = t.Translation.read(name, LANG)
    assert list(translation.cells) == [c.id for c in english.cells]
    todo = [c for c in english.cells if translation.cells[c.id].get("todo")]
    assert todo and all(translation.cells[c.id]["pt"] == c.source for c in todo), "the English, to replace"
    assert all(translation.cells[c.id].get("same") for c in english.cells if c.id not in {x.id for x in todo})
    problems = t.notebook_problems(english, name, translation)
    assert len(problems) == len(todo) and all("not translated yet" in p for p in problems)
    path = t.translation_path(name, LANG)
    first = english.cells[0]
    # ids and fingerprints are written quoted: unquoted, an id like 06777667 would load as an (octal) number
    assert f"- id: '{first.id}'\n  en: '{t.fingerprint(first.source)}'" in path.read_text()
    path.write_text(path.read_text().replace(f"en: '{t.fingerprint(first.source)}'", "en: '000000000000'", 1))
    assert "the English changed" in t.notebook_problems(english, name, t.Translation.read(name, LANG))[0]
    assert tool.refresh("1.2", [first.id], LANG) == 0
    assert t.Translation.read(name, LANG).cells[first.id]["en"] == t.fingerprint(first.source)


# ---------------------------------------------------------------- the package's messages

def test_every_message_of_the_translated_lessons_and_the_machinery_is_translated():
    report = t.message_problems(LANG)
    assert report.problems == []
    if report.untranslated:  # lessons not declared translated yet: a list for the translators, not a failure
        warnings.warn(f"{LANG}: package messages not translated yet (lessons not declared translated): "
                      + "; ".join(f"{m}: {len(x)}" for m, x in report.untranslated.items()), stacklevel=1)


def test_every_checkers_messages_go_through_tr_and_one_that_does_not_is_found(monkeypatch, tmp_path):
    import importlib
    import pkgutil

    from effitrain_helpers.teach.verdicts import CHECKS_PACKAGE

    for info in pkgutil.iter_modules(importlib.import_module(CHECKS_PACKAGE).__path__):
        assert t.unrouted_verdicts(f"teach.checks.{info.name}") == [], info.name
    checks = tmp_path / "effitrain_helpers" / "teach" / "checks"
    checks.mkdir(parents=True)
    (checks / "lesson_9_9.py").write_text('raise Incorrect(tr("routed"))\nraise Incorrect(f"not routed: {x}")\n')
    monkeypatch.setattr(t, "PACKAGE", tmp_path / "effitrain_helpers")
    assert t.unrouted_verdicts("teach.checks.lesson_9_9") == [
        "effitrain_helpers/teach/checks/lesson_9_9.py:2: Incorrect(...) without tr()"]


def test_a_changed_english_message_leaves_its_translation_stale(monkeypatch):
    messages, bad = t.package_messages()
    old = "Hint {n} of {total}: {hint}"
    messages["teach.exercises"] = [m.replace(old, "Hint {n}/{total}: {hint}") for m in messages["teach.exercises"]]
    monkeypatch.setattr(t, "package_messages", lambda: (messages, bad))
    problems = "\n".join(t.message_problems(LANG).problems)
    assert "no pt-BR translation of 'Hint {n}/{total}: {hint}'" in problems
    assert f"{old!r} is not a message of teach.exercises any more" in problems


def test_one_english_message_has_one_translation_in_every_file(monkeypatch):
    """The catalog shows one translation of an English text: two files translating it differently is a problem."""
    read = t.read_entries
    en = "pass your function itself; you gave {fn!r}."

    def entries(path):
        found = read(path)
        if path.name == "teach.checks.lesson_3_2.yaml":
            found = [dict(e, pt="passe a sua própria função; você passou {fn!r}.") if e["en"] == en else e
                     for e in found]
        return found

    assert not [p for p in t.message_problems(LANG).problems if "translated differently" in p]
    monkeypatch.setattr(t, "read_entries", entries)
    assert [p for p in t.message_problems(LANG).problems if "translated differently" in p] == [
        f"translations/pt-BR/messages/teach.checks.lesson_3_2.yaml: {en!r} is translated differently in "
        "teach.checks.lesson_1_2.yaml (only one is shown). Fix: use one translation in both"]


def test_a_translation_must_keep_the_fields_and_tr_falls_back_to_english(monkeypatch, portuguese):
    monkeypatch.setattr(language, "catalog", lambda lang: {"{n} apples": "{m} maçãs", "apples": "maçãs"})
    assert tr("apples") == "maçãs" and tr("{n} apples", n=3) == "3 apples", "a broken template never fails"
    assert tr("pears") == "pears" and tr("{n} pears", n=2) == "2 pears"
    assert t._fields("{n!r} de {total:,}") == {"n!r", "total"}


def test_a_field_that_tr_takes_as_its_own_argument_is_named():
    from effitrain_helpers.teach.translations import reserved_fields

    assert reserved_fields("use {lang} for {text!r}, {n:,} of them") == ["lang", "text"]
    assert reserved_fields("{language} and {texts}") == []


def test_tr_needs_a_literal_template():
    _, bad = t.package_messages()
    assert bad == []
    literals, wrong = t._literal_calls(Path(__file__))  # this file calls tr("...") with literals only
    assert "apples" in literals and wrong == []


# ---------------------------------------------------------------- check() in the learner's language

def test_lesson_3_3_answers_and_draws_in_portuguese(portuguese):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from effitrain_helpers.teach import plots
    from effitrain_helpers.teach.checks.lesson_3_3 import q1, q2

    assert q1.evaluate(torch.finfo(torch.float16).eps).message.startswith("esse é o intervalo do float16")
    assert q2.evaluate(3).message == "3 não é uma potência de dois; o GradScaler usa potências de dois (desfazer a " \
                                     "escala fica exato)."
    assert q2.evaluate(1000).message.startswith("1.000 não é uma potência de dois")  # issue 46 saw "1000.0"
    figure = plots.plot_float_formats()
    assert figure.axes[0].get_title() == "Os bits de cada formato de número (uma caixa por bit)"
    plt.close(figure)


def test_check_hint_and_solution_answer_in_portuguese(portuguese, monkeypatch, tmp_path):
    from effitrain_helpers.teach.checks.lesson_1_1 import STEP_NAMES, q3, q4
    from effitrain_helpers.teach.checks.start_here import q1

    assert repr(q4.evaluate(____)).startswith("⏳ Não tentado (1.1 q4: os quatro passos em ordem): troque o ____")
    wrong = q4.evaluate(list(STEP_NAMES))
    assert wrong.status == INCORRECT and wrong.message.startswith("a posição 2 está errada: um dispositivo só calcula")
    import torch
    from torch.utils import benchmark

    def half_the_flops(n, dtype):
        a = torch.randn(n, n, dtype=dtype)
        return n**3 / benchmark.Timer("a @ a", globals={"a": a}).blocked_autorange().median / 1e9

    assert q3.evaluate(half_the_flops).message.startswith("errado por um fator de 2")
    right = q1.evaluate(4 * 1000 * 1000)
    assert right.status == CORRECT and "✅ Correto" in right._repr_markdown_()
    assert "dê a resposta em bytes" in q1.evaluate(4.0).message
    shown = []
    monkeypatch.setattr("effitrain_helpers.teach.exercises._show", shown.append)
    monkeypatch.setenv("EFFITRAIN_SOLUTIONS", "off")
    q1.hint(1)
    q1.solution()
    assert shown[0] == "Dica 1 de 3: Uma matriz 1000 x 1000 guarda um milhão de números."
    assert shown[1].startswith("As soluções estão desligadas nesta turma (EFFITRAIN_SOLUTIONS está desligado")


def test_a_solution_shows_its_comments_in_the_learners_language(portuguese, monkeypatch):
    """Only comments and strings change: the code of a solution reads the same in both languages."""
    from effitrain_helpers.teach.checks.lesson_3_1 import q1
    from effitrain_helpers.teach.translations import code_change, has_comment

    shown = []
    monkeypatch.setattr("effitrain_helpers.teach.exercises._show", shown.append)
    monkeypatch.setenv("EFFITRAIN_SOLUTIONS", "on")
    q1.solution()
    assert "# não é o k-ésimo: acumula, sem all-reduce" in shown[0] and "not the k-th" not in shown[0]
    assert code_change(q1.solution_code, shown[0].split("\n\n", 1)[1]) is None
    assert has_comment("x = 1  # one") and not has_comment('x = "# not a comment"')


def test_progress_table_speaks_the_learners_language(portuguese, tmp_path):
    from effitrain_helpers.teach.progress import progress_table

    table = progress_table(tmp_path / "none.jsonl")
    assert repr(table).splitlines()[0].split() == ["lição", "exercícios", "corretos", "tentados", "não", "tentados"]
    assert "<th style=\"text-align:left\">lição</th>" in table._repr_html_()


def test_the_start_page_map_uses_the_translated_titles(portuguese):
    from effitrain_helpers.teach.lessons import lesson_table, markdown_table

    text = markdown_table(lesson_table())
    assert "| lição | título |" in text and "Prepare modelos com AutoModel e Accelerator" in text


class _Recorder:
    def __init__(self, exercise):
        self.exercise, self.results = exercise, []

    def check(self, *args, **kwargs):
        self.results.append(self.exercise.evaluate(*args, **kwargs))


@pytest.mark.parametrize("name, module, exercise", [
    ("00_start_here.ipynb", "start_here", "q1"),
    ("1_1_prepare_models.ipynb", "lesson_1_1", "q3"),
    ("1_1_prepare_models.ipynb", "lesson_1_1", "q4"),
    ("3_3_mixed_precision.ipynb", "lesson_3_3", "q1"),
    ("3_3_mixed_precision.ipynb", "lesson_3_3", "q2"),
    ("6_3_zero_by_hand.ipynb", "lesson_6_3", "q1"),
    ("6_4_split_the_layer_split_the_model.ipynb", "lesson_6_4", "q1"),
])
def test_a_portuguese_student_exercise_answers_not_attempted_then_correct_in_portuguese(portuguese, name, module,
                                                                                      exercise):
    import importlib

    from effitrain_helpers.teach.editions import exercise_cells

    solved = _built(name)
    student = make_edition(solved, name, "student")
    q = getattr(importlib.import_module(f"effitrain_helpers.teach.checks.{module}"), exercise)
    cell = next(c.source for c in student.cells if c.cell_type == "code" and f"{exercise}.check(" in c.source)
    index, (region,) = next((i, r) for i, r in exercise_cells(solved, name) if f"{exercise}.check(" in
                            solved.cells[i].source)

    def run(code):
        recorder = _Recorder(q)
        exec("import torch\nfrom torch import nn\nSTEP_NAMES = ()\n" + code, {exercise: recorder, "____": ____})  # noqa: S102 - the cell
        (result,) = recorder.results
        return result

    blank = run(cell)
    assert blank.status == NOT_ATTEMPTED and repr(blank).startswith("⏳ Não tentado")
    done = run(cell.replace("\n".join(region.starter), "\n".join(region.solution)))
    assert done.status == CORRECT and repr(done).startswith("✅ Correto (")


# ---------------------------------------------------------------- the setting, editions and the learner's copy

def test_the_language_setting(monkeypatch):
    monkeypatch.delenv("EFFITRAIN_LANG", raising=False)
    assert Settings.from_env().lang == "en"
    monkeypatch.setenv("EFFITRAIN_LANG", "pt-br")
    assert Settings.from_env().lang == "pt-BR"
    monkeypatch.setenv("EFFITRAIN_LANG", "fr")
    with pytest.raises(ValueError) as err:
        Settings.from_env()
    assert str(err.value).startswith("EFFITRAIN_LANG='fr' is not a language of the workbook; allowed: en, pt-BR.")
    assert "Fix: export EFFITRAIN_LANG=pt-BR" in str(err.value) and "\n" not in str(err.value)
    assert check_lang(" PT-br ") == "pt-BR"


def test_set_lang_reaches_launched_processes(monkeypatch):
    monkeypatch.setattr(SETTINGS, "lang", "en")
    monkeypatch.setenv("EFFITRAIN_LANG", "en")
    SETTINGS.set_lang("pt-BR")
    import os

    assert SETTINGS.lang == "pt-BR" and os.environ["EFFITRAIN_LANG"] == "pt-BR"
    with pytest.raises(ValueError, match="'de'"):
        SETTINGS.set_lang("de")


def test_editions_and_the_learners_copy_come_in_portuguese(tmp_path, capsys):
    out = tmp_path / "classroom"
    assert main(["editions", "--out", str(out), "--lang", "pt-BR", "--no-solutions"]) == 0
    assert f"{len(TRANSLATED)} notebooks translated" in capsys.readouterr().out
    english = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    for edition in ("student", "instructor"):
        assert sorted(p.name for p in (out / edition).glob("*.ipynb")) == english
        for name in english:
            nb = nbformat.read(out / edition / name, as_version=4)
            assert (nb.metadata["effitrain"].get("lang") == LANG) == (name in TRANSLATED), (edition, name)
    notes = nbformat.read(out / "instructor" / "1_1_prepare_models.ipynb", as_version=4)
    assert any(c.source.startswith("**Notas para o instrutor**") for c in notes.cells)
    book = tmp_path / "book"
    assert main(["workbook", "--dir", str(book), "--lang", "pt-BR"]) == 0
    start = nbformat.read(book / "00_start_here.ipynb", as_version=4)
    assert start.cells[1].source.startswith("# Comece aqui") and "matrix_bytes = ____" in json.dumps(start)
    with pytest.raises(SystemExit) as exit_code:
        main(["workbook", "--dir", str(book), "--lang", "fr"])
    err = capsys.readouterr().err.strip()
    assert exit_code.value.code == 2 and "\n" not in err
    assert "argument --lang: 'fr' is not a language of the workbook; allowed: en, pt-BR. Fix: use pt-BR" in err


# ---------------------------------------------------------------- the glossary

def _kept_in_english() -> list[str]:
    text = (ROOT / "translations" / LANG / "GLOSSARY.md").read_text(encoding="utf-8")
    section = text.split("## Kept in English", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| `?([^|`]+?)`? \|", section, re.M)
            if m.group(1).strip() not in ("English", "---")]


def test_terms_kept_in_english_stay_in_english_where_they_are_used():
    terms = _kept_in_english()
    assert {"rank", "world size", "all-reduce", "checkpoint"} <= set(terms)
    lost = []
    for name in TRANSLATED:
        translation = t.Translation.read(name, LANG)
        for cell in _english(name).cells:
            pt = translation.text(cell.id)
            if pt is None:
                continue
            lost += [f"{name} {cell.id}: {term}" for term in terms
                     if re.search(rf"\b{re.escape(term)}\b", cell.source, re.I) and term.lower() not in pt.lower()]
    assert lost == []


# ---------------------------------------------------------------- the student editions, executed

@pytest.mark.slow
@pytest.mark.parametrize("name", [n if n in PILOT else pytest.param(n, marks=pytest.mark.exhaustive)
                                  for n in TRANSLATED])  # every run: the pilot; make test-all: every lesson
def test_portuguese_student_notebook_runs_to_the_end_with_every_exercise_not_attempted(tmp_path, name):
    from nbclient import NotebookClient

    student = make_edition(_built(name), name, "student")
    NotebookClient(student, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    cells = [c for c in student.cells if c.cell_type == "code" and re.search(r"\bq\d+\.check\(", c.source)]
    assert cells
    for cell in cells:
        shown = json.dumps(cell.outputs, ensure_ascii=False)
        assert "Não tentado" in shown and "Not attempted" not in shown, (name, cell.source, shown)
        assert "Incorreto" not in shown and "✅" not in shown and "error" not in shown


def test_a_cell_magic_line_stays_and_the_python_below_it_may_change_only_in_strings():
    english = '%%writefile {script}\nprint("rank 0 of world size 2")  # one line per rank'
    assert t.code_change(english, '%%writefile {script}\nprint("rank 0 de world size 2")  # uma linha por rank') is None
    assert "cell magic" in t.code_change(english, '%%writefile other.py\nprint("rank 0 de world size 2")')
    assert "changes code" in t.code_change(english, '%%writefile {script}\nprint("rank", 0)')
