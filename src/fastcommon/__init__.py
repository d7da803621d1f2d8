"""fastcommon: grpc._common's str/bytes conversions and (de)serialization wrappers, compiled.

    import fastcommon
    fastcommon.patch()   # grpc now converts through fastcommon

encode, decode, serialize and deserialize come from the compiled module when it imports,
else from the pure-Python reference fastcommon.common; IMPLEMENTATION says which actually
loaded ("cython" or "python") and PURE_PYTHON_REASON why it is pure Python (None when it is not).
"""

__version__ = "0.1.0"

from ._implementation import IMPLEMENTATION, PURE_PYTHON_REASON, FastcommonWarning, chosen
from ._patching import is_patched, patch, patched, unpatch

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

encode = chosen.encode
decode = chosen.decode
serialize = chosen.serialize
deserialize = chosen.deserialize
