"""Verifier jobs: throughput of the verifier pool with 1 and 2 actors, and POST -> running.

Usage: ``.venv/bin/python bench/verifier.py [--smoke-jobs 200] [--npm-jobs 20] [--pools 1,2]``
(bench/README.md, "Verifier"). Everything is local, in a temporary directory removed afterwards:

1. a scratch embedded PostgreSQL and Redis, migrated; an anvil devnet with the reference
   contracts (the registry is the `address-smoke` target: it has code); a bare git repository
   with a small npm project (no dependencies, a lock file, a test that does ~0.5 s of CPU work)
   served through ``file://`` as ``MARKETPLACE_VERIFIER_GIT_BASE_URL``;
2. an owner (anvil dev account 3) with a linked wallet and a session token, and **one disputed
   project per job** (see "What changed"), before any timing: on the chain, in JSON-RPC
   batches with automine off (one ``evm_mine`` per chunk of transactions, like
   ``marketplace devnet seed``): createProject (1 milestone, no bid bond), openBidding, postBid
   by dev account 4, selectBid, submitMilestone with keccak256 of the job's ``deliveryRef``
   (the registry address for ``address-smoke``, ``bench/fixture@main`` for ``npm-test``),
   raiseDispute (LowQuality: phase ``challenged``); then the read model (the project in
   ``dispute``, its milestone, and claimed metadata whose ``milestone_policies`` fixes the job's
   policy for milestone 0) inserted as the indexer and the claim write them. The setup's time is
   printed and reported (``setup``);
3. for each pool size: the real app (``create_app``, as ``marketplace serve`` runs it, with its
   private Ray runtime and ``MARKETPLACE_VERIFIER_POOL_SIZE`` = the size) in a server process;
   jobs are requested through ``POST /v1/verifier/jobs``, and each job's times are read from the
   database: created (the request row), running (its attempt's start) and finished:
   - ``address-smoke``: ``--smoke-jobs`` requests, 8 in flight; jobs per second from the first
     request to the last completion;
   - ``npm-test``: ``--npm-jobs`` requests at once; jobs per second likewise;
   - ``pickup``: ``--pickup-jobs`` address-smoke requests at ``--pickup-rate`` per second (a pool
     that keeps up), POST -> running p50/p95.
   Each phase also reports ``service_ms`` (running -> finished: one attempt in the pool) and
   ``post_ms`` (the request's latency, as the client sees it). The baseline is the same
   workload on a pool of 1 in the same run: the pool of 2 is reported as its multiple.
Results are printed as a table and, with --output, written to bench/results/verifier.json.

What changed (verdict scope, executor split, sandbox): a job is now accepted only for the
project's active dispute read from the chain, with the owner's acceptance policy and the
submitted ``deliveryRef``, and one verdict per dispute, so the bench can no longer post every job
against one seeded project: each job gets a disputed project of its own (step 2). Per job the
service now also reads the dispute from the chain at the request and twice in the attempt
(before and after the policy), runs the policy on the worker's paired ``verifier-executor-{i}``
Ray actor (one Ray call per job), and runs ``npm ci``/``npm test`` inside bubblewrap (offline;
the fixture has no dependencies).
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
from collections import Counter
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
# A disputed project's read model as the indexer writes it (milestone 0 disputed, phase
# challenged), its milestone, and the claimed metadata fixing milestone 0's acceptance policy.
SEED_PROJECT = """
INSERT INTO projects (
    project_address, chain_id, owner_address, status, project_mode, bidding_access, config_hash,
    selected_builder_address, milestone_count, bid_bond_usdc, allowlist, dispute_phase,
    dispute_reason, dispute_raised_by, dispute_milestone_index, created_block, created_log_index,
    created_at, updated_at, snapshot_block)
VALUES ($1, $2, $3, 'dispute', 'standard', 'open', $4, $5, 1, 0, '{}'::text[], 'challenged',
        'low_quality', $3, 0, $6, 0, now(), now(), $6)
"""
SEED_MILESTONE = """
INSERT INTO milestones (project_address, milestone_index, status, payout_usdc, submitted_at,
                        delivery_ref_hash)
VALUES ($1, 0, 'disputed', 100, now(), $2)
"""
SEED_METADATA = """
INSERT INTO project_metadata (
    project_address, owner_address, title, project_mode, bidding_access, claimed_by, claim_mode,
    hash_version, tx_hash, config_hash, milestone_policies)
VALUES ($1, $2, 'Bench project', 'standard', 'open', $3, 'direct', 'v1_direct', $4, $4,
        $5::text::jsonb)
"""
OWNER_ACCOUNT, WORKER_ACCOUNT = 3, 4  # anvil dev accounts (the node signs for them)
PAYOUT = 100 * 10**6  # one milestone of 100 TestUSDC (6 decimals)
DURATION = 3 * 86_400
BLOCK_GAS = 300_000_000  # gas sealed per block while setting up, as `marketplace devnet seed`
SMOKE, NPM = "address-smoke", "npm-test"
NPM_REF = "bench/fixture@main"

Call = tuple[str, str, Any, tuple[Any, ...]]  # sender, to, AbiFunction, args


class ChainSetup:
    """Disputed projects on the devnet, quickly: JSON-RPC batches of ``eth_sendTransaction``
    with locally managed nonces, automine off and one ``evm_mine`` per ``BLOCK_GAS`` of
    transactions (the block gas limit raised meanwhile); gas estimated once per function;
    success read from the blocks' logs (every call here emits an event), as
    :mod:`marketplace_devstack.devnet.seed` does. Senders: anvil dev accounts 3 (owner) and 4
    (worker)."""

    def __init__(self, rpc_url: str, data_dir: Path, registry: str) -> None:
        from marketplace_devstack.devnet.client import DevnetClient

        self.client = DevnetClient.from_data_dir(data_dir, rpc_url=rpc_url, registry=registry)
        self.rpc = self.client.rpc
        self.owner = self.client.dev_account(OWNER_ACCOUNT)
        self.worker = self.client.dev_account(WORKER_ACCOUNT)
        self.nonces: dict[str, int] = {}
        self.gas: dict[str, int] = {}
        self.transactions = 0
        self.blocks = 0

    def close(self) -> None:
        self.client.close()

    def disputes(self, refs: list[str]) -> list[str]:
        """One standard project per ``deliveryRef`` in ``refs`` (1 milestone, no bid bond, the
        worker selected), milestone 0 submitted with keccak256 of the ref's UTF-8 bytes and
        disputed by the owner (LowQuality: phase ``challenged``). Lower-case addresses, in
        order."""
        from eth_utils import keccak

        from marketplace.chain.enums import DisputePhase, DisputeReason, ProjectStatus
        from marketplace_devstack.devnet.client import MAX_UINT256

        usdc, reg = self.client.usdc_abi.functions, self.client.registry_abi.functions
        prj = self.client.project_abi.functions
        n, owner, worker = len(refs), self.owner, self.worker
        automine = bool(self.rpc.call("anvil_getAutomine"))
        head = self.rpc.call("eth_getBlockByNumber", ["latest", False])
        first_block, gas_limit = int(head["number"], 16), int(head["gasLimit"], 16)
        self.rpc.call("evm_setAutomine", [False])
        self.rpc.call("evm_setBlockGasLimit", [hex(2 * BLOCK_GAS)])
        try:
            senders = [owner, worker]
            counts = self.rpc.batch([("eth_getTransactionCount", [a, "pending"]) for a in senders])
            self.nonces = {a: int(c, 16) for a, c in zip(senders, counts, strict=True)}
            self.phase(
                [
                    (owner, self.client.usdc, usdc["mint"], (owner, 2 * n * PAYOUT)),
                    (owner, self.client.usdc, usdc["approve"], (self.client.escrow, MAX_UINT256)),
                ]
            )
            salt = os.urandom(8).hex()
            created = self.phase(
                [
                    (
                        owner,
                        self.client.registry,
                        reg["createProject"],
                        (keccak(text=f"bench-verifier:{salt}:{i}"), False, 0, 1),
                    )
                    for i in range(n)
                ]
            )
            event = self.client.registry_abi.events["ProjectCreated"]
            projects = [
                next(
                    str(event.decode_log(x)["project"])
                    for x in logs
                    if x["topics"][0] == event.topic0
                )
                for logs in created
            ]
            steps: list[tuple[str, str, Any]] = [
                (owner, "openBidding", lambda i: ()),
                (worker, "postBid", lambda i: ([PAYOUT], [DURATION], keccak(text=f"bid-{i}"))),
                (owner, "selectBid", lambda i: (worker,)),
                (worker, "submitMilestone", lambda i: (0, keccak(refs[i].encode("utf-8")))),
                (
                    owner,
                    "raiseDispute",
                    lambda i: (0, int(DisputeReason.LOW_QUALITY), keccak(text="bench")),
                ),
            ]
            for sender, name, args in steps:
                self.phase([(sender, projects[i], prj[name], args(i)) for i in range(n)])
        finally:
            self.rpc.call("evm_setBlockGasLimit", [hex(gas_limit)])
            self.rpc.call("evm_mine")
            if automine:
                self.rpc.call("evm_setAutomine", [True])
        self.blocks = int(self.rpc.call("eth_blockNumber"), 16) - first_block
        wrong = [
            p
            for p, s in zip(projects, self.client.states(projects), strict=True)
            if s["status"] != ProjectStatus.DISPUTE or s["disputePhase"] != DisputePhase.CHALLENGED
        ]
        if wrong:
            raise RuntimeError(f"{len(wrong)} projects are not disputed (e.g. {wrong[0]})")
        return [p.lower() for p in projects]

    def phase(self, calls: list[Call]) -> list[list[dict[str, Any]]]:
        """Send ``calls`` and mine them; the logs of each, in order (a call without logs
        failed: raises with its receipt's status)."""
        from marketplace_devstack.devnet.client import DevnetRpcError as RpcError
        from marketplace_devstack.devnet.client import decode_revert, revert_data_of

        first = int(self.rpc.call("eth_blockNumber"), 16) + 1
        txs = []
        for sender, to, fn, args in calls:
            tx = {"from": sender, "to": to, "data": fn.encode_call(*args)}
            gas = self.gas.get(fn.signature)
            if gas is None:
                try:
                    estimate = int(self.rpc.call("eth_estimateGas", [tx]), 16)
                except RpcError as exc:
                    why = decode_revert(revert_data_of(exc)) or str(exc)
                    raise RuntimeError(f"{fn.signature} would revert: {why}") from None
                gas = self.gas[fn.signature] = estimate * 5 // 4 + 40_000
            tx["gas"] = hex(gas)
            txs.append(tx)
        hashes: list[str] = []
        chunk: list[dict[str, Any]] = []
        chunk_gas = 0
        for tx in txs:
            if chunk and chunk_gas + int(tx["gas"], 16) > BLOCK_GAS:
                hashes += self.send_and_mine(chunk)
                chunk, chunk_gas = [], 0
            chunk.append(tx)
            chunk_gas += int(tx["gas"], 16)
        if chunk:
            hashes += self.send_and_mine(chunk)
        for _ in range(50):  # a transaction left in the pool would be a nonce gap
            status = self.rpc.call("txpool_status")
            if int(status["pending"], 16) == 0 and int(status["queued"], 16) == 0:
                break
            self.rpc.call("evm_mine")
        last = int(self.rpc.call("eth_blockNumber"), 16)
        by_tx: dict[str, list[dict[str, Any]]] = {}
        for start in range(first, last + 1, 50):
            span = {"fromBlock": hex(start), "toBlock": hex(min(last, start + 49))}
            for log in self.rpc.call("eth_getLogs", [span]):
                by_tx.setdefault(log["transactionHash"], []).append(log)
        failed = [h for h in hashes if h not in by_tx]
        if failed:
            receipts = self.rpc.batch([("eth_getTransactionReceipt", [h]) for h in failed[:3]])
            shown = [(h, r and r["status"]) for h, r in zip(failed, receipts, strict=False)]
            raise RuntimeError(f"{len(failed)} of {len(hashes)} transactions failed: {shown}")
        return [by_tx[h] for h in hashes]

    def send_and_mine(self, chunk: list[dict[str, Any]]) -> list[str]:
        for tx in chunk:
            tx["nonce"] = hex(self.nonces[tx["from"]])
            self.nonces[tx["from"]] += 1
        replies = self.rpc.batch_raw([("eth_sendTransaction", [tx]) for tx in chunk], chunk=1000)
        refused = [r["error"] for r in replies if "error" in r]
        if refused:
            raise RuntimeError(f"eth_sendTransaction refused: {refused[0]}")
        self.rpc.call("evm_mine")
        self.transactions += len(chunk)
        return [r["result"] for r in replies]


async def seed(dsn: str, owner: str, worker: str, projects: list[tuple[str, str, str]]) -> str:
    """The owner's user with its linked wallet (returns its session token) and the read model of
    ``projects`` (address, policy, deliveryRef), as the indexer and the claim write them."""
    from eth_utils import keccak

    from marketplace.auth import issue_session_token
    from marketplace.identity.legal import load_catalog
    from marketplace.storage.repositories import legal as legal_repo

    user_id = uuid.uuid4()
    owner, worker = owner.lower(), worker.lower()
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(SEED, user_id, owner, CHAIN_ID)
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
            config_hash = "0x" + "c" * 64
            await conn.executemany(
                SEED_PROJECT,
                [
                    (address, CHAIN_ID, owner, config_hash, worker, block + i)
                    for i, (address, _, _) in enumerate(projects)
                ],
            )
            await conn.executemany(
                SEED_MILESTONE,
                [(address, "0x" + keccak(ref.encode()).hex()) for address, _, ref in projects],
            )
            await conn.executemany(
                SEED_METADATA,
                [
                    (
                        address,
                        owner,
                        user_id,
                        config_hash,
                        json.dumps([{"milestoneIndex": 0, "checkPolicyId": policy}]),
                    )
                    for address, policy, _ in projects
                ],
            )
    finally:
        await conn.close()
    return issue_session_token(
        JWT_SECRET, user_id, email_verified=True, ttl_seconds=6 * 3600, now=int(time.time())
    )


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
SELECT v.id, CASE WHEN v.completed_at IS NOT NULL THEN 'completed' END AS done, j.status,
       j.attempt_count,
       extract(epoch FROM v.created_at)::float8 AS created,
       extract(epoch FROM j.started_at)::float8 AS running,
       extract(epoch FROM coalesce(v.completed_at, j.finished_at))::float8 AS finished,
       v.passes, j.last_error, v.raw_evidence -> 'attempts' -> -1 ->> 'actorName' AS actor
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
) -> tuple[list[uuid.UUID], list[float]]:
    """The new jobs' ids and each request's latency (s): a request now reads the dispute from
    the chain before it answers."""
    ids: list[uuid.UUID] = []
    latencies: list[float] = []
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
            sent_at = time.monotonic()
            async with session.post(
                server.url + "/v1/verifier/jobs",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            ) as resp:
                answer = await resp.json()
                latencies.append(time.monotonic() - sent_at)
                if resp.status != 202:
                    raise RuntimeError(f"POST answered {resp.status}: {answer}")
                ids.append(uuid.UUID(answer["jobId"]))

    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return ids, latencies


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


def ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 0.5) * 1000, 1),
        "p95": round(percentile(values, 0.95) * 1000, 1),
        "max": round(percentile(values, 1.0) * 1000, 1),
    }


def summarize(name: str, rows: list[asyncpg.Record], posts: list[float]) -> dict[str, Any]:
    completed = [r for r in rows if r["done"] == "completed"]
    failed = [r for r in rows if r["done"] is None]
    first = min((r["created"] for r in rows), default=0.0)
    last = max((r["finished"] for r in completed), default=first)
    pickup = [r["running"] - r["created"] for r in completed if r["attempt_count"] == 1]
    # One attempt's time in the pool: chain reads, the executor's policy run, signing, writing.
    service = [r["finished"] - r["running"] for r in completed if r["attempt_count"] == 1]
    return {
        "phase": name,
        "jobs": len(rows),
        "completed": len(completed),
        "passed": sum(1 for r in completed if r["passes"]),
        "not_completed": len(failed),
        "errors": sorted({r["last_error"] for r in failed if r["last_error"]})[:3],
        "jobs_per_s": round(len(completed) / (last - first), 2) if last > first else 0.0,
        "wall_s": round(last - first, 2),
        "pickup_ms": ms(pickup),
        "service_ms": ms(service),
        "post_ms": ms(posts),
        # Which worker actors completed the jobs (a pool of 2 should use both).
        "by_actor": dict(sorted(Counter(str(r["actor"]) for r in completed).items())),
    }


def job_counts(args: argparse.Namespace) -> dict[str, tuple[str, int]]:
    """Each phase of a pool (the warm-up first): its policy and number of jobs."""
    return {
        "warm": (SMOKE, 2),
        "address-smoke": (SMOKE, args.smoke_jobs),
        "npm-test": (NPM, args.npm_jobs),
        "pickup": (SMOKE, args.pickup_jobs),
    }


def body(project: str, policy: str, chain: dict[str, str]) -> dict[str, Any]:
    return {
        "projectAddress": project,
        "milestoneIndex": 0,
        "checkPolicyId": policy,
        "deliveryRef": chain["registry"] if policy == SMOKE else NPM_REF,
        "chainId": CHAIN_ID,
    }


async def run_pool(
    args: argparse.Namespace,
    size: int,
    dsn: str,
    redis_url: str,
    chain: dict[str, str],
    data_dir: Path,
    token: str,
    bodies: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """``bodies``: each phase's requests, one disputed project each (see job_counts)."""
    from marketplace_devstack.embedded.procs import free_port

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
    phases = []
    try:
        await wait_ready(server)
        async with aiohttp.ClientSession() as session:
            # Warm-up: the pool's actors and executors start with the app, asynchronously.
            warm, _ = await post_jobs(session, server, token, bodies["warm"], in_flight=1)
            rows = await wait_done(dsn, warm, 180)
            if any(r["done"] is None for r in rows):
                raise RuntimeError(f"warm-up failed: {[r['last_error'] for r in rows]}")
            print(f"pool {size}: warm", flush=True)
            for name, in_flight, rate in (
                ("address-smoke", IN_FLIGHT, None),
                ("npm-test", max(1, args.npm_jobs), None),
                ("pickup", 1, args.pickup_rate),
            ):
                if not bodies[name]:
                    continue
                ids, posts = await post_jobs(
                    session, server, token, bodies[name], in_flight=in_flight, rate=rate
                )
                rows = await wait_done(dsn, ids, 120 + len(ids) * 10)
                phase = {"pool": size, **summarize(name, rows, posts), "load": load_average()}
                print(json.dumps(phase), flush=True)
                phases.append(phase)
    finally:
        stop_server(server)
    return phases


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from marketplace.config import Settings
    from marketplace.storage.migrations import migrate_dsn
    from marketplace_devstack.devnet.node import start_devnet
    from marketplace_devstack.embedded.postgres import EmbeddedPostgres
    from marketplace_devstack.embedded.redis import EmbeddedRedis

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
        # One disputed project per job (one verdict per dispute), all before any timing.
        wanted = [
            (size, name, policy)
            for size in args.pools
            for name, (policy, count) in job_counts(args).items()
            for _ in range(count)
        ]
        refs = [chain["registry"] if policy == SMOKE else NPM_REF for _, _, policy in wanted]
        began = time.monotonic()
        setup = ChainSetup(chain["rpc_url"], data_dir, chain["registry"])
        try:
            projects = setup.disputes(refs)
        finally:
            setup.close()
        chain_s = time.monotonic() - began
        token = await seed(
            postgres.dsn,
            setup.owner,
            setup.worker,
            [(p, w[2], ref) for p, w, ref in zip(projects, wanted, refs, strict=True)],
        )
        setup_s = time.monotonic() - began
        setup_report = {
            "disputed_projects": len(projects),
            "transactions": setup.transactions,
            "blocks": setup.blocks,
            "chain_s": round(chain_s, 2),
            "read_model_s": round(setup_s - chain_s, 2),
            "total_s": round(setup_s, 2),
        }
        print(
            f"setup: {len(projects)} disputed projects ({setup.transactions} transactions in"
            f" {setup.blocks} blocks) in {chain_s:.1f} s on the chain + {setup_s - chain_s:.1f} s"
            f" read model = {setup_s:.1f} s; load {load_average()}",
            flush=True,
        )
        phases: list[dict[str, Any]] = []
        for size in args.pools:
            bodies: dict[str, list[dict[str, Any]]] = {name: [] for name in job_counts(args)}
            for project, (pool, name, policy) in zip(projects, wanted, strict=True):
                if pool == size:
                    bodies[name].append(body(project, policy, chain))
            phases += await run_pool(
                args, size, postgres.dsn, redis_server.url, chain, data_dir, token, bodies
            )
        return {"phases": phases, "setup": setup_report}
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
        f" {'wall s':>7} {'pickup p50':>11} {'p95':>8} {'max':>8} {'service p50':>12}"
        f" {'POST p50':>9}"
    )
    for p in phases:
        pick = p["pickup_ms"]
        print(
            f"{p['pool']:>4} {p['phase']:<14} {p['jobs']:>5} {p['completed']:>5}"
            f" {p['passed']:>5} {p['jobs_per_s']:>8} {p['wall_s']:>7}"
            f" {pick['p50']:>9} ms {pick['p95']:>5} ms {pick['max']:>5} ms"
            f" {p['service_ms']['p50']:>9} ms {p['post_ms']['p50']:>6} ms"
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
    load_before = load_average()
    print(f"load before: {load_before}", flush=True)
    outcome = asyncio.run(run(args))
    scaling = ratios(outcome["phases"])
    print_table(outcome["phases"], scaling)
    write_report(
        args.output,
        {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_before": load_before,
                "load_after": load_average(),
            },
            "setup": outcome["setup"],
            "phases": outcome["phases"],
            "scaling": scaling,
            "targets": {"npm-test pool 2 / pool 1": ">= 1.6", "pickup p95 ms": "< 250"},
        },
    )


if __name__ == "__main__":
    main()
