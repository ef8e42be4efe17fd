import time
from pathlib import Path

import pytest
import torch

from effitrain_helpers.core import hub
from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.sources import ladder, models


@pytest.fixture
def empty_hf_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def _fake_cached(cache: Path, repo_id: str) -> Path:
    """Lay out a model in the Hugging Face cache format, as `hf download` leaves it."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_text("")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return snap


def test_offline_default_builds_the_workbooks_own_distilbert(empty_hf_cache):
    choice = models.choose_model()
    assert choice.source == "offline-build" and "HF_HUB_OFFLINE is set" in choice.reason
    assert (Path(choice.path) / "config.json").is_file() and (Path(choice.path) / "tokenizer.json").is_file()


def test_cached_course_model_comes_before_the_offline_build(empty_hf_cache):
    snap = _fake_cached(empty_hf_cache, models.DEFAULT_MODEL)
    choice = models.choose_model()
    assert choice.source == "cache" and Path(choice.path) == snap
    assert models.cached_model_ids() == [models.DEFAULT_MODEL]


def test_a_config_without_weights_is_not_cached(empty_hf_cache):
    snap = _fake_cached(empty_hf_cache, models.DEFAULT_MODEL)
    (snap / "model.safetensors").unlink()
    assert models.choose_model().source == "offline-build"


def test_named_cached_model_is_used(empty_hf_cache):
    snap = _fake_cached(empty_hf_cache, "someone/tiny-bert")
    assert models.choose_model("someone/tiny-bert") == models.ModelChoice(
        str(snap), "cache", "someone/tiny-bert is in the Hugging Face cache", "model"
    )


def test_hub_is_used_when_reachable_and_not_cached(empty_hf_cache, monkeypatch):
    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: True)  # a named model asks in models
    monkeypatch.setattr(ladder, "hub_problem", lambda timeout=3.0: None)  # the course's own, on the ladder
    assert models.choose_model().source == "hub"
    assert models.choose_model("owner/model").path == "owner/model"


def test_unknown_model_offline_says_what_is_cached_and_how_to_fetch(empty_hf_cache):
    _fake_cached(empty_hf_cache, "someone/other")
    with pytest.raises(ValueError) as err:
        models.choose_model("distilbert-base-uncased")
    message = str(err.value)
    assert "'distilbert-base-uncased'" in message and "someone/other" in message and "hf download" in message
    assert "\n" not in message


@pytest.mark.parametrize("bad", ["./no/such/folder", "/definitely/not/here", "bad name with spaces"])
def test_bad_paths_are_named(bad):
    with pytest.raises(ValueError, match="is not an existing folder"):
        models.choose_model(bad)


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="has no config.json"):
        models.choose_model(str(tmp_path))


@pytest.mark.parametrize("bad", ["", "   ", 42])
def test_name_must_be_a_string(bad):
    with pytest.raises(TypeError, match="non-empty string"):
        models.choose_model(bad)


def test_offline_flag_means_no_network_attempt(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_ask", lambda *a, **k: pytest.fail("network touched"))
    assert hub.hub_reachable() is False and hub.hub_problem() == "HF_HUB_OFFLINE is set"


def test_unreachable_hub_answers_within_the_timeout(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://hangs.invalid")
    monkeypatch.setattr(hub, "_ANSWERS", {})

    def hang(*args, **kwargs):
        time.sleep(3)  # a DNS lookup that hangs (no socket time limit covers it), then fails
        raise OSError("unreachable")

    monkeypatch.setattr(hub, "_ask", hang)
    start = time.perf_counter()
    assert hub.hub_problem(timeout=0.5) == "the Hub (http://hangs.invalid) did not answer within 0.5 s"
    assert time.perf_counter() - start < 2


def test_load_classifier_goes_through_from_pretrained(empty_hf_cache, capsys):
    model, tokenizer = models.load_classifier(num_labels=3)
    assert "offline-build" in capsys.readouterr().out
    assert type(model).__name__ == "DistilBertForSequenceClassification"
    batch = tokenizer(["The engineer trained the model."], ["A student tested it."], return_tensors="pt")
    assert batch["input_ids"][0, 0].item() == tokenizer.cls_token_id
    with torch.no_grad():
        assert model(**batch).logits.shape == (1, 3)


def test_offline_checkpoint_is_deterministic(tmp_path, monkeypatch):
    first = models.build_offline_checkpoint()
    monkeypatch.setattr(SETTINGS, "cache_dir", tmp_path)
    second = models.build_offline_checkpoint()
    assert first != second
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_a_local_bert_checkpoint_loads_the_same_way(tmp_path, capsys):
    from transformers import BertConfig, BertModel, BertTokenizer

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "model", "works"])}
    BertTokenizer(vocab=vocab).save_pretrained(tmp_path)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    BertModel(config).save_pretrained(tmp_path)
    model, tokenizer = models.load_classifier(str(tmp_path), num_labels=2)
    assert "local" in capsys.readouterr().out
    assert type(model).__name__ == "BertForSequenceClassification"
    assert tokenizer("the model works")["input_ids"][1:4] == [5, 6, 7]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "2"])
def test_num_labels_is_validated(bad):
    with pytest.raises(ValueError, match="num_labels"):
        models.load_classifier(num_labels=bad)


@pytest.mark.slow
def test_ranks_of_a_group_building_the_offline_model_at_once_all_load_it(tmp_path, monkeypatch):
    """save_pretrained writes nothing on ranks other than 0: those ranks wait for rank 0's copy."""
    from effitrain_helpers.processes.launch import launch

    monkeypatch.setenv("EFFITRAIN_CACHE", str(tmp_path))

    def load():
        from effitrain_helpers.sources.models import load_classifier

        model, _ = load_classifier(verbose=False)
        return model.config.model_type

    assert launch(load, num_processes=2, quiet=True) == ["distilbert", "distilbert"]
