"""Many threads calling every compiled entry point on shared objects at once: the same answers, no lost update, no
crash. With the GIL this checks the answers; on free-threaded CPython (.ci/free-threaded, where the module says it
needs no GIL) the threads really run at once, and under ThreadSanitizer a data race in the module fails the run.

Where CPython's own OrderedDict is not thread-safe (free-threaded 3.13: gh-125996, fixed in 3.14), two threads that
change one Metadata race inside CPython, with grpc's own methods as with ours: there each thread changes a Metadata
of its own, and they share the one they read and iterate.

grpc.aio's Metadata here is a class of this test's own holding grpc's methods, grpc's own code (from grpcio, or
from grpcio's source where grpcio cannot be installed: tests/grpc_source.py), with fastcommon's made for it.
"""

import os
import sys
import threading
import types

import pytest
from conftest import abi3_build, load_implementation

THREADS = 8
ROUNDS = int(os.environ.get("FASTCOMMON_THREAD_ROUNDS", "300"))  # each thread's; fewer under ThreadSanitizer
# CPython's OrderedDict is thread-safe with a GIL, and without one from 3.14 on.
SHARED_WRITES = getattr(sys, "_is_gil_enabled", lambda: True)() or sys.version_info >= (3, 14)
METHODS = ("__init__", "add", "from_tuple", "_create", "__iter__", "__len__", "__getitem__", "get", "get_all",
           "__contains__", "__setitem__")  # fmt: skip


def grpcs_metadata():
    """grpc's Metadata class and its _BaseMultiCallable._init_metadata function: grpcio's, or its source's."""
    try:
        from grpc.aio import _channel, _metadata
    except ImportError:
        import grpc_source

        if grpc_source.directory() is None:
            pytest.skip("neither grpcio nor its source (FASTCOMMON_TESTS_GRPC_SOURCE) is here")
        module = grpc_source.aio_metadata()
        return module.Metadata, grpc_source.init_metadata(module.Metadata)
    return _metadata.Metadata, _channel._BaseMultiCallable.__dict__["_init_metadata"].__func__


@pytest.fixture(scope="module")
def patched_class():
    """A Metadata class holding fastcommon's methods, made for it, and an _init_metadata that makes it."""
    fast_metadata = load_implementation("fast_metadata")
    metadata, init_metadata = grpcs_metadata()
    owns = {name: vars(metadata)[name] for name in METHODS if name in vars(metadata)}
    cls = type("Metadata", (metadata,), dict(owns))
    own_init_metadata = types.FunctionType(
        init_metadata.__code__, {**init_metadata.__globals__, "Metadata": cls}, "_init_metadata",
        init_metadata.__defaults__,
    )  # fmt: skip
    names = {f"Metadata.{name}": own for name, own in owns.items()}
    names["_BaseMultiCallable._init_metadata"] = staticmethod(own_init_metadata)
    counters = {name: 5 + i for i, name in enumerate(names)}
    made = fast_metadata.metadata_methods(names, cls, counters=counters)
    for name, method in made.items():
        if name.startswith("Metadata."):
            setattr(cls, name.split(".")[1], method)
    return cls, made["_BaseMultiCallable._init_metadata"].__func__, counters


def run_threads(work):
    """work(index) in THREADS threads started together; the exceptions they raised."""
    start, raised = threading.Barrier(THREADS), []

    def run(index):
        start.wait(timeout=60)
        try:
            work(index)
        except BaseException as exc:  # reported by the test
            raised.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads)
    return raised


def test_one_metadata_changed_and_read_by_every_thread_loses_nothing(patched_class):
    cls, init_metadata, counters = patched_class
    fast_metadata = load_implementation("fast_metadata")
    shared = cls(("common", "first"), *((f"start-{i}", i) for i in range(THREADS * ROUNDS)))
    changed = [shared if SHARED_WRITES else cls(("common", "first")) for _ in range(THREADS)]
    shared_iterator = iter(shared)
    before = fast_metadata.calls()
    seen_while_changing = []

    def work(index):
        own, target = f"thread-{index}", changed[index]
        for round_ in range(ROUNDS):
            target.add(own, round_)
            target.add("common", (index, round_))
            target[f"set-{index}"] = round_
            assert target[own] == 0 and target.get(own) == 0 and target.get_all(own)[-1] == round_
            assert "common" in shared and len(target) >= round_
            made = cls.from_tuple(((own, "a"), ("b", round_), (own, "c")))
            assert tuple(made) == ((own, "a"), (own, "c"), ("b", round_)) and len(made) == 3
            assert tuple(init_metadata(((own, round_),), None)) == ((own, round_),)
            if round_ % 50 == 0:
                try:
                    seen_while_changing.append(tuple(shared))  # iterated while the others change it (3.13t: theirs)
                except RuntimeError:  # "OrderedDict mutated during iteration", as grpc's generator raises it
                    pass
            try:
                next(shared_iterator, None)  # one iterator advanced by every thread
            except (ValueError, RuntimeError):  # "generator already executing"; the OrderedDict changed size
                pass

    assert run_threads(work) == []
    for index, target in enumerate(changed):
        assert target.get_all(f"thread-{index}") == list(range(ROUNDS))
        assert target[f"set-{index}"] == ROUNDS - 1
    distinct = [shared] if SHARED_WRITES else changed
    common = [entry for target in distinct for entry in target.get_all("common")[1:]]
    assert sorted(common) == sorted((i, r) for i in range(THREADS) for r in range(ROUNDS))
    assert all(isinstance(item, tuple) and len(item) == 2 for items in seen_while_changing for item in items)
    calls = fast_metadata.calls()
    assert calls[counters["Metadata.add"]] - before[counters["Metadata.add"]] >= 2 * THREADS * ROUNDS
    from_tuple = counters["Metadata.from_tuple"]  # called, and done in place by _init_metadata
    assert calls[from_tuple] - before[from_tuple] == 2 * THREADS * ROUNDS


def test_the_functions_shared_by_every_thread_count_every_call():
    fast_common = load_implementation("fast_common")
    before = fast_common.calls()
    encoding, decoding, serializing, deserializing = (fast_common.Counted(counter) for counter in range(4))

    def work(index):
        text = f"h\xe9llo {index}"
        for round_ in range(ROUNDS):
            assert encoding.encode(text) == text.encode() == fast_common.encode(text)
            assert decoding.decode(text.encode()) == text == fast_common.decode(text.encode())
            assert serializing.serialize(round_, str) == str(round_)
            assert deserializing.deserialize(b"x", None) == b"x"

    assert run_threads(work) == []
    after = fast_common.calls()
    assert [after[i] - before[i] for i in range(4)] == [THREADS * ROUNDS] * 4  # no count lost


def test_one_entry_constructor_shared_by_every_thread():
    if abi3_build():
        pytest.skip("the Limited API (abi3) build has no entry constructor")
    fast_entry = load_implementation("fast_entry")
    entry_class = type("_Metadatum", (tuple,), {"__slots__": ()})
    build = fast_entry.MetadatumConstructor(entry_class, counter=4)
    before = fast_entry.calls()[4]

    def work(index):
        for round_ in range(ROUNDS):
            entry = build(index, round_)
            assert (
                type(entry) is entry_class and tuple(entry) == (index, round_) and hash(entry) == hash((index, round_))
            )

    assert run_threads(work) == []
    assert fast_entry.calls()[4] - before == THREADS * ROUNDS


# grpc's hooks as grpc's source has them (_observability.py, cygrpc's aio/common.pyx.pxi and server.pyx.pxi), in a
# module of this test's own: the same code, whether or not grpcio is here.
HOOKS_SOURCE = """
import asyncio, contextlib, inspect, logging, threading
_LOGGER = logging.getLogger("grpc._cython.cygrpc")
_plugin_lock = threading.RLock()
_OBSERVABILITY_PLUGIN = None

@contextlib.contextmanager
def get_plugin():
    with _plugin_lock:
        yield _OBSERVABILITY_PLUGIN

def _get_running_loop():
    try:
        loop = asyncio.get_running_loop()
        _LOGGER.debug(f"[_cygrpc] Loaded running loop: {id(loop)=}")
        return loop
    except RuntimeError:
        return None

def _is_async_handler(handler):
    return inspect.isawaitable(handler) or inspect.iscoroutinefunction(handler) or inspect.isasyncgenfunction(handler)
"""


def test_the_hooks_shared_by_every_thread_hold_the_lock_and_count_every_call(monkeypatch):
    fast_hooks = load_implementation("fast_hooks")
    module = types.ModuleType("hooks_of_this_test")
    exec(HOOKS_SOURCE, vars(module))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    names = ("get_plugin", "_get_running_loop", "_is_async_handler")
    counters = dict(zip(names, (20, 21, 22), strict=True))
    made = fast_hooks.hooks({name: getattr(module, name) for name in names}, counters=counters)
    before, shared = fast_hooks.calls(), [0]

    async def coroutine():
        pass

    def work(index):
        for _ in range(ROUNDS):
            with made["get_plugin"]() as plugin:
                counted = shared[0]  # read, then written: a lost update, were the lock not held
                assert plugin is None and module._plugin_lock._is_owned()
                shared[0] = counted + 1
            assert made["_is_async_handler"](coroutine) is True and made["_is_async_handler"](work) is False
            assert made["_get_running_loop"]() is None

    assert run_threads(work) == []
    assert shared[0] == THREADS * ROUNDS
    after = fast_hooks.calls()
    assert [after[i] - before[i] for i in counters.values()] == [THREADS * ROUNDS] * 2 + [2 * THREADS * ROUNDS]


def test_the_module_says_truly_what_it_needs_of_the_gil():
    load_implementation("fast_common")
    if not hasattr(sys, "_is_gil_enabled"):
        pytest.skip("CPython before 3.13 has a GIL, always")
    import sysconfig

    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert sys._is_gil_enabled() == (not free_threaded or os.environ.get("PYTHON_GIL") == "1")
