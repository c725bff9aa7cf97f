"""The ``AgentMiddleware`` form of :class:`~fullrecall.integrations.langgraph_window.FullrecallWindow`.

Kept apart so that ``pre_model_hook`` users need only ``langgraph``, not ``langchain``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import RemoveMessage
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES

if TYPE_CHECKING:
    from .langgraph_window import FullrecallWindow


class FullrecallMiddleware(AgentMiddleware):
    """``wrap_model_call``: the model sees the window, the newest user message enriched; the state is untouched.

    With the window's ``trim_state``, ``before_model`` also replaces the state's messages with the window.
    """

    def __init__(self, window: "FullrecallWindow") -> None:
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
        _, model_input = self.window.view(request.messages, get_config())
        return handler(request.override(messages=model_input))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        _, model_input = await self.window.aview(request.messages, get_config())
        return await handler(request.override(messages=model_input))
