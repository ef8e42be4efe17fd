import os

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


def test_every_lesson_row_has_both_sizes_with_the_same_keys():
    from effitrain_helpers.core.sizes import LESSON_SIZES

    for lesson, row in LESSON_SIZES.items():
        assert set(row) == {"small", "full"}, lesson
        assert set(row["small"]) == set(row["full"]), lesson


def test_lesson_size_reads_the_current_size_and_refuses_unknown_rows(monkeypatch):
    from effitrain_helpers.core.settings import SETTINGS
    from effitrain_helpers.core.sizes import lesson_size

    monkeypatch.setattr(SETTINGS, "size", "full")
    assert lesson_size("3.1").steps == 10 and lesson_size("3.1", "small").steps == 3
    with pytest.raises(ValueError, match="no size row"):
        lesson_size("9.9")


def test_set_size_reaches_launched_processes(monkeypatch):
    from effitrain_helpers.core.settings import SETTINGS

    monkeypatch.setattr(SETTINGS, "size", "small")
    monkeypatch.setenv("EFFITRAIN_SIZE", "small")
    SETTINGS.set_size("full")
    assert os.environ["EFFITRAIN_SIZE"] == "full"  # what launch's workers inherit
