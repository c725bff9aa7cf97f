"""Runs one example of the docs as a user would paste it: ``python doc_runner.py EXAMPLE.py [GIVEN ...]``.

The example may use ``await`` and ``async for`` at the top level (as in a notebook or ``python -m asyncio``);
then it runs as one coroutine. Each GIVEN name is bound first, to its value in ``doc_givens``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import sys
from pathlib import Path


def main(path: str, *given: str) -> None:
    source = Path(path).read_text(encoding="utf-8")
    namespace: dict[str, object] = {"__name__": "__main__"}
    if given:
        import doc_givens

        namespace.update({name: getattr(doc_givens, name) for name in given})
    code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


if __name__ == "__main__":
    main(*sys.argv[1:])
