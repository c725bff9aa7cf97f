"""The benches ``fullrecall bench`` runs, and the option types they share."""

from __future__ import annotations

import argparse


def count(text: str) -> int:
    """A count option (messages, queries, ...): below 1 a bench has nothing to measure and would divide by it."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, at least 1, got {text!r}")
    return int(text)


def counts(text: str) -> list[int]:
    """A comma-separated list of counts (store sizes): at least one, each at least 1."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, each at least 1, got {text!r}")
    return [int(part) for part in parts]
