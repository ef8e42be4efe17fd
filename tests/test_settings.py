import pytest

from effitrain_helpers.core.settings import SETTINGS, Settings


def test_size_defaults_to_small(monkeypatch):
    monkeypatch.delenv("EFFITRAIN_SIZE", raising=False)
    assert Settings.from_env().size == "small"


def test_bad_size_names_value_and_fix(monkeypatch):
    monkeypatch.setenv("EFFITRAIN_SIZE", "huge")
    with pytest.raises(ValueError, match=r"'huge'.*small, full.*export EFFITRAIN_SIZE"):
        Settings.from_env()


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("EFFITRAIN_CACHE", str(tmp_path))
    assert Settings.from_env().cache_dir == tmp_path


def test_set_size_validates():
    before = SETTINGS.size
    with pytest.raises(ValueError, match="'medium'"):
        SETTINGS.set_size("medium")
    assert SETTINGS.size == before
