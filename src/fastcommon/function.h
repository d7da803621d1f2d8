/* Function: what stands in for each replaced Metadata method, calling the compiled one through its vectorcall, binding
 * and answering isinstance() as a function, every other attribute the compiled one's (grpc's names, __wrapped__), so
 * that mocks take it for grpc's. C: Cython's functions cannot be subclassed. Not in the Limited API (no vectorcall). */
#ifndef FASTCOMMON_FUNCTION_H
#define FASTCOMMON_FUNCTION_H

#include <Python.h>
#include <structmember.h>

#include "compat.h"

#if defined(Py_LIMITED_API)
static PyObject *fastcommon_function_type(void) { Py_RETURN_NONE; }
static PyObject *fastcommon_function_new(PyObject *type, PyObject *function) { return (void)type, Py_NewRef(function); }
#else

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* what a call runs: call(function, ...) */
    PyObject *function;        /* the compiled function; never NULL, never replaced */
    vectorcallfunc call;       /* its vectorcall, read once */
    PyObject *weakrefs;
} fastcommon_function;

#define FASTCOMMON_FUNCTION(op) (((fastcommon_function *)(op))->function)

static PyObject *
fastcommon_function_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{ return ((fastcommon_function *)self)->call(FASTCOMMON_FUNCTION(self), args, nargsf, kwnames); }

static PyObject * /* as a Python function binds: itself from its class, a method from an instance */
fastcommon_function_get(PyObject *self, PyObject *instance, PyObject *owner)
{ return (void)owner, instance == NULL || instance == Py_None ? Py_NewRef(self) : PyMethod_New(self, instance); }

static PyObject *
fastcommon_function_getattro(PyObject *self, PyObject *name)
{
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__class__") == 0) {
        return Py_NewRef((PyObject *)&PyFunction_Type);
    }
    if (PyUnicode_Check(name) && (PyUnicode_CompareWithASCIIString(name, "__get__") == 0
                                  || PyUnicode_CompareWithASCIIString(name, "__call__") == 0)) {
        return PyObject_GenericGetAttr(self, name); /* its own: what binds by hand binds the stand-in */
    }
#if PY_VERSION_HEX < 0x030E0000 /* Cython's function answers None; a function before 3.14 has none */
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__annotate__") == 0) {
        return PyErr_Format(PyExc_AttributeError, "'function' object has no attribute '__annotate__'");
    }
#endif
    return PyObject_GetAttr(FASTCOMMON_FUNCTION(self), name);
}

static int fastcommon_function_setattro(PyObject *self, PyObject *name, PyObject *value)
{ return PyObject_SetAttr(FASTCOMMON_FUNCTION(self), name, value); }

static PyObject * /* as a function's: <function Metadata.get at 0x...> */
fastcommon_function_repr(PyObject *self)
{
    PyObject *qualname = PyObject_GetAttrString(FASTCOMMON_FUNCTION(self), "__qualname__");
    PyObject *repr = qualname == NULL ? NULL : PyUnicode_FromFormat("<function %S at %p>", qualname, self);
    Py_XDECREF(qualname);
    return repr;
}

static int fastcommon_function_traverse(PyObject *self, visitproc visit, void *arg)
{ Py_VISIT(Py_TYPE(self)); Py_VISIT(FASTCOMMON_FUNCTION(self)); return 0; }

/* No tp_clear: function is never NULL; a cycle through it is broken at the compiled function, which has one. */
static void fastcommon_function_dealloc(PyObject *self)
{ fastcommon_dealloc(self, ((fastcommon_function *)self)->weakrefs, NULL, FASTCOMMON_FUNCTION(self)); }

static PyMemberDef fastcommon_function_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(fastcommon_function, vectorcall), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(fastcommon_function, weakrefs), READONLY, NULL}, {NULL, 0, 0, 0, NULL}};

static PyType_Slot fastcommon_function_slots[] = {
    {Py_tp_dealloc, (void *)fastcommon_function_dealloc}, {Py_tp_traverse, (void *)fastcommon_function_traverse},
    {Py_tp_getattro, (void *)fastcommon_function_getattro}, {Py_tp_setattro, (void *)fastcommon_function_setattro},
    {Py_tp_repr, (void *)fastcommon_function_repr}, {Py_tp_descr_get, (void *)fastcommon_function_get},
    {Py_tp_call, (void *)PyVectorcall_Call}, {Py_tp_members, (void *)fastcommon_function_members}, {0, NULL}};

/* METHOD_DESCRIPTOR: CPython may call it unbound, self first, where it would bind it (a method call, a type slot) */
static PyType_Spec fastcommon_function_spec = {"fastcommon.fast_metadata.Function", sizeof(fastcommon_function), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR
        | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION, fastcommon_function_slots};

static PyObject *fastcommon_function_type(void) { return PyType_FromSpec(&fastcommon_function_spec); }

static PyObject * /* a Function of `type` (fastcommon_function_type's) for the compiled `function` */
fastcommon_function_new(PyObject *type, PyObject *function)
{
    vectorcallfunc call = PyVectorcall_Function(function);
    fastcommon_function *self = (fastcommon_function *)((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 0);
    if (self != NULL) {
        self->vectorcall = fastcommon_function_call;
        self->function = Py_NewRef(function);
        self->call = call != NULL ? call : PyObject_Vectorcall; /* one Cython calls by tp_call: *args, **kwargs */
    }
    return (PyObject *)self;
}

#endif
#endif /* FASTCOMMON_FUNCTION_H */
