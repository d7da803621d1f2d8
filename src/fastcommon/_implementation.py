"""The one place fastcommon's implementation is chosen (compiled, else common.py), and why, and what it puts in grpc."""

import importlib.machinery
import os
import sys
import types
import warnings
from typing import Any

from . import _environment, common
from ._registry import BY_NAME, CLASS, FUNCTION, HOOK, METADATA_KINDS


class FastcommonWarning(RuntimeWarning):
    """A compiled module that did not load, or a grpcio that fastcommon will not patch."""

    __module__ = "fastcommon"  # where users import it from


def warn(message: str, stacklevel: int) -> None:
    """warnings.warn(message, FastcommonWarning, stacklevel); where filters make it an exception (-W error), shown."""
    try:
        warnings.warn(message, FastcommonWarning, stacklevel + 1)
    except FastcommonWarning as warning:
        frame = sys._getframe()
        for _ in range(stacklevel):  # to the frame warnings.warn names (or the outermost, called from C)
            frame = frame.f_back or frame
        warnings.showwarning(warning, FastcommonWarning, frame.f_code.co_filename, frame.f_lineno)


# common.py's twin, the Metadata methods, the hooks, the entry constructor (not for the Limited API): all, or none.
COMPILED = ("fast_common", "fast_metadata", "fast_hooks", "fast_entry")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return None


def _why_absent(module: str) -> tuple[str, bool]:
    """Why the compiled ``module`` (fastcommon.NAME) is missing, and whether the user should be warned."""
    package_dir = os.path.dirname(__file__)
    if (on_purpose := _read(os.path.join(package_dir, _environment.BUILT_WITHOUT_EXTENSIONS_FILE))) is not None:
        return f"installed without extensions on purpose ({on_purpose.strip()})", False
    if (build_error := _read(os.path.join(package_dir, _environment.BUILD_ERROR_FILE))) is not None:
        return f"the extension failed to build at install: {build_error.strip()}", True
    prefix = module.rpartition(".")[2] + "."
    if builds := sorted(f for f in os.listdir(package_dir) if f.startswith(prefix) and f.endswith((".so", ".pyd"))):
        return f"the extension was built for another Python ({', '.join(builds)})", True
    return "the extension is missing from the installation", True


class _ExtensionWithSource(importlib.machinery.ExtensionFileLoader):
    """An extension's loader that gives linecache, for tracebacks, the .pyx shipped beside it (the stock has none)."""

    def get_source(self, fullname: str) -> str | None:  # type: ignore[override]  # an extension has source here
        return _read(os.path.join(os.path.dirname(self.path), fullname.rpartition(".")[2] + ".pyx"))


def _load_compiled() -> tuple[dict[str, types.ModuleType], str | None, bool]:
    """The compiled modules by name ({} for pure Python), why they are not used (or None), and whether to warn."""
    if _environment.flag(_environment.PURE_PYTHON):
        return {}, f"forced by {_environment.PURE_PYTHON}={os.environ[_environment.PURE_PYTHON]}", False
    loaded: dict[str, types.ModuleType] = {}
    try:
        for name in COMPILED:
            if name != "fast_entry" or not loaded["fast_common"].LIMITED_API:
                loaded[name] = importlib.import_module(f"fastcommon.{name}")
    except Exception as exc:  # a broken extension must never break `import fastcommon`
        if isinstance(exc, ModuleNotFoundError) and exc.name in {f"fastcommon.{name}" for name in COMPILED}:
            return {}, *_why_absent(exc.name)
        return {}, f"the extension failed to import: {exc!r}", True
    for module in loaded.values():
        spec = module.__spec__
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader) and spec.origin:
            spec.loader = module.__loader__ = _ExtensionWithSource(spec.name, spec.origin)
    return loaded, None, False


compiled, PURE_PYTHON_REASON, _unwanted = _load_compiled()
chosen = compiled.get("fast_common", common)  # the conversions fastcommon exports
IMPLEMENTATION = "cython" if compiled else "python"


def warn_if_unwanted_pure_python(stacklevel: int) -> None:
    """Warn once, where grpc is patched (not at import, nor in `run` itself), that pure Python runs unasked-for."""
    global _unwanted
    if _unwanted:
        _unwanted = False
        warn(f"fastcommon is running pure Python: {PURE_PYTHON_REASON}", stacklevel + 1)


def calls() -> tuple[int, ...] | None:
    """The calls the compiled modules counted in this process, by counter; None in pure Python."""
    return tuple(map(sum, zip(*(module.calls() for module in compiled.values()), strict=True))) if compiled else None


def replacements(originals: dict[str, Any], metadata_class: Any, counted: bool = False) -> dict[str, Any]:
    """fastcommon's replacement for each of grpc's ``originals`` (by name); counting their calls where ``counted``."""
    counters = {name: BY_NAME[name].counter if counted else -1 for name in originals}
    replacing: dict[str, Any] = {}
    if methods := {name: original for name, original in originals.items() if BY_NAME[name].kind in METADATA_KINDS}:
        replacing |= compiled["fast_metadata"].metadata_methods(methods, metadata_class, counters=counters)
    if hooks := {name: original for name, original in originals.items() if BY_NAME[name].kind == HOOK}:
        replacing |= compiled["fast_hooks"].hooks(hooks, counters=counters)
    for name, original in originals.items():
        if BY_NAME[name].kind == FUNCTION:
            replacing[name] = getattr(chosen.Counted(counters[name]) if counted else chosen, name)
        elif BY_NAME[name].kind == CLASS:  # grpc's metadata entries, built in its class's place
            replacing[name] = compiled["fast_entry"].MetadatumConstructor(original, counter=counters[name])
    return {name: replacing[name] for name in originals}
