"""One cursor codec and one keyset-page helper for every list of the API.

A cursor is the keyset position of the last row of a page: a kind tag and non-negative integers
(block and log index, microseconds and id, ...), as ``"<tag>:<n1>:<n2>..."`` in unpadded base64url.
Clients treat it as opaque and pass ``nextCursor`` back unchanged. Decoding accepts exactly what
:meth:`CursorKind.encode` produces (canonical numbers, each within the range of the column it is
compared with), so a forged cursor is a 400 and never reaches SQL as an out-of-range parameter.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from marketplace.errors import InvalidRequest

BIGINT_MAX = 2**63 - 1
INTEGER_MAX = 2**31 - 1
_MAX_CURSOR_LENGTH = 200
_NUMBER = r"(0|[1-9][0-9]{0,18})"

Row = TypeVar("Row")


class MalformedCursor(ValueError):
    """Not a cursor of this kind issued by this service."""


@dataclass(frozen=True)
class CursorKind:
    """The cursors of one listing: a tag (versioned, e.g. ``p1``) and the maximum of each part."""

    tag: str
    maxima: tuple[int, ...]

    def encode(self, *parts: int) -> str:
        if len(parts) != len(self.maxima) or not all(
            0 <= part <= maximum for part, maximum in zip(parts, self.maxima, strict=True)
        ):
            raise ValueError(f"cursor position out of range for {self.tag}: {parts}")
        raw = ":".join([self.tag, *map(str, parts)]).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def decode(self, cursor: str) -> tuple[int, ...]:
        """The position a cursor points after; :class:`MalformedCursor` for anything else."""
        if not cursor or len(cursor) > _MAX_CURSOR_LENGTH or not cursor.isascii():
            raise MalformedCursor("malformed cursor")
        try:
            text = base64.b64decode(
                cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True
            ).decode("ascii")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise MalformedCursor("malformed cursor") from None
        pattern = re.escape(self.tag) + "".join(f":{_NUMBER}" for _ in self.maxima)
        match = re.fullmatch(pattern, text)
        if match is None:
            raise MalformedCursor("malformed cursor")
        parts = tuple(int(group) for group in match.groups())
        if any(part > maximum for part, maximum in zip(parts, self.maxima, strict=True)):
            raise MalformedCursor("malformed cursor: position out of range")
        if self.encode(*parts) != cursor:  # one spelling per position
            raise MalformedCursor("malformed cursor: not canonical")
        return parts

    def position(self, cursor: str | None) -> tuple[int, ...] | None:
        """The query parameter ``cursor`` decoded, or 400 ``invalid_request`` naming it."""
        if cursor is None:
            return None
        try:
            return self.decode(cursor)
        except MalformedCursor:
            raise invalid_cursor() from None


def keyset_page(
    rows: Sequence[Row], limit: int, kind: CursorKind, position_of: Callable[[Row], tuple[int, ...]]
) -> tuple[list[Row], str | None]:
    """Cut rows fetched with ``LIMIT limit + 1`` to a page; the extra row says a next page exists,
    and the next cursor is the position of the page's last row."""
    page = list(rows[:limit])
    if len(rows) <= limit or not page:
        return page, None
    return page, kind.encode(*position_of(page[-1]))


@dataclass(frozen=True)
class TextCursorKind:
    """Cursors whose parts are text, each matching its own pattern (``part_patterns``), for
    positions that do not fit :class:`CursorKind`'s integers: a ``numeric(78, 0)`` sum (up to 78
    digits) or a wallet address. Same encoding and the same forgery checks: the decoded text
    must match the tag and every pattern exactly and re-encode to the same cursor. A pattern
    must not match ``:`` (the separator)."""

    tag: str
    part_patterns: tuple[str, ...]
    max_length: int = 300

    def encode(self, *parts: str) -> str:
        if len(parts) != len(self.part_patterns) or not all(
            re.fullmatch(pattern, part) and ":" not in part
            for part, pattern in zip(parts, self.part_patterns, strict=True)
        ):
            raise ValueError(f"cursor position out of range for {self.tag}: {parts}")
        raw = ":".join([self.tag, *parts]).encode()
        encoded = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        if len(encoded) > self.max_length:
            raise ValueError(f"cursor too long for {self.tag}")
        return encoded

    def decode(self, cursor: str) -> tuple[str, ...]:
        """The position a cursor points after; :class:`MalformedCursor` for anything else."""
        if not cursor or len(cursor) > self.max_length or not cursor.isascii():
            raise MalformedCursor("malformed cursor")
        try:
            text = base64.b64decode(
                cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True
            ).decode("ascii")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise MalformedCursor("malformed cursor") from None
        tag, *parts = text.split(":")
        if (
            tag != self.tag
            or len(parts) != len(self.part_patterns)
            or not all(
                re.fullmatch(pattern, part)
                for part, pattern in zip(parts, self.part_patterns, strict=True)
            )
        ):
            raise MalformedCursor("malformed cursor")
        if self.encode(*parts) != cursor:  # one spelling per position
            raise MalformedCursor("malformed cursor: not canonical")
        return tuple(parts)

    def position(self, cursor: str | None) -> tuple[str, ...] | None:
        """The query parameter ``cursor`` decoded, or 400 ``invalid_request`` naming it."""
        if cursor is None:
            return None
        try:
            return self.decode(cursor)
        except MalformedCursor:
            raise invalid_cursor() from None


def invalid_cursor() -> InvalidRequest:
    return InvalidRequest(
        "invalid query: query.cursor",
        [
            {
                "location": "query",
                "field": "cursor",
                "message": "not a cursor issued by this service; pass `nextCursor` unchanged",
                "type": "value_error",
            }
        ],
    )
