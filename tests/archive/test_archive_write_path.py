"""The archive's write path: nothing that grows is rewritten, no update is lost, few round trips,
indexing that never blocks the writer. Every backend, several processes where it matters.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import threading
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fullrecall.archive import Archive
from fullrecall.archive.archive import END
from fullrecall.bench.archive import CountingStore
from fullrecall.messages import parse_messages
from fullrecall.stores import Scope, open_store
from fullrecall.window import RemovedMessages


class HashEmbedder:
    """A tiny deterministic embedder (words hashed into 32 dimensions): cheap in any process."""

    name = "test-hash-32"
    dimension = 32

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.batches: list[int] = []

    def embed(self, texts: Any) -> np.ndarray:
        texts = list(texts)
        if self.fail:
            raise ConnectionError("embedding service unavailable")
        self.batches.append(len(texts))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % self.dimension] += 1.0
        out[:, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def removed(texts: list[str], start: int, *, summary: str | None = None, summary_id: str | None = None,
            replaced: tuple[str, str] | None = None, prefix: str = "") -> RemovedMessages:
    """An event as a manager emits it: messages at positions ``start...``, with their summary."""
    _, msgs = parse_messages([{"role": "user", "content": [{"text": t}]} for t in texts])
    batch = [replace(m, position=start + i, id=f"{prefix}m{start + i}") for i, m in enumerate(msgs)]
    summary_msg = replaced_msg = None
    if summary is not None:
        _, (summary_msg,) = parse_messages([{"role": "user", "content": [{"text": summary}]}])
        summary_msg = replace(summary_msg, id=summary_id or f"s{start}")
    if replaced is not None:
        _, (replaced_msg,) = parse_messages([{"role": "user", "content": [{"text": replaced[1]}]}])
        replaced_msg = replace(replaced_msg, id=replaced[0])
    return RemovedMessages(batch, reason="summarized" if summary else "trimmed", shape="converse",
                           summary=summary_msg, replaced_summary=replaced_msg)


def words(i: int) -> str:
    return f"message {i} about topic{i % 7} and invoice {1000 + i}"


# -- summaries ------------------------------------------------------------------------------------

def test_a_rerun_stores_one_summary_once_and_a_fold_names_the_earlier(store_url):
    scope = Scope(session_id="s")
    archive = Archive(store_url, scope, embedding_model=HashEmbedder())
    first = removed([words(i) for i in range(4)], 0, summary="S1", summary_id="sum-1")
    archive.write(first)
    archive.write(first)  # a crash after the write, before the manager saw it return: the same event again
    rerun = Archive(store_url, scope, embedding_model=HashEmbedder())  # and again from a restarted process
    rerun.write(first)
    rerun.write(removed([words(i) for i in range(4, 8)], 4, summary="S2", summary_id="sum-2", replaced=("sum-1", "S1")))
    summaries = rerun.summaries()
    assert [(s["id"], s["text"], s["covers"], s["folds"]) for s in summaries] == [
        ("sum-1", "S1", [0, 3], None), ("sum-2", "S2", [4, 7], "S1")]
    assert rerun.store.count(scope) == 8
    assert rerun.get_memory_usage_stats()["summary_count"] == 2


def test_a_summary_is_one_new_record_never_a_rewrite_of_the_earlier_ones(tmp_path):
    store = CountingStore(open_store(f"sqlite:///{tmp_path}/a.db"))
    archive = Archive(store, Scope(session_id="s"), embedding_model=HashEmbedder())
    for k in range(20):
        archive.write(removed([words(2 * k), words(2 * k + 1)], 2 * k, summary=f"S{k}", summary_id=f"sum-{k}"))
    store.reset()
    archive.write(removed([words(40)], 40, summary="S20", summary_id="sum-20"))
    assert store.calls["put_record"] == 1 and not store.calls["get_records"] and not store.calls["get_state"]
    assert not store.calls["put_state"]
    assert [s["text"] for s in archive.summaries()] == [f"S{k}" for k in range(21)]


def summarize_worker(url: str, scope: Scope, worker: int, n: int, ready: Any, start: Any) -> None:
    archive = Archive(url, scope, embedding_model=HashEmbedder())
    ready.release()
    start.wait(60)
    for k in range(n):
        at = 1000 * worker + 2 * k
        archive.write(removed([words(at), words(at + 1)], at, summary=f"w{worker} S{k}", summary_id=f"w{worker}-{k}"))


def spawn_all(target: Any, args: list[tuple[Any, ...]]) -> None:
    """Run ``target`` in one process per argument tuple, started together; each must exit cleanly."""
    ctx = multiprocessing.get_context("spawn")
    ready, start = ctx.Semaphore(0), ctx.Event()
    workers = [ctx.Process(target=target, args=(*a, ready, start)) for a in args]
    for p in workers:
        p.start()
    for _ in workers:
        assert ready.acquire(timeout=120), "a worker did not start"
    start.set()
    for p in workers:
        p.join(180)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"


def test_two_processes_summarizing_lose_nothing(store_url):
    scope, n = Scope(session_id="shared"), 15
    spawn_all(summarize_worker, [(store_url, scope, w, n) for w in range(2)])
    archive = Archive(store_url, scope, embedding_model=HashEmbedder())
    assert sorted(s["id"] for s in archive.summaries()) == sorted(f"w{w}-{k}" for w in range(2) for k in range(n))
    assert archive.store.count(scope) == 2 * 2 * n
    assert archive.get_memory_usage_stats()["unindexed_count"] == 0


# -- waiting for embeddings -------------------------------------------------------------------------

def outage_worker(url: str, scope: Scope, worker: int, n: int, ready: Any, start: Any) -> None:
    archive = Archive(url, scope, embedding_model=HashEmbedder(fail=True))
    ready.release()
    start.wait(60)
    for k in range(n):
        at = 1000 * worker + 3 * k
        archive.write(removed([words(at + j) for j in range(3)], at))


def test_an_outage_in_two_processes_loses_no_waiting_message_and_catches_up_in_bounded_batches(store_url):
    scope, n = Scope(session_id="outage"), 10
    spawn_all(outage_worker, [(store_url, scope, w, n) for w in range(2)])
    embedder = HashEmbedder()
    archive = Archive(store_url, scope, embedding_model=embedder, catch_up_batch=8)
    assert archive.get_memory_usage_stats()["unindexed_count"] == 2 * 3 * n
    ids = [f"m{1000 * w + i}" for w in range(2) for i in range(3 * n)]
    assert archive.store.get_vectors(scope, ids) == {}
    while archive.catch_up():
        pass
    assert set(archive.store.get_vectors(scope, ids)) == set(ids)
    assert max(embedder.batches) <= 8 and archive.get_memory_usage_stats()["unindexed_count"] == 0


def test_during_an_outage_a_write_adds_one_record_and_retries_nothing(tmp_path):
    store = CountingStore(open_store(f"sqlite:///{tmp_path}/a.db"))
    embedder = HashEmbedder(fail=True)
    archive = Archive(store, Scope(session_id="s"), embedding_model=embedder, catch_up_batch=4)
    for k in range(10):
        archive.write(removed([words(2 * k), words(2 * k + 1)], 2 * k))
    store.reset()
    archive.write(removed([words(20), words(21)], 20))
    assert dict(store.calls) == {"append": 1, "put_record": 1}  # no read, no rewrite of the backlog
    embedder.fail = False
    archive.write(removed([words(22)], 22))  # the embedder is back: this write, then one bounded batch
    assert embedder.batches == [1, 4]
    assert archive.get_memory_usage_stats()["unindexed_count"] == 22 - 4


def test_while_the_embedding_service_is_down_recall_finds_archived_messages_by_keyword(store_url):
    """The README's promise: a message archived while embeddings fail is found by keyword. The question cannot
    be embedded either then: recall answers from the keyword side alone (it raised the embedder's error)."""
    embedder = HashEmbedder(fail=True)
    archive = Archive(store_url, Scope(session_id="down"), embedding_model=embedder)
    archive.write(removed([words(i) for i in range(6)], 0))
    assert archive.get_memory_usage_stats()["unindexed_count"] == 6
    found = archive.recall(words(4), radius=0, top_k=1)
    assert [h.id for h in found.hits] == ["m4"]
    embedder.fail = False  # back: the next search uses vectors again, and finds the same
    assert [h.id for h in archive.recall(words(4), radius=0, top_k=1).hits] == ["m4"]


class BuggyQueryEmbedder(HashEmbedder):
    """Embeds messages, but its query path has a bug (a ``TypeError``), not an outage."""

    def embed_queries(self, texts: Any) -> np.ndarray:
        raise TypeError("embed_queries() got an unexpected keyword")


def test_a_bug_in_the_embedder_reaches_the_caller_of_search_and_an_outage_does_not(store_url):
    """Only an outage (fullrecall's ``EmbeddingError``, or an ``OSError`` such as ``ConnectionError``) makes a
    search answer from keywords alone. A search caught any exception there, so an embedder's bug showed only as
    weaker results and a warning."""
    archive = Archive(store_url, Scope(session_id="bug"), embedding_model=BuggyQueryEmbedder())
    archive.write(removed([words(i) for i in range(6)], 0))
    with pytest.raises(TypeError, match="unexpected keyword"):
        archive.recall(words(4), radius=0, top_k=1)
    down = Archive(store_url, Scope(session_id="down"), embedding_model=HashEmbedder())
    down.write(removed([words(i) for i in range(6)], 0))
    down.search_engine.embedder.fail = True
    assert [h.id for h in down.recall(words(4), radius=0, top_k=1).hits] == ["m4"]


class BrokenVectorsEmbedder(HashEmbedder):
    """Answers, but with vectors no store takes (NaN, or one row short) until ``broken`` is cleared."""

    def __init__(self, broken: str) -> None:
        super().__init__()
        self.broken = broken

    def embed(self, texts: Any) -> np.ndarray:
        out = super().embed(texts)
        if self.broken == "nan":
            out[0, 0] = np.nan
        return out[:-1] if self.broken == "short" else out


@pytest.mark.parametrize("broken", ["nan", "short"])
def test_an_embedder_answering_unusable_vectors_only_delays_search(tmp_path, broken):
    from fullrecall.window import SlidingWindowConversationManager

    embedder = BrokenVectorsEmbedder(broken)
    archive = Archive(f"sqlite:///{tmp_path}/a.db", Scope(session_id="s"), embedding_model=embedder)
    manager = SlidingWindowConversationManager(window_size=2, on_remove=archive.write)
    messages = [{"role": r, "content": [{"text": words(i)}]} for i, r in enumerate(["user", "assistant"] * 3)]
    manager.apply_management(messages)  # the text is durable: the window shrinks, the vectors wait
    assert len(messages) == 2 and archive.get_memory_usage_stats()["unindexed_count"] == 4
    assert [m.position for m in archive.get(0, 3)] == [0, 1, 2, 3]
    embedder.broken = ""
    assert archive.catch_up() == 4
    assert set(archive.store.get_vectors(archive.scope, [f"m{i}" for i in range(4)])) == {"m0", "m1", "m2", "m3"}


def test_messages_reusing_one_metadata_id_are_each_archived_and_a_rerun_stores_them_once(store_url):
    from fullrecall.window import SlidingWindowConversationManager

    archive = Archive(store_url, Scope(session_id="s"), embedding_model=HashEmbedder())
    events = []
    manager = SlidingWindowConversationManager(window_size=2, on_remove=events.append)
    manager.add_removal_listener(archive.write)
    messages = [{"role": r, "content": [{"text": words(i)}], "metadata": {"id": "copied"}}
                for i, r in enumerate(["user", "assistant"] * 3)]
    manager.apply_management(messages)
    assert len(messages) == 2
    assert [m.text.split(": ", 1)[1] for m in archive.get(0, 3)] == [words(i) for i in range(4)]
    archive.write(events[0])  # a retry of the same removal
    assert archive.get_memory_usage_stats()["message_count"] == 4
    assert len(archive.store.get_vectors(archive.scope, [m.id for m in archive.get(0, 3)])) == 4


# -- round trips and O(1) stats -------------------------------------------------------------------

def test_a_write_is_two_round_trips_and_stats_read_no_archived_message(store_url):
    store = CountingStore(open_store(store_url))
    archive = Archive(store, Scope(session_id="s"), embedding_model=HashEmbedder())
    for k in range(50):
        archive.write(removed([words(4 * k + j) for j in range(4)], 4 * k))
    store.reset()
    archive.write(removed([words(200 + j) for j in range(4)], 200))
    assert dict(store.calls) == {"append": 1, "set_vectors": 1}
    store.reset()
    archive.write(removed([words(204)], 204, summary="S", summary_id="s204"))
    assert dict(store.calls) == {"append": 1, "set_vectors": 1, "put_record": 1}  # + the summary's own record
    store.reset()
    stats = archive.get_memory_usage_stats()
    assert (stats["message_count"], stats["oldest_position"], stats["newest_position"]) == (205, 0, 204)
    assert store.read_messages <= 2 and store.calls["stats"] == 1


def test_memory_limit_calls_stats_once_a_write_and_keeps_under_the_limit(store_url):
    store = CountingStore(open_store(store_url))
    archive = Archive(store, Scope(session_id="s"), embedding_model=HashEmbedder(),
                      max_memory_archived_messages=40_000)
    total = 0
    for k in range(60):
        store.reset()
        archive.write(removed([words(3 * k + j) * 3 for j in range(3)], 3 * k))
        total += 3
        assert store.calls["stats"] <= 1
    stats = archive.get_memory_usage_stats()
    assert stats["evicted_count"] > 0 and stats["evicted_count"] + stats["message_count"] == total
    assert stats["text_memory"] + stats["embedding_memory"] <= 40_000
    if stats["message_count"]:  # PostgreSQL's index pages alone can outgrow the limit: then nothing stays
        assert stats["oldest_position"] == stats["evicted_count"] and stats["newest_position"] == total - 1
        assert stats["total_memory"] <= 40_000


def test_memory_limit_holds_after_a_huge_message_behind_many_small_ones(store_url):
    """One huge message puts the archive over the limit: one write evicts as many small old ones as it takes
    (it read 2n + 64 of them, n from the average size the huge one inflates, and left the archive over)."""
    archive = Archive(store_url, Scope(session_id="s"), embedding_model=HashEmbedder())
    archive.write(removed([f"small note {i}" for i in range(600)], 0))
    archive.write(removed(["huge " + "x" * 200_000], 600))
    before = archive.get_memory_usage_stats()
    archive.max_memory_archived_messages = before["total_memory"] - 60_000
    archive.write(removed(["one more small note"], 601))
    after = archive.get_memory_usage_stats()
    freed = before["text_memory"] + before["embedding_memory"] - after["text_memory"] - after["embedding_memory"]
    assert freed >= 60_000 - 500  # the excess, less what the new note added
    assert 0 < after["evicted_count"] < 600 and after["newest_position"] == 601  # the newest and the huge one stay
    assert after["evicted_count"] + after["message_count"] == 602


def evict_worker(url: str, scope: Scope, worker: int, n: int, ready: Any, start: Any) -> None:
    archive = Archive(url, scope, embedding_model=HashEmbedder(), max_num_archived_messages=10)
    ready.release()
    start.wait(60)
    for k in range(n):
        archive.write(removed([words(2 * (2 * k + worker)), words(2 * (2 * k + worker) + 1)], 2 * (2 * k + worker)))


def test_two_processes_evicting_agree_on_the_counts(tmp_path):
    url, scope, n = f"sqlite:///{tmp_path}/a.db", Scope(session_id="s"), 20
    spawn_all(evict_worker, [(url, scope, w, n) for w in range(2)])
    stats = Archive(url, scope, embedding_model=HashEmbedder()).get_memory_usage_stats()
    assert stats["message_count"] <= 12 and stats["newest_position"] == 4 * n - 1
    assert stats["evicted_count"] + stats["message_count"] == 4 * n


# -- background indexing ----------------------------------------------------------------------------

class GatedEmbedder(HashEmbedder):
    """Embeds only once the gate opens (a slow or busy embedding service)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def embed(self, texts: Any) -> np.ndarray:
        assert self.gate.wait(30)
        return super().embed(texts)


def test_background_indexing_returns_before_vectors_and_flush_waits_for_them(store_url):
    embedder = GatedEmbedder()
    scope = Scope(session_id="bg")
    archive = Archive(store_url, scope, embedding_model=embedder, background_indexing=True, catch_up_batch=64)
    try:
        for k in range(10):
            archive.write(removed([words(3 * k + j) for j in range(3)], 3 * k))  # returns with the embedder stuck
        assert [h.id for h in archive.store.search_text(scope, ["invoice", "1017"], 3)][:1] == ["m17"]  # at once
        assert archive.get_memory_usage_stats()["unindexed_count"] == 30  # a crash now: the store knows
        embedder.gate.set()
        assert archive.flush(timeout=30)
        ids = [f"m{i}" for i in range(30)]
        assert set(archive.store.get_vectors(scope, ids)) == set(ids)
        assert archive.get_memory_usage_stats()["unindexed_count"] == 0
        assert len(embedder.batches) < 10, "queued writes are embedded together"
        assert archive.recall("invoice 1017", radius=0, top_k=1).hits[0].id == "m17"
    finally:
        archive.close()


def test_background_writes_become_vector_searchable_within_a_bounded_delay(tmp_path):
    scope = Scope(session_id="bg")
    archive = Archive(f"sqlite:///{tmp_path}/a.db", scope, embedding_model=HashEmbedder(), background_indexing=True)
    try:
        archive.write(removed([words(0)], 0))
        deadline = time.monotonic() + 10
        while not archive.store.get_vectors(scope, ["m0"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert set(archive.store.get_vectors(scope, ["m0"])) == {"m0"}
    finally:
        archive.close()
    with pytest.raises(RuntimeError, match="closed"):
        archive.write(removed([words(1)], 1))
    assert archive.store.count(scope) == 1  # refused before anything was written


def test_the_manager_archives_in_the_background_and_recalls_after_flush(tmp_path):
    from fullrecall.archive import SemanticSummarizingConversationManager

    manager = SemanticSummarizingConversationManager(
        summarizer=lambda m, p: "summary", preserve_recent_messages=2, store=f"sqlite:///{tmp_path}/a.db",
        embedding_model=HashEmbedder(), background_indexing=True)
    messages = [{"role": r, "content": [{"text": words(i) + (" REF-4821" if i == 2 else "")}]}
                for i, r in enumerate(["user", "assistant"] * 6)]
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert manager.flush(timeout=30)
    stats = manager.get_memory_usage_stats()
    assert stats["message_count"] == manager.removed_message_count > 2 and stats["unindexed_count"] == 0
    assert stats["embedding_memory"] == manager.removed_message_count * HashEmbedder.dimension * 4
    assert manager.recall("REF-4821", radius=0).hits[0].position == 2
    manager.archive.close()


def test_in_the_background_batches_an_outage_left_are_embedded_once_the_embedder_is_back(tmp_path):
    embedder = HashEmbedder(fail=True)
    archive = Archive(f"sqlite:///{tmp_path}/a.db", Scope(session_id="s"), embedding_model=embedder,
                      background_indexing=True)
    for k in range(3):
        archive.write(removed([words(2 * k), words(2 * k + 1)], 2 * k))
    assert archive.flush(timeout=30) and archive.get_memory_usage_stats()["unindexed_count"] == 6
    embedder.fail = False
    assert archive.catch_up() == 6  # on demand: nothing of these is queued any more
    archive.write(removed([words(6), words(7)], 6))
    assert archive.flush(timeout=30)
    embedder.fail = True
    archive.write(removed([words(8)], 8))
    assert archive.flush(timeout=30) and archive.get_memory_usage_stats()["unindexed_count"] == 1
    embedder.fail = False
    archive.write(removed([words(9)], 9))  # a later write that embeds takes the waiting batch too
    assert archive.flush(timeout=30) and archive.get_memory_usage_stats()["unindexed_count"] == 0
    assert len(archive.store.get_vectors(archive.scope, [f"m{i}" for i in range(10)])) == 10
    archive.close()


def test_in_the_background_the_memory_limit_holds_once_flush_returns(tmp_path):
    limit = 4000
    archive = Archive(f"sqlite:///{tmp_path}/a.db", Scope(session_id="s"), embedding_model=HashEmbedder(),
                      background_indexing=True, max_memory_archived_messages=limit)
    for k in range(20):
        archive.write(removed([words(2 * k), words(2 * k + 1)], 2 * k))
    assert archive.flush(timeout=30)
    stats = archive.get_memory_usage_stats()
    assert stats["total_memory"] <= limit and stats["newest_position"] == 39 and stats["unindexed_count"] == 0
    assert stats["evicted_count"] + stats["message_count"] == 40
    archive.close()


def test_a_batch_submitted_while_the_indexer_closes_is_refused_or_indexed_never_stranded():
    from fullrecall.archive.indexer import BackgroundIndexer

    busy, release, indexed = threading.Event(), threading.Event(), []

    def index(jobs):
        busy.set()
        release.wait(10)
        indexed.extend(batch_id for batch_id, _ in jobs)

    indexer = BackgroundIndexer(index)
    indexer.submit(("a", [1]))
    assert busy.wait(10)
    closing = threading.Thread(target=indexer.close)
    closing.start()  # the worker is still busy: the stop mark is queued, the thread alive
    time.sleep(0.2)
    try:
        indexer.submit(("b", [2]))
        refused = False
    except RuntimeError:
        refused = True
    release.set()
    closing.join(10)
    assert indexer.flush(timeout=5), "a batch queued behind the stop mark is never taken"
    assert indexed == (["a"] if refused else ["a", "b"])


# -- the stored row ---------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(timestamp=st.floats(min_value=1.0, max_value=4e10), role=st.sampled_from(["user", "assistant"]))
def test_a_row_is_indexed_with_the_utc_date_of_its_message(timestamp, role):
    from fullrecall.archive.archive import message_record

    _, (msg,) = parse_messages([{"role": role, "content": [{"text": "hello"}]}])
    row = message_record(replace(msg, timestamp=timestamp, position=0), "converse")
    assert row.text.startswith(f"{role} ({time.strftime('%Y-%m-%d', time.gmtime(timestamp))}): hello")
    assert row.created_at == timestamp


class EvictingStore(CountingStore):
    """A real store where another writer evicts one of this writer's messages just before each of its
    ``set_vectors`` calls, as long as ``evict`` names one."""

    def __init__(self, inner: Any, other: Any, evict: list[str]) -> None:
        super().__init__(inner)
        self.other, self.evict = other, evict

    def set_vectors(self, scope: Scope, ids: Any, *args: Any, **kwargs: Any) -> Any:
        if self.evict:
            self.other.delete(scope, [self.evict.pop(0)])
        return self.inner.set_vectors(scope, ids, *args, **kwargs)


def test_vectors_are_stored_while_another_writer_keeps_evicting(store_url):
    """Another writer evicts a message before the write stores its vectors: the vectors of those left are stored
    and the write returns (a ValueError came out of it, after its messages were committed, and a background
    batch stayed waiting; the store now drops the evicted message's vector, see Store.set_vectors)."""
    scope = Scope(session_id="s")
    other = open_store(store_url)
    store = EvictingStore(open_store(store_url), other, ["m0"])
    archive = Archive(store, scope, embedding_model=HashEmbedder())
    archive.write(removed([words(i) for i in range(6)], 0))
    left = [m.id for m in other.range(scope, 0, END)]
    assert left == ["m1", "m2", "m3", "m4", "m5"] and set(other.get_vectors(scope, left)) == set(left)
    assert archive.get_memory_usage_stats()["unindexed_count"] == 0
    store.inner.close()
    other.close()


def test_a_text_the_embedding_model_refuses_leaves_only_itself_without_vectors():
    """An OpenAI-compatible peer refuses (HTTP 400) any request holding a text over its length limit: the other
    messages of the batch get their vectors, and a catch-up asks again for that one text alone (the whole batch
    stayed without vectors, and each catch-up sent it again, failing, for good)."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
    from summarizer_peers import Reply, ScriptedServer

    from fullrecall.embeddings import load_embedder

    asked: list[int] = []

    def answer(body: dict[str, Any]) -> Reply:
        texts = body["input"]
        asked.append(len(texts))
        if any(len(t) > 2000 for t in texts):
            return Reply(status=400, body=b'{"error": {"message": "maximum context length is 512 tokens"}}')
        data = [{"index": i, "embedding": [1.0, float(len(t)), 0.5, 0.25]} for i, t in enumerate(texts)]
        return Reply(body=json.dumps({"data": data}).encode())

    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        server.script(*[answer] * 40)
        embedder = load_embedder("openai:m", embedding_dimensions=4, base_url=server.base_url, api_key="k")
        archive = Archive("sqlite:///:memory:", Scope(session_id="s"), embedding_model=embedder)
        texts = [words(0), words(1), "pasted log " + "x" * 5000, words(3), words(4)]
        archive.write(removed(texts, 0))
        vectors = archive.store.get_vectors(archive.scope, [f"m{i}" for i in range(5)])
        assert set(vectors) == {"m0", "m1", "m3", "m4"}
        assert archive.get_memory_usage_stats()["unindexed_count"] >= 1
        asked.clear()
        assert archive.catch_up() == 0 and asked == [1]  # the refused text alone, not the batch again
        assert archive.get_memory_usage_stats()["unindexed_count"] == 1
        assert [h.id for h in archive.search_engine.search("pasted log", top_k=1)] == ["m2"]  # by its words
    finally:
        server.close()


# -- index text --------------------------------------------------------------------------------------

HALF_EMOJI = '{"text": "great \\ud83d"}'  # arguments escaping half a surrogate pair, as a model cutting an emoji writes


@pytest.mark.parametrize("call", [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "post", "arguments": HALF_EMOJI}}]},
    {"type": "function_call", "call_id": "c1", "name": "post", "arguments": HALF_EMOJI},
], ids=["chat-completions", "responses"])
@pytest.mark.parametrize("kind", ["sliding", "summarizing"])
def test_a_tool_call_whose_arguments_escape_half_an_emoji_is_archived_verbatim(store_url, call, kind):
    """The message is storable JSON; the index text decoded from its arguments holds a lone surrogate, which a
    store refuses: that text (and an extractive summary quoting it) reads it as U+FFFD, the message is kept as given."""
    import copy

    from fullrecall.window import SlidingWindowConversationManager, SummarizingConversationManager

    archive = Archive(store_url, Scope(session_id="s"), embedding_model=HashEmbedder())
    manager = SlidingWindowConversationManager(window_size=2) if kind == "sliding" else \
        SummarizingConversationManager(preserve_recent_messages=1, max_history_turns=1)
    manager.add_removal_listener(archive.write)
    result = {"role": "tool", "tool_call_id": "c1", "content": "posted"} if "role" in call else \
        {"type": "function_call_output", "call_id": "c1", "output": "posted"}
    messages = [{"role": "user", "content": "post it"}, call, result, {"role": "user", "content": "thanks"},
                {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    given_call = copy.deepcopy(call)
    manager.apply_management(messages)
    assert len(messages) < 6 and manager.removed_message_count >= 2
    stored = archive.get(1, 1)[0]
    assert stored.data == given_call and "great \ufffd" in stored.text
    if kind == "summarizing":
        assert all(s["text"].encode("utf-8") for s in archive.summaries())
