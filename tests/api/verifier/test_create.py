"""`POST /v1/verifier/jobs`: the accepted shape, who may request a job (owner and selected worker
through active links, verifier admins), and every refusal with its status and code, on the
suite's PostgreSQL with a devnet-backed signer configuration. No job runs here."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr

from marketplace.identity.permissions import set_flags
from marketplace.verifier.policies import available_policies
from marketplace.verifier.policies.tooling import FORGE_BIN_ENV, probe
from marketplace.verifier.policy import PolicyId
from tests.api.identity.conftest import agent, create_key
from tests.api.verifier.conftest import (
    JOBS,
    AppFactory,
    Devnet,
    create_job,
    disputed_with_parties,
    error_code,
    job_body,
    linked_party,
    project_with_parties,
    random_address,
    seed_project,
    verifier_overrides,
)
from tests.conftest import make_settings, new_user
from tests.contracts.helpers import Chain

BASE_URL = "https://market.example"


async def count_rows(db: asyncpg.Connection) -> tuple[int, int]:
    jobs = await db.fetchval("SELECT count(*) FROM verifier_jobs")
    queued = await db.fetchval("SELECT count(*) FROM jobs WHERE queue = 'verifier'")
    return int(jobs), int(queued)


async def test_accepted_shape_with_relative_poll_url(
    vclient: Any, db: asyncpg.Connection, servers: Any, devnet: Devnet, chain: Chain
) -> None:
    ref = random_address()
    project, owner, _ = await disputed_with_parties(vclient, db, chain, ref, index=1)
    # A requested deadline may shorten the attestation's life (at most block time + TTL).
    deadline = devnet.latest_block_time() + 600
    body = job_body(project, milestoneIndex=1, deliveryRef=ref, nonce=42, deadline=deadline)
    resp = await vclient.post(JOBS, json=body, headers=owner.headers)
    assert resp.status == 202, await resp.text()
    accepted = await resp.json()
    job_id = accepted["jobId"]
    uuid.UUID(job_id)
    assert set(accepted) == {
        "jobId",
        "status",
        "attemptCount",
        "maxAttempts",
        "createdAt",
        "retentionExpiresAt",
        "request",
        "pollUrl",
        "availablePolicies",
    }
    assert (accepted["status"], accepted["attemptCount"], accepted["maxAttempts"]) == (
        "queued",
        0,
        3,
    )
    created = datetime.fromisoformat(accepted["createdAt"])
    assert datetime.fromisoformat(accepted["retentionExpiresAt"]) - created == timedelta(days=30)
    assert accepted["request"] == body
    assert accepted["pollUrl"] == f"{JOBS}/{job_id}"
    assert resp.headers["Location"] == accepted["pollUrl"]
    settings = make_settings(servers, **verifier_overrides(devnet))
    assert accepted["availablePolicies"] == [p.value for p in available_policies(settings)]
    assert "address-smoke" in accepted["availablePolicies"]
    # One request row and one job on the `verifier` queue, linked, in one transaction.
    row = await db.fetchrow(
        "SELECT v.created_by, v.attestation_nonce, j.payload, j.max_attempts "
        "FROM verifier_jobs v JOIN jobs j ON j.id = v.job_id WHERE v.id = $1",
        uuid.UUID(job_id),
    )
    assert row is not None
    assert row["created_by"] == owner.user.user_id
    assert int(row["attestation_nonce"]) == 42
    assert row["max_attempts"] == 3
    # The poll URL answers with the record.
    polled = await vclient.get(accepted["pollUrl"], headers=owner.headers)
    assert polled.status == 200
    record = await polled.json()
    assert (record["id"], record["status"], record["result"]) == (job_id, "queued", None)
    assert record["request"] == body


async def test_absolute_poll_url_and_configured_max_attempts(
    make_client: AppFactory, db: asyncpg.Connection, devnet: Devnet, chain: Chain
) -> None:
    client = await make_client(
        **verifier_overrides(
            devnet, public_base_url=BASE_URL, verifier_max_attempts=5, verifier_retention_days=2
        )
    )
    ref = random_address()
    project, _, worker = await disputed_with_parties(client, db, chain, ref)
    accepted = await create_job(client, worker.headers, job_body(project, deliveryRef=ref))
    assert accepted["pollUrl"] == f"{BASE_URL}{JOBS}/{accepted['jobId']}"
    assert accepted["maxAttempts"] == 5
    created = datetime.fromisoformat(accepted["createdAt"])
    assert datetime.fromisoformat(accepted["retentionExpiresAt"]) - created == timedelta(days=2)
    # A server-chosen nonce: drawn at creation, the same for every attempt.
    assert accepted["request"]["nonce"] is None
    nonce = await db.fetchval(
        "SELECT attestation_nonce FROM verifier_jobs WHERE id = $1", uuid.UUID(accepted["jobId"])
    )
    assert 0 <= int(nonce) < 2**128


async def test_owner_and_worker_through_active_links_only(
    vclient: Any, db: asyncpg.Connection, chain: Chain
) -> None:
    refs = [random_address() for _ in range(3)]
    project, owner, worker = await disputed_with_parties(vclient, db, chain, refs[0])
    # One verdict per dispute: each party's job judges a dispute of its own (same parties).
    others = [
        (await disputed_with_parties(vclient, db, chain, ref, parties=(owner, worker)))[0]
        for ref in refs[1:]
    ]
    await create_job(vclient, owner.headers, job_body(project, deliveryRef=refs[0]))
    await create_job(vclient, worker.headers, job_body(others[0], deliveryRef=refs[1]))
    # Revoke the worker's link through the API: its user is no longer a party.
    resp = await vclient.delete(f"/v1/wallet-links/{worker.address}", headers=worker.headers)
    assert resp.status == 200, await resp.text()
    resp = await vclient.post(
        JOBS, json=job_body(others[1], deliveryRef=refs[2]), headers=worker.headers
    )
    assert await error_code(resp, 403) == "not_project_party"
    assert await count_rows(db) == (2, 2)


async def test_verifier_admin_may_request_on_any_project(
    vclient: Any, db: asyncpg.Connection, chain: Chain
) -> None:
    hidden_ref, visible_ref = random_address(), random_address()
    hidden, _, _ = await disputed_with_parties(
        vclient, db, chain, hidden_ref, bidding_access="invite_only", allowlist=[]
    )
    visible, _, _ = await disputed_with_parties(vclient, db, chain, visible_ref)
    admin = new_user()
    for project, ref, status, code in (
        (hidden, hidden_ref, 404, "project_not_found"),
        (visible, visible_ref, 403, "not_project_party"),
    ):
        body = job_body(project, deliveryRef=ref)
        resp = await vclient.post(JOBS, json=body, headers=admin.headers)
        assert await error_code(resp, status) == code
        await set_flags(db, admin.user_id, moderation_admin=None, verifier_admin=True)
        await create_job(vclient, admin.headers, body)
        await set_flags(db, admin.user_id, moderation_admin=None, verifier_admin=False)
    assert await count_rows(db) == (2, 2)


async def test_stranger_is_refused_403_on_a_visible_project_and_404_on_a_hidden_one(
    vclient: Any, db: asyncpg.Connection, chain: Chain
) -> None:
    stranger = await linked_party(vclient)
    project, owner, worker = await project_with_parties(vclient, db)
    resp = await vclient.post(JOBS, json=job_body(project), headers=stranger.headers)
    assert await error_code(resp, 403) == "not_project_party"
    ref = random_address()
    hidden, _, _ = await disputed_with_parties(
        vclient,
        db,
        chain,
        ref,
        parties=(owner, worker),
        bidding_access="invite_only",
        allowlist=[],
    )
    resp = await vclient.post(
        JOBS, json=job_body(hidden, deliveryRef=ref), headers=stranger.headers
    )
    assert await error_code(resp, 404) == "project_not_found"
    # The owner sees its invite-only project and may request.
    await create_job(vclient, owner.headers, job_body(hidden, deliveryRef=ref))
    assert await count_rows(db) == (1, 1)


async def test_anonymous_is_401_on_every_route(
    vclient: Any, db: asyncpg.Connection, chain: Chain
) -> None:
    ref = random_address()
    project, owner, _ = await disputed_with_parties(vclient, db, chain, ref)
    body = job_body(project, deliveryRef=ref)
    job_id = (await create_job(vclient, owner.headers, body))["jobId"]
    resp = await vclient.post(JOBS, json=body)
    assert await error_code(resp, 401) == "unauthorized"
    for path in (
        JOBS,
        f"{JOBS}/{job_id}",
        f"{JOBS}/{job_id}/evidence",
        f"{JOBS}/{job_id}/evidence/raw",
    ):
        resp = await vclient.get(path)
        assert await error_code(resp, 401) == "unauthorized", path
    assert await count_rows(db) == (1, 1)


@pytest.fixture
def without_forge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """This process's tooling probed again with forge pointing at nothing, so one policy is
    missing whatever this machine has installed."""
    monkeypatch.setenv(FORGE_BIN_ENV, str(tmp_path / "forge-not-installed"))
    probe.cache_clear()
    yield
    monkeypatch.undo()
    probe.cache_clear()


async def test_conflicts(
    vclient: Any,
    db: asyncpg.Connection,
    servers: Any,
    devnet: Devnet,
    chain: Chain,
    without_forge: None,
) -> None:
    ref = random_address()
    project, owner, _ = await disputed_with_parties(vclient, db, chain, ref, index=1)
    cases: list[tuple[dict[str, Any], str]] = [
        (job_body(project, chainId=1), "chain_mismatch"),
        (job_body(random_address()), "project_not_indexed"),
        (job_body(project, milestoneIndex=2), "milestone_out_of_range"),
        (job_body(project, milestoneIndex=65_535), "milestone_out_of_range"),
    ]
    # A policy whose tooling this node lacks is refused, never accepted for a fake pass.
    settings = make_settings(servers, **verifier_overrides(devnet))
    missing = [p for p in PolicyId if p not in available_policies(settings)]
    assert PolicyId.FORGE_TEST in missing
    for policy in missing:
        cases.append(
            (
                job_body(project, checkPolicyId=policy.value, deliveryRef="acme/widget@main"),
                "policy_unavailable",
            )
        )
    for body, code in cases:
        resp = await vclient.post(JOBS, json=body, headers=owner.headers)
        assert await error_code(resp, 409) == code, body
    # One milestone below the count (the disputed one) is accepted; the policies offered leave
    # the missing out.
    accepted = await create_job(
        vclient, owner.headers, job_body(project, milestoneIndex=1, deliveryRef=ref)
    )
    assert accepted["availablePolicies"] == [p.value for p in PolicyId if p not in missing]
    assert await count_rows(db) == (1, 1)


async def test_bad_bodies_and_delivery_refs_are_400(vclient: Any, db: asyncpg.Connection) -> None:
    project, owner, _ = await project_with_parties(vclient, db)
    bodies = [
        job_body(project, unknown="x"),
        job_body(project, nonce=-1),
        job_body(project, deadline=0),
        job_body(project, milestoneIndex=65_536),
        job_body(project, milestoneIndex=-1),
        job_body(project, chainId=0),
        job_body(project, checkPolicyId="llm-judge"),
        job_body(project, deliveryRef=""),
        job_body(project, projectAddress="0x1234"),
        job_body(project, nonce=2**256),
        {k: v for k, v in job_body(project).items() if k != "deliveryRef"},
    ]
    for body in bodies:
        resp = await vclient.post(JOBS, json=body, headers=owner.headers)
        assert await error_code(resp, 400) == "invalid_request", body
    # deliveryRefs the policy cannot read: 400 naming the field, before any job exists.
    for policy, ref in [
        ("address-smoke", "not-an-address"),
        ("address-smoke", "0x" + "ab" * 19),
        ("github-ref", "https://example.com/no-ref"),
        ("figma-ref", "https://example.com/file/KEY"),
        ("screenshot-ref", "ftp://example.com/a.png"),
    ]:
        resp = await vclient.post(
            JOBS,
            json=job_body(project, checkPolicyId=policy, deliveryRef=ref),
            headers=owner.headers,
        )
        body = await resp.json()
        assert await error_code(resp, 400) == "invalid_request", (policy, ref)
        assert [d["field"] for d in body["details"]] == ["deliveryRef"], body
    assert await count_rows(db) == (0, 0)


async def test_unverified_email_is_refused(vclient: Any, db: asyncpg.Connection) -> None:
    party = await linked_party(vclient, email_verified=False)
    project = await seed_project(db, owner_address=party.lower)
    resp = await vclient.post(JOBS, json=job_body(project), headers=party.headers)
    assert await error_code(resp, 403) == "email_not_verified"
    # Reads are not guarded.
    resp = await vclient.get(JOBS, headers=party.headers)
    assert resp.status == 200
    assert await count_rows(db) == (0, 0)


async def test_503_without_a_signing_key(
    make_client: AppFactory, db: asyncpg.Connection, devnet: Devnet
) -> None:
    client = await make_client(**verifier_overrides(devnet, verifier_private_key=None))
    project, owner, _ = await project_with_parties(client, db)
    resp = await client.post(JOBS, json=job_body(project), headers=owner.headers)
    assert await error_code(resp, 503) == "verifier_not_configured"
    # An empty MARKETPLACE_VERIFIER_PRIVATE_KEY means none too.
    client = await make_client(**verifier_overrides(devnet, verifier_private_key=""))
    resp = await client.post(JOBS, json=job_body(project), headers=owner.headers)
    assert await error_code(resp, 503) == "verifier_not_configured"
    assert await count_rows(db) == (0, 0)
    # The key alone is not enough either: attestations need the registry (their domain).
    client = await make_client(
        **verifier_overrides(devnet, verifier_private_key=SecretStr("0x" + "11" * 32))
        | {"registry_address": ""}
    )
    resp = await client.post(JOBS, json=job_body(project), headers=owner.headers)
    assert await error_code(resp, 503) == "verifier_not_configured"


async def test_an_agent_key_acts_for_its_user(
    vclient: Any, db: asyncpg.Connection, chain: Chain
) -> None:
    ref = random_address()
    project, owner, _ = await disputed_with_parties(vclient, db, chain, ref)
    stranger = await linked_party(vclient)
    key = await create_key(vclient, owner.user)
    accepted = await create_job(vclient, agent(key["secret"]), job_body(project, deliveryRef=ref))
    created_by = await db.fetchval(
        "SELECT created_by FROM verifier_jobs WHERE id = $1", uuid.UUID(accepted["jobId"])
    )
    assert created_by == owner.user.user_id
    resp = await vclient.get(JOBS, headers=agent(key["secret"]))
    assert [j["id"] for j in (await resp.json())["items"]] == [accepted["jobId"]]
    # A stranger's key is a stranger.
    other = await create_key(vclient, stranger.user)
    resp = await vclient.post(
        JOBS, json=job_body(project, deliveryRef=ref), headers=agent(other["secret"])
    )
    assert await error_code(resp, 403) == "not_project_party"


async def test_delivery_ref_hosts_no_fetch_can_reach_are_400(
    vclient: Any, db: asyncpg.Connection
) -> None:
    """Legacy IPv4 host forms (decimal, hex, octal, shortened) and bracketed hosts that are not
    IPv6 addresses are refused when the request is read, naming body.deliveryRef, instead of
    queueing a job that could only fail. This comes before the project checks: the project need
    not exist."""
    party = await linked_party(vclient)
    for policy, ref in [
        ("screenshot-ref", "https://2130706433/x.png"),
        ("screenshot-ref", "https://0177.0.0.1/x.png"),
        ("screenshot-ref", "https://127.1/x.png"),
        ("figma-ref", "https://0x7f.0.0.1/file/KEY/x"),
        ("screenshot-ref", "https://[v1.x]/x.png"),
    ]:
        resp = await vclient.post(
            JOBS,
            json=job_body(random_address(), checkPolicyId=policy, deliveryRef=ref),
            headers=party.headers,
        )
        body = await resp.json()
        assert await error_code(resp, 400) == "invalid_request", (policy, ref, body)
        assert [d["field"] for d in body["details"]] == ["deliveryRef"], body
        assert body["message"].startswith("invalid request: body.deliveryRef: "), body
        assert "IPv4" in body["message"] or "IPv6" in body["message"], body
    assert await count_rows(db) == (0, 0)
