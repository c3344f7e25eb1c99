"""asyncio helpers shared by the long-running loops (relay, workers, indexer, buffers)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class AtMostEvery(Generic[T]):
    """A value read again at most every ``max_age`` seconds however often it is asked for
    (e.g. a ``/metrics`` figure under several scraping Prometheus servers); concurrent askers
    wait for the one read in progress."""

    def __init__(self, max_age: float, initial: T) -> None:
        self.max_age = max_age
        self.value = initial
        self._taken_at = -math.inf
        self._lock = asyncio.Lock()

    async def get(self, read: Callable[[], Awaitable[T]]) -> T:
        async with self._lock:
            if time.monotonic() - self._taken_at >= self.max_age:
                self.value = await read()
                self._taken_at = time.monotonic()
        return self.value


async def wait_event(event: asyncio.Event, seconds: float | None) -> None:
    """Wait until ``event`` is set or ``seconds`` pass; raises TimeoutError on the latter.

    Not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that arrives while the
    awaited thing completes (CPython gh-86296), and a loop that lost its cancellation never stops,
    which hung a relay's shutdown (and so a test's teardown, holding the relay lock). ``timeout()``
    keeps the cancellation.
    """
    async with asyncio.timeout(seconds):
        await event.wait()


async def within(seconds: float, read: Awaitable[T]) -> T:
    """``read``'s result, or TimeoutError after ``seconds`` (``asyncio.timeout``, not
    ``wait_for``: see :func:`wait_event`)."""
    async with asyncio.timeout(seconds):
        return await read


class FlushLoop:
    """The background loop of a write-behind buffer: ``flush`` every ``interval`` seconds, or as
    soon as :meth:`wake` says a batch is full; a crash of one flush is logged, never fatal.

    Used by the buffers that keep work off the request path (API-key usage, session records,
    job metrics). The owner implements the flush; :meth:`stop` cancels the loop and leaves the
    final flush to the owner, whose rules for a last write differ (retry or report loss).
    """

    def __init__(
        self,
        flush: Callable[[], Awaitable[object]],
        interval: float,
        *,
        name: str,
        log: logging.Logger,
    ) -> None:
        self._flush = flush
        self.interval = interval
        self.name = name
        self._log = log
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_event(self._wake, self.interval)
            self._wake.clear()
            try:
                await self._flush()
            except Exception:
                raise_if_cancelling()
                self._log.exception("%s: flush crashed", self.name)


def cancellation_mark() -> int:
    """How many cancellations of the current task are pending now (see
    :func:`raise_if_cancelled_since`)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def raise_if_cancelled_since(mark: int) -> None:
    """Raise ``CancelledError`` if the current task was cancelled after ``mark`` was taken.

    For an await that may lose a cancellation arriving while it runs (CPython gh-86296:
    ``asyncio.wait_for``, which redis-py sends through): it returned normally although the task
    was cancelled meanwhile. Only a cancellation that arrived *during* the await counts, so
    cleanup that runs while the task is already being cancelled (a ``finally`` closing pools) is
    not cut short after its first await.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > mark:
        raise asyncio.CancelledError


async def wait_finished(task: asyncio.Future[Any]) -> None:
    """Wait until ``task`` (cancelled, or told to stop) has finished; its own cancellation is
    its normal end and is not raised, but a cancellation of the caller that arrives meanwhile
    is. (Not ``contextlib.suppress(CancelledError)``: that also swallowed the cancellation a
    bounded stop sends the caller, so the stop returned at its bound without a word and left the
    task running.) Any other exception of the task is raised."""
    mark = cancellation_mark()
    try:
        await task
    except asyncio.CancelledError:
        raise_if_cancelled_since(mark)
    else:
        # A task that ignored the cancellation the caller's own one was passed on as, and then
        # ended normally: asyncio resumes the caller with the task's result.
        raise_if_cancelled_since(mark)


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has finished (see :func:`wait_finished`)."""
    task.cancel()
    await wait_finished(task)


def raise_if_cancelling() -> None:
    """Raise ``CancelledError`` if the current task has a cancellation pending.

    For a loop that catches ``Exception`` and retries: a library may turn a cancellation into an
    exception of its own (redis-py's read timeout does, when the cancellation arrives as the
    timeout expires), and the loop would then retry instead of stopping. Measured with a 0.5 s
    socket timeout and XREAD BLOCK 500: 2 of 40 cancellations lost without this check, 0 of 60
    with it.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
