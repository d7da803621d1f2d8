"""Which implementation fastcommon runs: the compiled module when it imports, else the pure reference.

The one place the choice is made; the package, patching and adoption all import it from here.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import types
import warnings

from . import common

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


def _load_implementation() -> tuple[types.ModuleType, str | None]:
    """Return the module to use and, when it is the pure one, why."""
    if _env_flag("FASTCOMMON_PURE_PYTHON"):
        return common, f"forced by FASTCOMMON_PURE_PYTHON={os.environ['FASTCOMMON_PURE_PYTHON']}"
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
        return fast_common, None
    if warn:
        warnings.warn(f"fastcommon is running pure Python: {reason}", FastcommonWarning, stacklevel=3)
    return common, reason


chosen, PURE_PYTHON_REASON = _load_implementation()
IMPLEMENTATION = "python" if chosen is common else "cython"
