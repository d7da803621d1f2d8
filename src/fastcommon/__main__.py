"""``python -m fastcommon``: what is installed; ``python -m fastcommon run``: a program with grpc patched.

    python -m fastcommon
    python -m fastcommon run app.py [args...]
    python -m fastcommon run -m package.module [args...]
"""

import argparse
import builtins
import importlib.machinery
import importlib.util
import os
import platform
import runpy
import signal
import sys
import types

import fastcommon
from fastcommon import _patching


def show_info() -> None:
    """Print the version, the active implementation and why, the Python and grpcio versions, and the gate's verdicts."""
    print(f"fastcommon {fastcommon.__version__}")
    print(f"implementation: {fastcommon.IMPLEMENTATION}")
    if fastcommon.PURE_PYTHON_REASON:
        print(f"pure Python because: {fastcommon.PURE_PYTHON_REASON}")
    print(f"python: {platform.python_implementation()} {platform.python_version()} ({sys.executable})")
    try:
        grpc_common = _patching.grpc_common()
    except ImportError:
        print("grpcio: not installed")
        return
    print(f"grpcio: {_patching.grpcio_version()}")
    verdicts = _patching.assess(grpc_common)
    for name in _patching.NAMES:
        if fastcommon.is_patched(name):
            print(f"grpc._common.{name}: fastcommon's, patched in this process")
            continue
        verdict = "patch() replaces it" if verdicts[name] is None else f"patch() leaves grpc's own: {verdicts[name]}"
        print(f"grpc._common.{name}: {verdict}; fingerprint {_patching.fingerprint(getattr(grpc_common, name))}")


def _run_script(path):
    """Run a file as plain ``python path`` does: a new ``__main__`` module, ``__file__`` absolute."""
    filename = os.path.abspath(path)
    with open(filename, "rb") as file:
        code = compile(file.read(), filename, "exec")
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=filename, __cached__=None, __builtins__=builtins,
                           __loader__=importlib.machinery.SourceFileLoader("__main__", filename))
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def _exit_as_python_would(exc):
    """Report an uncaught exception of the program the way the interpreter does, then exit."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:  # frames plain python would not show
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)
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
        sys.argv = [args.module, *args.args]  # runpy replaces argv[0] with the module's file, as python -m does
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
            # What `python -m` itself calls, so that argv and tracebacks are the same; it runs the
            # module in sys.modules["__main__"], which must be a fresh module, not this one.
            sys.modules["__main__"] = types.ModuleType("__main__")
            runpy._run_module_as_main(args.module)
        else:
            _run_script(script)
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
