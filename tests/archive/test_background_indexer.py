"""Background indexing: the writer hands batches over and returns; the worker embeds them once writes pause,
within a bounded delay, and a process killed before its worker got to them loses nothing.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_archive_write_path import GatedEmbedder, HashEmbedder, removed, words

from fullrecall.archive import Archive
from fullrecall.archive.indexer import BackgroundIndexer, Job
from fullrecall.stores import Scope


class Recorder:
    """An ``index`` callable that records each call's batch ids and signals the first."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.called = threading.Event()

    def __call__(self, jobs: list[Job]) -> None:
        self.calls.append([batch_id for batch_id, _ in jobs])
        self.called.set()


def test_writes_back_to_back_are_embedded_together_once_they_pause():
    index = Recorder()
    indexer = BackgroundIndexer(index, delay=0.5, max_delay=30)
    try:
        for k in range(5):
            indexer.submit((f"b{k}", [k]))
        assert index.called.wait(10)
        assert indexer.flush(timeout=10)
        assert index.calls == [[f"b{k}" for k in range(5)]], "one embedding after the writes, not one each"
    finally:
        indexer.close()


def test_a_full_batch_is_embedded_without_waiting_for_writes_to_pause():
    index = Recorder()
    indexer = BackgroundIndexer(index, batch_size=4, delay=60, max_delay=60)
    try:
        for k in range(4):
            indexer.submit((f"b{k}", [k]))
        assert index.called.wait(10), "a full batch waited for a pause"
        assert index.calls == [["b0", "b1", "b2", "b3"]]
    finally:
        indexer.close()


def test_a_batch_waits_at_most_max_delay_while_writes_keep_coming():
    index = Recorder()
    indexer = BackgroundIndexer(index, delay=60, max_delay=0.2)  # writes "never" pause
    try:
        started = time.monotonic()
        indexer.submit(("b0", [0]))
        assert index.called.wait(10), "the batch was never embedded"
        assert time.monotonic() - started >= 0.2
    finally:
        indexer.close()


def test_flush_embeds_at_once_and_a_sleeping_worker_wakes_for_a_submit():
    index = Recorder()
    indexer = BackgroundIndexer(index, delay=60, max_delay=60)
    try:
        indexer.submit(("b0", [0]))
        assert indexer.flush(timeout=10) and index.calls == [["b0"]]
    finally:
        indexer.close()
    index = Recorder()
    indexer = BackgroundIndexer(index, delay=0.01, idle_after=0)  # asleep from the start: only a submit wakes it
    try:
        time.sleep(0.05)
        indexer.submit(("b1", [1]))
        assert index.called.wait(10), "a sleeping worker was not woken"
    finally:
        indexer.close()


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), max_size=30), batch_size=st.integers(1, 64),
       flush_every=st.integers(1, 10))
def test_every_batch_is_indexed_once_in_order_and_calls_stay_within_the_batch_size(sizes, batch_size, flush_every):
    calls: list[list[Job]] = []
    indexer = BackgroundIndexer(calls.append, batch_size=batch_size, delay=0.001, max_delay=0.005)
    try:
        for k, n in enumerate(sizes):
            indexer.submit((f"b{k}", list(range(n))))
            if k % flush_every == 0:
                assert indexer.flush(timeout=10)
    finally:
        indexer.close()
    assert [batch_id for call in calls for batch_id, _ in call] == [f"b{k}" for k in range(len(sizes))]
    for call in calls:
        assert len(call) == 1 or sum(len(messages) for _, messages in call) <= batch_size


# -- several processes ------------------------------------------------------------------------------

def killed_writer(url: str, scope: Scope, n: int, ready: Any, start: Any, written: Any) -> None:
    """Background writes whose embedder never answers; the parent kills this process once they returned."""
    archive = Archive(url, scope, embedding_model=GatedEmbedder(), background_indexing=True)
    ready.release()
    start.wait(60)
    for k in range(n):
        at = 1000 + 2 * k
        archive.write(removed([words(at), words(at + 1)], at))
    written.set()
    time.sleep(120)  # killed in here, the worker stuck in the embedder


def test_a_writer_killed_after_its_background_writes_returned_loses_nothing_nor_does_one_beside_it(store_url):
    """Two processes write one conversation in the background at once; one is killed (SIGKILL) before its
    worker embedded anything: every message of both is stored, and the next archive embeds what was left."""
    scope, n = Scope(session_id="killed"), 10
    ctx = multiprocessing.get_context("spawn")
    ready, start, written = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    worker = ctx.Process(target=killed_writer, args=(store_url, scope, n, ready, start, written))
    worker.start()
    try:
        assert ready.acquire(timeout=120), "the other writer did not start"
        start.set()
        archive = Archive(store_url, scope, embedding_model=HashEmbedder(), background_indexing=True)
        for k in range(n):  # while the other process writes
            archive.write(removed([words(2 * k), words(2 * k + 1)], 2 * k))
        assert archive.flush(timeout=60)
        archive.close()
        assert written.wait(120), "the other writer did not write"
    finally:
        worker.kill()
        worker.join(30)
    mine, theirs = [f"m{i}" for i in range(2 * n)], [f"m{1000 + i}" for i in range(2 * n)]
    archive = Archive(store_url, scope, embedding_model=HashEmbedder())
    assert {m.id for m in archive.store.get(scope, mine + theirs)} == set(mine + theirs), "a returned write was lost"
    assert set(archive.store.get_vectors(scope, mine + theirs)) == set(mine)
    assert archive.get_memory_usage_stats()["unindexed_count"] == 2 * n
    while archive.catch_up():
        pass
    assert set(archive.store.get_vectors(scope, mine + theirs)) == set(mine + theirs)
    assert archive.get_memory_usage_stats()["unindexed_count"] == 0


class _StartedEmbedder(GatedEmbedder):
    """Says when an embedding began, then waits for the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()

    def embed(self, texts: Any) -> Any:
        self.started.set()
        return super().embed(texts)


def test_a_forget_while_the_worker_embeds_leaves_no_forgotten_vector_on_the_conversation_begun_again(store_url):
    """The worker embeds a conversation's messages; meanwhile it is forgotten and begun again under the same
    session id, with new messages under the same ids (m0, m1, ...): the forgotten words' vectors must not go to
    the new messages (they did: a question about the forgotten words found the new ones by vector)."""
    import numpy as np

    slow, plain = _StartedEmbedder(), HashEmbedder()
    scope = Scope(user_id="alice", session_id="again")
    old = Archive(store_url, scope, embedding_model=slow, background_indexing=True)
    try:
        old.write(removed(["my bank PIN is 4921", "I live at 12 Elm street"], 0))
        assert slow.started.wait(30)  # the worker is embedding the first conversation's words
        assert old.store.forget(Scope(user_id="alice"))["messages"] == 2
        new = Archive(old.store, scope, embedding_model=plain)
        new.write(removed(["let us talk about the weather", "sunny today"], 0))
        own = new.store.get_vectors(scope, ["m0", "m1"])  # embedded as it was written
        assert set(own) == {"m0", "m1"}
        slow.gate.set()
        assert old.flush(timeout=30)
        held = new.store.get_vectors(scope, ["m0", "m1"])
        assert all(np.array_equal(held[i], own[i]) for i in ("m0", "m1"))
    finally:
        old.close()
