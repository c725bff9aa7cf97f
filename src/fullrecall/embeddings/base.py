"""The embedder interface and small helpers shared by every backend."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from ..errors import EmbeddingError

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


def remote_vectors(name: str, rows: object, count: int, dimension: int | None) -> np.ndarray:
    """A remote model's answer for ``count`` texts as a float32 (count, dimension) matrix, or an EmbeddingError
    saying what is wrong with it: another shape, no numbers, or values float32 cannot hold (NaN, infinity, 1e39).

    ``dimension`` is the one expected (None: not known yet, any above 0 is taken).
    """
    try:
        with np.errstate(over="ignore"):
            vectors = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{name} returned embeddings that are not lists of numbers ({exc})") from None
    if vectors.ndim != 2 or vectors.shape[0] != count:
        raise EmbeddingError(f"{name} returned embeddings of shape {vectors.shape} for {count} texts")
    if vectors.shape[1] == 0 or vectors.shape[1] != (dimension or vectors.shape[1]):
        raise EmbeddingError(f"{name} returned dimension {vectors.shape[1]}, expected {dimension or 'at least 1'}")
    if not np.isfinite(vectors).all():
        raise EmbeddingError(f"{name} returned an embedding with NaN or infinite values (or beyond float32's range)")
    return vectors
