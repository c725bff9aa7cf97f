"""A deadline for a whole HTTP request, for every remote client (chat models, embeddings, Bedrock).

An HTTP client's timeout bounds each wait (connecting, each read): a server that sends one byte
within each wait holds a request for as long as it likes. Here a request runs on httpx's async
client under :func:`asyncio.wait_for`, which cancels it, connection and all, when its deadline
passes; sync requests (:func:`request`) go out on one event loop a process, on a thread of its own
(the caller's thread may already run a loop), their connections kept alive. Bedrock's clients
(botocore) sign their requests as ever and send them this way (:func:`attach`). The deadline
defaults to twice the timeout; ``FULLRECALL_LLM_DEADLINE`` sets it from the environment where a
client reads its settings there.
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

from .errors import InvalidInput

T = TypeVar("T")

ENV = "FULLRECALL_LLM_DEADLINE"


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
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.clients: dict[float, Any] = {}  # used on the loop's thread only
        threading.Thread(target=self.loop.run_forever, name="fullrecall-http", daemon=True).start()

    def send(self, method: str, url: str, timeout: float, deadline: float, kwargs: dict[str, Any]) -> Any:
        async def send() -> Any:
            import httpx

            client = self.clients.get(timeout)
            if client is None:
                client = self.clients[timeout] = httpx.AsyncClient(timeout=timeout)
            return await within(client.request(method, url, **kwargs), deadline)  # cancelled: its connection closed

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result()


_sender: _Sender | None = None
_sender_lock = threading.Lock()


def request(method: str, url: str, *, timeout: float, deadline: float, **kwargs: Any) -> Any:
    """One HTTP request (``httpx.Response``, body read) from sync code, ended by ``TimeoutError`` past ``deadline``.

    ``timeout`` bounds each wait as httpx's does; ``kwargs`` are :meth:`httpx.AsyncClient.request`'s. httpx's
    own errors (``httpx.TransportError``, ``httpx.TimeoutException``) come through as they are. Requests go out
    on one event loop a process (a forked child makes its own), reusing connections.
    """
    import httpx  # noqa: F401 - refused here, before the loop's thread starts

    global _sender
    with _sender_lock:
        if _sender is None or _sender.pid != os.getpid():
            _sender = _Sender()
        sender = _sender
    return sender.send(method, url, timeout, deadline, kwargs)


class _Body(io.BytesIO):
    """A read answer as botocore reads a raw response: ``read`` (streamed outputs) and ``stream`` (the others)."""

    def stream(self, amt: int = 1024, decode_content: bool | None = None) -> Iterator[bytes]:
        while chunk := self.read(amt):
            yield chunk


def attach(client: Any, operation: str, *, timeout: float, deadline: float) -> None:
    """Send ``client``'s ``operation`` requests (e.g. ``"Converse"``; signed by botocore as ever) within ``deadline``.

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
                                lambda request, **_: _send(request, timeout, deadline))


def _send(prepared: Any, timeout: float, deadline: float) -> Any:
    import httpx
    from botocore.awsrequest import AWSResponse
    from botocore.exceptions import EndpointConnectionError, HTTPClientError

    body = prepared.body
    if hasattr(body, "read"):
        body = body.read()
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in prepared.headers.items()}
    headers.setdefault("Accept-Encoding", "identity")  # botocore reads the body as sent
    try:
        response = request(prepared.method, prepared.url, timeout=timeout, deadline=deadline, headers=headers,
                           content=body or b"")
    except TimeoutError:
        raise HTTPClientError(error=f"no complete answer within the deadline of {deadline:g} s per request") from None
    except httpx.ConnectError as exc:
        raise EndpointConnectionError(endpoint_url=prepared.url, error=exc) from exc
    except (httpx.TransportError, httpx.TimeoutException) as exc:
        raise HTTPClientError(error=f"{type(exc).__name__}: {exc}") from exc
    return AWSResponse(prepared.url, response.status_code, dict(response.headers), _Body(response.content))
