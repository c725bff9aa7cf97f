"""The ``AgentMiddleware`` form of :class:`~fullrecall.integrations.langgraph_window.FullrecallWindow`.

Kept apart so that ``pre_model_hook`` users need only ``langgraph``, not ``langchain``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import RemoveMessage
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from ..errors import ContextWindowOverflowError

if TYPE_CHECKING:
    from .langgraph_window import FullrecallWindow


class FullrecallMiddleware(AgentMiddleware):
    """``wrap_model_call``: the model sees the window, the newest user message enriched; the state is untouched.

    A ``ContextOverflowError`` from the model shrinks the window (``reduce_context``) and the call is retried;
    once the window cannot shrink, the call is tried once without the recalled context, and after that the
    error is raised (``ContextWindowOverflowError`` from the manager, or the model's own).

    With the window's ``trim_state``, ``before_model`` also replaces the state's messages with the window.
    """

    def __init__(self, window: FullrecallWindow) -> None:
        super().__init__()
        self.window = window

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if not self.window.trim_state:
            return None
        window, _ = self.window.view(state["messages"], get_config())
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *window]}

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if not self.window.trim_state:
            return None
        window, _ = await self.window.aview(state["messages"], get_config())
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *window]}

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        config = get_config()
        window, model_input = self.window.view(request.messages, config)
        while True:
            try:
                return handler(request.override(messages=model_input))  # type: ignore[arg-type]  # BaseMessage, not its AnyMessage union
            except ContextOverflowError as error:
                try:
                    window, model_input = self.window.reduce(request.messages, config, error)
                except ContextWindowOverflowError as cannot:
                    window, model_input = _without_recall(model_input, window, cannot)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        config = get_config()
        window, model_input = await self.window.aview(request.messages, config)
        while True:
            try:
                return await handler(request.override(messages=model_input))  # type: ignore[arg-type]  # BaseMessage, not its AnyMessage union
            except ContextOverflowError as error:
                try:
                    window, model_input = await asyncio.to_thread(self.window.reduce, request.messages, config, error)
                except ContextWindowOverflowError as cannot:
                    window, model_input = _without_recall(model_input, window, cannot)


def _without_recall(model_input: list, window: list, cannot: ContextWindowOverflowError) -> tuple[list, list]:
    """Recall is an extra: when the window cannot shrink, the model gets it without; if that was tried, give up."""
    if [m.content for m in model_input] == [m.content for m in window]:
        raise cannot
    return window, window
