"""A Strands ``Model`` (or the model of a Strands ``Agent``), called directly.

The agent itself is never invoked: calling an agent from inside its own
conversation manager would re-enter its lock, tools and history. Like Strands'
own summarizer, this streams from ``agent.model`` with a system prompt and no
tools. Temperature and max tokens are the Strands model's own configuration;
the summarizer still checks the answer's length. ``deadline`` bounds each try's
whole stream (default 120 s, or ``FULLRECALL_LLM_DEADLINE``), as the other
clients bound a request: a provider that trickles its answer cannot hold a
summarizer; past it the try counts as a timeout and is retried; the sync :meth:`StrandsChatModel.complete` returns at
the deadline too (see :func:`_run`). ``max_response_bytes`` bounds the
answer's text (UTF-8 bytes; default 32 MiB, or ``FULLRECALL_LLM_MAX_RESPONSE_BYTES``): a stream that goes on
past it is closed, and the call fails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, TypeVar

from ... import _deadline, _retry
from ..._retry import backoff_delay
from .base import ChatModelError, ChatRequest, ChatResponse

logger = logging.getLogger("fullrecall.summarizers")
T = TypeVar("T")

_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
         "guardrail_intervened": "content_filter", "content_filtered": "content_filter"}


class StrandsChatModel:
    """Wraps a ``strands.models.Model`` or an ``Agent`` (whose ``model`` and ``system_prompt`` it uses)."""

    def __init__(self, model_or_agent: Any, *, max_retries: int = 2, backoff: float = 0.5,
                 max_backoff: float = 8.0, deadline: float | None = None,
                 max_response_bytes: int | None = None) -> None:
        model = getattr(model_or_agent, "model", None)
        if hasattr(model_or_agent, "stream"):  # a Model, even one with a ``.model`` attribute of its own
            self.model = model_or_agent
            self.system_prompt: str | None = None
        elif _is_agent(model_or_agent) and hasattr(model, "stream"):
            self.model = model
            prompt = getattr(model_or_agent, "system_prompt", None)
            self.system_prompt = prompt if isinstance(prompt, str) and prompt.strip() else None
        else:
            raise TypeError(f"expected a Strands Model or Agent, got {type(model_or_agent).__name__}")
        self.max_retries, self.backoff, self.max_backoff = _retry.checked(max_retries, backoff, max_backoff)
        self.deadline = _deadline.from_env(deadline, 60.0)
        self.max_response_bytes = _deadline.max_bytes(max_response_bytes)
        self.name = f"strands:{type(self.model).__name__}"

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        for attempt in range(self.max_retries + 1):
            try:
                return await self._within_deadline(request)
            except ChatModelError as error:
                await asyncio.sleep(self.retry_delay(error, attempt))
        raise AssertionError("unreachable")

    def retry_delay(self, error: ChatModelError, attempt: int) -> float:
        """The wait before trying again after try ``attempt`` (from 0) failed in ``error``; ``error`` itself, raised,
        when it is not worth a retry or none is left. The summarizer's calls and the memory agent's streams retry
        by it alike.
        """
        if not error.retryable or attempt == self.max_retries:
            raise error
        delay = backoff_delay(attempt, self.backoff, self.max_backoff)
        logger.warning("%s; retry %d/%d in %.2f s", error, attempt + 1, self.max_retries, delay)
        return delay

    def complete(self, request: ChatRequest) -> ChatResponse:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _run(lambda: self.acomplete(request))
        # called from inside an event loop (as Strands calls managers): run on a worker's own loop
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(_run, lambda: self.acomplete(request)).result()

    async def _within_deadline(self, request: ChatRequest) -> ChatResponse:
        try:
            return await _deadline.within(self._once(request), self.deadline)
        except TimeoutError as exc:
            raise ChatModelError(f"{self.name} timed out: no complete answer within the deadline of "
                                 f"{self.deadline:g} s per request", retryable=True) from exc

    async def _once(self, request: ChatRequest) -> ChatResponse:
        parts: list[str] = []
        finish = "stop"
        async for text, stop in self.answer_stream(request, request.system):
            parts.append(text)
            finish = stop or finish
        return ChatResponse(text="".join(parts), finish_reason=finish, model=self.name)

    async def answer_stream(self, request: ChatRequest,
                            system: str | None) -> AsyncGenerator[tuple[str, str | None], None]:
        """One try's answer as the model streams it: each piece of text as ``(text, None)``, then ``("", finish)``.

        Both users of a Strands model (:meth:`acomplete`, and the memory agent streaming its answers) read it
        here, so a provider's failure is the same ChatModelError to both: its own errors as :func:`provider_error`
        says, text past ``max_response_bytes`` (not retryable: the same request would get the same flood), a
        stream that ends without its messageStop (a dropped connection: what came is no whole answer; retryable).
        The provider's stream is closed however this one ends; the deadline is the caller's.
        """
        messages = [{"role": m["role"], "content": [{"text": m["content"]}]} for m in request.messages]
        stop: str | None = None
        size = 0
        stream = self.model.stream(messages, tool_specs=None, system_prompt=system)
        try:
            async for event in stream:
                delta = event.get("contentBlockDelta", {}).get("delta", {}) if isinstance(event, dict) else {}
                if isinstance(delta.get("text"), str) and delta["text"]:
                    size += len(delta["text"].encode("utf-8", "surrogatepass"))
                    if size > self.max_response_bytes:
                        raise ChatModelError(f"{self.name} failed: {_deadline.ResponseTooLarge(self.max_response_bytes)}")
                    yield delta["text"], None
                if isinstance(event, dict) and "messageStop" in event:
                    stop = str(event["messageStop"].get("stopReason") or "end_turn")
        except ChatModelError:
            raise
        except Exception as exc:
            raise provider_error(self.name, exc) from exc
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()  # the provider's stream ends here, however this try did
        if stop is None:
            raise ChatModelError(f"{self.name} failed: the answer's stream ended without its stop (cut short after "
                                 f"{size:,} bytes)", retryable=True)
        yield "", _STOP.get(stop, stop)


def provider_error(name: str, exc: Exception) -> ChatModelError:
    """A Strands provider's own error as the ChatModelError every chat model gives: worth a retry when it is
    throttling (Strands' ``ModelThrottledException``, any provider's ``...Throttling...``), a timeout or a
    connection's failure, or an AWS error Bedrock's own client retries (:func:`_aws_retryable`), which may pass;
    not when the provider refused the request as it is.
    """
    kind = type(exc).__name__
    retryable = "Throttl" in kind or isinstance(exc, (TimeoutError, ConnectionError)) or _aws_retryable(exc)
    return ChatModelError(f"{name} failed: {kind}: {exc}", retryable=retryable)


def _aws_retryable(exc: Exception) -> bool:
    """Whether botocore's ``exc`` (Strands' Bedrock model lets most out as they are) is one that
    :class:`BedrockChatModel` retries: an AWS error whose code may pass (throttling, not ready, a server's fault)
    or whose status is 5xx, or a connection that failed or broke off.
    """
    try:
        from botocore.exceptions import ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as AwsConnectionError
    except ImportError:  # pragma: no cover - no botocore: no error of its
        return False
    if isinstance(exc, ClientError):
        from .bedrock import _RETRY_CODES

        code = exc.response.get("Error", {}).get("Code")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code in _RETRY_CODES or (status or 0) >= 500
    return isinstance(exc, (HTTPClientError, AwsConnectionError))


def _run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``make()`` run to its end on a new event loop, whose default executor's threads are not waited for.

    A Strands model may read its provider's stream on a worker thread (``asyncio.to_thread``: Bedrock's does).
    When the deadline cancels a try, that thread stays blocked in its read; ``asyncio.run`` would wait for it
    on closing the loop, so a stalled provider held the sync call until the read ended (botocore's read
    timeout: 120 s), whatever the deadline. Here the loop closes without waiting: what is left running is
    each such thread, one per try the deadline cut, a daemon (it does not hold the process's exit); it ends
    when its read does (the provider's own read timeout, or the provider closing the connection), its answer
    dropped, as the loop it would report to is closed.
    """
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_DaemonExecutor())
    try:
        return loop.run_until_complete(make())
    finally:
        try:
            tasks = asyncio.all_tasks(loop)  # what the call left pending (a provider's reader task) ends with it
            if tasks:
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # shuts the executor down without waiting


class _DaemonExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each job on a daemon thread of its own, started for it and ending with it (see :func:`_run`)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def work() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # the job's outcome, whatever it is, is its future's
                    future.set_exception(exc)

        threading.Thread(target=work, name="fullrecall-strands-read", daemon=True).start()
        return future


def _is_agent(value: Any) -> bool:
    """A Strands ``Agent`` (not any object that merely has a ``.model``)."""
    try:
        from strands import Agent
    except ImportError:  # pragma: no cover - strands not installed: nothing is an Agent
        return False
    return isinstance(value, Agent)
