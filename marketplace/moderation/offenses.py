"""When offenses suspend an account's sending (docs/messaging.md, "Offenses and suspension").

An offense is a send refused by the term filter. After ``suspend_after`` offenses within
``window`` the account's sending is suspended for ``duration``. The rule is a pure function of
timestamps: the moderation counter actor records the offense in PostgreSQL, reads the account's
offense times back and asks :func:`suspension_after`, so an actor rebuilt from PostgreSQL after a
restart, or a retried call, reaches the same answer.

All datetimes are timezone-aware and come from one clock (the database's), so they compare.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from marketplace.config import Settings


@dataclass(frozen=True, slots=True)
class SuspensionPolicy:
    suspend_after: int
    window: timedelta
    duration: timedelta

    def __post_init__(self) -> None:
        if self.suspend_after < 1:
            raise ValueError("suspend_after must be at least 1")
        if self.window <= timedelta(0) or self.duration <= timedelta(0):
            raise ValueError("window and duration must be positive")

    @classmethod
    def from_settings(cls, settings: Settings) -> SuspensionPolicy:
        return cls(
            suspend_after=settings.moderation_suspend_after,
            window=timedelta(seconds=settings.moderation_window_seconds),
            duration=timedelta(seconds=settings.moderation_suspend_seconds),
        )


def window_total(
    offense_times: Iterable[datetime],
    now: datetime,
    window: timedelta,
    since: datetime | None = None,
) -> int:
    """Offenses that count at ``now``: later than ``now - window`` (one exactly a window old has
    left it) and, when ``since`` is given, later than ``since``.

    ``since`` is when a moderator last lifted a suspension of the account: lifting forgives the
    offenses behind it, or the next offense would suspend the account again at once. Offenses
    stamped after ``now`` count (the window has no upper end), so a clock that stepped back
    cannot hide one.
    """
    _require_aware(now)
    start = now - window
    if since is not None and since > start:
        start = since
    return sum(1 for at in offense_times if at > start)


def suspension_after(
    offense_times: Iterable[datetime],
    now: datetime,
    policy: SuspensionPolicy,
    since: datetime | None = None,
) -> datetime | None:
    """The end of the suspension the offense recorded at ``now`` triggers, or None.

    ``offense_times`` are every recorded offense of the account, the one just recorded at ``now``
    included. The account is suspended until ``now + duration`` when the offenses that count
    (:func:`window_total`) reach ``suspend_after``. A suspended account's sends are refused before
    the filter runs, so no offense is recorded while a suspension lasts; an offense after it ended
    with the window still at the threshold suspends again, for the full duration.
    """
    if window_total(offense_times, now, policy.window, since) >= policy.suspend_after:
        return now + policy.duration
    return None


def is_suspended(suspended_until: datetime | None, now: datetime) -> bool:
    """Whether sending is suspended at ``now``; it is allowed again from ``suspended_until`` on."""
    _require_aware(now)
    return suspended_until is not None and now < suspended_until


def _require_aware(now: datetime) -> None:
    # Stored offense times are aware: a naive one would fail only later, as a TypeError from a
    # comparison inside the count, or count wrongly if the caller made every time naive.
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime")
