"""The recall path's reads: each candidate read once, every recalled range in one call, and SQLite reads by
key or by span whose cost does not grow with the conversation."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from test_archive_write_path import HashEmbedder, removed, words

from fullrecall.archive import Archive
from fullrecall.bench.archive import CountingStore
from fullrecall.errors import InvalidInput
from fullrecall.search import SemanticSearch
from fullrecall.stores import Scope, StoredMessage, open_store


class KeyCountingStore(CountingStore):
    """Counts calls, and every key ``get_keys`` was asked for."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.keys_read: Counter[str] = Counter()

    def get_keys(self, scope: Scope, keys: Any) -> list[StoredMessage]:
        keys = list(keys)
        self.keys_read.update(keys)
        self.calls["get_keys"] += 1
        return self.inner.get_keys(scope, keys)

    def reset(self) -> None:
        super().reset()
        self.keys_read.clear()


def test_recall_reads_each_candidate_once_and_all_its_ranges_in_one_call(store_url):
    store = KeyCountingStore(open_store(store_url))
    scope = Scope(session_id="s")
    archive = Archive(store, scope, embedding_model=HashEmbedder())
    for k in range(40):
        archive.write(removed([words(5 * k + j) for j in range(5)], 5 * k))
    for query in ("invoice 1042 topic3", "message about topic5", "invoice 1100 and invoice 1190"):
        store.reset()
        result = archive.recall(query, top_k=3, radius=2, before=200)
        assert len(result.ranges) >= 2, query  # several ranges: still one read
        assert store.calls["ranges"] == 1 and store.calls["range"] == 0
        assert store.calls["search_vectors"] == 1 and store.calls["search_text"] == 1
        assert store.calls["get_keys"] == 0, "the hits are read with their ranges, not by key"
        assert len(store.calls) == 3, dict(store.calls)  # three round trips, the keyword one while embedding
        for r in result.ranges:  # what one read gave each range is what reading it alone gives
            assert [m.id for m in r.messages] == [m.id for m in store.inner.range(scope, r.start, r.end)]
            assert set(r.hit_positions) <= {m.position for m in r.messages}
    store.inner.close()


def test_the_bench_s_counting_store_is_searched_as_the_store_it_counts(store_url):
    """The bench times recalls through a counting wrapper: the search engine prepares its vector search on it (the
    store checks what it keeps while the question is embedded) as it does on the store itself, and the prepared
    search counts as the one vector search it is.
    """
    inner, prepared = open_store(store_url), []  # the threads the vector search was prepared on
    prepare = inner.prepare_vector_search
    inner.prepare_vector_search = (  # type: ignore[method-assign]
        lambda *args: prepared.append(threading.current_thread()) or prepare(*args))
    store = CountingStore(inner)
    archive = Archive(store, Scope(session_id="s"), embedding_model=HashEmbedder())
    for k in range(10):
        archive.write(removed([words(5 * k + j) for j in range(5)], 5 * k))
    store.reset()
    assert archive.recall("invoice 1042 topic3", top_k=3, radius=2, before=50).ranges
    # once, beside the embedding (not by the search made after it, as SQLite's search_vectors does)
    assert len(prepared) == 1 and prepared[0] is not threading.current_thread()
    assert store.calls["search_vectors"] == 1
    inner.close()


def test_search_around_reads_the_hits_with_their_neighbours_in_one_call(store_url):
    """``around=r`` gives each hit the stored messages within r positions of it, read with the hits in one
    ``ranges`` call; across sessions (the hits may sit in several) the hits are read by key and get none."""
    store = KeyCountingStore(open_store(store_url))
    search = SemanticSearch(HashEmbedder(), store=store, scope=Scope(user_id="u", session_id="s"))
    search.add([words(i) for i in range(30)])
    SemanticSearch(HashEmbedder(), store=store, scope=Scope(user_id="u", session_id="t")).add(
        [words(i) for i in range(5)])
    with pytest.raises(InvalidInput, match="around"):
        search.search("topic3", around=-1)
    for query in ("invoice 1012 topic3", "message about topic5"):
        store.reset()
        hits = search.search(query, top_k=3, spread=2, around=2)
        assert hits and dict(store.calls) == {"search_vectors": 1, "search_text": 1, "ranges": 1}
        for h in hits:
            p = h.position
            assert h.context is not None
            assert [m.id for m in h.context] == [m.id for m in store.inner.range(search.scope, p - 2, p + 2)]
            assert h.message.id in {m.id for m in h.context}
        assert [h.id for h in hits] == [h.id for h in search.search(query, top_k=3, spread=2)]  # the same hits
        store.reset()
        both = search.search(words(2), top_k=6, around=2, scope=Scope(user_id="u"))
        assert {h.session_id for h in both} == {"s", "t"}  # words(0)-words(4) are in both
        assert all(h.context is None for h in both) and store.calls["ranges"] == 0
    store.inner.close()


def test_search_around_after_the_session_began_again_gives_the_new_messages(store_url):
    """Places learned before a forget name positions that now hold other messages: a hit read by span is the
    message the store holds now, never one a cached place remembers."""
    store = open_store(store_url)
    scope = Scope(user_id="u", session_id="s")
    search = SemanticSearch(HashEmbedder(), store=store, scope=scope)
    search.add([words(i) for i in range(20)])
    first = search.search("invoice 1012 topic3", top_k=3, spread=2, around=1)
    store.forget(scope)
    search.add([f"walrus {i} {words(i + 100)}" for i in range(20)])
    again = search.search("invoice 1012 topic3 walrus", top_k=3, spread=2, around=1)
    live = {m.id: m for m in store.range(scope, 0, 100)}
    assert first and again
    for h in again:
        assert live[h.id].text == h.message.text and "walrus" in h.text
        assert [m.id for m in h.context or []] == [m.id for m in store.range(scope, h.position - 1, h.position + 1)]
    store.close()


def test_messages_at_reads_every_run_in_one_call(store_url):
    store = CountingStore(open_store(store_url))
    search = SemanticSearch(HashEmbedder(), store=store, scope=Scope(session_id="s"))
    search.add([words(i) for i in range(12)])
    store.reset()
    found = search.messages_at([9, 1, 2, 3, 7, 30, -1, 2])
    assert [m.position for m in found] == [1, 2, 3, 7, 9]
    assert dict(store.calls) == {"ranges": 1}
    store.reset()
    assert search.messages_at([]) == [] and not store.calls
    store.inner.close()


def _vm_steps(store: Any, read: Any, *args: Any) -> int:
    """SQLite virtual-machine instructions (in hundreds) that ``read(*args)`` costs: what a full scan shows."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn = store._conn()
    conn.set_progress_handler(count, 100)
    try:
        read(*args)
    finally:
        conn.set_progress_handler(None, 0)
    return steps


def test_sqlite_reads_by_key_and_by_span_cost_the_same_in_a_small_and_a_large_conversation(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'big.db'}")
    sizes = {"small": 20, "large": 4_000}
    for session, n in sizes.items():
        store.append(Scope(session_id=session), [
            StoredMessage(id=f"m{i}", role="user", text=words(i), data={"text": words(i)}) for i in range(n)
        ])
    cost: dict[str, tuple[int, int]] = {}
    for session, n in sizes.items():
        scope = Scope(session_id=session)
        keys = [m.key for m in store.range(scope, 5, 14)]
        spans = [(0, 2), (n // 2, n // 2 + 2), (n - 3, n - 1)]
        assert len(store.get_keys(scope, keys)) == 10 and [len(s) for s in store.ranges(scope, spans)] == [3, 3, 3]
        cost[session] = (_vm_steps(store, store.get_keys, scope, keys), _vm_steps(store, store.ranges, scope, spans))
    # a scan of the conversation costs ~200x more in the large one; an indexed read the same
    assert cost["large"][0] <= 2 * cost["small"][0] + 5, cost
    assert cost["large"][1] <= 2 * cost["small"][1] + 5, cost
    store.close()


@pytest.mark.parametrize("partial", [Scope(user_id=""), Scope()])
def test_sqlite_reads_by_key_within_a_partial_scope_stay_in_it(tmp_path, partial):
    store = open_store(f"sqlite:///{tmp_path / 'keys.db'}")
    mine, theirs = Scope(user_id="", session_id="a"), Scope(user_id="bob", session_id="b")
    for scope in (mine, theirs):
        store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=words(i), data={"text": words(i)})
                             for i in range(5)])
    keys = [m.key for m in store.range(mine, 0, 4) + store.range(theirs, 0, 4)]
    found = store.get_keys(partial, keys)
    expected = 5 if partial.user_id == "" else 10
    assert len(found) == expected and all(m.key in keys for m in found)
    store.close()


def test_a_question_with_facets_asked_again_reads_only_its_hits_and_ranks_the_same(store_url):
    store = KeyCountingStore(open_store(store_url))
    search = SemanticSearch(HashEmbedder(), store=store, scope=Scope(session_id="s"))
    speakers = ["Ann", "Bob"]
    search.add([words(i) + (" last May" if i % 3 == 0 else "") for i in range(60)],
               metadata=[{"speaker": speakers[i % 2]} for i in range(60)])
    question = "When did Ann mention topic3 and invoice 1042?"  # both facets: a speaker and a date
    store.reset()
    first = search.search(question, top_k=4)
    read_first = sum(store.keys_read.values())
    if store_url.startswith("redis"):
        assert read_first > 4, "the facets read the best candidates, not only the hits"
    else:  # a small scope's hits carry their messages (kept in process, or read with the search): nothing is read
        assert read_first == 0, "the candidates' messages came with the search"
    assert any(h.scores.get("boost") for h in first)
    store.reset()
    again = search.search(question, top_k=4)
    assert [(h.id, h.scores) for h in again] == [(h.id, h.scores) for h in first]
    assert sum(store.keys_read.values()) <= 4, "candidates seen before are boosted without being read again"
    store.inner.close()


def test_filters_given_as_a_dict_are_refused_by_search_and_recall():
    """A dict of filters is an InvalidInput naming 'filters' (it was an AttributeError from inside the store,
    worded differently on each backend; the archive's recall raised TypeError)."""
    from fullrecall.stores import Filters

    archive = Archive("sqlite:///:memory:", Scope(session_id="s"), embedding_model=HashEmbedder())
    archive.write(removed([words(i) for i in range(4)], 0))
    for call, where in [(lambda f: archive.search_engine.search("invoice", filters=f), "search"),
                        (lambda f: archive.recall("invoice", filters=f), "recall")]:
        with pytest.raises(InvalidInput, match=f"^{where}: 'filters' must be a Filters .* got dict$"):
            call({"roles": ["user"]})
        assert call(Filters(roles=["user"]))  # the same, as a Filters
