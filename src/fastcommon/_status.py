"""What `python -m fastcommon`, `check` and .ci/next-grpcio's watch say: the installation, grpcio and the verdicts."""

import platform
import sys

from . import __version__, _gate, _grpc, _implementation, _patching, _verdict
from ._registry import BY_NAME, HOMES, NAMES, TESTED_GRPCIO


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
    name_col, home_col = max(map(len, NAMES)), max(map(len, HOMES))  # the widths of the columns: names, their homes
    for name, verdict in _gate.assess(originals).items():
        found = _gate.fingerprint_of(originals[name])  # None for a class, which has no code
        does = next(what for holds, what in [
            (_patching.is_patched(name), "fastcommon's, patched in this process"),
            (not verdict.replaces, f"patch() leaves grpc's own: {verdict.reason}"),
            (not _implementation.compiled, "patch() replaces it, which buys nothing: fastcommon runs pure Python here"),
            (True, "patch() replaces it")] if holds)  # fmt: skip
        lines.append(f"{name:<{name_col}}  in {BY_NAME[name].home:<{home_col}}  fingerprint {found or '-':<8}  {does}")
    return lines


def check() -> tuple[int, list[str]]:
    """0 when patch() gives grpc everything fastcommon offers, compiled; else 1; and a line for each reason."""
    try:
        verdicts = _patching.verdicts().values()
    except ImportError as exc:
        return 1, [f"fastcommon check: {exc}"]
    grpcio = _grpc.version()
    problems = [f"{v.name} (in {BY_NAME[v.name].home}) stays grpc's: {v.reason}" for v in verdicts if v.differs]
    if problems:
        problems.append(f"(grpcio {grpcio}; {_verdict.RAN_AGAINST})")
    if _implementation.PURE_PYTHON_REASON:
        problems.insert(0, f"fastcommon runs pure Python, which buys nothing: {_implementation.PURE_PYTHON_REASON}")
    if not problems:
        replaced = ", ".join(v.name for v in verdicts if v.replaces)
        return 0, [f"fastcommon check: patch() replaces {replaced} on grpcio {grpcio}"]
    return 1, [f"fastcommon check: {line}" for line in problems]


def watch() -> tuple[int, list[str]]:
    """What of the installed grpcio the gate does not know (1), or that it knows all of it (0): .ci/next-grpcio."""
    unknown = _gate.unknown(_patching.originals())
    grpcio = _grpc.version()
    lines = [f"{name} in {BY_NAME[name].home}: {what}" for name, what in unknown.items()]
    lines += [] if unknown else [f"none: the gate knows all of grpcio {grpcio}"]
    if grpcio not in TESTED_GRPCIO:
        lines.append(f"grpcio {grpcio} is not yet among the releases the suite ran against: once it passes, add it "
                     "to the releases of its fingerprints in src/fastcommon/_registry.py")  # fmt: skip
    return (1 if unknown else 0), lines
