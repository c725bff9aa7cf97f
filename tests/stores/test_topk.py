"""The pruned lexical plan finds exactly what ranking every matching row would find."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fullrecall.stores import _topk


def bm25(words: set[int], length: int, idf: dict[int, float], mean: float) -> float:
    norm = (_topk.K1 + 1) / (1 + _topk.K1 * (1 - _topk.B + _topk.B * length / mean))
    return sum(idf[w] for w in words if w in idf) * norm


class Corpus:
    """Rows as (word set, length); answers the plan's boolean queries like the SQL does."""

    def __init__(self, rows: list[tuple[set[int], int]], rare: list[int], common_idf: dict[int, float]) -> None:
        self.rows, self.rare, self.common_idf = rows, rare, common_idf
        self.queries: list[tuple[list[tuple[int, ...]], list[tuple[int, ...]], bool]] = []

    def matching(self, sets: list[tuple[int, ...]], exclude: list[tuple[int, ...]]) -> list[int]:
        def hit(words: set[int], ands: list[tuple[int, ...]]) -> bool:
            return any(set(s) <= words for s in ands)

        return [r for r, (words, _) in enumerate(self.rows) if hit(words, sets) and not hit(words, exclude)]

    def idf(self, candidates: list[int]) -> dict[int, float]:
        """Common words weigh what the statistics say; rare ones are counted among the candidates."""
        n = len(self.rows)
        rare = {w: _topk.idf(sum(w in self.rows[r][0] for r in candidates), n) for w in self.rare}
        return {**self.common_idf, **rare}

    def mean(self) -> float:
        return max(1.0, sum(length for _, length in self.rows) / max(1, len(self.rows)))

    def ranked(self, k: int):
        def run(sets, capped, exclude):
            self.queries.append((sets, exclude, capped))
            rows = self.matching(sets, exclude)
            idf = self.idf(rows)
            hits = [(f"m{r}", r, bm25(self.rows[r][0], self.rows[r][1], idf, self.mean())) for r in rows]
            return sorted(hits, key=lambda h: (-h[2], h[1]))[:k]

        return run


@st.composite
def corpora(draw):
    n_words = draw(st.integers(1, 6))
    n_rows = draw(st.integers(0, 60))
    rows = [
        (draw(st.sets(st.integers(0, n_words - 1), max_size=n_words)), draw(st.integers(1, 30)))
        for _ in range(n_rows)
    ]
    common = draw(st.sets(st.integers(0, n_words - 1)))
    rare = [w for w in range(n_words) if w not in common]
    idf = {w: draw(st.floats(0.01, 8.0)) for w in common}
    return Corpus(rows, rare, idf), draw(st.integers(1, 12))


@given(corpora())
def test_pruned_top_k_equals_exhaustive_ranking(case):
    corpus, k = case
    got = _topk.top_k(
        k, corpus.rare, corpus.common_idf, {w: 0.5 for w in corpus.common_idf}, len(corpus.rows) or 1,
        budget=0, cap=float("inf"), ranked=corpus.ranked(k),
    )
    # The reference ranks every row holding any query word, with the same weights.
    idf = corpus.idf(corpus.matching(corpus.queries[0][0], []))
    everything = [r for r, (words, _) in enumerate(corpus.rows) if words]
    expected = sorted(
        ((f"m{r}", r, bm25(corpus.rows[r][0], corpus.rows[r][1], idf, corpus.mean())) for r in everything),
        key=lambda h: (-h[2], h[1]),
    )
    expected = [h for h in expected if h[2] > 0][:k]
    assert [h[0] for h in got if h[2] > 0] == [h[0] for h in expected]


def test_common_words_are_fetched_only_when_they_could_win():
    # Word 0 is rare and found in 12 short rows; word 1 is common and weighs little.
    rows = [({0}, 3)] * 12 + [({1}, 20)] * 40
    corpus = Corpus(rows, rare=[0], common_idf={1: 0.2})
    got = _topk.top_k(10, [0], {1: 0.2}, {1: 40 / 52}, 52, budget=5, cap=1e9, ranked=corpus.ranked(10))
    assert [h[0] for h in got] == [f"m{i}" for i in range(10)]
    assert len(corpus.queries) == 1  # word 1 alone cannot beat the tenth score: never fetched


def test_minimal_sets_are_minimal_and_sufficient():
    idf = {0: 3.0, 1: 2.0, 2: 1.0}
    sets = _topk.minimal_sets(idf, theta=_topk.NORM_MAX * 3.5)
    assert sets == [(0, 1), (0, 2)]  # 1+2 = 3.0 is not enough; {0,1,2} contains (0, 1)
    assert _topk.minimal_sets(idf, theta=0.0) == [(0,), (1,), (2,)]
    assert _topk.minimal_sets(idf, theta=_topk.NORM_MAX * 7) == []


def test_a_query_of_only_common_words_is_capped():
    rows = [({0, 1}, 5)] * 30
    corpus = Corpus(rows, rare=[], common_idf={0: 0.1, 1: 0.1})
    _topk.top_k(5, [], {0: 0.1, 1: 0.1}, {0: 1.0, 1: 1.0}, 30, budget=10, cap=20, ranked=corpus.ranked(5))
    assert corpus.queries[0] == ([(0, 1)], [], True)
