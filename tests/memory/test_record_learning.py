"""A recorded turn's facts are learned while its messages are embedded, and a retried turn counts them once."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from fullrecall import PersistentMemory
from fullrecall.memory.facts import FactMemory

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import completion, scripted_model  # noqa: E402

SAID = "Hello there. Remember that I own a red bike."
FACT = "I own a red bike."  # what the rules find in SAID: a fact in words of its own


class Gated:
    """The real embedder; an embedding of the message ``said`` waits until ``ready()`` holds (or ``wait`` seconds
    pass), noting whether it did, and raises while ``fail`` is set.
    """

    def __init__(self, inner, said: str = SAID, ready=lambda: True, wait: float = 0.0) -> None:
        self.inner, self.said, self.ready, self.wait = inner, said, ready, wait
        self.name, self.dimension = inner.name, inner.dimension
        self.fail, self.seen = False, []

    def embed(self, texts):
        texts = list(texts)
        if self.said in texts:
            end = time.monotonic() + self.wait
            while not self.ready() and time.monotonic() < end:
                time.sleep(0.01)
            self.seen.append(self.ready())
            if self.fail:
                raise ConnectionError("the embedding service is down")
        return self.inner.embed(texts)


def test_a_fact_in_words_of_its_own_is_kept_while_the_turn_s_message_is_embedded(store_url, default_embedder):
    reader = FactMemory(store_url, embedder=default_embedder, user_id="u", agent_id="a")  # another handle
    embedder = Gated(default_embedder, ready=lambda: [f.text for f in reader.current()] == [FACT], wait=10)
    memory = PersistentMemory("u", "a", "s1", store=store_url, embedder=embedder)
    try:
        asyncio.run(memory.record([{"role": "user", "content": SAID}], {"turn": 1}))
        assert embedder.seen == [True]  # the fact was in the store before the message's embedding returned
        assert [f.text for f in memory.facts.current()] == [FACT]
        assert len(memory.store.get_vectors(replace(memory.owner, session_id="s1"), [m.id for m in memory.messages()])) == 1
    finally:
        memory.close()
        reader.close()


def test_a_turn_retried_after_its_embedding_failed_counts_its_fact_once(store_url, default_embedder):
    embedder = Gated(default_embedder)
    memory = PersistentMemory("u", "a", "s1", store=store_url, embedder=embedder)
    try:
        embedder.fail = True
        with pytest.raises(ConnectionError):
            asyncio.run(memory.record([{"role": "user", "content": SAID}], {"turn": 1}))
        kept = memory.facts.current()  # the words are stored, and the fact kept while they were embedded
        assert [(f.text, f.mentions) for f in kept] == [(FACT, 1)] and len(memory.messages()) == 1
        embedder.fail = False
        asyncio.run(memory.record([{"role": "user", "content": SAID}], {"turn": 1}))  # the retry
        assert [(f.id, f.text, f.mentions) for f in memory.facts.current()] == [(kept[0].id, FACT, 1)]
        [message] = memory.messages()
        assert list(memory.store.get_vectors(replace(memory.owner, session_id="s1"), [message.id])) == [message.id]
        asyncio.run(memory.record([{"role": "user", "content": SAID}], {"turn": 2}))  # said again: one more
        assert [(f.text, f.mentions) for f in memory.facts.current()] == [(FACT, 2)]
    finally:
        memory.close()


def test_a_fact_that_is_a_message_s_words_waits_for_that_message_s_vector(store_url, default_embedder):
    """It shares the message's vector, so it is kept only once the message is embedded; when that embedding
    fails, nothing is learned and the retry learns it.
    """
    said = "My favourite colour is teal."
    embedder = Gated(default_embedder, said)
    memory = PersistentMemory("u", "a", "s1", store=store_url, embedder=embedder)
    try:
        embedder.fail = True
        with pytest.raises(ConnectionError):
            asyncio.run(memory.record([{"role": "user", "content": said}], {"turn": 1}))
        assert memory.facts.current() == [] and len(memory.messages()) == 1
        embedder.fail = False
        asyncio.run(memory.record([{"role": "user", "content": said}], {"turn": 1}))
        [fact] = memory.facts.current()
        assert (fact.text, fact.mentions) == (said, 1)
    finally:
        memory.close()


@pytest.mark.parametrize("by", ["rules", "chat model"])
def test_a_failed_turn_s_catch_up_learns_its_facts_and_its_retry_adds_none(store_url, default_embedder, server, by):
    """A catch-up (the next record's, or the warming thread's) gives a failed turn's messages their vectors and
    learns their facts (by the rules, or by the chat model reading the turn; a fact in the message's words takes
    the vector just made): the turn's retry, which finds them with vectors, learns nothing more, and the chat
    model reads the turn once.
    """
    if by == "rules":
        said, learned, model = "My favourite colour is teal.", "My favourite colour is teal.", None
    else:
        said, learned, model = "I live in Lyon.", "The user lives in Lyon.", scripted_model(server)
        server.script(completion(json.dumps([{"source": 0, "attribute": "city", "value": "Lyon", "text": learned}])))
    embedder = Gated(default_embedder, said)
    memory = PersistentMemory("u", "a", "s1", store=store_url, embedder=embedder, chat_model=model, warm=False)
    try:
        embedder.fail = True
        with pytest.raises(ConnectionError):
            asyncio.run(memory.record([{"role": "user", "content": said}], {"turn": 1}))
        embedder.fail = False
        assert memory.facts.current() == []
        assert len(embedder.seen) == 1  # the failed embedding
        assert memory.catch_up() == 1
        assert [(f.text, f.mentions) for f in memory.facts.current()] == [(learned, 1)]
        assert len(embedder.seen) == 2, "the fact in the message's words took its vector, just made"
        [message] = memory.messages()
        assert list(memory.store.get_vectors(replace(memory.owner, session_id="s1"), [message.id])) == [message.id]
        assert [s["id"] for s in memory.facts.current()[0].sources] == [message.id]
        for _ in range(2):  # the retry, and again: nothing more
            asyncio.run(memory.record([{"role": "user", "content": said}], {"turn": 1}))
            assert [(f.text, f.mentions) for f in memory.facts.current()] == [(learned, 1)]
        assert len(memory.messages()) == 1
        if model is not None:
            assert len(server.requests) == 1
    finally:
        memory.close()


def test_a_turn_whose_facts_write_failed_is_learned_from_by_the_next_record(store_url, default_embedder,
                                                                             monkeypatch):
    """The turn's vectors were written, its fact's write failed: the next record (of another turn: the failed one is
    never retried) learns it, once, and a retry later adds nothing.
    """
    said = "My favourite colour is teal."
    memory = PersistentMemory("u", "a", "s1", store=store_url, embedder=default_embedder, warm=False)
    try:
        def down(*args, **kwargs):
            raise ConnectionError("the store is down")

        with monkeypatch.context() as patched:
            patched.setattr(FactMemory, "keep", down)
            with pytest.raises(ConnectionError):
                asyncio.run(memory.record([{"role": "user", "content": said}], {"turn": 1}))
        [message] = memory.messages()
        assert list(memory.store.get_vectors(replace(memory.owner, session_id="s1"), [message.id])) == [message.id]
        assert memory.facts.current() == []
        asyncio.run(memory.record([{"role": "user", "content": "Thanks, that is all."}], {"turn": 2}))
        [fact] = memory.facts.current()
        assert (fact.text, fact.mentions, [s["id"] for s in fact.sources]) == (said, 1, [message.id])
        asyncio.run(memory.record([{"role": "user", "content": said}], {"turn": 1}))  # a late retry: nothing more
        assert [(f.text, f.mentions) for f in memory.facts.current()] == [(said, 1)]
    finally:
        memory.close()


def test_a_catch_up_learns_nothing_from_a_saved_fact_s_reason(store_url, default_embedder, server):
    """``save_to_memory`` keeps its ``thinking`` as a message no fact is drawn from: when that message's embedding
    failed, the catch-up embeds it and still draws nothing from it (the chat model is not asked).
    """
    thinking = "The user said they live in Lyon; worth keeping."
    embedder = Gated(default_embedder, thinking)
    server.script()
    memory = PersistentMemory("u", "a", "s1", store=store_url, embedder=embedder, chat_model=scripted_model(server),
                              warm=False)
    try:
        embedder.fail = True
        with pytest.raises(ConnectionError):
            asyncio.run(memory.save_to_memory(thinking, "The user lives in Lyon."))
        embedder.fail = False
        assert memory.catch_up() == 1
        assert server.requests == [] and memory.facts.current() == []
    finally:
        memory.close()


def test_records_of_many_threads_at_once_lose_no_fact(tmp_path, default_embedder):
    """Eight threads record at once through one pool of worker threads, each turn's fact waiting on its own
    message's embedding or on tasks handed to the pool before it: none waits forever, every fact is kept.
    """
    url = f"sqlite:///{tmp_path / 'm.db'}"
    memories = [PersistentMemory(f"u{i}", "a", "s1", store=url, embedder=default_embedder) for i in range(8)]

    def record(i: int) -> None:
        for n in range(3):
            said = f"My locker number is {100 * i + n}."  # a message's words, or words of its own
            asyncio.run(memories[i].record(
                [{"role": "user", "content": said if n % 2 else f"Remember that {said.lower()}"},
                 {"role": "assistant", "content": "Noted."}], {"turn": n}))

    pool = ThreadPoolExecutor(8)
    try:
        try:
            list(pool.map(record, range(8), timeout=120))  # the first error raised, or TimeoutError if one waits on
        finally:
            pool.shutdown(wait=False)
        for i, memory in enumerate(memories):  # each value supersedes the one before it
            assert sorted(f.value for f in memory.facts.history()) == [str(100 * i + n) for n in range(3)]
            assert [f.value for f in memory.facts.current()] == [str(100 * i + 2)]
            assert len(memory.messages()) == 6
    finally:
        for memory in memories:
            memory.close()


def test_a_fact_waiting_for_its_message_s_vector_holds_no_worker_thread(tmp_path, default_embedder):
    """Eight turns, each a fact in its message's own words, recorded at once while their embeddings are held:
    every turn's words are stored meanwhile (a fact waiting for its message's vector does not sit on one of the
    worker threads that store other records' words), then every fact is kept.
    """
    url = f"sqlite:///{tmp_path / 'm.db'}"
    said = [f"My favourite number is {40 + i}." for i in range(8)]
    memories: list[PersistentMemory] = []

    def all_stored() -> bool:
        return all(m.store.count(replace(m.owner, session_id="s1")) == 1 for m in memories)

    class Held:  # the turns' embeddings wait until every turn's words are stored (10 s at most)
        name, dimension = default_embedder.name, default_embedder.dimension
        seen: list[bool] = []

        def embed(self, texts):
            texts = list(texts)
            if any(t in said for t in texts):
                end = time.monotonic() + 10
                while not all_stored() and time.monotonic() < end:
                    time.sleep(0.01)
                self.seen.append(all_stored())
            return default_embedder.embed(texts)

    memories += [PersistentMemory(f"u{i}", "a", "s1", store=url, embedder=Held()) for i in range(8)]
    pool = ThreadPoolExecutor(8)
    try:
        try:
            list(pool.map(lambda i: asyncio.run(memories[i].record([{"role": "user", "content": said[i]}],
                                                                   {"turn": 1})), range(8), timeout=120))
        finally:
            pool.shutdown(wait=False)
        assert Held.seen == [True] * 8
        assert [[f.text for f in m.facts.current()] for m in memories] == [[s] for s in said]
    finally:
        for memory in memories:
            memory.close()


def test_a_statement_kept_again_from_the_same_sources_is_one_mention(store_url, default_embedder):
    facts = FactMemory(store_url, embedder=default_embedder, user_id="u")
    try:
        one, two = [{"session_id": "s1", "id": "m1"}], [{"session_id": "s2", "id": "m7"}]
        first = facts.remember("I love hiking in the mountains.", sources=one)
        assert facts.remember("i love hiking in the MOUNTAINS", sources=one).id == first.id
        assert (facts.get(first.id).mentions, facts.get(first.id).sources) == (1, one)
        facts.remember("I love hiking in the mountains.", sources=two)  # said again elsewhere: a mention
        facts.remember("I love hiking in the mountains.")  # and without sources: one each time, as before
        assert (facts.get(first.id).mentions, facts.get(first.id).sources) == (3, one + two)
    finally:
        facts.close()
