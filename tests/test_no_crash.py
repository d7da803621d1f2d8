"""Call sequences that once killed the interpreter, each in a process of its own: exit 0 and the right answer.

Each runs compiled and pure (FASTCOMMON_PURE_PYTHON=1). Status 139 (SIGSEGV) was the answer before
the class a metadata entry constructor builds became its own, checked at the C boundary, and before grpc.aio's
Metadata methods held what they use across Python code run in their middle (a key's __hash__, an add). Under a
debug CPython (.ci/hardening debug), every compiled entry point also leaves the interpreter's total reference count
flat.
"""

import json
import os
import sys
import textwrap

import helpers
import pytest
from conftest import NEEDS_GRPCIO, load_implementation

pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

SEARCH_PATH = os.pathsep.join([helpers.PROJECT_DIR, helpers.TESTS_DIR])  # grpc_echo, and the tests' helpers

# What `python -m fastcommon check` answers, by way of runpy, as a CI step in a patched process would run it.
CHECK = """
import contextlib, io, runpy, sys

def check():
    out = io.StringIO()
    sys.argv = ["fastcommon", "check"]
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_module("fastcommon", run_name="__main__")
        except SystemExit as exit:
            return exit.code, out.getvalue()
"""


@pytest.fixture(params=["compiled", "pure"])
def environ(request):
    """The changes to the environment that make a child compiled or pure."""
    if request.param == "compiled":
        load_implementation("fast_common")
        return {"PYTHONPATH": SEARCH_PATH, "FASTCOMMON_PURE_PYTHON": None}
    return {"PYTHONPATH": SEARCH_PATH, "FASTCOMMON_PURE_PYTHON": "1"}


def answer(code, environ):
    result = helpers.python("-c", textwrap.dedent(code), cwd=helpers.PROJECT_DIR, env=environ, check_status=0)
    return json.loads(result.stdout.splitlines()[-1])


def test_check_in_a_patched_process_then_a_metadata_entry(environ):
    before, during, after, entry = answer(
        CHECK
        + """
import json
import fastcommon
from grpc._cython import cygrpc

before = check()
fastcommon.patch()
during = check()
entry = cygrpc._Metadatum("k", "v")  # built by what patch() put into grpc, after check judged it
entry = [type(entry).__name__, list(entry), entry.key]
fastcommon.unpatch()
print(json.dumps([before, during, check(), entry]))
""",
        environ,
    )
    assert before == during == after
    assert entry == ["_Metadatum", ["k", "v"], "k"]
    assert before[0] == (1 if environ["FASTCOMMON_PURE_PYTHON"] else 0)


def test_assess_in_a_patched_process_then_an_rpc_with_a_header(environ, stubs):
    stubs_dir = os.path.dirname(stubs[0].__file__)
    [reply] = answer(
        f"""
import json, grpc
import fastcommon
import helpers
from grpc_echo import echo_server, import_stubs

pb2, pb2_grpc = import_stubs({stubs_dir!r})
with echo_server(pb2, pb2_grpc) as address, grpc.insecure_channel(address) as channel:
    fastcommon.patch()
    helpers.verdicts()
    reply = pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="metadata"), metadata=(("x-one", "header"),))
    fastcommon.unpatch()
print(json.dumps([reply.text]))
""",
        environ,
    )
    assert reply == "x-one='header'"


def test_every_callable_of_the_compiled_module_refuses_what_it_cannot_use():
    load_implementation("fast_common")
    answered = answer(
        """
import collections, json
from fastcommon import fast_common, fast_metadata
from grpc._cython import cygrpc

odd = [(), (None,), (len,), (tuple,), (int,), (object(),), (None, None), (1, 2, 3), ("k", "v"), (b"",)]
odd += [(collections.namedtuple("N", "a b"),), (type("T", (tuple,), {}),), (cygrpc._Metadatum, "extra")]
answered = {}
modules = [fast_common, fast_metadata]
try:
    from fastcommon import fast_entry  # not built for the Limited API (abi3)
    modules.append(fast_entry)
    constructor = fast_entry.MetadatumConstructor(cygrpc._Metadatum)
except ImportError:
    constructor = None
callables = {
    f"{module.__name__}.{name}": value for module in modules
    for name, value in vars(module).items() if callable(value) and name[:2] != "__"
}  # fmt: skip
if constructor is not None:
    callables["a constructor of grpc's class"] = constructor
for name, function in sorted(callables.items()):
    for args in odd:
        for kwargs in ({}, {"counter": 4}, {"counter": -2}, {"counters": {}}, {"key": "k", "value": "v"}):
            try:
                function(*args, **kwargs)
            except Exception as exc:
                answered[type(exc).__name__] = answered.get(type(exc).__name__, 0) + 1
print(json.dumps([sorted(callables), answered]))
""",
        {"PYTHONPATH": SEARCH_PATH},
    )
    names, raised = answered
    assert "set_metadatum_class" not in names and "new_metadatum" not in names  # the global they shared is gone
    assert raised["TypeError"] > 0  # refused, not crashed


@pytest.mark.parametrize("report", [[], ["--report"]], ids=["run", "run --report"])
def test_check_answers_the_same_in_a_process_adopted_by_run(environ, report):
    status = 1 if environ["FASTCOMMON_PURE_PYTHON"] else 0  # pure Python buys nothing: check says so
    check = ["-m", "fastcommon", "check"]
    plain = helpers.python(*check, cwd=helpers.PROJECT_DIR, env=environ, check_status=status)
    adopted = helpers.python("-m", "fastcommon", "run", *report, *check, cwd=helpers.PROJECT_DIR, env=environ,
                             check_status=status)  # fmt: skip
    assert adopted.stdout == plain.stdout and plain.stdout.startswith("fastcommon check: ")


# Each command once, with one implementation each; .ci/run runs the whole suite adopted too.
@pytest.mark.parametrize("report, pure", [(["--report"], False), ([], True)], ids=["run --report", "run, pure"])
def test_the_documented_run_of_the_suite_passes_in_a_checkout(report, pure):
    environ = {"PYTHONPATH": SEARCH_PATH, "FASTCOMMON_PURE_PYTHON": "1" if pure else None}
    if not pure:
        load_implementation("fast_common")
    # as a user adopts it: python -m fastcommon run --report -m pytest -q tests (here the module that crashed)
    result = helpers.python(
        "-m", "fastcommon", "run", *report, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_entry.py",
        cwd=helpers.PROJECT_DIR, env={**environ, "HYPOTHESIS_PROFILE": "dev"}, check_status=0,
    )  # fmt: skip
    assert " passed" in result.stdout.splitlines()[-1]
    assert ("fastcommon --report, process " in result.stderr) == bool(report)


# Each reproduction runs on stock grpc, then patched, in one process: a crash fails it; otherwise both outcomes
# (the value made, or the exception's type and text) must be the same. Each defines run(), which makes its
# objects afresh.
REPRODUCTIONS = {
    "a key's hash empties a later list pair": """
def run():
    later = ["k", "v"]
    class Key(str):
        def __hash__(self):
            later.clear()
            return 0
    return Metadata((Key("a"), "x"), later)
""",
    "the same through from_tuple": """
def run():
    later = ["k", "v"]
    class Key(str):
        def __hash__(self):
            later.clear()
            return 0
    return Metadata.from_tuple(((Key("a"), "x"), later))
""",
    "the same through every aio call's metadata (_init_metadata)": """
def run():
    later = ["k", "v"]
    class Key(str):
        def __hash__(self):
            later.clear()
            return 0
    return _BaseMultiCallable._init_metadata(((Key("a"), "x"), later), None)
""",
    "an instance's own add empties a later list pair, as __init__ runs again": """
def run():
    later = ["k", "v"]
    metadata = Metadata()
    metadata.add = lambda key, value: later.clear()
    metadata.__init__(("a", "x"), later)
    return metadata
""",
    "a key's hash shortens a later list pair (a freed slot was read)": """
def run():
    later = ["k", "v"]
    class Key(str):
        def __hash__(self):
            del later[1:]
            return 0
    return Metadata((Key("a"), "x"), later)
""",
    "a key's hash rebinds Metadata.add": """
def run():
    own_add = Metadata.add
    class Key(str):
        armed = True  # until run() returns: a key hashed to be compared or printed does nothing
        def __hash__(self):
            if Key.armed:
                Metadata.add = lambda self, key, value: own_add(self, "rebound", value)
            return 0
    try:
        return Metadata((Key("a"), "x"), ("b", "y"))
    finally:
        Key.armed = False
        Metadata.add = own_add
""",
    "the iterator copied, deep-copied, pickled, its state forged": """
def run():
    import copy, pickle
    iterator = iter(Metadata(("a", "1"), ("b", "2")))
    next(iterator)
    answers = []
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps, lambda it: it.__setstate__((None, -5))):
        try:
            attempt(iterator)
            answers.append("done")
        except (TypeError, AttributeError) as exc:
            answers.append(type(exc).__name__)
    return answers + [list(iterator)]
""",
    # The second crash review's: a Metadata's finalizer adds a key that is not a str after the iterator judged its
    # keys, and that key's finalizer asks the iterator for more while it lets go (iterator.h read a cleared key).
    "a key added as the iterator starts, whose finalizer re-enters the ending iterator": """
def run():
    state, seen = {}, []

    class Hostile:
        def __hash__(self):
            return 12345

        def __del__(self):
            if state.get("ending"):
                state["values"].append("late")
                try:
                    seen.append(repr(next(state["it"])))
                except BaseException as exc:
                    seen.append(type(exc).__name__)

    class AddsAKey:
        def __del__(self):
            state["values"] = ["hv"]
            state["od"][Hostile()] = state["values"]

    metadata = Metadata(("a", "1"))
    metadata.extra = AddsAKey()
    state["od"] = metadata._metadata
    state["it"] = iterator = iter(metadata)
    del metadata
    seen.append(repr(next(iterator)))
    for key in [key for key in state["od"] if type(key) is Hostile]:
        del state["od"][key]
    del key
    state["ending"] = True
    seen.append(repr(list(iterator)))
    state.clear()
    return seen
""",
    "a class whose instances object.__new__ cannot make, given to metadata_methods": """
def run():
    try:
        from fastcommon import fast_metadata
    except ImportError:  # pure Python: nothing to give it
        return "refused"

    class Unsafe(Metadata, dict):
        __new__ = object.__new__

    try:
        fast_metadata.metadata_methods({"Metadata.from_tuple": vars(Metadata)["from_tuple"]}, Unsafe)
    except TypeError:
        return "refused"
    return Unsafe.from_tuple((("k", "v"),))
""",
    # Found by review too: compiled methods call each other through type slots, not Python frames; a Metadata nested
    # in another past the recursion limit overflowed the C stack.
    "a Metadata as another's _metadata, nested past the recursion limit": """
def run():
    nested = Metadata(("a", "leaf"))
    for _ in range(5000):
        outer = Metadata()
        outer._metadata, nested = nested, outer
    answers = []
    for action in (len, lambda m: next(iter(m)), lambda m: "a" in m, lambda m: m["a"], lambda m: m.get("a"),
                   lambda m: m.get_all("a"), lambda m: m.__setitem__("a", "x")):
        try:
            answers.append(repr(action(nested)))
        except RecursionError:
            answers.append("RecursionError")  # its text varies with the C function that noticed
    return answers
""",
    # Found by review: with a key that is not a str, grpc 1.85's `in` answers without looking, and __setitem__
    # went straight to the nested Metadata's __setitem__, C calling C: a C stack overflow at 200,000.
    "a Metadata as another's _metadata, set with a key that is not a str, nested 200,000 deep": """
def run():
    nested = Metadata(("a", "leaf"))
    for _ in range(200000):
        outer = Metadata()
        outer._metadata, nested = nested, outer
    answers = []
    for key in (1, b"a"):
        try:
            nested[key] = "x"
            answers.append("set")
        except RecursionError:
            answers.append("RecursionError")
    return answers
""",
    "a Metadata among another's values, nested past the recursion limit": """
def run():
    nested = Metadata(("a", "leaf"))
    for _ in range(5000):
        nested = Metadata(("a", nested))
        nested._metadata["a"] = nested._metadata["a"][0]  # the values: a Metadata, iterated and measured by grpc
    answers = []
    for action in (len, list):
        try:
            answers.append(repr(action(nested)))
        except RecursionError:
            answers.append("RecursionError")
    return answers
""",
    "an own __iter__ that returns no iterator, given to metadata_methods": """
def run():
    try:
        from fastcommon import fast_metadata
    except ImportError:  # pure Python: nothing to give it
        return "TypeError"

    class Held:
        pass

    made = fast_metadata.metadata_methods({"Held.__iter__": lambda self: [("k", "v")]}, Held)
    Held.__iter__ = made["Held.__iter__"]
    held = Held()
    held._metadata = {"k": ["v"]}  # not an OrderedDict: grpc's own runs
    try:
        return list(held)
    except TypeError as exc:
        return type(exc).__name__
""",
    # Found by review: __iter__ read the iterator's type as a module global; another type assigned there was
    # allocated and written into as if it were the iterator (a range_iterator came out broken).
    "the compiled module's MetadataIterator rebound to another type": """
def run():
    try:
        from fastcommon import fast_metadata
    except ImportError:  # pure Python: nothing to rebind
        return [("a", "1")]
    own = fast_metadata.MetadataIterator
    fast_metadata.MetadataIterator = type(iter(range(0)))
    try:
        return list(Metadata(("a", "1")))
    finally:
        fast_metadata.MetadataIterator = own
""",
}
REPRODUCTION = """
import json
import fastcommon
from grpc.aio import Metadata
from grpc.aio._channel import _BaseMultiCallable
from helpers import probes

seen = probes.seen
{code}

def outcome():
    try:
        return ["returned", repr(seen(run()))]
    except Exception as exc:
        return ["raised", type(exc).__name__, str(exc)]

stock = outcome()
fastcommon.patch()
print(json.dumps([stock, outcome(), fastcommon.is_patched("Metadata.__init__")]))
"""


@pytest.mark.parametrize("reproduction", sorted(REPRODUCTIONS))
def test_each_reproduction_ends_as_with_stock_grpc(environ, reproduction):
    stock, patched, compiled = answer(REPRODUCTION.format(code=REPRODUCTIONS[reproduction]), environ)
    assert patched == stock
    assert compiled == (environ["FASTCOMMON_PURE_PYTHON"] is None)  # it ran through fastcommon's methods


# Found by review: before 3.12 a level of a Metadata nested in another took about twice the C stack of a level of
# CPython's own slots and counted once towards the recursion limit, so a limit the C stack held for stock grpc
# overflowed it patched (SIGSEGV from about 9,500 on 3.11's main thread). Each action runs in a process of its own,
# stock then patched, at a limit of 10,000, which the main thread's 8 MB hold for stock on a release build (a debug
# or sanitized build's frames are larger); where stock grpc's own recursion overflows the C stack too (its `in` and
# `len` recurse through C slots), there is nothing to compare.
SELF_NESTED = """
import sys
import fastcommon
from grpc.aio import Metadata

action, mode = sys.argv[1], sys.argv[2]
if mode == "patched":
    fastcommon.patch()
metadata = Metadata(("a", "leaf"))
metadata._metadata = metadata
ACTIONS = {"len": len, "list": list, "in": lambda m: "a" in m, "[]": lambda m: m["a"], "get": lambda m: m.get("a"),
           "get_all": lambda m: m.get_all("a"), "set": lambda m: m.__setitem__("a", "x")}
sys.setrecursionlimit(10000)
try:
    print(repr(ACTIONS[action](metadata)))
except RecursionError:
    print("RecursionError")
"""


@pytest.mark.skipif(
    hasattr(sys, "gettotalrefcount") or "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="a debug or sanitized build's C frames are larger: stock grpc's own would overflow the C stack",
)
def test_a_metadata_as_its_own_metadata_under_a_raised_recursion_limit_ends_as_with_stock_grpc():
    load_implementation("fast_common")
    compared = {}
    for action in ("len", "list", "in", "[]", "get", "get_all", "set"):
        ended = {}
        for mode in ("stock", "patched"):
            result = helpers.python(
                "-c", SELF_NESTED, action, mode, env={"PYTHONPATH": SEARCH_PATH}, cwd=helpers.PROJECT_DIR
            )
            ended[mode] = (result.returncode, result.stdout)
        if ended["stock"][0] == 0:  # else stock grpc overflowed the C stack itself
            compared[action] = ended
    assert compared and all(ended["patched"] == ended["stock"] for ended in compared.values()), compared


# Under a debug CPython (Py_DEBUG: .ci/hardening debug), sys.gettotalrefcount() counts every reference the
# interpreter holds. Every compiled entry point, the constructor and grpc.aio's Metadata methods patch() puts
# into grpc, is called 100,000 times after a warm-up; a leak of one reference a call would move the total by
# 100,000 (the Metadata round, by far more: it makes dozens of calls).
REFCOUNT_PROBE = """
import asyncio, importlib, json, logging, sys
import fastcommon
from fastcommon import fast_common, fast_hooks, fast_metadata
import grpc
from grpc import _observability
from grpc._cython import cygrpc
from inputs import METHOD, serialize_raises_exception
fast_entry = None if fast_common.LIMITED_API else importlib.import_module("fastcommon.fast_entry")  # not in abi3

logging.getLogger("grpc._common").disabled = True  # the failing serializer's path, without 100,000 records
grpcs_is_async_handler = cygrpc._is_async_handler  # grpc's Cython, built for a release CPython: its own drift
fastcommon.patch()
constructor = cygrpc._Metadatum
entry_class = type(constructor("k", "v"))
from grpc.aio import Metadata
from grpc.aio._channel import _BaseMultiCallable

HEADERS = tuple((f"x-header-{i}", f"value {i}") for i in range(10)) + (("x-header-1", b"\\x00again"),)


def with_plugin(raised):
    with _observability.get_plugin():
        if raised:
            raise ValueError("in the body")


def with_servicer_context():
    with grpc._create_servicer_context(None, None, None):
        pass


async def handler(request, context):
    pass


loop = asyncio.new_event_loop()


def in_a_loop():
    asyncio._set_running_loop(loop)
    try:
        return cygrpc._get_running_loop()
    finally:
        asyncio._set_running_loop(None)


def metadata_methods():
    metadata = _BaseMultiCallable._init_metadata(HEADERS, None)
    tuple(metadata), len(metadata), metadata["x-header-1"], metadata.get("missing"), metadata.get_all("x-header-1")
    metadata["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    metadata["x-header-2"] = "again"
    metadata.add("x-header-3", "more"), "x-header-3" in metadata, Metadata.from_tuple(tuple(metadata))
    iterator = iter(metadata)
    next(iterator), metadata.add("x-header-0", "on the way"), list(iterator)
    try:
        metadata["missing"]
    except KeyError:
        pass


calls = {
    "encode(str)": (fast_common.encode, (METHOD,)),
    "encode(bytes)": (fast_common.encode, (METHOD.encode(),)),
    "decode(bytes)": (fast_common.decode, (b"\\xff" + METHOD.encode(),)),
    "decode(str)": (fast_common.decode, (METHOD,)),
    "serialize": (fast_common.serialize, (METHOD, str.encode)),
    "serialize, failing": (fast_common.serialize, (METHOD, serialize_raises_exception)),
    "deserialize": (fast_common.deserialize, (b"x", None)),
    "counted encode": (fast_common.Counted(0).encode, (METHOD,)),
    "counted decode": (fast_common.Counted(1).decode, (b"x",)),
    "counted serialize": (fast_common.Counted(2).serialize, (METHOD, None)),
    "counted deserialize": (fast_common.Counted(3).deserialize, (b"x", bytes)),
    "calls": (fast_common.calls, ()),
    "calls of the Metadata methods": (fast_metadata.calls, ()),
    "patch()'s constructor(k, v)": (constructor, ("user-agent", "grpc-python")),
    "patch()'s constructor, any other call": (constructor, ("k",)),
    "grpc.aio Metadata: a call's path, reads, sets, iteration while adding": (metadata_methods, ()),
    "grpc.aio Metadata, off the fast path": (Metadata, ((1, "v"), ["k", "v"], ("k", None))),
    "get_plugin's with-block": (with_plugin, (False,)),
    "get_plugin's with-block, raising": (with_plugin, (True,)),
    "_create_servicer_context's with-block": (with_servicer_context, ()),
    "_is_async_handler": (cygrpc._is_async_handler, (handler,)),
    "_is_async_handler, grpc's own": (cygrpc._is_async_handler, (len,)),
    "_get_running_loop": (cygrpc._get_running_loop, ()),
    "_get_running_loop, in a loop": (in_a_loop, ()),
    "calls of the hooks": (fast_hooks.calls, ()),
}
if fast_entry is not None:
    calls["MetadatumConstructor(cls)"] = (fast_entry.MetadatumConstructor, (entry_class,))
    calls["MetadatumConstructor(refused)"] = (fast_entry.MetadatumConstructor, (len,))
def delta(function, args):
    def run(n):
        for _ in range(n):
            try:
                function(*args)
            except Exception:
                pass
    run(1000)
    before = sys.gettotalrefcount()
    run(100_000)
    return sys.gettotalrefcount() - before
deltas = {label: delta(function, args) for label, (function, args) in calls.items()}
# grpc's extension counts no reference it takes in a debug CPython's total (its Py_INCREF is a release build's),
# so a path that hands the call to it moves the total by what grpc's own call moves it: that much is grpc's.
deltas["_is_async_handler, grpc's own"] -= delta(grpcs_is_async_handler, (len,))
fastcommon.unpatch()
print(json.dumps(deltas))
"""


def test_the_interpreters_total_reference_count_stays_flat():
    if not hasattr(sys, "gettotalrefcount"):
        pytest.skip("needs a debug CPython (Py_DEBUG), as .ci/hardening debug runs the suite")
    fast_common = load_implementation("fast_common")
    result = helpers.python("-c", REFCOUNT_PROBE, env={"PYTHONPATH": helpers.TESTS_DIR}, timeout=600, check_status=0)
    deltas = json.loads(result.stdout)
    assert len(deltas) == (25 if fast_common.LIMITED_API else 27), deltas  # abi3 builds no fast_entry
    assert all(abs(delta) < 100 for delta in deltas.values()), deltas
