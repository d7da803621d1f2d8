"""The gate's judgement of grpc's metadata. Its entry class, cygrpc._Metadatum: its shape, then probes of what it
builds. grpc.aio's Metadata: its class's shape, then metadata_probes' scenarios on a copy of it with grpc's methods
and with fastcommon's together (they call each other); where they differ, each left out in turn."""

import collections
import functools
import gc
import types
from collections.abc import Callable
from typing import Any

from .. import _grpc, _implementation
from .._registry import BY_NAME, CLASS, METHOD, STATICMETHOD, USER_AGENT, of_kind
from . import metadata_probes as probes
from .copies import copied, detached

# collections.abc.Sequence to _init_metadata's copy: the same answers on the probes' arguments, no abc cache filled.
Sequence = (tuple, list, str, bytes, bytearray, range, memoryview, collections.deque)


@functools.cache
def _namedtuples_new() -> types.CodeType:
    """The code of __new__ of grpc's namedtuple, to compare with; made when first needed (32 µs), the class not kept."""
    return collections.namedtuple(of_kind(CLASS)[0].attribute, ("key", "value")).__new__.__code__


def entry_class_difference(cls: Any) -> str | None:
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


ENTRY_PROBES: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (USER_AGENT, {}), (("trace-proto-bin", b"\x00\xff\x80binary"), {}), (("", ""), {}),
    (("x-caf\xe9", "na\xefve \U0001f600"), {}), (("key", "value"), {"extra": 1}), ((), {"key": "k", "value": "v"}),
    (("k",), {}), (("k", "v", "surplus"), {}), ((), {})]  # fmt: skip


def _entry_outcome(build: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Everything observable about one construction: the object and its behaviour, or the exception."""
    try:  # observing too: whatever a changed class does, the gate answers and never raises
        entry = build(*args, **kwargs)
        given = (*args, *kwargs.values())
        made = (type(entry), tuple(entry), [item is argument for item, argument in zip(entry, given, strict=False)])
        behaves = (repr(entry), hash(entry), entry._asdict(), entry._replace(value="replaced"), gc.is_tracked(entry))
        return "returned", made, behaves, entry.__reduce_ex__(2)[1:]
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def entry_difference(cls: Any) -> str | None:
    """The first probe on which fastcommon's entries differ from those of grpc's class ``cls``, described; or None."""
    probed = detached(cls, tuple)  # both probed on a copy: pickling an entry writes __slotnames__ into its class
    build = _implementation.compiled["fast_entry"].MetadatumConstructor(probed)
    for args, kwargs in ENTRY_PROBES:
        if _entry_outcome(probed, args, kwargs) != _entry_outcome(build, args, kwargs):
            return f"it differs on a probe: {cls.__name__}(*{args!r:.40}, **{kwargs!r})"
    return None


def class_difference() -> str | None:
    """How grpc.aio's Metadata class, and the globals its methods read, differ from what fastcommon's are made for."""
    cls, modules = _grpc.metadata_class(), _grpc.modules()
    usual = isinstance(cls, type)
    objects_access = usual and cls.__getattribute__ is object.__getattribute__ and cls.__setattr__ is object.__setattr__
    checks = [
        (usual and type(cls).__call__ is type.__call__, "a class that is called as type calls one"),
        (usual and cls.__new__ is object.__new__, "object's __new__"),
        (objects_access and not hasattr(cls, "__getattr__"), "object's attribute access"),
        (not hasattr(cls, "_metadata"), "instances that hold their own _metadata"),
        (vars(modules[of_kind(METHOD)[0].home]).get("OrderedDict") is collections.OrderedDict, "an OrderedDict"),
        (vars(modules[of_kind(STATICMETHOD)[0].home]).get("Metadata") is cls, "grpc.aio._channel's Metadata"),
    ]
    lacks = ", ".join(what for holds, what in checks if not holds)
    return f"its Metadata class is not the one fastcommon's suite ran against (it lacks: {lacks})" if lacks else None


def differences(originals: dict[str, Any]) -> dict[str, str | None]:
    """Why fastcommon's may not replace each of grpc's methods ``originals`` (by name), or None; judged anew."""
    cls, made = _grpc.metadata_class(), probes.made()
    theirs = _outcomes(originals, [], cls, made)  # grpc's alone, once: each difference compares with it

    def difference(replaced: list[str]) -> str | None:
        mine = _outcomes(originals, replaced, cls, made)
        differing = (label for (label, a), (_, b) in zip(theirs, mine, strict=True) if a != b)
        return next((f"it differs on a probe: {label}" for label in differing), None)

    together = difference(list(originals))
    if together is None:
        return dict.fromkeys(originals)
    culprits = [name for name in originals if difference([other for other in originals if other != name]) is None]
    if not culprits:
        return dict.fromkeys(originals, f"{together}, with fastcommon's other Metadata methods")
    return {name: together if name in culprits else None for name in originals}


def _outcomes(originals: dict[str, Any], replaced: list[str], cls: Any, made: Any) -> list[Any]:
    """Each scenario's outcome with grpc's ``originals``, fastcommon's for those ``replaced``, the classes ``made``."""
    probe = detached(cls, object)
    methods = {  # grpc's, naming the copy Metadata (grpc 1.80's _create makes a Metadata(), not a cls())
        name: copied(each, Metadata=probe) for name, each in originals.items() if BY_NAME[name].kind != STATICMETHOD
    }
    make = _implementation.replacements
    methods |= make({name: methods[name] for name in replaced if name in methods}, probe)  # fastcommon's in their place
    for name, method in methods.items():
        setattr(probe, BY_NAME[name].attribute, method)
    outcomes = [(label, probes.outcome(scenario, probe)) for label, scenario in probes.scenarios(*made)]
    init_metadata = next((name for name in originals if name not in methods), None)  # probed on calls of its own
    if init_metadata is not None:
        original = copied(originals[init_metadata], Metadata=probe, Sequence=Sequence)
        function = make({init_metadata: original}, probe)[init_metadata] if init_metadata in replaced else original
        for label, args in probes.init_metadata_arguments(probe, *made[:2]):
            answer = functools.partial(probes.init_metadata_answer, args)
            outcomes.append((f"_init_metadata({label})", probes.outcome(answer, function.__func__)))
    return outcomes
