"""A Bedrock Converse server on a loopback port with scripted answers, for boto3 clients pointed at it.

boto3 reaches it through ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` (the real client, signing included).
Each request takes the next scripted ``(status, body)``; a status other than 200 answers the
error the body names, the way Bedrock does (``x-amzn-ErrorType`` and ``{"message"}``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


def answer(text: str, stop: str = "end_turn") -> tuple[int, dict[str, Any]]:
    """A Converse answer of ``text``."""
    return 200, {"output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": stop,
                 "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}, "metrics": {"latencyMs": 3}}


def error(code: str, message: str, status: int = 400) -> tuple[int, dict[str, Any]]:
    """A Bedrock error (``ValidationException``, ``AccessDeniedException``, ...)."""
    return status, {"__type": code, "message": message}


class ConverseServer:
    """Answers ``POST /model/{modelId}/converse``; keeps each request's path, headers and body."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, dict[str, Any]]] = []
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                server.requests.append({"path": unquote(self.path), "body": body,
                                        "headers": {k.lower(): v for k, v in self.headers.items()}})
                found = self.path.startswith("/model/") and self.path.endswith("/converse") and server.replies
                status, reply = server.replies.pop(0) if found else error("UnknownOperationException", "no", 404)
                raw = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if status != 200:
                    self.send_header("x-amzn-ErrorType", reply["__type"])
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def script(self, *replies: tuple[int, dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests.clear()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
