"""Which perf_analyzer release the benchmarks measure against (benchmarks/_anchor.py): 2.60.0 unless asked."""

from __future__ import annotations

import pytest

from benchmarks._anchor import VERSION_ENV, anchor_version


def test_the_newest_release_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERSION_ENV, raising=False)
    assert anchor_version() == "2.60.0"


@pytest.mark.parametrize(("asked", "got"), [("2.41", "2.41.0"), ("2.41.0", "2.41.0"), ("2.60", "2.60.0")])
def test_a_release_is_picked_by_the_environment_or_the_flag(
    asked: str, got: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VERSION_ENV, asked)
    assert anchor_version() == got
    monkeypatch.delenv(VERSION_ENV)
    assert anchor_version(asked) == got


def test_a_release_without_a_recipe_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VERSION_ENV, "2.50")
    with pytest.raises(ValueError, match="2.60.0, 2.41.0"):
        anchor_version()
