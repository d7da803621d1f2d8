"""`python -m fastcommon compare`: a program run stock, then patched, and whether anything differs.

Each run is a fresh process, one after the other, with stdin from /dev/null and its stdout and stderr in files of a
temporary folder: first stock (without what `run` adds to the environment, so that a compare started under `run`
still runs stock), then patched, as `run` runs it. Both runs name _compare_plugin in PYTEST_PLUGINS: where the
program is pytest, each test's outcome is recorded, and the runs are compared test by test. Their exit statuses are
always compared, and with --stdout their standard output. The folder is kept when anything differs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

from . import _launcher
from ._compare_plugin import OUTCOMES_VARIABLE
from ._report import text as report_text

PLUGIN = "fastcommon._compare_plugin"
WIDTH = 160  # no line is longer, but for a node id that is longer itself
SHOWN = 50  # differing tests listed; the rest are counted
COUNTED = ("failed", "passed", "skipped", "xfailed", "xpassed", "error")  # pytest's order in its summary line
NOT_RUN = "not run"
TERMINAL_EVERY, PLAIN_EVERY = 1, 30  # seconds between progress updates: a line rewritten on a terminal; a new line
STOP_GRACE = 5  # seconds a stopped run has to end after SIGTERM, before SIGKILL


@dataclasses.dataclass
class Run:
    """One run of the program: its exit status, the file of its stdout, its tests' outcomes (None: no pytest ran)."""

    status: int
    stdout: str
    outcomes: dict[str, str] | None


def compare(program: list[str], report: bool, stdout: bool) -> int:
    """Run ``program`` stock, then patched, and print the verdict: 0 the same, 1 something differs, 130 Ctrl-C."""
    folder = tempfile.mkdtemp(prefix="fastcommon-compare-")
    report_file = os.path.join(folder, "report.jsonl") if report else None
    try:
        stock = run("stock", program, _launcher.stock_environment(), folder)
        patched = run("patched", program, _launcher.environment(report=False, report_file=report_file), folder)
    except KeyboardInterrupt:
        progress("fastcommon compare: interrupted; the run was stopped, and nothing compared")
        shutil.rmtree(folder, ignore_errors=True)
        return 130
    lines, differs = verdict(stock, patched, stdout)
    if differs:
        lines.append(shortened(f"stdout and stderr of both runs are kept in {folder}", WIDTH))
    if report_file:
        lines += report_lines(report_file)
    if not differs:
        shutil.rmtree(folder, ignore_errors=True)
    print("\n".join(lines))
    sys.stdout.flush()
    return 1 if differs else 0


def run(name: str, program: list[str], environ: dict[str, str], folder: str) -> Run:
    """Run the program once in ``environ``, its output in ``folder``; say on stderr as it starts, goes and ends."""
    outcomes = os.path.join(folder, f"{name}.outcomes.jsonl")
    environ = {
        **environ,
        "PYTEST_PLUGINS": ",".join(filter(None, [environ.get("PYTEST_PLUGINS"), PLUGIN])),
        OUTCOMES_VARIABLE: outcomes,
    }
    progress(shortened(f"fastcommon compare: {name} run: {shlex.join(['python', *program])}", WIDTH))
    started = time.monotonic()
    stdout = os.path.join(folder, f"{name}.stdout")
    with open(stdout, "wb") as out, open(os.path.join(folder, f"{name}.stderr"), "wb") as err:
        process = subprocess.Popen(
            _launcher.command(program), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=environ
        )
    try:
        status = wait(process, name, started, outcomes)
    except KeyboardInterrupt:
        stop(process)
        raise
    took = time.monotonic() - started
    progress(f"fastcommon compare: {name} run ended after {took:.1f} s, exit status {status_text(status)}")
    return Run(status, stdout, read_outcomes(outcomes))


def wait(process: subprocess.Popen[bytes], name: str, started: float, outcomes: str) -> int:
    """The run's exit status, once it ends; meanwhile how long it has run, and how many tests it recorded."""
    terminal = sys.stderr.isatty()
    while True:
        try:
            return process.wait(timeout=TERMINAL_EVERY if terminal else PLAIN_EVERY)
        except subprocess.TimeoutExpired:
            recorded = read_outcomes(outcomes)
            tests = "" if recorded is None else f", {len(recorded):,} tests recorded"
            progress(f"fastcommon compare: {name} run: {time.monotonic() - started:.0f} s{tests}", end="")


def stop(process: subprocess.Popen[bytes]) -> None:
    """End the run: SIGTERM, then SIGKILL if it has not ended after a few seconds."""
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def progress(line: str, end: str = "\n") -> None:
    """A line on stderr; on a terminal, in place of the line being rewritten (end="": the next one rewrites it)."""
    terminal = sys.stderr.isatty()
    sys.stderr.write(("\r\x1b[K" if terminal else "") + line + (end if terminal else "\n"))
    sys.stderr.flush()


def read_outcomes(path: str) -> dict[str, str] | None:
    """Each node id's outcome, its reports' categories joined with + (passed+error); None where pytest recorded none."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    categories: dict[str, list[str]] = {}
    for line in data.split(b"\n")[:-1]:  # a line still being written has no end yet
        record = json.loads(line)
        categories.setdefault(record["nodeid"], []).append(record["outcome"])
    return {nodeid: "+".join(each) for nodeid, each in categories.items()}


def verdict(stock: Run, patched: Run, with_stdout: bool) -> tuple[list[str], bool]:
    """The lines that say whether the runs differ, and whether they do."""
    differences: list[str] = []
    details: list[str] = []
    counted = None  # the outcomes, counted, where pytest ran and every test is the same
    if stock.outcomes is not None or patched.outcomes is not None:
        before, after = stock.outcomes or {}, patched.outcomes or {}
        tests = sorted(before.keys() | after.keys())
        differing = [nodeid for nodeid in tests if before.get(nodeid, NOT_RUN) != after.get(nodeid, NOT_RUN)]
        if differing:
            differences.append(f"{len(differing):,} of {len(tests):,} tests")
            details.append("tests, stock -> patched:")
            details += [test_line(n, before.get(n, NOT_RUN), after.get(n, NOT_RUN)) for n in differing[:SHOWN]]
            details += [f"  ... and {len(differing) - SHOWN:,} more"] if len(differing) > SHOWN else []
        else:
            counted = counts(before)
    if stock.status != patched.status:
        differences.append("the exit status")
        details.append(f"exit status: stock {status_text(stock.status)}, patched {status_text(patched.status)}")
    if with_stdout:
        with open(stock.stdout, "rb") as before_file, open(patched.stdout, "rb") as after_file:
            difference = first_difference(before_file.read(), after_file.read())
        if difference:
            differences.append("the standard output")
            details += difference
    if differences:
        listed = ", ".join(differences[:-1]) + " and " * (len(differences) > 1) + differences[-1]
        return [f"fastcommon compare: stock and patched differ in {listed}", *details], True
    status = f"exit status {status_text(stock.status)}" + (", the same standard output" if with_stdout else "")
    if counted is not None:
        return [f"fastcommon compare: the same, test by test, stock and patched: {counted} ({status})"], False
    return [f"fastcommon compare: the same, stock and patched: {status}"], False


def test_line(nodeid: str, stock: str, patched: str) -> str:
    line = f"  {nodeid}: {stock} -> {patched}"
    return line if len(line) <= WIDTH else f"  {nodeid}:\n    {stock} -> {patched}"


def counts(outcomes: dict[str, str]) -> str:
    """The outcomes counted as pytest's summary line counts them: 961 passed, 3 skipped, 1 xfailed."""
    counted = Counter(category for outcome in outcomes.values() for category in outcome.split("+"))
    order = sorted(counted, key=lambda c: COUNTED.index(c) if c in COUNTED else len(COUNTED))
    return ", ".join(f"{counted[c]:,} {c}{'s' if c == 'error' and counted[c] > 1 else ''}" for c in order)


def status_text(status: int) -> str:
    """1; or, for a run that a signal ended, -11 (SIGSEGV)."""
    if status < 0:
        try:
            return f"{status} ({signal.Signals(-status).name})"
        except ValueError:
            pass
    return str(status)


def first_difference(stock: bytes, patched: bytes) -> list[str]:
    """Where two outputs first differ, and that line of each, shortened; nothing where they are the same."""
    if stock == patched:
        return []
    pairs = itertools.zip_longest(stock.splitlines(keepends=True), patched.splitlines(keepends=True))
    number, (before, after) = next((n, p) for n, p in enumerate(pairs, 1) if p[0] != p[1])
    shown = [shown_line(before), shown_line(after)]
    if shown[0] == shown[1]:  # they differ only where it does not show: the line's end, say
        shown = [repr(before), repr(after)]
    prefixes = ("  stock:   ", "  patched: ")
    return [f"standard output, from line {number:,}:"] + [
        prefix + shortened(line, WIDTH - len(prefix)) for prefix, line in zip(prefixes, shown, strict=True)
    ]


def shown_line(line: bytes | None) -> str:
    if line is None:
        return "(no such line: the output ends before it)"
    return line.rstrip(b"\r\n").decode(errors="backslashreplace")


def shortened(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def report_lines(path: str) -> list[str]:
    """What each patched process saved, as run --report prints it."""
    try:
        with open(path) as file:
            summaries = [json.loads(line) for line in file]
    except FileNotFoundError:
        summaries = []
    if not summaries:
        return ["fastcommon compare --report: no patched process reported (none imported grpc)"]
    blocks = "".join(report_text(summary) for summary in summaries)
    return [f"fastcommon compare --report: what each patched process saved ({len(summaries):,})", blocks.rstrip("\n")]
