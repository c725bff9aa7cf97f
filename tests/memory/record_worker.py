"""A writer of the record concurrency tests: updates one long-term record in place, again and again.

Usage: python record_worker.py STORE_URL KIND COUNT GO_FILE
KIND "pattern" stores one procedural pattern COUNT times (its success count goes up by one each);
"fact" states one fact COUNT times (its mention count goes up by one each); "loose" states COUNT facts
without an attribute, each for the first time, in the same order as the other workers (LOOSE).
Each worker waits for GO_FILE so that all of them write at once.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from concurrent_worker import HashEmbedder

from fullrecall import FactMemory, ProceduralMemory

PATTERN = ("analyze my weight trends", ["search_records", "aggregate", "trend"])
FACT = "My city is Lyon"
LOOSE = "I like band {}"


def open_memory(url, kind):
    cls = ProceduralMemory if kind == "pattern" else FactMemory
    return cls(url, user_id="ann", agent_id="bot", embedder=HashEmbedder())


def main():
    url, kind, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    memory = open_memory(url, kind)
    while not os.path.exists(go):
        time.sleep(0.005)
    for _ in range(count):
        if kind == "pattern":
            memory.store_pattern(*PATTERN, success_score=0.9, execution_time_ms=100.0)
        elif kind == "fact":
            memory.remember(FACT)
    for i in range(count if kind == "loose" else 0):
        memory.remember(LOOSE.format(i))
    memory.close()


if __name__ == "__main__":
    main()
