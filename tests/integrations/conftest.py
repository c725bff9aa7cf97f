"""Fixtures for the LangGraph / LangChain integration: fullrecall-backed stores on every backend."""

from __future__ import annotations

import math
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.embeddings import Embeddings  # noqa: E402

from fullrecall.integrations.langgraph_store import FullrecallStore  # noqa: E402
from fullrecall.stores import open_store  # noqa: E402


class CharEmbeddings(Embeddings):
    """A real, deterministic LangChain embedder: character and bigram counts hashed into ``dims`` buckets.

    Texts that share characters score high; the same text always gets the same vector.
    """

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls: list[list[str]] = []

    def _one(self, text: str) -> list[float]:
        grams = Counter(text.lower()) + Counter(text.lower()[i : i + 2] for i in range(len(text) - 1))
        vector = [0.0] * self.dims
        for gram, n in grams.items():
            vector[zlib.crc32(gram.encode()) % self.dims] += n
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls.append([text])
        return self._one(text)


@pytest.fixture
def char_embeddings() -> CharEmbeddings:
    return CharEmbeddings()


class Clock:
    """A clock the TTL tests move by hand (Unix seconds)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += minutes * 60


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


def fresh_user() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"
