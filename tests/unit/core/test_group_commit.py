"""GroupCommit: concurrent writes coalesce into batches, a lone write goes at once, a bad item
fails only its own caller."""

from __future__ import annotations

import asyncio

import pytest

from marketplace.shards import GroupCommit


class Recorder:
    def __init__(self, bad: set[int] | None = None) -> None:
        self.batches: list[list[int]] = []
        self.bad = bad or set()
        self.gate = asyncio.Event()
        self.gate.set()

    async def write(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        await self.gate.wait()
        if self.bad & set(items):
            raise ValueError(f"bad items {sorted(self.bad & set(items))}")
        return [item * 10 for item in items]


async def test_a_lone_write_is_written_at_once_alone() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder.write)
    assert await asyncio.wait_for(group.submit(1), 1) == 10
    assert recorder.batches == [[1]]


async def test_writes_arriving_during_a_batch_go_together_in_the_next() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    group = GroupCommit(recorder.write)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0.01)  # the first batch is being written
    rest = [asyncio.create_task(group.submit(n)) for n in range(2, 7)]
    await asyncio.sleep(0.01)
    recorder.gate.set()
    assert await asyncio.gather(first, *rest) == [10, 20, 30, 40, 50, 60]
    assert recorder.batches == [[1], [2, 3, 4, 5, 6]]
    assert group.batches == 2


async def test_batches_are_bounded() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    group = GroupCommit(recorder.write, max_batch=3)
    tasks = [asyncio.create_task(group.submit(n)) for n in range(7)]
    await asyncio.sleep(0.01)
    recorder.gate.set()
    assert await asyncio.gather(*tasks) == [n * 10 for n in range(7)]
    assert [len(batch) for batch in recorder.batches] == [3, 3, 1]


async def test_a_failing_batch_is_retried_item_by_item_and_fails_only_the_bad_item() -> None:
    recorder = Recorder(bad={3})
    recorder.gate.clear()
    group = GroupCommit(recorder.write)
    tasks = [asyncio.create_task(group.submit(n)) for n in range(1, 5)]
    await asyncio.sleep(0.01)
    recorder.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[:2] == [10, 20] and results[3] == 40
    assert isinstance(results[2], ValueError)
    assert recorder.batches == [[1, 2, 3, 4], [1], [2], [3], [4]]


async def test_a_caller_that_stops_waiting_does_not_withdraw_its_item() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    group = GroupCommit(recorder.write)
    waiting = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    recorder.gate.set()
    assert await asyncio.wait_for(group.submit(2), 1) == 20
    assert recorder.batches == [[1], [2]]
