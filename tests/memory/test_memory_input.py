"""What SyncConversationMemory.add accepts, on every backend: odd and huge text kept verbatim, bad input refused
with an error naming the message and field, and nothing of a refused batch stored."""

from __future__ import annotations

import datetime
import math
import uuid

import pytest

from fullrecall import InvalidInput, MessageFormatError, SyncConversationMemory
from fullrecall.stores import open_store
from fullrecall.stores._validate import MAX_MESSAGE_BYTES


def make(url, embedder, session=None):
    return SyncConversationMemory(url, session or uuid.uuid4().hex, summarizer=lambda m, p: "summary", max_history_turns=3,
                              preserve_recent_messages=2, embedding_model=embedder)


def _deep(levels):
    v = "bottom"
    for _ in range(levels):
        v = [v]
    return v


def test_nul_and_huge_messages_are_archived_and_the_conversation_goes_on(store_url, default_embedder):
    memory = make(store_url, default_embedder)
    nul = {"role": "user", "content": "my PIN is\x00 4711, keep the \x00 as is"}
    huge = {"role": "assistant", "content": " ".join(f"w{n:07d}" for n in range(4 * 2**20 // 9))}  # 4 MiB
    memory.add(nul)
    memory.add(huge)
    for i in range(30):  # PostgreSQL used to refuse 27 of these once a NUL or 4 MiB message was in the window
        memory.add({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"})
    assert len(memory.messages) < 10  # the window kept its budget: everything older went to the archive
    archived = [m.data for m in memory.manager.archive.get(0, 1)]
    assert archived == [nul, huge]
    assert memory.manager.get_memory_usage_stats()["unindexed_count"] == 0  # embedded too
    assert any(m.data == nul for m in memory.recall("PIN 4711").messages)


BAD = [
    ({"role": ["user"], "content": "x"}, "message 1: 'role' must be a string, got list"),
    ({"role": "user", "content": "x", "metadata": {"score": math.nan}},
     "message 1: 'metadata.score' is nan; JSON has no NaN or infinity"),
    ({"role": "user", "content": "x", "metadata": {"when": datetime.date(2026, 1, 1)}},
     "message 1: 'metadata.when' is a date, not a JSON value"),
    ({"role": "user", "content": "x", "extra": {1: "int key"}},
     "message 1: 'extra' has a key 1 of type int; JSON keys are strings"),
    ({"role": "user", "content": "bad \ud800"},
     "message 1: 'content' is not valid UTF-8 (unpaired surrogate at character 4)"),
    ({"role": "user", "content": "x" * (MAX_MESSAGE_BYTES + 1)},
     "message 1: 'content' is 33,554,433 bytes, over the 33,554,432-byte limit for one message"),
    ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"deep": _deep(5000)}}}]},
     "message 1: 'tool_calls[0].function.arguments.deep" + "[0]" * 7 + "...' is nested more than 64 levels deep"),
]


@pytest.mark.parametrize("bad,error", BAD, ids=[e[11:50] for _, e in BAD])
def test_bad_message_is_refused_by_name_and_nothing_is_stored(bad, error, default_embedder, tmp_path):
    url = f"sqlite:///{tmp_path}/m.db"
    memory = make(url, default_embedder, "s")
    memory.add([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    before = memory.messages
    with pytest.raises(MessageFormatError) as info:
        memory.add([{"role": "user", "content": "fine"}, bad, {"role": "user", "content": "also fine"}])
    assert str(info.value) == error and isinstance(info.value, InvalidInput) and isinstance(info.value, ValueError)
    assert memory.messages == before
    assert make(url, default_embedder, "s").messages == before  # the stored window did not change either
    memory.add({"role": "user", "content": "next"})  # and the conversation goes on
    assert memory.messages[-1] == {"role": "user", "content": "next"}


def test_the_same_refusal_on_every_backend(store_url, default_embedder):
    store = open_store(store_url)
    try:
        memory = make(store, default_embedder)
        for bad, error in BAD[:5]:
            with pytest.raises(MessageFormatError) as info:
                memory.add([{"role": "user", "content": "fine"}, bad])
            assert str(info.value) == error
        assert memory.messages == [] and store.get_state(memory.scope, "window") is None
    finally:
        store.close()


@pytest.mark.parametrize("damaged", [{"manager": 5}, {"version": "x"}, {"replaced": [1]},
                                     {"manager": {"removed_message_count": "x"}},
                                     {"manager": {"removed_message_count": 10**30}},
                                     {"manager": {"summary_message": {}}},
                                     {"replaced": {"0": {"role": "user", "content": 5}}}])
def test_a_damaged_saved_window_is_named_not_an_attribute_error(store_url, damaged):
    """A window state no ``SyncConversationMemory`` wrote (a hand-made file imported by an older version) made
    every read of the window fail with AttributeError or TypeError; now InvalidInput names the conversation and field.
    """
    from fullrecall.stores import Scope, StoredMessage

    store = open_store(store_url)
    try:
        own = Scope(user_id="ann", session_id="c1")
        store.append(own, [StoredMessage(id="m0", role="user", text="hi", data={"role": "user", "content": "hi"})])
        store.put_state(own, "window", damaged)
        with pytest.raises(InvalidInput, match=r"^conversation 'c1': the saved window state is damaged: 'window\."):
            SyncConversationMemory(store, "c1", user_id="ann")
    finally:
        store.close()


def test_a_window_state_of_another_manager_is_named_not_a_value_error(store_url):
    """A saved window state another manager wrote (imported, or the conversation opened with another manager than
    before) failed every use of the conversation with a raw ValueError; now InvalidInput names the conversation, the
    field and both managers, and the state is left as it was."""
    from fullrecall.stores import Scope, StoredMessage

    store = open_store(store_url)
    try:
        own = Scope(user_id="ann", session_id="c1")
        store.append(own, [StoredMessage(id="m0", role="user", text="hi", data={"role": "user", "content": "hi"})])
        saved = {"manager": {"__name__": "SlidingWindowConversationManager", "removed_message_count": 0}, "version": 1}
        store.put_state(own, "window", saved)
        with pytest.raises(InvalidInput, match=r"^conversation 'c1': the saved window state belongs to "
                                               r"SlidingWindowConversationManager, not "
                                               r"SemanticSummarizingConversationManager \('window.manager.__name__'\)"):
            SyncConversationMemory(store, "c1", user_id="ann")
        assert store.get_state(own, "window") == saved
    finally:
        store.close()
