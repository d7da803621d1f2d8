"""The gate's probes of grpc._common's functions: grpc's and fastcommon's on every kind of input grpc may pass."""

import logging
import sys
from collections.abc import Callable
from typing import Any

from .. import common
from .._registry import METHOD_NAME
from .copies import copied


class _PosingAsBytes:
    """What isinstance() takes for bytes without being bytes, as unittest.mock.Mock(spec=bytes) is."""

    @property  # type: ignore[misc]  # isinstance() reads __class__
    def __class__(self) -> type:
        return bytes

    def decode(self, *args: Any) -> str:
        return f"decoded{args}"

    def __repr__(self) -> str:
        return "an object posing as bytes"


_POSING_AS_BYTES = _PosingAsBytes()  # one for both sides, which holds nothing to change: the same is equal


def probe_values(recorder: "Recorder") -> list[Any]:
    """Every kind of input grpc's callers pass or may pass (the subclasses the recorder's); fresh for each side."""
    return [METHOD_NAME.encode(), "h\xe9llo \U0001f600\x00", memoryview(b"zero-copy slice"), bytearray(b"bytearray"),
            [b"chunk one, ", b"chunk two"], [memoryview(b"view one, "), memoryview(b"view two")], [], None,
            recorder.str("str subclass"), recorder.bytes(b"bytes subclass"), _POSING_AS_BYTES,
            b"\xff\xfeh\xc3\xa9\xe2\x82", "\ud800"]  # fmt: skip  # the last two: invalid UTF-8, a lone surrogate


def _observable(value: Any) -> Any:
    """What can be compared of a value across calls: its type and contents, recursively for lists."""
    if isinstance(value, memoryview):
        return memoryview, value.tobytes()
    if isinstance(value, list):
        return list, [_observable(item) for item in value]
    return type(value), value


class _Transformer:
    """A probe (de)serializer: records what it is handed, then returns it, or raises ``raises``."""

    def __init__(self, raises: type[Exception] | None) -> None:
        self.raises = raises
        self.handed: list[Any] = []

    def __call__(self, message: Any) -> Any:
        self.handed.append(_observable(message))
        if self.raises:
            raise self.raises("probe")
        return message

    def __repr__(self) -> str:
        return "a (de)serializer that raises" if self.raises else "a (de)serializer that returns its input"


class Recorder:
    """grpc._common's _LOGGER while probing: keeps the probes' failures, others (a finalizer's) go to grpc's; and one
    judgement's probe classes (str and bytes subclasses, the error raised): none exist at import."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []
        self.error = type("_ProbeError", (Exception,), {})
        self.str, self.bytes = type("_ProbeStr", (str,), {}), type("_ProbeBytes", (bytes,), {})

    def exception(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if isinstance(exc := sys.exc_info()[1], self.error):
            self.records.append((logging.ERROR, str(msg) % args if args else str(msg), type(exc), str(exc)))
        else:
            common.grpcs_logger().exception(msg, *args, stacklevel=2, **kwargs)


def _outcomes(arity: int, function: Callable[..., Any], recorder: Recorder) -> list[tuple[tuple[Any, ...], Any]]:
    """Each probe's arguments, and everything observable about ``function`` on them; made fresh for each side."""
    calls: list[tuple[Any, _Transformer | None]] = [(value, None) for value in probe_values(recorder)]
    if arity == 2:
        calls += [(value, _Transformer(raises=None)) for value in probe_values(recorder)]
        values = probe_values(recorder)  # failing: what grpc hands over (bytes, a memoryview, chunks); the rest, above
        calls += [(values[i], _Transformer(raises=recorder.error)) for i in (0, 2, 4)]
    outcomes = []
    for value, transformer in calls:
        args = (value,) if arity == 1 else (value, transformer)
        del recorder.records[:]
        try:
            result = function(*args)
        except Exception as exc:
            observed: tuple[Any, ...] = ("raised", type(exc), str(exc))
        else:
            observed = ("returned", _observable(result), result is value)
        outcomes.append((args, (observed, list(recorder.records), transformer and transformer.handed)))
    return outcomes


def difference(name: str, arity: int, grpcs: Callable[..., Any], fastcommons: Callable[..., Any]) -> str | None:
    """The first probe on which grpc's ``name`` and fastcommon's differ (each logging on a Recorder), or None."""
    recorder = Recorder()
    theirs = _outcomes(arity, copied(grpcs, _LOGGER=recorder), recorder)
    common.PROBING.recorder = recorder
    try:
        mine = _outcomes(arity, fastcommons, recorder)
    finally:
        del common.PROBING.recorder
    differing = (args for (args, their), (_, my) in zip(theirs, mine, strict=True) if their != my)
    described = (", ".join([f"{type(args[0]).__name__} {args[0]!r:.40}", *map(str, args[1:])]) for args in differing)
    return next((f"it differs on a probe: {name}({arguments})" for arguments in described), None)
