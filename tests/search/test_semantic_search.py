"""SemanticSearch end to end on the real embedder and the real SQLite store."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fullrecall.search import SearchHit, SemanticSearch
from fullrecall.stores import Filters, Scope, StoredMessage, open_store

DOCS = [
    "Python decorators are functions that wrap other functions to modify their behaviour.",
    "My favourite hiking trail is in the Dolomites, near Cortina.",
    "Please keep the reference number REF-48213 out of any summary.",
    "A hash table gives average constant-time lookups by hashing keys into buckets.",
    "The binary search tree keeps keys ordered so in-order traversal yields them sorted.",
    "I adopted a grey cat called Miso last spring.",
]


@pytest.fixture()
def search(default_embedder):
    with SemanticSearch(default_embedder) as s:
        yield s


def test_semantic_match_scores_and_verbatim_text(search):
    ids = search.add(DOCS, metadata=[{"topic": i} for i in range(len(DOCS))])
    assert len(ids) == len(set(ids)) == len(DOCS)
    hits = search.search("Which pet did I get?", top_k=2)
    assert isinstance(hits[0], SearchHit)
    assert hits[0].text == DOCS[5] and hits[0].metadata == {"topic": 5} and hits[0].id == ids[5]
    assert {"dense", "lexical", "fused"} <= set(hits[0].scores) and "rerank" not in hits[0].scores
    assert hits[0].score == hits[0].scores["fused"] and 0 < hits[0].score <= 1
    assert len(hits) == 2 and hits[0].score >= hits[1].score


def test_keyword_only_hit_is_always_found(search):
    filler = [f"Note {i}: we discussed data structures, trees, heaps and graphs at length." for i in range(200)]
    search.add(filler + DOCS)
    hits = search.search("48213", top_k=1)  # a bare number: no semantic content at all
    assert hits[0].text == DOCS[2] and hits[0].scores["lexical"] > 0


def test_speaker_and_date_are_indexed_but_not_returned(search):
    search.add(["I will bring the cake.", "I will bring the cake."],
               metadata=[{"speaker": "Ann", "date": "3 May 2023"}, {"speaker": "Bob", "date": "9 June 2023"}])
    hits = search.search("What did Bob promise in June?", top_k=1)
    assert hits[0].metadata["speaker"] == "Bob" and hits[0].text == "I will bring the cake."
    assert hits[0].message.text == "Bob (9 June 2023): I will bring the cake."


def test_delete_removes_from_both_indexes(search):
    ids = search.add(DOCS)
    assert search.delete([ids[2]]) == 1
    assert all(h.id != ids[2] for h in search.search("REF-48213 reference number", top_k=6))
    assert search.search("48213", top_k=3) == [] or all("48213" not in h.text for h in search.search("48213"))


def test_filters_by_role_and_time(search):
    now = time.time()
    search.add(["the launch date is Friday", "the launch date moved to Monday"],
               metadata=[{"role": "user", "created_at": now - 100}, {"role": "assistant", "created_at": now}])
    assert [h.text for h in search.search("launch date", top_k=5, filters=Filters(roles=("assistant",)))] == [
        "the launch date moved to Monday"]
    assert [h.text for h in search.search("launch date", top_k=5, filters=Filters(until=now - 50))] == [
        "the launch date is Friday"]


def test_min_score_without_reranker_applies_to_fused(search):
    search.add(DOCS)
    assert len(search.search("cat", top_k=6)) == 6  # default -2.0 never filters fused scores in [0, 1]
    assert all(h.score >= 0.5 for h in search.search("cat", top_k=6, min_score=0.5))


def test_spread_keeps_hits_apart(search):
    search.add([f"Chess opening number {i}: the Sicilian defence, move {i}." for i in range(30)])
    hits = search.search("Sicilian defence chess opening", top_k=5, spread=2)
    positions = sorted(h.position for h in hits)
    assert len(hits) == 5 and all(b - a > 2 for a, b in zip(positions, positions[1:]))


def test_persisted_index_reopens_without_re_embedding(tmp_path, counting):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with SemanticSearch(counting, store=url) as s:
        s.add(DOCS, ids=[f"d{i}" for i in range(len(DOCS))])
    assert len(counting.embedded) == len(DOCS)
    counting.embedded.clear()
    with SemanticSearch(counting, store=url) as s:
        assert s.search("hash table lookups", top_k=1)[0].id == "d3"
        s.add(DOCS[:2], ids=["d0", "d1"])  # already stored with vectors: not embedded again
    assert counting.embedded == ["hash table lookups"]


def test_index_stored_messages_embeds_only_missing(counting):
    store = open_store("sqlite:///:memory:")
    scope = Scope(user_id="u1", session_id="s1")
    s = SemanticSearch(counting, store=store, scope=scope)
    msgs = [StoredMessage(id=f"m{i}", role="user", text=f"user (1 May): {d}", data={"role": "user", "content": [{"text": d}]})
            for i, d in enumerate(DOCS)]
    store.append(scope, msgs[:3])  # the archive wrote some itself
    assert s.index(msgs[:3], append=False) == ["m0", "m1", "m2"]
    assert s.index(msgs) == [m.id for m in msgs]
    assert len(counting.embedded) == len(DOCS)  # m0-m2 once, m3-m5 once
    hit = s.search("grey cat", top_k=1)[0]
    assert hit.text == DOCS[5]  # the message's own words, not the indexed "user (1 May): ..."
    assert hit.id == "m5" and hit.message.data == msgs[5].data and hit.position == 5 and hit.session_id == "s1"
    # a partial scope (the user's sessions) searches too
    assert s.search("grey cat", top_k=1, scope=Scope(user_id="u1"))[0].id == "m5"


def test_dimension_or_model_mismatch_is_a_clear_error(default_embedder):
    store = open_store("sqlite:///:memory:")
    SemanticSearch(default_embedder, store=store).add(["x"])

    class Small:
        name, dimension = "small", 8

        def embed(self, texts):
            return np.ones((len(texts), 8), np.float32) / np.sqrt(8)

    with pytest.raises(ValueError, match="384-dimensional vectors"):
        SemanticSearch(Small(), store=store).search("x")

    class Renamed(Small):
        name, dimension = "other-model", 384

    with pytest.raises(ValueError, match="must not be mixed"):
        SemanticSearch(Renamed(), store=store).add(["y"])


def test_rejects_bad_input(search):
    with pytest.raises(ValueError):
        search.add(["a", "b"], ids=["1"])
    with pytest.raises(ValueError):
        search.add([{"not": "text"}])  # type: ignore[list-item]
    assert search.search("   ") == [] and search.search("x", top_k=0) == []


def test_bad_search_and_recall_arguments_are_refused_by_name(search, default_embedder):
    """Arguments the siblings of which were checked (around=-1, top_k=1.5) were taken silently (top_k=-1,
    min_score=nan, spread=1.5) or raised a raw error (scope='u', recall(before='3'), a term that is no str)."""
    from fullrecall.archive import Archive
    from fullrecall.errors import InvalidInput
    from fullrecall.stores import Scope

    search.add([f"note {i} about gardens" for i in range(6)])
    for options, field in [({"top_k": -1}, "top_k"), ({"min_score": float("nan")}, "min_score"),
                           ({"spread": -1}, "spread"), ({"spread": 1.5}, "spread"), ({"scope": "u"}, "scope")]:
        with pytest.raises(InvalidInput, match=f"search: '{field}'"):
            search.search("gardens", **options)
    with pytest.raises(InvalidInput, match="search term 0 must be a str"):
        search.store.search_text(search.scope, [None], 3)  # type: ignore[list-item]
    archive = Archive(search.store, search.scope, embedding_model=default_embedder)
    with pytest.raises(InvalidInput, match="recall: 'before'"):
        archive.recall("gardens", before="3")  # type: ignore[arg-type]
    assert isinstance(search.scope, Scope)


def test_a_radius_far_larger_than_the_conversation_costs_what_the_conversation_holds(search, default_embedder):
    """A context radius is walked over the messages read, not over its own range: around=10**30 never returned,
    10**7 took seconds on 10 messages."""
    from fullrecall.archive import Archive

    search.add([f"message number {i} about gardens" for i in range(10)])
    hits = search.search("gardens", top_k=3, around=10**30)
    assert [len(h.context or []) for h in hits] == [10, 10, 10]
    recalled = Archive(search.store, search.scope, embedding_model=default_embedder).recall(
        "gardens", top_k=3, radius=10**30)
    assert [[m.position for m in r.messages] for r in recalled.ranges] == [list(range(10))]


def test_cross_encoder_rerank_and_min_score_on_logits(default_embedder, tiny_cross_encoder):
    s = SemanticSearch(default_embedder, reranker_model=str(tiny_cross_encoder))
    s.add(DOCS)
    hits = s.search("pet cat", top_k=3, min_score=-1e9)
    assert len(hits) == 3 and all("rerank" in h.scores and h.score == h.scores["rerank"] for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert s.search("pet cat", top_k=3, min_score=1e9) == []  # the threshold is on the logits


def test_filters_hold_for_neighbours_found_through_a_keyword_hit(search):
    now = time.time()
    texts = ["Did you book the flights to Lisbon?", "Yes, done this morning.", "Great, thanks!", "Unrelated chatter."] * 3
    roles = ["user", "assistant", "user", "assistant"] * 3
    ids = search.add(texts, metadata=[{"role": r, "created_at": now} for r in roles])
    hits = search.search("Lisbon flights booked", top_k=12, filters=Filters(roles=("assistant",), exclude_ids=frozenset(ids[:4])))
    assert hits and all(h.message.role == "assistant" and h.id not in ids[:4] for h in hits)


def test_a_store_passed_in_stays_open(default_embedder):
    store = open_store("sqlite:///:memory:")
    with SemanticSearch(default_embedder, store=store) as s:
        s.add(["kept"])
    assert store.count(Scope(session_id="default")) == 1


def test_messages_at_reads_positions_in_order(default_embedder, counting):
    store = open_store("sqlite:///:memory:")
    scope = Scope(session_id="s")
    SemanticSearch(counting, store=store, scope=scope).add([f"turn {i}" for i in range(20)], ids=[f"t{i}" for i in range(20)])
    fresh = SemanticSearch(default_embedder, store=store, scope=scope)  # another process: no positions cached
    for s in (fresh, fresh):  # the second call reads what the first one cached
        got = s.messages_at([5, 3, 4, 17, 99, -1])
        assert [m.position for m in got] == [3, 4, 5, 17] and [m.id for m in got] == ["t3", "t4", "t5", "t17"]
    fresh.delete(["t4"])
    assert [m.id for m in fresh.messages_at([3, 4, 5])] == ["t3", "t5"]


def test_tiny_archive_is_ranked_by_meaning_when_bm25_has_nothing_to_say(search):
    # Two messages, both from Ann: every word's IDF is ~0, so the dense signal must decide.
    search.add(["I adopted a grey cat called Miso.", "My order number is REF-48213."],
               metadata=[{"speaker": "Ann"}, {"speaker": "Ann"}])
    assert search.search("Which pet did Ann get?", top_k=1)[0].text == "I adopted a grey cat called Miso."
    assert search.search("What was the order reference?", top_k=1)[0].text == "My order number is REF-48213."


def test_search_across_sessions_finds_each_message_although_ids_repeat(default_embedder, store_url):
    """Every session numbers its messages m0, m1, ...: a search over all of one user's sessions
    must still return the message that matched, from its own session, on every backend."""
    store = open_store(store_url)
    texts = {
        "monday": ["We planned the garden beds.", "Tomatoes go by the fence."],
        "tuesday": ["My passport number is X1234567.", "The flight leaves at nine."],
    }
    for session, docs in texts.items():
        SemanticSearch(default_embedder, store=store, scope=Scope(user_id="alice", session_id=session)).add(
            docs, ids=["m0", "m1"])
    SemanticSearch(default_embedder, store=store, scope=Scope(user_id="bob", session_id="tuesday")).add(
        ["Bob's passport number is B7654321."], ids=["m0"])
    everything = SemanticSearch(default_embedder, store=store, scope=Scope(user_id="alice"))
    for query, want in (("What is my passport number?", ("tuesday", texts["tuesday"][0])),
                        ("Where do the tomatoes go?", ("monday", texts["monday"][1]))):
        hits = everything.search(query, top_k=4)
        assert (hits[0].session_id, hits[0].text) == want, [(h.session_id, h.text) for h in hits]
        assert all("B7654321" not in h.text for h in hits)  # bob's message never reaches alice
        assert len({(h.session_id, h.id) for h in hits}) == len(hits)
    store.close()


def test_question_facets_prefer_the_named_speaker_and_dated_turns(default_embedder):
    texts = ["I finally went hiking in the Dolomites.", "I finally went hiking in the Dolomites.",
             "We went hiking in the Dolomites last August.", "The Dolomites are lovely for hiking."]
    meta = [{"speaker": "Ann"}, {"speaker": "Bob"}, {"speaker": "Cy"}, {"speaker": "Cy"}]
    with SemanticSearch(default_embedder, near_weight=0.0) as s:  # facets alone (nearness adds to the boost too)
        s.add(texts, ids=["ann", "bob", "dated", "plain"], metadata=meta)
        for name in ("Ann", "Bob"):
            hits = s.search(f"Did {name} go hiking in the Dolomites?", top_k=2)
            assert hits[0].id == name.lower() and hits[0].scores["boost"] == s.speaker_boost
            assert "boost" not in hits[1].scores
        when = s.search("When did Cy go hiking in the Dolomites?", top_k=4)
        assert when[0].id == "dated" and when[0].scores["boost"] == s.speaker_boost + s.date_boost
    with SemanticSearch(default_embedder, speaker_boost=0, date_boost=0, near_weight=0.0) as plain:
        plain.add(texts, ids=["ann", "bob", "dated", "plain"], metadata=meta)
        assert all("boost" not in h.scores for h in plain.search("When did Cy go hiking?", top_k=4))


def test_facets_read_beside_the_embedding_rank_as_facets_read_after_it(default_embedder, store_url):
    """A question with facets has its best keyword hits read (and their signals learned) while it is embedded;
    ranking and hits are those of the same search given its vector (nothing read beside it), on every backend.
    """
    store = open_store(store_url)
    scope = Scope(user_id="u", session_id="s")
    speakers = ["Ann", "Bob", "Cy"]
    texts = [f"{speakers[i % 3]} talked about hiking trip {i} in the Dolomites" + (" last August." if i % 4 == 0 else ".")
             for i in range(40)] + ["Bob bought new boots for hiking yesterday.", "The weather was fine."]
    SemanticSearch(default_embedder, store=store, scope=scope).add(
        texts, ids=[f"m{i}" for i in range(len(texts))], metadata=[{"speaker": speakers[i % 3]} for i in range(len(texts))])
    for question in ("When did Ann go hiking in the Dolomites?", "Did Bob talk about a hiking trip?",
                     "What did Cy say about the Dolomites last August?", "When did Bob buy boots?"):
        beside, after = (SemanticSearch(default_embedder, store=store, scope=scope) for _ in range(2))
        got = beside.search(question, top_k=8)
        want = after.search(question, top_k=8, vector=after.embed_query(question))
        assert any("boost" in h.scores for h in want)  # the facets count in this question
        assert [(h.id, h.text, h.scores) for h in got] == [(h.id, h.text, h.scores) for h in want]
    store.close()


def test_a_conversation_forgotten_and_begun_again_is_searched_as_a_new_search_would(default_embedder):
    """Neighbours placed by an earlier search are not served from where forgotten messages sat."""
    store = open_store("sqlite:///:memory:")
    scope = Scope(session_id="s")
    search = SemanticSearch(default_embedder, store=store, scope=scope, candidates=3)

    def begin(tag):
        search.add([f"Filler line {i} of round {tag}." + (" The zebra crossing." if i == 10 else "") for i in range(20)])

    begin("one")
    assert search.search("zebra", top_k=3)
    store.forget(scope)
    begin("two")
    seen = [(h.session_id, h.message.position, h.text) for h in search.search("zebra", top_k=3)]
    fresh = SemanticSearch(default_embedder, store=store, scope=scope, candidates=3)
    assert seen == [(h.session_id, h.message.position, h.text) for h in fresh.search("zebra", top_k=3)]
    assert len(seen) == 3 and all("round two" in text for _, _, text in seen)
    store.close()


def test_a_hit_near_the_best_one_outranks_its_twin_elsewhere(default_embedder):
    """Two identical turns: the one in the part of the conversation where the best hit is comes first."""
    best = "I adopted a grey cat called Miso and she loves tuna."
    filler = [f"Entry {i}: the weekly bus timetable was posted on the board." for i in range(8)]
    store = open_store("sqlite:///:memory:")
    try:
        for session, texts in (("a", [*filler[:6], "Miso loves tuna.", *filler[6:]]),
                               ("b", [filler[0], best, *filler[1:5], "Miso loves tuna.", *filler[5:]])):
            SemanticSearch(default_embedder, store=store, scope=Scope(user_id="u", session_id=session)).add(
                texts, ids=[f"{session}{i}" for i in range(len(texts))])
        for near_weight, twins in ((0.2, ["b6", "a6"]), (0.0, ["a6", "b6"])):  # without it, a tie goes to session a
            s = SemanticSearch(default_embedder, store=store, scope=Scope(user_id="u"), near_weight=near_weight)
            hits = s.search(best, top_k=5)
            assert hits[0].id == "b1"
            assert [h.id for h in hits if h.text == "Miso loves tuna."] == twins
            assert hits[0].scores.get("boost", 0.0) == pytest.approx(near_weight)  # the best is near itself
    finally:
        store.close()


def test_a_bad_query_or_top_k_is_named_on_every_backend(default_embedder, store_url):
    from fullrecall.errors import InvalidInput

    store = open_store(store_url)
    try:
        search = SemanticSearch(default_embedder, store=store, scope=Scope(user_id="u", session_id="s"))
        search.add(["Tomatoes go by the fence."])
        for kwargs, error in [
            ({"query": "tomato\ud800"}, "search: 'query' is not valid Unicode (a lone surrogate at character 6)"),
            ({"query": None}, "search: 'query' must be a str, got NoneType"),
            ({"query": b"tomato"}, "search: 'query' must be a str, got bytes"),
            ({"query": "tomato", "top_k": "3"}, "search: 'top_k' must be an integer, got '3'"),
            ({"query": "tomato", "min_score": "x"}, "search: 'min_score' must be a number or None, got 'x'"),
        ]:
            with pytest.raises(InvalidInput) as info:
                search.search(**kwargs)
            assert str(info.value) == error
        assert [h.text for h in search.search("tomatoes", top_k=1)] == ["Tomatoes go by the fence."]
    finally:
        store.close()
