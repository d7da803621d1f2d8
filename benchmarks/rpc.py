"""--rpc: real servers and clients, stock against patched: CPU and time per RPC, and the most fastcommon could save.

Each round starts a fresh stock pair and a fresh patched pair of processes (a server and a
client each) and runs their batches interleaved, alternating which goes first. A saving is
the difference of each round's pair (stock minus patched: positive means patched is faster),
with its 95% confidence interval over rounds (Student's t); the verdict says whether that
interval lies above zero (saved), below it (slower), or holds it (noise).
"""

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import plot
from benchmarks.suite import small_message
from benchmarks.timing import (
    AIO_METADATA,
    FUNCTIONS,
    Progress,
    format_table,
    mean_and_ci95,
    ns_per_call,
    versions_line,
)
from fastcommon._registry import METHOD_NAME, USER_AGENT
from grpc_echo import (
    REQUEST_HEADERS,
    aio_echo_server,
    counting_aio_metadata,
    counting_calls,
    counting_metadata_entries,
    echo_server,
    generate_stubs,
    import_stubs,
)

METADATUM = "_Metadatum"  # the metadata entry, as patch() and --report name it

RPC_KINDS = (
    "sync unary",
    "sync server-stream (10 replies)",
    "aio unary",
    "sync unary, 10 headers",
    "aio unary, 10 headers",
)
AIO_PATH = "aio call metadata"  # tuple(_init_metadata(metadata)): once per grpc.aio call, on the client
STREAM_LENGTH = 10
ROUNDS, RPCS = 12, 400  # the defaults of --rounds and --rpcs
HEADERS = REQUEST_HEADERS
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
    stream_request = pb2.Echo(text=METHOD_NAME, count=STREAM_LENGTH)

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
            RPC_KINDS[1]: lambda: list(stub.ServerStream(pb2.Echo(text=METHOD_NAME, count=STREAM_LENGTH))),
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
                with (
                    counting_calls() as counted,
                    counting_metadata_entries() as entries,
                    counting_aio_metadata() as made,
                ):
                    await aio_stub.Unary(request, metadata=metadata)
            counted["both", METADATUM] = entries["entries"]
            counted["client", AIO_PATH] = made["calls"]
            return counted

        counts[RPC_KINDS[2]] = asyncio.run(aio_counts(None))
        counts[RPC_KINDS[4]] = asyncio.run(aio_counts(HEADERS))
    return counts


def per_call_costs_ns(stubs_dir):
    """{name: (grpc's ns per call, fastcommon's)} on the inputs grpc passes most; timeit, best of 5."""
    from grpc import _common
    from grpc._cython import cygrpc
    from grpc.aio._channel import _BaseMultiCallable

    import fastcommon

    pb2, _ = import_stubs(stubs_dir)
    message = small_message(pb2.Echo)
    calls = {  # method names, and the Echo message
        "encode": (METHOD_NAME,),
        "decode": (METHOD_NAME.encode(),),
        "serialize": (message, pb2.Echo.SerializeToString),
        "deserialize": (message.SerializeToString(), pb2.Echo.FromString),
    }
    n = 200_000
    costs = {
        name: (ns_per_call(getattr(_common, name), args, n), ns_per_call(getattr(fastcommon, name), args, n))
        for name, args in calls.items()
    }
    grpcs = ns_per_call(cygrpc._Metadatum, USER_AGENT, n)
    entry = fastcommon._implementation.compiled.get("fast_entry")  # none in pure Python or a Limited API (abi3) build
    if entry is not None:
        costs[METADATUM] = (grpcs, ns_per_call(entry.MetadatumConstructor(cygrpc._Metadatum), USER_AGENT, n))
    else:
        costs[METADATUM] = (grpcs, grpcs)  # left to grpc: no saving
    for label, metadata in AIO_METADATA.items():  # the path, with grpc's own and with fastcommon's
        path = {}
        for patched in (False, True):
            with fastcommon.patched() if patched else contextlib.nullcontext():
                path[patched] = ns_per_call(aio_metadata_path, (_BaseMultiCallable._init_metadata, metadata), n // 10)
        costs[label] = (path[False], path[True])
    return costs


def aio_metadata_path(init_metadata, metadata):
    """What a grpc.aio call does with its metadata: _init_metadata, then tuple() of it."""
    return tuple(init_metadata(metadata, None))


def start(args, **popen_keywords):
    """Start benchmark.py with ``args`` (and Popen's keywords) as a helper process: it and its first line."""
    process = subprocess.Popen(
        [sys.executable, BENCHMARK, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **popen_keywords
    )
    line = process.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"benchmark helper {args} exited with {process.wait()}")
    return process, line


def ask(process, line):
    """Send a helper process a line; its answer, a line of numbers."""
    process.stdin.write(line + "\n")
    process.stdin.flush()
    return [float(value) for value in process.stdout.readline().split()]


def measure_rounds(stubs_dir, modes, rounds, rpcs, progress):
    """{(mode, kind): {"wall"|"client cpu"|"server cpu": [us per RPC, one value per round]}}."""
    measured = {(mode, kind): {"wall": [], "client cpu": [], "server cpu": []} for mode in modes for kind in RPC_KINDS}
    for round_number in range(rounds):
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
        progress.step()
    return measured


def interval(values):
    mean, ci = mean_and_ci95(values)
    return f"{mean:.1f} ± {ci:.1f}"


def saving(stock, patched):
    """The paired saving over rounds (stock minus patched: positive means patched is faster) and its verdict."""
    mean, ci = mean_and_ci95([a - b for a, b in zip(stock, patched, strict=True)])
    return mean, ci, saving_verdict(mean, ci)


def saving_verdict(mean, ci):
    """What a saving is: "saved" if its 95% interval lies above zero, "slower" if below it, "noise" if it holds 0."""
    if mean - ci > 0:
        return "saved"
    if mean + ci < 0:
        return "slower"
    return "noise"  # also where the interval is unknown (nan): a single round


def expected_savings(counts, costs):
    """{kind: {"client"|"server"|"both": (grpc's cost us, fastcommon's saving us)}} from counts x ns per call."""
    names = (*FUNCTIONS, METADATUM, AIO_PATH)
    expected = {}
    for kind, counted in counts.items():
        expected[kind] = {}
        for side in ("client", "server", "both"):
            path = next(label for label in AIO_METADATA if ("10 headers" in label) == ("10 headers" in kind))
            cost = {**costs, AIO_PATH: costs[path]}
            calls = [(counted[side, name], cost[name]) for name in names]
            expected[kind][side] = (
                sum(c * grpcs for c, (grpcs, _) in calls) / 1000,
                sum(c * (grpcs - ours) for c, (grpcs, ours) in calls) / 1000,
            )
    return expected


def expected_differences(expected, control):
    """{kind: {side: µs saved, as the counts predict it, between this run's pairs}}: none if both are stock."""
    return {kind: {side: 0.0 if control else saved for side, (_, saved) in sides.items()}
            for kind, sides in expected.items()}  # fmt: skip


def main(args):
    """--rpc, with benchmark.py's options parsed."""
    if args.plot:
        plot.require_matplotlib()
    rounds, rpcs = args.rounds or ROUNDS, args.rpcs or RPCS
    modes = ("stock", "stock-again" if args.control else "patched")

    with tempfile.TemporaryDirectory() as stubs_dir:
        generate_stubs(stubs_dir)
        versions = versions_line()
        print(versions)
        progress = Progress("--rpc", rounds, "rounds", f" of {rpcs} RPCs of each kind, each with fresh processes;"
                            " first the calls per RPC counted, and grpc's and fastcommon's per call timed")  # fmt: skip
        counts = count_calls_per_rpc(stubs_dir)
        costs = per_call_costs_ns(stubs_dir)
        measured = measure_rounds(stubs_dir, modes, rounds, rpcs, progress)

    expected = expected_savings(counts, costs)
    predicted = expected_differences(expected, args.control)
    names = (*FUNCTIONS, METADATUM, AIO_PATH)
    rows = [("RPC kind", "side", *names, "grpc's cost", "fastcommon saves")]
    for kind, counted in counts.items():
        for side in ("client", "server", "both"):
            shown = [str(counted[side, name]) if (side == "both") == (name == METADATUM) else "" for name in names]
            cost, saved = expected[kind][side]
            rows.append((kind, side, *shown, f"{cost:.3f} µs", f"{saved:.3f} µs"))
    print(
        "\nCalls per RPC, counted with grpc patched: grpc._common's functions by side (the aio server converts "
        "in grpcio's Cython core, out of reach), the metadata entries grpc's core builds (client and server "
        "together), and the metadata a grpc.aio call makes (_init_metadata, then tuple(): on the client); "
        f"the '10 headers' kinds send {len(HEADERS)} request headers:"
    )
    print(format_table(rows, text_columns=2))
    print(
        "\nns per call measured in this run (timeit, best of 5), grpc's -> fastcommon's: "
        + ", ".join(f"{name} {grpc_ns:.1f} -> {ours:.1f}" for name, (grpc_ns, ours) in costs.items())
    )

    header = (
        f"{rounds} rounds of {rpcs} RPCs, fresh processes every round; mean ± 95% CI over rounds; "
        f"server and client each in their own process, both {modes[0]} or both {modes[1]}"
    )
    print(
        f"\nCPU µs per RPC, each process's own (time.process_time()); {header}. 'saved' is {modes[0]} minus "
        f"{modes[1]} for each round's pair (positive: {modes[1]} is faster); it is noise where its interval holds "
        "zero, slower where the interval is below it:"
    )
    rows = [("RPC kind", "process", modes[0], modes[1], "saved", "", "expected from counts")]
    savings = {}
    for kind in RPC_KINDS:
        for side in ("client", "server"):
            first, second = measured[modes[0], kind][f"{side} cpu"], measured[modes[1], kind][f"{side} cpu"]
            mean, ci, verdict = saving(first, second)
            savings[kind, side] = (mean, ci, verdict)
            rows.append(
                (kind, side, interval(first), interval(second), f"{mean:+.2f} ± {ci:.2f} µs", verdict,
                 f"{predicted[kind][side]:.3f} µs")
            )  # fmt: skip
    print(format_table(rows, text_columns=2))

    print(f"\nWall-clock µs per RPC, {header}:")
    rows = [("RPC kind", *modes, "saved", "")]
    for kind in RPC_KINDS:
        first, second = measured[modes[0], kind]["wall"], measured[modes[1], kind]["wall"]
        mean, ci, verdict = saving(first, second)
        rows.append((kind, interval(first), interval(second), f"{mean:+.2f} ± {ci:.2f} µs", verdict))
    print(format_table(rows))

    print(
        "\nThe ceiling: calls per RPC x grpc's own cost per call, the most that any replacement of them could "
        f"save, against the CPU per RPC (client + server, {modes[0]}):"
    )
    breakdown = {}
    rows = [("RPC kind", "CPU per RPC", "ceiling", "share", "fastcommon saves", "share")]
    for kind in RPC_KINDS:
        cpu = sum(mean_and_ci95(measured[modes[0], kind][f"{side} cpu"])[0] for side in ("client", "server"))
        ceiling = sum(expected[kind][side][0] for side in expected[kind])
        saved = sum(expected[kind][side][1] for side in expected[kind])
        breakdown[kind] = (cpu, ceiling, saved)
        shares = f"{ceiling / cpu:.2%}", f"{saved / cpu:.2%}"
        rows.append((kind, f"{cpu:.1f} µs", f"{ceiling:.3f} µs", shares[0], f"{saved:.3f} µs", shares[1]))
    print(format_table(rows))
    results = {
        "versions": versions,
        "modes": modes,
        "rounds": rounds,
        "rpcs": rpcs,
        "cpu": {f"{kind} | {side}": savings[kind, side] for kind, side in savings},
        "expected": {
            f"{kind} | {side}": (expected[kind][side][0], predicted[kind][side])
            for kind in expected
            for side in expected[kind]
        },
        "measured": {f"{mode} | {kind}": measured[mode, kind] for mode in modes for kind in RPC_KINDS},
        "breakdown": breakdown,
    }
    plot.save_and_chart(results, args)
