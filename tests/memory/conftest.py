"""Fixtures for the memory tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import ScriptedServer  # noqa: E402


@pytest.fixture(scope="module")
def server():
    """A scripted OpenAI-compatible chat server (``summarizer_peers``), one a test module."""
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture
def beating() -> Any:
    """``beating(work)``: ``asyncio.run`` of the coroutine ``work()`` beside a heartbeat coroutine that wakes every
    10 ms; ``(work's result, the longest the heartbeat went without waking)``: how long ``work`` held the loop.
    """
    import asyncio
    import time

    def run(work: Any) -> tuple[Any, float]:
        async def main() -> tuple[Any, list[float]]:
            beats: list[float] = []

            async def heartbeat() -> None:
                while True:
                    beats.append(time.monotonic())
                    await asyncio.sleep(0.01)

            task = asyncio.create_task(heartbeat())
            await asyncio.sleep(0.05)
            result = await work()
            task.cancel()
            return result, [*beats, time.monotonic()]  # the last gap: from the last beat to the end

        result, beats = asyncio.run(main())
        return result, max(b - a for a, b in zip(beats, beats[1:]))

    return run
