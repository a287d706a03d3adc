"""The prefix cache's lookup (whole entries and shared prefixes), supersession and eviction."""

from __future__ import annotations

import numpy as np

from sparring.agents.prefix_cache import MIN_SHARED, PrefixCache


def _states(ids: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stand-in KV states of one layer, ``[heads=1, length, dim=1]``, holding the ids themselves."""
    column = np.asarray(ids, dtype=float).reshape(1, -1, 1)
    return [(column, -column)]


def test_longest_shorter_prefix_wins_and_lru_evicts():
    cache = PrefixCache(max_tokens=10)
    cache.store([1, 2], _states([1, 2]))
    cache.store([7, 8, 9], _states([7, 8, 9]))
    length, states = cache.lookup([1, 2, 3])
    assert length == 2 and states is not None and states[0][0].ravel().tolist() == [1, 2]
    assert cache.lookup([5]) == (0, None)
    assert cache.lookup([1]) == (0, None)  # a hit must leave at least one token to feed
    cache.store([1, 2, 3, 4], _states([1, 2, 3, 4]))  # supersedes [1, 2]
    assert len(cache) == 2 and cache.lookup([1, 2, 3, 4, 5])[0] == 4
    cache.store([4, 4, 4, 4, 4], _states([4] * 5))  # 3 + 4 + 5 > 10: the least recently used entry goes
    assert cache.lookup([7, 8, 9, 10]) == (0, None) and cache.lookup([1, 2, 3, 4, 5])[0] == 4
    assert cache.hits == 3 and cache.reused_tokens == 10
    cache.clear()
    assert len(cache) == 0 and PrefixCache(0).lookup([1, 2]) == (0, None)


def test_a_shared_prefix_is_cut_out_of_a_longer_entry():
    """Two episodes of one env share their system prompt: the second reuses the first's states for it."""
    system = list(range(100, 100 + MIN_SHARED + 4))
    cache = PrefixCache(max_tokens=1000)
    cache.store([*system, 1, 2, 3], _states([*system, 1, 2, 3]))
    length, states = cache.lookup([*system, 9, 9])
    assert length == len(system)
    assert states is not None and states[0][0].ravel().tolist() == system
    assert states[0][1].ravel().tolist() == [-t for t in system]
    # A prompt that is all shared still leaves its last token to feed.
    assert cache.lookup(system)[0] == len(system) - 1
    # Too short a shared part is no hit; a whole entry of any length is.
    cache.store([5, 6], _states([5, 6]))
    assert cache.lookup([*system[: MIN_SHARED - 1], 0]) == (0, None)
    assert cache.lookup([5, 6, 7])[0] == 2
