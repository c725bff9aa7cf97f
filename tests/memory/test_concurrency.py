"""Concurrent writers on one conversation, through SyncConversationMemory, on every backend: every message kept once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fullrecall import SyncConversationMemory

sys.path.insert(0, str(Path(__file__).parent))
from concurrent_worker import HashEmbedder, open_memory

WORKER = Path(__file__).with_name("concurrent_worker.py")
WORKERS, COUNT = 4, 24


def conversation(memory: SyncConversationMemory) -> list[str]:
    """The whole conversation as the API shows it: the archive before the window, then the window's originals."""
    window = memory.messages
    summary = memory.manager.summary_message
    originals = window[1:] if summary is not None and window and window[0] == summary else window
    archived = memory.manager.archive.get(0, memory.manager.first_active_position - 1)
    return [m.data["content"] for m in archived] + [m["content"] for m in originals]


def assert_all_kept_once_in_order(texts: list[str], workers: int, count: int) -> None:
    assert len(texts) == workers * count, f"{workers * count - len(texts)} message(s) lost or doubled"
    assert Counter(texts) == Counter(f"w{w} m{i}" for w in range(workers) for i in range(count))
    for w in range(workers):  # each writer's messages in the order it acknowledged them
        mine = [int(t.split()[1][1:]) for t in texts if t.startswith(f"w{w} ")]
        assert mine == list(range(count))


@pytest.mark.parametrize("mode", ["reopen", "keep"])
def test_concurrent_processes_lose_nothing(store_url, tmp_path, mode):
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), store_url, str(w), str(COUNT), mode, str(go)], env=env)
             for w in range(WORKERS)]
    go.touch()
    assert [p.wait(timeout=240) for p in procs] == [0] * WORKERS
    memory = open_memory(store_url)
    texts = conversation(memory)
    assert_all_kept_once_in_order(texts, WORKERS, COUNT)
    # the window was managed along the way, and window + archive is the store's log, position by position
    log = memory.store.range(memory.scope, 0, 10**9)
    assert memory.manager.removed_message_count > 0 and [m.data["content"] for m in log] == texts


def test_two_objects_interleaving_lose_nothing(store_url):
    a, b = (SyncConversationMemory(store_url, "s", user_id="ann", summarizer=lambda m, p: "summary", max_history_turns=2,
                               preserve_recent_messages=2, embedding_model=HashEmbedder()) for _ in range(2))
    for i in range(10):
        for w, memory in enumerate((a, b)):
            memory.add({"role": "user" if i % 2 == 0 else "assistant", "content": f"w{w} m{i}"})
    for memory in (a, b):
        assert_all_kept_once_in_order(conversation(memory), 2, 10)
    assert a.messages == b.messages and a.manager.removed_message_count > 0
