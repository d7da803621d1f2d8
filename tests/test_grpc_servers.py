"""Real gRPC servers on 127.0.0.1, with grpc patched: every RPC kind works and goes through fastcommon."""

import asyncio
import logging
import threading

import pytest
from conftest import NEEDS_GRPCIO, expected_patch

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

from changed_grpc import MADE_UP_CHANGES, SLICE_SIZE, delivered_in_slices, zero_copy_deserialize
from grpc import _common as grpc_common
from helpers import captured_grpc_records

import fastcommon
from grpc_echo import ABORT_DETAILS, CONVERSIONS, GENERIC_METHOD, aio_echo_server, counting_calls, run_one_of_each

pytestmark = pytest.mark.usefixtures("patched_grpc")
PATCHED = expected_patch()
BEYOND_FUNCTIONS = PATCHED[len(CONVERSIONS) :]  # _Metadatum and the aio Metadata methods, where offered


@pytest.fixture
def patched_grpc(request):
    if request.node.get_closest_marker("stock"):
        yield
        return
    with fastcommon.patched() as replaced:
        assert replaced
        yield


def test_every_rpc_kind(stubs, channel):
    pb2, pb2_grpc = stubs
    replies = run_one_of_each(pb2, pb2_grpc, channel)
    assert (replies["unary"].text, replies["unary"].count) == ("hello", 2)
    assert [(r.text, r.count) for r in replies["server_stream"]] == [("s", 0), ("s", 1), ("s", 2)]
    assert (replies["client_stream"].text, replies["client_stream"].count) == ("m0m1m2", 3)
    assert [(r.text, r.count) for r in replies["bidi_stream"]] == [("M0", 0), ("M1", 1), ("M2", 2)]


def test_metadata_str_and_binary_values(stubs, channel):
    pb2, pb2_grpc = stubs
    stub = pb2_grpc.EchoServiceStub(channel)
    reply, call = stub.Unary.with_call(
        pb2.Echo(text="metadata"), metadata=(("greeting", "hello, world"), ("blob-bin", b"\x00\xfe\xff"))
    )
    assert "greeting='hello, world'" in reply.text.split("\n")
    assert "blob-bin=b'\\x00\\xfe\\xff'" in reply.text.split("\n")
    assert ("trailer", "sp at") in call.trailing_metadata()
    assert ("trailer-bin", b"\x00\xff") in call.trailing_metadata()


@pytest.mark.parametrize(
    "request_text, code",
    [
        ("abort", grpc.StatusCode.INVALID_ARGUMENT),
        ("set_details", grpc.StatusCode.FAILED_PRECONDITION),
    ],
)
def test_non_ascii_details_from_abort_and_set_details(stubs, channel, request_text, code):
    pb2, pb2_grpc = stubs
    with pytest.raises(grpc.RpcError) as error:
        pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text=request_text))
    assert error.value.code() == code
    assert error.value.details() == ABORT_DETAILS


def test_peer(stubs, channel):
    pb2, pb2_grpc = stubs
    reply = pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="peer"))
    assert isinstance(reply.text, str) and reply.text.startswith("ipv4:127.0.0.1:")


def test_generic_handler(stubs, channel):
    pb2, _ = stubs
    call = channel.unary_unary(
        GENERIC_METHOD, request_serializer=pb2.Echo.SerializeToString, response_deserializer=pb2.Echo.FromString
    )
    assert call(pb2.Echo(text="ok")).text == "generic:ok"


def test_aio_server_and_client(stubs):
    pb2, pb2_grpc = stubs

    async def main():
        async with aio_echo_server(pb2, pb2_grpc) as address, grpc.aio.insecure_channel(address) as channel:
            stub = pb2_grpc.EchoServiceStub(channel)
            with counting_calls() as counts:
                unary = await stub.Unary(pb2.Echo(text="aio", count=4))
                streamed = [r.count async for r in stub.ServerStream(pb2.Echo(text="s", count=3))]
            return unary, streamed, counts

    unary, streamed, counts = asyncio.run(main())
    assert (unary.text, unary.count, streamed) == ("aio", 5, [0, 1, 2])
    # The aio client converts messages in Python (grpc.aio._call); through fastcommon when patched.
    assert counts["client", "serialize"] == 2 and counts["client", "deserialize"] == 4


EXPECTED_MESSAGE_CONVERSIONS = {  # kind: (client serialize, client deserialize) = (server deserialize, serialize)
    "unary": (1, 1),
    "server_stream": (1, 3),
    "client_stream": (3, 1),
    "bidi_stream": (3, 3),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED_MESSAGE_CONVERSIONS))
def test_grpc_calls_the_patched_functions(stubs, channel, kind):
    pb2, pb2_grpc = stubs
    for name in ("encode", "decode", "serialize", "deserialize"):
        assert getattr(grpc_common, name) is getattr(fastcommon, name)
    rpcs = {
        "unary": lambda stub: stub.Unary(pb2.Echo(text="x")),
        "server_stream": lambda stub: list(stub.ServerStream(pb2.Echo(text="x", count=3))),
        "client_stream": lambda stub: stub.ClientStream(iter([pb2.Echo(text="x")] * 3)),
        "bidi_stream": lambda stub: list(stub.BidiStream(iter([pb2.Echo(text="x")] * 3))),
    }
    stub = pb2_grpc.EchoServiceStub(channel)
    rpcs[kind](stub)  # warm-up: the channel's first call does one-off work
    with counting_calls() as counts:
        rpcs[kind](stub)
    sent, received = EXPECTED_MESSAGE_CONVERSIONS[kind]
    assert (counts["client", "serialize"], counts["client", "deserialize"]) == (sent, received)
    assert (counts["server", "deserialize"], counts["server", "serialize"]) == (sent, received)
    assert counts["client", "decode"] >= 1  # the method name and the target, on every sync call


def test_generic_handler_method_name_is_decoded_by_the_patched_decode(stubs, channel):
    pb2, _ = stubs
    call = channel.unary_unary(
        GENERIC_METHOD, request_serializer=pb2.Echo.SerializeToString, response_deserializer=pb2.Echo.FromString
    )
    call(pb2.Echo(text="warm-up"))
    with counting_calls() as counts:
        call(pb2.Echo(text="x"))
    assert counts["server", "decode"] >= 1


def failing_serializer(message):
    raise ValueError("cannot serialize this")


def rpc_with_failing_request_serializer(channel, pb2):
    call = channel.unary_unary(
        "/fastcommon.testing.EchoService/Unary",
        request_serializer=failing_serializer,
        response_deserializer=pb2.Echo.FromString,
    )
    with captured_grpc_records() as records, pytest.raises(grpc.RpcError) as error:
        call(pb2.Echo(text="x"))
    return error.value.code(), error.value.details(), records


def test_raising_serializer_fails_the_rpc_as_stock_grpc_does(stubs, channel):
    pb2, _ = stubs
    patched = rpc_with_failing_request_serializer(channel, pb2)
    fastcommon.unpatch()
    try:
        stock = rpc_with_failing_request_serializer(channel, pb2)
    finally:
        fastcommon.patch()
    assert patched == stock
    assert stock[0] == grpc.StatusCode.INTERNAL
    assert stock[2] == [
        ("grpc._common", logging.ERROR, "Exception serializing message!", ValueError, "cannot serialize this")
    ]


@pytest.mark.stock
def test_toggling_the_patch_under_load_fails_no_rpc(stubs, server_address):
    pb2, pb2_grpc = stubs
    toggles, workers, max_rpcs_per_worker = 1000, 8, 20000
    done = threading.Event()
    progress = threading.Condition()
    completed = [0]
    failures = []

    def worker():
        with grpc.insecure_channel(server_address) as channel:
            stub = pb2_grpc.EchoServiceStub(channel)
            for i in range(max_rpcs_per_worker):
                if done.is_set():
                    return
                try:
                    if i % 2:  # the server echoes the request headers it received: metadata entries, toggled too
                        headers = (("x-load", f"w{i}"), ("x-load-bin", bytes([i % 256])))
                        reply = stub.Unary(pb2.Echo(text="metadata"), metadata=headers, timeout=30)
                        assert reply.text == f"x-load-bin={bytes([i % 256])!r}\nx-load='w{i}'"  # sorted
                    else:
                        reply = stub.Unary(pb2.Echo(text=f"w{i}\xe9", count=i), timeout=30)
                        assert (reply.text, reply.count) == (f"w{i}\xe9", i + 1)
                except Exception as exc:  # every failure is recorded, none may happen
                    failures.append(repr(exc))
                with progress:
                    completed[0] += 1
                    progress.notify_all()

    def wait_for_more_rpcs(than):
        with progress:
            assert progress.wait_for(lambda: completed[0] > than, timeout=30), "the workers stopped making RPCs"

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(toggles):
            seen = completed[0]
            assert fastcommon.patch() == PATCHED
            wait_for_more_rpcs(seen)  # at least one RPC ran while patched ...
            seen = completed[0]
            assert fastcommon.unpatch()
            wait_for_more_rpcs(seen)  # ... and one while not
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)
    assert failures == []
    assert completed[0] >= 2 * toggles


def rpcs_pass(pb2, pb2_grpc, channel):
    """Every RPC kind, and a unary RPC whose request and reply are each several slices long."""
    test_every_rpc_kind((pb2, pb2_grpc), channel)
    payload = bytes(range(256)) * (4 * SLICE_SIZE // 256)
    reply = pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="big", payload=payload), timeout=30)
    assert (reply.text, reply.payload) == ("big", payload)


@pytest.mark.stock
def test_rpcs_pass_on_a_zero_copy_grpc_patched_function_by_function(stubs, channel, monkeypatch):
    pb2, pb2_grpc = stubs
    monkeypatch.setattr(grpc_common, "deserialize", delivered_in_slices(zero_copy_deserialize))
    warned = pytest.warns(fastcommon.FastcommonWarning, match="deserialize in grpc._common")
    with warned, fastcommon.patched() as replaced, counting_calls() as counts:
        assert replaced == ("encode", "decode", "serialize", *BEYOND_FUNCTIONS)
        rpcs_pass(pb2, pb2_grpc, channel)
    assert counts["server", "deserialize"] >= 1 and counts["client", "deserialize"] >= 1


@pytest.mark.stock
def test_without_the_gate_a_zero_copy_grpc_would_fail_multi_slice_rpcs(stubs, channel, monkeypatch):
    # What the gate prevents: fastcommon's deserialize, handed chunks by a zero-copy grpc.
    pb2, pb2_grpc = stubs
    monkeypatch.setattr(grpc_common, "deserialize", delivered_in_slices(fastcommon.deserialize))
    with captured_grpc_records() as records, pytest.raises(grpc.RpcError) as error:
        pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(payload=b"x" * 4 * SLICE_SIZE), timeout=30)
    assert error.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
    assert any(message == "Exception deserializing message!" for _, _, message, _, _ in records)


@pytest.mark.stock
@pytest.mark.parametrize("name", sorted(MADE_UP_CHANGES))
def test_rpcs_pass_on_a_grpc_with_a_made_up_change(stubs, channel, monkeypatch, name):
    pb2, pb2_grpc = stubs
    monkeypatch.setattr(grpc_common, name, MADE_UP_CHANGES[name])
    warned = pytest.warns(fastcommon.FastcommonWarning, match=f" {name} in grpc._common ")
    with warned, fastcommon.patched() as replaced:
        assert replaced == tuple(n for n in PATCHED if n != name)
        rpcs_pass(pb2, pb2_grpc, channel)


@pytest.mark.stock
def test_rpcs_call_grpcs_hooks_through_what_is_in_place_as_often_patched_as_stock(stubs):
    """grpc looks its hooks up at each call: sync and grpc.aio RPCs call fastcommon's, patched, as often as grpc's own,
    stock (a counting wrapper around whatever is in place)."""
    import helpers
    from grpc import _observability
    from grpc._cython import cygrpc

    from grpc_echo import echo_server

    pb2, pb2_grpc = stubs
    homes = {"get_plugin": _observability, "_get_running_loop": cygrpc, "_is_async_handler": cygrpc,
             "_create_servicer_context": grpc}  # fmt: skip

    async def aio_rpcs():
        async with aio_echo_server(pb2, pb2_grpc) as address, grpc.aio.insecure_channel(address) as channel:
            return [(await pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="aio"))).text for _ in range(3)]

    def scenario():
        counts, in_place = {}, {name: getattr(home, name, None) for name, home in homes.items()}

        def counted(name, function):
            def wrapper(*args):
                counts[name] = counts.get(name, 0) + 1
                return function(*args)

            return wrapper

        for name, function in in_place.items():
            if function is not None:
                setattr(homes[name], name, counted(name, function))
        try:
            with echo_server(pb2, pb2_grpc) as address, grpc.insecure_channel(address) as channel:
                replies = [pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="sync")).text for _ in range(3)]
            return replies, asyncio.run(aio_rpcs()), counts
        finally:
            for name, function in in_place.items():
                if function is not None:
                    setattr(homes[name], name, function)

    if not (offered := [name for name in homes if name in PATCHED]):
        pytest.skip("this build offers none of grpc's hooks")
    helpers.assert_like_stock(scenario, *offered)
