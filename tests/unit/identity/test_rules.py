"""Small pure rules: self-only access and the username pattern."""

from __future__ import annotations

import uuid

import pytest

from marketplace.auth import Principal, PrincipalKind
from marketplace.errors import Forbidden
from marketplace.identity.access import ensure_self
from marketplace.identity.usernames import is_valid


def test_ensure_self() -> None:
    me = Principal(uuid.uuid4(), PrincipalKind.SESSION, True)
    assert ensure_self(me, None) == me.user_id
    assert ensure_self(me, me.user_id) == me.user_id
    with pytest.raises(Forbidden):
        ensure_self(me, uuid.uuid4())


@pytest.mark.parametrize("name", ["abc", "a_b_c", "x" * 24, "123", "___"])
def test_valid_usernames(name: str) -> None:
    assert is_valid(name)


@pytest.mark.parametrize("name", ["ab", "x" * 25, "Abc", "a-b", "a b", "abc\n", "ünï"])
def test_invalid_usernames(name: str) -> None:
    assert not is_valid(name)
