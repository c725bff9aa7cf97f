"""Budget packing and query facets: pure functions, checked on made-up conversations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fullrecall.search.facets import Facets, boost, query_facets, states_date
from fullrecall.search.packing import SHORT_REPLY, neighbour_positions, pack, paying_neighbours, spans_around, uncovered
from fullrecall.stores import StoredMessage


def msg(position: int, text: str, role: str = "user") -> StoredMessage:
    return StoredMessage(id=f"m{position}", role=role, text=text, data={"text": text}, position=position)


def chars(m: StoredMessage) -> tuple[int]:
    return (len(m.text) + 1,)


def talk(n: int) -> dict[int, StoredMessage]:
    return {p: msg(p, f"turn {p} " + "x" * (p % 7), "ann" if p % 2 else "bob") for p in range(n)}


@given(
    n=st.integers(1, 40),
    order=st.permutations(range(40)),
    depth=st.integers(0, 40),
    budget=st.integers(0, 400),
    before=st.none() | st.integers(0, 45),
    radius=st.integers(0, 3),
    radius_hits=st.integers(0, 5),
)
def test_packing_stays_in_budget_never_repeats_and_keeps_the_best_that_fit(n, order, depth, budget, before, radius,
                                                                          radius_hits):
    around = talk(n)
    hits = [around[p] for p in order if p < n][:depth]
    packed = pack(hits, (budget,), chars, around=around, before=before, radius=radius, radius_hits=radius_hits)
    positions = packed.positions
    assert positions == sorted(set(positions)), "conversation order, no repeats"
    assert sum(chars(m)[0] for m in packed.messages) == packed.spent[0] <= budget
    assert before is None or all(p < before for p in positions), "nothing the window already shows"
    allowed = {h.position for h in hits}
    for i, h in enumerate(hits):
        r = max(1, radius if i < radius_hits else 1)
        allowed |= set(range(h.position - r, h.position + r + 1))
    assert set(positions) <= allowed, "only hits and their neighbours"
    # greedy on hits: a hit that is left out did not fit in what was left when its turn came
    if hits and (before is None or hits[0].position < before) and chars(hits[0])[0] <= budget:
        assert hits[0].position in positions, "the best hit always goes in when it fits"


def test_distinct_hits_before_neighbours_and_question_pairs():
    around = {
        0: msg(0, "Did you go to the support group on Friday?", "bob"),
        1: msg(1, "Yes, it was so powerful.", "ann"),
        2: msg(2, "I also started painting sunsets, it calms me down a lot these days, honestly.", "ann"),
        3: msg(3, "What did you paint?", "bob"),
        4: msg(4, "A lake at dawn.", "ann"),
        5: msg(5, "Nice.", "bob"),
        6: msg(6, "My dog Biscuit ate my shoes.", "ann"),
    }
    hits = [around[1], around[3], around[6]]
    packed = pack(hits, (10_000,), chars, around=around)
    # the short reply brings the question it answers; the question brings its answer; nothing else
    assert packed.positions == [0, 1, 3, 4, 6]
    assert packed.hit_positions == [1, 3, 6]
    long_reply = msg(1, "Yes, and " + "it was powerful; " * 6, "ann")
    assert len(around[1].text) <= SHORT_REPLY < len(long_reply.text)
    assert paying_neighbours(long_reply, {0: around[0], 1: long_reply}) == [], "a long reply stands on its own"
    assert paying_neighbours(around[1], around) == [around[0]]
    assert paying_neighbours(msg(1, "Yes.", "bob"), around) == [], "the same speaker does not answer itself"
    # without pairing only the hits; with a radius around the first hit, its neighbours nearest first
    assert pack(hits, (10_000,), chars, around=around, pair_questions=False).positions == [1, 3, 6]
    assert pack(hits, (10_000,), chars, around=around, pair_questions=False, radius=2,
                radius_hits=1).positions == [0, 1, 2, 3, 6]
    # a tight budget: the best hit first; a hit that does not fit is skipped, a later one that fits goes in
    tight = pack([around[1], around[6], around[3]], (len(around[1].text) + 1 + len(around[6].text),), chars,
                 around=around, pair_questions=False)
    assert tight.positions == [1, 3]
    # several budgets at once: each one holds
    both = pack(hits, (10_000, 2), lambda m: (len(m.text), 1), around=around)
    assert both.spent[1] == 2 and len(both.messages) == 2
    assert neighbour_positions([around[3]], radius=2, radius_hits=1) == [1, 2, 4, 5]
    assert neighbour_positions([around[0]]) == [1]
    assert neighbour_positions([around[3]], radius=10**12, radius_hits=1, before=6) == [0, 1, 2, 4, 5]


def test_query_facets_names_and_when():
    f = query_facets("When did Caroline's sister visit Paris?")
    assert f.names == {"caroline", "paris"} and f.wants_date
    assert not query_facets("What did they cook? How was it?"), "question words name nobody"
    assert not query_facets("what did they cook?")
    assert query_facets("How long ago was the trip?").wants_date
    assert not query_facets("What is the name of the dog?").wants_date
    for dated in ("We went last Saturday.", "Back in May it rained", "two years ago", "in 2022", "THIS Morning!",
                  "Since SUNDAY"):
        assert states_date(dated), dated
    for undated in ("I like pottery and painting.", "Lastly, a THIS-MORNINGS word", "Sundays' 20222 mays"):
        assert not states_date(undated), undated


def test_boost_prefers_the_named_speaker_and_dated_turns_for_when_questions():
    ann = StoredMessage(id="a", role="user", text="x", data={}, metadata={"speaker": "Ann"})
    bob = StoredMessage(id="b", role="Bob", text="x", data={})
    f = Facets(frozenset({"ann"}), True)
    assert boost(f, ann, "we met yesterday", speaker_boost=0.1, date_boost=0.2) == 0.1 + 0.2
    assert boost(f, ann, "we met", speaker_boost=0.1, date_boost=0.2) == 0.1
    assert boost(f, bob, "we met", speaker_boost=0.1, date_boost=0.2) == 0.0
    assert boost(Facets(frozenset({"bob"})), bob, "we met") > 0  # the role names the speaker when no metadata does


@given(st.lists(st.integers(0, 60), max_size=12), st.integers(0, 4))
def test_spans_around_cover_each_position_radius_once_in_order(positions, radius):
    spans = spans_around(positions, radius)
    covered = [p for a, b in spans for p in range(a, b + 1)]
    assert covered == sorted({q for p in positions for q in range(max(0, p - radius), p + radius + 1)})
    assert all(b + 1 < c for (_, b), (c, _) in zip(spans, spans[1:]))  # apart: touching spans are merged


@given(st.lists(st.integers(0, 60), max_size=8), st.lists(st.integers(0, 60), max_size=8), st.integers(0, 3))
def test_uncovered_is_what_spans_hold_outside_the_covered_ones_in_order(wanted, read, radius):
    spans, covered = spans_around(wanted, radius), spans_around(read, radius + 1)
    left = uncovered(spans, covered)
    positions = [p for a, b in left for p in range(a, b + 1)]
    inside = {p for a, b in covered for p in range(a, b + 1)}
    assert positions == sorted({p for a, b in spans for p in range(a, b + 1)} - inside)
    assert all(a <= b for a, b in left) and all(b < c for (_, b), (c, _) in zip(left, left[1:]))
