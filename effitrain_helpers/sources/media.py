"""Small image and audio datasets in the real formats, made offline (lesson 1.2).

- ``make_shapes``: an ``image`` column of PIL images of varied sizes (a circle, a square or a triangle,
  drawn at a random place and colour) and a ``label`` (``ClassLabel``: circle / square / triangle);
- ``make_tones``: an ``audio`` column of ``{"array", "sampling_rate"}`` at mixed sampling rates
  (8, 16, 22.05, 44.1 kHz) and lengths, and a ``label`` (steady tone / rising chirp).

Both return ``DatasetDict`` objects with ``train`` and ``validation`` splits, deterministic for a seed.
"""

from __future__ import annotations

import math
import random

import numpy as np

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.validate import positive_int

SHAPES = ["circle", "square", "triangle"]
SOUNDS = ["tone", "chirp"]
SAMPLING_RATES = [8000, 16000, 22050, 44100]


def _check_counts(**counts: int) -> None:
    for name, n in counts.items():
        positive_int(name, n)


def draw_shape(shape: str, rng: random.Random):
    """One RGB PIL image of ``shape`` on a light background, 48-160 pixels on each side."""
    from PIL import Image, ImageDraw

    if shape not in SHAPES:
        raise ValueError(tr("shape {shape!r} is not allowed; choose from {shapes}.", shape=shape, shapes=SHAPES))
    w, h = rng.randint(48, 160), rng.randint(48, 160)
    img = Image.new("RGB", (w, h), tuple(rng.randint(200, 255) for _ in range(3)))
    side = rng.randint(min(w, h) // 3, int(min(w, h) * 0.8))
    x0, y0 = rng.randint(0, w - side), rng.randint(0, h - side)
    color = tuple(rng.randint(0, 150) for _ in range(3))
    pen = ImageDraw.Draw(img)
    if shape == "circle":
        pen.ellipse((x0, y0, x0 + side, y0 + side), fill=color)
    elif shape == "square":
        pen.rectangle((x0, y0, x0 + side, y0 + side), fill=color)
    else:
        pen.polygon([(x0, y0 + side), (x0 + side, y0 + side), (x0 + side / 2, y0)], fill=color)
    return img


def make_shapes(n_train: int = 60, n_validation: int = 15, seed: int = 0):
    """``DatasetDict`` of drawn shapes: ``image`` (PIL, varied sizes) and ``label``."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image

    _check_counts(n_train=n_train, n_validation=n_validation)
    rng = random.Random(seed)
    features = Features({"image": Image(), "label": ClassLabel(names=SHAPES)})
    splits = {}
    for split, n in (("train", n_train), ("validation", n_validation)):
        labels = [rng.randrange(len(SHAPES)) for _ in range(n)]
        images = [draw_shape(SHAPES[y], rng) for y in labels]
        splits[split] = Dataset.from_dict({"image": images, "label": labels}, features=features)
    return DatasetDict(splits)


def synth_sound(kind: str, sampling_rate: int, seconds: float, rng: random.Random) -> np.ndarray:
    """A float32 waveform in [-1, 1]: a steady tone, or a chirp rising an octave or more, with a little hiss
    and a small DC offset, as a real recording has."""
    if kind not in SOUNDS:
        raise ValueError(tr("sound {kind!r} is not allowed; choose from {sounds}.", kind=kind, sounds=SOUNDS))
    t = np.arange(int(sampling_rate * seconds)) / sampling_rate
    f0 = rng.uniform(220, 880)
    if kind == "tone":
        phase = 2 * math.pi * f0 * t
    else:
        f1 = f0 * rng.uniform(2, 4)
        phase = 2 * math.pi * (f0 * t + (f1 - f0) * t**2 / (2 * seconds))
    fade = np.minimum(1, np.minimum(t, seconds - t) / 0.02)  # 20 ms fades: no clicks
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0, 0.01, len(t))  # microphone hiss
    offset = rng.uniform(-0.05, 0.05)  # and the small DC offset real microphones have
    return (0.5 * np.sin(phase) * fade + noise + offset).astype(np.float32)


def make_tones(n_train: int = 40, n_validation: int = 10, seed: int = 0):
    """``DatasetDict`` of sounds: ``audio`` = {"array", "sampling_rate"} at mixed rates and lengths, ``label``."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value

    _check_counts(n_train=n_train, n_validation=n_validation)
    rng = random.Random(seed)
    features = Features({
        "audio": {"array": List(Value("float32")), "sampling_rate": Value("int32")},
        "label": ClassLabel(names=SOUNDS),
    })
    splits = {}
    for split, n in (("train", n_train), ("validation", n_validation)):
        rows = {"audio": [], "label": []}
        for _ in range(n):
            label, rate = rng.randrange(len(SOUNDS)), rng.choice(SAMPLING_RATES)
            wave = synth_sound(SOUNDS[label], rate, rng.uniform(0.5, 2.5), rng)
            rows["audio"].append({"array": wave, "sampling_rate": rate})
            rows["label"].append(label)
        splits[split] = Dataset.from_dict(rows, features=features)
    return DatasetDict(splits)


def resample(wave, orig_rate: int, target_rate: int = 16000) -> np.ndarray:
    """``wave`` resampled from ``orig_rate`` to ``target_rate`` Hz with a polyphase anti-aliasing filter."""
    from scipy.signal import resample_poly

    for name, rate in (("orig_rate", orig_rate), ("target_rate", target_rate)):
        positive_int(name, rate, hint=tr("give a sampling rate in Hz (samples per second), e.g. {call}", call=f"{name}=16000"))
    wave = np.asarray(wave, dtype=np.float32)
    if orig_rate == target_rate:
        return wave
    g = math.gcd(int(orig_rate), int(target_rate))
    return resample_poly(wave, target_rate // g, orig_rate // g).astype(np.float32)
