"""Time fastcommon against grpc._common: per call, per message and per RPC; and chart it.

    python benchmark.py                      # per call: the conversions and (de)serialize, pyperf
    python benchmark.py --fast               # per call in pyperf's quick mode: fewer processes and values
    python benchmark.py --more-inputs        # also a 1 KiB details string, non-ASCII text, invalid UTF-8
    python benchmark.py --messages           # messages of ~20 B, ~1 KiB, ~64 KiB: ns, MB/s, the wrapper's share
    python benchmark.py -o results.json      # then: python -m pyperf compare_to a.json b.json --table
    python benchmark.py --rpc                # end to end: CPU and time per RPC, stock against patched; the ceiling
    python benchmark.py --rpc-instructions   # end to end: instructions per RPC and process, by callgrind (valgrind)
    python benchmark.py --saturate           # at saturation, driven by ghz: requests/s and CPU per RPC; clients too
    python benchmark.py --plot DIR [a.json ...]  # charts, of this run or of saved ones (pip install matplotlib)

Every run over a minute says on stderr how far it is, and how long is left at the pace so far.
The parts live in benchmarks/; the echo service, shared with the tests, in grpc_echo/.
"""

import argparse
import os
import sys

OPTIONS_WITH_A_FILE = ("-o", "--output", "--append")
PER_CALL, RPC, RPC_INSTRUCTIONS, SATURATE, PLOT = "per call", "--rpc", "--rpc-instructions", "--saturate", "--plot"


def options():
    """benchmark.py's own options, each declared once: (its group in --help, flags, argparse's keywords, the
    parsers that take it). The per-call run parses with pyperf's parser, which has its own --fast and -o."""
    from benchmarks import plot, rpc, rpc_instructions, saturation
    from benchmarks.timing import positive_int

    every = (PER_CALL, RPC, RPC_INSTRUCTIONS, SATURATE, PLOT)
    fast = f"--rpc-instructions: {rpc_instructions.FAST_REPEATS} runs of each mode, not {rpc_instructions.REPEATS}"
    rpcs = f"--rpc: RPCs per round ({rpc.RPCS}); --rpc-instructions: N, the first batch ({rpc_instructions.RPCS})"
    rounds = (f"--rpc: rounds, each with fresh processes ({rpc.ROUNDS}); --saturate: rounds, each running every row "
              f"stock, patched and stock again ({saturation.ROUNDS})")  # fmt: skip
    return [
        ("modes", ["--fast"], {"action": "store_true", "help": f"per call, in pyperf's quick mode; {fast}"},
         (RPC_INSTRUCTIONS,)),
        ("modes", ["--more-inputs"], {"action": "store_true", "help": "per call, also 1 KiB, non-ASCII and invalid "
         "UTF-8"}, (PER_CALL,)),
        ("modes", ["--messages"], {"action": "store_true", "help": "messages of ~20 B, ~1 KiB, ~64 KiB: ns, MB/s, "
         "the wrapper's share"}, (PER_CALL,)),
        ("modes", ["--rpc"], {"action": "store_true", "help": "end to end: CPU and time per RPC, stock against "
         "patched"}, (RPC,)),
        ("modes", ["--rpc-instructions"], {"action": "store_true", "help": "end to end: instructions per RPC and "
         "process (callgrind)"}, (RPC_INSTRUCTIONS,)),
        ("modes", ["--saturate"], {"action": "store_true", "help": "at saturation, stock against patched: servers "
         f"driven by ghz (${saturation.GHZ_VARIABLE} or PATH), requests/s and CPU per RPC; clients' CPU per RPC"},
         (SATURATE,)),
        ("modes", ["--plot"], {"metavar": "DIR", "help": "charts into DIR: of this run, or of the "
         "JSON files named after DIR (saved with -o; per call: one per CPython)"}, every),
        ("options", ["--plot-format"], {"choices": plot.FORMATS, "default": plot.FORMATS[0],
         "help": f"the charts' format ({plot.FORMATS[0]})"}, every),
        ("options", ["-o"], {"metavar": "FILE", "help": "--rpc, --rpc-instructions, --saturate (and per call, "
         "pyperf's own): also save the results as JSON"}, (RPC, RPC_INSTRUCTIONS, SATURATE)),
        ("options", ["--rounds"], {"type": positive_int, "help": rounds}, (RPC, SATURATE)),
        ("options", ["--duration"], {"type": positive_int, "metavar": "SECONDS", "help": "--saturate: seconds each "
         f"run is measured, after its warm-up ({saturation.DURATION})"}, (SATURATE,)),
        ("options", ["--row"], {"action": "append", "choices": saturation.ROWS, "metavar": "ROW", "help": "--saturate: "
         f"this row only (again for more): {', '.join(saturation.ROWS)}"}, (SATURATE,)),
        ("options", ["--rpcs"], {"type": positive_int, "help": rpcs}, (RPC, RPC_INSTRUCTIONS)),
        ("options", ["--control"], {"action": "store_true", "help": "--rpc: an A/A run, both pairs stock, to show "
         "what the method calls a difference"}, (RPC,)),
        (None, ["--stubs"], {"help": argparse.SUPPRESS}, (PER_CALL,)),  # the manager's protobuf module, to workers
        (None, ["results"], {"nargs": "+", "help": "JSON files written by python benchmark.py [--rpc...] -o FILE"},
         (PLOT,)),
    ]  # fmt: skip


def declared(parser_name):
    """The options that one parser takes, as (flags, keywords)."""
    return [(flags, keywords) for _, flags, keywords, parsers in options() if parser_name in parsers]


def parse(argv, mode):
    """Parse a mode's command line with the options it takes: one line and status 2 for a usage error."""
    usage = f"python benchmark.py {mode} " + ("DIR [results.json ...]" if mode == PLOT else "[options]")
    parser = argparse.ArgumentParser(prog=f"python benchmark.py {mode}", usage=usage)
    for flags, keywords in declared(mode):
        parser.add_argument(*flags, **keywords)
    return parser.parse_args(argv)


def modes_parser():
    """benchmark.py's own modes and options, for --help; pyperf's follow them there."""
    parser = argparse.ArgumentParser(
        prog="python benchmark.py",
        usage="python benchmark.py [mode] [options]",
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + __doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2].strip() + "\n"
        "The per-call and --messages runs also take pyperf's options, below.",
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = {"modes": parser.add_argument_group("modes (per call when none is given)")}
    groups["options"] = parser.add_argument_group("options")
    groups["options"].add_argument("-h", "--help", action="store_true", help="show this help and exit")
    for group, flags, keywords, _ in options():
        if group:
            groups[group].add_argument(*flags, **keywords)
    return parser


def print_help():
    import pyperf

    from benchmarks.suite import RUNNER_SETTINGS

    print(modes_parser().format_help())
    pyperf_help = pyperf.Runner(**RUNNER_SETTINGS).argparser.format_help()
    options = pyperf_help[pyperf_help.index("\n  -h, --help") + 1 :]  # the options, without pyperf's usage
    print("pyperf's options (per call and --messages):\n" + options.rstrip())


def saved_results(argv):
    """The JSON files named as arguments of their own (not as -o FILE): results to chart rather than a run."""
    return [
        arg
        for i, arg in enumerate(argv)
        if arg.endswith(".json") and (i == 0 or argv[i - 1] not in OPTIONS_WITH_A_FILE)
    ]


def main():
    argv = sys.argv[1:]
    if "-h" in argv or "--help" in argv:
        print_help()
    elif argv[:1] == ["--rpc-server"]:
        from benchmarks import rpc

        rpc.server(*argv[1:4])
    elif argv[:1] == ["--rpc-client"]:
        from benchmarks import rpc

        rpc.client(*argv[1:5])
    elif argv[:1] == ["--rpc-instructions-server"]:
        from benchmarks import rpc_instructions

        rpc_instructions.server(*argv[1:5])
    elif argv[:1] == ["--rpc-instructions-client"]:
        from benchmarks import rpc_instructions

        rpc_instructions.client(*argv[1:7])
    elif argv[:1] == ["--saturate-server"]:
        from benchmarks import saturation

        saturation.server(*argv[1:4])
    elif argv[:1] == ["--saturate-client"]:
        from benchmarks import saturation

        saturation.client(*argv[1:6])
    elif SATURATE in argv:
        from benchmarks import saturation

        saturation.main(parse(argv, SATURATE))
    elif RPC_INSTRUCTIONS in argv:
        from benchmarks import rpc_instructions

        rpc_instructions.main(parse(argv, RPC_INSTRUCTIONS))
    elif RPC in argv:
        from benchmarks import rpc

        rpc.main(parse(argv, RPC))
    elif PLOT in argv and saved_results(argv):
        from benchmarks import plot

        plot.main(parse(argv, PLOT))
    else:
        from benchmarks import suite

        suite.main(argv, declared(PER_CALL))


if __name__ == "__main__":
    try:
        main()
        sys.stdout.flush()
    except BrokenPipeError:  # `python benchmark.py --help | head -1`: the reader has gone; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
