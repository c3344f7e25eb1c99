"""GET /v1/leaderboards on read-model projects written as the indexer writes them, kept current
by the boards consumer from the events the indexer (and the tag upsert) writes: ranking by each
sort with ties, windows and their decay, category filters, pagination, reorgs, freshness,
invite-only projects, the rebuild command, and the consumer running inside the app."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from marketplace.cli import main
from marketplace.events.types import EventType
from marketplace.leaderboards import boards
from tests.api.leaderboards.boards_support import (
    Done,
    board,
    consume,
    consumer,
    emit,
    entries,
    every_page,
    standings,
    tag_milestone,
    wallets,
    worker_project,
)
from tests.api.leaderboards.conftest import error_code, linked_party, random_address
from tests.conftest import Servers, new_user
from tests.support import apps
from tests.support.waiting import eventually

ROW_FIELDS = {
    "rank",
    "walletAddress",
    "userId",
    "username",
    "completedMilestones",
    "totalPayoutUSDC",
    "projects",
    "categories",
    "lastCompletedAt",
}


def addresses(n: int) -> list[str]:
    """n random wallets in ascending order (the tie-break order)."""
    return sorted(random_address() for _ in range(n))


async def fresh_indexer(db: asyncpg.Connection, *, sync_age: float = 1.0) -> None:
    now = datetime.now(UTC)
    await db.execute(
        "INSERT INTO indexer_cursors (chain_id, registry_address, start_block, last_synced_block, "
        "head_block, last_synced_block_time, last_successful_sync_at) "
        "VALUES (31337, $1, 1, 100, 100, $2, $3)",
        "0x" + "ab" * 20,
        now - timedelta(seconds=30),
        now - timedelta(seconds=sync_age),
    )


async def test_ranks_by_each_sort_with_ties_by_wallet(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    a, b, c, d = addresses(4)
    # payout: b 500; a and c 300 (tie: a first); d 100.   milestones: c 3, a 2, b 1 = d 1.
    # recent: d (0.5 days), c (2), b (3), a (5).
    await worker_project(db, a, [Done(100, 6), Done(200, 5)])
    await worker_project(db, b, [Done(500, 3), Done(999, None)])  # the second is not approved
    await worker_project(db, c, [Done(100, 4), Done(100, 3)])
    await worker_project(db, c, [Done(100, 2)])
    await worker_project(db, d, [Done(100, 0.5)])
    await consume(db, servers.database_url)

    body = await board(client)
    assert [row["walletAddress"].lower() for row in body["items"]] == [b, a, c, d]
    assert [row["rank"] for row in body["items"]] == [1, 2, 3, 4]
    first = body["items"][0]
    assert set(first) == ROW_FIELDS
    assert first["totalPayoutUSDC"] == "500" and first["completedMilestones"] == 1
    assert first["userId"] is None and first["username"] is None
    third = body["items"][2]
    assert third["projects"] == 2 and third["completedMilestones"] == 3
    assert third["totalPayoutUSDC"] == "300"
    assert body["nextCursor"] is None

    assert await wallets(client, sort="milestones") == [c, a, b, d]
    assert await wallets(client, sort="recent") == [d, c, b, a]


async def test_a_linked_worker_shows_its_user_and_username(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    worker = await linked_party(client)
    resp = await client.put(
        "/v1/username",
        json={"userId": str(worker.user.user_id), "username": "boardtop"},
        headers=worker.headers,
    )
    assert resp.status == 200, await resp.text()
    await worker_project(db, worker.lower, [Done(10)])
    await consume(db, servers.database_url)
    row = (await board(client))["items"][0]
    assert row["walletAddress"] == worker.address
    assert row["userId"] == str(worker.user.user_id)
    assert row["username"] == "boardtop"


async def test_windows_count_by_completion_and_decay_with_time(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    (worker,) = addresses(1)
    await worker_project(db, worker, [Done(1, 100), Done(10, 60), Done(100, 10)])
    await consume(db, servers.database_url)
    totals = {
        window: (await board(client, window=window))["items"][0]["totalPayoutUSDC"]
        for window in ("all", "90d", "30d")
    }
    assert totals == {"all": "111", "90d": "110", "30d": "100"}

    # Time passes: the 10-day milestone is now 31 days old, the standings still count it in 30d
    # until the consumer's periodic refresh moves the window.
    await db.execute(
        "UPDATE leaderboard_entries SET completed_at = now() - interval '31 days' "
        "WHERE payout_usdc = 100"
    )
    await db.execute(
        "INSERT INTO leaderboard_consumer_cursor (singleton, windows_refreshed_at) "
        "VALUES (true, now() - interval '2 days') ON CONFLICT (singleton) "
        "DO UPDATE SET windows_refreshed_at = EXCLUDED.windows_refreshed_at"
    )
    assert (await board(client, window="30d"))["items"][0]["totalPayoutUSDC"] == "100"
    assert await boards.refresh_windows(db) == 1
    assert (await board(client, window="30d"))["items"] == []
    assert (await board(client, window="90d"))["items"][0]["totalPayoutUSDC"] == "110"


async def test_category_filters_one_and_several(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    a, b, c = addresses(3)
    pa = await worker_project(db, a, [Done(100), Done(200)])
    pb = await worker_project(db, b, [Done(1000)])
    await worker_project(db, c, [Done(5000)])  # untagged: only on the board of everything
    await tag_milestone(db, pa, 0, ["frontend", "backend"])
    await tag_milestone(db, pa, 1, ["backend"])
    await tag_milestone(db, pb, 0, ["design"])
    await consume(db, servers.database_url)

    assert await wallets(client) == [c, b, a]
    backend = (await board(client, categories="backend"))["items"]
    assert [(r["walletAddress"].lower(), r["totalPayoutUSDC"]) for r in backend] == [(a, "300")]
    assert backend[0]["categories"] == ["frontend", "backend"]  # the categories' sortOrder
    front = (await board(client, categories="frontend"))["items"]
    assert [(r["walletAddress"].lower(), r["totalPayoutUSDC"]) for r in front] == [(a, "100")]

    # Several: a milestone tagged with two of them counts once.
    several = (await board(client, categories="frontend,backend,design"))["items"]
    assert [(r["walletAddress"].lower(), r["totalPayoutUSDC"]) for r in several] == [
        (b, "1000"),
        (a, "300"),
    ]
    assert several[1]["completedMilestones"] == 2
    assert [r["rank"] for r in several] == [1, 2]

    # Retagging moves the milestone between boards.
    await tag_milestone(db, pa, 1, ["design"])
    await consume(db, servers.database_url)
    assert (await board(client, categories="design"))["items"][1]["totalPayoutUSDC"] == "200"
    assert (await board(client, categories="backend"))["items"][0]["totalPayoutUSDC"] == "100"


async def test_pages_never_repeat_or_skip(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    workers = addresses(23)
    for n, worker in enumerate(workers):
        # Many ties on every sort: payouts in 4 groups, milestone counts in 2.
        project = await worker_project(db, worker, [Done(100 * (n % 4), 1 + n % 3)] * (1 + n % 2))
        await tag_milestone(db, project, 0, ["data"] if n % 2 else ["data", "docs"])
    await consume(db, servers.database_url)

    for params in (
        {"sort": "payout"},
        {"sort": "milestones"},
        {"sort": "recent"},
        {"sort": "payout", "categories": "data"},
        {"sort": "milestones", "categories": "data,docs"},
        {"sort": "recent", "categories": "docs,data", "window": "90d"},
    ):
        whole = (await board(client, limit=100, **params))["items"]
        assert len(whole) == 23 or params.get("categories") == "docs"
        paged = await every_page(client, 4, **params)
        assert [r["walletAddress"] for r in paged] == [r["walletAddress"] for r in whole]
        assert [r["rank"] for r in paged] == list(range(1, len(whole) + 1)), params
        assert len({r["walletAddress"] for r in paged}) == len(paged)


async def test_bad_queries(client: Any, db: asyncpg.Connection, servers: Servers) -> None:
    resp = await client.get("/v1/leaderboards", params={"categories": "backend,blockchain,nope"})
    assert resp.status == 422
    body = await resp.json()
    assert body["error"] == "unknown_category" and body["unknown"] == ["blockchain", "nope"]
    for params in ({"sort": "fame"}, {"window": "7d"}, {"limit": "0"}, {"limit": "101"}):
        resp = await client.get("/v1/leaderboards", params=params)
        assert await error_code(resp, 400) == "invalid_request", params

    workers = addresses(3)
    for worker in workers:
        await worker_project(db, worker, [Done(7)])
    await consume(db, servers.database_url)
    cursor = (await board(client, limit=1))["nextCursor"]
    assert cursor is not None
    # A cursor of another sort, a tampered one and garbage are refused.
    for params in (
        {"cursor": cursor, "sort": "recent"},
        {"cursor": cursor[:-2] + "AA"},
        {"cursor": "not-a-cursor"},
    ):
        resp = await client.get("/v1/leaderboards", params=params)
        assert await error_code(resp, 400) == "invalid_request", params


async def test_a_reorg_that_drops_an_approval_or_the_project_changes_the_board(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    a, b = addresses(2)
    pa = await worker_project(db, a, [Done(100), Done(50)])
    pb = await worker_project(db, b, [Done(120)])
    await consume(db, servers.database_url)
    assert await wallets(client) == [a, b]

    # The reorg rolls back milestone 1's approval: the indexer re-snapshots the project.
    await db.execute(
        "UPDATE milestones SET status = 'submitted', approved_at = NULL "
        "WHERE project_address = $1 AND milestone_index = 1",
        pa,
    )
    await emit(
        db,
        EventType.CHAIN_REORG,
        "chain:31337",
        {
            "chainId": 31337,
            "forkBlock": 9,
            "depth": 2,
            "previousSyncedBlock": 11,
            "headBlock": 12,
            "removedProjects": [],
            "resnapshotProjects": [pa],
        },
    )
    await consume(db, servers.database_url)
    rows = (await board(client))["items"]
    assert [(r["walletAddress"].lower(), r["totalPayoutUSDC"]) for r in rows] == [
        (b, "120"),
        (a, "100"),
    ]

    # The reorg removes project b altogether.
    await db.execute("DELETE FROM milestones WHERE project_address = $1", pb)
    await db.execute("DELETE FROM projects WHERE project_address = $1", pb)
    await emit(db, EventType.PROJECT_REMOVED, pb, {"reason": "reorg", "forkBlock": 9})
    await consume(db, servers.database_url)
    assert await wallets(client) == [a]
    assert (
        await db.fetchval("SELECT count(*) FROM leaderboard_standings WHERE wallet_address = $1", b)
        == 0
    )


async def test_another_worker_selected_moves_the_milestones(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    a, b = addresses(2)
    project = await worker_project(db, a, [Done(100)])
    await consume(db, servers.database_url)
    await db.execute(
        "UPDATE projects SET selected_builder_address = $2 WHERE project_address = $1",
        project,
        b,
    )
    await emit(
        db, EventType.PROJECT_CHANGED, project, {"block": 2, "changes": {}, "milestones": []}
    )
    await consume(db, servers.database_url)
    assert await wallets(client) == [b]


async def test_stale_flips_when_the_consumer_or_the_indexer_lags(
    client: Any, db: asyncpg.Connection, servers: Servers, make_client: apps.AppFactory
) -> None:
    freshness = (await board(client))["freshness"]
    assert freshness["source"] == "unknown" and freshness["stale"] is True  # nothing indexed

    await fresh_indexer(db)
    (worker,) = addresses(1)
    await worker_project(db, worker, [Done(5)])
    await consume(db, servers.database_url)
    freshness = (await board(client))["freshness"]
    assert freshness["source"] == "indexed"
    assert freshness["stale"] is False
    assert freshness["freshnessTargetMs"] == 60_000
    assert freshness["indexedAt"] is not None and freshness["lastSuccessfulSyncAt"] is not None

    # An indexer change the consumer has not applied for longer than the target.
    await worker_project(db, worker, [Done(6)])
    await db.execute("UPDATE events SET created_at = now() - interval '61 seconds'")
    assert (await board(client))["freshness"]["stale"] is True
    await consume(db, servers.database_url)
    assert (await board(client))["freshness"]["stale"] is False

    # A shorter target makes a younger lag stale.
    strict = await make_client(leaderboard_freshness_target_ms=1000)
    await worker_project(db, worker, [Done(7)])
    await db.execute("UPDATE events SET created_at = now() - interval '2 seconds'")
    assert (await board(strict))["freshness"]["stale"] is True
    assert (await board(client))["freshness"]["stale"] is False
    await consume(db, servers.database_url)

    # The indexer itself stops syncing (beyond its lag alert threshold).
    await db.execute(
        "UPDATE indexer_cursors SET last_successful_sync_at = now() - interval '1 hour'"
    )
    assert (await board(client))["freshness"]["stale"] is True


async def test_invite_only_projects_count_but_are_never_named(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    (worker,) = addresses(1)
    hidden = await worker_project(db, worker, [Done(400)], invite_only=True)
    await consume(db, servers.database_url)
    for headers in ({}, new_user().headers):
        resp = await client.get("/v1/leaderboards", headers=headers)
        text = await resp.text()
        assert resp.status == 200
        row = json.loads(text)["items"][0]
        assert row["totalPayoutUSDC"] == "400" and row["projects"] == 1
        assert hidden not in text.lower()


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


async def test_rebuild_command_equals_the_incremental_result(
    client: Any, db: asyncpg.Connection, servers: Servers, monkeypatch: Any
) -> None:
    workers = addresses(6)
    projects = []
    for n, worker in enumerate(workers):
        projects.append(await worker_project(db, worker, [Done(10 * n, n * 20 + 1), Done(7, 40)]))
    await tag_milestone(db, projects[0], 0, ["security"])
    await tag_milestone(db, projects[1], 1, ["security", "docs"])
    await db.execute(
        "UPDATE milestones SET status = 'disputed' WHERE project_address = $1", projects[2]
    )
    await emit(db, EventType.PROJECT_CHANGED, projects[2], {"block": 3})
    await consume(db, servers.database_url)
    incremental = (await entries(db), await standings(db))
    assert incremental[0] and incremental[1]

    await db.execute("DELETE FROM leaderboard_standings WHERE category = '*'")
    await db.execute("UPDATE leaderboard_entries SET payout_usdc = 0")
    monkeypatch.setenv("MARKETPLACE_DATABASE_URL", servers.database_url)
    code, out = await asyncio.to_thread(run_cli, "admin", "leaderboards", "rebuild")
    assert code == 0, out
    counts = json.loads(out)
    assert counts == {"entries": len(incremental[0]), "standings": len(incremental[1])}
    assert (await entries(db), await standings(db)) == incremental


async def test_the_consumer_in_the_app_keeps_the_board_current(
    make_client: apps.AppFactory, servers: Servers
) -> None:
    running = await make_client(leaderboard_consumer_enabled=True, events_relay_poll_interval_ms=50)
    db = await asyncpg.connect(servers.database_url)
    try:
        (worker,) = addresses(1)
        await worker_project(db, worker, [Done(42)])
        await eventually(
            lambda: wallets(running),
            until=lambda shown: shown == [worker],
            within=20,
            interval=0.1,
            what="the worker on the board",
        )
    finally:
        await db.close()


async def test_each_frontend_reuses_its_freshness_for_the_cache_time(
    make_client: apps.AppFactory, servers: Servers
) -> None:
    cached = await make_client(leaderboard_freshness_cache_ms=60_000)
    db = await asyncpg.connect(servers.database_url)
    try:
        await fresh_indexer(db)
        assert (await board(cached))["freshness"]["stale"] is False
        (worker,) = addresses(1)
        await worker_project(db, worker, [Done(5)])
        await db.execute("UPDATE events SET created_at = now() - interval '61 seconds'")
        # The board itself is read fresh; its freshness is the one computed a moment ago.
        assert (await board(cached))["freshness"]["stale"] is False
        uncached = await make_client()
        assert (await board(uncached))["freshness"]["stale"] is True
    finally:
        await db.close()


async def test_one_consumer_is_active_among_several(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    first, second = consumer(servers.database_url), consumer(servers.database_url)
    tasks = [asyncio.create_task(c.run()) for c in (first, second)]
    try:
        (worker,) = addresses(1)
        await worker_project(db, worker, [Done(9)])
        deadline = time.monotonic() + 20
        # The board may show the worker before the event is consumed: the active consumer's
        # first window refresh rebuilds every standing. Wait for the event itself.
        while time.monotonic() < deadline:
            if await wallets(client) == [worker] and first.events + second.events >= 1:
                break
            await asyncio.sleep(0.05)
        assert await wallets(client) == [worker]
        await asyncio.sleep(0.5)  # a second consumer applying it too would show by now
        assert [first.active, second.active].count(True) == 1
        assert first.events + second.events == 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_pages_are_cached_until_the_boards_change(
    client: Any, db: asyncpg.Connection, servers: Servers
) -> None:
    """A page is read again only when the boards' version (the consumer's last applied event,
    the last window refresh) changed: a standings row changed behind the consumer's back stays
    unseen until the consumer applies an event."""
    a, b = addresses(2)
    await worker_project(db, a, [Done(100, 1)])
    await worker_project(db, b, [Done(200, 1)])
    await consume(db, servers.database_url)
    assert await wallets(client) == [b, a]
    await db.execute(
        "UPDATE leaderboard_standings SET total_payout_usdc = 999 WHERE wallet_address = $1", a
    )
    assert await wallets(client) == [b, a]  # the cached page: the version did not move
    await worker_project(db, b, [Done(1, 1)])  # an event the consumer applies: a new version
    await consume(db, servers.database_url)
    body = await board(client)
    assert [row["walletAddress"].lower() for row in body["items"]] == [a, b]
    assert body["items"][0]["totalPayoutUSDC"] == "999"


async def test_events_of_other_types_move_the_consumer_past_them(
    db: asyncpg.Connection, servers: Servers
) -> None:
    """A flood of chat messages is none of the boards' business: the consumer's cursor moves past
    it at once, so its lag (newest event - cursor, docs/metrics.md) stays 0 and the next wake-up
    does not read the same messages again."""
    (worker,) = addresses(1)
    await worker_project(db, worker, [Done(5)])
    assert await consume(db, servers.database_url) == 1
    for n in range(30):
        await emit(db, EventType.CHAT_MESSAGE, random_address(), {"n": n})
    assert await consume(db, servers.database_url) == 0
    newest = await db.fetchval("SELECT max(id) FROM events")
    assert await db.fetchval("SELECT last_event_id FROM leaderboard_consumer_cursor") == newest
