"""The embedder interface and small helpers shared by every backend."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

T = TypeVar("T")


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors, in batches.

    ``name`` identifies the vector space: it is stored with the vectors, so two
    embedders with the same name must produce interchangeable vectors (an int8
    and an fp32 model get different names and are never mixed in one index).
    """

    name: str

    @property
    def dimension(self) -> int:
        """Length of each vector (read-only: an embedder may learn it on first use)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), dimension)``, float32, unit rows."""
        ...


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit rows as float32 (zero rows stay zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim == 1:
        v = v[None, :]
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (v / norms).astype(np.float32, copy=False)


def batched(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def empty(dimension: int) -> np.ndarray:
    return np.zeros((0, dimension), dtype=np.float32)
