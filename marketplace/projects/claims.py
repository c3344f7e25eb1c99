"""Create intents, claims and metadata edits (spec sections 1.2, 2 "Project creation and claim",
4 "Project creation", 7 claim conflict codes). Rules are plain functions; ``claim_project`` and
``patch_metadata`` run on the project's shard actor (its single writer).

Order of the claim checks, each with its own code (docs/claims.md explains the near-duplicates):
transaction (``tx_not_found``, ``tx_failed``, ``tx_not_finalized``), creation event
(``project_created_event_not_found``), owner (``owner_mismatch``), intent record
(``project_create_intent_not_found``, ``..._owner_mismatch``, ``..._not_pending``,
``..._already_used``), intent versus creation time (``intent_not_claimable``,
``intent_expired_pre_create``), hash (``config_hash_mismatch``), on-chain reuse of the intent
(``intent_already_used``), and an existing claim (``already_claimed`` or ``conflict``).
"""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import asyncpg

from marketplace.chain.abi import ContractAbi
from marketplace.chain.hashes import direct_config_hash, intent_config_hash
from marketplace.errors import Conflict, Forbidden, NotFound, ServiceUnavailable
from marketplace.records.access import caller_wallets, visible_project
from marketplace.shards import ShardContext
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

    def body(self) -> dict[str, Any]:
        return {"error": self.claim_code, "message": self.message}


class ProjectNotClaimed(Conflict):
    code = "project_not_claimed"
    default_message = "the project has no claimed metadata yet; claim it first"


class MetadataLocked(Conflict):
    code = "metadata_locked"
    default_message = "metadata can only be edited while the project is in draft"


# --- create intents ----------------------------------------------------------------------------


async def create_intent(pool: asyncpg.Pool, user_id: uuid.UUID, ttl_seconds: int) -> asyncpg.Record:
    nonce = "0x" + secrets.token_bytes(32).hex()
    expires_at = datetime.now(UTC) + timedelta(seconds=ttl_seconds)
    return await repo.insert_intent(pool, uuid.uuid4(), user_id, nonce, expires_at)


class IntentNotFound(NotFound):
    code = "project_create_intent_not_found"
    default_message = "no create intent with this id is yours"


async def cancel_intent(
    pool: asyncpg.Pool, user_id: uuid.UUID, intent_id: uuid.UUID
) -> asyncpg.Record:
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


def expected_config_hash(payload: dict[str, Any]) -> str:
    meta = payload["metadata"]
    fields = (
        meta["title"],
        meta.get("description"),
        meta.get("repoUrl"),
        meta["projectMode"],
        meta["biddingAccess"],
    )
    if payload["mode"] == "direct":
        return direct_config_hash(*fields)
    return intent_config_hash(
        *fields,
        user_id=uuid.UUID(payload["userId"]),
        intent_id=uuid.UUID(payload["intentId"]),
        intent_nonce=payload["intentNonce"],
    )


async def _creation_from_chain(
    ctx: ShardContext, project: str, tx_hash: str
) -> tuple[dict[str, Any], int]:
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
        args = _CREATED.decode_log(entry)
        if args["project"].lower() == project:
            return args, int(block["timestamp"], 16)
    raise ProjectClaimConflict(
        "project_created_event_not_found",
        "the transaction did not create this project through the configured registry",
    )


async def _check_intent(
    conn: Connection,
    payload: dict[str, Any],
    project: str,
    created_ts: int,
    skew: timedelta,
) -> asyncpg.Record:
    intent = await repo.intent_for_update(conn, uuid.UUID(payload["intentId"]))
    if intent is None or intent["intent_nonce"] != payload["intentNonce"].lower():
        raise ProjectClaimConflict(
            "project_create_intent_not_found", "no create intent with this id and nonce"
        )
    if str(intent["user_id"]) != payload["userId"]:
        raise ProjectClaimConflict(
            "project_create_intent_owner_mismatch", "the create intent belongs to another user"
        )
    if intent["status"] == "used" and intent["project_address"] != project:
        raise ProjectClaimConflict(
            "project_create_intent_already_used",
            "the create intent was already used to claim another project",
        )
    if intent["status"] not in ("pending", "used"):
        raise ProjectClaimConflict(
            "project_create_intent_not_pending", f"the create intent is {intent['status']}"
        )
    created_at = datetime.fromtimestamp(created_ts, UTC)
    if created_at < intent["created_at"] - skew:
        raise ProjectClaimConflict(
            "intent_not_claimable", "the project was created before this intent was issued"
        )
    if created_at > intent["expires_at"] + skew:
        raise ProjectClaimConflict(
            "intent_expired_pre_create", "the intent had expired when the project was created"
        )
    return intent


def _same_claim(existing: asyncpg.Record, payload: dict[str, Any], config_hash: str) -> bool:
    # The configHash covers every metadata field (and, in intent mode, the intent), so equal
    # hashes from the same user and transaction mean the same claim.
    return (
        str(existing["claimed_by"]) == payload["userId"]
        and existing["config_hash"] == config_hash
        and existing["tx_hash"] == payload["txHash"].lower()
    )


async def claim_project(ctx: ShardContext, project: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Bind off-chain metadata to an on-chain creation; see the module docstring."""
    args, created_ts = await _creation_from_chain(ctx, project, payload["txHash"])
    owner = args["owner"].lower()
    event_hash = args["configHash"].lower()
    user_id = uuid.UUID(payload["userId"])
    config_hash = expected_config_hash(payload)
    meta = payload["metadata"]
    async with ctx.pool.acquire() as conn, conn.transaction():
        if not await wallet_links.is_active_link(conn, user_id, owner):
            raise ProjectClaimConflict(
                "owner_mismatch", "the project owner is not a wallet actively linked to you"
            )
        intent = None
        if payload["mode"] == "intent":
            skew = timedelta(seconds=ctx.settings.chain_clock_skew_seconds)
            intent = await _check_intent(conn, payload, project, created_ts, skew)
        if config_hash != event_hash:
            raise ProjectClaimConflict(
                "config_hash_mismatch",
                "the configHash recomputed from the claim differs from the on-chain one",
            )
        if intent is not None and await repo.other_project_with_config(conn, event_hash, project):
            raise ProjectClaimConflict(
                "intent_already_used", "this intent was used to create another project on chain"
            )
        indexed = await repo.indexed_project(conn, project)
        if indexed is not None and (
            indexed["project_mode"] != meta["projectMode"]
            or indexed["bidding_access"] != meta["biddingAccess"]
        ):
            raise ProjectClaimConflict(
                "conflict", "projectMode or biddingAccess differ from the project on chain"
            )
        existing = await repo.metadata(conn, project)
        if existing is not None:
            if _same_claim(existing, payload, config_hash):
                status = "already_claimed"
            else:
                raise ProjectClaimConflict("conflict", "the project was already claimed")
        else:
            if intent is not None and not await repo.use_intent(conn, intent["intent_id"], project):
                raise ProjectClaimConflict(
                    "project_create_intent_already_used", "the create intent was used meanwhile"
                )
            await repo.insert_metadata(
                conn,
                project_address=project,
                owner_address=owner,
                title=meta["title"],
                description=meta.get("description"),
                repo_url=meta.get("repoUrl"),
                image_url=meta.get("imageUrl"),
                project_mode=meta["projectMode"],
                bidding_access=meta["biddingAccess"],
                claimed_by=user_id,
                claim_mode=payload["mode"],
                hash_version=payload["hashVersion"],
                intent_id=intent["intent_id"] if intent is not None else None,
                tx_hash=payload["txHash"].lower(),
                config_hash=config_hash,
            )
            status = "claimed"
    return {
        "status": status,
        "metadataStatus": "updated" if indexed is not None else "queued",
        "projectAddress": project,
        "ownerWalletAddress": owner,
    }


# --- metadata edits (runs on the shard) ---------------------------------------------------


async def patch_metadata(
    ctx: ShardContext, project: str, payload: dict[str, Any]
) -> dict[str, Any]:
    user_id = uuid.UUID(payload["userId"])
    async with ctx.pool.acquire() as conn, conn.transaction():
        wallets = await caller_wallets(conn, user_id)
        # Not indexed yet and hidden from the caller answer the same 404: the route must not
        # reveal that an invite-only project exists.
        indexed = await visible_project(conn, project, wallets)
        if indexed.owner not in wallets:
            raise Forbidden("only the project owner (an active link to the owner wallet) may edit")
        if await repo.metadata(conn, project) is None:
            raise ProjectNotClaimed()
        if indexed.status not in EDITABLE_STATUSES:
            raise MetadataLocked()
        changes = {
            column: payload[field]
            for field, column in (("description", "description"), ("imageUrl", "image_url"))
            if field in payload
        }
        await repo.update_metadata(conn, project, payload["title"], changes, user_id)
    return {"projectAddress": project}
