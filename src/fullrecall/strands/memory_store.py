"""The archive as a Strands ``MemoryStore``, for the SDK's own ``MemoryManager`` plugin.

``MemoryManager(stores=[ArchiveMemoryStore(manager)])`` gives the agent a
``search_memory`` tool and (unless ``injection=False``) injected ``<memory>``
context, both answered from the verbatim archive. One entry per recalled range
(a hit with its ``message_context_radius`` neighbours), most relevant first. The
store is read-only: the conversation manager is what writes the archive.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strands.memory import MemoryEntry, MemoryStore, SearchOptions

from ..archive import Archive, Recall
from ..archive.recall import display_text
from ..messages.model import RECALLED


class ArchiveMemoryStore(MemoryStore):
    """Searches a fullrecall archive: give a Semantic manager (Strands or core) or an :class:`Archive`.

    With a manager, recall uses its ``semantic_search_top_k``,
    ``semantic_search_min_score`` and ``message_context_radius`` and skips what
    is still in the active window; with a bare archive, ``radius`` and
    ``min_score`` apply and everything archived is searched.
    """

    def __init__(self, source: Any, *, name: str = "fullrecall-archive", description: str | None = None,
                 max_search_results: int | None = None, radius: int = 2, min_score: float | None = -2.0) -> None:
        self.name = name
        self.description = description or ("Verbatim earlier messages of this conversation that left the "
                                           "context window; search it to recall exact words, numbers and names.")
        self.max_search_results = max_search_results
        self.writable = False
        self.extraction = None
        core = getattr(source, "core", source)
        self._manager = core if hasattr(core, "recall") and hasattr(core, "archive") else None
        self._archive: Archive = core.archive if self._manager is not None else core
        self.radius = radius
        self.min_score = min_score

    async def search(self, query: str, options: SearchOptions | None = None) -> list[MemoryEntry]:
        limit = (options or {}).get("max_search_results") or self.max_search_results
        if limit is not None and limit < 1:
            raise ValueError("max_search_results must be >= 1")
        recall = await asyncio.to_thread(self._recall, query, limit)  # store and embedder work: off the event loop
        ranges = sorted(recall.ranges, key=lambda r: -r.best_score)
        entries = [self._entry(r) for r in ranges]
        return entries[:limit] if limit is not None else entries

    def _recall(self, query: str, limit: int | None) -> Recall:
        if self._manager is not None:
            top_k = max(limit or 0, self._manager.semantic_search_top_k)
            return self._manager.recall(query, top_k=top_k)
        return self._archive.recall(query, top_k=limit or 3, min_score=self.min_score, radius=self.radius)

    def _entry(self, recalled: Any) -> MemoryEntry:
        lines = [f"[Message {m.position}, {m.role}]: {display_text(m)}" for m in recalled.messages]
        return MemoryEntry(content="\n".join(lines), metadata={
            "positions": [recalled.start, recalled.end],
            "hits": list(recalled.hit_positions),
            "score": recalled.best_score,
            "session_id": self._archive.scope.session_id,
            RECALLED: True,  # the SDK's search_memory answer quotes the archive: indexed as such when archived
        })
