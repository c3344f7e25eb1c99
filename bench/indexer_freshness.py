"""Indexer freshness: transaction receipt -> change visible through ``GET /v1/projects/{addr}``.

Usage: ``.venv/bin/python bench/indexer_freshness.py [--transactions 100] [--poll-ms 1000]``
(see bench/README.md). Everything is local and loopback-only:

1. a scratch embedded PostgreSQL (migrated) and Redis, and an anvil (automine) with the reference
   contracts; the accounts used are funded and have approved the escrow up front, so every
   measured step is exactly one transaction;
2. the real app (``create_app``, every middleware) served by ``web.AppRunner`` on a free loopback
   port, with its private local Ray; in the indexer modes the app starts the ``chain-indexer``
   actor itself, as in production (``MARKETPLACE_INDEXER_ENABLED``);
3. ``--transactions`` transactions sent one at a time (``DevnetClient``: create, open, select,
   submit and approve each milestone, ...), each changing something the project read model
   shows; after each receipt this process polls ``GET /v1/projects/{addr}`` every 5 ms until the
   change is visible and records the delay. A bid (invisible in the read model) is sent unmeasured
   before each selection, and the next measurement waits until it is indexed. Before each
   measured transaction a random pause of 0..poll interval decouples it from the poll timer.

Modes, each with a fresh app (and Ray), on the same chain and database:

- ``direct`` (baseline): no indexer actor; right after the receipt this process runs
  ``IndexerEngine.sync_once()`` itself, then polls. The floor: one indexer batch plus the read.
- ``subscription``: the actor with its ``newHeads`` follower (anvil offers ``eth_subscribe``).
- ``polling``: the actor with the WebSocket URL pointing at a closed port (a node without
  ``newHeads``), so only the poll timer wakes it.

Targets (issue 5): p95 < 1 s with the subscription; p95 < poll interval + 1 s polling only.
Results are printed as a table and, with --output, written to bench/results/indexer_freshness.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
from aiohttp import web  # noqa: E402
from pydantic import SecretStr  # noqa: E402
from web3 import Web3  # noqa: E402

from bench.report import add_output_option, write_report  # noqa: E402
from marketplace.chain.rpc import JsonRpcClient  # noqa: E402
from marketplace.config import Settings  # noqa: E402
from marketplace.indexer.engine import IndexerConfig, IndexerEngine  # noqa: E402
from marketplace.storage.migrations import migrate_dsn  # noqa: E402
from marketplace.storage.pool import create_pool  # noqa: E402
from marketplace_devstack.devnet.anvil import AnvilProcess  # noqa: E402
from marketplace_devstack.devnet.client import (  # noqa: E402
    DAY,
    MAX_UINT256,
    USDC,
    DevnetClient,
    TxResult,
    label_hash,
)
from marketplace_devstack.devnet.deploy import Deployment, deploy_dev_defaults  # noqa: E402
from marketplace_devstack.embedded.postgres import EmbeddedPostgres  # noqa: E402
from marketplace_devstack.embedded.procs import free_port  # noqa: E402
from marketplace_devstack.embedded.redis import EmbeddedRedis  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "indexer_freshness.json"
HTTP_POLL_SECONDS = 0.005
VISIBLE_TIMEOUT_SECONDS = 30.0
OWNERS = (3, 6)
BIDDER = 4
MODES = ("direct", "subscription", "polling")

log = logging.getLogger("bench.freshness")


# --- the measured transactions ----------------------------------------------------------------


Check = Callable[[int, dict[str, Any] | None], bool]


@dataclass
class Step:
    name: str
    send: Callable[[], Any]  # runs in a worker thread; returns the TxResult
    check: Check | None  # None: not measured (invisible in the read model)
    project_of: Callable[[Any], str] | None = None


class Workload:
    """Endless sequence of steps: for each project create, open, (bid), select, then submit
    and approve every milestone."""

    def __init__(self, client: DevnetClient, milestones: int) -> None:
        self.client = client
        self.milestones = milestones
        self.project: str | None = None
        self.count = 0

    def steps(self) -> Iterator[Step]:
        c, m = self.client, self.milestones
        while True:
            self.count += 1
            owner = c.dev_account(OWNERS[self.count % len(OWNERS)])
            bidder = c.dev_account(BIDDER)
            config = label_hash(f"freshness-{time.time_ns()}")

            def created(result: Any) -> str:
                self.project = result.project
                return str(result.project)

            # Default arguments bind this round's values; the project is read when the step runs.
            def bid(bidder: str = bidder) -> TxResult:
                return c.post_bid(
                    self.current_project(),
                    bidder,
                    payouts=[100 * USDC] * m,
                    durations=[7 * DAY] * m,
                    bid_hash=label_hash(f"bid-{time.time_ns()}"),
                )[-1]

            def select(bidder: str = bidder) -> TxResult:
                return c.select_bid(self.current_project(), bidder)[-1]

            yield Step(
                "create",
                functools.partial(
                    c.create_standard, owner, config_hash=config, bid_bond=10 * USDC, milestones=m
                ),
                lambda status, body: status == 200,
                created,
            )
            yield Step(
                "open",
                lambda: c.open_bidding(self.current_project())[-1],
                lambda status, body: body is not None and body["status"] == "bidding",
            )
            yield Step("bid", bid, None)
            yield Step(
                "select",
                select,
                lambda status, body: body is not None and body["status"] == "building",
            )
            for i in range(m):

                def submit(i: int = i) -> TxResult:
                    return c.submit_milestone(
                        self.current_project(), i, delivery_ref=label_hash(f"delivery-{i}")
                    )

                def approve(i: int = i) -> TxResult:
                    return c.approve_milestone(self.current_project(), i)

                yield Step(f"submit m{i}", submit, milestone_status_is(i, "submitted"))
                yield Step(f"approve m{i}", approve, milestone_status_is(i, "approved"))

    def current_project(self) -> str:
        """The project of this round, set from the create step's result (its ``project_of``)."""
        if self.project is None:
            raise RuntimeError("no project created yet")
        return self.project


def milestone_status_is(index: int, status: str) -> Check:
    def check(code: int, body: dict[str, Any] | None) -> bool:
        return body is not None and body["milestones"][index]["status"] == status

    return check


def prefund(client: DevnetClient) -> None:
    for index in (*OWNERS, BIDDER):
        account = client.dev_account(index)
        client.mint(account, 10**9 * USDC)
        client.transact(
            "approve",
            account,
            client.usdc,
            client.usdc_abi.functions["approve"],
            client.escrow,
            MAX_UINT256,
        )


# --- one mode ---------------------------------------------------------------------------------


@dataclass
class Env:
    dsn: str
    redis_url: str
    rpc_url: str
    deployment: Deployment
    tmp: Path


def app_settings(env: Env, mode: str, poll_ms: int, closed_ws: str) -> Settings:
    return Settings(
        data_dir=env.tmp,
        database_url=env.dsn,
        redis_url=env.redis_url,
        ray_address="",
        ray_namespace=f"marketplace-bench-freshness-{os.getpid()}",
        jwt_secret=SecretStr("bench-secret-" + "f" * 32),
        notification_unsubscribe_secret=SecretStr("bench-unsubscribe-" + "u" * 32),
        rate_limit_enabled=False,
        log_json=False,
        log_level="WARNING",
        project_shards=1,
        chain_rpc_url=env.rpc_url,
        chain_ws_url=closed_ws if mode == "polling" else "",
        chain_id=env.deployment.chain_id,
        registry_address=env.deployment.registry,
        chain_start_block=env.deployment.start_block,
        indexer_enabled=mode != "direct",
        indexer_poll_interval_ms=poll_ms,
    )


async def wait_synced(pool: asyncpg.Pool, chain_id: int, block: int) -> None:
    deadline = time.monotonic() + VISIBLE_TIMEOUT_SECONDS
    while True:
        synced = await pool.fetchval(
            "SELECT last_synced_block FROM indexer_cursors WHERE chain_id = $1", chain_id
        )
        if synced is not None and synced >= block:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"indexer did not reach block {block} (at {synced})")
        await asyncio.sleep(0.01)


async def run_mode(
    env: Env, mode: str, transactions: int, poll_ms: int, milestones: int, rng: random.Random
) -> dict[str, Any]:
    from marketplace.http.app import create_app

    closed_ws = f"ws://127.0.0.1:{free_port()}"
    settings = app_settings(env, mode, poll_ms, closed_ws)
    app = create_app(settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    base = f"http://127.0.0.1:{port}"
    pool = await create_pool(env.dsn, min_size=1, max_size=2)
    client = DevnetClient(env.rpc_url, env.deployment)
    engine_rpc = JsonRpcClient(env.rpc_url)
    engine = None
    if mode == "direct":
        engine = IndexerEngine(
            IndexerConfig(
                chain_id=env.deployment.chain_id,
                rpc_url=env.rpc_url,
                registry_address=env.deployment.registry,
                start_block=env.deployment.start_block,
            ),
            pool,
            engine_rpc,
        )
    samples: list[dict[str, Any]] = []
    subscribed = None
    try:
        async with aiohttp.ClientSession() as http:

            async def catch_up(block: int) -> None:
                if engine is not None:
                    while (await engine.sync_once()).behind:
                        pass
                await wait_synced(pool, env.deployment.chain_id, block)

            async def read(project: str) -> tuple[int, dict[str, Any] | None]:
                async with http.get(f"{base}/v1/projects/{project}") as resp:
                    body = await resp.json() if resp.status == 200 else None
                    return resp.status, body

            await catch_up(client.head()["number"])
            if mode != "direct":
                subscribed = await indexer_subscribed(settings)
            workload = Workload(client, milestones)
            steps = workload.steps()
            while len(samples) < transactions:
                step = next(steps)
                await asyncio.sleep(rng.uniform(0, poll_ms / 1000))
                result, receipt_at = await asyncio.to_thread(_timed, step.send)
                if step.project_of is not None:
                    step.project_of(result)
                if step.check is None:
                    await catch_up(result.block_number)
                    continue
                if engine is not None:
                    while (await engine.sync_once()).behind:
                        pass
                project = workload.project
                assert project is not None
                deadline = receipt_at + VISIBLE_TIMEOUT_SECONDS
                polls = 0
                while True:
                    status, body = await read(project)
                    polls += 1
                    now = time.perf_counter()
                    if step.check(status, body):
                        break
                    if now > deadline:
                        raise TimeoutError(f"{mode}: {step.name} on {project} never visible")
                    await asyncio.sleep(HTTP_POLL_SECONDS)
                samples.append(
                    {
                        "step": step.name,
                        "block": result.block_number,
                        "seconds": now - receipt_at,
                        "polls": polls,
                    }
                )
                if len(samples) % 10 == 0:
                    print(f"  {mode}: {len(samples)}/{transactions}", file=sys.stderr, flush=True)
    finally:
        client.close()
        await engine_rpc.close()
        await pool.close()
        await runner.cleanup()
    return {"mode": mode, "subscribed": subscribed, "samples": samples}


def _timed(send: Callable[[], Any]) -> tuple[Any, float]:
    result = send()
    return result, time.perf_counter()


async def indexer_subscribed(settings: Settings) -> bool:
    """The actor's own view of its newHeads subscription (waits for it in subscription mode)."""
    import ray

    from marketplace.actors.status import IndexerStatus

    handle = ray.get_actor("chain-indexer", namespace=settings.ray_namespace)
    deadline = time.monotonic() + 10.0
    while True:
        status: IndexerStatus = await handle.status.remote()
        if status.subscribed or settings.chain_ws_url or time.monotonic() > deadline:
            return status.subscribed
        await asyncio.sleep(0.1)


# --- reporting --------------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p95_ms": round(1000 * cuts[94], 1),
        "p99_ms": round(1000 * cuts[98], 1),
        "max_ms": round(1000 * ordered[-1], 1),
        "mean_ms": round(1000 * statistics.fmean(ordered), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=100, help="measured, per mode")
    parser.add_argument("--poll-ms", type=int, default=1000, help="indexer poll interval")
    parser.add_argument("--milestones", type=int, default=3, help="per project of the workload")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    parser.add_argument("--seed", type=int, default=1)
    add_output_option(parser, RESULTS)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes: {sorted(unknown)}")

    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = Path(tempfile.mkdtemp(prefix="mkt-bench-fresh-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    postgres = EmbeddedPostgres(tmp)
    redis_server = EmbeddedRedis(tmp)
    anvil = AnvilProcess(tmp / "anvil", silent=True)
    rng = random.Random(args.seed)
    results: list[dict[str, Any]] = []
    try:
        print("starting postgres, redis, anvil ...", file=sys.stderr, flush=True)
        dsn = postgres.start()
        asyncio.run(migrate_dsn(dsn))
        redis_url = redis_server.start()
        url = anvil.start()
        deployment = deploy_dev_defaults(Web3(Web3.HTTPProvider(url)))
        with DevnetClient(url, deployment) as client:
            prefund(client)
        env = Env(dsn, redis_url, url, deployment, tmp)
        for mode in modes:
            print(f"mode {mode} ...", file=sys.stderr, flush=True)
            results.append(
                asyncio.run(
                    run_mode(env, mode, args.transactions, args.poll_ms, args.milestones, rng)
                )
            )
    finally:
        anvil.stop()
        redis_server.stop()
        postgres.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    targets = {
        "direct": None,
        "subscription": 1000.0,
        "polling": args.poll_ms + 1000.0,
    }
    summary = []
    for r in results:
        stats = percentiles([s["seconds"] for s in r["samples"]])
        target = targets[r["mode"]]
        summary.append(
            {
                "mode": r["mode"],
                "subscribed": r["subscribed"],
                "transactions": len(r["samples"]),
                **stats,
                "target_p95_ms": target,
                "met": None if target is None else stats["p95_ms"] < target,
            }
        )
    print()
    print(
        f"indexer freshness: receipt -> visible via GET /v1/projects/{{addr}}, "
        f"{args.transactions} transactions per mode, poll interval {args.poll_ms} ms"
    )
    header = (
        f"{'mode':<14}{'newHeads':>9}{'n':>5}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
        f"{'max ms':>9}{'target p95':>12}{'':>8}"
    )
    print(header)
    print("-" * len(header))
    for s in summary:
        sub = {True: "yes", False: "no", None: "-"}[s["subscribed"]]
        target = f"< {s['target_p95_ms']:.0f}" if s["target_p95_ms"] else "baseline"
        verdict = "" if s["met"] is None else ("met" if s["met"] else "MISSED")
        print(
            f"{s['mode']:<14}{sub:>9}{s['transactions']:>5}{s['p50_ms']:>9.0f}"
            f"{s['p95_ms']:>9.0f}{s['p99_ms']:>9.0f}{s['max_ms']:>9.0f}{target:>12}{verdict:>8}"
        )
    report = {
        "benchmark": "indexer_freshness",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "poll_interval_ms": args.poll_ms,
        "transactions_per_mode": args.transactions,
        "milestones": args.milestones,
        "read_path": "GET /v1/projects/{projectAddress}",
        "summary": summary,
        "samples": {r["mode"]: r["samples"] for r in results},
    }
    write_report(args.output, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
