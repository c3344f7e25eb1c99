"""Request and response models of the messaging routes (issue #12 "Records"; spec section 2
"Messaging, moderation, notifications"), with their row -> model mappers.

A message has two shapes, one per kind, so that each carries exactly its kind's fields: project
chat messages have `projectAddress` and `senderWalletAddress`, direct messages `threadId` and
`recipientUserId`, and neither has the other's keys (absent, not null). `body` is always present
and is null only for a removed message shown to anyone but a moderation admin.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Annotated, Literal, Self, TypeVar

from pydantic import Field

from marketplace.storage.repositories.message_reports import ReportRow
from marketplace.storage.repositories.messages import MessageRow, ThreadListRow
from marketplace.storage.repositories.user_relations import RelationRow
from marketplace.types import Address, LowerAddress, QueryModel, RequestModel, ResponseModel

BODY_MAX = 4000
REASON_MAX = 1000
NOTE_MAX = 2000
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 100
CURSOR_MAX = 200


class BodyStatus(enum.StrEnum):
    VISIBLE = "visible"
    REPORTED = "reported"
    REMOVED = "removed"


class ReportStatus(enum.StrEnum):
    OPEN = "open"
    REVIEWING = "reviewing"
    ACTIONED = "actioned"
    DISMISSED = "dismissed"


MessageBody = Annotated[
    str,
    Field(
        min_length=1,
        max_length=BODY_MAX,
        description="1..4000 characters (Unicode code points); passes the term filter",
    ),
]
Limit = Annotated[int, Field(ge=1, le=LIST_LIMIT_MAX, description="page size, 1..100")]
Cursor = Annotated[
    str,
    Field(
        min_length=1, max_length=CURSOR_MAX, description="opaque `nextCursor` of the previous page"
    ),
]
NextCursor = Annotated[
    str | None,
    Field(description="pass as `cursor` for the next page; null on the last page"),
]


T = TypeVar("T")


def _chat_column(value: T | None) -> T:
    # A chat message's project and sender wallet are set (CHECK messages_kind_fields).
    if value is None:
        raise ValueError("a chat message row without its project or sender wallet")
    return value


def _direct_column(value: T | None) -> T:
    # A direct message's thread and recipient are set (CHECK messages_kind_fields).
    if value is None:
        raise ValueError("a direct message row without its thread or recipient")
    return value


def shown_body(row: MessageRow, *, moderator: bool) -> str | None:
    """The body as the viewer may see it: a removed message's text only for moderation
    admins."""
    if row.body_status == BodyStatus.REMOVED and not moderator:
        return None
    return row.body


# --- requests -------------------------------------------------------------------------------


class ChatMessageRequest(RequestModel):
    """A project chat message, sent as one of the caller's wallets."""

    senderWalletAddress: LowerAddress = Field(
        description=(
            "an active wallet link of the caller that is the project owner or the selected "
            "worker; must equal the `x-user-wallet-address` header"
        )
    )
    body: MessageBody


class WalletHeader(QueryModel):
    """The header of wallet-specific authorization (spec section 5 rule 3)."""

    userWalletAddress: LowerAddress = Field(
        alias="x-user-wallet-address",
        description="the sending wallet; must equal `senderWalletAddress` of the body",
    )


class DirectMessageRequest(RequestModel):
    """A direct message to another user."""

    recipientUserId: uuid.UUID = Field(
        description="a user who shares a project with the caller (not the caller)"
    )
    body: MessageBody


class BlockRequest(RequestModel):
    blockedUserId: uuid.UUID = Field(description="the user to block (not the caller)")


class MuteRequest(RequestModel):
    mutedUserId: uuid.UUID = Field(description="the user to mute (not the caller)")


class ReportRequest(RequestModel):
    """Report a message the caller can see (not one of the caller's own)."""

    messageId: uuid.UUID
    reason: str = Field(min_length=1, max_length=REASON_MAX, description="1..1000 characters")


class ReportStatusRequest(RequestModel):
    """Move a report along the admin workflow."""

    status: ReportStatus = Field(
        description=(
            "open -> reviewing | actioned | dismissed; reviewing -> actioned | dismissed; "
            "anything else is 409 `invalid_transition`"
        )
    )
    note: str | None = Field(
        default=None,
        max_length=NOTE_MAX,
        description="at most 2000 characters; replaces the stored note (omitted: kept)",
    )


class PageQuery(QueryModel):
    limit: Limit = LIST_LIMIT_DEFAULT
    cursor: Cursor | None = None


class ReportListQuery(PageQuery):
    status: ReportStatus | None = Field(default=None, description="only reports in this status")


# --- responses ------------------------------------------------------------------------------


class ChatMessageRecord(ResponseModel):
    """A project chat message."""

    id: uuid.UUID
    kind: Literal["project_chat"]
    projectAddress: Address
    senderUserId: uuid.UUID
    senderWalletAddress: Address
    body: str | None = Field(
        description="the text; null when the message was removed (except for moderation admins)"
    )
    bodyStatus: BodyStatus
    createdAt: datetime

    @classmethod
    def from_row(cls, row: MessageRow, *, moderator: bool = False) -> Self:
        return cls(
            id=row.id,
            kind="project_chat",
            projectAddress=_chat_column(row.project_address),
            senderUserId=row.sender_user_id,
            senderWalletAddress=_chat_column(row.sender_wallet_address),
            body=shown_body(row, moderator=moderator),
            bodyStatus=BodyStatus(row.body_status),
            createdAt=row.created_at,
        )


class DirectMessageRecord(ResponseModel):
    """A direct message."""

    id: uuid.UUID
    kind: Literal["direct"]
    threadId: uuid.UUID
    senderUserId: uuid.UUID
    recipientUserId: uuid.UUID
    body: str | None = Field(
        description="the text; null when the message was removed (except for moderation admins)"
    )
    bodyStatus: BodyStatus
    createdAt: datetime

    @classmethod
    def from_row(cls, row: MessageRow, *, moderator: bool = False) -> Self:
        return cls(
            id=row.id,
            kind="direct",
            threadId=_direct_column(row.thread_id),
            senderUserId=row.sender_user_id,
            recipientUserId=_direct_column(row.recipient_user_id),
            body=shown_body(row, moderator=moderator),
            bodyStatus=BodyStatus(row.body_status),
            createdAt=row.created_at,
        )


class ChatMessageList(ResponseModel):
    """A page of a project's chat, newest first."""

    items: list[ChatMessageRecord]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: NextCursor


class DirectMessageList(ResponseModel):
    """A page of a thread's messages, newest first."""

    items: list[DirectMessageRecord]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: NextCursor


class ThreadRecord(ResponseModel):
    """A direct-message thread, from the caller's side."""

    threadId: uuid.UUID
    otherUserId: uuid.UUID
    otherUsername: str | None = Field(description="the other user's username; null if none")
    lastMessageAt: datetime
    muted: bool = Field(description="the caller has muted the other user")

    @classmethod
    def from_row(cls, row: ThreadListRow) -> Self:
        return cls(
            threadId=row.thread_id,
            otherUserId=row.other_user_id,
            otherUsername=row.other_username,
            lastMessageAt=row.last_message_at,
            muted=row.muted,
        )


class ThreadList(ResponseModel):
    """A page of the caller's threads, most recent activity first."""

    items: list[ThreadRecord]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: NextCursor


class BlockRecord(ResponseModel):
    """The caller blocks `blockedUserId`."""

    userId: uuid.UUID
    blockedUserId: uuid.UUID
    createdAt: datetime = Field(description="when the block was first made")

    @classmethod
    def from_row(cls, row: RelationRow) -> Self:
        return cls(userId=row.user_id, blockedUserId=row.other_user_id, createdAt=row.created_at)


class MuteRecord(ResponseModel):
    """The caller mutes `mutedUserId`."""

    userId: uuid.UUID
    mutedUserId: uuid.UUID
    createdAt: datetime = Field(description="when the mute was first made")

    @classmethod
    def from_row(cls, row: RelationRow) -> Self:
        return cls(userId=row.user_id, mutedUserId=row.other_user_id, createdAt=row.created_at)


class ReportRecord(ResponseModel):
    """A message report."""

    id: uuid.UUID
    messageId: uuid.UUID
    reporterUserId: uuid.UUID
    reason: str
    status: ReportStatus
    note: str | None = Field(description="the moderation admin's note; null if none")
    createdAt: datetime
    updatedAt: datetime
    resolvedByUserId: uuid.UUID | None = Field(
        description="the admin who actioned or dismissed it; null while open or reviewing"
    )

    @classmethod
    def from_row(cls, row: ReportRow) -> Self:
        return cls(
            id=row.id,
            messageId=row.message_id,
            reporterUserId=row.reporter_user_id,
            reason=row.reason,
            status=ReportStatus(row.status),
            note=row.note,
            createdAt=row.created_at,
            updatedAt=row.updated_at,
            resolvedByUserId=row.resolved_by_user_id,
        )


class ReportDetail(ResponseModel):
    """A report with the message it is about, for moderation admins: the body is shown even when
    the message was removed."""

    report: ReportRecord
    message: ChatMessageRecord | DirectMessageRecord = Field(discriminator="kind")

    @classmethod
    def from_rows(cls, report: ReportRow, message: MessageRow) -> Self:
        record: ChatMessageRecord | DirectMessageRecord
        if message.kind == "direct":
            record = DirectMessageRecord.from_row(message, moderator=True)
        else:
            record = ChatMessageRecord.from_row(message, moderator=True)
        return cls(report=ReportRecord.from_row(report), message=record)


class ReportList(ResponseModel):
    """A page of reports, newest first."""

    items: list[ReportRecord]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: NextCursor
