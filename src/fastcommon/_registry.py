"""What fastcommon may replace in grpc, each once, as data all of fastcommon, .ci/next-grpcio and the tests read: a new
name is an entry here and, if compiled, a function in fast_common.pyx, a maker in fast_metadata.pyx or a fast_hooks'."""

import dataclasses
from collections.abc import Callable
from typing import Any

FUNCTION, CLASS, METHOD, CLASSMETHOD, STATICMETHOD = "function", "class", "method", "classmethod", "staticmethod"
HOOK = "hook"  # what grpc runs on every RPC for observability plugins and debug logging, and a handler's kind
METADATA_KINDS = (METHOD, CLASSMETHOD, STATICMETHOD)  # grpc.aio's Metadata methods and _init_metadata
_METADATA, _CYGRPC = "grpc.aio._metadata", "grpc._cython.cygrpc"  # the homes of grpc.aio's Metadata, grpc's Cython

NEWEST_CPYTHON = (3, 15)  # the newest the suite ran on: the hooks do as its contextlib, inspect and logging do
USER_AGENT = ("user-agent", "grpc-python/1.85.1 grpc-c/51.0.0 (linux; chttp2)")  # an entry every RPC carries
METHOD_NAME = "/grpc.testing.BenchmarkService/UnaryCall"  # what encode and decode are timed on

# The grpcio releases the suite passed against, by shared code (Cython's by release), added by hand (.ci/next-grpcio).
_V62, _V73, _V80, _V85 = ("1.62.3",), ("1.73.1",), ("1.80.1",), ("1.85.1", "1.85.3")
_OLDER, _NEWER = _V62 + _V73, _V80 + _V85


@dataclasses.dataclass(frozen=True)
class Replaceable:
    """One thing of grpc's that fastcommon may replace."""

    name: str  # what patch() returns and is_patched() takes: its dotted path in its home module
    home: str  # the grpc module
    kind: str  # how its home holds it
    fingerprints: dict[str, tuple[str, ...]]  # of the code the suite ran against, with its releases; the class has none
    calibration: Callable[[Any, Any], tuple[Any, ...]]  # --report's timed call's arguments, given cls, cls(USER_AGENT)
    arguments: int = 0  # a function's: how many grpc passes (a conversion one, a wrapper two)
    counter: int = -1  # where run --report counts its calls: its position in REPLACEABLES

    @property
    def attribute(self) -> str:
        """Its name in the class or module that holds it."""
        return self.name.rpartition(".")[2]


def _key(cls: Any, metadata: Any) -> tuple[Any, ...]:
    return (metadata, USER_AGENT[0])


_TABLE = (
    Replaceable("encode", "grpc._common", FUNCTION, {"710f6335": _OLDER, "17a1c983": _NEWER},
                lambda cls, m: (METHOD_NAME,), arguments=1),
    Replaceable("decode", "grpc._common", FUNCTION, {"db853f30": _OLDER + _NEWER},
                lambda cls, m: (METHOD_NAME.encode(),), arguments=1),
    Replaceable("serialize", "grpc._common", FUNCTION, {"0ebf1e2d": _OLDER, "aaa13f13": _NEWER},
                lambda cls, m: (b"message", bytes), arguments=2),
    Replaceable("deserialize", "grpc._common", FUNCTION, {"581b882d": _OLDER, "75deb5cd": _NEWER},
                lambda cls, m: (b"message", bytes), arguments=2),
    Replaceable("_Metadatum", _CYGRPC, CLASS, {}, lambda cls, m: USER_AGENT),
    Replaceable("Metadata.__init__", _METADATA, METHOD, {"0c3ca982": _OLDER, "c0b7a426": _NEWER}, lambda cls, m: (m,)),
    Replaceable("Metadata.add", _METADATA, METHOD, {"a4ec3e50": _OLDER + _NEWER}, lambda cls, m: (m, "x-key", "value")),
    Replaceable("Metadata.from_tuple", _METADATA, CLASSMETHOD,
                {"a962fb3f": _OLDER, "558a678c": _V80, "5c41a6b4": _V85}, lambda cls, m: (cls, None)),
    Replaceable("Metadata._create", _METADATA, CLASSMETHOD, {"cf0997c4": _V80, "7d36eb57": _V85},
                lambda cls, m: (cls, m)),  # none before 1.80
    Replaceable("Metadata.__iter__", _METADATA, METHOD, {"d918319d": _OLDER + _NEWER}, lambda cls, m: (m,)),
    Replaceable("Metadata.__len__", _METADATA, METHOD, {"4002ca69": _OLDER + _NEWER}, lambda cls, m: (m,)),
    Replaceable("Metadata.__getitem__", _METADATA, METHOD, {"17da657c": _OLDER, "3876e14a": _NEWER}, _key),
    Replaceable("Metadata.get", _METADATA, METHOD, {"aa9634dd": _V73, "2f86d154": _NEWER},
                _key),  # 1.62's is abc.Mapping's
    Replaceable("Metadata.get_all", _METADATA, METHOD, {"8c76ad9b": _OLDER + _V80, "c628ab52": _V85}, _key),
    Replaceable("Metadata.__contains__", _METADATA, METHOD, {"c4d51529": _OLDER + _V80, "7a574fc8": _V85}, _key),
    Replaceable("Metadata.__setitem__", _METADATA, METHOD, {"cad00d08": _OLDER + _NEWER},
                lambda cls, m: (m, USER_AGENT[0], "value")),
    Replaceable("_BaseMultiCallable._init_metadata", "grpc.aio._channel", STATICMETHOD,
                {"478d5c4b": _OLDER, "0bb5050f": _V80, "289438a0": _V85}, lambda cls, m: (m, None)),
    Replaceable("get_plugin", "grpc._observability", HOOK, {"aae09a11": _OLDER + _NEWER}, lambda cls, m: ()),
    Replaceable("_get_running_loop", _CYGRPC, HOOK, {"acecf2dd": _V80, "0857d511": _V85[:1], "f29d2131": _V85[1:]},
                lambda cls, m: ()),  # none before 1.80
    Replaceable("_is_async_handler", _CYGRPC, HOOK, {"924c5366": _V62, "f8d8c73e": _V73, "e22ae46f": _V80,
                "f0bcda8e": _V85[:1], "a32449d3": _V85[1:]}, lambda cls, m: (_key,)),  # timed on a plain function
    Replaceable("_create_servicer_context", "grpc", HOOK, {"dc07fcf8": _OLDER + _NEWER},
                lambda cls, m: (None, None, None)),
)  # fmt: skip

REPLACEABLES = tuple(dataclasses.replace(replaceable, counter=i) for i, replaceable in enumerate(_TABLE))
BY_NAME = {replaceable.name: replaceable for replaceable in REPLACEABLES}
NAMES = tuple(BY_NAME)
HOMES = tuple(dict.fromkeys(replaceable.home for replaceable in REPLACEABLES))

_RELEASES = {release for each in REPLACEABLES for releases in each.fingerprints.values() for release in releases}
TESTED_GRPCIO = tuple(sorted(_RELEASES, key=lambda release: tuple(map(int, release.split(".")))))  # oldest first


def of_kind(*kinds: str) -> tuple[Replaceable, ...]:
    """The replaceables of these kinds, in their order."""
    return tuple(replaceable for replaceable in REPLACEABLES if replaceable.kind in kinds)
