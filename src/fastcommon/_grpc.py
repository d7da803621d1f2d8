"""Where grpc keeps what fastcommon may replace: its modules, the object that holds each name, and what is there."""

import functools
import importlib
import sys
import types
from typing import Any

from ._registry import BY_NAME, HOMES, METHOD, of_kind


def modules() -> dict[str, types.ModuleType]:
    """The grpc modules fastcommon patches, by name, imported; an ImportError that says so without grpcio."""
    try:
        return {home: importlib.import_module(home) for home in HOMES}
    except ImportError as exc:
        raise ImportError("fastcommon.patch() needs grpcio, which is not installed: pip install grpcio") from exc


def owner(name: str) -> tuple[Any, str]:
    """The object whose own __dict__ holds ``name`` (a module, a class), and the key there."""
    *path, attribute = name.split(".")
    return functools.reduce(getattr, path, modules()[BY_NAME[name].home]), attribute


def current(name: str) -> Any:
    """What grpc holds under ``name`` now, as its owner's own __dict__ has it (a classmethod, say); or None."""
    found, attribute = owner(name)
    return vars(found).get(attribute)


def metadata_class() -> Any:
    """grpc.aio's Metadata: the class that holds the methods fastcommon may replace."""
    return owner(of_kind(METHOD)[0].name)[0]


def version() -> str:
    """The installed grpcio's version, once grpc is imported."""
    return str(getattr(sys.modules.get("grpc"), "__version__", "unknown"))
