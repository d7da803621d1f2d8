"""--rpc-instructions: the instructions an RPC costs each process, stock and patched, counted by callgrind.

A server and a client, each a process of its own, each under valgrind --tool=callgrind. For each of
no request headers and ten, the client makes 30 RPCs to warm up, then a "mark" RPC, N RPCs, a mark,
2N RPCs, a mark. At each mark both processes dump their counters (callgrind dumps when libc's
getppid is entered: the server's handler calls it for a mark, the client once the mark's reply is
back). The dump between the second and third marks less the one between the first and second is
N RPCs exactly: start-up, warm-up and the marks themselves cancel out. Instructions per RPC are that
difference over N, in all and split by the object they ran in.

The headline counts the Python side of each process: the interpreter loop, the rest of libpython,
fastcommon, and Python's other extension modules (CPython's own, protobuf's). That is the work
fastcommon can change, and all of its saving lies there. The whole process, shown beside it, adds
grpc's extension (grpc core and its Cython layer, one stripped object that cannot be split by
function), libc and the rest: there grpc core's own threads poll, lock and wait, and how often
depends on how valgrind interleaves the threads, up to 27,000 instructions per RPC apart between two
runs of the same code. (Counting by thread cannot separate them: at a mark callgrind's
--separate-threads dumps only the thread that calls getppid.)

Every configuration runs stock, patched, stock, patched, four times over: each process's memory
layout is its own, and moves its Python side by up to 0.8%, so it takes more processes, not more
RPCs, to repeat. The savings are those of the means, with their range over every stock run against
every patched one; the control, the later half of the stock runs against the earlier half, is what
the method itself calls a difference.
"""

import argparse
import asyncio
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import plot
from benchmarks.callgrind import OBJECTS, PYTHON_SIDE, python_side, saving, self_costs, whole_process
from benchmarks.suite import small_message
from benchmarks.timing import format_table, positive_int
from grpc_echo import REQUEST_HEADERS, aio_echo_server, echo_server, generate_stubs, import_stubs, make_servicer

BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark.py")
FLAVOURS = ("sync", "aio")
MODES = ("stock", "patched")
REPEATS = 4  # runs of each mode, interleaved; a process's memory layout alone moves its Python side up to 0.8%
HEADER_COUNTS = (0, len(REQUEST_HEADERS))
RPCS = 300  # N, the default of --rpcs: what varies varies from process to process, so more runs rather than RPCs
WARM_UP = 30
MARK = "mark"
PROCESSES = ("server", "client")
ROWS = [(flavour, headers, process) for flavour in FLAVOURS for headers in HEADER_COUNTS for process in PROCESSES]


def marking_servicer(pb2, pb2_grpc, flavour):
    """The echo service, whose handler reads the invocation metadata (as interceptors do) and marks on "mark";
    for grpc.aio a coroutine, as aio services have (a plain function would run in a thread pool)."""
    base = type(make_servicer(pb2, pb2_grpc))

    def answer(request, context):
        context.invocation_metadata()
        if request.text == MARK:
            os.getppid()  # callgrind dumps here
        return pb2.Echo(text=request.text, payload=request.payload, count=request.count + 1)

    class Marking(base):
        def Unary(self, request, context):
            return answer(request, context)

    class AioMarking(base):
        async def Unary(self, request, context):
            return answer(request, context)

    return AioMarking() if flavour == "aio" else Marking()


def server(mode, flavour, stubs_dir):
    """A server process: prints its port, then serves until its stdin closes."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
    pb2, pb2_grpc = import_stubs(stubs_dir)
    servicer = marking_servicer(pb2, pb2_grpc, flavour)
    if flavour == "aio":

        async def serve():
            async with aio_echo_server(pb2, pb2_grpc, servicer=servicer) as address:
                print(address.rsplit(":", 1)[1], flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

        asyncio.run(serve())
    else:
        with echo_server(pb2, pb2_grpc, max_workers=4, servicer=servicer) as address:
            print(address.rsplit(":", 1)[1], flush=True)
            sys.stdin.read()


def client(mode, flavour, port, stubs_dir, rpcs):
    """A client process: for each header count, warm-up, mark, N RPCs, mark, 2N RPCs, mark."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
    import grpc

    pb2, pb2_grpc = import_stubs(stubs_dir)
    request, mark, n = small_message(pb2.Echo), pb2.Echo(text=MARK), int(rpcs)
    if flavour == "aio":

        async def run():
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb2_grpc.EchoServiceStub(channel)
                for headers in HEADER_COUNTS:
                    metadata = REQUEST_HEADERS[:headers] or None
                    for count in (WARM_UP, 0, n, 2 * n):
                        for _ in range(count):
                            await stub.Unary(request, metadata=metadata)
                        if count != WARM_UP:
                            await stub.Unary(mark, metadata=metadata)
                            os.getppid()  # callgrind dumps here

        asyncio.run(run())
    else:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb2_grpc.EchoServiceStub(channel)
            for headers in HEADER_COUNTS:
                metadata = REQUEST_HEADERS[:headers] or None
                for count in (WARM_UP, 0, n, 2 * n):
                    for _ in range(count):
                        stub.Unary(request, metadata=metadata)
                    if count != WARM_UP:
                        stub.Unary(mark, metadata=metadata)
                        os.getppid()  # callgrind dumps here


def per_rpc(out_prefix, rpcs, executable):
    """{headers: {category: instructions per RPC}} from one process's dumps: (2N segment - N segment) / N."""
    dumps = sorted(glob.glob(f"{out_prefix}.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    marks = 3 * len(HEADER_COUNTS)  # then the rest at exit, where the process ends by itself
    if len(dumps) not in (marks, marks + 1):
        raise RuntimeError(f"{out_prefix}: {len(dumps)} callgrind dumps, not {marks}: a getppid call unaccounted for")
    names = {"ob": {}, "fn": {}}
    segments = [self_costs(dump, executable, names) for dump in dumps[:marks]]  # in order: names carry over
    return {
        headers: {name: (segments[3 * index + 2][name] - segments[3 * index + 1][name]) / rpcs for name in OBJECTS}
        for index, headers in enumerate(HEADER_COUNTS)
    }


def under_callgrind(out_prefix, args):
    command = [
        "valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={out_prefix}",
        sys.executable, BENCHMARK, *args,
    ]  # fmt: skip
    environ = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environ)  # fmt: skip


def measure(stubs_dir, out_dir, rpcs):
    """{(flavour, headers, process, mode, run): {category: instructions per RPC}}, a server and client at a time."""
    executable = os.path.basename(os.path.realpath(sys.executable))
    results = {}
    for flavour in FLAVOURS:
        for run in range(1, REPEATS + 1):
            for mode in MODES:  # interleaved, so that a drift in the machine falls on both modes
                print(f"--rpc-instructions: {flavour}, {mode}, run {run} of {REPEATS}", file=sys.stderr, flush=True)
                prefix = os.path.join(out_dir, f"{flavour}-{mode}-{run}")
                serve_and_ask(prefix, mode, flavour, stubs_dir, rpcs)
                for process in PROCESSES:
                    for headers, costs in per_rpc(f"{prefix}-{process}", rpcs, executable).items():
                        results[flavour, headers, process, mode, run] = costs
    return results


def serve_and_ask(prefix, mode, flavour, stubs_dir, rpcs):
    """Run a server and its client under callgrind, their dumps at ``prefix``-server.* and -client.*."""
    serving = under_callgrind(f"{prefix}-server", ["--rpc-instructions-server", mode, flavour, stubs_dir])
    try:
        port = serving.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"the {flavour} server under callgrind did not start: {serving.stderr.read()}")
        asking = under_callgrind(
            f"{prefix}-client", ["--rpc-instructions-client", mode, flavour, port, stubs_dir, str(rpcs)]
        )
        _, errors = asking.communicate()
        if asking.returncode != 0:
            raise RuntimeError(f"the {flavour} client under callgrind failed: {errors[-2000:]}")
    finally:
        serving.stdin.close()
        serving.wait(timeout=600)


def runs_of(results, row, mode):
    """The {category: instructions per RPC} of each run of ``mode`` for a row (flavour, headers, process)."""
    return [costs for key, costs in sorted(results.items()) if key[:3] == row and key[3] == mode]


def control(stock):
    """The later half of the stock runs against the earlier half, their means: what the method calls a difference."""
    earlier, later = statistics.fmean(stock[: len(stock) // 2]), statistics.fmean(stock[len(stock) // 2 :])
    return (later - earlier) / earlier


def savings_table(results, count):
    """Stock against patched, ``count`` of each run: the means, the saving and its range, the control."""
    rows = [("RPCs", "process", "stock", "patched", "saved", "range", "control: stock, later half")]
    for flavour, headers, process in ROWS:
        stock, patched = ([count(c) for c in runs_of(results, (flavour, headers, process), m)] for m in MODES)
        saved, share, low, high = saving(stock, patched)
        rows.append(
            (f"{flavour} unary, {headers} headers", process, f"{statistics.fmean(stock):,.0f}",
             f"{statistics.fmean(patched):,.0f}", f"{saved:,.0f} ({share:.1%})", f"{low:.1%} to {high:.1%}",
             f"{control(stock):+.2%}")
        )  # fmt: skip
    return format_table(rows)


def report(results, rpcs):
    """The tables: instructions per RPC, stock against patched, Python side and whole process; and where they run."""
    lines = [
        f"Instructions per RPC (callgrind; {rpcs} RPCs, the difference of 2N and N between marks). Each mode ran "
        f"{len(runs_of(results, ROWS[0], MODES[0]))} times, interleaved: the means; the range of every stock run "
        "against every patched one; the control, the later half of the stock runs against the earlier half.",
        "",
        f"The headline, the Python side ({', '.join(PYTHON_SIDE)}), where fastcommon's saving lies:",
        savings_table(results, python_side),
        "",
        "The whole process, which adds grpc's extension, libc and the rest, where grpc core's own threads poll and",
        "wait as valgrind happens to interleave them:",
        savings_table(results, whole_process),
        "",
        "Where they run, instructions per RPC (and share) by object, the means of the runs:",
    ]
    rows = [("RPCs", "process", "mode", *OBJECTS)]
    for flavour, headers, process in ROWS:
        for mode in MODES:
            runs = runs_of(results, (flavour, headers, process), mode)
            costs = {name: statistics.fmean(run[name] for run in runs) for name in OBJECTS}
            total = sum(costs.values())
            shares = [f"{costs[name]:,.0f} ({costs[name] / total:.0%})" for name in OBJECTS]
            rows.append((f"{flavour} unary, {headers} headers", process, mode, *shares))
    return "\n".join([*lines, format_table(rows)])


def main(argv):
    parser = argparse.ArgumentParser(
        prog="python benchmark.py --rpc-instructions",
        usage="python benchmark.py --rpc-instructions [options]",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--rpc-instructions", action="store_true")
    parser.add_argument(
        "--rpcs", type=positive_int, default=RPCS, help=f"N, the RPCs of the first measured batch ({RPCS})"
    )
    parser.add_argument("-o", metavar="FILE", help="also write the results as JSON, to chart with --plot")
    parser.add_argument("--plot", metavar="DIR", help="also chart the results into DIR")
    parser.add_argument("--plot-format", choices=plot.FORMATS, default=plot.FORMATS[0])
    args = parser.parse_args(argv)
    if args.plot:
        plot.require_matplotlib()
    if shutil.which("valgrind") is None:
        sys.exit("--rpc-instructions needs valgrind, which is not installed: apt-get install valgrind")

    import grpc

    import fastcommon

    started = time.monotonic()
    versions = (
        f"CPython {sys.version.split()[0]}, grpcio {grpc.__version__}, fastcommon {fastcommon.__version__} "
        f"({fastcommon.IMPLEMENTATION})"
    )
    print(versions)
    with tempfile.TemporaryDirectory() as stubs_dir, tempfile.TemporaryDirectory() as out_dir:
        generate_stubs(stubs_dir)
        results = measure(stubs_dir, out_dir, args.rpcs)
    print(report(results, args.rpcs))
    print(f"\n(--rpc-instructions took {time.monotonic() - started:.0f} s)")
    if args.o:
        flat = {" | ".join(map(str, key)): costs for key, costs in results.items()}
        with open(args.o, "w", encoding="utf-8") as file:
            json.dump({"versions": versions, "rpcs": args.rpcs, "instructions": flat}, file, indent=1)
        print(f"wrote {args.o}")
    if args.plot:
        print(plot.per_rpc_chart({"instructions": results}, args.plot, args.plot_format))
