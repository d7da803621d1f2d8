# cython: language_level=3, binding=False, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
# binding=False, always_allow_keywords=False: plain builtins; encode, decode METH_O (3.11+ specializes CALL_BUILTIN_O).
"""Compiled twin of fastcommon.common: the same four functions, exact str/bytes on the C-API route; and their counted
twins for ``python -m fastcommon run --report``, the same code with a C counter in front (no Python frame)."""

cimport cython
from cpython.bytes cimport PyBytes_CheckExact
from cpython.object cimport PyObject_IsInstance
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_CheckExact, PyUnicode_DecodeUTF8

from fastcommon.counters cimport counted_calls, fastcommon_check_counter, fastcommon_counter_at, fastcommon_increment

cdef extern from "compat.h":
    bint FASTCOMMON_LIMITED_API
    char *fastcommon_bytes_data(object)
    Py_ssize_t fastcommon_bytes_size(object)

LIMITED_API = FASTCOMMON_LIMITED_API  # built for the Limited API: the abi3 wheel, for CPythons newer than fastcommon

try:  # now, so that a failing call imports nothing (at shutdown, say); absent where this module is imported alone
    from fastcommon.common import logger as _logger
except ImportError:
    _logger = None


# grpc asks isinstance(x, bytes), which honours a __class__ that says bytes (mock's spec=bytes): exact str or bytes
# cannot; anything else is asked so (PyObject_IsInstance: Cython's isinstance checks the type alone).

cdef inline object _encode(object s):
    if PyUnicode_CheckExact(s):
        return PyUnicode_AsUTF8String(s)
    if PyBytes_CheckExact(s) or PyObject_IsInstance(s, bytes):
        return s
    return s.encode("utf8")  # str subclasses and duck types: their own encode, as grpc calls it


cdef inline object _decode(object b):
    if PyBytes_CheckExact(b):
        return PyUnicode_DecodeUTF8(fastcommon_bytes_data(b), fastcommon_bytes_size(b), "replace")
    if PyUnicode_CheckExact(b) or not PyObject_IsInstance(b, bytes):
        return b
    return b.decode("utf-8", "replace")  # bytes subclasses and what says it is bytes: their own decode


cdef inline object _transform(object message, object transformer, str exception_message):
    global _logger
    if transformer is None:
        return message
    try:
        return transformer(message)
    except Exception:
        if _logger is None:  # imported alone, as setup.py checks that it imports
            from fastcommon.common import logger as _logger
        _logger().exception(exception_message)  # grpc._common's _LOGGER at the call, or the gate's recorder
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


@cython.final
@cython.auto_pickle(False)
cdef class Counted:
    """Counted(counter): the four functions, each counting its calls at ``counter`` first (a builtin method)."""

    cdef readonly Py_ssize_t counter
    cdef unsigned long long *slot

    def __cinit__(self, Py_ssize_t counter, /):
        fastcommon_check_counter(counter, False)  # counts on every call, unchecked: checked here, once
        self.counter, self.slot = counter, fastcommon_counter_at(counter)

    def encode(self, s, /):
        """encode, counted."""
        fastcommon_increment(self.slot)
        return _encode(s)

    def decode(self, b, /):
        """decode, counted."""
        fastcommon_increment(self.slot)
        return _decode(b)

    def serialize(self, message, serializer, /):
        """serialize, counted."""
        fastcommon_increment(self.slot)
        return _transform(message, serializer, "Exception serializing message!")

    def deserialize(self, serialized_message, deserializer, /):
        """deserialize, counted."""
        fastcommon_increment(self.slot)
        return _transform(serialized_message, deserializer, "Exception deserializing message!")


def calls():
    """The calls this module counted in this process (and its parent, before a fork), by counter."""
    return counted_calls()
