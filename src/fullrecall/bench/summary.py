"""Measure what the extractive summary keeps: numbers, dates, named entities, citations.

Each LoCoMo session (or each window of ``--span-turns`` turns) is one span:
the messages a manager would replace by a summary. For every span the scorer
extracts facts with its own definitions (below), deliberately different from
the regexes the summarizer uses to choose sentences, and counts the share that
appears in the summary, plus the compression (tokens in / tokens out).

Scoring definitions (case-insensitive match in the summary, on word boundaries):
- number: a digit run (``5``, ``3.5``, ``1,200``) not part of a date or citation, or a
  spelled-out number from two to twelve, twenty, thirty, ..., hundred, thousand, million;
- date: a capitalized month name (with its day/year when written next to it), a weekday,
  a year 1900-2099, or a relative time (yesterday, tomorrow, tonight,
  last/next/this week|weekend|month|year|<weekday>|<season>, "N days ago");
- named entity: a maximal run of capitalized words whose first word is not the
  first word of a sentence (sentence-initial words are ambiguous and skipped),
  excluding "I", its contractions, and month/weekday names (those are dates);
- citation: ``[N]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

# capitalized only: "may" and "march" are also verbs
_MONTHS = ("(?-i:January|February|March|April|May|June|July|August|September|October|November|December|"
           "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)")
_DAYS = "(?-i:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_DATE = re.compile(
    rf"\b(?:\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTHS}\b(?:,?\s+\d{{4}})?|{_MONTHS}\b\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?\b)?"
    rf"(?:,?\s+\d{{4}})?|{_DAYS}\b|(?:19|20)\d{{2}}\b|yesterday|tomorrow|tonight|"
    rf"(?:last|next|this|past)\s+(?:week(?:end)?|month|year|night|summer|winter|spring|fall|autumn|{_DAYS})\b|"
    rf"(?:a|an|one|two|three|four|five|six|few|couple of|\d+)\s+(?:days?|weeks?|months?|years?)\s+ago\b)",
    re.IGNORECASE)
_NUMBER = re.compile(
    r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w])|\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million)\b", re.IGNORECASE)
_CITATION = re.compile(r"\[\d+\]")
_SENT_START = re.compile(r"(?:^|[.!?…]\s+|\n\s*|[\"“(]\s*)$")
_CAP_RUN = re.compile(r"\b[A-Z][\w'’&-]*(?:[ \t]+[A-Z][\w'’&-]*)*")
_NOT_NAMES = re.compile(rf"^(?:(?i:i|i'm|i’m|i've|i’ve|i'd|i’d|i'll|i’ll)|{_MONTHS}|{_DAYS})$")


def facts(text: str) -> dict[str, set[str]]:
    """The numbers, dates, named entities and citations of a text, by the scorer's definitions."""
    dates = {m.group(0) for m in _DATE.finditer(text)}
    date_spans = [m.span() for m in _DATE.finditer(text)] + [m.span() for m in _CITATION.finditer(text)]
    numbers = {m.group(0) for m in _NUMBER.finditer(text)
               if not any(a <= m.start() < b for a, b in date_spans)}
    entities = set()
    for m in _CAP_RUN.finditer(text):
        words = m.group(0).rstrip(".'’").split()
        if _SENT_START.search(text[: m.start()]):
            words = words[1:]  # the first word starts a sentence: not evidence of a name
        while words and _NOT_NAMES.match(words[0].rstrip(".,")):
            words = words[1:]
        while words and _NOT_NAMES.match(words[-1].rstrip(".,")):
            words = words[:-1]
        if words:
            entities.add(" ".join(words).rstrip(".,"))
    citations = {m.group(0) for m in _CITATION.finditer(text)}
    norm = lambda s: {" ".join(x.split()).casefold() for x in s if x.strip()}  # noqa: E731
    return {"numbers": norm(numbers), "dates": norm(dates), "entities": norm(entities), "citations": norm(citations)}


def kept(item: str, summary: str) -> bool:
    pattern = r"(?<![\w])" + r"\s+".join(re.escape(p) for p in item.split()) + r"(?![\w])"
    return re.search(pattern, summary, re.IGNORECASE) is not None


def default_data() -> Path:
    """``../shared/bench/locomo-dev.json`` next to the checkout."""
    root = Path(__file__).resolve().parents[3]
    return root.parent / "shared" / "bench" / "locomo-dev.json"


def spans(conversation: dict[str, Any], span_turns: int | None) -> list[tuple[str, list[dict[str, Any]]]]:
    """The spans of one LoCoMo conversation: one per session, or windows of ``span_turns`` turns."""
    conv = conversation["conversation"]
    sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]),
                      key=lambda k: int(k.split("_")[1]))
    if span_turns is None:
        return [(f"{conversation['sample_id']}/{k}", conv[k]) for k in sessions]
    turns = [t for k in sessions for t in conv[k]]
    return [(f"{conversation['sample_id']}/turns {i}-{i + len(turns[i:i + span_turns]) - 1}", turns[i:i + span_turns])
            for i in range(0, len(turns), span_turns)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=None, help="a LoCoMo-format JSON file (default: ../shared/bench/locomo-dev.json)")
    parser.add_argument("--span-turns", type=int, default=None, help="windows of N turns instead of one span per session")
    parser.add_argument("--max-summary-tokens", type=int, default=800)
    parser.add_argument("--ratio", type=float, default=0.25, help="summary budget as a share of the span's tokens")
    parser.add_argument("--min-summary-tokens", type=int, default=128, help="floor of a short span's budget")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--show", type=int, default=0, help="print the first N summaries")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def run(args: argparse.Namespace) -> int:
    from ..messages.model import Message, TextBlock
    from ..summarizers import ExtractiveSummarizer
    from ..tokens import default_token_counter

    path = args.data or default_data()
    if not path.exists():
        print(f"no data at {path}: pass --data FILE (LoCoMo format)")
        return 2
    data = json.loads(path.read_text())[: args.limit]
    counter = default_token_counter()
    summarizer = ExtractiveSummarizer(args.max_summary_tokens, target_ratio=args.ratio,
                                      min_summary_tokens=args.min_summary_tokens, token_counter=counter)
    kinds = ("numbers", "dates", "entities", "citations")
    found = dict.fromkeys(kinds, 0)
    hit = dict.fromkeys(kinds, 0)
    per_span: list[dict[str, Any]] = []
    tokens_in = tokens_out = 0
    started = time.perf_counter()
    shown = 0
    for conv in data:
        speaker_a = conv["conversation"].get("speaker_a")
        for name, turns in spans(conv, args.span_turns):
            msgs = [Message(role="user" if t["speaker"] == speaker_a else "assistant",
                            content=[TextBlock(t["text"])], id=t.get("dia_id"), position=i,
                            metadata={"speaker": t["speaker"]}) for i, t in enumerate(turns)]
            summary = summarizer.summarize(msgs)
            t_in = sum(counter.count_message(m) for m in msgs)
            t_out = max(1, summary.token_count)
            tokens_in += t_in
            tokens_out += t_out
            span_facts = facts("\n".join(t["text"] for t in turns))
            row: dict[str, Any] = {"span": name, "tokens_in": t_in, "tokens_out": t_out, "compression": t_in / t_out}
            for kind in kinds:
                items = span_facts[kind]
                k = sum(kept(i, summary.text) for i in items)
                found[kind] += len(items)
                hit[kind] += k
                row[kind] = [k, len(items)]
            per_span.append(row)
            if shown < args.show:
                shown += 1
                print(f"--- {name}: {t_in} -> {t_out} tokens\n{summary.text}\n")
    elapsed = time.perf_counter() - started
    share = {k: (hit[k] / found[k] if found[k] else None) for k in kinds}
    core = ("numbers", "dates", "entities")
    pooled = sum(hit[k] for k in core) / max(1, sum(found[k] for k in core))
    ratios = [r["compression"] for r in per_span]
    result = {
        "data": str(path), "conversations": len(data), "spans": len(per_span),
        "span": f"{args.span_turns} turns" if args.span_turns else "session",
        "max_summary_tokens": args.max_summary_tokens, "ratio": args.ratio, "token_counter": counter.name,
        "kept": share, "found": found, "kept_numbers_dates_entities": pooled,
        "compression": tokens_in / max(1, tokens_out), "compression_median": statistics.median(ratios) if ratios else None,
        "compression_min": min(ratios) if ratios else None, "spans_below_4x": sum(r < 4.0 for r in ratios),
        "seconds": elapsed,
        "target_met": pooled >= 0.8 and all((s := share[k]) is None or s >= 0.8 for k in core)
        and tokens_in / max(1, tokens_out) >= 4.0,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['spans']} spans ({result['span']}) from {result['conversations']} conversations in {path.name}")
    for kind in kinds:
        s = share[kind]
        print(f"  {kind:<10} kept {'n/a' if s is None else f'{s:.1%}':>6}  ({hit[kind]}/{found[kind]})")
    print(f"  numbers+dates+entities kept {pooled:.1%}")
    print(f"  compression {result['compression']:.2f}x overall, median {result['compression_median']:.2f}x, "
          f"min {result['compression_min']:.2f}x ({counter.name} tokens); "
          f"{result['spans_below_4x']} spans below 4x")
    print(f"  target (>= 80% kept at >= 4x): {'met' if result['target_met'] else 'NOT met'}; {elapsed:.1f} s")
    return 0
