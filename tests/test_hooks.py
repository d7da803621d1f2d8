"""grpc's per-RPC hooks, compiled (fast_hooks): grpc._observability.get_plugin, cygrpc._get_running_loop,
cygrpc._is_async_handler and grpc._create_servicer_context, each run stock and then patched with the installed grpc
as the oracle: with-blocks that return or raise anything, grpc's lock, plugin and context class replaced, its logger
replaced or taking debug records, handlers of every kind; and what differs, as docs/safety.md says."""

import asyncio
import builtins
import functools
import gc
import inspect
import logging
import sys
import threading
import traceback
import types
import unittest.mock

import pytest
from conftest import NEEDS_GRPCIO

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers
from grpc import _observability, _server
from grpc._cython import cygrpc

import fastcommon

# ------------------------------------------------------------------ get_plugin


def held(lock):
    """Whether this thread holds ``lock`` (an RLock), or whether it is held (any other)."""
    return lock._is_owned() if hasattr(lock, "_is_owned") else lock.locked() if hasattr(lock, "locked") else None


def with_plugin(raised=None, nested=False):
    """A with-block of get_plugin() as grpc's code writes it, inside an except block, its body raising ``raised``:
    what it gave, and the exception as it came out (the same one, its context, cause and traceback's frames)."""

    def scenario():
        lock, error, seen = _observability.__dict__.get("_plugin_lock"), raised and raised("in the body"), []
        try:
            try:
                raise KeyError("handled around it")
            except KeyError:
                with _observability.get_plugin() as plugin:
                    seen.append((plugin is _observability._OBSERVABILITY_PLUGIN, held(lock)))
                    if nested:
                        with _observability.get_plugin() as again:
                            seen.append((again is plugin, held(lock)))
                    if error is not None:
                        raise error  # noqa: B904  (inside the except block, as grpc's callers may be)
        except BaseException as exc:
            frames = [frame.f_code.co_name for frame, _ in traceback.walk_tb(exc.__traceback__)]
            context = (repr(exc.__context__), exc.__cause__, exc.__suppress_context__)
            return ("raised", type(exc), str(exc), exc is error, context, frames, seen, held(lock))
        return ("returned", seen, held(lock))

    return scenario


@pytest.mark.parametrize(
    "raised",
    [None, ValueError, StopIteration, StopAsyncIteration, GeneratorExit, KeyboardInterrupt, SystemExit, RuntimeError],
)
def test_a_with_block_of_get_plugin_returns_or_raises_as_through_grpcs_generator(raised):
    helpers.assert_like_stock(with_plugin(raised), "get_plugin")
    helpers.assert_like_stock(with_plugin(raised, nested=True), "get_plugin")


class Plugin:
    """A plugin on grpc's module, which counts what grpc reads of it."""

    def __init__(self, raising=()):
        self.reads, self.raising = [], raising

    def __getattr__(self, name):
        self.reads.append(name)
        if name in self.raising:
            raise ValueError(f"{name}: the plugin broke")
        return False


class RecordingLock:
    """A lock of Python's own making: what grpc's with-block calls of it, and what its __exit__ answers."""

    def __init__(self, suppresses=False, enter_raises=False):
        self.calls, self.suppresses, self.enter_raises = [], suppresses, enter_raises

    def __enter__(self):
        self.calls.append("enter")
        if self.enter_raises:
            raise OSError("no lock")
        return self

    def __exit__(self, *exc_info):
        self.calls.append(("exit", exc_info[0]))
        return self.suppresses


LOCKS = {
    "another RLock": threading.RLock,
    "a Lock": threading.Lock,
    "a lock of Python's": RecordingLock,
    "a lock that suppresses": lambda: RecordingLock(suppresses=True),
    "a lock whose enter raises": lambda: RecordingLock(enter_raises=True),
    "None": lambda: None,
}


@pytest.mark.parametrize("raised", [None, ValueError, StopIteration])
@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_a_lock_replaced_on_grpcs_module_is_the_one_held(monkeypatch, lock, raised):
    made = {}

    def scenario():
        made["lock"] = LOCKS[lock]()
        monkeypatch.setattr(_observability, "_plugin_lock", made["lock"])
        return with_plugin(raised)(), getattr(made["lock"], "calls", None)

    helpers.assert_like_stock(scenario, "get_plugin")


@pytest.mark.parametrize("missing", ["_plugin_lock", "_OBSERVABILITY_PLUGIN"])
def test_a_name_missing_from_grpcs_module_raises_as_grpcs(monkeypatch, missing):
    monkeypatch.delattr(_observability, missing)
    helpers.assert_like_stock(with_plugin(ValueError), "get_plugin")


def test_a_plugin_replaced_on_grpcs_module_is_the_one_given(monkeypatch):
    plugin = Plugin()
    monkeypatch.setattr(_observability, "_OBSERVABILITY_PLUGIN", plugin)
    helpers.assert_like_stock(lambda: [with_plugin()(), with_plugin(StopIteration)(), plugin.reads], "get_plugin")


def test_rpcs_with_a_raising_plugin_fail_as_on_stock_grpc(stubs, monkeypatch):
    """A plugin whose tracing_enabled raises: the sync server's RPC never answers (grpc's own failure), the
    grpc.aio one does; grpc reads of the plugin what it reads stock."""
    from grpc_echo import aio_echo_server, echo_server

    pb2, pb2_grpc = stubs

    def sync_rpc(plugin):
        with echo_server(pb2, pb2_grpc) as address, grpc.insecure_channel(address) as channel:
            stub = pb2_grpc.EchoServiceStub(channel)
            stub.Unary(pb2.Echo(text="warm-up"))
            monkeypatch.setattr(_observability, "_OBSERVABILITY_PLUGIN", plugin)
            try:
                return stub.Unary(pb2.Echo(text="x"), timeout=1).text
            except grpc.RpcError as error:
                return error.code()
            finally:
                monkeypatch.setattr(_observability, "_OBSERVABILITY_PLUGIN", None)

    async def aio_rpc(plugin):
        async with aio_echo_server(pb2, pb2_grpc) as address, grpc.aio.insecure_channel(address) as channel:
            stub = pb2_grpc.EchoServiceStub(channel)
            await stub.Unary(pb2.Echo(text="warm-up"))
            monkeypatch.setattr(_observability, "_OBSERVABILITY_PLUGIN", plugin)
            try:
                return (await stub.Unary(pb2.Echo(text="x"), timeout=5)).text
            finally:
                monkeypatch.setattr(_observability, "_OBSERVABILITY_PLUGIN", None)

    def scenario():
        plugins = Plugin(raising=("tracing_enabled",)), Plugin(raising=("tracing_enabled",))
        return sync_rpc(plugins[0]), sorted(plugins[0].reads), asyncio.run(aio_rpc(plugins[1])), plugins[1].reads

    helpers.assert_like_stock(scenario, "get_plugin")


def test_what_differs_the_context_managers_type_and_when_it_reads_the_lock(monkeypatch):
    """docs/safety.md: patched, get_plugin() gives a fastcommon.fast_hooks.HookContext, which takes grpc's lock at
    the call (grpc's generator reads it at entry); entered twice, or exited unentered, it raises RuntimeError."""
    if why := helpers.unavailable("get_plugin"):
        pytest.skip(why)
    with fastcommon.patched():
        manager = _observability.get_plugin()
        assert (type(manager).__module__, type(manager).__name__) == ("fastcommon.fast_hooks", "HookContext")
        monkeypatch.setattr(_observability, "_plugin_lock", threading.RLock())
        with manager:
            assert not held(_observability._plugin_lock)
            with pytest.raises(RuntimeError, match="entered once"):
                manager.__enter__()
        with pytest.raises(RuntimeError, match="not entered"):
            _observability.get_plugin().__exit__(None, None, None)


def test_a_context_dropped_while_entered_lets_the_lock_go_as_grpcs_generator_does():
    def scenario():
        manager = _observability.get_plugin()
        manager.__enter__()
        entered = held(_observability._plugin_lock)
        del manager
        gc.collect()
        return entered, held(_observability._plugin_lock)

    helpers.assert_like_stock(scenario, "get_plugin")


# ------------------------------------------------------------------ _create_servicer_context


class RecordingContext:
    """A servicer context class of the test's own, put in grpc._server's _Context: what grpc made and finalized."""

    def __init__(self, *args, finalizing=None):
        self.args, self.finalizing, self.events = args, finalizing, ["made"]

    def _finalize_state(self):
        self.events.append("finalized")
        if self.finalizing:
            raise self.finalizing("finalizing")


def with_servicer_context(raised=None, finalizing=None):
    """A with-block of grpc._create_servicer_context as grpc's server writes it, its body raising ``raised``, the
    context's _finalize_state raising ``finalizing``: what it made, the exception as it came out, what ran."""

    def scenario():
        made, error = [], raised and raised("in the body")
        arguments = (object(), object(), object())
        try:
            with grpc._create_servicer_context(*arguments) as context:
                made.append((type(context), context.args == arguments, list(context.events)))
                if error is not None:
                    raise error
        except BaseException as exc:
            cause = (type(exc.__cause__), exc.__suppress_context__)
            return ("raised", type(exc), str(exc), exc is error, cause, made, context.events)
        return ("returned", made, context.events)

    return scenario


@pytest.mark.parametrize("finalizing", [None, ValueError, StopIteration])
@pytest.mark.parametrize("raised", [None, ValueError, StopIteration, GeneratorExit, KeyboardInterrupt])
def test_a_servicer_context_is_made_and_finalized_as_by_grpcs_generator(monkeypatch, raised, finalizing):
    monkeypatch.setattr(_server, "_Context", functools.partial(RecordingContext, finalizing=finalizing))
    helpers.assert_like_stock(with_servicer_context(raised, finalizing), "_create_servicer_context")


def test_grpcs_own_servicer_context_and_an_import_hook_as_on_stock_grpc(monkeypatch):
    def scenario():  # grpc's own _Context, of grpc's own arguments
        with grpc._create_servicer_context(None, None, None) as context:
            return type(context), context._rpc_event, context._state

    helpers.assert_like_stock(scenario, "_create_servicer_context")
    imported = []

    def recording_import(name, *args, **kwargs):
        imported.append((name, args[2:]))
        return original_import(name, *args, **kwargs)

    original_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", recording_import)
    helpers.assert_like_stock(lambda: [scenario(), imported[-1:]], "_create_servicer_context")
    monkeypatch.undo()
    monkeypatch.delattr(_server, "_Context")
    helpers.assert_like_stock(with_servicer_context(), "_create_servicer_context")


# ------------------------------------------------------------------ _get_running_loop


class Records(logging.Handler):
    """What reaches a logger: each record's fields, the loop's id named as such."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record):  # the id of the loop made for the scenario, where it is one; else any id
        message, loop_id = record.getMessage(), getattr(self, "loop_id", None)
        message = message.replace(str(loop_id), "ID") if loop_id else message.rstrip("0123456789") + "ID"
        self.seen.append((record.name, record.levelno, message, record.pathname, record.lineno, record.funcName))


def running_loop(level=logging.WARNING, logger=None):
    """_get_running_loop() outside a loop and inside one, cygrpc's logger at ``level`` (or replaced): what it gave and
    what was logged."""

    def scenario():
        records, cygrpcs = Records(), logging.getLogger("grpc._cython.cygrpc")
        cygrpcs.addHandler(records)
        was = cygrpcs.level
        cygrpcs.setLevel(level)
        loop = asyncio.new_event_loop()
        records.loop_id = id(loop)

        async def inside():
            return cygrpc._get_running_loop() is loop

        try:
            outside = cygrpc._get_running_loop()
            return outside, loop.run_until_complete(inside()), records.seen, logger and logger.calls
        finally:
            loop.close()
            cygrpcs.setLevel(was)
            cygrpcs.removeHandler(records)

    return scenario


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.WARNING])
def test_the_running_loop_and_the_debug_record_as_grpcs(level):
    helpers.assert_like_stock(running_loop(level), "_get_running_loop")


class RecordingLogger:
    """A _LOGGER of Python's own making: what grpc calls of it."""

    def __init__(self, raises=None):
        self.calls, self.raises = [], raises

    def debug(self, message, *args):
        self.calls.append(("debug", message.split("=")[0]))
        if self.raises:
            raise self.raises("from the logger")


class DebugFilterRaising(logging.Filter):
    def filter(self, record):
        raise RuntimeError("a filter failed")


def loggers(name):
    """A logger to put in cygrpc's _LOGGER, by the name the tests give it, made fresh (what it records: .calls)."""
    made = logging.Logger("grpc._cython.cygrpc.own", logging.DEBUG)
    made.addHandler(Records())
    if name == "a LoggerAdapter":
        return logging.LoggerAdapter(made, {})
    if name == "a Logger subclass":
        return type("Own", (logging.Logger,), {})("grpc._cython.cygrpc.own", logging.DEBUG)
    if name == "a debug of its own, not enabled for DEBUG":  # grpc calls it all the same
        made.setLevel(logging.INFO)
        made.debug = RecordingLogger().debug
    if name == "an isEnabledFor of its own, saying yes at INFO":
        made.setLevel(logging.INFO)
        made.isEnabledFor = lambda level: True
    if name == "disabled, its cache saying yes":
        made.isEnabledFor(logging.DEBUG)
        made.disabled = True
    if name == "a filter raising RuntimeError":
        made.addFilter(DebugFilterRaising())
    if name.startswith("an object"):
        return RecordingLogger(raises=RuntimeError if "raising" in name else None)
    return made


@pytest.mark.parametrize(
    "name",
    ["a LoggerAdapter", "a Logger subclass", "a debug of its own, not enabled for DEBUG",
     "an isEnabledFor of its own, saying yes at INFO", "disabled, its cache saying yes",
     "a filter raising RuntimeError", "an object", "an object raising RuntimeError", "a Logger at DEBUG"],
)  # fmt: skip
def test_a_logger_replaced_on_cygrpc_is_asked_as_grpc_asks_it(monkeypatch, name):
    def scenario():
        logger = loggers(name)
        monkeypatch.setattr(cygrpc, "_LOGGER", logger)
        recorded = next((each for each in (logger, getattr(logger.debug, "__self__", None)) if hasattr(each, "calls")),
                        None)  # fmt: skip
        handlers = [handler.seen for handler in getattr(logger, "handlers", ())]
        return running_loop(logger=recorded)(), [[record[:3] for record in seen] for seen in handlers]

    helpers.assert_like_stock(scenario, "_get_running_loop")


def test_logging_disabled_and_asyncios_lookup_replaced_answer_as_grpcs(monkeypatch):
    def scenario():
        logging.disable(logging.DEBUG)
        try:
            return running_loop(logging.DEBUG)()
        finally:
            logging.disable(logging.NOTSET)

    helpers.assert_like_stock(scenario, "_get_running_loop")
    sentinel = object()
    monkeypatch.setattr(asyncio, "get_running_loop", lambda: sentinel)
    helpers.assert_like_stock(lambda: cygrpc._get_running_loop() is sentinel, "_get_running_loop")
    monkeypatch.setattr(cygrpc, "asyncio", types.SimpleNamespace(get_running_loop=lambda: sentinel))
    helpers.assert_like_stock(lambda: cygrpc._get_running_loop() is sentinel, "_get_running_loop")


# ------------------------------------------------------------------ _is_async_handler


class Servicer:
    def unary(self, request, context): ...

    async def coroutine(self, request, context): ...

    async def async_generator(self, request, context):
        yield

    def generator(self, request, context):
        yield

    @classmethod
    async def class_coroutine(cls, request, context): ...

    @staticmethod
    async def static_coroutine(request, context): ...

    partial_coroutine = functools.partialmethod(coroutine, None)

    async def __call__(self, request, context): ...


class Awaiting:
    def __await__(self):
        yield


async def coroutine_function(request, context): ...


def plain(request, context): ...


def marked(function, value):
    """A copy of ``function`` carrying inspect's coroutine marker attribute (markcoroutinefunction's, on 3.12+)."""
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__)
    if value == "inspect's":
        return inspect.markcoroutinefunction(copy)
    copy._is_coroutine_marker = value
    return copy


def with_partialmethod():
    copy = types.FunctionType(plain.__code__, plain.__globals__)
    copy.__partialmethod__ = functools.partialmethod(coroutine_function)
    return copy


HANDLERS = {
    "a function": lambda: plain,
    "a coroutine function": lambda: coroutine_function,
    "a lambda": lambda: lambda request, context: None,
    "a method": lambda: Servicer().unary,
    "a coroutine method": lambda: Servicer().coroutine,
    "an async generator method": lambda: Servicer().async_generator,
    "a generator method": lambda: Servicer().generator,
    "a classmethod's coroutine": lambda: Servicer.class_coroutine,
    "a staticmethod's coroutine": lambda: Servicer.static_coroutine,
    "a partialmethod": lambda: Servicer().partial_coroutine,
    "a function naming a partialmethod": with_partialmethod,
    "a method of a function naming a partialmethod": lambda: types.MethodType(with_partialmethod(), Servicer()),
    "functools.partial of a coroutine function": lambda: functools.partial(coroutine_function, None),
    "functools.partial of a function": lambda: functools.partial(plain, None),
    "a callable object, async": lambda: Servicer(),
    "an awaitable": lambda: Awaiting(),
    "a coroutine": lambda: coroutine_function(None, None),
    "a generator-based coroutine": lambda: types.coroutine(Servicer().generator)(None, None),
    "a class": lambda: Servicer,
    "a builtin": lambda: len,
    "a builtin method": lambda: [].append,
    "a method of a callable object": lambda: types.MethodType(Servicer(), Servicer()),
    "a method of a method": lambda: types.MethodType(Servicer().coroutine, Servicer()),
    "a function with a marker of None": lambda: marked(plain, None),
    "a function with another marker": lambda: marked(plain, object()),
    "a Mock": lambda: unittest.mock.Mock(),
    "an AsyncMock": lambda: unittest.mock.AsyncMock(),
    "a Cython function": lambda: cygrpc.get_working_loop,
    "None": lambda: None,
}
if sys.version_info >= (3, 12):
    HANDLERS["a marked coroutine function"] = lambda: marked(plain, "inspect's")
    HANDLERS["a method of a marked function"] = lambda: types.MethodType(marked(plain, "inspect's"), Servicer())


def is_async(make):
    def scenario():
        handler = make()
        try:
            return cygrpc._is_async_handler(handler)
        finally:
            if inspect.iscoroutine(handler):
                handler.close()

    return scenario


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_a_handler_of_every_kind_is_answered_as_grpc_answers(handler):
    helpers.assert_like_stock(is_async(HANDLERS[handler]), "_is_async_handler")


@pytest.mark.parametrize("handler", ["a function", "a coroutine function", "a method", "an async generator method"])
def test_a_plain_function_or_method_is_answered_without_inspects_code(handler):
    if why := helpers.unavailable("_is_async_handler"):
        pytest.skip(why)
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_name)

    handler = HANDLERS[handler]()
    with fastcommon.patched():
        cygrpc._is_async_handler(handler)  # abc's answer, asked once
        sys.setprofile(profile)
        try:
            cygrpc._is_async_handler(handler)
        finally:
            sys.setprofile(None)
    assert called == []


def test_inspect_replaced_answers_as_grpc_with_it(monkeypatch):
    monkeypatch.setattr(inspect, "iscoroutinefunction", lambda handler: handler is plain)
    helpers.assert_like_stock(is_async(lambda: plain), "_is_async_handler")
    always = types.SimpleNamespace(isawaitable=lambda h: "awaitable", iscoroutinefunction=None, isasyncgenfunction=None)
    monkeypatch.setattr(cygrpc, "inspect", always)
    helpers.assert_like_stock(is_async(lambda: plain), "_is_async_handler")


def test_functions_registered_as_awaitable_after_patch_are_answered_as_grpc_answers():
    """abc's register() changes its cache token: fastcommon's asks isinstance(handler, Awaitable) again."""
    if why := helpers.unavailable("_is_async_handler"):
        pytest.skip(why)
    code = """
import collections.abc, types, fastcommon
from grpc._cython import cygrpc
def plain(): pass
answers = []
for patched in (False, True):
    if patched:
        fastcommon.patch()
    answers.append(cygrpc._is_async_handler(plain))
collections.abc.Awaitable.register(types.FunctionType)
answers.append(cygrpc._is_async_handler(plain))
fastcommon.unpatch()
answers.append(cygrpc._is_async_handler(plain))
print(answers)
"""
    assert helpers.python("-c", code, check_status=0).stdout.split() == ["[False,", "False,", "True,", "True]"]


# ------------------------------------------------------------------ review3's reproductions (each fails on 9a4606b)


def test_an_entered_context_collected_in_a_cycle_lets_the_lock_go_as_grpcs_generator_does():
    """An entered get_plugin() dropped with a frame in a reference cycle: the collector finalizes grpc's generator
    (the lock let go) before it clears anything; fastcommon's context was cleared first (tp_clear dropped its lock),
    so its __dealloc__ let nothing go and every other thread's get_plugin() blocked for ever."""

    def abandon():
        manager = _observability.get_plugin()
        manager.__enter__()
        try:
            raise ValueError("caught into a local: the frame, the exception and its traceback are a cycle")
        except ValueError as exc:
            caught = exc  # noqa: F841

    def scenario():
        lock = _observability._plugin_lock
        gc.disable()
        try:
            abandon()
            gc.collect()
        finally:
            gc.enable()
        left_held = held(lock)
        while lock._is_owned():  # the next tests' RPCs take it in other threads
            lock.release()
        return left_held

    helpers.assert_like_stock(scenario, "get_plugin")


def test_stdlib_functions_replaced_before_fastcommon_is_imported_are_called_as_grpc_calls_them():
    """builtins.__import__, Logger.debug and inspect.iscoroutinefunction replaced before fastcommon's import (an
    import hook, a library counting debug calls): grpc's hooks call them; fastcommon's took them for the stdlib's."""
    for name in ("_create_servicer_context", "_get_running_loop", "_is_async_handler"):
        if why := helpers.unavailable(name):
            pytest.skip(f"{name}: {why}")
    code = """
import asyncio, builtins, inspect, logging
calls = []
def recording(name, original):
    def replacement(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)
    return replacement
builtins.__import__ = recording("__import__", builtins.__import__)
logging.Logger.debug = recording("debug", logging.Logger.debug)
inspect.iscoroutinefunction = recording("iscoroutinefunction", inspect.iscoroutinefunction)

import grpc, grpc._server, fastcommon
from grpc._cython import cygrpc

def handler(request, context): ...

async def main():
    return [cygrpc._get_running_loop() is asyncio.get_running_loop() for _ in range(2)]

for patched in (False, False, True):  # the first round warms up: what asyncio.run imports once
    if patched:
        assert {"_create_servicer_context", "_get_running_loop", "_is_async_handler"} <= set(fastcommon.patch())
    del calls[:]
    with grpc._create_servicer_context(None, None, None):
        pass
    answers = asyncio.run(main()), cygrpc._is_async_handler(handler)
    print(answers, calls)
"""
    _, stock, patched = helpers.python("-c", code, check_status=0).stdout.splitlines()
    assert patched == stock


def test_a_servicer_context_class_gone_before_entry_raises_as_grpcs():
    """_server._Context deleted between the call and the entry: grpc's generator raises AttributeError."""

    def scenario():
        manager = grpc._create_servicer_context(None, None, None)
        context_class = _server._Context
        del _server._Context
        try:
            with manager:
                pass
        finally:
            _server._Context = context_class

    helpers.assert_like_stock(scenario, "_create_servicer_context")


def test_a_context_exited_twice_answers_as_grpcs():
    """contextlib's context manager exited again answers False (its generator has finished)."""

    def scenario():
        answers = []
        for manager in (_observability.get_plugin(), grpc._create_servicer_context(None, None, None)):
            manager.__enter__()
            manager.__exit__(None, None, None)
            answers.append((manager.__exit__(None, None, None), manager.__exit__(ValueError, ValueError(), None)))
        return answers

    helpers.assert_like_stock(scenario, "get_plugin", "_create_servicer_context")


def test_what_a_context_gave_is_let_go_at_exit_as_by_grpcs_generator():
    """grpc's context manager holds nothing of what its generator yielded once it has finished: the plugin (or the
    servicer context) goes with the program's last reference, however long the manager is kept."""
    import weakref

    class Yielded:
        def __init__(self, *args):
            pass

        def _finalize_state(self):
            pass

    def scenario():
        plugin, context_class = _observability._OBSERVABILITY_PLUGIN, _server._Context
        kept, gone = [], []
        try:
            _server._Context = Yielded
            for make in (_observability.get_plugin, lambda: grpc._create_servicer_context(None, None, None)):
                _observability._OBSERVABILITY_PLUGIN = Yielded()
                manager = make()
                with manager as given:
                    pass
                kept.append(manager)
                _observability._OBSERVABILITY_PLUGIN = None
                reference = weakref.ref(given)
                del given
                gone.append(reference() is None)
        finally:
            _observability._OBSERVABILITY_PLUGIN, _server._Context = plugin, context_class
        return gone

    helpers.assert_like_stock(scenario, "get_plugin", "_create_servicer_context")


def test_a_handler_passed_by_keyword_is_refused_as_safety_md_declares():
    """grpc's Cython function takes its one argument by name too; grpc passes it by position, and fastcommon's takes
    it so alone (one C argument, no keyword parsing): a TypeError, declared in docs/safety.md (review3)."""
    if why := helpers.unavailable("_is_async_handler"):
        pytest.skip(f"_is_async_handler: {why}")
    try:
        assert cygrpc._is_async_handler(handler=plain) is False
    except TypeError as error:  # grpcio 1.62's takes it by position alone, as fastcommon's does
        assert "takes no keyword arguments" in str(error)
    with fastcommon.patched():
        assert fastcommon.is_patched("_is_async_handler")
        with pytest.raises(TypeError, match="takes no keyword arguments"):
            cygrpc._is_async_handler(handler=plain)


def test_a_plugin_dropped_inside_the_with_block_goes_at_once_as_with_grpcs_generator():
    """grpc's generator yields the plugin and keeps no reference to it: replaced on grpc's module and dropped by the
    block, it goes at once (its __del__ runs there, not at the interpreter's exit, when grpc's module is gone)."""
    import weakref

    class Plugin:
        pass

    def scenario():
        saved = _observability._OBSERVABILITY_PLUGIN
        _observability._OBSERVABILITY_PLUGIN = Plugin()
        try:
            with _observability.get_plugin() as plugin:
                _observability._OBSERVABILITY_PLUGIN = None
                reference = weakref.ref(plugin)
                del plugin
                return reference() is None
        finally:
            _observability._OBSERVABILITY_PLUGIN = saved

    helpers.assert_like_stock(scenario, "get_plugin")
