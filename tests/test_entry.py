"""grpc's metadata entry class (cygrpc._Metadatum) and fastcommon's constructor of its entries: the objects stock grpc
builds, or grpc's own, and a constructor that reads as grpc's namedtuple class."""

import asyncio
import copy
import gc
import pickle
import sys
import weakref

import pytest
from conftest import NEEDS_GRPCIO, expected_patch

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers
from conftest import GRPC_METADATUM
from grpc._cython import cygrpc
from hypothesis import given, settings
from hypothesis import strategies as st

import fastcommon
from grpc_echo import aio_echo_server, echo_server

OFFERED = "_Metadatum" in expected_patch()
compiled_constructor = pytest.mark.skipif(
    not OFFERED,
    reason="fastcommon builds no metadata entries here: pure Python"
    if fastcommon.IMPLEMENTATION == "python"
    else "the Limited API (abi3) build leaves them to grpc",
)


@pytest.fixture(scope="module")
def constructor():
    return fastcommon.fast_entry.MetadatumConstructor(GRPC_METADATUM)


def observed(build, *args, **kwargs):
    """Everything a user can see of one construction: the object and its behaviour, or the exception."""
    try:
        entry = build(*args, **kwargs)
    except Exception as exc:
        return ("raised", type(exc), str(exc))
    given_ = (*args, *kwargs.values())
    try:
        pickled = pickle.loads(pickle.dumps(entry))
    except Exception as exc:  # grpc's class is not importable by its name, pickled or not
        pickled = (type(exc), str(exc))
    return (
        type(entry),
        tuple(entry),
        [item is argument for item, argument in zip(entry, given_, strict=False)],
        (entry.key, entry.value),
        repr(entry),
        str(entry),
        hash(entry),
        entry == tuple(given_),
        entry._asdict(),
        entry._replace(value="other"),
        copy.copy(entry),
        copy.deepcopy(entry),
        pickled,
        gc.is_tracked(entry),
        sys.getsizeof(entry),
        hasattr(entry, "__dict__"),
    )


METADATA_KEY = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,20}", fullmatch=True)
METADATA_VALUE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@compiled_constructor
@given(key=st.one_of(METADATA_KEY, st.text()), value=st.one_of(st.text(), st.binary(), st.none(), st.integers()))
def test_entries_are_the_objects_grpc_builds(constructor, key, value):
    assert observed(constructor, key, value) == observed(GRPC_METADATUM, key, value)


@compiled_constructor
@pytest.mark.parametrize(
    "args, kwargs",
    [((), {}), (("k",), {}), (("k", "v", "x"), {}), ((), {"key": "k", "value": "v"}), (("k",), {"value": "v"}),
     (("k", "v"), {"key": "k"}), (("k", "v"), {"extra": 1})],
)  # fmt: skip
def test_any_other_call_is_grpcs_own_class_answering(constructor, args, kwargs):
    assert observed(constructor, *args, **kwargs) == observed(GRPC_METADATUM, *args, **kwargs)


@compiled_constructor
def test_a_constructor_holds_its_one_class_and_answers_as_that_class(constructor):
    assert type(constructor) is fastcommon.fast_entry.MetadatumConstructor  # what grpc calls: the object itself
    assert type(constructor("k", "v")) is GRPC_METADATUM
    before = sys.getrefcount(GRPC_METADATUM)
    made = [fastcommon.fast_entry.MetadatumConstructor(GRPC_METADATUM, counter=4) for _ in range(100)]
    assert sys.getrefcount(GRPC_METADATUM) == before + 100
    del made
    assert sys.getrefcount(GRPC_METADATUM) == before
    # Its names, repr, isinstance and the rest: test_the_entry_class_reads_as_grpcs_namedtuple, below.
    assert constructor._make == GRPC_METADATUM._make and issubclass(GRPC_METADATUM, constructor)

    class Sub(constructor):  # a class statement subclasses the class
        pass

    assert Sub.__mro__[1] is GRPC_METADATUM and isinstance(Sub("k", "v"), constructor)
    del Sub
    gc.collect()  # a class is in a cycle with itself: it holds grpc's class until a collection
    with pytest.raises(TypeError):
        type("Sub", (type(constructor),), {})  # nothing can subclass the constructor's own type
    with pytest.raises(ValueError):
        fastcommon.fast_entry.MetadatumConstructor(GRPC_METADATUM, counter=10**6)


class WithADict(tuple):
    pass


REFUSED_CLASSES = {
    "not a class": len,
    "tuple itself": tuple,
    "not a tuple": list,
    "a C subclass of tuple (a structseq)": type(sys.version_info),
    "a subclass with a __dict__": WithADict,
}


@compiled_constructor
@pytest.mark.parametrize("refused", sorted(REFUSED_CLASSES))
def test_the_constructor_refuses_a_class_whose_instances_it_cannot_write_in_place(refused):
    with pytest.raises(TypeError, match="MetadatumConstructor\\(\\) needs a tuple subclass with a tuple's layout"):
        fastcommon.fast_entry.MetadatumConstructor(REFUSED_CLASSES[refused])


@compiled_constructor
def test_building_entries_leaves_refcounts_flat(constructor):
    key, value = "x-leak-check", b"\x00value"
    before = sys.getrefcount(key), sys.getrefcount(value), sys.getrefcount(GRPC_METADATUM)
    entries = [constructor(key, value) for _ in range(10_000)]
    assert sys.getrefcount(key) == before[0] + 10_000
    del entries
    assert (sys.getrefcount(key), sys.getrefcount(value), sys.getrefcount(GRPC_METADATUM)) == before


# ------------------------------------------------------------------ the entry class, patched, as stock grpc's


def test_entries_are_instances_of_the_entry_class():
    """isinstance/issubclass/type checks against cygrpc._Metadatum answer as with grpc's namedtuple class."""

    def scenario():
        entry = cygrpc._Metadatum("k", "v")
        return [
            helpers.outcome(lambda: isinstance(entry, cygrpc._Metadatum)),
            helpers.outcome(lambda: issubclass(cygrpc._Metadatum, tuple)),
            helpers.outcome(lambda: isinstance(("k", "v"), cygrpc._Metadatum)),
        ]  # type(entry) is cygrpc._Metadatum cannot hold: what grpc calls is not the class (docs/safety.md)

    helpers.assert_like_stock(scenario, "_Metadatum")


ENTRY_CLASS_READS = {
    "_fields": lambda cls: cls._fields,
    "_make": lambda cls: repr(cls._make(("k", "v"))),
    "__name__": lambda cls: cls.__name__,
    "__qualname__": lambda cls: cls.__qualname__,
    "__module__": lambda cls: cls.__module__,
    "_field_defaults": lambda cls: cls._field_defaults,
    "__doc__": lambda cls: cls.__doc__,
    "repr": repr,
    "a subclass": lambda cls: repr(_subclass(cls)("k", "v")),
    "cls[str]": lambda cls: repr(cls[str]),
    "cls == type(entry)": lambda cls: [cls == type(cls("k", "v")), cls != type(cls("k", "v")), cls == tuple],  # noqa: E721
    "a dict keyed by the class": lambda cls: [{type(cls("k", "v")): 1}.get(cls), {cls: 1}.get(type(cls("k", "v")))],
    "cls | None": lambda cls: [repr(cls | None), repr(None | cls), repr(cls | int)],
    "a weak reference": lambda cls: weakref.ref(cls)() is cls,
    "issubclass(cls, cls)": lambda cls: issubclass(cls, cls),
    "== an object that declines": lambda cls: _declining(cls),
}


def _declining(cls):
    """cls == an object whose __eq__ returns NotImplemented: how often it is asked, and the answer."""
    asked = []

    class Declines:
        def __eq__(self, other):
            asked.append(other is cls)
            return NotImplemented

    return Declines() == cls, cls == Declines(), asked


def _subclass(cls):
    class Entry(cls):  # a class statement; type("Entry", (cls,), {}) takes classes alone (docs/safety.md)
        pass

    return Entry


@pytest.mark.parametrize("read", sorted(ENTRY_CLASS_READS))
def test_the_entry_class_reads_as_grpcs_namedtuple(read):
    """What cygrpc._Metadatum gives for one attribute read (or use) is what grpc's namedtuple class gives."""
    helpers.assert_like_stock(lambda: ENTRY_CLASS_READS[read](cygrpc._Metadatum), "_Metadatum")


# ------------------------------------------------------------------ real servers and clients

INITIAL = (("x-initial", "first"), ("x-initial-bin", b"\x00\x01"))
TRAILING = (("x-trailing", "last"), ("x-trailing-bin", b"\xff"))


def capturing_servicer(pb2, pb2_grpc, seen, asynchronous):
    """An EchoService whose Unary keeps the invocation metadata it received and sends metadata back."""

    class Sync(pb2_grpc.EchoServiceServicer):
        def Unary(self, request, context):
            seen.append(context.invocation_metadata())
            context.send_initial_metadata(INITIAL)
            context.set_trailing_metadata(TRAILING)
            return pb2.Echo(text=request.text)

    class Async(pb2_grpc.EchoServiceServicer):
        async def Unary(self, request, context):
            seen.append(context.invocation_metadata())
            await context.send_initial_metadata(INITIAL)
            context.set_trailing_metadata(TRAILING)
            return pb2.Echo(text=request.text)

    return Async() if asynchronous else Sync()


def shape(metadata):
    """The entries as a user receives them, with the type of each."""
    return [(type(entry), tuple(entry)) for entry in metadata]


def sync_round_trip(stubs, headers):
    pb2, pb2_grpc = stubs
    seen = []
    servicer = capturing_servicer(pb2, pb2_grpc, seen, asynchronous=False)
    with echo_server(pb2, pb2_grpc, servicer=servicer) as address, grpc.insecure_channel(address) as channel:
        _, call = pb2_grpc.EchoServiceStub(channel).Unary.with_call(pb2.Echo(text="m"), metadata=headers, timeout=30)
        return shape(seen[0]), shape(call.initial_metadata()), shape(call.trailing_metadata())


def aio_round_trip(stubs, headers):
    pb2, pb2_grpc = stubs

    async def round_trip():
        seen = []
        servicer = capturing_servicer(pb2, pb2_grpc, seen, asynchronous=True)
        async with (
            aio_echo_server(pb2, pb2_grpc, servicer=servicer) as address,
            grpc.aio.insecure_channel(address) as channel,
        ):
            call = pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="m"), metadata=headers, timeout=30)
            await call
            initial, trailing = await call.initial_metadata(), await call.trailing_metadata()
        return shape(seen[0]), shape(initial), shape(trailing)

    return asyncio.run(round_trip())


HEADERS = (*((f"x-header-{i}", f"value {i}") for i in range(10)), ("x-binary-bin", b"\x00\xfe\xff"))


@pytest.mark.parametrize("round_trip", [sync_round_trip, aio_round_trip], ids=["sync", "aio"])
def test_every_entry_a_server_and_client_receive_is_grpcs_and_equal_to_stocks(stubs, round_trip):
    stock = round_trip(stubs, HEADERS)
    with fastcommon.patched():
        patched = round_trip(stubs, HEADERS)
    assert patched == stock
    received, initial, trailing = stock
    assert ("x-binary-bin", b"\x00\xfe\xff") in [entry for _, entry in received]
    assert [entry for _, entry in initial] == list(INITIAL) and [entry for _, entry in trailing] == list(TRAILING)
    for kind, _ in [*received, *(initial + trailing if round_trip is sync_round_trip else [])]:
        assert kind is GRPC_METADATUM  # the aio client hands its user grpc.aio.Metadata, built from them


@pytest.mark.parametrize("round_trip", [sync_round_trip, aio_round_trip], ids=["sync", "aio"])
@settings(max_examples=25, deadline=None)
@given(
    headers=st.lists(
        st.one_of(
            st.tuples(METADATA_KEY.filter(lambda key: not key.startswith("grpc-")), METADATA_VALUE.map(str.strip)),
            st.tuples(METADATA_KEY.map(lambda key: key + "-bin"), st.binary(max_size=40)),
        ),
        max_size=6,
    )
)
def test_any_metadata_reaches_the_server_as_stock_grpc_delivers_it(stubs, round_trip, headers):
    headers = [(key, value) for key, value in headers if not key.endswith("-bin") or isinstance(value, bytes)]
    stock = round_trip(stubs, headers)
    with fastcommon.patched():
        assert round_trip(stubs, headers) == stock


@compiled_constructor
def test_the_metadata_entries_grpc_builds_come_from_fastcommon_when_patched(stubs):
    counter = helpers.counter("_Metadatum")
    before = fastcommon.fast_entry.calls()[counter]
    with fastcommon.patched():
        constructor = cygrpc._Metadatum
        assert type(constructor) is fastcommon.fast_entry.MetadatumConstructor
        # As `run --report` installs it: a counted constructor of grpc's class, so that each entry is counted.
        cygrpc._Metadatum = fastcommon.fast_entry.MetadatumConstructor(GRPC_METADATUM, counter=counter)
        try:
            sync_round_trip(stubs, HEADERS)
        finally:
            cygrpc._Metadatum = constructor
    assert fastcommon.fast_entry.calls()[counter] - before >= len(HEADERS)
