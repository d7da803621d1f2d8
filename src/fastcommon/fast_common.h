/* fastcommon's hand-written C, included by fast_common.pyx (cdef extern from "fast_common.h").
 *
 * The rule here: whatever Python hands in is checked before any C code writes through it; an
 * unchecked macro is used only on objects this file made itself or has checked.
 */
#ifndef FASTCOMMON_FAST_COMMON_H
#define FASTCOMMON_FAST_COMMON_H

#include <Python.h>
#include <structmember.h>

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

/* Calls through the counted twins, in the order of fast_common.COUNTED; a fork child inherits them. */
#define FASTCOMMON_COUNTERS 17
static unsigned long long fastcommon_calls[FASTCOMMON_COUNTERS];
#define FASTCOMMON_METADATUM_COUNTER 4

/* grpc.aio's Metadata: the list and tuple macros where the Limited API has only their function forms.
   Used on lists and tuples the caller has checked (an exact list, a tuple). */
#if defined(Py_LIMITED_API)
#define fastcommon_list_size PyList_Size
#define fastcommon_list_item PyList_GetItem
#define fastcommon_tuple_size PyTuple_Size
#define fastcommon_tuple_item PyTuple_GetItem
#else
#define fastcommon_list_size PyList_GET_SIZE
#define fastcommon_list_item PyList_GET_ITEM
#define fastcommon_tuple_size PyTuple_GET_SIZE
#define fastcommon_tuple_item PyTuple_GET_ITEM
#endif

/* Whether unpacking o into two names (`key, value = o`) takes its two items and runs no Python code: an
   exact tuple or list of two, or a tuple subclass of two that iterates as a tuple (a namedtuple). */
static int
fastcommon_is_plain_pair(PyObject *o)
{
    if (PyList_CheckExact(o)) {
        return fastcommon_list_size(o) == 2;
    }
    if (!PyTuple_Check(o) || fastcommon_tuple_size(o) != 2) {
        return 0;
    }
    return PyTuple_CheckExact(o) || PyType_GetSlot(Py_TYPE(o), Py_tp_iter) == PyType_GetSlot(&PyTuple_Type, Py_tp_iter);
}

/* Whether calling cls makes an instance as object's __new__ does and then calls its __init__: a class whose
   metaclass calls as type calls, and whose __new__ is object's. */
static int
fastcommon_is_usual_class(PyObject *cls)
{
    return PyType_Check(cls)
        && PyType_GetSlot(Py_TYPE(cls), Py_tp_call) == PyType_GetSlot(&PyType_Type, Py_tp_call)
        && PyType_GetSlot((PyTypeObject *)cls, Py_tp_new) == PyType_GetSlot(&PyBaseObject_Type, Py_tp_new);
}

/* What cls.name finds when cls's own __dict__ has it (a borrowed reference), else NULL with no error set;
   fastcommon_is_usual_class has checked that cls is a class. A metaclass's data descriptor of that name would
   come first: the caller's check of what it finds covers that. */
static PyObject *
fastcommon_class_own(PyObject *cls, PyObject *name)
{
#if defined(Py_LIMITED_API)
    (void)cls;
    (void)name;
    return NULL;  /* the caller then takes the long way */
#else
    PyObject *dict = ((PyTypeObject *)cls)->tp_dict;
    return dict == NULL ? NULL : PyDict_GetItemWithError(dict, name);
#endif
}

/* What object.__new__(cls) makes, for a class fastcommon_is_usual_class accepted: its tp_new is object's. */
static PyObject *
fastcommon_new_instance(PyObject *cls)
{
    newfunc new_instance = (newfunc)PyType_GetSlot(&PyBaseObject_Type, Py_tp_new);
    PyObject *no_args = PyTuple_New(0);
    PyObject *instance;
    if (no_args == NULL) {
        return NULL;
    }
    instance = new_instance((PyTypeObject *)cls, no_args, NULL);
    Py_DECREF(no_args);
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
    return PyObject_VectorcallMethod(name, args, 2, NULL);
#endif
}

static PyObject *
fastcommon_call_method2(PyObject *self, PyObject *name, PyObject *a, PyObject *b)
{
#if defined(Py_LIMITED_API)
    return PyObject_CallMethodObjArgs(self, name, a, b, NULL);
#else
    PyObject *args[3] = {self, a, b};
    return PyObject_VectorcallMethod(name, args, 3, NULL);
#endif
}

/* What PyIter_Next gave: the item (its new reference), `end` at the end, or NULL with its error left set. */
static PyObject *
fastcommon_item_or(PyObject *item, PyObject *end)
{
    if (item != NULL || PyErr_Occurred()) {
        return item;
    }
    return Py_NewRef(end);
}

/* KeyError(key), raised as a dict's subscript raises it (a tuple key stays one argument); returns NULL. */
static PyObject *
fastcommon_key_error(PyObject *key)
{
    PyObject *args = PyTuple_Pack(1, key);
    if (args != NULL) {
        PyErr_SetObject(PyExc_KeyError, args);
        Py_DECREF(args);
    }
    return NULL;
}

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

/* MetadatumConstructor(cls): what namedtuple's __new__ does for cls(key, value), which is
   tuple.__new__(cls, (key, value)), without the Python frame and the two temporary tuples. Each
   instance holds the one class it checked when it was made; nothing can change that class later, so
   what grpc calls shares no state with a gate, a status or a test that makes another. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *cls; /* a tuple subclass with exactly a tuple's layout; never NULL, never replaced */
    char counted;  /* counts its calls for `run --report` */
} fastcommon_constructor;

/* Why instances of cls cannot be built as a tuple of two items written in place; NULL if they can.
   A subclass's __bases__ can be reassigned only between layout-compatible bases, and a type's sizes
   never change, so what is checked here holds for the class's whole life. */
static const char *
fastcommon_tuple_layout_problem(PyObject *cls)
{
    PyTypeObject *type;
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
    if (type->tp_alloc == NULL) {
        return "has no allocator";
    }
    return NULL;
}

static PyObject *
fastcommon_build_entry(fastcommon_constructor *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyTypeObject *type = (PyTypeObject *)self->cls;
    PyObject *entry;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        /* Any other call is the class's own, its errors included. */
        return PyObject_Vectorcall(self->cls, args, nargsf, kwnames);
    }
    entry = type->tp_alloc(type, 2);
    if (entry == NULL) {
        return NULL;
    }
    PyTuple_SET_ITEM(entry, 0, Py_NewRef(args[0]));
    PyTuple_SET_ITEM(entry, 1, Py_NewRef(args[1]));
#if PY_VERSION_HEX >= 0x030E0000
    ((PyTupleObject *)entry)->ob_hash = -1; /* not computed yet, as tuple.__new__ leaves it */
#endif
    return entry;
}

static PyObject *
fastcommon_build_counted_entry(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    fastcommon_calls[FASTCOMMON_METADATUM_COUNTER]++;
    return fastcommon_build_entry((fastcommon_constructor *)self, args, nargsf, kwnames);
}

static PyObject *
fastcommon_build_uncounted_entry(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return fastcommon_build_entry((fastcommon_constructor *)self, args, nargsf, kwnames);
}

static PyObject *
fastcommon_constructor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"", "counted", NULL};
    PyObject *cls;
    int counted = 0;
    const char *problem;
    fastcommon_constructor *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:MetadatumConstructor", keywords, &cls, &counted)) {
        return NULL;
    }
    problem = fastcommon_tuple_layout_problem(cls);
    if (problem != NULL) {
        PyErr_Format(PyExc_TypeError, "MetadatumConstructor() needs a tuple subclass with a tuple's layout: %R %s",
                     cls, problem);
        return NULL;
    }
    self = (fastcommon_constructor *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->cls = Py_NewRef(cls);
    self->counted = (char)counted;
    self->vectorcall = counted ? fastcommon_build_counted_entry : fastcommon_build_uncounted_entry;
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
                                constructor->counted ? ", counted" : "");
}

static PyMemberDef fastcommon_constructor_members[] = {
    {"cls", T_OBJECT_EX, offsetof(fastcommon_constructor, cls), READONLY, "the class whose entries it builds"},
    {"counted", T_BOOL, offsetof(fastcommon_constructor, counted), READONLY, "whether it counts its calls"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(fastcommon_constructor, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot fastcommon_constructor_slots[] = {
    {Py_tp_doc, (void *)"MetadatumConstructor(cls, /, *, counted=False)\n--\n\n"
                        "Build cls(key, value) for a namedtuple cls of two fields, as its __new__ does; "
                        "any other call goes to cls."},
    {Py_tp_new, (void *)fastcommon_constructor_new},
    {Py_tp_dealloc, (void *)fastcommon_constructor_dealloc},
    {Py_tp_traverse, (void *)fastcommon_constructor_traverse},
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_repr, (void *)fastcommon_constructor_repr},
    {Py_tp_members, (void *)fastcommon_constructor_members},
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
    return PyType_FromSpec(&fastcommon_constructor_spec);
}

#endif /* Py_LIMITED_API */

#endif /* FASTCOMMON_FAST_COMMON_H */
