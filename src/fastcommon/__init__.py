"""fastcommon's public API: grpc._common's str/bytes conversions and (de)serialization wrappers, compiled, and
fastcommon.patch(), which puts them into grpc. IMPLEMENTATION says which loaded ("cython" or "python"),
PURE_PYTHON_REASON why it is pure Python (None when it is not)."""

__version__ = "0.1.0"

from ._implementation import IMPLEMENTATION, PURE_PYTHON_REASON, FastcommonWarning, chosen
from ._patching import is_patched, patch, patched, unpatch

__all__ = ["IMPLEMENTATION", "PURE_PYTHON_REASON", "FastcommonWarning", "decode", "deserialize", "encode",
           "is_patched", "patch", "patched", "serialize", "unpatch"]  # fmt: skip

encode, decode, serialize, deserialize = chosen.encode, chosen.decode, chosen.serialize, chosen.deserialize
