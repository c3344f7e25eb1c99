"""Live event stream: commit -> delivery latency with many open streams on one frontend.

Usage: ``.venv/bin/python bench/stream_fanout.py [--streams 500] [--events 300] [--rate 50]
[--burst 100] [--output [path]]`` (see bench/README.md).

Everything is local (loopback, a temporary directory removed afterwards): an embedded PostgreSQL
and Redis, migrated; ``--streams / 2`` users, each with one linked wallet owning one indexed
project (inserted straight into the tables); one ``marketplace serve`` process (its own Ray
runtime, relay and stream hub); and this process holding ``--streams`` open ``GET /v1/stream``
connections (two per user) with one aiohttp session.

Scenarios, each committing ``project.changed`` events the way producers do (``events.append`` in
the change's transaction), for projects picked at random, so each event goes to its owner's two
streams:

- ``steady``: ``--events`` events, one transaction each, at ``--rate`` per second;
- ``burst``: ``--burst`` events in ONE transaction (an indexer batch touching many projects),
  twice: the first also pays for the server's pool opening connections for the audience
  queries that run side by side.

Latency of a delivery = the time this process has read the event's message minus the event's
``createdAt`` (its transaction's start, PostgreSQL's clock; same machine). So it includes the
producing transaction, the relay (woken by NOTIFY), Redis, the hub's audience query and fan-out,
the socket write, and this client's parsing, all on the same two cores. Prints a table; writes
JSON only with ``--output``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402

from bench.report import RESULTS_DIR, add_output_option, write_report  # noqa: E402
from marketplace.auth import issue_session_token  # noqa: E402
from marketplace.events.types import NewEvent, ProjectChangedPayload  # noqa: E402
from marketplace.storage.migrations import migrate_dsn  # noqa: E402
from marketplace.storage.repositories import events as events_repo  # noqa: E402
from marketplace_devstack.embedded.postgres import EmbeddedPostgres  # noqa: E402
from marketplace_devstack.embedded.redis import EmbeddedRedis  # noqa: E402

RESULTS = RESULTS_DIR / "stream_fanout.json"
SECRET = "bench-stream-secret-" + "z" * 24


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def address() -> str:
    return "0x" + os.urandom(20).hex()


async def seed(dsn: str, users: int) -> list[tuple[uuid.UUID, str]]:
    """``users`` users, each with one active wallet link owning one project."""
    rows = []
    conn = await asyncpg.connect(dsn)
    try:
        for n in range(users):
            user, wallet, project = uuid.uuid4(), address(), address()
            await conn.execute(
                "INSERT INTO users (user_id, email_verified) VALUES ($1, true)", user
            )
            await conn.execute(
                "INSERT INTO wallet_links (user_id, wallet_address, chain_id, verification_method)"
                " VALUES ($1, $2, 31337, 'eip191_sign_message')",
                user,
                wallet,
            )
            await conn.execute(
                "INSERT INTO projects (project_address, chain_id, owner_address, status,"
                " project_mode, bidding_access, config_hash, milestone_count, allowlist,"
                " created_block, created_log_index, created_at, updated_at, snapshot_block)"
                " VALUES ($1, 31337, $2, 'bidding', 'standard', 'open', $3, 1, '{}', $4, 0,"
                " now(), now(), $4)",
                project,
                wallet,
                "0x" + os.urandom(32).hex(),
                1000 + n,
            )
            rows.append((user, project))
    finally:
        await conn.close()
    return rows


def start_server(dsn: str, redis_url: str, port: int, data_dir: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "HOME": str(data_dir),
        "MARKETPLACE_DATABASE_URL": dsn,
        "MARKETPLACE_REDIS_URL": redis_url,
        "MARKETPLACE_JWT_SECRET": SECRET,
        # serve refuses to start without it (it signs unsubscribe links).
        "MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET": "bench-unsubscribe-" + "u" * 24,
        "MARKETPLACE_PORT": str(port),
        "MARKETPLACE_DATA_DIR": str(data_dir),
        "MARKETPLACE_INDEXER_ENABLED": "false",
        "MARKETPLACE_JOBS_ENABLED": "false",
        "MARKETPLACE_RATE_LIMIT_ENABLED": "false",
        "MARKETPLACE_PROJECT_SHARDS": "1",
        "MARKETPLACE_STREAM_QUEUE_SIZE": "1024",
        "MARKETPLACE_LOG_LEVEL": "WARNING",
        "MARKETPLACE_DB_POOL_MAX_SIZE": "10",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "marketplace", "serve", "--skip-migrations"],
        env=env,
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=open(data_dir / "server.log", "wb"),
        start_new_session=True,
    )


async def wait_ready(base: str, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{base}/v1/health") as resp:
                    if resp.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            await asyncio.sleep(0.3)


class Streams:
    """The open streams and every delivery they saw: (event id, latency seconds)."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[int, float]] = []
        self.opened = 0
        self.retries = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.ready = asyncio.Event()

    async def hold(
        self,
        http: aiohttp.ClientSession,
        url: str,
        token: str,
        total: int,
        opening: asyncio.Semaphore,
    ) -> None:
        # Clients arrive --opening at a time, and retry a 503 as a client would after Retry-After:
        # 500 connections opened in the same millisecond measure the machine's accept queue
        # and Redis's connection setup, not the stream.
        async with opening:
            for attempt in range(10):
                resp = await http.get(url, headers={"Authorization": f"Bearer {token}"})
                if resp.status == 200:
                    break
                self.retries += 1
                text = await resp.text()
                resp.release()
                if resp.status != 503 or attempt == 9:
                    raise RuntimeError(f"GET /v1/stream answered {resp.status}: {text}")
                await asyncio.sleep(int(resp.headers.get("Retry-After", "1")))
            await resp.content.readline()  # the position message's id line
        self.opened += 1
        if self.opened == total:
            self.ready.set()
        async with resp:
            async for raw in resp.content:
                if raw.startswith(b"data: "):
                    received = time.time()
                    data = json.loads(raw[6:])
                    created = datetime.fromisoformat(data["createdAt"]).timestamp()
                    self.deliveries.append((data["id"], received - created))


def change(project: str, n: int) -> NewEvent:
    return NewEvent(
        project,
        ProjectChangedPayload(block=n, changes={"status": "building", "n": n}, milestones=[]),
    )


async def scenario_steady(dsn: str, projects: list[str], events: int, rate: float) -> list[int]:
    conn = await asyncpg.connect(dsn)
    ids: list[int] = []
    try:
        start = time.monotonic()
        for n in range(events):
            async with conn.transaction():
                ids += await events_repo.append(conn, [change(random.choice(projects), n)])
            pause = start + (n + 1) / rate - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
    finally:
        await conn.close()
    return ids


async def scenario_burst(dsn: str, projects: list[str], count: int) -> list[int]:
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            return await events_repo.append(
                conn, [change(p, n) for n, p in enumerate(random.sample(projects, count))]
            )
    finally:
        await conn.close()


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    return {
        "deliveries": len(ordered),
        "p50_ms": round(pct(0.50), 2),
        "p95_ms": round(pct(0.95), 2),
        "p99_ms": round(pct(0.99), 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


async def run(args: argparse.Namespace, dsn: str, redis_url: str, data_dir: Path) -> dict[str, Any]:
    users = await seed(dsn, args.streams // 2)
    projects = [project for _, project in users]
    port = free_port()
    server = start_server(dsn, redis_url, port, data_dir)
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(base)
        streams = Streams()
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            now = int(time.time())
            opening = asyncio.Semaphore(args.opening)
            for user, _ in users:
                token = issue_session_token(
                    SECRET, user, email_verified=True, ttl_seconds=3600, now=now
                )
                for _ in range(2):
                    streams.tasks.append(
                        asyncio.create_task(
                            streams.hold(http, f"{base}/v1/stream", token, 2 * len(users), opening)
                        )
                    )
            async with asyncio.timeout(120):
                await streams.ready.wait()
            await asyncio.sleep(1)
            results: dict[str, Any] = {}
            for name, produce in (
                ("steady", lambda: scenario_steady(dsn, projects, args.events, args.rate)),
                ("burst", lambda: scenario_burst(dsn, projects, args.burst)),
                ("burst, again", lambda: scenario_burst(dsn, projects, args.burst)),
            ):
                streams.deliveries.clear()
                ids = await produce()
                expected = 2 * len(ids)
                deadline = time.monotonic() + 30
                while len(streams.deliveries) < expected and time.monotonic() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                wanted = set(ids)
                latencies = [lat for event_id, lat in streams.deliveries if event_id in wanted]
                results[name] = {
                    "events": len(ids),
                    "expected_deliveries": expected,
                    **summary(latencies),
                }
            for task in streams.tasks:
                task.cancel()
            await asyncio.gather(*streams.tasks, return_exceptions=True)
        return {
            "open_streams": 2 * len(users),
            "open_retries_after_503": streams.retries,
            "scenarios": results,
        }
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--opening", type=int, default=50, help="streams being opened at once")
    add_output_option(parser, RESULTS)
    args = parser.parse_args()
    args.burst = min(args.burst, args.streams // 2)

    data_dir = Path(tempfile.mkdtemp(prefix="mkt-bench-stream-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    postgres, redis_server = EmbeddedPostgres(data_dir), EmbeddedRedis(data_dir)
    postgres.start()
    try:
        redis_server.start()
        asyncio.run(migrate_dsn(postgres.dsn))
        result = asyncio.run(run(args, postgres.dsn, redis_server.url, data_dir))
    finally:
        redis_server.stop()
        postgres.stop()
        with contextlib.suppress(OSError):
            kept = Path(tempfile.gettempdir()) / "stream_fanout_server.log"
            shutil.copy(data_dir / "server.log", kept)
        shutil.rmtree(data_dir, ignore_errors=True)

    print(
        f"open streams: {result['open_streams']} (opens retried after a 503: "
        f"{result['open_retries_after_503']}; machine: {platform.node()}, "
        f"load average {os.getloadavg()[0]:.1f})"
    )
    print("| scenario | events | deliveries (expected) | p50 ms | p95 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in result["scenarios"].items():
        print(
            f"| {name} | {r['events']} | {r['deliveries']} ({r['expected_deliveries']}) | "
            f"{r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['max_ms']} |"
        )
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_report(args.output, {**result, "settings": settings, "load_average": os.getloadavg()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
