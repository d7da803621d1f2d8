"""The gate's verdict on one name, the warning that tells it, and the watch's line for an unknown fingerprint."""

import dataclasses
from collections.abc import Iterable

from ._registry import BY_NAME, TESTED_GRPCIO


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether patch() replaces ``name``, or why not: it ``differs`` from grpc's, or none is ``available`` here."""

    name: str
    reason: str | None = None  # None: patch() replaces it
    available: bool = True

    @property
    def replaces(self) -> bool:
        return self.reason is None

    @property
    def differs(self) -> bool:
        return self.reason is not None and self.available


TESTED = ", ".join(TESTED_GRPCIO)  # as the status names them
RAN_AGAINST = f"fastcommon's suite ran against grpcio {TESTED}"  # as the warning and check say it


def warning(differing: Iterable[Verdict], grpcio: str) -> str:
    """The one FastcommonWarning of a patch() that leaves names to grpc."""
    left = "; ".join(f"{verdict.name} in {BY_NAME[verdict.name].home} ({verdict.reason})" for verdict in differing)
    return f"fastcommon leaves {left} to grpc on grpcio {grpcio}; {RAN_AGAINST} (python -m fastcommon check)"


def unknown_fingerprint(name: str, fingerprint: str | None, grpcio: str) -> str:
    """What .ci/next-grpcio prints for a fingerprint the suite has not run against: the line to add."""
    return f'"{fingerprint}": ("{grpcio}",),  # in the fingerprints of {name} in src/fastcommon/_registry.py'
