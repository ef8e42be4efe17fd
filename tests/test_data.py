"""The offline datasets (pairs, images, audio) and the processors: real formats, real shapes."""

import random

import numpy as np
import pytest

from effitrain_helpers.sources import corpus, media, pairs, processors


def test_workbook_pairs_have_the_mrpc_layout():
    data, choice = pairs.load_pairs(n_train=50, n_validation=20)
    assert choice.source == "workbook" and "HF_HUB_OFFLINE" in choice.reason
    assert set(data) == {"train", "validation"} and (len(data["train"]), len(data["validation"])) == (50, 20)
    for split in data.values():
        assert split.column_names == ["sentence1", "sentence2", "label", "idx"]
        assert split.features["label"].names == ["not_equivalent", "equivalent"]
        assert split["idx"] == list(range(len(split)))


def test_workbook_pairs_are_deterministic_balanced_and_never_identical():
    a, b = pairs.make_pairs(300, 10, seed=3), pairs.make_pairs(300, 10, seed=3)
    assert a["train"][:] == b["train"][:]
    labels = a["train"]["label"]
    assert 0.4 < sum(labels) / len(labels) < 0.7
    assert all(r["sentence1"] != r["sentence2"] for r in a["train"])


def test_paraphrases_keep_who_did_what():
    rng = random.Random(0)
    for _ in range(200):
        s1, s2, label = pairs.make_pair(rng)
        subject = next(s for s in pairs.SUBJECTS if s1.startswith(s))
        if label:
            assert corpus.lower_first(subject) in s2 or subject in s2


def test_the_real_mrpc_sample_loads_through_the_same_pipeline():
    data, choice = pairs.load_pairs(pairs.MRPC_SAMPLE)
    assert choice.source == "local"
    assert (len(data["train"]), len(data["validation"])) == (6, 6)
    first = data["train"][0]
    assert first["label"] == 1 and first["sentence1"].startswith("He said the foodservice pie business")
    assert data["train"].features["label"].names == ["not_equivalent", "equivalent"]
    assert data["validation"]["idx"] == list(range(6))


def test_a_single_csv_file_is_split_for_validation(tmp_path):
    path = tmp_path / "pairs.csv"
    rows = ["label,sentence1,sentence2"] + [f"{i % 2},A{i} ran.,B{i} ran." for i in range(10)]
    path.write_text("\n".join(rows))
    data, _ = pairs.load_pairs(path)
    assert (len(data["train"]), len(data["validation"])) == (8, 2)


def test_bad_local_data_is_explained(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        pairs.load_pairs(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nhello,1\n")
    with pytest.raises(ValueError, match=r"missing \['sentence1', 'sentence2'\]"):
        pairs.load_pairs(bad)
    labels = tmp_path / "labels.csv"
    labels.write_text("label,sentence1,sentence2\nsame,a,b\n")
    with pytest.raises(ValueError, match=r"label not allowed \(row 1: 'same'\)"):
        pairs.load_pairs(labels)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "only_train.csv").write_text("label,sentence1,sentence2\n1,a,b\n")
    with pytest.raises(ValueError, match="needs a \\*train\\* and a \\*dev\\*"):
        pairs.load_pairs(folder)


def test_shapes_are_pil_images_of_varied_sizes():
    data = media.make_shapes(12, 3, seed=1)
    sizes = {img.size for img in data["train"]["image"]}
    assert len(sizes) > 3 and all(48 <= w <= 160 and 48 <= h <= 160 for w, h in sizes)
    assert data["train"].features["label"].names == media.SHAPES


def test_tones_have_mixed_rates_and_lengths():
    data = media.make_tones(24, 4, seed=1)
    rates = {a["sampling_rate"] for a in data["train"]["audio"]}
    lengths = {len(a["array"]) for a in data["train"]["audio"]}
    assert len(rates) > 1 and rates <= set(media.SAMPLING_RATES) and len(lengths) > 10
    wave = np.asarray(data["train"][0]["audio"]["array"])
    assert data["train"].features["audio"]["array"].feature.dtype == "float32" and np.abs(wave).max() <= 0.7


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 16000])
def test_resampling_keeps_duration_and_pitch(rate):
    rng = random.Random(0)
    wave = media.synth_sound("tone", rate, 1.0, rng)
    out = media.resample(wave, rate, 16000)
    assert len(out) == 16000 and out.dtype == np.float32
    peak_hz = np.argmax(np.abs(np.fft.rfft(out))) * 16000 / len(out)
    peak_in = np.argmax(np.abs(np.fft.rfft(wave))) * rate / len(wave)
    assert abs(peak_hz - peak_in) <= 2


@pytest.mark.parametrize("bad", [0, -16000, 1.5, True])
def test_resample_rejects_bad_rates(bad):
    with pytest.raises(ValueError, match=r"orig_rate=.* must be a whole number >= 1. Fix: .* Hz"):
        media.resample(np.zeros(10), bad, 16000)


def test_bad_builder_arguments():
    with pytest.raises(ValueError, match="n_train=0"):
        media.make_shapes(0, 1)
    with pytest.raises(ValueError, match="shape 'hexagon'"):
        media.draw_shape("hexagon", random.Random(0))
    with pytest.raises(ValueError, match="n_validation=-1"):
        pairs.make_pairs(10, -1)


def test_offline_processors_turn_images_and_audio_into_model_inputs():
    from transformers import AutoFeatureExtractor, AutoImageProcessor

    image_choice, audio_choice = processors.choose_image_processor(), processors.choose_feature_extractor()
    assert image_choice.source == audio_choice.source == "offline-build"
    image_processor = AutoImageProcessor.from_pretrained(image_choice.path, backend="pil")
    images = list(media.make_shapes(3, 1)["train"]["image"])
    pixels = image_processor(images, return_tensors="np")["pixel_values"]
    assert pixels.shape == (3, 3, 224, 224) and pixels.min() >= -1 and pixels.max() <= 1
    extractor = AutoFeatureExtractor.from_pretrained(audio_choice.path)
    assert extractor.sampling_rate == 16000
    out = extractor([np.ones(100), np.ones(50)], sampling_rate=16000, max_length=80, truncation=True,
                    padding="max_length", return_tensors="np")
    assert out["input_values"].shape == (2, 80)
    with pytest.raises(ValueError, match="16000"):
        extractor([np.ones(100)], sampling_rate=44100)
