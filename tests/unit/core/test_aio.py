"""The event wait the long-running loops use keeps its timeout and, above all, cancellation."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from marketplace.aio import wait_event


async def test_returns_when_set_and_times_out_otherwise() -> None:
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, event.set)
    await wait_event(event, 5)
    with pytest.raises(TimeoutError):
        await wait_event(asyncio.Event(), 0.01)


async def test_a_cancellation_racing_the_wake_up_is_never_lost() -> None:
    # The race of CPython gh-86296: the event is set and the waiting task cancelled in the same
    # loop iteration. Whatever wins, the task must end cancelled, not loop on.
    for _ in range(200):
        event = asyncio.Event()

        async def loop_until_cancelled(event: asyncio.Event = event) -> None:
            while True:
                with contextlib.suppress(TimeoutError):
                    await wait_event(event, 10)
                event.clear()

        task = asyncio.create_task(loop_until_cancelled())
        await asyncio.sleep(0)
        event.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)


async def test_stopping_a_task_keeps_the_callers_own_cancellation() -> None:
    from marketplace.aio import cancel_and_wait

    forever = asyncio.create_task(asyncio.sleep(3600))
    await cancel_and_wait(forever)
    assert forever.cancelled()

    # A stop bounded by a timeout: the task ignores its cancellations for a while; the bound must
    # end the stop with TimeoutError (which the app's context stop logs), not be swallowed into
    # a stop that seems to have succeeded.
    async def stubborn() -> None:
        for _ in range(10):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await cancel_and_wait(task)
    assert task.done()


async def test_a_task_that_fails_while_stopping_raises_its_error() -> None:
    from marketplace.aio import cancel_and_wait

    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)


async def test_cleanup_of_a_task_being_cancelled_runs_to_its_end() -> None:
    # A `finally` that stops a helper task and then closes more (the indexer: heads, RPC client,
    # pool) runs while its own task is being cancelled; stopping the helper must not cut it short.
    from marketplace.aio import cancel_and_wait

    closed: list[str] = []

    async def owner() -> None:
        helper = asyncio.create_task(asyncio.sleep(3600))
        try:
            await asyncio.sleep(3600)
        finally:
            await cancel_and_wait(helper)
            closed.append("helper")
            await asyncio.sleep(0)
            closed.append("pool")

    task = asyncio.create_task(owner())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == ["helper", "pool"]
