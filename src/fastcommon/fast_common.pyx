# cython: language_level=3, binding=False, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
# binding=False and always_allow_keywords=False make the functions plain builtins; encode and
# decode are METH_O, the calls CPython 3.11+ specializes (CALL_BUILTIN_O).
"""Compiled twin of fastcommon.common: the same four functions, exact str/bytes on the C-API route.

Also MetadatumConstructor, whose instances build grpc's metadata entries directly (its C is in
fast_common.h), and counted twins of all five for ``python -m fastcommon run --report``: the same code
with a C counter in front, no Python frame.
"""

import logging

from cpython.bytes cimport PyBytes_Check, PyBytes_CheckExact
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_CheckExact, PyUnicode_DecodeUTF8

cdef extern from "fast_common.h":
    char *fastcommon_bytes_data(object)
    Py_ssize_t fastcommon_bytes_size(object)
    unsigned long long fastcommon_calls[5]
    bint FASTCOMMON_HAS_METADATUM
    bint FASTCOMMON_LIMITED_API
    object fastcommon_constructor_type()

cdef object _LOGGER = logging.getLogger("grpc._common")

COUNTED = ("encode", "decode", "serialize", "deserialize", "_Metadatum")
LIMITED_API = FASTCOMMON_LIMITED_API  # built for the Limited API: the abi3 wheel, for CPythons newer than fastcommon


cdef inline object _encode(object s):
    if PyUnicode_CheckExact(s):
        return PyUnicode_AsUTF8String(s)
    if PyBytes_Check(s):
        return s
    # str subclasses and duck types: call their own encode, as grpc does.
    return s.encode("utf8")


cdef inline object _decode(object b):
    if PyBytes_CheckExact(b):
        return PyUnicode_DecodeUTF8(fastcommon_bytes_data(b), fastcommon_bytes_size(b), "replace")
    if PyBytes_Check(b):
        # bytes subclasses: call their own decode, as grpc does.
        return b.decode("utf-8", "replace")
    return b


cdef inline object _transform(object message, object transformer, str exception_message):
    if transformer is None:
        return message
    try:
        return transformer(message)
    except Exception:
        _LOGGER.exception(exception_message)
        return None


def encode(s, /):
    """Return bytes as they are; encode anything else with its ``encode("utf8")``."""
    return _encode(s)


def decode(b, /):
    """Decode bytes as UTF-8, replacing invalid sequences; return anything else as it is."""
    return _decode(b)


def serialize(message, serializer, /):
    """Apply ``serializer`` to ``message``; on an Exception log it on ``grpc._common`` and return None."""
    return _transform(message, serializer, "Exception serializing message!")


def deserialize(serialized_message, deserializer, /):
    """Apply ``deserializer`` to the bytes; on an Exception log it on ``grpc._common`` and return None."""
    return _transform(serialized_message, deserializer, "Exception deserializing message!")


def counted_encode(s, /):
    """encode, counted."""
    fastcommon_calls[0] += 1
    return _encode(s)


def counted_decode(b, /):
    """decode, counted."""
    fastcommon_calls[1] += 1
    return _decode(b)


def counted_serialize(message, serializer, /):
    """serialize, counted."""
    fastcommon_calls[2] += 1
    return _transform(message, serializer, "Exception serializing message!")


def counted_deserialize(serialized_message, deserializer, /):
    """deserialize, counted."""
    fastcommon_calls[3] += 1
    return _transform(serialized_message, deserializer, "Exception deserializing message!")


def calls():
    """The calls made through the counted twins in this process (and its parent, before a fork), by name."""
    return {name: fastcommon_calls[i] for i, name in enumerate(COUNTED)}


if FASTCOMMON_HAS_METADATUM:  # not in a Limited API (abi3) build: a tuple's layout is CPython's own
    MetadatumConstructor = fastcommon_constructor_type()
