"""The offline summarizer: layout, facts kept, budget, exclusions, determinism."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fullrecall.messages import parse_messages
from fullrecall.messages.model import Message, TextBlock, ToolResultBlock, ToolUseBlock
from fullrecall.summarizers import Exclusions, ExtractiveSummarizer, Summarizer
from fullrecall.summarizers.checks import is_exclusion_request, private_values
from fullrecall.summarizers.extractive import HEADER, WITHHELD
from fullrecall.tokens import default_token_counter


def test_layout_facts_and_report(tech_conversation, citations):
    summarizer = ExtractiveSummarizer()
    assert isinstance(summarizer, Summarizer)
    summary = summarizer.summarize(tech_conversation)
    text = summary.text
    assert text.startswith(HEADER)
    assert re.search(r"^\* Topic 1: ", text, re.M)
    for item in citations + ["RTX 4090", "Llama-3.1", "deploy/vllm.yaml"]:  # a quarter of the input: citations first
        assert item in text, item
    roomy = ExtractiveSummarizer(target_ratio=None).summarize(tech_conversation)  # only the 800-token cap
    for item in ["tensor_parallel_size", "2024-05-03", "GPT-4o", "A100"]:
        assert item in roomy.text, item
    assert summary.method == "extractive"
    assert summary.positions == tuple(range(len(tech_conversation)))
    assert summary.token_count == default_token_counter().count(text)
    assert summary.token_count < sum(len(m["content"]) for m in tech_conversation) / 4  # it did compress
    assert not set(citations) & set(summary.report.missing)
    assert roomy.report.missing == []


def test_reference_number_from_the_demo_never_appears(tech_conversation):
    summary = ExtractiveSummarizer().summarize(tech_conversation)
    assert "700" not in summary.text
    assert summary.report.excluded_messages == [0]
    assert WITHHELD in summary.text


def test_same_input_same_output(tech_conversation):
    a = ExtractiveSummarizer().summarize(tech_conversation).text
    b = ExtractiveSummarizer().summarize(tech_conversation).text
    assert a == b


def test_previous_summary_is_carried_forward():
    previous = "## Conversation Summary\n* Topic 1: The user chose PostgreSQL 16 for the store [7]."
    msgs = [{"role": "user", "content": "Now let's pick a cache. Redis 7.2 or Memcached?"},
            {"role": "assistant", "content": "Redis 7.2 supports streams and persistence [8]."}]
    text = ExtractiveSummarizer().summarize(msgs, previous_summary=previous).text
    for item in ("PostgreSQL 16", "[7]", "Redis 7.2", "[8]"):
        assert item in text


def test_tool_runs_are_listed_with_their_results():
    msgs = [
        Message("user", [TextBlock("What's the weather in Lisbon?")], position=10),
        Message("assistant", [ToolUseBlock("t1", "get_weather", {"city": "Lisbon"})], position=11),
        Message("user", [ToolResultBlock("t1", (TextBlock("22 °C, sunny"),))], position=12),
        Message("assistant", [TextBlock("It is 22 °C and sunny in Lisbon.")], position=13),
    ]
    summary = ExtractiveSummarizer().summarize(msgs)
    assert "## Tools Executed" in summary.text
    assert 'get_weather({"city": "Lisbon"}) → 22 °C, sunny' in summary.text
    assert summary.positions == (10, 11, 12, 13)


def test_private_by_pattern_by_message_and_by_metadata():
    msgs = [
        {"role": "user", "content": "My account is ACCT-99812 and my dog is called Biscuit."},
        {"role": "assistant", "content": "Noted, ACCT-99812 is on file."},
        {"role": "user", "content": "My locker code is 4471, it opens locker B12 in Building Nine.",
         "metadata": {"private": True}},
        {"role": "user", "content": "Also my badge id is QX-3318 for the Lisbon office."},
    ]
    _, parsed = parse_messages(msgs)
    exclusions = Exclusions(patterns=[r"ACCT-\d+"], messages={3})
    text = ExtractiveSummarizer(exclusions=exclusions).summarize(parsed).text
    for secret in ("ACCT-99812", "4471", "B12", "QX-3318"):
        assert secret not in text
    assert "Biscuit" in text  # the rest of a sentence with a private pattern is kept
    assert "[private]" in text


def test_a_budget_smaller_than_the_header_still_holds():
    msgs = [{"role": "user", "content": "The RTX 4090 has 24 GB [1]."}]
    counter = default_token_counter()
    for budget in (1, 3, 8, 20):
        summary = ExtractiveSummarizer(budget, token_counter=counter).summarize(msgs)
        assert counter.count(summary.text) <= budget


_WORDS = st.sampled_from(["GPU", "Lisbon", "costs", "the", "RTX 4090", "[3]", "2024-05-03", "deploy/app.py",
                          "we", "decided", "tensor_parallel_size", "$40", "12 GB", "Maria", "is", "fast", "?"])
_SENTENCE = st.lists(_WORDS, min_size=1, max_size=14).map(lambda ws: " ".join(ws) + ".")
_MESSAGE = st.lists(_SENTENCE, min_size=1, max_size=5).map(" ".join)


@settings(max_examples=60)
@given(texts=st.lists(_MESSAGE, min_size=1, max_size=12), budget=st.integers(min_value=1, max_value=300),
       ratio=st.sampled_from([None, 0.25]))
def test_never_over_max_summary_tokens(texts, budget, ratio):
    counter = default_token_counter()
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
    summary = ExtractiveSummarizer(budget, target_ratio=ratio, token_counter=counter).summarize(msgs)
    assert summary.token_count <= budget
    assert counter.count(summary.text) <= budget
    assert summary.positions == tuple(range(len(texts)))


_SECRET = st.from_regex(r"SECRET-[0-9]{2,6}", fullmatch=True)


@settings(max_examples=60)
@given(texts=st.lists(st.tuples(_MESSAGE, st.one_of(st.none(), _SECRET)), min_size=1, max_size=10))
def test_excluded_patterns_never_present(texts):
    msgs = [{"role": "user" if i % 2 == 0 else "assistant",
             "content": text if secret is None else f"{text} The code is {secret}. {text}"}
            for i, (text, secret) in enumerate(texts)]
    summary = ExtractiveSummarizer(exclusions=Exclusions(patterns=[r"SECRET-\d+"])).summarize(msgs)
    assert re.search(r"SECRET-\d+", summary.text) is None


def test_a_private_value_stays_out_of_later_summaries_too():
    """Round two no longer holds the request, only a reminder of the number: it must stay out anyway."""
    summarizer = ExtractiveSummarizer()
    first = [{"role": "user", "content": "My reference is 4412. Don't include it in any summary."},
             {"role": "assistant", "content": "Understood, reference 4412 noted and kept out of summaries."}]
    later = [{"role": "user", "content": "As a reminder, ref 4412 is for the Lisbon RTX 4090 order."},
             {"role": "assistant", "content": "Noted: the Lisbon RTX 4090 order, reference 4412."}]
    assert "4412" not in summarizer.summarize(first).text
    text = summarizer.summarize(later).text
    assert "4412" not in text and "RTX 4090" in text


@pytest.mark.parametrize("text, asks, values", [
    ("Our shared reference number for this conversation is 700. Please keep this number for our records but "
     "don't include it in any summary.", True, {"700"}),
    ("Keep my phone number out of any summary: 555-0101.", True, {"555-0101"}),
    ("Do not summarize this: the password is hunter2.", True, {"hunter2"}),
    ('Please never put "Project Falcon" in the summaries.', True, {"Project Falcon"}),
    ("The special word is pineapple. Don't mention it in the summary.", True, {"pineapple"}),
    ("I never include dates in my summaries at work.", False, set()),
    ("Can you summarize what we did so far?", False, set()),
    # a request after a clause, or phrased around the summary: each missed, so its value went into summaries
    ("My email is Bob.Smith@example.com, never put it in a summary.", True, {"Bob.Smith@example.com"}),
    ("My PIN is 4821 and never include it in any summary.", True, {"4821"}),
    ("My PIN is 4821; you should never mention it in the summaries.", True, {"4821"}),
    ("The door code is 7710. Make sure it never appears in a summary.", True, {"7710"}),
    ("Make sure the summary never mentions my badge number 88213.", True, {"88213"}),
    ("Don't let the code 5521 end up in any summary.", True, {"5521"}),
    ("My PIN is 4821 and the summary must not include it.", True, {"4821"}),
    ("My PIN is 4821 \u2014 not for the summary.", True, {"4821"}),
    # questions and complaints about what a summary holds are not requests (their values would be kept out)
    ("Why does the date 2024-05-03 not appear in the summary?", False, set()),
    ("The summary doesn't include the date 2024-05-03.", False, set()),
    ("Summaries never mention tool calls in this app, which is odd.", False, set()),
    ("The summary should include every citation.", False, set()),
])
def test_requests_to_keep_things_out_of_summaries(text, asks, values):
    assert is_exclusion_request(text) is asks
    if asks:
        assert values <= set(private_values(text))


def test_an_email_asked_out_of_summaries_after_a_comma_stays_out():
    """'..., never put it in a summary' makes the message private and its email an excluded term everywhere."""
    msgs = [{"role": "user", "content": "My email is Bob.Smith@example.com, never put it in a summary."},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": "Send the A100 cluster report to bob.smith@example.com by Friday."}]
    text = ExtractiveSummarizer().summarize(msgs).text
    assert "example.com" not in text.lower() and "A100" in text


def test_summarizing_twice_carries_facts_not_layout():
    summarizer = ExtractiveSummarizer(target_ratio=None)
    first = summarizer.summarize([{"role": "user", "content": "Maria moved to Lisbon on 2024-05-03 for the RTX 4090 lab."}])
    second = summarizer.summarize([{"role": "user", "content": "Now she runs Llama-3.1 70B there [4]."}],
                                  previous_summary=first.text)
    for item in ("Maria", "Lisbon", "2024-05-03", "RTX 4090", "Llama-3.1", "[4]"):
        assert item in second.text
    assert second.text.count("## Conversation Summary") == 1
    assert "Topic 1: " in second.text and "- Topic 1:" not in second.text



def test_citations_are_never_traded_for_prose():
    """Room to list every citation is reserved before prose is picked (a conversation a fuzzer found: seven
    citations, a budget of 100 tokens): a topic line's cost, the key-details line and the order details are
    dropped in let [93] slip out while prose and a detail ("May") were kept."""
    data = json.loads((Path(__file__).parent / "cited_conversation.json").read_text())
    summary = ExtractiveSummarizer(max_summary_tokens=100, target_ratio=None, min_summary_tokens=16,
                                   exclusions=Exclusions(patterns=[r"\bACCT-\d+\b"])).summarize(data["msgs"], data["prev"])
    cited = set(re.findall(r"\[\d+\]", " ".join(m["content"] for m in data["msgs"]) + data["prev"]))
    assert any(line.startswith("  - ") for line in summary.text.splitlines())  # prose was picked
    assert cited <= set(re.findall(r"\[\d+\]", summary.text)) and summary.token_count <= 100


_CITED_WORDS = st.sampled_from(["GPU", "Lisbon", "costs", "the", "RTX 4090", "[1]", "[2]", "[17]", "2024-05-03",
                                "Maria", "decided", "we", "ok", "thanks", "?"])
_CITED_SENTENCE = st.one_of(
    st.lists(_CITED_WORDS, min_size=1, max_size=10).map(lambda ws: " ".join(ws) + "."),
    st.sampled_from(["[1].", "[2]", "[3].", "See [4].", "ok [5].", "Thanks [6]!", "[7][8].", "(9) [9]."]),
)


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.lists(_CITED_SENTENCE, min_size=1, max_size=4).map(" ".join), min_size=1, max_size=8),
       budget=st.integers(min_value=16, max_value=300))
def test_a_summary_with_prose_holds_every_citation(texts, budget):
    """Citations are never traded for prose: whatever sentence a citation stands in (alone, after a
    greeting, with no word), a summary that picked any prose lists every citation of its messages.
    """
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
    summary = ExtractiveSummarizer(budget, target_ratio=None, min_summary_tokens=16).summarize(msgs)
    cited = set(re.findall(r"\[\d+\]", " ".join(texts)))
    if any(line.startswith("  - ") for line in summary.text.splitlines()):
        assert cited <= set(re.findall(r"\[\d+\]", summary.text)), summary.text
    assert summary.token_count <= budget
