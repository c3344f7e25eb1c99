"""`GET /v1/verifier/jobs`: who sees which jobs (their own, their projects', all for verifier
admins), the filters, and keyset pagination over the real table.

A job is accepted only for a dispute on the chain, one verdict per dispute: each job here judges
a dispute of its own on the package's devnet (projects of the same parties where a test needs
several jobs of one owner)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg

from marketplace.config import Settings
from marketplace.identity.permissions import set_flags
from tests.api.verifier.conftest import (
    JOBS,
    Executors,
    Party,
    create_job,
    disputed_with_parties,
    error_code,
    job_body,
    linked_party,
    random_address,
    set_policies,
    verifier_worker,
    wait_status,
)
from tests.conftest import new_user
from tests.contracts.helpers import Chain, DisputeOutcome


async def disputed_job_body(
    client: Any,
    db: asyncpg.Connection,
    chain: Chain,
    parties: tuple[Party, Party] | None = None,
    *,
    index: int = 0,
) -> tuple[dict[str, Any], Party, Party]:
    """The body of a job request for a new dispute (milestone ``index``) of ``parties``' own
    project (new parties by default), and the parties."""
    ref = random_address()
    project, owner, worker = await disputed_with_parties(
        client, db, chain, ref, index=index, parties=parties
    )
    return job_body(project, milestoneIndex=index, deliveryRef=ref), owner, worker


async def listed(client: Any, headers: dict[str, str], query: str = "") -> list[str]:
    resp = await client.get(f"{JOBS}{query}", headers=headers)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["count"] == len(body["items"])
    return [item["id"] for item in body["items"]]


async def walk(client: Any, headers: dict[str, str], query: str, limit: int) -> list[list[str]]:
    """Every page of a listing, following ``nextCursor``."""
    pages: list[list[str]] = []
    cursor: str | None = None
    sep = "&" if query else "?"
    while True:
        path = f"{JOBS}{query}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        resp = await client.get(path, headers=headers)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        pages.append([item["id"] for item in body["items"]])
        cursor = body["nextCursor"]
        if cursor is None:
            return pages
        assert len(pages) < 50


async def test_who_sees_which_jobs(vclient: Any, db: asyncpg.Connection, chain: Chain) -> None:
    # A's parties have two disputes (projects), one for each party's job; so have B's.
    a_owners, owner_a, worker_a = await disputed_job_body(vclient, db, chain)
    a_workers, _, _ = await disputed_job_body(vclient, db, chain, (owner_a, worker_a))
    b_owners, owner_b, worker_b = await disputed_job_body(vclient, db, chain)
    b_admins, _, _ = await disputed_job_body(vclient, db, chain, (owner_b, worker_b))
    admin, outsider = new_user(), await linked_party(vclient)
    await set_flags(db, admin.user_id, moderation_admin=None, verifier_admin=True)

    a_by_owner = (await create_job(vclient, owner_a.headers, a_owners))["jobId"]
    a_by_worker = (await create_job(vclient, worker_a.headers, a_workers))["jobId"]
    b_by_owner = (await create_job(vclient, owner_b.headers, b_owners))["jobId"]
    # The admin's job on a project of B's owner: B's owner sees it (its project), the admin
    # (creator) too.
    b_by_admin = (await create_job(vclient, admin.headers, b_admins))["jobId"]

    newest_first = [b_by_admin, b_by_owner, a_by_worker, a_by_owner]
    assert await listed(vclient, owner_a.headers) == [a_by_worker, a_by_owner]
    assert await listed(vclient, worker_a.headers) == [a_by_worker, a_by_owner]
    assert await listed(vclient, owner_b.headers) == [b_by_admin, b_by_owner]
    assert await listed(vclient, outsider.headers) == []
    assert await listed(vclient, admin.headers) == newest_first
    # The admin flag taken away: only the job it created.
    await set_flags(db, admin.user_id, moderation_admin=None, verifier_admin=False)
    assert await listed(vclient, admin.headers) == [b_by_admin]

    # The worker's link revoked: it sees the job it created, no longer the owner's.
    resp = await vclient.delete(f"/v1/wallet-links/{worker_a.address}", headers=worker_a.headers)
    assert resp.status == 200
    assert await listed(vclient, worker_a.headers) == [a_by_worker]
    # Items are full records with the request as sent.
    resp = await vclient.get(JOBS, headers=owner_b.headers)
    items = (await resp.json())["items"]
    assert [item["request"] for item in items] == [
        {**body, "nonce": None, "deadline": None} for body in (b_admins, b_owners)
    ]
    assert {item["status"] for item in items} == {"queued"}
    assert {item["attemptCount"] for item in items} == {0}


async def test_filters(
    vclient: Any,
    db: asyncpg.Connection,
    chain: Chain,
    worker_settings: Callable[..., Settings],
    executors: Executors,
) -> None:
    ref_a0, ref_a1, ref_b1 = random_address(), random_address(), random_address()
    project_a, owner, worker = await disputed_with_parties(vclient, db, chain, ref_a0)
    # B: another project of the same owner, its milestone 1 disputed.
    project_b, _, _ = await disputed_with_parties(
        vclient, db, chain, ref_b1, index=1, parties=(owner, worker)
    )
    a0 = (await create_job(vclient, owner.headers, job_body(project_a, deliveryRef=ref_a0)))[
        "jobId"
    ]
    # A's dispute is resolved (the multisig approves milestone 0); later milestone 1 is
    # submitted and disputed: a second dispute of A, on another milestone.
    contract = chain.project(project_a)
    chain.ok(chain.a.multisig, contract.functions.resolveDispute(int(DisputeOutcome.APPROVE), 0))
    chain.dispute(contract, 1, delivery_ref=ref_a1)
    await set_policies(db, project_a, [(0, "address-smoke"), (1, "address-smoke")])
    a1 = (
        await create_job(
            vclient, owner.headers, job_body(project_a, milestoneIndex=1, deliveryRef=ref_a1)
        )
    )["jobId"]
    b1 = (
        await create_job(
            vclient, owner.headers, job_body(project_b, milestoneIndex=1, deliveryRef=ref_b1)
        )
    )["jobId"]
    # Only b1 runs: the others wait for a later attempt (as after a failed one).
    await db.execute(
        "UPDATE jobs SET next_attempt_at = now() + interval '1 hour' "
        "WHERE id IN (SELECT job_id FROM verifier_jobs WHERE id <> $1::uuid)",
        b1,
    )
    async with verifier_worker(worker_settings(), executors=executors):
        done = await wait_status(vclient, owner.headers, b1, "completed")
    resp = await vclient.get(JOBS, headers=owner.headers)
    assert (await resp.json())["items"][0] == done, done
    assert done["attemptCount"] == 1, done

    assert await listed(vclient, owner.headers) == [b1, a1, a0]
    assert await listed(vclient, owner.headers, f"?projectAddress={project_a}") == [a1, a0]
    # A checksummed address filters the same.
    mixed = "0x" + project_b[2:].upper()
    assert await listed(vclient, owner.headers, f"?projectAddress={mixed}") == [b1]
    assert await listed(vclient, owner.headers, "?milestoneIndex=0") == [a0]
    assert await listed(vclient, owner.headers, "?milestoneIndex=1") == [b1, a1]
    assert await listed(
        vclient, owner.headers, f"?projectAddress={project_a}&milestoneIndex=1"
    ) == [a1]
    assert (
        await listed(vclient, owner.headers, f"?projectAddress={project_b}&milestoneIndex=0") == []
    )
    assert await listed(vclient, owner.headers, "?status=queued") == [a1, a0]
    assert await listed(vclient, owner.headers, "?status=completed") == [b1]
    assert await listed(vclient, owner.headers, "?status=failed") == []
    for query in (
        "?status=done",
        "?milestoneIndex=-1",
        "?milestoneIndex=65536",
        "?projectAddress=0x12",
        "?limit=0",
        "?limit=101",
    ):
        resp = await vclient.get(f"{JOBS}{query}", headers=owner.headers)
        assert await error_code(resp, 400) == "invalid_request", query


async def test_pagination(vclient: Any, db: asyncpg.Connection, chain: Chain) -> None:
    # Seven disputes of the same parties' projects (one job each), on milestone 0 and 1 in turn.
    bodies: list[dict[str, Any]] = []
    parties: tuple[Party, Party] | None = None
    for n in range(8):
        body, owner, worker = await disputed_job_body(vclient, db, chain, parties, index=n % 2)
        bodies.append(body)
        parties = (owner, worker)
    created: list[str] = []
    for n in range(7):
        party: Party = owner if n % 2 else worker
        created.append((await create_job(vclient, party.headers, bodies[n]))["jobId"])
    newest_first = created[::-1]
    for limit in (1, 2, 3, 7, 100):
        pages = await walk(vclient, owner.headers, "", limit)
        flat = [job for page in pages for job in page]
        assert flat == newest_first, limit
        assert all(len(page) == limit for page in pages[:-1]), limit
        assert len(pages) == -(-7 // limit), limit
    # A filter holds across pages.
    pages = await walk(vclient, owner.headers, "?milestoneIndex=1&status=queued", 2)
    assert [job for page in pages for job in page] == created[1::2][::-1]
    assert [len(page) for page in pages] == [2, 1]
    # A job created between pages shows up on none of the older pages (keyset, no duplicates).
    resp = await vclient.get(f"{JOBS}?limit=3", headers=owner.headers)
    first = await resp.json()
    await create_job(vclient, owner.headers, bodies[7])
    resp = await vclient.get(f"{JOBS}?limit=10&cursor={first['nextCursor']}", headers=owner.headers)
    rest = [item["id"] for item in (await resp.json())["items"]]
    assert [i["id"] for i in first["items"]] + rest == newest_first
    # Not base64, another listing's tag, not canonical (padding), too long.
    for cursor in ("garbage!", "cDE6MTIz", "djE6MTIz=", "x" * 201):
        resp = await vclient.get(f"{JOBS}?cursor={cursor}", headers=owner.headers)
        assert await error_code(resp, 400) == "invalid_request", cursor
