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
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    trickle: float = 0.0  # seconds between bytes: the answer is sent one byte at a time...
    trickle_head: bool = True  # ...status line and headers included (else they come at once, then the body trickles)
    flood: int = 0  # bytes of spaces sent after ``body``, with no Content-Length: until the client hangs up


def completion(text: str | None, finish_reason: str = "stop", refusal: str | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if refusal is not None:
        message["refusal"] = refusal
    body = {"id": "chatcmpl-test", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}
    return Reply(body=json.dumps(body).encode())


class ScriptedServer:
    """``path`` picks the endpoint served: OpenAI's by default; any other path-matching predicate
    (e.g. Bedrock Converse's ``/model/{id}/converse``) turns the server into that provider's peer.
    When the scripted replies run out, ``default`` answers (an HTTP 500 unless a test sets it)."""

    def __init__(self, path: Callable[[str], bool] | None = None) -> None:
        accepts = path or (lambda p: p == "/v1/chat/completions")
        self.replies: list[Reply | Callable[[dict[str, Any]], Reply]] = []
        self.default: Reply | Callable[[dict[str, Any]], Reply] = Reply(status=500, body=b"no reply scripted")
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
                if not accepts(self.path.split("?")[0]):
                    self._send(Reply(status=404, body=b'{"error": "not found"}'))
                    return
                body = json.loads(raw)
                with server.lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    script = server.replies.pop(0) if server.replies else server.default
                reply = script(body) if callable(script) else script
                if reply.delay:
                    time.sleep(reply.delay)
                self._send(reply)

            def _send(self, reply: Reply) -> None:
                if reply.trickle:
                    self._trickle(reply)
                    return
                if reply.flood:
                    self._flood(reply)
                    return
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

            def _trickle(self, reply: Reply) -> None:
                head = (f"HTTP/1.1 {reply.status} OK\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(reply.body)}\r\n\r\n").encode()
                self.close_connection = True
                try:
                    if not reply.trickle_head:
                        self.wfile.write(head)
                        head = b""
                    for i, byte in enumerate(head + reply.body):
                        if i or not reply.trickle_head:
                            time.sleep(reply.trickle)
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass  # the client gave up

            def _flood(self, reply: Reply) -> None:
                self.close_connection = True
                try:
                    self.send_response(reply.status)
                    for k, v in {"Content-Type": "application/json", "Connection": "close", **reply.headers}.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(reply.body)
                    sent, chunk = 0, b" " * 65536
                    while sent < reply.flood:
                        self.wfile.write(chunk)
                        sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass  # the client hung up

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


def point_boto_at(server: ScriptedServer, monkeypatch: Any, key: str = "x", secret: str = "y") -> None:
    """The Bedrock runtime clients fullrecall makes (boto3, signing included) reach ``server``, with test
    credentials and no configuration file of the machine's."""
    host, port = server.httpd.server_address[:2]
    for name, value in (("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", f"http://{host}:{port}"), ("AWS_ACCESS_KEY_ID", key),
                        ("AWS_SECRET_ACCESS_KEY", secret), ("AWS_CONFIG_FILE", "/nonexistent"),
                        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")):
        monkeypatch.setenv(name, value)


def scripted_model(server: ScriptedServer) -> Any:
    """fullrecall's OpenAI chat model talking to ``server``, no retries (each scripted reply is one answer)."""
    from fullrecall.summarizers.chat_models import OpenAIChatModel

    return OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", max_retries=0)
