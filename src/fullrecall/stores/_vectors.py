"""Vectors: checking them, and exact cosine search over one scope's normalised matrix (the in-process cache
SQLite and Redis keep, loaded incrementally as vectors are added).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .base import Filters, Hit


def as_matrix(vectors: np.ndarray | Sequence[Sequence[float]], n: int) -> np.ndarray:
    """``vectors`` as a C-contiguous float32 (n, dim) matrix, or a ValueError saying why not."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1 and n == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ValueError(f"expected {n} vectors as an (n, dim) array, got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError("vectors have dimension 0")
    if not np.isfinite(arr).all():
        raise ValueError("vectors contain NaN or infinity")
    return np.ascontiguousarray(arr)


def as_query(vector: np.ndarray | Sequence[float]) -> np.ndarray:
    q = np.asarray(vector, dtype=np.float32).reshape(-1)
    if q.size == 0 or not np.isfinite(q).all():
        raise ValueError("query vector is empty or contains NaN/infinity")
    return q


def normalize_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32, copy=False)


def check_model(model: str) -> str:
    if not model or not isinstance(model, str):
        raise ValueError("set_vectors needs the embedding model's name (model=...)")
    return model


def model_mismatch(stored: tuple[str, int], model: str, dim: int) -> ValueError:
    return ValueError(
        f"this scope holds vectors of model {stored[0]!r} (dim {stored[1]}); refusing {model!r} (dim {dim}): "
        "re-embed everything with one model or use another store"
    )


def dim_mismatch(stored_dim: int, got: int) -> ValueError:
    return ValueError(f"query vector has dimension {got} but the stored vectors have dimension {stored_dim}")


Owner = tuple[str, str, str]  # (user_id, agent_id, session_id), as stored


@dataclass
class VectorBlock:
    """Vectors of one scope, normalised, with what filters need and where each message sits, for exact
    cosine search.
    """

    ids: list[str]
    keys: list[str]  # store-global message keys, parallel to ids
    matrix: np.ndarray  # (n, dim) float32, rows L2-normalised
    roles: np.ndarray  # object array
    kinds: np.ndarray
    created: np.ndarray  # float64
    owners: list[Owner | None]  # each message's session (None: not known), parallel to ids
    positions: list[int | None]  # each message's position in it

    @classmethod
    def build(
        cls,
        rows: Iterable[tuple[str, str, bytes | np.ndarray, str, str, float, Owner | None, int | None]],
        dim: int,
    ) -> VectorBlock:
        """``rows``: (id, key, vector, role, kind, created_at, owner, position)."""
        rows = list(rows)
        if not rows:
            return cls([], [], np.zeros((0, dim), np.float32), np.array([], object), np.array([], object),
                       np.array([]), [], [])
        ids, keys, vecs, roles, kinds, created, owners, positions = zip(*rows)
        mat = np.empty((len(rows), dim), dtype=np.float32)
        for i, v in enumerate(vecs):
            mat[i] = np.frombuffer(v, dtype=np.float32) if isinstance(v, (bytes, bytearray, memoryview)) else v
        return cls(
            list(ids),
            list(keys),
            normalize_rows(mat),
            np.array(roles, dtype=object),
            np.array(kinds, dtype=object),
            np.array(created, dtype=np.float64),
            list(owners),
            list(positions),
        )

    def extend(self, other: VectorBlock) -> VectorBlock:
        """This block plus ``other``'s rows (for vectors added since it was built)."""
        if not other.ids:
            return self
        return VectorBlock(
            self.ids + other.ids,
            self.keys + other.keys,
            np.concatenate([self.matrix, other.matrix]),
            np.concatenate([self.roles, other.roles]),
            np.concatenate([self.kinds, other.kinds]),
            np.concatenate([self.created, other.created]),
            self.owners + other.owners,
            self.positions + other.positions,
        )

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes) + 96 * len(self.ids)

    def search(self, query: np.ndarray, k: int, filters: Filters | None) -> list[Hit]:
        """The ``k`` rows of highest cosine with ``query`` that pass ``filters``, best first (ties: lower row)."""
        if k == 0 or not self.ids:
            return []
        if query.shape[0] != self.matrix.shape[1]:
            raise dim_mismatch(self.matrix.shape[1], query.shape[0])
        scores = self.matrix @ (query / (np.linalg.norm(query) or 1.0))
        mask = self._mask(filters)
        if mask is not None:
            scores[~mask] = -np.inf
            k = min(k, int(mask.sum()))
        k = min(k, len(scores))
        if k == 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        ids, keys, owners, positions = self.ids, self.keys, self.owners, self.positions
        return [Hit(ids[i], float(scores[i]), keys[i], owners[i], positions[i]) for i in top.tolist()]

    def _mask(self, f: Filters | None) -> np.ndarray | None:
        return filter_mask(f, self.ids, self.roles, self.kinds, self.created)


def filter_mask(
    f: Filters | None, ids: Sequence[str], roles: np.ndarray, kinds: np.ndarray, created: np.ndarray
) -> np.ndarray | None:
    """Boolean mask of the rows that pass ``f`` (None: no filter)."""
    if f is None:
        return None
    mask = np.ones(len(ids), dtype=bool)
    if f.roles is not None:
        mask &= np.isin(roles, list(f.roles))
    if f.kinds is not None:
        mask &= np.isin(kinds, list(f.kinds))
    if f.since is not None:
        mask &= created >= f.since
    if f.until is not None:
        mask &= created <= f.until
    if f.exclude_ids:
        excluded = f.exclude_ids
        mask &= np.fromiter((i not in excluded for i in ids), dtype=bool, count=len(ids))
    return mask
