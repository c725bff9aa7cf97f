"""A message's "id" is its idempotency key, and a forgotten conversation stays forgotten, on every backend."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fullrecall import MessageFormatError, SyncConversationMemory
from fullrecall.archive.archive import archived_summaries
from fullrecall.stores import Scope, open_store

sys.path.insert(0, str(Path(__file__).parent))
from concurrent_worker import HashEmbedder


def make(url, **kw):
    kw.setdefault("summarizer", lambda msgs, prev: f"summary: {prev or ''} " + " | ".join(m.text for m in msgs))
    kw.setdefault("preserve_recent_messages", 2)
    return SyncConversationMemory(url, "s1", user_id="ann", max_history_turns=2, embedding_model=HashEmbedder(), **kw)


def contents(memory):
    """Every message of the conversation once: the archive before the window, then the window's originals."""
    window = memory.messages
    if memory.manager.summary_message is not None:
        window = window[1:]
    archived = memory.manager.archive.get(0, memory.manager.first_active_position - 1)
    return [m.data["content"] for m in archived] + [m["content"] for m in window]


def test_a_retried_add_stores_nothing_new(store_url):
    memory = make(store_url)
    memory.add({"role": "user", "content": "pay 10 to Bob", "id": "req-1"})
    memory.add({"role": "user", "content": "pay 10 to Bob", "id": "req-1"})  # the client retries
    assert contents(memory) == ["pay 10 to Bob"]
    # a retry from a restarted client, in a batch with a new message, after the first left the window
    for i in range(6):
        memory.add({"role": "assistant" if i % 2 == 0 else "user", "content": f"turn {i}", "id": f"t{i}"})
    assert memory.manager.removed_message_count > 0
    retry = make(store_url)
    retry.add([{"role": "user", "content": "pay 10 to Bob", "id": "req-1"},
               {"role": "assistant", "content": "done", "id": 7}])
    retry.add({"role": "assistant", "content": "done", "id": 7})
    assert contents(retry) == ["pay 10 to Bob"] + [f"turn {i}" for i in range(6)] + ["done"]
    assert retry.store.count(retry.scope) == 8
    # messages without an id are distinct messages, even when their text repeats
    retry.add({"role": "user", "content": "again"})
    retry.add({"role": "user", "content": "again"})
    assert contents(retry)[-2:] == ["again", "again"]


def test_a_bad_id_is_refused_naming_the_message_and_nothing_is_written(store_url):
    memory = make(store_url)
    for bad in (None, "", " ", 1.5, True, ["x"]):
        with pytest.raises(MessageFormatError, match=r"message 1: 'id' must be a non-empty string or an integer"):
            memory.add([{"role": "user", "content": "fine", "id": "a"},
                        {"role": "assistant", "content": "x", "id": bad}])
    assert memory.store.count(memory.scope) == 0 and memory.messages == []


@given(batches=st.lists(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e", "f", None]), st.booleans()),
                                 min_size=1, max_size=3), min_size=1, max_size=8))
def test_each_id_is_stored_once_in_first_seen_order(batches):
    memory = make("sqlite:///:memory:", summarizer=lambda msgs, prev: "s")
    expected, n = [], 0
    for batch in batches:
        messages = []
        for key, from_user in batch:
            n += 1
            message = {"role": "user" if from_user else "assistant", "content": f"{key or 'anon'}-{n}"}
            if key is not None:
                message["id"] = key
            messages.append(message)
        memory.add(messages)
        seen = set()
        for message in messages:
            key = message.get("id")
            if key is None or (key not in seen and key not in {e.split("-")[0] for e in expected}):
                expected.append(message["content"])
            seen.add(key)
    assert contents(memory) == expected


def secrets_left(url, scope, memory):
    store = open_store(url)
    try:
        texts = [m.text for m in store.range(scope, 0, 10**9)]
        hits = store.search_text(scope, ["4711"], 10)
        summaries = archived_summaries(store, scope)
        window = store.get_state(scope, "window") or {}
    finally:
        store.close()
    found = [t for t in texts if "4711" in t] + [str(hit[0]) for hit in hits]
    found += ["summaries"] if "4711" in str(summaries) else []
    found += ["window state"] if "4711" in str(window) else []
    found += ["window"] if "4711" in str(memory.messages) else []
    found += ["recall"] if any("4711" in m.text for m in memory.recall("locker code 4711").messages) else []
    return found


def fill(memory):
    memory.add({"role": "user", "content": "My locker code is 4711."})
    memory.add({"role": "assistant", "content": "Noted."})
    for i in range(4):
        memory.add([{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}])
    assert memory.manager.summary_message is not None and "4711" in memory.manager.summary_message["content"]


def test_forget_then_add_writes_nothing_back(store_url):
    memory = make(store_url)
    fill(memory)
    assert secrets_left(store_url, memory.scope, memory)  # the check can see the secret
    memory.forget()
    memory.add({"role": "user", "content": "a new start"})
    assert secrets_left(store_url, memory.scope, memory) == []
    for i in range(6):
        memory.add({"role": "assistant" if i % 2 == 0 else "user", "content": f"new {i}"})
    assert secrets_left(store_url, memory.scope, memory) == []
    assert contents(make(store_url)) == ["a new start"] + [f"new {i}" for i in range(6)]


def test_an_administrators_forget_is_not_undone_by_a_live_memory(store_url):
    memory = make(store_url)
    fill(memory)
    admin = open_store(store_url)
    counts = admin.forget(Scope(user_id="ann"))
    admin.close()
    assert counts["messages"] == 10
    memory.add({"role": "user", "content": "hello again"})
    memory.add({"role": "assistant", "content": "hi"})
    assert secrets_left(store_url, memory.scope, memory) == []
    assert contents(memory) == ["hello again", "hi"] and memory.store.count(memory.scope) == 2
    assert memory.manager.get_memory_usage_stats()["summary_count"] == 0


OPS = st.lists(st.tuples(st.sampled_from(["add", "add", "add", "clear", "reduce", "forget", "reopen"]), st.integers(0, 1),
                         st.lists(st.sampled_from(["a", "b", "c", "d", None, None]), min_size=1, max_size=3)),
               min_size=1, max_size=25)


@given(ops=OPS)
def test_two_live_objects_always_show_the_whole_conversation_once(ops):
    """Any interleaving of adds (retried ids included), clears, overflows, forgets and reopens by two objects:
    both see exactly the messages added since the last forget, once each, in the order they were added."""
    from fullrecall import ContextWindowOverflowError

    store = open_store("sqlite:///:memory:")
    objects = [make(store, summarizer=lambda msgs, prev: "s", preserve_recent_messages=1) for _ in range(2)]
    expected: list[str] = []
    n = 0
    for op, who, keys in ops:
        memory = objects[who]
        if op == "add":
            batch = []
            for key in keys:
                n += 1
                message = {"role": "user" if n % 2 else "assistant", "content": f"{key or 'anon'}-{n}"}
                batch.append(message if key is None else {**message, "id": key})
            memory.add(batch)
            known = {e.split("-")[0] for e in expected}
            for message in batch:
                if "id" not in message or message["id"] not in known:
                    expected.append(message["content"])
                    known.add(message.get("id"))
        elif op == "clear":
            memory.clear()
            assert memory.messages == []
        elif op == "reduce":
            try:
                memory.reduce_context(RuntimeError("overflow"))
            except ContextWindowOverflowError:
                pass
        elif op == "forget":
            memory.forget()
            expected = []
        else:
            objects[who] = make(store, summarizer=lambda msgs, prev: "s", preserve_recent_messages=1)
        for each in objects:
            assert contents(each) == expected
