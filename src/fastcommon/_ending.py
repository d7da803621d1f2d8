"""When each process of `run --report` reports (what: _report.py): at exit; on a default SIGTERM (docker stop, systemd),
which ends it past atexit, then ending by it; again in a fork child; and in multiprocessing's, which end past atexit."""

import atexit
import os
import signal
import sys
import threading
import types
from typing import Any

from . import _implementation, _patching
from ._report import REPORT, Report


def start(to_stderr: bool, full: bool, path: str | None) -> None:
    """Patch grpc, counting calls; report as it ends: on stderr (``full``: a line per name), at ``path``, or both."""
    if not _patching.install(REPORT.counting):
        return
    REPORT.to_stderr, REPORT.full, REPORT.path = to_stderr, full, path
    REPORT.count_from_here()
    atexit.register(REPORT.print)
    if hasattr(os, "register_at_fork"):  # not on Windows
        os.register_at_fork(after_in_child=forked)
    print_from_multiprocessing_children(REPORT)
    # SIGTERM only at its default (a program's own handler reports at exit), and only the main thread sets one
    may_set = sys.platform != "win32" and threading.current_thread() is threading.main_thread()
    if may_set and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_sigterm)
        if (relay := sigterm_relay()) is not None:  # in front of CPython's handler, just set
            relay.relay_sigterm(_pthread_kill_address())
        elif os.name == "posix" and _implementation.IMPLEMENTATION == "cython":
            _implementation.warn("fastcommon: run --report's SIGTERM relay (fastcommon._sigterm) did not load; a "
                                 "process whose main thread waits with no timeout may not end when another thread "
                                 "takes SIGTERM (docs/adoption.md)", stacklevel=2)  # fmt: skip


def on_sigterm(signum: int, frame: Any) -> None:
    """Report, then end by SIGTERM as its default would have; a second SIGTERM, or a failed report, ends it at once."""
    reports_here = signal.getsignal(signal.SIGTERM) == on_sigterm  # not where a handler of the program's calls this
    if reports_here:  # the default first: a Python handler could lose a second SIGTERM (docs/adoption.md)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        REPORT.print(ended_by="SIGTERM")
    finally:
        if reports_here:
            os.kill(os.getpid(), signal.SIGTERM)


def forked() -> None:
    """In a fork child: count from here on, and print this process's own block."""
    REPORT.count_from_here()
    print_from_multiprocessing_children(REPORT)
    if (relay := sigterm_relay()) is not None and signal.getsignal(signal.SIGTERM) == on_sigterm:
        relay.relay_here()  # to this process's main thread: the one that forked


def print_from_multiprocessing_children(report: Report) -> None:
    # its fork/forkserver children end in os._exit, past atexit, but run its finalizers (cleared, then after-fork hooks)
    if (util := sys.modules.get("multiprocessing.util")) is not None:
        util.Finalize(None, report.print, exitpriority=0)
        util.register_after_fork(report, print_from_multiprocessing_children)


def sigterm_relay() -> types.ModuleType | None:
    """The compiled SIGTERM relay (_sigterm.pyx), or None: not built (Windows, a pure-Python install), or broken."""
    try:
        from . import _sigterm
    except Exception:  # a broken extension must never break the program it reports on
        return None
    return _sigterm


def _pthread_kill_address() -> int:
    """libc's pthread_kill, found as the process runs (why: _sigterm.pyx); 0 where it is not found."""
    try:
        import ctypes

        return ctypes.cast(ctypes.CDLL(None).pthread_kill, ctypes.c_void_p).value or 0
    except (ImportError, OSError, AttributeError):
        return 0
