"""Leaderboard categories: the public list and the operators' changes (``marketplace admin
categories``). A category is never deleted: old tags keep naming it; deactivating one keeps it
listed (``isActive: false``) and refuses it in new tags."""

from __future__ import annotations

from typing import ClassVar

from marketplace.errors import InvalidRequest
from marketplace.leaderboards.models import Category
from marketplace.leaderboards.rules import (
    DESCRIPTION_MAX_LENGTH,
    DISPLAY_NAME_MAX_LENGTH,
    slug_problem,
)
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import leaderboards as repo


class CategoryChangeRefused(Exception):
    """An operator's change the CLI refuses (never an HTTP answer: no route changes categories,
    so these codes are not in the API's error table)."""

    code: ClassVar[str] = "category_change_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CategoryExists(CategoryChangeRefused):
    code = "category_exists"


class CategoryNotFound(CategoryChangeRefused):
    code = "category_not_found"


def _check_fields(
    display_name: str | None, description: str | None, sort_order: int | None
) -> None:
    if display_name is not None and not 1 <= len(display_name) <= DISPLAY_NAME_MAX_LENGTH:
        raise InvalidRequest(f"displayName has 1..{DISPLAY_NAME_MAX_LENGTH} characters")
    if description is not None and not 1 <= len(description) <= DESCRIPTION_MAX_LENGTH:
        raise InvalidRequest(f"description has 1..{DESCRIPTION_MAX_LENGTH} characters")
    if sort_order is not None and sort_order < 1:
        raise InvalidRequest("sortOrder is at least 1")


async def list_categories(conn: Conn) -> list[Category]:
    return [Category.from_row(row) for row in await repo.list_categories(conn)]


async def add_category(
    conn: Conn,
    *,
    slug: str,
    display_name: str,
    description: str | None,
    sort_order: int,
    is_active: bool = True,
) -> Category:
    problem = slug_problem(slug)
    if problem is not None:
        raise InvalidRequest(f"invalid slug {slug!r}: {problem}")
    _check_fields(display_name, description, sort_order)
    row = await repo.insert_category(
        conn,
        slug=slug,
        display_name=display_name,
        description=description,
        sort_order=sort_order,
        is_active=is_active,
    )
    if row is None:
        raise CategoryExists(f"category {slug!r} exists already")
    return Category.from_row(row)


async def update_category(
    conn: Conn,
    slug: str,
    *,
    display_name: str | None = None,
    description: str | None = None,
    clear_description: bool = False,
    sort_order: int | None = None,
    is_active: bool | None = None,
) -> Category:
    """Set the given fields (None: unchanged); ``is_active=False`` deactivates."""
    _check_fields(display_name, description, sort_order)
    row = await repo.update_category(
        conn,
        slug,
        display_name=display_name,
        description=description,
        clear_description=clear_description,
        sort_order=sort_order,
        is_active=is_active,
    )
    if row is None:
        raise CategoryNotFound(f"no category {slug!r}")
    return Category.from_row(row)
