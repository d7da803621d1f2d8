"""What the benchmarks share: the timed loops, the confidence intervals and what is noise, progress on stderr,
and plain-text tables."""

import argparse
import contextlib
import io
import math
import statistics
import sys
import time
from itertools import repeat

from fastcommon._report import ns_per_call  # noqa: F401  (the benchmarks time one call as --report does)
from grpc_echo import REQUEST_HEADERS

FUNCTIONS = ("encode", "decode", "serialize", "deserialize")  # grpc._common's, which fastcommon compiles
IMPLEMENTATIONS = ("grpc._common", "fastcommon.common", "fastcommon.fast_common")
FLOOR = "floor: callable(x)"
METADATUM = "metadata entry _Metadatum(k, v)"
METADATUM_GRPC = "grpc._cython.cygrpc"  # where grpc's class lives
TUPLE_FLOOR = "floor: a plain tuple (k, v)"
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


def calls(function, *args):
    """The pyperf time function and its arguments that time ``function(*args)``: one argument, or two."""
    return (time_calls if len(args) == 1 else time_transform_calls), (function, *args)


def run_timings(runner, timings, progress=None):
    """Time each (name, time function, its arguments) with pyperf: {name: pyperf's benchmark}. Given a progress
    (the manager's), a line after each result, in place of pyperf's own line for it (but with --verbose)."""
    benches, quiet = {}, progress is not None and not runner.args.verbose
    for name, time_function, args in timings:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured) if quiet else contextlib.nullcontext():
                benches[name] = runner.bench_time_func(name, time_function, *args, inner_loops=UNROLL)
        finally:  # pyperf's other lines (errors, --verbose) still go to stderr
            for line in captured.getvalue().splitlines():
                if not line.startswith(f"{name}: Mean +- "):
                    print(line, file=sys.stderr)
        if progress:
            progress.step(f" ({name}: {benches[name].mean() * 1e9:.1f} ns)")
    return benches


class Progress:
    """What a long run says on stderr as it goes: at its start how many steps it takes, then after each step how
    far it is and how long is left at the pace so far (an estimate from the steps done, not a promise)."""

    def __init__(self, what, total, steps, plan="", clock=time.monotonic, weights=None):
        self.what, self.total, self.steps, self.clock = what, total, steps, clock
        self.weights = weights or [1.0] * total  # how long each step takes, against the others (all positive)
        self.started, self.done = clock(), 0
        self.say(f"{total} {steps}{plan}")

    def say(self, text):
        print(f"{self.what}: {text}", file=sys.stderr, flush=True)

    def step(self, detail=""):
        self.done += 1
        elapsed, done = self.clock() - self.started, sum(self.weights[: self.done])
        left = elapsed / done * (sum(self.weights) - done)
        self.say(
            f"{self.done} of {self.total} {self.steps}, {duration(elapsed)} so far; about {duration(left)} left at "
            f"the pace so far{detail}"
        )


def duration(seconds):
    """Seconds as a person reads them: "45 s", "3.5 min"."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def versions_line():
    """What ran, in one line: CPython's, grpcio's and fastcommon's versions, and which implementation loaded."""
    import grpc

    import fastcommon

    return (
        f"CPython {sys.version.split()[0]}, grpcio {grpc.__version__}, fastcommon {fastcommon.__version__} "
        f"({fastcommon.IMPLEMENTATION})"
    )


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


def format_table(rows, text_columns=1):
    """Rows of cells as aligned text: the first ``text_columns`` left, the others right, a rule under the header."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [str(cell).ljust(w) if i < text_columns else str(cell).rjust(w) for i, (cell, w) in enumerate(
            zip(row, widths, strict=True))]  # fmt: skip
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(bench):
    """A pyperf result as (mean, half-width of its 95% interval) in ns, over the means of its worker processes
    (the values within a process move together; the processes are the samples)."""
    return mean_and_ci95([statistics.fmean(run.values) * 1e9 for run in bench.get_runs() if run.values])


def ratio_range(numerator, denominator):
    """The ratio of two means, and the range that their 95% intervals allow it: (ratio, low, high). Where the
    denominator's interval reaches zero or is unknown (one process), any ratio."""
    (a, a_half), (b, b_half) = numerator, denominator
    if math.isnan(a_half) or not b_half < b:  # not b_half < b: also where it is nan
        return a / b, 0.0, math.inf
    return a / b, (a - a_half) / (b + b_half), (a + a_half) / (b - b_half)


def ratio_cell(numerator, denominator):
    """A ratio as a result, "2.31x"; or "within noise" where its range holds 1.00."""
    ratio, low, high = ratio_range(numerator, denominator)
    return "within noise" if low <= 1.0 <= high else f"{ratio:.2f}x"


def ns_cells(mean_and_half):
    """A time in ns and its 95% interval, two cells: "138.1", "± 7.6"; no interval where none is known."""
    mean, half = mean_and_half
    return f"{mean:,.1f}", "" if math.isnan(half) else f"± {half:,.1f}"


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
        return "too few samples"
    return None


def noise_line(benches):
    """The run's noise in one line: the widest 95% interval, how many results pyperf's checks flag, its advice."""
    widest = max(benches, key=lambda name: relative_half(summary(benches[name])))
    spread = relative_half(summary(benches[widest]))
    flagged = sum(instability(bench) is not None for bench in benches.values())
    if math.isinf(spread):
        spread_said = "no 95% intervals (one process)"
    else:
        spread_said = f"up to ±{spread:.0%} of the mean at 95% confidence ({widest})"
    return (
        f"noise: {spread_said}; pyperf flags {flagged} of {len(benches)} results as unstable; to reduce it: "
        "--rigorous, `python -m pyperf system tune`, an idle machine"
    )


def relative_half(mean_and_half):
    mean, half = mean_and_half
    return math.inf if math.isnan(half) else half / mean
