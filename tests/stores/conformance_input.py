"""What every Store accepts and refuses (the rule of ``fullrecall.stores._validate``), on every backend.

Mixed into :class:`conformance.StoreConformance`, so it runs on SQLite, PostgreSQL and Redis. Refusals
are compared by their exact text: the same input gets the same error everywhere, and writes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from fullrecall.errors import InvalidInput, StateConflict
from fullrecall.stores import ANY, Filters, Record, Scope, Store, StoredMessage
from fullrecall.stores._forget import COUNT_KEYS as FORGET_COUNTS
from fullrecall.stores._validate import INDEXED_CHARS, MAX_FIELD_BYTES, MAX_POSITION

_MARK = "\ufdd0"  # the character PostgreSQL's NUL escaping uses: must round-trip too


def good(i: int | str, text: str = "plain words", **kw: Any) -> StoredMessage:
    return StoredMessage(id=f"m{i}", role="user", text=text, data={"content": text}, **kw)


def _deep(levels: int) -> Any:
    v: Any = "bottom"
    for _ in range(levels):
        v = [v]
    return v


# (field changes of message 1 of a batch, the error every backend gives)
BAD_MESSAGES: list[tuple[dict[str, Any], str]] = [
    ({"role": None}, "message 1: 'role' must be a str, got NoneType"),
    ({"role": ["user"]}, "message 1: 'role' must be a str, got list"),
    ({"role": ""}, "message 1: 'role' must not be empty"),
    ({"id": "m\x00x"}, "message 1: 'id' contains a NUL character (not allowed in identifiers)"),
    ({"id": "é" * 129}, "message 1: 'id' is 258 bytes long; identifiers are at most 256 bytes"),
    ({"id": 7}, "message 1: 'id' must be a str, got int"),
    ({"text": b"bytes"}, "message 1: 'text' must be a str, got bytes"),
    ({"text": "lone \ud800 surrogate"}, "message 1: 'text' is not valid Unicode (a lone surrogate at character 5)"),
    ({"data": {"x": [1, float("nan")]}}, "message 1: 'data.x[1]' is nan; JSON has no NaN or infinity"),
    ({"data": {"x": {"\udcff": 1}}}, "message 1: 'data.x.\udcff' is not valid Unicode (a lone surrogate)"),
    ({"data": {"deep": _deep(5000)}}, "message 1: 'data.deep" + "[0]" * 18 + "...' is nested more than 64 levels deep"),
    ({"data": {"when": {1, 2}}}, "message 1: 'data.when' is a set, not a JSON value"),
    ({"data": ["not", "an", "object"]}, "message 1: 'data' must be a dict (a JSON object), got list"),
    ({"data": {"n": 10**5000}}, "message 1: 'data' holds an integer too long to write (over 4,300 digits)"),
    ({"metadata": {"score": math.inf}}, "message 1: 'metadata.score' is inf; JSON has no NaN or infinity"),
    ({"metadata": {3: "x"}}, "message 1: 'metadata' has a key 3 of type int; JSON keys are strings"),
    ({"metadata": {"f": object()}}, "message 1: 'metadata.f' is a object, not a JSON value"),
    ({"kind": "weird"}, "message 1: 'kind' is 'weird'; expected one of ('message', 'summary')"),
    ({"position": -1}, "message 1: 'position' is -1; expected an int >= 0 or None"),
    ({"position": True}, "message 1: 'position' is True; expected an int >= 0 or None"),
    ({"position": 2**53}, "message 1: 'position' is 9007199254740992; positions are at most 9007199254740991 (2**53 - 1)"),
    ({"position": 2**63}, "message 1: 'position' is 9223372036854775808; positions are at most 9007199254740991 (2**53 - 1)"),
    ({"created_at": math.nan}, "message 1: 'created_at' is nan; expected Unix seconds of the years 1 to 9999"),
    ({"created_at": 1e300}, "message 1: 'created_at' is 1e+300; expected Unix seconds of the years 1 to 9999"),
    ({"archived_at": -1e20}, "message 1: 'archived_at' is -1e+20; expected Unix seconds of the years 1 to 9999"),
    ({"archived_at": "yesterday"}, "message 1: 'archived_at' is 'yesterday'; expected Unix seconds of the years 1 to 9999"),
    ({"summary_id": ""}, "message 1: 'summary_id' must not be empty"),
]


class InputConformance:
    # -- accepted: stored and returned exactly -----------------------------------------------

    def test_nul_and_odd_text_round_trip_verbatim(self, store: Store, scope: Scope) -> None:
        texts = ["alpha\x00beta", "\x00", "", _MARK + " gamma", _MARK + "\x00" + _MARK * 2 + " x\x00",
                 "tab\tnew\nline\r\x01\x7f\u2028 end", "emoji 🎉 and 日本語 and e\u0301"]
        batch = [
            StoredMessage(id=f"m{i}", role="user", text=t, data={"content": t, "k\x00": [t]}, metadata={"t": t})
            for i, t in enumerate(texts)
        ]
        assert store.append(scope, batch) == list(range(len(texts)))
        back = store.range(scope, 0, 100)
        assert [(m.id, m.text, m.data, m.metadata) for m in back] == [(m.id, m.text, m.data, m.metadata) for m in batch]
        assert [h.id for h in store.search_text(scope, ["beta"], 5)] == ["m0"]  # NUL separates words
        assert [h.id for h in store.search_text(scope, ["gamma"], 5)] == ["m3"]
        # the conversation goes on (PostgreSQL used to refuse every later write of the session)
        for i in range(30):
            assert store.append(scope, [good(100 + i)]) == [len(texts) + i]
        assert store.count(scope) == len(texts) + 30

    def test_huge_text_is_kept_verbatim_and_its_prefix_indexed(self, store: Store, scope: Scope) -> None:
        # 4 MiB of distinct words: PostgreSQL's tsvector of all of it would pass its 1 MB limit
        words = [f"w{n:07d}" for n in range(4 * 2**20 // 9)]
        text = " ".join(words)
        early, late = words[10], words[len(words) // 2]
        assert text.index(late) > INDEXED_CHARS
        assert store.append(scope, [good(0, text), good(1, "after the big one")]) == [0, 1]
        (back,) = store.get(scope, ["m0"])
        assert back.text == text and back.data == {"content": text}
        assert [h.id for h in store.search_text(scope, [early], 5)] == ["m0"]
        assert store.search_text(scope, [late], 5) == []  # past the indexed prefix, on every backend
        assert store.delete(scope, ["m0"]) == 1
        assert store.search_text(scope, [early], 5) == []
        assert store.append(scope, [good(2)]) == [2]

    def test_records_and_state_keep_nul(self, store: Store, scope: Scope) -> None:
        store.put_record(scope, Record(id="r1", namespace="facts", text="likes\x00tea " + _MARK, data={"v": "\x00"}))
        (rec,) = store.get_records(scope, "facts")
        assert (rec.text, rec.data) == ("likes\x00tea " + _MARK, {"v": "\x00"})
        store.put_state(scope, "window", {"messages": [{"content": "a\x00b"}]})
        assert store.get_state(scope, "window") == {"messages": [{"content": "a\x00b"}]}

    # -- refused: the same error everywhere, nothing written -----------------------------------

    @pytest.mark.parametrize("change,error", BAD_MESSAGES, ids=[e.split(": ", 1)[1][:40] for _, e in BAD_MESSAGES])
    def test_bad_message_refused_identically_and_nothing_written(
        self, store: Store, scope: Scope, change: dict[str, Any], error: str
    ) -> None:
        bad = dataclasses.replace(good(1), **change)
        with pytest.raises(InvalidInput) as info:
            store.append(scope, [good(0), bad, good(2)])
        assert str(info.value) == error
        assert store.count(scope) == 0 and store.get(scope, ["m0", "m2"]) == []
        assert store.append(scope, [good(0)]) == [0]  # the session is not stuck

    def test_text_over_the_limit_is_refused(self, store: Store, scope: Scope) -> None:
        over = r"^message 0: 'text' is 67,108,865 bytes, over the 67,108,864-byte limit"
        with pytest.raises(InvalidInput, match=over):
            store.append(scope, [good(0, "x" * (MAX_FIELD_BYTES + 1))])
        assert store.count(scope) == 0

    def test_a_write_without_one_owner_and_session_is_refused_identically(self, store: Store, scope: Scope) -> None:
        no_session = "this write needs a session: Scope(session_id=...) is missing"
        any_owner = "this write needs one owner: ANY is only for reads and forget"
        for bad, error in [(dataclasses.replace(scope, session_id=None), no_session),
                           (dataclasses.replace(scope, user_id=ANY), any_owner)]:
            for call, args in ((store.append, ([good(0)],)), (store.put_state, ("w", {})), (store.range, (0, 9))):
                with pytest.raises(InvalidInput) as info:
                    call(bad, *args)
                assert str(info.value) == error
        assert store.count(scope) == 0 and store.get_state(scope, "w") is None

    def test_filters_of_the_wrong_type_are_refused_identically(self, store: Store, scope: Scope) -> None:
        store.append(scope, [good(0), good(1)])
        for kwargs, error in [
            ({"roles": "user"}, "filters 'roles' must be a list of strings, got 'user'"),
            ({"exclude_ids": "m0"}, "filters 'exclude_ids' must be a list of strings, got 'm0'"),
            ({"kinds": ["message", 5]}, "filters 'kinds' must be a list of strings, got ['message', 5]"),
            ({"roles": ["user\x00"]}, "filters 'roles'[0] contains a NUL character (not allowed in identifiers)"),
            ({"exclude_ids": ["m0", ""]}, "filters 'exclude_ids'[1] must not be empty"),
            ({"since": "1"}, "filters 'since' must be Unix seconds (a finite number), got '1'"),
            ({"until": math.nan}, "filters 'until' must be Unix seconds (a finite number), got nan"),
        ]:
            with pytest.raises(InvalidInput) as info:
                store.search_text(scope, ["plain"], 5, Filters(**kwargs))
            assert str(info.value) == error
        query = np.ones(4, dtype=np.float32)
        for call, where in [(lambda f: store.search_text(scope, ["plain"], 5, f), "search_text"),
                            (lambda f: store.search_vectors(scope, query, 5, f), "search_vectors")]:
            for given in ({"roles": ["user"]}, ["user"], "user"):  # a dict was an AttributeError, on each its own
                with pytest.raises(InvalidInput) as info:
                    call(given)
                assert str(info.value) == (f"{where}: 'filters' must be a Filters (fullrecall.stores.Filters) or "
                                           f"None, got {type(given).__name__}")
        lists = Filters(roles=["user"], kinds=["message"], exclude_ids=["m0"], since=np.float32(0), until=np.int64(2**40))
        assert [h[0] for h in store.search_text(scope, ["plain"], 5, lists)] == ["m1"]

    def test_a_bad_k_or_terms_is_refused_identically(self, store: Store, scope: Scope) -> None:
        store.append(scope, [good(0)])
        query = np.ones(4, dtype=np.float32)
        for call, error in [
            (lambda: store.search_text(scope, ["plain"], -1), "k must be a non-negative integer, got -1"),
            (lambda: store.search_text(scope, ["plain"], "2"), "k must be a non-negative integer, got '2'"),
            (lambda: store.search_vectors(scope, query, 2.5), "k must be a non-negative integer, got 2.5"),
            (lambda: store.search_text(scope, "plain", 2), "terms must be a sequence of words, not one string"),
        ]:
            with pytest.raises(InvalidInput) as info:
                call()
            assert str(info.value) == error

    def test_a_k_beyond_any_count_finds_every_hit(self, store: Store, scope: Scope) -> None:
        """A k past 2**63 was 'PostgreSQL refused a value, nothing was written: bigint out of range' there (an
        agent's ``search_memory`` limit reaches it), while SQLite and Redis answered with every hit."""
        store.append(scope, [good(0), good(1, "other words")])
        store.set_vectors(scope, ["m0", "m1"], np.eye(2, 4, dtype=np.float32), "m")
        for k in (2**63 - 1, 2**63, 10**30):
            assert [h[0] for h in store.search_text(scope, ["plain"], k)] == ["m0"]
            assert sorted(h[0] for h in store.search_vectors(scope, np.ones(4, dtype=np.float32), k)) == ["m0", "m1"]

    def test_bad_ids_and_documents_refused_identically(self, store: Store, scope: Scope) -> None:
        for kwargs, error in [
            ({"user_id": "al\x00ice"}, "scope 'user_id' contains a NUL character (not allowed in identifiers)"),
            ({"session_id": "s\ud800"}, "scope 'session_id' is not valid Unicode (a lone surrogate at character 1)"),
            ({"tenant": ""}, "scope 'tenant' must not be empty"),
            ({"agent_id": 5}, "scope 'agent_id' must be a str or None, got int"),
        ]:
            with pytest.raises(InvalidInput) as info:
                Scope(**{"session_id": "s", **kwargs})
            assert str(info.value) == error
        with pytest.raises(InvalidInput, match=r"^state 'w' must be a dict, got float"):
            store.put_state(scope, "w", math.nan)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match=r"^state 'w.x\[0\]' is nan; JSON has no NaN"):
            store.put_state(scope, "w", {"x": [math.nan]})
        with pytest.raises(InvalidInput, match=r"^state key contains a NUL"):
            store.put_state(scope, "w\x00", {})
        with pytest.raises(InvalidInput, match=r"^record 'r': 'data.v' is nan"):
            store.put_record(scope, Record(id="r", namespace="facts", text="t", data={"v": math.nan}))
        with pytest.raises(InvalidInput, match=r"^record 'r': 'namespace' contains a NUL"):
            store.put_record(scope, Record(id="r", namespace="f\x00", text="t"))
        assert store.get_state(scope, "w") is None and store.get_records(scope, "facts") == []
        # a lone surrogate in any other argument: InvalidInput too, never UnicodeEncodeError
        store.append(scope, [good(0)])
        for call in (lambda: store.get(scope, ["\ud800"]), lambda: store.search_text(scope, ["x\ud800"], 3),
                     lambda: store.delete(scope, ["m0", "\ud800"]), lambda: store.get_state(scope, "\ud800"),
                     lambda: store.get_records(scope, "\ud800")):
            with pytest.raises(InvalidInput, match="not valid Unicode"):
                call()
        assert store.count(scope) == 1
        assert store.search_text(scope, ["pl\x00ain", "words"], 3)[0][0] == "m0"  # NUL in a term splits it

    def test_a_name_no_write_accepts_is_refused_by_reads_identically(self, store: Store, scope: Scope) -> None:
        """A NUL in a state key or record name read back nothing on SQLite and Redis but was a PostgreSQL refusal
        ('text fields cannot contain NUL'); a lone surrogate in ``delete_record``'s id a refusal on SQLite and
        PostgreSQL but False on Redis; a namespace of another type a StoreError, a TypeError or []. Each name is
        checked as the write checks it (found by tests/stores/test_backends_agree.py)."""
        store.put_record(scope, Record(id="r", namespace="facts", text="kept"))
        store.put_state(scope, "w", {"kept": True})
        for call, error in [
            (lambda: store.get_records(scope, "n\x00"),
             "get_records: 'namespace' contains a NUL character (not allowed in identifiers)"),
            (lambda: store.get_records(scope, 5), "get_records: 'namespace' must be a str, got int"),
            (lambda: store.delete_record(scope, "f\x00", "r"),
             "delete_record: 'namespace' contains a NUL character (not allowed in identifiers)"),
            (lambda: store.delete_record(scope, "facts", "\ud800"),
             "delete_record: 'record_id' is not valid Unicode (a lone surrogate at character 0)"),
            (lambda: store.get_versioned_state(scope, "k\x00"),
             "state key contains a NUL character (not allowed in identifiers)"),
            (lambda: store.get_state(scope, 5), "state key must be a str, got int"),
        ]:
            with pytest.raises(InvalidInput) as info:
                call()
            assert str(info.value) == error
        assert [r.text for r in store.get_records(scope, "facts")] == ["kept"]
        assert store.get_state(scope, "w") == {"kept": True}

    def test_a_taken_position_is_refused_identically(self, store: Store, scope: Scope) -> None:
        """The refusal named the position on Redis, added SQLite's constraint text on SQLite: one text now."""
        store.append(scope, [good(0)])
        with pytest.raises(ValueError) as info:
            store.append(scope, [good(1, position=0)])
        assert str(info.value) == f"cannot append to session {scope.session_id!r}: an explicit position is already taken"
        assert [m.id for m in store.range(scope, 0, 9)] == ["m0"]

    def test_an_append_past_the_last_position_is_refused_identically(self, store: Store, scope: Scope) -> None:
        """A message at the last position (2**53 - 1) followed by messages without one: SQLite and PostgreSQL gave
        them positions past the last (which no read reaches: an export looped forever), Redis's doubles gave two of
        them one position. Now the append is refused naming the first message with no position left, nothing
        written, on every backend, in a batch and in a later append alike.
        """
        last = MAX_POSITION
        want = (f"message 1 (id 'm1'): no position is left for it after position {last} (2**53 - 1), the last a "
                "conversation has; nothing was written")
        with pytest.raises(InvalidInput) as info:
            store.append(scope, [good(0, position=last), good(1), good(2)])
        assert str(info.value) == want
        assert store.count(scope) == 0 and store.stats(scope)["session_count"] == 0
        assert store.append(scope, [good(0, position=last)]) == [last]
        for batch in ([good(1)], [good(0), good(1)]):  # after the last one (an id held keeps its place)
            with pytest.raises(InvalidInput) as info:
                store.append(scope, batch)
            assert str(info.value) == want.replace("message 1 ", f"message {len(batch) - 1} ")
        with pytest.raises(InvalidInput):
            store.replace(scope, ["m0"], [good(1)])
        assert [(m.id, m.position) for m in store.range(scope, 0, 2**62)] == [("m0", last)]
        assert store.append(scope, [good(0), good(3, position=5)]) == [last, 5]  # held, and a free place: taken

    def test_a_refused_write_leaves_no_session_behind(self, store: Store, scope: Scope) -> None:
        """On Redis a put_state refused for its version, or a batch naming one position twice, made its session
        before refusing: ``stats`` counted it and ``forget`` reported a session SQLite and PostgreSQL never held
        (found by tests/stores/test_backends_agree.py)."""
        with pytest.raises(StateConflict):
            store.put_state(scope, "w", {}, expected=2)
        with pytest.raises(ValueError, match="already taken"):
            store.append(scope, [good(0, position=0), good(1, position=0)])
        assert store.stats(scope)["session_count"] == 0
        assert store.forget(scope) == {**dict.fromkeys(FORGET_COUNTS, 0), "remaining": []}
