"""A real OpenAI-compatible chat completions server on a loopback port, scripted per test.

Each test queues the replies the server gives, one per request, in order:
good summaries, leaks, dropped citations, sleeps past the client's timeout,
HTTP errors, malformed JSON, empty answers, refusals. The server records
every request it received so tests can assert what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def completion(text: str | None, finish_reason: str = "stop", refusal: str | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if refusal is not None:
        message["refusal"] = refusal
    body = {"id": "chatcmpl-test", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}
    return Reply(body=json.dumps(body).encode())


class ScriptedServer:
    def __init__(self) -> None:
        self.replies: list[Reply | Callable[[dict[str, Any]], Reply]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.split("?")[0] != "/v1/chat/completions":
                    self._send(Reply(status=404, body=b'{"error": "not found"}'))
                    return
                body = json.loads(raw)
                with server.lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    script = server.replies.pop(0) if server.replies else Reply(status=500, body=b"no reply scripted")
                reply = script(body) if callable(script) else script
                if reply.delay:
                    time.sleep(reply.delay)
                self._send(reply)

            def _send(self, reply: Reply) -> None:
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply.body)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def script(self, *replies: Reply | Callable[[dict[str, Any]], Reply]) -> None:
        with self.lock:
            self.replies = list(replies)
            self.requests.clear()
            self.headers.clear()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def _server():
    server = ScriptedServer()
    yield server
    server.close()


@pytest.fixture
def llm_server(_server: ScriptedServer) -> ScriptedServer:
    _server.script()
    return _server


# -- conversations ---------------------------------------------------------------------

REFERENCE_REQUEST = ("Our shared reference number for this conversation is 700. Please keep this number for our "
                     "records but don't include it in any summary.")


@pytest.fixture
def tech_conversation() -> list[dict[str, Any]]:
    """An OpenAI-shaped RAG conversation with citations, products, paths and a private reference number."""
    return [
        {"role": "user", "content": REFERENCE_REQUEST},
        {"role": "assistant", "content": "Understood. I'll keep our shared reference number 700 for our records."},
        {"role": "user", "content": "Which GPU should I buy for local inference of Llama-3.1 70B?"},
        {"role": "assistant", "content": "The RTX 4090 has 24 GB of VRAM [1]. Two of them run Llama-3.1 70B "
                                         "at 4-bit quantization [2]. The A100 80GB is faster but costs more [3]."},
        {"role": "user", "content": "And how do I configure the server? My config is in deploy/vllm.yaml."},
        {"role": "assistant", "content": "Set tensor_parallel_size to 2 in deploy/vllm.yaml [4]. "
                                         "GPT-4o remains cheaper per token for low volume [5]."},
        {"role": "user", "content": "Thanks. We decided to order two RTX 4090 cards on 2024-05-03."},
        {"role": "assistant", "content": "Good choice. Expect about 35 tokens/s for Llama-3.1 70B [2]."},
    ]


CITATIONS = ["[1]", "[2]", "[3]", "[4]", "[5]"]

GOOD_SUMMARY = ("## Conversation Summary\n"
                "* Topic 1: GPUs for Llama-3.1 70B: the RTX 4090 has 24 GB of VRAM [1]; two run it at 4-bit [2]; "
                "the A100 80GB is faster but costs more [3].\n"
                "* Topic 2: Configuration: set tensor_parallel_size to 2 in deploy/vllm.yaml [4]; GPT-4o is cheaper "
                "for low volume [5].\n"
                "* Decision: the user ordered two RTX 4090 cards on 2024-05-03; about 35 tokens/s expected [2].")


@pytest.fixture
def good_summary() -> str:
    return GOOD_SUMMARY


@pytest.fixture
def citations() -> list[str]:
    return list(CITATIONS)
