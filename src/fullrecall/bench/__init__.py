"""The benches ``fullrecall bench`` runs, and the option types they share."""

from __future__ import annotations

import argparse


def _whole(text: str) -> int:
    """``text`` as ``int()`` reads it (``1_000`` too), 0 when it reads none."""
    try:
        return int(text)
    except ValueError:
        return 0


def count(text: str) -> int:
    """A count option (messages, queries, ...): below 1 a bench has nothing to measure and would divide by it."""
    if (value := _whole(text)) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, at least 1, got {text!r}")
    return value


def counts(text: str) -> list[int]:
    """A comma-separated list of counts (store sizes): at least one, each at least 1."""
    values = [_whole(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, each at least 1, got {text!r}")
    return values
