"""FullrecallStore behaves as LangGraph's own stores do (their in-memory and SQLite store tests), on every backend."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from fullrecall.integrations.langgraph_store import FullrecallStore, ItemError

# -- batches -------------------------------------------------------------------------------------------


def test_batch_results_come_in_op_order_and_reads_see_earlier_writes(lg_store: FullrecallStore) -> None:
    lg_store.put(("test", "foo"), "key1", {"data": "value1"})
    lg_store.put(("test", "bar"), "key2", {"data": "value2"})

    results = lg_store.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value2b"}),
            SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(("test",), "key3"),
            GetOp(("test", "bar"), "key2"),
            PutOp(("test", "baz"), "key4", {"data": "value4"}),
            SearchOp(("test",), filter=None, limit=10, offset=0),
            PutOp(("test", "baz"), "key4", None),
            GetOp(("test", "baz"), "key4"),
        ]
    )

    assert len(results) == 10
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert (results[0].key, results[0].namespace) == ("key1", ("test", "foo"))
    assert results[1] is None
    assert [(i.namespace, i.key) for i in results[2]] == [(("test", "foo"), "key1")]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None
    assert results[5].value == {"data": "value2b"}
    assert results[6] is None
    assert {i.key for i in results[7]} == {"key1", "key2", "key4"}
    assert results[8] is None and results[9] is None
    assert lg_store.list_namespaces() == [("test", "bar"), ("test", "foo")]


def test_async_batch_matches_the_sync_one(lg_store: FullrecallStore) -> None:
    async def scenario() -> None:
        await lg_store.aput(("a", "b"), "k", {"n": 1})
        results = await lg_store.abatch([GetOp(("a", "b"), "k"), SearchOp(("a",)), ListNamespacesOp()])
        assert results[0].value == {"n": 1}
        assert [i.key for i in results[1]] == ["k"]
        assert results[2] == [("a", "b")]
        await lg_store.adelete(("a", "b"), "k")
        assert await lg_store.aget(("a", "b"), "k") is None
        assert await lg_store.alist_namespaces() == []

    asyncio.run(scenario())


def test_put_update_delete_keep_created_at_and_move_updated_at(lg_store: FullrecallStore) -> None:
    namespace = ("test", "documents")
    lg_store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    first = lg_store.get(namespace, "doc1")
    assert first is not None and first.value == {"title": "Test Document", "content": "Hello, World!"}
    assert first.created_at == first.updated_at

    time.sleep(0.01)
    lg_store.put(namespace, "doc1", {"title": "Updated"})
    second = lg_store.get(namespace, "doc1")
    assert second.value == {"title": "Updated"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at

    assert lg_store.get(("test", "other"), "doc1") is None
    lg_store.delete(namespace, "doc1")
    assert lg_store.get(namespace, "doc1") is None
    lg_store.delete(namespace, "doc1")  # deleting what is gone is no error
    assert lg_store.search(("test",)) == []


# -- search: filters and pages --------------------------------------------------------------------------

DOCS = [
    (("test", "docs"), "doc1", {"title": "First", "author": "Alice", "score": 4.5, "tags": ["a", "b"],
                                "meta": {"lang": "en", "n": 1}}),
    (("test", "docs"), "doc2", {"title": "Second", "author": "Bob", "score": 3.0, "tags": ["b"],
                                "meta": {"lang": "fr", "n": 2}}),
    (("test", "images"), "img1", {"title": "Image", "author": "Alice", "score": 3.5, "meta": {"lang": "en"}}),
    (("prod", "docs"), "doc3", {"title": "Prod", "author": "Carol", "score": 5}),
]


@pytest.fixture
def docs_store(lg_store: FullrecallStore) -> FullrecallStore:
    for namespace, key, value in DOCS:
        lg_store.put(namespace, key, value)
    return lg_store


FILTERS = [
    ({"author": "Alice"}, {"doc1", "img1"}),
    ({"author": {"$eq": "Bob"}}, {"doc2"}),
    ({"author": {"$ne": "Alice"}}, {"doc2"}),
    ({"score": {"$gt": 3.5}}, {"doc1"}),
    ({"score": {"$gte": 3.5}}, {"doc1", "img1"}),
    ({"score": {"$lt": 3.5}}, {"doc2"}),
    ({"score": {"$lte": 3.5}}, {"doc2", "img1"}),
    ({"score": {"$gt": 3.0, "$lt": 4.0}}, {"img1"}),
    ({"author": "Alice", "score": {"$gte": 4}}, {"doc1"}),
    ({"meta": {"lang": "en"}}, {"doc1", "img1"}),
    ({"tags": ["a", "b"]}, {"doc1"}),
    ({"tags": ["b"]}, {"doc2"}),
    ({"missing": {"$gt": 0}}, set()),
    ({"title": {"$gt": "Image"}}, {"doc2"}),  # strings order as strings
    ({"author": {"$gt": 3}}, set()),  # values that do not order never match a range
    ({"author": "Nobody"}, set()),
]


def test_search_filters(docs_store: FullrecallStore) -> None:
    for filter, expected in FILTERS:
        assert {i.key for i in docs_store.search(("test",), filter=filter)} == expected, filter


def test_search_scopes_by_namespace_prefix(docs_store: FullrecallStore) -> None:
    assert {i.key for i in docs_store.search(("test",))} == {"doc1", "doc2", "img1"}
    assert {(i.namespace, i.key) for i in docs_store.search(("test", "docs"))} == {
        (("test", "docs"), "doc1"), (("test", "docs"), "doc2")}
    assert {i.key for i in docs_store.search(())} == {"doc1", "doc2", "img1", "doc3"}
    assert docs_store.search(("test", "doc")) == []  # labels match whole, not as string prefixes
    assert all(i.score is None for i in docs_store.search(("test",), query="anything"))  # no index: no scores


def test_search_pages_newest_first_without_overlap(lg_store: FullrecallStore) -> None:
    for n in range(7):
        lg_store.put(("pages",), f"k{n}", {"n": n})
        time.sleep(0.002)
    pages = [lg_store.search(("pages",), limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [[i.key for i in page] for page in pages] == [["k6", "k5", "k4"], ["k3", "k2", "k1"], ["k0"], []]
    assert [i.key for i in lg_store.search(("pages",), filter={"n": {"$lt": 5}}, limit=2, offset=1)] == ["k3", "k2"]


# -- namespaces ----------------------------------------------------------------------------------------

NAMESPACES = [
    ("test", "documents", "public"),
    ("test", "documents", "private"),
    ("test", "images", "public"),
    ("test", "images", "private"),
    ("prod", "documents", "public"),
    ("prod", "documents", "private"),
    ("solo",),
]


@pytest.fixture
def ns_store(lg_store: FullrecallStore) -> FullrecallStore:
    for namespace in NAMESPACES:
        lg_store.put(namespace, "dummy", {"content": "dummy"})
    return lg_store


def test_list_namespaces_match_conditions(ns_store: FullrecallStore) -> None:
    assert ns_store.list_namespaces() == sorted(NAMESPACES)
    assert ns_store.list_namespaces(prefix=("test",)) == sorted(n for n in NAMESPACES if n[0] == "test")
    assert ns_store.list_namespaces(suffix=("public",)) == sorted(n for n in NAMESPACES if n[-1] == "public")
    assert ns_store.list_namespaces(prefix=("test",), suffix=("private",)) == [
        ("test", "documents", "private"), ("test", "images", "private")]
    documents = sorted(n for n in NAMESPACES if n[1:2] == ("documents",))
    assert ns_store.list_namespaces(prefix=("*", "documents")) == documents
    assert ns_store.list_namespaces(suffix=("*", "public")) == sorted(n for n in NAMESPACES if n[-1] == "public")
    assert ns_store.list_namespaces(prefix=("test", "documents", "public", "deeper")) == []
    both = ns_store.batch([ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("prod",)),
                                                              MatchCondition("suffix", ("public",))))])[0]
    assert both == [("prod", "documents", "public")]


def test_list_namespaces_depth_and_pages(ns_store: FullrecallStore) -> None:
    assert ns_store.list_namespaces(max_depth=1) == [("prod",), ("solo",), ("test",)]
    assert ns_store.list_namespaces(max_depth=2) == [("prod", "documents"), ("solo",), ("test", "documents"),
                                                     ("test", "images")]
    assert ns_store.list_namespaces(prefix=("test",), max_depth=2) == [("test", "documents"), ("test", "images")]
    everything = sorted(NAMESPACES)
    assert ns_store.list_namespaces(limit=3) == everything[:3]
    assert ns_store.list_namespaces(limit=3, offset=3) == everything[3:6]
    assert ns_store.list_namespaces(limit=3, offset=6) == everything[6:]


def test_a_namespace_is_listed_while_it_holds_items(ns_store: FullrecallStore) -> None:
    ns_store.put(("solo",), "second", {"x": 1})
    ns_store.delete(("solo",), "dummy")
    assert ("solo",) in ns_store.list_namespaces()
    ns_store.delete(("solo",), "second")
    assert ("solo",) not in ns_store.list_namespaces()
    for namespace in NAMESPACES:
        ns_store.delete(namespace, "dummy")
    assert ns_store.list_namespaces() == []
    ns_store.put(("solo",), "back", {"x": 2})
    assert ns_store.list_namespaces() == [("solo",)]


# -- odd keys and namespaces, bad input -------------------------------------------------------------------

ODD_KEYS = ["", " ", "a/b", "a.b", "a:b", "50%", "quote'\"", "tab\tnew\nline", "ünïcødé", "日本語", "🦜🔗",
            "x" * 500, "*", "[0]", "$gt", "langgraph", "k\x00", "\x00", "x" * 200 + "\x00"]  # NUL: as InMemoryStore
ODD_LABELS = ["with space", "a/b", "a:b", "50%", "ünï", "🦜", "*", "-", "'", "UPPER", "x" * 200]


def test_odd_keys_and_labels_round_trip(lg_store: FullrecallStore) -> None:
    for n, key in enumerate(ODD_KEYS):
        lg_store.put(("odd", "keys"), key, {"n": n, "key": key})
    for n, label in enumerate(ODD_LABELS):
        lg_store.put(("odd", label), "k", {"n": n})
    for n, key in enumerate(ODD_KEYS):
        assert lg_store.get(("odd", "keys"), key).value == {"n": n, "key": key}
    for n, label in enumerate(ODD_LABELS):
        assert lg_store.get(("odd", label), "k").value == {"n": n}
    assert {i.key for i in lg_store.search(("odd", "keys"), limit=100)} == set(ODD_KEYS)
    assert lg_store.list_namespaces(prefix=("odd",)) == sorted([("odd", "keys")] + [("odd", x) for x in ODD_LABELS])
    assert lg_store.list_namespaces(prefix=("odd", "*")) == lg_store.list_namespaces(prefix=("odd",))
    assert lg_store.search(("odd", "a")) == []  # "a/b" and "a:b" are labels of their own
    lg_store.put(("odd", "keys"), "", None)
    assert lg_store.get(("odd", "keys"), "") is None and lg_store.get(("odd", "keys"), " ") is not None


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"n": value}
    return value


BAD_OPS = [
    (PutOp(("a.b",), "k", {"x": 1}), InvalidNamespaceError, "periods"),
    (PutOp(("a", ""), "k", {"x": 1}), InvalidNamespaceError, "empty"),
    (PutOp((), "k", {"x": 1}), InvalidNamespaceError, "empty"),
    (PutOp(("langgraph", "x"), "k", {"x": 1}), InvalidNamespaceError, "reserved"),
    (PutOp(("a", 3), "k", {"x": 1}), InvalidNamespaceError, "strings"),  # type: ignore[arg-type]
    (PutOp(("a",), 7, {"x": 1}), ItemError, "key must be a string"),  # type: ignore[arg-type]
    (PutOp(("a",), "k", {"x": object()}), ItemError, "not JSON-serialisable"),
    (PutOp(("a",), "k", {"x": math.nan}), ItemError, "not JSON-serialisable"),
    (PutOp(("a",), "k", ["not", "a", "mapping"]), ItemError, "mapping"),  # type: ignore[arg-type]
    (PutOp(("a",), "k", {"x": (1, 2)}), ItemError, "tuple"),  # stored, it would come back a list
    (PutOp(("a",), "k", {"x": _nested(100)}), ItemError, "nested"),
    (PutOp(("a",), "k", _nested(63)), ItemError, "nested"),  # at the limit itself, one too deep in its record
    (PutOp(("a",), "k\ud800", {"x": 1}), ItemError, "key is not valid Unicode"),
    (PutOp(("a", "b\udc80"), "k", {"x": 1}), ItemError, "label"),
    (PutOp(("a" * 120, "b" * 120), "k", {"x": 1}), ItemError, "too long"),
    (PutOp(("a",), "k", {"x": 1}, ttl=-1), ItemError, "ttl"),
    (SearchOp(("a",), filter={"x": {"$regex": "y"}}), ItemError, "$regex"),
    (SearchOp(("a",), limit=-1), ItemError, "limit"),
    (SearchOp(("a.b",)), InvalidNamespaceError, "periods"),
    (ListNamespacesOp(offset=-2), ItemError, "offset"),
    (ListNamespacesOp(match_conditions=(MatchCondition("infix", ("a",)),)), ItemError, "match type"),
    (GetOp(("a.b",), "k"), InvalidNamespaceError, "periods"),
    (PutOp(("a",), "k", {"x": 1}, ttl=1e308), ItemError, "finite"),  # its expiry would be infinity
    (PutOp(("a",), "k", {"x": 1}, ttl=math.inf), ItemError, "finite"),
    (SearchOp(("a",), filter={"n": {"$gt": 1, "m": 2}}), ItemError, "operators only"),
    (SearchOp(("a",), filter={"n": {"$eq": 1, "$in": [2]}}), ItemError, "$in"),
]


def test_a_bad_op_is_refused_and_nothing_of_its_batch_is_written(lg_store: FullrecallStore) -> None:
    for op, error, words in BAD_OPS:
        with pytest.raises(error, match=words.replace("$", r"\$")):
            lg_store.batch([PutOp(("good",), "first", {"x": 1}), op])
        assert lg_store.get(("good",), "first") is None, op
        assert lg_store.list_namespaces() == [], op


UNREACHABLE = [  # (namespace, key) that no put can fill: LangGraph's stores find nothing there, and so do we
    ((), "k"),
    (("langgraph",), "k"),
    (("langgraph", "x"), "k"),
    (("a",), "k\ud800"),
    (("a", "b\udc80"), "k"),
    (("a" * 120, "b" * 120), "k"),
]


def test_reads_and_deletes_where_nothing_can_be_put_find_nothing(lg_store: FullrecallStore) -> None:
    """As in InMemoryStore: get answers None and delete does nothing (they raised before), while put refuses."""
    lg_store.put(("a",), "k", {"x": 1})
    for namespace, key in UNREACHABLE:
        assert lg_store.get(namespace, key) is None, (namespace, key)
        assert lg_store.delete(namespace, key) is None
        assert asyncio.run(lg_store.aget(namespace, key)) is None
        assert lg_store.batch([PutOp(namespace, key, None), GetOp(namespace, key)]) == [None, None]
        with pytest.raises((InvalidNamespaceError, ItemError)):
            lg_store.put(namespace, key, {"x": 1})
    assert lg_store.search(("a", "\ud800")) == []
    assert lg_store.search(("l" * 300,)) == [] and lg_store.search(("a",) * 130) == []  # longer than any put's
    assert lg_store.list_namespaces(prefix=("l" * 300,)) == []
    assert lg_store.batch([SearchOp(("l" * 300,)), GetOp(("a",), "k")])[0] == []
    assert lg_store.list_namespaces(prefix=("a", "\ud800")) == []
    assert lg_store.list_namespaces(suffix=("\udc80",)) == []
    assert lg_store.batch([SearchOp(("\ud800",)), GetOp(("a",), "k")])[0] == []
    assert lg_store.get(("a",), "k").value == {"x": 1} and lg_store.list_namespaces() == [("a",)]


RANGES = [  # as InMemoryStore reads a range (float(value)), where it answers at all
    ({"n": {"$gt": "9.5"}}, {"ten"}),  # numeric strings compare as numbers, not as strings ("10" < "9.5")
    ({"n": {"$gt": 9}}, {"ten"}),
    ({"n": {"$lt": "1e2"}}, {"ten", "nine"}),
    ({"m": {"$gte": "10"}}, {"ten"}),  # a number against a numeric string
    ({"flag": {"$gt": 0}}, {"ten"}),  # True is 1, False is 0
    ({"flag": {"$lte": False}}, {"nine"}),
    ({"big": {"$gt": 2**60}}, {"ten"}),  # two ints compare exactly (a float would make them equal)
    ({"word": {"$gt": "abc"}}, {"nine"}),  # strings that are not numbers compare as strings (InMemoryStore raises)
    ({"word": {"$gt": 5}}, set()),  # a word against a number, or a missing field: no match (it raises)
    ({"missing": {"$lt": 5}}, set()),
    ({"n": {"$gt": "abc"}}, set()),  # "10" and "abc": two strings, compared as strings ("1" < "a")
]


def test_ranges_read_numbers_as_langgraph_does(lg_store: FullrecallStore) -> None:
    lg_store.put(("r",), "ten", {"n": "10", "m": 10, "flag": True, "big": 2**60 + 1, "word": "abc"})
    lg_store.put(("r",), "nine", {"n": " 9 ", "m": 9, "flag": False, "big": 2**60, "word": "abd"})
    for filter, expected in RANGES:
        assert {i.key for i in lg_store.search(("r",), filter=filter)} == expected, filter


def test_filter_keys_are_fields_and_operands_are_values(lg_store: FullrecallStore) -> None:
    lg_store.put(("f",), "k", {"$kind": "odd", "meta": {"$x": 1}, "n": 3})
    assert [i.key for i in lg_store.search(("f",), filter={"$kind": "odd"})] == ["k"]  # a field named "$kind"
    assert [i.key for i in lg_store.search(("f",), filter={"meta": {"$eq": {"$x": 1}}})] == ["k"]  # compared whole
    assert lg_store.search(("f",), filter={"meta": {"$eq": {"$x": 2}}}) == []
    with pytest.raises(ValueError, match="operators only"):
        lg_store.search(("f",), filter={"n": {"$gt": 1, "n": 2}})  # it was read as {"$gt": 1, "$lte": 2}


def test_a_listing_before_a_put_of_its_batch_does_not_see_it(lg_store: FullrecallStore) -> None:
    lg_store.put(("old",), "k", {"x": 1})
    results = lg_store.batch([
        ListNamespacesOp(), SearchOp(()), PutOp(("new", "ns"), "k", {"x": 2}), ListNamespacesOp(),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("new",)),)), SearchOp(("new",)),
    ])
    assert results[0] == [("old",)] and [i.key for i in results[1]] == ["k"]
    assert results[3] == [("new", "ns"), ("old",)] and results[4] == [("new", "ns")]
    assert [i.namespace for i in results[5]] == [("new", "ns")]


def test_owners_do_not_see_each_others_items(make_store) -> None:
    ann, bob = make_store(user_id="ann"), make_store(user_id="bob")
    ann.put(("memories",), "k", {"who": "ann"})
    bob.put(("memories",), "k", {"who": "bob"})
    assert ann.get(("memories",), "k").value == {"who": "ann"}
    assert [i.value for i in bob.search(("memories",))] == [{"who": "bob"}]
    bob.delete(("memories",), "k")
    assert ann.list_namespaces() == [("memories",)] and bob.list_namespaces() == []


def test_a_prefix_reaches_its_own_namespaces_and_their_children_only(lg_store: FullrecallStore) -> None:
    for namespace in [("m", "u7"), ("m", "u70"), ("m", "u7", "x"), ("m2", "u7"), ("u7",)]:
        lg_store.put(namespace, "k", {"ns": list(namespace)})
    assert sorted(i.namespace for i in lg_store.search(("m", "u7"))) == [("m", "u7"), ("m", "u7", "x")]
    assert lg_store.list_namespaces(prefix=("m", "u7")) == [("m", "u7"), ("m", "u7", "x")]
    assert lg_store.list_namespaces(prefix=("m", "*", "x")) == [("m", "u7", "x")]
    assert lg_store.list_namespaces(prefix=("*", "u7")) == [("m", "u7"), ("m", "u7", "x"), ("m2", "u7")]
    lg_store.delete(("m", "u7"), "k")
    assert lg_store.list_namespaces(prefix=("m", "u7")) == [("m", "u7", "x")]
    assert len(lg_store.search(())) == 4
