"""What the policy executors report decides what a frontend offers (docs/verifier.md,
"Policies"): in a deployment the executors run on their own nodes, where the sandbox is allowed
and the frontends' is not. Readiness says why the sandbox does not work where it does not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg

from marketplace.config import Settings
from marketplace.http import keys
from marketplace.http.routes.verifier import _follow_reports
from marketplace.verifier.execution import ExecutorReport, executor_name
from marketplace.verifier.policies import available_policies
from marketplace.verifier.policy import PolicyId
from marketplace.verifier.sandbox import sandbox_unavailable_reason
from tests.api.verifier.conftest import (
    Devnet,
    Executors,
    disputed_with_parties,
    error_code,
    job_body,
)
from tests.contracts.helpers import Chain

TEST_POLICIES = (PolicyId.NPM_TEST, PolicyId.CARGO_TEST, PolicyId.FORGE_TEST)


def test_reports_combine_to_what_every_executor_can_run() -> None:
    full = ExecutorReport(tuple(PolicyId), None)
    bare = ExecutorReport((PolicyId.ADDRESS_SMOKE, PolicyId.GITHUB_REF), "no user namespaces")
    combined = ExecutorReport.combine([full, bare])
    assert combined.available == (PolicyId.GITHUB_REF, PolicyId.ADDRESS_SMOKE)
    assert combined.sandbox_unavailable == "no user namespaces"
    assert ExecutorReport.combine([full, full]) == full


async def test_the_frontend_offers_what_a_real_executor_reports(
    vclient: Any, worker_settings: Callable[..., Settings], executors: Executors
) -> None:
    settings = worker_settings()
    index, executor = executors.executor(settings)
    app = vclient.server.app
    task = asyncio.create_task(_follow_reports(app, [(executor_name(index), executor)]))
    try:
        reports = app[keys.VERIFIER_POLICIES]
        for _ in range(400):
            if reports.latest is not None:
                break
            await asyncio.sleep(0.05)
        report = reports.latest
        assert report is not None, "the executor never reported"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # The executor runs on this machine: it sees what this process sees.
    assert list(report.available) == available_policies(settings)
    assert report.sandbox_unavailable == sandbox_unavailable_reason()
    resp = await vclient.get("/v1/health/ready")
    body = await resp.json()
    assert body["verifierSandbox"] == (report.sandbox_unavailable or "ok"), body


async def test_without_a_sandbox_the_test_policies_are_not_offered_and_readiness_says_why(
    vclient: Any, db: asyncpg.Connection, chain: Chain, devnet: Devnet
) -> None:
    """An executor on a node without unprivileged user namespaces reports this (set here as the
    report itself: this machine can sandbox, so no real executor would say it)."""
    app = vclient.server.app
    reason = "bwrap: setting up uid map: Permission denied"
    app[keys.VERIFIER_POLICIES].latest = ExecutorReport(
        (PolicyId.GITHUB_REF, PolicyId.ADDRESS_SMOKE), reason
    )
    ref = "octo/repo@main"
    project, _owner, worker = await disputed_with_parties(
        vclient, db, chain, ref, policy="npm-test"
    )
    resp = await vclient.post(
        "/v1/verifier/jobs",
        json=job_body(project, checkPolicyId="npm-test", deliveryRef=ref),
        headers=worker.headers,
    )
    assert await error_code(resp, 409) == "policy_unavailable"
    resp = await vclient.get("/v1/health/ready")
    body = await resp.json()
    assert body["verifierSandbox"] == reason
    # A policy the executors can run is offered, and the answer lists only theirs.
    ref2 = devnet.deployment.registry
    project2, _o, worker2 = await disputed_with_parties(vclient, db, chain, ref2)
    resp = await vclient.post(
        "/v1/verifier/jobs", json=job_body(project2, deliveryRef=ref2), headers=worker2.headers
    )
    accepted = await resp.json()
    assert resp.status == 202, accepted
    assert accepted["availablePolicies"] == ["github-ref", "address-smoke"]
    assert not set(accepted["availablePolicies"]) & {p.value for p in TEST_POLICIES}
