"""The service under test: a real app over a real store of each backend, driven over ASGI (httpx)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")


class Api:
    """A running app, the keys of two tenants, and a client."""

    def __init__(self, app, client) -> None:
        self.app, self.client = app, client
        self.service = app.state.service
        self.store = self.service.store
        self.key_a, _ = self.service.keys.create("tenant-a")
        self.key_b, _ = self.service.keys.create("tenant-b")

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    @property
    def a(self) -> dict[str, str]:
        return self.headers(self.key_a)

    @property
    def b(self) -> dict[str, str]:
        return self.headers(self.key_b)


@pytest.fixture
def make_api(store_url, default_embedder):
    from fastapi.testclient import TestClient

    from fullrecall.service.app import create_app
    from fullrecall.service.config import Settings

    opened = []

    def make(**settings) -> Api:
        app = create_app(Settings(store=store_url, **settings), embedder=default_embedder)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        return Api(app, client)

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def api(make_api) -> Api:
    return make_api()


@pytest.fixture
def make_live(store_url: str, default_embedder: Any) -> Iterator[Callable[..., tuple[str, Any]]]:
    """``make_live(embedder=None, **settings)``: the service under uvicorn on a free loopback port (a real socket, real HTTP), its
    base URL and its ``Service``; stopped when the test ends.
    """
    pytest.importorskip("uvicorn")
    import uvicorn

    from fullrecall.service.app import create_app
    from fullrecall.service.config import Settings
    from fullrecall.stores._servers import free_port

    running: list[tuple[Any, threading.Thread]] = []

    def make(embedder: Any = None, **settings: Any) -> tuple[str, Any]:
        app = create_app(Settings(store=store_url, **settings), embedder=embedder or default_embedder)
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        running.append((server, thread))
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}", app.state.service

    yield make
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def live(make_live: Callable[..., tuple[str, Any]]) -> tuple[str, Any]:
    """The service in its default settings, really started: its base URL and its ``Service``."""
    return make_live()


class Gated:
    """The real embedder, each call held until ``gate`` is set (30 s at most): messages wait to be embedded."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.gate = inner, threading.Event()
        self.name, self.dimension = inner.name, inner.dimension
        self.waiting = 0  # calls that reached the gate

    def embed(self, texts: Any) -> Any:
        self.waiting += 1
        self.gate.wait(30)
        return self.inner.embed(texts)


@pytest.fixture
def gated(default_embedder) -> Gated:
    return Gated(default_embedder)
