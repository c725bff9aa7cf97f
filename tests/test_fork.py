"""A process forked while fullrecall's own threads are busy (or have been) carries on in the child.

``os.fork`` (``multiprocessing``'s default on Linux, pre-forking servers) keeps only the thread that
forked: a lock another thread held stays held in the child, and a thread pool there has no threads.
Each test forks a child that uses what its parent made, and fails if the child hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fullrecall import ConversationMemory, PersistentMemory
from fullrecall.errors import StoreError
from fullrecall.stores import open_store

if sys.platform == "win32":  # pragma: no cover
    pytest.skip("Windows does not fork", allow_module_level=True)

fork = multiprocessing.get_context("fork")
run = asyncio.run
LOCKS = (type(threading.Lock()), type(threading.RLock()))


def in_child(fn: Callable[[], Any], timeout: float = 60) -> Any:
    """``fn()``'s result, run in a forked child; the test fails if the child hangs or ``fn`` raises."""
    results = fork.Queue()

    def main() -> None:
        try:
            results.put(("returned", fn()))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            results.put(("raised", f"{type(exc).__name__}: {exc}"))

    child = fork.Process(target=main)
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the forked child was still running after {timeout} s")
    how, value = results.get(timeout=10)
    assert how == "returned", value
    return value


LockPath = tuple[object, tuple[str, ...]]  # (a root object or module, the attribute names from it to a lock)


def locks_of(*objects: object, depth: int = 2) -> Iterator[LockPath]:
    """Every lock the objects hold as an attribute, or that the fullrecall objects they hold do (to ``depth``
    levels), and every lock global of fullrecall's modules, as a path from its root (a child reads the path
    again: what a parent's lock belonged to may have been replaced there).
    """
    seen: set[int] = set()

    def walk(obj: object, path: tuple[str, ...], level: int) -> Iterator[tuple[str, ...]]:
        if id(obj) in seen or not hasattr(obj, "__dict__"):
            return
        seen.add(id(obj))
        for name, value in list(vars(obj).items()):
            if isinstance(value, LOCKS):
                yield (*path, name)
            elif level > 0 and type(value).__module__.startswith("fullrecall"):
                yield from walk(value, (*path, name), level - 1)

    roots = [*objects, *[m for name, m in list(sys.modules.items()) if name.startswith("fullrecall")]]
    for root in roots:
        for path in walk(root, (), 0 if root in sys.modules.values() else depth):
            yield root, path


def lock_at(path: LockPath) -> Any:
    obj, names = path
    for name in names:
        obj = getattr(obj, name)
    return obj


@contextlib.contextmanager
def held(locks: list[LockPath]) -> Iterator[None]:
    """A thread holds every lock of ``locks`` until the caller is done (a busy thread at the fork)."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        objects = [lock_at(path) for path in locks]
        for lock in objects:
            lock.acquire()
        taken.set()
        done.wait(120)
        for lock in reversed(objects):
            lock.release()

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_a_child_forked_after_its_parent_recorded_records_and_retrieves(store_url, default_embedder):
    """The memory's store round trips run on a thread pool: a child forked after the parent had used it got
    the pool without its threads, and its first ``record`` waited for ever.
    """
    store = open_store(store_url)
    try:
        memory = PersistentMemory("ann", "helper", "s1", store=store, embedder=default_embedder)
        run(memory.record([{"role": "user", "content": "My locker code is 4417."}]))
        assert "4417" in run(memory.retrieve("locker code"))

        def child() -> str:
            run(memory.record([{"role": "user", "content": "My bike lock code is 9902."}]))
            return run(memory.retrieve("bike lock code")) + "\n" + run(memory.retrieve("locker code"))

        found = in_child(child)
        assert "9902" in found and "4417" in found
        assert "9902" in run(memory.retrieve("bike lock code"))  # the child's turn, in the store they share
    finally:
        store.close()


def test_locks_other_threads_held_at_the_fork_are_free_in_the_child(store_url, default_embedder):
    """Every lock of the store, the memory and what they hold, and of fullrecall's modules, held by another
    thread while the process forks: the child records, retrieves and can take each of them.
    """
    store = open_store(store_url)
    try:
        memory = PersistentMemory("ann", "helper", "s1", store=store, embedder=default_embedder, warm=False)
        run(memory.record([{"role": "user", "content": "My locker code is 4417."}]))
        run(memory.retrieve("locker code"))
        locks = list(locks_of(memory, store, memory.facts, default_embedder))
        assert len(locks) >= 8  # the store's, the memory pool's, the search pool's, the vectors', ...

        def child() -> list[str]:
            run(memory.record([{"role": "user", "content": "My bike lock code is 9902."}]))
            assert "9902" in run(memory.retrieve("bike lock code"))
            stuck = []
            for path in locks:
                lock = lock_at(path)
                if lock.acquire(timeout=1):
                    lock.release()
                else:
                    stuck.append(".".join([getattr(path[0], "__name__", type(path[0]).__name__), *path[1]]))
            return stuck

        with held(locks):
            assert in_child(child) == []
    finally:
        store.close()


def test_a_child_does_not_wait_for_a_warm_its_parent_had_under_way(tmp_path, default_embedder):
    """A memory's first search waits for its warm under way, on the warming thread; a child forked meanwhile
    has no such thread, and its first search waited for ever.
    """
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        run(PersistentMemory("ann", "helper", "s1", store=store, embedder=default_embedder, warm=False).record(
            [{"role": "user", "content": "My locker code is 4417."}]))
        started, release = threading.Event(), threading.Event()
        store_warm = store.warm

        def warm(scope: Any) -> None:  # the parent's warm, under way until released
            started.set()
            release.wait(120)
            store_warm(scope)

        store.warm = warm  # type: ignore[method-assign]
        memory = PersistentMemory("ann", "helper", "s2", store=store, embedder=default_embedder)
        assert started.wait(30)
        try:
            assert "4417" in in_child(lambda: run(memory.retrieve("locker code")))
        finally:
            release.set()
        assert "4417" in run(memory.retrieve("locker code"))
    finally:
        store.close()


def test_a_conversation_forked_with_its_background_indexer_archives_and_recalls_in_the_child(
        tmp_path, default_embedder):
    """The archive's background indexer is a thread: in a forked child it was not there, and the archive
    refused every write as closed. The child gets its own.
    """
    options = {"background_indexing": True, "max_history_turns": 1, "preserve_recent_messages": 1,
               "summarizer": lambda messages, previous: "summary", "embedding_model": default_embedder}
    conversation = ConversationMemory(f"sqlite:///{tmp_path / 'c.db'}", "talk", **options)
    try:
        run(conversation.add([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]))

        def child() -> tuple[int, str]:
            for i, topic in enumerate(["the harbour ferry timetable", "a recipe for plum jam", "the tax form", "tea"]):
                run(conversation.add([{"role": "user", "content": f"Tell me about {topic}."},
                                      {"role": "assistant", "content": f"Answer {i} about {topic}."}]))
            assert conversation.manager.flush(30)
            return conversation.manager.removed_message_count, str(run(conversation.recall("plum jam recipe")))

        archived, recalled = in_child(child)
        assert archived > 0 and "plum jam" in recalled
    finally:
        conversation.close()


def test_a_server_s_cached_objects_are_built_again_in_a_child_forked_while_a_request_held_one():
    """The MCP server and the HTTP service keep one memory object a conversation, each with its lock: a request
    of the parent holding one at the fork left it held for ever in the child, on an object it may have been
    changing. The child builds each again from the store."""
    from fullrecall.memory._cache import LockedCache

    cache: LockedCache[dict[str, int]] = LockedCache(4)
    item, lock = cache.get("ann", lambda: {"built": 1})
    with lock:  # a request of the parent, under way at the fork

        def child() -> tuple[dict[str, int], bool]:
            again, its_lock = cache.get("ann", lambda: {"built": 2})
            return again, its_lock.acquire(timeout=1)

        assert in_child(child) == ({"built": 2}, True)
    assert cache.get("ann", lambda: {"built": 3})[0] is item  # the parent's is untouched


def test_an_in_memory_store_used_in_a_forked_child_is_refused_there(default_embedder):
    """A child forked from the process holding ``sqlite:///:memory:`` opened a new, empty in-memory store: its
    reads found nothing of the parent's, and what it recorded was lost with it. Now it is told so.
    """
    store = open_store("sqlite:///:memory:")
    try:
        memory = PersistentMemory("ann", "helper", "s1", store=store, embedder=default_embedder)
        run(memory.record([{"role": "user", "content": "My locker code is 4417."}]))

        def child() -> str:
            try:
                run(memory.record([{"role": "user", "content": "My bike lock code is 9902."}]))
            except StoreError as exc:
                return str(exc)
            return "recorded"

        assert "lives in the memory of process" in in_child(child)
        assert "4417" in run(memory.retrieve("locker code"))  # the parent's store is untouched
    finally:
        store.close()
