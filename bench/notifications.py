"""Notification e-mails: N direct messages through the real pipeline to a local SMTP server,
against the same number of bare ``aiosmtplib`` sends from one process.

Usage: ``.venv/bin/python bench/notifications.py [--events 5000] [--rate 300]`` (see
bench/README.md, "Notifications"). Everything is local and loopback-only, in a temporary
directory removed afterwards:

1. a scratch embedded PostgreSQL and Redis, migrated; users seeded straight into ``users`` with a
   verified e-mail: senders, and for each measured phase ``ceil(events / 5)`` recipients of five
   DMs each, so with the default limit (``MARKETPLACE_NOTIFICATION_RATE_LIMIT`` = ``5/3600`` per
   recipient and event type) every delivery may be sent and none is ``rate_limited``;
2. the embedded SMTP server (``python -m marketplace_devstack.embedded.smtp``: aiosmtpd writing
   every message as an ``.eml`` file) as a process of its own;
3. ``ours``: the real app (``create_app``, as ``marketplace serve`` runs it) in a server process
   with its private Ray runtime: the notifications consumer (outbox -> delivery rows + jobs), the
   rate-limiter actor, and the ``notifications`` job workers (Ray actors, the default count and
   concurrency) sending with the default sender (``smtp_sender``) to that SMTP server;
4. DMs written by this process straight into the outbox with the app's repository function
   (``messages.insert_direct``: the thread, the message and its ``dm.message`` event, one
   transaction per batch), in two phases with their own recipients:
   ``burst``: all ``events`` as fast as four connections write them (deliveries per second: from
   the first event's ``created_at`` to the last ``sent_at``);
   ``paced``: ``paced-events`` (default: ``events``) at ``rate`` per second, by default the
   target throughput of 300/s (the event -> ``sent`` latency at that throughput);
   for each delivery the time from its event's ``created_at`` to its ``sent_at`` (both from the
   database clock);
5. ``baseline``: the same number of messages composed the same way (``smtp_sender.wire_for``,
   as the sender composes them: the same subjects, preview and unsubscribe link) and sent with
   bare ``aiosmtplib.send`` (one connection per message; the sender pools its connections) from
   this process with
   ``baseline-concurrency`` sends in flight (default: as many as the app's workers run at
   once). Its latency is from the start of the run to each send's end (a burst, like ``burst``).

For each run it records the CPU time each process group spent per delivery (the server, its Ray
workers and actors, PostgreSQL, Redis, the SMTP server, this process), from /proc. Results are
printed as a table and, with --output, written to bench/results/notifications.json.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402

from bench.messaging import (  # noqa: E402
    CpuMeter,
    Server,
    load_average,
    percentile,
    process_tree,
    start_server,
    stop_server,
    wait_ready,
)
from bench.report import add_output_option, write_report  # noqa: E402

if TYPE_CHECKING:
    from marketplace.storage.pool import Connection

RESULTS = ROOT / "bench" / "results" / "notifications.json"
JWT_SECRET = "bench-secret-" + "n" * 32
UNSUBSCRIBE_SECRET = "bench-unsubscribe-" + "u" * 32
PER_RECIPIENT = 5  # DMs per recipient: the default limit's burst, so none is rate_limited
SENDERS = 100
PRODUCERS = 4  # connections writing the burst
BATCH = 50  # DMs per producing transaction
WARMUP_EVENTS = 20
BODY = "Hi! Are you still available for the milestone we discussed? I can share the specs today."
FINAL = ("sent", "failed", "rate_limited", "suppressed")


# --- the world --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dm:
    sender: uuid.UUID
    recipient: uuid.UUID


def plan_dms(senders: list[uuid.UUID], recipients: list[uuid.UUID], count: int) -> list[Dm]:
    """``count`` DMs, ``PER_RECIPIENT`` to each recipient, interleaved over the recipients (each
    from a different sender, so every DM is in its own pair's thread)."""
    return [
        Dm(senders[(i // len(recipients) + i) % len(senders)], recipients[i % len(recipients)])
        for i in range(count)
    ]


async def seed_users(conn: Connection, count: int, kind: str) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(count)]
    await conn.executemany(
        "INSERT INTO users (user_id, email_verified, email) VALUES ($1, true, $2)",
        [(user_id, f"{kind}-{user_id.hex[:12]}@example.test") for user_id in ids],
    )
    return ids


async def write_dms(conn: Connection, dms: list[Dm]) -> None:
    """The DMs and their ``dm.message`` events in one transaction, with the app's SQL."""
    from marketplace.storage.repositories import messages as messages_repo

    async with conn.transaction():
        for dm in dms:
            low, high = sorted((dm.sender, dm.recipient))
            await messages_repo.insert_direct(
                conn,
                user_low=low,
                user_high=high,
                sender_user_id=dm.sender,
                recipient_user_id=dm.recipient,
                body=BODY,
            )


async def produce_burst(pool: asyncpg.Pool, dms: list[Dm]) -> None:
    """All of ``dms`` as fast as ``PRODUCERS`` connections write them (each recipient's DMs on
    one connection, so no two transactions upsert the same thread)."""
    slices: list[list[Dm]] = [[] for _ in range(PRODUCERS)]
    for dm in dms:
        slices[hash(dm.recipient) % PRODUCERS].append(dm)

    async def producer(part: list[Dm]) -> None:
        async with pool.acquire() as conn:
            for start in range(0, len(part), BATCH):
                await write_dms(conn, part[start : start + BATCH])

    await asyncio.gather(*(producer(part) for part in slices))


async def produce_paced(pool: asyncpg.Pool, dms: list[Dm], rate: float) -> None:
    """``dms`` at ``rate`` per second: every 50 ms the ones due by then, in one transaction."""
    tick = 0.05
    started = time.monotonic()
    written = 0
    async with pool.acquire() as conn:
        while written < len(dms):
            due = min(len(dms), math.floor((time.monotonic() - started) * rate) + 1)
            if due > written:
                await write_dms(conn, dms[written:due])
                written = due
            await asyncio.sleep(max(0.0, started + written / rate - time.monotonic(), tick / 5))


async def last_event_id(conn: Connection) -> int:
    """The newest event position (what consumers and deliveries call an event's id), once every
    event committed before the call has one (docs/events.md)."""
    from marketplace.storage.repositories import events as events_repo

    return await events_repo.last_id(conn)


async def wait_final(conn: Connection, after: int, upto: int, within: float) -> int:
    """Wait until every delivery of the events in ``(after, upto]`` is final; how many are."""
    # Positions are not contiguous (they jump where commits came out of insertion order).
    expected = int(
        await conn.fetchval(
            "SELECT count(*) FROM events WHERE position > $1 AND position <= $2", after, upto
        )
    )
    deadline = time.monotonic() + within
    while True:
        done = int(
            await conn.fetchval(
                "SELECT count(*) FROM notification_deliveries"
                " WHERE event_id > $1 AND event_id <= $2 AND status = any($3::text[])",
                after,
                upto,
                list(FINAL),
            )
        )
        if done >= expected or time.monotonic() > deadline:
            return done
        await asyncio.sleep(0.1)


DELIVERIES = """
SELECT d.status, d.reason, d.last_error, d.attempts,
       extract(epoch FROM e.created_at)::float8 AS created,
       extract(epoch FROM d.sent_at)::float8 AS sent
FROM events e LEFT JOIN notification_deliveries d ON d.event_id = e.position
WHERE e.position > $1 AND e.position <= $2
"""


# --- the server -------------------------------------------------------------------------------


def serve_ours(args: argparse.Namespace) -> None:
    from aiohttp import web
    from pydantic import SecretStr

    from marketplace.config import Settings
    from marketplace.http.app import create_app
    from marketplace.logs import configure_logging

    settings = Settings(
        data_dir=Path(args.data_dir),
        database_url=args.database_url,
        redis_url=args.redis_url,
        # Empty: the app starts its own private Ray runtime, which ends with the process.
        ray_address="",
        ray_namespace="marketplace-bench-notifications",
        jwt_secret=SecretStr(JWT_SECRET),
        notification_unsubscribe_secret=SecretStr(UNSUBSCRIBE_SECRET),
        smtp_url=SecretStr(args.smtp_url),
        notification_pipeline_enabled=True,
        jobs_enabled=True,
        rate_limit_enabled=False,
        log_level=args.log_level,
    )
    configure_logging(settings.log_level, settings.log_json)
    web.run_app(create_app(settings), host="127.0.0.1", port=args.port, print=None, access_log=None)


def start_ours(port: int, extra: list[str], log: Path) -> Server:
    return start_server("ours", "serve-ours", port, extra, log, script=__file__)


# --- the baseline -----------------------------------------------------------------------------


async def baseline(
    settings: Any, smtp_port: int, recipients: list[tuple[uuid.UUID, str]], concurrency: int
) -> tuple[list[float], int, float]:
    """Compose and send one message per recipient with bare ``aiosmtplib.send`` (one connection
    per message), ``concurrency`` in flight; (latency of each send from the start, errors, wall
    seconds)."""
    import aiosmtplib

    from marketplace.notifications.models import NotificationEventType
    from marketplace.notifications.recipients import thread_link
    from marketplace.notifications.sending import DeliveryToSend
    from marketplace.notifications.smtp_sender import wire_for

    latencies: list[float] = []
    errors = 0
    queue = iter(enumerate(recipients))
    started = time.perf_counter()

    async def one(n: int, user_id: uuid.UUID, email: str) -> None:
        nonlocal errors
        delivery = DeliveryToSend(
            id=uuid.uuid4(),
            event_id=n,
            event_type=NotificationEventType.DIRECT_MESSAGE,
            recipient_user_id=user_id,
            email=email,
            subject="New direct message from a marketplace user",
            link_path=thread_link(str(uuid.uuid4())),
            preview=BODY,
            attempt=1,
        )
        message = wire_for(settings, delivery)
        try:
            await aiosmtplib.send(
                message.data,
                sender=message.sender,
                recipients=message.recipients,
                hostname="127.0.0.1",
                port=smtp_port,
            )
        except Exception:
            errors += 1
            return
        latencies.append(time.perf_counter() - started)

    async def lane() -> None:
        for n, (user_id, email) in queue:
            await one(n, user_id, email)

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return latencies, errors, time.perf_counter() - started


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    events: int
    delivered: int
    statuses: dict[str, int]
    errors: list[str]
    deliveries_per_s: float
    latency_ms: dict[str, float]
    cpu_ms_per_delivery: dict[str, float]
    produce_s: float | None = None
    producer_rate: float | None = None


def latency_summary(seconds: list[float]) -> dict[str, float]:
    return {
        name: round(percentile(seconds, q) * 1000, 1)
        for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
    }


def cpu_per(spent: dict[str, float], delivered: int) -> dict[str, float]:
    return {name: round(s / max(1, delivered) * 1000, 3) for name, s in spent.items()}


async def run_phase(
    name: str,
    pool: asyncpg.Pool,
    dms: list[Dm],
    rate: float | None,
    groups: dict[str, Callable[[], list[int]]],
    within: float,
) -> Phase:
    async with pool.acquire() as conn:
        after = await last_event_id(conn)
    meter = CpuMeter(groups)
    meter.start()
    began = time.perf_counter()
    if rate:
        await produce_paced(pool, dms, rate)
    else:
        await produce_burst(pool, dms)
    produce_s = time.perf_counter() - began
    async with pool.acquire() as conn:
        upto = await last_event_id(conn)
        done = await wait_final(conn, after, upto, within)
        spent = meter.stop()
        rows = await conn.fetch(DELIVERIES, after, upto)
    statuses: dict[str, int] = {}
    errors: list[str] = []
    for row in rows:
        status = row["status"] or "no delivery row"
        statuses[status] = statuses.get(status, 0) + 1
        if row["last_error"] and len(errors) < 5:
            errors.append(row["last_error"])
    sent = [row for row in rows if row["status"] == "sent"]
    latencies = [row["sent"] - row["created"] for row in sent]
    first = min((row["created"] for row in rows), default=0.0)
    last = max((row["sent"] for row in sent), default=first)
    print(
        f"{name}: {len(rows)} events, {done} final, {len(sent)} sent in {last - first:.1f} s"
        f" (written in {produce_s:.1f} s)",
        flush=True,
    )
    return Phase(
        name=name,
        events=len(rows),
        delivered=len(sent),
        statuses=statuses,
        errors=errors,
        deliveries_per_s=round(len(sent) / (last - first), 1) if last > first else 0.0,
        latency_ms=latency_summary(latencies),
        cpu_ms_per_delivery=cpu_per(spent, len(sent)),
        produce_s=round(produce_s, 2),
        producer_rate=rate,
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from pydantic import SecretStr

    from marketplace.config import Settings
    from marketplace.notifications.sending import NOTIFICATIONS_QUEUE
    from marketplace.storage.migrations import migrate_dsn
    from marketplace.storage.pool import create_pool
    from marketplace_devstack.embedded.postgres import EmbeddedPostgres
    from marketplace_devstack.embedded.procs import free_port
    from marketplace_devstack.embedded.redis import EmbeddedRedis
    from marketplace_devstack.embedded.smtp import EmbeddedSmtp

    paced_events = paced_count(args)
    data_dir = Path(tempfile.mkdtemp(prefix="mkt-bench-notify-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    postgres, redis_server = EmbeddedPostgres(data_dir), EmbeddedRedis(data_dir)
    smtp = EmbeddedSmtp(data_dir)
    server: Server | None = None
    pool: asyncpg.Pool | None = None
    failed = True
    try:
        postgres.start()
        redis_server.start()
        smtp.start()
        await migrate_dsn(postgres.dsn)
        recipients_per_phase = math.ceil(args.events / PER_RECIPIENT)
        conn = await asyncpg.connect(postgres.dsn)
        try:
            senders = await seed_users(conn, SENDERS, "sender")
            warm = await seed_users(conn, WARMUP_EVENTS, "warm")
            burst_to = await seed_users(conn, recipients_per_phase, "burst")
            paced_to = await seed_users(conn, math.ceil(paced_events / PER_RECIPIENT), "paced")
            base_to = await seed_users(conn, recipients_per_phase, "base")
            await conn.execute("VACUUM ANALYZE users")
        finally:
            await conn.close()
        print(
            f"seeded {SENDERS} senders and {recipients_per_phase} recipients per phase"
            f" ({PER_RECIPIENT} DMs each); SMTP server at {smtp.url}",
            flush=True,
        )

        server = start_ours(
            free_port(),
            [
                "--database-url",
                postgres.dsn,
                "--redis-url",
                redis_server.url,
                "--data-dir",
                str(data_dir),
                "--smtp-url",
                smtp.url,
                "--log-level",
                args.log_level,
            ],
            data_dir / "ours.log",
        )
        await wait_ready(server)
        pool = await create_pool(postgres.dsn, min_size=PRODUCERS + 1, max_size=PRODUCERS + 1)
        # Warm-up: the job workers and the limiter actor start with the app, asynchronously;
        # the first deliveries wait for them. Measured runs start once these are sent.
        warm_start = time.perf_counter()
        warm_phase = await run_phase(
            "warm-up", pool, plan_dms(senders, warm, WARMUP_EVENTS), None, {}, 120
        )
        if warm_phase.delivered != WARMUP_EVENTS:
            raise RuntimeError(f"warm-up: {warm_phase.statuses}, {warm_phase.errors}")
        print(f"pipeline warm after {time.perf_counter() - warm_start:.1f} s", flush=True)

        pg_pid, redis_pid, smtp_pid = postgres.pid, redis_server.pid, smtp.pid
        assert pg_pid is not None
        assert redis_pid is not None
        assert smtp_pid is not None
        ours_pid = server.proc.pid
        groups: dict[str, Callable[[], list[int]]] = {
            "server": lambda: [ours_pid],
            "ray (workers, limiter)": lambda: process_tree(ours_pid)[1:],
            "postgres": lambda: process_tree(pg_pid),
            "redis": lambda: [redis_pid],
            "smtp server": lambda: [smtp_pid],
            "bench process": lambda: [os.getpid()],
        }
        within = 120 + args.events / 20
        load_before = load_average()
        phases = [
            await run_phase(
                "ours burst", pool, plan_dms(senders, burst_to, args.events), None, groups, within
            )
        ]
        if paced_events:
            phases.append(
                await run_phase(
                    f"ours paced {args.rate:g}/s",
                    pool,
                    plan_dms(senders, paced_to, paced_events),
                    args.rate,
                    groups,
                    within,
                )
            )

        settings = Settings(
            notification_unsubscribe_secret=SecretStr(UNSUBSCRIBE_SECRET),
            jwt_secret=SecretStr(JWT_SECRET),
        )
        queue = NOTIFICATIONS_QUEUE
        concurrency = args.baseline_concurrency or (
            queue.worker_count(settings) * queue.effective_concurrency(settings)
        )
        async with pool.acquire() as db:
            emails = {
                row["user_id"]: row["email"]
                for row in await db.fetch(
                    "SELECT user_id, email FROM users WHERE user_id = any($1::uuid[])", base_to
                )
            }
        targets = [
            (dm.recipient, emails[dm.recipient]) for dm in plan_dms(senders, base_to, args.events)
        ]
        base_groups = {k: v for k, v in groups.items() if k in ("smtp server", "bench process")}
        meter = CpuMeter(base_groups)
        meter.start()
        latencies, errors, wall = await baseline(settings, smtp.port, targets, concurrency)
        spent = meter.stop()
        print(f"baseline: {len(latencies)} sent in {wall:.1f} s, {errors} errors", flush=True)
        phases.append(
            Phase(
                name=f"baseline aiosmtplib c={concurrency}",
                events=len(targets),
                delivered=len(latencies),
                statuses={"sent": len(latencies), "failed": errors},
                errors=[],
                deliveries_per_s=round(len(latencies) / wall, 1),
                latency_ms=latency_summary(latencies),
                cpu_ms_per_delivery=cpu_per(spent, len(latencies)),
            )
        )
        mail_files = sum(1 for _ in smtp.mail_dir.glob("*.eml"))
        failed = False
        return {
            "phases": [phase.__dict__ for phase in phases],
            "baseline_concurrency": concurrency,
            "eml_files_written": mail_files,
            "load_average_before": load_before,
            "load_average_after": load_average(),
        }
    finally:
        if pool is not None:
            await pool.close()
        if server is not None:
            stop_server(server)
            if failed:
                log = (data_dir / "ours.log").read_text(errors="replace").splitlines()
                print("\n".join(log[-40:]), file=sys.stderr)
        smtp.stop()
        redis_server.stop()
        postgres.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def paced_count(args: argparse.Namespace) -> int:
    return int(args.events if args.paced_events is None else args.paced_events)


def print_table(phases: list[dict[str, Any]]) -> None:
    print(
        "| run | events | sent | other statuses | deliveries/s | p50 ms | p95 ms | p99 ms"
        " | CPU ms/delivery by group |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---|")
    for p in phases:
        other = ", ".join(f"{k} {v}" for k, v in p["statuses"].items() if k != "sent" and v)
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in p["cpu_ms_per_delivery"].items())
        lat = p["latency_ms"]
        print(
            f"| {p['name']} | {p['events']} | {p['delivered']} | {other or '-'}"
            f" | {p['deliveries_per_s']} | {lat['p50']} | {lat['p95']} | {lat['p99']} | {cpu} |"
        )
    for p in phases:
        if p["errors"]:
            print(f"{p['name']} errors (first {len(p['errors'])}): {p['errors']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    serve = sub.add_parser("serve-ours")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--database-url", required=True)
    serve.add_argument("--redis-url", required=True)
    serve.add_argument("--smtp-url", required=True)
    serve.add_argument("--data-dir", default=".")
    serve.add_argument("--log-level", default="INFO")
    parser.add_argument("--events", type=int, default=5000, help="events per run")
    parser.add_argument(
        "--rate",
        type=float,
        default=300.0,
        help="events per second of the paced run (default: the 300/s target)",
    )
    parser.add_argument(
        "--paced-events",
        type=int,
        default=None,
        help="events of the paced run (default: --events; 0: none)",
    )
    parser.add_argument(
        "--baseline-concurrency",
        type=int,
        default=0,
        help="baseline sends in flight (default: the app's workers x the queue's concurrency)",
    )
    parser.add_argument("--log-level", default="INFO", help="the app's log level")
    add_output_option(parser, RESULTS)
    args = parser.parse_args()
    if args.mode == "serve-ours":
        serve_ours(args)
        return
    from marketplace.config import Settings

    outcome = asyncio.run(run(args))
    print()
    print_table(outcome["phases"])
    print(
        f"\nrate limit: the default ({Settings.model_fields['notification_rate_limit'].default},"
        f" per recipient and event type), {PER_RECIPIENT} DMs per recipient;"
        f" .eml files written: {outcome['eml_files_written']}"
    )
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "events": args.events,
            "paced_rate_per_s": args.rate,
            "paced_events": paced_count(args),
            "dms_per_recipient": PER_RECIPIENT,
            "senders": SENDERS,
            "producers": PRODUCERS,
            "batch": BATCH,
            "notification_rate_limit": Settings.model_fields["notification_rate_limit"].default,
            "app_log_level": args.log_level,
        },
        **outcome,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_report(args.output, report)


if __name__ == "__main__":
    main()
