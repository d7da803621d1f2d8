"""`python -m fastcommon compare`: a program run stock and patched, and the verdict a user stakes a deploy on. Each
wrong answer a user found is a test here: "the same" where nothing was compared, unittest by its exit status only, a
flaky test read as a difference, the first run steering the second, processes left running when compare is stopped,
differences nobody can see, a crash read as "the same"."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import NEEDS_GRPCIO

pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers

from fastcommon import __main__ as command_line

POSIX = pytest.mark.skipif(sys.platform == "win32", reason="process groups and POSIX signals")
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]  # the order as written
ONCE = ["--reruns", "1"]  # where telling flaky from different is not the point: one run again each way
IS_PATCHED = "grpc._common.encode.__module__ != 'grpc._common'"  # true in the patched run only
SEGFAULTED = "-11 (SIGSEGV)" if os.name == "posix" else "11"  # os.kill's status: on Windows, TerminateProcess's
KEPT = re.compile(r"^the output of every run is kept in (.+)$", re.MULTILINE)
# Under AddressSanitizer (.ci/hardening) a SIGSEGV stays the kernel's: ASan would report it and abort instead.
ASAN = {"ASAN_OPTIONS": f"{os.environ.get('ASAN_OPTIONS', '')}:handle_segv=0".lstrip(":")}

# A suite with one test that passes stock and fails patched, and the outcomes pytest counts besides.
PLANTED = f"""
    import grpc._common
    import pytest


    def test_encode_is_grpcs():
        assert not {IS_PATCHED}


    @pytest.mark.parametrize("n", [1, 2])
    def test_passes(n):
        assert n


    @pytest.mark.xfail(reason="planted")
    def test_xfail():
        assert False


    @pytest.mark.skip(reason="planted")
    def test_skip():
        pass


    @pytest.fixture
    def broken_teardown():
        yield
        raise RuntimeError("teardown")


    def test_teardown_error(broken_teardown):
        pass
"""


@pytest.fixture
def folder(tmp_path):
    """Where the test's programs are, with a temporary folder of its own for compare's (TMPDIR)."""
    (tmp_path / "tmp").mkdir()
    return tmp_path


AS_A_WHOLE = "fastcommon compare: the same as a whole, stock and patched (no test seen one by one): "


def write(folder, name, source):
    (folder / name).write_text(textwrap.dedent(source))


def compare(*args, cwd, env=None, **kwargs):
    environ = {**(env or {}), "TMPDIR": str(cwd / "tmp")}
    return helpers.python("-m", "fastcommon", "compare", *args, cwd=cwd, env=environ, **kwargs)


def kept(result):
    """The folder compare kept, with every run's output."""
    return KEPT.search(result.stdout).group(1)


def compares_folders(folder):
    """The folders compare left in the temporary folder (pytest's own, made by the program, aside)."""
    return [name for name in os.listdir(folder / "tmp") if name.startswith("fastcommon-compare-")]


def alive(pid):
    """Whether process ``pid`` runs (a zombie that no one reaps does not): Linux's /proc, else POSIX's ps (macOS;
    Debian's chroots have /proc and no ps)."""
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False).stdout
    return state.strip() != "" and not state.strip().startswith("Z")


# ------------------------------------------------------------------ what differs, test by test


def test_a_planted_difference_is_named_test_by_test_and_every_runs_output_kept(folder):
    write(folder, "test_planted.py", PLANTED)
    result = compare("--json", "verdict.json", *ONCE, *PYTEST, "test_planted.py", cwd=folder)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == [
        "fastcommon compare: stock and patched differ in 1 of 6 tests",
        "tests, stock -> patched (then the whole program 1 time more each way):",
        "  test_planted.py::test_encode_is_grpcs: passed -> failed, every time",
        f"the output of every run is kept in {kept(result)}",  # both exit 1: the teardown error
    ]
    assert os.path.dirname(kept(result)) == str(folder / "tmp")
    for name in ("stock-run", "patched-run"):
        with open(os.path.join(kept(result), f"{name}.stdout")) as stdout:
            assert "1 error" in stdout.read()  # the program's own output, not the terminal's
    with open(os.path.join(kept(result), "patched-rerun-1.stdout")) as stdout:
        assert "1 failed, 3 passed, 1 skipped, 1 xfailed, 1 error" in stdout.read()  # the whole program again
    written = json.loads((folder / "verdict.json").read_text())  # --json: the verdict, the runs, every test's outcomes
    assert (written["verdict"], written["status"], written["lines"]) == ("different", 1, result.stdout.splitlines())
    assert [run["name"] for run in written["runs"]] == ["stock run", "patched run", "stock rerun 1", "patched rerun 1"]
    assert all(run["seconds"] > 0 and run["status"] == 1 and not run["signal"] for run in written["runs"])
    assert written["tests"]["test_planted.py::test_encode_is_grpcs"] == {
        "stock": ["passed", "passed"],
        "patched": ["failed", "failed"],
    }
    assert written["tests"]["test_planted.py::test_teardown_error"] == {"stock": ["passed+error"], "patched": [
        "passed+error"]}  # fmt: skip


def test_the_same_suite_is_one_line_counted_as_pytest_counts_it_and_nothing_is_kept(folder):
    write(folder, "test_planted.py", PLANTED)
    same = ["-k", "not encode"]
    result = compare(*PYTEST, "test_planted.py", *same, cwd=folder)
    plain = helpers.python(*PYTEST, "test_planted.py", *same, cwd=folder)
    counts = re.search(r"^(\d.*) in [\d.]+s$", plain.stdout, re.MULTILINE).group(1)
    assert counts == "3 passed, 1 skipped, 1 deselected, 1 xfailed, 1 error"  # the teardown error, counted apart
    assert (result.returncode, result.stdout) == (
        0,
        "fastcommon compare: the same, test by test, stock and patched: 3 passed, 1 skipped, 1 xfailed, 1 error"
        " (exit status 1)\n",
    ), result.stderr
    assert compares_folders(folder) == []


def test_a_collection_error_leaves_a_run_incomplete_and_is_listed_with_the_tests_not_run(folder):
    write(folder, "test_module.py", f"import grpc._common\nassert not {IS_PATCHED}\n\ndef test_runs():\n    pass\n")
    result = compare("--reruns", "0", *PYTEST, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[:5]) == (7, [
        "fastcommon compare: incomplete (the patched run alone): 1 of 1 test did not end in both runs, the first "
        "test_module.py::test_runs",
        "tests, stock -> patched:",
        "  test_module.py: not run -> error",
        "  test_module.py::test_runs: passed -> not run",
        "the patched run ended, exit status 2; 1 test never started",
    ]), result.stderr  # fmt: skip


def test_many_differences_show_50_and_no_line_is_over_160_characters_but_a_longer_node_id(folder):
    write(
        folder,
        "test_many.py",
        f"""
        import grpc._common
        import pytest

        @pytest.mark.parametrize("n", range(60), ids=lambda n: f"{{n:02}}" + "x" * (150 if n == 0 else 0))
        def test_module(n):
            assert not {IS_PATCHED}
    """,
    )
    result = compare("--reruns", "0", *PYTEST, cwd=folder)
    lines = result.stdout.splitlines()
    assert lines[0] == "fastcommon compare: stock and patched differ in 60 of 60 tests and the exit status"
    assert lines[2:5] == [f"  test_many.py::test_module[00{'x' * 150}]:", "    passed -> failed", (
        "  test_many.py::test_module[01]: passed -> failed")]  # fmt: skip
    assert lines[52:54] == ["  test_many.py::test_module[49]: passed -> failed", "  ... and 10 more"]
    assert [line for line in lines if len(line) > 160] == [f"  test_many.py::test_module[00{'x' * 150}]:"]


UNITTESTS = f"""
    import unittest
    import grpc._common


    class Planted(unittest.TestCase):
        def test_ok(self):
            pass

        def test_fails_in_both(self):
            self.fail("both")

        def test_encode_is_grpcs(self):
            self.assertFalse({IS_PATCHED})

        @unittest.skip("planted")
        def test_skip(self):
            pass

        @unittest.expectedFailure
        def test_expected_failure(self):
            self.fail()

        @unittest.expectedFailure
        def test_unexpected_success(self):
            pass

        def test_subtests(self):
            for i in range(2):
                with self.subTest(i=i):
                    self.assertEqual(i, 0)

        def test_error(self):
            raise RuntimeError
"""


def test_unittest_is_compared_test_by_test_in_unittests_words(folder):
    write(folder, "test_unit.py", UNITTESTS)
    result = compare("--reruns", "0", "-m", "unittest", "test_unit", cwd=folder)
    assert result.stdout.splitlines()[:3] == [
        "fastcommon compare: stock and patched differ in 1 of 9 tests",
        "tests, stock -> patched:",
        "  test_unit.Planted.test_encode_is_grpcs: ok -> FAIL",
    ], result.stdout + result.stderr
    assert result.returncode == 1
    same = compare(
        "--json",
        "verdict.json",
        "--reruns",
        "0",
        "-m",
        "unittest",
        "-v",
        "test_unit",
        "-k",
        "*.test_[eosu]*",
        cwd=folder,
    )
    assert same.returncode == 1  # test_encode_is_grpcs is among them
    outcomes = {
        test: each["stock"] for test, each in json.loads((folder / "verdict.json").read_text())["tests"].items()
    }
    assert outcomes == {
        "test_unit.Planted.test_encode_is_grpcs": ["ok"],
        "test_unit.Planted.test_error": ["ERROR"],
        "test_unit.Planted.test_expected_failure": ["expected failure"],
        "test_unit.Planted.test_ok": ["ok"],
        "test_unit.Planted.test_skip": ["skipped"],
        "test_unit.Planted.test_subtests (i=1)": ["FAIL"],
        "test_unit.Planted.test_subtests (i=0)": ["ok"],
        "test_unit.Planted.test_unexpected_success": ["unexpected success"],
    }
    (folder / "tests").mkdir()
    os.rename(folder / "test_unit.py", folder / "tests" / "test_unit.py")
    discovered = compare("-m", "unittest", "discover", "-s", "tests", "-k", "ok", cwd=folder)
    assert (discovered.returncode, discovered.stdout) == (
        0,
        "fastcommon compare: the same, test by test, stock and patched: 1 ok (exit status 0)\n",
    ), discovered.stderr


# ------------------------------------------------------------------ "the same" only after a comparison


def test_nothing_compared_is_said_with_a_status_of_its_own_and_the_output_kept(folder):
    write(folder, "test_planted.py", PLANTED)
    (folder / "empty").mkdir()
    cases = [  # (compare's arguments, its exit status, its first line, a line of the program's stderr it quotes)
        (["nope.py"], 3, "the program could not start (stock run, exit status 2)", "can't open file"),
        (["-m", "no_such_module"], 3, "the program could not start (stock run, exit status 1)", "No module named"),
        ([*PYTEST, "test_planted.py", "--report"], 4, "pytest refused its arguments (stock run, exit status 4)",
         "unrecognized arguments: --report"),
        ([*PYTEST, "nope.py"], 4, "pytest refused its arguments (stock run, exit status 4)", "not found: nope.py"),
        (["-m", "unittest", "--nope"], 4, "unittest refused its arguments (stock run, exit status 2)",
         "unrecognized arguments: --nope"),
        ([*PYTEST, "empty"], 5, "no test ran (exit status: stock run 5, patched run 5)", None),
        ([*PYTEST, "--co", "test_planted.py"], 5, "no test ran (exit status: stock run 0, patched run 0)", None),
        (["-c", "print('no grpc')"], 6, "no process of the patched run imported grpc, so fastcommon patched nothing"
         " (patched run, exit status 0)", None),
    ]  # fmt: skip
    for args, status, first, quoted in cases:
        result = compare(*args, cwd=folder)
        lines = result.stdout.splitlines()
        assert (result.returncode, lines[0]) == (status, f"fastcommon compare: nothing compared: {first}"), args
        assert os.path.isdir(kept(result))
        assert quoted is None or any(quoted in line for line in lines[1:-1]), (args, lines)
    stock_only = compare("nope.py", cwd=folder)
    assert " run: " in stock_only.stderr and "patched run" not in stock_only.stderr  # no second run of nothing


def test_a_program_that_patches_grpc_itself_is_not_compared_as_if_its_first_run_were_stock(folder):
    write(folder, "conftest.py", "import fastcommon\nfastcommon.patch()  # adopted the documented way\n")
    write(folder, "test_adopted.py", "import fastcommon\n\ndef test_stock():\n    assert not fastcommon.is_patched()\n")
    for first in ([], ["--patched-first"]):  # the verdict quotes the stock run, whichever ran first
        result = compare(*first, *PYTEST, "test_adopted.py", cwd=folder)
        first_line, argv = re.sub(r"pid \d+", "pid N", result.stdout).splitlines()[:2]
        assert (result.returncode, first_line) == (8, "fastcommon compare: nothing compared: a process of the stock "
            "run left grpc patched, pid N, at its exit"), result.stderr  # fmt: skip
        assert argv.endswith(" -m pytest -q -p no:cacheprovider -p no:randomly test_adopted.py")


@POSIX
def test_a_closed_stderr_neither_ends_compare_nor_leaves_its_run(folder):
    """compare ... 2>&1 | head -1: once head has gone, compare's progress lines have nowhere to go; it goes on."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        command, environ = helpers._child(
            ["-m", "fastcommon", "compare", "-c", "import grpc"], {"TMPDIR": str(folder / "tmp")}
        )
        result = subprocess.run(command, cwd=folder, env=environ, stdout=subprocess.PIPE, stderr=writer, text=True,
                                timeout=300)  # fmt: skip
    finally:
        os.close(writer)
    assert (result.returncode, result.stdout) == (
        0,
        AS_A_WHOLE + "exit status 0\n",
    )
    assert compares_folders(folder) == []


def test_a_crash_names_the_test_it_ended_in_and_what_never_ran(folder):
    write(
        folder,
        "test_crash.py",
        f"""
        import os, signal, grpc._common

        def test_before():
            pass

        def test_exits():
            os._exit(3)

        def test_after():
            pass

        def test_segfaults_patched():
            if {IS_PATCHED}:
                os.kill(os.getpid(), signal.SIGSEGV)
    """,
    )
    both = compare(*PYTEST, "test_crash.py", "-k", "not segfaults", cwd=folder)
    assert (both.returncode, both.stdout.splitlines()[:3]) == (7, [
        "fastcommon compare: incomplete (both runs): 2 of 3 tests did not end in both runs, the first "
        "test_crash.py::test_exits",
        "the stock run ended during test_crash.py::test_exits, exit status 3; 1 test never started",
        "the patched run ended during test_crash.py::test_exits, exit status 3; 1 test never started",
    ]), both.stderr  # fmt: skip
    patched = compare(*ONCE, *PYTEST, "test_crash.py", "-k", "segfaults", cwd=folder, env=ASAN)
    assert (patched.returncode, patched.stdout.splitlines()[:4]) == (7, [
        "fastcommon compare: incomplete (the patched run alone): 1 of 1 test did not end in both runs, the first "
        "test_crash.py::test_segfaults_patched",
        "tests, stock -> patched:",
        f"  test_crash.py::test_segfaults_patched: passed -> process ended: exit status {SEGFAULTED}",
        f"the patched run ended during test_crash.py::test_segfaults_patched, exit status {SEGFAULTED}",
    ]), patched.stderr  # fmt: skip


# ------------------------------------------------------------------ flaky apart from different


COUNTED = f"""
    import os, grpc._common

    def executions(name):
        count = int(open(name).read()) + 1 if os.path.exists(name) else 1
        open(name, "w").write(str(count))
        return count

    def test_flaky():  # fails on its 2nd and 3rd runs
        assert executions("flaky.count") not in (2, 3)

    def test_first_only():  # passes on its 1st run only
        assert executions("first.count") == 1

    def test_patched():
        assert not {IS_PATCHED}

    def test_steady():
        pass
"""


def test_a_test_flaky_either_way_is_told_apart_from_one_that_differs_every_time(folder):
    write(folder, "test_counted.py", COUNTED)
    result = compare(*ONCE, *PYTEST, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[:7]) == (1, [
        "fastcommon compare: stock and patched differ in 1 of 4 tests and the exit status",
        "tests, stock -> patched (then the whole program 1 time more each way):",
        "  test_counted.py::test_patched: passed -> failed, every time",
        "flaky: one way's runs gave both outcomes (not a difference):",
        "  test_counted.py::test_first_only: stock passed, failed; patched failed, failed",
        "  test_counted.py::test_flaky: stock passed, failed; patched failed, passed",
        "exit status: stock 0, patched 1",
    ]), result.stderr  # fmt: skip
    for count in folder.glob("*.count"):
        count.unlink()
    unchecked = compare("--reruns", "0", *PYTEST, "-k", "not patched", cwd=folder)
    assert unchecked.returncode == 1 and "test_flaky: passed -> failed" in unchecked.stdout


# ------------------------------------------------------------------ the invariants (each case failed on main 6f74397)


def test_a_difference_that_needs_an_earlier_tests_state_is_not_read_as_flaky(folder):
    """Run again alone, the test fails both ways; in its context (the tests before it), it differs every time."""
    state = f"import grpc._common\nstate = []\n\ndef test_sets_up():\n    state.append(1)\n\ndef test_needs_it():\n" \
        f"    assert state and not {IS_PATCHED}\n"  # fmt: skip
    write(folder, "test_state.py", state)
    result = compare(*ONCE, *PYTEST, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[2]) == (
        1, "  test_state.py::test_needs_it: passed -> failed, every time"), result.stdout  # fmt: skip


CRASHED = "import os, signal, grpc, pytest, unittest\n"  # each a way both runs end after a test's call, and its runner
CRASHES_AFTER_A_CALL = {
    "a fixture's teardown": (PYTEST, "@pytest.fixture\ndef crashes():\n    yield\n    os._exit(3)\n\n"
                             "def test_ends(crashes):\n    pass\n\ndef test_after():\n    pass\n"),
    "a module fixture's teardown, SIGSEGV": (PYTEST, "@pytest.fixture(scope='module')\ndef crashes():\n    yield\n"
                                             "    os.kill(os.getpid(), signal.SIGSEGV)\n\ndef test_ends(crashes):\n"
                                             "    pass\n"),
    "tearDownClass": (["-m", "unittest"], "class Crashes(unittest.TestCase):\n    @classmethod\n"
                      "    def tearDownClass(cls):\n        os._exit(3)\n\n    def test_ends(self):\n        pass\n"),
    "after a subtest": (["-m", "unittest"], "class Crashes(unittest.TestCase):\n    def test_subtests(self):\n"
                        "        for i in range(2):\n            with self.subTest(i=i):\n                if i:\n"
                        "                    os._exit(3)\n"),
}  # fmt: skip


@pytest.mark.parametrize("case", CRASHES_AFTER_A_CALL)
def test_a_crash_after_a_tests_call_leaves_both_runs_incomplete(folder, case):
    if "SIGSEGV" in case and sys.platform == "win32":
        pytest.skip("POSIX signals")
    runner, source = CRASHES_AFTER_A_CALL[case]
    write(folder, "test_crash.py", CRASHED + source)
    result = compare(*runner, "test_crash" + ".py" * (runner == PYTEST), cwd=folder, env=ASAN)
    tests = "2 of 2 tests" if "test_after" in source else "1 of 1 test"
    assert (result.returncode, result.stdout.splitlines()[0].split(", the first ")[0]) == (
        7, f"fastcommon compare: incomplete (both runs): {tests} did not end in both runs"), result.stdout  # fmt: skip


@pytest.mark.parametrize("stop", [["-x"], ["--maxfail", "1"], ["-f"]], ids=["-x", "--maxfail", "unittest -f"])
def test_tests_run_in_neither_run_leave_both_incomplete(folder, stop):
    write(folder, "test_stops.py", "import unittest, grpc\n\nclass T(unittest.TestCase):\n    def test_1_fails(self):\n"
          "        self.fail()\n\n    def test_2_never(self):\n        pass\n")  # fmt: skip
    runner = ["-m", "unittest", *stop, "test_stops"] if stop == ["-f"] else [*PYTEST, *stop, "test_stops.py"]
    result = compare(*runner, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[:3]) == (7, [
        "fastcommon compare: incomplete (both runs): 1 of 2 tests did not end in both runs, the first "
        f"{NEVER[stop[0] == '-f']}",
        "the stock run ended, exit status 1; 1 test never started",
        "the patched run ended, exit status 1; 1 test never started",
    ]), result.stdout + result.stderr  # fmt: skip


NEVER = ("test_stops.py::T::test_2_never", "test_stops.T.test_2_never")  # under pytest, under unittest
SERVER = "import subprocess, sys, grpc\n\ndef test_starts_a_server():\n    subprocess.run([sys.executable, '-c', " \
    "'import grpc, fastcommon; fastcommon.patch()'], check=True)\n"  # fmt: skip


@pytest.mark.parametrize("program, run, seen", [
    (["-c", "import grpc, fastcommon; fastcommon.patch()"], "stock run", "left grpc patched, pid N, at its exit"),
    ([*PYTEST, "test_server.py"], "stock run", "left grpc patched, pid N, at its exit"),  # a child process
    (["-c", "import grpc, fastcommon; fastcommon.unpatch()"], "patched run", "left grpc stock, pid N, at its exit"),
    (["-c", "import subprocess, sys; subprocess.run([sys.executable, '-m', 'fastcommon', 'run', '-c', 'import grpc'])"],
     "stock run", "found grpc patched, pid N, at its import"),  # run, in the stock run: patched
], ids=["patch() in a script", "patch() in a suite's child", "unpatch() at import", "run, in the stock run"],
)  # fmt: skip
def test_a_process_that_is_not_what_its_run_is_named_leaves_nothing_compared(folder, program, run, seen):
    write(folder, "test_server.py", SERVER)
    result = compare(*program, cwd=folder)
    first = re.sub(r"pid \d+", "pid N", result.stdout.splitlines()[0])
    assert (result.returncode, first) == (8, f"fastcommon compare: nothing compared: a process of the {run} {seen}"), (
        result.stdout + result.stderr
    )


def test_both_runs_get_one_hash_seed_and_one_pytest_randomly_seed(folder):
    pytest.importorskip("pytest_randomly")
    tests = "".join(
        f"def test_{n}():\n    order.append({n})\n    assert order[0] != {n} or {n} % 2\n\n" for n in range(6)
    )
    write(folder, "test_order.py", f"import grpc\norder = []\n\n{tests}")  # which runs first fails, or passes
    ordered = compare("--stdout", "--json", "verdict.json", "-m", "pytest", "-p", "no:cacheprovider", cwd=folder)
    assert ordered.returncode == 0 and ", the same standard output)" in ordered.stdout, ordered.stdout
    pinned = json.loads((folder / "verdict.json").read_text())["pinned"]
    assert pinned["PYTHONHASHSEED"] == pinned["--randomly-seed"] and int(pinned["--randomly-seed"]) > 0
    hashed = compare("--stdout", "-c", "import grpc; print(hash('x'), {'a', 'b', 'c', 'd'})", cwd=folder)
    assert hashed.returncode == 0, hashed.stdout
    given = compare("--stdout", "-c", "import grpc, os; print(os.environ['PYTHONHASHSEED'])", cwd=folder,
                    env={"PYTHONHASHSEED": "7"})  # fmt: skip
    assert given.returncode == 0 and "where the program has none: --randomly-seed=" in given.stderr, given.stderr


@pytest.mark.parametrize("first", [[], ["--patched-first"]], ids=["stock first", "patched first"])
def test_either_order_of_the_runs_judges_a_flaky_test_alike(folder, first):
    write(folder, "test_counted.py", COUNTED)
    result = compare(*first, *ONCE, *PYTEST, "-k", "first_only", cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[0]) == (0, "fastcommon compare: the same, test by test, "
        f"stock and patched, but for 1 flaky test: 1 {'failed' if first else 'passed'} (exit status {len(first)})"), (
        result.stdout)  # fmt: skip


def test_outputs_compare_in_linear_time_and_never_as_the_same_where_they_differ(folder):
    """100,000 lines: difflib's quadratic comparison took about 25 minutes; the timeout is a bound, not a timing."""
    program = (
        f"import grpc._common\nlines = [str(n % 10) for n in range(100_000)]\nif {IS_PATCHED}:\n"
        "    lines[50_000] = 'x'\n    lines[70_000:70_002] = lines[70_001], lines[70_000]\nprint(*lines, sep='\\n')\n"
    )
    write(folder, "many.py", program)
    result = compare("--stdout", "many.py", cwd=folder, timeout=120)
    assert (result.returncode, result.stdout.splitlines()[:4]) == (1, [
        "fastcommon compare: stock and patched differ in the standard output",
        "stdout, the lines that differ:",
        "  stock:   line 50,001: 0",
        "  patched: line 50,001: x",
    ]), result.stdout  # fmt: skip
    assert "fastcommon compare: stdout: comparing 100,000 lines with 100,000" in result.stderr.splitlines()
    write(folder, "many.py", program.replace("lines[50_000] = 'x'", "pass"))  # the same lines, two in another order
    reordered = compare("--stdout", "many.py", cwd=folder, timeout=120)
    assert (reordered.returncode, reordered.stdout.splitlines()[2:4]) == (1, [
        "  stock:   line 70,001: 0", "  patched: line 70,001: 1"]), reordered.stdout  # fmt: skip


def test_a_test_the_program_reruns_counts_as_it_ended(folder):
    pytest.importorskip("pytest_rerunfailures")
    write(
        folder,
        "test_reran.py",
        """
        import os, grpc, pytest

        @pytest.mark.flaky(reruns=2)
        def test_passes_on_its_second_try():
            count = int(open("count").read()) + 1 if os.path.exists("count") else 1
            open("count", "w").write(str(count))
            assert count % 2 == 0
    """,
    )
    result = compare(*PYTEST, "-p", "no:flaky", cwd=folder)  # pytest-rerunfailures' mark, not flaky's
    assert (result.returncode, result.stdout.splitlines()) == (0, [
        "fastcommon compare: the same, test by test, stock and patched: 1 passed (exit status 0)",
        "reran by the program (each test's last outcome is compared): stock run 1 rerun, patched run 1 rerun",
    ]), result.stderr  # fmt: skip


# ------------------------------------------------------------------ the runs apart


def test_both_runs_start_from_the_programs_pytest_cache_and_neither_writes_it(folder):
    write(folder, "test_cached.py", "import grpc\n\ndef test_fails():\n    assert 0\n\ndef test_passes():\n    pass\n")
    fresh = compare("-m", "pytest", "-q", "--lf", cwd=folder)
    assert fresh.stdout.startswith("fastcommon compare: the same, test by test, stock and patched: 1 failed, 1 passed")
    assert not (folder / ".pytest_cache").exists()
    helpers.python("-m", "pytest", "-q", "test_cached.py", cwd=folder)
    cache = (folder / ".pytest_cache" / "v" / "cache" / "lastfailed").read_text()
    last_failed = compare("--patched-first", "-m", "pytest", "-q", "--lf", cwd=folder)
    assert last_failed.stdout.startswith("fastcommon compare: the same, test by test, stock and patched: 1 failed (")
    assert (folder / ".pytest_cache" / "v" / "cache" / "lastfailed").read_text() == cache
    runs = [line.split(":")[1].strip() for line in last_failed.stderr.splitlines() if line.endswith("-q --lf")]
    assert runs == ["patched run", "stock run"]


@pytest.mark.parametrize("given", [None, "", "their_plugin"])
def test_a_pytest_that_the_suite_runs_records_nothing_and_sees_pytest_plugins_as_given(folder, given):
    (folder / "inner").mkdir()
    write(folder, "inner/test_inner.py", "def test_inner():\n    pass\n")
    write(folder, "their_plugin.py", "")
    write(
        folder,
        "test_outer.py",
        f"""
        import os, subprocess, sys, grpc

        def test_outer():
            assert os.environ.get("PYTEST_PLUGINS") == {given!r}
            inner = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "inner"])
            assert inner.returncode == 0
    """,
    )
    result = compare(*PYTEST, "test_outer.py", cwd=folder, env={"PYTEST_PLUGINS": given})
    assert result.stdout.endswith(": 1 passed (exit status 0)\n"), result.stdout + result.stderr


def test_pytest_plugins_that_the_programs_conftest_sets_is_kept(folder):
    write(folder, "their_plugin.py", "")
    write(folder, "conftest.py", 'import os\nos.environ["PYTEST_PLUGINS"] = "their_plugin"\n')
    write(
        folder,
        "test_it.py",
        'import os, grpc\n\ndef test_it():\n    assert os.environ["PYTEST_PLUGINS"] == "their_plugin"',
    )
    result = compare(*PYTEST, "test_it.py", cwd=folder)
    assert result.stdout.endswith(": 1 passed (exit status 0)\n"), result.stdout + result.stderr


def test_xdist_workers_are_compared_through_their_controller(folder):
    pytest.importorskip("xdist")
    write(folder, "test_planted.py", PLANTED)
    result = compare(*ONCE, *PYTEST, "-n", "2", "test_planted.py", cwd=folder)
    assert result.stdout.splitlines()[2] == "  test_planted.py::test_encode_is_grpcs: passed -> failed, every time"
    with open(os.path.join(kept(result), "patched-rerun-1.stdout")) as rerun:
        assert "1 failed, 3 passed, 1 skipped, 1 xfailed, 1 error" in rerun.read()


# ------------------------------------------------------------------ statuses, output, progress


EXITS_PATCHED = f"import sys, grpc._common; sys.exit({IS_PATCHED})"


def test_a_program_whose_exit_status_differs_and_what_compare_says_as_it_goes(folder):
    result = compare("-c", EXITS_PATCHED, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[:2]) == (
        1,
        ["fastcommon compare: stock and patched differ in the exit status", "exit status: stock 0, patched 1"],
    )
    said = result.stderr.splitlines()  # the program's own stderr is in a file
    command = (subprocess.list2cmdline if os.name == "nt" else shlex.join)(["python", "-c", EXITS_PATCHED])
    starts = [line for line in said if line.endswith(command) and " rerun " not in line]  # then 3 times more each
    ends = [re.sub(r"[\d.]+ s", "N s", line) for line in said if " run ended after " in line]
    assert starts == [f"fastcommon compare: {run} run: {command}" for run in ("stock", "patched")]
    assert ends == [
        "fastcommon compare: stock run ended after N s, exit status 0",
        "fastcommon compare: patched run ended after N s, exit status 1",
    ]


def test_pythons_options_run_in_both(folder):
    result = compare("-X", "dev", "-c", "import sys, grpc; sys.exit(3 + sys.flags.dev_mode)", cwd=folder)
    assert (result.returncode, result.stdout) == (
        0,
        AS_A_WHOLE + "exit status 4\n",
    )


def test_a_compare_started_under_run_still_runs_stock_first(folder):
    environ = helpers.launcher.environment(report=True, report_file=str(folder / "reports.jsonl"))  # as run gives it
    result = compare("-c", EXITS_PATCHED, cwd=folder, env=environ)
    assert "exit status: stock 0, patched 1" in result.stdout.splitlines(), result.stdout + result.stderr
    assert not (folder / "reports.jsonl").exists()  # nor did the patched run report, without --report


OUTPUT = f"""
import os, sys, grpc._common
patched = {IS_PATCHED}
print(sys.argv[1:], sys.stdin.read())
print("value: 42" + " " * patched)  # a blank at its end
print("pid", os.getpid())
print("same")
print("\\x1b[0m" * patched)  # a control character
sys.stdout.flush()
sys.stdout.buffer.write(b"caf\\xe9\\n" if patched else "caf\\u00e9\\n".encode())  # not UTF-8
sys.stderr.write(f"took {{os.getpid()}} ms\\n")
"""


def test_output_that_differs_shows_every_differing_line_so_that_the_difference_shows(folder):
    write(folder, "output.py", OUTPUT)
    result = compare("--stdout", "output.py", "-h", "--stdout", cwd=folder, input="not the program's")
    lines = [re.sub(r"pid \d+", "pid N", line) for line in result.stdout.splitlines()]
    assert (result.returncode, lines[:10]) == (1, [
        "fastcommon compare: stock and patched differ in the standard output",
        "stdout, the lines that differ:",
        "  stock:   line 2: value: 42",
        "  stock:   line 3: pid N",
        "  stock:   line 5: ''",
        "  stock:   line 6: caf\u00e9",
        "  patched: line 2: 'value: 42 '",
        "  patched: line 3: pid N",
        "  patched: line 5: '\\x1b[0m'",
        "  patched: line 6: 'caf\\xe9'",
    ]), result.stderr  # fmt: skip
    with open(os.path.join(kept(result), "stock-run.stdout")) as stdout:
        assert stdout.readline() == "['-h', '--stdout'] \n"  # its arguments verbatim; stdin /dev/null
    ignoring = compare("--stdout", "--stderr", "--ignore", r"\d+", "--ignore=.*caf.*", "-c", OUTPUT.replace(
        "patched =", "patched = False and"), cwd=folder)  # fmt: skip
    assert (ignoring.returncode, ignoring.stdout) == (
        0,
        AS_A_WHOLE + "exit status 0, the same standard output, the same standard error\n",
    ), ignoring.stdout + ignoring.stderr


def test_pytests_own_timing_is_left_out_of_the_output_compared(folder):
    write(folder, "test_it.py", "import time, grpc\n\ndef test_it():\n    time.sleep(0.01)\n")
    result = compare("--stdout", *PYTEST, cwd=folder)
    assert result.stdout.endswith(": 1 passed (exit status 0, the same standard output)\n"), result.stdout


def test_report_prints_what_the_patched_run_saved(folder):
    program = "import os, grpc._common; grpc._common.encode('x'); open('pids', 'a').write(f'{os.getpid()}\\n')"
    result = compare("--report", "-c", program, cwd=folder)
    stock, patched = (folder / "pids").read_text().split()
    same, heading, *block = result.stdout.splitlines()
    assert (result.returncode, same) == (
        0,
        AS_A_WHOLE + "exit status 0",
    )
    assert heading == "fastcommon compare --report: what each patched process saved (1)"
    assert patched in "\n".join(block) and stock not in "\n".join(block)


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give a program to run: a file, -m MODULE, -c CODE"),
        (["-"], "cannot compare a program read from stdin (-): it runs twice"),
        (["-X"], "argument -X: expected one argument"),
        (["-E", "-c", "pass"], "cannot adopt a program under -E, -I or -S"),
        (["--report-file", "x", "app.py"], "unrecognized arguments: --report-file"),
        (["--reruns", "-1", "app.py"], "--reruns takes a whole number, 0 or more; --timeout, seconds above 0"),
        (["--timeout", "0", "app.py"], "--reruns takes a whole number, 0 or more; --timeout, seconds above 0"),
        (["--timeout", "x", "app.py"], "argument --timeout: invalid float value: 'x'"),
        (["--ignore", "(", "app.py"], "argument --ignore: not a regular expression: missing ), unterminated"),
        (["--json", "out/verdict.json", "app.py"], f"argument --json: out/verdict.json: {os.strerror(2)}"),
    ],
)
def test_bad_usage_exits_2_with_one_line(folder, args, message):
    result = compare(*args, cwd=folder)
    usage, error = result.stderr.splitlines()
    assert (result.returncode, result.stdout, usage) == (2, "", f"usage: {command_line.COMPARE_USAGE}")
    assert error.startswith("python -m fastcommon compare: error: ") and message in error
    assert compares_folders(folder) == []


def test_a_closed_pipe_ends_quietly(folder):
    result = helpers.python("-m", "fastcommon", "compare", "-c", "pass", cwd=folder, closed_stdout=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr and "Error" not in result.stderr


# ------------------------------------------------------------------ stopping leaves nothing


HANGS = """
    import os, signal, subprocess, sys, time, grpc, pytest

    @pytest.fixture
    def server():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        yield child.pid
        child.terminate()
        child.wait()
        open("torn down", "w").close()

    def test_hangs(server):
        if os.environ.get("IGNORE_SIGNALS"):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open("pids", "w") as fifo:  # the test reads it: the test has started
            fifo.write(f"{os.getpid()} {server}\\n")
        time.sleep(600)
"""


@POSIX
@pytest.mark.parametrize(
    "name, args, env",
    [
        ("SIGTERM", [], {}),
        ("SIGINT", [], {}),
        ("SIGHUP", [], {}),  # read as the test runs: Windows has none
        ("SIGTERM", ["-n", "1"], {"IGNORE_SIGNALS": "1"}),  # an xdist worker that ignores SIGINT and SIGTERM
    ],
    ids=["SIGTERM", "SIGINT", "SIGHUP", "xdist, signals ignored"],
)
def test_a_signal_to_compare_stops_the_run_and_leaves_no_process_nor_folder(folder, name, args, env):
    signum = signal.Signals[name]
    if args:
        pytest.importorskip("xdist")
    write(folder, "test_hangs.py", HANGS)
    os.mkfifo(folder / "pids")  # type: ignore[attr-defined, unused-ignore]  # POSIX only, as its test
    command = ["-m", "fastcommon", "compare", *PYTEST, *args]
    with helpers.started(*command, cwd=folder, env={"TMPDIR": str(folder / "tmp"), **env}) as process:
        with open(folder / "pids") as fifo:
            pids = [int(pid) for pid in fifo.readline().split()]
        assert all(alive(pid) for pid in pids)  # what alive() says below is seen, not assumed
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=120)
    running = ", in test_hangs.py::test_hangs" * (not args)  # xdist's controller may not have heard yet
    assert process.returncode == 128 + signum, stderr
    assert re.fullmatch(
        f"fastcommon compare: stopped by {signum.name} during the stock run(, in .*)?; nothing compared\n", stdout
    )
    assert running in stdout
    assert (folder / "torn down").exists() is not bool(env)  # on SIGINT, pytest tore its fixtures down
    assert [pid for pid in pids if alive(pid)] == [] and compares_folders(folder) == []


@POSIX
def test_a_run_over_its_timeout_is_stopped_and_its_output_kept(folder):
    program = "import os, time, grpc; open('pid', 'w').write(str(os.getpid())); print('started', flush=True); " \
        "time.sleep(600)"  # fmt: skip
    result = compare("--timeout", "5", "--json", "verdict.json", "-c", program, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[0]) == (
        124,
        "fastcommon compare: nothing compared: the stock run took over 5 s (--timeout), and was stopped",
    ), result.stderr
    with open(os.path.join(kept(result), "stock-run.stdout")) as stdout:
        assert stdout.read() == "started\n"
    assert not alive(int((folder / "pid").read_text()))
    (ran,) = json.loads((folder / "verdict.json").read_text())["runs"]  # how it ended (SIGINT: Python re-raises it)
    assert (ran["status"], ran["signal"], ran["stopped"]) == (-2, "SIGINT", "timed out") and ran["seconds"] >= 5


# ------------------------------------------------------------------ review2's findings (each fails on main dd122f0)
# Ranked as the report ranks them: a false "the same" (status 0) first, then wrong verdicts, misleading text, crashes.

FLAKY_ONCE = """
    import os, grpc._common

    def test_flaky():  # fails on its 2nd and 3rd executions, across runs
        count = int(open("flaky.count").read()) + 1 if os.path.exists("flaky.count") else 1
        open("flaky.count", "w").write(str(count))
        assert count not in (2, 3)
"""


def test_an_exit_status_that_differs_every_time_is_not_explained_away_by_a_flaky_test(folder):
    """Every patched run ends in os._exit(3) past its tests (a crash at shutdown, say); stock ends 0 or 1. One flaky
    test in the suite made compare drop the exit status from the differences: "the same", status 0."""
    write(folder, "test_flaky.py", FLAKY_ONCE)
    write(folder, "conftest.py", f"import atexit, os, grpc._common\n\ndef pytest_unconfigure(config):\n"
          f"    if {IS_PATCHED}:\n        atexit.register(os._exit, 3)\n")  # fmt: skip
    result = compare(*ONCE, *PYTEST, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[0]) == (
        1, "fastcommon compare: stock and patched differ in the exit status"), result.stdout  # fmt: skip


def test_tests_that_xdist_never_started_after_x_leave_both_runs_incomplete(folder):
    """Under pytest-xdist the controller collects nothing itself: tests that -x left unrun in both were not seen."""
    pytest.importorskip("xdist")
    write(folder, "test_stops.py", f"import grpc._common\n\ndef test_1_fails():\n    assert 0\n\ndef test_2():\n"
          f"    pass\n\ndef test_3_stock():\n    assert not {IS_PATCHED}\n")  # fmt: skip
    result = compare(*PYTEST, "-x", "-n", "2", "test_stops.py", cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[0].split(" did not end")[0]) == (
        7, "fastcommon compare: incomplete (both runs): 1 of 3 tests"), result.stdout  # fmt: skip


def test_a_second_pytest_main_in_the_same_process_is_compared_too(folder):
    """A script that runs two pytest sessions in one process: the second's tests were never recorded."""
    (folder / "a").mkdir()
    (folder / "b").mkdir()
    write(folder, "a/test_a.py", "import grpc\n\ndef test_a_fails_in_both():\n    assert 0\n")
    write(folder, "b/test_b.py", f"import grpc._common\n\ndef test_b():\n    assert not {IS_PATCHED}\n")
    options = repr(PYTEST[2:])
    write(folder, "run_both.py", f"import sys, pytest\nfirst = pytest.main([*{options}, 'a'])\n"
          f"second = pytest.main([*{options}, 'b'])\nsys.exit(first or second)\n")  # fmt: skip
    result = compare(*ONCE, "run_both.py", cwd=folder)
    assert result.returncode == 1 and "  b/test_b.py::test_b: passed -> failed, every time" in result.stdout, (
        result.stdout)  # fmt: skip


def test_a_program_patched_whole_by_its_own_patched_block_is_not_compared_as_stock(folder):
    """`with fastcommon.patched(): main()`: the stock run ran patched from its import to its exit, and was judged
    stock because it found grpc stock at its import and left it stock."""
    write(folder, "app.py", f"import grpc._common, fastcommon\n\nwith fastcommon.patched():\n"
          f"    print('fastcommon' if {IS_PATCHED} else 'grpc')\n")  # fmt: skip
    result = compare("--stdout", "app.py", cwd=folder)
    first = "fastcommon compare: nothing compared: a process of the stock run "
    assert result.returncode == 8 and result.stdout.startswith(first), result.stdout


def test_a_child_started_with_minus_i_that_patches_grpc_itself_is_seen(folder):
    """python -I skips PYTHONPATH, so the bootstrap; the child's own fastcommon.patch() went unrecorded, and the
    stock run, patched in its server, was compared as stock."""
    write(folder, "server.py", f"import sys, grpc._common, fastcommon\nfastcommon.patch()\n"
          f"sys.exit(7 if {IS_PATCHED} else 0)\n")  # fmt: skip
    write(folder, "test_server.py", "import subprocess, sys, grpc\n\ndef test_server():\n"
          "    assert subprocess.run([sys.executable, '-I', 'server.py']).returncode == 0\n")  # fmt: skip
    result = compare(*PYTEST, "test_server.py", cwd=folder)
    first = re.sub(r"pid \d+", "pid N", result.stdout.splitlines()[0])
    assert (result.returncode, first) == (8, "fastcommon compare: nothing compared: a process of the stock run left "
                                             "grpc patched, pid N, at its patch()"), result.stdout  # fmt: skip


@POSIX
def test_a_process_of_the_stock_run_that_outlives_it_leaves_nothing_compared(folder):
    """A test server started once, in a session of its own, and left running: the patched run's test talked to the
    stock run's server, and compare said "the same"."""
    write(folder, "server.py", "import os, time, grpc._common\nwhile not os.path.exists('stop'):\n"
          "    with open('answer.tmp', 'w') as f:\n        f.write(grpc._common.encode.__module__)\n"
          "    os.replace('answer.tmp', 'answer')\n    time.sleep(0.05)\n")  # fmt: skip
    write(folder, "test_server.py", "import os, subprocess, sys, time, grpc\n\ndef test_server_runs_grpcs_own():\n"
          "    if not os.path.exists('answer'):\n"
          "        subprocess.Popen([sys.executable, 'server.py'], start_new_session=True)\n"
          "        while not os.path.exists('answer'):\n            time.sleep(0.05)\n"
          "    assert open('answer').read() == 'grpc._common'\n")  # fmt: skip
    try:
        result = compare(*PYTEST, "test_server.py", cwd=folder)
    finally:
        (folder / "stop").touch()
    assert result.returncode == 8 and "stock run" in result.stdout.splitlines()[0], result.stdout


def test_pytests_timing_is_left_out_of_its_summary_line_only(folder):
    """PYTEST_TIMING was removed wherever it matched: a test's own "retried in 1s" / "in 3s" read the same."""
    write(folder, "test_it.py", f"import grpc._common\n\ndef test_it():\n    seconds = 3 if {IS_PATCHED} else 1\n"
          "    print(f'deadline exceeded, retried in {seconds}s')\n")  # fmt: skip
    result = compare("--stdout", *PYTEST, "-s", cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[0]) == (
        1, "fastcommon compare: stock and patched differ in the standard output"), result.stdout  # fmt: skip


def test_a_unittest_script_is_compared_as_a_whole_and_says_so(folder):
    """`python test_x.py` whose last lines call unittest.main(): no runner compare reads, so it is compared by its exit
    status, 1 in both; the verdict said "the same, stock and patched", as if its tests were seen (review2)."""
    write(folder, "test_script.py", f"import unittest, grpc._common\n\nclass T(unittest.TestCase):\n"
          f"    def test_fails_in_both(self):\n        self.fail()\n\n    def test_stock(self):\n"
          f"        self.assertFalse({IS_PATCHED})\n\nif __name__ == '__main__':\n    unittest.main()\n")  # fmt: skip
    result = compare(*ONCE, "test_script.py", cwd=folder)
    assert (result.returncode, result.stdout) == (0, AS_A_WHOLE + "exit status 1\n"), result.stdout  # fmt: skip


def test_pythonhashseed_random_is_pinned_as_if_unset(folder):
    """PYTHONHASHSEED=random draws a seed in each run: both runs did not get one hash seed."""
    result = compare("--stdout", "-c", "import grpc; print({'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'})",
                     cwd=folder, env={"PYTHONHASHSEED": "random"})  # fmt: skip
    assert (result.returncode, result.stdout) == (
        0, AS_A_WHOLE + "exit status 0, the same standard output\n"), (
        result.stdout)  # fmt: skip


def test_randomly_seed_last_without_a_cached_seed_gets_one_seed_in_both_runs(folder):
    """--randomly-seed=last with no seed in the cache: pytest-randomly drew a seed in each run, and so an order."""
    pytest.importorskip("pytest_randomly")
    write(folder, "test_it.py", "import grpc\n\ndef test_it():\n    pass\n")
    write(folder, "conftest.py", "def pytest_sessionfinish(session):\n"
          "    open('seeds', 'a').write(f'{session.config.option.randomly_seed}\\n')\n")  # fmt: skip
    compare("-m", "pytest", "-q", "-p", "randomly", "--randomly-seed=last", cwd=folder)
    stock, patched = (folder / "seeds").read_text().splitlines()
    assert stock == patched


def test_unittests_own_timing_is_left_out_of_the_output_compared(folder):
    """unittest's "Ran 1 test in 0.051s" on stderr: --stderr read a timing as a difference."""
    write(folder, "test_it.py", f"import time, unittest, grpc._common\n\nclass T(unittest.TestCase):\n"
          f"    def test_it(self):\n        time.sleep(0.05 if {IS_PATCHED} else 0)\n")  # fmt: skip
    result = compare("--stderr", "-m", "unittest", "test_it", cwd=folder)
    assert result.stdout.endswith(": 1 ok (exit status 0, the same standard error)\n"), result.stdout


def test_an_exit_status_that_one_way_gives_both_of_is_flaky_not_a_difference(folder):
    """A program with no test runner whose exit status is flaky (its 1st execution 0, later ones 1) was never run
    again: "differ in the exit status" on the first pair."""
    program = "import os, sys, grpc\ncount = int(open('count').read()) + 1 if os.path.exists('count') else 1\n" \
        "open('count', 'w').write(str(count))\nsys.exit(count > 1)\n"  # fmt: skip
    write(folder, "client.py", program)
    result = compare(*ONCE, "client.py", cwd=folder)
    assert result.returncode == 0 and "flaky" in result.stdout, result.stdout


def test_compares_own_variables_differ_between_the_runs_as_documented(folder):
    """A program that prints its environment: compare's variables (the run's files, FASTCOMMON_COMPARE_STOCK) are not
    the same in both runs, and --stdout tells them apart; adoption.md says so, and how to --ignore them (review2)."""
    program = "import os, grpc; print(sorted(k for k in os.environ if k.startswith('FASTCOMMON_COMPARE')))"
    assert compare("--stdout", "-c", program, cwd=folder).returncode == 1
    ignored = compare("--stdout", "--ignore", ", 'FASTCOMMON_COMPARE_STOCK'", "-c", program, cwd=folder)
    assert ignored.returncode == 0, ignored.stdout


def test_a_test_collected_in_one_run_alone_that_ran_to_its_end_is_a_difference_not_incomplete(folder):
    """collect_ignore (or load_tests) that leaves a module out when patched: the patched run ran all it collected,
    yet read "incomplete (the patched run alone) ... the patched run ended, exit status 0; 1 test never started"."""
    write(folder, "conftest.py", f"import grpc._common\ncollect_ignore = ['test_two.py'] if {IS_PATCHED} else []\n")
    write(folder, "test_one.py", "import grpc\n\ndef test_one():\n    pass\n")
    write(folder, "test_two.py", "import grpc\n\ndef test_two():\n    pass\n")
    result = compare("--reruns", "0", *PYTEST, cwd=folder)
    assert result.returncode == 1 and "never started" not in result.stdout, result.stdout


@POSIX
def test_a_patched_run_alone_over_its_timeout_says_how_the_stock_run_ended(folder):
    """Only the patched run hangs: "nothing compared" hid that the stock run had ended, in a second, exit status 0."""
    write(folder, "test_hangs.py", f"import time, grpc._common\n\ndef test_hangs_patched():\n"
          f"    if {IS_PATCHED}:\n        time.sleep(600)\n")  # fmt: skip
    result = compare("--timeout", "5", *PYTEST, cwd=folder)
    first = result.stdout.splitlines()[0]
    assert result.returncode == 124 and "nothing compared" not in first and "stock run ended" in result.stdout, (
        result.stdout)  # fmt: skip


def test_a_huge_line_that_differs_is_shown_within_the_width_where_it_differs(folder):
    """A 2,000,000-character line that differs in its last character was printed whole: 4 MB of verdict."""
    write(folder, "huge.py", f"import grpc._common\nprint('x' * 2_000_000 + ('y' if {IS_PATCHED} else 'z'))\n")
    result = compare("--stdout", "huge.py", cwd=folder)
    assert result.returncode == 1 and max(map(len, result.stdout.splitlines())) <= 160, len(result.stdout)


def test_output_lines_are_lines_as_a_file_has_them(folder):
    """A form feed (or \\x1c, \\x85, \\u2028) split a line in two and showed its first half as '(no end)'."""
    write(folder, "ff.py", f"import grpc._common\nprint('page\\x0c' + ('b' if {IS_PATCHED} else 'a'))\n")
    result = compare("--stdout", "ff.py", cwd=folder)
    assert "  stock:   line 1: 'page\\x0ca'" in result.stdout.splitlines(), result.stdout


def test_a_unittest_suite_that_runs_its_tests_in_another_order_is_not_broken_by_compare(folder):
    """A TestSuite that runs its tests in its own order (testresources' OptimisingTestSuite, testscenarios): the
    recorder's collected.index() raised ValueError inside the program, which died with compare's traceback."""
    write(folder, "test_order.py", f"""
        import unittest, grpc._common

        class T(unittest.TestCase):
            def test_a(self):
                pass

            def test_b(self):
                pass

            def test_stock(self):
                self.assertFalse({IS_PATCHED})

        class Reversed(unittest.TestSuite):
            def run(self, result, debug=False):
                for test in reversed(list(self)):
                    test(result)
                return result

        def load_tests(loader, tests, pattern):
            return Reversed(loader.loadTestsFromTestCase(T))
    """)  # fmt: skip
    result = compare("--reruns", "0", "-m", "unittest", "test_order", cwd=folder)
    with open(os.path.join(kept(result), "stock-run.stderr")) as stderr:
        assert "ValueError" not in stderr.read()
    first = "fastcommon compare: stock and patched differ in 1 of 3 tests and the exit status"
    assert (result.returncode, result.stdout.splitlines()[0]) == (1, first), result.stdout


# Found by review: _recording.append wrote through builtins.open, which a fixture's mock.patch("builtins.open") replaces
# while pytest reports the test's call: its outcome went into the mock, in both runs, and a test that passed stock and
# failed patched was judged "the same".
def test_a_test_whose_fixture_replaces_builtins_open_is_still_compared(folder):
    write(
        folder,
        "test_open.py",
        f"""
        from unittest import mock
        import grpc._common
        import pytest

        @pytest.fixture
        def fake_open():
            with mock.patch("builtins.open", mock.mock_open(read_data="x")) as fake:
                yield fake

        def test_encode_is_grpcs(fake_open):
            assert not ({IS_PATCHED})

        def test_fails_both_ways():
            assert False
    """,
    )
    result = compare("--reruns", "0", *PYTEST, "test_open.py", cwd=folder)
    assert result.returncode == 1, result.stdout
    assert "  test_open.py::test_encode_is_grpcs: passed -> failed" in result.stdout.splitlines()
