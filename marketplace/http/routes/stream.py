"""The live event stream, ``GET /v1/stream`` (docs/stream.md): Server-Sent Events carrying the
change events the caller may see. The work is in marketplace.stream; this module is the HTTP
side: the resume position, the response head, and the connection hooks the hub needs."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from aiohttp import web

from marketplace.auth import Principal
from marketplace.errors import InvalidRequest, Unauthorized
from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, QueryCredential, Reply, RouteTable
from marketplace.http.streaming import open_stream
from marketplace.storage.repositories import api_keys as api_keys_repo
from marketplace.storage.repositories import events as events_repo
from marketplace.stream.hub import HubConfig, StreamHub
from marketplace.stream.models import (
    MAX_EVENT_ID,
    StreamEventData,
    StreamQuery,
    StreamTicket,
    StreamTicketRequest,
)
from marketplace.stream.tickets import INVALID_TICKET, StreamTickets

routes = RouteTable(tag="stream")

STREAM_HUB: web.AppKey[StreamHub] = web.AppKey("stream_hub", StreamHub)
STREAM_TICKETS: web.AppKey[StreamTickets] = web.AppKey("stream_tickets", StreamTickets)
LAST_EVENT_ID = "Last-Event-ID"
_EVENT_ID = re.compile(r"^[0-9]{1,19}$")
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    # Proxies that buffer responses (nginx) would hold events back.
    "X-Accel-Buffering": "no",
}


def resume_position(call: Call[None, StreamQuery, None]) -> int | None:
    """The id to resume after: the ``Last-Event-ID`` header, else ``lastEventId``; 400 for a
    header that is not an event id. An empty header counts as absent (EventSource sends none
    before its first id, but proxies may pass an empty one)."""
    header = call.request.headers.get(LAST_EVENT_ID, "").strip()
    if not header:
        return call.query.lastEventId
    if not _EVENT_ID.fullmatch(header) or int(header) > MAX_EVENT_ID:
        raise InvalidRequest(
            f"{LAST_EVENT_ID} must be an event id (a non-negative integer)",
            [
                {
                    "location": "header",
                    "field": LAST_EVENT_ID,
                    "message": "not an event id",
                    "type": "event_id",
                }
            ],
        )
    return int(header)


async def redeem_ticket(request: web.Request, ticket: str) -> Principal:
    """The principal a stream ticket was issued to (the ticket is spent); 401 for a used,
    expired or unknown ticket, and for one issued to an agent key revoked since."""
    principal = await request.app[STREAM_TICKETS].redeem(ticket)
    if principal.api_key_id is not None:
        pool = request.app[keys.PG_POOL]
        if await api_keys_repo.revoked_among(pool, [principal.api_key_id]):
            raise Unauthorized(INVALID_TICKET)
    return principal


# Accepted by GET /v1/stream only: no other route declares it, so none reads the parameter.
STREAM_TICKET = QueryCredential(param="ticket", redeem=redeem_ticket, scheme="streamTicket")


@routes.post(
    "/v1/stream/tickets",
    name="createStreamTicket",
    summary="A single-use ticket that opens the event stream without headers (browsers)",
    auth=AuthMode.EITHER,
    body=StreamTicketRequest,
    response=StreamTicket,
    status=201,
)
async def create_stream_ticket(call: Call[StreamTicketRequest, None, None]) -> Reply:
    """A browser's native `EventSource` cannot send `Authorization` or `x-agent-api-key`, so it
    cannot open `GET /v1/stream` with them. Ask for a ticket here (with either), then open
    `new EventSource("/v1/stream?ticket=" + encodeURIComponent(ticket))` before `expiresAt`
    (`MARKETPLACE_STREAM_TICKET_TTL_SECONDS`, 60 s, never past the session token's expiry).

    The ticket is opaque (43 URL-safe characters), single use (a second open with it is 401
    `unauthorized`, so is an expired or unknown one), accepted by `GET /v1/stream` only, and
    bound to the caller: the stream opens as this user, sees exactly what a stream opened with
    the same credentials would, and ends when the session token that asked expires or the agent
    key that asked is revoked. Any frontend redeems it (tickets live in Redis). A reconnecting
    `EventSource` reuses its URL, so its spent ticket is refused: on `error` with `readyState`
    `CLOSED`, get a new ticket and open a new `EventSource` with `?lastEventId=` set to the last
    id seen. The body is `{}` or empty; no `Idempotency-Key` (every call is a new ticket)."""
    principal = call.require_principal()
    issued = await call.app[STREAM_TICKETS].issue(principal)
    return Reply(
        StreamTicket(
            ticket=issued.ticket, expiresAt=datetime.fromtimestamp(issued.expires_at, tz=UTC)
        ),
        headers={"Cache-Control": "no-store"},
    )


@routes.get(
    "/v1/stream",
    name="openEventStream",
    summary="Live event stream (Server-Sent Events) of the events the caller may see",
    auth=AuthMode.EITHER,
    response=StreamEventData,
    response_content_type="text/event-stream",
    query=StreamQuery,
    query_credential=STREAM_TICKET,
)
async def open_event_stream(call: Call[None, StreamQuery, None]) -> web.StreamResponse:
    """`text/event-stream`, open until the client leaves. Each event is one message: `id:` the
    outbox event id, `event:` its type, `data:` one line of JSON (the schema below). The caller
    receives only events it may see at the moment each is sent: `project.changed` and
    `chat.message` for projects where one of its active wallet links is the owner or the
    selected worker, `dm.message` for its threads (not from a user it blocks), `report.updated`
    for its reports, `message.removed` to the audience of the removed message; other event types
    are not streamed. Every heartbeat interval (15 s) a `: heartbeat` comment arrives with an
    `id:` line and no data: it moves the client's last event id without an event.

    Payloads are the documented change-event payloads with every address EIP-55 checksummed as
    the REST API answers it; `chat.message`, `dm.message` and `message.removed` add `message`:
    the message as `GET` of that chat or thread shows it to this recipient (the REST message
    model; a removed body is null except for moderation admins).

    Credentials: a session token or an agent key in the headers, or, for a browser's native
    `EventSource` (which cannot send headers), `?ticket=` with a single-use ticket from
    `POST /v1/stream/tickets` (a used, expired or forged one is 401 `unauthorized`; with
    credential headers as well, 400).

    Resume: with `Last-Event-ID` (or `lastEventId`) the stream first sends every event after
    that id the caller may see now, then live ones, none twice; without it, it starts at the
    newest event (an id-only message at the start tells the client where). At most
    `MARKETPLACE_STREAM_REPLAY_MAX_EVENTS` (1,000) events are replayed: an id further behind
    than that, or older than the oldest stored event (retention), gets an `event: reset` message
    instead (`id:` the stream's position; `data:` `{"position", "lastEventId", "reason":
    "replay_limit" | "retention"}`), then live events; the client re-reads what it shows. At
    most `MARKETPLACE_STREAM_MAX_PER_USER` (5) open streams per user across all servers: 429
    `rate_limited` with `Retry-After` beyond (503 with `Retry-After` for a few seconds after
    Redis restarted, while the open streams are counted again). A client that does not read
    fast enough is disconnected and should reconnect with its last event id. The stream ends
    when the session token it was opened with expires (within about a second) or the agent key
    it was opened with is revoked (within one heartbeat interval), a ticket's included:
    reconnect with current credentials and the last event id."""
    principal = call.require_principal()
    resume = resume_position(call)
    hub = call.app[STREAM_HUB]
    subscriber = await hub.open(
        principal.user_id,
        expires_at=principal.session_expires_at,
        api_key_id=principal.api_key_id,
    )
    try:
        # Read after the registration: every event up to `now` is either replayed or older
        # than the position, and every later one reaches the queue.
        now = await events_repo.last_id(call.pool)
        after = now if resume is None or resume > now else resume
        response = web.StreamResponse(headers=SSE_HEADERS)
        await open_stream(call.request, response)
        request = call.request
        subscriber.connected = lambda: _connected(request)
        subscriber.abort = lambda: _abort(request)
        await hub.serve(subscriber, after, response.write)
    finally:
        await hub.close(subscriber)
    return response


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


def setup(app: web.Application) -> None:
    async def end_streams(app: web.Application) -> None:
        # Before the server waits for running handlers: open streams would hold it until its
        # shutdown timeout.
        hub = app.get(STREAM_HUB)
        if hub is not None:
            hub.shutdown()

    app.on_shutdown.append(end_streams)


async def stream_hub(app: web.Application) -> AsyncIterator[None]:
    """The frontend's stream hub, started after Postgres and Redis."""
    hub = StreamHub(app[keys.PG_POOL], app[keys.REDIS], HubConfig.from_settings(app[keys.SETTINGS]))
    await hub.start()
    app[STREAM_HUB] = hub
    settings = app[keys.SETTINGS]
    app[STREAM_TICKETS] = StreamTickets(
        app[keys.REDIS], ttl_seconds=settings.stream_ticket_ttl_seconds
    )
    yield
    await hub.stop()
