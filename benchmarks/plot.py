"""--plot DIR: charts of ns per call (from this run or from saved pyperf JSON files) and of the per-RPC breakdown.

    python benchmark.py --plot docs/img                          # run the per-call suite, then chart it
    python benchmark.py --plot docs/img 3.9.json 3.13.json ...   # chart saved runs (python benchmark.py -o 3.9.json)
    python benchmark.py --rpc --plot docs/img                    # the per-RPC breakdown

matplotlib is not a requirement: pip install matplotlib.
"""

import argparse
import os

from benchmarks.timing import AIO_METADATA, METADATUM

# Into the environment as it is: pip install ".[plot]" would replace an editable install with a copy.
PLOT_NEEDS = "pip install matplotlib"
FORMATS = ("png", "svg")  # what --plot-format takes; the first is the default

CASES = (
    "encode str->bytes",
    "encode bytes->bytes",
    "decode bytes->str",
    "decode str->str",
    "serialize Echo message",
    "deserialize Echo message",
    METADATUM,
    *AIO_METADATA,
)
SERIES = (  # the start of the implementation's name in a benchmark's, the legend, the colour
    ("grpc", "grpc's own (grpc._common; cygrpc._Metadatum; grpc.aio's Metadata)", "#b0b0b0"),
    ("fastcommon.fast_common", "fastcommon, compiled", "#1f77b4"),
    ("floor", "the floor: a builtin C call; for an entry, a plain tuple; for a call's metadata, tuple(it)", "#2ca02c"),
)


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(f"--plot needs matplotlib, which is not installed: {PLOT_NEEDS}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def per_call_chart(results, directory, image_format):
    """Write ns per call per case, a group of bars per result ({label: {benchmark: ns}}); return what it wrote."""
    plt = pyplot()
    labels = list(results)
    figure, axes = plt.subplots(2, 5, figsize=(18, 7), layout="constrained")
    width = 0.8 / len(SERIES)
    for axis in axes.flat[len(CASES) :]:
        axis.set_visible(False)
    for axis, case in zip(axes.flat, CASES, strict=False):
        for offset, (implementation, legend, colour) in enumerate(SERIES):
            values = [
                next((ns for name, ns in results[label].items() if name.startswith(f"{case} | {implementation}")), None)
                for label in labels
            ]
            positions = [i + (offset - (len(SERIES) - 1) / 2) * width for i in range(len(labels))]
            bars = axis.bar(
                [p for p, v in zip(positions, values, strict=False) if v is not None],
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
    handles, names = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, names, loc="outside lower center", ncols=len(SERIES), fontsize=9)  # one, for every panel
    figure.suptitle("fastcommon against grpc's own: ns per call (pyperf, lower is better)")
    return save(figure, directory, "per_call", image_format)


def per_rpc_chart(breakdown, directory, image_format):
    """Write the per-RPC breakdown ({kind: (CPU us, ceiling us, fastcommon's saving us)}); return what it wrote."""
    plt = pyplot()
    kinds = list(breakdown)
    figure, (whole, zoom) = plt.subplots(
        1, 2, figsize=(13, 1.6 + 0.55 * len(kinds)), layout="constrained", gridspec_kw={"width_ratios": (3, 2)}
    )
    for row, kind in enumerate(kinds):
        cpu, ceiling, saving = breakdown[kind]
        whole.barh(row, cpu, color="#d9d9d9", label="CPU per RPC, client + server" if row == 0 else None)
        whole.barh(row, ceiling, color="#ff7f0e")
        whole.text(cpu, row, f" {cpu:.0f} µs", va="center", fontsize=8)
        for offset, (value, colour, label) in enumerate(
            (
                (ceiling, "#ff7f0e", "the ceiling: what grpc's own conversions and metadata entries cost"),
                (saving, "#1f77b4", "what fastcommon saves"),
            )
        ):
            zoom.barh(row + (offset - 0.5) * 0.4, value, 0.4, color=colour, label=label if row == 0 else None)
            zoom.text(
                value, row + (offset - 0.5) * 0.4, f" {value:.2f} µs ({value / cpu:.2%})", va="center", fontsize=8
            )
    for axis in (whole, zoom):
        axis.set_yticks(range(len(kinds)), kinds if axis is whole else [""] * len(kinds))
        axis.invert_yaxis()
    whole.set_xlim(0, max(cpu for cpu, _, _ in breakdown.values()) * 1.15)
    whole.set_xlabel("µs of CPU per RPC")
    whole.set_title("An RPC's CPU, and the sliver fastcommon works on")
    zoom.set_xlim(0, max(ceiling for _, ceiling, _ in breakdown.values()) * 1.7)
    zoom.set_xlabel("µs per RPC (share of its CPU)")
    zoom.set_title("That sliver, zoomed")
    handles, names = whole.get_legend_handles_labels()
    more_handles, more_names = zoom.get_legend_handles_labels()
    figure.legend(handles + more_handles, names + more_names, loc="outside lower center", ncols=3, fontsize=9)
    figure.suptitle("python benchmark.py --rpc: the most any replacement could save, and what fastcommon saves")
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
    parser.add_argument("--plot-format", choices=FORMATS, default=FORMATS[0], help="the charts' format")
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
