"""A fact's write looks its subject's facts up in an index that follows the book's cache. Whatever the
order of writes (new facts, repeats by words, by value, by meaning, supersessions, facts told late) and
deletions, the write finds what a plain scan of the live facts finds, and the followed index answers as
one built afresh from the cache.
"""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fullrecall.memory._fact_index import FactIndex, normalize
from fullrecall.memory._values import agree
from fullrecall.memory.facts import FactMemory
from fullrecall.stores import open_store

_WORDS = ["lyon", "paris", "cats", "dogs", "tea", "Lyon", "4417", "9921"]  # with values: repeats must agree on them
_SUBJECTS = [None, "alice"]
_ATTRIBUTES = [None, "city", "pet"]


class _FirstWordEmbedder:
    """Texts whose first word is the same mean the same (cosine 1); others are far apart."""

    name = "first-word-test"
    dimension = 16

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            first = (normalize(text).split() or [""])[0]
            out[i, hashlib.sha256(first.encode()).digest()[0] % self.dimension] = 1.0
        return out


_WRITE = st.tuples(st.just("remember"), st.lists(st.sampled_from(_WORDS), min_size=1, max_size=3),
                   st.sampled_from(_SUBJECTS), st.sampled_from(_ATTRIBUTES), st.sampled_from(_WORDS),
                   st.integers(0, 5))
_FORGET = st.tuples(st.just("forget"), st.integers(0, 20), st.none(), st.none(), st.none(), st.none())


def _expected(memory: FactMemory, text: str, subject: str, attribute: str | None, value: str | None,
              vector: np.ndarray, when: float) -> str | None:
    """The id of the fact valid at ``when`` a new one repeats (agreeing on its exact values), by a plain scan of the
    live facts in order; or None.
    """
    mine = [(r, v) for r, v in memory.book.entries() if r.data.get("subject", "user") == subject]
    valid = [(r, v) for r, v in mine if r.data["valid_from"] <= when
             and (r.data.get("valid_to") is None or when < r.data["valid_to"])]
    for r, _ in valid:
        if (normalize(r.text) == normalize(text) and agree(r.text, text)
                and (not attribute or r.data.get("attribute") == attribute)) or (  # the same words: the same attribute
                attribute and r.data.get("attribute") == attribute
                and normalize(r.data.get("value") or "") == normalize(value or "")
                and agree(r.data.get("value") or "", value or "")):
            return r.id
    if attribute:
        return None
    best, best_id = -np.inf, None
    for r, v in valid:
        if r.data.get("attribute") is None and r.data.get("valid_to") is None and v is not None and agree(r.text, text):
            score = float(np.dot(v, vector))
            if score > best:
                best, best_id = score, r.id
    return best_id if best >= memory.duplicate_similarity else None


def _same_answers(a: FactIndex, b: FactIndex) -> None:
    for subject in ("user", "alice"):
        entries_a, matrix_a = a.loose(subject)
        entries_b, matrix_b = b.loose(subject)
        assert [e[0].id for e in entries_a] == [e[0].id for e in entries_b]
        assert (matrix_a is None) == (matrix_b is None)
        if matrix_a is not None and matrix_b is not None:
            assert np.array_equal(matrix_a, matrix_b)
        for when in (999.0, 1000.0, 1003.0, 1005.0):
            valid_a, stack_a = a.valid(when)
            valid_b, stack_b = b.valid(when)
            assert [e[0].id for e in valid_a] == [e[0].id for e in valid_b]
            assert (stack_a is None and stack_b is None) or np.array_equal(stack_a, stack_b)
        for attribute in ("city", "pet"):
            assert [r.id for r in a.holding(subject, attribute)] == [r.id for r in b.holding(subject, attribute)]
        for words in _WORDS + [f"{x} {y}" for x in _WORDS for y in _WORDS]:
            for attribute in (None, "city", "pet"):
                for when in (1000.0, 1003.0, 1005.0):
                    found_a = a.repeated(subject, normalize(words), attribute, normalize(words), when)
                    found_b = b.repeated(subject, normalize(words), attribute, normalize(words), when)
                    assert [r.id for r in found_a] == [r.id for r in found_b]


@settings(max_examples=100, deadline=None)
@example(steps=[("remember", ["lyon"], None, None, "tea", 0), ("remember", ["paris"], None, None, "tea", 0),
                ("remember", ["lyon", "tea"], None, None, "tea", 0)])  # a repeat by meaning: its row stays in place
@given(steps=st.lists(st.one_of(_WRITE, _FORGET), max_size=25))
def test_a_write_finds_what_a_scan_finds_and_the_index_follows(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    store = open_store("sqlite:///:memory:")
    embedder = _FirstWordEmbedder()
    memory = FactMemory(store, user_id="u", embedder=embedder)
    followed_at_all = [0]
    try:
        for op, words, subject, attribute, value, when in steps:
            if op == "forget":
                ids = [r.id for r, _ in memory.book.entries()]
                if ids:
                    memory.forget(ids[words % len(ids)])
            else:
                text = " ".join(words)
                vector = embedder.embed([text])[0]
                want = _expected(memory, text, (subject or "user"), attribute, value if attribute else None, vector,
                                 1000.0 + when)
                before = {r.id for r, _ in memory.book.entries()}
                fact = memory.remember(text, subject=subject, attribute=attribute,
                                       value=value if attribute else None, valid_from=1000.0 + when, vector=vector)
                assert fact.id == want if want is not None else fact.id not in before  # merged, or a new fact
                assert memory.get(fact.id) is not None
            followed = memory._index
            if followed is not None:  # after a write: the index it followed, not one made again
                assert followed.basis is memory.book.state(check=False)
                _same_answers(followed, FactIndex.of(followed.basis))
                followed_at_all[0] += 1
        if any(step[0] == "remember" for step in steps[1:]):
            assert followed_at_all[0]  # the index followed the writes
    finally:
        store.close()
