"""The one polling helper of the suite (tests/support/waiting.py): what it returns, when it gives
up, and what its failure says."""

from __future__ import annotations

import itertools

import pytest

from tests.support.waiting import eventually, eventually_sync, eventually_value


async def test_eventually_returns_the_seconds_it_waited() -> None:
    calls = itertools.count(1)

    async def third_time() -> bool:
        return next(calls) >= 3

    took = await eventually(third_time, within=5, interval=0.05, what="the third call")
    assert 0.1 <= took < 5


async def test_eventually_value_returns_what_satisfied_until() -> None:
    calls = itertools.count(1)

    async def read() -> int:
        return next(calls)

    assert await eventually_value(read, until=lambda n: n == 4, within=5, what="4", interval=0) == 4


async def test_a_timeout_names_what_was_awaited_and_the_last_value() -> None:
    async def read() -> list[int]:
        return [1, 2]

    with pytest.raises(AssertionError) as failure:
        await eventually(read, until=lambda v: len(v) == 3, within=0.2, what="three items")
    assert str(failure.value) == "timed out after 0.2 s waiting for three items; last: [1, 2]"


async def test_an_exception_ends_the_wait_at_once_unless_it_is_retried() -> None:
    calls = itertools.count(1)

    async def flaky() -> bool:
        if next(calls) < 3:
            raise ConnectionError("not yet")
        return True

    with pytest.raises(ConnectionError):
        await eventually(flaky, within=5, what="a connection")
    assert await eventually(flaky, within=5, what="a connection", retry_on=(ConnectionError,))

    async def refused() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(AssertionError, match=r"last: ConnectionError\('refused'\)"):
        await eventually(refused, within=0.1, what="a connection", retry_on=(ConnectionError,))


def test_the_blocking_form_checks_once_more_at_the_deadline_and_describes_lazily() -> None:
    calls = itertools.count(1)
    # False at once, true on the check after the 10 ms are over: that check still counts.
    assert eventually_sync(lambda: next(calls) >= 2, within=0.01, what="x", interval=0.02) is True
    seen: list[int] = []
    with pytest.raises(AssertionError, match="waiting for 2 reads"):
        eventually_sync(
            lambda: seen.append(1), within=0.05, what=lambda: f"{len(seen)} reads", interval=0.05
        )
