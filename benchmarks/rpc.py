"""--rpc: real servers and clients, stock against patched: time and CPU per RPC, and the most _common could cost.

Each round starts a fresh stock pair and a fresh patched pair of processes (a server and a
client each) and runs their batches interleaved, alternating which goes first; the 95%
confidence intervals are over rounds, so they include the differences between process pairs.
"""

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import plot
from benchmarks.suite import small_message
from benchmarks.timing import HEADER, METHOD, format_table, mean_and_ci95
from fastcommon._adoption import ns_per_call
from fastcommon._patching import FUNCTIONS, METADATUM
from grpc_echo import (
    aio_echo_server,
    counting_calls,
    counting_metadata_entries,
    echo_server,
    generate_stubs,
    import_stubs,
)

RPC_KINDS = (
    "sync unary",
    "sync server-stream (10 replies)",
    "aio unary",
    "sync unary, 10 headers",
    "aio unary, 10 headers",
)
STREAM_LENGTH = 10
ROUNDS, RPCS = 12, 400  # the defaults of --rounds and --rpcs
HEADERS = tuple((f"x-request-header-{i}", f"value {i}") for i in range(10))
BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark.py")


def server(mode, flavour, stubs_dir):
    """A server process: prints its port; then answers each line "cpu" on stdin with its CPU seconds, until EOF."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
    pb2, pb2_grpc = import_stubs(stubs_dir)

    def answer_until_eof():
        for _ in sys.stdin:
            print(time.process_time(), flush=True)

    if flavour == "aio":

        async def serve():
            async with aio_echo_server(pb2, pb2_grpc) as address:
                print(address.rsplit(":", 1)[1], flush=True)
                await asyncio.get_running_loop().run_in_executor(None, answer_until_eof)

        asyncio.run(serve())
    else:
        with echo_server(pb2, pb2_grpc, max_workers=4) as address:
            print(address.rsplit(":", 1)[1], flush=True)
            answer_until_eof()


def client(mode, sync_port, aio_port, stubs_dir):
    """A client process: for each line "KIND|N" on stdin, makes N RPCs and prints the wall and CPU seconds taken."""
    if mode == "patched":
        import fastcommon

        fastcommon.patch()
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

    async def aio_unary(n, metadata=None):
        for _ in range(n):
            await aio_stub.Unary(request, metadata=metadata)

    def sync_unary(n, metadata=None):
        for _ in range(n):
            stub.Unary(request, metadata=metadata)

    def sync_stream(n):
        for _ in range(n):
            for _ in stub.ServerStream(stream_request):
                pass

    run = dict(
        zip(
            RPC_KINDS,
            (
                sync_unary,
                sync_stream,
                lambda n: loop.run_until_complete(aio_unary(n)),
                lambda n: sync_unary(n, HEADERS),
                lambda n: loop.run_until_complete(aio_unary(n, HEADERS)),
            ),
            strict=False,
        )
    )
    for kind in RPC_KINDS:
        run[kind](20)  # warm up channels
    print("ready", flush=True)
    for line in sys.stdin:
        kind, n = line.rstrip("\n").split("|")
        wall, cpu = time.perf_counter(), time.process_time()
        run[kind](int(n))
        print(time.perf_counter() - wall, time.process_time() - cpu, flush=True)
    loop.run_until_complete(aio_channel.close())
    channel.close()


def count_calls_per_rpc(stubs_dir):
    """{kind: Counter((side, function) -> calls per RPC; ("both", _Metadatum) -> entries built)}, grpc patched."""
    import grpc

    import fastcommon

    pb2, pb2_grpc = import_stubs(stubs_dir)
    request = small_message(pb2.Echo)
    counts = {}
    with fastcommon.patched(), echo_server(pb2, pb2_grpc) as address, grpc.insecure_channel(address) as channel:
        stub = pb2_grpc.EchoServiceStub(channel)
        rpcs = {
            RPC_KINDS[0]: lambda: stub.Unary(request),
            RPC_KINDS[1]: lambda: list(stub.ServerStream(pb2.Echo(text=METHOD, count=STREAM_LENGTH))),
            RPC_KINDS[3]: lambda: stub.Unary(request, metadata=HEADERS),
        }
        for kind, rpc in rpcs.items():
            rpc()
            with counting_calls() as counted, counting_metadata_entries() as entries:
                rpc()
            counted["both", METADATUM] = entries["entries"]
            counts[kind] = counted

        async def aio_counts(metadata):
            async with (
                aio_echo_server(pb2, pb2_grpc) as aio_address,
                grpc.aio.insecure_channel(aio_address) as aio_channel,
            ):
                aio_stub = pb2_grpc.EchoServiceStub(aio_channel)
                await aio_stub.Unary(request, metadata=metadata)
                with counting_calls() as counted, counting_metadata_entries() as entries:
                    await aio_stub.Unary(request, metadata=metadata)
            counted["both", METADATUM] = entries["entries"]
            return counted

        counts[RPC_KINDS[2]] = asyncio.run(aio_counts(None))
        counts[RPC_KINDS[4]] = asyncio.run(aio_counts(HEADERS))
    return counts


def per_call_costs_ns(stubs_dir):
    """{name: (grpc's ns per call, fastcommon's)} on the inputs grpc passes most; timeit, best of 5."""
    from grpc import _common
    from grpc._cython import cygrpc

    import fastcommon

    pb2, _ = import_stubs(stubs_dir)
    message = small_message(pb2.Echo)
    calls = {  # method names, and the Echo message
        "encode": (METHOD,),
        "decode": (METHOD.encode(),),
        "serialize": (message, pb2.Echo.SerializeToString),
        "deserialize": (message.SerializeToString(), pb2.Echo.FromString),
    }
    n = 200_000
    costs = {
        name: (ns_per_call(getattr(_common, name), args, n), ns_per_call(getattr(fastcommon, name), args, n))
        for name, args in calls.items()
    }
    grpcs = ns_per_call(cygrpc._Metadatum, HEADER, n)
    compiled = fastcommon._implementation.chosen
    if hasattr(compiled, "MetadatumConstructor"):  # the compiled module, unless a Limited API (abi3) build
        costs[METADATUM] = (grpcs, ns_per_call(compiled.MetadatumConstructor(cygrpc._Metadatum), HEADER, n))
    else:
        costs[METADATUM] = (grpcs, grpcs)  # left to grpc: no saving
    return costs


def start(args):
    process = subprocess.Popen(
        [sys.executable, BENCHMARK, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    line = process.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"benchmark helper {args} exited with {process.wait()}")
    return process, line


def ask(process, line):
    process.stdin.write(line + "\n")
    process.stdin.flush()
    return [float(value) for value in process.stdout.readline().split()]


def measure_rounds(stubs_dir, modes, rounds, rpcs):
    """{(mode, kind): {"wall"|"client cpu"|"server cpu": [us per RPC, one value per round]}}."""
    measured = {(mode, kind): {"wall": [], "client cpu": [], "server cpu": []} for mode in modes for kind in RPC_KINDS}
    for round_number in range(rounds):
        print(f"--rpc: round {round_number + 1} of {rounds}", file=sys.stderr, flush=True)
        order = modes if round_number % 2 == 0 else modes[::-1]
        clients, servers = {}, {}
        try:
            for mode in order:
                for flavour in ("sync", "aio"):
                    servers[mode, flavour] = start(["--rpc-server", mode, flavour, stubs_dir])
                ports = (servers[mode, "sync"][1], servers[mode, "aio"][1])
                clients[mode], _ = start(["--rpc-client", mode, *ports, stubs_dir])
            for kind in RPC_KINDS:
                for mode in order:
                    serving = servers[mode, "aio" if kind.startswith("aio") else "sync"][0]
                    [server_before] = ask(serving, "cpu")
                    wall, client_cpu = ask(clients[mode], f"{kind}|{rpcs}")
                    [server_after] = ask(serving, "cpu")
                    for key, seconds in (
                        ("wall", wall),
                        ("client cpu", client_cpu),
                        ("server cpu", server_after - server_before),
                    ):
                        measured[mode, kind][key].append(seconds / rpcs * 1e6)
        finally:
            # Clients first: no server goes away under them.
            for group in (list(clients.values()), [process for process, _ in servers.values()]):
                for process in group:
                    process.stdin.close()
                for process in group:
                    process.wait(timeout=60)
    return measured


def interval(values):
    mean, ci = mean_and_ci95(values)
    return f"{mean:.1f} +- {ci:.1f}"


def main(argv):
    parser = argparse.ArgumentParser(prog="python benchmark.py --rpc", description="stock against patched, per RPC")
    parser.add_argument("--rpc", action="store_true")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"rounds, each with fresh processes (default {ROUNDS})"
    )
    parser.add_argument("--rpcs", type=int, default=RPCS, help=f"RPCs per round (default {RPCS})")
    parser.add_argument(
        "--control",
        action="store_true",
        help="A/A: the second pair runs stock too, to show what this method calls a difference",
    )
    parser.add_argument("--plot", metavar="DIR", help="also write a chart of the per-RPC breakdown into DIR")
    parser.add_argument("--plot-format", choices=plot.FORMATS, default=plot.FORMATS[0])
    args = parser.parse_args(argv)
    modes = ("stock", "stock-again" if args.control else "patched")

    import grpc

    import fastcommon

    with tempfile.TemporaryDirectory() as stubs_dir:
        generate_stubs(stubs_dir)
        print(
            f"CPython {sys.version.split()[0]}, grpcio {grpc.__version__}, fastcommon {fastcommon.__version__} "
            f"({fastcommon.IMPLEMENTATION})"
        )
        counts = count_calls_per_rpc(stubs_dir)
        costs = per_call_costs_ns(stubs_dir)
        measured = measure_rounds(stubs_dir, modes, args.rounds, args.rpcs)

    ceiling, expected = {}, {}
    names = (*FUNCTIONS, METADATUM)
    rows = [("RPC kind", "side", *names, "grpc's cost", "fastcommon saves")]
    for kind, counted in counts.items():
        for side in ("client", "server", "both"):
            calls = [counted[side, name] for name in names]
            cost = sum(c * costs[name][0] for c, name in zip(calls, names, strict=False)) / 1000
            saving = sum(c * (costs[name][0] - costs[name][1]) for c, name in zip(calls, names, strict=False)) / 1000
            ceiling[kind] = ceiling.get(kind, 0) + cost
            expected[kind] = expected.get(kind, 0) + saving
            shown = [
                str(c) if (side == "both") == (name == METADATUM) else "" for c, name in zip(calls, names, strict=False)
            ]
            rows.append((kind, side, *shown, f"{cost:.3f} µs", f"{saving:.3f} µs"))
    print(
        "\nCalls per RPC, counted with grpc patched: grpc._common's functions by side (the aio server converts "
        "in grpcio's Cython core, out of reach), and the metadata entries grpc's core builds, client and server "
        f"together (the '10 headers' kinds send {len(HEADERS)} request headers):"
    )
    print(format_table(rows))
    print(
        "\nns per call measured in this run (timeit, best of 5), grpc's -> fastcommon's: "
        + ", ".join(f"{name} {grpc_ns:.1f} -> {ours:.1f}" for name, (grpc_ns, ours) in costs.items())
    )

    header = (
        f"{args.rounds} rounds of {args.rpcs} RPCs, fresh processes every round; mean +- 95% CI over rounds; "
        f"server and client each in their own process, both {modes[0]} or both {modes[1]}"
    )
    print(f"\nWall-clock µs per RPC, {header}:")
    rows = [("RPC kind", *modes, "difference", "expected from counts")]
    verdicts = []
    for kind in RPC_KINDS:
        first, second = measured[modes[0], kind]["wall"], measured[modes[1], kind]["wall"]
        diff, diff_ci = mean_and_ci95([a - b for a, b in zip(first, second, strict=False)])
        stock = mean_and_ci95(first)[0]
        rows.append(
            (
                kind,
                interval(first),
                interval(second),
                f"{diff:+.2f} +- {diff_ci:.2f} µs ({diff / stock:+.1%})",
                f"{expected[kind]:.3f} µs",
            )
        )
        if abs(diff) > diff_ci:
            verdicts.append(
                f"{kind}: {modes[1]} is {'faster' if diff > 0 else 'slower'} by {abs(diff):.2f} µs per "
                f"RPC, more than the noise (+- {diff_ci:.2f} µs)."
            )
        else:
            verdicts.append(
                f"{kind}: the difference ({diff:+.2f} µs) is within the noise (+- {diff_ci:.2f} µs); the "
                f"expected saving, {expected[kind]:.3f} µs, is too small to see here."
            )
    print(format_table(rows))

    print(f"\nCPU µs per RPC, each process's own CPU time; {header}:")
    rows = [("RPC kind", *(f"{side} {mode}" for side in ("client", "server") for mode in modes))]
    for kind in RPC_KINDS:
        rows.append(
            (kind, *(interval(measured[mode, kind][f"{side} cpu"]) for side in ("client", "server") for mode in modes))
        )
    print(format_table(rows))

    print(
        "\nThe ceiling: calls per RPC x grpc's own cost per call (grpc._common's functions and the metadata "
        "entries), the most that any replacement of them could save, against the CPU per RPC (client + server, "
        f"{modes[0]}):"
    )
    breakdown = {}
    rows = [("RPC kind", "CPU per RPC", "ceiling", "share", "fastcommon saves", "share")]
    for kind in RPC_KINDS:
        cpu = (
            mean_and_ci95(measured[modes[0], kind]["client cpu"])[0]
            + mean_and_ci95(measured[modes[0], kind]["server cpu"])[0]
        )
        breakdown[kind] = (cpu, ceiling[kind], expected[kind])
        rows.append(
            (
                kind,
                f"{cpu:.1f} µs",
                f"{ceiling[kind]:.3f} µs",
                f"{ceiling[kind] / cpu:.2%}",
                f"{expected[kind]:.3f} µs",
                f"{expected[kind] / cpu:.2%}",
            )
        )
    print(format_table(rows))
    print()
    print("\n".join(verdicts))
    if args.plot:
        print(plot.per_rpc_chart(breakdown, args.plot, args.plot_format))
