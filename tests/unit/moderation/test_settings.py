"""Moderation settings: defaults, bounds, and the extra terms file checked when settings load."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from marketplace.config import Settings, load_settings
from marketplace.wordfilter.terms import CUSTOM_SOURCE, TermFilter, TermMatch


def test_defaults() -> None:
    settings = Settings()
    assert settings.moderation_terms_file is None
    assert settings.moderation_suspend_after == 3
    assert settings.moderation_window_seconds == 86_400
    assert settings.moderation_suspend_seconds == 86_400


@pytest.mark.parametrize(
    "field",
    ["moderation_suspend_after", "moderation_window_seconds", "moderation_suspend_seconds"],
)
def test_counts_and_durations_are_at_least_one(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        load_settings(**{field: 0})
    assert getattr(load_settings(**{field: 1}), field) == 1


def test_a_terms_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "terms.txt"
    path.write_text("frobnicate\n", encoding="utf-8")
    monkeypatch.setenv("MARKETPLACE_MODERATION_TERMS_FILE", str(path))
    settings = load_settings()
    assert settings.moderation_terms_file == path
    term_filter = TermFilter.from_sources(extra_file=settings.moderation_terms_file)
    assert term_filter.match("Frobnicate!") == TermMatch("frobnicate", CUSTOM_SOURCE)


def test_an_empty_variable_means_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARKETPLACE_MODERATION_TERMS_FILE", "")
    assert load_settings().moderation_terms_file is None


def test_a_missing_terms_file_stops_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nope.txt"
    monkeypatch.setenv("MARKETPLACE_MODERATION_TERMS_FILE", str(missing))
    with pytest.raises(ValidationError) as caught:
        load_settings()
    message = str(caught.value)
    assert "MARKETPLACE_MODERATION_TERMS_FILE" in message
    assert f"cannot read moderation terms file {missing}: No such file or directory" in message


def test_a_terms_file_with_a_useless_term_stops_startup(tmp_path: Path) -> None:
    path = tmp_path / "terms.txt"
    path.write_text("good\n\n?\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"terms.txt line 3: term '\?' needs at least two"):
        Settings(moderation_terms_file=path)
