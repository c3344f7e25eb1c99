"""Project chat: send throughput against a bare aiohttp + asyncpg insert, and send -> live stream
delivery latency with hundreds of open streams.

Usage: ``.venv/bin/python bench/messaging.py [--duration 8] [--rounds 2] [--streams 500]``
(see bench/README.md, "Messaging"). Everything is local and loopback-only, in a temporary
directory removed afterwards:

1. a scratch embedded PostgreSQL and Redis, migrated, seeded straight into the tables: users
   (verified e-mail, the required legal documents accepted), one active wallet link each, and
   projects in ``building`` with an owner and a selected worker (10 % invite-only);
2. server processes, each started once and kept alive for the whole run:
   ``ours``: the real app (``create_app``) with its private Ray runtime (the project shard actors,
   ``MARKETPLACE_PROJECT_SHARDS`` of them) and the change-event relay;
   ``baseline``: a bare aiohttp app that parses the same JSON, INSERTs the same ``messages`` row
   and appends the same ``chat.message`` outbox event in one self-committing statement
   (``BASELINE_INSERT``, one message per statement, as producers write events), then answers
   the same JSON with 201 (no auth, no Ray hop, no checks, no term filter: the sender's user id
   comes from a header);
   ``baseline+checks``: the same plus, before the transaction, the send rules' queries as the
   shard runs them (``chat.authorize_send``: the caller's active wallets, the project through
   the read API's visibility predicate, the sender wallet being the owner or the selected
   worker);
3. throughput: for each round (servers alternate order), this process drives one server with
   ``concurrency`` connections for ``warmup`` + ``duration`` seconds; every send rotates over
   the projects and over the two parties (owner, worker), so every shard and many keys are hit;
4. delivery (``ours`` only): ``streams`` open ``GET /v1/stream`` connections held by this
   process (two per user, over the owners and workers of the projects), then sends at ``rate``
   per second for ``delivery-seconds``; for every message the time from the send's start (and
   from its 201) to the moment each stream of the project's owner and worker yields the
   ``chat.message`` event carrying its id.

For every measured run it also records the CPU time each process group spent per send (the
server, the app's shard actors and other Ray processes, PostgreSQL, Redis; from /proc), how many
PostgreSQL backends waited for the change events' order lock (sampled from pg_stat_activity),
and for ``ours`` the app's own latency histograms over the window (the send, the shard call, the
stream write), read from its /metrics.

Results are printed as tables and, with --output, written to bench/results/messaging.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from hashlib import md5
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
from aiohttp import web  # noqa: E402

from bench.report import add_output_option, write_report  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "messaging.json"
CHAIN_ID = 31337
JWT_SECRET = "bench-secret-" + "m" * 32
MAX_REQUESTS_PER_RUN = 500_000  # a hard bound on each measured loop besides its duration
# The baseline has no authentication: the sender's user id travels in this header.
BENCH_USER_HEADER = "x-bench-user-id"
WALLET_HEADER = "x-user-wallet-address"
CHAT_PATH = "/v1/projects/{}/chat/messages"
BODY = (
    "Pushed the milestone {n} build to the staging branch; the review checklist is in the "
    "delivery notes. Ping me if the integration tests need another run."
)

# --- the seeded world -------------------------------------------------------------------------


@dataclass(frozen=True)
class Party:
    user_id: uuid.UUID
    wallet: str
    token: str


@dataclass(frozen=True)
class Project:
    address: str
    owner: Party
    worker: Party
    invite_only: bool


def _hex_address(kind: str, n: int) -> str:
    return "0x" + md5(f"{kind}{n}".encode()).hexdigest()[:32] + f"{n:08x}"


def build_world(projects: int, users: int) -> tuple[list[Party], list[Project]]:
    """``users`` parties, half owners and half workers, and ``projects`` projects between them.

    Project i belongs to owner ``i mod O`` and has worker ``37 i mod W`` selected, so each owner
    and each worker is a party of about projects / (users / 2) projects, and each pair differs.
    """
    now = int(time.time())
    from marketplace.auth import issue_session_token

    def party(kind: str, n: int) -> Party:
        user_id = uuid.uuid5(uuid.NAMESPACE_URL, f"bench-messaging/{kind}/{n}")
        token = issue_session_token(
            JWT_SECRET, user_id, email_verified=True, ttl_seconds=6 * 3600, now=now
        )
        return Party(user_id, _hex_address(kind, n), token)

    half = max(1, users // 2)
    owners = [party("owner", n) for n in range(half)]
    workers = [party("worker", n) for n in range(half)]
    world = [
        Project(
            address=_hex_address("project", i),
            owner=owners[i % half],
            worker=workers[(37 * i) % half],
            invite_only=i % 10 == 9,
        )
        for i in range(projects)
    ]
    return owners + workers, world


SEED_PROJECTS = """
INSERT INTO projects (
    project_address, chain_id, owner_address, status, project_mode, bidding_access, config_hash,
    selected_builder_address, milestone_count, bid_bond_usdc, allowlist, created_block,
    created_log_index, created_at, updated_at, snapshot_block)
SELECT p.address, $5, p.owner, 'building', 'standard',
    CASE WHEN p.invite THEN 'invite_only' ELSE 'open' END,
    '0x' || md5('c' || p.address) || md5('d' || p.address),
    p.worker, 3, 100, '{}'::text[], 1000 + p.n, 0,
    now() - p.n * interval '1 minute', now(), 1000 + p.n
FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[])
    WITH ORDINALITY AS p(address, owner, worker, invite, n)
"""


async def seed(dsn: str, parties: list[Party], projects: list[Project]) -> None:
    from marketplace.identity.legal import load_catalog
    from marketplace.storage.repositories import legal as legal_repo

    required = load_catalog({}).required
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.executemany(
                "INSERT INTO users (user_id, email_verified) VALUES ($1, true)",
                [(p.user_id,) for p in parties],
            )
            await conn.executemany(
                "INSERT INTO wallet_links (user_id, wallet_address, chain_id, verification_method)"
                " VALUES ($1, $2, $3, 'eip191_sign_message')",
                [(p.user_id, p.wallet, CHAIN_ID) for p in parties],
            )
            # Users who accepted the documents at sign-up: the guard's legal check finds nothing
            # missing, as for every active user (the default mode, implicit, stays on).
            for p in parties:
                await legal_repo.record(
                    conn,
                    p.user_id,
                    required,
                    kind="explicit",
                    accepted_via="session",
                    api_key_id=None,
                    trigger_route=None,
                )
            await conn.execute(
                SEED_PROJECTS,
                [p.address for p in projects],
                [p.owner.wallet for p in projects],
                [p.worker.wallet for p in projects],
                [p.invite_only for p in projects],
                CHAIN_ID,
            )
        await conn.execute("VACUUM ANALYZE users, wallet_links, legal_acceptances, projects")
    finally:
        await conn.close()


# --- the servers ------------------------------------------------------------------------------


def serve_ours(args: argparse.Namespace) -> None:
    from pydantic import SecretStr

    from marketplace.config import Settings
    from marketplace.http.app import create_app
    from marketplace.logs import configure_logging

    overrides: dict[str, Any] = {}
    if args.shards:
        overrides["project_shards"] = args.shards
    settings = Settings(
        data_dir=Path(args.data_dir),
        database_url=args.database_url,
        redis_url=args.redis_url,
        # Empty: the app starts its own private Ray runtime, which ends with the process (no
        # stop command of the Ray CLI, which would end every Ray process on the machine).
        ray_address="",
        ray_namespace="marketplace-bench-messaging",
        jwt_secret=SecretStr(JWT_SECRET),
        notification_unsubscribe_secret=SecretStr("bench-unsubscribe-" + "u" * 32),
        rate_limit_enabled=False,
        log_level=args.log_level,
        **overrides,
    )
    configure_logging(settings.log_level, settings.log_json)
    from marketplace.http.server import serve

    # As `marketplace serve` runs it (the JSON-errors runner, the start-up heap frozen).
    asyncio.run(serve(create_app(settings), "127.0.0.1", args.port))


# The baseline's insert: a chat message and its event in one statement that commits by itself
# (outside a transaction), the event written as every producer writes it (no order lock since
# issue 28: the relay orders committed events; the shared "relay awake" key, or a NOTIFY when the
# relay sleeps). The app stores a shard's batch of sends in one transaction instead.
BASELINE_INSERT = """
WITH change AS (
    INSERT INTO messages (id, kind, project_address, sender_user_id, sender_wallet_address, body)
    VALUES ($1, 'project_chat', $2, $3, $4, $5)
    RETURNING {columns}
),
awake AS MATERIALIZED (
    SELECT CASE WHEN pg_try_advisory_xact_lock_shared($6) THEN true
                ELSE pg_notify($7, '') IS NULL END AS checked
    WHERE EXISTS (SELECT FROM change)
),
appended AS (
    INSERT INTO events (type, subject, payload)
    SELECT $8, $2, $9::text::jsonb FROM awake
    RETURNING id
)
SELECT * FROM change
"""


def serve_baseline(args: argparse.Namespace) -> None:
    """The floor: what storing one chat message costs without the app around it, at its
    cheapest: the app's ``messages`` row and its ``chat.message`` event (the app's payload model)
    in one self-committing statement (:data:`BASELINE_INSERT`), as producers write events; with
    ``--checks`` also the send rules' queries (``chat.authorize_send``: the caller's active
    wallets and the project through the visibility predicate in one query, owner or selected
    worker), on the same connection before the insert, as the shard runs them. No batching: one
    statement per request."""
    from marketplace.errors import MarketplaceError
    from marketplace.events.types import ChatMessagePayload, NewEvent
    from marketplace.messaging.chat import authorize_send
    from marketplace.storage import rows
    from marketplace.storage.pool import create_pool, fetch_one
    from marketplace.storage.repositories import events as events_repo
    from marketplace.storage.repositories import messages as messages_repo

    statement = BASELINE_INSERT.format(columns=messages_repo.COLUMNS)

    pool_key: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)
    checks = args.checks

    def refuse(status: int, code: str, message: str) -> web.Response:
        return web.json_response({"error": code, "message": message}, status=status)

    async def send(request: web.Request) -> web.Response:
        address = request.match_info["address"].lower()
        data = json.loads(await request.read())
        wallet = str(data["senderWalletAddress"]).lower()
        body = data["body"]
        if request.headers.get(WALLET_HEADER, "").lower() != wallet:
            return refuse(400, "invalid_request", "header and body disagree")
        user_id = uuid.UUID(request.headers[BENCH_USER_HEADER])
        async with request.app[pool_key].acquire() as conn:
            if checks:
                try:
                    await authorize_send(conn, user_id, address, wallet)
                except MarketplaceError as exc:
                    return refuse(exc.status, exc.code, exc.message)
            message_id = uuid.uuid4()
            event = NewEvent(
                address,
                ChatMessagePayload(
                    messageId=str(message_id),
                    projectAddress=address,
                    senderUserId=str(user_id),
                    senderWalletAddress=wallet,
                ),
            )
            record = await fetch_one(
                conn,
                statement,
                message_id,
                address,
                user_id,
                wallet,
                body,
                events_repo.RELAY_IDLE_KEY,
                events_repo.WAKE_CHANNEL,
                str(event.type),
                event.payload_json(),
            )
            row = rows.one(messages_repo.MessageRow, record)
        answer = {
            "id": str(row.id),
            "kind": row.kind,
            "projectAddress": row.project_address,
            "senderUserId": str(row.sender_user_id),
            "senderWalletAddress": row.sender_wallet_address,
            "body": row.body,
            "bodyStatus": row.body_status,
            "createdAt": row.created_at.isoformat(),
        }
        return web.Response(
            body=json.dumps(answer).encode(), status=201, content_type="application/json"
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def pool_ctx(app: web.Application) -> Any:
        app[pool_key] = await create_pool(args.database_url, min_size=2, max_size=20)
        yield
        await app[pool_key].close()

    app = web.Application()
    app.cleanup_ctx.append(pool_ctx)
    app.router.add_get("/v1/health", health)
    app.router.add_post("/v1/projects/{address}/chat/messages", send)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_server(
    name: str, mode: str, port: int, extra: list[str], log: Path, script: str = __file__
) -> Server:
    """``python <script> <mode> --port <port> <extra>`` (a benchmark serving itself), its output
    in ``log``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, script, mode, "--port", str(port), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            # Its own process group: stopping it also stops the Ray runtime it started.
            start_new_session=True,
        )
    return Server(name, port, proc)


async def wait_ready(server: Server, within: float = 120) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise RuntimeError(f"{server.name} exited with {server.proc.returncode}")
            try:
                async with session.get(server.url + "/v1/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{server.name} did not become ready")


def stop_server(server: Server) -> None:
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGINT)
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait()
    # Whatever is left of the group (Ray daemons that ignore SIGINT).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.proc.pid, signal.SIGKILL)


# --- CPU accounting ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant alive now (the app's Ray daemons and shard actors, the
    PostgreSQL backends)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def is_shard(pid: int) -> bool:
    """A shard actor's process (Ray sets the process title to ``ray::<class>``)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::ShardActor")
    except OSError:
        return False


class CpuMeter:
    """CPU seconds spent by named groups of processes between ``start`` and ``stop``; a process
    that appears or ends in between is left out (its share is small next to the long-lived
    ones)."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]]) -> None:
        self.groups = groups
        self.before: dict[str, dict[int, float]] = {}

    @staticmethod
    def _sample(pids: list[int]) -> dict[int, float]:
        sample = {}
        for pid in pids:
            try:
                sample[pid] = cpu_seconds(pid)
            except (OSError, IndexError):
                continue
        return sample

    def start(self) -> None:
        self.before = {name: self._sample(pids()) for name, pids in self.groups.items()}

    def stop(self) -> dict[str, float]:
        spent = {}
        for name, before in self.before.items():
            after = self._sample(list(before))
            spent[name] = sum(after[pid] - before[pid] for pid in after)
        return spent


# --- the app's own histograms -----------------------------------------------------------------

# (metric family, label filter): what the app measured itself, read from its /metrics
HISTOGRAMS: dict[str, tuple[str, dict[str, str]]] = {
    "send (server side)": (
        "marketplace_http_request_duration_seconds",
        {"method": "POST", "route": CHAT_PATH.format("{projectAddress}")},
    ),
    "shard call": ("marketplace_actor_call_duration_seconds", {"method": "execute"}),
    "stream write after createdAt": ("marketplace_stream_delivery_seconds", {}),
}


@dataclass
class Histogram:
    total: float = 0.0
    count: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative

    def minus(self, other: Histogram) -> Histogram:
        return Histogram(
            self.total - other.total,
            self.count - other.count,
            {le: n - other.buckets.get(le, 0.0) for le, n in self.buckets.items()},
        )

    def summary(self) -> dict[str, float | None]:
        """Mean and bucket-bound quantiles (the upper bound of the bucket reaching q), in ms."""

        def upper(q: float) -> float | None:
            for le in sorted(self.buckets):
                if self.buckets[le] >= q * self.count:
                    return None if le == float("inf") else round(le * 1000, 1)
            return None

        if self.count <= 0:
            return {"count": 0, "mean_ms": None, "p50_le_ms": None, "p99_le_ms": None}
        return {
            "count": int(self.count),
            "mean_ms": round(self.total / self.count * 1000, 2),
            "p50_le_ms": upper(0.5),
            "p99_le_ms": upper(0.99),
        }


async def app_histograms(server: Server) -> dict[str, Histogram]:
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as session, session.get(server.url + "/metrics") as resp:
        text = await resp.text()
    found = {name: Histogram() for name in HISTOGRAMS}
    for family in text_string_to_metric_families(text):
        for name, (metric, labels) in HISTOGRAMS.items():
            if family.name != metric:
                continue
            for sample in family.samples:
                if any(sample.labels.get(k) != v for k, v in labels.items()):
                    continue
                histogram = found[name]
                if sample.name.endswith("_sum"):
                    histogram.total += sample.value
                elif sample.name.endswith("_count"):
                    histogram.count += sample.value
                elif sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    histogram.buckets[le] = histogram.buckets.get(le, 0.0) + sample.value
    return found


def histogram_delta(
    after: dict[str, Histogram], before: dict[str, Histogram]
) -> dict[str, dict[str, float | None]]:
    return {name: after[name].minus(before[name]).summary() for name in after}


# --- throughput -------------------------------------------------------------------------------


@dataclass
class Send:
    project: Project
    path: str
    headers: dict[str, str]
    body: bytes


def sends_for(projects: list[Project]) -> list[Send]:
    """Every (project, party) pair once, interleaved so consecutive sends hit different projects
    (and so different shard keys) and alternate between owners and workers."""
    plan: list[Send] = []
    for side in (0, 1):
        for i, project in enumerate(projects):
            party = project.owner if (i + side) % 2 == 0 else project.worker
            body = json.dumps(
                {"senderWalletAddress": party.wallet, "body": BODY.format(n=i % 5 + 1)}
            ).encode()
            headers = {
                "Authorization": f"Bearer {party.token}",
                WALLET_HEADER: party.wallet,
                BENCH_USER_HEADER: str(party.user_id),
                "Content-Type": "application/json",
            }
            plan.append(Send(project, CHAT_PATH.format(project.address), headers, body))
    return plan


@dataclass
class RunResult:
    server: str
    round: int
    requests: int
    errors: int
    seconds: float
    req_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    # CPU time (user + system) per request during the measured window: the server process
    # alone, and everything but the client (servers with their Ray runtime, PostgreSQL, Redis).
    server_cpu_us_per_req: float
    system_cpu_us_per_req: float
    cpu_us_per_req_by_group: dict[str, float]
    # The load generator (this process: its HTTP client and the backend sampler); not in the
    # system figure, but it shares the same cores.
    client_cpu_us_per_req: float
    # The whole machine over the window: idle and stolen percent of its CPU time.
    machine: dict[str, float]
    statuses: dict[str, int]
    # ours only: the app's own histograms over the measured window (its /metrics)
    app_histograms: dict[str, dict[str, float | None]] | None
    # PostgreSQL backends: waiting for the events order lock, active, by wait event
    backends: dict[str, Any]
    started_at: str


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# Backends waiting for an advisory lock: in this database only the change events' order lock
# (``events.append``) is waited for (the relay's lock is a try-lock).
SAMPLE_BACKENDS = """
SELECT coalesce(wait_event_type || ':' || wait_event, 'running') AS state, count(*)
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
GROUP BY 1
"""
EVENTS_LOCK_WAIT = "Lock:advisory"
# The backend holding the events order lock (a bigint advisory key is stored as classid = high
# 32 bits, objid = low 32 bits, objsubid = 1), and what it is doing: executing its statement,
# flushing WAL at commit, or idle in its transaction, waiting for its client's next statement.
SAMPLE_LOCK_HOLDER = """
SELECT a.state || coalesce(' ' || a.wait_event_type || ':' || a.wait_event, '')
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
"""


async def sample_backends(dsn: str, stop: asyncio.Event, every: float = 0.02) -> dict[str, Any]:
    """What the active backends were doing while ``stop`` was not set, one sample every
    ``every`` seconds on a connection of its own: the mean number waiting for the events order
    lock (in this database the only advisory lock anyone waits for; the relay's is a try-lock),
    the mean number active, the mean per wait event, and the worst moment for the lock."""
    from marketplace.storage.repositories.events import EVENTS_LOCK_KEY

    conn = await asyncpg.connect(dsn)
    per_state: dict[str, int] = {}
    holder: dict[str, int] = {}
    samples, worst, worst_at, began = 0, 0, 0.0, time.perf_counter()
    key = (EVENTS_LOCK_KEY >> 32, EVENTS_LOCK_KEY & 0xFFFFFFFF)
    try:
        while not stop.is_set():
            rows = await conn.fetch(SAMPLE_BACKENDS)
            held = await conn.fetchval(SAMPLE_LOCK_HOLDER, *key) or "not held"
            holder[held] = holder.get(held, 0) + 1
            samples += 1
            for state, count in rows:
                per_state[state] = per_state.get(state, 0) + count
            waiting = sum(count for state, count in rows if state == EVENTS_LOCK_WAIT)
            if waiting > worst:
                worst, worst_at = waiting, time.perf_counter() - began
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
    finally:
        await conn.close()
    n = max(samples, 1)
    return {
        "events_lock_waiters": round(per_state.get(EVENTS_LOCK_WAIT, 0) / n, 2),
        "active_backends": round(sum(per_state.values()) / n, 2),
        "mean_by_wait_event": {
            state: round(count / n, 2)
            for state, count in sorted(per_state.items(), key=lambda item: -item[1])
        },
        "events_lock_holder": {
            state: round(count / n, 3)
            for state, count in sorted(holder.items(), key=lambda item: -item[1])
        },
        "most_events_lock_waiters": worst,
        "most_waiters_at_s": round(worst_at, 2),
    }


@dataclass
class Measured:
    counter: int  # position in the send plan after this run
    latencies: list[float]
    statuses: dict[str, int]
    elapsed: float
    cpu: dict[str, float]
    app_histograms: dict[str, dict[str, float | None]] | None
    backends: dict[str, Any]
    started_at: float  # Unix time the measured window began
    client_cpu: float  # CPU seconds of this process (the load generator) in the window
    machine: dict[str, float]  # machine_shares over the window


async def drive(
    server: Server,
    plan: list[Send],
    *,
    offset: int,
    concurrency: int,
    duration: float,
    warmup: float,
    meter: CpuMeter,
    dsn: str,
) -> Measured:
    connector = aiohttp.TCPConnector(limit=concurrency)
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    counter = offset
    measured = 0
    async with aiohttp.ClientSession(server.url, connector=connector) as session:

        async def worker(stop_at: float, record: bool) -> None:
            nonlocal counter, measured
            while time.perf_counter() < stop_at and measured < MAX_REQUESTS_PER_RUN:
                send = plan[counter % len(plan)]
                counter += 1
                started = time.perf_counter()
                async with session.post(send.path, data=send.body, headers=send.headers) as resp:
                    await resp.read()
                    status = resp.status
                if record:
                    measured += 1
                    latencies.append(time.perf_counter() - started)
                    statuses[str(status)] = statuses.get(str(status), 0) + 1

        warm_until = time.perf_counter() + warmup
        await asyncio.gather(*(worker(warm_until, False) for _ in range(concurrency)))
        histograms = await app_histograms(server) if server.name == "ours" else None
        stop_sampling = asyncio.Event()
        sampler = asyncio.create_task(sample_backends(dsn, stop_sampling))
        meter.start()
        started_at = time.time()
        client_before = time.process_time()
        ticks_before = machine_ticks()
        started = time.perf_counter()
        stop_at = started + duration
        await asyncio.gather(*(worker(stop_at, True) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        client_cpu = time.process_time() - client_before
        machine = machine_shares(ticks_before, machine_ticks())
        cpu = meter.stop()
        stop_sampling.set()
        backends = await sampler
        split = None
        if histograms is not None:
            split = histogram_delta(await app_histograms(server), histograms)
    return Measured(
        counter, latencies, statuses, elapsed, cpu, split, backends, started_at, client_cpu, machine
    )


async def prime(servers: list[Server], plan: list[Send], within: float = 120) -> None:
    """One send per project through every server before anything is measured: the app creates
    its shard actors on first use (a send that finds one still starting answers 503 and is sent
    again), and every pool opens its connections."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16)) as session:
        gate = asyncio.Semaphore(16)
        deadline = time.monotonic() + within
        for server in servers:

            async def one(send: Send, server: Server = server) -> int:
                while True:
                    async with (
                        gate,
                        session.post(
                            server.url + send.path, data=send.body, headers=send.headers
                        ) as resp,
                    ):
                        await resp.read()
                    if resp.status != 503 or time.monotonic() > deadline:
                        return resp.status
                    await asyncio.sleep(0.5)

            statuses = await asyncio.gather(*(one(s) for s in plan[: len(plan) // 2]))
            bad = [s for s in statuses if s != 201]
            if bad:
                raise RuntimeError(f"{server.name}: {len(bad)} priming sends failed: {bad[:5]}")


# --- delivery ---------------------------------------------------------------------------------


@dataclass
class Stream:
    index: int
    user_id: uuid.UUID
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # message id -> perf_counter() when this stream yielded its chat.message event
    arrivals: dict[str, float] = field(default_factory=dict)
    duplicates: int = 0
    other_events: int = 0
    ended: str | None = None


async def hold_stream(session: aiohttp.ClientSession, stream: Stream, token: str) -> None:
    """Open ``GET /v1/stream`` and record every chat.message it yields until cancelled."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    try:
        async with session.get("/v1/stream", headers=headers) as resp:
            if resp.status != 200:
                stream.ended = f"status {resp.status}: {(await resp.text())[:200]}"
                stream.ready.set()
                return
            event_type, data = "", ""
            async for raw in resp.content:
                line = raw.decode().rstrip("\r\n")
                if line:
                    name, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "event":
                        event_type = value
                    elif name == "data":
                        data = value
                    elif name == "id" and not stream.ready.is_set():
                        # The position message that opens every stream: it is live from here.
                        stream.ready.set()
                    continue
                if data:
                    now = time.perf_counter()
                    if event_type == "chat.message":
                        message_id = json.loads(data)["payload"]["messageId"]
                        if message_id in stream.arrivals:
                            stream.duplicates += 1
                        else:
                            stream.arrivals[message_id] = now
                    else:
                        stream.other_events += 1
                event_type, data = "", ""
            stream.ended = "closed by the server"
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        stream.ended = f"{type(exc).__name__}: {exc}"
    finally:
        stream.ready.set()


@dataclass
class Sent:
    message_id: str | None
    started: float
    answered: float
    status: int
    recipients: list[int]


async def delivery(
    server: Server,
    parties: list[Party],
    projects: list[Project],
    *,
    streams_per_user: int,
    stream_users: int,
    rate: float,
    seconds: float,
    drain: float,
    meter: CpuMeter,
    dsn: str,
) -> dict[str, Any]:
    # Owners come first in `parties`; take owners and workers alike.
    half = len(parties) // 2
    wanted = stream_users // 2
    holders = parties[:wanted] + parties[half : half + stream_users - wanted]
    holder_ids = {p.user_id for p in holders}
    streams: list[Stream] = []
    by_user: dict[uuid.UUID, list[int]] = {}
    for party in holders:
        for _ in range(streams_per_user):
            stream = Stream(len(streams), party.user_id)
            by_user.setdefault(party.user_id, []).append(stream.index)
            streams.append(stream)
    tokens = {p.user_id: p.token for p in parties}
    # Projects whose owner and worker both hold streams: every send has recipients.
    targets = [
        p for p in projects if p.owner.user_id in holder_ids and p.worker.user_id in holder_ids
    ]
    plan = sends_for(targets)

    timeout = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=30)
    stream_session = aiohttp.ClientSession(
        server.url, connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    )
    send_session = aiohttp.ClientSession(server.url, connector=aiohttp.TCPConnector(limit=64))
    tasks: list[asyncio.Task[None]] = []
    try:
        opened = time.perf_counter()
        gate = asyncio.Semaphore(50)

        async def open_one(stream: Stream) -> None:
            async with gate:
                tasks.append(
                    asyncio.create_task(hold_stream(stream_session, stream, tokens[stream.user_id]))
                )
                await stream.ready.wait()

        await asyncio.gather(*(open_one(s) for s in streams))
        failed = [s for s in streams if s.ended is not None]
        if failed:
            raise RuntimeError(
                f"{len(failed)} of {len(streams)} streams did not open: {failed[0].ended}"
            )
        open_seconds = time.perf_counter() - opened
        print(
            f"  {len(streams)} streams open ({len(holders)} users) in {open_seconds:.1f} s",
            flush=True,
        )

        sent: list[Sent] = []
        in_flight: set[asyncio.Task[None]] = set()

        async def send_one(send: Send, recipients: list[int]) -> None:
            started = time.perf_counter()
            async with send_session.post(send.path, data=send.body, headers=send.headers) as resp:
                status = resp.status
                answer = await resp.json() if status == 201 else None
            sent.append(
                Sent(
                    answer["id"] if answer else None,
                    started,
                    time.perf_counter(),
                    status,
                    recipients,
                )
            )

        total = int(rate * seconds)
        histograms = await app_histograms(server)
        stop_sampling = asyncio.Event()
        sampler = asyncio.create_task(sample_backends(dsn, stop_sampling))
        meter.start()
        began_at = time.time()
        began = time.perf_counter()
        for n in range(total):
            due = began + n / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            send = plan[n % len(plan)]
            project = send.project
            recipients = by_user[project.owner.user_id] + by_user[project.worker.user_id]
            task = asyncio.create_task(send_one(send, recipients))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.gather(*in_flight)
        send_elapsed = time.perf_counter() - began
        # Wait for the stragglers, at most `drain` seconds.
        deadline = time.perf_counter() + drain
        while time.perf_counter() < deadline:
            if all(
                s.message_id is None or s.message_id in streams[r].arrivals
                for s in sent
                for r in s.recipients
            ):
                break
            await asyncio.sleep(0.05)
        cpu = meter.stop()
        stop_sampling.set()
        backends = await sampler
        split = histogram_delta(await app_histograms(server), histograms)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await stream_session.close()
        await send_session.close()

    from_start: list[float] = []
    from_answer: list[float] = []
    send_latency: list[float] = []
    missing = 0
    expected = 0
    delivered_to: dict[str, set[int]] = {}
    for s in sent:
        send_latency.append(s.answered - s.started)
        if s.message_id is None:
            continue
        delivered_to[s.message_id] = set(s.recipients)
        for r in s.recipients:
            expected += 1
            arrived = streams[r].arrivals.get(s.message_id)
            if arrived is None:
                missing += 1
                continue
            from_start.append(arrived - s.started)
            from_answer.append(arrived - s.answered)
    unexpected = sum(
        1
        for stream in streams
        for message_id in stream.arrivals
        if message_id in delivered_to and stream.index not in delivered_to[message_id]
    )
    failed_sends = sum(1 for s in sent if s.status != 201)

    def ms(values: list[float], q: float) -> float:
        return round(percentile(values, q) * 1000, 2)

    requests = len(sent)
    return {
        "streams": len(streams),
        "stream_users": len(holders),
        "projects_messaged": len(targets),
        "streams_open_seconds": round(open_seconds, 2),
        "rate_per_s": rate,
        "sends": requests,
        "send_seconds": round(send_elapsed, 2),
        "began_at": utc(began_at),
        "failed_sends": failed_sends,
        "expected_deliveries": expected,
        "delivered": expected - missing,
        "missing_deliveries": missing,
        "unexpected_deliveries": unexpected,
        "duplicate_deliveries": sum(s.duplicates for s in streams),
        "streams_ended_early": sum(1 for s in streams if s.ended is not None),
        "slowest_sends": sorted(
            (
                {"at_s": round(s.started - began, 2), "ms": round((s.answered - s.started) * 1000)}
                for s in sent
            ),
            key=lambda x: -x["ms"],
        )[:25],
        "send_p50_ms": ms(send_latency, 0.5),
        "send_p99_ms": ms(send_latency, 0.99),
        "from_send_start": {
            "p50_ms": ms(from_start, 0.5),
            "p95_ms": ms(from_start, 0.95),
            "p99_ms": ms(from_start, 0.99),
            "max_ms": round(max(from_start, default=float("nan")) * 1000, 2),
        },
        "from_201": {
            "p50_ms": ms(from_answer, 0.5),
            "p95_ms": ms(from_answer, 0.95),
            "p99_ms": ms(from_answer, 0.99),
            "max_ms": round(max(from_answer, default=float("nan")) * 1000, 2),
        },
        "app_histograms": split,
        "backends": backends,
        "cpu_us_per_send_by_group": {
            name: round(spent / max(requests, 1) * 1e6, 1) for name, spent in cpu.items()
        },
    }


# --- orchestration ----------------------------------------------------------------------------


def profile(args: argparse.Namespace, server: Server, label: str) -> subprocess.Popen[bytes] | None:
    """With --py-spy, sample ``ours`` (and its Ray processes) during a measured run."""
    if not args.py_spy or server.name != "ours":
        return None
    args.profile_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            args.py_spy,
            "record",
            "--pid",
            str(server.proc.pid),
            "--subprocesses",
            "--duration",
            str(max(1, int(args.duration))),
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(args.profile_dir / f"{label}.txt"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def utc(unix: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(unix)) + f".{int(unix % 1 * 1000):03d}Z"


def checkpoint_lines(log: Path) -> list[str]:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if "checkpoint" in line][-50:]


def machine_ticks() -> list[int]:
    """The machine's CPU time by kind since boot (``/proc/stat``'s ``cpu`` line: user, nice,
    system, idle, iowait, irq, softirq, steal, ...), in clock ticks."""
    with open("/proc/stat") as stat:
        return [int(x) for x in stat.readline().split()[1:]]


def machine_shares(before: list[int], after: list[int]) -> dict[str, float]:
    """Percent of the machine's CPU time between two ``machine_ticks``: idle (idle + iowait)
    and stolen (``steal``: time the hypervisor ran something else while this VM wanted a CPU,
    the one thing here that makes a round slow without any process of the run using more)."""
    delta = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(delta[:8]) or 1
    return {
        "idle_percent": round((delta[3] + delta[4]) / total * 100, 1),
        "steal_percent": round(delta[7] / total * 100, 1),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from marketplace.config import Settings
    from marketplace.storage.migrations import migrate_dsn
    from marketplace_devstack.embedded.postgres import EmbeddedPostgres
    from marketplace_devstack.embedded.procs import free_port
    from marketplace_devstack.embedded.redis import EmbeddedRedis

    data_dir = Path(tempfile.mkdtemp(prefix="mkt-bench-msg-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    postgres, redis_server = EmbeddedPostgres(data_dir), EmbeddedRedis(data_dir)
    servers: list[Server] = []
    failed = True
    shards = args.shards or Settings.model_fields["project_shards"].default
    try:
        postgres.start()
        redis_server.start()
        await migrate_dsn(postgres.dsn)
        parties, projects = build_world(args.projects, args.users)
        started = time.perf_counter()
        await seed(postgres.dsn, parties, projects)
        print(
            f"seeded {len(parties)} users and {len(projects)} projects "
            f"in {time.perf_counter() - started:.1f} s; project shards: {shards}",
            flush=True,
        )

        ours_args = [
            "--database-url",
            postgres.dsn,
            "--redis-url",
            redis_server.url,
            "--data-dir",
            str(data_dir),
            "--log-level",
            args.log_level,
            "--shards",
            str(shards),
        ]
        candidates = []
        if "ours" in args.servers:
            candidates.append(("ours", "serve-ours", ours_args))
        if "baseline" in args.servers:
            candidates.append(("baseline", "serve-baseline", ["--database-url", postgres.dsn]))
        if "baseline+checks" in args.servers:
            candidates.append(
                ("baseline+checks", "serve-baseline", ["--database-url", postgres.dsn, "--checks"])
            )
        for name, mode, extra in candidates:
            servers.append(start_server(name, mode, free_port(), extra, data_dir / f"{name}.log"))
        for server in servers:
            await wait_ready(server)
        plan = sends_for(projects)
        await prime(servers, plan)
        print(f"servers ready and primed ({', '.join(s.name for s in servers)})", flush=True)

        pg_pid, redis_pid = postgres.pid, redis_server.pid
        assert pg_pid is not None
        assert redis_pid is not None
        groups: dict[str, Callable[[], list[int]]] = {
            s.name: functools.partial(lambda pid: [pid], s.proc.pid) for s in servers
        }
        ours = next((s for s in servers if s.name == "ours"), None)
        if ours is not None:
            ours_pid = ours.proc.pid
            groups["ours shards"] = lambda: [
                pid for pid in process_tree(ours_pid)[1:] if is_shard(pid)
            ]
            groups["ours ray other"] = lambda: [
                pid for pid in process_tree(ours_pid)[1:] if not is_shard(pid)
            ]
        groups["postgres"] = lambda: process_tree(pg_pid)
        groups["redis"] = lambda: [redis_pid]
        load_before = load_average()
        # Background CPU of each group while nothing is sent (Ray's driver and daemon threads,
        # the relay's and the stream hub's polling): part of every per-request figure below.
        idle = CpuMeter(groups)
        idle.start()
        await asyncio.sleep(args.idle_probe)
        idle_cpu = {
            name: round(spent / args.idle_probe * 100, 1) for name, spent in idle.stop().items()
        }
        print(f"idle CPU % by process group: {idle_cpu}", flush=True)

        results: list[RunResult] = []
        offset = 0
        for round_index in range(args.rounds):
            order = servers if round_index % 2 == 0 else list(reversed(servers))
            for server in order:
                meter = CpuMeter(groups)
                spy = profile(args, server, f"throughput-{round_index + 1}")
                run_ = await drive(
                    server,
                    plan,
                    offset=offset,
                    concurrency=args.concurrency,
                    duration=args.duration,
                    warmup=args.warmup,
                    meter=meter,
                    dsn=postgres.dsn,
                )
                latencies, statuses, elapsed = run_.latencies, run_.statuses, run_.elapsed
                offset = run_.counter
                if spy is not None:
                    spy.wait(timeout=60)
                requests = len(latencies)
                per_req = {
                    name: round(spent / max(requests, 1) * 1e6, 1)
                    for name, spent in run_.cpu.items()
                }
                result = RunResult(
                    server=server.name,
                    round=round_index + 1,
                    requests=requests,
                    errors=requests - statuses.get("201", 0),
                    seconds=round(elapsed, 3),
                    req_per_s=round(requests / elapsed, 1),
                    p50_ms=round(percentile(latencies, 0.50) * 1000, 2),
                    p99_ms=round(percentile(latencies, 0.99) * 1000, 2),
                    max_ms=round(max(latencies) * 1000, 2),
                    server_cpu_us_per_req=per_req[server.name],
                    system_cpu_us_per_req=round(sum(per_req.values()), 1),
                    cpu_us_per_req_by_group=per_req,
                    client_cpu_us_per_req=round(run_.client_cpu / max(requests, 1) * 1e6, 1),
                    machine=run_.machine,
                    statuses=statuses,
                    app_histograms=run_.app_histograms,
                    backends=run_.backends,
                    started_at=utc(run_.started_at),
                )
                results.append(result)
                print(
                    f"  round {result.round} {server.name:<16} {result.req_per_s:>7.1f} req/s  "
                    f"p50 {result.p50_ms:>6.1f} ms  p99 {result.p99_ms:>6.1f} ms  "
                    f"cpu {result.server_cpu_us_per_req:>5.0f} us/req "
                    f"(system {result.system_cpu_us_per_req:>5.0f}, "
                    f"client {result.client_cpu_us_per_req:>5.0f})  "
                    f"idle {result.machine['idle_percent']:>4.1f}% "
                    f"steal {result.machine['steal_percent']:>4.1f}%  "
                    f"lock waiters {result.backends['events_lock_waiters']:>4.1f}  "
                    f"errors {result.errors}",
                    flush=True,
                )
                if result.errors:
                    print(f"    statuses: {statuses}", flush=True)

        delivery_result: dict[str, Any] | None = None
        from marketplace.stream.audience import streamed_types

        if "chat.message" not in streamed_types():
            delivery_result = {
                "skipped": "chat.message is not streamed: it has no audience rule in "
                "marketplace/stream/audience.py (docs/stream.md, 'Adding an event type')"
            }
            print(f"delivery: skipped; {delivery_result['skipped']}", flush=True)
        elif args.streams > 0 and ours is not None:
            print(
                f"delivery: {args.streams} streams, {args.rate:g} sends/s for "
                f"{args.delivery_seconds:g} s",
                flush=True,
            )
            per_user = 2
            delivery_result = await delivery(
                ours,
                parties,
                projects,
                streams_per_user=per_user,
                stream_users=max(2, args.streams // per_user),
                rate=args.rate,
                seconds=args.delivery_seconds,
                drain=args.drain,
                meter=CpuMeter(groups),
                dsn=postgres.dsn,
            )
        failed = False
        return {
            "project_shards": shards,
            "load_average_before": load_before,
            "idle_cpu_percent": idle_cpu,
            "load_average_after": load_average(),
            "results": [asdict(r) for r in results],
            "summary": summarize(results),
            "delivery": delivery_result,
            # Checkpoints (PostgreSQL logs them), to set against slow windows of a run.
            "postgres_checkpoints": checkpoint_lines(postgres.pgdata / "server.log"),
        }
    finally:
        for server in servers:
            stop_server(server)
            if failed:
                log = (data_dir / f"{server.name}.log").read_text(errors="replace")
                print(f"--- {server.name} log (tail) ---\n{log[-3000:]}", file=sys.stderr)
        redis_server.stop()
        postgres.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    """Per server: the median over rounds, and the ratios to the baseline."""
    by_server: dict[str, list[RunResult]] = {}
    for r in results:
        by_server.setdefault(r.server, []).append(r)

    def median(runs: list[RunResult], attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in runs))

    baseline = by_server.get("baseline")
    base_rps = median(baseline, "req_per_s") if baseline else None
    base_cpu = median(baseline, "system_cpu_us_per_req") if baseline else None
    rows = []
    for server, runs in by_server.items():
        rps = median(runs, "req_per_s")
        system_cpu = median(runs, "system_cpu_us_per_req")
        groups = sorted({g for r in runs for g in r.cpu_us_per_req_by_group})
        rows.append(
            {
                "server": server,
                "req_per_s": round(rps, 1),
                "p50_ms": round(median(runs, "p50_ms"), 2),
                "p99_ms": round(median(runs, "p99_ms"), 2),
                "max_ms": round(max(r.max_ms for r in runs), 2),
                "server_cpu_us_per_req": round(median(runs, "server_cpu_us_per_req"), 1),
                "system_cpu_us_per_req": round(system_cpu, 1),
                "cpu_us_per_req_by_group": {
                    g: round(statistics.median(r.cpu_us_per_req_by_group[g] for r in runs), 1)
                    for g in groups
                },
                "errors": sum(r.errors for r in runs),
                "events_lock_waiters": statistics.median(
                    r.backends["events_lock_waiters"] for r in runs
                ),
                "active_backends": statistics.median(r.backends["active_backends"] for r in runs),
                "app_histograms": merged_histograms(runs),
                "ratio_to_baseline": round(rps / base_rps, 3) if base_rps else None,
                # baseline system CPU per request / ours: the throughput ratio were the whole
                # machine CPU-bound
                "system_cpu_efficiency_vs_baseline": (
                    round(base_cpu / system_cpu, 3) if base_cpu else None
                ),
            }
        )
    return rows


def merged_histograms(runs: list[RunResult]) -> dict[str, dict[str, float | None]] | None:
    """Per histogram of the app, the median over rounds of each figure."""
    present = [r.app_histograms for r in runs if r.app_histograms]
    if not present:
        return None
    merged: dict[str, dict[str, float | None]] = {}
    for name in present[0]:
        merged[name] = {}
        for key in present[0][name]:
            values = [v for h in present if (v := h[name][key]) is not None]
            merged[name][key] = round(statistics.median(values), 2) if values else None
    return merged


def describe(histograms: dict[str, dict[str, float | None]]) -> str:
    parts = []
    for name, h in histograms.items():
        if h.get("count"):
            parts.append(f"{name} mean {h['mean_ms']} ms (p99 <= {h['p99_le_ms']} ms)")
    return "; ".join(parts)


def print_tables(summary: list[dict[str, Any]], delivery_result: dict[str, Any] | None) -> None:
    header = (
        f"{'server':<16} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'vs baseline':>11} {'server us/req':>13} {'system us/req':>13} {'lock wait':>9} "
        f"{'errors':>6}"
    )
    print(header)
    print("-" * len(header))
    for row in summary:
        ratio = f"{row['ratio_to_baseline']:.2f}x" if row["ratio_to_baseline"] else "-"
        print(
            f"{row['server']:<16} {row['req_per_s']:>8.1f} {row['p50_ms']:>7.1f} "
            f"{row['p99_ms']:>7.1f} {row['max_ms']:>7.1f} {ratio:>11} "
            f"{row['server_cpu_us_per_req']:>13.0f} {row['system_cpu_us_per_req']:>13.0f} "
            f"{row['events_lock_waiters']:>9.1f} {row['errors']:>6}"
        )
    for row in summary:
        groups = ", ".join(f"{g} {v:.0f}" for g, v in row["cpu_us_per_req_by_group"].items())
        print(f"  {row['server']} CPU us/req by process group: {groups}")
        if row["app_histograms"]:
            print(f"  {row['server']} as the app measured it: {describe(row['app_histograms'])}")
    if delivery_result is None or "skipped" in delivery_result:
        return
    d = delivery_result
    print()
    print(
        f"delivery: {d['streams']} streams ({d['stream_users']} users), {d['sends']} sends at "
        f"{d['rate_per_s']:g}/s, {d['expected_deliveries']} expected deliveries"
    )
    header = f"{'measured from':<16} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}"
    print(header)
    print("-" * len(header))
    for label, key in (("send start", "from_send_start"), ("201 answer", "from_201")):
        q = d[key]
        print(
            f"{label:<16} {q['p50_ms']:>7.1f} {q['p95_ms']:>7.1f} {q['p99_ms']:>7.1f} "
            f"{q['max_ms']:>7.1f}"
        )
    print(
        f"missing {d['missing_deliveries']}, unexpected {d['unexpected_deliveries']}, "
        f"duplicates {d['duplicate_deliveries']}, failed sends {d['failed_sends']}, "
        f"send p50/p99 {d['send_p50_ms']:.1f}/{d['send_p99_ms']:.1f} ms"
    )
    print(f"as the app measured it: {describe(d['app_histograms'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    for mode in ("serve-ours", "serve-baseline"):
        p = sub.add_parser(mode)
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--database-url", required=True)
        p.add_argument("--redis-url", default="")
        p.add_argument("--data-dir", default=".")
        p.add_argument("--log-level", default="INFO")
        p.add_argument("--shards", type=int, default=0)
        p.add_argument("--checks", action="store_true")
    parser.add_argument("--projects", type=int, default=1000)
    parser.add_argument("--users", type=int, default=250, help="half owners, half workers")
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        help="MARKETPLACE_PROJECT_SHARDS for ours (default: the setting's default)",
    )
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="alternating throughput rounds")
    parser.add_argument("--idle-probe", type=float, default=3.0, help="seconds of idle CPU probe")
    parser.add_argument(
        "--servers",
        default="ours,baseline,baseline+checks",
        help="comma-separated subset of ours, baseline, baseline+checks",
    )
    parser.add_argument("--streams", type=int, default=500, help="open streams (0: no delivery)")
    parser.add_argument("--rate", type=float, default=50.0, help="sends per second (delivery)")
    parser.add_argument("--delivery-seconds", type=float, default=20.0)
    parser.add_argument(
        "--drain", type=float, default=5.0, help="seconds to wait for late deliveries"
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        help="the app's log level (INFO = one JSON access line per request, as in production)",
    )
    add_output_option(parser, RESULTS)
    parser.add_argument(
        "--py-spy",
        default="",
        help="path of a py-spy binary: sample ours and its Ray processes during its runs",
    )
    parser.add_argument("--profile-dir", type=Path, default=Path("/tmp/messaging-profiles"))
    args = parser.parse_args()
    if args.mode == "serve-ours":
        serve_ours(args)
        return
    if args.mode == "serve-baseline":
        serve_baseline(args)
        return
    args.servers = set(args.servers.split(","))
    from marketplace.stream.audience import streamed_types

    outcome = asyncio.run(run(args))
    print()
    print_tables(outcome["summary"], outcome["delivery"])
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "projects": args.projects,
            "users": args.users,
            "project_shards": outcome["project_shards"],
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "rounds": args.rounds,
            "streams": args.streams,
            "delivery_rate_per_s": args.rate,
            "delivery_seconds": args.delivery_seconds,
            "app_log_level": args.log_level,
            "legal_acceptance_mode": "implicit (default; every user has accepted)",
            "rate_limit": "off (the baseline has none)",
            "streamed_event_types": sorted(streamed_types()),
        },
        **outcome,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_report(args.output, report)


if __name__ == "__main__":
    main()
