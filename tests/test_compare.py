"""`python -m fastcommon compare`: a program run stock, then patched, and what differs, test by test under pytest."""

import os
import re
import shlex
import textwrap

import pytest
from conftest import NEEDS_GRPCIO

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers

import fastcommon
from fastcommon import __main__ as command_line

# A suite with one test that passes stock and fails patched, and the outcomes pytest counts besides.
PLANTED = """
    import grpc._common
    import pytest


    def test_encode_is_grpcs():
        assert grpc._common.encode.__module__ == "grpc._common"


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
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider"]
EXITS_PATCHED = "import sys, grpc, fastcommon; sys.exit(fastcommon.is_patched())"
KEPT = re.compile(r"^stdout and stderr of both runs are kept in (.+)$", re.MULTILINE)


@pytest.fixture
def folder(tmp_path):
    """Where the test's programs are, with a temporary folder of its own for compare's (TMPDIR)."""
    (tmp_path / "tmp").mkdir()
    return tmp_path


def write(folder, name, source):
    (folder / name).write_text(textwrap.dedent(source))


def compare(*args, cwd, env=None, **kwargs):
    environ = {**(env or {}), "TMPDIR": str(cwd / "tmp")}
    return helpers.python("-m", "fastcommon", "compare", *args, cwd=cwd, env=environ, **kwargs)


def kept(result):
    """The folder compare kept, with both runs' output."""
    return KEPT.search(result.stdout).group(1)


def test_a_planted_difference_is_named_test_by_test_and_the_runs_output_kept(folder):
    write(folder, "test_planted.py", PLANTED)
    result = compare(*PYTEST, "test_planted.py", cwd=folder)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        "fastcommon compare: stock and patched differ in 1 of 6 tests",
        "tests, stock -> patched:",
        "  test_planted.py::test_encode_is_grpcs: passed -> failed",
    ]
    assert lines[3:] == [f"stdout and stderr of both runs are kept in {kept(result)}"]  # both exit 1: the teardown
    assert os.path.dirname(kept(result)) == str(folder / "tmp")
    for name in ("stock", "patched"):
        with open(os.path.join(kept(result), f"{name}.stdout")) as stdout:
            assert "1 error" in stdout.read()  # the program's own output, not the terminal's


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
    assert os.listdir(folder / "tmp") == []


def test_a_collection_error_and_tests_not_run_are_outcomes(folder):
    write(
        folder,
        "test_module.py",
        f"""
        {EXITS_PATCHED.replace("sys.exit", "assert not ")}

        def test_runs():
            pass
    """,
    )
    result = compare(*PYTEST, cwd=folder)
    assert result.returncode == 1
    assert result.stdout.splitlines()[:4] == [
        "fastcommon compare: stock and patched differ in 2 of 2 tests and the exit status",
        "tests, stock -> patched:",
        "  test_module.py: not run -> error",
        "  test_module.py::test_runs: passed -> not run",
    ]
    assert "exit status: stock 0, patched 2" in result.stdout


def test_many_differences_show_50_and_no_line_is_over_160_characters_but_a_longer_node_id(folder):
    write(
        folder,
        "test_many.py",
        """
        import grpc._common
        import pytest

        @pytest.mark.parametrize("n", range(60), ids=lambda n: f"{n:02}" + "x" * (150 if n == 0 else 0))
        def test_module(n):
            assert grpc._common.encode.__module__ == "grpc._common"
    """,
    )
    result = compare(*PYTEST, cwd=folder)
    lines = result.stdout.splitlines()
    assert lines[0] == "fastcommon compare: stock and patched differ in 60 of 60 tests and the exit status"
    assert lines[2:5] == [f"  test_many.py::test_module[00{'x' * 150}]:", "    passed -> failed", (
        "  test_many.py::test_module[01]: passed -> failed")]  # fmt: skip
    assert lines[52:54] == ["  test_many.py::test_module[49]: passed -> failed", "  ... and 10 more"]
    assert [line for line in lines if len(line) > 160] == [f"  test_many.py::test_module[00{'x' * 150}]:"]


def test_a_pytest_that_the_suite_runs_records_nothing(folder):
    (folder / "inner").mkdir()
    write(folder, "inner/test_inner.py", "def test_inner():\n    pass\n")
    write(
        folder,
        "test_outer.py",
        """
        import subprocess, sys

        def test_outer():
            inner = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "inner"])
            assert inner.returncode == 0
    """,
    )
    result = compare(*PYTEST, "test_outer.py", cwd=folder)
    assert result.stdout.endswith(": 1 passed (exit status 0)\n"), result.stdout + result.stderr


def test_a_program_whose_exit_status_differs_and_what_compare_says_as_it_goes(folder):
    result = compare("-c", EXITS_PATCHED, cwd=folder)
    assert (result.returncode, result.stdout.splitlines()[:2]) == (
        1,
        ["fastcommon compare: stock and patched differ in the exit status", "exit status: stock 0, patched 1"],
    )
    said = result.stderr.splitlines()  # the program's own stderr is in a file
    command = shlex.join(["python", "-c", EXITS_PATCHED])
    starts = [line for line in said if line.endswith(command)]
    ends = [re.sub(r"[\d.]+ s", "N s", line) for line in said if " run ended after " in line]
    assert starts == [f"fastcommon compare: {run} run: {command}" for run in ("stock", "patched")]
    assert ends == [
        "fastcommon compare: stock run ended after N s, exit status 0",
        "fastcommon compare: patched run ended after N s, exit status 1",
    ]


def test_a_compare_started_under_run_still_runs_stock_first(folder):
    environ = helpers.launcher.environment(report=True, report_file=str(folder / "reports.jsonl"))  # as run gives it
    result = compare("-c", EXITS_PATCHED, cwd=folder, env=environ)
    assert "exit status: stock 0, patched 1" in result.stdout.splitlines(), result.stdout + result.stderr
    assert not (folder / "reports.jsonl").exists()  # nor did the patched run report, without --report


STDOUT = "import grpc._common, sys; print(sys.argv[1:]); print(grpc._common.encode.__module__); print(sys.stdin.read())"


def test_stdout_that_differs_is_shown_at_its_first_different_line(folder):
    result = compare("--stdout", "-c", STDOUT, "-h", "--report", cwd=folder, input="not the program's")
    assert result.returncode == 1
    assert result.stdout.splitlines()[:4] == [
        "fastcommon compare: stock and patched differ in the standard output",
        "standard output, from line 2:",
        "  stock:   grpc._common",
        f"  patched: {fastcommon.encode.__module__}",
    ]
    with open(os.path.join(kept(result), "stock.stdout")) as stdout:
        assert stdout.read() == "['-h', '--report']\ngrpc._common\n\n"  # its arguments verbatim; stdin /dev/null


def test_stdout_that_is_the_same_and_pythons_options(folder):
    program = "import sys; print(sys.stdin.read()); sys.exit(3 + sys.flags.dev_mode)"
    result = compare("--stdout", "-X", "dev", "-c", program, cwd=folder, input="not the program's")
    assert (result.returncode, result.stdout) == (
        0,
        "fastcommon compare: the same, stock and patched: exit status 4, the same standard output\n",
    ), result.stderr
    assert os.listdir(folder / "tmp") == []


def test_report_prints_what_the_patched_run_saved(folder):
    program = "import os, grpc._common; grpc._common.encode('x'); open('pids', 'a').write(f'{os.getpid()}\\n')"
    result = compare("--report", "-c", program, cwd=folder)
    stock, patched = (folder / "pids").read_text().split()
    same, heading, *block = result.stdout.splitlines()
    assert (result.returncode, same) == (0, "fastcommon compare: the same, stock and patched: exit status 0")
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
    ],
)
def test_bad_usage_exits_2_with_one_line(folder, args, message):
    result = compare(*args, cwd=folder)
    usage, error = result.stderr.splitlines()
    assert (result.returncode, result.stdout, usage) == (2, "", f"usage: {command_line.COMPARE_USAGE}")
    assert error.startswith("python -m fastcommon compare: error: ") and message in error
    assert os.listdir(folder / "tmp") == []


def test_help_describes_and_gives_examples(folder):
    result = helpers.python("-m", "fastcommon", "compare", "--help", cwd=folder)
    assert result.returncode == 0 and result.stdout.startswith(f"usage: {command_line.COMPARE_USAGE}")
    assert "\nexamples:\n  python -m fastcommon compare -m pytest -q tests\n" in result.stdout
    listed = helpers.python("-m", "fastcommon", "--help", cwd=folder).stdout
    assert re.search(r"^    compare +run a program stock, then patched", listed, re.MULTILINE)


def test_a_closed_pipe_ends_quietly(folder):
    result = helpers.python("-m", "fastcommon", "compare", "-c", "pass", cwd=folder, closed_stdout=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr and "Error" not in result.stderr
