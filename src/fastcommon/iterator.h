/* MetadataIterator: what grpc's Metadata.__iter__ generator yields, in C.
 *
 *     for key, values in self._metadata.items():
 *         for value in values:
 *             yield (key, value)
 *
 * As that generator does, it reads self._metadata when it is first asked for an item, takes each list as it is at
 * each step, lets the OrderedDict's own iterator see changes, lets go of everything once it ends (after its last
 * item, or an error), and refuses to be advanced from within itself. It walks the OrderedDict itself only where
 * _metadata is an exact OrderedDict whose keys are all exact str: then finding a key's values runs no Python code,
 * as it does not in the generator. Anything else goes to `generic`: grpc's own generator, made over the _metadata
 * it read (fast_common.pyx). Not in a Limited API (abi3) build, which leaves __iter__ to grpc.
 *
 * C because a Cython class must raise StopIteration to end, with a traceback, and a generator compiled by Cython is
 * made with a closure and walks an items view: on CPython 3.11 either costs about 1,000 instructions more per
 * iteration of an empty Metadata than this, which keeps one spare iterator for the next (a call makes one).
 */
#ifndef FASTCOMMON_ITERATOR_H
#define FASTCOMMON_ITERATOR_H

#include <Python.h>

#if defined(Py_LIMITED_API) /* an OrderedDict's and a list's insides are not in it */

#define FASTCOMMON_HAS_ITERATOR 0

static PyObject *
fastcommon_iterator_type(void)
{
    Py_RETURN_NONE;
}

static PyObject *
fastcommon_iterator_new(PyObject *type, PyObject *metadata, PyObject *generic)
{
    (void)type;
    (void)metadata;
    (void)generic;
    Py_RETURN_NONE;
}

#else

#define FASTCOMMON_HAS_ITERATOR 1

typedef struct {
    PyObject_HEAD
    PyObject *metadata; /* the Metadata, until its _metadata is read */
    PyObject *generic;  /* what iterates anything else: generic(_metadata) */
    PyObject *ordered;  /* the exact OrderedDict walked here */
    PyObject *keys;     /* its own key iterator */
    PyObject *rest;     /* generic(_metadata), or an iterator over values that are not a list */
    PyObject *key;      /* the key at hand */
    PyObject *values;   /* its exact list */
    Py_ssize_t index;   /* the next value's index in values */
    Py_ssize_t position; /* where the dict's entries are walked alongside keys */
    char running;
} fastcommon_iterator;

#if defined(Py_GIL_DISABLED)
#define FASTCOMMON_LOCK(op) Py_BEGIN_CRITICAL_SECTION(op)
#define FASTCOMMON_UNLOCK() Py_END_CRITICAL_SECTION()
#else
#define FASTCOMMON_LOCK(op) {
#define FASTCOMMON_UNLOCK() }
#endif

static PyObject *fastcommon_metadata_name; /* "_metadata", interned */

/* Replace a field: the field is set before the old object goes, whose last reference may run Python code. */
static void
fastcommon_set_field(PyObject **field, PyObject *value)
{
    PyObject *old = *field;
    *field = value;
    Py_XDECREF(old);
}

/* 1 when every key of an exact OrderedDict is an exact str; 0 if one is not; -1 when it is empty. */
static int
fastcommon_str_keys(PyObject *ordered)
{
    Py_ssize_t position = 0;
    PyObject *key, *values;
    int found = -1;
    FASTCOMMON_LOCK(ordered);
    while (PyDict_Next(ordered, &position, &key, &values)) {
        found = PyUnicode_CheckExact(key);
        if (!found) {
            break;
        }
    }
    FASTCOMMON_UNLOCK();
    return found;
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
    PyTuple_SET_ITEM(pair, 0, Py_NewRef(key));
    PyTuple_SET_ITEM(pair, 1, value);
    return pair;
}

/* The next item, NULL at the end (no error set) or on an error. Python code may run here. */
static PyObject *
fastcommon_iterator_step(fastcommon_iterator *self)
{
    PyObject *value, *key, *values;
    if (self->metadata != NULL) { /* the generator's first step: self._metadata, then its items */
        PyObject *metadata = self->metadata, *ordered;
        self->metadata = NULL;
        ordered = PyObject_GetAttr(metadata, fastcommon_metadata_name);
        Py_DECREF(metadata);
        if (ordered == NULL) {
            return NULL;
        }
        int str_keys = Py_IS_TYPE(ordered, &PyODict_Type) ? fastcommon_str_keys(ordered) : 0;
        if (str_keys < 0) { /* empty */
            Py_DECREF(ordered);
            return NULL;
        }
        if (str_keys) {
            fastcommon_set_field(&self->keys, PyObject_GetIter(ordered));
            fastcommon_set_field(&self->ordered, ordered);
            if (self->keys == NULL) {
                return NULL;
            }
        }
        else {
            fastcommon_set_field(&self->rest, PyObject_CallOneArg(self->generic, ordered));
            Py_DECREF(ordered);
            if (self->rest == NULL) {
                return NULL;
            }
        }
    }
    for (;;) {
        if (self->values != NULL) { /* the list at hand, as it is now */
            value = NULL;
            FASTCOMMON_LOCK(self->values);
            if (self->index < PyList_GET_SIZE(self->values)) {
                value = Py_NewRef(PyList_GET_ITEM(self->values, self->index));
                self->index++;
            }
            FASTCOMMON_UNLOCK();
            if (value != NULL) {
                return fastcommon_pair_of(self->key, value);
            }
        }
        else if (self->rest != NULL) {
            value = PyIter_Next(self->rest);
            if (value != NULL) {
                return self->keys == NULL ? value : fastcommon_pair_of(self->key, value);
            }
            if (PyErr_Occurred() || self->keys == NULL) {
                return NULL;
            }
            fastcommon_set_field(&self->rest, NULL); /* as the generator's for loop lets an ended iterator go */
        }
        if (self->keys == NULL) {
            return NULL;
        }
        FASTCOMMON_LOCK(self->ordered); /* CPython's OrderedDict does not lock itself (3.13t) */
        key = PyIter_Next(self->keys);
        FASTCOMMON_UNLOCK();
        if (key == NULL) {
            return NULL;
        }
        /* Its values, as the items() iterator finds them: an exact str key, looked up without Python code; where
           the dict's next entry holds that very key, taken from there. */
        FASTCOMMON_LOCK(self->ordered);
        PyObject *found_key;
        if (!PyDict_Next(self->ordered, &self->position, &found_key, &values) || found_key != key) {
            values = PyDict_GetItemWithError(self->ordered, key);
        }
        Py_XINCREF(values);
        FASTCOMMON_UNLOCK();
        fastcommon_set_field(&self->key, key); /* then the values at hand go: the generator's order */
        fastcommon_set_field(&self->values, NULL);
        if (values == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, key);
            }
            return NULL;
        }
        if (PyList_CheckExact(values)) {
            self->values = values;
            self->index = 0;
        }
        else {
            fastcommon_set_field(&self->rest, PyObject_GetIter(values));
            Py_DECREF(values);
            if (self->rest == NULL) {
                return NULL;
            }
        }
    }
}

static int
fastcommon_iterator_clear(PyObject *op)
{
    fastcommon_iterator *self = (fastcommon_iterator *)op;
    Py_CLEAR(self->metadata);
    Py_CLEAR(self->generic);
    Py_CLEAR(self->ordered);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->rest);
    Py_CLEAR(self->key);
    Py_CLEAR(self->values);
    return 0;
}

static PyObject *
fastcommon_iterator_next(PyObject *op)
{
    fastcommon_iterator *self = (fastcommon_iterator *)op;
    PyObject *item;
    FASTCOMMON_LOCK(op); /* its state is one thread's at a time */
    if (self->running) { /* from within itself (a value's iteration, a finalizer), or from a parked thread */
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        item = NULL;
    }
    else {
        self->running = 1;
        item = fastcommon_iterator_step(self);
        self->running = 0; /* before anything it lets go of can run Python code */
        if (item == NULL) {
            (void)fastcommon_iterator_clear(op); /* ended for good, as a generator ends */
        }
    }
    FASTCOMMON_UNLOCK();
    return item;
}

static int
fastcommon_iterator_traverse(PyObject *op, visitproc visit, void *arg)
{
    fastcommon_iterator *self = (fastcommon_iterator *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->metadata);
    Py_VISIT(self->generic);
    Py_VISIT(self->ordered);
    Py_VISIT(self->keys);
    Py_VISIT(self->rest);
    Py_VISIT(self->key);
    Py_VISIT(self->values);
    return 0;
}

/* One iterator's memory kept for the next, where a GIL makes it one thread's. */
#if !defined(Py_GIL_DISABLED)
static PyObject *fastcommon_spare_iterator;
#endif

static void
fastcommon_iterator_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    (void)fastcommon_iterator_clear(op);
#if !defined(Py_GIL_DISABLED)
    if (fastcommon_spare_iterator == NULL) { /* PyObject_Init takes the type's reference again when it is reused */
        fastcommon_spare_iterator = op;
        Py_DECREF(type);
        return;
    }
#endif
    PyObject_GC_Del(op);
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

/* The MetadataIterator class, made once when the module is imported. */
static PyObject *
fastcommon_iterator_type(void)
{
    fastcommon_metadata_name = PyUnicode_InternFromString("_metadata");
    return fastcommon_metadata_name == NULL ? NULL : PyType_FromSpec(&fastcommon_iterator_spec);
}

/* A new iterator of class `type` over `metadata`, which `generic` iterates where it does not walk it itself. */
static PyObject *
fastcommon_iterator_new(PyObject *type, PyObject *metadata, PyObject *generic)
{
    fastcommon_iterator *self;
#if !defined(Py_GIL_DISABLED)
    if (fastcommon_spare_iterator != NULL && Py_TYPE(fastcommon_spare_iterator) == (PyTypeObject *)type) {
        self = (fastcommon_iterator *)fastcommon_spare_iterator; /* cleared and untracked by its dealloc */
        fastcommon_spare_iterator = NULL;
        PyObject_Init((PyObject *)self, (PyTypeObject *)type);
        self->running = 0;
        self->index = self->position = 0;
        self->metadata = Py_NewRef(metadata);
        self->generic = Py_NewRef(generic);
        PyObject_GC_Track(self);
        return (PyObject *)self;
    }
#endif
    self = PyObject_GC_New(fastcommon_iterator, (PyTypeObject *)type);
    if (self == NULL) {
        return NULL;
    }
    self->metadata = Py_NewRef(metadata);
    self->generic = Py_NewRef(generic);
    self->ordered = self->keys = self->rest = self->key = self->values = NULL;
    self->index = self->position = 0;
    self->running = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

#endif /* Py_LIMITED_API */

#endif /* FASTCOMMON_ITERATOR_H */
