"""Verifier jobs run to completion by a `verifier` worker (and its policy executor actor) against
a real anvil devnet: the full record's result (evidence hash recomputed here, the EIP-712
attestation recovered to the signer), the milestone read model, the reads of a stranger, the
evidence and raw evidence, the retention sweep, retries at job level (an RPC port nobody listens
on), and one verdict per dispute. Every job judges a real dispute on the devnet (one verdict per
dispute: each job gets a disputed project of its own)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import ray
from aiohttp import web
from eth_utils import keccak, to_checksum_address

from marketplace.chain.eip712 import recover_attestation_signer
from marketplace.config import Settings
from marketplace.identity.permissions import set_flags
from marketplace.storage.pool import create_pool
from marketplace.storage.repositories.verifier_jobs import sweep_expired
from marketplace.verifier.retention import sweep
from tests.api.verifier.conftest import (
    JOBS,
    SIGNER,
    Devnet,
    Executors,
    LongestBackoff,
    create_job,
    disputed_with_parties,
    error_code,
    get_job,
    job_body,
    linked_party,
    random_address,
    verifier_worker,
    wait_status,
)
from tests.conftest import new_user
from tests.contracts.helpers import Chain
from tests.support.chain import reverting_chain
from tests.support.verifier_fixtures import PNG_1X1
from tests.support.waiting import eventually_value

TTL = 3600


def recomputed_hash(evidence: dict[str, Any]) -> str:
    text = json.dumps(evidence, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "0x" + keccak(text.encode()).hex()


def check_attestation(
    job: dict[str, Any], devnet: Devnet, project: str, milestone: int
) -> dict[str, Any]:
    result = job["result"]
    attestation = result["attestation"]
    assert attestation["signer"] == SIGNER
    assert attestation["project"] == to_checksum_address(project)
    assert attestation["milestoneIndex"] == milestone
    assert attestation["passes"] is result["passes"]
    assert attestation["evidenceHash"] == result["evidenceHash"]
    assert attestation["chainId"] == devnet.deployment.chain_id
    recovered = recover_attestation_signer(
        bytes.fromhex(attestation["signature"].removeprefix("0x")),
        chain_id=devnet.deployment.chain_id,
        registry=devnet.deployment.registry,
        project=project,
        milestone_index=milestone,
        passes=result["passes"],
        evidence_hash=result["evidenceHash"],
        deadline=attestation["deadline"],
        nonce=attestation["nonce"],
    )
    assert recovered == SIGNER
    # Any other field signs something else.
    other = recover_attestation_signer(
        bytes.fromhex(attestation["signature"].removeprefix("0x")),
        chain_id=devnet.deployment.chain_id,
        registry=devnet.deployment.registry,
        project=project,
        milestone_index=milestone,
        passes=not result["passes"],
        evidence_hash=result["evidenceHash"],
        deadline=attestation["deadline"],
        nonce=attestation["nonce"],
    )
    assert other != SIGNER
    return dict(attestation)


async def test_jobs_complete_with_evidence_attestation_and_milestone_read_model(
    vclient: Any,
    db: asyncpg.Connection,
    devnet: Devnet,
    chain: Chain,
    worker_settings: Callable[..., Settings],
    executors: Executors,
) -> None:
    registry = devnet.deployment.registry
    empty_ref = random_address()
    # Milestone 1 disputed over each delivery (one verdict per dispute: a project each), the
    # same owner and worker.
    project, owner, worker = await disputed_with_parties(vclient, db, chain, registry, index=1)
    other, _, _ = await disputed_with_parties(
        vclient, db, chain, empty_ref, index=1, parties=(owner, worker)
    )
    # A deployed contract with a requested nonce and deadline (one that shortens the
    # attestation's life: at most the chain's time plus the TTL); a random address with neither.
    deadline = devnet.latest_block_time() + TTL // 2
    live = await create_job(
        vclient,
        worker.headers,
        job_body(project, milestoneIndex=1, deliveryRef=registry, nonce=7, deadline=deadline),
    )
    before = devnet.latest_block_time()
    async with verifier_worker(worker_settings(), executors=executors):
        passed = await wait_status(vclient, worker.headers, live["jobId"], "completed", "failed")
        dead = await create_job(
            vclient, owner.headers, job_body(other, milestoneIndex=1, deliveryRef=empty_ref)
        )
        failed = await wait_status(vclient, owner.headers, dead["jobId"], "completed", "failed")
    after = devnet.latest_block_time()

    assert passed["status"] == "completed", passed
    assert (passed["attemptCount"], passed["error"], passed["nextAttemptAt"]) == (1, None, None)
    result = passed["result"]
    assert result["passes"] is True
    evidence = result["evidence"]
    assert evidence["address"] == registry and evidence["hasCode"] is True
    assert evidence["chainId"] == devnet.deployment.chain_id and evidence["codeSize"] > 0
    assert result["evidenceHash"] == recomputed_hash(evidence)
    attestation = check_attestation(passed, devnet, project, 1)
    assert (attestation["nonce"], attestation["deadline"]) == (7, deadline)
    completed_at = datetime.fromisoformat(passed["completedAt"])
    retention = datetime.fromisoformat(passed["retentionExpiresAt"]) - completed_at
    assert retention.days == 30 and retention.seconds == 0

    # A random address has no code: completed, not passing (a result, not a failure).
    assert failed["status"] == "completed", failed
    assert failed["result"]["passes"] is False
    assert failed["result"]["evidence"]["hasCode"] is False
    assert failed["result"]["evidence"]["address"] == to_checksum_address(empty_ref)
    assert failed["result"]["evidenceHash"] == recomputed_hash(failed["result"]["evidence"])
    attestation = check_attestation(failed, devnet, other, 1)
    # Server-chosen: a fresh nonce, and the chain's latest block time plus the TTL.
    assert attestation["nonce"] != 7 and 0 <= attestation["nonce"] < 2**128
    assert before + TTL <= attestation["deadline"] <= after + TTL

    # The milestone read model shows each disputed milestone's completed job; the other
    # milestone none.
    async def milestones_of(address: str) -> dict[int, dict[str, Any]]:
        resp = await vclient.get(f"/v1/projects/{address}", headers=owner.headers)
        assert resp.status == 200, await resp.text()
        return {m["milestoneIndex"]: m for m in (await resp.json())["milestones"]}

    for address, job, done in ((project, live, passed), (other, dead, failed)):
        milestones = await milestones_of(address)
        assert milestones[1]["latestVerifierJobId"] == job["jobId"]
        assert milestones[1]["latestVerifierPasses"] is done["result"]["passes"]
        assert milestones[1]["latestEvidenceHash"] == done["result"]["evidenceHash"]
        # Absent fields are left out of the read model.
        assert "latestVerifierJobId" not in milestones[0]
        assert "latestVerifierPasses" not in milestones[0]


async def test_reads_evidence_raw_evidence_and_retention(
    vclient: Any,
    db: asyncpg.Connection,
    servers: Any,
    devnet: Devnet,
    chain: Chain,
    worker_settings: Callable[..., Settings],
    executors: Executors,
) -> None:
    project, owner, worker = await disputed_with_parties(
        vclient, db, chain, devnet.deployment.registry
    )
    creator = owner
    job_id = (
        await create_job(
            vclient, creator.headers, job_body(project, deliveryRef=devnet.deployment.registry)
        )
    )["jobId"]
    paths = [f"{JOBS}/{job_id}/evidence", f"{JOBS}/{job_id}/evidence/raw"]
    stranger = await linked_party(vclient)

    # Before completion: no evidence yet; the raw evidence has no attempts.
    resp = await vclient.get(paths[0], headers=worker.headers)
    assert await error_code(resp, 409) == "verifier_job_not_completed"
    resp = await vclient.get(paths[1], headers=worker.headers)
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {
        "jobId": job_id,
        "attempts": [],
        "raw": None,
        "logs": None,
        "retentionExpiresAt": None,
    }

    async with verifier_worker(worker_settings(), executors=executors):
        done = await wait_status(vclient, creator.headers, job_id, "completed", "failed")
    assert done["status"] == "completed" and done["result"]["passes"] is True

    # The parties read the full record, the evidence and the raw evidence.
    for party in (owner, worker):
        assert (await get_job(vclient, party.headers, job_id)) == done
        resp = await vclient.get(paths[0], headers=party.headers)
        assert resp.status == 200, await resp.text()
        summary = await resp.json()
        assert summary == {
            "jobId": job_id,
            "projectAddress": to_checksum_address(project),
            "milestoneIndex": 0,
            "checkPolicyId": "address-smoke",
            "passes": True,
            "evidenceHash": done["result"]["evidenceHash"],
            "evidence": done["result"]["evidence"],
            "completedAt": done["completedAt"],
        }
    resp = await vclient.get(paths[1], headers=worker.headers)
    assert resp.status == 200, await resp.text()
    raw = await resp.json()
    assert raw["jobId"] == job_id and raw["retentionExpiresAt"] == done["retentionExpiresAt"]
    assert len(raw["attempts"]) == 1
    attempt = raw["attempts"][0]
    assert attempt["attempt"] == 1
    # An in-process worker: the test process's Ray node, and no actor.
    assert attempt["nodeId"] == ray.get_runtime_context().get_node_id()
    assert attempt["actorName"] == "" and attempt["actorId"] == ""
    assert datetime.fromisoformat(attempt["startedAt"]) <= datetime.fromisoformat(
        done["completedAt"]
    )
    assert raw["raw"] is not None and raw["raw"]["attempt"] == 1
    assert raw["raw"]["nodeId"] == attempt["nodeId"]
    assert isinstance(raw["logs"], str)

    # A stranger who sees the open project reads the public record: the result, no evidence.
    public = await get_job(vclient, stranger.headers, job_id)
    assert "evidence" not in public["result"]
    full_result = {k: v for k, v in done["result"].items() if k != "evidence"}
    assert public["result"] == full_result
    assert {k: v for k, v in public.items() if k != "result"} == {
        k: v for k, v in done.items() if k != "result"
    }
    for path in paths:
        resp = await vclient.get(path, headers=stranger.headers)
        assert await error_code(resp, 403) == "not_verifier_job_party", path
    # The creator keeps the full record after its link is revoked (it created the job).
    resp = await vclient.delete(f"/v1/wallet-links/{creator.address}", headers=creator.headers)
    assert resp.status == 200
    assert "evidence" in (await get_job(vclient, creator.headers, job_id))["result"]

    # Retention: once past, the sweep deletes the raw evidence and logs; the summary stays.
    assert await sweep_now(servers) == 0
    await db.execute(
        "UPDATE verifier_jobs SET retention_expires_at = now() - interval '1 second' WHERE id = $1",
        uuid.UUID(job_id),
    )
    assert await sweep_now(servers) == 1
    assert await sweep_now(servers) == 0
    resp = await vclient.get(paths[1], headers=worker.headers)
    assert await error_code(resp, 410) == "raw_evidence_expired"
    row = await db.fetchrow(
        "SELECT raw_evidence, logs, raw_deleted_at FROM verifier_jobs WHERE id = $1",
        uuid.UUID(job_id),
    )
    assert row is not None
    assert (row["raw_evidence"], row["logs"]) == (None, None)
    assert row["raw_deleted_at"] <= datetime.now(UTC)
    resp = await vclient.get(paths[0], headers=worker.headers)
    assert resp.status == 200
    assert (await resp.json()) == summary
    after = await get_job(vclient, worker.headers, job_id)
    assert after["result"] == done["result"]


async def sweep_now(servers: Any) -> int:
    pool = await create_pool(servers.database_url, min_size=1, max_size=2)
    try:
        return await sweep(pool, retention_days=30)
    finally:
        await pool.close()


async def test_jobs_of_a_hidden_project_are_404_to_a_stranger(
    vclient: Any, db: asyncpg.Connection, devnet: Devnet, chain: Chain
) -> None:
    ref = random_address()
    hidden, owner, _ = await disputed_with_parties(
        vclient, db, chain, ref, bidding_access="invite_only", allowlist=[]
    )
    stranger = await linked_party(vclient)
    job_id = (await create_job(vclient, owner.headers, job_body(hidden, deliveryRef=ref)))["jobId"]
    for path in (
        f"{JOBS}/{job_id}",
        f"{JOBS}/{job_id}/evidence",
        f"{JOBS}/{job_id}/evidence/raw",
        f"{JOBS}/{uuid.uuid4()}",
    ):
        resp = await vclient.get(path, headers=stranger.headers)
        assert await error_code(resp, 404) == "verifier_job_not_found", path
    resp = await vclient.get(JOBS, headers=stranger.headers)
    assert (await resp.json())["items"] == []
    # The owner reads it; so does a verifier admin, in full.
    assert (await get_job(vclient, owner.headers, job_id))["status"] == "queued"
    admin = new_user()
    await set_flags(db, admin.user_id, moderation_admin=None, verifier_admin=True)
    assert await get_job(vclient, admin.headers, job_id) == await get_job(
        vclient, owner.headers, job_id
    )
    resp = await vclient.get(f"{JOBS}/{job_id}/evidence", headers=admin.headers)
    assert await error_code(resp, 409) == "verifier_job_not_completed"
    resp = await vclient.get(f"{JOBS}/{job_id}/evidence/raw", headers=admin.headers)
    assert resp.status == 200 and (await resp.json())["attempts"] == []
    assert [
        j["id"] for j in (await (await vclient.get(JOBS, headers=admin.headers)).json())["items"]
    ] == [job_id]
    # A job id that is no UUID is a bad request.
    resp = await vclient.get(f"{JOBS}/not-a-job", headers=owner.headers)
    assert await error_code(resp, 400) == "invalid_request"


async def test_transient_failure_is_retried_then_completes(
    vclient: Any,
    db: asyncpg.Connection,
    worker_settings: Callable[..., Settings],
    devnet: Devnet,
    chain: Chain,
    executors: Executors,
    closed_rpc_url: str,
) -> None:
    project, owner, _ = await disputed_with_parties(vclient, db, chain, devnet.deployment.registry)
    job_id = (
        await create_job(
            vclient, owner.headers, job_body(project, deliveryRef=devnet.deployment.registry)
        )
    )["jobId"]
    # The chain is unreachable: the attempt fails, and the job waits for its retry (60 s).
    unreachable = worker_settings(
        chain_rpc_url=closed_rpc_url,
        jobs_backoff_base_seconds=60.0,
        jobs_backoff_cap_seconds=60.0,
    )
    async with verifier_worker(unreachable, rng=LongestBackoff(), executors=executors):
        retrying = await eventually_value(
            lambda: get_job(vclient, owner.headers, job_id),
            until=lambda job: job["attemptCount"] == 1 and job["status"] == "queued",
            within=30,
            what="the first attempt to fail",
        )
    assert retrying["error"].startswith("TransientPolicyError: chain RPC"), retrying
    assert 'File "' not in retrying["error"]  # no traceback frames
    assert retrying["result"] is None and retrying["completedAt"] is None
    next_at = datetime.fromisoformat(retrying["nextAttemptAt"])
    assert 50 < (next_at - datetime.now(UTC)).total_seconds() <= 60
    resp = await vclient.get(f"{JOBS}/{job_id}/evidence", headers=owner.headers)
    assert await error_code(resp, 409) == "verifier_job_not_completed"
    # No waiting a minute in a test: the retry falls due now.
    await db.execute(
        "UPDATE jobs SET next_attempt_at = now() "
        "WHERE id = (SELECT job_id FROM verifier_jobs WHERE id = $1)",
        uuid.UUID(job_id),
    )
    # The chain is back: the next attempt completes.
    async with verifier_worker(worker_settings(), executors=executors):
        done = await wait_status(vclient, owner.headers, job_id, "completed", "failed")
    assert done["status"] == "completed", done
    assert (done["attemptCount"], done["error"], done["nextAttemptAt"]) == (2, None, None)
    assert done["result"]["passes"] is True
    # Every attempt signs the nonce drawn when the job was created.
    drawn = await db.fetchval(
        "SELECT attestation_nonce FROM verifier_jobs WHERE id = $1", uuid.UUID(job_id)
    )
    assert done["result"]["attestation"]["nonce"] == int(drawn)
    resp = await vclient.get(f"{JOBS}/{job_id}/evidence/raw", headers=owner.headers)
    raw = await resp.json()
    assert [a["attempt"] for a in raw["attempts"]] == [1, 2]
    assert raw["raw"]["attempt"] == 2


async def test_http_503_is_retried_and_the_image_then_passes(
    vclient: Any,
    db: asyncpg.Connection,
    aiohttp_server: Any,
    chain: Chain,
    worker_settings: Callable[..., Settings],
    executors: Executors,
) -> None:
    """`screenshot-ref` against a local HTTP server (private hosts allowed in tests) that is
    unavailable once, then serves a PNG."""
    hits: list[str] = []

    async def image(request: web.Request) -> web.Response:
        hits.append(request.method)
        if len(hits) == 1:
            return web.Response(status=503, text="busy")
        return web.Response(body=PNG_1X1, content_type="image/png")

    app = web.Application()
    app.router.add_get("/shot.png", image)
    server = await aiohttp_server(app)
    url = str(server.make_url("/shot.png"))
    project, owner, _ = await disputed_with_parties(
        vclient, db, chain, url, policy="screenshot-ref"
    )
    job_id = (
        await create_job(
            vclient,
            owner.headers,
            job_body(project, checkPolicyId="screenshot-ref", deliveryRef=url),
        )
    )["jobId"]
    async with verifier_worker(worker_settings(), executors=executors):
        done = await wait_status(vclient, owner.headers, job_id, "completed", "failed")
    assert done["status"] == "completed", done
    assert done["attemptCount"] == 2 and len(hits) == 2
    assert done["result"]["passes"] is True
    evidence = done["result"]["evidence"]
    assert evidence["policy"] == "screenshot-ref"
    assert done["result"]["evidenceHash"] == recomputed_hash(evidence)
    assert done["request"]["deliveryRef"] == url


async def test_exhausted_retries_fail_the_job(
    make_client: Any,
    db: asyncpg.Connection,
    worker_settings: Callable[..., Settings],
    devnet: Devnet,
    chain: Chain,
    executors: Executors,
    closed_rpc_url: str,
) -> None:
    from tests.api.verifier.conftest import verifier_overrides

    client = await make_client(**verifier_overrides(devnet, verifier_max_attempts=2))
    ref = random_address()
    project, owner, _ = await disputed_with_parties(client, db, chain, ref)
    accepted = await create_job(client, owner.headers, job_body(project, deliveryRef=ref))
    assert accepted["maxAttempts"] == 2
    job_id = accepted["jobId"]
    unreachable = worker_settings(chain_rpc_url=closed_rpc_url, verifier_max_attempts=2)
    async with verifier_worker(unreachable, executors=executors):
        failed = await wait_status(client, owner.headers, job_id, "completed", "failed")
    assert failed["status"] == "failed", failed
    assert (failed["attemptCount"], failed["maxAttempts"]) == (2, 2)
    assert failed["error"] and failed["nextAttemptAt"] is None and failed["result"] is None
    resp = await client.get(f"{JOBS}/{job_id}/evidence", headers=owner.headers)
    assert await error_code(resp, 409) == "verifier_job_not_completed"
    resp = await client.get(f"{JOBS}/{job_id}/evidence/raw", headers=owner.headers)
    raw = await resp.json()
    assert [a["attempt"] for a in raw["attempts"]] == [1, 2]
    assert (raw["raw"], raw["logs"]) == (None, None)
    # No attestation, and the milestone read model is untouched.
    row = await db.fetchrow(
        "SELECT attestation, completed_at FROM verifier_jobs WHERE id = $1", uuid.UUID(job_id)
    )
    assert row is not None and (row["attestation"], row["completed_at"]) == (None, None)
    resp = await client.get(f"{JOBS}?status=failed", headers=owner.headers)
    assert [j["id"] for j in (await resp.json())["items"]] == [job_id]
    # The attempts' log of a failed job is swept the retention period after it failed.
    assert await sweep_expired(db, retention_days=30) == 0
    await db.execute(
        "UPDATE jobs SET finished_at = now() - interval '31 days'"
        " WHERE id = (SELECT job_id FROM verifier_jobs WHERE id = $1)",
        uuid.UUID(job_id),
    )
    assert await sweep_expired(db, retention_days=30) == 1
    resp = await client.get(f"{JOBS}/{job_id}/evidence/raw", headers=owner.headers)
    assert await error_code(resp, 410) == "raw_evidence_expired"


async def test_a_job_whose_worker_died_on_its_last_attempt_reads_failed(
    vclient: Any,
    db: asyncpg.Connection,
    worker_settings: Callable[..., Settings],
    devnet: Devnet,
    chain: Chain,
    executors: Executors,
) -> None:
    """The kill path: the last attempt's worker died, so nothing of the handler ran to the end;
    the reaper fails the queue job, and the record (whose state is its job's) reads failed with
    the reaper's error at once: there is no second state to fall behind."""
    project, owner, _ = await disputed_with_parties(vclient, db, chain, devnet.deployment.registry)
    job_id = (
        await create_job(
            vclient, owner.headers, job_body(project, deliveryRef=devnet.deployment.registry)
        )
    )["jobId"]
    await db.execute(
        "UPDATE jobs SET status = 'running', attempt_count = max_attempts, lease_owner = 'dead',"
        " lease_expires_at = now() - interval '1 second', started_at = now()"
        " WHERE id = (SELECT job_id FROM verifier_jobs WHERE id = $1)",
        uuid.UUID(job_id),
    )
    running = await get_job(vclient, owner.headers, job_id)
    assert running["status"] == "running"
    async with verifier_worker(worker_settings(), executors=executors):
        failed = await wait_status(vclient, owner.headers, job_id, "completed", "failed")
    assert failed["status"] == "failed", failed
    assert failed["error"] == "lease expired during the last attempt (its worker died or hung)"
    assert failed["attemptCount"] == failed["maxAttempts"]
    assert failed["nextAttemptAt"] is None and failed["result"] is None
    resp = await vclient.get(f"{JOBS}?status=failed", headers=owner.headers)
    assert [j["id"] for j in (await resp.json())["items"]] == [job_id]


async def test_one_verdict_per_dispute_and_a_new_job_only_after_a_failed_one(
    vclient: Any,
    db: asyncpg.Connection,
    devnet: Devnet,
    chain: Chain,
    worker_settings: Callable[..., Settings],
    executors: Executors,
    closed_rpc_url: str,
) -> None:
    """One verdict per dispute: while the dispute's job is queued or completed, a request for
    the dispute (by any party, with any nonce) answers 200 with that job and its own request;
    only a failed job lets a new one be created, and the milestone read model shows the job
    that completed. (Before one verdict per dispute, this test had two jobs of one milestone
    complete in the opposite order and the newest request win: a dispute can no longer have
    two jobs that complete.)"""
    registry = devnet.deployment.registry
    project, owner, worker = await disputed_with_parties(vclient, db, chain, registry)
    body = job_body(project, deliveryRef=registry)
    first = await create_job(vclient, owner.headers, body)

    async def request_again(party: Any, **values: Any) -> dict[str, Any]:
        resp = await vclient.post(
            JOBS, json=job_body(project, deliveryRef=registry, **values), headers=party.headers
        )
        assert resp.status == 200, await resp.text()
        answer = dict(await resp.json())
        assert resp.headers["Location"] == answer["pollUrl"] == f"{JOBS}/{answer['jobId']}"
        return answer

    async def milestone() -> dict[str, Any]:
        resp = await vclient.get(f"/v1/projects/{project}", headers=owner.headers)
        return dict((await resp.json())["milestones"][0])

    queued = await request_again(worker, nonce=5)
    assert queued["jobId"] == first["jobId"] and queued["status"] == "queued"
    # The job's own request (no nonce), not the one just sent.
    assert queued["request"] == first["request"] and queued["request"]["nonce"] is None
    assert await db.fetchval("SELECT count(*) FROM verifier_jobs") == 1

    # The chain unreachable: the job fails after its attempts, without a verdict.
    async with verifier_worker(worker_settings(chain_rpc_url=closed_rpc_url), executors=executors):
        failed = await wait_status(vclient, owner.headers, first["jobId"], "completed", "failed")
    assert failed["status"] == "failed", failed
    assert failed["attemptCount"] == failed["maxAttempts"] == 3
    assert "latestVerifierJobId" not in await milestone()

    # Only now may a new job judge the dispute.
    second = await create_job(vclient, worker.headers, body)
    assert second["jobId"] != first["jobId"]
    async with verifier_worker(worker_settings(), executors=executors):
        done = await wait_status(vclient, worker.headers, second["jobId"], "completed")
    shown = await milestone()
    assert (shown["latestVerifierJobId"], shown["latestVerifierPasses"]) == (second["jobId"], True)
    assert shown["latestEvidenceHash"] == done["result"]["evidenceHash"]
    # A completed verdict is final: a request answers with it, and no job is created.
    final = await request_again(owner)
    assert (final["jobId"], final["status"]) == (second["jobId"], "completed")
    assert final["attemptCount"] == 1
    assert await db.fetchval("SELECT count(*) FROM verifier_jobs") == 2
    assert await db.fetchval("SELECT count(*) FROM jobs WHERE queue = 'verifier'") == 2


async def test_a_requested_nonce_the_registry_already_used_fails_at_once(
    vclient: Any,
    db: asyncpg.Connection,
    devnet: Devnet,
    worker_settings: Callable[..., Settings],
    executors: Executors,
) -> None:
    """A verdict attested on chain consumes its nonce for the signer: a job requesting that
    nonce could never be relayed, so it fails on its first attempt (no retries, no signature)."""
    with reverting_chain(devnet.rpc_url, devnet.deployment) as chain:
        disputed = chain.building()
        chain.dispute(disputed, 0)
        receipt = chain.attest(disputed, 0, True)
        [used] = chain.events(receipt, chain.registry, "VerifierNonceUsed")
        assert used["signer"] == SIGNER
        # The job judges another dispute (the attested one moved on).
        project, owner, _ = await disputed_with_parties(
            vclient, db, chain, devnet.deployment.registry
        )
        job_id = (
            await create_job(
                vclient,
                owner.headers,
                job_body(project, deliveryRef=devnet.deployment.registry, nonce=used["nonce"]),
            )
        )["jobId"]
        async with verifier_worker(worker_settings(), executors=executors):
            failed = await wait_status(vclient, owner.headers, job_id, "completed", "failed")
    assert failed["status"] == "failed", failed
    assert (failed["attemptCount"], failed["maxAttempts"]) == (1, 3)
    assert f"nonce {used['nonce']} was already used" in failed["error"]
    assert failed["result"] is None
