"""Leaderboard boards: read latency of ``GET /v1/leaderboards`` against a bare aiohttp + asyncpg
server running the same SQL, and what keeping the boards current costs the indexer's backfill.

Usage: ``.venv/bin/python bench/leaderboards.py [--milestones 100000] [--workers 5000]
[--concurrency 16] [--duration 10] [--backfill-projects 300]`` (see bench/README.md). Everything
is local and loopback-only.

Read phase:

1. a scratch embedded PostgreSQL and Redis, migrated; ``--milestones`` completed milestones
   (5 per project) over ``--workers`` worker wallets, each tagged with one or two of the 9
   shipped categories, completed over the last 200 days, written straight into the read-model
   tables (``projects``, ``milestones``, ``milestone_category_tags``); then
   ``marketplace.leaderboards.boards.rebuild`` (timed: the operator's rebuild at this size) and
   VACUUM ANALYZE;
2. a Ray head (the app connects to Ray at start-up) and two server processes kept alive for the
   whole phase: ``ours``, the real app (every middleware, the freshness lookups, pydantic
   models); ``baseline``, a bare aiohttp app running the same page statement (the repository's
   ``standings_page`` / ``entries_page``) on an identical pool and dumping the rows with
   ``json.dumps``;
3. per scenario, in alternating rounds, ``--concurrency`` connections for ``--duration`` seconds
   (bench/read_throughput.py's load generator). Target: p99 of ``?limit=100`` < 50 ms at c=16.

Backfill phase (skip with ``--skip-backfill``): anvil with the reference contracts, seeded by
``marketplace devnet seed`` with ``--backfill-projects`` projects; in alternating rounds the
indexer engine backfills from an empty database (bench/indexer_backfill.py's round) without and
with a boards consumer running in its own process (as it runs in a frontend, beside the indexer
actor). Reported: the backfill's wall time both ways (target: at most 10 % slower with the
consumer), and when the boards had caught up with the last event. Results are printed as a table
and, with --output, written to bench/results/leaderboards.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
from aiohttp import web  # noqa: E402

from bench import indexer_backfill  # noqa: E402
from bench.read_throughput import (  # noqa: E402
    Server,
    drive,
    percentile,
    ray_head,
    stop_server,
    wait_ready,
)
from bench.report import add_output_option, write_report  # noqa: E402
from marketplace.storage.repositories import leaderboard_boards as boards_repo  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "leaderboards.json"
P99_TARGET_MS = 50.0
BACKFILL_TARGET = 1.10
CATEGORIES = [
    "smart-contracts",
    "frontend",
    "backend",
    "design",
    "data",
    "devops",
    "security",
    "ai-agents",
    "docs",
]
PER_PROJECT = 5

# --- seeding ------------------------------------------------------------------------------------


def seed_sql(projects: int, workers: int) -> str:
    # Project i: worker i % workers; milestone m: payout 100..999, completed 0..199 days ago,
    # tagged with one category, and every other one with a second.
    return f"""
INSERT INTO projects (
    project_address, chain_id, owner_address, status, project_mode, bidding_access, config_hash,
    selected_builder_address, milestone_count, allowlist, created_block, created_log_index,
    created_at, updated_at, snapshot_block)
SELECT
    '0x' || substr(md5('p' || i), 1, 32) || lpad(to_hex(i), 8, '0'),
    31337,
    '0x' || substr(md5('o' || (i % 997)), 1, 32) || lpad(to_hex(i % 997), 8, '0'),
    'building', 'standard',
    CASE WHEN i % 10 = 9 THEN 'invite_only' ELSE 'open' END,
    '0x' || md5('c' || i) || md5('d' || i),
    '0x' || substr(md5('w' || (i % {workers})), 1, 32) || lpad(to_hex(i % {workers}), 8, '0'),
    {PER_PROJECT}, '{{}}'::text[], 1000 + i, 0, now() - interval '300 days', now(), 1000 + i
FROM generate_series(1, {projects}) AS i;

INSERT INTO milestones (project_address, milestone_index, status, payout_usdc, approved_at)
SELECT p.project_address, m, 'approved',
    100 + (abs(hashtext(p.project_address || m)) % 900),
    now() - (abs(hashtext(m || p.project_address)) % (200 * 86400)) * interval '1 second'
FROM projects p CROSS JOIN generate_series(0, {PER_PROJECT - 1}) AS m;

INSERT INTO milestone_category_tags
    (project_address, milestone_index, owner_wallet_address, categories, revision)
SELECT m.project_address, m.milestone_index, p.owner_address,
    CASE WHEN h % 2 = 0 THEN ARRAY[c[1 + h % 9]] ELSE ARRAY[c[1 + h % 9], c[1 + (h / 9) % 9]] END,
    1
FROM milestones m
JOIN projects p USING (project_address)
CROSS JOIN LATERAL (SELECT abs(hashtext(m.project_address || '#' || m.milestone_index)) AS h) x
CROSS JOIN (SELECT ARRAY{CATEGORIES!r}::text[] AS c) cats;
UPDATE milestone_category_tags SET categories = ARRAY(SELECT DISTINCT unnest(categories));
"""


async def seed(dsn: str, milestones: int, workers: int) -> dict[str, Any]:
    from marketplace.leaderboards import boards

    projects = max(1, milestones // PER_PROJECT)
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        await conn.execute(seed_sql(projects, workers))
        await conn.execute("VACUUM ANALYZE projects, milestones, milestone_category_tags")
        seeded = time.perf_counter() - started
        started = time.perf_counter()
        entries, standings = await boards.rebuild(conn)
        rebuilt = time.perf_counter() - started
        await conn.execute("VACUUM ANALYZE leaderboard_entries, leaderboard_standings")
        # An indexer cursor, so freshness is read as in production (source "indexed").
        await conn.execute(
            "INSERT INTO indexer_cursors (chain_id, registry_address, start_block, "
            "last_synced_block, head_block, last_synced_block_time, last_successful_sync_at) "
            "VALUES (31337, $1, 1, 100, 100, now(), now())",
            "0x" + "ab" * 20,
        )
    finally:
        await conn.close()
    return {
        "projects": projects,
        "milestones": projects * PER_PROJECT,
        "workers": workers,
        "seed_seconds": round(seeded, 2),
        "rebuild_seconds": round(rebuilt, 3),
        "entries": entries,
        "standings": standings,
    }


# --- the two servers ----------------------------------------------------------------------------


def serve_ours(args: argparse.Namespace) -> None:
    from pydantic import SecretStr

    from marketplace.config import Settings
    from marketplace.http.app import create_app
    from marketplace.logs import configure_logging

    settings = Settings(
        data_dir=Path(args.data_dir),
        database_url=args.database_url,
        redis_url=args.redis_url,
        ray_address=args.ray_address,
        ray_namespace="marketplace-bench-leaderboards",
        jwt_secret=SecretStr("bench-secret-" + "l" * 32),
        notification_unsubscribe_secret=SecretStr("bench-unsubscribe-" + "u" * 32),
        notification_pipeline_enabled=False,
        leaderboard_consumer_enabled=False,
        indexer_enabled=False,
        project_shards=1,
        rate_limit_enabled=False,
        jobs_workers={"notifications": 0, "verifier": 0},
        log_level=args.log_level,
    )
    configure_logging(settings.log_level, settings.log_json)
    web.run_app(create_app(settings), host="127.0.0.1", port=args.port, print=None, access_log=None)


def serve_baseline(args: argparse.Namespace) -> None:
    from marketplace.storage.pool import create_pool

    pool_key: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)

    async def board(request: web.Request) -> web.Response:
        limit = int(request.query.get("limit", "50"))
        wanted = [c for c in request.query.get("categories", "").split(",") if c]
        pool = request.app[pool_key]
        # The repository's own functions: the same statements (and, for several categories,
        # the same per-transaction planning setting) as the app.
        if len(wanted) <= 1:
            rows = await boards_repo.standings_page(
                pool,
                category=wanted[0] if wanted else "*",
                window="all",
                sort="payout",
                limit=limit + 1,
                after=None,
            )
        else:
            rows = await boards_repo.entries_page(
                pool, categories=wanted, window="all", sort="payout", limit=limit + 1, after=None
            )
        items = [row._asdict() for row in rows[:limit]]
        body = {"items": items, "count": len(items), "nextCursor": None}
        return web.Response(
            body=json.dumps(body, default=str).encode(), content_type="application/json"
        )

    async def pool_ctx(app: web.Application) -> Any:
        app[pool_key] = await create_pool(args.database_url, min_size=2, max_size=20)
        yield
        await app[pool_key].close()

    app = web.Application()
    app.cleanup_ctx.append(pool_ctx)
    app.router.add_get("/v1/leaderboards", board)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


def consume_forever(args: argparse.Namespace) -> None:
    """The boards consumer alone, as a frontend runs it (backfill phase)."""
    from marketplace.leaderboards.boards import BoardsConsumer, ConsumerConfig

    consumer = BoardsConsumer(
        args.database_url, ConsumerConfig(poll_interval=0.1, standby_interval=1.0)
    )
    asyncio.run(consumer.run())


def start(name: str, mode: str, port: int, extra: list[str], log: Path) -> Server:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, __file__, mode, "--port", str(port), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Server(name, port, proc)


# --- read phase ---------------------------------------------------------------------------------


async def read_phase(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from marketplace.storage.migrations import migrate_dsn
    from marketplace_devstack.embedded.postgres import EmbeddedPostgres
    from marketplace_devstack.embedded.procs import free_port
    from marketplace_devstack.embedded.redis import EmbeddedRedis

    postgres, redis_server = EmbeddedPostgres(data_dir), EmbeddedRedis(data_dir)
    servers: list[Server] = []
    stop_ray: Callable[[], None] | None = None
    failed = True
    try:
        postgres.start()
        redis_server.start()
        await migrate_dsn(postgres.dsn)
        print(f"seeding {args.milestones} milestones ...", file=sys.stderr, flush=True)
        seeded = await seed(postgres.dsn, args.milestones, args.workers)
        print(f"seeded: {seeded}", file=sys.stderr, flush=True)
        ray_address, stop_ray = ray_head(data_dir)
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        common = ["--database-url", postgres.dsn]
        ours = [
            *common,
            "--redis-url",
            redis_server.url,
            "--ray-address",
            ray_address,
            "--data-dir",
            str(data_dir),
            "--log-level",
            args.log_level,
        ]
        for name, mode, extra in (
            ("ours", "serve-ours", ours),
            ("baseline", "serve-baseline", common),
        ):
            servers.append(start(name, mode, free_port(), extra, data_dir / f"{name}.log"))
        for server in servers:
            await wait_ready(server, "/v1/leaderboards?limit=1")
        scenarios = {
            "all, payout": "/v1/leaderboards?limit=100",
            "one category": "/v1/leaderboards?limit=100&categories=backend",
            "3 categories": "/v1/leaderboards?limit=100&categories=backend,data,docs",
        }
        results: list[dict[str, Any]] = []
        for round_index in range(args.rounds):
            for scenario, path in scenarios.items():
                order = servers if round_index % 2 == 0 else list(reversed(servers))
                for server in order:
                    count, errors, elapsed, latencies, cpu = await drive(
                        server.url,
                        lambda i, path=path: path,  # type: ignore[misc]
                        concurrency=args.concurrency,
                        duration=args.duration,
                        warmup=args.warmup,
                        headers={},
                        server_pid=server.proc.pid,
                    )
                    result = {
                        "server": server.name,
                        "scenario": scenario,
                        "round": round_index + 1,
                        "requests": count,
                        "errors": errors,
                        "req_per_s": round(count / elapsed, 1),
                        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
                        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
                        "server_cpu_us_per_req": round(cpu / max(count, 1) * 1e6, 1),
                    }
                    results.append(result)
                    print(
                        f"  round {round_index + 1} {scenario:<14} {server.name:<9} "
                        f"{result['req_per_s']:>8.1f} req/s  p99 {result['p99_ms']:>7.2f} ms  "
                        f"errors {errors}",
                        file=sys.stderr,
                        flush=True,
                    )
        failed = False
        return {"seed": seeded, "results": results, "summary": summarize_reads(results)}
    finally:
        for server in servers:
            stop_server(server)
            if failed:
                log = (data_dir / f"{server.name}.log").read_text(errors="replace")
                print(f"--- {server.name} log (tail) ---\n{log[-3000:]}", file=sys.stderr)
        if stop_ray is not None:
            stop_ray()
        redis_server.stop()
        postgres.stop()


def summarize_reads(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    summary = []
    for scenario in dict.fromkeys(r["scenario"] for r in results):
        row: dict[str, Any] = {"scenario": scenario}
        for server in ("ours", "baseline"):
            runs = [r for r in results if r["scenario"] == scenario and r["server"] == server]
            row[server] = {
                "req_per_s": round(statistics.median(r["req_per_s"] for r in runs), 1),
                "p50_ms": round(statistics.median(r["p50_ms"] for r in runs), 2),
                "p99_ms": round(statistics.median(r["p99_ms"] for r in runs), 2),
                "errors": sum(r["errors"] for r in runs),
            }
        summary.append(row)
    return summary


# --- backfill phase -----------------------------------------------------------------------------


async def caught_up(dsn: str, within: float) -> float | None:
    """Seconds until the boards consumer has applied the last consumed event (None: not in
    ``within``)."""
    from marketplace.leaderboards.boards import CONSUMED_TYPES
    from marketplace.storage.repositories import events as events_repo

    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        # Cursors are positions (docs/events.md): position what committed, then take the newest.
        await events_repo.position_committed(conn, wait=True)
        last = await conn.fetchval(
            "SELECT coalesce(max(position), 0) FROM events WHERE type = any($1::text[])",
            list(CONSUMED_TYPES),
        )
        while time.perf_counter() - started < within:
            cursor = await conn.fetchval(
                "SELECT coalesce(max(last_event_id), 0) FROM leaderboard_consumer_cursor"
            )
            if cursor >= last:
                return time.perf_counter() - started
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    return None


def start_consumer(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, __file__, "consume", "--database-url", dsn],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def backfill_round(
    config: Any, dsn: str, redis_url: str, data_dir: Path, with_boards: bool
) -> dict[str, Any]:
    await indexer_backfill.reset_database(dsn)
    consumer: subprocess.Popen[bytes] | None = None
    if with_boards:
        consumer = start_consumer(dsn, data_dir / "consumer.log")
        await asyncio.sleep(2.0)  # imported and holding the consumer lock
    original = indexer_backfill.reset_database

    async def keep(_: str) -> None:  # emptied above, before the consumer started
        return None

    indexer_backfill.reset_database = keep  # type: ignore[assignment]
    try:
        result = await indexer_backfill.indexer_round(config, dsn, redis_url)
        if consumer is not None:
            result["boards_current_after_seconds"] = await caught_up(dsn, 300)
            conn = await asyncpg.connect(dsn)
            try:
                result["entries"] = await conn.fetchval("SELECT count(*) FROM leaderboard_entries")
            finally:
                await conn.close()
    finally:
        indexer_backfill.reset_database = original
        if consumer is not None:
            consumer.terminate()
            consumer.wait(timeout=30)
    return result


def backfill_phase(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from web3 import Web3

    from marketplace.indexer.engine import IndexerConfig
    from marketplace.storage.migrations import migrate_dsn
    from marketplace_devstack.devnet.anvil import AnvilProcess
    from marketplace_devstack.devnet.client import DevnetClient
    from marketplace_devstack.devnet.deploy import deploy_dev_defaults
    from marketplace_devstack.devnet.seed import Seeder
    from marketplace_devstack.embedded.postgres import EmbeddedPostgres
    from marketplace_devstack.embedded.redis import EmbeddedRedis

    base = data_dir / "backfill"
    base.mkdir()
    postgres, redis_server = EmbeddedPostgres(base), EmbeddedRedis(base)
    anvil = AnvilProcess(base / "anvil", silent=True)
    try:
        dsn = postgres.start()
        asyncio.run(migrate_dsn(dsn))
        redis_url = redis_server.start()
        url = anvil.start()
        w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 60}))
        deployment = deploy_dev_defaults(w3)
        print(f"seeding {args.backfill_projects} projects ...", file=sys.stderr, flush=True)
        with DevnetClient(url, deployment) as client:
            seeded = Seeder(client, rng_seed=1).run(args.backfill_projects, 5)
        config = IndexerConfig(
            chain_id=deployment.chain_id,
            rpc_url=url,
            registry_address=deployment.registry,
            start_block=deployment.start_block,
        )

        async def rounds() -> dict[str, list[dict[str, Any]]]:
            samples: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
            await backfill_round(config, dsn, redis_url, base, False)  # warm-up
            for i in range(args.backfill_rounds):
                order = (False, True) if i % 2 == 0 else (True, False)
                for with_boards in order:
                    print(
                        f"  backfill round {i + 1} {'with' if with_boards else 'without'} boards",
                        file=sys.stderr,
                        flush=True,
                    )
                    sample = await backfill_round(config, dsn, redis_url, base, with_boards)
                    samples["with" if with_boards else "without"].append(sample)
            return samples

        samples = asyncio.run(rounds())
    finally:
        anvil.stop()
        redis_server.stop()
        postgres.stop()
    without = statistics.median(s["seconds"] for s in samples["without"])
    with_boards = statistics.median(s["seconds"] for s in samples["with"])
    current = [s.get("boards_current_after_seconds") for s in samples["with"]]
    return {
        "projects": args.backfill_projects,
        "seed": seeded.to_dict(include_projects=False),
        "events": samples["without"][0]["events"],
        "without_seconds": round(without, 3),
        "with_seconds": round(with_boards, 3),
        "ratio": round(with_boards / without, 3),
        "boards_current_after_backfill_seconds": [
            None if c is None else round(c, 3) for c in current
        ],
        "entries": samples["with"][0].get("entries"),
        "samples": {k: [{"seconds": s["seconds"]} for s in v] for k, v in samples.items()},
    }


# --- report -------------------------------------------------------------------------------------


def print_table(report: dict[str, Any]) -> None:
    read = report.get("read")
    if read:
        seed = read["seed"]
        print(
            f"\nGET /v1/leaderboards?limit=100: {seed['milestones']} completed milestones over "
            f"{seed['workers']} workers, 9 categories; {seed['standings']} standings; "
            f"c={report['concurrency']}, {report['rounds']} rounds x {report['duration']} s "
            f"(median); rebuild {seed['rebuild_seconds']} s"
        )
        header = (
            f"{'scenario':<16}{'ours req/s':>12}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'base req/s':>12}{'p50 ms':>9}{'p99 ms':>9}"
        )
        print(header)
        print("-" * len(header))
        for row in read["summary"]:
            ours, base = row["ours"], row["baseline"]
            print(
                f"{row['scenario']:<16}{ours['req_per_s']:>12.1f}{ours['p50_ms']:>9.2f}"
                f"{ours['p99_ms']:>9.2f}{base['req_per_s']:>12.1f}{base['p50_ms']:>9.2f}"
                f"{base['p99_ms']:>9.2f}"
            )
        first = read["summary"][0]["ours"]["p99_ms"]
        verdict = "met" if first < P99_TARGET_MS else "MISSED"
        print(f"target: p99 < {P99_TARGET_MS:.0f} ms (all, payout): {verdict} ({first:.2f} ms)")
    backfill = report.get("backfill")
    if backfill:
        print(
            f"\nindexer backfill, {backfill['projects']} seeded projects "
            f"({backfill['events']} events), median of {report['backfill_rounds']} rounds:"
        )
        print(f"  without boards consumer  {backfill['without_seconds']:>8.3f} s")
        print(f"  with boards consumer     {backfill['with_seconds']:>8.3f} s")
        verdict = "met" if backfill["ratio"] <= BACKFILL_TARGET else "MISSED"
        print(
            f"  slowdown {100 * (backfill['ratio'] - 1):+.1f} % (target < "
            f"{100 * (BACKFILL_TARGET - 1):.0f} %): {verdict}; boards current "
            f"{backfill['boards_current_after_backfill_seconds']} s after the backfill"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "mode",
        nargs="?",
        default="run",
        choices=["run", "serve-ours", "serve-baseline", "consume"],
    )
    parser.add_argument("--milestones", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backfill-projects", type=int, default=300)
    parser.add_argument("--backfill-rounds", type=int, default=3)
    parser.add_argument("--skip-read", action="store_true")
    parser.add_argument("--skip-backfill", action="store_true")
    parser.add_argument("--log-level", default="WARNING")
    # for the server modes
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--ray-address", default="")
    parser.add_argument("--data-dir", default="")
    add_output_option(parser, RESULTS)
    args = parser.parse_args()
    if args.mode == "serve-ours":
        return serve_ours(args)
    if args.mode == "serve-baseline":
        return serve_baseline(args)
    if args.mode == "consume":
        return consume_forever(args)

    os.environ.setdefault("MARKETPLACE_LOG_JSON", "false")
    data_dir = Path(tempfile.mkdtemp(prefix="mkt-bench-boards-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    report: dict[str, Any] = {
        "benchmark": "leaderboards",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "concurrency": args.concurrency,
        "duration": args.duration,
        "rounds": args.rounds,
        "backfill_rounds": args.backfill_rounds,
        "p99_target_ms": P99_TARGET_MS,
        "backfill_target_ratio": BACKFILL_TARGET,
    }
    try:
        if not args.skip_read:
            report["read"] = asyncio.run(read_phase(args, data_dir))
        if not args.skip_backfill:
            report["backfill"] = backfill_phase(args, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print_table(report)
    write_report(args.output, report)


if __name__ == "__main__":
    main()
