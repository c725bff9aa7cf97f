"""A malformed or hostile jsonl file, on every backend: refused with a fullrecall error naming its line and field,
before anything is written (a good conversation before the bad line stays unwritten), and the corrected file then
imports each message once.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pytest

from fullrecall.errors import MessageFormatError
from fullrecall.stores import open_store
from fullrecall.stores.base import ANY, Scope
from fullrecall.transfer import jsonl

HEADER = json.dumps({"format": "fullrecall", "version": 2})


def line(i: int, conversation: str = "b", **change: Any) -> str:
    fields = {"type": "message", "conversation_id": conversation, "user_id": "ann", "id": f"m{i}", "position": i,
              "role": "user", "kind": "message", "created_at": 1.7e9, "archived_at": 1.7e9, "metadata": {},
              "text": f"message {i}", "message": {"role": "user", "content": f"message {i}"}}
    return json.dumps({**fields, **change})


def _vector(values: list[float]) -> dict[str, Any]:
    raw = np.asarray(values, dtype="<f4")
    return {"model": "m", "dim": int(raw.shape[0]), "b64": base64.b64encode(raw.tobytes()).decode()}


def summary(**change: Any) -> str:
    fields = {"type": "summary", "conversation_id": "b", "user_id": "ann", "id": "s1", "text": "earlier: a chat",
              "created_at": 1.7e9, "updated_at": 1.7e9, "data": {"covers": [1, 2], "folds_id": None, "folds": None}}
    return json.dumps({**fields, **change})


def state(value: Any, key: str = "window") -> str:
    return json.dumps({"type": "state", "conversation_id": "b", "user_id": "ann", "key": key, "value": value})


MANAGER = {"__name__": "SemanticSummarizingConversationManager", "removed_message_count": 0}
GOOD = line(0, "a")  # line 2: a whole conversation the refusal must not leave written
BAD: list[tuple[list[str], str]] = [  # (lines 3 on, what the refusal says)
    ([line(1), line(2, text="lone \ud800")], r"^line 4: 'text' is not valid Unicode \(a lone surrogate at character 5\)$"),
    ([line(1, message={"role": "user", "content": "\udcff"})], r"^line 3: 'message.content' is not valid Unicode"),
    ([line(1, kind="weird")], r"^line 3: 'kind' is 'weird'; expected one of \('message', 'summary'\)$"),
    ([line(1, created_at="yesterday")], r"^line 3: 'created_at' is 'yesterday'; expected Unix seconds of the years 1 to 9999"),
    ([line(1, archived_at=float("inf"))], r"^line 3: 'archived_at' is inf; expected Unix seconds of the years 1 to 9999"),
    ([line(1, metadata=[1])], r"^line 3: 'metadata' must be a dict, got list$"),
    ([line(1, metadata={"score": float("nan")})], r"^line 3: 'metadata.score' is nan; JSON has no NaN or infinity$"),
    ([line(1, message={"role": "user", "x": [float("nan")]})], r"^line 3: 'message.x\[0\]' is nan; JSON has no NaN"),
    ([line(1, position=True)], r"^line 3: 'position' must be an integer >= 0$"),
    ([line(1, position=2**53)], r"^line 3: 'position' is 9007199254740992; positions are at most"),
    ([line(1, role="")], r"^line 3: 'role' must not be empty$"),
    ([line(1, summary_id="")], r"^line 3: 'summary_id' must not be empty$"),
    ([line(1, id="x\x00y")], r"^line 3: 'id' contains a NUL character"),
    ([line(1), json.dumps({"type": "state", "conversation_id": "b", "user_id": "ann", "key": "window",
                           "value": {"x": float("nan")}})], r"^line 4: 'value.x' is nan; JSON has no NaN or infinity$"),
    ([line(1), line(2)[:40]], r"^line 4: not valid JSON"),
    ([line(1), state({"manager": 5})], r"^line 4: 'value.manager' must be an object or null, got 5$"),
    ([line(1), state({"manager": {**MANAGER, "removed_message_count": "x"}})],
     r"^line 4: 'value.manager.removed_message_count' must be an integer from 0 to 9007199254740991, got 'x'$"),
    ([line(1), state({"manager": {**MANAGER, "removed_message_count": -3}})],
     r"^line 4: 'value.manager.removed_message_count' must be an integer from 0 to 9007199254740991, got -3$"),
    ([line(1), state({"manager": {**MANAGER, "summary_message": 7}})],
     r"^line 4: 'value.manager.summary_message' must be a message \(an object\) or null, got 7$"),
    ([line(1), state({"manager": {**MANAGER, "front_positions": ["a"]}})],
     r"^line 4: 'value.manager.front_positions' must be a list of positions"),
    ([line(1), state({"manager": {**MANAGER, "held_pins": 5}})],
     r"^line 4: 'value.manager.held_pins' must be a list of messages \(objects\) or null, got 5$"),
    ([line(1), state({"manager": {**MANAGER, "__name__": 3}})], r"^line 4: 'value.manager.__name__' must be a string"),
    ([line(1), state({"manager": {**MANAGER, "summary_message": {}}})],
     r"^line 4: 'value.manager.summary_message' is not a message: 'role' is missing$"),
    ([line(1), state({"manager": {**MANAGER, "held_pins": [{"role": "user", "content": 5}]}})],
     r"^line 4: 'value.manager.held_pins\[0\]' is not a message: 'content' must be"),
    ([line(1), state({"replaced": {"1": {"role": "user", "content": 5}}, "version": 1})],
     r"^line 4: 'value.replaced.1' is not a message: 'content' must be"),
    ([line(1), state({"messages": [{"content": "no role"}]})],
     r"^line 4: 'value.messages\[0\]' is not a message: 'role' is missing$"),
    ([line(1), state({"manager": {**MANAGER, "removed_message_count": 10**30}})],
     r"^line 4: 'value.manager.removed_message_count' must be an integer from 0 to 9007199254740991, got 1000"),
    ([line(1), state({"manager": {**MANAGER, "front_positions": [2**53]}})],
     r"^line 4: 'value.manager.front_positions' must be a list of positions"),
    ([line(1), state({"replaced": [1], "version": 1})],
     r"^line 4: 'value.replaced' must be an object of positions to messages, got \[1\]$"),
    ([line(1), state({"replaced": {"x": {"role": "user"}}})], r"^line 4: 'value.replaced' must be an object of"),
    ([line(1), state({"messages": "abc"})], r"^line 4: 'value.messages' must be a list of messages \(objects\)"),
    ([line(1), state({"version": "x"})], r"^line 4: 'value.version' must be an integer from 0 to 9007199254740991, "
                                         r"got 'x'$"),
    ([line(1), state({"version": 10**30})], r"^line 4: 'value.version' must be an integer from 0 to 9007199254740991"),
    ([line(1), state({"unpinned": 5})], r"^line 4: 'value.unpinned' must be a string or null, got 5$"),
    ([line(1), state({"pinning": 5})], r"^line 4: 'value.pinning' must be a string or null, got 5$"),
    ([line(1), state({"items": 5}, "summaries")], r"^line 4: 'value.items' must be a list of summaries"),
    ([line(1, position=2**53 - 1), line(2, position=None)], r"^line 4: conversation 'b': no position is left for "
                                                             r"message 'm2' after position 9007199254740991"),
    ([line(1), summary(data={"covers": "1-2"})], r"^line 4: 'data.covers' must be \[first, last\], two positions"),
    ([line(1), summary(data={"covers": [2, 1]})], r"^line 4: 'data.covers' must be \[first, last\]"),
    ([line(1), summary(data={"covers": [0, 2**53]})], r"^line 4: 'data.covers' must be \[first, last\]"),
    ([line(1), summary(data={"covers": [0, 1], "folds_id": 3})], r"^line 4: 'data.folds_id' must be a string or null$"),
    ([line(1), summary(id="")], r"^line 4: 'id' must be a non-empty string$"),
    ([line(1), summary(id="x\x00y")], r"^line 4: record 'x\\x00y': 'id' contains a NUL"),
    ([line(1), summary(text=None)], r"^line 4: 'text' must be a string$"),
    ([line(1), summary(created_at="yesterday")], r"^line 4: 'created_at' must be a time in Unix seconds$"),
    ([line(1, vector=_vector([1.0, 2.0])), line(2, vector=_vector([float("nan"), 1.0]))],
     r"^line 4: 'vector' holds NaN or infinity$"),
    ([line(1, vector=_vector([float("inf")]))], r"^line 3: 'vector' holds NaN or infinity$"),
    ([line(1, vector=_vector([]))], r"^line 3: 'vector' is malformed$"),
    ([line(1), line(2)[:-2] + ', "n": ' + "9" * 5000 + "}}"], r"^line 4: not valid JSON \(a number too long"),
]


@pytest.mark.parametrize(("body", "error"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_line_is_named_and_nothing_is_written(store_url, body, error):
    store = open_store(store_url)
    try:
        text = "\n".join([HEADER, GOOD, *body])
        with pytest.raises(MessageFormatError, match=error):
            jsonl.import_jsonl(store, Scope(), io.StringIO(text))
        owner = Scope(user_id="ann")
        assert store.stats(owner).get("message_count") == 0
        assert store.get_state(Scope(user_id="ann", session_id="b"), "window") is None
        assert store.get_records(Scope(user_id="ann", session_id="b"), "archive.summaries") == []
        good = "\n".join([HEADER, GOOD, line(1), line(2)])  # corrected: written once, however often it is run
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(good))["written"] == 3
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(good))["written"] == 0
        assert store.stats(owner).get("message_count") == 3
    finally:
        store.close()


def test_a_byte_order_mark_and_crlf_line_ends_are_read(store_url):
    """A file from a Windows tool, given on stdin or to the library (the command opened files with utf-8-sig)."""
    store = open_store(store_url)
    try:
        text = "\ufeff" + "\r\n".join([HEADER, GOOD, line(1), ""])
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(text, newline=""))["written"] == 2
        assert [m.data["content"] for m in store.range(Scope(user_id="ann", session_id="b"), 0, 9)] == ["message 1"]
    finally:
        store.close()


def test_messages_without_a_position_follow_those_the_file_places(store_url):
    """A line without a position took the next free one as it came, and a later line's position then clashed with
    it: the store refused that batch after earlier ones were written. Now they are appended after the file's others.
    """
    store = open_store(store_url)
    try:
        text = "\n".join([HEADER, line(5, position=None), line(0), line(6, position=None), line(1), line(3)])
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(text))["written"] == 5
        stored = store.range(Scope(user_id="ann", session_id="b"), 0, 99)
        assert [(m.id, m.position) for m in stored] == [("m0", 0), ("m1", 1), ("m3", 3), ("m5", 4), ("m6", 5)]
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(text))["written"] == 0
    finally:
        store.close()


def test_a_line_whose_id_the_conversation_holds_with_another_message_is_refused(store_url):
    """The store keeps the first message of an id: a file giving a held id to another message was read as 'all there
    already', its message silently dropped. Now it is refused, naming the line; the same message again is no change.
    """
    store = open_store(store_url)
    try:
        jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([HEADER, line(1)])))
        other = line(1, message={"role": "user", "content": "edited since"})
        with pytest.raises(MessageFormatError, match=r"^line 3: conversation 'b': id 'm1' is held with another "
                                                     r"message"):
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([HEADER, GOOD, other, line(2)])))
        assert store.stats(Scope(user_id="ann")).get("message_count") == 1
        assert jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([HEADER, line(1), line(2)])))["written"] == 1
    finally:
        store.close()


def test_written_counts_the_files_messages_alone_while_others_write_to_the_conversation(store_url):
    """An import counted as written whatever its conversation gained meanwhile (the count after less the count
    before): a message another writer appended while it ran was reported as one of the file's. Now ``written``
    counts the file's messages the store did not hold, on every backend and in every format.
    """
    from fullrecall.stores.base import StoredMessage
    from fullrecall.transfer import openai

    store = open_store(store_url)
    try:
        def live(conversation: Scope):
            def writer(what: str, done: int, total: int) -> None:  # another client, writing as the import runs
                if what.startswith(("importing", "writing")):
                    n = store.count(conversation)
                    store.append(conversation, [StoredMessage(id=f"live-{n}", role="user", text="live",
                                                              data={"role": "user", "content": "live"})])
            return writer

        text = "\n".join([HEADER, line(0), line(1), line(2)])
        b = Scope(user_id="ann", session_id="b")
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(text), progress=live(b))["written"] == 3
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(text), progress=live(b))["written"] == 0
        transcript = json.dumps({"conversation_id": "t", "messages": [{"role": "user", "content": "hi", "id": "h"}]})
        t = Scope(user_id="ann", session_id="t")
        for written in (1, 0):
            counts = openai.import_openai(store, Scope(user_id="ann"), io.StringIO(transcript), progress=live(t))
            assert counts["written"] == written, counts
        assert store.count(b) == 5 and store.count(t) == 3  # the live writer's messages are there, not counted
    finally:
        store.close()


def test_a_line_nested_past_any_parser_is_refused_naming_it_in_every_format(store_url, tmp_path, default_embedder):
    """100,000 nested brackets in a line made Python's parser raise RecursionError, which no importer took for
    invalid JSON: ``fullrecall import`` crashed with a traceback. Each format now refuses it as invalid JSON.
    """
    from fullrecall.errors import MemoryInputError
    from fullrecall.memory import PersistentMemory
    from fullrecall.transfer import locomo, openai

    deep = "[" * 100_000 + "]" * 100_000
    store = open_store(store_url)
    try:
        with pytest.raises(MessageFormatError, match=r"^line 3: not valid JSON \(nested too deep\)$"):
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([HEADER, line(0), deep])))
        with pytest.raises(MessageFormatError, match=r"^line 2: not valid JSON \(nested too deep\)$"):
            openai.import_openai(store, Scope(), io.StringIO('{"role": "user", "content": "hi"}\n' + deep))
        with pytest.raises(MessageFormatError, match=r"nested too deep"):
            locomo.import_locomo(store, Scope(), io.StringIO(deep))
        memory = PersistentMemory(user_id="ann", store=store, embedder=default_embedder)
        with pytest.raises(MemoryInputError, match=r"^line 1: not JSON \(nested too deep\)$"):
            memory.import_jsonl(io.StringIO(deep))
        assert store.stats(Scope(user_id=ANY, agent_id=ANY)).get("message_count") == 0
    finally:
        store.close()


def test_a_transcript_message_of_no_unicode_is_named_by_the_openai_import(store_url):
    """An OpenAI transcript message without an ``id`` holding a lone surrogate failed in Python's own
    words ("'utf-8' codec can't encode ..."), naming no message, when its id was made from its content."""
    from fullrecall.transfer import openai

    store = open_store(store_url)
    text = json.dumps([{"role": "user", "content": "ok"}, {"role": "user", "content": "x\ud800"}])
    with pytest.raises(MessageFormatError, match="^message 1: 'content' is not valid"):
        openai.import_openai(store, Scope(user_id="ann"), io.StringIO(text))
    assert store.sessions(Scope(user_id=ANY, agent_id=ANY, session_id=ANY)) == []
    store.close()


def test_vectors_of_another_model_than_the_imports_embedder_are_refused_before_writing(store_url, default_embedder):
    """A conversation whose file vectors are another model's than the embedder that embeds its other messages: the
    import wrote it, then the store refused the embedder's vectors, and every rerun failed the same way, the rest of
    the file never written. Now it is refused, naming the line and conversation, before anything is written; the
    same file imports without embedding (its vectors kept), and a conversation already holding another model's
    vectors is refused the same way.
    """
    store = open_store(store_url)
    try:
        text = "\n".join([HEADER, GOOD, line(1, vector=_vector([1.0, 0.0])), line(2)])
        for _ in range(2):
            with pytest.raises(MessageFormatError, match=r"^line 3: conversation 'b': its vectors are 'm''s, and the "
                                                         r"import embeds the messages that came without one with "):
                jsonl.import_jsonl(store, Scope(), io.StringIO(text), embedder=default_embedder)
            assert store.stats(Scope(user_id="ann")).get("message_count") == 0
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(text))["written"] == 3
        more = "\n".join([HEADER, line(3)])
        with pytest.raises(MessageFormatError, match=r"^line 2: conversation 'b' holds vectors of 'm', and the import "
                                                     r"embeds the messages that came without one with "):
            jsonl.import_jsonl(store, Scope(), io.StringIO(more), embedder=default_embedder)
        assert store.count(Scope(user_id="ann", session_id="b")) == 2
        good = "\n".join([HEADER, line(3, "c")])
        assert jsonl.import_jsonl(store, Scope(), io.StringIO(good), embedder=default_embedder)["vectors"] == 1
    finally:
        store.close()
