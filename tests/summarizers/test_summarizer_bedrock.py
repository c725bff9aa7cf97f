"""LLMSummarizer over Bedrock Converse, through botocore's Stubber (the real client, no network)."""

from __future__ import annotations

import pytest

boto3 = pytest.importorskip("boto3")

import json  # noqa: E402
import time  # noqa: E402

from botocore.config import Config  # noqa: E402
from botocore.stub import ANY, Stubber  # noqa: E402
from summarizer_peers import Reply, ScriptedServer, point_boto_at  # noqa: E402

from fullrecall.summarizers import BedrockChatModel, LLMSummarizer, chat_model_from_env  # noqa: E402
from fullrecall.summarizers.llm import DEFAULT_SYSTEM_PROMPT  # noqa: E402


def converse_reply(text: str, stop: str = "end_turn") -> dict:
    return {"output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": stop,
            "usage": {"inputTokens": 100, "outputTokens": 50, "totalTokens": 150}, "metrics": {"latencyMs": 12}}


@pytest.fixture
def bedrock():
    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


@pytest.fixture(scope="module")
def converse_server():
    """A real Converse peer on a loopback port: botocore parses what it sends, as it would AWS's answers."""
    server = ScriptedServer(path=lambda p: p.startswith("/model/") and p.endswith("/converse"))
    yield server
    server.close()


def converse_client(server: ScriptedServer):
    host, port = server.httpd.server_address[:2]
    return boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=f"http://{host}:{port}",
                        aws_access_key_id="test", aws_secret_access_key="test",
                        config=Config(retries={"max_attempts": 1, "mode": "standard"}))


def raw_reply(body: dict) -> Reply:
    return Reply(body=json.dumps(body).encode())


NO_MESSAGE = [
    {"output": {}, "stopReason": "end_turn"},
    {"output": {"reasoning": {"text": "thinking"}}, "stopReason": "end_turn"},  # a union member botocore lacks
    {"output": {"message": {"role": "assistant", "content": None}}, "stopReason": "end_turn"},
    {"stopReason": "end_turn"},
]


def model(client, **kw) -> BedrockChatModel:
    kw.setdefault("backoff", 0.01)
    return BedrockChatModel("us.amazon.nova-lite-v1:0", client=client, **kw)


def test_converse_request_and_good_summary(bedrock, tech_conversation, good_summary, citations):
    client, stubber = bedrock
    stubber.add_response("converse", converse_reply(good_summary), {
        "modelId": "us.amazon.nova-lite-v1:0",
        "messages": [{"role": "user", "content": [{"text": ANY}]}],
        "system": [{"text": DEFAULT_SYSTEM_PROMPT}],
        "inferenceConfig": {"maxTokens": 800, "temperature": 0.3},
    })
    summary = LLMSummarizer(model(client)).summarize(tech_conversation)
    assert summary.method == "llm" and summary.text.startswith(good_summary)
    assert all(c in summary.text for c in citations) and "700" not in summary.text


def test_throttling_is_retried(bedrock, tech_conversation, good_summary):
    client, stubber = bedrock
    stubber.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    stubber.add_response("converse", converse_reply(good_summary))
    summary = LLMSummarizer(model(client, max_retries=1)).summarize(tech_conversation)
    assert summary.method == "llm"


def test_validation_error_is_not_retried_and_falls_back(bedrock, tech_conversation, citations):
    client, stubber = bedrock
    stubber.add_client_error("converse", service_error_code="ValidationException",
                             service_message="The model returned the following errors: bad input",
                             http_status_code=400)
    summary = LLMSummarizer(model(client, max_retries=3)).summarize(tech_conversation)
    assert summary.method == "extractive" and "ValidationException" in summary.report.errors[0]
    assert all(c in summary.text for c in citations) and "700" not in summary.text


def test_max_tokens_stop_is_over_long(bedrock, tech_conversation, citations):
    client, stubber = bedrock
    for _ in range(2):
        stubber.add_response("converse", converse_reply("* The user asked about GPUs", stop="max_tokens"))
    summary = LLMSummarizer(model(client)).summarize(tech_conversation)
    assert summary.method == "extractive" and all("over-long" in e for e in summary.report.errors)
    assert all(c in summary.text for c in citations)


def test_guardrail_is_a_refusal(bedrock, tech_conversation):
    client, stubber = bedrock
    for _ in range(2):
        stubber.add_response("converse", converse_reply("Sorry, the model cannot answer.",
                                                        stop="guardrail_intervened"))
    summary = LLMSummarizer(model(client), fallback="truncation").summarize(tech_conversation)
    assert summary.method == "truncation" and all("refused" in e for e in summary.report.errors)


def test_leak_and_dropped_citation_are_repaired(bedrock, tech_conversation, good_summary, citations):
    client, stubber = bedrock
    bad = good_summary.replace(" [5]", "") + "\n* Reference number: 700."
    stubber.add_response("converse", converse_reply(bad))
    stubber.add_response("converse", converse_reply(bad))
    summary = LLMSummarizer(model(client)).summarize(tech_conversation)
    assert summary.report.redacted and summary.report.appended == ["[5]"]
    assert all(c in summary.text for c in citations) and "700" not in summary.text


def test_bedrock_from_env(monkeypatch):
    monkeypatch.delenv("FULLRECALL_LLM_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    monkeypatch.delenv("FULLRECALL_LLM_PROVIDER", raising=False)
    monkeypatch.setenv("FULLRECALL_BEDROCK_MODEL_ID", "us.amazon.nova-pro-v1:0")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    chosen = chat_model_from_env()
    assert isinstance(chosen, BedrockChatModel)
    assert (chosen.model_id, chosen.region) == ("us.amazon.nova-pro-v1:0", "eu-west-1")


@pytest.mark.parametrize("bad", NO_MESSAGE)
def test_answer_without_message_is_retried_by_the_client(converse_server, tech_conversation, good_summary,
                                                          citations, bad):
    converse_server.script(raw_reply(bad), raw_reply(converse_reply(good_summary)))
    summary = LLMSummarizer(model(converse_client(converse_server), max_retries=1)).summarize(tech_conversation)
    assert summary.method == "llm" and summary.report.attempts == 1 and summary.report.errors == []
    assert len(converse_server.requests) == 2
    assert all(c in summary.text for c in citations)


@pytest.mark.parametrize("bad", NO_MESSAGE)
def test_answers_without_message_are_retried_then_fall_back(converse_server, tech_conversation, citations, bad):
    """As with the OpenAI client: the client retries, then the summarizer asks again, then falls back."""
    converse_server.script(*[raw_reply(bad)] * 4)
    summary = LLMSummarizer(model(converse_client(converse_server), max_retries=1), retries=1
                            ).summarize(tech_conversation)
    assert summary.method == "extractive" and len(converse_server.requests) == 4
    assert len(summary.report.errors) == 2 and all("malformed" in e for e in summary.report.errors)
    assert all(c in summary.text for c in citations) and "700" not in summary.text


@pytest.mark.parametrize("head", [True, False], ids=["trickled-head", "trickled-body"])
def test_a_converse_server_trickling_bytes_hits_the_deadline_per_request(converse_server, tech_conversation,
                                                                         good_summary, citations, monkeypatch, head):
    """The client the model makes signs each request as ever and ends it at its deadline, as the OpenAI client
    does: each byte comes well within the read timeout, yet the whole answer would take a minute."""
    point_boto_at(converse_server, monkeypatch, "test", "test")
    answer = json.dumps(converse_reply(good_summary)).encode()
    converse_server.script(Reply(body=answer), *[Reply(body=answer, trickle=0.05, trickle_head=head)] * 2)
    bedrock = BedrockChatModel(region="us-east-1", timeout=2.0, deadline=0.6, max_retries=1, backoff=0.01)
    assert LLMSummarizer(bedrock).summarize(tech_conversation).method == "llm"  # sent through the deadline's path
    assert converse_server.headers[0]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")  # signed as ever
    started = time.monotonic()
    summary = LLMSummarizer(bedrock, retries=0).summarize(tech_conversation)
    elapsed = time.monotonic() - started
    assert summary.method == "extractive" and len(converse_server.requests) == 3
    assert elapsed < 4.0, elapsed  # two tries of 0.6 s plus backoff, not the minute the trickle takes
    assert "deadline of 0.6 s per request" in summary.report.errors[0], summary.report.errors
    assert all(c in summary.text for c in citations) and "700" not in summary.text


def test_bedrock_deadline_defaults_to_twice_the_timeout_and_reads_the_environment(monkeypatch):
    assert BedrockChatModel(timeout=5.0).deadline == 10.0 and BedrockChatModel().deadline == 120.0
    monkeypatch.setenv("FULLRECALL_LLM_DEADLINE", "42")
    assert BedrockChatModel.from_env().deadline == 42.0
    with pytest.raises(ValueError, match="deadline"):
        BedrockChatModel(deadline=-1)


TOKEN = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN0123456789abcdef"


def _echoing(status: int, code: str, extra: str = "") -> Reply:
    """An error whose message echoes the request's credentials, as some proxies do, and maybe ``extra`` bytes."""
    message = f"denied; x-amz-security-token={TOKEN}; secret=test-secret-0123456789{extra}"
    return Reply(status=status, body=json.dumps({"message": message}).encode(), headers={"x-amzn-ErrorType": code})


def _signed_by_a_session(server: ScriptedServer):
    """A Bedrock runtime client for ``server`` with a secret key and a session token, as a role gives them."""
    host, port = server.httpd.server_address[:2]
    return boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=f"http://{host}:{port}",
                        aws_access_key_id="AKIATESTKEY", aws_secret_access_key="test-secret-0123456789",
                        aws_session_token=TOKEN, config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def test_bedrock_errors_and_log_lines_never_show_the_session_token(converse_server, caplog):
    """A Bedrock error echoing the signed request's headers put the session token into the ChatModelError and the
    retry warning (the OpenAI clients mask their key so); a 5 MB error body went whole into both."""
    from fullrecall.errors import EmbeddingError
    from fullrecall.summarizers.chat_models.base import ChatModelError, ChatRequest

    converse_server.script(_echoing(429, "ThrottlingException"), _echoing(403, "AccessDeniedException", "x" * 5_000_000))
    bedrock = BedrockChatModel(client=_signed_by_a_session(converse_server), max_retries=1, backoff=0.01)
    request = ChatRequest(system="s", messages=({"role": "user", "content": "hi"},))
    with caplog.at_level("WARNING", logger="fullrecall.summarizers"), pytest.raises(ChatModelError) as failed:
        bedrock.complete(request)
    shown = str(failed.value) + caplog.text
    assert "AccessDeniedException" in str(failed.value) and "ThrottlingException" in caplog.text
    assert TOKEN not in shown and "test-secret-0123456789" not in shown and len(str(failed.value)) < 1000
    embedding = ScriptedServer(path=lambda p: p.startswith("/model/") and p.endswith("/invoke"))
    try:
        embedding.script(_echoing(403, "AccessDeniedException", "x" * 5_000_000))
        from fullrecall.embeddings.bedrock import TITAN_V2, BedrockEmbedder

        with pytest.raises(EmbeddingError) as refused:
            BedrockEmbedder(TITAN_V2, client=_signed_by_a_session(embedding)).embed(["hello"])
        assert "AccessDeniedException" in str(refused.value) and len(str(refused.value)) < 1000
        assert TOKEN not in str(refused.value) and "test-secret-0123456789" not in str(refused.value)
    finally:
        embedding.close()
