"""Both summarizers inside SummarizingConversationManager: the seed demo, and failure keeping every message."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")

from summarizer_peers import Reply, completion

from fullrecall.summarizers import ExtractiveSummarizer, LLMSummarizer, OpenAIChatModel
from fullrecall.window import SummarizingConversationManager

TOPICS = ["data structures", "arrays", "linked lists", "stacks", "queues", "hash tables", "trees", "graphs",
          "sorting algorithms"]


def demo_conversation() -> list[dict]:
    """The seed demo: a private reference number, then 18 messages about data structures (Converse shape)."""
    msgs = [
        {"role": "user", "content": [{"text": "Our shared reference number for this conversation is 700. Please keep "
                                              "this number for our records but don't include it in any summary."}]},
        {"role": "assistant", "content": [{"text": "Understood. I'll keep our shared reference number 700 for our "
                                                   "records and leave it out of summaries."}]},
    ]
    for topic in TOPICS:
        msgs.append({"role": "user", "content": [{"text": f"Tell me about {topic}."}]})
        msgs.append({"role": "assistant", "content": [{"text": f"{topic.capitalize()} organize data; in Python the "
                                                               f"{topic} example uses collections.deque [1]."}]})
    return msgs


def test_default_manager_uses_the_extractive_summarizer_and_drops_700():
    messages = demo_conversation()
    removed = []
    manager = SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=8, on_remove=removed.append)
    assert isinstance(manager.summarizer, ExtractiveSummarizer)
    manager.reduce_context(messages, RuntimeError("overflow"))
    summary = messages[0]["content"][0]["text"]
    assert summary.startswith("## Conversation Summary") and "* Topic 1:" in summary
    assert "700" not in summary and "[1]" in summary
    archived = " ".join(m.text for event in removed for m in event.messages)
    assert "reference number for this conversation is 700" in archived  # recallable verbatim


def test_llm_summarizer_in_the_manager_redacts_a_leak(llm_server):
    messages = demo_conversation()
    llm_server.script(completion("## Conversation Summary\n* Topic 1: data structures [1]\n* Reference 700"))
    model = OpenAIChatModel("m", base_url=llm_server.base_url, timeout=2.0, max_retries=0)
    manager = SummarizingConversationManager(summarizer=LLMSummarizer(model), summary_ratio=0.5,
                                             preserve_recent_messages=8)
    manager.reduce_context(messages, RuntimeError("overflow"))
    summary = messages[0]["content"][0]["text"]
    assert "700" not in summary and "[1]" in summary and "Reference [private]" in summary


def test_llm_failure_with_raise_keeps_every_message(llm_server):
    messages = demo_conversation()
    before = [dict(m) for m in messages]
    llm_server.script(Reply(status=500, body=b"down"), Reply(status=500, body=b"down"))
    model = OpenAIChatModel("m", base_url=llm_server.base_url, timeout=2.0, max_retries=1, backoff=0.01)
    manager = SummarizingConversationManager(summarizer=LLMSummarizer(model, fallback="raise"),
                                             preserve_recent_messages=8)
    overflow = RuntimeError("overflow")
    with pytest.raises(RuntimeError) as info:
        manager.reduce_context(messages, overflow)
    assert info.value is overflow
    assert messages == before and manager.removed_message_count == 0


def test_a_smaller_manager_budget_cuts_prose_and_keeps_the_preserved_details(llm_server, tech_conversation):
    """The summarizer (800 tokens) appends the items its model dropped as "Preserved details"; the manager's
    own budget is smaller, so it shortens the summary: the prose goes, the exact details stay."""
    prose = "\n".join(f"* Point {i}: the user compared GPUs, the RTX 4090 and the A100, and configured the server "
                      f"for Llama-3.1 70B inference." for i in range(12))
    answer = "## Conversation Summary\n" + prose
    model = OpenAIChatModel("m", base_url=llm_server.base_url, timeout=2.0, max_retries=0)
    summarizer = LLMSummarizer(model)
    removed = []
    messages = [dict(m) for m in tech_conversation]
    manager = SummarizingConversationManager(summarizer=summarizer, summary_ratio=0.8, preserve_recent_messages=2,
                                             max_summary_tokens=120, on_remove=removed.append)
    llm_server.script(completion(answer), completion(answer))
    manager.reduce_context(messages, RuntimeError("overflow"))
    text = manager.summary_message["content"]

    llm_server.script(completion(answer), completion(answer))  # the same messages, summarized alone
    alone = summarizer.summarize(removed[0].messages)
    assert alone.report.appended and "## Preserved details" in alone.text  # the setting this test is about
    assert manager.token_counter.count(alone.text) > 120
    assert manager.token_counter.count(text) <= 120
    assert "[summary shortened to fit its token budget]" in text and "* Point 11" not in text
    assert text.startswith("## Conversation Summary\n* Point 0:")
    assert text.endswith("\n\n" + alone.text[alone.text.index("## Preserved details"):])
    for item in alone.report.appended:
        assert item in text, item


def test_preserved_details_over_the_budget_on_their_own_are_cut_like_any_text():
    details = "## Preserved details\n" + "\n".join(f"* item-{i}" for i in range(300))
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(10)]
    manager = SummarizingConversationManager(summarizer=lambda m, p: "* prose\n\n" + details,
                                             max_summary_tokens=60, preserve_recent_messages=2)
    manager.reduce_context(messages, RuntimeError("overflow"))
    text = manager.summary_message["content"]
    assert manager.token_counter.count(text) <= 60 and text.endswith("[summary shortened to fit its token budget]")
    assert text.startswith("* prose\n\n## Preserved details\n* item-0")
