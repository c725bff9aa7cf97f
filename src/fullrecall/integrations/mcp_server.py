"""fullrecall as an MCP server: the memory tools for any MCP client (Claude Desktop, IDEs, agent SDKs).

``fullrecall mcp --store URL --user U [--agent A]`` serves, over stdio or streamable HTTP
(the official MCP Python SDK):

* the agent memory tools of :class:`~fullrecall.memory.MemoryTools`: ``search_memory``,
  ``expand``, ``remember``, ``forget``, ``recall_patterns``;
* ``append_messages(session_id, messages)`` and ``get_context(session_id, max_tokens=None)``,
  for a client that wants fullrecall to hold its conversation
  (:class:`~fullrecall.memory.SyncConversationMemory`: every message durable at once, a message's
  ``"id"`` its idempotency key; the context is the window with recalled messages, within an
  optional token budget).

Scope: the user and agent given on the command line; over HTTP a request may name others with
the ``X-Fullrecall-User`` and ``X-Fullrecall-Agent`` headers (the HTTP transport has no
authentication of its own: keep it on loopback or behind one). Bad arguments come back as
tool errors (``isError``) naming the tool and argument; nothing partial is written.
"""

import argparse
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from ..errors import InvalidInput
from ..stores.base import DEFAULT_TENANT, Scope, Store

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from ..memory import MemoryTools, SyncConversationMemory

USER_HEADER = "x-fullrecall-user"
AGENT_HEADER = "x-fullrecall-agent"
_CACHED_SCOPES = 64

_APPEND = ("Record messages of the conversation `session_id` durably (one atomic append). A message's own "
           "'id' field makes a retried append store it once. Any common shape: OpenAI, Anthropic, Bedrock/Strands.")
_CONTEXT = ("What to send the model for the conversation `session_id`: its active window, the newest user message "
            "enriched with recalled earlier messages; at most `max_tokens` tokens when given (oldest turns left out "
            "first; they stay in memory; a budget below the newest turn is an error).")


class Conversations(Protocol):
    """Where ``append_messages`` and ``get_context`` keep conversations (the HTTP service passes its own)."""

    def append(self, scope: Scope, messages: list[dict[str, Any]]) -> Any: ...
    def context(self, scope: Scope, max_tokens: int | None, query: str | None) -> dict[str, Any]: ...


class MemoryConversations:
    """:class:`~fullrecall.memory.SyncConversationMemory` conversations (of the default tenant) in ``store``."""

    def __init__(self, store: Store, embedder: Any = None) -> None:
        self.store, self.embedder = store, embedder
        from ..memory._cache import LockedCache

        self._cache: LockedCache[SyncConversationMemory] = LockedCache(_CACHED_SCOPES)

    def append(self, scope: Scope, messages: list[dict[str, Any]]) -> None:
        """Append ``messages``; two different ones of one call with one ``"id"`` are refused, as the service does
        (the conversation keeps an id's first message: the other would be acknowledged and lost).
        """
        from ..errors import MessageFormatError
        from ..messages.formats import check_unique_ids, parse_messages

        ids = [m.get("id") if isinstance(m, dict) else None for m in messages]
        # no id, or one the memory refuses by itself (naming it), takes no part
        check_unique_ids(messages, [i if isinstance(i, (str, int)) and not isinstance(i, bool) else None for i in ids],
                         "a call")
        parsed = parse_messages(messages)[1]  # a malformed message is named before anything is read or written
        conversation, lock = self._conversation(scope)
        with lock:
            # a tool result must answer a tool call of this call or of the window, as the service's route checks:
            # an orphaned one would make every later context one that no model provider accepts
            calls = {i for m in conversation.messages for i in parse_messages([m])[1][0].tool_use_ids}
            for index, msg in enumerate(parsed):
                for tool_id in msg.tool_result_ids:
                    if tool_id not in calls:
                        raise MessageFormatError(f"message {index}: tool result {tool_id!r} answers no tool call "
                                                 "of this conversation")
                calls.update(msg.tool_use_ids)
            conversation.add(messages)

    def context(self, scope: Scope, max_tokens: int | None, query: str | None = None) -> dict[str, Any]:
        """The window with recall, its oldest turns left out until it fits ``max_tokens``."""
        conversation, lock = self._conversation(scope)
        with lock:
            messages = conversation.model_input()
        return _within_budget(messages, max_tokens, getattr(conversation.manager, "token_counter", None))

    def _conversation(self, scope: Scope) -> tuple["SyncConversationMemory", threading.Lock]:
        from ..memory import SyncConversationMemory

        if scope.tenant != DEFAULT_TENANT:
            raise ValueError(f"conversations of tenant {scope.tenant!r} need the service's backend")
        session_id, user, agent = scope.session_id or "default", str(scope.user_id or ""), str(scope.agent_id or "")

        def build() -> "SyncConversationMemory":
            return SyncConversationMemory(self.store, session_id, user_id=user, agent_id=agent,
                                      embedding_model=self.embedder)

        return self._cache.get((user, agent, session_id), build)


def create_server(
    store: Store | str,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    embedder: Any = None,
    name: str = "fullrecall",
    owner: Callable[[Any], Scope] | None = None,
    conversations: Conversations | None = None,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> "MCPServer":
    """An MCP server with fullrecall's memory tools for ``user_id``/``agent_id`` (unset: the default owner ``""``).

    ``store`` is a :class:`~fullrecall.stores.base.Store` (the caller closes it) or a URL (opened here and
    kept open for the life of the process); ``embedder`` an
    :class:`~fullrecall.embeddings.Embedder` or model name (default: the local MiniLM, loaded once).
    Run it with ``server.run("stdio")`` or serve ``server.streamable_http_app()``.

    ``owner(request)`` decides the owner (a :class:`~fullrecall.stores.base.Scope`: tenant, user,
    agent) of each call from its HTTP request (None over stdio or in process), e.g. from the
    embedding web server's authentication; it may raise ``PermissionError`` or ``ValueError`` to
    refuse the call. By default: the ``X-Fullrecall-User`` and ``X-Fullrecall-Agent`` headers over
    ``user_id``/``agent_id``, in the default tenant. ``conversations`` keeps the conversations of
    ``append_messages`` and ``get_context`` (default: :class:`MemoryConversations` in ``store``).
    ``check(arguments)`` sees every call's arguments (by name) before the tool runs and may raise
    ``ValueError`` naming one to refuse the call, a tool error (default: the HTTP service's check, which refuses a
    NUL or lone surrogate in any argument, naming it). A blank ``session_id`` (empty, or whitespace or invisible
    characters only) names no conversation, and one of long-term memory's change logs (``_log.``...) is none:
    ``append_messages`` and ``get_context`` refuse them, as the library does. A blank user or agent (``user_id``,
    a header) is refused alike (:func:`~fullrecall.stores._validate.check_owner_id`): here, or by every call.
    """
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    from ..embeddings import load_embedder
    from ..memory._cache import LockedCache
    from ..memory.tools import _SPECS as MEMORY_TOOL_SPECS
    from ..service.mcp_endpoint import check_arguments
    from ..stores import open_store
    from ..stores._validate import check_owner, check_session_id

    def _describe(tool: str, arg: str) -> Any:
        """The argument as the memory tools' own schema has it (strict: no true or "2" for an integer)."""
        spec = MEMORY_TOOL_SPECS[tool][1][arg]
        return Field(description=spec["description"], ge=spec.get("minimum"), strict=True)

    check_owner(user_id, agent_id)  # an owner nobody can see or type, refused before a store is opened
    store = open_store(store) if isinstance(store, str) else store
    check = check or check_arguments
    embedder = load_embedder(embedder)
    conversations = conversations or MemoryConversations(store, embedder)
    memories: LockedCache[MemoryTools] = LockedCache(_CACHED_SCOPES)  # per owner
    server = _strict_server(MCPServer)(name, instructions=(
        "Long-term memory that never loses a word: search_memory finds facts and past messages across sessions, "
        "expand shows the exact messages behind a hit, remember keeps a fact, forget deletes by id."))

    def from_headers(request: Any) -> Scope:
        user, agent = owner_header(request, USER_HEADER), owner_header(request, AGENT_HEADER)
        return Scope(user_id=(user_id or "") if user is None else user, agent_id=(agent_id or "") if agent is None
                     else agent)

    def who(ctx: "Context | None", session_id: str | None = None) -> Scope:
        """The owner of this call (and the conversation ``session_id``)."""
        request = ctx.request_context.request if ctx is not None else None
        try:
            scope = (owner or from_headers)(request)
        except (PermissionError, ValueError) as exc:
            raise ToolError(str(exc)) from exc
        if session_id is not None:
            try:  # the library's rule and words: not blank (whitespace or invisible only), no change log
                check_session_id(session_id, "'session_id'")
            except ValueError as exc:
                raise ToolError(str(exc)) from exc
        user, agent = scope.user_id or "", scope.agent_id or ""
        if not isinstance(user, str) or not isinstance(agent, str):
            raise ToolError("a call acts for one user and one agent, not for any")
        try:  # the library's rule and words: a user or agent shows something
            check_owner(user, agent)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        try:
            return Scope(tenant=scope.tenant, user_id=user, agent_id=agent, session_id=session_id)
        except ValueError as exc:  # a session id no store keeps (NUL, a lone surrogate, too long): named
            raise ToolError(str(exc)) from exc

    def checked(args: dict[str, Any]) -> dict[str, Any]:
        """``args``, once ``check`` accepts them."""
        try:
            check(args)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        return args

    def memory_tools(scope: Scope) -> tuple["MemoryTools", threading.Lock]:
        from ..memory import MemoryTools, PersistentMemory, ProceduralMemory

        tenant, user, agent = scope.tenant, str(scope.user_id), str(scope.agent_id)

        def build() -> "MemoryTools":
            memory = PersistentMemory(user, agent, store=store, tenant=tenant, embedder=embedder)
            procedural = ProceduralMemory(store, user_id=user, agent_id=agent, tenant=tenant, embedder=embedder)
            return MemoryTools(memory, procedural)

        return memories.get((tenant, user, agent), build)

    def memory_tool(tool: str, ctx: "Context | None", args: dict[str, Any]) -> dict[str, Any]:
        # a session_id given (expand, forget) is checked as every tool's is: one of whitespace or invisible
        # characters names no session (it was read as a session's name); "" is none, as the memory tools take it
        tools, lock = memory_tools(who(ctx, args.get("session_id") or None))
        given = checked({k: v for k, v in args.items() if v is not None})
        with lock:
            result = tools.call(tool, given)
        if "error" in result:  # the SDK names the tool
            raise ToolError(str(result["error"]).removeprefix(f"{tool}: "))
        return result

    def search_memory(query: Annotated[str, _describe("search_memory", "query")],
                      limit: Annotated[int | None, _describe("search_memory", "limit")] = None,
                      ctx: Context | None = None) -> dict[str, Any]:
        return memory_tool("search_memory", ctx, {"query": query, "limit": limit})

    def expand(id: Annotated[str, _describe("expand", "id")],
               session_id: Annotated[str | None, _describe("expand", "session_id")] = None,
               ctx: Context | None = None) -> dict[str, Any]:
        return memory_tool("expand", ctx, {"id": id, "session_id": session_id})

    def remember(fact: Annotated[str, _describe("remember", "fact")], ctx: Context | None = None) -> dict[str, Any]:
        return memory_tool("remember", ctx, {"fact": fact})

    def forget(id: Annotated[str, _describe("forget", "id")],
               session_id: Annotated[str | None, _describe("forget", "session_id")] = None,
               ctx: Context | None = None) -> dict[str, Any]:
        return memory_tool("forget", ctx, {"id": id, "session_id": session_id})

    def recall_patterns(task: Annotated[str, _describe("recall_patterns", "task")],
                        ctx: Context | None = None) -> dict[str, Any]:
        return memory_tool("recall_patterns", ctx, {"task": task})

    def append_messages(session_id: Annotated[str, Field(description="the conversation", min_length=1)],
                        messages: Annotated[list[dict[str, Any]], Field(description="the new messages, oldest first",
                                                                        min_length=1)],
                        ctx: Context | None = None) -> dict[str, Any]:
        scope = who(ctx, session_id)
        checked({"messages": messages})
        try:
            conversations.append(scope, messages)
        except ValueError as exc:  # fullrecall's bad-input errors name the message and field
            raise ToolError(str(exc)) from exc
        return {"session_id": session_id, "received": len(messages)}

    def get_context(session_id: Annotated[str, Field(description="the conversation", min_length=1)],
                    max_tokens: Annotated[int | None, Field(description="token budget (default: none)", ge=1,
                                                            strict=True)] = None,
                    ctx: Context | None = None) -> dict[str, Any]:
        scope = who(ctx, session_id)
        try:
            return {"session_id": session_id, **conversations.context(scope, max_tokens, None)}
        except (ValueError, LookupError) as exc:  # a bad budget; a backend's unknown conversation
            raise ToolError(str(exc)) from exc

    for fn, description in ((search_memory, None), (expand, None), (remember, None), (forget, None),
                            (recall_patterns, None), (append_messages, _APPEND), (get_context, _CONTEXT)):
        server.add_tool(fn, description=description or MEMORY_TOOL_SPECS[fn.__name__][0], structured_output=True)
    return server


def owner_header(request: Any, name: str) -> str | None:
    """The header ``name`` of ``request`` (None: absent) as the client wrote it: its bytes read as UTF-8 where they
    are UTF-8, else as Latin-1 (what HTTP hands over, and what clients that encode headers in Latin-1 send). Read
    as Latin-1 alone, the UTF-8 user ``josé`` came as ``josÃ©``, another owner than the routes' ``?user_id=josé``.
    """
    value = (getattr(request, "headers", None) or {}).get(name)
    if value is None:
        return None
    raw = value.encode("latin-1")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return str(value)


def _strict_server(base: Any) -> Any:
    """``base`` (the SDK's MCPServer) with tools that refuse an argument their input schema does not name, a tool
    error naming it in the memory tools' words, and schemas that say so (``additionalProperties: false``): the SDK
    drops an unknown argument silently, so a misspelled ``sesion_id`` made ``forget`` act on every session.
    """
    from mcp.server.mcpserver.exceptions import ToolError

    from ..memory.tools import unknown_argument

    class StrictServer(base):
        async def list_tools(self) -> list[Any]:
            return [t.model_copy(update={"input_schema": {**t.input_schema, "additionalProperties": False}})
                    for t in await super().list_tools()]

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            tool = next((t for t in await super().list_tools() if t.name == name), None)  # None: the SDK says so
            unknown = tool and unknown_argument(name, arguments, tool.input_schema.get("properties") or {})
            if unknown:
                raise ToolError(f"Error executing tool {unknown}")  # as the SDK words a tool's errors
            return await super().call_tool(name, arguments, context)

    return StrictServer


def _within_budget(messages: list[dict[str, Any]], max_tokens: int | None, counter: Any) -> dict[str, Any]:
    """The context, its oldest turns left out until it fits ``max_tokens``: a turn starts at a user message that is
    no tool result (Anthropic and Bedrock send tool results as user messages), so no tool call loses its result.
    """
    from ..messages.formats import parse_messages
    from ..tokens import default_token_counter
    from ..window.cuts import clean_cuts, is_window_start

    counter = counter or default_token_counter()
    parsed = parse_messages(messages)[1] if messages else []
    sizes = [counter.count_message(m) for m in parsed]
    clean = clean_cuts(parsed)
    pinned = 1 if messages and messages[0].get("role") in ("system", "developer") else 0
    starts = [pinned] + [i for i in range(pinned + 1, len(messages)) if is_window_start(parsed, i, clean)]
    for start in starts:
        tokens = sum(sizes[:pinned]) + sum(sizes[start:])
        if max_tokens is None or tokens <= max_tokens:
            return {"messages": messages[:pinned] + messages[start:], "tokens": tokens, "left_out": start - pinned}
    raise InvalidInput(f"'max_tokens' {max_tokens} is below the newest turn's {tokens} tokens")


# -- ``fullrecall mcp`` ----------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``fullrecall mcp``'s options."""
    parser.add_argument("--store", default=None,
                        help="store URL (default: $FULLRECALL_STORE, else sqlite:///fullrecall.db, as every command)")
    parser.add_argument("--user", required=True, help="the user whose memory this is")
    parser.add_argument("--agent", default="", help="the agent (default: the default agent)")
    parser.add_argument("--embedder", default=None, help="embedding model (default: the local MiniLM)")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address (http transport)")
    parser.add_argument("--port", type=_port, default=8765, help="HTTP port; the endpoint is /mcp (http transport)")


def _port(text: str) -> int:
    """``--port``: a TCP port a server can listen on."""
    port = int(text) if text.strip().lstrip("+-").isdigit() else 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is no port (1 to 65535)")
    return port


def run(args: argparse.Namespace) -> int:
    """Serve until stopped (stdin closes, or Ctrl-C); the store is closed then."""
    from ..cli.common import opened_store
    from ..stores._validate import check_owner

    Scope(user_id=args.user, agent_id=args.agent)  # an owner no store keeps is refused before anything is served
    check_owner(args.user, args.agent)  # and one nobody can see or type, in the words of every entry point
    with opened_store(args) as store:
        server = create_server(store, user_id=args.user, agent_id=args.agent, embedder=args.embedder)
        if args.transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=args.host, port=args.port)
    return 0
