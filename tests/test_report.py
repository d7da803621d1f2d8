"""`run --report` and `--report-file` where servers end: by SIGTERM, in containers and under supervisors, in many
processes at once; each process reports once, and ends as it would have without fastcommon."""

import contextlib
import ctypes
import json
import os
import signal
import sys
import textwrap
import threading

import pytest
from conftest import NEEDS_GRPCIO
from test_adoption import REPORT_BLOCK, reports

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers

import fastcommon

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals; on Windows the program runs as a child")
ECHO = {"PYTHONPATH": helpers.PROJECT_DIR}  # where a program finds grpc_echo

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
    command = [*launcher, "server.py", mode, os.path.dirname(pb2.__file__)]
    with helpers.started(*command, cwd=tmp_path, env={**ECHO, **(env or {})}) as process:
        serving = None
        try:
            first = process.stdout.readline()
            port, serving, _ = first.split()
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                assert pb2_grpc.EchoServiceStub(channel).Unary(pb2.Echo(text="x"), timeout=30).text == "x"
            os.kill(int(serving), signum)
            stdout, stderr = process.communicate(timeout=120)
        finally:
            if serving is not None and int(serving) != process.pid:  # a child server outlives a failed test otherwise
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(serving), signal.SIGKILL)
    default = first.split()[2] == "True"  # SIGTERM at its default, as the serving program saw it
    return process.returncode, stdout, helpers.program_stderr(stderr), default


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
# default the process ends; under --report, the compiled relay wakes the main thread to report first. With "main"
# or "thread", a fork child (forked from the main thread, or from another) does this, and its parent waits for it.
OTHER_THREAD_TAKES_SIGTERM = textwrap.dedent("""
    import grpc, os, signal, sys, threading

    def serve():
        waiting = threading.Event()

        def main_thread_asleep():  # its tid is the pid, a fork child's too
            with open(f"/proc/self/task/{os.getpid()}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] == "S"

        def take_sigterm():
            # Once the main thread is in the Event's list of waiters and asleep, twice: reading /proc lets go of
            # the GIL, so a main thread that was only waiting for it has gone on into its wait. A signal in the
            # instant before a wait begins is lost to any Python handler (docs/adoption.md).
            while not (waiting._cond._waiters and main_thread_asleep() and main_thread_asleep()):
                pass
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

        threading.Thread(target=take_sigterm, daemon=True).start()
        waiting.wait()

    def fork_then_wait(status):
        pid = os.fork()
        if pid == 0:
            try:
                serve()
            finally:
                os._exit(99)
        status.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

    status = []
    if sys.argv[1] == "main":
        fork_then_wait(status)
    elif sys.argv[1] == "thread":
        forking = threading.Thread(target=fork_then_wait, args=(status,))
        forking.start()
        forking.join()
    else:
        serve()
    print("child", *status, flush=True)
""")


NEEDS_RELAY = pytest.mark.skipif(not helpers.SIGTERM_RELAY, reason="a pure-Python install has no relay: adoption.md")
NEEDS_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="sees the main thread asleep in /proc")


@NEEDS_RELAY
@NEEDS_PROC
@pytest.mark.parametrize("where", ["process", "main", "thread"], ids=["itself", "fork-child", "fork-child-of-thread"])
@pytest.mark.parametrize("launcher", [[], REPORT_RUN], ids=["plain", "report"])
def test_sigterm_taken_by_another_thread_ends_the_process_as_at_its_default(tmp_path, launcher, where):
    (tmp_path / "app.py").write_text(OTHER_THREAD_TAKES_SIGTERM)
    environ = {**ECHO, "PYTHONWARNINGS": "ignore::DeprecationWarning"}  # 3.12+
    with helpers.started(*launcher, "app.py", where, cwd=tmp_path, env=environ) as process:
        stdout, stderr = process.communicate(timeout=120)
    ended = {"process": (-signal.SIGTERM, ""), "main": (0, "child -15\n"), "thread": (0, "child -15\n")}
    assert (process.returncode, stdout) == ended[where]
    blocks = list(REPORT_BLOCK.finditer(stderr))
    assert [bool(block["ended"]) for block in blocks] == ([True] if where == "process" else [True, False]) * bool(
        launcher
    )  # the serving process's, ended by SIGTERM; then its parent's, at exit


# The relay, in a process of its own (a relay that called itself would end it with SIGSEGV): put in place twice
# (the second finds it there), it sends the main thread SIGTERM taken by another, unmarked: the main thread marks
# it when it takes it (pending while the main thread blocks it), once; a SIGTERM the main thread takes itself is
# CPython's, as ever.
RELAY_ALONE = textwrap.dedent("""
    import signal, sys, threading
    sys.path.insert(0, sys.argv[1])
    import helpers

    taken = []
    assert not helpers.relay_sigterm()  # at SIGTERM's default: no CPython handler to go in front of
    signal.signal(signal.SIGTERM, lambda signum, frame: taken.append(threading.current_thread().name))
    assert helpers.relay_sigterm() and helpers.relay_sigterm()
    blocked = threading.Event()

    def take_sigterm():
        blocked.wait()
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    other = threading.Thread(target=take_sigterm)
    other.start()  # before the main thread blocks SIGTERM: a thread starts with its creator's mask
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    blocked.set()
    other.join()  # lets go of the GIL, and takes it back: a mark would be seen here
    relayed, before_it_arrives = signal.SIGTERM in signal.sigpending(), list(taken)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # the relayed copy arrives
    after_relay = list(taken)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # CPython's C handler goes, and the relay with it
    print(relayed, before_it_arrives, after_relay, taken, helpers.relay_sigterm())
""")


@NEEDS_RELAY
def test_the_relay_wakes_the_main_thread_once_and_leaves_with_cpythons_handler(tmp_path):
    (tmp_path / "relay.py").write_text(RELAY_ALONE)
    result = helpers.python("relay.py", helpers.TESTS_DIR, cwd=tmp_path, env=ECHO)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "True [] ['MainThread'] ['MainThread', 'MainThread'] False\n"


# A thread that is not Python's (as grpc core's) takes SIGTERM while the main thread runs bytecode and never lets
# go of the GIL: CPython 3.10 and 3.11 see a mark made on another thread only when the main thread takes the GIL
# again. The main thread marks the relayed copy itself, and so sees it at once.
BUSY_MAIN_THREAD = textwrap.dedent("""
    import ctypes, os
    import grpc
    libc = ctypes.CDLL(None)
    before = set(os.listdir("/proc/self/task"))
    assert libc.pthread_create(ctypes.byref(ctypes.c_ulong()), None, ctypes.cast(libc.pause, ctypes.c_void_p),
                               None) == 0
    while not set(os.listdir("/proc/self/task")) - before:
        pass
    print(*set(os.listdir("/proc/self/task")) - before, flush=True)  # the new thread's id
    count = 0
    while True:
        count += 1
""")
TGKILL = {"x86_64": 234, "aarch64": 131}.get(os.uname().machine) if hasattr(os, "uname") else None


@NEEDS_RELAY
@pytest.mark.skipif(sys.platform != "linux" or TGKILL is None, reason="sends a signal to one thread with tgkill")
@pytest.mark.parametrize("launcher", [[], REPORT_RUN], ids=["plain", "report"])
def test_sigterm_taken_by_a_c_thread_ends_a_busy_main_thread(tmp_path, launcher):
    (tmp_path / "app.py").write_text(BUSY_MAIN_THREAD)
    with helpers.started(*launcher, "app.py", cwd=tmp_path, env=ECHO) as process:
        thread = int(process.stdout.readline())
        assert ctypes.CDLL(None, use_errno=True).syscall(TGKILL, process.pid, thread, signal.SIGTERM) == 0
        stderr = process.communicate(timeout=60)[1]
    assert process.returncode == -signal.SIGTERM
    assert [bool(block["ended"]) for block in REPORT_BLOCK.finditer(stderr)] == [True] * bool(launcher)


# faulthandler chained in front of the report's handler and its relay, then SIGTERM taken by a thread other than
# the main one, in a fork child: the relay behind faulthandler relays to the child's own main thread. Its dump is
# of one thread: CPython walks all threads without a lock, and meets the thread that sent SIGTERM as it ends
# (SIGSEGV in faulthandler's dump, 4 of 120 runs on CPython 3.10, with the relay of either design).
FAULTHANDLER_IN_FRONT = (
    "import faulthandler, os, signal\n"
    "import grpc\n"
    "dumps = open(os.devnull, 'w')\n"
    "faulthandler.register(signal.SIGTERM, file=dumps, all_threads=False, chain=True)\n"
) + OTHER_THREAD_TAKES_SIGTERM


@NEEDS_RELAY
@NEEDS_PROC
@pytest.mark.parametrize("launcher", [[], REPORT_RUN], ids=["plain", "report"])
def test_a_relay_behind_a_handler_chained_in_front_of_it_follows_a_fork(tmp_path, launcher):
    (tmp_path / "app.py").write_text(FAULTHANDLER_IN_FRONT)
    environ = {**ECHO, "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    result = helpers.python(*launcher, "app.py", "main", cwd=tmp_path, env=environ)
    assert (result.returncode, result.stdout) == (0, "child -15\n")  # not SIGSEGV, not a child left waiting


@pytest.mark.skipif(fastcommon.IMPLEMENTATION != "cython", reason="pure Python has no relay to miss")
def test_a_compiled_install_without_the_relay_says_so_under_report(tmp_path):
    # As a build in which _sigterm failed and fast_common did not: the report warns once, where it sets its handler.
    (tmp_path / "app.py").write_text("import sys\nsys.modules['fastcommon._sigterm'] = None\nimport grpc\n")
    result = helpers.python(*REPORT_RUN, "app.py", cwd=tmp_path, env=ECHO)
    assert result.returncode == 0 and result.stderr.count("SIGTERM relay (fastcommon._sigterm) did not load") == 1


# Waits until a signal ends it. It wakes each second: a SIGTERM that comes in the instant before a wait begins is
# lost to a Python handler until the next wake (docs/adoption.md).
WAITS = "import grpc, time\nprint('waiting', flush=True)\nwhile True:\n    time.sleep(1)\n"


def test_a_second_sigterm_while_the_first_reports_ends_the_process_at_once(tmp_path):
    # As SIGTERM at its default would have ended it at the first: a report that waits (here its JSON line, on a
    # FIFO nobody reads) never keeps a second SIGTERM from ending the process.
    (tmp_path / "app.py").write_text(WAITS)
    fifo = tmp_path / "reports.fifo"
    os.mkfifo(fifo)
    with helpers.started(*REPORT_RUN, "--report-file", str(fifo), "app.py", cwd=tmp_path, env=ECHO) as process:
        deadline = threading.Timer(120, process.kill)  # a process that never reports ends the reading below
        deadline.start()
        try:
            assert process.stdout.readline() == "waiting\n"
            os.kill(process.pid, signal.SIGTERM)
            for line in process.stderr:  # the text block comes first; then the handler waits to open the FIFO
                if line.startswith("  saved:"):
                    break
            else:
                pytest.fail("no report on stderr")
            if os.path.isdir("/proc/self"):  # SIGTERM is at its default while it reports: the kernel takes the second
                with open(f"/proc/{process.pid}/status") as status:
                    caught = int(next(line for line in status if line.startswith("SigCgt:")).split()[1], 16)
                assert not caught & 1 << (signal.SIGTERM - 1)
            os.kill(process.pid, signal.SIGTERM)
            assert process.wait(timeout=120) == -signal.SIGTERM
        finally:
            deadline.cancel()


def test_a_report_that_cannot_be_written_still_ends_the_process_by_sigterm(tmp_path):
    # Nobody reads the program's stderr any more: the report's block raises BrokenPipeError in the handler.
    (tmp_path / "app.py").write_text(WAITS)
    with helpers.started(*REPORT_RUN, "app.py", cwd=tmp_path, env=ECHO) as process:
        assert process.stdout.readline() == "waiting\n"
        process.stderr.close()
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=120) == -signal.SIGTERM


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
        import multiprocessing, sys, time

        def serve(ready):
            import grpc
            from grpc import _common
            _common.decode(b"worked")
            ready.set()
            while True:  # wakes each second, as WAITS
                time.sleep(1)

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
    result = helpers.python(*REPORT_RUN, "app.py", cwd=tmp_path, env=ECHO)
    plain = helpers.python("app.py", cwd=tmp_path, env=ECHO)
    pid, exitcode = result.stdout.split()
    assert (result.returncode, exitcode) == (plain.returncode, plain.stdout.split()[1]) == (0, str(-signal.SIGTERM))
    assert reports(result.stderr)[int(pid)]["decode"] == 1


def test_report_file_gets_one_json_line_per_process_with_what_it_did(tmp_path):
    # docs/adoption.md: python -m fastcommon run --report-file reports.jsonl -m grpc_echo.service 5
    path = tmp_path / "reports.jsonl"
    result = helpers.python("-m", "fastcommon", "run", "--report-file", "reports.jsonl", "-m", "grpc_echo.service", "5",
                            cwd=tmp_path, env=ECHO)  # fmt: skip
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
    environ = {"PYTHONPATH": os.pathsep.join([helpers.BOOTSTRAP_DIR, helpers.PROJECT_DIR])}
    environ |= {helpers.REPORT_FILE_VARIABLE: str(path), helpers.REPORT_VARIABLE: None}  # a process started another way
    with contextlib.ExitStack() as running:
        processes = [running.enter_context(helpers.started("-c", program, env=environ)) for _ in range(8)]
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
    result = helpers.python("-m", "fastcommon", "run", "--report-file", str(target), "-c", "print('ran')", cwd=tmp_path)
    usage, error = result.stderr.splitlines()
    assert (result.returncode, result.stdout) == (2, "")  # the program never ran
    assert usage.startswith("usage: python -m fastcommon run ") and error.startswith(
        f"python -m fastcommon run: error: argument --report-file: {target}: "
    )


def test_no_report_file_appears_when_no_process_reports(tmp_path):
    target = tmp_path / "reports.jsonl"
    result = helpers.python("-m", "fastcommon", "run", "--report-file", str(target), "-c", "print('no grpc here')",
                            cwd=tmp_path)  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "no grpc here\n") and not target.exists()
