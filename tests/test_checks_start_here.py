"""The start page's checker (00 q1: the bytes of a 1000 x 1000 float32 matrix), with right answers written other
ways and the likely mistakes, each named in English and in pt-BR."""

import numpy as np
import pytest
import torch

from effitrain_helpers.teach.checks.start_here import q1
from verdicts import mistake, right, speak


@pytest.mark.parametrize("answer", [
    right("00 q1", 4e6, id="a float in scientific notation"),
    right("00 q1", np.int64(1000) * np.int64(1000) * 4, id="a NumPy integer"),
    right("00 q1", torch.tensor(1000 * 1000) * torch.zeros(1).element_size(),
          id="a 0-d tensor, the bytes per number read from torch"),
])
def test_q1_accepts_the_right_number_written_another_way(answer):
    result = q1.evaluate(answer)
    assert result.status == "correct", result


# (the answer, the words of its message in English and in pt-BR); each a likely mistake
MISTAKES = {
    "the count of numbers": (1_000_000, "each float32 number takes 4 bytes", "cada número float32 ocupa 4 bytes"),
    "MiB": (4_000_000 / 2**20, "in bytes, not MiB", "em bytes, não em MiB"),
    "float64": (8_000_000, "8 bytes is a float64 number", "8 bytes é o tamanho de um float64"),
    "bits": (32_000_000, "that counts bits", "isso conta bits"),
}


@pytest.mark.parametrize("name", [mistake("00 q1", name) for name in MISTAKES])
def test_q1_names_each_likely_mistake_in_english_and_portuguese(name, monkeypatch):
    answer, english, portuguese = MISTAKES[name]
    for lang, words in (("en", english), ("pt-BR", portuguese)):
        speak(monkeypatch, lang)
        result = q1.evaluate(answer)
        assert result.status == "incorrect" and words in result.message, (lang, result)
