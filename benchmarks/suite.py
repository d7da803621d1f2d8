"""The pyperf suite: per call (default) and per message (--messages), grpc._common against fastcommon.

pyperf runs this in worker processes too; only the manager prints. pyperf's own line per
benchmark goes to stderr as progress; the tables go to stdout.
"""

import argparse
import contextlib
import importlib
import statistics
import subprocess
import sys
import tempfile

from benchmarks import messages, plot
from benchmarks.timing import (
    AIO_METADATA,
    AIO_METADATA_FLOOR,
    AIO_METADATA_GRPC,
    FLOOR,
    HEADER,
    IMPLEMENTATIONS,
    METADATUM,
    METADATUM_GRPC,
    METHOD,
    TUPLE_FLOOR,
    UNROLL,
    bench,
    format_table,
    instability_lines,
    time_aio_metadata,
    time_tuple_built_in_place,
)
from grpc_echo import generate_stubs, import_stubs

RUNNER_SETTINGS = {"processes": 6, "values": 3}


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
    details = ("The request was rejected because a field was missing. " * 19)[:1024]  # ~1 KiB, as status details
    non_ascii = "Zürich, Kraków, 東京, Αθήνα: ✓ done 🚀"
    return [
        *method,
        ("encode 1KiB details", "encode", details),
        ("decode 1KiB details", "decode", details.encode()),
        ("encode non-ASCII", "encode", non_ascii),
        ("decode non-ASCII", "decode", non_ascii.encode()),
        ("decode invalid UTF-8", "decode", b"\xff\xfeok\xc3(" * 8),
    ]


def small_message(message_class):
    return message_class(text=METHOD, payload=b"\x00\x01payload", count=42)


def per_call_table(ns, cases):
    """ns per call, speedup over grpc's own and ratio to the floor, a row per implementation timed."""
    rows = [("case", "implementation", "ns/call", "speedup over grpc's", "x floor")]
    for label in cases:
        timed = {name.split(" | ")[1]: value for name, value in ns.items() if name.split(" | ")[0] == label}
        grpc_ns = next((value for name, value in timed.items() if name.startswith("grpc")), None)
        floor_ns = next((value for name, value in timed.items() if name.startswith("floor")), None)
        for implementation, value in timed.items():
            rows.append(
                (
                    label,
                    implementation,
                    f"{value:.1f}",
                    f"{grpc_ns / value:.2f}x" if grpc_ns else "",
                    f"{value / floor_ns:.2f}x" if floor_ns else "",
                )
            )
    return format_table(rows)


GATE_PROGRAM = """
import time, grpc, grpc.aio
import fastcommon
start = time.perf_counter(); fastcommon.patch(); first = time.perf_counter() - start
fastcommon.unpatch()
start = time.perf_counter(); fastcommon.patch(); print(first, time.perf_counter() - start)
"""


def gate_cost_us(processes=7):
    """What patch()'s gate costs in a fresh process, where it runs once (median of its first runs), and run again."""
    runs = [
        [float(seconds) for seconds in subprocess.check_output([sys.executable, "-c", GATE_PROGRAM], text=True).split()]
        for _ in range(processes)
    ]
    return [statistics.median(seconds) * 1e6 for seconds in zip(*runs, strict=True)]


def main(argv=None):
    import pyperf

    def forward_options(cmd, args):
        cmd.extend(["--stubs", args.stubs])
        cmd.extend(
            option for option, wanted in (("--more-inputs", args.more_inputs), ("--messages", args.messages)) if wanted
        )

    runner = pyperf.Runner(**RUNNER_SETTINGS, add_cmdline_args=forward_options)
    runner.argparser.prog = "python benchmark.py"  # in usage errors, as the other modes name themselves
    runner.argparser.usage = "python benchmark.py [mode] [options]  (python benchmark.py --help: all of them)"
    runner.argparser.add_argument(
        "--more-inputs", action="store_true", help="also time a 1 KiB details string, non-ASCII text and invalid UTF-8"
    )
    runner.argparser.add_argument(
        "--messages", action="store_true", help="time protobuf messages of three sizes, bare and through the wrappers"
    )
    runner.argparser.add_argument("--plot", metavar="DIR", help="also write charts of this run into DIR")
    runner.argparser.add_argument(
        "--plot-format", choices=plot.FORMATS, default=plot.FORMATS[0], help="the charts' format"
    )
    runner.argparser.add_argument("--stubs", help=argparse.SUPPRESS)
    args = runner.parse_args(argv)
    if args.plot and args.messages:
        runner.argparser.error("--plot charts the per-call run, not --messages")
    if args.plot:
        plot.require_matplotlib()
    manager = not args.worker
    if manager and not args.verbose:
        args.quiet = True  # pyperf's warning blocks give way to one line per unstable result, below
    with tempfile.TemporaryDirectory() as temporary:
        if not args.stubs:  # the manager generates the protobuf module once; workers import it
            generate_stubs(temporary)
            args.stubs = temporary
        pb2 = import_stubs(args.stubs)[0]
        # pyperf prints a line per benchmark as it goes: progress, on stderr; the results follow on stdout.
        with contextlib.redirect_stdout(sys.stderr) if manager else contextlib.nullcontext():
            if args.messages:
                benches, labels = messages.run(runner, pb2.Echo), None
            else:
                benches, labels = run_per_call(runner, pb2.Echo, args.more_inputs)
        if not manager or any(bench is None for bench in benches.values()):
            return
        import grpc

        ns = {name: bench.mean() * 1e9 for name, bench in benches.items()}
        print(f"CPython {sys.version.split()[0]}, grpcio {grpc.__version__}; mean of pyperf's values", end="")
        if args.messages:
            print()
            print(messages.report(ns, pb2.Echo))
        else:
            print("; floor = the builtin C call callable(x)")
            print(per_call_table(ns, labels))
            first, again = gate_cost_us()
            print(
                f"\npatch()'s gate (the fingerprints, checks and probes of everything it may replace), once per"
                f" process: {first / 1e3:.1f} ms (its first run in a fresh process, median of 7; run again:"
                f" {again / 1e3:.1f} ms)"
            )
        print("\n".join(instability_lines(benches)))
        if args.plot:
            print(plot.per_call_chart({sys.version.split()[0]: ns}, args.plot, args.plot_format))


def run_per_call(runner, message_class, more_inputs):
    modules = {name: importlib.import_module(name) for name in IMPLEMENTATIONS}
    benches, labels = {}, []
    for label, function_name, argument in conversion_cases(more_inputs):
        labels.append(label)
        for name, module in modules.items():
            bench(runner, benches, f"{label} | {name}", getattr(module, function_name), argument)
        bench(runner, benches, f"{label} | {FLOOR}", callable, argument)
    message = small_message(message_class)
    for label, function_name, payload, transformer in (
        ("serialize Echo message", "serialize", message, message_class.SerializeToString),
        ("deserialize Echo message", "deserialize", message.SerializeToString(), message_class.FromString),
    ):
        labels.append(label)
        for name, module in modules.items():
            bench(runner, benches, f"{label} | {name}", getattr(module, function_name), payload, transformer)
    from grpc._cython import cygrpc

    labels.append(METADATUM)
    grpcs = cygrpc._Metadatum
    bench(runner, benches, f"{METADATUM} | {METADATUM_GRPC}", grpcs, *HEADER)
    compiled = importlib.import_module("fastcommon._implementation").compiled  # {} in pure Python
    if "fast_entry" in compiled:  # not in a Limited API (abi3) build
        constructor = compiled["fast_entry"].MetadatumConstructor(grpcs)
        bench(runner, benches, f"{METADATUM} | fastcommon.fast_common", constructor, *HEADER)
    benches[f"{METADATUM} | {TUPLE_FLOOR}"] = runner.bench_time_func(
        f"{METADATUM} | {TUPLE_FLOOR}", time_tuple_built_in_place, *HEADER, inner_loops=UNROLL
    )
    for label, metadata in AIO_METADATA.items():
        labels.append(label)
        for name, patched in ((AIO_METADATA_GRPC, False), ("fastcommon.fast_common", True)):
            if patched and "fast_metadata" not in compiled:  # pure Python: nothing to time
                continue
            benches[f"{label} | {name}"] = runner.bench_time_func(
                f"{label} | {name}", time_aio_metadata, metadata, patched, inner_loops=UNROLL
            )
        bench(runner, benches, f"{label} | {AIO_METADATA_FLOOR}", tuple, metadata or ())
    return benches, labels
