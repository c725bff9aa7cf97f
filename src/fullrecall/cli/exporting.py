"""``fullrecall export PATH``: conversations out of a store, as jsonl, openai, strands or locomo files."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TextIO

from .common import CommandError, add_store, emit, opened_store, progress_bars, scope

FORMATS = ("jsonl", "openai", "strands", "locomo")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the file to write ('-' for stdout), or a folder for strands")
    parser.add_argument("--format", choices=FORMATS, default="jsonl",
                        help="jsonl (lossless, the default), openai, strands or locomo")
    add_store(parser)
    parser.add_argument("--no-vectors", action="store_true", help="jsonl: leave the embeddings out (smaller)")


def run(args: argparse.Namespace) -> int:
    import os

    from ..memory._records import change_logs
    from ..transfer import jsonl, locomo, openai, strands
    from ..transfer._common import conversations

    with opened_store(args, create=False) as store:
        own = scope(args)
        found = conversations(store, own)
        if own.session_id and not store.count(own):
            raise CommandError(f"conversation {own.session_id!r} not found")
        with progress_bars(not args.json and args.path != "-") as progress:
            if args.format == "strands":
                if args.path == "-":
                    raise ValueError("export --format strands writes a folder: give its path, not '-'")
                counts = strands.export_strands(store, own, args.path, progress=progress)
            else:
                writer = {"jsonl": lambda fp: jsonl.export_jsonl(store, own, fp, vectors=not args.no_vectors,
                                                                   progress=progress),
                          "openai": lambda fp: openai.export_openai(store, own, fp, progress=progress),
                          "locomo": lambda fp: locomo.export_locomo(store, own, fp, progress=progress)}[args.format]
                if args.path == "-":
                    counts = writer(sys.stdout)
                    sys.stdout.flush()
                else:
                    partial = f"{args.path}.partial"  # a complete file or none: written aside, then renamed
                    try:
                        with _create(partial, args.path) as fp:
                            counts = writer(fp)
                        os.replace(partial, args.path)
                    except BaseException:  # a failed export leaves no half-written file behind
                        with contextlib.suppress(OSError):
                            os.remove(partial)
                        raise
        logs = change_logs(store, own, list(jsonl.RECORD_TYPES.values()))[1]  # long-term memory's bookkeeping
        unlisted = 0 if own.session_id else store.stats(own).get("session_count", 0) - len(found) - logs
        result = {"format": args.format, "path": args.path, **counts, "unlisted_conversations": max(0, unlisted)}
        empty = f"; {unlisted} conversations hold no message (only a state, or every message deleted): not exported"
        text = (f"exported {counts['conversations']} conversations, {counts['messages']:,} messages"
                + (f", {counts['records']:,} long-term records" if counts.get("records") else "")
                + f" to {args.path} ({args.format})" + (empty if unlisted > 0 else ""))
        if args.path == "-":
            print(text, file=sys.stderr)
        else:
            emit(args, result, text)
    return 0


def _create(partial: str, path: str) -> TextIO:
    """``partial`` opened for writing; an error names ``path``, the file the user asked for."""
    try:
        return open(partial, "w", encoding="utf-8")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
