"""The contract every backend inherits: public methods check their input once, then call small hooks.

A backend subclasses :class:`StoreBase` and implements the hooks (``_append``, ``_set_vectors``,
``_put_record``, ``_get_record``, ``_get_records``, ``_delete_record``, ``_get_versioned_state``, ``ranges``,
``put_state``); what is built the same way on every backend (``range``, ``get_state``, ``update_state``) lives
here once.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Self

import numpy as np

from ..errors import InvalidInput, StateConflict
from . import _common as C
from . import _validate as V
from . import _vectors as Vec
from .base import ANY, Appended, Filters, Hit, Record, Scope, StoredMessage


class StoreBase:
    """What every backend shares: validation before any write, and the operations built on its hooks."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hooks, called with checked input ---------------------------------------------------

    def _append(self, scope: Scope, messages: list[StoredMessage]) -> Appended:
        """Write a non-empty batch of valid messages to the session of ``scope``; their positions and the ids held."""
        raise NotImplementedError

    def _replace(self, scope: Scope, ids: list[str], messages: list[StoredMessage]) -> Appended:
        """Delete the session's messages ``ids`` and append the valid ``messages`` in one atomic write; their
        positions and the ids held.
        """
        raise NotImplementedError

    def _set_vectors(self, scope: Scope, ids: list[str], matrix: np.ndarray, model: str) -> None:
        """Store the rows of ``matrix`` (float32, one per id, at least one) for the session's messages."""
        raise NotImplementedError

    def _put_record(
        self, scope: Scope, owner: tuple[str, str, str, str], record: Record, data: str, vector: np.ndarray | None,
        expected: int | None,
    ) -> int:
        """Upsert a valid record for ``owner`` (tenant, user, agent, session or ""), ``data`` as JSON text, if its
        stored version is ``expected`` (0: none; None: any, else StateConflict); its new version.
        """
        raise NotImplementedError

    def _get_record(self, owner: tuple[str, str, str, str], namespace: str, record_id: str) -> Record | None:
        """The record ``record_id`` of ``namespace`` held for ``owner`` (tenant, user, agent, session or ""): the
        session's own when it holds one, else its owner's (session ""); one lookup.
        """
        raise NotImplementedError

    def ranges(self, scope: Scope, spans: Sequence[tuple[int, int]]) -> list[list[StoredMessage]]:
        raise NotImplementedError

    def _get_copies(self, scope: Scope, ids: list[str]) -> list[StoredMessage]:
        """The messages of ``scope`` whose id is ``X@...`` for one of the valid ``ids`` (at least one), in
        conversation order.
        """
        raise NotImplementedError

    def _get_versioned_state(self, scope: Scope, key: str) -> tuple[dict[str, Any] | None, int]:
        """The document saved under a valid ``key`` for the session of ``scope``, and its version (0: none)."""
        raise NotImplementedError

    def _get_records(self, scope: Scope, namespace: str) -> list[Record]:
        """The records of a valid ``namespace`` that ``scope`` sees, by (created_at, id)."""
        raise NotImplementedError

    def _delete_record(self, scope: Scope, namespace: str, record_id: str, expected: int | None) -> bool:
        """Delete the record ``record_id`` (valid, as ``namespace`` is) that ``scope`` sees, if at version
        ``expected`` (None: any); whether one went.
        """
        raise NotImplementedError

    def put_state(self, scope: Scope, key: str, value: dict[str, Any], expected: int | None = None) -> int:
        raise NotImplementedError

    # -- the public methods that check input, then call a hook ---------------------------------

    def append(self, scope: Scope, messages: Sequence[StoredMessage]) -> Appended:
        """Write messages durably; return their positions (in input order). Nothing is written if one is bad."""
        scope.require_session()
        batch = list(messages)
        C.check_messages(batch)
        return self._append(scope, batch) if batch else Appended()

    def replace(self, scope: Scope, ids: Iterable[str], messages: Sequence[StoredMessage]) -> Appended:
        """Delete messages ``ids`` and append ``messages``, atomically (see :class:`Store`). Nothing is written if
        one is bad.
        """
        scope.require_session()
        doomed = C.read_ids(ids)
        batch = list(messages)
        C.check_messages(batch)
        if not doomed:
            return self._append(scope, batch) if batch else Appended()
        return self._replace(scope, doomed, batch)

    def get_copies(self, scope: Scope, ids: Iterable[str]) -> list[StoredMessage]:
        """The messages stored under an id derived from one of ``ids`` (see :class:`Store`); ids checked as ``get``
        checks them.
        """
        names = C.read_ids(ids)
        return self._get_copies(scope, names) if names else []

    def set_vectors(self, scope: Scope, ids: Sequence[str], vectors: np.ndarray, model: str) -> None:
        """Store one float32 vector per message id, tagged with the embedding model; ValueError (nothing written)
        for another model's or dimension's vectors than the conversation holds.

        A vector whose message the conversation does not hold is dropped, the others written: the message was
        deleted or forgotten since its append (another writer, an administrator's forget, while it was being
        embedded) and its vector has nothing to attach to; it never brings back a forgotten conversation.
        """
        scope.require_session()
        ids = list(ids)
        Vec.check_model(model)
        matrix = Vec.as_matrix(vectors, len(ids))
        if ids:
            self._set_vectors(scope, ids, matrix, model)

    def put_record(self, scope: Scope, record: Record, vector: np.ndarray | None = None,
                   expected: int | None = None) -> int:
        """Save a long-term record (and its vector) for the scope's owner; its new version (see :class:`Store`)."""
        data = C.record_json(record)
        owner = C.record_scope(scope)
        C.check_version(record.id, expected, "record")
        return self._put_record(scope, owner, record, data, Vec.as_matrix(vector, 1)[0] if vector is not None else None,
                                expected)

    def get_record(self, scope: Scope, namespace: str, record_id: str) -> Record | None:
        """One record by id, as ``put_record(scope, ...)`` wrote it (see :class:`Store`), or None."""
        if scope.user_id is ANY or scope.agent_id is ANY:
            raise InvalidInput("get_record reads one owner's record: ANY is only for get_records and forget")
        V.check_id(namespace, "get_record: 'namespace'")
        V.check_id(record_id, "get_record: 'record_id'")
        return self._get_record(C.record_scope(scope), namespace, record_id)

    def get_records(self, scope: Scope, namespace: str) -> list[Record]:
        """The records of ``namespace`` that ``scope`` sees (see :class:`Store`)."""
        return self._get_records(scope, V.check_id(namespace, "get_records: 'namespace'"))

    def delete_record(self, scope: Scope, namespace: str, record_id: str, expected: int | None = None) -> bool:
        """Delete one record by id; whether it was there (see :class:`Store`). A name that no record could have is
        refused (InvalidInput), the same on every backend, as ``put_record`` refuses it.
        """
        V.check_id(namespace, "delete_record: 'namespace'")
        C.check_version(record_id, expected, "record")
        return self._delete_record(scope, namespace, V.check_id(record_id, "delete_record: 'record_id'"), expected)

    def get_versioned_state(self, scope: Scope, key: str) -> tuple[dict[str, Any] | None, int]:
        """(document or None, its version: 0 when there is none). A key ``put_state`` would refuse is refused here
        too (InvalidInput), the same on every backend.
        """
        return self._get_versioned_state(scope, V.check_id(key, "state key"))

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """This thread's writes in the block, committed together where the backend can (see
        :class:`~fullrecall.stores.base.Store`): :meth:`_batched` says how.
        """
        depth = self.__dict__.setdefault("_batch_depth", threading.local())
        depth.n = getattr(depth, "n", 0) + 1
        try:
            with self._batched():
                yield
        finally:
            depth.n -= 1

    def _batched(self) -> contextlib.AbstractContextManager[None]:
        """The backend's way of holding a block's writes together (PostgreSQL: one transaction); here none."""
        return contextlib.nullcontext()

    def _outside_batch(self, what: str) -> None:
        """InvalidInput when this thread is inside a :meth:`batch` of this store (``what`` cannot be part of one)."""
        depth = self.__dict__.get("_batch_depth")
        inside: int = getattr(depth, "n", 0)
        if inside:
            raise InvalidInput(f"{what}: cannot run inside a batch() block (it needs every earlier write "
                               "committed); call it after the block")

    def prepare_vector_search(
        self, scope: Scope, filters: Filters | None = None
    ) -> Callable[[np.ndarray, int], list[Hit]]:
        """``search_vectors`` in two steps (see :meth:`~.base.Store.prepare_vector_search`); here the whole search
        is the second.
        """
        search: Callable[..., list[Hit]] = self.search_vectors  # type: ignore[attr-defined]  # each backend's
        return lambda vector, k: search(scope, vector, k, filters)

    def warm(self, scope: Scope, *, kept_only: bool = False) -> None:
        """Read into this process what searches of ``scope`` keep there (see :meth:`~.base.Store.warm`); here nothing."""

    # -- built on the hooks ---------------------------------------------------------------------

    def range(self, scope: Scope, start: int, end: int) -> list[StoredMessage]:
        """Messages of one session with ``start <= position <= end``, in order."""
        return self.ranges(scope, [(start, end)])[0]

    def get_state(self, scope: Scope, key: str) -> dict[str, Any] | None:
        """The document saved under key, or None."""
        return self.get_versioned_state(scope, key)[0]

    def update_state(
        self, scope: Scope, key: str, change: Callable[[dict[str, Any] | None], dict[str, Any]], attempts: int = 32
    ) -> dict[str, Any]:
        """Read-modify-write that never loses a concurrent update (compare-and-set, retried).

        ``change`` gets the current document (a fresh copy, or None) and returns the new one; it may
        be called again when another writer got in first, so it must not have other effects. Raises
        :class:`~fullrecall.errors.StateConflict` after ``attempts`` lost races.
        """
        for _ in range(max(1, attempts)):
            current, version = self.get_versioned_state(scope, key)
            new = change(current)
            try:
                self.put_state(scope, key, new, expected=version)
                return new
            except StateConflict:
                time.sleep(0.001 * random.random())  # let the winner finish before reading again
        raise StateConflict(f"state {key!r} kept changing under {attempts} attempts to update it", current=-1)
