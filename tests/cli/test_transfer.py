"""The transfer formats through their public functions: lossless JSONL, idempotent and resumable imports."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall.errors import MessageFormatError
from fullrecall.stores import open_store
from fullrecall.stores.base import ANY, Scope
from fullrecall.transfer import _common, jsonl, openai

TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=40)


def _body(buf: io.StringIO) -> list[dict]:
    """The lines between the header and the end line (split on \\n only, not splitlines: U+2028)."""
    lines = [json.loads(x) for x in buf.getvalue().split("\n")[1:] if x]
    assert lines[-1]["type"] == "end"
    return lines[:-1]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXT, min_size=1, max_size=8), user=st.sampled_from([None, "ann", "bö b"]),
       summary=st.none() | TEXT)
def test_jsonl_export_import_is_lossless_and_idempotent(texts, user, summary):
    a, b = open_store("sqlite:///:memory:"), open_store("sqlite:///:memory:")
    try:
        own = Scope(user_id=user, session_id="c1")
        messages = [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)]
        openai.import_openai(a, own, io.StringIO(json.dumps(messages)))
        if summary is not None:
            a.put_state(own, "summaries", {"items": [{"id": "s1", "text": summary, "covers": [0, 0]}]})
        first = io.StringIO()
        counts = jsonl.export_jsonl(a, Scope(user_id=user), first)
        assert counts["messages"] == len(texts) and counts["states"] == int(summary is not None)
        assert json.loads(first.getvalue().split("\n")[0])["version"] == jsonl.VERSION
        imported = jsonl.import_jsonl(b, Scope(), io.StringIO(first.getvalue()))
        assert imported["written"] == len(texts)
        assert jsonl.import_jsonl(b, Scope(), io.StringIO(first.getvalue()))["written"] == 0
        second = io.StringIO()
        jsonl.export_jsonl(b, Scope(user_id=user), second)
        assert _body(second) == _body(first)
        assert [m.data for m in b.range(own, 0, 100)] == messages
    finally:
        a.close()
        b.close()


class _Interrupted(Exception):
    pass


class _FailsAfter:
    """A store whose ``append`` fails after ``n`` calls (an import killed half-way)."""

    def __init__(self, store, n: int) -> None:
        self.store, self.left = store, n

    def __getattr__(self, name):
        return getattr(self.store, name)

    def append(self, scope, messages):
        if self.left == 0:
            raise _Interrupted
        self.left -= 1
        return self.store.append(scope, messages)


def test_an_interrupted_import_is_finished_by_running_it_again(monkeypatch):
    monkeypatch.setattr(_common, "BATCH", 3)
    store = open_store("sqlite:///:memory:")
    own = Scope(user_id="ann", session_id="t")
    transcript = json.dumps([{"role": "user", "content": f"message {i}"} for i in range(10)])
    with pytest.raises(_Interrupted):
        openai.import_openai(_FailsAfter(store, 2), Scope(user_id="ann"), io.StringIO(transcript), name="t")
    assert store.count(own) == 6  # two batches landed
    assert _common.conversations(store, Scope(user_id="ann")) == ["t"]  # listed, so export finds it
    again = openai.import_openai(store, Scope(user_id="ann"), io.StringIO(transcript), name="t")
    assert again["written"] == 4 and store.count(own) == 10
    assert [m.data["content"] for m in store.range(own, 0, 100)] == [f"message {i}" for i in range(10)]


def test_a_bad_line_is_named_and_nothing_is_written():
    store = open_store("sqlite:///:memory:")
    good = {"type": "message", "conversation_id": "c", "id": "m1", "role": "user", "text": "hi",
            "message": {"role": "user", "content": "hi"}}
    lines = [json.dumps({"format": "fullrecall", "version": 1}), json.dumps(good),
             json.dumps({**good, "id": "m2", "conversation_id": ""})]
    with pytest.raises(MessageFormatError, match="line 3: 'conversation_id'"):
        jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join(lines)))
    with pytest.raises(MessageFormatError, match="format 'other'"):
        jsonl.import_jsonl(store, Scope(), io.StringIO(json.dumps({"format": "other", "version": 1})))
    for owner in ("user_id", "agent_id"):  # an owner that is no string: named too, not a TypeError
        with pytest.raises(MessageFormatError, match=f"line 3: '{owner}'"):
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join(lines[:2] + [json.dumps({**good, owner: ["x"]})])))
    assert store.count(Scope(session_id="c")) == 0


def test_the_services_first_export_without_header_is_read_as_version_1():
    store = open_store("sqlite:///:memory:")
    old = [{"conversation_id": "c", "user_id": None, "agent_id": None, "id": f"m{i}", "position": i, "role": "user",
            "created_at": 1.0, "message": {"role": "user", "content": f"old line {i}"}} for i in range(3)]
    del old[1]["role"]  # a line with only what the service's first export had, or less
    counts = jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join(json.dumps(x) for x in old)))
    assert counts["written"] == 3
    stored = store.range(Scope(session_id="c"), 0, 10)
    assert [m.id for m in stored] == ["m0", "m1", "m2"] and stored[1].text.endswith("old line 1")


def _remember(store, embedder, user: str, clock: list[float]):
    """Facts (one superseded, with sources) and patterns (one expired) of ``user`` in ``store``."""
    from fullrecall.memory import FactMemory, ProceduralMemory

    facts = FactMemory(store, user_id=user, embedder=embedder, clock=lambda: clock[0])
    facts.remember("My city is Lyon.", sources=[{"session_id": "c1", "id": "m1"}])
    clock[0] += 100
    facts.remember("My city is Paris.", sources=[{"session_id": "c1", "id": "m2"}])
    facts.remember("I like green tea.")
    facts.remember("I like green tea.")  # merged: mentions 2
    patterns = ProceduralMemory(store, user_id=user, embedder=embedder)
    patterns.store_pattern("book a flight to Rome", ["search_flights", "book"], 0.9, 1200.0)
    patterns.store_pattern("book a flight to Rome", ["search_flights", "book"], 0.8, 800.0)
    ProceduralMemory(store, user_id=user, embedder=embedder, ttl_days=1e-6, clock=lambda: 1000.0).store_pattern(
        "an old task", ["x"], 1.0, 1.0)  # expired long ago: not exported
    return facts, patterns


def test_long_term_memory_round_trips_losslessly_on_every_backend(store_url, default_embedder):
    from fullrecall.memory import FactMemory, PersistentMemory, ProceduralMemory

    source, target = open_store("sqlite:///:memory:"), open_store(store_url)
    try:
        facts, patterns = _remember(source, default_embedder, "ann", [1_700_000_000.0])
        _remember(source, default_embedder, "bob", [1_700_000_000.0])  # another owner: not in ann's export
        openai.import_openai(source, Scope(user_id="ann", session_id="c1"),
                             io.StringIO(json.dumps([{"role": "user", "content": "My city is Paris."}])))
        PersistentMemory("ann", session_id="p1", store=source, embedder=default_embedder,
                         extract_facts=False).record_sync([{"role": "user", "content": "hello"}])
        first = io.StringIO()
        counts = jsonl.export_jsonl(source, Scope(user_id="ann"), first)
        body = _body(first)
        assert counts["records"] == 5 and counts["conversations"] == 2  # 3 facts, the live pattern, p1
        assert {line["type"] for line in body} == {"message", "fact", "pattern", "session"}
        assert not any(str(line.get("conversation_id", "")).startswith("_log.") for line in body)
        assert all(line["user_id"] == "ann" for line in body)
        old = next(x for x in body if x["type"] == "fact" and x["text"] == "My city is Lyon.")
        assert old["data"]["valid_to"] is not None and old["data"]["superseded_by"] and old["vector"]["dim"] == 384

        imported = jsonl.import_jsonl(target, Scope(), io.StringIO(first.getvalue()))
        assert imported["records"] == imported["records_written"] == 5 and imported["written"] == 2
        again = jsonl.import_jsonl(target, Scope(), io.StringIO(first.getvalue()))
        assert again["records_written"] == 0 and again["written"] == 0
        second = io.StringIO()
        jsonl.export_jsonl(target, Scope(user_id="ann"), second)
        assert _body(second) == body  # every field of every line, vectors included

        moved = FactMemory(target, user_id="ann", embedder=default_embedder)
        assert [f.to_dict() for f in moved.history()] == [f.to_dict() for f in facts.history()]
        assert [f.value for f in moved.current(attribute="city")] == ["Paris"]
        assert moved.search("which city", 1)[0][0].value == "Paris"  # the vectors came along
        carried = ProceduralMemory(target, user_id="ann", embedder=default_embedder)
        assert carried.patterns() == patterns.patterns() and len(carried.patterns()) == 1
        assert carried.plan_tool_sequence("book a flight to Rome")["suggested_tools"] == ["search_flights", "book"]
        assert FactMemory(target, user_id="bob", embedder=default_embedder).history() == []
        # the session long-term memory recorded into, then the owner's other conversation
        assert PersistentMemory("ann", store=target, embedder=default_embedder).sessions() == ["p1", "c1"]
    finally:
        source.close()
        target.close()


def test_patterns_imported_under_another_owner_take_that_owners_ids(store_url, default_embedder):
    from fullrecall.memory import ProceduralMemory

    source, target = open_store("sqlite:///:memory:"), open_store(store_url)
    try:
        task, steps = "book a flight to Rome", ["search_flights", "book"]
        ann_id = ProceduralMemory(source, user_id="ann", embedder=default_embedder).store_pattern(task, steps, 0.9, 1200)
        export = io.StringIO()
        jsonl.export_jsonl(source, Scope(user_id="ann"), export)
        for user in ("bob", "cy"):  # two owners import the same file, each twice
            for written in (1, 0):
                counts = jsonl.import_jsonl(target, Scope(user_id=user), io.StringIO(export.getvalue()),
                                            keep_owner=False)
                assert counts["records_written"] == written
        bob = ProceduralMemory(target, user_id="bob", embedder=default_embedder)
        cy = ProceduralMemory(target, user_id="cy", embedder=default_embedder)
        (mine,), (theirs,) = bob.patterns(), cy.patterns()
        assert len({ann_id, mine["id"], theirs["id"]}) == 3  # each owner's own id, none another's
        assert mine["tools_used"] == steps and mine["success_count"] == 1
        assert bob.store_pattern(task, steps, 0.7, 800) == mine["id"]  # bob's own run updates the imported one
        assert [p["success_count"] for p in bob.patterns()] == [2] and cy.patterns() == [theirs]
        assert bob.delete_pattern(mine["id"]) and bob.patterns() == [] and cy.patterns() == [theirs]
        jsonl.import_jsonl(target, Scope(), io.StringIO(export.getvalue()))  # keeping the owner keeps the id
        assert [p["id"] for p in ProceduralMemory(target, user_id="ann", embedder=default_embedder).patterns()] == [
            ann_id]
    finally:
        source.close()
        target.close()


def test_a_pattern_line_without_its_steps_is_refused_before_anything_is_written():
    store = open_store("sqlite:///:memory:")
    pattern = {"type": "pattern", "user_id": "ann", "agent_id": None, "id": "p1", "text": "book a flight",
               "created_at": 1.0, "updated_at": 1.0, "data": {"signature": "book a flight", "tools_used": ["book"],
                                                               "success_score": 0.9, "success_count": 1,
                                                               "avg_execution_time_ms": 10.0}}
    # a pattern procedural memory cannot read back (no score, a count that is no number) failed every plan of its
    # owner once imported
    for bad, named in (({"tools_used": "book"}, "tools_used"), ({"tools_used": None}, "tools_used"),
                       ({"signature": 3}, "signature"), ({"signature": "book\x00a"}, "signature"),
                       ({"tools_used": ["a\x00b"]}, "tools_used"), ({"success_score": "high"}, "success_score"),
                       ({"success_count": "x"}, "success_count"), ({"avg_execution_time_ms": None},
                                                                    "avg_execution_time_ms")):
        lines = [json.dumps(pattern | {"id": "p0"}), json.dumps(pattern | {"data": pattern["data"] | bad})]
        with pytest.raises(MessageFormatError, match=f"line 2: .*'data.{named}'"):
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join(lines)))
    without = {k: v for k, v in pattern["data"].items() if k != "success_score"}
    with pytest.raises(MessageFormatError, match="line 1: .*'data.success_score' is missing"):
        jsonl.import_jsonl(store, Scope(), io.StringIO(json.dumps(pattern | {"data": without})))
    assert store.get_records(Scope(user_id="ann"), "procedures") == []
    assert jsonl.import_jsonl(store, Scope(), io.StringIO(json.dumps(pattern)))["records_written"] == 1


def test_record_lines_are_checked_and_version_1_files_stay_readable():
    store = open_store("sqlite:///:memory:")
    v1 = json.dumps({"format": "fullrecall", "version": 1})
    good = {"type": "message", "conversation_id": "c", "id": "m1", "role": "user", "text": "hi",
            "message": {"role": "user", "content": "hi"}}
    assert jsonl.import_jsonl(store, Scope(), io.StringIO(v1 + "\n" + json.dumps(good)))["written"] == 1
    fact = {"type": "fact", "user_id": "ann", "agent_id": None, "id": "f1", "text": "My city is Lyon.",
            "created_at": 1.0, "updated_at": 1.0, "data": {"subject": "user"}}
    for bad, named in (({"id": ""}, "'id'"), ({"data": []}, "'data'"), ({"updated_at": "now"}, "'updated_at'"),
                       ({"vector": {"dim": 3, "b64": "AAAA"}}, "'vector'"), ({"text": "a\ud800b"}, "record 'f1': 'text'")):
        lines = [json.dumps(fact | {"id": "f0"}), json.dumps({**good, "id": "m2"}), json.dumps(fact | bad)]
        with pytest.raises(MessageFormatError, match=f"line 3: {named}"):
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join(lines)))
    assert store.count(Scope(session_id="c")) == 1 and store.get_records(Scope(user_id="ann"), "facts") == []


def _two_conversations() -> str:
    """A jsonl export of two conversations of ann, each at positions 0 and 1, one message id shared by both."""
    source = open_store("sqlite:///:memory:")
    try:
        for conv, words in (("c1", ("alpha", "beta")), ("c2", ("gamma", "delta"))):
            own = Scope(user_id="ann", session_id=conv)
            msgs = [{"role": "user", "content": words[0], "id": f"{conv}-0"},
                    {"role": "assistant", "content": words[1], "id": "ack"}]
            openai.import_openai(source, own, io.StringIO(json.dumps(msgs)))
        buf = io.StringIO()
        jsonl.export_jsonl(source, Scope(user_id="ann"), buf)
        return buf.getvalue()
    finally:
        source.close()


def test_jsonl_import_merging_conversations_loses_nothing_and_writes_nothing_partial(store_url):
    """``--session`` gathers several conversations into one: their positions clash and an id may be reused.

    A clash is never half-written (the store refused the second conversation's positions after the first's were
    written), and no message is acknowledged then dropped (a reused id silently kept the first message only).
    """
    text = _two_conversations()
    store = open_store(store_url)
    try:
        with pytest.raises(MessageFormatError, match=r"line \d+: conversation 'all': id 'ack' is also line \d+'s"):
            jsonl.import_jsonl(store, Scope(session_id="all"), io.StringIO(text))
        assert store.stats(Scope(user_id="ann")).get("message_count") == 0

        distinct = text.replace('"ack"', '"ack-c2"', 1)  # ids unique across both: merged, in file order
        counts = jsonl.import_jsonl(store, Scope(session_id="all"), io.StringIO(distinct))
        assert counts["messages"] == counts["written"] == 4
        merged = store.range(Scope(user_id="ann", session_id="all"), 0, 100)
        assert [m.data["content"] for m in merged] == ["alpha", "beta", "gamma", "delta"]
        assert [m.position for m in merged] == [0, 1, 2, 3]
        assert jsonl.import_jsonl(store, Scope(session_id="all"), io.StringIO(distinct))["written"] == 0
    finally:
        store.close()


def test_jsonl_import_refuses_a_position_another_message_holds_before_writing(store_url):
    """A conversation that is in the store with other messages at the file's positions: refused, nothing written."""
    text = _two_conversations()
    store = open_store(store_url)
    try:
        own = Scope(user_id="ann", session_id="c2")
        openai.import_openai(store, own, io.StringIO(json.dumps([{"role": "user", "content": "mine", "id": "x"}])))
        with pytest.raises(MessageFormatError, match=r"line \d+: conversation 'c2': position 0 holds another "
                                                     r"message \(id 'x'\)"):
            jsonl.import_jsonl(store, Scope(), io.StringIO(text))
        assert store.count(Scope(user_id="ann", session_id="c1")) == 0  # the first conversation was not written
        assert [m.id for m in store.range(own, 0, 10)] == ["x"]
        lines = text.split("\n")
        clash = [lines[0].replace('"version": 3', '"version": 2'),  # a file made by hand, no end line: version 2
                 lines[1], lines[1].replace('"c1-0"', '"other"')]  # two ids at one position of c1
        with pytest.raises(MessageFormatError, match=r"line 3: conversation 'c1': position 0 is also line 2's"):
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join(clash)))
        assert store.count(Scope(user_id="ann", session_id="c1")) == 0
    finally:
        store.close()


def test_strands_import_keeps_every_message_whatever_its_message_id(tmp_path):
    """Message files without a ``message_id`` (or with one repeated) were stored as one: the rest acknowledged, lost."""
    from fullrecall.transfer import strands

    folder = tmp_path / "session_s1" / "agents" / "agent_a" / "messages"
    folder.mkdir(parents=True)
    for i in range(3):
        item = {"message": {"role": ("user", "assistant")[i % 2], "content": [{"text": f"msg {i}"}]}}
        if i:
            item["message_id"] = 1  # the first has none, the others one each, the same
        (folder / f"message_{i}.json").write_text(json.dumps(item))
    store = open_store("sqlite:///:memory:")
    try:
        counts = strands.import_strands(store, Scope(), tmp_path)
        assert counts["messages"] == counts["written"] == 3
        stored = store.range(Scope(agent_id="a", session_id="s1"), 0, 10)
        assert [m.data["content"][0]["text"] for m in stored] == ["msg 0", "msg 1", "msg 2"]
        assert [m.id for m in stored] == [f"strands:s1:a:{i}" for i in range(3)]
        assert strands.import_strands(store, Scope(), tmp_path)["written"] == 0
        (folder / "message_01.json").write_text((folder / "message_1.json").read_text())
        with pytest.raises(MessageFormatError, match=r"message index 1 is also message_01.json's"):
            strands.import_strands(store, Scope(), tmp_path)
    finally:
        store.close()


def test_an_id_given_to_two_different_messages_is_refused_not_dropped():
    """The store keeps the first message of an id: a second, different one was counted as read and never stored."""
    from fullrecall.transfer import locomo

    store = open_store("sqlite:///:memory:")
    try:
        clash = [{"role": "user", "content": "first", "id": "m1"}, {"role": "assistant", "content": "second", "id": "m1"}]
        with pytest.raises(MessageFormatError, match=r"conversation 't': message 1: 'id' 'm1' is also message 0's"):
            openai.import_openai(store, Scope(session_id="t"), io.StringIO(json.dumps(clash)))
        assert store.count(Scope(session_id="t")) == 0
        same = [clash[0], clash[0], {"role": "assistant", "content": "second", "id": "m2"}]  # a repeat is one message
        assert openai.import_openai(store, Scope(session_id="t"), io.StringIO(json.dumps(same)))["written"] == 2

        sample = {"sample_id": "s", "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": [
            {"speaker": "A", "dia_id": "D1:1", "text": "hello"}]}}
        other = {**sample, "conversation": {**sample["conversation"], "session_1": [
            {"speaker": "B", "dia_id": "D1:1", "text": "another day"}]}}
        with pytest.raises(MessageFormatError, match=r"conversation 's': message 0: 'id' 'D1:1' is also message 0 of "
                                                     r"an earlier part of the file's"):
            locomo.import_locomo(store, Scope(), io.StringIO(json.dumps([sample, other])))
        assert store.count(Scope(session_id="s")) == 0
    finally:
        store.close()


def _vector(model: str, dim: int) -> dict:
    import base64

    import numpy as np

    return {"model": model, "dim": dim, "b64": base64.b64encode(np.ones(dim, dtype="<f4").tobytes()).decode()}


def test_jsonl_import_refuses_what_the_store_would_refuse_mid_write_before_writing(store_url):
    """A bad owner on a long-term line, or vectors of two models in a conversation, were refused by the store after
    the file's messages had been written (a raw numpy error for the vectors); now each is named, nothing written.
    """
    header = json.dumps({"format": "fullrecall", "version": 2})

    def message(i: int, **extra) -> str:
        return json.dumps({"type": "message", "conversation_id": "c1", "user_id": "ann", "id": f"m{i}", "position": i,
                           "role": "user", "text": "hello", "created_at": 1.7e9, "archived_at": 1.7e9,
                           "message": {"role": "user", "content": "hello"}, **extra})

    fact = json.dumps({"type": "fact", "user_id": "bad\x00user", "id": "f1", "text": "My city is Lyon.",
                       "created_at": 1.7e9, "updated_at": 1.7e9, "data": {"attribute": "city", "value": "Lyon"}})
    store = open_store(store_url)
    try:
        cases = [
            ([message(0), fact], r"line 3: 'user_id' contains a NUL character"),
            ([message(0, vector=_vector("m", 4)), message(1, vector=_vector("m", 8))],
             r"line 3: 'vector' is 'm' of 8 dimensions, line 2's 'm' of 4"),
            ([message(0, vector=_vector("m", 4)), message(1, vector=_vector("other", 4))],
             r"line 3: 'vector' is 'other' of 4 dimensions, line 2's 'm' of 4"),
        ]
        for body, error in cases:
            with pytest.raises(MessageFormatError, match=error):
                jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([header, *body])))
            assert store.stats(Scope(user_id="ann")).get("message_count") == 0
        jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([header, message(0, vector=_vector("m", 4))])))
        with pytest.raises(MessageFormatError, match=r"line 2: 'vector' is 'm' of 8 dimensions; conversation 'c1' "
                                                     r"holds vectors of 'm' of 4"):
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([header, message(1, vector=_vector("m", 8))])))
        assert store.count(Scope(user_id="ann", session_id="c1")) == 1
    finally:
        store.close()


def test_every_export_reads_past_gaps_in_the_positions(store_url):
    """Exports read a conversation a batch of positions at a time and stopped at the first empty batch: after 500
    deleted messages in a row (or an import at far apart positions) the rest was silently left out.
    """
    from fullrecall.stores.base import StoredMessage
    from fullrecall.transfer import locomo

    store = open_store(store_url)
    try:
        own = Scope(user_id="ann", session_id="c")
        store.append(own, [StoredMessage(id=f"m{i}", role="user", text=f"t{i}", data={"role": "user",
                                                                                     "content": f"t{i}"})
                           for i in range(600)])
        store.delete(own, [f"m{i}" for i in range(1, 560)])
        far = StoredMessage(id="far", role="user", text="far", data={"role": "user", "content": "far"},
                            position=10**12)
        store.append(own, [far])
        _common.register(store, own)
        want = ["t0", *(f"t{i}" for i in range(560, 600)), "far"]
        buf = io.StringIO()
        assert jsonl.export_jsonl(store, Scope(user_id="ann"), buf)["messages"] == len(want)
        assert [line["message"]["content"] for line in _body(buf)] == want
        buf = io.StringIO()
        openai.export_openai(store, Scope(user_id="ann"), buf)
        assert [m["content"] for m in json.loads(buf.getvalue())["messages"]] == want
        buf = io.StringIO()
        assert locomo.export_locomo(store, Scope(user_id="ann"), buf)["messages"] == len(want)
    finally:
        store.close()


def test_locomo_import_reads_every_session_whatever_its_number():
    """Sessions were read from 1 up to the first missing number: a file without session_2 lost session 3 on."""
    from fullrecall.transfer import locomo

    conversation = {"speaker_a": "Ann", "speaker_b": "Bob",
                    "session_1_date_time": "1:56 pm on 8 May, 2023",
                    "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "first"}],
                    "session_3_date_time": "2:00 pm on 10 May, 2023",
                    "session_3": [{"speaker": "Bob", "dia_id": "D3:1", "text": "third"}],
                    "session_10": [{"speaker": "Ann", "dia_id": "D10:1", "text": "tenth"}]}
    store = open_store("sqlite:///:memory:")
    try:
        counts = locomo.import_locomo(store, Scope(), io.StringIO(json.dumps([{"sample_id": "s", "conversation":
                                                                                 conversation}])))
        assert counts["messages"] == counts["written"] == 3
        stored = store.range(Scope(session_id="s"), 0, 10)
        assert [(m.data["content"], m.data["locomo"]["session"]) for m in stored] == [("first", 1), ("third", 3),
                                                                                      ("tenth", 10)]
    finally:
        store.close()


def test_strands_export_over_a_longer_earlier_export_is_refused(tmp_path):
    """Exporting again into a folder after a message was deleted left the earlier export's last message file there:
    Strands and an import loaded the deleted message back with the conversation.
    """
    from fullrecall.errors import InvalidInput
    from fullrecall.transfer import strands

    store = open_store("sqlite:///:memory:")
    try:
        own = Scope(session_id="t")
        said = [{"role": "user", "content": "one", "id": "a"}, {"role": "assistant", "content": "two", "id": "b"},
                {"role": "user", "content": "my secret three", "id": "c"}]
        openai.import_openai(store, own, io.StringIO(json.dumps(said)))
        assert strands.export_strands(store, Scope(), tmp_path / "out")["messages"] == 3
        assert strands.export_strands(store, Scope(), tmp_path / "out")["messages"] == 3  # the same again: fine
        store.delete(own, ["c"])
        with pytest.raises(InvalidInput, match=r"message_2.json is not a message of the conversation \(2 messages\)"):
            strands.export_strands(store, Scope(), tmp_path / "out")
        assert strands.export_strands(store, Scope(), tmp_path / "fresh")["messages"] == 2
        other = open_store("sqlite:///:memory:")
        strands.import_strands(other, Scope(), tmp_path / "fresh")
        assert [m.data["content"][0]["text"] for m in other.range(Scope(session_id="t"), 0, 9)] == ["one", "two"]
        other.close()
    finally:
        store.close()


def test_a_strands_round_trip_of_the_default_owner_restores_the_default_owner(tmp_path):
    """The default owner's conversation (agent "") is exported under Strands' agent folder ``agent_default``: its
    import came back under agent "default", another owner. A Strands session's own "default" agent stays that."""
    from fullrecall.transfer import strands

    store, other = open_store("sqlite:///:memory:"), open_store("sqlite:///:memory:")
    try:
        said = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
        for own in (Scope(session_id="t"), Scope(user_id="ann", session_id="t")):
            openai.import_openai(store, own, io.StringIO(json.dumps(said)))
        strands.export_strands(store, Scope(), tmp_path / "default")
        strands.export_strands(store, Scope(user_id="ann"), tmp_path / "ann")
        agent_json = json.loads((tmp_path / "default" / "session_t" / "agents" / "agent_default" / "agent.json")
                                .read_text())
        assert agent_json["agent_id"] == "default"  # what Strands' own default agent loads
        assert strands.import_strands(other, Scope(), tmp_path / "default")["written"] == 2
        assert strands.import_strands(other, Scope(user_id="ann"), tmp_path / "ann")["written"] == 2
        for user in (None, "ann"):
            assert [m.data["content"][0]["text"] for m in other.range(Scope(user_id=user, session_id="t"), 0, 9)
                    ] == ["hello", "hi"]
        assert other.count(Scope(user_id=ANY, agent_id="default")) == 0
        assert strands.import_strands(other, Scope(), tmp_path / "default", agent_id="bot")["written"] == 2
        assert other.count(Scope(agent_id="bot", session_id="t")) == 2  # a named agent still wins

        agent_json.pop("fullrecall_agent_id", None)  # a session Strands wrote: its "default" agent is "default"
        (tmp_path / "default" / "session_t" / "agents" / "agent_default" / "agent.json").write_text(
            json.dumps(agent_json))
        strands.import_strands(other, Scope(), tmp_path / "default")
        assert other.count(Scope(agent_id="default", session_id="t")) == 2
    finally:
        store.close()
        other.close()


def test_jsonl_lines_without_ids_take_ids_from_their_place_and_content():
    """A line without an id was 'line-<n>': another file's different message at that line had the same id and was
    skipped as already there (a silent loss).
    """
    store = open_store("sqlite:///:memory:")
    try:
        def line(text: str) -> str:
            return json.dumps({"conversation_id": "c", "message": {"role": "user", "content": text}})

        assert jsonl.import_jsonl(store, Scope(), io.StringIO(line("first file")))["written"] == 1
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(line("second file")))["written"] == 1
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(line("second file")))["written"] == 0  # a retry
        assert [m.data["content"] for m in store.range(Scope(session_id="c"), 0, 9)] == ["first file", "second file"]
    finally:
        store.close()


def test_a_jsonl_export_ends_with_its_counts_and_a_file_cut_short_is_refused(tmp_path):
    """The end line proves a file whole: a file cut at any line's end, or whose end line's counts disagree with its
    lines, is refused naming the file before anything is written; a version 2 file (no end line) still imports."""
    source = open_store("sqlite:///:memory:")
    own = Scope(user_id="ann", session_id="c1")
    openai.import_openai(source, own, io.StringIO(json.dumps([{"role": "user", "content": f"m{i}"} for i in range(3)])))
    source.put_state(own, "summaries", {"items": []})
    path = tmp_path / "x.jsonl"
    with open(path, "w", encoding="utf-8") as fp:
        jsonl.export_jsonl(source, Scope(user_id="ann"), fp)
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    assert json.loads(lines[-1]) == {"type": "end", "messages": 3, "records": 0, "states": 1}

    def imported(text: str) -> tuple[dict | None, str, int]:
        """(counts or None, the refusal, messages written) of importing ``text`` from a file into a fresh store."""
        path.write_text(text, encoding="utf-8")
        target = open_store("sqlite:///:memory:")
        try:
            with open(path, encoding="utf-8") as fp:
                return jsonl.import_jsonl(target, Scope(), fp), "", target.count(own)
        except MessageFormatError as exc:
            return None, str(exc), target.count(own)
        finally:
            target.close()

    whole = imported("\n".join(lines) + "\n")
    assert whole[0] is not None and whole[0]["written"] == 3 and whole[2] == 3
    for cut in range(1, len(lines)):  # cut after the header, after each message, after the state
        counts, refusal, written = imported("\n".join(lines[:cut]) + "\n")
        assert counts is None and written == 0
        assert refusal.startswith(f"file {str(path)!r} is cut short"), refusal
    more = json.dumps({**json.loads(lines[-1]), "messages": 4})
    counts, refusal, written = imported("\n".join([*lines[:-1], more]) + "\n")
    assert counts is None and written == 0 and "the end line counts 4 messages, the lines before it hold 3" in refusal
    assert f"file {str(path)!r}: line {len(lines)}" in refusal
    after = imported("\n".join([*lines, lines[1]]) + "\n")
    assert after[0] is None and f"line {len(lines) + 1} follows the end line (line {len(lines)})" in after[1]
    twice = imported("\n".join(lines + lines) + "\n")  # two whole exports, one after the other: both whole
    assert twice[0] is not None and twice[2] == 3
    old = [json.dumps({**json.loads(lines[0]), "version": 2}), *lines[1:-1]]  # an older fullrecall's file: no end line
    assert imported("\n".join(old) + "\n")[2] == 3
    source.close()


def test_a_conversation_holding_an_image_as_bytes_exports_in_every_format(tmp_path, store_url):
    """A Strands message with an image (bytes, which every store accepts) failed every jsonl and strands export
    with a TypeError; now bytes are written as Strands writes them, and read back as bytes.
    """
    from strands.session.file_session_manager import FileSessionManager

    from fullrecall.memory.conversation import SyncConversationMemory
    from fullrecall.transfer import locomo, strands

    picture = {"image": {"format": "png", "source": {"bytes": b"\x89PNG\x00\xff"}}}
    said = [{"role": "user", "content": [{"text": "look"}, picture]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "shot", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [picture]}}]}]
    store = open_store(store_url)
    try:
        SyncConversationMemory(store, session_id="c").add(said)
        buf = io.StringIO()
        assert jsonl.export_jsonl(store, Scope(), buf)["messages"] == 3
        again = open_store("sqlite:///:memory:")
        jsonl.import_jsonl(again, Scope(), io.StringIO(buf.getvalue()))
        assert [m.data for m in again.range(Scope(session_id="c"), 0, 10)] == said
        assert strands.export_strands(store, Scope(), tmp_path)["messages"] == 3
        loaded = FileSessionManager(session_id="c", storage_dir=str(tmp_path)).list_messages("c", "default")
        assert [m.message for m in loaded] == said
        for export in (openai.export_openai, locomo.export_locomo):
            assert export(store, Scope(), io.StringIO())["messages"] == 3
    finally:
        store.close()


@pytest.mark.parametrize("when", [1e300, 253402300800.0, -62135596801.0])
def test_a_time_no_calendar_date_holds_is_refused_by_the_dated_formats_naming_the_message(tmp_path, store_url, when):
    """A time before year 1 or past 9999 is refused by every store; one written before they refused it (here put
    in an SQLite file by hand) made the Strands and LoCoMo exports, which write dates, fail with a raw
    OverflowError or ValueError. They name the message; jsonl keeps the time.
    """
    import sqlite3

    from fullrecall.errors import InvalidInput
    from fullrecall.stores.base import StoredMessage
    from fullrecall.transfer import locomo, strands

    store = open_store(store_url)
    try:
        message = StoredMessage(id="m0", role="user", text="x", created_at=when, data={"role": "user", "content": "x"})
        with pytest.raises(InvalidInput, match="message 0: 'created_at' is .*; expected Unix seconds of the years 1"):
            store.append(Scope(session_id="c"), [message])
        if not store_url.startswith("sqlite"):
            return
        store.append(Scope(session_id="c"), [replace(message, created_at=1.7e9)])
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as raw:
            raw.execute("UPDATE messages SET created_at = ?", (when,))
        error = rf"conversation 'c': message 'm0': 'created_at' {re.escape(repr(when))} is no date from year 1 to 9999"
        with pytest.raises(InvalidInput, match=error):
            strands.export_strands(store, Scope(), tmp_path)
        with pytest.raises(InvalidInput, match=error):
            locomo.export_locomo(store, Scope(), io.StringIO())
        buf = io.StringIO()
        jsonl.export_jsonl(store, Scope(), buf)
        assert _body(buf)[0]["created_at"] == when
    finally:
        store.close()


@pytest.mark.parametrize("bad", ["x\x00y", "é" * 200])
def test_an_id_no_store_keeps_is_refused_naming_its_conversation_before_anything_is_written(store_url, bad):
    """OpenAI and LoCoMo imports gave a message id the store refuses (a NUL, over 256 bytes) to the store as it was:
    the conversations before it were written, and the error named 'message 0' of no conversation.
    """
    from fullrecall.transfer import locomo

    chats = "\n".join(json.dumps({"conversation_id": c, "messages": [{"role": "user", "content": "hi", "id": i}]})
                      for c, i in (("a", "ok"), ("b", bad)))

    def sample(name: str, dia: str) -> dict:
        return {"sample_id": name, "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": [
            {"speaker": "A", "dia_id": dia, "text": "hello"}]}}

    store = open_store(store_url)
    try:
        with pytest.raises(MessageFormatError, match=r"^conversation 'b': message 0: 'id' (contains a NUL|is 400 bytes)"):
            openai.import_openai(store, Scope(), io.StringIO(chats))
        with pytest.raises(MessageFormatError, match=r"^sample 's2': message 0: 'id' (contains a NUL|is 400 bytes)"):
            locomo.import_locomo(store, Scope(), io.StringIO(json.dumps([sample("s1", "D1:1"), sample("s2", bad)])))
        assert store.stats(Scope()).get("message_count") == 0
    finally:
        store.close()


def test_openai_records_of_one_conversation_all_land_in_file_order(store_url):
    """Two chat records with one ``conversation_id`` (a conversation continued on a later line): a message without
    an id took it from its place in its record, so the second record's system prompt and first question, at the
    first record's places with the same content, were taken for the first record's and 2 of 6 were lost.
    """
    system, hi = {"role": "system", "content": "You are helpful."}, {"role": "user", "content": "hi"}
    chats = "\n".join(json.dumps({"conversation_id": "c", "messages": [system, hi, {"role": "assistant", "content": a}]})
                      for a in ("hello", "how can I help?"))
    store = open_store(store_url)
    try:
        counts = openai.import_openai(store, Scope(), io.StringIO(chats))
        assert counts["messages"] == counts["written"] == 6
        held = store.range(Scope(session_id="c"), 0, 100)
        assert [m.data["content"] for m in held] == [
            "You are helpful.", "hi", "hello", "You are helpful.", "hi", "how can I help?"]
        assert openai.import_openai(store, Scope(), io.StringIO(chats))["written"] == 0  # a retry writes nothing
        own = [{**m, "id": f"m{i}"} for i, m in enumerate([system, hi])]  # own ids: the same message once, as ever
        twice = "\n".join(json.dumps({"conversation_id": "d", "messages": own}) for _ in range(2))
        assert openai.import_openai(store, Scope(), io.StringIO(twice))["written"] == 2
    finally:
        store.close()


def test_openai_and_locomo_files_may_start_with_a_byte_order_mark():
    """Given on stdin (the command opens files with utf-8-sig, not stdin) or to the library."""
    from fullrecall.transfer import locomo

    store = open_store("sqlite:///:memory:")
    try:
        chat = "\ufeff" + json.dumps([{"role": "user", "content": "hi"}])
        assert openai.import_openai(store, Scope(), io.StringIO(chat), name="t")["written"] == 1
        sample = {"sample_id": "s", "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": [
            {"speaker": "A", "dia_id": "D1:1", "text": "hello"}]}}
        assert locomo.import_locomo(store, Scope(), io.StringIO("\ufeff" + json.dumps([sample])))["written"] == 1
    finally:
        store.close()


def _summarized(store, user: str = "ann", session: str = "s1") -> list[dict]:
    """A conversation whose window manager summarized it several times; its archive's summaries."""
    from fullrecall import SyncConversationMemory

    made = iter(range(100))
    with SyncConversationMemory(store, session, user_id=user, summarizer=lambda m, p: f"summary {next(made)}",
                                max_history_turns=2, preserve_recent_messages=2) as memory:
        for i in range(6):
            memory.add([{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}])
        return memory.manager.archive.summaries()


def test_a_conversations_archived_summaries_come_back_with_their_covers(store_url):
    """The archive keeps each summary as a record of its conversation (namespace ``archive.summaries``): an export
    carried the state documents alone, so an import lost every summary (``inspect`` listed none). Now each is a
    ``summary`` line: it comes back with its covers, once however often the file is imported, on every backend.
    """
    from fullrecall import SyncConversationMemory

    source = open_store("sqlite:///:memory:")
    store = open_store(store_url)
    try:
        want = _summarized(source)
        assert len(want) >= 2 and all(s["covers"] for s in want)
        first = io.StringIO()
        counts = jsonl.export_jsonl(source, Scope(user_id="ann"), first)
        assert [line["id"] for line in _body(first) if line["type"] == "summary"] == [s["id"] for s in want]
        assert counts["states"] == 1 + len(want)  # the end line counts summary lines with the states
        for _ in range(2):
            jsonl.import_jsonl(store, Scope(), io.StringIO(first.getvalue()))
        again = io.StringIO()
        jsonl.export_jsonl(store, Scope(user_id="ann"), again)
        assert _body(again) == _body(first)
        with SyncConversationMemory(store, "s1", user_id="ann") as memory:
            assert memory.manager.archive.summaries() == want
    finally:
        source.close()
        store.close()


def test_reading_a_conversation_always_moves_on_past_the_last_position(tmp_path):
    """A store written before appends were refused past the last position (2**53 - 1) may hold messages past it;
    a read brings back its span clamped to one past the last, so the export re-read the same span forever (its
    memory growing). Each read now moves past what it read, and the export ends.
    """
    import itertools
    import sqlite3

    from fullrecall.stores._validate import MAX_POSITION
    from fullrecall.stores.base import StoredMessage

    path = tmp_path / "old.db"
    store = open_store(f"sqlite:///{path}")
    own = Scope(user_id="ann", session_id="c1")
    store.append(own, [StoredMessage(id=f"m{i}", role="user", text=f"t{i}", data={"role": "user", "content": f"t{i}"},
                                     position=MAX_POSITION - 2 + i) for i in range(3)])
    store.close()
    with sqlite3.connect(path) as conn:  # as an older version wrote them: the last two past the last position
        for mid in ("m2", "m1", "m0"):
            conn.execute("UPDATE messages SET position = position + 2 WHERE id = ?", (mid,))
    store = open_store(f"sqlite:///{path}")
    try:
        read = [m.id for chunk in itertools.islice(_common.chunks(store, own), 50) for m in chunk]
        assert read == ["m0", "m1"]  # each once; one past position 2**53 no read reaches
        assert jsonl.export_jsonl(store, Scope(user_id="ann"), io.StringIO())["messages"] == 2
    finally:
        store.close()
