"""A worker the pin-deletion crash test runs: it deletes the pinned system message (``delete(0)``), and its process
ends (``os._exit``, as a kill would end it) right after its store's N-th write.

Usage: python unpin_worker.py STORE_URL SESSION N
"""

import sys

from repin_worker import DiesAfter

from fullrecall import SlidingWindowConversationManager, SyncConversationMemory
from fullrecall.stores import open_store


def main():
    url, session, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    memory = SyncConversationMemory(DiesAfter(open_store(url), n), session,
                                    manager=SlidingWindowConversationManager(window_size=3))
    memory.delete(0)


if __name__ == "__main__":
    main()
