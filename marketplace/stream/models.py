"""Models of the live event stream as the API documents them (docs/stream.md)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from marketplace.types import JsonObject, QueryModel, ResponseModel

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
    payload: JsonObject = Field(description="the payload; its fields depend on the type")
