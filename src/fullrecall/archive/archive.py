"""The archive: every message that left the window, verbatim, searchable.

:meth:`Archive.write` is a window manager's removal listener. It commits the
messages to the store *first* (if that fails, the manager keeps them in the
window), then embeds them; an embedding failure only delays searchability
(the text is stored, lexical search finds it, and the vectors are retried).

When ``archived_span`` is set (:class:`~fullrecall.memory.SyncConversationMemory` sets
it) every message is in the store from the moment it was added, and
``archived_span()`` says which positions ``[first, end)`` have left the window.
Archiving a removed message is then only indexing it: ``write`` appends nothing,
and a position missing from the store was forgotten, not lost (it is never
written back); ``get`` and ``recall`` return only archived positions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..messages.formats import parse_message, render_message
from ..messages.model import Message, TextBlock
from ..search.terms import index_text
from ..stores.base import Filters, Scope, Store, StoredMessage
from ..window.base import RemovedMessages
from .recall import RecalledRange, merge_ranges, original_question

log = logging.getLogger("fullrecall.archive")

END = 2**53  # past any position: ``range(scope, start, END)`` reads to the end of a conversation


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
    """

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
        **search_options: Any,
    ) -> None:
        for name, value in (("max_num_archived_messages", max_num_archived_messages),
                            ("max_memory_archived_messages", max_memory_archived_messages)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or None, got {value}")
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
        self._search = None
        self.last_evicted: list[int] = []

    @property
    def logged(self) -> bool:
        """True when the store holds the whole conversation, window included (see the module docstring)."""
        return self.archived_span is not None

    # -- search engine, built on first use so constructing an Archive is instant -------------
    @property
    def search_engine(self):
        if self._search is None:
            from ..search import SemanticSearch

            self._search = SemanticSearch(store=self.store, scope=self.scope, **self._search_args)
        return self._search

    # -- writing ------------------------------------------------------------------------------
    def write(self, event: RemovedMessages) -> None:
        """Commit ``event.messages`` (and the summary covering them), then index them."""
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
            self.store.append(self.scope, records)  # raises: the manager keeps the messages
        if not (self.logged and event.reason == "truncated"):  # a shortened original is still in the window
            self._note_archived([m.position for m in records if m.position is not None])
        if event.summary is not None:
            self._save_summary(event)
        self._index(records)
        self._enforce_limits()

    __call__ = write

    def _state(self) -> dict[str, Any]:
        return self.store.get_state(self.scope, "archive") or {"evicted_count": 0, "evicted_through": 0, "newest": None}

    def _note_archived(self, positions: list[int]) -> None:
        """Remember the newest archived position (and, on the first write, the oldest: nothing before it
        was archived, so eviction never takes a message that did not leave the window, a pinned system one).
        """
        if not positions:
            return
        state = self._state()
        changed = False
        if state.get("newest") is None:
            state["evicted_through"], changed = max(state["evicted_through"], min(positions)), True
        if state.get("newest") is None or max(positions) > state["newest"]:
            state["newest"], changed = max(positions), True
        if changed:
            self.store.put_state(self.scope, "archive", state)

    def _save_summary(self, event: RemovedMessages) -> None:
        summary = event.summary
        assert summary is not None  # called only for an event that carries a summary
        summaries = (self.store.get_state(self.scope, "summaries") or {"items": []})["items"]
        summaries.append({
            "id": summary.id,
            "text": summary.text,
            "covers": [event.messages[0].position, event.messages[-1].position],
            "folds": event.replaced_summary.text if event.replaced_summary is not None else None,
            "created_at": time.time(),
        })
        self.store.put_state(self.scope, "summaries", {"items": summaries})

    def summaries(self) -> list[dict[str, Any]]:
        """Every summary made of this conversation, oldest first, with the positions it covers."""
        return (self.store.get_state(self.scope, "summaries") or {"items": []})["items"]

    def _index(self, records: list[StoredMessage]) -> None:
        """Embed ``records`` and any that an earlier write (in any process) failed to embed.

        The ids still waiting are kept in the store's ``archive`` state, so a process that
        starts after a failure catches up on its first write; a waiting message that was
        forgotten meanwhile is simply gone (it is read back from the store, never from memory).
        """
        waiting_before = self._state().get("unembedded") or []
        earlier = self.store.get(self.scope, waiting_before) if waiting_before else []
        pending = list({m.id: m for m in earlier + records}.values())
        try:
            self.search_engine.index(pending, append=False)
            waiting: list[str] = []
        except Exception as exc:  # noqa: BLE001 - the text is committed; only vectors are late
            waiting = [m.id for m in pending]
            log.warning("archived %d message(s) but could not embed them (%s: %s); they are kept, found by "
                        "keyword search, and embedded on the next write", len(pending), type(exc).__name__, exc)
        if waiting != waiting_before:
            state = self._state()
            state["unembedded"] = waiting
            self.store.put_state(self.scope, "archive", state)

    # -- limits ---------------------------------------------------------------------------------
    def _enforce_limits(self) -> None:
        self.last_evicted = []
        if self.max_num_archived_messages is not None:
            excess = self._archived_count() - self.max_num_archived_messages
            if excess > 0:
                self._evict_oldest(excess)
        if self.max_memory_archived_messages is not None:
            for _ in range(8):
                stats = self.store.stats(self.scope)
                total = _total_bytes(stats)
                if total <= self.max_memory_archived_messages or not stats["message_count"]:
                    break
                per_message = total / stats["message_count"]
                if not self._evict_oldest(max(1, int((total - self.max_memory_archived_messages) / per_message) + 1)):
                    break
        if self.last_evicted:
            log.info("archive limits evicted %d oldest message(s), positions %d-%d",
                     len(self.last_evicted), self.last_evicted[0], self.last_evicted[-1])

    def _archived_count(self) -> int:
        """Stored messages that left the window (a logged conversation stores its window, and a pinned
        system message, too: those before the oldest archived position and after the newest are not counted).
        """
        count = self.store.count(self.scope)
        state = self._state()
        newest, oldest = state.get("newest"), state["evicted_through"]
        if not count or newest is None:
            return 0 if self.logged else count
        before = len(self.store.range(self.scope, 0, oldest - 1)) if oldest > 0 else 0
        return count - before - len(self.store.range(self.scope, newest + 1, END))

    def _evict_oldest(self, n: int) -> int:
        """Delete the ``n`` oldest archived messages (never one still in the window); how many went."""
        state = self._state()
        start, newest = state["evicted_through"], state.get("newest")
        victims: list[StoredMessage] = []
        while len(victims) < n and newest is not None and start <= newest:
            chunk = self.store.range(self.scope, start, min(newest, start + max(64, n)))
            victims.extend(chunk[: n - len(victims)])
            start = (_position(chunk[-1]) + 1) if chunk else start + max(64, n)
        if not victims:
            return 0
        self.store.delete(self.scope, [m.id for m in victims])
        state["evicted_count"] += len(victims)
        state["evicted_through"] = _position(victims[-1]) + 1
        self.store.put_state(self.scope, "archive", state)
        self.last_evicted.extend(_position(m) for m in victims)
        return len(victims)

    # -- reading -----------------------------------------------------------------------------
    def recall(self, query: str, *, top_k: int = 3, min_score: float | None = None, radius: int = 2,
               before: int | None = None, filters: Filters | None = None) -> Recall:
        """The best ``top_k`` archived messages for ``query`` with ``radius`` neighbours each.

        ``before`` is the first position still in the active window: nothing at
        or after it is recalled (the model already sees it).
        """
        started = time.perf_counter()
        if self.store.count(self.scope) == 0:
            return Recall(query)
        first = 0
        if self.archived_span is not None:
            first, end = self.archived_span()
            before = end if before is None else min(before, end)
        if before is not None:  # a logged conversation's window (and pinned message) is stored too: not candidates
            unarchived = self.store.range(self.scope, before, END) + (self.store.range(self.scope, 0, first - 1)
                                                                      if first > 0 else [])
            if unarchived:
                filters = filters or Filters()
                exclude = (filters.exclude_ids or frozenset()) | {m.id for m in unarchived}
                filters = replace(filters, exclude_ids=frozenset(exclude))
        hits = self.search_engine.search(query, top_k=top_k, min_score=min_score, filters=filters, spread=radius)
        if before is not None:
            hits = [h for h in hits if h.position is not None and first <= h.position < before]
        ranges = merge_ranges([(h.position, h.score) for h in hits if h.position is not None], radius, before=before)
        for r in ranges:
            r.messages = self.store.range(self.scope, max(r.start, first), r.end)
        ranges = [r for r in ranges if r.messages]
        return Recall(query, ranges, hits, (time.perf_counter() - started) * 1000)

    def get(self, start: int, end: int) -> list[StoredMessage]:
        """Archived messages with positions in ``[start, end]``, verbatim."""
        if self.archived_span is not None:
            first, stop = self.archived_span()
            start, end = max(start, first), min(end, stop - 1)
        return self.store.range(self.scope, start, end) if start <= end else []

    def get_memory_usage_stats(self) -> dict[str, Any]:
        stats = self.store.stats(self.scope)
        state = self._state()
        count = self._archived_count()
        newest = state.get("newest")
        first = state["evicted_through"]
        oldest = self.store.range(self.scope, first, min(newest, first + 64))[:1] if count and newest is not None \
            else []
        return {
            "message_count": count,
            "total_memory": _total_bytes(stats),
            "text_memory": stats["text_bytes"],
            "embedding_memory": stats["vector_bytes"],
            "index_memory": stats["index_bytes"],
            "evicted_count": state["evicted_count"],
            "oldest_position": oldest[0].position if oldest else None,
            "newest_position": newest if count else None,
            "unindexed_count": len(state.get("unembedded") or []),
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


def message_record(msg: Message, shape: str, *, data: dict[str, Any] | None = None, reason: str | None = None,
                   summary_id: str | None = None) -> StoredMessage:
    """``msg`` as the store keeps it: verbatim ``data`` (rendered in ``shape`` unless given), indexed text."""
    msg = _as_written(msg)
    now = time.time()
    created = msg.timestamp or now
    date = time.strftime("%Y-%m-%d", time.gmtime(created))
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
