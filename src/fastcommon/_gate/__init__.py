"""The patch gate: whether fastcommon's may replace each of grpc's. A function or method needs a known fingerprint
(fingerprints.py) and the same outcome on every probe (functions.py, metadata.py); a hook, a known fingerprint on a
CPython the suite ran on; the entry class, the namedtuple's shape and the same entries (metadata.py). Only reads."""

import sys
from typing import Any

from .. import _grpc, _implementation
from .._registry import CLASS, FUNCTION, HOOK, METADATA_KINDS, NEWEST_CPYTHON, REPLACEABLES, Replaceable, of_kind
from .._verdict import Verdict, unknown_fingerprint
from . import functions, metadata
from .fingerprints import fingerprint_of as fingerprint_of  # the status prints it too

UNJUDGED = "the gate could not judge it: {!r}"


def assess(originals: dict[str, Any]) -> dict[str, Verdict]:
    """The verdict on each name, given grpc's original for it (None where grpc has none)."""
    verdicts = {replaceable.name: _judge(replaceable, originals[replaceable.name]) for replaceable in REPLACEABLES}
    probed = {each.name: originals[each.name] for each in of_kind(*METADATA_KINDS) if verdicts[each.name].replaces}
    if probed:
        try:
            differences = metadata.differences(probed)
        except Exception as exc:  # as in _judge()
            differences = dict.fromkeys(probed, UNJUDGED.format(exc))
        verdicts |= {name: Verdict(name, why) for name, why in differences.items()}
    return verdicts


def unavailable(replaceable: Replaceable, original: Any) -> str | None:
    """Why fastcommon has nothing to put in place of grpc's ``original`` here (pure Python, abi3, grpc has none)."""
    if replaceable.kind != FUNCTION and not _implementation.compiled:
        return "fastcommon runs pure Python here, which does it no faster than grpc"
    if replaceable.kind == HOOK and sys.version_info[:2] > NEWEST_CPYTHON:
        return "fastcommon's does as contextlib, inspect and logging do up to CPython {}.{}".format(*NEWEST_CPYTHON)
    if replaceable.kind == CLASS and "fast_entry" not in _implementation.compiled:
        return "this build of fastcommon (the Limited API, abi3) does not build it: a tuple's layout is CPython's own"
    return f"grpcio {_grpc.version()} has no {replaceable.name} of its own" if original is None else None


def _judge(replaceable: Replaceable, original: Any) -> Verdict:
    name = replaceable.name
    try:
        if why := unavailable(replaceable, original):
            return Verdict(name, why, available=False)
        if replaceable.kind == CLASS:
            return Verdict(name, metadata.entry_class_difference(original) or metadata.entry_difference(original))
        if replaceable.kind in METADATA_KINDS and (why := metadata.class_difference()):
            return Verdict(name, why)
        if fingerprint_of(original) not in replaceable.fingerprints:
            return Verdict(name, "its code is not one fastcommon's suite ran against")
        if replaceable.kind == FUNCTION:
            fastcommons = getattr(_implementation.chosen, name)
            return Verdict(name, functions.difference(name, replaceable.arguments, original, fastcommons))
        return Verdict(name)  # a hook; or a Metadata method, probed with the others in assess()
    except Exception as exc:  # whatever a changed grpc or a hook of the process does, the gate answers: grpc's stays
        return Verdict(name, UNJUDGED.format(exc))


def unknown(originals: dict[str, Any]) -> dict[str, str]:
    """What of the installed grpcio the gate does not know, by name: the fingerprint line to add, or the shape."""
    found: dict[str, str] = {}
    for replaceable in REPLACEABLES:
        original = originals[replaceable.name]
        if original is None:  # this grpcio has none (_create before 1.80): nothing to replace, nothing to know
            continue
        if replaceable.kind == CLASS:
            if why := metadata.entry_class_difference(original):
                found[replaceable.name] = why
        elif (known := fingerprint_of(original)) not in replaceable.fingerprints:
            found[replaceable.name] = unknown_fingerprint(replaceable.name, known, _grpc.version())
    return found
