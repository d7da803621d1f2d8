"""--saturate: requests per second and CPU per RPC at saturation, stock against patched, as grpc users measure it.

The server rows: a server process (grpc.aio, or sync with the thread pool of grpc's examples) pinned to one
core, driven by ghz (a load generator in Go, run as grpc_bench runs it) pinned to the other cores. The echo
service's unary RPC, with no request headers or with ten; the handler reads its metadata, as interceptors do.
Each run starts a fresh server, warms it up with ghz, then drives it for a fixed time: ghz counts the RPCs,
their errors (any one ends the benchmark) and the requests per second; the server says its own CPU time
(getrusage: user and system apart) before and after.

The client rows turn it round: a Python client (grpc.aio, or sync with a thread per RPC in flight) making a
fixed number of RPCs at a time with ten headers, pinned to one core, against a stock server on the others; the
client's own CPU per RPC.

Each round runs every row stock, patched (the measured process calls fastcommon.patch()) and stock again (the
control), in an order that turns from round to round. A ratio is each round's patched (or control) run over
its stock one: the table shows their mean and its 95% interval over rounds (Student's t), "within noise"
where the interval holds 1.00.
"""

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial

from benchmarks import plot
from benchmarks.rpc import ask, start
from benchmarks.suite import small_message
from benchmarks.timing import Progress, duration, format_table, mean_and_ci95, versions_line
from grpc_echo import (
    PROTO_DIR,
    REQUEST_HEADERS,
    aio_echo_server,
    echo_server,
    generate_stubs,
    import_stubs,
    reading_servicer,
)

if sys.platform != "win32":
    import resource

GHZ_VERSION = "v0.121.0"
GHZ_PACKAGE = f"github.com/bojand/ghz/cmd/ghz@{GHZ_VERSION}"  # what `go install` builds, here and in .ci/run
GHZ_VARIABLE = "FASTCOMMON_GHZ"  # the ghz to run, where it is not on PATH
CONCURRENCY, CONNECTIONS = 50, 5  # ghz's RPCs in flight and its connections: grpc_bench's defaults
SYNC_WORKERS = 10  # a sync server's thread pool, as grpc's examples size it
CLIENT_CONCURRENCY = 16  # a client row's RPCs in flight
CLIENT_ROWS_SERVER = "sync"  # what a client row's stock server is
WARM_UP = 2  # seconds of load before each measured run
ROUNDS, DURATION = 10, 5  # the defaults of --rounds and --duration (seconds)
SECONDS_TO_START = 1  # a run's processes starting and stopping, beside its load, on a 2-core machine
FLAVOURS = {"aio": "grpc.aio", "sync": "sync"}
ROWS = ("aio-server-0", "aio-server-10", "sync-server-0", "sync-server-10", "aio-client-10", "sync-client-10")
MODES = ("stock", "patched", "control")  # the control is stock again
METRICS = {  # what each run measures, as the table names it
    "rps": "requests/s",
    "cpu": "CPU µs/RPC",
    "user": "  user",
    "system": "  system",
    "busy": "busy (CPU/wall)",
}


def label(row):
    """A row as the table names it: "grpc.aio server, 10 headers"."""
    flavour, process, headers = row.split("-")
    return f"{FLAVOURS[flavour]} {process}, {headers} headers"


def find_ghz():
    """The ghz to run: the one FASTCOMMON_GHZ names, else ghz on PATH; None where there is none."""
    return shutil.which(os.environ.get(GHZ_VARIABLE) or "ghz")


def require_ghz():
    """The ghz to run, or exit in one line saying how to get it."""
    ghz = find_ghz()
    if ghz is None:
        where = f"{GHZ_VARIABLE} names {os.environ[GHZ_VARIABLE]!r}, not" if os.environ.get(GHZ_VARIABLE) else "not"
        sys.exit(f"--saturate needs ghz, {where} a program found: go install {GHZ_PACKAGE}, then put it on PATH "
                 f"or set {GHZ_VARIABLE} to it")  # fmt: skip
    return ghz


def usable_cores():
    """The cores this process may run on: its affinity where the system keeps one (Linux), else every core."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def split_cores():
    """The core the measured process runs on, and the others (for its load or its server); exit where one is all."""
    cores = usable_cores()
    if len(cores) < 2:
        sys.exit(f"--saturate needs 2 cores, the measured process on one and its load on the rest; this has {cores}")
    return {cores[0]}, set(cores[1:])


def pinned(cores):
    """Popen's keywords that start a process on ``cores`` alone, its threads too (they inherit it); none where the
    system cannot pin (macOS, Windows: the processes share every core, and the figures say less)."""
    if hasattr(os, "sched_setaffinity"):
        return {"preexec_fn": partial(os.sched_setaffinity, 0, cores)}
    return {}


def cpu_seconds():
    """This process's CPU seconds so far, every thread's: (user, system)."""
    if sys.platform == "win32":
        return os.times().user, os.times().system
    else:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime, usage.ru_stime


def server(mode, flavour, stubs_dir):
    """A server process: prints its port, then answers each line on stdin with its CPU seconds, until EOF."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
    pb2, pb2_grpc = import_stubs(stubs_dir)
    servicer = reading_servicer(pb2, pb2_grpc, flavour)

    def answer_until_eof():
        for _ in sys.stdin:
            print(*cpu_seconds(), flush=True)

    if flavour == "aio":

        async def serve():
            async with aio_echo_server(pb2, pb2_grpc, servicer=servicer) as address:
                print(address.rsplit(":", 1)[1], flush=True)
                await asyncio.get_running_loop().run_in_executor(None, answer_until_eof)

        asyncio.run(serve())
    else:
        with echo_server(pb2, pb2_grpc, max_workers=SYNC_WORKERS, servicer=servicer) as address:
            print(address.rsplit(":", 1)[1], flush=True)
            answer_until_eof()


def client(mode, flavour, port, stubs_dir, seconds):
    """A client process: CLIENT_CONCURRENCY workers make RPCs with ten headers for WARM_UP, then ``seconds``
    more; prints what that measured window counted, one JSON line."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
    import grpc

    pb2, pb2_grpc = import_stubs(stubs_dir)
    request, target = small_message(pb2.Echo), f"127.0.0.1:{port}"
    counted = [[0, 0] for _ in range(CLIENT_CONCURRENCY)]  # each worker's RPCs and errors
    measure = partial(window, counted, float(seconds))
    if flavour == "aio":

        async def load():
            stop = asyncio.Event()

            async def worker(mine):
                while not stop.is_set():
                    try:
                        await stub.Unary(request, metadata=REQUEST_HEADERS)
                        mine[0] += 1
                    except grpc.RpcError:
                        mine[1] += 1

            async with grpc.aio.insecure_channel(target) as channel:
                stub = pb2_grpc.EchoServiceStub(channel)
                workers = [asyncio.create_task(worker(mine)) for mine in counted]
                measured = await asyncio.to_thread(measure)  # the window, on a thread of its own
                stop.set()
                await asyncio.gather(*workers)
            return measured

        measured = asyncio.run(load())
    else:
        stop = threading.Event()

        def worker(mine):
            while not stop.is_set():
                try:
                    stub.Unary(request, metadata=REQUEST_HEADERS)
                    mine[0] += 1
                except grpc.RpcError:
                    mine[1] += 1

        with grpc.insecure_channel(target) as channel:
            stub = pb2_grpc.EchoServiceStub(channel)
            workers = [threading.Thread(target=worker, args=(mine,)) for mine in counted]
            for thread in workers:
                thread.start()
            measured = measure()
            stop.set()
            for thread in workers:
                thread.join()
    print(json.dumps(measured), flush=True)


def window(counted, seconds):
    """Wait out the warm-up, then measure ``seconds``: the RPCs and errors ``counted`` ([RPCs, errors] per worker),
    the wall time and this process's CPU, user and system."""

    def now():
        return (sum(n for n, _ in counted), sum(e for _, e in counted), time.monotonic(), *cpu_seconds())

    time.sleep(WARM_UP)
    before = now()
    time.sleep(seconds)
    after = now()
    differences = [b - a for a, b in zip(before, after, strict=True)]
    return dict(zip(("rpcs", "errors", "seconds", "user", "system"), differences, strict=True))


def figures(rpcs, seconds, user, system):
    """One run's figures: requests per second, CPU µs per RPC (both, user, system) and the share of its core the
    measured process kept busy."""
    return {"rpcs": rpcs, "errors": 0, "rps": rpcs / seconds, "cpu": (user + system) / rpcs * 1e6,
            "user": user / rpcs * 1e6, "system": system / rpcs * 1e6, "busy": (user + system) / seconds}  # fmt: skip


class Setup:
    """What every run of one invocation shares: the stubs, ghz and its request, the cores, the measured seconds."""

    def __init__(self, stubs_dir, ghz, seconds):
        from google.protobuf import json_format

        pb2, _ = import_stubs(stubs_dir)
        self.stubs_dir, self.ghz, self.seconds = stubs_dir, ghz, seconds
        self.method = pb2.DESCRIPTOR.services_by_name["EchoService"].full_name + "/Unary"
        self.data = json_format.MessageToJson(small_message(pb2.Echo), indent=None)
        self.measured, self.others = split_cores()

    def drive(self, port, headers, seconds, what):
        """Run ghz against the server at ``port`` for ``seconds``: its report, once it has found no error."""
        command = [
            self.ghz, "--insecure", f"--proto={os.path.join(PROTO_DIR, 'echo.proto')}", f"--call={self.method}",
            f"--data={self.data}", f"--concurrency={CONCURRENCY}", f"--connections={CONNECTIONS}",
            f"--cpus={len(self.others)}", f"--duration={seconds}s", "--duration-stop=wait", "--format=json",
            *([f"--metadata={json.dumps(dict(REQUEST_HEADERS[:headers]))}"] if headers else []), f"127.0.0.1:{port}",
        ]  # fmt: skip
        ran = subprocess.run(command, capture_output=True, text=True, check=False, **pinned(self.others))
        if ran.returncode != 0:
            raise SystemExit(f"--saturate: ghz failed ({what}), status {ran.returncode}: {ran.stderr.strip()}")
        report = json.loads(ran.stdout)
        failed = report["count"] - report["statusCodeDistribution"].get("OK", 0)
        if failed:
            raise SystemExit(f"--saturate: {failed} of {report['count']} RPCs failed ({what}): "
                             f"{report['statusCodeDistribution']} {report.get('errorDistribution')}")  # fmt: skip
        return report

    def run(self, row, mode):
        """One run of a row in a mode, with fresh processes: its figures."""
        flavour, process, headers = row.split("-")
        what = f"{label(row)}, {mode}"
        if process == "server":
            serving, port = start(["--saturate-server", mode, flavour, self.stubs_dir], **pinned(self.measured))
        else:
            serving, port = start(["--saturate-server", "stock", CLIENT_ROWS_SERVER, self.stubs_dir],
                                  **pinned(self.others))  # fmt: skip
        try:
            if process == "client":
                args = ["--saturate-client", mode, flavour, port, self.stubs_dir, str(self.seconds)]
                asking, line = start(args, **pinned(self.measured))
                asking.stdin.close()
                if asking.wait(timeout=60) != 0:
                    raise SystemExit(f"--saturate: the client failed ({what})")
                measured = json.loads(line)
                if measured["errors"]:
                    raise SystemExit(f"--saturate: {measured['errors']} RPCs failed ({what})")
                return figures(measured["rpcs"], measured["seconds"], measured["user"], measured["system"])
            self.drive(port, int(headers), WARM_UP, f"{what}, warm-up")
            user, system = ask(serving, "cpu")
            report = self.drive(port, int(headers), self.seconds, what)
            user_after, system_after = ask(serving, "cpu")
            return figures(report["count"], report["total"] / 1e9, user_after - user, system_after - system)
        finally:
            serving.stdin.close()
            serving.wait(timeout=60)


def measure(run, rows, rounds, progress):
    """{row: {mode: [figures, one per round]}}: each round every row, in each mode, in an order that turns."""
    measured = {row: {mode: [] for mode in MODES} for row in rows}
    for round_number in range(rounds):
        turn = round_number % len(MODES)
        for row in rows:
            for mode in MODES[turn:] + MODES[:turn]:  # a drift falls on each mode in turn
                ran = run(row, mode)
                measured[row][mode].append(ran)
                progress.step(f" ({label(row)}, {mode}: {ran['rps']:,.0f} requests/s, {ran['cpu']:.1f} µs CPU per RPC)")
    return measured


def paired_ratio(stock, other, metric):
    """Each round's ``other`` over its stock for one metric: the ratios' mean and its 95% interval's half-width."""
    return mean_and_ci95([b[metric] / a[metric] for a, b in zip(stock, other, strict=True)])


def within_noise(mean, half):
    """Whether a ratio's 95% interval holds 1.00; so too where it is unknown (one round)."""
    return not abs(mean - 1.0) > half  # not >: also where half is nan


def ratio_cell(mean, half):
    """A ratio with its interval, "0.957 ± 0.011", and "within noise" where the interval holds 1.00."""
    return f"{mean:.3f} ± {half:.3f}" + (" within noise" if within_noise(mean, half) else "")


def ratios(measured):
    """{row: {"patched"|"control": {metric: (mean, half-width)}}}: each against the same rounds' stock runs."""
    return {
        row: {mode: {metric: paired_ratio(runs["stock"], runs[mode], metric) for metric in METRICS}
              for mode in MODES[1:]}
        for row, runs in measured.items()
    }  # fmt: skip


def table(measured):
    """The rows: each metric's stock mean and the ratios to it, patched and control, with their intervals."""
    found = ratios(measured)
    lines = [("row", "per run", "stock", "patched / stock", "control / stock")]
    for row, runs in measured.items():
        for n, (metric, name) in enumerate(METRICS.items()):
            mean, half = mean_and_ci95([run[metric] for run in runs["stock"]])
            stock = f"{mean:.0%} ± {half:.0%}" if metric == "busy" else f"{mean:,.1f} ± {half:,.1f}"
            cells = [ratio_cell(*found[row][mode][metric]) for mode in MODES[1:]]
            lines.append((label(row) if n == 0 else "", name, stock, *cells))
    return format_table(lines, text_columns=2)


def load_average():
    if sys.platform == "win32":
        return "none on Windows"
    return "{:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def main(args):
    """--saturate, with benchmark.py's options parsed."""
    if args.plot:
        plot.require_matplotlib()
    rows = args.row or ROWS
    ghz = require_ghz() if any("-server-" in row for row in rows) else None
    rounds, seconds = args.rounds or ROUNDS, args.duration or DURATION
    split_cores()
    started, load_before = time.monotonic(), load_average()
    versions = versions_line()
    print(versions)
    runs = rounds * len(rows) * len(MODES)
    expected = runs * (SECONDS_TO_START + WARM_UP + seconds)
    progress = Progress("--saturate", runs, "runs", f" ({rounds} rounds, each row stock, patched and stock again; "
                        f"rows: {', '.join(rows)}), each {WARM_UP} s of warm-up and {seconds} s measured: about "
                        f"{duration(expected)}")  # fmt: skip
    with tempfile.TemporaryDirectory() as stubs_dir:
        generate_stubs(stubs_dir)
        setup = Setup(stubs_dir, ghz, seconds)
        measured = measure(setup.run, rows, rounds, progress)
    took, load_after = time.monotonic() - started, load_average()
    print(
        f"\nAt saturation, {rounds} rounds, each row stock, patched and stock again (the control), fresh processes "
        f"each run: {WARM_UP} s of warm-up, then {seconds} s measured. The measured process on core "
        f"{min(setup.measured)}, the rest on {sorted(setup.others)}. Server rows: ghz, {CONCURRENCY} RPCs in flight "
        f"over {CONNECTIONS} connections; a sync server's pool {SYNC_WORKERS} threads. Client rows: "
        f"{CLIENT_CONCURRENCY} RPCs in flight with {len(REQUEST_HEADERS)} headers, against a stock "
        f"{FLAVOURS[CLIENT_ROWS_SERVER]} server. CPU: the measured process's own (getrusage). Stock: mean ± 95% "
        "interval over rounds; a ratio: each round's run over its stock run, mean ± 95% interval:"
    )
    print(table(measured))
    print(f"\n(--saturate took {duration(took)}; load average {load_before} before, {load_after} after)")
    results = {
        "versions": versions,
        "command": shlex.join(["python", "benchmark.py", *sys.argv[1:]]),
        "rounds": rounds,
        "seconds": seconds,
        "warm_up": WARM_UP,
        "took": took,
        "load_average": {"before": load_before, "after": load_after},
        "saturation": {row: {"label": label(row), "runs": runs, "ratios": found}
                       for (row, runs), found in zip(measured.items(), ratios(measured).values(), strict=True)},
    }  # fmt: skip
    plot.save_and_chart(results, args)
