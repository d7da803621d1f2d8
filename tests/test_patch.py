"""Patch state: patch(), unpatch(), patched() and is_patched(), on stock grpc and beside another library's patch.

What the gate leaves to grpc, and why, is test_gate.py's; the status and check that tell it, test_command_line.py's.
"""

import sys

import pytest
from conftest import NEEDS_GRPCIO

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers
from conftest import (
    FUNCTIONS,
    GRPC_METADATA_ORIGINALS,
    GRPC_METADATUM,
    GRPC_ORACLE,
    expected_patch,
)
from grpc import _common as grpc_common
from grpc._cython import cygrpc

import fastcommon

NAMES = FUNCTIONS  # grpc._common's
PATCHED = expected_patch()
BEYOND_FUNCTIONS = PATCHED[len(FUNCTIONS) :]  # _Metadatum and the aio Metadata methods, where this build offers them


TESTED = ", ".join(helpers.TESTED_GRPCIO)  # the releases the registry's fingerprints name


def assert_stock():
    assert not fastcommon.is_patched()
    for name in NAMES:
        assert getattr(grpc_common, name) is GRPC_ORACLE[name]
    assert cygrpc._Metadatum is GRPC_METADATUM
    for name, own in GRPC_METADATA_ORIGINALS.items():
        assert helpers.current(name) is own


# ------------------------------------------------------------------ stock grpc


def test_patch_replaces_and_unpatch_restores_the_exact_originals():
    assert_stock()
    assert fastcommon.patch() == PATCHED
    assert fastcommon.is_patched() and all(fastcommon.is_patched(name) for name in PATCHED)
    for name in NAMES:
        assert getattr(grpc_common, name) is getattr(fastcommon, name)
    if "_Metadatum" in PATCHED:  # not in a Limited API (abi3) build
        assert type(cygrpc._Metadatum) is fastcommon.fast_entry.MetadatumConstructor
        assert type(cygrpc._Metadatum("k", "v")) is GRPC_METADATUM
    else:  # pure Python and abi3 leave it to grpc, and say why
        assert cygrpc._Metadatum is GRPC_METADATUM and not fastcommon.is_patched("_Metadatum")
        assert helpers.unavailable("_Metadatum").startswith(
            "fastcommon runs pure Python here" if fastcommon.IMPLEMENTATION == "python" else "this build"
        )
    assert fastcommon.patch() == ()  # a second call changes nothing
    assert fastcommon.unpatch() == PATCHED
    assert_stock()
    assert fastcommon.unpatch() == ()


@pytest.mark.parametrize("name", ["bogus", "Metadatum", "", "ENCODE"])
def test_is_patched_refuses_a_name_it_does_not_patch(name):
    with pytest.raises(
        ValueError, match=r"fastcommon patches no .*; it patches encode, decode, serialize, deserialize"
    ):
        fastcommon.is_patched(name)


def test_patch_issues_no_warning_on_stock_grpc():
    with helpers.unwarned(), fastcommon.patched() as replaced:
        assert replaced == PATCHED


def test_patched_context_manager_undoes_only_its_own_patch():
    with fastcommon.patched() as replaced:
        assert replaced == PATCHED and grpc_common.encode is fastcommon.encode
        with fastcommon.patched() as inner:
            assert inner == ()
        assert fastcommon.is_patched()  # the inner block patched nothing, so it undid nothing
    assert_stock()


def test_patched_context_manager_restores_on_error():
    with pytest.raises(ZeroDivisionError), fastcommon.patched():
        raise ZeroDivisionError
    assert_stock()


def test_unpatch_leaves_a_later_patch_by_someone_else_alone_and_keeps_grpcs_own():
    fastcommon.patch()
    ours = grpc_common.encode
    theirs = lambda s: ours(s)  # noqa: E731  (another library, wrapping what it found)
    grpc_common.encode = theirs
    assert fastcommon.unpatch() == ("decode", "serialize", "deserialize", *BEYOND_FUNCTIONS)
    assert grpc_common.encode is theirs
    assert fastcommon.is_patched() and fastcommon.is_patched("encode")  # grpc's own is not forgotten
    grpc_common.encode = ours  # the other library unwraps
    assert fastcommon.unpatch() == ("encode",)
    assert_stock()


def test_without_grpcio_patch_says_so_and_conversions_still_work(monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc", None)
    monkeypatch.setitem(sys.modules, "grpc._common", None)
    with pytest.raises(ImportError, match="needs grpcio, which is not installed"):
        fastcommon.patch()
    assert fastcommon.encode("h\xe9") == b"h\xc3\xa9" and fastcommon.decode(b"\xff") == "\ufffd"
    assert not fastcommon.is_patched()
