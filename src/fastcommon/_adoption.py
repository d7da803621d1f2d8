"""Process-wide adoption: `python -m fastcommon run [--report]` reaches every Python process of a program.

``launch`` runs the program under plain ``python`` (``exec``, so argv, ``__main__``, exit codes
and signals are python's own) with fastcommon's bootstrap directory first on PYTHONPATH. Python
runs ``_bootstrap/sitecustomize.py`` at start-up in the program and in every child that inherits
that environment (multiprocessing's spawn and forkserver workers, ``subprocess`` runs of
Python); fork children inherit the parent's state. The bootstrap calls ``grpc_imported`` once a
process has imported grpc: only then is fastcommon imported and grpc patched.

With ``--report`` (FASTCOMMON_REPORT=1) what is put into grpc counts its calls, and each patched
process prints one block on stderr as it exits; with ``--report-file PATH`` (FASTCOMMON_REPORT_FILE=PATH)
it also appends one JSON object, one line, to PATH. A process that SIGTERM would end at its default
disposition reports first, then ends by SIGTERM as it would have. Without either nothing counts. The
compiled module counts in C (a counter in front of the same code: no Python frame between grpc and
fastcommon, a few instructions more per call); pure Python, which buys nothing to report, counts with a
closure.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import timeit
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from fastcommon import _patching
from fastcommon._implementation import IMPLEMENTATION, FastcommonWarning, chosen

# Windows has no exec that keeps the process: there the program runs as a child (tests set this to try it).
REPLACE_PROCESS = sys.platform != "win32"
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")
REPORT_VARIABLE = "FASTCOMMON_REPORT"  # "1": each adopted process reports on stderr as it ends
REPORT_FILE_VARIABLE = "FASTCOMMON_REPORT_FILE"  # a path: each also appends its report there, as a JSON line


def environment(report: bool, report_file: str | None = None) -> dict[str, str]:
    """The environment a program runs in under `python -m fastcommon run`."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [BOOTSTRAP_DIR, environ.get("PYTHONPATH")]))
    environ.pop(REPORT_VARIABLE, None)
    environ.pop(REPORT_FILE_VARIABLE, None)
    if report or report_file:
        environ[REPORT_VARIABLE] = "1"
    if report_file:
        environ[REPORT_FILE_VARIABLE] = os.path.abspath(report_file)  # the program and its children may chdir
    return environ


def report_file_problem(path: str) -> str | None:
    """Why reports cannot be appended to ``path`` (a directory, a folder that is missing, no permission), or None.
    Opening it for appending creates it, empty, where it does not exist yet."""
    if os.path.isdir(path):
        return "is a directory"
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def launch(program: list[str], report: bool, report_file: str | None = None) -> NoReturn:
    """Run ``python [interpreter options] <program>`` in place of this process, adopted."""
    # The options this interpreter was started with (-O, -X, -W, ...), as multiprocessing passes them on.
    command = [sys.executable, *subprocess._args_from_interpreter_flags(), *program]  # type: ignore[attr-defined]
    environ = environment(report, report_file)
    if REPLACE_PROCESS:
        os.execve(sys.executable, command, environ)
    # The program as a child, its status passed on. Ctrl+C reaches the whole console, the child
    # included; this process only waits for it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(subprocess.call(command, env=environ))


def grpc_imported() -> None:
    """Called by the bootstrap once this process has imported grpc: patch it, with counting under --report."""
    try:
        if os.environ.get(REPORT_VARIABLE, "") not in ("", "0") or os.environ.get(REPORT_FILE_VARIABLE):
            _REPORT.start()
        else:
            _patching.patch()
    except Exception as exc:  # a failure here must not take the program down with it
        warnings.warn(f"fastcommon could not patch grpc: {exc!r}", FastcommonWarning, stacklevel=2)


# The inputs on which the saving per call is timed when the report is printed: a gRPC method
# name for encode and decode, and for serialize and deserialize a (de)serializer that costs
# next to nothing (the saving is the wrapper's own cost; the message's cost is the same either way).
CALIBRATION_CALLS = {
    "encode": ("/grpc.testing.BenchmarkService/UnaryCall",),
    "decode": (b"/grpc.testing.BenchmarkService/UnaryCall",),
    "serialize": (b"message", bytes),
    "deserialize": (b"message", bytes),
    "_Metadatum": _patching.USER_AGENT,
}
# grpc.aio's Metadata methods are timed on a Metadata holding the user-agent entry, each with its arguments,
# called as their class calls them. What else of these a method calls is fastcommon's on both sides (it is in
# place by then), so each saving is the method's own.
_KEY = _patching.USER_AGENT[0]
METADATA_CALIBRATION: dict[str, Callable[[Any, Any], tuple[Any, ...]]] = {
    "Metadata.__init__": lambda cls, m: (m,),
    "Metadata.add": lambda cls, m: (m, "x-key", "value"),
    "Metadata.from_tuple": lambda cls, m: (cls, None),
    "Metadata._create": lambda cls, m: (cls, m),
    "Metadata.__iter__": lambda cls, m: (m,),  # its items taken too: tuple(iter(m))
    "Metadata.__len__": lambda cls, m: (m,),
    "Metadata.__getitem__": lambda cls, m: (m, _KEY),
    "Metadata.get": lambda cls, m: (m, _KEY),
    "Metadata.get_all": lambda cls, m: (m, _KEY),
    "Metadata.__contains__": lambda cls, m: (m, _KEY),
    "Metadata.__setitem__": lambda cls, m: (m, _KEY, "value"),
    "_BaseMultiCallable._init_metadata": lambda cls, m: (m, None),
}


def _taken(function: Callable[..., Any]) -> Callable[..., Any]:
    return lambda m: tuple(function(m))


def _fastcommon_version() -> str:
    from fastcommon import __version__  # the package's, once it is imported: this module is imported by it too

    return __version__


def _calls_so_far(counter: itertools.count[int]) -> int:
    return int(repr(counter)[len("count(") : -1])


class Report:
    """Calls through what fastcommon put into grpc, counted; printed when the process exits."""

    def __init__(self) -> None:
        self.counters: dict[str, itertools.count[int]] = {}  # pure Python's; the compiled module counts itself
        self.names: tuple[str, ...] = ()
        self.timed: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}  # (grpc's own, ours)
        self.baseline: dict[str, int] = {}
        self.printed = False
        self.to_stderr = False  # where it reports, as the environment said when it started
        self.path: str | None = None

    def counting(self, owns: dict[str, Any]) -> dict[str, Any]:
        """What replaces grpc's own, counted: made to count by the compiled module, or wrapped in pure Python."""
        if hasattr(chosen, "calls"):
            made = _patching.replacements(owns, counted=True)
        else:
            made = {name: self.counted(name, function) for name, function in _patching.replacements(owns).items()}
        self.timed = {name: (own, made[name]) for name, own in owns.items()}  # timed at exit, after the counts
        return made

    def counted(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` behind a counter, in pure Python (which counts only the four functions)."""
        counter = self.counters[name] = itertools.count()

        def counted(*args: Any) -> Any:
            next(counter)  # one atomic C call
            return function(*args)

        return counted

    def start(self) -> None:
        self.to_stderr = os.environ.get(REPORT_VARIABLE, "") not in ("", "0")
        self.path = os.environ.get(REPORT_FILE_VARIABLE) or None
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

    def on_sigterm(self, signum: int, frame: Any) -> None:
        """Report, then end by SIGTERM as the default disposition would have: the parent sees the same status."""
        self.print(ended_by="SIGTERM")
        if signal.getsignal(signal.SIGTERM) == self.on_sigterm:  # not when a handler of the program's called this
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def calls_so_far(self) -> dict[str, int]:
        if self.counters:
            return {name: _calls_so_far(counter) for name, counter in self.counters.items()}
        counted = chosen.calls()
        return {name: int(counted[_patching.counter(name)]) for name in self.names}

    def forked(self) -> None:
        """In a fork child: count from here on, and print this process's own block."""
        self.baseline = self.calls_so_far()
        self.printed = False
        self.print_from_multiprocessing_children()

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
            sys.stderr.write(self.text(summary))
            sys.stderr.flush()
        if self.path:
            append_line(self.path, json.dumps(summary, separators=(",", ":")) + "\n")

    def summary(self, calls: dict[str, int], cpu_seconds: float, ended_by: str = "exit") -> dict[str, Any]:
        """What the report says, for machines (the JSON line) and for people (text() reads it)."""
        saving_ns = {name: self.per_call_saving_ns(name) for name, count in calls.items() if count}
        return {
            "pid": os.getpid(),
            "fastcommon": _fastcommon_version(),
            "implementation": IMPLEMENTATION,
            "python": platform.python_version(),
            "grpcio": _patching.grpcio_version(),
            "patched": list(calls),
            "left_to_grpc": [name for name in _patching.NAMES if name not in calls],
            "calls": calls,
            "saved_ns_per_call": {name: round(ns, 1) for name, ns in saving_ns.items()},
            "saved_seconds": sum(calls[name] * ns for name, ns in saving_ns.items()) / 1e9,
            "cpu_seconds": cpu_seconds,
            "ended_by": ended_by,
        }

    @staticmethod
    def text(summary: dict[str, Any]) -> str:
        """The block printed on stderr: what is patched, the calls, the time they saved and its share of the CPU."""
        calls, cpu_seconds, saved = summary["calls"], summary["cpu_seconds"], summary["saved_seconds"]
        share = f"{saved / cpu_seconds:.3%}" if cpu_seconds > 0 else "n/a"
        left = summary["left_to_grpc"]
        patched = ", ".join(calls) + (f"; left to grpc: {', '.join(left)}" if left else "")
        # A method nobody called is listed among the uncalled; the four functions and _Metadatum always count.
        uncalled = [name for name, count in calls.items() if not count and "." in name]
        counted = ", ".join(f"{name} {count:,}" for name, count in calls.items() if name not in uncalled)
        counted += f"; not called: {', '.join(uncalled)}" if uncalled else ""
        per_call = ", ".join(f"{name} {ns:.0f} ns" for name, ns in summary["saved_ns_per_call"].items()) or "-"
        ended = " (ended by SIGTERM)" if summary["ended_by"] == "SIGTERM" else ""
        return (
            f"fastcommon --report, process {summary['pid']} ({summary['implementation']}, grpcio {summary['grpcio']})"
            f"{ended}: grpc patched ({patched})\n"
            f"  calls: {counted}\n"
            f"  saved: {saved * 1e3:.3f} ms = {share} of this process's {cpu_seconds:.3f} s CPU"
            f" (per call, timed at exit: {per_call})\n"
        )

    def per_call_saving_ns(self, name: str) -> float:
        """grpc's time per call minus fastcommon's, on CALIBRATION_CALLS; best of 5 runs of 2,000."""
        grpcs, ours = self.timed[name]
        if name not in METADATA_CALIBRATION:
            args = CALIBRATION_CALLS[name]
            return ns_per_call(grpcs, args, 2000) - ns_per_call(ours, args, 2000)
        arguments = METADATA_CALIBRATION[name]
        cls = _patching.grpc_modules()["grpc.aio._metadata"].Metadata
        grpcs, ours = (getattr(raw, "__func__", raw) for raw in (grpcs, ours))  # as the class calls them
        if name == "Metadata.__iter__":
            grpcs, ours = _taken(grpcs), _taken(ours)
        saving = ns_per_call(grpcs, arguments(cls, cls(_patching.USER_AGENT)), 2000)
        return saving - ns_per_call(ours, arguments(cls, cls(_patching.USER_AGENT)), 2000)


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


def ns_per_call(function: Callable[..., Any], args: tuple[Any, ...], number: int, repeat: int = 5) -> float:
    """The best time of ``function(*args)`` in ns, called as grpc calls it, in timeit's own loop (no lambda between)."""
    names = ("a", "b", "c")[: len(args)]
    timer = timeit.Timer(f"f({', '.join(names)})", globals={"f": function, **dict(zip(names, args, strict=False))})
    return min(timer.repeat(number=number, repeat=repeat)) / number * 1e9


_REPORT = Report()
