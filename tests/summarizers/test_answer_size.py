"""A provider's answer is read up to a limit: a server (or a proxy gone wrong) sending a body without end, one
announcing more than the limit, or a small gzip body that inflates past it, ends the request in the client's own
error naming the provider and the limit, not in a process holding the whole body in memory.
"""

from __future__ import annotations

import gzip
import json
import time

import pytest
from summarizer_peers import Reply, ScriptedServer, completion

from fullrecall.embeddings.bedrock import BedrockEmbedder
from fullrecall.embeddings.openai import OpenAIEmbedder
from fullrecall.errors import EmbeddingError, InvalidInput
from fullrecall.summarizers import OpenAIChatModel
from fullrecall.summarizers.chat_models.base import ChatModelError, ChatRequest
from fullrecall.summarizers.chat_models.bedrock import BedrockChatModel

LIMIT = 100_000
REQUEST = ChatRequest(system="s", messages=({"role": "user", "content": "hi"},))
BOMB = gzip.compress(b" " * (8 * LIMIT))  # a few hundred bytes on the wire


def floods(body: bytes) -> dict[str, Reply]:
    return {
        "endless": Reply(body=body, flood=200 * LIMIT),  # no Content-Length: read until the server stops
        "announced": Reply(body=body + b" " * (2 * LIMIT)),  # Content-Length over the limit
        "gzip bomb": Reply(body=BOMB, headers={"Content-Encoding": "gzip"}),
    }


def chat(server: ScriptedServer, **kw) -> OpenAIChatModel:
    return OpenAIChatModel("scripted-model", base_url=server.base_url, api_key="k", timeout=5.0, max_retries=2,
                           backoff=0.01, **kw)


@pytest.mark.parametrize("flood", ["endless", "announced", "gzip bomb"])
def test_an_openai_chat_answer_over_the_limit_fails_naming_the_model_and_the_limit(llm_server, flood):
    llm_server.script(floods(completion("x").body)[flood], completion("fine"))
    model = chat(llm_server, max_response_bytes=LIMIT)
    started = time.monotonic()
    with pytest.raises(ChatModelError, match=rf"openai:scripted-model failed: .*over the limit of {LIMIT} bytes"):
        model.complete(REQUEST)
    assert time.monotonic() - started < 3.0 and len(llm_server.requests) == 1  # the same flood is not asked again
    assert model.complete(REQUEST).text == "fine"  # the next answer is read as ever


def test_an_answer_within_the_limit_is_read_and_the_limit_comes_from_the_environment(llm_server, monkeypatch):
    body = completion("y" * 1000).body
    llm_server.script(Reply(body=body), Reply(body=body))
    assert chat(llm_server, max_response_bytes=len(body)).complete(REQUEST).text == "y" * 1000
    assert OpenAIChatModel("m").max_response_bytes == 32 * 2**20
    monkeypatch.setenv("FULLRECALL_LLM_MAX_RESPONSE_BYTES", str(len(body) - 1))
    with pytest.raises(ChatModelError, match=f"over the limit of {len(body) - 1} bytes"):
        chat(llm_server).complete(REQUEST)
    for value in ("lots", "0", "-5", "1.5"):
        monkeypatch.setenv("FULLRECALL_LLM_MAX_RESPONSE_BYTES", value)
        with pytest.raises(InvalidInput, match=f"FULLRECALL_LLM_MAX_RESPONSE_BYTES must be a positive whole number "
                                               f"of bytes, got '{value}'"):
            OpenAIChatModel("m")
    for bad in (0, -1, 2.5, True, "x"):
        with pytest.raises(InvalidInput, match="max_response_bytes must be a positive whole number"):
            OpenAIChatModel("m", max_response_bytes=bad)


@pytest.mark.parametrize("flood", ["endless", "announced", "gzip bomb"])
def test_openai_embeddings_over_the_limit_fail_naming_the_model_and_the_limit(flood):
    ok = json.dumps({"data": [{"index": 0, "embedding": [1.0] * 4}]}).encode()
    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        server.script(floods(ok)[flood], Reply(body=ok))
        emb = OpenAIEmbedder("m", base_url=server.base_url, api_key="k", max_response_bytes=LIMIT)
        with pytest.raises(EmbeddingError, match=rf"\(openai:m\) failed: .*over the limit of {LIMIT} bytes"):
            emb.embed(["x"])
        assert len(server.requests) == 1
        assert emb.embed(["x"]).shape == (1, 4)
    finally:
        server.close()



@pytest.mark.parametrize("flood", ["endless", "announced"])
def test_a_bedrock_chat_answer_over_the_limit_fails_naming_the_model_and_the_limit(aws, flood):
    answer = json.dumps({"output": {"message": {"role": "assistant", "content": [{"text": "fine"}]}},
                         "stopReason": "end_turn", "usage": {}}).encode()
    aws.script(floods(answer)[flood], Reply(body=answer))
    model = BedrockChatModel(region="us-east-1", max_response_bytes=LIMIT, backoff=0.01)
    with pytest.raises(ChatModelError, match=rf"bedrock:.* failed: .*over the limit of {LIMIT} bytes"):
        model.complete(REQUEST)
    assert len(aws.requests) == 1
    assert model.complete(REQUEST).text == "fine"


@pytest.mark.parametrize("flood", ["endless", "announced"])
def test_bedrock_embeddings_over_the_limit_fail_naming_the_model_and_the_limit(aws, flood):
    one = json.dumps({"embedding": [1.0] * 256}).encode()
    aws.script(floods(one)[flood], Reply(body=one))
    emb = BedrockEmbedder("amazon.titan-embed-text-v2:0", embedding_dimensions=256, aws_region="us-east-1",
                          max_response_bytes=LIMIT)
    with pytest.raises(EmbeddingError, match=rf"titan-embed-text-v2:0 .*over the limit of {LIMIT} bytes"):
        emb.embed(["x"])
    assert len(aws.requests) == 1
    assert emb.embed(["x"]).shape == (1, 256)
