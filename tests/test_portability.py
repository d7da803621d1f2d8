"""Where fastcommon's wheels go, as far as Linux can show it: under SIMULATED WINDOWS (tests/simulated_windows: `signal`
and `os` without what Windows lacks; .ci/simulated-windows runs the whole command line so) the command line starts and
the tests collect; compare escapes what a cp1252 console cannot encode. On main 15142f3 both failed: _compare.py read
signal.SIGHUP at import, tests/test_benchmarks.py os.sched_getaffinity; a progress line raised UnicodeEncodeError."""

import os
import re

import helpers

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
