"""Strands ``ConversationManager`` subclasses over fullrecall's framework-neutral window managers.

Each class is a real ``strands.agent.conversation_manager.ConversationManager``:
``apply_management(agent)`` / ``reduce_context(agent, e)`` hand ``agent.messages``
(edited in place) to the core manager, which archives what leaves before it
leaves. ``removed_message_count`` is the core's count of original messages
removed from the front (a summary is not counted), which is exactly the
offset Strands' session managers use to reload the rest of the session, and
``get_state()`` / ``restore_from_session()`` follow the SDK contract: the
summary comes back as the message to prepend, the archive stays in its store.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
import weakref
from typing import Any

from strands.agent.conversation_manager import ConversationManager as _StrandsConversationManager
from strands.hooks import AgentInitializedEvent, BeforeModelCallEvent, HookRegistry
from strands.types.exceptions import ContextWindowOverflowException

from .. import archive as _archive
from .. import window as _window
from ..errors import ArchiveError, ContextWindowOverflowError, InvalidInput
from ..window.base import RemovedMessages
from ..window.pins import leading_pinned
from .summarizer import AgentModelSummarizer, ModelReplySummarizer, SummarizationAgentSummarizer

log = logging.getLogger("fullrecall.strands")


class ContextWindowOverflow(ContextWindowOverflowException, ContextWindowOverflowError):
    """The window cannot shrink further: catchable as the SDK's overflow error and as fullrecall's."""


class _Adapter(_StrandsConversationManager):
    """Delegates to ``self.core`` (a :class:`fullrecall.window.ConversationManager`) with ``agent.messages``."""

    core: _window.ConversationManager

    def __init__(self, core: _window.ConversationManager, *, proactive_compression: Any = None) -> None:
        object.__setattr__(self, "core", core)  # before the SDK base sets removed_message_count
        self._agent_ref: weakref.ReferenceType[Any] | None = None
        self._unreloaded_front: list[int] = []  # places of pinned messages a restored state held at the front
        super().__init__(proactive_compression=proactive_compression)

    # removed_message_count lives in the core, so both views always agree
    @property
    def removed_message_count(self) -> int:
        return self.core.removed_message_count

    @removed_message_count.setter
    def removed_message_count(self, value: int) -> None:
        self.core.removed_message_count = value

    def _bind(self, agent: Any) -> None:
        self._agent_ref = weakref.ref(agent)

    def _current_agent(self) -> Any:
        return self._agent_ref() if self._agent_ref is not None else None

    # -- the SDK contract ------------------------------------------------------------------
    def apply_management(self, agent: Any, **kwargs: Any) -> None:
        """After each invocation: the core's proactive policy (window size, token or turn budget)."""
        self._bind(agent)
        try:
            self.core.apply_management(agent.messages)
        except (ArchiveError, InvalidInput) as exc:  # nothing was removed; the next turn tries again
            # (a message the window cannot read must not turn a finished turn, its answer given, into an error)
            log.warning("window not managed, every message kept: %s", exc)

    def reduce_context(self, agent: Any, e: Exception | None = None, **kwargs: Any) -> None:
        """On overflow (``e`` set) shrink or raise :class:`ContextWindowOverflow`; proactive (``e`` None) is best effort."""
        self._bind(agent)
        try:
            self.core.reduce_context(agent.messages, e)
        except ContextWindowOverflowException:
            if e is not None:
                raise
            log.info("proactive reduction skipped: the window could not shrink")
        except (ContextWindowOverflowError, ArchiveError, InvalidInput) as exc:
            if e is None:
                log.warning("proactive reduction skipped, every message kept: %s", exc)
                return
            raise ContextWindowOverflow(str(exc)) from exc

    def get_state(self) -> dict[str, Any]:
        return {**self.core.get_state(), "__name__": type(self).__name__}

    def restore_from_session(  # type: ignore[override]  # strands' Message TypedDict; ours are plain dicts
        self, state: dict[str, Any]
    ) -> list[dict[str, Any]] | None:
        if state.get("__name__") != type(self).__name__:
            raise ValueError("Invalid conversation manager state.")
        self.core.restore_from_state({**state, "__name__": type(self.core).__name__})
        self._unreloaded_front = [int(p) for p in state.get("front_positions") or ()]
        return None

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        super().register_hooks(registry, **kwargs)
        registry.add_callback(AgentInitializedEvent, self._on_agent_initialized)

    def _on_agent_initialized(self, event: AgentInitializedEvent) -> None:
        self._report_unreloaded_front(event.agent)

    def _report_unreloaded_front(self, agent: Any) -> None:
        """Messages the saved state kept pinned at the window's front (``pin_first``), which a session does not
        reload (it reloads from ``removed_message_count`` on, as for the SDK's managers): reported to the
        listeners (``on_remove``, the archive) from the session's log, at their own places, so none is lost.

        Only when the restored window does not hold them; they no longer count as held at the front.
        """
        positions, self._unreloaded_front = self._unreloaded_front, []
        session: Any = getattr(agent, "_session_manager", None)
        repository = getattr(session, "session_repository", None)
        if not positions or repository is None or leading_pinned(agent.messages) >= len(positions):
            return
        found = [(p, record.to_message()) for p in positions
                 for record in repository.list_messages(session.session_id, agent.agent_id, offset=p, limit=1)]
        reported = self.core.release_front([raw for _, raw in found], [p for p, _ in found], reason="restored")
        if reported is None:
            log.warning("%d pinned message(s) not reloaded by the session leave the window; no on_remove keeps "
                        "them", len(found))
        elif reported:
            log.info("%d pinned message(s) the session did not reload archived from its log", reported)

    def __getattr__(self, name: str) -> Any:  # settings and helpers of the core (window_size, summary_ratio, ...)
        if name == "core":
            raise AttributeError(name)
        return getattr(self.core, name)


class NullConversationManager(_Adapter):
    """Leaves the history alone; on overflow re-raises the model's error, as the SDK's does."""

    def __init__(self) -> None:
        super().__init__(_window.NullConversationManager())

    def reduce_context(self, agent: Any, e: Exception | None = None, **kwargs: Any) -> None:
        if e is not None:
            raise e


class SlidingWindowConversationManager(_Adapter):
    """The SDK's sliding window, with every removed message archived first.

    Same parameters and window as ``strands``' ``SlidingWindowConversationManager``:
    ``window_size`` (0 keeps only pinned messages), ``should_truncate_results``,
    ``per_turn`` (manage before every model call, or every N calls, inside one
    invocation), ``pin_first`` and ``proactive_compression``. On overflow the
    oldest tool result over ``max_tool_result_chars`` (the SDK's 400) is
    shortened first; ``truncation_notice="sdk"`` writes the SDK's notice instead
    of fullrecall's (which says the original is in the archive). Trimmed and
    shortened originals go to ``on_remove`` (e.g. an :class:`fullrecall.archive.Archive`).
    """

    def __init__(self, window_size: int = 40, should_truncate_results: bool = True, *, per_turn: bool | int = False,
                 pin_first: int | None = None, max_tool_result_chars: int = 400, truncation_notice: str = "fullrecall",
                 on_remove: Any = None, proactive_compression: Any = None) -> None:
        if not isinstance(per_turn, bool) and (not isinstance(per_turn, int) or per_turn <= 0):
            raise ValueError(f"per_turn must be a positive integer, True, or False, got {per_turn}")
        core = _window.SlidingWindowConversationManager(
            window_size, should_truncate_results, pin_first=pin_first, max_tool_result_chars=max_tool_result_chars,
            truncation_notice=truncation_notice, on_remove=on_remove)
        super().__init__(core, proactive_compression=proactive_compression)
        self.per_turn = per_turn
        self._model_call_count = 0

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        super().register_hooks(registry, **kwargs)
        registry.add_callback(BeforeModelCallEvent, self._on_before_model_call)

    def _on_before_model_call(self, event: BeforeModelCallEvent) -> None:
        """``per_turn``: manage the window before every model call, or every N calls."""
        if self.per_turn is False:
            return
        self._model_call_count += 1
        if self.per_turn is True or self._model_call_count % self.per_turn == 0:
            self.apply_management(event.agent)

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "model_call_count": self._model_call_count}

    def restore_from_session(  # type: ignore[override]  # strands' Message TypedDict; ours are plain dicts
        self, state: dict[str, Any]
    ) -> list[dict[str, Any]] | None:
        result = super().restore_from_session(state)
        self._model_call_count = int(state.get("model_call_count", 0))
        return result


class _SummaryRestore:
    """The SDK's summary contract: the summary is in the state and prepended on restore.

    The summary message carries a durable ``tracking_id``, as the SDK's does.
    """

    core: Any

    def reduce_context(self, agent: Any, e: Exception | None = None, **kwargs: Any) -> None:
        try:
            super().reduce_context(agent, e, **kwargs)  # type: ignore[misc]
        finally:
            self._track_summary()

    def apply_management(self, agent: Any, **kwargs: Any) -> None:
        try:
            super().apply_management(agent, **kwargs)  # type: ignore[misc]
        finally:
            self._track_summary()

    def _track_summary(self) -> None:
        summary = self.core.summary_message
        if summary is not None and not summary.get("tracking_id"):
            summary["tracking_id"] = str(uuid.uuid4())

    def restore_from_session(self, state: dict[str, Any]) -> list[dict[str, Any]] | None:
        super().restore_from_session(state)  # type: ignore[misc]
        summary = self.core.summary_message
        return [summary] if summary else None

    @property
    def summary_message(self) -> dict[str, Any] | None:
        return self.core.summary_message


def _summarizer(owner: _Adapter, summarizer: Any, summarization_agent: Any, prompt: str | None,
                llm_options: dict[str, Any] | None, checked_summary: bool = True) -> Any:
    given = [name for name, value in (("summarizer", summarizer), ("summarization_agent", summarization_agent)) if value is not None]
    if len(given) > 1 or (given and prompt is not None):
        raise ValueError("give at most one of summarizer, summarization_agent and summarization_system_prompt")
    if summarizer is not None:
        return summarizer
    if summarization_agent is not None:
        return SummarizationAgentSummarizer(summarization_agent, owner._current_agent)
    if not checked_summary:
        if llm_options:
            raise ValueError("llm_options configure the checked summary; with checked_summary=False give none")
        return ModelReplySummarizer(owner._current_agent, prompt)
    return AgentModelSummarizer(owner._current_agent, prompt, **(llm_options or {}))


class SummarizingConversationManager(_SummaryRestore, _Adapter):  # type: ignore[misc]  # same override as above
    """Summarizes the oldest ``summary_ratio`` of messages on overflow, keeping ``preserve_recent_messages``.

    The summary is written by the agent's own model (``aux_model`` > ``model``),
    called directly with ``summarization_system_prompt`` (fullrecall's checked
    default when None), unless ``summarizer`` (an object with
    ``.summarize(messages, previous_summary)`` or a callable) or a separate
    ``summarization_agent`` is given. ``llm_options`` go to
    :class:`fullrecall.summarizers.LLMSummarizer` (e.g. ``fallback="raise"``).
    ``checked_summary=False`` writes the summary as the SDK does: the SDK's
    prompt, the model's reply taken as it is, no extractive fallback (a failed
    call raises), no length bound.

    The window is the SDK's: the same messages are summarized (``summary_ratio``
    of the window, summary and pinned messages counted, ``pin_first`` and pinned
    messages kept before the summary), except that ``preserve_recent_messages``
    is never summarized even when a tool run crosses it.
    """

    def __init__(self, summary_ratio: float = 0.3, preserve_recent_messages: int = 10,
                 summarization_agent: Any = None, summarization_system_prompt: str | None = None, *,
                 pin_first: int | None = None, summarizer: Any = None, max_context_tokens: int | None = None,
                 max_history_turns: int | None = None, llm_options: dict[str, Any] | None = None,
                 proactive_compression: Any = None, prefer_alternating_roles: bool = False,
                 checked_summary: bool = True, **core_options: Any) -> None:
        self._agent_ref = None
        chosen = _summarizer(self, summarizer, summarization_agent, summarization_system_prompt, llm_options,
                             checked_summary)
        if not checked_summary:
            core_options.setdefault("max_summary_tokens", 1_000_000)
        core = _window.SummarizingConversationManager(
            summary_ratio, preserve_recent_messages, chosen, None, max_context_tokens, max_history_turns,
            pin_first=pin_first, prefer_alternating_roles=prefer_alternating_roles, **core_options)
        super().__init__(core, proactive_compression=proactive_compression)
        self.summarization_agent = summarization_agent
        self.summarization_system_prompt = summarization_system_prompt


class SemanticSummarizingConversationManager(_SummaryRestore, _Adapter):
    """Seed 000's manager for Strands: summaries in the window, every removed message in a searchable archive.

    Same parameters and defaults as :class:`fullrecall.archive.SemanticSummarizingConversationManager`;
    the summary comes from the agent's own model unless ``summarizer`` or
    ``summarization_agent`` is given.

    The archive follows the agent's session: when the agent has a session
    manager and no ``session_id`` was given, the archive takes the session's id;
    when no ``store`` was given either (the archive is in memory), a restored
    agent's archive is rebuilt from the session's own message log, which holds
    every message the manager removed. Without a session manager and a store,
    the archive lives in memory, for this process only. Without a session
    manager and a ``session_id``, the archive is this manager's own (a fresh
    session id, kept in its state, so a restored snapshot finds it), never a
    session another agent of the store writes.
    """

    core: _archive.SemanticSummarizingConversationManager

    def __init__(self, summary_ratio: float = 0.3, preserve_recent_messages: int = 10, summarizer: Any = None,
                 summarization_system_prompt: str | None = None, message_context_radius: int = 2,
                 semantic_search_top_k: int = 3, semantic_search_min_score: float = -2.0,
                 max_num_archived_messages: int | None = None, max_memory_archived_messages: int | None = None,
                 embedding_model: Any = None, aws_region: str | None = None, embedding_dimensions: int | None = None,
                 *, summarization_agent: Any = None, llm_options: dict[str, Any] | None = None,
                 proactive_compression: Any = None, **core_options: Any) -> None:
        self._agent_ref = None
        chosen = _summarizer(self, summarizer, summarization_agent, summarization_system_prompt, llm_options)
        self._session_id_given = "session_id" in core_options
        if not self._session_id_given:  # never the store's shared "default": another agent's conversation is there
            core_options["session_id"] = f"strands-{uuid.uuid4().hex}"
        core = _archive.SemanticSummarizingConversationManager(
            summary_ratio, preserve_recent_messages, chosen, None, message_context_radius, semantic_search_top_k,
            semantic_search_min_score, max_num_archived_messages, max_memory_archived_messages, embedding_model,
            aws_region, embedding_dimensions, **core_options)
        super().__init__(core, proactive_compression=proactive_compression)
        self.summarization_agent = summarization_agent
        self.summarization_system_prompt = summarization_system_prompt
        self._store_given = core_options.get("store") is not None
        self._agent_id_given = core_options.get("agent_id") is not None

    @property
    def archive(self) -> _archive.Archive:
        return self.core.archive

    def _on_agent_initialized(self, event: AgentInitializedEvent) -> None:
        self._follow_session(event)
        super()._on_agent_initialized(event)

    def _follow_session(self, event: AgentInitializedEvent) -> None:
        """After the session manager restored the agent: the archive takes the session's id (and content).

        A session holds one message log per agent, so the archive also takes the agent's id
        (unless ``agent_id`` was given): two agents of one session never share an archive.
        """
        session = getattr(event.agent, "_session_manager", None)
        session_id = getattr(session, "session_id", None)
        if session is None or not session_id or self._session_id_given:
            return
        archive = self.core.archive
        owner = {} if self._agent_id_given else {"agent_id": event.agent.agent_id}
        archive.scope = dataclasses.replace(archive.scope, session_id=session_id, **owner)
        if not self.removed_message_count:
            return
        repository = getattr(session, "session_repository", None)
        rebuild = not self._store_given and not archive.store.count(archive.scope)
        if repository is None:
            if rebuild:
                log.warning("session manager %s has no message log to read; the archive of session %r starts empty",
                            type(session).__name__, session_id)
            return
        if rebuild:
            records = repository.list_messages(session_id, event.agent.agent_id, offset=0, limit=self.removed_message_count)
            shape, removed = self.core._parse([record.to_message() for record in records], 0)
            if removed:
                archive.write(RemovedMessages(messages=removed, reason="restored", shape=shape))
                log.info("archive of session %r rebuilt from its message log: %d message(s)", session_id, len(removed))

    def recall(self, query: str, **options: Any) -> _archive.Recall:
        """Archived messages relevant to ``query`` with their neighbours, never repeating the window."""
        return self.core.recall(query, **options)

    def get_memory_usage_stats(self) -> dict[str, Any]:
        return self.core.get_memory_usage_stats()

    def get_memory_usage_summary(self) -> str:
        return self.core.get_memory_usage_summary()

    def restore_from_session(  # type: ignore[override]  # strands' Message TypedDict; ours are plain dicts
        self, state: dict[str, Any]
    ) -> list[dict[str, Any]] | None:
        stored = state.get("session_id")
        if self._session_id_given and stored is not None and stored != self.archive.scope.session_id:
            log.warning("restoring state of archive session %r into a manager for session %r: recall reads %r",
                        stored, self.archive.scope.session_id, self.archive.scope.session_id)
        elif not self._session_id_given and isinstance(stored, str) and stored:
            # no id given: the restored conversation's archive is the one its state names
            self.archive.scope = dataclasses.replace(self.archive.scope, session_id=stored)
        return super().restore_from_session(state)
