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
from verdicts import mistake, right, speak


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


def _clip_answers(clip, extractor):
    """1.2 q1's answers by name: the solution, right ones written other ways, and mistakes."""
    from transformers import TensorType

    rate = extractor.sampling_rate
    wave = resample(clip["array"], clip["sampling_rate"], rate)
    right = extractor(wave, sampling_rate=rate, return_tensors="pt")
    as_numpy = extractor(wave, sampling_rate=rate, return_tensors="np")
    return {
        "solution": right,
        "a list of one clip, the enum": extractor([wave], sampling_rate=16_000, return_tensors=TensorType.PYTORCH),
        "NumPy, converted": {key: torch.from_numpy(value) for key, value in as_numpy.items()},
        "no return_tensors": extractor(wave, sampling_rate=rate),
        "not resampled": extractor(np.asarray(clip["array"]), sampling_rate=rate, return_tensors="pt"),
        "padded like preprocess_audio": extractor(wave, sampling_rate=rate, max_length=8_000, truncation=True,
                                                  padding="max_length", return_tensors="pt"),
        "the wave itself": {"input_values": torch.from_numpy(np.asarray(wave, dtype=np.float32))[None]},
        "float64": {"input_values": right["input_values"].double()},
        "one row": {"input_values": right["input_values"][0]},
        "the tensor alone": right["input_values"],
        "the starter": ____,
    }


@pytest.mark.parametrize("name, status, words", [
    ("solution", "correct", ""),
    right("1.2 q1", "a list of one clip, the enum", "correct", ""),
    right("1.2 q1", "NumPy, converted", "correct", ""),
    mistake("1.2 q1", "no return_tensors", "incorrect", "not a PyTorch tensor: ask the extractor for tensors with "
            "return_tensors=\"pt\""),
    mistake("1.2 q1", "not resampled", "incorrect", "resample it to the model's 16000 Hz first"),
    mistake("1.2 q1", "padded like preprocess_audio", "incorrect", "do not pad or cut"),
    ("the wave itself", "incorrect", "not the extractor's"),
    ("float64", "incorrect", "takes float32"),
    ("one row", "incorrect", "batch of one"),
    ("the tensor alone", "incorrect", "'input_values'"),
    ("the starter", "not attempted", ""),
])
def test_1_2_q1_one_clip_as_the_model_expects(clip, extractor, name, status, words):
    result = l12.q1.evaluate(_clip_answers(clip, extractor)[name], clip, extractor)
    assert result.status == status and words in result.message, (name, result)


@pytest.mark.parametrize("answer, status, words", [
    ((1.0, -1.0), "correct", ""),
    right("1.2 q2", [np.float64(1.0), np.float64(-1.0)], "correct", ""),  # a list
    right("1.2 q2", (torch.tensor(255.0) / 255 * 2 - 1, -1), "correct", ""),  # torch
    mistake("1.2 q2", (255, 0), "incorrect", "those are the stored values"),
    mistake("1.2 q2", (1.0, 0.0), "incorrect", "did not normalise"),
    ((0.5, -0.5), "incorrect", "is not what"),
    (1.0, "incorrect", "pair"),
])
def test_1_2_q2(answer, status, words, image_processor):
    result = l12.q2.evaluate(answer, image_processor)
    assert result.status == status and words in result.message


@pytest.mark.parametrize("answer, english, portuguese", [
    mistake("1.2 q2", (-1.0, 1.0), "the pair is (white, black), white first",  # swapped
            "o par é (branco, preto), o branco primeiro"),
    mistake("1.2 q2", (509.0, -1.0), "you normalised the stored value 255 without rescaling it",
            "você normalizou o valor guardado 255 sem reescalá-lo"),
])
def test_1_2_q2_names_a_swapped_pair_and_a_forgotten_rescale_in_both_languages(answer, english, portuguese,
                                                                               image_processor, monkeypatch):
    for lang, words in (("en", english), ("pt-BR", portuguese)):
        speak(monkeypatch, lang)
        result = l12.q2.evaluate(answer, image_processor)
        assert result.status == "incorrect" and words in result.message, (lang, result)


def _thumbnail_answers(image_processor):
    """1.2 q3's answers by name."""
    size = {"height": 64, "width": 64}

    def solution(batch):
        return {"pixel_values": image_processor(batch["image"], size=size)["pixel_values"]}

    def image_by_image(batch):  # right, another way: a loop, one call per image
        return {"pixel_values": [image_processor(image, size=dict(size))["pixel_values"][0]
                                 for image in batch["image"]]}

    def whole_output_in_numpy(batch):  # right, another way: the processor's output itself, as one NumPy array
        return image_processor(images=batch["image"], size=size, return_tensors="np")

    def full_size(batch):  # preprocess_images copied, the size left out
        return {"pixel_values": image_processor(batch["image"])["pixel_values"]}

    def not_normalised(batch):
        return {"pixel_values": image_processor(batch["image"], size=size, do_normalize=False)["pixel_values"]}

    def wrong_key(batch):
        return {"pixels": image_processor(batch["image"], size=size)["pixel_values"]}

    def zeros(batch):
        return {"pixel_values": [np.zeros((3, 64, 64), dtype=np.float32) for _ in batch["image"]]}

    return {f.__name__: f for f in (solution, image_by_image, whole_output_in_numpy, full_size, not_normalised,
                                    wrong_key, zeros)}


@pytest.mark.parametrize("name, words", [
    ("solution", ""),
    right("1.2 q3", "image_by_image", ""),
    right("1.2 q3", "whole_output_in_numpy", ""),
    mistake("1.2 q3", "full_size", "became shape (3, 224, 224); expected (3, 64, 64): pass size="),
    mistake("1.2 q3", "not_normalised", "values are not what the image processor makes"),
    mistake("1.2 q3", "wrong_key", "should return a dict with 'pixel_values'"),
    ("zeros", "values are not what"),
])
def test_1_2_q3(image_processor, name, words):
    result = l12.q3.evaluate(_thumbnail_answers(image_processor)[name], make_shapes(4, 1)["train"])
    assert (result.status == "correct") == (words == "") and words in result.message, (name, result)


def _half_second_answers(extractor):
    """1.2 q4's answers by name."""

    def solution(batch):
        waves = [resample(a["array"], a["sampling_rate"], 16_000) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=8_000, truncation=True, padding="max_length")

    def clip_by_clip(batch):  # right, written another way: one call per clip, the column built by hand
        values = []
        for a in batch["audio"]:
            wave = resample(a["array"], a["sampling_rate"], 16_000)
            values.append(extractor(wave, sampling_rate=16_000, max_length=8_000, truncation="longest_first",
                                    padding="max_length")["input_values"][0])
        return {"input_values": values}

    def numpy_with_the_length_computed(batch):  # right, another way: 0.5 s x the rate, NumPy arrays, keywords
        rate = extractor.sampling_rate
        waves = [resample(wave=a["array"], orig_rate=a["sampling_rate"], target_rate=rate) for a in batch["audio"]]
        return extractor(waves, sampling_rate=rate, max_length=int(0.5 * rate), truncation=True,
                         padding="max_length", return_tensors="np")

    def no_resampling(batch):
        waves = [np.asarray(a["array"]) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=8_000, truncation=True, padding="max_length")

    def one_second(batch):  # preprocess_audio's MAX_SECONDS kept
        waves = [resample(a["array"], a["sampling_rate"], 16_000) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=16_000, truncation=True, padding="max_length")

    def no_padding(batch):  # long clips cut, short ones left short: the check's tones are all over 0.5 s
        waves = [resample(a["array"], a["sampling_rate"], 16_000) for a in batch["audio"]]
        return extractor(waves, sampling_rate=16_000, max_length=8_000, truncation=True)

    return {f.__name__: f for f in (solution, clip_by_clip, numpy_with_the_length_computed, no_resampling,
                                    one_second, no_padding)}


@pytest.mark.parametrize("name, words", [
    ("solution", ""),
    right("1.2 q4", "clip_by_clip", ""),
    right("1.2 q4", "numpy_with_the_length_computed", ""),
    mistake("1.2 q4", "no_resampling", "resample it to 16 kHz"),
    mistake("1.2 q4", "one_second", "a clip became 16000 values; 0.5 s at 16 kHz is 8,000"),
    mistake("1.2 q4", "no_padding", "short clips must be padded"),
])
def test_1_2_q4(extractor, name, words):
    sounds = make_tones(6, 1, seed=2)["train"]
    assert len({a["sampling_rate"] for a in sounds["audio"]}) > 1
    result = l12.q4.evaluate(_half_second_answers(extractor)[name], sounds, extractor)
    assert (result.status == "correct") == (words == "") and words in result.message, (name, result)


def _short_pair_answers(tokenizer):
    """1.3 q1's answers by name."""

    def solution(batch):
        return tokenizer(batch["sentence1"], batch["sentence2"], truncation=True, max_length=16)

    def by_keyword(batch):  # right, written another way: the pair by keyword, the strategy by name
        return tokenizer(text=batch["sentence1"], text_pair=batch["sentence2"], truncation="longest_first",
                         max_length=16)

    def max_length_only(batch):  # right: the same tokens, max_length alone turns truncation on (longest_first)
        return tokenizer(batch["sentence1"], batch["sentence2"], max_length=16)

    def too_long(batch):  # tokenize's own length kept
        return tokenizer(batch["sentence1"], batch["sentence2"], truncation=True, max_length=128)

    def one_sentence(batch):
        return tokenizer(batch["sentence1"], truncation=True, max_length=16)

    def joined(batch):  # the two sentences joined into one string: no [SEP] between them
        return tokenizer([f"{a} {b}" for a, b in zip(batch["sentence1"], batch["sentence2"])], truncation=True,
                         max_length=16)

    return {f.__name__: f for f in (solution, by_keyword, max_length_only, too_long, one_sentence, joined)}


@pytest.mark.parametrize("name, words", [
    ("solution", ""),
    right("1.3 q1", "by_keyword", ""),
    right("1.3 q1", "max_length_only", ""),
    mistake("1.3 q1", "too_long", "pass truncation=True and max_length=16"),
    mistake("1.3 q1", "one_sentence", "two [SEP] tokens): pass sentence1 AND sentence2"),
    mistake("1.3 q1", "joined", "two [SEP] tokens): pass sentence1 AND sentence2"),
])
def test_1_3_q1(tokenizer, name, words):
    result = l13.q1.evaluate(_short_pair_answers(tokenizer)[name], make_pairs(8, 1)["train"], tokenizer)
    assert (result.status == "correct") == (words == "") and words in result.message, (name, result)


@pytest.mark.parametrize("answer, status, words", [
    ((4, 2), "correct", ""),
    right("1.3 q2", [4, 2], "correct", ""),  # a list
    right("1.3 q2", (4.0, np.int64(2)), "correct", ""),  # a float, a NumPy integer
    mistake("1.3 q2", (4, 0), "incorrect", "how many more than the 10 that exist"),
    mistake("1.3 q2", (3, 2), "incorrect", "3 samples per rank is not it: 10 samples make 5 batches of 2"),
    (4, "incorrect", "pair"),
])
def test_1_3_q2(answer, status, words):
    result = l13.q2.evaluate(answer)
    assert result.status == status and words in result.message


@pytest.mark.parametrize("answer, english, portuguese", [
    mistake("1.3 q2", (2, 1), "2 is how many batches each rank gets; the answer counts samples",
            "2 é quantos lotes cada rank recebe; a resposta conta amostras"),  # batches, not samples
    mistake("1.3 q2", (4, 12), "12 is how many samples the 3 ranks receive in all",
            "12 é quantas amostras os 3 ranks recebem no total"),  # the total, not the repeats
])
def test_1_3_q2_names_batches_for_samples_and_the_total_for_the_repeats(answer, english, portuguese, monkeypatch):
    for lang, words in (("en", english), ("pt-BR", portuguese)):
        speak(monkeypatch, lang)
        result = l13.q2.evaluate(answer)
        assert result.status == "incorrect" and words in result.message, (lang, result)


@pytest.fixture(scope="module")
def pairs_split(tokenizer):
    """1.3's tokenized training split: sentence pairs, their 'label' column renamed 'labels'."""
    data = make_pairs(40, 1).map(lambda b: tokenizer(b["sentence1"], b["sentence2"]), batched=True,
                                remove_columns=["sentence1", "sentence2"]).rename_column("label", "labels")
    return data["train"]


def _padding_by_hand(tokenizer):
    """Right, written another way: a function that pads with the tokenizer itself, no collator class."""
    return lambda rows: tokenizer.pad(rows, padding="longest", pad_to_multiple_of=8, return_tensors="pt")


# 1.3 q3's answers as (the collator's arguments, or a function of the tokenizer that makes it, whether the split keeps
# its labels, the words of its message): right ones written other ways, and each usual mistake (no rounding, a fixed
# max_length, another multiple, a split without its labels).
@pytest.mark.parametrize("arguments, labelled, words", [
    ({"pad_to_multiple_of": 8}, True, ""),
    # every argument by keyword, the padding spelled out
    right("1.3 q3", {"tokenizer": None, "padding": "longest", "pad_to_multiple_of": 8, "return_tensors": "pt"}, True,
          ""),
    right("1.3 q3", _padding_by_hand, True, ""),
    mistake("1.3 q3", {}, True, "not rounded up; pass pad_to_multiple_of=8"),
    mistake("1.3 q3", {"padding": "max_length", "max_length": 128}, True, "that is padding to a fixed max_length"),
    # padding="max_length" taken for "up to a multiple"
    mistake("1.3 q3", {"padding": "max_length", "pad_to_multiple_of": 8}, True,
            "that is padding to a fixed max_length"),
    mistake("1.3 q3", {"pad_to_multiple_of": 16}, True, "expected"),
    ({"pad_to_multiple_of": 8}, False, "no 'labels'"),
])
def test_1_3_q3_names_each_usual_mistake(tokenizer, pairs_split, arguments, labelled, words):
    split = pairs_split if labelled else pairs_split.remove_columns("labels")
    if callable(arguments):
        collator = arguments(tokenizer)
    elif "tokenizer" in arguments:
        collator = DataCollatorWithPadding(**{**arguments, "tokenizer": tokenizer})
    else:
        collator = DataCollatorWithPadding(tokenizer, **arguments)
    result = l13.q3.evaluate(collator, split)
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

    def prepare_discarded(dataset, collate_fn):  # prepare called, the DataLoader passed in iterated
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator()
        loader = DataLoader(dataset, batch_size=2, collate_fn=collate_fn)
        accelerator.prepare(loader)
        return [i for batch in loader for i in batch["idx"].tolist()]

    def prepare_data_loader(dataset, collate_fn):  # right, another way: prepare_data_loader, a loop, ints one by one
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        loader = Accelerator().prepare_data_loader(DataLoader(dataset, 2, shuffle=False, collate_fn=collate_fn))
        read = []
        for batch in loader:
            read.extend(int(i) for i in batch["idx"])
        return read

    def batch_sampler(dataset, collate_fn):  # right, another way: a BatchSampler given, the ids summed into a list
        from accelerate import Accelerator
        from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

        accelerator = Accelerator()
        sampler = BatchSampler(SequentialSampler(dataset), batch_size=2, drop_last=False)
        loader = accelerator.prepare(DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_fn))
        return sum((batch["idx"].tolist() for batch in loader), [])

    return {f.__name__: f for f in (prepared, plain, by_hand, first_batch_only, prepare_discarded,
                                    prepare_data_loader, batch_sampler)}


@pytest.fixture(scope="module")
def shard_data(tokenizer):
    data = make_pairs(4, 12).map(lambda b: tokenizer(b["sentence1"], b["sentence2"]), batched=True,
                                 remove_columns=["sentence1", "sentence2"])
    data.set_format("torch")
    return data["validation"], DataCollatorWithPadding(tokenizer)


EXHAUSTIVE = (pytest.mark.slow, pytest.mark.exhaustive)


@pytest.mark.slow
@pytest.mark.parametrize("name, status, words", [
    ("prepared", "correct", ""),
    mistake("1.3 q4", "plain", "incorrect", "both processes read all 12 samples: a plain DataLoader is not sharded"),
    mistake("1.3 q4", "by_hand", "incorrect", "not the split accelerator.prepare makes"),
    ("first_batch_only", "incorrect", "were read by no process"),
    # each launch costs seconds: the right forms and the discarded prepare (same branch as plain) in test-all
    mistake("1.3 q4", "prepare_discarded", "incorrect", "iterate over the loader prepare returns", marks=EXHAUSTIVE),
    right("1.3 q4", "prepare_data_loader", "correct", "", marks=EXHAUSTIVE),
    right("1.3 q4", "batch_sampler", "correct", "", marks=EXHAUSTIVE),
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
