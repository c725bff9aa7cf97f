"""A worker the crash test of a system message opening a cleared window runs: the conversation began without one
(a user and an assistant message at positions 0 and 1); the worker adds one, and its process ends (``os._exit``, as
a kill would end it) right after its store's N-th write.

Usage: python midsys_worker.py STORE_URL SESSION N
"""

import sys

from repin_worker import DiesAfter

from fullrecall import SlidingWindowConversationManager, SyncConversationMemory
from fullrecall.stores import open_store


def main():
    url, session, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    memory = SyncConversationMemory(DiesAfter(open_store(url), n), session,
                                    manager=SlidingWindowConversationManager(window_size=10))
    memory.add([{"role": "system", "content": "rules v2", "id": "s2"},
                {"role": "user", "content": "after the reset", "id": "u2"}])


if __name__ == "__main__":
    main()
