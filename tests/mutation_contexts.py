"""What the notebook holds when an exercise cell runs, for the mutation harness (``tests/mutation.py``).

A lesson's namespace is built as its notebook builds it: the notebook's own import lines, then the solutions of
the lesson's earlier exercises (6.3 q2 uses q1's ``assign_owners``, 6.2 q3 q2's ``average_gradients``), then
the few objects the notebook made in earlier cells that the cell reads (``CONTEXTS``: a small stand-in of each,
built the way ``tests/test_checks_*.py`` build them). Built once per exercise and session.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import tempfile

import nbformat

from effitrain_helpers.teach import editions
from effitrain_helpers.teach.exercises import Exercise

CHECKS = "effitrain_helpers.teach.checks"
_IMPORT = re.compile(rf"from {CHECKS}\.(\w+) import")


def _choice():
    from effitrain_helpers.sources.models import choose_model

    return choose_model()


def _lesson_1_1():
    from transformers import AutoModelForSequenceClassification

    choice = _choice()
    return {"choice": choice, "model": AutoModelForSequenceClassification.from_pretrained(choice.path, num_labels=2)}


def _lesson_1_2():
    from transformers import AutoFeatureExtractor, AutoImageProcessor

    from effitrain_helpers.sources.media import make_shapes, make_tones
    from effitrain_helpers.sources.processors import choose_feature_extractor, choose_image_processor

    sounds = make_tones(6, 2, seed=2)
    return {"image_processor": AutoImageProcessor.from_pretrained(choose_image_processor().path, backend="pil"),
            "feature_extractor": AutoFeatureExtractor.from_pretrained(choose_feature_extractor().path),
            "sounds": sounds, "shapes": make_shapes(n_train=8, n_validation=2),
            "clip": next(a for a in sounds["train"]["audio"] if a["sampling_rate"] != 16_000)}


def _lesson_1_3():
    from transformers import AutoTokenizer, DataCollatorWithPadding

    from effitrain_helpers.sources.pairs import make_pairs

    tokenizer = AutoTokenizer.from_pretrained(_choice().path)
    pairs = make_pairs(40, 12)
    tokenized = pairs.map(lambda b: tokenizer(b["sentence1"], b["sentence2"]), batched=True,
                          remove_columns=["sentence1", "sentence2"]).rename_column("label", "labels")
    tokenized.set_format("torch")
    return {"tokenizer": tokenizer, "pairs": pairs, "tokenized": tokenized,
            "collator": DataCollatorWithPadding(tokenizer)}


def _lesson_2_1():
    import datasets

    return {"data": {"validation": datasets.Dataset.from_dict({"labels": [1] * 6 + [0] * 4}).with_format("torch")}}


def _lesson_3_2():
    from transformers import DistilBertConfig, DistilBertModel

    return {"model": DistilBertModel(DistilBertConfig(n_layers=2, dim=128, n_heads=4, hidden_dim=512))}


def _lesson_3_3():
    from effitrain_helpers.training.precision import low_precision

    return {"LOW": low_precision(), "DEVICE": "cpu"}


def _lesson_5_2():
    from effitrain_helpers.measure.step_profile import StepProfile

    return {"one": StepProfile({"data loading": 12.0, "forward": 30.0, "backward": 45.0, "optimizer step": 10.0},
                               100.0, 0.0, [100.0, 101.0, 99.0], 3)}


def _lesson_5_4():
    from effitrain_helpers.teach.checks import lesson_5_4 as l54

    return {"FIRST": l54.Q1_FIRST, "PORT": l54.Q1_PORT, "INTERFACE": l54.Q1_INTERFACE,
            "run": {"ranks": [{"rank": n * 2 + r, "node": n, "local_rank": r} for n in range(2) for r in range(2)]}}


CONTEXTS = {  # lesson module -> the notebook objects its exercise cells read
    "lesson_1_1": _lesson_1_1, "lesson_1_2": _lesson_1_2, "lesson_1_3": _lesson_1_3, "lesson_2_1": _lesson_2_1,
    "lesson_2_3": lambda: {"scaling_n": {"gradient_mib": 3.0}},
    "lesson_3_1": lambda: {"bytes_per_sample": 1000.0},
    "lesson_3_2": _lesson_3_2, "lesson_3_3": _lesson_3_3,
    "lesson_4_3": lambda: {"out": tempfile.TemporaryDirectory(prefix="effitrain-mutants-")},
    "lesson_5_2": _lesson_5_2, "lesson_5_4": _lesson_5_4,
}


@functools.cache
def notebooks() -> dict[str, str]:
    """Each checks module's notebook source (code cells, in order), by module name (``lesson_1_1``)."""
    found = {}
    for path in sorted(editions.default_source().glob("*.ipynb")):
        cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        module = _IMPORT.search("\n".join(cells))
        if module:
            found[module.group(1)] = cells
    return found


def exercises() -> list[tuple[str, str, Exercise]]:
    """``(module, qN, Exercise)`` of every exercise of every lesson, in course order."""
    out = []
    for module in notebooks():
        lesson = importlib.import_module(f"{CHECKS}.{module}")
        out += [(module, name, value) for name, value in vars(lesson).items() if isinstance(value, Exercise)]
    return out


@functools.cache
def _imports(module: str) -> dict:
    """The namespace the notebook's own import lines make."""
    namespace = {"__name__": "effitrain_mutant"}
    for source in notebooks()[module]:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a cell magic
            continue
        for statement in tree.body:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                exec(compile(ast.Module(body=[statement], type_ignores=[]), module, "exec"), namespace)
    return namespace


@functools.cache
def namespace(module: str, q: str) -> dict:
    """What the cell of exercise ``q`` of ``module`` finds: imports, context, earlier exercises' solutions."""
    from mutation import split_check_call

    found = dict(_imports(module))
    found.update(CONTEXTS.get(module, dict)())
    for name, exercise in (e[1:] for e in exercises() if e[0] == module):
        if name == q:
            break
        code, _ = split_check_call(exercise.solution_code)
        exec(compile(code, f"{module}:{name}", "exec"), found)
    return found
