"""The ``verifier`` job: run the requested policy, hash its evidence, re-check the dispute on
chain, sign the attestation and complete, in that order (docs/verifier.md, "Execution").

The policy never runs in this process, which holds the signing key and the database: it runs
in the job worker's paired policy executor (``verifier-executor-{index}``, a Ray actor given only
:class:`PolicySettings`; marketplace/actors/verifier_executor.py), and the worker's code runs
there only inside the sandbox. This process signs only after reading from the chain, right
before signing, that the job's dispute is still the project's active one in phase
``challenged`` over the same delivery: a job whose dispute moved on fails without a signature.

Each attempt first appends where it runs (Ray node and actor) to the job's raw evidence. The
policy runs outside any transaction; the result, the attestation and the milestone read model's
latest-verifier fields are written in the transaction that completes the queue job under this
worker's lease, so a job killed mid-attempt is retried and completes (and attests) once.

Failures: :class:`TransientPolicyError` (RPC or git host unreachable, HTTP 5xx, timeouts) is
retried with the queue's backoff up to ``MARKETPLACE_VERIFIER_MAX_ATTEMPTS``; a ``deliveryRef``
the policy cannot read or a requested nonce already used fails the job at once; a deterministic
negative result is not a failure: the job completes with ``passes: false``.

The pool: ``MARKETPLACE_VERIFIER_POOL_SIZE`` worker actors, spread over the Ray cluster's nodes,
each running one attempt at a time, so a CPU-heavy test run never shares its actor's process.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.jobs import JobContext, PermanentJobError, QueueSpec
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.attestation import NonceAlreadyUsed, Signer, attest
from marketplace.verifier.dispute import DisputeFacts, read_dispute
from marketplace.verifier.evidence import NotCanonical, evidence_hash
from marketplace.verifier.models import VerifierJobPayload
from marketplace.verifier.policy import (
    InvalidDeliveryRef,
    PolicyId,
    PolicyOutcome,
    TransientPolicyError,
)

RPC_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class PolicyRun:
    """What a policy executor is asked to run: nothing else crosses to it."""

    policy: PolicyId
    delivery_ref: str


@dataclass(frozen=True)
class ExecutorReport:
    """What a policy executor can run on its node: the policies whose tooling it has (the test
    policies only where the sandbox works), and why the sandbox does not work, if it does not."""

    available: tuple[PolicyId, ...]
    sandbox_unavailable: str | None

    @classmethod
    def combine(cls, reports: list[ExecutorReport]) -> ExecutorReport:
        """What every executor can run: a job may land on any of them."""
        available = [p for p in PolicyId if all(p in r.available for r in reports)]
        reasons = [r.sandbox_unavailable for r in reports if r.sandbox_unavailable]
        return cls(tuple(available), reasons[0] if reasons else None)


@dataclass
class ExecutorReports:
    """A frontend's latest combined report of its executors (None until one answered)."""

    latest: ExecutorReport | None = None


def executor_name(index: int) -> str:
    return f"verifier-executor-{index}"


async def execute_policy(settings: Settings, index: int, run: PolicyRun) -> PolicyOutcome:
    """Run ``run`` on the policy executor paired with this worker (same index). A missing,
    dead or unreachable executor is transient (the job is retried; Ray restarts it)."""
    name = executor_name(index)
    try:
        # A GCS lookup: off the event loop.
        handle: Any = await asyncio.to_thread(ray.get_actor, name, namespace=settings.ray_namespace)
    except ValueError as exc:
        raise TransientPolicyError(f"the policy executor {name} is not running") from exc
    ref = handle.run.remote(run)
    try:
        outcome: PolicyOutcome = await ref
    except asyncio.CancelledError:
        # The attempt timed out or the worker stops: cancelling the executor's task kills the
        # command's sandbox (run_bounded kills it on cancellation).
        ray.cancel(ref)
        raise
    except (RayActorError, ActorUnavailableError) as exc:
        raise TransientPolicyError(f"the policy executor {name} died or is unreachable") from exc
    except RayTaskError as exc:
        # The policy's own error (transient, invalid reference) is the job's error: Ray's
        # wrapper names the executor's pid, address and actor id, which clients must not see.
        cause = exc.cause
        if isinstance(cause, Exception):
            raise cause from None
        raise
    return outcome


async def _dispute_now(rpc: JsonRpcClient, row: repo.VerifierJobRow) -> DisputeFacts:
    facts = await read_dispute(rpc, row.project_address, row.milestone_index)
    still = (
        row.dispute_opened_at is not None
        and facts.judges(row.milestone_index)
        and facts.dispute_opened_at == row.dispute_opened_at
        and facts.matches_delivery(row.delivery_ref)
    )
    if not still:
        raise PermanentJobError(
            "the dispute this job judges is no longer the project's active dispute in phase "
            "challenged over the submitted delivery: no attestation is signed"
        )
    return facts


async def run_verifier_job(ctx: JobContext[VerifierJobPayload]) -> None:
    job_id = ctx.payload.verifier_job_id
    row = await repo.get(ctx.pool, job_id)
    if row is None or row.completed_at is not None:
        return  # its creator was deleted, or an earlier attempt completed it
    settings = ctx.settings
    signer = Signer.from_settings(settings)
    if signer is None:
        raise PermanentJobError(
            "no attestation signing key or registry is configured "
            "(MARKETPLACE_VERIFIER_PRIVATE_KEY, MARKETPLACE_REGISTRY_ADDRESS)"
        )
    await repo.record_attempt(
        ctx.pool,
        job_id,
        {
            "attempt": ctx.job.attempt,
            **ctx.location,
            "startedAt": datetime.now(UTC).isoformat(),
        },
    )
    rpc = JsonRpcClient(settings.chain_rpc_url, timeout_s=RPC_TIMEOUT_SECONDS)
    try:
        # Not worth running when the dispute already moved on.
        await _dispute_now(rpc, row)
        try:
            outcome = await execute_policy(
                settings,
                ctx.index,
                PolicyRun(PolicyId(row.check_policy_id), row.delivery_ref),
            )
        except InvalidDeliveryRef as exc:
            raise PermanentJobError(f"deliveryRef: {exc}") from exc
        try:
            hashed = evidence_hash(outcome.evidence)
        except NotCanonical as exc:
            raise PermanentJobError(f"the policy's evidence is not canonical: {exc}") from exc
        # Right before signing: the chain must still say this dispute, this delivery, and the
        # owner's policy must still be the one that ran.
        facts = await _dispute_now(rpc, row)
        policy = await repo.acceptance_policy(ctx.pool, row.project_address, row.milestone_index)
        if policy != row.check_policy_id:
            raise PermanentJobError(
                f"the milestone's acceptance policy is {policy}, not {row.check_policy_id}"
            )
        # Never later than the chain's time plus the TTL; a request may only shorten it.
        deadline = facts.block_time + settings.verifier_attestation_ttl_seconds
        if row.requested_deadline is not None:
            deadline = min(deadline, int(row.requested_deadline))
        try:
            attestation = await attest(
                rpc,
                signer,
                project=row.project_address,
                milestone_index=row.milestone_index,
                passes=outcome.passes,
                evidence_hash=hashed,
                nonce=int(row.attestation_nonce),
                nonce_requested=row.requested_nonce is not None,
                deadline=deadline,
            )
        except NonceAlreadyUsed as exc:
            raise PermanentJobError(str(exc)) from exc
    finally:
        await rpc.close()
    async with ctx.completion() as conn:
        await repo.complete(
            conn,
            job_id,
            retention_days=settings.verifier_retention_days,
            passes=outcome.passes,
            evidence_hash=hashed,
            evidence=outcome.evidence,
            attestation=attestation,
            raw={**outcome.raw, "attempt": ctx.job.attempt, **ctx.location},
            logs=outcome.logs,
        )


def pool_size(settings: Settings) -> int:
    return settings.verifier_pool_size


def attempt_timeout(settings: Settings) -> float:
    return settings.verifier_job_timeout_seconds


# One attempt per actor at a time; the pool's size and the attempt's timeout are settings. The
# requests read their state from their jobs, so completed jobs are kept.
VERIFIER_QUEUE = QueueSpec(
    "verifier",
    VerifierJobPayload,
    run_verifier_job,
    keep_completed=True,
    concurrency=1,
    workers_from=pool_size,
    timeout_from=attempt_timeout,
)
