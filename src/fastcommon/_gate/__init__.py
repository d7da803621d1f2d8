"""The patch gate: for each name, whether fastcommon's may replace grpc's own, judged from grpc's own objects.

A function or a method passes when its fingerprint (a CRC-32 of its source and of its module's helpers it
calls) is one the suite ran against, and it behaves as fastcommon's on every probe: results, exceptions, log
records and what a (de)serializer is handed (functions.py); grpc.aio's Metadata methods are probed together,
once their class has the shape fastcommon's are made for (metadata.py). grpc's metadata entry class passes
when it is the namedtuple the suite ran against and the entries agree on every probe (metadatum.py). Judging
only reads: it is handed grpc's own objects, and builds whatever it probes with for itself.
"""

from __future__ import annotations

from typing import Any

from .. import _grpc, _implementation
from .._registry import BY_NAME, CLASS, FUNCTION, METHOD, REPLACEABLES, STATICMETHOD, Replaceable, of_kind
from .._verdict import Verdict, unknown_fingerprint
from . import functions, metadata, metadatum
from .fingerprints import fingerprint

UNKNOWN_CODE = "its code is not one fastcommon's suite ran against"


def fingerprint_of(own: Any) -> str | None:
    """The fingerprint of grpc's own function or method, as its holder keeps it (a classmethod, say)."""
    return fingerprint(getattr(own, "__func__", own))


def assess(owns: dict[str, Any], found: _grpc.Modules) -> dict[str, Verdict]:
    """The verdict on each name, given grpc's own object for it (None where grpc has none) and grpc's modules."""
    verdicts = {replaceable.name: _judge(replaceable, owns[replaceable.name], found) for replaceable in REPLACEABLES}
    probed = {name: owns[name] for name, verdict in verdicts.items() if verdict.replaces and _is_method(name)}
    if probed:
        cls = _grpc.metadata_class(found)
        init_metadata = next((name for name in probed if _kind(name) == STATICMETHOD), None)
        for name, why in metadata.differences(probed, cls, _implementation.metadata_methods, init_metadata).items():
            verdicts[name] = Verdict(name, why)
    return verdicts


def _judge(replaceable: Replaceable, own: Any, found: _grpc.Modules) -> Verdict:
    name = replaceable.name
    if why := _implementation.unoffered(replaceable):
        return Verdict(name, why, offered=False)
    if own is None:
        return Verdict(name, f"grpcio {_grpc.version()} has no {name} of its own", offered=False)
    if replaceable.kind == CLASS:
        why = metadatum.class_difference(own) or metadatum.difference(own, _implementation.metadatum_builder)
        return Verdict(name, why)
    if replaceable.kind != FUNCTION and (why := _metadata_class_difference(found)):
        return Verdict(name, why)
    if fingerprint_of(own) not in replaceable.fingerprints:
        return Verdict(name, UNKNOWN_CODE)
    if replaceable.kind == FUNCTION:
        ours = getattr(_implementation.chosen, name)
        return Verdict(name, functions.difference(name, replaceable.arguments, own, ours))
    return Verdict(name)  # a Metadata method: probed with the others, in assess()


def _metadata_class_difference(found: _grpc.Modules) -> str | None:
    """How the class of Metadata's methods, and the globals grpc's methods look up, differ from what fastcommon's
    are made for: grpc.aio._metadata's OrderedDict, and the Metadata of _init_metadata's module."""
    methods_home, init_home = of_kind(METHOD)[0].home, of_kind(STATICMETHOD)[0].home
    return metadata.class_difference(
        _grpc.metadata_class(found),
        vars(found[methods_home]).get("OrderedDict"),
        vars(found[init_home]).get("Metadata"),
    )


def _kind(name: str) -> str:
    return BY_NAME[name].kind


def _is_method(name: str) -> bool:
    return _kind(name) not in (FUNCTION, CLASS)


def unknown(owns: dict[str, Any]) -> dict[str, str]:
    """What of the installed grpcio the gate does not know, by name: a fingerprint the suite has not run against,
    as the line to add once it passes; a metadata entry class of another shape, how it differs."""
    found: dict[str, str] = {}
    for replaceable in REPLACEABLES:
        own = owns[replaceable.name]
        if own is None:  # this grpcio has none (_create before 1.80): nothing to replace, nothing to know
            continue
        if replaceable.kind == CLASS:
            if why := metadatum.class_difference(own):
                found[replaceable.name] = why
        elif (known := fingerprint_of(own)) not in replaceable.fingerprints:
            found[replaceable.name] = unknown_fingerprint(replaceable.name, known, _grpc.version())
    return found
