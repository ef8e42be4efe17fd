"""Every checker of lessons 1.2 and 1.3, with known right and known wrong answers."""

import numpy as np
import pytest
import torch
from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer, DataCollatorWithPadding

from effitrain_helpers.teach.checks import lesson_1_2 as l12
from effitrain_helpers.teach.checks import lesson_1_3 as l13
from effitrain_helpers.sources.media import make_shapes, make_tones, resample
from effitrain_helpers.sources.models import choose_model
from effitrain_helpers.sources.pairs import make_pairs
from effitrain_helpers.sources.processors import choose_feature_extractor, choose_image_processor
from effitrain_helpers.teach.exercises import ____


@pytest.fixture(scope="module")
def image_processor():
    return AutoImageProcessor.from_pretrained(choose_image_processor().path, backend="pil")


@pytest.fixture(scope="module")
def extractor():
    return AutoFeatureExtractor.from_pretrained(choose_feature_extractor().path)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(choose_model().path)


@pytest.fixture(scope="module")
def clip():
    sounds = make_tones(6, 1, seed=2)["train"]
    return next(a for a in sounds["audio"] if a["sampling_rate"] != 16_000)


def test_1_2_q1_one_clip_as_the_model_expects(clip, extractor):
    rate = extractor.sampling_rate
    wave = resample(clip["array"], clip["sampling_rate"], rate)
    right = extractor(wave, sampling_rate=rate, return_tensors="pt")
    assert l12.q1.evaluate(right, clip, extractor).status == "correct"
    cases = {
        "return_tensors=\"pt\"": extractor(wave, sampling_rate=rate),
        "resample it to the model's 16000 Hz": extractor(np.asarray(clip["array"]), sampling_rate=rate,
                                                         return_tensors="pt"),
        "do not pad or cut": extractor(wave, sampling_rate=rate, max_length=8_000, truncation=True,
                                       padding="max_length", return_tensors="pt"),
        "not the extractor's": {"input_values": torch.from_numpy(np.asarray(wave, dtype=np.float32))[None]},
        "takes float32": {"input_values": right["input_values"].double()},
        "batch of one": {"input_values": right["input_values"][0]},
        "'input_values'": right["input_values"],
    }
    for words, answer in cases.items():
        result = l12.q1.evaluate(answer, clip, extractor)
        assert result.status == "incorrect" and words in result.message, (words, result)
    assert l12.q1.evaluate(____, clip, extractor).status == "not attempted"


@pytest.mark.parametrize("answer, status, words", [
    ((1.0, -1.0), "correct", ""), ((255, 0), "incorrect", "stored values"),
    ((1.0, 0.0), "incorrect", "did not normalise"), ((0.5, -0.5), "incorrect", "is not what"),
    (1.0, "incorrect", "pair"),
])
def test_1_2_q2(answer, status, words, image_processor):
    result = l12.q2.evaluate(answer, image_processor)
    assert result.status == status and words in result.message


def test_1_2_q3(image_processor):
    shapes = make_shapes(4, 1)["train"]

    def right(batch):
        return {"pixel_values": image_processor(batch["image"], size={"height": 64, "width": 64})["pixel_values"]}

    def full_size(batch):
        return {"pixel_values": image_processor(batch["image"])["pixel_values"]}

    def wrong_key(batch):
        return {"pixels": image_processor(batch["image"])["pixel_values"]}

    assert l12.q3.evaluate(right, shapes).status == "correct"
    assert "(3, 224, 224)" in l12.q3.evaluate(full_size, shapes).message
    assert "'pixel_values'" in l12.q3.evaluate(wrong_key, shapes).message

    def zeros(batch):
        return {"pixel_values": [np.zeros((3, 64, 64), dtype=np.float32) for _ in batch["image"]]}

    assert "values are not what" in l12.q3.evaluate(zeros, shapes).message


def test_1_2_q4(extractor):
    sounds = make_tones(6, 1, seed=2)["train"]
    assert len({a["sampling_rate"] for a in sounds["audio"]}) > 1

    def right(batch):
        waves = [resample(a["array"], a["sampling_rate"], 16_000) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=8_000, truncation=True, padding="max_length")

    def no_resampling(batch):
        waves = [np.asarray(a["array"]) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=8_000, truncation=True, padding="max_length")

    def one_second(batch):
        waves = [resample(a["array"], a["sampling_rate"], 16_000) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=16_000, truncation=True, padding="max_length")

    def clip_by_clip(batch):  # right, written another way: one call per clip, the column built by hand
        values = []
        for a in batch["audio"]:
            wave = resample(a["array"], a["sampling_rate"], 16_000)
            values.append(extractor(wave, sampling_rate=16_000, max_length=8_000, truncation="longest_first",
                                    padding="max_length")["input_values"][0])
        return {"input_values": values}

    def no_padding(batch):  # long clips cut, short ones left short: the check's tones are all over 0.5 s
        waves = [resample(a["array"], a["sampling_rate"], 16_000) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=8_000, truncation=True)

    assert l12.q4.evaluate(right, sounds, extractor).status == "correct"
    assert l12.q4.evaluate(clip_by_clip, sounds, extractor).status == "correct"
    assert "resample it to 16 kHz" in l12.q4.evaluate(no_resampling, sounds, extractor).message
    assert "8,000" in l12.q4.evaluate(one_second, sounds, extractor).message
    assert "short clips must be padded" in l12.q4.evaluate(no_padding, sounds, extractor).message


def test_1_3_q1(tokenizer):
    split = make_pairs(8, 1)["train"]

    def right(batch):
        return tokenizer(batch["sentence1"], batch["sentence2"], truncation=True, max_length=16)

    def too_long(batch):
        return tokenizer(batch["sentence1"], batch["sentence2"], truncation=True, max_length=128)

    def one_sentence(batch):
        return tokenizer(batch["sentence1"], truncation=True, max_length=16)

    def by_keyword(batch):  # right, written another way: the pair by keyword, the strategy by name
        return tokenizer(text=batch["sentence1"], text_pair=batch["sentence2"], truncation="longest_first",
                         max_length=16)

    def max_length_only(batch):  # the same tokens: max_length alone turns truncation on (longest_first)
        return tokenizer(batch["sentence1"], batch["sentence2"], max_length=16)

    assert l13.q1.evaluate(right, split, tokenizer).status == "correct"
    assert l13.q1.evaluate(by_keyword, split, tokenizer).status == "correct"
    assert l13.q1.evaluate(max_length_only, split, tokenizer).status == "correct"
    assert "max_length=16" in l13.q1.evaluate(too_long, split, tokenizer).message
    assert "two [SEP]" in l13.q1.evaluate(one_sentence, split, tokenizer).message


@pytest.mark.parametrize("answer, status, words", [
    ((4, 2), "correct", ""), ((4, 0), "incorrect", "how many more"), ((3, 2), "incorrect", "busiest"),
    ([4, 2], "correct", ""), (4, "incorrect", "pair"),
])
def test_1_3_q2(answer, status, words):
    result = l13.q2.evaluate(answer)
    assert result.status == status and words in result.message


@pytest.fixture(scope="module")
def pairs_split(tokenizer):
    """1.3's tokenized training split: sentence pairs, their 'label' column renamed 'labels'."""
    data = make_pairs(40, 1).map(lambda b: tokenizer(b["sentence1"], b["sentence2"]), batched=True,
                                remove_columns=["sentence1", "sentence2"]).rename_column("label", "labels")
    return data["train"]


# Each usual mistake of 1.3 q3 as (the collator's arguments, whether the split keeps its labels, the words of its
# own message): no rounding, a fixed max_length, another multiple, a split without its labels.
@pytest.mark.parametrize("arguments, labelled, words", [
    ({"pad_to_multiple_of": 8}, True, ""),
    ({}, True, "not rounded up"),
    ({"padding": "max_length", "max_length": 128}, True, "fixed max_length"),
    ({"pad_to_multiple_of": 16}, True, "expected"),
    ({"pad_to_multiple_of": 8}, False, "no 'labels'"),
])
def test_1_3_q3_names_each_usual_mistake(tokenizer, pairs_split, arguments, labelled, words):
    split = pairs_split if labelled else pairs_split.remove_columns("labels")
    result = l13.q3.evaluate(DataCollatorWithPadding(tokenizer, **arguments), split)
    assert result.status == ("correct" if not words else "incorrect") and words in result.message, result.message


# ---------------------------------------------------------------- 1.3 q4: the learner's prepare, in 2 real processes

def _answers():
    """Answers to 1.3 q4, defined locally so that launch ships them to the workers by value (as from a notebook)."""

    def prepared(dataset, collate_fn):
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator()
        loader = accelerator.prepare(DataLoader(dataset, batch_size=2, collate_fn=collate_fn))
        return [i for batch in loader for i in batch["idx"].tolist()]

    def plain(dataset, collate_fn):  # no prepare: every process reads everything
        from torch.utils.data import DataLoader

        return [i for b in DataLoader(dataset, batch_size=2, collate_fn=collate_fn) for i in b["idx"].tolist()]

    def by_hand(dataset, collate_fn):  # contiguous halves: disjoint and complete, not prepare's split
        import torch.distributed as dist

        half = dataset.shard(num_shards=2, index=dist.get_rank(), contiguous=True)
        return [int(i) for i in half.with_format(None)["idx"]]

    def first_batch_only(dataset, collate_fn):
        return prepared(dataset, collate_fn)[:2]

    return {"prepared": prepared, "plain": plain, "by_hand": by_hand, "first_batch_only": first_batch_only}


@pytest.fixture(scope="module")
def shard_data(tokenizer):
    data = make_pairs(4, 12).map(lambda b: tokenizer(b["sentence1"], b["sentence2"]), batched=True,
                                 remove_columns=["sentence1", "sentence2"])
    data.set_format("torch")
    return data["validation"], DataCollatorWithPadding(tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("name, status, words", [
    ("prepared", "correct", ""),
    ("plain", "incorrect", "both processes read all 12 samples"),
    ("by_hand", "incorrect", "not the split accelerator.prepare makes"),
    ("first_batch_only", "incorrect", "were read by no process"),
])
def test_1_3_q4_runs_the_learners_function_in_two_processes(shard_data, name, status, words):
    dataset, collator = shard_data
    result = l13.q4.evaluate(_answers()[name], dataset, collator)
    assert result.status == status and words in result.message, result


def test_1_3_q4_without_running(shard_data):
    dataset, collator = shard_data

    def starter(dataset, collate_fn):
        loader = ____
        return list(loader)

    assert l13.q4.evaluate(starter, dataset, collator).status == "not attempted"
    assert "function itself" in l13.q4.evaluate("my_shard", dataset, collator).message
    assert "multiple of 4" in l13.q4.evaluate(_answers()["prepared"], dataset.select(range(10)), collator).message
