"""The gate's first test: a fingerprint of the code, so that a change no probe exercises is still seen."""

import ast
import contextlib
import linecache
import sys
import textwrap
import tokenize
import types
import zlib
from typing import Any

from .. import _grpc

_OPENING = ("def ", "async def ", "class ", "@")  # what opens the next definition at a function's indentation
_CONTEXT_MANAGER = contextlib.contextmanager(lambda: iter(())).__code__  # the code of what contextmanager makes


def source(function: Any) -> str | None:
    """A function's source text, as inspect.getsource gives it (decorators included); None when there is none."""
    # Its own lines (to the next definition at its indentation) parsed: a third of getsource's cost, no cache filled.
    try:
        code = function.__code__
        cached = linecache.cache.get(code.co_filename)  # read, never added to linecache's cache
        if cached is not None and len(cached) == 4:  # (size, mtime, lines, fullname); a 1-tuple is a lazy entry
            lines = list(cached[2])
        else:
            with tokenize.open(code.co_filename) as file:
                lines = file.readlines()
        first = code.co_firstlineno - 1  # its first decorator, if it has any
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        header = next(i for i in range(first, len(lines)) if lines[i].lstrip().startswith(("def ", "async def ")))
        end = len(lines)
        for i in range(header + 1, len(lines)):
            if lines[i].strip() and (not lines[i].startswith(indent) or lines[i][len(indent) :].startswith(_OPENING)):
                end = i
                break
        node = ast.parse(textwrap.dedent("".join(lines[first:end]))).body[0]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            return "".join(lines[first : first + node.end_lineno])
    except (AttributeError, OSError, SyntaxError, ValueError, IndexError, StopIteration):
        pass
    return None  # not a Python function, or no source to read


def fingerprint_of(function: Any) -> str | None:
    """CRC-32 of the source of grpc's ``function`` (a classmethod's, a context manager's generator) and of its module's
    functions it names; of a Cython function, which has no source, of what can be read off it and the grpcio release."""
    function = getattr(function, "__func__", function)
    if type(function).__name__ in ("cython_function_or_method", "builtin_function_or_method"):  # release by release
        code = getattr(function, "__code__", None)  # Cython's binding functions have one, of facts: no code
        facts = (_grpc.version(), function.__module__, function.__qualname__, function.__doc__,
                 code and (code.co_filename, code.co_firstlineno, code.co_varnames))  # fmt: skip
        return f"{zlib.crc32(repr(facts).encode()):08x}"
    cells = getattr(function, "__code__", None) is _CONTEXT_MANAGER and function.__closure__
    if cells and cells[0].cell_contents is getattr(function, "__wrapped__", None):  # the generator it calls
        function = cells[0].cell_contents
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    found, pending = [], [function]
    while pending:
        current = pending.pop()
        if (text := source(current)) is None:
            return None
        if text in found:
            continue
        found.append(text)
        for name in current.__code__.co_names:
            helper = vars(module).get(name) if module is not None else None
            if isinstance(helper, types.FunctionType) and helper.__module__ == current.__module__:
                pending.append(helper)
    return f"{zlib.crc32(chr(0).join(found).encode()):08x}"
