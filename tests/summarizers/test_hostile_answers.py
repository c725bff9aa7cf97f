"""Answers built to break a provider's client: JSON nested past Python's recursion limit, and a redirect to another
host (which would carry the API key there). Each ends in the client's own error, naming the model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from summarizer_peers import Reply, ScriptedServer, completion

from fullrecall import FactExtractionError, FactMemory
from fullrecall.embeddings.bedrock import BedrockEmbedder
from fullrecall.embeddings.openai import OpenAIEmbedder
from fullrecall.errors import EmbeddingError
from fullrecall.summarizers import OpenAIChatModel
from fullrecall.summarizers.chat_models.base import ChatModelError, ChatRequest
from fullrecall.summarizers.chat_models.bedrock import BedrockChatModel

sys.path.insert(0, str(Path(__file__).parents[1] / "memory"))
from concurrent_worker import HashEmbedder  # noqa: E402

REQUEST = ChatRequest(system="s", messages=({"role": "user", "content": "hi"},))
DEEP = b"[" * 100_000 + b"]" * 100_000  # valid JSON, too deep for Python's decoder: a RecursionError escaped


def test_an_openai_chat_answer_nested_too_deep_is_a_malformed_answer(llm_server):
    llm_server.script(Reply(body=DEEP), Reply(body=b'{"choices": [{"message": {"content": ' + DEEP + b"}}]}"))
    model = OpenAIChatModel("m", base_url=llm_server.base_url, api_key="k", max_retries=1, backoff=0.01)
    with pytest.raises(ChatModelError, match=r"openai:m sent a malformed response \(RecursionError\)"):
        model.complete(REQUEST)


def test_openai_embeddings_nested_too_deep_are_an_embedding_error():
    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        server.script(Reply(body=DEEP))
        with pytest.raises(EmbeddingError, match="unexpected embeddings response"):
            OpenAIEmbedder("m", base_url=server.base_url, api_key="k", max_retries=0).embed(["x"])
    finally:
        server.close()


def test_a_fact_extraction_answer_nested_too_deep_is_an_extraction_failure(llm_server):
    memory = FactMemory(user_id="u", embedder=HashEmbedder(), chat_model=OpenAIChatModel(
        "m", base_url=llm_server.base_url, api_key="k", max_retries=0))
    llm_server.script(completion("[" * 100_000), completion("[" * 5000 + "]" * 5000))
    for _ in range(2):
        with pytest.raises(FactExtractionError, match="no JSON array of facts"):
            memory.learn([{"role": "user", "content": "I like jazz"}])
    assert memory.history() == []



def test_bedrock_answers_nested_too_deep_are_the_clients_errors(aws):
    aws.script(*[Reply(body=DEEP)] * 2)
    with pytest.raises(ChatModelError, match="bedrock:.* sent a malformed response"):
        BedrockChatModel(region="us-east-1", max_retries=1, backoff=0.01).complete(REQUEST)
    aws.script(*[Reply(body=b'{"embedding": ' + DEEP + b"}")] * 5)
    with pytest.raises(EmbeddingError, match="titan-embed-text-v2:0 answered with a body that is not JSON"):
        BedrockEmbedder("amazon.titan-embed-text-v2:0", aws_region="us-east-1").embed(["x"])


def test_a_redirect_to_another_host_is_not_followed_and_says_where_it_pointed(llm_server):
    """The key goes to ``base_url``'s host only: a redirect elsewhere is an error naming it, not retried (it
    was called a malformed answer, and asked again)."""
    elsewhere = ScriptedServer()
    try:
        target = f"{elsewhere.base_url}/chat/completions"
        llm_server.script(Reply(status=307, headers={"Location": target}), completion("fine"))
        model = OpenAIChatModel("m", base_url=llm_server.base_url, api_key="sk-secret", max_retries=2, backoff=0.01)
        with pytest.raises(ChatModelError, match=rf"openai:m answered HTTP 307, a redirect to {target} "
                                                 r"\(not followed\)") as caught:
            model.complete(REQUEST)
        assert not caught.value.retryable and len(llm_server.requests) == 1 and elsewhere.requests == []
        embedding = ScriptedServer(path=lambda p: p == "/v1/embeddings")
        try:
            embedding.script(Reply(status=308, headers={"Location": target}))
            with pytest.raises(EmbeddingError, match=rf"HTTP 308, a redirect to {target} \(not followed\)"):
                OpenAIEmbedder("m", base_url=embedding.base_url, api_key="sk-secret").embed(["x"])
            assert len(embedding.requests) == 1 and elsewhere.requests == []
        finally:
            embedding.close()
    finally:
        elsewhere.close()
    assert json.dumps(llm_server.headers).count("sk-secret") == 1  # sent once, to base_url's host


def test_a_body_that_is_not_the_encoding_it_claims_is_a_malformed_answer(llm_server, aws):
    """``Content-Encoding: gzip`` over a body that is no gzip escaped the chat models as httpx's DecodingError."""
    bad = Reply(body=b"not gzip at all", headers={"Content-Encoding": "gzip"})
    llm_server.script(bad, completion("fine"))
    model = OpenAIChatModel("m", base_url=llm_server.base_url, api_key="sk-test", max_retries=1, backoff=0.01)
    assert model.complete(REQUEST).text == "fine"  # asked again, as for any malformed answer
    llm_server.script(bad)
    with pytest.raises(ChatModelError, match=r"openai:m sent a malformed response \(DecodingError\)"):
        OpenAIChatModel("m", base_url=llm_server.base_url, api_key="sk-test", max_retries=0).complete(REQUEST)
    aws.script(bad)
    with pytest.raises(ChatModelError, match=r"bedrock:.* failed: HTTPClientError: .*DecodingError"):
        BedrockChatModel(region="us-east-1", max_retries=0).complete(REQUEST)
