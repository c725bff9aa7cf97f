"""Fuzzing the public entry points with message shapes, text and metadata of every kind.

Whatever goes in, ``Store.append`` (every backend), ``ConversationMemory.add`` and ``SemanticSearch.add``
either store it (and give it back exactly) or raise ``InvalidInput`` (a ``ValueError``) having written
nothing: never a raw exception, never part of a batch.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall import ConversationMemory, InvalidInput
from fullrecall.search import SemanticSearch
from fullrecall.stores import Scope, Store, StoredMessage, open_store

ODD = ["\x00", "\ufdd0", "🎉", "\u2028", "é", "\r\n", "", "\x00\x00"]
SURROGATES = ["\ud800", "\udfff"]
# mostly valid text (NUL and friends included), now and then a lone surrogate
texts = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(ODD), st.text(max_size=6), st.sampled_from(ODD),
                           st.sampled_from(ODD), st.sampled_from(ODD), st.sampled_from(SURROGATES)),
                 max_size=4).map("".join)
valid_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                          texts)
bad_scalars = st.sampled_from([float("nan"), float("inf"), b"bytes", {1, 2}, object(), complex(1, 2), (1,)])
json_ish = st.recursive(
    st.one_of(valid_scalars, valid_scalars, valid_scalars, bad_scalars),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(texts, texts, texts, st.integers()), inner, max_size=3),
    ),
    max_leaves=6,
)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])


ANYTHING = st.one_of(texts, st.integers(-2, 5), st.floats(), st.none(), st.binary(max_size=3), json_ish,
                    st.lists(texts, max_size=1))


@st.composite
def stored_messages(draw: Any, i: int) -> StoredMessage:
    """A message of plausible fields (odd text and JSON included); one in three has one field of any type."""
    values = {
        "id": f"m{draw(st.integers(0, 5))}",  # ids repeat within a batch: the first one wins
        "role": draw(st.sampled_from(["user", "assistant", "Caroline"])),
        "text": draw(texts),
        "data": draw(st.dictionaries(texts, json_ish, max_size=3)),
        "metadata": draw(st.dictionaries(texts, json_ish, max_size=2)),
        "kind": draw(st.sampled_from(["message", "summary"])),
        "position": None,
        "created_at": 1000.0 + i,
        "summary_id": None,
    }
    if draw(st.integers(0, 2)) == 2:  # (hypothesis favours small numbers: 2 is the rare case)
        values[draw(st.sampled_from(sorted(values)))] = draw(ANYTHING)
    return StoredMessage(**values)


def _session() -> Scope:
    return Scope(user_id="fuzz", session_id=uuid.uuid4().hex)


class TestStoreAppendFuzz:
    @FUZZ
    @given(data=st.data(), n=st.integers(1, 4))
    def test_append_stores_exactly_or_refuses_everything(self, store_url: str, data: Any, n: int) -> None:
        store = _store(store_url)
        scope = _session()
        batch = [data.draw(stored_messages(i)) for i in range(n)]
        try:
            positions = store.append(scope, batch)
        except InvalidInput:
            assert store.count(scope) == 0  # not one message of a refused batch
            return
        except ValueError as exc:  # the one refusal that depends on what is stored: a taken position
            assert "already taken" in str(exc)
            assert store.count(scope) == 0
            return
        first = {}
        for m, p in zip(batch, positions):
            first.setdefault(m.id, (m, p))
        back = {m.id: m for m in store.range(scope, 0, 10_000)}
        assert set(back) == set(first)
        for key, (m, p) in first.items():
            got = back[key]
            assert (got.position, got.role, got.text, got.data, got.metadata, got.kind) == (
                p, m.role, m.text, _json_round_trip(m.data), _json_round_trip(m.metadata), m.kind)


_STORES: dict[str, Store] = {}


@pytest.fixture(autouse=True, scope="module")
def _close_stores() -> Iterator[None]:
    yield
    while _STORES:
        _STORES.popitem()[1].close()


def _store(url: str) -> Store:
    """One open store per URL for all examples (each example writes its own session)."""
    if url not in _STORES:
        _STORES[url] = open_store(url)
    return _STORES[url]


def _json_round_trip(value: Any) -> Any:
    """What JSON gives back: tuples become lists."""
    if isinstance(value, dict):
        return {k: _json_round_trip(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_round_trip(v) for v in value]
    return value


@st.composite
def chat_messages(draw: Any) -> dict[str, Any]:
    """A chat message (OpenAI shape) of odd text and metadata; one in three has one field of any type."""
    parts = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), min_size=1, max_size=2)
    msg: dict[str, Any] = {
        "role": draw(st.sampled_from(["user", "assistant", "system"])),
        "content": draw(st.one_of(texts, parts)),
    }
    if draw(st.booleans()):
        msg["metadata"] = draw(st.dictionaries(texts, json_ish, max_size=2))
    if draw(st.booleans()):
        msg[draw(texts)] = draw(json_ish)
    if draw(st.integers(0, 2)) == 2:
        msg[draw(st.sampled_from(sorted(msg)))] = draw(ANYTHING)
    return msg


SUMMARY = "\u27e6summary\u27e7"  # fuzzed text never holds it


def _is_summary(message: dict[str, Any]) -> bool:
    return SUMMARY in str(message.get("content"))


def _chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("role") != "system"]


class TestConversationMemoryFuzz:
    @FUZZ
    @given(batches=st.lists(st.lists(chat_messages(), min_size=1, max_size=3), min_size=1, max_size=3))
    def test_add_keeps_every_accepted_message_or_refuses_the_batch(
        self, default_embedder: Any, batches: list[list[dict[str, Any]]]
    ) -> None:
        store = _store("sqlite:///:memory:")
        session = uuid.uuid4().hex
        memory = ConversationMemory(store, session, summarizer=lambda m, p: SUMMARY, max_history_turns=2,
                                    preserve_recent_messages=1, embedding_model=default_embedder)
        accepted: list[dict[str, Any]] = []
        for batch in batches:
            before = memory.messages
            try:
                memory.add(batch)
            except InvalidInput:
                assert memory.messages == before
                continue
            accepted += batch
        archived = [m.data for m in memory.manager.archive.get(0, 10_000) if not _is_summary(m.data)]
        window = memory.messages
        kept = archived + [m for m in window if not _is_summary(m)]
        assert sorted(map(json.dumps, kept)) == sorted(map(json.dumps, accepted))  # all, once, verbatim
        assert _chat(kept) == _chat(accepted)  # in order (a system message stays pinned at the window's start)
        again = ConversationMemory(store, session, summarizer=lambda m, p: SUMMARY, max_history_turns=2,
                                   preserve_recent_messages=1, embedding_model=default_embedder)
        assert again.messages == window  # and durable


class TestSemanticSearchAddFuzz:
    @FUZZ
    @given(
        items=st.lists(
            st.tuples(st.one_of(texts, st.none(), st.integers()),
                      st.one_of(st.dictionaries(st.sampled_from(["role", "speaker", "date", "created_at", "x"]),
                                                json_ish, max_size=3), json_ish)),
            min_size=1, max_size=3,
        )
    )
    def test_add_indexes_everything_or_nothing(self, default_embedder: Any, items: list[tuple[Any, Any]]) -> None:
        store = _store("sqlite:///:memory:")
        search = SemanticSearch(default_embedder, store=store, scope=_session())
        ids = [f"t{i}" for i in range(len(items))]
        try:
            search.add([t for t, _ in items], ids=ids, metadata=[m for _, m in items])
        except InvalidInput:
            assert store.count(search.scope) == 0
            return
        assert [m.data["text"] for m in store.get(search.scope, ids)] == [t for t, _ in items]
        assert set(store.get_vectors(search.scope, ids)) == set(ids)
