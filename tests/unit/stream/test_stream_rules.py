"""The stream's audience registry, its SSE framing, and the consumer's tolerance of a payload its
model refuses: pure functions, no servers."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from marketplace.events.types import EventType, ProjectChanged, UnknownEvent, parse_event
from marketplace.outbox.consumer import event_from_row
from marketplace.storage.repositories.events import StoredEvent
from marketplace.stream import audience, sse

CREATED = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_the_streamed_types_exist() -> None:
    assert audience.streamed_types() <= {str(t) for t in EventType}


def test_a_type_gets_one_rule_only() -> None:
    async def again(conn: object, event: object) -> set[uuid.UUID]:
        return set()

    with pytest.raises(ValueError, match="already has an audience rule"):
        audience.audience(EventType.PROJECT_CHANGED)(again)
    assert audience.RULES[EventType.PROJECT_CHANGED] is audience.project_parties


async def test_a_type_without_a_rule_has_no_audience() -> None:
    event = parse_event(
        7,
        "bid_draft.created",
        "0x" + "ab" * 20,
        CREATED,
        {
            "draftId": "d",
            "projectAddress": "0x" + "ab" * 20,
            "bidderAddress": "0x" + "cd" * 20,
            "draftHash": "0x" + "11" * 32,
            "userId": str(uuid.uuid4()),
        },
    )
    # No query is made for it: the connection argument is never touched.
    assert await audience.audience_of(None, event) == set()  # type: ignore[arg-type]


def _lines(frame: bytes) -> list[str]:
    text = frame.decode()
    assert text.endswith("\n\n")
    return text[:-2].split("\n")


def test_an_event_is_one_message_with_one_data_line() -> None:
    event = parse_event(
        42,
        "project.changed",
        "0x" + "ab" * 20,
        CREATED,
        {"block": 9, "changes": {"description": "two\nlines"}, "milestones": []},
    )
    lines = _lines(sse.event_message(event))
    assert lines[:2] == ["id: 42", "event: project.changed"]
    assert len(lines) == 3 and lines[2].startswith("data: ")
    data = json.loads(lines[2].removeprefix("data: "))
    assert data == {
        "id": 42,
        "type": "project.changed",
        "subject": "0x" + "ab" * 20,
        "createdAt": "2025-03-01T12:00:00Z",
        "payload": {"block": 9, "changes": {"description": "two\nlines"}, "milestones": []},
    }


def test_position_and_heartbeat_messages_carry_an_id_and_no_data() -> None:
    assert _lines(sse.position_message(5)) == ["id: 5"]
    assert _lines(sse.heartbeat_message(6)) == [": heartbeat", "id: 6"]


def test_a_payload_its_model_refuses_is_handed_on_as_unknown() -> None:
    good = StoredEvent(
        1, "project.changed", "0xp", '{"block":1,"changes":{},"milestones":[]}', CREATED
    )
    bad = StoredEvent(2, "project.changed", "0xp", '{"changes":"not a dict"}', CREATED)
    assert isinstance(event_from_row(good), ProjectChanged)
    parsed = event_from_row(bad)
    assert isinstance(parsed, UnknownEvent)
    assert (parsed.id, parsed.type, parsed.payload) == (
        2,
        "project.changed",
        {"changes": "not a dict"},
    )
