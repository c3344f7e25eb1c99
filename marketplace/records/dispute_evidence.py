"""Dispute evidence: the shard command storing one party's evidence, and the listing rules.

Rules (docs/records.md): the caller acts through an active link to the owner wallet or the
selected worker wallet (its role is derived); the project has an active dispute (read model:
status `dispute` with a dispute phase) and the evidence is for its milestone; each party submits
once per disputed milestone (the UNIQUE constraint decides, so concurrent duplicates give exactly
one record). Readers: owner, selected worker and the configured dispute admin wallets.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import asyncpg

from marketplace.records.access import caller_wallets, require_linked, visible_project
from marketplace.records.errors import (
    EvidenceAlreadySubmitted,
    MilestoneNotDisputed,
    NoActiveDispute,
    NotDisputeParty,
    SubmitterAmbiguous,
)
from marketplace.shards import ProjectCommand, ShardContext
from marketplace.storage.repositories import dispute_evidence as repo
from marketplace.types import JsonObject

# Dispute evidence as stored, the shard command's result (it crosses the Ray boundary).
StoredDisputeEvidence = repo.DisputeEvidenceRow


@dataclass(frozen=True)
class SubmitDisputeEvidence(ProjectCommand):
    """Shard command: store one party's evidence for the project's active dispute.

    ``milestone_index`` ``None``: the active dispute's milestone; ``submitter_address``
    (lower-case) ``None``: the caller's one linked wallet that is a party.
    """

    user_id: uuid.UUID
    evidence_hash: str
    evidence_payload: JsonObject | None
    milestone_index: int | None = None
    submitter_address: str | None = None

    async def apply(self, ctx: ShardContext) -> StoredDisputeEvidence:
        async with ctx.pool.acquire() as conn:
            wallets = await caller_wallets(conn, self.user_id)
            project = await visible_project(conn, self.project_address, wallets)
            submitter = self.submitter_address
            if submitter is not None:
                require_linked(wallets, submitter, "submitterAddress")
                role = project.role_of(submitter)
                if role is None:
                    raise NotDisputeParty(
                        "submitterAddress is neither the project owner nor the selected worker"
                    )
            else:
                parties = sorted((r, w) for w in wallets if (r := project.role_of(w)) is not None)
                if not parties:
                    raise NotDisputeParty(
                        "none of your linked wallets is the project owner or the selected worker"
                    )
                if len(parties) > 1:
                    raise SubmitterAmbiguous()
                role, submitter = parties[0]
            active = project.active_dispute_milestone
            if active is None:
                raise NoActiveDispute()
            milestone = self.milestone_index
            if milestone is None:
                milestone = active
            elif milestone != active:
                raise MilestoneNotDisputed(
                    f"milestone {milestone} is not the active disputed milestone ({active})"
                )
            try:
                row = await repo.insert(
                    conn,
                    project_address=self.project_address,
                    milestone_index=milestone,
                    submitter_address=submitter,
                    submitter_role=role,
                    evidence_hash=self.evidence_hash,
                    evidence_payload=self.evidence_payload,
                    dispute_opened_at=project.dispute_opened_at,
                    user_id=self.user_id,
                )
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name != repo.UNIQUE_CONSTRAINT:
                    raise
                raise EvidenceAlreadySubmitted(
                    f"the {role} already submitted evidence for milestone {milestone}"
                ) from None
        return row


async def list_dispute_evidence(
    pool: asyncpg.Pool,
    user_id: uuid.UUID,
    project_address: str,
    milestone_index: int | None,
    admin_wallets: Iterable[str],
) -> list[StoredDisputeEvidence]:
    wallets = await caller_wallets(pool, user_id)
    admins = frozenset(admin_wallets)
    project = await visible_project(pool, project_address, wallets, extra=admins)
    is_party = any(project.role_of(w) is not None for w in wallets)
    if not is_party and admins.isdisjoint(wallets):
        raise NotDisputeParty(
            "dispute evidence is visible only to the project owner, the selected worker and "
            "dispute admins"
        )
    return await repo.list_for_project(pool, project_address, milestone_index)
