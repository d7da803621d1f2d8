"""Type stub for grpc.aio's Metadata methods and _init_metadata, compiled."""

from collections.abc import Iterator, Mapping
from typing import Any, final

def metadata_methods(
    originals: Mapping[str, Any], cls: type, /, *, counters: Mapping[str, int] | None = None
) -> dict[str, Any]: ...

@final
class MetadataIterator(Iterator[tuple[Any, Any]]):
    def __next__(self) -> tuple[Any, Any]: ...

def calls() -> tuple[int, ...]: ...
