"""python -m fastcommon: the command line: the status, check, run (a program, patched) and compare (stock, patched)."""

import errno
import os
import re
import sys
from argparse import SUPPRESS, ArgumentParser, Namespace, RawDescriptionHelpFormatter

from fastcommon import __version__, _compare, _launcher, _status

DESCRIPTION = """\
fastcommon puts compiled twins of what grpcio builds in Python on every RPC into grpcio, wherever
grpcio's own behave identically. Without a command: what it does with the installed grpcio.

examples:
  python -m fastcommon check
  python -m fastcommon run -m mycompany.server --port 50051
  python -m fastcommon compare -m pytest -q tests
"""

RUN_DESCRIPTION = """\
Run a program as plain python runs it (argv, __main__, exit status, signals), with grpc patched in
it and in every Python process it starts with its environment (multiprocessing, subprocess), each
when it imports grpc. fastcommon's options and python's come first (not -E, -I or -S: python would
skip fastcommon's start-up); everything after the program is its own, verbatim, -h and -- included.
With --report, each process reports as it ends: on exit, or on a SIGTERM left at its default.

examples:
  python -m fastcommon run -m mycompany.server --port 50051
  python -m fastcommon run --report-file reports.jsonl -m pytest -q tests
  python -m fastcommon run -X dev -W error server.py
"""

COMPARE_DESCRIPTION = """\
Run a program twice, stock (as plain python runs it, even under run), then patched (as run runs
it), each in a process group of its own with an empty stdin, and say whether anything differs: the
exit status; under pytest or python -m unittest, each test's outcome, test by test; with --stdout
or --stderr, that output. Where a test differs, the whole program runs again, stock and patched
(--reruns), so that a flaky test is told apart. Progress goes to stderr, the verdict to stdout.

Exit status: 0 the same; 1 something differs; 2 a usage error; nothing compared: 3 the program could
not start, 4 its pytest or unittest refused its arguments, 5 it ran no test, 6 no process of the
patched run imported grpc (or patched it), 7 a test did not end in both runs (a crash, -x), 8 a
process found or left grpc otherwise than its run is named (its own fastcommon.patch(), unpatch());
124 a run took longer than --timeout; 128 + the signal's number where one stopped it: 130 SIGINT,
143 SIGTERM, 129 SIGHUP, 149 SIGBREAK (Windows); each run's processes are stopped too.

examples:
  python -m fastcommon compare -m pytest -q tests
  python -m fastcommon compare --json verdict.json -m unittest discover -s tests
  python -m fastcommon compare --stdout --ignore 'pid [0-9]+' client.py --port 50051
"""

RERUNS = 3  # compare --reruns: each differing test's runs again, each way
PROGRAM = "[python options] (file | -m MODULE | -c CODE{}) [args ...]"  # as python takes it; run also takes -
RUN_USAGE = "python -m fastcommon run [-h] [--report] [--report-full] [--report-file PATH] " + PROGRAM.format(" | -")
COMPARE_USAGE = "python -m fastcommon compare [-h] [options] " + PROGRAM.format("")


def parsers() -> tuple[ArgumentParser, ArgumentParser, ArgumentParser]:
    """The command's parser, and its run and compare subcommands' (their options; the program is split_program's)."""
    raw = RawDescriptionHelpFormatter
    parser = ArgumentParser(prog="python -m fastcommon", description=DESCRIPTION, formatter_class=raw)
    commands = parser.add_subparsers(dest="command", title="commands", metavar="{check,run,compare}")
    parser.add_argument("--version", action="version", version=f"fastcommon {__version__}")
    check = "exit 0 when patch() gives grpc all that fastcommon offers here; else 1, and why"
    commands.add_parser("check", help=check, description=f"{check[0].upper()}{check[1:]}: for CI, before deploying.")
    summary = "run a program with grpc patched in each of its processes"
    run = commands.add_parser("run", help=summary, usage=RUN_USAGE, description=RUN_DESCRIPTION, formatter_class=raw)
    run.add_argument("--report", action="store_true", help="each patched process prints what it saved as it ends")
    run.add_argument("--report-full", action="store_true", help="in full: every name, a line each (implies --report)")
    run.add_argument("--report-file", metavar="PATH", help="append each report to PATH, a JSON line (implies --report)")
    summary = "run a program stock, then patched (test by test under pytest, unittest), and say what differs"
    compare = commands.add_parser("compare", help=summary, usage=COMPARE_USAGE, description=COMPARE_DESCRIPTION,
                                  formatter_class=raw)  # fmt: skip
    compare.add_argument("--report", action="store_true", help="then print what each patched process saved")
    compare.add_argument("--stdout", action="store_true", help="compare the standard output too, line by line")
    compare.add_argument("--stderr", action="store_true", help="compare the standard error too, line by line")
    compare.add_argument("--ignore", metavar="REGEX", action="append", default=[], help="leave what it matches out "
                         "of --stdout's, --stderr's comparison (pytest's timing is)")  # fmt: skip
    compare.add_argument("--reruns", metavar="N", type=int, default=RERUNS, help="where a test differs, run the "
                         f"program N times more each way ({RERUNS}; 0: never)")  # fmt: skip
    compare.add_argument("--timeout", metavar="SECONDS", type=float,
                         help="stop a run that takes longer: SIGINT, SIGTERM, then SIGKILL; on Windows Ctrl-Break, "
                         "then its tree killed (exit status 124)")  # fmt: skip
    compare.add_argument("--patched-first", action="store_true", help="run it patched first, then stock")
    compare.add_argument("--json", metavar="FILE", help="also write the verdict, the runs and every test's outcomes")
    compare.add_argument("rest", nargs="*", help=SUPPRESS)  # the value split_program takes for --report-file: unnamed
    return parser, run, compare


def parse_program(parser: ArgumentParser, argv: list[str], stdin: bool, file: str) -> tuple[Namespace, list[str]]:
    """A subcommand's options, its ``file`` checked; the program, python's options first (``stdin``: may it be -)."""
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
    if (path := getattr(parsed, file)) is not None and (problem := _launcher.report_file_problem(path)):
        parser.error(f"argument --{file.replace('_', '-')}: {path}: {problem}")
    return parsed, [*python_options, *program]


def main(argv: list[str] | None = None) -> None:
    """Say what fastcommon does here, check it, or run or compare a program, as ``argv`` asks."""
    argv = sys.argv[1:] if argv is None else argv
    parser, run_parser, compare_parser = parsers()
    try:
        if argv[:1] == ["run"]:
            parsed, program = parse_program(run_parser, argv[1:], stdin=True, file="report_file")
            _launcher.launch(program, report=parsed.report, report_file=parsed.report_file, full=parsed.report_full)
        if argv[:1] == ["compare"]:
            parsed, program = parse_program(compare_parser, argv[1:], stdin=False, file="json")
            if parsed.reruns < 0 or (parsed.timeout is not None and parsed.timeout <= 0):
                compare_parser.error("--reruns takes a whole number, 0 or more; --timeout, seconds above 0")
            try:
                parsed.ignore = [re.compile(pattern) for pattern in parsed.ignore]
            except re.error as exc:
                compare_parser.error(f"argument --ignore: not a regular expression: {exc}")
            sys.exit(_compare.compare(program, parsed))
        if unknown := [arg for arg in argv if arg.startswith("-") and arg not in ("-h", "--help", "--version")][:1]:
            parser.error(f"unrecognized arguments: {unknown[0]}")  # before argparse takes what follows for a command
        status, lines = _status.check() if parser.parse_args(argv).command == "check" else (0, _status.status())
        print(*lines, sep="\n", flush=True)
        sys.exit(status)
    except OSError as error:  # `python -m fastcommon | head -1`: the reader has gone (Windows: EINVAL); end quietly
        if not isinstance(error, BrokenPipeError) and error.errno != errno.EINVAL:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
