/* MetadatumConstructor: what fastcommon puts in place of cygrpc._Metadatum, the namedtuple grpc's core calls for every
 * metadata entry it receives. C because it fills a tuple subclass in place, as namedtuple's __new__ does, without its
 * Python frame and two temporary tuples; it holds the one class it checked when it was made, for good. */
#ifndef FASTCOMMON_METADATUM_H
#define FASTCOMMON_METADATUM_H

#include <Python.h>
#include <structmember.h>

#include "compat.h"
#include "counters.h"

/* 3.14 and 3.15 cache a tuple's hash in it, which tuple.__new__ marks not computed yet. A CPython not checked here
   fails the build, rather than build entries whose hash could be wrong (setup.py then installs pure Python). */
#if defined(Py_LIMITED_API)
#error "fastcommon: the entry constructor writes a tuple in place, which the Limited API has no way to (setup.py)"
#elif PY_VERSION_HEX >= 0x03100000
#error "fastcommon: check how this CPython lays out a tuple (fastcommon_build_entry) before building for it"
#elif PY_VERSION_HEX >= 0x030E0000
#define FASTCOMMON_RESET_TUPLE_HASH(op) (((PyTupleObject *)(op))->ob_hash = -1)
#else
#define FASTCOMMON_RESET_TUPLE_HASH(op) ((void)0)
#endif

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* what grpc calls */
    PyObject *cls;             /* a tuple subclass with exactly a tuple's layout; never NULL, never replaced */
    Py_ssize_t counter;        /* where it counts its calls for `run --report`, or -1 */
    PyObject *weakrefs;
} fastcommon_constructor;

#define FASTCOMMON_CLS(op) (((fastcommon_constructor *)(op))->cls)

static destructor fastcommon_python_class_dealloc; /* subtype_dealloc: a class statement's classes' */

/* Why instances of cls cannot be written in place as a tuple of two; NULL if they can. A type's sizes never change,
   and __bases__ can be reassigned only between layout-compatible bases: it holds for the class's whole life. */
static const char *
fastcommon_tuple_layout_problem(PyObject *cls)
{
    PyTypeObject *type = (PyTypeObject *)cls, *base = type;
    if (!PyType_Check(cls) || type == &PyTuple_Type || !PyType_IsSubtype(type, &PyTuple_Type)) {
        return "is not a subclass of tuple";
    }
    while (base != NULL && PyType_HasFeature(base, Py_TPFLAGS_HEAPTYPE)
           && base->tp_dealloc == fastcommon_python_class_dealloc) {
        base = base->tp_base;
    }
    /* a C subclass (a structseq, say) frees and visits fields of its own beyond the two items written here; a class
       statement's __dict__ sets tp_dictoffset (-1 where managed, 3.12 on), and a tuple's can have no __weakref__ */
    return base != &PyTuple_Type ? "is not made by a class statement from tuple"
         : !PyType_HasFeature(type, Py_TPFLAGS_HAVE_GC) ? "is not tracked by the garbage collector"
         : type->tp_dictoffset || type->tp_weaklistoffset ? "has a __dict__ or a __weakref__"
         : type->tp_basicsize != PyTuple_Type.tp_basicsize || type->tp_itemsize != PyTuple_Type.tp_itemsize
             ? "has fields of its own"
         : NULL;
}

/* cls(key, value), built in place; any other call is the class's own, its errors included. */
static PyObject *
fastcommon_build_entry(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *cls = FASTCOMMON_CLS(self);
    PyTupleObject *entry;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        return PyObject_Vectorcall(cls, args, nargsf, kwnames);
    }
    /* From 3.12 the class's own allocation, zeroed and tracked, as tuple.__new__ makes a subclass's; before, as a
       tuple of two is allocated, tracked once filled: each the fewer instructions on its CPythons. */
#if PY_VERSION_HEX >= 0x030C0000
    entry = (PyTupleObject *)((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 2);
#else
    entry = PyObject_GC_NewVar(PyTupleObject, (PyTypeObject *)cls, 2);
#endif
    if (entry == NULL) {
        return NULL;
    }
    entry->ob_item[0] = Py_NewRef(args[0]);
    entry->ob_item[1] = Py_NewRef(args[1]);
    FASTCOMMON_RESET_TUPLE_HASH(entry);
#if PY_VERSION_HEX < 0x030C0000
    PyObject_GC_Track(entry);
#endif
    return (PyObject *)entry;
}

static PyObject *
fastcommon_build_counted_entry(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    fastcommon_count(((fastcommon_constructor *)self)->counter);
    return fastcommon_build_entry(self, args, nargsf, kwnames);
}

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
    if ((problem = fastcommon_tuple_layout_problem(cls)) != NULL) {
        return PyErr_Format(PyExc_TypeError, "MetadatumConstructor() needs a tuple subclass with a tuple's layout: "
                            "%R %s", cls, problem);
    }
    if (fastcommon_check_counter(counter, 1) < 0 || (self = (fastcommon_constructor *)type->tp_alloc(type, 0)) == NULL) {
        return NULL;
    }
    self->vectorcall = counter >= 0 ? fastcommon_build_counted_entry : fastcommon_build_entry;
    self->cls = Py_NewRef(cls);
    self->counter = counter;
    return (PyObject *)self;
}

static int
fastcommon_constructor_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(FASTCOMMON_CLS(self));
    return 0;
}

/* No tp_clear: cls is never NULL; a cycle through it is broken at the class, whose tp_clear empties its dict. */
static void fastcommon_constructor_dealloc(PyObject *self)
{ fastcommon_dealloc(self, ((fastcommon_constructor *)self)->weakrefs, NULL, FASTCOMMON_CLS(self)); }

/* Everything but a call is the class's: attributes (__mro_entries__ aside: a class statement reads it on a base that
   is not a class), repr, [], ==, hash, |, isinstance(), issubclass(); a constructor among the operands stands for it. */
#define FASTCOMMON_CLASS_OF(op) (Py_TYPE(op)->tp_dealloc == fastcommon_constructor_dealloc ? FASTCOMMON_CLS(op) : (op))

static PyObject *
fastcommon_constructor_getattro(PyObject *self, PyObject *name)
{
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__mro_entries__") == 0) {
        return PyObject_GenericGetAttr(self, name);
    }
    return PyObject_GetAttr(FASTCOMMON_CLS(self), name);
}

static int fastcommon_constructor_setattro(PyObject *self, PyObject *name, PyObject *value)
{ return PyObject_SetAttr(FASTCOMMON_CLS(self), name, value); }
static PyObject *fastcommon_constructor_repr(PyObject *self) { return PyObject_Repr(FASTCOMMON_CLS(self)); }
static PyObject *fastcommon_constructor_getitem(PyObject *self, PyObject *item)
{ return PyObject_GetItem(FASTCOMMON_CLS(self), item); }
static Py_hash_t fastcommon_constructor_hash(PyObject *self) { return PyObject_Hash(FASTCOMMON_CLS(self)); }
static PyObject *fastcommon_constructor_or(PyObject *left, PyObject *right)
{ return PyNumber_Or(FASTCOMMON_CLASS_OF(left), FASTCOMMON_CLASS_OF(right)); }
static PyObject *fastcommon_constructor_mro_entries(PyObject *self, PyObject *bases)
{ return (void)bases, PyTuple_Pack(1, FASTCOMMON_CLS(self)); }

static PyObject * /* as its metaclass compares the class: NotImplemented lets Python ask the other side */
fastcommon_constructor_richcompare(PyObject *self, PyObject *other, int op)
{
    return Py_TYPE(FASTCOMMON_CLS(self))->tp_richcompare(FASTCOMMON_CLS(self), FASTCOMMON_CLASS_OF(other), op);
}

static PyObject *fastcommon_bool(int is) { return is < 0 ? NULL : PyBool_FromLong(is); } /* is -1: an error */
static PyObject *fastcommon_constructor_instancecheck(PyObject *self, PyObject *instance)
{ return fastcommon_bool(PyObject_IsInstance(instance, FASTCOMMON_CLS(self))); }
static PyObject *fastcommon_constructor_subclasscheck(PyObject *self, PyObject *subclass)
{ return fastcommon_bool(PyObject_IsSubclass(FASTCOMMON_CLASS_OF(subclass), FASTCOMMON_CLS(self))); }

static PyMethodDef fastcommon_constructor_methods[] = {
    {"__instancecheck__", fastcommon_constructor_instancecheck, METH_O, "isinstance(instance, cls)"},
    {"__subclasscheck__", fastcommon_constructor_subclasscheck, METH_O, "issubclass(subclass, cls)"},
    {"__mro_entries__", fastcommon_constructor_mro_entries, METH_O, "(cls,): a class statement subclasses cls"},
    {NULL, NULL, 0, NULL}};

static PyMemberDef fastcommon_constructor_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(fastcommon_constructor, vectorcall), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(fastcommon_constructor, weakrefs), READONLY, NULL}, {NULL, 0, 0, 0, NULL}};

static PyType_Slot fastcommon_constructor_slots[] = {
    {Py_tp_doc, (void *)"MetadatumConstructor(cls, /, *, counter=-1)\n--\n\nBuilds cls(key, value) as a namedtuple's "
                        "__new__ does, for a namedtuple cls of two fields, checked; anything else is cls's own."},
    {Py_tp_new, (void *)fastcommon_constructor_new}, {Py_tp_dealloc, (void *)fastcommon_constructor_dealloc},
    {Py_tp_traverse, (void *)fastcommon_constructor_traverse},
    {Py_tp_getattro, (void *)fastcommon_constructor_getattro},
    {Py_tp_setattro, (void *)fastcommon_constructor_setattro}, {Py_tp_repr, (void *)fastcommon_constructor_repr},
    {Py_tp_richcompare, (void *)fastcommon_constructor_richcompare}, {Py_tp_hash, (void *)fastcommon_constructor_hash},
    {Py_mp_subscript, (void *)fastcommon_constructor_getitem}, {Py_nb_or, (void *)fastcommon_constructor_or},
    {Py_tp_call, (void *)PyVectorcall_Call}, {Py_tp_methods, (void *)fastcommon_constructor_methods},
    {Py_tp_members, (void *)fastcommon_constructor_members}, {0, NULL}};

static PyType_Spec fastcommon_constructor_spec = {"fastcommon.fast_entry.MetadatumConstructor",
    sizeof(fastcommon_constructor), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE,
    fastcommon_constructor_slots};

static PyObject * /* the MetadatumConstructor class, made once at import */
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

#endif /* FASTCOMMON_METADATUM_H */
