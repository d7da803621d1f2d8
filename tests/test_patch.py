"""fastcommon.patch(), unpatch(), is_patched(), patched(): what they replace, refuse and restore."""

import logging
import sys
import warnings

import pytest
from grpc import _common as grpc_common

import fastcommon
from conftest import GRPC_ORACLE
from helpers import captured_grpc_records

NAMES = ("encode", "decode", "serialize", "deserialize")


def assert_stock():
    assert not fastcommon.is_patched()
    for name in NAMES:
        assert getattr(grpc_common, name) is GRPC_ORACLE[name]


def test_patch_replaces_and_unpatch_restores_the_exact_originals():
    assert_stock()
    assert fastcommon.patch() == NAMES
    assert fastcommon.is_patched()
    for name in NAMES:
        assert getattr(grpc_common, name) is getattr(fastcommon, name)
    assert fastcommon.patch() == ()  # a second call changes nothing
    assert fastcommon.unpatch() == NAMES
    assert_stock()
    assert fastcommon.unpatch() == ()


def test_patched_context_manager_undoes_only_its_own_patch():
    with fastcommon.patched() as replaced:
        assert replaced == NAMES and grpc_common.encode is fastcommon.encode
        with fastcommon.patched() as inner:
            assert inner == ()
        assert fastcommon.is_patched()  # the inner block patched nothing, so it undid nothing
    assert_stock()


def test_patched_context_manager_restores_on_error():
    with pytest.raises(ZeroDivisionError):
        with fastcommon.patched():
            1 / 0
    assert_stock()


def test_probing_leaves_no_log_records(caplog):
    caplog.set_level(logging.DEBUG)
    with fastcommon.patched():
        pass
    assert caplog.records == []


def test_probe_filter_keeps_other_records():
    # A real serializer failure elsewhere while patch() probes must still be logged.
    logger = logging.getLogger("grpc._common")
    capture = fastcommon._ProbeLogCapture()
    logger.addFilter(capture)
    try:
        with captured_grpc_records() as records:
            GRPC_ORACLE["serialize"](b"x", lambda message: 1 / 0)
    finally:
        logger.removeFilter(capture)
    assert [message for _, _, message, _, _ in records] == ["Exception serializing message!"]


def encode_latin1(s):
    return s if isinstance(s, bytes) else s.encode("latin-1")


def decode_strict(b):
    return b.decode("utf-8") if isinstance(b, bytes) else b


def serialize_reraising(message, serializer):
    return message if serializer is None else serializer(message)


def deserialize_quietly(data, deserializer):
    try:
        return data if deserializer is None else deserializer(data)
    except Exception:
        return None


@pytest.mark.parametrize("name, changed", [
    ("encode", encode_latin1),
    ("decode", decode_strict),
    ("serialize", serialize_reraising),
    ("deserialize", deserialize_quietly),
])
def test_changed_grpc_semantics_are_never_overridden(monkeypatch, name, changed):
    import grpc

    monkeypatch.setattr(grpc_common, name, changed)
    with pytest.warns(fastcommon.FastcommonWarning) as warned:
        assert fastcommon.patch() == ()
    message = str(warned[0].message)
    assert f"grpc._common.{name}" in message and f"grpcio {grpc.__version__}" in message
    assert not fastcommon.is_patched()
    assert getattr(grpc_common, name) is changed
    for other in set(NAMES) - {name}:
        assert getattr(grpc_common, other) is GRPC_ORACLE[other]


def test_without_grpcio_patch_says_so_and_conversions_still_work(monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc", None)
    monkeypatch.setitem(sys.modules, "grpc._common", None)
    with pytest.raises(ImportError, match="needs grpcio, which is not installed"):
        fastcommon.patch()
    assert fastcommon.encode("h\xe9") == b"h\xc3\xa9" and fastcommon.decode(b"\xff") == "\ufffd"
    assert not fastcommon.is_patched()


def test_patch_issues_no_warning_on_stock_grpc():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastcommon.patched() as replaced:
            assert replaced == NAMES
