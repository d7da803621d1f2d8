"""What `compare` runs in the program: a pytest plugin, and a unittest (`-m fastcommon._recording`). Its first pytest or
unittest (not one it starts, nor an xdist worker) appends to COMPARE_RUN's file a JSON line per fact (runner, tests,
each one's start, end, outcomes), pytest from a copy of its cache; each process that imports grpc, whether patched."""

import atexit
import contextlib
import functools
import importlib
import json
import os
import shutil
import signal
import sys
from typing import Any

from . import _environment

_states = ""  # where this process records grpc's state (its file): set under compare as it imports grpc
_run: "Run | None" = None  # under pytest: this module is its plugin in both runs
# Each of unittest's TestResult.add* methods, and the outcome it records, in unittest's words.
UNITTEST_OUTCOMES = {"Success": "ok", "Failure": "FAIL", "Error": "ERROR", "Skip": "skipped",
                     "ExpectedFailure": "expected failure", "UnexpectedSuccess": "unexpected success"}  # fmt: skip


def append(path: str, **record: Any) -> None:
    """Append ``record`` to ``path``, a JSON line in one write: processes never interleave lines."""
    with contextlib.suppress(FileNotFoundError):  # a run's folder it outlived; os's: a fixture may mock.patch open()
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
        os.write(descriptor, (json.dumps(record) + "\n").encode())
        os.close(descriptor)


class Run:
    """This process's part in a run of compare's: where it records its tests; under pytest, the plugin that does."""

    config: Any = None  # pytest's

    def __init__(self, runner: str, given: str | None = None) -> None:
        self.given = given  # PYTEST_PLUGINS as the program was given it
        self.prefix = os.environ.pop(_environment.COMPARE_RUN, "")  # the processes this one starts record nothing
        if self.prefix and hasattr(signal, "SIGBREAK"):  # Windows: compare's Ctrl-Break as Ctrl-C, fixtures torn down
            signal.signal(signal.SIGBREAK, signal.default_int_handler)
        self.record(runner=runner)

    def record(self, **record: Any) -> None:
        if self.prefix:
            append(self.prefix + ".records", **record)

    def pytest_collection_finish(self, session: Any) -> None:
        self.record(collected=[item.nodeid for item in session.items])

    def collected_by_a_worker(self, node: Any, ids: list[str]) -> None:  # pytest-xdist's controller collects nothing
        self.record(collected=list(ids))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.record(started=nodeid)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.record(ended=[nodeid])

    def pytest_runtest_logreport(self, report: Any) -> None:
        category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if category:  # "" for what pytest does not count: a setup or teardown that passed
            self.record(test=report.nodeid, outcome=category)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed or report.skipped:  # skipped: a whole module (pytest.importorskip), as pytest counts it
            self.record(test=report.nodeid, outcome="error" if report.failed else "skipped")


def pytest_addoption(pluginmanager: Any) -> None:  # the first hook, called as pytest loads this plugin
    global _run
    given = os.environ.pop(_environment.COMPARE_PYTEST_PLUGINS, None)
    if os.environ.get("PYTEST_PLUGINS") == plugins_with_this(given):  # not set since, by the program
        del os.environ["PYTEST_PLUGINS"]  # the processes this pytest starts see it as the program was given it
        os.environ.update({} if given is None else {"PYTEST_PLUGINS": given})
    _run = Run("pytest", given)


def pytest_unconfigure(config: Any) -> None:  # a pytest.main() after this one, in this process, records too
    if _run is not None and _run.prefix and not hasattr(config, "workerinput"):
        os.environ.update(environment(_run.prefix, _run.given))


def pytest_cmdline_main(config: Any) -> None:  # before the cache plugin and pytest-xdist configure themselves
    if _run is None or not _run.prefix:
        return
    cache = ""
    if config.pluginmanager.has_plugin("cacheprovider"):  # this run's copy of the cache: the program's stays as it was
        cache = _run.prefix + ".cache"
        original = os.path.join(config.rootpath, os.path.expanduser(os.path.expandvars(config.getini("cache_dir"))))
        if os.path.isdir(original) and not os.path.exists(cache):
            shutil.copytree(original, cache, symlinks=True)
        if isinstance(getattr(config, "_inicache", None), dict):
            config._inicache["cache_dir"] = cache
    seed = getattr(config.option, "randomly_seed", None)  # before pytest-randomly draws one ("last": none cached)
    none_cached = cache and not os.path.isfile(os.path.join(cache, "v", "randomly_seed"))
    if seed == "default" or (seed == "last" and none_cached):
        config.option.randomly_seed = int(os.environ[_environment.COMPARE_SEED])


def pytest_configure(config: Any) -> None:
    if _run is not None and _run.prefix and not hasattr(config, "workerinput"):  # xdist's controller sees all
        _run.config = config
        config.pluginmanager.register(_run, "fastcommon-compare-recorder")
        if hasattr(config.hook, "pytest_xdist_node_collection_finished"):  # xdist installed: its hook, by name
            worker = type("XdistCollection", (), {"pytest_xdist_node_collection_finished": staticmethod(
                _run.collected_by_a_worker)})()  # fmt: skip
            config.pluginmanager.register(worker, "fastcommon-compare-xdist")


def grpc_imported() -> None:
    """Called by the bootstrap once this process has imported grpc: patch it (not in compare's stock runs), record."""
    global _states
    if not _environment.flag(_environment.COMPARE_STOCK):  # _launcher imports the gate: only where it patches
        importlib.import_module("fastcommon._launcher").grpc_imported()
    if _states := os.environ.get(_environment.COMPARE_PROCESSES, ""):
        grpc_state("import")
        atexit.register(grpc_state, "exit")


def grpc_state(at: str) -> None:
    """Under compare, record whether fastcommon has grpc patched in this process now (``at``: why now)."""
    patching = sys.modules.get("fastcommon._patching")  # not loaded: nothing patched grpc
    if states := _states or os.environ.get(_environment.COMPARE_PROCESSES, ""):  # -I, -E: grpc imported unseen
        append(states, pid=os.getpid(), argv=sys.orig_argv, at=at, patched=bool(patching and patching.is_patched()))


def plugins_with_this(given: str | None) -> str:
    """PYTEST_PLUGINS with this module added to what the program was given (pytest refuses an empty entry)."""
    return f"{given},{__name__}" if given else __name__


def environment(prefix: str, given: str | None) -> dict[str, str]:
    """What a process records into the run ``prefix`` names with, its pytest given PYTEST_PLUGINS as ``given``."""
    kept = {_environment.COMPARE_PYTEST_PLUGINS: given} if given is not None else {}
    return {_environment.COMPARE_RUN: prefix, "PYTEST_PLUGINS": plugins_with_this(given), **kept}


def unittest_main() -> None:
    """`python -m unittest` as compare runs it: each test's outcome recorded, in unittest's words."""
    import unittest

    recording = Run("unittest")

    def tests(suite: Any) -> list[Any]:
        return [test for each in suite for test in tests(each)] if isinstance(suite, unittest.TestSuite) else [suite]

    collected: list[str] = []  # the tests, in the order they run
    last: list[str] = []  # the test that started last (in whatever order the suite runs them), until the next
    done: set[str] = set()  # those that have ended

    class Result(unittest.TextTestResult):
        def startTest(self, test: Any) -> None:  # the one before it has ended, its class's and module's teardowns too
            self.ended(last)
            last[:] = [test.id()]
            recording.record(started=test.id())
            super().startTest(test)

        def stopTestRun(self) -> None:  # stopped early (-f): those that never started, never ended
            self.ended(last if self.shouldStop else [*last, *collected])
            super().stopTestRun()

        def ended(self, tests: list[str]) -> None:
            recording.record(ended=list(dict.fromkeys(test for test in tests if test not in done)))
            done.update(tests)

        def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
            super().addSubTest(test, subtest, err)
            failed = err is not None and issubclass(err[0], test.failureException)
            recording.record(test=subtest.id(), outcome="ok" if err is None else "FAIL" if failed else "ERROR")

        def add_and_record(self, add: str, outcome: str, test: Any, *args: Any) -> None:  # each of UNITTEST_OUTCOMES
            getattr(super(), add)(test, *args)
            recording.record(test=test.id(), outcome=outcome)

    for add, outcome in UNITTEST_OUTCOMES.items():
        setattr(Result, f"add{add}", functools.partialmethod(Result.add_and_record, f"add{add}", outcome))

    class Runner(unittest.TextTestRunner):
        resultclass = Result  # type: ignore[assignment]  # typeshed's Callable, a class in unittest

        def run(self, test: Any) -> Any:  # the suite unittest's command line made
            collected[:] = [each.id() for each in tests(test)]
            recording.record(collected=collected)
            return super().run(test)

    sys.argv[0] = "python -m unittest"  # as unittest's own __main__ says it in its usage
    unittest.main(module=None, testRunner=Runner)


if __name__ == "__main__":
    unittest_main()
