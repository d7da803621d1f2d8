"""Patching grpc: one gate decides, thing by thing, what fastcommon may replace.

Each thing fastcommon may replace is described once, in REPLACEABLES: where it lives in grpc, what
replaces it, and how grpc's own is judged. Judging only reads: it looks at grpc's own objects (the
originals, where fastcommon's are in place) and builds whatever it probes with for itself, so a
status or a check answers the same before patch(), after it and after unpatch().

A grpc._common function is replaced only when it passes both:

1. **Fingerprint.** A CRC-32 of its source, and of the grpc._common helpers it calls, is one
   of ``KNOWN_FINGERPRINTS``: code that the test suite has run against, in a grpcio release.
   This catches a change that no probe exercises.
2. **Probes.** On every probe it behaves exactly as fastcommon's function does: the result's
   type, value and identity; the exception's type and text; the log records; and what a
   (de)serializer was handed.

A function that fails either gate stays grpc's own, and one FastcommonWarning names it.

grpc's metadata entry class, ``grpc._cython.cygrpc._Metadatum``, which grpc's Cython core calls for
every metadata entry it receives, is replaced the same way by a compiled constructor of that very
class: only when the class is the namedtuple the suite ran against and the objects built agree on
every probe.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import functools
import gc
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

from . import common
from ._implementation import FastcommonWarning, chosen

FUNCTIONS = ("encode", "decode", "serialize", "deserialize")  # grpc._common's
METADATUM = "_Metadatum"  # grpc._cython.cygrpc's metadata entry class, which grpc's core calls per entry

# The fingerprints of grpc._common's functions in the grpcio releases the tests run against, and
# those releases (grpc removed an `else:` in 1.76: new source, same behaviour). `python -m fastcommon`
# prints those of the installed grpcio; add one here only after the whole suite passes against it.
_OLDER, _NEWER = ("1.62.3", "1.73.1"), ("1.80.1", "1.85.1")
KNOWN_FINGERPRINTS: dict[str, dict[str, tuple[str, ...]]] = {
    "encode": {"710f6335": _OLDER, "17a1c983": _NEWER},
    "decode": {"db853f30": _OLDER + _NEWER},
    "serialize": {"0ebf1e2d": _OLDER, "aaa13f13": _NEWER},
    "deserialize": {"581b882d": _OLDER, "75deb5cd": _NEWER},
}
TESTED_GRPCIO = _OLDER + _NEWER  # what the gate's warning names

_installed: dict[str, tuple[Any, Any]] = {}  # name -> (grpc's own, fastcommon's in its place)
_lock = threading.Lock()


@functools.lru_cache(maxsize=64)
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
    index = next(i for i, (their, my) in enumerate(zip(theirs, mine, strict=False)) if their != my)
    value, transformer = _probe_calls(name)[index]
    argument = "" if name in ("encode", "decode") else f", {transformer or 'None'}"
    return f"it differs on a probe: {name}({type(value).__name__} {value!r:.40}{argument})"


@functools.cache
def _reference_metadatum() -> Any:
    """The namedtuple as grpc defines it, to compare against; made when first needed (32 µs), not at import."""
    return collections.namedtuple("_Metadatum", ("key", "value"))


def _metadatum_class_difference(cls: Any) -> str | None:
    """How grpc's metadata entry class differs from the namedtuple fastcommon builds; None if it does not."""
    reference = _reference_metadatum()
    new = getattr(cls, "__new__", None)
    checks = [
        (isinstance(cls, type) and type(cls) is type and cls.__mro__[1:] == (tuple, object), "a plain tuple subclass"),
        (getattr(cls, "_fields", None) == ("key", "value"), "fields ('key', 'value')"),
        (getattr(cls, "__dictoffset__", None) == 0 and getattr(cls, "__weakrefoffset__", None) == 0, "no __dict__"),
        (getattr(cls, "__init__", None) is tuple.__init__, "no __init__ of its own"),
        (
            isinstance(new, types.FunctionType)
            and new.__code__.co_code == reference.__new__.__code__.co_code
            and new.__code__.co_names == reference.__new__.__code__.co_names
            and new.__defaults__ is None
            and new.__globals__.get("_tuple_new") is tuple.__new__,
            "namedtuple's own __new__",
        ),
    ]
    missing = [what for holds, what in checks if not holds]
    return f"it is not the namedtuple fastcommon builds (it lacks: {', '.join(missing)})" if missing else None


USER_AGENT = ("user-agent", "grpc-python/1.85.1 grpc-c/51.0.0 (linux; chttp2)")  # an entry every RPC carries

METADATUM_PROBES: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (USER_AGENT, {}),
    (("trace-proto-bin", b"\x00\xff\x80binary"), {}),
    (("", ""), {}),
    (("x-caf\xe9", "na\xefve \U0001f600"), {}),
    (("key", "value"), {"extra": 1}),
    ((), {"key": "k", "value": "v"}),
    (("k",), {}),
    (("k", "v", "surplus"), {}),
    ((), {}),
]


def _metadatum_outcome(build: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Everything observable about one construction: the object and its behaviour, or the exception."""
    try:  # observing too: whatever a changed class does, the gate answers and never raises
        entry = build(*args, **kwargs)
        given = (*args, *kwargs.values())
        return (
            "returned",
            type(entry),
            tuple(entry),
            [item is argument for item, argument in zip(entry, given, strict=False)],
            repr(entry),
            hash(entry),
            entry._asdict(),
            entry._replace(value="replaced"),
            gc.is_tracked(entry),
            entry.__reduce_ex__(2)[1:],
        )
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def _metadatum_difference(cls: Any, build: Callable[..., Any]) -> str | None:
    """The first probe on which fastcommon's entries differ from grpc's class's own, described; None if none."""
    for args, kwargs in METADATUM_PROBES:
        if _metadatum_outcome(cls, args, kwargs) != _metadatum_outcome(build, args, kwargs):
            return f"it differs on a probe: _Metadatum(*{args!r:.40}, **{kwargs!r})"
    return None


def _judge_function(name: str) -> Callable[[Any], str | None]:
    def judge(own: Any) -> str | None:
        if fingerprint(own) not in KNOWN_FINGERPRINTS[name]:
            return "its code is not one fastcommon's suite ran against"
        return _first_difference(name, own, getattr(chosen, name))

    return judge


def _judge_metadatum(own: Any) -> str | None:
    if why := _metadatum_class_difference(own):
        return why
    return _metadatum_difference(own, chosen.MetadatumConstructor(own))  # a constructor of the gate's own


@dataclasses.dataclass(frozen=True)
class Replaceable:
    """One thing of grpc's that fastcommon may replace: where it lives, what replaces it, how it is judged."""

    name: str  # what patch() returns and is_patched() takes: the attribute's name in its home module
    home: str  # the grpc module it lives in
    needs: str  # what the implementation must have to offer a replacement at all
    judge: Callable[[Any], str | None]  # why grpc's own (given) must stay, or None when it may be replaced
    make: Callable[[Any], Any]  # what replaces grpc's own (given)
    make_counted: Callable[[Any], Any] | None  # the same, counting its calls in C (--report); None: no such twin


def _function(name: str) -> Replaceable:
    counted = getattr(chosen, f"counted_{name}", None)
    return Replaceable(
        name,
        "grpc._common",
        name,
        _judge_function(name),
        lambda own: getattr(chosen, name),
        None if counted is None else lambda own: counted,
    )


REPLACEABLES = (
    *(_function(name) for name in FUNCTIONS),
    Replaceable(
        METADATUM,
        "grpc._cython.cygrpc",
        "MetadatumConstructor",
        _judge_metadatum,
        lambda own: chosen.MetadatumConstructor(own),
        lambda own: chosen.MetadatumConstructor(own, counted=True),
    ),
)
BY_NAME = {replaceable.name: replaceable for replaceable in REPLACEABLES}
NAMES = tuple(BY_NAME)
HOMES = {replaceable.name: replaceable.home for replaceable in REPLACEABLES}


def not_offered(name: str) -> str | None:
    """Why this installation of fastcommon has nothing for ``name`` (grpc's own then stays, unwarned); or None."""
    if hasattr(chosen, BY_NAME[name].needs):
        return None
    if chosen is common:
        return "fastcommon runs pure Python here, which builds it no faster than grpc"
    return "this build of fastcommon (the Limited API, abi3) does not build it: a tuple's layout is CPython's own"


def grpc_modules() -> dict[str, types.ModuleType]:
    """The grpc modules fastcommon patches, by name, imported; an ImportError that says so without grpcio."""
    try:
        return {home: importlib.import_module(home) for home in sorted(set(HOMES.values()))}
    except ImportError as exc:
        raise ImportError("fastcommon.patch() needs grpcio, which is not installed: pip install grpcio") from exc


def grpc_own(name: str, modules: dict[str, types.ModuleType] | None = None) -> Any:
    """grpc's own object for ``name``: what grpc has there now, or the original where fastcommon's is in place."""
    current = getattr((grpc_modules() if modules is None else modules)[HOMES[name]], name)
    installed = _installed.get(name)
    return installed[0] if installed is not None and current is installed[1] else current


def assess(modules: dict[str, types.ModuleType] | None = None) -> dict[str, str | None]:
    """For each name, why fastcommon must leave grpc's own in place, or None if it may replace it. Changes nothing."""
    modules = grpc_modules() if modules is None else modules
    return {
        replaceable.name: not_offered(replaceable.name) or replaceable.judge(grpc_own(replaceable.name, modules))
        for replaceable in REPLACEABLES
    }


def grpcio_version() -> str:
    return str(getattr(sys.modules.get("grpc"), "__version__", "unknown"))


def install(replacement: Callable[[Replaceable, Any], Any]) -> tuple[str, ...]:
    """Put ``replacement(replaceable, grpc's own)`` wherever the gate allows; warn of those it refused."""
    modules = grpc_modules()
    with _lock:
        if _installed:
            return ()
        verdicts = assess(modules)
        replaced = tuple(name for name in NAMES if verdicts[name] is None)
        for name in replaced:
            module = modules[HOMES[name]]
            own = getattr(module, name)
            ours = replacement(BY_NAME[name], own)
            _installed[name] = (own, ours)
            setattr(module, name, ours)
    refused = [f"{HOMES[name]}.{name} ({why})" for name, why in verdicts.items() if why and not not_offered(name)]
    if refused:
        warnings.warn(
            f"fastcommon leaves {'; '.join(refused)} to grpc on grpcio {grpcio_version()}; "
            f"fastcommon's suite ran against grpcio {', '.join(TESTED_GRPCIO)} (python -m fastcommon check)",
            FastcommonWarning,
            stacklevel=3,
        )
    return replaced


def patch() -> tuple[str, ...]:
    """Put fastcommon's into grpc wherever grpc's own behave the same (the gate); return the names replaced."""
    return install(lambda replaceable, own: replaceable.make(own))


def unpatch() -> tuple[str, ...]:
    """Put grpc's own back where fastcommon's still are; return the names restored.

    Where another library has since replaced fastcommon's, its replacement stays, and grpc's own is kept
    for a later unpatch(), once fastcommon's is back in place: it is never lost.
    """
    with _lock:
        restored = []
        for name, (own, ours) in list(_installed.items()):
            module = sys.modules.get(HOMES[name])
            if module is not None and getattr(module, name) is ours:
                setattr(module, name, own)
                del _installed[name]
                restored.append(name)
        return tuple(restored)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """grpc's own in place for a ``with`` block; then fastcommon's put back where grpc's own still is."""
    with _lock:
        taken = dict(_installed)
    restored = unpatch()
    try:
        yield
    finally:
        with _lock:
            for name in restored:
                own, ours = taken[name]
                module = sys.modules[HOMES[name]]
                if name not in _installed and getattr(module, name) is own:
                    setattr(module, name, ours)
                    _installed[name] = (own, ours)


def installed(name: str) -> tuple[Any, Any]:
    """(grpc's own, fastcommon's) for a name fastcommon replaced; KeyError if it replaced none by that name."""
    return _installed[name]


def is_patched(name: str | None = None) -> bool:
    """Tell whether fastcommon has replaced anything in grpc, or the one named (one of NAMES)."""
    if name is None:
        return bool(_installed)
    if name not in NAMES:
        raise ValueError(f"fastcommon patches no {name!r}; it patches {', '.join(NAMES)}")
    return name in _installed


@contextlib.contextmanager
def patched() -> Iterator[tuple[str, ...]]:
    """Patch grpc for the duration of a ``with`` block; undo only what this block did."""
    replaced = patch()
    try:
        yield replaced
    finally:
        if replaced:
            unpatch()
