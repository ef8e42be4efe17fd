"""The classroom's offline kit: a folder laid out like `effitrain prefetch` writes it is found and used by the
model, processor and data loaders; a missing or broken one gives a clear message; prefetch refuses bad targets
and fails at once without network. No test touches the network."""

import json
import shutil
import time
from pathlib import Path

import pytest

from effitrain_helpers.sources import kit
from effitrain_helpers.cli import main
from effitrain_helpers.sources.kit import GLUE_MRPC_FILES, ITEMS, MANIFEST
from effitrain_helpers.sources.pairs import MRPC_SAMPLE, load_local_pairs, load_pairs


@pytest.fixture
def no_kit(monkeypatch, tmp_path):
    monkeypatch.delenv(kit.KIT_ENV, raising=False)
    monkeypatch.setattr(kit.SETTINGS, "cache_dir", tmp_path / "cache")
    return tmp_path


def _write_kit(folder: Path, keys=tuple(ITEMS)) -> Path:
    """A kit in prefetch's layout, from the workbook's own checkpoint and processors and real MRPC rows."""
    from effitrain_helpers.sources.models import build_offline_checkpoint
    from effitrain_helpers.sources.processors import choose_feature_extractor, choose_image_processor

    makers = {"model": build_offline_checkpoint, "image_processor": lambda: choose_image_processor().path,
              "feature_extractor": lambda: choose_feature_extractor().path}
    sources = {k: Path(makers[k]()) for k in keys if k in makers}  # before the kit folder exists
    folder.mkdir(parents=True, exist_ok=True)
    for key in keys:
        target = folder / ITEMS[key].folder
        if key == "mrpc":
            rows = load_local_pairs(MRPC_SAMPLE)  # 6 + 6 real rows, GLUE's columns and label names
            for split in ("train", "validation"):
                (target / GLUE_MRPC_FILES[split]).parent.mkdir(parents=True, exist_ok=True)
                rows[split].to_parquet(str(target / GLUE_MRPC_FILES[split]))
        else:
            shutil.copytree(sources[key], target)
    (folder / MANIFEST).write_text(json.dumps({"format": 1, "complete": True,
                                               "items": {k: {"folder": ITEMS[k].folder} for k in keys}}))
    return folder


@pytest.fixture(scope="module")
def built_kit(tmp_path_factory):
    return _write_kit(tmp_path_factory.mktemp("kit") / "kit")


def test_no_kit_costs_nothing_and_changes_nothing(no_kit):
    assert kit.find_kit() is None and kit.kit_item("model") is None
    assert "Offline kit: none" in kit.describe_kit()
    from effitrain_helpers.sources.models import choose_model

    assert choose_model().source == "offline-build"


def test_a_kit_is_found_and_used_by_every_loader(built_kit, monkeypatch, capsys):
    from effitrain_helpers.sources.models import choose_model, load_classifier
    from effitrain_helpers.sources.processors import choose_feature_extractor, choose_image_processor
    from effitrain_helpers.training.runs import TrainConfig, learning_rate

    monkeypatch.setenv(kit.KIT_ENV, str(built_kit))
    choice = choose_model()
    assert choice.source == "kit" and Path(choice.path) == built_kit / ITEMS["model"].folder
    assert choose_model("distilbert-base-cased").source == "kit", "the course's own id comes from the kit too"
    assert "offline kit" in str(choice) and "EFFITRAIN_KIT" in str(choice)
    model, tokenizer = load_classifier()
    assert "(kit)" in capsys.readouterr().out and model.config.model_type == "distilbert"
    assert learning_rate(TrainConfig()) == 5e-5, "a kit model is the real pre-trained one"
    assert choose_image_processor().source == "kit" and choose_feature_extractor().source == "kit"
    data, data_choice = load_pairs()
    assert data_choice.source == "kit" and "offline kit" in str(data_choice)
    assert len(data["train"]) == 6 and set(data["train"].column_names) >= {"sentence1", "sentence2", "label", "idx"}
    assert "ready" in kit.describe_kit() and main(["prefetch", "--check", "--dir", str(built_kit)]) == 0


def test_a_kit_without_an_item_falls_back_for_that_item(no_kit, monkeypatch):
    folder = _write_kit(no_kit / "partial", keys=("mrpc",))
    monkeypatch.setenv(kit.KIT_ENV, str(folder))
    from effitrain_helpers.sources.models import choose_model

    assert choose_model().source == "offline-build"
    assert load_pairs()[1].source == "kit"
    assert "not in this kit" in kit.describe_kit()


def test_the_default_place_is_used_without_the_variable(no_kit):
    _write_kit(kit.SETTINGS.cache_dir / "kit", keys=("mrpc",))
    hit = kit.kit_item("mrpc")
    assert hit is not None and "the default place" in hit.reason


def test_a_missing_kit_folder_is_a_clear_error(no_kit, monkeypatch):
    monkeypatch.setenv(kit.KIT_ENV, str(no_kit / "nowhere"))
    from effitrain_helpers.sources.models import choose_model

    with pytest.raises(ValueError, match="EFFITRAIN_KIT=.*nowhere.*does not exist.*unset EFFITRAIN_KIT"):
        choose_model()
    assert main(["model"]) == 2


def test_a_folder_that_is_not_a_kit_is_a_clear_error(no_kit, monkeypatch):
    (no_kit / "stuff").mkdir()
    monkeypatch.setenv(kit.KIT_ENV, str(no_kit / "stuff"))
    with pytest.raises(ValueError, match="has no effitrain-kit.json"):
        load_pairs()
    (no_kit / "stuff" / MANIFEST).write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read"):
        kit.kit_item("model")


def test_a_broken_item_is_a_clear_error(no_kit, monkeypatch):
    folder = _write_kit(no_kit / "broken", keys=("model",))
    (folder / ITEMS["model"].folder / "model.safetensors").unlink()
    monkeypatch.setenv(kit.KIT_ENV, str(folder))
    from effitrain_helpers.sources.models import choose_model

    with pytest.raises(ValueError, match="lacks model.safetensors or .*the copy is broken"):
        choose_model()
    assert "BROKEN" in kit.describe_kit() and main(["prefetch", "--check"]) == 1


# ---------------------------------------------------------------- prefetch

def test_prefetch_fails_at_once_when_offline_and_leaves_nothing(no_kit, monkeypatch):
    target = no_kit / "kit"
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set.*own small models"):
        kit.prefetch(target)
    assert not target.exists()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a closed local port: no network, refused at once
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"the Hub \(http://127.0.0.1:9\) cannot be reached"):
        kit.prefetch(target)
    assert time.perf_counter() - start < 5 and not target.exists()


def test_prefetch_refuses_a_target_it_cannot_use(no_kit, capsys):
    (no_kit / "file").write_text("x")
    with pytest.raises(ValueError, match="cannot write to the kit folder"):
        kit.prefetch(no_kit / "file" / "kit")  # below a file: not writable for anyone, root included
    with pytest.raises(ValueError, match="is a file"):
        kit.prefetch(no_kit / "file")
    (no_kit / "other").mkdir()
    (no_kit / "other" / "thesis.pdf").write_text("x")
    with pytest.raises(ValueError, match="holds other files and is not a kit"):
        kit.prefetch(no_kit / "other")
    assert main(["prefetch", "--dir", str(no_kit / "file" / "kit")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_prefetch_writes_the_layout_the_loaders_read(no_kit, monkeypatch):
    """prefetch and the loaders share ITEMS: a fake download in prefetch's hands gives a kit the loaders use."""
    import huggingface_hub

    import effitrain_helpers.sources.models as models
    from effitrain_helpers.core import hub

    from effitrain_helpers.sources.processors import choose_feature_extractor, choose_image_processor

    real = {"model": Path(models.build_offline_checkpoint()), "image_processor": Path(choose_image_processor().path),
            "feature_extractor": Path(choose_feature_extractor().path)}  # before the Hub is made to look reachable
    calls = []

    def fake_snapshot_download(repo_id, repo_type=None, local_dir=None, allow_patterns=None):
        calls.append((repo_id, repo_type))
        item = next(i for i in ITEMS.values() if i.repo_id == repo_id)
        local_dir = Path(local_dir)
        if item.key in real:
            shutil.copytree(real[item.key], local_dir, dirs_exist_ok=True)
        else:
            rows = load_local_pairs(MRPC_SAMPLE)
            for split in ("train", "validation"):
                (local_dir / GLUE_MRPC_FILES[split]).parent.mkdir(parents=True, exist_ok=True)
                rows[split].to_parquet(str(local_dir / GLUE_MRPC_FILES[split]))
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    monkeypatch.setattr(hub, "hub_problem", lambda timeout=3.0: None)  # the Hub looks usable to prefetch
    monkeypatch.delenv("HF_HUB_OFFLINE")
    summary = kit.prefetch(no_kit / "kit", progress=False)
    assert sorted(calls) == sorted((i.repo_id, i.repo_type) for i in ITEMS.values())
    assert json.loads((no_kit / "kit" / MANIFEST).read_text())["complete"] is True
    assert set(summary["items"]) == set(ITEMS)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(kit.KIT_ENV, str(no_kit / "kit"))
    from effitrain_helpers.sources.processors import choose_feature_extractor as fe, choose_image_processor as ip

    assert models.choose_model().source == "kit" and load_pairs()[1].source == "kit"
    assert ip().source == "kit" and fe().source == "kit"
