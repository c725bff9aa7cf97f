"""Any sentence-transformers model (name or local path), loaded offline, and cross-encoder rerankers.

Importing sentence-transformers costs seconds, so this path is for models the
ONNX exporter does not cover, and for rerankers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..errors import EmbeddingError
from .base import empty, l2_normalize
from .local import model_key, resolve_model_dir


def _offline() -> None:
    """Nothing may download at run time: make the Hugging Face libraries say so instead."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _local_path(model: str, what: str) -> str:
    path = resolve_model_dir(model)
    if path is None:
        raise EmbeddingError(
            f"{what} {model!r} is not available offline: give a local directory, or put the model in the "
            "Hugging Face cache (HF_HOME) beforehand; fullrecall never downloads at run time"
        )
    return str(path)


class SentenceTransformerEmbedder:
    """A ``sentence_transformers.SentenceTransformer`` on CPU; vectors L2-normalized."""

    def __init__(self, model: str, *, batch_size: int = 32, device: str = "cpu") -> None:
        _offline()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbeddingError(
                f"embedding model {model!r} needs sentence-transformers: pip install 'fullrecall[local]'"
            ) from exc
        self._model = SentenceTransformer(_local_path(model, "embedding model"), device=device, local_files_only=True)
        self.name = model_key(model)
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dimension = int(get_dim() or 0)
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return empty(self.dimension)
        vectors = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return l2_normalize(vectors)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.name!r}, dimension={self.dimension})"


class CrossEncoderReranker:
    """Scores (query, text) pairs with a ``sentence_transformers.CrossEncoder``; higher is more relevant.

    Scores are the model's raw logits (no sigmoid), which is what ``min_score``
    (default -2.0) is calibrated on.
    """

    def __init__(self, model: str, *, batch_size: int = 32, device: str = "cpu", max_length: int | None = 512) -> None:
        _offline()
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:  # pragma: no cover
            raise EmbeddingError(f"reranker {model!r} needs sentence-transformers: pip install 'fullrecall[local]'") from exc
        self._model = CrossEncoder(_local_path(model, "reranker"), device=device, max_length=max_length, local_files_only=True)
        self.name = model_key(model)
        self.batch_size = batch_size

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros(0, dtype=np.float32)
        import torch

        scores = self._model.predict(
            [(query, t) for t in texts],
            batch_size=self.batch_size,
            activation_fn=torch.nn.Identity(),
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        scores = np.asarray(scores, dtype=np.float32)
        return scores.reshape(len(texts), -1)[:, -1] if scores.ndim > 1 else scores

    def __repr__(self) -> str:
        return f"CrossEncoderReranker({self.name!r})"


def load_reranker(model: str | None) -> CrossEncoderReranker | None:
    """A cross-encoder by name or local path; ``None`` means no reranking."""
    return CrossEncoderReranker(model) if model else None
