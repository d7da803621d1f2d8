"""The command line: `python -m fastcommon` (the status, check, --version, --help); `run`, whose program runs patched
and otherwise as with plain `python` (its argv, python's options, refusals, exit statuses, signals); and example.py,
run both ways. `compare`: test_compare.py."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import NEEDS_GRPCIO

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers
from changed_grpc import MADE_UP_CHANGES, zero_copy_deserialize
from conftest import FUNCTIONS, GRPC_METADATA_ORIGINALS, GRPC_ORACLE, HOOKS, METADATA_METHODS, expected_patch
from grpc import _common as grpc_common

import fastcommon
from fastcommon import __main__ as command_line

PATCHED = expected_patch()
TESTED = ", ".join(helpers.TESTED_GRPCIO)  # the releases the registry's fingerprints name


# ------------------------------------------------------------------ python -m fastcommon: the status, check


def status_lines():
    """The lines of `python -m fastcommon` about what patch() does, by the name they start with."""
    return {line.split()[0]: line for line in helpers.status() if line.split()[1:2] == ["in"]}


def test_status_shows_each_fingerprint_once_and_what_patch_does(monkeypatch):
    monkeypatch.setattr(grpc_common, "deserialize", zero_copy_deserialize)
    lines = status_lines()
    assert sorted(lines) == sorted([*FUNCTIONS, "_Metadatum", *METADATA_METHODS, *HOOKS])
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


# ------------------------------------------------------------------ example.py


@pytest.mark.parametrize("command", [[], ["-m", "fastcommon", "run"]], ids=["python", "run"])
def test_the_example_serves_and_says_so(tmp_path, command):
    # As its docstring says: python example.py, or python -m fastcommon run example.py, from anywhere
    result = helpers.python(*command, os.path.join(helpers.PROJECT_DIR, "example.py"), cwd=tmp_path, check_status=0)
    assert result.stdout == "10 headers received; grpc patched: True\n"  # its ten, grpc's user-agent aside
