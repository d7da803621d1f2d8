"""The command line: `python -m fastcommon` (the status, check, --version, --help); `run`, whose program runs patched
and otherwise as with plain `python` (its argv, python's options, refusals, exit statuses, signals); `compare`, a
program run stock, then patched, and what differs; and example.py, run both ways."""

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

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers
from changed_grpc import MADE_UP_CHANGES, zero_copy_deserialize
from conftest import FUNCTIONS, GRPC_METADATA_ORIGINALS, GRPC_ORACLE, METADATA_METHODS, expected_patch
from grpc import _common as grpc_common

import fastcommon
from fastcommon import __main__ as command_line

PATCHED = expected_patch()
TESTED = ", ".join(helpers.TESTED_GRPCIO)  # the releases the registry's fingerprints name


# ------------------------------------------------------------------ python -m fastcommon: the status, check


def status_lines():
    """The lines of `python -m fastcommon` about what patch() does, by the name they start with."""
    return {line.split()[0]: line for line in helpers.status() if " in grpc." in line}


def test_status_shows_each_fingerprint_once_and_what_patch_does(monkeypatch):
    monkeypatch.setattr(grpc_common, "deserialize", zero_copy_deserialize)
    lines = status_lines()
    assert sorted(lines) == sorted([*FUNCTIONS, "_Metadatum", *METADATA_METHODS])
    for name, line in lines.items():  # each name as patch(), is_patched() and the report have it, then its home
        assert line.split()[1:3] == ["in", helpers.home(name)] and fastcommon.is_patched(name) is False
    replaces = "patch() replaces it"
    if fastcommon.IMPLEMENTATION == "python":
        replaces += ", which buys nothing: fastcommon runs pure Python here"
    encode = helpers.fingerprint(GRPC_ORACLE["encode"])
    assert lines["encode"].split()[3:] == ["fingerprint", encode, *replaces.split()]
    for name, own in GRPC_METADATA_ORIGINALS.items():  # grpc.aio's Metadata methods are gated by theirs too
        method = helpers.fingerprint(getattr(own, "__func__", own))
        assert lines[name].split()[3:5] == ["fingerprint", method]
    assert lines["_Metadatum"].split()[3:5] == ["fingerprint", "-"]  # a class, judged by shape
    changed = helpers.fingerprint(zero_copy_deserialize)
    assert lines["deserialize"].count(changed) == 1
    assert lines["deserialize"].endswith(
        "patch() leaves grpc's own: its code is not one fastcommon's suite ran against"
    )
    with pytest.warns(fastcommon.FastcommonWarning), fastcommon.patched():
        lines = status_lines()
    decode = helpers.fingerprint(GRPC_ORACLE["decode"])
    assert lines["decode"].split()[3:5] == ["fingerprint", decode]
    assert lines["decode"].endswith("fastcommon's, patched in this process")
    assert "patch() leaves grpc's own" in lines["deserialize"]


def test_check_passes_on_stock_grpc_with_the_compiled_module():
    result = helpers.python("-m", "fastcommon", "check")
    if fastcommon.IMPLEMENTATION == "python":
        assert result.returncode == 1
        assert result.stdout.startswith("fastcommon check: fastcommon runs pure Python, which buys nothing: ")
    else:
        assert (result.returncode, result.stdout) == (
            0,
            f"fastcommon check: patch() replaces {', '.join(PATCHED)} on grpcio {grpc.__version__}\n",
        )


def test_check_fails_with_a_line_per_function_left_to_grpc(monkeypatch):
    monkeypatch.setattr(grpc_common, "deserialize", zero_copy_deserialize)
    monkeypatch.setattr(grpc_common, "encode", MADE_UP_CHANGES["encode"])
    status, lines = helpers.check()
    assert status == 1
    if fastcommon.IMPLEMENTATION == "python":
        lines.pop(0)  # that it buys nothing, first
    assert lines == [
        "fastcommon check: encode (in grpc._common) stays grpc's: its code is not one fastcommon's suite ran against",
        "fastcommon check: deserialize (in grpc._common) stays grpc's: its code is not one fastcommon's suite ran"
        " against",
        f"fastcommon check: (grpcio {grpc.__version__}; fastcommon's suite ran against grpcio {TESTED})",
    ]


# ------------------------------------------------------------------ python -m fastcommon run


REPORTER = textwrap.dedent("""
    import json, sys
    import fastcommon
    from grpc import _common
    print(json.dumps({
        "argv": sys.argv, "name": __name__, "path0": sys.path[0], "file": __file__,
        "patched": fastcommon.is_patched() and _common.encode is fastcommon.encode,
    }))
""")


def fastcommon_run(*args, cwd, **kwargs):
    return helpers.python("-m", "fastcommon", "run", *args, cwd=cwd, **kwargs)


@pytest.fixture
def script(tmp_path):
    def write(source, name="app.py"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.mark.parametrize("as_module", [False, True], ids=["script", "module"])
def test_program_runs_patched_with_plain_pythons_argv_and_main(script, tmp_path, as_module):
    if as_module:
        (tmp_path / "pkg").mkdir()
        (tmp_path / "pkg" / "__init__.py").write_text("")
    path = script(REPORTER, name="pkg/tool.py" if as_module else "app.py")
    target = ["-m", "pkg.tool"] if as_module else ["app.py"]
    run = fastcommon_run(*target, "a", "--flag", "-m", cwd=tmp_path)
    plain = helpers.python(*target, "a", "--flag", "-m", cwd=tmp_path)
    assert run.returncode == plain.returncode == 0, run.stderr
    ran, expected = json.loads(run.stdout), json.loads(plain.stdout)
    assert ran.pop("patched") is True and expected.pop("patched") is False
    assert ran == expected
    assert ran["argv"] == [str(path) if as_module else "app.py", "a", "--flag", "-m"] and ran["name"] == "__main__"


def test_exit_code_is_the_programs(script, tmp_path):
    script("import sys\nsys.exit(7)\n")
    assert fastcommon_run("app.py", cwd=tmp_path).returncode == helpers.python("app.py", cwd=tmp_path).returncode == 7


@pytest.mark.parametrize("as_module", [False, True], ids=["script", "module"])
@pytest.mark.parametrize("error", ["ValueError('boom')", "KeyboardInterrupt"])
def test_uncaught_exception_reads_as_with_plain_python(script, tmp_path, error, as_module):
    script(f"""
        def inner():
            raise {error}

        inner()
    """)
    target = ["-m", "app"] if as_module else ["app.py"]
    run = fastcommon_run(*target, cwd=tmp_path)
    plain = helpers.python(*target, cwd=tmp_path)
    assert helpers.program_stderr(run.stderr) == helpers.program_stderr(plain.stderr) and "Traceback" in plain.stderr
    assert run.returncode == plain.returncode
    if sys.platform != "win32":  # Windows reports an uncaught KeyboardInterrupt as STATUS_CONTROL_C_EXIT
        assert plain.returncode == (1 if error.startswith("ValueError") else -signal.SIGINT)


def test_custom_excepthook_is_honoured(script, tmp_path):
    script("""
        import sys
        sys.excepthook = lambda kind, value, tb: print("hooked", kind.__name__, file=sys.stderr)
        raise RuntimeError
    """)
    run = fastcommon_run("app.py", cwd=tmp_path)
    assert (run.returncode, helpers.program_stderr(run.stderr)) == (1, "hooked RuntimeError\n")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals; on Windows the program runs as a child")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signals_end_the_program_as_with_plain_python(script, tmp_path, signum):
    script("""
        import signal, time
        # As from a terminal: a shell's background job (CI's, say) starts with SIGINT ignored, and python
        # keeps it ignored, with or without fastcommon.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("ready", flush=True)
        # Idle in short sleeps, not one long wait: a SIGINT that lands just before a blocking call begins
        # interrupts nothing, and Python raises KeyboardInterrupt only when the call returns.
        for _ in range(600):
            time.sleep(0.1)
    """)
    results = []
    for command in (["-m", "fastcommon", "run", "app.py"], ["app.py"]):
        with helpers.started(*command, cwd=tmp_path) as process:
            assert process.stdout.readline() == "ready\n"
            process.send_signal(signum)
            _, stderr = process.communicate(timeout=60)
        results.append((process.returncode, helpers.program_stderr(stderr).splitlines()[-1:]))
    assert results[0] == results[1]
    assert results[0][0] == -signum


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give a program to run: a file, -m MODULE, -c CODE or -"),
        (["--report"], "give a program to run"),
        (["--bogus", "app.py"], "unrecognized arguments: --bogus"),
        (["-m"], "argument -m: expected one argument"),
        (["-c"], "argument -c: expected one argument"),
    ],
)
def test_bad_usage_exits_2_with_a_short_message(tmp_path, args, message):
    result = fastcommon_run(*args, cwd=tmp_path)
    assert result.returncode == 2
    usage, error = result.stderr.splitlines()  # the subcommand's usage, then one line naming it
    assert usage == f"usage: {command_line.RUN_USAGE}"
    assert error.startswith("python -m fastcommon run: error: ") and message in error


def test_an_unknown_option_before_the_command_is_named(tmp_path):
    result = helpers.python("-m", "fastcommon", "--bogus", "app.py", cwd=tmp_path)
    usage, error = result.stderr.splitlines()
    assert (result.returncode, usage.split()[:4]) == (2, ["usage:", "python", "-m", "fastcommon"])
    assert error == "python -m fastcommon: error: unrecognized arguments: --bogus"


FLAGS = "import sys; print(sys.flags.dev_mode, sys.flags.optimize, sys.flags.dont_write_bytecode, sys.warnoptions)"


@pytest.mark.parametrize(
    "options",
    [["-X", "dev"], ["-Xdev"], ["-W", "error"], ["-Werror::DeprecationWarning"], ["-O"], ["-OO"], ["-u", "-B"],
     ["-uB"], ["-X", "dev", "-W", "ignore", "-O"]],
)  # fmt: skip
def test_pythons_own_options_after_run_reach_the_program_as_python_takes_them(tmp_path, options):
    run = fastcommon_run(*options, "-c", FLAGS, cwd=tmp_path)
    plain = helpers.python(*options, "-c", FLAGS, cwd=tmp_path)
    assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout) and run.returncode == 0, run.stderr


@pytest.mark.parametrize("options", [["-E"], ["-I"], ["-S"], ["-uE"], ["-X", "dev", "-S"]])
def test_pythons_options_that_would_skip_the_bootstrap_are_refused_in_one_line(tmp_path, options):
    result = fastcommon_run(*options, "-c", "print(1)", cwd=tmp_path)
    usage, error = result.stderr.splitlines()
    assert (result.returncode, result.stdout, usage) == (2, "", f"usage: {command_line.RUN_USAGE}")
    assert error == (
        "python -m fastcommon run: error: cannot adopt a program under -E, -I or -S: Python would ignore PYTHONPATH"
        " or sitecustomize"
    )


@pytest.mark.parametrize("option", ["-X", "-W"])
def test_a_python_option_without_its_value_is_named(tmp_path, option):
    result = fastcommon_run(option, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.splitlines()[-1].endswith(
        f"argument {option}: expected one argument"
    )


PROGRAMS = {  # what python takes as a program, and what it refuses in its own words: (arguments, stdin)
    "a folder with __main__.py": (["folder", "x"], None),
    "a folder without": (["empty"], None),
    "a missing file": (["missing.py"], None),
    "a missing module": (["-m", "no_such_module_here"], None),
    "a missing submodule": (["-m", "pkg.no_such_module"], None),
    "code": (["-c", "import sys; print(sys.argv)", "x", "-m"], None),
    "attached code": (["-cimport sys; print(sys.argv)", "y"], None),
    "stdin": (["-", "a", "--port"], "import sys; print('from stdin', sys.argv)"),
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_program_is_what_python_takes_and_its_refusals_are_pythons(tmp_path, launch, program):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "__main__.py").write_text("import sys\nprint('folder', sys.argv)\nsys.exit(4)\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    args, stdin = PROGRAMS[program]
    run = helpers.python(*launch, "run", *args, cwd=tmp_path, input=stdin)
    plain = helpers.python(*args, cwd=tmp_path, input=stdin)
    assert (run.returncode, run.stdout, helpers.program_stderr(run.stderr)) == (
        plain.returncode,
        plain.stdout,
        helpers.program_stderr(plain.stderr),
    )
    assert plain.stdout or plain.stderr, "python ran it, or refused it"


ARGV = json.dumps  # what the program prints: its sys.argv[1:]
SHAPES = {  # what a user types after the program: every option belongs to the program, python's rule
    "service options": ["--port", "50051", "-q"],
    "help": ["-h"],
    "fastcommon's own option names": ["--report", "--help"],
    "-m and --": ["-m", "x", "--", "--port"],
    "nothing": [],
}
# Windows has no exec: there `run` starts the program as a child and passes on its status; tried here too.
CHILD_LAUNCH = (
    "import sys; from fastcommon import __main__, _launcher; _launcher.REPLACE_PROCESS = False; __main__.main()"
)


@pytest.fixture(params=["exec", "child"])
def launch(request):
    """The command that runs `python -m fastcommon`, through each of the two ways run launches a program."""
    return ["-m", "fastcommon"] if request.param == "exec" else ["-c", CHILD_LAUNCH]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize(
    "before, target",
    [
        ([], ["app.py"]),
        ([], ["-m", "pkg.app"]),
        (["--report"], ["-m", "pkg.app"]),
        ([], ["-mpkg.app"]),
        (["--"], ["app.py"]),
    ],
    ids=["script", "module", "report-module", "attached-module", "dashdash-script"],
)
def test_everything_after_the_program_reaches_it_verbatim(tmp_path, launch, shape, before, target):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    program = "import json, sys\nprint(json.dumps(sys.argv[1:]))\nsys.exit(5)\n"
    (tmp_path / "app.py").write_text(program)
    (tmp_path / "pkg" / "app.py").write_text(program)
    args = SHAPES[shape]
    run = helpers.python(*launch, "run", *before, *target, *args, cwd=tmp_path)
    plain = helpers.python(*target, *args, cwd=tmp_path)
    assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout) == (5, ARGV(args) + "\n"), run.stderr


def test_the_documented_example_runs_a_module_with_its_options(tmp_path, launch):
    # docs/adoption.md: python -m fastcommon run -m mycompany.server --port 50051
    (tmp_path / "mycompany").mkdir()
    (tmp_path / "mycompany" / "__init__.py").write_text("")
    (tmp_path / "mycompany" / "server.py").write_text(
        "import argparse, fastcommon, grpc\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--port', type=int)\n"
        "print(parser.parse_args().port, fastcommon.is_patched('decode'))\n"
    )
    result = helpers.python(*launch, "run", "-m", "mycompany.server", "--port", "50051", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "50051 True\n"), result.stderr


HELP = {  # each command's usage, and a line of its examples
    "": (None, "  python -m fastcommon run -m mycompany.server --port 50051"),
    "run": (command_line.RUN_USAGE, "  python -m fastcommon run -m mycompany.server --port 50051"),
    "compare": (command_line.COMPARE_USAGE, "examples:\n  python -m fastcommon compare -m pytest -q tests"),
}


@pytest.mark.parametrize("command", sorted(HELP), ids=lambda command: command or "fastcommon")
def test_help_describes_and_gives_examples(tmp_path, command):
    result = helpers.python("-m", "fastcommon", *command.split(), "--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    assert "``" not in result.stdout and "\nexamples:\n" in result.stdout
    usage, example = HELP[command]
    assert f"\n{example}\n" in result.stdout
    if usage:
        assert result.stdout.startswith(f"usage: {usage}")
    else:
        assert re.search(r"^    compare +run a program stock, then patched", result.stdout, re.MULTILINE)


def test_version_and_every_commands_help_describe_it(tmp_path):
    import fastcommon

    result = helpers.python("-m", "fastcommon", "--version", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"fastcommon {fastcommon.__version__}\n", "")
    for command in ("check", "run", "compare"):
        result = helpers.python("-m", "fastcommon", command, "--help", cwd=tmp_path)
        usage, description = result.stdout.split("\n\n")[:2]
        assert result.returncode == 0 and usage.startswith(f"usage: python -m fastcommon {command}") and description


@pytest.mark.parametrize("value", ["error::ImportWarning", "ignore::SyntaxWarning", "default:Invalid:UserWarning"])
def test_a_warning_filter_that_holds_an_e_i_or_s_is_not_taken_for_minus_e_i_or_s(tmp_path, value):
    result = helpers.python(
        "-m", "fastcommon", "run", "-W", value, "-c", "import sys; print(sys.warnoptions)", cwd=tmp_path
    )
    assert (result.returncode, result.stdout) == (0, f"{[value]}\n"), result.stderr


def test_a_closed_pipe_ends_the_status_quietly(tmp_path):
    result = helpers.python("-m", "fastcommon", closed_stdout=True)
    assert (result.returncode, result.stderr) == (1, "")


def test_a_grpc_server_program_serves_patched(stubs, tmp_path):
    pb2, pb2_grpc = stubs
    stub_dir = os.path.dirname(pb2.__file__)
    env = {"PYTHONPATH": os.pathsep.join([helpers.PROJECT_DIR, os.environ.get("PYTHONPATH", "")])}
    served = os.path.join(helpers.TESTS_DIR, "served_app.py")
    with helpers.started(
        "-m", "fastcommon", "run", served, stub_dir, cwd=tmp_path, env=env, stdin=subprocess.PIPE
    ) as process:
        port = process.stdout.readline().strip()
        assert port.isdigit(), process.stderr.read() if process.poll() is not None else port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb2_grpc.EchoServiceStub(channel)
            assert stub.Unary(pb2.Echo(text="hi")).text == f"patched=True argv=[{stub_dir!r}] name=__main__"
        _, stderr = process.communicate(timeout=60)  # closes stdin: the program stops serving and exits
        assert process.returncode == 3, stderr


# ------------------------------------------------------------------ python -m fastcommon compare


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


@pytest.mark.parametrize("given", [None, "", "their_plugin"])
def test_a_pytest_that_the_suite_runs_records_nothing_and_sees_pytest_plugins_as_given(folder, given):
    (folder / "inner").mkdir()
    write(folder, "inner/test_inner.py", "def test_inner():\n    pass\n")
    write(folder, "their_plugin.py", "")
    write(
        folder,
        "test_outer.py",
        f"""
        import os, subprocess, sys

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
        folder, "test_it.py", 'import os\n\ndef test_it():\n    assert os.environ["PYTEST_PLUGINS"] == "their_plugin"'
    )
    result = compare(*PYTEST, "test_it.py", cwd=folder)
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


def test_a_closed_pipe_ends_quietly(folder):
    result = helpers.python("-m", "fastcommon", "compare", "-c", "pass", cwd=folder, closed_stdout=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr and "Error" not in result.stderr


# ------------------------------------------------------------------ example.py


@pytest.mark.parametrize("command", [[], ["-m", "fastcommon", "run"]], ids=["python", "run"])
def test_the_example_serves_and_says_so(tmp_path, command):
    # As its docstring says: python example.py, or python -m fastcommon run example.py, from anywhere
    result = helpers.python(*command, os.path.join(helpers.PROJECT_DIR, "example.py"), cwd=tmp_path, check_status=0)
    assert result.stdout == "11 headers received; grpc patched: True\n"  # its ten headers, and the user-agent
