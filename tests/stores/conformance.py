"""The behaviour every Store must have, written once and run against every backend.

``test_conformance.py`` runs :class:`StoreConformance` with the ``store``, ``store_url``
and ``scope`` fixtures of ``conftest.py`` for SQLite, PostgreSQL and Redis. The worker
functions at the bottom run in child processes (concurrency and crash tests).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
import uuid
from typing import Any

import numpy as np
import pytest
from conformance_core import CoreConformance, assert_counters_exact, race
from conformance_input import InputConformance
from conformance_places import PlacesConformance
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fullrecall.errors import InvalidInput, StoreError
from fullrecall.stores import ANY, Filters, Record, Scope, Store, StoredMessage, open_store

DIM = 16
FORGET_COUNTS = ("messages", "summaries", "facts", "patterns", "vectors", "state", "records", "sessions")


def msg(
    i: int | str, text: str | None = None, *, role: str = "user", kind: str = "message", **kw: Any
) -> StoredMessage:
    return StoredMessage(
        id=f"m{i}",
        role=role,
        text=text if text is not None else f"message number {i}",
        data={"role": role, "content": [{"text": text or f"message number {i}"}], "n": i},
        kind=kind,
        **kw,
    )


def unit(seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


def ids(results: list[tuple[str, float]]) -> list[str]:
    return [r[0] for r in results]


class StoreConformance(CoreConformance, InputConformance, PlacesConformance):
    # -- messages ----------------------------------------------------------------

    def test_append_get_range_count_delete(self, store: Store, scope: Scope) -> None:
        assert isinstance(store, Store)  # the runtime-checkable protocol: every method is there
        assert store.append(scope, [msg(i) for i in range(5)]) == [0, 1, 2, 3, 4]
        assert store.append(scope, [msg(5)]) == [5]
        assert store.count(scope) == 6
        got = store.get(scope, ["m3", "m1", "nope"])
        assert [m.id for m in got] == ["m1", "m3"]  # conversation order, unknown skipped
        assert got[0].position == 1 and got[0].session_id == scope.session_id
        assert [m.position for m in store.range(scope, 2, 4)] == [2, 3, 4]
        assert store.range(scope, 10, 20) == []
        assert store.delete(scope, ["m2", "m4", "nope"]) == 2
        assert store.count(scope) == 4
        assert [m.id for m in store.range(scope, 0, 10)] == ["m0", "m1", "m3", "m5"]
        assert store.append(scope, [msg(6)]) == [6]  # positions are never reused

    def test_message_round_trips_verbatim(self, store: Store, scope: Scope) -> None:
        data = {
            "z": 1,
            "a": [{"text": "naïve café 日本語 🎉"}, {"toolUse": {"input": {"x": None, "y": 1.5}}}],
            "b": True,
        }
        m = StoredMessage(
            id="v1",
            role="assistant",
            text="rendered text",
            data=data,
            kind="summary",
            created_at=1700000000.25,
            archived_at=1700000001.5,
            summary_id="sum-1",
            metadata={"tokens": 12},
        )
        store.append(scope, [m])
        (back,) = store.get(scope, ["v1"])
        assert back.data == data and list(back.data) == ["z", "a", "b"]  # key order kept
        assert (back.role, back.text, back.kind, back.summary_id, back.metadata) == (
            "assistant",
            "rendered text",
            "summary",
            "sum-1",
            {"tokens": 12},
        )
        assert (back.created_at, back.archived_at) == (1700000000.25, 1700000001.5)

    def test_append_is_idempotent_on_id(self, store: Store, scope: Scope) -> None:
        assert store.append(scope, [msg(0), msg(1)]) == [0, 1]
        assert store.append(scope, [msg(1), msg(2), msg(0)]) == [1, 2, 0]
        assert store.append(scope, [msg(3), msg(3)]) == [3, 3]
        assert store.count(scope) == 4
        changed = dataclasses.replace(msg(1), text="something else")
        store.append(scope, [changed])
        assert store.get(scope, ["m1"])[0].text == "message number 1"  # first write wins

    def test_append_names_the_ids_the_session_held(self, store: Store, scope: Scope) -> None:
        """A caller tells its rerun from another writer's message under the same id by ``held`` (nothing written)."""
        first = store.append(scope, [msg(0), msg(1)])
        assert first == [0, 1] and first.held == frozenset()
        again = store.append(scope, [msg(1), msg(2), msg(2), msg(0, position=0)])
        assert again == [1, 2, 2, 0] and again.held == {"m0", "m1"}  # m2 twice in the call: new, not held
        assert store.append(scope, [msg(3)]).held == frozenset() and store.append(scope, []).held == frozenset()
        swapped = store.replace(scope, ["m1"], [msg(1, "said again"), msg(2)])
        assert swapped.held == {"m2"}  # m1 was deleted in the same write: new again

    def test_explicit_positions(self, store: Store, scope: Scope) -> None:
        assert store.append(scope, [msg(0, position=10)]) == [10]
        assert store.append(scope, [msg(1)]) == [11]  # continues after the highest
        with pytest.raises(ValueError):
            store.append(scope, [msg(2, position=10)])  # taken by another id
        assert store.count(scope) == 2  # the refused write left nothing

    def test_replace_deletes_and_appends_in_one_write(self, store: Store, scope: Scope) -> None:
        store.append(scope, [msg(i, f"old words {i}") for i in range(4)])
        store.set_vectors(scope, ["m0", "m1"], np.stack([unit(0), unit(1)]), "test-model")
        assert store.replace(scope, ["m0", "nope"], [msg(10, "fresh prompt", position=0), msg(11)]) == [0, 4]
        assert [m.id for m in store.range(scope, 0, 10)] == ["m10", "m1", "m2", "m3", "m11"]
        assert store.get_vectors(scope, ["m0", "m1"]).keys() == {"m1"}  # the deleted message's vector went with it
        assert "m0" not in {h.id for h in store.search_text(scope, ["old"], 10)}
        assert "m10" in {h.id for h in store.search_text(scope, ["fresh"], 10)}
        assert_counters_exact(store, scope)
        # a message may replace itself (same id, same place, new content); no ids is an append, no messages a delete
        assert store.replace(scope, ["m1"], [msg(1, "changed", position=1)]) == [1]
        assert store.get(scope, ["m1"])[0].text == "changed"
        assert store.replace(scope, [], [msg(12)]) == [5] and store.replace(scope, ["m12"], []) == []
        assert_counters_exact(store, scope)
        with pytest.raises(ValueError, match="session"):
            store.replace(Scope(user_id="alice"), ["m1"], [])

    def test_a_refused_replace_deletes_nothing(self, store: Store, scope: Scope) -> None:
        store.append(scope, [msg(i) for i in range(3)])
        with pytest.raises(ValueError):  # position 2 is held by a message the replace does not delete
            store.replace(scope, ["m1"], [msg(5, position=2)])
        with pytest.raises(ValueError):  # two new messages at one position
            store.replace(scope, ["m1"], [msg(5, position=1), msg(6, position=1)])
        with pytest.raises(InvalidInput):  # a bad message, named before anything is written
            store.replace(scope, ["m1"], [msg(5), StoredMessage(id="bad\x00", role="user", text="x", data={})])
        with pytest.raises(InvalidInput):
            store.replace(scope, ["m1", "bad\x00"], [msg(5)])
        assert [m.id for m in store.range(scope, 0, 10)] == ["m0", "m1", "m2"]
        assert_counters_exact(store, scope)

    def test_sigkill_mid_replace_leaves_all_of_it_or_none(self, store: Store, store_url: str, scope: Scope) -> None:
        """A worker replaces the message at position 0 again and again, appending one more message each time:
        killed at any moment, position 0 holds one message, and the appended ones match it (none half done).
        """
        store.append(scope, [StoredMessage(id="h0", role="system", text="prompt 0", data={"i": 0}, position=0)])
        ctx = multiprocessing.get_context("spawn")
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=replace_worker, args=(store_url, scope, writer))
        p.start()
        writer.close()
        acked = 0
        deadline = time.monotonic() + 60
        while acked < 30 and time.monotonic() < deadline:
            if reader.poll(1):
                acked = reader.recv()
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        assert p.exitcode == -signal.SIGKILL and acked >= 30
        rows = store.range(scope, 0, 10**6)
        head, tails = rows[0], [m.id for m in rows[1:]]
        assert head.position == 0 and head.id.startswith("h")
        k = int(head.id[1:])
        assert k >= acked and tails == [f"t{j}" for j in range(k)]
        assert store.count(scope) == k + 1

    def test_writes_need_a_session_and_valid_input(self, store: Store, scope: Scope) -> None:
        with pytest.raises(ValueError, match="session"):
            store.append(Scope(user_id="alice"), [msg(0)])
        with pytest.raises(ValueError):
            store.append(scope, [StoredMessage(id="bad", role="user", text="x", data={"f": object()})])
        with pytest.raises(ValueError):
            store.append(scope, [msg(0, kind="weird")])
        assert store.count(scope) == 0

    # -- search --------------------------------------------------------------------

    def _corpus(self, store: Store, scope: Scope) -> None:
        texts = [
            "The invoice for the new server arrived today",
            "Your booking reference is REF-48213, keep it safe",
            "I went running in the park this morning",
            "Please book a table for two at the Italian place",
            "The weather forecast says heavy rain tomorrow",
            "My reference number for the ticket is REF-99871",
        ]
        roles = ["user", "assistant", "user", "user", "assistant", "user"]
        store.append(scope, [msg(i, t, role=r, created_at=1000.0 + i) for i, (t, r) in enumerate(zip(texts, roles))])

    def test_search_text_finds_keyword_only_hit(self, store: Store, scope: Scope) -> None:
        self._corpus(store, scope)
        assert ids(store.search_text(scope, ["REF-48213"], 3))[0] == "m1"
        assert ids(store.search_text(scope, ["48213"], 3)) == ["m1"]
        assert "m2" in ids(store.search_text(scope, ["runs"], 3))  # stemmed: runs ~ running
        hits = store.search_text(scope, ["weather", "invoice"], 10)
        assert set(ids(hits)) == {"m0", "m4"}  # OR of terms
        assert all(h.score > 0 for h in hits)
        assert store.search_text(scope, ["zebra"], 5) == []
        assert store.search_text(scope, ['"quoted" AND (x OR', "NEAR(", "*"], 5) == []  # no syntax errors
        assert store.search_text(scope, [], 5) == []
        assert store.search_text(scope, ["reference"], 1) != []
        assert len(store.search_text(scope, ["reference"], 1)) == 1

    def test_search_text_folds_a_dotted_capital_i_as_every_backend_does(self, store: Store, scope: Scope) -> None:
        """Turkish "İstanbul" is one word, "istanbul", written and asked either way, on every backend (in
        process it was "i" and "stanbul": neither spelling found the other's messages there, as they did on
        PostgreSQL and SQLite's FTS5)."""
        store.append(scope, [msg("a", "İstanbul trip planned for İzmir too"), msg("b", "istanbul again"),
                             msg("c", "ISTANBUL by night"), msg("d", "stanbul is not a word")])
        for term in ("istanbul", "İstanbul", "ISTANBUL"):
            assert set(ids(store.search_text(scope, [term], 5))) == {"ma", "mb", "mc"}, term
        assert ids(store.search_text(scope, ["izmir"], 5)) == ["ma"]

    def test_search_text_folds_accents_and_splits_words_as_fts5_does(self, store: Store, scope: Scope) -> None:
        """Accents are folded as SQLite FTS5's unicode61 folds them ("café" is "cafe"), an underscore and an
        apostrophe split words, a Greek final sigma is a sigma: the same query finds the same messages on every
        backend and on SQLite's two engines (the in-process index and PostgreSQL kept the accents: "cafe"
        did not find "café" there, as it did on FTS5; PostgreSQL also kept "my_notes" one word)."""
        store.append(scope, [msg("a", "Rendez-vous au café Montréal"), msg("b", "CAFÉ NOIR à emporter"),
                             msg("c", "see my_notes and l'été"), msg("d", "ΟΔΟΣ μακριά"), msg("e", "a plain cafeteria")])
        for term in ("cafe", "Café", "CAFE", "cafe\u0301"):
            assert set(ids(store.search_text(scope, [term], 5))) == {"ma", "mb"}, term
        for term in ("cafe montreal", "Montréal", "montreal"):
            assert ids(store.search_text(scope, [term], 5)) == ["ma"], term
        assert ids(store.search_text(scope, ["a emporter"], 5)) == ["mb"]  # "à" is the word "a"
        assert ids(store.search_text(scope, ["notes"], 5)) == ["mc"]
        assert ids(store.search_text(scope, ["ete"], 5)) == ["mc"]
        assert ids(store.search_text(scope, ["οδοσ"], 5)) == ["md"]
        assert ids(store.search_text(scope, ["οδός"], 5)) == []  # a Greek accent stays, as in FTS5

    def test_search_text_stems_and_keeps_every_word_as_fts5_does(self, store: Store, scope: Scope) -> None:
        """Every word is indexed and stemmed by the Porter algorithm (FTS5's ``porter``), on every backend: "the"
        finds its message and "new" finds "news" (PostgreSQL's english configuration dropped "the", stemmed
        "news" to "news" and "skies" to "sky", so the same query found other messages there); a word too long
        for a PostgreSQL lexeme (2,047 bytes) is found as well, and a term of several words is a phrase."""
        long_word = "x" * 3000
        store.append(scope, [msg("a", "read the news"), msg("b", "skiing trips"), msg("c", "a new self portrait"),
                             msg("d", f"{long_word} long"), msg("e", "portrait of a self")])
        assert set(ids(store.search_text(scope, ["new"], 5))) == {"ma", "mc"}
        assert ids(store.search_text(scope, ["the"], 5)) == ["ma"]
        assert ids(store.search_text(scope, ["skies"], 5)) == ["mb"]
        assert ids(store.search_text(scope, [long_word], 5)) == ["md"]
        assert ids(store.search_text(scope, ["x" * 2999], 5)) == []
        assert ids(store.search_text(scope, ["self-portrait"], 5)) == ["mc"]  # side by side, in this order
        assert set(ids(store.search_text(scope, ["self", "portrait"], 5))) == {"mc", "me"}

    def test_search_text_ranks_better_matches_first(self, store: Store, scope: Scope) -> None:
        store.append(
            scope,
            [
                msg("a", "apple banana cherry date elderberry fig grape"),
                msg("b", "apple apple apple"),
                msg("c", "nothing relevant here at all"),
            ],
        )
        results = store.search_text(scope, ["apple", "banana"], 5)
        assert set(ids(results)) == {"ma", "mb"}
        scores = [h.score for h in results]
        assert scores == sorted(scores, reverse=True)

    def test_search_vectors(self, store: Store, scope: Scope) -> None:
        store.append(scope, [msg(i) for i in range(20)])
        vecs = np.stack([unit(i) for i in range(20)])
        store.set_vectors(scope, [f"m{i}" for i in range(20)], vecs, "test-model")
        assert store.vector_model(scope) == ("test-model", DIM)
        hits = store.search_vectors(scope, vecs[7] * 3.0, 5)  # cosine: scale does not matter
        assert hits[0][0] == "m7" and hits[0][1] == pytest.approx(1.0, abs=1e-4)
        assert len(hits) == 5
        expected = np.argsort(-(vecs @ vecs[7]))[:5]
        assert ids(hits) == [f"m{i}" for i in expected]
        got = store.get_vectors(scope, ["m3", "m99"])
        assert list(got) == ["m3"] and np.allclose(got["m3"], vecs[3], atol=1e-6)
        assert store.search_vectors(scope, vecs[0], 0) == []

    def test_a_prepared_vector_search_answers_as_search_vectors(self, store: Store, scope: Scope) -> None:
        """``prepare_vector_search`` (taken while a question is embedded) then ``search(vector, k)`` gives what
        ``search_vectors`` gives, filters and an owner-wide scope included; it finds what was written before it
        was prepared (a write after it may be found or not), and refuses a bad ``k`` as ``search_vectors`` does.
        """
        owner = Scope(user_id=scope.user_id, agent_id=scope.agent_id)
        assert store.prepare_vector_search(owner)(unit(0), 3) == []  # nothing stored yet
        store.append(scope, [msg(i, role="user" if i % 2 else "assistant") for i in range(20)])
        store.set_vectors(scope, [f"m{i}" for i in range(20)], np.stack([unit(i) for i in range(20)]), "m")
        roles = Filters(roles=("user",))
        for sc, f in ((scope, None), (owner, None), (scope, roles), (owner, roles)):
            prepared = store.prepare_vector_search(sc, f)
            for seed, k in ((3, 5), (11, 1), (7, 50), (0, 0)):
                assert prepared(unit(seed), k) == store.search_vectors(sc, unit(seed), k, f)
        prepared = store.prepare_vector_search(owner)
        store.append(scope, [msg(20)])
        store.set_vectors(scope, ["m20"], unit(20)[None], "m")
        assert ids(prepared(unit(4), 1)) == ["m4"] and len(prepared(unit(20), 21)) in (20, 21)
        assert ids(store.prepare_vector_search(owner)(unit(20), 1)) == ["m20"]
        with pytest.raises(InvalidInput):
            prepared(unit(0), -1)

    def test_a_zero_vector_scores_zero(self, store: Store, scope: Scope) -> None:
        """A zero vector has no direction: its cosine is 0 (never NaN, never ranked first), on every backend."""
        store.append(scope, [msg(i) for i in range(3)])
        axis = np.eye(DIM, dtype=np.float32)[0]
        store.set_vectors(scope, ["m0", "m1", "m2"], np.stack([np.zeros(DIM, np.float32), axis, -axis]), "m")
        hits = store.search_vectors(scope, axis, 3)
        assert [(h.id, h.score) for h in hits] == [("m1", pytest.approx(1.0)), ("m0", 0.0), ("m2", pytest.approx(-1.0))]
        assert sorted((h.id, h.score) for h in store.search_vectors(scope, np.zeros(DIM, np.float32), 3)) == [
            ("m0", 0.0), ("m1", 0.0), ("m2", 0.0)]

    def test_search_sees_other_instances_writes(self, store: Store, store_url: str, scope: Scope) -> None:
        """Caches (vector matrices, text indexes) notice writes made through another connection/process."""
        store.append(scope, [msg(i, f"alpha word{i}") for i in range(3)])
        store.set_vectors(scope, ["m0", "m1", "m2"], np.stack([unit(i) for i in range(3)]), "m")
        assert ids(store.search_vectors(scope, unit(0), 1)) == ["m0"]
        assert len(store.search_text(scope, ["alpha"], 10)) == 3
        other = open_store(store_url)
        try:
            other.append(scope, [msg(9, "alpha beta")])
            other.set_vectors(scope, ["m9"], unit(9)[None], "m")
            other.delete(scope, ["m0"])
        finally:
            other.close()
        assert ids(store.search_vectors(scope, unit(9), 1)) == ["m9"]
        assert "m0" not in ids(store.search_vectors(scope, unit(0), 10))
        assert set(ids(store.search_text(scope, ["alpha"], 10))) == {"m1", "m2", "m9"}

    def test_a_message_written_where_a_deleted_one_stood_is_searched_in_its_place(
        self, store: Store, store_url: str, scope: Scope
    ) -> None:
        """A message deleted and another written at its position (the count and next position as they were) is
        not found by a handle that searched before, and the new one is: as a fresh handle answers.
        """
        store.append(scope, [msg(i, f"heron word{i}") for i in range(4)])
        store.set_vectors(scope, [f"m{i}" for i in range(4)], np.stack([unit(i) for i in range(4)]), "m")
        assert len(store.search_text(scope, ["heron"], 10)) == 4 and ids(store.search_vectors(scope, unit(3), 1)) == ["m3"]
        store.delete(scope, ["m3"])
        store.append(scope, [msg(9, "otter word9", position=3)])
        store.set_vectors(scope, ["m9"], unit(9)[None], "m")
        store.replace(scope, ["m1"], [msg(8, "otter word8", position=1)])
        fresh = open_store(store_url)
        try:
            for handle in (store, fresh):
                assert ids(store.search_text(scope, ["heron"], 10)) == ids(fresh.search_text(scope, ["heron"], 10))
                assert set(ids(handle.search_text(scope, ["heron"], 10))) == {"m0", "m2"}
                assert set(ids(handle.search_text(scope, ["otter"], 10))) == {"m8", "m9"}
                assert "m3" not in ids(handle.search_vectors(scope, unit(3), 10))
                assert ids(handle.search_vectors(scope, unit(9), 1)) == ["m9"]
        finally:
            fresh.close()

    def test_filters(self, store: Store, scope: Scope) -> None:
        self._corpus(store, scope)
        store.append(
            scope,
            [
                msg(
                    "s",
                    "summary mentioning the invoice and the rain",
                    kind="summary",
                    role="assistant",
                    created_at=2000.0,
                )
            ],
        )
        all_ids = [f"m{i}" for i in range(6)] + ["ms"]
        store.set_vectors(scope, all_ids, np.stack([unit(1)] * 7), "m")
        cases = [
            (Filters(roles=("user",)), {"m0", "m2", "m3", "m5"}),
            (Filters(kinds=("summary",)), {"ms"}),
            (Filters(since=1002.0, until=1004.0), {"m2", "m3", "m4"}),
            (Filters(exclude_ids=frozenset({"m0", "m1"})), {"m2", "m3", "m4", "m5", "ms"}),
            (Filters(roles=("assistant",), kinds=("message",)), {"m1", "m4"}),
        ]
        words = ["invoice", "reference", "running", "table", "weather", "rain", "summary"]
        for f, expected in cases:
            assert set(ids(store.search_vectors(scope, unit(1), 50, f))) == expected, f
            text_hits = set(ids(store.search_text(scope, words, 50, f)))
            assert text_hits and text_hits <= expected, f

    # -- scopes ----------------------------------------------------------------------

    def test_scope_isolation(self, store: Store) -> None:
        tag = uuid.uuid4().hex[:6]
        a1 = Scope(user_id=f"alice{tag}", session_id="one")
        a2 = Scope(user_id=f"alice{tag}", session_id="two")
        b1 = Scope(user_id=f"bob{tag}", session_id="one")  # same session id, other user
        other_tenant = Scope(tenant=f"acme{tag}", user_id=f"alice{tag}", session_id="one")
        for n, sc in enumerate((a1, a2, b1, other_tenant)):
            store.append(sc, [msg(f"{n}", f"secret project falcon {n}")])
            store.set_vectors(sc, [f"m{n}"], unit(0)[None], "m")
        assert store.count(a1) == 1 and store.count(Scope(user_id=f"alice{tag}")) == 2
        assert ids(store.search_text(a1, ["falcon"], 10)) == ["m0"]
        assert set(ids(store.search_text(Scope(user_id=f"alice{tag}"), ["falcon"], 10))) == {"m0", "m1"}
        assert ids(store.search_text(b1, ["falcon"], 10)) == ["m2"]
        assert set(ids(store.search_vectors(Scope(user_id=f"alice{tag}"), unit(0), 10))) == {"m0", "m1"}
        assert ids(store.search_vectors(other_tenant, unit(0), 10)) == ["m3"]
        assert store.get(b1, ["m0", "m1"]) == []
        assert store.delete(b1, ["m0"]) == 0 and store.count(a1) == 1
        assert store.range(a2, 0, 10)[0].id == "m1"

    def test_unset_owner_is_the_default_owner_on_reads_and_writes(self, store: Store) -> None:
        """An unset user or agent means the default owner everywhere; "everyone" is ANY, and only reads take it."""
        tag = uuid.uuid4().hex[:6]
        session = f"default-{tag}"
        alice, bob = Scope(user_id=f"alice{tag}", session_id=session), Scope(user_id=f"bob{tag}", session_id=session)
        helper = Scope(user_id=f"alice{tag}", agent_id="helper", session_id=session)
        nobody = Scope(session_id=session)  # no user, no agent: the default owner
        for n, sc in enumerate((alice, bob, helper)):
            store.append(sc, [msg(n, f"secret pelican {n}")])
            store.set_vectors(sc, [f"m{n}"], unit(n)[None], "m")
            store.put_state(sc, "window", {"owner": n})
            store.put_record(sc, Record(id=f"r{n}", namespace="facts", text=f"fact {n}"))
        for sc in (nobody, Scope(user_id="", agent_id="", session_id=session)):
            assert store.count(sc) == 0 and store.get(sc, ["m0", "m1", "m2"]) == []
            assert store.get_state(sc, "window") is None and store.get_records(sc, "facts") == []
            assert store.search_text(sc, ["pelican"], 10) == [] and store.search_vectors(sc, unit(0), 10) == []
        # Alice without an agent is not alice's helper agent, and the other way round.
        alice_user = Scope(user_id=f"alice{tag}")
        assert ids(store.search_text(alice_user, ["pelican"], 10)) == ["m0"]
        assert ids(store.search_text(Scope(user_id=f"alice{tag}", agent_id=ANY), ["pelican"], 10)) in (["m0", "m2"], ["m2", "m0"])
        assert store.get_state(helper, "window") == {"owner": 2} and store.get_state(alice, "window") == {"owner": 0}
        # The default owner's writes and forget touch nobody else.
        store.append(nobody, [msg(9, "the default owner's pelican")])
        assert store.forget(nobody)["messages"] == 1
        assert store.count(alice) == store.count(bob) == store.count(helper) == 1
        # An administrator names everyone explicitly.
        assert store.count(Scope.everyone()) >= 3
        assert set(ids(store.search_text(Scope(user_id=ANY, agent_id=ANY, session_id=session), ["pelican"], 10))) == {
            "m0", "m1", "m2"}
        with pytest.raises(ValueError, match="ANY"):
            store.append(Scope(user_id=ANY, session_id=session), [msg(5)])
        with pytest.raises(ValueError, match="ANY"):
            store.put_record(Scope(user_id=f"bob{tag}", agent_id=ANY), Record(id="x", namespace="facts", text="x"))
        assert store.forget(Scope(user_id=f"bob{tag}"))["messages"] == 1
        assert store.count(alice) == store.count(helper) == 1

    def test_reads_refuse_bad_ids_the_same_on_every_backend(self, store: Store, scope: Scope) -> None:
        store.append(scope, [msg(0)])
        for bad, why in (("m\x00", "NUL"), ("", "empty")):
            for read in (lambda bad=bad: store.get(scope, ["m0", bad]), lambda bad=bad: store.delete(scope, [bad]),
                         lambda bad=bad: store.get_vectors(scope, [bad])):
                with pytest.raises(InvalidInput, match="id 1|id 0") as caught:
                    read()
                assert why.lower() in str(caught.value).lower() or "must not be empty" in str(caught.value)
        assert store.count(scope) == 1 and [m.id for m in store.get(scope, ["m0", "m0"])] == ["m0"]

    def test_keys_tell_repeated_ids_apart_across_sessions(self, store: Store) -> None:
        """Ids repeat in every session; a search over several sessions names each hit by its store-global key."""
        tag = uuid.uuid4().hex[:6]
        one, two = Scope(user_id=f"ann{tag}", session_id="one"), Scope(user_id=f"ann{tag}", session_id="two")
        store.append(one, [msg(i, f"session one talks about apples {i}") for i in range(3)])
        store.append(two, [msg(i, f"session two talks about {'walruses' if i == 0 else 'pears'} {i}") for i in range(3)])
        store.set_vectors(one, ["m0", "m1", "m2"], np.stack([unit(i) for i in range(3)]), "m")
        store.set_vectors(two, ["m0", "m1", "m2"], np.stack([unit(10 + i) for i in range(3)]), "m")
        user = Scope(user_id=f"ann{tag}")
        (hit,) = store.search_text(user, ["walruses"], 5)
        assert hit.id == "m0"
        (found,) = store.get_keys(user, [hit.key])
        assert found.session_id == "two" and "walruses" in found.text and found.key == hit.key
        dense = store.search_vectors(user, unit(10), 1)[0]
        assert dense.key == hit.key and dense.id == "m0"
        both = store.get(user, ["m0"])  # by id: one per session, in one order on every backend
        assert [m.session_id for m in both] == ["one", "two"] and len({m.key for m in both}) == 2
        assert store.get_keys(one, [hit.key]) == []  # a key outside the scope names nothing
        assert store.get_keys(Scope(user_id=f"eve{tag}"), [hit.key]) == []
        assert store.get_keys(user, ["", "no-such-key", "#", "99999999999999999999", hit.key + "x"]) == []
        other_digits = hit.key.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))  # str.isdigit says yes
        assert store.get_keys(user, ["²", other_digits]) == []  # not keys: nothing, never an error
        assert {m.key for m in store.range(two, 0, 2)} == {m.key for m in store.get_keys(user, [m.key for m in store.range(two, 0, 2)])}
        # A key is never reused: the same conversation forgotten and begun again is another one.
        store.forget(two)
        store.append(two, [msg(0, "a new conversation about walruses")])
        assert store.get_keys(user, [hit.key]) == []
        (again,) = store.search_text(user, ["walruses"], 5)
        assert again.key != hit.key and store.get_keys(user, [again.key])[0].text == "a new conversation about walruses"
        # nor is one message deleted and another added under its id (an update) the same (Redis gave it the key)
        assert store.delete(two, ["m0"]) == 1
        store.append(two, [dataclasses.replace(msg(0, "walruses, updated"), created_at=time.time() + 1)])
        (updated,) = store.search_text(user, ["walruses"], 5)
        assert updated.key != again.key and store.get_keys(user, [again.key]) == []
        assert [m.text for m in store.get_keys(user, [updated.key])] == ["walruses, updated"]

    def test_a_message_added_again_with_its_created_at_gets_a_new_key(self, store: Store) -> None:
        """A message deleted and added again under its id with the same ``created_at`` (an import keeps it) is
        another message: the old key names nothing, and a search that ran before sees the new role and text.
        """
        scope = Scope(user_id=f"kim{uuid.uuid4().hex[:6]}", session_id="s")
        user = Scope(user_id=scope.user_id)
        store.append(scope, [msg(0, "walruses are big", created_at=100.0), msg(1, "nothing here", created_at=101.0)])
        (old,) = store.search_text(user, ["walruses"], 5, Filters(roles=("user",)))
        assert [m.role for m in store.get_keys(user, [old.key])] == ["user"]
        assert store.delete(scope, ["m0"]) == 1
        store.append(scope, [msg(0, "walruses updated by the assistant", role="assistant", created_at=100.0)])
        assert store.get_keys(user, [old.key]) == []
        assert store.search_text(user, ["walruses"], 5, Filters(roles=("user",))) == []
        (new,) = store.search_text(user, ["walruses"], 5, Filters(roles=("assistant",)))
        assert new.key != old.key
        assert [(m.role, m.text) for m in store.get_keys(user, [new.key])] == [
            ("assistant", "walruses updated by the assistant")]
        assert [m.key for m in store.get(scope, ["m0"])] == [new.key]

    # -- state and records -------------------------------------------------------------

    def test_state_and_records(self, store: Store, scope: Scope) -> None:
        assert store.get_state(scope, "window") is None
        store.put_state(scope, "window", {"messages": [1, 2], "note": "é"})
        store.put_state(scope, "window", {"messages": [3]})
        assert store.get_state(scope, "window") == {"messages": [3]}
        other = dataclasses.replace(scope, session_id=scope.session_id + "-other")
        assert store.get_state(other, "window") is None

        user = Scope(user_id=scope.user_id, agent_id=scope.agent_id)  # the owner, in no session
        store.put_record(user, Record(id="r1", namespace="facts", text="likes tea", data={"c": 0.9}), unit(1))
        store.put_record(scope, Record(id="r2", namespace="facts", text="session fact"))
        store.put_record(user, Record(id="r3", namespace="procedures", text="always greet"))
        in_session = {r.id: r for r in store.get_records(scope, "facts")}
        assert set(in_session) == {"r1", "r2"}  # user-wide records apply in every session
        assert in_session["r1"].data == {"c": 0.9} and in_session["r1"].text == "likes tea"
        assert {r.id for r in store.get_records(other, "facts")} == {"r1"}
        store.put_record(user, Record(id="r1", namespace="facts", text="likes green tea", created_at=5.0, updated_at=6.0))
        replaced = [(r.text, r.created_at, r.updated_at) for r in store.get_records(user, "facts") if r.id == "r1"]
        assert replaced == [("likes green tea", 5.0, 6.0)]  # a record put again is replaced whole, on every backend
        assert store.delete_record(user, "facts", "r1") is True
        assert store.delete_record(user, "facts", "r1") is False
        assert store.get_records(Scope(user_id="somebody-else"), "facts") == []
        other_agent = dataclasses.replace(scope, agent_id="another-agent")
        assert store.get_records(other_agent, "facts") == []  # records belong to one user *and* agent
        assert store.get_records(Scope(user_id=scope.user_id), "facts") == []  # the default agent is an owner too
        assert {r.id for r in store.get_records(Scope(user_id=scope.user_id, agent_id=ANY), "facts")} == {"r2"}  # ANY: every agent, every session

    # -- forget and stats ----------------------------------------------------------------

    def test_forget_session_and_user(self, store: Store, scope: Scope) -> None:
        user = Scope(user_id=scope.user_id, agent_id=ANY)  # every agent's memory of this user
        s2 = dataclasses.replace(scope, session_id=scope.session_id + "-b")
        bystander = Scope(user_id="carol", session_id=scope.session_id)
        for sc in (scope, s2, bystander):
            store.append(sc, [msg(0, "keep nothing of zanzibar"), msg(1, "summary zanzibar", kind="summary")])
            store.set_vectors(sc, ["m0", "m1"], np.stack([unit(0), unit(1)]), "m")
            store.put_state(sc, "window", {"x": 1})
        store.put_record(dataclasses.replace(user, agent_id=scope.agent_id), Record(id="r", namespace="facts", text="zanzibar fact"))

        counts = store.forget(scope)
        assert counts["messages"] == 1 and counts["summaries"] == 1 and counts["vectors"] == 2
        assert counts["state"] == 1 and counts.get("records", 0) == 0
        assert store.count(scope) == 0 and store.get(scope, ["m0", "m1"]) == []
        assert store.get_vectors(scope, ["m0"]) == {} and store.get_state(scope, "window") is None
        assert store.search_text(scope, ["zanzibar"], 5) == []
        assert store.count(s2) == 2

        counts = store.forget(user)
        assert counts["messages"] == 1 and counts["summaries"] == 1 and counts["facts"] == 1 and counts["records"] == 0
        assert store.count(user) == 0 and store.get_records(user, "facts") == []
        assert store.search_vectors(user, unit(0), 5) == [] and store.search_text(user, ["zanzibar"], 5) == []
        assert store.count(bystander) == 2 and ids(store.search_text(bystander, ["zanzibar"], 5))
        assert store.forget(user) == {**dict.fromkeys(FORGET_COUNTS, 0), "remaining": []}

    def test_forget_answers_the_same_on_every_backend(self, store: Store, scope: Scope) -> None:
        store.append(scope, [msg(0, "one"), msg(1, "two", kind="summary")])
        store.set_vectors(scope, ["m0"], unit(0)[None], "m")
        result = store.forget(Scope(user_id=scope.user_id, agent_id=scope.agent_id))
        assert list(result) == [*FORGET_COUNTS, "remaining"]
        assert [result[k] for k in FORGET_COUNTS] == [1, 1, 0, 0, 1, 0, 0, 1]

    def test_forget_names_each_kind_as_its_user_knows_it(self, store: Store, scope: Scope) -> None:
        """The archive's summaries, facts and patterns were counted as "records", long-term memory's change logs
        as messages and sessions; each is now counted under its own name."""
        from fullrecall.archive.archive import SUMMARIES
        from fullrecall.memory._records import LOG_PREFIX
        from fullrecall.memory.facts import NAMESPACE as FACTS
        from fullrecall.memory.procedural import NAMESPACE as PROCEDURES

        owner = Scope(user_id=scope.user_id, agent_id=scope.agent_id)
        store.append(scope, [msg(0, "one"), msg(1, "two")])
        store.append(dataclasses.replace(scope, session_id=LOG_PREFIX + FACTS), [msg(0, "a change")])
        for n, namespace in enumerate((SUMMARIES, SUMMARIES, FACTS, PROCEDURES, "conversations")):
            store.put_record(scope, Record(id=f"r{n}", namespace=namespace, text=f"record {n}"))
        result = store.forget(owner)
        assert {k: result[k] for k in FORGET_COUNTS} == {"messages": 2, "summaries": 2, "facts": 1, "patterns": 1,
                                                          "vectors": 0, "state": 0, "records": 2, "sessions": 1}
        assert isinstance(result["remaining"], list)
        for entry in result["remaining"]:  # each place a copy may remain: named, with what removes it
            assert set(entry) == {"where", "what", "until"} and all(isinstance(v, str) and v for v in entry.values())

    def test_no_cache_answers_for_forgotten_data(self, store: Store, store_url: str, scope: Scope) -> None:
        """A second store object caches Alice's conversation; after she is forgotten, neither Bob's new
        conversation (SQLite reuses the row id) nor a new one under her very keys (Redis counts its
        version from 0 again) is answered from that cache."""
        other = open_store(store_url)
        bob = dataclasses.replace(scope, user_id="bob")

        def fill(sc: Scope, prefix: str) -> list[str]:
            names = [f"{prefix}{i}" for i in range(3)]
            store.append(sc, [msg(n, f"walrus tale {n}") for n in names])
            store.set_vectors(sc, [f"m{n}" for n in names], np.stack([unit(i) for i in range(3)]), "m")
            return sorted(f"m{n}" for n in names)

        try:
            alices = fill(scope, "a")
            assert sorted(ids(other.search_text(scope, ["walrus"], 5))) == alices
            assert sorted(ids(other.search_vectors(scope, unit(0), 5))) == alices
            store.forget(Scope(user_id=scope.user_id, agent_id=scope.agent_id))
            bobs = fill(bob, "b")
            assert sorted(ids(other.search_vectors(bob, unit(0), 5))) == bobs
            assert sorted(ids(other.search_text(bob, ["walrus"], 5))) == bobs
            assert sorted(ids(other.search_vectors(scope, unit(0), 5))) == []
            store.forget(Scope(user_id="bob", agent_id=scope.agent_id))
            again = fill(scope, "c")
            assert sorted(ids(other.search_text(scope, ["walrus"], 5))) == again
            assert sorted(ids(other.search_vectors(scope, unit(0), 5))) == again
        finally:
            other.close()

    def test_warm_changes_no_answer(self, store: Store, store_url: str, scope: Scope) -> None:
        """``warm`` reads ahead what searches of a scope keep; every answer stays the one a handle that never
        warmed gives, through later appends, new vectors, deletes and a forget, and warming again (of what is kept
        alone too: ``kept_only``), an empty scope or one holding no vectors is harmless.
        """
        owner = Scope(user_id=scope.user_id, agent_id=scope.agent_id)
        other = dataclasses.replace(scope, session_id=f"{scope.session_id}-b")
        bare = dataclasses.replace(scope, user_id="nobody")

        def fill(sc: Scope, first: int, n: int) -> None:
            store.append(sc, [msg(i, f"walrus tale {i} of the dunes" if i % 2 else f"heron note {i}")
                              for i in range(first, first + n)])
            store.set_vectors(sc, [f"m{i}" for i in range(first, first + n)],
                              np.stack([unit(i) for i in range(first, first + n)]), "m")

        def answers(handle: Store) -> list[Any]:
            found = []
            for sc in (owner, scope, other):
                for seed in (0, 7):
                    found.append([(h.id, h.key, round(h.score, 5)) for h in handle.search_vectors(sc, unit(seed), 4)])
                for words in (["walrus"], ["heron", "dunes"]):
                    found.append([(h.id, h.key, round(h.score, 5)) for h in handle.search_text(sc, words, 4)])
            return found

        def fresh() -> list[Any]:
            cold = open_store(store_url)
            try:
                return answers(cold)
            finally:
                cold.close()

        store.warm(bare)  # nothing stored at all
        store.warm(bare, kept_only=True)
        fill(scope, 0, 6)
        fill(other, 6, 4)
        store.append(bare, [msg("x", "walrus without a vector")])
        store.warm(bare)
        assert [h.id for h in store.search_text(bare, ["walrus"], 3)] == ["mx"]
        store.warm(owner)
        store.warm(owner)
        assert answers(store) == fresh()
        fill(scope, 10, 3)  # the kept structures are now behind: warming again, or searching, catches up
        store.delete(other, ["m7"])
        store.warm(owner)
        assert answers(store) == fresh()
        fill(other, 20, 2)
        assert answers(store) == fresh()
        fill(scope, 30, 2)  # after a write, what is kept alone is brought up to date
        store.warm(owner, kept_only=True)
        assert answers(store) == fresh()
        store.forget(other)
        store.warm(owner)
        assert answers(store) == fresh()
        store.forget(owner)
        store.warm(owner)
        assert answers(store) == fresh() == [[]] * len(fresh())

    def test_stats(self, store: Store, scope: Scope) -> None:
        empty = store.stats(scope)
        assert empty["message_count"] == 0 and empty["text_bytes"] == 0
        messages = [msg(i, "x" * 100) for i in range(10)]
        store.append(scope, messages)
        store.set_vectors(scope, [m.id for m in messages], np.stack([unit(i) for i in range(10)]), "m")
        stats = store.stats(scope)
        for key in ("message_count", "text_bytes", "vector_bytes", "index_bytes"):
            assert isinstance(stats[key], int) and stats[key] >= 0, key
        assert stats["message_count"] == 10
        assert stats["text_bytes"] >= 10 * 100 * 2  # text and the verbatim data both hold the 100 chars
        assert stats["vector_bytes"] >= 10 * DIM * 4

    # -- vector model checks -----------------------------------------------------------

    def test_vector_dimension_and_model_mismatch(self, store: Store, scope: Scope) -> None:
        store.append(scope, [msg(i) for i in range(3)])
        assert store.vector_model(scope) is None
        store.set_vectors(scope, ["m0"], unit(0)[None], "model-a")
        with pytest.raises(ValueError, match="model"):
            store.set_vectors(scope, ["m1"], unit(1, 32)[None], "model-a")  # other dimension
        with pytest.raises(ValueError, match="model"):
            store.set_vectors(scope, ["m1"], unit(1)[None], "model-b")  # same dimension, other model
        with pytest.raises(ValueError):
            store.set_vectors(scope, ["m1", "m2"], unit(1)[None], "model-a")  # 2 ids, 1 vector
        with pytest.raises(ValueError, match="model"):  # a refused model writes nothing, the held m1 included
            store.set_vectors(scope, ["m1", "unknown"], np.stack([unit(1), unit(2)]), "model-b")
        with pytest.raises(ValueError, match="dimension"):
            store.search_vectors(scope, unit(0, 32), 3)
        assert store.vector_model(scope) == ("model-a", DIM)
        assert list(store.get_vectors(scope, ["m0", "m1"])) == ["m0"]

    def test_vectors_of_messages_the_session_no_longer_holds_are_dropped(
        self, store: Store, store_url: str, scope: Scope
    ) -> None:
        """A vector is written for a message that another writer deletes, or whose owner is forgotten, before the
        vector lands (an embedding takes a while): it has nothing to attach to and is dropped, the vectors of the
        messages still held are written, no error is raised and nothing forgotten comes back (a bare ValueError
        'session ... has no messages' failed the write that had raced with a forget).
        """
        store.append(scope, [msg(i) for i in range(3)])
        other = open_store(store_url)
        try:
            other.delete(scope, ["m1"])
            store.set_vectors(scope, ["m0", "m1", "m2"], np.stack([unit(0), unit(1), unit(2)]), "m")
            assert sorted(store.get_vectors(scope, ["m0", "m1", "m2"])) == ["m0", "m2"]
            assert store.stats(scope)["vector_count"] == 2
            assert sorted(ids(store.search_vectors(scope, unit(1), 3))) == ["m0", "m2"]
            other.forget(Scope(user_id=scope.user_id, agent_id=ANY))
            store.set_vectors(scope, ["m0", "m2"], np.stack([unit(0), unit(2)]), "m")
            store.set_vectors(scope, ["unknown"], unit(3)[None], "m")
            assert store.get_vectors(scope, ["m0", "m2", "unknown"]) == {}
            assert store.sessions(scope) == [] and store.vector_model(scope) is None  # no session made again
            assert store.stats(scope)["session_count"] == 0
            assert store.search_vectors(scope, unit(0), 3) == []
        finally:
            other.close()

    def test_reopen_keeps_everything(self, store: Store, store_url: str, scope: Scope) -> None:
        store.append(scope, [msg(i) for i in range(3)])
        store.put_state(scope, "k", {"v": 1})
        store.close()
        again = open_store(store_url)
        try:
            assert again.count(scope) == 3 and again.get_state(scope, "k") == {"v": 1}
            assert again.append(scope, [msg(3)]) == [3]
        finally:
            again.close()

    # -- invariants (hypothesis) ------------------------------------------------------------

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(batches=st.lists(st.lists(st.integers(0, 12), max_size=5), min_size=1, max_size=6))
    def test_positions_are_contiguous_and_ids_unique(self, store: Store, batches: list[list[int]]) -> None:
        sc = Scope(user_id="hyp", session_id=uuid.uuid4().hex)
        first_position: dict[str, int] = {}
        for batch in batches:
            positions = store.append(sc, [msg(i) for i in batch])
            for i, p in zip(batch, positions):
                assert first_position.setdefault(f"m{i}", p) == p  # same id, same position, always
        stored = store.range(sc, 0, 10_000)
        assert [m.position for m in stored] == list(range(len(first_position)))
        assert sorted(m.id for m in stored) == sorted(first_position)
        assert store.count(sc) == len(first_position)

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(steps=st.lists(st.tuples(st.sampled_from(["ann", "bob"]), st.booleans()), min_size=1, max_size=6))
    @example(steps=[("ann", False), ("ann", True), ("ann", False)])  # same keys, same counters, new rows
    def test_a_second_store_never_finds_forgotten_messages(
        self, store: Store, store_url: str, steps: list[tuple[str, bool]]
    ) -> None:
        """Writes and forgets, each user under the same keys every time; a second store object,
        whose caches saw every state, finds exactly the live messages of each user."""
        tenant = f"t{uuid.uuid4().hex[:8]}"
        scopes = {u: Scope(tenant=tenant, user_id=u, agent_id="a", session_id="s") for u in ("ann", "bob")}
        live: dict[str, set[str]] = {u: set() for u in scopes}
        other = open_store(store_url)
        try:
            for n, (user, forget) in enumerate(steps):
                if forget:
                    store.forget(Scope(tenant=tenant, user_id=user, agent_id="a"))
                    live[user].clear()
                else:
                    batch = [msg(f"{n}-{i}", f"walrus {user} {n}") for i in range(3)]
                    store.append(scopes[user], batch)
                    store.set_vectors(scopes[user], [m.id for m in batch], np.stack([unit(i) for i in range(3)]), "m")
                    live[user] |= {m.id for m in batch}
                for u, sc in scopes.items():
                    assert set(ids(other.search_text(sc, ["walrus"], 50))) == live[u]
                    assert set(ids(other.search_vectors(sc, unit(0), 50))) == live[u]
        finally:
            other.close()

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        rows=st.lists(
            st.tuples(
                st.sampled_from(["user", "assistant"]), st.sampled_from(["message", "summary"]), st.integers(0, 9)
            ),
            min_size=1,
            max_size=15,
        ),
        roles=st.none() | st.sampled_from([("user",), ("assistant",), ("user", "assistant")]),
        kinds=st.none() | st.sampled_from([("message",), ("summary",)]),
        since=st.none() | st.integers(0, 9),
        excluded=st.sets(st.integers(0, 14), max_size=4),
    )
    def test_search_results_always_respect_scope_and_filters(
        self, store: Store, rows: list[tuple[str, str, int]], roles: Any, kinds: Any, since: Any, excluded: set[int]
    ) -> None:
        sc = Scope(user_id="prop", session_id=uuid.uuid4().hex)
        other = Scope(user_id="prop-other", session_id=sc.session_id)  # same words, other user
        messages = [msg(n, f"pelican {n}", role=r, kind=kd, created_at=float(t)) for n, (r, kd, t) in enumerate(rows)]
        for target in (sc, other):
            store.append(target, messages)
            store.set_vectors(target, [m.id for m in messages], np.stack([unit(n) for n in range(len(rows))]), "m")
        f = Filters(roles=roles, kinds=kinds, since=since, exclude_ids=frozenset(f"m{i}" for i in excluded) or None)
        allowed = {
            m.id
            for m in messages
            if (roles is None or m.role in roles)
            and (kinds is None or m.kind in kinds)
            and (since is None or m.created_at >= since)
            and m.id not in (f.exclude_ids or ())
        }
        assert set(ids(store.search_vectors(sc, unit(0), 100, f))) == allowed  # k >= n: exactly the allowed
        assert set(ids(store.search_text(sc, ["pelican"], 100, f))) == allowed
        assert len(store.search_text(Scope(user_id="prop"), ["pelican"], 1000, f)) >= len(allowed)

    # -- processes -------------------------------------------------------------------------

    def test_two_processes_append_to_one_session(self, store: Store, store_url: str, scope: Scope) -> None:
        n = 100
        race([(append_worker, (store_url, scope, f"w{w}", n)) for w in range(2)])
        stored = store.range(scope, 0, 10**6)
        assert sorted(m.id for m in stored) == sorted(f"w{w}-{i}" for w in range(2) for i in range(n))
        assert [m.position for m in stored] == list(range(2 * n))  # unique and contiguous
        writers = "".join(m.id[1] for m in stored)
        assert sum(a != b for a, b in zip(writers, writers[1:])) >= 2, "the writers never overlapped"
        for w in range(2):  # each writer's messages keep their own order
            mine = [m for m in stored if m.id.startswith(f"w{w}-")]
            assert [m.id for m in mine] == [f"w{w}-{i}" for i in range(n)]

    def test_two_processes_appending_the_same_messages_store_each_once(
        self, store: Store, store_url: str, scope: Scope
    ) -> None:
        n = 60  # both write w0-0 .. w0-59, in the same order: each append races the other's for the same id
        race([(append_worker, (store_url, scope, "w0", n)) for _ in range(2)])
        stored = store.range(scope, 0, 10**6)
        assert [m.id for m in stored] == [f"w0-{i}" for i in range(n)]  # once each, in order
        assert [m.position for m in stored] == list(range(n))  # a lost race leaves no gap
        assert_counters_exact(store, scope)

    def test_forget_counts_what_it_deletes_while_another_process_appends(
        self, store: Store, store_url: str, scope: Scope
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        ready, start = ctx.Semaphore(0), ctx.Event()
        n = 150
        p = ctx.Process(target=append_worker, args=(store_url, scope, "w", n, ready, start))
        p.start()
        assert ready.acquire(timeout=60), "the worker did not start"
        start.set()
        forgotten, rounds = 0, 0
        while p.is_alive() or rounds == 0:
            forgotten += store.forget(scope)["messages"]
            rounds += 1
            time.sleep(0.005)
        p.join(120)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
        assert forgotten > 0 and rounds > 1
        assert forgotten + store.count(scope) == n  # every message counted once: forgotten or still there

    def test_sigkill_mid_write_loses_nothing_acknowledged(self, store: Store, store_url: str, scope: Scope) -> None:
        ctx = multiprocessing.get_context("spawn")
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=ack_worker, args=(store_url, scope, writer))
        p.start()
        writer.close()
        acked: list[str] = []
        deadline = time.monotonic() + 60
        while len(acked) < 40 and time.monotonic() < deadline:
            if reader.poll(1):
                acked.append(reader.recv())
        os.kill(p.pid, signal.SIGKILL)  # while it is in the middle of more appends
        p.join(10)
        while reader.poll(0.2):
            try:
                acked.append(reader.recv())
            except EOFError:
                break
        assert p.exitcode == -signal.SIGKILL and len(acked) >= 40
        check = ctx.Process(target=reopen_worker, args=(store_url, scope, acked))
        check.start()
        check.join(60)
        assert check.exitcode == 0, "a fresh process could not reopen the store or missed acknowledged messages"
        present = {m.id for m in store.get(scope, acked)}
        assert present == set(acked)
        assert store.append(scope, [msg("after")])[0] >= len(acked)

    # -- errors ------------------------------------------------------------------------------

    def test_closed_store_refuses(self, store: Store, scope: Scope) -> None:
        store.close()
        with pytest.raises(StoreError):
            store.append(scope, [msg(0)])


# -- child-process workers (module level so "spawn" can import them) -------------------------


def append_worker(url: str, scope: Scope, prefix: str, n: int, ready: Any, start: Any) -> None:
    store = open_store(url)
    ready.release()
    start.wait(30)
    for i in range(n):
        store.append(scope, [StoredMessage(id=f"{prefix}-{i}", role="user", text=f"{prefix} {i}", data={"i": i})])
        time.sleep(0.001 * (i % 3))  # like agents between turns; a tight loop would starve SQLite's busy waiter
    store.close()


def ack_worker(url: str, scope: Scope, conn: Any) -> None:
    store = open_store(url)
    i = 0
    while True:
        batch = [
            StoredMessage(id=f"k{i}-{j}", role="user", text=f"crash test {i} {j}", data={"i": i}) for j in range(3)
        ]
        store.append(scope, batch)
        for m in batch:
            conn.send(m.id)  # acknowledged only after append returned
        i += 1


def replace_worker(url: str, scope: Scope, conn: Any) -> None:
    """Replace the message at position 0 (h<i>) by h<i+1>, appending t<i> in the same write, for ever."""
    store = open_store(url)
    i = 0
    while True:
        head = StoredMessage(id=f"h{i + 1}", role="system", text=f"prompt {i + 1}", data={"i": i + 1}, position=0)
        store.replace(scope, [f"h{i}"], [head, StoredMessage(id=f"t{i}", role="user", text=f"turn {i}", data={})])
        i += 1
        conn.send(i)  # acknowledged once replace returned


def reopen_worker(url: str, scope: Scope, acked: list[str]) -> None:
    store = open_store(url)
    missing = set(acked) - {m.id for m in store.get(scope, acked)}
    store.append(scope, [StoredMessage(id=f"reopen-{uuid.uuid4().hex}", role="user", text="after crash", data={})])
    store.close()
    if missing:
        raise SystemExit(f"missing acknowledged ids: {sorted(missing)[:5]}")
