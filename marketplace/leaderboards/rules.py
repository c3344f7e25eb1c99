"""Pure rules of categories and tag sets (no I/O), shared by the API models and the admin CLI."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

SLUG_PATTERN = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
SLUG_MAX_LENGTH = 64
DISPLAY_NAME_MAX_LENGTH = 100
DESCRIPTION_MAX_LENGTH = 500
MAX_TAGS = 5
# The only milestone status of the read model that means "completed": the contract's
# `_approveAndPay` sets it for an owner approval and for a dispute resolved or finalized as
# approved alike (contracts/MarketplaceProject.sol); `attested` is a dispute still open.
COMPLETED_STATUS = "approved"

_SLUG = re.compile(SLUG_PATTERN)


def slug_problem(slug: str) -> str | None:
    """Why ``slug`` cannot name a category, or None when it can."""
    if len(slug) > SLUG_MAX_LENGTH:
        return f"a slug has at most {SLUG_MAX_LENGTH} characters"
    if not _SLUG.fullmatch(slug):
        return f"a slug matches {SLUG_PATTERN} (lower-case words joined by single hyphens)"
    return None


def duplicates(slugs: Sequence[str]) -> list[str]:
    """The slugs that occur more than once, in order of their second occurrence."""
    seen: set[str] = set()
    repeated: list[str] = []
    for slug in slugs:
        if slug in seen and slug not in repeated:
            repeated.append(slug)
        seen.add(slug)
    return repeated


def unknown_slugs(slugs: Sequence[str], active: Mapping[str, int]) -> list[str]:
    """The requested slugs that are not active categories, in request order."""
    return [slug for slug in slugs if slug not in active]


def canonical_order(slugs: Sequence[str], active: Mapping[str, int]) -> list[str]:
    """A tag set in the categories' own order (sortOrder, then slug): the stored form, so the
    same set sent in another order is the same tag set and writes no revision."""
    return sorted(slugs, key=lambda slug: (active[slug], slug))


def is_completed(milestone_status: str) -> bool:
    return milestone_status == COMPLETED_STATUS
