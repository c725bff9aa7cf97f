"""Summaries for the window, the verbatim archive for exact recall.

``SemanticSummarizingConversationManager`` is a :class:`SummarizingConversationManager`
whose removed messages go to an :class:`~fullrecall.archive.Archive` before they
leave, and which can recall them: the best archived messages for a query,
with ``message_context_radius`` neighbours, overlapping ranges merged.
"""

from __future__ import annotations

from typing import Any

from ..stores import _validate as V
from ..stores.base import DEFAULT_TENANT, Scope, Store
from ..window.summarizing import SummarizingConversationManager
from .archive import Archive, Recall


class SemanticSummarizingConversationManager(SummarizingConversationManager):
    """A summarizing manager whose removed messages go to a real, searchable archive.

    ``store`` is a Store or URL (default: an in-memory SQLite store; give
    ``"sqlite:///memory.db"`` to keep the archive across restarts) and
    ``session_id`` / ``user_id`` / ``agent_id`` (and ``tenant``) say whose conversation it is (one that shows
    nothing is refused, :class:`~fullrecall.errors.InvalidInput`, before the store is opened).
    ``background_indexing=True`` embeds archived messages on a worker thread (see
    :class:`~fullrecall.archive.Archive`; :meth:`flush` waits for their vectors).
    """

    def __init__(
        self,
        summary_ratio: float = 0.3,
        preserve_recent_messages: int = 10,
        summarizer: Any = None,
        summarization_system_prompt: str | None = None,
        message_context_radius: int = 2,
        semantic_search_top_k: int = 3,
        semantic_search_min_score: float = -2.0,
        max_num_archived_messages: int | None = None,
        max_memory_archived_messages: int | None = None,
        embedding_model: Any = None,
        aws_region: str | None = None,
        embedding_dimensions: int | None = None,
        *,
        reranker_model: Any = None,
        store: Store | str | None = None,
        session_id: str = "default",
        user_id: str | None = None,
        agent_id: str | None = None,
        background_indexing: bool = False,
        tenant: str = DEFAULT_TENANT,
        **summarizing_options: Any,
    ) -> None:
        V.check_session_id(session_id, "SemanticSummarizingConversationManager: 'session_id'")  # before a store opens
        V.check_owner(user_id, agent_id)
        if message_context_radius < 0:
            raise ValueError(f"message_context_radius must be >= 0, got {message_context_radius}")
        if semantic_search_top_k < 1:
            raise ValueError(f"semantic_search_top_k must be >= 1, got {semantic_search_top_k}")
        super().__init__(summary_ratio, preserve_recent_messages, summarizer, summarization_system_prompt, **summarizing_options)
        self.message_context_radius = message_context_radius
        self.semantic_search_top_k = semantic_search_top_k
        self.semantic_search_min_score = semantic_search_min_score
        self.archive = Archive(
            store,
            Scope(tenant=tenant, user_id=user_id, agent_id=agent_id, session_id=session_id),
            embedding_model=embedding_model,
            reranker_model=reranker_model,
            aws_region=aws_region,
            embedding_dimensions=embedding_dimensions,
            max_num_archived_messages=max_num_archived_messages,
            max_memory_archived_messages=max_memory_archived_messages,
            background_indexing=background_indexing,
        )
        self.add_removal_listener(self.archive.write)
        self._pinned_seen = 0

    def _pinned_count(self, raw) -> int:  # remembered so recall knows where the window starts
        self._pinned_seen = super()._pinned_count(raw)
        return self._pinned_seen

    @property
    def first_active_position(self) -> int:
        """The position of the oldest original message still in the window (after pinned ones)."""
        return self._pinned_seen + self.removed_message_count + self._front_seen

    def recall(self, query: str, *, top_k: int | None = None, min_score: float | None = None,
               radius: int | None = None) -> Recall:
        """Archived messages relevant to ``query``, with neighbours, never repeating the window."""
        return self.archive.recall(
            query,
            top_k=self.semantic_search_top_k if top_k is None else top_k,
            min_score=self.semantic_search_min_score if min_score is None else min_score,
            radius=self.message_context_radius if radius is None else radius,
            before=self.first_active_position,
        )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every archived message has its vectors (see :meth:`Archive.flush`)."""
        return self.archive.flush(timeout)

    def get_memory_usage_stats(self) -> dict[str, Any]:
        return self.archive.get_memory_usage_stats()

    def get_memory_usage_summary(self) -> str:
        return self.archive.get_memory_usage_summary()

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "session_id": self.archive.scope.session_id, "pinned": self._pinned_seen}

    def restore_from_state(self, state: dict[str, Any] | None) -> None:
        super().restore_from_state(state)
        if state:
            self._pinned_seen = int(state.get("pinned", 0))
