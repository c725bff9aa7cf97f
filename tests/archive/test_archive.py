"""The archive: nothing lost, exact recall with radius and merge, limits, the enrichment format."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fullrecall import ArchiveError
from fullrecall.archive import (
    Archive,
    SemanticMemoryHook,
    SemanticSummarizingConversationManager,
    merge_ranges,
    stored_as_message,
)
from fullrecall.archive.recall import CONTEXT_END, CONTEXT_START, ENRICHMENT_HEADER, QUESTION_PREFIX
from fullrecall.stores import Scope, open_store


def user(text):
    return {"role": "user", "content": [{"text": text}]}


def assistant(text):
    return {"role": "assistant", "content": [{"text": text}]}


TOPICS = ["arrays", "linked lists", "hash tables", "binary trees", "heaps", "graphs", "stacks", "queues", "tries", "sorting"]


def conversation(reference="REF-48213"):
    messages = [user(f"Our shared reference number is {reference}. Keep it out of any summary."), assistant("Understood.")]
    for topic in TOPICS:
        messages += [user(f"Tell me about {topic}"), assistant(f"{topic.capitalize()} are a classic data structure.")]
    return messages


def manager(**kw):
    kw.setdefault("summarizer", lambda m, p: "summary")
    kw.setdefault("preserve_recent_messages", 4)
    return SemanticSummarizingConversationManager(**kw)


@given(hits=st.lists(st.tuples(st.integers(0, 60), st.floats(0, 1)), max_size=8), radius=st.integers(0, 4),
       before=st.none() | st.integers(0, 70))
def test_ranges_are_merged_ordered_and_never_repeat_the_window(hits, radius, before):
    ranges = merge_ranges(hits, radius, before=before)
    covered = [p for r in ranges for p in range(r.start, r.end + 1)]
    assert covered == sorted(set(covered)), "ranges overlap or are out of order"
    for a, b in zip(ranges, ranges[1:]):
        assert b.start > a.end + 1, "touching ranges must be merged"
    expected = {p for pos, _ in hits for p in range(max(0, pos - radius), pos + radius + 1) if before is None or p < before}
    assert set(covered) == expected


def test_removed_messages_are_archived_verbatim_with_summary_link(tmp_path):
    m = manager(store=f"sqlite:///{tmp_path}/a.db", session_id="s1")
    messages = conversation()
    original = list(messages)
    m.reduce_context(messages, RuntimeError("overflow"))
    archived = m.archive.get(0, 100)
    assert [a.data for a in archived] == original[: m.removed_message_count]
    assert all(a.summary_id == archived[0].summary_id is not None for a in archived)
    assert stored_as_message(archived[0]).text == original[0]["content"][0]["text"]
    # active + archive = everything, in order
    assert [a.data for a in archived] + messages[1:] == original


def test_reference_number_is_recalled_with_its_neighbours_and_not_from_the_window():
    m = manager()
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    recall = m.recall("What was our shared reference number?")
    texts = [a.text for a in recall.messages]
    assert any("REF-48213" in t for t in texts)
    assert recall.hits[0].position == 0 and {"dense", "lexical", "fused"} <= set(recall.hits[0].scores)
    assert all(a.position < m.first_active_position for a in recall.messages)
    assert recall.ranges[0].start == 0 and recall.ranges[0].end >= 2  # radius 2 around message 0


def test_keyword_only_hit_is_findable():
    m = manager(semantic_search_top_k=1)
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    hits = m.recall("REF-48213", radius=0).hits
    assert hits and "REF-48213" in hits[0].message.data["content"][0]["text"]


def test_enrichment_format_budget_and_history_untouched():
    m = manager()
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    hook = SemanticMemoryHook(manager=m, max_context_length=300, include_metadata=True)
    question = user("What was our shared reference number?")
    history = messages + [question]
    out = hook.enrich(history)
    text = out[-1]["content"][0]["text"]
    assert text.startswith(ENRICHMENT_HEADER + "\n" + CONTEXT_START + "\n[Message 0, user]: Our shared reference number is REF-48213")
    assert text.endswith(CONTEXT_END + "\n" + QUESTION_PREFIX + "What was our shared reference number?")
    context = text.split(CONTEXT_START + "\n", 1)[1].split("\n" + CONTEXT_END, 1)[0]
    assert len(context) <= 300 and all(line.startswith("[Message ") for line in context.splitlines())
    assert history[-1] is question and question["content"][0]["text"] == "What was our shared reference number?"
    # tool results and assistant turns are never enriched; nor is anything when disabled
    tool = {"role": "user", "content": [{"toolResult": {"toolUseId": "t", "status": "success", "content": [{"text": "reference number"}]}}]}
    assert hook.enrich(messages + [tool])[-1] is tool
    # the question of a turn in its tool loop is enriched for each model call of the turn; after an answer, none
    call = {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "lookup", "input": {}}}]}
    looped = hook.enrich(history + [call, tool])
    assert looped[-1] is tool and looped[-2] is call and looped[-3]["content"][0]["text"] == text
    answer = {"role": "assistant", "content": [{"text": "It is REF-48213."}]}
    assert hook.enrich(history + [answer])[-2] is question
    assert SemanticMemoryHook(enabled=False, manager=m).enrich(history)[-1] is question


@pytest.mark.timeout(120)
def test_a_context_radius_far_larger_than_the_archive_costs_what_the_archive_holds():
    """The hook's neighbours were the radius's own positions, read and packed one by one: a radius of 10**9 never
    returned (the timeout fails it; it returns in well under a second). They are now bounded by the window's first
    position."""
    m = manager(message_context_radius=10**9)
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    hook = SemanticMemoryHook(manager=m, max_context_length=2000, radius_hits=3)
    text = hook.enrich_text("What was our shared reference number?")
    assert text is not None and "REF-48213" in text


def test_one_hook_recalling_for_two_owners_keeps_each_context_within_its_budget():
    """Two users' conversations with one session id, one hook: each enrichment is within max_context_length
    (the hook kept a line's cost by session id and position, so Bob's long message cost what Ann's short one did,
    and his context came out at 447 characters of 300)."""
    store = open_store("sqlite:///:memory:")
    hook = SemanticMemoryHook(max_context_length=300)
    managers = {}
    for who, pad in (("ann", ""), ("bob", " Please remember it well." * 12)):
        managers[who] = manager(store=store, session_id="chat-1", user_id=who)
        managers[who].reduce_context(conversation(f"REF-{who}{pad}"), RuntimeError("overflow"))
    for who in ("ann", "bob", "ann"):
        text = hook.enrich_text("What was our shared reference number?", managers[who])
        context = text.split(CONTEXT_START + "\n", 1)[1].split("\n" + CONTEXT_END, 1)[0]
        assert len(context) <= 300, (who, len(context))
        assert ("REF-ann" in context or who == "bob") and "REF-bob" not in context


def test_enriched_user_message_is_archived_as_written():
    m = manager(preserve_recent_messages=2)
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    messages.append(SemanticMemoryHook(manager=m).enrich(messages + [user("What was our shared reference number?")])[-1])
    messages += [assistant("It is REF-48213."), user("thanks"), assistant("welcome")]
    while any("Current question" in str(x) for x in messages):
        m.reduce_context(messages, RuntimeError("overflow"))
    archived = [a for a in m.archive.get(0, 1000) if a.role == "user"]
    assert "What was our shared reference number?" in [a.data["content"][0]["text"] for a in archived]
    assert not any(ENRICHMENT_HEADER in a.text for a in archived)


def test_earlier_summaries_are_archived_as_summaries():
    m = manager(summarizer=lambda msgs, prev: f"S{len(m.archive.summaries()) + 1}")
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    messages += conversation("REF-2")
    m.reduce_context(messages, RuntimeError("overflow"))
    summaries = m.archive.summaries()
    assert [s["text"] for s in summaries] == ["S1", "S2"] and summaries[1]["folds"] == "S1"
    assert not any(a.text.endswith("S1") for a in m.archive.get(0, 1000)), "a summary is not a user message"


def test_store_failure_keeps_every_message_in_the_window():
    store = open_store("sqlite:///:memory:")
    m = manager(store=store)
    store.close()
    messages = conversation()
    before = list(messages)
    with pytest.raises(ArchiveError, match="stay in the window"):
        m.reduce_context(messages, RuntimeError("overflow"))
    assert messages == before and m.removed_message_count == 0


def test_embedding_failure_keeps_messages_and_catches_up(caplog, flaky_embedder):
    embedder = flaky_embedder
    embedder.fail = True
    m = manager(embedding_model=embedder, preserve_recent_messages=2)
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    assert m.removed_message_count > 0 and "could not embed" in caplog.text
    stats = m.get_memory_usage_stats()
    assert stats["message_count"] == m.removed_message_count and stats["unindexed_count"] == m.removed_message_count
    embedder.fail = False
    m.reduce_context(messages, RuntimeError("overflow"))
    assert m.get_memory_usage_stats()["unindexed_count"] == 0
    assert m.get_memory_usage_stats()["embedding_memory"] == m.removed_message_count * embedder.dimension * 4


def test_a_new_process_embeds_what_an_earlier_one_could_not(tmp_path, default_embedder, flaky_embedder):
    from dataclasses import replace

    from fullrecall.messages import parse_messages
    from fullrecall.stores import Scope
    from fullrecall.window import RemovedMessages

    def removed(texts, start):
        _, msgs = parse_messages([user(t) for t in texts])
        batch = [replace(m, position=start + i) for i, m in enumerate(msgs)]
        return RemovedMessages(batch, reason="trimmed", shape="converse")

    url, scope = f"sqlite:///{tmp_path}/a.db", Scope(session_id="s")
    flaky = flaky_embedder
    flaky.fail = True
    first = Archive(url, scope, embedding_model=flaky)
    first.write(removed([f"the invoice number is {i}" for i in range(3)], 0))
    assert first.store.get_vectors(scope, ["m0", "m1", "m2"]) == {}  # kept, not embedded
    first.store.close()
    # A restart: a new Archive on the same file, embedder working again, one more message.
    second = Archive(url, scope, embedding_model=default_embedder)
    second.write(removed(["and the due date is Friday"], 3))
    assert set(second.store.get_vectors(scope, ["m0", "m1", "m2", "m3"])) == {"m0", "m1", "m2", "m3"}
    assert second.get_memory_usage_stats()["unindexed_count"] == 0


def test_count_and_memory_limits_evict_oldest_and_say_so():
    m = manager(max_num_archived_messages=5, preserve_recent_messages=2)
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    m.reduce_context(messages, RuntimeError("overflow"))
    stats = m.get_memory_usage_stats()
    assert stats["message_count"] == 5 and stats["evicted_count"] == m.removed_message_count - 5
    assert stats["oldest_position"] == m.removed_message_count - 5 and stats["newest_position"] == m.removed_message_count - 1
    assert "evicted" in m.get_memory_usage_summary()
    assert not m.recall("reference number REF-48213", radius=0).messages or all(
        a.position >= stats["oldest_position"] for a in m.recall("reference number REF-48213").messages)

    unlimited = manager(preserve_recent_messages=2)
    unlimited.reduce_context(conversation() + conversation("REF-9"), RuntimeError("overflow"))
    limit = unlimited.get_memory_usage_stats()["total_memory"] * 3 // 4  # what the store counts, less a quarter
    small = manager(max_memory_archived_messages=limit, preserve_recent_messages=2)
    messages = conversation() + conversation("REF-9")
    small.reduce_context(messages, RuntimeError("overflow"))
    assert small.get_memory_usage_stats()["total_memory"] <= limit
    assert small.get_memory_usage_stats()["evicted_count"] > 0


def test_archive_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path}/memory.db"
    first = manager(store=url, session_id="conv-1")
    messages = conversation()
    first.reduce_context(messages, RuntimeError("overflow"))
    state = first.get_state()
    second = manager(store=url, session_id="conv-1")
    second.restore_from_state(state)
    assert second.removed_message_count == first.removed_message_count
    assert any("REF-48213" in a.text for a in second.recall("shared reference number").messages)
    other = manager(store=url, session_id="conv-2")
    assert other.recall("shared reference number").messages == []


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="message_context_radius"):
        manager(message_context_radius=-1)
    with pytest.raises(ValueError, match="semantic_search_top_k"):
        manager(semantic_search_top_k=0)
    with pytest.raises(ValueError, match="max_num_archived_messages"):
        Archive(max_num_archived_messages=0)


def test_recall_failure_sends_the_message_unenriched_and_says_so(caplog):
    m = manager()
    messages = conversation()
    m.reduce_context(messages, RuntimeError("overflow"))
    m.archive.store.close()  # the store goes away
    question = user("What was our shared reference number?")
    hook = SemanticMemoryHook(manager=m)
    out = hook.enrich(messages + [question])
    assert out[-1] is question and "recall failed" in caplog.text and hook.last_error is not None


def test_an_option_the_search_does_not_take_is_refused_when_the_archive_is_made():
    # Archive("...", session_id="s1") looked like a conversation's name, was passed on to the search
    # engine, and made every write fail later (each kept in the window as an archive error)
    with pytest.raises(TypeError, match=r"'session_id'.*scope=Scope\(session_id=") as refused:
        Archive("sqlite:///:memory:", session_id="s1")
    assert "candidates" in str(refused.value)  # what it does take
    with pytest.raises(TypeError, match="'top_kk'"):
        Archive("sqlite:///:memory:", top_kk=3)
    archive = Archive("sqlite:///:memory:", Scope(session_id="s1"), candidates=20, near_weight=0.0)
    assert archive.search_engine.candidates == 20 and archive.search_engine.near_weight == 0.0


def test_an_archive_moved_to_another_conversation_searches_that_one(default_embedder):
    # a Strands manager moves its archive to the restored session's conversation (the session manager's id,
    # or the one its saved state names); a search engine made before must follow it
    from dataclasses import replace

    from fullrecall.messages import parse_messages
    from fullrecall.window import RemovedMessages

    def removed(text):
        _, msgs = parse_messages([user(text)])
        return RemovedMessages([replace(msgs[0], position=0)], reason="trimmed", shape="converse")

    store = open_store("sqlite:///:memory:")
    first, second = Scope(session_id="first"), Scope(session_id="second")
    Archive(store, second, embedding_model=default_embedder).write(removed("The boat is called Seagull."))
    archive = Archive(store, first, embedding_model=default_embedder)
    archive.write(removed("The boat is called Albatross."))
    assert "Albatross" in archive.recall("What is the boat called?", radius=0).hits[0].text
    archive.scope = second
    hits = archive.recall("What is the boat called?", radius=0).hits
    assert [h.text for h in hits] == ["The boat is called Seagull."]


def _removed(texts, start):
    from dataclasses import replace

    from fullrecall.messages import parse_messages
    from fullrecall.window import RemovedMessages

    _, msgs = parse_messages([user(t) for t in texts])
    return RemovedMessages([replace(m, position=start + i, id=f"m{start + i}") for i, m in enumerate(msgs)],
                           reason="trimmed", shape="converse")


def test_a_second_conversation_under_one_session_id_is_refused_not_taken_for_a_rerun(tmp_path):
    # messages without ids of their own are stored under their places (m0, m1, ...): a new run that starts
    # its conversation again under the same session id used to be taken for a rerun, its messages never stored
    url, scope = f"sqlite:///{tmp_path}/a.db", Scope(session_id="default")
    first = Archive(url, scope)
    first.write(_removed(["My locker code is 4471.", "Noted."], 0))
    first.store.close()
    rerun = Archive(url, scope)  # a restart writing the same messages again: stored once, no error
    rerun.write(_removed(["My locker code is 4471.", "Noted."], 0))
    second = Archive(rerun.store, scope)
    with pytest.raises(ArchiveError, match=r"'default' holds other messages at positions \[0, 1\].*own session id"):
        second.write(_removed(["My parking spot is B12.", "Got it."], 0))
    kept = rerun.store.range(scope, 0, 10)
    assert [m.data["content"][0]["text"] for m in kept] == ["My locker code is 4471.", "Noted."]
    second.write(_removed(["My parking spot is B12."], 2))  # a new place: written as ever
    assert rerun.store.count(scope) == 3


def test_two_conversations_archiving_under_one_session_id_at_once_one_is_refused_and_none_is_lost(store_url):
    """Two agents on one store and session id at the same moment: both read the places free, one stored its
    messages, and the store took the other's write of the same ids (``m0``, ``m1``) for a rerun. That one counted
    its messages archived though none was kept (and recalled the other's words). It gets the ArchiveError the
    check before a write gives (its manager keeps the messages in the window)."""
    import threading

    store = open_store(store_url)
    scope = Scope(session_id="shared")
    both_read = threading.Barrier(2, timeout=30)

    class ReadThenWrite:  # the real store; an append waits until both writers have read the places
        def __getattr__(self, name):
            return getattr(store, name)

        def append(self, *args, **kwargs):
            both_read.wait()
            return store.append(*args, **kwargs)

    said = [["My locker code is 4471.", "Noted."], ["My parking spot is B12.", "Got it."]]
    archives = [Archive(ReadThenWrite(), scope) for _ in said]
    outcomes: list[object] = [None, None]

    def write(i: int) -> None:
        try:
            archives[i].write(_removed(said[i], 0))
        except ArchiveError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    refused = [i for i, o in enumerate(outcomes) if isinstance(o, ArchiveError)]
    assert len(refused) == 1 and "written meanwhile by another conversation" in str(outcomes[refused[0]])
    kept = [m.data["content"][0]["text"] for m in store.range(scope, 0, 10)]
    assert kept == said[1 - refused[0]]
    store.close()


def test_a_second_conversation_writing_past_its_first_write_is_refused_where_the_other_wrote(store_url):
    """Two conversations under one session id, both past their first writes (a second worker resumed the first's
    saved window and went on with its own messages): the first one's next write reached past what it wrote, so
    nothing was read, and the store took its ``m4``, ``m5`` for a rerun of the second's. Its manager counted them
    archived: they were nowhere, and its vectors went to the other's messages. Now the store names the ids it
    held, and only then is the write read back: an ArchiveError, its messages kept in the window.
    """
    store = open_store(store_url)
    scope = Scope(session_id="shared")
    first, second = Archive(store, scope), Archive(store, scope)
    first.write(_removed(["A said 0", "A said 1"], 0))
    second.write(_removed(["B said 2", "B said 3"], 2))  # its first write: read first, the places free
    second.write(_removed(["B said 4", "B said 5"], 4))
    with pytest.raises(ArchiveError, match=r"holds other messages at positions \[4, 5\], written meanwhile"):
        first.write(_removed(["A said 4", "A said 5"], 4))
    assert [m.data["content"][0]["text"] for m in store.range(scope, 0, 10)] == [
        "A said 0", "A said 1", "B said 2", "B said 3", "B said 4", "B said 5"]
    second.write(_removed(["B said 4", "B said 5"], 4))  # its own rerun: the same messages, nothing read refuses it
    assert first.recall("B said 5").ranges  # nothing of the refused write's vectors replaced the store's
    with pytest.raises(ArchiveError, match=r"positions \[4, 5\]"):  # a longer write: nothing of it stays
        first.write(_removed(["A said 4", "A said 5", "A said 6"], 4))
    second.write(_removed(["B said 6", "B said 7"], 6))  # so the other conversation goes on where it was
    assert [m.data["content"][0]["text"] for m in store.range(scope, 4, 10)] == [
        "B said 4", "B said 5", "B said 6", "B said 7"]
    store.close()


def test_a_rewound_conversation_is_refused_where_it_differs(tmp_path):
    archive = Archive(f"sqlite:///{tmp_path}/a.db", Scope(session_id="c"))
    archive.write(_removed(["one", "two"], 0))
    archive.write(_removed(["three", "four"], 2))
    archive.write(_removed(["three"], 2))  # a rerun of a place it wrote: the same message, nothing new
    with pytest.raises(ArchiveError, match=r"positions \[3\]"):
        archive.write(_removed(["three", "four, again but otherwise"], 2))
    assert [m.data["content"][0]["text"] for m in archive.store.range(archive.scope, 0, 9)] == ["one", "two", "three", "four"]


def test_a_window_keeps_the_messages_another_conversation_holds_the_places_of(tmp_path):
    from fullrecall.window import SlidingWindowConversationManager

    url = f"sqlite:///{tmp_path}/a.db"
    for run, word in enumerate(("apples", "pears")):
        archive = Archive(url, Scope(session_id="shared"))
        manager = SlidingWindowConversationManager(window_size=4, on_remove=archive)
        messages = [user(f"I like {word} {i}") if i % 2 == 0 else assistant("ok") for i in range(8)]
        if run == 0:
            manager.apply_management(messages)
            assert len(messages) == 4
        else:
            with pytest.raises(ArchiveError, match="own session id"):
                manager.apply_management(messages)
            assert len(messages) == 8 and manager.removed_message_count == 0  # nothing left the window
        archive.store.close()


def test_a_message_of_the_epoch_keeps_its_time():
    from dataclasses import replace

    event = _removed(["sent at 1970-01-01T00:00:00Z", "sent later"], 0)
    event.messages[0] = replace(event.messages[0], timestamp=0.0)
    event.messages[1] = replace(event.messages[1], timestamp=86400.0)
    archive = Archive("sqlite:///:memory:", Scope(session_id="c"))
    archive.write(event)
    assert [m.created_at for m in archive.get(0, 1)] == [0.0, 86400.0]  # 0 was taken for no time, and made now


def test_an_archive_moved_to_another_conversation_checks_its_places_there_again(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/a.db")
    Archive(store, Scope(session_id="theirs")).write(_removed(["x"] * 6, 0))  # another conversation, 6 places
    archive = Archive(store, Scope(session_id="mine"))
    archive.write(_removed(["one", "two"], 0))
    archive.scope = Scope(session_id="theirs")  # as a Strands manager moves its archive to a restored session
    with pytest.raises(ArchiveError, match=r"'theirs' holds other messages at positions \[2, 3\]"):
        archive.write(_removed(["three", "four"], 2))  # past what it wrote in "mine", not in "theirs"


def test_a_rewound_conversation_goes_on_in_a_branch_that_recalls_what_came_before(store_url, default_embedder):
    """A conversation rewound to an earlier point could not go on once its older messages were archived: the
    archive refused the new branch's messages, and a conversation under a new session id began with an empty
    archive, recalling nothing said before the rewind. The refusal now names where the branches part and how to
    go on; ``branch(session_id, before=P)`` copies what was archived before that place (verbatim, vectors and
    summaries too) into the new conversation, and leaves the old one whole.
    """
    from fullrecall.archive.archive import SUMMARIES
    from fullrecall.stores import Record

    scope = Scope(user_id="ann", session_id="c")
    archive = Archive(store_url, scope, embedding_model=default_embedder)
    archive.write(_removed(["My locker code is 4471.", "Noted."], 0))
    archive.write(_removed(["I moved to Lyon.", "Nice."], 2))
    archive.store.put_record(scope, Record(id="s0", namespace=SUMMARIES, text="locker", data={"covers": [0, 1]}))
    archive.store.put_record(scope, Record(id="s2", namespace=SUMMARIES, text="moved", data={"covers": [2, 3]}))
    with pytest.raises(ArchiveError, match=r"positions \[3\].*own session id.*branch\('<new session id>', "
                                           r"before=3\)"):
        archive.write(_removed(["I moved to Lyon.", "I moved to Paris instead."], 2))
    assert archive.branch("c-2", before=3) == 3
    assert archive.branch("c-2", before=3) == 0  # what the branch holds is not copied again
    branch = Archive(archive.store, Scope(user_id="ann", session_id="c-2"), embedding_model=default_embedder)
    branch.write(_removed(["I moved to Lyon.", "I moved to Paris instead."], 2))  # goes on from the rewind
    assert [m.data["content"][0]["text"] for m in branch.get(0, 9)] == [
        "My locker code is 4471.", "Noted.", "I moved to Lyon.", "I moved to Paris instead."]
    assert len(branch.store.get_vectors(branch.scope, ["m0", "m1", "m2"])) == 3  # copied, not embedded again
    recalled = branch.recall("what is my locker code?", top_k=1, radius=0)
    assert [m.data["content"][0]["text"] for m in recalled.messages] == ["My locker code is 4471."]
    assert [s["id"] for s in branch.summaries()] == ["s0"]  # the summary of what came before only
    assert [m.data["content"][0]["text"] for m in archive.get(0, 9)][2:] == ["I moved to Lyon.", "Nice."]
    with pytest.raises(ValueError, match="another conversation"):
        archive.branch("c", before=1)
    archive.store.close()
