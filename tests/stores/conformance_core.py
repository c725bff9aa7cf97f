"""Behaviour settled once for every backend: read order across sessions, partial scopes, errors,
per-session counters, compare-and-set state and batched range reads.

Mixed into :class:`conformance.StoreConformance`, so it runs on SQLite, PostgreSQL and Redis.
"""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall.errors import InvalidInput, StateConflict, StoreError
from fullrecall.stores import ANY, Record, Scope, Store, StoredMessage, open_store
from fullrecall.stores._validate import indexed_prefix


def note(i: int | str, text: str = "plain words", **kw: Any) -> StoredMessage:
    return StoredMessage(id=f"m{i}", role="user", text=text, data={"content": text}, **kw)


def damage_state_table(store: Store) -> None:
    """Break the store behind its back (as a mistaken migration or operator would): state is gone."""
    url = store.url
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(store.path) as conn:  # type: ignore[attr-defined]
            conn.execute("DROP TABLE state")
    elif url.startswith("postgres"):
        import psycopg

        with psycopg.connect(store._conninfo, autocommit=True) as conn:  # type: ignore[attr-defined]
            conn.execute(f"DROP TABLE {store.schema}.state")  # type: ignore[attr-defined]
    else:
        import redis

        client = redis.Redis.from_url(url.split("?")[0])
        for key in client.scan_iter(f"{store.prefix}:*:state"):  # type: ignore[attr-defined]
            client.delete(key)
            client.set(key, "not a hash")
        client.close()


class CoreConformance:
    """Mixed into the conformance suite; uses its ``store`` and ``scope`` fixtures."""

    def test_get_across_sessions_is_ordered_by_owner_session_then_position(self, store: Store) -> None:
        """Sessions made in the reverse of their names' order, by two users: one order everywhere."""
        tag = uuid.uuid4().hex[:6]
        made = [Scope(user_id=f"{u}{tag}", agent_id=a, session_id=s)
                for u in ("zed", "amy") for a in ("", "bot") for s in ("s9", "s10", "a1")]
        for n, sc in enumerate(made):
            store.append(sc, [note("x", f"first {n}"), note("y", f"second {n}")])
        everyone = Scope(user_id=ANY, agent_id=ANY)
        got = store.get(everyone, ["y", "x", "my", "mx"])
        got = [m for m in got if m.user_id and m.user_id.endswith(tag)]
        expected = sorted((m.user_id, m.agent_id, m.session_id, m.position) for m in got)
        assert [(m.user_id, m.agent_id, m.session_id, m.position) for m in got] == expected
        assert len(got) == 2 * len(made)
        assert [m.session_id for m in got[:6]] == ["a1", "a1", "s10", "s10", "s9", "s9"]  # by name, not creation
        assert {m.user_id for m in got[:12]} == {f"amy{tag}"}
        assert [m.key for m in store.get_keys(everyone, [m.key for m in reversed(got) if m.key])] == [m.key for m in got]

    def test_get_copies_reads_the_messages_stored_under_keys_derived_from_ids(self, store: Store, scope: Scope) -> None:
        """``get_copies(scope, ids)``: the messages whose id is ``X@...`` for one of ``ids`` (a message a memory
        stored again), in conversation order; never ``X`` itself, nor an id that only looks alike to a pattern
        (glob and LIKE characters are plain characters of an id), nor one that ``X`` is a prefix of ('a' vs
        'ab@x'). The same on every backend, across the owner's sessions as ``get`` reads."""
        stored = ["a", "a@1", "a@x@y", "ab@x", "b@a@1", "a*@1", "ab*@1", "a?@1", "ax@1", "[a]@1", "a%@1", "abc%@1",
                  "a_@1", "a\\@1", "a\\", "z"]
        store.append(scope, [StoredMessage(id=i, role="user", text=f"text {n}", data={"n": n})
                             for n, i in enumerate(stored)])
        for names in (["a"], ["a*"], ["a?"], ["[a]"], ["a%"], ["a_"], ["a\\"], ["a@x"], ["ab", "a*"], ["z"],
                      ["nope"], []):
            expected = [i for i in stored if any(i.startswith(f"{n}@") for n in names)]
            got = store.get_copies(scope, names)
            assert [m.id for m in got] == expected, names
            assert all(m.data == {"n": stored.index(m.id)} and m.session_id == scope.session_id for m in got)
        other = Scope(tenant=scope.tenant, user_id=scope.user_id, agent_id=scope.agent_id, session_id="zz-other")
        store.append(other, [note("x", "another conversation")])
        store.append(other, [StoredMessage(id="a@2", role="user", text="copy", data={"n": 99})])
        owner = Scope(tenant=scope.tenant, user_id=scope.user_id, agent_id=scope.agent_id)
        assert [(m.session_id, m.id) for m in store.get_copies(owner, ["a"])] == \
            [(scope.session_id, "a@1"), (scope.session_id, "a@x@y"), ("zz-other", "a@2")]
        assert [m.id for m in store.get_copies(scope, ["a"])] == ["a@1", "a@x@y"]  # one session: its own
        for bad in ("a", ["a\x00"]):  # one string, an id no message can have: refused as get refuses them
            with pytest.raises(InvalidInput):
                store.get_copies(scope, bad)  # type: ignore[arg-type]

    def test_sessions_lists_the_conversations_that_hold_messages(self, store: Store) -> None:
        """An owner's sessions (or, with ANY, every owner's), as exact scopes in ``get``'s order; a session with
        state only, one whose messages were all deleted, a forgotten one and another tenant's are not listed."""
        tag = uuid.uuid4().hex[:6]
        u, v = f"u{tag}", f"v{tag}"
        written = [Scope(user_id=u, agent_id="a", session_id="s2"), Scope(user_id=u, agent_id="a", session_id="s1"),
                   Scope(user_id=u, agent_id="b", session_id="s3"), Scope(user_id=u, session_id="s0"),
                   Scope(user_id=v, agent_id="a", session_id="s1")]
        for n, sc in enumerate(written):
            store.append(sc, [note(n, f"words {n}")])
        store.put_state(Scope(user_id=u, agent_id="a", session_id="state-only"), "window", {"n": 1})
        drained, gone = Scope(user_id=u, agent_id="a", session_id="drained"), Scope(user_id=u, agent_id="a", session_id="gone")
        store.append(drained, [note("d")])
        store.append(gone, [note("g")])
        assert store.delete(drained, ["md"]) == 1
        store.forget(gone)
        store.append(Scope(tenant=f"t{tag}", user_id=u, agent_id="a", session_id="s9"), [note("t")])

        def listed(scope: Scope) -> list[tuple[str, str, str, str]]:
            return [(str(sc.tenant), str(sc.user_id), str(sc.agent_id), str(sc.session_id))
                    for sc in store.sessions(scope) if str(sc.user_id).endswith(tag)]

        assert listed(Scope(user_id=u, agent_id="a")) == [("default", u, "a", "s1"), ("default", u, "a", "s2")]
        assert listed(Scope(user_id=u)) == [("default", u, "", "s0")]  # unset agent: the default owner, not ANY
        assert [s for *_, s in listed(Scope(user_id=u, agent_id=ANY))] == ["s0", "s1", "s2", "s3"]
        assert listed(Scope(user_id=ANY, agent_id="a", session_id="s1")) == [("default", u, "a", "s1"),
                                                                               ("default", v, "a", "s1")]
        assert len(listed(Scope.everyone())) == len(written)
        assert listed(Scope(tenant=f"t{tag}", user_id=u, agent_id="a")) == [(f"t{tag}", u, "a", "s9")]
        assert all(store.count(sc) == 1 for sc in store.sessions(Scope(user_id=u, agent_id=ANY)))
        assert store.sessions(Scope(user_id=f"w{tag}")) == []

    def test_state_needs_one_conversation_and_reads_its_own(self, store: Store) -> None:
        """``get_state`` names one conversation; a partial scope is refused the same way everywhere."""
        tag = uuid.uuid4().hex[:6]
        one, two = Scope(user_id=f"u{tag}", session_id="s"), Scope(user_id=f"u{tag}", agent_id="b", session_id="s")
        store.put_state(one, "window", {"n": 1})
        store.put_state(two, "window", {"n": 2})
        store.put_state(one, "window", {"n": 3})
        assert store.get_state(one, "window") == {"n": 3} and store.get_state(two, "window") == {"n": 2}
        for partial in (Scope(user_id=ANY, session_id="s"), Scope(user_id=f"u{tag}", agent_id=ANY, session_id="s"),
                        Scope(user_id=f"u{tag}")):
            with pytest.raises(ValueError, match="ANY|session"):
                store.get_state(partial, "window")

    def test_a_damaged_store_raises_store_errors_never_driver_errors(self, store: Store, scope: Scope) -> None:
        store.append(scope, [note(0, "walrus")])
        store.put_state(scope, "window", {"n": 1})
        damage_state_table(store)
        for call in (lambda: store.get_state(scope, "window"), lambda: store.put_state(scope, "window", {"n": 2})):
            with pytest.raises(StoreError):
                call()
        assert [m.id for m in store.get(scope, ["m0"])] == ["m0"]  # the rest still works

    # -- per-session counters --------------------------------------------------------------

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops=st.lists(st.tuples(st.sampled_from(["append", "delete", "vectors", "forget"]),
                                  st.lists(st.integers(0, 15), min_size=1, max_size=6),
                                  st.sampled_from(["one", "two"])), min_size=1, max_size=10))
    def test_counters_equal_a_full_recount(self, store: Store, ops: list[tuple[str, list[int], str]]) -> None:
        user = f"count-{uuid.uuid4().hex[:8]}"
        scopes = {name: Scope(user_id=user, session_id=name) for name in ("one", "two")}
        for op, nums, name in ops:
            sc = scopes[name]
            if op == "append":
                store.append(sc, [note(i, f"wörds {i} " * (i % 4) + "\x00" * (i % 2),
                                       kind="summary" if i % 3 == 0 else "message") for i in nums])
            elif op == "delete":
                store.delete(sc, [f"m{i}" for i in nums])
            elif op == "vectors":
                held = [m.id for m in store.get(sc, [f"m{i}" for i in nums])]
                if held:
                    store.set_vectors(sc, held + held[:1], np.ones((len(held) + 1, 8), np.float32), "m")
            else:
                store.forget(sc)
            for each in (*scopes.values(), Scope(user_id=user)):
                assert_counters_exact(store, each)

    def test_two_processes_writing_leave_counters_exact_and_lose_no_state_update(
        self, store: Store, store_url: str, scope: Scope
    ) -> None:
        race([(churn_worker, (store_url, scope, f"w{w}", 60)) for w in range(2)])
        stats = assert_counters_exact(store, scope)
        assert stats["message_count"] == 2 * 40 and stats["vector_count"] == 2 * 20
        doc, version = store.get_versioned_state(scope, "archive")  # read-modify-writes of one document
        assert doc == {"total": 120, "w0": 60, "w1": 60} and version == 120


    # -- compare-and-set state -------------------------------------------------------------

    def test_put_state_compare_and_set(self, store: Store, scope: Scope) -> None:
        assert store.get_versioned_state(scope, "window") == (None, 0)
        with pytest.raises(StateConflict) as lost:
            store.put_state(scope, "window", {"n": 1}, expected=3)
        assert lost.value.current == 0 and store.get_versioned_state(scope, "window") == (None, 0)
        assert store.put_state(scope, "window", {"n": 1}, expected=0) == 1  # create only if absent
        with pytest.raises(StateConflict):
            store.put_state(scope, "window", {"n": 2}, expected=0)
        assert store.put_state(scope, "window", {"n": 2}) == 2  # without expected: always written
        assert store.put_state(scope, "window", {"n": 3}, expected=2) == 3
        assert store.get_versioned_state(scope, "window") == ({"n": 3}, 3) and store.get_state(scope, "window") == {"n": 3}
        for bad in (-1, True, "2", 1.0):
            with pytest.raises(InvalidInput, match="expected"):
                store.put_state(scope, "window", {"n": 4}, expected=bad)  # type: ignore[arg-type]
        assert store.get_versioned_state(scope, "window") == ({"n": 3}, 3)
        assert store.update_state(scope, "window", lambda doc: {"n": (doc or {"n": 0})["n"] + 1}) == {"n": 4}
        assert store.update_state(scope, "other", lambda doc: {"was": doc}) == {"was": None}
        assert store.forget(scope)["state"] == 2

    def test_put_record_compare_and_set(self, store: Store, scope: Scope) -> None:
        """A record's version (1 when first written, one up each write) guards a read-modify-write of it."""
        owner = Scope(user_id=scope.user_id, agent_id=scope.agent_id)

        def put(text: str, expected: int | None = None) -> int:
            return store.put_record(owner, Record(id="r", namespace="facts", text=text), expected=expected)

        def held() -> list[tuple[str, int]]:
            return [(r.text, r.version) for r in store.get_records(owner, "facts")]

        with pytest.raises(StateConflict, match="record 'r' is at version 0") as lost:
            put("a", expected=2)  # no such record: nothing to update
        assert lost.value.current == 0 and held() == []
        assert put("a", expected=0) == 1  # create only if absent
        with pytest.raises(StateConflict, match="record 'r' is at version 1, not the expected 0"):
            put("b", expected=0)
        assert put("b") == 2  # without expected: always written
        with pytest.raises(StateConflict) as lost:
            put("c", expected=1)  # read at version 1, written by another since
        assert lost.value.current == 2 and held() == [("b", 2)]
        assert put("c", expected=2) == 3 and held() == [("c", 3)]
        for bad in (-1, True, "2", 1.0, 2**70):
            with pytest.raises(InvalidInput, match="expected"):
                put("d", expected=bad)  # type: ignore[arg-type]
        assert held() == [("c", 3)]
        store.delete_record(owner, "facts", "r")
        assert put("e", expected=0) == 1  # made again: a new record
        assert put("f") == 2
        assert store.delete_record(owner, "facts", "r", expected=1) is False  # read at 1, rewritten since: it stays
        assert held() == [("f", 2)]
        for bad in (-1, 2**70):
            with pytest.raises(InvalidInput, match="expected"):
                store.delete_record(owner, "facts", "r", expected=bad)
        assert store.delete_record(owner, "facts", "r", expected=2) is True and held() == []
        assert store.delete_record(owner, "facts", "r", expected=2) is False

    def test_get_record_reads_one_record_by_id(self, store: Store, scope: Scope) -> None:
        """One record by its id, as ``put_record`` wrote it for the scope (a session's own first, then its owner's),
        in one lookup: the service's key check read every key to refuse an unknown one.
        """
        owner = Scope(tenant=scope.tenant, user_id=scope.user_id, agent_id=scope.agent_id)
        session = Scope(tenant=scope.tenant, user_id=scope.user_id, agent_id=scope.agent_id, session_id="s1")
        other = Scope(tenant=scope.tenant, user_id="someone-else", agent_id=scope.agent_id)
        assert store.get_record(owner, "facts", "r") is None
        store.put_record(owner, Record(id="r", namespace="facts", text="owner's", data={"n": 1}))
        store.put_record(owner, Record(id="r", namespace="facts", text="owner's", data={"n": 2}))
        store.put_record(session, Record(id="s", namespace="facts", text="the session's"))
        store.put_record(other, Record(id="o", namespace="facts", text="another user's"))
        found = store.get_record(owner, "facts", "r")
        assert found is not None and (found.id, found.namespace, found.text, found.data, found.version) == (
            "r", "facts", "owner's", {"n": 2}, 2)
        assert found == next(r for r in store.get_records(owner, "facts") if r.id == "r")
        assert store.get_record(session, "facts", "r") == found  # an owner's record applies to each session
        assert store.get_record(session, "facts", "s") is not None and store.get_record(owner, "facts", "s") is None
        store.put_record(session, Record(id="r", namespace="facts", text="the session's own"))
        assert store.get_record(session, "facts", "r").text == "the session's own"  # type: ignore[union-attr]
        assert store.get_record(owner, "facts", "r") == found
        for absent in (("facts", "o"), ("patterns", "r"), ("facts", "nope")):
            assert store.get_record(owner, *absent) is None, absent  # another owner's, namespace's, none
        for bad in ("", "a\x00b", "x" * 300):
            with pytest.raises(InvalidInput):
                store.get_record(owner, "facts", bad)
        with pytest.raises(InvalidInput):
            store.get_record(Scope(tenant=scope.tenant, user_id=ANY), "facts", "r")  # one owner's record
        store.delete_record(owner, "facts", "r")
        assert store.get_record(owner, "facts", "r") is None


    def test_a_batch_keeps_its_writes_and_reads_them_inside(self, store: Store, scope: Scope) -> None:
        """Writes in a batch (one transaction on PostgreSQL) behave as they do outside one: versions, compare-and-set,
        appends, reads of what the block wrote; nested blocks are part of the outer one; everything stays.
        """
        owner = Scope(user_id=scope.user_id, agent_id=scope.agent_id)

        def put(text: str, expected: int | None = None) -> int:
            return store.put_record(owner, Record(id="r", namespace="facts", text=text), expected=expected)

        with store.batch():
            assert put("a", expected=0) == 1
            with store.batch():
                assert put("b", expected=1) == 2
            with pytest.raises(StateConflict) as lost:
                put("c", expected=1)
            assert lost.value.current == 2
            assert store.append(scope, [note(1, "logged"), note(2, "again")]) == [0, 1]
            assert [(r.text, r.version) for r in store.get_records(owner, "facts")] == [("b", 2)]
            assert [m.id for m in store.range(scope, 0, 9)] == ["m1", "m2"]
        assert [(r.text, r.version) for r in store.get_records(owner, "facts")] == [("b", 2)]
        assert [m.id for m in store.range(scope, 0, 9)] == ["m1", "m2"] and store.count(scope) == 2
        with store.batch():
            pass  # an empty block writes nothing
        assert store.count(scope) == 2
        with store.batch():
            store.append(scope, [note(3, "kept")])
            with pytest.raises(InvalidInput, match=r"forget: cannot run inside a batch\(\) block"):
                store.forget(scope)  # its scrub needs the deletes committed: refused, nothing forgotten
        assert store.count(scope) == 3 and len(store.get_records(owner, "facts")) == 1
        assert store.forget(scope)["messages"] == 3  # after the block

    # -- batched range reads ----------------------------------------------------------------

    def test_ranges_reads_every_span_at_once_as_range_would(self, store: Store, scope: Scope) -> None:
        store.append(scope, [note(i, f"turn {i}") for i in range(12)])
        store.delete(scope, ["m5"])
        spans = [(0, 2), (4, 6), (5, 5), (10, 99), (8, 3), (1, 1), (50, 60), (np.int64(7), np.int64(7))]
        got = store.ranges(scope, spans)
        assert [[m.position for m in r] for r in got] == [[0, 1, 2], [4, 6], [], [10, 11], [], [1], [], [7]]
        assert [[m.key for m in r] for r in got] == [[m.key for m in store.range(scope, a, b)] for a, b in spans]
        assert got[0][0].text == "turn 0" and got[0][0].data == {"content": "turn 0"} and got[0][0].session_id
        assert store.ranges(scope, []) == []
        other = Scope(user_id="someone-else", session_id=scope.session_id)
        assert store.ranges(other, [(0, 99)]) == [[]]
        for bad in ([(0,)], [(0, "2")], [1, 2], "0-2", [(0, 1.5)]):
            with pytest.raises(InvalidInput, match="span"):
                store.ranges(scope, bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="ANY|session"):
            store.ranges(Scope(user_id=scope.user_id), [(0, 1)])

    def test_ranges_take_spans_past_any_position(self, store: Store, scope: Scope) -> None:
        store.append(scope, [note(i, f"turn {i}") for i in range(3)])
        spans = [(0, 2**63), (-(2**70), 1), (2**64, 2**65), (-(2**64), -(2**63) - 1)]
        assert [[m.position for m in r] for r in store.ranges(scope, spans)] == [[0, 1, 2], [0, 1], [], []]


def assert_counters_exact(store: Store, scope: Scope) -> dict[str, int]:
    """``stats`` and ``count`` of the scope equal a recount of what its reads return."""
    held = store.get(scope, [f"m{i}" for i in range(16)] + [f"w{w}-{i}" for w in range(2) for i in range(60)])
    vectors = {(m.session_id, i) for m in held for i in store.get_vectors(
        Scope(user_id=m.user_id, agent_id=m.agent_id, session_id=m.session_id), [m.id])}
    dims = {len(v) for m in held for v in store.get_vectors(
        Scope(user_id=m.user_id, agent_id=m.agent_id, session_id=m.session_id), [m.id]).values()}
    stats = store.stats(scope)
    expected = {
        "message_count": len(held),
        "summary_count": sum(m.kind == "summary" for m in held),
        "text_bytes": sum(m.size_bytes() for m in held),
        "index_bytes": sum(len(indexed_prefix(m.text).encode()) for m in held),
        "vector_count": len(vectors),
        "vector_bytes": len(vectors) * (dims.pop() if dims else 0) * 4,
        "oldest_position": min((m.position or 0 for m in held), default=-1),
        "newest_position": max((m.position or 0 for m in held), default=-1),
    }
    assert {k: stats[k] for k in expected} == expected
    assert store.count(scope) == len(held)
    return stats


def race(workers: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> None:
    """Run each ``(target, args)`` in a process of its own, called with ``(*args, ready, start)``: all let go at
    once when every one has released ``ready``; each must exit cleanly.
    """
    ctx = multiprocessing.get_context("spawn")
    ready, start = ctx.Semaphore(0), ctx.Event()
    processes = [ctx.Process(target=target, args=(*args, ready, start)) for target, args in workers]
    for p in processes:
        p.start()
    for _ in processes:  # every one has imported and opened its store: now they race
        assert ready.acquire(timeout=60), "a worker did not start"
    start.set()
    for p in processes:
        p.join(120)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"


def then_forget(call: Callable[..., Any], store: Store, scope: Scope) -> Callable[..., Any]:
    """``call`` followed by a forget of ``scope`` on another thread, done before ``call``'s result is returned: a
    forget that comes while a search holds what it read.
    """

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        forgetting = threading.Thread(target=store.forget, args=(scope,))
        forgetting.start()
        forgetting.join()
        return result

    return wrapped


def churn_worker(url: str, scope: Scope, prefix: str, n: int, ready: Any, start: Any) -> None:
    """A busy conversation's writes, ``n`` times: append a message, embed or delete some, and add one to a
    shared and an own counter of a state document (read-modify-write).
    """
    store = open_store(url)
    ready.release()
    start.wait(30)

    def bump(doc: dict[str, Any] | None) -> dict[str, Any]:
        doc = dict(doc or {})
        doc["total"] = doc.get("total", 0) + 1
        doc[prefix] = doc.get(prefix, 0) + 1
        return doc

    for i in range(n):
        store.update_state(scope, "archive", bump, attempts=1000)
        store.append(scope, [StoredMessage(id=f"{prefix}-{i}", role="user", text=f"{prefix} {i} é", data={"i": i})])
        if i % 3 == 2:
            store.delete(scope, [f"{prefix}-{i}"])
        elif i % 3 == 1:
            store.set_vectors(scope, [f"{prefix}-{i}"], np.ones((1, 8), np.float32), "m")
    store.close()

