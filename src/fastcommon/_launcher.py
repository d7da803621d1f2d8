"""`python -m fastcommon run`: the program's environment and exec, how python takes a program, the bootstrap's call
once grpc is imported; under --report, when each process reports (what: _report.py): at exit; on a default SIGTERM
(docker stop, systemd), which ends it past atexit, then ending by it; in a fork child; in multiprocessing's children."""

import atexit
import errno
import os
import signal
import subprocess
import sys
import threading
import types
from typing import Any, NoReturn

from . import _environment, _implementation, _patching
from ._report import REPORT, Report

REPLACE_PROCESS = sys.platform != "win32"  # Windows has no exec that keeps the process: a child (tests set this too)
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")

PROGRAM_OPTIONS = ("-m", "-c")  # python's options that take the program as their argument
VALUE_OPTIONS = ("--report-file", "--ignore", "--reruns", "--timeout", "--json")  # run's, compare's: "--x v"
PYTHON_VALUE_OPTIONS = ("-X", "-W")  # python's options that take a value, attached or next
PYTHON_FLAGS = "bBdiOPqRsuv"  # python's flags, alone or together (-OO, -uB)
SKIPS_STARTUP = "EIS"  # python's flags under which it would ignore PYTHONPATH, or not run sitecustomize
REPORTS = (_environment.REPORT, _environment.REPORT_FILE)  # what run sets in the environment, besides PYTHONPATH


def split_program(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """fastcommon's own options, python's, and the program as python takes it: [file, args...], [-m, module, ...]."""
    fastcommons: list[str] = []
    pythons: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return fastcommons, pythons, argv[i + 1 :]
        if arg in PROGRAM_OPTIONS or arg == "-" or not arg.startswith("-"):
            return fastcommons, pythons, argv[i:]
        if arg[:2] in PROGRAM_OPTIONS:  # -mpkg.mod, -ccode, as python accepts them
            return fastcommons, pythons, [arg[:2], arg[2:], *argv[i + 1 :]]
        taken = 2 if arg in VALUE_OPTIONS + PYTHON_VALUE_OPTIONS else 1  # the option, and its value if apart
        is_python = arg[:2] in PYTHON_VALUE_OPTIONS or set(arg[1:]) <= set(PYTHON_FLAGS + SKIPS_STARTUP)
        (pythons if is_python else fastcommons).extend(argv[i : i + taken])
        i += taken
    return fastcommons, pythons, []


def skips_startup(python_options: list[str]) -> bool:
    """Whether python, so started (or this one), would ignore PYTHONPATH or not run sitecustomize: -E, -I, -S."""
    values = {i + 1 for i, option in enumerate(python_options) if option in PYTHON_VALUE_OPTIONS}  # -X dev, -W error
    flags = "".join(o for i, o in enumerate(python_options) if i not in values and o[:2] not in PYTHON_VALUE_OPTIONS)
    return bool(sys.flags.ignore_environment or sys.flags.no_site or set(SKIPS_STARTUP) & set(flags))


def environment(report: bool, report_file: str | None = None, full: bool = False) -> dict[str, str]:
    """The environment a program runs in under `python -m fastcommon run`: patched, even in a run of compare's stock."""
    environ = {name: value for name, value in os.environ.items() if name not in (*REPORTS, _environment.COMPARE_STOCK)}
    bootstrap = os.path.normcase(BOOTSTRAP_DIR)
    kept = [entry for entry in environ.pop("PYTHONPATH", "").split(os.pathsep) if os.path.normcase(entry) != bootstrap]
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [BOOTSTRAP_DIR, *kept]))
    if report or report_file or full:
        environ[_environment.REPORT] = _environment.REPORT_FULL if full else "1"
    if report_file:
        environ[_environment.REPORT_FILE] = os.path.abspath(report_file)  # the program and its children may chdir
    return environ


def report_file_problem(path: str) -> str | None:
    """Why reports cannot be appended to ``path``, or None; nothing is created (the first report creates it)."""
    if os.path.isdir(path):
        return "is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(path) and not os.path.isdir(folder):
        return os.strerror(errno.ENOENT)
    writable = os.access(path, os.W_OK) if os.path.exists(path) else os.access(folder, os.W_OK | os.X_OK)
    return None if writable else os.strerror(errno.EACCES)


def command(program: list[str]) -> list[str]:
    """``python [this interpreter's options, as multiprocessing passes them on] <program>``."""
    return [sys.executable, *subprocess._args_from_interpreter_flags(), *program]  # type: ignore[attr-defined]


def launch(program: list[str], report: bool, report_file: str | None = None, full: bool = False) -> NoReturn:
    """Run ``python [interpreter options] <program>`` in place of this process, adopted."""
    python = command(program)
    environ = environment(report, report_file, full)
    if REPLACE_PROCESS:
        os.execve(sys.executable, python, environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the whole console: the child's, this one waits
    status = subprocess.call(python, env=environ)
    sys.exit(status - 2**32 if status >= 2**31 else status)  # an NTSTATUS (0xC0000005), as a C int holds it


def report_asked() -> tuple[bool, bool, str | None]:
    """What this process was started to report: whether on stderr, whether in full, and the file for its JSON line."""
    full = os.environ.get(_environment.REPORT) == _environment.REPORT_FULL
    return _environment.flag(_environment.REPORT), full, os.environ.get(_environment.REPORT_FILE) or None


def grpc_imported() -> None:
    """Called by the bootstrap once this process has imported grpc: patch it, counting its calls under --report."""
    try:
        to_stderr, full, path = report_asked()
        if to_stderr or path:
            patch_and_report(to_stderr, full, path)
        else:
            _patching.patch()
    except Exception as exc:  # a failure here must not take the program down with it
        _implementation.warn(f"fastcommon could not patch grpc: {exc!r}", stacklevel=2)


def patch_and_report(to_stderr: bool, full: bool, path: str | None) -> None:
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
