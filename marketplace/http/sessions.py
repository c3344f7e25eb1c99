"""The session recorder in the frontend (declared by the identity capability).

``setup`` creates this process's :class:`SessionRecorder` (the router records every verified
session token with it and, before an unsafe request, ensures the caller's row); ``session_writer``
runs its background flush and writes what is left on shutdown. Capability contexts stop before the
Postgres pool closes, so that last batch still has a pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
from aiohttp import web

from marketplace.http import keys
from marketplace.identity.session_recorder import SessionRecorder


def setup(app: web.Application) -> None:
    def pool() -> asyncpg.Pool:
        return app[keys.PG_POOL]

    settings = app[keys.SETTINGS]
    app[keys.SESSION_RECORDER] = SessionRecorder(
        pool,
        interval_ms=settings.session_record_flush_interval_ms,
        max_rows=settings.session_record_flush_max_rows,
    )


async def session_writer(app: web.Application) -> AsyncIterator[None]:
    recorder = app[keys.SESSION_RECORDER]
    recorder.start()
    yield
    await recorder.stop()
