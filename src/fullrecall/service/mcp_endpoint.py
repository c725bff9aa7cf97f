"""``/mcp``: the memory tools of :mod:`fullrecall.integrations.mcp_server` inside the HTTP service.

The same API key as every route (``Authorization: Bearer <key>``, the same rate limit): the
tenant is always the key's; the user and agent come from the ``X-Fullrecall-User`` and
``X-Fullrecall-Agent`` headers and must be ones the key may act for (else a tool error).
Conversations are the service's own (``/v1/conversations``). A NUL or lone surrogate in any argument
is a tool error naming it, as it is a 422 on every route, and nothing is written. The transport is stateless
streamable HTTP, so any worker answers any request. Mounted only when the ``mcp`` package is
installed (``pip install "fullrecall[mcp]"``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from ..stores.base import Scope
from .conversations import check_text
from .gate import Refused, admit, authenticate, client_address
from .tenancy import check_conversation, scope_for

if TYPE_CHECKING:
    from .app import Service

PATH = "/mcp"
_PRINCIPAL = "fullrecall_principal"


class McpEndpoint:
    """ASGI middleware: requests to ``/mcp`` go, once their key is verified, to the MCP app."""

    def __init__(self, app: Any, service: Service, mcp_app: Any) -> None:
        self.app, self.service, self.mcp_app = app, service, mcp_app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        from .app import _error

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            principal = await authenticate(self.service, headers.get("authorization", ""), client_address(scope))
            scope.setdefault("state", {}).update({_PRINCIPAL: principal, "tenant": principal.tenant})
            admit(self.service, principal)
        except Refused as exc:
            await _error(exc.status, exc.kind, exc.message, exc.field, headers=exc.headers)(scope, receive, send)
            return
        await self.mcp_app(scope, receive, send)


class RoutableConversations:
    """The service's conversations for ``append_messages`` and ``get_context``: a ``session_id`` must be one
    ``/v1/conversations/{id}`` accepts, so every conversation written over MCP can be read and forgotten there.
    """

    def __init__(self, conversations: Any) -> None:
        self.conversations = conversations

    def append(self, scope: Scope, messages: list[dict[str, Any]]) -> Any:
        check_conversation(scope.session_id, "session_id")
        return self.conversations.append(scope, messages)

    def context(self, scope: Scope, max_tokens: int | None, query: str | None) -> dict[str, Any]:
        check_conversation(scope.session_id, "session_id")
        return self.conversations.context(scope, max_tokens, query)


def check_arguments(arguments: dict[str, Any]) -> None:
    """Refuse a NUL or lone surrogate in any tool argument, naming it, as every route of the service does."""
    for name, value in arguments.items():
        check_text(value, name)


def mount_mcp(app: Any, service: Service) -> Callable[[], AbstractAsyncContextManager[None]] | None:
    """Serve the MCP tools at ``/mcp`` of ``app``; what the app's lifespan must run (None without ``mcp``)."""
    if importlib.util.find_spec("mcp") is None:
        return None
    from mcp.server.transport_security import TransportSecuritySettings

    from ..integrations.mcp_server import AGENT_HEADER, USER_HEADER, create_server, owner_header

    def owner(request: Any) -> Scope:
        principal = request.scope["state"][_PRINCIPAL]
        return scope_for(principal, user_id=owner_header(request, USER_HEADER),
                         agent_id=owner_header(request, AGENT_HEADER))

    server = create_server(service.store, embedder=service.indexer.embedder, owner=owner,
                           conversations=RoutableConversations(service.conversations), check=check_arguments)
    mcp_app = server.streamable_http_app(  # the key authenticates: no browser origin checks on an API
        streamable_http_path=PATH, stateless_http=True, json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    app.add_middleware(McpEndpoint, service=service, mcp_app=mcp_app)
    return server.session_manager.run
