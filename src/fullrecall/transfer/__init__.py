"""Moving memory in and out of a store: one module per file format.

* :mod:`.jsonl`: fullrecall's own format, lossless and versioned (messages with their
  positions, ids, indexed text, metadata and vectors; window state and summaries);
* :mod:`.openai`: OpenAI-format transcripts (a JSON list of messages, or JSON Lines of
  ``{"messages": [...]}`` chat records or of single messages);
* :mod:`.strands`: Strands Agents session folders (``FileSessionManager`` layout);
* :mod:`.locomo`: LoCoMo-format conversation files.

Every import is idempotent and resumable: each message gets a stable id (its own, or one
derived from its place and content), the store skips ids it already holds, and messages
are written in batches, so importing a file twice (or again after an interruption)
writes each message once.
"""

from __future__ import annotations

FORMATS = ("jsonl", "openai", "strands", "locomo")
