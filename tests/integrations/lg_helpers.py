"""A real, deterministic LangChain embedder and a hand-moved clock for the LangGraph integration tests."""

from __future__ import annotations

import math
import zlib
from collections import Counter

from langchain_core.embeddings import Embeddings


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


class Clock:
    """A clock the TTL tests move by hand (Unix seconds)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += minutes * 60
