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
import textwrap
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

# The fingerprints of the grpc code fastcommon replaces, in the grpcio releases the tests run against,
# and those releases (grpc removed an `else:` from encode in 1.76; it retyped the aio methods over the
# years: new source, the same behaviour). `python -m fastcommon` prints those of the installed grpcio, and
# .ci/next-grpcio the line to add for each it does not know; add one here only after the whole suite passes
# against that release. Written by hand, not from what CI installs: it says what the suite ran against.
_V62, _V73, _V80, _V85 = ("1.62.3",), ("1.73.1",), ("1.80.1",), ("1.85.1", "1.85.3")
_OLDER, _NEWER = _V62 + _V73, _V80 + _V85
KNOWN_FINGERPRINTS: dict[str, dict[str, tuple[str, ...]]] = {
    "encode": {"710f6335": _OLDER, "17a1c983": _NEWER},
    "decode": {"db853f30": _OLDER + _NEWER},
    "serialize": {"0ebf1e2d": _OLDER, "aaa13f13": _NEWER},
    "deserialize": {"581b882d": _OLDER, "75deb5cd": _NEWER},
    "Metadata.__init__": {"0c3ca982": _OLDER, "c0b7a426": _NEWER},
    "Metadata.add": {"a4ec3e50": _OLDER + _NEWER},
    "Metadata.from_tuple": {"a962fb3f": _OLDER, "558a678c": _V80, "5c41a6b4": _V85},
    "Metadata._create": {"cf0997c4": _V80, "7d36eb57": _V85},  # none before 1.80
    "Metadata.__iter__": {"d918319d": _OLDER + _NEWER},
    "Metadata.__len__": {"4002ca69": _OLDER + _NEWER},
    "Metadata.__getitem__": {"17da657c": _OLDER, "3876e14a": _NEWER},
    "Metadata.get": {"aa9634dd": _V73, "2f86d154": _NEWER},  # 1.62's is abc.Mapping's
    "Metadata.get_all": {"8c76ad9b": _OLDER + _V80, "c628ab52": _V85},
    "Metadata.__contains__": {"c4d51529": _OLDER + _V80, "7a574fc8": _V85},
    "Metadata.__setitem__": {"cad00d08": _OLDER + _NEWER},
    "_BaseMultiCallable._init_metadata": {"478d5c4b": _OLDER, "0bb5050f": _V80, "289438a0": _V85},
}
TESTED_GRPCIO = _OLDER + _NEWER  # what the gate's warning names

_installed: dict[str, tuple[Any, Any]] = {}  # name -> (grpc's own, fastcommon's in its place)
_lock = threading.Lock()


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
    return _metadatum_difference(own, chosen.MetadatumConstructor(own).build)  # a constructor of the gate's own


def _metadata_class() -> Any:
    return grpc_modules()["grpc.aio._metadata"].Metadata


def _metadata_class_difference() -> str | None:
    """How grpc.aio's Metadata class differs from the one fastcommon's methods are made for; None if it does not."""
    modules = grpc_modules()
    cls = modules["grpc.aio._metadata"].Metadata
    checks = [
        (isinstance(cls, type) and type(cls).__call__ is type.__call__, "a class that is called as type calls one"),
        (cls.__new__ is object.__new__, "object's __new__"),
        (
            cls.__getattribute__ is object.__getattribute__
            and cls.__setattr__ is object.__setattr__
            and not hasattr(cls, "__getattr__"),
            "object's attribute access",
        ),
        (not hasattr(cls, "_metadata"), "instances that hold their own _metadata"),
        (vars(modules["grpc.aio._metadata"]).get("OrderedDict") is collections.OrderedDict, "an OrderedDict"),
        (vars(modules["grpc.aio._channel"]).get("Metadata") is cls, "grpc.aio._channel's Metadata"),
    ]
    missing = [what for holds, what in checks if not holds]
    return (
        f"its Metadata class is not the one fastcommon's suite ran against (it lacks: {', '.join(missing)})"
        if missing
        else None
    )


def _judge_metadata_method(name: str) -> Callable[[Any], str | None]:
    # The probes come after, in assess(): the methods of Metadata are probed together, as they run.
    def judge(own: Any) -> str | None:
        if why := _metadata_class_difference():
            return why
        if fingerprint(getattr(own, "__func__", own)) not in KNOWN_FINGERPRINTS[name]:
            return "its code is not one fastcommon's suite ran against"
        return None

    return judge


# What makes the replacements: given grpc's own objects (by name) and whether they count their calls
# (`run --report`), what replaces each. Replaceables that share a maker are made together, by one call.
Maker = Callable[[dict[str, Any], bool], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Replaceable:
    """One thing of grpc's that fastcommon may replace: where it lives, what replaces it, how it is judged."""

    name: str  # what patch() returns and is_patched() takes: its dotted path in its home module
    home: str  # the grpc module it lives in
    needs: str  # what the implementation must have to offer a replacement at all
    judge: Callable[[Any], str | None]  # why grpc's own (given) must stay, or None when it may be replaced
    make: Maker  # what replaces grpc's own


def _function(name: str) -> Replaceable:
    def make(owns: dict[str, Any], counted: bool) -> dict[str, Any]:
        return {name: getattr(chosen, f"counted_{name}" if counted else name)}

    return Replaceable(name, "grpc._common", name, _judge_function(name), make)


def _make_metadatum(owns: dict[str, Any], counted: bool) -> dict[str, Any]:
    constructor = chosen.MetadatumConstructor(owns[METADATUM], counter=counter(METADATUM) if counted else -1)
    return {METADATUM: constructor.build}


def _make_metadata_methods(owns: dict[str, Any], counted: bool) -> dict[str, Any]:
    counters = {name: counter(name) for name in owns} if counted else None
    return dict(chosen.metadata_methods(owns, _metadata_class(), counters=counters))


def _metadata_method(name: str) -> Replaceable:
    home = "grpc.aio._metadata" if name.startswith("Metadata.") else "grpc.aio._channel"
    return Replaceable(name, home, "metadata_methods", _judge_metadata_method(name), _make_metadata_methods)


METADATA_METHODS = (
    "Metadata.__init__", "Metadata.add", "Metadata.from_tuple", "Metadata._create", "Metadata.__iter__",
    "Metadata.__len__", "Metadata.__getitem__", "Metadata.get", "Metadata.get_all", "Metadata.__contains__",
    "Metadata.__setitem__", "_BaseMultiCallable._init_metadata",
)  # fmt: skip  # grpc.aio's: what every call builds and walks; the one listing of their names
REPLACEABLES = (
    *(_function(name) for name in FUNCTIONS),
    Replaceable(METADATUM, "grpc._cython.cygrpc", "MetadatumConstructor", _judge_metadatum, _make_metadatum),
    *(_metadata_method(name) for name in METADATA_METHODS),
)
BY_NAME = {replaceable.name: replaceable for replaceable in REPLACEABLES}
NAMES = tuple(BY_NAME)
HOMES = {replaceable.name: replaceable.home for replaceable in REPLACEABLES}


def counter(name: str) -> int:
    """Where the compiled module counts the calls of what replaces ``name``: the counted twins of the four
    functions count at 0 to 3, in FUNCTIONS' order; the rest where this says when they are made."""
    return NAMES.index(name)


def replacements(owns: dict[str, Any], counted: bool = False) -> dict[str, Any]:
    """What replaces each of grpc's own objects in ``owns`` (by name), counting its calls or not."""
    made: dict[str, Any] = {}
    for make in dict.fromkeys(BY_NAME[name].make for name in owns):  # each maker once, for all its names
        made |= make({name: own for name, own in owns.items() if BY_NAME[name].make is make}, counted)
    return made


def place(name: str, modules: dict[str, types.ModuleType] | None = None) -> tuple[Any, str]:
    """Where ``name`` lives: the object whose own __dict__ holds it (a module, a class), and the key there."""
    *path, attribute = name.split(".")
    owner: Any = (grpc_modules() if modules is None else modules)[HOMES[name]]
    for part in path:
        owner = getattr(owner, part)
    return owner, attribute


def in_grpc(name: str, modules: dict[str, types.ModuleType] | None = None) -> Any:
    """What grpc has under ``name`` now, as its owner's own __dict__ holds it (a class's classmethod, say); or None."""
    owner, attribute = place(name, modules)
    return vars(owner).get(attribute)


def not_offered(name: str, modules: dict[str, types.ModuleType] | None = None) -> str | None:
    """Why fastcommon has nothing for ``name`` here (grpc's own then stays, unwarned), or None."""
    if not hasattr(chosen, BY_NAME[name].needs):
        if chosen is common:
            return "fastcommon runs pure Python here, which does it no faster than grpc"
        return "this build of fastcommon (the Limited API, abi3) does not build it: a tuple's layout is CPython's own"
    if grpc_own(name, modules) is None:
        return f"grpcio {grpcio_version()} has no {name} of its own"
    return None


def grpc_modules() -> dict[str, types.ModuleType]:
    """The grpc modules fastcommon patches, by name, imported; an ImportError that says so without grpcio."""
    try:
        return {home: importlib.import_module(home) for home in sorted(set(HOMES.values()))}
    except ImportError as exc:
        raise ImportError("fastcommon.patch() needs grpcio, which is not installed: pip install grpcio") from exc


def grpc_own(name: str, modules: dict[str, types.ModuleType] | None = None) -> Any:
    """grpc's own object for ``name``: what grpc has there now, or the original where fastcommon's is in place."""
    current = in_grpc(name, modules)
    installed = _installed.get(name)
    return installed[0] if installed is not None and current is installed[1] else current


def assess(modules: dict[str, types.ModuleType] | None = None) -> dict[str, str | None]:
    """For each name, why fastcommon must leave grpc's own in place, or None if it may replace it. Changes nothing."""
    modules = grpc_modules() if modules is None else modules
    verdicts = {
        replaceable.name: not_offered(replaceable.name, modules)
        or replaceable.judge(grpc_own(replaceable.name, modules))
        for replaceable in REPLACEABLES
    }
    candidates = [name for name in METADATA_METHODS if verdicts[name] is None]
    verdicts.update(_metadata_differences(candidates, {name: grpc_own(name, modules) for name in candidates}))
    return verdicts


def _metadata_probe_class(owns: dict[str, Any], replaced: list[str]) -> Any:
    """A subclass of grpc's Metadata holding grpc's own methods, fastcommon's for those ``replaced``."""
    cls = _metadata_class()
    methods = {name.split(".")[1]: own for name, own in owns.items() if name.startswith("Metadata.")}
    probe = type(cls.__name__, (cls,), methods)
    ours = {name: owns[name] for name in replaced if name.startswith("Metadata.")}
    for name, made in chosen.metadata_methods(ours, probe).items():
        setattr(probe, name.split(".")[1], made)
    return probe


def _metadata_outcomes(owns: dict[str, Any], replaced: list[str]) -> list[tuple[str, Any]]:
    """Each probe's outcome with grpc's own methods, fastcommon's for those ``replaced``."""
    from . import _metadata_probes as probes  # the gate's, when it runs: not at import

    cls = _metadata_probe_class(owns, replaced)
    outcomes = [(label, probes.outcome(scenario, cls)) for label, scenario in probes.SCENARIOS]
    init_metadata = "_BaseMultiCallable._init_metadata"
    if init_metadata in owns:
        grpc = sys.modules["grpc"]
        own = owns[init_metadata]
        function = (
            chosen.metadata_methods({init_metadata: own}, _metadata_class())[init_metadata]
            if init_metadata in replaced
            else own
        )
        scenarios = probes.init_metadata_scenarios(
            _metadata_class(), grpc.Compression.Gzip, grpc.Compression.NoCompression
        )
        outcomes += [(label, probes.outcome(scenario, function.__func__)) for label, scenario in scenarios]
    return outcomes


def _metadata_differences(names: list[str], owns: dict[str, Any]) -> dict[str, str | None]:
    """The probes of grpc.aio's Metadata, fastcommon's ``names`` all together, as they run; where together they
    differ from grpc's own, each alone, so that the verdict names the one that does (or all, if none alone)."""
    if not names:
        return {}
    return dict(_probed(tuple(names), tuple(owns[name] for name in names), _metadata_class()))


@functools.lru_cache(maxsize=16)
def _probed(names: tuple[str, ...], owns: tuple[Any, ...], cls: Any) -> tuple[tuple[str, str | None], ...]:
    """_metadata_differences, remembered: its verdicts follow from these objects alone (a patch() undone and
    done again asks again), the class's shape and globals being checked before, every time."""
    held = dict(zip(names, owns, strict=True))
    theirs = _metadata_outcomes(held, [])  # grpc's own, once: each difference below compares against it

    def difference(replaced: list[str]) -> str | None:
        mine = _metadata_outcomes(held, replaced)
        differing = (label for (label, a), (_, b) in zip(theirs, mine, strict=True) if a != b)
        return next((f"it differs on a probe: {label}" for label in differing), None)

    together = difference(list(names))
    if together is None:
        return tuple((name, None) for name in names)
    alone = [(name, difference([name])) for name in names]
    if any(why for _, why in alone):
        return tuple(alone)
    return tuple((name, f"{together}, with fastcommon's other Metadata methods") for name in names)


def grpcio_version() -> str:
    return str(getattr(sys.modules.get("grpc"), "__version__", "unknown"))


def unknown(modules: dict[str, types.ModuleType] | None = None) -> dict[str, str]:
    """What of the installed grpcio the gate does not know, by name: for what it judges by fingerprint, a
    fingerprint its suite has not run against, as the KNOWN_FINGERPRINTS entry to add once the suite passes;
    for the metadata entry class, how it differs from the namedtuple the suite ran against."""
    modules = grpc_modules() if modules is None else modules
    found: dict[str, str] = {}
    for name in NAMES:
        own = grpc_own(name, modules)
        if own is None:  # this grpcio has none (_create before 1.80): nothing to replace, nothing to know
            continue
        if name not in KNOWN_FINGERPRINTS:
            if why := _metadatum_class_difference(own):
                found[name] = why
            continue
        fingerprint_found = fingerprint(getattr(own, "__func__", own))
        if fingerprint_found not in KNOWN_FINGERPRINTS[name]:
            found[name] = f'"{fingerprint_found}": ("{grpcio_version()}",),  # in KNOWN_FINGERPRINTS["{name}"]'
    return found


def install(make: Callable[[dict[str, Any]], dict[str, Any]]) -> tuple[str, ...]:
    """Put what ``make(grpc's own, by name)`` gives wherever the gate allows; warn of those it refused."""
    modules = grpc_modules()
    with _lock:
        if _installed:
            return ()
        verdicts = assess(modules)
        replaced = tuple(name for name in NAMES if verdicts[name] is None)
        owns = {name: in_grpc(name, modules) for name in replaced}
        made = make(owns)
        for name in replaced:
            _installed[name] = (owns[name], made[name])
            setattr(*place(name, modules), made[name])
    refused = [
        f"{name} in {HOMES[name]} ({why})" for name, why in verdicts.items() if why and not not_offered(name, modules)
    ]
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
    return install(replacements)


def unpatch() -> tuple[str, ...]:
    """Put grpc's own back where fastcommon's still are; return the names restored.

    Where another library has since replaced fastcommon's, its replacement stays, and grpc's own is kept
    for a later unpatch(), once fastcommon's is back in place: it is never lost.
    """
    with _lock:
        restored = []
        for name, (own, ours) in list(_installed.items()):
            if in_grpc(name) is ours:
                setattr(*place(name), own)
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
                if name not in _installed and in_grpc(name) is own:
                    setattr(*place(name), ours)
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
