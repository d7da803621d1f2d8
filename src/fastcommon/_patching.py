"""Patch state: what fastcommon has put into grpc, and grpc's own that it replaced (patch, unpatch, suspended).

Like gevent's monkey, one dict holds each original beside what replaced it; everything that asks what grpc's
own is (the gate, the status, the report, the tests) reads it through ``grpcs_own``, so that a judgement
answers the same before patch(), after it and after unpatch().
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from . import _gate, _grpc, _implementation
from ._implementation import FastcommonWarning
from ._registry import NAMES
from ._verdict import Verdict, warning

_installed: dict[str, tuple[Any, Any]] = {}  # name -> (grpc's own, fastcommon's in its place)
_lock = threading.Lock()

# What makes the replacements: (grpc's own by name, grpc's Metadata class) -> fastcommon's by name.
Make = Callable[[dict[str, Any], Any], dict[str, Any]]


def grpcs_own(found: _grpc.Modules | None = None) -> dict[str, Any]:
    """grpc's own object for every name: what grpc holds now, or the original where fastcommon's is in place."""
    found = _grpc.modules() if found is None else found
    owns = {}
    for name in NAMES:
        current = _grpc.held(name, found)
        installed = _installed.get(name)
        owns[name] = installed[0] if installed is not None and current is installed[1] else current
    return owns


def verdicts(found: _grpc.Modules | None = None) -> dict[str, Verdict]:
    """The gate's verdict on each name, for the grpc installed here. Changes nothing."""
    found = _grpc.modules() if found is None else found
    return _gate.assess(grpcs_own(found), found)


def install(make: Make = _implementation.replacements) -> tuple[str, ...]:
    """Put what ``make`` gives wherever the gate allows; warn, once, of those it refused."""
    _implementation.warn_if_unwanted_pure_python(stacklevel=3)
    found = _grpc.modules()
    with _lock:
        if _installed:
            return ()
        judged = verdicts(found)
        replaced = tuple(name for name in NAMES if judged[name].replaces)
        owns = {name: _grpc.held(name, found) for name in replaced}
        made = make(owns, _grpc.metadata_class(found))
        for name in replaced:
            _installed[name] = (owns[name], made[name])
            setattr(*_grpc.holder(name, found), made[name])
    if refused := [verdict for verdict in judged.values() if verdict.refused]:
        warnings.warn(warning(refused, _grpc.version()), FastcommonWarning, stacklevel=3)
    return replaced


def patch() -> tuple[str, ...]:
    """Put fastcommon's into grpc wherever grpc's own behave the same (the gate); return the names replaced."""
    return install()


def unpatch() -> tuple[str, ...]:
    """Put grpc's own back where fastcommon's still are; return the names restored.

    Where another library has since replaced fastcommon's, its replacement stays, and grpc's own is kept
    for a later unpatch(), once fastcommon's is back in place: it is never lost.
    """
    with _lock:
        if not _installed:
            return ()
        found = _grpc.modules()
        restored = []
        for name, (own, ours) in list(_installed.items()):
            if _grpc.held(name, found) is ours:
                setattr(*_grpc.holder(name, found), own)
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
        if restored:
            found = _grpc.modules()
            with _lock:
                for name in restored:
                    own, ours = taken[name]
                    if name not in _installed and _grpc.held(name, found) is own:
                        setattr(*_grpc.holder(name, found), ours)
                        _installed[name] = (own, ours)


def replacement(name: str) -> Any:
    """What fastcommon put in place of ``name``; KeyError where it replaced nothing by that name."""
    return _installed[name][1]


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
