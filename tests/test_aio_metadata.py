"""grpc.aio's Metadata with fastcommon's methods: what users, interceptors and grpc see is stock grpc's."""

import asyncio
import inspect
import pickle
import sys
import warnings

import pytest
from conftest import GRPC_METADATA_ORIGINALS, NEEDS_GRPCIO, expected_patch

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import copy

import helpers
import hostile
from changed_metadata import MADE_UP_CHANGES
from grpc.aio import _channel
from grpc.aio import _metadata as grpc_metadata
from helpers import probes
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import fastcommon
from grpc_echo import aio_echo_server

Metadata = grpc_metadata.Metadata
OFFERED = tuple(name for name in expected_patch() if name in GRPC_METADATA_ORIGINALS)
compiled_methods = pytest.mark.skipif(not OFFERED, reason="fastcommon builds no Metadata methods here: pure Python")
HAS_CREATE = "Metadata._create" in GRPC_METADATA_ORIGINALS  # grpcio 1.80 and later


def grpc_metadata_owns():
    """grpc's own methods of its Metadata class that fastcommon offers here, by the names fastcommon gives them."""
    return {
        name: own for name, own in GRPC_METADATA_ORIGINALS.items() if name.startswith("Metadata.") and name in OFFERED
    }


def stock_class():
    """A class that behaves as stock grpc's Metadata whatever is patched: grpc's own methods, its name."""
    return metadata_class_with()


def stock_and_patched(scenario):
    """The outcome of ``scenario(cls)`` on stock grpc's Metadata, and on grpc's own class patched by fastcommon."""
    stock = probes.outcome(scenario, stock_class())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastcommon.patched():
            patched = probes.outcome(scenario, Metadata)
    return stock, patched


@compiled_methods
def test_patch_puts_fastcommons_methods_on_grpcs_own_class_and_unpatch_takes_them_off():
    with fastcommon.patched() as replaced:
        assert set(OFFERED) <= set(replaced)
        assert grpc.aio.Metadata is Metadata and type(Metadata) is type(stock_class())
        for name in OFFERED:
            assert helpers.current(name) is not GRPC_METADATA_ORIGINALS[name] and fastcommon.is_patched(name)
            own, ours, wrapping = GRPC_METADATA_ORIGINALS[name], helpers.current(name), (classmethod, staticmethod)
            assert type(ours) is type(own) if isinstance(own, wrapping) else not isinstance(ours, wrapping)
            own, ours = (getattr(method, "__func__", method) for method in (own, ours))
            assert (inspect.signature(ours), ours.__doc__) == (inspect.signature(own), own.__doc__)
        metadata = Metadata(("k", "v"))
        assert isinstance(metadata, Metadata) and isinstance(metadata, grpc.aio.Metadata)
        assert type(iter(metadata)).__name__ == "MetadataIterator"  # what a user can see: it is not a generator
    for name, own in GRPC_METADATA_ORIGINALS.items():
        assert helpers.current(name) is own


KEY = st.one_of(st.text(max_size=12), st.sampled_from(["a", "b", "user-agent", "x-bin"]), st.integers(0, 3))
VALUE = st.one_of(st.text(max_size=12), st.binary(max_size=8), st.none(), st.integers())
PAIR = st.tuples(KEY, VALUE)


@compiled_methods
@settings(max_examples=150, deadline=None)
@given(pairs=st.lists(PAIR, max_size=8), shape=st.sampled_from(["tuple", "list", "entries"]))
def test_any_metadata_is_made_and_read_as_stock_grpc_makes_and_reads_it(pairs, shape):
    given_pairs = {"tuple": tuple, "list": lambda ps: [list(p) for p in ps], "entries": lambda ps: tuple(
        probes.Entry(*p) for p in ps)}[shape](pairs)  # fmt: skip

    def scenario(cls):
        made = [cls(*given_pairs), cls.from_tuple(tuple(given_pairs)), _channel._BaseMultiCallable._init_metadata(
            given_pairs)]  # fmt: skip
        return [(metadata, tuple(metadata), len(metadata), repr(metadata), metadata == tuple(pairs))
                for metadata in made]  # fmt: skip

    stock, patched = stock_and_patched(scenario)
    assert patched == stock


@compiled_methods
@settings(max_examples=300, deadline=None)
@given(scenario=hostile.SCENARIO)
def test_keys_and_pairs_that_run_code_midway_end_as_with_stock_grpc(scenario):
    # A key whose hash empties, shortens or lengthens a later list pair, replaces or deletes _metadata, rebinds the
    # class's add or gives the instance one; pairs of every container, the wrong length late; every way to make one.
    def making(init_metadata):
        return lambda cls: hostile.run(scenario, cls, init_metadata, Metadata)

    stock = probes.outcome(making(GRPC_METADATA_ORIGINALS["_BaseMultiCallable._init_metadata"].__func__), stock_class())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastcommon.patched():
            patched = probes.outcome(making(_channel._BaseMultiCallable._init_metadata), Metadata)
    assert patched == stock


def _fastcommons_class(namespace, metaclass=type):
    """A subclass of grpc's Metadata made with ``namespace`` first, then fastcommon's methods made for it."""
    owns = grpc_metadata_owns()
    cls = metaclass("Metadata", (Metadata,), {**namespace, **{name.split(".")[1]: f for name, f in owns.items()}})
    for name, made in fastcommon.fast_metadata.metadata_methods(owns, cls).items():
        setattr(cls, name.split(".")[1], made)
    return cls


@compiled_methods
def test_methods_are_made_only_for_a_class_whose_instances_object_makes():
    owns = grpc_metadata_owns()
    unsafe = type("Unsafe", (Metadata, dict), {"__new__": object.__new__})  # object.__new__ does not fit dict
    for cls in (
        type("Sub", (Metadata, dict), {}),
        type("Own", (Metadata,), {"__new__": lambda cls: None}),
        unsafe,
        len,
    ):
        with pytest.raises(TypeError, match="metadata_methods"):
            fastcommon.fast_metadata.metadata_methods(owns, cls)


@compiled_methods
def test_methods_read_their_class_own_dict_past_a_metaclass_that_gives_another():
    looked_up = []

    class Shown(dict):
        def __getitem__(self, name):
            looked_up.append(name)
            raise KeyError(name)

    class Misleading(type(Metadata)):
        @property
        def __dict__(cls):
            return Shown(type.__dict__["__dict__"].__get__(cls))

    cls = _fastcommons_class({}, Misleading)
    made = cls(("a", "1"), ("b", "2"), ("a", "3"))
    assert (dict(made._metadata), list(made), looked_up) == (
        {"a": ["1", "3"], "b": ["2"]},
        [("a", "1"), ("a", "3"), ("b", "2")],
        [],
    )


@compiled_methods
def test_the_iterator_refuses_to_be_copied_or_pickled_as_the_generator_does():
    refused = []
    for metadata in (stock_class()(*probes.PAIRS), None):
        if metadata is None:
            with fastcommon.patched():
                metadata = Metadata(*probes.PAIRS)
                iterator = iter(metadata)
        else:
            iterator = iter(metadata)
        next(iterator)
        answers = []
        for attempt in (copy.copy, copy.deepcopy, pickle.dumps, lambda it: it.__reduce_ex__(2)):
            with pytest.raises(TypeError) as raised:
                attempt(iterator)
            answers.append(type(raised.value))
        answers.append([name for name in ("__setstate__", "__reduce__") if name in type(iterator).__dict__])
        answers.append(list(iterator))  # what it had left, untouched by the attempts
        refused.append(answers)
    assert refused[1] == refused[0]
    with pytest.raises(TypeError):
        type(iter(Metadata()))()  # and nothing outside can make one


@compiled_methods
def test_pickles_of_grpcs_own_class_are_the_same_bytes():
    pairs = (("a", "1"), ("b", b"\x00"), ("a", "3"))
    stock = pickle.dumps(Metadata(*pairs))
    with fastcommon.patched():
        patched = Metadata(*pairs)
        assert pickle.dumps(patched) == stock
    assert tuple(pickle.loads(stock)) == tuple(patched)


class Operations(RuleBasedStateMachine):
    """The same operations on stock grpc's Metadata and on grpc's own patched: the same answers and state."""

    def __init__(self):
        super().__init__()
        self.stock, self.patched = stock_class()(), Metadata()
        self.iterators = None  # (stock's, patched's), while one is open

    def both(self, operation):
        answers = [probes.outcome(operation, metadata) for metadata in (self.stock, self.patched)]
        assert answers[1] == answers[0]

    @rule(key=KEY, value=VALUE)
    def add(self, key, value):
        self.both(lambda m: m.add(key, value))

    @rule(key=KEY, value=VALUE)
    def set(self, key, value):
        self.both(lambda m: m.__setitem__(key, value))

    @rule(key=KEY)
    def read(self, key):
        self.both(lambda m: [m.get(key), m.get(key, "d"), m.get_all(key), key in m])
        self.both(lambda m: m[key])

    @rule(key=KEY)
    def delete(self, key):
        self.both(lambda m: m.__delitem__(key))

    @rule(key=KEY, values=st.lists(VALUE, max_size=3) | st.tuples(VALUE))
    def set_all(self, key, values):
        self.both(lambda m: m.set_all(key, list(values) if isinstance(values, list) else values))

    @rule()
    def whole(self):
        self.both(lambda m: [tuple(m), len(m), repr(m), bool(m)])

    @rule(scenario=hostile.SCENARIO.filter(lambda scenario: scenario.maker.startswith("__init__")))
    def init_again(self, scenario):
        # __init__ again, with keys and pairs that run code midway: its instance is the one the machine holds.
        def again(metadata):
            cls = type(metadata)
            fresh = hostile.run(scenario, cls, None, None)
            vars(metadata).clear()
            vars(metadata).update(vars(fresh))

        self.both(again)

    @rule(key=st.sampled_from(["a", "b"]), action=st.sampled_from(hostile.ACTIONS))
    def add_hostile_key(self, key, action):
        def adding(metadata):
            objects = hostile._Objects(type(metadata))
            objects.instance = metadata
            try:
                return metadata.add(probes.Hashing(key, lambda: hostile._act(action, objects)), "v")
            finally:
                objects.running = False
                type(metadata).add = objects.own_add
                vars(metadata).pop("add", None)

        self.both(adding)

    @rule()
    def start_iterating(self):
        self.iterators = iter(self.stock), iter(self.patched)

    @precondition(lambda self: self.iterators is not None)
    @rule()
    def step(self):
        stock, patched = (probes.outcome(lambda it: next(it), iterator) for iterator in self.iterators)
        assert patched == stock

    @invariant()
    def same_state(self):
        assert probes.state(self.patched) == probes.state(self.stock)


@compiled_methods
def test_any_sequence_of_operations_answers_as_stock_grpc():
    with fastcommon.patched():
        run_state_machine_as_test(Operations, settings=settings(max_examples=60, stateful_step_count=30, deadline=None))


# ------------------------------------------------------------------ real asyncio servers and clients

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class InjectingAndReading(grpc.aio.UnaryUnaryClientInterceptor):
    """What opentelemetry's aio client interceptor does (a Metadata made again, a header set), and reads."""

    def __init__(self):
        self.seen = []

    async def intercept_unary_unary(self, continuation, details, request):
        metadata = details.metadata
        mutable = grpc.aio.Metadata() if not metadata else grpc.aio.Metadata(*tuple(metadata))
        mutable["traceparent"] = TRACEPARENT
        self.seen.append((type(metadata), tuple(metadata or ()), mutable.get("x-one"), "x-two" in mutable,
                          mutable.get_all("x-one"), len(mutable)))  # fmt: skip
        details = grpc.aio.ClientCallDetails(
            details.method, details.timeout, mutable, details.credentials, details.wait_for_ready
        )
        return await continuation(details, request)


def metadata_servicer(pb2, pb2_grpc):
    class Servicer(pb2_grpc.EchoServiceServicer):
        async def Unary(self, request, context):
            received = tuple((key, value) for key, value in context.invocation_metadata() if key != "user-agent")
            await context.send_initial_metadata((("x-initial", "first"), ("x-initial-bin", b"\x01")))
            context.set_trailing_metadata((("x-trailing", "last"),))
            if request.text == "abort":
                await context.abort(grpc.StatusCode.NOT_FOUND, "nothing")
            return pb2.Echo(text=repr(received))

    return Servicer()


def aio_round_trip(stubs, metadata):
    pb2, pb2_grpc = stubs

    def seen_metadata(metadata):
        return type(metadata), tuple(metadata), metadata.get("x-initial")

    async def round_trip():
        interceptor = InjectingAndReading()
        async with (
            aio_echo_server(pb2, pb2_grpc, servicer=metadata_servicer(pb2, pb2_grpc)) as address,
            grpc.aio.insecure_channel(address, interceptors=[interceptor]) as channel,
            grpc.aio.insecure_channel(address) as plain,
        ):
            answers = []
            for chosen in (channel, plain):
                call = pb2_grpc.EchoServiceStub(chosen).Unary(pb2.Echo(text="m"), metadata=metadata, timeout=30)
                reply = await call
                answers += [reply.text, seen_metadata(await call.initial_metadata()),
                            seen_metadata(await call.trailing_metadata())]  # fmt: skip
                try:
                    await pb2_grpc.EchoServiceStub(chosen).Unary(pb2.Echo(text="abort"), metadata=metadata, timeout=30)
                except grpc.aio.AioRpcError as error:
                    answers += [error.code(), seen_metadata(error.initial_metadata()),
                                seen_metadata(error.trailing_metadata())]  # fmt: skip
        return answers, interceptor.seen

    return asyncio.run(round_trip())


METADATA_SHAPES = {
    "none": None,
    "a tuple": (("x-one", "1"), ("x-two", "2"), ("x-one", "again"), ("x-bin", b"\x00\xff")),
    "a list": [("x-one", "1")],
    "a Metadata": "a Metadata",
    "empty": (),
}


@compiled_methods
@pytest.mark.parametrize("shape", sorted(METADATA_SHAPES))
def test_an_aio_client_with_interceptors_sends_and_receives_what_stock_grpc_does(stubs, shape):
    def metadata():
        given_metadata = METADATA_SHAPES[shape]
        return grpc.aio.Metadata(("x-one", "m"), ("x-two", "n")) if given_metadata == "a Metadata" else given_metadata

    stock = aio_round_trip(stubs, metadata())
    with fastcommon.patched() as replaced:
        assert "Metadata.__init__" in replaced
        patched = aio_round_trip(stubs, metadata())
    assert patched == stock
    answers, seen = stock
    assert "traceparent" in answers[0] and grpc.StatusCode.NOT_FOUND in answers
    assert seen[0][-1] >= 1


@compiled_methods
def test_the_replaced_methods_leave_refcounts_flat():
    key, value = "x-refcount", b"\x00value"
    with fastcommon.patched():
        before = sys.getrefcount(key), sys.getrefcount(value)
        for _ in range(5_000):
            metadata = _channel._BaseMultiCallable._init_metadata(((key, value), ("b", "c")))
            metadata[key] = value
            metadata.add(key, value)
            tuple(metadata), len(metadata), metadata.get(key), metadata.get_all(key), key in metadata
            Metadata.from_tuple(((key, value),)), Metadata._create(((key, value),)) if HAS_CREATE else None
            del metadata
        assert (sys.getrefcount(key), sys.getrefcount(value)) == before


# ------------------------------------------------------------------ the gate


def changed_in_grpc(monkeypatch, name, changed):
    monkeypatch.setattr(*helpers.owner(name), changed)


@compiled_methods
@pytest.mark.parametrize("gate", ["fingerprint", "probes"])
@pytest.mark.parametrize("name", sorted(MADE_UP_CHANGES))
def test_a_method_grpc_changed_stays_grpcs_with_one_warning_naming_it(monkeypatch, name, gate):
    if name not in OFFERED:
        pytest.skip(f"grpcio {grpc.__version__} has no {name}, or this build does not offer it")
    changed = MADE_UP_CHANGES[name]
    changed_in_grpc(monkeypatch, name, changed)
    if gate == "probes":
        helpers.trust(monkeypatch, name, getattr(changed, "__func__", changed))
    with pytest.warns(fastcommon.FastcommonWarning) as warned:
        replaced = fastcommon.patch()
    try:
        assert len(warned) == 1 and name not in replaced and helpers.current(name) is changed
        reason = "its code is not one fastcommon's suite ran against" if gate == "fingerprint" else "it differs on"
        assert f"{name} in {helpers.home(name)} ({reason}" in str(warned[0].message)
        assert set(replaced) == set(expected_patch()) - {name}  # the others replaced
    finally:
        fastcommon.unpatch()


def metadata_class_with(**changes):
    """A stand-in for grpc's Metadata class: grpc's own methods, and ``changes``. grpc's own class is never
    changed: a __new__ set on a class and deleted again leaves the class broken for good (CPython keeps the slot)."""
    methods = {name.split(".")[1]: own for name, own in grpc_metadata_owns().items()}
    return type("Metadata", (Metadata,), {**methods, **changes})


CLASS_CHANGES = {  # (the module attributes changed, and what the gate's message then says the class lacks)
    "an OrderedDict of another kind": ({"OrderedDict": type("OrderedDict", (dict,), {})}, "an OrderedDict"),
    "attribute access of its own": ({"Metadata": metadata_class_with(__getattr__=lambda self, name: None)},
                                    "object's attribute access"),
    "a class attribute _metadata": ({"Metadata": metadata_class_with(_metadata=None)},
                                    "instances that hold their own _metadata"),
    "a __new__ of its own": ({"Metadata": metadata_class_with(__new__=lambda cls, *args: object.__new__(cls))},
                             "object's __new__"),
    "another Metadata in _channel": ({}, "grpc.aio._channel's Metadata"),
}  # fmt: skip


@compiled_methods
@pytest.mark.parametrize("change", sorted(CLASS_CHANGES))
def test_a_metadata_class_grpc_changed_leaves_all_its_methods_to_grpc(monkeypatch, change):
    changed, lacking = CLASS_CHANGES[change]
    for attribute, value in changed.items():
        monkeypatch.setattr(grpc_metadata, attribute, value)
    monkeypatch.setattr(_channel, "Metadata", changed.get("Metadata", metadata_class_with()))
    with pytest.warns(fastcommon.FastcommonWarning) as warned:
        replaced = fastcommon.patch()
    fastcommon.unpatch()
    assert len(warned) == 1 and not set(replaced) & set(GRPC_METADATA_ORIGINALS)
    message = str(warned[0].message)
    assert "Metadata class is not the one fastcommon's suite ran against (it lacks: " in message and lacking in message


@compiled_methods
def test_a_method_this_grpcio_lacks_stays_so_without_a_warning(monkeypatch):
    if HAS_CREATE:
        monkeypatch.delattr(Metadata, "_create")  # as in grpcio before 1.80
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replaced = fastcommon.patch()
    fastcommon.unpatch()
    assert "Metadata._create" not in replaced and "Metadata.__init__" in replaced
    assert helpers.unavailable("Metadata._create") == f"grpcio {grpc.__version__} has no Metadata._create of its own"


@compiled_methods
def test_the_probes_pass_grpcs_own_and_name_each_change_among_the_others():
    owns = {name: own for name, own in GRPC_METADATA_ORIGINALS.items() if name in OFFERED}
    assert helpers.metadata_differences(list(owns), owns) == dict.fromkeys(owns)
    for name, changed in MADE_UP_CHANGES.items():
        if name in owns:
            verdicts = helpers.metadata_differences(list(owns), {**owns, name: changed})
            assert verdicts[name] is not None and verdicts[name].startswith("it differs on a probe: "), name
            assert [other for other, why in verdicts.items() if why] == [name]
