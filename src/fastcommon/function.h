/* Function: what stands in for each replaced Metadata method, calling the compiled one through its vectorcall, binding
 * as a function, with grpc's function's code and defaults for inspect, the compiled one's other attributes (grpc's
 * names, __wrapped__), so that mocks and pydoc take it for grpc's. C: Cython's functions cannot be subclassed. */
#ifndef FASTCOMMON_FUNCTION_H
#define FASTCOMMON_FUNCTION_H

#include <Python.h>
#include <structmember.h>

#include "compat.h"

#if defined(Py_LIMITED_API)
static PyObject *fastcommon_function_type(void) { Py_RETURN_NONE; }
#define fastcommon_function_new(type, function, grpcs) Py_NewRef(function) /* no vectorcall to forward to */
#else

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* what a call runs: call(function, ...) */
    PyObject *function;        /* the compiled function; never NULL, never replaced */
    vectorcallfunc call;       /* its vectorcall, read once */
    PyObject *weakrefs, *grpcs; /* grpcs: grpc's function it replaces */
} fastcommon_function;

#define FASTCOMMON_FUNCTION(op) (((fastcommon_function *)(op))->function)
#define FASTCOMMON_GRPCS(op) (((fastcommon_function *)(op))->grpcs)

static PyObject *
fastcommon_function_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{ return ((fastcommon_function *)self)->call(FASTCOMMON_FUNCTION(self), args, nargsf, kwnames); }

static PyObject * /* as a Python function binds: itself from its class, a method from an instance */
fastcommon_function_get(PyObject *self, PyObject *instance, PyObject *owner)
{ return (void)owner, instance == NULL || instance == Py_None ? Py_NewRef(self) : PyMethod_New(self, instance); }

/* Its type's (what binds or calls by hand binds or calls it; a function's repr, hash and equality); then grpc's
 * function's, for inspect and getclosurevars (no __annotate__ before 3.14), never assigned as calls never read them */
static const char *const fastcommon_own[] = {"__get__", "__call__", "__repr__", "__str__", "__hash__", "__eq__",
    "__ne__", "__reduce__", "__getattribute__", "__setattr__", "__delattr__", "__dir__", NULL},
    *const fastcommon_grpcs[] = {"__class__", "__code__", "__defaults__", "__kwdefaults__", "__globals__",
    "__closure__", "__builtins__", "__annotate__", /* and what only Cython's functions have: */ "func_code",
    "func_defaults", "func_globals", "func_closure", "func_dict", "func_doc", "func_name", "_is_coroutine",
    "__annotate_cython__", NULL};

static int fastcommon_in(PyObject *name, const char *const *names)
{
    while (PyUnicode_Check(name) && *names != NULL && PyUnicode_CompareWithASCIIString(name, *names) != 0) { names++; }
    return PyUnicode_Check(name) && *names != NULL;
}

static PyObject * /* its type's, grpc's function's or the compiled one's */
fastcommon_function_getattro(PyObject *self, PyObject *name)
{
    PyObject *holder = fastcommon_in(name, fastcommon_grpcs) ? FASTCOMMON_GRPCS(self) : FASTCOMMON_FUNCTION(self);
    return fastcommon_in(name, fastcommon_own) ? PyObject_GenericGetAttr(self, name) : PyObject_GetAttr(holder, name);
}

static int fastcommon_function_setattro(PyObject *self, PyObject *name, PyObject *value)
{
    return fastcommon_in(name, fastcommon_grpcs)
        ? (PyErr_Format(PyExc_AttributeError, "%R is fastcommon's: unpatch() to set its %U", self, name), -1)
        : PyObject_SetAttr(FASTCOMMON_FUNCTION(self), name, value);
}

static PyObject * /* as a function's: <function Metadata.get at 0x...>; Cython's __qualname__ is a str */
fastcommon_function_repr(PyObject *self)
{
    PyObject *qualname = PyObject_GetAttrString(FASTCOMMON_FUNCTION(self), "__qualname__");
    PyObject *repr = qualname == NULL ? NULL : PyUnicode_FromFormat("<function %U at %p>", qualname, self);
    Py_XDECREF(qualname);
    return repr;
}

static int fastcommon_function_traverse(PyObject *self, visitproc visit, void *arg)
{ Py_VISIT(Py_TYPE(self)); Py_VISIT(FASTCOMMON_FUNCTION(self)); Py_VISIT(FASTCOMMON_GRPCS(self)); return 0; }

/* No tp_clear: function is never NULL; a cycle through it is broken at the compiled function, which has one. */
static int fastcommon_unhold(PyObject *self) { Py_CLEAR(FASTCOMMON_GRPCS(self)); return 0; }
static void fastcommon_function_dealloc(PyObject *self)
{ fastcommon_dealloc(self, ((fastcommon_function *)self)->weakrefs, fastcommon_unhold, FASTCOMMON_FUNCTION(self)); }

static PyMemberDef fastcommon_function_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(fastcommon_function, vectorcall), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(fastcommon_function, weakrefs), READONLY, NULL}, {NULL, 0, 0, 0, NULL}};
static PyObject *fastcommon_function_doc(PyObject *self, void *closure) /* for pydoc: object.__getattribute__ */
{ return (void)closure, PyObject_GetAttrString(FASTCOMMON_FUNCTION(self), "__doc__"); }
static PyGetSetDef fastcommon_function_getset[] = {{"__doc__", fastcommon_function_doc, NULL, NULL, NULL}, {NULL}};

static PyType_Slot fastcommon_function_slots[] = {
    {Py_tp_dealloc, (void *)fastcommon_function_dealloc}, {Py_tp_traverse, (void *)fastcommon_function_traverse},
    {Py_tp_getattro, (void *)fastcommon_function_getattro}, {Py_tp_setattro, (void *)fastcommon_function_setattro},
    {Py_tp_repr, (void *)fastcommon_function_repr}, {Py_tp_descr_get, (void *)fastcommon_function_get},
    {Py_tp_call, (void *)PyVectorcall_Call}, {Py_tp_members, (void *)fastcommon_function_members},
    {Py_tp_getset, (void *)fastcommon_function_getset}, {0, NULL}};

/* METHOD_DESCRIPTOR: CPython may call it unbound, self first, where it would bind it (a method call, a type slot) */
static PyType_Spec fastcommon_function_spec = {"fastcommon.fast_metadata.Function", sizeof(fastcommon_function), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR
        | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION, fastcommon_function_slots};

static PyObject *fastcommon_function_type(void) { return PyType_FromSpec(&fastcommon_function_spec); }

static PyObject * /* a Function of `type` (fastcommon_function_type's) for the compiled `function`, in grpc's place */
fastcommon_function_new(PyObject *type, PyObject *function, PyObject *grpcs)
{
    vectorcallfunc call = PyVectorcall_Function(function);
    fastcommon_function *self = (fastcommon_function *)((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 0);
    if (self != NULL) {
        self->vectorcall = fastcommon_function_call;
        self->function = Py_NewRef(function);
        self->grpcs = Py_NewRef(grpcs);
        self->call = call != NULL ? call : PyObject_Vectorcall; /* one Cython calls by tp_call: *args, **kwargs */
    }
    return (PyObject *)self;
}

#endif
#endif /* FASTCOMMON_FUNCTION_H */
