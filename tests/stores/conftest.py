"""Store fixtures; the servers behind them (``service_urls``, ``store_url``) are in tests/conftest.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from fullrecall.stores import Scope, Store, open_store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def scope() -> Scope:
    return Scope(
        user_id="alice", agent_id="helper", session_id=f"s-{uuid.uuid4().hex[:8]}"
    )
