"""``fullrecall forget --session`` (another process, on the same store) racing a running service's appends to the
conversation: every message either is forgotten or survives whole, its vector its own words' (a real service, the
real command, messages held at the embedder so the interleavings are the ones that broke).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from fullrecall.stores import Scope, open_store

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _forget(store_url: str, conv: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "fullrecall", "forget", "--store", store_url, "--tenant", "tenant-a",
                           "--user", "", "--session", conv, "--yes"], capture_output=True, text=True, env=env,
                          timeout=180)
    assert done.returncode == 0, done.stderr


def _wait_until_embedding(gated, n: int) -> None:
    deadline = time.monotonic() + 30
    while gated.waiting < n:
        assert time.monotonic() < deadline, "the indexer did not take the batch"
        time.sleep(0.02)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_message_appended_while_another_process_forgets_the_conversation_is_whole(make_live, gated, store_url):
    base, service = make_live(embedder=gated)
    key, _ = service.keys.create("tenant-a")
    http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def append(conv: str, mid: str, text: str) -> None:
        r = http.post(f"/v1/conversations/{conv}/messages", json={"messages": [
            {"role": "user", "content": text, "id": mid}]})
        assert r.status_code == 201, r.text

    # 1. m1 is being embedded when the forget deletes it, and the client begins again under the same id
    append("c", "m1", "my old locker code is 1111")
    _wait_until_embedding(gated, 1)
    _forget(store_url, "c")
    append("c", "m1", "the weather in Oslo is mild")
    # 2. m2 waits for the indexer (busy with another conversation) when the forget deletes it; m3 follows it
    append("other", "o1", "something else entirely")
    append("d", "m2", "my old passport number is 5555")
    _forget(store_url, "d")
    append("d", "m3", "we are planning a picnic on Sunday")
    gated.gate.set()
    assert service.indexer.flush(60)
    http.close()

    store = open_store(store_url)
    try:
        for conv, kept, forgotten in (("c", ["m1"], "locker"), ("d", ["m3"], "passport")):
            scope = Scope(tenant="tenant-a", session_id=conv)
            held = {m.id: m for m in store.range(scope, 0, 10)}
            assert sorted(held) == kept, conv
            vectors = store.get_vectors(scope, list(held))
            assert sorted(vectors) == kept, f"a message of {conv!r} kept without its vector"
            for mid, m in held.items():  # its vector is its own words', not a forgotten message's
                own = np.asarray(gated.inner.embed([m.text]), dtype=np.float32)[0]
                assert float(np.dot(vectors[mid], own)) > 0.999, (conv, mid, m.text)
            stats = store.stats(scope)
            assert (stats["message_count"], stats["vector_count"]) == (1, 1), (conv, stats)
            assert not store.search_text(scope, [forgotten], 5), conv  # no keyword row of a forgotten message
    finally:
        store.close()


def _word(n: int) -> str:
    """A word of letters naming ``n`` alone (the keyword index stems words; digits would be split off)."""
    letters = ""
    while True:
        n, r = divmod(n, 26)
        letters += "bcdfghjklmnpqrstvwxzaeiouy"[r]
        if not n:
            return "zq" + letters


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_appends_racing_repeated_forgets_leave_every_message_whole_or_gone(make_live, store_url):
    base, service = make_live(rate_limit=0)
    key, _ = service.keys.create("tenant-a")
    acked: list[str] = []
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            i = 0
            while not stop.is_set():
                word = _word(n * 100_000 + i)
                r = http.post("/v1/conversations/c/messages", json={"messages": [
                    {"role": "user", "content": f"note {word} for later", "id": word}]})
                assert r.status_code == 201, r.text
                acked.append(word)
                i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for _ in range(3):
        time.sleep(0.5)
        _forget(store_url, "c")
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    assert service.indexer.flush(120)

    store = open_store(store_url)
    try:
        scope = Scope(tenant="tenant-a", session_id="c")
        held = {m.id: m for m in store.range(scope, 0, 100_000)}
        assert held and set(held) < set(acked), (len(held), len(acked))  # some forgotten, the later ones kept
        vectors = store.get_vectors(scope, list(held))
        assert set(vectors) == set(held), f"{len(set(held) - set(vectors))} message(s) kept without their vector"
        stats = store.stats(scope)
        assert (stats["message_count"], stats["vector_count"]) == (len(held), len(held)), stats
        for word in acked:  # a kept message is found by its word, a forgotten one by none
            hits = [h.id for h in store.search_text(scope, [word], 3)]
            assert hits == ([word] if word in held else []), (word, hits)
    finally:
        store.close()
