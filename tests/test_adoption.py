"""`python -m fastcommon run`: every Python process of a program is patched, when it imports grpc, not before."""

import glob
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import NEEDS_GRPCIO, expected_patch

pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers

import fastcommon
from grpc_echo import counting_calls

START_METHODS = [
    method for method in ("spawn", "forkserver", "fork") if method in multiprocessing.get_all_start_methods()
]

# What a process says about itself, as one JSON line: its pid and whether grpc is patched in it.
SAY_PATCHED = """
def say_patched(label):
    import json, os, grpc, fastcommon
    from fastcommon._registry import NAMES
    names = [name for name in NAMES if fastcommon.is_patched(name)]
    return json.dumps({"label": label, "pid": os.getpid(), "patched": names})
"""
PATCHED = list(expected_patch())  # what the tests expect, written out in conftest

# A process's block on stderr: three lines, of at most WIDTH characters.
REPORT_BLOCK = re.compile(
    r"fastcommon --report, process (?P<pid>\d+) \(grpcio (?P<grpcio>[^,]+), (?P<implementation>compiled|pure Python)\)"
    r"(?P<ended>, ended by SIGTERM)?: (?P<patched>\d+) of (?P<names>\d+) names patched"
    r"(?:, (?P<left>\d+) left to grpc: (?P<left_names>.*))?\n"
    r"  calls: (?P<calls>.*)\n"
    r"  saved: (?P<saved>.*)\n"
)
CALLS = re.compile(
    r"(?P<listed>.*?)(?: \(\+(?P<more>\d+) more\))?(?: \((?P<uncalled>\d+) of (?P<of>\d+) not called\))?"
)
WIDTH = 160


def reports(stderr):
    """{pid: {name: calls}} from the --report blocks in a program's stderr: the names called (as patch() and
    is_patched() name them), most called first; checked for shape and arithmetic on the way."""
    found = {}
    for block in REPORT_BLOCK.finditer(stderr):
        assert all(len(line) <= WIDTH for line in block[0].splitlines()), block[0]
        patched, left = int(block["patched"]), int(block["left"] or 0)
        assert patched + left == int(block["names"]) == len(helpers.NAMES)
        calls = CALLS.fullmatch(block["calls"])
        listed = [] if calls["listed"] == "none" else re.findall(r"([\w.]+) (\d{1,3}(?:,\d{3})*)", calls["listed"])
        counts = {name: int(count.replace(",", "")) for name, count in listed}
        assert len(counts) == len(listed) and set(counts) <= set(helpers.NAMES)  # each name once
        assert list(counts.values()) == sorted(counts.values(), reverse=True) and 0 not in counts.values()
        if calls["listed"] != "none":  # what is shown and what is not add up to what is patched
            assert len(counts) + int(calls["more"] or 0) + int(calls["uncalled"] or 0) == patched
            assert calls["of"] in (None, block["patched"])
        assert ("per call" in block["saved"]) <= bool(counts)
        found[int(block["pid"])] = counts
    return found


@pytest.fixture
def program(tmp_path):
    """Write a program (with say_patched defined) into tmp_path; returns a function that runs it, plainly or adopted."""

    def run(source, *args, fastcommon_run=True, report=False, env=None, name="app.py"):
        (tmp_path / name).write_text(SAY_PATCHED + textwrap.dedent(source))
        launcher = ["-m", "fastcommon", "run", *(["--report"] if report else [])] if fastcommon_run else []
        environ = {"PYTHONPATH": helpers.PROJECT_DIR, **(env or {})}
        return helpers.python(*launcher, name, *args, cwd=tmp_path, env=environ, check_status=0)

    return run


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
    reported = reports(result.stderr)
    for line in said:  # each worker printed its own block as it exited, with its own calls
        assert reported[line["pid"]]["serialize"] == 1 and reported[line["pid"]]["deserialize"] == 1


@pytest.mark.parametrize("fork", ["os.fork", "multiprocessing"])
def test_a_fork_child_of_a_patched_parent_reports_only_its_own_calls(program, fork):
    if "fork" not in START_METHODS:
        pytest.skip("no fork on this platform")
    result = program(
        """
        import multiprocessing, os, sys
        from grpc import _common  # patched here, in the parent, before the fork

        def child():
            for _ in range(3):
                _common.decode(b"child")
            print(os.getpid(), flush=True)

        if __name__ == "__main__":
            for _ in range(7):
                _common.decode(b"parent")
            if sys.argv[1] == "multiprocessing":  # the child ends in os._exit, past atexit
                worker = multiprocessing.get_context("fork").Process(target=child)
                worker.start()
                worker.join(timeout=60)
            elif os.fork() == 0:
                child()  # and then ends as the script does: atexit prints its block
                sys.exit(0)
            else:
                os.wait()
    """,
        fork,
        report=True,
    )
    child = int(result.stdout.split()[0])
    reported = reports(result.stderr)
    assert reported.pop(child)["decode"] == 3
    assert [calls["decode"] for calls in reported.values()] == [7]


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


@pytest.mark.parametrize("rpcs", [(5, 25)])
def test_report_counts_match_a_known_workload(program, stubs, channel, server_address, rpcs):
    pb2, pb2_grpc = stubs
    stub = pb2_grpc.EchoServiceStub(channel)
    stub.Unary(pb2.Echo(text="warm-up"))
    with counting_calls() as counted:
        stub.Unary(pb2.Echo(text="counted"))
    per_rpc = {name: counted["client", name] for name in PATCHED}
    assert per_rpc["decode"] >= 1 and per_rpc["serialize"] == per_rpc["deserialize"] == 1

    def client_calls(n):
        result = program(
            """
            import sys, grpc
            from grpc_echo import import_stubs
            pb2, pb2_grpc = import_stubs(sys.argv[1])
            with grpc.insecure_channel(sys.argv[2]) as channel:
                stub = pb2_grpc.EchoServiceStub(channel)
                for _ in range(int(sys.argv[3])):
                    stub.Unary(pb2.Echo(text="x"))
        """,
            os.path.dirname(pb2.__file__),
            server_address,
            str(n),
            report=True,
        )
        [calls] = reports(result.stderr).values()
        return calls

    few, many = (client_calls(n) for n in rpcs)
    assert {name: many.get(name, 0) - few.get(name, 0) for name in PATCHED} == {
        name: (rpcs[1] - rpcs[0]) * per_rpc[name] for name in PATCHED
    }


def test_a_failing_serializers_record_reads_the_same_with_report_as_without(program):
    # The record's location and traceback come from the innermost Python frame: a counting layer in
    # Python would put itself there; the compiled module counts in C.
    source = """
        import json, logging
        from grpc import _common

        class Show(logging.Handler):
            def emit(self, record):
                print(json.dumps([record.pathname, record.lineno, record.funcName, record.module,
                                  record.getMessage(), logging.Formatter().formatException(record.exc_info)]))

        logging.getLogger("grpc._common").addHandler(Show())

        def serialize_request(message):
            raise ValueError("cannot serialize " + message)

        def send(message):  # as grpc's own modules call it
            return _common.serialize(message, serialize_request)

        assert send("x") is None
    """
    without, counted = program(source), program(source, report=True)
    assert "fastcommon --report" in counted.stderr and "fastcommon --report" not in without.stderr
    [record] = lines_of_lists(without)
    assert lines_of_lists(counted) == [record]
    assert record[2:5] == (
        ["send", "app", "Exception serializing message!"]
        if fastcommon.IMPLEMENTATION == "cython"
        else ["_transform", "common", "Exception serializing message!"]
    )
    assert "ValueError: cannot serialize x" in record[5] and "_report" not in record[5] and "_launcher" not in record[5]


def lines_of_lists(result):
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]


def test_a_failure_to_patch_warns_and_leaves_the_program_running(monkeypatch):
    def broken(replacement):
        raise RuntimeError("broken")

    helpers.break_patching(monkeypatch, broken)
    monkeypatch.setenv(helpers.REPORT_VARIABLE, "1")
    with pytest.warns(fastcommon.FastcommonWarning, match="could not patch grpc: RuntimeError"):
        helpers.grpc_imported()


def test_the_documented_service_runs_and_each_process_reports(tmp_path):
    # README and docs/adoption.md: python -m fastcommon run --report -m grpc_echo.service 2000 (here 5 RPCs)
    result = helpers.python("-m", "fastcommon", "run", "--report", "-m", "grpc_echo.service", "5", cwd=tmp_path,
                            env={"PYTHONPATH": helpers.PROJECT_DIR})  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "5 RPCs made; the server exited with 0\n"), result.stderr
    server, client = reports(result.stderr).values()  # the server's block first: it exits first
    headers = 10 + 1  # the service's request headers, and the user-agent
    assert (server["deserialize"], server["serialize"], server.get("_Metadatum")) == (
        5,
        5,
        5 * headers if "_Metadatum" in PATCHED else None,
    )
    assert (client["serialize"], client["deserialize"], client["decode"]) == (5, 5, 10)
