"""What a verdict may judge (issue 25; docs/verifier.md, "What a verdict means"), through real
disputes on the devnet: a job is accepted only for the project's active disputed milestone in
phase challenged, with the owner's acceptance policy, over the delivery the worker submitted on
chain, with a bounded deadline; one verdict per dispute; a dispute that moves on before signing
gets no signature. The attack of the issue is replayed: no signature the contract would accept
exists for a milestone outside its dispute or for another reference."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
from eth_utils import to_checksum_address

from marketplace.config import Settings
from marketplace.identity.permissions import set_flags
from tests.api.verifier.conftest import (
    JOBS,
    AppFactory,
    Devnet,
    Executors,
    create_job,
    disputed_with_parties,
    error_code,
    get_job,
    job_body,
    linked_party,
    random_address,
    seed,
    seed_project,
    verifier_overrides,
    verifier_worker,
    wait_status,
)
from tests.contracts.helpers import Chain
from tests.support.disputes import set_policies

UINT256_MAX = 2**256 - 1
TTL = 3600


async def post_job(client: Any, headers: dict[str, str], body: dict[str, Any]) -> Any:
    return await client.post(JOBS, json=body, headers=headers)


async def test_a_milestone_outside_an_active_challenged_dispute_gets_no_job(
    vclient: Any, db: asyncpg.Connection, chain: Chain, devnet: Devnet
) -> None:
    """Point 1 of the issue: the selected worker asks for address-smoke on the USDC token's
    address before any dispute, with the largest deadline. Refused; and once disputed, the same
    request over another reference than the submitted one is refused too."""
    usdc = devnet.deployment.usdc
    submitted = devnet.deployment.registry
    contract = chain.building()
    chain.submit(contract, 0, delivery_ref=submitted)
    owner, worker = await linked_party(vclient), await linked_party(vclient)
    project = await seed_project(
        db,
        project_address=contract.address.lower(),
        owner_address=owner.lower,
        selected_builder_address=worker.lower,
        status="building",
    )
    await seed.milestone(db, project, 0, status="submitted")
    await seed.milestone(db, project, 1)
    await seed.metadata(db, project, owner.lower)
    await set_policies(db, project, [(0, "address-smoke")])

    # Bidders and parties see what will judge each milestone: null where nothing will.
    resp = await vclient.get(f"/v1/projects/{project}/milestones", headers=worker.headers)
    items = (await resp.json())["items"]
    assert [m["checkPolicyId"] for m in items] == ["address-smoke", None]

    body = job_body(project, deliveryRef=usdc, deadline=UINT256_MAX)
    resp = await post_job(vclient, worker.headers, body)
    assert await error_code(resp, 409) == "milestone_not_disputed"

    chain.dispute(contract, 0)
    # Another reference than the submitted one: refused, whoever asks.
    for party in (worker, owner):
        resp = await post_job(vclient, party.headers, job_body(project, deliveryRef=usdc))
        assert await error_code(resp, 409) == "delivery_ref_mismatch"
    # The disputed milestone is 0: milestone 1 is not in a dispute.
    resp = await post_job(
        vclient, worker.headers, job_body(project, milestoneIndex=1, deliveryRef=submitted)
    )
    assert await error_code(resp, 409) == "milestone_not_disputed"
    # An unbounded deadline is refused by name.
    resp = await post_job(
        vclient, worker.headers, job_body(project, deliveryRef=submitted, deadline=UINT256_MAX)
    )
    body_400 = await resp.json()
    assert resp.status == 400, body_400
    assert body_400["error"] == "invalid_request" and "body.deadline" in body_400["message"]
    # No job was queued by any of these.
    assert (
        await db.fetchval("SELECT count(*) FROM verifier_jobs WHERE project_address = $1", project)
        == 0
    )


async def test_the_acceptance_policy_decides_which_check_may_run(
    vclient: Any, db: asyncpg.Connection, chain: Chain, devnet: Devnet
) -> None:
    ref = devnet.deployment.registry
    project, _owner, worker = await disputed_with_parties(vclient, db, chain, ref, policy=None)
    resp = await post_job(vclient, worker.headers, job_body(project, deliveryRef=ref))
    assert await error_code(resp, 409) == "no_acceptance_policy"

    await set_policies(db, project, [(0, "github-ref")])
    resp = await post_job(vclient, worker.headers, job_body(project, deliveryRef=ref))
    assert await error_code(resp, 409) == "policy_mismatch"

    # A policy on another milestone is no policy for this one.
    await set_policies(db, project, [(1, "address-smoke")])
    resp = await post_job(vclient, worker.headers, job_body(project, deliveryRef=ref))
    assert await error_code(resp, 409) == "no_acceptance_policy"

    await set_policies(db, project, [(0, "address-smoke")])
    resp = await post_job(vclient, worker.headers, job_body(project, deliveryRef=ref))
    assert resp.status == 202, await resp.text()


async def test_the_deadline_may_be_shortened_never_extended(
    vclient: Any, db: asyncpg.Connection, chain: Chain, devnet: Devnet
) -> None:
    ref = devnet.deployment.registry
    project, _owner, worker = await disputed_with_parties(vclient, db, chain, ref)
    latest = devnet.latest_block_time()
    resp = await post_job(
        vclient, worker.headers, job_body(project, deliveryRef=ref, deadline=latest + TTL + 120)
    )
    assert resp.status == 400 and "body.deadline" in (await resp.json())["message"]
    job = await create_job(
        vclient, worker.headers, job_body(project, deliveryRef=ref, deadline=latest + 60)
    )
    assert job["request"]["deadline"] == latest + 60


async def test_one_verdict_per_dispute_whoever_asks(
    make_client: AppFactory,
    db: asyncpg.Connection,
    chain: Chain,
    devnet: Devnet,
    worker_settings: Callable[..., Settings],
    executors: Executors,
    closed_rpc_url: str,
) -> None:
    """A second request for the same dispute, by the other party, a verifier admin, or with
    another policy-conforming body, answers 200 with the first job; only a failed job lets a
    new one run, and the read model then shows the one that completed."""
    client = await make_client(**verifier_overrides(devnet, verifier_max_attempts=1))
    ref = devnet.deployment.registry
    project, owner, worker = await disputed_with_parties(client, db, chain, ref)
    first = await create_job(client, worker.headers, job_body(project, deliveryRef=ref, nonce=11))

    admin = await linked_party(client)
    await set_flags(db, admin.user.user_id, moderation_admin=None, verifier_admin=True)
    for party in (owner, worker, admin):
        resp = await post_job(client, party.headers, job_body(project, deliveryRef=ref))
        again = await resp.json()
        assert resp.status == 200, again
        assert again["jobId"] == first["jobId"]
        # The existing job's own request, not the new one.
        assert again["request"]["nonce"] == 11
        assert resp.headers["Location"] == again["pollUrl"]

    # The job fails (the worker cannot reach the chain; one attempt allowed): a new request
    # then creates a new job, which completes.
    async with verifier_worker(worker_settings(chain_rpc_url=closed_rpc_url), executors=executors):
        failed = await wait_status(client, owner.headers, first["jobId"], "failed", within=60)
    assert failed["result"] is None and failed["error"]
    second = await create_job(client, owner.headers, job_body(project, deliveryRef=ref))
    assert second["jobId"] != first["jobId"]
    async with verifier_worker(worker_settings(), executors=executors):
        done = await wait_status(client, owner.headers, second["jobId"], "completed", "failed")
    assert done["status"] == "completed", done
    resp = await client.get(f"/v1/projects/{project}/milestones", headers=owner.headers)
    milestone = (await resp.json())["items"][0]
    assert milestone["latestVerifierJobId"] == second["jobId"]
    assert milestone["latestVerifierPasses"] is True
    assert milestone["checkPolicyId"] == "address-smoke"
    # Now completed: every further request answers that job.
    resp = await post_job(client, worker.headers, job_body(project, deliveryRef=ref))
    assert resp.status == 200 and (await resp.json())["jobId"] == second["jobId"]


async def test_a_dispute_that_moved_on_before_signing_gets_no_signature(
    vclient: Any,
    db: asyncpg.Connection,
    chain: Chain,
    devnet: Devnet,
    worker_settings: Callable[..., Settings],
    executors: Executors,
) -> None:
    ref = devnet.deployment.registry
    project, owner, worker = await disputed_with_parties(vclient, db, chain, ref)
    job = await create_job(vclient, worker.headers, job_body(project, deliveryRef=ref))
    # Someone else's verdict lands first: the dispute leaves phase challenged.
    chain.attest(chain.project(project), 0, False)
    async with verifier_worker(worker_settings(), executors=executors):
        failed = await wait_status(vclient, owner.headers, job["jobId"], "completed", "failed")
    assert failed["status"] == "failed", failed
    assert failed["result"] is None
    assert "no longer the project's active dispute" in failed["error"]
    attestation = await db.fetchval(
        "SELECT attestation FROM verifier_jobs WHERE id = $1", uuid.UUID(job["jobId"])
    )
    assert attestation is None


async def test_the_replayed_attack_leaves_one_signature_and_it_is_the_agreed_one(
    vclient: Any,
    db: asyncpg.Connection,
    chain: Chain,
    devnet: Devnet,
    worker_settings: Callable[..., Settings],
    executors: Executors,
) -> None:
    """The worker submitted the registry's address, the owner disputed, the owner's policy is
    address-smoke. Whatever the parties ask for, exactly one attestation exists for this
    dispute: over the submitted reference, with a deadline within the TTL of the chain's time;
    the contract accepts it, and the read model shows the same verdict."""
    ref = devnet.deployment.registry
    project, owner, worker = await disputed_with_parties(vclient, db, chain, ref)
    attempts = [
        (worker, job_body(project, deliveryRef=devnet.deployment.usdc)),
        (worker, job_body(project, checkPolicyId="github-ref", deliveryRef="o/r@main")),
        (worker, job_body(project, deliveryRef=ref, deadline=UINT256_MAX)),
        (owner, job_body(project, deliveryRef=random_address())),
    ]
    for party, body in attempts:
        resp = await post_job(vclient, party.headers, body)
        assert resp.status in (400, 409), await resp.text()
    accepted = await create_job(vclient, worker.headers, job_body(project, deliveryRef=ref))
    resp = await post_job(vclient, owner.headers, job_body(project, deliveryRef=ref))
    assert resp.status == 200 and (await resp.json())["jobId"] == accepted["jobId"]
    async with verifier_worker(worker_settings(), executors=executors):
        done = await wait_status(vclient, owner.headers, accepted["jobId"], "completed", "failed")
    assert done["status"] == "completed", done
    attestations = await db.fetch(
        "SELECT attestation FROM verifier_jobs WHERE project_address = $1 "
        "AND attestation IS NOT NULL",
        project,
    )
    assert len(attestations) == 1
    # This connection has no jsonb codec: the column comes as text.
    attestation = json.loads(attestations[0]["attestation"])
    assert attestation == done["result"]["attestation"]
    assert done["result"]["evidence"]["address"] == to_checksum_address(ref)
    assert attestation["deadline"] <= chain.now() + TTL
    contract = chain.project(project)
    chain.ok(
        chain.a.stranger,
        contract.functions.attestMilestone(
            0,
            attestation["passes"],
            bytes.fromhex(attestation["evidenceHash"][2:]),
            attestation["deadline"],
            attestation["nonce"],
            attestation["chainId"],
            bytes.fromhex(attestation["signature"][2:]),
        ),
    )
    assert chain.state(contract)["disputeVerdictPasses"] is True
    job = await get_job(vclient, owner.headers, accepted["jobId"])
    assert job["result"]["passes"] is True
