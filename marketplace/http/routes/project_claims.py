"""Project creation support: create intents, claims and metadata edits (spec section 4,
"Project creation"). Claims and edits run on the project's shard actor, its single writer."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, RootModel, Tag

from marketplace.errors import Forbidden, InvalidRequest, NotFound
from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.projects.claims import (
    INTENT_VERSION,
    IntentNotFound,
    MetadataLocked,
    ProjectClaimConflict,
    ProjectNotClaimed,
    cancel_intent,
    claim_project,
    create_intent,
    patch_metadata,
)
from marketplace.projects.models import ProjectPath, ProjectReadModel
from marketplace.projects.read_models import project_for_viewer
from marketplace.types import (
    Address,
    Bytes32,
    HttpsOrIpfsUri,
    QueryModel,
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


IMAGE_URL_DESCRIPTION = (
    "our extension: the project's image, an `https://` or `ipfs://` URI of at most 1024 "
    "characters; not part of any hash preimage"
)


class ProjectClaimMetadata(RequestModel):
    title: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    repoUrl: str | None = Field(default=None, max_length=1024)
    projectMode: Literal["standard", "challenge"]
    biddingAccess: Literal["invite_only", "open"]
    imageUrl: HttpsOrIpfsUri | None = Field(default=None, description=IMAGE_URL_DESCRIPTION)


class IntentClaimRequest(RequestModel):
    mode: Literal["intent"]
    hashVersion: Literal["v1_intent"]
    intentId: uuid.UUID
    intentNonce: Bytes32
    txHash: Bytes32
    metadata: ProjectClaimMetadata


class DirectClaimRequest(RequestModel):
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
    """PATCH semantics: `title` is required; `description` and `imageUrl` left out keep their
    stored value, and `null` clears them."""

    title: str = Field(min_length=1, max_length=200)
    description: str | None = Field(
        default=None, max_length=2000, description="omitted: unchanged; null: cleared"
    )
    imageUrl: HttpsOrIpfsUri | None = Field(
        default=None, description=f"omitted: unchanged; null: cleared; {IMAGE_URL_DESCRIPTION}"
    )


class IntentPath(QueryModel):
    intentId: uuid.UUID


class ProjectCreateIntentCancelResponse(ResponseModel):
    """The withdrawn intent: a claim naming it now answers `project_create_intent_not_pending`."""

    intentId: uuid.UUID
    status: Literal["cancelled"]
    cancelledAt: datetime


@routes.post(
    "/v1/projects/create-intents",
    name="createProjectCreateIntent",
    summary="Take a create intent before creating a project on chain (session path)",
    auth=AuthMode.SESSION,
    guarded=True,
    body=ProjectCreateIntentRequest,
    response=ProjectCreateIntentResponse,
    status=201,
)
async def post_create_intent(
    call: Call[ProjectCreateIntentRequest, None, None],
) -> ProjectCreateIntentResponse:
    principal = call.require_principal()
    row = await create_intent(
        call.pool, principal.user_id, call.settings.project_create_intent_ttl_seconds
    )
    return ProjectCreateIntentResponse(
        intentId=row["intent_id"],
        intentNonce=row["intent_nonce"],
        expiresAt=row["expires_at"],
        version=INTENT_VERSION,
    )


@routes.delete(
    "/v1/projects/create-intents/{intentId}",
    name="cancelProjectCreateIntent",
    summary="Withdraw one of your pending create intents",
    auth=AuthMode.EITHER,
    guarded=True,
    path_params=IntentPath,
    response=ProjectCreateIntentCancelResponse,
    errors=(IntentNotFound, ProjectClaimConflict),
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
    return ProjectCreateIntentCancelResponse(
        intentId=row["intent_id"], status="cancelled", cancelledAt=row["cancelled_at"]
    )


async def _project_view(
    call: Call[Any, None, ProjectPath], address: str
) -> ProjectReadModel | None:
    viewer = call.principal.user_id if call.principal is not None else None
    return await project_for_viewer(call.pool, viewer, address)


@routes.post(
    "/v1/projects/{projectAddress}/claim",
    name="claimProject",
    summary="Bind off-chain metadata to an on-chain project creation",
    auth=AuthMode.EITHER,
    guarded=True,
    path_params=ProjectPath,
    body=ProjectClaimRequest,
    response=ProjectClaimResponse,
    errors=(ProjectClaimConflict,),
    exclude_none=True,
    description=(
        "Session callers claim in intent mode, agent-key callers in direct mode. The server "
        "finds the transaction receipt, requires it successful and final, finds the registry's "
        "ProjectCreated event for this project, requires its owner to be a wallet actively "
        "linked to the caller, recomputes configHash (docs/claims.md) and compares. Conflicts "
        "are 409 with one of the section 7 claim codes as `error`. Metadata is `queued` until "
        "the project is indexed."
    ),
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
    address = call.path.projectAddress.lower()
    payload = claim.model_dump(mode="json")
    payload["userId"] = str(principal.user_id)
    result = await call.app[keys.PROJECT_SHARDS].mutate(address, claim_project, payload)
    return ProjectClaimResponse(**result, project=await _project_view(call, address))


@routes.patch(
    "/v1/projects/{projectAddress}/metadata",
    name="patchProjectMetadata",
    summary="Edit the claimed title and description (owner, draft only)",
    auth=AuthMode.EITHER,
    guarded=True,
    path_params=ProjectPath,
    body=MetadataPatchRequest,
    response=ProjectReadModel,
    errors=(NotFound, Forbidden, ProjectNotClaimed, MetadataLocked),
    exclude_none=True,
    description=(
        "Needs an active link to the current owner wallet; only after the claim; 404 while the "
        "project is not indexed; only while the project is in draft (409 `metadata_locked`)."
    ),
)
async def patch_project_metadata(
    call: Call[MetadataPatchRequest, None, ProjectPath],
) -> ProjectReadModel:
    principal = call.require_principal()
    address = call.path.projectAddress.lower()
    # Only the fields the client sent: an omitted one stays as it is.
    payload = {
        **call.body.model_dump(mode="json", include=call.body.model_fields_set | {"title"}),
        "userId": str(principal.user_id),
    }
    await call.app[keys.PROJECT_SHARDS].mutate(address, patch_metadata, payload)
    project = await _project_view(call, address)
    if project is None:
        raise NotFound("project not found")
    return project
