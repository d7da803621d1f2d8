"""Every entry point of fastcommon in random orders (hypothesis' RuleBasedStateMachine).

The steps: patch, unpatch, nested patched() blocks, is_patched, the status, check, assess; the compiled
module's callables given arbitrary objects; another library wrapping grpc's objects before fastcommon
and after it, and unwrapping them; patching from one thread while RPCs run on others; fork. After every
step a real sync RPC and a real asyncio RPC, each carrying metadata, answer exactly as stock grpc did,
and judging (status, check, assess) has changed nothing and answers the same whatever fastcommon did.
"""

import asyncio
import collections
import contextlib
import logging
import os
import select
import threading
import warnings

import pytest
from conftest import GRPC_HOOKS, GRPC_METADATA_ORIGINALS, GRPC_METADATUM, GRPC_ORACLE, NEEDS_GRPCIO

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import fastcommon
from grpc_echo import aio_echo_server, echo_server

try:
    from fastcommon import fast_common
except ImportError:  # a pure build: the compiled module's rules do not run
    fast_common = None
try:
    from fastcommon.fast_entry import MetadatumConstructor
except ImportError:  # pure, or the Limited API (abi3)
    MetadatumConstructor = None

HEADERS = (("x-state", "machine"), ("x-blob-bin", b"\x00\xff"), ("x-state", "again"))
NAMES = tuple(name for name in helpers.NAMES if helpers.original(name) is not None)  # what this grpcio has
GRPCS_OWN = {**GRPC_ORACLE, "_Metadatum": GRPC_METADATUM, **GRPC_METADATA_ORIGINALS, **GRPC_HOOKS}
ODD = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.builds(object),
    st.sampled_from(
        [len, int, tuple, type, object, GRPC_METADATUM, collections.namedtuple("Pair", "key value"),
         type("WithDict", (tuple,), {}), ("k", "v"), [b"chunk"], memoryview(b"view")]
    ),
)  # fmt: skip
EXAMPLES = int(os.environ.get("FASTCOMMON_STATE_MACHINE_EXAMPLES", "20"))


def in_grpc():
    """What grpc has now under every name fastcommon may replace (a class's own entry, for a method)."""
    return {name: helpers.current(name) for name in NAMES}


def wrapping(there):
    """What another library puts in place of ``there`` (a function, or a class's classmethod or staticmethod)."""
    if isinstance(there, (classmethod, staticmethod)):
        inner = there.__func__
        return type(there)(lambda *args, **kwargs: inner(*args, **kwargs))
    return lambda *args, **kwargs: there(*args, **kwargs)


def ours(name):
    """What fastcommon put into grpc under ``name``; None if it put nothing there."""
    return helpers.replacement(name) if fastcommon.is_patched(name) else None


def of_fastcommon(thing):
    """Whether ``thing`` is one of fastcommon's objects: a function of either implementation, a constructor, or a
    Metadata method (it carries grpc's names: its code is in fastcommon's .pyx)."""
    thing = getattr(thing, "__func__", thing)
    filename = getattr(getattr(thing, "__code__", None), "co_filename", "")
    modules = (str(getattr(x, "__module__", None)) for x in (thing, type(thing)))
    return filename.startswith(f"fastcommon{os.sep}") or any(module.startswith("fastcommon.") for module in modules)


class Serving:
    """A sync and an asyncio echo server with a client each; the asyncio ones on an event loop in a thread."""

    def __init__(self, stubs):
        self.pb2, self.pb2_grpc = stubs
        self.exits = contextlib.ExitStack()
        address = self.exits.enter_context(echo_server(self.pb2, self.pb2_grpc))
        self.channel = self.exits.enter_context(grpc.insecure_channel(address))
        self.stub = self.pb2_grpc.EchoServiceStub(self.channel)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.aio_server = aio_echo_server(self.pb2, self.pb2_grpc)
        self.aio_channel = self.on_loop(self.open_aio())
        self.aio_stub = self.pb2_grpc.EchoServiceStub(self.aio_channel)

    def on_loop(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    async def open_aio(self):
        return grpc.aio.insecure_channel(await self.aio_server.__aenter__())

    async def close_aio(self):
        await self.aio_channel.close()
        await self.aio_server.__aexit__(None, None, None)

    def close(self):
        self.on_loop(self.close_aio())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=60)
        self.loop.close()
        self.exits.close()

    def sync_answer(self):
        reply, call = self.stub.Unary.with_call(self.pb2.Echo(text="metadata"), metadata=HEADERS, timeout=30)
        received = [(type(entry) is GRPC_METADATUM, tuple(entry)) for entry in call.trailing_metadata()]
        return reply.text, received

    async def aio_call(self):
        call = self.aio_stub.Unary(self.pb2.Echo(text="metadata"), metadata=HEADERS, timeout=30)
        reply = await call
        trailing = await call.trailing_metadata()
        return reply.text, type(trailing) is grpc.aio.Metadata, tuple(trailing)

    def aio_answer(self):
        return self.on_loop(self.aio_call())

    def answers(self):
        return self.sync_answer(), self.aio_answer()


def check_answer():
    return helpers.check()


class Fastcommon(RuleBasedStateMachine):
    serving: Serving  # set by the test, with the answers of stock grpc
    stock: tuple
    stock_check: tuple

    def __init__(self):
        super().__init__()
        self.blocks = []  # open patched() blocks
        self.wrappers = []  # another library's: (name, what was there, its wrapper)
        self.checked = {}  # check's answer, by whose own grpc's objects are (grpc's, or another library's)

    # ---------------------------------------------------------------- fastcommon's API

    @rule()
    def patch(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastcommon.FastcommonWarning)  # a wrapped grpc is refused, warned
            replaced = fastcommon.patch()
        assert set(replaced) <= set(NAMES)

    @rule()
    def unpatch(self):
        restored = fastcommon.unpatch()
        for name in NAMES:  # what stays patched is what another library has wrapped since: grpc's own is kept
            assert not fastcommon.is_patched(name) or (name not in restored and in_grpc()[name] is not ours(name))

    @precondition(lambda self: len(self.blocks) < 3)
    @rule()
    def enter_patched(self):
        block = fastcommon.patched()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastcommon.FastcommonWarning)
            block.__enter__()
        self.blocks.append(block)

    @precondition(lambda self: self.blocks)
    @rule()
    def exit_patched(self):
        self.blocks.pop().__exit__(None, None, None)

    @rule(name=st.sampled_from((None, *NAMES)))
    def is_patched(self, name):
        assert fastcommon.is_patched(name) in (True, False)

    # ---------------------------------------------------------------- judging reads, and answers alike

    @rule()
    def status(self):
        before = in_grpc()
        helpers.status()
        assert in_grpc() == before

    @rule()
    def check(self):
        before = in_grpc()
        answer = check_answer()
        assert in_grpc() == before
        owners = tuple(helpers.original(name) is GRPCS_OWN[name] for name in NAMES)
        assert self.checked.setdefault(owners, answer) == answer  # whatever fastcommon has done since
        if all(owners):
            assert answer == self.stock_check

    @rule()
    def assess(self):
        before = in_grpc()
        verdicts = helpers.verdicts()
        assert in_grpc() == before and set(verdicts) == set(helpers.NAMES)

    # ---------------------------------------------------------------- the compiled module, given anything

    @precondition(lambda self: fast_common is not None)
    @rule(
        name=st.sampled_from(
            ["encode", "decode", "serialize", "deserialize", "counted encode", "counted decode",
             "counted serialize", "counted deserialize", "Counted", "calls", "MetadatumConstructor", "a constructor",
             "grpc's _Metadatum now"]
        ),
        args=st.lists(ODD, max_size=3),
        counted=st.booleans(),
    )  # fmt: skip
    def call_compiled(self, name, args, counted):
        if name == "a constructor" and MetadatumConstructor is not None:
            function = MetadatumConstructor(GRPC_METADATUM, counter=4 if counted else -1)
        elif name == "grpc's _Metadatum now":
            function = helpers.current("_Metadatum")
        elif name.startswith("counted "):
            function = getattr(fast_common.Counted(4), name.split()[1])
        else:
            function = MetadatumConstructor if name == "MetadatumConstructor" else getattr(fast_common, name, None)
        if function is None:
            return
        kwargs = {"counter": 4 if counted else -1} if name == "MetadatumConstructor" else {}
        quiet = logging.Filter("nothing")  # the records of a failing (de)serializer, out of the log
        logging.getLogger("grpc._common").addFilter(quiet)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                function(*args, **kwargs)
        except Exception:  # an exception is an answer; only a crash is not
            pass
        finally:
            logging.getLogger("grpc._common").removeFilter(quiet)

    # ---------------------------------------------------------------- another library, before and after

    @rule(name=st.sampled_from(NAMES))
    def another_library_wraps(self, name):
        there = helpers.current(name)
        wrapper = wrapping(there)
        setattr(*helpers.owner(name), wrapper)
        self.wrappers.append((name, there, wrapper))

    @precondition(lambda self: self.wrappers)
    @rule()
    def another_library_unwraps(self):
        name, there, wrapper = self.wrappers.pop()
        if helpers.current(name) is wrapper:  # as fastcommon does: never undo someone else's later patch
            setattr(*helpers.owner(name), there)

    # ---------------------------------------------------------------- threads and fork

    @rule()
    def patch_from_a_thread_while_rpcs_run(self):
        wrong, go = [], threading.Barrier(3)

        def rpcs():
            go.wait(timeout=60)
            for _ in range(10):
                answer = self.serving.sync_answer()
                if answer != self.stock[0]:
                    wrong.append(answer)

        def toggle():
            go.wait(timeout=60)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fastcommon.FastcommonWarning)
                for _ in range(10):
                    fastcommon.patch()
                    fastcommon.unpatch()

        threads = [threading.Thread(target=target) for target in (rpcs, rpcs, toggle)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads) and wrong == []

    @precondition(lambda self: hasattr(os, "fork"))
    @rule()
    def fork(self):
        expected = (fastcommon.is_patched(), in_grpc())
        reader, writer = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: the child touches no grpc core
            pid = os.fork()  # type: ignore[attr-defined, unused-ignore]  # POSIX only, as its test
        if pid == 0:  # the child: what it inherited answers as in the parent; then out, past everything
            status = 1
            try:
                verdicts = helpers.verdicts()
                same = (fastcommon.is_patched(), in_grpc()) == expected and set(verdicts) == set(helpers.NAMES)
                status = 0 if same and fastcommon.encode("\xe9") == b"\xc3\xa9" else 1
            finally:
                os.write(writer, bytes([status]))
                os._exit(status)
        os.close(writer)
        try:
            ready, _, _ = select.select([reader], [], [], 60)
            assert ready, "the fork child did not answer within 60 s"
            assert os.read(reader, 1) == b"\x00"
        finally:
            os.close(reader)
            os.waitpid(pid, 0)

    # ---------------------------------------------------------------- after every step

    @invariant()
    def nothing_of_fastcommons_is_in_grpc_unrecorded(self):
        for name, there in in_grpc().items():
            assert fastcommon.is_patched(name) or not of_fastcommon(there), (name, there)

    @invariant()
    def rpcs_answer_as_stock_grpc(self):
        assert self.serving.answers() == self.stock

    def teardown(self):
        while self.blocks:
            self.blocks.pop().__exit__(None, None, None)
        while self.wrappers:
            self.another_library_unwraps()
        fastcommon.unpatch()
        left = in_grpc(), fastcommon.is_patched()
        if left != (GRPCS_OWN, False):  # the next example starts on stock grpc whatever happened; this one fails
            for name, own in GRPCS_OWN.items():
                setattr(*helpers.owner(name), own)
            helpers.forget_patch()
        assert left == (GRPCS_OWN, False)


def test_every_entry_point_in_any_order_leaves_rpcs_answering_as_stock(stubs):
    serving = Serving(stubs)
    try:
        Fastcommon.serving = serving
        Fastcommon.stock = serving.answers()
        Fastcommon.stock_check = check_answer()
        assert Fastcommon.stock[0][0] == "x-blob-bin=b'\\x00\\xff'\nx-state='again'\nx-state='machine'"
        run_state_machine_as_test(
            Fastcommon, settings=settings(max_examples=EXAMPLES, stateful_step_count=25, deadline=None)
        )
    finally:
        serving.close()
