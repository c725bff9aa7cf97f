"""Fusing dense and lexical candidates into one ranking (pure functions, no I/O).

Measured on the LoCoMo development conversations (``docs/search.md``):
reciprocal rank fusion throws away how far apart the scores are; a weighted
sum of normalised scores does better, and spreading each lexical score to the
neighbouring turns (a reply often answers the words of the turn before it)
does better still.

* dense: ``(cos - floor) / (best - floor)``, clipped at 0, where ``floor`` is the
  worst cosine among the dense candidates: 1 for the best, 0 at the cut-off.
* lexical: BM25 plus ``neighbour_weight`` x the BM25 of the turns just before and
  after (same session), divided by the best such score (at least ``LEXICAL_FLOOR``): in [0, 1].
* fused: ``lexical_weight * lexical + (1 - lexical_weight) * dense``, in [0, 1].
* near the best (:func:`near_best`): a conversation stays on a topic for a while, so a
  candidate within ``NEAR_WINDOW`` positions of one of the ``NEAR_DEPTH`` best (same
  session) gains ``NEAR_WEIGHT`` x that hit's score relative to the best's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

Key = tuple[str, int]  # (session id, position)

LEXICAL_WEIGHT = 0.6
NEIGHBOUR_WEIGHT = 0.3
LEXICAL_FLOOR = 1.0  # BM25 units; one match of a word found in 1 of 100 messages scores ~4
NEAR_WEIGHT = 0.2
NEAR_WINDOW = 30  # positions: about one LoCoMo session (20-30 turns) either side
NEAR_DEPTH = 10


@dataclass(slots=True)
class Candidate:
    key: Key
    id: str | None  # None: a neighbour of a lexical hit not fetched yet
    dense: float | None = None  # cosine similarity, when among the dense candidates
    lexical: float = 0.0  # BM25 of the message itself
    fused: float = 0.0
    boost: float = 0.0  # added by query facets (speaker, date) and nearness to the best, already in ``fused``


class Ranking:
    """Fused candidates, best first: one row each in numpy arrays, and a :class:`Candidate` made only for the
    rows a caller reaches (a search reads the first few of a few hundred).

    A row's key is ``(owners[session], position)``; ``owners`` is sorted, so ties go to the lower key. Boosts
    (:meth:`add`) come before the first candidate is read. ``codes``, when given, are the rows' keys as integers
    (``session << _SHIFT | position``), ascending: the rows are in key order (:func:`fuse`'s are).
    """

    def __init__(self, owners: Sequence[str], session: np.ndarray, position: np.ndarray, ids: Sequence[str | None],
                 fused: np.ndarray, dense: np.ndarray | None = None, lexical: np.ndarray | None = None,
                 codes: np.ndarray | None = None) -> None:
        n = len(ids)
        self.codes = codes
        self.owners = list(owners)
        self.session = session
        self.position = position
        self.ids = list(ids)
        self.fused = np.asarray(fused, dtype=np.float64)
        self.boost = np.zeros(n)
        self.dense = np.full(n, np.nan) if dense is None else dense  # NaN: not a dense candidate
        self.lexical = np.zeros(n) if lexical is None else lexical
        self._order: np.ndarray | None = None
        self._made: list[Candidate] = []

    @classmethod
    def of(cls, keys: Sequence[Key], ids: Sequence[str | None], fused: np.ndarray,
           dense: np.ndarray | None = None, lexical: np.ndarray | None = None) -> Ranking:
        """A ranking of candidates given by key."""
        owners = sorted({key[0] for key in keys})
        rank = {owner: i for i, owner in enumerate(owners)}
        session = np.fromiter((rank[key[0]] for key in keys), np.int64, len(keys))
        position = np.fromiter((key[1] for key in keys), np.int64, len(keys))
        return cls(owners, session, position, ids, fused, dense, lexical)

    def __len__(self) -> int:
        return len(self.ids)

    def order(self) -> np.ndarray:
        """Row numbers, best first."""
        if self._order is None:
            self._order = np.lexsort((self.position, self.session, -self.fused))
        return self._order

    def head(self, n: int) -> list[int]:
        """The rows of the ``n`` best."""
        return self.order()[:n].tolist()

    def add(self, rows: Sequence[int] | np.ndarray, gains: Sequence[float] | np.ndarray) -> None:
        """Add ``gains`` to these (distinct) rows' fused scores and boosts."""
        if self._made:
            raise RuntimeError("boosts come before the candidates are read")
        rows, gains = np.asarray(rows, dtype=np.int64), np.asarray(gains, dtype=np.float64)
        self.boost[rows] += gains
        self.fused[rows] += gains
        self._order = None

    def __iter__(self) -> Iterator[Candidate]:
        """The candidates, best first; the same objects each time (a caller may fill in an ``id``)."""
        for i in range(len(self.ids)):
            yield self[i]

    def __getitem__(self, i: int) -> Candidate:
        made = self._made
        if len(made) <= i:  # the next rows, 16 or more at a time (their values read as arrays, not one by one)
            rows = self.order()[len(made):max(i + 1, 2 * len(made), 16)]
            owners, ids = self.owners, self.ids
            for r, session, position, cos, lexical, fused, boost in zip(
                rows.tolist(), self.session[rows].tolist(), self.position[rows].tolist(), self.dense[rows].tolist(),
                self.lexical[rows].tolist(), self.fused[rows].tolist(), self.boost[rows].tolist(),
            ):
                made.append(Candidate((owners[session], position), ids[r], None if cos != cos else cos, lexical,
                                      fused, boost))
        return made[i]


FLAT = 1e-12  # dense candidates whose cosines differ by less are all equally good (never a scale of 1 / 1e-311)
_SHIFT = 40  # a key as one integer: its owner's rank << _SHIFT | its position
_LOW = (1 << _SHIFT) - 1


@dataclass(frozen=True, slots=True)
class Spread:
    """The lexical side of :func:`fuse`, which needs no dense candidate (a search makes it beside the embedding).

    Keys are integers, ``rank << _SHIFT | position``, ``rank`` being the owner's place in ``owners`` (sorted).
    ``keys``: every key a lexical score reached (the hits and their neighbours), sorted, with ``smoothed`` its
    sum; ``hits``: the lexical hits' own keys with ``score`` their BM25 and ``ids`` their message ids (when given).
    """

    owners: list[str]
    keys: np.ndarray
    smoothed: np.ndarray
    hits: np.ndarray
    score: np.ndarray
    ids: np.ndarray | None = None


def _codes(keys: Iterable[Key], rank: dict[str, int], n: int) -> np.ndarray:
    return np.fromiter(((rank[owner] << _SHIFT) | pos for owner, pos in keys), np.int64, n)


def spread_lexical(
    lexical: dict[Key, float], *, neighbour_weight: float = NEIGHBOUR_WEIGHT, known: Iterable[Key] | None = None,
    ids: Iterable[str] | None = None,
) -> Spread:
    """Each lexical score on its key, plus ``neighbour_weight`` x it on the keys just before and after; with
    ``known``, only on the neighbours among those keys. ``ids``: the message ids of ``lexical``'s keys, in order.
    """
    owners = sorted({key[0] for key in lexical})
    rank = {owner: i for i, owner in enumerate(owners)}
    lex = _codes(lexical, rank, len(lexical))
    score = np.fromiter(lexical.values(), np.float64, len(lexical))
    at, add = lex, score  # lexical scores spread to keys, in the order a loop over the hits would add them
    if neighbour_weight and len(lex):
        before, after = lex - 1, lex + 1
        keep = np.ones((len(lex), 3), dtype=bool)
        keep[:, 1] = lex & _LOW > 0  # no position -1
        if known is not None:
            known = [key for key in known if key[0] in rank]
            named = _codes(known, rank, len(known))
            keep[:, 1] &= np.isin(before, named)
            keep[:, 2] = np.isin(after, named)
        spread = neighbour_weight * score
        at = np.stack([lex, before, after], axis=1)[keep]
        add = np.stack([score, spread, spread], axis=1)[keep]
    keys, where = np.unique(at, return_inverse=True)
    smoothed = np.zeros(len(keys))
    np.add.at(smoothed, where, add)  # in order: each sum exactly as a plain loop adds it
    return Spread(owners, keys, smoothed, lex, score, None if ids is None else np.fromiter(ids, object, len(lex)))


def fuse(
    dense: dict[Key, float],
    lexical: dict[Key, float] | Spread,
    ids: dict[Key, str],
    *,
    lexical_weight: float = LEXICAL_WEIGHT,
    neighbour_weight: float = NEIGHBOUR_WEIGHT,
    unknown_neighbours: bool = True,
) -> Ranking:
    """All candidates, best first. ``ids`` maps the keys that are known to message ids.

    ``lexical`` is the lexical hits' scores, or their :func:`spread_lexical` (then ``neighbour_weight`` and
    ``unknown_neighbours`` are those it was made with, and the ids it carries are known too, before ``ids``).
    With ``unknown_neighbours=False`` lexical scores spread only to keys in ``ids`` (for a caller that cannot
    look neighbours up).
    """
    if not isinstance(lexical, Spread):
        lexical = spread_lexical(lexical, neighbour_weight=neighbour_weight,
                                 known=None if unknown_neighbours else ids)
    owners = lexical.owners
    more = {key[0] for key in dense}
    more.update(key[0] for key in ids)
    if not more.issubset(owners):
        owners = sorted(more.union(owners))
    rank = {owner: i for i, owner in enumerate(owners)}
    spread, lex = lexical.keys, lexical.hits
    if owners is not lexical.owners:  # the lexical keys with their owners' ranks among all (their order stays)
        ranks = np.fromiter((rank[owner] for owner in lexical.owners), np.int64, len(lexical.owners))
        if len(ranks):
            spread = (ranks[spread >> _SHIFT] << _SHIFT) | (spread & _LOW)
            lex = (ranks[lex >> _SHIFT] << _SHIFT) | (lex & _LOW)
    cosine = np.fromiter(dense.values(), np.float64, len(dense))
    dense_keys = _codes(dense, rank, len(dense))
    keys = np.concatenate([spread, dense_keys])
    keys.sort()
    if len(keys):  # np.unique's keys, at a fifth of its cost
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    n = len(keys)
    smoothed = np.zeros(n)
    smoothed[np.searchsorted(keys, spread)] = lexical.smoothed
    # Divide by the best score, but never by less than LEXICAL_FLOOR: in a handful of messages BM25's IDF
    # is ~0 for every word, and scaling such noise up to 1.0 would outvote the dense signal.
    lex_scale = 1.0 / max(float(smoothed.max()) if n else 0.0, LEXICAL_FLOOR)
    cos = np.full(n, np.nan)
    d = np.zeros(n)
    if len(cosine):
        rows = np.searchsorted(keys, dense_keys)
        cos[rows] = cosine
        best, floor = float(cosine.max()), float(cosine.min())
        dense_scale = 1.0 / (best - floor) if best - floor > FLAT else 0.0
        d[rows] = (cosine - floor) * dense_scale if dense_scale else 1.0
    own = np.zeros(n)
    lex_rows = np.searchsorted(keys, lex)
    own[lex_rows] = lexical.score
    named = np.full(n, None, dtype=object)
    if ids and n:
        if ids.keys() == dense.keys():  # a search's: the dense hits' ids (the lexical ones come with ``lexical``)
            named[rows] = np.fromiter((ids[key] for key in dense), object, len(dense))
        else:
            found = _codes(ids, rank, len(ids))
            at = np.searchsorted(keys, found)
            ok = keys[np.minimum(at, n - 1)] == found
            named[at[ok]] = np.fromiter(ids.values(), object, len(ids))[ok]
    if lexical.ids is not None:
        named[lex_rows] = lexical.ids
    fused = lexical_weight * smoothed * lex_scale + (1.0 - lexical_weight) * d
    return Ranking(owners, keys >> _SHIFT, keys & _LOW, named.tolist(), fused, cos, own, codes=keys)


def near_best(
    ranked: Ranking, *, weight: float = NEAR_WEIGHT, window: int = NEAR_WINDOW, depth: int = NEAR_DEPTH
) -> Ranking:
    """``ranked`` re-ranked by nearness to its ``depth`` best (best first, fused scores >= 0).

    A candidate within ``window`` positions of one of the ``depth`` best in the same
    session (itself included) gains ``weight`` x the best such score / the top score:
    the part of a conversation where the best hits sit is where the rest of the
    answer usually is (LoCoMo: recall@10 +0.02, see ``docs/search.md``).
    """
    if weight <= 0 or not len(ranked) or depth <= 0:
        return ranked
    head = ranked.order()[:depth]
    top = float(ranked.fused[head[0]])
    if top <= 0:
        return ranked
    if ranked.codes is not None:  # rows in key order: each head's neighbourhood is one slice of them
        best = _near_slices(ranked.codes, head, ranked.fused, window)
    else:  # one (candidates x head) comparison: same session, within the window -> that head's score
        session, position = ranked.session, ranked.position
        near = (session[:, None] == session[None, head]) & (np.abs(position[:, None] - position[None, head]) <= window)
        best = np.where(near, ranked.fused[None, head], 0.0).max(axis=1)
    rows = np.flatnonzero(best > 0)
    ranked.add(rows, weight * (best[rows] / top))  # best <= top: no overflow for a tiny top
    return ranked


def _near_slices(codes: np.ndarray, head: np.ndarray, fused: np.ndarray, window: int) -> np.ndarray:
    """For rows sorted by key code, the best fused score among the ``head`` rows within ``window`` positions of
    each in its session (0 where none is): the heads' slices are written from the lowest score up, so the
    highest one near a row is what it keeps. A slice's ends are whole keys (session, position - window) and
    (session, position + window): positions are far below ``1 << _SHIFT``, so a position - window below 0
    reaches no row of the session before.
    """
    head = head[np.argsort(fused[head], kind="stable")]
    at = codes[head]
    low = np.searchsorted(codes, at - window)
    high = np.searchsorted(codes, at + window, side="right")
    best = np.zeros(len(codes))
    for lo, hi, score in zip(low.tolist(), high.tolist(), fused[head].tolist()):
        best[lo:hi] = score
    return best


def rrf(dense: dict[Key, float], lexical: dict[Key, float], ids: dict[Key, str], *, k: int = 60) -> Ranking:
    """Plain reciprocal rank fusion, kept as the baseline the benchmark compares against."""
    scores: dict[Key, float] = {}
    for ranking in (dense, lexical):
        for rank, key in enumerate(sorted(ranking, key=lambda key: -ranking[key])):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank + 1)
    keys = list(scores)
    return Ranking.of(keys, [ids.get(key) for key in keys], np.array(list(scores.values()), dtype=np.float64),
                   np.array([dense.get(key, np.nan) for key in keys], dtype=np.float64),
                   np.array([lexical.get(key, 0.0) for key in keys], dtype=np.float64))


def spread_out(
    ranked: Iterable[Candidate], k: int, spread: int, resolve: Callable[[Candidate], bool] | None = None
) -> list[Candidate]:
    """The best ``k``, skipping any within ``spread`` positions of a better one in its session.

    With a context radius r, hits closer than r add little the radius does not
    already bring; ``spread=r`` spends the k hits on separate places instead.
    ``resolve`` is called on placeholders (``id is None``) as they come up; it
    fills in the id and returns False when no such message exists.
    """
    chosen: list[Candidate] = []
    taken: dict[str, list[int]] = {}
    for c in ranked:
        if len(chosen) == k:
            break
        session, pos = c.key
        if spread > 0 and any(abs(pos - p) <= spread for p in taken.get(session, ())):
            continue
        if c.id is None and (resolve is None or not resolve(c)):
            continue
        chosen.append(c)
        taken.setdefault(session, []).append(pos)
    return chosen
