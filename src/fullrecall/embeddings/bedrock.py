"""Amazon Bedrock embeddings (Titan v1/v2, Cohere English v3) through boto3's ``invoke_model``.

Titan embeds one text a request, so batches go out on a small thread pool;
Cohere takes up to 96 texts a request and distinguishes documents from queries.
``timeout`` bounds each wait, ``deadline`` a whole request (default twice ``timeout``, or
``FULLRECALL_LLM_DEADLINE``), as the chat models' do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .. import _deadline
from .._secrets import aws_shown
from ..errors import EmbeddingError
from .base import batched, empty, l2_normalize, remote_vectors

TITAN_V1 = "amazon.titan-embed-text-v1"
TITAN_V2 = "amazon.titan-embed-text-v2:0"
COHERE_EN_V3 = "cohere.embed-english-v3"
MODELS = {TITAN_V1: 1536, TITAN_V2: 1024, COHERE_EN_V3: 1024}
TITAN_V2_DIMENSIONS = (256, 512, 1024)
COHERE_BATCH = 96


class BedrockEmbedder:
    """``bedrock:<model id>``; ``client`` may be given (tests pass a Stubber-wrapped one).

    The client made here bounds each wait by ``timeout`` and each whole request by ``deadline`` (default
    twice ``timeout``), so a server that trickles bytes cannot hold an embedding forever; a ``client``
    given keeps its own configuration.
    """

    def __init__(
        self,
        model_id: str,
        *,
        aws_region: str | None = None,
        embedding_dimensions: int | None = None,
        client: Any = None,
        max_workers: int = 8,
        timeout: float = 60.0,
        deadline: float | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        if model_id not in MODELS:
            raise ValueError(f"unsupported Bedrock embedding model {model_id!r}; supported: {sorted(MODELS)}")
        if embedding_dimensions is not None:
            if model_id != TITAN_V2:
                if embedding_dimensions != MODELS[model_id]:
                    raise ValueError(f"{model_id} has a fixed dimension of {MODELS[model_id]}")
            elif embedding_dimensions not in TITAN_V2_DIMENSIONS:
                raise ValueError(f"{TITAN_V2} supports dimensions {TITAN_V2_DIMENSIONS}, not {embedding_dimensions}")
        self.model_id = model_id
        self.dimension = int(embedding_dimensions or MODELS[model_id])
        self.name = f"bedrock:{model_id}" + (f"@{self.dimension}" if model_id == TITAN_V2 else "")
        self.max_workers = max_workers
        self.timeout = timeout
        self.deadline = _deadline.from_env(deadline, timeout)
        self.max_response_bytes = _deadline.max_bytes(max_response_bytes)
        if client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError as exc:  # pragma: no cover
                raise EmbeddingError("Bedrock embeddings need boto3: pip install 'fullrecall[bedrock]'") from exc
            config = Config(read_timeout=timeout, connect_timeout=min(timeout, 10.0))
            region = aws_region or os.environ.get("AWS_REGION")  # as the docs say (botocore reads AWS_DEFAULT_REGION)
            client = boto3.client("bedrock-runtime", region_name=region, config=config)
            _deadline.attach(client, "InvokeModel", timeout=timeout, deadline=self.deadline,
                             limit=self.max_response_bytes)
        self._client = client

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(list(texts), "search_document")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Cohere embeds questions differently from documents; Titan does not."""
        return self._embed(list(texts), "search_query")

    def _embed(self, texts: list[str], input_type: str) -> np.ndarray:
        if not texts:
            return empty(self.dimension)
        if self.model_id == COHERE_EN_V3:
            return l2_normalize(np.concatenate([self._cohere(chunk, input_type)
                                                for chunk in batched(texts, COHERE_BATCH)]))
        if len(texts) == 1 or self.max_workers <= 1:
            rows: list[list[float]] = [self._titan(t) for t in texts]
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(texts))) as pool:
                rows = list(pool.map(self._titan, texts))
        return l2_normalize(remote_vectors(self.name, rows, len(texts), self.dimension))

    def _cohere(self, texts: Sequence[str], input_type: str) -> np.ndarray:
        """One request's vectors, checked for its own texts (batches adding up to the right count may still
        have given one text's vector to another).
        """
        answer = self._invoke({"texts": list(texts), "input_type": input_type, "truncate": "END"})
        return remote_vectors(self.name, self._field(answer, "embeddings"), len(texts), self.dimension)

    def _titan(self, text: str) -> list[float]:
        body: dict[str, Any] = {"inputText": text}
        if self.model_id == TITAN_V2:
            body.update(dimensions=self.dimension, normalize=True)
        return self._field(self._invoke(body), "embedding")

    def _field(self, answer: Any, key: str) -> Any:
        """``answer[key]``, a list, or an EmbeddingError naming the answer's keys."""
        value = answer.get(key) if isinstance(answer, dict) else None
        if not isinstance(value, list):
            got = sorted(answer)[:10] if isinstance(answer, dict) else type(answer).__name__
            raise EmbeddingError(f"Bedrock {self.model_id} answered without a list in {key!r} (got {got})")
        return value

    def _invoke(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._client.invoke_model(
                modelId=self.model_id, body=json.dumps(body), contentType="application/json", accept="application/json"
            )
            raw = response["body"].read()
        except Exception as exc:  # botocore raises many kinds; keep the cause
            response = getattr(exc, "response", None)  # a ClientError's parsed answer (None on other errors)
            code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
            raise EmbeddingError(f"Bedrock {self.model_id} embedding request failed: {aws_shown(self._client, str(exc))}",
                                 rejected=code == "ValidationException") from exc
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # (nested too deep)
            raise EmbeddingError(f"Bedrock {self.model_id} answered with a body that is not JSON: {raw[:300]!r}") from None

    def __repr__(self) -> str:
        return f"BedrockEmbedder({self.name!r}, dimension={self.dimension})"
