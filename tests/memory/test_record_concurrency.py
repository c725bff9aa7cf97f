"""Writers updating one long-term record at once, from several processes, on every backend: every update lands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from record_worker import FACT, open_memory

WORKER = Path(__file__).with_name("record_worker.py")
WORKERS, COUNT = 4, 12


def run_writers(store_url: str, kind: str, go: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), store_url, kind, str(COUNT), str(go)], env=env)
             for _ in range(WORKERS)]
    go.touch()
    assert [p.wait(timeout=240) for p in procs] == [0] * WORKERS


@pytest.mark.parametrize("kind", ["pattern", "fact"])
def test_processes_updating_one_record_lose_no_update(store_url, tmp_path, kind):
    """Each process read the record, counted one up and wrote it back: two at once wrote the same count."""
    run_writers(store_url, kind, tmp_path / "go")
    memory = open_memory(store_url, kind)
    if kind == "pattern":
        [pattern] = memory.patterns()
        assert pattern["success_count"] == WORKERS * COUNT
    else:
        [fact] = memory.current()
        assert (fact.text, fact.mentions) == (FACT, WORKERS * COUNT)
    memory.close()
