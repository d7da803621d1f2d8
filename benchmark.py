"""Time fastcommon against grpc._common: per call, per message and per RPC; and chart it.

    python benchmark.py                      # per call: the conversions and (de)serialize, pyperf, under 3 minutes
    python benchmark.py --fast               # pyperf's quick mode, under 90 seconds
    python benchmark.py --more-inputs        # also a 1 KiB details string, non-ASCII text, invalid UTF-8
    python benchmark.py --messages           # messages of ~20 B, ~1 KiB, ~64 KiB: ns, MB/s, the wrapper's share
    python benchmark.py -o results.json      # then: python -m pyperf compare_to a.json b.json --table
    python benchmark.py --rpc                # end to end: time and CPU per RPC, stock against patched; the ceiling
    python benchmark.py --plot DIR [a.json ...]  # charts, of this run or of saved ones (pip install ".[plot]")

The parts live in benchmarks/; the echo service, shared with the tests, in grpc_echo/.
"""

import sys

OPTIONS_WITH_A_FILE = ("-o", "--output", "--append")


def saved_results(argv):
    """The JSON files named as arguments of their own (not as -o FILE): results to chart rather than a run."""
    return [
        arg
        for i, arg in enumerate(argv)
        if arg.endswith(".json") and (i == 0 or argv[i - 1] not in OPTIONS_WITH_A_FILE)
    ]


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--rpc-server"]:
        from benchmarks import rpc

        rpc.server(*argv[1:4])
    elif argv[:1] == ["--rpc-client"]:
        from benchmarks import rpc

        rpc.client(*argv[1:5])
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
    main()
