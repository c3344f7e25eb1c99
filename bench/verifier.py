"""Verifier jobs: throughput of the verifier pool with 1 and 2 actors, and POST -> running.

Usage: ``.venv/bin/python bench/verifier.py [--smoke-jobs 200] [--npm-jobs 20] [--pools 1,2]``
(bench/README.md, "Verifier"). Everything is local, in a temporary directory removed afterwards:

1. a scratch embedded PostgreSQL and Redis, migrated; an anvil devnet with the reference
   contracts (the registry is the `address-smoke` target: it has code); a bare git repository
   with a small npm project (no dependencies, a lock file, a test that does ~0.5 s of CPU work)
   served through ``file://`` as ``MARKETPLACE_VERIFIER_GIT_BASE_URL``;
2. an owner with a linked wallet and an indexed project (rows inserted as the indexer writes
   them), and a session token;
3. for each pool size: the real app (``create_app``, as ``marketplace serve`` runs it, with its
   private Ray runtime and ``MARKETPLACE_VERIFIER_POOL_SIZE`` = the size) in a server process;
   jobs are requested through ``POST /v1/verifier/jobs``, and each job's times are read from the
   database: created (the request row), running (its attempt's start) and finished:
   - ``address-smoke``: ``--smoke-jobs`` requests, 8 in flight; jobs per second from the first
     request to the last completion;
   - ``npm-test``: ``--npm-jobs`` requests at once; jobs per second likewise;
   - ``pickup``: ``--pickup-jobs`` address-smoke requests at ``--pickup-rate`` per second (a pool
     that keeps up), POST -> running p50/p95.
   The baseline is the same workload on a pool of 1 in the same run: the pool of 2 is reported
   as its multiple.
Results are printed as a table and, with --output, written to bench/results/verifier.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402

from bench.messaging import (  # noqa: E402
    Server,
    load_average,
    percentile,
    start_server,
    stop_server,
    wait_ready,
)
from bench.report import add_output_option, write_report  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "verifier.json"
JWT_SECRET = "bench-secret-" + "v" * 32
IN_FLIGHT = 8
CHAIN_ID = 31337

PACKAGE_JSON = {
    "name": "bench-fixture",
    "version": "1.0.0",
    "private": True,
    "scripts": {"test": "node test.js"},
}
PACKAGE_LOCK = {
    "name": "bench-fixture",
    "version": "1.0.0",
    "lockfileVersion": 3,
    "requires": True,
    "packages": {"": {"name": "bench-fixture", "version": "1.0.0"}},
}
# About half a second of CPU: a test suite's work, so the pool's scaling is about CPUs.
TEST_JS = """
let x = 0;
for (let i = 0; i < 60_000_000; i++) { x = (x + i * 7) % 1000003; }
if (x < 0) { process.exit(1); }
console.log("ok", x);
"""


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.test"}
    env |= {"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.test"}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_fixture_repo(base: Path) -> None:
    """``<base>/bench/fixture.git``: a bare repository whose ``main`` passes ``npm test``."""
    work = base / "work"
    work.mkdir(parents=True)
    (work / "package.json").write_text(json.dumps(PACKAGE_JSON, indent=2) + "\n")
    (work / "package-lock.json").write_text(json.dumps(PACKAGE_LOCK, indent=2) + "\n")
    (work / "test.js").write_text(TEST_JS)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "fixture", cwd=work)
    (base / "bench").mkdir()
    git("clone", "-q", "--bare", str(work), str(base / "bench" / "fixture.git"), cwd=base)


SEED = """
WITH u AS (INSERT INTO users (user_id, email_verified) VALUES ($1, true))
INSERT INTO wallet_links (user_id, wallet_address, chain_id, verification_method)
VALUES ($1, $2, $3, 'eip191_sign_message')
"""
SEED_PROJECT = """
INSERT INTO projects (
    project_address, chain_id, owner_address, status, project_mode, bidding_access, config_hash,
    selected_builder_address, milestone_count, bid_bond_usdc, allowlist, created_block,
    created_log_index, created_at, updated_at, snapshot_block)
VALUES ($1, $2, $3, 'building', 'standard', 'open', '0x' || repeat('c', 64), NULL, 3, 100,
        '{}'::text[], $4, 0, now(), now(), $4)
"""


async def seed(dsn: str) -> tuple[str, str]:
    """An owner (returns its session token) and its indexed project (returns the address)."""
    from marketplace.auth import issue_session_token
    from marketplace.identity.legal import load_catalog
    from marketplace.storage.repositories import legal as legal_repo

    user_id = uuid.uuid4()
    wallet = "0x" + os.urandom(20).hex()
    project = "0x" + os.urandom(20).hex()
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(SEED, user_id, wallet, CHAIN_ID)
            await legal_repo.record(
                conn,
                user_id,
                load_catalog({}).required,
                kind="explicit",
                accepted_via="session",
                api_key_id=None,
                trigger_route=None,
            )
            block = int(await conn.fetchval("SELECT count(*) FROM projects")) + 1
            await conn.execute(SEED_PROJECT, project, CHAIN_ID, wallet, block)
    finally:
        await conn.close()
    token = issue_session_token(
        JWT_SECRET, user_id, email_verified=True, ttl_seconds=6 * 3600, now=int(time.time())
    )
    return token, project


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
        ray_address="",
        ray_namespace=f"marketplace-bench-verifier-{args.pool_size}",
        jwt_secret=SecretStr(JWT_SECRET),
        notification_unsubscribe_secret=SecretStr("bench-unsubscribe-" + "u" * 32),
        notification_pipeline_enabled=False,
        indexer_enabled=False,
        rate_limit_enabled=False,
        chain_rpc_url=args.rpc_url,
        chain_id=CHAIN_ID,
        registry_address=args.registry,
        verifier_private_key=SecretStr(args.verifier_key),
        verifier_pool_size=args.pool_size,
        verifier_git_base_url=args.git_base_url,
        verifier_allow_private_hosts=True,
        jobs_workers={"notifications": 0},
        log_level=args.log_level,
    )
    configure_logging(settings.log_level, settings.log_json)
    web.run_app(create_app(settings), host="127.0.0.1", port=args.port, print=None, access_log=None)


def start_ours(port: int, extra: list[str], log: Path) -> Server:
    return start_server("ours", "serve-ours", port, extra, log, script=__file__)


# --- measuring --------------------------------------------------------------------------------

TIMES = """
SELECT v.id, v.status AS done, j.status, j.attempt_count,
       extract(epoch FROM v.created_at)::float8 AS created,
       extract(epoch FROM j.started_at)::float8 AS running,
       extract(epoch FROM coalesce(v.completed_at, j.finished_at))::float8 AS finished,
       v.passes, j.last_error
FROM verifier_jobs v JOIN jobs j ON j.id = v.job_id
WHERE v.id = any($1::uuid[])
"""


async def post_jobs(
    session: aiohttp.ClientSession,
    server: Server,
    token: str,
    bodies: list[dict[str, Any]],
    *,
    in_flight: int,
    rate: float | None = None,
) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    queue = iter(bodies)
    started = time.monotonic()
    sent = 0

    async def lane() -> None:
        nonlocal sent
        for body in queue:
            if rate:
                due = started + sent / rate
                sent += 1
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            async with session.post(
                server.url + "/v1/verifier/jobs",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            ) as resp:
                answer = await resp.json()
                if resp.status != 202:
                    raise RuntimeError(f"POST answered {resp.status}: {answer}")
                ids.append(uuid.UUID(answer["jobId"]))

    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return ids


async def wait_done(dsn: str, ids: list[uuid.UUID], within: float) -> list[asyncpg.Record]:
    deadline = time.monotonic() + within
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            rows = await conn.fetch(TIMES, ids)
            pending = [r for r in rows if r["done"] is None and r["status"] != "failed"]
            if not pending or time.monotonic() > deadline:
                return rows
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


def summarize(name: str, rows: list[asyncpg.Record]) -> dict[str, Any]:
    completed = [r for r in rows if r["done"] == "completed"]
    failed = [r for r in rows if r["done"] is None]
    first = min((r["created"] for r in rows), default=0.0)
    last = max((r["finished"] for r in completed), default=first)
    pickup = [r["running"] - r["created"] for r in completed if r["attempt_count"] == 1]
    return {
        "phase": name,
        "jobs": len(rows),
        "completed": len(completed),
        "passed": sum(1 for r in completed if r["passes"]),
        "not_completed": len(failed),
        "errors": sorted({r["last_error"] for r in failed if r["last_error"]})[:3],
        "jobs_per_s": round(len(completed) / (last - first), 2) if last > first else 0.0,
        "wall_s": round(last - first, 2),
        "pickup_ms": {
            "p50": round(percentile(pickup, 0.5) * 1000, 1),
            "p95": round(percentile(pickup, 0.95) * 1000, 1),
            "max": round(percentile(pickup, 1.0) * 1000, 1),
        },
    }


async def run_pool(
    args: argparse.Namespace,
    size: int,
    dsn: str,
    redis_url: str,
    chain: dict[str, str],
    data_dir: Path,
) -> list[dict[str, Any]]:
    from marketplace.embedded.procs import free_port

    token, project = await seed(dsn)
    server = start_ours(
        free_port(),
        [
            "--database-url",
            dsn,
            "--redis-url",
            redis_url,
            "--data-dir",
            str(data_dir),
            "--rpc-url",
            chain["rpc_url"],
            "--registry",
            chain["registry"],
            "--verifier-key",
            chain["key"],
            "--git-base-url",
            chain["git_base_url"],
            "--pool-size",
            str(size),
            "--log-level",
            args.log_level,
        ],
        data_dir / f"ours-{size}.log",
    )
    smoke = {
        "projectAddress": project,
        "milestoneIndex": 0,
        "checkPolicyId": "address-smoke",
        "deliveryRef": chain["registry"],
        "chainId": CHAIN_ID,
    }
    npm = {**smoke, "checkPolicyId": "npm-test", "deliveryRef": "bench/fixture@main"}
    phases = []
    try:
        await wait_ready(server)
        async with aiohttp.ClientSession() as session:
            # Warm-up: the pool's actors start with the app, asynchronously.
            warm = await post_jobs(session, server, token, [smoke] * 2, in_flight=1)
            rows = await wait_done(dsn, warm, 180)
            if any(r["done"] is None for r in rows):
                raise RuntimeError(f"warm-up failed: {[r['last_error'] for r in rows]}")
            print(f"pool {size}: warm", flush=True)
            for name, bodies, in_flight, rate in (
                ("address-smoke", [smoke] * args.smoke_jobs, IN_FLIGHT, None),
                ("npm-test", [npm] * args.npm_jobs, args.npm_jobs, None),
                ("pickup", [smoke] * args.pickup_jobs, 1, args.pickup_rate),
            ):
                if not bodies:
                    continue
                ids = await post_jobs(
                    session, server, token, bodies, in_flight=in_flight, rate=rate
                )
                rows = await wait_done(dsn, ids, 120 + len(bodies) * 10)
                phase = {"pool": size, **summarize(name, rows), "load": load_average()}
                print(json.dumps(phase), flush=True)
                phases.append(phase)
    finally:
        stop_server(server)
    return phases


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from marketplace.config import Settings
    from marketplace.devnet.node import start_devnet
    from marketplace.embedded.postgres import EmbeddedPostgres
    from marketplace.embedded.redis import EmbeddedRedis
    from marketplace.storage.migrations import migrate_dsn

    data_dir = Path(tempfile.mkdtemp(prefix="mkt-bench-verifier-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    postgres, redis_server = EmbeddedPostgres(data_dir), EmbeddedRedis(data_dir)
    started: list[Any] = []
    try:
        postgres.start()
        redis_server.start()
        await migrate_dsn(postgres.dsn)
        chain_settings = start_devnet(Settings(data_dir=data_dir), started)
        assert chain_settings.verifier_private_key is not None
        repos = data_dir / "repos"
        make_fixture_repo(repos)
        chain = {
            "rpc_url": chain_settings.chain_rpc_url,
            "registry": chain_settings.registry_address,
            "key": chain_settings.verifier_private_key.get_secret_value(),
            "git_base_url": f"file://{repos}",
        }
        phases: list[dict[str, Any]] = []
        for size in args.pools:
            phases += await run_pool(args, size, postgres.dsn, redis_server.url, chain, data_dir)
        return {"phases": phases}
    finally:
        for server in reversed(started):
            server.stop()
        redis_server.stop()
        postgres.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def ratios(phases: list[dict[str, Any]]) -> dict[str, float]:
    """jobs/s of the largest pool over the pool of 1, per phase."""
    by = {(p["pool"], p["phase"]): p for p in phases}
    sizes = sorted({p["pool"] for p in phases})
    out = {}
    if len(sizes) > 1 and sizes[0] == 1:
        for name in ("address-smoke", "npm-test"):
            one, many = by.get((1, name)), by.get((sizes[-1], name))
            if one and many and one["jobs_per_s"]:
                out[name] = round(many["jobs_per_s"] / one["jobs_per_s"], 2)
    return out


def print_table(phases: list[dict[str, Any]], scaling: dict[str, float]) -> None:
    print(
        f"\n{'pool':>4} {'phase':<14} {'jobs':>5} {'done':>5} {'pass':>5} {'jobs/s':>8}"
        f" {'wall s':>7} {'pickup p50':>11} {'p95':>8} {'max':>8}"
    )
    for p in phases:
        pick = p["pickup_ms"]
        print(
            f"{p['pool']:>4} {p['phase']:<14} {p['jobs']:>5} {p['completed']:>5}"
            f" {p['passed']:>5} {p['jobs_per_s']:>8} {p['wall_s']:>7}"
            f" {pick['p50']:>9} ms {pick['p95']:>5} ms {pick['max']:>5} ms"
        )
    for name, ratio in scaling.items():
        print(f"{name}: the largest pool runs {ratio}x the jobs per second of a pool of 1")
    pickup = [p for p in phases if p["phase"] == "pickup"]
    if pickup:
        print(
            "pickup p95 (POST -> running, target < 250 ms): "
            + ", ".join(f"pool {p['pool']}: {p['pickup_ms']['p95']} ms" for p in pickup)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    serve = sub.add_parser("serve-ours")
    for name in ("--database-url", "--redis-url", "--rpc-url", "--registry", "--verifier-key"):
        serve.add_argument(name, required=True)
    serve.add_argument("--git-base-url", required=True)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--pool-size", type=int, required=True)
    serve.add_argument("--data-dir", default=".")
    serve.add_argument("--log-level", default="INFO")
    parser.add_argument("--smoke-jobs", type=int, default=200)
    parser.add_argument("--npm-jobs", type=int, default=20)
    parser.add_argument("--pickup-jobs", type=int, default=40)
    parser.add_argument("--pickup-rate", type=float, default=4.0, help="pickup requests per s")
    parser.add_argument(
        "--pools", type=lambda text: [int(x) for x in text.split(",")], default=[1, 2]
    )
    parser.add_argument("--log-level", default="WARNING", help="the app's log level")
    add_output_option(parser, RESULTS)
    args = parser.parse_args()
    if args.mode == "serve-ours":
        serve_ours(args)
        return
    outcome = asyncio.run(run(args))
    scaling = ratios(outcome["phases"])
    print_table(outcome["phases"], scaling)
    write_report(
        args.output,
        {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_after": load_average(),
            },
            "phases": outcome["phases"],
            "scaling": scaling,
            "targets": {"npm-test pool 2 / pool 1": ">= 1.6", "pickup p95 ms": "< 250"},
        },
    )


if __name__ == "__main__":
    main()
