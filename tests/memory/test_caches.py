"""Long-term memory's speed measures keep it correct: records cached per owner yet every other writer's
change seen (on every backend), one embedding batch per record, the question embedded once per retrieve.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall import FactMemory, PersistentMemory
from fullrecall.memory._records import RecordBook, owner_scope
from fullrecall.stores import Record, open_store


class Counting:
    """The real embedder, with each call's texts written down."""

    def __init__(self, embedder) -> None:
        self.inner, self.calls = embedder, []
        self.name, self.dimension = embedder.name, embedder.dimension

    def embed(self, texts):
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def current(facts: FactMemory) -> list[tuple[str, str | None]]:
    return sorted((f.text, f.attribute) for f in facts.current())


def test_a_reader_sees_every_change_another_writer_makes_on_every_backend(store_url, default_embedder):
    one, two = open_store(store_url), open_store(store_url)  # two handles: two processes' connections and caches
    try:
        reader = FactMemory(one, user_id="alice", embedder=default_embedder)
        writer = FactMemory(two, user_id="alice", embedder=default_embedder)
        paris = reader.remember("My city is Paris")
        assert current(reader) == [("My city is Paris", "city")]  # cached now

        lyon = writer.remember("My city is Lyon")
        assert current(reader) == [("My city is Lyon", "city")]
        assert reader.get(paris.id).superseded_by == lyon.id
        assert [f.text for f, _ in reader.search("which city do I live in?")] == ["My city is Lyon"]

        reader.remember("I like chess")  # the reader's own write on top of what it learned
        assert writer.forget(lyon.id)
        assert reader.get(lyon.id) is None
        assert current(reader) == current(writer) == [("I like chess", None)]

        two.forget(owner_scope("default", "alice", None))  # the owner forgotten elsewhere, then written again
        oslo = writer.remember("My city is Oslo")
        assert [f.id for f in reader.history()] == [oslo.id]
        assert current(FactMemory(one, user_id="alice", embedder=default_embedder)) == current(reader)
    finally:
        one.close()
        two.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["city", "pet", "like", "forget"]),
                          st.integers(0, 3)), min_size=1, max_size=8))
def test_cached_facts_always_equal_what_the_store_holds(tmp_path_factory, default_embedder, steps):
    url = f"sqlite:///{tmp_path_factory.mktemp('cache') / 'memory.db'}"
    stores = [open_store(url), open_store(url)]
    query = default_embedder.embed(["which city do I live in, and what do I like?"])[0]
    try:
        books = [FactMemory(s, user_id="u", embedder=default_embedder) for s in stores]
        for who, kind, n in steps:
            facts = books[who]
            if kind == "forget":
                known = facts.history()
                if known:
                    facts.forget(known[n % len(known)].id)
            elif kind == "like":
                facts.remember(f"I like thing number {n}")
            else:
                facts.remember(f"My {kind} is value{n}")
            truth = FactMemory(stores[0], user_id="u", embedder=default_embedder)  # nothing cached
            for reader in books:
                assert [(f.id, f.valid_to, f.mentions) for f in reader.history()] == [
                    (f.id, f.valid_to, f.mentions) for f in truth.history()]
                for history in (False, True):  # searches over the cached selections find what a fresh read finds
                    want = truth.search(query, 10, include_history=history)
                    got = reader.search(query, 10, include_history=history)
                    assert [(f.id, round(s, 5)) for f, s in got] == [(f.id, round(s, 5)) for f, s in want]
    finally:
        for s in stores:
            s.close()


def test_a_record_embeds_each_text_once_and_a_retrieve_embeds_the_question_once(tmp_path, default_embedder):
    embedder = Counting(default_embedder)
    memory = PersistentMemory("u", "a", "s1", store=f"sqlite:///{tmp_path / 'm.db'}", embedder=embedder)
    try:
        asyncio.run(memory.record([{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "My favourite colour is teal."},
                                   {"role": "assistant", "content": "Teal it is."}], {"turn": 1}))
        # the fact is the user's words: it shares their vector, so two texts, in one call
        assert embedder.calls == [["My favourite colour is teal.", "Teal it is."]]
        fact = memory.facts.current()[0]
        stored = memory.store.get_vectors(replace(memory.owner, session_id="s1"), memory.messages()[0].id.split())
        assert np.allclose(memory.facts.book.vector(memory.facts.book.get(fact.id)), next(iter(stored.values())))

        embedder.calls.clear()
        asyncio.run(memory.record([{"role": "user", "content": "Hello there. Remember that I own a red bike."}],
                                  {"turn": 2}))
        # the messages in one call, a fact in words of its own in another, made beside it (in either order)
        assert sorted(embedder.calls) == [["Hello there. Remember that I own a red bike."], ["I own a red bike."]]
        bike = next(f for f in memory.facts.current() if "bike" in f.text)  # each row its own text's vector
        assert np.allclose(memory.facts.book.vector(memory.facts.book.get(bike.id)),
                           default_embedder.embed(["I own a red bike."])[0], atol=1e-6)
        said = [m for m in memory.messages() if "bike" in m.text]
        assert np.allclose(next(iter(memory.store.get_vectors(replace(memory.owner, session_id="s1"),
                                                              [said[0].id]).values())),
                           default_embedder.embed(["Hello there. Remember that I own a red bike."])[0], atol=1e-6)

        embedder.calls.clear()
        asyncio.run(memory.record([{"role": "user", "content": "Hello there. Remember that I own a red bike."}],
                                  {"turn": 2}))  # a retry: nothing stored or learned twice
        assert len(memory.messages()) == 3 and len(memory.facts.history()) == 2

        embedder.calls.clear()
        context = asyncio.run(memory.retrieve("what colour do I like?"))
        assert embedder.calls == [["what colour do I like?"]]
        assert "[fact] My favourite colour is teal." in context and "teal" in context.split("\n", 1)[1]

        counts = memory.clear()  # the facts' change log is bookkeeping: not counted as messages or sessions
        assert (counts["messages"], counts["sessions"]) == (3, 1) and memory.facts.history() == []
    finally:
        memory.close()


def test_an_owner_forgotten_elsewhere_stays_forgotten_when_the_cache_had_no_log_mark(tmp_path, default_embedder):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    one, two = open_store(url), open_store(url)
    try:
        reader = FactMemory(one, user_id="alice", embedder=default_embedder)
        assert reader.history() == []  # cached while the change log was still empty
        reader.remember("I like chess")  # the reader's own write: its only event
        two.forget(owner_scope("default", "alice", None))
        assert reader.history() == [] and reader.current() == []
    finally:
        one.close()
        two.close()


def test_importing_the_same_facts_again_embeds_none_of_them(tmp_path, default_embedder):
    src = PersistentMemory("u", "a", "s1", store=f"sqlite:///{tmp_path / 'a.db'}", embedder=default_embedder)
    embedder = Counting(default_embedder)
    dst = PersistentMemory("u", "a", store=f"sqlite:///{tmp_path / 'b.db'}", embedder=embedder)
    try:
        src.remember("My city is Lyon")
        src.remember("I like chess")
        path = tmp_path / "memory.jsonl"
        src.export_jsonl(path)
        dst.import_jsonl(path)
        assert sorted(t for call in embedder.calls for t in call) == ["I like chess", "My city is Lyon"]  # one batch
        embedder.calls.clear()
        assert dst.import_jsonl(path) == {"messages": 0, "written": 0, "facts": 2, "facts_written": 0}
        assert embedder.calls == [] and len(dst.facts.current()) == 2
    finally:
        src.close()
        dst.close()


class CountingStore:
    """A store handle with each call's method name written down (the calls a record or retrieve costs; not the
    background warm's).
    """

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if threading.current_thread().name != "fullrecall-memory-warm":
                self.calls.append(name)
            return attr(*args, **kwargs)
        return call


def test_a_plain_turn_costs_a_retry_check_an_append_and_a_vector_write(tmp_path, default_embedder):
    store = CountingStore(open_store(f"sqlite:///{tmp_path / 'm.db'}"))
    memory = PersistentMemory("u", "a", "s1", store=store, embedder=default_embedder)
    try:
        asyncio.run(memory.record([{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"}],
                                  {"turn": 1}))
        assert memory.sessions() == ["s1"]  # the first write of a session lists it
        for turn in (2, 3):
            store.calls.clear()
            asyncio.run(memory.record([{"role": "user", "content": f"Question {turn}?"},
                                       {"role": "assistant", "content": f"Answer {turn}."}], {"turn": turn}))
            assert sorted(store.calls) == ["append", "get_vectors", "set_vectors"]  # no session or state reads
        assert len(memory.messages()) == 6 and len(memory.search("Question 3", 1)) == 1
    finally:
        store.inner.close()


class Overlap:
    """A store handle whose ``get_vectors`` of the armed session, asked by a record, waits (5 s at most) for its
    words' append to begin.
    """

    def __init__(self, inner) -> None:
        self.inner, self.armed, self.seen = inner, None, []
        self.appending = threading.Event()

    def append(self, scope, messages):
        if scope.session_id == self.armed:
            self.appending.set()
        return self.inner.append(scope, messages)

    def get_vectors(self, scope, ids):
        # the warming thread's catch-up may ask too (the record under way is not its to embed): not the record's
        if scope.session_id == self.armed and threading.current_thread().name != "fullrecall-memory-warm":
            self.seen.append(self.appending.wait(5))
        return self.inner.get_vectors(scope, ids)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_turns_retry_check_runs_beside_the_append_of_its_words_on_every_backend(store_url, default_embedder):
    """While a turn is embedded, its words are appended and the store asked which of them a retry already
    stored with a vector, side by side: neither waits for the other."""
    store = Overlap(open_store(store_url))
    memory = PersistentMemory("u", "a", "s1", store=store, embedder=default_embedder)
    try:
        turn = [{"role": "user", "content": "Question 1?"}, {"role": "assistant", "content": "Answer 1."}]
        asyncio.run(memory.record(turn, {"turn": 1}))
        store.armed = "s1"
        asyncio.run(memory.record([{"role": "user", "content": "Question 2?"}], {"turn": 2}))
        assert store.seen == [True]
        store.appending.clear()
        assert asyncio.run(memory.record(turn, {"turn": 1})) and store.seen == [True, True]  # a retry, the same way
        assert [m.text.endswith(("Question 1?", "Answer 1.", "Question 2?")) for m in memory.messages()] == [True] * 3
        assert len(store.inner.get_vectors(memory._search.scope, [m.id for m in memory.messages()])) == 3
    finally:
        store.inner.close()


class Batches:
    """A store handle that writes down, for each ``batch()`` block, the writes its thread made inside it."""

    def __init__(self, inner) -> None:
        self.inner, self.blocks, self._open = inner, [], threading.local()

    @contextlib.contextmanager
    def batch(self):
        outer = getattr(self._open, "block", None) is None
        if outer:
            self._open.block = []
        try:
            with self.inner.batch():
                yield
        finally:
            if outer:
                self.blocks.append(self._open.block)
                self._open.block = None

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in ("put_record", "append", "delete_record", "set_vectors", "put_state"):
            return attr

        def write(*args, **kwargs):
            block = getattr(self._open, "block", None)
            if block is not None:
                block.append(name)
            return attr(*args, **kwargs)
        return write


def test_a_fact_turn_commits_its_fact_the_fact_it_closes_and_their_log_event_at_once_on_every_backend(
        store_url, default_embedder):
    """On PostgreSQL a batch is one transaction: a fact turn waits for one commit, not one a write."""
    store = Batches(open_store(store_url))
    memory = PersistentMemory("u", "a", "s1", store=store, embedder=default_embedder)
    try:
        asyncio.run(memory.record([{"role": "user", "content": "My city is Paris."}], {"turn": 1}))
        store.blocks.clear()
        asyncio.run(memory.record([{"role": "user", "content": "My city is Lyon."}], {"turn": 2}))
        assert store.blocks == [["put_record", "put_record", "append"]]  # Lyon, Paris closed, one log event
        paris, lyon = memory.facts.history(attribute="city")
        assert (paris.value, paris.superseded_by, lyon.value, lyon.valid_to) == ("Paris", lyon.id, "Lyon", None)
        again = PersistentMemory("u", "a", "s1", store=store.inner, embedder=default_embedder)
        assert [f.value for f in again.facts.current(attribute="city")] == ["Lyon"]
    finally:
        store.inner.close()


def test_a_session_forgotten_by_another_handle_is_listed_again_on_its_next_turn_on_every_backend(
        store_url, default_embedder):
    one, two = open_store(store_url), open_store(store_url)  # two processes' connections and caches
    try:
        writer = PersistentMemory("bob", "a", "s1", store=one, embedder=default_embedder)
        asyncio.run(writer.record([{"role": "user", "content": "I keep bees."}], {"turn": 1}))
        PersistentMemory("bob", "a", store=two, embedder=default_embedder).clear()  # elsewhere: everything goes
        assert writer.sessions() == [] and writer.messages() == []

        asyncio.run(writer.record([{"role": "user", "content": "I keep goats now."}], {"turn": 2}))
        again = PersistentMemory("bob", "a", store=two, embedder=default_embedder)
        assert again.sessions() == ["s1"]
        assert [m.text.endswith("I keep goats now.") for m in again.messages()] == [True]
    finally:
        one.close()
        two.close()


def test_fact_search_follows_every_write_after_searching_the_same_facts_again(tmp_path, default_embedder):
    facts = FactMemory(f"sqlite:///{tmp_path / 'f.db'}", user_id="u", embedder=default_embedder)
    try:
        facts.remember("I like chess")
        facts.remember("My city is Paris")
        for _ in range(2):  # the same facts searched twice
            assert facts.search("which city do I live in?", 1)[0][0].text == "My city is Paris"
        facts.remember("My city is Lyon")  # supersedes Paris: the next search sees the change
        assert [f.text for f, _ in facts.search("which city do I live in?", 5)] == ["My city is Lyon", "I like chess"]
        facts.forget(facts.current(attribute="city")[0].id)
        assert [f.text for f, _ in facts.search("which city do I live in?", 5)] == ["I like chess"]
    finally:
        facts.close()


class CountingRows:
    """A store whose ``range`` calls and the messages they return are counted."""

    def __init__(self, inner) -> None:
        self.inner, self.rows = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def range(self, *args, **kwargs):
        found = self.inner.range(*args, **kwargs)
        self.rows += len(found)
        return found


def test_a_cache_load_reads_the_newest_change_alone_whatever_gaps_erasing_left(store_url, default_embedder):
    store = open_store(store_url)
    try:
        scope = owner_scope("default", "alice", None)
        writer = RecordBook(store, scope, "notes", embedder=default_embedder)
        for i in range(120):
            writer.put(Record(id=f"r{i}", namespace="notes", text=f"note {i}"))
        for i in range(110):  # their change-log events go too: gaps in the log, newest events kept
            writer.erase(f"r{i}")
        counting = CountingRows(store)
        reader = RecordBook(counting, scope, "notes", embedder=default_embedder)
        assert [r.id for r in reader.all()] == [f"r{i}" for i in range(110, 120)]
        assert counting.rows <= 2, counting.rows  # the newest event, not every event past count - 1
        writer.put(Record(id="late", namespace="notes", text="late"))
        assert "late" in {r.id for r in reader.all()}  # the mark it read still finds later writes
    finally:
        store.close()
