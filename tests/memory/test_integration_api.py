"""The synchronous memory's API for integrations that keep another framework's window (the LangGraph window uses
it, and only it): ``add(keys=)``, ``leave``, ``window_rows``, ``logged`` and ``log_mark``, on every backend."""

from __future__ import annotations

import pytest

from fullrecall import SlidingWindowConversationManager, SyncConversationMemory
from fullrecall.errors import InvalidInput


@pytest.fixture
def memory():
    """``memory(url)``: a memory of one conversation, opened from its URL (each one closed after the test)."""
    opened: list[SyncConversationMemory] = []

    def open_memory(url: str) -> SyncConversationMemory:
        opened.append(SyncConversationMemory(url, "api", manager=SlidingWindowConversationManager(window_size=10)))
        return opened[-1]

    yield open_memory
    for mem in opened:
        mem.close()


def said(n: int, start: int = 0) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(start, start + n)]


def test_add_with_keys_records_each_message_under_its_key_once(store_url, memory) -> None:
    mem = memory(store_url)
    mem.add(said(2), keys=["lc-1", None])
    mem.add(said(1), keys=["lc-1"])  # a retry under the same key stores nothing new
    assert len(mem.messages) == 2 and mem.logged(["lc-1", "lc-2", "nope"]) == {"lc-1"}
    assert [row.id for row in mem.window_rows()][0] == "lc-1"
    with pytest.raises(InvalidInput, match="2 keys for 1 messages"):
        mem.add(said(1, 5), keys=["a", "b"])
    with pytest.raises(InvalidInput, match="not one string"):
        mem.add(said(1, 5), keys="a")
    with pytest.raises(InvalidInput, match="message 1: key"):
        mem.add(said(2, 5), keys=["fine", "bad\x00key"])
    assert len(mem.messages) == 2  # nothing of a refused call was written


def test_leave_moves_messages_to_the_archive_and_refuses_what_is_not_there(store_url, memory) -> None:
    mem = memory(store_url)
    mem.add([{"role": "system", "content": "rules"}, *said(4)])
    with pytest.raises(IndexError, match=r"leave: no message at \[9, True\]"):
        mem.leave([1, 9, True])
    assert len(mem.messages) == 5  # nothing changed
    mem.leave([0, 2])  # the pinned system message stays; message 1 leaves for the archive
    assert [m["content"] for m in mem.messages] == ["rules", "message 0", "message 2", "message 3"]
    assert "message 1" in [m.data["content"] for m in mem.store.range(mem.scope, 0, 100)]  # kept, not deleted


def test_log_mark_moves_when_messages_may_have_left_the_log(store_url, memory) -> None:
    mem = memory(store_url)
    mem.add(said(3))
    mark = mem.log_mark
    mem.add(said(1, 3))
    assert memory(store_url).log_mark == mark  # an append leaves what is logged logged
    mem.delete(0)
    assert mem.log_mark != mark
    mark = mem.log_mark
    memory(store_url).forget()  # by another object, as another process would
    mem.add(said(3))
    assert mem.log_mark != mark
