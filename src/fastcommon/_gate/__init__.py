"""The patch gate: for each name, whether fastcommon's may replace grpc's own, judged from grpc's objects.

A function or a method passes when its fingerprint (a CRC-32 of its source and of its module's helpers it
calls) is one the suite ran against, and it behaves as fastcommon's on every probe: results, exceptions, log
records and what a (de)serializer is handed (functions.py); grpc.aio's Metadata methods are probed together,
once their class has the shape fastcommon's are made for (metadata.py). grpc's metadata entry class passes
when it is the namedtuple the suite ran against and the entries agree on every probe (metadatum.py). Judging
only reads: it is handed grpc's originals, and probes copies and classes of its own.
"""

from __future__ import annotations

from typing import Any

from .. import _grpc, _implementation
from .._registry import BY_NAME, CLASS, FUNCTION, METHOD, REPLACEABLES, STATICMETHOD, Replaceable, of_kind
from .._verdict import Verdict, unknown_fingerprint
from . import functions, metadata, metadatum
from .fingerprints import fingerprint

UNKNOWN_CODE = "its code is not one fastcommon's suite ran against"


def fingerprint_of(original: Any) -> str | None:
    """The fingerprint of grpc's function or method, as its owner keeps it (a classmethod, say)."""
    return fingerprint(getattr(original, "__func__", original))


def assess(originals: dict[str, Any]) -> dict[str, Verdict]:
    """The verdict on each name, given grpc's original for it (None where grpc has none)."""
    verdicts = {replaceable.name: _judged(replaceable, originals[replaceable.name]) for replaceable in REPLACEABLES}
    probed = {name: originals[name] for name, verdict in verdicts.items() if verdict.replaces and _is_method(name)}
    if probed:
        init_metadata = next((name for name in probed if BY_NAME[name].kind == STATICMETHOD), None)
        make = _implementation.metadata_methods
        try:
            differences = metadata.differences(probed, _grpc.metadata_class(), make, init_metadata)
        except Exception as exc:  # as _judged()
            differences = dict.fromkeys(probed, f"the gate could not judge it: {exc!r}")
        verdicts |= {name: Verdict(name, why) for name, why in differences.items()}
    return verdicts


def _judged(replaceable: Replaceable, original: Any) -> Verdict:
    try:
        return _judge(replaceable, original)
    except Exception as exc:  # whatever a changed grpc or a hook of the process does, the gate answers: grpc's stays
        return Verdict(replaceable.name, f"the gate could not judge it: {exc!r}")


def _judge(replaceable: Replaceable, original: Any) -> Verdict:
    name = replaceable.name
    if why := _implementation.unavailable(replaceable):
        return Verdict(name, why, available=False)
    if original is None:
        return Verdict(name, f"grpcio {_grpc.version()} has no {name} of its own", available=False)
    if replaceable.kind == CLASS:
        why = metadatum.class_difference(original) or metadatum.difference(original, _implementation.entry_builder)
        return Verdict(name, why)
    if replaceable.kind != FUNCTION and (why := _metadata_class_difference()):
        return Verdict(name, why)
    if fingerprint_of(original) not in replaceable.fingerprints:
        return Verdict(name, UNKNOWN_CODE)
    if replaceable.kind == FUNCTION:
        fastcommons = getattr(_implementation.chosen, name)
        return Verdict(name, functions.difference(name, replaceable.arguments, original, fastcommons))
    return Verdict(name)  # a Metadata method: probed with the others, in assess()


def _metadata_class_difference() -> str | None:
    """How the class of Metadata's methods, and the globals grpc's methods look up, differ from what fastcommon's
    are made for: grpc.aio._metadata's OrderedDict, and the Metadata of _init_metadata's module."""
    methods_home, init_home = of_kind(METHOD)[0].home, of_kind(STATICMETHOD)[0].home
    return metadata.class_difference(
        _grpc.metadata_class(),
        _grpc.module_global(methods_home, "OrderedDict"),
        _grpc.module_global(init_home, "Metadata"),
    )


def _is_method(name: str) -> bool:
    return BY_NAME[name].kind not in (FUNCTION, CLASS)


def unknown(originals: dict[str, Any]) -> dict[str, str]:
    """What of the installed grpcio the gate does not know, by name: a fingerprint the suite has not run against,
    as the line to add once it passes; a metadata entry class of another shape, how it differs."""
    found: dict[str, str] = {}
    for replaceable in REPLACEABLES:
        original = originals[replaceable.name]
        if original is None:  # this grpcio has none (_create before 1.80): nothing to replace, nothing to know
            continue
        if replaceable.kind == CLASS:
            if why := metadatum.class_difference(original):
                found[replaceable.name] = why
        elif (known := fingerprint_of(original)) not in replaceable.fingerprints:
            found[replaceable.name] = unknown_fingerprint(replaceable.name, known, _grpc.version())
    return found
