"""Time fastcommon against grpc._common: per call with pyperf, and per RPC with real servers (--rpc).

    python benchmark.py                  # the four conversion cases and (de)serialize, ~2 minutes
    python benchmark.py --fast           # pyperf's quick mode
    python benchmark.py --more-inputs    # also a 1 KiB details string, non-ASCII text, invalid UTF-8
    python benchmark.py -o results.json  # then: python -m pyperf compare_to a.json b.json --table
    python benchmark.py --rpc            # end to end: stock vs patched servers and clients
"""

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from itertools import repeat

from grpc_echo import import_stubs

METHOD = "/grpc.testing.BenchmarkService/UnaryCall"  # 40 ASCII bytes, a typical method name
IMPLEMENTATIONS = ("grpc._common", "fastcommon.common", "fastcommon.fast_common")
FLOOR = "floor: callable(x)"
UNROLL = 10


def time_calls(loops, function, argument):
    """pyperf time function: ``loops`` passes over an unrolled body of UNROLL calls."""
    f, x = function, argument
    start = time.perf_counter()
    for _ in repeat(None, loops):
        f(x); f(x); f(x); f(x); f(x); f(x); f(x); f(x); f(x); f(x)  # noqa: E702
    return time.perf_counter() - start


def time_transform_calls(loops, function, message, transformer):
    f, m, t = function, message, transformer
    start = time.perf_counter()
    for _ in repeat(None, loops):
        f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t)  # noqa: E702
    return time.perf_counter() - start


def modules():
    import importlib

    return {name: importlib.import_module(name) for name in IMPLEMENTATIONS}


def conversion_cases(more_inputs):
    """(case label, function name, input) for every conversion timed."""
    method = [
        ("encode str->bytes", "encode", METHOD),
        ("encode bytes->bytes", "encode", METHOD.encode()),
        ("decode bytes->str", "decode", METHOD.encode()),
        ("decode str->str", "decode", METHOD),
    ]
    if not more_inputs:
        return method
    details = "The request was rejected because a field was missing. " * 19  # ~1 KiB, as status details
    details = details[:1024]
    non_ascii = "Zürich, Kraków, 東京, Αθήνα: ✓ done 🚀"
    return method + [
        ("encode 1KiB details", "encode", details),
        ("decode 1KiB details", "decode", details.encode()),
        ("encode non-ASCII", "encode", non_ascii),
        ("decode non-ASCII", "decode", non_ascii.encode()),
        ("decode invalid UTF-8", "decode", b"\xff\xfeok\xc3(" * 8),
    ]


def small_message(message_class):
    return message_class(text=METHOD, payload=b"\x00\x01payload", count=42)


def format_table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def per_call_table(results, cases):
    """ns per call, speedup over grpc._common and ratio to the floor, from pyperf's benchmarks."""
    ns = {name: bench.mean() * 1e9 for name, bench in results.items() if bench is not None}
    rows = [("case", "implementation", "ns/call", "speedup over grpc._common", "x floor")]
    for label in cases:
        grpc_ns, floor_ns = ns.get(f"{label} | grpc._common"), ns.get(f"{label} | {FLOOR}")
        for implementation in (*IMPLEMENTATIONS, FLOOR):
            value = ns.get(f"{label} | {implementation}")
            if value is None:
                continue
            speedup = f"{grpc_ns / value:.2f}x" if grpc_ns else ""
            floor = f"{value / floor_ns:.2f}x" if floor_ns else ""
            rows.append((label, implementation, f"{value:.1f}", speedup, floor))
    return format_table(rows)


def pyperf_main():
    import pyperf

    def forward_options(cmd, args):
        cmd.extend(["--stubs", args.stubs])
        if args.more_inputs:
            cmd.append("--more-inputs")

    runner = pyperf.Runner(processes=6, values=3, add_cmdline_args=forward_options)
    runner.argparser.add_argument("--more-inputs", action="store_true",
                                  help="also time a 1 KiB details string, non-ASCII text and invalid UTF-8")
    runner.argparser.add_argument("--stubs", help=argparse.SUPPRESS)
    args = runner.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        if not args.stubs:  # the manager generates the protobuf module once; workers import it
            from grpc_echo import generate_stubs

            generate_stubs(temporary)
            args.stubs = temporary
        implementations = modules()
        results = {}
        labels = []
        for label, function_name, argument in conversion_cases(args.more_inputs):
            labels.append(label)
            for name, module in implementations.items():
                results[f"{label} | {name}"] = runner.bench_time_func(
                    f"{label} | {name}", time_calls, getattr(module, function_name), argument, inner_loops=UNROLL)
            results[f"{label} | {FLOOR}"] = runner.bench_time_func(
                f"{label} | {FLOOR}", time_calls, callable, argument, inner_loops=UNROLL)
        message_class = import_stubs(args.stubs)[0].Echo
        message = small_message(message_class)
        for label, function_name, payload, transformer in (
            ("serialize Echo message", "serialize", message, message_class.SerializeToString),
            ("deserialize Echo message", "deserialize", message.SerializeToString(), message_class.FromString),
        ):
            labels.append(label)
            for name, module in implementations.items():
                results[f"{label} | {name}"] = runner.bench_time_func(
                    f"{label} | {name}", time_transform_calls, getattr(module, function_name), payload, transformer,
                    inner_loops=UNROLL)
        if not args.worker and not any(bench is None for bench in results.values()):
            import grpc

            print()
            print(f"CPython {sys.version.split()[0]}, grpcio {grpc.__version__}; mean of pyperf's values; "
                  f"floor = the builtin C call callable(x)")
            print(per_call_table(results, labels))


# ----------------------------------------------------------------------------- --rpc

RPC_KINDS = ("sync unary", "sync server-stream (10 replies)", "aio unary")
STREAM_LENGTH = 10


def rpc_server(mode, flavour, stubs_dir):
    """A server process: prints its port, serves until stdin closes."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
    from grpc_echo import aio_echo_server, echo_server

    pb2, pb2_grpc = import_stubs(stubs_dir)
    if flavour == "aio":
        import asyncio

        async def serve():
            async with aio_echo_server(pb2, pb2_grpc) as address:
                print(address.rsplit(":", 1)[1], flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

        asyncio.run(serve())
    else:
        with echo_server(pb2, pb2_grpc, max_workers=4) as address:
            print(address.rsplit(":", 1)[1], flush=True)
            sys.stdin.read()


def rpc_client(mode, sync_port, aio_port, stubs_dir):
    """A client process: for each line "KIND|N" on stdin, makes N RPCs of that kind and prints the seconds taken."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
    import asyncio

    import grpc

    pb2, pb2_grpc = import_stubs(stubs_dir)
    request = small_message(pb2.Echo)
    channel = grpc.insecure_channel(f"127.0.0.1:{sync_port}")
    stub = pb2_grpc.EchoServiceStub(channel)
    loop = asyncio.new_event_loop()

    async def open_aio_channel():  # an aio channel belongs to the loop it is made in
        return grpc.aio.insecure_channel(f"127.0.0.1:{aio_port}")

    aio_channel = loop.run_until_complete(open_aio_channel())
    aio_stub = pb2_grpc.EchoServiceStub(aio_channel)
    stream_request = pb2.Echo(text=METHOD, count=STREAM_LENGTH)

    async def aio_unary(n):
        for _ in range(n):
            await aio_stub.Unary(request)

    def sync_unary(n):
        for _ in range(n):
            stub.Unary(request)

    def sync_stream(n):
        for _ in range(n):
            for _ in stub.ServerStream(stream_request):
                pass

    run = {
        RPC_KINDS[0]: sync_unary,
        RPC_KINDS[1]: sync_stream,
        RPC_KINDS[2]: lambda n: loop.run_until_complete(aio_unary(n)),
    }
    for kind in RPC_KINDS:
        run[kind](20)  # warm up channels
    print("ready", flush=True)
    for line in sys.stdin:
        kind, n = line.rstrip("\n").split("|")
        start = time.perf_counter()
        run[kind](int(n))
        print(time.perf_counter() - start, flush=True)
    loop.run_until_complete(aio_channel.close())
    channel.close()


def count_calls_per_rpc(stubs_dir):
    """{kind: Counter((side, function) -> calls per RPC)}, counted in one process with grpc patched."""
    import asyncio

    import grpc

    import fastcommon
    from grpc_echo import aio_echo_server, counting_calls, echo_server

    pb2, pb2_grpc = import_stubs(stubs_dir)
    request = small_message(pb2.Echo)
    counts = {}
    with fastcommon.patched(), echo_server(pb2, pb2_grpc) as address, grpc.insecure_channel(address) as channel:
        stub = pb2_grpc.EchoServiceStub(channel)
        rpcs = {
            RPC_KINDS[0]: lambda: stub.Unary(request),
            RPC_KINDS[1]: lambda: list(stub.ServerStream(pb2.Echo(text=METHOD, count=STREAM_LENGTH))),
        }
        for kind, rpc in rpcs.items():
            rpc()
            with counting_calls() as counted:
                rpc()
            counts[kind] = counted

        async def aio_counts():
            async with aio_echo_server(pb2, pb2_grpc) as aio_address, \
                    grpc.aio.insecure_channel(aio_address) as aio_channel:
                aio_stub = pb2_grpc.EchoServiceStub(aio_channel)
                await aio_stub.Unary(request)
                with counting_calls() as counted:
                    await aio_stub.Unary(request)
            return counted

        counts[RPC_KINDS[2]] = asyncio.run(aio_counts())
    return counts


def per_call_saving_ns(stubs_dir):
    """ns saved per call by fastcommon's active implementation, timed here with timeit (best of 5)."""
    from grpc import _common

    import fastcommon

    pb2, _ = import_stubs(stubs_dir)
    message = small_message(pb2.Echo)
    calls = {  # the inputs grpc passes most: method names, messages
        "encode": (METHOD,),
        "decode": (METHOD.encode(),),
        "serialize": (message, pb2.Echo.SerializeToString),
        "deserialize": (message.SerializeToString(), pb2.Echo.FromString),
    }
    n = 200_000
    saving = {}
    for name, args in calls.items():
        def best(function):
            return min(timeit.repeat(lambda: function(*args), number=n, repeat=5)) / n * 1e9
        saving[name] = best(getattr(_common, name)) - best(getattr(fastcommon, name))
    return saving


def mean_and_ci95(values):
    """Mean and half-width of its 95% confidence interval (Student's t)."""
    from statistics import NormalDist

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, float("nan")
    t = _t_quantile_975(n - 1) if n < 31 else NormalDist().inv_cdf(0.975)
    return mean, t * statistics.stdev(values) / math.sqrt(n)


def _t_quantile_975(df):
    table = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
             2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
             2.045, 2.042]
    return table[df - 1]


def start(args):
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"benchmark helper {args} exited with {process.wait()}")
    return process, line


def rpc_main(argv):
    parser = argparse.ArgumentParser(prog="python benchmark.py --rpc", description="stock vs patched, per RPC")
    parser.add_argument("--rpc", action="store_true")
    parser.add_argument("--rounds", type=int, default=12, help="rounds, each with fresh processes (default 12)")
    parser.add_argument("--rpcs", type=int, default=400, help="RPCs per round (default 400)")
    parser.add_argument("--control", action="store_true",
                        help="A/A: the second pair runs stock too, to show what this method calls a difference")
    args = parser.parse_args(argv)
    modes = ("stock", "stock-again" if args.control else "patched")

    import grpc

    import fastcommon
    from grpc_echo import generate_stubs

    with tempfile.TemporaryDirectory() as stubs_dir:
        generate_stubs(stubs_dir)
        print(f"CPython {sys.version.split()[0]}, grpcio {grpc.__version__}, fastcommon {fastcommon.__version__} "
              f"({fastcommon.IMPLEMENTATION})")
        counts = count_calls_per_rpc(stubs_dir)
        saving = per_call_saving_ns(stubs_dir)

        rows = [("RPC kind", "side", "encode", "decode", "serialize", "deserialize", "expected saving")]
        expected = {}
        for kind, counted in counts.items():
            for side in ("client", "server"):
                calls = [counted[side, name] for name in ("encode", "decode", "serialize", "deserialize")]
                ns = sum(c * saving[name] for c, name in zip(calls, ("encode", "decode", "serialize", "deserialize")))
                expected[kind] = expected.get(kind, 0) + ns
                rows.append((kind, side, *calls, f"{ns / 1000:.3f} us"))
        print("\nCalls through grpc._common per RPC (counted with grpc patched; aio server-side conversions happen "
              "in grpcio's Cython core, out of reach):")
        print(format_table(rows))
        print("\nPer-call saving measured in this run (grpc._common - fastcommon, ns, timeit best of 5): "
              + ", ".join(f"{name} {ns:.1f}" for name, ns in saving.items()))

        # Every round starts fresh processes: a long-lived pair of processes can run tens of us per RPC
        # faster or slower than another pair for reasons of its own (--control, both pairs stock, showed
        # it), so the confidence interval must span process pairs, not only batches within one pair.
        us_per_rpc = {(mode, kind): [] for mode in modes for kind in RPC_KINDS}
        for round_number in range(args.rounds):
            order = modes if round_number % 2 == 0 else modes[::-1]
            clients, servers = {}, []
            try:
                for mode in order:
                    sync_server, sync_port = start(["--rpc-server", mode, "sync", stubs_dir])
                    aio_server, aio_port = start(["--rpc-server", mode, "aio", stubs_dir])
                    servers += [sync_server, aio_server]
                    clients[mode], _ = start(["--rpc-client", mode, sync_port, aio_port, stubs_dir])
                for kind in RPC_KINDS:
                    for mode in order:
                        clients[mode].stdin.write(f"{kind}|{args.rpcs}\n")
                        clients[mode].stdin.flush()
                        seconds = float(clients[mode].stdout.readline())
                        us_per_rpc[mode, kind].append(seconds / args.rpcs * 1e6)
            finally:
                for group in (list(clients.values()), servers):  # clients first: no server goes away under them
                    for process in group:
                        process.stdin.close()
                    for process in group:
                        process.wait(timeout=60)

    print(f"\nus per RPC, {args.rounds} rounds of {args.rpcs} RPCs each, fresh processes every round; mean +- 95% CI; "
          f"server and client each in their own process, both {modes[0]} or both {modes[1]}:")
    rows = [("RPC kind", *modes, "difference", "expected from counts")]
    verdicts = []
    for kind in RPC_KINDS:
        stock, stock_ci = mean_and_ci95(us_per_rpc[modes[0], kind])
        patched, patched_ci = mean_and_ci95(us_per_rpc[modes[1], kind])
        diffs = [s - p for s, p in zip(us_per_rpc[modes[0], kind], us_per_rpc[modes[1], kind])]
        diff, diff_ci = mean_and_ci95(diffs)
        rows.append((kind, f"{stock:.1f} +- {stock_ci:.1f}", f"{patched:.1f} +- {patched_ci:.1f}",
                     f"{diff:+.2f} +- {diff_ci:.2f} us ({diff / stock:+.1%})", f"{expected[kind] / 1000:.3f} us"))
        if abs(diff) > diff_ci:
            verdicts.append(f"{kind}: {modes[1]} is {'faster' if diff > 0 else 'slower'} by {abs(diff):.2f} us per RPC, "
                            f"more than the noise (+- {diff_ci:.2f} us).")
        else:
            verdicts.append(f"{kind}: the difference ({diff:+.2f} us) is within the noise (+- {diff_ci:.2f} us); "
                            f"the expected saving, {expected[kind] / 1000:.3f} us, is too small to see here.")
    print(format_table(rows))
    print()
    print("\n".join(verdicts))


def main():
    if sys.argv[1:2] == ["--rpc-server"]:
        rpc_server(*sys.argv[2:5])
    elif sys.argv[1:2] == ["--rpc-client"]:
        rpc_client(*sys.argv[2:6])
    elif "--rpc" in sys.argv[1:]:
        rpc_main(sys.argv[1:])
    else:
        pyperf_main()


if __name__ == "__main__":
    main()
