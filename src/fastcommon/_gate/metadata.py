"""The gate's judgement of grpc.aio's Metadata: its class's shape, then metadata_probes' scenarios on a copy of it with
grpc's methods and with fastcommon's together (they call each other); where they differ, each left out in turn."""

import collections
import functools
from typing import Any

from .. import _grpc, _implementation
from .._registry import BY_NAME, METHOD, STATICMETHOD, of_kind
from . import metadata_probes as probes
from .copies import copied, detached

# collections.abc.Sequence to _init_metadata's copy: the same answers on the probes' arguments, no abc cache filled.
Sequence = (tuple, list, str, bytes, bytearray, range, memoryview, collections.deque)


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
