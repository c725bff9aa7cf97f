"""ProceduralMemory: learned tool patterns, their threshold, similarity, plans, scores and expiry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fullrecall import MemoryInputError, ProceduralMemory
from fullrecall.stores import open_store

WEIGHT_TOOLS = ["search_health_records_by_metric", "aggregate_metrics", "calculate_weight_trends_tool"]
DAY = 86400.0


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def memory(default_embedder):
    return ProceduralMemory(embedder=default_embedder, user_id="alice", agent_id="coach")


def test_threshold_keeps_exactly_point_seven_and_drops_below(memory):
    assert memory.store_pattern("analyze my weight trends", WEIGHT_TOOLS, 0.69, 900) is None
    assert memory.store_pattern("how did I sleep this week", ["sleep_stats"], 0.6999999, 900) is None
    kept = memory.store_pattern("show my workout history", ["search_workouts"], 0.7, 900)
    assert kept is not None
    assert [p["query"] for p in memory.patterns()] == ["show my workout history"]


def test_a_run_without_tools_is_not_kept_and_never_outranks_a_procedure(memory):
    """A pattern of no tools was kept and, scored higher, was the plan: an empty tool order at high confidence."""
    kept = memory.store_pattern("analyze my weight trends", WEIGHT_TOOLS, 0.8, 900)
    assert memory.store_pattern("analyze my weight trends", [], 1.0, 10) is None
    assert [p["id"] for p in memory.patterns()] == [kept]
    plan = memory.plan_tool_sequence("analyze my weight trends")
    assert plan["suggested_tools"] == WEIGHT_TOOLS and plan["pattern_id"] == kept


def test_threshold_is_configurable(default_embedder):
    strict = ProceduralMemory(embedder=default_embedder, min_success_score=0.9)
    assert strict.store_pattern("analyze my weight trends", WEIGHT_TOOLS, 0.85, 900) is None
    assert strict.store_pattern("analyze my weight trends", WEIGHT_TOOLS, 0.9, 900) is not None


def test_similar_task_gets_the_stored_tool_order_and_unrelated_task_the_fallback(memory):
    memory.store_pattern("Analyze my weight trends over time", WEIGHT_TOOLS, 0.95, 1250)
    memory.store_pattern("What workouts did I do last week?", ["search_workouts", "summarize"], 0.8, 700)
    patterns = memory.retrieve_patterns("how has my body weight changed?", top_k=3)
    assert patterns[0]["tools_used"] == WEIGHT_TOOLS
    assert patterns == sorted(patterns, key=lambda p: -p["similarity"])
    plan = memory.plan_tool_sequence("how has my body weight changed?", patterns[:1])
    assert plan["suggested_tools"] == WEIGHT_TOOLS and plan["confidence"] == pytest.approx(0.95)
    assert "weight" in plan["reasoning"]

    fallback = memory.plan_tool_sequence("translate this poem into French", [])
    assert fallback["suggested_tools"] == [] and fallback["confidence"] < 0.7
    assert memory.retrieve_patterns("translate this poem into French") == []
    assert memory.plan_tool_sequence("translate this poem into French")["confidence"] == fallback["confidence"]


def test_plan_prefers_the_most_successful_pattern(memory):
    plan = memory.plan_tool_sequence("q", [
        {"tools_used": ["a"], "success_score": 0.75, "success_count": 9},
        {"tools_used": ["b", "c"], "success_score": 0.9, "success_count": 1},
    ])
    assert plan["suggested_tools"] == ["b", "c"] and plan["alternatives"] == [["a"]]


def test_same_task_and_tools_update_one_pattern(memory):
    first = memory.store_pattern("Analyze my weight trends", WEIGHT_TOOLS, 0.8, 1000)
    again = memory.store_pattern("analyze my weight   trends!", WEIGHT_TOOLS, 1.0, 2000)
    other = memory.store_pattern("Analyze my weight trends", WEIGHT_TOOLS[:1], 0.8, 1000)
    assert first == again != other
    (merged,) = [p for p in memory.patterns() if p["id"] == first]
    assert merged["success_count"] == 2
    assert merged["avg_execution_time_ms"] == pytest.approx(1500)
    assert merged["success_score"] == pytest.approx(0.9)


def test_clean_fast_run_scores_high_and_a_tool_error_lowers_it(memory):
    clean = memory.evaluate_workflow(WEIGHT_TOOLS, [{"status": "success"}] * 3, True, 1200)
    failed = memory.evaluate_workflow(WEIGHT_TOOLS, [{"status": "success"}, {"error": "timeout"}, "ok"], True, 1200)
    assert clean >= 0.7 and failed < clean
    assert memory.evaluate_workflow(["one"], [RuntimeError("boom")], "answer", 100) < 0.7
    assert memory.evaluate_workflow([], [], "answer", 100) < 0.7  # no tool: nothing to learn
    assert memory.evaluate_workflow(WEIGHT_TOOLS, ["ok"] * 3, "", 100) < clean
    assert memory.evaluate_workflow(WEIGHT_TOOLS, ["ok"] * 3, True, 60_000) < clean


results = st.lists(st.sampled_from(["ok", {"status": "success"}, {"status": "error"}, "Error: x", {"success": False}]),
                   max_size=6)


@given(results=results, response=st.booleans(), ms=st.floats(0, 1e6))
def test_score_is_in_unit_interval_and_an_added_error_never_raises_it(default_embedder, results, response, ms):
    memory = ProceduralMemory(embedder=default_embedder)
    score = memory.evaluate_workflow(["t"], results, response, ms)
    assert 0.0 <= score <= 1.0
    assert memory.evaluate_workflow(["t"], results + [{"status": "error"}], response, ms) <= score


def test_bad_pattern_is_refused_naming_the_field(memory):
    with pytest.raises(MemoryInputError, match="'success_score' must be a number in \\[0, 1\\]"):
        memory.store_pattern("q", ["t"], 1.5, 10)
    with pytest.raises(MemoryInputError, match="'tools_used' must be a list"):
        memory.store_pattern("q", "t", 0.9, 10)
    with pytest.raises(MemoryInputError, match="'query'"):
        memory.store_pattern("  ", ["t"], 0.9, 10)
    with pytest.raises(MemoryInputError, match="^pattern: 'query' is not valid Unicode"):
        memory.store_pattern("book \ud800", ["t"], 0.9, 10)
    with pytest.raises(MemoryInputError, match="'tools_used\\[1\\]' is not valid Unicode"):
        memory.store_pattern("book", ["t", "pay\ud800"], 0.9, 10)
    assert memory.patterns() == []


def test_numbers_no_store_can_keep_and_arguments_of_the_wrong_kind_are_named(memory, default_embedder):
    """An infinite or overflowing run time is refused by name before anything is written (it reached the store,
    which refused the record, or raised OverflowError); the scorer's and planner's arguments are checked, as is
    the constructor's (a zero fast time divided by zero on the first slow run).
    """
    for ms in (float("inf"), 10**400):
        with pytest.raises(MemoryInputError, match="^pattern 'q': 'execution_time_ms' must be a finite number >= 0"):
            memory.store_pattern("q", ["t"], 0.9, ms)
    assert memory.patterns() == []
    for args, field in [((["t"], ["ok"], True, float("nan")), "execution_time_ms"),
                        ((["t"], None, True, 10), "tool_results"), (("search", [], True, 10), "tools_used")]:
        with pytest.raises(MemoryInputError, match=f"^evaluate_workflow: '{field}'"):
            memory.evaluate_workflow(*args)
    for past in ([{"query": "q"}], "search"):
        with pytest.raises(MemoryInputError, match="^plan_tool_sequence: "):
            memory.plan_tool_sequence("q", past)
    for setting in ({"fast_execution_ms": 0}, {"ttl_days": float("nan")}, {"ttl_days": -1},
                    {"min_success_score": 2}, {"min_similarity": float("nan")}):
        with pytest.raises(MemoryInputError, match=f"^ProceduralMemory: '{next(iter(setting))}'"):
            ProceduralMemory(embedder=default_embedder, **setting)
    assert ProceduralMemory(embedder=default_embedder, ttl_days=None).ttl_days is None


def test_ttl_and_owner_isolation_on_every_backend(store_url, default_embedder):
    clock = Clock()
    store = open_store(store_url)
    try:
        alice = ProceduralMemory(store, user_id="alice", agent_id="coach", embedder=default_embedder, clock=clock)
        bob = ProceduralMemory(store, user_id="bob", agent_id="coach", embedder=default_embedder, clock=clock)
        default_owner = ProceduralMemory(store, embedder=default_embedder, clock=clock)
        old = alice.store_pattern("Analyze my weight trends", WEIGHT_TOOLS, 0.9, 900)
        clock.now += 100 * DAY
        young = alice.store_pattern("What workouts did I do?", ["search_workouts"], 0.9, 900)
        default_owner.store_pattern("Analyze my weight trends", ["global_tool"], 0.9, 900)
        shared = default_owner.store_pattern("Analyze my weight trends", WEIGHT_TOOLS, 0.9, 900)
        assert shared != old and not alice.delete_pattern(shared)  # same task and tools, another owner's
        assert bob.patterns() == [] and bob.retrieve_patterns("weight trends") == []
        assert [p["tools_used"] for p in alice.retrieve_patterns("weight trends")] == [WEIGHT_TOOLS]

        clock.now += 110 * DAY - 1  # the first pattern is 210 days old minus a second: still there
        assert {p["id"] for p in alice.patterns()} == {old, young}
        clock.now += 2
        assert {p["id"] for p in alice.patterns()} == {young}
        assert old not in {r.id for r in store.get_records(alice.book.scope, "procedures")}  # purged, not hidden
        assert shared in {p["id"] for p in default_owner.patterns()}  # the default owner's twin is untouched
        # storing again renews the expiry
        alice.store_pattern("What workouts did I do?", ["search_workouts"], 0.9, 900)
        clock.now += 200 * DAY
        assert {p["id"] for p in alice.patterns()} == {young}
    finally:
        store.close()


def test_a_bad_query_or_top_k_is_named_on_every_backend(store_url, default_embedder):
    memory = ProceduralMemory(store_url, embedder=default_embedder, user_id="alice")
    try:
        memory.store_pattern("book a flight to Oslo", ["search", "book"], 0.9, 100)
        with pytest.raises(MemoryInputError, match="^retrieve_patterns: 'query' is not valid Unicode"):
            memory.retrieve_patterns("book a flight\ud800")
        with pytest.raises(MemoryInputError, match="^retrieve_patterns: 'query' must be a string"):
            memory.retrieve_patterns(5)
        with pytest.raises(MemoryInputError, match="^retrieve_patterns: 'top_k' must be an integer"):
            memory.retrieve_patterns("book a flight", "3")
        for query_type, error in [(5, "must be a string or None, not 5"), ("travel\ud800", "is not valid Unicode")]:
            with pytest.raises(MemoryInputError, match=f"^pattern 'book a train': 'query_type' {error}"):
                memory.store_pattern("book a train", ["search", "book"], 0.9, 100, query_type=query_type)
        assert len(memory.retrieve_patterns("book a flight to Oslo")) == 1
        assert "book a train" not in [p["query"] for p in memory.retrieve_patterns("book a train", top_k=5)]
    finally:
        memory.close()


def test_repeats_of_the_longest_run_time_keep_their_average(store_url, default_embedder):
    """Two runs of the largest time store_pattern accepts (1e308 ms, finite) summed past a float on the way to their
    average: the second was "record ...: 'data.avg_execution_time_ms' is inf; JSON has no NaN or infinity", and the
    pattern's count and score stayed as before."""
    store = open_store(store_url)
    memory = ProceduralMemory(store, user_id="alice", embedder=default_embedder)
    for _ in range(3):
        memory.store_pattern("export my data", ["export"], 0.9, 1e308)
    memory.store_pattern("export my data", ["export"], 0.7, 0.0)
    (pattern,) = memory.patterns()
    assert pattern["success_count"] == 4 and pattern["avg_execution_time_ms"] == pytest.approx(0.75e308)
    assert pattern["success_score"] == pytest.approx(0.85)
    store.close()


def test_what_a_caller_is_given_is_a_copy_and_bad_scores_and_results_are_named(store_url, default_embedder):
    """A pattern's ``tools_used`` as returned was the cache's own list: a caller that changed it changed the plans,
    and the next ``store_pattern`` of the task wrote the change to the store. ``past_patterns`` with a NaN score
    outranked a 0.95 one (confidence nan), and a failed result given alone (a dict) was read as its keys: 1.0."""
    store = open_store(store_url)
    try:
        memory = ProceduralMemory(store=store, embedder=default_embedder)
        memory.store_pattern("plot my weight", ["get_weight", "plot"], 0.9, 100)
        memory.retrieve_patterns("plot my weight")[0]["tools_used"].append("delete_everything")
        memory.patterns()[0]["tools_used"].append("delete_everything")
        assert memory.plan_tool_sequence("plot my weight")["suggested_tools"] == ["get_weight", "plot"]
        memory.store_pattern("plot my weight", ["get_weight", "plot"], 0.9, 100)
        again = ProceduralMemory(store=store, embedder=default_embedder)
        assert [p["tools_used"] for p in again.patterns()] == [["get_weight", "plot"]]
        for score in (float("nan"), 7.0, -1):
            with pytest.raises(MemoryInputError, match="'success_score' in \\[0, 1\\]"):
                memory.plan_tool_sequence("q", [{"tools_used": ["rm"], "success_score": score}])
        with pytest.raises(MemoryInputError, match="'tool_results' must be a list"):
            memory.evaluate_workflow(["t"], {"status": "error", "message": "API timeout"}, "done", 100)
    finally:
        store.close()


def test_tool_sequences_that_differ_only_by_a_nul_are_never_one_pattern(store_url, default_embedder):
    """A NUL in a task or tool name is refused by name. A pattern's id hashes its parts joined by NUL, so
    ``["fetch\\x00plot"]`` and ``["fetch", "plot"]`` shared one id: the second run was merged into the first
    pattern (its tools never stored, the other's count and average time changed).
    """
    memory = ProceduralMemory(store_url, embedder=default_embedder, user_id="alice")
    try:
        with pytest.raises(MemoryInputError, match="^pattern 'plot my weight': 'tools_used\\[0\\]' must not contain a NUL"):
            memory.store_pattern("plot my weight", ["fetch\x00plot"], 0.9, 100)
        with pytest.raises(MemoryInputError, match="^pattern: 'query' must not contain a NUL"):
            memory.store_pattern("plot\x00 my weight", ["fetch"], 0.9, 100)
        memory.store_pattern("plot my weight", ["fetch", "plot"], 0.9, 300)
        assert [(p["tools_used"], p["success_count"]) for p in memory.patterns()] == [(["fetch", "plot"], 1)]
    finally:
        memory.close()


def test_past_patterns_and_run_times_no_plan_or_score_can_use_are_named(default_embedder):
    """A past pattern's ``success_count`` or ``similarity`` that is no number raised a plain TypeError or
    ValueError from the planner; a negative or infinite run time scored (-5 ms had full speed credit), though the
    docs refuse every run time that is not a finite number >= 0; a ``ttl_days`` no expiry date can hold was
    accepted, and then every ``store_pattern`` failed on the record's ``expires_at``.
    """
    memory = ProceduralMemory(embedder=default_embedder)
    for bad in ({"success_count": None}, {"success_count": "many"}, {"success_count": float("nan")},
                {"similarity": "high"}):
        past = [{"tools_used": ["a"], "success_score": 0.9, **bad}, {"tools_used": ["b"], "success_score": 0.9}]
        with pytest.raises(MemoryInputError, match=f"^plan_tool_sequence: past pattern 0: '{next(iter(bad))}'"):
            memory.plan_tool_sequence("x", past)
    assert memory.plan_tool_sequence("x", [{"tools_used": ["a"], "success_score": 0.9, "success_count": 2.0,
                                            "similarity": 0.5}])["suggested_tools"] == ["a"]
    for ms in (-5, float("-inf"), float("inf")):
        with pytest.raises(MemoryInputError, match="^evaluate_workflow: 'execution_time_ms' must be a finite number"):
            memory.evaluate_workflow(["t"], ["ok"], True, ms)
    with pytest.raises(MemoryInputError, match="^ProceduralMemory: 'ttl_days' must be a number > 0 and at most"):
        ProceduralMemory(embedder=default_embedder, ttl_days=1e304)
    longest = ProceduralMemory(embedder=default_embedder, ttl_days=1_000_000)
    assert longest.store_pattern("book a flight", ["search"], 0.9, 10) is not None
