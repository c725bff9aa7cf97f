"""Fixtures for the summarizer tests: the scripted OpenAI-compatible server and sample conversations."""

from __future__ import annotations

from typing import Any

import pytest
from summarizer_peers import ScriptedServer, point_boto_at


@pytest.fixture(scope="session")
def _server():
    server = ScriptedServer()
    yield server
    server.close()


@pytest.fixture
def llm_server(_server: ScriptedServer) -> ScriptedServer:
    _server.script()
    return _server


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    """A Bedrock runtime peer the clients fullrecall makes reach through the environment."""
    server = ScriptedServer(path=lambda p: p.startswith("/model/"))
    point_boto_at(server, monkeypatch)
    yield server
    server.close()


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
