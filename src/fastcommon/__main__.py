"""python -m fastcommon: what fastcommon does with the installed grpcio; check it; run a program with grpc patched;
compare a program's runs, stock and patched."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from fastcommon import __version__, _compare, _launcher, _status

DESCRIPTION = """\
fastcommon compiles the conversions and metadata objects grpcio builds in Python on every RPC, and
puts them into grpcio wherever grpcio's own behave identically. Without a command: what is
installed, and what patch() does with the installed grpcio.

examples:
  python -m fastcommon
  python -m fastcommon check
  python -m fastcommon run server.py --port 50051
  python -m fastcommon run -m mycompany.server --port 50051
  python -m fastcommon compare -m pytest -q tests
"""

RUN_DESCRIPTION = """\
Run a script or a module as plain python runs it (the same argv, __main__, exit status and
signals), with grpc patched in it and in every Python process it starts that inherits its
environment (multiprocessing workers, subprocess children), each when it imports grpc.

fastcommon's options and python's come first (-X, -W, -O, -u, -B and python's other flags,
as python takes them; not -E, -I or -S, under which python would skip fastcommon's start-up).
Everything after the script, or after -m MODULE, is the program's, passed on verbatim: -h,
--report, -m and -- included.

With --report, each patched process prints what it saved as it ends (on exit, or on SIGTERM where the
program leaves SIGTERM at its default), in three lines; with --report-full, every name with its calls,
a line each; with --report-file PATH it also appends one JSON line to PATH.

examples:
  python -m fastcommon run server.py --port 50051
  python -m fastcommon run -m mycompany.server --port 50051
  python -m fastcommon run --report -m pytest -q tests
  python -m fastcommon run --report-file reports.jsonl -m mycompany.server
  python -m fastcommon run -X dev -W error server.py
"""

COMPARE_DESCRIPTION = """\
Run a program twice, each time in a fresh process with stdin from /dev/null, and say whether
anything differs: first stock, as plain python runs it (even where compare itself runs under run),
then patched, as run runs it. The program and python's options before it are taken as run takes
them (not -, stdin, which cannot run twice). Each run's stdout and stderr go to files in a
temporary folder, kept when anything differs; progress goes to stderr, the verdict to stdout.

Where the program runs pytest, a plugin of fastcommon's records each test's outcome as pytest counts
it (passed, failed, skipped, xfailed, xpassed, error), and the two runs are compared test by test,
by node id. For any program the exit statuses are compared, and with --stdout the standard output.

Exit status: 0 when the two runs are the same, 1 when anything differs, 2 for a usage error.

examples:
  python -m fastcommon compare -m pytest -q tests
  python -m fastcommon compare --report -m pytest -x tests/test_client.py
  python -m fastcommon compare --stdout client.py --port 50051
  python -m fastcommon compare -X dev -m mycompany.selftest
"""


RUN_USAGE = (
    "python -m fastcommon run [-h] [--report] [--report-full] [--report-file PATH] [python options] "
    "(file | -m MODULE | -c CODE | -) [args ...]"
)
COMPARE_USAGE = (
    "python -m fastcommon compare [-h] [--report] [--stdout] [python options] (file | -m MODULE | -c CODE) [args ...]"
)


def program_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str, usage: str, description: str
) -> argparse.ArgumentParser:
    """A subcommand that runs a program (run, compare): its parser, its help in the style of run's."""
    formatter = argparse.RawDescriptionHelpFormatter
    return commands.add_parser(name, help=summary, description=description, formatter_class=formatter, usage=usage)


def program_arguments(parser: argparse.ArgumentParser, file_help: str) -> None:
    """The program's arguments, as run and compare take them: shown in the help; split_program parses them."""
    parser.add_argument("-m", metavar="MODULE", dest="module_help", help="run a module, as python -m does")
    parser.add_argument("-c", metavar="CODE", dest="code_help", help="run code, as python -c does")
    parser.add_argument("args", nargs="*", help=file_help)


def parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser, and its run and compare subcommands'."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m fastcommon", description=DESCRIPTION, formatter_class=formatter)
    commands = parser.add_subparsers(dest="command", title="commands", metavar="{check,run,compare}")
    parser.add_argument("--version", action="version", version=f"fastcommon {__version__}")
    check = "exit 0 when patch() gives grpc all that fastcommon offers here; else 1, and why"
    commands.add_parser("check", help=check, description=f"{check[0].upper()}{check[1:]}: for CI, before deploying.")
    run_parser = program_command(
        commands, "run", "run a program with grpc patched in each of its processes", RUN_USAGE, RUN_DESCRIPTION
    )
    run_parser.add_argument(
        "--report", action="store_true", help="each patched process prints its calls and the time saved as it ends"
    )
    run_parser.add_argument(
        "--report-full",
        action="store_true",
        help="each prints every name with its calls and the time saved per call, a line each (implies --report)",
    )
    run_parser.add_argument(
        "--report-file",
        metavar="PATH",
        help="also append each process's report to PATH as a JSON line (implies --report)",
    )
    program_arguments(run_parser, "the file or - (stdin), unless -m or -c; the program's arguments")
    summary = "run a program stock, then patched (test by test under pytest), and say what differs"
    compare_parser = program_command(commands, "compare", summary, COMPARE_USAGE, COMPARE_DESCRIPTION)
    compare_parser.add_argument(
        "--report", action="store_true", help="then print what each process of the patched run saved, as run --report"
    )
    compare_parser.add_argument("--stdout", action="store_true", help="compare the standard output too, byte for byte")
    program_arguments(compare_parser, "the file, unless -m or -c; the program's arguments")
    return parser, run_parser, compare_parser


def parse_program(
    parser: argparse.ArgumentParser, argv: list[str], stdin: bool
) -> tuple[argparse.Namespace, list[str]]:
    """A subcommand's options, parsed, and the program with python's options before it; a usage error is the parser's.
    ``stdin``: whether the program may be read from stdin (-)."""
    options, python_options, program = _launcher.split_program(argv)
    parsed = parser.parse_args(options)
    if _launcher.skips_startup(python_options):
        parser.error("cannot adopt a program under -E, -I or -S: Python would ignore PYTHONPATH or sitecustomize")
    if python_options[-1:] in ([option] for option in _launcher.PYTHON_VALUE_OPTIONS) or program in (["-m"], ["-c"]):
        parser.error(f"argument {(python_options[-1:] or program)[0]}: expected one argument")
    if not program:
        parser.error(f"give a program to run: a file, -m MODULE, -c CODE{' or -' if stdin else ''}")
    if program[0] == "-" and not stdin:
        parser.error("cannot compare a program read from stdin (-): it runs twice")
    return parsed, [*python_options, *program]


def run(run_parser: argparse.ArgumentParser, argv: list[str]) -> NoReturn:
    """Run a program under plain python, with every Python process of it adopted."""
    parsed, program = parse_program(run_parser, argv, stdin=True)
    if parsed.report_file is not None and (problem := _launcher.report_file_problem(parsed.report_file)):
        run_parser.error(f"argument --report-file: {parsed.report_file}: {problem}")
    # python runs it, or says why not, as it would without fastcommon
    _launcher.launch(program, report=parsed.report, report_file=parsed.report_file, full=parsed.report_full)


def compare(compare_parser: argparse.ArgumentParser, argv: list[str]) -> NoReturn:
    """Run a program stock, then patched, and say whether anything differs."""
    parsed, program = parse_program(compare_parser, argv, stdin=False)
    sys.exit(_compare.compare(program, report=parsed.report, stdout=parsed.stdout))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser, run_parser, compare_parser = parsers()
    try:
        if argv[:1] == ["run"]:
            run(run_parser, argv[1:])
        if argv[:1] == ["compare"]:
            compare(compare_parser, argv[1:])
        if unknown := [arg for arg in argv if arg.startswith("-") and arg not in ("-h", "--help")][:1]:
            parser.error(f"unrecognized arguments: {unknown[0]}")  # before argparse takes what follows for a command
        args = parser.parse_args(argv)
        status, lines = _status.check() if args.command == "check" else (0, _status.status())
        print("\n".join(lines))
        sys.stdout.flush()
        sys.exit(status)
    except BrokenPipeError:  # `python -m fastcommon | head -1`: the reader has gone; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
