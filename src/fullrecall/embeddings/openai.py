"""Any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, vLLM, Ollama, LiteLLM, TEI...) over httpx.

Configuration: ``base_url`` / ``api_key`` arguments, else the ``OPENAI_BASE_URL``
and ``OPENAI_API_KEY`` environment variables (base URL default
``https://api.openai.com/v1``). ``timeout`` bounds each wait, ``deadline`` a whole request
(default twice ``timeout``, or ``FULLRECALL_LLM_DEADLINE``), ``max_response_bytes`` the body of an answer
(default 32 MiB, or ``FULLRECALL_LLM_MAX_RESPONSE_BYTES``), as the chat models' do.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _base_url, _deadline, _retry, _secrets
from ..errors import EmbeddingError, InvalidInput
from .base import batched, empty, l2_normalize, remote_vectors

log = logging.getLogger("fullrecall.embeddings")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
REJECTED = (400, 413, 422)  # the input itself was refused (a text over the model's limit): it fails again


class OpenAIEmbedder:
    """``openai:<model>``; texts go out ``batch_size`` at a time, one request each.

    ``timeout`` bounds each wait (connecting, each read); ``deadline`` one whole request, connecting to the
    last byte (default twice ``timeout``), so a server that trickles bytes cannot hold an embedding forever.
    A request that may pass on the next try (a timeout, the deadline passed, a failed connection, HTTP
    408/409/425/429 or 5xx) is tried again up to ``max_retries`` times, after ``backoff * 2**attempt`` seconds
    or the server's ``Retry-After``, at most ``max_backoff``; a refused input (other 4xx) or a malformed answer
    fails at once.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        embedding_dimensions: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
        deadline: float | None = None,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_response_bytes: int | None = None,
    ) -> None:
        try:
            import httpx  # noqa: F401 - refused here, not at the first request
        except ImportError as exc:  # pragma: no cover
            raise EmbeddingError("OpenAI-compatible embeddings need httpx: pip install 'fullrecall[openai]'") from exc
        self.model = model
        self.base_url = _base_url.checked(base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        key = _secrets.checked_key(api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"))
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._secrets = _secrets.secrets_of(key, url=self.base_url)  # never shown in an error: some servers echo the headers
        self.timeout = timeout
        self.deadline = _deadline.from_env(deadline, timeout)
        self.max_response_bytes = _deadline.max_bytes(max_response_bytes)
        if embedding_dimensions is not None and (isinstance(embedding_dimensions, bool)
                                                 or not isinstance(embedding_dimensions, int) or embedding_dimensions < 1):
            raise InvalidInput(f"embedding_dimensions must be a whole number >= 1 or None, got {embedding_dimensions!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInput(f"batch_size must be a whole number >= 1, got {batch_size!r}")
        self._dimensions_arg = embedding_dimensions
        self._dimension = embedding_dimensions
        self.batch_size = batch_size
        self.max_retries, self.backoff, self.max_backoff = _retry.checked(max_retries, backoff, max_backoff)
        self.name = f"openai:{model}" + (f"@{embedding_dimensions}" if embedding_dimensions else "")

    @property
    def dimension(self) -> int:
        """Known from ``embedding_dimensions``, else learnt from one probe request."""
        if self._dimension is None:
            self._dimension = int(self._request(["dimension probe"]).shape[1])
        return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return empty(self.dimension)
        out = np.concatenate([self._request(list(chunk)) for chunk in batched(texts, self.batch_size)])
        return l2_normalize(out)

    def _request(self, texts: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._dimensions_arg:
            payload["dimensions"] = self._dimensions_arg
        for attempt in range(self.max_retries + 1):
            try:
                response = self._send(payload)
            except _Transient as exc:
                if attempt == self.max_retries:
                    raise exc.error from exc.__cause__
                delay = _retry.backoff_delay(attempt, self.backoff, self.max_backoff, exc.retry_after)
                log.warning("%s; retry %d/%d in %.2f s", exc.error, attempt + 1, self.max_retries, delay)
                time.sleep(delay)
                continue
            return self._vectors(response, texts)
        raise AssertionError("unreachable")

    def _send(self, payload: dict[str, Any]) -> Any:
        """The answer (HTTP 200); :class:`_Transient` when another try may pass, else an EmbeddingError."""
        try:
            response = _deadline.request("POST", f"{self.base_url}/embeddings", json=payload, headers=self._headers,
                                         timeout=self.timeout, deadline=self.deadline, limit=self.max_response_bytes)
        except _deadline.ResponseTooLarge as exc:  # the same request would get the same flood: no retry
            raise EmbeddingError(f"embedding request to {self._shown(self.base_url)} ({self.name}) failed: {exc}") from None
        except TimeoutError:
            raise _Transient(EmbeddingError(f"embedding request to {self._shown(self.base_url)} failed: no complete answer "
                                            f"within the deadline of {self.deadline:g} s per request")) from None
        except Exception as exc:
            import httpx

            error = EmbeddingError(f"embedding request to {self._shown(self.base_url)} failed: {type(exc).__name__}: "
                                   f"{self._shown(str(exc))}")
            if isinstance(exc, (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)):
                raise _Transient(error) from exc  # a timeout, a refused or reset connection, an answer cut short
            raise error from exc
        status = response.status_code
        if status != 200:
            detail = _retry.redirect(response.headers, status) or f": {self._shown(response.text)[:300]}"
            error = EmbeddingError(f"embedding request to {self._shown(self.base_url)} failed: HTTP {status}"
                                   f"{self._shown(detail)}", rejected=status in REJECTED)
            if status in _retry.RETRY_STATUS:
                raise _Transient(error, _retry.retry_after(response.headers.get("retry-after")))
            raise error
        return response

    def _vectors(self, response: Any, texts: list[str]) -> np.ndarray:
        try:
            data = sorted(response.json()["data"], key=lambda d: d["index"])
            rows = [d["embedding"] for d in data]
            indexes = [d["index"] for d in data]
        except (KeyError, TypeError, ValueError, RecursionError) as exc:  # (JSON nested too deep)
            raise EmbeddingError(f"unexpected embeddings response from {self._shown(self.base_url)}: "
                                 f"{self._shown(response.text)[:300]}") from exc
        if indexes != list(range(len(indexes))):  # a repeated or missing index: which vector is whose is unknown
            raise EmbeddingError(f"{self.name} returned embeddings with indexes {indexes[:20]} for {len(texts)} texts")
        vectors = remote_vectors(self.name, rows, len(texts), self._dimension)
        self._dimension = int(vectors.shape[1])
        return vectors

    def _shown(self, text: str) -> str:
        return _secrets.redact(text, self._secrets)

    def close(self) -> None:
        """Nothing to release: the process keeps the connections (see :func:`fullrecall._deadline.request`)."""

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.name!r}, base_url={self._shown(self.base_url)!r})"


class _Transient(Exception):
    """A failed request that may pass on the next try; ``error`` is what the caller gets when none is left."""

    def __init__(self, error: EmbeddingError, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
