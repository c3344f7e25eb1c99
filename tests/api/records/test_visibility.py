"""Invite-only visibility is one rule for the project reads and the off-chain records.

The selected worker of an invite-only project sees it, also after it was taken off the allowlist
(docs/read-models.md, Visibility); a stranger and an anonymous caller do not. The matrix runs the
same callers through the read API and through the records' visibility check
(``records.access.visible_project``, the call every records operation starts with) and requires
both to give the expected answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from eth_utils import to_checksum_address

from marketplace.records.access import caller_wallets, visible_project
from marketplace.records.errors import ProjectNotFound
from tests.api.identity.conftest import Wallet, link_wallet
from tests.api.projects import seed
from tests.api.records.conftest import (
    HASH_A,
    AppFactory,
    error_code,
    linked_party,
    random_address,
    seed_dispute,
    seed_project,
)
from tests.conftest import User, new_user


def evidence_path(project: str) -> str:
    return f"/v1/projects/{project}/dispute-evidence"


async def read_api_view(client: Any, user: User | None, project: str) -> dict[str, Any]:
    """What the read API shows ``user`` of ``project``: listed, counted, detail, milestones."""
    headers = user.headers if user else {}
    listing = await (await client.get("/v1/projects", headers=headers)).json()
    listed = [item["projectAddress"] for item in listing["items"]]
    by_status = await (await client.get("/v1/projects?status=dispute", headers=headers)).json()
    detail = await client.get(f"/v1/projects/{project}", headers=headers)
    milestones = await client.get(f"/v1/projects/{project}/milestones", headers=headers)
    return {
        "listed": to_checksum_address(project) in listed,
        "count": listing["count"],
        "listed_count": len(listed),
        "dispute_count": by_status["count"],
        "detail": detail.status,
        "milestones": milestones.status,
    }


async def test_selected_worker_removed_from_allowlist_still_sees_the_project(
    client: Any, db: asyncpg.Connection
) -> None:
    owner, worker, stranger = [await linked_party(client) for _ in range(3)]
    await seed_project(db)  # an open project everyone sees
    project = await seed_dispute(
        db,
        owner.address,
        worker.address,
        bidding_access="invite_only",
        allowlist=[worker.lower, random_address()],
    )
    # The allowlist changes on chain after the selection: the worker is no longer on it.
    await db.execute(
        "UPDATE projects SET allowlist = array_remove(allowlist, $2) WHERE project_address = $1",
        project,
        worker.lower,
    )

    seen = await read_api_view(client, worker.user, project)
    assert seen == {
        "listed": True,
        "count": 2,
        "listed_count": 2,
        "dispute_count": 1,
        "detail": 200,
        "milestones": 200,
    }
    detail = await (await client.get(f"/v1/projects/{project}", headers=worker.headers)).json()
    assert detail["selectedBuilderAddress"] == worker.address
    assert detail["biddingAccess"] == "invite_only"
    # The records routes let the worker act on it too.
    resp = await client.post(
        evidence_path(project), json={"evidenceHash": HASH_A}, headers=worker.headers
    )
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["submitterRole"] == "worker"
    resp = await client.get(evidence_path(project), headers=worker.headers)
    assert resp.status == 200
    assert (await resp.json())["count"] == 1

    hidden = {
        "listed": False,
        "count": 1,
        "listed_count": 1,
        "dispute_count": 0,
        "detail": 404,
        "milestones": 404,
    }
    assert await read_api_view(client, stranger.user, project) == hidden
    assert await read_api_view(client, None, project) == hidden
    resp = await client.post(
        evidence_path(project), json={"evidenceHash": HASH_A}, headers=stranger.headers
    )
    assert await error_code(resp, 404) == "project_not_found"
    resp = await client.get(evidence_path(project), headers=stranger.headers)
    assert await error_code(resp, 404) == "project_not_found"
    resp = await client.post(evidence_path(project), json={"evidenceHash": HASH_A})
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.get(evidence_path(project))
    assert await error_code(resp, 401) == "unauthorized"


async def test_a_worker_that_is_replaced_loses_sight(client: Any, db: asyncpg.Connection) -> None:
    """Being the worker is what grants sight, not having once been one."""
    owner, worker, successor = [await linked_party(client) for _ in range(3)]
    project = await seed_dispute(db, owner.address, worker.address, bidding_access="invite_only")
    assert (await client.get(f"/v1/projects/{project}", headers=worker.headers)).status == 200
    await db.execute(
        "UPDATE projects SET selected_builder_address = $2 WHERE project_address = $1",
        project,
        successor.lower,
    )
    assert (await client.get(f"/v1/projects/{project}", headers=worker.headers)).status == 404
    resp = await client.get(evidence_path(project), headers=worker.headers)
    assert await error_code(resp, 404) == "project_not_found"
    assert (await client.get(f"/v1/projects/{project}", headers=successor.headers)).status == 200


@dataclass
class Caller:
    name: str
    user: User
    wallets: list[str]
    # Whether it sees the invite-only project (every caller sees the open one).
    sees_invite_only: bool


@pytest.fixture
async def matrix(db: asyncpg.Connection) -> tuple[dict[str, str], list[Caller], list[str]]:
    owner, allowlisted, worker, admin, stranger = (random_address() for _ in range(5))
    revoked = Caller("revoked links to the owner and worker wallets", new_user(), [], False)
    callers = [
        Caller("owner", new_user(), [owner], True),
        Caller("allowlisted", new_user(), [allowlisted], True),
        # Holding another wallet besides changes nothing.
        Caller("selected worker, not allowlisted", new_user(), [random_address(), worker], True),
        revoked,
        Caller("stranger", new_user(), [stranger], False),
        Caller("no wallet", new_user(), [], False),
        Caller("dispute admin", new_user(), [admin], False),
    ]
    for caller in callers:
        await seed.user(db, caller.user.user_id)
        for wallet in caller.wallets:
            await seed.link(db, caller.user.user_id, wallet)
    for wallet in (owner, worker):
        await seed.link(db, revoked.user.user_id, wallet, revoked=True)
    parties = {"owner_address": owner, "selected_builder_address": worker, "status": "dispute"}
    projects = {
        "open": await seed_project(db, **parties, allowlist=[]),
        "invite_only": await seed_project(
            db, **parties, bidding_access="invite_only", allowlist=[allowlisted, random_address()]
        ),
    }
    return projects, callers, [admin]


async def records_sees(
    db: asyncpg.Connection, caller: Caller, project: str, *, extra: list[str] | None = None
) -> bool:
    wallets = await caller_wallets(db, caller.user.user_id)
    try:
        await visible_project(db, project, wallets, extra=extra or ())
    except ProjectNotFound:
        return False
    return True


async def test_visibility_matrix_is_the_same_for_reads_and_records(
    client: Any, db: asyncpg.Connection, matrix: tuple[dict[str, str], list[Caller], list[str]]
) -> None:
    projects, callers, admins = matrix
    for caller in callers:
        for kind, project in projects.items():
            expected = kind == "open" or caller.sees_invite_only
            view = await read_api_view(client, caller.user, project)
            read_api = {
                "listed": expected,
                "count": 1 + caller.sees_invite_only,
                "listed_count": 1 + caller.sees_invite_only,
                "dispute_count": 1 + caller.sees_invite_only,
                "detail": 200 if expected else 404,
                "milestones": 200 if expected else 404,
            }
            assert view == read_api, (caller.name, kind)
            assert await records_sees(db, caller, project) is expected, (caller.name, kind)
            # Dispute admins (the records' extra wallets) see everything, others unchanged.
            with_admins = expected or caller.name == "dispute admin"
            assert await records_sees(db, caller, project, extra=admins) is with_admins, (
                caller.name,
                kind,
            )
    # Anonymous: open only (the records routes are never anonymous: 401 before any check).
    assert (await read_api_view(client, None, projects["open"]))["detail"] == 200
    assert (await read_api_view(client, None, projects["invite_only"]))["detail"] == 404
    # Unknown and hidden answer alike on the records side as well.
    unknown = random_address()
    assert not await records_sees(db, callers[0], unknown)


async def test_dispute_admins_read_evidence_of_invite_only_projects(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    """The admins' extra sight is the records' only: the read API still hides the project."""
    admin_wallet = Wallet()
    client = await make_client(dispute_admin_wallets=[admin_wallet.address])
    admin = new_user()
    await link_wallet(client, admin.headers, admin_wallet)
    owner, worker = await linked_party(client), await linked_party(client)
    project = await seed_dispute(db, owner.address, worker.address, bidding_access="invite_only")
    resp = await client.post(
        evidence_path(project), json={"evidenceHash": HASH_A}, headers=owner.headers
    )
    assert resp.status == 201

    resp = await client.get(evidence_path(project), headers=admin.headers)
    assert resp.status == 200, await resp.text()
    assert [item["submitterRole"] for item in (await resp.json())["items"]] == ["owner"]
    assert (await client.get(f"/v1/projects/{project}", headers=admin.headers)).status == 404
    # Posting is not reading: the admin is no party, and without the extra sight the project
    # is hidden from it.
    resp = await client.post(
        evidence_path(project), json={"evidenceHash": HASH_A}, headers=admin.headers
    )
    assert await error_code(resp, 404) == "project_not_found"
