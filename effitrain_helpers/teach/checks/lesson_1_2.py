"""Exercises of lesson 1.2 (preprocess images and audio)."""

from __future__ import annotations

import math

import numpy as np

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number
from effitrain_helpers.sources.media import resample


def _check_resampled_length(answer) -> None:
    n = as_number(answer)
    if math.isclose(n, 40_000):
        return
    if math.isclose(n, 2.5 * 44_100):
        raise Incorrect("that is the length before resampling: the clip keeps 2.5 s but gets 16,000 samples per second.")
    if math.isclose(n, 2.5 * 44_100 * 44_100 / 16_000, rel_tol=1e-3):
        raise Incorrect("the ratio is upside down: going from 44.1 kHz to 16 kHz makes the clip shorter in samples.")
    raise Incorrect(f"{answer!r} samples is not right: duration (s) x new sampling rate (Hz).")


def _check_pixel_range(answer, processor) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(f"answer should be a pair (white, black); you gave {answer!r}.")
    white, black = (as_number(a) for a in answer)
    mean, std, scale = processor.image_mean[0], processor.image_std[0], processor.rescale_factor
    want = ((255 * scale - mean) / std, (0 - mean) / std)
    if math.isclose(white, want[0], abs_tol=1e-3) and math.isclose(black, want[1], abs_tol=1e-3):
        return
    if (white, black) == (255, 0):
        raise Incorrect("those are the stored values; the processor rescales and normalises them.")
    if math.isclose(white, 255 * scale, abs_tol=1e-3) and math.isclose(black, 0, abs_tol=1e-3):
        raise Incorrect("you rescaled to [0, 1] but did not normalise: subtract the mean, divide by the std.")
    raise Incorrect(f"{(white, black)} is not what this processor makes of white (255) and black (0) pixels.")


def _check_image_map(fn, dataset) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    out = dataset.select(range(min(4, len(dataset)))).map(fn, batched=True, remove_columns=dataset.column_names)
    if "pixel_values" not in out.column_names:
        raise Incorrect(f"your function should return a dict with 'pixel_values'; the result has {out.column_names}.")
    shape = np.asarray(out[0]["pixel_values"]).shape
    if shape != (3, 64, 64):
        raise Incorrect(f"one image became shape {shape}; expected (3, 64, 64): pass size={{'height': 64, 'width': 64}}.")
    from transformers import ViTImageProcessorPil

    reference = ViTImageProcessorPil(size={"height": 64, "width": 64}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    for row, got in zip(dataset.select(range(len(out))), out["pixel_values"]):
        if not np.allclose(np.asarray(got), reference(row["image"])["pixel_values"][0], atol=1e-4):
            raise Incorrect("the shape is right but the values are not what the image processor makes: "
                            "call image_processor on each image (resize, rescale and normalise).")


def _check_audio_map(fn, dataset, extractor) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    sample = dataset.select(range(min(6, len(dataset))))
    out = sample.map(fn, batched=True, remove_columns=dataset.column_names)
    if "input_values" not in out.column_names:
        raise Incorrect(f"your function should return 'input_values'; the result has {out.column_names}.")
    for row, got in zip(sample, out["input_values"]):
        audio = row["audio"]
        wave = resample(audio["array"], audio["sampling_rate"], 16_000)
        want = extractor([wave], sampling_rate=16_000, max_length=8_000, truncation=True, padding="max_length")
        got = np.asarray(got)
        if got.shape != (8_000,):
            raise Incorrect(f"a clip became {got.shape[0]} values; 0.5 s at 16 kHz is 8,000 (truncate and pad).")
        if not np.allclose(got, want["input_values"][0], atol=1e-4):
            raise Incorrect(f"a clip recorded at {audio['sampling_rate']} Hz came out different: resample it to 16 kHz "
                            "before the feature extractor.")


q1 = Exercise(
    "1.2 q1: samples after resampling",
    _check_resampled_length,
    usage="q1.check(n_samples)",
    hints=["Resampling keeps the duration and changes how many samples describe each second.",
           "2.5 seconds x 16,000 samples per second."],
    solution_code="n_samples = int(2.5 * 16_000)\nq1.check(n_samples)",
)
q2 = Exercise(
    "1.2 q2: what the model sees for white and black",
    _check_pixel_range,
    usage="q2.check((white, black), image_processor)",
    hints=["The processor first multiplies by `rescale_factor` (1/255), then subtracts `image_mean` and divides by `image_std`.",
           "White: (255/255 - 0.5) / 0.5. Black: (0 - 0.5) / 0.5."],
    solution_code=(
        "p = image_processor\n"
        "white = (255 * p.rescale_factor - p.image_mean[0]) / p.image_std[0]\n"
        "black = (0 - p.image_mean[0]) / p.image_std[0]\n"
        "q2.check((white, black), image_processor)"
    ),
)
q3 = Exercise(
    "1.2 q3: thumbnails with Dataset.map",
    _check_image_map,
    usage='q3.check(to_thumbnails, shapes["train"])',
    hints=["Same as `preprocess_images`, with one more argument to the processor.",
           "image_processor(batch['image'], size={'height': 64, 'width': 64})"],
    solution_code=(
        "def to_thumbnails(batch):\n"
        "    out = image_processor(batch['image'], size={'height': 64, 'width': 64})\n"
        "    return {'pixel_values': out['pixel_values']}\n\n"
        "q3.check(to_thumbnails, shapes['train'])"
    ),
)
q4 = Exercise(
    "1.2 q4: half-second audio features",
    _check_audio_map,
    usage='q4.check(half_second, sounds["train"], feature_extractor)',
    hints=["Resample every clip to 16 kHz first, as in `preprocess_audio`.",
           "Then max_length=8000 (0.5 s x 16,000 Hz) with truncation=True and padding='max_length'."],
    solution_code=(
        "def half_second(batch):\n"
        "    waves = [resample(a['array'], a['sampling_rate'], 16_000) for a in batch['audio']]\n"
        "    return feature_extractor(waves, sampling_rate=16_000, max_length=8_000,\n"
        "                             truncation=True, padding='max_length')\n\n"
        "q4.check(half_second, sounds['train'], feature_extractor)"
    ),
)
