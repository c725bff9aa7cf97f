"""A deadline for a whole HTTP request, for every remote client (chat models, embeddings, Bedrock).

An HTTP client's timeout bounds each wait (connecting, each read): a server that sends one byte
within each wait holds a request for as long as it likes. Here a request runs on httpx's async
client under :func:`asyncio.wait_for`, which cancels it, connection and all, when its deadline
passes; sync requests (:func:`request`) go out on one event loop a process, on a thread of its own
(the caller's thread may already run a loop), their connections kept alive. Bedrock's clients
(botocore) sign their requests as ever and send them this way (:func:`attach`). The deadline
defaults to twice the timeout; ``FULLRECALL_LLM_DEADLINE`` sets it from the environment where a
client reads its settings there.

An answer's body is read up to a limit (:func:`max_bytes`: 32 MiB unless told, or
``FULLRECALL_LLM_MAX_RESPONSE_BYTES``): a server, or a proxy gone wrong, that sends more ends the request in
:class:`ResponseTooLarge` instead of filling the process's memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import math
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from ._fork import after_fork_in_child
from .errors import FullRecallError, InvalidInput

T = TypeVar("T")

ENV = "FULLRECALL_LLM_DEADLINE"
MAX_BYTES_ENV = "FULLRECALL_LLM_MAX_RESPONSE_BYTES"
DEFAULT_MAX_BYTES = 32 * 2**20  # a batch of 256 embeddings of 3072 numbers, as JSON, is about 16 MiB


class ResponseTooLarge(FullRecallError):
    """An answer's body was over ``limit`` bytes (as decoded); it was not read further."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer was over the limit of {limit} bytes (max_response_bytes, or {MAX_BYTES_ENV})")
        self.limit = limit


def resolve(deadline: float | str | None, timeout: float) -> float:
    """``deadline`` seconds (a number, or its text as the environment gives it), or twice ``timeout`` when None;
    anything but a positive number is refused, naming it (``timeout`` too).
    """
    timeout = seconds(timeout, "timeout")
    return 2 * timeout if deadline is None else seconds(deadline, "deadline")


def seconds(value: float | str, name: str) -> float:
    """``value`` as a positive, finite number of seconds (a number, or its text), or InvalidInput naming ``name``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise InvalidInput(f"{name} must be a positive number of seconds, got {value!r}")
    return number


def max_bytes(value: int | str | None) -> int:
    """``value`` (a number, or its text), else ``FULLRECALL_LLM_MAX_RESPONSE_BYTES``, else 32 MiB: the most bytes of
    an answer's body a client reads; anything but a positive whole number is refused, naming it.
    """
    name = "max_response_bytes"
    if value is None:
        value, name = os.environ.get(MAX_BYTES_ENV) or None, MAX_BYTES_ENV
        if value is None:
            return DEFAULT_MAX_BYTES
    try:
        number = int(value) if not isinstance(value, (bool, float)) else -1
    except (TypeError, ValueError):
        number = -1
    if number <= 0:
        raise InvalidInput(f"{name} must be a positive whole number of bytes, got {value!r}")
    return number


async def fetch(client: Any, method: str, url: str, *, limit: int, **kwargs: Any) -> Any:
    """``client``'s answer to one request (an ``httpx.Response``, body read), its body read up to ``limit`` bytes
    (decoded): past it, :class:`ResponseTooLarge`, the connection closed. ``kwargs`` are ``client.stream``'s.

    A user and password in ``url`` (``http://user:pw@host/v1``) go as the request's basic auth, as httpx sends
    them, but the URL requested is without them: httpx logs each request's URL.
    """
    import httpx

    address = httpx.URL(url)
    if address.userinfo and "auth" not in kwargs:
        kwargs["auth"] = httpx.BasicAuth(address.username, address.password)
        url = str(address.copy_with(username=None, password=None))
    async with client.stream(method, url, **kwargs) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit and "content-encoding" not in response.headers:
            raise ResponseTooLarge(limit)  # said at once: nothing read
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise ResponseTooLarge(limit)
            chunks.append(chunk)
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]  # decoded
    return httpx.Response(response.status_code, headers=headers, content=b"".join(chunks), request=response.request)


def from_env(deadline: float | str | None, timeout: float) -> float:
    """:func:`resolve` of ``deadline``, or when None of ``FULLRECALL_LLM_DEADLINE`` (when set)."""
    return resolve(os.environ.get(ENV) or None if deadline is None else deadline, timeout)


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Await ``make()`` on a private event loop in a worker thread, from sync code (a loop may run here already)."""
    async def main() -> T:
        return await make()

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fullrecall-http") as pool:
        return pool.submit(lambda: asyncio.run(main())).result()


async def within(call: Awaitable[T], deadline: float) -> T:
    """``call``, cancelled when ``deadline`` seconds pass first (``TimeoutError``)."""
    return await asyncio.wait_for(call, deadline)


class _Sender:
    """This process's event loop for sync requests, on a daemon thread, with one ``httpx.AsyncClient`` per
    timeout on it: connections are kept alive between requests, and a client (whose SSL context takes tens of
    milliseconds to make) is made once, not once a request.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clients: dict[float, Any] = {}  # used on the loop's thread only
        threading.Thread(target=self.loop.run_forever, name="fullrecall-http", daemon=True).start()

    def send(self, method: str, url: str, timeout: float, deadline: float, limit: int, kwargs: dict[str, Any]) -> Any:
        async def send() -> Any:
            import httpx

            client = self.clients.get(timeout)
            if client is None:
                client = self.clients[timeout] = httpx.AsyncClient(timeout=timeout)
            return await within(fetch(client, method, url, limit=limit, **kwargs), deadline)  # cancelled: closed

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result()


_sender: _Sender | None = None
_sender_lock = threading.Lock()


@after_fork_in_child
def _renew() -> None:
    """A new lock, and no event loop thread of the parent's (see ``_fork``)."""
    global _sender, _sender_lock
    _sender, _sender_lock = None, threading.Lock()


def request(method: str, url: str, *, timeout: float, deadline: float, limit: int = DEFAULT_MAX_BYTES,
            **kwargs: Any) -> Any:
    """One HTTP request (``httpx.Response``, body read) from sync code, ended by ``TimeoutError`` past ``deadline``,
    by :class:`ResponseTooLarge` past ``limit`` bytes of body.

    ``timeout`` bounds each wait as httpx's does; ``kwargs`` are :meth:`httpx.AsyncClient.request`'s. httpx's
    own errors (``httpx.TransportError``, ``httpx.TimeoutException``) come through as they are. Requests go out
    on one event loop a process (a forked child makes its own), reusing connections.
    """
    import httpx  # noqa: F401 - refused here, before the loop's thread starts

    global _sender
    with _sender_lock:
        if _sender is None:
            _sender = _Sender()
        sender = _sender
    return sender.send(method, url, timeout, deadline, limit, kwargs)


class _Body(io.BytesIO):
    """A read answer as botocore reads a raw response: ``read`` (streamed outputs) and ``stream`` (the others)."""

    def stream(self, amt: int = 1024, decode_content: bool | None = None) -> Iterator[bytes]:
        while chunk := self.read(amt):
            yield chunk


def attach(client: Any, operation: str, *, timeout: float, deadline: float, limit: int = DEFAULT_MAX_BYTES) -> None:
    """Send ``client``'s ``operation`` requests (e.g. ``"Converse"``; signed by botocore as ever) within ``deadline``,
    their answers read up to ``limit`` bytes (past it the call raises :class:`ResponseTooLarge`).

    botocore's sender bounds each read only: its ``before-send`` event lets a handler answer instead, so
    each request goes out through :func:`request`. Past the deadline the call raises botocore's
    ``HTTPClientError`` naming it, a failed connection its ``EndpointConnectionError``: what its own sender
    raises, so callers and botocore's retries treat them as ever.
    """
    try:
        import httpx  # noqa: F401 - refused now, not at the first request
    except ImportError as exc:  # pragma: no cover
        raise ImportError("Bedrock's clients send their requests with httpx: pip install 'fullrecall[bedrock]'") from exc
    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register(f"before-send.{service}.{operation}",
                                lambda request, **_: _send(request, timeout, deadline, limit))


def _send(prepared: Any, timeout: float, deadline: float, limit: int) -> Any:
    import httpx
    from botocore.awsrequest import AWSResponse
    from botocore.exceptions import EndpointConnectionError, HTTPClientError

    body = prepared.body
    if hasattr(body, "read"):
        body = body.read()
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in prepared.headers.items()}
    headers.setdefault("Accept-Encoding", "identity")  # botocore reads the body as sent
    try:
        response = request(prepared.method, prepared.url, timeout=timeout, deadline=deadline, limit=limit,
                           headers=headers, content=body or b"")
    except TimeoutError:
        raise HTTPClientError(error=f"no complete answer within the deadline of {deadline:g} s per request") from None
    except httpx.ConnectError as exc:
        raise EndpointConnectionError(endpoint_url=prepared.url, error=exc) from exc
    except (httpx.TransportError, httpx.TimeoutException, httpx.DecodingError) as exc:  # (a body not as encoded)
        raise HTTPClientError(error=f"{type(exc).__name__}: {exc}") from exc
    return AWSResponse(prepared.url, response.status_code, dict(response.headers), _Body(response.content))
