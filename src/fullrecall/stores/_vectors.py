"""Vectors: checking them, and cosine search over one scope's normalised matrix (the in-process cache
SQLite and Redis keep, loaded incrementally as vectors are added).

The search is exact: numpy scans the float32 matrix; a large block (see :mod:`._quantized`, with faiss
installed) has faiss scan an 8-bit copy for candidates whose cosines are then computed exactly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from .._fork import after_fork_in_child
from ._grown import Room, Rows, as_rows, grown, items
from ._quantized import Quantized
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


def normalize_rows(m: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The rows scaled to length 1 (a zero row stays zero), as a new float32 matrix (or written into ``out``)."""
    m = np.asarray(m, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m)).astype(np.float32)[:, None]  # a third of linalg.norm's time
    norms[norms == 0] = 1.0
    return np.divide(m, norms, out=out)


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

log = logging.getLogger(__name__)
_maker: ThreadPoolExecutor | None = None
_maker_lock = threading.Lock()
_start_lock = threading.Lock()


@after_fork_in_child
def _renew() -> None:
    """New locks, and no worker thread of the parent's (see ``_fork``)."""
    global _maker, _maker_lock, _start_lock
    _maker, _maker_lock, _start_lock = None, threading.Lock(), threading.Lock()


def _make_copy(matrix: np.ndarray) -> Future[Quantized | None]:
    """The 8-bit copy of ``matrix``, made on the worker thread (one per process); None if making it failed."""
    global _maker
    with _maker_lock:
        if _maker is None:
            _maker = ThreadPoolExecutor(1, thread_name_prefix="fullrecall-vector-copy")

    def make() -> Quantized | None:
        try:
            return Quantized.of(matrix)
        except Exception as exc:  # noqa: BLE001 - the exact scan stays correct without it
            log.warning("could not make the 8-bit copy of %d vectors (%s: %s); scanning them exactly",
                        len(matrix), type(exc).__name__, exc)
            return None

    return _maker.submit(make)


class _RowIndex:
    """Message id -> row numbers, shared by a block and the blocks extended from it (rows are only appended,
    so a block ignores the rows past its own length).
    """

    def __init__(self) -> None:
        self.first: dict[str, int] = {}
        self.more: dict[str, list[int]] = {}  # ids on several rows (the same id in several sessions)
        self.size = 0

    def add(self, ids: Sequence[str], start: int) -> bool:
        """Index ``ids`` as rows ``start``...; False when rows past ``start`` are indexed already (another
        block's).
        """
        if start != self.size:
            return False
        first, more = self.first, self.more
        for row, i in enumerate(ids, start):
            if first.setdefault(i, row) != row:
                more.setdefault(i, []).append(row)
        self.size = start + len(ids)
        return True

    def rows(self, ids: Iterable[str], below: int) -> list[int]:
        first, more = self.first, self.more
        out = [row for i in ids if (row := first.get(i)) is not None and row < below]
        if more:
            out += [r for i in ids if i in more for r in more[i] if r < below]
        return out


@dataclass
class VectorBlock:
    """Vectors of one scope, normalised, with what filters need and where each message sits, for exact
    cosine search.
    """

    ids: Sequence[str]
    keys: Sequence[str]  # store-global message keys, parallel to ids
    matrix: np.ndarray  # (n, dim) float32, rows L2-normalised
    roles: np.ndarray  # object array
    kinds: np.ndarray
    created: np.ndarray  # float64
    owners: Sequence[Owner | None]  # each message's session (None: not known), parallel to ids
    positions: Sequence[int | None]  # each message's position in it
    quantized: Quantized | None = field(default=None, repr=False, compare=False)  # large blocks, with faiss: made
    # by the first search (a block built only to extend another is never quantized), grown by ``extend``
    _row_index: _RowIndex | None = field(default=None, repr=False, compare=False)  # built on first exclusion
    _making: Future[Quantized | None] | None = field(default=None, repr=False, compare=False)  # a copy being made
    # on the worker thread (clusters take about a second to train), passed on by ``extend``
    _rooms: tuple[Room, ...] | None = field(default=None, repr=False, compare=False)  # where ``matrix``, ``roles``,
    # ``kinds`` and ``created`` lie, with room to grow (the lists are :class:`~._grown.Rows`, grown in place too)

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
        return cls.of_columns(ids, keys, vecs, roles, kinds, created, owners, positions, dim)

    @classmethod
    def of_columns(
        cls, ids: Sequence[str], keys: Sequence[str], vecs: Sequence[bytes | np.ndarray], roles: Sequence[str],
        kinds: Sequence[str], created: Sequence[float], owners: Sequence[Owner | None],
        positions: Sequence[int | None], dim: int,
    ) -> VectorBlock:
        """:meth:`build` of rows given as columns (a store that reads them as columns makes no row tuples)."""
        n = len(ids)
        if all(map(bytes.__instancecheck__, vecs)):  # as stored: one copy of them all (a cold load: 100,000 rows)
            mat = np.frombuffer(b"".join(cast("Sequence[bytes]", vecs)), dtype=np.float32).reshape(n, dim)
        else:
            mat = np.empty((n, dim), dtype=np.float32)
            for i, v in enumerate(vecs):
                mat[i] = np.frombuffer(v, dtype=np.float32) if isinstance(v, (bytearray, memoryview)) else v
        room = Room(n, mat)
        return cls(
            Rows(list(ids)),
            Rows(list(keys)),
            normalize_rows(mat, out=room.array[:n]),
            np.array(roles, dtype=object),
            np.array(kinds, dtype=object),
            np.array(created, dtype=np.float64),
            Rows(list(owners)),
            Rows(list(positions)),
            _rooms=(room,),
        )

    def extend(self, other: VectorBlock) -> VectorBlock:
        """This block plus ``other``'s rows (for vectors added since it was built)."""
        if not other.ids:
            return self
        (matrix, roles, kinds, created), rooms = grown(
            (self.matrix, self.roles, self.kinds, self.created), self._rooms,
            (other.matrix, other.roles, other.kinds, other.created))
        n = len(self.ids)
        quantized = self.quantized  # grown with the block; made again (by the next search) when it cannot be
        if quantized is not None and (quantized.outgrown(len(matrix)) or not quantized.grow(matrix, n)):
            quantized = None
        row_index = self._row_index
        if row_index is not None and not row_index.add(other.ids, n):
            row_index = None
        making = self._making if quantized is None else None  # grown to the new rows once made
        return VectorBlock(
            as_rows(self.ids) + other.ids, as_rows(self.keys) + other.keys, matrix, roles, kinds, created,
            as_rows(self.owners) + other.owners, as_rows(self.positions) + other.positions,
            quantized, row_index, making, rooms,
        )

    @property
    def nbytes(self) -> int:
        room = self._rooms[0] if self._rooms else None
        rows = room.array.nbytes if room is not None else self.matrix.nbytes  # a shared room counted by each block
        return int(rows) + 96 * len(self.ids) + (self.quantized.nbytes if self.quantized else 0)

    def search(self, query: np.ndarray, k: int, filters: Filters | None) -> list[Hit]:
        """The ``k`` rows of highest cosine with ``query`` that pass ``filters``, best first (ties: lower row)."""
        if k == 0 or not self.ids:
            return []
        if query.shape[0] != self.matrix.shape[1]:
            raise dim_mismatch(self.matrix.shape[1], query.shape[0])
        query = query / (np.sqrt(query.dot(query)) or 1.0)  # np.linalg.norm's value, without its checks
        n = len(self.ids)
        mask = self._mask(filters)
        if mask is not None:
            k = min(k, int(mask.sum()))
        k = min(k, n)
        if k == 0:
            return []
        rows = None
        quantized = self._copy()
        if quantized is not None and quantized.size >= n:
            # candidates from the 8-bit copy, in row order (ties: lower row), scored exactly; too few (a filter
            # that the clusters scanned hardly pass): the exact scan
            rows = np.sort(quantized.candidates(query, quantized.wanted(k), n, mask))
        if rows is not None and len(rows) >= k:
            scores = self.matrix[rows] @ query
            order = np.argsort(-scores, kind="stable")[:k]
            top, best = rows[order].tolist(), scores[order].tolist()
        else:
            scores = self.matrix @ query
            if mask is not None:
                scores[~mask] = -np.inf
            picked = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            picked = picked[np.argsort(-scores[picked], kind="stable")]
            top, best = picked.tolist(), scores[picked].tolist()
        ids, keys, owners, positions = items(self.ids), items(self.keys), items(self.owners), items(self.positions)
        return [Hit(ids[i], s, keys[i], owners[i], positions[i]) for i, s in zip(top, best)]

    def _copy(self) -> Quantized | None:
        """The 8-bit copy to scan, if the block has one. The first search that needs it makes it: a flat copy
        at once (tens of milliseconds), clusters on the worker thread, the searches meanwhile scanning
        exactly, so that no search waits about a second for the training (the first one of a large block,
        or of one rebuilt after deletes).
        """
        n = len(self.ids)
        quantized = self.quantized
        if quantized is not None and not quantized.outgrown(n):
            return quantized
        if not Quantized.pays(n):
            return None
        if not Quantized.clusters(n):
            self.quantized = Quantized.of(self.matrix)
            return self.quantized
        with _start_lock:  # one copy made a block, however many searches ask at once
            making = self._making
            if making is None:
                self._making = making = _make_copy(self.matrix)
        if not making.done():
            return None
        made = making.result()
        # made from this block's first rows (an ancestor's matrix): grown to the rows added since
        if made is not None and made.size <= n and made.grow(self.matrix, made.size):
            self.quantized = made
        self._making = None  # after the copy is in place: a search in between would start another
        return self.quantized if self.quantized is not None and not self.quantized.outgrown(n) else None

    def make_copy(self) -> None:
        """Make the 8-bit copy the first search of this block would make (or start making it), so that no
        question waits for it: a store's warm does, off the questions' path (a flat copy of 2,000 rows takes
        a few milliseconds).
        """
        self._copy()

    def wait_for_copy(self, timeout: float | None = None) -> None:
        """Wait until the 8-bit copy a search started making is made (for tests and benches)."""
        if self._making is not None:
            self._making.result(timeout)

    def _mask(self, f: Filters | None) -> np.ndarray | None:
        if f is None:
            return None
        if not f.exclude_ids:
            return filter_mask(f, self.ids, self.roles, self.kinds, self.created)
        # excluded ids by a lookup of their rows, not by testing every row's id
        mask = filter_mask(replace(f, exclude_ids=None), self.ids, self.roles, self.kinds, self.created)
        if mask is None:
            mask = np.ones(len(self.ids), dtype=bool)
        if self._row_index is None:
            index = _RowIndex()
            index.add(self.ids, 0)
            self._row_index = index
        mask[self._row_index.rows(f.exclude_ids, len(self.ids))] = False
        return mask


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
