"""Verifier jobs (spec section 4 "Verifier", issue #14): request, poll, list, and read the
evidence of deterministic policy checks whose results come with an EIP-712 attestation. Rules in
marketplace.verifier; docs/verifier.md.

Also the retention sweep (a background task of every frontend; deleting expired raw evidence is
idempotent, so several frontends sweeping at once only share the work).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from marketplace.actors.verifier_executor import executor_spec
from marketplace.aio import cancel_and_wait
from marketplace.config import Settings
from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, Reply, RouteTable
from marketplace.notifications.unsubscribe import public_base_url
from marketplace.records.errors import NotProjectParty, ProjectNotFound
from marketplace.verifier import jobs
from marketplace.verifier.attestation import Signer
from marketplace.verifier.errors import (
    ChainMismatch,
    ChainUnavailable,
    DeliveryRefMismatch,
    JobNotCompleted,
    MilestoneNotDisputed,
    MilestoneOutOfRange,
    NoAcceptancePolicy,
    NotVerifierJobParty,
    PolicyMismatch,
    PolicyUnavailable,
    ProjectNotIndexed,
    RawEvidenceExpired,
    VerifierJobNotFound,
    VerifierNotConfigured,
)
from marketplace.verifier.execution import VERIFIER_QUEUE, ExecutorReport, ExecutorReports
from marketplace.verifier.models import (
    JobPath,
    VerifierAttemptLog,
    VerifierEvidenceSummary,
    VerifierJobAcceptedResponse,
    VerifierJobCreateRequest,
    VerifierJobListQuery,
    VerifierJobListResponse,
    VerifierJobRead,
    VerifierJobRecord,
    VerifierJobRecordPublic,
    VerifierRawEvidence,
)
from marketplace.verifier.policies import available_policies
from marketplace.verifier.policy import PolicyId, PolicySettings
from marketplace.verifier.retention import sweep_forever

log = logging.getLogger(__name__)
routes = RouteTable(tag="verifier")
JOB_PATH = "/v1/verifier/jobs/{jobId}"


def job_url(settings: Settings, job_id: str) -> str:
    path = JOB_PATH.format(jobId=job_id)
    if settings.public_base_url.strip():
        return f"{public_base_url(settings)}{path}"
    return path


@routes.post(
    "/v1/verifier/jobs",
    name="createVerifierJob",
    idempotent=True,
    summary="Queue a deterministic policy check of a milestone's delivery",
    auth=AuthMode.EITHER,
    response=VerifierJobAcceptedResponse,
    body=VerifierJobCreateRequest,
    guarded=True,
    status=202,
    also_status=(
        (200, "the dispute's existing job (queued, running or completed): one verdict per dispute"),
    ),
    errors=(
        ProjectNotFound,
        NotProjectParty,
        ChainMismatch,
        PolicyUnavailable,
        ProjectNotIndexed,
        MilestoneOutOfRange,
        MilestoneNotDisputed,
        NoAcceptancePolicy,
        PolicyMismatch,
        DeliveryRefMismatch,
        VerifierNotConfigured,
        ChainUnavailable,
    ),
)
async def create_job(call: Call[VerifierJobCreateRequest, None, None]) -> Reply:
    """The caller must be the project's owner or selected worker through an active wallet link,
    or hold the `verifierAdmin` flag (403 `not_project_party`); a project it cannot see is 404.
    409: `chain_mismatch` (not the configured chain), `policy_unavailable` (this deployment lacks
    the policy's tooling: see `availablePolicies`), `project_not_indexed`,
    `milestone_out_of_range`; then, read from the chain: `milestone_not_disputed` (not the
    project's active disputed milestone in phase `challenged`), `no_acceptance_policy` (the
    owner fixed none before bidding: the dispute goes to the multisig), `policy_mismatch`
    (`checkPolicyId` is not the milestone's policy), `delivery_ref_mismatch` (keccak256 of
    `deliveryRef` is not the milestone's on-chain `deliveryRefHash`). A `deliveryRef` the policy
    cannot read, or a `deadline` past the chain's latest block time plus
    MARKETPLACE_VERIFIER_ATTESTATION_TTL_SECONDS, is 400 `invalid_request`. 503
    `verifier_not_configured` when no signing key is configured, `chain_unavailable` when the
    chain cannot be read. Answers 202 with the queued job and its `pollUrl`; one verdict per
    dispute: while the dispute has a queued, running or completed job, any request for it
    answers 200 with that job (same `jobId`, its own `request`); only a failed job lets a new
    one run."""
    principal = call.require_principal()
    available = await offered_policies(call.app)
    accepted = await jobs.accept(
        call.pool,
        call.settings,
        user_id=principal.user_id,
        request=call.body,
        available=available,
        signing_ready=Signer.from_settings(call.settings) is not None,
    )
    response = accepted.response
    response.pollUrl = job_url(call.settings, str(accepted.job_id))
    # 202 for a new job; 200 with the dispute's existing job (one verdict per dispute).
    return Reply(
        response, status=202 if accepted.created else 200, headers={"Location": response.pollUrl}
    )


@routes.get(
    "/v1/verifier/jobs",
    name="listVerifierJobs",
    summary="The caller's verifier jobs and those of its projects (all for verifier admins)",
    auth=AuthMode.EITHER,
    response=VerifierJobListResponse,
    query=VerifierJobListQuery,
)
async def list_jobs(call: Call[None, VerifierJobListQuery, None]) -> VerifierJobListResponse:
    """Jobs the caller created and jobs of projects whose owner or selected worker is one of its
    active wallets; verifier admins see every job. Filters: `projectAddress`, `milestoneIndex`,
    `status`. Newest first; `limit` 1..100 (default 50), `cursor` from `nextCursor`."""
    principal = call.require_principal()
    rows, next_cursor = await jobs.list_jobs(call.pool, principal.user_id, call.query)
    items = [VerifierJobRecord.from_row(row) for row in rows]
    return VerifierJobListResponse(items=items, count=len(items), nextCursor=next_cursor)


@routes.get(
    JOB_PATH,
    name="getVerifierJob",
    summary="A verifier job: the full record for its parties, the public one for other viewers",
    auth=AuthMode.EITHER,
    response=VerifierJobRead,
    path_params=JobPath,
    errors=(VerifierJobNotFound,),
)
async def get_job(call: Call[None, None, JobPath]) -> VerifierJobRead:
    """`VerifierJobRecord` (with `result.evidence`) for the job's creator, the project's owner and
    selected worker and verifier admins; `VerifierJobRecordPublic` (result without evidence) for
    other signed-in callers who can see the project; 404 for anyone else."""
    principal = call.require_principal()
    view = await jobs.read_job(call.pool, principal.user_id, call.path.jobId)
    if view.full:
        return VerifierJobRead(VerifierJobRecord.from_row(view.row))
    return VerifierJobRead(VerifierJobRecordPublic.from_row(view.row))


@routes.get(
    f"{JOB_PATH}/evidence",
    name="getVerifierJobEvidence",
    summary="The processed evidence of a completed job",
    auth=AuthMode.EITHER,
    response=VerifierEvidenceSummary,
    path_params=JobPath,
    errors=(VerifierJobNotFound, NotVerifierJobParty, JobNotCompleted),
)
async def get_evidence(call: Call[None, None, JobPath]) -> VerifierEvidenceSummary:
    """The facts the check established and their `evidenceHash`: keccak256 of the UTF-8
    canonical JSON (keys sorted, no whitespace, non-ASCII as itself, no floats). For the
    creator, the project's parties and verifier admins (other viewers of the job: 403
    `not_verifier_job_party`); 409 `verifier_job_not_completed` before completion."""
    principal = call.require_principal()
    row, result = await jobs.evidence_of(call.pool, principal.user_id, call.path.jobId)
    return VerifierEvidenceSummary(
        jobId=row.id,
        projectAddress=row.project_address,
        milestoneIndex=row.milestone_index,
        checkPolicyId=PolicyId(row.check_policy_id),
        passes=result.passes,
        evidenceHash=result.evidence_hash,
        evidence=result.evidence,
        completedAt=result.completed_at,
    )


@routes.get(
    f"{JOB_PATH}/evidence/raw",
    name="getVerifierJobRawEvidence",
    summary="The raw evidence and execution logs of a job, until its retention expires",
    auth=AuthMode.EITHER,
    response=VerifierRawEvidence,
    path_params=JobPath,
    errors=(VerifierJobNotFound, NotVerifierJobParty, RawEvidenceExpired),
)
async def get_raw_evidence(call: Call[None, None, JobPath]) -> VerifierRawEvidence:
    """Which Ray node and actor ran each attempt, the completing attempt's raw facts, and the
    execution output (bounded by `MARKETPLACE_VERIFIER_MAX_LOG_BYTES`). For the creator, the
    project's parties and verifier admins only (others who see the job: 403
    `not_verifier_job_party`). After `retentionExpiresAt` the sweep deletes it: 410
    `raw_evidence_expired`."""
    principal = call.require_principal()
    row, raw = await jobs.raw_evidence_of(call.pool, principal.user_id, call.path.jobId)
    stored = raw.raw_evidence or {}
    return VerifierRawEvidence(
        jobId=row.id,
        attempts=[VerifierAttemptLog.model_validate(a) for a in stored.get("attempts", [])],
        raw=stored.get("result"),
        logs=raw.logs,
        retentionExpiresAt=row.retention_expires_at,
    )


async def policy_executors(app: web.Application) -> AsyncIterator[None]:
    """Find or create the policy executor paired with each `verifier` job worker (same index;
    get-if-exists, detached, like the workers). Each gets only the policy settings: the process
    that runs the worker's code never receives the signing key or any other secret.

    What the executors can run is theirs to say, not this node's (in a deployment they run on
    their own nodes, where the sandbox is allowed and the frontends' is not): a background task
    asks them now and then and keeps what every executor can run in ``VERIFIER_POLICIES``."""
    settings = app[keys.SETTINGS]
    count = VERIFIER_QUEUE.worker_count(settings) if settings.jobs_enabled else 0
    app[keys.VERIFIER_POLICIES] = ExecutorReports()
    task: asyncio.Task[None] | None = None
    if count:
        policy_settings = PolicySettings.from_settings(settings)
        handles = []
        for index in range(count):
            spec = executor_spec(index, settings.verifier_executor_resource)
            handles.append((spec.name, app[keys.ACTORS].handle(spec, policy_settings, index)))
        task = asyncio.create_task(_follow_reports(app, handles), name="verifier-executors")
    yield
    if task is not None:
        await cancel_and_wait(task)


REPORT_INTERVAL_SECONDS = 30.0
REPORT_RETRY_SECONDS = 2.0


async def _follow_reports(app: web.Application, handles: list[tuple[str, Any]]) -> None:
    runtime = app[keys.ACTORS]
    while True:
        answers = await asyncio.gather(
            *(runtime.call(name, handle, "report") for name, handle in handles),
            return_exceptions=True,
        )
        reports = [a for a in answers if isinstance(a, ExecutorReport)]
        if len(reports) < len(answers):
            log.info("policy executors answered: %d of %d", len(reports), len(answers))
        if reports:
            app[keys.VERIFIER_POLICIES].latest = ExecutorReport.combine(reports)
        await asyncio.sleep(
            REPORT_INTERVAL_SECONDS if len(reports) == len(answers) else REPORT_RETRY_SECONDS
        )


async def offered_policies(app: web.Application) -> list[PolicyId]:
    """The executors' report; before one arrives (or without executors), this node's probe (it
    runs commands once per process, about a second: never on the loop)."""
    reports = app.get(keys.VERIFIER_POLICIES)
    if reports is not None and reports.latest is not None:
        return list(reports.latest.available)
    return await asyncio.to_thread(available_policies, app[keys.SETTINGS])


async def retention_sweeper(app: web.Application) -> AsyncIterator[None]:
    """Delete raw evidence past its retention, now and then, in every frontend; and probe this
    node's tooling in the background, so the first request does not wait for it."""
    settings = app[keys.SETTINGS]
    task = asyncio.create_task(
        sweep_forever(app[keys.PG_POOL], settings.verifier_retention_days),
        name="verifier-retention",
    )
    asyncio.get_running_loop().run_in_executor(None, available_policies, settings)
    yield
    await cancel_and_wait(task)
