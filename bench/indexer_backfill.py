"""Indexer backfill throughput against the ``eth_getLogs`` floor (issue 5).

Usage: ``.venv/bin/python bench/indexer_backfill.py [--projects 2000] [--milestones 5]
[--rounds 3]`` (see bench/README.md). Everything is local and loopback-only:

1. a scratch embedded PostgreSQL (migrated) and Redis in a temporary directory, and an anvil with
   the reference contracts deployed;
2. ``marketplace devnet seed`` (the same :class:`~marketplace.devnet.seed.Seeder`)
   fills the chain with ``--projects`` projects in every status, ``--milestones`` per standard
   project;
3. in alternating rounds over the same block range (the deployment's start block to the head):
   ``floor``: the same ``eth_getLogs`` requests the indexer makes (same pages of
   ``--page-blocks``, same ``--max-pages`` per JSON-RPC batch, same topics filter) through the
   same :class:`~marketplace.chain.rpc.JsonRpcClient`, doing nothing with the logs;
   ``indexer``: a fresh :class:`~marketplace.indexer.engine.IndexerEngine` (Postgres pool as the
   actor opens it, Redis for its metrics) calling ``sync_once()`` from
   an empty database until it is caught up. The tables are emptied before each indexer round.

The ratio of the medians is what the indexer adds on top of merely fetching the logs (target:
at most 3x). A per-stage breakdown of the indexer rounds (logs, classification, state snapshots
over RPC, decoding, database) shows where the rest goes. Results are printed as a table and,
with --output, written to bench/results/indexer_backfill.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from web3 import Web3  # noqa: E402

from bench.report import add_output_option, write_report  # noqa: E402
from marketplace.chain.rpc import JsonRpcClient  # noqa: E402
from marketplace.devnet.anvil import AnvilProcess  # noqa: E402
from marketplace.devnet.client import DevnetClient  # noqa: E402
from marketplace.devnet.deploy import deploy_dev_defaults  # noqa: E402
from marketplace.devnet.seed import DEFAULT_BLOCK_GAS, Seeder  # noqa: E402
from marketplace.embedded.postgres import EmbeddedPostgres  # noqa: E402
from marketplace.embedded.redis import EmbeddedRedis  # noqa: E402
from marketplace.indexer.engine import IndexerConfig, IndexerEngine  # noqa: E402
from marketplace.storage.migrations import migrate_dsn  # noqa: E402
from marketplace.storage.pool import create_pool  # noqa: E402
from marketplace.storage.repositories import events as events_repo  # noqa: E402
from marketplace.storage.repositories import indexer as repo  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "indexer_backfill.json"
TARGET_RATIO = 3.0
STAGES = (
    "reorg check",
    "eth_getLogs",
    "classify logs",
    "snapshot (RPC + decode)",
    "  of which eth_call batches",
    "database writes",
    "change events (read before, outbox)",
)
TRUNCATE_ALL = """
SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'
"""
_P = ParamSpec("_P")
_R = TypeVar("_R")


# --- the two contenders ---------------------------------------------------------------------------


def batch_ranges(start: int, head: int, page_blocks: int, max_pages: int) -> list[tuple[int, int]]:
    """The (from, to) block ranges of the indexer's batches, as ``sync_once`` cuts them."""
    ranges = []
    synced = start - 1
    while synced < head:
        first = synced + 1
        last = min(head, first + page_blocks * max_pages - 1)
        ranges.append((first, last))
        synced = last
    return ranges


async def floor_round(
    url: str, topics: list[str], ranges: list[tuple[int, int]], page_blocks: int
) -> dict[str, Any]:
    rpc = JsonRpcClient(url)
    logs = 0
    started = time.perf_counter()
    try:
        for first, last in ranges:
            calls = [
                (
                    "eth_getLogs",
                    [
                        {
                            "fromBlock": hex(page),
                            "toBlock": hex(min(last, page + page_blocks - 1)),
                            "topics": [topics],
                        }
                    ],
                )
                for page in range(first, last + 1, page_blocks)
            ]
            pages = await rpc.batch(calls)
            logs += sum(len(p) for p in pages)
        seconds = time.perf_counter() - started
    finally:
        await rpc.close()
    return {"seconds": seconds, "events": logs, "batches": len(ranges)}


class StageTimer:
    """Wall time per indexer stage, by wrapping the engine's coroutine methods."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(
        self, name: str, fn: Callable[_P, Awaitable[_R]]
    ) -> Callable[_P, Coroutine[Any, Any, _R]]:
        @functools.wraps(fn)
        async def timed(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started

        return timed


async def reset_database(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetchval(TRUNCATE_ALL)
        if tables:
            await conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    finally:
        await conn.close()


async def indexer_round(config: IndexerConfig, dsn: str, redis_url: str | None) -> dict[str, Any]:
    await reset_database(dsn)
    pool = await create_pool(dsn, min_size=1, max_size=4)
    redis = aioredis.Redis.from_url(redis_url) if redis_url else None
    if redis is not None:
        await redis.flushdb()
    rpc = JsonRpcClient(config.rpc_url)
    engine = IndexerEngine(config, pool, rpc, redis)
    timer = StageTimer()
    # Stages: what the engine awaits, each wrapped where it is looked up (instance or module).
    engine._fetch_logs = timer.wrap("eth_getLogs", engine._fetch_logs)  # type: ignore[method-assign]
    engine._classify = timer.wrap("classify logs", engine._classify)  # type: ignore[method-assign]
    engine._snapshot = timer.wrap("snapshot (RPC + decode)", engine._snapshot)  # type: ignore[method-assign]
    engine._rollback_if_reorged = timer.wrap(  # type: ignore[method-assign]
        "reorg check", engine._rollback_if_reorged
    )
    rpc_batch = rpc.batch
    in_flight = {"count": 0, "since": 0.0}

    async def batch(calls: list[tuple[str, list[Any]]], **kw: Any) -> list[Any]:
        # Wall time while at least one eth_call batch is in flight (they overlap).
        if not calls or calls[-1][0] != "eth_call":
            return await rpc_batch(calls, **kw)
        if in_flight["count"] == 0:
            in_flight["since"] = time.perf_counter()
        in_flight["count"] += 1
        try:
            return await rpc_batch(calls, **kw)
        finally:
            in_flight["count"] -= 1
            if in_flight["count"] == 0:
                timer.seconds["  of which eth_call batches"] += (
                    time.perf_counter() - in_flight["since"]
                )

    rpc.batch = batch  # type: ignore[method-assign]
    originals = {
        name: getattr(repo, name)
        for name in ("upsert_snapshots", "record_block", "advance_cursor", "prune_blocks")
    }
    for name, fn in originals.items():
        setattr(repo, name, timer.wrap("database writes", fn))
    # What the change events add: the rows read before the upsert, and the outbox insert.
    event_originals: list[tuple[Any, str, Callable[..., Awaitable[Any]]]] = [
        (repo, "current_state", repo.current_state),
        (events_repo, "append", events_repo.append),
    ]
    for module, name, fn in event_originals:
        setattr(module, name, timer.wrap(STAGES[-1], fn))
    events = batches = projects = 0
    started = time.perf_counter()
    try:
        while True:
            result = await engine.sync_once()
            batches += 1
            events += result.events
            projects += result.projects
            if not result.behind and not result.reorg:
                break
        seconds = time.perf_counter() - started
        indexed = await pool.fetchval("SELECT count(*) FROM projects")
        milestones = await pool.fetchval("SELECT count(*) FROM milestones")
    finally:
        for name, fn in originals.items():
            setattr(repo, name, fn)
        for module, name, fn in event_originals:
            setattr(module, name, fn)
        await rpc.close()
        await pool.close()
        if redis is not None:
            await redis.aclose()
    return {
        "seconds": seconds,
        "events": events,
        "batches": batches,
        "projects_written": projects,
        "projects_in_db": indexed,
        "milestones_in_db": milestones,
        "stages": dict(timer.seconds),
    }


# --- orchestration --------------------------------------------------------------------------------


async def measure(
    config: IndexerConfig,
    dsn: str,
    redis_url: str | None,
    head: int,
    rounds: int,
    *,
    profile: bool = False,
) -> dict[str, Any]:
    probe = IndexerEngine(config, None, None)  # type: ignore[arg-type]
    topics = probe.topics
    ranges = batch_ranges(config.start_block, head, config.page_blocks, config.max_pages)
    floor: list[dict[str, Any]] = []
    indexer: list[dict[str, Any]] = []
    # One unmeasured warm-up of each (anvil's caches, Python imports, Postgres plans).
    await floor_round(config.rpc_url, topics, ranges, config.page_blocks)
    await indexer_round(config, dsn, redis_url)
    for i in range(rounds):
        print(f"  round {i + 1}/{rounds} ...", file=sys.stderr, flush=True)
        floor.append(await floor_round(config.rpc_url, topics, ranges, config.page_blocks))
        indexer.append(await indexer_round(config, dsn, redis_url))
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        await indexer_round(config, dsn, redis_url)
        profiler.disable()
        print("\nprofile of one more indexer round (not measured), top 30 by own time:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    return {"floor": floor, "indexer": indexer, "ranges": ranges}


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = [s["seconds"] for s in samples]
    median = statistics.median(seconds)
    events = samples[0]["events"]
    return {
        "median_seconds": round(median, 4),
        "min_seconds": round(min(seconds), 4),
        "max_seconds": round(max(seconds), 4),
        "events": events,
        "events_per_second": round(events / median, 1) if median else None,
        "batches": samples[0]["batches"],
    }


def print_table(report: dict[str, Any]) -> None:
    floor, indexer = report["floor"], report["indexer"]
    print()
    print(
        f"indexer backfill: {report['seed']['projects']} projects x {report['milestones']} "
        f"milestones, blocks {report['from_block']}..{report['to_block']} "
        f"({report['to_block'] - report['from_block'] + 1} blocks), "
        f"page {report['page_blocks']} blocks x {report['max_pages']} pages/batch, "
        f"{report['rounds']} rounds (median)"
    )
    header = f"{'':<26}{'floor (eth_getLogs)':>22}{'indexer':>14}{'ratio':>9}"
    print(header)
    print("-" * len(header))
    print(
        f"{'wall time (s)':<26}{floor['median_seconds']:>22.3f}{indexer['median_seconds']:>14.3f}"
        f"{report['ratio']:>8.2f}x"
    )
    print(f"{'events':<26}{floor['events']:>22}{indexer['events']:>14}{'':>9}")
    print(
        f"{'events/s':<26}{floor['events_per_second']:>22,.0f}"
        f"{indexer['events_per_second']:>14,.0f}{'':>9}"
    )
    print(f"{'JSON-RPC batches':<26}{floor['batches']:>22}{indexer['batches']:>14}")
    print("-" * len(header))
    verdict = "met" if report["ratio"] <= TARGET_RATIO else "MISSED"
    print(f"target: indexer <= {TARGET_RATIO:.0f}x floor: {verdict} ({report['ratio']:.2f}x)")
    print()
    print("indexer stages (median round, seconds):")
    for name, seconds in report["indexer_stages"].items():
        print(f"  {name:<36}{seconds:>8.3f}")
    print(
        f"\nprojects in read model: {report['indexer_projects_in_db']}, milestones: "
        f"{report['indexer_milestones_in_db']}; seed: {report['seed']['transactions']} "
        f"transactions in {report['seed']['seconds']:.1f}s "
        f"({report['seed']['projectsPerSecond']:.0f} projects/s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--projects", type=int, default=2000)
    parser.add_argument("--milestones", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--page-blocks", type=int, default=2000, help="indexer default 2000")
    parser.add_argument("--max-pages", type=int, default=50, help="indexer default 50")
    parser.add_argument("--block-gas", type=int, default=DEFAULT_BLOCK_GAS, help="seed blocks")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the seeder")
    parser.add_argument("--no-redis", action="store_true", help="run the engine without Redis")
    add_output_option(parser, RESULTS)
    parser.add_argument(
        "--profile", action="store_true", help="cProfile one extra indexer round and print it"
    )
    args = parser.parse_args()

    os.environ.setdefault("MARKETPLACE_LOG_JSON", "false")
    tmp = Path(tempfile.mkdtemp(prefix="mkt-bench-backfill-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    postgres = EmbeddedPostgres(tmp)
    redis_server = None if args.no_redis else EmbeddedRedis(tmp)
    anvil = AnvilProcess(tmp / "anvil", silent=True)
    try:
        print("starting postgres, redis, anvil ...", file=sys.stderr, flush=True)
        dsn = postgres.start()
        asyncio.run(migrate_dsn(dsn))
        redis_url = redis_server.start() if redis_server is not None else None
        url = anvil.start()
        w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 60}))
        deployment = deploy_dev_defaults(w3)
        print(
            f"seeding {args.projects} projects x {args.milestones} milestones ...",
            file=sys.stderr,
            flush=True,
        )
        with DevnetClient(url, deployment) as client:
            seeded = Seeder(client, rng_seed=args.seed, block_gas=args.block_gas).run(
                args.projects, args.milestones
            )
            head = client.head()["number"]
        if seeded.mismatches:
            raise SystemExit(f"seed incomplete: {seeded.mismatches[:3]}")
        config = IndexerConfig(
            chain_id=deployment.chain_id,
            rpc_url=url,
            registry_address=deployment.registry,
            start_block=deployment.start_block,
            page_blocks=args.page_blocks,
            max_pages=args.max_pages,
        )
        print("measuring ...", file=sys.stderr, flush=True)
        raw = asyncio.run(measure(config, dsn, redis_url, head, args.rounds, profile=args.profile))
    finally:
        anvil.stop()
        if redis_server is not None:
            redis_server.stop()
        postgres.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    floor, indexer = summarize(raw["floor"]), summarize(raw["indexer"])
    median_round = sorted(raw["indexer"], key=lambda s: s["seconds"])[len(raw["indexer"]) // 2]
    report = {
        "benchmark": "indexer_backfill",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "milestones": args.milestones,
        "rounds": args.rounds,
        "page_blocks": args.page_blocks,
        "max_pages": args.max_pages,
        "redis": not args.no_redis,
        "from_block": deployment.start_block,
        "to_block": head,
        "seed": seeded.to_dict(include_projects=False),
        "floor": floor,
        "indexer": indexer,
        "ratio": round(indexer["median_seconds"] / floor["median_seconds"], 3),
        "target_ratio": TARGET_RATIO,
        "indexer_stages": {
            k: round(median_round["stages"][k], 4) for k in STAGES if k in median_round["stages"]
        },
        "indexer_projects_in_db": median_round["projects_in_db"],
        "indexer_milestones_in_db": median_round["milestones_in_db"],
        "samples": {"floor": raw["floor"], "indexer": raw["indexer"]},
    }
    if indexer["events"] != floor["events"]:
        print(
            f"WARNING: indexer counted {indexer['events']} events, the floor fetched "
            f"{floor['events']} logs",
            file=sys.stderr,
        )
    print_table(report)
    write_report(args.output, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
