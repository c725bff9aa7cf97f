"""The archive: every message that left the window, verbatim, searchable.

:meth:`Archive.write` is a window manager's removal listener. It commits the
messages to the store *first* (if that fails, the manager keeps them in the
window), then embeds them; an embedding failure only delays searchability
(the text is stored, lexical search finds it, and the vectors are retried).
With ``background_indexing=True`` the embedding happens on a worker thread:
``write`` returns once the text is durable, and :meth:`Archive.flush` waits for
the vectors.

When ``archived_span`` is set (:class:`~fullrecall.memory.SyncConversationMemory` sets
it) every message is in the store from the moment it was added, and
``archived_span()`` says which positions ``[first, end)`` have left the window, but for those
``in_window()`` names (messages a manager keeps pinned in the window at their own places).
Archiving a removed message is then only indexing it: ``write`` appends nothing,
and a position missing from the store was forgotten, not lost (it is never
written back); ``get`` and ``recall`` return only archived positions.

Nothing that grows is kept in a document that is read, changed and written back,
so any number of processes can archive one conversation at once without losing
an update:

* each summary is one record (namespace ``archive.summaries``; its id is the
  summary's id, so a rerun stores it once) naming the positions it covers;
* each batch whose embedding failed (or, in the background, has not happened yet)
  is one record (``archive.unembedded``), deleted once embedded; catching up takes
  at most ``catch_up_batch`` messages at a time;
* the oldest and newest archived positions, the evicted count and the archived
  count are derived from the store (the first position a conversation archived is
  one ``archive.origin`` record per writer that found none; the smallest wins).
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import ArchiveError, InvalidInput
from ..messages.formats import parse_message, render_message
from ..messages.model import Message, TextBlock
from ..search.terms import index_text
from ..stores._validate import check_filters
from ..stores._vectors import as_matrix
from ..stores.base import Appended, Filters, Record, Scope, Store, StoredMessage
from ..window.base import RemovedMessages
from .indexer import BackgroundIndexer, Job
from .recall import RecalledRange, fill_ranges, merge_ranges, original_question

log = logging.getLogger("fullrecall.archive")

END = 2**53  # past any position: ``range(scope, start, END)`` reads to the end of a conversation
SUMMARIES = "archive.summaries"  # one record per summary
UNEMBEDDED = "archive.unembedded"  # one record per batch still waiting for its vectors
ORIGIN = "archive.origin"  # the first archived position (id: the position)
BACKLOG_RECHECK_S = 30.0  # how often a writer looks for batches other processes could not embed
PROBE = 64  # positions read at a time when looking for the oldest archived message
MAX_PROBE = 4096
BRANCH_BATCH = 500  # positions copied a read by ``branch``


@dataclass
class Recall:
    """What a query brought back: hits, the ranges around them, and how long it took."""

    query: str
    ranges: list[RecalledRange] = field(default_factory=list)
    hits: list[Any] = field(default_factory=list)
    elapsed_ms: float = 0.0

    @property
    def messages(self) -> list[StoredMessage]:
        return [m for r in self.ranges for m in r.messages]


class Archive:
    """Verbatim archive of one conversation (``scope.session_id``) in a store.

    ``max_num_archived_messages`` and ``max_memory_archived_messages`` (bytes of
    text, embeddings and index together) evict the oldest messages, logged
    and counted in ``get_memory_usage_stats()["evicted_count"]``.

    ``background_indexing=True`` embeds on a worker thread (``write`` returns once the
    text and the record of the batch waiting for vectors are durable, and keyword search
    finds the text; the worker embeds what was queued once writes pause for 20 ms, or at
    once for a full ``catch_up_batch``, at most 0.5 s after a write: see
    :mod:`.indexer`); call :meth:`flush` to wait for the vectors and :meth:`close` at the end.
    ``catch_up_batch`` bounds how many waiting messages one catch-up embeds.
    ``external_indexing=True`` says another component embeds every message the
    conversation stores (the HTTP service's indexer does, once each): ``write`` then
    stores and books, and embeds nothing.
    """

    # a window manager checks that each message it hands over is a JSON value (no NaN, no Python
    # object) before it summarizes or removes anything, and names the one that is not
    stores_json = True

    def __init__(
        self,
        store: Store | str | None = None,
        scope: Scope | None = None,
        *,
        embedding_model: Any = None,
        reranker_model: Any = None,
        aws_region: str | None = None,
        embedding_dimensions: int | None = None,
        max_num_archived_messages: int | None = None,
        max_memory_archived_messages: int | None = None,
        archived_span: Callable[[], tuple[int, int]] | None = None,
        background_indexing: bool = False,
        catch_up_batch: int = 256,
        external_indexing: bool = False,
        **search_options: Any,
    ) -> None:
        for name, value in (("max_num_archived_messages", max_num_archived_messages),
                            ("max_memory_archived_messages", max_memory_archived_messages),
                            ("catch_up_batch", catch_up_batch)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or None, got {value}")
        _check_search_options(search_options)
        if store is None or isinstance(store, str):
            from ..stores import open_store

            store = open_store(store or "sqlite:///:memory:")
        self.store: Store = store
        self.scope = (scope or Scope(session_id="default")).require_session()
        self.max_num_archived_messages = max_num_archived_messages
        self.max_memory_archived_messages = max_memory_archived_messages
        self._search_args = dict(embedding_model=embedding_model, reranker_model=reranker_model, aws_region=aws_region,
                                 embedding_dimensions=embedding_dimensions, **search_options)
        self.archived_span = archived_span
        self.in_window: Callable[[], Iterable[int]] | None = None  # positions in the span still in the window
        self.catch_up_batch = catch_up_batch
        self.external_indexing = external_indexing
        self._search: Any = None
        self.last_evicted: list[int] = []
        self._origin: int | None = None  # first archived position, once known (conversations that do not log)
        self._oldest: int | None = None  # where the oldest archived message was last seen (a hint)
        self._writing: int | None = None  # during a write: the newest position it archives
        self._high: tuple[Scope, int] | None = None  # the furthest place this archive wrote at, in which scope
        # (see _check_places; an archive moved to another conversation starts again)
        self._next_catch_up = 0.0  # when to look for waiting batches again (0: on the next write)
        self._failed: set[str] = set()  # waiting batches this archive's worker could not embed (queued nowhere)
        self._indexer = BackgroundIndexer(self._index_jobs, batch_size=catch_up_batch) if background_indexing \
            else None

    @property
    def logged(self) -> bool:
        """True when the store holds the whole conversation, window included (see the module docstring)."""
        return self.archived_span is not None

    @property
    def background_indexing(self) -> bool:
        """True when vectors are computed on a worker thread (see :meth:`flush`)."""
        return self._indexer is not None

    # -- search engine, built on first use so constructing an Archive is instant -------------
    @property
    def search_engine(self) -> Any:
        if self._search is None:
            from ..search import SemanticSearch

            self._search = SemanticSearch(store=self.store, scope=self.scope, **self._search_args)
        elif self._search.scope != self.scope:  # the archive was moved to another conversation (a session restored)
            self._search.rescope(self.scope)
        return self._search

    # -- writing ------------------------------------------------------------------------------
    def write(self, event: RemovedMessages) -> None:
        """Commit ``event.messages`` (and the summary covering them), then index them.

        Two store round trips when nothing else is due: the append (or, for a logged
        conversation, the read of the rows) and the vectors; a new summary adds one
        record, and so does a batch left waiting for vectors.
        """
        if self._indexer is not None and self._indexer.closed:
            raise RuntimeError("this archive is closed (its background indexer stopped): nothing was written")
        if self.logged:
            wanted = {m.position for m in event.messages if m.position is not None}
            records = [m for m in self.store.range(self.scope, min(wanted), max(wanted)) if m.position in wanted] \
                if wanted else []
            if not records:  # forgotten since they were read: write nothing back, not even the summary
                return
        else:
            summary_id = event.summary.id if event.summary is not None else None
            records = [message_record(m, event.shape, reason=event.reason, summary_id=summary_id)
                       for m in event.messages]
            placed = self._check_places(records)
            positions = self.store.append(self.scope, records)  # raises: the manager keeps the messages
            try:
                self._check_written(placed or self._found_held(records, positions))
            except ArchiveError:  # nothing of a refused write stays: what it stored past the other's messages goes
                if isinstance(positions, Appended) and (ours := [r.id for r in records if r.id not in positions.held]):
                    self.store.delete(self.scope, ours)
                raise
            records = self._keep_reused_ids(records, positions)
        if not (self.logged and event.reason == "truncated"):  # a shortened original is still in the window
            self._note_archived([m.position for m in records if m.position is not None])
        if event.summary is not None:
            self._save_summary(event)
        if self.external_indexing:
            pass
        elif self._indexer is not None:
            self._indexer.submit((self._wait_for_vectors(records), records))
        elif left := self._embed(records):
            self._wait_for_vectors(left)
            self._next_catch_up = 0.0  # as soon as a write embeds again
        elif time.monotonic() >= self._next_catch_up:
            self.catch_up()
        try:
            self._enforce_limits()
        finally:
            self._writing = None

    __call__ = write

    def _check_places(self, records: list[StoredMessage]) -> dict[int, StoredMessage]:
        """Refuse to take another conversation's messages for a rerun of this write.

        A message without an id of its own is stored under its place (``m3``), and the store takes a
        write of an id it holds for a rerun. Where a write reaches no further than what this archive
        wrote before (its first write, or after a rewind) the places are read first: one the
        conversation holds with another message (a second conversation under this session id, or
        an agent rewound to an earlier snapshot) is an ArchiveError, and nothing is written. A place
        whose message was archived whole before the window cut it (reason ``truncated``) takes the
        cut copy as the same message: the archive keeps the whole one. Returns the places read, by position, to be
        read again once written (:meth:`_check_written`).
        """
        placed = {r.position: r for r in records if r.position is not None and r.id == f"m{r.position}"}
        if not placed:
            return placed
        high = self._wrote_up_to()
        if high is not None and min(placed) > high:  # past everything it wrote here: new places
            self._high = (self.scope, max(placed))
            return {}
        taken = self._taken(placed)
        if taken:
            raise ArchiveError(
                f"conversation {self.scope.session_id!r} holds other messages at positions {taken}: a second "
                "conversation is written under this session id, or the conversation was rewound to an earlier "
                "point; give each conversation its own session id (nothing was written). To go on from the rewind "
                f"point, branch the conversation: archive.branch('<new session id>', before={min(taken)}) copies "
                f"what it archived before position {min(taken)} into a new conversation; go on there "
                "(session_id='<new session id>'), and recall finds what was said before the rewind")
        return placed

    def _check_written(self, placed: dict[int, StoredMessage]) -> None:
        """After a write whose places were read first, or whose places the store found held: that they hold this
        archive's messages. Another archive writing the same session (two agents under one session id) may have
        stored its own there first: at the same moment, both having read the places free, or since this one last
        wrote (a write past what it wrote reads nothing first). The store took this write of the ids it holds for
        a rerun: an ArchiveError then, as the check before the write gives one (the manager keeps the messages in
        the window), never messages counted archived and not kept, nor this archive's vectors written for the
        other's messages.
        """
        if not placed:
            return
        taken = self._taken(placed)
        if taken:
            raise ArchiveError(
                f"conversation {self.scope.session_id!r} holds other messages at positions {taken}, written meanwhile "
                "by another conversation under this session id: give each conversation its own session id (these "
                "messages stay in the window)")
        high = self._wrote_up_to()
        self._high = (self.scope, max(placed) if high is None else max(high, max(placed)))

    @staticmethod
    def _found_held(records: list[StoredMessage], positions: list[int]) -> dict[int, StoredMessage]:
        """The records stored under their place whose id the store already held (``Appended.held``): a rerun of this
        archive's write, or another conversation's message there, which only a read tells apart. None on the usual
        write, so it reads nothing more.
        """
        held: frozenset[str] = getattr(positions, "held", frozenset())  # a store of the user's may return a list
        return {r.position: r for r in records if r.id in held and r.position is not None and r.id == f"m{r.position}"}

    def _wrote_up_to(self) -> int | None:
        """The furthest place this archive wrote at in its scope (None: none yet, or the scope changed since)."""
        return self._high[1] if self._high is not None and self._high[0] == self.scope else None

    def _taken(self, placed: dict[int, StoredMessage]) -> list[int]:
        """The places the conversation holds with another message than ``placed`` says: the same message again is
        no other, nor the shortened copy of one archived whole when a tool result was cut.
        """
        held = self.store.range(self.scope, min(placed), max(placed))
        return [m.position for m in held if m.position in placed and (m.id != placed[m.position].id or (
            m.data != placed[m.position].data and (m.metadata or {}).get("reason") != "truncated"))]

    def _keep_reused_ids(self, records: list[StoredMessage], positions: list[int]) -> list[StoredMessage]:
        """Store under ``id@position`` each message whose id an earlier one holds (a caller reusing ids).

        A rerun finds its own id at its own position and stores nothing again.
        """
        clashes = {i: replace(r, id=f"{r.id}@{r.position}") for i, (r, p) in enumerate(zip(records, positions))
                   if r.position is not None and p != r.position}
        if clashes:
            self.store.append(self.scope, list(clashes.values()))
        return [clashes.get(i, r) for i, r in enumerate(records)]

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every message written so far has its vectors (or is recorded as waiting); False on timeout.

        The vectors stored since the last write count toward ``max_memory_archived_messages``: the limit
        holds again once this returns True.
        """
        if self._indexer is None:
            return True
        done = self._indexer.flush(timeout)
        if done and self.max_memory_archived_messages is not None:
            self._enforce_limits()
        return done

    def close(self) -> None:
        """Finish background indexing and stop its worker (the store stays open: it is the caller's)."""
        if self._indexer is not None:
            self._indexer.close()

    def _note_archived(self, positions: list[int]) -> None:
        """Remember the newest archived position; on a first write, that nothing before it was archived
        (so eviction never takes a message that did not leave the window, a pinned system one).
        """
        if not positions:
            return
        self._writing = max(positions)
        if self.logged:
            return
        if self._origin is None:
            self._first()
        if self._origin is None or min(positions) < self._origin:  # first write, or one racing the first
            self._origin = min(positions)
            self.store.put_record(self.scope, Record(id=str(self._origin), namespace=ORIGIN, text=""))

    def _save_summary(self, event: RemovedMessages) -> None:
        """One record per summary: idempotent by its id, never a rewrite of the earlier ones."""
        summary = event.summary
        assert summary is not None  # called only for an event that carries a summary
        folded = event.replaced_summary
        now = time.time()
        self.store.put_record(self.scope, Record(
            id=summary.id or f"s{event.messages[0].position}",
            namespace=SUMMARIES,
            text=summary.text,
            data={
                "covers": [event.messages[0].position, event.messages[-1].position],
                "folds_id": folded.id if folded is not None else None,  # its text is read from its own record
                "folds": folded.text if folded is not None and not folded.id else None,
            },
            created_at=now,
            updated_at=now,
        ))

    def summaries(self) -> list[dict[str, Any]]:
        """Every summary made of this conversation, oldest first, with the positions it covers."""
        return archived_summaries(self.store, self.scope)

    # -- indexing -------------------------------------------------------------------------------
    def _embed(self, messages: Sequence[StoredMessage], recheck: bool = False) -> list[StoredMessage]:
        """Embed ``messages`` in one batch and store the vectors; those left without them (logged): none, all,
        or, when the model refused the batch's input, the texts it refuses alone (see :meth:`_embed_apart`).

        ``recheck`` (off the writer's path: the background worker, a catch-up): once embedded, the messages are
        read again and only those the store still holds as they were embedded get vectors. Embedding takes long
        enough for a forget, and the conversation begun again under the same ids, to land meanwhile: the
        forgotten words' vectors must not go to the new messages.
        """
        if not messages:
            return []
        engine = self.search_engine
        try:
            engine._check_vector_space()
            # vectors no store takes (NaN, too few rows) are the embedder's failure too, found before storing
            vectors = as_matrix(engine.embedder.embed([m.text for m in messages]), len(messages))
        except Exception as exc:  # noqa: BLE001 - the text is committed; only vectors are late
            if getattr(exc, "rejected", False) and len(messages) > 1:
                return self._embed_apart(messages, recheck)
            log.warning("archived %d message(s) but could not embed them (%s: %s); they are kept, found by "
                        "keyword search, and embedded later", len(messages), type(exc).__name__, exc)
            return list(messages)
        ids = [m.id for m in messages]
        if recheck:
            held = {m.id: m for m in self.store.get(self.scope, ids)}
            keep = [i for i, m in enumerate(messages) if _same_message(held.get(m.id), m)]
            if not keep:
                return []
            ids, vectors = [ids[i] for i in keep], vectors[keep]
        # the vectors of messages forgotten or evicted meanwhile are dropped by the store (see Store.set_vectors)
        self.store.set_vectors(self.scope, ids, vectors, engine.embedder.name)
        return []

    def _embed_apart(self, messages: Sequence[StoredMessage], recheck: bool = False) -> list[StoredMessage]:
        """Embed a batch the model refused in halves, down to single messages, so that one text it always
        refuses (one over its length limit) leaves only itself without vectors; those left without them.
        """
        half = len(messages) // 2
        return self._embed(messages[:half], recheck) + self._embed(messages[half:], recheck)

    def _wait_for_vectors(self, messages: Sequence[StoredMessage]) -> str:
        """Record one batch as waiting for its vectors (a new record: nothing is rewritten); its id."""
        batch_id = uuid.uuid4().hex
        now = time.time()
        self.store.put_record(self.scope, Record(id=batch_id, namespace=UNEMBEDDED, text="",
                                                 data={"ids": [m.id for m in messages]},
                                                 created_at=now, updated_at=now))
        return batch_id

    def _index_jobs(self, jobs: list[Job]) -> None:
        """The background worker's step: embed the queued batches at once, then catch up if due."""
        if not self._embed([m for _, batch in jobs for m in batch], recheck=True):
            for batch_id, _ in jobs:
                self.store.delete_record(self.scope, UNEMBEDDED, batch_id)
            if time.monotonic() >= self._next_catch_up:
                self.catch_up()
        else:
            self._failed.update(batch_id for batch_id, _ in jobs)
            self._next_catch_up = 0.0

    def catch_up(self) -> int:
        """Embed up to ``catch_up_batch`` messages that earlier writes (in any process) left waiting; how many.

        A waiting message that was forgotten meanwhile is simply gone (messages are read back from
        the store, never from memory), and one that another process embedded meanwhile is not
        embedded again.
        """
        waiting = self.store.get_records(self.scope, UNEMBEDDED)
        queued = self._indexer is not None
        taken: list[Record] = []
        ids: list[str] = []
        for record in waiting:
            if queued and record.id not in self._failed and time.time() - record.created_at < BACKLOG_RECHECK_S:
                continue  # likely still in a worker's queue (this one's or another process's)
            if taken and len(ids) + len(record.data.get("ids", [])) > self.catch_up_batch:
                break
            taken.append(record)
            ids += [i for i in record.data.get("ids", []) if isinstance(i, str)]
        more = len(taken) < len(waiting)
        self._next_catch_up = time.monotonic() + (0.0 if more and not queued else BACKLOG_RECHECK_S)
        if not taken:
            return 0
        ids = list(dict.fromkeys(ids))
        have = self.store.get_vectors(self.scope, ids) if ids else {}
        todo = [m for m in self.store.get(self.scope, [i for i in ids if i not in have])]
        left = self._embed(todo, recheck=True)
        if left:
            self._next_catch_up = time.monotonic() + BACKLOG_RECHECK_S
            if len(left) < len(ids):  # some were embedded (apart, or before) or forgotten: one record for the rest
                self._failed.add(self._wait_for_vectors(left))
                for record in taken:
                    self.store.delete_record(self.scope, UNEMBEDDED, record.id)
                    self._failed.discard(record.id)
            return len(todo) - len(left)
        for record in taken:
            self.store.delete_record(self.scope, UNEMBEDDED, record.id)
            self._failed.discard(record.id)
        return len(todo)

    def _unembedded_count(self) -> int:
        return sum(len(r.data.get("ids", [])) for r in self.store.get_records(self.scope, UNEMBEDDED))

    # -- limits ---------------------------------------------------------------------------------
    def _enforce_limits(self) -> None:
        """Evict the oldest archived messages over the limits: at most one ``stats`` call a write."""
        self.last_evicted = []
        if self.max_num_archived_messages is not None:
            excess = self._archived_count() - self.max_num_archived_messages
            if excess > 0:
                self._evict_oldest(excess)
        if self.max_memory_archived_messages is not None:
            stats = self.store.stats(self.scope)
            total = _total_bytes(stats)
            if total > self.max_memory_archived_messages and stats["message_count"]:
                # Only text and vectors are sure to shrink (an index may keep its pages): free that much.
                excess = total - self.max_memory_archived_messages
                vector_share = stats["vector_bytes"] / stats["message_count"]
                estimate = math.ceil(excess / ((stats["text_bytes"] + stats["vector_bytes"]) / stats["message_count"]
                                               or 1))
                self._evict_oldest(max(1, estimate), free=(excess, vector_share))
        if self.last_evicted:
            log.info("archive limits evicted %d oldest message(s), positions %d-%d",
                     len(self.last_evicted), self.last_evicted[0], self.last_evicted[-1])

    def _span(self) -> tuple[int, int]:
        """A logged conversation's archived positions ``[first, end)``, counting those being written now."""
        assert self.archived_span is not None
        first, end = self.archived_span()
        return first, max(end, self._writing + 1) if self._writing is not None else end

    def _held(self) -> set[int]:
        """The positions inside the archived span that are still in the window (never recalled nor evicted): a
        message kept pinned after others that left it.
        """
        return set(self.in_window()) if self.in_window is not None else set()

    def _first(self) -> int:
        """The first position that can be archived (a logged conversation's pinned message is not)."""
        if self.archived_span is not None:
            return self._span()[0]
        if self._origin is None:
            origins = [int(r.id) for r in self.store.get_records(self.scope, ORIGIN) if r.id.isdigit()]
            self._origin = min(origins) if origins else None
        return self._origin or 0

    def _newest_position(self, oldest: int | None) -> int | None:
        """The newest archived position, given the oldest (None when nothing is archived)."""
        if self.archived_span is not None:
            first, end = self._span()
            return end - 1 if end > first else None
        if oldest is None:
            return None
        # n distinct positions from ``oldest`` on end at or after oldest + n - 1: one message unless there are gaps
        tail = self.store.range(self.scope, oldest + self.store.count(self.scope) - 1, END)
        return _position(tail[-1]) if tail else oldest

    def _oldest_position(self) -> int | None:
        """The oldest archived position still stored.

        Starts from where it was last seen (eviction only moves it on; a read up to that
        hint catches a conversation forgotten and begun again), then looks further in
        growing steps: a read of one message when nothing was evicted meanwhile.
        """
        first = self._first()
        hint = max(first, self._oldest if self._oldest is not None else first)
        held = self._held()
        head = [m for m in self.store.range(self.scope, first, hint) if m.position not in held]
        if head:
            self._oldest = _position(head[0])
            return self._oldest
        newest = self._span()[1] - 1 if self.archived_span is not None else END
        lo, step = hint + 1, PROBE
        while lo <= newest:
            if not self.logged and not self.store.count(self.scope):
                return None
            chunk = [m for m in self.store.range(self.scope, lo, min(newest, lo + step - 1)) if m.position not in held]
            if chunk:
                self._oldest = _position(chunk[0])
                return self._oldest
            lo, step = lo + step, min(MAX_PROBE, step * 2)
        return None

    def _evicted_count(self, count: int, newest: int | None) -> int:
        """Archived positions up to the newest that are no longer stored (when none is, before the last evicted)."""
        first = self._first()
        if newest is not None:
            return max(0, newest - first + 1 - count - sum(first <= p <= newest for p in self._held()))
        return max(0, self._oldest - first) if self._oldest is not None else 0

    def _archived_count(self) -> int:
        """Stored messages that left the window (a logged conversation stores its window, and a pinned
        system message, too: those before the first archived position and after the newest are not counted).
        """
        count = self.store.count(self.scope)
        if self.archived_span is None or not count:
            return count
        first, end = self._span()
        before = len(self.store.range(self.scope, 0, first - 1)) if first > 0 else 0
        held = [(p, p) for p in self._held() if first <= p < end]
        within = sum(len(span) for span in self.store.ranges(self.scope, held)) if held else 0
        return count - before - within - len(self.store.range(self.scope, end, END))

    def _evict_oldest(self, n: int, free: tuple[float, float] | None = None) -> int:
        """Delete the ``n`` oldest archived messages (never one still in the window); how many went.

        With ``free=(bytes, overhead)`` it takes as many as it takes to free ``bytes`` (each message
        counted as its text plus ``overhead``, its share of the vectors).
        """
        start = self._oldest_position()
        newest = self._newest_position(start)
        if start is None or newest is None:
            return 0
        end = min(newest, start + 2 * n + PROBE)
        held = self._held()
        victims = [m for m in self.store.range(self.scope, start, end) if m.position not in held]
        if free is not None:
            wanted, overhead = free
            freed, count = 0.0, 0
            while True:
                for m in victims[count:]:
                    if count >= n and freed >= wanted:
                        break
                    freed += m.size_bytes() + overhead
                    count += 1
                if (count >= n and freed >= wanted) or end >= newest:
                    break
                # the oldest are small beside what put the archive over (one huge message): read further on
                start, end = end + 1, min(newest, end + 2 * len(victims) + PROBE)
                victims += [m for m in self.store.range(self.scope, start, end) if m.position not in held]
            n = count
        victims = victims[:n]
        if not victims:
            return 0
        self.store.delete(self.scope, [m.id for m in victims])
        self._oldest = _position(victims[-1]) + 1
        self.last_evicted.extend(_position(m) for m in victims)
        return len(victims)

    # -- reading -----------------------------------------------------------------------------
    def recall(self, query: str, *, top_k: int = 3, min_score: float | None = None, radius: int = 2,
               before: int | None = None, filters: Filters | None = None) -> Recall:
        """The best ``top_k`` archived messages for ``query`` with ``radius`` neighbours each.

        ``before`` is the first position still in the active window: nothing at
        or after it is recalled (the model already sees it).
        """
        check_filters("recall", filters)
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
            raise InvalidInput(f"recall: 'before' must be an integer position or None, got {before!r}")
        started = time.perf_counter()
        first, held = 0, self._held()
        if self.archived_span is not None:
            first, end = self.archived_span()
            before = end if before is None else min(before, end)
            # a logged conversation's window (and pinned message) is stored too: not candidates
            outside = [(before, END)] + ([(0, first - 1)] if first > 0 else []) + [(p, p) for p in sorted(held)]
            unarchived = [m for span in self.store.ranges(self.scope, outside) for m in span]
            if unarchived:
                filters = filters or Filters()
                exclude = (filters.exclude_ids or frozenset()) | {m.id for m in unarchived}
                filters = replace(filters, exclude_ids=frozenset(exclude))
        hits = self.search_engine.search(query, top_k=top_k, min_score=min_score, filters=filters, spread=radius,
                                         around=radius)  # the hits read with their neighbours: one read
        if before is not None:
            hits = [h for h in hits if h.position is not None and first <= h.position < before]
        ranges = merge_ranges([(h.position, h.score) for h in hits if h.position is not None], radius, before=before)
        ranges = fill_ranges(self.store, self.scope, ranges, hits, first, skip=held)
        return Recall(query, ranges, hits, (time.perf_counter() - started) * 1000)

    def branch(self, session_id: str, *, before: int) -> int:
        """Copy what this conversation archived before position ``before`` (messages verbatim at their places,
        their vectors, the summaries of them) into the conversation ``session_id`` of the same owner; how many
        messages the branch did not hold yet.

        For a conversation rewound to an earlier point (an agent restored from a snapshot) that goes on otherwise:
        its archive refuses to write the new branch over the old one (an ArchiveError naming ``before``); a window
        manager of ``session_id`` goes on from there, recalling what was said before. This conversation keeps
        everything; a second call copies nothing again.
        """
        target = replace(self.scope, session_id=session_id).require_session()
        if target == self.scope:
            raise ValueError(f"branch: session_id {session_id!r} must name another conversation than this one")
        if isinstance(before, bool) or not isinstance(before, int) or before < 0:
            raise ValueError(f"branch: 'before' must be a position (an integer >= 0), got {before!r}")
        model, copied = self.store.vector_model(self.scope), 0
        for start in range(0, before, BRANCH_BATCH):
            chunk = self.store.range(self.scope, start, min(start + BRANCH_BATCH, before) - 1)
            if not chunk:
                continue
            held = self.store.get(target, [m.id for m in chunk])
            self.store.append(target, [replace(m, session_id=None, user_id=None, agent_id=None, key=None)
                                       for m in chunk])
            copied += len(chunk) - len(held)
            vectors = self.store.get_vectors(self.scope, [m.id for m in chunk]) if model is not None else {}
            todo = [i for i in vectors if i not in self.store.get_vectors(target, list(vectors))]
            if model is not None and todo:
                self.store.set_vectors(target, todo, np.stack([vectors[i] for i in todo]), model[0])
        for r in self.store.get_records(self.scope, SUMMARIES):
            covers = r.data.get("covers")
            if isinstance(covers, list) and len(covers) == 2 and isinstance(covers[1], int) and covers[1] < before:
                self.store.put_record(target, replace(r, version=0))
        for r in self.store.get_records(self.scope, ORIGIN):
            if r.id.isdigit() and int(r.id) < before:
                self.store.put_record(target, replace(r, version=0))
        return copied

    def get(self, start: int, end: int) -> list[StoredMessage]:
        """Archived messages with positions in ``[start, end]``, verbatim."""
        if self.archived_span is not None:
            first, stop = self.archived_span()
            start, end = max(start, first), min(end, stop - 1)
        held = self._held()
        return [m for m in self.store.range(self.scope, start, end) if m.position not in held] if start <= end else []

    def get_memory_usage_stats(self) -> dict[str, Any]:
        """Counts and bytes of this archive; no call reads the archived messages themselves."""
        stats = self.store.stats(self.scope)
        count = self._archived_count()
        oldest = self._oldest_position() if count else None
        newest = self._newest_position(oldest) if count else None
        return {
            "message_count": count,
            "total_memory": _total_bytes(stats),
            "text_memory": stats["text_bytes"],
            "embedding_memory": stats["vector_bytes"],
            "index_memory": stats["index_bytes"],
            "evicted_count": self._evicted_count(count, newest),
            "oldest_position": oldest,
            "newest_position": newest,
            "unindexed_count": self._unembedded_count(),
            "summary_count": len(self.summaries()),
            "max_num_archived_messages": self.max_num_archived_messages,
            "max_memory_archived_messages": self.max_memory_archived_messages,
        }

    def get_memory_usage_summary(self) -> str:
        s = self.get_memory_usage_stats()
        limits = []
        if s["max_num_archived_messages"]:
            limits.append(f"{s['max_num_archived_messages']:,} messages")
        if s["max_memory_archived_messages"]:
            limits.append(f"{s['max_memory_archived_messages']:,} bytes")
        span = f"positions {s['oldest_position']}-{s['newest_position']}" if s["message_count"] else "empty"
        return (
            f"Archive: {s['message_count']:,} messages ({span}), {s['total_memory']:,} bytes "
            f"(text {s['text_memory']:,}, embeddings {s['embedding_memory']:,}, index {s['index_memory']:,}); "
            f"{s['summary_count']} summaries; {s['evicted_count']:,} evicted"
            + (f"; limits: {', '.join(limits)}" if limits else "; no limits")
            + (f"; {s['unindexed_count']} waiting for embeddings" if s["unindexed_count"] else "")
        )


def archived_summaries(store: Store, scope: Scope) -> list[dict[str, Any]]:
    """The summaries archived for one conversation, oldest first: ``id``, ``text``, ``covers``
    (first and last position), ``folds`` (the text of the earlier summary it folds in) and ``created_at``.

    Reads the per-summary records, and the single document older versions kept them in.
    """
    legacy = (store.get_state(scope, "summaries") or {"items": []}).get("items") or []
    items: dict[str, dict[str, Any]] = {s["id"]: dict(s) for s in legacy if isinstance(s, dict) and "id" in s}
    for r in store.get_records(scope, SUMMARIES):
        items[r.id] = {"id": r.id, "text": r.text, "covers": list(r.data.get("covers") or []),
                       "folds": r.data.get("folds"), "folds_id": r.data.get("folds_id"), "created_at": r.created_at}
    for s in items.values():
        folded = items.get(s.pop("folds_id", None) or "")
        if s.get("folds") is None and folded is not None:
            s["folds"] = folded["text"]
    return sorted(items.values(), key=lambda s: ((s.get("covers") or [None])[0] or 0, s.get("created_at", 0)))


def forget_summaries(store: Store, scope: Scope, positions: Collection[int]) -> int:
    """Delete the archived summaries of one conversation that may hold words of the messages at ``positions``
    (being deleted): from the first summary covering one of them on, since a summary folds in the one before it
    (and one that does not say what it covers). A position no summary covers (a pinned system message, one still
    in the window, one a sliding window archived) is in none of them. The messages a summary covered stay
    archived, verbatim. How many went.
    """
    if not positions:
        return 0
    summaries = archived_summaries(store, scope)
    covered = [p for p in positions for s in summaries if (c := s.get("covers")) and c[0] <= p <= c[-1]]
    first = min(covered, default=None)
    gone = {s["id"] for s in summaries
            if not s.get("covers") or (first is not None and s["covers"][-1] >= first)}
    legacy = (store.get_state(scope, "summaries") or {}).get("items") or []
    if any(isinstance(s, dict) and s.get("id") in gone for s in legacy):  # the document older versions kept
        store.put_state(scope, "summaries", {"items": [s for s in legacy if not (isinstance(s, dict) and s.get("id")
                                                                                  in gone)]})
    for summary_id in gone:
        store.delete_record(scope, SUMMARIES, summary_id)
    return len(gone)


def message_record(msg: Message, shape: str, *, data: dict[str, Any] | None = None, reason: str | None = None,
                   summary_id: str | None = None) -> StoredMessage:
    """``msg`` as the store keeps it: verbatim ``data`` (rendered in ``shape`` unless given), indexed text."""
    msg = _as_written(msg)
    now = time.time()
    created = now if msg.timestamp is None else msg.timestamp  # 0 is a time: 1970-01-01
    date = _utc_date(int(created // 86400))
    return StoredMessage(
        id=msg.id or f"m{msg.position}",
        role=msg.role,
        text=index_text(msg.text, speaker=msg.role, date=date),
        data=render_message(msg, shape) if data is None else data,
        position=msg.position,
        kind="message",
        created_at=created,
        archived_at=now,
        summary_id=summary_id,
        metadata={"shape": shape, "reason": reason},
    )


def _check_search_options(options: dict[str, Any]) -> None:
    """Refuse, when the archive is made, an option the search engine does not take (it is made on the first
    write: every write would fail then, each kept in the window as an archive error).
    """
    import inspect

    from ..search import SemanticSearch

    taken = set(inspect.signature(SemanticSearch).parameters) - {"store", "scope"}
    unknown = sorted(set(options) - taken)
    if unknown:
        hint = " (a conversation is chosen with scope=Scope(session_id=...))" if "session_id" in unknown else ""
        raise TypeError(f"Archive() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}{hint}; "
                        f"search options are {', '.join(sorted(taken))}")


@functools.lru_cache(maxsize=64)
def _utc_date(day: int) -> str:
    """``YYYY-MM-DD`` of a day counted from the epoch (UTC): formatted once per day, not once per message."""
    return time.strftime("%Y-%m-%d", time.gmtime(day * 86400))


def _total_bytes(stats: dict[str, int]) -> int:
    return stats["text_bytes"] + stats["vector_bytes"] + stats["index_bytes"]


def _as_written(msg: Message) -> Message:
    """A user message enriched with recalled context goes to the archive as the user wrote it."""
    if msg.role != "user":
        return msg
    changed = False
    content = []
    for block in msg.content:
        if isinstance(block, TextBlock):
            plain = original_question(block.text)
            if plain != block.text:
                block, changed = TextBlock(plain), True
        content.append(block)
    return msg.with_content(content) if changed else msg


def stored_as_message(stored: StoredMessage) -> Message:
    """The archived message back in the typed model."""
    return parse_message(stored.data, stored.metadata.get("shape", "openai"))


def _position(message: StoredMessage) -> int:
    """The position of a message read from the store (a store always sets it)."""
    assert message.position is not None
    return message.position


def _same_message(held: StoredMessage | None, embedded: StoredMessage) -> bool:
    """Whether the store still holds ``embedded`` as it was embedded (not another message under its id)."""
    return held is not None and held.text == embedded.text and (
        held.key is None or embedded.key is None or held.key == embedded.key)
