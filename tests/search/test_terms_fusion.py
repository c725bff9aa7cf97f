"""Query terms and the fusion arithmetic (pure functions)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fullrecall.search import index_text, query_terms
from fullrecall.search.fusion import _SHIFT, Candidate, Ranking, fuse, near_best, rrf, spread_lexical, spread_out


def test_query_terms_drop_question_words_keep_names_numbers_ids():
    terms = query_terms("When did Caroline's friend mention REF-48213, order 7 and v2.3.1 in 2023? What's that?")
    assert terms == ["caroline", "friend", "mention", "ref-48213", "order", "7", "v2.3.1", "2023"]
    assert query_terms("what did I say?") == []
    assert query_terms("don't won't isn't") == []
    assert query_terms("a b c 9") == ["9"]


def test_query_terms_keep_a_word_with_a_dotted_capital_i_whole():
    """"İstanbul" asks for "istanbul", as every store indexes it ("İ".lower() is "i" and a combining dot:
    the question asked for "stanbul", and found nothing)."""
    assert query_terms("Trip to İstanbul and İZMİR?") == ["trip", "istanbul", "izmir"]


def test_index_text_puts_speaker_and_date_first():
    assert index_text("hi", speaker="Ann", date="8 May, 2023") == "Ann (8 May, 2023): hi"
    assert index_text("hi", speaker="Ann") == "Ann: hi"
    assert index_text("hi") == "hi"


def test_lexical_scores_spread_to_neighbours():
    s = "conv"
    ids = {(s, i): f"m{i}" for i in range(6)}
    # m2 matches the words; m3 (the reply) matches nothing but sits next to it.
    ranked = fuse({(s, 5): 0.5, (s, 4): 0.4}, {(s, 2): 10.0}, ids, lexical_weight=0.6, neighbour_weight=0.3)
    by_id = {c.id: c for c in ranked}
    assert ranked[0].id == "m2" and by_id["m2"].fused == pytest.approx(0.6)
    assert by_id["m3"].fused == pytest.approx(by_id["m1"].fused) and by_id["m1"].fused > 0  # neighbours of a keyword hit gain a little
    assert by_id["m3"].lexical == 0.0  # its own BM25 is reported as it is
    assert by_id["m5"].fused == pytest.approx(0.4) and by_id["m4"].fused == 0.0  # dense normalised to [0, 1]


def test_unknown_neighbours_are_placeholders_unless_disallowed():
    ranked = fuse({}, {("c", 7): 1.0}, {("c", 7): "x"})
    assert {c.key for c in ranked} == {("c", 6), ("c", 7), ("c", 8)}
    assert [c.id for c in ranked if c.key != ("c", 7)] == [None, None]
    assert {c.key for c in fuse({}, {("c", 7): 1.0}, {("c", 7): "x"}, unknown_neighbours=False)} == {("c", 7)}
    assert {c.key for c in fuse({}, {("c", 0): 1.0}, {("c", 0): "x"})} == {("c", 0), ("c", 1)}  # no position -1


def test_spread_out_keeps_hits_apart_within_a_session():
    dense = {("a", i): 1.0 - i / 100 for i in range(10)} | {("b", 0): 0.5}
    ranked = fuse(dense, {}, {key: f"{key[0]}{key[1]}" for key in dense})
    assert [c.key for c in spread_out(ranked, 4, 0)] == [("a", 0), ("a", 1), ("a", 2), ("a", 3)]
    assert [c.key for c in spread_out(ranked, 4, 2)] == [("a", 0), ("a", 3), ("a", 6), ("a", 9)]
    assert ("b", 0) in [c.key for c in spread_out(ranked, 5, 2)]


def test_spread_out_skips_placeholders_that_do_not_exist():
    ranked = fuse({("a", 0): 0.9, ("a", 5): 0.1}, {("a", 9): 1.0}, {("a", 0): "x", ("a", 5): "y", ("a", 9): "z"})
    def resolve(c):  # position 10 does not exist, position 8 does
        if c.key == ("a", 8):
            c.id = "w"
            return True
        return False
    assert [c.id for c in spread_out(ranked, 4, 0, resolve)] == ["z", "x", "w", "y"]


def test_a_ranking_reads_its_candidates_once_and_takes_no_boost_after():
    ranked = fuse({("a", 1): 0.9, ("b", 1): 0.9, ("a", 0): 0.1}, {}, {("a", 1): "x", ("b", 1): "y", ("a", 0): "z"})
    first = list(ranked)
    assert [c.key for c in first] == [("a", 1), ("b", 1), ("a", 0)]  # a tie goes to the lower key
    first[1].id = "filled in"
    assert [id(c) for c in ranked] == [id(c) for c in first] and ranked[1].id == "filled in"
    with pytest.raises(RuntimeError):
        ranked.add([0], [0.5])


def test_nothing_found_is_an_empty_ranking_whatever_ids_are_known():
    for ranked in (fuse({}, {}, {("a", 1): "x"}), fuse({}, {}, {}), rrf({}, {}, {("a", 1): "x"})):
        assert len(ranked) == 0 and list(near_best(ranked)) == [] and spread_out(ranked, 3, 2) == []


def test_rrf_baseline():
    ranked = rrf({("a", 1): 0.9, ("a", 2): 0.1}, {("a", 2): 5.0}, {})
    assert ranked[0].key == ("a", 2)


def _ranked(scores: dict[tuple[str, int], float]) -> Ranking:
    return Ranking.of(list(scores), [f"{key[0]}{key[1]}" for key in scores], np.array(list(scores.values()), dtype=float))


def _ranked_by_key(scores: dict[tuple[str, int], float]) -> Ranking:
    """The same ranking with its rows in key order and their key codes, as :func:`fuse` makes it."""
    keys = sorted(scores)
    owners = sorted({key[0] for key in keys})
    session = np.array([owners.index(key[0]) for key in keys], dtype=np.int64)
    position = np.array([key[1] for key in keys], dtype=np.int64)
    return Ranking(owners, session, position, [f"{key[0]}{key[1]}" for key in keys],
                   np.array([scores[key] for key in keys], dtype=float), codes=(session << _SHIFT) | position)


def _candidates(scores: dict[tuple[str, int], float]) -> list[Candidate]:
    out = [Candidate(key, f"{key[0]}{key[1]}", fused=f) for key, f in scores.items()]
    out.sort(key=lambda c: (-c.fused, c.key))
    return out


def test_near_best_prefers_the_part_of_the_conversation_where_the_best_hits_are():
    # two equally good candidates: the one 5 turns from the best hit wins over the one 50 turns away
    ranked = _ranked({("a", 55): 1.0, ("a", 60): 0.5, ("a", 5): 0.5, ("b", 55): 0.5})
    assert [c.key for c in _ranked({("a", 55): 1.0, ("a", 60): 0.5, ("a", 5): 0.5, ("b", 55): 0.5})] == [
        ("a", 55), ("a", 5), ("a", 60), ("b", 55)]  # a tie goes to the lower key
    out = near_best(ranked, weight=0.2, window=30, depth=1)
    by_key = {c.key: c for c in out}
    assert [c.key for c in out][:2] == [("a", 55), ("a", 60)]
    assert by_key[("a", 60)].fused == pytest.approx(0.7) and by_key[("a", 60)].boost == pytest.approx(0.2)
    assert by_key[("a", 5)].fused == 0.5 and by_key[("a", 5)].boost == 0.0  # beyond the window
    assert by_key[("b", 55)].fused == 0.5  # same position, another session: not near
    assert by_key[("a", 55)].fused == pytest.approx(1.2)  # the best is near itself
    # a near candidate gains in proportion to the head hit it is near (depth 2: (a, 5) is in the head)
    again = near_best(_ranked({("a", 0): 1.0, ("a", 100): 0.5, ("a", 110): 0.4}), weight=0.2, window=30, depth=2)
    assert {c.key: c.boost for c in again}[("a", 110)] == pytest.approx(0.2 * 0.5)
    assert near_best(_ranked({("a", 1): 1.0, ("a", 2): 0.5}), weight=0.0)[1].fused == 0.5  # weight 0: off


@given(st.dictionaries(st.tuples(st.sampled_from("ab"), st.integers(0, 200)), st.floats(0.0, 1.0), max_size=40),
       st.floats(0.0, 1.0), st.integers(0, 50))
def test_near_best_keeps_the_best_first_and_only_adds(scores, weight, window):
    before = {key: f for key, f in scores.items()}
    out = near_best(_ranked(scores), weight=weight, window=window)
    assert sorted(c.key for c in out) == sorted(scores)
    for c in out:
        assert before[c.key] <= c.fused <= before[c.key] + weight + 1e-9
        assert c.fused == pytest.approx(before[c.key] + c.boost)
    assert [c.fused for c in out] == sorted((c.fused for c in out), reverse=True)
    if out:
        assert out[0].fused == pytest.approx(max(before.values()) + (weight if max(before.values()) > 0 else 0.0))


def _near_best_by_definition(ranked: list[Candidate], weight: float, window: int, depth: int) -> list[tuple]:
    """The rule as the docstring states it, one candidate at a time."""
    top = ranked[0].fused
    head = ranked[:depth]
    out = []
    for c in ranked:
        near = [h.fused for h in head if h.key[0] == c.key[0] and abs(h.key[1] - c.key[1]) <= window]
        gain = weight * (max(near) / top) if top > 0 and near and max(near) > 0 else 0.0
        out.append((c.key, c.fused + gain, c.boost + gain))
    return sorted(out, key=lambda t: (-t[1], t[0]))


@given(
    st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 120)), st.floats(0.0, 1.0), min_size=1),
    st.integers(0, 40), st.integers(1, 12),
)
@example({("a", 0): 1.0, ("a", 5): 0.5, ("b", 3): 0.9, ("b", 9): 0.1}, 5, 2)  # a neighbour exactly window away
def test_near_best_adds_to_each_candidate_the_best_nearby_head_score_in_its_session(scores, window, depth):
    want = _near_best_by_definition(_candidates(scores), 0.2, window, depth)
    for ranked in (_ranked(scores), _ranked_by_key(scores)):  # rows in any order, and in key order (fuse's)
        got = near_best(ranked, weight=0.2, window=window, depth=depth)
        assert [(c.key, c.fused, c.boost) for c in got] == want


def _fuse_by_definition(dense, lexical, ids, lexical_weight, neighbour_weight, unknown_neighbours):
    """The rule as fusion's docstring states it, one key at a time (a plain loop, as fusion was first written)."""
    smoothed: dict = {}
    for (session, pos), score in lexical.items():
        smoothed[(session, pos)] = smoothed.get((session, pos), 0.0) + score
        for near in ((session, pos - 1), (session, pos + 1)):
            if neighbour_weight and near[1] >= 0 and (unknown_neighbours or near in ids):
                smoothed[near] = smoothed.get(near, 0.0) + neighbour_weight * score
    lex_scale = 1.0 / max(max(smoothed.values(), default=0.0), 1.0)
    floor = scale = 0.0
    if dense:
        best, floor = max(dense.values()), min(dense.values())
        scale = 1.0 / (best - floor) if best - floor > 1e-12 else 0.0  # closer cosines count as equal
    out = []
    for key in dense.keys() | smoothed.keys():
        cos = dense.get(key)
        d = 0.0 if cos is None else ((cos - floor) * scale if scale else 1.0)
        fused = lexical_weight * smoothed.get(key, 0.0) * lex_scale + (1.0 - lexical_weight) * d
        out.append((key, ids.get(key), cos, lexical.get(key, 0.0), fused))
    return sorted(out, key=lambda t: (-t[4], t[0]))


keys = st.tuples(st.sampled_from(["a", "b", "c\u00e9"]), st.integers(0, 40))


@given(st.dictionaries(keys, st.floats(-1.0, 1.0), max_size=30), st.dictionaries(keys, st.floats(0.0, 30.0), max_size=30),
       st.sets(keys, max_size=40), st.sampled_from([0.0, 0.3, 1.0]), st.booleans())
@example(dense={("a", 0): 0.0, ("a", 1): 2.225073858507e-311}, lexical={}, known=set(), spread=0.0, unknown=False)
def test_fuse_scores_and_orders_each_candidate_exactly_as_the_rule_states(dense, lexical, known, spread, unknown):
    ids = {key: f"{key[0]}{key[1]}" for key in known | dense.keys() | lexical.keys() if key in known or key in dense}
    want = _fuse_by_definition(dense, lexical, ids, 0.6, spread, unknown)
    got = fuse(dense, lexical, ids, lexical_weight=0.6, neighbour_weight=spread, unknown_neighbours=unknown)
    assert [(c.key, c.id, c.dense, c.lexical, c.fused) for c in got] == want  # to the last bit


@given(st.dictionaries(keys, st.floats(-1.0, 1.0), max_size=30), st.dictionaries(keys, st.floats(0.0, 30.0), max_size=30),
       st.sampled_from([0.0, 0.3, 1.0]))
def test_fusing_a_lexical_spread_made_beforehand_is_fusing_the_lexical_scores(dense, lexical, spread):
    """A search spreads the keyword scores beside the embedding, then fuses the dense hits with them: the same
    ranking, to the last bit, as fusing both at once; the keyword hits' ids come with the spread."""
    ids = {key: f"{key[0]}{key[1]}" for key in dense.keys() | lexical.keys()}
    at_once = fuse(dense, lexical, ids, lexical_weight=0.6, neighbour_weight=spread)
    ahead = spread_lexical(lexical, neighbour_weight=spread, ids=[ids[key] for key in lexical])
    later = fuse(dense, ahead, {key: ids[key] for key in dense}, lexical_weight=0.6)
    assert [(c.key, c.id, c.dense, c.lexical, c.fused) for c in later] == [
        (c.key, c.id, c.dense, c.lexical, c.fused) for c in at_once]
