"""`run --report`: each patched process counts the calls through what fastcommon put into grpc, and says as it
ends what they saved: a block on stderr, and one JSON line appended to a file for machines.

The compiled module counts in C (a counter in front of the same code: no Python frame between grpc and
fastcommon, a few instructions more per call); pure Python, which buys nothing to report, counts in a closure.
A process that SIGTERM would end at its default disposition reports first, then ends by SIGTERM as it would have.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import inspect
import json
import os
import platform
import signal
import sys
import threading
import time
import timeit
import types
import warnings
from collections.abc import Callable
from typing import Any

from . import __version__, _grpc, _implementation, _patching
from ._registry import BY_NAME, METADATA_KINDS, NAMES, USER_AGENT


class Report:
    """Calls through what fastcommon put into grpc, counted; reported when the process ends."""

    def __init__(self) -> None:
        self.counts: list[int] = [0] * len(NAMES)  # pure Python's; the compiled module counts itself
        self.names: tuple[str, ...] = ()
        self.timed: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}  # (grpc's own, ours)
        self.baseline: dict[str, int] = {}
        self.printed = False
        self.to_stderr = False
        self.path: str | None = None

    def counting(self, owns: dict[str, Any], metadata_class: Any) -> dict[str, Any]:
        """What replaces grpc's own, counted: made to count by the compiled module, or wrapped in pure Python."""
        if _implementation.compiled:
            made = _implementation.replacements(owns, metadata_class, counted=True)
        else:
            made = {name: self.counted(name, ours) for name, ours in _implementation.replacements(owns, None).items()}
        self.timed = {name: (own, made[name]) for name, own in owns.items()}  # timed at exit, after the counts
        return made

    def counted(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` behind a counter, in pure Python (which replaces only the four functions)."""
        counts, index = self.counts, BY_NAME[name].counter

        def counted(*args: Any) -> Any:
            counts[index] += 1  # a lost count without the GIL would only make a report of nothing saved smaller
            return function(*args)

        return counted

    def start(self, to_stderr: bool, path: str | None) -> None:
        """Patch grpc, counting; report as this process ends: on stderr, in the file at ``path``, or both."""
        self.to_stderr, self.path = to_stderr, path or None
        replaced = _patching.install(self.counting)
        if not replaced:
            return
        self.names = replaced
        self.baseline = self.calls_so_far()  # the compiled counters may have counted before, in this process
        atexit.register(self.print)
        if hasattr(os, "register_at_fork"):  # not on Windows
            os.register_at_fork(after_in_child=self.forked)
        self.print_from_multiprocessing_children()
        self.report_before_sigterm()

    def report_before_sigterm(self) -> None:
        """Where SIGTERM would end this process at its default disposition (no handler: atexit does not run then),
        report first, then end by it: docker stop, Kubernetes and systemd stop servers so. A program's own handler,
        or one it installs later, is left alone; the report is written when it exits, as always."""
        if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
            return  # a signal's handler is the main thread's to set
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self.on_sigterm)
            self.relay_sigterm()

    def relay_sigterm(self) -> None:
        """Where the kernel hands SIGTERM to a thread other than the main one, _sigterm.pyx sends it on to the main
        thread, which a wait with no timeout would otherwise keep from running the handler: put it in front of
        CPython's handler, just set. Without the compiled relay (a pure-Python install) such a process keeps
        running: docs/adoption.md."""
        relay = sigterm_relay()
        if relay is not None:
            relay.relay_sigterm(_pthread_kill_address())
        elif os.name == "posix" and _implementation.IMPLEMENTATION == "cython":
            warnings.warn(
                "fastcommon: run --report's SIGTERM relay (fastcommon._sigterm) did not load; a process whose main "
                "thread waits with no timeout may not end when another thread takes SIGTERM (docs/adoption.md)",
                _implementation.FastcommonWarning,
                stacklevel=2,
            )

    def on_sigterm(self, signum: int, frame: Any) -> None:
        """Report, then end by SIGTERM as the default disposition would have: the parent sees the same status. A
        second SIGTERM while it reports ends the process at once; so does a report that fails."""
        ours = signal.getsignal(signal.SIGTERM) == self.on_sigterm  # not where a handler of the program's calls this
        if ours:
            # The default first: a second SIGTERM is the kernel's to act on. A Python handler would lose one that
            # comes in the instant before the report's write begins to wait (docs/adoption.md).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            self.print(ended_by="SIGTERM")
        finally:
            if ours:
                os.kill(os.getpid(), signal.SIGTERM)

    def calls_so_far(self) -> dict[str, int]:
        counts = _implementation.calls() or self.counts
        return {name: int(counts[BY_NAME[name].counter]) for name in self.names}

    def forked(self) -> None:
        """In a fork child: count from here on, and print this process's own block."""
        self.baseline = self.calls_so_far()
        self.printed = False
        self.print_from_multiprocessing_children()
        relay = sigterm_relay()
        if relay is not None and signal.getsignal(signal.SIGTERM) == self.on_sigterm:
            relay.relay_here()  # to this process's main thread: the one that forked

    def print_from_multiprocessing_children(self) -> None:
        # multiprocessing's fork and forkserver children end in os._exit, past atexit; its own
        # finalizers still run. A child clears them when it starts, then runs its after-fork hooks.
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.Finalize(None, self.print, exitpriority=0)
            util.register_after_fork(self, Report.print_from_multiprocessing_children)

    def calls(self) -> dict[str, int]:
        return {name: count - self.baseline.get(name, 0) for name, count in self.calls_so_far().items()}

    def print(self, ended_by: str = "exit") -> None:
        """This process's report, once: its block on stderr, and its JSON line in the report file, if one is set."""
        if self.printed:
            return
        self.printed = True
        summary = self.summary(self.calls(), time.process_time(), ended_by)
        if self.to_stderr:
            sys.stderr.write(text(summary))
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
        """grpc's time per call less fastcommon's, on the registry's calibration: the best of 7 runs of 2,000 calls
        each, the two interleaved, so that what the machine does meanwhile weighs on both alike. A difference
        timing cannot tell from none is 0: fastcommon's never runs more instructions than grpc's."""
        grpcs, ours = (getattr(raw, "__func__", raw) for raw in self.timed[name])  # as the class calls them
        if inspect.isgeneratorfunction(grpcs):  # an iterator's cost is in its items
            grpcs, ours = _taken(grpcs), _taken(ours)
        cls = _grpc.metadata_class(_grpc.modules())
        arguments = BY_NAME[name].calibration
        timers = [_timer(function, arguments(cls, cls(USER_AGENT))) for function in (grpcs, ours)]
        best = [min(runs) for runs in zip(*([timer.timeit(2000) for timer in timers] for _ in range(7)), strict=True)]
        return max(0.0, float(best[0] - best[1]) / 2000 * 1e9)


@functools.cache
def sigterm_relay() -> types.ModuleType | None:
    """The compiled SIGTERM relay (_sigterm.pyx), or None: not built (Windows, a pure-Python install), or broken."""
    try:
        return importlib.import_module("fastcommon._sigterm")
    except Exception:  # a broken extension must never break the program it reports on
        return None


@functools.cache
def _pthread_kill_address() -> int:
    """libc's pthread_kill, found as the process runs (why: _sigterm.pyx); 0 where it is not found."""
    try:
        import ctypes

        return ctypes.cast(ctypes.CDLL(None).pthread_kill, ctypes.c_void_p).value or 0
    except (ImportError, OSError, AttributeError):
        return 0


def _taken(function: Callable[..., Any]) -> Callable[..., Any]:
    return lambda m: tuple(function(m))


def text(summary: dict[str, Any]) -> str:
    """The block printed on stderr: what is patched, the calls, the time they saved and its share of the CPU."""
    calls, cpu_seconds, saved = summary["calls"], summary["cpu_seconds"], summary["saved_seconds"]
    share = f"{saved / cpu_seconds:.3%}" if cpu_seconds > 0 else "n/a"
    left = summary["left_to_grpc"]
    patched = ", ".join(calls) + (f"; left to grpc: {', '.join(left)}" if left else "")
    # A method nobody called is listed among the uncalled; the four functions and _Metadatum always count.
    uncalled = [name for name, count in calls.items() if not count and BY_NAME[name].kind in METADATA_KINDS]
    counted = ", ".join(f"{name} {count:,}" for name, count in calls.items() if name not in uncalled)
    counted += f"; not called: {', '.join(uncalled)}" if uncalled else ""
    per_call = (
        ", ".join(
            f"{name} {f'{ns:.0f} ns' if ns else 'within noise'}" for name, ns in summary["saved_ns_per_call"].items()
        )
        or "-"
    )
    ended = " (ended by SIGTERM)" if summary["ended_by"] == "SIGTERM" else ""
    return (
        f"fastcommon --report, process {summary['pid']} ({summary['implementation']}, grpcio {summary['grpcio']})"
        f"{ended}: grpc patched ({patched})\n"
        f"  calls: {counted}\n"
        f"  saved: {saved * 1e3:.3f} ms = {share} of this process's {cpu_seconds:.3f} s CPU"
        f" (per call, timed at exit: {per_call})\n"
    )


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


def _timer(function: Callable[..., Any], args: tuple[Any, ...]) -> timeit.Timer:
    """``function(*args)`` called as grpc calls it, in timeit's own loop (no lambda between)."""
    names = ("a", "b", "c")[: len(args)]
    return timeit.Timer(f"f({', '.join(names)})", globals={"f": function, **dict(zip(names, args, strict=False))})


REPORT = Report()
