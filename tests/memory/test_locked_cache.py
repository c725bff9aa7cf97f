"""The bounded cache servers keep per-conversation memories in (the MCP server, the HTTP service)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fullrecall.memory._cache import LockedCache


@given(size=st.integers(1, 4), keys=st.lists(st.integers(0, 6), max_size=40))
def test_it_keeps_the_most_recently_used_and_tells_what_it_evicts(size, keys):
    evicted: list[int] = []
    cache: LockedCache[str] = LockedCache(size, on_evict=evicted.append)
    builds: list[int] = []
    recent: list[int] = []  # the model: keys, least recently used first
    for key in keys:
        value, lock = cache.get(key, lambda key=key: builds.append(key) or f"memory {key}")
        assert value == f"memory {key}" and isinstance(lock, type(threading.Lock()))
        if key in recent:
            recent.remove(key)
        else:
            assert builds[-1] == key  # built only when missing
        recent.append(key)
        if len(recent) > size:
            assert evicted[-1] == recent.pop(0)
    assert len(cache) == len(recent) <= size
    assert all(cache.peek(k) is not None for k in recent)
    assert len(builds) == len(recent) + len(evicted)


def test_an_object_keeps_its_lock_until_dropped():
    cache: LockedCache[object] = LockedCache(2)
    first = cache.get("a", object)
    assert cache.get("a", object) is first and cache.peek("a") is first
    cache.drop("a")
    assert cache.peek("a") is None and cache.get("a", object)[0] is not first[0]


def test_threads_building_one_key_at_once_all_get_the_same_object():
    cache: LockedCache[object] = LockedCache(8)
    start = threading.Barrier(8)
    got: list[tuple[object, object]] = []

    def build() -> object:
        start.wait()  # every thread builds at the same moment: a race on purpose
        return object()

    threads = [threading.Thread(target=lambda: got.append(cache.get("k", build))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(value) for value, _ in got}) == 1 and len({id(lock) for _, lock in got}) == 1


def test_a_cache_holds_at_least_one():
    with pytest.raises(ValueError, match="at least one"):
        LockedCache(0)
