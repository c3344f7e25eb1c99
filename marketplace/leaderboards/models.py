"""Request and response models of the leaderboard routes, with their row mappers."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Self

from pydantic import Field, field_validator

from marketplace.indexer.health import FreshnessSource
from marketplace.leaderboards.boards import BoardRow, BoardSort, BoardWindow
from marketplace.leaderboards.rules import (
    DESCRIPTION_MAX_LENGTH,
    DISPLAY_NAME_MAX_LENGTH,
    MAX_TAGS,
    SLUG_MAX_LENGTH,
    SLUG_PATTERN,
    duplicates,
)
from marketplace.storage.repositories.leaderboards import CategoryRow, RevisionRow, TagsRow
from marketplace.types import (
    MILESTONE_INDEX_MAX,
    Address,
    LowerAddress,
    QueryModel,
    RequestModel,
    ResponseModel,
    Usdc,
)

Slug = Annotated[
    str,
    Field(
        pattern=SLUG_PATTERN,
        min_length=1,
        max_length=SLUG_MAX_LENGTH,
        examples=["smart-contracts"],
    ),
]

REVISIONS_LIMIT_DEFAULT = 50
REVISIONS_LIMIT_MAX = 100


def _omit_none(value: object) -> bool:
    return value is None


class Category(ResponseModel):
    """A leaderboard category; inactive ones stay listed (old tags keep naming them) but cannot
    be used in new tags."""

    slug: Slug
    displayName: str = Field(min_length=1, max_length=DISPLAY_NAME_MAX_LENGTH)
    description: str | None = Field(
        default=None, max_length=DESCRIPTION_MAX_LENGTH, exclude_if=_omit_none
    )
    sortOrder: int = Field(ge=1)
    isActive: bool
    createdAt: datetime
    updatedAt: datetime

    @classmethod
    def from_row(cls, row: CategoryRow) -> Self:
        return cls(
            slug=row.slug,
            displayName=row.display_name,
            description=row.description,
            sortOrder=row.sort_order,
            isActive=row.is_active,
            createdAt=row.created_at,
            updatedAt=row.updated_at,
        )


class CategoryListResponse(ResponseModel):
    """Every category, by `sortOrder`, then slug."""

    items: list[Category]
    count: int = Field(ge=0)


class TagUpsertRequest(RequestModel):
    ownerWalletAddress: LowerAddress = Field(
        description="the project's owner wallet, an active wallet link of the caller"
    )
    categories: list[Slug] = Field(
        min_length=1,
        max_length=MAX_TAGS,
        description=f"1..{MAX_TAGS} distinct slugs of active categories",
    )

    @field_validator("categories")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        repeated = duplicates(value)
        if repeated:
            raise ValueError(f"categories repeat {', '.join(repeated)}")
        return value


class MilestoneTags(ResponseModel):
    """The category tags of a completed milestone, in the categories' order (sortOrder, slug)."""

    projectAddress: Address
    milestoneIndex: int = Field(ge=0, le=MILESTONE_INDEX_MAX)
    ownerWalletAddress: Address
    categories: list[str]
    createdAt: datetime
    updatedAt: datetime

    @classmethod
    def from_row(cls, row: TagsRow) -> Self:
        return cls(
            projectAddress=row.project_address,
            milestoneIndex=row.milestone_index,
            ownerWalletAddress=row.owner_wallet_address,
            categories=list(row.categories),
            createdAt=row.created_at,
            updatedAt=row.updated_at,
        )


class TagRevision(ResponseModel):
    """One change of a milestone's tag set."""

    id: uuid.UUID
    projectAddress: Address
    milestoneIndex: int = Field(ge=0, le=MILESTONE_INDEX_MAX)
    ownerWalletAddress: Address
    revision: int = Field(ge=1, description="1 for the first tag set, then 2, 3, ...")
    categories: list[str]
    previousCategories: list[str] = Field(
        description="the tag set this revision replaced; empty for revision 1"
    )
    createdAt: datetime

    @classmethod
    def from_row(cls, row: RevisionRow) -> Self:
        return cls(
            id=row.id,
            projectAddress=row.project_address,
            milestoneIndex=row.milestone_index,
            ownerWalletAddress=row.owner_wallet_address,
            revision=row.revision,
            categories=list(row.categories),
            previousCategories=list(row.previous_categories),
            createdAt=row.created_at,
        )


class TagRevisionsQuery(QueryModel):
    limit: int = Field(
        default=REVISIONS_LIMIT_DEFAULT, ge=1, le=REVISIONS_LIMIT_MAX, description="page size"
    )
    cursor: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="opaque `nextCursor` of the previous page",
    )


class TagRevisionsResponse(ResponseModel):
    """A milestone's tag revisions, newest first."""

    items: list[TagRevision]
    count: int = Field(ge=0, description="items in this page")
    nextCursor: str | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )


# --- boards -------------------------------------------------------------------------------------

BOARD_LIMIT_DEFAULT = 50
BOARD_LIMIT_MAX = 100


class BoardQuery(QueryModel):
    categories: str | None = Field(
        default=None,
        max_length=1000,
        description="comma-separated category slugs; omitted: every completed milestone",
    )
    sort: BoardSort = Field(default=BoardSort.PAYOUT, description="payout, milestones or recent")
    window: BoardWindow = Field(
        default=BoardWindow.ALL, description="all, 90d or 30d (by the milestone's completion)"
    )
    limit: int = Field(
        default=BOARD_LIMIT_DEFAULT, ge=1, le=BOARD_LIMIT_MAX, description="page size"
    )
    cursor: str | None = Field(
        default=None,
        min_length=1,
        max_length=300,
        description="opaque `nextCursor` of the previous page (of the same sort)",
    )


class LeaderboardRow(ResponseModel):
    """A worker wallet's standing: its completed milestones in the board's categories and
    window. Names no project (invite-only projects count, unnamed)."""

    rank: int = Field(ge=1)
    walletAddress: Address
    userId: uuid.UUID | None = Field(description="the user actively linked to the wallet")
    username: str | None
    completedMilestones: int = Field(ge=1)
    totalPayoutUSDC: Usdc
    projects: int = Field(ge=1)
    categories: list[str] = Field(description="union of the counted milestones' tags")
    lastCompletedAt: datetime

    @classmethod
    def from_board(cls, row: BoardRow) -> Self:
        return cls(
            rank=row.rank,
            walletAddress=row.wallet_address,
            userId=row.user_id,
            username=row.username,
            completedMilestones=row.completed_milestones,
            totalPayoutUSDC=row.total_payout_usdc,
            projects=row.projects,
            categories=row.categories,
            lastCompletedAt=row.last_completed_at,
        )


class IndexerFreshnessStatus(ResponseModel):
    """The spec's freshness metadata of a board."""

    source: FreshnessSource
    indexedAt: datetime | None = Field(
        default=None, description="time of the newest block the read model reflects"
    )
    stale: bool
    freshnessTargetMs: int = Field(ge=1)
    lastSuccessfulSyncAt: datetime | None = None


class LeaderboardResponse(ResponseModel):
    items: list[LeaderboardRow]
    count: int = Field(ge=0)
    nextCursor: str | None
    freshness: IndexerFreshnessStatus
