/* fastcommon's hand-written C, included by fast_common.pyx (cdef extern from "fast_common.h").
 *
 * The rules here (docs/safety.md, "Compiled code"):
 * - whatever Python hands in is checked before any C code reads or writes through it; an unchecked macro
 *   is used only on objects this file made itself or has just checked;
 * - nothing is held across a call that can run Python code (hashing or comparing anything but an exact
 *   str, a method, an allocation that can start the garbage collector) without a strong reference, and
 *   what such a call could change is checked again after it;
 * - objects other threads can reach are read and changed inside a critical section (a no-op with the GIL).
 */
#ifndef FASTCOMMON_FAST_COMMON_H
#define FASTCOMMON_FAST_COMMON_H

#include <Python.h>
#include <structmember.h>

/* The Limited API (the abi3 wheel) has the function forms of the macros. */
#if defined(Py_LIMITED_API)
#define FASTCOMMON_LIMITED_API 1
#define fastcommon_bytes_data PyBytes_AsString
#define fastcommon_bytes_size PyBytes_Size
#define fastcommon_list_size PyList_Size
#define fastcommon_tuple_size PyTuple_Size
#define fastcommon_tuple_item PyTuple_GetItem
#else
#define FASTCOMMON_LIMITED_API 0
#define fastcommon_bytes_data PyBytes_AS_STRING
#define fastcommon_bytes_size PyBytes_GET_SIZE
#define fastcommon_list_size PyList_GET_SIZE
#define fastcommon_tuple_size PyTuple_GET_SIZE
#define fastcommon_tuple_item PyTuple_GET_ITEM /* tuples are immutable: a checked index stays valid */
#endif

/* A type's slot: the field itself where the full C API has the struct, PyType_GetSlot in the Limited API. */
#if defined(Py_LIMITED_API)
#define FASTCOMMON_SLOT(type, slot, field) PyType_GetSlot((PyTypeObject *)(type), slot)
#else
#define FASTCOMMON_SLOT(type, slot, field) ((void *)((PyTypeObject *)(type))->field)
#endif

/* An OrderedDict's item set: its own function where the full C API has it (odict's mp_ass_subscript calls it). */
#if defined(Py_LIMITED_API)
#define fastcommon_ordered_set PyObject_SetItem
#else
#define fastcommon_ordered_set PyODict_SetItem
#endif

/* Critical sections exist from CPython 3.13; without free threading they do nothing. */
#if defined(Py_GIL_DISABLED)
#define FASTCOMMON_LOCK(op) Py_BEGIN_CRITICAL_SECTION(op)
#define FASTCOMMON_UNLOCK() Py_END_CRITICAL_SECTION()
#else
#define FASTCOMMON_LOCK(op) {
#define FASTCOMMON_UNLOCK() }
#endif

/* Strong references where CPython before 3.13 has only borrowed ones (what pythoncapi-compat gives). */
#if PY_VERSION_HEX < 0x030D0000 || (defined(Py_LIMITED_API) && Py_LIMITED_API + 0 < 0x030D0000)
static inline int
fastcommon_dict_get(PyObject *dict, PyObject *key, PyObject **value)
{
    *value = PyDict_GetItemWithError(dict, key);
    if (*value != NULL) {
        Py_INCREF(*value);
        return 1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

static inline PyObject *
fastcommon_list_get(PyObject *list, Py_ssize_t index)
{
    PyObject *item = PyList_GetItem(list, index);
    Py_XINCREF(item);
    return item;
}
#else
#define fastcommon_dict_get PyDict_GetItemRef
#define fastcommon_list_get PyList_GetItemRef
#endif

/* Calls through the counted twins, by position in fast_common.COUNTED; a fork child inherits them. */
#define FASTCOMMON_MAX_COUNTERS 32
static unsigned long long fastcommon_calls[FASTCOMMON_MAX_COUNTERS];

/* Count n calls at `counter`; -1 counts nothing. Atomic where threads run at once (free-threaded CPython). */
static inline void
fastcommon_count_by(Py_ssize_t counter, Py_ssize_t n)
{
    if (counter < 0 || counter >= FASTCOMMON_MAX_COUNTERS) {
        return;
    }
#if defined(Py_GIL_DISABLED) && defined(_MSC_VER)
    _InterlockedExchangeAdd64((volatile __int64 *)&fastcommon_calls[counter], (__int64)n);
#elif defined(Py_GIL_DISABLED)
    __atomic_fetch_add(&fastcommon_calls[counter], (unsigned long long)n, __ATOMIC_RELAXED);
#else
    fastcommon_calls[counter] += (unsigned long long)n;
#endif
}

#define fastcommon_count(counter) fastcommon_count_by((counter), 1)

static inline unsigned long long
fastcommon_count_of(Py_ssize_t counter)
{
    if (counter < 0 || counter >= FASTCOMMON_MAX_COUNTERS) {
        return 0;
    }
#if defined(Py_GIL_DISABLED) && defined(_MSC_VER)
    return (unsigned long long)_InterlockedOr64((volatile __int64 *)&fastcommon_calls[counter], 0);
#elif defined(Py_GIL_DISABLED)
    return __atomic_load_n(&fastcommon_calls[counter], __ATOMIC_RELAXED);
#else
    return fastcommon_calls[counter];
#endif
}

/* The garbage collector runs Python code (finalizers, weakref callbacks). Before CPython 3.12 it can start
   inside any allocation of a container; from 3.12 it only runs where the interpreter checks for pending
   work, never inside C code like this. A stretch that must run no Python code turns it off before 3.12
   (with the GIL held, nothing else sees it) and puts back what it found. */
static inline int
fastcommon_no_gc(void)
{
#if PY_VERSION_HEX < 0x030C0000
    return PyGC_Disable();
#else
    return 0;
#endif
}

static inline void
fastcommon_restore_gc(int was_enabled)
{
#if PY_VERSION_HEX < 0x030C0000
    if (was_enabled) {
        PyGC_Enable();
    }
#else
    (void)was_enabled;
#endif
}

/* ---------------------------------------------------------------- grpc.aio's Metadata */

/* Whether unpacking `pair` into two names reads its two items and runs no Python code: an exact list or tuple
   of two, or a tuple subclass of two that iterates as a tuple (a namedtuple). If so, the two items, as they
   are now, as new references. */
static int
fastcommon_pair_items(PyObject *pair, PyObject **key, PyObject **value)
{
    int plain = 0;
    if (PyList_CheckExact(pair)) {
        FASTCOMMON_LOCK(pair);
        if (fastcommon_list_size(pair) == 2) {
#if defined(Py_LIMITED_API)
            *key = fastcommon_list_get(pair, 0);
            *value = fastcommon_list_get(pair, 1);
#else
            *key = Py_NewRef(PyList_GET_ITEM(pair, 0));
            *value = Py_NewRef(PyList_GET_ITEM(pair, 1));
#endif
            plain = 1;
        }
        FASTCOMMON_UNLOCK();
        return plain;
    }
    if (!PyTuple_Check(pair) || fastcommon_tuple_size(pair) != 2) {
        return 0;
    }
    if (!PyTuple_CheckExact(pair)
        && FASTCOMMON_SLOT(Py_TYPE(pair), Py_tp_iter, tp_iter) != FASTCOMMON_SLOT(&PyTuple_Type, Py_tp_iter, tp_iter)) {
        return 0;
    }
    *key = Py_NewRef(fastcommon_tuple_item(pair, 0));
    *value = Py_NewRef(fastcommon_tuple_item(pair, 1));
    return 1;
}

/* Whether every pair is a plain pair whose key is an exact str: adding it runs no Python code. */
static int
fastcommon_plain_str_pairs(PyObject *pairs)
{
    Py_ssize_t i, n = fastcommon_tuple_size(pairs);
    PyObject *key, *value;
    for (i = 0; i < n; i++) {
        if (!fastcommon_pair_items(fastcommon_tuple_item(pairs, i), &key, &value)) {
            return 0;
        }
        int str_key = PyUnicode_CheckExact(key);
        Py_DECREF(key); /* the pair holds both: nothing is freed here */
        Py_DECREF(value);
        if (!str_key) {
            return 0;
        }
    }
    return 1;
}

/* A new list holding `value` as `[]` holds it after `.append(value)`: one item, room for four (what every
   CPython from 3.10 to 3.15 gives; a test compares the sizes with grpc's). */
static PyObject *
fastcommon_new_values(PyObject *value)
{
#if defined(Py_LIMITED_API)
    PyObject *values = PyList_New(0);
    if (values != NULL && PyList_Append(values, value) < 0) {
        Py_CLEAR(values);
    }
    return values;
#else
    PyObject *values = PyList_New(4); /* four NULL items */
    if (values != NULL) {
        PyList_SET_ITEM(values, 0, Py_NewRef(value));
        Py_SET_SIZE(values, 1);
    }
    return values;
#endif
}

/* What `metadata.setdefault(key, []); metadata[key].append(value)` does to an exact OrderedDict of lists, for an
   exact str key (nothing here runs Python code): 0 done, 1 when the values under `key` are not a list (nothing
   done), -1 on an error. `fresh`, when not NULL, is the new list to use (it already holds `value`). */
static int
fastcommon_add_value(PyObject *metadata, PyObject *key, PyObject *value, PyObject *fresh)
{
    PyObject *values;
    int status;
    FASTCOMMON_LOCK(metadata);
    status = fastcommon_dict_get(metadata, key, &values);
    if (status == 0) {
        PyObject *made = fresh != NULL ? Py_NewRef(fresh) : fastcommon_new_values(value);
        status = made == NULL ? -1 : fastcommon_ordered_set(metadata, key, made);
        Py_XDECREF(made);
    }
    else if (status == 1) {
        status = PyList_CheckExact(values) ? PyList_Append(values, value) : 1;
        Py_DECREF(values);
    }
    FASTCOMMON_UNLOCK();
    return status;
}

/* metadata.add(key, value) in place, as grpc's add does it: before CPython 3.12 its `[]` is made before it
   looks (the collector that allocation may start runs before the look, as in grpc's own). */
static int
fastcommon_add(PyObject *metadata, PyObject *key, PyObject *value)
{
#if PY_VERSION_HEX < 0x030C0000
    PyObject *fresh = fastcommon_new_values(value);
    int status;
    if (fresh == NULL) {
        return -1;
    }
    status = fastcommon_add_value(metadata, key, value, fresh);
    Py_DECREF(fresh); /* unused, it holds only `value`, which the caller holds too */
    return status;
#else
    return fastcommon_add_value(metadata, key, value, NULL);
#endif
}

#define FASTCOMMON_SEEN 16 /* how many keys fastcommon_fill remembers to tell a new key without a lookup */

/* What grpc's Metadata.__init__ adds, from pairs[start] on, to its new, exact OrderedDict, in place, for the
   pairs that are plain pairs with exact str keys: the index of the first pair that is not one (len(pairs) when
   all were added), or -1 on an error. The caller has made sure no Python code runs meanwhile. `fresh`: the
   OrderedDict was made by this call's caller and found empty just before; the key of a tuple pair that none
   of the earlier (tuple) pairs had is then new, and added without looking it up. */
static Py_ssize_t
fastcommon_fill(PyObject *metadata, PyObject *pairs, Py_ssize_t start, int fresh)
{
    Py_ssize_t i, j, seen = 0, n = fastcommon_tuple_size(pairs);
    PyObject *seen_keys[FASTCOMMON_SEEN]; /* borrowed from tuple pairs, which pairs holds and nothing changes */
    Py_hash_t seen_hashes[FASTCOMMON_SEEN];
    PyObject *pair, *key, *value, *values;
    int remembering = fresh && start == 0;
    for (i = start; i < n; i++) {
        int status = 1;
        pair = fastcommon_tuple_item(pairs, i);
        if (!fastcommon_pair_items(pair, &key, &value)) {
            return i;
        }
        if (PyUnicode_CheckExact(key)) {
            remembering = remembering && seen < FASTCOMMON_SEEN && PyTuple_Check(pair);
            Py_hash_t hash = remembering ? PyObject_Hash(key) : -1; /* an exact str's, cached after the first */
            int is_new = hash != -1;
            for (j = 0; is_new && j < seen; j++) {
                is_new = seen_hashes[j] != hash || (seen_keys[j] != key && PyUnicode_Compare(seen_keys[j], key) != 0);
            }
            if (is_new) {
                seen_keys[seen] = key;
                seen_hashes[seen++] = hash;
                values = fastcommon_new_values(value);
                if (values == NULL) {
                    status = -1;
                }
                else {
                    FASTCOMMON_LOCK(metadata); /* CPython's OrderedDict does not lock itself (3.13t) */
                    status = fastcommon_ordered_set(metadata, key, values);
                    FASTCOMMON_UNLOCK();
                    Py_DECREF(values);
                }
            }
            else {
                remembering = 0; /* a key seen before: from here on, each is looked up */
                status = fastcommon_add_value(metadata, key, value, NULL);
            }
        }
        Py_DECREF(key);
        Py_DECREF(value);
        if (status != 0) {
            return status < 0 ? -1 : i; /* not a list there: only another thread could have put it */
        }
    }
    return n;
}

/* The total number of values in an exact OrderedDict whose values are all exact lists; -2 if one is not. */
static Py_ssize_t
fastcommon_count_values(PyObject *metadata)
{
    Py_ssize_t position = 0, total = 0;
    PyObject *key, *values;
    FASTCOMMON_LOCK(metadata);
    while (PyDict_Next(metadata, &position, &key, &values)) {
        if (!PyList_CheckExact(values)) {
            total = -2;
            break;
        }
        total += fastcommon_list_size(values);
    }
    FASTCOMMON_UNLOCK();
    return total;
}

/* The value under `key`, which an OrderedDict's own iterator has just given, as a new reference; NULL with the
   KeyError its items() iterator raises when it is missing. `position` walks the dict's entries alongside that
   iterator: where the next entry holds `key` itself, its value is taken from there, without a lookup. */
static PyObject *
fastcommon_value_of(PyObject *metadata, PyObject *key, Py_ssize_t *position)
{
    PyObject *found_key, *found = NULL;
    int status;
    FASTCOMMON_LOCK(metadata);
    if (PyDict_Next(metadata, position, &found_key, &found) && found_key == key) {
        Py_INCREF(found);
        status = 1;
    }
    else {
        status = fastcommon_dict_get(metadata, key, &found);
    }
    FASTCOMMON_UNLOCK();
    if (status == 0) {
        PyErr_SetObject(PyExc_KeyError, key);
    }
    return status == 1 ? found : NULL;
}

/* values[index] of an exact list, as it is now, as a new reference; past its end, `end` (a new reference to it),
   or NULL with no error set where `end` is NULL. */
static PyObject *
fastcommon_value_at(PyObject *values, Py_ssize_t index, PyObject *end)
{
    PyObject *item = NULL;
    FASTCOMMON_LOCK(values);
    if (index >= 0 && index < fastcommon_list_size(values)) {
#if defined(Py_LIMITED_API)
        item = fastcommon_list_get(values, index);
#else
        item = Py_NewRef(PyList_GET_ITEM(values, index));
#endif
    }
    FASTCOMMON_UNLOCK();
    return item != NULL ? item : Py_XNewRef(end);
}

/* Whether calling cls makes an instance with object's __new__ and then calls its __init__: a class whose
   metaclass calls as type calls, and whose __new__ is object's. */
static int
fastcommon_is_usual_class(PyObject *cls)
{
    return PyType_Check(cls)
        && FASTCOMMON_SLOT(Py_TYPE(cls), Py_tp_call, tp_call) == FASTCOMMON_SLOT(&PyType_Type, Py_tp_call, tp_call)
        && FASTCOMMON_SLOT(cls, Py_tp_new, tp_new) == FASTCOMMON_SLOT(&PyBaseObject_Type, Py_tp_new, tp_new);
}

/* Whether the attributes of cls's instances are read and set as object's are. */
static int
fastcommon_has_plain_attributes(PyObject *cls)
{
    return PyType_Check(cls)
        && FASTCOMMON_SLOT(cls, Py_tp_getattro, tp_getattro) == (void *)PyObject_GenericGetAttr
        && FASTCOMMON_SLOT(cls, Py_tp_setattro, tp_setattro) == (void *)PyObject_GenericSetAttr;
}

/* dict[key] as a new reference, or `missing` (a new reference to it) when the dict has no such key; NULL only
   with an error set. For an exact str key in a dict of str keys it runs no Python code. */
static PyObject *
fastcommon_get(PyObject *dict, PyObject *key, PyObject *missing)
{
    PyObject *found;
    int status;
    FASTCOMMON_LOCK(dict);
    status = fastcommon_dict_get(dict, key, &found);
    FASTCOMMON_UNLOCK();
    if (status == 0) {
        return Py_NewRef(missing);
    }
    return status > 0 ? found : NULL;
}

/* What cls's own __dict__ holds under `name` (where cls.name and its instances' method lookups look first), as a
   new reference; None when it holds nothing there. Setting an attribute on a class stores a str key
   (type.__setattr__ copies a str subclass to a str), but type(name, bases, namespace) keeps any key its
   namespace had, so the lookup can run a key's __eq__: its callers check again whatever they rely on after
   it. `view` is the class's own dict as type.__dict__['__dict__'] gives it, past any metaclass (a mappingproxy,
   which the Limited API reads it through; the full API reads the dict itself). */
static PyObject *
fastcommon_class_own(PyObject *cls, PyObject *view, PyObject *name)
{
    PyObject *dict, *found;
    if (!PyType_Check(cls)) {
        Py_RETURN_NONE;
    }
#if defined(Py_LIMITED_API)
    (void)dict;
    found = PyObject_GetItem(view, name);
    if (found == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return found;
#else
    (void)view;
#if PY_VERSION_HEX >= 0x030C0000
    dict = PyType_GetDict((PyTypeObject *)cls);
#else
    dict = Py_XNewRef(((PyTypeObject *)cls)->tp_dict); /* 3.10 and 3.11: the documented way to it */
#endif
    if (dict == NULL) {
        Py_RETURN_NONE;
    }
    found = fastcommon_get(dict, name, Py_None);
    Py_DECREF(dict);
    return found;
#endif
}

/* Whether `bound` is `function` bound to `self`, as an attribute lookup on self binds a method; -1 on an error. */
static int
fastcommon_is_bound(PyObject *bound, PyObject *self, PyObject *function)
{
#if defined(Py_LIMITED_API)
    PyObject *found_self = PyObject_GetAttrString(bound, "__self__");
    PyObject *found_function = found_self == NULL ? NULL : PyObject_GetAttrString(bound, "__func__");
    int is = found_self == self && found_function == function;
    Py_XDECREF(found_self);
    Py_XDECREF(found_function);
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
    }
    return is;
#else
    return PyMethod_Check(bound) && PyMethod_GET_SELF(bound) == self && PyMethod_GET_FUNCTION(bound) == function;
#endif
}

/* What object.__new__(cls) makes (its refusals included: an abstract class), for a class
   fastcommon_is_usual_class accepted. */
static PyObject *
fastcommon_new_instance(PyObject *cls)
{
    newfunc new_instance = (newfunc)FASTCOMMON_SLOT(&PyBaseObject_Type, Py_tp_new, tp_new);
    PyObject *no_args = PyTuple_New(0);
    PyObject *instance = no_args == NULL ? NULL : new_instance((PyTypeObject *)cls, no_args, NULL);
    Py_XDECREF(no_args);
    return instance;
}

/* self.name(a), self.name(a, b): the method looked up on self as Python looks it up, for each call. */
static PyObject *
fastcommon_call_method1(PyObject *self, PyObject *name, PyObject *a)
{
#if defined(Py_LIMITED_API)
    return PyObject_CallMethodObjArgs(self, name, a, NULL);
#else
    PyObject *args[2] = {self, a};
    return PyObject_VectorcallMethod(name, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
#endif
}

static PyObject *
fastcommon_call_method2(PyObject *self, PyObject *name, PyObject *a, PyObject *b)
{
#if defined(Py_LIMITED_API)
    return PyObject_CallMethodObjArgs(self, name, a, b, NULL);
#else
    PyObject *args[3] = {self, a, b};
    return PyObject_VectorcallMethod(name, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
#endif
}

/* ---------------------------------------------------------------- grpc.aio's Metadata.__iter__ */

/* What grpc's Metadata.__iter__ generator yields, (key, value) for every value under every key:

       for key, values in self._metadata.items():
           for value in values:
               yield (key, value)

   As that generator does, it reads self._metadata only when it is first asked for an item, takes each list
   as it is at each step, lets the OrderedDict's own iterator check for changes, ends for good after its last
   item or an error, and refuses to be advanced from within itself. Where _metadata is not an exact OrderedDict
   it is grpc's own generator, started then. Nothing outside reaches its state: it cannot be made from Python,
   pickled or copied, as a generator cannot. */
typedef struct {
    PyObject_HEAD
    PyObject *metadata; /* the Metadata instance */
    PyObject *own;      /* grpc's own __iter__, for a _metadata that is not an exact OrderedDict */
    PyObject *keys;     /* the OrderedDict's own iterator, once started */
    PyObject *ordered;  /* that OrderedDict */
    PyObject *key;      /* the key at hand */
    PyObject *values;   /* the exact list at hand, or NULL */
    PyObject *items;    /* an iterator over values that are not a list, or NULL */
    PyObject *delegate; /* grpc's own generator, or NULL */
    Py_ssize_t index;   /* the next value's index in values */
    Py_ssize_t position; /* where the dict's entries are walked alongside keys */
    char started, finished, running;
} fastcommon_iterator;

static PyObject *fastcommon_metadata_name;      /* "_metadata", interned */
static PyObject *fastcommon_ordered_dict_class; /* collections.OrderedDict */

/* collections.OrderedDict(), made as calling it makes one: its __new__; its __init__ does nothing without
   arguments (what type.__call__ adds is only for a class that is not the type itself). */
static PyObject *
fastcommon_new_ordered_dict(void)
{
#if defined(Py_LIMITED_API)
    return PyObject_CallNoArgs(fastcommon_ordered_dict_class);
#else
    PyObject *no_args, *made;
    if (fastcommon_ordered_dict_class != (PyObject *)&PyODict_Type) { /* not CPython's C OrderedDict */
        return PyObject_CallNoArgs(fastcommon_ordered_dict_class);
    }
    no_args = PyTuple_New(0);
    made = no_args == NULL ? NULL : PyODict_Type.tp_new(&PyODict_Type, no_args, NULL);
    Py_XDECREF(no_args);
    return made;
#endif
}

/* (key, value), taking the reference to value. */
static PyObject *
fastcommon_pair_of(PyObject *key, PyObject *value)
{
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(value);
        return NULL;
    }
#if defined(Py_LIMITED_API)
    PyTuple_SetItem(pair, 0, Py_NewRef(key));
    PyTuple_SetItem(pair, 1, value);
#else
    PyTuple_SET_ITEM(pair, 0, Py_NewRef(key));
    PyTuple_SET_ITEM(pair, 1, value);
#endif
    return pair;
}

/* Replace a field with `value` (a new reference, or NULL): the field is set before the old object goes, whose
   last reference may run Python code. */
static void
fastcommon_set_field(PyObject **field, PyObject *value)
{
    PyObject *old = *field;
    *field = value;
    Py_XDECREF(old);
}

/* obj._metadata when it is an exact OrderedDict (a new reference); NULL with no error when it is something else or
   missing; NULL with an error set when reading it raised anything but AttributeError. */
static PyObject *
fastcommon_ordered_dict_of(PyObject *obj)
{
    PyObject *found = PyObject_GetAttr(obj, fastcommon_metadata_name);
    if (found == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
        }
        return NULL;
    }
    if ((PyObject *)Py_TYPE(found) != fastcommon_ordered_dict_class) {
        Py_CLEAR(found);
    }
    return found;
}

/* The next (key, value) when no list is at hand, NULL at the end (no error set) or on an error. Python code may
   run here: every field is set before anything that runs it. */
static PyObject *
fastcommon_iterator_step(fastcommon_iterator *self)
{
    PyObject *key, *values, *value;
    if (!self->started) {
        self->started = 1;
        PyObject *ordered = fastcommon_ordered_dict_of(self->metadata);
        if (ordered == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            fastcommon_set_field(&self->delegate, PyObject_CallFunctionObjArgs(self->own, self->metadata, NULL));
            if (self->delegate == NULL) {
                return NULL;
            }
            if (!PyIter_Check(self->delegate)) { /* grpc's own gives a generator; anything else is refused */
                PyErr_Format(PyExc_TypeError, "__iter__ returned a non-iterator: %R", (PyObject *)Py_TYPE(self->delegate));
                return NULL;
            }
        }
        else if (PyObject_Length(ordered) == 0) { /* an exact OrderedDict: its own length, no Python code */
            Py_DECREF(ordered);
            return NULL;
        }
        else {
            fastcommon_set_field(&self->ordered, ordered);
            fastcommon_set_field(&self->keys, PyObject_GetIter(ordered));
            if (self->keys == NULL) {
                return NULL;
            }
        }
    }
    if (self->delegate != NULL) {
        return PyIter_Next(self->delegate);
    }
    for (;;) {
        if (self->items != NULL) { /* values that are not a list, iterated as Python iterates them */
            value = PyIter_Next(self->items);
            if (value != NULL) {
                return fastcommon_pair_of(self->key, value);
            }
            if (PyErr_Occurred()) {
                return NULL;
            }
            fastcommon_set_field(&self->items, NULL);
        }
        FASTCOMMON_LOCK(self->ordered); /* CPython's OrderedDict does not lock itself (3.13t): its writers here do */
        key = PyIter_Next(self->keys);
        FASTCOMMON_UNLOCK();
        if (key == NULL) {
            return NULL;
        }
        values = fastcommon_value_of(self->ordered, key, &self->position); /* as the items() iterator finds it */
        fastcommon_set_field(&self->key, key);
        if (values == NULL) {
            return NULL;
        }
        if (PyList_CheckExact(values)) {
            value = fastcommon_value_at(values, 0, NULL);
            if (value != NULL) {
                self->index = 1;
                fastcommon_set_field(&self->values, values);
                return fastcommon_pair_of(key, value);
            }
            Py_DECREF(values);
        }
        else {
            fastcommon_set_field(&self->items, PyObject_GetIter(values));
            Py_DECREF(values);
            if (self->items == NULL) {
                return NULL;
            }
        }
    }
}

static PyObject *
fastcommon_iterator_advance(fastcommon_iterator *self)
{
    PyObject *item = NULL;
    if (self->running) { /* from within itself (a finalizer, a value's iteration), or from a parked thread */
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        return NULL;
    }
    self->running = 1; /* what runs below (an allocation's collector, a last reference) sees it running */
    if (self->values != NULL && self->key != NULL) { /* the next value of the list at hand, as it is now */
        PyObject *value = fastcommon_value_at(self->values, self->index, NULL);
        if (value != NULL) {
            self->index++;
            item = fastcommon_pair_of(self->key, value);
            self->running = 0;
            return item;
        }
    }
    if (!self->finished) {
        self->finished = 1; /* until an item comes: an error ends it for good, as it ends a generator */
        fastcommon_set_field(&self->values, NULL);
        item = fastcommon_iterator_step(self);
        if (item != NULL) {
            self->finished = 0;
        }
    }
    self->running = 0;
    return item;
}

static PyObject *
fastcommon_iterator_next(PyObject *self)
{
    PyObject *item;
    FASTCOMMON_LOCK(self); /* its state is one thread's at a time */
    item = fastcommon_iterator_advance((fastcommon_iterator *)self);
    FASTCOMMON_UNLOCK();
    return item;
}

static int
fastcommon_iterator_traverse(PyObject *op, visitproc visit, void *arg)
{
    fastcommon_iterator *self = (fastcommon_iterator *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->metadata);
    Py_VISIT(self->own);
    Py_VISIT(self->keys);
    Py_VISIT(self->ordered);
    Py_VISIT(self->key);
    Py_VISIT(self->values);
    Py_VISIT(self->items);
    Py_VISIT(self->delegate);
    return 0;
}

/* Breaks a cycle through it; a step that then finds metadata or own gone raises, as grpc's own would find
   nothing to iterate. */
static int
fastcommon_iterator_clear(PyObject *op)
{
    fastcommon_iterator *self = (fastcommon_iterator *)op;
    self->finished = 1;
    Py_CLEAR(self->values);
    Py_CLEAR(self->items);
    Py_CLEAR(self->key);
    Py_CLEAR(self->metadata);
    Py_CLEAR(self->own);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->ordered);
    Py_CLEAR(self->delegate);
    return 0;
}

/* One iterator's memory kept for the next (an aio call makes one a call): where a GIL makes it one thread's. */
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
static PyObject *fastcommon_spare_iterator;
#define FASTCOMMON_SPARE_ITERATOR 1
#else
#define FASTCOMMON_SPARE_ITERATOR 0
#endif

static void
fastcommon_iterator_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    (void)fastcommon_iterator_clear(op);
#if FASTCOMMON_SPARE_ITERATOR
    if (fastcommon_spare_iterator == NULL) { /* PyObject_Init takes the type's reference again when it is reused */
        fastcommon_spare_iterator = op;
        Py_DECREF(type);
        return;
    }
#endif
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(op);
    Py_DECREF(type);
}

static PyType_Slot fastcommon_iterator_slots[] = {
    {Py_tp_doc, (void *)"What grpc's Metadata.__iter__ generator yields, (key, value) for every value under every "
                        "key, in C."},
    {Py_tp_iter, (void *)PyObject_SelfIter},
    {Py_tp_iternext, (void *)fastcommon_iterator_next},
    {Py_tp_traverse, (void *)fastcommon_iterator_traverse},
    {Py_tp_clear, (void *)fastcommon_iterator_clear},
    {Py_tp_dealloc, (void *)fastcommon_iterator_dealloc},
    {0, NULL},
};

static PyType_Spec fastcommon_iterator_spec = {
    "fastcommon.fast_common.MetadataIterator",
    sizeof(fastcommon_iterator),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    fastcommon_iterator_slots,
};

static PyObject *fastcommon_iterator_class; /* made once, when the module is imported */

/* The MetadataIterator class; `ordered_dict` is collections.OrderedDict. Called once, at import. */
static PyObject *
fastcommon_iterator_type(PyObject *ordered_dict)
{
    fastcommon_metadata_name = PyUnicode_InternFromString("_metadata");
    if (fastcommon_metadata_name == NULL) {
        return NULL;
    }
    fastcommon_ordered_dict_class = Py_NewRef(ordered_dict);
    fastcommon_iterator_class = PyType_FromSpec(&fastcommon_iterator_spec);
    return Py_XNewRef(fastcommon_iterator_class);
}

/* A new iterator over `metadata`, which grpc's `own` __iter__ would iterate. */
static PyObject *
fastcommon_iterator_new(PyObject *metadata, PyObject *own)
{
    PyTypeObject *type = (PyTypeObject *)fastcommon_iterator_class;
    fastcommon_iterator *self;
#if FASTCOMMON_SPARE_ITERATOR
    if (fastcommon_spare_iterator != NULL) { /* cleared by its dealloc, untracked: as new once initialized */
        self = (fastcommon_iterator *)fastcommon_spare_iterator;
        fastcommon_spare_iterator = NULL;
        PyObject_Init((PyObject *)self, type);
        self->index = self->position = 0;
        self->started = self->finished = self->running = 0;
        self->metadata = Py_NewRef(metadata);
        self->own = Py_NewRef(own);
        PyObject_GC_Track(self);
        return (PyObject *)self;
    }
#endif
    self = (fastcommon_iterator *)((allocfunc)PyType_GetSlot(type, Py_tp_alloc))(type, 0); /* zeroed, tracked */
    if (self != NULL) {
        self->metadata = Py_NewRef(metadata);
        self->own = Py_NewRef(own);
    }
    return (PyObject *)self;
}

/* ---------------------------------------------------------------- the metadata entry constructor */

#if defined(Py_LIMITED_API)

/* A tuple's layout (3.14 added a hash cache to it) is not part of the Limited API, and the abi3 wheel
   runs on CPythons newer than fastcommon: there grpc's metadata entries stay grpc's. */
#define FASTCOMMON_HAS_METADATUM 0

static PyObject *
fastcommon_constructor_type(void)
{
    Py_RETURN_NONE;
}

#else

#define FASTCOMMON_HAS_METADATUM 1

/* What a tuple's allocation leaves to whoever fills one in place, by CPython version: 3.14 and 3.15 cache
   a tuple's hash in it, and tuple.__new__ marks it not computed yet. A CPython not checked here fails the
   build, rather than build entries whose hash could be wrong; the extension then stays out (setup.py). */
#if PY_VERSION_HEX >= 0x03100000
#error "fastcommon: check how this CPython lays out a tuple (fastcommon_build_entry) before building for it"
#elif PY_VERSION_HEX >= 0x030E0000
#define FASTCOMMON_RESET_TUPLE_HASH(op) (((PyTupleObject *)(op))->ob_hash = -1)
#else
#define FASTCOMMON_RESET_TUPLE_HASH(op) ((void)0)
#endif

/* MetadatumConstructor(cls) holds the one class it checked when it was made; its `build`, a builtin method
   bound to it (before CPython 3.11 and from 3.15 the object itself), is what grpc calls: what namedtuple's
   __new__ does for cls(key, value), which is tuple.__new__(cls, (key, value)), without the Python frame and
   the two temporary tuples. Each is what its CPython's interpreter and Cython call fastest, with no lookup
   or check between. Nothing
   can change the class later, so what grpc calls shares no state with a gate, a status or a test that makes
   another. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* before 3.11 and from 3.15 the object itself is what grpc calls */
    PyObject *cls;      /* a tuple subclass with exactly a tuple's layout; never NULL, never replaced */
    Py_ssize_t counter; /* where it counts its calls for `run --report`, or -1 */
} fastcommon_constructor;

/* The deallocator of a class a `class` statement makes (subtype_dealloc): that of a plain subclass of tuple
   made when the module is imported. */
static destructor fastcommon_python_class_dealloc;

/* Why instances of cls cannot be built as a tuple of two items written in place; NULL if they can.
   A subclass's __bases__ can be reassigned only between layout-compatible bases, and a type's sizes
   never change, so what is checked here holds for the class's whole life. */
static const char *
fastcommon_tuple_layout_problem(PyObject *cls)
{
    PyTypeObject *type, *base;
    if (!PyType_Check(cls)) {
        return "is not a class";
    }
    type = (PyTypeObject *)cls;
    if (type == &PyTuple_Type) {
        return "is tuple itself";
    }
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        return "is not a subclass of tuple";
    }
    /* Every class from it down to tuple made by a class statement: a C subclass (a structseq, say) frees and
       visits fields of its own beyond the two items written here. */
    for (base = type; base != &PyTuple_Type; base = base->tp_base) {
        if (base == NULL || !PyType_HasFeature(base, Py_TPFLAGS_HEAPTYPE)
            || base->tp_dealloc != fastcommon_python_class_dealloc) {
            return "is not made by a class statement from tuple";
        }
    }
    if (type->tp_new == NULL) {
        return "cannot be instantiated";
    }
    if (!PyType_HasFeature(type, Py_TPFLAGS_HAVE_GC)) {
        return "is not tracked by the garbage collector";
    }
    if (type->tp_dictoffset != 0 || type->tp_weaklistoffset != 0) {
        return "has a __dict__ or a __weakref__";
    }
#ifdef Py_TPFLAGS_MANAGED_DICT
    if (PyType_HasFeature(type, Py_TPFLAGS_MANAGED_DICT)) {
        return "has a __dict__";
    }
#endif
#ifdef Py_TPFLAGS_MANAGED_WEAKREF
    if (PyType_HasFeature(type, Py_TPFLAGS_MANAGED_WEAKREF)) {
        return "has a __weakref__";
    }
#endif
    if (type->tp_basicsize != PyTuple_Type.tp_basicsize || type->tp_itemsize != PyTuple_Type.tp_itemsize) {
        return "has fields of its own";
    }
    return NULL;
}

static PyObject *
fastcommon_build_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *cls = ((fastcommon_constructor *)self)->cls;
    PyTupleObject *entry;
    if (nargs != 2 || kwnames != NULL) {
        /* Any other call is the class's own, its errors included. */
        return PyObject_Vectorcall(cls, args, (size_t)nargs, kwnames);
    }
#if PY_VERSION_HEX >= 0x030C0000
    /* The class's own allocation, zeroed and tracked, as tuple.__new__ makes a subclass's: from 3.12 it costs
       fewer instructions than the allocation of a tuple of two below, which costs fewer before. */
    entry = (PyTupleObject *)((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 2);
    if (entry == NULL) {
        return NULL;
    }
    entry->ob_item[0] = Py_NewRef(args[0]);
    entry->ob_item[1] = Py_NewRef(args[1]);
    FASTCOMMON_RESET_TUPLE_HASH(entry);
#else
    /* As a tuple of two is allocated: its items are set before the garbage collector can see it. */
    entry = PyObject_GC_NewVar(PyTupleObject, (PyTypeObject *)cls, 2);
    if (entry == NULL) {
        return NULL;
    }
    entry->ob_item[0] = Py_NewRef(args[0]);
    entry->ob_item[1] = Py_NewRef(args[1]);
    FASTCOMMON_RESET_TUPLE_HASH(entry);
    PyObject_GC_Track(entry);
#endif
    return (PyObject *)entry;
}

static PyObject *
fastcommon_build_counted_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    fastcommon_count(((fastcommon_constructor *)self)->counter);
    return fastcommon_build_entry(self, args, nargs, kwnames);
}

/* The object itself, called (through vectorcall): what grpc calls before CPython 3.11, where calling a builtin
   method costs a recursion check that calling an object with vectorcall does not, and from 3.15. */
static PyObject *
fastcommon_constructor_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return fastcommon_build_entry(self, args, PyVectorcall_NARGS(nargsf), kwnames);
}

static PyObject *
fastcommon_constructor_counted_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    fastcommon_count(((fastcommon_constructor *)self)->counter);
    return fastcommon_build_entry(self, args, PyVectorcall_NARGS(nargsf), kwnames);
}

#define FASTCOMMON_BUILD_DOC "_Metadatum(key, value)\n--\n\nThe metadata entry cls(key, value), built in place; any " \
    "other call is cls's own."
static PyMethodDef fastcommon_build_def = {
    "_Metadatum", (PyCFunction)(void (*)(void))fastcommon_build_entry, METH_FASTCALL | METH_KEYWORDS,
    FASTCOMMON_BUILD_DOC,
};
static PyMethodDef fastcommon_build_counted_def = {
    "_Metadatum", (PyCFunction)(void (*)(void))fastcommon_build_counted_entry, METH_FASTCALL | METH_KEYWORDS,
    FASTCOMMON_BUILD_DOC,
};

static PyObject *
fastcommon_constructor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"", "counter", NULL};
    PyObject *cls;
    Py_ssize_t counter = -1;
    const char *problem;
    fastcommon_constructor *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$n:MetadatumConstructor", keywords, &cls, &counter)) {
        return NULL;
    }
    problem = fastcommon_tuple_layout_problem(cls);
    if (problem != NULL) {
        PyErr_Format(PyExc_TypeError, "MetadatumConstructor() needs a tuple subclass with a tuple's layout: %R %s",
                     cls, problem);
        return NULL;
    }
    if (counter < -1 || counter >= FASTCOMMON_MAX_COUNTERS) {
        PyErr_Format(PyExc_ValueError, "MetadatumConstructor(): no counter %zd", counter);
        return NULL;
    }
    self = (fastcommon_constructor *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = counter >= 0 ? fastcommon_constructor_counted_vectorcall : fastcommon_constructor_vectorcall;
    self->cls = Py_NewRef(cls);
    self->counter = counter;
    return (PyObject *)self;
}

static int
fastcommon_constructor_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(((fastcommon_constructor *)self)->cls);
    return 0;
}

/* No tp_clear: cls is never NULL while the object lives. A cycle through it is broken at the class,
   whose own tp_clear empties its dict. */

static void
fastcommon_constructor_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_DECREF(((fastcommon_constructor *)self)->cls);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
fastcommon_constructor_repr(PyObject *self)
{
    fastcommon_constructor *constructor = (fastcommon_constructor *)self;
    return PyUnicode_FromFormat("<fastcommon metadata entry constructor of %R%s>", constructor->cls,
                                constructor->counter >= 0 ? ", counted" : "");
}

/* What grpc calls: a builtin method bound to this object (a new one each time it is asked for), which CPython
   3.11 to 3.14 and Cython call without a hop between; before 3.11 and from 3.15, the object itself, which
   those CPythons call in fewer instructions (callgrind: 3.15, 611 against 614). */
static PyObject *
fastcommon_constructor_get_build(PyObject *self, void *closure)
{
    (void)closure;
#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030F0000
    return Py_NewRef(self);
#else
    int counted = ((fastcommon_constructor *)self)->counter >= 0;
    return PyCFunction_NewEx(counted ? &fastcommon_build_counted_def : &fastcommon_build_def, self, NULL);
#endif
}

static PyMemberDef fastcommon_constructor_members[] = {
    {"cls", T_OBJECT_EX, offsetof(fastcommon_constructor, cls), READONLY, "the class whose entries it builds"},
    {"counter", T_PYSSIZET, offsetof(fastcommon_constructor, counter), READONLY,
     "where it counts its calls (a position in COUNTED), or -1"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(fastcommon_constructor, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef fastcommon_constructor_getset[] = {
    {"build", fastcommon_constructor_get_build, NULL, "what builds cls(key, value): a builtin method, or itself", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot fastcommon_constructor_slots[] = {
    {Py_tp_doc, (void *)"MetadatumConstructor(cls, /, *, counter=-1)\n--\n\n"
                        "Holds a namedtuple cls of two fields, checked; its build(key, value) builds cls(key, value) "
                        "as its __new__ does, and sends any other call to cls."},
    {Py_tp_new, (void *)fastcommon_constructor_new},
    {Py_tp_dealloc, (void *)fastcommon_constructor_dealloc},
    {Py_tp_traverse, (void *)fastcommon_constructor_traverse},
    {Py_tp_repr, (void *)fastcommon_constructor_repr},
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_members, (void *)fastcommon_constructor_members},
    {Py_tp_getset, (void *)fastcommon_constructor_getset},
    {0, NULL},
};

static PyType_Spec fastcommon_constructor_spec = {
    "fastcommon.fast_common.MetadatumConstructor",
    sizeof(fastcommon_constructor),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE,
    fastcommon_constructor_slots,
};

/* The MetadatumConstructor class, made once when the module is imported. */
static PyObject *
fastcommon_constructor_type(void)
{
    PyObject *plain = PyObject_CallFunction((PyObject *)&PyType_Type, "s(O){s()}", "Plain", &PyTuple_Type,
                                            "__slots__");
    if (plain == NULL) {
        return NULL;
    }
    fastcommon_python_class_dealloc = ((PyTypeObject *)plain)->tp_dealloc;
    Py_DECREF(plain);
    return PyType_FromSpec(&fastcommon_constructor_spec);
}

#endif /* Py_LIMITED_API */

#endif /* FASTCOMMON_FAST_COMMON_H */
