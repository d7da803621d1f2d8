"""The gate's first test: a fingerprint of the code, so that a change no probe exercises is still seen."""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import sys
import textwrap
import types
import zlib
from typing import Any


@functools.lru_cache(maxsize=64)
def source(function: Any) -> str | None:
    """A function's source text, as inspect.getsource gives it (decorators included); None when there is none."""
    # inspect.getsource tokenizes in Python (0.1 ms a function before CPython 3.12). Parsing the function's
    # own lines (up to the next definition at its indentation, or less), dedented, gives the same text at a
    # third of the cost; anything that does not parse that way falls back to inspect.
    try:
        code = function.__code__
        lines = linecache.getlines(code.co_filename)
        first = code.co_firstlineno - 1  # its first decorator, if it has any
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        header = next(i for i in range(first, len(lines)) if lines[i].lstrip().startswith(("def ", "async def ")))
        end = next(
            (i for i in range(header + 1, len(lines)) if lines[i].strip() and _ends_block(lines[i], indent)),
            len(lines),
        )
        node = ast.parse(textwrap.dedent("".join(lines[first:end]))).body[0]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            return "".join(lines[first : first + node.end_lineno])
    except (AttributeError, SyntaxError, ValueError, IndexError, StopIteration):
        pass
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):  # not a Python function, or no source on disk
        return None


def _ends_block(line: str, indent: str) -> bool:
    """Whether a non-blank line ends the definition indented by ``indent``: a line indented less, or the next one."""
    if not line.startswith(indent):
        return True
    rest = line[len(indent) :]
    return not rest[:1].isspace() and rest.startswith(("def ", "async def ", "class ", "@"))


def fingerprint(function: Any) -> str | None:
    """CRC-32 of a function's source and of the functions of its module that it names; None without source."""
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    found, pending = [], [function]
    while pending:
        current = pending.pop()
        text = source(current)
        if text is None:
            return None
        if text in found:
            continue
        found.append(text)
        for name in current.__code__.co_names:
            helper = getattr(module, name, None)
            if isinstance(helper, types.FunctionType) and helper.__module__ == current.__module__:
                pending.append(helper)
    return f"{zlib.crc32(chr(0).join(found).encode()):08x}"
