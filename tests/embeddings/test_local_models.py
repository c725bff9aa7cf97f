"""The default ONNX path, sentence-transformers models and cross-encoders, all loaded for real."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fullrecall.embeddings import Embedder, load_embedder, load_reranker, prepare
from fullrecall.embeddings.onnx import OnnxEmbedder, find_export
from fullrecall.errors import EmbeddingError

TEXTS = [
    "hello",
    "Caroline (8 May, 2023): I went to a LGBTQ support group yesterday and it was so powerful.",
    "The reference number for the order is REF-48213.",
    "word " * 400,  # longer than the model's 256 tokens: truncated, not an error
]


def test_default_is_onnx_int8_unit_vectors(default_embedder):
    assert isinstance(default_embedder, OnnxEmbedder)
    assert isinstance(default_embedder, Embedder)
    assert default_embedder.name == "all-MiniLM-L6-v2@int8"
    assert default_embedder.dimension == 384
    v = default_embedder.embed(TEXTS)
    assert v.dtype == np.float32 and v.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert default_embedder.embed([]).shape == (0, 384)


@pytest.mark.parametrize("variant", ["int8", "fp32"])
def test_a_vector_does_not_depend_on_its_batch(variant):
    """Archiving 75 messages at once gives each the vector it gets alone (and in input order)."""
    emb = load_embedder(variant=variant)
    texts = [f"message number {i} about topic {i % 7}" + " more" * (i % 5) for i in range(75)]
    together = emb.embed(texts)
    alone = np.stack([emb.embed([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_onnx_matches_sentence_transformers(shipped_dir):
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(str(shipped_dir), device="cpu").encode(TEXTS, normalize_embeddings=True)
    fp32 = load_embedder(variant="fp32")
    int8 = load_embedder(variant="int8")
    assert fp32.name == "all-MiniLM-L6-v2" and int8.name == "all-MiniLM-L6-v2@int8"  # never mixed in one index
    assert (fp32.embed(TEXTS) * reference).sum(1).min() > 0.9999
    assert (int8.embed(TEXTS) * reference).sum(1).min() > 0.95


def test_shipped_model_through_sentence_transformers_is_the_fp32_space(shipped_dir):
    st = load_embedder(str(shipped_dir), backend="sentence-transformers")
    fp32 = load_embedder(variant="fp32")
    assert type(st).__name__ == "SentenceTransformerEmbedder"
    assert st.name == fp32.name == "all-MiniLM-L6-v2" and st.dimension == 384  # their vectors may share an index
    assert (st.embed(TEXTS) * fp32.embed(TEXTS)).sum(1).min() > 0.9999


def test_prepare_is_idempotent_and_records_the_variant():
    directory = prepare(variant="int8")
    assert prepare(variant="int8") == directory
    meta = json.loads((find_export("all-MiniLM-L6-v2", "int8") / "meta.json").read_text())
    assert meta["variant"] == "int8" and meta["name"] == "all-MiniLM-L6-v2@int8" and meta["dimension"] == 384


def test_clear_error_without_onnx_export_or_torch(monkeypatch, tmp_path):
    import fullrecall.embeddings as emb

    monkeypatch.setenv("FULLRECALL_CACHE_DIR", str(tmp_path))  # no export there
    monkeypatch.setattr(emb, "_have", lambda *mods: "onnxruntime" in mods)  # as if torch were not installed
    with pytest.raises(EmbeddingError, match="python -m fullrecall.embeddings"):
        load_embedder()


def test_sentence_transformers_path(tiny_st_model):
    from sentence_transformers import SentenceTransformer

    emb = load_embedder(str(tiny_st_model))
    assert type(emb).__name__ == "SentenceTransformerEmbedder"
    assert emb.dimension == 32 and emb.name == "tiny-st-model"
    expected = SentenceTransformer(str(tiny_st_model), device="cpu").encode(TEXTS[:3], normalize_embeddings=True)
    assert np.allclose(emb.embed(TEXTS[:3]), expected, atol=1e-5)


def test_any_plain_model_exports_to_onnx(tiny_st_model, tmp_path, monkeypatch):
    monkeypatch.setenv("FULLRECALL_CACHE_DIR", str(tmp_path))
    st = load_embedder(str(tiny_st_model), backend="sentence-transformers")
    onnx = load_embedder(str(tiny_st_model), backend="onnx", variant="fp32")
    assert isinstance(onnx, OnnxEmbedder) and onnx.name == st.name and onnx.dimension == 32
    assert (onnx.embed(TEXTS) * st.embed(TEXTS)).sum(1).min() > 0.9999


def test_unknown_model_is_a_clear_offline_error():
    with pytest.raises(EmbeddingError, match="not available offline"):
        load_embedder("sentence-transformers/no-such-model-for-fullrecall")
    with pytest.raises(ValueError, match="backend"):
        load_embedder(backend="gpu")


def test_cross_encoder_reranker_returns_logits(tiny_cross_encoder):
    from sentence_transformers import CrossEncoder

    reranker = load_reranker(str(tiny_cross_encoder))
    docs = ["the cat sat on the mat", "quarterly revenue grew", "cats like mats"]
    scores = reranker.score("where did the cat sit?", docs)
    assert scores.shape == (3,) and scores.dtype == np.float32
    raw = CrossEncoder(str(tiny_cross_encoder), device="cpu").predict(
        [("where did the cat sit?", d) for d in docs], activation_fn=__import__("torch").nn.Identity()
    )
    assert np.allclose(scores, raw, atol=1e-5)
    assert load_reranker(None) is None
    assert reranker.score("q", []).shape == (0,)
