"""FullrecallStore's semantic search (LangGraph's ``index`` convention) and TTL, on every backend."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from langgraph.store.base import PutOp, SearchOp
from lg_helpers import CharEmbeddings, Clock

from fullrecall.errors import EmbeddingError

# -- vector search ---------------------------------------------------------------------------------------


def cosine(a: list[float], b: list[float]) -> float:
    x, y = np.asarray(a), np.asarray(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def test_query_ranks_by_cosine_with_the_configured_fields(make_store, char_embeddings: CharEmbeddings) -> None:
    fields = ["key0", "key1", "key3"]
    store = make_store(index={"dims": char_embeddings.dims, "embed": char_embeddings, "fields": fields})
    store.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})  # no key0: skipped, no error
    store.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})

    for query, best in (("xxx", None), ("uuu", "doc2"), ("zzz", "doc1")):
        results = store.search(("test",), query=query)
        assert len(results) == 2 and results[0].key != results[1].key
        assert results[0].score >= results[1].score
        if best:
            assert results[0].key == best and results[0].score > results[1].score
    both = store.search(("test",), query="xxx")
    assert both[0].score == pytest.approx(1.0, abs=1e-5) and both[1].score == pytest.approx(1.0, abs=1e-5)
    unindexed = store.search(("test",), query="www")  # key2 is not indexed: nobody matches it exactly
    assert all(r.score < 0.9 for r in unindexed)


def test_score_is_the_best_cosine_over_an_items_vectors(make_store, char_embeddings: CharEmbeddings) -> None:
    store = make_store(index={"dims": char_embeddings.dims, "embed": char_embeddings, "fields": ["notes[*].text"]})
    notes = ["the cat sat on the mat", "quarterly revenue grew", "a grey kitten"]
    store.put(("n",), "item", {"notes": [{"text": t} for t in notes]})
    for query in ("grey kitten", "revenue", "mat"):
        (hit,) = store.search(("n",), query=query)
        expected = max(cosine(char_embeddings.embed_query(query), char_embeddings.embed_query(t)) for t in notes)
        assert hit.score == pytest.approx(expected, abs=1e-5)


def test_put_index_overrides_fields_and_false_skips_embedding(make_store, char_embeddings: CharEmbeddings) -> None:
    store = make_store(index={"dims": char_embeddings.dims, "embed": char_embeddings, "fields": ["key17"]})
    store.put(("test",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc"}, index=["key0", "key1"])
    store.put(("test",), "doc4", {"key0": "eee", "key1": "bbb", "key3": "ggg"}, index=["key1", "key3"])
    assert store.search(("test",), query="aaa")[0].key == "doc3"
    assert store.search(("test",), query="ggg")[0].key == "doc4"
    bbb = store.search(("test",), query="bbb")
    assert bbb[0].score == pytest.approx(bbb[1].score, abs=1e-6)

    calls = len(char_embeddings.calls)
    store.put(("test",), "doc5", {"key0": "hhh"}, index=False)
    assert len(char_embeddings.calls) == calls  # nothing embedded
    results = store.search(("test",), query="hhh")
    assert [r.key for r in results][-1] == "doc5" and results[-1].score is None  # unscored, after the scored
    assert len(store.search(("test",))) == 3


def test_update_replaces_the_vectors(make_store, char_embeddings: CharEmbeddings) -> None:
    store = make_store(index={"dims": char_embeddings.dims, "embed": char_embeddings, "fields": ["text"]})
    store.put(("test",), "doc1", {"text": "zany zebra xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    before = store.search(("test",), query="zany xerxes")
    assert before[0].key == "doc1"
    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = {r.key: r.score for r in store.search(("test",), query="zany xerxes")}
    assert after["doc1"] < before[0].score


def test_vector_search_with_filters_and_pages(make_store, char_embeddings: CharEmbeddings) -> None:
    store = make_store(index={"dims": char_embeddings.dims, "embed": char_embeddings, "fields": ["text"]})
    docs = {"doc1": ("red apple", "red", 4.5), "doc2": ("red car", "red", 3.0),
            "doc3": ("green apple", "green", 4.0), "doc4": ("blue car", "blue", 3.5)}
    store.batch([PutOp(("test",), k, {"text": t, "color": c, "score": s}) for k, (t, c, s) in docs.items()])
    assert len(char_embeddings.calls) == 1  # one batch, one embedding call

    red_apple = store.search(("test",), query="apple", filter={"color": "red"})
    assert [r.key for r in red_apple] == ["doc1", "doc2"]
    assert store.search(("test",), query="car", filter={"color": "red"})[0].key == "doc2"
    high = store.search(("test",), query="blue car", filter={"score": {"$gt": 3.2}})
    assert high[0].key == "doc4" and {r.key for r in high} == {"doc1", "doc3", "doc4"}

    everything = store.search(("test",), query="apple", limit=10)
    assert [r.score for r in everything] == sorted((r.score for r in everything), reverse=True)
    pages = [store.search(("test",), query="apple", limit=2, offset=o) for o in (0, 2)]
    assert [r.key for page in pages for r in page] == [r.key for r in everything]
    scores = [cosine(char_embeddings.embed_query("apple"), char_embeddings.embed_query(docs[r.key][0]))
              for r in everything]
    assert [r.score for r in everything] == pytest.approx(scores, abs=1e-5)


def test_queries_of_every_kind_and_embedding_failures(make_store, char_embeddings: CharEmbeddings) -> None:
    store = make_store(index={"dims": char_embeddings.dims, "embed": char_embeddings})  # fields default to ["$"]
    store.put(("test",), "doc1", {"text": "test document"})
    for query in ("", None, "test " * 100, "test!@#$%^&*()", "日本語"):
        assert len(store.search(("test",), query=query)) == 1

    def broken(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0]] * len(texts)  # the wrong dimension

    bad = make_store(index={"dims": 4, "embed": broken})
    with pytest.raises(EmbeddingError, match="shape"):
        bad.put(("test",), "k", {"text": "x"})
    assert bad.get(("test",), "k") is None  # a failed embedding writes nothing


def test_async_embedding_function(make_store, char_embeddings: CharEmbeddings) -> None:
    async def aembed(texts: list[str]) -> list[list[float]]:
        return char_embeddings.embed_documents(texts)

    store = make_store(index={"dims": char_embeddings.dims, "embed": aembed, "fields": ["text"]})

    async def scenario() -> None:
        await store.abatch([PutOp(("a",), "1", {"text": "apple pie"}), PutOp(("a",), "2", {"text": "car engine"})])
        (hit, other) = (await store.abatch([SearchOp(("a",), query="apple")]))[0]
        assert hit.key == "1" and hit.score > other.score

    asyncio.run(scenario())


def test_fullrecall_embedder_by_default(make_store, default_embedder) -> None:
    store = make_store(index={"fields": ["text"]})
    assert store.embeddings.name == default_embedder.name and store.embeddings.dims == default_embedder.dimension
    store.put(("facts",), "pet", {"text": "I adopted a grey cat called Miso."})
    store.put(("facts",), "order", {"text": "My order number is REF-48213."})
    store.put(("facts",), "car", {"text": "The car needs new tyres before winter."})
    assert store.search(("facts",), query="Which pet do I have?")[0].key == "pet"
    assert store.search(("facts",), query="what did I buy, the reference")[0].key == "order"


# -- TTL ---------------------------------------------------------------------------------------------------


def test_ttl_default_override_and_none(make_store, clock: Clock) -> None:
    store = make_store(ttl={"default_ttl": 5}, clock=clock)
    store.put(("t",), "short", {"v": 1}, ttl=1)
    store.put(("t",), "default", {"v": 2})
    store.put(("t",), "forever", {"v": 3}, ttl=None)
    clock.advance(2)
    assert store.sweep_ttl() == 1
    assert [store.get(("t",), k) is None for k in ("short", "default", "forever")] == [True, False, False]
    clock.advance(4)  # "default" was read at minute 2: it lives until minute 7
    assert store.sweep_ttl() == 0
    clock.advance(1.5)
    assert store.sweep_ttl() == 1
    assert [i.key for i in store.search(("t",))] == ["forever"]


def test_expired_items_are_hidden_before_the_sweep_unless_told_otherwise(make_store, clock: Clock) -> None:
    store = make_store(ttl={"default_ttl": 1}, clock=clock)
    store.put(("omit", "expired"), "e", {"data": "gone"})
    store.put(("omit", "control"), "c", {"data": "keep"}, ttl=None)
    clock.advance(2)
    assert store.get(("omit", "expired"), "e") is None
    assert store.search(("omit",)) == [store.search(("omit", "control"))[0]]
    assert store.list_namespaces(prefix=("omit",)) == [("omit", "control")]

    keeping = make_store(ttl={"default_ttl": 1, "omit_expired": False}, clock=clock)  # same items, other view
    assert keeping.get(("omit", "expired"), "e", refresh_ttl=True).value == {"data": "gone"}  # shown, not revived
    assert ("omit", "expired") in keeping.list_namespaces()
    assert store.sweep_ttl() == 1
    assert keeping.get(("omit", "expired"), "e") is None and keeping.list_namespaces() == [("omit", "control")]


def test_reads_refresh_the_ttl_unless_asked_not_to(make_store, clock: Clock) -> None:
    store = make_store(ttl={"default_ttl": 1, "refresh_on_read": True}, clock=clock)
    store.put(("r",), "get", {"n": 1})
    store.put(("r",), "search", {"n": 2})
    store.put(("r",), "untouched", {"n": 3})
    store.put(("r",), "no-refresh", {"n": 4})
    clock.advance(0.75)
    assert store.get(("r",), "get") is not None
    assert [i.key for i in store.search(("r",), filter={"n": 2})] == ["search"]
    assert store.get(("r",), "no-refresh", refresh_ttl=False) is not None
    clock.advance(0.5)  # 1.25 minutes after the puts, 0.5 after the reads
    assert store.sweep_ttl() == 2
    assert sorted(i.key for i in store.search(("r",), refresh_ttl=False)) == ["get", "search"]
    clock.advance(2)
    assert store.get(("r",), "get", refresh_ttl=True) is None  # an expired item is not brought back by a read
    assert store.sweep_ttl() == 2

    lazy = make_store(ttl={"default_ttl": 1, "refresh_on_read": False}, clock=clock)
    lazy.put(("lazy",), "k", {"n": 1})
    clock.advance(0.75)
    assert lazy.get(("lazy",), "k") is not None  # the store's default: no refresh
    clock.advance(0.5)
    assert lazy.get(("lazy",), "k") is None


def test_an_item_expired_without_a_ttl_config_is_hidden_from_every_read(make_store, clock: Clock) -> None:
    """A put with its own ``ttl`` on a store given no ``ttl=`` config: expired, it is hidden from get, search and
    list_namespaces at once (the listing still showed its namespace)."""
    store = make_store(clock=clock)
    store.put(("a", "b"), "k", {"v": 1}, ttl=1)
    clock.advance(2)
    assert store.get(("a", "b"), "k") is None and store.search(("a",)) == []
    assert store.list_namespaces() == []


def test_a_refresh_or_sweep_never_undoes_another_writers_put_or_delete(make_store, clock: Clock) -> None:
    """A read that refreshes a TTL, and a sweep, change only the record as they read it: a put or a delete by
    another writer between the read and the write stands (the refresh wrote the old value back, the sweep
    deleted a fresh put)."""
    reader = make_store(ttl={"default_ttl": 60, "refresh_on_read": True}, clock=clock)
    other = make_store(ttl={"default_ttl": 60}, clock=clock)
    reads = reader.store.get_records
    between: list = []

    def get_records(scope, namespace):
        found = reads(scope, namespace)
        while between and namespace.startswith("langgraph:"):  # a namespace's items, not the listing
            between.pop()()  # the other writer acts after the read, before the refresh or the sweep's delete
        return found

    reader.store.get_records = get_records  # type: ignore[method-assign]
    reader.put(("prefs", "ann"), "drink", {"v": "coffee"})
    between.append(lambda: other.put(("prefs", "ann"), "drink", {"v": "green tea"}))
    assert reader.get(("prefs", "ann"), "drink").value == {"v": "coffee"}  # as read
    assert other.get(("prefs", "ann"), "drink").value == {"v": "green tea"}
    reader.put(("prefs", "bob"), "secret", {"v": "pin 1234"})
    between.append(lambda: other.delete(("prefs", "bob"), "secret"))
    assert [i.key for i in reader.search(("prefs", "bob"))] == ["secret"]
    assert other.get(("prefs", "bob"), "secret") is None
    reader.put(("s",), "k", {"v": "old"}, ttl=1)
    clock.advance(2)
    between.append(lambda: other.put(("s",), "k", {"v": "new"}, ttl=60))
    assert reader.sweep_ttl() == 0
    assert other.get(("s",), "k").value == {"v": "new"}
    reader.store.get_records = reads  # type: ignore[method-assign]
    reader.put(("t",), "k", {"v": 1}, ttl=1)
    clock.advance(2)
    assert reader.sweep_ttl() == 1 and other.get(("t",), "k") is None


def test_expired_items_never_fill_a_page(make_store, clock: Clock) -> None:
    store = make_store(ttl={"default_ttl": 10}, clock=clock)
    for key in ("c", "b", "expired", "a"):
        store.put(("page",), key, {"k": key}, ttl=1 if key == "expired" else 10)
        clock.advance(0.01)
    clock.advance(2)
    assert [i.key for i in store.search(("page",), limit=2)] == ["a", "b"]
    assert [i.key for i in store.search(("page",), limit=2, offset=2)] == ["c"]


def test_the_sweeper_thread_deletes_expired_items(make_store, clock: Clock) -> None:
    store = make_store(ttl={"default_ttl": 1, "sweep_interval_minutes": 0.001}, clock=clock)  # 60 ms
    store.put(("s",), "k", {"n": 1})
    store.put(("s",), "kept", {"n": 2}, ttl=None)
    thread = store.start_ttl_sweeper()
    assert store.start_ttl_sweeper() is thread
    clock.advance(2)
    omit_off = make_store(ttl={"omit_expired": False}, clock=clock)
    deadline = time.monotonic() + 10
    while omit_off.get(("s",), "k", refresh_ttl=False) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert omit_off.get(("s",), "k", refresh_ttl=False) is None
    assert store.stop_ttl_sweeper(timeout=5) and not thread.is_alive()
    assert [i.key for i in store.search(("s",))] == ["kept"]
