"""The prefix cache's lookup, supersession and eviction (states are opaque to it)."""

from __future__ import annotations

from sparring.agents.prefix_cache import PrefixCache


def test_longest_shorter_prefix_wins_and_lru_evicts():
    cache = PrefixCache(max_tokens=10)
    cache.store([1, 2], ["a"])
    cache.store([7, 8, 9], ["b"])
    assert cache.lookup([1, 2, 3]) == (2, ["a"])
    assert cache.lookup([1, 2]) == (0, None)  # a hit must leave at least one token to feed
    assert cache.lookup([5]) == (0, None)
    cache.store([1, 2, 3, 4], ["c"])  # supersedes [1, 2]
    assert len(cache) == 2 and cache.lookup([1, 2, 3, 4, 5]) == (4, ["c"])
    cache.store([4, 4, 4, 4, 4], ["d"])  # 3 + 4 + 5 > 10: the least recently used entry goes
    assert cache.lookup([7, 8, 9, 10]) == (0, None) and cache.lookup([1, 2, 3, 4, 5]) == (4, ["c"])
    assert cache.hits == 3 and cache.reused_tokens == 10
    cache.clear()
    assert len(cache) == 0 and PrefixCache(0).lookup([1, 2]) == (0, None)
