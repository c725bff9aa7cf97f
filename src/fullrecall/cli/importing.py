"""``fullrecall import PATH``: conversations into a store, from jsonl, openai, strands or locomo files, and a
long-term memory's own export (``PersistentMemory.export_jsonl``: messages and facts).

Idempotent and resumable: every message has a stable id the store skips when it holds it,
so importing twice changes nothing, and an interrupted import is finished by running it again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .._json import parse as parse_json
from .common import add_store, emit, opened_store, progress_bars, scope

FORMATS = ("jsonl", "memory", "openai", "strands", "locomo")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a file (jsonl, openai, locomo) or a folder (strands); '-' reads stdin")
    parser.add_argument("--format", choices=("auto", *FORMATS), default="auto", help="the file's format (default: "
                        "guessed: a folder is strands, a fullrecall header jsonl, a long-term memory's header memory, "
                        "a list of samples locomo, else openai)")
    add_store(parser, session_help="import every message into this one conversation (default: each conversation of the file "
              "as its own)")
    parser.add_argument("--no-embed", action="store_true",
                        help="do not embed messages that come without vectors (lexical search only until indexed)")


def detect(path: str) -> str:
    """The format of ``path``: a folder is strands, a fullrecall header jsonl, LoCoMo samples locomo, else openai."""
    p = Path(path)
    if p.is_dir():
        return "strands"
    with p.open(encoding="utf-8-sig") as fp:
        first = fp.readline()
        try:
            line = parse_json(first)
        except json.JSONDecodeError:
            line = None  # a JSON document spread over lines (LoCoMo as exported): read it whole below
        if isinstance(line, dict) and line.get("format") == "fullrecall":
            return "jsonl"
        if isinstance(line, dict) and line.get("format") == "fullrecall.memory":
            return "memory"
        try:
            whole = parse_json(first + fp.read())
        except json.JSONDecodeError:
            return "openai"  # JSON Lines
    sample = whole[0] if isinstance(whole, list) and whole else whole
    return "locomo" if isinstance(sample, dict) and isinstance(sample.get("conversation"), dict) else "openai"


class LazyEmbedder:
    """The local embedder, loaded when the first message without a vector needs it.

    A file whose every message carries its vector, or one refused on reading, never loads the model.
    """

    def __init__(self) -> None:
        self._embedder: Any = None

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from ..embeddings import load_embedder

            self._embedder = load_embedder(None)
        return self._embedder

    @property
    def name(self) -> str:
        return str(self.embedder.name)

    def embed(self, texts: list[str]) -> Any:
        return self.embedder.embed(texts)


def run(args: argparse.Namespace) -> int:
    """Import the file; one that is no UTF-8 text (a database given by mistake), or JSON nested past what a parser
    reads, is refused naming it.
    """
    from ..errors import InvalidInput

    where = "stdin" if args.path == "-" else args.path
    try:
        return _import(args)
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{where}: not UTF-8 text (a byte 0x{exc.object[exc.start]:02x})") from None
    except RecursionError:
        raise InvalidInput(f"{where}: JSON nested too deep to read") from None


def _import(args: argparse.Namespace) -> int:
    import sys

    from ..transfer import jsonl, locomo, openai, strands

    fmt = args.format
    if fmt == "auto":
        fmt = "jsonl" if args.path == "-" else detect(args.path)
    if fmt == "memory":
        return _import_memory(args)
    own = scope(args)  # checked before the store is made: a refused option leaves no file behind
    with opened_store(args) as store:
        embedder = None if args.no_embed else LazyEmbedder()
        with progress_bars(not args.json) as progress:
            if fmt == "strands":
                counts = strands.import_strands(store, own, args.path, agent_id=args.agent, progress=progress,
                                                embedder=embedder)
            else:
                fp = sys.stdin if args.path == "-" else open(args.path, encoding="utf-8-sig")  # a BOM (Windows tools) is no JSON
                try:
                    if fmt == "jsonl":
                        counts = jsonl.import_jsonl(store, own, fp, keep_owner=args.user is None and args.agent is None,
                                                    progress=progress, embedder=embedder,
                                                    name="stdin" if args.path == "-" else f"file {args.path!r}")
                    elif fmt == "locomo":
                        counts = locomo.import_locomo(store, own, fp, progress=progress, embedder=embedder)
                    else:
                        counts = openai.import_openai(store, own, fp, name=Path(args.path).stem if args.path != "-"
                                                      else "stdin", progress=progress, embedder=embedder)
                finally:
                    if fp is not sys.stdin:
                        fp.close()
        text = (f"imported {args.path} ({fmt}): {counts['conversations']} conversations, {counts['messages']:,} "
                f"messages read, {counts['written']:,} new"
                + ("" if counts["written"] else " (all were there already)" if counts["messages"]
                   else f" ({'stdin' if args.path == '-' else 'the file'} holds no message)")
                + "".join(f", {v:,} {k}" for k, v in counts.items() if k in ("embedded", "vectors") and v)
                + (f"; {counts['records']:,} long-term records, {counts['records_written']:,} new"
                   if counts.get("records") else ""))
        emit(args, {"format": fmt, **counts}, text)
    return 0


def _import_memory(args: argparse.Namespace) -> int:
    """A long-term memory's export into the memory of ``--user`` / ``--agent`` (the default owner when left
    out), each message in its own conversation as exported, its words embedded and its facts kept as they were.
    """
    import sys

    from ..errors import InvalidInput
    from ..memory import PersistentMemory

    if getattr(args, "session", None) is not None:
        raise InvalidInput("--session: a long-term memory's export keeps each message's own conversation")
    if args.no_embed:
        raise InvalidInput("--no-embed: a long-term memory is searched by its vectors; its import embeds what it "
                           "writes")
    scope(args)  # refused before the store is made
    with opened_store(args) as store:
        memory = PersistentMemory(user_id=args.user, agent_id=args.agent, tenant=args.tenant, store=store,
                                  warm=False)  # an import searches nothing
        try:
            counts = memory.import_jsonl(sys.stdin if args.path == "-" else Path(args.path))
        finally:
            memory.close()
    emit(args, {"format": "memory", **counts},
         f"imported {args.path} (memory): {counts['messages']:,} messages read, {counts['written']:,} new; "
         f"{counts['facts']:,} facts read, {counts['facts_written']:,} new")
    return 0
