"""GET /v1/agents/{idOrWallet}: profiles by user id and by wallet, invite-only projects shown
only to those who may see them (but counted), statistics, disputes, category rankings, 404 and
400. Projects and milestones are read-model rows as the indexer writes them; rankings come from
the board standings rows as the boards consumer writes them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from tests.api.leaderboards.conftest import error_code, link_another, linked_party, random_address
from tests.api.leaderboards.conftest import seed_project as seed_project_row
from tests.conftest import new_user

NOW = datetime.now(UTC)


async def seed_milestones(
    db: asyncpg.Connection, project: str, statuses: list[str], payout: int = 100, **extra: Any
) -> None:
    for index, status in enumerate(statuses):
        await db.execute(
            "INSERT INTO milestones (project_address, milestone_index, status, payout_usdc,"
            " approved_at, resolved_at) VALUES ($1, $2, $3, $4, $5, $6)",
            project,
            index,
            status,
            payout * (index + 1),
            NOW if status == "approved" else None,
            extra.get("resolved", {}).get(index),
        )


async def seed_project(
    db: asyncpg.Connection, owner: str, worker: str | None, **values: Any
) -> str:
    return await seed_project_row(
        db,
        owner_address=owner.lower(),
        selected_builder_address=worker.lower() if worker else None,
        status="building" if worker else "bidding",
        milestone_count=3,
        **values,
    )


async def set_username(db: asyncpg.Connection, user_id: uuid.UUID, name: str) -> None:
    await db.execute("INSERT INTO usernames (user_id, username) VALUES ($1, $2)", user_id, name)


async def profile(client: Any, id_or_wallet: str, headers: dict[str, str] | None = None) -> Any:
    resp = await client.get(f"/v1/agents/{id_or_wallet}", headers=headers or {})
    body = await resp.json()
    assert resp.status == 200, body
    return body


async def test_a_profile_by_user_id_and_by_each_wallet(client: Any, db: asyncpg.Connection) -> None:
    agent = await linked_party(client)
    second = await link_another(client, agent)
    await set_username(db, agent.user.user_id, "builder_bot")
    owner = await linked_party(client)
    worked = await seed_project(db, owner.address, agent.address)
    await seed_milestones(db, worked, ["approved", "approved", "submitted"])
    owned = await seed_project(db, second.address, None)
    await db.execute(
        "INSERT INTO project_metadata (project_address, owner_address, title, project_mode,"
        " bidding_access, claimed_by, claim_mode, hash_version, tx_hash, config_hash)"
        " VALUES ($1, $2, $3, 'standard', 'open', $4, 'direct', 'v1_direct',"
        " '0x' || repeat('a', 64), '0x' || repeat('b', 64))",
        owned,
        second.address.lower(),
        "Second wallet's project",
        agent.user.user_id,
    )

    by_id = await profile(client, str(agent.user.user_id))
    assert by_id["userId"] == str(agent.user.user_id)
    assert by_id["username"] == "builder_bot"
    assert sorted(w.lower() for w in by_id["wallets"]) == sorted(
        [agent.lower, second.address.lower()]
    )
    projects = {p["projectAddress"].lower(): p for p in by_id["projects"]}
    assert set(projects) == {worked, owned}
    assert projects[worked]["role"] == "worker"
    assert (projects[worked]["completedMilestones"], projects[worked]["payoutUSDC"]) == (2, "300")
    assert projects[owned] == {
        "projectAddress": projects[owned]["projectAddress"],
        "title": "Second wallet's project",
        "role": "owner",
        "status": "bidding",
        "completedMilestones": 0,
        "payoutUSDC": "0",
    }
    assert by_id["stats"] == {
        "completedMilestones": 2,
        "totalPayoutUSDC": "300",
        "projects": 2,
        "disputes": 0,
        "disputesLost": 0,
    }
    # Any of its wallets, in any case, shows the same profile.
    for wallet in (
        agent.address,
        second.address.lower(),
        second.address.upper().replace("0X", "0x"),
    ):
        assert await profile(client, wallet) == by_id


async def test_invite_only_projects_are_listed_only_to_insiders_but_always_counted(
    client: Any, db: asyncpg.Connection
) -> None:
    agent, owner, stranger = [await linked_party(client) for _ in range(3)]
    hidden = await seed_project(
        db, owner.address, agent.address, bidding_access="invite_only", allowlist=[]
    )
    await seed_milestones(db, hidden, ["approved", "approved", "approved"])
    public = await seed_project(db, owner.address, agent.address)
    await seed_milestones(db, public, ["approved"])

    def listed(body: Any) -> set[str]:
        return {p["projectAddress"].lower() for p in body["projects"]}

    for headers in (None, stranger.headers):
        seen = await profile(client, str(agent.user.user_id), headers)
        assert listed(seen) == {public}
        assert seen["stats"]["completedMilestones"] == 4  # 3 hidden + 1 public
        assert seen["stats"]["projects"] == 2
    for insider in (agent, owner):
        assert listed(await profile(client, str(agent.user.user_id), insider.headers)) == {
            public,
            hidden,
        }
    # The owner's profile hides the project from strangers too.
    assert listed(await profile(client, owner.address, stranger.headers)) == {public}


async def test_disputes_and_the_side_that_lost(client: Any, db: asyncpg.Connection) -> None:
    worker, owner = await linked_party(client), await linked_party(client)
    project = await seed_project(db, owner.address, worker.address)
    # 0: lost by the worker (rejected); 1: won by the worker (approved after a dispute);
    # 2: in dispute now.
    await seed_milestones(
        db, project, ["rejected", "approved", "disputed"], resolved={0: NOW, 1: NOW}
    )
    as_worker = (await profile(client, worker.address))["stats"]
    assert (as_worker["disputes"], as_worker["disputesLost"]) == (3, 1)
    as_owner = (await profile(client, owner.address))["stats"]
    assert (as_owner["disputes"], as_owner["disputesLost"]) == (3, 1)
    assert as_owner["completedMilestones"] == 0  # owners complete nothing themselves
    assert as_worker["completedMilestones"] == 1


async def test_a_wallet_without_user_and_unknown_ones(client: Any, db: asyncpg.Connection) -> None:
    unlinked_worker = random_address()
    owner = await linked_party(client)
    project = await seed_project(db, owner.address, unlinked_worker)
    await seed_milestones(db, project, ["approved"])
    body = await profile(client, unlinked_worker)
    assert (body["userId"], body["username"]) == (None, None)
    assert [w.lower() for w in body["wallets"]] == [unlinked_worker]
    assert body["stats"]["completedMilestones"] == 1

    resp = await client.get(f"/v1/agents/{random_address()}")
    assert await error_code(resp, 404) == "agent_not_found"
    resp = await client.get(f"/v1/agents/{uuid.uuid4()}")
    assert await error_code(resp, 404) == "agent_not_found"
    for bad in ("alice", "0x1234", "0x" + "g" * 40, "not-a-uuid-at-all"):
        resp = await client.get(f"/v1/agents/{bad}")
        assert await error_code(resp, 400) == "invalid_request", bad
    # A user without wallets has a profile (and nothing in it).
    lone = new_user()
    await db.execute("INSERT INTO users (user_id, email_verified) VALUES ($1, true)", lone.user_id)
    body = await profile(client, str(lone.user_id))
    assert body["wallets"] == [] and body["projects"] == []
    assert body["stats"]["projects"] == 0
    # A bad credential is still a 401 on this public route.
    resp = await client.get(f"/v1/agents/{lone.user_id}", headers={"Authorization": "Bearer x"})
    assert resp.status == 401


async def test_category_rankings_are_the_best_rank_of_the_wallets(
    client: Any, db: asyncpg.Connection
) -> None:
    agent = await linked_party(client)
    second = await link_another(client, agent)
    wallets = {"first": agent.lower, "second": second.address.lower()}
    rows = [
        # (category, wallet, milestones, payout)
        ("frontend", "0x" + "01" * 20, 5, 900),
        ("frontend", wallets["first"], 2, 500),
        ("frontend", "0x" + "02" * 20, 1, 500),  # the same payout: the wallet address decides
        ("frontend", wallets["second"], 1, 100),
        ("backend", wallets["second"], 3, 700),
        ("*", wallets["first"], 2, 500),
    ]
    for category, wallet, milestones, payout in rows:
        await db.execute(
            "INSERT INTO leaderboard_standings (category, time_window, wallet_address,"
            " completed_milestones, total_payout_usdc, projects, categories, last_completed_at)"
            " VALUES ($1, 'all', $2, $3, $4, 1, ARRAY[$1], now())",
            category,
            wallet,
            milestones,
            payout,
        )
    body = await profile(client, str(agent.user.user_id))
    by_category = {r["category"]: r for r in body["categoryRankings"]}
    assert [r["category"] for r in body["categoryRankings"]] == ["frontend", "backend"]  # sortOrder
    # The first wallet ties with 0x0202..., whose address sorts after it: rank 2.
    first_before = wallets["first"] < "0x" + "02" * 20
    assert by_category["frontend"] == {
        "category": "frontend",
        "rank": 2 if first_before else 3,
        "completedMilestones": 2,
        "totalPayoutUSDC": "500",
    }
    assert by_category["backend"]["rank"] == 1
    assert by_category["backend"]["totalPayoutUSDC"] == "700"
