"""Request and response models of the moderation routes (docs/messaging.md, "Offenses and
suspensions", "Audit log"), with their row -> model mappers."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from marketplace.storage.repositories.moderation import OffenseListRow, SuspendedUserRow
from marketplace.storage.repositories.moderation_audit import AuditRow
from marketplace.types import JsonObject, QueryModel, ResponseModel

LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 100

AuditActionName = Literal[
    "offense", "suspension", "suspension_lifted", "report_created", "report_status_changed"
]
ContextName = Literal["project_chat", "direct"]


def _limit() -> Any:
    return Field(default=LIST_LIMIT_DEFAULT, ge=1, le=LIST_LIMIT_MAX, description="page size")


def _cursor() -> Any:
    return Field(
        default=None,
        min_length=1,
        max_length=200,
        description="opaque `nextCursor` of the previous page",
    )


class OffensesQuery(QueryModel):
    userId: uuid.UUID = Field(
        description="whose offenses: the caller's own, or anyone's for admins"
    )
    limit: int = _limit()
    cursor: str | None = _cursor()


class AuditQuery(QueryModel):
    userId: uuid.UUID | None = Field(
        default=None, description="only the entries whose subject is this user"
    )
    limit: int = _limit()
    cursor: str | None = _cursor()


SuspensionState = Literal["active", "all"]


class SuspensionsQuery(QueryModel):
    state: SuspensionState = Field(
        default="active",
        description=(
            "`active` (default): the accounts whose sending is suspended now; `all`: every "
            "account ever suspended, `suspendedUntil` null for those not suspended now"
        ),
    )
    limit: int = _limit()
    cursor: str | None = _cursor()


class SuspensionItem(ResponseModel):
    userId: uuid.UUID
    suspendedUntil: datetime | None = Field(
        description="end of the account's active suspension; null when it is not suspended now "
        "(`state=all` only)"
    )
    suspendedAt: datetime = Field(
        description="start of the active suspension, else of the account's latest one"
    )
    offenses: int = Field(
        ge=0,
        description="the account's offenses within the suspension window "
        "(`MARKETPLACE_MODERATION_WINDOW_SECONDS`) up to now",
    )

    @classmethod
    def from_row(cls, row: SuspendedUserRow) -> SuspensionItem:
        return cls(
            userId=row.user_id,
            suspendedUntil=row.suspended_until,
            suspendedAt=row.suspended_at,
            offenses=row.offenses,
        )


class SuspensionListResponse(ResponseModel):
    """Suspended accounts, the newest suspension first."""

    items: list[SuspensionItem]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: str | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )


class OffenseItem(ResponseModel):
    id: uuid.UUID
    context: ContextName = Field(description="where the refused message was sent")
    term: str = Field(description="the matched term, as its list writes it (never the body)")
    createdAt: datetime

    @classmethod
    def from_row(cls, row: OffenseListRow) -> OffenseItem:
        return cls(id=row.id, context=row.context, term=row.term, createdAt=row.created_at)


class OffensesResponse(ResponseModel):
    """A user's offenses, newest first, with the counts the suspension rule sees now."""

    userId: uuid.UUID
    total: int = Field(ge=0, description="all offenses of the user, ever")
    windowTotal: int = Field(
        ge=0,
        description=(
            "offenses that count towards the next suspension now: within the window and after "
            "the latest suspension's start or lift"
        ),
    )
    suspendedUntil: datetime | None = Field(
        description="end of the active suspension of sending; null when sending is allowed"
    )
    items: list[OffenseItem]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: str | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )


class AuditEntry(ResponseModel):
    id: uuid.UUID
    subjectUserId: uuid.UUID = Field(
        description=(
            "the offending account (offense, suspension, lift) or the author of the reported "
            "message (report, report transition)"
        )
    )
    actorUserId: uuid.UUID | None = Field(
        description="who did it; null for the system (term filter, suspension rule)"
    )
    action: AuditActionName
    reason: str | None
    details: JsonObject = Field(
        description="ids, terms and statuses of the change; never a message body"
    )
    createdAt: datetime

    @classmethod
    def from_row(cls, row: AuditRow) -> AuditEntry:
        return cls(
            id=row.id,
            subjectUserId=row.subject_user_id,
            actorUserId=row.actor_user_id,
            action=row.action,
            reason=row.reason,
            details=row.details or {},
            createdAt=row.created_at,
        )


class AuditListResponse(ResponseModel):
    """Moderation audit entries, newest first."""

    items: list[AuditEntry]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: str | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )
