"""Patch state: what fastcommon put into grpc, beside grpc's original, in one dict (as gevent's monkey). All that asks
for grpc's original reads originals(): a judgement answers the same before patch(), after it and after unpatch()."""

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from . import _gate, _grpc, _implementation, _recording
from ._registry import NAMES
from ._verdict import Verdict, warning

_installed: dict[str, tuple[Any, Any]] = {}  # name -> (grpc's original, fastcommon's replacement in its place)
_lock = threading.Lock()


def originals() -> dict[str, Any]:
    """grpc's original for every name: what grpc holds now, or what fastcommon's replacement stands in for."""
    now = {name: _grpc.current(name) for name in NAMES}
    return now | {name: original for name, (original, mine) in list(_installed.items()) if now[name] is mine}


def verdicts() -> dict[str, Verdict]:
    """The gate's verdict on each name, for the grpc installed here. Changes nothing."""
    return _gate.assess(originals())


def install(make: Callable[[dict[str, Any], Any], dict[str, Any]] = _implementation.replacements) -> tuple[str, ...]:
    """Put ``make(grpc's originals, its Metadata class)`` in place where the gate allows; warn once of what differs."""
    _implementation.warn_if_unwanted_pure_python(stacklevel=3)
    _grpc.modules()  # before the lock: importing grpc under `run` patches it, from within this call
    with _lock:
        if _installed:
            return ()
        judged = verdicts()
        grpcs = {name: _grpc.current(name) for name in NAMES if judged[name].replaces}
        for name, replacement in make(grpcs, _grpc.metadata_class()).items():
            _installed[name] = (grpcs[name], replacement)
            setattr(*_grpc.owner(name), replacement)
    _recording.grpc_state("patch()")  # under compare: what the run is named may no longer hold
    if differing := [verdict for verdict in judged.values() if verdict.differs]:
        _implementation.warn(warning(differing, _grpc.version()), stacklevel=3)
    return tuple(grpcs)


def patch() -> tuple[str, ...]:
    """Put fastcommon's into grpc wherever grpc's own behave the same (the gate); return the names replaced."""
    return install()


def unpatch() -> tuple[str, ...]:
    """Put grpc's originals back where fastcommon's still are; return the names restored. Another library's later
    replacement stays, and grpc's original under it is kept for an unpatch() once fastcommon's is back: never lost."""
    with _lock:
        restored = tuple(name for name, (_, mine) in _installed.items() if _grpc.current(name) is mine)
        for name in restored:
            setattr(*_grpc.owner(name), _installed.pop(name)[0])
        _recording.grpc_state("unpatch()")
        return restored


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
