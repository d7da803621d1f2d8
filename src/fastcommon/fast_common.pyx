# cython: language_level=3, binding=False, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
# binding=False and always_allow_keywords=False make the functions plain builtins; encode and
# decode are METH_O, the calls CPython 3.11+ specializes (CALL_BUILTIN_O).
"""Compiled twin of fastcommon.common: the same four functions, exact str/bytes on the C-API route.

Also grpc's metadata entry built directly (new_metadatum), and counted twins of all five for
``python -m fastcommon run --report``: the same code with a C counter in front, no Python frame.
"""

import logging

from cpython.bytes cimport PyBytes_Check, PyBytes_CheckExact
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_CheckExact, PyUnicode_DecodeUTF8

cdef extern from *:
    """
    /* The Limited API (the abi3 wheel) has the function forms of the bytes macros. */
    #if defined(Py_LIMITED_API)
    #define FASTCOMMON_LIMITED_API 1
    #define fastcommon_bytes_data PyBytes_AsString
    #define fastcommon_bytes_size PyBytes_Size
    #else
    #define FASTCOMMON_LIMITED_API 0
    #define fastcommon_bytes_data PyBytes_AS_STRING
    #define fastcommon_bytes_size PyBytes_GET_SIZE
    #endif

    /* Calls through the counted twins, in the order of COUNTED; copied into a fork child. */
    static unsigned long long fastcommon_calls[5];

    /* grpc's metadata entry class (grpc._cython.cygrpc._Metadatum), given when patching. Never
       released: a thread may be building an entry with it while another patches. */
    static PyObject *fastcommon_metadatum_class = NULL;

    static void fastcommon_set_metadatum_class(PyObject *cls) {
        if (cls != fastcommon_metadatum_class) {
            Py_INCREF(cls);
            fastcommon_metadatum_class = cls;
        }
    }

    #if defined(Py_LIMITED_API)
    /* A tuple's layout (3.14 added a hash cache to it) is not part of the Limited API, and the abi3
       wheel runs on CPythons newer than fastcommon: there the entry stays grpc's (no new_metadatum). */
    #define FASTCOMMON_HAS_METADATUM 0
    static PyMethodDef fastcommon_metadatum_defs[2] = {{NULL, NULL, 0, NULL}, {NULL, NULL, 0, NULL}};
    #else
    #define FASTCOMMON_HAS_METADATUM 1

    /* What namedtuple's __new__ does for _Metadatum(key, value): tuple.__new__(cls, (key, value)),
       which allocates with the class's tp_alloc and sets the items, without the Python frame and the
       two temporary tuples. Any other call goes to grpc's class itself, its errors included. */
    static PyObject *
    fastcommon_build_metadatum(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
    {
        PyTypeObject *cls = (PyTypeObject *)fastcommon_metadatum_class;
        if (cls == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "fastcommon: no metadata entry class was given");
            return NULL;
        }
        if (nargs != 2 || kwnames != NULL) {
            return PyObject_Vectorcall((PyObject *)cls, args, nargs, kwnames);
        }
        PyObject *self = cls->tp_alloc(cls, 2);
        if (self == NULL) {
            return NULL;
        }
        Py_INCREF(args[0]);
        PyTuple_SET_ITEM(self, 0, args[0]);
        Py_INCREF(args[1]);
        PyTuple_SET_ITEM(self, 1, args[1]);
    #if PY_VERSION_HEX >= 0x030E0000
        ((PyTupleObject *)self)->ob_hash = -1;  /* not computed yet, as tuple.__new__ leaves it */
    #endif
        return self;
    }

    static PyObject *
    fastcommon_new_metadatum(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
    {
        return fastcommon_build_metadatum(args, nargs, kwnames);
    }

    static PyObject *
    fastcommon_counted_new_metadatum(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
    {
        fastcommon_calls[4]++;
        return fastcommon_build_metadatum(args, nargs, kwnames);
    }

    static PyMethodDef fastcommon_metadatum_defs[2] = {
        {"new_metadatum", (PyCFunction)(void (*)(void))fastcommon_new_metadatum, METH_FASTCALL | METH_KEYWORDS,
         "new_metadatum(key, value, /)\\n--\\n\\n"
         "grpc's metadata entry _Metadatum(key, value), built directly; any other call goes to grpc's class."},
        {"counted_new_metadatum", (PyCFunction)(void (*)(void))fastcommon_counted_new_metadatum,
         METH_FASTCALL | METH_KEYWORDS,
         "counted_new_metadatum(key, value, /)\\n--\\n\\nnew_metadatum, counted."},
    };
    #endif
    """
    char *fastcommon_bytes_data(object)
    Py_ssize_t fastcommon_bytes_size(object)
    unsigned long long fastcommon_calls[5]
    void fastcommon_set_metadatum_class(object)
    bint FASTCOMMON_HAS_METADATUM
    bint FASTCOMMON_LIMITED_API
    ctypedef struct PyMethodDef:
        pass
    PyMethodDef fastcommon_metadatum_defs[2]
    object PyCFunction_NewEx(PyMethodDef *, PyObject *, object)

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


def set_metadatum_class(cls, /):
    """Give new_metadatum grpc's metadata entry class (a namedtuple of key and value) to build."""
    fastcommon_set_metadatum_class(cls)


if FASTCOMMON_HAS_METADATUM:
    new_metadatum = PyCFunction_NewEx(&fastcommon_metadatum_defs[0], NULL, __name__)
    counted_new_metadatum = PyCFunction_NewEx(&fastcommon_metadatum_defs[1], NULL, __name__)
