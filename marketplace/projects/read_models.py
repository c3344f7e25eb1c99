"""Rules of the project read API as plain functions: the effective status, the mapping of read-model
rows to the API shapes, and the listing cursor.

The effective status table is documented in docs/read-models.md; keep the two in step (the unit
tests in tests/unit/projects/ test every row of it, and the SQL twin in
``repositories/projects.py`` is checked against this function).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol, TypeVar

import asyncpg
from pydantic import BaseModel

from marketplace.pagination import BIGINT_MAX, INTEGER_MAX, CursorKind
from marketplace.projects.models import (
    MilestonePolicy,
    MilestoneReadModel,
    ProjectReadModel,
    ProjectStatus,
    check_policy,
)
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import projects as projects_repo
from marketplace.storage.repositories.projects import (
    CHALLENGE_FALLBACK_SECONDS,
    MilestoneValues,
    ProjectReadRow,
)
from marketplace.types import checksum_address
from marketplace.verifier.policy import PolicyId

__all__ = [
    "CHALLENGE_FALLBACK_SECONDS",
    "PROJECT_LIST_CURSOR",
    "checksum",
    "effective_status",
    "milestone_model",
    "project_for_viewer",
    "project_model",
    "viewer_can_edit_metadata",
]

# --- effective status -----------------------------------------------------------------------

_DEADLINE_DRIVEN = frozenset({"bidding", "building"})


class ChallengeClock(Protocol):
    """What the effective status is derived from (a :class:`ProjectReadRow` has it)."""

    @property
    def status(self) -> str: ...
    @property
    def project_mode(self) -> str: ...
    @property
    def challenge_submission_deadline(self) -> int | None: ...
    @property
    def challenge_submission_count(self) -> int | None: ...
    @property
    def challenge_owner_response_deadline(self) -> int | None: ...


def effective_status(row: ChallengeClock, now: int) -> ProjectStatus:
    """The status clients gate actions on, derived from challenge-mode deadlines at ``now``.

    ``row``'s deadlines are Unix seconds, ``None`` when unknown. Conditions are checked in this
    order (docs/read-models.md):

    1. standard mode, or a stored status other than bidding/building, or no submission
       deadline: the stored status;
    2. ``now <= submission deadline``: the stored status (bidding stays bidding);
    3. no submissions (count 0 or unknown): ``failed`` when stored bidding (only the owner's
       cancel/refund remains), otherwise the stored status;
    4. ``now <= owner response deadline`` (or that deadline unknown): ``building`` (the owner
       selection phase, entered implicitly);
    5. ``now <= owner response deadline + 5 days``: ``dispute`` (verifier-signed fallback);
    6. later: ``failed`` (anyone may settle: fails and refunds).
    """
    status: ProjectStatus = row.status  # type: ignore[assignment]  # CHECK-constrained
    submission_deadline = row.challenge_submission_deadline
    if (
        row.project_mode != "challenge"
        or status not in _DEADLINE_DRIVEN
        or submission_deadline is None
    ):
        return status
    if now <= submission_deadline:
        return status
    if not row.challenge_submission_count:
        return "failed" if status == "bidding" else status
    response_deadline = row.challenge_owner_response_deadline
    if response_deadline is None or now <= response_deadline:
        return "building"
    if now <= response_deadline + CHALLENGE_FALLBACK_SECONDS:
        return "dispute"
    return "failed"


# --- rows to API shapes -------------------------------------------------------------------------
#
# Rows come from our own tables, whose CHECK constraints and the indexer already guarantee the
# formats (lower-case hex addresses and hashes, enums), so the models are built with
# ``model_construct`` instead of being validated field by field: validation spent most of a page's
# mapping time re-checksumming the same addresses (bench/README.md, "Read throughput"). The
# conversions validation would have done are done here: EIP-55 checksums (memoised), USDC and
# Unix values as decimal strings. The API tests validate every response body against these
# models, so a mapping slip still fails loudly there.


# EIP-55 form of a lower-case address (memoised: owners and builders repeat a lot).
checksum = checksum_address


def _address(value: str | None) -> str | None:
    return None if value is None else checksum(value)


def _usdc(value: Decimal | int | None) -> str | None:
    # numeric(78, 0) arrives as Decimal; int() avoids exponent forms such as "1E+3".
    return None if value is None else str(int(value))


def _unix(value: int | None) -> str | None:
    return None if value is None else str(value)


M = TypeVar("M", bound=BaseModel)


def trusted_constructor(cls: type[M]) -> Callable[..., M]:
    """A constructor that does what ``cls.model_construct(**values)`` does when every field is
    passed by name, without its per-field alias and default handling (which cost as much as the
    rest of the mapping). Only for models without aliases, extras, private attributes or
    post-init hooks; checked here, and a unit test checks the result equals model_construct's.
    """
    if (
        any(f.alias or f.validation_alias for f in cls.model_fields.values())
        or cls.model_config.get("extra") == "allow"
        or cls.__pydantic_post_init__
        or cls.__private_attributes__
        or cls.__pydantic_root_model__
    ):
        raise TypeError(f"{cls.__name__} needs model_construct")
    fields = frozenset(cls.model_fields)
    new = cls.__new__
    setattr_ = object.__setattr__

    def construct(**values: Any) -> M:
        if values.keys() != fields:
            raise TypeError(f"{cls.__name__}: pass exactly its fields")
        instance = new(cls)
        setattr_(instance, "__dict__", values)
        setattr_(instance, "__pydantic_fields_set__", set(fields))
        setattr_(instance, "__pydantic_extra__", None)
        setattr_(instance, "__pydantic_private__", None)
        return instance

    return construct


_construct_milestone = trusted_constructor(MilestoneReadModel)
_construct_project = trusted_constructor(ProjectReadModel)


def milestone_model(
    values: MilestoneValues, check_policy_id: PolicyId | None = None
) -> MilestoneReadModel:
    """A milestone from one element of the ``milestones`` aggregate (MILESTONE_FIELDS order),
    with the acceptance policy the owner fixed for it (None: none)."""
    (
        index,
        status,
        payout,
        deadline_at,
        approved_at,
        resolved_at,
        submitted_at,
        delivery_ref_hash,
        latest_evidence_hash,
        job_id,
        passes,
        attested,
    ) = values
    return _construct_milestone(
        milestoneIndex=index,
        status=status,
        payoutUSDC=_usdc(payout),
        deadlineAt=deadline_at,
        approvedAt=approved_at,
        resolvedAt=resolved_at,
        submittedAt=submitted_at,
        deliveryRefHash=delivery_ref_hash,
        latestEvidenceHash=latest_evidence_hash,
        latestVerifierJobId=job_id,
        latestVerifierPasses=passes,
        attestedOnChain=attested,
        checkPolicyId=check_policy(check_policy_id),
    )


def milestone_policies(row: ProjectReadRow) -> list[MilestonePolicy]:
    """The claimed metadata's acceptance policies (stored ordered by index)."""
    stored = row.milestone_policies or []
    return [
        MilestonePolicy.model_construct(
            milestoneIndex=item["milestoneIndex"], checkPolicyId=PolicyId(item["checkPolicyId"])
        )
        for item in stored
    ]


def project_model(
    row: ProjectReadRow, now: int, *, viewer_can_edit: bool | None = None
) -> ProjectReadModel:
    """The read model of one row of the project statements in ``repositories/projects.py``.

    ``viewer_can_edit`` is only given on detail reads by an authenticated caller; otherwise the
    field is left out of the response.
    """
    challenge = row.project_mode == "challenge"
    policies = milestone_policies(row)
    by_index = {p.milestoneIndex: p.checkPolicyId for p in policies}
    return _construct_project(
        projectAddress=checksum(row.project_address),
        ownerAddress=checksum(row.owner_address),
        status=row.status,
        effectiveStatus=effective_status(row, now),
        projectMode=row.project_mode,
        biddingAccess=row.bidding_access,
        title=row.title,
        description=row.description,
        imageUrl=row.image_url,
        repoUrl=row.repo_url,
        viewerCanEditMetadata=viewer_can_edit,
        configHash=row.config_hash,
        selectedBuilderAddress=_address(row.selected_builder_address),
        createdAt=row.created_at,
        updatedAt=row.updated_at,
        milestoneCount=row.milestone_count,
        bidBondUSDC=_usdc(row.bid_bond_usdc),
        challengePayoutUSDC=_usdc(row.challenge_payout_usdc),
        challengeSubmissionCount=(row.challenge_submission_count or 0) if challenge else None,
        challengeSubmissionWindowSeconds=row.challenge_submission_window_seconds,
        challengeOwnerResponseWindowSeconds=row.challenge_owner_response_window_seconds,
        challengeSubmissionDeadline=_unix(row.challenge_submission_deadline),
        challengeOwnerResponseDeadline=_unix(row.challenge_owner_response_deadline),
        disputePhase=row.dispute_phase,
        disputeReason=row.dispute_reason,
        disputeRaisedBy=_address(row.dispute_raised_by),
        disputeMilestoneIndex=row.dispute_milestone_index,
        disputeOpenedAt=_unix(row.dispute_opened_at),
        disputeVerdictSubmittedAt=_unix(row.dispute_verdict_submitted_at),
        disputeOwnerEvidenceHash=row.dispute_owner_evidence_hash,
        disputeWorkerEvidenceHash=row.dispute_worker_evidence_hash,
        milestonePolicies=policies,
        milestones=[milestone_model(m, by_index.get(m[0])) for m in row.milestones],
    )


def viewer_can_edit_metadata(row: ProjectReadRow) -> bool:
    """Detail reads by an authenticated caller: an active link to the owner wallet and a stored
    status of draft."""
    return bool(row.viewer_is_owner) and row.status == "draft"


# --- listing cursor -------------------------------------------------------------------------------

# The position (created_block, created_log_index) of the last project of a page; the columns are
# bigint and integer, which bound the parts a cursor may carry.
PROJECT_LIST_CURSOR = CursorKind("p1", (BIGINT_MAX, INTEGER_MAX))


async def project_for_viewer(
    conn: asyncpg.Pool | Connection, viewer: uuid.UUID | None, project_address: str
) -> ProjectReadModel | None:
    """The project as ``viewer`` (None: anonymous) may see it, or None when it is unknown or
    hidden; ``viewerCanEditMetadata`` is set only for an authenticated viewer."""
    row = await projects_repo.get_project(conn, viewer=viewer, project_address=project_address)
    if row is None:
        return None
    can_edit = viewer_can_edit_metadata(row) if viewer is not None else None
    return project_model(row, int(time.time()), viewer_can_edit=can_edit)
