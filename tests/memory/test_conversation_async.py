"""ConversationMemory: MassGen's memory API as coroutines, on the durable log, on every backend."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fullrecall import ConversationMemory, InvalidInput, SyncConversationMemory

sys.path.insert(0, str(Path(__file__).parent))
from concurrent_worker import HashEmbedder

run = asyncio.run


def make(url: str = "sqlite:///:memory:", session: str = "s1", **kw) -> ConversationMemory:
    kw = {"summarizer": lambda m, p: "summary", "max_history_turns": 50, "preserve_recent_messages": 2,
          "embedding_model": HashEmbedder(), **kw}
    return ConversationMemory(url, session, user_id="ann", **kw)


def turn(i: int) -> list[dict]:
    return [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]


def contents(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages]


def test_add_get_and_ids(store_url):
    memory = make(store_url, uuid.uuid4().hex)
    mine = {"role": "user", "content": "hello"}
    run(memory.add(mine))
    run(memory.add(turn(1)))
    run(memory.add(None))
    messages = run(memory.get_messages())
    assert contents(messages) == ["hello", "question 1", "answer 1"]
    assert "id" not in mine and all(m["id"] for m in messages) and len({m["id"] for m in messages}) == 3
    messages[0]["content"] = "changed"  # copies
    assert run(memory.get_messages())[0]["content"] == "hello"
    assert contents(run(memory.get_messages(limit=2))) == ["question 1", "answer 1"]
    assert contents(run(memory.get_messages(limit=0))) == ["hello", "question 1", "answer 1"]
    assert contents(run(memory.get_messages_by_role("user"))) == ["hello", "question 1"]
    assert run(memory.get_last_message())["content"] == "answer 1"
    assert run(memory.size()) == 3


def test_duplicates_are_skipped_unless_allowed_and_a_restart_keeps_everything(store_url):
    session = uuid.uuid4().hex
    memory = make(store_url, session)
    run(memory.add({"id": "a", "role": "user", "content": "first"}))
    run(memory.add({"id": "a", "role": "user", "content": "first"}))  # a retry stores once
    assert contents(run(memory.get_messages())) == ["first"]
    run(memory.add({"id": "a", "role": "user", "content": "first"}, allow_duplicates=True))
    assert contents(run(memory.get_messages())) == ["first", "first"]
    again = make(store_url, session)
    assert run(again.get_messages()) == run(memory.get_messages())


def test_one_add_with_two_messages_of_one_id_keeps_the_first_in_both_classes(store_url):
    """The id is the key: of two messages sharing one in a batch, both classes keep the first (a retry
    would find it anyway); ``allow_duplicates`` keeps both, as MassGen's flag says. An integer id is its digits.
    """
    batch = [{"id": "a", "role": "user", "content": "first"}, {"id": "b", "role": "assistant", "content": "ok"},
             {"id": "a", "role": "user", "content": "second"}, {"id": 7, "role": "assistant", "content": "x"},
             {"id": "7", "role": "assistant", "content": "y"}]
    sync = SyncConversationMemory(store_url, uuid.uuid4().hex, user_id="ann", summarizer=lambda m, p: "summary",
                                  embedding_model=HashEmbedder())
    sync.add([dict(m) for m in batch])
    memory = make(store_url, uuid.uuid4().hex)
    run(memory.add(batch))
    assert contents(sync.messages) == contents(run(memory.get_messages())) == ["first", "ok", "x"]
    assert memory.store.count(memory.scope) == sync.store.count(sync.scope) == 3
    allowed = make(store_url, uuid.uuid4().hex)
    run(allowed.add(batch, allow_duplicates=True))
    assert contents(run(allowed.get_messages())) == ["first", "ok", "second", "x", "y"]
    assert contents(run(make(store_url, allowed.scope.session_id).get_messages())) == ["first", "ok", "second", "x",
                                                                                       "y"]


def test_empty_memory():
    memory = make()
    assert run(memory.get_last_message()) is None and run(memory.size()) == 0 and run(memory.get_messages()) == []
    assert run(memory.retrieve("anything")) == []


def test_delete_removes_for_good_and_bad_index_changes_nothing(store_url):
    memory = make(store_url, uuid.uuid4().hex)
    run(memory.add([{"role": "system", "content": "rules"}, *turn(1), {"role": "user", "content": "SECRET-9 is mine"},
                    *turn(2)]))
    with pytest.raises(IndexError):
        run(memory.delete(9))
    with pytest.raises(IndexError):
        run(memory.delete([1, -1]))
    for bad in (1.0, None, "1"):  # not an index, nor indexes: named as one (was a bare TypeError, or '1' read as ['1'])
        with pytest.raises(IndexError, match=rf"no message at \[{bad!r}\]"):
            run(memory.delete(bad))
    assert run(memory.size()) == 6
    run(memory.delete(3))
    assert contents(run(memory.get_messages())) == ["rules", "question 1", "answer 1", "question 2", "answer 2"]
    assert not any("SECRET-9" in m.text for m in run(memory.recall("SECRET-9")).messages)
    run(memory.delete([0, 4]))
    assert contents(run(memory.get_messages())) == ["question 1", "answer 1", "question 2"]
    run(memory.add({"role": "assistant", "content": "later"}))
    assert contents(run(memory.get_messages())) == ["question 1", "answer 1", "question 2", "later"]
    assert contents(run(make(store_url, memory.scope.session_id).get_messages())) == contents(
        run(memory.get_messages()))


SECRET = "ZEBRACODE4711"


def secret_turn(own: str = "s") -> list[dict]:
    return [{"id": "a", "role": "user", "content": "hello there, first message about apples"},
            {"id": own, "role": "user", "content": f"my bank pin is {SECRET} please keep it"},
            {"id": "d", "role": "assistant", "content": "ok noted"}]


def sync(url: str) -> SyncConversationMemory:
    return SyncConversationMemory(url, uuid.uuid4().hex, user_id="ann", embedding_model=HashEmbedder(),
                                  preserve_recent_messages=50)


def where_secret(memory: SyncConversationMemory, own: str = "s") -> list[str]:
    """Every place the conversation still shows the secret: the window, recall, or a stored row (by its id)."""
    places = ["window"] if SECRET in str(memory.messages) else []
    places += ["recall"] if any(SECRET in m.text for m in memory.recall(f"bank pin {SECRET}").messages) else []
    rows = memory.store.range(memory.scope, 0, 10**9) + memory.store.get(memory.scope, [own])
    return places + [row.id for row in rows if SECRET in str(row.data)]


def secret_index(memory: SyncConversationMemory) -> int:
    return next(i for i, m in enumerate(memory.messages) if SECRET in str(m.get("content")))


@pytest.mark.parametrize(("rebuilds", "own"), [(1, "s"), (2, "s"), (1, "s" * 256)])
def test_deleting_a_message_the_window_added_again_deletes_it_everywhere(store_url, rebuilds, own):
    """A rebuild (any delete, truncate_to_size, leave, load_state_dict) archives the window and adds the kept
    messages again under derived keys ('s@<hex>', the id hashed when too long); deleting such a copy deleted only
    it, and the archived original (id 's', the same words) stayed stored and recalled. Rebuilt twice, a message
    is three rows."""
    memory = sync(store_url)
    memory.add([{"id": "b", "role": "user", "content": "about pears"}] * (rebuilds - 1) + secret_turn(own))
    for _ in range(rebuilds):
        memory.delete(0)
    found = where_secret(memory, own)  # the premise: shown, recalled, stored once and once a rebuild (read by id)
    assert found[:2] == ["window", "recall"] and len(found) == 4 + rebuilds
    memory.delete(secret_index(memory))
    assert where_secret(memory, own) == []
    assert [m["id"] for m in memory.messages] == ["d"]
    memory.close()


@pytest.mark.parametrize("rebuilds", [1, 2])
def test_deleting_a_message_added_without_an_id_deletes_its_copies_too(store_url, rebuilds):
    """A message added without an ``"id"`` is stored under a fresh key; a rebuild stored its copy as ``m@<hex>``,
    which nothing tied to it: deleting the copy left the original archived and recalled."""
    memory = sync(store_url)
    memory.add([{"role": "user", "content": "about pears"}] * (rebuilds - 1) + [{k: v for k, v in m.items() if k != "id"}
                                                                           for m in secret_turn()])
    for _ in range(rebuilds):
        memory.delete(0)
    assert len(where_secret(memory)) == 3 + rebuilds  # window, recall, the original and a row per rebuild
    memory.delete(secret_index(memory))
    assert where_secret(memory) == []
    assert [m["content"] for m in memory.messages] == ["ok noted"]
    memory.close()


def test_deleting_a_message_keeps_others_sharing_its_id_or_an_id_like_its_keys(store_url):
    """Only the same message goes: another message under the same id (stored as 's@<start>', other words) or
    under an id of its own that looks like a derived key ('s@x') stays, and so does an allowed duplicate in the
    window (a delete of one index deletes that one)."""
    memory = make(store_url, uuid.uuid4().hex, preserve_recent_messages=50)
    secret, *_ = [m for m in secret_turn() if m["id"] == "s"]
    lemons = {"id": "s", "role": "user", "content": "another message under the same id, about lemons"}
    mine = {"id": "s@x", "role": "user", "content": "a message of my own id about plums"}
    run(memory.add([secret, mine]))
    run(memory.clear())
    run(memory.add([secret, lemons, secret], allow_duplicates=True))
    assert run(memory.get_messages()) == [secret, lemons, secret]  # the premise: each back, as a copy
    run(memory.delete(2))
    assert run(memory.get_messages()) == [secret, lemons]  # the duplicate still in the window stays
    run(memory.delete(0))
    assert run(memory.get_messages()) == [lemons]
    assert where_secret(memory.sync) == []
    assert mine["content"] in [m["content"] for m in run(memory.retrieve("plums"))]


@pytest.mark.parametrize("how", ["delete", "clear"])
def test_deleting_a_message_keeps_an_archived_one_of_an_id_like_its_keys_and_the_same_words(store_url, how):
    """A message of its own id 'a@b' with the very words of message 'a' is no copy of it (a copy keeps the own
    id 'a'): deleting 'a' deleted it too, once it was archived."""
    from fullrecall import PersistentMemory

    memory = sync(store_url)
    memory.add([{"role": "user", "content": "ok", "id": "a@b"}, {"role": "assistant", "content": "fine", "id": "r1"}])
    memory.truncate_to_size(0)  # 'a@b' archived
    memory.add([{"role": "user", "content": "ok", "id": "a"}, {"role": "assistant", "content": "fine2", "id": "r2"}])
    if how == "delete":
        memory.delete(0)
    else:
        PersistentMemory(store=memory.store, embedder=HashEmbedder(), user_id="ann").clear(ids=["a"])
    stored = [m.data for m in memory.store.range(memory.scope, 0, 10**9)]
    assert {"role": "user", "content": "ok", "id": "a@b"} in stored and not [m for m in stored if m.get("id") == "a"]
    memory.close()


def test_a_message_massgen_added_back_and_deleted_is_gone_everywhere(store_url):
    """MassGen's compressor, clear() then add(kept): a kept message comes back as 's@<start>'; deleting it then
    left the archived original recallable."""
    memory = make(store_url, uuid.uuid4().hex, preserve_recent_messages=50)
    _, secret, done = secret_turn()
    run(memory.add([secret, done]))
    run(memory.clear())
    run(memory.add([secret, done]))
    run(memory.delete(0))
    assert run(memory.get_messages()) == [done]
    assert where_secret(memory.sync) == []
    assert not [m for m in run(memory.retrieve(f"bank pin {SECRET}")) if SECRET in m["content"]]


def test_truncate_keeps_the_newest_and_the_rest_stays_recallable(store_url):
    memory = make(store_url, uuid.uuid4().hex)
    run(memory.add([{"role": "user", "content": "my locker code is 4417"}, {"role": "assistant", "content": "ok"},
                    *turn(1), *turn(2)]))
    run(memory.truncate_to_size(10))
    assert run(memory.size()) == 6
    run(memory.truncate_to_size(3))
    assert contents(run(memory.get_messages())) == ["answer 1", "question 2", "answer 2"]
    assert any("4417" in m["content"] for m in run(memory.retrieve("locker code 4417")))
    run(memory.truncate_to_size(0))
    assert run(memory.size()) == 0
    with pytest.raises(InvalidInput):
        run(memory.truncate_to_size(-1))


def test_truncating_a_window_with_a_pinned_system_message_again_changes_nothing(store_url):
    """The pinned system message stays besides the newest ``n``: a window already that small is left as it is
    (each call archived its messages and added them back, so the log and recall's duplicates grew every turn).
    """
    memory = make(store_url, uuid.uuid4().hex)
    run(memory.add([{"role": "system", "content": "be brief"}, *turn(1), *turn(2)]))
    run(memory.truncate_to_size(3))
    window = run(memory.get_messages())
    assert contents(window) == ["be brief", "answer 1", "question 2", "answer 2"]
    logged, recalled = memory.store.count(memory.scope), contents(run(memory.retrieve("question 1")))
    for _ in range(3):
        run(memory.truncate_to_size(3))
    assert run(memory.get_messages()) == window and memory.store.count(memory.scope) == logged
    assert contents(run(memory.retrieve("question 1"))) == recalled and len(set(recalled)) == len(recalled)
    run(memory.truncate_to_size(0))
    assert contents(run(memory.get_messages())) == ["be brief"]


def test_clear_then_add_kept_leaves_exactly_kept(store_url):
    """MassGen's context compressor: clear() then add(the messages it keeps)."""
    memory = make(store_url, uuid.uuid4().hex)
    run(memory.add([{"role": "system", "content": "rules"}, *turn(1), *turn(2), *turn(3)]))
    messages = run(memory.get_messages())
    kept = [messages[0], *messages[-2:]]
    run(memory.clear())
    run(memory.add(kept))
    assert run(memory.get_messages()) == kept
    run(memory.add(kept))  # a retried add stores once
    assert run(memory.get_messages()) == kept
    assert any("answer 1" in m["content"] for m in run(memory.retrieve("answer 1")))


def test_a_message_back_into_the_window_is_not_taken_for_one_whose_id_is_its_store_key(store_url):
    """A message that left the window and comes back is stored under ``<id>@<where the window starts>``; a message
    whose own id was that key ("A@1") was taken for a retry of it: "A" silently stayed out of the window."""
    memory = make(store_url, uuid.uuid4().hex)
    first = {"id": "A", "role": "user", "content": "first message"}
    run(memory.add(first))
    run(memory.clear())
    other = {"id": "A@1", "role": "user", "content": "a message whose id has an at sign"}
    run(memory.add(other))
    run(memory.add(first))  # back into the window
    assert run(memory.get_messages()) == [other, first]
    run(memory.add(first))  # a retry: stored once
    assert run(memory.get_messages()) == [other, first]


def test_state_dict_round_trip_and_strict():
    memory = make()
    run(memory.add(turn(1)))
    state = memory.state_dict()
    assert contents(state["messages"]) == ["question 1", "answer 1"]
    other = make(session="s2")
    run(other.add(turn(9)))
    other.load_state_dict(state)
    assert run(other.get_messages()) == state["messages"]
    with pytest.raises(ValueError, match="messages"):
        other.load_state_dict({})
    other.load_state_dict({}, strict=False)
    assert run(other.get_messages()) == []


def test_loading_the_state_the_window_already_is_archives_nothing(store_url):
    """An application that saves ``state_dict()`` and loads it back into the same durable session on restart:
    the window is unchanged, and nothing is archived and added again (recall would find each message twice).
    """
    session = uuid.uuid4().hex
    memory = make(store_url, session)
    run(memory.add([{"role": "system", "content": "be brief"}, *turn(1), *turn(2)]))
    state = memory.state_dict()
    logged = memory.store.count(memory.scope)
    restarted = make(store_url, session)
    restarted.load_state_dict(state)
    restarted.load_state_dict(restarted.state_dict())
    assert restarted.state_dict() == state and restarted.store.count(restarted.scope) == logged
    assert run(restarted.retrieve("question 1")) == []


def test_loading_a_window_that_holds_the_summary_keeps_it_the_summary(store_url):
    """``load_state_dict`` gave the summary (a message without an id) a new id, so the rebuild took it for a message:
    it was appended to the log as a user message (searchable), where the docs say a kept summary never is."""
    memory = make(store_url, uuid.uuid4().hex, summarizer=lambda m, p: "SUMMARY of " + ",".join(x.text for x in m),
                  max_history_turns=2, preserve_recent_messages=2)
    for i in range(4):
        run(memory.add(turn(i)))
    window = run(memory.get_messages())
    assert window[0]["content"].startswith("SUMMARY of")
    memory.load_state_dict({"messages": window[:-1]})
    assert run(memory.get_messages()) == window[:-1]
    logged = memory.store.range(memory.scope, 0, 100)
    assert not [m.position for m in logged if "SUMMARY" in str(m.data)]


def test_the_window_is_managed_and_model_input_recalls():
    memory = make(max_history_turns=3)
    run(memory.add([{"role": "user", "content": "My locker code is 3141."}, {"role": "assistant", "content": "Noted."}]))
    for i in range(6):
        run(memory.add(turn(i)))
    assert memory.manager.removed_message_count > 0
    run(memory.add({"role": "user", "content": "What is my locker code?"}))
    assert "3141" in run(memory.model_input())[-1]["content"]
    assert run(memory.forget())["messages"] > 0 and run(memory.size()) == 0


def test_the_loop_is_not_blocked():
    """Store work runs in a worker thread: another task advances while add runs."""
    memory = make()
    ticks = []

    async def ticker():
        for _ in range(5):
            ticks.append(1)
            await asyncio.sleep(0)

    async def main():
        await asyncio.gather(memory.add([m for i in range(20) for m in turn(i)]), ticker())

    run(main())
    assert len(ticks) == 5 and run(memory.size()) == 40
    assert isinstance(memory.sync, SyncConversationMemory)


def test_concurrent_tasks_on_one_object_all_land(store_url):
    memory = make(store_url, uuid.uuid4().hex, max_history_turns=4)

    async def main():
        await asyncio.gather(*(memory.add(turn(i)) for i in range(12)))

    run(main())
    stored = memory.store.range(memory.scope, 0, 10**9)
    assert sorted(m.data["content"] for m in stored) == sorted(c for i in range(12) for c in contents(turn(i)))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 3)), st.tuples(st.just("delete"), st.integers(0, 9)),
                          st.tuples(st.just("truncate"), st.integers(0, 6)), st.tuples(st.just("clear"), st.just(0))),
                max_size=12))
def test_behaves_like_a_list(operations):
    """Whatever the sequence, get_messages() is what MassGen's in-memory list would hold."""
    memory, model, n = make(session=uuid.uuid4().hex), [], 0
    for op, arg in operations:
        if op == "add":
            new = [{"role": "user" if (n + k) % 2 == 0 else "assistant", "content": f"m{n + k}"} for k in range(arg)]
            n += arg
            run(memory.add(new))
            model += [m["content"] for m in new]
        elif op == "delete":
            if arg < len(model):
                run(memory.delete(arg))
                del model[arg]
            else:
                with pytest.raises(IndexError):
                    run(memory.delete(arg))
        elif op == "truncate":
            run(memory.truncate_to_size(arg))
            model = model[len(model) - arg:] if arg < len(model) else model
        else:
            run(memory.clear())
            model = []
        assert contents(run(memory.get_messages())) == model


def test_close_releases_the_store_it_opened_and_leaves_one_passed_in_open(store_url, open_handles):
    from fullrecall.stores import open_store

    session = uuid.uuid4().hex
    warm = make(store_url, session)  # the first open of a store loads what stays loaded (the embedder, modules)
    run(warm.add(turn(0)))
    warm.close()
    del warm
    before = open_handles()

    async def use() -> tuple[ConversationMemory, set[str]]:
        async with make(store_url, session) as memory:
            for i in (1, 2):
                await memory.add(turn(i))
            assert await memory.size() >= 4  # what the first memory wrote is there too
            return memory, open_handles() - before

    memory, opened = run(use())  # still referenced: only close() can have released its store
    assert opened  # the store held a file or a connection
    assert not opened & open_handles()  # all of it released
    with open_store(store_url) as store:
        with SyncConversationMemory(store, session, user_id="ann", embedding_model=HashEmbedder()) as sync:
            sync.add({"role": "user", "content": "still mine"})
        sync.close()  # harmless twice
        assert "still mine" in [m["content"] for m in SyncConversationMemory(
            store, session, user_id="ann", embedding_model=HashEmbedder()).messages]  # the store is still open


def test_arguments_of_the_wrong_type_are_named_and_change_nothing(store_url):
    memory = make(store_url, uuid.uuid4().hex)
    run(memory.add(turn(1)))
    window = run(memory.get_messages())
    for call, error in [
        (lambda: run(memory.get_messages("2")), "get_messages: 'limit' must be an integer or None, got '2'"),
        (lambda: run(memory.retrieve("answer", limit="3")), "retrieve: 'limit' must be an integer or None"),
        (lambda: run(memory.retrieve(5)), "retrieve: 'query' must be a string, a message or a list of them, got int"),
        (lambda: run(memory.recall(None)), "recall: 'query' must be a string, got NoneType"),
        (lambda: memory.sync.recall(b"answer"), "recall: 'query' must be a string, got bytes"),
        (lambda: memory.load_state_dict(None), "load_state_dict: the state must be a dict, got NoneType"),
        (lambda: memory.load_state_dict({"messages": "abc"}), "load_state_dict: 'messages' must be a list, got str"),
        (lambda: memory.load_state_dict({"messages": [*turn(2), {"role": "user", "content": 5}]}),
         "message 2: 'content' must be a string, a list of parts or null, got int"),
        (lambda: memory.load_state_dict({"messages": [{"role": "zzz", "content": "x"}]}), "message 0: 'role' must be"),
        (lambda: memory.load_state_dict({"messages": [{"role": "user", "content": "x", "at": object()}]}),
         "message 0: 'at' is a object, not a JSON value"),
    ]:
        with pytest.raises(InvalidInput) as info:
            call()
        assert str(info.value).startswith(error)
    assert run(memory.get_messages()) == window


def test_a_load_in_another_shape_than_the_pinned_system_message_is_refused_before_the_window_changes():
    memory = make()
    run(memory.add([{"role": "system", "content": "be brief"}, *turn(1)]))
    window = run(memory.get_messages())
    with pytest.raises(InvalidInput, match="message 1"):
        memory.load_state_dict({"messages": [{"role": "user", "content": [{"text": "a Bedrock message"}]}]})
    assert run(memory.get_messages()) == window


def test_messages_with_the_longest_ids_survive_every_rebuild(store_url):
    """A message added again gets a store key made from its id; an id near the limit must still fit."""
    memory = make(store_url, uuid.uuid4().hex)
    long = [{"id": k * (250 // len(k.encode())), "role": role, "content": f"{k} words"} for k, role in
            (("a", "user"), ("b", "assistant"), ("c", "user"), ("é", "assistant"))]
    run(memory.add(long))
    run(memory.truncate_to_size(3))
    assert run(memory.get_messages()) == long[1:]
    run(memory.delete(0))
    assert run(memory.get_messages()) == long[2:]
    kept = run(memory.get_messages())
    run(memory.clear())
    run(memory.add(kept))  # MassGen's compressor: back into the window
    run(memory.add(kept[0], allow_duplicates=True))
    assert run(memory.get_messages()) == [*kept, kept[0]]
    memory.load_state_dict({"messages": long[:2]})
    assert run(memory.get_messages()) == long[:2]


@pytest.mark.parametrize("bad_id,error", [
    ("a\x00b", "message 1: 'id' contains a NUL character (not allowed in identifiers)"),
    ("é" * 129, "message 1: 'id' is 258 bytes long; identifiers are at most 256 bytes"),
    ("x\ud800", "message 1: 'id' is not valid Unicode (a lone surrogate"),
])
def test_a_bad_id_is_named_alike_by_both_twins_on_every_backend(store_url, bad_id, error):
    memory = make(store_url, uuid.uuid4().hex)
    batch = [{"role": "user", "content": "fine"}, {"role": "assistant", "content": "bad", "id": bad_id}]
    for add in (lambda: run(memory.add(batch)), lambda: memory.sync.add(batch)):
        with pytest.raises(InvalidInput) as info:
            add()
        assert str(info.value).startswith(error)
    assert run(memory.get_messages()) == [] and memory.store.count(memory.scope) == 0


def test_a_session_named_as_long_term_memorys_change_log_is_refused(tmp_path):
    # a conversation under "_log.facts" would write its messages into the owner's facts change log, which
    # long-term memory then reads as changes of its facts
    url = f"sqlite:///{tmp_path}/m.db"
    for make in (SyncConversationMemory, ConversationMemory):
        with pytest.raises(InvalidInput, match=r"'session_id' '_log\.facts' is reserved"):
            make(url, "_log.facts", user_id="ann")
    with SyncConversationMemory(url, "log.facts", user_id="ann") as memory:  # only the prefix is reserved
        memory.add([{"role": "user", "content": "hello"}])
        assert len(memory) == 1


def test_messages_that_are_not_dicts_raise_what_massgen_raises(store_url):
    """MassGen's ``ConversationMemory.add`` raises ``TypeError`` for messages that are not a dict or a list of
    dicts (its documented contract, which its callers catch): ours is a ``TypeError`` too, as well as the
    fullrecall error naming the message (it was only an ``InvalidInput``, a ``ValueError``).
    """
    memory = make(store_url, uuid.uuid4().hex)
    run(memory.add(turn(1)))
    window = run(memory.get_messages())
    for bad, error in [("hello", "add: messages must be a dict or a list of dicts, got str"),
                       (5, "add: messages must be a dict or a list of dicts, got int"),
                       ([{"role": "user", "content": "fine"}, "x"], "message 1: must be a dict, got str"),
                       ([{"role": "user", "content": "fine"}, None], "message 1: must be a dict, got NoneType")]:
        with pytest.raises(TypeError) as info:
            run(memory.add(bad))
        assert isinstance(info.value, InvalidInput) and str(info.value) == error
    assert run(memory.get_messages()) == window and memory.store.count(memory.scope) == 2


def test_the_window_reads_as_massgens_messages_attribute(store_url):
    """MassGen's ``ConversationMemory`` keeps its messages in a public ``messages`` list, which its users read
    (``memory.messages == []``): ours reads the window there too (copies; it raised AttributeError).
    """
    memory = make(store_url, uuid.uuid4().hex)
    assert memory.messages == []
    run(memory.add(turn(1)))
    assert memory.messages == run(memory.get_messages())
    memory.messages[0]["content"] = "changed"  # a copy: change the window through add, delete, ...
    assert contents(memory.messages) == ["question 1", "answer 1"]
    with pytest.raises(AttributeError):
        memory.messages = []  # not a list to replace: load_state_dict({"messages": [...]}) does that


class RacedStore:
    """A real store handle on which another writer's ``add`` lands just before this writer's first lookup of
    ``ids``: the moment after it read the window, before it asked which of its ids are logged.
    """

    def __init__(self, inner, ids: list[str], other_add) -> None:
        self.inner, self.ids, self.other_add = inner, ids, other_add

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get(self, scope, ids, *args, **kwargs):
        ids = list(ids)
        if ids == self.ids and self.other_add is not None:
            other_add, self.other_add = self.other_add, None
            other_add()
        return self.inner.get(scope, ids, *args, **kwargs)


def test_one_id_added_by_two_writers_at_once_is_stored_once(store_url):
    """Another writer adds the id after this one read the window and before it looked the id up in the log: it is
    the window's, so nothing new is stored (it was taken for a message back into the window and stored twice,
    "req-1" and "req-1@0", both in the window).
    """
    message = {"role": "user", "content": "pay invoice 77", "id": "req-1"}
    other = make(store_url)
    inner = other.store
    raced = make(RacedStore(inner, ["req-1"], lambda: run(other.add(dict(message)))))
    try:
        run(raced.add(dict(message)))
        assert [row.id for row in inner.range(raced.scope, 0, 10**9)] == ["req-1"]
        assert contents(run(raced.get_messages())) == ["pay invoice 77"]
        assert contents(run(other.get_messages())) == ["pay invoice 77"]
    finally:
        raced.close()
        other.close()
