"""Every python example of README.md and docs/*.md runs, as a user would paste it, offline.

Each runs in its own process (``PYTHONPATH`` = this tree's ``src``) in an empty folder, so ``sqlite:///memory.db``
is a new file. An LLM it calls is a scripted OpenAI-compatible server on a loopback port, named by the
environment (``FULLRECALL_LLM_*`` and ``OPENAI_*``). A block marked ``servers`` gets the suite's PostgreSQL
and Redis. What a block may say about itself in its markdown: ``doc_blocks.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fullrecall.stores._servers import drop_namespace

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from doc_blocks import ROOT, Example, examples  # noqa: E402
from summarizer_peers import Reply, ScriptedServer, completion  # noqa: E402

HERE = Path(__file__).parent
_PROVIDER = re.compile(r"^(FULLRECALL_|OPENAI_|AWS_|ANTHROPIC_)")
_URL = {"postgres": re.compile(r"postgresql://[^\"'\s]*"), "redis": re.compile(r"redis://[^\"'\s]*")}


def answer(request: dict[str, Any]) -> Reply:
    """The scripted model: it calls ``search_memory`` when offered tools, else it acknowledges. A request
    without ``model`` is Bedrock's ConverseStream (the model is in its path): it gets the answer as Bedrock
    streams it."""
    if "model" not in request:
        return converse_stream("Noted.")
    names = [t.get("function", {}).get("name") for t in request.get("tools") or []]
    if "search_memory" in names and request["messages"][-1].get("role") != "tool":
        call = {"id": "call_1", "type": "function",
                "function": {"name": "search_memory", "arguments": json.dumps({"query": "locker code"})}}
        body = {"id": "chatcmpl-doc", "object": "chat.completion", "model": "scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                             "finish_reason": "tool_calls"}]}
        return Reply(body=json.dumps(body).encode())
    return completion("Noted.")


def converse_stream(text: str) -> Reply:
    """A ConverseStream answer of ``text``: its events in AWS's event stream encoding (each message a prelude
    of lengths with its CRC32, string headers, a JSON payload and the message's CRC32)."""
    events = [("messageStart", {"role": "assistant"}),
              ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": text}}),
              ("contentBlockStop", {"contentBlockIndex": 0}), ("messageStop", {"stopReason": "end_turn"}),
              ("metadata", {"usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12},
                            "metrics": {"latencyMs": 1}})]
    body = b""
    for kind, payload in events:
        headers = b"".join(bytes([len(n)]) + n.encode() + b"\x07" + len(v).to_bytes(2, "big") + v.encode()
                           for n, v in ((":event-type", kind), (":content-type", "application/json"),
                                        (":message-type", "event")))
        data = json.dumps(payload).encode()
        prelude = (16 + len(headers) + len(data)).to_bytes(4, "big") + len(headers).to_bytes(4, "big")
        message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + headers + data
        body += message + zlib.crc32(message).to_bytes(4, "big")
    return Reply(body=body, headers={"Content-Type": "application/vnd.amazon.eventstream"})


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedServer]:
    server = ScriptedServer(lambda path: path == "/v1/chat/completions" or path.endswith("/converse-stream"))
    server.default = answer
    yield server
    server.close()


@pytest.fixture
def environment(llm: ScriptedServer, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _PROVIDER.match(k)}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(HERE)]),
        FULLRECALL_LLM_MODEL="scripted", FULLRECALL_LLM_BASE_URL=llm.base_url, FULLRECALL_LLM_API_KEY="k",
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k",
        FULLRECALL_CACHE_DIR=os.environ.get("FULLRECALL_CACHE_DIR", str(Path.home() / ".cache" / "fullrecall")),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        AWS_ENDPOINT_URL_BEDROCK_RUNTIME=llm.base_url.removesuffix("/v1"), AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y",
        AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
    )
    return env


@pytest.fixture
def servers(service_urls: dict[str, Callable[[], str]]) -> Iterator[Callable[[str], str]]:
    """Gives a block with each PostgreSQL and Redis URL it names replaced by the suite's server of that kind,
    in a schema (key prefix) of its own, dropped afterwards."""
    used: list[tuple[str, str]] = []
    name = f"doc{uuid.uuid4().hex[:10]}"

    def substitute(code: str) -> str:
        for kind, pattern in _URL.items():
            if pattern.search(code):
                base = service_urls[kind]()
                url = f"{base}{'&' if '?' in base else '?'}{'schema' if kind == 'postgres' else 'prefix'}={name}"
                code = pattern.sub(lambda _: url, code)  # noqa: B023 (used at once)
                used.append((kind, base))
        return code

    yield substitute
    for kind, base in used:
        drop_namespace(kind, base, name)


@pytest.mark.parametrize("example", examples(), ids=lambda e: e.name)
def test_doc_example_runs(example: Example, environment: dict[str, str], tmp_path: Path,
                          servers: Callable[[str], str]) -> None:
    if example.skip:
        pytest.skip(f"marked in {example.doc}: {example.skip}")
    code = servers(example.code) if example.servers else example.code
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(HERE / "doc_runner.py"), str(script), *example.given],
                          cwd=tmp_path, env=environment, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{example.name} failed:\n{done.stderr[-4000:]}"
