/* What the compiled modules reach through the full C API, and what stands in for it in the Limited API (abi3). */
#ifndef FASTCOMMON_COMPAT_H
#define FASTCOMMON_COMPAT_H

#include <Python.h>

#if defined(Py_LIMITED_API)
#define FASTCOMMON_LIMITED_API 1
#define fastcommon_bytes_data PyBytes_AsString
#define fastcommon_bytes_size PyBytes_Size
#define fastcommon_new_ordered_dict(ordered_dict) PyObject_CallNoArgs(ordered_dict)
#define fastcommon_ordered_set PyObject_SetItem
#define fastcommon_list_size PyList_Size
#define fastcommon_list_item(list, i) Py_XNewRef(PyList_GetItem((list), (i))) /* checked: i < its size */
#define fastcommon_pair(key, value) PyTuple_Pack(2, (key), (value))
#define fastcommon_call_one(callable, arg) PyObject_CallFunctionObjArgs((callable), (arg), NULL)
#define Py_XSETREF(field, value) do { PyObject *old = (PyObject *)(field); (field) = (value); Py_XDECREF(old); } while (0)
#else
#define FASTCOMMON_LIMITED_API 0
#define fastcommon_bytes_data PyBytes_AS_STRING
#define fastcommon_bytes_size PyBytes_GET_SIZE
#define fastcommon_new_ordered_dict(ordered_dict) PyODict_New() /* OrderedDict() but its __init__, a no-op here */
#define fastcommon_ordered_set PyODict_SetItem /* what an OrderedDict's item assignment calls */
#define fastcommon_list_size PyList_GET_SIZE
#define fastcommon_list_item(list, i) Py_NewRef(PyList_GET_ITEM((list), (i)))
#define fastcommon_call_one PyObject_CallOneArg
#endif

#if defined(__GNUC__) /* a slow path kept out of the hot loop that calls it (gcc, clang) */
#define FASTCOMMON_NOINLINE __attribute__((noinline))
#else
#define FASTCOMMON_NOINLINE
#endif

#if defined(Py_GIL_DISABLED) /* critical sections: without free threading they do nothing */
#define FASTCOMMON_LOCK(op) Py_BEGIN_CRITICAL_SECTION(op)
#define FASTCOMMON_UNLOCK() Py_END_CRITICAL_SECTION()
#else
#define FASTCOMMON_LOCK(op) {
#define FASTCOMMON_UNLOCK() }
#endif

/* The tp_dealloc of this package's classes, all tracked by the garbage collector and reached by weak references:
   untracked, weak references cleared, then what it holds let go of (`clear`, or the one reference `held`), freed
   (PyObject_GC_Del: a GC class's tp_free, none of them subclassable), and the class its instance holds dropped. */
static inline void
fastcommon_dealloc(PyObject *op, PyObject *weakrefs, inquiry clear, PyObject *held)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (weakrefs != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    if (clear != NULL) {
        (void)clear(op);
    }
    Py_XDECREF(held);
    PyObject_GC_Del(op);
    Py_DECREF(type);
}

/* A new list holding `value` as `[]` does after `.append(value)`: room for four (3.10-3.15; a test compares). */
static inline PyObject *
fastcommon_list_of(PyObject *value)
{
#if defined(Py_LIMITED_API)
    PyObject *values = PyList_New(0);
    if (values != NULL && PyList_Append(values, value) < 0) {
        Py_CLEAR(values);
    }
#else
    PyObject *values = PyList_New(4); /* four NULL items */
    if (values != NULL) {
        PyList_SET_ITEM(values, 0, Py_NewRef(value));
        Py_SET_SIZE(values, 1);
    }
#endif
    return values;
}

#if !defined(Py_LIMITED_API) /* (key, value) */
static inline PyObject *
fastcommon_pair(PyObject *key, PyObject *value)
{
    PyObject *pair = PyTuple_New(2);
    if (pair != NULL) {
        PyTuple_SET_ITEM(pair, 0, Py_NewRef(key));
        PyTuple_SET_ITEM(pair, 1, Py_NewRef(value));
    }
    return pair;
}
#endif

#endif /* FASTCOMMON_COMPAT_H */
