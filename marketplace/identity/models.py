"""Request and response models of the identity endpoints (spec section 2)."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, Field

from marketplace.config.settings import LegalAcceptanceMode
from marketplace.storage.repositories.api_keys import ApiKeyRow, UsageEntryRow
from marketplace.storage.repositories.legal import AcceptanceRow
from marketplace.storage.repositories.usernames import UsernameRow
from marketplace.storage.repositories.wallet_links import RevokedLinkRow, WalletLinkRow
from marketplace.types import (
    Address,
    HexSignature,
    LowerAddress,
    QueryModel,
    RequestModel,
    ResponseModel,
)

# JavaScript's largest safe integer: chain ids beyond it cannot round-trip through wallets.
MAX_CHAIN_ID = 9_007_199_254_740_991
USERNAME_PATTERN = r"^[a-z0-9_]{3,24}$"
MAX_BATCH_USER_IDS = 200
MAX_GRACE_PERIOD_SECONDS = 7 * 24 * 3600

Username = Annotated[str, Field(pattern=USERNAME_PATTERN, examples=["alice_01"])]


def _omit_none(value: object) -> bool:
    return value is None


# --- wallet links ---------------------------------------------------------------------------


class VerificationMethod(enum.StrEnum):
    EIP191_SIGN_MESSAGE = "eip191_sign_message"
    EIP712_SIGN_TYPED_DATA = "eip712_sign_typed_data"


class WalletLinkChallengeRequest(RequestModel):
    """Ask for a single-use challenge proving control of ``walletAddress``."""

    userId: uuid.UUID | None = Field(
        default=None, description="derived from the authenticated caller; omit it"
    )
    walletAddress: LowerAddress
    chainId: int = Field(ge=1, le=MAX_CHAIN_ID)


class WalletLinkChallengeResponse(ResponseModel):
    """A single-use challenge: sign `message` with EIP-191 personal sign before `expiresAt`."""

    challengeId: uuid.UUID
    userId: uuid.UUID
    walletAddress: Address
    chainId: int
    nonce: str
    message: str = Field(description="EIP-4361 style plaintext to sign, exactly as given")
    expiresAt: datetime


class WalletLinkVerifyRequest(RequestModel):
    """The signed challenge."""

    challengeId: uuid.UUID
    walletAddress: LowerAddress
    signature: HexSignature = Field(description="65-byte EIP-191 personal-sign signature, hex")


class WalletLinkVerifyResponse(ResponseModel):
    """The wallet is now actively linked to the caller."""

    walletAddress: Address
    verifiedAt: datetime
    verificationMethod: VerificationMethod


class WalletLinkRevokeResponse(ResponseModel):
    """The link is revoked (kept as history)."""

    walletAddress: Address
    revokedAt: datetime

    @classmethod
    def from_row(cls, row: RevokedLinkRow) -> Self:
        return cls(walletAddress=row.wallet_address, revokedAt=row.revoked_at)


class WalletLinkItem(ResponseModel):
    walletAddress: Address
    chainId: int
    verifiedAt: datetime
    verificationMethod: VerificationMethod

    @classmethod
    def from_row(cls, row: WalletLinkRow) -> Self:
        return cls(
            walletAddress=row.wallet_address,
            chainId=row.chain_id,
            verifiedAt=row.verified_at,
            verificationMethod=VerificationMethod(row.verification_method),
        )


class WalletLinkListResponse(ResponseModel):
    """The caller's active wallet links."""

    userId: uuid.UUID
    items: list[WalletLinkItem]
    count: int = Field(ge=0)


class UserIdQuery(QueryModel):
    userId: uuid.UUID | None = Field(default=None, description="defaults to the caller; self only")


# --- usernames ------------------------------------------------------------------------------


class UsernameRecord(ResponseModel):
    """A user's username."""

    userId: uuid.UUID
    username: Username
    usernameLower: Username
    createdAt: datetime
    updatedAt: datetime

    @classmethod
    def from_row(cls, row: UsernameRow) -> Self:
        return cls(
            userId=row.user_id,
            username=row.username,
            usernameLower=row.username_lower,
            createdAt=row.created_at,
            updatedAt=row.updated_at,
        )


class UsernameGetResponse(ResponseModel):
    """A user's username; `{userId, username: null}` when none is set."""

    userId: uuid.UUID
    username: str | None
    usernameLower: str | None = Field(default=None, exclude_if=_omit_none)
    createdAt: datetime | None = Field(default=None, exclude_if=_omit_none)
    updatedAt: datetime | None = Field(default=None, exclude_if=_omit_none)

    @classmethod
    def from_row(cls, user_id: uuid.UUID, row: UsernameRow | None) -> Self:
        """``row``: the user's username row, or None when they have none."""
        if row is None:
            return cls(userId=user_id, username=None)
        return cls(**UsernameRecord.from_row(row).model_dump())


class UsernameSetRequest(RequestModel):
    """Set the caller's username (`userId` must be the caller)."""

    userId: uuid.UUID
    username: Username


class UsernameQuery(QueryModel):
    userId: uuid.UUID | None = Field(default=None, description="defaults to the caller")


class UsernameCheckQuery(QueryModel):
    username: str = Field(description="candidate username")


UsernameUnavailableReason = Literal["invalid_format", "taken"]


class UsernameCheckResponse(ResponseModel):
    """Whether the caller could set this username now."""

    username: str
    available: bool
    reason: UsernameUnavailableReason | None = Field(
        default=None, description="why it is not available; null when available"
    )


class UsernameBatchRequest(RequestModel):
    """Look up the usernames of up to 200 users."""

    userIds: list[uuid.UUID] = Field(max_length=MAX_BATCH_USER_IDS)


class UsernameBatchResponse(ResponseModel):
    """Usernames of the requested users that have one."""

    items: list[UsernameRecord]
    count: int = Field(ge=0)


# --- permissions ----------------------------------------------------------------------------


class PermissionFlags(ResponseModel):
    moderationAdmin: bool
    verifierAdmin: bool


class PermissionsResponse(ResponseModel):
    """The caller's permission flags, both nested under `permissions` and flat (spec section 2)."""

    userId: uuid.UUID
    permissions: PermissionFlags
    moderationAdmin: bool
    verifierAdmin: bool


# --- agent API keys -------------------------------------------------------------------------


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("name must not be blank")
    return value


class ApiKeyCreateRequest(RequestModel):
    """Issue a new agent API key for the caller."""

    name: Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_non_blank)]
    userId: uuid.UUID


class ApiKeyRecord(ResponseModel):
    """An agent API key; the secret is never part of it."""

    id: uuid.UUID
    name: str
    userId: uuid.UUID
    keyPrefix: str = Field(description="the first characters of the key, for display")
    keyLast4: str = Field(description="the last 4 characters of the key, for display")
    createdAt: datetime
    lastUsedAt: datetime | None
    revokedAt: datetime | None

    @classmethod
    def from_row(cls, row: ApiKeyRow, **extra: Any) -> Self:
        """``extra``: the fields a subclass adds (the secret, the grace period's end)."""
        return cls(
            id=row.key_id,
            name=row.name,
            userId=row.user_id,
            keyPrefix=row.key_prefix,
            keyLast4=row.key_last4,
            createdAt=row.created_at,
            lastUsedAt=row.last_used_at,
            revokedAt=row.revoked_at,
            **extra,
        )


class ApiKeyCreateResponse(ApiKeyRecord):
    """The new key; `secret` is shown only in this response."""

    secret: str = Field(description="the full key for the x-agent-api-key header; shown once")


class ApiKeyRotateRequest(RequestModel):
    """Optional grace period during which the previous secret keeps working."""

    gracePeriodSeconds: int = Field(default=0, ge=0, le=MAX_GRACE_PERIOD_SECONDS)


class ApiKeyRotateResponse(ApiKeyCreateResponse):
    """The key with its new secret (shown only here)."""

    graceExpiresAt: datetime | None = Field(
        description="until when the previous secret still works; null when it stopped at once"
    )


class ApiKeyListResponse(ResponseModel):
    """The caller's API keys, newest first, revoked ones included."""

    userId: uuid.UUID
    items: list[ApiKeyRecord]
    count: int = Field(ge=0)


class ApiKeyAuditQuery(QueryModel):
    userId: uuid.UUID | None = Field(default=None, description="defaults to the caller; self only")
    limit: int = Field(default=50, ge=1, le=200)
    cursor: str | None = Field(default=None, description="`nextCursor` of the previous page")


class ApiKeyUsageEntry(ResponseModel):
    occurredAt: datetime
    method: str
    route: str = Field(description="route template, e.g. /v1/api-keys/{keyId}/rotate")
    status: int
    clientAddress: str | None

    @classmethod
    def from_row(cls, row: UsageEntryRow) -> Self:
        return cls(
            occurredAt=row.occurred_at,
            method=row.method,
            route=row.route,
            status=row.status,
            clientAddress=row.client_address,
        )


class ApiKeyAuditResponse(ResponseModel):
    """Requests made with this key, newest first."""

    keyId: uuid.UUID
    userId: uuid.UUID
    items: list[ApiKeyUsageEntry]
    count: int = Field(ge=0, description="entries in this page")
    nextCursor: str | None


# --- legal ----------------------------------------------------------------------------------


class LegalDocumentType(enum.StrEnum):
    TERMS = "terms"
    PRIVACY = "privacy"
    DRAFT_LICENSE = "draft_license"
    AI_VERIFIER_DISCLAIMER = "ai_verifier_disclaimer"
    CHALLENGE_MODE_DISCLAIMER = "challenge_mode_disclaimer"


class AcceptanceKind(enum.StrEnum):
    EXPLICIT = "explicit"  # POST /v1/legal/acceptances
    IMPLIED = "implied"  # recorded by a guarded mutation in `implicit` mode


class LegalDocumentRef(ResponseModel):
    documentType: LegalDocumentType
    version: str


class LegalDocumentState(ResponseModel):
    documentType: LegalDocumentType
    version: str
    title: str
    required: bool
    accepted: bool
    acceptedAt: datetime | None
    acceptanceKind: AcceptanceKind | None = Field(
        description="explicit when explicitly accepted (even if implied earlier)"
    )
    contentSha256: str


class LegalDocumentsResponse(ResponseModel):
    """Every document version with the caller's acceptance state."""

    acceptanceMode: LegalAcceptanceMode
    documents: list[LegalDocumentState]
    requiredVersions: list[LegalDocumentRef]
    missing: list[LegalDocumentRef]


class PublicLegalDocument(ResponseModel):
    documentType: LegalDocumentType
    version: str
    title: str
    required: bool
    contentType: Literal["text/markdown"] = "text/markdown"
    contentSha256: str
    content: str


class PublicLegalDocumentsResponse(ResponseModel):
    """The legal texts, the required versions and the enforcement mode."""

    acceptanceMode: LegalAcceptanceMode
    documents: list[PublicLegalDocument]
    requiredVersions: list[LegalDocumentRef]


class LegalAcceptRequest(RequestModel):
    """Accept one document version (a version from the documents listing)."""

    documentType: LegalDocumentType
    version: str = Field(min_length=1, max_length=64)


class LegalAcceptanceRecord(ResponseModel):
    documentType: LegalDocumentType
    version: str
    kind: AcceptanceKind
    acceptedAt: datetime
    acceptedVia: Literal["session", "agent_key"]
    triggerRoute: str | None = Field(
        description="for implied assent: the guarded mutation that recorded it"
    )

    @classmethod
    def from_row(cls, row: AcceptanceRow) -> Self:
        return cls(
            documentType=LegalDocumentType(row.document_type),
            version=row.version,
            kind=AcceptanceKind(row.kind),
            acceptedAt=row.accepted_at,
            acceptedVia=row.accepted_via,  # type: ignore[arg-type]  # CHECK-constrained
            triggerRoute=row.trigger_route,
        )


class LegalAcceptancesResponse(ResponseModel):
    """The caller's acceptance records."""

    userId: uuid.UUID
    acceptanceMode: LegalAcceptanceMode
    items: list[LegalAcceptanceRecord]
    count: int = Field(ge=0)
    requiredVersions: list[LegalDocumentRef]
    missing: list[LegalDocumentRef]


class LegalAcceptResponse(ResponseModel):
    """The recorded acceptance (the first one, on a repeat) and what is still missing."""

    userId: uuid.UUID
    acceptanceMode: LegalAcceptanceMode
    acceptance: LegalAcceptanceRecord
    requiredVersions: list[LegalDocumentRef]
    missing: list[LegalDocumentRef]
