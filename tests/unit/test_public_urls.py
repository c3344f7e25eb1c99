"""MARKETPLACE_PUBLIC_BASE_URL and MARKETPLACE_PUBLIC_APP_URL are checked when settings load: a
bad value would otherwise fail only when an e-mail's links are composed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from marketplace.config import Settings


@pytest.mark.parametrize("field", ["public_base_url", "public_app_url"])
@pytest.mark.parametrize("value", ["", "https://app.example", "http://127.0.0.1:8080/base/"])
def test_accepted(field: str, value: str) -> None:
    assert getattr(Settings.model_validate({field: value}), field) == value


@pytest.mark.parametrize("field", ["public_base_url", "public_app_url"])
@pytest.mark.parametrize(
    "value", ["app.example", "ftp://app.example", "https://", "https://app.example/?a=1"]
)
def test_refused_naming_the_setting(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings.model_validate({field: value})
    assert field in str(raised.value)
