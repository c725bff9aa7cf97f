"""Kill a worker with SIGKILL mid-write and mid-summarization, on every backend: nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fullrecall import SyncConversationMemory

WORKER = Path(__file__).with_name("crash_worker.py")


def start(url, ack, *extra):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(WORKER), url, str(ack), *extra], env=env)


def wait_for(predicate, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("worker did not get there in time")


def acked(ack: Path) -> list[int]:
    return [int(line) for line in ack.read_text().split("\n") if line.strip()] if ack.exists() else []


def everything(url) -> list[str]:
    """The conversation as a restarted process sees it: archived messages before the window, then the window.

    Both come from the store's log (the window is derived from it), so a kill between the log append and
    the window state save can neither lose a message nor show one twice.
    """
    memory = SyncConversationMemory(url, "crash", summarizer=lambda m, p: "s", max_history_turns=3, preserve_recent_messages=2)
    first_active = memory.manager.first_active_position
    archived = [m.data["content"] for m in memory.manager.archive.get(0, first_active - 1)]
    window = [m["content"] for m in memory.messages if m["content"].startswith("message ")]
    return archived + window


def check(url, ack):
    texts = everything(url)
    numbers = [int(t.split()[1]) for t in texts]
    assert numbers == list(range(len(numbers))), "order kept, no duplicate, no gap"
    assert set(acked(ack)) <= set(numbers), "every acknowledged message survived"


@pytest.mark.parametrize("kill_after", [7, 31])
def test_sigkill_mid_write_loses_nothing_acknowledged(store_url, tmp_path, kill_after):
    url, ack = store_url, tmp_path / "acks"
    worker = start(url, ack)
    wait_for(lambda: len(acked(ack)) >= kill_after)
    time.sleep(random.random() * 0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    check(url, ack)
    # a restarted worker resumes from the store and goes on
    worker = start(url, ack)
    done = len(acked(ack))
    wait_for(lambda: len(acked(ack)) >= done + 10)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    check(url, ack)


def test_sigkill_mid_summarization_loses_nothing(store_url, tmp_path):
    url, ack, marker = store_url, tmp_path / "acks", tmp_path / "summarizing"
    worker = start(url, ack, "slow-summary", str(marker))
    wait_for(marker.exists)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    check(url, ack)
    before = everything(url)
    # restart with a working summarizer: the cut-short summarization runs again, nothing doubles
    worker = start(url, ack)
    wait_for(lambda: len(acked(ack)) >= len(before) + 10)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    check(url, ack)
    memory = SyncConversationMemory(url, "crash", summarizer=lambda m, p: "s", max_history_turns=3, preserve_recent_messages=2)
    assert memory.manager.removed_message_count > 0
    # the store's log holds every position once, at least up to the window's start
    positions = [m.position for m in memory.manager.archive.get(0, 10**9)]
    assert positions == list(range(len(positions))) and len(positions) >= memory.manager.removed_message_count


def each_point_of_death(store_url, worker_name, prepare, check) -> int:
    """For n = 1, 2, ...: ``prepare(session)`` a fresh conversation, run the worker ``worker_name`` on it, ended right
    after its n-th store write, then ``check(session)``; until a worker gets through every write. How many runs."""
    worker, writes = Path(__file__).with_name(worker_name), 0
    while True:
        writes += 1
        session = f"{Path(worker_name).stem}-{writes}"
        prepare(session)
        done = subprocess.run([sys.executable, str(worker), store_url, session, str(writes)], timeout=120)
        assert done.returncode in (0, 9), "the worker failed otherwise than by dying"
        check(session)
        if done.returncode == 0:  # it got through every write: each point of death was tried
            return writes


def test_a_crash_while_a_new_system_message_takes_the_pins_place_leaves_one_pinned_and_loses_nothing(store_url):
    """A new system message after ``clear()`` replaces the pinned one: the old one's row at position 0 was deleted,
    then the new one written there, in two store writes. A process that died between them left no pinned message
    at all (the window started with an archived message), and a retried reset could not repair it. Now the swap is
    one atomic write (``Store.replace``): killed after any write, the conversation has one pinned message, the old
    or the new, the old one stays in the log, and the retried reset ends as an uninterrupted one does."""
    from fullrecall import SlidingWindowConversationManager

    def memory(session):
        return SyncConversationMemory(store_url, session, manager=SlidingWindowConversationManager(window_size=10))

    def prepare(session):
        with memory(session) as mem:
            mem.add([{"role": "system", "content": "rules v1", "id": "s1"}, {"role": "user", "content": "q"},
                     {"role": "assistant", "content": "a"}])
            mem.clear()

    def check(session):
        with memory(session) as mem:
            window = mem.messages
            assert window[0]["role"] == "system" and window[0]["content"] in ("rules v1", "rules v2"), window
            mem.add([{"role": "system", "content": "rules v2", "id": "s2"},
                     {"role": "user", "content": "after the reset", "id": "u2"}])  # the caller retries
            assert [m["content"] for m in mem.messages] == ["rules v2", "after the reset"]
            logged = [m.data["content"] for m in mem.store.range(mem.scope, 0, 100)]
            assert {"rules v1", "q", "a"} <= set(logged)  # nothing lost: the old prompt is archived
            assert logged.count("rules v2") == logged.count("after the reset") == 1

    assert each_point_of_death(store_url, "repin_worker.py", prepare, check) > 3


def test_a_crash_while_a_system_message_takes_position_0_from_a_user_message_leaves_one_pinned_or_none(store_url):
    """A conversation that began without a system message, cleared, then reset with one: the system message opened
    the window at a later position, pinned by the manager but not by the memory (the window lost messages). Now it
    takes position 0, whose message is appended again and archived first. Killed after any store write, the
    conversation has no pinned message or the new one (never two), the old first message stays in the log, and the
    retried reset ends as an uninterrupted one does, with no second copy of it."""
    from fullrecall import SlidingWindowConversationManager

    def memory(session):
        return SyncConversationMemory(store_url, session, manager=SlidingWindowConversationManager(window_size=10))

    def prepare(session):
        with memory(session) as mem:
            mem.add([{"role": "user", "content": "hello", "id": "h"}, {"role": "assistant", "content": "hi"}])
            mem.clear()

    def check(session):
        with memory(session) as mem:
            window = [m["content"] for m in mem.messages]
            assert window in ([], ["hello"], ["rules v2"], ["rules v2", "after the reset"]), window
            logged = [m.data["content"] for m in mem.store.range(mem.scope, 0, 100)]
            assert {"hello", "hi"} <= set(logged)  # nothing lost
            mem.add([{"role": "system", "content": "rules v2", "id": "s2"},
                     {"role": "user", "content": "after the reset", "id": "u2"}])  # the caller retries
            assert [m["content"] for m in mem.messages] == ["rules v2", "after the reset"]
            logged = [m.data["content"] for m in mem.store.range(mem.scope, 0, 100)]
            assert logged[0] == "rules v2" and sorted(logged) == ["after the reset", "hello", "hi", "rules v2"]
            mem.add({"role": "user", "content": "next", "id": "u3"})
            assert [m["content"] for m in memory(session).messages] == ["rules v2", "after the reset", "next"]

    assert each_point_of_death(store_url, "repin_worker.py", prepare, check) > 3


def test_a_crash_while_the_pinned_message_is_deleted_never_shifts_the_window(store_url):
    """``delete(0)`` of the pinned system message deleted its row, then saved the window state that counts position 0
    as gone, in two store writes: a process that died between them left the window starting one position early (an
    archived message back in it). Now the state is written first and names the row, which a restarted process
    deletes: killed after any write, the window is the old one (pinned message and all) or the new one, never
    shifted, and a pinned message the window no longer shows is gone from the store."""
    from fullrecall import SlidingWindowConversationManager

    def memory(session):
        return SyncConversationMemory(store_url, session, manager=SlidingWindowConversationManager(window_size=3))

    before = ["rules", "m4", "m5"]

    def prepare(session):
        with memory(session) as mem:  # the oldest messages have left the window: "one early" would show one
            mem.add([{"role": "system", "content": "rules", "id": "s1"}] +
                    [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(6)])
            assert [m["content"] for m in mem.messages] == before

    def check(session):
        with memory(session) as mem:
            window = [m["content"] for m in mem.messages]
            # the delete rebuilds the window: cleared into the archive, the row deleted, the rest added back; a
            # crash half-way may leave it cleared (["rules"], or [] once the pin is gone), never shifted
            assert window in (before, ["rules"], [], before[1:]), (session, window)
            if "rules" in window:
                mem.delete(0)  # the caller retries
            else:
                assert mem.store.get(mem.scope, ["s1"]) == [], "the deleted pinned message is gone for good"
            assert [m["content"] for m in mem.messages] in ([], before[1:])
            assert mem.store.get(mem.scope, ["s1"]) == []
            logged = [m.data["content"] for m in mem.store.range(mem.scope, 0, 100)]
            assert {f"m{i}" for i in range(6)} <= set(logged)  # nothing else lost

    assert each_point_of_death(store_url, "unpin_worker.py", prepare, check) > 1
