"""Polling, written once: wait until something holds, or fail naming what was awaited.

``eventually`` polls an async check and returns the seconds it took (some tests assert on
that); ``eventually_value`` returns the value read instead. Both are done when the value read
is true, or satisfies ``until`` when one is given. ``eventually_sync`` is the blocking form of
``eventually_value`` (for tests that drive processes, e.g. ``marketplace up``).

Each check runs at least once, and once more at or after ``within`` seconds before the wait
fails. An exception raised by a check ends the wait at once (a check may assert to fail fast),
unless its type is in ``retry_on``. On timeout an ``AssertionError`` names ``what`` and the last
value seen (or the last exception that was retried).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

Described = str | Callable[[], str]


def _timed_out(what: Described, within: float, last: object) -> AssertionError:
    described = what() if callable(what) else what
    return AssertionError(f"timed out after {within:g} s waiting for {described}; last: {last!r}")


async def _poll(
    read: Callable[[], Awaitable[T]],
    until: Callable[[T], Any],
    within: float,
    what: Described,
    interval: float,
    retry_on: tuple[type[BaseException], ...],
) -> tuple[T, float]:
    started = time.monotonic()
    while True:
        try:
            value = await read()
        except retry_on as exc:
            last: object = exc
        else:
            if until(value):
                return value, time.monotonic() - started
            last = value
        if time.monotonic() - started >= within:
            raise _timed_out(what, within, last)
        await asyncio.sleep(interval)


async def eventually(
    check: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], Any] = bool,
    within: float,
    what: Described,
    interval: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
) -> float:
    """Seconds until ``check()`` answers something true (or that satisfies ``until``)."""
    _, elapsed = await _poll(check, until, within, what, interval, retry_on)
    return elapsed


async def eventually_value(
    read: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], Any] = bool,
    within: float,
    what: Described,
    interval: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """The first value ``read()`` answers that satisfies ``until``."""
    value, _ = await _poll(read, until, within, what, interval, retry_on)
    return value


def eventually_sync(
    read: Callable[[], T],
    *,
    until: Callable[[T], Any] = bool,
    within: float,
    what: Described,
    interval: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """The first value ``read()`` answers that is true (or satisfies ``until``), blocking."""
    started = time.monotonic()
    while True:
        try:
            value = read()
        except retry_on as exc:
            last: object = exc
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() - started >= within:
            raise _timed_out(what, within, last)
        time.sleep(interval)
