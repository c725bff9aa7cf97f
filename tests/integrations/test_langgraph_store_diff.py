"""FullrecallStore against LangGraph's own InMemoryStore: random operations through both, the same answers.

A hypothesis state machine drives an ``InMemoryStore()`` and a ``FullrecallStore("sqlite:///<tmp file>")``
(no ``index``: no embedder) with the same ``put`` (``None`` deletes), ``delete``, ``get``, ``search`` (filters,
pages) and ``list_namespaces`` (prefix, suffix, ``"*"``, ``max_depth``, pages) calls, sync and async, and
with whole ``batch``/``abatch`` calls, and compares what they answer.

Where the two differ on purpose, the comparison says so at the spot:

* search order: InMemoryStore returns items in dict insertion order (an overwritten key keeps its place);
  FullrecallStore returns them newest ``updated_at`` first, as LangGraph's PostgreSQL and SQLite stores do.
  Results are compared as sets, pages by their size, and our own order is checked against ``updated_at``;
* ``list_namespaces``: InMemoryStore also lists namespaces that hold nothing (emptied by deletes, or merely
  read by ``get``: its ``defaultdict`` creates them); we list a namespace while it holds an item, as its
  docstring and LangGraph's database stores do. Ours is compared with an InMemoryStore rebuilt from the
  live items only;
* ``created_at``: InMemoryStore stamps a new ``created_at`` on every overwrite; we keep the first one (as
  the database stores do) and move ``updated_at`` only;
* batches: InMemoryStore runs a batch's reads before its writes; we run ops in order, so a read sees the
  batch's earlier writes (documented). A batch of ours is compared with InMemoryStore running the same ops
  one at a time;
* a range filter (``$gt`` ...) on a missing field or on a non-numeric string makes InMemoryStore raise
  (``float(None)``, ``float("abc")``); we do not match the item, or compare two strings as strings.
  There the answer is checked against :func:`reference_match`, the rule as documented.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from fullrecall.integrations.langgraph_store import FullrecallStore

# -- what the machine draws ------------------------------------------------------------------------------

LABELS = st.sampled_from(["a", "b", "ü", "日本", "🦜", "x y", "*", "A", "a-b"])
NAMESPACES = st.lists(LABELS, min_size=1, max_size=3).map(tuple)
PREFIXES = st.lists(st.one_of(LABELS, st.just("*")), min_size=0, max_size=3).map(tuple)
KEYS = st.sampled_from(["k", "", "ü", "a.b", "*", " ", "k2", "🔑", "k\x00"])
FIELDS = st.sampled_from(["n", "s", "tags", "meta", "flag", "ü"])
TOP_FIELDS = st.one_of(FIELDS, st.just("$kind"))  # a top-level filter key is a field name, even with a "$"
SCALARS = st.one_of(
    st.integers(-1000, 1000),
    st.floats(-1000, 1000, allow_nan=False, allow_infinity=False),
    st.sampled_from(["10", "9.5", "-3", "abc", "Abd", "", "ü", "1e2", " 7 "]),
    st.booleans(),
    st.none(),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(FIELDS, inner, max_size=3)),
    max_leaves=6,
)
VALUES = st.dictionaries(TOP_FIELDS, JSON, max_size=4)
OPERATORS = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
CONDITIONS = st.one_of(
    SCALARS,  # plain equality
    st.dictionaries(OPERATORS, SCALARS, min_size=1, max_size=2),
    st.lists(SCALARS, max_size=2),  # lists compare whole
    st.dictionaries(FIELDS, st.one_of(SCALARS, st.dictionaries(OPERATORS, SCALARS, min_size=1, max_size=1)),
                    min_size=1, max_size=2),  # nested: {"meta": {"n": 1}} or {"meta": {"n": {"$gt": 1}}}
)
FILTERS = st.one_of(st.none(), st.dictionaries(TOP_FIELDS, CONDITIONS, min_size=1, max_size=2))
LIMITS = st.one_of(st.just(10), st.integers(0, 6))  # 10: the default
OFFSETS = st.one_of(st.just(0), st.integers(0, 6))
QUERIES = st.sampled_from([None, "", "tea", "ü 日本"])  # without an index, both ignore the query
BAD_LABELS = st.sampled_from(["a.b", "", "x\x00y", 3, "."])
EVERYTHING = 10**6


# -- the documented filter rule, for the searches InMemoryStore cannot answer ------------------------------


def _number(x: Any) -> float | None:
    """A number as LangGraph's InMemoryStore reads one for a range (``float(x)``), or None where it cannot."""
    if isinstance(x, (bool, int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _in_range(value: Any, operator: str, wanted: Any) -> bool:
    a, b = _number(value), _number(wanted)
    if a is None or b is None:
        if not (isinstance(value, str) and isinstance(wanted, str)):
            return False  # InMemoryStore raises here; we do not match
        a, b = value, wanted  # type: ignore[assignment]  # two strings that are not both numbers: as strings
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[operator]  # type: ignore[operator]


def reference_match(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict) and any(k.startswith("$") for k in wanted):
        return all(
            value == w if op == "$eq" else value != w if op == "$ne" else _in_range(value, op, w)
            for op, w in wanted.items()
        )
    if isinstance(wanted, dict):
        return isinstance(value, dict) and all(reference_match(value.get(k), w) for k, w in wanted.items())
    if isinstance(wanted, list):
        return isinstance(value, list) and len(value) == len(wanted) and all(
            reference_match(v, w) for v, w in zip(value, wanted))
    return value == wanted


# -- comparing answers -------------------------------------------------------------------------------------


def _row(item: Item) -> tuple[tuple[str, ...], str, str]:
    return item.namespace, item.key, json.dumps(item.value, sort_keys=True)


def _rows(items: list[Any]) -> list[tuple[tuple[str, ...], str, str]]:
    return [_row(i) for i in items]


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


class StoresAgree(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.mem = InMemoryStore()
        self.ours = FullrecallStore(f"sqlite:///{Path(self.tmp.name) / 'lg.db'}")
        self.stamps: dict[tuple[tuple[str, ...], str], tuple[datetime, datetime]] = {}  # ours: created, updated
        self.live: dict[tuple[tuple[str, ...], str], dict] = {}  # what both should hold

    def teardown(self) -> None:
        self.ours.close()
        self.tmp.cleanup()

    # -- helpers --

    def _check_item(self, mine: Item | None, theirs: Item | None) -> None:
        assert (None if mine is None else _row(mine)) == (None if theirs is None else _row(theirs))
        if mine is None:
            return
        assert mine.created_at.tzinfo is not None and mine.updated_at.tzinfo is not None  # aware, as LangGraph's
        assert mine.created_at <= mine.updated_at
        known = self.stamps.get((mine.namespace, mine.key))
        if known is not None:
            # the first put's created_at stays (InMemoryStore would show the last overwrite's: see the top)
            assert mine.created_at == known[0]
            assert mine.updated_at >= known[1]

    def _expected_search(self, prefix: tuple[str, ...], filter: dict | None) -> set:
        return {
            (ns, key, json.dumps(value, sort_keys=True))
            for (ns, key), value in self.live.items()
            if ns[: len(prefix)] == prefix and all(reference_match(value.get(k), w) for k, w in (filter or {}).items())
        }

    def _check_search(self, op: SearchOp, mine: list, theirs: list | Exception, *, now: bool = True) -> None:
        """``theirs``: InMemoryStore's page, or what it raised. ``now``: ``mine`` was found in the present state
        (False: earlier in a batch, so that ours cannot be searched again as it was)."""
        expected = self._expected_search(op.namespace_prefix, op.filter)
        # newest updated_at first (InMemoryStore's order is insertion order: see the top), then a page of it
        assert [i.updated_at for i in mine] == sorted((i.updated_at for i in mine), reverse=True)
        assert set(_rows(mine)) <= expected and len(mine) == len(expected) - min(op.offset, len(expected)) - max(
            0, len(expected) - op.offset - op.limit)
        assert all(i.score is None for i in mine)
        if now:
            mine_all = self.ours.search(op.namespace_prefix, filter=op.filter, limit=EVERYTHING)
            assert set(_rows(mine_all)) == expected
            assert _rows(mine) == _rows(mine_all)[op.offset : op.offset + op.limit]
            for item in mine_all:  # the stamps a get shows
                assert (item.created_at, item.updated_at) == self.stamps[(item.namespace, item.key)]
        if isinstance(theirs, Exception):
            # a range over a missing field or a non-numeric string: InMemoryStore raises, we follow the rule
            assert isinstance(theirs, (TypeError, ValueError)), theirs
            return
        theirs_all = self.mem.search(op.namespace_prefix, filter=op.filter, limit=EVERYTHING)
        assert set(_rows(theirs_all)) == expected  # the rule is InMemoryStore's wherever it answers
        assert len(mine) == len(theirs)

    def _canonical_mem(self) -> InMemoryStore:
        """An InMemoryStore holding the live items only (no namespace it merely read or emptied: see the top)."""
        canonical = InMemoryStore()
        for item in self.mem.search((), limit=EVERYTHING):
            canonical.put(item.namespace, item.key, item.value)
        return canonical

    def _check_list(self, op: ListNamespacesOp, mine: list) -> None:
        theirs = self._canonical_mem().batch([op])[0]
        assert mine == theirs  # both sorted (InMemoryStore sorts the namespaces it lists)
        assert set(theirs) <= set(self.mem.batch([op._replace(limit=EVERYTHING, offset=0)])[0])

    def _mem_search(self, op: SearchOp) -> list | Exception:
        try:
            return self.mem.batch([op])[0]
        except (TypeError, ValueError) as exc:
            return exc

    def _remember_put(self, namespace: tuple[str, ...], key: str, value: dict | None, check: bool = True) -> None:
        """Update the model; ``check``: read the item back (False inside a batch: a later op may change it)."""
        if value is None:
            self.live.pop((namespace, key), None)
            self.stamps.pop((namespace, key), None)
            return
        self.live[(namespace, key)] = json.loads(json.dumps(value))
        if not check:
            return
        item = self.ours.get(namespace, key)
        assert item is not None
        self._check_item(item, item)  # created_at kept from an earlier put, updated_at not before the last one
        self.stamps[(namespace, key)] = (item.created_at, item.updated_at)

    # -- rules: the convenience methods --

    @rule(namespace=NAMESPACES, key=KEYS, value=VALUES, sync=st.booleans())
    def put(self, namespace: tuple[str, ...], key: str, value: dict, sync: bool) -> None:
        assert self.mem.put(namespace, key, value) is None
        assert (self.ours.put(namespace, key, value) if sync else _run(self.ours.aput(namespace, key, value))) is None
        self._remember_put(namespace, key, value)

    @initialize(items=st.lists(st.tuples(NAMESPACES, KEYS, VALUES), max_size=10))
    def start_with(self, items: list[tuple[tuple[str, ...], str, dict]]) -> None:
        self.put_several(items)

    @rule(items=st.lists(st.tuples(NAMESPACES, KEYS, VALUES), min_size=1, max_size=8))
    def put_several(self, items: list[tuple[tuple[str, ...], str, dict]]) -> None:
        for namespace, key, value in items:
            self.put(namespace, key, value, True)

    @rule(namespace=NAMESPACES, key=KEYS, how=st.sampled_from(["delete", "adelete", "put None"]))
    def delete(self, namespace: tuple[str, ...], key: str, how: str) -> None:
        self.mem.delete(namespace, key)
        if how == "delete":
            assert self.ours.delete(namespace, key) is None
        elif how == "adelete":
            assert _run(self.ours.adelete(namespace, key)) is None
        else:
            assert self.ours.put(namespace, key, None) is None  # type: ignore[arg-type]
        self._remember_put(namespace, key, None)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def overwrite_a_live_item(self, data: st.DataObject) -> None:
        namespace, key = data.draw(st.sampled_from(sorted(self.live)))
        self.put(namespace, key, data.draw(VALUES), data.draw(st.booleans()))

    @rule(namespace=NAMESPACES, key=KEYS, sync=st.booleans())
    def get(self, namespace: tuple[str, ...], key: str, sync: bool) -> None:
        mine = self.ours.get(namespace, key) if sync else _run(self.ours.aget(namespace, key))
        self._check_item(mine, self.mem.get(namespace, key))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def get_a_live_item(self, data: st.DataObject) -> None:
        namespace, key = data.draw(st.sampled_from(sorted(self.live)))
        self.get(namespace, key, data.draw(st.booleans()))

    @rule(prefix=st.lists(LABELS, max_size=2).map(tuple), filter=FILTERS, limit=LIMITS,
          offset=OFFSETS, sync=st.booleans(), query=QUERIES)
    def search(self, prefix: tuple[str, ...], filter: dict | None, limit: int, offset: int, sync: bool,
               query: str | None = None) -> None:
        options: dict[str, Any] = dict(query=query, filter=filter, limit=limit, offset=offset)
        mine = self.ours.search(prefix, **options) if sync else _run(self.ours.asearch(prefix, **options))
        op = SearchOp(prefix, filter, limit, offset, query)
        self._check_search(op, mine, self._mem_search(op))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def search_for_a_live_value(self, data: st.DataObject) -> None:
        """A filter built from a stored value, so that it matches something."""
        (namespace, _), value = data.draw(st.sampled_from(sorted(self.live.items(), key=repr)))
        if not value:
            return
        field = data.draw(st.sampled_from(sorted(value)))
        wanted = value[field]
        condition = data.draw(st.sampled_from([wanted, {"$eq": wanted}, {"$ne": wanted}, {"$gte": wanted},
                                               {"$lte": wanted}, {"$gt": wanted}, {"$lt": wanted}]))
        self.search(namespace[: data.draw(st.integers(0, len(namespace)))], {field: condition},
                    data.draw(st.integers(0, 4)), data.draw(st.integers(0, 3)), data.draw(st.booleans()))

    @rule(prefix=PREFIXES, suffix=PREFIXES, max_depth=st.one_of(st.none(), st.integers(1, 4)),
          limit=st.integers(0, 8), offset=st.integers(0, 4), sync=st.booleans())
    def list_namespaces(self, prefix: tuple[str, ...], suffix: tuple[str, ...], max_depth: int | None, limit: int,
                        offset: int, sync: bool) -> None:
        options = dict(prefix=prefix or None, suffix=suffix or None, max_depth=max_depth, limit=limit, offset=offset)
        mine = self.ours.list_namespaces(**options) if sync else _run(self.ours.alist_namespaces(**options))
        conditions = tuple(MatchCondition(kind, path) for kind, path in (("prefix", prefix), ("suffix", suffix))
                           if path)
        self._check_list(ListNamespacesOp(conditions, max_depth, limit, offset), mine)

    # -- rules: whole batches, and refused input --

    @rule(ops=st.lists(
        st.one_of(
            st.builds(lambda *a: PutOp(*a), NAMESPACES, KEYS, st.one_of(st.none(), VALUES)),
            st.builds(lambda *a: GetOp(*a), NAMESPACES, KEYS),
            st.builds(lambda *a: SearchOp(*a), st.lists(LABELS, max_size=2).map(tuple), FILTERS, st.integers(0, 5),
                      st.integers(0, 3), QUERIES),
            st.builds(lambda *a: ListNamespacesOp(*a), st.one_of(st.none(), st.tuples(
                st.builds(MatchCondition, st.sampled_from(["prefix", "suffix"]), PREFIXES))),
                st.one_of(st.none(), st.integers(1, 3)), st.integers(0, 8), st.integers(0, 3)),
        ),
        min_size=1, max_size=6,
    ), sync=st.booleans())
    def batch(self, ops: list, sync: bool) -> None:
        mine = self.ours.batch(ops) if sync else _run(self.ours.abatch(ops))
        assert len(mine) == len(ops)
        for op, result in zip(ops, mine):  # InMemoryStore one op at a time: our batches run in order (see the top)
            if isinstance(op, PutOp):
                assert result is None
                self.mem.batch([op])
                self._remember_put(op.namespace, op.key, op.value, check=False)
            elif isinstance(op, GetOp):
                self._check_item(result, self.mem.batch([op])[0])
            elif isinstance(op, SearchOp):
                self._check_search(op, result, self._mem_search(op), now=False)
            else:
                self._check_list(op, result)
        for namespace, key in {(op.namespace, op.key) for op in ops if isinstance(op, PutOp)} & self.live.keys():
            self._remember_put(namespace, key, self.live[(namespace, key)])  # created_at kept, if never deleted

    @rule(namespace=NAMESPACES, bad=BAD_LABELS, where=st.integers(0, 3), key=KEYS)
    def odd_labels_are_refused_alike(self, namespace: tuple, bad: Any, where: int, key: str) -> None:
        labels = list(namespace)
        labels.insert(min(where, len(labels)), bad)
        odd = tuple(labels)
        calls = [
            lambda s: s.put(odd, key, {"x": 1}),
            lambda s: s.get(odd, key),
            lambda s: s.delete(odd, key),
            lambda s: s.search(odd),
            lambda s: s.list_namespaces(prefix=odd),
            lambda s: s.list_namespaces(suffix=odd),
            lambda s: _run(s.aput(odd, key, {"x": 1})),
            lambda s: _run(s.aget(odd, key)),
        ]
        for call in calls:
            for store in (self.mem, self.ours):
                with pytest.raises(InvalidNamespaceError):
                    call(store)

    @rule(key=KEYS, root=st.sampled_from([(), ("langgraph",), ("langgraph", "a")]))
    def reserved_and_empty_namespaces(self, key: str, root: tuple[str, ...]) -> None:
        """Both refuse to put there; reading or deleting there finds nothing, in both."""
        for store in (self.mem, self.ours):
            with pytest.raises(InvalidNamespaceError):
                store.put(root, key, {"x": 1})
            assert store.get(root, key) is None
            assert store.delete(root, key) is None
            assert store.search(root, limit=EVERYTHING) == [] or root == ()

    @invariant()
    def both_hold_the_live_items(self) -> None:
        mine = sorted(_rows(self.ours.search((), limit=EVERYTHING)))
        assert mine == sorted(_rows(self.mem.search((), limit=EVERYTHING)))
        assert mine == sorted((ns, k, json.dumps(v, sort_keys=True)) for (ns, k), v in self.live.items())


StoresAgree.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestStoresAgree = StoresAgree.TestCase


# -- semantic search, with a cheap deterministic embedder on both sides -------------------------------------

TEXTS = st.sampled_from(["grey kitten", "a cat on the mat", "revenue grew", "ünïcødé tea", "", "tea", "kitten"])
INDEXED_VALUES = st.fixed_dictionaries(
    {"text": TEXTS, "n": st.integers(0, 3)},  # "n" always there: InMemoryStore raises on a range over a missing one
    optional={"notes": st.lists(st.fixed_dictionaries({"body": TEXTS}), max_size=3)},
)
INDEX_CHOICES = st.sampled_from([None, False, ["notes[*].body"], ["text", "notes[*].body"], ["missing"]])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    puts=st.lists(st.tuples(st.sampled_from([("d",), ("d", "x"), ("e",)]), st.sampled_from(["k1", "k2", "k3", "k4"]),
                            INDEXED_VALUES, INDEX_CHOICES), min_size=1, max_size=8,
                   unique_by=lambda put: (put[0], put[1])),  # each item put once: see below
    query=TEXTS.filter(bool),
    prefix=st.sampled_from([(), ("d",), ("e",)]),
    filter=st.one_of(st.none(), st.fixed_dictionaries({"n": st.one_of(st.integers(0, 3),
                                                                       st.fixed_dictionaries({"$gte": st.integers(0, 3)}))})),
    page=st.tuples(st.integers(1, 4), st.integers(0, 4)),
)
def test_semantic_search_scores_as_in_memory_store(tmp_path_factory, puts, query, prefix, filter, page) -> None:
    """Scores are InMemoryStore's (the best cosine over an item's vectors, to float32 precision); ours come
    best first, the items without a vector after them, unscored, and every page is a slice of that order.

    InMemoryStore pages its unscored items without the offset (each page repeats them from the first): an
    artefact, so unscored items are compared over the whole result, and pages on our side only. Ties are in
    each store's own order (insertion order there, newest first here), so scores are compared per item.
    An overwrite keeps the old vectors in InMemoryStore (put ``index=False`` or other fields, and the item
    still scores by its old text); ours replaces them: so each item is put once here. And InMemoryStore
    fails a put whose indexed paths hold the same text twice ("Number of embeddings (1) does not match
    number of indices (2)"): such examples are skipped.
    """
    from lg_helpers import CharEmbeddings

    fields = ["text"]
    mem = InMemoryStore(index={"dims": 64, "embed": CharEmbeddings(), "fields": fields})
    path = tmp_path_factory.mktemp("sem") / "lg.db"
    with FullrecallStore(f"sqlite:///{path}", index={"dims": 64, "embed": CharEmbeddings(), "fields": fields}) as ours:
        for namespace, key, value, index in puts:
            try:
                mem.put(namespace, key, value, index=index)
            except ValueError as exc:
                assert "does not match number of indices" in str(exc)
                reject()
            ours.put(namespace, key, value, index=index)
        theirs = mem.search(prefix, query=query, filter=filter, limit=EVERYTHING)
        mine = ours.search(prefix, query=query, filter=filter, limit=EVERYTHING)
        assert sorted(_rows(mine)) == sorted(_rows(theirs))
        scores = {(i.namespace, i.key): i.score for i in theirs}
        for item in mine:
            expected = scores[(item.namespace, item.key)]
            assert (item.score is None) == (expected is None), item
            if expected is not None:
                assert item.score == pytest.approx(expected, abs=1e-5)
        scored = [i.score for i in mine if i.score is not None]
        assert [i.score for i in mine[: len(scored)]] == scored == sorted(scored, reverse=True)
        limit, offset = page
        assert _rows(ours.search(prefix, query=query, filter=filter, limit=limit, offset=offset)) == _rows(
            mine)[offset : offset + limit]
