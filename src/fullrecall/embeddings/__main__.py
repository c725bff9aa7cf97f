"""``python -m fullrecall.embeddings [MODEL] [--variant int8|fp32]``: export a model to ONNX once."""

from __future__ import annotations

import argparse
import sys

from . import DEFAULT_MODEL, DEFAULT_VARIANT, prepare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fullrecall.embeddings", description=__doc__)
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="model name or local path")
    parser.add_argument("--variant", choices=("int8", "fp32", "all"), default=DEFAULT_VARIANT)
    parser.add_argument("--force", action="store_true", help="export again even if cached")
    args = parser.parse_args(argv)
    for variant in ("int8", "fp32") if args.variant == "all" else (args.variant,):
        print(prepare(args.model, variant=variant, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
