"""grpc._common's four functions (encode, decode, serialize, deserialize): both implementations answer exactly as the
installed grpc's own, from one thread or eight at once, and a million calls leave reference counts and memory flat."""

import gc
import json
import logging
import os
import re
import sys
import threading
import time
import tracemalloc
import unittest.mock
from itertools import repeat

import helpers
import pytest
from conftest import GRPC_ORACLE, NO_ORACLE
from helpers import outcome
from hypothesis import given
from inputs import (
    METHOD,
    SENTINEL,
    SERIALIZERS,
    VALUES,
    any_serializer,
    any_value,
    serialize_raises_exception,
    serialize_raises_keyboard_interrupt,
    serialize_to_sentinel,
)


@pytest.fixture(scope="module")
def oracle():
    """grpc's own four functions, by name; a test that compares with them skips where there are none."""
    if GRPC_ORACLE is None:
        pytest.skip(NO_ORACLE)
    return GRPC_ORACLE


def short(value):
    """A test id for ``value``, the same in every run (no memory address): `python -m fastcommon compare` matches
    tests by their ids."""
    text = re.sub(r" at 0x[0-9a-f]+", "", repr(value))
    return text if len(text) < 40 else f"{text[:30]}...({len(text)} chars)"


@pytest.mark.parametrize("value", VALUES, ids=short)
@pytest.mark.parametrize("name", ["encode", "decode"])
def test_conversion_matches_grpc(impl, oracle, name, value):
    assert outcome(getattr(impl, name), value) == outcome(oracle[name], value)


@pytest.mark.parametrize("serializer", SERIALIZERS, ids=short)
@pytest.mark.parametrize("message", ["text", b"bytes", None, ("tuple",)], ids=short)
@pytest.mark.parametrize("name", ["serialize", "deserialize"])
def test_transform_matches_grpc(impl, oracle, name, message, serializer):
    assert outcome(getattr(impl, name), message, serializer) == outcome(oracle[name], message, serializer)


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
def test_a_failure_is_logged_without_an_import(impl, oracle, name, monkeypatch):
    """A failing (de)serializer is logged with nothing imported at the call (none can be at interpreter shutdown):
    fastcommon.common gone from sys.modules, the call answers and logs as grpc's."""
    monkeypatch.setitem(sys.modules, "fastcommon.common", None)
    failing = serialize_raises_exception
    assert outcome(getattr(impl, name), b"message", failing) == outcome(oracle[name], b"message", failing)


@pytest.mark.parametrize("name", ["serialize", "deserialize"])
def test_failure_is_logged_on_the_logger_grpc_common_holds_at_call_time(impl, oracle, name, monkeypatch, caplog):
    """grpc reads its module's _LOGGER at each call: a user's logger bound there after import gets the record, as
    with grpc's own function, and grpc's logger none."""
    grpc_common = pytest.importorskip("grpc._common")
    monkeypatch.setattr(grpc_common, "_LOGGER", logging.getLogger("test_conversions.rebound"))

    def logged(function):
        caplog.clear()
        result = function(b"message", lambda message: 1 / 0)
        return result, [(record.name, record.levelname, record.getMessage()) for record in caplog.records]

    ours = logged(getattr(impl, name))
    assert ours == logged(oracle[name]) and [logger for logger, _, _ in ours[1]] == ["test_conversions.rebound"]


CONFIGURED_BEFORE_GRPC = """
import logging.config, sys
{first}
logging.config.dictConfig({{"version": 1, "disable_existing_loggers": True,
                           "handlers": {{"out": {{"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}}}},
                           "root": {{"handlers": ["out"], "level": "ERROR"}}}})
import grpc._common
{then}
grpc._common.serialize(b"message", lambda message: 1 / 0)
"""


def test_a_logging_configuration_made_before_grpc_is_imported_treats_grpcs_logger_as_stock():
    """import fastcommon, then a dictConfig that disables the loggers there are, then import grpc: grpc's logger did
    not exist yet, so it stays enabled and a failing serializer is logged, as without fastcommon."""
    pytest.importorskip("grpc")

    def printed(first, then):
        program = CONFIGURED_BEFORE_GRPC.format(first=first, then=then)
        lines = helpers.python("-c", program, check_status=0).stdout.splitlines()
        return lines[:1] + lines[-1:]  # the message and the exception; the frames between are each one's own

    stock = printed("", "")
    assert stock == ["Exception serializing message!", "ZeroDivisionError: division by zero"]
    assert printed("import fastcommon", "fastcommon.patch()") == stock


class Asked(str):
    """A str whose __class__ records each read in ``log`` and gives ``claim`` (its own class when None)."""

    def __new__(cls, text, log, claim=None):
        made = super().__new__(cls, text)
        made.log, made.claim = log, claim
        return made

    @property
    def __class__(self):
        self.log.append("__class__")
        return self.claim or type(self)


ARGUMENTS = {
    "Mock(spec=bytes)": lambda log: unittest.mock.Mock(spec=bytes),
    "a str claiming to be bytes": lambda log: Asked("text", log, bytes),
    "a str whose __class__ is read": lambda log: Asked("text", log),
}


@pytest.mark.parametrize("name", ["encode", "decode"])
@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
def test_encode_and_decode_ask_isinstance_as_grpc_does(impl, oracle, name, argument):
    """encode/decode decide "bytes or not" by isinstance, as grpc does: its __class__ is read, and believed."""

    def asked(function):
        log = []
        given = ARGUMENTS[argument](log)
        observed = outcome(function, given)
        if observed[0] == "returned":  # its type's name and which argument it is: a Mock's class is its own
            observed = ("returned", observed[1].__name__, *observed[3:])
        calls = [str(call) for call in given.mock_calls] if argument == "Mock(spec=bytes)" else []
        return observed, list(log), calls

    assert asked(getattr(impl, name)) == asked(oracle[name])


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
def test_parameters_are_positional_only(impl, oracle, name, keywords):
    with pytest.raises(TypeError):
        getattr(impl, name)(**keywords)
    assert getattr(impl, name)(*keywords.values()) == oracle[name](*keywords.values())


@given(any_value)
def test_encode_matches_grpc_generated(impl, oracle, value):
    assert outcome(impl.encode, value) == outcome(oracle["encode"], value)


@given(any_value)
def test_decode_matches_grpc_generated(impl, oracle, value):
    assert outcome(impl.decode, value) == outcome(oracle["decode"], value)


@given(any_value, any_serializer)
def test_serialize_matches_grpc_generated(impl, oracle, message, serializer):
    assert outcome(impl.serialize, message, serializer) == outcome(oracle["serialize"], message, serializer)


@given(any_value, any_serializer)
def test_deserialize_matches_grpc_generated(impl, oracle, message, serializer):
    assert outcome(impl.deserialize, message, serializer) == outcome(oracle["deserialize"], message, serializer)


# ------------------------------------------------------------------ memory, and eight threads

MILLION = 1_000_000
RAW = METHOD.encode()
NOT_BYTES = ["not bytes"]


def as_bytes(data):
    return bytes(data)


# Arguments are objects of this test's own (or None): shared objects' reference counts move with other threads.
CALLS = [  # (function name, arguments): one of each path through the functions
    ("encode", (METHOD,)),
    ("encode", (RAW,)),
    ("encode", ("h\xe9llo \U0001f600",)),
    ("decode", (RAW,)),
    ("decode", (METHOD,)),
    ("decode", (b"\xff\xfe bad",)),
    ("decode", (NOT_BYTES,)),
    ("serialize", (METHOD, None)),
    ("serialize", (METHOD, serialize_to_sentinel)),
    ("deserialize", (RAW, as_bytes)),
]
PASS_THROUGH = [("encode", RAW), ("decode", METHOD), ("decode", None)]


def call_many(function, args, n):
    for _ in repeat(None, n):
        function(*args)


def rss_bytes():
    """This process's resident memory; None without /proc/self/statm (Linux has it), or under AddressSanitizer."""
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return None  # its quarantine holds freed memory back on purpose: the resident size says nothing here
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096
    except OSError:
        return None


def rss_growth_since(rss):
    return None if rss is None else rss_bytes() - rss


# Memory is measured in a fresh interpreter, one per implementation: tracemalloc and RSS see the whole
# process, and in the test process the grpc servers of other tests have threads that allocate at any moment.
def measure_everything(impl):
    """Every memory measurement of this module for one implementation, in this (fresh) process."""
    return {
        "refcounts_and_rss": [refcounts_and_rss_growth(impl, i) for i in range(len(CALLS))],
        "traced": [traced_growth(impl, i) for i in range(len(CALLS))],
        "pass_through": [pass_through_allocations(impl, i) for i in range(len(PASS_THROUGH))],
        "failing_serializer": failing_serializer_growth(impl),
    }


@pytest.fixture(scope="session")
def measured(impl):
    code = (
        f"import importlib, json, test_conversions; "
        f"print(json.dumps(test_conversions.measure_everything(importlib.import_module({impl.__name__!r}))))"
    )
    environ = {"PYTHONPATH": os.pathsep.join([helpers.TESTS_DIR, helpers.PROJECT_DIR])}
    return json.loads(helpers.python("-c", code, env=environ, timeout=600, check_status=0).stdout)


def refcounts_and_rss_growth(impl, index):
    name, args = CALLS[index]
    function = getattr(impl, name)
    call_many(function, args, 10_000)  # warm-up: caches, free lists, specialization
    gc.collect()
    refcounts = [sys.getrefcount(arg) for arg in args if arg is not None]  # None is everyone's
    rss = rss_bytes()
    call_many(function, args, MILLION)
    gc.collect()
    return refcounts, [sys.getrefcount(arg) for arg in args if arg is not None], rss_growth_since(rss)


def traced_growth(impl, index):
    name, args = CALLS[index]
    function = getattr(impl, name)
    tracemalloc.start()
    try:
        call_many(function, args, 10_000)
        before = tracemalloc.get_traced_memory()[0]
        call_many(function, args, 200_000)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def failing_serializer_growth(impl):
    logging.getLogger("grpc._common").disabled = True  # no records: this measures fastcommon, not logging
    message = object()
    call_many(impl.serialize, (message, serialize_raises_exception), 10_000)
    gc.collect()
    refcount, rss = sys.getrefcount(message), rss_bytes()
    call_many(impl.serialize, (message, serialize_raises_exception), 200_000)
    gc.collect()
    return refcount, sys.getrefcount(message), rss_growth_since(rss)


def pass_through_allocations(impl, index):
    name, value = PASS_THROUGH[index]
    function = getattr(impl, name)
    call_many(function, (value,), 1000)
    tracemalloc.start()
    try:
        call_many(function, (value,), 1000)
        loop = repeat(None, 100_000)  # made before measuring: the iterator itself is an allocation
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in loop:
            function(value)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert function(value) is value
    return current - before, peak - before


@pytest.mark.parametrize("index", range(len(CALLS)), ids=[repr(call)[:30] for call in CALLS])
def test_a_million_calls_leave_refcounts_and_memory_flat(measured, index):
    refcounts_before, refcounts_after, rss_growth = measured["refcounts_and_rss"][index]
    assert refcounts_after == refcounts_before
    if rss_growth is None:
        pytest.skip("RSS is not measured here (no /proc, or AddressSanitizer); refcounts and tracemalloc are")
    assert rss_growth < 1024 * 1024


@pytest.mark.parametrize("index", range(len(CALLS)), ids=[repr(call)[:30] for call in CALLS])
def test_traced_memory_is_flat(measured, index):
    assert measured["traced"][index] < 4096


def test_failing_serializer_does_not_leak(measured):
    refcount_before, refcount_after, rss_growth = measured["failing_serializer"]
    assert refcount_after == refcount_before
    assert rss_growth is None or rss_growth < 1024 * 1024


@pytest.mark.parametrize("index", range(len(PASS_THROUGH)), ids=[repr(case) for case in PASS_THROUGH])
def test_pass_through_allocates_nothing(impl, measured, index):
    if impl.__name__ == "fastcommon.common" and sys.version_info < (3, 11):
        pytest.skip("CPython < 3.11 allocates frame objects for Python-level calls at times")
    assert measured["pass_through"][index] == [0, 0]  # (current, peak) over the loop, in bytes


def test_eight_threads_get_the_same_answers_as_one(impl):
    seconds, threads_count, max_rounds = 3.0, 8, 200_000
    logger = logging.getLogger("grpc._common")
    records = []
    counting = logging.Handler()
    counting.emit = records.append
    calls = [*CALLS, ("serialize", (METHOD, serialize_raises_exception)), ("encode", ("�",)), ("encode", (None,))]

    def answer(name, args):
        try:
            result = getattr(impl, name)(*args)
        except Exception as exc:
            return type(exc), str(exc)
        return type(result), result, result is SENTINEL

    expected = [answer(name, args) for name, args in calls]
    mismatches, rounds = [], [0] * threads_count
    start_together = threading.Barrier(threads_count)

    def worker(index):
        start_together.wait(timeout=30)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and rounds[index] < max_rounds:
            got = [answer(name, args) for name, args in calls]
            if got != expected:
                mismatches.append(got)
            rounds[index] += 1

    logger.addHandler(counting)
    logger.propagate = False  # thousands of expected records must not flood the test log
    try:
        records.clear()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + 60)
    finally:
        logger.removeHandler(counting)
        logger.propagate = True
    assert mismatches == []
    assert all(count > 0 for count in rounds)
    assert len(records) == sum(rounds)  # one failing serializer per round, each logged exactly once
