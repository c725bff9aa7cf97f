"""Managed windows: the service's conversations kept within a budget, as the library's conversation memory does.

With ``manager = "summarizing"`` (the default) each conversation is a
:class:`~fullrecall.memory.SyncConversationMemory` over the service's store, in the key's
tenant: its message log is the one the service appends to, so after every append the
configured manager (a :class:`~fullrecall.archive.SemanticSummarizingConversationManager`)
keeps the window within ``window_messages`` messages (as user/assistant turns) and
``window_tokens`` tokens, replacing the oldest messages with a summary. Every summary
records the positions it ``covers``, so ``/v1/summaries/{id}/messages`` expands it to
exactly the archived messages behind it. The summarizer is extractive (no LLM) unless
``summarizer = "llm"`` picks the chat model the environment configures.

The messages a summary replaces are in the store already; they are embedded by the service's
indexer, off the request path, like every other message. Summaries made and LLM calls are
counted per tenant (``on_summary``, ``on_llm_call``). Objects are cached per conversation
(with a lock each: one operation at a time per conversation in a process; processes sharing
a store are safe by the memory's design).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from ..errors import MessageFormatError
from ..memory._cache import LockedCache
from ..messages.formats import detect_shape, parse_messages, shape_of, shape_signals
from ..stores.base import Scope, Store
from .config import SUMMARIZERS

log = logging.getLogger("fullrecall.service")



class _CountedSummarizer:
    """A summarizer whose every summary made is counted."""

    def __init__(self, inner: Any, on_summary: Callable[[], None]) -> None:
        self.inner, self.on_summary = inner, on_summary

    def summarize(self, messages: Any, previous_summary: str | None = None) -> Any:
        summary = self.inner.summarize(messages, previous_summary)
        self.on_summary()
        return summary


class _CountedChatModel:
    """A chat model whose every call is counted."""

    def __init__(self, inner: Any, on_call: Callable[[], None]) -> None:
        self.inner, self.on_call = inner, on_call
        self.name = inner.name

    def complete(self, request: Any) -> Any:
        self.on_call()
        return self.inner.complete(request)

    async def acomplete(self, request: Any) -> Any:
        self.on_call()
        return await self.inner.acomplete(request)


class ManagedWindows:
    """One :class:`~fullrecall.memory.SyncConversationMemory` per conversation, built on first use."""

    def __init__(self, store: Store, indexer: Any, *, window_messages: int = 50, window_tokens: int = 8000,
                 summarizer: str = "extractive", preserve_recent_messages: int = 10, cache_size: int = 1024,
                 on_summary: Callable[[str], None] | None = None,
                 on_llm_call: Callable[[str], None] | None = None) -> None:
        if summarizer not in SUMMARIZERS:
            raise ValueError(f"summarizer must be one of {SUMMARIZERS}, got {summarizer!r}")
        if window_messages < 2 or window_tokens < 1:
            raise ValueError(f"window_messages must be >= 2 and window_tokens >= 1, got {window_messages} and "
                             f"{window_tokens}")
        self.store, self.embedder = store, indexer.embedder
        self.window_messages, self.window_tokens = window_messages, window_tokens
        self.preserve_recent_messages = min(preserve_recent_messages, window_messages - 1)
        self.summarizer = summarizer
        self.on_summary = on_summary or (lambda tenant: None)
        self.on_llm_call = on_llm_call or (lambda tenant: None)
        self.cache_size = cache_size
        self._memories: LockedCache[Any] = LockedCache(cache_size, on_evict=self._forget_sizes)
        self._room: dict[tuple, tuple[int, int]] = {}  # per conversation: originals and tokens in the window
        self._shapes: dict[tuple, str] = {}  # per conversation: the window's message shape, as last read here
        self._max_originals = 2 * max(1, window_messages // 2)  # the manager counts user/assistant turns
        from ..tokens import default_token_counter

        self._counter = default_token_counter()
        self._lock = threading.Lock()
        self._chat_model: Any = None
        if summarizer == "llm":  # fail at start, not at the first long conversation
            from ..summarizers import chat_model_from_env

            self._chat_model = chat_model_from_env()

    def run(self, scope: Scope, operation: Callable[[Any], Any]) -> Any:
        """``operation(memory)`` on the conversation of ``scope``, alone among this process's operations on it."""
        memory, lock = self._memory(scope)
        with lock:
            return operation(memory)

    def check(self, scope: Scope, messages: list[dict[str, Any]], shape: str) -> None:
        """``MessageFormatError`` naming the first of ``messages`` (of ``shape``, as they were parsed) that would not
        read in one shape with the conversation's window, before they are written: the manager reads the window
        whole, in one shape, so a message of another (an OpenAI chat message after Converse ones) would leave it
        unreadable for good. The window's shape as last read here serves while the messages read in it (of that
        very shape: nothing to parse again); else the window is read.
        """
        key = _key(scope)
        with self._lock:
            known = self._shapes.get(key)
        if known is not None and (known == shape or _reads_in(messages, known)):
            return

        def fits(memory: Any) -> None:
            window = memory.messages
            if not window:
                return
            try:
                own, _ = parse_messages(window)
            except MessageFormatError:  # of two shapes already (written before they were checked): nothing to keep
                return
            try:
                together, _ = parse_messages(window + messages)
            except MessageFormatError:
                for index in range(len(messages)):
                    try:
                        parse_messages(window + messages[: index + 1])
                    except MessageFormatError as exc:
                        raise MessageFormatError(
                            f"message {index}: it does not read in this conversation's shape ({own}): "
                            f"{str(exc).split(': ', 1)[-1]}; a conversation keeps one shape") from None
                raise
            with self._lock:
                self._shapes[key] = together

        self.run(scope, fits)

    def manage(self, scope: Scope, added: list[dict[str, Any]]) -> None:
        """Keep the window within budget after ``added`` were appended (durable already: a failure is logged).

        The manager runs only when the window may be over budget: this process remembers the window's size after
        its last run and adds what it appends since. Another process's appends are not seen in that sum, so reads
        (:meth:`read`) always run the manager: what a client is shown is within budget.
        """
        key = _key(scope)
        with self._lock:
            room = self._room.get(key)
        if room is not None:
            count, tokens = room
            count += len(added)
            tokens += self._tokens(added)
            if count <= self._max_originals and tokens <= self.window_tokens:
                with self._lock:
                    self._room[key] = (count, tokens)
                return
        try:
            self.run(scope, self._apply)
        except Exception as exc:  # noqa: BLE001 - the append stands; the next one tries again
            with self._lock:
                self._room.pop(key, None)
            log.warning("conversation %r: messages stored, but the window could not be managed (%s: %s)",
                        scope.session_id, type(exc).__name__, exc)

    def read(self, scope: Scope) -> list[tuple[Any, dict[str, Any]]]:
        """The window within budget: each message with its stored row (None for the summary)."""
        def window(memory: Any) -> list[tuple[Any, dict[str, Any]]]:
            messages = self._apply(memory)
            return list(zip(memory.window_rows(), messages, strict=True))

        return self.run(scope, window)

    def _apply(self, memory: Any) -> list[dict[str, Any]]:
        """Run the manager on the window as stored now; remember its size; return it."""
        memory.apply_management()
        messages = memory.messages  # read from the store: the rows behind them are current
        try:
            shape: str | None = detect_shape(messages) if messages else None
        except MessageFormatError:  # a window of two shapes (written before they were checked): read it anew
            shape = None
        with self._lock:
            self._room[_key(memory.scope)] = (len(memory._rows), self._tokens(messages))
            if shape is not None:
                self._shapes[_key(memory.scope)] = shape
            else:
                self._shapes.pop(_key(memory.scope), None)
        return messages

    def _tokens(self, messages: list[dict[str, Any]]) -> int:
        from ..messages.formats import parse_messages

        try:
            return sum(self._counter.count_message(m) for m in parse_messages(messages)[1]) if messages else 0
        except Exception:  # noqa: BLE001 - not countable (shapes mixed): the manager decides on the next append
            return self.window_tokens + 1

    def forget(self, scope: Scope, erase: Callable[[], Any]) -> Any:
        """``erase()`` alone among this process's operations on the conversation (none saves a summary of what it
        deletes after it), then the conversation's cached objects dropped; what ``erase`` returns.
        """
        item = self._memories.peek(_key(scope))
        with item[1] if item is not None else nullcontext():
            try:
                return erase()
            finally:
                self.drop(scope)

    def drop(self, scope: Scope) -> None:
        self._memories.drop(_key(scope))
        self._forget_sizes(_key(scope))

    def _forget_sizes(self, key: tuple) -> None:  # (dict.pop is atomic: also called by the cache as it evicts)
        self._room.pop(key, None)
        self._shapes.pop(key, None)

    def _memory(self, scope: Scope) -> tuple[Any, threading.Lock]:
        return self._memories.get(_key(scope), lambda: self._build(scope))  # built outside the lock: it reads the store

    def _build(self, scope: Scope) -> Any:
        from ..archive import SemanticSummarizingConversationManager
        from ..memory import SyncConversationMemory
        from ..summarizers import ExtractiveSummarizer, LLMSummarizer

        tenant = scope.tenant
        if self._chat_model is not None:
            inner: Any = LLMSummarizer(_CountedChatModel(self._chat_model, lambda: self.on_llm_call(tenant)))
        else:
            inner = ExtractiveSummarizer()
        summarizer = _CountedSummarizer(inner, lambda: self.on_summary(tenant))
        user, agent, session = _owner(scope)
        manager = SemanticSummarizingConversationManager(
            preserve_recent_messages=self.preserve_recent_messages, summarizer=summarizer,
            max_context_tokens=self.window_tokens, max_history_turns=self._max_originals // 2,
            embedding_model=self.embedder, store=self.store, session_id=session, user_id=user, agent_id=agent,
            tenant=tenant)
        # every message of the log was queued for the service's indexer when it was appended (which embeds each
        # once, and catches up after a crash): archiving embeds nothing on the request path
        manager.archive.external_indexing = True
        return SyncConversationMemory(self.store, session, user_id=user, agent_id=agent, tenant=tenant,
                                      manager=manager)


def _reads_in(messages: list[dict[str, Any]], shape: str) -> bool:
    """Whether ``messages`` read in ``shape`` and a window of that shape stays of it with them."""
    try:
        parse_messages(messages, shape)
        return shape_of({shape: 0, **{s: 1 for s in shape_signals(messages)}}) == shape
    except MessageFormatError:
        return False


def _owner(scope: Scope) -> tuple[str | None, str | None, str]:
    user = scope.user_id if isinstance(scope.user_id, str) else None
    agent = scope.agent_id if isinstance(scope.agent_id, str) else None
    return user, agent, str(scope.session_id)


def _key(scope: Scope) -> tuple:
    return (scope.tenant, *_owner(scope))
