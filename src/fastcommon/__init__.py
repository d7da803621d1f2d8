"""fastcommon: grpc._common's str/bytes conversions and (de)serialization wrappers, compiled.

    import fastcommon
    fastcommon.patch()   # grpc now converts through fastcommon

``encode``, ``decode``, ``serialize`` and ``deserialize`` come from the compiled
module when it imports, else from the pure-Python reference ``fastcommon.common``;
``IMPLEMENTATION`` says which actually loaded ("cython" or "python") and
``PURE_PYTHON_REASON`` why it is pure Python (None when it is not).
"""

import contextlib
import importlib
import logging
import os
import sys
import threading
import warnings

from . import common

__version__ = "0.1.0"

__all__ = [
    "IMPLEMENTATION",
    "PURE_PYTHON_REASON",
    "FastcommonWarning",
    "decode",
    "deserialize",
    "encode",
    "is_patched",
    "patch",
    "patched",
    "serialize",
    "unpatch",
]

# Written by setup.py into the package: the extension failed to compile, or was not wanted.
_BUILD_ERROR_FILE = "_extension_build_error.txt"
_BUILT_WITHOUT_EXTENSIONS_FILE = "_built_without_extensions.txt"


class FastcommonWarning(RuntimeWarning):
    """A compiled module that did not load, or a grpcio that fastcommon will not patch."""


def _env_flag(name):
    return os.environ.get(name, "") not in ("", "0")


def _read_record(package_dir, name):
    try:
        with open(os.path.join(package_dir, name), encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return None


def _why_compiled_module_is_absent():
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


def _load_implementation():
    """Return the module to use and, when it is the pure one, why."""
    if _env_flag("FASTCOMMON_PURE_PYTHON"):
        return common, f"forced by FASTCOMMON_PURE_PYTHON={os.environ['FASTCOMMON_PURE_PYTHON']}"
    try:
        fast_common = importlib.import_module(f"{__name__}.fast_common")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.fast_common":
            reason, warn = f"the extension failed to import: {exc!r}", True
        else:
            reason, warn = _why_compiled_module_is_absent()
    except Exception as exc:  # a broken extension must never break `import fastcommon`
        reason, warn = f"the extension failed to import: {exc!r}", True
    else:
        return fast_common, None
    if warn:
        warnings.warn(f"fastcommon is running pure Python: {reason}", FastcommonWarning, stacklevel=3)
    return common, reason


_implementation, PURE_PYTHON_REASON = _load_implementation()
IMPLEMENTATION = "python" if _implementation is common else "cython"

encode = _implementation.encode
decode = _implementation.decode
serialize = _implementation.serialize
deserialize = _implementation.deserialize

# ---------------------------------------------------------------- patching grpc

_PATCHED_NAMES = ("encode", "decode", "serialize", "deserialize")
_originals = {}  # name -> grpc's own function, while patched
_patch_lock = threading.Lock()


class _ProbeError(Exception):
    """Raised by the probe serializer; its log records are kept out of the user's logs."""


def _raise_probe_error(message):
    raise _ProbeError(message)


# Calls on which grpc's originals must behave as the reference before we replace them.
_PROBES = (
    ("encode", ("/grpc.testing.BenchmarkService/UnaryCall",)),
    ("encode", (b"\xff already bytes",)),
    ("encode", ("h\xe9llo \U0001f600\x00",)),
    ("encode", ("\ud800",)),
    ("encode", (None,)),
    ("decode", (b"/grpc.testing.BenchmarkService/UnaryCall",)),
    ("decode", (b"\xff\xfeh\xc3\xa9\xe2\x82",)),
    ("decode", ("already str",)),
    ("decode", (None,)),
    ("serialize", ("message", None)),
    ("serialize", ("message", str.upper)),
    ("serialize", ("message", _raise_probe_error)),
    ("deserialize", (b"message", None)),
    ("deserialize", (b"message", bytes.upper)),
    ("deserialize", (b"message", _raise_probe_error)),
)


class _ProbeLogCapture(logging.Filter):
    def __init__(self):
        super().__init__()
        self.records = []

    def filter(self, record):
        if record.exc_info and isinstance(record.exc_info[1], _ProbeError):
            self.records.append((record.levelno, record.getMessage()))
            return False
        return True


def _outcome(function, args):
    """What one call does: its result, type and identity, or its exception; and its log records."""
    logger = logging.getLogger("grpc._common")
    capture = _ProbeLogCapture()
    logger.addFilter(capture)
    try:
        result = function(*args)
    except Exception as exc:
        return "raised", type(exc), str(exc), capture.records
    finally:
        logger.removeFilter(capture)
    return "returned", type(result), result, result is args[0], capture.records


def _first_mismatch(grpc_common):
    """The name of the first grpc._common function that differs from the reference, or None."""
    for name, args in _PROBES:
        if _outcome(getattr(grpc_common, name), args) != _outcome(getattr(common, name), args):
            return name
    return None


def _grpc_common():
    try:
        from grpc import _common
    except ImportError as exc:
        raise ImportError("fastcommon.patch() needs grpcio, which is not installed: pip install grpcio") from exc
    return _common


def patch():
    """Replace grpc._common's encode, decode, serialize, deserialize with fastcommon's; return the names replaced."""
    grpc_common = _grpc_common()
    with _patch_lock:
        if _originals:
            return ()
        mismatch = _first_mismatch(grpc_common)
        if mismatch is not None:
            version = getattr(sys.modules["grpc"], "__version__", "unknown")
            warnings.warn(
                f"fastcommon did not patch grpc: grpc._common.{mismatch} of grpcio {version} "
                "does not behave as fastcommon's reference",
                FastcommonWarning,
                stacklevel=2,
            )
            return ()
        for name in _PATCHED_NAMES:
            _originals[name] = getattr(grpc_common, name)
            setattr(grpc_common, name, getattr(_implementation, name))
        return _PATCHED_NAMES


def unpatch():
    """Put grpc._common's original functions back; return the names restored."""
    with _patch_lock:
        if not _originals:
            return ()
        grpc_common = sys.modules["grpc._common"]
        for name, original in _originals.items():
            setattr(grpc_common, name, original)
        _originals.clear()
        return _PATCHED_NAMES


def is_patched():
    """Tell whether fastcommon's functions are installed in grpc._common."""
    return bool(_originals)


@contextlib.contextmanager
def patched():
    """Patch grpc for the duration of a ``with`` block; undo only what this block did."""
    replaced = patch()
    try:
        yield replaced
    finally:
        if replaced:
            unpatch()
