"""Which image processor and audio feature extractor do I use? (lesson 1.2)

Same order as ``models.choose_model``: a folder or Hub id you give; the course's choice from the classroom's
offline kit (``effitrain prefetch``), else from the Hugging Face cache (``google/vit-base-patch16-224`` for images, ``facebook/wav2vec2-base`` for audio); the Hub
when reachable; else a processor with the same settings, built locally under the cache folder and
loaded back through ``AutoImageProcessor`` / ``AutoFeatureExtractor.from_pretrained``. A processor is
only configuration (no weights), so the local one behaves exactly like the real one.
"""

from __future__ import annotations

from pathlib import Path

from effitrain_helpers.core.cache import build_once
from effitrain_helpers.core.language import msg
from effitrain_helpers.sources.kit import ITEMS
from effitrain_helpers.sources.models import ModelChoice, resolve_checkpoint

IMAGE_PROCESSOR = ITEMS["image_processor"].repo_id  # "google/vit-base-patch16-224"
FEATURE_EXTRACTOR = ITEMS["feature_extractor"].repo_id  # "facebook/wav2vec2-base"
MARKER = "preprocessor_config.json"
TARGET_RATE = 16000


def _write_image_processor(folder: Path) -> None:
    from transformers import ViTImageProcessorPil

    ViTImageProcessorPil(  # the settings of google/vit-base-patch16-224
        do_resize=True, size={"height": 224, "width": 224}, do_rescale=True, rescale_factor=1 / 255,
        do_normalize=True, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    ).save_pretrained(folder)


def _write_feature_extractor(folder: Path) -> None:
    from transformers import Wav2Vec2FeatureExtractor

    Wav2Vec2FeatureExtractor(  # the settings of facebook/wav2vec2-base
        feature_size=1, sampling_rate=TARGET_RATE, padding_value=0.0, do_normalize=True, return_attention_mask=False,
    ).save_pretrained(folder)


def choose_image_processor(name: str | None = None) -> ModelChoice:
    """Where the image processor comes from (see module docstring). Never downloads."""
    return resolve_checkpoint(
        name, default_id=IMAGE_PROCESSOR, marker=MARKER, what=msg("image processor"), kit_key="image_processor",
        build_offline=lambda: build_once("processors/vit-224", _write_image_processor, MARKER),
        offline_desc=msg("using a ViT image processor with the same settings, saved locally"),
    )


def choose_feature_extractor(name: str | None = None) -> ModelChoice:
    """Where the audio feature extractor comes from (see module docstring). Never downloads."""
    return resolve_checkpoint(
        name, default_id=FEATURE_EXTRACTOR, marker=MARKER, what=msg("feature extractor"), kit_key="feature_extractor",
        build_offline=lambda: build_once("processors/wav2vec2-16k", _write_feature_extractor, MARKER),
        offline_desc=msg("using a Wav2Vec2 feature extractor with the same settings, saved locally"),
    )
