/* MetadataIterator: what grpc's Metadata.__iter__ generator yields, in C:
 *     for key, values in self._metadata.items():
 *         for value in values:
 *             yield (key, value)
 * As it does, it reads self._metadata at the first item, takes each list as it is at each step, lets the OrderedDict's
 * iterator see changes, lets go of everything once it ends, refuses to be advanced from within itself, makes a
 * StopIteration from code it runs RuntimeError (PEP 479), and takes weak references. `start` (fast_metadata.pyx) gives
 * back an exact OrderedDict of exact str keys, walked here (finding values runs no Python code), or grpc's generator.
 * C: an aio call's hottest step (3.11: a Cython class ~190 instructions more an item, a generator 1,000 a call). */
#ifndef FASTCOMMON_ITERATOR_H
#define FASTCOMMON_ITERATOR_H

#include <Python.h>
#include <structmember.h>

#include "compat.h"

typedef struct {
    PyObject_HEAD
    PyObject *metadata, *start; /* the Metadata, held until the end as the generator's frame holds self */
    PyObject *ordered, *keys;   /* the exact OrderedDict walked here, and its own key iterator; or none */
    PyObject *rest;             /* grpc's generator where it is not walked here; an iterator over values not a list */
    PyObject *key, *values, *value; /* the key at hand, its values, and the value last given (the generator's locals) */
    Py_ssize_t index, position; /* the next value's index in a list; where the dict's entries are walked */
    PyObject *weakrefs;
    char started, running, finished;
} fastcommon_iterator;

/* In the order an ended generator lets them go: its loops' iterators, then its frame's locals. */
#define FASTCOMMON_ITERATOR_FIELDS(apply) \
    apply(rest) apply(keys) apply(ordered) apply(metadata) apply(start) apply(key) apply(values) apply(value)

static FASTCOMMON_NOINLINE PyObject * /* PyIter_Next, where a Metadata among another's values recurses: in C */
fastcommon_next_of(PyObject *iterator)
{
    PyObject *item = NULL;
    if (Py_EnterRecursiveCall("") == 0) {
        item = PyIter_Next(iterator);
        Py_LeaveRecursiveCall();
    }
    return item;
}

/* The next item, NULL at the end (no error set) or on an error. Python code may run here. */
static PyObject *
fastcommon_iterator_step(fastcommon_iterator *self)
{
    PyObject *value, *key, *values, *found_key;
    if (!self->started) { /* the generator's first step: start(metadata) reads self._metadata */
        self->started = 1;
        PyObject *started = fastcommon_call_one(self->start, self->metadata);
        if (started == NULL || started == Py_None) {
            Py_XDECREF(started);
            return NULL;
        }
        if (!PyDict_Check(started)) { /* not the exact OrderedDict start() gives back to be walked here */
            self->rest = started;
        }
        else {
            self->ordered = started;
            if ((self->keys = PyObject_GetIter(started)) == NULL) {
                return NULL;
            }
        }
    }
    if (self->keys == NULL) { /* grpc's own generator */
        return fastcommon_next_of(self->rest);
    }
    for (;;) {
        value = NULL;
        if (self->rest == NULL && self->values != NULL && PyList_CheckExact(self->values)) { /* as it is now */
            FASTCOMMON_LOCK(self->values);
            if (self->index < fastcommon_list_size(self->values)) {
                value = fastcommon_list_item(self->values, self->index);
                self->index++;
            }
            FASTCOMMON_UNLOCK();
        }
        else if (self->rest != NULL) { /* values that are not a list, iterated as Python iterates them */
            if ((value = fastcommon_next_of(self->rest)) == NULL && PyErr_Occurred()) {
                return NULL;
            }
        }
        if (value != NULL) { /* (key, value), holding value until the next */
            Py_XSETREF(self->value, value);
            return fastcommon_pair(self->key, value);
        }
        Py_CLEAR(self->rest); /* as the generator's for loop lets an ended iterator go; its values stay */
        FASTCOMMON_LOCK(self->ordered); /* CPython's OrderedDict does not lock itself (3.13t) */
        key = PyIter_Next(self->keys);
        FASTCOMMON_UNLOCK();
        if (key == NULL) {
            return NULL;
        }
        /* Its values, as the items() iterator finds them: where the dict's next entry holds that very exact str
           key, taken from there; else looked up (only a collector's callback could have added another key). */
        FASTCOMMON_LOCK(self->ordered);
        if (!PyUnicode_CheckExact(key) || !PyDict_Next(self->ordered, &self->position, &found_key, &values)
            || found_key != key) {
            values = PyDict_GetItemWithError(self->ordered, key);
        }
        Py_XINCREF(values);
        FASTCOMMON_UNLOCK();
        Py_XSETREF(self->key, key); /* then the values at hand go: the generator's order */
        Py_XSETREF(self->values, values);
        if (values == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, key);
            }
            return NULL;
        }
        self->index = 0;
        if (!PyList_CheckExact(values) && (self->rest = PyObject_GetIter(values)) == NULL) {
            return NULL;
        }
    }
}

static inline int /* inline: next ends iterators with it, which gcc stops inlining once dealloc takes its address */
fastcommon_iterator_clear(PyObject *op)
{
    fastcommon_iterator *self = (fastcommon_iterator *)op;
    self->finished = 1; /* first: what letting go runs (a finalizer) finds it ended, as a finished generator is */
#define FASTCOMMON_CLEAR(field) Py_CLEAR(self->field);
    FASTCOMMON_ITERATOR_FIELDS(FASTCOMMON_CLEAR)
    return 0;
}

/* A StopIteration raised by code the iteration runs, as RuntimeError from it: what a generator does (PEP 479). */
static FASTCOMMON_NOINLINE void
fastcommon_stop_iteration_raised(void)
{
    PyObject *type, *stop, *traceback, *error;
    PyErr_Fetch(&type, &stop, &traceback);
    PyErr_NormalizeException(&type, &stop, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(stop, traceback);
    }
    error = PyObject_CallFunction(PyExc_RuntimeError, "s", "generator raised StopIteration");
    if (error != NULL) {
        PyException_SetCause(error, Py_NewRef(stop)); /* steals; sets __suppress_context__ */
        PyException_SetContext(error, Py_NewRef(stop));
        PyErr_Restore(Py_NewRef(PyExc_RuntimeError), error, NULL);
    }
    Py_XDECREF(type);
    Py_XDECREF(stop);
    Py_XDECREF(traceback);
}

static PyObject *
fastcommon_iterator_next(PyObject *op)
{
    fastcommon_iterator *self = (fastcommon_iterator *)op;
    PyObject *item = NULL;
    FASTCOMMON_LOCK(op); /* its state is one thread's at a time */
    if (!self->finished && self->running) { /* from within itself, or from a parked thread */
        PyErr_SetString(PyExc_ValueError, "generator already executing");
    }
    else if (!self->finished) { /* (once it has ended, NULL without an error: StopIteration) */
        self->running = 1;
        item = fastcommon_iterator_step(self);
        self->running = 0;
        if (item == NULL) {
            if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_StopIteration)) {
                fastcommon_stop_iteration_raised();
            }
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
#define FASTCOMMON_VISIT(field) Py_VISIT(self->field);
    FASTCOMMON_ITERATOR_FIELDS(FASTCOMMON_VISIT)
    return 0;
}

static void
fastcommon_iterator_dealloc(PyObject *op)
{
    fastcommon_dealloc(op, ((fastcommon_iterator *)op)->weakrefs, fastcommon_iterator_clear, NULL);
}

static PyMemberDef fastcommon_iterator_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(fastcommon_iterator, weakrefs), READONLY, NULL}, {NULL, 0, 0, 0, NULL}};

static PyType_Slot fastcommon_iterator_slots[] = {
    {Py_tp_doc, (void *)"(key, value) for every value under every key: grpc's Metadata.__iter__, in C."},
    {Py_tp_iter, (void *)PyObject_SelfIter}, {Py_tp_iternext, (void *)fastcommon_iterator_next},
    {Py_tp_traverse, (void *)fastcommon_iterator_traverse}, {Py_tp_clear, (void *)fastcommon_iterator_clear},
    {Py_tp_dealloc, (void *)fastcommon_iterator_dealloc}, {Py_tp_members, (void *)fastcommon_iterator_members},
    {0, NULL}};

static PyType_Spec fastcommon_iterator_spec = {"fastcommon.fast_metadata.MetadataIterator", sizeof(fastcommon_iterator), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    fastcommon_iterator_slots};

#define fastcommon_iterator_type() PyType_FromSpec(&fastcommon_iterator_spec) /* once, at import */

static PyObject * /* a new iterator of class `type` over `metadata`, started by `start` */
fastcommon_iterator_new(PyObject *type, PyObject *metadata, PyObject *start)
{
    fastcommon_iterator *self = (fastcommon_iterator *)PyType_GenericAlloc((PyTypeObject *)type, 0); /* zeroed */
    if (self != NULL) {
        self->metadata = Py_NewRef(metadata);
        self->start = Py_NewRef(start);
    }
    return (PyObject *)self;
}

#endif /* FASTCOMMON_ITERATOR_H */
