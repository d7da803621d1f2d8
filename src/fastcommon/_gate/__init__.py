"""The patch gate: whether fastcommon's may replace each of grpc's. A function or method needs a known fingerprint
of its code (below: so that a change no probe exercises is still seen) and the same outcome on every probe
(functions.py, metadata.py); a hook, a known fingerprint on a CPython the suite ran on; the entry class, the
namedtuple's shape and the same entries (metadata.py). Only reads."""

import ast
import contextlib
import linecache
import sys
import textwrap
import tokenize
import types
import zlib
from typing import Any

from .. import _grpc, _implementation
from .._registry import CLASS, FUNCTION, HOOK, METADATA_KINDS, NEWEST_CPYTHON, REPLACEABLES, Replaceable, of_kind
from .._verdict import Verdict, unknown_fingerprint
from . import functions, metadata

UNJUDGED = "the gate could not judge it: {!r}"
_OPENING = ("def ", "async def ", "class ", "@")  # what opens the next definition at a function's indentation
_CONTEXT_MANAGER = contextlib.contextmanager(lambda: iter(())).__code__  # the code of what contextmanager makes


def assess(originals: dict[str, Any]) -> dict[str, Verdict]:
    """The verdict on each name, given grpc's original for it (None where grpc has none)."""
    verdicts = {replaceable.name: _judge(replaceable, originals[replaceable.name]) for replaceable in REPLACEABLES}
    probed = {each.name: originals[each.name] for each in of_kind(*METADATA_KINDS) if verdicts[each.name].replaces}
    if probed:
        try:
            differences = metadata.differences(probed)
        except Exception as exc:  # as in _judge()
            differences = dict.fromkeys(probed, UNJUDGED.format(exc))
        verdicts |= {name: Verdict(name, why) for name, why in differences.items()}
    return verdicts


def unavailable(replaceable: Replaceable, original: Any) -> str | None:
    """Why fastcommon has nothing to put in place of grpc's ``original`` here (pure Python, abi3, grpc has none)."""
    if replaceable.kind != FUNCTION and not _implementation.compiled:
        return "fastcommon runs pure Python here, which does it no faster than grpc"
    if replaceable.kind == HOOK and sys.version_info[:2] > NEWEST_CPYTHON:
        return "fastcommon's does as contextlib, inspect and logging do up to CPython {}.{}".format(*NEWEST_CPYTHON)
    if replaceable.kind == CLASS and "fast_entry" not in _implementation.compiled:
        return "this build of fastcommon (the Limited API, abi3) does not build it: a tuple's layout is CPython's own"
    return f"grpcio {_grpc.version()} has no {replaceable.name} of its own" if original is None else None


def _judge(replaceable: Replaceable, original: Any) -> Verdict:
    name = replaceable.name
    try:
        if why := unavailable(replaceable, original):
            return Verdict(name, why, available=False)
        if replaceable.kind == CLASS:
            return Verdict(name, metadata.entry_class_difference(original) or metadata.entry_difference(original))
        if replaceable.kind in METADATA_KINDS and (why := metadata.class_difference()):
            return Verdict(name, why)
        if fingerprint_of(original) not in replaceable.fingerprints:
            return Verdict(name, "its code is not one fastcommon's suite ran against")
        if replaceable.kind == FUNCTION:
            fastcommons = getattr(_implementation.chosen, name)
            return Verdict(name, functions.difference(name, replaceable.arguments, original, fastcommons))
        return Verdict(name)  # a hook; or a Metadata method, probed with the others in assess()
    except Exception as exc:  # whatever a changed grpc or a hook of the process does, the gate answers: grpc's stays
        return Verdict(name, UNJUDGED.format(exc))


def unknown(originals: dict[str, Any]) -> dict[str, str]:
    """What of the installed grpcio the gate does not know, by name: the fingerprint line to add, or the shape."""
    found: dict[str, str] = {}
    for replaceable in REPLACEABLES:
        original = originals[replaceable.name]
        if original is None:  # this grpcio has none (_create before 1.80): nothing to replace, nothing to know
            continue
        if replaceable.kind == CLASS:
            if why := metadata.entry_class_difference(original):
                found[replaceable.name] = why
        elif (known := fingerprint_of(original)) not in replaceable.fingerprints:
            found[replaceable.name] = unknown_fingerprint(replaceable.name, known, _grpc.version())
    return found


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
