"""Which implementation fastcommon runs (the compiled module when it imports, else the pure reference), and
what it puts in place of grpc's own.

The one place the choice is made; the package, the gate, patching and the report all take it from here.
"""

import importlib
import importlib.machinery
import os
import types
import warnings
from typing import Any

from . import _environment, _registry, common


class FastcommonWarning(RuntimeWarning):
    """A compiled module that did not load, or a grpcio that fastcommon will not patch."""


FastcommonWarning.__module__ = "fastcommon"  # where users import it from


def _read_record(package_dir: str, name: str) -> str | None:
    try:
        with open(os.path.join(package_dir, name), encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return None


def _why_compiled_module_is_absent(name: str) -> tuple[str, bool]:
    """The reason the extension file of module ``name`` is missing, and whether the user should be warned."""
    package_dir = os.path.dirname(__file__)
    on_purpose = _read_record(package_dir, _environment.BUILT_WITHOUT_EXTENSIONS_FILE)
    if on_purpose is not None:
        return f"installed without extensions on purpose ({on_purpose})", False
    build_error = _read_record(package_dir, _environment.BUILD_ERROR_FILE)
    if build_error is not None:
        return f"the extension failed to build at install: {build_error}", True
    builds = sorted(f for f in os.listdir(package_dir) if f.startswith(f"{name}.") and f.endswith((".so", ".pyd")))
    if builds:
        return f"the extension was built for another Python ({', '.join(builds)})", True
    return "the extension is missing from the installation", True


class _ExtensionWithSource(importlib.machinery.ExtensionFileLoader):
    """A compiled module's loader, which also gives linecache the .pyx shipped beside it, for tracebacks."""

    def get_source(self, fullname: str) -> str | None:  # type: ignore[override]  # an extension has source here
        # Tracebacks name fastcommon/fast_metadata.pyx, say; linecache asks the frame's module loader for its lines
        # first, and the stock loader of an extension has none, so no line would be shown.
        pyx = fullname.rpartition(".")[2] + ".pyx"
        try:
            with open(os.path.join(os.path.dirname(self.path), pyx), encoding="utf-8") as file:
                return file.read()
        except OSError:
            return None


# The compiled modules: the conversions (the twin of common.py), grpc.aio's Metadata methods, the entry constructor
# (not built for the Limited API). All load, or none is used.
COMPILED = ("fast_common", "fast_metadata", "fast_entry")


def _load_compiled() -> tuple[dict[str, types.ModuleType], str | None, bool]:
    """The compiled modules by name ({} for pure Python), why they are not used (or None), and whether to warn."""
    if _environment.flag(_environment.PURE_PYTHON):
        return {}, f"forced by {_environment.PURE_PYTHON}={os.environ[_environment.PURE_PYTHON]}", False
    loaded: dict[str, types.ModuleType] = {}
    try:
        for name in COMPILED:
            if name != "fast_entry" or not loaded["fast_common"].LIMITED_API:
                loaded[name] = importlib.import_module(f"fastcommon.{name}")
    except ModuleNotFoundError as exc:
        if exc.name in {f"fastcommon.{name}" for name in COMPILED}:
            reason, warn = _why_compiled_module_is_absent(exc.name.rpartition(".")[2])
        else:
            reason, warn = f"the extension failed to import: {exc!r}", True
    except Exception as exc:  # a broken extension must never break `import fastcommon`
        reason, warn = f"the extension failed to import: {exc!r}", True
    else:
        for module in loaded.values():
            spec = module.__spec__
            if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader) and spec.origin:
                spec.loader = module.__loader__ = _ExtensionWithSource(spec.name, spec.origin)
        return loaded, None, False
    return {}, reason, warn


compiled, PURE_PYTHON_REASON, _unwanted = _load_compiled()
chosen = compiled.get("fast_common", common)  # the conversions fastcommon exports
IMPLEMENTATION = "cython" if compiled else "python"


def warn_if_unwanted_pure_python(stacklevel: int) -> None:
    """Once per process, where grpc is patched: a FastcommonWarning that the compiled module did not load (not when
    pure Python was asked for), so that neither `import fastcommon` nor `python -m fastcommon run` warns itself."""
    global _unwanted
    if _unwanted:
        _unwanted = False
        warnings.warn(f"fastcommon is running pure Python: {PURE_PYTHON_REASON}", FastcommonWarning, stacklevel + 1)


def unavailable(replaceable: _registry.Replaceable) -> str | None:
    """Why this implementation has no replacement for ``replaceable`` (grpc's own then stays, unwarned), or None."""
    if replaceable.kind == _registry.FUNCTION:
        return None
    if not compiled:
        return "fastcommon runs pure Python here, which does it no faster than grpc"
    if replaceable.kind == _registry.CLASS and "fast_entry" not in compiled:
        return "this build of fastcommon (the Limited API, abi3) does not build it: a tuple's layout is CPython's own"
    return None


def entry_builder(cls: Any, counter: int = -1) -> Any:
    """What builds grpc's metadata entries of class ``cls`` in its place, counting its calls at ``counter``."""
    return compiled["fast_entry"].MetadatumConstructor(cls, counter=counter)


def metadata_methods(originals: dict[str, Any], cls: Any, counted: bool = False) -> dict[str, Any]:
    """What replaces grpc's Metadata methods ``originals`` (by name), made together for ``cls``."""
    counters = {name: _registry.BY_NAME[name].counter for name in originals} if counted else None
    return dict(compiled["fast_metadata"].metadata_methods(originals, cls, counters=counters))


def calls() -> tuple[int, ...] | None:
    """The calls the compiled modules counted in this process, by counter; None in pure Python."""
    return tuple(map(sum, zip(*(module.calls() for module in compiled.values()), strict=True))) if compiled else None


def replacements(originals: dict[str, Any], metadata_class: Any, counted: bool = False) -> dict[str, Any]:
    """fastcommon's replacement for each of grpc's ``originals`` (by name); counting their calls where ``counted``."""
    replacing: dict[str, Any] = {}
    methods = {}
    for name, original in originals.items():
        replaceable = _registry.BY_NAME[name]
        if replaceable.kind == _registry.FUNCTION:
            replacing[name] = getattr(chosen.Counted(replaceable.counter) if counted else chosen, name)
        elif replaceable.kind == _registry.CLASS:
            replacing[name] = entry_builder(original, replaceable.counter if counted else -1)
        else:
            methods[name] = original
    if methods:
        replacing |= metadata_methods(methods, metadata_class, counted)
    return {name: replacing[name] for name in originals}
