"""Every example runs offline (a scripted model) and shows what it claims; one also runs against a provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "summarizers"))
from summarizer_peers import ScriptedServer, completion  # noqa: E402

ROOT = Path(__file__).parents[1]
_PROVIDER_VARS = ("FULLRECALL_LLM_MODEL", "FULLRECALL_LLM_BASE_URL", "FULLRECALL_LLM_API_KEY", "FULLRECALL_LLM_PROVIDER",
                  "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "FULLRECALL_BEDROCK_MODEL_ID",
                  "FULLRECALL_EXAMPLE_STORE")


def run_example(name: str, tmp_path: Path, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in _PROVIDER_VARS}
    clean.update(env, FULLRECALL_EXAMPLE_DIR=str(tmp_path),
                 PYTHONPATH=os.pathsep.join([str(ROOT / "src"), clean.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name)], env=clean, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def answers(out: str) -> list[str]:
    return [line.removeprefix("agent> ") for line in out.splitlines() if line.startswith("agent> ")]


def test_massgen_example_remembers_across_sessions_and_not_across_users(tmp_path):
    out = run_example("massgen_memory_agent.py", tmp_path)
    said = answers(out)
    assert "Python" in said[2] and "4417" in said[3]  # a new session knows what the user said before
    assert "4417" not in said[4]  # another user does not
    assert "conversation has 4 messages" in out
    assert "'llm_calls': 0" in out and "'failures': 0" in out


def test_strands_example_recalls_what_left_the_window(tmp_path):
    pytest.importorskip("strands")
    out = run_example("strands_semantic_memory.py", tmp_path)
    assert "4417" in answers(out)[-1]
    assert "4417" not in " ".join(answers(out)[:-1])
    assert "summaries" in out and "window: 4 messages" in out


def test_strands_example_runs_again_on_the_same_store(tmp_path):
    # examples/README.md offers FULLRECALL_EXAMPLE_STORE: a second run is a second conversation, with its own session
    pytest.importorskip("strands")
    store = f"sqlite:///{tmp_path / 'kept.db'}"
    run_example("strands_semantic_memory.py", tmp_path, FULLRECALL_EXAMPLE_STORE=store)
    out = run_example("strands_semantic_memory.py", tmp_path, FULLRECALL_EXAMPLE_STORE=store)
    assert "4417" in answers(out)[-1] and "could not archive" not in out


def test_procedural_example_learns_the_tool_order(tmp_path):
    out = run_example("procedural_tools_agent.py", tmp_path)
    plans = [line for line in out.splitlines() if line.strip().startswith("plan:")]
    assert "confidence 0.30" in plans[0] and "confidence 1.00" in plans[1]  # fallback first, then the learned plan
    assert "hotel: 87.4 EUR" in out
    assert "convert_currency" in out.split("context the model was given:")[1]
    assert "'patterns': 2" in out


def test_an_example_talks_to_a_configured_provider(tmp_path):
    server = ScriptedServer()
    try:
        server.script(*[completion(f"answer {i}") for i in range(5)])
        out = run_example("massgen_memory_agent.py", tmp_path, FULLRECALL_LLM_MODEL="scripted",
                          FULLRECALL_LLM_BASE_URL=server.base_url, FULLRECALL_LLM_API_KEY="k")
    finally:
        server.close()
    assert answers(out) == [f"answer {i}" for i in range(5)]
    assert len(server.requests) == 5  # one per turn: memory itself called no LLM
    locker = server.requests[3]
    assert "4417" in json.dumps(locker["messages"][0]) and locker["messages"][0]["role"] == "system"
    assert "4417" not in json.dumps(server.requests[4])  # the other user's request
