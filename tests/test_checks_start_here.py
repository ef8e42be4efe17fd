"""The start page's checker (00 q1: the bytes of a 1000 x 1000 float32 matrix), with right answers written other
ways and the likely mistakes, each named in English and in pt-BR."""

import numpy as np
import pytest
import torch

from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.teach.checks.start_here import q1


@pytest.mark.parametrize("answer", [
    pytest.param(4e6, marks=pytest.mark.judges("00 q1", "right"), id="a float in scientific notation"),
    pytest.param(np.int64(1000) * np.int64(1000) * 4, marks=pytest.mark.judges("00 q1", "right"),
                 id="a NumPy integer"),
    pytest.param(torch.tensor(1000 * 1000) * torch.zeros(1).element_size(), marks=pytest.mark.judges("00 q1", "right"),
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


@pytest.mark.parametrize("mistake", [pytest.param(name, marks=pytest.mark.judges("00 q1", "mistake"))
                                     for name in MISTAKES])
def test_q1_names_each_likely_mistake_in_english_and_portuguese(mistake, monkeypatch):
    answer, english, portuguese = MISTAKES[mistake]
    for lang, words in (("en", english), ("pt-BR", portuguese)):
        monkeypatch.setattr(SETTINGS, "lang", lang)
        result = q1.evaluate(answer)
        assert result.status == "incorrect" and words in result.message, (lang, result)
