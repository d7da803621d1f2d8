"""--plot DIR: charts of ns per call (from this run or from saved pyperf JSON files) and of the per-RPC breakdown.

    python benchmark.py --plot docs/img                          # run the per-call suite, then chart it
    python benchmark.py --plot docs/img 3.9.json 3.13.json ...   # chart saved runs (python benchmark.py -o 3.9.json)
    python benchmark.py --plot docs/img rpc.json instructions.json  # per RPC: --rpc -o and --rpc-instructions -o
    python benchmark.py --plot docs/img instructions.json saturation.json  # beside them: --saturate -o

matplotlib is not a requirement: pip install matplotlib.
"""

import json
import math
import os

from benchmarks.callgrind import whole_process_saving
from benchmarks.timing import AIO_METADATA, METADATUM, summary

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
VERDICT_COLOURS = {"saved": "#1f77b4", "slower": "#d62728"}  # --rpc's verdicts; noise is grey


def require_matplotlib():
    """Exit in one line if matplotlib is missing: a run with --plot calls this before it starts, not after."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(f"--plot needs matplotlib, which is not installed: {PLOT_NEEDS}") from None
    return matplotlib


def pyplot():
    matplotlib = require_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def per_call_chart(results, directory, image_format):
    """Write ns per call per case, a group of bars per result ({label: {benchmark: (mean ns, half-width of its 95%
    interval)}}), the interval as a whisker; return what it wrote."""
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
            shown = [(p, v) for p, v in zip(positions, values, strict=True) if v is not None]
            bars = axis.bar(
                [p for p, _ in shown],
                [mean for _, (mean, _) in shown],
                width,
                yerr=[0 if math.isnan(half) else half for _, (_, half) in shown],
                capsize=2,
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
    figure.suptitle("fastcommon against grpc's own: ns per call (pyperf, lower is better; whiskers: 95% intervals)")
    return save(figure, directory, "per_call", image_format)


def per_rpc_chart(results, directory, image_format):
    """Write the pictures of an RPC that are given, side by side; return what it wrote.

    ``results``: "instructions", {(flavour, headers, process, mode, run): {object: per RPC}} from
    --rpc-instructions; "cpu", {"kind | process": (saved us, its 95% CI, verdict)} and "expected",
    {"kind | process": (cost us, saving us)} from --rpc; "saturation", {row: {"label": ..., "ratios":
    {"patched"|"control": {metric: (mean, half-width)}}}} from --saturate.
    """
    plt = pyplot()
    panels = [name for name in PANELS if results.get(name)]
    figure, axes = plt.subplots(1, len(panels), figsize=(8.5 * len(panels), 6), layout="constrained", squeeze=False)
    for axis, panel in zip(axes[0], panels, strict=True):
        PANELS[panel][0](axis, results)
    handles, names = [], []
    for axis in axes[0]:
        more_handles, more_names = axis.get_legend_handles_labels()
        handles, names = handles + more_handles, names + more_names
    figure.legend(handles, names, loc="outside lower center", ncols=2, fontsize=9)
    measured = ", ".join(PANELS[panel][1] for panel in panels)
    versions = f"\n{results['versions']}" if panels == ["instructions"] and results.get("versions") else ""
    figure.suptitle(f"Per RPC and process, stock grpc and patched: {measured}{versions}")
    return save(figure, directory, "per_rpc", image_format)


def _instructions_panel(axis, results):
    counted = results["instructions"]
    rows = sorted({key[:3] for key in counted}, key=lambda key: (key[0] != "sync", key[1], key[2] != "server"))
    for row, key in enumerate(rows):
        stock, patched = (
            [costs for run, costs in counted.items() if run[:4] == (*key, mode)] for mode in ("stock", "patched")
        )
        headline = whole_process_saving(stock, patched)
        whole, saved = headline["stock"] / 1000, headline["saved"] / 1000
        axis.barh(row - 0.2, whole, 0.4, color="#b0b0b0", label="grpc stock" if row == 0 else None)
        axis.barh(row + 0.2, whole - saved, 0.4, color="#1f77b4", label="patched by fastcommon" if row == 0 else None)
        axis.text(whole - saved, row + 0.2, f" {saved:,.1f}k saved ({headline['share']:.1%}; {headline['low']:.1%} "
                  f"to {headline['high']:.1%})", va="center", fontsize=8)  # fmt: skip
    axis.set_yticks(
        range(len(rows)), [f"{flavour}, {headers} headers: {process}" for flavour, headers, process in rows]
    )
    axis.invert_yaxis()
    axis.set_xlim(0, axis.get_xlim()[1] * 1.5)  # room for the labels right of each bar
    axis.set_xlabel("thousands of instructions per RPC, the whole process (saved: counted on its Python side)")
    axis.set_title("python benchmark.py --rpc-instructions")


def _cpu_panel(axis, results):
    labels = list(results["cpu"])
    for row, label in enumerate(labels):
        saved, ci, verdict = results["cpu"][label]
        axis.errorbar(saved, row, xerr=ci, fmt="o", color=VERDICT_COLOURS.get(verdict, "#b0b0b0"),
                      capsize=3, label="CPU saved, with its 95% interval" if row == 0 else None)  # fmt: skip
        expected = results["expected"][label][1]
        axis.plot(expected, row, "x", color="#ff7f0e", label="expected from the calls counted" if row == 0 else None)
        axis.text(saved + ci, row, f"  {saved:+.1f} ± {ci:.1f} µs ({verdict})", va="center", fontsize=8)
    axis.axvline(0, color="#606060", linewidth=0.8)
    low, high = axis.get_xlim()
    axis.set_xlim(low, high + (high - low) * 0.5)  # room for the labels right of each interval
    axis.set_yticks(range(len(labels)), [label.replace(" | ", ": ") for label in labels])
    axis.invert_yaxis()
    axis.set_xlabel("µs of CPU saved per RPC (stock minus patched)")
    axis.set_title("python benchmark.py --rpc")


def _saturation_panel(axis, results):
    rows = results["saturation"]
    shown = (  # the ratio, the mode it is of, the legend, the colour, the offset from the row's line
        ("cpu", "patched", "CPU per RPC, patched / stock", "#1f77b4", -0.2),
        ("rps", "patched", "requests/s, patched / stock", "#2ca02c", 0.0),
        ("cpu", "control", "CPU per RPC, stock again / stock (the control)", "#b0b0b0", 0.2),
    )
    for row, found in enumerate(rows.values()):
        for metric, mode, legend, colour, offset in shown:
            mean, half = found["ratios"][mode][metric]
            half = 0 if math.isnan(half) else half
            axis.errorbar(mean, row + offset, xerr=half, fmt="o", color=colour, capsize=3,
                          label=legend if row == 0 else None)  # fmt: skip
            axis.text(mean + half, row + offset, f"  {mean:.3f} ± {half:.3f}", va="center", fontsize=7)
    axis.axvline(1.0, color="#606060", linewidth=0.8)
    low, high = axis.get_xlim()
    axis.set_xlim(low, high + (high - low) * 0.3)  # room for the labels right of each interval
    axis.set_yticks(range(len(rows)), [found["label"] for found in rows.values()])
    axis.invert_yaxis()
    axis.set_xlabel("ratio to stock, mean over rounds with its 95% interval (1.00: no change)")
    axis.set_title("python benchmark.py --saturate (servers driven by ghz)")


PANELS = {  # each picture of an RPC: how it is drawn, what it shows
    "instructions": (_instructions_panel, "instructions (counted, with their range)"),
    "cpu": (_cpu_panel, "CPU time (with its noise)"),
    "saturation": (_saturation_panel, "at saturation (with 95% intervals)"),
}


def save_and_chart(results, args):
    """Per RPC: save a run's results as JSON where -o asks, and chart them where --plot does."""
    if args.o:
        with open(args.o, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=1)
        print(f"wrote {args.o}")
    if args.plot:
        print(per_rpc_chart(results, args.plot, args.plot_format))


def save(figure, directory, name, image_format):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.{image_format}")
    figure.savefig(path, dpi=110)
    return f"wrote {path}"


def main(args):
    """Chart saved results: pyperf's per call (-o of a per-call run), --rpc's, --rpc-instructions' and
    --saturate's (-o)."""
    import pyperf

    per_call, per_rpc, sources = {}, {}, {}
    for path in args.results:
        try:
            with open(path, encoding="utf-8") as file:
                saved = json.load(file)
            if "instructions" in saved:
                only_one(sources, "--rpc-instructions results", path)
                per_rpc["instructions"] = {tuple(_key(part) for part in key.split(" | ")): costs
                                           for key, costs in saved["instructions"].items()}  # fmt: skip
                per_rpc["versions"] = saved.get("versions", "")
                continue
            if "cpu" in saved:
                only_one(sources, "--rpc results", path)
                per_rpc.update(cpu=saved["cpu"], expected=saved["expected"])
                continue
            if "saturation" in saved:
                only_one(sources, "--saturate results", path)
                per_rpc["saturation"] = saved["saturation"]
                continue
            suite = pyperf.BenchmarkSuite.load(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # missing, unreadable, or not such a JSON
            raise SystemExit(f"python benchmark.py --plot: cannot read {path}: {exc}") from None
        version = suite.get_benchmarks()[0].get_metadata().get("python_version", path).split()[0]
        only_one(sources, f"from CPython {version}", path)
        per_call[version] = {bench.get_name(): summary(bench) for bench in suite.get_benchmarks()}
    if per_call:
        print(per_call_chart(per_call, args.plot, args.plot_format))
    if per_rpc:
        print(per_rpc_chart(per_rpc, args.plot, args.plot_format))


def only_one(sources, what, path):
    """Note that ``path`` holds ``what``; exit in one line naming both files if another already did."""
    if what in sources:  # the chart has one place for each: a second would silently replace the first
        raise SystemExit(f"python benchmark.py --plot: {sources[what]} and {path} are both {what}; chart one of them")
    sources[what] = path


def _key(part):
    return int(part) if part.isdigit() else part
