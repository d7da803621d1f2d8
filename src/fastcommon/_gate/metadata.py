"""The gate's judgement of grpc.aio's Metadata: its class's shape, then probes of its methods, run together.

fastcommon's methods are made for one class and call each other as that class holds them, so they are
probed together, as they run: each scenario of metadata_probes runs on a class of the gate's own, made from
grpc's Metadata's namespace (and its bases') with grpc's original methods, and on another with fastcommon's in their
place. Neither is in grpc's hierarchy: subclassing them and asking isinstance() of them leave grpc's class, its
subclasses and abc's caches as they were; _init_metadata runs as a copy of grpc's that names the gate's class as
Metadata. Where together they differ, each is left out in turn, so that the verdict names the one whose leaving
out makes the difference go.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any

from . import metadata_probes as probes
from .copies import copied, detached

# What makes fastcommon's methods: (grpc's originals by name, the class they are made for) -> fastcommon's by name.
Make = Callable[[dict[str, Any], Any], dict[str, Any]]


def class_difference(cls: Any, ordered_dict: Any, channel_metadata: Any) -> str | None:
    """How grpc.aio's Metadata class differs from the one fastcommon's methods are made for; None if it does not.
    ``ordered_dict`` and ``channel_metadata``: what grpc.aio._metadata calls OrderedDict and grpc.aio._channel
    calls Metadata, the module globals grpc's methods look up."""
    usual = isinstance(cls, type)
    checks = [
        (usual and type(cls).__call__ is type.__call__, "a class that is called as type calls one"),
        (usual and cls.__new__ is object.__new__, "object's __new__"),
        (
            usual
            and cls.__getattribute__ is object.__getattribute__
            and cls.__setattr__ is object.__setattr__
            and not hasattr(cls, "__getattr__"),
            "object's attribute access",
        ),
        (not hasattr(cls, "_metadata"), "instances that hold their own _metadata"),
        (ordered_dict is collections.OrderedDict, "an OrderedDict"),
        (channel_metadata is cls, "grpc.aio._channel's Metadata"),
    ]
    missing = [what for holds, what in checks if not holds]
    if missing:
        return f"its Metadata class is not the one fastcommon's suite ran against (it lacks: {', '.join(missing)})"
    return None


def differences(originals: dict[str, Any], cls: Any, make: Make, init_metadata: str | None) -> dict[str, str | None]:
    """For each of grpc's original methods ``originals`` (by name), why fastcommon's may not replace it, or None; probed
    together. ``init_metadata``: the name of _init_metadata among them, which is probed on calls of its own."""
    if not originals:
        return {}
    return dict(_probed(tuple(originals), tuple(originals.values()), cls, make, init_metadata))


@functools.lru_cache(maxsize=16)
def _probed(
    names: tuple[str, ...], originals: tuple[Any, ...], cls: Any, make: Make, init_metadata: str | None
) -> tuple[tuple[str, str | None], ...]:
    """differences(), remembered: its verdicts follow from these objects alone (a patch() undone and done again asks
    again), the class's shape being checked before, every time."""
    by_name = dict(zip(names, originals, strict=True))
    theirs = _outcomes(
        by_name, [], cls, make, init_metadata
    )  # grpc's originals, once: each difference compares with it

    def difference(replaced: list[str]) -> str | None:
        mine = _outcomes(by_name, replaced, cls, make, init_metadata)
        differing = (label for (label, a), (_, b) in zip(theirs, mine, strict=True) if a != b)
        return next((f"it differs on a probe: {label}" for label in differing), None)

    together = difference(list(names))
    if together is None:
        return tuple((name, None) for name in names)
    # fastcommon's work together (its __init__ adds in place only beside its add): the one whose leaving out
    # makes the difference go is the one that differs.
    culprits = [name for name in names if difference([other for other in names if other != name]) is None]
    if culprits:
        return tuple((name, together if name in culprits else None) for name in names)
    return tuple((name, f"{together}, with fastcommon's other Metadata methods") for name in names)


class _Sequences(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, (tuple, list, str, bytes, bytearray, range, memoryview, collections.deque))


class Sequence(metaclass=_Sequences):
    """collections.abc.Sequence to _init_metadata's copy: the same answer for every argument the probes pass (a test
    compares), without filling abc's caches."""


def _outcomes(
    originals: dict[str, Any], replaced: list[str], cls: Any, make: Make, init_metadata: str | None
) -> list[tuple[str, Any]]:
    """Each probe's outcome with grpc's original methods, fastcommon's for those ``replaced``."""
    methods = {name: original for name, original in originals.items() if name != init_metadata}
    probe = detached(cls, object, {name.rpartition(".")[2]: original for name, original in methods.items()})
    fastcommons = {name: methods[name] for name in replaced if name in methods}
    for name, replacement in make(fastcommons, probe).items():
        setattr(probe, name.rpartition(".")[2], replacement)
    outcomes = [(label, probes.outcome(scenario, probe)) for label, scenario in probes.SCENARIOS]
    if init_metadata is not None:
        original = staticmethod(copied(originals[init_metadata].__func__, Metadata=probe, Sequence=Sequence))
        function = make({init_metadata: original}, probe)[init_metadata] if init_metadata in replaced else original
        scenarios = probes.init_metadata_scenarios(probe)
        outcomes += [(label, probes.outcome(scenario, function.__func__)) for label, scenario in scenarios]
    return outcomes
