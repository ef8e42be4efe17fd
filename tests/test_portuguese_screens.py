"""No English on a Brazilian learner's screen (issue 29): what the pt-BR lessons print, scanned for the workbook's
own English labels, and each translated lesson about as long as its English source.

What counts as English lives in tests/screen_language.py (one home, also used by conftest.py's scan of the
pt-BR lessons under nbval). The fast tests scan what the display helpers make in pt-BR; the slow test executes
pt-BR notebooks and scans every output, the widgets' labels included (which nbval does not see), naming the
lesson and the cell; a test checks that each library label left out is in the library's
installed source and in none of the workbook's (code, lessons, translations)."""

import re
from pathlib import Path

import nbformat
import pytest

from effitrain_helpers.core.settings import SETTINGS
from screen_language import (LANG, LIBRARY_BARS, SCREENED, code_words, english_in, english_in_outputs,
                             english_prose_in, output_texts, screened)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def portuguese():
    before = SETTINGS.lang
    SETTINGS.lang = LANG
    yield
    SETTINGS.lang = before


def _result():
    from effitrain_helpers.measure import bench

    return bench.MatmulResult("cpu", "cpu", "float32", 512, 0.0123, 0.011, 0.014, 5, 1, bench.gflops(512, 0.0123),
                              (0.0123,) * 5, "")


def test_the_benchmark_table_of_1_1_speaks_portuguese(portuguese):
    """Failed on 1.1's table before issue 29 (headers 'median ms', 'spread', 'reliable', values yes/no)."""
    from effitrain_helpers.measure import bench

    for shown in (bench.results_frame([_result()]).to_html(), bench.results_table([_result()])):
        assert english_in(shown) == [], shown
    assert "12,3" in bench.results_frame([_result()]).to_html()


def test_the_chapter_table_of_3_3_names_the_techniques_in_portuguese(portuguese):
    from effitrain_helpers.training.efficiency import ChapterRow, chapter_table

    rows = [ChapterRow(name, 0.25, 0.25, 1.1, 1.0, 0.25, 0.25, "", "")
            for name in ("gradient accumulation (k=4)", "gradient checkpointing", "local SGD (k=4, 2 processes)",
                         "mixed precision (bf16)")]
    shown = chapter_table(rows)
    assert english_in(shown) == [] and "0,25x" in shown and "processos" in shown, shown
    assert rows[0].technique == "gradient accumulation (k=4)"  # the key the self-check compares stays English


def _cells(styler) -> list[str]:
    return re.findall(r">([^<>]*\S[^<>]*)<", styler.to_html())


def test_a_python_list_of_english_decimals_is_english_on_screen():
    """6.2 printed ``losses [0.533, 0.326, 0.078]`` on a Portuguese screen before ``number_list``; what pt-BR
    writes, whole numbers, a version, an address, a thousands group and a config's value are not flagged."""
    from effitrain_helpers.core.language import number_list

    assert english_in("losses [0.533, 0.326, 0.078]; [6.0e-01]") == ["[0.533, 0.326, 0.078]", "[6.0e-01]"]
    shown = (f"losses [{number_list([0.533, 0.326], '.3f', LANG)}] [65600, 65539] torch 2.13.0 169.254.77.1 "
             '1.198 "dropout": 0.1, (6.2 q1)')
    assert english_in(shown) == [], shown


def test_the_tables_of_5_1_name_the_kinds_in_portuguese_and_keep_the_english_keys(portuguese):
    """The columns are built from the English kinds (issue 29 saw "optimizer state = teoria" on screen)."""
    import pandas as pd

    from effitrain_helpers.core.language import styled
    from effitrain_helpers.training.model_sharding import KINDS

    held = pd.DataFrame([{"rodada": "FSDP", "rank": 1, **{f"{k} (bytes)": 28996 for k in KINDS},
                          **{f"{k} = teoria": True for k in KINDS}}]).set_index(["rodada", "rank"])
    shown = " | ".join(_cells(styled(held, terms=KINDS)))
    assert english_in(shown) == [] and "estado do otimizador (bytes)" in shown, shown
    assert "28.996" in shown and "sim" in shown and "True" not in shown, shown
    assert list(held.columns)[0] == "parameters (bytes)"  # the key the self-check compares stays English
    kib = pd.DataFrame({"DDP": {k: 12.46 for k in KINDS}}).T
    assert "12,5" in _cells(styled(kib, precision=1, terms=KINDS))


def test_the_tables_of_5_3_name_files_pieces_and_costs_in_portuguese(portuguese):
    import pandas as pd

    from effitrain_helpers.core.language import styled
    from effitrain_helpers.training.resume import TERMS

    files = pd.DataFrame([{"file": "optimizer.bin", "bytes": 1336, "holds": "x"}]).set_index("file")
    differences = pd.DataFrame({"sem data position": {"model": 0.25, "learning rate": 0.0},
                                "sem loader's generator": {"model": 1e-3, "learning rate": 0.0}}).T
    cost = pd.DataFrame({"medido (bytes)": {"weights": 4, "optimizer": 8, "everything else": 3}})
    shown = " | ".join(_cells(styled(files, {"bytes": "{:,}"}, TERMS)) + _cells(styled(differences, "{:.2e}", TERMS))
                       + _cells(styled(cost, terms=TERMS)))
    assert english_in(shown) == [], shown
    for pt in ("arquivo", "conteúdo", "1.336", "sem posição nos dados", "sem gerador do loader", "taxa de "
               "aprendizado", "2,50e-01", "pesos", "otimizador", "todo o resto"):
        assert pt in shown, (pt, shown)
    assert differences.loc["sem data position", "model"] == 0.25  # the keys stay English


def test_the_runs_and_methods_of_chapter_6_are_named_in_portuguese_and_keep_the_english_keys(portuguese):
    """6.3's runs (training.zero_stages.RUNS) and 6.1's methods (measure.all_reduce_cost.METHODS), shown by styled."""
    import pandas as pd

    from effitrain_helpers.core.language import styled
    from effitrain_helpers.measure.all_reduce_cost import METHODS
    from effitrain_helpers.training.model_sharding import KINDS
    from effitrain_helpers.training.zero_stages import RUNS

    held = pd.DataFrame([{"rodada": run, "rank": 0, "optimizer state (B)": 131139, "estado / AdamW": 0.5}
                         for run in RUNS]).set_index(["rodada", "rank"])
    costs = pd.DataFrame([{"method": m, "numel": 1000, "ms": 0.125} for m in METHODS]).set_index("method")
    shown = " | ".join(_cells(styled(held, precision=3, terms=(*RUNS, *KINDS)))
                       + _cells(styled(costs, precision=2, terms=(*METHODS, "method"))))
    assert english_in(shown) == [], shown
    for pt in ("ZeRO-1 à mão", "AdamW, gradientes em média", "estado do otimizador (B)", "131.139", "0,500",
               "servidor de parâmetros", "anel", "método", "0,12"):
        assert pt in shown, (pt, shown)
    assert held.index[1][0] == "ZeRO-1 by hand"  # the key 6.3's self-checks compare stays English


def test_a_cell_without_a_format_is_written_short_and_the_portuguese_way(portuguese):
    """3.3's precision table: rounded floats and integers with no format of their own."""
    import pandas as pd

    from effitrain_helpers.core.language import styled

    runs = pd.DataFrame({"ms por passo": {"fp32": 1234, "bf16": 617}, "x tempo do fp32": {"fp32": 1.0, "bf16": 0.5}})
    assert _cells(styled(runs))[1:] == ["ms por passo", "x tempo do fp32", "fp32", "1.234", "1", "bf16", "617", "0,5"]
    sent = _cells(styled(pd.DataFrame({"enviado (B)": [1049120.0, 1.256]})))  # 6.3: bytes in a float column
    assert "1.049.120" in sent and "1,256" in sent, sent


def test_styled_leaves_an_english_table_as_pandas_shows_it():
    import pandas as pd

    from effitrain_helpers.core.language import styled
    from effitrain_helpers.training.resume import TERMS

    files = pd.DataFrame([{"file": "optimizer.bin", "bytes": 1336, "holds": "x"}]).set_index("file")
    assert _cells(styled(files, {"bytes": "{:,}"}, TERMS)) == _cells(files.style.format({"bytes": "{:,}"}))


def test_choose_model_says_a_wrong_path_in_portuguese(portuguese):
    from effitrain_helpers.sources.models import choose_model

    with pytest.raises(ValueError, match="não é uma pasta existente"):
        choose_model("./no-such-folder")


def _workbook_texts() -> list[tuple[Path, str]]:
    """What the workbook itself can print: its package's code, its message catalogs, its lessons' code without
    comments (a comment may name a library's bar: 1.1 turns it off in its exercises)."""
    texts = [(p, p.read_text(encoding="utf-8")) for p in (ROOT / "effitrain_helpers").rglob("*.py")]
    texts += [(p, p.read_text(encoding="utf-8")) for p in (ROOT / "translations").glob("*/messages/*.yaml")]
    for path in (ROOT / "notebooks").rglob("*.ipynb"):
        code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        texts.append((path, re.sub(r"#.*", "", "\n".join(code))))
    return texts


def test_only_a_library_progress_bar_is_left_out_of_the_scan():
    """The label is the library's (in its installed source), never the workbook's; elsewhere its words count."""
    import importlib.util

    site = Path(importlib.util.find_spec("transformers").origin).parents[1]
    ours = _workbook_texts()
    for label, source in LIBRARY_BARS.items():
        assert f'desc="{label}"' in (site / source).read_text(encoding="utf-8"), (label, source)
        assert [p for p, text in ours if label.lower() in text.lower()] == [], label
    assert english_in("Loading weights:   0%|          | 0/36 [00:00<?, ?it/s]") == []
    assert english_in("Loading weights: pesos carregados") == ["weights"]
    assert english_in("optimizer step | 12,3", {"optimizer step"}) == [] and english_in("optimizer step | 12,3")


def _lessons():
    return sorted(p.name for p in (ROOT / "notebooks" / LANG).glob("*.ipynb"))


def _prose_length(path: Path) -> int:
    return sum(len(c.source) for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")


@pytest.mark.parametrize("name", _lessons())
def test_a_translated_lesson_is_about_as_long_as_the_english(name):
    """Portuguese runs longer than English; a translation under 85% of its source's prose lost something."""
    english, portuguese_ = (_prose_length(ROOT / "notebooks" / name), _prose_length(ROOT / "notebooks" / LANG / name))
    assert portuguese_ >= 0.85 * english, (f"{name}: the pt-BR prose has {portuguese_} characters, the English "
                                           f"{english}: a translation far shorter than its source")


def _shown_texts(nb) -> list[tuple[int, str]]:
    """(cell index, text) of every output (screen_language.output_texts) and the widgets' labels (index -1)."""
    texts = [(i, text) for i, cell in enumerate(nb.cells) for text in output_texts(cell.get("outputs", []))]
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for model in state.values():
        for key in ("description", "tooltip"):
            if model.get("state", {}).get(key):
                texts.append((-1, model["state"][key]))
    return texts


def test_nbval_scans_the_screened_lessons_and_names_what_is_english():
    """conftest.py fails a screened pt-BR cell whose outputs hold English; the outputs it reads are nbval's."""
    english = [{"output_type": "stream", "name": "stdout", "text": "o benchmark: median ms 3,1"},
               {"output_type": "execute_result", "data": {"text/html": "<th>reliable</th>"}}]
    assert english_in_outputs(english) == ["median ms", "reliable"]
    assert english_in_outputs([{"output_type": "stream", "name": "stdout", "text": "mediana 3,1 ms"}]) == []
    assert set(SCREENED) <= set(_lessons()) and screened(ROOT / "notebooks" / LANG / SCREENED[0])
    assert not screened(ROOT / "notebooks" / SCREENED[0])  # the English lesson is not scanned


# The executed scan sees the widgets' labels too (nbval's scan does not); 1.1 has the workbook's widgets, so it
# runs every time, the other screened lessons in the exhaustive tier (nbval scans their outputs every run).
@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=[] if name.startswith("1_1") else pytest.mark.exhaustive)
                                  for name in SCREENED])
def test_an_executed_portuguese_lesson_shows_no_english(name, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("EFFITRAIN_SIZE", "small")
    monkeypatch.setenv("EFFITRAIN_LANG", LANG)
    path = ROOT / "notebooks" / LANG / name
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    code = code_words(path)
    found = [f"{name} cell {i}: {words}" for i, text in _shown_texts(nb) if (words := english_in(text, code))]
    assert found == [], "English on a pt-BR screen:\n" + "\n".join(found)


def test_a_quoted_data_sentence_is_not_the_workbooks_english():
    """1.3 prints its dataset's English sentence pairs quoted: data, not a label."""
    data = "rótulo 0: 'Dennis loaded a faster data loader in 2024.' / 'A data scientist tested a faster one.'"
    assert english_in(data) == []
    assert english_in("rótulo 0: faster") == ["faster"]  # unquoted, it is the workbook's
    apostrophe = "rótulo 1 (equivalent): \"He said the pie business doesn 't fit the company 's long-term growth .\""
    assert english_in(apostrophe) == [], english_in(apostrophe)  # repr's double quotes: data too


# ---------------------------------------------------------------- the command line in pt-BR (issue 46)

# What the command line shows as code, not as words or numbers to translate: a value as the learner types it
# (--parameters 7.5e9) or as Python echoes it back (--timeout=-1.0), and the lessons' numbers (1.1 ... 6.4).
CLI_CODE_WORDS = frozenset({"7.5e9", "1.0"})


def _code_words() -> frozenset[str]:
    from effitrain_helpers.teach.progress import lesson_exercises

    return CLI_CODE_WORDS | set(lesson_exercises())


def _cli(args, capsys) -> tuple[int, str]:
    """``effitrain ARGS`` in this process: its exit code and everything it printed (stdout and stderr)."""
    from effitrain_helpers.cli import main

    try:
        code = main(list(args))
    except SystemExit as exit_:  # --help and argparse's own errors exit
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out + out.err


def _commands() -> list[str]:
    from effitrain_helpers.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    return list(sub.choices)


def test_the_scan_of_the_command_line_names_english_words_and_english_numbers():
    assert english_prose_in("usage: effitrain [-h]; show this help message and exit") == [
        "and", "exit", "help", "message", "show", "this", "usage"]
    assert english_prose_in("GB por dispositivo 14.00 112.00 0.5002 1,622,928 99.5%") == [
        "0.5002", "1,622,928", "112.00", "14.00", "99.5%"]
    shown = ("uso: effitrain memory [--processes N] --out DIR; 7.000.000.000 parâmetros, 14,00 GB, 0,5002, "
             "torch 2.13.0+cpu, 12.345 amostras, $EFFITRAIN_LANG, `effitrain prefetch --check`")
    assert english_prose_in(shown) == [], english_prose_in(shown)
    assert english_prose_in("por exemplo 7.5e9", CLI_CODE_WORDS) == []


@pytest.mark.parametrize("args", [["--help"], *([name, "--help"] for name in _commands())],
                         ids=lambda args: " ".join(args))
def test_every_command_s_help_is_in_portuguese(args, portuguese, capsys):
    """The help texts (TranslatedHelpFormatter), argparse's own words (usage, options) and the descriptions."""
    code, shown = _cli(args, capsys)
    assert code == 0 and ("uso: effitrain" in shown) and ("opções:" in shown), shown
    assert english_prose_in(shown, _code_words()) == [], shown


@pytest.mark.parametrize("args", [
    ["frobnicate"], ["memory"], ["nodes", "--form", "x"], ["bench", "--repeats", "x"], ["bench", "--devise", "cpu"],
    ["shards", "--processes"], ["memory", "--parameters", "7e9", "--layers", "2"], ["editions"],
    ["resume", "--latest", "no-such-folder"], ["grade", "no-such-folder", "--out", "g.csv", "--timeout", "-1"],
    ["workbook", "--dir", ""],
], ids=lambda args: " ".join(args))
def test_a_command_line_mistake_is_one_line_in_portuguese(args, portuguese, capsys):
    code, shown = _cli(args, capsys)
    lines = [line for line in shown.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "erro:" in lines[0], shown
    assert english_prose_in(shown, _code_words()) == [], shown


@pytest.mark.parametrize("args", [
    ["devices"], ["memory", "--parameters", "7e9", "--devices", "8"],
    ["memory", "--parameters", "1.5e9", "--devices", "4", "--layers", "24", "--hidden", "2048", "--heads", "16",
     "--sequence", "1024", "--micro-batch", "4"], ["progress"], ["editions", "--check"], ["prefetch", "--check"],
    ["attention", "--n", "64", "--d", "8"],
], ids=lambda args: " ".join(args))
def test_a_cheap_command_prints_in_portuguese(args, portuguese, capsys):
    code, shown = _cli(args, capsys)
    assert code in (0, 1) and shown.strip(), shown
    assert english_prose_in(shown, _code_words()) == [], shown


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["shards", "--processes", "2"], ["collectives", "--processes", "2", "--sizes", "1000", "--repeats", "1"],
    pytest.param(["fsdp", "--processes", "2", "--steps", "1"], marks=pytest.mark.exhaustive),
    pytest.param(["ddp-check", "--processes", "2"], marks=pytest.mark.exhaustive),
    pytest.param(["experts", "--tokens", "24,16", "--d", "8", "--experts", "4"], marks=pytest.mark.exhaustive),
], ids=lambda args: " ".join(args))
def test_a_command_in_real_processes_prints_in_portuguese(args, tmp_path):
    """As a learner runs it: a subprocess with EFFITRAIN_LANG=pt-BR (the ranks inherit the language)."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "effitrain_helpers.cli", *args], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1", "EFFITRAIN_LANG": LANG,
                                                         "EFFITRAIN_SIZE": "small"})
    assert out.returncode == 0, out.stderr
    assert english_prose_in(out.stdout + out.stderr, _code_words()) == [], out.stdout + out.stderr


def test_argparse_s_own_words_are_still_the_ones_translated_and_are_put_back():
    """core.arguments.ARGPARSE_WORDS are argparse's gettext keys: a Python whose argparse words them differently
    would show them in English, so each must be in the installed argparse; the hook is undone after each call."""
    import argparse
    import inspect

    from effitrain_helpers.core.arguments import ARGPARSE_WORDS, OneLineParser

    source = inspect.getsource(argparse)
    assert [w for w in ARGPARSE_WORDS if repr(w) not in source and f'"{w}"' not in source] == []
    before = argparse._
    OneLineParser(prog="x").format_help()
    assert argparse._ is before


def test_a_help_text_is_translated_by_the_formatter_without_touching_the_add_argument_line(portuguese):
    from effitrain_helpers.core.arguments import OneLineParser

    parser = OneLineParser(prog="effitrain x", description="print JSON instead of text")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    shown = parser.format_help()
    assert shown.count("imprime JSON em vez de texto") == 2 and "opções:" in shown and "uso:" in shown, shown


def test_the_start_row_the_model_s_source_and_the_student_edition_s_blank_speak_portuguese(portuguese):
    """Issue 46 saw `start`, `(offline-build)` and "# the blank the exercises start with" on a pt-BR screen."""
    from effitrain_helpers.sources.models import ModelChoice
    from effitrain_helpers.teach import editions
    from effitrain_helpers.teach.progress import ProgressTable, _rows

    table = ProgressTable(_rows([]))
    assert repr(table).splitlines()[2].startswith("início") and table.to_records()[0]["lesson"] == "start"
    choice = ModelChoice("/x", "offline-build", "motivo", "model")
    assert "(construído pelo workbook)" in str(choice) and choice.source == "offline-build"
    name = "1_1_prepare_models.ipynb"
    student = editions.make_edition(nbformat.read(ROOT / "notebooks" / LANG / name, as_version=4), name, "student")
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    assert "import ____  # a lacuna com que os exercícios começam" in code and editions.BLANK_IMPORT not in code


def test_the_table_of_6_1_names_its_columns_in_portuguese(portuguese):
    """Issue 46 saw 6.1's pivot headed socket_bytes, theory_bytes and numel (the lesson's cell c61-19)."""
    import pandas as pd

    from effitrain_helpers.core.language import styled
    from effitrain_helpers.measure.all_reduce_cost import METHODS, TABLE_TERMS

    rows = [{"numel": 1000, "method": m, "rank": r, "socket_bytes": 5912, "theory_bytes": 5333, "ms": 1.25}
            for m in METHODS for r in (0, 1)]
    pivot = pd.DataFrame(rows).pivot_table(index=["numel", "method"], columns="rank",
                                           values=["socket_bytes", "theory_bytes", "ms"])
    shown = " | ".join(_cells(styled(pivot, precision=2, terms=TABLE_TERMS)))
    assert english_in(shown) == [] and "socket_bytes" not in shown and "numel" not in shown, shown
    for pt in ("bytes nos sockets", "bytes na teoria", "valores", "método", "5.912,00", "1,25"):
        assert pt in shown, (pt, shown)
