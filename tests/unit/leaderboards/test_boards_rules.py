"""Pure parts of the boards: the capability's declaration, which projects an event touches, the
categories parameter, and the text cursors (their forgery checks)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from marketplace.cli_commands import CAPABILITY_COMMANDS
from marketplace.errors import InvalidRequest
from marketplace.events.types import EventType
from marketplace.http.capabilities import CAPABILITIES
from marketplace.http.leaderboard_consumer import boards_consumer
from marketplace.leaderboards.boards import (
    CONSUMED_TYPES,
    CURSORS,
    BoardSort,
    affected_projects,
    parse_categories,
)
from marketplace.pagination import MalformedCursor, TextCursorKind
from marketplace.storage.repositories.events import StoredEvent

A = "0x" + "aa" * 20
B = "0x" + "bb" * 20
C = "0x" + "cc" * 20


def event(type: str, subject: str, payload: str = "{}") -> StoredEvent:
    return StoredEvent(1, type, subject, payload, datetime.now(UTC))


def test_the_capability_runs_the_consumer_and_offers_the_admin_commands() -> None:
    (capability,) = [c for c in CAPABILITIES if c.name == "leaderboards"]
    assert boards_consumer in capability.contexts
    assert set(CONSUMED_TYPES) <= set(EventType)
    assert {(c.parent, c.name) for c in CAPABILITY_COMMANDS["leaderboards"]} == {
        ("admin", "categories"),
        ("admin", "leaderboards"),
    }


def test_affected_projects_of_project_tag_and_reorg_events() -> None:
    reorg = (
        '{"chainId": 1, "forkBlock": 1, "depth": 1, "previousSyncedBlock": 2, "headBlock": 2, '
        f'"removedProjects": ["{B.upper().replace("0X", "0x")}"], "resnapshotProjects": ["{C}"]}}'
    )
    events = [
        event("project.changed", A),
        event("category_tags.changed", A),
        event("chain.reorg", "chain:1", reorg),
    ]
    assert affected_projects(events) == {A, B, C}
    assert affected_projects([event("chain.reorg", "chain:1", '{"removedProjects": []}')]) == set()


def test_categories_parameter() -> None:
    assert parse_categories(None) == []
    assert parse_categories("") == []
    assert parse_categories("backend, frontend,,backend") == ["backend", "frontend"]


def test_text_cursors_round_trip_and_refuse_forgeries() -> None:
    kind = CURSORS[BoardSort.PAYOUT]
    big = "9" * 100
    cursor = kind.encode(big, A)
    assert kind.decode(cursor) == (big, A)
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()

    def forged(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()

    for bad in (
        forged(raw.replace("lbp1", "lbm1")),  # another sort's tag
        forged(raw.replace(A, A.upper())),  # not lower-case
        forged("lbp1:01:" + A),  # not canonical
        forged("lbp1:1:" + A + ":x"),  # an extra part
        forged("lbp1:" + "9" * 101 + ":" + A),  # out of range
        cursor + "=",  # padded
        "",
    ):
        with pytest.raises(MalformedCursor):
            kind.decode(bad)
    # Another sort's kind refuses it; the query helper turns that into a 400.
    with pytest.raises(MalformedCursor):
        CURSORS[BoardSort.RECENT].decode(cursor)
    with pytest.raises(InvalidRequest):
        CURSORS[BoardSort.MILESTONES].position(cursor)
    with pytest.raises(ValueError, match="out of range"):
        kind.encode("-1", A)


def test_a_text_part_never_holds_the_separator() -> None:
    kind = TextCursorKind("t1", (r".+",))
    with pytest.raises(ValueError, match="out of range"):
        kind.encode("a:b")
