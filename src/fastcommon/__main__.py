"""``python -m fastcommon``: what is installed; ``python -m fastcommon run``: a program with grpc patched.

python -m fastcommon
python -m fastcommon run [--report] app.py [args...]
python -m fastcommon run [--report] -m package.module [args...]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
from typing import NoReturn

import fastcommon
from fastcommon import _adoption, _patching


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


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> NoReturn:
    """Run a script or module under plain python, with every Python process of it adopted."""
    if sys.flags.ignore_environment or sys.flags.no_site:
        parser.error("cannot adopt a program under -E, -I or -S: Python would ignore PYTHONPATH or sitecustomize")
    if args.module:
        # Only the top-level name is looked up here: finding pkg.mod would import pkg in this process.
        if importlib.util.find_spec(args.module.partition(".")[0]) is None:
            parser.error(f"no module named {args.module!r}")
        program = ["-m", args.module, *args.args]
    else:
        if not args.args:
            parser.error("give a script or -m module to run")
        if not os.path.isfile(args.args[0]):
            parser.error(f"can't open file {args.args[0]!r}: no such file")
        program = list(args.args)
    _adoption.launch(program, report=args.report)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fastcommon", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")
    run_parser = commands.add_parser("run", help="run a program with grpc patched in each of its Python processes")
    run_parser.add_argument(
        "--report", action="store_true", help="each patched process prints its calls and the time saved when it exits"
    )
    run_parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does")
    run_parser.add_argument("args", nargs=argparse.REMAINDER, help="the script (unless -m) and its arguments")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(run_parser, args)
    else:
        show_info()


if __name__ == "__main__":
    main()
