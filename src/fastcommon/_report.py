"""`run --report`: what each patched process counts and says. It counts the calls through what fastcommon put into
grpc, times what one call saves, and says it as it ends: a short block on stderr for people (``text``), one JSON
line appended to a file for machines (``append_line``). When a process says it is _ending.py's.

The compiled module counts in C (a counter in front of the same code: no Python frame between grpc and
fastcommon, a few instructions more per call); pure Python, which buys nothing to report, counts in a closure.
"""

from __future__ import annotations

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
        self.counts: list[int] = [0] * len(NAMES)  # pure Python's; the compiled module counts itself
        self.names: tuple[str, ...] = ()
        self.timed: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}  # (grpc's original, fastcommon's)
        self.baseline: dict[str, int] = {}
        self.printed = False
        self.to_stderr = self.full = False
        self.path: str | None = None

    def counting(self, originals: dict[str, Any], metadata_class: Any) -> dict[str, Any]:
        """What replaces grpc's originals, counted: made to count by the compiled module, or wrapped in pure Python."""
        if _implementation.compiled:
            replacements = _implementation.replacements(originals, metadata_class, counted=True)
        else:
            made = _implementation.replacements(originals, None)
            replacements = {name: self.counted(name, replacement) for name, replacement in made.items()}
        self.timed = {
            name: (original, replacements[name]) for name, original in originals.items()
        }  # timed at exit, after the counts
        return replacements

    def counted(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` behind a counter, in pure Python (which replaces only the four functions)."""
        counts, index = self.counts, BY_NAME[name].counter

        def counted(*args: Any) -> Any:
            counts[index] += 1  # a lost count without the GIL would only make a report of nothing saved smaller
            return function(*args)

        return counted

    def begin(self, names: tuple[str, ...], to_stderr: bool, full: bool, path: str | None) -> None:
        """Count the calls of ``names`` from here on; report on stderr (in full: a line per name), in the file at
        ``path``, or both."""
        self.names, self.to_stderr, self.full, self.path = names, to_stderr, full, path or None
        self.count_from_here()

    def count_from_here(self) -> None:
        """Count from here on, and report once more: the compiled counters may have counted before (a fork child)."""
        self.baseline = self.calls_so_far()
        self.printed = False

    def calls_so_far(self) -> dict[str, int]:
        counts = _implementation.calls() or self.counts
        return {name: int(counts[BY_NAME[name].counter]) for name in self.names}

    def calls(self) -> dict[str, int]:
        return {name: count - self.baseline.get(name, 0) for name, count in self.calls_so_far().items()}

    def print(self, ended_by: str = "exit") -> None:
        """This process's report, once: its block on stderr, and its JSON line in the report file, if one is set."""
        if self.printed:
            return
        self.printed = True
        summary = self.summary(self.calls(), time.process_time(), ended_by)
        if self.to_stderr:
            sys.stderr.write(text(summary, self.full))
            sys.stderr.flush()
        if self.path:
            append_line(self.path, json.dumps(summary, separators=(",", ":")) + "\n")

    def summary(self, calls: dict[str, int], cpu_seconds: float, ended_by: str = "exit") -> dict[str, Any]:
        """What the report says, for machines (the JSON line) and for people (text() reads it)."""
        saving_ns = {name: self.per_call_saving_ns(name) for name, count in calls.items() if count}
        return {
            "pid": os.getpid(),
            "fastcommon": __version__,
            "implementation": _implementation.IMPLEMENTATION,
            "python": platform.python_version(),
            "grpcio": _grpc.version(),
            "patched": list(calls),
            "left_to_grpc": [name for name in NAMES if name not in calls],
            "calls": calls,
            "saved_ns_per_call": {name: round(ns, 1) for name, ns in saving_ns.items()},
            "saved_seconds": sum(calls[name] * ns for name, ns in saving_ns.items()) / 1e9,
            "cpu_seconds": cpu_seconds,
            "ended_by": ended_by,
        }

    def per_call_saving_ns(self, name: str) -> float:
        """grpc's time per call less fastcommon's, on the registry's calibration: the best of RUNS runs of
        CALLS_PER_RUN calls each, the two interleaved, so that what the machine does meanwhile weighs on both alike.
        A difference timing cannot tell from none is 0: fastcommon's never runs more instructions than grpc's."""
        grpcs, fastcommons = (getattr(raw, "__func__", raw) for raw in self.timed[name])  # as the class calls them
        if inspect.isgeneratorfunction(grpcs):  # an iterator's cost is in its items
            grpcs, fastcommons = _taken(grpcs), _taken(fastcommons)
        cls = _grpc.metadata_class()
        arguments = BY_NAME[name].calibration(cls, cls(USER_AGENT))
        runs = [
            [ns_per_call(each, arguments, CALLS_PER_RUN, repeat=1) for each in (grpcs, fastcommons)]
            for _ in range(RUNS)
        ]
        best: list[float] = [min(column) for column in zip(*runs, strict=True)]
        return max(0.0, best[0] - best[1])


def ns_per_call(function: Callable[..., Any], args: tuple[Any, ...], number: int, repeat: int = RUNS) -> float:
    """The best time of ``function(*args)`` in ns over ``repeat`` runs of ``number`` calls, in timeit's own loop (no
    lambda between)."""
    names = ("a", "b", "c")[: len(args)]
    timer = timeit.Timer(f"f({', '.join(names)})", globals={"f": function, **dict(zip(names, args, strict=False))})
    return min(timer.repeat(number=number, repeat=repeat)) / number * 1e9


def _taken(function: Callable[..., Any]) -> Callable[..., Any]:
    return lambda m: tuple(function(m))


def text(summary: dict[str, Any], full: bool = False) -> str:
    """The block printed on stderr: what is patched, the calls most called first, and what they saved, in three
    lines of at most WIDTH characters; in full, the calls and the saving of every name, a line each."""
    calls, left = summary["calls"], summary["left_to_grpc"]
    called = sorted((name for name, count in calls.items() if count), key=lambda name: -calls[name])
    implementation = "compiled" if summary["implementation"] == "cython" else "pure Python"
    ended = ", ended by SIGTERM" if summary["ended_by"] == "SIGTERM" else ""
    head = (
        f"fastcommon --report, process {summary['pid']} (grpcio {summary['grpcio']}, {implementation}){ended}: "
        f"{len(calls)} of {len(calls) + len(left)} names patched"
    )
    if left:
        head = f"{head}, {len(left)} left to grpc" if full else _fitted(f"{head}, {len(left)} left to grpc: ", left)
    if full:
        return "\n".join([head, _saved(summary, []), *(_name_line(summary, name) for name in [*calls, *left])]) + "\n"
    rest = f" ({len(calls) - len(called)} of {len(calls)} not called)" if len(called) < len(calls) else ""
    counts = _fitted("  calls: ", [f"{name} {calls[name]:,}" for name in called], rest) if called else "  calls: none"
    return f"{head}\n{counts}\n{_saved(summary, called)}\n"


def _saved(summary: dict[str, Any], per_call: list[str]) -> str:
    """The line of what the calls saved: in all, as a share of the process's CPU, and per call for ``per_call``."""
    cpu_seconds, seconds = summary["cpu_seconds"], summary["saved_seconds"]
    if summary["implementation"] == "python":
        return "  saved: nothing (pure Python is no faster than grpc's own)"
    if not any(summary["calls"].values()):
        return "  saved: nothing (no calls)"
    share = f"{seconds / cpu_seconds:.2%}" if cpu_seconds > 0 else "n/a"
    line = f"  saved: {seconds * 1e3:.3f} ms, {share} of the process's {cpu_seconds:.3f} s CPU"
    if not per_call:
        return line
    return _fitted(f"{line} (per call: ", [f"{name} {_ns(summary, name)}" for name in per_call], ")")


def _name_line(summary: dict[str, Any], name: str) -> str:
    """A name's line in the full report: its calls and what each saved, or that it is left to grpc."""
    if name not in summary["calls"]:
        return f"  {name:<{NAME_WIDTH}}  left to grpc"
    count = summary["calls"][name]
    line = f"  {name:<{NAME_WIDTH}} {count:>11,} call{'' if count == 1 else 's'}"
    if not count or summary["implementation"] == "python":  # pure Python: nothing saved (the saved line says so)
        return line
    return f"{line}, saved per call: {_ns(summary, name)}"


def _ns(summary: dict[str, Any], name: str) -> str:
    """What one call of ``name`` saved, as a person reads it."""
    ns = summary["saved_ns_per_call"][name]
    return f"{ns:.0f} ns" if ns else "within noise"


def _fitted(start: str, items: list[str], end: str = "") -> str:
    """``start``, as many of ``items`` as keep the line within WIDTH characters (the rest counted), then ``end``."""
    shown = len(items)
    while True:
        rest = f"(+{len(items) - shown} more)" if shown < len(items) else ""
        line = start + " ".join(filter(None, [", ".join(items[:shown]), rest])) + end
        if len(line) <= WIDTH or not shown:
            return line
        shown -= 1


def append_line(path: str, line: str) -> None:
    """Append one line to ``path`` in one write on a file opened for appending: processes that end at once never
    interleave their lines. A failure is one warning on stderr, never an exception at exit."""
    data = line.encode()
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(descriptor, data)
        finally:
            os.close(descriptor)
        if written != len(data):
            raise OSError(f"{written} of {len(data)} bytes written")
    except OSError as exc:
        sys.stderr.write(f"fastcommon --report-file: could not append this process's report to {path}: {exc}\n")


REPORT = Report()
