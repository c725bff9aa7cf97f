"""Behaviour settled once for every backend: read order across sessions, partial scopes, errors,
per-session counters, compare-and-set state and batched range reads.

Mixed into :class:`conformance.StoreConformance`, so it runs on SQLite, PostgreSQL and Redis.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from fullrecall.errors import StoreError
from fullrecall.stores import ANY, Scope, Store, StoredMessage


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
        expected = sorted(((m.user_id, m.agent_id, m.session_id, m.position) for m in got))
        assert [(m.user_id, m.agent_id, m.session_id, m.position) for m in got] == expected
        assert len(got) == 2 * len(made)
        assert [m.session_id for m in got[:6]] == ["a1", "a1", "s10", "s10", "s9", "s9"]  # by name, not creation
        assert {m.user_id for m in got[:12]} == {f"amy{tag}"}
        assert [m.key for m in store.get_keys(everyone, [m.key for m in reversed(got) if m.key])] == [m.key for m in got]

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
