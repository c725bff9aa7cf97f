"""A counting wrapper around the real default embedder (``default_embedder`` is in tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest


class CountingEmbedder:
    """The real embedder, counting how many texts it was asked to embed (to prove nothing is re-embedded)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.embedded: list[str] = []

    def embed(self, texts) -> np.ndarray:
        self.embedded += list(texts)
        return self.inner.embed(texts)


@pytest.fixture()
def counting(default_embedder) -> CountingEmbedder:
    return CountingEmbedder(default_embedder)
