"""What the benchmarks share: the timed loops, the confidence intervals, and plain-text tables."""

import argparse
import contextlib
import math
import statistics
import time
from itertools import repeat

from fastcommon._report import ns_per_call  # noqa: F401  (the benchmarks time one call as --report does)
from grpc_echo import REQUEST_HEADERS

FUNCTIONS = ("encode", "decode", "serialize", "deserialize")  # grpc._common's, which fastcommon compiles
METHOD = "/grpc.testing.BenchmarkService/UnaryCall"  # 40 ASCII bytes, a typical method name
IMPLEMENTATIONS = ("grpc._common", "fastcommon.common", "fastcommon.fast_common")
FLOOR = "floor: callable(x)"
METADATUM = "metadata entry _Metadatum(k, v)"
METADATUM_GRPC = "grpc._cython.cygrpc"  # where grpc's class lives
TUPLE_FLOOR = "floor: a plain tuple (k, v)"
HEADER = ("user-agent", "grpc-python/1.85.1 grpc-c/51.0.0 (linux; chttp2)")  # a metadata entry every RPC carries
UNROLL = 10
# What every grpc.aio call does with its metadata: tuple(_init_metadata(metadata, None)), grpc's own or patched.
AIO_METADATA = {"aio call metadata, 10 headers": REQUEST_HEADERS, "aio call metadata, none": None}
AIO_METADATA_GRPC = "grpc.aio"  # whose
AIO_METADATA_FLOOR = "floor: tuple(metadata)"


def time_calls(loops, function, argument):
    """pyperf time function: ``loops`` passes over an unrolled body of UNROLL calls."""
    f, x = function, argument
    start = time.perf_counter()
    for _ in repeat(None, loops):
        f(x); f(x); f(x); f(x); f(x); f(x); f(x); f(x); f(x); f(x)  # fmt: skip  # noqa: E702
    return time.perf_counter() - start


def time_transform_calls(loops, function, message, transformer):
    """The same for (de)serialize(message, transformer)."""
    f, m, t = function, message, transformer
    start = time.perf_counter()
    for _ in repeat(None, loops):
        f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t); f(m, t)  # fmt: skip  # noqa: E702
    return time.perf_counter() - start


def time_tuple_built_in_place(loops, key, value):
    """The floor of a metadata entry: a plain tuple (key, value), built in place, UNROLL times a loop."""
    k, v = key, value
    start = time.perf_counter()
    for _ in repeat(None, loops):
        (k, v); (k, v); (k, v); (k, v); (k, v); (k, v); (k, v); (k, v); (k, v); (k, v)  # fmt: skip  # noqa: B018, E702
    return time.perf_counter() - start


def time_aio_metadata(loops, metadata, patched):
    """pyperf time function: tuple(_init_metadata(metadata, None)), UNROLL times a loop, grpc patched or not."""
    from grpc.aio._channel import _BaseMultiCallable

    import fastcommon

    with fastcommon.patched() if patched else contextlib.nullcontext():
        f, m = _BaseMultiCallable._init_metadata, metadata
        start = time.perf_counter()
        for _ in repeat(None, loops):
            tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None)); tuple(f(m, None))  # fmt: skip  # noqa: E501, E702
        return time.perf_counter() - start


def bench(runner, benches, name, function, *args):
    """Time ``function(*args)`` (one argument, or a message and its transformer) with pyperf as ``name``."""
    timed = time_calls if len(args) == 1 else time_transform_calls
    benches[name] = runner.bench_time_func(name, timed, function, *args, inner_loops=UNROLL)


def positive_int(text):
    """An argparse type: a whole number above zero (a count of rounds or RPCs), or a usage error."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above zero")
    return int(text)


def mean_and_ci95(values):
    """Mean and half-width of its 95% confidence interval (Student's t)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, float("nan")
    t = _T_QUANTILE_975[n - 2] if n < 32 else statistics.NormalDist().inv_cdf(0.975)
    return mean, t * statistics.stdev(values) / math.sqrt(n)


_T_QUANTILE_975 = (  # Student's t, 97.5% quantile, for 1 to 30 degrees of freedom
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def format_table(rows):
    """Rows of cells as aligned text: the first column left, the others right, a rule under the header."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(
                str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=False))
            ).rstrip()
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def instability(bench):
    """Why pyperf would call a result unstable, in a few words; None if it would not. Its own criteria."""
    values, mean = bench.get_values(), bench.mean()
    if len(values) >= 2 and bench.stdev() >= 0.10 * mean:
        return f"std dev {bench.stdev() / mean:.0%} of the mean"
    worst = max(values, key=lambda value: abs(value - mean))
    if abs(worst - mean) >= 0.50 * mean:
        return f"a value {abs(worst - mean) / mean:.0%} from the mean"
    needed = bench.required_nprocesses()
    if needed is not None and needed > bench.get_nrun():
        return TOO_FEW_SAMPLES
    return None


TOO_FEW_SAMPLES = "too few samples"


def instability_lines(benches):
    """One line per unstable result, and one for all that only have too few samples (as --fast always does)."""
    why = {name: instability(bench) for name, bench in benches.items()}
    lines = [f"unstable: {name}: {reason}" for name, reason in why.items() if reason not in (None, TOO_FEW_SAMPLES)]
    few = [name for name, reason in why.items() if reason == TOO_FEW_SAMPLES]
    if few:
        lines.append(f"{len(few)} of {len(benches)} results have fewer samples than pyperf needs for 1% precision")
    if lines:
        lines.append("(pyperf's advice: more processes and values, e.g. --rigorous; `python -m pyperf system tune`)")
    return lines
