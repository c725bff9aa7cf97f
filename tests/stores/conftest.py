"""Store fixtures; the servers behind them (``service_urls``, ``store_url``) are in tests/conftest.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

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


@pytest.fixture
def pg_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of each statement a psycopg connection executes from now on (clear it to count afresh)."""
    import psycopg

    statements: list[str] = []
    execute = psycopg.Connection.execute

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    return statements
