"""What a streamed event's ``data`` carries to each recipient (docs/stream.md, "Payloads").

The outbox payload is the contract between producers and consumers (docs/events.md: lower-case
addresses, message ids without bodies). The stream shows it to API clients as the REST API
shows the same things:

- every address in the payload (a field named ``...Address``, a list named ``...Addresses`` or
  ``allowlist``, at any depth: ``changes``, ``milestones[].changes``, ``bids[]``) in EIP-55
  checksum form, as ``marketplace.types.Address`` answers it;
- ``chat.message``, ``dm.message`` and ``message.removed`` add ``message``: the message as
  ``GET`` of its chat or thread shows it to that recipient now (the REST message model, body
  included; ``null`` body once removed, except for a moderation admin), or ``null`` when it no
  longer exists.

Only fields are added; the outbox fields keep their names (a rename would be a new type). The
view is computed once per event and frontend for its whole audience (one query for the message,
one per recipient only while it is removed), then serialised once per distinct payload.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from pydantic import JsonValue

from marketplace.events.types import ChatMessage, DmMessage, Event, MessageRemoved
from marketplace.messaging.models import BodyStatus, ChatMessageRecord, DirectMessageRecord
from marketplace.moderation.reads import is_moderation_admin
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import messages as messages_repo
from marketplace.stream import sse
from marketplace.stream.audience import audience_of
from marketplace.types import checksum_address

Payload = dict[str, JsonValue]
# Payload per recipient; recipients with the same view share one dict (serialised once).
View = Callable[[Conn, Event, Payload, Collection[uuid.UUID]], Awaitable[dict[uuid.UUID, Payload]]]

VIEWS: dict[str, View] = {}
_LOWER_ADDRESS = re.compile(r"^0x[0-9a-f]{40}$")
_ADDRESS_LISTS = frozenset({"allowlist"})


def view(event_type: str) -> Callable[[View], View]:
    def register(function: View) -> View:
        if event_type in VIEWS:
            raise ValueError(f"{event_type!r} already has a stream view")
        VIEWS[event_type] = function
        return function

    return register


def _checksummed(value: JsonValue) -> JsonValue:
    return (
        checksum_address(value) if isinstance(value, str) and _LOWER_ADDRESS.match(value) else value
    )


def checksum_addresses(value: JsonValue, key: str = "") -> JsonValue:
    """``value`` with every address field in EIP-55 form (a copy; the event stays as stored)."""
    if isinstance(value, dict):
        return {k: checksum_addresses(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key.endswith("Addresses") or key in _ADDRESS_LISTS:
            return [_checksummed(item) for item in value]
        return [checksum_addresses(item) for item in value]
    if key.endswith("Address"):
        return _checksummed(value)
    return value


def base_payload(event: Event) -> Payload:
    """The stored payload with its addresses checksummed."""
    # As stored: a field the producer left out (e.g. a chat removal's `threadId`) stays out.
    dumped: Any = event.model_dump(mode="json", exclude_unset=True)["payload"]
    result = checksum_addresses(dumped)
    assert isinstance(result, dict)
    return result


async def payloads_for(
    conn: Conn, event: Event, only: uuid.UUID | None = None
) -> dict[uuid.UUID, Payload]:
    """The recipients of ``event`` now (its audience rule; just ``only`` if given and in it) and
    the payload each is shown."""
    audience = await audience_of(conn, event)
    if only is not None:
        audience = {only} & audience
    if not audience:
        return {}
    payload = base_payload(event)
    shown = VIEWS.get(event.type)
    if shown is None:
        return dict.fromkeys(audience, payload)
    return await shown(conn, event, payload, audience)


async def frames_for(
    conn: Conn, event: Event, only: uuid.UUID | None = None
) -> dict[uuid.UUID, bytes]:
    """The SSE message of ``event`` for each of its recipients now (see :func:`payloads_for`)."""
    payloads = await payloads_for(conn, event, only)
    frames: dict[int, bytes] = {}
    result: dict[uuid.UUID, bytes] = {}
    for user_id, payload in payloads.items():
        frame = frames.get(id(payload))
        if frame is None:
            frame = frames[id(payload)] = event_frame(event, payload)
        result[user_id] = frame
    return result


def event_frame(event: Event, payload: Payload) -> bytes:
    return sse.event_message(event, payload)


# --- messages -----------------------------------------------------------------------------------


async def _with_message(
    conn: Conn, message_id: str, payload: Payload, audience: Collection[uuid.UUID]
) -> dict[uuid.UUID, Payload]:
    """``payload`` plus ``message`` as each recipient's GET shows it now."""
    try:
        message_uuid = uuid.UUID(message_id)
    except ValueError:  # a producer bug; raising would stop the hub at this event for good
        message_uuid = None
    row = None if message_uuid is None else await messages_repo.get_message(conn, message_uuid)
    if row is None:
        gone: Payload = {**payload, "message": None}
        return dict.fromkeys(audience, gone)
    views: dict[bool, Payload] = {}
    result: dict[uuid.UUID, Payload] = {}
    for user_id in audience:
        # Only a removed body depends on the viewer (moderation admins still see it).
        moderator = row.body_status == BodyStatus.REMOVED and await is_moderation_admin(
            conn, user_id
        )
        shown = views.get(moderator)
        if shown is None:
            record: ChatMessageRecord | DirectMessageRecord
            if row.kind == "direct":
                record = DirectMessageRecord.from_row(row, moderator=moderator)
            else:
                record = ChatMessageRecord.from_row(row, moderator=moderator)
            message: JsonValue = record.model_dump(mode="json", by_alias=True)
            shown = views[moderator] = {**payload, "message": message}
        result[user_id] = shown
    return result


@view("chat.message")
async def chat_message(
    conn: Conn, event: Event, payload: Payload, audience: Collection[uuid.UUID]
) -> dict[uuid.UUID, Payload]:
    assert isinstance(event, ChatMessage)  # the audience rule shows nothing else to anyone
    return await _with_message(conn, event.payload.messageId, payload, audience)


@view("dm.message")
async def dm_message(
    conn: Conn, event: Event, payload: Payload, audience: Collection[uuid.UUID]
) -> dict[uuid.UUID, Payload]:
    assert isinstance(event, DmMessage)
    return await _with_message(conn, event.payload.messageId, payload, audience)


@view("message.removed")
async def message_removed(
    conn: Conn, event: Event, payload: Payload, audience: Collection[uuid.UUID]
) -> dict[uuid.UUID, Payload]:
    assert isinstance(event, MessageRemoved)
    return await _with_message(conn, event.payload.messageId, payload, audience)
