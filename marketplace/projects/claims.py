"""Create intents, claims and metadata edits (spec sections 1.2, 2 "Project creation and claim",
4 "Project creation", 7 claim conflict codes). Rules are plain functions; the ``ClaimProject``
and ``PatchMetadata`` shard commands run on the project's shard actor (its single writer).

Order of the claim checks, each with its own code (docs/claims.md explains the near-duplicates):
transaction (``tx_not_found``, ``tx_failed``, ``tx_not_finalized``), creation event
(``project_created_event_not_found``), owner (``owner_mismatch``), intent record
(``project_create_intent_not_found``, ``..._owner_mismatch``, ``..._not_pending``,
``..._already_used``), intent versus creation time (``intent_not_claimable``,
``intent_expired_pre_create``), hash (``config_hash_mismatch``), on-chain reuse of the intent
(``intent_already_used``), and an existing claim (``already_claimed`` or ``conflict``).
"""

from __future__ import annotations

import enum
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, cast

import asyncpg

from marketplace.chain.abi import ContractAbi
from marketplace.chain.enums import ProjectStatus as ChainProjectStatus
from marketplace.chain.hashes import direct_config_hash, intent_config_hash
from marketplace.chain.project_state import ProjectCreated, project_status
from marketplace.chain.rpc import RPC_FAILURES
from marketplace.errors import Conflict, ErrorBody, Forbidden, NotFound, ServiceUnavailable
from marketplace.projects.models import BiddingAccess, ProjectMode
from marketplace.records.access import caller_wallets, visible_project
from marketplace.shards import ProjectCommand, ShardContext
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import claims as repo
from marketplace.storage.repositories import wallet_links

INTENT_VERSION: Final = "project_create_intent_v1"
_CREATED = ContractAbi.load("MarketplaceRegistry").events["ProjectCreated"]
# Statuses in which the owner may still edit the claimed metadata (docs/claims.md).
EDITABLE_STATUSES = frozenset({"draft"})


CLAIM_CONFLICT_CODES = (
    "config_hash_mismatch",
    "conflict",
    "intent_already_used",
    "intent_expired_pre_create",
    "intent_not_claimable",
    "owner_mismatch",
    "project_create_intent_already_used",
    "project_create_intent_not_found",
    "project_create_intent_not_pending",
    "project_create_intent_owner_mismatch",
    "project_created_event_not_found",
    "tx_failed",
    "tx_not_finalized",
    "tx_not_found",
)


class ProjectClaimConflict(Conflict):
    """ProjectClaimConflictError of the spec: ``code`` is one of section 7's claim codes."""

    code = "conflict"
    documented_codes = CLAIM_CONFLICT_CODES

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, {})
        self.claim_code = code

    def body(self) -> ErrorBody:
        return {"error": self.claim_code, "message": self.message}


class ProjectNotClaimed(Conflict):
    code = "project_not_claimed"
    default_message = "the project has no claimed metadata yet; claim it first"


class MetadataLocked(Conflict):
    code = "metadata_locked"
    default_message = "metadata can only be edited while the project is in draft"


class MetadataFrozen(Conflict):
    """Acceptance policies are part of what bidders price: fixed once bidding opens."""

    code = "metadata_frozen"
    default_message = (
        "milestone acceptance policies can only be set while the project is in draft, on "
        "chain and in the read model: bidding has opened"
    )


async def require_draft_on_chain(ctx: ShardContext, project: str) -> None:
    """409 ``metadata_frozen`` unless the chain says the project is still ``draft``: the read
    model may lag behind an ``openBidding`` by an indexer poll, and a policy changed in that
    window would judge bids made against the old one."""
    if ctx.chain is None:
        raise ServiceUnavailable("no chain is configured; acceptance policies cannot be checked")
    try:
        status = await project_status(ctx.chain, project)
    except RPC_FAILURES as exc:
        raise ServiceUnavailable(f"the chain could not be read: {exc}") from exc
    if status is not None and status != ChainProjectStatus.DRAFT:
        raise MetadataFrozen()


def policies_json(policies: tuple[tuple[int, str], ...]) -> list[repo.StoredMilestonePolicy]:
    return [
        repo.StoredMilestonePolicy(milestoneIndex=index, checkPolicyId=policy)
        for index, policy in policies
    ]


# --- create intents ----------------------------------------------------------------------------


async def create_intent(
    pool: asyncpg.Pool, user_id: uuid.UUID, ttl_seconds: int
) -> repo.NewIntentRow:
    nonce = "0x" + secrets.token_bytes(32).hex()
    expires_at = datetime.now(UTC) + timedelta(seconds=ttl_seconds)
    return await repo.insert_intent(pool, uuid.uuid4(), user_id, nonce, expires_at)


class IntentNotFound(NotFound):
    code = "project_create_intent_not_found"
    default_message = "no create intent with this id is yours"


async def cancel_intent(
    pool: asyncpg.Pool, user_id: uuid.UUID, intent_id: uuid.UUID
) -> repo.CancelledIntentRow:
    """Withdraw a pending intent (idempotent). A used intent cannot be withdrawn (409
    ``project_create_intent_not_pending``); someone else's answers like an unknown one (404)."""
    row = await repo.cancel_intent(pool, intent_id, user_id)
    if row is not None:
        return row
    if await repo.own_intent(pool, intent_id, user_id) is None:
        raise IntentNotFound()
    raise ProjectClaimConflict(
        "project_create_intent_not_pending", "the create intent was used by a claim already"
    )


# --- claim (runs on the shard) ------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimMetadata:
    """The claimed metadata; every field but ``image_url`` is in the configHash preimage."""

    title: str
    description: str | None
    repo_url: str | None
    image_url: str | None
    project_mode: ProjectMode
    bidding_access: BiddingAccess
    # (milestoneIndex, checkPolicyId) ordered by index; not in the configHash preimage.
    milestone_policies: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class ClaimIntent:
    """The create intent an intent-mode claim names."""

    intent_id: uuid.UUID
    intent_nonce: str


@dataclass(frozen=True)
class ClaimOutcome:
    status: Literal["claimed", "already_claimed"]
    metadata_status: Literal["updated", "queued"]
    project_address: str
    owner_wallet_address: str


@dataclass(frozen=True)
class ClaimProject(ProjectCommand):
    """Shard command: bind off-chain metadata to an on-chain creation; see the module docstring.

    ``intent`` present: intent mode (session callers); absent: direct mode (agent keys).
    """

    user_id: uuid.UUID
    hash_version: str
    tx_hash: str
    metadata: ClaimMetadata
    intent: ClaimIntent | None = None

    @property
    def mode(self) -> Literal["intent", "direct"]:
        return "direct" if self.intent is None else "intent"

    def expected_config_hash(self) -> str:
        meta = self.metadata
        fields = (
            meta.title,
            meta.description,
            meta.repo_url,
            meta.project_mode,
            meta.bidding_access,
        )
        if self.intent is None:
            return direct_config_hash(*fields)
        return intent_config_hash(
            *fields,
            user_id=self.user_id,
            intent_id=self.intent.intent_id,
            intent_nonce=self.intent.intent_nonce,
        )

    async def apply(self, ctx: ShardContext) -> ClaimOutcome:
        project = self.project_address
        args, created_ts = await _creation_from_chain(ctx, project, self.tx_hash)
        owner = args["owner"].lower()
        event_hash = args["configHash"].lower()
        config_hash = self.expected_config_hash()
        meta = self.metadata
        async with ctx.pool.acquire() as conn, conn.transaction():
            if not await wallet_links.is_active_link(conn, self.user_id, owner):
                raise ProjectClaimConflict(
                    "owner_mismatch", "the project owner is not a wallet actively linked to you"
                )
            intent = None
            if self.intent is not None:
                skew = timedelta(seconds=ctx.settings.chain_clock_skew_seconds)
                intent = await self._check_intent(conn, self.intent, created_ts, skew)
            if config_hash != event_hash:
                raise ProjectClaimConflict(
                    "config_hash_mismatch",
                    "the configHash recomputed from the claim differs from the on-chain one",
                )
            if intent is not None and await repo.other_project_with_config(
                conn, event_hash, project
            ):
                raise ProjectClaimConflict(
                    "intent_already_used", "this intent was used to create another project on chain"
                )
            indexed = await repo.indexed_project(conn, project)
            if indexed is not None and (
                indexed.project_mode != meta.project_mode
                or indexed.bidding_access != meta.bidding_access
            ):
                raise ProjectClaimConflict(
                    "conflict", "projectMode or biddingAccess differ from the project on chain"
                )
            existing = await repo.metadata(conn, project)
            status: Literal["claimed", "already_claimed"]
            if existing is not None:
                if self._same_claim(existing, config_hash):
                    status = "already_claimed"
                else:
                    raise ProjectClaimConflict("conflict", "the project was already claimed")
            else:
                if intent is not None and not await repo.use_intent(
                    conn, intent.intent_id, project
                ):
                    raise ProjectClaimConflict(
                        "project_create_intent_already_used",
                        "the create intent was used meanwhile",
                    )
                if meta.milestone_policies:
                    await require_draft_on_chain(ctx, project)
                await repo.insert_metadata(
                    conn,
                    repo.NewMetadata(
                        project_address=project,
                        owner_address=owner,
                        title=meta.title,
                        description=meta.description,
                        repo_url=meta.repo_url,
                        image_url=meta.image_url,
                        project_mode=meta.project_mode,
                        bidding_access=meta.bidding_access,
                        claimed_by=self.user_id,
                        claim_mode=self.mode,
                        hash_version=self.hash_version,
                        intent_id=intent.intent_id if intent is not None else None,
                        tx_hash=self.tx_hash.lower(),
                        config_hash=config_hash,
                        milestone_policies=policies_json(meta.milestone_policies),
                    ),
                )
                status = "claimed"
        return ClaimOutcome(
            status=status,
            metadata_status="updated" if indexed is not None else "queued",
            project_address=project,
            owner_wallet_address=owner,
        )

    async def _check_intent(
        self, conn: Connection, claimed: ClaimIntent, created_ts: int, skew: timedelta
    ) -> repo.IntentRow:
        intent = await repo.intent_for_update(conn, claimed.intent_id)
        if intent is None or intent.intent_nonce != claimed.intent_nonce.lower():
            raise ProjectClaimConflict(
                "project_create_intent_not_found", "no create intent with this id and nonce"
            )
        if intent.user_id != self.user_id:
            raise ProjectClaimConflict(
                "project_create_intent_owner_mismatch", "the create intent belongs to another user"
            )
        if intent.status == "used" and intent.project_address != self.project_address:
            raise ProjectClaimConflict(
                "project_create_intent_already_used",
                "the create intent was already used to claim another project",
            )
        if intent.status not in ("pending", "used"):
            raise ProjectClaimConflict(
                "project_create_intent_not_pending", f"the create intent is {intent.status}"
            )
        created_at = datetime.fromtimestamp(created_ts, UTC)
        if created_at < intent.created_at - skew:
            raise ProjectClaimConflict(
                "intent_not_claimable", "the project was created before this intent was issued"
            )
        if created_at > intent.expires_at + skew:
            raise ProjectClaimConflict(
                "intent_expired_pre_create", "the intent had expired when the project was created"
            )
        return intent

    def _same_claim(self, existing: repo.MetadataRow, config_hash: str) -> bool:
        # The configHash covers every metadata field (and, in intent mode, the intent), so equal
        # hashes from the same user and transaction mean the same claim.
        return (
            existing.claimed_by == self.user_id
            and existing.config_hash == config_hash
            and existing.tx_hash == self.tx_hash.lower()
        )


async def _creation_from_chain(
    ctx: ShardContext, project: str, tx_hash: str
) -> tuple[ProjectCreated, int]:
    """The ProjectCreated event of ``project`` in ``tx_hash`` and its block's timestamp."""
    if ctx.chain is None:
        raise ServiceUnavailable("no chain is configured; claims cannot be verified")
    receipt = await ctx.chain.call("eth_getTransactionReceipt", [tx_hash])
    if receipt is None:
        raise ProjectClaimConflict("tx_not_found", "no transaction with this hash is mined")
    if int(receipt["status"], 16) != 1:
        raise ProjectClaimConflict("tx_failed", "the creation transaction reverted")
    block_number = int(receipt["blockNumber"], 16)
    head, block = await ctx.chain.batch(
        [("eth_blockNumber", []), ("eth_getBlockByNumber", [hex(block_number), False])]
    )
    depth = int(head, 16) - block_number + 1
    if block is None or block["hash"].lower() != receipt["blockHash"].lower():
        raise ProjectClaimConflict("tx_not_finalized", "the transaction's block was reorganised")
    if depth < ctx.settings.chain_confirmations:
        raise ProjectClaimConflict(
            "tx_not_finalized",
            f"the transaction has {depth} of {ctx.settings.chain_confirmations} confirmations",
        )
    registry = ctx.settings.registry_address.lower()
    for entry in receipt["logs"]:
        if entry["address"].lower() != registry or not entry["topics"]:
            continue
        if entry["topics"][0] != _CREATED.topic0:
            continue
        args = cast(ProjectCreated, _CREATED.decode_log(entry))
        if args["project"].lower() == project:
            return args, int(block["timestamp"], 16)
    raise ProjectClaimConflict(
        "project_created_event_not_found",
        "the transaction did not create this project through the configured registry",
    )


# --- metadata edits (runs on the shard) ---------------------------------------------------


class Unchanged(enum.Enum):
    """A PATCH field the client left out (``None`` clears the stored value instead)."""

    UNCHANGED = "unchanged"


UNCHANGED: Final = Unchanged.UNCHANGED


@dataclass(frozen=True)
class PatchMetadata(ProjectCommand):
    """Shard command: the owner edits the claimed title, description and image while in draft."""

    user_id: uuid.UUID
    title: str
    description: str | Unchanged | None = UNCHANGED
    image_url: str | Unchanged | None = UNCHANGED
    # (milestoneIndex, checkPolicyId) ordered by index; () clears them.
    milestone_policies: tuple[tuple[int, str], ...] | Unchanged = UNCHANGED

    def changes(self) -> repo.MetadataChanges:
        """The optional fields the client sent."""
        description, image_url, policies = self.description, self.image_url, self.milestone_policies
        return repo.MetadataChanges(
            description=None if isinstance(description, Unchanged) else description,
            description_sent=not isinstance(description, Unchanged),
            image_url=None if isinstance(image_url, Unchanged) else image_url,
            image_url_sent=not isinstance(image_url, Unchanged),
            milestone_policies=None if isinstance(policies, Unchanged) else policies_json(policies),
        )

    async def apply(self, ctx: ShardContext) -> None:
        project = self.project_address
        setting_policies = not isinstance(self.milestone_policies, Unchanged)
        async with ctx.pool.acquire() as conn, conn.transaction():
            wallets = await caller_wallets(conn, self.user_id)
            # Not indexed yet and hidden from the caller answer the same 404: the route must not
            # reveal that an invite-only project exists.
            indexed = await visible_project(conn, project, wallets)
            if indexed.owner not in wallets:
                raise Forbidden(
                    "only the project owner (an active link to the owner wallet) may edit"
                )
            if await repo.metadata(conn, project) is None:
                raise ProjectNotClaimed()
            if indexed.status not in EDITABLE_STATUSES:
                raise MetadataFrozen() if setting_policies else MetadataLocked()
            if setting_policies:
                # The read model says draft; the chain, which it may lag, must agree.
                await require_draft_on_chain(ctx, project)
            await repo.update_metadata(conn, project, self.title, self.changes(), self.user_id)
