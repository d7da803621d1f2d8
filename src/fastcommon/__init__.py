"""fastcommon's public API: grpc._common's conversions and (de)serialization wrappers, compiled; patch() puts them into
grpc; IMPLEMENTATION ("cython", "python") and PURE_PYTHON_REASON (or None) say which loaded and why. Each loads at first
use (PEP 562): `import fastcommon` loads no compiled module, gate or grpc."""

__version__ = "0.1.0"

__all__ = ["IMPLEMENTATION", "PURE_PYTHON_REASON", "FastcommonWarning", "decode", "deserialize", "encode",
           "is_patched", "patch", "patched", "serialize", "unpatch"]  # fmt: skip

_SUBMODULES = ("common", "fast_common")
TYPE_CHECKING = False  # typing's own costs an import
if TYPE_CHECKING:
    from ._implementation import IMPLEMENTATION, PURE_PYTHON_REASON, FastcommonWarning
    from ._patching import is_patched, patch, patched, unpatch
    from .common import decode, deserialize, encode, serialize
else:  # a type checker sees the names above, and no __getattr__ that would answer for any other

    def __getattr__(name: str) -> object:
        """The export ``name``, loaded with the others at first use; or the submodule ``name`` (common, fast_common)."""
        if name in _SUBMODULES:
            from importlib import import_module

            return import_module(f"{__name__}.{name}")
        if name not in __all__:
            raise AttributeError(f"module 'fastcommon' has no attribute {name!r}")
        from . import _implementation, _patching

        # Each export from its home: _implementation, _patching (patch() and its kin), the chosen one (the conversions)
        homes = vars(_implementation) | vars(_patching) | vars(_implementation.chosen)
        globals().update({each: homes[each] for each in __all__})
        return globals()[name]


def __dir__() -> list[str]:
    """The module's names, the exports not loaded yet among them (tab completion lists them)."""
    return sorted({*globals(), *__all__})


del TYPE_CHECKING  # not a name of fastcommon's
