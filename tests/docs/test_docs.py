"""Every python example of README.md and docs/*.md runs, as a user would paste it, offline; so do the console
transcripts marked to run, and docs/service.md's quick start against a real ``fullrecall serve``.

Each runs in its own process (``PYTHONPATH`` = this tree's ``src``) in an empty folder, so ``sqlite:///memory.db``
is a new file. An LLM it calls is a scripted OpenAI-compatible server on a loopback port, named by the
environment (``FULLRECALL_LLM_*`` and ``OPENAI_*``). A block marked ``servers`` gets the suite's PostgreSQL
and Redis. What a block may say about itself in its markdown: ``doc_blocks.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import uuid
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fullrecall.stores._servers import drop_namespace

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from doc_blocks import DOCS, ROOT, Example, Shell, examples, fenced, shell_blocks  # noqa: E402
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


@pytest.fixture(scope="module")
def environment(llm: ScriptedServer) -> dict[str, str]:
    """This process's environment without any provider's settings, the scripted server named instead."""
    env = {k: v for k, v in os.environ.items() if not _PROVIDER.match(k)}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(HERE)]),
        FULLRECALL_LLM_MODEL="scripted", FULLRECALL_LLM_BASE_URL=llm.base_url, FULLRECALL_LLM_API_KEY="k",
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k",
        FULLRECALL_CACHE_DIR=os.environ.get("FULLRECALL_CACHE_DIR", str(Path.home() / ".cache" / "fullrecall")),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        AWS_ENDPOINT_URL_BEDROCK_RUNTIME=llm.base_url.removesuffix("/v1"), AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y",
        AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
    )
    return env


def run_example(code: str, given: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = folder / "example.py"
    script.write_text(code, encoding="utf-8")
    return subprocess.run([sys.executable, str(HERE / "doc_runner.py"), str(script), *given], cwd=folder, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def started(request: pytest.FixtureRequest, environment: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The selected examples that need no server, started together, as many at a time as there are cores
    (most of an example's time is importing its framework): name -> its run."""
    chosen = {item.callspec.params["example"].name for item in request.session.items
              if "example" in getattr(getattr(item, "callspec", None), "params", {})}
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    runs = {e.name: pool.submit(run_example, e.code, e.given, tmp_path_factory.mktemp("doc"), environment)
            for e in examples() if e.name in chosen and not e.skip and not e.servers}
    yield runs
    pool.shutdown(cancel_futures=True)


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
def test_doc_example_runs(example: Example, started: dict[str, Future[subprocess.CompletedProcess[str]]],
                          environment: dict[str, str], tmp_path: Path, servers: Callable[[str], str]) -> None:
    if example.skip:
        pytest.skip(f"marked in {example.doc}: {example.skip}")
    if example.servers:
        done = run_example(servers(example.code), example.given, tmp_path, environment)
    else:
        done = started[example.name].result()
    assert done.returncode == 0, f"{example.name} failed:\n{done.stderr[-4000:]}"


class Terminal:
    """Runs command lines in bash in an empty folder, ``fullrecall`` being this tree's command; output as a
    terminal shows it (stdout and stderr together)."""

    def __init__(self, environment: dict[str, str], folder: Path) -> None:
        bin_dir, self.work = folder / "bin", folder / "work"
        bin_dir.mkdir()
        self.work.mkdir()
        (bin_dir / "fullrecall").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fullrecall "$@"\n')
        (bin_dir / "fullrecall").chmod(0o755)
        self.env = dict(environment, PATH=f"{bin_dir}{os.pathsep}{environment['PATH']}")

    def run(self, command: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=self.work, env=dict(self.env, **env),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120)

    def start(self, command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.work, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def terminal(environment: dict[str, str], tmp_path: Path) -> Terminal:
    return Terminal(environment, tmp_path)


def shape(line: str) -> str:
    """A line of output with its numbers left free (timings, scores, dates, positions)."""
    return re.sub(r"\d+(?:[.,:-]\d+)*", "N", line).rstrip()


def test_every_shell_block_runs_or_says_why_not() -> None:
    unmarked = [b.name for b in shell_blocks() if not {"run", "service", "skip"} & set(b.marks)]
    assert not unmarked, f"shell blocks with no doc-test comment: {unmarked}"


@pytest.mark.parametrize("block", [b for b in shell_blocks() if "run" in b.marks], ids=lambda b: b.name)
def test_doc_transcript_prints_what_it_shows(block: Shell, terminal: Terminal) -> None:
    for command, shown in block.transcript():
        done = terminal.run(command)
        assert done.returncode == 0, f"{block.name}: `{command}` exited {done.returncode}:\n{done.stdout[-3000:]}"
        printed = done.stdout.splitlines()
        assert [shape(x) for x in printed] == [shape(x) for x in shown], f"{block.name}: `{command}` printed:\n" + \
            "\n".join(printed)


def commands(text: str) -> list[tuple[str, str | None]]:
    """A bash block's commands (continued lines joined), each with the ``# output`` comment line after it."""
    found: list[tuple[str, str | None]] = []
    pending = ""
    for line in text.splitlines():
        if line.startswith("# ") and found and not pending:
            found[-1] = (found[-1][0], line[2:])
        elif line.strip() and not line.startswith("#"):
            pending += line.rstrip().removesuffix("\\") + " "
            if not line.rstrip().endswith("\\"):
                found.append((pending.strip(), None))
                pending = ""
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_service_quick_start_answers_as_shown(terminal: Terminal) -> None:
    pytest.importorskip("uvicorn")
    if not shutil.which("curl"):
        pytest.skip("the quick start's requests are curl commands, and curl is not installed")
    setup, requests = (commands(b.text) for b in shell_blocks() if "service" in b.marks)
    made = terminal.run(next(c for c, _ in setup if c.startswith("fullrecall keys create")))
    assert made.returncode == 0 and re.fullmatch(r"fr_\S+", made.stdout.splitlines()[-1]), made.stdout
    key = made.stdout.splitlines()[-1]  # "prints the key once, alone on the last line"
    port = free_port()
    server = terminal.start(next(c for c, _ in setup if c.startswith("fullrecall serve"))
                            .replace("--port 8080", f"--port {port}"))
    try:
        ready = f"curl -sf localhost:{port}/readyz"
        deadline = time.monotonic() + 90
        while terminal.run(ready).returncode and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.poll() is None and not terminal.run(ready).returncode, "fullrecall serve did not get ready"
        for command, shown in requests:
            if command.startswith("KEY="):
                continue
            done = terminal.run(command.replace("localhost:8080", f"localhost:{port}"), KEY=key)
            assert done.returncode == 0 and done.stdout.startswith("{"), f"`{command}`: {done.stdout}"
            if shown is not None:
                assert json.loads(done.stdout) == json.loads(shown), f"`{command}` answered {done.stdout}"
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.parametrize("block", fenced("toml"), ids=lambda b: b.name)
def test_doc_service_config_loads_as_shown(block: Shell, tmp_path: Path) -> None:
    from fullrecall.service.config import Settings

    path = tmp_path / "serve.toml"
    path.write_text(block.text)
    settings = Settings.load(str(path), env={})
    shown = tomllib.loads(block.text)["serve"]
    assert {k: getattr(settings, k) for k in shown} == shown


def command_lines() -> list[tuple[str, str]]:
    """(where, line) for every ``fullrecall ...`` command the docs give: in shell blocks and in inline code."""
    found = [(b.name, line) for b in shell_blocks() for line in b.text.splitlines()
             if re.match(r"^(\$ )?fullrecall ", line)]
    for path in DOCS:
        found += [(path.name, m.group(1)) for m in re.finditer(r"`(fullrecall [^`\n]+)`", path.read_text())]
    return found


def test_doc_command_lines_name_real_options() -> None:
    from fullrecall.cli.main import build_parser

    wrong = []
    for where, line in command_lines():
        words = re.match(r"(?:\$ )?fullrecall ((?:bench |keys )?[a-z]+)(.*)", line)
        if words is None:  # `fullrecall --help` and the like
            continue
        command = words.group(1).split()
        parser = build_parser(command)
        for word in command:  # down to the subcommand's own parser
            parser = parser._subparsers._group_actions[0].choices[word]  # type: ignore[union-attr]
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", words.group(2).split(" #")[0]))
        wrong += [f"{where}: fullrecall {' '.join(command)} has no {option}: {line}"
                  for option in sorted(named - set(parser._option_string_actions))]
    assert not wrong, "\n".join(wrong)
