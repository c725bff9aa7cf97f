"""Async entry points never run store, embedding or summarizing work on the event loop."""

from __future__ import annotations

import asyncio
import threading

from fullrecall.archive import SemanticSummarizingConversationManager
from fullrecall.messages.formats import parse_messages
from fullrecall.strands import ArchiveMemoryStore
from fullrecall.summarizers import ExtractiveSummarizer


async def _ticks_during(awaitable) -> tuple[object, int]:
    """Run ``awaitable`` beside a 1 ms heartbeat; how often the heartbeat ran meanwhile."""
    ticks = 0
    done = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0.001)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(0)  # let the heartbeat start
    start = ticks
    try:
        result = await awaitable
    finally:
        done.set()
        await beat
    return result, ticks - start


class _ThreadNoting:
    """The real embedder, noting which threads it runs on."""

    def __init__(self, embedder) -> None:
        self._embedder, self.threads = embedder, set()

    def __getattr__(self, name):
        return getattr(self._embedder, name)

    def embed(self, texts):
        self.threads.add(threading.get_ident())
        return self._embedder.embed(texts)

    def embed_queries(self, texts):
        self.threads.add(threading.get_ident())
        return getattr(self._embedder, "embed_queries", self._embedder.embed)(texts)


def test_archive_memory_store_search_leaves_the_event_loop_free(default_embedder):
    embedder = _ThreadNoting(default_embedder)
    manager = SemanticSummarizingConversationManager(summarizer=lambda m, p: "summary", max_history_turns=2,
                                                     preserve_recent_messages=2, embedding_model=embedder)
    messages = []
    for i in range(30):
        messages += [{"role": "user", "content": f"Note {i}: the locker code is {1000 + i}."},
                     {"role": "assistant", "content": f"Noted {i}."}]
        manager.apply_management(messages)
    store = ArchiveMemoryStore(manager.archive)
    embedder.threads.clear()

    async def search():
        loop_thread = threading.get_ident()
        entries = await store.search("What is the locker code of note 3?")
        return entries, loop_thread

    entries, loop_thread = asyncio.run(search())
    assert entries and any("1003" in e.content for e in entries)
    assert embedder.threads and loop_thread not in embedder.threads  # the query was embedded off the loop


def test_extractive_asummarize_leaves_the_event_loop_free():
    _, msgs = parse_messages([{"role": "user" if i % 2 == 0 else "assistant",
                               "content": f"Message {i} mentions invoice INV-{i:05d} and the Dolomites trip."}
                              for i in range(3000)])
    summary, ticks = asyncio.run(_ticks_during(ExtractiveSummarizer().asummarize(msgs)))
    assert summary.text and ticks >= 2


def test_the_hooks_recall_cache_never_serves_one_managers_context_to_another(default_embedder, monkeypatch):
    """A hook shared by agents: a new manager (another user's) given a freed one's id() gets its own recall."""
    import fullrecall.strands.hook as hook_module
    from fullrecall.archive import SemanticSummarizingConversationManager as CoreManager
    from fullrecall.strands import SemanticMemoryHook

    def manager(user, secret):
        core = CoreManager(summarizer=lambda m, p: "summary", max_history_turns=2, preserve_recent_messages=2,
                           embedding_model=default_embedder, user_id=user)
        messages = []
        for i in range(6):
            messages += [{"role": "user", "content": f"Note {i}: my locker code is {secret + i}."},
                         {"role": "assistant", "content": f"Noted {i}."}]
            core.apply_management(messages)
        return core

    hook = SemanticMemoryHook(max_context_length=400)
    monkeypatch.setattr(hook_module, "id", lambda obj: 1, raising=False)  # as after the first one is freed
    question = {"role": "user", "content": [{"text": "What is my locker code of note 1?"}]}
    alice, bob = manager("alice", 7000), manager("bob", 3000)
    assert alice.first_active_position == bob.first_active_position
    assert "7001" in hook._enriched(question, alice)["content"][0]["text"]
    for_bob = hook._enriched(question, bob)["content"][0]["text"]
    assert "3001" in for_bob and "7001" not in for_bob
