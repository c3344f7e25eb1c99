"""The ``verifier`` job: run the requested policy, hash its evidence, sign the attestation and
complete, in that order (docs/verifier.md, "Execution").

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

import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

from marketplace.chain.rpc import JsonRpcClient
from marketplace.jobs import JobContext, PermanentJobError, QueueSpec
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.attestation import NonceAlreadyUsed, Signer, attest
from marketplace.verifier.evidence import NotCanonical, evidence_hash
from marketplace.verifier.policies import run_policy
from marketplace.verifier.policy import (
    InvalidDeliveryRef,
    PolicyContext,
    PolicyId,
    PolicySettings,
)

RPC_TIMEOUT_SECONDS = 20.0


async def run_verifier_job(ctx: JobContext) -> None:
    job_id = uuid.UUID(ctx.payload["verifierJobId"])
    row = await repo.get(ctx.pool, job_id)
    if row is None or row["status"] == "completed":
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
        with tempfile.TemporaryDirectory(prefix="verifier-") as work_dir:
            context = PolicyContext(
                PolicySettings.from_settings(settings), settings.chain_rpc_url, Path(work_dir)
            )
            try:
                outcome = await run_policy(
                    PolicyId(row["check_policy_id"]), row["delivery_ref"], context
                )
            except InvalidDeliveryRef as exc:
                raise PermanentJobError(f"deliveryRef: {exc}") from exc
        try:
            hashed = evidence_hash(outcome.evidence)
        except NotCanonical as exc:
            raise PermanentJobError(f"the policy's evidence is not canonical: {exc}") from exc
        requested_deadline = row["requested_deadline"]
        try:
            attestation = await attest(
                rpc,
                signer,
                project=row["project_address"],
                milestone_index=row["milestone_index"],
                passes=outcome.passes,
                evidence_hash=hashed,
                nonce=int(row["attestation_nonce"]),
                nonce_requested=row["requested_nonce"] is not None,
                deadline=int(requested_deadline) if requested_deadline is not None else None,
                ttl_seconds=settings.verifier_attestation_ttl_seconds,
            )
        except NonceAlreadyUsed as exc:
            raise PermanentJobError(str(exc)) from exc
    finally:
        await rpc.close()
    async with ctx.completion() as conn:
        await repo.complete(
            conn,
            job_id,
            attempt_count=ctx.job.attempt,
            retention_days=settings.verifier_retention_days,
            passes=outcome.passes,
            evidence_hash=hashed,
            evidence=outcome.evidence,
            attestation=attestation,
            raw={**outcome.raw, "attempt": ctx.job.attempt, **ctx.location},
            logs=outcome.logs,
        )


# One attempt per actor at a time; the pool's size and the attempt's timeout are settings.
VERIFIER_QUEUE = QueueSpec(
    "verifier",
    run_verifier_job,
    concurrency=1,
    workers_setting="verifier_pool_size",
    timeout_setting="verifier_job_timeout_seconds",
)
