"""The usage recorder buffers without I/O, writes batches, retries and stays bounded."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from marketplace.identity import api_keys
from marketplace.storage.repositories import api_keys as repo


def _row(n: int = 0) -> repo.UsageRow:
    return (uuid.uuid4(), datetime.now(UTC), "GET", f"/v1/r{n}", 200, "127.0.0.1")


class FakeWriter:
    def __init__(self) -> None:
        self.batches: list[list[repo.UsageRow]] = []
        self.fail = False

    async def __call__(self, pool: Any, rows: list[repo.UsageRow]) -> None:
        if self.fail:
            raise asyncpg.PostgresConnectionError("down")
        self.batches.append(list(rows))


@pytest.fixture
def writer(monkeypatch: pytest.MonkeyPatch) -> FakeWriter:
    fake = FakeWriter()
    monkeypatch.setattr(repo, "insert_usage_batch", fake)
    return fake


def _recorder(**kw: Any) -> api_keys.UsageRecorder:
    options = {"interval_ms": 60_000, "max_rows": 100, **kw}
    return api_keys.UsageRecorder(lambda: None, **options)  # type: ignore[arg-type, return-value]


async def test_add_only_buffers_and_flush_writes_one_batch(writer: FakeWriter) -> None:
    recorder = _recorder()
    rows = [_row(i) for i in range(5)]
    for row in rows:
        recorder.add(row)
    assert writer.batches == [] and recorder.pending == 5
    assert await recorder.flush() == 5
    assert writer.batches == [rows]
    assert await recorder.flush() == 0
    assert len(writer.batches) == 1


async def test_failed_flush_keeps_rows_in_order(writer: FakeWriter) -> None:
    recorder = _recorder()
    first = [_row(1), _row(2)]
    for row in first:
        recorder.add(row)
    writer.fail = True
    assert await recorder.flush() == 0
    later = _row(3)
    recorder.add(later)
    writer.fail = False
    assert await recorder.flush() == 3
    assert writer.batches == [[*first, later]]


async def test_buffer_is_bounded(writer: FakeWriter) -> None:
    recorder = _recorder(max_rows=1000, max_buffer=3)
    rows = [_row(i) for i in range(5)]
    for row in rows:
        recorder.add(row)
    assert recorder.pending == 3 and recorder.dropped == 2
    await recorder.flush()
    assert writer.batches == [rows[2:]]


async def test_background_task_flushes_when_full_and_on_stop(writer: FakeWriter) -> None:
    recorder = _recorder(max_rows=3)
    recorder.start()
    for i in range(3):
        recorder.add(_row(i))
    for _ in range(100):
        if writer.batches:
            break
        await asyncio.sleep(0.01)
    assert [len(b) for b in writer.batches] == [3]
    recorder.add(_row(9))
    await recorder.stop()
    assert [len(b) for b in writer.batches] == [3, 1]
