"""--rpc-instructions: the instructions an RPC costs each process, stock and patched, counted by callgrind.

A server and a client, each a process of its own, each under valgrind --tool=callgrind. For each of
no request headers and ten, the client makes 30 RPCs to warm up, then a "mark" RPC, N RPCs, a mark,
2N RPCs, a mark. At each mark both processes collect their garbage, freeze what survives (so that no
later collection walks it), and dump their counters (callgrind dumps when libc's getppid is entered:
the server's handler calls it for a mark, the client once the mark's reply is back). The dump between
the second and third marks less the one between the first and second is N RPCs exactly: start-up,
warm-up and the marks themselves cancel out. Instructions per RPC are that difference over N, in all
and split by the object they ran in; the collections each segment held are counted and shown.

The saving is counted where fastcommon works, each process's Python side (the interpreter loop, the
rest of libpython, fastcommon, Python's other extension modules), which repeats from run to run; the
headline divides it by the whole process's stock instructions, which add grpc's extension (grpc core
and its Cython layer), libc and the rest: there grpc core's own threads poll, lock and wait, as
valgrind happens to interleave them, so that the whole process's own difference is noise. The
dynamic loader's thread-local lookups that libpython makes (CPython 3.12+) count as libpython's.

Every configuration runs stock, patched, stock, patched, four times over (--fast: twice): each
process's memory layout is its own, and moves its Python side by up to 0.8%, so it takes more
processes, not more RPCs, to repeat. The savings are those of the means, with their range over every
stock run against every patched one; the control, the later half of the stock runs against the
earlier half, is what the method itself calls a difference.
"""

import asyncio
import gc
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import plot, price
from benchmarks.callgrind import OBJECTS, PYTHON_SIDE, python_side, self_costs, whole_process, whole_process_saving
from benchmarks.suite import small_message
from benchmarks.timing import Progress, duration, format_table, versions_line
from grpc_echo import REQUEST_HEADERS, aio_echo_server, echo_server, generate_stubs, import_stubs, reading_servicer

BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark.py")
FLAVOURS = ("sync", "aio")
MODES = ("stock", "patched")
REPEATS = 4  # runs of each mode, interleaved; a process's memory layout alone moves its Python side up to 0.8%
FAST_REPEATS = 2  # --fast
HEADER_COUNTS = (0, len(REQUEST_HEADERS))
RPCS = 300  # N, the default of --rpcs: what varies varies from process to process, so more runs rather than RPCs
WARM_UP = 30
MARK = "mark"
PROCESSES = ("server", "client")
ROWS = [(flavour, headers, process) for flavour in FLAVOURS for headers in HEADER_COUNTS for process in PROCESSES]


def marking_servicer(pb2, pb2_grpc, flavour):
    """The echo service, whose handler reads the invocation metadata (as interceptors do) and marks on "mark"."""

    def answer(request, context):
        context.invocation_metadata()
        if request.text == MARK:
            MARKS.mark()
        return pb2.Echo(text=request.text, payload=request.payload, count=request.count + 1)

    return reading_servicer(pb2, pb2_grpc, flavour, answer)


class Marks:
    """A process's marks: each a full collection, what survives it frozen (so that no later collection walks
    it: a full collection in a segment then costs what the segment itself made), the collections so far noted,
    then callgrind's dump. At exit the collections per mark go to ``path``, as JSON."""

    def __init__(self):
        self.path, self.counts, self.noted, self.collecting = None, [0, 0, 0], [], False
        gc.callbacks.append(self.count)

    def count(self, phase, info):
        if phase == "start" and not self.collecting:  # the interpreter's own collections, by generation
            self.counts[info["generation"]] += 1

    def mark(self):
        self.collecting = True
        gc.collect()
        gc.freeze()
        self.collecting = False
        self.noted.append(list(self.counts))
        os.getppid()  # callgrind dumps here

    def save(self):
        with open(self.path, "w", encoding="utf-8") as file:
            json.dump(self.noted, file)


MARKS = Marks()


def server(mode, flavour, stubs_dir, collections_path):
    """A server process: prints its port, then serves until its stdin closes."""
    MARKS.path = collections_path
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
    MARKS.save()


def client(mode, flavour, port, stubs_dir, rpcs, collections_path):
    """A client process: for each header count, warm-up, mark, N RPCs, mark, 2N RPCs, mark."""
    MARKS.path = collections_path
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
                            MARKS.mark()

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
                        MARKS.mark()
    MARKS.save()


def per_rpc(out_prefix, rpcs, executable):
    """{headers: {category: instructions per RPC}} from one process's dumps: (2N segment - N segment) / N."""
    dumps = sorted(glob.glob(f"{out_prefix}.[0-9]*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    marks = 3 * len(HEADER_COUNTS)  # then the rest at exit, where the process ends by itself
    if len(dumps) not in (marks, marks + 1):
        raise RuntimeError(f"{out_prefix}: {len(dumps)} callgrind dumps, not {marks}: a getppid call unaccounted for")
    names = {"ob": {}, "fn": {}}
    segments = [self_costs(dump, executable, names) for dump in dumps[:marks]]  # in order: names carry over
    with open(f"{out_prefix}.collections", encoding="utf-8") as file:
        noted = json.load(file)  # the collections so far, at each mark
    costs = {}
    for index, headers in enumerate(HEADER_COUNTS):
        costs[headers] = {
            name: (segments[3 * index + 2][name] - segments[3 * index + 1][name]) / rpcs for name in OBJECTS
        }
        first, second, third = noted[3 * index : 3 * index + 3]
        costs[headers]["collections"] = [
            [b - a for a, b in zip(x, y, strict=True)] for x, y in ((first, second), (second, third))
        ]
    return costs


def under_callgrind(out_prefix, args):
    command = [
        "valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={out_prefix}",
        sys.executable, BENCHMARK, *args,
    ]  # fmt: skip
    environ = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environ)  # fmt: skip


# What a run (a server and a client starting under callgrind, then the RPCs) took on MEASURED_ON, where the default
# run, 16 runs, took 14.5 min. The first line's estimate, before a run is done; then the pace of the runs done.
SECONDS_TO_START, SECONDS_AN_RPC = 34, 0.011
MEASURED_ON = "a 2-core machine beside other work, load average 2-3"


def measure(stubs_dir, out_dir, rpcs, repeats, clock=time.monotonic):
    """{(flavour, headers, process, mode, run): {category: instructions per RPC}}, a server and client at a time."""
    executable = os.path.basename(os.path.realpath(sys.executable))
    results = {}
    runs = [(flavour, run, mode) for flavour in FLAVOURS for run in range(1, repeats + 1) for mode in MODES]
    expected = len(runs) * (SECONDS_TO_START + SECONDS_AN_RPC * (WARM_UP + 3 * rpcs + 6) * 2)
    progress = Progress("--rpc-instructions", len(runs), "runs", f" under callgrind, a server and a client each: "
                        f"about {duration(expected)} at the pace measured on {MEASURED_ON}",
                        clock)  # fmt: skip
    for flavour, run, mode in runs:  # the modes interleaved: a drift falls on both
        prefix = os.path.join(out_dir, f"{flavour}-{mode}-{run}")
        serve_and_ask(prefix, mode, flavour, stubs_dir, rpcs)
        for process in PROCESSES:
            for headers, costs in per_rpc(f"{prefix}-{process}", rpcs, executable).items():
                results[flavour, headers, process, mode, run] = costs
        progress.step(f" ({flavour}, {mode})")
    return results


def serve_and_ask(prefix, mode, flavour, stubs_dir, rpcs):
    """Run a server and its client under callgrind, their dumps at ``prefix``-server.* and -client.*."""
    serving = under_callgrind(
        f"{prefix}-server", ["--rpc-instructions-server", mode, flavour, stubs_dir, f"{prefix}-server.collections"]
    )
    try:
        port = serving.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"the {flavour} server under callgrind did not start: {serving.stderr.read()}")
        asking = under_callgrind(
            f"{prefix}-client",
            ["--rpc-instructions-client", mode, flavour, port, stubs_dir, str(rpcs), f"{prefix}-client.collections"],
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


def control(stock_python, stock_whole):
    """The later half of the stock runs against the earlier half (their Python sides' means, over the whole
    process's): what the method itself calls a difference."""
    half = len(stock_python) // 2
    earlier, later = statistics.fmean(stock_python[:half]), statistics.fmean(stock_python[half:])
    return (later - earlier) / statistics.fmean(stock_whole)


def savings_table(results, paid):
    """Stock against patched: the whole process's instructions, the Python side's saving, its share of the whole
    process (the headline) and of the Python side, the range of the headline over every pair of runs, the control,
    and the RPCs whose saving repays the price ``paid`` (price.instructions())."""
    rows = [("RPCs", "process", "stock, whole process", "saved (Python side)", "of the whole process", "range",
             "of the Python side", "control", "repaid after")]  # fmt: skip
    for flavour, headers, process in ROWS:
        stock, patched = (runs_of(results, (flavour, headers, process), mode) for mode in MODES)
        headline = whole_process_saving(stock, patched)
        check = control([python_side(c) for c in stock], [whole_process(c) for c in stock])
        rows.append(
            (f"{flavour} unary, {headers} headers", process, f"{headline['stock']:,.0f}", f"{headline['saved']:,.0f}",
             f"{headline['share']:.1%}", f"{headline['low']:.1%} to {headline['high']:.1%}",
             f"{headline['python_share']:.1%}", f"{check:+.2%}",
             f"{sum(paid.values()) / headline['saved']:,.0f} RPCs" if headline["saved"] > 0 else "never")
        )  # fmt: skip
    return format_table(rows, text_columns=2)


def collections_table(results):
    """The collections each measured segment held (N RPCs, then 2N), by generation: the means of the runs."""
    rows = [("RPCs", "process", "mode", "N: gen 0, 1, 2", "2N: gen 0, 1, 2")]
    for flavour, headers, process in ROWS:
        for mode in MODES:
            runs = [costs["collections"] for costs in runs_of(results, (flavour, headers, process), mode)]
            segments = [
                ", ".join(f"{statistics.fmean(run[s][g] for run in runs):.1f}" for g in range(3)) for s in (0, 1)
            ]
            rows.append((f"{flavour} unary, {headers} headers", process, mode, *segments))
    return format_table(rows, text_columns=3)


def report(results, rpcs, paid):
    """The tables: the saving per RPC against the whole process, the collections, and where the instructions run."""
    lines = [
        f"Instructions per RPC (callgrind; {rpcs} RPCs, the difference of 2N and N between marks). Each mode ran "
        f"{len(runs_of(results, ROWS[0], MODES[0]))} times, interleaved: the means. Saved: counted on each process's "
        f"Python side ({', '.join(PYTHON_SIDE)}), where fastcommon works; the headline divides it by the whole "
        "process's stock instructions (grpc's extension, libc and the rest added); its range, every stock run "
        "against every patched one; the control, the later half of the stock runs against the earlier half. "
        f"Repaid after: the price, {paid['import']:,} instructions for import fastcommon and {paid['patch']:,} "
        "for patch() (benchmarks/price.py), over the saving per RPC.",
        "",
        savings_table(results, paid),
        "",
        "Collections in each measured segment (automatic ones; a full one walks only what the segment made):",
        collections_table(results),
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
    return "\n".join([*lines, format_table(rows, text_columns=3)])


def main(args):
    """--rpc-instructions, with benchmark.py's options parsed."""
    if args.plot:
        plot.require_matplotlib()
    if shutil.which("valgrind") is None:
        sys.exit("--rpc-instructions needs valgrind, which is not installed: apt-get install valgrind")

    started, rpcs = time.monotonic(), args.rpcs or RPCS
    versions = versions_line()
    print(versions)
    with tempfile.TemporaryDirectory() as stubs_dir, tempfile.TemporaryDirectory() as out_dir:
        generate_stubs(stubs_dir)
        results = measure(stubs_dir, out_dir, rpcs, FAST_REPEATS if args.fast else REPEATS)
    paid = price.instructions()
    print(report(results, rpcs, paid))
    print(f"\n(--rpc-instructions took {time.monotonic() - started:.0f} s)")
    if args.o:
        flat = {" | ".join(map(str, key)): costs for key, costs in results.items()}
        with open(args.o, "w", encoding="utf-8") as file:
            json.dump({"versions": versions, "rpcs": rpcs, "instructions": flat, "price": paid}, file, indent=1)
        print(f"wrote {args.o}")
    if args.plot:
        print(plot.per_rpc_chart({"instructions": results}, args.plot, args.plot_format))
