"""LLMSummarizer against a real OpenAI-compatible server on a loopback port.

Every scripted misbehaviour ends in a summary with every citation, no private
item and every message covered, or in an error that keeps every message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import pytest

pytest.importorskip("httpx")
from hypothesis import given, settings
from hypothesis import strategies as st
from summarizer_peers import Reply, completion

from fullrecall.errors import InvalidInput, SummarizationError
from fullrecall.summarizers import (
    ChatModelError,
    ChatResponse,
    Exclusions,
    LLMSummarizer,
    OpenAIChatModel,
    summarizer_from_prompt,
)
from fullrecall.summarizers.llm import DEFAULT_SYSTEM_PROMPT

SEED_002_PROMPT = """
You are summarizing a technical conversation. Create a concise bullet-point summary that:
- Focuses on code changes, architectural decisions, and technical solutions
- Preserves specific function names, file paths, and configuration details
- Omits conversational elements and focuses on actionable information
- Uses technical terminology appropriate for software development

Format as bullet points without conversational language.
"""


def client(server, **kw) -> OpenAIChatModel:
    kw.setdefault("timeout", 2.0)
    kw.setdefault("max_retries", 1)
    kw.setdefault("backoff", 0.01)
    kw.setdefault("api_key", "sk-test")
    return OpenAIChatModel("scripted-model", base_url=server.base_url, **kw)


def assert_safe(summary, conversation, citations):
    """The three promises: every citation kept, the private number absent, every message covered."""
    for c in citations:
        assert c in summary.text, c
    assert "700" not in summary.text
    assert summary.positions == tuple(range(len(conversation)))


def test_good_summary_passes_untouched(llm_server, tech_conversation, good_summary, citations):
    llm_server.script(completion(good_summary))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.method == "llm"
    assert summary.text.startswith(good_summary)
    assert summary.report.missing == [] and not summary.report.reprompted and not summary.report.leaked
    assert_safe(summary, tech_conversation, citations)
    (body,), (headers,) = llm_server.requests, llm_server.headers
    assert headers["authorization"] == "Bearer sk-test"
    assert body["model"] == "scripted-model" and body["max_tokens"] == 800 and body["temperature"] == 0.3
    assert body["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    prompt = body["messages"][1]["content"]
    assert "700" not in prompt  # the model never sees the private number
    assert "keep these items exactly as written: " in prompt and "[5]" in prompt


def test_dropped_citation_is_asked_for_again(llm_server, tech_conversation, good_summary, citations):
    dropped = good_summary.replace(" [4]", "")
    llm_server.script(completion(dropped), completion(good_summary))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.report.missing == ["[4]"] and summary.report.reprompted and summary.report.appended == []
    assert "Preserved details" not in summary.text
    assert "[4]" in llm_server.requests[1]["messages"][-1]["content"]
    assert_safe(summary, tech_conversation, citations)


def test_citation_dropped_twice_is_appended(llm_server, tech_conversation, good_summary, citations):
    dropped = good_summary.replace(" [4]", "").replace(" [1]", "").replace("GPT-4o", "a hosted model")
    llm_server.script(completion(dropped), completion(dropped))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.report.appended == ["[1]", "[4]", "GPT-4o"]
    assert summary.text.split("## Preserved details\n")[1].splitlines() == ["* [1]", "* [4]", "* GPT-4o"]
    assert_safe(summary, tech_conversation, citations)


def test_an_item_dropped_is_missing_even_when_a_longer_one_contains_it(llm_server):
    conversation = [
        {"role": "user", "content": "Issue #12 is the login bug and JIRA-12 tracks it; issue #123 is the crash "
                                    "in v1.2.3, tracked as JIRA-123. We run v1.2 on hosts with 24 GB of RAM."},
        {"role": "assistant", "content": "Noted: the crash (#123, JIRA-123) in v1.2.3 comes first; the login bug "
                                         "#12 (JIRA-12) after it. Upgrade the 124 GB hosts later [1]."},
    ]
    dropped = ("* The user reported issue #123, the crash in v1.2.3, tracked as JIRA-123, and a login bug.\n"
               "* The assistant will fix the crash first and upgrade the 124 GB hosts later [1].")
    llm_server.script(completion(dropped), completion(dropped))
    summary = LLMSummarizer(client(llm_server)).summarize(conversation)
    assert summary.report.missing == ["#12", "JIRA-12", "v1.2", "24 GB"] == summary.report.appended
    assert "#12, JIRA-12, v1.2, 24 GB" in llm_server.requests[1]["messages"][-1]["content"]


def test_leaked_private_number_is_redacted(llm_server, tech_conversation, good_summary, citations, caplog):
    leaky = good_summary + "\n* The shared reference number is 700."
    llm_server.script(completion(leaky))
    with caplog.at_level(logging.WARNING, logger="fullrecall.summarizers"):
        summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.report.leaked == 1 and summary.report.redacted
    assert "The shared reference number is [private]." in summary.text
    assert "leaked 1 private item" in caplog.text
    assert_safe(summary, tech_conversation, citations)


@pytest.mark.parametrize("written", ["ACCT 55123", "ACCT\u201155123", "acct_55123", "account number 55123",
                                     "account 55,123", "account 55 123", "account \uff15\uff15\uff11\uff12\uff13",
                                     "ACCT-55\u200b123", "ACCT-\uff15\uff15123"])
def test_a_private_id_rewritten_by_the_model_is_redacted(llm_server, tech_conversation, good_summary, citations,
                                                        written):
    """A private id the model spells its own way (a space or a non-breaking hyphen for the hyphen, the number
    alone, its digits grouped, full-width or split by a zero-width space) is a leak too: it went into the
    summary, only the id as written was looked for."""
    conversation = [{"role": "user", "content": "My account is ACCT-55123. Don't include it in any summary."},
                    *tech_conversation]
    llm_server.script(completion(good_summary + f"\n* The user's account is {written}."))
    summary = LLMSummarizer(client(llm_server)).summarize(conversation)
    assert "55123" not in summary.text and written.split()[-1] not in summary.text and summary.report.leaked >= 1
    assert_safe(summary, conversation, citations)


def test_leak_in_the_reask_is_redacted_too(llm_server, tech_conversation, good_summary, citations):
    llm_server.script(completion(good_summary.replace(" [3]", "")), completion(good_summary + " Ref 700."))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.report.reprompted and summary.report.redacted
    assert_safe(summary, tech_conversation, citations)


def test_timeout_falls_back_to_extractive(llm_server, tech_conversation, good_summary, citations, caplog):
    llm_server.script(Reply(delay=1.0, body=b"{}"), Reply(delay=1.0, body=b"{}"))
    model = client(llm_server, timeout=0.2, max_retries=1)
    with caplog.at_level(logging.WARNING, logger="fullrecall.summarizers"):
        summary = LLMSummarizer(model).summarize(tech_conversation)
    assert summary.method == "extractive" and summary.report.fallback == "extractive"
    assert len(llm_server.requests) == 2  # the client retried once, the summarizer did not repeat that
    assert "timed out after 0.2 s" in summary.report.errors[0] and "ReadTimeout" in summary.report.errors[0]
    assert "falling back to extractive" in caplog.text
    assert_safe(summary, tech_conversation, citations)


def test_http_500_is_retried_by_the_client_then_succeeds(llm_server, tech_conversation, good_summary, citations):
    llm_server.script(Reply(status=500, body=b'{"error": "boom"}'), completion(good_summary))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.method == "llm" and len(llm_server.requests) == 2
    assert_safe(summary, tech_conversation, citations)


def test_http_429_honours_retry_after(llm_server, tech_conversation, good_summary):
    llm_server.script(Reply(status=429, body=b'{"error": "slow down"}', headers={"Retry-After": "0"}),
                      completion(good_summary))
    summary = LLMSummarizer(client(llm_server, backoff=5.0)).summarize(tech_conversation)  # 5 s unless Retry-After
    assert summary.method == "llm"


def test_http_429_honours_retry_after_given_as_an_http_date(llm_server, tech_conversation, good_summary):
    """RFC 9110 lets Retry-After be a date: it was read as no Retry-After at all (the backoff of 5 s was waited)."""
    from email.utils import formatdate

    llm_server.script(Reply(status=429, body=b"{}", headers={"Retry-After": formatdate(time.time() + 1, usegmt=True)}),
                      completion(good_summary))
    started = time.monotonic()
    summary = LLMSummarizer(client(llm_server, backoff=5.0, max_backoff=30.0)).summarize(tech_conversation)
    assert summary.method == "llm" and time.monotonic() - started < 3.5


@pytest.mark.parametrize("value", ["86400", "1e400", "inf"])
def test_a_huge_retry_after_waits_max_backoff_at_most(llm_server, tech_conversation, good_summary, value):
    llm_server.script(Reply(status=429, body=b"{}", headers={"Retry-After": value}), completion(good_summary))
    started = time.monotonic()
    summary = LLMSummarizer(client(llm_server, backoff=5.0, max_backoff=0.2)).summarize(tech_conversation)
    assert summary.method == "llm" and time.monotonic() - started < 3.0


@pytest.mark.parametrize("value", ["soon", "-5", "nan", "Wed, 99 Oct 2015 07:28:00 GMT", ""])
def test_an_unreadable_retry_after_falls_back_to_the_backoff(llm_server, tech_conversation, good_summary, value):
    llm_server.script(Reply(status=429, body=b"{}", headers={"Retry-After": value}), completion(good_summary))
    started = time.monotonic()
    summary = LLMSummarizer(client(llm_server, backoff=0.01)).summarize(tech_conversation)
    assert summary.method == "llm" and time.monotonic() - started < 3.0


@pytest.mark.parametrize("fallback", ["extractive", "truncation"])
def test_persistent_500_falls_back(llm_server, tech_conversation, citations, fallback):
    llm_server.script(*[Reply(status=500, body=b'{"error": "down"}')] * 2)
    summary = LLMSummarizer(client(llm_server), fallback=fallback).summarize(tech_conversation)
    assert summary.method == fallback
    assert "HTTP 500" in summary.report.errors[0]
    assert_safe(summary, tech_conversation, citations)  # truncation appends the citations it must keep
    if fallback == "truncation":
        assert "moved to the archive" in summary.text and summary.report.appended


def test_fallback_raise_keeps_every_message(llm_server, tech_conversation):
    llm_server.script(*[Reply(status=503, body=b"unavailable")] * 2)
    with pytest.raises(SummarizationError, match="no message removed.*HTTP 503"):
        LLMSummarizer(client(llm_server), fallback="raise").summarize(tech_conversation)


def test_client_errors_are_not_retried(llm_server, tech_conversation, citations):
    llm_server.script(Reply(status=401, body=b'{"error": "bad key"}'))
    summary = LLMSummarizer(client(llm_server, max_retries=3)).summarize(tech_conversation)
    assert len(llm_server.requests) == 1 and "HTTP 401" in summary.report.errors[0]
    assert_safe(summary, tech_conversation, citations)


@pytest.mark.parametrize("bad, cause", [
    (Reply(body=b"{not json"), "malformed"),
    (Reply(body=b'{"choices": []}'), "malformed"),
    (Reply(body=b'{"choices": [null]}'), "malformed"),
    (Reply(body=b'{"choices": [{"message": "a bare string"}]}'), "malformed"),
    (Reply(body=b'{"choices": [{"message": {"content": [{"text": 7}]}}]}'), "malformed"),
    (completion(""), "empty answer"),
    (completion("   \n "), "empty answer"),
    (completion("I'm sorry, but I can't help with summarizing this conversation."), "refusal"),
    (completion(None, refusal="I refuse."), "refused"),
    (completion("{{{ ### ]]] 0x00 0x01 ;;; }}}"), "garbage"),
    (completion("Lorem ipsum dolor sit amet consectetur adipiscing elit sed eiusmod tempor incididunt labore"),
     "unrelated"),
    (completion("* The user asked about GPUs " * 40, finish_reason="length"), "over-long"),
    (completion("* The user asked about GPUs and RTX cards. " * 200), "over-long"),
])
def test_bad_answers_are_retried_then_fall_back(llm_server, tech_conversation, citations, bad, cause):
    llm_server.script(*[bad] * 4)
    model = client(llm_server, max_retries=1)
    summary = LLMSummarizer(model, retries=1).summarize(tech_conversation)
    assert summary.method == "extractive"
    assert len(summary.report.errors) == 2 and all(cause in e for e in summary.report.errors), summary.report.errors
    assert_safe(summary, tech_conversation, citations)


def test_bad_answer_then_good_one(llm_server, tech_conversation, good_summary, citations):
    llm_server.script(completion(""), completion(good_summary))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.method == "llm" and summary.report.attempts == 2 and summary.report.errors == ["empty answer"]
    assert_safe(summary, tech_conversation, citations)


def test_disabled_means_truncation_without_a_call(llm_server, tech_conversation, citations):
    summary = LLMSummarizer(client(llm_server), enabled=False).summarize(tech_conversation)
    assert llm_server.requests == [] and summary.method == "truncation"
    assert_safe(summary, tech_conversation, citations)


@pytest.mark.parametrize("budget", [60, 800])
def test_truncation_summaries_fold_into_one_note_counting_every_message(llm_server, budget):
    from fullrecall.window import SummarizingConversationManager

    summarizer = LLMSummarizer(client(llm_server), enabled=False, max_summary_tokens=budget)
    manager = SummarizingConversationManager(summarizer=summarizer, preserve_recent_messages=2, max_history_turns=1)
    messages: list[dict] = []
    for i in range(12):
        messages += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
        manager.apply_management(messages)
    text = messages[0]["content"]
    removed = manager.removed_message_count
    assert removed > 12 and text.count("## Conversation Summary") == 1 and text.count("earlier messages") == 1
    assert f"* {removed} earlier messages (positions 0-{removed - 1}) were moved to the archive" in text
    assert llm_server.requests == []


def test_settings_from_seed_003(llm_server, tech_conversation, good_summary):
    settings = {"enabled": True, "max_summary_tokens": 500, "summary_temperature": 0.1}
    llm_server.script(completion(good_summary))
    LLMSummarizer(client(llm_server), **settings).summarize(tech_conversation)
    body = llm_server.requests[0]
    assert body["max_tokens"] == 500 and body["temperature"] == 0.1


def test_previous_summary_is_sent_and_its_citations_kept(llm_server, tech_conversation, good_summary):
    previous = "## Conversation Summary\n* Earlier the user compared PostgreSQL 16 and SQLite [9]."
    llm_server.script(completion(good_summary), completion(good_summary))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation, previous_summary=previous)
    assert "<earlier_summary>" in llm_server.requests[0]["messages"][1]["content"]
    assert "[9]" in summary.text and "PostgreSQL 16" in summary.text


def test_async_path(llm_server, tech_conversation, good_summary, citations):
    llm_server.script(completion(good_summary.replace(" [2]", "")), completion(good_summary))
    summary = asyncio.run(LLMSummarizer(client(llm_server)).asummarize(tech_conversation))
    assert summary.method == "llm" and summary.report.reprompted
    assert_safe(summary, tech_conversation, citations)


def test_async_timeout_falls_back(llm_server, tech_conversation, citations):
    llm_server.script(Reply(delay=1.0, body=b"{}"))
    summary = asyncio.run(LLMSummarizer(client(llm_server, timeout=0.2, max_retries=0)).asummarize(tech_conversation))
    assert summary.method == "extractive" and "timed out" in summary.report.errors[0]
    assert_safe(summary, tech_conversation, citations)


def test_summarizer_from_prompt_uses_env_and_seed_002_prompt(llm_server, tech_conversation, good_summary,
                                                             monkeypatch):
    monkeypatch.setenv("FULLRECALL_LLM_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("FULLRECALL_LLM_API_KEY", "sk-env")
    monkeypatch.setenv("FULLRECALL_LLM_MODEL", "env-model")
    llm_server.script(completion(good_summary))
    summarizer = summarizer_from_prompt(SEED_002_PROMPT)
    summary = summarizer.summarize(tech_conversation)
    body, headers = llm_server.requests[0], llm_server.headers[0]
    assert body["model"] == "env-model" and headers["authorization"] == "Bearer sk-env"
    assert body["messages"][0] == {"role": "system", "content": SEED_002_PROMPT}
    assert summary.method == "llm"


def test_openai_standard_env_vars(llm_server, monkeypatch):
    for var in ("FULLRECALL_LLM_BASE_URL", "FULLRECALL_LLM_API_KEY", "FULLRECALL_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("OPENAI_MODEL", "gpt-4o-mini")
    model = OpenAIChatModel.from_env()
    assert (model.base_url, model.api_key, model.model) == (llm_server.base_url, "sk-openai", "gpt-4o-mini")


def test_no_model_configured_names_the_variables(monkeypatch):
    for var in ("FULLRECALL_LLM_MODEL", "OPENAI_MODEL", "FULLRECALL_BEDROCK_MODEL_ID", "FULLRECALL_LLM_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ChatModelError, match="FULLRECALL_LLM_MODEL.*FULLRECALL_BEDROCK_MODEL_ID"):
        summarizer_from_prompt(SEED_002_PROMPT)
    assert issubclass(ChatModelError, SummarizationError)


def test_azure_style_key_header_and_api_version(llm_server, tech_conversation, good_summary):
    llm_server.script(completion(good_summary))
    model = client(llm_server, api_key_header="api-key", api_version="2024-10-21")
    LLMSummarizer(model).summarize(tech_conversation)
    assert llm_server.headers[0]["api-key"] == "sk-test" and "authorization" not in llm_server.headers[0]


def test_report_serializes(llm_server, tech_conversation, good_summary):
    llm_server.script(completion(good_summary + " 700"))
    report = LLMSummarizer(client(llm_server)).summarize(tech_conversation).report.as_dict()
    assert json.loads(json.dumps(report))["leaked"] == 1
    assert "700" not in json.dumps(report)  # the report counts private items, never repeats them


_FACT = st.sampled_from(["The RTX 4090 has 24 GB", "Llama-3.1 70B runs at 4-bit", "see deploy/vllm.yaml",
                         "GPT-4o is cheaper", "we met on 2024-05-03", "the budget is $4,000"])


@settings(max_examples=40)
@given(turns=st.lists(st.tuples(_FACT, st.integers(1, 9), st.one_of(st.none(), st.from_regex(r"SECRET-[0-9]{2,5}",
                                                                                            fullmatch=True))),
                      min_size=1, max_size=8),
       keep=st.lists(st.booleans(), min_size=8, max_size=8), echo_secrets=st.booleans())
def test_no_scripted_answer_gets_a_leak_or_a_dropped_citation_past_the_checks(_server, turns, keep, echo_secrets):
    """Whatever the model writes (any subset of the facts, with or without the secrets), the result holds."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"{fact} [{n}]." + (f" My token is {secret}." if secret else "")}
            for i, (fact, n, secret) in enumerate(turns)]
    answer = "\n".join(f"* {m['content'] if echo_secrets else m['content'].split(' My token')[0]}"
                       for m, k in zip(msgs, keep) if k) or "* The user and the assistant talked about hardware."
    _server.script(completion(answer), completion(answer))
    summarizer = LLMSummarizer(client(_server), exclusions=Exclusions(patterns=[r"SECRET-\d+"]))
    summary = summarizer.summarize(msgs)
    assert re.search(r"SECRET-\d+", summary.text) is None
    for _, n, _ in turns:
        assert f"[{n}]" in summary.text
    assert summary.positions == tuple(range(len(msgs)))


def test_required_items_fit_in_the_budget_before_prose_does(llm_server, tech_conversation, citations):
    """A long answer without citations: body lines go, citations stay, the whole fits max_summary_tokens."""
    prose = "\n".join(f"* Point {i}: the GPU buy, local inference, quantization and server config were compared." for i in range(9))
    llm_server.script(completion(prose), completion(prose))
    summary = LLMSummarizer(client(llm_server), max_summary_tokens=200).summarize(tech_conversation)
    assert summary.token_count <= 200 and not summary.report.over_budget
    assert "* Point 0:" in summary.text and "* Point 8:" not in summary.text
    assert_safe(summary, tech_conversation, citations)


@pytest.mark.parametrize("run", ["sync", "async"])
@pytest.mark.parametrize("head", [True, False], ids=["trickled-head", "trickled-body"])
def test_a_server_trickling_bytes_hits_the_deadline_per_request(llm_server, tech_conversation, good_summary,
                                                                citations, run, head):
    """Each byte comes well within the read timeout, yet the whole answer would take a minute: the deadline
    per request ends each try, whether the bytes trickle in the status line and headers or in the body."""
    body = completion(good_summary).body
    llm_server.script(*[Reply(body=body, trickle=0.05, trickle_head=head)] * 2)
    model = client(llm_server, timeout=2.0, deadline=0.6, max_retries=1)
    summarizer = LLMSummarizer(model)
    started = time.monotonic()
    summary = (summarizer.summarize(tech_conversation) if run == "sync"
               else asyncio.run(summarizer.asummarize(tech_conversation)))
    elapsed = time.monotonic() - started
    assert summary.method == "extractive" and len(llm_server.requests) == 2
    assert elapsed < 4.0, elapsed  # two tries of 0.6 s plus backoff, not the ~100 s the trickle takes
    assert "deadline of 0.6 s per request" in summary.report.errors[0], summary.report.errors
    assert_safe(summary, tech_conversation, citations)


def test_deadline_defaults_to_twice_the_timeout_and_reads_the_environment(llm_server, monkeypatch):
    assert client(llm_server, timeout=5.0).deadline == 10.0
    assert OpenAIChatModel("m").deadline == 120.0
    monkeypatch.setenv("FULLRECALL_LLM_MODEL", "m")
    monkeypatch.setenv("FULLRECALL_LLM_DEADLINE", "42")
    assert OpenAIChatModel.from_env().deadline == 42.0
    with pytest.raises(ValueError, match="deadline"):
        OpenAIChatModel("m", deadline=0)


# -- the API key is never shown --------------------------------------------------------------

SECRET = "sk-live-0123456789abcdef"


def test_an_api_key_read_with_its_newline_is_sent_without_it(llm_server, tech_conversation, good_summary):
    llm_server.script(completion(good_summary))
    model = OpenAIChatModel("m", base_url=llm_server.base_url, api_key=f"{SECRET}\n")
    assert LLMSummarizer(model).summarize(tech_conversation).method == "llm"
    assert llm_server.headers[0]["authorization"] == f"Bearer {SECRET}"


@pytest.mark.parametrize("key", [f"sk-live\n{SECRET}", f"{SECRET}\x00", f"{SECRET}é"])
def test_an_api_key_no_header_can_carry_is_refused_without_showing_it(llm_server, key):
    with pytest.raises(InvalidInput, match="api_key holds a character") as caught:
        OpenAIChatModel("m", base_url=llm_server.base_url, api_key=key)
    assert SECRET not in str(caught.value) and "sk-live" not in str(caught.value)
    with pytest.raises(InvalidInput, match="header 'x-api-key'") as caught:
        OpenAIChatModel("m", base_url=llm_server.base_url, headers={"x-api-key": key})
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("header", ["Authorization", "api-key"])
def test_a_server_quoting_the_api_key_in_its_error_never_gets_it_shown(llm_server, tech_conversation, caplog, header):
    def echo(status):  # a server (a proxy, say) that quotes the request's headers in its error
        def reply(_body):
            sent = llm_server.headers[-1]
            return Reply(status=status, body=json.dumps({"error": f"refused {sent}"}).encode())
        return reply

    llm_server.script(echo(500), echo(401))
    model = client(llm_server, api_key=SECRET, api_key_header=header, headers={"X-Org-Token": "tok-9f8e7d6c5b"})
    with caplog.at_level(logging.DEBUG):
        summary = LLMSummarizer(model).summarize(tech_conversation)
    assert summary.method == "extractive" and len(llm_server.requests) == 2
    assert "HTTP 401" in summary.report.errors[0] and "[redacted]" in summary.report.errors[0]
    for shown in (caplog.text, *summary.report.errors, summary.text):
        assert SECRET not in shown and "tok-9f8e7d6c5b" not in shown


def test_an_answer_holding_a_lone_surrogate_is_used_with_a_replacement_character(llm_server, tech_conversation,
                                                                                 good_summary, citations):
    """JSON may escape half a surrogate pair ("\\ud83d"): such a summary was no Unicode any store or counter takes,
    and summarize() raised a UnicodeEncodeError instead of using or falling back. The half is U+FFFD now."""
    body = completion(good_summary).body.replace(b"Topic 1:", b"Topic 1 \\ud83d:")
    llm_server.script(Reply(body=body))
    summary = LLMSummarizer(client(llm_server)).summarize(tech_conversation)
    assert summary.method == "llm" and "Topic 1 \ufffd:" in summary.text
    summary.text.encode("utf-8")  # storable
    assert_safe(summary, tech_conversation, citations)


@pytest.mark.parametrize("answer", ["a plain string", None, {"text": "a dict"}, ChatResponse(text=42)])
def test_a_chat_model_answering_no_chat_response_falls_back(tech_conversation, citations, answer):
    """A chat model of one's own returning a string (or None, or a dict) made summarize() raise an AttributeError
    instead of falling back as documented; it is a bad answer, asked again, then the fallback."""
    class OwnModel:
        name = "own"

        def complete(self, request):
            return answer

        async def acomplete(self, request):
            return answer

    summary = LLMSummarizer(OwnModel()).summarize(tech_conversation)
    assert summary.method == "extractive" and summary.report.attempts == 2
    assert "malformed: the model" in summary.report.errors[0]
    assert asyncio.run(LLMSummarizer(OwnModel()).asummarize(tech_conversation)).method == "extractive"
    assert_safe(summary, tech_conversation, citations)


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_timeout_is_refused_naming_it(monkeypatch, value):
    """A timeout of 0 (or -1, NaN) was refused as 'deadline must be a positive number of seconds, got None', and
    FULLRECALL_LLM_TIMEOUT=abc as a bare 'could not convert string to float'."""
    from fullrecall.embeddings.openai import OpenAIEmbedder

    monkeypatch.setenv("FULLRECALL_LLM_MODEL", "m")
    monkeypatch.setenv("FULLRECALL_LLM_TIMEOUT", value)
    with pytest.raises(InvalidInput, match=f"FULLRECALL_LLM_TIMEOUT must be a positive number of seconds, got '{value}'"):
        OpenAIChatModel.from_env()
    if value != "abc":
        for make in (lambda: OpenAIChatModel("m", timeout=float(value)), lambda: OpenAIEmbedder("m", timeout=float(value))):
            with pytest.raises(InvalidInput, match="timeout must be a positive number of seconds"):
                make()


def test_a_chat_request_no_provider_can_take_is_refused_naming_its_field(llm_server):
    """Half a surrogate pair in a message escaped a chat model as a bare UnicodeEncodeError (httpx cannot encode
    it), and a NaN temperature as 'Out of range float values are not JSON compliant'; each is an InvalidInput
    naming the message and field, and nothing is sent."""
    from fullrecall.summarizers.chat_models.base import ChatRequest

    with pytest.raises(InvalidInput, match=r"^chat request: message 1: 'content' is not valid Unicode \(a lone "
                                           r"surrogate at character 2\)"):
        ChatRequest(system="s", messages=({"role": "user", "content": "ok"}, {"role": "user", "content": "a \ud800"}))
    with pytest.raises(InvalidInput, match=r"^chat request: 'system' is not valid Unicode"):
        ChatRequest(system="\udfff", messages=())
    for bad in (float("nan"), float("inf"), "0.3", True):
        with pytest.raises(InvalidInput, match=f"^chat request: 'temperature' must be a finite number, not {bad!r}"):
            ChatRequest(system="s", messages=(), temperature=bad)  # type: ignore[arg-type]
    assert llm_server.requests == []


def test_an_extra_body_no_json_holds_is_refused_when_the_model_is_made(llm_server):
    """extra_body={"top_p": nan} made every request fail as a bare ValueError from httpx's JSON encoder."""
    for bad, says in (({"top_p": float("nan")}, r"extra_body: 'top_p' is nan"),
                      ({"stop": ["\ud800"]}, r"extra_body: 'stop\[0\]' is not valid Unicode"),
                      ({"seed": object()}, "extra_body: 'seed' is a object, not a JSON value")):
        with pytest.raises(InvalidInput, match=f"^{says}"):
            client(llm_server, extra_body=bad)
    assert llm_server.requests == []
