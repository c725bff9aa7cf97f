"""What the hook hands the model: budget packing end to end through the archive."""

from __future__ import annotations

import pytest

from fullrecall.archive import SemanticMemoryHook, SemanticSummarizingConversationManager
from fullrecall.archive.recall import CONTEXT_END, CONTEXT_START
from fullrecall.tokens import default_token_counter

TOPICS = ["arrays", "linked lists", "hash tables", "binary trees", "heaps", "graphs", "stacks", "queues", "tries",
          "sorting", "caching", "parsing"]


def archived_manager(default_embedder) -> tuple[SemanticSummarizingConversationManager, list[dict]]:
    m = SemanticSummarizingConversationManager(summarizer=lambda msgs, prev: "summary", preserve_recent_messages=4,
                                               embedding_model=default_embedder)
    messages = []
    for topic in TOPICS:
        messages += [{"role": "user", "content": [{"text": f"How do {topic} store data structure elements?"}]},
                     {"role": "assistant", "content": [{"text": f"{topic.capitalize()} keep data structure elements "
                                                                f"in their own way."}]}]
    m.reduce_context(messages, RuntimeError("overflow"))
    return m, messages


def context_of(text: str) -> list[str]:
    """The recalled lines (the blank lines between ranges left out)."""
    return [line for line in text.split(CONTEXT_START + "\n", 1)[1].split("\n" + CONTEXT_END, 1)[0].splitlines() if line]


def test_token_budget_is_honoured_and_spent_on_distinct_hits(default_embedder):
    m, _ = archived_manager(default_embedder)
    counter = default_token_counter()
    small = SemanticMemoryHook(manager=m, max_context_length=None, max_context_tokens=40)
    lines = context_of(small.enrich_text("Which data structure elements did we discuss?"))
    assert sum(counter.count(line) + 1 for line in lines) <= 40 and lines
    assert small.last_packed.spent[1] <= 40
    big = SemanticMemoryHook(manager=m, max_context_length=None, max_context_tokens=5_000)
    text = big.enrich_text("Which data structure elements did we discuss?")
    packed = big.last_packed
    assert len(packed.hit_positions) > m.semantic_search_top_k, "the budget buys more distinct hits than the classic 3"
    assert all(p < m.first_active_position for p in packed.positions), "nothing the window already shows"
    assert len(context_of(text)) == len(packed.messages) > len(lines)
    assert [r.messages for r in big.last_recall.ranges] and big.last_recall.hits
    # the classic behaviour stays one setting away: the radius around the first hits
    seed = SemanticMemoryHook(manager=m, radius_hits=3, pair_questions=False, depth=3)
    seed.enrich_text("Tell me about heaps")
    hits = seed.last_packed.hit_positions
    assert 1 <= len(hits) <= 3 and len(seed.last_packed.positions) > len(hits)
    assert all(any(abs(p - h) <= m.message_context_radius for h in hits) for p in seed.last_packed.positions)


def test_character_budget_still_applies_and_bad_budgets_are_refused(default_embedder):
    m, _ = archived_manager(default_embedder)
    hook = SemanticMemoryHook(manager=m, max_context_length=120)
    lines = context_of(hook.enrich_text("Which data structure elements did we discuss?"))
    assert sum(len(line) + 1 for line in lines) <= 120
    with pytest.raises(ValueError, match="max_context_tokens"):
        SemanticMemoryHook(max_context_tokens=0)
    with pytest.raises(ValueError, match="budget"):
        SemanticMemoryHook(max_context_length=None)
    with pytest.raises(ValueError, match="radius_hits"):
        SemanticMemoryHook(radius_hits=-1)


def test_default_lines_are_compact_ranges_apart_and_the_labelled_format_is_one_flag_away(default_embedder):
    m, messages = archived_manager(default_embedder)
    # two archived topics apart (the archive holds positions 0-6: arrays and binary trees, not heaps or tries), so the
    # two ranges come from the words, not from the int8 embedding's last digits, which differ from CPU to CPU
    question = "Which data structure elements did arrays and binary trees keep?"
    compact = SemanticMemoryHook(manager=m, max_context_length=None, max_context_tokens=80)
    text = compact.enrich_text(question)
    body = text.split(CONTEXT_START + "\n", 1)[1].split("\n" + CONTEXT_END, 1)[0]
    packed = compact.last_packed.messages
    expected = []
    for prev, msg in zip([None, *packed], packed):
        if prev is not None and msg.position != prev.position + 1:
            expected.append("")  # a blank line where the conversation skips
        expected.append(f"{msg.role}: {msg.data['content'][0]['text']}")
    assert body.splitlines() == expected and "[Message" not in body
    assert len({p - i for i, p in enumerate(compact.last_packed.positions)}) > 1, "more than one range shown"
    labelled = SemanticMemoryHook(manager=m, max_context_length=None, max_context_tokens=80, include_metadata=True)
    lines = context_of(labelled.enrich_text(question))
    assert lines == [f"[Message {msg.position}, {msg.role}]: {msg.data['content'][0]['text']}"
                     for msg in labelled.last_packed.messages]
    # the same budget buys at least as many messages without the labels, and the cost counted covers the text
    counter = default_token_counter()
    small = [SemanticMemoryHook(manager=m, max_context_length=None, max_context_tokens=60, include_metadata=flag)
             for flag in (False, True)]
    bodies = [context_of(h.enrich_text(question)) for h in small]
    assert len(bodies[0]) >= len(bodies[1]) and len(small[0].last_packed.messages) > len(small[1].last_packed.messages)
    assert sum(counter.count(line) + 1 for line in bodies[0]) <= small[0].last_packed.spent[1] <= 60
