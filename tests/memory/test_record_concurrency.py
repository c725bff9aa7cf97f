"""Writers updating one long-term record at once, from several processes, on every backend: every update lands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from record_worker import FACT, LOOSE, open_memory

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


def test_processes_stating_a_fact_without_attribute_for_the_first_time_at_once_make_one_fact(store_url, tmp_path):
    """Writers stating one fact without an attribute at once, none having seen the others' (a user's message
    recorded by several workers): each wrote a fact of its own, the same fact kept two, three, four times."""
    run_writers(store_url, "loose", tmp_path / "go")
    memory = open_memory(store_url, "fact")
    current = sorted((f.text, f.mentions) for f in memory.current())
    assert current == sorted((LOOSE.format(i), WORKERS) for i in range(COUNT))
    assert len(memory.history()) == COUNT  # the duplicates folded in are gone, not kept as closed facts
    memory.close()
