"""A scope means the same on reads and writes: a memory without a user is the default owner's, nobody else's."""

from __future__ import annotations

from fullrecall import SyncConversationMemory
from fullrecall.stores import ANY, Scope, open_store


def _memory(store, user=None, agent=None):
    return SyncConversationMemory(store, "default", user_id=user, agent_id=agent, summarizer=lambda m, p: "summary",
                              max_history_turns=2, preserve_recent_messages=2)


def _talk(memory, secret):
    memory.add({"role": "user", "content": f"My secret word is {secret}."})
    memory.add({"role": "assistant", "content": "Noted."})
    for i in range(4):
        memory.add([{"role": "user", "content": f"filler question {i}"}, {"role": "assistant", "content": f"answer {i}"}])


def test_memory_without_a_user_sees_no_other_users_conversation(store_url):
    store = open_store(store_url)
    alice, bob, helper = _memory(store, "alice"), _memory(store, "bob"), _memory(store, "alice", "helper")
    _talk(alice, "aubergine")
    _talk(bob, "bramble")
    _talk(helper, "harpsichord")
    nobody = _memory(store)
    assert nobody.messages == []  # nobody else's window is loaded
    recalled = " ".join(m.text for m in nobody.recall("What is my secret word?").messages)
    assert not any(w in recalled for w in ("aubergine", "bramble", "harpsichord"))
    counts = nobody.forget()
    assert sum(n for k, n in counts.items() if k != "remaining") == 0  # deletes nothing of anybody else
    assert "aubergine" in " ".join(m.text for m in _memory(store, "alice").recall("secret word").messages)

    # What the default owner writes is its own, and an administrator's forget of bob leaves it alone.
    nobody = _memory(store)
    nobody.add({"role": "user", "content": "The default owner's note."})
    assert store.forget(Scope(user_id="bob", agent_id=ANY))["messages"] >= 1
    again = _memory(store)
    assert [m["content"] for m in again.messages] == ["The default owner's note."]
    assert _memory(store, "bob").messages == []
    # Alice's agents are separate owners: the helper agent never sees alice's own conversation.
    assert "aubergine" not in " ".join(m.text for m in _memory(store, "alice", "helper").recall("secret word").messages)
    store.close()
