"""A forget of a user racing with that user's live memories: nothing fails, on every backend."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from fullrecall import PersistentMemory
from fullrecall.stores import ANY, Scope, open_store

sys.path.insert(0, str(Path(__file__).parent))
from concurrent_worker import HashEmbedder


def test_a_forget_racing_with_turns_and_facts_of_the_user_fails_none_of_them(store_url):
    """Writers of two sessions record turns and state facts while an administrator forgets the user every
    0.1 s: no write and no forget fails (PostgreSQL's forget locked the sessions, then the records, where a
    fact's write holds its record, then the change log's session: each waited for the other, a deadlock).
    """
    errors: list[str] = []
    go, end = threading.Event(), time.monotonic() + 3

    def writer(session: str) -> None:
        memory = PersistentMemory(user_id="ann", agent_id="bot", session_id=session, store=store_url,
                                  embedder=HashEmbedder(), warm=False)
        go.wait()
        n = 0
        while time.monotonic() < end:
            n += 1
            try:
                memory.record_sync([{"role": "user", "content": f"My locker is L{session}x{n}"}])
                memory.remember(f"My bike is B{session}x{n}")
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                errors.append(f"writer {session}: {type(exc).__name__}: {exc}")
        memory.close()

    def forgetter() -> None:
        admin = open_store(store_url)
        go.wait()
        while time.monotonic() < end:
            time.sleep(0.1)
            try:
                admin.forget(Scope(user_id="ann", agent_id=ANY))
            except Exception as exc:  # noqa: BLE001
                errors.append(f"forget: {type(exc).__name__}: {exc}")
        admin.close()

    threads = [threading.Thread(target=writer, args=(s,)) for s in ("s0", "s1")] + [threading.Thread(target=forgetter)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(60)
    assert errors == []


class ForgettingEmbedder(HashEmbedder):
    """Embeds as HashEmbedder; asked to embed a text holding ``cue``, it waits until the message is stored, then
    forgets the user: an administrator's forget landing while a turn is embedded, between its append and the
    write of its vectors.
    """

    def __init__(self, store_url: str, cue: str) -> None:
        self.store_url, self.cue = store_url, cue

    def embed(self, texts):
        if any(self.cue in t for t in texts):
            admin = open_store(self.store_url)
            try:
                scope = Scope(user_id="ann", agent_id=ANY)
                deadline = time.monotonic() + 10
                while not admin.search_text(scope, [self.cue], 1) and time.monotonic() < deadline:
                    time.sleep(0.01)
                admin.forget(scope)
            finally:
                admin.close()
        return super().embed(texts)


def test_a_turn_whose_user_is_forgotten_while_it_is_embedded_is_recorded_and_stays_forgotten(store_url):
    """The turn's words were stored, then forgotten, before its vectors were written: the record returns (it
    raised a bare ValueError 'set_vectors: session ... has no messages') and writes no vector back; the next turn
    is recorded and found as usual.
    """
    memory = PersistentMemory(user_id="ann", agent_id="bot", session_id="s0", store=store_url,
                              embedder=ForgettingEmbedder(store_url, "zsecond"), warm=False, errors="raise")
    try:
        memory.record_sync([{"role": "user", "content": "first turn"}])
        memory.record_sync([{"role": "user", "content": "second turn zsecond"}])
        scope = Scope(user_id="ann", agent_id=ANY)
        assert memory.store.stats(scope)["message_count"] == 0 and memory.store.stats(scope)["vector_count"] == 0
        memory.record_sync([{"role": "user", "content": "third turn"}])
        assert [m.text.endswith(": third turn") for m in memory.messages()] == [True]
        assert memory.store.stats(scope)["vector_count"] == 1
    finally:
        memory.close()
