"""Top-k BM25 over an index that answers only boolean queries (PostgreSQL's GIN), with bounded work.

Ranking every row that matches the OR of the query words costs time in proportion to the
commonest word: at a million messages one common word matches a hundred thousand rows.
BM25 gives such a word a low weight, so most of those rows cannot reach the top k. This
is MaxScore pruning (Turtle and Flood, 1995) planned over boolean queries:

1. *Rare* words (expected to match at most ``budget`` rows) are enumerated: every row
   holding one is a candidate, and their document frequencies are counted exactly there.
2. *Common* words only score candidates, unless a set of them could lift a row above the
   k-th score found so far (``theta``) on its own: a row holding only the common words in
   ``S`` scores at most ``NORM_MAX * sum(idf(S))``. The minimal such sets are fetched as an
   OR of ANDs, which the index intersects cheaply.

Scores are BM25 with binary term frequency (a chat message rarely repeats a search word):
``sum(idf(word) for word in row) * norm(row length)``. Two approximations are left: a
candidate set expected over ``cap`` rows (a query made only of very common words) is cut
at ``cap``, and beyond ``MAX_COMMON`` common words the lowest-weighted only score.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

Hit = tuple[str, int, float]  # (message id, tie-break order, score)
# ranked(sets, capped, exclude): the top k hits among rows matching an AND in ``sets`` and
# none in ``exclude`` (at most ``cap`` rows looked at when ``capped``)
Ranked = Callable[[list[tuple[int, ...]], bool, list[tuple[int, ...]]], list[Hit]]

K1 = 1.2
B = 0.75
NORM_MAX = (K1 + 1) / (1 + K1 * (1 - B))  # the length factor of the shortest possible row
MAX_COMMON = 8  # common words that can form candidate sets (2^8 subsets at most)


def idf(df: float, n: float) -> float:
    """Okapi BM25's IDF, never negative."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def split_rare(est_df: Sequence[float | None], budget: float) -> tuple[list[int], list[int]]:
    """(rare, common) word indexes; ``None`` means not among the known frequent words: rare."""
    rare = [i for i, df in enumerate(est_df) if df is None or df <= budget]
    common = [i for i, df in enumerate(est_df) if df is not None and df > budget]
    return rare, common


def minimal_sets(idfs: dict[int, float], theta: float) -> list[tuple[int, ...]]:
    """The smallest sets of common words whose rows could score above ``theta``.

    A row holding a superset of one of them is found by that set's AND, so these are all
    the index needs to fetch. Only the ``MAX_COMMON`` highest-weighted words form sets.
    """
    words = sorted(sorted(idfs, key=lambda w: -idfs[w])[:MAX_COMMON])
    out: list[tuple[int, ...]] = []
    for size in range(1, len(words) + 1):
        for combo in itertools.combinations(words, size):
            if NORM_MAX * sum(idfs[w] for w in combo) < theta:
                continue
            if any(set(found) <= set(combo) for found in out):
                continue  # a subset already qualifies: not minimal
            out.append(combo)
    return out


def expected_rows(sets: Sequence[Sequence[int]], freq: dict[int, float], n: float) -> float:
    """Rows the OR of ANDs should match if the words occur independently (an upper-ish guess)."""
    return sum(n * math.prod(freq[w] for w in s) for s in sets)


def top_k(
    k: int,
    rare: Sequence[int],
    common_idf: dict[int, float],
    share: dict[int, float],
    n: float,
    budget: float,
    cap: float,
    ranked: Ranked,
) -> list[Hit]:
    """The plan: rare words and (when few rows hold them all) the common words together
    first, then the sets of common words that could still beat the k-th score.
    """
    common = tuple(sorted(common_idf))
    first: list[tuple[int, ...]] = [(i,) for i in rare]
    if common and (not first or expected_rows([common], share, n) <= budget):
        first.append(common)  # rows holding every common word: the best a common-only row can do
    capped = not rare and expected_rows(first, share, n) > cap
    hits = ranked(first, capped, [])
    theta = hits[-1][2] if len(hits) >= k else 0.0
    sets = [s for s in minimal_sets(common_idf, theta) if s not in first]
    if sets:
        more = ranked(sets, expected_rows(sets, share, n) > cap, first)
        seen = {h[0] for h in hits}
        hits = sorted(hits + [h for h in more if h[0] not in seen], key=lambda h: (-h[2], h[1]))
    return hits[:k]
