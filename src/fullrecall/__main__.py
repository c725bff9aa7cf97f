"""``python -m fullrecall``: the same as the ``fullrecall`` command."""

from .cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
