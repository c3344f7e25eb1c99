"""Indexer backfill throughput against the ``eth_getLogs`` floor (issues 5 and 16).

Usage: ``.venv/bin/python bench/indexer_backfill.py [--projects 10000] [--milestones 5]
[--rounds 3]`` (see bench/README.md). Everything is local and loopback-only:

1. a scratch embedded PostgreSQL (migrated) and Redis in a temporary directory, and an anvil with
   the reference contracts deployed;
2. ``marketplace devnet seed`` (the same :class:`~marketplace_devstack.devnet.seed.Seeder`)
   fills the chain with ``--projects`` projects in every status, ``--milestones`` per standard
   project; the seeded anvil state is kept under ``--state-cache`` (a temporary directory, never
   the repository) and later runs with the same parameters start anvil from it;
3. in alternating rounds over the same block range (the deployment's start block to the head):
   ``floor``: the same ``eth_getLogs`` pages the indexer fetches (same pages of
   ``--page-blocks``, same topics filter; all pages of a batch in one JSON-RPC batch request)
   through the same :class:`~marketplace.chain.rpc.JsonRpcClient`, doing nothing with the logs;
   ``indexer``: a fresh :class:`~marketplace.indexer.engine.IndexerEngine` (Postgres pool as the
   actor opens it, Redis for its metrics) calling ``sync_once()`` from
   an empty database until it is caught up. The tables are emptied before each indexer round.

The ratio of the medians is what the indexer adds on top of merely fetching the logs (target:
at most 1.5x). The CPU seconds of each process per round (this one, anvil, PostgreSQL, Redis)
show what the work costs independently of other load on the machine. A per-stage breakdown of
the indexer rounds (logs, classifying and folding them, bids, change events, database; and the
state snapshots over RPC of engines before issue 28) shows where the rest goes. Like the
indexer actor, this process freezes its start-up heap before measuring (``gc.freeze``), so a
collection does not walk the imported modules. Results are printed as a table and,
with --output, written to bench/results/indexer_backfill.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gzip
import hashlib
import json
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
from marketplace.chain.artifacts import DIGEST_FILE, artifacts_dir  # noqa: E402
from marketplace.chain.rpc import JsonRpcClient  # noqa: E402
from marketplace.indexer import engine as engine_module  # noqa: E402
from marketplace.indexer.engine import IndexerConfig, IndexerEngine  # noqa: E402
from marketplace.interpreter import freeze_start_up_heap  # noqa: E402
from marketplace.storage.migrations import migrate_dsn  # noqa: E402
from marketplace.storage.pool import create_pool  # noqa: E402
from marketplace.storage.repositories import events as events_repo  # noqa: E402
from marketplace.storage.repositories import indexer as repo  # noqa: E402
from marketplace_devstack.devnet.anvil import AnvilProcess, find_anvil_binary, rpc_call  # noqa: E402
from marketplace_devstack.devnet.client import DevnetClient  # noqa: E402
from marketplace_devstack.devnet.deploy import Deployment, deploy_dev_defaults  # noqa: E402
from marketplace_devstack.devnet.seed import DEFAULT_BLOCK_GAS, Seeder  # noqa: E402
from marketplace_devstack.embedded.postgres import EmbeddedPostgres  # noqa: E402
from marketplace_devstack.embedded.redis import EmbeddedRedis  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "indexer_backfill.json"
# Seeded anvil states (never committed): one directory per cache_key().
STATE_CACHE = Path(tempfile.gettempdir()) / "mkt-bench-backfill-state"
TARGET_RATIO = 1.5  # issue 16 (issue 5 asked for 3x)
STAGES = (
    "reorg check",
    "eth_getLogs",
    "classify logs",
    "snapshot (RPC + decode)",
    "  of which eth_call batches",
    "  of which decoding",
    "fold onto stored rows",
    "bids (decode, fold)",
    "change events (work out)",
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
    cpu = cpu_now()
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
    return {"seconds": seconds, "events": logs, "batches": len(ranges), "cpu": cpu_since(cpu)}


class StageTimer:
    """Wall time per indexer stage, by wrapping the engine's methods.

    The engine overlaps its stages (logs of the next page while the last ones are snapshotted
    and written), and runs several snapshot requests at once, so a stage's figure is the wall
    time during which at least one call of it was running: the stages' sum exceeds the total.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._running: dict[str, int] = defaultdict(int)
        self._since: dict[str, float] = {}

    def enter(self, name: str) -> None:
        if self._running[name] == 0:
            self._since[name] = time.perf_counter()
        self._running[name] += 1

    def leave(self, name: str) -> None:
        self._running[name] -= 1
        if self._running[name] == 0:
            self.seconds[name] += time.perf_counter() - self._since[name]

    def wrap(
        self, name: str, fn: Callable[_P, Awaitable[_R]]
    ) -> Callable[_P, Coroutine[Any, Any, _R]]:
        @functools.wraps(fn)
        async def timed(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            self.enter(name)
            try:
                return await fn(*args, **kwargs)
            finally:
                self.leave(name)

        return timed

    def wrap_sync(self, name: str, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def timed(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started

        return timed


# CPU seconds of the processes that share the machine's cores during a round.
CPU_PIDS: dict[str, int] = {}


def _process_cpu(pid: int) -> float:
    """User + system CPU of ``pid`` and its reaped children (Postgres backends that exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def cpu_now() -> dict[str, float]:
    times = os.times()
    now = {"bench process (python)": times.user + times.system}
    for name, pid in CPU_PIDS.items():
        now[name] = _process_cpu(pid)
    return now


def cpu_since(before: dict[str, float]) -> dict[str, float]:
    return {name: round(value - before[name], 3) for name, value in cpu_now().items()}


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
    # Stages: what the engine calls, each wrapped where it is looked up (instance or module).
    # The names of the engine before its batches were pipelined too (`_classify`, `_snapshot`),
    # so this script can measure an older checkout against the same cached chain.
    for method, stage, is_async in (
        ("_fetch_logs", "eth_getLogs", True),
        ("_classify_page", "classify logs", False),
        ("_classify", "classify logs", True),
        ("_snapshot_chunk", "snapshot (RPC + decode)", True),
        ("_snapshot", "snapshot (RPC + decode)", True),
        ("_decode_states", "  of which decoding", False),
        ("_rollback_if_reorged", "reorg check", True),
        ("_fold_stored", "fold onto stored rows", True),
        ("_fold_bids", "bids (decode, fold)", True),
    ):
        if hasattr(engine, method):
            fn = getattr(engine, method)
            setattr(
                engine, method, timer.wrap(stage, fn) if is_async else timer.wrap_sync(stage, fn)
            )
    rpc_batch = rpc.batch

    async def batch(calls: list[tuple[str, list[Any]]], **kw: Any) -> list[Any]:
        if not calls or calls[-1][0] != "eth_call":
            return await rpc_batch(calls, **kw)
        timer.enter(STAGES[4])
        try:
            return await rpc_batch(calls, **kw)
        finally:
            timer.leave(STAGES[4])

    rpc.batch = batch  # type: ignore[method-assign]
    originals = {
        name: getattr(repo, name)
        for name in (
            "upsert_snapshots",
            "existing_creations",
            "record_block",
            "advance_cursor",
            "prune_blocks",
        )
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
    # Working out the change events (pure CPU), where the engine module looks them up.
    compute_originals = {
        name: getattr(engine_module, name)
        for name in ("snapshot_events", "with_bid_events")
        if hasattr(engine_module, name)
    }
    for name, sync_fn in compute_originals.items():
        setattr(engine_module, name, timer.wrap_sync("change events (work out)", sync_fn))
    events = batches = projects = 0
    cpu = cpu_now()
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
        for name, sync_fn in compute_originals.items():
            setattr(engine_module, name, sync_fn)
        await rpc.close()
        await pool.close()
        if redis is not None:
            await redis.aclose()
    await asyncio.sleep(0.2)  # the pool's backends exit and are reaped (their CPU counted)
    return {
        "cpu": cpu_since(cpu),
        "seconds": seconds,
        "events": events,
        "batches": batches,
        "projects_written": projects,
        "projects_in_db": indexed,
        "milestones_in_db": milestones,
        "stages": dict(timer.seconds),
    }


# --- the seeded chain, cached -------------------------------------------------------------------


def cache_key(args: argparse.Namespace) -> str:
    """What a seeded state depends on: the seed's parameters, the seeder and deployment code,
    the contracts and the anvil binary."""
    digest = hashlib.sha256()
    digest.update(f"{args.projects}:{args.milestones}:{args.seed}:{args.block_gas}".encode())
    devnet = ROOT / "devstack" / "marketplace_devstack" / "devnet"
    for path in (devnet / "seed.py", devnet / "deploy.py"):
        digest.update(path.read_bytes())
    digest.update(str(artifacts_dir().joinpath(DIGEST_FILE).read_text()).encode())
    binary = find_anvil_binary()
    digest.update(f"{binary.resolve()}:{binary.stat().st_size}".encode())
    return f"{args.projects}p-{args.milestones}m-{digest.hexdigest()[:16]}"


class CachedAnvil(AnvilProcess):
    """anvil started from a dumped state (``--load-state``; too big for ``anvil_loadState``'s
    request body limit). The file must be plain JSON, so the cached gzip is unpacked first."""

    def __init__(self, data_dir: Path, state: Path | None) -> None:
        super().__init__(data_dir, silent=True, startup_timeout=600.0)
        self.state = state

    def command(self) -> list[str]:
        if self.state is None:
            return super().command()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        unpacked = self.data_dir / "state.json"
        with gzip.open(self.state) as packed, unpacked.open("wb") as out:
            shutil.copyfileobj(packed, out, 1 << 20)
        return [*super().command(), "--load-state", str(unpacked)]


def cached_state(args: argparse.Namespace) -> Path | None:
    if args.no_state_cache:
        return None
    state = args.state_cache / cache_key(args) / "state.gz"
    return state if state.is_file() else None


def seeded_chain(url: str, args: argparse.Namespace) -> tuple[Deployment, dict[str, Any], int]:
    """Deploy and seed, or take the state a previous run dumped (anvil was started from it):
    seeding 10,000 projects takes minutes on a 2-core machine, loading it seconds. Returns the
    deployment, the seed's summary and the head."""
    cached = None if args.no_state_cache else args.state_cache / cache_key(args)
    if cached is not None and (cached / "meta.json").is_file():
        meta = json.loads((cached / "meta.json").read_text())
        head = int(str(rpc_call(url, "eth_blockNumber", [])), 16)
        if head != meta["head"]:
            raise SystemExit(f"loaded state has head {head}, expected {meta['head']}")
        return Deployment.from_json(meta["deployment"]), meta["seed"], head
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
    summary = seeded.to_dict(include_projects=False)
    if cached is not None:
        dumped = str(rpc_call(url, "anvil_dumpState", [], timeout=600))
        partial = cached.with_name(cached.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        (partial / "state.gz").write_bytes(bytes.fromhex(dumped.removeprefix("0x")))
        meta = {"deployment": deployment.to_dict(), "seed": summary, "head": head}
        (partial / "meta.json").write_text(json.dumps(meta))
        shutil.rmtree(cached, ignore_errors=True)
        partial.rename(cached)
    return deployment, summary, head


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
        print("\nthe same, top 40 by cumulative time:")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
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


def median_cpu(samples: list[dict[str, Any]]) -> dict[str, float]:
    names = samples[0]["cpu"]
    return {n: round(statistics.median(s["cpu"][n] for s in samples), 3) for n in names}


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
    print(f"target: indexer <= {TARGET_RATIO}x floor: {verdict} ({report['ratio']:.2f}x)")
    print()
    print("indexer stages (median round, seconds):")
    for name, seconds in report["indexer_stages"].items():
        print(f"  {name:<36}{seconds:>8.3f}")
    print("  (the stages overlap: each is the wall time while at least one call of it ran)")
    print("\nCPU seconds per round (median), by process:")
    print(f"  {'':<28}{'floor':>8}{'indexer':>9}")
    cpu = report["cpu_seconds"]
    for name in cpu["indexer"]:
        print(f"  {name:<28}{cpu['floor'].get(name, 0.0):>8.2f}{cpu['indexer'][name]:>9.2f}")
    print(f"  {'all':<28}{sum(cpu['floor'].values()):>8.2f}{sum(cpu['indexer'].values()):>9.2f}")
    print(
        f"\nprojects in read model: {report['indexer_projects_in_db']}, milestones: "
        f"{report['indexer_milestones_in_db']}; seed: {report['seed']['transactions']} "
        f"transactions in {report['seed']['seconds']:.1f}s "
        f"({report['seed']['projectsPerSecond']:.0f} projects/s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--projects", type=int, default=10_000)
    parser.add_argument("--milestones", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    # 10,000 seeded projects fill about 111 blocks (the seeder packs 300M gas per block): pages
    # of 10 blocks make the backfill span a dozen eth_getLogs pages, as a real chain would.
    parser.add_argument("--page-blocks", type=int, default=10, help="indexer default 2000")
    parser.add_argument("--max-pages", type=int, default=50, help="indexer default 50")
    parser.add_argument("--block-gas", type=int, default=DEFAULT_BLOCK_GAS, help="seed blocks")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the seeder")
    parser.add_argument("--no-redis", action="store_true", help="run the engine without Redis")
    add_output_option(parser, RESULTS)
    parser.add_argument(
        "--profile", action="store_true", help="cProfile one extra indexer round and print it"
    )
    parser.add_argument(
        "--state-cache",
        type=Path,
        default=STATE_CACHE,
        help=f"where seeded anvil states are kept between runs (default {STATE_CACHE})",
    )
    parser.add_argument(
        "--no-state-cache", action="store_true", help="always seed; neither read nor write it"
    )
    args = parser.parse_args()

    os.environ.setdefault("MARKETPLACE_LOG_JSON", "false")
    tmp = Path(tempfile.mkdtemp(prefix="mkt-bench-backfill-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    postgres = EmbeddedPostgres(tmp)
    redis_server = None if args.no_redis else EmbeddedRedis(tmp)
    state = cached_state(args)
    if state is not None:
        print(f"anvil from the cached seeded state {state.parent}", file=sys.stderr, flush=True)
    anvil = CachedAnvil(tmp / "anvil", state)
    try:
        print("starting postgres, redis, anvil ...", file=sys.stderr, flush=True)
        dsn = postgres.start()
        asyncio.run(migrate_dsn(dsn))
        redis_url = redis_server.start() if redis_server is not None else None
        url = anvil.start()
        CPU_PIDS.update({"anvil": anvil.pid or 0, "postgres": postgres.pid or 0})
        if redis_server is not None:
            CPU_PIDS["redis"] = redis_server.pid or 0
        deployment, seed_summary, head = seeded_chain(url, args)
        config = IndexerConfig(
            chain_id=deployment.chain_id,
            rpc_url=url,
            registry_address=deployment.registry,
            start_block=deployment.start_block,
            page_blocks=args.page_blocks,
            max_pages=args.max_pages,
        )
        print("measuring ...", file=sys.stderr, flush=True)
        # As the indexer actor does at the end of its start-up (marketplace/actors/startup.py):
        # the imported modules go to the collector's permanent generation, so a collection
        # during a round does not walk web3's and pydantic's objects.
        freeze_start_up_heap()
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
        "seed": seed_summary,
        "floor": floor,
        "indexer": indexer,
        "ratio": round(indexer["median_seconds"] / floor["median_seconds"], 3),
        "target_ratio": TARGET_RATIO,
        "indexer_stages": {
            k: round(median_round["stages"][k], 4) for k in STAGES if k in median_round["stages"]
        },
        "cpu_seconds": {
            "floor": median_cpu(raw["floor"]),
            "indexer": median_cpu(raw["indexer"]),
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
