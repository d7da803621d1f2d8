"""What the tests share: everything observable about one call, the one way they run a Python subprocess, and the
one door to fastcommon's private parts."""

import contextlib
import logging
import os
import re
import subprocess
import sys
import warnings

import pytest

import fastcommon

GRPC_LOGGER = logging.getLogger("grpc._common")


class _RecordCapture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        self.records.append((record.name, record.levelno, record.getMessage(), type(exc), str(exc)))


@contextlib.contextmanager
def captured_grpc_records():
    """Yield a list that receives (name, level, message, exception type, exception text) of each grpc._common record."""
    capture = _RecordCapture()
    GRPC_LOGGER.addHandler(capture)
    try:
        yield capture.records
    finally:
        GRPC_LOGGER.removeHandler(capture)


def _which_argument(result, args):
    return next((i for i, arg in enumerate(args) if result is arg), None)


def outcome(function, *args):
    """The call's result (type, value, which argument it is) or exception (type, message), and its log records."""
    with captured_grpc_records() as records:
        try:
            result = function(*args)
        except BaseException as exc:  # KeyboardInterrupt from a serializer must propagate the same way
            observed = ("raised", type(exc), str(exc))
        else:
            observed = ("returned", type(result), result, _which_argument(result, args))
    return (*observed, records)


@contextlib.contextmanager
def unwarned():
    """A block in which nothing may warn (fastcommon's warnings are shown, never raised, where warnings are errors):
    every warning recorded, and the test fails on any."""
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        yield
    assert [f"{warning.category.__name__}: {warning.message}" for warning in warned] == []


def assert_like_stock(scenario, *names):
    """outcome(scenario) on stock grpc, then on grpc patched with ``names`` among what is replaced (no warning
    there): they must be equal. A scenario makes its own objects each time it runs, and returns plain data (its
    results, which user code ran and how often, the state left). A name this build offers nothing for skips the test,
    saying why; one that stays grpc's fails it: stock compared with stock shows nothing."""
    assert names, "name what the scenario compares"
    for name in names:
        if why := unavailable(name):
            pytest.skip(f"{name}: {why}")
    stock = outcome(scenario)  # the autouse fixture stock_grpc starts every test with stock grpc
    with unwarned(), fastcommon.patched():
        assert [name for name in names if not fastcommon.is_patched(name)] == []
        patched = outcome(scenario)
    assert patched == stock, f"\n stock:   {stock!r}\n patched: {patched!r}"


# ------------------------------------------------------------------ a Python subprocess

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PROJECT_DIR = os.path.dirname(TESTS_DIR)  # the checkout: grpc_echo, benchmark.py, example.py
# grpc's C core logs like this on stderr at times (grpcio 1.80 on exit, for one); not the program's output.
GRPC_CORE_LOG_LINE = re.compile(r"^[EWID]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] .*\n", re.MULTILINE)


def program_stderr(stderr):
    """A program's stderr without the lines grpc's C core logged."""
    return GRPC_CORE_LOG_LINE.sub("", stderr)


def _child(args, env):
    """The command and environment of this Python run with ``args``: this process's environment with ``env``'s
    changes, a value of None removing the variable."""
    environ = {**os.environ, **(env or {})}
    return [sys.executable, *args], {name: value for name, value in environ.items() if value is not None}


def python(*args, cwd=None, env=None, input=None, timeout=300, check_status=None, closed_stdout=False):
    """Run this Python with ``args`` in ``cwd``, its environment this process's with ``env``'s changes (None removes
    a variable), ``input`` on its stdin: the CompletedProcess, its output as text. With ``check_status``, it must end
    with that status (its stderr tells why not); with ``closed_stdout``, its stdout is a pipe whose reader has gone,
    as in ``| head -1`` once head has read its line."""
    command, environ = _child(args, env)
    with contextlib.ExitStack() as closing:
        stdout = subprocess.PIPE
        if closed_stdout:
            reader, stdout = os.pipe()
            os.close(reader)
            closing.callback(os.close, stdout)
        result = subprocess.run(command, cwd=cwd, env=environ, input=input, stdout=stdout, stderr=subprocess.PIPE,
                                text=True, timeout=timeout)  # fmt: skip
    if check_status is not None:
        assert result.returncode == check_status, result.stderr[-3000:]
    return result


@contextlib.contextmanager
def started(*args, cwd=None, env=None, stdin=None):
    """This Python started with ``args`` as python() runs it, its stdout and stderr pipes (text), for the test to read
    and signal; killed, if it still runs, as the block ends."""
    command, environ = _child(args, env)
    with subprocess.Popen(command, cwd=cwd, env=environ, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:  # fmt: skip
        try:
            yield process
        finally:
            process.kill()


# ------------------------------------------------------------------ the suite's one door to fastcommon's internals
# Tests use fastcommon's public API, the compiled module's own (fastcommon.fast_common), and what is below: nothing
# else of the package's private modules. docs/development.md says so.

from fastcommon import (  # noqa: E402
    _environment,
    _gate,
    _grpc,
    _implementation,
    _launcher,
    _patching,
    _recording,  # noqa: F401  (compare's part in each run)
    _registry,
    _report,
    _status,
)
from fastcommon._gate import copies as gate_copies  # noqa: E402,F401  (what the gate probes with)
from fastcommon._gate import fingerprint_of as fingerprint  # noqa: E402
from fastcommon._gate import functions as _functions  # noqa: E402
from fastcommon._gate import metadata as gate_metadata  # noqa: E402,F401  (the gate's class and Sequence of its own)
from fastcommon._gate import metadata_probes as probes  # noqa: E402,F401  (the gate's scenarios, shared)

NAMES = _registry.NAMES  # every name patch() may replace, in the registry's order
HOMES = _registry.HOMES
TESTED_GRPCIO = _registry.TESTED_GRPCIO
USER_AGENT, METHOD_NAME = _registry.USER_AGENT, _registry.METHOD_NAME
Recorder = _functions.Recorder  # what the gate's probes log on, in place of grpc._common's _LOGGER, and their classes


def probe_values():
    """The values the gate probes grpc._common's functions with."""
    return _functions.probe_values(Recorder())


Report, report_text = _report.Report, _report.text
# The compiled relay of --report's SIGTERM handler: built on POSIX wherever fast_common is (a build without it is
# broken, and its tests fail), absent from a pure-Python install.
SIGTERM_RELAY = _launcher.sigterm_relay() is not None or \
    (os.name, _implementation.IMPLEMENTATION) == ("posix", "cython")  # fmt: skip
BOOTSTRAP_DIR, REPORT_VARIABLE, REPORT_FILE_VARIABLE = (
    _launcher.BOOTSTRAP_DIR,
    _environment.REPORT,
    _environment.REPORT_FILE,
)
COMPARE_VARIABLES = (_environment.COMPARE_PROCESSES, _environment.COMPARE_STOCK)  # what a process of compare's inherits
flag = _environment.flag  # how fastcommon reads a flag of the environment
launcher, grpc_imported = _launcher, _launcher.grpc_imported


@contextlib.contextmanager
def suspended():
    """grpc's originals in place for a ``with`` block (a test starts from stock grpc); then fastcommon's put back where
    grpc's still are (under `python -m fastcommon run`, this process was patched before the tests)."""
    with _patching._lock:
        taken = dict(_patching._installed)
    restored = _patching.unpatch()
    try:
        yield
    finally:
        with _patching._lock:
            for name in restored:
                original, replacement = taken[name]
                if name not in _patching._installed and _grpc.current(name) is original:
                    setattr(*_grpc.owner(name), replacement)
                    _patching._installed[name] = (original, replacement)


def relay_sigterm():
    """Put the compiled SIGTERM relay in front of CPython's handler, as the report does; whether it is there."""
    return _launcher.sigterm_relay().relay_sigterm(_launcher._pthread_kill_address())


def home(name):
    """The grpc module that holds ``name``."""
    return _registry.BY_NAME[name].home


def counter(name):
    """Where --report counts the calls of what replaces ``name``."""
    return _registry.BY_NAME[name].counter


def owner(name):
    """(the object whose own __dict__ holds ``name``, the key there): setattr(*owner(name), x) puts x in grpc."""
    return _grpc.owner(name)


def current(name):
    """What grpc holds under ``name`` now (a classmethod as its class keeps it), or None."""
    return _grpc.current(name)


def original(name):
    """grpc's original for ``name``, fastcommon's replacement in place or not."""
    return _patching.originals()[name]


def status():
    """The lines `python -m fastcommon` prints."""
    return _status.status()


def check():
    """What `python -m fastcommon check` says: its exit status, and its lines."""
    return _status.check()


def verdicts():
    """The gate's verdict on every name, for the grpc installed here: {name: reason or None}."""
    return {name: verdict.reason for name, verdict in _patching.verdicts().items()}


def unavailable(name):
    """Why fastcommon has no replacement for ``name`` here (pure Python, abi3, grpc has none), or None."""
    return _gate.unavailable(_registry.BY_NAME[name], original(name))


def suite_ran_on_cpython_up_to(monkeypatch, version):
    """Make the gate take ``version`` (3, N) for the newest CPython the suite ran on: grpc's hooks follow its stdlib."""
    monkeypatch.setattr(_gate, "NEWEST_CPYTHON", version)


def unknown():
    """What of the installed grpcio the gate does not know, by name, as .ci/next-grpcio prints it."""
    return _gate.unknown(_patching.originals())


def replacement(name):
    """What fastcommon put in place of ``name`` (KeyError where it replaced nothing by that name)."""
    return _patching._installed[name][1]


def forget_patch():
    """Forget what fastcommon replaced (after a test put grpc's own back itself)."""
    _patching._installed.clear()


@contextlib.contextmanager
def probing(recorder):
    """fastcommon's functions log on ``recorder`` in this thread, as while the gate probes them."""
    from fastcommon import common

    common.PROBING.recorder = recorder
    try:
        yield
    finally:
        del common.PROBING.recorder


def trust(monkeypatch, name, function):
    """Let ``function`` pass the fingerprint gate for ``name``, so that the probes alone decide about it."""
    monkeypatch.setitem(_registry.BY_NAME[name].fingerprints, fingerprint(function), ("this test",))


def first_difference(name, grpcs, ours):
    """The gate's probes of a grpc._common function: the first on which ``grpcs`` and ``ours`` differ, or None."""
    return _functions.difference(name, _registry.BY_NAME[name].arguments, grpcs, ours)


def metadata_differences(names, originals):
    """The gate's probes of grpc.aio's Metadata methods ``names``, grpc's own being ``originals`` (by name): why each
    of fastcommon's may not replace grpc's, or None."""
    return _gate.metadata.differences({name: originals[name] for name in names})


def trust_metadatum_shape(monkeypatch):
    """Let any metadata entry class pass the gate's check of its shape, so that the probes alone decide."""
    monkeypatch.setattr(_gate.metadata, "entry_class_difference", lambda cls: None)


def metadata_stand_in(**changes):
    """A stand-in for grpc.aio's Metadata class: a subclass holding grpc's own methods, and ``changes``. grpc's own
    class is never changed: a __new__ set on a class and deleted again leaves the class broken for good (CPython
    keeps the slot)."""
    from grpc.aio import Metadata

    owns = {name: original(name) for name in NAMES if name.startswith("Metadata.")}
    return type(
        "Metadata",
        (Metadata,),
        {**{name.split(".")[1]: own for name, own in owns.items() if own is not None}, **changes},
    )


def break_patching(monkeypatch, broken):
    """Make every patch() call ``broken`` instead (given what makes the replacements)."""
    monkeypatch.setattr(_patching, "install", broken)


# ------------------------------------------------------------------ what --report prints

# A process's block on stderr: three lines, of at most REPORT_WIDTH characters.
REPORT_BLOCK = re.compile(
    r"fastcommon --report, process (?P<pid>\d+) \(grpcio (?P<grpcio>[^,]+), (?P<implementation>compiled|pure Python)\)"
    r"(?P<ended>, ended by SIGTERM)?: (?P<patched>\d+) of (?P<names>\d+) names patched"
    r"(?:, (?P<left>\d+) left to grpc: (?P<left_names>.*))?\n"
    r"  calls: (?P<calls>.*)\n"
    r"  saved: (?P<saved>.*)\n"
)
REPORT_CALLS = re.compile(
    r"(?P<listed>.*?)(?: \(\+(?P<more>\d+) more\))?(?: \((?P<uncalled>\d+) of (?P<of>\d+) not called\))?"
)
REPORT_WIDTH = 160


def reports(stderr):
    """{pid: {name: calls}} from the --report blocks in a program's stderr: the names called (as patch() and
    is_patched() name them), most called first; checked for shape and arithmetic on the way."""
    found = {}
    for block in REPORT_BLOCK.finditer(stderr):
        assert all(len(line) <= REPORT_WIDTH for line in block[0].splitlines()), block[0]
        patched, left = int(block["patched"]), int(block["left"] or 0)
        assert patched + left == int(block["names"]) == len(NAMES)
        calls = REPORT_CALLS.fullmatch(block["calls"])
        listed = [] if calls["listed"] == "none" else re.findall(r"([\w.]+) (\d{1,3}(?:,\d{3})*)", calls["listed"])
        counts = {name: int(count.replace(",", "")) for name, count in listed}
        assert len(counts) == len(listed) and set(counts) <= set(NAMES)  # each name once
        assert list(counts.values()) == sorted(counts.values(), reverse=True) and 0 not in counts.values()
        if calls["listed"] != "none":  # what is shown and what is not add up to what is patched
            assert len(counts) + int(calls["more"] or 0) + int(calls["uncalled"] or 0) == patched
            assert calls["of"] in (None, block["patched"])
        assert ("per call" in block["saved"]) <= bool(counts)
        found[int(block["pid"])] = counts
    return found
