"""A worker the pin-replacement crash tests run: it resets a cleared conversation with a new system message (one
pinned before it, or none: the conversation began with a user message), and its process ends (``os._exit``, as a kill would end it) right after its store's N-th write.

Usage: python repin_worker.py STORE_URL SESSION N
"""

import os
import sys

from fullrecall import SlidingWindowConversationManager, SyncConversationMemory
from fullrecall.stores import open_store

WRITES = ("append", "replace", "delete", "put_state", "update_state", "put_record", "delete_record", "set_vectors")
DIED = 9  # the exit status of a worker that died


class DiesAfter:
    """The store, but the process ends right after its ``n``-th write returns."""

    def __init__(self, store, n):
        self._store, self._left = store, n

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if name not in WRITES:
            return attr

        def write(*args, **kwargs):
            out = attr(*args, **kwargs)
            self._left -= 1
            if self._left == 0:
                os._exit(DIED)
            return out

        return write


def main():
    url, session, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    memory = SyncConversationMemory(DiesAfter(open_store(url), n), session,
                                    manager=SlidingWindowConversationManager(window_size=10))
    memory.add([{"role": "system", "content": "rules v2", "id": "s2"},
                {"role": "user", "content": "after the reset", "id": "u2"}])


if __name__ == "__main__":
    main()
