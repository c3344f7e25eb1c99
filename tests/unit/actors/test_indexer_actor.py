"""The indexer actor's loop as plain Python (an asyncio task of the actor's own event loop)."""

from __future__ import annotations

import asyncio
import socket

from marketplace.actors.indexer import ChainIndexer
from marketplace.actors.settings import ActorSettings
from marketplace.config import Settings
from tests.support.waiting import eventually_value


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_database_at_start_is_retried_and_the_actor_keeps_answering() -> None:
    port = closed_port()
    settings = ActorSettings.of(
        Settings(
            database_url=f"postgresql://nobody@127.0.0.1:{port}/nothing",
            chain_rpc_url=f"http://127.0.0.1:{port}",
            indexer_poll_interval_ms=50,
        )
    )
    indexer = ChainIndexer(settings)  # starts its loop on this event loop
    try:
        # The old thread died with its first failure: this loop retries (backoff <= the poll).
        status = await eventually_value(
            indexer.status,
            until=lambda s: s.errors >= 3,
            within=10,
            interval=0.02,
            what="three failed rounds",
        )
        assert status.running
        assert status.batches == 0 and status.last_batch is None
        assert status.last_error is not None
        assert not status.subscribed
        await indexer.sync_now()  # a wake-up while failing is answered, changes nothing else
        assert (await indexer.status()).running
    finally:
        await indexer.stop()
    stopped = await indexer.status()
    assert not stopped.running
    await asyncio.sleep(0.2)
    assert (await indexer.status()).errors == stopped.errors  # nothing runs after stop
