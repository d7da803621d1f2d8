/* What fast_common.pyx reaches through the full C API, and what stands in for it in the Limited API (abi3). */
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
#else
#define FASTCOMMON_LIMITED_API 0
#define fastcommon_bytes_data PyBytes_AS_STRING
#define fastcommon_bytes_size PyBytes_GET_SIZE
/* collections.OrderedDict() without its __init__, which does nothing without arguments */
#define fastcommon_new_ordered_dict(ordered_dict) PyODict_New()
#define fastcommon_ordered_set PyODict_SetItem /* what an OrderedDict's item assignment calls */
#define fastcommon_list_size PyList_GET_SIZE
#endif

/* A new list holding `value` as `[]` holds it after `.append(value)`: one item, room for four (what every CPython
   from 3.10 to 3.15 gives; a test compares the sizes with grpc's). */
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

#endif /* FASTCOMMON_COMPAT_H */
