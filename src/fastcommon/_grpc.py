"""Where grpc keeps what fastcommon may replace: its modules, and the object that holds each name."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from ._registry import BY_NAME, HOMES, METHOD, of_kind

Modules = dict[str, types.ModuleType]


def modules() -> Modules:
    """The grpc modules fastcommon patches, by name, imported; an ImportError that says so without grpcio."""
    try:
        return {home: importlib.import_module(home) for home in HOMES}
    except ImportError as exc:
        raise ImportError("fastcommon.patch() needs grpcio, which is not installed: pip install grpcio") from exc


def holder(name: str, found: Modules) -> tuple[Any, str]:
    """The object whose own __dict__ holds ``name`` (a module, a class), and the key there."""
    *path, attribute = name.split(".")
    owner: Any = found[BY_NAME[name].home]
    for part in path:
        owner = getattr(owner, part)
    return owner, attribute


def held(name: str, found: Modules) -> Any:
    """What grpc holds under ``name`` now, as its holder's own __dict__ has it (a classmethod, say); or None."""
    owner, attribute = holder(name, found)
    return vars(owner).get(attribute)


def metadata_class(found: Modules) -> Any:
    """grpc.aio's Metadata: the class that holds the methods fastcommon may replace."""
    return holder(of_kind(METHOD)[0].name, found)[0]


def version() -> str:
    """The installed grpcio's version, once grpc is imported."""
    return str(getattr(sys.modules.get("grpc"), "__version__", "unknown"))
