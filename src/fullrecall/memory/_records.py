"""Owner-checked, expiring, similarity-searchable long-term records (facts, patterns) on any store.

The :class:`~fullrecall.stores.base.Store` protocol keeps records by scope and namespace
but has no search over them and no expiry. :class:`RecordBook` adds both on top of the
protocol, identically on every backend:

* **ownership**: records are written under the owner's exact scope (tenant, user, agent),
  which is all a store's reads and deletes of that scope reach; each record also carries
  its owner in its data and a read keeps only exact matches (a second check, in case a
  record is ever written under a wider scope by other code).
* **expiry**: a record may carry ``expires_at`` (Unix seconds) in its data; reads skip
  expired records and delete them (purge on read).
* **similarity**: each record's vector is kept in its data (base64 float32, computed once,
  never recomputed) and searched by cosine in process. Long-term records are few per
  owner (hundreds to thousands), so a scan is fast.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..stores.base import Record, Scope, Store

_VEC = "_vec"
_OWNER = "_owner"
EXPIRES_AT = "expires_at"


def owner_scope(tenant: str, user_id: str | None, agent_id: str | None) -> Scope:
    """The exact scope of one owner: an unset user or agent is the default owner ``""``, never "any"."""
    return Scope(tenant=tenant, user_id=user_id or "", agent_id=agent_id or "", session_id=None)


def _encode(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.float32)


class RecordBook:
    """One namespace of one owner's records. ``embedder`` is loaded on first use when not given."""

    def __init__(
        self,
        store: Store,
        scope: Scope,
        namespace: str,
        *,
        embedder: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.scope = scope
        self.namespace = namespace
        self._embedder = embedder
        self.clock = clock

    @property
    def embedder(self) -> Any:
        if self._embedder is None or isinstance(self._embedder, str):
            from ..embeddings import load_embedder

            self._embedder = load_embedder(self._embedder)
        return self._embedder

    @property
    def _owner(self) -> list[str]:
        user, agent = self.scope.user_id or "", self.scope.agent_id or ""
        if not isinstance(user, str) or not isinstance(agent, str):
            raise ValueError("a record book belongs to one owner: ANY is not one (use owner_scope)")
        return [self.scope.tenant, user, agent]

    # -- writing -----------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts, in one batched call."""
        return self.embedder.embed(list(texts))

    def put(self, record: Record, vector: np.ndarray | None = None) -> Record:
        """Write (or replace) a record; ``vector`` (if any) is kept with it for :meth:`similar`."""
        record.namespace = self.namespace
        record.data = dict(record.data)
        record.data[_OWNER] = self._owner
        if vector is not None:
            record.data[_VEC] = _encode(vector)
        else:  # a record read back and written again keeps the vector it had
            vector = self.vector(record)
        self.store.put_record(self.scope, record, vector)
        return record

    def delete(self, record_id: str) -> bool:
        """Delete one of the owner's records; an id the owner does not hold deletes nothing (the store
        deletes within the owner's exact scope only).
        """
        return self.store.delete_record(self.scope, self.namespace, record_id)

    def owned_id(self, *parts: str) -> str:
        """A stable record id for ``parts``, different for every owner."""
        return hashlib.sha256("\x00".join([*self._owner, self.namespace, *parts]).encode()).hexdigest()[:24]

    # -- reading -----------------------------------------------------------------------------
    def all(self) -> list[Record]:
        """The owner's live records (oldest first); expired ones are deleted on the way."""
        now = self.clock()
        live, seen = [], set()
        for r in self.store.get_records(self.scope, self.namespace):
            if r.data.get(_OWNER) != self._owner or r.id in seen:
                continue
            seen.add(r.id)
            expires = r.data.get(EXPIRES_AT)
            if expires is not None and float(expires) <= now:
                self.delete(r.id)
                continue
            live.append(r)
        return live

    def get(self, record_id: str) -> Record | None:
        return next((r for r in self.all() if r.id == record_id), None)

    @staticmethod
    def vector(record: Record) -> np.ndarray | None:
        encoded = record.data.get(_VEC)
        return _decode(encoded) if isinstance(encoded, str) else None

    def similar(self, query: str, records: Sequence[Record], k: int) -> list[tuple[Record, float]]:
        """The ``k`` records most similar to ``query`` by cosine, best first (records without a vector skipped)."""
        with_vectors = [(r, v) for r in records if (v := self.vector(r)) is not None]
        if not with_vectors or k <= 0 or not query.strip():
            return []
        q = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        matrix = np.stack([v for _, v in with_vectors])
        if matrix.shape[1] != q.shape[0]:
            raise ValueError(
                f"records in {self.namespace!r} hold {matrix.shape[1]}-dimensional vectors but the embedder "
                f"{getattr(self.embedder, 'name', '?')!r} makes {q.shape[0]}-dimensional ones: use the same model"
            )
        scores = matrix @ q
        order = np.argsort(-scores, kind="stable")[:k]
        return [(with_vectors[i][0], float(scores[i])) for i in order]


def public_data(record: Record) -> dict[str, Any]:
    """A record's data without the bookkeeping keys (vector, owner)."""
    return {k: v for k, v in record.data.items() if k not in (_VEC, _OWNER)}
