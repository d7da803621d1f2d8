"""Which implementation fastcommon runs (the compiled module when it imports, else the pure reference), and
what it puts in place of grpc's own.

The one place the choice is made; the package, the gate, patching and the report all take it from here.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import types
import warnings
from typing import Any

from . import _registry, common

# Written by setup.py into the package: the extension failed to compile, or was not wanted.
_BUILD_ERROR_FILE = "_extension_build_error.txt"
_BUILT_WITHOUT_EXTENSIONS_FILE = "_built_without_extensions.txt"


class FastcommonWarning(RuntimeWarning):
    """A compiled module that did not load, or a grpcio that fastcommon will not patch."""


FastcommonWarning.__module__ = "fastcommon"  # where users import it from


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _read_record(package_dir: str, name: str) -> str | None:
    try:
        with open(os.path.join(package_dir, name), encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return None


def _why_compiled_module_is_absent() -> tuple[str, bool]:
    """The reason the extension file is missing, and whether the user should be warned."""
    package_dir = os.path.dirname(__file__)
    on_purpose = _read_record(package_dir, _BUILT_WITHOUT_EXTENSIONS_FILE)
    if on_purpose is not None:
        return f"installed without extensions on purpose ({on_purpose})", False
    build_error = _read_record(package_dir, _BUILD_ERROR_FILE)
    if build_error is not None:
        return f"the extension failed to build at install: {build_error}", True
    builds = sorted(f for f in os.listdir(package_dir) if f.startswith("fast_common.") and f.endswith((".so", ".pyd")))
    if builds:
        return f"the extension was built for another Python ({', '.join(builds)})", True
    return "the extension is missing from the installation", True


class _ExtensionWithSource(importlib.machinery.ExtensionFileLoader):
    """The compiled module's loader, which also gives linecache the .pyx shipped beside it, for tracebacks."""

    def get_source(self, fullname: str) -> str | None:  # type: ignore[override]  # an extension has source here
        # Tracebacks name fastcommon/fast_common.pyx; linecache asks the frame's module loader for its lines
        # first, and the stock loader of an extension has none, so no line would be shown.
        try:
            with open(os.path.join(os.path.dirname(self.path), "fast_common.pyx"), encoding="utf-8") as file:
                return file.read()
        except OSError:
            return None


def _load_implementation() -> tuple[types.ModuleType, str | None, bool]:
    """Return the module to use, why it is the pure one (or None), and whether that is news to warn of."""
    if _env_flag("FASTCOMMON_PURE_PYTHON"):
        return common, f"forced by FASTCOMMON_PURE_PYTHON={os.environ['FASTCOMMON_PURE_PYTHON']}", False
    try:
        fast_common = importlib.import_module("fastcommon.fast_common")
    except ModuleNotFoundError as exc:
        if exc.name != "fastcommon.fast_common":
            reason, warn = f"the extension failed to import: {exc!r}", True
        else:
            reason, warn = _why_compiled_module_is_absent()
    except Exception as exc:  # a broken extension must never break `import fastcommon`
        reason, warn = f"the extension failed to import: {exc!r}", True
    else:
        spec = fast_common.__spec__
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader) and spec.origin:
            spec.loader = fast_common.__loader__ = _ExtensionWithSource(spec.name, spec.origin)
        return fast_common, None, False
    return common, reason, warn


chosen, PURE_PYTHON_REASON, _unwanted = _load_implementation()
IMPLEMENTATION = "python" if chosen is common else "cython"


def warn_if_unwanted_pure_python(stacklevel: int) -> None:
    """Once per process, where grpc is patched: a FastcommonWarning that the compiled module did not load (not when
    pure Python was asked for), so that neither `import fastcommon` nor `python -m fastcommon run` warns itself."""
    global _unwanted
    if _unwanted:
        _unwanted = False
        warnings.warn(f"fastcommon is running pure Python: {PURE_PYTHON_REASON}", FastcommonWarning, stacklevel + 1)


def unoffered(replaceable: _registry.Replaceable) -> str | None:
    """Why this implementation has nothing to put in place of ``replaceable`` (grpc's own then stays, unwarned)."""
    if replaceable.kind == _registry.FUNCTION:
        return None
    if chosen is common:
        return "fastcommon runs pure Python here, which does it no faster than grpc"
    if replaceable.kind == _registry.CLASS and not hasattr(chosen, "MetadatumConstructor"):
        return "this build of fastcommon (the Limited API, abi3) does not build it: a tuple's layout is CPython's own"
    return None


def metadatum_builder(cls: Any, counter: int = -1) -> Any:
    """What builds grpc's metadata entries of class ``cls`` in its place, counting its calls at ``counter``."""
    return chosen.MetadatumConstructor(cls, counter=counter)


def metadata_methods(owns: dict[str, Any], cls: Any, counted: bool = False) -> dict[str, Any]:
    """What replaces grpc's own Metadata methods ``owns`` (by name), made together for ``cls``."""
    counters = {name: _registry.BY_NAME[name].counter for name in owns} if counted else None
    return dict(chosen.metadata_methods(owns, cls, counters=counters))


def replacements(owns: dict[str, Any], metadata_class: Any, counted: bool = False) -> dict[str, Any]:
    """What replaces each of grpc's own objects ``owns`` (by name); counting their calls in C where ``counted``."""
    made: dict[str, Any] = {}
    methods = {}
    for name, own in owns.items():
        replaceable = _registry.BY_NAME[name]
        if replaceable.kind == _registry.FUNCTION:
            made[name] = getattr(chosen.Counted(replaceable.counter) if counted else chosen, name)
        elif replaceable.kind == _registry.CLASS:
            made[name] = metadatum_builder(own, replaceable.counter if counted else -1)
        else:
            methods[name] = own
    if methods:
        made |= metadata_methods(methods, metadata_class, counted)
    return {name: made[name] for name in owns}
