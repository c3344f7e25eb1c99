"""Server-Sent Events framing (WHATWG HTML, "Server-sent events").

Every message ends with a blank line. ``data`` is one line of compact JSON (pydantic escapes any
newline inside strings), so a message never needs several ``data:`` lines.

A message with an ``id:`` field but no ``data`` moves the client's last event id without
dispatching an event (the dispatch step sets the id before it drops a message without data).
The stream sends one when it opens and with every heartbeat, so a client that saw no event for
a while still resumes from a recent position instead of replaying everything it was not shown.
"""

from __future__ import annotations

from marketplace.events.types import Event
from marketplace.stream.models import StreamEventData, StreamResetData
from marketplace.types import JsonObject


def event_message(event: Event, payload: JsonObject | None = None) -> bytes:
    """An event's message: ``data`` is ``{id, type, subject, createdAt, payload}``, ``payload``
    the recipient's view of it (``views.py``; default: the fields the producer wrote)."""
    if payload is None:
        payload = event.model_dump(mode="json", exclude_unset=True)["payload"]
    data = StreamEventData(
        id=event.id,
        type=event.type,
        subject=event.subject,
        createdAt=event.createdAt,
        payload=payload,
    ).model_dump_json()
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


def position_message(position: int) -> bytes:
    return f"id: {position}\n\n".encode()


def heartbeat_message(position: int) -> bytes:
    return f": heartbeat\nid: {position}\n\n".encode()


def reset_message(position: int, last_event_id: int, reason: str) -> bytes:
    """``event: reset``: the client's ``Last-Event-ID`` is too old to replay; the stream goes on
    live from ``position`` (its ``id``), and the client re-reads what it shows."""
    data = StreamResetData.model_validate(
        {"position": position, "lastEventId": last_event_id, "reason": reason}
    ).model_dump_json()
    return f"id: {position}\nevent: reset\ndata: {data}\n\n".encode()
