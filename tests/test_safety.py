"""No leaks, no allocation on pass-through, the same answers from 8 threads as from one."""

import gc
import json
import logging
import os
import sys
import threading
import time
import tracemalloc
from itertools import repeat

import helpers
import pytest
from conftest import NEEDS_GRPCIO, load_implementation
from inputs import METHOD, SENTINEL, serialize_raises_exception, serialize_to_sentinel

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
        f"import importlib, json, test_safety; "
        f"print(json.dumps(test_safety.measure_everything(importlib.import_module({impl.__name__!r}))))"
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


# Under a debug CPython (Py_DEBUG: .ci/hardening debug), sys.gettotalrefcount() counts every reference the
# interpreter holds. Every compiled entry point, the constructor and grpc.aio's Metadata methods patch() puts
# into grpc, is called 100,000 times after a warm-up; a leak of one reference a call would move the total by
# 100,000 (the Metadata round, by far more: it makes dozens of calls).
REFCOUNT_PROBE = """
import json, logging, sys
import fastcommon
from fastcommon import fast_common, fast_entry, fast_metadata
from grpc._cython import cygrpc
from inputs import METHOD, serialize_raises_exception

logging.getLogger("grpc._common").disabled = True  # the failing serializer's path, without 100,000 records
fastcommon.patch()
constructor = cygrpc._Metadatum
entry_class = type(constructor("k", "v"))
from grpc.aio import Metadata
from grpc.aio._channel import _BaseMultiCallable

HEADERS = tuple((f"x-header-{i}", f"value {i}") for i in range(10)) + (("x-header-1", b"\\x00again"),)


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
    "MetadatumConstructor(cls)": (fast_entry.MetadatumConstructor, (entry_class,)),
    "MetadatumConstructor(refused)": (fast_entry.MetadatumConstructor, (len,)),
    "grpc.aio Metadata: a call's path, reads, sets, iteration while adding": (metadata_methods, ()),
    "grpc.aio Metadata, off the fast path": (Metadata, ((1, "v"), ["k", "v"], ("k", None))),
}
deltas = {}
for label, (function, args) in calls.items():
    def run(n):
        for _ in range(n):
            try:
                function(*args)
            except Exception:
                pass
    run(1000)
    before = sys.gettotalrefcount()
    run(100_000)
    deltas[label] = sys.gettotalrefcount() - before
fastcommon.unpatch()
print(json.dumps(deltas))
"""


def test_the_interpreters_total_reference_count_stays_flat():
    if not hasattr(sys, "gettotalrefcount"):
        pytest.skip("needs a debug CPython (Py_DEBUG), as .ci/hardening debug runs the suite")
    load_implementation("fast_common")
    pytest.importorskip("grpc", reason=NEEDS_GRPCIO)
    result = helpers.python("-c", REFCOUNT_PROBE, env={"PYTHONPATH": helpers.TESTS_DIR}, timeout=600, check_status=0)
    deltas = json.loads(result.stdout)
    assert len(deltas) == 19 and all(abs(delta) < 100 for delta in deltas.values()), deltas
