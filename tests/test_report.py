"""`run --report` and `--report-file` where servers end: by SIGTERM, in containers and under supervisors, in many
processes at once; each process reports once, and ends as it would have without fastcommon."""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from conftest import NEEDS_GRPCIO
from test_adoption import REPORT_BLOCK, reports
from test_run import GRPC_CORE_LOG_LINE

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals; on Windows the program runs as a child")
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A gRPC server, as a service runs one: it prints its port, its pid and whether SIGTERM is at its default, then
# waits until a signal ends it. With "own", it has a SIGTERM handler of its own that exits with status 7; with
# "child", it runs the same server as a subprocess child, passes the child's line on, then the child's status.
SERVER = textwrap.dedent("""
    import os, signal, subprocess, sys, threading
    if sys.argv[1] == "child":
        command = [sys.executable, __file__, "default", *sys.argv[2:]]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        print(child.stdout.readline().strip(), flush=True)
        print("child status", child.wait(), flush=True)
        sys.exit(0)
    if sys.argv[1] == "own":
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))
    from grpc_echo import echo_server, import_stubs
    pb2, pb2_grpc = import_stubs(sys.argv[2])
    # The kernel may hand a signal sent to the process to any thread that does not block it, and CPython runs a
    # Python handler in the main thread only: one of grpc's threads taking SIGINT would leave the main thread's
    # wait waiting. grpc's threads, made while the main thread blocks both, block them too.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    with echo_server(pb2, pb2_grpc) as address:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        default = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        print(address.rsplit(":", 1)[1], os.getpid(), default, flush=True)
        threading.Event().wait()
""")


def serve_then_signal(tmp_path, stubs, mode, launcher, signum=signal.SIGTERM, env=None):
    """Run SERVER, make one RPC to it, send ``signum`` to the process serving; its status, stdout and stderr."""
    pb2, pb2_grpc = stubs
    (tmp_path / "server.py").write_text(SERVER)
    environ = {**os.environ, "PYTHONPATH": PROJECT_DIR, **(env or {})}
    command = [sys.executable, *launcher, "server.py", mode, os.path.dirname(pb2.__file__)]
    process = subprocess.Popen(command, cwd=tmp_path, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    serving = None
    try:
        first = process.stdout.readline()
        port, serving, _ = first.split()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="x"), timeout=30).text == "x"
        os.kill(int(serving), signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
        if serving is not None and int(serving) != process.pid:  # a child server outlives a failed test otherwise
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(serving), signal.SIGKILL)
    default = first.split()[2] == "True"  # SIGTERM at its default, as the serving program saw it
    return process.returncode, stdout, GRPC_CORE_LOG_LINE.sub("", stderr), default


REPORT_RUN = ["-m", "fastcommon", "run", "--report"]


@pytest.mark.parametrize("mode", ["default", "own", "child"])
def test_a_server_ended_by_sigterm_reports_and_ends_as_without_fastcommon(tmp_path, stubs, mode):
    plain = serve_then_signal(tmp_path, stubs, mode, [])
    adopted = serve_then_signal(tmp_path, stubs, mode, REPORT_RUN)
    assert adopted[:2] == plain[:2]  # the status the parent sees, and what the program printed
    # The one thing a program sees: a handler of fastcommon's where it left SIGTERM at its default (and grpc
    # imported), so that it reports first. One it sets itself stays its own.
    assert (plain[3], adopted[3]) == ((True, False) if mode != "own" else (False, False))
    assert plain[0] == {"default": -signal.SIGTERM, "own": 7, "child": 0}[mode]
    assert "child status -15" in plain[1] or mode != "child"
    [calls] = reports(adopted[2]).values()  # one block: the serving process's (a child's own, for "child")
    assert calls["serialize"] == calls["deserialize"] == 1
    ended_by_sigterm = bool(REPORT_BLOCK.search(adopted[2])["ended"])
    assert ended_by_sigterm == (mode != "own")  # a program's own handler exits, and the report comes at exit


# SIGTERM taken by a thread other than the main one, while the main thread waits with no timeout: at SIGTERM's
# default the process ends; under --report, the compiled module's relay wakes the main thread to report first.
OTHER_THREAD_TAKES_SIGTERM = textwrap.dedent("""
    import grpc, signal, sys, threading

    def take_sigterm():
        sys.stdin.readline()
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    threading.Thread(target=take_sigterm, daemon=True).start()
    print("waiting", flush=True)
    threading.Event().wait()
""")


@pytest.mark.skipif(not helpers.SIGTERM_RELAY, reason="a pure-Python install has no relay: docs/adoption.md")
@pytest.mark.parametrize("launcher", [[], REPORT_RUN], ids=["plain", "report"])
def test_sigterm_taken_by_another_thread_ends_the_process_as_at_its_default(tmp_path, launcher):
    (tmp_path / "app.py").write_text(OTHER_THREAD_TAKES_SIGTERM)
    environ = {**os.environ, "PYTHONPATH": PROJECT_DIR}
    process = subprocess.Popen([sys.executable, *launcher, "app.py"], cwd=tmp_path, env=environ, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert process.stdout.readline() == "waiting\n"  # the main thread is about to wait, or waits
        _, stderr = process.communicate("go\n", timeout=120)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM
    assert bool(reports(stderr)) == bool(launcher) and (not launcher or REPORT_BLOCK.search(stderr)["ended"])


@pytest.mark.skipif(not helpers.SIGTERM_RELAY, reason="a pure-Python install has no relay: docs/adoption.md")
def test_the_relay_is_put_in_front_of_cpythons_handler_once_and_leaves_with_it():
    taken = []
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the report's own, where the suite runs adopted
    try:
        assert not helpers.relay_sigterm()  # SIGTERM at its default: no CPython handler to relay to
        signal.signal(signal.SIGTERM, lambda signum, frame: taken.append(threading.current_thread()))
        assert helpers.relay_sigterm() and helpers.relay_sigterm()  # the second finds it there: no relay to itself
        other = threading.Thread(target=lambda: signal.pthread_kill(threading.get_ident(), signal.SIGTERM))
        other.start()
        other.join()
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # the main thread's own: relayed to nobody
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # CPython's own C handler goes, and the relay with it
        assert not helpers.relay_sigterm()
    finally:
        signal.signal(signal.SIGTERM, before)
        helpers.REPORT.relay_sigterm()  # in front of the report's handler again, where it was
    assert taken and set(taken) == {threading.main_thread()}


def test_a_second_sigterm_while_the_first_reports_does_not_cut_the_report_short(tmp_path):
    # The report's JSON line goes to a FIFO nobody reads yet: the process waits to open it, in its SIGTERM handler,
    # past the text block. The second SIGTERM (a sender's twice, or the relay's) runs the handler again there.
    (tmp_path / "app.py").write_text("import grpc, threading\nprint('waiting', flush=True)\nthreading.Event().wait()\n")
    fifo = tmp_path / "reports.fifo"
    os.mkfifo(fifo)
    environ = {**os.environ, "PYTHONPATH": PROJECT_DIR}
    command = [sys.executable, *REPORT_RUN, "--report-file", str(fifo), "app.py"]
    process = subprocess.Popen(command, cwd=tmp_path, env=environ, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert process.stdout.readline() == "waiting\n"
        os.kill(process.pid, signal.SIGTERM)
        while not process.stderr.readline().startswith("  saved:"):  # the text block, written before the line
            pass
        os.kill(process.pid, signal.SIGTERM)
        reader = os.open(fifo, os.O_RDWR)  # never blocks (Linux); a reader the process's open() can now meet
        try:
            assert select.select([reader], [], [], 120)[0], "no JSON line: the second SIGTERM ended the process"
            line = os.read(reader, 65536).decode()
        finally:
            os.close(reader)
        assert process.wait(timeout=120) == -signal.SIGTERM
    finally:
        process.kill()
    assert json.loads(line)["ended_by"] == "SIGTERM"


@contextlib.contextmanager
def sigint_at_its_default_in_children():
    """Children that start with SIGINT at its default, as a terminal's foreground job has it. A shell without job
    control (a script's `cmd &`) starts its background jobs with SIGINT ignored, and that is inherited: a handler
    set here is not (exec resets it to the default), so Python in the child installs its own."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_sigint_ends_a_server_under_report_as_under_plain_python(tmp_path, stubs):
    # The program's KeyboardInterrupt ends it (Python's own SIGINT handler); the report comes at exit, as before.
    with sigint_at_its_default_in_children():
        plain = serve_then_signal(tmp_path, stubs, "default", [], signal.SIGINT)
        adopted = serve_then_signal(tmp_path, stubs, "default", REPORT_RUN, signal.SIGINT)
    ended = (-signal.SIGINT, 1)  # Python ends by SIGINT after an uncaught KeyboardInterrupt, and says so once
    assert (
        (adopted[0], adopted[2].count("KeyboardInterrupt")) == (plain[0], plain[2].count("KeyboardInterrupt")) == ended
    )
    assert len(reports(adopted[2])) == 1 and not REPORT_BLOCK.search(adopted[2])["ended"]


def test_without_report_sigterm_is_left_at_its_default(tmp_path, stubs):
    status, _, stderr, default = serve_then_signal(tmp_path, stubs, "default", ["-m", "fastcommon", "run"])
    assert (status, default, stderr) == (-signal.SIGTERM, True, "")  # SIG_DFL, as the program found it


def test_a_multiprocessing_worker_terminated_reports_first(tmp_path):
    program = textwrap.dedent("""
        import multiprocessing, sys

        def serve(ready):
            import grpc
            from grpc import _common
            _common.decode(b"worked")
            ready.set()
            multiprocessing.Event().wait()

        if __name__ == "__main__":
            context = multiprocessing.get_context("spawn")
            ready = context.Event()
            worker = context.Process(target=serve, args=(ready,))
            worker.start()
            assert ready.wait(timeout=120)
            worker.terminate()  # SIGTERM
            worker.join(timeout=120)
            print(worker.pid, worker.exitcode)
    """)
    (tmp_path / "app.py").write_text(program)
    environ = {**os.environ, "PYTHONPATH": PROJECT_DIR}
    run = [sys.executable, "-m", "fastcommon", "run", "--report", "app.py"]
    result = subprocess.run(run, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300)
    plain = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=environ, capture_output=True, text=True)
    pid, exitcode = result.stdout.split()
    assert (result.returncode, exitcode) == (plain.returncode, plain.stdout.split()[1]) == (0, str(-signal.SIGTERM))
    assert reports(result.stderr)[int(pid)]["decode"] == 1


def test_report_file_gets_one_json_line_per_process_with_what_it_did(tmp_path):
    # docs/adoption.md: python -m fastcommon run --report-file reports.jsonl -m grpc_echo.service 5
    path = tmp_path / "reports.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "fastcommon", "run", "--report-file", "reports.jsonl", "-m", "grpc_echo.service", "5"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": PROJECT_DIR}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 2 and len({record["pid"] for record in records}) == 2  # the server's, the client's
    assert set(reports(result.stderr)) == {record["pid"] for record in records}  # it implies --report
    for record in records:
        assert set(record) == {"pid", "fastcommon", "implementation", "python", "grpcio", "patched", "left_to_grpc",
                               "calls", "saved_ns_per_call", "saved_seconds", "cpu_seconds", "ended_by"}  # fmt: skip
        assert record["grpcio"] == grpc.__version__ and record["ended_by"] == "exit"
        assert set(record["patched"]) | set(record["left_to_grpc"]) == set(helpers.NAMES)
        assert record["cpu_seconds"] > 0 and isinstance(record["saved_seconds"], float)  # timed: its sign is noise
    assert sorted(record["calls"]["serialize"] for record in records) == [5, 5]


def test_processes_ending_at_once_each_append_a_whole_line(tmp_path):
    path = tmp_path / "reports.jsonl"
    program = "from grpc import _common\nfor _ in range(100):\n    _common.encode('x' * 1000)\n"
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([helpers.BOOTSTRAP_DIR, PROJECT_DIR])}
    environ[helpers.REPORT_FILE_VARIABLE] = str(path)  # the variable alone: a process started another way
    environ.pop(helpers.REPORT_VARIABLE, None)
    processes = [subprocess.Popen([sys.executable, "-c", program], env=environ, stderr=subprocess.PIPE, text=True)
                 for _ in range(8)]  # fmt: skip
    stderrs = [process.communicate(timeout=300)[1] for process in processes]
    assert [process.returncode for process in processes] == [0] * 8
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(record["pid"] for record in records) == sorted(process.pid for process in processes)
    assert all(record["calls"]["encode"] == 100 for record in records)
    assert not any("fastcommon --report" in stderr for stderr in stderrs)  # the file alone: no block on stderr


@pytest.mark.parametrize("where", ["a directory", "a missing folder", "no permission"])
def test_a_report_file_that_cannot_be_written_is_refused_before_the_program_starts(tmp_path, where):
    target = {"a directory": tmp_path, "a missing folder": tmp_path / "missing" / "r.jsonl",
              "no permission": tmp_path / "locked" / "r.jsonl"}[where]  # fmt: skip
    if where == "no permission":
        if os.geteuid() == 0:
            pytest.skip("root may write anywhere")
        (tmp_path / "locked").mkdir(mode=0o500)
    result = subprocess.run(
        [sys.executable, "-m", "fastcommon", "run", "--report-file", str(target), "-c", "print('ran')"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    usage, error = result.stderr.splitlines()
    assert (result.returncode, result.stdout) == (2, "")  # the program never ran
    assert usage.startswith("usage: python -m fastcommon run ") and error.startswith(
        f"python -m fastcommon run: error: argument --report-file: {target}: "
    )


def test_no_report_file_appears_when_no_process_reports(tmp_path):
    target = tmp_path / "reports.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "fastcommon", "run", "--report-file", str(target), "-c", "print('no grpc here')"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "no grpc here\n") and not target.exists()
