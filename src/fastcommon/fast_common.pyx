# cython: language_level=3, binding=False, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
# binding=False and always_allow_keywords=False make the functions plain builtins; encode and
# decode are METH_O, the calls CPython 3.11+ specializes (CALL_BUILTIN_O).
"""Compiled twin of fastcommon.common: the same four functions, exact str/bytes on the C-API route.

Also MetadatumConstructor, whose builtin method builds grpc's metadata entries directly, and grpc.aio's
Metadata methods (their C is in fast_common.h); and counted twins for ``python -m fastcommon run
--report``: the same code with a C counter in front, no Python frame.
"""

import collections
import logging
from abc import get_cache_token

cimport cython
from cpython.bytes cimport PyBytes_CheckExact
from cpython.object cimport PyObject, PyObject_IsInstance
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_CheckExact, PyUnicode_DecodeUTF8

cdef extern from "fast_common.h":
    char *fastcommon_bytes_data(object)
    Py_ssize_t fastcommon_bytes_size(object)
    int FASTCOMMON_MAX_COUNTERS
    bint FASTCOMMON_HAS_METADATUM
    bint FASTCOMMON_LIMITED_API
    void fastcommon_count(Py_ssize_t) noexcept nogil
    void fastcommon_count_by(Py_ssize_t, Py_ssize_t) noexcept nogil
    unsigned long long fastcommon_count_of(Py_ssize_t) noexcept nogil
    int fastcommon_no_gc() noexcept
    void fastcommon_restore_gc(int) noexcept
    bint fastcommon_plain_str_pairs(tuple) noexcept
    int fastcommon_add(object, object, object) except -1
    Py_ssize_t fastcommon_fill(object, tuple, Py_ssize_t, bint) except -1
    Py_ssize_t fastcommon_count_values(object) noexcept
    object fastcommon_value_at(list, Py_ssize_t, object)
    object fastcommon_get(object, object, object)
    bint fastcommon_is_usual_class(object) noexcept
    bint fastcommon_has_plain_attributes(object) noexcept
    object fastcommon_class_own(object, object, object)
    int fastcommon_is_bound(object, object, object) except -1
    object fastcommon_new_instance(object)
    object fastcommon_call_method1(object, object, object)
    object fastcommon_call_method2(object, object, object, object)
    object fastcommon_constructor_type()
    object fastcommon_iterator_type(object)
    object fastcommon_iterator_new(object, object)
    object fastcommon_new_ordered_dict()

cdef object _LOGGER = logging.getLogger("grpc._common")

LIMITED_API = FASTCOMMON_LIMITED_API  # built for the Limited API: the abi3 wheel, for CPythons newer than fastcommon


cdef inline object _encode(object s):
    if PyUnicode_CheckExact(s):
        return PyUnicode_AsUTF8String(s)
    if PyBytes_CheckExact(s) or PyObject_IsInstance(s, bytes):  # grpc's isinstance honours a __class__ of bytes
        return s
    return s.encode("utf8")  # str subclasses and duck types: their own encode, as grpc calls it


cdef inline object _decode(object b):
    if PyBytes_CheckExact(b):
        return PyUnicode_DecodeUTF8(fastcommon_bytes_data(b), fastcommon_bytes_size(b), "replace")
    if PyObject_IsInstance(b, bytes):  # not Cython's isinstance: a type check
        return b.decode("utf-8", "replace")  # bytes subclasses and what says it is bytes: their own decode
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
    fastcommon_count(0)
    return _encode(s)


def counted_decode(b, /):
    """decode, counted."""
    fastcommon_count(1)
    return _decode(b)


def counted_serialize(message, serializer, /):
    """serialize, counted."""
    fastcommon_count(2)
    return _transform(message, serializer, "Exception serializing message!")


def counted_deserialize(serialized_message, deserializer, /):
    """deserialize, counted."""
    fastcommon_count(3)
    return _transform(serialized_message, deserializer, "Exception deserializing message!")


def calls():
    """The calls counted in this process (and its parent, before a fork), by counter: the counted twins count at
    0 to 3 (encode, decode, serialize, deserialize); what is made with a counter, at that counter."""
    return tuple([fastcommon_count_of(i) for i in range(FASTCOMMON_MAX_COUNTERS)])


if FASTCOMMON_HAS_METADATUM:  # not in a Limited API (abi3) build: a tuple's layout is CPython's own
    MetadatumConstructor = fastcommon_constructor_type()


# ================================================================ grpc.aio's Metadata
#
# What replaces methods of grpc's own class grpc.aio.Metadata, and grpc.aio's _init_metadata, which makes one
# for every call: metadata_methods(owns, cls), made together for one class, each holding grpc's own method. A
# method takes its fast path only for exact instances of that class, and only once it has checked, before
# doing anything, that grpc's own would do exactly the same there: an exact OrderedDict of exact lists under
# exact str keys, pairs that are plain pairs. Anything else is grpc's own, called as it is, so that a
# subclass, a changed instance and every grpcio release behave as grpc's code does. Other methods are called
# as Python calls them (self.add, key in self): whichever is in place answers; where that is the one made
# with it (the class's own __dict__ holds that very object), what it would do is done in place.
#
# The re-entrancy rule (docs/safety.md): whatever can run Python code (an attribute that is set, hashing or
# comparing anything but an exact str, a method, an allocation that can start the garbage collector) runs
# before the checks that a stretch done in place relies on, never between them and it. They are binding
# functions (cython.binding), which a class binds to its instances as it binds Python's.

cdef object _OrderedDict = collections.OrderedDict
cdef str _METADATA = "_metadata"
cdef str _ADD = "add"
cdef str _INIT = "__init__"
cdef str _GET_ALL = "get_all"
cdef str _FROM_TUPLE = "from_tuple"
# The globals grpc's code looks up at each call, as it looks them up (builtins are taken to be builtins).
cdef str _CLASS_NAME = "Metadata"  # grpc.aio._channel's Metadata class
cdef str _ORDERED_DICT = "OrderedDict"  # grpc.aio._metadata's
cdef str _KEY_TYPE = "MetadataKey"  # grpc.aio._metadata's: str, which 1.85's __contains__ asks keys to be
cdef object _END = object()  # what an iterator gives at its end, where None is an item like any other
cdef object _MISSING = object()
cdef object _CLASS_DICT = type.__dict__["__dict__"]  # a class's own __dict__, past any metaclass's property

# `key, value = pair` as CPython itself unpacks it, with its own messages (3.14 changed them), for the pairs
# that are not plain pairs once Python code has run in the middle of an __init__.
cdef dict _unpacking = {}
exec(compile("def unpack(pair):\n    key, value = pair\n    return key, value\n", "<fastcommon>", "exec"), _unpacking)
cdef object _unpack = _unpacking["unpack"]


@cython.final
@cython.auto_pickle(False)
cdef class _Methods:
    """What fastcommon made together for one Metadata class: the class, the methods by which each knows the
    others (the objects as the class holds them), grpc's own __init__, and the counters of what is done in place."""

    cdef object cls, init, add, from_tuple, own_init
    cdef object class_dict  # cls.__dict__, a view of the class's own dict
    cdef object namespace  # grpc.aio._metadata's, where grpc's __init__ looks up OrderedDict at each call
    cdef Py_ssize_t init_counter, add_counter, from_tuple_counter
    cdef object abc_token, abc_answer  # _init_metadata's isinstance(a tuple, Metadata), and for which abc state


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


cdef bint _adds_in_place(object self, _Methods methods, bint fresh) except -1:
    """Whether self.add is the add made with these methods, bound to self, for an exact instance of their class:
    what it does, fastcommon_fill does in place. A fresh instance has no attribute of its own that could hide it."""
    if methods.add is None or fastcommon_class_own(methods.cls, methods.class_dict, _ADD) is not methods.add:
        return False
    return fresh or fastcommon_is_bound(getattr(self, _ADD), self, methods.add)


cdef bint _initialize(object self, tuple pairs, _Methods methods, bint fresh) except -1:
    """What grpc's Metadata.__init__(self, *pairs) does, done here; False, having done nothing, where grpc's own
    must do it: self not an exact instance of the class, attributes not object's, a pair that is not a plain pair
    with an exact str key. ``fresh``: self was made just now, by fastcommon."""
    cdef Py_ssize_t done = 0, n = len(pairs)
    cdef int collecting
    cls = methods.cls
    if type(self) is not cls or not fastcommon_has_plain_attributes(cls) or not fastcommon_plain_str_pairs(pairs):
        return False
    if fastcommon_get(methods.namespace, _ORDERED_DICT, _MISSING) is not _OrderedDict:
        return False
    metadata = fastcommon_new_ordered_dict()
    setattr(self, _METADATA, metadata)  # Python code may run here: the finalizers of a _metadata it replaces
    if n == 0:
        return True
    # What grpc's add would find, self.add and self._metadata, looked up once (an instance's own lookup may run
    # Python code); then nothing runs Python code until fill ends, the collector off (before 3.12) meanwhile.
    if _adds_in_place(self, methods, fresh) and getattr(self, _METADATA) is metadata:
        fresh = fresh and not metadata  # still empty after the Python code those lookups may have run
        collecting = fastcommon_no_gc()
        try:
            done = fastcommon_fill(metadata, pairs, 0, fresh)
        finally:
            fastcommon_restore_gc(collecting)
        fastcommon_count_by(methods.add_counter, done)  # an add done in place is counted as the add it is
    for i in range(done, n):  # the rest as grpc's __init__ does it: unpacked, and added through self.add
        key, value = _unpack(pairs[i])
        fastcommon_call_method2(self, _ADD, key, value)
    return True


cdef object _construct(object cls, tuple args, _Methods methods):
    """cls(*args), made here where cls is the class these methods were made for, calling it makes an instance
    with object's __new__, and its __init__ is the one made with them; else called as Python calls it."""
    if (cls is not methods.cls or methods.init is None or not fastcommon_is_usual_class(cls)
            or fastcommon_class_own(cls, methods.class_dict, _INIT) is not methods.init):
        return cls(*args)
    self = fastcommon_new_instance(cls)
    fastcommon_count(methods.init_counter)
    if not _initialize(self, args, methods, True):
        methods.own_init(self, *args)  # as the __init__ made with them does then
    return self


cdef object _make_init(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def __init__(self, *args):
        fastcommon_count(counter)
        if not _initialize(self, args, methods, False):
            own(self, *args)

    return __init__


cdef object _make_add(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def add(self, key, value):
        fastcommon_count(counter)
        cls = methods.cls
        if type(self) is cls and type(key) is str and fastcommon_has_plain_attributes(cls):
            metadata = _ordered_dict_of(self)  # grpc's add reads it twice, with nothing between that runs Python code
            if metadata is not None and fastcommon_add(metadata, key, value) == 0:
                return None
        return own(self, key, value)

    return add


cdef object _make_from_tuple(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def from_tuple(cls, raw_metadata):
        fastcommon_count(counter)
        if raw_metadata is None or type(raw_metadata) is tuple:  # cls(*raw_metadata) if raw_metadata else cls()
            return _construct(cls, raw_metadata if raw_metadata else (), methods)
        return own(cls, raw_metadata)

    return from_tuple


cdef object _make_create(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def _create(cls, raw_metadata):
        fastcommon_count(counter)
        if type(raw_metadata) is cls:
            return raw_metadata
        if type(raw_metadata) is tuple and not isinstance(raw_metadata, cls):
            return _construct(cls, raw_metadata if raw_metadata else (), methods)
        return own(cls, raw_metadata)

    return _create


MetadataIterator = fastcommon_iterator_type(_OrderedDict)  # its C is in fast_common.h


cdef object _make_iter(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def __iter__(self):
        fastcommon_count(counter)
        if type(self) is not methods.cls:
            return own(self)
        return fastcommon_iterator_new(self, own)

    return __iter__


cdef object _make_len(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def __len__(self):
        cdef Py_ssize_t total
        fastcommon_count(counter)
        metadata = _ordered_dict_of(self) if type(self) is methods.cls else None
        if metadata is not None:
            total = fastcommon_count_values(metadata)
            if total >= 0:
                return total
        return own(self)

    return __len__


cdef object _make_getitem(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def __getitem__(self, key):
        fastcommon_count(counter)
        metadata = _keyed_ordered_dict(self, methods.cls, key)
        if metadata is not None:
            values = fastcommon_get(metadata, key, _MISSING)
            if values is _MISSING:
                raise KeyError(key)  # self._metadata[key], missing
            if type(values) is list:
                value = fastcommon_value_at(<list>values, 0, _END)
                if value is not _END:
                    return value
        return own(self, key)

    return __getitem__


cdef object _make_get(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def get(self, key, default=None):
        fastcommon_count(counter)
        if type(self) is not methods.cls:
            return own(self, key, default)
        try:
            return self[key]
        except KeyError:
            return default

    return get


cdef object _make_get_all(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def get_all(self, key):
        fastcommon_count(counter)
        metadata = _keyed_ordered_dict(self, methods.cls, key)
        if metadata is not None:
            values = fastcommon_get(metadata, key, _MISSING)
            return [] if values is _MISSING else values
        return own(self, key)

    return get_all


cdef object _make_contains(object own, _Methods methods, Py_ssize_t counter):
    namespace = own.__globals__

    @cython.binding(True)
    def __contains__(self, key):
        fastcommon_count(counter)
        metadata = _keyed_ordered_dict(self, methods.cls, key)
        if metadata is not None and fastcommon_get(namespace, _KEY_TYPE, str) is str:
            return key in <dict>metadata
        return own(self, key)

    return __contains__


cdef object _make_setitem(object own, _Methods methods, Py_ssize_t counter):
    @cython.binding(True)
    def __setitem__(self, key, value):
        fastcommon_count(counter)
        if type(self) is not methods.cls:
            return own(self, key, value)
        if key not in self:
            values = [value]
        else:
            current_values = fastcommon_call_method1(self, _GET_ALL, key)
            values = [value, *current_values[1:]]
        metadata = getattr(self, _METADATA)
        with cython.critical_section(metadata):  # CPython's OrderedDict does not lock itself (3.13t)
            metadata[key] = values

    return __setitem__


cdef bint _tuple_is_instance(_Methods methods, object metadata_class, tuple metadata) except -1:
    """isinstance(metadata, metadata_class) for an exact tuple: asked again only when abc's cache token changes."""
    token = get_cache_token()
    with cython.critical_section(methods):
        answer = methods.abc_answer if methods.abc_token == token else None
    if answer is None:
        answer = isinstance(metadata, metadata_class)
        with cython.critical_section(methods):
            methods.abc_token, methods.abc_answer = token, answer
    return answer


cdef object _make_init_metadata(object own, _Methods methods, Py_ssize_t counter):
    namespace = own.__globals__  # grpc.aio._channel's, where its code looks up Metadata at each call

    @cython.binding(True)
    def _init_metadata(metadata=None, compression=None):
        fastcommon_count(counter)
        metadata_class = fastcommon_get(namespace, _CLASS_NAME, _MISSING)
        if compression is None and metadata_class is methods.cls:
            if metadata is None:  # `metadata or Metadata()`, then nothing more to do
                return _construct(metadata_class, (), methods)
            if type(metadata) is metadata_class:
                return metadata if metadata else _construct(metadata_class, (), methods)
            if type(metadata) is tuple:
                if not metadata:
                    return _construct(metadata_class, (), methods)
                if not _tuple_is_instance(methods, metadata_class, metadata):  # and an exact tuple is a Sequence
                    if fastcommon_class_own(metadata_class, methods.class_dict, _FROM_TUPLE) is not methods.from_tuple:
                        return fastcommon_call_method1(metadata_class, _FROM_TUPLE, metadata)
                    fastcommon_count(methods.from_tuple_counter)  # Metadata.from_tuple(tuple(metadata)), in place
                    return _construct(metadata_class, metadata, methods)
        return own(metadata, compression)

    return _init_metadata


# What replaces each method, by the name it has in its class: its maker, and what its class holds it in.
cdef dict _MAKERS = {
    "__init__": (_make_init, None),
    "add": (_make_add, None),
    "from_tuple": (_make_from_tuple, classmethod),
    "_create": (_make_create, classmethod),
    "__iter__": (_make_iter, None),
    "__len__": (_make_len, None),
    "__getitem__": (_make_getitem, None),
    "get": (_make_get, None),
    "get_all": (_make_get_all, None),
    "__contains__": (_make_contains, None),
    "__setitem__": (_make_setitem, None),
    "_init_metadata": (_make_init_metadata, staticmethod),
}


def metadata_methods(owns, cls, /, *, counters=None):
    """What replaces grpc's own methods ``owns`` (by dotted name, as fastcommon._patching names them: grpc's own, as
    its class holds it), made together for exact instances of ``cls``, each of the kind of grpc's own;
    ``counters``: where each counts its calls, by the same names (none counts without it)."""
    cdef _Methods methods = _Methods.__new__(_Methods)
    if not isinstance(cls, type):
        raise TypeError(f"metadata_methods() needs a class, not {cls!r}")
    owns, counters = dict(owns), dict(counters or {})
    by_attribute = {name.rpartition(".")[2]: name for name in owns}
    for attribute, name in by_attribute.items():
        if attribute not in _MAKERS:
            raise ValueError(f"fastcommon replaces no {name!r}")
        own, kind = owns[name], (<tuple>_MAKERS[attribute])[1]
        function = own.__func__ if kind is not None and type(own) is kind else own
        if (kind is not None and type(own) is not kind) or type(getattr(function, "__globals__", None)) is not dict:
            raise TypeError(f"metadata_methods() needs grpc's own {name} as its class holds it, not {own!r}")
        counter = counters.get(name, -1)
        if not -1 <= counter < FASTCOMMON_MAX_COUNTERS:
            raise ValueError(f"metadata_methods(): no counter {counter!r}")
        counters[name] = counter
    methods.cls, methods.class_dict = cls, _CLASS_DICT.__get__(cls)  # the class's own, whatever its metaclass says
    made = {}
    for attribute, name in by_attribute.items():
        own, (maker, kind) = owns[name], _MAKERS[attribute]
        function = own.__func__ if kind is not None else own
        replacement = maker(function, methods, counters[name])
        replacement.__doc__ = function.__doc__
        replacement.__wrapped__ = function  # inspect.signature shows grpc's own, annotations and all
        made[name] = kind(replacement) if kind is not None else replacement
    in_place = {attribute: by_attribute.get(attribute) for attribute in (_INIT, _ADD, _FROM_TUPLE)}
    methods.own_init = owns.get(in_place[_INIT])
    methods.namespace = getattr(methods.own_init, "__globals__", {})
    methods.init, methods.add, methods.from_tuple = (made.get(name) for name in in_place.values())
    methods.init_counter, methods.add_counter, methods.from_tuple_counter = (
        counters.get(name, -1) for name in in_place.values()
    )
    return made
