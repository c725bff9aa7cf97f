"""Seed 000's enrichment hook as a Strands ``HookProvider`` that never touches the stored conversation.

On ``AgentInitializedEvent`` it registers an ``InvokeModelStage.Input``
middleware on the agent. That handler receives the per-call
``InvokeModelContext`` (its ``messages`` are a copy of ``agent.messages``) and
returns a copy whose newest user text message carries the recalled context.
The model sees the enriched text; ``agent.messages``, the session and the
archive keep the user's own words. (``BeforeInvocationEvent.messages`` would
enrich the message *before* it is appended, so the enriched text would be
stored.)
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from strands.hooks import AgentInitializedEvent, HookProvider, HookRegistry

from ..archive import SemanticMemoryHook as _CoreHook
from ..archive import SemanticSummarizingConversationManager as _CoreSemanticManager

log = logging.getLogger("fullrecall.strands")


class SemanticMemoryHook(HookProvider):
    """Adds "---Previous Context---" from the archive to what the model sees for the newest user message.

    ``manager`` is the :class:`~fullrecall.strands.SemanticSummarizingConversationManager`
    (or core manager) to recall from; by default the agent's own
    ``conversation_manager``. Recall runs once per user message (tool-loop
    model calls reuse it). ``last_enriched`` holds the last text sent.
    """

    def __init__(self, enabled: bool = True, max_context_length: int = 2000, include_metadata: bool = False,
                 manager: Any = None) -> None:
        self.core = _CoreHook(enabled, max_context_length, include_metadata)
        self.manager = manager
        self.last_enriched: str | None = None
        self._attached: weakref.WeakSet[Any] = weakref.WeakSet()
        self._cache: tuple[weakref.ref[Any], tuple[Any, ...], str | None] | None = None

    @property
    def enabled(self) -> bool:
        return self.core.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.core.enabled = value

    @property
    def last_recall(self) -> Any:
        return self.core.last_recall

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(AgentInitializedEvent, self._attach)

    def _attach(self, event: AgentInitializedEvent) -> None:
        agent = event.agent
        if agent in self._attached:
            return
        add = getattr(agent, "add_middleware", None)
        if add is None:
            raise RuntimeError("SemanticMemoryHook needs a strands-agents release with Agent.add_middleware "
                               "(model-input middleware), so the enrichment never enters the stored history")
        from strands.middleware import InvokeModelStage

        add(InvokeModelStage.Input, self._enrich_input)
        self._attached.add(agent)
        if self._core_manager(agent) is None:
            log.warning("SemanticMemoryHook: the agent's conversation_manager is not a "
                        "SemanticSummarizingConversationManager and no manager= was given; nothing will be enriched")

    def _core_manager(self, agent: Any) -> _CoreSemanticManager | None:
        manager = self.manager if self.manager is not None else getattr(agent, "conversation_manager", None)
        manager = getattr(manager, "core", manager)
        return manager if isinstance(manager, _CoreSemanticManager) else None

    def _enrich_input(self, context: Any) -> Any:
        """``InvokeModelStage.Input`` handler: a context whose newest user text message is enriched."""
        manager = self._core_manager(context.agent)
        if not self.core.enabled or manager is None:
            return context
        messages = list(context.messages)
        index = _newest_user_text(messages)
        if index is None or messages[index] == manager.summary_message:
            return context
        try:
            enriched = self._enriched(messages[index], manager)
        except Exception as exc:  # noqa: BLE001 - recall must never block the model call
            log.warning("recall failed, the message goes to the model unenriched: %s: %s", type(exc).__name__, exc)
            return context
        if enriched is None:
            return context
        messages[index] = enriched
        return context.replace(messages=messages)

    def _enriched(self, message: dict[str, Any], manager: _CoreSemanticManager) -> dict[str, Any] | None:
        text = next(b["text"] for b in message["content"] if "text" in b)
        # the manager by a weak reference, not its id(): a freed manager's id goes to the next (another user's) one
        key = (text, manager.first_active_position, manager.archive.store.count(manager.archive.scope))
        if self._cache is None or self._cache[0]() is not manager or self._cache[1] != key:
            self._cache = (weakref.ref(manager), key, self.core.enrich_text(text, manager))
        enriched_text = self._cache[2]
        if enriched_text is None:
            return None
        self.last_enriched = enriched_text
        content = list(message["content"])
        first = next(i for i, b in enumerate(content) if "text" in b)
        content[first] = {**content[first], "text": enriched_text}
        return {**message, "content": content}


def _newest_user_text(messages: list[dict[str, Any]]) -> int | None:
    """Index of the newest user message that is not a tool result, when it has text.

    A prompt without text (an image alone) has nothing to recall for: an earlier question is never enriched instead.
    """
    for index in range(len(messages) - 1, -1, -1):
        msg = messages[index]
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if not isinstance(content, list) or any(isinstance(b, dict) and "toolResult" in b for b in content):
            continue
        return index if any(isinstance(b, dict) and isinstance(b.get("text"), str) for b in content) else None
    return None
