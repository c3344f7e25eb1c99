"""TtlCache: entries expire on their own clock, the least recently used go first when full."""

from __future__ import annotations

import pytest

from marketplace.ttl_cache import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_lives_until_its_expiry() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(10, clock=clock)
    cache.put("a", 1, 5.0)
    clock.now += 4.9
    assert cache.get("a") == 1
    clock.now += 0.1
    assert cache.get("a") is None
    assert len(cache) == 0


def test_no_lifetime_means_not_stored() -> None:
    cache: TtlCache[str, int] = TtlCache(10, clock=Clock())
    cache.put("a", 1, 0.0)
    cache.put("b", 1, -3.0)
    assert len(cache) == 0


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: TtlCache[str, int] = TtlCache(2, clock=Clock())
    cache.put("a", 1, 60)
    cache.put("b", 2, 60)
    assert cache.get("a") == 1  # now b is the least recently used
    cache.put("c", 3, 60)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    cache.discard("a")
    assert cache.get("a") is None


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size"):
        TtlCache(0)
