"""Both implementations answer exactly as the installed grpc._common does."""

import pytest
from conftest import GRPC_ORACLE, NO_ORACLE
from helpers import outcome
from hypothesis import given
from inputs import METHOD, SERIALIZERS, VALUES, any_serializer, any_value, serialize_raises_keyboard_interrupt

import fastcommon

if GRPC_ORACLE is None:
    pytest.skip(NO_ORACLE, allow_module_level=True)


def short(value):
    text = repr(value)
    return text if len(text) < 40 else f"{text[:30]}...({len(text)} chars)"


@pytest.mark.parametrize("value", VALUES, ids=short)
@pytest.mark.parametrize("name", ["encode", "decode"])
def test_conversion_matches_grpc(impl, name, value):
    assert outcome(getattr(impl, name), value) == outcome(GRPC_ORACLE[name], value)


@pytest.mark.parametrize("serializer", SERIALIZERS, ids=short)
@pytest.mark.parametrize("message", ["text", b"bytes", None, ("tuple",)], ids=short)
@pytest.mark.parametrize("name", ["serialize", "deserialize"])
def test_transform_matches_grpc(impl, name, message, serializer):
    assert outcome(getattr(impl, name), message, serializer) == outcome(GRPC_ORACLE[name], message, serializer)


@pytest.mark.parametrize("name", ["serialize", "deserialize"])
def test_keyboard_interrupt_propagates_unlogged(impl, name, caplog):
    with pytest.raises(KeyboardInterrupt):
        getattr(impl, name)(b"message", serialize_raises_keyboard_interrupt)
    assert caplog.records == []


@pytest.mark.parametrize("name", ["serialize", "deserialize"])
def test_failure_is_logged_with_traceback(impl, name, caplog):
    def failing(message):
        raise ValueError("bad message")

    assert getattr(impl, name)(b"message", failing) is None
    [record] = caplog.records
    assert (record.name, record.levelname) == ("grpc._common", "ERROR")
    assert record.getMessage() == f"Exception {name.replace('ize', 'izing')} message!"
    assert record.exc_info[0] is ValueError and str(record.exc_info[1]) == "bad message"


@pytest.mark.parametrize("name", ["serialize", "deserialize"])
def test_failure_is_logged_on_grpc_commons_logger_at_call_time(impl, name, monkeypatch, caplog):
    """grpc reads its module's _LOGGER at each call: a logger bound there after import gets the record."""
    grpc_common = pytest.importorskip("grpc._common")
    monkeypatch.setattr(grpc_common, "_LOGGER", grpc_common.logging.getLogger("test_parity.rebound"))
    assert getattr(impl, name)(b"message", lambda message: 1 / 0) is None
    assert [record.name for record in caplog.records] == ["test_parity.rebound"]


def test_exact_types_take_no_detour(impl):
    method = METHOD
    assert impl.encode(method) == method.encode() and type(impl.encode(method)) is bytes
    assert impl.decode(method.encode()) == method and type(impl.decode(method.encode())) is str
    raw = method.encode()
    assert impl.encode(raw) is raw and impl.decode(method) is method


@pytest.mark.parametrize(
    "name, keywords",
    [
        ("encode", {"s": b"x"}),
        ("decode", {"b": b"x"}),
        ("serialize", {"message": b"x", "serializer": None}),
        ("deserialize", {"serialized_message": b"x", "deserializer": None}),
    ],
)
def test_parameters_are_positional_only(impl, name, keywords):
    with pytest.raises(TypeError):
        getattr(impl, name)(**keywords)
    assert getattr(impl, name)(*keywords.values()) == GRPC_ORACLE[name](*keywords.values())


def test_shim_exports_the_active_implementation():
    module = fastcommon.common if fastcommon.IMPLEMENTATION == "python" else fastcommon.fast_common
    for name in ("encode", "decode", "serialize", "deserialize"):
        assert getattr(fastcommon, name) is getattr(module, name)


@given(any_value)
def test_encode_matches_grpc_generated(impl, value):
    assert outcome(impl.encode, value) == outcome(GRPC_ORACLE["encode"], value)


@given(any_value)
def test_decode_matches_grpc_generated(impl, value):
    assert outcome(impl.decode, value) == outcome(GRPC_ORACLE["decode"], value)


@given(any_value, any_serializer)
def test_serialize_matches_grpc_generated(impl, message, serializer):
    assert outcome(impl.serialize, message, serializer) == outcome(GRPC_ORACLE["serialize"], message, serializer)


@given(any_value, any_serializer)
def test_deserialize_matches_grpc_generated(impl, message, serializer):
    assert outcome(impl.deserialize, message, serializer) == outcome(GRPC_ORACLE["deserialize"], message, serializer)
