"""A write acknowledged with 2xx survives a SIGKILL of the server a moment later (a real uvicorn process)."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from fullrecall.service.auth import KeyStore
from fullrecall.service.process import free_port, start_server
from fullrecall.stores import Scope, open_store

httpx = pytest.importorskip("httpx")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_acknowledged_writes_survive_sigkill(store_url):
    store = open_store(store_url)
    key, _ = KeyStore(store).create("tenant-a")
    port = free_port()
    proc, _ = start_server(store_url, port, rate_limit="0")
    acked: list[tuple[str, str]] = []
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}) as c:
            i = 0
            while not stop.is_set():
                mid = f"w{n}-{i}"
                try:
                    r = c.post(f"/v1/conversations/conv{n % 3}/messages", json={"messages": [
                        {"role": "user", "content": f"message {mid}", "id": mid}]}, timeout=5)
                except httpx.HTTPError:
                    return  # the server is gone: this write was never acknowledged
                if r.status_code == 201:
                    acked.append((f"conv{n % 3}", mid))
                i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stop.set()
    for t in threads:
        t.join()
    assert len(acked) > 10
    for conv in {c for c, _ in acked}:
        want = {mid for c, mid in acked if c == conv}
        found = {m.id for m in store.get(Scope(tenant="tenant-a", session_id=conv), list(want))}
        assert want <= found, f"{len(want - found)} acknowledged message(s) lost in {conv}"
    # a restarted server serves them, and a retry of an acknowledged write stores nothing twice
    proc, _ = start_server(store_url, port)
    try:
        conv, mid = acked[-1]
        before = store.count(Scope(tenant="tenant-a", session_id=conv))  # acknowledged, and perhaps some in flight
        r = httpx.post(f"http://127.0.0.1:{port}/v1/conversations/{conv}/messages", headers={
            "Authorization": f"Bearer {key}"}, json={"messages": [{"role": "user", "content": "retry", "id": mid}]})
        assert r.status_code == 201
        assert store.count(Scope(tenant="tenant-a", session_id=conv)) == before
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        store.close()


def test_graceful_shutdown_finishes_writes_and_embeddings(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'g.db'}"
    store = open_store(store_url)
    key, _ = KeyStore(store).create("tenant-a")
    proc, url = start_server(store_url, rate_limit="0")
    acked: list[str] = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        for i in range(30):
            r = c.post("/v1/conversations/g/messages", json={"messages": [{"role": "user", "content": f"m {i}",
                                                                            "id": f"g{i}"}]})
            assert r.status_code == 201
            acked.append(f"g{i}")
        batch = [{"role": "user", "content": f"batch message {i} " * 20, "id": f"b{i}"} for i in range(400)]
        # (the window manager summarizes most of it before answering: a big request, a longer wait)
        assert c.post("/v1/conversations/g/messages", json={"messages": batch}, timeout=120).status_code == 201
        acked += [m["id"] for m in batch]  # embedding 400 messages takes a while: SIGTERM comes first
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its graceful shutdown
    scope = Scope(tenant="tenant-a", session_id="g")
    assert {m.id for m in store.get(scope, acked)} == set(acked)
    assert set(store.get_vectors(scope, acked)) == set(acked)  # the queue was drained before exit
    store.close()
