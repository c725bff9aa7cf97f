"""A writer of the concurrency tests: adds numbered messages to one shared conversation.

Usage: python concurrent_worker.py STORE_URL WORKER COUNT MODE GO_FILE
MODE "reopen" opens the memory for every message (a stateless service worker), "keep" holds one object.
Each worker waits for GO_FILE so that all of them write at once.
"""

import hashlib
import os
import sys
import time

import numpy as np

from fullrecall import SyncConversationMemory


class HashEmbedder:
    """A real, instant embedder (hashed words): these tests are about writes, not about meaning."""

    name, dimension = "test-hash-32", 32

    def embed(self, texts):
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def open_memory(url):
    return SyncConversationMemory(url, "shared", user_id="ann", agent_id="bot",
                              summarizer=lambda m, p: f"summary of {len(m)}",
                              max_history_turns=3, preserve_recent_messages=2, embedding_model=HashEmbedder())


def main():
    url, worker, count, mode, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    while not os.path.exists(go):
        time.sleep(0.005)
    memory = open_memory(url) if mode == "keep" else None
    for i in range(count):
        message = {"role": "user" if i % 2 == 0 else "assistant", "content": f"w{worker} m{i}"}
        if mode == "reopen":
            request = open_memory(url)
            request.add(message)
            request.store.close()
        else:
            memory.add(message)


if __name__ == "__main__":
    main()
