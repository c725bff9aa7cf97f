"""Okapi BM25 in process, for a backend without a text index (Redis): tokenizer, per-session inverted
index (extended as messages are added) and the search over several sessions with shared statistics.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._vectors import Owner, filter_mask
from .base import Filters, Hit

WORD = re.compile(r"\w+", re.UNICODE)

LexicalRow = tuple[str, str, str, str, float, list[str], int | None]
"""(id, key, role, kind, created_at, tokens, position) of one message."""


class Tokenizer:
    """Lower-cased word tokens, Snowball-stemmed when PyStemmer is installed (like FTS5's porter)."""

    def __init__(self) -> None:
        try:
            import Stemmer

            self._stem = Stemmer.Stemmer("english").stemWords
        except ImportError:  # plain words still match exactly
            self._stem = lambda words: words

    def __call__(self, text: str) -> list[str]:
        return self._stem(WORD.findall(text.lower()))


@dataclass
class LexicalIndex:
    """An inverted index of one session's messages, for BM25 in process (Redis without a search module)."""

    ids: list[str]
    keys: list[str]  # store-global message keys, parallel to ids
    roles: np.ndarray
    kinds: np.ndarray
    created: np.ndarray
    lengths: np.ndarray  # tokens per message
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # term -> (row numbers, term frequencies)
    owner: Owner | None = None  # the session's (user_id, agent_id, session_id)
    positions: list[int | None] | None = None  # each message's position, parallel to ids

    @classmethod
    def build(cls, rows: Sequence[LexicalRow], owner: Owner | None = None) -> LexicalIndex:
        """``rows``: (id, key, role, kind, created_at, tokens, position) of one session's messages."""
        counts: dict[str, dict[int, int]] = {}
        for n, (_, _, _, _, _, tokens, _) in enumerate(rows):
            for t in tokens:
                doc = counts.setdefault(t, {})
                doc[n] = doc.get(n, 0) + 1
        postings = {
            t: (np.fromiter(d.keys(), np.int64, len(d)), np.fromiter(d.values(), np.float64, len(d)))
            for t, d in counts.items()
        }
        return cls(
            [r[0] for r in rows],
            [r[1] for r in rows],
            np.array([r[2] for r in rows], dtype=object),
            np.array([r[3] for r in rows], dtype=object),
            np.array([r[4] for r in rows], dtype=np.float64),
            np.array([len(r[5]) for r in rows], dtype=np.float64),
            postings,
            owner,
            [r[6] for r in rows],
        )

    def extend(self, other: LexicalIndex) -> LexicalIndex:
        """This index plus ``other``'s rows (messages added since it was built); neither is changed."""
        if not other.ids:
            return self
        offset = len(self.ids)
        postings = dict(self.postings)
        for term, (rows, tf) in other.postings.items():
            held = postings.get(term)
            postings[term] = (rows + offset, tf) if held is None else (
                np.concatenate([held[0], rows + offset]), np.concatenate([held[1], tf]))
        return LexicalIndex(
            self.ids + other.ids,
            self.keys + other.keys,
            np.concatenate([self.roles, other.roles]),
            np.concatenate([self.kinds, other.kinds]),
            np.concatenate([self.created, other.created]),
            np.concatenate([self.lengths, other.lengths]),
            postings,
            self.owner,
            (self.positions or [None] * len(self.ids)) + (other.positions or [None] * len(other.ids)),
        )


def bm25_search(
    indexes: Sequence[LexicalIndex],
    terms: Sequence[str],
    k: int,
    filters: Filters | None,
    k1: float = 1.2,
    b: float = 0.75,
) -> list[Hit]:
    """Okapi BM25 (OR of ``terms``, already tokenised) over several sessions with shared statistics."""
    n_docs = sum(len(ix.ids) for ix in indexes)
    if n_docs == 0 or not terms or k == 0:
        return []
    avg = float(sum(ix.lengths.sum() for ix in indexes)) / n_docs or 1.0
    terms = list(dict.fromkeys(terms))
    df = {t: sum(len(ix.postings[t][0]) for ix in indexes if t in ix.postings) for t in terms}
    hits: list[tuple[float, str, str, Owner | None, int | None]] = []
    for ix in indexes:
        scores = np.zeros(len(ix.ids))
        for t in terms:
            if t not in ix.postings:
                continue
            rows, tf = ix.postings[t]
            idf = math.log(1.0 + (n_docs - df[t] + 0.5) / (df[t] + 0.5))
            scores[rows] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * ix.lengths[rows] / avg))
        mask = filter_mask(filters, ix.ids, ix.roles, ix.kinds, ix.created)
        if mask is not None:
            scores[~mask] = 0.0
        found = np.flatnonzero(scores > 0)
        if len(found) > k:  # the k best and every row tied with the k-th: ties are broken by key below
            kth = np.partition(scores[found], len(found) - k)[len(found) - k]
            found = found[scores[found] >= kth]
        positions = ix.positions or [None] * len(ix.ids)
        hits += [(float(scores[i]), ix.ids[i], ix.keys[i], ix.owner, positions[i]) for i in found.tolist()]
    hits.sort(key=lambda h: (-h[0], h[2]))
    return [Hit(i, s, key, owner, position) for s, i, key, owner, position in hits[:k]]
