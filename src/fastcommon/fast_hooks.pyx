# cython: language_level=3, binding=False, always_allow_keywords=False, freethreading_compatible=True, autotestdict=False, embedsignature=True, embedsignature.format=clinic
"""grpc's per-RPC hooks compiled (get_plugin, _get_running_loop, _is_async_handler, _create_servicer_context): each
reads grpc's globals at the call and decides up front, from exact types, that grpc's does the same, else calls it."""

import _thread, asyncio, builtins, inspect, logging, sys
from _asyncio import get_running_loop as _running_loop
from abc import get_cache_token
from collections.abc import Awaitable
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType

cimport cython
from cpython.module cimport PyModule_GetDict
from cpython.object cimport PyObject

from fastcommon.counters cimport counted_calls, fastcommon_check_counter, fastcommon_count

cdef object _MISSING = object()


cdef object _stdlib(object function, object module):
    """``function`` if ``module``'s own (its code in its file), else _MISSING: a library may have replaced it first."""
    code = getattr(function, "__code__", None) if type(function) is FunctionType else None
    return function if code is not None and code.co_filename == module.__file__ else _MISSING


cdef object _RLock = _thread.RLock, _Logger = logging.Logger, _asyncio = asyncio, _inspect = inspect
cdef object _acquire = _RLock.__enter__, _release = _RLock.release  # what `with _plugin_lock:` calls
cdef object _import = builtins.__import__  # with the modules: `from grpc import _server`; the interpreter's own only
if not (type(_import) is BuiltinFunctionType and _import.__self__ is builtins and _import.__name__ == "__import__"):
    _import = _MISSING
cdef dict _MODULES = sys.modules
cdef object _debug = _stdlib(_Logger.debug, logging), _enabled = _stdlib(_Logger.isEnabledFor, logging)
cdef dict _ASYNCIO = vars(asyncio), _INSPECT = vars(inspect)  # those modules' attributes, as read from them
cdef tuple _INSPECTS = tuple([_stdlib(function, inspect) for function in
                              (inspect.isawaitable, inspect.iscoroutinefunction, inspect.isasyncgenfunction)])
cdef int _ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR, _DEBUG = logging.DEBUG
cdef Py_ssize_t _FUNCTION_DICT = FunctionType.__dictoffset__  # where a function keeps its attributes' dict, if any
cdef tuple _NAMES = ("get_plugin", "_get_running_loop", "_is_async_handler", "_create_servicer_context")


@cython.final
@cython.auto_pickle(False)
cdef class _Hooks:
    """What replaces grpc's hooks, made for the namespaces of grpc's originals: bound methods named as grpc's."""

    cdef dict observability, cygrpc, awaitable  # awaitable: isinstance(x, Awaitable) by type(x), with abc's token
    cdef dict servicers_builtins  # those of grpc._create_servicer_context, whose import looks __import__ up there
    cdef tuple grpcs  # grpc's own, in _NAMES' order
    cdef Py_ssize_t counters[4]

    def get_plugin(self):
        """grpc._observability.get_plugin(): its _plugin_lock at the call, held while entered; its plugin at entry."""
        fastcommon_count(self.counters[0])
        lock = self.observability.get("_plugin_lock")
        if type(lock) is not _RLock or "_OBSERVABILITY_PLUGIN" not in self.observability:
            return self.grpcs[0]()
        cdef HookContext context = HookContext.__new__(HookContext)
        context.namespace, context.lock = self.observability, lock
        return context

    def _create_servicer_context(self, rpc_event, state, request_deserializer):
        """grpc._create_servicer_context(...): grpc._server's _Context at entry, finalized at exit (no exception)."""
        fastcommon_count(self.counters[3])
        package = _MODULES.get("grpc")  # `from grpc import _server`: grpc as imported, then its attribute
        server = (<dict>PyModule_GetDict(package)).get("_server") if type(package) is ModuleType else None
        if (self.servicers_builtins.get("__import__") is not _import or type(server) is not ModuleType
                or "_Context" not in <dict>PyModule_GetDict(server)):
            return self.grpcs[3](rpc_event, state, request_deserializer)
        cdef HookContext context = HookContext.__new__(HookContext)
        context.namespace, context.arguments = server, (rpc_event, state, request_deserializer)
        return context

    def _get_running_loop(self):
        """cygrpc._get_running_loop(): the running loop, or None; grpc's debug record where its logger takes it."""
        cdef dict own = None
        fastcommon_count(self.counters[1])
        logger = self.cygrpc.get("_LOGGER")
        if (type(logger) is _Logger and _Logger.debug is _debug and _Logger.isEnabledFor is _enabled
                and self.cygrpc.get("asyncio") is _asyncio and _ASYNCIO.get("get_running_loop") is _running_loop):
            attributes = logger.__dict__
            own = attributes if type(attributes) is dict else None
        if own is None or "debug" in own or "isEnabledFor" in own:
            return self.grpcs[1]()
        try:
            loop = _running_loop()
            cache = own.get("_cache")  # debug() asks isEnabledFor(DEBUG), which answers False where its cache does
            if type(cache) is not dict or (<dict>cache).get(_DEBUG) is not False:
                logger.debug(f"[_cygrpc] Loaded running loop: id(loop)={id(loop)}")
            return loop
        except RuntimeError:
            return None

    def _is_async_handler(self, handler):
        """cygrpc._is_async_handler(handler): inspect's answer, for a plain function or a method of one, unmarked."""
        cdef bint plain = False
        fastcommon_count(self.counters[2])
        function = handler.__func__ if type(handler) is MethodType else handler
        if (type(function) is FunctionType and self.cygrpc.get("inspect") is _inspect
                and _INSPECT.get("isawaitable") is _INSPECTS[0] and _INSPECT.get("iscoroutinefunction") is _INSPECTS[1]
                and _INSPECT.get("isasyncgenfunction") is _INSPECTS[2]):
            with cython.critical_section(function):  # its attributes read where they lie, not made, as getattr() does
                attributes = (<PyObject **>(<char *><PyObject *>function + _FUNCTION_DICT))[0]
                plain = attributes == NULL or not ("_is_coroutine_marker" in <dict>attributes
                                                   or "__partialmethod__" in <dict>attributes)
        if not plain:  # no coroutine mark, no partialmethod: inspect looks no further than the code's flags
            return self.grpcs[2](handler)
        token, known = get_cache_token(), self.awaitable.get(type(handler))
        if known is None or known[0] != token:  # asked again where abc's caches may have changed
            known = self.awaitable[type(handler)] = (token, isinstance(handler, Awaitable))
        return known[1] or (function.__code__.co_flags & _ASYNC) != 0


@cython.final
@cython.freelist(8)
@cython.no_gc_clear  # __dealloc__ lets the lock go: the collector must not drop it first (grpc's generator is finalized)
@cython.auto_pickle(False)
cdef class HookContext:
    """What get_plugin() and _create_servicer_context() give, doing what grpc's generator does: entered, it gives what
    that yields (the plugin, holding the lock; a servicer context); exited, it does what follows the yield (lets the
    lock go; finalizes the context where no exception passes), an exception going on as from grpc's generator."""

    cdef object namespace  # grpc._observability's dict; grpc._server
    cdef object lock, value  # the RLock taken at the call; the servicer context, while entered
    cdef tuple arguments  # _create_servicer_context's
    cdef int state  # 1 while entered; then 2

    def __enter__(self):
        if self.state:
            raise RuntimeError("this context manager is entered once")
        if self.lock is None:  # `context = _server._Context(...)`: grpc's generator holds it, to finalize it
            context_class = (<dict>PyModule_GetDict(self.namespace)).get("_Context", _MISSING)
            if context_class is _MISSING:  # gone since the call: grpc's AttributeError, or the module's __getattr__
                context_class = getattr(self.namespace, "_Context")
            value = self.value = context_class(*self.arguments)
        else:  # the plugin is only yielded: grpc's generator keeps no reference to it
            _acquire(self.lock)
            value = (<dict>self.namespace).get("_OBSERVABILITY_PLUGIN", _MISSING)
            if value is _MISSING:  # gone since the call
                _release(self.lock)
                raise NameError("name '_OBSERVABILITY_PLUGIN' is not defined", name="_OBSERVABILITY_PLUGIN")
        self.state = 1
        return value

    def __exit__(self, exc_type, exc_value, traceback, /):
        if self.state == 2:  # as contextlib's, whose generator has finished
            return False
        if self.state != 1:
            raise RuntimeError("this context manager is not entered")
        self.state = 2
        value, self.value = self.value, None  # grpc's generator lets it go as it finishes
        if self.lock is not None:
            _release(self.lock)
        elif exc_type is None:
            try:
                value._finalize_state()
            except StopIteration as exc:  # PEP 479, as in grpc's generator
                raise RuntimeError("generator raised StopIteration") from exc
        return False

    def __dealloc__(self):
        if self.state == 1 and self.lock is not None:  # as grpc's generator, closed unfinished
            _release(self.lock)


def hooks(originals, /, *, counters=None):
    """What replaces grpc's hooks ``originals`` (by name), each counting its calls at ``counters[name]`` first."""
    cdef _Hooks made = _Hooks.__new__(_Hooks)
    made.grpcs, made.awaitable = tuple([originals.get(name) for name in _NAMES]), {}
    for i, name in enumerate(_NAMES):
        made.counters[i] = (counters or {}).get(name, -1)
        fastcommon_check_counter(made.counters[i], True)
    if made.grpcs[0] is not None:  # contextlib's helper: the generator function it wraps has grpc's globals
        made.observability = made.grpcs[0].__wrapped__.__globals__
    if made.grpcs[3] is not None:
        made.servicers_builtins = made.grpcs[3].__wrapped__.__builtins__
    if (compiled := made.grpcs[1] or made.grpcs[2]) is not None:  # Cython's: 1.62's have no __globals__
        made.cygrpc = vars(sys.modules[compiled.__module__])
    return {name: getattr(made, name) for name in originals}


def calls():
    """The calls this module counted in this process (and its parent, before a fork), by counter."""
    return counted_calls()
