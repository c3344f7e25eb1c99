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


def event_message(event: Event) -> bytes:
    data = event.model_dump_json()
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


def position_message(position: int) -> bytes:
    return f"id: {position}\n\n".encode()


def heartbeat_message(position: int) -> bytes:
    return f": heartbeat\nid: {position}\n\n".encode()
