"""--plot DIR: charts of ns per call (from this run or from saved pyperf JSON files) and of the per-RPC breakdown.

    python benchmark.py --plot docs/img                          # run the per-call suite, then chart it
    python benchmark.py --plot docs/img 3.9.json 3.13.json ...   # chart saved runs (python benchmark.py -o 3.9.json)
    python benchmark.py --rpc --plot docs/img                    # the per-RPC breakdown

matplotlib is an optional extra: pip install ".[plot]".
"""

import argparse
import os

from benchmarks.timing import FLOOR

CASES = (
    "encode str->bytes",
    "encode bytes->bytes",
    "decode bytes->str",
    "decode str->str",
    "serialize Echo message",
    "deserialize Echo message",
)
SERIES = (
    ("grpc._common", "grpc._common", "#b0b0b0"),
    ("fastcommon.fast_common", "fastcommon (compiled)", "#1f77b4"),
    (FLOOR, "floor: a builtin C call", "#2ca02c"),
)


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SystemExit('--plot needs matplotlib, an optional extra: pip install ".[plot]"') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def per_call_chart(results, directory, image_format):
    """Write ns per call per case, a group of bars per result ({label: {benchmark: ns}}); return what it wrote."""
    plt = pyplot()
    labels = list(results)
    figure, axes = plt.subplots(2, 3, figsize=(13, 7), constrained_layout=True)
    width = 0.8 / len(SERIES)
    for axis, case in zip(axes.flat, CASES):
        for offset, (implementation, legend, colour) in enumerate(SERIES):
            values = [results[label].get(f"{case} | {implementation}") for label in labels]
            positions = [i + (offset - (len(SERIES) - 1) / 2) * width for i in range(len(labels))]
            bars = axis.bar(
                [p for p, v in zip(positions, values) if v is not None],
                [v for v in values if v is not None],
                width,
                color=colour,
                label=legend,
            )
            axis.bar_label(bars, fmt="%.0f", fontsize=7)
        axis.set_title(case)
        axis.set_xticks(range(len(labels)), labels, fontsize=8)
        axis.set_xlabel("CPython", fontsize=8)
        axis.set_ylabel("ns per call")
    axes.flat[0].legend(fontsize=8)
    figure.suptitle("fastcommon against grpc._common: ns per call (pyperf, lower is better)")
    return save(figure, directory, "per_call", image_format)


def per_rpc_chart(breakdown, directory, image_format):
    """Write the per-RPC breakdown ({kind: (CPU us, ceiling us, fastcommon's saving us)}); return what it wrote."""
    plt = pyplot()
    kinds = list(breakdown)
    figure, (whole, zoom) = plt.subplots(
        1, 2, figsize=(13, 3.8), constrained_layout=True, gridspec_kw={"width_ratios": (3, 2)}
    )
    for row, kind in enumerate(kinds):
        cpu, ceiling, saving = breakdown[kind]
        whole.barh(row, cpu, color="#d9d9d9", label="CPU per RPC, client + server" if row == 0 else None)
        whole.barh(row, ceiling, color="#ff7f0e", label="grpc._common, all its calls" if row == 0 else None)
        whole.text(cpu, row, f" {cpu:.0f} us", va="center", fontsize=8)
        for offset, (value, colour, label) in enumerate(
            ((ceiling, "#ff7f0e", "the ceiling: grpc._common's cost"), (saving, "#1f77b4", "what fastcommon saves"))
        ):
            zoom.barh(row + (offset - 0.5) * 0.4, value, 0.4, color=colour, label=label if row == 0 else None)
            zoom.text(
                value, row + (offset - 0.5) * 0.4, f" {value:.2f} us ({value / cpu:.2%})", va="center", fontsize=8
            )
    for axis in (whole, zoom):
        axis.set_yticks(range(len(kinds)), kinds if axis is whole else [""] * len(kinds))
        axis.invert_yaxis()
    whole.set_xlim(0, max(cpu for cpu, _, _ in breakdown.values()) * 1.15)
    whole.set_xlabel("us of CPU per RPC")
    whole.legend(loc="lower right", fontsize=8)
    whole.set_title("An RPC's CPU, and grpc._common's sliver of it")
    zoom.set_xlim(0, max(ceiling for _, ceiling, _ in breakdown.values()) * 1.6)
    zoom.set_xlabel("us per RPC (share of its CPU)")
    zoom.set_title("Zoomed")
    zoom.legend(loc="lower right", fontsize=8)
    figure.suptitle("python benchmark.py --rpc: the most any _common accelerator could save, and what fastcommon does")
    return save(figure, directory, "per_rpc", image_format)


def save(figure, directory, name, image_format):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.{image_format}")
    figure.savefig(path, dpi=110)
    return f"wrote {path}"


def main(argv):
    """Chart saved pyperf results: python benchmark.py --plot DIR a.json b.json ..."""
    import pyperf

    parser = argparse.ArgumentParser(prog="python benchmark.py --plot DIR", description=main.__doc__)
    parser.add_argument("--plot", metavar="DIR", required=True)
    parser.add_argument("--plot-format", choices=("png", "svg"), default="png", help="the charts' format")
    parser.add_argument("results", nargs="+", help="pyperf JSON files written by python benchmark.py -o FILE")
    args = parser.parse_args(argv)
    results = {}
    for path in args.results:
        try:
            suite = pyperf.BenchmarkSuite.load(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # missing, unreadable, or not pyperf's JSON
            raise SystemExit(f"python benchmark.py --plot: cannot read {path}: {exc}") from None
        version = suite.get_benchmarks()[0].get_metadata().get("python_version", path).split()[0]
        results[version] = {bench.get_name(): bench.mean() * 1e9 for bench in suite.get_benchmarks()}
    print(per_call_chart(results, args.plot, args.plot_format))
