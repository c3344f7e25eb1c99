"""Verifier jobs: who may request and read them, and the request's rules (docs/verifier.md).

A request is a row in ``verifier_jobs`` and a job on the ``verifier`` queue, written in one
statement; the row's status, attempts and error are the job's. Reads come straight from
PostgreSQL. Who sees what:
- full record, evidence and raw evidence: the job's creator, the project's current owner and
  selected worker (through active wallet links), verifier admins;
- the public record (result without evidence): other signed-in callers who can see the project;
- anyone else: 404.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.errors import InvalidRequest
from marketplace.identity.permissions import flags_of
from marketplace.jobs import new_job
from marketplace.pagination import BIGINT_MAX, CursorKind, keyset_page
from marketplace.records.access import ProjectParties, caller_wallets
from marketplace.records.errors import NotProjectParty, ProjectNotFound
from marketplace.storage.repositories import projects as projects_repo
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.dispute import DisputeFacts, read_dispute
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
from marketplace.verifier.execution import VERIFIER_QUEUE
from marketplace.verifier.models import (
    CompletedResult,
    VerifierJobAcceptedResponse,
    VerifierJobCreateRequest,
    VerifierJobListQuery,
    VerifierJobPayload,
    completed_result,
    request_of,
)
from marketplace.verifier.policies import parse_delivery_ref
from marketplace.verifier.policy import InvalidDeliveryRef, PolicyId, TransientPolicyError

JOB_CURSOR = CursorKind("v1", (BIGINT_MAX,))
# A request waits at most this long for the chain's dispute state (then 503).
CHAIN_READ_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Viewer:
    user_id: uuid.UUID
    wallets: frozenset[str]
    verifier_admin: bool

    def is_party(self, project: ProjectParties | None) -> bool:
        if project is None:
            return False
        return project.owner in self.wallets or (
            project.worker is not None and project.worker in self.wallets
        )


async def viewer(pool: asyncpg.Pool, user_id: uuid.UUID) -> Viewer:
    # Flags are read on every call, so a revoked verifierAdmin takes effect at once.
    flags = await flags_of(pool, user_id)
    return Viewer(user_id, await caller_wallets(pool, user_id), flags.verifier_admin)


async def _project_for(
    pool: asyncpg.Pool, who: Viewer, address: str
) -> ProjectParties | ProjectNotFound | None:
    """The indexed project as ``who`` may see it: its parties, ProjectNotFound when it is
    indexed but hidden from ``who``, None when it is not indexed. Verifier admins see every
    project."""
    row = await projects_repo.visible_project_parties(
        pool, address, who.wallets, everyone=who.verifier_admin
    )
    if row is not None:
        return ProjectParties.from_row(row)
    if await projects_repo.is_indexed(pool, address):
        return ProjectNotFound()
    return None


@dataclass(frozen=True)
class Accepted:
    """The answer to a job request: a new job (202) or the dispute's existing one (200)."""

    job_id: uuid.UUID
    response: VerifierJobAcceptedResponse
    created: bool


def _invalid(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(
        f"invalid request: body.{field}: {message}",
        [{"location": "body", "field": field, "message": message, "type": "value_error"}],
    )


async def dispute_facts(settings: Settings, project: str, milestone_index: int) -> DisputeFacts:
    rpc = JsonRpcClient(settings.chain_rpc_url, timeout_s=CHAIN_READ_TIMEOUT_SECONDS)
    try:
        return await read_dispute(rpc, project, milestone_index)
    except TransientPolicyError as exc:
        raise ChainUnavailable(str(exc)) from None
    finally:
        await rpc.close()


def check_verdict_scope(
    facts: DisputeFacts,
    *,
    milestone_index: int,
    policy: str | None,
    requested_policy: str,
    delivery_ref: str,
) -> None:
    """What a verdict may judge, in the documented order: the active disputed milestone in
    phase ``challenged``, its acceptance policy, the submitted delivery."""
    if not facts.judges(milestone_index):
        raise MilestoneNotDisputed()
    if policy is None:
        raise NoAcceptancePolicy()
    if policy != requested_policy:
        raise PolicyMismatch(
            f"the milestone's acceptance policy is {policy}, not {requested_policy}"
        )
    if not facts.matches_delivery(delivery_ref):
        raise DeliveryRefMismatch()


def _accepted_from_row(
    row: repo.VerifierJobRow, settings: Settings, available: list[PolicyId]
) -> VerifierJobAcceptedResponse:
    retention = row.retention_expires_at or row.created_at + timedelta(
        days=settings.verifier_retention_days
    )
    return VerifierJobAcceptedResponse(
        jobId=row.id,
        status=row.status,
        attemptCount=row.attempt_count,
        maxAttempts=row.max_attempts,
        createdAt=row.created_at,
        retentionExpiresAt=retention,
        request=request_of(row),
        pollUrl="",
        availablePolicies=available,
    )


async def accept(
    pool: asyncpg.Pool,
    settings: Settings,
    *,
    user_id: uuid.UUID,
    request: VerifierJobCreateRequest,
    available: list[PolicyId],
    signing_ready: bool,
) -> Accepted:
    """Check the request and queue the job, or answer the dispute's existing job; the
    response's ``pollUrl`` is filled by the caller.

    Order of the checks: signing configured (503), chain (409 ``chain_mismatch``), policy tooling
    (409 ``policy_unavailable``), the ``deliveryRef``'s form (400), the project (404 hidden,
    409 ``project_not_indexed``), the caller (403 ``not_project_party``), the milestone (409
    ``milestone_out_of_range``); then, read from the chain: the active disputed milestone in
    phase ``challenged`` (409 ``milestone_not_disputed``), its acceptance policy (409
    ``no_acceptance_policy``, ``policy_mismatch``), the submitted delivery (409
    ``delivery_ref_mismatch``), the deadline bound (400 naming ``body.deadline``).
    """
    if not signing_ready:
        raise VerifierNotConfigured()
    if request.chainId != settings.chain_id:
        raise ChainMismatch(
            f"chainId {request.chainId} is not this deployment's chain ({settings.chain_id})"
        )
    if request.checkPolicyId not in available:
        raise PolicyUnavailable(
            f"{request.checkPolicyId.value} needs tooling this deployment does not have; "
            f"available: {', '.join(p.value for p in available) or 'none'}"
        )
    try:
        parse_delivery_ref(request.checkPolicyId, request.deliveryRef, settings)
    except InvalidDeliveryRef as exc:
        raise _invalid("deliveryRef", str(exc)) from None
    who = await viewer(pool, user_id)
    project = await _project_for(pool, who, request.projectAddress)
    if project is None:
        raise ProjectNotIndexed()
    if isinstance(project, ProjectNotFound):
        raise project
    if not (who.verifier_admin or who.is_party(project)):
        raise NotProjectParty(
            "only the project's owner or selected worker (through an active wallet link) or a "
            "verifier admin may request a verifier job"
        )
    if request.milestoneIndex >= project.milestone_count:
        raise MilestoneOutOfRange(
            f"milestoneIndex {request.milestoneIndex} is not below the project's "
            f"milestoneCount ({project.milestone_count})"
        )
    facts = await dispute_facts(settings, request.projectAddress, request.milestoneIndex)
    check_verdict_scope(
        facts,
        milestone_index=request.milestoneIndex,
        policy=await repo.acceptance_policy(pool, request.projectAddress, request.milestoneIndex),
        requested_policy=request.checkPolicyId.value,
        delivery_ref=request.deliveryRef,
    )
    latest_deadline = facts.block_time + settings.verifier_attestation_ttl_seconds
    if request.deadline is not None and request.deadline > latest_deadline:
        raise _invalid(
            "deadline",
            f"at most the chain's latest block time plus "
            f"MARKETPLACE_VERIFIER_ATTESTATION_TTL_SECONDS ({latest_deadline}); a request may "
            "shorten the attestation's life, never extend it",
        )
    job_id = uuid.uuid4()
    nonce = request.nonce if request.nonce is not None else secrets.randbits(128)
    max_attempts = settings.verifier_max_attempts
    async with pool.acquire() as conn, conn.transaction():
        await repo.lock_dispute(
            conn, request.projectAddress, request.milestoneIndex, facts.dispute_opened_at
        )
        existing = await repo.dispute_job(
            conn, request.projectAddress, request.milestoneIndex, facts.dispute_opened_at
        )
        if existing is not None:
            # One verdict per dispute, whoever asks: two signed verdicts for one dispute could
            # contradict each other, and either could be relayed.
            return Accepted(existing.id, _accepted_from_row(existing, settings, available), False)
        created_at = await repo.insert(
            conn,
            job=new_job(
                VERIFIER_QUEUE,
                VerifierJobPayload(verifier_job_id=job_id),
                max_attempts=max_attempts,
                idempotency_key=str(job_id),
            ),
            job_id=job_id,
            created_by=user_id,
            project_address=request.projectAddress,
            milestone_index=request.milestoneIndex,
            check_policy_id=request.checkPolicyId.value,
            delivery_ref=request.deliveryRef,
            chain_id=request.chainId,
            requested_nonce=request.nonce,
            requested_deadline=request.deadline,
            attestation_nonce=nonce,
            max_attempts=max_attempts,
            dispute_opened_at=facts.dispute_opened_at,
        )
    response = VerifierJobAcceptedResponse(
        jobId=job_id,
        status="queued",
        attemptCount=0,
        maxAttempts=max_attempts,
        createdAt=created_at,
        retentionExpiresAt=created_at + timedelta(days=settings.verifier_retention_days),
        request=request,
        pollUrl="",
        availablePolicies=available,
    )
    return Accepted(job_id, response, True)


@dataclass(frozen=True)
class JobView:
    row: repo.VerifierJobRow
    # True: the full record (creator, parties, verifier admins); False: the public one.
    full: bool


async def read_job(pool: asyncpg.Pool, user_id: uuid.UUID, job_id: uuid.UUID) -> JobView:
    row = await repo.get(pool, job_id)
    if row is None:
        raise VerifierJobNotFound()
    who = await viewer(pool, user_id)
    if who.verifier_admin or row.created_by == user_id:
        return JobView(row, full=True)
    project = await _project_for(pool, who, row.project_address)
    if not isinstance(project, ProjectParties):
        raise VerifierJobNotFound()
    return JobView(row, full=who.is_party(project))


async def read_full_job(
    pool: asyncpg.Pool, user_id: uuid.UUID, job_id: uuid.UUID
) -> repo.VerifierJobRow:
    """The job for a reader of its evidence: 404 when the caller may not see it at all, 403
    ``not_verifier_job_party`` when it sees only the public record."""
    view = await read_job(pool, user_id, job_id)
    if not view.full:
        raise NotVerifierJobParty()
    return view.row


async def evidence_of(
    pool: asyncpg.Pool, user_id: uuid.UUID, job_id: uuid.UUID
) -> tuple[repo.VerifierJobRow, CompletedResult]:
    row = await read_full_job(pool, user_id, job_id)
    result = completed_result(row)
    if result is None:
        raise JobNotCompleted(f"the job is {row.status}: it has no evidence yet")
    return row, result


async def raw_evidence_of(
    pool: asyncpg.Pool, user_id: uuid.UUID, job_id: uuid.UUID
) -> tuple[repo.VerifierJobRow, repo.RawEvidenceRow]:
    row = await read_full_job(pool, user_id, job_id)
    raw = await repo.raw_evidence(pool, job_id)
    if raw is None:
        raise VerifierJobNotFound()
    if raw.raw_deleted_at is not None:
        raise RawEvidenceExpired(
            f"the raw evidence and logs were deleted on {raw.raw_deleted_at.isoformat()}, "
            "after the retention period"
        )
    return row, raw


async def list_jobs(
    pool: asyncpg.Pool, user_id: uuid.UUID, query: VerifierJobListQuery
) -> tuple[list[repo.VerifierJobRow], str | None]:
    position = JOB_CURSOR.position(query.cursor)
    flags = await flags_of(pool, user_id)
    rows = await repo.page(
        pool,
        viewer_id=user_id,
        everything=flags.verifier_admin,
        project_address=query.projectAddress,
        milestone_index=query.milestoneIndex,
        status=query.status,
        before_seq=position[0] if position else None,
        limit=query.limit + 1,
    )
    return keyset_page(rows, query.limit, JOB_CURSOR, lambda row: (row.seq,))
