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
static unsigned long long fastcommon_calls[5];
#define FASTCOMMON_METADATUM_COUNTER 4

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
