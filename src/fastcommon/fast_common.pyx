# cython: language_level=3, binding=False, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
# binding=False and always_allow_keywords=False make encode/decode plain builtin
# METH_O functions, the calls CPython 3.11+ specializes (CALL_BUILTIN_O).
"""Compiled twin of fastcommon.common: the same four functions, exact str/bytes on the C-API route."""

import logging

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_CheckExact, PyUnicode_DecodeUTF8

cdef object _LOGGER = logging.getLogger("grpc._common")


def encode(s, /):
    """Return bytes as they are; encode anything else with its ``encode("utf8")``."""
    if PyUnicode_CheckExact(s):
        return PyUnicode_AsUTF8String(s)
    if PyBytes_Check(s):
        return s
    # str subclasses and duck types: call their own encode, as grpc does.
    return s.encode("utf8")


def decode(b, /):
    """Decode bytes as UTF-8, replacing invalid sequences; return anything else as it is."""
    if PyBytes_CheckExact(b):
        return PyUnicode_DecodeUTF8(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), "replace")
    if PyBytes_Check(b):
        # bytes subclasses: call their own decode, as grpc does.
        return b.decode("utf-8", "replace")
    return b


cdef object _transform(object message, object transformer, str exception_message):
    if transformer is None:
        return message
    try:
        return transformer(message)
    except Exception:
        _LOGGER.exception(exception_message)
        return None


def serialize(message, serializer, /):
    """Apply ``serializer`` to ``message``; on an Exception log it on ``grpc._common`` and return None."""
    return _transform(message, serializer, "Exception serializing message!")


def deserialize(serialized_message, deserializer, /):
    """Apply ``deserializer`` to the bytes; on an Exception log it on ``grpc._common`` and return None."""
    return _transform(serialized_message, deserializer, "Exception deserializing message!")
