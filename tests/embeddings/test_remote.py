"""Bedrock (botocore Stubber) and OpenAI-compatible (a real HTTP server on loopback) embedders."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fullrecall.embeddings import load_embedder
from fullrecall.errors import EmbeddingError

boto3 = pytest.importorskip("boto3")
StreamingBody = pytest.importorskip("botocore.response").StreamingBody
stub_module = pytest.importorskip("botocore.stub")
ANY, Stubber = stub_module.ANY, stub_module.Stubber


def _client():
    return boto3.client("bedrock-runtime", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")


def _reply(payload: dict) -> dict:
    raw = json.dumps(payload).encode()
    return {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"}


def _expect(stubber: Stubber, model_id: str, request_body: dict | None, response: dict) -> None:
    expected = {"modelId": model_id, "body": json.dumps(request_body) if request_body is not None else ANY,
                "contentType": "application/json", "accept": "application/json"}
    stubber.add_response("invoke_model", _reply(response), expected)


def test_titan_v2_sends_dimensions_and_normalizes():
    client = _client()
    emb = load_embedder("bedrock:amazon.titan-embed-text-v2:0", embedding_dimensions=256, client=client)
    assert emb.dimension == 256 and emb.name == "bedrock:amazon.titan-embed-text-v2:0@256"
    with Stubber(client) as stub:
        _expect(stub, "amazon.titan-embed-text-v2:0", {"inputText": "hello", "dimensions": 256, "normalize": True},
                {"embedding": [3.0] + [0.0] * 255, "inputTextTokenCount": 1})
        v = emb.embed(["hello"])
        stub.assert_no_pending_responses()
    assert v.shape == (1, 256) and v.dtype == np.float32 and v[0, 0] == pytest.approx(1.0)


def test_titan_v1_embeds_each_text_in_order():
    client = _client()
    emb = load_embedder("bedrock:amazon.titan-embed-text-v1", client=client)
    emb.max_workers = 1  # Stubber answers in order; the thread pool would reorder requests
    with Stubber(client) as stub:
        for i, text in enumerate(["a", "b", "c"]):
            vec = [0.0] * 1536
            vec[i] = 1.0
            _expect(stub, "amazon.titan-embed-text-v1", {"inputText": text}, {"embedding": vec})
        v = emb.embed(["a", "b", "c"])
        stub.assert_no_pending_responses()
    assert v.shape == (3, 1536) and np.argmax(v, axis=1).tolist() == [0, 1, 2]


def test_cohere_batches_and_marks_queries():
    client = _client()
    emb = load_embedder("bedrock:cohere.embed-english-v3", aws_region="eu-west-1", client=client)
    texts = [f"t{i}" for i in range(100)]  # 96 + 4: two requests
    with Stubber(client) as stub:
        _expect(stub, "cohere.embed-english-v3", {"texts": texts[:96], "input_type": "search_document", "truncate": "END"},
                {"embeddings": [[1.0] * 1024] * 96, "id": "x", "response_type": "embeddings_floats"})
        _expect(stub, "cohere.embed-english-v3", {"texts": texts[96:], "input_type": "search_document", "truncate": "END"},
                {"embeddings": [[1.0] * 1024] * 4, "id": "y", "response_type": "embeddings_floats"})
        _expect(stub, "cohere.embed-english-v3", {"texts": ["q?"], "input_type": "search_query", "truncate": "END"},
                {"embeddings": [[2.0] * 1024], "id": "z", "response_type": "embeddings_floats"})
        assert emb.embed(texts).shape == (100, 1024)
        assert emb.embed_queries(["q?"]).shape == (1, 1024)
        stub.assert_no_pending_responses()


def test_bedrock_errors_are_clear():
    with pytest.raises(ValueError, match="256, 512, 1024"):
        load_embedder("bedrock:amazon.titan-embed-text-v2:0", embedding_dimensions=300, client=_client())
    with pytest.raises(ValueError, match="unsupported"):
        load_embedder("bedrock:amazon.nope", client=_client())
    client = _client()
    emb = load_embedder("bedrock:amazon.titan-embed-text-v1", client=client)
    with Stubber(client) as stub:
        stub.add_client_error("invoke_model", service_error_code="ThrottlingException", service_message="slow down")
        with pytest.raises(EmbeddingError, match="slow down"):
            emb.embed(["x"])


# -- OpenAI-compatible -----------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if body["model"] == "broken":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"model exploded")
            return
        dim = body.get("dimensions", 8)
        data = [{"object": "embedding", "index": i, "embedding": [float(len(t))] + [1.0] * (dim - 1)}
                for i, t in enumerate(body["input"])]
        payload = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode()  # out of order
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture()
def server():
    _Handler.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_openai_compatible_batches_in_order(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    emb = load_embedder("openai:text-embedding-3-small")
    emb.batch_size = 2
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    v = emb.embed(texts)
    assert emb.dimension == 8 and emb.name == "openai:text-embedding-3-small"
    assert v.shape == (5, 8) and np.allclose(np.linalg.norm(v, axis=1), 1.0)
    raw_first = np.array([len(t) for t in texts], dtype=np.float32) / np.sqrt(np.array([len(t) ** 2 + 7 for t in texts]))
    assert np.allclose(v[:, 0], raw_first, atol=1e-6)  # each vector is its own text's, despite reordered replies
    assert [len(r["body"]["input"]) for r in _Handler.requests] == [2, 2, 1]
    assert {r["path"] for r in _Handler.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in _Handler.requests} == {"Bearer sk-test"}


def test_openai_arguments_and_dimensions(server):
    emb = load_embedder("openai:m", embedding_dimensions=16, base_url=server, api_key="k2")
    assert emb.dimension == 16 and emb.name == "openai:m@16"
    assert emb.embed(["x"]).shape == (1, 16)
    assert _Handler.requests[-1]["body"]["dimensions"] == 16 and _Handler.requests[-1]["auth"] == "Bearer k2"


def test_openai_errors_are_clear(server):
    with pytest.raises(EmbeddingError, match="HTTP 500: model exploded"):
        load_embedder("openai:broken", base_url=server, api_key="k").embed(["x"])
    with pytest.raises(EmbeddingError, match="failed"):
        load_embedder("openai:m", base_url="http://127.0.0.1:9/v1", api_key="k").embed(["x"])


# -- a whole request within its deadline -------------------------------------------------

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import Reply, ScriptedServer, point_boto_at  # noqa: E402


def _embeddings(n: int, dim: int = 4) -> bytes:
    return json.dumps({"data": [{"index": i, "embedding": [1.0] * dim} for i in range(n)]}).encode()


@pytest.mark.parametrize("head", [True, False], ids=["trickled-head", "trickled-body"])
def test_openai_embeddings_from_a_server_trickling_bytes_end_at_the_deadline(head, monkeypatch):
    """Each byte well within the read timeout, the whole answer a minute away: the request ends at its deadline."""
    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        server.script(Reply(body=_embeddings(1)), Reply(body=_embeddings(1, 400), trickle=0.05, trickle_head=head))
        emb = load_embedder("openai:m", base_url=server.base_url, api_key="k")
        emb.timeout, emb.deadline, emb.max_retries = 2.0, 0.6, 0  # one try: its deadline is what is measured
        assert emb.embed(["fast"]).shape == (1, 4) and server.headers[0]["authorization"] == "Bearer k"
        started = time.monotonic()
        with pytest.raises(EmbeddingError, match=r"deadline of 0\.6 s per request"):
            emb.embed(["slow"])
        assert time.monotonic() - started < 2.0  # not the ~70 s the trickle takes
    finally:
        server.close()
    from fullrecall.embeddings.openai import OpenAIEmbedder

    assert OpenAIEmbedder("m", timeout=5.0).deadline == 10.0
    monkeypatch.setenv("FULLRECALL_LLM_DEADLINE", "42")
    assert OpenAIEmbedder("m").deadline == 42.0 and OpenAIEmbedder("m", deadline=3).deadline == 3.0
    with pytest.raises(ValueError, match="deadline"):
        OpenAIEmbedder("m", deadline=0)


def test_bedrock_embeddings_from_a_server_trickling_bytes_end_at_the_deadline(monkeypatch):
    """The client the embedder makes signs its requests as ever, and ends each one at its deadline."""
    server = ScriptedServer(path=lambda p: p.startswith("/model/") and p.endswith("/invoke"))
    point_boto_at(server, monkeypatch)
    try:
        one = json.dumps({"embedding": [1.0] * 256}).encode()
        server.script(Reply(body=one), *[Reply(body=one, trickle=0.02)] * 5)  # a try and botocore's retries
        emb = load_embedder("bedrock:amazon.titan-embed-text-v2:0", embedding_dimensions=256, aws_region="us-east-1")
        assert emb.deadline == 120.0
        emb = type(emb)("amazon.titan-embed-text-v2:0", embedding_dimensions=256, aws_region="us-east-1",
                        timeout=2.0, deadline=0.5)
        assert emb.embed(["fast"]).shape == (1, 256)
        assert server.requests[0] == {"inputText": "fast", "dimensions": 256, "normalize": True}
        assert server.headers[0]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")  # signed as ever
        started = time.monotonic()
        with pytest.raises(EmbeddingError, match=r"deadline of 0\.5 s per request"):
            emb.embed(["slow"])
        tries = len(server.requests) - 1
        assert 1 <= tries <= 5 and time.monotonic() - started < 0.5 * tries + 3.0  # not the ~70 s a trickle takes
    finally:
        server.close()


def test_openai_embeddings_keep_their_connection_and_recover_after_a_deadline():
    """Requests from sync code share one kept-alive connection (no client and no TLS handshake a request); a
    request ended at its deadline drops its connection, and the next one is answered on a new one."""
    ports: list[int] = []
    slow = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ports.append(self.client_address[1])
            if slow.is_set():
                slow.clear()
                time.sleep(1.5)  # past the deadline: the client goes away
                return
            out = _embeddings(len(body["input"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        emb = load_embedder("openai:m", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="k")
        emb.deadline, emb.max_retries = 0.5, 0
        for text in ("a", "b", "c"):
            assert emb.embed([text]).shape == (1, 4)
        assert len(ports) == 3 and len(set(ports)) == 1, ports  # one connection for all three
        slow.set()
        with pytest.raises(EmbeddingError, match="deadline"):
            emb.embed(["slow"])
        assert emb.embed(["after"]).shape == (1, 4)
        assert ports[-1] != ports[0]  # the connection the deadline ended is not used again
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- a peer's answer that is not embeddings ------------------------------------------------

BAD_OPENAI_ANSWERS = {
    "NaN": (b'{"data": [{"index": 0, "embedding": [NaN, 1.0, 1.0, 1.0]}]}', "NaN or infinite"),
    "Infinity": (b'{"data": [{"index": 0, "embedding": [Infinity, 1.0, 1.0, 1.0]}]}', "NaN or infinite"),
    "beyond float32": (b'{"data": [{"index": 0, "embedding": [1e39, 1.0, 1.0, 1.0]}]}', "NaN or infinite"),
    "empty vector": (b'{"data": [{"index": 0, "embedding": []}]}', "dimension 0, expected at least 1"),
    "nested": (b'{"data": [{"index": 0, "embedding": [[1.0], [2.0]]}]}', r"shape \(1, 2, 1\) for 1 texts"),
    "base64": (b'{"data": [{"index": 0, "embedding": "AACAPwAAgD8="}]}', "not lists of numbers"),
    "repeated index": (b'{"data": [{"index": 0, "embedding": [1, 0, 0, 0]}, {"index": 0, "embedding": [0, 1, 0, 0]}]}',
                       r"indexes \[0, 0\] for 2 texts"),
}


@pytest.mark.parametrize("answer", BAD_OPENAI_ANSWERS, ids=list(BAD_OPENAI_ANSWERS))
def test_openai_answer_that_is_not_embeddings_is_an_embedding_error(answer):
    """A peer's NaN, empty or misnumbered vectors are refused, naming the model, and teach the embedder no
    dimension; the next good answer is taken. A search whose question gets such an answer is answered by keyword
    (it got a ValueError about its query vector, then an EmbeddingError)."""
    from fullrecall.search import SemanticSearch

    body, says = BAD_OPENAI_ANSWERS[answer]
    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        server.script(Reply(body=body), Reply(body=_embeddings(1)))
        emb = load_embedder("openai:m", base_url=server.base_url, api_key="k")
        with pytest.raises(EmbeddingError, match=f"openai:m returned .*{says}"):
            emb.embed(["a", "b"] if "index" in answer else ["a"])
        assert emb.embed(["a"]).shape == (1, 4) and emb.dimension == 4
        server.script(Reply(body=_embeddings(1)), Reply(body=body))
        with SemanticSearch(emb) as search:
            search.add(["the cat sat"])
            assert [h.message.text for h in search.search("cat")] == ["the cat sat"]
    finally:
        server.close()


@pytest.mark.parametrize(("raw", "says"), [
    (b"<html>502 Bad Gateway</html>", "not JSON"),
    (b'{"message": "throttled"}', r"without a list in 'embedding' \(got \['message'\]\)"),
    (b'{"embedding": [NaN' + b", 1.0" * 255 + b"]}", "NaN or infinite"),
    (b'{"embedding": [1.0, 2.0]}', "dimension 2, expected 256"),
], ids=["not JSON", "no embedding", "NaN", "short"])
def test_bedrock_answer_that_is_not_an_embedding_is_an_embedding_error(raw, says):
    """A Titan answer that is no embedding is an EmbeddingError naming the model (it was a JSONDecodeError,
    a KeyError, or NaN vectors stored for a message and a ValueError for a question)."""
    client = _client()
    emb = load_embedder("bedrock:amazon.titan-embed-text-v2:0", embedding_dimensions=256, client=client)
    with Stubber(client) as stub:
        stub.add_response("invoke_model", {"body": StreamingBody(io.BytesIO(raw), len(raw)),
                                           "contentType": "application/json"})
        with pytest.raises(EmbeddingError, match=f"titan-embed-text-v2:0.* {says}"):
            emb.embed(["x"])


def test_an_input_the_model_refuses_is_told_from_a_failure_that_may_pass():
    """``EmbeddingError.rejected``: the model refused the texts (HTTP 400/413/422, Bedrock's ValidationException),
    so the archive embeds the batch apart; a throttle or a server error is not, and the batch waits whole."""
    client = _client()
    emb = load_embedder("bedrock:amazon.titan-embed-text-v1", client=client)
    with Stubber(client) as stub:
        stub.add_client_error("invoke_model", service_error_code="ValidationException", service_message="too long")
        stub.add_client_error("invoke_model", service_error_code="ThrottlingException", service_message="slow down")
        for rejected in (True, False):
            with pytest.raises(EmbeddingError) as info:
                emb.embed(["x"])
            assert info.value.rejected is rejected
    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        server.script(Reply(status=400, body=b'{"error": "too many tokens"}'), Reply(status=429, body=b"{}"),
                      Reply(status=503, body=b"{}"))
        emb = load_embedder("openai:m", base_url=server.base_url, api_key="k")
        emb.max_retries = 0  # a throttle or a server error tried again and again: its error at last
        for rejected in (True, False, False):
            with pytest.raises(EmbeddingError) as info:
                emb.embed(["x"])
            assert info.value.rejected is rejected
    finally:
        server.close()


# -- the API key is never shown ------------------------------------------------------------

SECRET = "sk-live-0123456789abcdef"


def test_an_embedding_api_key_is_sent_trimmed_and_never_shown(caplog):
    """A key read from a file with its newline is sent without it (it was refused at the first request, in an
    error quoting the whole header); one no header can carry is refused at once without being shown; a server
    quoting the request's headers in its error gets the key replaced by [redacted]."""
    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        server.script(Reply(body=_embeddings(1)))
        assert load_embedder("openai:m", base_url=server.base_url, api_key=f"{SECRET}\n").embed(["x"]).shape == (1, 4)
        assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
        with pytest.raises(ValueError, match="api_key holds a character") as caught:
            load_embedder("openai:m", base_url=server.base_url, api_key=f"sk-live\n{SECRET}")
        assert "sk-live" not in str(caught.value)
        server.script(lambda _body: Reply(status=401, body=json.dumps({"error": str(server.headers[-1])}).encode()))
        with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError, match=r"HTTP 401.*\[redacted\]") as caught:
            load_embedder("openai:m", base_url=server.base_url, api_key=SECRET).embed(["x"])
        assert SECRET not in str(caught.value) and SECRET not in caplog.text
    finally:
        server.close()


@pytest.mark.parametrize("key", ["k", "ollama"])
def test_a_short_api_key_is_redacted_where_it_stands_alone_and_the_error_stays_readable(key):
    """A key of a few letters (Ollama's customary ``ollama``) had every occurrence of its letters masked, the
    server's message made unreadable; a key shorter than 8 characters is masked where it stands as a whole
    token (the header a server quotes, a JSON string, a query value), and never shown."""
    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    message = "unknown model 'bakllava-ollama3-kk'; known: okra, kollama; the key sent"
    try:
        server.script(lambda _body: Reply(status=401, body=json.dumps(
            {"error": f"{message}: {server.headers[-1]['authorization']} / '{key}' / ?key={key}&x=1 / {key}."}).encode()))
        with pytest.raises(EmbeddingError, match="HTTP 401") as caught:
            load_embedder("openai:m", base_url=server.base_url, api_key=key).embed(["x"])
    finally:
        server.close()
    shown = str(caught.value)
    assert f"{message}: Bearer [redacted] / '[redacted]' / ?key=[redacted]&x=1 / [redacted]." in shown
    assert re.search(rf"(?<![A-Za-z0-9_]){key}(?![A-Za-z0-9_])", shown) is None


# -- a throttle or a server error is tried again -------------------------------------------

def test_openai_embeddings_retry_a_throttle_and_a_server_error_then_succeed(caplog):
    """A 429 (its Retry-After honoured), a 5xx and a deadline passed are tried again, as the chat models do: a
    burst of requests over the provider's rate limit failed at once, leaving its messages unembedded."""
    from fullrecall.embeddings.openai import OpenAIEmbedder

    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        emb = OpenAIEmbedder("m", base_url=server.base_url, api_key="k", backoff=5.0, deadline=0.5)
        server.script(Reply(status=429, body=b'{"error": "rate limited"}', headers={"Retry-After": "0"}),
                      Reply(status=503, body=b"{}", headers={"Retry-After": "0.01"}),
                      Reply(body=_embeddings(2)))
        with caplog.at_level(logging.WARNING):
            assert emb.embed(["a", "b"]).shape == (2, 4)
        assert len(server.requests) == 3 and "HTTP 429" in caplog.text and "retry 1/2" in caplog.text
        server.script(Reply(body=_embeddings(1), delay=1.0), Reply(body=_embeddings(1)))
        emb.backoff = 0.01
        assert emb.embed(["c"]).shape == (1, 4) and len(server.requests) == 2
    finally:
        server.close()


def test_openai_embeddings_give_up_after_max_retries_and_never_retry_a_refused_input():
    from fullrecall.embeddings.openai import OpenAIEmbedder

    server = ScriptedServer(path=lambda p: p == "/v1/embeddings")
    try:
        emb = OpenAIEmbedder("m", base_url=server.base_url, api_key="k", backoff=0.01, max_retries=2)
        server.script(*[Reply(status=500, body=b'{"error": "down"}')] * 4)
        with pytest.raises(EmbeddingError, match="HTTP 500") as caught:
            emb.embed(["x"])
        assert len(server.requests) == 3 and not caught.value.rejected
        server.script(Reply(status=400, body=b'{"error": "too many tokens"}'), Reply(body=_embeddings(1)))
        with pytest.raises(EmbeddingError, match="HTTP 400") as caught:
            emb.embed(["x"])
        assert len(server.requests) == 1 and caught.value.rejected
    finally:
        server.close()


def test_cohere_batches_answering_one_vector_too_many_and_one_too_few_are_refused():
    """Each Cohere request's answer is checked for its own texts: one batch answering 97 vectors for 96 texts
    and the next 3 for 4 added up to 100 for 100 texts, and every vector after the extra one was stored for
    the text before its own."""
    client = _client()
    emb = load_embedder("bedrock:cohere.embed-english-v3", aws_region="eu-west-1", client=client)
    texts = [f"t{i}" for i in range(100)]
    with Stubber(client) as stub:
        _expect(stub, "cohere.embed-english-v3", None, {"embeddings": [[1.0] * 1024] * 97})
        _expect(stub, "cohere.embed-english-v3", None, {"embeddings": [[1.0] * 1024] * 3})
        with pytest.raises(EmbeddingError, match=r"shape \(97, 1024\) for 96 texts"):
            emb.embed(texts)


def test_a_password_in_the_base_url_is_never_shown():
    """``https://user:password@host/v1`` (some gateways take their credentials so) was quoted whole in every error
    of the embedder and in its repr."""
    emb = load_embedder("openai:m", base_url="http://user:pw-0123456789@127.0.0.1:9/v1", api_key="k",
                        embedding_dimensions=4)
    emb.max_retries = 0
    with pytest.raises(EmbeddingError, match="failed") as caught:
        emb.embed(["x"])
    assert "pw-0123456789" not in str(caught.value) and "pw-0123456789" not in repr(emb)
    assert "user:[redacted]@127.0.0.1:9" in str(caught.value)
    assert "failed: ConnectError: " in str(caught.value)  # the kind of failure named (a reset's message is empty)


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://models.example/v1", "http://", "file:///etc"])
def test_an_openai_embedder_base_url_that_is_no_http_url_is_refused_when_made(url, monkeypatch):
    """The chat model refused such a base_url at once; the embedder took it and failed at its first embedding
    (UnsupportedProtocol), a search or a record later. Both refuse it when made, naming it."""
    from fullrecall.errors import InvalidInput

    with pytest.raises(InvalidInput, match=f"^base_url must be an http:// or https:// URL with a host, got '{url}'"):
        load_embedder("openai:m", base_url=url, api_key="k")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(InvalidInput, match="^base_url must be an http"):
        load_embedder("openai:m", api_key="k")


def test_a_password_in_the_base_url_goes_as_basic_auth_and_never_into_a_log_line(caplog):
    """httpx logs each request's URL at INFO: a base_url's password went into the log at every request, though
    every error masked it. The request goes to the URL without it, the credentials as httpx sends them (basic)."""
    import base64

    from fullrecall.summarizers.chat_models import OpenAIChatModel
    from fullrecall.summarizers.chat_models.base import ChatRequest

    server = ScriptedServer(path=lambda p: p in ("/v1/embeddings", "/v1/chat/completions"))
    try:
        host, port = server.httpd.server_address[:2]
        url = f"http://user:pa55w0rd-SECRET@{host}:{port}/v1"
        answer = {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
        server.script(Reply(body=_embeddings(1)), Reply(body=json.dumps(answer).encode()))
        with caplog.at_level(logging.INFO):
            assert load_embedder("openai:m", base_url=url, api_key="k", embedding_dimensions=4).embed(["x"]).shape == (1, 4)
            assert OpenAIChatModel("m", base_url=url).complete(
                ChatRequest(system="s", messages=({"role": "user", "content": "x"},))).text == "hi"
        basic = "Basic " + base64.b64encode(b"user:pa55w0rd-SECRET").decode()
        assert [h["authorization"] for h in server.headers] == [basic, basic]
        assert "HTTP Request: POST" in caplog.text and "pa55w0rd" not in caplog.text
    finally:
        server.close()


@pytest.mark.parametrize(("options", "says"), [
    ({"max_retries": -1}, "max_retries"), ({"batch_size": 0}, "batch_size"), ({"backoff": -1}, "backoff"),
    ({"embedding_dimensions": -5}, "embedding_dimensions"), ({"chat": True, "max_retries": -1}, "max_retries"),
], ids=["max_retries", "batch_size", "backoff", "dimensions", "chat max_retries"])
def test_retry_and_batch_settings_no_client_can_use_are_refused_when_it_is_made(options, says):
    """Checked as timeout and deadline are: they failed at the first request with a raw AssertionError or
    ValueError (max_retries=-1, batch_size=0, backoff=-1 on a retry), or every answer was refused (dimensions)."""
    from fullrecall.embeddings.openai import OpenAIEmbedder
    from fullrecall.errors import InvalidInput
    from fullrecall.summarizers.chat_models import OpenAIChatModel

    made = OpenAIChatModel if options.pop("chat", False) else OpenAIEmbedder
    with pytest.raises(InvalidInput, match=f"^{says} must be"):
        made("m", base_url="http://127.0.0.1:9/v1", **options)


def test_the_bedrock_embedder_takes_its_region_from_aws_region(monkeypatch):
    """As documented (and as the Bedrock chat model does): botocore alone reads AWS_DEFAULT_REGION, so a machine
    configured by AWS_REGION got a raw NoRegionError."""
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    emb = load_embedder("bedrock:amazon.titan-embed-text-v2:0")
    assert emb._client.meta.region_name == "eu-central-1"
