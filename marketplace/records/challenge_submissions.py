"""Challenge submissions: the shard command registering a submission's artifact, checked against
the chain, and the listing rules.

Rules (docs/records.md): the submitter wallet is an active link of the caller; the project is
indexed, visible and in challenge mode; on create, or when `submissionHash` changes, the hash must
equal ``challengeSubmissionOf(submitter)`` read from the project contract at the latest block
(else 409 `submission_hash_mismatch`); an unchanged hash updates `artifactUri`/`notes` only and
needs no chain read.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

import asyncpg
from eth_utils import to_checksum_address

from marketplace.chain.abi import ContractAbi
from marketplace.chain.rpc import RpcError
from marketplace.errors import ServiceUnavailable
from marketplace.records.access import caller_wallets, require_linked, visible_project
from marketplace.records.errors import (
    NotChallengeParticipant,
    ProjectModeMismatch,
    SubmissionHashMismatch,
)
from marketplace.shards import ProjectCommand, ShardContext
from marketplace.storage.repositories import challenge_submissions as repo
from marketplace.types import ZERO_BYTES32

log = logging.getLogger(__name__)

CHALLENGE_SUBMISSION_OF = ContractAbi.load("MarketplaceProject").functions["challengeSubmissionOf"]


async def onchain_submission_hash(ctx: ShardContext, project_address: str, submitter: str) -> str:
    """``challengeSubmissionOf(submitter)`` at the latest block, lower-case hex (zero: none).

    The read is bounded well inside the frontend's actor-call timeout, so a slow node gives a
    clean 503 instead of holding the project's lock after the caller has gone.
    """
    if ctx.chain is None:
        raise ServiceUnavailable("no chain is configured; submission hashes cannot be checked")
    call = {
        "to": to_checksum_address(project_address),
        "data": CHALLENGE_SUBMISSION_OF.encode_call(to_checksum_address(submitter)),
    }
    timeout = max(1.0, ctx.settings.actor_call_timeout_seconds / 2)
    try:
        data = await asyncio.wait_for(ctx.chain.call("eth_call", [call, "latest"]), timeout)
        value = CHALLENGE_SUBMISSION_OF.decode_result(data)
    except (RpcError, TimeoutError) as exc:
        # The node's address and the client library's wording go to the log, not to the caller.
        log.warning("submission check: the chain did not answer: %r", exc)
        raise ServiceUnavailable("the chain did not answer the submission check") from exc
    except Exception as exc:  # e.g. "0x" from an address without code: no usable answer
        log.warning("submission check: unusable answer for %s: %r", project_address, exc)
        raise ServiceUnavailable("the chain gave no usable answer to the submission check") from exc
    return str(value).lower()


# A submission registration as stored, the shard command's result (it crosses the Ray boundary).
StoredChallengeSubmission = repo.ChallengeSubmissionRow


@dataclass(frozen=True)
class UpsertChallengeSubmission(ProjectCommand):
    """Shard command: register or update the artifact of (project, submitter wallet)'s on-chain
    submission. Addresses and the hash are lower-case; ``None`` clears a stored URI or note."""

    user_id: uuid.UUID
    submitter_address: str
    submission_hash: str
    artifact_uri: str | None
    notes: str | None

    async def apply(self, ctx: ShardContext) -> StoredChallengeSubmission:
        submitter = self.submitter_address
        # No pooled connection is held across the chain read: the project's lock (held by the
        # shard around this whole command) is what keeps other writers out meanwhile.
        async with ctx.pool.acquire() as conn:
            wallets = await caller_wallets(conn, self.user_id)
            require_linked(wallets, submitter, "submitterAddress")
            project = await visible_project(conn, self.project_address, wallets)
            if project.mode != "challenge":
                raise ProjectModeMismatch(
                    "challenge submissions exist only for challenge-mode projects; standard-mode "
                    "projects take bid drafts"
                )
            existing = await repo.get(conn, self.project_address, submitter)
        if existing is None or existing.submission_hash != self.submission_hash:
            onchain = await onchain_submission_hash(ctx, self.project_address, submitter)
            if onchain != self.submission_hash:
                detail = (
                    "the submitter has no on-chain submission"
                    if onchain == ZERO_BYTES32
                    else "it differs from the submitter's on-chain submission hash"
                )
                raise SubmissionHashMismatch(f"submissionHash does not match the chain: {detail}")
        async with ctx.pool.acquire() as conn:
            row = await repo.upsert(
                conn,
                project_address=self.project_address,
                submitter_address=submitter,
                submission_hash=self.submission_hash,
                artifact_uri=self.artifact_uri,
                notes=self.notes,
                user_id=self.user_id,
            )
        return row


async def list_challenge_submissions(
    pool: asyncpg.Pool, user_id: uuid.UUID, project_address: str, submitter: str | None
) -> tuple[int, list[StoredChallengeSubmission]]:
    """(onchainSubmissionCount, visible records). The owner sees every registration; anyone else
    only the registrations of their own linked wallets, and a caller with none is refused."""
    wallets = await caller_wallets(pool, user_id)
    project = await visible_project(pool, project_address, wallets)
    if project.mode != "challenge":
        raise ProjectModeMismatch("challenge submissions exist only for challenge-mode projects")
    count = project.challenge_submission_count or 0
    if project.owner in wallets:
        rows = await repo.list_for_project(
            pool, project_address, visible_submitters=None, submitter_address=submitter
        )
        return count, rows
    own = await repo.list_for_project(
        pool, project_address, visible_submitters=sorted(wallets), submitter_address=None
    )
    if not own:
        raise NotChallengeParticipant()
    rows = [row for row in own if submitter is None or row.submitter_address == submitter]
    return count, rows
