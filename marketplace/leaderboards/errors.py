"""Rule failures of the leaderboards. Plain constructors, so they cross the Ray boundary."""

from __future__ import annotations

from typing import ClassVar

from marketplace.errors import Conflict, ErrorExtra, MarketplaceError, NotFound


class MilestoneNotFound(NotFound):
    code = "milestone_not_found"
    default_message = "the project has no such milestone"


class MilestoneNotCompleted(Conflict):
    code = "milestone_not_completed"
    default_message = (
        "only a completed milestone (approved, also by a dispute resolved as approved) can be "
        "tagged"
    )


class CategoryTagsNotFound(NotFound):
    code = "category_tags_not_found"
    default_message = "the milestone has no category tags"


class UnknownCategory(MarketplaceError):
    """Slugs that are not active categories; ``unknown`` names them, in request order."""

    code = "unknown_category"
    status = 422
    default_message = "not an active leaderboard category"
    example_extra: ClassVar[ErrorExtra] = {"unknown": ["blockchain"]}

    def __init__(self, unknown: list[str], message: str | None = None) -> None:
        super().__init__(
            message or f"not active leaderboard categories: {', '.join(unknown)}",
            {"unknown": unknown},
        )
