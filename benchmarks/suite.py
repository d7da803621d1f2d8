"""The pyperf suite: per call (default) and per message (--messages), grpc._common against fastcommon.

pyperf runs this in worker processes too; only the manager prints. pyperf's own line per
benchmark goes to stderr as progress; the tables go to stdout.
"""

import contextlib
import importlib
import sys
import tempfile

from benchmarks import messages, plot, price
from benchmarks.timing import (
    AIO_METADATA,
    AIO_METADATA_FLOOR,
    AIO_METADATA_GRPC,
    FLOOR,
    IMPLEMENTATIONS,
    METADATUM,
    METADATUM_GRPC,
    TUPLE_FLOOR,
    Progress,
    calls,
    format_table,
    noise_line,
    ns_cells,
    ratio_cell,
    run_timings,
    summary,
    time_aio_metadata,
    time_tuple_built_in_place,
)
from fastcommon._registry import METHOD_NAME, USER_AGENT
from grpc_echo import generate_stubs, import_stubs

RUNNER_SETTINGS = {"processes": 6, "values": 3}


def conversion_cases(more_inputs):
    """(case label, function name, input) for every conversion timed."""
    method = [
        ("encode str->bytes", "encode", METHOD_NAME),
        ("encode bytes->bytes", "encode", METHOD_NAME.encode()),
        ("decode bytes->str", "decode", METHOD_NAME.encode()),
        ("decode str->str", "decode", METHOD_NAME),
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
    return message_class(text=METHOD_NAME, payload=b"\x00\x01payload", count=42)


def per_call_table(timed, cases):
    """A row per implementation timed, each case's name on its first: ns per call, the speedup over grpc's own and
    the ratio to the case's floor (a row of its own, named for what it is); "within noise" where a ratio's range
    holds 1.00. ``timed``: {"case | implementation": (mean ns, half-width of its 95% interval)}."""
    rows = [("case", "implementation", "ns/call", "95% CI", "speedup over grpc's", "x floor")]
    for case in cases:
        group = {name.split(" | ")[1]: value for name, value in timed.items() if name.split(" | ")[0] == case}
        grpcs = next((value for name, value in group.items() if name.startswith("grpc")), None)
        floor = next((value for name, value in group.items() if name.startswith("floor")), None)
        for n, (implementation, value) in enumerate(group.items()):
            own = implementation.startswith(("grpc", "floor"))
            rows.append(
                (
                    "" if n else case,
                    implementation,
                    *ns_cells(value),
                    "" if own or grpcs is None else ratio_cell(grpcs, value),
                    "" if floor is None or implementation.startswith("floor") else ratio_cell(value, floor),
                )
            )
    return format_table(rows, text_columns=2)


def main(argv, options):
    """The per-call run (or --messages), with pyperf; ``options``: benchmark.py's own, as (flags, keywords)."""
    import pyperf

    def forward_options(cmd, args):
        cmd.extend(["--stubs", args.stubs])
        cmd.extend(
            option for option, wanted in (("--more-inputs", args.more_inputs), ("--messages", args.messages)) if wanted
        )

    runner = pyperf.Runner(**RUNNER_SETTINGS, add_cmdline_args=forward_options)
    runner.argparser.prog = "python benchmark.py"  # in usage errors, as the other modes name themselves
    runner.argparser.usage = "python benchmark.py [mode] [options]  (python benchmark.py --help: all of them)"
    for flags, keywords in options:
        runner.argparser.add_argument(*flags, **keywords)
    args = runner.parse_args(argv)
    if args.plot and args.messages:
        runner.argparser.error("--plot charts the per-call run, not --messages")
    if args.plot:
        plot.require_matplotlib()
    manager = not args.worker
    if manager and not args.verbose:
        args.quiet = True  # pyperf's warning blocks give way to one line on the run's noise, below
    with tempfile.TemporaryDirectory() as temporary:
        if not args.stubs:  # the manager generates the protobuf module once; workers import it
            generate_stubs(temporary)
            args.stubs = temporary
        pb2 = import_stubs(args.stubs)[0]
        if args.messages:
            timings, cases = messages.timings(pb2.Echo), None
        else:
            timings, cases = per_call_timings(pb2.Echo, args.more_inputs)
        progress = None
        if manager:
            what = "--messages" if args.messages else "per call"
            plan = f", each by pyperf in {args.processes} processes of {args.values} values"
            progress = Progress(what, len(timings), "timings", plan)
        # pyperf's own lines (errors; --verbose) join the progress, on stderr; the results follow on stdout.
        with contextlib.redirect_stdout(sys.stderr) if manager else contextlib.nullcontext():
            benches = run_timings(runner, timings, progress)
        if not manager or any(bench is None for bench in benches.values()):
            return
        import grpc

        timed = {name: summary(bench) for name, bench in benches.items()}
        if not args.messages:
            progress.say(f"the price of import fastcommon and patch(), in {price.PROCESSES} fresh processes")
            paid = price.in_fresh_processes()
        print(
            f"CPython {sys.version.split()[0]}, grpcio {grpc.__version__}; each time the mean of pyperf's "
            f"{args.processes} processes, and its 95% confidence interval"
        )
        if args.messages:
            print(messages.report(timed, pb2.Echo, noise_line(benches)))
        else:
            print("speedup: grpc's time over this one; x floor: this one over its case's floor; within noise: the "
                  "range the intervals allow holds 1.00")  # fmt: skip
            print(per_call_table(timed, cases))
            print(noise_line(benches))
            print(f"\n{price.line(paid)}")
        if args.plot:
            print(plot.per_call_chart({sys.version.split()[0]: timed}, args.plot, args.plot_format))


def per_call_timings(message_class, more_inputs):
    """What the per-call run times, as (name, pyperf time function, its arguments), and the cases in order."""
    modules = {name: importlib.import_module(name) for name in IMPLEMENTATIONS}
    timings, cases = [], []
    for case, function_name, argument in conversion_cases(more_inputs):
        cases.append(case)
        for name, module in modules.items():
            timings.append((f"{case} | {name}", *calls(getattr(module, function_name), argument)))
        timings.append((f"{case} | {FLOOR}", *calls(callable, argument)))
    message = small_message(message_class)
    for case, function_name, payload, transformer in (
        ("serialize Echo message", "serialize", message, message_class.SerializeToString),
        ("deserialize Echo message", "deserialize", message.SerializeToString(), message_class.FromString),
    ):
        cases.append(case)
        for name, module in modules.items():
            timings.append((f"{case} | {name}", *calls(getattr(module, function_name), payload, transformer)))
    from grpc._cython import cygrpc

    cases.append(METADATUM)
    grpcs = cygrpc._Metadatum
    timings.append((f"{METADATUM} | {METADATUM_GRPC}", *calls(grpcs, *USER_AGENT)))
    compiled = importlib.import_module("fastcommon._implementation").compiled  # {} in pure Python
    if "fast_entry" in compiled:  # not in a Limited API (abi3) build
        constructor = compiled["fast_entry"].MetadatumConstructor(grpcs)
        timings.append((f"{METADATUM} | fastcommon.fast_common", *calls(constructor, *USER_AGENT)))
    timings.append((f"{METADATUM} | {TUPLE_FLOOR}", time_tuple_built_in_place, USER_AGENT))
    for case, metadata in AIO_METADATA.items():
        cases.append(case)
        timings.append((f"{case} | {AIO_METADATA_GRPC}", time_aio_metadata, (metadata, False)))
        if "fast_metadata" in compiled:  # not in pure Python: nothing to time
            timings.append((f"{case} | fastcommon.fast_common", time_aio_metadata, (metadata, True)))
        timings.append((f"{case} | {AIO_METADATA_FLOOR}", *calls(tuple, metadata or ())))
    return timings, cases
