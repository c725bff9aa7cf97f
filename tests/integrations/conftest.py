"""Fixtures for the LangGraph / LangChain integration: fullrecall-backed stores on every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph")

from lg_helpers import CharEmbeddings, Clock  # noqa: E402

from fullrecall.integrations.langgraph_store import FullrecallStore  # noqa: E402
from fullrecall.stores import open_store  # noqa: E402


@pytest.fixture
def char_embeddings() -> CharEmbeddings:
    return CharEmbeddings()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_store(store_url: str) -> Iterator[Callable[..., FullrecallStore]]:
    """``make_store(**options)``: a FullrecallStore on this test's backend (all share one fullrecall store)."""
    base = open_store(store_url)
    made: list[FullrecallStore] = []

    def make(**options: Any) -> FullrecallStore:
        store = FullrecallStore(base, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.stop_ttl_sweeper()
    base.close()


@pytest.fixture
def lg_store(make_store: Callable[..., FullrecallStore]) -> FullrecallStore:
    return make_store()

