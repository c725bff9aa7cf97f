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


def summarized(store_url, **kw):
    """Conversation ``s1`` of user ``u``, its window two turns besides two recent messages, the rest summarized as
    "Earlier: a chat."."""
    return SyncConversationMemory(store_url, "s1", user_id="u", summarizer=lambda m, p: "Earlier: a chat.",
                                  max_history_turns=2, preserve_recent_messages=2, **kw)


def _pin_first_managers(on_remove=None):
    from fullrecall.window import SlidingWindowConversationManager, SummarizingConversationManager

    return {
        "summarizing": lambda: SummarizingConversationManager(summarizer=lambda m, p: "Earlier: weather talk.",
                                                              pin_first=1, max_history_turns=2,
                                                              preserve_recent_messages=2, on_remove=on_remove),
        "sliding": lambda: SlidingWindowConversationManager(window_size=3, pin_first=1, on_remove=on_remove),
    }


@pytest.mark.parametrize("kind", ["summarizing", "sliding", "default"])
@pytest.mark.parametrize("system", [False, True])
def test_pin_first_keeps_the_pinned_message_at_the_front_as_the_manager_does(store_url, kind, system):
    """With ``pin_first`` the window lost the pinned first message and showed the summary twice (the window was
    rebuilt from the log without the messages the manager keeps at its front, then one of them replaced by the
    summary); a trimmed window showed the pinned message in place of a later one, which was neither in the window
    nor archived. The memory's window is the manager's on a plain list, after a restart too, and the archive holds
    exactly what left it."""
    from fullrecall import ConversationMemory

    opening = [{"role": "system", "content": "rules", "id": "s"}] if system else []
    said = opening + [{"role": ("user", "assistant")[i % 2], "content": f"message {i} passport ZX{i}", "id": f"m{i}"}
                      for i in range(9)]
    if kind == "default":
        factory = _pin_first_managers()["summarizing"]
        options = {"summarizer": lambda m, p: "Earlier: weather talk.", "pin_first": 1, "max_history_turns": 2,
                   "preserve_recent_messages": 2}
    else:
        factory = _pin_first_managers(on_remove=lambda event: reported.extend(event.messages))[kind]
        options = {}
    reported: list = []  # what the memory's manager said left the window, at which place

    def memory():
        return SyncConversationMemory(store_url, "s1", user_id="u", **({"manager": factory()} if kind != "default"
                                                                         else options))

    mem, plain, manager = memory(), [], _pin_first_managers()["sliding" if kind == "sliding" else "summarizing"]()
    for message in said:
        mem.add(message)
        plain.append(dict(message))
        manager.apply_management(plain)
    pinned = said[len(opening)]
    assert manager.removed_message_count > 0 and plain[len(opening)] == pinned  # the premise: pinned, some left
    assert mem.messages == plain
    assert mem.model_input()[:len(opening) + 1] == opening + [pinned]
    again = memory()
    assert again.messages == plain
    reopened = ConversationMemory(store_url, "s1", user_id="u", **({"manager": factory()} if kind != "default"
                                                                   else options))
    assert reopened.messages == plain
    again.add({"role": "user", "content": "one more", "id": "m9"})
    plain.append({"role": "user", "content": "one more", "id": "m9"})
    manager.apply_management(plain)
    assert again.messages == plain and memory().messages == plain
    summary = getattr(manager, "summary_message", None)
    assert sum(m == summary for m in again.messages) == (summary is not None)
    assert [summary if row is None else row.data for row in again.window_rows()] == plain  # each from its own row
    shown = [m for m in plain if m != summary]
    left = [m for m in said + [plain[-1]] if m not in shown]
    archive = getattr(again.manager, "archive", None)
    if archive is not None:
        assert [m.data for m in archive.get(0, 10**9)] == left
    else:
        stored = {m.position: m.data for m in again.store.range(again.scope, 0, 10**9)}
        assert reported and all(stored[m.position] == m.raw for m in reported)
        assert sorted(stored[m.position]["id"] for m in reported) == sorted(m["id"] for m in left)
    for m in (mem, again, reopened):
        m.close()


@pytest.mark.parametrize("how", ["delete", "clear_by_id"])
def test_a_deleted_pin_first_message_leaves_the_window_and_no_place_behind(store_url, how):
    """Deleting the message ``pin_first`` keeps at the window's front (from the window, or by id from the store)
    takes it out of the window and the saved state, the summary stays, and every other message keeps its place."""
    import json

    from fullrecall import PersistentMemory

    def memory():
        return summarized(store_url, pin_first=1)

    mem = memory()
    mem.add({"role": "system", "content": "rules", "id": "s"})
    for i in range(7):
        mem.add({"role": ("user", "assistant")[i % 2], "content": f"message {i} passport ZX{i}", "id": f"m{i}"})
    summary = mem.manager.summary_message
    assert mem.messages[:3] == [{"role": "system", "content": "rules", "id": "s"},
                                {"role": "user", "content": "message 0 passport ZX0", "id": "m0"}, summary]
    rest = mem.messages[3:]
    if how == "delete":
        mem.delete(1)
    else:
        PersistentMemory(user_id="u", store=mem.store, extract_facts=False).clear(ids=["m0"], session_id="s1")
    again = memory()
    for m in (mem, again):
        assert m.messages == [{"role": "system", "content": "rules", "id": "s"}, summary, *rest]
        assert [summary if row is None else row.data for row in m.window_rows()] == m.messages
    assert "ZX0" not in json.dumps(mem.store.get_state(mem.scope, "window"))
    again.add({"role": "user", "content": "one more", "id": "m7"})
    assert [m.data["id"] for m in again.manager.archive.get(0, 10**9)][:2] == ["m1", "m2"]
    window = again.messages
    summary = again.manager.summary_message
    assert [summary if row is None else row.data for row in again.window_rows()] == window
    mem.close()
    again.close()


@pytest.mark.parametrize("doomed", [1, 2])
def test_deleting_one_of_several_pin_first_messages_leaves_none_of_its_words(store_url, doomed):
    """With ``pin_first=2``, deleting the first pinned message left its words in the window at the other's place
    (the saved 'replaced' paired the remaining pinned place with the window as it was before the delete), and the
    other pinned message was added again after the summary. The window is now the rest, in order, after a reopen
    too, and the saved state holds none of the deleted words."""
    import json

    def memory():
        return summarized(store_url, pin_first=2)

    mem = memory()
    mem.add({"role": "system", "content": "rules", "id": "s"})
    mem.add({"role": "user", "content": "my card is 4111-SECRET", "id": "m0"})
    mem.add({"role": "assistant", "content": "pinned answer", "id": "m1"})
    for i in range(2, 12):
        mem.add({"role": ("user", "assistant")[i % 2], "content": f"turn {i}", "id": f"m{i}"})
    before = mem.messages
    assert [m.get("content") for m in before[1:4]] == ["my card is 4111-SECRET", "pinned answer", "Earlier: a chat."]
    gone = before[doomed]
    mem.delete(doomed)
    expected = [m for m in before if m != gone]
    for m in (mem, memory()):
        assert m.messages == expected
        assert [m.manager.summary_message if row is None else row.data for row in m.window_rows()] == expected
    assert gone["content"] not in json.dumps(mem.store.get_state(mem.scope, "window"))
    again = memory()
    again.add({"role": "user", "content": "one more", "id": "m12"})
    assert gone not in again.messages and again.messages[1] == expected[1]
    mem.close()
    again.close()


def test_a_message_pinned_in_the_middle_is_never_recalled_while_in_the_window(store_url):
    """A Converse message flagged pinned after others (kept in the window at its own place, past the first archived
    one) was returned by ``recall`` and ``archive.get``, counted as archived and deleted by the archive's limit while
    in the window: only a leading run of pinned places was taken as outside the archive. Recall never returns a
    message still in the window, and a limit evicts only archived ones."""
    def memory():
        return summarized(store_url, max_num_archived_messages=3)

    mem = memory()
    for i in range(12):
        text = "the launch code is PELICAN" if i == 4 else f"turn {i} zebra"
        message = {"role": ("user", "assistant")[i % 2], "content": [{"text": text}]}
        if i == 4:
            message["metadata"] = {"custom": {"pinned": True}}
        mem.add(message)
    assert any("PELICAN" in str(m) for m in mem.messages)  # the premise: pinned, in the window, others archived
    archive = mem.manager.archive
    assert mem.manager.pinned_front == (4,)
    assert all("PELICAN" not in str(m.data) for m in archive.get(0, 10**9))
    assert all("PELICAN" not in str(m.data) for r in mem.recall("launch code pelican").ranges for m in r.messages)
    assert "PELICAN" not in str(mem.model_input()[-1])
    stats = archive.get_memory_usage_stats()
    assert stats["message_count"] == len(archive.get(0, 10**9)) <= 3  # the limit evicted archived ones only
    assert any("PELICAN" in str(m) for m in memory().messages)
    assert any("PELICAN" in str(m.data) for m in mem.store.range(mem.scope, 4, 4))
    mem.close()


@pytest.mark.parametrize("kind", ["summarizing", "sliding"])
def test_pin_first_applied_by_a_reduction_that_changed_nothing_is_saved(store_url, kind):
    """A reduction that pins the first messages but cannot cut anything (every message in reach pinned) changed
    the manager's state, not the window: it was not saved, so the next read forgot the pins (the memory's window
    then summarized a message the manager keeps, or ``clear`` dropped the pinned ones). The memory's window is the
    same manager's on a plain list."""
    from fullrecall.window import SlidingWindowConversationManager, SummarizingConversationManager

    def manager():
        if kind == "sliding":
            return SlidingWindowConversationManager(window_size=4, pin_first=2)
        return SummarizingConversationManager(summarizer=lambda m, p: "Earlier: a chat.", pin_first=3,
                                              max_history_turns=2, preserve_recent_messages=2)

    mem, plain, window = SyncConversationMemory(store_url, "s1", user_id="u", manager=manager()), manager(), []
    said = ([{"role": "system", "content": "rules", "id": "s"}] if kind == "sliding" else []) + \
        [{"role": ("user", "assistant")[i % 2], "content": f"message {i}", "id": f"m{i}"} for i in range(6)]
    for message in said:
        mem.add(dict(message))
        window.append(dict(message))
        plain.apply_management(window)
        assert mem.messages == window
    mem.clear()
    plain.clear(window)
    assert mem.messages == window and len(window) > 1
    again = SyncConversationMemory(store_url, "s1", user_id="u", manager=manager())
    assert again.messages == window
    mem.close()
    again.close()


def test_truncate_to_size_keeps_the_pin_first_messages_besides_the_newest(store_url):
    """``truncate_to_size(n)`` keeps what ``clear`` keeps (a pinned system message and the messages ``pin_first``
    pins) besides the newest ``n``: ``truncate_to_size(0)`` is ``clear()``. The pinned messages counted among the
    ``n``, so a window of ``n`` messages besides them was cleared and its messages added to the log again."""
    def memory():
        return summarized(store_url, pin_first=2)

    mem = memory()
    mem.add({"role": "system", "content": "rules", "id": "s"})
    for i in range(12):
        mem.add({"role": ("user", "assistant")[i % 2], "content": f"turn {i}", "id": f"m{i}"})
    window, logged = mem.messages, mem.store.count(mem.scope)
    assert [m["content"] for m in window[:4]] == ["rules", "turn 0", "turn 1", "Earlier: a chat."]
    rest = window[3:]
    mem.truncate_to_size(len(rest))  # as small already: nothing archived or added again
    assert mem.messages == window and mem.store.count(mem.scope) == logged
    mem.truncate_to_size(2)
    assert mem.messages == window[:3] + window[-2:] == memory().messages
    mem.truncate_to_size(0)
    assert mem.messages == window[:3] == memory().messages
    mem.clear()
    assert mem.messages == window[:3]
    mem.close()


def _converse(i, text=None, pinned=False):
    """Converse message ``w{i}`` (user first), flagged pinned as the Strands SDK's pin API flags one if ``pinned``."""
    message = {"role": ("user", "assistant")[i % 2], "content": [{"text": text or f"w{i}"}]}
    if pinned:
        message["metadata"] = {"custom": {"pinned": True}}
    return message


def test_pin_first_on_converse_messages_keeps_them_at_the_front_as_the_manager_does(store_url):
    """``pin_first`` pins Converse messages with the SDK's flag, written into the message: in the memory that was the
    row's own data, so the saved window held no flagged copy and the next read lost the pins (the pinned messages
    were summarized at the next reduction, and ``clear`` left nothing). The memory's window is the same manager's on
    a plain list at every step, after ``clear`` and a reopen too, and the log keeps each message as it was added."""
    from fullrecall.window import SummarizingConversationManager

    def memory():
        return summarized(store_url, pin_first=2)

    mem, plain = memory(), []
    manager = SummarizingConversationManager(summarizer=lambda m, p: "Earlier: a chat.", max_history_turns=2,
                                             preserve_recent_messages=2, pin_first=2)
    for i in range(14):
        mem.add(_converse(i))
        plain.append(_converse(i))
        manager.apply_management(plain)
        assert mem.messages == plain, i
    assert [m["content"][0]["text"] for m in plain[:2]] == ["w0", "w1"] and manager.removed_message_count > 2
    assert memory().messages == plain
    mem.clear()
    manager.clear(plain)
    assert mem.messages == plain == memory().messages and len(plain) == 2
    assert [row.data for row in mem.store.range(mem.scope, 0, 1)] == [_converse(0), _converse(1)]
    mem.close()


def _flagged_window(store_url, session, pin_first=None):
    """Session ``session``: Converse messages w0..w7, w6 and w7 flagged pinned; with ``pin_first`` a turn is
    summarized away in the middle (the window's front then holds pinned messages before the summary), without it a
    plain window of four, w2 flagged."""
    kw = {"pin_first": pin_first} if pin_first else {}
    mem = SyncConversationMemory(store_url, session, user_id="u", summarizer=lambda m, p: "Earlier: a chat.",
                                 max_history_turns=2, preserve_recent_messages=2, **kw)
    if not pin_first:
        mem.add([_converse(i, pinned=i == 2) for i in range(4)])
        return mem
    mem.add([_converse(i) for i in range(3)])
    mem.truncate_to_size(1)
    for i in range(3, 8):
        mem.add(_converse(i, pinned=i >= 6))
    return mem


def _row_words(mem):
    """The words of the stored row behind each window message (the summary's own): each message is its own row's."""
    summary = mem.manager.summary_message
    return [(summary if row is None else row.data)["content"] for row in mem.window_rows()]


@pytest.mark.parametrize("pin_first", [None, 2])
def test_delete_keeps_the_rest_of_a_window_with_pinned_messages_in_order(store_url, pin_first):
    """The rest of the window stays, in order, whichever message is deleted: a Converse message flagged pinned
    after others (w2 of w0..w3: ``delete(0)`` gave w2, w1, w3), or the ``pin_first`` front before a summary and
    flagged messages after it, was kept at the window's front by the rebuild's clear, and the other messages were
    added back after it. After a reopen too."""
    probe = _flagged_window(store_url, "probe", pin_first)
    before = probe.messages
    assert any("metadata" in m for m in before[1:])  # the premise: a pinned message after an unpinned one
    # a message the window holds as a copy (truncate_to_size added it again) has its original archived: deleted
    # with it, and the window's summary may hold its words, so the summary goes too
    archived = {i for i, row in enumerate(probe.window_rows()) if row is not None and "@" in row.id}
    for index in range(len(before)):
        mem = _flagged_window(store_url, f"s{index}", pin_first)
        assert mem.messages == before
        mem.delete(index)
        expected = [m for i, m in enumerate(before) if i != index and not (
            index in archived and m == probe.manager.summary_message)]
        again = SyncConversationMemory(store_url, f"s{index}", user_id="u", summarizer=lambda m, p: "Earlier: a chat.",
                                       max_history_turns=2, preserve_recent_messages=2,
                                       **({"pin_first": pin_first} if pin_first else {}))
        assert mem.messages == expected == again.messages, index
        assert _row_words(mem) == [m["content"] for m in expected], index
        mem.close()
        again.close()
    probe.close()


@pytest.mark.parametrize("pin_first", [None, 2])
def test_truncate_and_leave_keep_a_window_with_pinned_messages_in_order(store_url, pin_first):
    """``truncate_to_size`` and ``leave`` rebuild the window as ``delete`` does: they reordered it the same way when a
    flagged message came after an unpinned one that stays. ``truncate_to_size(n)`` keeps, in order, the pinned
    messages (those ``clear`` keeps) and the newest ``n``; ``leave`` keeps a pinned message it names, as ``clear``
    does, and every other message in order."""
    before = _flagged_window(store_url, "probe", pin_first).messages
    front = 2 if pin_first else 0
    pinned = [i for i, m in enumerate(before) if i < front or "metadata" in m]
    for n in range(len(before) - front):
        mem = _flagged_window(store_url, f"t{n}", pin_first)
        mem.truncate_to_size(n)
        newest = list(range(len(before) - n, len(before))) if n else []
        assert mem.messages == [before[i] for i in sorted(set(pinned) | set(newest))], n
        assert _row_words(mem) == [m["content"] for m in mem.messages], n
        mem.close()
    for index in range(front, len(before)):
        mem = _flagged_window(store_url, f"l{index}", pin_first)
        mem.leave([index])
        assert mem.messages == [m for i, m in enumerate(before) if i != index or i in pinned], index
        assert _row_words(mem) == [m["content"] for m in mem.messages], index
        mem.close()


def _opened_midway(store_url, opening, pin_first, store=None):
    """A conversation whose window a system message opens after ``clear()``, though position 0 is no system message:
    one that began with a user and an assistant message (``opening="user"``), or whose system message was deleted
    (``"deleted"``). The memory (the default manager, summarizing), the same manager's settings, and the prompt.
    """
    options = {"summarizer": lambda msgs, prev: f"SUMMARY({','.join(m.text for m in msgs)})",
               "max_history_turns": 2, "preserve_recent_messages": 2, **({"pin_first": pin_first} if pin_first else {})}
    mem = SyncConversationMemory(store or store_url, "s1", user_id="u", **options)
    if opening == "user":
        mem.add([{"role": "user", "content": "hello zebra", "id": "h"},
                 {"role": "assistant", "content": "hi", "id": "hh"}])
    else:
        mem.add([{"role": "system", "content": "rules alpha", "id": "s0"}, {"role": "user", "content": "hello zebra",
                                                                           "id": "h"}])
        mem.delete(0)
    mem.clear()
    return mem, options, {"role": "system", "content": "You are terse.", "id": "sys"}


def _plain_after_reset(options, prompt, said):
    """The window the same manager keeps on a plain list that starts with ``prompt``, after each of ``said``."""
    from fullrecall.window import SummarizingConversationManager

    manager, plain, windows = SummarizingConversationManager(**options), [dict(prompt)], []
    for message in said:
        plain.append(dict(message))
        manager.apply_management(plain)
        windows.append([dict(m) for m in plain])
    return windows


@pytest.mark.parametrize("opening", ["user", "deleted"])
@pytest.mark.parametrize("pin_first", [None, 2])
def test_a_system_message_opening_the_window_after_clear_is_pinned_as_the_manager_pins_it(store_url, opening,
                                                                                          pin_first):
    """MassGen's ``reset_chat`` with a new prompt on an agent that had none (or whose prompt was deleted): after
    ``clear()`` the system message opened the window but was not at position 0, so the manager pinned it and the
    memory did not: the summary showed twice, a message was lost from the window (``pin_first``) or the prompt
    went, and a prompt deleted by ``delete(0)`` came back. It now takes position 0 (the message there goes to the
    archive, recallable once): the window is the manager's on a plain list, after a restart too."""
    mem, options, prompt = _opened_midway(store_url, opening, pin_first)

    def rows_of(content):
        return [row for row in mem.store.range(mem.scope, 0, 10**6) if row.data.get("content") == content]

    def recalled():
        return [m.data["content"] for m in mem.recall("hello zebra").messages].count("hello zebra")

    before, found = len(rows_of("hello zebra")), recalled()  # a delete's rebuild added the user message again
    assert found == (1 if opening == "user" else 2)
    mem.add(prompt)
    said = [{"role": ("user", "assistant")[i % 2], "content": f"w{i}", "id": f"w{i}"} for i in range(6)]
    for message, plain in zip(said, _plain_after_reset(options, prompt, said)):
        mem.add(message)
        assert mem.messages == plain
    assert mem.manager.removed_message_count > 2 and mem.messages[0] == prompt  # the premise: summarized
    again = SyncConversationMemory(store_url, "s1", user_id="u", **options)
    assert again.messages == mem.messages
    rows = rows_of("hello zebra")
    assert len(rows) == before and all(row.position != 0 for row in rows)  # archived, as often as before
    assert len(mem.store.get_vectors(mem.scope, [row.id for row in rows])) == len(rows)  # and embedded
    assert recalled() == found
    mem.delete(0)
    assert prompt not in mem.messages and prompt not in again.messages
    assert not rows_of("You are terse.")
    for m in (mem, again):
        m.close()


class _ReplaceFailsOnce:
    """The store, but its first ``replace`` raises (the process died before the write)."""

    def __init__(self, store):
        self._store, self.failed = store, False

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if name != "replace" or self.failed:
            return attr

        def replace(*args, **kwargs):
            self.failed = True
            raise ConnectionError("the store went away")

        return replace


@pytest.mark.parametrize("pin_first", [None, 2])
def test_a_system_message_opening_the_window_after_clear_survives_a_failed_swap(store_url, pin_first):
    """Position 0's message is appended again (archived) before the system message takes its place: a swap that
    failed after the copy leaves the conversation with no pinned message and nothing lost, and the retried reset,
    by a new memory on the same store, appends no second copy and ends as an uninterrupted one does."""
    from fullrecall.stores import open_store

    store = open_store(store_url)
    failing = _ReplaceFailsOnce(store)
    mem, options, prompt = _opened_midway(store_url, "user", pin_first, store=failing)
    with pytest.raises(ConnectionError):
        mem.add(prompt)
    assert failing.failed
    again = SyncConversationMemory(store, "s1", user_id="u", **options)
    assert all(m.get("role") != "system" for m in again.messages)
    assert [r.data["content"] for r in store.range(again.scope, 0, 10**6)].count("hello zebra") == 2  # nothing lost
    again.add(prompt)
    said = [{"role": ("user", "assistant")[i % 2], "content": f"w{i}", "id": f"w{i}"} for i in range(6)]
    for message, plain in zip(said, _plain_after_reset(options, prompt, said)):
        again.add(message)
        assert again.messages == plain
    logged = [r.data["content"] for r in store.range(again.scope, 0, 10**6)]
    assert logged.count("hello zebra") == 1 and logged.count("You are terse.") == 1 and logged.count("hi") == 1
    assert [m.data["content"] for m in again.recall("hello zebra").messages].count("hello zebra") == 1
    store.close()
