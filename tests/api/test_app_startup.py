"""An app whose startup fails stops what it had started: the event relay (holding the
database-wide relay lock) and the pools do not outlive the failure. aiohttp itself would leave
them running, since nobody cleans up an app that never started."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from aiohttp import web

import marketplace.http.app as app_module
from marketplace.http import keys
from marketplace.http.capabilities import CAPABILITIES, Capability
from marketplace.storage.repositories import events as events_repo
from tests.conftest import Servers, make_settings
from tests.integration.events.conftest import RELAY_LOCK_HOLDERS

started: list[str] = []


async def relay_then_fail(app: web.Application) -> AsyncIterator[None]:
    """Fails once the core contexts (Postgres, Redis, Ray, the relay) are running and the relay
    holds its lock."""
    conn = await asyncpg.connect(app[keys.SETTINGS].database_url)
    try:
        for _ in range(200):
            if await conn.fetch(RELAY_LOCK_HOLDERS, events_repo.RELAY_LOCK_KEY):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the relay never took its lock")
    finally:
        await conn.close()
    started.append("failing")
    raise RuntimeError("this capability cannot start")
    yield  # pragma: no cover - never reached


async def test_a_failed_startup_stops_the_relay_and_what_else_started(
    aiohttp_client: Any,
    servers: Servers,
    ray_cluster: None,
    clean_state: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    boom = Capability(
        name="boom",
        summary="fails at startup",
        contexts=(relay_then_fail,),
    )
    monkeypatch.setattr(app_module, "CAPABILITIES", (*CAPABILITIES, boom))
    app = app_module.create_app(make_settings(servers))
    with pytest.raises(RuntimeError, match="cannot start"):
        await aiohttp_client(app)
    assert started == ["failing"]

    conn = await asyncpg.connect(servers.database_url)
    try:
        # Released as the relay's connection closes (the backend may take a moment to exit).
        for _ in range(100):
            if not await conn.fetch(RELAY_LOCK_HOLDERS, events_repo.RELAY_LOCK_KEY):
                break
            await asyncio.sleep(0.05)
        assert await conn.fetch(RELAY_LOCK_HOLDERS, events_repo.RELAY_LOCK_KEY) == []
    finally:
        await conn.close()


async def never_stops(app: web.Application) -> AsyncIterator[None]:
    yield
    await asyncio.Event().wait()  # a stop that hangs


async def test_a_context_that_never_stops_does_not_keep_the_relay_running(
    aiohttp_client: Any,
    servers: Servers,
    ray_cluster: None,
    clean_state: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stuck = Capability(
        name="stuck",
        summary="never stops",
        contexts=(never_stops,),
    )
    monkeypatch.setattr(app_module, "CAPABILITIES", (*CAPABILITIES, stuck))
    client = await aiohttp_client(
        app_module.create_app(make_settings(servers, context_stop_seconds=1.0))
    )
    conn = await asyncpg.connect(servers.database_url)
    try:
        for _ in range(200):
            if await conn.fetch(RELAY_LOCK_HOLDERS, events_repo.RELAY_LOCK_KEY):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the relay never took its lock")
        await asyncio.wait_for(client.close(), 30)
        for _ in range(100):
            if not await conn.fetch(RELAY_LOCK_HOLDERS, events_repo.RELAY_LOCK_KEY):
                break
            await asyncio.sleep(0.05)
        assert await conn.fetch(RELAY_LOCK_HOLDERS, events_repo.RELAY_LOCK_KEY) == []
    finally:
        await conn.close()
    assert "never_stops did not stop within 1 s" in caplog.text
