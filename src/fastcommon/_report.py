"""`run --report`: what each patched process counts, times and says as it ends (_launcher.py), on stderr and in JSON."""

import inspect
import json
import os
import platform
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

from . import __version__, _grpc, _implementation
from ._registry import BY_NAME, NAMES, USER_AGENT

RUNS, CALLS_PER_RUN = 7, 2000  # what a saving per call is timed on: the best of RUNS runs of CALLS_PER_RUN calls
WIDTH = 160  # no line of the block on stderr is longer
NAME_WIDTH = max(map(len, NAMES))


class Report:
    """Calls through what fastcommon put into grpc, counted; reported when the process ends."""

    def __init__(self) -> None:
        self.counts = [0] * len(NAMES)  # pure Python's; the compiled module counts itself
        self.baseline: dict[str, int] = {}
        self.timed: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}  # by name replaced: grpc's, ours
        self.to_stderr = self.full = self.printed = False
        self.path: str | None = None

    def counting(self, originals: dict[str, Any], metadata_class: Any) -> dict[str, Any]:
        """What replaces grpc's originals, counted: by the compiled module, or behind a counter in pure Python."""
        replacements = _implementation.replacements(originals, metadata_class, counted=bool(_implementation.compiled))
        if not _implementation.compiled:  # which replaces only the four functions
            replacements = {name: self.counted(name, function) for name, function in replacements.items()}
        self.timed = {name: (original, replacements[name]) for name, original in originals.items()}
        return replacements

    def counted(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` behind a counter, in pure Python."""
        counts, index = self.counts, BY_NAME[name].counter

        def counted(*args: Any) -> Any:
            counts[index] += 1  # a lost count without the GIL would only make a report of nothing saved smaller
            return function(*args)

        return counted

    def count_from_here(self) -> None:
        """Count from here on, and report once more: a fork child's counters hold its parent's calls too."""
        self.baseline = self.calls_so_far()
        self.printed = False

    def calls_so_far(self) -> dict[str, int]:
        counts = _implementation.calls() or self.counts
        return {name: counts[BY_NAME[name].counter] for name in self.timed}

    def print(self, ended_by: str = "exit") -> None:
        """This process's report, once: its block on stderr, and its JSON line in the report file, if one is set."""
        if self.printed:
            return
        self.printed = True
        calls = {name: count - self.baseline[name] for name, count in self.calls_so_far().items()}
        summary = self.summary(calls, time.process_time(), ended_by)
        if self.to_stderr:
            sys.stderr.write(text(summary, self.full))
            sys.stderr.flush()
        if self.path:
            append_line(self.path, json.dumps(summary, separators=(",", ":")) + "\n")

    def summary(self, calls: dict[str, int], cpu_seconds: float, ended_by: str = "exit") -> dict[str, Any]:
        """What the report says, for machines (the JSON line) and for people (text() reads it)."""
        saving_ns = {name: self.per_call_saving_ns(name) for name, count in calls.items() if count}
        return {"pid": os.getpid(), "fastcommon": __version__, "implementation": _implementation.IMPLEMENTATION,
                "python": platform.python_version(), "grpcio": _grpc.version(), "patched": list(calls),
                "left_to_grpc": [name for name in NAMES if name not in calls], "calls": calls,
                "saved_ns_per_call": {name: round(ns, 1) for name, ns in saving_ns.items()},
                "saved_seconds": sum(calls[name] * ns for name, ns in saving_ns.items()) / 1e9,
                "cpu_seconds": cpu_seconds, "ended_by": ended_by}  # fmt: skip

    def per_call_saving_ns(self, name: str) -> float:
        """grpc's time per call less fastcommon's, each the best of RUNS interleaved runs; never below 0."""
        functions = [getattr(raw, "__func__", raw) for raw in self.timed[name]]  # as the class calls them
        if inspect.isgeneratorfunction(functions[0]):  # an iterator's cost is in its items
            functions = [lambda m, function=function: tuple(function(m)) for function in functions]
        elif inspect.isgeneratorfunction(getattr(functions[0], "__wrapped__", None)):  # a context manager's: its with
            functions = [lambda *a, f=f: (m := f(*a), m.__enter__(), m.__exit__(None, None, None)) for f in functions]
        cls = _grpc.metadata_class()
        arguments = BY_NAME[name].calibration(cls, cls(USER_AGENT))
        runs = [[ns_per_call(each, arguments, CALLS_PER_RUN, repeat=1) for each in functions] for _ in range(RUNS)]
        best: list[float] = [min(column) for column in zip(*runs, strict=True)]
        return max(0.0, best[0] - best[1])


def ns_per_call(function: Callable[..., Any], args: tuple[Any, ...], number: int, repeat: int = RUNS) -> float:
    """The best time of ``function(*args)`` in ns over ``repeat`` runs of ``number`` calls, in timeit's own loop."""
    names = ("a", "b", "c")[: len(args)]
    timer = timeit.Timer(f"f({', '.join(names)})", globals={"f": function, **dict(zip(names, args, strict=False))})
    return min(timer.repeat(number=number, repeat=repeat)) / number * 1e9


def text(summary: dict[str, Any], full: bool = False) -> str:
    """The block on stderr: what is patched, called (most first) and saved, on three lines; in full, a line per name."""
    calls, left = summary["calls"], summary["left_to_grpc"]
    called = sorted((name for name in calls if calls[name]), key=lambda name: -calls[name])
    compiled = summary["implementation"] == "cython"
    per_call = {name: f"{ns:.0f} ns" if ns else "within noise" for name, ns in summary["saved_ns_per_call"].items()}
    ended = ", ended by SIGTERM" if summary["ended_by"] == "SIGTERM" else ""
    process = f"process {summary['pid']} (grpcio {summary['grpcio']}, {'compiled' if compiled else 'pure Python'})"
    head = f"fastcommon --report, {process}{ended}: {len(calls)} of {len(calls) + len(left)} names patched"
    if left:
        head += f", {len(left)} left to grpc"
    if not compiled:
        saved = "  saved: nothing (pure Python is no faster than grpc's own)"
    elif not called:
        saved = "  saved: nothing (no calls)"
    else:
        cpu, seconds = summary["cpu_seconds"], summary["saved_seconds"]
        share = f"{seconds / cpu:.2%}" if cpu > 0 else "n/a"
        saved = f"  saved: {seconds * 1e3:.3f} ms, {share} of the process's {cpu:.3f} s CPU"
    if full:
        lines = [head, saved]
        for name, count in calls.items():
            line = f"  {name:<{NAME_WIDTH}} {count:>11,} call{'' if count == 1 else 's'}"
            lines.append(f"{line}, saved per call: {per_call[name]}" if count and compiled else line)
        return "\n".join([*lines, *(f"  {name:<{NAME_WIDTH}}  left to grpc" for name in left)]) + "\n"
    if left:
        head = _fitted(f"{head}: ", left)
    if compiled and called:
        saved = _fitted(f"{saved} (per call: ", [f"{name} {per_call[name]}" for name in called], ")")
    rest = f" ({len(calls) - len(called)} of {len(calls)} not called)" if len(called) < len(calls) else ""
    counts = _fitted("  calls: ", [f"{name} {calls[name]:,}" for name in called], rest) if called else "  calls: none"
    return f"{head}\n{counts}\n{saved}\n"


def _fitted(start: str, items: list[str], end: str = "") -> str:
    """``start``, as many of ``items`` as keep the line within WIDTH characters (the rest counted), then ``end``."""
    for shown in range(len(items), 0, -1):
        more = f" (+{len(items) - shown} more)" if shown < len(items) else ""
        line = f"{start}{', '.join(items[:shown])}{more}{end}"
        if len(line) <= WIDTH:
            return line
    return f"{start}(+{len(items)} more){end}"


def append_line(path: str, line: str) -> None:
    """Append ``line`` to ``path`` in one write: processes ending at once never interleave. A failure only warns."""
    data = line.encode()
    try:
        with open(path, "ab", buffering=0, opener=lambda name, flags: os.open(name, flags, 0o644)) as file:
            written = file.write(data)
        if written != len(data):
            raise OSError(f"{written} of {len(data)} bytes written")
    except OSError as exc:
        sys.stderr.write(f"fastcommon --report-file: could not append this process's report to {path}: {exc}\n")


REPORT = Report()
