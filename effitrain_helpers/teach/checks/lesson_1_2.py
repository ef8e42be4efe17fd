"""Exercises of lesson 1.2 (preprocess images and audio): q1, q3 and q4 call the processors with the
settings the model expects and are judged by the tensors they make; q2 is the arithmetic of normalising."""

from __future__ import annotations

import math

import numpy as np

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number
from effitrain_helpers.sources.media import resample


def _check_clip_inputs(inputs, clip, extractor) -> None:
    """The learner's feature-extractor output for one clip: a torch tensor at the model's rate, normalised."""
    import torch

    if not hasattr(inputs, "keys") or "input_values" not in inputs:
        raise Incorrect(tr("give the feature extractor's output (it has 'input_values'); you gave {kind}.",
                           kind=type(inputs).__name__))
    values = inputs["input_values"]
    if not isinstance(values, torch.Tensor):
        raise Incorrect(tr("input_values is a {kind}, not a PyTorch tensor: ask the extractor for tensors with "
                           "return_tensors=\"pt\".", kind=type(values).__name__))
    rate = extractor.sampling_rate
    wave = resample(clip["array"], clip["sampling_rate"], rate)
    if values.ndim != 2 or values.shape[0] != 1:
        raise Incorrect(tr("input_values has shape {shape}; one clip gives a batch of one: (1, samples).",
                           shape=tuple(values.shape)))
    if values.shape[1] == len(clip["array"]) != len(wave):
        raise Incorrect(tr("{samples} samples is the clip at {sampling_rate} Hz: resample it to the model's {rate} "
                           "Hz first.", samples=values.shape[1], sampling_rate=clip['sampling_rate'], rate=rate))
    if values.shape[1] != len(wave):
        raise Incorrect(tr("{samples} samples; the clip resampled to {rate} Hz has {wave_count}: do not pad or cut "
                           "it here.", samples=values.shape[1], rate=rate, wave_count=len(wave)))
    if values.dtype != torch.float32:
        raise Incorrect(tr("input_values are {dtype}; the model takes float32.", dtype=values.dtype))
    want = extractor(wave, sampling_rate=rate, return_tensors="pt")["input_values"]
    if not torch.allclose(values, want, atol=1e-4):
        raise Incorrect(tr("the shape is right but the values are not the extractor's (normalised to zero mean "
                           "and unit variance): call feature_extractor on the resampled wave."))


def _check_pixel_range(answer, processor) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(tr("answer should be a pair (white, black); you gave {answer!r}.", answer=answer))
    white, black = (as_number(a) for a in answer)
    mean, std, scale = processor.image_mean[0], processor.image_std[0], processor.rescale_factor
    want = ((255 * scale - mean) / std, (0 - mean) / std)
    if math.isclose(white, want[0], abs_tol=1e-3) and math.isclose(black, want[1], abs_tol=1e-3):
        return
    if (white, black) == (255, 0):
        raise Incorrect(tr("those are the stored values; the processor rescales and normalises them."))
    if math.isclose(white, 255 * scale, abs_tol=1e-3) and math.isclose(black, 0, abs_tol=1e-3):
        raise Incorrect(tr("you rescaled to [0, 1] but did not normalise: subtract the mean, divide by the std."))
    if math.isclose(white, want[1], abs_tol=1e-3) and math.isclose(black, want[0], abs_tol=1e-3):
        raise Incorrect(tr("those are the two right values in the wrong order: the pair is (white, black), "
                           "white first."))
    if math.isclose(white, (255 - mean) / std, abs_tol=1e-3):
        raise Incorrect(tr("white came out {white:g}: you normalised the stored value 255 without rescaling it; "
                           "multiply by the rescale factor first, then subtract the mean and divide by the std.",
                           white=white))
    raise Incorrect(tr("{pair} is not what this processor makes of white (255) and black (0) pixels.",
                       pair=(white, black)))


def _check_image_map(fn, dataset) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    out = dataset.select(range(min(4, len(dataset)))).map(fn, batched=True, remove_columns=dataset.column_names)
    if "pixel_values" not in out.column_names:
        raise Incorrect(tr("your function should return a dict with 'pixel_values'; the result has "
                           "{column_names}.", column_names=out.column_names))
    shape = np.asarray(out[0]["pixel_values"]).shape
    if shape != (3, 64, 64):
        raise Incorrect(tr("one image became shape {shape}; expected (3, 64, 64): pass size={{'height': 64, "
                           "'width': 64}}.", shape=shape))
    from transformers import ViTImageProcessorPil

    reference = ViTImageProcessorPil(size={"height": 64, "width": 64}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    for row, got in zip(dataset.select(range(len(out))), out["pixel_values"]):
        if not np.allclose(np.asarray(got), reference(row["image"])["pixel_values"][0], atol=1e-4):
            raise Incorrect(tr("the shape is right but the values are not what the image processor makes: call "
                               "image_processor on each image (resize, rescale and normalise)."))


def _check_audio_map(fn, dataset, extractor) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    sample = dataset.select(range(min(6, len(dataset))))
    out = sample.map(fn, batched=True, remove_columns=dataset.column_names)
    if "input_values" not in out.column_names:
        raise Incorrect(tr("your function should return 'input_values'; the result has {column_names}.",
                           column_names=out.column_names))
    for row, got in zip(sample, out["input_values"]):
        audio = row["audio"]
        wave = resample(audio["array"], audio["sampling_rate"], 16_000)
        want = extractor([wave], sampling_rate=16_000, max_length=8_000, truncation=True, padding="max_length")
        got = np.asarray(got)
        if got.shape != (8_000,):
            raise Incorrect(tr("a clip became {count} values; 0.5 s at 16 kHz is 8,000 (truncate and pad).",
                               count=got.shape[0]))
        if not np.allclose(got, want["input_values"][0], atol=1e-4):
            raise Incorrect(tr("a clip recorded at {sampling_rate} Hz came out different: resample it to 16 kHz "
                               "before the feature extractor.", sampling_rate=audio['sampling_rate']))
    # a clip shorter than half a second (the tones above are all longer) must come out padded to 8,000 too
    first = sample[0]
    audio = first["audio"]
    short = {**audio, "array": list(audio["array"][:audio["sampling_rate"] // 5])}
    got = np.asarray(fn({**{column: [value] for column, value in first.items()}, "audio": [short]})["input_values"][0])
    if got.shape != (8_000,):
        raise Incorrect(tr("a clip of 0.2 s became {count} values: short clips must be padded up to 8,000 too "
                           "(long ones cut, short ones filled).", count=got.shape[0]))


q1 = Exercise(
    "1.2 q1: one clip, as the model expects it",
    _check_clip_inputs,
    usage="q1.check(inputs, clip, feature_extractor)",
    api=True,
    checked=("checked: a torch tensor at the model's sampling rate, normalised as its feature extractor does."),
    hints=["The model was pre-trained on audio at one sampling rate and takes PyTorch tensors; the extractor can "
           "only check the rate you tell it.",
           "`resample(wave, from_rate, to_rate)` (this lesson's helper, used above); then call the extractor "
           "with the rate it expects (one of its attributes, printed above) and ask it for PyTorch tensors: both "
           "are arguments of its `__call__` (transformers docs, 'Feature Extractor').",
           "Resample from the clip's own rate (a key of the clip, beside 'array') to the extractor's rate; "
           "then give the extractor that same rate and ask it for PyTorch tensors, as `preprocess_audio` "
           "above does for a whole batch."],
    solution_code=(
        "rate = feature_extractor.sampling_rate\n"
        "wave = resample(clip[\"array\"], clip[\"sampling_rate\"], rate)\n"
        "inputs = feature_extractor(wave, sampling_rate=rate, return_tensors=\"pt\")\n"
        "q1.check(inputs, clip, feature_extractor)"
    ),
)
q2 = Exercise(
    "1.2 q2: what the model sees for white and black",
    _check_pixel_range,
    usage="q2.check((white, black), image_processor)",
    hints=["The processor first rescales the 0..255 values to 0..1, then normalises: it subtracts a mean and "
           "divides by a standard deviation, as in pre-training.",
           "Its settings are attributes of the processor, printed above: the rescale factor (1/255), and a mean "
           "and a standard deviation per colour channel (transformers docs, 'ViT image processor', gives their "
           "names).",
           "Follow one white pixel through the two steps: rescale it, then subtract the channel's mean and "
           "divide by the channel's standard deviation (the processor keeps one of each per channel, in "
           "lists). Black takes the same walk from 0."],
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
    api=True,
    checked=("checked: your function made 'pixel_values' at the thumbnail size with the processor's own values."),
    hints=["Same as `preprocess_images`, with one more argument to the processor.",
           "The image processor's call accepts `size=` as a dict with 'height' and 'width' that overrides its "
           "own (transformers docs, 'ViT image processor'); a batched map function returns a dict of lists.",
           "Call the processor on the batch's images as `preprocess_images` does, with the thumbnail size the"
           " exercise asks for in that dict, and return only the 'pixel_values' column."],
    solution_code=(
        "def to_thumbnails(batch):\n"
        "    out = image_processor(batch[\"image\"], size={\"height\": 64, \"width\": 64})\n"
        "    return {\"pixel_values\": out[\"pixel_values\"]}\n\n"
        "q3.check(to_thumbnails, shapes[\"train\"])"
    ),
)
q4 = Exercise(
    "1.2 q4: half-second audio features",
    _check_audio_map,
    usage='q4.check(half_second, sounds["train"], feature_extractor)',
    api=True,
    checked=("checked: every clip resampled to 16 kHz and made 0.5 s long."),
    hints=["Resample every clip to 16 kHz first, as in `preprocess_audio`; then make every clip 0.5 s long.",
           "0.5 s x 16,000 Hz samples; the extractor cuts with `truncation=True` and `max_length=`, and fills "
           "with `padding=\"max_length\"` (transformers docs, 'Padding and truncation').",
           "Resample the batch's clips as in `preprocess_audio`, then call the extractor once on the whole "
           "list at 16 kHz with the three arguments of hint 2: the length in samples, cutting on, and padding"
           " up to that length."],
    solution_code=(
        "def half_second(batch):\n"
        "    waves = [resample(a[\"array\"], a[\"sampling_rate\"], 16_000) for a in batch[\"audio\"]]\n"
        "    return feature_extractor(waves, sampling_rate=16_000, max_length=8_000,\n"
        "                             truncation=True, padding=\"max_length\")\n\n"
        "q4.check(half_second, sounds[\"train\"], feature_extractor)"
    ),
)
