"""Per-key serialisation of shard operations, without Ray."""

from __future__ import annotations

import asyncio

from marketplace.shards import KeyedLocks


async def test_one_key_is_serialised_and_other_keys_are_not_blocked() -> None:
    locks = KeyedLocks()
    order: list[str] = []
    release = asyncio.Event()

    async def hold(key: str, name: str) -> None:
        async with locks.hold(key):
            order.append(f"{name} in")
            if name == "first":
                await release.wait()
            order.append(f"{name} out")

    first = asyncio.create_task(hold("a", "first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(hold("a", "second"))
    other = asyncio.create_task(hold("b", "other"))
    await asyncio.wait_for(other, 1)
    assert order == ["first in", "other in", "other out"]
    release.set()
    await asyncio.gather(first, second)
    assert order[3:] == ["first out", "second in", "second out"]


async def test_idle_keys_are_forgotten() -> None:
    locks = KeyedLocks()
    for index in range(1000):
        async with locks.hold(f"0x{index:040x}"):
            assert len(locks) == 1
    assert len(locks) == 0

    async def use(key: str) -> None:
        async with locks.hold(key):
            await asyncio.sleep(0.01)

    await asyncio.gather(*(use("same") for _ in range(5)), use("other"))
    assert len(locks) == 0
