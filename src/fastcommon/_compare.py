"""`python -m fastcommon compare`: a program run stock, then patched, and the verdict: whether anything differs. Both
runs load this module as a pytest plugin: a program's first pytest appends each test's outcome, as pytest counts it,
to the file that OUTCOMES_VARIABLE names; a pytest it starts, or a pytest-xdist worker, records nothing."""

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
from typing import Any, NamedTuple

from . import _launcher, _report

OUTCOMES_VARIABLE = "FASTCOMMON_COMPARE_OUTCOMES"
GIVEN_PLUGINS_VARIABLE = "FASTCOMMON_COMPARE_PYTEST_PLUGINS"  # PYTEST_PLUGINS as the program was given it, if set
SHOWN = 50  # differing tests listed; the rest are counted
COUNTED = ("failed", "passed", "skipped", "xfailed", "xpassed", "error")  # pytest's order in its summary line
NOT_RUN = "not run"
NO_LINE = "(no such line: the output ends before it)"
EVERY = 10  # seconds between progress lines
STOP_GRACE = 5  # seconds a stopped run has to end after SIGTERM, before SIGKILL


class Run(NamedTuple):
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
        progress("interrupted; the run was stopped, and nothing compared")
        shutil.rmtree(folder, ignore_errors=True)
        return 130
    lines, differs = verdict(stock, patched, stdout, folder)
    if report_file:
        lines += report_lines(report_file)
    if not differs:
        shutil.rmtree(folder, ignore_errors=True)
    print(*lines, sep="\n", flush=True)
    return 1 if differs else 0


def run(name: str, program: list[str], environ: dict[str, str], folder: str) -> Run:
    """Run the program once in ``environ``, its output in ``folder``; say on stderr as it starts, goes and ends."""
    outcomes = os.path.join(folder, f"{name}.outcomes.jsonl")
    given = environ.get("PYTEST_PLUGINS")  # pytest_configure gives it back, for the processes pytest starts
    environ = {**environ, "PYTEST_PLUGINS": with_this_plugin(given), OUTCOMES_VARIABLE: outcomes}
    if given is not None:
        environ[GIVEN_PLUGINS_VARIABLE] = given
    command = _launcher.command(program)
    progress(f"{name} run: {shlex.join(['python', *program])}")
    started = time.monotonic()
    stdout = os.path.join(folder, f"{name}.stdout")
    with open(stdout, "wb") as out, open(os.path.join(folder, f"{name}.stderr"), "wb") as err:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=environ)
    status = wait(process, name, started, outcomes)
    progress(f"{name} run ended after {time.monotonic() - started:.1f} s, exit status {status_text(status)}")
    return Run(status, stdout, read_outcomes(outcomes))


def wait(process: subprocess.Popen[bytes], name: str, started: float, outcomes: str) -> int:
    """The run's exit status, and meanwhile a line every EVERY seconds; on Ctrl-C, the run ended (SIGTERM, SIGKILL)."""
    try:
        while True:
            try:
                return process.wait(timeout=EVERY)
            except subprocess.TimeoutExpired:
                recorded = read_outcomes(outcomes)
                tests = "" if recorded is None else f", {len(recorded):,} tests recorded"
                progress(f"{name} run: {time.monotonic() - started:.0f} s{tests}")
    except KeyboardInterrupt:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise


def progress(text: str) -> None:
    """A line of compare's on stderr, shortened."""
    print(shortened(f"fastcommon compare: {text}"), file=sys.stderr, flush=True)


def read_outcomes(path: str) -> dict[str, str] | None:
    """Each node id's outcome, its reports' categories joined with + (passed+error); None where pytest recorded none."""
    try:
        with open(path, "rb") as file:
            lines = file.read().split(b"\n")[:-1]  # a line still being written has no end yet
    except FileNotFoundError:
        return None
    categories: dict[str, list[str]] = {}
    for record in map(json.loads, lines):
        categories.setdefault(record["nodeid"], []).append(record["outcome"])
    return {nodeid: "+".join(each) for nodeid, each in categories.items()}


def verdict(stock: Run, patched: Run, with_stdout: bool, folder: str) -> tuple[list[str], bool]:
    """The lines that say whether the runs differ (and where their output is kept), and whether they do."""
    differences: list[str] = []
    details: list[str] = []
    before, after = stock.outcomes or {}, patched.outcomes or {}  # no tests where no pytest ran
    tests = sorted(before.keys() | after.keys())
    differing = [nodeid for nodeid in tests if before.get(nodeid, NOT_RUN) != after.get(nodeid, NOT_RUN)]
    if differing:
        differences.append(f"{len(differing):,} of {len(tests):,} tests")
        details.append("tests, stock -> patched:")
        for nodeid in differing[:SHOWN]:
            change = f"{before.get(nodeid, NOT_RUN)} -> {after.get(nodeid, NOT_RUN)}"
            line = f"  {nodeid}: {change}"
            details.append(line if len(line) <= _report.WIDTH else f"  {nodeid}:\n    {change}")
        details += [f"  ... and {len(differing) - SHOWN:,} more"] if len(differing) > SHOWN else []
    if stock.status != patched.status:
        differences.append("the exit status")
        details.append(f"exit status: stock {status_text(stock.status)}, patched {status_text(patched.status)}")
    if with_stdout and (difference := first_difference(stock.stdout, patched.stdout)):
        differences.append("the standard output")
        details += difference
    if differences:
        listed = ", ".join(differences[:-1]) + " and " * (len(differences) > 1) + differences[-1]
        kept = shortened(f"stdout and stderr of both runs are kept in {folder}")
        return [f"fastcommon compare: stock and patched differ in {listed}", *details, kept], True
    status = f"exit status {status_text(stock.status)}" + (", the same standard output" if with_stdout else "")
    if stock.outcomes is not None or patched.outcomes is not None:  # pytest ran, and every test is the same
        return [f"fastcommon compare: the same, test by test, stock and patched: {counts(before)} ({status})"], False
    return [f"fastcommon compare: the same, stock and patched: {status}"], False


def counts(outcomes: dict[str, str]) -> str:
    """The outcomes counted as pytest's summary line counts them: 961 passed, 3 skipped, 1 xfailed."""
    counted = Counter(category for outcome in outcomes.values() for category in outcome.split("+"))
    order = sorted(counted, key=lambda c: COUNTED.index(c) if c in COUNTED else len(COUNTED))
    return ", ".join(f"{counted[c]:,} {c}{'s' if c == 'error' and counted[c] > 1 else ''}" for c in order)


def status_text(status: int) -> str:
    """1; or, for a run that a signal ended, -11 (SIGSEGV)."""
    names = {-signum: signum.name for signum in signal.Signals}
    return f"{status} ({names[status]})" if status in names else str(status)


def first_difference(stock: str, patched: str) -> list[str]:
    """Where two files of output first differ, and that line of each, shortened; nothing where they are the same."""
    with open(stock, "rb") as before, open(patched, "rb") as after:
        outputs = before.read(), after.read()
    if outputs[0] == outputs[1]:
        return []
    pairs = itertools.zip_longest(*(output.splitlines(keepends=True) for output in outputs))
    number, pair = next((n, p) for n, p in enumerate(pairs, 1) if p[0] != p[1])
    shown = [NO_LINE if line is None else line.rstrip(b"\r\n").decode(errors="backslashreplace") for line in pair]
    if shown[0] == shown[1]:  # they differ only where it does not show: the line's end, say
        shown = [repr(line) for line in pair]
    lines = [shortened(f"  {run + ':':<8} {line}") for run, line in zip(("stock", "patched"), shown, strict=True)]
    return [f"standard output, from line {number:,}:", *lines]


def shortened(text: str) -> str:
    """``text`` cut to the width of fastcommon's lines, as _report's (a node id alone is never cut)."""
    return text if len(text) <= _report.WIDTH else text[: _report.WIDTH - 3] + "..."


def report_lines(path: str) -> list[str]:
    """What each patched process saved, as run --report prints it."""
    summaries = []
    if os.path.exists(path):  # the first process that reports makes it
        with open(path) as file:
            summaries = [json.loads(line) for line in file]
    if not summaries:
        return ["fastcommon compare --report: no patched process reported (none imported grpc)"]
    blocks = "".join(_report.text(summary) for summary in summaries)
    return [f"fastcommon compare --report: what each patched process saved ({len(summaries):,})", blocks.rstrip("\n")]


def with_this_plugin(given: str | None) -> str:
    """PYTEST_PLUGINS with this module added to what the program was given (pytest refuses an empty entry)."""
    return f"{given},{__name__}" if given else __name__


def pytest_configure(config: Any) -> None:  # pytest's hook: this module is its plugin in both runs
    path = os.environ.pop(OUTCOMES_VARIABLE, None)  # a pytest that this one starts records nothing
    given = os.environ.pop(GIVEN_PLUGINS_VARIABLE, None)
    if path and os.environ.get("PYTEST_PLUGINS") == with_this_plugin(given):  # not set since by the program
        os.environ.pop("PYTEST_PLUGINS")  # the processes this pytest starts see it as the program was given it
        if given is not None:
            os.environ["PYTEST_PLUGINS"] = given
    if path and not hasattr(config, "workerinput"):  # the controller of xdist's workers sees every report
        config.pluginmanager.register(Recorder(config, path), "fastcommon-compare-recorder")


class Recorder:
    """In pytest: each counted outcome appended to the file, a line in one write (processes never interleave lines)."""

    def __init__(self, config: Any, path: str) -> None:
        self.config = config
        self.descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def pytest_runtest_logreport(self, report: Any) -> None:
        category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if category:  # "" for what pytest does not count: a setup or teardown that passed
            self.record(report.nodeid, category)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed or report.skipped:  # skipped: a whole module (pytest.importorskip), as pytest counts it
            self.record(report.nodeid, "error" if report.failed else "skipped")

    def pytest_unconfigure(self) -> None:
        os.close(self.descriptor)

    def record(self, nodeid: str, outcome: str) -> None:
        os.write(self.descriptor, (json.dumps({"nodeid": nodeid, "outcome": outcome}) + "\n").encode())
