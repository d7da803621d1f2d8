# cython: language_level=3, binding=True, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
"""grpc.aio's Metadata methods and _init_metadata compiled from grpc's code, and their iterator (iterator.h): the same
reads, lookups and calls in order; a C step only where exact types make it the same step, decided up front, else grpc's
own method for the whole call; the class and grpc's globals as judged at patch() (docs/safety.md, "The contract")."""

import collections
import functools
import sys
from abc import get_cache_token

cimport cython
from cpython.dict cimport PyDict_GetItemRef, PyDict_Next
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject, newfunc
from cpython.ref cimport Py_DECREF

from fastcommon.counters cimport counted_calls, fastcommon_check_counter, fastcommon_count, fastcommon_count_by

cdef extern from "Python.h":
    void *PyType_GetSlot(PyTypeObject *, int)
    bint PyIter_Check(object)
    enum: Py_tp_iter, Py_tp_new
    bint Py_EnterRecursiveCall(const char *) except True  # nonzero, not -1, on error (3.10, 3.11)
    void Py_LeaveRecursiveCall()
    bint _str_exact "PyUnicode_CheckExact"(PyObject *)  # on what PyDict_Next lends: no reference taken, none given back
    bint _list_exact "PyList_CheckExact"(PyObject *)  # the same

cdef extern from "compat.h":
    object fastcommon_new_ordered_dict(object)
    int fastcommon_ordered_set(object, object, object) except -1
    object fastcommon_list_of(object)
    Py_ssize_t fastcommon_list_size(PyObject *)

cdef extern from "iterator.h":
    object fastcommon_iterator_type()
    object fastcommon_iterator_new(object, object, object)

cdef extern from "function.h":
    object fastcommon_function_type()
    object fastcommon_function_new(object, object, object)


cdef object _OrderedDict = collections.OrderedDict
if type(fastcommon_new_ordered_dict(_OrderedDict)) is not _OrderedDict:
    raise ImportError("fastcommon.fast_metadata: collections.OrderedDict is not CPython's own")
cdef Py_ssize_t _ATTRIBUTES_AT = _OrderedDict.__dictoffset__  # where an OrderedDict keeps its attributes' dict
if _ATTRIBUTES_AT <= 0:
    raise ImportError("fastcommon.fast_metadata: collections.OrderedDict keeps its attributes out of reach")
cdef void *_TUPLE_ITER = PyType_GetSlot(<PyTypeObject *>tuple, Py_tp_iter)
cdef newfunc _object_new = <newfunc>PyType_GetSlot(<PyTypeObject *>object, Py_tp_new)  # object.__new__
cdef tuple _NO_ARGS = ()
cdef object _MISSING = object()


cdef inline bint _plain_ordered_dict(object mapping):
    """An exact OrderedDict with no attribute to hide items, values or get (read at __dictoffset__, not made)."""
    if type(mapping) is not _OrderedDict:
        return False
    attributes = (<PyObject **>(<char *><PyObject *>mapping + _ATTRIBUTES_AT))[0]
    return attributes == NULL or len(<dict>attributes) == 0


# Steps of grpc's code done by CPython itself, for anything: `key, value = pair` (its errors changed in 3.14),
# [value, *current[1:]] (the list's room, its errors), and `mapping[key] = values` in a frame the recursion limit counts.
cdef dict _helpers = {}
exec(compile("def unpack(pair):\n    key, value = pair\n    return key, value\n\n"
             "def first_replaced(value, current):\n    return [value, *current[1:]]\n\n"
             "def assign(mapping, key, values):\n    mapping[key] = values\n", "<fastcommon>", "exec"), _helpers)
cdef object _unpack = _helpers["unpack"], _first_replaced = _helpers["first_replaced"], _assign = _helpers["assign"]


@cython.final
@cython.auto_pickle(False)
cdef class _Methods:
    """What the methods fastcommon made together for one Metadata class share, as the gate judged it at patch()."""

    cdef object cls, grpcs_getitem
    cdef bint init, add, from_tuple
    cdef Py_ssize_t init_counter, add_counter, from_tuple_counter, getitem_counter
    cdef object abc_token, abc_answer  # _init_metadata's isinstance(a tuple, Metadata), and for which abc state


cdef inline bint _plain_pair(object pair):
    """Whether `key, value = pair` runs no Python code, the key an exact str: a tuple of two iterating as tuple."""
    if type(pair) is not tuple and not (isinstance(pair, tuple) and
                                        PyType_GetSlot(Py_TYPE(pair), Py_tp_iter) == _TUPLE_ITER):
        return False
    return len(<tuple>pair) == 2 and type((<tuple>pair)[0]) is str


cdef enum:
    _SEEN = 16  # how many keys _fill remembers, to add a new key without looking it up


cdef bint _fill(object self, tuple pairs, _Methods methods) except -1:
    """grpc's __init__ in place on a fresh methods.cls (its add fastcommon's); False, doing nothing, on a pair not so."""
    cdef Py_ssize_t i, j, seen = 0
    cdef Py_hash_t hash_
    cdef Py_hash_t seen_hashes[_SEEN]
    cdef PyObject *seen_keys[_SEEN]  # borrowed from the pairs, which pairs holds and nothing changes
    cdef PyObject *found
    cdef bint new
    for pair in pairs:
        if not _plain_pair(pair):
            return False
    metadata = fastcommon_new_ordered_dict(_OrderedDict)
    self._metadata = metadata
    with cython.critical_section(metadata):  # CPython's OrderedDict does not lock itself (3.13t)
        for i in range(len(pairs)):
            key, value = (<tuple>pairs[i])[0], (<tuple>pairs[i])[1]
            new = seen < _SEEN  # a key unlike every key before it is new to this OrderedDict, which only this fills
            if new:
                hash_ = hash(key)  # an exact str's, kept in it
                for j in range(seen):
                    if seen_hashes[j] == hash_ and (seen_keys[j] == <PyObject *>key or <object>seen_keys[j] == key):
                        new = False
                        break
                if new:
                    seen_keys[seen], seen_hashes[seen] = <PyObject *>key, hash_
                    seen += 1
            if not new and PyDict_GetItemRef(metadata, key, &found):  # as add's setdefault(key, [])[...]
                values = <object>found
                Py_DECREF(values)
                values.append(value)  # then [key].append(value)
            else:
                fastcommon_ordered_set(metadata, key, fastcommon_list_of(value))
    fastcommon_count_by(methods.add_counter, len(pairs))  # each add done in place is counted as the add it is
    return True


cdef object _initialize(object self, tuple pairs):
    """grpc's __init__, step by step: a new OrderedDict, then self.add(key, value) for each pair."""
    self._metadata = fastcommon_new_ordered_dict(_OrderedDict)
    for pair in pairs:
        key, value = _unpack(pair)
        self.add(key, value)


cdef object _construct(_Methods methods, tuple pairs):
    """methods.cls(*pairs): an instance made as type() makes one, initialized as its __init__ does."""
    cls = methods.cls
    if not methods.init:
        return cls(*pairs)
    self = _object_new(cls, <PyObject *>_NO_ARGS, NULL)  # what type() calls: the class's slot (metadata_methods)
    fastcommon_count(methods.init_counter)
    if not (methods.add and _fill(self, pairs, methods)):  # a fresh instance: add is the class's
        _initialize(self, pairs)
    return self


cdef bint _is_instance(_Methods methods, tuple metadata) except -1:
    """isinstance(metadata, methods.cls) for an exact tuple: asked again only when abc's cache token changes."""
    token = get_cache_token()
    with cython.critical_section(methods):
        answer = methods.abc_answer if methods.abc_token == token else None
    if answer is None:
        answer = isinstance(metadata, methods.cls)
        with cython.critical_section(methods):
            methods.abc_token, methods.abc_answer = token, answer
    return answer


@cython.final
@cython.auto_pickle(False)
cdef class _Read:
    """What grpc's method reads of its self, _metadata, as fastcommon already read it: once, then let go of."""

    cdef object metadata

    @property
    def _metadata(self):
        metadata, self.metadata = self.metadata, None
        return metadata


# Before 3.12 CPython counts a Python frame entered from C once, and a level of a Metadata nested as another's _metadata
# takes twice a level of its own C stack, so counts twice; from 3.12 on, CPython counts C calls apart.
cdef bint _COUNT_LEVELS = sys.version_info < (3, 12)


cdef object _deeper(object function, object first, object key=_MISSING, object values=_MISSING):
    """function(first[, key[, values]]) where a nested Metadata recurses: the level counted, as grpc's frame counts.
    Called with its arguments spelled out: vectorcall, which counts no level of its own (function(*arguments) would
    be Cython's PyObject_Call, which does)."""
    if _COUNT_LEVELS:
        Py_EnterRecursiveCall("")
    try:
        if key is _MISSING:
            return function(first)
        if values is _MISSING:
            return function(first, key)
        return function(first, key, values)
    finally:
        if _COUNT_LEVELS:
            Py_LeaveRecursiveCall()


cdef object _read(object metadata):
    """A self for grpc's method that reads self._metadata alone; made without a call, which CPython would count."""
    cdef _Read read = _Read.__new__(_Read)
    read.metadata = metadata
    return read


cdef inline Py_ssize_t _str_keyed(object ordered, bint lists) except -2:
    """How many keys ``ordered`` has (``lists``: values its lists hold), all exact str (values exact lists); else -1."""
    cdef Py_ssize_t total = 0, position = 0
    cdef PyObject *key
    cdef PyObject *values
    with cython.critical_section(ordered):
        while PyDict_Next(ordered, &position, &key, &values):
            if not (_str_exact(key) and (not lists or _list_exact(values))):
                total = -1
                break
            total += fastcommon_list_size(values) if lists else 1
    return total


cdef object _Iterator = fastcommon_iterator_type()  # iterator.h; read by __iter__ as C, not as a module global
MetadataIterator = _Iterator
cdef object _Function = fastcommon_function_type()  # function.h: what stands in for each method, a function to mock


cdef object _getitem(object self, object key, _Methods methods):
    """grpc's __getitem__: self._metadata[key][0], and a KeyError for a missing first value."""
    cdef PyObject *found
    try:
        metadata = self._metadata
        if type(metadata) is _OrderedDict:
            if not PyDict_GetItemRef(metadata, key, &found):  # the lookup metadata[key] does, with no __missing__
                raise KeyError(key)
            values = <object>found
            Py_DECREF(values)
            if type(values) is list and len(<list>values):
                return (<list>values)[0]
            return values[0]
    except (ValueError, IndexError) as error:
        raise KeyError(f"{key!r}") from error
    return _deeper(methods.grpcs_getitem, _read(metadata), key)  # grpc's own, which turns its errors into KeyError


cdef object _replacement(object attribute, object grpcs, _Methods methods, Py_ssize_t counter):
    """What replaces grpc's method ``grpcs`` (``attribute`` of methods.cls), counting its calls at ``counter`` first."""
    def __init__(*args, **kwargs):  # what type() calls with what Metadata(...) was given: grpc's words for errors
        fastcommon_count(counter)
        if kwargs or not args:
            return grpcs(*args, **kwargs)
        self, pairs = args[0], args[1:]
        if type(self) is methods.cls and methods.add:
            attributes = self.__dict__
            if type(attributes) is dict and not attributes and _fill(self, pairs, methods):  # a fresh instance
                return
        _initialize(self, pairs)

    def add(self, key, value):
        fastcommon_count(counter)
        self._metadata.setdefault(key, [])
        self._metadata[key].append(value)

    def from_tuple(cls, raw_metadata):
        fastcommon_count(counter)
        if cls is methods.cls and (raw_metadata is None or type(raw_metadata) is tuple):
            return _construct(methods, raw_metadata if raw_metadata else ())  # cls(*raw_metadata), or cls()
        return grpcs(cls, raw_metadata)

    def _create(cls, raw_metadata):
        fastcommon_count(counter)
        if cls is methods.cls:
            if raw_metadata is None:
                return _construct(methods, ())
            if type(raw_metadata) is cls:
                return raw_metadata
            if type(raw_metadata) is tuple and not _is_instance(methods, raw_metadata):
                return _construct(methods, raw_metadata)
        return grpcs(cls, raw_metadata)

    if attribute == "__iter__":  # made for __iter__ alone: it and this scope hold each other, a cycle
        @cython.binding(False)  # a builtin: what the iterator calls (iterator.h)
        def start(metadata):
            """The iterator's first step, as grpc's generator's: self._metadata, then what walks it: an exact
            OrderedDict of exact str keys, for the iterator to walk; None when empty; else grpc's own generator."""
            cdef Py_ssize_t keys
            ordered = metadata._metadata
            if _plain_ordered_dict(ordered) and (keys := _str_keyed(ordered, False)) >= 0:
                return ordered if keys else None
            generator = grpcs(_read(ordered))
            if not PyIter_Check(generator):  # grpc's gives a generator; anything else is refused as iter() refuses it
                raise TypeError(f"iter() returned non-iterator of type '{type(generator).__name__}'")
            return generator

    @cython.always_allow_keywords(True)  # __iter__(self=m), as grpc's own takes it
    def __iter__(self):
        fastcommon_count(counter)
        return fastcommon_iterator_new(_Iterator, self, start)

    @cython.always_allow_keywords(True)
    def __len__(self):
        cdef Py_ssize_t total
        fastcommon_count(counter)
        metadata = self._metadata
        if _plain_ordered_dict(metadata) and (total := _str_keyed(metadata, True)) >= 0:
            return total  # exact str keys, exact lists: nothing to hash, nothing to call
        return _deeper(grpcs, _read(metadata))

    def __getitem__(self, key):
        fastcommon_count(counter)
        return _getitem(self, key, methods)

    def get(self, key, default=None):
        fastcommon_count(counter)
        try:
            if type(self) is methods.cls and methods.grpcs_getitem is not None:  # self[key] is the one made with it
                fastcommon_count(methods.getitem_counter)
                return _getitem(self, key, methods)
            return self[key]
        except KeyError:
            return default

    def get_all(self, key):
        cdef PyObject *found
        fastcommon_count(counter)
        metadata = self._metadata
        if not _plain_ordered_dict(metadata):
            return _deeper(grpcs, _read(metadata), key)
        if PyDict_GetItemRef(metadata, key, &found):  # the lookup metadata.get(key, []) does
            values = <object>found
            Py_DECREF(values)
            return values
        return []

    def __contains__(self, key):
        fastcommon_count(counter)
        if type(key) is not str:  # grpc 1.85 answers False for a key that is not a str; earlier releases look
            return _deeper(grpcs, self, key)
        metadata = self._metadata
        if type(metadata) is not _OrderedDict:
            return _deeper(grpcs, _read(metadata), key)
        return key in metadata

    def __setitem__(self, key, value):  # [value] under a new key; else value in place of the first
        fastcommon_count(counter)
        if key not in self:
            values = [value]
        else:
            current_values = self.get_all(key)
            values = _first_replaced(value, current_values)
        metadata = self._metadata
        if type(metadata) is not _OrderedDict:  # a Metadata as another's _metadata: recursing, a frame a level
            _deeper(_assign, metadata, key, values)
            return
        with cython.critical_section(metadata):  # CPython's OrderedDict does not lock itself (3.13t)
            metadata[key] = values

    def _init_metadata(metadata=None, compression=None):
        fastcommon_count(counter)
        cls = methods.cls  # grpc.aio._channel's Metadata, as judged
        if compression is None:
            if metadata is None:  # metadata or Metadata()
                return _construct(methods, ())
            if type(metadata) is cls:
                return metadata if metadata else _construct(methods, ())
            if type(metadata) is tuple:
                if not metadata:
                    return _construct(methods, ())
                if not _is_instance(methods, metadata):  # and an exact tuple is a Sequence
                    if not methods.from_tuple:
                        return cls.from_tuple(metadata)
                    fastcommon_count(methods.from_tuple_counter)  # Metadata.from_tuple(tuple(metadata)), in place
                    return _construct(methods, metadata)
        return grpcs(metadata, compression)

    for replacement in (__init__, add, from_tuple, _create, __iter__, __len__, __getitem__, get, get_all, __contains__,
                        __setitem__, _init_metadata):
        if replacement.__name__ == attribute:
            return replacement
    raise ValueError(f"fastcommon replaces no {attribute!r}")  # (the registry names what is replaced)


def metadata_methods(originals, cls, /, *, counters=None):
    """What replaces grpc's methods ``originals`` (by dotted name, each as its class holds it: a classmethod, say), made
    together for exact instances of ``cls``; ``counters``: where each counts its calls, by the same names."""
    cdef _Methods methods = _Methods.__new__(_Methods)
    if not isinstance(cls, type) or PyType_GetSlot(<PyTypeObject *>cls, Py_tp_new) != <void *>_object_new:
        raise TypeError(f"metadata_methods() needs a class whose instances object.__new__ makes, not {cls!r}")
    counters = dict(counters or {})
    functions, replacements = {}, {}  # grpc's, by attribute; what replaces each, by its dotted name
    for name, original in dict(originals).items():
        attribute = name.rpartition(".")[2]
        kind = type(original) if isinstance(original, (classmethod, staticmethod)) else None
        function = functions[attribute] = original.__func__ if kind is not None else original
        if type(getattr(function, "__globals__", None)) is not dict:
            raise TypeError(f"metadata_methods() needs grpc's {name} as its class holds it, not {original!r}")
        counters[attribute] = counters.get(name, -1)
        fastcommon_check_counter(counters[attribute], True)
        replacement = _replacement(attribute, function, methods, counters[attribute])  # methods: filled in below
        # grpc's names, doc, annotations and __wrapped__: signature, get_type_hints and pickle answer as for grpc's
        functools.update_wrapper(replacement, function)
        replacement.__annotations__ = function.__annotations__
        if not hasattr(function, "__annotate__"):  # set by Cython with __annotations__; grpc's have none before 3.14
            vars(replacement).pop("__annotate__", None)
        replacement = fastcommon_function_new(_Function, replacement, function)  # function.h: a function, as mock sees one
        replacements[name] = replacement if kind is None else kind(replacement)
    methods.cls, methods.grpcs_getitem = cls, functions.get("__getitem__")
    methods.init, methods.add = "__init__" in functions, "add" in functions
    methods.from_tuple = "from_tuple" in functions
    methods.init_counter, methods.add_counter = counters.get("__init__", -1), counters.get("add", -1)
    methods.from_tuple_counter, methods.getitem_counter = counters.get("from_tuple", -1), counters.get("__getitem__", -1)
    return replacements


def calls():
    """The calls this module counted in this process (and its parent, before a fork), by counter."""
    return counted_calls()
