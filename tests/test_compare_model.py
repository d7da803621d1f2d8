"""`compare` against a model. Hypothesis plans small suites whose behaviour is known: each test passes, fails, skips,
xfails or errors in its setup, call or teardown, crashes (SIGSEGV) or exits (os._exit), when a condition holds (always,
only patched, only after an earlier test's call, on its Nth execution: a counter file); it may call fastcommon.patch()
or unpatch() and leave it so; the module may too, or exit at import or at exit; under pytest (-x, pytest-randomly's
order) or unittest (-f). The model runs the plan as compare runs the program (stock and patched in either order, the
whole program again where tests differ) and says the verdict from docs/adoption.md's invariants; compare, run on the
real suite, must say the same kind with the same status. FASTCOMMON_COMPARE_MODEL_EXAMPLES suites (CI: 300, which
must reach every verdict a suite can give; docs/development.md has the long run's command)."""

import collections
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import tempfile
import zlib

import pytest
from conftest import NEEDS_GRPCIO
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

from fastcommon import __main__ as command_line

EXAMPLES = int(os.environ.get("FASTCOMMON_COMPARE_MODEL_EXAMPLES", "6"))
KINDS = {"same", "different", "incomplete", "not as named", "not patched", "no tests"}  # what a suite can be judged
STATUSES = {"same": 0, "different": 1, "no tests": 5, "not patched": 6, "incomplete": 7, "not as named": 8}
RANDOMLY = importlib.util.find_spec("pytest_randomly") is not None
POSIX = os.name == "posix"
ENDED_EARLY, NOT_RUN = "process ended", "not run"  # outcomes in compare's words: a crash ended the test; never ran
# (what, where): where it happens when the test's condition holds; otherwise the test passes. A fifth crash or exit.
ACTIONS = 2 * [("pass", "call")] * 3 + 2 * [("fail", "call"), ("error", "call"), ("skip", "call"), ("xfail", "call"),
           ("error", "setup"), ("error", "teardown")] + [("exit", "setup"), ("exit", "call"), ("exit", "teardown")] + [
           ("segv", "call"), ("segv", "teardown")] * POSIX  # fmt: skip
UNITTEST_ONLY = [("exit", "tearDownClass"), ("exit", "subtest")]
QUICKER = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # pytest without the plugins installed here: a second less a run
WORDS = {  # each runner's words for an outcome
    "pytest": {"pass": "passed", "fail": "failed", "error": "failed", "skip": "skipped", "xfailed": "xfailed",
               "xpassed": "xpassed", "setup error": "error", "teardown error": "+error"},
    "unittest": {"pass": "ok", "fail": "FAIL", "error": "ERROR", "skip": "skipped", "xfailed": "expected failure",
                 "xpassed": "unexpected success", "setup error": "ERROR", "teardown error": "ERROR"},
}  # fmt: skip
FAILING = {"pytest": ("failed", "error"), "unittest": ("FAIL", "ERROR", "unexpected success")}  # what -x, -f stop on


@dataclasses.dataclass(frozen=True)
class Planned:
    action: tuple[str, str]
    when: str  # "always", "patched", "after" (test ``n``'s call ran before, in this process), "execution" (its ``n``th)
    n: int = 0
    calls: str | None = None  # "patch" or "unpatch", in its call, before its action, never undone


@dataclasses.dataclass(frozen=True)
class Suite:
    runner: str
    grpc: bool  # the module imports grpc (and fastcommon); else neither
    tests: tuple[Planned, ...]
    at_import: str | None  # "patch", "unpatch", "exit", "exit patched", "exit at exit" (atexit, os._exit)
    stop_first: bool  # -x, -f
    shuffled: bool  # pytest-randomly's order
    patched_first: bool
    reruns: int


@st.composite
def suites(draw):
    runner = draw(st.sampled_from(["pytest", "unittest"]))
    grpc = draw(st.sampled_from([True] * 6 + [False]))
    actions = ACTIONS + UNITTEST_ONLY * (runner == "unittest")
    tests = []
    for i in range(draw(st.sampled_from([1, 2, 3, 2, 4, 0]))):
        whens = ["always", "execution", *["patched"] * grpc, *["after"] * (i > 0)]
        when = draw(st.sampled_from(whens))
        n = draw(st.integers(0, i - 1)) if when == "after" else draw(st.integers(1, 4)) if when == "execution" else 0
        calls = draw(st.sampled_from([None] * 8 + ["patch", "unpatch"])) if grpc else None
        tests.append(Planned(draw(st.sampled_from(actions)), when, n, calls))
    imports = [None] * 10 + ["exit", "exit at exit"] + ["patch", "unpatch", "exit patched"] * grpc
    at_import = draw(st.sampled_from(imports))
    shuffled = draw(st.booleans()) if runner == "pytest" and RANDOMLY else False
    return Suite(runner, grpc, tuple(tests), at_import, draw(st.sampled_from([False] * 3 + [True])), shuffled,
                 draw(st.booleans()), draw(st.sampled_from([1, 1, 0])))  # fmt: skip


# ------------------------------------------------------------------ the suite, written


def condition(test, i):
    return {"always": "True", "patched": "patched()", "after": f"{test.n} in CALLED",
            "execution": f"executions({i}) == {test.n}"}[test.when]  # fmt: skip


def doing(test, where, indent, runner):
    """The lines that do the test's action at ``where`` when its condition held (``fired``)."""
    what, at = test.action
    if at != where or what in ("pass", "xfail"):
        return []
    under_pytest = runner == "pytest"
    body = {"fail": "assert False, 'planned'" if under_pytest else "self.fail('planned')", "exit": "os._exit(3)",
            "error": "raise RuntimeError('planned')", "skip": "pytest.skip('planned')" if under_pytest else
            "self.skipTest('planned')", "segv": "os.kill(os.getpid(), signal.SIGSEGV)"}[what]  # fmt: skip
    return [f"{indent}if fired:", f"{indent}    {body}"]


def source(suite):
    lines = ["import atexit, os, signal, sys, unittest", "import pytest"]
    lines += ["import grpc._common, fastcommon"] * suite.grpc
    lines += [
        "CALLED, FIRED = set(), {}",
        "def executions(i):",
        "    name = f'count_{i}'",
        "    count = int(open(name).read()) + 1 if os.path.exists(name) else 1",
        "    open(name, 'w').write(str(count))",
        "    return count",
        "def patched():",
        "    return grpc._common.encode.__module__ != 'grpc._common'",
    ]
    lines += {None: [], "patch": ["fastcommon.patch()"], "unpatch": ["fastcommon.unpatch()"], "exit": ["os._exit(3)"],
              "exit patched": ["if patched():", "    os._exit(3)"], "exit at exit": ["atexit.register(os._exit, 3)"],
              }[suite.at_import]  # fmt: skip
    for i, test in enumerate(suite.tests):
        calls = [f"fastcommon.{test.calls}()"] if test.calls else []
        xfail = test.action[0] == "xfail"
        if suite.runner == "pytest":
            lines += ["@pytest.fixture", f"def fired_{i}():", f"    fired = {condition(test, i)}"]
            lines += [*doing(test, "setup", "    ", "pytest"), "    yield fired"]
            lines += doing(test, "teardown", "    ", "pytest")
            lines += ["@pytest.mark.xfail(strict=False)"] * xfail + [f"def test_{i}(fired_{i}):"]
            lines += [f"    fired = fired_{i}", f"    CALLED.add({i})", *(f"    {call}" for call in calls)]
            lines += doing(test, "call", "    ", "pytest") + ["    assert not fired"] * xfail
        else:
            lines += [f"class T{i}(unittest.TestCase):", "    def setUp(self):"]
            lines += [f"        fired = FIRED[{i}] = {condition(test, i)}"]
            lines += doing(test, "setup", "        ", "unittest")
            lines += ["    def tearDown(self):", f"        fired = FIRED[{i}]", "        pass"]
            lines += doing(test, "teardown", "        ", "unittest")
            lines += ["    @classmethod", "    def tearDownClass(cls):", f"        fired = FIRED.get({i})"]
            lines += ["        pass", *doing(test, "tearDownClass", "        ", "unittest")]
            lines += ["    @unittest.expectedFailure"] * xfail + [f"    def test_{i}(self):"]
            lines += [f"        fired = FIRED[{i}]", f"        CALLED.add({i})", *(f"        {call}" for call in calls)]
            lines += doing(test, "call", "        ", "unittest") + ["        self.assertFalse(fired)"] * xfail
            if test.action == ("exit", "subtest"):
                lines += ["        for n in range(2):", "            with self.subTest(n=n):"]
                lines += ["                if n and fired:", "                    os._exit(3)"]
    return "\n".join(lines) + "\n"


def program(suite):
    if suite.runner == "unittest":
        return ["-m", "unittest", *["-f"] * suite.stop_first, "test_suite"]
    return ["-m", "pytest", "-q", "-p", "no:cacheprovider", *["-p", "pytest_randomly"] * suite.shuffled,
            *["-x"] * suite.stop_first, "test_suite.py"]  # fmt: skip


# ------------------------------------------------------------------ the model


@dataclasses.dataclass
class Run:
    patched: bool
    tests: list[str] = dataclasses.field(default_factory=list)  # collected, in order
    started: list[str] = dataclasses.field(default_factory=list)
    ended: set[str] = dataclasses.field(default_factory=set)
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    imported: bool = False  # a process of it imported grpc
    left_patched: bool = False  # grpc's state as its process ended

    def complete(self):
        return set(self.tests) <= self.ended


def node_id(suite, i):
    return f"test_suite.py::test_{i}" if suite.runner == "pytest" else f"test_suite.T{i}.test_{i}"


def order(suite, seed):
    """The tests' order: as written (unittest sorts T0..T4 so), or pytest-randomly's: by crc32 of seed::node id."""
    written = range(len(suite.tests))
    if not suite.shuffled:
        return list(written)
    return sorted(written, key=lambda i: zlib.crc32(f"{seed}::{node_id(suite, i)}".encode()))


def simulate(suite, patched, executions, seed):
    """One run of the suite as the plan says it goes; ``executions`` counts each test's runs across runs."""
    words, run = WORDS[suite.runner], Run(patched, imported=suite.grpc)
    state = patched and suite.grpc
    state = {"patch": True, "unpatch": False}.get(suite.at_import, state)
    run.left_patched = state
    if suite.at_import == "exit" or (suite.at_import == "exit patched" and state):
        return run
    run.tests = [node_id(suite, i) for i in order(suite, seed)]
    called = set()
    for i in order(suite, seed):
        test, name = suite.tests[i], node_id(suite, i)
        run.started.append(name)
        if test.when == "execution":
            executions[i] += 1
        fired = {"always": True, "patched": state, "after": test.n in called,
                 "execution": executions[i] == test.n}[test.when] and test.action[0] != "pass"  # fmt: skip
        what, where = test.action if fired else ("pass", "call")
        if what in ("exit", "segv") and where == "setup":
            run.outcomes[name] = ENDED_EARLY
            return run
        if (what, where) == ("error", "setup"):
            outcome = words["setup error"]
        else:
            called.add(i)
            if test.calls:
                state = run.left_patched = test.calls == "patch"
            if what in ("exit", "segv") and where in ("call", "teardown", "tearDownClass", "subtest"):
                if where == "subtest":
                    run.outcomes[f"{name} (n=0)"] = "ok"
                elif where == "teardown" or where == "tearDownClass":
                    run.outcomes[name] = words["pass"]  # recorded before the crash; compare then says it ended early
                run.outcomes[name] = ENDED_EARLY
                return run
            if test.action[0] == "xfail":
                outcome = words["xfailed" if fired else "xpassed"]
            else:
                outcome = words[what if where == "call" else "pass"]
            if (what, where) == ("error", "teardown"):
                outcome = outcome + words["teardown error"] if suite.runner == "pytest" else words["teardown error"]
            if test.action == ("exit", "subtest"):
                run.outcomes.update({f"{name} (n=0)": "ok", f"{name} (n=1)": "ok"})
        run.outcomes[name] = outcome
        run.ended.add(name)
        if suite.stop_first and any(word in outcome.split("+") for word in FAILING[suite.runner]):
            break
    return run


def model(suite, seed):
    """The verdict compare owes the suite: its kind."""
    executions = [0] * len(suite.tests)
    ways = (True, False) if suite.patched_first else (False, True)
    runs = [simulate(suite, way, executions, seed) for way in ways]
    first, second = runs
    stock, patched = (second, first) if suite.patched_first else (first, second)
    if not stock.outcomes and not patched.outcomes:
        return "no tests"
    tests = list(dict.fromkeys(stock.tests + stock.started + patched.tests + patched.started))
    if any(test not in stock.ended or test not in patched.ended for test in tests):
        return "incomplete"
    if kind := not_as_named(runs):
        return kind
    names = sorted(stock.outcomes.keys() | patched.outcomes.keys())
    outcomes = {name: ([stock.outcomes.get(name, NOT_RUN)], [patched.outcomes.get(name, NOT_RUN)]) for name in names}
    differing = [name for name, (before, after) in outcomes.items() if before != after]
    for _ in range(suite.reruns if differing else 0):
        for way in ways:
            runs.append(rerun := simulate(suite, way, executions, seed))
            for name in differing:
                if name in rerun.outcomes or (not set(rerun.started) - rerun.ended and rerun.complete()):
                    outcomes[name][way].append(rerun.outcomes.get(name, NOT_RUN))
    if kind := not_as_named(runs):
        return kind
    flaky = [name for name in differing if any({outcomes[name][0][0], outcomes[name][1][0]} <= set(way)
                                               for way in outcomes[name])]  # fmt: skip
    return "different" if set(differing) - set(flaky) else "same"


def not_as_named(runs):
    for run in runs:
        if run.patched and not run.imported:
            return "not patched"
        if run.imported and run.left_patched != run.patched:
            return "not as named"
    return None


# ------------------------------------------------------------------ compare, in this process, on the real suite


def compared(suite, folder):
    """compare's verdict on the suite written in ``folder``: (kind, status, its lines, the seed it pinned)."""
    verdict = os.path.join(folder, "verdict.json")
    args = ["compare", "--json", verdict, "--reruns", str(suite.reruns), "--timeout", "120",
            *["--patched-first"] * suite.patched_first, *program(suite)]  # fmt: skip
    here, tmp, environ = os.getcwd(), tempfile.tempdir, dict(os.environ)
    os.environ |= QUICKER | {"ASAN_OPTIONS": f"{environ.get('ASAN_OPTIONS', '')}:handle_segv=0".lstrip(":")}  # ASan
    try:  # (.ci/hardening): a SIGSEGV stays the kernel's
        os.chdir(folder)
        tempfile.tempdir = folder  # what compare keeps goes with the folder
        with (
            contextlib.redirect_stdout(io.StringIO()) as out,
            contextlib.redirect_stderr(io.StringIO()) as err,
            pytest.raises(SystemExit) as exit,
        ):
            command_line.main(args)
    finally:
        os.chdir(here)
        tempfile.tempdir = tmp
        os.environ.clear()
        os.environ.update(environ)
    with open(verdict) as file:
        written = json.load(file)
    seed = int(written["pinned"]["--randomly-seed"])
    return written["verdict"], exit.value.code, out.getvalue() + err.getvalue(), seed


def test_compare_says_what_the_model_says_on_planned_suites():
    hit = collections.Counter()

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(suite=suites())
    def agrees(suite):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "test_suite.py"), "w") as file:
                file.write(source(suite))
            kind, status, said, seed = compared(suite, folder)
            expected = model(suite, seed)
            assert (kind, status) == (expected, STATUSES[expected]), f"\n{source(suite)}\n{said}"
        hit[kind] += 1
        event(f"verdict: {kind}")

    agrees()
    print(f"compare's verdicts on {EXAMPLES:,} planned suites: {dict(hit)}")
    if EXAMPLES >= 300:  # CI's: every verdict a suite can give
        assert set(hit) == KINDS, f"verdicts never reached: {KINDS - set(hit)}"
