"""``python -m fastcommon``: what is installed; ``python -m fastcommon run``: a program with grpc patched.

    python -m fastcommon
    python -m fastcommon run app.py [args...]
    python -m fastcommon run -m package.module [args...]
"""

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import runpy
import signal
import sys

import fastcommon


def _grpcio_version():
    try:
        return importlib.metadata.version("grpcio")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def show_info():
    """Print the version, the active implementation and why, and the Python and grpcio versions."""
    print(f"fastcommon {fastcommon.__version__}")
    print(f"implementation: {fastcommon.IMPLEMENTATION}")
    if fastcommon.PURE_PYTHON_REASON:
        print(f"pure Python because: {fastcommon.PURE_PYTHON_REASON}")
    print(f"python: {platform.python_implementation()} {platform.python_version()} ({sys.executable})")
    print(f"grpcio: {_grpcio_version()}")


def _outside_the_program(frame):
    """True for this module's frames and runpy's, which plain ``python`` would not show."""
    filename = frame.f_code.co_filename
    return filename == __file__ or filename == runpy.__file__ or filename == "<frozen runpy>"


def _exit_as_python_would(exc):
    """Report an uncaught exception of the program the way the interpreter does, then exit."""
    tb = exc.__traceback__
    while tb is not None and _outside_the_program(tb.tb_frame):
        tb = tb.tb_next
    sys.excepthook(type(exc), exc, tb)
    if isinstance(exc, KeyboardInterrupt):
        # Like CPython: die by SIGINT so that the parent sees the signal, not a status.
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(1)


def run(parser, args):
    """Run a script or module as ``__main__`` with grpc patched before its first line."""
    if args.module:
        try:
            found = importlib.util.find_spec(args.module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            parser.error(f"no module named {args.module!r}")
        sys.argv = [args.module, *args.args]  # runpy replaces argv[0] with the module's file
    else:
        if not args.args:
            parser.error("give a script or -m module to run")
        script = args.args[0]
        if not os.path.isfile(script):
            parser.error(f"can't open file {script!r}: no such file")
        sys.argv = list(args.args)
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    try:
        fastcommon.patch()
    except ImportError as exc:
        sys.exit(f"python -m fastcommon run: {exc}")
    try:
        if args.module:
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:
        _exit_as_python_would(exc)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fastcommon", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")
    run_parser = commands.add_parser("run", help="run a program with grpc patched by fastcommon")
    run_parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    run_parser.add_argument("args", nargs=argparse.REMAINDER, help="the script (unless -m) and its arguments")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(run_parser, args)
    else:
        show_info()


if __name__ == "__main__":
    main()
