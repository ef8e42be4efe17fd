"""Every error a learner can reach speaks the learner's language (issue 46): a ``raise`` in the helpers whose
message is written in the code (a string or an f-string) passes it through ``tr`` (or ``msg``), so that it has a
pt-BR translation (tests/test_translations.py checks that every ``tr`` template has one), or is listed below as
internal, with the reason no learner reads it. A message passed on from elsewhere (``raise X(str(err))``,
``raise X(why)``) is translated where it is written."""

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "effitrain_helpers"

# (module, exception, the message's first words; "" for every raise of that exception in the module): why not tr
INTERNAL = {
    ("teach/checks/lesson_8_4.py", "RuntimeError", "split sizes do not match"): "stops the learner's dispatch "
        "before gloo in the checker's own processes; the checker catches it and shows its own translated message",
    ("core/language.py", "ValueError", ""): "a broken message file: the translators' (tests/test_translations.py "
                                            "names it); a learner's check() reads a broken file as no translation",
    ("teach/translations.py", "ValueError", ""): "the translation files and the builder: the translators' tool",
    ("teach/editions.py", "MarkerError", ""): "the exercise markers of the source notebooks: the workbook's authors "
                                              "(`effitrain editions --check`, tests/test_editions.py)",
    ("teach/checks/lesson_5_3.py", "RuntimeError", "NOT_HANDED_OVER"): "a marker a rank raises for 5.3 q5's "
                                                                        "checker, which answers with a tr verdict",
    ("processes/launch_worker.py", "RuntimeError", "process group is broken"): "an invariant of torch.distributed "
                                                                               "(a bug of the launcher if ever seen)",
}


def _routed(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and (getattr(n.func, "id", None) or getattr(n.func, "attr", None))
               in ("tr", "msg") for n in ast.walk(node))


def _written_here(node: ast.AST) -> bool:
    """A message written in the code: a string, an f-string, or a sum with one of them."""
    if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return True
    return isinstance(node, ast.BinOp) and (_written_here(node.left) or _written_here(node.right))


@functools.cache  # two tests read it: the helpers are parsed once
def unrouted_raises() -> list[tuple[str, str, str, int]]:
    """(module, exception, message source, line) of each raise whose message is written in the code without tr."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            first = node.exc.args[0]
            if _written_here(first) and not _routed(first):
                name = getattr(node.exc.func, "id", None) or getattr(node.exc.func, "attr", None)
                found.append((path.relative_to(PACKAGE).as_posix(), name, ast.get_source_segment(source, first),
                              node.lineno))
    return found


def _internal(module: str, exception: str, message: str):
    return next((key for key in INTERNAL if key[:2] == (module, exception) and key[2] in message), None)


def test_every_error_written_in_the_helpers_goes_through_tr_or_is_listed_as_internal():
    left = [f"effitrain_helpers/{m}:{line}: raise {e}({text[:70]}...) without tr()"
            for m, e, text, line in unrouted_raises() if _internal(m, e, text) is None]
    assert left == [], ("Write the message as tr(\"English template\", field=value) and translate it in "
                        "translations/pt-BR/messages/<module>.yaml, or list it in INTERNAL with the reason:\n"
                        + "\n".join(left))


def test_each_internal_entry_still_names_a_raise_and_gives_a_reason():
    used = {_internal(m, e, text) for m, e, text, _ in unrouted_raises()}
    assert [key for key in INTERNAL if key not in used] == []
    assert all(len(reason) > 20 for reason in INTERNAL.values())


def test_the_walk_finds_an_f_string_a_string_and_a_sum_and_lets_tr_and_a_passed_message_through(tmp_path):
    tree = ast.parse('raise ValueError(f"x={x}")\nraise ValueError("no")\nraise E("a:\\n" + b)\n'
                     'raise ValueError(tr("x={x}", x=x))\nraise ValueError(str(err))\nraise SystemExit(2)\n')
    flagged = [_written_here(n.exc.args[0]) and not _routed(n.exc.args[0]) for n in tree.body]
    assert flagged == [True, True, True, False, False, False]


@pytest.fixture
def portuguese():
    from effitrain_helpers.core.settings import SETTINGS

    before = SETTINGS.lang
    SETTINGS.lang = "pt-BR"
    yield
    SETTINGS.lang = before


def test_the_settings_errors_a_learner_meets_first_are_in_portuguese(portuguese):
    from effitrain_helpers.core.settings import SETTINGS

    with pytest.raises(ValueError, match="size='huge' não é permitido; escolha um de small, full"):
        SETTINGS.set_size("huge")
    with pytest.raises(ValueError, match="'pt' não é um idioma do workbook; valem: en, pt-BR. Como resolver: use"):
        SETTINGS.set_lang("pt")
    assert SETTINGS.lang == "pt-BR"


def test_a_bad_environment_variable_at_import_is_said_in_english(monkeypatch, portuguese):
    """While the settings are read (no SETTINGS yet), the language is not known (core.settings.tr)."""
    from effitrain_helpers.core import settings

    monkeypatch.delattr(settings, "SETTINGS")
    monkeypatch.setenv("EFFITRAIN_SIZE", "huge")
    with pytest.raises(ValueError, match="EFFITRAIN_SIZE='huge' is not a size; allowed: small, full"):
        settings._size_from_env()
