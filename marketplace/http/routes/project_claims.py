"""Project creation support: create intents, claims and metadata edits (spec section 4,
"Project creation"). Claims and edits run on the project's shard actor, its single writer."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal, NotRequired, Self, TypedDict, cast

from pydantic import AfterValidator, ConfigDict, Discriminator, Field, RootModel, Tag

from marketplace.chain.hashes import INTENT_DOMAIN, direct_config_hash, intent_config_hash
from marketplace.chain.hashes import intent_hash as intent_hash_of
from marketplace.chain.hashes import metadata_hash as metadata_hash_of
from marketplace.errors import Forbidden, InvalidRequest, NotFound
from marketplace.http import keys
from marketplace.http.openapi import documented
from marketplace.http.paths import IntentPath, ProjectPath
from marketplace.http.read_cache import invalidate_local_write
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.projects.claims import (
    INTENT_VERSION,
    UNCHANGED,
    ClaimIntent,
    ClaimMetadata,
    ClaimProject,
    IntentNotFound,
    MetadataFrozen,
    MetadataLocked,
    PatchMetadata,
    ProjectClaimConflict,
    ProjectNotClaimed,
    cancel_intent,
    create_intent,
)
from marketplace.projects.models import (
    MILESTONE_POLICIES_MAX,
    MilestonePolicy,
    ProjectReadModel,
    check_unique_indexes,
)
from marketplace.projects.read_models import project_for_viewer
from marketplace.records.errors import ProjectNotFound
from marketplace.storage.repositories.claims import CancelledIntentRow, NewIntentRow
from marketplace.types import (
    Address,
    Bytes32,
    HttpsOrIpfsUri,
    JsonObject,
    RequestModel,
    ResponseModel,
)

routes = RouteTable(tag="project-creation")


class ProjectCreateIntentRequest(RequestModel):
    """No fields are accepted: send `{}` (an empty body counts as `{}`)."""


class ProjectCreateIntentResponse(ResponseModel):
    """A pending create intent: put intentId and intentNonce into the configHash preimage."""

    intentId: uuid.UUID
    intentNonce: Bytes32
    expiresAt: datetime
    version: Literal["project_create_intent_v1"]

    @classmethod
    def from_row(cls, row: NewIntentRow) -> Self:
        return cls(
            intentId=row.intent_id,
            intentNonce=row.intent_nonce,
            expiresAt=row.expires_at,
            version=INTENT_VERSION,
        )


IMAGE_URL_DESCRIPTION = (
    "our extension: the project's image, an `https://` or `ipfs://` URI of at most 1024 "
    "characters; not part of any hash preimage"
)


MILESTONE_POLICIES_DESCRIPTION = (
    "the acceptance policy of each milestone (`[{milestoneIndex, checkPolicyId}]`, at most one "
    "per index, at most 100): the only check a verifier verdict on a dispute over that "
    "milestone may run. Settable only while the project is `draft` on chain and in the read "
    "model (409 `metadata_frozen` afterwards); not part of the configHash"
)
MilestonePolicies = Annotated[
    list[MilestonePolicy],
    Field(max_length=MILESTONE_POLICIES_MAX),
    AfterValidator(check_unique_indexes),
]


class ProjectClaimMetadata(RequestModel):
    title: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    repoUrl: str | None = Field(default=None, max_length=1024)
    projectMode: Literal["standard", "challenge"]
    biddingAccess: Literal["invite_only", "open"]
    imageUrl: HttpsOrIpfsUri | None = Field(default=None, description=IMAGE_URL_DESCRIPTION)
    milestonePolicies: MilestonePolicies | None = Field(
        default=None, description=MILESTONE_POLICIES_DESCRIPTION
    )


# The worked example of the hash rules, shown as the claim's request examples. docs/hashes.md
# gives the same inputs and hashes; a test keeps the two in step.
EXAMPLE_USER_ID = "3fa85f64-5717-4562-b3fc-2c963f66afa6"


class _ExampleMetadata(TypedDict):
    title: str
    description: NotRequired[str]
    repoUrl: NotRequired[str]
    projectMode: str
    biddingAccess: str


class _ExampleClaim(TypedDict):
    mode: str
    hashVersion: str
    intentId: NotRequired[str]  # intent claims only
    intentNonce: NotRequired[str]  # intent claims only
    txHash: str
    metadata: _ExampleMetadata


EXAMPLE_INTENT_CLAIM: _ExampleClaim = {
    "mode": "intent",
    "hashVersion": "v1_intent",
    "intentId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "intentNonce": "0xb88ebf7eb26a6d712085994d2d719fcfe77d278221c13e39cf4bc653908f861e",
    "txHash": "0x9a1f5a4b0e3c7d2e8f6b5a4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e",
    "metadata": {
        "title": "Port the indexer to Rust",
        "description": "Keep the public API; add benchmarks.",
        "repoUrl": "https://git.example/indexer",
        "projectMode": "standard",
        "biddingAccess": "open",
    },
}
EXAMPLE_DIRECT_CLAIM: _ExampleClaim = {
    "mode": "direct",
    "hashVersion": "v1_direct",
    "txHash": "0x4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e5d",
    "metadata": {
        "title": "Audit the escrow contract",
        "projectMode": "challenge",
        "biddingAccess": "invite_only",
    },
}


def policy_pairs(policies: list[MilestonePolicy] | None) -> tuple[tuple[int, str], ...]:
    return tuple((p.milestoneIndex, p.checkPolicyId.value) for p in policies or [])


def _metadata_args(example: _ExampleClaim) -> tuple[str, str | None, str | None, str, str]:
    meta = example["metadata"]
    return (
        meta["title"],
        meta.get("description"),
        meta.get("repoUrl"),
        meta["projectMode"],
        meta["biddingAccess"],
    )


EXAMPLE_HASHES = {
    "metadataHash": metadata_hash_of(*_metadata_args(EXAMPLE_INTENT_CLAIM)),
    "intentHash": intent_hash_of(
        uuid.UUID(EXAMPLE_USER_ID),
        uuid.UUID(EXAMPLE_INTENT_CLAIM["intentId"]),
        EXAMPLE_INTENT_CLAIM["intentNonce"],
    ),
    "configHash": intent_config_hash(
        *_metadata_args(EXAMPLE_INTENT_CLAIM),
        user_id=uuid.UUID(EXAMPLE_USER_ID),
        intent_id=uuid.UUID(EXAMPLE_INTENT_CLAIM["intentId"]),
        intent_nonce=EXAMPLE_INTENT_CLAIM["intentNonce"],
    ),
    "directConfigHash": direct_config_hash(*_metadata_args(EXAMPLE_DIRECT_CLAIM)),
}


class IntentClaimRequest(RequestModel):
    """Intent mode: session callers, with the create intent the project was created with."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [cast(JsonObject, EXAMPLE_INTENT_CLAIM)]}
    )
    mode: Literal["intent"]
    hashVersion: Literal["v1_intent"]
    intentId: uuid.UUID
    intentNonce: Bytes32
    txHash: Bytes32
    metadata: ProjectClaimMetadata


class DirectClaimRequest(RequestModel):
    """Direct mode: agent-key callers."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [cast(JsonObject, EXAMPLE_DIRECT_CLAIM)]}
    )
    mode: Literal["direct"]
    hashVersion: Literal["v1_direct"]
    txHash: Bytes32
    metadata: ProjectClaimMetadata


CLAIM_MODE_MESSAGE = (
    'the body must be a JSON object whose `mode` is "intent" (session callers, with '
    'hashVersion "v1_intent", intentId, intentNonce, txHash, metadata) or "direct" (agent-key '
    'callers, with hashVersion "v1_direct", txHash, metadata)'
)


def _claim_mode(value: Any) -> str | None:
    mode = value.get("mode") if isinstance(value, dict) else getattr(value, "mode", None)
    return mode if mode in ("intent", "direct") else None


class ProjectClaimRequest(
    RootModel[
        Annotated[
            Annotated[IntentClaimRequest, Tag("intent")]
            | Annotated[DirectClaimRequest, Tag("direct")],
            Discriminator(
                _claim_mode,
                custom_error_type="invalid_claim_mode",
                custom_error_message=CLAIM_MODE_MESSAGE,
            ),
        ]
    ]
):
    """Intent mode (session callers) or direct mode (agent-key callers), told apart by `mode`."""


class ProjectClaimResponse(ResponseModel):
    """The claim outcome; `project` is present once the project is indexed."""

    status: Literal["claimed", "already_claimed"]
    metadataStatus: Literal["updated", "queued"]
    projectAddress: Address
    ownerWalletAddress: Address
    project: ProjectReadModel | None = None


class MetadataPatchRequest(RequestModel):
    """PATCH semantics: `title` is required; `description`, `imageUrl` and `milestonePolicies`
    left out keep their stored value, and `null` clears them."""

    title: str = Field(min_length=1, max_length=200)
    description: str | None = Field(
        default=None, max_length=2000, description="omitted: unchanged; null: cleared"
    )
    imageUrl: HttpsOrIpfsUri | None = Field(
        default=None, description=f"omitted: unchanged; null: cleared; {IMAGE_URL_DESCRIPTION}"
    )
    milestonePolicies: MilestonePolicies | None = Field(
        default=None,
        description=f"omitted: unchanged; null or []: cleared; {MILESTONE_POLICIES_DESCRIPTION}",
    )


class ProjectCreateIntentCancelResponse(ResponseModel):
    """The withdrawn intent: a claim naming it now answers `project_create_intent_not_pending`."""

    intentId: uuid.UUID
    status: Literal["cancelled"]
    cancelledAt: datetime

    @classmethod
    def from_row(cls, row: CancelledIntentRow) -> Self:
        return cls(intentId=row.intent_id, status="cancelled", cancelledAt=row.cancelled_at)


@routes.post(
    "/v1/projects/create-intents",
    name="createProjectCreateIntent",
    idempotent=True,
    summary="Take a create intent before creating a project on chain (session path)",
    auth=AuthMode.SESSION,
    guarded=True,
    body=ProjectCreateIntentRequest,
    response=ProjectCreateIntentResponse,
    status=201,
    description=(
        "The first step of the session path: take an intent, compute the project's "
        "`configHash` in intent mode with its `intentId` and `intentNonce` (the rules are in "
        "the claim operation's description), create the project on chain with that hash before "
        "`expiresAt`, then claim it with `POST /v1/projects/{projectAddress}/claim`. The body "
        "has no fields: send `{}` or no body at all (an empty or blank body counts as `{}`, "
        "with or without a `Content-Type`); any field, or JSON that is not an object, is 400 "
        "`invalid_request`. Session only: agent keys claim in direct mode and need no "
        "intent (403 `forbidden`). Each call issues a new intent; an unused one can be "
        "withdrawn with `DELETE /v1/projects/create-intents/{intentId}`."
    ),
)
async def post_create_intent(
    call: Call[ProjectCreateIntentRequest, None, None],
) -> ProjectCreateIntentResponse:
    principal = call.require_principal()
    row = await create_intent(
        call.pool, principal.user_id, call.settings.project_create_intent_ttl_seconds
    )
    return ProjectCreateIntentResponse.from_row(row)


@routes.delete(
    "/v1/projects/create-intents/{intentId}",
    name="cancelProjectCreateIntent",
    summary="Withdraw one of your pending create intents",
    auth=AuthMode.EITHER,
    guarded=True,
    path_params=IntentPath,
    response=ProjectCreateIntentCancelResponse,
    errors=(IntentNotFound, documented(ProjectClaimConflict, "project_create_intent_not_pending")),
)
async def delete_create_intent(
    call: Call[None, None, IntentPath],
) -> ProjectCreateIntentCancelResponse:
    """Withdraws a pending intent of the caller (idempotent: withdrawing it again answers the same
    record). A claim naming a withdrawn intent answers 409 `project_create_intent_not_pending`.
    An intent already used by a claim cannot be withdrawn (409
    `project_create_intent_not_pending`); an unknown intent and someone else's both answer 404
    `project_create_intent_not_found`."""
    principal = call.require_principal()
    row = await cancel_intent(call.pool, principal.user_id, call.path.intentId)
    return ProjectCreateIntentCancelResponse.from_row(row)


async def _project_view(
    call: Call[Any, None, ProjectPath], address: str
) -> ProjectReadModel | None:
    viewer = call.principal.user_id if call.principal is not None else None
    return await project_for_viewer(call.pool, viewer, address)


CLAIM_CHECKS = (
    ("a receipt exists for `txHash`", "tx_not_found"),
    ("the receipt's status is success", "tx_failed"),
    (
        "its block is still canonical and has the configured number of confirmations (the "
        "block itself counts as one)",
        "tx_not_finalized",
    ),
    (
        "the receipt holds a `ProjectCreated` log of the configured registry for this project",
        "project_created_event_not_found",
    ),
    ("the event's owner is a wallet actively linked to the caller", "owner_mismatch"),
    (
        "intent mode: an intent with this `intentId` and `intentNonce` exists",
        "project_create_intent_not_found",
    ),
    ("... it was issued to the caller", "project_create_intent_owner_mismatch"),
    ("... it is not already bound to a different project", "project_create_intent_already_used"),
    (
        "... it is pending (or bound to this same project, for a repeated claim), not withdrawn",
        "project_create_intent_not_pending",
    ),
    (
        "the creation block is not older than the intent (minus the clock-skew allowance)",
        "intent_not_claimable",
    ),
    (
        "the creation block is not newer than the intent's expiry (plus the allowance)",
        "intent_expired_pre_create",
    ),
    ("`configHash` recomputed from this body equals the event's", "config_hash_mismatch"),
    (
        "intent mode: no other indexed project was created on chain with the same `configHash`",
        "intent_already_used",
    ),
    ("`projectMode` and `biddingAccess` agree with the indexed project", "conflict"),
    (
        "the project has no claim yet, or the same one (same user, transaction and hash; "
        "then 200 `already_claimed`)",
        "conflict",
    ),
    (
        "a new claim carrying `milestonePolicies`: the project is still `draft` on chain "
        "(acceptance policies are fixed before bidding opens)",
        "metadata_frozen",
    ),
)
CLAIM_DESCRIPTION = (
    f"""
Binds the off-chain metadata to the project's creation on chain. Call it once the creation
transaction is mined and final; repeating the same claim is safe (200 `already_claimed`).

**Mode.** Session callers claim in intent mode: `mode: "intent"`, `hashVersion: "v1_intent"`, and
the `intentId` and `intentNonce` of a create intent (`POST /v1/projects/create-intents`) taken
*before* the project was created with it. Agent-key callers claim in direct mode: `mode:
"direct"`, `hashVersion: "v1_direct"`. The other mode is 400 `invalid_request`.

**Hash rules.** The project must be created on chain with the `configHash` computed from this
body; the server recomputes it and compares. `H` is keccak256 and `abi.encode` is Solidity's
standard ABI encoding of the listed types, in this order:

- `metadataHash = H(abi.encode(string title, string description, string repoUrl, string
  projectMode, string biddingAccess))`; an absent `description` or `repoUrl` is encoded as the
  empty string `""`. `imageUrl` and `milestonePolicies` are in no preimage.
- direct mode: `configHash = metadataHash`.
- intent mode: `intentHash = H(abi.encode(string "{INTENT_DOMAIN}", string userId, string
  intentId, bytes32 intentNonce))`, where `userId` is the session token's `sub` and both uuids are
  written as lower-case hyphenated text (`3fa85f64-5717-4562-b3fc-2c963f66afa6`); then `configHash
  = H(abi.encode(bytes32 metadataHash, bytes32 intentHash))`.

**Worked example** (the two request examples below): for `userId` `{EXAMPLE_USER_ID}`, the
intent-mode example has `metadataHash` `{EXAMPLE_HASHES["metadataHash"]}`, `intentHash`
`{EXAMPLE_HASHES["intentHash"]}` and `configHash` `{EXAMPLE_HASHES["configHash"]}`; the direct-mode
example (no description, no repoUrl) has `configHash` `{EXAMPLE_HASHES["directConfigHash"]}`.

**Checks, in order.** Each failure is 409 with this `error`:

| # | Check | `error` |
|---|---|---|
"""
    + "\n".join(
        f"| {number} | {check} | `{code}` |" for number, (check, code) in enumerate(CLAIM_CHECKS, 1)
    )
    + """

**Answer.** `status` is `claimed`, or `already_claimed` when this same claim was made before.
`metadataStatus` is `queued` until the indexer has seen the project (its title and description
show once it has), then `updated`, and the `project` read model is included.
"""
)


@routes.post(
    "/v1/projects/{projectAddress}/claim",
    name="claimProject",
    summary="Bind off-chain metadata to an on-chain project creation",
    auth=AuthMode.EITHER,
    guarded=True,
    path_params=ProjectPath,
    body=ProjectClaimRequest,
    response=ProjectClaimResponse,
    errors=(ProjectClaimConflict, MetadataFrozen),
    exclude_none=True,
    description=CLAIM_DESCRIPTION,
)
async def post_claim(call: Call[ProjectClaimRequest, None, ProjectPath]) -> ProjectClaimResponse:
    principal = call.require_principal()
    claim = call.body.root
    expected_mode = "intent" if principal.has_session else "direct"
    if claim.mode != expected_mode:
        raise InvalidRequest(
            f"{'session' if principal.has_session else 'agent key'} callers claim in "
            f"{expected_mode} mode (spec section 4, claim rule 1)",
            [
                {
                    "location": "body",
                    "field": "mode",
                    "message": f"must be {expected_mode!r}",
                    "type": "literal_error",
                }
            ],
        )
    address = call.path.projectAddress
    meta = claim.metadata
    command = ClaimProject(
        project_address=address,
        user_id=principal.user_id,
        hash_version=claim.hashVersion,
        tx_hash=claim.txHash,
        metadata=ClaimMetadata(
            title=meta.title,
            description=meta.description,
            repo_url=meta.repoUrl,
            image_url=meta.imageUrl,
            project_mode=meta.projectMode,
            bidding_access=meta.biddingAccess,
            milestone_policies=policy_pairs(meta.milestonePolicies),
        ),
        intent=(
            ClaimIntent(claim.intentId, claim.intentNonce)
            if isinstance(claim, IntentClaimRequest)
            else None
        ),
    )
    outcome = await call.app[keys.PROJECT_SHARDS].run(command)
    invalidate_local_write(call.app, address)
    return ProjectClaimResponse(
        status=outcome.status,
        metadataStatus=outcome.metadata_status,
        projectAddress=outcome.project_address,
        ownerWalletAddress=outcome.owner_wallet_address,
        project=await _project_view(call, address),
    )


@routes.patch(
    "/v1/projects/{projectAddress}/metadata",
    name="patchProjectMetadata",
    summary="Edit the claimed title and description (owner, draft only)",
    auth=AuthMode.EITHER,
    guarded=True,
    path_params=ProjectPath,
    body=MetadataPatchRequest,
    response=ProjectReadModel,
    errors=(ProjectNotFound, Forbidden, ProjectNotClaimed, MetadataLocked, MetadataFrozen),
    exclude_none=True,
    description=(
        "PATCH semantics: `title` is required; `description` and `imageUrl` left out keep "
        "their stored value and `null` clears them. The caller needs an active wallet link to "
        "the project's current owner wallet (403 `forbidden`). 404 `project_not_found` while "
        "the project is not indexed yet, and for an invite-only project hidden from the "
        "caller (the same answer, so hidden projects are not revealed); 409 "
        "`project_not_claimed` before the claim; 409 `metadata_locked` once the project has "
        "left `draft` (bidders have priced what the title and description said); 409 "
        "`metadata_frozen` for a request that sets `milestonePolicies` once the project has "
        "left `draft`, on chain or in the read model. Answers the updated project read model."
    ),
)
async def patch_project_metadata(
    call: Call[MetadataPatchRequest, None, ProjectPath],
) -> ProjectReadModel:
    principal = call.require_principal()
    address = call.path.projectAddress
    body = call.body
    # Only the fields the client sent: an omitted one stays as it is.
    sent = body.model_fields_set
    command = PatchMetadata(
        project_address=address,
        user_id=principal.user_id,
        title=body.title,
        description=body.description if "description" in sent else UNCHANGED,
        image_url=body.imageUrl if "imageUrl" in sent else UNCHANGED,
        milestone_policies=(
            policy_pairs(body.milestonePolicies) if "milestonePolicies" in sent else UNCHANGED
        ),
    )
    await call.app[keys.PROJECT_SHARDS].run(command)
    invalidate_local_write(call.app, address)
    project = await _project_view(call, address)
    if project is None:
        raise NotFound("project not found")
    return project
