"""A write acknowledged with 2xx survives a SIGKILL of the server a moment later (a real uvicorn process)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fullrecall.service.auth import KeyStore
from fullrecall.stores import Scope, open_store

httpx = pytest.importorskip("httpx")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store_url: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "FULLRECALL_STORE": store_url, "FULLRECALL_PORT": str(port), "FULLRECALL_RATE_LIMIT": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "fullrecall", "serve", "--log-level", "warning"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
    proc.kill()
    raise RuntimeError("the server did not start")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_acknowledged_writes_survive_sigkill(store_url):
    store = open_store(store_url)
    key, _ = KeyStore(store).create("tenant-a")
    port = free_port()
    proc = start_server(store_url, port)
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
    proc = start_server(store_url, port)
    try:
        conv, mid = acked[-1]
        r = httpx.post(f"http://127.0.0.1:{port}/v1/conversations/{conv}/messages", headers={
            "Authorization": f"Bearer {key}"}, json={"messages": [{"role": "user", "content": "retry", "id": mid}]})
        assert r.status_code == 201
        assert store.count(Scope(tenant="tenant-a", session_id=conv)) == sum(1 for c, _ in acked if c == conv)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        store.close()
