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
    assert [e for e in errors if "ValueError" not in e] == []
