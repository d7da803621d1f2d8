"""Where fastcommon's wheels go, as far as Linux can show it: under SIMULATED WINDOWS (tests/simulated_windows: `signal`
and `os` without what Windows lacks; .ci/simulated-windows runs the whole command line so) the command line starts and
the tests collect; compare escapes what a cp1252 console cannot encode. On main 15142f3 both failed: _compare.py read
signal.SIGHUP at import, tests/test_benchmarks.py os.sched_getaffinity; a progress line raised UnicodeEncodeError."""

import os
import re
import signal

import helpers
import pytest
from conftest import NEEDS_GRPCIO

SIMULATED_WINDOWS = {"PYTHONPATH": os.path.join(helpers.PROJECT_DIR, "tests", "simulated_windows")}


def test_the_command_line_starts_and_the_tests_collect_under_simulated_windows(tmp_path):
    simulated = helpers.python("-c", "import os, signal; print(hasattr(signal, 'SIGHUP'), hasattr(os, 'killpg'))",
                               env=SIMULATED_WINDOWS, check_status=0)  # fmt: skip
    assert simulated.stdout == "False False\n"
    helpers.python("-m", "fastcommon", "compare", "--help", env=SIMULATED_WINDOWS, cwd=tmp_path, check_status=0)
    collect = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "tests"]
    collected = helpers.python(*collect, env=SIMULATED_WINDOWS, cwd=helpers.PROJECT_DIR)
    summary = collected.stdout.splitlines()[-1]  # "1,154 tests collected in 1.48s", no error beside them
    assert collected.returncode == 0 and re.fullmatch(r"\d+ tests collected in [\d.]+s", summary), collected.stdout


def test_compare_escapes_what_the_console_cannot_encode(tmp_path):
    pytest.importorskip("grpc", reason=NEEDS_GRPCIO)  # the program's output differs where fastcommon patches grpc
    # the verdict on stdout (stderr escapes by default): a line of output that differs, patched, with a lambda in it
    program = "import grpc._common, sys; patched = grpc._common.encode.__module__ != 'grpc._common'\n" \
        "sys.stdout.buffer.write('\u03bb\\n'.encode() if patched else b'x\\n')"  # fmt: skip
    result = helpers.python("-m", "fastcommon", "compare", "--reruns", "0", "--stdout", "-c", program, cwd=tmp_path,
                            env={"PYTHONIOENCODING": "cp1252"})  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "  patched: line 1: \\u03bb" in result.stdout.splitlines(), result.stdout


def test_the_release_workflow_publishes_only_from_a_pushed_tag():
    # workflow_dispatch builds and tests every leg; started by hand on a tag, it must still publish nothing
    with open(os.path.join(helpers.PROJECT_DIR, ".github", "workflows", "release.yml")) as workflow:
        text = workflow.read()
    assert "\n  workflow_dispatch:" in text
    condition = re.search(r"^    if: (.*?)(  #.*)?$", text.split("\n  publish:\n", 1)[1], re.M)
    assert condition and condition.group(1) == "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')"


# Run as `python -c END_WITHOUT_CTRL_BREAK` under SIMULATED WINDOWS: compare's end() of a run to which the Ctrl-Break
# cannot be sent. On Windows os.kill(pid, CTRL_BREAK_EVENT) raises OSError (WinError 6) in a process without a console
# (pythonw, a service: cpython#112190) and WinError 87 where the group has just ended (psutil#2519).
END_WITHOUT_CTRL_BREAK = """
import subprocess, sys
from fastcommon import _compare
process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], **_compare.IN_A_GROUP)
def no_console(signum):
    raise OSError(6, "The handle is invalid")
process.send_signal = no_console
try:
    _compare.end(process, interrupt=True)
    print("returned, the run ended:", process.poll() is not None)
except OSError as error:
    print("raised", error)
"""


def test_a_run_is_ended_on_windows_where_the_ctrl_break_cannot_be_sent():
    """The run is ended by taskkill all the same, and end() returns: on 2250cb0 the OSError skipped taskkill and
    end()'s `finally: process.wait()` waited for the run (here 30 s; a hung test: for ever)."""
    env = SIMULATED_WINDOWS | {"PATH": SIMULATED_WINDOWS["PYTHONPATH"] + os.pathsep + os.environ["PATH"]}  # taskkill
    result = helpers.python("-c", END_WITHOUT_CTRL_BREAK, env=env, timeout=20, check_status=0)
    assert result.stdout == "returned, the run ended: True\n"


# Run as `python -c KILLPG_AS_ON_MACOS`: compare's end() where os.killpg answers as macOS's does (XNU's killpg1 skips
# zombies, and a group of zombies alone is EPERM where Linux signals it), for a run that has ended and is not reaped.
KILLPG_AS_ON_MACOS = """
import errno, os, subprocess, sys
from fastcommon import _compare

def states(group):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state, _, pgrp = stat.read().rsplit(")", 1)[1].split()[:3]
        except OSError:
            continue
        found += [state] if int(pgrp) == group else []
    return found

linux_killpg = os.killpg
def killpg(group, signum):
    if states(group) and all(state == "Z" for state in states(group)):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
    linux_killpg(group, signum)
os.killpg = killpg
process = subprocess.Popen([sys.executable, "-c", "pass"], **_compare.IN_A_GROUP)
os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie alone in its group
try:
    _compare.end(process, interrupt=True)
    print("returned", process.returncode)
except OSError as error:
    print("raised", repr(error))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self") or not hasattr(os, "waitid"), reason="reads /proc; os.waitid")
def test_ending_a_run_whose_group_holds_only_zombies_as_macos_answers_killpg():
    """compare stopped just as the run ended (or a run that leaves only zombies in its group): end() returns, where
    on 2250cb0 macOS's PermissionError went through it, and compare ended in a traceback, not a verdict."""
    result = helpers.python("-c", KILLPG_AS_ON_MACOS, timeout=60, check_status=0)
    assert result.stdout == "returned 0\n"


def test_run_passes_on_a_windows_childs_ntstatus_as_a_c_int(monkeypatch):
    launcher = helpers._launcher
    # Windows' exit code of a crash, 0xC0000005, went to sys.exit as is: builds without gh-125842 exit 0xFFFFFFFF
    monkeypatch.setattr(launcher, "REPLACE_PROCESS", False)
    monkeypatch.setattr(launcher.subprocess, "call", lambda *args, **kwargs: 0xC0000005)
    monkeypatch.setattr(launcher.signal, "signal", lambda *args: None)
    with pytest.raises(SystemExit) as ended:
        launcher.launch(["app.py"], report=False)
    assert ended.value.code == 0xC0000005 - 2**32  # -1073741819, as Windows' C runtime takes an int


STANDS_IN_FOR_SIGBREAK = getattr(signal, "SIGUSR1", None)  # POSIX's: Linux has no SIGBREAK


@pytest.mark.skipif(STANDS_IN_FOR_SIGBREAK is None, reason="SIGUSR1 stands in for Windows' SIGBREAK")
def test_a_process_of_a_compare_run_takes_ctrl_break_as_ctrl_c_so_that_fixtures_tear_down(monkeypatch, tmp_path):
    # Windows: compare stops a run with CTRL_BREAK_EVENT, whose default ends the process at once; as Ctrl-C, pytest
    # and unittest end their tests and tear down (the review's finding: fixtures were never torn down there)
    monkeypatch.setattr(signal, "SIGBREAK", STANDS_IN_FOR_SIGBREAK, raising=False)
    monkeypatch.setenv(helpers._environment.COMPARE_RUN, str(tmp_path / "run"))
    previous = signal.getsignal(STANDS_IN_FOR_SIGBREAK)
    try:
        helpers._recording.Run("pytest")
        assert signal.getsignal(STANDS_IN_FOR_SIGBREAK) is signal.default_int_handler
    finally:
        signal.signal(STANDS_IN_FOR_SIGBREAK, previous)
