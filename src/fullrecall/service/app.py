"""The HTTP API (FastAPI): ``create_app(settings)``; ``fullrecall serve`` runs it under uvicorn.

Every route but ``/healthz`` and ``/readyz`` needs ``Authorization: Bearer <key>``; the
key's tenant goes into every storage scope (see :mod:`.tenancy`). Errors are JSON
``{"error": {"type", "message", "field"}}`` with a 4xx status; an unexpected failure
is a 500 with no traceback. The OpenAPI schema is at ``/openapi.json``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from contextlib import asynccontextmanager, nullcontext
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._json import dumps_text
from .._json import parse as parse_json
from ..errors import FullRecallError, InvalidInput, MemoryInputError, MessageFormatError, StoreError
from ..stores._forget import counted_stats
from ..stores.base import ANY, Filters, Scope
from .auth import KeyStore, Principal
from .config import MANAGERS, Settings
from .conversations import Conversations, NotFound
from .gate import Refused, admit, authenticate, client_address
from .indexer import Indexer
from .inspector import inspector_router, mount_ui
from .limits import RateLimiter
from .longterm import router as longterm_router
from .mcp_endpoint import mount_mcp
from .metrics import Metrics
from .tenancy import Forbidden, InvalidName, scope_for
from .windows import ManagedWindows

log = logging.getLogger("fullrecall.service")

UNAUTHENTICATED = ("/healthz", "/readyz")


class Service:
    """What the routes share: the store, keys, the conversation backend, the indexer, limits and metrics."""

    def __init__(self, settings: Settings, store: Any = None, embedder: Any = None) -> None:
        from ..stores import open_store

        self.settings = settings
        self.store = store if store is not None else open_store(settings.store)
        self.metrics = Metrics()
        self.keys = KeyStore(self.store, cache_seconds=settings.key_cache_seconds)
        self.indexer = Indexer(self.store, embedder or settings.embedding_model, batch=settings.embedding_batch,
                               backlog=settings.embedding_backlog, on_indexed=self.metrics.observe_indexed)
        self.conversations = Conversations(self.store, self.indexer, window_messages=settings.window_messages,
                                           windows=self._windows(settings))
        self.limiter = RateLimiter(settings.rate_limit, settings.burst)
        # per address, shared by the workers: each allows its share (connections are spread over them)
        workers = max(1, settings.workers)
        self.auth_failures = RateLimiter(settings.failed_auth_limit / workers,
                                         math.ceil(settings.failed_auth_burst / workers))
        # CPU-bound searches get few threads of their own, so they never starve writes or the event loop
        self.writes = Lane("fullrecall-write", 8)
        self.searches = Lane("fullrecall-search", settings.search_threads)

    def _windows(self, settings: Settings) -> ManagedWindows | None:
        """The window manager of ``settings.manager`` (None: a sliding window of the newest messages)."""
        if settings.manager not in MANAGERS:
            raise ValueError(f"setting 'manager' must be one of {MANAGERS}, got {settings.manager!r}")
        if settings.manager == "sliding":
            return None
        return ManagedWindows(self.store, self.indexer, window_messages=settings.window_messages,
                              window_tokens=settings.window_tokens, summarizer=settings.summarizer,
                              on_summary=lambda tenant: self.metrics.summaries_made.labels(tenant).inc(),
                              on_llm_call=lambda tenant: self.metrics.llm_calls.labels(tenant).inc())

    def close(self) -> None:
        self.writes.close()
        self.searches.close()
        self.indexer.close()
        self.store.close()


class Lane:
    """A small thread pool for one kind of blocking work, awaited from the event loop."""

    def __init__(self, name: str, threads: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix=name)

    async def run(self, fn: Any, *args: Any) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=True)  # in-flight work finishes


# -- request and response bodies (what the OpenAPI schema publishes) --------------------------------------
class AppendBody(BaseModel):
    """One message or several, in any supported shape (Converse, OpenAI, Anthropic); a message's ``id`` makes a retry
    idempotent.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=10_000)


class SearchScope(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    user_id: str | None = None
    agent_id: str | None = None
    conversation_id: str | None = None


class SearchFilters(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    # (strict: a JSON value of another type, true for an integer, is refused, not converted; NaN and Infinity,
    # which Python's JSON reads, are refused)
    roles: list[str] | None = Field(None, min_length=1, description="the roles to keep (left out: every role)")
    since: float | None = None
    until: float | None = None


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    query: str = Field(min_length=1, max_length=10_000)
    scope: SearchScope = SearchScope()
    top_k: int = Field(5, ge=1, le=100)
    radius: int = Field(0, ge=0, le=20)
    filters: SearchFilters | None = None


class ExportBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    user_id: str | None = None
    agent_id: str | None = None
    conversation_id: str | None = None


EVERYTHING = Body(ExportBody())  # an empty body exports every conversation of the default owner


def _error(status: int, kind: str, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message, "field": field}}, status_code=status,
                        headers=headers)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before the route sees it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _error(413, "too_large", f"the request body is {int(declared):,} bytes, over the "
                                f"{self.limit:,}-byte limit", "body")(scope, receive, send)
        chunks, seen, more = [], 0, True
        while more:  # read the body here, so an oversized one is refused before any route parses it
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, _replay([], message), send)
            seen += len(message.get("body", b""))
            if seen > self.limit:
                return await _error(413, "too_large", f"the request body is over the {self.limit:,}-byte limit",
                                    "body")(scope, receive, send)
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        await self.app(scope, _replay(chunks, None, receive), send)


class Utf8Url:
    """ASGI middleware: a path or query whose percent-escapes spell no UTF-8 (``%FF``) gets 422. The server decodes
    them to U+FFFD, so different ids a client sent (``%FF`` and ``%FE``) would name one conversation.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            bad = _not_utf8(scope.get("raw_path") or b"", scope.get("query_string") or b"")
            if bad is not None:
                return await _error(422, "invalid", f"the URL's {bad} is not valid UTF-8 (a percent-escape of a "
                                    "byte no character is made of)", bad)(scope, receive, send)
        await self.app(scope, receive, send)


class NoStore:
    """ASGI middleware: every API answer (``/v1``, ``/mcp``) says ``Cache-Control: no-store``, so no browser or
    proxy keeps a copy of memory on disk (the inspector's pages of a conversation outlived its forget there).
    """

    PATHS = ("/v1", "/mcp")

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(self.PATHS):
            return await self.app(scope, receive, send)

        async def send_no_store(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"]
                message = {**message, "headers": [*headers, (b"cache-control", b"no-store")]}
            await send(message)

        await self.app(scope, receive, send_no_store)


def _not_utf8(raw_path: bytes, query: bytes) -> str | None:
    """``"path"``, or the name of the query parameter (``"query"`` when that is not UTF-8 either), whose
    percent-decoded bytes are no UTF-8; None when all are.
    """
    try:
        unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError:
        return "path"
    for part in query.split(b"&"):
        name, _, value = part.partition(b"=")
        try:
            name_text = unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return "query"
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return name_text or "query"
    return None


def _replay(chunks: list[bytes], first: dict | None, receive: Any = None):
    """An ASGI ``receive`` that gives the buffered body once, then waits on the real one (disconnects)."""
    pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}] if first is None else [first]

    async def replay() -> dict:
        if pending:
            return pending.pop()
        return await receive() if receive is not None else {"type": "http.disconnect"}

    return replay




def create_app(settings: Settings | None = None, *, store: Any = None, embedder: Any = None) -> FastAPI:
    """The API over ``settings.store`` (or an open ``store``); the store is closed when the app shuts down.

    ``embedder`` (an :class:`~fullrecall.embeddings.Embedder`) replaces ``settings.embedding_model``.
    """
    settings = settings or Settings.load()
    service = Service(settings, store, embedder)

    mcp_running = None

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async with mcp_running() if mcp_running else nullcontext():
            yield
        service.close()  # uvicorn has finished in-flight requests; the indexer drains its queue

    app = FastAPI(title="fullrecall", version="1", lifespan=lifespan,
                  description="Memory for LLM agents that never loses a word.")
    app.state.service = service
    _errors(app)
    _routes(app, service)
    mcp_running = mount_mcp(app, service)  # /mcp, when the mcp package is installed
    mount_ui(app)  # the inspector at /ui
    app.add_middleware(Utf8Url)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(NoStore)  # added later, so it wraps them: their own answers (413, 422) are not kept either
    app.add_middleware(Measure, metrics=service.metrics)
    return app


def _errors(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(x) for x in first.get("loc", ())]
        inner = loc[1:] if len(loc) > 1 and loc[0] in ("body", "query", "path", "header") else loc
        field = ".".join(inner) or None
        message = f"{field}: {str(first.get('msg', 'invalid')).removeprefix('Value error, ')}"
        if first.get("type") == "json_invalid":
            message, field = "the body is not valid JSON (UTF-8)", "body"
        elif loc == ["body"] and isinstance(first.get("input"), bytes):  # a body read as bytes: not sent as JSON
            sent = request.headers.get("content-type")
            message = ("the body must be JSON sent with 'Content-Type: application/json' (it came "
                       + (f"as {sent!r})" if sent else "without a Content-Type)"))
        return _error(422, "invalid", message, field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = str(exc.detail)
        status = exc.status_code
        if status == 400 and "parsing the body" in detail:  # JSON no parser reads (nested too deep, an integer of
            detail, status = "the body is not valid JSON in UTF-8", 422  # too many digits): bad input, as any other
        kinds = {404: "not_found", 405: "method_not_allowed"}
        return _error(status, kinds.get(status, "invalid"), detail, "body" if exc.status_code == 400 else None)

    def plain(status: int, kind: str | None, field: str | None = None, prefix: str = "") -> Any:
        async def handler(request: Request, exc: Exception) -> JSONResponse:  # an error naming its field wins
            named = getattr(exc, "field", None) or field or (_named_field(str(exc)) if status == 422 else None)
            return _error(status, kind or type(exc).__name__, prefix + str(exc), named)

        return handler

    # the most specific class a failure is an instance of picks its answer
    for error, handler in (
        (MessageFormatError, plain(422, "invalid_message", "messages")),
        (InvalidInput, plain(422, "invalid")),
        (MemoryInputError, plain(422, "invalid")),
        (ValueError, plain(422, "invalid")),
        (NotFound, plain(404, "not_found")),
        (Forbidden, plain(403, "forbidden")),
        (StoreError, plain(503, "unavailable",
                           prefix="the store refused or could not be reached; nothing was acknowledged: ")),
        (FullRecallError, plain(500, None)),
    ):
        app.add_exception_handler(error, handler)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, "internal", "internal error (logged on the server)")


# the field an error's words name: the quoted name something is said of, first or after a colon ("fact: 'text' must
# be ...", "filters 'roles'[0] contains ...", "'max_tokens' 1 is below ...", "the body is not ..."); a quoted value
# ("session 'a' has ...", "'id' 'a' is ...") names none
_NAMED_FIELD = re.compile(r"(?:^|: |filters )'([A-Za-z_][\w.]*)'(?:\[\d+\])* (?:must|is|are|contains|has|holds|\d)"
                          r"|^the (body) ")


def _named_field(message: str) -> str | None:
    found = _NAMED_FIELD.search(message)
    return (found.group(1) or found.group(2)) if found else None


class Measure:
    """ASGI middleware: every response counted and timed in the metrics, labelled by tenant and route template."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500
        scope.setdefault("state", {})["tenant"] = ""

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")  # its template as the schema names it ("{conversation_id}", not ":path")
            self.metrics.request(scope["state"].get("tenant", ""), getattr(route, "path_format", "unmatched"),
                                 scope["method"], status, time.perf_counter() - started)


def _routes(app: FastAPI, service: Service) -> None:
    conv = service.conversations

    async def principal(request: Request) -> Principal:
        found = await authenticate(service, request.headers.get("authorization", ""), client_address(request.scope))
        request.scope["state"]["tenant"] = found.tenant  # a request over the key's limit is counted as its tenant's
        admit(service, found)
        return found

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        return _error(exc.status, exc.kind, exc.message, exc.field, headers=exc.headers)

    Key = Depends(principal)
    User = Query(None, max_length=200, description="the user the conversation belongs to (default owner if unset)")
    Agent = Query(None, max_length=200, description="the agent the conversation belongs to (default owner if unset)")

    def scope(p: Principal, user_id: str | None, agent_id: str | None, conversation_id: str | None = None) -> Scope:
        return scope_for(p, user_id=user_id, agent_id=agent_id, conversation_id=conversation_id)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        try:
            service.store.count(Scope(tenant="__keys__", session_id="__ready__"))
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            return _error(503, "unavailable", f"the store is not reachable: {type(exc).__name__}")
        return JSONResponse({"status": "ready"})  # no key: nothing of any tenant's activity

    # the hot routes answer with their JSON directly (no response model to validate the answer against)
    @app.post("/v1/conversations/{conversation_id:path}/messages", status_code=201, tags=["conversations"],
              response_model=dict)
    async def append(conversation_id: str, body: AppendBody, p: Principal = Key, user_id: str | None = User,
                     agent_id: str | None = Agent) -> JSONResponse:
        """Append messages; returns their ids and positions once they are durable."""
        s = scope(p, user_id, agent_id, conversation_id)
        written = await service.writes.run(conv.append, s, body.messages)
        service.metrics.messages.labels(p.tenant).inc(len(written))
        return JSONResponse({"conversation_id": conversation_id, "messages": written}, status_code=201)

    @app.get("/v1/conversations/{conversation_id:path}/messages", tags=["conversations"])
    def window(conversation_id: str, p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent
               ) -> dict:
        """The active window (the newest messages), verbatim."""
        return {"conversation_id": conversation_id, "messages": conv.window(scope(p, user_id, agent_id, conversation_id))}

    @app.get("/v1/conversations/{conversation_id:path}/context", tags=["conversations"])
    def context(conversation_id: str, p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent,
                max_tokens: int | None = Query(None, ge=1, le=10_000_000), query: str | None = Query(None, max_length=10_000)
                ) -> dict:
        """What to send a model: the window within ``max_tokens``, recalled context added to the newest user message."""
        if query is not None and "\x00" in query:
            _nul("query")
        out = conv.context(scope(p, user_id, agent_id, conversation_id), max_tokens, query)
        service.metrics.recalls.labels(p.tenant, "context").inc()
        return {"conversation_id": conversation_id, **out}

    @app.get("/v1/conversations/{conversation_id:path}/summaries", tags=["conversations"])
    def summaries(conversation_id: str, p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent
                  ) -> dict:
        """Summaries of the conversation, oldest first; expand one with ``/v1/summaries/{id}/messages``."""
        items = conv.summaries(scope(p, user_id, agent_id, conversation_id))
        service.metrics.summaries.labels(p.tenant).inc(len(items))
        return {"conversation_id": conversation_id, "summaries": items}

    @app.get("/v1/summaries/{summary_id}/messages", tags=["conversations"])
    def expand(summary_id: str, p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent) -> dict:
        """The archived messages a summary covers, verbatim."""
        return {"summary_id": summary_id, "messages": conv.summary_messages(scope(p, user_id, agent_id), summary_id)}

    @app.delete("/v1/conversations/{conversation_id:path}", tags=["conversations"])
    def forget(conversation_id: str, p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent
               ) -> dict:
        """Delete the conversation everywhere; counts per kind."""
        return {"conversation_id": conversation_id, "deleted": conv.forget(scope(p, user_id, agent_id, conversation_id))}

    @app.post("/v1/search", tags=["search"], response_model=dict)
    async def search(body: SearchBody, p: Principal = Key) -> JSONResponse:
        """Hybrid search over the caller's messages: every hit with its scores and its range."""
        if "\x00" in body.query:
            _nul("query")
        s = scope(p, body.scope.user_id, body.scope.agent_id, body.scope.conversation_id)
        f = body.filters
        filters = Filters(roles=tuple(f.roles) if f.roles else None, since=f.since, until=f.until) if f else None
        started = time.perf_counter()
        hits = await service.searches.run(conv.search, s, body.query, body.top_k, body.radius, filters)
        service.metrics.recalls.labels(p.tenant, "search").inc()
        return JSONResponse({"hits": hits, "elapsed_ms": round((time.perf_counter() - started) * 1000, 3)})

    @app.get("/v1/stats", tags=["admin"])
    def stats(p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent,
              conversation_id: str | None = Query(None, max_length=200),
              everyone: bool = Query(False, description="the whole tenant (a key not limited to users or agents)")
              ) -> dict:
        """Sizes of the caller's data, the embedding queue and the searchable delay."""
        if everyone:
            if p.users is not None or p.agents is not None:
                raise Forbidden("a key limited to some users or agents cannot read the whole tenant's stats", "everyone")
            s = Scope(tenant=p.tenant, user_id=ANY, agent_id=ANY)
        else:
            s = scope(p, user_id, agent_id, conversation_id)
        return {"tenant": p.tenant, "store": counted_stats(service.store, s), "embedding_queue": service.indexer.pending_of(
            p.tenant), "searchable_delay": service.indexer.delay_percentiles(p.tenant)}  # its own: no other's activity

    @app.post("/v1/export", tags=["admin"], response_class=StreamingResponse,
              responses={200: {"content": {"application/x-ndjson": {}}}})
    def export(body: ExportBody = EVERYTHING, p: Principal = Key) -> StreamingResponse:
        """The caller's messages as JSON Lines (one conversation, or every conversation of the owner)."""
        s = scope(p, body.user_id, body.agent_id, body.conversation_id)
        if body.conversation_id is not None and not service.store.count(s):
            raise NotFound(f"conversation {body.conversation_id!r} not found")
        lines = (dumps_text(line) + "\n" for line in conv.export(s))
        return StreamingResponse(lines, media_type="application/x-ndjson")

    @app.post("/v1/import", tags=["admin"], openapi_extra={
        "requestBody": {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}, "required": True}})
    async def import_(request: Request, p: Principal = Key, user_id: str | None = User,
                      agent_id: str | None = Agent) -> dict:
        """Append exported JSON Lines to the caller's conversations (idempotent on ids; all validated first)."""
        raw = await request.body()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"the body is not valid UTF-8 (byte {exc.start})") from None
        lines, numbers = [], []  # each line and its number in the body, blank lines counted
        for n, line in enumerate(text.split("\n")):  # not splitlines(): U+0085 and U+2028 live in JSON strings
            if line.strip():
                try:
                    lines.append(parse_json(line))
                except json.JSONDecodeError as exc:
                    raise MessageFormatError(f"line {n + 1}: not valid JSON ({exc.msg})") from None
                except ValueError as exc:  # an integer of more digits than Python converts
                    raise MessageFormatError(f"line {n + 1}: not valid JSON here ({str(exc).split(':')[0]})") from None
                numbers.append(n + 1)
        s = scope(p, user_id, agent_id)
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(conv.import_lines, s, lines, numbers)

    app.include_router(longterm_router(service, principal))  # /v1/memories, /v1/facts, /v1/patterns
    app.include_router(inspector_router(service, Key))  # the read routes of the browser inspector

    @app.get("/metrics", tags=["admin"])
    def metrics(p: Principal = Key) -> Response:
        """Prometheus metrics of this process (requests, latencies, errors, recalls, searchable delay) per tenant.

        Only keys of the operators' tenant (``metrics_tenant``, default ``admin``) not limited to some users or
        agents may read them: they name every tenant.
        """
        if p.tenant != service.settings.metrics_tenant:
            raise NotFound("not found")
        if p.users is not None or p.agents is not None:
            raise Forbidden("a key limited to some users or agents cannot read /metrics: they name every tenant")
        service.metrics.pending.set(service.indexer.pending)
        body, content_type = service.metrics.render()
        return Response(body, media_type=content_type)


def _nul(field: str) -> None:
    raise InvalidName(f"'{field}' holds a NUL character", field)

