"""asyncio helpers shared by the long-running loops (relay, job workers, indexer, audit writer)."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, seconds: float | None) -> None:
    """Wait until ``event`` is set or ``seconds`` pass; raises TimeoutError on the latter.

    Not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that arrives while the
    awaited thing completes (CPython gh-86296), and a loop that lost its cancellation never stops,
    which hung a relay's shutdown (and so a test's teardown, holding the relay lock). ``timeout()``
    keeps the cancellation.
    """
    async with asyncio.timeout(seconds):
        await event.wait()
