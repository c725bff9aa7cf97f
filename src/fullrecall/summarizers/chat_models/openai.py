"""Any OpenAI-compatible chat completions endpoint, over httpx.

OpenAI, Azure OpenAI (its ``/openai/v1`` endpoint, or a deployment URL with
``api_version``), Ollama, vLLM, llama.cpp's server and LM Studio all speak
``POST {base_url}/chat/completions``. Environment variables (read by
:meth:`OpenAIChatModel.from_env`): ``FULLRECALL_LLM_BASE_URL`` or
``OPENAI_BASE_URL``; ``FULLRECALL_LLM_API_KEY`` or ``OPENAI_API_KEY``;
``FULLRECALL_LLM_MODEL`` or ``OPENAI_MODEL``; ``FULLRECALL_LLM_TIMEOUT`` and
``FULLRECALL_LLM_DEADLINE`` (seconds); ``FULLRECALL_LLM_MAX_RESPONSE_BYTES``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ... import _base_url, _deadline, _json, _retry, _secrets
from .base import ChatModelError, ChatRequest, ChatResponse

logger = logging.getLogger("fullrecall.summarizers")

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIChatModel:
    """Chat completions client: a deadline per request, retries with exponential backoff.

    ``timeout`` bounds each wait (connecting, sending, each read); ``deadline``
    bounds one whole HTTP request, from connecting to the last byte of the
    answer (default: twice ``timeout``), so a server that trickles bytes cannot
    hold a call forever; ``max_response_bytes`` bounds the answer's body (default 32 MiB, or
    ``FULLRECALL_LLM_MAX_RESPONSE_BYTES``): a bigger one is not read on, and fails. Retries cover timeouts, connection errors,
    408/409/425/429 and 5xx (honouring ``Retry-After``); other 4xx fail at once.
    ``api_key_header="api-key"`` and ``api_version`` serve Azure deployment URLs.
    The sync :meth:`complete` runs the same request on a private event loop in a
    worker thread, so both paths honour the deadline alike.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout: float = 60.0,
        deadline: float | None = None,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        api_key_header: str = "Authorization",
        api_version: str | None = None,
        headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        self.model = model
        self.base_url = _base_url.checked(base_url)
        self.api_key = _secrets.checked_key(api_key)
        self.timeout = timeout
        self.deadline = _deadline.resolve(deadline, timeout)
        self.max_response_bytes = _deadline.max_bytes(max_response_bytes)
        self.max_retries, self.backoff, self.max_backoff = _retry.checked(max_retries, backoff, max_backoff)
        self.api_key_header = api_key_header
        self.api_version = api_version
        self.headers = _secrets.checked_headers(headers)
        self._secrets = _secrets.secrets_of(self.api_key, self.headers, self.base_url)  # never shown in an error or the log
        self.extra_body = dict(extra_body or {})
        _json.check_json_value(self.extra_body, "extra_body")  # what no request could carry, refused now
        self.name = f"openai:{model}"

    @classmethod
    def from_env(cls, **overrides: Any) -> OpenAIChatModel:
        """Configure from ``FULLRECALL_LLM_*`` (first) or ``OPENAI_*`` variables."""
        env = os.environ
        model = overrides.pop("model", None) or env.get("FULLRECALL_LLM_MODEL") or env.get("OPENAI_MODEL")
        if not model:
            raise ChatModelError("no model configured: set FULLRECALL_LLM_MODEL (or OPENAI_MODEL)")
        kwargs: dict[str, Any] = {
            "base_url": env.get("FULLRECALL_LLM_BASE_URL") or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            "api_key": env.get("FULLRECALL_LLM_API_KEY") or env.get("OPENAI_API_KEY"),
        }
        if env.get("FULLRECALL_LLM_TIMEOUT"):
            kwargs["timeout"] = _deadline.seconds(env["FULLRECALL_LLM_TIMEOUT"], "FULLRECALL_LLM_TIMEOUT")
        if env.get(_deadline.ENV):
            kwargs["deadline"] = env[_deadline.ENV]  # checked by _deadline.resolve, as every client's
        kwargs.update(overrides)
        return cls(model, **kwargs)

    # -- request -------------------------------------------------------------------
    def _url(self) -> str:
        url = f"{self.base_url}/chat/completions"
        return f"{url}?api-version={self.api_version}" if self.api_version else url

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.headers}
        if self.api_key:
            value = f"Bearer {self.api_key}" if self.api_key_header.lower() == "authorization" else self.api_key
            headers[self.api_key_header] = value
        return headers

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        messages = [{"role": "system", "content": request.system}] if request.system else []
        messages.extend({"role": m["role"], "content": m["content"]} for m in request.messages)
        return {"model": self.model, "messages": messages, "max_tokens": request.max_tokens,
                "temperature": request.temperature, **self.extra_body}

    def complete(self, request: ChatRequest) -> ChatResponse:
        # httpx's sync client cannot bound a whole request (its timeouts are per read), and an event
        # loop may already run in this thread: run acomplete on a loop of its own in a worker thread.
        return _deadline.run_sync(lambda: self.acomplete(request))

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        import httpx

        body = self._body(request)
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(self.max_retries + 1):
                try:
                    response = await _deadline.within(_deadline.fetch(
                        client, "POST", self._url(), limit=self.max_response_bytes, json=body, headers=self._headers()),
                        self.deadline)
                    return self._parse(response)
                except _deadline.ResponseTooLarge as exc:  # the same request would get the same flood: no retry
                    raise ChatModelError(f"{self.name} failed: {exc}") from None
                except TimeoutError as exc:  # the deadline, not httpx's per-read timeout
                    error = ChatModelError(f"{self.name} timed out: no complete answer within the deadline of "
                                           f"{self.deadline:g} s per request", retryable=True)
                    error.__cause__ = exc
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    error = self._transport_error(exc)
                except httpx.DecodingError as exc:  # a body that is not the encoding it claims (gzip, ...)
                    error = ChatModelError(f"{self.name} sent a malformed response (DecodingError): "
                                           f"{self._shown(str(exc))}", retryable=True)
                except ChatModelError as exc:
                    error = exc
                await asyncio.sleep(self._next_delay(error, attempt))
        raise AssertionError("unreachable")

    def _next_delay(self, error: ChatModelError, attempt: int) -> float:
        """Seconds to wait before the next try; raises ``error`` when it is final."""
        if not error.retryable or attempt == self.max_retries:
            raise error
        delay = _retry.backoff_delay(attempt, self.backoff, self.max_backoff, getattr(error, "retry_after", None))
        logger.warning("%s: %s; retry %d/%d in %.2f s", self.name, error, attempt + 1, self.max_retries, delay)
        return delay

    # -- response ------------------------------------------------------------------
    def _transport_error(self, exc: Exception) -> ChatModelError:
        import httpx

        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
        said = f"{type(exc).__name__}: {self._shown(str(exc))}"
        error = ChatModelError(f"{self.name} {kind} after {self.timeout:g} s: {said}" if kind == "timed out"
                               else f"{self.name} {kind}: {said}", retryable=True)
        error.__cause__ = exc
        return error

    def _shown(self, text: str) -> str:
        """What a server said, fit to show: some echo the request's headers, the key among them."""
        return _secrets.redact(text, self._secrets)

    def _parse(self, response: Any) -> ChatResponse:
        status = response.status_code
        if status >= 300:  # a redirect is not followed: the key goes to base_url's host only
            detail = _retry.redirect(response.headers, status) or f": {self._shown(response.text)[:300].strip()}"
            error = ChatModelError(f"{self.name} answered HTTP {status}{self._shown(detail)}",
                                   retryable=status in _retry.RETRY_STATUS, status=status)
            error.retry_after = _retry.retry_after(response.headers.get("retry-after"))  # type: ignore[attr-defined]
            raise error
        try:  # any body not shaped as a completion (a null choice, a bare-string message) is malformed
            data = response.json()
            choice = data["choices"][0]
            message = choice.get("message") or {}
            refusal = message.get("refusal")
            text = message.get("content")
            if isinstance(text, list):  # content parts
                text = "".join(p.get("text") or "" for p in text if isinstance(p, dict))
            finish = choice.get("finish_reason") or "stop"
            usage = dict(data.get("usage") or {})
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:  # nested too deep
            raise ChatModelError(f"{self.name} sent a malformed response ({type(exc).__name__}): "
                                 f"{self._shown(response.text)[:200]!r}", retryable=True) from exc
        if refusal:
            return ChatResponse(text=str(refusal), finish_reason="refusal", model=data.get("model"))
        if text is not None and not isinstance(text, str):
            raise ChatModelError(f"{self.name} sent non-text content: {type(text).__name__}", retryable=True)
        return ChatResponse(text=text or "", finish_reason=str(finish), model=data.get("model"), usage=usage)

