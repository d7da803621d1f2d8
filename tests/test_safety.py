"""No leaks, no allocation on pass-through, the same answers from 8 threads as from one."""

import gc
import logging
import sys
import threading
import time
import tracemalloc
from itertools import repeat

import pytest

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
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.parametrize("name, args", CALLS, ids=lambda v: repr(v)[:30])
def test_a_million_calls_leave_refcounts_and_memory_flat(impl, name, args):
    function = getattr(impl, name)
    call_many(function, args, 10_000)  # warm-up: caches, free lists, specialization
    gc.collect()
    refcounts = [sys.getrefcount(arg) for arg in args if arg is not None]  # None is everyone's
    rss = rss_bytes()
    call_many(function, args, MILLION)
    gc.collect()
    assert [sys.getrefcount(arg) for arg in args if arg is not None] == refcounts
    assert rss_bytes() - rss < 1024 * 1024


@pytest.mark.parametrize("name, args", CALLS, ids=lambda v: repr(v)[:30])
def test_traced_memory_is_flat(impl, name, args):
    function = getattr(impl, name)
    tracemalloc.start()
    try:
        call_many(function, args, 10_000)
        before = tracemalloc.get_traced_memory()[0]
        call_many(function, args, 200_000)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 4096


def test_failing_serializer_does_not_leak(impl):
    logger = logging.getLogger("grpc._common")
    logger.disabled = True  # no records: this measures fastcommon, not logging
    try:
        message = object()
        call_many(impl.serialize, (message, serialize_raises_exception), 10_000)
        gc.collect()
        refcount, rss = sys.getrefcount(message), rss_bytes()
        call_many(impl.serialize, (message, serialize_raises_exception), 200_000)
        gc.collect()
        assert sys.getrefcount(message) == refcount
        assert rss_bytes() - rss < 1024 * 1024
    finally:
        logger.disabled = False


@pytest.mark.parametrize("name, value", PASS_THROUGH)
def test_pass_through_allocates_nothing(impl, name, value):
    if impl.__name__ == "fastcommon.common" and sys.version_info < (3, 11):
        pytest.skip("CPython < 3.11 allocates frame objects for Python-level calls at times")
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
    assert (current, peak) == (before, before)


def test_eight_threads_get_the_same_answers_as_one(impl):
    seconds, threads_count, max_rounds = 3.0, 8, 200_000
    logger = logging.getLogger("grpc._common")
    records = []
    counting = logging.Handler()
    counting.emit = records.append
    calls = CALLS + [("serialize", (METHOD, serialize_raises_exception)), ("encode", ("\ud800",)), ("encode", (None,))]

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
