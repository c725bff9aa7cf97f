"""Amazon Bedrock's Converse API through boto3.

Model id e.g. ``us.amazon.nova-lite-v1:0``; region from the argument,
``FULLRECALL_BEDROCK_REGION``, ``AWS_REGION`` or boto3's own configuration.
Credentials come from boto3's usual chain (environment, profile, role).
``timeout`` bounds each wait, ``deadline`` a whole request (default twice ``timeout``, or
``FULLRECALL_LLM_DEADLINE`` through :meth:`BedrockChatModel.from_env`), as :class:`OpenAIChatModel`'s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from ... import _deadline, _retry
from ..._retry import backoff_delay
from ..._secrets import aws_shown
from .base import ChatModelError, ChatRequest, ChatResponse

logger = logging.getLogger("fullrecall.summarizers")

DEFAULT_MODEL_ID = "us.amazon.nova-lite-v1:0"
_RETRY_CODES = {"ThrottlingException", "ModelTimeoutException", "ServiceUnavailableException",
                "InternalServerException", "ModelNotReadyException", "TooManyRequestsException"}
_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
         "guardrail_intervened": "content_filter", "content_filtered": "content_filter"}


class BedrockChatModel:
    """Converse client; retries throttling, timeouts, 5xx-like errors and malformed answers with backoff.

    An answer without a message (or whose content is not a list of blocks) is
    malformed and retried like a transport failure, as :class:`OpenAIChatModel`
    does; the summarizer then judges it as a bad answer worth asking again for.

    Pass ``client`` (a ``bedrock-runtime`` client) to reuse one or to stub it in
    tests; otherwise one is made with botocore's own retries off, so this class
    alone decides when to try again. That client bounds each wait by ``timeout``
    and each whole request by ``deadline`` (default twice ``timeout``), so a
    server that trickles bytes cannot stall a summarizer: past it the try counts
    as a timeout and is retried. A ``client`` given keeps its own configuration.
    """

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL_ID,
        *,
        region: str | None = None,
        client: Any = None,
        timeout: float = 60.0,
        deadline: float | None = None,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_response_bytes: int | None = None,
    ) -> None:
        self.model_id = model_id
        self.region = region or os.environ.get("FULLRECALL_BEDROCK_REGION") or os.environ.get("AWS_REGION")
        self.timeout = timeout
        self.deadline = _deadline.resolve(deadline, timeout)
        self.max_response_bytes = _deadline.max_bytes(max_response_bytes)
        self.max_retries, self.backoff, self.max_backoff = _retry.checked(max_retries, backoff, max_backoff)
        self._client = client
        self.name = f"bedrock:{model_id}"

    @classmethod
    def from_env(cls, **overrides: Any) -> BedrockChatModel:
        model_id = overrides.pop("model_id", None) or os.environ.get("FULLRECALL_BEDROCK_MODEL_ID") or DEFAULT_MODEL_ID
        if os.environ.get(_deadline.ENV):
            overrides.setdefault("deadline", os.environ[_deadline.ENV])
        return cls(model_id, **overrides)

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(read_timeout=self.timeout, connect_timeout=min(self.timeout, 10.0),
                            retries={"total_max_attempts": 1, "mode": "standard"})  # one request a try
            self._client = boto3.client("bedrock-runtime", region_name=self.region, config=config)
            _deadline.attach(self._client, "Converse", timeout=self.timeout, deadline=self.deadline,
                             limit=self.max_response_bytes)
        return self._client

    def complete(self, request: ChatRequest) -> ChatResponse:
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.parsers import ResponseParserError

        kwargs: dict[str, Any] = {
            "modelId": self.model_id,
            "messages": [{"role": m["role"], "content": [{"text": m["content"]}]} for m in request.messages],
            "inferenceConfig": {"maxTokens": request.max_tokens, "temperature": request.temperature},
        }
        if request.system:
            kwargs["system"] = [{"text": request.system}]
        for attempt in range(self.max_retries + 1):
            try:
                return self._parse(self.client.converse(**kwargs))
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "ClientError")
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                message = aws_shown(self._client, str(exc.response.get("Error", {}).get("Message", "")))
                error = ChatModelError(f"{self.name} failed: {code}: {message}",
                                       retryable=code in _RETRY_CODES or (status or 0) >= 500, status=status)
                error.__cause__ = exc
            except BotoCoreError as exc:  # read timeouts, connection errors
                error = ChatModelError(f"{self.name} failed: {type(exc).__name__}: {aws_shown(self._client, str(exc))}",
                                       retryable=True)
                error.__cause__ = exc
            except (ResponseParserError, RecursionError) as exc:  # a body botocore cannot read (no member, too deep)
                error = ChatModelError(f"{self.name} sent a malformed response: {exc}", retryable=True)
                error.__cause__ = exc
            except ChatModelError as exc:  # a malformed answer
                error = exc
            except _deadline.ResponseTooLarge as exc:  # the same request would get the same flood: no retry
                raise ChatModelError(f"{self.name} failed: {exc}") from None
            if not error.retryable or attempt == self.max_retries:
                raise error
            delay = backoff_delay(attempt, self.backoff, self.max_backoff)
            logger.warning("%s; retry %d/%d in %.2f s", error, attempt + 1, self.max_retries, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        return await asyncio.to_thread(self.complete, request)

    def _parse(self, response: dict[str, Any]) -> ChatResponse:
        try:
            blocks = response["output"]["message"]["content"]
            if not isinstance(blocks, list):
                raise TypeError(f"content is {type(blocks).__name__}, not a list of blocks")
        except (KeyError, TypeError) as exc:
            shown = {k: v for k, v in response.items() if k != "ResponseMetadata"} if isinstance(response, dict) \
                else response
            raise ChatModelError(f"{self.name} sent a malformed response (no message; {type(exc).__name__}: "
                                 f"{exc}): {str(shown)[:200]}", retryable=True) from exc
        text = "".join(b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str))
        stop = str(response.get("stopReason") or "end_turn")
        return ChatResponse(text=text, finish_reason=_STOP.get(stop, stop), model=self.model_id,
                            usage=dict(response.get("usage") or {}))
