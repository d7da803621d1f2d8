"""The gate's judgement of grpc's metadata entry class, cygrpc._Metadatum: its shape, then probes of what it builds."""

import collections
import functools
import gc
import types
from collections.abc import Callable
from typing import Any

from .. import _implementation
from .._registry import CLASS, USER_AGENT, of_kind
from .copies import detached


@functools.cache
def _namedtuples_new() -> types.CodeType:
    """The code of __new__ of grpc's namedtuple, to compare with; made when first needed (32 µs), the class not kept."""
    return collections.namedtuple(of_kind(CLASS)[0].attribute, ("key", "value")).__new__.__code__


def class_difference(cls: Any) -> str | None:
    """How grpc's metadata entry class differs from the namedtuple fastcommon builds; None if it does not."""
    reference = _namedtuples_new()
    new = getattr(cls, "__new__", None)
    checks = [
        (isinstance(cls, type) and type(cls) is type and cls.__mro__[1:] == (tuple, object), "a plain tuple subclass"),
        (getattr(cls, "_fields", None) == ("key", "value"), "fields ('key', 'value')"),
        (getattr(cls, "__dictoffset__", None) == 0 and getattr(cls, "__weakrefoffset__", None) == 0, "no __dict__"),
        (getattr(cls, "__init__", None) is tuple.__init__, "no __init__ of its own"),
        (isinstance(new, types.FunctionType) and new.__defaults__ is None
         and (new.__code__.co_code, new.__code__.co_names) == (reference.co_code, reference.co_names)
         and new.__globals__.get("_tuple_new") is tuple.__new__, "namedtuple's own __new__"),
    ]  # fmt: skip
    missing = [what for holds, what in checks if not holds]
    return f"it is not the namedtuple fastcommon builds (it lacks: {', '.join(missing)})" if missing else None


PROBES: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (USER_AGENT, {}), (("trace-proto-bin", b"\x00\xff\x80binary"), {}), (("", ""), {}),
    (("x-caf\xe9", "na\xefve \U0001f600"), {}), (("key", "value"), {"extra": 1}), ((), {"key": "k", "value": "v"}),
    (("k",), {}), (("k", "v", "surplus"), {}), ((), {})]  # fmt: skip


def _outcome(build: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Everything observable about one construction: the object and its behaviour, or the exception."""
    try:  # observing too: whatever a changed class does, the gate answers and never raises
        entry = build(*args, **kwargs)
        given = (*args, *kwargs.values())
        made = (type(entry), tuple(entry), [item is argument for item, argument in zip(entry, given, strict=False)])
        behaves = (repr(entry), hash(entry), entry._asdict(), entry._replace(value="replaced"), gc.is_tracked(entry))
        return "returned", made, behaves, entry.__reduce_ex__(2)[1:]
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def difference(cls: Any) -> str | None:
    """The first probe on which fastcommon's entries differ from those of grpc's class ``cls``, described; or None."""
    probed = detached(cls, tuple)  # both probed on a copy: pickling an entry writes __slotnames__ into its class
    build = _implementation.compiled["fast_entry"].MetadatumConstructor(probed)
    for args, kwargs in PROBES:
        if _outcome(probed, args, kwargs) != _outcome(build, args, kwargs):
            return f"it differs on a probe: {cls.__name__}(*{args!r:.40}, **{kwargs!r})"
    return None
