# cython: language_level=3, binding=False, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
# binding=False and always_allow_keywords=False make the functions plain builtins; encode and
# decode are METH_O, the calls CPython 3.11+ specializes (CALL_BUILTIN_O).
"""Compiled twin of fastcommon.common: the same four functions, exact str/bytes on the C-API route.

Also MetadatumConstructor, whose instances build grpc's metadata entries directly (its C is in
fast_common.h), and counted twins of all five for ``python -m fastcommon run --report``: the same code
with a C counter in front, no Python frame.
"""

import collections
import logging
from abc import get_cache_token

cimport cython
from cpython.bytes cimport PyBytes_Check, PyBytes_CheckExact
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_CheckExact, PyUnicode_DecodeUTF8

cdef extern from "fast_common.h":
    char *fastcommon_bytes_data(object)
    Py_ssize_t fastcommon_bytes_size(object)
    unsigned long long fastcommon_calls[]
    int FASTCOMMON_COUNTERS
    bint FASTCOMMON_HAS_METADATUM
    bint FASTCOMMON_LIMITED_API
    object fastcommon_constructor_type()
    Py_ssize_t fastcommon_list_size(object)
    PyObject *fastcommon_list_item(object, Py_ssize_t)
    PyObject *fastcommon_tuple_item(object, Py_ssize_t)
    bint fastcommon_is_plain_pair(object)
    object fastcommon_call_method1(object, object, object)
    object fastcommon_call_method2(object, object, object, object)
    bint fastcommon_is_usual_class(object)
    object fastcommon_new_instance(object)
    PyObject *fastcommon_class_own(object, object) except? NULL
    object fastcommon_key_error(object)
    object fastcommon_item_or(PyObject *, object)

cdef extern from "Python.h":
    # The raw forms: a NULL to test, no exception raised for it by Cython.
    PyObject *PyIter_Next(object)
    PyObject *PyDict_GetItemWithError(object, object) except? NULL
    bint PyDict_Next(object, Py_ssize_t *, PyObject **, PyObject **)

cdef object _LOGGER = logging.getLogger("grpc._common")

# grpc.aio's: the methods of its Metadata class, and the static method of its callables that makes one.
METADATA_METHODS = (
    "Metadata.__init__", "Metadata.add", "Metadata.from_tuple", "Metadata._create", "Metadata.__iter__",
    "Metadata.__len__", "Metadata.__getitem__", "Metadata.get", "Metadata.get_all", "Metadata.__contains__",
    "Metadata.__setitem__", "_BaseMultiCallable._init_metadata",
)  # fmt: skip

COUNTED = (
    "encode", "decode", "serialize", "deserialize", "_Metadatum",
    *METADATA_METHODS,
)  # fmt: skip
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


assert len(COUNTED) == FASTCOMMON_COUNTERS, "fast_common.h counts as many calls as COUNTED names"


if FASTCOMMON_HAS_METADATUM:  # not in a Limited API (abi3) build: a tuple's layout is CPython's own
    MetadatumConstructor = fastcommon_constructor_type()


# ================================================================ grpc.aio's Metadata
#
# What replaces methods of grpc's own class grpc.aio.Metadata, and grpc.aio's _init_metadata, which makes
# one for every call: metadata_method(name, own, cls). Each is made for one class and holds grpc's own
# method. It takes its fast path only for exact instances of that class, and only once it has checked,
# before doing anything, that grpc's own would do exactly the same there: an exact OrderedDict of exact
# lists under exact str keys, pairs that are tuples. Anything else is grpc's own, called as it is, so that
# a subclass, a changed instance and every grpcio release behave as grpc's code does. Other methods are
# called as Python calls them (self.add, key in self): whichever is in place answers, and where that is
# one of fastcommon's (its code object says so), what it would do is done in place. They are binding
# functions (cython.binding), which a class binds to its instances as it binds Python's.

cdef object _OrderedDict = collections.OrderedDict
cdef str _METADATA = "_metadata"
cdef str _ADD = "add"
cdef str _INIT = "__init__"
cdef str _GET_ALL = "get_all"
cdef str _FROM_TUPLE = "from_tuple"
cdef object _END = object()  # what an iterator gives at its end, where None is an item like any other
cdef Py_ssize_t _INIT_COUNTER = COUNTED.index("Metadata.__init__")
cdef Py_ssize_t _ADD_COUNTER = COUNTED.index("Metadata.add")


cdef inline void _count(Py_ssize_t counter) noexcept:
    if counter >= 0:
        fastcommon_calls[counter] += 1


cdef inline object _ordered_dict_of(object self):
    """self._metadata when it is an exact OrderedDict, as grpc's Metadata makes it; else None."""
    found = getattr(self, _METADATA, None)
    return found if type(found) is _OrderedDict else None


cdef inline object _keyed_ordered_dict(object self, object cls, object key):
    """self._metadata where a method's fast path may use it for ``key``: self an exact instance of cls, key an
    exact str (hashing and comparing it run no Python code), self._metadata an exact OrderedDict; else None."""
    if type(self) is cls and type(key) is str:
        return _ordered_dict_of(self)
    return None


cdef inline bint _all_plain_pairs(tuple args):
    for pair in args:
        if not fastcommon_is_plain_pair(pair):
            return False
    return True


cdef inline object _first(object pair):
    return <object>(fastcommon_list_item(pair, 0) if type(pair) is list else fastcommon_tuple_item(pair, 0))


cdef inline object _second(object pair):
    return <object>(fastcommon_list_item(pair, 1) if type(pair) is list else fastcommon_tuple_item(pair, 1))


cdef inline bint _is_fastcommons(object function, object code):
    """Whether ``function`` is one of fastcommon's replacements whose code is ``code``."""
    return getattr(function, "__code__", None) is code


cdef int _add_in_place(object metadata, object key, object value) except -1:
    """What a Metadata's add(key, value) does to its exact OrderedDict ``metadata``, for an exact str key."""
    cdef PyObject *found = PyDict_GetItemWithError(metadata, key)
    if found is NULL:  # setdefault(key, []), then append to it
        values = []
        metadata[key] = values
        values.append(value)
    else:
        (<object>found).append(value)
    return 0


cdef int _initialize(object self, tuple pairs, bint counting) except -1:
    """What grpc's Metadata.__init__(self, *pairs) does, each pair a plain pair: an OrderedDict, then self.add."""
    metadata = _OrderedDict()
    setattr(self, _METADATA, metadata)
    if not pairs:
        return 0
    add = getattr(self, _ADD)  # nothing that runs below can change what this finds, but another add
    if getattr(add, "__self__", None) is not self or not _is_fastcommons(getattr(add, "__func__", None), _ADD_CODE):
        for pair in pairs:  # someone else's add: looked up for each pair, as grpc's __init__ does
            fastcommon_call_method2(self, _ADD, _first(pair), _second(pair))
        return 0
    for pair in pairs:
        key = _first(pair)
        if type(key) is str:  # no Python code runs: the OrderedDict holds only what this loop put in
            _add_in_place(metadata, key, _second(pair))
            if counting:  # an add done in place is counted as the add it is
                fastcommon_calls[_ADD_COUNTER] += 1
        else:
            add(key, _second(pair))  # which counts itself
    return 0


cdef object _construct(object cls, tuple args, bint counting):
    """cls(*args), made here when cls's __init__ is fastcommon's, its __new__ and its metaclass's call the usual."""
    cdef PyObject *init
    if not fastcommon_is_usual_class(cls) or not _all_plain_pairs(args):
        return cls(*args)
    init = fastcommon_class_own(cls, _INIT)  # cls.__init__, as type(cls).__call__ finds it, where cls has its own
    if init is NULL or not _is_fastcommons(<object>init, _INIT_CODE):
        return cls(*args)
    self = fastcommon_new_instance(cls)
    if counting:
        fastcommon_calls[_INIT_COUNTER] += 1
    _initialize(self, args, counting)
    return self


cdef object _make_init(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def __init__(self, *args):
        _count(counter)
        if type(self) is not cls or not _all_plain_pairs(args):
            return own(self, *args)
        _initialize(self, args, counter >= 0)

    return __init__


cdef object _make_add(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def add(self, key, value):
        cdef PyObject *found
        _count(counter)
        metadata = _keyed_ordered_dict(self, cls, key)
        if metadata is not None:
            found = PyDict_GetItemWithError(metadata, key)
            if found is NULL or type(<object>found) is list:
                _add_in_place(metadata, key, value)
                return None
        return own(self, key, value)

    return add


cdef object _make_from_tuple(object own, object cls, Py_ssize_t counter):
    own_function = own.__func__

    @cython.binding(True)
    def from_tuple(cls, raw_metadata):
        _count(counter)
        if raw_metadata is None or type(raw_metadata) is tuple:  # cls(*raw_metadata) if raw_metadata else cls()
            return _construct(cls, raw_metadata if raw_metadata else (), counter >= 0)
        return own_function(cls, raw_metadata)

    return from_tuple


cdef object _make_create(object own, object cls, Py_ssize_t counter):
    own_function = own.__func__

    @cython.binding(True)
    def _create(cls, raw_metadata):
        _count(counter)
        if type(raw_metadata) is cls:
            return raw_metadata
        if type(raw_metadata) is tuple and not isinstance(raw_metadata, cls):
            return _construct(cls, raw_metadata if raw_metadata else (), counter >= 0)
        return own_function(cls, raw_metadata)

    return _create


@cython.final
@cython.freelist(8)
cdef class MetadataIterator:
    """What grpc's Metadata.__iter__ generator yields, (key, value) for every value under every key, in C.

    As that generator does, it looks at the metadata only once it is first asked for an item, takes every
    list as it is at each step, lets the OrderedDict's own iterator check for changes, ends for good after
    its last item or an error, and refuses to be advanced from within itself. Metadata that is not an
    OrderedDict is left to grpc's own generator, started then.
    """

    cdef object metadata, own, ordered, keys, key, values, delegate
    cdef Py_ssize_t index
    cdef bint started, finished, running

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t index = self.index
        values = self.values
        if type(values) is list and index < fastcommon_list_size(values):  # the next value of a list, as it is now
            self.index = index + 1
            return (self.key, <object>fastcommon_list_item(values, index))
        if self.finished:
            raise StopIteration
        if self.running:
            raise ValueError("generator already executing")
        self.running = True
        try:
            item = self._step()
        except BaseException:
            self.finished, self.values = True, None
            raise
        finally:
            self.running = False
        if item is _END:
            self.finished, self.values = True, None
            raise StopIteration
        return item

    cdef object _step(self):
        """The next (key, value) where the list at hand has none left, or _END. Python code may run here."""
        cdef PyObject *found
        if not self.started:
            self.started = True
            self.ordered = _ordered_dict_of(self.metadata)
            if self.ordered is None:
                self.delegate = self.own(self.metadata)
            elif not self.ordered:
                return _END
            else:
                self.keys = iter(self.ordered)  # the OrderedDict's own iterator, and its checks for changes
        if self.delegate is not None:
            return fastcommon_item_or(PyIter_Next(self.delegate), _END)
        values, self.values = self.values, None  # while Python code may run: no list step from within
        while True:
            if values is not None and type(values) is not list:
                value = fastcommon_item_or(PyIter_Next(values), _END)
                if value is not _END:
                    self.values = values
                    return (self.key, value)
            key = fastcommon_item_or(PyIter_Next(self.keys), _END)
            if key is _END:
                return _END
            found = PyDict_GetItemWithError(self.ordered, key)
            if found is NULL:
                return fastcommon_key_error(key)  # as the OrderedDict's items() raises it
            self.key = key
            values = <object>found
            if type(values) is list:
                if fastcommon_list_size(values) > 0:
                    self.values, self.index = values, 1
                    return (key, <object>fastcommon_list_item(values, 0))
                values = None
            else:
                values = iter(values)


cdef object _make_iter(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def __iter__(self):
        cdef MetadataIterator iterator
        _count(counter)
        if type(self) is not cls:
            return own(self)
        iterator = MetadataIterator.__new__(MetadataIterator)
        iterator.metadata = self
        iterator.own = own
        return iterator

    return __iter__


cdef object _make_len(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def __len__(self):
        cdef Py_ssize_t position = 0, total = 0
        cdef PyObject *key
        cdef PyObject *values
        _count(counter)
        metadata = _ordered_dict_of(self) if type(self) is cls else None
        if metadata is not None:
            while PyDict_Next(metadata, &position, &key, &values):
                if type(<object>values) is not list:
                    break
                total += fastcommon_list_size(<object>values)
            else:
                return total
        return own(self)

    return __len__


cdef object _make_getitem(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def __getitem__(self, key):
        cdef PyObject *found
        _count(counter)
        metadata = _keyed_ordered_dict(self, cls, key)
        if metadata is not None:
            found = PyDict_GetItemWithError(metadata, key)
            if found is NULL:
                return fastcommon_key_error(key)  # self._metadata[key], missing
            if type(<object>found) is list and fastcommon_list_size(<object>found) > 0:
                return <object>fastcommon_list_item(<object>found, 0)
        return own(self, key)

    return __getitem__


cdef object _make_get(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def get(self, key, default=None):
        _count(counter)
        if type(self) is not cls:
            return own(self, key, default)
        try:
            return self[key]
        except KeyError:
            return default

    return get


cdef object _make_get_all(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def get_all(self, key):
        cdef PyObject *found
        _count(counter)
        metadata = _keyed_ordered_dict(self, cls, key)
        if metadata is not None:
            found = PyDict_GetItemWithError(metadata, key)
            return [] if found is NULL else <object>found
        return own(self, key)

    return get_all


cdef object _make_contains(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def __contains__(self, key):
        _count(counter)
        metadata = _keyed_ordered_dict(self, cls, key)
        if metadata is not None:
            return key in <dict>metadata
        return own(self, key)

    return __contains__


cdef object _make_setitem(object own, object cls, Py_ssize_t counter):
    @cython.binding(True)
    def __setitem__(self, key, value):
        _count(counter)
        if type(self) is not cls:
            return own(self, key, value)
        if key not in self:
            getattr(self, _METADATA)[key] = [value]
        else:
            current_values = fastcommon_call_method1(self, _GET_ALL, key)
            getattr(self, _METADATA)[key] = [value, *current_values[1:]]

    return __setitem__


cdef object _make_init_metadata(object own, object cls, Py_ssize_t counter):
    own_function = own.__func__
    metadata_class = own_function.__globals__["Metadata"]  # grpc.aio._channel's, as the gate found it
    known = [None, True]  # abc's cache token, and whether an exact tuple is an instance of metadata_class then

    @cython.binding(True)
    def _init_metadata(metadata=None, compression=None):
        _count(counter)
        if compression is None:
            if metadata is None or type(metadata) is metadata_class and not metadata:  # metadata or Metadata()
                return _construct(metadata_class, (), counter >= 0)
            if type(metadata) is metadata_class:
                return metadata
            if type(metadata) is tuple:
                if not metadata:
                    return _construct(metadata_class, (), counter >= 0)
                token = get_cache_token()  # isinstance against an ABC, answered as long as abc keeps its answer
                if token != known[0]:
                    known[:] = [token, isinstance(metadata, metadata_class)]
                if not known[1]:  # and an exact tuple is a Sequence (and a tuple) for good
                    return fastcommon_call_method1(metadata_class, _FROM_TUPLE, metadata)
        return own_function(metadata, compression)

    return _init_metadata


cdef dict _MAKERS = {
    "Metadata.__init__": _make_init,
    "Metadata.add": _make_add,
    "Metadata.from_tuple": _make_from_tuple,
    "Metadata._create": _make_create,
    "Metadata.__iter__": _make_iter,
    "Metadata.__len__": _make_len,
    "Metadata.__getitem__": _make_getitem,
    "Metadata.get": _make_get,
    "Metadata.get_all": _make_get_all,
    "Metadata.__contains__": _make_contains,
    "Metadata.__setitem__": _make_setitem,
    "_BaseMultiCallable._init_metadata": _make_init_metadata,
}


def metadata_method(name, own, cls, /, *, counted=False):
    """What replaces grpc's ``name`` (one of METADATA_METHODS), holding ``own``, for exact instances of ``cls``.

    ``own`` is grpc's own, as its class holds it (a classmethod or staticmethod object where grpc's is one);
    the result is what to put in its place, of the same kind.
    """
    if name not in _MAKERS:
        raise ValueError(f"fastcommon replaces no {name!r}; it replaces {', '.join(METADATA_METHODS)}")
    wrapped = isinstance(own, (classmethod, staticmethod))
    function = own.__func__ if wrapped else own
    if wrapped != name.endswith(("from_tuple", "_create", "_init_metadata")) or not hasattr(function, "__globals__"):
        raise TypeError(f"metadata_method() needs grpc's own {name} as its class holds it, not {own!r}")
    if not isinstance(cls, type):
        raise TypeError(f"metadata_method() needs a class, not {cls!r}")
    made = _MAKERS[name](own, cls, COUNTED.index(name) if counted else -1)
    made.__doc__ = function.__doc__
    made.__wrapped__ = function  # inspect.signature shows grpc's own, annotations and all
    return type(own)(made) if wrapped else made


# The code objects of fastcommon's __init__ and add, by which their replacements are known wherever they are.
cdef object _INIT_CODE = _make_init(None, None, -1).__code__
cdef object _ADD_CODE = _make_add(None, None, -1).__code__
