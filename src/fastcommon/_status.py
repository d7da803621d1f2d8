"""What `python -m fastcommon`, `check` and the watch of the next grpcio (.ci/next-grpcio) say: the installation,
grpcio, and the gate's verdict on each name, in the words of _verdict.py."""

import platform
import sys

from . import __version__, _gate, _grpc, _implementation, _patching, _verdict
from ._registry import BY_NAME, CLASS


def status() -> list[str]:
    """The version, the implementation and why, the Python and grpcio versions, and a status line per name."""
    lines = [f"fastcommon {__version__}", f"implementation: {_implementation.IMPLEMENTATION}"]
    if _implementation.PURE_PYTHON_REASON:
        lines.append(f"pure Python because: {_implementation.PURE_PYTHON_REASON}")
    elif _implementation.chosen.LIMITED_API:
        lines.append("build: abi3 (the Limited API), for CPythons newer than fastcommon's per-version wheels")
    lines.append(f"python: {platform.python_implementation()} {platform.python_version()} ({sys.executable})")
    try:
        originals = _patching.originals()
    except ImportError:
        return [*lines, "grpcio: not installed"]
    lines.append(f"grpcio: {_grpc.version()} (fastcommon's suite ran against {_verdict.TESTED})")
    for name, verdict in _gate.assess(originals).items():
        found = _gate.fingerprint_of(originals[name]) if BY_NAME[name].kind != CLASS else None  # a class has none
        lines.append(_verdict.status_line(verdict, found, _patching.is_patched(name), not _implementation.compiled))
    return lines


def check() -> tuple[int, list[str]]:
    """0 when patch() gives grpc everything fastcommon offers, compiled; else 1; and a line for each reason."""
    try:
        verdicts = _patching.verdicts()
    except ImportError as exc:
        return 1, [f"fastcommon check: {exc}"]
    return _verdict.check_lines(verdicts.values(), _grpc.version(), _implementation.PURE_PYTHON_REASON)


def watch() -> tuple[int, list[str]]:
    """What of the installed grpcio the gate does not know (1), or that it knows all of it (0): .ci/next-grpcio."""
    unknown = _gate.unknown(_patching.originals())
    return (1 if unknown else 0), _verdict.watch_lines(unknown, _grpc.version())
