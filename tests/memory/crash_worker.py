"""A worker the crash tests kill with SIGKILL: adds numbered messages, acknowledging each one.

Usage: python crash_worker.py STORE_URL ACK_FILE [slow-summary MARKER_FILE]
"""

import os
import sys
import time

from fullrecall import SyncConversationMemory


def slow_summarizer(marker):
    def summarize(messages, previous):
        with open(marker, "w") as f:
            f.write("summarizing")
        time.sleep(60)  # killed in here
        return "never returned"
    return summarize


def main():
    url, ack = sys.argv[1], sys.argv[2]
    summarizer = slow_summarizer(sys.argv[4]) if len(sys.argv) > 3 else (lambda m, p: f"summary of {len(m)}")
    memory = SyncConversationMemory(url, "crash", summarizer=summarizer, max_history_turns=3, preserve_recent_messages=2,
                                embedding_model=os.environ.get("CRASH_EMBEDDER") or None)
    window = [m for m in memory.messages if m["content"].startswith("message ")]
    start = memory.manager.first_active_position + len(window)  # the next number to write
    with open(ack, "a") as acks:
        for i in range(start, 100_000):
            memory.add({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
            acks.write(f"{i}\n")
            acks.flush()


if __name__ == "__main__":
    main()
