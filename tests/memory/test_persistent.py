"""PersistentMemory: MassGen's interface over a verbatim, scoped, cross-session memory."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fullrecall import MemoryInputError, MemoryTools, MessageFormatError, PersistentMemory
from fullrecall.stores import open_store

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import Reply, ScriptedServer, completion

run = asyncio.run


def memory(store, embedder, **kw):
    return PersistentMemory(store=store, embedder=embedder, **kw)


def test_memory_survives_a_restart_and_spans_sessions_without_any_llm(tmp_path, default_embedder, monkeypatch):
    server = ScriptedServer()  # an LLM endpoint the environment points at: it must never be called
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("FULLRECALL_LLM_MODEL", "scripted")
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    try:
        first = memory(url, default_embedder, user_id="u1", agent_id="assistant", session_id="monday")
        run(first.record([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Remember that I like Python. My locker code is 4417."},
            {"role": "assistant", "content": "Noted: Python, and locker 4417."},
        ]))
        first.close()

        later = memory(url, default_embedder, user_name="u1", agent_name="assistant")  # a new process, a new session
        assert later.session_id != "monday"
        context = run(later.retrieve([{"role": "user", "content": "What is my locker code?"}]))
        assert "4417" in context and "You are a helpful assistant" not in context
        assert "[fact] I like Python." in run(later.retrieve("which programming language do I like?"))
        hits = later.search("locker code")
        assert {h.session_id for h in hits if h.kind == "message"} == {"monday"}
        assert all(h.score >= 0 for h in hits)
        later.close()
    finally:
        server.close()
    assert server.requests == []


def test_a_configured_chat_model_extracts_facts_and_its_failure_loses_no_words(default_embedder, caplog):
    from fullrecall.summarizers.chat_models.openai import OpenAIChatModel

    server = ScriptedServer()
    try:
        model = OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", max_retries=0)
        mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s", chat_model=model)
        answer = [{"source": 0, "attribute": "team", "value": "the Owls", "text": "The user supports the Owls."}]
        server.script(completion(json.dumps(answer)), Reply(status=500, body=b"down"))
        run(mem.record([{"role": "user", "content": "Go the Owls! Best team ever."}]))
        run(mem.record([{"role": "user", "content": "I moved to Quito."}]))
        assert [(f.text, f.origin) for f in mem.facts.history()] == [("The user supports the Owls.", "llm")]
        assert len(mem.messages()) == 2 and "could not extract facts" in caplog.text
        assert len(server.requests) == 2
        run(mem.retrieve("which team?"))
        assert len(server.requests) == 2  # retrieving never calls the model
    finally:
        server.close()


def test_a_record_waiting_for_its_fact_model_leaves_the_event_loop_free(default_embedder, beating):
    """``await record(...)`` with a chat model extracting facts waited for the model on the event loop: every
    other coroutine of the agent (another user's stream, a heartbeat) stood still for the whole call. Such a
    record runs on a worker thread; the calls that use no model take milliseconds.
    """
    from fullrecall.summarizers.chat_models.openai import OpenAIChatModel

    server = ScriptedServer()
    try:
        model = OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", max_retries=0)
        mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s", chat_model=model)
        slow = completion(json.dumps([{"source": 0, "attribute": "team", "value": "the Owls",
                                       "text": "The user supports the Owls."}]))
        slow.delay = 1.0
        server.script(slow)

        async def work() -> list[Any]:
            return [await mem.record([{"role": "user", "content": "Go the Owls! Best team ever."}]),
                    await mem.retrieve("the Owls"),
                    await mem.save_to_memory("worth keeping", "The user's locker code is 4417."),
                    await mem.recall_from_memory(["locker code"])]

        (ids, context, saved, recalled), longest_pause = beating(work)
        assert len(ids) == 1 and "The user supports the Owls." in context
        assert saved["success"] and "The user's locker code is 4417." in recalled["memories"]
        assert longest_pause < 0.5  # the model took a second: the loop went on
    finally:
        server.close()


def test_record_skips_system_none_and_empty_and_never_fails_on_metadata_none(default_embedder):
    mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s")
    ids = run(mem.record([
        None, {"role": "system", "content": "rules"}, {"role": "user", "content": "   "},
        {"role": "assistant", "content": None}, {"role": "user", "content": "the blue door"},
    ], metadata=None, memory_type="semantic", infer=True))
    assert len(ids) == 1 and [m.data for m in mem.messages()] == [{"role": "user", "content": "the blue door"}]
    assert run(mem.record([])) == [] and run(mem.record(None)) == []
    run(mem.record({"role": "user", "content": "a single message"}, metadata={"turn": 2}))
    assert [m.metadata.get("turn") for m in mem.messages()] == [None, 2]
    mixed = [{"role": "user", "content": "My boat is Ariel."}, {"role": "user", "content": [{"text": "converse"}]}]
    run(mem.record(mixed))  # one turn, two shapes: each message is read in its own
    assert [m.data for m in mem.messages()][-2:] == mixed and mem.facts.current(attribute="boat")[0].value == "Ariel"


def test_a_retried_turn_is_stored_once(default_embedder):
    mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s")
    turn = [{"role": "user", "content": "My city is Oslo."}, {"role": "assistant", "content": "ok"}]
    first = run(mem.record(turn, metadata={"turn": 1}))
    assert run(mem.record(turn, metadata={"turn": 1})) == first
    run(mem.record([{"role": "user", "content": "ok"}], metadata={"turn": 2}))  # same words, another turn
    with_ids = [{"role": "user", "content": "ok", "id": "msg_1"}]
    assert run(mem.record(with_ids)) == run(mem.record(with_ids))
    int_id = [{"role": "user", "content": "ok", "id": 7}]  # an integer id is the message's own too
    assert run(mem.record(int_id)) == run(mem.record(int_id)) != run(mem.record([{**int_id[0], "id": "7"}]))
    run(mem.record([{"role": "user", "content": "new words"}], metadata={"turn": 1}))  # a reused number keeps them
    assert len(mem.messages()) == 7 and [f.mentions for f in mem.facts.history()] == [1]
    other = memory(mem.store, default_embedder, user_id="u", session_id="s2")  # the same turn number elsewhere
    assert set(run(other.record(turn, metadata={"turn": 1}))).isdisjoint(first)


def test_an_id_given_twice_in_one_turn_is_one_message_and_two_messages_under_it_are_refused(store_url,
                                                                                          default_embedder):
    """One call naming one id twice: the same message twice is stored once (both places return its id); two
    different messages under one id are refused, naming the second, and nothing is written. The last one given
    used to be kept silently, the other acknowledged and lost (a conversation's append refused the same batch)."""
    mem = memory(store_url, default_embedder, user_id="u", session_id="s")
    said = {"role": "user", "content": "My city is Oslo.", "id": "a"}
    ids = run(mem.record([said, {"role": "user", "content": "Where is the gate?", "id": "b"}, dict(said)]))
    assert ids[0] == ids[2] != ids[1]
    assert [m.data for m in mem.messages()] == [said, {"role": "user", "content": "Where is the gate?", "id": "b"}]
    assert mem.store.stats(replace(mem.owner, session_id="s"))["vector_count"] == 2
    other = memory(store_url, default_embedder, user_id="u", session_id="s2")
    turn = [{"role": "user", "content": "What is the vault combination?", "id": "same"},
            {"role": "system", "content": "skipped"},
            {"role": "assistant", "content": "The vault combination is 31-7-12.", "id": "same"}]
    with pytest.raises(MessageFormatError, match="message 2: 'id' 'same' is also message 0's, a different message"):
        run(other.record(turn))
    assert other.store.count(replace(other.owner, session_id="s2")) == 0
    assert not [f for f in other.facts.history() if any(s["session_id"] == "s2" for s in f.sources)]


@pytest.mark.parametrize("bad", [1.5, "", "  ", True, None, "a\x00b"])
def test_an_id_no_message_may_have_is_refused_not_replaced(store_url, default_embedder, bad):
    """An ``id`` that a conversation refuses (a float, a blank string, a bool) was silently replaced by a fresh
    one: a retry of the turn stored the message again. It is refused by the same rule, naming the message."""
    mem = memory(store_url, default_embedder, user_id="u", session_id="s")
    turn = [{"role": "system", "content": "skipped"}, {"role": "user", "content": "fine"},
            {"id": bad, "role": "user", "content": "retried"}]
    with pytest.raises(MessageFormatError, match="message 2: 'id'"):
        run(mem.record(turn))
    assert mem.store.count(replace(mem.owner, session_id="s")) == 0


def test_a_bad_message_is_named_and_nothing_is_written(default_embedder):
    mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s")
    with pytest.raises(MessageFormatError, match="message 2: 'role' is missing"):
        run(mem.record([{"role": "user", "content": "fine"}, {"role": "system", "content": "x"}, {"content": "no role"}]))
    with pytest.raises(MessageFormatError, match="message 1: 'timestamp' must be Unix seconds or ISO 8601"):
        run(mem.record([{"role": "user", "content": "fine"}, {"role": "user", "content": "x", "timestamp": "soon"}]))
    with pytest.raises(MemoryInputError, match="'metadata' must be a dict"):
        run(mem.record([{"role": "user", "content": "fine"}], metadata=["turn"]))
    for when in (float("nan"), float("inf"), 1e20, -1e20):
        with pytest.raises(MessageFormatError, match="message 1: 'created_at' must be Unix seconds"):
            run(mem.record([{"role": "user", "content": "fine"}, {"role": "user", "content": "x", "created_at": when}]))
    assert mem.messages() == [] and mem.facts.history() == [] and mem.stats()["message_count"] == 0


def test_a_timestamp_of_the_wrong_type_is_refused_not_taken_for_now(default_embedder):
    """A ``timestamp`` (or ``created_at``) that is neither Unix seconds nor an ISO 8601 string (``True``, a dict,
    a list) was silently replaced by now; it is named, with nothing written. ``None`` is no time, as before.
    """
    mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s")
    fine = {"role": "user", "content": "My city is Lyon"}
    for key in ("timestamp", "created_at"):
        for when in (True, False, {"at": 1}, [1700000000], b"2020-01-01"):
            with pytest.raises(MessageFormatError, match=f"message 1: '{key}' must be Unix seconds or ISO 8601, "
                                                         f"not {type(when).__name__}"):
                run(mem.record([fine, {"role": "user", "content": "x", key: when}]))
    with pytest.raises(MessageFormatError, match="message 0: 'timestamp' must be"):  # a good created_at aside
        run(mem.record([{**fine, "timestamp": True, "created_at": 1700000000}]))
    assert mem.messages() == [] and mem.facts.history() == [] and mem.sessions() == []
    before = time.time()
    run(mem.record([{**fine, "timestamp": None}, {"role": "user", "content": "then", "timestamp": 1700000000},
                    {"role": "user", "content": "iso", "created_at": "2020-01-01T00:00:00+02:00"}]))
    times = {m.data["content"]: m.created_at for m in mem.messages()}
    assert times["My city is Lyon"] >= before and times["then"] == 1700000000.0
    assert times["iso"] == 1577829600.0
    mem.close()


def test_what_no_store_could_keep_is_named_before_the_session_is_listed(store_url, default_embedder):
    """A value that is not JSON in a message or in ``metadata`` reached the store, which refused it as a bare
    InvalidInput after the turn was embedded and its session listed; now it is named first and nothing is left.
    """
    mem = memory(store_url, default_embedder, user_id="u", session_id="s")
    try:
        fine = {"role": "user", "content": "My city is Lyon"}
        with pytest.raises(MessageFormatError, match=r"^message 2: 'meta.deep\[1\]' is a set, not a JSON value"):
            run(mem.record([fine, {"role": "system", "content": "x"}, {**fine, "meta": {"deep": [1, {2}]}}]))
        with pytest.raises(MessageFormatError, match="^message 0: 'score' is nan"):
            run(mem.record([{**fine, "score": float("nan")}]))
        for metadata, error in [({"at": object()}, "'metadata.at' is a object"), ({"k": "\ud800"}, "'metadata.k' is not valid Unicode")]:
            with pytest.raises(MemoryInputError, match=f"^record: {error}"):
                run(mem.record([fine], metadata=metadata))
        assert mem.sessions() == [] and mem.messages() == [] and mem.facts.history() == []
    finally:
        mem.close()


def test_no_memory_crosses_users_on_any_backend(store_url, default_embedder):
    store = open_store(store_url)
    try:
        alice = memory(store, default_embedder, user_id="alice", agent_id="a", session_id="s1")
        bob = memory(store, default_embedder, user_id="bob", agent_id="a", session_id="s1")  # same session name
        nobody = memory(store, default_embedder, agent_id="a", session_id="s1")  # the default owner
        run(alice.record([{"role": "user", "content": "My passport number is X9-ALICE-771."}]))
        run(nobody.record([{"role": "user", "content": "My passport number is DEFAULT-000."}]))
        run(bob.record([{"role": "user", "content": "I enjoy sailing."}]))
        run(alice.save_to_memory("secret", ["Alice's vault PIN is 8080"]))

        for query in ("passport number", "vault PIN", "X9-ALICE-771"):
            bob_sees = run(bob.retrieve(query, limit=10)) + json.dumps(run(bob.recall_from_memory([query], 10)))
            assert "ALICE" not in bob_sees and "8080" not in bob_sees and "DEFAULT" not in bob_sees
            assert "ALICE" not in run(nobody.retrieve(query, limit=10))
        assert "X9-ALICE-771" in run(alice.retrieve("passport number"))
        assert "DEFAULT-000" not in run(alice.retrieve("passport number", limit=10))
        alice_id = alice.messages()[0].id
        assert bob.expand(alice_id) == [] and bob.clear(ids=[alice_id]) == {"messages": 0, "summaries": 0, "facts": 0}
        default_fact = nobody.facts.history()[0].id
        assert bob.clear(ids=[default_fact])["facts"] == 0 and nobody.facts.get(default_fact) is not None
        assert [m.id for m in alice.expand(alice_id)] == [alice_id]
        assert bob.stats()["message_count"] == 1 and bob.stats()["fact_count"] == 1
    finally:
        store.close()


def test_a_new_memory_warms_its_owner_in_the_background_and_answers_as_a_cold_one(store_url, default_embedder):
    """A memory made with ``warm`` (the default) has the store read its owner's search structures, and builds
    its facts' index, on a background thread; what it answers is what a memory that never warmed answers.
    """
    store = open_store(store_url)
    try:
        first = memory(store, default_embedder, user_id="alice", agent_id="a", session_id="s1", warm=False)
        run(first.record([{"role": "user", "content": "My passport number is X9-ALICE-771."},
                          {"role": "assistant", "content": "Noted, I will keep the passport number."}]))
        run(first.record([{"role": "user", "content": "I live in Lyon and I enjoy sailing."}]))
        calls, done = [], threading.Event()
        store_warm = store.warm

        def warm(scope):
            calls.append((scope, threading.current_thread().name))
            store_warm(scope)
            done.set()

        store.warm = warm
        warmed = memory(store, default_embedder, user_id="alice", agent_id="a", session_id="s2")
        assert done.wait(30)
        for _ in range(300):  # the facts' index follows the store's part on the same thread
            if warmed.facts._index is not None:
                break
            time.sleep(0.01)
        assert calls == [(warmed.owner, "fullrecall-memory-warm")] and warmed.facts._index is not None
        cold_store = open_store(store_url)
        try:
            cold = memory(cold_store, default_embedder, user_id="alice", agent_id="a", session_id="s3", warm=False)
            for query in ("passport number", "where does she live", "sailing"):
                assert run(warmed.retrieve(query)) == run(cold.retrieve(query))
                assert [h.to_dict() for h in warmed.search(query)] == [h.to_dict() for h in cold.search(query)]
        finally:
            cold_store.close()
        assert len(calls) == 1  # warmed once: searching asks for nothing more
    finally:
        store.close()


def test_a_warming_memory_reads_each_turn_it_records_in_the_background(store_url, default_embedder, monkeypatch):
    """After a turn is written, a memory made with ``warm`` warms its owner again on the warming thread (without
    the catch-up of the first warm, and only what the store keeps: ``kept_only``), so that the next search does
    not read the turn; a turn recorded while a warm waits or runs asks for no other. Answers are a cold memory's.
    """
    import fullrecall.memory.persistent as P

    catch_ups: list[str] = []
    catch_up = P.PersistentMemory._catch_up

    def counted(self: Any, *, own: bool) -> int:
        catch_ups.append(threading.current_thread().name)
        return catch_up(self, own=own)

    monkeypatch.setattr(P.PersistentMemory, "_catch_up", counted)
    store = open_store(store_url)
    calls, warmed, release, held = [], threading.Semaphore(0), threading.Event(), threading.Event()
    store_warm = store.warm

    def warm(scope, **options):
        calls.append((scope, threading.current_thread().name, options))
        if len(calls) == 3:
            held.set()
            assert release.wait(30)
        store_warm(scope, **options)
        warmed.release()

    store.warm = warm
    try:
        mem = memory(store, default_embedder, user_id="alice", agent_id="a", session_id="s1")
        assert warmed.acquire(timeout=30) and mem._warming.done.wait(30)  # the warm of a new memory
        run(mem.record([{"role": "user", "content": "My passport number is X9-ALICE-771."}]))
        assert warmed.acquire(timeout=30) and mem._warming.done.wait(30)  # and one after the turn, done
        run(mem.record([{"role": "user", "content": "I live in Lyon and I enjoy sailing."}]))
        assert held.wait(30)  # the third warm is under way, held: the turns recorded meanwhile ask for none
        run(mem.record([{"role": "user", "content": "My favourite colour is teal."}]))
        run(mem.record([{"role": "assistant", "content": "Noted: teal."}]))
        release.set()
        assert warmed.acquire(timeout=30)
        assert calls == [(mem.owner, "fullrecall-memory-warm", {})] + [
            (mem.owner, "fullrecall-memory-warm", {"kept_only": True})] * 2  # the first reads the owner whole
        for _ in range(300):
            if catch_ups:
                break
            time.sleep(0.01)
        assert catch_ups == ["fullrecall-memory-warm"]  # the first warm's alone
        cold_store = open_store(store_url)
        try:
            cold = memory(cold_store, default_embedder, user_id="alice", agent_id="a", session_id="s2", warm=False)
            for query in ("passport number", "where does she live", "favourite colour"):
                assert run(mem.retrieve(query)) == run(cold.retrieve(query))
        finally:
            cold_store.close()
        assert len(calls) == 3
    finally:
        release.set()
        store.close()


def recorded_through_an_outage(store: Any, embedder: Any) -> PersistentMemory:
    """A memory of ann's session s1 that recorded one turn, then one while ``embedder`` was down (it raised)."""
    mem = memory(store, embedder, user_id="ann", agent_id="a", session_id="s1", warm=False)
    run(mem.record([{"role": "user", "content": "I like sailing on weekends."}]))
    embedder.fail = True
    with pytest.raises(ConnectionError):
        run(mem.record([{"role": "user", "content": "My passport number is X9-771."}]))
    embedder.fail = False
    return mem


def test_a_turn_recorded_during_an_embedding_outage_is_embedded_by_the_next_record(store_url, flaky_embedder):
    """``record`` stores a turn's words before it embeds them: when the embedding failed, it raised and the words
    stayed without a vector for good, found by no question that shares none of their words.
    """
    from fullrecall.stores import Scope

    embedder = flaky_embedder
    store = open_store(store_url)
    try:
        mem = recorded_through_an_outage(store, embedder)
        assert [m.text for m in mem.messages()][-1].endswith("My passport number is X9-771.")  # the words are kept
        run(mem.record([{"role": "user", "content": "I live in Lyon."}]))
        counts = store.stats(Scope(user_id="ann", agent_id="a", session_id="s1"))
        assert counts["vector_count"] == counts["message_count"] == 3
        assert "X9-771" in run(mem.retrieve("travel document identifier"))
        assert [(f.attribute, f.value, f.mentions) for f in mem.facts.current() if f.attribute] == [
            ("passport number", "X9-771", 1), ("lives in", "Lyon", 1)]  # the failed turn's fact learned too
    finally:
        store.close()


def test_a_new_memory_embeds_what_a_process_that_died_left_without_vectors(store_url, flaky_embedder, monkeypatch):
    """A process that died between a turn's words and their vectors left them unembedded for good: the warming
    thread of the owner's next memory embeds them (a message recorded in the last ``IN_FLIGHT_S`` seconds by
    another writer is left to it: its vectors may be on their way).
    """
    import fullrecall.memory.persistent as P
    from fullrecall.stores import Scope

    scope = Scope(user_id="ann", agent_id="a", session_id="s1")
    embedder = flaky_embedder
    store = open_store(store_url)
    try:
        recorded_through_an_outage(store, embedder)  # then the process died
        assert memory(store, embedder, user_id="ann", agent_id="a", session_id="s2", warm=False).catch_up() == 0
        monkeypatch.setattr(P, "IN_FLIGHT_S", 0.0)  # as a while later
        warmed = memory(store, embedder, user_id="ann", agent_id="a", session_id="s2")  # catches up in the back
        def learned() -> list:  # the catch-up writes the vectors, then the facts they state
            return [f for f in warmed.facts.current() if f.attribute == "passport number"]

        for _ in range(1000):
            if store.stats(scope)["vector_count"] == 2 and learned():
                break
            time.sleep(0.02)
        assert store.stats(scope)["vector_count"] == store.stats(scope)["message_count"] == 2
        assert "X9-771" in run(warmed.retrieve("travel document identifier"))
        [fact] = learned()  # learned by the catch-up
        [source] = fact.sources
        assert (fact.value, source["session_id"]) == ("X9-771", "s1")
        assert [m.text for m in warmed.expand(fact.id)][0].endswith("My passport number is X9-771.")
    finally:
        store.close()


def test_a_first_search_drops_a_warm_not_begun_and_waits_for_one_under_way(tmp_path, default_embedder):
    """One thread warms memories in turn: a memory whose search comes while its warm waits behind another's reads
    what it needs itself (its warm never runs), and one whose warm is under way waits for it, never reading the
    same beside it.
    """
    stores = [open_store(f"sqlite:///{tmp_path / f'{name}.db'}") for name in ("a", "b")]
    order, release, started = [], threading.Event(), threading.Event()
    try:
        for i, store in enumerate(stores):
            store_warm = store.warm

            def warm(scope, i=i, store_warm=store_warm):
                order.append(("begin", i))
                started.set()
                if i == 0:
                    assert release.wait(30)
                store_warm(scope)
                order.append(("end", i))

            store.warm = warm
        first = memory(stores[0], default_embedder, user_id="u", agent_id="a")
        assert started.wait(30)  # the first warm is under way, held
        second = memory(stores[1], default_embedder, user_id="u", agent_id="a")  # queued behind it
        assert second.search("anything") == []
        assert order == [("begin", 0)]  # the second's warm was dropped, not waited for
        searching = threading.Thread(target=first.search, args=("anything",))
        searching.start()
        time.sleep(0.2)
        assert searching.is_alive()  # the first's search waits for its warm
        release.set()
        searching.join(30)
        assert not searching.is_alive() and order == [("begin", 0), ("end", 0)]
        time.sleep(0.2)
        assert order == [("begin", 0), ("end", 0)]  # and the dropped one never runs
    finally:
        release.set()
        for store in stores:
            store.close()


def test_previous_winners_memories_are_marked_and_turn_filtered(default_embedder):
    store = open_store("sqlite:///:memory:")
    a = memory(store, default_embedder, user_id="u", agent_id="agent_a", session_id="s")
    b = memory(store, default_embedder, user_id="u", agent_id="agent_b", session_id="s")
    run(b.record([{"role": "assistant", "content": "The answer is 42 because of the towel."}], metadata={"turn": 1}))
    run(b.record([{"role": "assistant", "content": "The answer is 41 because of the spoon."}], metadata={"turn": 2}))
    assert run(a.retrieve("what is the answer?")) == ""
    context = run(a.retrieve("what is the answer?", previous_winners=[{"agent_id": "agent_b", "turn": 1},
                                                                    {"agent_id": "agent_a", "turn": 1}]))
    assert context.startswith("[From agent_b Turn 1]") and "towel" in context and "spoon" not in context


def test_a_winners_turn_is_found_however_many_better_matches_its_other_turns_hold(store_url, default_embedder):
    """MassGen filters a winner's memory by turn in the store: the turn's messages are found even when the
    winner's other turns hold more than a few times ``limit`` better matches (they were cut before the filter).
    """
    store = open_store(store_url)
    try:
        a = memory(store, default_embedder, user_id="u", agent_id="agent_a", session_id="s", extract_facts=False)
        b = memory(store, default_embedder, user_id="u", agent_id="agent_b", session_id="s", extract_facts=False)
        for t in range(1, 31):
            run(b.record([{"role": "assistant", "content": f"The weather report {t}: sunny weather all day."}],
                         metadata={"turn": t}))
        run(b.record([{"role": "assistant", "content": "Pack an umbrella, the weather may turn."}], metadata={"turn": 31}))
        context = run(a.retrieve("weather report", limit=2, previous_winners=[{"agent_id": "agent_b", "turn": 31}]))
        assert context.startswith("[From agent_b Turn 31]") and "umbrella" in context and "sunny" not in context
        assert run(a.retrieve("weather report", limit=2, previous_winners=[{"agent_id": "agent_b", "turn": 99}])) == ""
    finally:
        store.close()


def test_a_refused_fact_leaves_no_session_behind(store_url, default_embedder):
    """``remember`` (the agent tool too) of a fact refused by name listed the session all the same."""
    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="s")
    try:
        for bad in ("bad \ud800", "   "):
            with pytest.raises(MemoryInputError, match="fact"):
                mem.remember(bad)
        assert "error" in MemoryTools(mem).call("remember", {"fact": "bad \udfff"})
        assert mem.sessions() == [] and mem.stats()["session_count"] == 0
        mem.remember("My city is Lyon")
        assert mem.sessions() == ["s"]
    finally:
        mem.close()


def test_save_and_recall_keep_massgen_shapes(default_embedder):
    mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s")
    saved = run(mem.save_to_memory("user told me their birthday", ["User's birthday is March 15", "User owns a red bike"]))
    assert saved["success"] is True and len(saved["memory_ids"]) == 2 and "2 items" in saved["message"]
    recalled = run(mem.recall_from_memory(["birthday", "bicycle"], limit=1))
    assert recalled == {"success": True, "memories": ["User's birthday is March 15", "User owns a red bike"], "count": 2}
    bad = run(mem.save_to_memory("x", ["ok", ""]))
    assert bad["success"] is False and "content item 1" in bad["message"] and bad["memory_ids"] == []
    assert len(mem.facts.history()) == 2


def test_a_message_of_the_epoch_keeps_its_time(store_url, default_embedder):
    """A ``timestamp`` of 0 (or 1970-01-01 in ISO 8601) is a time like any other: it was taken for none (now)."""
    mem = memory(store_url, default_embedder, user_id="u", session_id="s", extract_facts=False)
    try:
        run(mem.record([{"role": "user", "content": "epoch seconds", "timestamp": 0},
                        {"role": "user", "content": "epoch text", "created_at": "1970-01-01T00:00:00Z"}]))
        assert sorted((m.data["content"], m.created_at) for m in mem.messages()) == [
            ("epoch seconds", 0.0), ("epoch text", 0.0)]
        assert [m.data["content"] for m in mem.messages(until=1)] == ["epoch seconds", "epoch text"]
    finally:
        mem.close()


def test_selective_clearing_by_role_time_session_and_id(default_embedder):
    store = open_store("sqlite:///:memory:")
    one = memory(store, default_embedder, user_id="u", session_id="one")
    two = memory(store, default_embedder, user_id="u", session_id="two")
    old = {"role": "user", "content": "old question", "timestamp": "2020-01-01T00:00:00Z"}
    run(one.record([old, {"role": "assistant", "content": "old answer"}]))
    run(two.record([{"role": "user", "content": "new question"}, {"role": "assistant", "content": "new answer"}]))
    def texts() -> list[str]:
        return sorted(m.data["content"] for m in one.messages())

    assert len(texts()) == 4 and one.sessions() == ["one", "two"]

    assert one.clear(roles=["assistant"], session_id="two") == {"messages": 1, "summaries": 0, "facts": 0}
    assert texts() == ["new question", "old answer", "old question"]
    before_2021 = time.mktime((2021, 1, 1, 0, 0, 0, 0, 0, 0))
    assert [m.data["content"] for m in one.messages(until=before_2021)] == ["old question"]
    assert [m.data["content"] for m in one.messages(since=before_2021, roles=["user"])] == ["new question"]
    assert one.clear(until=before_2021)["messages"] == 1
    fact = one.remember("My car is a Volvo")
    target = [m.id for m in one.messages() if m.data["content"] == "new question"]
    assert one.clear(ids=target + [fact.id]) == {"messages": 1, "summaries": 0, "facts": 1}
    assert one.facts.history() == [] and "new question" not in texts()
    assert one.clear()["messages"] >= 1 and one.messages() == [] and two.stats()["session_count"] == 0


def test_a_criterion_given_as_one_string_is_refused_not_read_as_letters(store_url, default_embedder):
    mem = memory(store_url, default_embedder, user_id="u", session_id="s")
    try:
        first = run(mem.record([{"role": "user", "content": "keep me"}, {"role": "user", "content": "and me"}]))[0]
        for criterion in ({"roles": "user"}, {"ids": "mx"}, {"ids": [1]}, {"roles": 5}):
            with pytest.raises(MemoryInputError, match=f"'{next(iter(criterion))}' must be a list of strings"):
                mem.clear(**criterion)
            with pytest.raises(MemoryInputError, match="must be a list of strings"):
                mem.messages(**criterion)
        assert len(mem.messages()) == 2 and len(mem.messages(roles=["user"], ids=(i for i in [first]))) == 1
    finally:
        mem.close()


def test_an_empty_session_id_reads_every_session_and_clears_nothing(store_url, default_embedder):
    """``messages(session_id="")`` raised "this write needs a session" from a read. An empty session id means what
    leaving it out means for reads, as in ``expand``; ``clear`` refuses it by name (read as "every session", a
    script's empty variable would delete them all), and deletes nothing."""
    store = open_store(store_url)
    one = memory(store, default_embedder, user_id="u", session_id="one")
    two = memory(store, default_embedder, user_id="u", session_id="two")
    try:
        run(one.record([{"role": "user", "content": "first question"}, {"role": "assistant", "content": "an answer"}]))
        run(two.record([{"role": "user", "content": "second question"}]))
        every = one.messages()
        assert len(every) == 3 and one.messages(session_id="") == every
        users = one.messages(roles=["user"])
        assert len(users) == 2 and one.messages(session_id="", roles=["user"]) == users
        assert one.messages(session_id="", ids=[every[0].id]) == one.messages(ids=[every[0].id])
        for criteria in ({}, {"roles": ["user"]}, {"ids": [every[0].id]}):
            with pytest.raises(MemoryInputError, match="clear: 'session_id' is empty"):
                one.clear(session_id="", **criteria)
        assert one.messages() == every
    finally:
        one.close()
        two.close()
        store.close()


def test_export_then_import_into_another_store_keeps_everything(tmp_path, default_embedder):
    src = memory("sqlite:///:memory:", default_embedder, user_id="u", agent_id="a", session_id="s1")
    run(src.record([{"role": "user", "content": "My city is Paris. The wifi password is tulip-88."}]))
    src.remember("My city is Lyon")
    path = tmp_path / "memory.jsonl"
    assert src.export_jsonl(path) == 3
    dst = memory(f"sqlite:///{tmp_path / 'other.db'}", default_embedder, user_id="u", agent_id="a")
    assert dst.import_jsonl(path) == {"messages": 1, "written": 1, "facts": 2, "facts_written": 2}
    assert dst.import_jsonl(path) == {"messages": 1, "written": 0, "facts": 2, "facts_written": 0}  # idempotent
    assert [(m.id, m.data) for m in dst.messages()] == [(m.id, m.data) for m in src.messages()]
    assert [(f.id, f.value, f.valid_to) for f in dst.facts.history()] == [
        (f.id, f.value, f.valid_to) for f in src.facts.history()]
    assert "tulip-88" in run(dst.retrieve("wifi password"))
    assert [f.value for f in dst.facts.current(attribute="city")] == ["Lyon"]

    lines = path.read_text().splitlines()  # the format line, a message, two facts, the end line
    bad = io.StringIO("\n".join([*lines[:-1], '{"kind": "message", "id": "x"}', lines[-1]]))
    fresh = memory("sqlite:///:memory:", default_embedder, user_id="u")
    with pytest.raises(MemoryInputError, match="line 5: 'session_id' must be a non-empty string"):
        fresh.import_jsonl(bad)
    assert fresh.messages() == [] and fresh.facts.history() == []


def test_an_import_counts_what_it_wrote_apart_from_what_it_read(store_url, default_embedder):
    """Imported into another owner who already holds a message of the same session and id, the message was
    skipped but counted as imported: the counts say what the file held and, apart, what was written.
    """
    src = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="s1")
    dst = memory(src.store, default_embedder, user_id="v", agent_id="a", session_id="s1")
    try:
        run(src.record([{"role": "user", "content": "The gate code is 4471.", "id": "m1"},
                        {"role": "assistant", "content": "Noted.", "id": "m2"}]))
        src.remember("My city is Lyon")
        out = io.StringIO()
        src.export_jsonl(out)
        held = src.messages(ids=[src.messages()[0].id])[0]  # the other owner holds the first message already
        dst.store.append(replace(dst.owner, session_id="s1"), [replace(held, position=None, session_id=None)])
        city = src.facts.current(attribute="city")[0]
        assert dst.import_jsonl(io.StringIO(out.getvalue())) == {"messages": 2, "written": 1, "facts": 1,
                                                                 "facts_written": 1}
        assert sorted(m.data["content"] for m in dst.messages()) == ["Noted.", "The gate code is 4471."]
        assert [f.id for f in dst.facts.current(attribute="city")] == [city.id]
        assert dst.import_jsonl(io.StringIO(out.getvalue())) == {"messages": 2, "written": 0, "facts": 1,
                                                                 "facts_written": 0}
    finally:
        src.close()


def test_restoring_an_old_backup_leaves_one_current_value_per_attribute(store_url, default_embedder):
    """A backup taken while Paris was the city, imported after the user moved to Lyon: Lyon stays the one
    current city (the import wrote Paris back as current beside it, and search answered both).
    """
    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="s")
    other = memory(mem.store, default_embedder, user_id="v", agent_id="a", session_id="s")
    try:
        paris = mem.remember("My city is Paris", valid_from=time.time() - 100)  # Lyon since, 10 s later
        backup = io.StringIO()
        mem.export_jsonl(backup)
        lyon = mem.remember("My city is Lyon", valid_from=paris.valid_from + 10)
        other.remember("My city is Oslo", valid_from=paris.valid_from - 10)
        merged = io.StringIO()
        other.export_jsonl(merged)
        for file in (backup, merged):
            mem.import_jsonl(io.StringIO(file.getvalue()))
            assert [f.id for f in mem.facts.current(attribute="city")] == [lyon.id]
            assert [h.text for h in mem.search("which city?") if h.kind == "fact"] == ["My city is Lyon"]
        assert mem.facts.get(paris.id).superseded_by == lyon.id
        fresh = memory(mem.store, default_embedder, user_id="u", agent_id="a", session_id="s2")  # another process
        assert [f.id for f in fresh.facts.current(attribute="city")] == [lyon.id]
    finally:
        mem.close()


def test_an_export_cut_short_is_refused_and_nothing_of_it_is_written(tmp_path, default_embedder):
    src = memory("sqlite:///:memory:", default_embedder, user_id="u", agent_id="a", session_id="s1")
    run(src.record([{"role": "user", "content": "The gate code is 4471."}, {"role": "assistant", "content": "Noted."}]))
    src.remember("My city is Lyon")
    out = io.StringIO()
    assert src.export_jsonl(out) == 3
    lines = out.getvalue().splitlines()
    assert json.loads(lines[-1]) == {"kind": "end", "messages": 2, "facts": 1}
    fresh = memory("sqlite:///:memory:", default_embedder, user_id="u", agent_id="a")
    for cut in range(1, len(lines)):  # cut at every line boundary before the end line
        with pytest.raises(MemoryInputError, match="cut short"):
            fresh.import_jsonl(io.StringIO("\n".join(lines[:cut]) + "\n"))
    dropped = lines[:1] + lines[2:]  # a message lost in the middle
    with pytest.raises(MemoryInputError, match="line 4: the end line counts 2 messages and 1 facts"):
        fresh.import_jsonl(io.StringIO("\n".join(dropped)))
    with pytest.raises(MemoryInputError, match="line 6: a line after the end line"):
        fresh.import_jsonl(io.StringIO("\n".join([*lines, lines[1]])))
    assert fresh.messages() == [] and fresh.facts.history() == []
    assert fresh.import_jsonl(io.StringIO("\n".join(lines[1:-1]))) == {  # no format line: an older file
        "messages": 2, "written": 2, "facts": 1, "facts_written": 1}
    assert fresh.import_jsonl(io.StringIO(out.getvalue())) == {"messages": 2, "written": 0, "facts": 1,
                                                                "facts_written": 0}


def test_stats_count_what_is_kept(default_embedder):
    mem = memory("sqlite:///:memory:", default_embedder, user_id="u", session_id="s")
    run(mem.record([{"role": "user", "content": "My dog is Rex."}, {"role": "assistant", "content": "Nice!"}]))
    run(mem.record([{"role": "user", "content": "My dog is Max now."}]))
    stats = mem.stats()
    assert stats["message_count"] == 3 and stats["messages_by_role"] == {"user": 2, "assistant": 1}
    assert stats["session_count"] == 1 and (stats["fact_count"], stats["current_fact_count"]) == (2, 1)
    assert stats["text_bytes"] > 0 and stats["vector_bytes"] > 0 and stats["oldest"] <= stats["newest"]


def test_names_may_be_given_either_way_but_must_agree(default_embedder):
    assert memory("sqlite:///:memory:", default_embedder, user_name="u", agent_id="a").owner.user_id == "u"
    with pytest.raises(MemoryInputError, match="user_id='u' and user_name='v' disagree"):
        memory("sqlite:///:memory:", default_embedder, user_id="u", user_name="v")


def test_concurrent_writers_all_land(tmp_path, default_embedder):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    open_store(url).close()
    barrier = threading.Barrier(4)

    def write(w: int) -> None:
        store = open_store(url)
        mem = memory(store, default_embedder, user_id="u", agent_id="a", session_id="shared")
        barrier.wait()
        for turn in range(5):
            mem.record_sync([{"role": "user", "content": f"writer {w} turn {turn}"},
                             {"role": "assistant", "content": f"reply {w}.{turn}"}], {"turn": f"{w}-{turn}"})
        store.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader = memory(url, default_embedder, user_id="u", agent_id="a")
    stored = reader.messages(session_id="shared")
    assert len(stored) == 40 and sorted(m.position for m in stored) == list(range(40))
    assert reader.sessions() == ["shared"]
    assert "writer 3 turn 4" in run(reader.retrieve("writer 3 turn 4", limit=3))


@settings(max_examples=15)
@given(st.lists(st.tuples(st.sampled_from(["alice", "bob", ""]), st.integers(100, 999)), min_size=1, max_size=6,
                unique_by=lambda t: t[1]))
def test_whatever_is_recorded_only_its_owner_finds_it(default_embedder, notes):
    store = open_store("sqlite:///:memory:")
    owners = {u: memory(store, default_embedder, user_id=u or None, agent_id="a", session_id="s") for u in
              ("alice", "bob", "")}
    for user, code in notes:
        run(owners[user].record([{"role": "user", "content": f"My code word is zx{code}."}]))
    for user, mem in owners.items():
        mine = {f"zx{c}" for u, c in notes if u == user}
        for _, code in notes:
            found = run(mem.retrieve(f"code word zx{code}", limit=10)) + json.dumps(mem.stats())
            assert {w for w in (f"zx{c}" for _, c in notes) if w in found} <= mine
    store.close()


def test_a_turn_recorded_after_a_full_clear_is_listed_again(tmp_path, default_embedder):
    mem = PersistentMemory("u", "a", "s1", store=f"sqlite:///{tmp_path / 'm.db'}", embedder=default_embedder)
    try:
        asyncio.run(mem.record([{"role": "user", "content": "hello"}]))
        mem.clear()
        assert mem.sessions() == [] and mem.messages() == []
        asyncio.run(mem.record([{"role": "user", "content": "hello again"}]))  # same memory object, same session
        assert mem.sessions() == ["s1"] and [m.text.endswith("hello again") for m in mem.messages()] == [True]
    finally:
        mem.close()


@pytest.mark.parametrize("line", [
    '{"kind": "message", "session_id": "s2", "id": "m2", "role": "user", "text": "\\ud800", "data": {}, '
    '"created_at": 1, "archived_at": 1}',
    '{"kind": "message", "session_id": "s2", "id": "m2", "role": "user", "text": "x", "data": {}, '
    '"created_at": 1, "archived_at": 1, "metadata": "ab"}',
    '{"kind": "message", "session_id": "s2", "id": "m2", "role": "user", "text": "x", "data": {}, '
    '"created_at": NaN, "archived_at": 1}',
    # times no date can be shown for (every later retrieve of the owner failed), or a bool taken for 1.0
    '{"kind": "message", "session_id": "s2", "id": "m2", "role": "user", "text": "x", "data": {}, '
    '"created_at": 1e300, "archived_at": 1}',
    '{"kind": "message", "session_id": "s2", "id": "m2", "role": "user", "text": "x", "data": {}, '
    '"created_at": 1, "archived_at": -1e20}',
    '{"kind": "message", "session_id": "s2", "id": "m2", "role": "user", "text": "x", "data": {}, '
    '"created_at": true, "archived_at": 1}',
    '{"kind": "fact", "id": "f1", "text": "I like tea", "valid_from": 1e300}',
    '{"kind": "fact", "id": "f1", "text": "I like tea", "valid_from": "abc"}',
    '{"kind": "fact", "id": "f1", "text": "I like tea", "sources": 5}',
    '{"kind": "fact", "id": "f1", "text": "I like tea", "mentions": "x"}',
    '{"kind": "fact", "id": "f1", "text": "\\udfff"}',
    '{"kind": "message", "session_id": "_log.facts", "id": "m2", "role": "user", "text": "x", '
    '"data": {"role": "user", "content": "x"}, "created_at": 1, "archived_at": 1}',
])
def test_an_import_checks_every_line_before_writing_anything(store_url, default_embedder, line):
    """A bad line 2 raises MemoryInputError naming it; line 1 (another session) is not written either."""
    good = ('{"kind": "message", "session_id": "s1", "id": "m1", "role": "user", "text": "fine", '
            '"data": {"role": "user", "content": "fine"}, "created_at": 1, "archived_at": 1}')
    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="s")
    try:
        with pytest.raises(MemoryInputError, match="line 2: '"):
            mem.import_jsonl(io.StringIO(good + "\n" + line + "\n"))
        assert mem.messages() == [] and mem.facts.history() == [] and mem.sessions() == []
    finally:
        mem.close()


def test_memorys_own_change_logs_are_no_session_of_the_owner(store_url, default_embedder):
    """A session id starting with ``_log.`` names memory's bookkeeping (the facts' change log): a memory opened
    on one, or a read or clear of one, is refused by name, so its events never show up as the owner's messages.
    """
    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="s")
    try:
        mem.remember("My city is Lyon")
        with pytest.raises(MemoryInputError, match="'session_id' '_log.facts' is reserved"):
            memory(mem.store, default_embedder, user_id="u", agent_id="a", session_id="_log.facts")
        for call in (lambda: mem.messages(session_id="_log.facts"), lambda: mem.clear(session_id="_log.facts"),
                     lambda: mem.expand("x", session_id="_log.facts")):
            with pytest.raises(MemoryInputError, match="reserved"):
                call()
        stats = mem.stats()
        assert mem.sessions() == ["s"] and stats["message_count"] == 0 and stats["messages_by_role"] == {}
        assert [f.text for f in mem.facts.current()] == ["My city is Lyon"]
    finally:
        mem.close()


def test_a_search_never_finds_memorys_own_change_logs(store_url, default_embedder):
    """The change logs' events (a fact's id, a session's name) are bookkeeping: a search across the owner's
    sessions finds the owner's messages only, however exactly the question names an event, on every backend.
    """
    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="monday")
    try:
        run(mem.record([{"role": "user", "content": "My city is Lyon."},
                        {"role": "assistant", "content": "Noted, Lyon it is."}]))
        fact = mem.facts.current()[0]
        for question in ("what did we say on monday?", fact.id, f"{fact.id} monday Lyon"):
            hits = mem.search(question, 10, kinds=("message",))
            assert hits and {h.session_id for h in hits} == {"monday"}, question
            assert {h.role for h in hits} <= {"user", "assistant"}, question
        assert "event" not in run(mem.retrieve("monday"))
    finally:
        mem.close()


def test_an_export_with_unicode_line_separators_imports_back_verbatim(store_url, default_embedder):
    """U+2028, U+2029 and U+0085 stay raw in an export line (JSON need not escape them): not line ends."""
    text = "one\u2028two\u2029three\x85four\x00five \U0001f600"
    src = memory("sqlite:///:memory:", default_embedder, user_id="u", agent_id="a", session_id="s")
    run(src.record([{"role": "user", "content": text}]))
    src.remember(f"My motto is {text}")
    out = io.StringIO()
    assert src.export_jsonl(out) == 2
    dst = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="s")
    try:
        assert dst.import_jsonl(io.StringIO(out.getvalue())) == {"messages": 1, "written": 1, "facts": 1, "facts_written": 1}
        assert [m.data["content"] for m in dst.messages()] == [text]
        assert [f.text for f in dst.facts.history()] == [f"My motto is {text}"]
    finally:
        dst.close()


def test_a_bad_query_or_limit_is_named_before_anything_is_embedded(store_url, default_embedder):
    mem = memory(store_url, default_embedder, user_id="u", session_id="s")
    try:
        run(mem.record([{"role": "user", "content": "My locker code is 4417."}]))
        for args, kwargs, error in [
            (("locker\ud800",), {}, "search: 'query' is not valid Unicode"),
            (("locker\ud800",), {"kinds": ("fact",)}, "search: 'query' is not valid Unicode"),
            (("locker", "3"), {}, "search: 'limit' must be an integer, got '3'"),
            ((5,), {}, "search: 'query' must be a str, a message or a list of them, got int"),
        ]:
            with pytest.raises(MemoryInputError, match=f"^{error}"):
                mem.search(*args, **kwargs)
        with pytest.raises(MemoryInputError, match="^search: 'query' is not valid Unicode"):
            run(mem.retrieve([{"role": "user", "content": "locker \udc00"}]))
        assert mem.search(None) == [] and "4417" in run(mem.retrieve("locker code"))
        with pytest.raises(MemoryInputError, match="^retrieve: 'previous_winners' must be a list of"):
            run(mem.retrieve("locker code", previous_winners="b"))
        for name in ("since", "until"):
            for value in ("1", float("nan"), True):
                with pytest.raises(MemoryInputError, match=f"^'{name}' must be Unix seconds"):
                    mem.messages(**{name: value})
                with pytest.raises(MemoryInputError, match=f"^'{name}' must be Unix seconds"):
                    mem.clear(**{name: value})
        for keywords, limit in ((5, 5), ("locker", "3")):  # a tool's bad argument: its answer says so
            answer = run(mem.recall_from_memory(keywords, limit))
            assert answer["success"] is False and answer["count"] == 0 and answer["message"]
        assert len(mem.messages()) == 1 and run(mem.recall_from_memory("locker"))["count"] >= 1
    finally:
        mem.close()


def test_a_session_whose_messages_were_all_cleared_is_no_longer_listed(store_url, default_embedder):
    """Cleared by role, by time or by id, a session left with no message and no fact from it is not listed
    (nor counted); one a fact still comes from stays listed until that fact goes; a new turn lists it again."""
    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="roles")
    try:
        run(mem.record([{"role": "assistant", "content": "Hello, how can I help?"},
                        {"role": "assistant", "content": "Anything else?"}]))
        old = memory(mem.store, default_embedder, user_id="u", agent_id="a", session_id="old")
        run(old.record([{"role": "user", "content": "an old question", "timestamp": "2020-01-01T00:00:00Z"}]))
        facty = memory(mem.store, default_embedder, user_id="u", agent_id="a", session_id="facty")
        run(facty.record([{"role": "user", "content": "My car is a Volvo."}]))
        kept = memory(mem.store, default_embedder, user_id="u", agent_id="a", session_id="kept")
        run(kept.record([{"role": "user", "content": "a question"}, {"role": "assistant", "content": "an answer"}]))
        (fact,) = mem.facts.history()
        assert mem.sessions() == ["roles", "old", "facty", "kept"]

        assert mem.clear(roles=["assistant"])["messages"] == 3  # every message of "roles", one of "kept"
        assert mem.clear(until=time.mktime((2021, 1, 1, 0, 0, 0, 0, 0, 0)))["messages"] == 1  # all of "old"
        assert mem.clear(session_id="facty")["messages"] == 1  # all of "facty", but the fact came from it
        assert mem.sessions() == ["facty", "kept"] and mem.stats()["session_count"] == 2
        assert memory(mem.store, default_embedder, user_id="u", agent_id="a").sessions() == ["facty", "kept"]

        assert mem.clear(ids=[fact.id])["facts"] == 1
        assert mem.sessions() == ["kept"]

        run(old.record([{"role": "user", "content": "a new question"}]))  # the same session, recorded again
        assert mem.sessions() == ["old", "kept"] and [m.session_id for m in mem.messages(roles=["user"])] == [
            "old", "kept"]
    finally:
        mem.close()


def test_messages_and_export_cover_every_conversation_of_the_owner(store_url, default_embedder, tmp_path):
    """A conversation of the owner that no long-term memory recorded into (kept by ConversationMemory, written by
    the service or an import) was found by search but left out of ``messages()``, ``export_jsonl`` and ``clear``."""
    from dataclasses import replace

    from fullrecall import SyncConversationMemory
    from fullrecall.stores import Scope, StoredMessage

    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="pm")
    try:
        run(mem.record([{"role": "user", "content": "recorded by long-term memory"}]))
        chat = SyncConversationMemory(mem.store, "chat", user_id="u", agent_id="a", summarizer=lambda m, p: "s",
                                      embedding_model=default_embedder)
        chat.add({"role": "user", "content": "said in a conversation"})
        imported = StoredMessage(id="i0", role="user", text="imported words", data={"content": "imported words"})
        mem.store.append(Scope(user_id="u", agent_id="a", session_id="imported"), [imported])
        mem.store.append(Scope(user_id="u", agent_id="b", session_id="other"), [replace(imported, id="b0")])
        assert mem.sessions() == ["pm", "chat", "imported"] and mem.stats()["session_count"] == 3
        assert [(m.session_id, m.text) for m in mem.messages(roles=["user"])][1:] == [
            ("chat", chat.store.range(chat.scope, 0, 0)[0].text), ("imported", "imported words")]
        path = tmp_path / "all.jsonl"
        assert mem.export_jsonl(path) == 3
        copy = memory("sqlite:///:memory:", default_embedder, user_id="u", agent_id="a")
        assert copy.import_jsonl(path)["messages"] == 3 and sorted(copy.sessions()) == ["chat", "imported", "pm"]
        assert mem.clear(roles=["user"])["messages"] == 3  # the same messages a read covers
        assert mem.messages() == [] and mem.store.count(Scope(user_id="u", agent_id="b")) == 1
    finally:
        mem.close()


def test_a_future_dated_fact_is_not_recalled_as_current_on_every_backend(store_url, default_embedder):
    mem = memory(store_url, default_embedder, user_id="u", agent_id="a", session_id="s")
    try:
        mem.remember("My office is in Paris")
        mem.remember("My office is in Berlin", valid_from=time.time() + 30 * 86400)  # from next month
        context = run(mem.retrieve("where is my office?"))
        assert "[fact] My office is in Paris" in context and "Berlin" not in context
        assert (mem.stats()["fact_count"], mem.stats()["current_fact_count"]) == (2, 1)
    finally:
        mem.close()


@pytest.mark.parametrize("held, file_is_newer", [("Paris", False), ("Lyon", False), ("Lyon", True)],
                         ids=["closed by the owner's newer fact", "folded into the owner's", "the owner's folded into it"])
def test_importing_a_file_again_writes_no_fact_the_first_import_settled(store_url, default_embedder, held,
                                                                        file_is_newer):
    """A fact the first import wrote and the owner's memory then settled (closed by the owner's newer value, or
    folded with the owner's fact of the same value) was written again by every later import of the same file and
    counted in ``facts_written``; a folded one added its mentions again each time, and the file's own fact, which
    the owner's had been folded into, lost the mentions it had gained. Now a second import writes nothing.
    """
    now = time.time()
    src = memory(store_url, default_embedder, user_id="ann", session_id="s")
    dst = memory(src.store, default_embedder, user_id="bob", session_id="s")
    try:
        src.facts.remember("My city is Lyon", subject="user", attribute="city", value="Lyon",
                           valid_from=now - (10 if file_is_newer else 1000))
        out = io.StringIO()
        src.export_jsonl(out)
        dst.facts.remember(f"My city is {held}", subject="user", attribute="city", value=held,
                           valid_from=now - (1000 if file_is_newer else 10))
        first = dst.import_jsonl(io.StringIO(out.getvalue()))
        assert first["facts_written"] == 1, first
        settled = sorted((f.value, f.mentions, f.valid_to is None) for f in dst.facts.history())
        for _ in range(2):
            again = dst.import_jsonl(io.StringIO(out.getvalue()))
            assert again == {"messages": 0, "written": 0, "facts": 1, "facts_written": 0}, again
            assert sorted((f.value, f.mentions, f.valid_to is None) for f in dst.facts.history()) == settled
    finally:
        src.close()


def test_save_to_memory_keeps_the_agents_reason_with_its_facts(store_url, default_embedder):
    """MassGen's save_to_memory stores ``thinking`` as the saved items' context: it is kept, searchable, and
    each saved fact leads back to it.
    """
    mem = memory(store_url, default_embedder, user_id="u", session_id="s")
    try:
        reason = "The user is planning a surprise party for their sister next month."
        saved = run(mem.save_to_memory(reason, ["User's sister is called Ines"]))
        assert saved["success"] is True and len(saved["memory_ids"]) == 1
        assert "surprise party" in run(mem.retrieve("surprise party planning"))  # the reason is searchable
        assert [m.data["content"] for m in mem.expand(saved["memory_ids"][0])] == [reason]  # and the fact's source
        assert [f.text for f in mem.facts.history()] == ["User's sister is called Ines"]  # no fact made of it
        bad = run(mem.save_to_memory(["not", "text"], ["User likes tea"]))
        assert bad["success"] is False and "'thinking'" in bad["message"] and len(mem.facts.history()) == 1
        assert run(mem.save_to_memory("", ["User likes tea"]))["success"] is True  # no reason given: facts only
    finally:
        mem.close()


@pytest.mark.parametrize("thinking, items", [
    ("the user told me their bank", ["My bank is \udc00Quorblat"]),  # the reason was recorded, the fact refused
    ("", ["I like green tea", "My pin is \ud8001234"]),  # the first fact was kept, the second refused
    ("reason \ud800", ["I like tea"]),  # raised MessageFormatError out of the tool
])
def test_a_refused_save_to_memory_keeps_nothing(store_url, default_embedder, thinking, items):
    """A save the tool refuses answers ``success: False`` and keeps nothing of it: every item and the reason are
    checked before any is written."""
    mem = memory(store_url, default_embedder, user_id="u", session_id="s")
    try:
        answer = run(mem.save_to_memory(thinking, items))
        assert answer["success"] is False and answer["memory_ids"] == [] and "not valid" in answer["message"]
        assert mem.messages() == [] and mem.facts.history() == []
    finally:
        mem.close()


def test_a_cleared_message_leaves_no_summary_or_window_repeating_its_words(store_url, default_embedder):
    """A conversation's window manager summarized a message; clearing it by id (MCP's forget) deleted the message,
    but its words stayed in the summaries and in the window's summary: the window, the summaries and an export
    still showed them. The summaries that may hold them go, the window drops its summary; the other messages
    the summaries covered stay archived, verbatim."""
    import io

    from fullrecall import SyncConversationMemory
    from fullrecall.archive.archive import archived_summaries
    from fullrecall.summarizers import ExtractiveSummarizer

    store = open_store(store_url)
    window = SyncConversationMemory(store, "c1", user_id="u", agent_id="a", summarizer=ExtractiveSummarizer(),
                                    max_history_turns=2, preserve_recent_messages=2)
    texts = ["hello there friend", "my password is HUNTER2 remember it", "ok noted the password", "what else",
             "nothing much", "bye now", "see you", "later then"]
    for i, text in enumerate(texts):
        window.add({"role": "user" if i % 2 == 0 else "assistant", "content": text, "id": f"m{i}"})
    scope = window.scope
    assert any("HUNTER2" in json.dumps(m) for m in window.messages)  # the premise: a summary repeats it
    assert any("HUNTER2" in s["text"] for s in archived_summaries(store, scope))
    mem = memory(store, default_embedder, user_id="u", agent_id="a", session_id="other")
    counts = mem.clear(ids=["m1"], session_id="c1")
    assert counts["messages"] == 1 and counts["summaries"] >= 1
    exported = io.StringIO()
    mem.export_jsonl(exported)
    shown = [json.dumps(window.messages), json.dumps(archived_summaries(store, scope)), exported.getvalue(),
             run(mem.retrieve("what is my password?", limit=10))]
    assert not [text for text in shown if "HUNTER2" in text]
    kept = [m.data["content"] for m in store.range(scope, 0, 100)]
    assert kept == [t for t in texts if "HUNTER2" not in t]  # nothing else went
    window.add({"role": "user", "content": "one more", "id": "m8"})  # and the window goes on
    assert window.messages[-1]["content"] == "one more"
    window.close()
    store.close()


@pytest.mark.parametrize("named", ["own id", "copy's id"])
def test_clearing_a_message_by_id_deletes_the_copies_its_window_made(store_url, default_embedder, named):
    """A conversation's window rebuild (a delete there) adds its kept messages again under derived keys
    ('s@<hex>'); clearing the message by id deleted only the row of exactly that id: the copy stayed in the
    window and in search (and clearing the copy's id, as a search hit names it, left the original)."""
    from fullrecall import SyncConversationMemory

    secret = "ZEBRACODE4711"
    store = open_store(store_url)
    opts = {"user_id": "u", "agent_id": "a", "embedding_model": default_embedder, "preserve_recent_messages": 50}
    window = SyncConversationMemory(store, "c1", **opts)
    window.add([{"id": "a", "role": "user", "content": "hello there, first message about apples"},
                {"id": "s", "role": "user", "content": f"my bank pin is {secret} please keep it"},
                {"id": "d", "role": "assistant", "content": "ok noted"}])
    window.delete(0)
    copy = window.window_rows()[0]
    assert copy is not None and copy.id.startswith("s@")  # the premise: the window holds a copy of 's'
    mem = memory(store, default_embedder, user_id="u", agent_id="a", session_id="other")
    counts = mem.clear(ids=["s" if named == "own id" else copy.id])
    assert counts["messages"] == 2
    rows = store.range(window.scope, 0, 10**9) + store.get(window.scope, ["s", copy.id])
    shown = [json.dumps(SyncConversationMemory(store, "c1", **opts).messages), json.dumps([r.data for r in rows]),
             json.dumps([h.text for h in mem.search(f"bank pin {secret}", limit=10)])]
    assert not [text for text in shown if secret in text]
    assert [m["content"] for m in window.messages] == ["ok noted"]  # nothing else went
    window.close()
    store.close()


def test_clearing_a_replaced_system_prompt_by_its_id_deletes_the_copy_that_holds_it(store_url, default_embedder):
    """A new system prompt takes the pinned one's place at position 0; the old one lives on only as its copy
    (``sys@unpinned-<hex>``), archived and recallable. Clearing it by its own id found no row of that id: nothing
    was deleted, and the old prompt stayed searchable."""
    from fullrecall import SyncConversationMemory

    store = open_store(store_url)
    opts = {"user_id": "u", "agent_id": "a", "embedding_model": default_embedder, "preserve_recent_messages": 50}
    window = SyncConversationMemory(store, "c1", **opts)
    window.add([{"id": "sys", "role": "system", "content": "The vault code is ZEBRACODE4711."},
                {"id": "q", "role": "user", "content": "hello"}])
    window.clear()
    window.add([{"id": "sys2", "role": "system", "content": "Be brief."}, {"id": "q2", "role": "user", "content": "hi"}])
    assert not store.get(window.scope, ["sys"])  # the premise: only the copy holds the old prompt
    mem = memory(store, default_embedder, user_id="u", agent_id="a", session_id="other")
    assert [m.data["content"] for m in mem.messages(ids=["sys"])] == ["The vault code is ZEBRACODE4711."]
    assert mem.clear(ids=["sys"])["messages"] == 1
    rows = store.range(window.scope, 0, 10**9)
    assert not [r for r in rows if "ZEBRACODE" in json.dumps(r.data)]
    assert not [h for h in mem.search("vault code", limit=10) if "ZEBRACODE" in h.text]
    assert [m["content"] for m in SyncConversationMemory(store, "c1", **opts).messages] == ["Be brief.", "hi"]
    window.close()
    store.close()


@pytest.mark.parametrize("how", ["roles", "ids"])
def test_clearing_the_pinned_system_message_keeps_the_window_and_its_summaries(store_url, default_embedder, how):
    """Clearing a conversation's system message (position 0, pinned in its window) moved the window's start one
    place early: a question already summarized out of the window came back into it, and every summary was deleted,
    the window's too, though none covers the system message. Now the window is what it was without the system
    message, and the summaries stay."""
    from fullrecall import SyncConversationMemory
    from fullrecall.archive.archive import archived_summaries
    from fullrecall.summarizers import ExtractiveSummarizer

    store = open_store(store_url)
    opts = {"user_id": "u", "agent_id": "a", "summarizer": ExtractiveSummarizer(), "max_history_turns": 3,
            "preserve_recent_messages": 2}
    window = SyncConversationMemory(store, "c1", **opts)
    window.add([{"role": "system", "content": "You are terse.", "id": "sys"}])
    for i in range(6):
        window.add([{"role": "user", "content": f"question {i} about walruses", "id": f"q{i}"},
                    {"role": "assistant", "content": f"answer {i} about seals", "id": f"a{i}"}])
    before = window.messages
    summaries = archived_summaries(store, window.scope)
    assert before[0]["role"] == "system" and summaries  # the premise: a summary in the window, others archived
    mem = memory(store, default_embedder, user_id="u", agent_id="a", session_id="other")
    counts = mem.clear(roles=["system"]) if how == "roles" else mem.clear(ids=["sys"], session_id="c1")
    assert counts["messages"] == 1 and counts["summaries"] == 0
    assert archived_summaries(store, window.scope) == summaries
    for reader in (window, SyncConversationMemory(open_store(store_url), "c1", **opts)):
        assert reader.messages == before[1:]
    window.add({"role": "user", "content": "one more", "id": "m9"})
    assert window.messages[-1]["content"] == "one more" and "question 0 about walruses" not in json.dumps(
        window.messages)
    window.close()
    store.close()


def test_a_cleared_pinned_message_leaves_no_copy_in_the_saved_window(store_url, default_embedder):
    """With ``pin_first`` on chat-completions messages the manager holds the pinned message itself: its saved
    state keeps a copy (nothing may be written into the caller's message). Clearing that message by id leaves no
    copy in the saved window."""
    from fullrecall import SyncConversationMemory

    store = open_store(store_url)
    window = SyncConversationMemory(store, "c1", user_id="u", agent_id="a")
    pinned = {"role": "user", "content": "my password is HUNTER2, keep this pinned", "id": "m0"}
    window.add([pinned, {"role": "assistant", "content": "ok", "id": "m1"}])
    held = {"manager": {"held_pins": [{k: v for k, v in pinned.items() if k != "id"}]}, "replaced": {}, "version": 1}
    store.put_state(window.scope, "window", held)  # as a manager holding it pinned saved it
    mem = memory(store, default_embedder, user_id="u", agent_id="a", session_id="other")
    assert mem.clear(ids=["m0"], session_id="c1")["messages"] == 1
    assert "HUNTER2" not in json.dumps(store.get_state(window.scope, "window"))
    window.close()
    store.close()


def test_close_stops_its_background_warm_before_the_store_is_closed(store_url, default_embedder, caplog):
    """A memory closed while its warm is under way waits for it, and the catch-up that follows a first warm never
    begins: nothing runs on the store once it is closed (the catch-up ran on, found the store closed and warned
    'could not embed the messages ... left without a vector: StoreError: store ... is closed').
    """
    first = memory(store_url, default_embedder, user_id="ann", agent_id="bot", session_id="s", warm=False)
    run(first.record([{"role": "user", "content": "hello there"}]))  # an owner with a session to read and catch up
    first.close()
    store = open_store(store_url)
    release, started = threading.Event(), threading.Event()
    store_warm = store.warm

    def warm(scope, **kw):
        started.set()
        assert release.wait(30)
        store_warm(scope, **kw)

    store.warm = warm
    try:
        warmed = memory(store, default_embedder, user_id="ann", agent_id="bot")
        assert started.wait(30)  # its warm is under way, held
        closing = threading.Thread(target=warmed.close)
        closing.start()
        time.sleep(0.2)
        assert closing.is_alive()  # close waits for the warm under way
        release.set()
        closing.join(30)
        assert not closing.is_alive()
    finally:
        release.set()
        store.close()
    time.sleep(0.3)  # what the warming thread would still do, it would do now, on the closed store
    assert "left without a vector" not in caplog.text
