"""Patching grpc._common: two gates decide, function by function, what fastcommon may replace.

A grpc function is replaced only when it passes both:

1. **Fingerprint.** A CRC-32 of its source, and of the grpc._common helpers it calls, is one
   of ``KNOWN_FINGERPRINTS``: code that the test suite has run against, in a grpcio release.
   This catches a change that no probe exercises.
2. **Probes.** On every probe it behaves exactly as fastcommon's function does: the result's
   type, value and identity; the exception's type and text; the log records; and what a
   (de)serializer was handed.

A function that fails either gate stays grpc's own, and one FastcommonWarning names it.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import linecache
import logging
import sys
import threading
import types
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import fastcommon

NAMES = ("encode", "decode", "serialize", "deserialize")

# The fingerprints of grpc._common's functions in the grpcio releases the tests run against
# (grpc removed an `else:` in 1.76: new source, same behaviour). `python -m fastcommon` prints
# those of the installed grpcio; add one here only after the whole suite passes against it.
KNOWN_FINGERPRINTS = {
    "encode": {"710f6335": "grpcio 1.62.3, 1.73.1", "17a1c983": "grpcio 1.80.1, 1.85.1"},
    "decode": {"db853f30": "grpcio 1.62.3, 1.73.1, 1.80.1, 1.85.1"},
    "serialize": {"0ebf1e2d": "grpcio 1.62.3, 1.73.1", "aaa13f13": "grpcio 1.80.1, 1.85.1"},
    "deserialize": {"581b882d": "grpcio 1.62.3, 1.73.1", "75deb5cd": "grpcio 1.80.1, 1.85.1"},
}

_installed: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}  # name -> (grpc's, ours)
_lock = threading.Lock()


def source(function: Any) -> str | None:
    """A function's source text, as inspect.getsource gives it; None when there is none."""
    # inspect.getsource tokenizes in Python (0.1 ms a function before CPython 3.12). For a
    # module-level function, parsing its lines up to the next top-level definition gives the same
    # text at a third of the cost; anything that does not parse that way falls back to inspect.
    try:
        code = function.__code__
        lines = linecache.getlines(code.co_filename)
        first = code.co_firstlineno - 1
        starts = ("def ", "async def ", "class ", "@")
        end = next((i for i in range(first + 1, len(lines)) if lines[i].startswith(starts)), len(lines))
        node = ast.parse("".join(lines[first:end])).body[0]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            return "".join(lines[first : first + node.end_lineno])
    except (AttributeError, SyntaxError, ValueError, IndexError):
        pass
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):  # not a Python function, or no source on disk
        return None


def fingerprint(function: Any, sources: dict[Any, str | None] | None = None) -> str | None:
    """CRC-32 of a function's source and of the functions of its module that it names; None without source."""
    sources = {} if sources is None else sources  # a cache of function -> source, shared by callers
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    found, pending = [], [function]
    while pending:
        current = pending.pop()
        if current not in sources:
            sources[current] = source(current)
        text = sources[current]
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


class _ProbeError(Exception):
    """Raised by the probes' (de)serializer; the records it causes are kept out of the user's logs."""


class _ProbeStr(str):
    pass


class _ProbeBytes(bytes):
    pass


def _probe_values() -> list[Any]:
    """Every kind of input grpc's callers pass or may pass; made fresh for each side, in case one mutates them."""
    return [
        b"/grpc.testing.BenchmarkService/UnaryCall",
        "h\xe9llo \U0001f600\x00",
        memoryview(b"zero-copy slice"),
        bytearray(b"bytearray"),
        [b"chunk one, ", b"chunk two"],
        [memoryview(b"view one, "), memoryview(b"view two")],
        [],
        None,
        _ProbeStr("str subclass"),
        _ProbeBytes(b"bytes subclass"),
        b"\xff\xfeh\xc3\xa9\xe2\x82",  # invalid UTF-8
        "\ud800",  # a lone surrogate
    ]


def _observable(value: Any) -> Any:
    """What can be compared of a value across calls: its type and contents, recursively for lists."""
    if isinstance(value, memoryview):
        return memoryview, value.tobytes()
    if isinstance(value, list):
        return list, [_observable(item) for item in value]
    return type(value), value


class _Transformer:
    """A probe (de)serializer: records what it is handed, then returns it, or raises _ProbeError."""

    def __init__(self, raises: bool) -> None:
        self.raises = raises
        self.handed: list[Any] = []

    def __call__(self, message: Any) -> Any:
        self.handed.append(_observable(message))
        if self.raises:
            raise _ProbeError("probe")
        return message

    def __repr__(self) -> str:
        return "a (de)serializer that raises" if self.raises else "a (de)serializer that returns its input"


class _ProbeRecords(logging.Filter):
    """Takes the probing thread's records on grpc._common's logger out of the logs, for comparison."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()
        self.records: list[tuple[Any, ...]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        # A filter runs in the thread that logs (record.thread is None under logging.logThreads = False).
        if threading.get_ident() != self.thread:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        self.records.append((record.levelno, record.getMessage(), type(exc), str(exc)))
        return False


def _probe_calls(name: str) -> list[tuple[Any, _Transformer | None]]:
    """The calls that probe ``name``: (value, transformer or None), built fresh for each side."""
    if name in ("encode", "decode"):
        return [(value, None) for value in _probe_values()]
    calls: list[tuple[Any, _Transformer | None]] = [(value, None) for value in _probe_values()]
    calls += [(value, _Transformer(raises=False)) for value in _probe_values()]
    # The failure path depends on the input no more than the returning recorder already shows:
    # bytes, a memoryview and a list of chunks, the three that grpc hands over, are enough.
    values = _probe_values()
    calls += [(values[i], _Transformer(raises=True)) for i in (0, 2, 4)]
    return calls


def _outcomes(name: str, function: Callable[..., Any], records: _ProbeRecords) -> list[tuple[Any, ...]]:
    """Everything observable about ``function`` on each probe of ``name``."""
    outcomes = []
    for value, transformer in _probe_calls(name):
        args = (value,) if name in ("encode", "decode") else (value, transformer)
        del records.records[:]
        try:
            result = function(*args)
        except Exception as exc:
            observed: tuple[Any, ...] = ("raised", type(exc), str(exc))
        else:
            observed = ("returned", _observable(result), result is value)
        handed = transformer.handed if transformer is not None else None
        outcomes.append((observed, list(records.records), handed))
    return outcomes


def _first_difference(name: str, original: Callable[..., Any], ours: Callable[..., Any]) -> str | None:
    """The first probe on which grpc's function and ours differ, described; None if they never do."""
    logger = logging.getLogger("grpc._common")
    records = _ProbeRecords()
    logger.addFilter(records)
    try:
        theirs, mine = _outcomes(name, original, records), _outcomes(name, ours, records)
    finally:
        logger.removeFilter(records)
    if theirs == mine:
        return None
    index = next(i for i, (their, my) in enumerate(zip(theirs, mine)) if their != my)
    value, transformer = _probe_calls(name)[index]
    argument = "" if name in ("encode", "decode") else f", {transformer or 'None'}"
    return f"it differs on a probe: {name}({type(value).__name__} {value!r:.40}{argument})"


def assess(grpc_common: types.ModuleType) -> dict[str, str | None]:
    """For each function, why fastcommon must leave grpc's own in place, or None if it may replace it."""
    verdicts: dict[str, str | None] = {}
    sources: dict[Any, str | None] = {}
    for name in NAMES:
        original = getattr(grpc_common, name)
        found = fingerprint(original, sources)
        if found not in KNOWN_FINGERPRINTS[name]:
            verdicts[name] = f"its code (fingerprint {found}) is not one fastcommon was tested against"
        else:
            verdicts[name] = _first_difference(name, original, getattr(fastcommon, name))
    return verdicts


def grpc_common() -> types.ModuleType:
    """grpc._common, imported; an ImportError that says so when grpcio is not installed."""
    try:
        return importlib.import_module("grpc._common")
    except ImportError as exc:
        raise ImportError("fastcommon.patch() needs grpcio, which is not installed: pip install grpcio") from exc


def grpcio_version() -> str:
    return str(getattr(sys.modules.get("grpc"), "__version__", "unknown"))


def install(replacement: Callable[[str], Callable[..., Any]]) -> tuple[str, ...]:
    """Replace each grpc._common function that passes both gates with ``replacement(name)``; warn about the rest."""
    module = grpc_common()
    with _lock:
        if _installed:
            return ()
        verdicts = assess(module)
        replaced = tuple(name for name in NAMES if verdicts[name] is None)
        for name in replaced:
            ours = replacement(name)
            _installed[name] = (getattr(module, name), ours)
            setattr(module, name, ours)
    left = [f"grpc._common.{name} ({reason})" for name, reason in verdicts.items() if reason is not None]
    if left:
        warnings.warn(
            f"fastcommon left grpc's own {', '.join(left)} in place, on grpcio {grpcio_version()}; "
            f"it replaced {', '.join(replaced) or 'nothing'}",
            fastcommon.FastcommonWarning,
            stacklevel=3,
        )
    return replaced


def patch() -> tuple[str, ...]:
    """Replace the grpc._common functions that behave as fastcommon's with fastcommon's; return their names."""
    return install(lambda name: getattr(fastcommon, name))


def unpatch() -> tuple[str, ...]:
    """Put grpc's own functions back where fastcommon's still are; return the names restored."""
    with _lock:
        module = sys.modules.get("grpc._common")
        restored = []
        for name, (original, ours) in _installed.items():
            if module is not None and getattr(module, name) is ours:  # never undo someone else's later patch
                setattr(module, name, original)
                restored.append(name)
        _installed.clear()
        return tuple(restored)


def original(name: str) -> Callable[..., Any]:
    """grpc's own function that fastcommon replaced; KeyError if it replaced none by that name."""
    return _installed[name][0]


def is_patched(name: str | None = None) -> bool:
    """Tell whether fastcommon has replaced any of grpc._common's functions, or the one named."""
    return bool(_installed) if name is None else name in _installed


@contextlib.contextmanager
def patched() -> Iterator[tuple[str, ...]]:
    """Patch grpc for the duration of a ``with`` block; undo only what this block did."""
    replaced = patch()
    try:
        yield replaced
    finally:
        if replaced:
            unpatch()
