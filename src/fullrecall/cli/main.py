"""The ``fullrecall`` command: memory tools (stats, search, inspect, forget, import, export, chat),
the service (serve, keys, mcp), the demo and the benches.

Subcommands import their modules lazily so ``fullrecall --help`` stays fast. Errors print one
line, ``error: ...``, with no traceback: exit code 2 for bad input (as for a bad option), 1 for
anything else that stopped the command.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# bench name -> module with ``add_arguments(parser)`` and ``run(args) -> int``
BENCHES = {
    "window": "fullrecall.bench.window",
    "summary": "fullrecall.bench.summary",
    "locomo": "fullrecall.bench.locomo",
    "store": "fullrecall.bench.store",
    "serve": "fullrecall.bench.serve",
    "persistent": "fullrecall.bench.persistent",
}

# command -> (module with ``add_arguments(parser)`` and ``run(args) -> int``, help)
COMMANDS = {
    "chat": ("fullrecall.cli.chat", "chat with memory: see what is recalled and when the window is summarized"),
    "stats": ("fullrecall.cli.stats", "how much a store, an owner or a conversation holds"),
    "search": ("fullrecall.cli.search", "search the archive: hits with their scores and the messages around them"),
    "inspect": ("fullrecall.cli.inspect", "one conversation: its window, summaries and archive span"),
    "forget": ("fullrecall.cli.forget", "delete a user's memory (or one conversation), with confirmation"),
    "import": ("fullrecall.cli.importing", "import conversations (jsonl, openai, strands, locomo); idempotent"),
    "export": ("fullrecall.cli.exporting", "export conversations (jsonl, openai, strands, locomo)"),
    "demo": ("fullrecall.cli.demo", "run the demo"),
    "serve": ("fullrecall.service.cli", "run the HTTP service"),
    "keys": ("fullrecall.service.keys_cli", "create, list and revoke the service's API keys"),
    "mcp": ("fullrecall.integrations.mcp_server", "serve the memory tools over MCP"),
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the command ``argv`` names gets its module imported (so ``--help`` imports nothing heavy)."""
    args = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in args if not a.startswith("-")), None)
    parser = argparse.ArgumentParser(prog="fullrecall", description="Memory for LLM agents that never loses a word.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(_module=module)
        if name == chosen:
            mod = _load(module)
            p.description = (mod.__doc__ or text).strip().split("\n\n")[0]
            mod.add_arguments(p)
    bench = sub.add_parser("bench", help="measure speed and recall").add_subparsers(dest="bench", required=True)
    for name, module in BENCHES.items() if chosen == "bench" else ():
        mod = _load(module)  # bench modules import their heavy dependencies only in run()
        p = bench.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else name)
        p.set_defaults(_module=module)
        mod.add_arguments(p)
    return parser


def _load(module: str):
    return importlib.import_module(module)


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    from ..errors import FullRecallError
    from .common import CommandError

    try:
        return int(_load(args._module).run(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted (what was written is kept; run the command again to go on)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout stopped (``| head``): no error of ours, nothing more to say
        import contextlib
        import os

        with contextlib.suppress(OSError, ValueError):  # a stdout without a descriptor (in process) has no flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush goes nowhere, quietly
        return 141  # as a command killed by SIGPIPE
    except (ValueError, CommandError, FullRecallError, OSError, ImportError) as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1


def _one_line(message: str) -> str:
    """A message on one line: a driver's error often adds lines (a hint, a context)."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
