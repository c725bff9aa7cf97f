"""SyncConversationMemory: the chat loop's durable memory."""

import pytest

from fullrecall import MessageFormatError, SyncConversationMemory


def make(url="sqlite:///:memory:", **kw):
    kw = {"summarizer": lambda m, p: "summary", "max_history_turns": 3, "preserve_recent_messages": 2, **kw}
    return SyncConversationMemory(url, "s1", **kw)


def test_resumes_window_and_archive_after_restart(tmp_path):
    url = f"sqlite:///{tmp_path}/m.db"
    memory = make(url)
    memory.add({"role": "user", "content": "My locker code is 3141."})
    memory.add({"role": "assistant", "content": "Noted."})
    for i in range(6):
        memory.add([{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}])
    again = make(url)
    assert again.messages == memory.messages and again.manager.removed_message_count == memory.manager.removed_message_count
    again.add({"role": "user", "content": "What is my locker code?"})
    enriched = again.model_input()[-1]["content"]
    assert "3141" in enriched and again.messages[-1]["content"] == "What is my locker code?"


def test_clear_archives_the_window_and_forget_deletes():
    memory = make()
    memory.add([{"role": "system", "content": "rules"}, {"role": "user", "content": "REF-77 is mine"}, {"role": "assistant", "content": "ok"}])
    memory.clear()
    assert memory.messages == [{"role": "system", "content": "rules"}]
    assert memory.manager.get_memory_usage_stats()["message_count"] == 2
    assert any("REF-77" in m.text for m in memory.recall("REF-77").messages)
    counts = memory.forget()
    assert counts.get("messages", 0) == 3 and memory.messages == []  # the pinned system message is in the log too


def test_bad_message_is_refused_before_anything_is_stored():
    memory = make()
    memory.add({"role": "user", "content": "hi"})
    with pytest.raises(MessageFormatError, match="message 0: 'role' is missing"):
        memory.add({"content": "no role"})
    with pytest.raises(MessageFormatError, match="message 0: 'content' must be a list"):
        memory.add({"role": "user", "content": [{"text": "converse shape"}]})
    assert memory.messages == [{"role": "user", "content": "hi"}]


def test_a_shortened_tool_result_stays_shortened_and_the_original_stays_stored(store_url):
    from fullrecall.window import SlidingWindowConversationManager

    def memory():
        return SyncConversationMemory(store_url, "s1", user_id="ann",
                                  manager=SlidingWindowConversationManager(window_size=10, max_tool_result_chars=200))

    big = "x" * 1000 + " TAIL-42"
    first = memory()
    first.add([
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "assistant", "content": "done"},
    ])
    first.reduce_context(RuntimeError("overflow"))
    shortened = first.messages[3]["content"]
    assert len(shortened) < 400 and "fullrecall cut" in shortened and shortened.endswith("TAIL-42")
    again = memory()  # a new process sees the window as the manager left it, the log keeps the original
    assert again.messages == first.messages and len(again.messages) == 5
    assert again.store.range(again.scope, 3, 3)[0].data["content"] == big
    again.add({"role": "user", "content": "thanks"})
    assert again.messages[3]["content"] == shortened and again.messages[-1] == {"role": "user", "content": "thanks"}


def test_archive_limits_never_evict_the_window_or_the_system_message(store_url):
    memory = make(store_url, max_num_archived_messages=3)
    memory.add({"role": "system", "content": "rules"})
    for i in range(10):
        memory.add([{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}])
    stats = memory.manager.get_memory_usage_stats()
    removed = memory.manager.removed_message_count
    assert stats["message_count"] == 3 and stats["evicted_count"] == removed - 3
    assert memory.messages[0] == {"role": "system", "content": "rules"}
    window = memory.messages[2:]  # after the system message and the summary
    assert window == [{"role": r, "content": f"{'question' if r == 'user' else 'answer'} {i}"}
                      for i in range(10) for r in ("user", "assistant")][removed:]


def test_a_window_saved_whole_by_an_earlier_version_joins_the_log(store_url):
    from fullrecall.archive import SemanticSummarizingConversationManager
    from fullrecall.stores import Scope, open_store

    # what SyncConversationMemory used to do: the manager on a list, the whole list saved as state
    store = open_store(store_url)
    manager = SemanticSummarizingConversationManager(store=store, session_id="s1", summarizer=lambda m, p: "summary",
                                                     max_history_turns=3, preserve_recent_messages=2)
    added = [{"role": "system", "content": "rules"}]
    window = list(added)
    for i in range(9):
        added.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
        window.append(added[-1])
        manager.apply_management(window)
    assert manager.removed_message_count > 0
    store.put_state(Scope(session_id="s1"), "window", {"messages": window, "manager": manager.get_state()})
    store.close()

    memory = make(store_url)
    assert memory.messages == window
    archived = memory.manager.archive.get(1, memory.manager.first_active_position - 1)
    assert [m.data for m in archived] + window[2:] == added[1:]
    assert [m.data for m in memory.store.range(memory.scope, 0, 10**9)] == added  # the log holds everything once
    memory.add({"role": "assistant", "content": "message 9"})
    assert memory.messages[-1] == {"role": "assistant", "content": "message 9"} and len(make(store_url).messages) > 2


def test_a_failing_removal_listener_does_not_fail_an_add_that_was_stored(store_url, caplog):
    memory = make(store_url)

    def broken(event):
        raise ConnectionError("audit log down")

    memory.manager.add_removal_listener(broken)
    for i in range(8):
        memory.add({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
    assert memory.manager.removed_message_count == 0 and "could not be managed" in caplog.text
    assert [m["content"] for m in memory.messages] == [f"message {i}" for i in range(8)]
    assert memory.store.count(memory.scope) == 8


def test_a_window_full_of_keyword_matches_does_not_hide_the_archived_one(store_url):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from concurrent_worker import HashEmbedder

    memory = make(store_url, max_history_turns=30, preserve_recent_messages=60, semantic_search_top_k=1,
                  message_context_radius=0, embedding_model=HashEmbedder())
    memory.add([{"role": "user", "content": "Invoice ZX-9917 is paid."}, {"role": "assistant", "content": "Noted."}])
    memory.add([{"role": ("user", "assistant")[i % 2], "content": f"filler {i} about invoices"} for i in range(70)])
    memory.add([{"role": ("user", "assistant")[i % 2], "content": f"ZX-9917 ZX-9917 item {i}"} for i in range(60)])
    assert 2 < memory.manager.first_active_position <= 72  # the invoice archived, the 60 matches in the window
    (hit,) = memory.recall("ZX-9917").hits
    assert hit.message.data["content"] == "Invoice ZX-9917 is paid." and hit.scores["lexical"] > 0


def test_the_archive_holds_what_left_the_window_never_the_window_or_the_system_message(store_url):
    memory = make(store_url, message_context_radius=3)
    memory.add({"role": "system", "content": "You answer questions about lockers."})
    for i in range(6):
        memory.add([{"role": "user", "content": f"locker question {i}"}, {"role": "assistant", "content": f"answer {i}"}])
    first = memory.manager.first_active_position
    archived = memory.manager.archive.get(0, 10**9)
    assert [m.position for m in archived] == list(range(1, first))
    window = memory.messages
    assert window[0]["role"] == "system" and window[1] == memory.manager.summary_message
    assert [m.data for m in archived] + window[2:] == [m.data for m in memory.store.range(memory.scope, 1, 10**9)]
    recalled = memory.recall("lockers locker questions").messages
    assert recalled and all(1 <= m.position < first for m in recalled)


def test_deleting_a_message_keeps_the_summary_a_summary(store_url):
    """Deleting a message after a summary turned the summary into an ordinary message of the log (to be summarized
    later as if a person had said it); it stays the window's summary."""
    memory = SyncConversationMemory(store_url, "s1", summarizer=lambda m, p: "Earlier: a chat.", max_history_turns=2,
                                    preserve_recent_messages=2)
    for i in range(3):
        memory.add([{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}])
    summary = memory.manager.summary_message
    assert summary is not None and memory.messages[0] == summary
    memory.delete(len(memory.messages) - 1)
    assert memory.manager.summary_message == summary and memory.messages[0] == summary
    assert "Earlier: a chat." not in [m.data.get("content") for m in memory.store.range(memory.scope, 0, 100)]
