"""Helpers of the live event stream tests: apps, an SSE reader, and events committed to the
outbox the way producers write them (``events.append`` inside the change's transaction).

Projects are seeded straight into the read model and wallets linked through the API, as in the
records tests; the app's own relay moves the events to Redis, and its stream hub fans them out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from marketplace.events.types import NewEvent, ProjectChangedPayload
from marketplace.storage.repositories import events as events_repo
from tests.conftest import Servers
from tests.support import apps

AppFactory = apps.AppFactory
_blocks = itertools.count(20_000)


@pytest.fixture
async def db(servers: Servers, clean_state: None) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(servers.database_url)
    try:
        yield conn
    finally:
        await conn.close()


async def commit_events(conn: asyncpg.Connection, events: list[NewEvent]) -> list[int]:
    """One producing transaction; the ids of its events."""
    async with conn.transaction():
        return await events_repo.append(conn, events)


def project_changed(project: str, **changes: Any) -> NewEvent:
    return NewEvent(
        project,
        ProjectChangedPayload(
            block=next(_blocks), changes=changes or {"status": "building"}, milestones=[]
        ),
    )


async def change_project(conn: asyncpg.Connection, project: str, **changes: Any) -> int:
    """Commit one ``project.changed`` event for ``project``; its id."""
    (event_id,) = await commit_events(conn, [project_changed(project, **changes)])
    return event_id


@dataclass
class Message:
    fields: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)

    @property
    def id(self) -> int | None:
        return int(self.fields["id"]) if "id" in self.fields else None

    @property
    def event(self) -> str | None:
        return self.fields.get("event")

    @property
    def data(self) -> dict[str, Any]:
        value = json.loads(self.fields["data"])
        assert isinstance(value, dict)
        return value

    @property
    def is_event(self) -> bool:
        return "data" in self.fields


class SseReader:
    """Reads an open ``text/event-stream`` response message by message."""

    def __init__(self, resp: Any) -> None:
        self.resp = resp
        self.seen: list[Message] = []

    async def message(self, within: float = 10.0) -> Message:
        message = Message()
        async with asyncio.timeout(within):
            while True:
                raw = await self.resp.content.readline()
                if not raw:
                    raise EOFError("the stream ended")
                line = raw.decode().rstrip("\n")
                if not line:
                    if message.fields or message.comments:
                        self.seen.append(message)
                        return message
                    continue
                if line.startswith(":"):
                    message.comments.append(line[1:].strip())
                    continue
                name, _, value = line.partition(":")
                message.fields[name] = value.removeprefix(" ")

    async def event(self, within: float = 10.0) -> Message:
        """The next message that is an event (skipping position-only and heartbeat ones)."""
        async with asyncio.timeout(within):
            while True:
                message = await self.message(within)
                if message.is_event:
                    return message

    async def events(self, count: int, within: float = 10.0) -> list[Message]:
        return [await self.event(within) for _ in range(count)]

    def close(self) -> None:
        self.resp.close()


async def open_stream(
    client: Any, headers: dict[str, str], *, last_event_id: int | str | None = None, **kw: Any
) -> SseReader:
    """GET /v1/stream (200 expected) and read its first, position-only message."""
    if last_event_id is not None:
        headers = {**headers, "Last-Event-ID": str(last_event_id)}
    resp = await client.get("/v1/stream", headers=headers, **kw)
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    reader = SseReader(resp)
    first = await reader.message()
    assert not first.is_event and first.id is not None, first
    return reader


@contextlib.asynccontextmanager
async def streaming(client: Any, headers: dict[str, str], **kw: Any) -> AsyncIterator[SseReader]:
    reader = await open_stream(client, headers, **kw)
    try:
        yield reader
    finally:
        reader.close()
