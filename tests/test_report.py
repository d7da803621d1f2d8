"""`run --report`, `--report-full` and `--report-file`: the block each process prints (three short lines, whatever its
names and counts), the JSON line, and what each process counted; and where servers end: by SIGTERM, in containers and
under supervisors, in many processes at once, forked. Each process reports once, and ends as it would have without
fastcommon."""

import contextlib
import ctypes
import json
import multiprocessing
import os
import re
import signal
import sys
import textwrap
import threading

import pytest
from conftest import FUNCTIONS, NEEDS_GRPCIO, expected_patch

grpc = pytest.importorskip("grpc", reason=NEEDS_GRPCIO)

import helpers

import fastcommon
from grpc_echo import counting_calls

PATCHED = list(expected_patch())
POSIX = pytest.mark.skipif(
    sys.platform == "win32", reason="POSIX signals, fork, FIFOs; on Windows the program runs as a child"
)
ECHO = {"PYTHONPATH": helpers.PROJECT_DIR}  # where a program finds grpc_echo


# ------------------------------------------------------------------ the text


def summary(calls, implementation="cython", ended_by="exit", saving=lambda name: 100.0):
    """A process's summary with these calls, each saving ``saving(name)`` ns, over 1 s of CPU."""
    report = helpers.Report()
    report.per_call_saving_ns = saving
    return report.summary(calls, cpu_seconds=1.0, ended_by=ended_by) | {"implementation": implementation}


def large(names):
    """Each name called a different, large number of times."""
    return {name: 10**9 * (i + 1) + i for i, name in enumerate(names)}


SUMMARIES = {
    "all-called-large-counts": lambda: summary(large(helpers.NAMES), saving=lambda name: 1234.5),
    "two-left-to-grpc": lambda: summary(
        large(n for n in helpers.NAMES if n not in ("Metadata.get", "Metadata.get_all"))
    ),
    "ended-by-sigterm": lambda: summary(large(helpers.NAMES), ended_by="SIGTERM"),
    "pure-python": lambda: summary(large(FUNCTIONS), implementation="python", saving=lambda name: 0.0),
    "no-calls": lambda: summary(dict.fromkeys(helpers.NAMES, 0)),
    "no-calls-pure-python": lambda: summary(dict.fromkeys(FUNCTIONS, 0), implementation="python"),
}


@pytest.mark.parametrize("case", SUMMARIES)
def test_three_short_lines_whatever_the_names_and_counts(case):
    said = SUMMARIES[case]()
    text = helpers.report_text(said)
    lines = text.splitlines()
    assert len(lines) == 3 and all(len(line) <= helpers.REPORT_WIDTH for line in lines), [len(line) for line in lines]
    block = helpers.REPORT_BLOCK.fullmatch(text)
    assert (
        block and int(block["patched"]) == len(said["calls"]) and int(block["left"] or 0) == len(said["left_to_grpc"])
    )
    assert bool(block["ended"]) == (said["ended_by"] == "SIGTERM")
    [shown] = helpers.reports(text).values()
    assert shown == {name: said["calls"][name] for name in shown}  # each as counted, most called first
    for name, count in said["calls"].items():  # each count at most once, and never a zero
        assert len(re.findall(rf"(?<![\w.]){re.escape(name)} {count:,}(?!\d|,\d)", text)) == (name in shown)
        assert not re.search(rf"(?<![\w.]){re.escape(name)} 0(?!\d|,\d)", text)
    assert all(len(line) <= helpers.REPORT_WIDTH for line in helpers.report_text(said, full=True).splitlines())


@pytest.mark.parametrize("metadatum", [True, False], ids=["all", "metadatum-left-to-grpc"])
def test_the_block_adds_up(metadatum):
    calls = {"encode": 0, "decode": 2000, "serialize": 1000, "deserialize": 0} | (
        {"_Metadatum": 0} if metadatum else {}
    )
    said = summary(calls, saving={"decode": 40.0, "serialize": 30.0}.__getitem__)
    text = helpers.report_text(said)
    block = helpers.REPORT_BLOCK.fullmatch(text)
    assert (int(block["pid"]), block["grpcio"]) == (os.getpid(), grpc.__version__)
    assert (int(block["patched"]), int(block["left"])) == (len(calls), len(helpers.NAMES) - len(calls))
    assert block["left_names"].startswith(next(name for name in helpers.NAMES if name not in calls))
    assert list(helpers.reports(text)[os.getpid()].items()) == [("decode", 2000), ("serialize", 1000)]
    assert f"({len(calls) - 2} of {len(calls)} not called)" in block["calls"]
    # 2,000 calls saving 40 ns and 1,000 saving 30 ns: 0.11 ms of 1 s of CPU; per call, the most called first.
    assert re.match(r"0\.110 ms, 0\.01% .* 1\.000 s CPU \(per call: decode 40 ns, serialize 30 ns\)$", block["saved"])


def test_a_saving_timing_cannot_tell_from_none_reads_within_noise_never_below_zero():
    from grpc import _common

    report = helpers.Report()
    report.timed = {"decode": (_common.decode, _common.decode)}  # the same function on both sides: nothing saved
    assert report.per_call_saving_ns("decode") >= 0.0
    text = helpers.report_text(summary({"encode": 0, "decode": 5}, saving=lambda name: 0.0))
    assert "decode within noise" in helpers.REPORT_BLOCK.fullmatch(text)["saved"]


def test_report_names_what_was_called_as_is_patched_takes_it():
    calls = dict.fromkeys(helpers.NAMES, 0) | {"decode": 3, "Metadata.add": 2}
    text = helpers.report_text(summary(calls, saving=lambda name: 1000.0))
    assert helpers.reports(text)[os.getpid()] == {"decode": 3, "Metadata.add": 2}
    assert f"({len(helpers.NAMES) - 2} of {len(helpers.NAMES)} not called)" in text
    assert "saved: 0.005 ms" in text  # 5 calls, 1 µs each


@pytest.mark.parametrize("implementation", ["cython", "python"])
def test_a_process_with_no_calls_says_so_plainly(implementation):
    text = helpers.report_text(summary(dict.fromkeys(FUNCTIONS, 0), implementation=implementation))
    block = helpers.REPORT_BLOCK.fullmatch(text)
    assert block["calls"] == "none" and "per call" not in text and "-" not in text.replace("--report", "")


def test_the_full_report_gives_every_name_a_line():
    calls = dict.fromkeys((n for n in helpers.NAMES if n != "Metadata.get"), 0) | {"decode": 4000, "encode": 1}
    lines = helpers.report_text(summary(calls), full=True).splitlines()
    assert lines[0].startswith("fastcommon --report, process ") and lines[1].startswith("  saved: ")
    by_name = {line.split()[0]: line for line in lines[2:]}
    assert len(lines) - 2 == len(by_name) and list(by_name) == [*calls, "Metadata.get"]
    for name, count in calls.items():
        assert by_name[name].split()[1] == f"{count:,}" and ("saved per call: 100 ns" in by_name[name]) == bool(count)
    assert "left to grpc" in by_name["Metadata.get"]


@pytest.mark.parametrize("value, asked", [("", (False, False)), ("0", (False, False)), ("1", (True, False)),
                                          ("full", (True, True))])  # fmt: skip
def test_the_report_variable_says_how_much(monkeypatch, value, asked):
    monkeypatch.setenv(helpers.REPORT_VARIABLE, value)
    monkeypatch.delenv(helpers.REPORT_FILE_VARIABLE, raising=False)
    assert helpers.launcher.report_asked() == (*asked, None)


def test_report_full_prints_every_name_and_the_file_every_count(tmp_path):
    program = "from grpc import _common\n_common.decode(b'x')\n"
    result = helpers.python("-m", "fastcommon", "run", "--report-full", "--report-file", "r.jsonl", "-c", program,
                            cwd=tmp_path, check_status=0)  # fmt: skip
    [record] = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert record["calls"] == dict.fromkeys(record["patched"], 0) | {"decode": 1}  # the zeros too
    lines = result.stderr[result.stderr.index("fastcommon --report, process ") :].splitlines()
    by_name = {line.split()[0]: line for line in lines[2:]}
    assert len(lines) - 2 == len(by_name) and set(by_name) == set(helpers.NAMES)
    assert by_name["decode"].split()[1] == "1" and all(
        by_name[name].split()[1] == "0" for name in record["patched"] if name != "decode"
    )


# ------------------------------------------------------------------ what each process counted


@pytest.mark.parametrize("fork", ["os.fork", "multiprocessing"])
def test_a_fork_child_of_a_patched_parent_reports_only_its_own_calls(program, fork):
    if "fork" not in multiprocessing.get_all_start_methods():
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
    reported = helpers.reports(result.stderr)
    assert reported.pop(child)["decode"] == 3
    assert [calls["decode"] for calls in reported.values()] == [7]


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
        [calls] = helpers.reports(result.stderr).values()
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


def test_the_documented_service_runs_and_each_process_reports(tmp_path):
    # docs/adoption.md: python -m fastcommon run --report -m grpc_echo.service 2000 (here 5 RPCs)
    result = helpers.python("-m", "fastcommon", "run", "--report", "-m", "grpc_echo.service", "5", cwd=tmp_path,
                            env={"PYTHONPATH": helpers.PROJECT_DIR})  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "5 RPCs made; the server exited with 0\n"), result.stderr
    server, client = helpers.reports(result.stderr).values()  # the server's block first: it exits first
    headers = 10 + 1  # the service's request headers, and the user-agent
    assert (server["deserialize"], server["serialize"], server.get("_Metadatum")) == (
        5,
        5,
        5 * headers if "_Metadatum" in PATCHED else None,
    )
    assert (client["serialize"], client["deserialize"], client["decode"]) == (5, 5, 10)


# ------------------------------------------------------------------ SIGTERM, and the report file


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
                    os.kill(int(serving), getattr(signal, "SIGKILL", signal.SIGTERM))  # Windows: TerminateProcess
    default = first.split()[2] == "True"  # SIGTERM at its default, as the serving program saw it
    return process.returncode, stdout, helpers.program_stderr(stderr), default


REPORT_RUN = ["-m", "fastcommon", "run", "--report"]


@POSIX
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
    [calls] = helpers.reports(adopted[2]).values()  # one block: the serving process's (a child's own, for "child")
    assert calls["serialize"] == calls["deserialize"] == 1
    ended_by_sigterm = bool(helpers.REPORT_BLOCK.search(adopted[2])["ended"])
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


@POSIX
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
    blocks = list(helpers.REPORT_BLOCK.finditer(stderr))
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


@POSIX
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


@POSIX
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
    assert [bool(block["ended"]) for block in helpers.REPORT_BLOCK.finditer(stderr)] == [True] * bool(launcher)


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


@POSIX
@NEEDS_RELAY
@NEEDS_PROC
@pytest.mark.parametrize("launcher", [[], REPORT_RUN], ids=["plain", "report"])
def test_a_relay_behind_a_handler_chained_in_front_of_it_follows_a_fork(tmp_path, launcher):
    (tmp_path / "app.py").write_text(FAULTHANDLER_IN_FRONT)
    environ = {**ECHO, "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    result = helpers.python(*launcher, "app.py", "main", cwd=tmp_path, env=environ)
    assert (result.returncode, result.stdout) == (0, "child -15\n")  # not SIGSEGV, not a child left waiting


@POSIX
@pytest.mark.skipif(fastcommon.IMPLEMENTATION != "cython", reason="pure Python has no relay to miss")
def test_a_compiled_install_without_the_relay_says_so_under_report(tmp_path):
    # As a build in which _sigterm failed and fast_common did not: the report warns once, where it sets its handler.
    (tmp_path / "app.py").write_text("import sys\nsys.modules['fastcommon._sigterm'] = None\nimport grpc\n")
    result = helpers.python(*REPORT_RUN, "app.py", cwd=tmp_path, env=ECHO)
    assert result.returncode == 0 and result.stderr.count("SIGTERM relay (fastcommon._sigterm) did not load") == 1


# Waits until a signal ends it. It wakes each second: a SIGTERM that comes in the instant before a wait begins is
# lost to a Python handler until the next wake (docs/adoption.md).
WAITS = "import grpc, time\nprint('waiting', flush=True)\nwhile True:\n    time.sleep(1)\n"


@POSIX
def test_a_second_sigterm_while_the_first_reports_ends_the_process_at_once(tmp_path):
    # As SIGTERM at its default would have ended it at the first: a report that waits (here its JSON line, on a
    # FIFO nobody reads) never keeps a second SIGTERM from ending the process.
    (tmp_path / "app.py").write_text(WAITS)
    fifo = tmp_path / "reports.fifo"
    os.mkfifo(fifo)  # type: ignore[attr-defined, unused-ignore]  # POSIX only, as its test
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


@POSIX
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


@POSIX
def test_sigint_ends_a_server_under_report_as_under_plain_python(tmp_path, stubs):
    # The program's KeyboardInterrupt ends it (Python's own SIGINT handler); the report comes at exit, as before.
    with sigint_at_its_default_in_children():
        plain = serve_then_signal(tmp_path, stubs, "default", [], signal.SIGINT)
        adopted = serve_then_signal(tmp_path, stubs, "default", REPORT_RUN, signal.SIGINT)
    ended = (-signal.SIGINT, 1)  # Python ends by SIGINT after an uncaught KeyboardInterrupt, and says so once
    assert (
        (adopted[0], adopted[2].count("KeyboardInterrupt")) == (plain[0], plain[2].count("KeyboardInterrupt")) == ended
    )
    assert len(helpers.reports(adopted[2])) == 1 and not helpers.REPORT_BLOCK.search(adopted[2])["ended"]


@POSIX
def test_without_report_sigterm_is_left_at_its_default(tmp_path, stubs):
    status, _, stderr, default = serve_then_signal(tmp_path, stubs, "default", ["-m", "fastcommon", "run"])
    assert (status, default, stderr) == (-signal.SIGTERM, True, "")  # SIG_DFL, as the program found it


@POSIX
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
    assert helpers.reports(result.stderr)[int(pid)]["decode"] == 1


@POSIX
def test_report_file_gets_one_json_line_per_process_with_what_it_did(tmp_path):
    # docs/adoption.md: python -m fastcommon run --report-file reports.jsonl -m grpc_echo.service 5
    path = tmp_path / "reports.jsonl"
    result = helpers.python("-m", "fastcommon", "run", "--report-file", "reports.jsonl", "-m", "grpc_echo.service", "5",
                            cwd=tmp_path, env=ECHO)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 2 and len({record["pid"] for record in records}) == 2  # the server's, the client's
    assert set(helpers.reports(result.stderr)) == {record["pid"] for record in records}  # it implies --report
    for record in records:
        assert set(record) == {"pid", "fastcommon", "implementation", "python", "grpcio", "patched", "left_to_grpc",
                               "calls", "saved_ns_per_call", "saved_seconds", "cpu_seconds", "ended_by"}  # fmt: skip
        assert record["grpcio"] == grpc.__version__ and record["ended_by"] == "exit"
        assert set(record["patched"]) | set(record["left_to_grpc"]) == set(helpers.NAMES)
        assert record["cpu_seconds"] > 0 and isinstance(record["saved_seconds"], float)  # timed: its sign is noise
    assert sorted(record["calls"]["serialize"] for record in records) == [5, 5]


@POSIX
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


@POSIX
@pytest.mark.parametrize("where", ["a directory", "a missing folder", "no permission"])
def test_a_report_file_that_cannot_be_written_is_refused_before_the_program_starts(tmp_path, where):
    target = {"a directory": tmp_path, "a missing folder": tmp_path / "missing" / "r.jsonl",
              "no permission": tmp_path / "locked" / "r.jsonl"}[where]  # fmt: skip
    if where == "no permission":
        if os.geteuid() == 0:  # type: ignore[attr-defined, unused-ignore]  # POSIX only, as its test
            pytest.skip("root may write anywhere")
        (tmp_path / "locked").mkdir(mode=0o500)
    result = helpers.python("-m", "fastcommon", "run", "--report-file", str(target), "-c", "print('ran')", cwd=tmp_path)
    usage, error = result.stderr.splitlines()
    assert (result.returncode, result.stdout) == (2, "")  # the program never ran
    assert usage.startswith("usage: python -m fastcommon run ") and error.startswith(
        f"python -m fastcommon run: error: argument --report-file: {target}: "
    )


@POSIX
def test_no_report_file_appears_when_no_process_reports(tmp_path):
    target = tmp_path / "reports.jsonl"
    result = helpers.python("-m", "fastcommon", "run", "--report-file", str(target), "-c", "print('no grpc here')",
                            cwd=tmp_path)  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "no grpc here\n") and not target.exists()
