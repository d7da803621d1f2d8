"""Time fastcommon against grpc._common: per call, per message and per RPC; and chart it.

    python benchmark.py                      # per call: the conversions and (de)serialize, pyperf, under 3 minutes
    python benchmark.py --fast               # per call in pyperf's quick mode: about half the time
    python benchmark.py --more-inputs        # also a 1 KiB details string, non-ASCII text, invalid UTF-8
    python benchmark.py --messages           # messages of ~20 B, ~1 KiB, ~64 KiB: ns, MB/s, the wrapper's share
    python benchmark.py -o results.json      # then: python -m pyperf compare_to a.json b.json --table
    python benchmark.py --rpc                # end to end: CPU and time per RPC, stock against patched; the ceiling
    python benchmark.py --rpc-instructions   # end to end: instructions per RPC and process, by callgrind (valgrind)
    python benchmark.py --plot DIR [a.json ...]  # charts, of this run or of saved ones (pip install matplotlib)

The parts live in benchmarks/; the echo service, shared with the tests, in grpc_echo/.
"""

import argparse
import os
import sys

OPTIONS_WITH_A_FILE = ("-o", "--output", "--append")


def modes_parser():
    """benchmark.py's own modes and options, for --help; pyperf's follow them there."""
    from benchmarks.plot import FORMATS
    from benchmarks.rpc import ROUNDS, RPCS

    parser = argparse.ArgumentParser(
        prog="python benchmark.py",
        usage="python benchmark.py [mode] [options]",
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + __doc__.split("\n\n")[1] + "\n\nThe per-call and --messages runs also take pyperf's "
        "options, below.",
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    modes = parser.add_argument_group("modes (per call when none is given)")
    modes.add_argument("--fast", action="store_true", help="per call, in pyperf's quick mode")
    modes.add_argument("--more-inputs", action="store_true", help="per call, also 1 KiB, non-ASCII and invalid UTF-8")
    modes.add_argument("--messages", action="store_true", help="messages of ~20 B, ~1 KiB, ~64 KiB: ns, MB/s, share")
    modes.add_argument("--rpc", action="store_true", help="end to end: CPU and time per RPC, stock against patched")
    modes.add_argument(
        "--rpc-instructions", action="store_true", help="end to end: instructions per RPC and process (callgrind)"
    )
    modes.add_argument(
        "--plot",
        metavar="DIR [results.json ...]",
        help="charts into DIR: of this run, or of JSON files saved with -o (per call: one per CPython)",
    )
    options = parser.add_argument_group("options")
    options.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    options.add_argument(
        "--plot-format", choices=FORMATS, default=FORMATS[0], help=f"the charts' format ({FORMATS[0]})"
    )
    options.add_argument(
        "-o", metavar="FILE", help="per call, --rpc, --rpc-instructions: also save the results as JSON"
    )
    options.add_argument("--rounds", type=int, help=f"--rpc: rounds, each with fresh processes ({ROUNDS})")
    options.add_argument("--rpcs", type=int, help=f"--rpc: RPCs per round ({RPCS})")
    options.add_argument("--control", action="store_true", help="--rpc: an A/A run, both pairs stock")
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
    elif "--rpc-instructions" in argv:
        from benchmarks import rpc_instructions

        rpc_instructions.main(argv)
    elif "--rpc" in argv:
        from benchmarks import rpc

        rpc.main(argv)
    elif "--plot" in argv and saved_results(argv):
        from benchmarks import plot

        plot.main(argv)
    else:
        from benchmarks import suite

        suite.main(argv)


if __name__ == "__main__":
    try:
        main()
        sys.stdout.flush()
    except BrokenPipeError:  # `python benchmark.py --help | head -1`: the reader has gone; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
