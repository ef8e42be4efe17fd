"""Every figure of the workbook draws its words in the learner's language (``effitrain_helpers.teach.plots``).

Each plot function is drawn from fixed, made-up data (no process, no notebook, nothing measured) and the texts
it draws are collected: the suptitle, each axes' titles and axis labels, legend entries, texts and annotations
(``bar_label`` values too), and tick labels that are words (fixed or categorical ticks). In English they must be
exactly the texts below (English output unchanged); in Brazilian Portuguese no English word of the English
figure may be left, except the terms the glossary keeps in English and the code, units and names listed here."""

import re
from pathlib import Path
from types import SimpleNamespace

from effitrain_helpers.core.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
LANG = "pt-BR"

# Words the same in a Portuguese figure: code and API names, units, library and signal names, the fixtures' own
# labels (a lesson's values), and words spelled alike in both languages. The glossary's "Kept in English" terms
# are added from translations/pt-BR/GLOSSARY.md.
SAME_IN_BOTH = {"mib", "kib", "ms", "hz", "gflop", "ddp", "fsdp", "sigkill", "gloo", "absmax", "qmap", "lr",
                "prepare", "cpu", "xeon", "adamw", "adafactor", "sgd", "profiler", "thread", "threads", "mantissa", "original",
                "global", "amplitude", "pixels", "bit", "bits", "byte", "no", "micro", "mbit", "tc", "tbf", "link",
                "flashattention", "sdpa", "gb", "µs", "beta"}  # beta: the Greek letter, spelled so in Portuguese too


def _figures():
    """``{function name: figure}``: every plot function of the module drawn once, in the current language."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from PIL import Image

    from effitrain_helpers.measure.bench import MatmulResult
    from effitrain_helpers.measure.communication import CommunicationSummary
    from effitrain_helpers.measure.step_profile import StepProfile
    from effitrain_helpers.teach import plots
    from effitrain_helpers.training.checkpointing import CheckpointingRow
    from effitrain_helpers.training.local_sgd import WaySummary
    from effitrain_helpers.training.techniques import Techniques, TechniquesRun

    matmul = [MatmulResult("cpu", "Xeon", "float32", n, 1e-4, 0.9e-4, 1.1e-4, 3, 1, 2 * n**3 / 1e-4 / 1e9)
              for n in (32, 64)]
    rows = [CheckpointingRow(n, 8, 8e6 * n, 1e6 * n, 1.1e6 * n, 0.1 * n, 0.13 * n) for n in (32, 64)]
    way = WaySummary(2, 2, True, [1, 2], 2, 2**21, 0, 2**20, 0.1, [1, 2], True, [0.7, 0.6])
    run = TechniquesRun(0, 1, Techniques(), "fp32", "", ["float32"], "float32", False, [0.7, 0.65], ["a", "b"], 0.2,
                        10**6, CommunicationSummary(2, [], 0, 0, 0.0), 0, 4 * 10**6, 10**6, "b")
    optimizer_runs = [SimpleNamespace(name=name, state_bytes=2**21 * k, expected_state_bytes=2**21 * k,
                                      seconds_per_step=0.01 * k, seconds_per_step_quartiles=(0.009 * k, 0.011 * k),
                                      optimizer_seconds_per_step=0.002 * k, losses=[1.0 - 0.01 * i for i in range(30)],
                                      learning_rate=1e-3, final_loss=0.75)
                      for k, name in ((1, "AdamW"), (2, "Adafactor"))]
    full = np.outer(np.arange(1, 5), np.arange(1, 4)).astype(float)
    qmap = np.linspace(-1, 1, 256)
    values = np.concatenate([np.linspace(-0.5, 0.5, 256), np.linspace(-2, 2, 256)])
    absmax = np.array([0.5, 2.0])
    codes = np.abs((values / np.repeat(absmax, 256))[:, None] - qmap[None, :]).argmin(axis=1).astype(np.uint8)
    ddp = [{"parameters": 4, "gradients": 4, "optimizer state": 8}] * 2
    fsdp = [{"parameters": 2, "gradients": 2, "optimizer state": 4}] * 2
    profile = StepProfile({"forward": 10.0, "backward": 20.0}, 40.0, 5.0, [40.0], 3)
    return {
        "plot_gflops": plots.plot_gflops(matmul),
        "plot_four_steps": plots.plot_four_steps(2),
        "plot_image_before_after": plots.plot_image_before_after(Image.new("RGB", (8, 6)),
                                                                 np.zeros((3, 4, 4)), [0.5] * 3, [0.5] * 3),
        "plot_resampling": plots.plot_resampling(np.sin(np.arange(480)), 48_000, np.sin(np.arange(160)), 16_000),
        "plot_shards": plots.plot_shards([{"rank": 0, "indices": [0, 2]}, {"rank": 1, "indices": [1, 2]}], 3),
        "plot_scaling": plots.plot_scaling(
            {"world_size": 1, "workbook_samples_per_s": 100.0, "ddp_samples_per_s": 100.0,
             "compute_s_per_step": 0.02, "communication_s_per_step": 0.0},
            {"world_size": 2, "workbook_samples_per_s": 150.0, "ddp_samples_per_s": 170.0,
             "compute_s_per_step": 0.02, "communication_s_per_step": 0.01}),
        "plot_saved_bytes": plots.plot_saved_bytes(["b", "k*b"], [1e6, 4e6], "t"),
        "plot_checkpointing": plots.plot_checkpointing(rows),
        "plot_local_sgd": plots.plot_local_sgd({"data_parallel": way, "local_sgd": way, "no_communication": way,
                                                "accumulation": way}),
        "plot_precision": plots.plot_precision({"fp32": run, "bf16": run}),
        "plot_state_bytes": plots.plot_state_bytes([("AdamW", 8 * 2**20, 8 * 2**20), ("Adafactor", 2**19, 2**20)]),
        "plot_optimizer_comparison": plots.plot_optimizer_comparison(
            SimpleNamespace(runs=optimizer_runs, device="cpu", steps=30)),
        "plot_float_formats": plots.plot_float_formats(),
        "plot_gradient_sync": plots.plot_gradient_sync(2),
        "plot_adafactor_factors": plots.plot_adafactor_factors(full, full.mean(axis=1), full.mean(axis=0)),
        "plot_blockwise_quantisation": plots.plot_blockwise_quantisation(values, codes, absmax, qmap, blocks=2),
        "plot_rank_bytes": plots.plot_rank_bytes({"DDP": ddp, "FSDP": fsdp}, theory={"DDP": ddp, "FSDP": fsdp}),
        "plot_resume_timeline": plots.plot_resume_timeline(
            [{"label": "A", "start": 0, "end": 5, "saves": [2, 4]},
             {"label": "B", "start": 4, "end": 8, "saves": [6, 8]}],
            crash_after=5, resumed_from=4),
        "plot_step_breakdown": plots.plot_step_breakdown({"A": profile, "B": profile}),
        "plot_pipeline_timeline": plots.plot_pipeline_timeline(
            {"A": [{"stage": 0, "start": 0.0, "events": [("F", 0, 0.0, 0.001), ("B", 0, 0.003, 0.004)]},
                   {"stage": 1, "start": 0.0, "events": [("F", 0, 0.001, 0.002), ("B", 0, 0.002, 0.003)]}]}),
        "plot_trace_timeline": plots.plot_trace_timeline(
            [{"cat": "user_annotation", "ph": "X", "name": "forward", "ts": 0, "dur": 10},
             {"cat": "user_annotation", "ph": "X", "name": "backward", "ts": 10, "dur": 20},
             {"name": "[memory]", "ts": 5, "args": {"Total Allocated": 2**20}},
             {"name": "[memory]", "ts": 25, "args": {"Total Allocated": 2**21}}]),
        "plot_overlap_timeline": plots.plot_overlap_timeline(
            {"ended": 50.0, "issued": [20.0, 40.0], "ran": [(20.5, 60.0), (41.0, 70.0)]}, [2**21, 2**20]),
        "plot_collectives": plots.plot_collectives([{"broadcast": ([1, 2], [1, 2])}, {"broadcast": ([3, 4], [1, 2])}]),
        "plot_all_reduce_cost": plots.plot_all_reduce_cost(
            [{"method": m, "numel": n, "rank": 0, "world": 2, "seconds": 0.01, "socket_bytes": 4 * n,
              "counted_bytes": None, "theory_bytes": 4 * n} for m in ("ring", "parameter server") for n in (10, 100)]),
        "plot_link_rates": plots.plot_link_rates(
            [{"rate": r, "DDP": 0.1, "FSDP": 0.2, "DDP theory": 0.1, "FSDP theory": 0.2} for r in (None, 1e7, 1e9)]),
        "plot_alpha_beta": plots.plot_alpha_beta(40e-6, 1 / 3.5e9, message_bytes=(2**10, 2**20), worlds=(2, 8)),
        "plot_class_summary": plots.plot_class_summary(
            [("q1", {"correct": 3, "incorrect": 1, "not attempted": 1, "other": 0}),
             ("q2", {"correct": 1, "incorrect": 2, "not attempted": 1, "other": 1})]),
        "plot_attention_saved_bytes": plots.plot_attention_saved_bytes(
            [{"way": w, "n": n, "saved_bytes": 2**20 * n, "theory_bytes": 2**20 * n} for w in ("plain", "hand flash")
             for n in (128, 256)]),
    }


def drawn_texts(fig) -> list[str]:
    """The texts ``fig`` draws, in a fixed order (empty ones left out; numeric tick labels are matplotlib's)."""
    from matplotlib.category import StrCategoryFormatter
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    texts = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    texts += [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        texts += [ax.get_title(loc) for loc in ("left", "center", "right")] + [ax.get_xlabel(), ax.get_ylabel()]
        if ax.get_legend() is not None:
            texts += [t.get_text() for t in ax.get_legend().get_texts()]
        texts += [t.get_text() for t in ax.texts]  # ax.text, annotate, bar_label
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_formatter(), (FixedFormatter, FuncFormatter, StrCategoryFormatter)):
                texts += [t.get_text() for t in axis.get_ticklabels()]  # set_xticks(ticks, labels), bar(labels)
    return [t for t in texts if t]


def _all_texts(lang, monkeypatch) -> dict[str, list[str]]:
    import matplotlib.pyplot as plt

    monkeypatch.setattr(SETTINGS, "lang", lang)
    figures = _figures()
    texts = {name: drawn_texts(fig) for name, fig in figures.items()}
    for fig in figures.values():
        plt.close(fig)
    return texts


def _kept_in_english() -> set[str]:
    text = (ROOT / "translations" / LANG / "GLOSSARY.md").read_text(encoding="utf-8")
    section = text.split("## Kept in English", 1)[1].split("\n## ", 1)[0]
    terms = [m.group(1) for m in re.finditer(r"^\| `?([^|`]+?)`? \|", section, re.M)
             if m.group(1).strip() not in ("English", "---")]
    return {w.lower() for term in terms for w in re.findall(r"[^\W\d_]+", term)}


def _words(text: str) -> set[str]:
    """The words of a drawn text, lower case: code (``optimizer.step()``, ``pixel_values``, ``float32``, with a
    dot, underscore, bracket or digit) and single letters (``n x n``) are not words."""
    tokens = re.findall(r"[^\W\d_][\w.]*(?:\(\))?", text)
    return {t.lower() for t in (tok.rstrip(".") for tok in tokens)
            if len(t) > 1 and not re.search(r"[\d_.(]", t)}


def english_words_left(english: dict[str, list[str]], translated: dict[str, list[str]]) -> dict[str, list[str]]:
    """``{function: [English words of its English figure still drawn in the translated one]}``."""
    allowed = SAME_IN_BOTH | _kept_in_english()
    left = {}
    for name, texts in english.items():
        words = set().union(*map(_words, texts)) - allowed
        found = sorted({w for t in translated[name] for w in _words(t)} & words)
        if found:
            left[name] = found
    return left


def test_every_plot_function_is_drawn():
    import inspect

    from effitrain_helpers.teach import plots

    drawn = {name for name, f in vars(plots).items() if name.startswith("plot_") and inspect.isfunction(f)}
    assert drawn == set(ENGLISH), "a new plot function: add it to _figures() and ENGLISH"


def test_the_english_figures_draw_exactly_the_same_texts(monkeypatch):
    assert _all_texts("en", monkeypatch) == ENGLISH


def test_the_portuguese_figures_leave_no_english_word(monkeypatch):
    translated = _all_texts(LANG, monkeypatch)
    assert english_words_left(ENGLISH, translated) == {}
    assert translated["plot_scaling"][0] == "Vazão do treinamento" and translated["plot_rank_bytes"][3] == "parâmetros"


def test_numbers_drawn_in_6_2_and_6_3_figures_have_the_decimal_comma(monkeypatch):
    """The rank-bytes ticks (5.1, 6.3) and the overlap title and ticks (6.2) drew ``0.5`` and ``2.0, 1.0`` on a
    Portuguese figure before they went through the language layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from effitrain_helpers.teach import plots

    monkeypatch.setattr(SETTINGS, "lang", LANG)
    held = [{"parameters": 2**19, "gradients": 2**19, "optimizer state": 2**20}] * 2
    overlap = {"ended": 1.0, "issued": [0.4, 0.8], "ran": [(0.45, 1.2), (0.85, 1.5)]}  # ms
    for fig in (plots.plot_rank_bytes({"DDP": held}), plots.plot_overlap_timeline(overlap, [2**21, 2**20])):
        fig.canvas.draw()
        ticks = [t.get_text() for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())]
        assert any("," in t for t in ticks) and not any(re.search(r"\d\.\d", t) for t in ticks), ticks
        plt.close(fig)
    assert fig.axes[0].get_title().endswith("(baldes de 2,0; 1,0 MiB)"), fig.axes[0].get_title()


# An English decimal: a point between digits, unless it could be a Brazilian thousands group (``1.198``: exactly
# three digits after a point that follows a non-zero number)
ENGLISH_DECIMAL = re.compile(r"(?<![\d.,])(?:0\.\d+|\d+\.(?:\d{1,2}|\d{4,})(?!\d))")


def rendered_texts(fig) -> list[str]:
    """Every text ``fig`` shows once drawn: :func:`drawn_texts` and every tick label and offset (``1e-3``) of
    every axis shown, numeric ticks included."""
    fig.canvas.draw()
    texts = drawn_texts(fig)
    for ax in (ax for ax in fig.axes if ax.axison):  # ax.axis("off") draws no ticks
        for axis in (ax.xaxis, ax.yaxis):
            texts += [t.get_text() for t in (*axis.get_ticklabels(), *axis.get_ticklabels(minor=True))]
            texts.append(axis.get_offset_text().get_text())
    return [t for t in texts if t]


def test_the_english_decimal_pattern():
    assert ENGLISH_DECIMAL.findall("0.5 1.25 2.0 3.4e+38 $\\mathdefault{0.1}$ 0.001") == [
        "0.5", "1.25", "2.0", "3.4", "0.1", "0.001"]
    assert not ENGLISH_DECIMAL.findall("0,5 1.198 28.996 float32 optimizer.step() 10^{-3} 2,0; 1,0 MiB")


def test_every_portuguese_figure_writes_numbers_with_the_decimal_comma(monkeypatch):
    """No tick label, offset, title, legend or annotation of any figure in pt-BR has an English decimal point
    (matplotlib's ticks wrote ``0.5``, ``1.0`` and ``f"{x:.1f}"`` labels ``3.8 MiB`` before), and each decimal
    the English figure draws is drawn in the Portuguese one with a comma (``0.5`` there, ``0,5`` here)."""
    import matplotlib.pyplot as plt

    texts = {}
    for lang in ("en", LANG):
        monkeypatch.setattr(SETTINGS, "lang", lang)
        figures = _figures()
        texts[lang] = {name: rendered_texts(fig) for name, fig in figures.items()}
        for fig in figures.values():
            plt.close(fig)
    decimals = {lang: {name: {d for t in drawn for d in ENGLISH_DECIMAL.findall(t)} for name, drawn in found.items()}
                for lang, found in texts.items()}
    assert {name: sorted(d) for name, d in decimals[LANG].items() if d} == {}
    missing = {name: sorted(d for d in english if not any(d.replace(".", ",") in t for t in texts[LANG][name]))
               for name, english in decimals["en"].items()}
    assert {name: d for name, d in missing.items() if d} == {}
    assert sum(map(bool, decimals["en"].values())) >= 14  # the English figures keep their points


def test_numbers_in_language_leaves_log_powers_and_categories_as_they_are(monkeypatch):
    """A log axis's powers (mathtext ``10^{-1}``) have no decimal to change, a category is a word: both are drawn
    exactly as in English; a linear axis gets the comma (``0,5``), a mathtext decimal a comma with no space."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from effitrain_helpers.teach import plots

    def ticks(lang):
        monkeypatch.setattr(SETTINGS, "lang", lang)
        fig, (log, bars) = plt.subplots(1, 2)
        log.plot([0.1, 0.5], [0.15, 0.45])
        log.set_yscale("log")
        bars.bar(["a", "b"], [1.0, 1.5])
        plots.numbers_in_language(plots.numbers_in_language(fig)).canvas.draw()  # twice: changes nothing
        assert type(log.yaxis.get_major_formatter()).__name__ == "LogFormatterSciNotationInLanguage"
        drawn = [[t.get_text() for t in axis.get_ticklabels(minor=minor)]
                 for axis in (log.xaxis, log.yaxis, bars.xaxis, bars.yaxis) for minor in (False, True)]
        plt.close(fig)
        return drawn

    english, portuguese = ticks("en"), ticks(LANG)
    assert portuguese[2:6] == english[2:6] and "$\\mathdefault{10^{-1}}$" in english[2]
    assert portuguese[4] == ["a", "b"]
    assert portuguese[0] == [t.replace(".", ",") for t in english[0]] and "0,5" in portuguese[0]
    assert plots._with_decimal("$\\mathdefault{2^{5.32}}$") == "$\\mathdefault{2^{5{,}32}}$"


def test_a_text_left_in_english_is_found():
    english = {"plot_x": ["Where a step's time goes", "rank 0", "forward + backward (ms)"]}
    assert english_words_left(english, {"plot_x": ["Onde vai o tempo de um passo", "rank 0",
                                                   "forward + backward (ms)"]}) == {}
    assert english_words_left(english, {"plot_x": ["Where a step's time goes", "rank 0"]}) == {
        "plot_x": ["goes", "step", "time", "where"]}


# The texts each figure draws in English, exactly as before its texts went through tr() (generated once from
# the figures above; a change here is a change of the English figures).
ENGLISH = {'plot_gflops': ['Matrix product throughput on Xeon',
                 'matrix size n (n x n times n x n)',
                 'GFLOP/s (2n^3 / median time)',
                 'cpu float32'],
 'plot_four_steps': ['One step of data-parallel training',
                     'global batch (all samples)',
                     '1. shard',
                     'shard 0',
                     'device 0\nmodel copy (2. replicate)',
                     'gradients 0',
                     '3. aggregate',
                     'shard 1',
                     'device 1\nmodel copy (2. replicate)',
                     'gradients 1',
                     'averaged gradient -> one update\n4. synchronise: same weights everywhere'],
 'plot_image_before_after': ['stored: 8 x 6 pixels, uint8',
                             'width (pixels)',
                             'height (pixels)',
                             'pixel_values: 4 x 4, float32\nvalues in [0.00, 0.00]',
                             'width (pixels)',
                             'height (pixels)'],
 'plot_resampling': ['Same sound, same duration, 0.33x as many samples per second',
                     'time (ms)',
                     'amplitude',
                     'original, 48000 Hz (480 samples)',
                     'resampled, 16000 Hz (160 samples)'],
 'plot_shards': ['3 samples over 2 processes',
                 'sample index (dark: sent to more than one rank)',
                 '0',
                 '2',
                 '1',
                 '2',
                 'rank 0',
                 'rank 1'],
 'plot_scaling': ['Training throughput',
                  'samples per second (all processes)',
                  '1 process',
                  '2 processes\nworkbook loop',
                  '2 processes\nplain DDP',
                  "Where a step's time goes",
                  'milliseconds per step',
                  'compute',
                  'communication',
                  '1 process',
                  '2 processes'],
 'plot_saved_bytes': ['t', 'activations saved for backward (MiB)', '1.0 MiB', '3.8 MiB', 'b', 'k*b'],
 'plot_checkpointing': ['Memory',
                        'sequence length (batch 8)',
                        'activations saved for backward (MiB)',
                        'checkpointing off',
                        'checkpointing on',
                        'theory, with',
                        'Time',
                        'sequence length (batch 8)',
                        'forward + backward (ms)',
                        'checkpointing off',
                        'checkpointing on',
                        'theory, with (4/3 x without)'],
 'plot_local_sgd': ['Loss curves',
                    'optimizer step',
                    'training loss (mean over processes)',
                    'data parallel',
                    'local sgd',
                    'no communication',
                    'accumulation',
                    'Communication',
                    'synchronisations (label: MiB sent per process)',
                    '2 MiB',
                    '2 MiB',
                    '2 MiB',
                    '2 MiB',
                    'data\nparallel',
                    'local\nsgd',
                    'no\ncommunication',
                    'accumulation'],
 'plot_precision': ['Loss curves',
                    'optimizer step',
                    'training loss',
                    'fp32',
                    'bf16 (ran as fp32)',
                    'Speed',
                    'milliseconds per step',
                    '200 ms',
                    'fp32'],
 'plot_state_bytes': ['Optimizer state',
                      'state (MiB)',
                      'measured (optimizer.state)',
                      'theory (from shapes)',
                      '1.000x theory',
                      '0.500x theory',
                      'AdamW',
                      'Adafactor'],
 'plot_optimizer_comparison': ['Memory',
                               'optimizer state (MiB)',
                               'measured',
                               'theory',
                               'AdamW',
                               'Adafactor',
                               'Time',
                               'ms per step (median) on cpu',
                               'whole step (bars: 25th-75th percentile)',
                               'optimizer.step()',
                               'AdamW',
                               'Adafactor',
                               'Loss (dots: evaluation loss at the end)',
                               'step',
                               'training loss (mean of 2 steps)',
                               'AdamW (lr 0.001)',
                               'Adafactor (lr 0.001)'],
 'plot_float_formats': ['Bits of each number format (one box per bit)',
                        'sign',
                        'exponent (range)',
                        'mantissa (precision)',
                        '1',
                        'exponent 8',
                        'mantissa 23',
                        'float32',
                        'largest 3.4e+38\ngap after 1.0: 1.2e-07',
                        '1',
                        'exponent 8',
                        'mantissa 7',
                        'bfloat16',
                        'largest 3.4e+38\ngap after 1.0: 7.8e-03',
                        '1',
                        'exponent 5',
                        'mantissa 10',
                        'float16',
                        'largest 6.6e+04\ngap after 1.0: 9.8e-04'],
 'plot_gradient_sync': ["Parameter server (the course's picture)",
                        'parameter server\n3. average the gradients, update the weights',
                        'device 0\nforward + backward',
                        'gradients',
                        '4. new\nweights',
                        'device 1\nforward + backward',
                        'gradients',
                        '4. new\nweights',
                        'one place holds the weights; the devices wait for it',
                        'DDP: all-reduce, then every rank updates itself',
                        'at prepare: rank 0 broadcasts its weights (once)',
                        'rank 0\nforward + backward',
                        "4. optimizer step\non rank 0's copy",
                        'rank 1\nforward + backward',
                        "4. optimizer step\non rank 1's copy",
                        '3. all-reduce: every rank receives the average gradient',
                        'same weights + same average gradient = same new weights, with no second broadcast'],
 'plot_adafactor_factors': ['full second moment: 12 values',
                            'row',
                            'row\nmeans',
                            'column',
                            'column means',
                            'rebuilt from 7 means',
                            'log10 of the squared gradient',
                            'one dot per value',
                            'full value',
                            'rebuilt value',
                            'rebuilt = full'],
 'plot_blockwise_quantisation': ['2 blocks of 256 values: 1 byte each + one absmax per block',
                                 'value index (blocks of 256)',
                                 'state value',
                                 'float32 value',
                                 'decoded from 8 bits',
                                 "block's absmax (one float32)",
                                 'the table: 26 of 256 entries within +-0.1',
                                 'code (0-255)',
                                 'qmap[code] (times absmax)',
                                 'decoding error: at most 0.000 of the absmax',
                                 "|decoded - float32| / block's absmax",
                                 'values'],
 'plot_rank_bytes': ['What each rank holds: full copies (DDP) against 1/N shards (FSDP)',
                     'MiB held by the rank',
                     'theory',
                     'parameters',
                     'gradients',
                     'optimizer state',
                     '0.00',
                     '0.00',
                     '0.00',
                     '0.00',
                     'DDP',
                     'FSDP',
                     'rank 0',
                     'rank 1',
                     'rank 0',
                     'rank 1'],
 'plot_resume_timeline': ['Checkpoint, crash, resume',
                          'optimizer steps done',
                          'checkpoint saved',
                          'lost: 1 step(s) done again',
                          'rank killed (SIGKILL)',
                          'load_state',
                          'B',
                          'A'],
 'plot_pipeline_timeline': ['A',
                            'milliseconds since the step began (F: forward, B: backward of micro-batch i)',
                            'F0',
                            'B0',
                            'F0',
                            'B0',
                            'stage 0',
                            'stage 1'],
 'plot_step_breakdown': ["Where a training step's time goes",
                         'milliseconds per step (profiler)',
                         'forward',
                         'backward',
                         'other (not labelled)',
                         'collectives (gloo threads, overlapping)',
                         '10',
                         '20',
                         '10',
                         '10',
                         '20',
                         '10',
                         'A',
                         'B']}
# lesson 6.1
ENGLISH.update({
    "plot_collectives": ["Each rank's buffer before and after each collective (measured)",
                         "Each rank's buffer before and after each collective (measured)", "broadcast: before",
                         "1", "2", "rank 0", "3", "4", "rank 1", "broadcast: after", "1", "2", "rank 0", "1", "2",
                         "rank 1"],
    "plot_all_reduce_cost": ["All-reduce in 2 processes: bytes and time per rank",
                             "All-reduce in 2 processes: bytes and time per rank", "float32 values in the tensor",
                             "MiB sent by the busiest rank (dashed: theory)", "ring", "parameter server",
                             "float32 values in the tensor", "ms, median, slowest rank", "ring", "parameter server"],
})
# lesson 6.2
ENGLISH["plot_overlap_timeline"] = [
    "Overlap: all-reduces started during backward (buckets of 2.0, 1.0 MiB)",
    "milliseconds since backward began (rank 0, profiler trace)", "all-reduce issued (c10d::allreduce_)",
    "backward ended", "backward", "all-reduce running (gloo thread)", "backward", "all-reduce 1", "all-reduce 2"]
# lesson 5.4
ENGLISH["plot_link_rates"] = ["Two nodes, one rank each: time per step against the link's rate",
                              "link rate (Mbit/s, tc tbf)", "ms per training step (median)", "DDP measured",
                              "DDP theory", "FSDP measured", "FSDP theory"]
# lesson 5.2
ENGLISH["plot_trace_timeline"] = ["The step as the saved trace recorded it", "forward", "backward",
                                  "ms since the first labelled range", "MiB allocated since the start"]
# lesson 6.1
ENGLISH["plot_alpha_beta"] = (2 * ["alpha-beta model, alpha = 40.0 µs, bandwidth 1/beta = 3.50 GB/s (gloo, here)"]
                              + [text for size in ("1", "1,024") for text in (
                                  f"all-reduce of {size} KiB", "processes N", "model time (ms)", "ring", "tree",
                                  "parameter server")])
# lesson 8.1
ENGLISH["plot_class_summary"] = ["The class, exercise by exercise", "students", "correct", "incorrect",
                                 "not attempted", "other", "q1", "q2"]  # the instructor's start page
ENGLISH["plot_attention_saved_bytes"] = ["What attention keeps for backward: n x n against n", "sequence length n",
                                         "MiB saved for backward (dashed: theory)", "plain attention (by hand)",
                                         "FlashAttention by hand", "128", "256"]
