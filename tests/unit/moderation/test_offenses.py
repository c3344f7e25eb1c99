"""The offense rule: how many offenses in which window suspend sending, and for how long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from marketplace.config import Settings
from marketplace.moderation.offenses import (
    SuspensionPolicy,
    is_suspended,
    suspension_after,
    window_total,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
POLICY = SuspensionPolicy(suspend_after=3, window=DAY, duration=DAY)


def test_the_policy_comes_from_the_settings() -> None:
    assert SuspensionPolicy.from_settings(Settings()) == POLICY
    custom = Settings(
        moderation_suspend_after=5,
        moderation_window_seconds=600,
        moderation_suspend_seconds=30,
    )
    assert SuspensionPolicy.from_settings(custom) == SuspensionPolicy(
        5, timedelta(minutes=10), timedelta(seconds=30)
    )


@pytest.mark.parametrize(
    ("suspend_after", "window", "duration"),
    [(0, DAY, DAY), (1, timedelta(0), DAY), (1, DAY, -HOUR)],
)
def test_a_policy_that_could_never_or_always_suspend_is_refused(
    suspend_after: int, window: timedelta, duration: timedelta
) -> None:
    with pytest.raises(ValueError, match="must be"):
        SuspensionPolicy(suspend_after, window, duration)


def test_the_offense_that_reaches_the_threshold_suspends() -> None:
    first, second = NOW - 5 * HOUR, NOW - HOUR
    assert suspension_after([first], first, POLICY) is None
    assert suspension_after([first, second], second, POLICY) is None
    assert suspension_after([first, second, NOW], NOW, POLICY) == NOW + DAY


def test_offenses_outside_the_window_do_not_count() -> None:
    times = [NOW - 3 * DAY, NOW - 25 * HOUR, NOW - HOUR, NOW]
    assert window_total(times, NOW, DAY) == 2
    assert suspension_after(times, NOW, POLICY) is None


def test_an_offense_exactly_one_window_old_has_left_it() -> None:
    at_edge = [NOW - DAY, NOW - HOUR, NOW]
    assert window_total(at_edge, NOW, DAY) == 2
    assert suspension_after(at_edge, NOW, POLICY) is None
    just_inside = [NOW - DAY + timedelta(microseconds=1), NOW - HOUR, NOW]
    assert window_total(just_inside, NOW, DAY) == 3
    assert suspension_after(just_inside, NOW, POLICY) == NOW + DAY


def test_the_order_of_the_offense_times_does_not_matter() -> None:
    times = [NOW, NOW - 2 * HOUR, NOW - 30 * HOUR, NOW - HOUR]
    assert suspension_after(times, NOW, POLICY) == NOW + DAY
    assert suspension_after(reversed(times), NOW, POLICY) == NOW + DAY


def test_an_offense_after_a_suspension_ended_with_the_window_still_full_suspends_again() -> None:
    # A week-long window with hour-long suspensions: the fourth offense, after the first
    # suspension ended, still finds three others in the window.
    policy = SuspensionPolicy(3, 7 * DAY, HOUR)
    times = [NOW - 3 * HOUR, NOW - 2 * HOUR - timedelta(minutes=30), NOW - 2 * HOUR]
    assert suspension_after(times, NOW - 2 * HOUR, policy) == NOW - HOUR
    assert suspension_after([*times, NOW], NOW, policy) == NOW + HOUR


def test_a_lift_forgives_the_offenses_before_it() -> None:
    earlier = [NOW - 4 * HOUR, NOW - 3 * HOUR, NOW - 2 * HOUR]
    lifted_at = NOW - HOUR
    times = [*earlier, NOW]
    assert window_total(times, NOW, DAY, since=lifted_at) == 1
    assert suspension_after(times, NOW, POLICY, since=lifted_at) is None
    # An offense at the very moment of the lift is forgiven too.
    assert window_total([lifted_at, NOW], NOW, DAY, since=lifted_at) == 1
    # A lift older than the window changes nothing.
    assert window_total(times, NOW, DAY, since=NOW - 2 * DAY) == 4


def test_an_offense_stamped_after_now_counts() -> None:
    assert window_total([NOW - HOUR, NOW, NOW + timedelta(seconds=1)], NOW, DAY) == 3


def test_a_threshold_of_one_suspends_on_the_first_offense() -> None:
    policy = SuspensionPolicy(1, DAY, timedelta(minutes=15))
    assert suspension_after([NOW], NOW, policy) == NOW + timedelta(minutes=15)


def test_no_offenses_no_suspension() -> None:
    assert window_total([], NOW, DAY) == 0
    assert suspension_after([], NOW, POLICY) is None


def test_suspension_ends_at_its_until() -> None:
    until = NOW + HOUR
    assert is_suspended(until, NOW)
    assert is_suspended(until, until - timedelta(microseconds=1))
    assert not is_suspended(until, until)
    assert not is_suspended(until, until + HOUR)
    assert not is_suspended(None, NOW)


def test_naive_datetimes_are_refused() -> None:
    naive = datetime(2025, 6, 1, 12, 0)
    with pytest.raises(ValueError, match="timezone-aware"):
        window_total([NOW], naive, DAY)
    with pytest.raises(ValueError, match="timezone-aware"):
        suspension_after([NOW], naive, POLICY)
    with pytest.raises(ValueError, match="timezone-aware"):
        is_suspended(NOW, naive)


def test_other_time_zones_compare_by_instant() -> None:
    # 15:00+02:00 is 13:00 UTC: exactly one hour before 14:00 UTC, so at the window's edge.
    offense = datetime(2025, 6, 1, 15, 0, tzinfo=timezone(timedelta(hours=2)))
    assert window_total([offense], NOW + 2 * HOUR, HOUR) == 0
    assert window_total([offense], NOW + 2 * HOUR, HOUR + timedelta(seconds=1)) == 1
