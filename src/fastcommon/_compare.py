"""`python -m fastcommon compare`: a program run stock and patched, each in a process group, recorded (_recording.py);
where tests differ, again each way, to tell flaky from different; "the same" only if adoption.md's invariants hold."""

import contextlib
import dataclasses
import io
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from . import _environment, _launcher, _recording, _report

# compare's exit status for each verdict (docs/adoption.md); stopped by a signal: 128 + its number, as a shell says
STATUSES = {"same": 0, "different": 1, "not started": 3, "refused": 4, "no tests": 5, "not patched": 6,
            "incomplete": 7, "not as named": 8, "timed out": 124}  # fmt: skip
REFUSING = {"pytest": 4, "unittest": 2}  # each runner's exit status when it refuses its arguments
COUNTED = ("failed", "passed", "skipped", "xfailed", "xpassed", "error")  # pytest's order in its summary line
PYTHON_REFUSED = r"  .+: (can't open file |No module named |Error while finding module specification )"
# each runner's timing, on its own summary line, left out of --stdout's, --stderr's comparison (the rest is kept)
TIMINGS = {"pytest": r"(?m)^(?P<kept>(=+ )?((\d+ [\w ]+, )*\d+ [\w ]+|no tests ran)) in [\d.]+s"
                     r"( \(\d+:\d\d:\d\d\))?(?=( =+)?$)",
           "unittest": r"(?m)^(?P<kept>Ran \d+ tests?) in [\d.]+s$"}  # fmt: skip
NOT_RUN = "not run"
OUTPUTS = {"stdout": "standard output", "stderr": "standard error"}  # --stdout, --stderr: what they compare
SHOWN, LINES_SHOWN, TAIL = 50, 8, 5  # differing tests listed, output lines shown, stderr lines quoted
LONGEST = 110  # characters of an output line shown: its start and end, where it is longer
EVERY, WAIT = 10, 0.5  # seconds: between progress lines; a wait for a run blocks (Windows' cannot be interrupted)
SIGNALS = {-signum: signum.name for signum in signal.Signals}  # a process's status where a signal ended it
# what stops compare (each where the system has it); each also ends the run that is going on
STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK") if hasattr(signal, name))
GRACE = 5  # seconds a run's processes have after each step: SIGINT (where stopped), SIGTERM, then SIGKILL
IN_A_GROUP: dict[str, Any] = {"start_new_session": True} if hasattr(os, "killpg") else {
    "creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}  # Popen's keywords; 0: simulated  # fmt: skip
QUOTED = subprocess.list2cmdline if sys.platform == "win32" else shlex.join  # a command line, as the shell reads it
Outcomes = dict[str, dict[str, list[str]]]  # each test's outcomes "stock" and "patched": its first run's, its reruns'


class Stopped(Exception):
    """compare stopped by a signal (its name), or a run by --timeout ("timed out"), in ``run`` (once known)."""

    deferring = False  # while a run's process starts: a signal waits in ``deferred`` until it has
    deferred: ClassVar[list[str]] = []

    def __init__(self, kind: str) -> None:
        self.kind, self.run, self.running = kind, "", ""


@dataclasses.dataclass
class Run:
    """One run of the program: how it ended, and what its test runner recorded (runner None: none did)."""

    name: str
    prefix: str  # its files: .stdout, .stderr, .records (.cache: _recording.py)
    status: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # by compare: "timed out", or the signal that stopped compare
    runner: str | None = None
    tests: list[str] = dataclasses.field(default_factory=list)  # collected or started, in order
    started: list[str] = dataclasses.field(default_factory=list)
    ended: set[str] = dataclasses.field(default_factory=set)  # setup, call and teardown (or unittest's) all done
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    reruns: int = 0  # pytest-rerunfailures': a test counts as it ended
    running: list[str] = dataclasses.field(default_factory=list)  # started, not ended, when the process ended
    processes: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # grpc's state as each process saw it
    untested: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # patch(), unpatch() outside any test
    outlived: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # alive, no exit, once the run ended

    def read(self) -> "Run":
        """Read what the run recorded so far (a line still being written has no end yet)."""
        path = Path(self.prefix + ".records")
        records = [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]] if path.exists() else []
        self.runner = next((record["runner"] for record in records if "runner" in record), None)
        self.processes = [record for record in records if "pid" in record]
        self.started = [record["started"] for record in records if "started" in record]
        self.ended = {test for record in records for test in record.get("ended", ())}
        self.tests = list(dict.fromkeys([test for one in records for test in one.get("collected", ())] + self.started))
        self.reruns = sum(record.get("outcome") == "rerun" for record in records)
        self.running = [test for test in self.started if test not in self.ended]
        categories: dict[str, list[str]] = {}
        open_tests: set[str] = set()
        self.untested = []
        for record in records:  # in the order written: which test, if any, ran as grpc's state changed
            open_tests |= {record["started"]} if "started" in record else set()
            open_tests -= set(record.get("ended", ()))
            if record.get("at") in ("patch()", "unpatch()") and not open_tests:
                self.untested.append(record)
            if record.get("outcome", "rerun") != "rerun":
                categories.setdefault(record["test"], []).append(record["outcome"])
        self.outcomes = {test: "+".join(each) for test, each in categories.items()}
        self.outcomes |= {test: f"process ended: exit status {status_text(self.status)}" for test in self.running}
        return self

    def tail(self) -> tuple[str, ...]:
        """The last lines of its stderr."""
        text = Path(self.prefix + ".stderr").read_bytes().decode(errors="backslashreplace")
        return tuple(text.strip().splitlines()[-TAIL:])


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What compare found: its kind (a key of STATUSES, or the signal that stopped it), a line, the details."""

    kind: str
    headline: str
    details: tuple[str, ...] = ()
    tests: Outcomes = dataclasses.field(default_factory=dict)


def compare(program: list[str], options: Any) -> int:
    """Run ``program`` stock and patched, as ``options`` say; print the verdict; return compare's exit status."""
    for stream in (sys.stdout, sys.stderr):  # what a console's cp1252 cannot encode, escaped (\\u03bb), not raised
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    folder = tempfile.mkdtemp(prefix="fastcommon-compare-")
    runs: list[Run] = []
    seed = str(random.randrange(1, 2**32))  # 0 would turn hash randomization off; pytest-randomly's where it runs
    drawn = os.environ.get("PYTHONHASHSEED", "random") == "random"  # "random": a seed drawn in each run, as unset
    pinned = ({"PYTHONHASHSEED": seed} if drawn else {}) | {"--randomly-seed": seed}
    progress("pinned in every run, where the program has none: " + ", ".join(f"{k}={v}" for k, v in pinned.items()))
    handlers = {signum: signal.signal(signum, stopped) for signum in STOPPING}
    try:
        verdict = judge(program, options, folder, runs, pinned)
    except Stopped as stop:
        running = f", in {stop.running}" if stop.running else ""
        if stop.kind == "timed out":
            took = f"the {stop.run} took over {options.timeout:g} s (--timeout){running}, and was stopped"
            ended = tuple(f"the {run.name} ended after {run.seconds:.1f} s, exit status {status_text(run.status)}"
                          for run in runs[:-1])  # fmt: skip  # a hang in one alone is no "nothing compared"
            said = f"timed out: {took}" if ended else f"nothing compared: {took}"
            verdict = Verdict(stop.kind, said, ended + runs[-1].tail())
        else:
            during = f" during the {stop.run}{running}" if stop.run else ""
            verdict = Verdict(stop.kind, f"stopped by {stop.kind}{during}; nothing compared")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    status = STATUSES[verdict.kind] if verdict.kind in STATUSES else 128 + signal.Signals[verdict.kind]
    kept = verdict.kind in STATUSES and verdict.kind != "same"  # the runs' output: for all but the same, a signal's
    lines = [shortened(f"fastcommon compare: {verdict.headline}"), *verdict.details]
    lines += [shortened(f"the output of every run is kept in {folder}")] * kept
    lines += report_lines(os.path.join(folder, "report.jsonl")) if options.report else []
    if options.json:
        data = {"verdict": verdict.kind, "status": status, "lines": lines, "pinned": pinned, "runs": [
            {"name": run.name, "status": run.status, "signal": SIGNALS.get(run.status), "stopped": run.stopped,
             "seconds": round(run.seconds, 3)} for run in runs], "tests": verdict.tests}  # fmt: skip
        Path(options.json).write_text(json.dumps(data, indent=1), encoding="utf-8")
    if not kept:
        shutil.rmtree(folder, ignore_errors=True)
    print(*lines, sep="\n", flush=True)
    return status


def stopped(signum: int, frame: Any) -> None:
    if not Stopped.deferring:
        raise Stopped(signal.Signals(signum).name)
    Stopped.deferred.append(signal.Signals(signum).name)


def judge(program: list[str], options: Any, folder: str, runs: list[Run], pinned: dict[str, str]) -> Verdict:
    """Run the program stock and patched (``options.patched_first``: patched first), then again where tests differ."""
    order = (True, False) if options.patched_first else (False, True)

    def go(patched: bool, again: int = 0) -> Run:
        name = ("patched" if patched else "stock") + (f" rerun {again}" if again else " run")
        report = os.path.join(folder, "report.jsonl") if options.report and patched and not again else None
        runs.append(Run(name, os.path.join(folder, name.replace(" ", "-"))))
        return run(runs[-1], program, options, report, pinned["--randomly-seed"])

    first = go(order[0])
    if verdict := nothing_compared([first]):
        return verdict
    second = go(order[1])
    stock, patched = (second, first) if options.patched_first else (first, second)
    outcomes = {test: {"stock": [stock.outcomes.get(test, NOT_RUN)], "patched": [patched.outcomes.get(test, NOT_RUN)]}
                for test in sorted(stock.outcomes.keys() | patched.outcomes.keys())}  # fmt: skip
    differing = [test for test, ways in outcomes.items() if ways["stock"] != ways["patched"]]
    if verdict := nothing_compared([first, second]) or incomplete(stock, patched, outcomes, differing) \
            or not_as_named(runs):  # fmt: skip
        return verdict  # (the second run last in nothing_compared's, whichever it is)
    again_too = differing or stock.status != patched.status  # the exit status is judged as a test is
    for again in range(1, options.reruns + 1 if again_too else 1):  # each test in its context: the whole program
        for each in order:
            rerun = go(each, again)
            for test in differing:  # where it ran, or was not run in a run where every test ended
                if test in rerun.outcomes or set(rerun.tests) <= rerun.ended:
                    outcomes[test]["patched" if each else "stock"].append(rerun.outcomes.get(test, NOT_RUN))
    return not_as_named(runs) or verdict_of(stock, patched, outcomes, differing, runs, options)


def nothing_compared(runs: list[Run]) -> Verdict | None:
    """The verdict where these runs (as they ran) leave nothing to compare: no start, arguments refused, no test."""
    last = runs[-1]
    said = f"{last.name}, exit status {status_text(last.status)}"
    tail = tuple(f"  {line}" for line in last.tail())
    if not last.runner and last.status in (1, 2) and len(tail) == 1 and re.match(PYTHON_REFUSED, tail[0]):
        return Verdict("not started", f"nothing compared: the program could not start ({said})", tail)
    if last.runner and last.status == REFUSING[last.runner] and not last.outcomes:
        return Verdict("refused", f"nothing compared: {last.runner} refused its arguments ({said})", tail)
    if len(runs) == 2 and all(run.runner and not run.outcomes for run in runs):
        statuses = ", ".join(f"{run.name} {status_text(run.status)}" for run in runs)
        return Verdict("no tests", f"nothing compared: no test ran (exit status: {statuses})", tail)
    return None


def incomplete(stock: Run, patched: Run, outcomes: Outcomes, differing: list[str]) -> Verdict | None:
    """The verdict where a test that either run collected did not end in both (a crash, -x); else None."""
    tests = list(dict.fromkeys(stock.tests + patched.tests))

    def unended_in(run: Run, test: str) -> bool:  # not where the run never collected it and ended all it did
        return test not in run.ended and not (test not in run.tests and run.tests and set(run.tests) <= run.ended)

    unended = [test for test in tests if unended_in(stock, test) or unended_in(patched, test)]
    if not unended:
        return None
    details = difference_lines(outcomes, differing)
    for run in (stock, patched):
        if (never := sum(test not in run.started for test in tests)) or run.running:
            during = f" during {', '.join(run.running)}" if run.running else ""
            never_started = f"; {plural(never, 'test')} never started" if never else ""
            details.append(f"the {run.name} ended{during}, exit status {status_text(run.status)}{never_started}")
    short = [run.name for run in (stock, patched) if any(unended_in(run, test) for test in tests)]  # one alone: named
    which = "both runs" if len(short) == 2 else f"the {short[0]} alone"
    first = f"{len(unended):,} of {plural(len(tests), 'test')} did not end in both runs, the first {unended[0]}"
    return Verdict("incomplete", f"incomplete ({which}): {first}", tuple(details), outcomes)


def not_as_named(runs: list[Run]) -> Verdict | None:
    """The verdict where a process of a run found grpc at its import, or left it, otherwise than the run is named."""

    def process(kind: str, run: Run, what: str, record: dict[str, Any]) -> Verdict:  # its command line quoted
        return Verdict(kind, f"nothing compared: a process of the {run.name} {what}", (f"  {QUOTED(record['argv'])}",))

    for run in runs[:-1]:  # one that the runs after it could reach: they were not apart
        for record in run.outlived[:1]:
            what = f"that imported grpc, pid {record['pid']}, outlived it (a daemon, a server left running)"
            return process("not as named", run, what, record)
    for run in runs:
        patched, ends = run.name.startswith("patched"), {record["pid"]: record for record in run.processes}
        if not (found := [record for record in run.processes if record["at"] == "import"]) and patched:
            what = f"imported grpc, so fastcommon patched nothing ({run.name}, exit status {status_text(run.status)})"
            return Verdict("not patched", f"nothing compared: no process of the {run.name} {what}", run.tail())
        for seen, record in [*(("found", each) for each in found), *(("left", each) for each in ends.values())]:
            if record["patched"] != patched:  # at its import: the gate's doing; at its end, the program's
                kind = "not patched" if patched and seen == "found" else "not as named"
                why = " (python -m fastcommon check says why)" * (kind == "not patched")
                what = f"{seen} grpc {'stock' if patched else 'patched'}, pid {record['pid']}, at its {record['at']}"
                return process(kind, run, what + why, record)
        for record in [each for each in run.untested if each["patched"] != patched][:1]:  # a whole program, say
            what = f"{'un' * patched}patched grpc outside any test, pid {record['pid']}, at its {record['at']}"
            return process("not as named", run, what, record)
    return None


def verdict_of(stock: Run, patched: Run, outcomes: Outcomes, differing: list[str], runs: list[Run],
               options: Any) -> Verdict:  # fmt: skip
    """The verdict on two runs whose every test ended: what differs, what is flaky (one way gave both), or the same."""
    flaky = [test for test in differing if any({outcomes[test]["stock"][0], outcomes[test]["patched"][0]} <= set(way)
                                               for way in outcomes[test].values())]  # fmt: skip
    different = [test for test in differing if test not in flaky]
    again = f" (then the whole program {plural(options.reruns, 'time')} more each way)" if options.reruns else ""
    details = difference_lines(outcomes, different, again)
    if flaky:
        details.append("flaky: one way's runs gave both outcomes (not a difference):")
        for test in flaky[:SHOWN]:
            details += test_lines(test, "; ".join(f"{way} {', '.join(each)}" for way, each in outcomes[test].items()))
    differences = [f"{len(different):,} of {len(outcomes):,} tests"] if different else []
    if stock.status != patched.status:  # flaky only where one way's runs gave both, as a test
        statuses = {way: [run.status for run in runs if run.name.startswith(way)] for way in ("stock", "patched")}
        flaky_status = any({stock.status, patched.status} <= set(way) for way in statuses.values())
        differences += ["the exit status"] if different or not flaky_status else []  # else flaky, as tests are
        details.append(f"exit status: stock {status_text(stock.status)}, patched {status_text(patched.status)}")
        if flaky_status and not different:
            details[-1] += " (" + "; ".join(f"{way} {', '.join(map(status_text, each))}" for way, each in
                                            statuses.items()) + ", flaky)"  # fmt: skip
    ignored = [*options.ignore, *([TIMINGS[stock.runner]] if stock.runner in TIMINGS else [])]
    for output, name in OUTPUTS.items():
        if getattr(options, output) and (shown := output_difference(output, stock, patched, ignored)):
            differences.append(f"the {name}")
            details += shown
    if reran := [f"{run.name} {plural(run.reruns, 'rerun')}" for run in (stock, patched) if run.reruns]:
        details.append(f"reran by the program (each test's last outcome is compared): {', '.join(reran)}")
    if differences:
        listed = ", ".join(differences[:-1]) + " and " * (len(differences) > 1) + differences[-1]
        return Verdict("different", f"stock and patched differ in {listed}", tuple(details), outcomes)
    said = f"exit status {status_text(stock.status)}"
    said += "".join(f", the same {name}" for output, name in OUTPUTS.items() if getattr(options, output))
    but = f", but for {plural(len(flaky), 'flaky test')}" if flaky else ""
    headline = f"the same, test by test, stock and patched{but}: {counts(stock.outcomes)} ({said})"
    if stock.runner is None:
        but = ", but for a flaky exit status" * (stock.status != patched.status)
        headline = f"the same as a whole, stock and patched (no test seen one by one){but}: {said}"
    return Verdict("same", headline, tuple(details), outcomes)


def difference_lines(outcomes: Outcomes, different: list[str], again: str = "") -> list[str]:
    """The lines that list the tests that differ, each with its outcomes."""
    details = [f"tests, stock -> patched{again}:"] if different else []
    for test in different[:SHOWN]:
        before, after = outcomes[test]["stock"][0], outcomes[test]["patched"]
        details += test_lines(test, f"{before} -> {after[0]}{', every time' * (len(after) > 1)}")
    return details + ([f"  ... and {len(different) - SHOWN:,} more"] if len(different) > SHOWN else [])


def test_lines(test: str, text: str) -> list[str]:
    """A test's line in a verdict; two where it is long: the test's id whole on the first."""
    return [f"  {test}: {text}"] if len(test) + len(text) <= _report.WIDTH - 4 else [f"  {test}:", f"    {text}"]


def run(run: Run, program: list[str], options: Any, report_file: str | None, seed: str) -> Run:
    """Run the program once, in a process group of its own, its output in files; say on stderr as it goes."""
    environ = _launcher.environment(False, report_file)  # the bootstrap in every run: the stock's only records
    environ |= _recording.environment(run.prefix, environ.get("PYTEST_PLUGINS"))  # its pytest gives PYTEST_PLUGINS back
    environ |= {_environment.COMPARE_PROCESSES: run.prefix + ".records", _environment.COMPARE_SEED: seed}
    environ |= {"PYTHONHASHSEED": seed} if environ.get("PYTHONHASHSEED", "random") == "random" else {}
    environ |= {} if run.name.startswith("patched") else {_environment.COMPARE_STOCK: "1"}
    _, pythons, module = _launcher.split_program(program)
    recorded = ["-m", _recording.__name__, *module[2:]] if module[:2] == ["-m", "unittest"] else module
    progress(f"{run.name}: {QUOTED(['python', *program])}")
    started = time.monotonic()
    Stopped.deferring = True  # a signal now ends the process once it has started
    try:
        with open(run.prefix + ".stdout", "wb") as out, open(run.prefix + ".stderr", "wb") as err:
            process = subprocess.Popen(_launcher.command([*pythons, *recorded]), stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=err, env=environ, **IN_A_GROUP)  # fmt: skip
    finally:
        Stopped.deferring = False
    try:
        if Stopped.deferred:
            raise Stopped(Stopped.deferred.pop())
        said, deadline = started, started + (options.timeout or float("inf"))
        while process.poll() is None:
            if time.monotonic() >= deadline:
                raise Stopped("timed out")
            if time.monotonic() >= said + EVERY:
                said = time.monotonic()
                progress(f"{run.name}: {said - started:.0f} s, {len(run.read().outcomes):,} tests")
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(min(WAIT, deadline - time.monotonic()), 0))
    except BaseException as failure:  # stopped, or compare itself failed: the run must not outlive it
        if isinstance(failure, Stopped):
            failure.run, failure.running, run.stopped = run.name, ", ".join(run.read().running), failure.kind
        end(process, interrupt=True)
        raise
    finally:
        run.status, run.seconds = process.returncode, time.monotonic() - started
    end(process, interrupt=False)  # whatever the program left running in its group
    progress(f"{run.name} ended after {run.seconds:.1f} s, exit status {status_text(run.status)}")
    exited = {record["pid"] for record in run.read().processes if record["at"] == "exit"}
    run.outlived = [record for record in {r["pid"]: r for r in run.processes}.values()
                    if record["pid"] not in exited and alive(record["pid"])]  # fmt: skip
    return run


def end(process: "subprocess.Popen[bytes]", interrupt: bool) -> None:
    """End the group ``process`` leads; ``interrupt`` (compare stopped, a timeout): as Ctrl-C first, so that pytest
    tears its fixtures down; signals to compare wait meanwhile. On Windows, a run that ended leaves its orphans."""
    handlers = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOPPING}
    try:
        if hasattr(os, "killpg") and hasattr(signal, "SIGKILL"):  # POSIX, by what os has (.ci/simulated-windows)
            with contextlib.suppress(ProcessLookupError, PermissionError):  # the group gone (macOS: zombies left)
                for signum in (signal.SIGINT,) * interrupt + (signal.SIGTERM, signal.SIGKILL):
                    deadline = time.monotonic() + GRACE
                    os.killpg(process.pid, signum)
                    while time.monotonic() < deadline:
                        process.poll()  # the group's leader, reaped: it counts no more
                        os.killpg(process.pid, 0)
                        time.sleep(0.02)
        else:  # Windows: CTRL_BREAK_EVENT to the group, then taskkill /T /F
            try:
                if interrupt and process.poll() is None:  # OSError, SystemError: no console (pythonw), group gone
                    with contextlib.suppress(OSError, SystemError, subprocess.TimeoutExpired):
                        process.send_signal(getattr(signal, "CTRL_BREAK_EVENT", signal.SIGINT))  # SIGINT: simulated
                        process.wait(GRACE)
            finally:
                subprocess.run(["taskkill", "/T", "/F", "/PID", str(process.pid)], capture_output=True, check=False)
    finally:
        process.wait()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (POSIX; on Windows os.kill(pid, 0) would send Ctrl-C: never asked)."""
    if os.name != "posix":
        return False
    try:
        with contextlib.suppress(PermissionError):  # another user's
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
    return f"{status} ({SIGNALS[status]})" if status in SIGNALS else str(status)


def output_difference(output: str, stock: Run, patched: Run, ignored: list[str]) -> list[str]:
    """Where two runs' ``output`` (stdout, stderr) differ, ``ignored`` left out: past their common start and end, the
    lines one has more often, or the first where their order parts, shown as they read; [] if the same."""
    lines = []
    for each in (stock, patched):
        text = Path(f"{each.prefix}.{output}").read_bytes().decode("utf-8", "surrogateescape")
        for pattern in ignored:
            text = re.sub(pattern, lambda match: match.groupdict().get("kept") or "", text)
        lines.append(io.StringIO(text, newline="\n").readlines())  # as a file has them: a form feed or \x1c ends none
    if lines[0] == lines[1]:
        return []
    progress(f"{output}: comparing {len(lines[0]):,} lines with {len(lines[1]):,}")
    start = end = 0  # past their common start and end
    while start < min(map(len, lines)) and lines[0][start] == lines[1][start]:
        start += 1
    while end < min(map(len, lines)) - start and lines[0][-1 - end] == lines[1][-1 - end]:
        end += 1
    middles = [each[start : len(each) - end] for each in lines]
    more = [Counter(middles[0]) - Counter(middles[1]), Counter(middles[1]) - Counter(middles[0])]
    shown, reordered = [], not any(more)  # reordered: the same lines; then where they part
    for name, middle, extra in zip(("stock", "patched"), middles, more, strict=True):
        for n, line in enumerate(middle, start + 1):
            if extra[line] > 0 or (reordered and n == start + 1):
                extra[line] -= 1
                shown.append(f"  {name + ':':<8} line {n:,}: {visible(line)}")
    more_lines = [f"  ... and {len(shown) - LINES_SHOWN:,} more lines"] if len(shown) > LINES_SHOWN else []
    return [f"{output}, the lines that differ:", *shown[:LINES_SHOWN], *more_lines]


def visible(line: str) -> str:
    """A line as it reads; escaped where it would look like another (blanks at its end, controls, not UTF-8, no end)."""
    text = line[:-1] if line.endswith("\n") else line
    plain = line.endswith("\n") and text.isprintable() and text == text.strip() and text != ""
    shown = text if plain else repr(text.encode("utf-8", "surrogateescape"))[1:] + ("" if text != line else " (no end)")
    cut = f"{shown[: LONGEST // 2]}...{shown[-LONGEST // 2 :]} ({len(text):,} characters)"
    return shown if len(shown) <= LONGEST else cut


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
