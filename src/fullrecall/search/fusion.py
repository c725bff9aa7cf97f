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

from collections.abc import Callable
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


def fuse(
    dense: dict[Key, float],
    lexical: dict[Key, float],
    ids: dict[Key, str],
    *,
    lexical_weight: float = LEXICAL_WEIGHT,
    neighbour_weight: float = NEIGHBOUR_WEIGHT,
    unknown_neighbours: bool = True,
) -> list[Candidate]:
    """All candidates, best first. ``ids`` maps the keys that are known to message ids.

    With ``unknown_neighbours=False`` lexical scores spread only to keys in ``ids``
    (for a caller that cannot look neighbours up).
    """
    smoothed: dict[Key, float] = {}
    for (session, pos), score in lexical.items():
        smoothed[(session, pos)] = smoothed.get((session, pos), 0.0) + score
        if neighbour_weight:
            for near in ((session, pos - 1), (session, pos + 1)):
                if near[1] >= 0 and (unknown_neighbours or near in ids):
                    smoothed[near] = smoothed.get(near, 0.0) + neighbour_weight * score
    # Divide by the best score, but never by less than LEXICAL_FLOOR: in a handful of messages BM25's IDF
    # is ~0 for every word, and scaling such noise up to 1.0 would outvote the dense signal.
    lex_scale = 1.0 / max(max(smoothed.values(), default=0.0), LEXICAL_FLOOR)
    floor, dense_scale = 0.0, 0.0
    if dense:
        best, floor = max(dense.values()), min(dense.values())
        dense_scale = 1.0 / (best - floor) if best > floor else 0.0
    w_lex, w_dense = lexical_weight, 1.0 - lexical_weight
    out: list[Candidate] = []
    for key in dense.keys() | smoothed.keys():
        cos = dense.get(key)
        d = 0.0 if cos is None else ((cos - floor) * dense_scale if dense_scale else 1.0)
        fused = w_lex * smoothed.get(key, 0.0) * lex_scale + w_dense * d
        out.append(Candidate(key, ids.get(key), cos, lexical.get(key, 0.0), fused))
    out.sort(key=lambda c: (-c.fused, c.key))
    return out


def near_best(
    ranked: list[Candidate], *, weight: float = NEAR_WEIGHT, window: int = NEAR_WINDOW, depth: int = NEAR_DEPTH
) -> list[Candidate]:
    """``ranked`` re-ranked by nearness to its ``depth`` best (best first, fused scores >= 0).

    A candidate within ``window`` positions of one of the ``depth`` best in the same
    session (itself included) gains ``weight`` x the best such score / the top score:
    the part of a conversation where the best hits sit is where the rest of the
    answer usually is (LoCoMo: recall@10 +0.02, see ``docs/search.md``).
    """
    if weight <= 0 or not ranked or depth <= 0:
        return ranked
    top = ranked[0].fused
    if top <= 0:
        return ranked
    # one (candidates x head) comparison in numpy: same session, within the window -> that head's score
    n = len(ranked)
    sessions: dict[str, int] = {}
    session = np.fromiter((sessions.setdefault(c.key[0], len(sessions)) for c in ranked), np.int64, n)
    position = np.fromiter((c.key[1] for c in ranked), np.int64, n)
    head = min(depth, n)
    fused = np.fromiter((c.fused for c in ranked[:head]), np.float64, head)
    near = (session[:, None] == session[None, :head]) & (np.abs(position[:, None] - position[None, :head]) <= window)
    best = np.where(near, fused[None, :], 0.0).max(axis=1)
    for i in np.flatnonzero(best > 0).tolist():
        c, gain = ranked[i], weight * (float(best[i]) / top)  # best <= top: no overflow for a tiny top
        c.boost += gain
        c.fused += gain
    ranked.sort(key=lambda c: (-c.fused, c.key))
    return ranked


def rrf(dense: dict[Key, float], lexical: dict[Key, float], ids: dict[Key, str], *, k: int = 60) -> list[Candidate]:
    """Plain reciprocal rank fusion, kept as the baseline the benchmark compares against."""
    scores: dict[Key, float] = {}
    for ranking in (dense, lexical):
        for rank, key in enumerate(sorted(ranking, key=lambda key: -ranking[key])):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank + 1)
    out = [Candidate(key=key, id=ids.get(key), dense=dense.get(key), lexical=lexical.get(key, 0.0), fused=s) for key, s in scores.items()]
    out.sort(key=lambda c: (-c.fused, c.key))
    return out


def spread_out(
    ranked: list[Candidate], k: int, spread: int, resolve: Callable[[Candidate], bool] | None = None
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
