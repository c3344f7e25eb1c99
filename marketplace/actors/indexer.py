"""The chain indexer actor: one named, restartable Ray actor per deployment.

An async actor: its loop is an asyncio task started from ``__init__`` on the actor's own event
loop (Ray runs an async actor's ``__init__`` there), as the job workers' are, so a Ray restart
starts it again with nobody calling the actor, and the actor's methods stay answerable while a
batch runs (every call the loop makes awaits I/O: the JSON-RPC client is aiohttp, the database
asyncpg, Redis and the ``newHeads`` WebSocket asyncio clients; no synchronous web3 client is
used). Only CPU work runs on the loop itself between awaits: decoding one page's logs and
folding them into the projects' rows (``marketplace/indexer/logstate.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time

import asyncpg

from marketplace.actors.options import ActorSpec
from marketplace.actors.settings import ActorSettings
from marketplace.actors.startup import start_actor
from marketplace.actors.status import IndexedBatch, IndexerStatus
from marketplace.aio import cancel_and_wait, wait_event
from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerConfig, IndexerEngine
from marketplace.indexer.health import Attempt, HealthRecorder, classify_failure
from marketplace.redis_client import Redis
from marketplace.storage.pool import create_pool

log = logging.getLogger(__name__)
MAX_BACKOFF_SECONDS = 30.0


def indexer_config(settings: Settings) -> IndexerConfig:
    ws_url = settings.chain_ws_url
    if not ws_url and settings.chain_rpc_url.startswith("http"):
        ws_url = "ws" + settings.chain_rpc_url[len("http") :]
    return IndexerConfig(
        chain_id=settings.chain_id,
        rpc_url=settings.chain_rpc_url,
        registry_address=settings.registry_address,
        start_block=settings.chain_start_block,
        ws_url=ws_url,
        poll_interval_ms=settings.indexer_poll_interval_ms,
        rollback_blocks=settings.indexer_rollback_blocks,
        max_pages=settings.indexer_max_pages,
        page_blocks=settings.indexer_page_blocks,
        lag_alert_seconds=settings.indexer_lag_alert_seconds,
    )


class ChainIndexer:
    """Fault contract: all progress lives in Postgres (cursor, recorded blocks, read models),
    advanced batch by batch in single transactions. The actor's own memory holds only caches
    (the set of known project addresses) that it reloads, and the counters :meth:`status`
    answers. Killed at any point and restarted by Ray (``max_restarts=-1``), its ``__init__``
    starts the loop again, which resumes from the cursor; a batch that was in flight is simply
    done again. The loop never dies on a bad block, an unreachable node or an unreachable
    database (at start or later): failures are logged, counted and retried with exponential
    backoff (never slower than the poll interval, so recovery is seen as fast as progress would
    be). The outcome of every poll goes to Redis (``marketplace.indexer.health``), so every
    frontend's indexer status and readiness name a dead chain RPC within one poll interval; a
    lost ``newHeads`` subscription wakes the loop at once. Its methods read state, set a wake-up
    flag or stop the loop, all safe to repeat, so Ray may retry them after a restart.
    """

    def __init__(self, settings: ActorSettings) -> None:
        start_actor("indexer", settings)
        self.settings = settings
        self.config = indexer_config(settings)
        self.started_at = time.time()
        self._stopped = False
        self._wake = asyncio.Event()
        self._batches = 0
        self._errors = 0
        self._last_error: str | None = None
        self._last_batch: IndexedBatch | None = None
        self._subscribed = False
        self._task = asyncio.get_running_loop().create_task(self._main(), name="indexer")

    # --- actor methods --------------------------------------------------------------------

    async def status(self) -> IndexerStatus:
        return IndexerStatus(
            pid=os.getpid(),
            started_at=self.started_at,
            running=not self._task.done(),
            subscribed=self._subscribed,
            batches=self._batches,
            errors=self._errors,
            last_error=self._last_error,
            last_batch=self._last_batch,
        )

    async def sync_now(self) -> None:
        """Wake the loop now instead of at the next poll (used by tests and operators)."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop the loop; a batch in flight rolls back (the next start does it again)."""
        self._stopped = True
        await cancel_and_wait(self._task)

    # --- the loop -------------------------------------------------------------------------

    async def _main(self) -> None:
        redis = Redis.from_url(self.settings.redis_url) if self.settings.redis_url else None
        rpc = JsonRpcClient(self.config.rpc_url)
        health = HealthRecorder(redis, self.config.chain_id)
        heads = asyncio.create_task(self._follow_new_heads())
        pool: asyncpg.Pool | None = None
        engine: IndexerEngine | None = None
        poll_s = self.config.poll_interval_ms / 1000
        max_backoff = min(MAX_BACKOFF_SECONDS, max(poll_s, 0.5))
        backoff = 0.5
        try:
            while not self._stopped:
                try:
                    if engine is None:
                        # Postgres may be unreachable at start: this is retried like a poll.
                        pool = pool or await create_pool(
                            self.settings.database_url, min_size=1, max_size=4
                        )
                        engine = IndexerEngine(self.config, pool, rpc, redis)
                    result = await engine.sync_once()
                except Exception as exc:
                    self._errors += 1
                    self._last_error = repr(exc)
                    kind = classify_failure(exc) if engine is not None else Attempt.INDEXER_ERROR
                    # The traceback once per run of like failures; the status shows the rest.
                    first = await health.record(kind)
                    log.log(
                        logging.WARNING if first else logging.DEBUG,
                        "indexer batch failed (%s); backing off %.1fs",
                        kind.value,
                        backoff,
                        exc_info=True,
                    )
                    if engine is not None:
                        await engine.record_rpc_error()
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, max_backoff)
                    continue
                await health.record(Attempt.OK)
                backoff = 0.5
                self._batches += 1
                self._last_batch = IndexedBatch(
                    from_block=result.from_block,
                    to_block=result.to_block,
                    head=result.head,
                    events=result.events,
                    projects=result.projects,
                    reorg=result.reorg,
                )
                if not (result.behind or result.reorg):
                    await self._sleep(poll_s)
        finally:
            await cancel_and_wait(heads)
            await rpc.close()
            if pool is not None:
                await pool.close()
            if redis is not None:
                await redis.aclose()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await wait_event(self._wake, seconds)
        self._wake.clear()

    async def _follow_new_heads(self) -> None:
        """Wake the loop on every new block where the node offers a `newHeads` subscription."""
        import websockets

        if not self.config.ws_url:
            return
        backoff = 1.0
        while not self._stopped:
            try:
                async with websockets.connect(self.config.ws_url, open_timeout=5) as ws:
                    await ws.send(
                        json.dumps(
                            {
                                "jsonrpc": "2.0",
                                "id": 1,
                                "method": "eth_subscribe",
                                "params": ["newHeads"],
                            }
                        )
                    )
                    reply = json.loads(await ws.recv())
                    if "error" in reply:
                        log.info("node offers no newHeads subscription; polling only")
                        return
                    self._subscribed = True
                    backoff = 1.0
                    async for _ in ws:
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._subscribed:
                    # The node may be gone: poll now rather than at the next interval.
                    self._wake.set()
                self._subscribed = False
                log.debug("newHeads subscription lost", exc_info=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)


INDEXER_SPEC = ActorSpec(
    name="chain-indexer",
    cls=ChainIndexer,
    # status/sync_now/stop are idempotent, so Ray may retry them after a restart.
    idempotent_calls=True,
    max_concurrency=8,
)
