"""Read throughput of the project read API against a minimal aiohttp + asyncpg baseline.

Usage: ``.venv/bin/python bench/read_throughput.py [--duration 10] [--concurrency 32]``
(see bench/README.md). Everything is local and loopback-only:

1. a scratch embedded PostgreSQL and Redis in a temporary directory, migrated, seeded with
   10,000 projects x 5 milestones (plus metadata, 10 % invite-only, 30 % challenge mode) straight
   into the read-model tables, then VACUUM ANALYZE;
2. a Ray head for the app (the app factory connects to Ray at startup), kept running during every
   phase so both servers share the same background load;
3. two server processes, started once and both kept alive for the whole run:
   ``ours``: the real app (``create_app``, every middleware, auth, pydantic models);
   ``baseline``: a bare aiohttp app whose handlers run the SAME SQL (imported from
   ``marketplace.storage.repositories.projects``) on an identical pool and dump the rows with
   ``json.dumps``;
4. for each scenario, in alternating rounds, this process drives one server with an aiohttp
   ``ClientSession`` (connector limit = concurrency, one worker coroutine per connection) for a
   fixed duration after a short warm-up, and records throughput and latency percentiles.

Both servers get identical treatment (one process each, same pool size, same database, same
client), so the ratio measures what the app adds on top of the SQL. Results are printed as a
table and, with --output, written to bench/results/read_throughput.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
from aiohttp import web  # noqa: E402

from bench.report import add_output_option, write_report  # noqa: E402
from marketplace.storage.repositories import projects as projects_repo  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "read_throughput.json"
PROJECTS = 10_000
MILESTONES = 5
OWNERS = 500
MAX_REQUESTS_PER_RUN = 500_000  # a hard bound on each measured loop besides its duration

# --- seeding ---------------------------------------------------------------------------------

SEED_SQL = f"""
INSERT INTO users (user_id, email_verified)
VALUES ('00000000-0000-4000-8000-000000000001', true);

INSERT INTO projects (
    project_address, chain_id, owner_address, status, project_mode, bidding_access, config_hash,
    selected_builder_address, milestone_count, bid_bond_usdc, challenge_payout_usdc,
    challenge_submission_count, challenge_submission_window_seconds,
    challenge_owner_response_window_seconds, challenge_submission_deadline,
    challenge_owner_response_deadline, allowlist, created_block, created_log_index, created_at,
    updated_at, snapshot_block)
SELECT
    '0x' || substr(md5('p' || i), 1, 32) || lpad(to_hex(i), 8, '0'),
    31337,
    '0x' || substr(md5('o' || (i % {OWNERS})), 1, 32) || lpad(to_hex(i % {OWNERS}), 8, '0'),
    (ARRAY['draft', 'bidding', 'building', 'dispute', 'complete', 'failed'])[1 + i % 6],
    CASE WHEN i % 10 < 3 THEN 'challenge' ELSE 'standard' END,
    CASE WHEN i % 10 = 9 THEN 'invite_only' ELSE 'open' END,
    '0x' || md5('c' || i) || md5('d' || i),
    CASE WHEN i % 6 >= 2 THEN '0x' || md5('b' || i) || substr(md5('f' || i), 1, 8) END,
    {MILESTONES},
    CASE WHEN i % 10 >= 3 THEN 100 + i % 900 END,
    CASE WHEN i % 10 < 3 THEN 5000 + i END,
    CASE WHEN i % 10 < 3 THEN i % 4 END,
    CASE WHEN i % 10 < 3 THEN 604800 END,
    CASE WHEN i % 10 < 3 THEN 172800 END,
    CASE WHEN i % 10 < 3 THEN extract(epoch FROM now())::bigint + (i % 200 - 100) * 3600 END,
    CASE WHEN i % 10 < 3 THEN extract(epoch FROM now())::bigint + (i % 200 - 52) * 3600 END,
    CASE WHEN i % 10 = 9
        THEN ARRAY['0x' || md5('a' || i) || lpad(to_hex(i), 8, '0'),
                   '0x' || md5('e' || i) || lpad(to_hex(i), 8, '0')]
        ELSE '{{}}'::text[] END,
    1000 + i / 3,
    i % 3,
    now() - (({PROJECTS} - i) * interval '1 minute'),
    now() - (({PROJECTS} - i) * interval '30 seconds'),
    1000 + i / 3
FROM generate_series(1, {PROJECTS}) AS i;

INSERT INTO milestones (
    project_address, milestone_index, status, payout_usdc, deadline_at, submitted_at,
    approved_at, delivery_ref_hash, latest_evidence_hash, attested_on_chain)
SELECT p.project_address, m,
    (ARRAY['pending', 'submitted', 'approved', 'rejected', 'disputed', 'attested'])[1 + m],
    250 * (m + 1),
    p.created_at + (m + 1) * interval '7 days',
    CASE WHEN m < 2 THEN p.created_at + (m + 1) * interval '6 days' END,
    CASE WHEN m < 1 THEN p.created_at + interval '8 days' END,
    CASE WHEN m < 2 THEN '0x' || md5(p.project_address || m) || md5(m || p.project_address) END,
    CASE WHEN m = 0 THEN '0x' || md5('ev' || p.project_address) || md5(p.project_address) END,
    m = 5
FROM projects p CROSS JOIN generate_series(0, {MILESTONES - 1}) AS m;

INSERT INTO project_metadata (
    project_address, owner_address, title, description, image_url, project_mode,
    bidding_access, claimed_by, claim_mode, hash_version, tx_hash, config_hash)
SELECT project_address, owner_address,
    'Project ' || substr(project_address, 3, 8),
    repeat('A description of the work to be done. ', 5),
    'https://images.example.org/' || substr(project_address, 3, 12) || '.png',
    project_mode, bidding_access, '00000000-0000-4000-8000-000000000001', 'direct', 'v1_direct',
    '0x' || md5('t' || project_address) || md5('x' || project_address), config_hash
FROM projects;
"""


async def seed(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SEED_SQL)
        await conn.execute("VACUUM ANALYZE projects, milestones, project_metadata")
    finally:
        await conn.close()


async def sample_addresses(dsn: str, n: int) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT project_address FROM projects WHERE bidding_access = 'open'"
            " ORDER BY md5(project_address) LIMIT $1",
            n,
        )
    finally:
        await conn.close()
    return [r["project_address"] for r in rows]


# --- EXPLAIN ---------------------------------------------------------------------------------


async def explain(dsn: str) -> dict[str, str]:
    """EXPLAIN ANALYZE of every statement shape the read API issues, on the seeded data."""
    conn = await asyncpg.connect(dsn)
    plans: dict[str, str] = {}
    try:
        owner = await conn.fetchval("SELECT owner_address FROM projects LIMIT 1")
        address = await conn.fetchval(
            "SELECT project_address FROM projects WHERE bidding_access = 'open' LIMIT 1"
        )
        viewer = uuid.UUID("00000000-0000-4000-8000-000000000001")
        await conn.execute(
            "INSERT INTO wallet_links (user_id, wallet_address, chain_id, verification_method)"
            " VALUES ($1, $2, 31337, 'eip191_sign_message') ON CONFLICT DO NOTHING",
            viewer,
            owner,
        )
        filters = projects_repo.ListFilters
        cases: dict[str, tuple[str, list[Any]]] = {
            "list anonymous, first page": projects_repo.list_arguments(
                viewer=None, filters=filters(), after=None, limit=21
            ),
            "list anonymous, deep cursor": projects_repo.list_arguments(
                viewer=None, filters=filters(), after=(2000, 0), limit=21
            ),
            "list signed-in viewer": projects_repo.list_arguments(
                viewer=viewer, filters=filters(), after=None, limit=21
            ),
            "list ownerAddress filter": projects_repo.list_arguments(
                viewer=None, filters=filters(owner_address=owner), after=None, limit=21
            ),
            "list status filter": projects_repo.list_arguments(
                viewer=None, filters=filters(status="complete"), after=None, limit=21
            ),
            "list effectiveStatus filter": projects_repo.list_arguments(
                viewer=None,
                filters=filters(effective_status="dispute", now=int(time.time())),
                after=None,
                limit=21,
            ),
            "detail anonymous": projects_repo.detail_arguments(None, address),
            "detail signed-in viewer": projects_repo.detail_arguments(viewer, address),
            "records visibility check": (
                projects_repo.SELECT_VISIBLE_PROJECT_PARTIES,
                [address, [owner], [], False],
            ),
        }
        for name, (sql, args) in cases.items():
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", *args)
            plans[name] = "\n".join(r[0] for r in rows)
    finally:
        await conn.close()
    return plans


# --- the two servers --------------------------------------------------------------------------


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
        ray_namespace="marketplace-bench",
        jwt_secret=SecretStr(args.jwt_secret),
        notification_unsubscribe_secret=SecretStr("bench-unsubscribe-" + "u" * 32),
        project_shards=1,
        rate_limit_enabled=args.rate_limit,
        rate_limit_default="100000000/60",
        log_level=args.log_level,
        read_cache_enabled=not args.no_read_cache,
        **(
            {"read_cache_max_age_ms": args.read_cache_max_age_ms}
            if args.read_cache_max_age_ms
            else {}
        ),
    )
    configure_logging(settings.log_level, settings.log_json)
    web.run_app(create_app(settings), host="127.0.0.1", port=args.port, print=None, access_log=None)


def serve_baseline(args: argparse.Namespace) -> None:
    from marketplace.storage.pool import create_pool

    pool_key: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)

    def _dump(rows: list[asyncpg.Record]) -> list[dict[str, Any]]:
        items = []
        for row in rows:
            item = dict(row)
            item["milestones"] = [list(m) for m in item["milestones"]]
            items.append(item)
        return items

    async def list_projects(request: web.Request) -> web.Response:
        limit = int(request.query.get("limit", "20"))
        sql, params = projects_repo.list_arguments(
            viewer=None, filters=projects_repo.ListFilters(), after=None, limit=limit + 1
        )
        rows = await request.app[pool_key].fetch(sql, *params)
        page = [r for r in rows if r["project_address"] is not None][:limit]
        body = {"items": _dump(page), "count": rows[0]["total"], "nextCursor": None}
        return web.Response(
            body=json.dumps(body, default=str).encode(), content_type="application/json"
        )

    async def get_project(request: web.Request) -> web.Response:
        sql, params = projects_repo.detail_arguments(None, request.match_info["address"].lower())
        row = await request.app[pool_key].fetchrow(sql, *params)
        if row is None:
            raise web.HTTPNotFound()
        body = _dump([row])[0]
        return web.Response(
            body=json.dumps(body, default=str).encode(), content_type="application/json"
        )

    async def pool_ctx(app: web.Application) -> Any:
        app[pool_key] = await create_pool(args.database_url, min_size=2, max_size=20)
        yield
        await app[pool_key].close()

    app = web.Application()
    app.cleanup_ctx.append(pool_ctx)
    app.router.add_get("/v1/projects", list_projects)
    app.router.add_get("/v1/projects/{address}", get_project)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


# --- the load generator -----------------------------------------------------------------------


@dataclass
class RunResult:
    server: str
    scenario: str
    round: int
    requests: int
    errors: int
    seconds: float
    req_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    # CPU time (user + system) the server process spent per request during the measured window:
    # its efficiency, independent of how the 2 cores were shared out.
    server_cpu_us_per_req: float


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(
    base_url: str,
    paths: Callable[[int], str],
    *,
    concurrency: int,
    duration: float,
    warmup: float,
    headers: dict[str, str],
    server_pid: int,
) -> tuple[int, int, float, list[float], float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    latencies: list[float] = []
    errors = 0
    counter = 0
    async with aiohttp.ClientSession(base_url, connector=connector, headers=headers) as session:

        async def worker(stop_at: float, record: bool) -> None:
            nonlocal errors, counter
            while time.perf_counter() < stop_at and counter < MAX_REQUESTS_PER_RUN:
                counter += 1
                path = paths(counter)
                started = time.perf_counter()
                async with session.get(path) as resp:
                    await resp.read()
                    ok = resp.status == 200
                if record:
                    latencies.append(time.perf_counter() - started)
                    if not ok:
                        errors += 1

        warm_until = time.perf_counter() + warmup
        await asyncio.gather(*(worker(warm_until, False) for _ in range(concurrency)))
        counter = 0
        cpu_before = cpu_seconds(server_pid)
        started = time.perf_counter()
        stop_at = started + duration
        await asyncio.gather(*(worker(stop_at, True) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(server_pid) - cpu_before
    return len(latencies), errors, elapsed, latencies, cpu


async def read_cache_metrics(server: Server) -> dict[str, float]:
    """The app's read-cache counters after the runs (hits, misses, bypasses by route)."""
    async with aiohttp.ClientSession() as session, session.get(server.url + "/metrics") as resp:
        text = await resp.text()
    figures: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("marketplace_read_cache_") and "_created" not in line:
            name, _, value = line.rpartition(" ")
            figures[name.removeprefix("marketplace_read_cache_")] = float(value)
    return figures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# --- orchestration ----------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_server(
    name: str, mode: str, port: int, extra: list[str], log: Path, cpus: set[int] | None
) -> Server:
    pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*pin, sys.executable, __file__, mode, "--port", str(port), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Server(name, port, proc)


async def wait_ready(server: Server, path: str, within: float = 90) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise RuntimeError(f"{server.name} exited with {server.proc.returncode}")
            try:
                async with session.get(server.url + path) as resp:
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


def pinning(spec: str) -> tuple[set[int] | None, set[int] | None]:
    """``--pin server:client`` CPU lists, e.g. ``1:0``; empty: no pinning."""
    if not spec:
        return None, None
    server, client = spec.split(":")
    return {int(c) for c in server.split(",")}, {int(c) for c in client.split(",")}


def profile(
    args: argparse.Namespace, server: Server, scenario: str, round_index: int
) -> subprocess.Popen[bytes] | None:
    """With --py-spy, sample the server during the measured part of this run (raw stacks)."""
    if not args.py_spy:
        return None
    args.profile_dir.mkdir(parents=True, exist_ok=True)
    name = f"{server.name}-{scenario.replace(' ', '_')}-{round_index + 1}.txt"
    return subprocess.Popen(
        [
            args.py_spy,
            "record",
            "--pid",
            str(server.proc.pid),
            "--duration",
            str(max(1, int(args.duration))),
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(args.profile_dir / name),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def ray_head(temp_dir: Path) -> tuple[str, Callable[[], None]]:
    from marketplace_devstack.embedded.procs import free_port

    ray_bin = Path(sys.executable).parent / "ray"
    port = free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", HOME=str(temp_dir))
    subprocess.run(
        [
            str(ray_bin),
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir / 'ray'}",
            "--disable-usage-stats",
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )

    def stop() -> None:
        # Only this head's processes (their command lines name its temp dir) and their children:
        # The CLI's stop command would end every Ray runtime on the machine, other people's too.
        import psutil

        marker = str(temp_dir / "ray")
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(marker in arg for arg in proc.info["cmdline"] or ()):
                    for member in (proc, *proc.children(recursive=True)):
                        found[member.pid] = member
            except psutil.Error:
                continue
        for member in found.values():
            with contextlib.suppress(psutil.Error):
                member.terminate()
        _, alive = psutil.wait_procs(list(found.values()), timeout=15)
        for member in alive:
            with contextlib.suppress(psutil.Error):
                member.kill()

    return f"127.0.0.1:{port}", stop


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from marketplace.auth import issue_session_token
    from marketplace.storage.migrations import migrate_dsn
    from marketplace_devstack.embedded.postgres import EmbeddedPostgres
    from marketplace_devstack.embedded.procs import free_port
    from marketplace_devstack.embedded.redis import EmbeddedRedis

    data_dir = Path(tempfile.mkdtemp(prefix="mkt-bench-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    postgres, redis_server = EmbeddedPostgres(data_dir), EmbeddedRedis(data_dir)
    servers: list[Server] = []
    stop_ray: Callable[[], None] | None = None
    failed = True
    try:
        postgres.start()
        redis_server.start()
        await migrate_dsn(postgres.dsn)
        started = time.perf_counter()
        await seed(postgres.dsn)
        print(
            f"seeded {PROJECTS} projects x {MILESTONES} milestones "
            f"in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        plans = await explain(postgres.dsn)
        if args.explain:
            for name, plan in plans.items():
                print(f"\n== {name}\n{plan}")
            failed = False
            return {"plans": plans, "results": [], "summary": []}
        addresses = await sample_addresses(postgres.dsn, 1000)
        ray_address, stop_ray = ray_head(data_dir)
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")

        server_cpus, client_cpus = pinning(args.pin)
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        jwt_secret = "bench-secret-" + "z" * 32
        common = ["--database-url", postgres.dsn]
        ours_args = [
            *common,
            "--read-cache-max-age-ms",
            str(args.read_cache_max_age_ms),
            "--redis-url",
            redis_server.url,
            "--ray-address",
            ray_address,
            "--data-dir",
            str(data_dir),
            "--jwt-secret",
            jwt_secret,
            "--log-level",
            args.log_level,
        ]
        candidates = [("ours", "serve-ours", ours_args)]
        if args.no_cache_variant:
            candidates.append(("ours (no cache)", "serve-ours", [*ours_args, "--no-read-cache"]))
        if args.rate_limit_variant:
            candidates.append(("ours+ratelimit", "serve-ours", [*ours_args, "--rate-limit"]))
        candidates.append(("baseline", "serve-baseline", common))
        for name, mode, extra in candidates:
            servers.append(
                start_server(name, mode, free_port(), extra, data_dir / f"{name}.log", server_cpus)
            )
        for server in servers:
            await wait_ready(server, "/v1/projects?limit=1")
        # Background CPU of each idle server process (the app's Ray driver threads, say); it is
        # included in the per-request CPU figures below.
        idle_before = {s.name: cpu_seconds(s.proc.pid) for s in servers}
        await asyncio.sleep(args.idle_probe)
        idle_cpu = {
            s.name: round(
                (cpu_seconds(s.proc.pid) - idle_before[s.name]) / args.idle_probe * 100, 1
            )
            for s in servers
        }
        print(f"idle CPU % per server process: {idle_cpu}", flush=True)

        token = issue_session_token(
            jwt_secret, uuid.uuid4(), email_verified=True, ttl_seconds=3600, now=int(time.time())
        )
        scenarios: dict[str, tuple[Callable[[int], str], dict[str, str], set[str]]] = {
            "list": (lambda i: "/v1/projects?limit=20", {}, set()),
            "detail": (lambda i: f"/v1/projects/{addresses[i % len(addresses)]}", {}, set()),
        }
        if args.signed_in:
            # signed-in viewer: JWT check + the viewer CTE; the baseline has no auth to compare
            scenarios["list (signed in)"] = (
                lambda i: "/v1/projects?limit=20",
                {"Authorization": f"Bearer {token}"},
                {"baseline"},
            )
        if args.scenarios:
            wanted = set(args.scenarios.split(","))
            scenarios = {k: v for k, v in scenarios.items() if k in wanted}
        results: list[RunResult] = []
        for round_index in range(args.rounds):
            for scenario, (paths, headers, skip) in scenarios.items():
                order = servers if round_index % 2 == 0 else list(reversed(servers))
                for server in order:
                    if server.name in skip:
                        continue
                    spy = profile(args, server, scenario, round_index)
                    count, errors, elapsed, latencies, cpu = await drive(
                        server.url,
                        paths,
                        concurrency=args.concurrency,
                        duration=args.duration,
                        warmup=args.warmup,
                        headers=headers,
                        server_pid=server.proc.pid,
                    )
                    if spy is not None:
                        spy.wait(timeout=60)
                    result = RunResult(
                        server=server.name,
                        scenario=scenario,
                        round=round_index + 1,
                        requests=count,
                        errors=errors,
                        seconds=round(elapsed, 3),
                        req_per_s=round(count / elapsed, 1),
                        p50_ms=round(percentile(latencies, 0.50) * 1000, 2),
                        p99_ms=round(percentile(latencies, 0.99) * 1000, 2),
                        max_ms=round(max(latencies) * 1000, 2),
                        server_cpu_us_per_req=round(cpu / max(count, 1) * 1e6, 1),
                    )
                    results.append(result)
                    print(
                        f"  round {result.round} {scenario:<17} {server.name:<15} "
                        f"{result.req_per_s:>8.1f} req/s  p99 {result.p99_ms:>7.2f} ms  "
                        f"cpu {result.server_cpu_us_per_req:>6.0f} us/req  errors {errors}",
                        flush=True,
                    )
        cache_metrics = {
            s.name: await read_cache_metrics(s) for s in servers if s.name.startswith("ours")
        }
        for name, figures in cache_metrics.items():
            print(f"read cache of {name}: {figures}", flush=True)
        failed = False
        return {
            "plans": plans,
            "idle_cpu_percent": idle_cpu,
            "read_cache_metrics": cache_metrics,
            "results": [asdict(r) for r in results],
            "summary": summarize(results),
        }
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
        shutil.rmtree(data_dir, ignore_errors=True)


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    """Per scenario and server: the median over rounds, and the ratio to the baseline."""
    rows: list[dict[str, Any]] = []
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    for scenario in scenarios:
        by_server: dict[str, list[RunResult]] = {}
        for r in results:
            if r.scenario == scenario:
                by_server.setdefault(r.server, []).append(r)
        baseline = by_server.get("baseline")
        base_rps = statistics.median(r.req_per_s for r in baseline) if baseline else None
        base_cpu = (
            statistics.median(r.server_cpu_us_per_req for r in baseline) if baseline else None
        )
        for server, runs in by_server.items():
            rps = statistics.median(r.req_per_s for r in runs)
            cpu = statistics.median(r.server_cpu_us_per_req for r in runs)
            rows.append(
                {
                    "scenario": scenario,
                    "server": server,
                    "req_per_s": round(rps, 1),
                    "p99_ms": round(statistics.median(r.p99_ms for r in runs), 2),
                    "server_cpu_us_per_req": round(cpu, 1),
                    "errors": sum(r.errors for r in runs),
                    "ratio_to_baseline": round(rps / base_rps, 3) if base_rps else None,
                    # baseline CPU per request / ours: the throughput ratio a CPU-bound server
                    # process would reach with a core of its own
                    "cpu_efficiency_vs_baseline": round(base_cpu / cpu, 3) if base_cpu else None,
                }
            )
    return rows


def print_table(summary: list[dict[str, Any]]) -> None:
    header = (
        f"{'scenario':<18} {'server':<15} {'req/s':>9} {'p99 ms':>8} {'vs baseline':>12}"
        f" {'cpu us/req':>11} {'cpu vs base':>12}"
    )
    print(header)
    print("-" * len(header))
    for row in summary:
        ratio = f"{row['ratio_to_baseline']:.2f}x" if row["ratio_to_baseline"] else "-"
        cpu_ratio = (
            f"{row['cpu_efficiency_vs_baseline']:.2f}x"
            if row["cpu_efficiency_vs_baseline"]
            else "-"
        )
        print(
            f"{row['scenario']:<18} {row['server']:<15} {row['req_per_s']:>9.1f} "
            f"{row['p99_ms']:>8.2f} {ratio:>12} {row['server_cpu_us_per_req']:>11.0f} "
            f"{cpu_ratio:>12}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    for mode in ("serve-ours", "serve-baseline"):
        p = sub.add_parser(mode)
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--database-url", required=True)
        p.add_argument("--redis-url", default="")
        p.add_argument("--ray-address", default="")
        p.add_argument("--data-dir", default=".")
        p.add_argument("--jwt-secret", default="")
        p.add_argument("--log-level", default="INFO")
        p.add_argument("--rate-limit", action="store_true")
        p.add_argument("--no-read-cache", action="store_true")
        p.add_argument("--read-cache-max-age-ms", type=int, default=0)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--idle-probe", type=float, default=5.0, help="seconds of idle CPU probe")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per scenario")
    parser.add_argument(
        "--log-level",
        default="INFO",
        help="the app's log level (INFO = one JSON access line per request, as in production)",
    )
    parser.add_argument(
        "--rate-limit-variant",
        action="store_true",
        help="also run the app with its Redis rate limiter on (limit set out of reach)",
    )
    parser.add_argument(
        "--read-cache-max-age-ms",
        type=int,
        default=0,
        help="the app's MARKETPLACE_READ_CACHE_MAX_AGE_MS (0: its default)",
    )
    parser.add_argument(
        "--no-cache-variant",
        action="store_true",
        help="also run the app with its read cache off (MARKETPLACE_READ_CACHE_ENABLED=false)",
    )
    parser.add_argument(
        "--signed-in", action="store_true", help="also measure the list as a signed-in viewer"
    )
    parser.add_argument(
        "--scenarios", default="", help="comma-separated subset: list,detail,list (signed in)"
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="only seed and print EXPLAIN ANALYZE of every statement shape (no load)",
    )
    parser.add_argument(
        "--pin",
        default="",
        help="CPU affinity 'SERVER:CLIENT', e.g. '1:0' (both servers get the same CPUs)",
    )
    add_output_option(parser, RESULTS)
    parser.add_argument(
        "--py-spy",
        default="",
        help="path of a py-spy binary: sample each server during its runs (slows it slightly)",
    )
    parser.add_argument("--profile-dir", type=Path, default=Path("/tmp/read-throughput-profiles"))
    args = parser.parse_args()
    if args.mode == "serve-ours":
        serve_ours(args)
        return
    if args.mode == "serve-baseline":
        serve_baseline(args)
        return

    outcome = asyncio.run(run(args))
    if args.explain:
        return
    print()
    print_table(outcome["summary"])
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "projects": PROJECTS,
            "milestones_per_project": MILESTONES,
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "rounds": args.rounds,
            "app_log_level": args.log_level,
            "pin": args.pin or None,
        },
        **outcome,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_report(args.output, report)


if __name__ == "__main__":
    main()
