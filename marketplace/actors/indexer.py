"""The chain indexer actor: one named, restartable Ray actor per deployment.

Fault contract: all progress lives in Postgres (cursor, recorded blocks, read models), advanced
batch by batch in single transactions. The actor's own memory holds only caches (the set of
known project addresses) that it reloads. Killed at any point and restarted by Ray, its
``__init__`` starts the loop again, which resumes from the cursor; a batch that was in flight is
simply done again. The loop never dies on a bad block or an unreachable node: failures are logged,
counted and retried with exponential backoff (never slower than the poll interval, so recovery is
seen as fast as progress would be). The outcome of every poll goes to Redis
(``marketplace.indexer.health``), so every frontend's indexer status and readiness name a dead
chain RPC within one poll interval; a lost ``newHeads`` subscription wakes the loop at once.

The loop runs on its own thread with its own event loop, so it starts in ``__init__`` (also after
a restart, when nobody calls the actor) and the actor's methods stay answerable while a batch
runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from typing import Any

from marketplace.actors.options import ActorSpec
from marketplace.actors.startup import start_actor
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
    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = start_actor("indexer", settings)
        self.config = indexer_config(self.settings)
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._state: dict[str, Any] = {
            "started_at": time.time(),
            "batches": 0,
            "errors": 0,
            "last_error": None,
            "last_batch": None,
            "subscribed": False,
        }
        self._thread = threading.Thread(target=self._run_thread, name="indexer", daemon=True)
        self._thread.start()

    # --- actor methods --------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return dict(self._state, alive=self._thread.is_alive())

    def sync_now(self) -> None:
        """Wake the loop now instead of at the next poll (used by tests and operators)."""
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def stop(self) -> None:
        self._stop.set()
        self.sync_now()

    # --- the loop -------------------------------------------------------------------------

    def _run_thread(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        pool = await create_pool(self.settings.database_url, min_size=1, max_size=4)
        redis = Redis.from_url(self.settings.redis_url) if self.settings.redis_url else None
        rpc = JsonRpcClient(self.config.rpc_url)
        engine = IndexerEngine(self.config, pool, rpc, redis)
        health = HealthRecorder(redis, self.config.chain_id)
        heads = asyncio.create_task(self._follow_new_heads())
        poll_s = self.config.poll_interval_ms / 1000
        max_backoff = min(MAX_BACKOFF_SECONDS, max(poll_s, 0.5))
        backoff = 0.5
        try:
            while not self._stop.is_set():
                try:
                    result = await engine.sync_once()
                    await health.record(Attempt.OK)
                    backoff = 0.5
                    self._state["batches"] += 1
                    self._state["last_batch"] = {
                        "from": result.from_block,
                        "to": result.to_block,
                        "head": result.head,
                        "events": result.events,
                        "projects": result.projects,
                        "reorg": result.reorg,
                    }
                    if result.behind or result.reorg:
                        continue
                    await self._sleep(poll_s)
                except Exception as exc:
                    self._state["errors"] += 1
                    self._state["last_error"] = repr(exc)
                    kind = classify_failure(exc)
                    # The traceback once per run of like failures; the status shows the rest.
                    first = await health.record(kind)
                    log.log(
                        logging.WARNING if first else logging.DEBUG,
                        "indexer batch failed (%s); backing off %.1fs",
                        kind.value,
                        backoff,
                        exc_info=True,
                    )
                    await engine.record_rpc_error()
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, max_backoff)
        finally:
            await cancel_and_wait(heads)
            await rpc.close()
            await pool.close()
            if redis is not None:
                await redis.aclose()

    async def _sleep(self, seconds: float) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await wait_event(self._wake, seconds)
        self._wake.clear()

    async def _follow_new_heads(self) -> None:
        """Wake the loop on every new block where the node offers a `newHeads` subscription."""
        import websockets

        if not self.config.ws_url:
            return
        backoff = 1.0
        while not self._stop.is_set():
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
                    self._state["subscribed"] = True
                    backoff = 1.0
                    async for _ in ws:
                        assert self._wake is not None
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._state["subscribed"] and self._wake is not None:
                    # The node may be gone: poll now rather than at the next interval.
                    self._wake.set()
                self._state["subscribed"] = False
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
