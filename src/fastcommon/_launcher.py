"""`python -m fastcommon run`: the program's environment and exec, how python takes a program, the bootstrap's call."""

import errno
import os
import signal
import subprocess
import sys
from typing import NoReturn

from . import _ending, _environment
from ._implementation import warn
from ._patching import patch

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
            _ending.start(to_stderr, full, path)
        else:
            patch()
    except Exception as exc:  # a failure here must not take the program down with it
        warn(f"fastcommon could not patch grpc: {exc!r}", stacklevel=2)
