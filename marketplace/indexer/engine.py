"""The indexing loop: chain logs -> touched projects -> state snapshots -> read models.

One batch = up to ``max_pages`` pages of ``page_blocks`` blocks. For every project touched in
the batch the engine reads ``getProjectState()`` (and the allowlist) at the batch's last block
and upserts the read models, records that block's hash and advances the cursor, all in one
transaction: a crash at any point leaves either the whole batch or none of it, and a retried
batch rewrites the same snapshots (upserts never move a project to an older block).

Reorgs: before each batch the engine compares the hashes of the recent blocks it recorded with
the chain's. On a mismatch it rolls back to the newest recorded block that still matches (at most
``rollback_blocks`` behind the cursor, never at or below the node's ``finalized`` block), deletes
projects created after it, re-snapshots every project the dropped blocks touched at the current
head, and rescans from there, so the read model converges to the canonical chain.

Each of these transactions writes its change events (``marketplace.indexer.changes``) as its
last statement: ``project.created`` / ``project.changed`` for what a batch wrote, ``chain.reorg``
and ``project.removed`` for a rollback. An event exists exactly when its change committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from marketplace.chain.abi import ContractAbi
from marketplace.chain.rpc import JsonRpcClient, RpcError
from marketplace.events.types import NewEvent
from marketplace.indexer.changes import (
    Snapshot,
    registry_reset_events,
    reorg_events,
    snapshot_events,
)
from marketplace.indexer.health import lag_seconds_of
from marketplace.indexer.snapshot import project_rows
from marketplace.storage.pool import Connection
from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import indexer as repo

log = logging.getLogger(__name__)

METRICS_KEY = "marketplace:indexer:metrics"
# Recorded batch-end blocks kept beyond the rollback window, so a reorg is always detectable.
KEEP_RECORDED_BLOCKS = 32
# Snapshot reads: calls per JSON-RPC batch request, and batch requests in flight at once.
SNAPSHOT_CHUNK = 200
SNAPSHOT_CONCURRENCY = 4
# The head query opens every poll: a node that does not answer it this fast counts as
# unreachable (the client's own timeout is for the big log and snapshot reads).
HEAD_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class IndexerConfig:
    chain_id: int
    rpc_url: str
    registry_address: str
    start_block: int
    ws_url: str = ""
    poll_interval_ms: int = 10_000
    rollback_blocks: int = 10
    max_pages: int = 50
    page_blocks: int = 2_000
    lag_alert_seconds: int = 300


@dataclass
class BatchResult:
    from_block: int
    to_block: int
    head: int
    events: int
    projects: int
    reorg: bool = False

    @property
    def behind(self) -> bool:
        return self.to_block < self.head


@dataclass(frozen=True)
class WrittenSnapshots:
    projects: set[str]  # what the upsert wrote (not the projects already at a newer block)
    events: list[NewEvent]


def _hex(n: int) -> str:
    return hex(n)


class IndexerEngine:
    def __init__(
        self,
        config: IndexerConfig,
        pool: asyncpg.Pool,
        rpc: JsonRpcClient,
        redis: aioredis.Redis | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.rpc = rpc
        self.redis = redis
        self.registry = config.registry_address.lower()
        registry_abi = ContractAbi.load("MarketplaceRegistry")
        self.project_abi = ContractAbi.load("MarketplaceProject")
        self.created_event = registry_abi.events["ProjectCreated"]
        self.topics = sorted(
            {self.created_event.topic0} | {e.topic0 for e in self.project_abi.events.values()}
        )
        self.get_state = self.project_abi.functions["getProjectState"]
        self.get_allowlist = self.project_abi.functions["allowlist"]
        self._known: set[str] | None = None
        self._lag_alerting = False

    # --- the loop -------------------------------------------------------------------------

    async def ensure_cursor(self) -> asyncpg.Record:
        cursor = await repo.get_cursor(self.pool, self.config.chain_id)
        if cursor is not None and cursor["registry_address"] != self.registry:
            log.warning(
                "registry changed; re-indexing this chain from the new registry's start block",
                extra={"old": cursor["registry_address"], "new": self.registry},
            )
            async with self.pool.acquire() as conn, conn.transaction():
                removed = await repo.reset_chain(conn, self.config.chain_id)
                await events_repo.append(conn, registry_reset_events(removed))
            self._known = None
            cursor = None
        if cursor is None:
            await repo.init_cursor(
                self.pool, self.config.chain_id, self.registry, self.config.start_block
            )
            cursor = await repo.get_cursor(self.pool, self.config.chain_id)
        assert cursor is not None
        return cursor

    async def known_projects(self) -> set[str]:
        if self._known is None:
            self._known = await repo.known_projects(self.pool, self.config.chain_id)
        return self._known

    async def sync_once(self) -> BatchResult:
        started = time.perf_counter()
        cursor = await self.ensure_cursor()
        head = int(
            await asyncio.wait_for(self.rpc.call("eth_blockNumber", []), HEAD_TIMEOUT_SECONDS), 16
        )
        synced = cursor["last_synced_block"]
        if await self._rollback_if_reorged(synced, head):
            await self._metric_incr("reorgs_handled", 1)
            cursor = await self.ensure_cursor()
            synced = cursor["last_synced_block"]
            result = BatchResult(synced, synced, head, 0, 0, reorg=True)
            return result
        start = synced + 1
        if start > head:
            await repo.advance_cursor(self.pool, self.config.chain_id, synced, head, _now())
            await self._report_lag(synced, head, cursor["last_synced_block_time"])
            return BatchResult(start, synced, head, 0, 0)
        end = min(head, start + self.config.page_blocks * self.config.max_pages - 1)
        logs = await self._fetch_logs(start, end)
        creations, touched, events = await self._classify(logs)
        snapshots, block = await self._snapshot(touched, creations, end)
        block_time = datetime.fromtimestamp(int(block["timestamp"], 16), UTC)
        async with self.pool.acquire() as conn, conn.transaction():
            written = await self._write_snapshots(conn, snapshots, block=end, block_time=block_time)
            await repo.record_block(conn, self.config.chain_id, end, block["hash"], touched)
            await repo.advance_cursor(conn, self.config.chain_id, end, head, _now(), block_time)
            await repo.prune_blocks(
                conn,
                self.config.chain_id,
                end - self.config.rollback_blocks,
                KEEP_RECORDED_BLOCKS,
            )
            # Last: from here to the commit this batch holds the events' order lock.
            await events_repo.append(conn, written.events)
        known = await self.known_projects()
        known.update(creations)
        await self._metrics_after_batch(end - start + 1, events, time.perf_counter() - started)
        await self._report_lag(end, head, block_time)
        return BatchResult(start, end, head, events, len(written.projects))

    async def _fetch_logs(self, start: int, end: int) -> list[dict[str, Any]]:
        calls = []
        for page_start in range(start, end + 1, self.config.page_blocks):
            page_end = min(end, page_start + self.config.page_blocks - 1)
            calls.append(
                (
                    "eth_getLogs",
                    [
                        {
                            "fromBlock": _hex(page_start),
                            "toBlock": _hex(page_end),
                            "topics": [self.topics],
                        }
                    ],
                )
            )
        pages = await self.rpc.batch(calls)
        return [entry for page in pages for entry in page]

    async def _classify(
        self, logs: list[dict[str, Any]]
    ) -> tuple[dict[str, ProjectCreation], set[str], int]:
        known = await self.known_projects()
        creations: dict[str, ProjectCreation] = {}
        touched: set[str] = set()
        events = 0
        logs = sorted(logs, key=lambda e: (int(e["blockNumber"], 16), int(e["logIndex"], 16)))
        for entry in logs:
            if entry.get("removed"):
                continue
            address = entry["address"].lower()
            topic0 = entry["topics"][0] if entry["topics"] else None
            if address == self.registry and topic0 == self.created_event.topic0:
                args = self.created_event.decode_log(entry, checksum_addresses=False)
                project = args["project"].lower()
                creations[project] = ProjectCreation(
                    project_address=project,
                    owner_address=args["owner"].lower(),
                    config_hash=args["configHash"].lower(),
                    block_number=int(entry["blockNumber"], 16),
                    log_index=int(entry["logIndex"], 16),
                )
                touched.add(project)
                events += 1
            elif address in known or address in creations:
                touched.add(address)
                events += 1
        return creations, touched, events

    async def _write_snapshots(
        self,
        conn: Connection,
        snapshots: list[Snapshot],
        *,
        block: int,
        block_time: datetime,
    ) -> WrittenSnapshots:
        """Upsert ``snapshots`` and work out their change events (the caller writes them)."""
        addresses = [project.project_address for project, _, _ in snapshots]
        before_projects, before_milestones = await repo.current_state(conn, addresses)
        written = await repo.upsert_snapshots(
            conn, self.config.chain_id, snapshots, block=block, block_time=block_time
        )
        events = snapshot_events(
            before_projects, before_milestones, snapshots, written, block=block
        )
        return WrittenSnapshots(written, events)

    async def _snapshot(
        self, touched: set[str], creations: dict[str, ProjectCreation], block: int
    ) -> tuple[list[tuple[ProjectRow, list[MilestoneRow], ProjectCreation]], dict[str, Any]]:
        order = sorted(touched)
        tag = _hex(block)
        calls: list[tuple[str, list[Any]]] = [("eth_getBlockByNumber", [tag, False])]
        state_data = self.get_state.encode_call()
        allow_data = self.get_allowlist.encode_call()
        for address in order:
            calls.append(("eth_call", [{"to": address, "data": state_data}, tag]))
            calls.append(("eth_call", [{"to": address, "data": allow_data}, tag]))
        # The JSON-RPC chunks go out concurrently (a few connections): the node executes the
        # calls while this process parses the previous answers. Still all-or-nothing.
        chunks = [calls[i : i + SNAPSHOT_CHUNK] for i in range(0, len(calls), SNAPSHOT_CHUNK)]
        results: list[Any] = []
        for wave in range(0, len(chunks), SNAPSHOT_CONCURRENCY):
            answers = await asyncio.gather(
                *(self.rpc.batch(c) for c in chunks[wave : wave + SNAPSHOT_CONCURRENCY])
            )
            results.extend(r for answer in answers for r in answer)
        block_info = results[0]
        if block_info is None:
            raise RpcError(f"block {block} not found")
        missing = [a for a in order if a not in creations]
        existing = await repo.existing_creations(self.pool, missing) if missing else {}
        snapshots = []
        for i, address in enumerate(order):
            creation = creations.get(address) or existing.get(address)
            if creation is None:
                log.warning("event from a project never created", extra={"project": address})
                continue
            state = self.get_state.decode_result(results[1 + 2 * i], checksum_addresses=False)
            allowlist = self.get_allowlist.decode_result(
                results[2 + 2 * i], checksum_addresses=False
            )
            project, milestones = project_rows(address, state, allowlist)
            snapshots.append((project, milestones, creation))
        return snapshots, block_info

    # --- reorgs ---------------------------------------------------------------------------

    async def _finalized_block(self) -> int | None:
        try:
            block = await self.rpc.call("eth_getBlockByNumber", ["finalized", False])
        except RpcError:
            return None
        return int(block["number"], 16) if block else None

    async def _rollback_if_reorged(self, synced: int, head: int) -> bool:
        recorded = await repo.recent_blocks(
            self.pool, self.config.chain_id, self.config.rollback_blocks + KEEP_RECORDED_BLOCKS
        )
        if not recorded:
            return False
        numbers = [row["block_number"] for row in recorded]
        chain_blocks = await self.rpc.batch(
            [("eth_getBlockByNumber", [_hex(n), False]) for n in numbers]
        )
        matches = [
            bool(blk) and blk["hash"].lower() == row["block_hash"].lower()
            for row, blk in zip(recorded, chain_blocks, strict=True)
        ]
        if matches[0]:
            return False
        finalized = await self._finalized_block()
        floor = max(synced - self.config.rollback_blocks, self.config.start_block - 1)
        fork = next((n for n, ok in zip(numbers, matches, strict=True) if ok and n >= floor), floor)
        if finalized is not None and fork < finalized <= synced:
            fork = finalized
        log.warning(
            "chain reorganisation detected; rolling back",
            extra={"synced": synced, "fork_block": fork, "head": head},
        )
        async with self.pool.acquire() as conn, conn.transaction():
            touched = await repo.drop_blocks_after(conn, self.config.chain_id, fork)
            deleted = await repo.delete_projects_created_after(conn, self.config.chain_id, fork)
            survivors = sorted(touched - deleted)
            if survivors:
                await conn.execute(
                    "UPDATE projects SET snapshot_block = $2 WHERE project_address = any($1)",
                    survivors,
                    fork,
                )
            await repo.advance_cursor(conn, self.config.chain_id, fork, head, _now())
            await events_repo.append(
                conn,
                reorg_events(
                    chain_id=self.config.chain_id,
                    fork_block=fork,
                    synced_block=synced,
                    head_block=head,
                    removed=deleted,
                    resnapshot=survivors,
                ),
            )
        if self._known is not None:
            self._known -= deleted
        # Projects the dropped blocks touched are re-read as of now; the rescan from the fork
        # then replays the canonical history on top.
        if survivors:
            await self._resnapshot(survivors, head)
        return True

    async def _resnapshot(self, addresses: list[str], head: int) -> None:
        snapshots, block = await self._snapshot(set(addresses), {}, head)
        block_time = datetime.fromtimestamp(int(block["timestamp"], 16), UTC)
        async with self.pool.acquire() as conn, conn.transaction():
            written = await self._write_snapshots(
                conn, snapshots, block=head, block_time=block_time
            )
            await events_repo.append(conn, written.events)

    # --- side channels --------------------------------------------------------------------

    async def _metric_incr(self, name: str, amount: float) -> None:
        if self.redis is None:
            return
        try:
            await self.redis.hincrbyfloat(METRICS_KEY, name, amount)
        except Exception:
            log.debug("metrics write failed", exc_info=True)

    async def _metrics_after_batch(self, blocks: int, events: int, seconds: float) -> None:
        if self.redis is None:
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hincrbyfloat(METRICS_KEY, "blocks_processed", blocks)
                pipe.hincrbyfloat(METRICS_KEY, "events_processed", events)
                pipe.hincrbyfloat(METRICS_KEY, "batches", 1)
                pipe.hincrbyfloat(METRICS_KEY, "batch_seconds_sum", seconds)
                await pipe.execute()
        except Exception:
            log.debug("metrics write failed", exc_info=True)

    async def record_rpc_error(self) -> None:
        await self._metric_incr("rpc_errors", 1)

    async def _report_lag(self, synced: int, head: int, synced_time: datetime | None) -> None:
        lag_blocks = max(0, head - synced)
        lag_seconds = lag_seconds_of(lag_blocks, synced_time)
        if self.redis is not None:
            try:
                await self.redis.hset(
                    METRICS_KEY,
                    mapping={
                        "lag_blocks": lag_blocks,
                        "lag_seconds": lag_seconds,
                        "head_block": head,
                        "last_synced_block": synced,
                    },
                )
            except Exception:
                log.debug("metrics write failed", exc_info=True)
        alerting = lag_seconds > self.config.lag_alert_seconds
        if alerting and not self._lag_alerting:
            log.warning(
                "indexer lag above alert threshold",
                extra={"lag_seconds": lag_seconds, "lag_blocks": lag_blocks},
            )
        self._lag_alerting = alerting


def _now() -> datetime:
    return datetime.now(UTC)
