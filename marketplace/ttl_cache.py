"""A bounded, expiring in-process cache for answers that stay true once given.

Used where a frontend would otherwise ask the same question on every request and the answer can
only be "yes" for good (a user who accepted every required legal version) or until a known time
(a verified session token until its ``exp``). Every frontend keeps its own; none is a source of
truth, and losing one costs a query, never a wrong answer.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """At most ``size`` entries, each until its own expiry (monotonic clock); least recently used
    entries go first when full."""

    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._clock = clock
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, expires = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl_seconds: float) -> None:
        if ttl_seconds <= 0:
            return
        self._entries[key] = (value, self._clock() + ttl_seconds)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def discard(self, key: K) -> None:
        self._entries.pop(key, None)
