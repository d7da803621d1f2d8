"""`python -m fastcommon run`: every Python process of a program is patched, when it imports grpc, not before."""

import glob
import json
import multiprocessing
import os
import shutil
import subprocess
import sys

import pytest
from changed_grpc import grpcio_with_a_line_added
from conftest import NEEDS_GRPCIO, SAY_PATCHED, expected_patch

pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers

import fastcommon

START_METHODS = [
    method for method in ("spawn", "forkserver", "fork") if method in multiprocessing.get_all_start_methods()
]

PATCHED = list(expected_patch())  # what the tests expect, written out in conftest


def lines_of(result):
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("pythons_own", [False, True], ids=["no-sitecustomize", "a-sitecustomize-of-its-own"])
def test_nothing_is_imported_before_the_program_imports_it(program, tmp_path, pythons_own):
    # Debian's and Ubuntu's Pythons have a sitecustomize of their own; so may the Python running this.
    env = None
    if pythons_own:
        (tmp_path / "system").mkdir()
        (tmp_path / "system" / "sitecustomize.py").write_text("import json, sys\nsys.system_sitecustomize = 1\n")
        env = {"PYTHONPATH": os.pathsep.join([helpers.PROJECT_DIR, str(tmp_path / "system")])}
    source = """
        import json, sys
        assert "grpc" not in sys.modules and "fastcommon" not in sys.modules
        print(json.dumps({"modules": sorted(sys.modules), "sitecustomize": sys.modules["sitecustomize"].__file__
                          if "sitecustomize" in sys.modules else None}))
    """
    plain, adopted = (json.loads(program(source, fastcommon_run=run, env=env).stdout) for run in (False, True))
    if plain["sitecustomize"] is None:  # adoption added its bootstrap, and nothing else
        assert set(adopted["modules"]) - set(plain["modules"]) == {"sitecustomize"}
        assert adopted["sitecustomize"] == os.path.join(helpers.BOOTSTRAP_DIR, "sitecustomize.py")
    else:  # the Python's own ran, and is the sitecustomize the program sees; adoption added nothing
        assert adopted["modules"] == plain["modules"] and adopted["sitecustomize"] == plain["sitecustomize"]
    assert pythons_own is False or plain["sitecustomize"] == str(tmp_path / "system" / "sitecustomize.py")


def test_a_program_that_never_imports_grpc_never_loads_it(program):
    result = program(
        """
        import sys, json
        print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("grpc", "fastcommon"))))
    """,
        report=True,
    )
    assert json.loads(result.stdout) == [] and "fastcommon --report" not in result.stderr


def test_grpc_is_patched_when_the_program_imports_it(program):
    result = program("""
        import sys
        assert "grpc" not in sys.modules
        print(say_patched("main"))
        from grpc import _common
        import fastcommon
        assert _common.decode is fastcommon.decode  # no counting wrapper without --report
    """)
    assert lines_of(result) == [{"label": "main", "pid": lines_of(result)[0]["pid"], "patched": PATCHED}]


def test_a_program_that_calls_patch_itself_gets_grpc_patched_once(program):
    # Its patch() imports grpc, whose import patches grpc from inside that call: no deadlock, no second patch.
    result = program("""
        import json, fastcommon
        replaced = fastcommon.patch()
        print(json.dumps({"replaced": list(replaced), "patched": fastcommon.is_patched()}))
    """)
    assert lines_of(result) == [{"replaced": [], "patched": True}]


@pytest.mark.parametrize("method", START_METHODS)
def test_multiprocessing_workers_are_patched_and_make_real_rpcs(program, stubs, server_address, method):
    stubs_dir = os.path.dirname(stubs[0].__file__)
    result = program(
        """
        import multiprocessing, sys

        def work(address, stubs_dir, queue):
            import grpc
            from grpc_echo import import_stubs
            pb2, pb2_grpc = import_stubs(stubs_dir)
            with grpc.insecure_channel(address) as channel:
                reply = pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="from a worker"), timeout=60)
            queue.put(say_patched(reply.text))

        if __name__ == "__main__":
            assert "grpc" not in sys.modules  # fork children inherit the import hook, not a patched grpc
            method, address, stubs_dir = sys.argv[1:]
            context = multiprocessing.get_context(method)
            queue = context.Queue()
            workers = [context.Process(target=work, args=(address, stubs_dir, queue)) for _ in range(2)]
            for worker in workers:
                worker.start()
            print("\\n".join(queue.get(timeout=120) for _ in workers))
            for worker in workers:
                worker.join(timeout=120)
                assert worker.exitcode == 0
    """,
        method,
        server_address,
        stubs_dir,
        report=True,
    )
    said = lines_of(result)
    assert [(line["label"], line["patched"]) for line in said] == [("from a worker", PATCHED)] * 2
    reported = helpers.reports(result.stderr)
    for line in said:  # each worker printed its own block as it exited, with its own calls
        assert reported[line["pid"]]["serialize"] == 1 and reported[line["pid"]]["deserialize"] == 1


def test_subprocess_children_are_patched_and_a_cleared_environment_is_not(program):
    child = SAY_PATCHED + "print(say_patched(__import__('sys').argv[1]))"
    result = program(
        """
        import os, subprocess, sys
        child = sys.argv[1]
        print(subprocess.run([sys.executable, "-c", child, "child"], capture_output=True, text=True).stdout)
        # Rebuilt without fastcommon's variables; what the machine needs to start python at all (PATH, a
        # sanitizer's LD_PRELOAD) stays.
        cleared = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FASTCOMMON_REPORT")}
        cleared["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep)[-1]
        run = subprocess.run([sys.executable, "-c", child, "cleared"], env=cleared, capture_output=True, text=True)
        print(run.stdout)
    """,
        child,
    )
    assert [(line["label"], line["patched"]) for line in lines_of(result)] == [("child", PATCHED), ("cleared", [])]


def test_the_programs_own_sitecustomize_still_runs(program, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import sys\nsys.own_sitecustomize_ran = __file__\n")
    result = program(
        """
        import sys, json
        print(json.dumps({"ran": getattr(sys, "own_sitecustomize_ran", None),
                          "module": sys.modules["sitecustomize"].__file__}))
        print(say_patched("main"))
    """,
        env={"PYTHONPATH": os.pathsep.join([str(own), helpers.PROJECT_DIR])},
    )
    ran, said = lines_of(result)
    assert ran == {"ran": str(own / "sitecustomize.py"), "module": str(own / "sitecustomize.py")}
    assert said["patched"] == PATCHED


def test_a_failing_sitecustomize_of_the_program_fails_as_without_fastcommon(program, tmp_path):
    # It runs twice: in the launcher (`python -m fastcommon` is a Python start-up too), then in the program.
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import no_such_module_anywhere\n")
    env = {"PYTHONPATH": os.pathsep.join([str(own), helpers.PROJECT_DIR])}
    plain = program("print('ran')", fastcommon_run=False, env=env)
    adopted = program("print('ran')", env=env)
    assert adopted.stdout == plain.stdout == "ran\n"
    assert adopted.stderr == 2 * plain.stderr and "Error in sitecustomize" in plain.stderr


def test_a_pure_python_install_warns_once_in_each_process_that_imports_grpc_and_not_in_the_launcher(tmp_path):
    package = tmp_path / "fastcommon"
    shutil.copytree(
        os.path.dirname(fastcommon.__file__), package, ignore=shutil.ignore_patterns("__pycache__", "*.txt")
    )
    for compiled in package.glob("fast_common.*"):
        if compiled.suffix in (".so", ".pyd"):
            compiled.unlink()  # as a failed build leaves it
    environ = {"PYTHONPATH": str(tmp_path), "FASTCOMMON_PURE_PYTHON": None}
    for program, expected in (("import grpc, fastcommon; print(fastcommon.is_patched())", 1), ("print(False)", 0)):
        result = helpers.python("-W", "always", "-m", "fastcommon", "run", "-c", program, cwd=tmp_path, env=environ)
        assert result.returncode == 0, result.stderr
        assert (
            helpers.program_stderr(result.stderr).count(": FastcommonWarning: fastcommon is running pure Python")
            == expected
        )


LEFT_TO_GRPC = ": FastcommonWarning: fastcommon leaves encode in grpc._common (its code is not one"


@pytest.mark.parametrize("patching", [["-c"], ["-m", "fastcommon", "run", "-c"]], ids=["patch()", "run"])
@pytest.mark.parametrize("errors", [["-W", "error"], ["PYTHONWARNINGS=error"]], ids=["-W error", "PYTHONWARNINGS"])
def test_warnings_as_errors_never_break_a_program(tmp_path, patching, errors):
    """On a grpcio the gate does not wholly know, with warnings made errors: the program runs as it does stock, the
    names the gate knows patched; the one warning is shown, not raised (patch() and `import grpc` raise nothing)."""
    options = errors if errors[0] == "-W" else []
    env = {"PYTHONPATH": grpcio_with_a_line_added(tmp_path), "PYTHONWARNINGS": None if options else "error"}
    code = "import grpc, fastcommon; {}print(fastcommon.is_patched('decode'), fastcommon.is_patched('encode'))"
    stock = helpers.python(*options, "-c", code.format(""), cwd=tmp_path, env=env, check_status=0)
    assert (stock.stdout, helpers.program_stderr(stock.stderr)) == ("False False\n", "")
    patch = "" if "run" in patching else "fastcommon.patch(); "
    result = helpers.python(*options, *patching, code.format(patch), cwd=tmp_path, env=env, check_status=0)
    assert result.stdout == "True False\n"
    assert helpers.program_stderr(result.stderr).count(LEFT_TO_GRPC) == 1


def test_a_pytest_suite_with_warnings_as_errors_runs_under_run(tmp_path):
    """pytest's filterwarnings = error, a grpcio the gate does not wholly know: the suite passes under run as stock,
    fastcommon's warning in pytest's summary."""
    env = {"PYTHONPATH": grpcio_with_a_line_added(tmp_path / "grpcio")}
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (tmp_path / "test_app.py").write_text("import grpc\nimport fastcommon\n\n\ndef test_app():\n    assert grpc\n")
    for launcher in ([], ["-m", "fastcommon", "run"]):
        result = helpers.python(*launcher, "-m", "pytest", "-p", "no:cacheprovider", cwd=tmp_path, env=env)
        assert result.returncode == 0 and " 1 passed" in result.stdout, result.stdout[-3000:]
        assert result.stdout.count("FastcommonWarning: fastcommon leaves encode") == len(launcher) // 3


def other_interpreters():
    """CPythons of other minor versions than this one (pyenv's, and python3.N on PATH): none has this fastcommon."""
    this = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = {}
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        for python in glob.glob(os.path.join(root, "versions", "*", "bin", "python")):
            found[".".join(python.split(os.sep)[-3].split(".")[:2])] = python
    for minor in range(6, 20):  # a system's own, as Debian installs them (python3.14, python3.15)
        python = shutil.which(f"python3.{minor}")
        if python is not None and f"{os.sep}shims{os.sep}" not in python:  # pyenv's shims: its versions, above
            found.setdefault(f"3.{minor}", python)
    return sorted(python for version, python in found.items() if version != this)


def test_a_child_of_another_interpreter_runs_unpatched_and_unharmed(program):
    interpreters = other_interpreters()
    if not interpreters:
        pytest.skip("no other CPython here (pyenv, or python3.N on PATH)")
    result = program(
        """
        import json, subprocess, sys
        code = "import sys; print('%d %s' % (sys.version_info[0], 'sitecustomize' in sys.modules))"  # Python 2 too
        for python in sys.argv[1:]:
            child = subprocess.run([python, "-c", code], capture_output=True, text=True)
            print(json.dumps([python, child.returncode, child.stdout.split(), child.stderr]))
    """,
        *interpreters,
    )
    ran = [json.loads(line) for line in result.stdout.splitlines()]
    assert [python for python, _, _, _ in ran] == interpreters
    for python, returncode, stdout, stderr in ran:
        assert (returncode, stdout[1:], stderr) == (0, ["True"], ""), python  # our bootstrap ran, harmlessly


def test_a_failure_to_patch_warns_and_leaves_the_program_running(monkeypatch):
    def broken(replacement):
        raise RuntimeError("broken")

    helpers.break_patching(monkeypatch, broken)
    monkeypatch.setenv(helpers.REPORT_VARIABLE, "1")
    with pytest.warns(fastcommon.FastcommonWarning, match="could not patch grpc: RuntimeError"):
        helpers.grpc_imported()
