"""API key format, checksum, hashing and the resolver's pre-database check."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from marketplace.auth import Principal, PrincipalKind
from marketplace.errors import Forbidden, InvalidRequest
from marketplace.identity import api_keys
from marketplace.identity.session_recorder import SessionRecorder


def test_generated_keys_are_well_formed_and_distinct() -> None:
    keys = {api_keys.generate_key("mkt_live_") for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith("mkt_live_")
        assert len(key) == len("mkt_live_") + 43 + 6
        assert api_keys.is_well_formed(key)


def test_the_body_carries_256_random_bits() -> None:
    assert 62**43 >= 2**256 and 62**6 >= 2**32
    # The largest 256-bit value still fits the fixed width.
    assert len(api_keys._base62(2**256 - 1, 43)) == 43
    with pytest.raises(ValueError, match="width"):
        api_keys._base62(62**43, 43)


def test_any_single_character_change_is_caught_by_the_checksum() -> None:
    key = api_keys.generate_key("mkt_live_")
    start = len("mkt_live_")
    for position in range(start, len(key)):
        for replacement in "0aZ":
            if key[position] == replacement:
                continue
            mutated = key[:position] + replacement + key[position + 1 :]
            assert not api_keys.is_well_formed(mutated), (position, replacement)


@pytest.mark.parametrize(
    "candidate",
    ["", "mkt_live_", "mkt_live_" + "a" * 49, "MKT_LIVE_" + "a" * 49, "x" * 500, "mkt live"],
)
def test_malformed_keys(candidate: str) -> None:
    assert not api_keys.is_well_formed(candidate)


def test_other_prefixes_work() -> None:
    key = api_keys.generate_key("mkt_test_")
    assert api_keys.is_well_formed(key)
    assert api_keys.display_parts(key) == (key[: len("mkt_test_") + 4], key[-4:])


def test_hash_is_sha256() -> None:
    # Independently computed: printf %s mkt_live_x | sha256sum
    expected = "e207a7f5b8becf5126d48b3ad067512264b947c9f6f20a060f02402710ff0916"
    assert api_keys.hash_key("mkt_live_x").hex() == expected


async def test_resolver_rejects_malformed_keys_without_the_database() -> None:
    def no_pool() -> object:
        raise AssertionError("the database must not be consulted")

    sessions = SessionRecorder(no_pool, interval_ms=1000, max_rows=10)  # type: ignore[arg-type]
    resolver = api_keys.DatabaseApiKeyResolver(no_pool, sessions)  # type: ignore[arg-type]
    assert await resolver.resolve("mkt_live_garbage") is None
    key = api_keys.generate_key("mkt_live_")
    assert await resolver.resolve(key[:-1] + ("0" if key[-1] != "0" else "1")) is None


def test_agent_keys_may_rotate_only_themselves() -> None:
    own = uuid.uuid4()
    agent = Principal(uuid.uuid4(), PrincipalKind.AGENT_KEY, True, own)
    api_keys.authorize_rotation(agent, own)
    with pytest.raises(Forbidden):
        api_keys.authorize_rotation(agent, uuid.uuid4())
    session = Principal(agent.user_id, PrincipalKind.SESSION, True)
    api_keys.authorize_rotation(session, uuid.uuid4())  # ownership is checked against the row


def test_cursor_round_trip() -> None:
    moment = datetime(2025, 3, 1, 12, 30, 45, 123456, tzinfo=UTC)
    micros = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    cursor = api_keys.USAGE_CURSOR.encode(micros, 42)
    assert api_keys.USAGE_CURSOR.position(cursor) == (micros, 42)
    # The largest position decodes to a datetime without overflowing.
    largest = api_keys.USAGE_CURSOR.encode(*api_keys.USAGE_CURSOR.maxima)
    assert api_keys.USAGE_CURSOR.position(largest) == api_keys.USAGE_CURSOR.maxima
    assert datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=api_keys.USAGE_CURSOR.maxima[0]
    )
    for bad in ("", "x_1", "1-2", "1_2_3", "1741000000000000_42"):
        with pytest.raises(InvalidRequest):
            api_keys.USAGE_CURSOR.position(bad)
