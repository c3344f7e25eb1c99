"""Models of the live event stream as the API documents them (docs/stream.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from marketplace.types import JsonObject, QueryModel, RequestModel, ResponseModel

# Outbox ids are bigserial.
MAX_EVENT_ID = 2**63 - 1


class StreamQuery(QueryModel):
    lastEventId: int | None = Field(
        default=None,
        ge=0,
        le=MAX_EVENT_ID,
        description=(
            "Resume after this event id, for EventSource polyfills that cannot set the "
            "`Last-Event-ID` header; the header wins when both are sent (a browser reconnecting "
            "keeps the URL's value but sends its newest id in the header)."
        ),
    )


class StreamEventData(ResponseModel):
    """The JSON in the `data:` line of each event message (one line, compact)."""

    id: int = Field(description="the outbox event id; also the message's SSE `id`")
    type: str = Field(description="the event type; also the message's SSE `event`")
    subject: str = Field(description="what the event is about, e.g. a lower-case project address")
    createdAt: datetime = Field(description="start time of the transaction that wrote the event")
    payload: JsonObject = Field(
        description=(
            "the payload; its fields depend on the type, addresses EIP-55 "
            "checksummed as REST answers them; `chat.message`, `dm.message` and "
            "`message.removed` add `message`, the message as GET of its chat or thread shows it "
            "to this recipient"
        )
    )


class StreamTicketRequest(RequestModel):
    """No fields: send `{}` or no body."""


class StreamTicket(ResponseModel):
    """A single-use ticket opening `GET /v1/stream?ticket=...` as the caller."""

    ticket: str = Field(
        description="opaque, 43 URL-safe characters; pass as `ticket` to `GET /v1/stream` once"
    )
    expiresAt: datetime = Field(description="the ticket is refused from this moment on")


class StreamResetData(ResponseModel):
    """The JSON of an `event: reset` message: the `Last-Event-ID` the client sent is too old to
    replay, so nothing was replayed; the stream continues live after `position` (also the
    message's `id`). The client re-reads what it shows through the REST API."""

    position: int = Field(description="the stream's position: live events after it follow")
    lastEventId: int = Field(description="the resume position the client sent")
    reason: Literal["replay_limit", "retention"] = Field(
        description=(
            "`replay_limit`: more than `MARKETPLACE_STREAM_REPLAY_MAX_EVENTS` event ids behind; "
            "`retention`: events after it were already deleted "
            "(`MARKETPLACE_EVENTS_RETENTION_HOURS`)"
        )
    )
