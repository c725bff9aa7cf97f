"""The ``fullrecall`` command: demo, bench and service entry points.

Subcommands import their modules lazily so ``fullrecall --help`` stays fast.
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

COMMANDS = {
    "demo": "fullrecall.cli.demo",
    "serve": "fullrecall.service.cli",
    "keys": "fullrecall.service.keys_cli",
    "mcp": "fullrecall.integrations.mcp_server",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fullrecall", description="Memory for LLM agents that never loses a word.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=f"run the {name}")
        p.set_defaults(_module=module)
        _load(module).add_arguments(p)
    bench = sub.add_parser("bench", help="measure speed and recall").add_subparsers(dest="bench", required=True)
    for name, module in BENCHES.items():
        mod = _load(module)  # bench modules import their heavy dependencies only in run()
        p = bench.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else name)
        p.set_defaults(_module=module)
        mod.add_arguments(p)
    return parser


def _load(module: str):
    return importlib.import_module(module)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(_load(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
