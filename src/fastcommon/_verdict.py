"""The gate's verdict on one name, and every text that tells it: the warning, the status, check, the watch."""

import dataclasses
from collections.abc import Collection, Iterable

from ._registry import BY_NAME, HOMES, NAMES, TESTED_GRPCIO


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether patch() replaces ``name``; if not, why: grpc's own behaves otherwise (``differs``), or fastcommon has
    no replacement for it here (not ``available``: pure Python, an abi3 build, a grpcio without it)."""

    name: str
    reason: str | None = None  # None: patch() replaces it
    available: bool = True

    @property
    def replaces(self) -> bool:
        return self.reason is None

    @property
    def differs(self) -> bool:
        return self.reason is not None and self.available

    @property
    def home(self) -> str:
        return BY_NAME[self.name].home


TESTED = ", ".join(TESTED_GRPCIO)  # as the status names them
RAN_AGAINST = f"fastcommon's suite ran against grpcio {TESTED}"  # as the warning and check say it


def warning(differing: Iterable[Verdict], grpcio: str) -> str:
    """The one FastcommonWarning of a patch() that leaves names to grpc."""
    left = "; ".join(f"{verdict.name} in {verdict.home} ({verdict.reason})" for verdict in differing)
    return f"fastcommon leaves {left} to grpc on grpcio {grpcio}; {RAN_AGAINST} (python -m fastcommon check)"


def status_line(verdict: Verdict, fingerprint: str | None, patched: bool, pure: bool) -> str:
    """A line of `python -m fastcommon`: the name, its home, its fingerprint and what patch() does with it."""
    if patched:
        does = "fastcommon's, patched in this process"
    elif not verdict.replaces:
        does = f"patch() leaves grpc's own: {verdict.reason}"
    elif pure:
        does = "patch() replaces it, which buys nothing: fastcommon runs pure Python here"
    else:
        does = "patch() replaces it"
    name_width, home_width = max(map(len, NAMES)), max(map(len, HOMES))  # the columns of the names, of their homes
    return f"{verdict.name:<{name_width}}  in {verdict.home:<{home_width}}  fingerprint {fingerprint or '-':<8}  {does}"


def check_lines(verdicts: Collection[Verdict], grpcio: str, pure_reason: str | None) -> tuple[int, list[str]]:
    """`python -m fastcommon check`'s exit status (_status.check) and lines: each problem, or that all is replaced."""
    problems = [f"{v.name} (in {v.home}) stays grpc's: {v.reason}" for v in verdicts if v.differs]
    if problems:
        problems.append(f"(grpcio {grpcio}; {RAN_AGAINST})")
    if pure_reason:
        problems.insert(0, f"fastcommon runs pure Python, which buys nothing: {pure_reason}")
    if not problems:
        replaced = ", ".join(v.name for v in verdicts if v.replaces)
        return 0, [f"fastcommon check: patch() replaces {replaced} on grpcio {grpcio}"]
    return 1, [f"fastcommon check: {line}" for line in problems]


def unknown_fingerprint(name: str, fingerprint: str | None, grpcio: str) -> str:
    """What .ci/next-grpcio prints for a fingerprint the suite has not run against: the line to add."""
    return f'"{fingerprint}": ("{grpcio}",),  # in the fingerprints of {name} in src/fastcommon/_registry.py'


def watch_lines(unknown: dict[str, str], grpcio: str) -> list[str]:
    """What .ci/next-grpcio prints of the installed grpcio: what the gate does not know of it, or that it knows all."""
    lines = [f"{name} in {BY_NAME[name].home}: {what}" for name, what in unknown.items()]
    lines += [] if unknown else [f"none: the gate knows all of grpcio {grpcio}"]
    if grpcio not in TESTED_GRPCIO:
        lines.append(f"grpcio {grpcio} is not yet among the releases the suite ran against: once it passes, add it "
                     "to the releases of its fingerprints in src/fastcommon/_registry.py")  # fmt: skip
    return lines
