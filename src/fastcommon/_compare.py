"""`python -m fastcommon compare`: a program run stock and patched, each in a process group of its own, with what it
recorded (_recording.py); the tests that differ run again, alone, to tell flaky from different; and the verdict, a
value whose text is written in one place (Verdict.lines), read by the command line, --json and the tests."""

import contextlib
import dataclasses
import difflib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from . import _environment, _launcher, _processes, _recording, _report

# compare's exit status for each verdict (docs/adoption.md); stopped by a signal: 128 + its number, as a shell says
STATUSES = {"same": 0, "different": 1, "not started": 3, "refused": 4, "no tests": 5, "not patched": 6,
            "incomplete": 7, "stock patched": 8, "timed out": 124}  # fmt: skip
REFUSING = {"pytest": 4, "unittest": 2}  # each runner's exit status when it refuses its arguments
COUNTED = ("failed", "passed", "skipped", "xfailed", "xpassed", "error")  # pytest's order in its summary line
PYTHON_REFUSED = r"  .+: (can't open file |No module named |Error while finding module specification )"
PYTEST_TIMING = r" in [\d.]+s( \(\d+:\d\d:\d\d\))?"  # left out of --stdout's comparison where pytest ran
NOT_RUN = "not run"
OUTPUTS = {"stdout": "standard output", "stderr": "standard error"}  # --stdout, --stderr: what they compare
SHOWN, LINES_SHOWN, TAIL = 50, 8, 5  # differing tests listed, output lines shown, stderr lines quoted
EVERY = 10  # seconds between progress lines


class Stopped(Exception):
    """compare stopped by a signal (its name), or a run by --timeout ("timed out"), in ``run`` (once known)."""

    deferring = False  # while a run's process starts: a signal waits in ``deferred`` until it has
    deferred: ClassVar[list[str]] = []

    def __init__(self, kind: str) -> None:
        self.kind, self.run = kind, ""
        self.running: str | None = None


@dataclasses.dataclass
class Run:
    """One run of the program: how it ended, and what its test runner recorded (runner None: none did)."""

    name: str
    prefix: str  # its files: .stdout, .stderr, .records (.only, .cache: _recording.py)
    status: int = 0
    seconds: float = 0.0
    runner: str | None = None
    collected: list[str] | None = None
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    reruns: Counter[str] = dataclasses.field(default_factory=Counter)
    running: str | None = None  # the test that had started, and not ended, when the process ended
    patched: int | None = None  # the most names a process of it patched; None: no process patched grpc
    patched_at_end: bool = False  # fastcommon had grpc patched when the test runner ended (the program's patch())

    def read(self) -> "Run":
        """Read what the run recorded so far (a line still being written has no end yet)."""
        path = Path(self.prefix + ".records")
        records = [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]] if path.exists() else []
        last = {key: value for record in records for key, value in record.items()}  # each fact as last recorded
        self.runner, self.collected = last.get("runner"), last.get("collected")
        self.patched = max((record["patched"] for record in records if "patched" in record), default=None)
        self.patched_at_end = any(record.get("patched_at_end") for record in records)
        self.running, self.reruns = None, Counter()
        categories: dict[str, list[str]] = {}
        for record in records:
            self.running = record.get("started", self.running)
            if "test" in record:
                self.running = None if record["test"] == self.running else self.running
                if record["outcome"] == "rerun":  # pytest-rerunfailures: what counts is how the test ended
                    self.reruns[record["test"]] += 1
                else:
                    categories.setdefault(record["test"], []).append(record["outcome"])
        self.outcomes = {test: "+".join(each) for test, each in categories.items()}
        self.running = None if "finished" in last else self.running
        if self.running:
            self.outcomes[self.running] = f"process ended: exit status {status_text(self.status)}"
        return self

    def tail(self) -> list[str]:
        """The last lines of its stderr."""
        return Path(self.prefix + ".stderr").read_bytes().decode(errors="backslashreplace").strip().splitlines()[-TAIL:]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What compare found: its kind (a key of STATUSES, or the signal that stopped it), a line, the details."""

    kind: str
    headline: str
    details: tuple[str, ...] = ()
    kept: str | None = None  # the folder that keeps every run's output
    tests: dict[str, Any] = dataclasses.field(default_factory=dict)  # each test's outcomes, for --json

    @property
    def status(self) -> int:
        return STATUSES[self.kind] if self.kind in STATUSES else 128 + signal.Signals[self.kind]

    def lines(self) -> list[str]:
        kept = [shortened(f"the output of every run is kept in {self.kept}")] if self.kept else []
        return [shortened(f"fastcommon compare: {self.headline}"), *self.details, *kept]


def compare(program: list[str], options: Any) -> int:
    """Run ``program`` stock and patched, as ``options`` say; print the verdict; return compare's exit status."""
    for stream in (sys.stdout, sys.stderr):  # what a console's cp1252 cannot encode, escaped (\\u03bb), not raised
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    folder = tempfile.mkdtemp(prefix="fastcommon-compare-")
    runs: list[Run] = []
    handlers = {signum: signal.signal(signum, stopped) for signum in _processes.STOPPING}
    try:
        verdict = judge(program, options, folder, runs)
    except Stopped as stop:
        running = f", in {stop.running}" if stop.running else ""
        if stop.kind == "timed out":
            took = f"the {stop.run} took over {options.timeout:g} s (--timeout){running}, and was stopped"
            verdict = Verdict(stop.kind, f"nothing compared: {took}", tuple(runs[-1].tail()), folder)
        else:
            during = f" during the {stop.run}{running}" if stop.run else ""
            verdict = Verdict(stop.kind, f"stopped by {stop.kind}{during}; nothing compared")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    lines = verdict.lines() + (report_lines(os.path.join(folder, "report.jsonl")) if options.report else [])
    if options.json:
        ran = [{"name": run.name, "status": run.status, "seconds": round(run.seconds, 3)} for run in runs]
        data = {"verdict": verdict.kind, "status": verdict.status, "lines": lines, "runs": ran, "tests": verdict.tests}
        Path(options.json).write_text(json.dumps(data, indent=1), encoding="utf-8")
    if not verdict.kept:
        shutil.rmtree(folder, ignore_errors=True)
    print(*lines, sep="\n", flush=True)
    return verdict.status


def stopped(signum: int, frame: Any) -> None:
    if not Stopped.deferring:
        raise Stopped(signal.Signals(signum).name)
    Stopped.deferred.append(signal.Signals(signum).name)


def judge(program: list[str], options: Any, folder: str, runs: list[Run]) -> Verdict:
    """Run the program stock and patched (``options.patched_first``: patched first), the differing tests again."""
    order = (True, False) if options.patched_first else (False, True)

    def go(patched: bool, again: int = 0, only: list[str] | None = None) -> Run:
        name = ("patched" if patched else "stock") + (f" rerun {again}" if again else " run")
        report = os.path.join(folder, "report.jsonl") if options.report and patched and not again else None
        runs.append(Run(name, os.path.join(folder, name.replace(" ", "-"))))
        return run(runs[-1], program, options, report, only)

    first = go(order[0])
    if verdict := nothing_compared([first], folder):
        return verdict
    second = go(order[1])
    stock, patched = (second, first) if options.patched_first else (first, second)
    if verdict := nothing_compared([first, second], folder):  # the second run last, whichever it is
        return verdict
    tests = sorted(stock.outcomes.keys() | patched.outcomes.keys())
    outcomes = {test: ([stock.outcomes.get(test, NOT_RUN)], [patched.outcomes.get(test, NOT_RUN)]) for test in tests}
    differing = [test for test, (before, after) in outcomes.items() if before != after]
    for again in range(1, options.reruns + 1 if differing else 1):  # the differing tests alone, each way in turn
        for each in order:
            rerun = go(each, again, differing)
            for test in differing:  # where it ran, or was collected in a run that did not end early
                if test in rerun.outcomes or (test in (rerun.collected or ()) and not rerun.running):
                    outcomes[test][each].append(rerun.outcomes.get(test, NOT_RUN))  # each: 0 stock, 1 patched
    return verdict_of(stock, patched, outcomes, differing, options, folder)


def nothing_compared(runs: list[Run], folder: str) -> Verdict | None:
    """The verdict where these runs (in the order they ran) leave nothing to compare: the program did not start, its
    test runner refused its arguments or ran no test, or no process of the patched run patched grpc; else None."""
    last = runs[-1]
    said = f"{last.name}, exit status {status_text(last.status)}"
    tail = tuple(f"  {line}" for line in last.tail())
    # python's own refusal, in a line: no such file, no such module
    if not last.runner and last.status in (1, 2) and len(tail) == 1 and re.match(PYTHON_REFUSED, tail[0]):
        return Verdict("not started", f"nothing compared: the program could not start ({said})", tail, folder)
    if last.runner and last.status == REFUSING[last.runner] and not last.outcomes:
        return Verdict("refused", f"nothing compared: {last.runner} refused its arguments ({said})", tail, folder)
    if len(runs) == 2 and all(run.runner and not run.outcomes for run in runs):
        statuses = ", ".join(f"{run.name} {status_text(run.status)}" for run in runs)
        return Verdict("no tests", f"nothing compared: no test ran (exit status: {statuses})", tail, folder)
    stock = next((run for run in runs if run.name == "stock run"), None)
    if stock and stock.patched_at_end:  # the program's own fastcommon.patch(), left in place: it never ran stock
        what = "grpc was patched when the stock run's tests ended: the program calls fastcommon.patch() itself"
        return Verdict("stock patched", f"nothing compared: {what} ({said})", tail, folder)
    patched = next((run for run in runs if run.name == "patched run"), None)
    if patched and not patched.patched:
        imported = "imported grpc, but fastcommon patched nothing (see python -m fastcommon check)"
        what = imported if patched.patched == 0 else "imported grpc, so fastcommon patched nothing"
        return Verdict("not patched", f"nothing compared: no process of the patched run {what} ({said})", tail, folder)
    return None


def verdict_of(stock: Run, patched: Run, outcomes: dict[str, tuple[list[str], list[str]]], differing: list[str],
               options: Any, folder: str) -> Verdict:  # fmt: skip
    """The verdict on two runs that both ran: what differs, what is flaky, what ended early, or the same."""
    flaky = [test for test in differing if len(set(outcomes[test][0])) > 1]  # stock alone disagrees with itself
    different = [test for test in differing if test not in flaky]
    details: list[str] = []
    if different:
        again = f" (then alone, {plural(options.reruns, 'time')} each way)" if options.reruns else ""
        details.append(f"tests, stock -> patched{again}:")
        for test in different[:SHOWN]:
            (before, *_), after = outcomes[test]
            times = sum(outcome != before for outcome in after)
            each = "" if len(after) == 1 else ", every time" if times == len(after) else (
                f", in {times} of {len(after)} patched runs; every stock run: {before}")  # fmt: skip
            details += test_lines(test, f"{before} -> {after[0]}{each}")
        details += [f"  ... and {len(different) - SHOWN:,} more"] if len(different) > SHOWN else []
    if flaky:
        details.append("flaky: their outcome changes between stock runs too (not a difference):")
        for test in flaky[:SHOWN]:
            details += test_lines(test, f"stock {', '.join(outcomes[test][0])}; patched {', '.join(outcomes[test][1])}")
    differences = [f"{len(different):,} of {len(outcomes):,} tests"] if different else []
    if stock.status != patched.status:
        differences += ["the exit status"] if different or not differing else []  # else the flaky tests say why
        details.append(f"exit status: stock {status_text(stock.status)}, patched {status_text(patched.status)}")
    ignored = [*options.ignore, *([PYTEST_TIMING] if stock.runner == "pytest" else [])]
    for output, name in OUTPUTS.items():
        if getattr(options, output) and (shown := output_difference(output, stock, patched, ignored)):
            differences.append(f"the {name}")
            details += shown
    ended = [run for run in (stock, patched) if run.running]  # early, during a test
    for run in ended:
        never = len(run.collected or ()) - len(run.outcomes)
        never_ran = f"; {plural(never, 'test')} after it never ran" if never > 0 else ""
        details.append(f"the {run.name} ended during {run.running}, exit status {status_text(run.status)}{never_ran}")
    if reran := [f"{run.name} {plural(sum(run.reruns.values()), 'rerun')}" for run in (stock, patched) if run.reruns]:
        details.append(f"reran by the program (each test's last outcome is compared): {', '.join(reran)}")
    tests = {test: {"stock": before, "patched": after} for test, (before, after) in outcomes.items()}
    if differences:
        listed = ", ".join(differences[:-1]) + " and " * (len(differences) > 1) + differences[-1]
        return Verdict("different", f"stock and patched differ in {listed}", tuple(details), folder, tests)
    said = f"exit status {status_text(stock.status)}"
    said += "".join(f", the same {name}" for output, name in OUTPUTS.items() if getattr(options, output))
    if ended:
        headline = f"the same as far as both ran, but both ended early ({said})"
        return Verdict("incomplete", headline, tuple(details), folder, tests)
    if stock.runner is None:
        return Verdict("same", f"the same, stock and patched: {said}", tuple(details), tests=tests)
    but = f", but for {plural(len(flaky), 'flaky test')}" if flaky else ""
    headline = f"the same, test by test, stock and patched{but}: {counts(stock.outcomes)} ({said})"
    return Verdict("same", headline, tuple(details), tests=tests)


def test_lines(test: str, text: str) -> list[str]:
    """A test's line in a verdict; two where it is long: the test's id whole on the first."""
    return [f"  {test}: {text}"] if len(test) + len(text) <= _report.WIDTH - 4 else [f"  {test}:", f"    {text}"]


def run(run: Run, program: list[str], options: Any, report_file: str | None, only: list[str] | None) -> Run:
    """Run the program once, in a process group of its own, its output in files; say on stderr as it goes."""
    patched = run.name.startswith("patched")
    environ = _launcher.environment(False, report_file) if patched else _launcher.stock_environment()
    given = environ.get("PYTEST_PLUGINS")  # its pytest gives it back, for the processes it starts
    environ |= {"PYTEST_PLUGINS": _recording.plugins_with_this(given), _environment.COMPARE_RUN: run.prefix}
    environ |= {_environment.COMPARE_PYTEST_PLUGINS: given} if given is not None else {}
    environ |= {_environment.COMPARE_PATCHED: run.prefix + ".records"} if patched else {}
    if only is not None:
        Path(run.prefix + ".only").write_text("".join(f"{test}\n" for test in only), encoding="utf-8")
    _, pythons, module = _launcher.split_program(program)
    recorded = ["-m", _recording.__name__, *module[2:]] if module[:2] == ["-m", "unittest"] else module
    alone = f" (only the {len(only):,} tests that differ)" if only is not None else ""
    progress(f"{run.name}: {_processes.QUOTED(['python', *program])}{alone}")
    started = time.monotonic()
    Stopped.deferring = True  # a signal now ends the process once it has started
    try:
        with open(run.prefix + ".stdout", "wb") as out, open(run.prefix + ".stderr", "wb") as err:
            process = subprocess.Popen(_launcher.command([*pythons, *recorded]), stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=err, env=environ, **_processes.IN_A_GROUP)  # fmt: skip
    finally:
        Stopped.deferring = False
    try:
        if Stopped.deferred:
            raise Stopped(Stopped.deferred.pop())
        while (status := process.poll()) is None:
            wait = EVERY if options.timeout is None else min(EVERY, started + options.timeout - time.monotonic())
            try:
                process.wait(timeout=max(wait, 0))
            except subprocess.TimeoutExpired:
                if options.timeout is not None and time.monotonic() >= started + options.timeout:
                    raise Stopped("timed out") from None
                progress(f"{run.name}: {time.monotonic() - started:.0f} s, {len(run.read().outcomes):,} tests")
    except BaseException as failure:  # stopped, or compare itself failed: the run must not outlive it
        if isinstance(failure, Stopped):
            failure.run, failure.running = run.name, run.read().running
        _processes.end(process, interrupt=True)
        raise
    _processes.end(process, interrupt=False)  # whatever the program left running in its group
    run.status, run.seconds = status, time.monotonic() - started
    progress(f"{run.name} ended after {run.seconds:.1f} s, exit status {status_text(status)}")
    return run.read()


def progress(text: str) -> None:
    """A line of compare's on stderr, shortened; none where stderr has gone (a closed pipe): the runs go on."""
    try:
        print(shortened(f"fastcommon compare: {text}"), file=sys.stderr, flush=True)
    except OSError:  # what its buffer holds then goes nowhere, not into an error as Python exits (status 120)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())


def counts(outcomes: dict[str, str]) -> str:
    """The outcomes counted as pytest's summary line counts them: 961 passed, 3 skipped, 1 xfailed; unittest's too."""
    counted = Counter(category for outcome in outcomes.values() for category in outcome.split("+"))
    order = sorted(counted, key=lambda c: COUNTED.index(c) if c in COUNTED else len(COUNTED))
    return ", ".join(f"{counted[c]:,} {c}{'s' if c == 'error' and counted[c] > 1 else ''}" for c in order)


def plural(count: int, word: str) -> str:
    """3 tests, 1 test."""
    return f"{count:,} {word}{'s' * (count != 1)}"


def status_text(status: int) -> str:
    """1; or, for a run that a signal ended, -11 (SIGSEGV)."""
    names = {-signum: signum.name for signum in signal.Signals}
    return f"{status} ({names[status]})" if status in names else str(status)


def output_difference(output: str, stock: Run, patched: Run, ignored: list[str]) -> list[str]:
    """The lines in which two runs' ``output`` (stdout, stderr) differ, ``ignored`` left out, shown so that the
    difference shows; nothing where they are the same."""
    lines = []
    for each in (stock, patched):
        text = Path(f"{each.prefix}.{output}").read_bytes().decode("utf-8", "surrogateescape")
        for pattern in ignored:
            text = re.sub(pattern, "", text)
        lines.append(text.splitlines(keepends=True))
    if lines[0] == lines[1]:
        return []
    shown = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, lines[0], lines[1], autojunk=False).get_opcodes():
        for name, numbers, side in (("stock", range(i1, i2), lines[0]), ("patched", range(j1, j2), lines[1])):
            shown += [f"  {name + ':':<8} line {n + 1:,}: {visible(side[n])}" for n in numbers if tag != "equal"]
    more = [f"  ... and {len(shown) - LINES_SHOWN:,} more lines"] if len(shown) > LINES_SHOWN else []
    return [f"{output}, the lines that differ:", *shown[:LINES_SHOWN], *more]


def visible(line: str) -> str:
    """A line as it reads; quoted and escaped where it would look like another: blanks at its end, control
    characters, bytes that are not UTF-8, no end of line."""
    text = line[:-1] if line.endswith("\n") else line
    plain = line.endswith("\n") and text.isprintable() and text == text.strip() and text != ""
    return text if plain else repr(text.encode("utf-8", "surrogateescape"))[1:] + ("" if text != line else " (no end)")


def shortened(text: str) -> str:
    """``text`` cut to the width of fastcommon's lines, as _report's (a node id alone is never cut)."""
    return text if len(text) <= _report.WIDTH else text[: _report.WIDTH - 3] + "..."


def report_lines(path: str) -> list[str]:
    """What each patched process saved, as run --report prints it."""
    file = Path(path)  # the first process that reports makes it
    summaries = [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []
    if not summaries:
        return ["fastcommon compare --report: no patched process reported (none imported grpc)"]
    blocks = "".join(_report.text(summary) for summary in summaries)
    return [f"fastcommon compare --report: what each patched process saved ({len(summaries):,})", blocks.rstrip("\n")]
