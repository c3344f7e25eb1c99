"""Cost of the events' commit order: commit throughput of concurrent producing transactions.

Usage: ``.venv/bin/python bench/events_lock.py [--seconds 3] [--concurrency 1,4,16,64]
[--sync on,off] [--rounds 1] [--output [path]]`` (see bench/README.md).

Until issue 28 every producing transaction wrote its events under ``pg_advisory_xact_lock``, so
producers serialised from their events to their commit (0.25x-0.45x of the same commits without
events at 16-64 producers with durable commits). Producers now insert without a lock and a
positioner orders committed events afterwards (``marketplace/storage/repositories/events.py``).
Each transaction inserts one row into a scratch table (the "change") and then, by mode:

- ``change-only``: nothing more (the floor, and what the others are compared with);
- ``unordered``: one plain ``INSERT INTO events`` (an outbox without any order);
- ``production``: ``events.append``, the repository function every producer calls;
- ``lock``: the statement ``events.append`` ran before issue 28 (``pg_advisory_xact_lock``, a
  NOTIFY, the insert; ``LOCKED_APPEND`` below), for the old figure in the same run.

A positioner runs meanwhile as the active relay would (``events.position_committed`` in a loop
on a connection of its own, no Redis), so ``production`` pays for its positioning too.

``--concurrency`` producers (one connection each) commit as fast as they can for ``--seconds``
per run; ``--sync`` runs everything with ``synchronous_commit`` on (durable, the default: each
commit waits for its WAL flush) and/or off. Everything is local: a scratch embedded PostgreSQL,
migrated, in a temporary directory removed afterwards. Prints a table (commits/s, p50/p99
transaction latency, throughput relative to ``change-only``); writes JSON only with ``--output``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402

from bench.report import add_output_option, write_report  # noqa: E402
from marketplace.events.types import NewEvent, ProjectChangedPayload  # noqa: E402
from marketplace.storage.migrations import migrate_dsn  # noqa: E402
from marketplace.storage.repositories import events as repo  # noqa: E402
from marketplace_devstack.embedded.postgres import EmbeddedPostgres  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "events_lock.json"
MODES = ("change-only", "unordered", "production", "lock")
SCRATCH = """
CREATE TABLE IF NOT EXISTS bench_changes (
    id bigserial PRIMARY KEY, worker int NOT NULL, n int NOT NULL, note text NOT NULL
)
"""
CHANGE = "INSERT INTO bench_changes (worker, n, note) VALUES ($1, $2, $3)"
UNORDERED = "INSERT INTO events (type, subject, payload) VALUES ($1, $2, $3::jsonb)"
# events.APPEND before issue 28: every producer serialised on the lock until its commit.
LOCKED_APPEND = """
WITH ordered AS MATERIALIZED (
    SELECT pg_advisory_xact_lock($1) AS locked, pg_notify($2, '') AS woken
)
INSERT INTO events (type, subject, payload)
SELECT e.type, e.subject, e.payload::jsonb
FROM ordered
CROSS JOIN unnest($3::text[], $4::text[], $5::text[])
    WITH ORDINALITY AS e(type, subject, payload, n)
ORDER BY e.n
RETURNING id
"""
SUBJECT = "0x" + "ab" * 20


def event(n: int) -> NewEvent:
    return NewEvent(SUBJECT, ProjectChangedPayload(block=n, changes={"status": "x"}, milestones=[]))


async def transaction(conn: asyncpg.Connection, mode: str, worker: int, n: int) -> None:
    async with conn.transaction():
        await conn.execute(CHANGE, worker, n, "change")
        if mode == "unordered":
            e = event(n)
            await conn.execute(UNORDERED, str(e.type), e.subject, e.payload_json())
        elif mode == "production":
            await repo.append(conn, [event(n)])
        elif mode == "lock":
            e = event(n)
            await conn.fetch(
                LOCKED_APPEND,
                repo.POSITION_LOCK_KEY,
                repo.WAKE_CHANNEL,
                [str(e.type)],
                [e.subject],
                [e.payload_json()],
            )


async def positioner(dsn: str, stop: asyncio.Event) -> int:
    """The active relay's positioning, without Redis: how many events it positioned."""
    conn = await asyncpg.connect(dsn)
    positioned = 0
    try:
        while not stop.is_set():
            count = await repo.position_committed(conn)
            positioned += max(count, 0)
            if count <= 0:
                await asyncio.sleep(0.01)  # as the relay between rounds (batch_interval)
    finally:
        await conn.close()
    return positioned


async def run(dsn: str, mode: str, concurrency: int, sync: str, seconds: float) -> dict[str, Any]:
    pool = await asyncpg.create_pool(
        dsn,
        min_size=concurrency,
        max_size=concurrency,
        server_settings={"synchronous_commit": sync},
    )
    assert pool is not None
    await pool.execute("TRUNCATE bench_changes, events, event_positions RESTART IDENTITY")
    latencies: list[float] = []
    stop_at = 0.0

    async def produce(worker: int) -> None:
        async with pool.acquire() as conn:
            n = 0
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                await transaction(conn, mode, worker, n)  # type: ignore[arg-type]
                latencies.append(time.perf_counter() - started)
                n += 1

    stop = asyncio.Event()
    positioning = asyncio.create_task(positioner(dsn, stop))
    # Warm-up (prepared statements, connections), then the measured run.
    stop_at = time.perf_counter() + 0.5
    await asyncio.gather(*(produce(w) for w in range(concurrency)))
    latencies.clear()
    started = time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(*(produce(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    stop.set()
    await positioning
    events = await pool.fetchval("SELECT count(*) FROM events")
    unpositioned = await pool.fetchval("SELECT count(*) FROM events WHERE position IS NULL")
    await pool.close()
    ordered = sorted(latencies)
    return {
        "mode": mode,
        "concurrency": concurrency,
        "synchronous_commit": sync,
        "commits": len(ordered),
        "events": events,
        "unpositioned_at_end": unpositioned,
        "commits_per_s": len(ordered) / elapsed,
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = sorted({(r["synchronous_commit"], r["concurrency"], r["mode"]) for r in runs})
    rows = []
    for sync, concurrency, mode in keys:
        same = [
            r
            for r in runs
            if (r["synchronous_commit"], r["concurrency"], r["mode"]) == (sync, concurrency, mode)
        ]
        rows.append(
            {
                "synchronous_commit": sync,
                "concurrency": concurrency,
                "mode": mode,
                "commits_per_s": statistics.median(r["commits_per_s"] for r in same),
                "p50_ms": statistics.median(r["p50_ms"] for r in same),
                "p99_ms": statistics.median(r["p99_ms"] for r in same),
            }
        )
    for row in rows:
        base = next(
            r
            for r in rows
            if r["mode"] == "change-only"
            and (r["synchronous_commit"], r["concurrency"])
            == (row["synchronous_commit"], row["concurrency"])
        )
        row["vs_change_only"] = row["commits_per_s"] / base["commits_per_s"]
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'sync commit':<12}{'producers':>10}  {'mode':<14}{'commits/s':>11}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'vs change-only':>16}"
    )
    for r in rows:
        print(
            f"{r['synchronous_commit']:<12}{r['concurrency']:>10}  {r['mode']:<14}"
            f"{r['commits_per_s']:>11.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
            f"{r['vs_change_only']:>15.2f}x"
        )


async def bench(args: argparse.Namespace, dsn: str) -> list[dict[str, Any]]:
    await migrate_dsn(dsn)
    conn = await asyncpg.connect(dsn)
    await conn.execute(SCRATCH)
    await conn.close()
    runs = []
    for round_ in range(args.rounds):
        for sync in args.sync:
            for concurrency in args.concurrency:
                # Alternate the order between rounds so drift does not favour one mode.
                modes = MODES if round_ % 2 == 0 else tuple(reversed(MODES))
                for mode in modes:
                    result = await run(dsn, mode, concurrency, sync, args.seconds)
                    result["round"] = round_
                    runs.append(result)
                    print(
                        f"round {round_} sync={sync} c={concurrency:<3} {mode:<14}"
                        f" {result['commits_per_s']:8.0f} commits/s",
                        flush=True,
                    )
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured, per run")
    parser.add_argument("--concurrency", default="1,4,16,64", help="producers, comma-separated")
    parser.add_argument("--sync", default="on,off", help="synchronous_commit values")
    parser.add_argument("--rounds", type=int, default=1)
    add_output_option(parser, RESULTS)
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.sync = [s for s in args.sync.split(",") if s]

    data_dir = Path(tempfile.mkdtemp(prefix="mkt-bench-events-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    postgres = EmbeddedPostgres(data_dir)
    try:
        postgres.start()
        runs = asyncio.run(bench(args, postgres.dsn))
    finally:
        postgres.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    rows = summarise(runs)
    print_table(rows)
    report = {
        "benchmark": "events_lock",
        "settings": {
            "seconds": args.seconds,
            "concurrency": args.concurrency,
            "synchronous_commit": args.sync,
            "rounds": args.rounds,
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "summary": rows,
        "runs": runs,
    }
    write_report(args.output, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
