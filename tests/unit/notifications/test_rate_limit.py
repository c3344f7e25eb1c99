"""The notification rate setting and the sliding-window limiter, without a database."""

from __future__ import annotations

import pytest

from marketplace.config import Settings
from marketplace.config.notifications import NotificationRates, WindowRate
from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.rate_limit import (
    LimitRequest,
    SlidingWindowLog,
    WindowLimiter,
)

DM = NotificationEventType.DIRECT_MESSAGE
CHAT = NotificationEventType.PROJECT_CHAT_MESSAGE


def test_one_rate_for_every_type_or_a_json_object_per_type() -> None:
    rates = NotificationRates.parse("5/3600")
    assert rates.for_type(DM) == rates.for_type(CHAT) == WindowRate(5, 3600)
    rates = NotificationRates.parse('{"direct_message": "10/3600"}')
    assert rates.for_type(DM) == WindowRate(10, 3600)
    assert rates.for_type(CHAT) == WindowRate(5, 3600)
    rates = NotificationRates.parse('{"default": "2/60", "bid_draft": "1/86400"}')
    assert rates.for_type(NotificationEventType.BID_DRAFT) == WindowRate(1, 86400)
    assert rates.for_type(DM) == WindowRate(2, 60)


@pytest.mark.parametrize(
    "value",
    ["", "5", "0/3600", "5/0", "x/y", "[]", '{"direct_messages": "1/1"}', '{"bid_draft": 5}', "{"],
)
def test_bad_rates_stop_startup(value: str) -> None:
    with pytest.raises(ValueError, match="MARKETPLACE_NOTIFICATION_RATE_LIMIT"):
        Settings(notification_rate_limit=value)


def test_the_window_admits_n_then_refuses_until_the_oldest_leaves_it() -> None:
    log, rate = SlidingWindowLog(), WindowRate(3, 100)
    assert [log.admit("k", i, 10.0 + i, rate) for i in range(5)] == [True] * 3 + [False] * 2
    assert not log.admit("k", 9, 109.0, rate)  # the first admission (t=10) is still inside
    assert log.admit("k", 10, 110.5, rate)  # ... and now it is not
    # GCRA would have refilled a slot every 33 s; the window never holds more than 3.
    assert log.admitted("k", 110.5, 100) == 3


def test_asking_again_about_an_admitted_event_counts_it_once() -> None:
    log, rate = SlidingWindowLog(), WindowRate(2, 100)
    assert log.admit("k", 1, 0.0, rate)
    assert log.admit("k", 1, 1.0, rate)  # the consumer retrying its batch
    assert log.admit("k", 2, 2.0, rate)
    assert not log.admit("k", 3, 3.0, rate)


async def test_a_key_is_rebuilt_from_the_rows_before_its_first_decision() -> None:
    loads: list[tuple[str, str, float]] = []

    async def load(recipient: str, event_type: str, since: float) -> list[tuple[float, int]]:
        loads.append((recipient, event_type, since))
        return [(900.0, 1), (950.0, 2)] if event_type == "direct_message" else []

    limiter = WindowLimiter(load)
    requests = [LimitRequest(i, "u", "direct_message", 3, 3600) for i in (3, 4, 5)]
    requests.append(LimitRequest(6, "u", "project_chat_message", 3, 3600))
    assert await limiter.admit(requests, 1000.0) == [True, False, False, True]
    assert loads == [("u", "direct_message", 1000.0 - 3600), ("u", "project_chat_message", -2600)]
    assert limiter.rebuilt_keys == 2
    # Idle keys are dropped and rebuilt on their next look.
    assert limiter.forget_idle(1000.0 + 3600) == 2
