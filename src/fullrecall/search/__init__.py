"""Hybrid semantic search over verbatim messages: dense cosine + stemmed BM25, fused, optionally reranked."""

from __future__ import annotations

from .fusion import LEXICAL_WEIGHT, NEIGHBOUR_WEIGHT
from .semantic import DEFAULT_MIN_SCORE, DEFAULT_TOP_K, SearchHit, SemanticSearch
from .terms import STOPWORDS, index_text, query_terms

__all__ = [
    "DEFAULT_MIN_SCORE",
    "DEFAULT_TOP_K",
    "LEXICAL_WEIGHT",
    "NEIGHBOUR_WEIGHT",
    "STOPWORDS",
    "SearchHit",
    "SemanticSearch",
    "index_text",
    "query_terms",
]
